use crate::common::*;
use gregor_log::batch::Codec;
use gregor_log::records::{decode_batch, encode_batch, BatchSpec, Record};
use gregor_log::{CleanupPolicy, LogConfig, LogError, OffsetSpec};

#[test]
fn truncate_to_drops_whole_batches_and_epochs() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), small_config());
    for i in 0..30 {
        let epoch = if i < 20 { 1 } else { 2 };
        log.append_as_leader(&batch(3, &format!("t{i}"), NOW + i), epoch, NOW)
            .expect("append");
    }
    log.set_high_watermark(90);
    let segs_before = log.segment_base_offsets().len();
    assert!(segs_before > 3);
    assert_eq!(log.epoch_entries(), vec![(1, 0), (2, 60)]);
    // offset 31 is inside the batch 30..=32: the whole batch goes
    assert!(log.truncate_to(31).expect("truncate"));
    assert_eq!(log.log_end_offset(), 30);
    assert_eq!(log.high_watermark(), 30);
    assert_eq!(log.epoch_entries(), vec![(1, 0)]);
    assert!(log.segment_base_offsets().len() < segs_before);
    assert_eq!(read_all(&log).len(), 30);
    assert!(!log.truncate_to(100).expect("no-op"));
    // appends continue from the new end, the time index still answers
    let info = log
        .append_as_leader(&batch(2, "new", NOW + 100), 3, NOW)
        .expect("append");
    assert_eq!(info.first_offset, 30);
    let t = log
        .list_offset(OffsetSpec::Timestamp(NOW + 100))
        .expect("list")
        .expect("hit");
    assert_eq!(t.offset, 30);
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.log_end_offset(), 32);
    assert_eq!(log.epoch_entries(), vec![(1, 0), (3, 30)]);
    let v = values(&read_all(&log));
    assert_eq!(v[29], "t9-2");
    assert_eq!(v[30], "new-0");
    // truncating below the first segment empties the log at that offset
    log.set_high_watermark(32);
    let second = log.segment_base_offsets()[1];
    log.delete_records_before(second).expect("delete");
    let first = log.segment_base_offsets()[0];
    assert_eq!(first, second);
    assert!(first > 0);
    log.truncate_to(first - 1).expect("truncate");
    assert_eq!(log.log_end_offset(), first - 1);
    assert_eq!(log.log_start_offset(), first - 1);
}

#[test]
fn delete_records_moves_start_and_deletes_segments() {
    let dir = tempfile::tempdir().expect("tmp");
    let log = open(dir.path(), small_config());
    for i in 0..30 {
        log.append_as_leader(&batch(3, &format!("d{i}"), NOW), 0, NOW)
            .expect("append");
    }
    let e = log.delete_records_before(10).expect_err("above HW");
    assert!(matches!(e, LogError::OffsetOutOfRange { .. }));
    log.set_high_watermark(90);
    let segs = log.segment_base_offsets();
    assert_eq!(log.delete_records_before(40).expect("delete"), 40);
    assert_eq!(log.log_start_offset(), 40);
    // The three offsets a Fetch reads, in one snapshot (an append moves the log end, not the
    // high watermark).
    log.append_as_leader(&batch(3, "past-hw", NOW), 0, NOW)
        .expect("append");
    assert_eq!(
        log.offsets(),
        gregor_log::LogOffsets {
            log_start_offset: 40,
            log_end_offset: 93,
            high_watermark: 90,
        }
    );
    let left = log.segment_base_offsets();
    assert!(left.len() < segs.len());
    assert!(left[0] <= 40);
    assert!(matches!(
        log.read(39, 100, None),
        Err(LogError::OffsetOutOfRange { .. })
    ));
    assert_eq!(read_all(&log)[0].offset, 40);
    assert_eq!(
        log.list_offset(OffsetSpec::Earliest)
            .expect("l")
            .expect("x")
            .offset,
        40
    );
    assert_eq!(
        log.list_offset(OffsetSpec::Timestamp(0))
            .expect("l")
            .expect("x")
            .offset,
        40
    );
    drop(log);
    let log = open(dir.path(), small_config());
    assert_eq!(log.log_start_offset(), 40);
}

