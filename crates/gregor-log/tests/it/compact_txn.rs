//! Compaction of a log with transactions: aborted records never shadow committed ones and are
//! dropped; nothing at or past the last stable offset is looked at; a marker whose records are
//! all gone gets a delete horizon and then goes, an abort marker's index entry with it.

use gregor_log::records::Record;
use gregor_log::{CleanupPolicy, Log, LogConfig, DEFAULT_MAP_BUDGET};

use crate::common::*;
use crate::txn_index::Txns;

fn compacted_config() -> LogConfig {
    LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.0,
        ..small_config()
    }
}

/// `n` plain records with keys of their own (`tag-i`), at the log end: they roll segments
/// without superseding anything of `Txns::data`.
fn filler(t: &mut Txns, n: usize, tag: &str) {
    let keys: Vec<String> = (0..n).map(|i| format!("{tag}-{i}")).collect();
    let kvs: Vec<(&str, Option<&str>)> = keys.iter().map(|k| (k.as_str(), Some("x"))).collect();
    let mut b = kv_batch(&kvs, NOW);
    let at = t.log.log_end_offset();
    b[0..8].copy_from_slice(&at.to_be_bytes());
    t.append(b);
}

/// The data records of producer `pid` (-1: plain records) still in the log.
fn records_of(log: &Log, pid: i64) -> Vec<Record> {
    batches(log)
        .into_iter()
        .filter(|(h, _)| !h.is_control() && h.producer_id == pid)
        .flat_map(|(_, r)| r)
        .collect()
}

/// The control batches still in the log: (producer id, commit?, delete horizon).
fn markers(log: &Log) -> Vec<(i64, bool, Option<i64>)> {
    batches(log)
        .into_iter()
        .filter(|(h, _)| h.is_control())
        .map(|(h, r)| {
            let key = r[0].key.clone().expect("control key");
            (h.producer_id, key[3] == 1, h.delete_horizon())
        })
        .collect()
}

fn seal(t: &mut Txns) {
    filler(t, 20, "seal");
    filler(t, 20, "seal2");
    t.log.set_high_watermark(t.log.log_end_offset());
}

#[test]
fn an_aborted_record_never_shadows_a_committed_one_and_is_dropped() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), compacted_config()));
    t.data(1, 4); // key-0..3, committed
    t.end(1, true);
    t.data(2, 4); // the same keys, aborted
    t.end(2, false);
    seal(&mut t);
    let st = t.log.compact(NOW).expect("compact");
    assert_eq!(st.aborted_records_dropped, 4, "{st:?}");
    assert!(records_of(&t.log, 2).is_empty(), "aborted records stay");
    let committed = records_of(&t.log, 1);
    assert_eq!(
        committed.len(),
        4,
        "committed records shadowed by aborted ones"
    );
    // The abort marker stays until its delete horizon, and the index with it, across a reopen.
    let horizon = NOW + compacted_config().delete_retention_ms;
    assert!(markers(&t.log).contains(&(2, false, Some(horizon))));
    drop(t.log);
    let log = open(dir.path(), compacted_config());
    assert_eq!(log.aborted_transactions(0, i64::MAX), t.aborted);
    assert_eq!(records_of(&log, 1).len(), 4);
}

#[test]
fn nothing_at_or_past_the_last_stable_offset_is_compacted() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), compacted_config()));
    t.data(1, 4);
    t.end(1, true);
    let open_at = t.data(2, 4).base_offset; // open: it may yet abort
    seal(&mut t);
    let st = t
        .log
        .compact_below(NOW, DEFAULT_MAP_BUDGET, open_at)
        .expect("compact");
    assert!(st.cleaned_up_to <= open_at, "{st:?}");
    assert_eq!(
        records_of(&t.log, 1).len(),
        4,
        "shadowed by an open transaction"
    );
    assert_eq!(records_of(&t.log, 2).len(), 4);
    // It aborts: the committed records stay for good, the aborted ones go.
    t.end(2, false);
    seal(&mut t);
    let st = t.log.compact(NOW).expect("compact");
    assert_eq!(st.aborted_records_dropped, 4, "{st:?}");
    assert_eq!(records_of(&t.log, 1).len(), 4);
    assert!(records_of(&t.log, 2).is_empty());
}

#[test]
fn a_marker_with_no_record_left_gets_a_horizon_then_goes_with_its_index_entry() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = compacted_config();
    let mut t = Txns::new(open(dir.path(), cfg.clone()));
    t.data(1, 4);
    t.end(1, true);
    t.data(3, 4); // committed too
    t.end(3, true);
    t.data(-1, 4); // supersedes every record of producers 1 and 3 (the same keys)
    t.data(4, 2); // key-0, key-1 once more, committed: their marker stays
    t.end(4, true);
    t.data(5, 3);
    t.end(5, false);
    seal(&mut t);
    assert_eq!(t.everything(), t.aborted);
    let st = t.log.compact(NOW).expect("compact");
    assert_eq!(st.markers_dropped, 0, "{st:?}");
    assert!(records_of(&t.log, 1).is_empty());
    let horizon = NOW + cfg.delete_retention_ms;
    let m = markers(&t.log);
    assert!(m.contains(&(1, true, Some(horizon))), "{m:?}");
    assert!(m.contains(&(3, true, Some(horizon))), "{m:?}");
    assert!(m.contains(&(4, true, None)), "{m:?}");
    assert!(m.contains(&(5, false, Some(horizon))), "{m:?}");
    assert_eq!(
        t.everything(),
        t.aborted,
        "the entry lives as long as its marker"
    );
    // Before the horizon nothing more goes; after it, the empty markers do.
    let st = t.log.compact(horizon - 1).expect("compact");
    assert_eq!(st.markers_dropped, 0, "{st:?}");
    let st = t.log.compact(horizon).expect("compact");
    assert_eq!(st.markers_dropped, 3, "{st:?}");
    assert_eq!(markers(&t.log), vec![(4, true, None)]);
    assert_eq!(records_of(&t.log, 4).len(), 2);
    assert!(t.everything().is_empty(), "{:?}", t.everything());
    drop(t.log);
    let log = open(dir.path(), cfg);
    assert_eq!(markers(&log), vec![(4, true, None)]);
    assert!(log.aborted_transactions(0, i64::MAX).is_empty());
}
