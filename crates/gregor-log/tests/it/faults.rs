//! A full disk and a failing fsync, through the fault injector.

use crate::common::*;
use gregor_log::error::kafka_code;
use gregor_log::{FaultInjector, Log, LogConfig, LogError};

fn faulty(dir: &std::path::Path, cfg: LogConfig) -> (Log, std::sync::Arc<FaultInjector>) {
    let f = FaultInjector::new();
    let log = Log::open_with_faults(dir, cfg, NOW, f.clone()).expect("open");
    (log, f)
}

#[test]
fn full_disk_rejects_the_append_and_keeps_everything_acknowledged() {
    let dir = tempfile::tempdir().expect("tmp");
    let (log, faults) = faulty(dir.path(), LogConfig::default());
    for i in 0..5 {
        log.append_as_leader(&batch(3, &format!("ok{i}"), NOW), 0, NOW)
            .expect("append");
    }
    let size = log.size_bytes();
    let b = batch(3, "torn", NOW);
    for budget in [0, 1, 30, b.len() as u64 - 1] {
        faults.set_write_budget(Some(budget));
        let e = log.append_as_leader(&b, 0, NOW).expect_err("disk full");
        assert!(
            matches!(&e, LogError::Io { source, .. } if source.raw_os_error() == Some(28)),
            "{e}"
        );
        assert_eq!(e.kafka_error_code(), kafka_code::KAFKA_STORAGE_ERROR);
        assert_eq!(log.log_end_offset(), 15);
        assert_eq!(log.size_bytes(), size, "the partial write was cut back");
        let f = dir.path().join("00000000000000000000.log");
        assert_eq!(std::fs::metadata(f).expect("stat").len(), size);
    }
    // space comes back: the log goes on where it was
    faults.set_write_budget(None);
    let info = log
        .append_as_leader(&batch(1, "later", NOW), 0, NOW)
        .expect("append");
    assert_eq!(info.first_offset, 15);
    let want = values(&read_all(&log));
    drop(log);
    let log = open(dir.path(), LogConfig::default());
    assert_eq!(values(&read_all(&log)), want);
    assert_eq!(want.len(), 16);
    assert!(want.iter().all(|v| !v.starts_with("torn")));
}

#[test]
fn full_disk_while_rolling_a_segment() {
    let dir = tempfile::tempdir().expect("tmp");
    let (log, faults) = faulty(dir.path(), small_config());
    let mut n = 0;
    while log.segment_base_offsets().len() < 2 {
        log.append_as_leader(&batch(3, &format!("a{n}"), NOW), 0, NOW)
            .expect("append");
        n += 1;
    }
    // fill the active segment up to the next roll, then run out of space for the roll's
    // index files
    let segs = log.segment_base_offsets().len();
    let mut failed = false;
    for i in 0..20 {
        faults.set_write_budget(Some(10));
        match log.append_as_leader(&batch(3, &format!("b{i}"), NOW), 0, NOW) {
            Ok(_) => panic!("no write can succeed with 10 bytes of space"),
            Err(LogError::Io { .. }) => failed = true,
            Err(e) => panic!("unexpected {e}"),
        }
        faults.set_write_budget(None);
        log.append_as_leader(&batch(3, &format!("c{i}"), NOW), 0, NOW)
            .expect("append");
        if log.segment_base_offsets().len() > segs + 1 {
            break;
        }
    }
    assert!(failed);
    let want = values(&read_all(&log));
    assert!(want.iter().all(|v| !v.starts_with('b')));
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(values(&read_all(&log)), want);
}

#[test]
fn failed_fsync_takes_the_log_offline_until_reopened() {
    let dir = tempfile::tempdir().expect("tmp");
    let (log, faults) = faulty(dir.path(), LogConfig::default());
    for i in 0..3 {
        log.append_as_leader(&batch(2, &format!("s{i}"), NOW), 0, NOW)
            .expect("append");
    }
    faults.set_fail_sync(true);
    let e = log
        .append_as_leader(&batch(2, "unsynced", NOW), 0, NOW)
        .expect_err("fsync fails");
    assert!(matches!(e, LogError::Io { .. }), "{e}");
    faults.set_fail_sync(false);
    // page cache state is unknown after a failed fsync: no more writes until reopened
    let e = log
        .append_as_leader(&batch(2, "after", NOW), 0, NOW)
        .expect_err("offline");
    assert!(matches!(e, LogError::Offline(_)));
    assert_eq!(e.kafka_error_code(), kafka_code::KAFKA_STORAGE_ERROR);
    drop(log);
    let log = open(dir.path(), LogConfig::default());
    let v = values(&read_all(&log));
    // every acknowledged record survives; the unacknowledged one may or may not
    assert_eq!(v[..6], ["s0-0", "s0-1", "s1-0", "s1-1", "s2-0", "s2-1"]);
    assert!(v.len() == 6 || v.len() == 8);
    log.append_as_leader(&batch(1, "again", NOW), 0, NOW)
        .expect("writable again");
}