#[test]
fn retention_by_time_and_size_deletes_whole_old_segments() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        retention_ms: Some(10_000),
        ..small_config()
    };
    let log = open(dir.path(), cfg.clone());
    for i in 0..40i64 {
        // one second apart
        log.append_as_leader(&batch(3, &format!("r{i}"), NOW + i * 1000), 0, NOW)
            .expect("append");
    }
    let segs = log.segment_base_offsets();
    // nothing above the high watermark may go
    assert_eq!(
        log.apply_retention(NOW + 1_000_000)
            .expect("ret")
            .segments_deleted,
        0
    );
    log.set_high_watermark(120);
    // at NOW + 45s, records older than NOW + 35s are expired
    let st = log.apply_retention(NOW + 45_000).expect("retention");
    assert!(st.segments_deleted > 0);
    let left = log.segment_base_offsets();
    assert_eq!(left.len(), segs.len() - st.segments_deleted);
    assert_eq!(log.log_start_offset(), left[0]);
    let recs = read_all(&log);
    assert!(recs.iter().all(|r| r.offset >= left[0]));
    // every deleted segment was fully expired; the first remaining one was not
    assert!(recs[0].timestamp <= NOW + 35_000 + 3_000);
    // a far future deletes everything but the active segment
    let st = log.apply_retention(NOW + 10_000_000).expect("retention");
    assert_eq!(log.segment_base_offsets().len(), 1);
    assert!(st.segments_deleted > 0);

    // retention.bytes
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        retention_bytes: Some(3000),
        ..small_config()
    };
    let log = open(dir.path(), cfg);
    for i in 0..60 {
        log.append_as_leader(&batch(3, &format!("s{i}"), NOW), 0, NOW)
            .expect("append");
    }
    log.set_high_watermark(180);
    log.apply_retention(NOW).expect("retention");
    let size = log.size_bytes();
    assert!((3000..3000 + 1100).contains(&size), "size {size}");
}

fn kv(offset: i64, k: &str, v: Option<&str>) -> Record {
    Record {
        offset,
        timestamp: NOW + offset,
        key: Some(bytes::Bytes::copy_from_slice(k.as_bytes())),
        value: v.map(|v| bytes::Bytes::copy_from_slice(v.as_bytes())),
        headers: vec![],
    }
}

