//! Closing a log that other holders still share: the clean-shutdown marker is written, every
//! later write is refused (so the marker stays true), and the log reopens clean.

use crate::common::*;
use gregor_log::{Log, LogConfig, LogError};
use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

const MARKER: &str = gregor_log::checkpoint::CLEAN_SHUTDOWN;

fn closed(r: Result<impl std::fmt::Debug, LogError>, what: &str) {
    match r {
        Err(LogError::Closed(_)) => {}
        other => panic!("{what} after close: {other:?}, expected LogError::Closed"),
    }
}

/// Every file of the directory with its length and modification time.
fn files(dir: &Path) -> BTreeMap<String, (u64, SystemTime)> {
    fs::read_dir(dir)
        .expect("ls")
        .map(|e| {
            let e = e.expect("entry");
            let m = e.metadata().expect("stat");
            let name = e.file_name().to_string_lossy().into_owned();
            (name, (m.len(), m.modified().expect("mtime")))
        })
        .collect()
}

/// Flips a CRC-covered byte of the first batch: an open that scans (no marker) truncates the
/// log there, one that trusts the marker does not notice.
fn damage_first_batch(dir: &Path) {
    let path = dir.join("00000000000000000000.log");
    let mut bytes = fs::read(&path).expect("read");
    bytes[70] ^= 1;
    fs::write(&path, &bytes).expect("write");
}

#[test]
fn a_log_closed_while_shared_reopens_clean_and_refuses_later_writes() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = Arc::new(open(dir.path(), small_config()));
    for i in 0..20 {
        log.append_as_leader(&batch(3, &format!("s{i}"), NOW), 1, NOW)
            .expect("append");
    }
    log.set_high_watermark(30);
    let other = Arc::clone(&log);
    log.close().expect("close through a shared handle");
    assert!(dir.path().join(MARKER).exists(), "marker written");
    let before = files(dir.path());

    closed(
        other.append_as_leader(&batch(1, "late", NOW), 1, NOW),
        "leader append",
    );
    let follower = gregor_log::records::simple_batch(
        gregor_log::batch::Codec::None,
        NOW,
        &[(Some(b"k".as_slice()), Some(b"v".as_slice()))],
    )
    .expect("encode");
    closed(other.append_as_follower(&follower, NOW), "follower append");
    closed(other.truncate_to(3), "truncation");
    closed(other.truncate_fully_and_start_at(100), "full truncation");
    closed(other.delete_records_before(3), "DeleteRecords");
    closed(other.assign_epoch_at_end(2), "new leader epoch");
    closed(other.apply_retention(i64::MAX), "retention");
    closed(other.compact(NOW), "compaction");
    other
        .checkpoint()
        .expect("a checkpoint of a closed log does nothing");
    other.flush().expect("nothing left to flush");
    other.close().expect("closing again does nothing");
    // Reads go on.
    assert_eq!(read_all(&other).len(), 60);
    assert_eq!(
        files(dir.path()),
        before,
        "nothing written after the marker"
    );

    // Reopened while the other handle still exists: trusted, not scanned.
    let vals = values(&read_all(&other));
    damage_first_batch(dir.path());
    let reopened = open(dir.path(), small_config());
    assert_eq!(reopened.log_end_offset(), 60, "reopened clean: no scan");
    assert_eq!(reopened.high_watermark(), 30);
    assert_eq!(values(&read_all(&reopened))[3..], vals[3..]);
    assert!(!dir.path().join(MARKER).exists(), "marker consumed");
    drop(other);
}