#[test]
fn interval_flush_mode_syncs_by_count_and_time() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        flush: gregor_log::FlushPolicy::Interval {
            messages: Some(10),
            ms: Some(1000),
        },
        ..LogConfig::default()
    };
    let log = open(dir.path(), cfg);
    for _ in 0..4 {
        log.append_as_leader(&batch(2, "i", NOW), 0, NOW)
            .expect("append");
    }
    assert_eq!(log.stats().syncs, 0, "8 messages < flush.messages");
    log.append_as_leader(&batch(2, "i", NOW), 0, NOW)
        .expect("append");
    assert_eq!(log.stats().syncs, 1, "10 messages reach flush.messages");
    log.append_as_leader(&batch(1, "i", NOW), 0, NOW)
        .expect("append");
    assert!(!log.flush_if_due(NOW + 999).expect("flush"));
    assert!(log.flush_if_due(NOW + 1000).expect("flush"));
    assert_eq!(log.stats().syncs, 2);
    assert!(!log.flush_if_due(NOW + 5000).expect("nothing unflushed"));
}

#[test]
fn a_full_disk_during_compaction_leaves_the_log_as_it_was() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        cleanup_policy: gregor_log::CleanupPolicy::COMPACT,
        ..small_config()
    };
    let (log, faults) = faulty(dir.path(), cfg);
    for i in 0..60 {
        let b = kv_batch(&[(&format!("k{}", i % 4), Some(&format!("v{i}")))], NOW);
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    let before = values_and_keys(&log);
    // Room for a few bytes only: the cleaned copy cannot be written.
    faults.set_write_budget(Some(100));
    let e = log.compact(NOW).expect_err("disk full");
    assert!(
        matches!(&e, LogError::Io { source, .. } if source.raw_os_error() == Some(28)),
        "{e}"
    );
    // Segments cleaned before the disk filled up are swapped in (they only lost superseded
    // records); the one being written when it filled up is untouched.
    let during = values_and_keys(&log);
    let mut rest = before.iter();
    assert!(
        during.iter().all(|r| rest.any(|b| b == r)),
        "what is left is a subsequence of what was written"
    );
    assert!(
        during.len() > 8,
        "the rest was not cleaned: {}",
        during.len()
    );
    for k in 0..4 {
        let key = format!("k{k}");
        let last = |v: &[(String, String)]| v.iter().rev().find(|(kk, _)| *kk == key).cloned();
        assert_eq!(last(&during), last(&before), "{key}");
    }
    let leftovers: Vec<_> = std::fs::read_dir(dir.path())
        .expect("ls")
        .filter_map(|e| e.ok())
        .filter(|e| e.file_name().to_string_lossy().contains(".cleaned"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
    // With space again compaction goes through.
    faults.set_write_budget(None);
    let st = log.compact(NOW).expect("compact");
    assert!(st.segments_rewritten > 0, "{st:?}");
    let after = values_and_keys(&log);
    assert!(after.len() < before.len());
    for k in 0..4 {
        let key = format!("k{k}");
        let last = |v: &[(String, String)]| v.iter().rev().find(|(kk, _)| *kk == key).cloned();
        assert_eq!(last(&after), last(&before), "{key}");
    }
}

fn values_and_keys(log: &Log) -> Vec<(String, String)> {
    let text = |b: &Option<bytes::Bytes>| {
        String::from_utf8(b.as_ref().expect("set").to_vec()).expect("utf8")
    };
    read_all(log)
        .iter()
        .map(|r| (text(&r.key), text(&r.value)))
        .collect()
}

#[test]
fn a_simulated_slow_disk_charges_each_sync_to_the_thread_that_ran_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let (log, faults) = faulty(dir.path(), LogConfig::default());
    log.append_as_leader(&batch(1, "before", NOW), 0, NOW)
        .expect("append");
    assert_eq!(gregor_log::take_simulated_delay().as_millis(), 0);

    faults.set_simulated_sync_delay(std::time::Duration::from_millis(250));
    log.append_as_leader(&batch(2, "slow", NOW), 0, NOW)
        .expect("append");
    let owed = gregor_log::take_simulated_delay().as_millis();
    assert!(
        owed >= 250 && owed.is_multiple_of(250),
        "each sync of the append owes 250 ms: {owed}"
    );
    assert_eq!(gregor_log::take_simulated_delay().as_millis(), 0, "taken");

    // Another thread's syncs are that thread's debt, not this one's.
    let other = std::thread::scope(|s| {
        s.spawn(|| {
            log.append_as_leader(&batch(1, "there", NOW), 0, NOW)
                .expect("append");
            gregor_log::take_simulated_delay().as_millis()
        })
        .join()
        .expect("thread")
    });
    assert!(other >= 250);
    assert_eq!(gregor_log::take_simulated_delay().as_millis(), 0);

    faults.set_simulated_sync_delay(std::time::Duration::ZERO);
    log.append_as_leader(&batch(1, "fast", NOW), 0, NOW)
        .expect("append");
    assert_eq!(gregor_log::take_simulated_delay().as_millis(), 0);
    assert_eq!(log.log_end_offset(), 5, "nothing was lost on the way");
}