#[test]
fn compaction_keeps_last_value_per_key_and_expires_tombstones() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        delete_retention_ms: 60_000,
        ..small_config()
    };
    let log = open(dir.path(), cfg);
    // A record without a key is refused on a compacted topic.
    let nokey =
        gregor_log::records::simple_batch(Codec::None, NOW, &[(None, Some(b"v"))]).expect("enc");
    assert!(matches!(
        log.append_as_leader(&nokey, 0, NOW),
        Err(LogError::RecordErrors(_))
    ));
    // 10 keys written 12 times each, key 3 deleted (tombstone) half way, mixed codecs.
    let mut model = std::collections::BTreeMap::new();
    let codecs = [
        Codec::None,
        Codec::Gzip,
        Codec::Lz4,
        Codec::Zstd,
        Codec::Snappy,
    ];
    for round in 0..12 {
        let mut recs = Vec::new();
        for k in 0..10 {
            let key = format!("key{k}");
            let val = if k == 3 && round == 6 {
                None
            } else {
                Some(format!("r{round}"))
            };
            if k == 3 && round > 6 {
                continue;
            }
            recs.push(kv(recs.len() as i64, &key, val.as_deref()));
            match val {
                Some(v) => model.insert(key, v),
                None => model.remove(&key),
            };
        }
        let spec = BatchSpec {
            codec: codecs[round % 5],
            ..BatchSpec::default()
        };
        log.append_as_leader(&encode_batch(&spec, &recs).expect("enc"), 0, NOW)
            .expect("append");
    }
    // roll so that everything is cleanable, and let it all be below the high watermark
    log.append_as_leader(
        &kv_batch(&[("other", Some("x"))], NOW + 1_000_000),
        0,
        NOW + 1_000_000,
    )
    .expect("append");
    let leo = log.log_end_offset();
    log.set_high_watermark(leo);
    let before = read_all(&log).len();
    let st = log.compact(NOW).expect("compact");
    assert!(st.segments_rewritten > 0, "{st:?}");
    let after = read_all(&log);
    assert!(after.len() < before);
    // latest value per key, tombstone still present (horizon not reached)
    let mut seen = std::collections::BTreeMap::new();
    for r in &after {
        let k = String::from_utf8(r.key.clone().expect("key").to_vec()).expect("utf8");
        seen.insert(
            k,
            r.value
                .clone()
                .map(|v| String::from_utf8(v.to_vec()).expect("utf8")),
        );
    }
    for (k, v) in &model {
        assert_eq!(seen.get(k), Some(&Some(v.clone())), "key {k}");
    }
    assert_eq!(
        seen.get("key3"),
        Some(&None),
        "tombstone kept until delete.retention.ms"
    );
    // each key appears once in the cleaned range
    let active = *log.segment_base_offsets().last().expect("segments");
    assert!(active > 60, "most of the log is cleanable");
    let keys: Vec<_> = after
        .iter()
        .filter(|r| r.offset < active)
        .map(|r| r.key.clone())
        .collect();
    let mut uniq = keys.clone();
    uniq.sort();
    uniq.dedup();
    assert_eq!(uniq.len(), keys.len());
    // offsets are preserved and reads from any old offset still work
    assert_eq!(log.log_end_offset(), leo);
    let r = log.read(1, 1 << 20, None).expect("read");
    assert!(!r.records.is_empty());
    // after the horizon the tombstone goes, after a reopen too
    drop(log);
    let log = open(
        dir.path(),
        LogConfig {
            cleanup_policy: CleanupPolicy::COMPACT,
            delete_retention_ms: 60_000,
            ..small_config()
        },
    );
    log.set_high_watermark(leo);
    let st = log.compact(NOW + 60_001).expect("compact");
    assert_eq!(st.tombstones_dropped, 1, "{st:?}");
    let after = read_all(&log);
    assert!(after
        .iter()
        .all(|r| r.key.as_deref() != Some(b"key3".as_slice())));
    for r in &after {
        if let Some(h) = log
            .read(r.offset, 1, None)
            .ok()
            .and_then(|x| gregor_log::batch::BatchHeader::parse(&x.records))
        {
            let (_, recs) =
                decode_batch(&log.read(h.base_offset, 1, None).expect("r").records[..h.size()])
                    .expect("dec");
            assert!(recs.iter().any(|x| x.offset == r.offset));
        }
    }
    // a second pass has nothing left to do
    let st = log.compact(NOW + 60_002).expect("compact");
    assert_eq!(st.segments_rewritten, 0, "{st:?}");
}

#[test]
fn interrupted_compaction_swap_is_completed_or_discarded() {
    use std::fs;
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        ..small_config()
    };
    let log = open(dir.path(), cfg.clone());
    for i in 0..20 {
        log.append_as_leader(
            &kv_batch(&[("a", Some(&format!("{i}"))), ("b", Some("x"))], NOW),
            0,
            NOW,
        )
        .expect("append");
    }
    drop(log);
    let first = dir.path().join("00000000000000000000.log");
    let original = fs::read(&first).expect("read");
    // A leftover .cleaned file is discarded.
    fs::write(
        dir.path().join("00000000000000000000.log.cleaned"),
        b"partial",
    )
    .expect("w");
    let log = open(dir.path(), cfg.clone());
    assert!(!dir.path().join("00000000000000000000.log.cleaned").exists());
    assert_eq!(fs::read(&first).expect("read"), original);
    let n = read_all(&log).len();
    drop(log);
    // A complete .swap replaces the original: here a copy holding only the first batch.
    let h = gregor_log::batch::BatchHeader::parse(&original).expect("hdr");
    fs::write(
        dir.path().join("00000000000000000000.log.swap"),
        &original[..h.size()],
    )
    .expect("w");
    let log = open(dir.path(), cfg);
    assert!(!dir.path().join("00000000000000000000.log.swap").exists());
    let recs = read_all(&log);
    assert!(recs.len() < n);
    assert_eq!(recs[0].offset, 0);
}