#[test]
fn appends_racing_a_close_are_durable_or_refused_never_after_the_marker() {
    let dir = tempfile::tempdir().expect("tmp");
    // Segments of a few hundred appends: the race covers rolled segments not yet synced.
    let config = LogConfig {
        segment_bytes: 16 << 10,
        ..small_config()
    };
    let log = Arc::new(open(dir.path(), config.clone()));
    let started = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..4)
        .map(|t| {
            let log = Arc::clone(&log);
            let started = Arc::clone(&started);
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                // Bounded: a log that never refuses would otherwise grow until the disk is full.
                let deadline = Instant::now() + Duration::from_secs(10);
                for i in 0.. {
                    assert!(
                        Instant::now() < deadline,
                        "no append refused after the close"
                    );
                    let tag = format!("t{t}-{i}");
                    match log.append_as_leader(&batch(1, &tag, NOW), 0, NOW) {
                        Ok(_) => acked.push(format!("{tag}-0")),
                        Err(LogError::Closed(_)) => break,
                        Err(e) => panic!("append: {e}"),
                    }
                    started.store(true, Ordering::SeqCst);
                }
                acked
            })
        })
        .collect();
    while !started.load(Ordering::SeqCst) {
        std::thread::yield_now();
    }
    std::thread::sleep(Duration::from_millis(20));
    log.close().expect("close");
    let at_close = files(dir.path());
    let mut acked: Vec<String> = writers
        .into_iter()
        .flat_map(|w| w.join().expect("writer"))
        .collect();
    assert!(!acked.is_empty());
    assert_eq!(
        files(dir.path()),
        at_close,
        "nothing written after the marker"
    );

    assert!(dir.path().join(MARKER).exists(), "marker written");
    let reopened = open(dir.path(), config);
    let mut stored = values(&read_all(&reopened));
    stored.sort();
    acked.sort();
    assert_eq!(
        stored, acked,
        "every acknowledged append is there, and nothing else"
    );
}

#[test]
fn close_is_refused_for_an_offline_log_and_leaves_no_marker() {
    let dir = tempfile::tempdir().expect("tmp");
    let faults = gregor_log::FaultInjector::new();
    let log =
        Log::open_with_faults(dir.path(), LogConfig::default(), NOW, faults.clone()).expect("open");
    log.append_as_leader(&batch(1, "a", NOW), 0, NOW)
        .expect("append");
    faults.set_fail_sync(true);
    assert!(log.append_as_leader(&batch(1, "b", NOW), 0, NOW).is_err());
    assert!(matches!(log.close(), Err(LogError::Offline(_))));
    assert!(!dir.path().join(MARKER).exists());
}

#[test]
fn a_log_closed_for_deletion_refuses_writes_instead_of_failing_on_its_missing_directory() {
    let parent = tempfile::tempdir().expect("tmp");
    let dir = parent.path().join("t-0");
    let log = Arc::new(open(&dir, small_config()));
    log.append_as_leader(&batch(3, "kept", NOW), 1, NOW)
        .expect("append");
    let fetcher = Arc::clone(&log);
    // A replica reassigned away: the log is closed for deletion, then its directory goes,
    // while a fetcher still holds the log.
    log.close_for_deletion();
    assert!(
        !dir.join(MARKER).exists(),
        "a log about to be deleted writes no clean-shutdown marker"
    );
    fs::remove_dir_all(&dir).expect("delete the partition directory");

    // A new leader epoch would write leader-epoch-checkpoint(.tmp) into the missing directory.
    closed(fetcher.assign_epoch_at_end(7), "new leader epoch");
    let follower = gregor_log::records::simple_batch(
        gregor_log::batch::Codec::None,
        NOW,
        &[(Some(b"k".as_slice()), Some(b"v".as_slice()))],
    )
    .expect("encode");
    closed(
        fetcher.append_as_follower(&follower, NOW),
        "follower append",
    );
    closed(fetcher.truncate_to(1), "truncation");
    fetcher
        .checkpoint()
        .expect("a checkpoint of a log closed for deletion does nothing");
    assert_eq!(
        fetcher
            .delete_retired_files(i64::MAX)
            .expect("nothing queued"),
        0
    );
    assert!(!dir.exists(), "nothing wrote into the deleted directory");
    // Reads go on for whoever still holds it.
    assert_eq!(read_all(&fetcher).len(), 3);
}