/// Latest value per key over the whole log, and how often each key occurs below `below`.
fn latest_and_counts(
    log: &gregor_log::Log,
    below: i64,
) -> (
    std::collections::BTreeMap<String, Option<String>>,
    std::collections::BTreeMap<String, usize>,
) {
    let text = |b: &bytes::Bytes| String::from_utf8(b.to_vec()).expect("utf8");
    let mut latest = std::collections::BTreeMap::new();
    let mut counts = std::collections::BTreeMap::new();
    for r in read_all(log) {
        let k = text(r.key.as_ref().expect("key"));
        if r.offset < below {
            *counts.entry(k.clone()).or_insert(0) += 1;
        }
        latest.insert(k, r.value.as_ref().map(text));
    }
    (latest, counts)
}

#[test]
fn a_small_key_map_compacts_in_several_passes_and_loses_nothing() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.0,
        ..small_config()
    };
    let log = open(dir.path(), cfg);
    let mut model = std::collections::BTreeMap::new();
    for i in 0..400 {
        let k = format!("k{:02}", (i * 7) % 60);
        let v = format!("v{i}");
        log.append_as_leader(&kv_batch(&[(&k, Some(&v))], NOW), 0, NOW)
            .expect("append");
        model.insert(k, Some(v));
    }
    log.set_high_watermark(log.log_end_offset());
    let active = *log.segment_base_offsets().last().expect("segments");
    // Room for about 15 keys a pass: the 60 keys take several passes.
    let budget = 15 * (3 + 64);
    let mut passes = 0;
    let mut cleaned_up_to = 0;
    loop {
        let st = log.compact_within(NOW, budget).expect("compact");
        // Nothing is ever lost, whatever the pass stopped at.
        let (latest, counts) = latest_and_counts(&log, st.cleaned_up_to);
        assert_eq!(latest, model, "pass {passes}");
        if st.skipped {
            break;
        }
        assert!(st.cleaned_up_to > cleaned_up_to, "{st:?}");
        assert!(
            counts.values().all(|n| *n == 1),
            "keys unique below {}: {counts:?}",
            st.cleaned_up_to
        );
        cleaned_up_to = st.cleaned_up_to;
        passes += 1;
        assert!(passes < 100, "compaction does not converge");
    }
    assert!(passes > 2, "the budget forced several passes: {passes}");
    assert_eq!(cleaned_up_to, active, "everything cleanable was compacted");
    // One pass with the default budget on a fresh copy of the same data gets as far at once.
    let dir2 = tempfile::tempdir().expect("tmp");
    let log2 = open(
        dir2.path(),
        LogConfig {
            cleanup_policy: CleanupPolicy::COMPACT,
            ..small_config()
        },
    );
    for i in 0..400 {
        let k = format!("k{:02}", (i * 7) % 60);
        log2.append_as_leader(&kv_batch(&[(&k, Some(&format!("v{i}")))], NOW), 0, NOW)
            .expect("append");
    }
    log2.set_high_watermark(log2.log_end_offset());
    let st = log2.compact(NOW).expect("compact");
    assert_eq!(st.cleaned_up_to, active);
    assert_eq!(
        latest_and_counts(&log2, active),
        latest_and_counts(&log, active)
    );
}

#[test]
fn compaction_waits_for_enough_dirty_data_and_remembers_where_it_stopped() {
    let dir = tempfile::tempdir().expect("tmp");
    // 1.0: only a log that is all dirty (never compacted) is worth a pass.
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 1.0,
        ..small_config()
    };
    let append_round = |log: &gregor_log::Log, round: usize| {
        for k in 0..20 {
            let batch = kv_batch(&[(&format!("k{k:02}"), Some(&format!("r{round}")))], NOW);
            log.append_as_leader(&batch, 0, NOW).expect("append");
        }
        log.set_high_watermark(log.log_end_offset());
    };
    let log = open(dir.path(), cfg.clone());
    for round in 0..5 {
        append_round(&log, round);
    }
    let first = log.compact(NOW).expect("compact");
    assert!(!first.skipped && first.segments_rewritten > 0, "{first:?}");
    assert!(dir.path().join("cleaner-checkpoint").exists());
    append_round(&log, 5);
    let st = log.compact(NOW).expect("compact");
    assert!(
        st.skipped,
        "part of the log is clean: below the ratio {st:?}"
    );
    assert_eq!(st.cleaned_up_to, first.cleaned_up_to);
    // The checkpoint survives a restart.
    drop(log);
    let log = open(dir.path(), cfg.clone());
    log.set_high_watermark(log.log_end_offset());
    assert!(log.compact(NOW).expect("compact").skipped);
    // With the ratio at 0 the dirty part is compacted, and the clean part loses the keys
    // written again.
    log.set_config(LogConfig {
        min_cleanable_dirty_ratio: 0.0,
        ..cfg.clone()
    })
    .expect("config");
    let st = log.compact(NOW).expect("compact");
    assert!(
        !st.skipped && st.cleaned_up_to > first.cleaned_up_to,
        "{st:?}"
    );
    let (latest, counts) = latest_and_counts(&log, st.cleaned_up_to);
    assert!(
        latest.values().all(|v| v.as_deref() == Some("r5")),
        "{latest:?}"
    );
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    // Truncating below the compacted range moves the checkpoint back with it.
    let to = st.cleaned_up_to - 3;
    log.truncate_to(to).expect("truncate");
    let c = gregor_log::checkpoint::read_cleaner(dir.path())
        .expect("read")
        .expect("present");
    assert_eq!(c.first_dirty_offset, to);
}

#[test]
fn a_corrupt_cleaner_checkpoint_only_costs_a_full_compaction() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        ..small_config()
    };
    let log = open(dir.path(), cfg.clone());
    for i in 0..100 {
        let batch = kv_batch(&[(&format!("k{}", i % 10), Some(&format!("v{i}")))], NOW);
        log.append_as_leader(&batch, 0, NOW).expect("append");
    }
    log.set_high_watermark(log.log_end_offset());
    let done = log.compact(NOW).expect("compact");
    drop(log);
    std::fs::write(dir.path().join("cleaner-checkpoint"), "0\nnot a number\n").expect("write");
    let log = open(dir.path(), cfg);
    log.set_high_watermark(log.log_end_offset());
    let st = log.compact(NOW).expect("compact");
    assert!(!st.skipped, "unknown state: everything is dirty again");
    assert_eq!(st.cleaned_up_to, done.cleaned_up_to);
    assert_eq!(st.segments_rewritten, 0, "already compact: nothing changes");
}

#[test]
fn compaction_lags_bound_when_records_become_and_must_become_compactable() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_compaction_lag_ms: 10_000,
        ..small_config()
    };
    let log = open(dir.path(), cfg.clone());
    let round = |log: &gregor_log::Log, r: usize, ts: i64| {
        for k in 0..10 {
            let b = kv_batch(&[(&format!("k{k}"), Some(&format!("r{r}")))], ts);
            log.append_as_leader(&b, 0, ts).expect("append");
        }
        log.set_high_watermark(log.log_end_offset());
    };
    for r in 0..4 {
        round(&log, r, NOW);
    }
    // Younger than min.compaction.lag.ms: nothing is cleanable yet.
    let st = log.compact(NOW + 5_000).expect("compact");
    assert_eq!(st.segments_cleaned, 0, "{st:?}");
    let before = read_all(&log).len();
    assert_eq!(before, 40);
    let st = log.compact(NOW + 10_000).expect("compact");
    assert!(st.segments_rewritten > 0, "{st:?}");
    assert!(read_all(&log).len() < before);

    // max.compaction.lag.ms forces a pass the dirty ratio would not allow.
    log.set_config(LogConfig {
        min_compaction_lag_ms: 0,
        min_cleanable_dirty_ratio: 1.0,
        max_compaction_lag_ms: 60_000,
        ..cfg
    })
    .expect("config");
    round(&log, 4, NOW + 20_000);
    round(&log, 5, NOW + 20_000);
    let st = log.compact(NOW + 30_000).expect("compact");
    assert!(st.skipped, "below the ratio and the lag: {st:?}");
    let st = log.compact(NOW + 80_000).expect("compact");
    assert!(!st.skipped && st.segments_rewritten > 0, "{st:?}");
}
