//! The aborted-transaction index (`.txnindex` per segment) through the log's API: transactional
//! batches and their markers appended as a follower would, each abort's entry computed by
//! `OpenTransactions` as the broker does and handed to `Log::append_aborted_txn`.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use bytes::Bytes;
use gregor_log::batch::BatchHeader;
use gregor_log::records::{encode_batch, BatchSpec, Record};
use gregor_log::txn::{control_type, marker_batch, AbortedTxn, Marker, OpenTransactions};
use gregor_log::{CleanupPolicy, FaultInjector, FlushPolicy, Log, LogConfig, LogError};
use proptest::prelude::*;

use crate::common::*;

/// A log written as a partition with transactions writes it.
pub(crate) struct Txns {
    pub(crate) log: Log,
    open: OpenTransactions,
    /// Every entry handed to the log, in order.
    pub(crate) aborted: Vec<AbortedTxn>,
}

impl Txns {
    pub(crate) fn new(log: Log) -> Txns {
        Txns {
            log,
            open: OpenTransactions::default(),
            aborted: Vec::new(),
        }
    }

    pub(crate) fn append(&mut self, batch: Vec<u8>) -> BatchHeader {
        let h = BatchHeader::parse(&batch).expect("header");
        self.log.append_as_follower(&batch, NOW).expect("append");
        let control = control_type(&batch).expect("control type");
        if let Some(done) = self.open.observe(&h, control) {
            if let Some(entry) = self.open.aborted_entry(&done) {
                self.log.append_aborted_txn(entry).expect("append entry");
                self.aborted.push(entry);
            }
        }
        h
    }

    /// `n` keyed records of `pid` (transactional unless `pid` is -1) at the log end.
    pub(crate) fn data(&mut self, pid: i64, n: i64) -> BatchHeader {
        let base = self.log.log_end_offset();
        let spec = BatchSpec {
            base_offset: base,
            partition_leader_epoch: 0,
            transactional: pid >= 0,
            producer_id: pid,
            producer_epoch: if pid >= 0 { 0 } else { -1 },
            base_sequence: if pid >= 0 { 0 } else { -1 },
            ..BatchSpec::default()
        };
        let records: Vec<Record> = (0..n)
            .map(|i| Record {
                offset: base + i,
                timestamp: NOW,
                key: Some(Bytes::from(format!("key-{}", i % 4))),
                value: Some(Bytes::from(format!("value-{pid}-{base}-{i}"))),
                headers: Vec::new(),
            })
            .collect();
        self.append(encode_batch(&spec, &records).expect("encode"))
    }

    /// The commit or abort marker of `pid` at the log end.
    pub(crate) fn end(&mut self, pid: i64, commit: bool) -> i64 {
        let mut b = marker_batch(&Marker {
            producer_id: pid,
            producer_epoch: 0,
            coordinator_epoch: 0,
            commit,
            timestamp: NOW,
        })
        .expect("marker");
        let at = self.log.log_end_offset();
        b[0..8].copy_from_slice(&at.to_be_bytes());
        self.append(b);
        at
    }

    pub(crate) fn everything(&self) -> Vec<AbortedTxn> {
        self.log.aborted_transactions(0, i64::MAX)
    }
}

fn txn_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("ls")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.contains(".txnindex"))
        .collect();
    v.sort();
    v
}

fn txn_path(dir: &Path, base: i64) -> PathBuf {
    dir.join(format!("{base:020}.txnindex"))
}

fn decode_file(path: &Path) -> Vec<AbortedTxn> {
    std::fs::read(path)
        .expect("read index")
        .chunks(AbortedTxn::ENTRY_LEN)
        .map(|c| AbortedTxn::decode(c).expect("entry"))
        .collect()
}

/// Producer 1 aborts, producer 2 commits, producer 3 aborts while 4 stays open, 4 aborts:
/// spread over several segments of `small_config`.
fn fill(t: &mut Txns) {
    for round in 0..4 {
        t.data(1, 3);
        t.data(-1, 2);
        t.end(1, round % 2 == 1);
        t.data(3, 2);
        t.data(4, 2);
        t.end(3, false);
        t.data(-1, 3);
        t.end(4, false);
    }
}

#[test]
fn entries_live_in_their_markers_segments_and_survive_a_clean_reopen() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), small_config()));
    fill(&mut t);
    let bases = t.log.segment_base_offsets();
    assert!(bases.len() >= 4, "{bases:?}");
    assert_eq!(t.aborted.len(), 10);
    assert_eq!(t.everything(), t.aborted);
    // Producer 3 aborted while 4 was open: its last stable offset is 4's first offset.
    let p3 = t.aborted.iter().find(|e| e.producer_id == 3).expect("p3");
    let p4 = t.aborted.iter().find(|e| e.producer_id == 4).expect("p4");
    assert_eq!(p3.last_stable_offset, p4.first_offset);
    // Each entry is in the file of the segment holding its marker; segments without one
    // have no file.
    for (i, base) in bases.iter().enumerate() {
        let end = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        let mine: Vec<AbortedTxn> = t
            .aborted
            .iter()
            .filter(|e| (*base..end).contains(&e.last_offset))
            .copied()
            .collect();
        let path = txn_path(dir.path(), *base);
        assert_eq!(path.exists(), !mine.is_empty(), "segment {base}");
        if !mine.is_empty() {
            assert_eq!(decode_file(&path), mine, "segment {base}");
        }
    }
    t.log.close().expect("close");
    assert!(matches!(
        t.log.append_aborted_txn(t.aborted[0]),
        Err(LogError::Closed(_))
    ));
    let log = open(dir.path(), small_config());
    assert_eq!(log.aborted_transactions(0, i64::MAX), t.aborted);
}

#[test]
fn a_transaction_begun_in_the_range_is_found_in_a_later_segment() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), small_config()));
    let first = t.data(7, 2).base_offset;
    for _ in 0..12 {
        t.data(-1, 3);
    }
    let marker = t.end(7, false);
    let bases = t.log.segment_base_offsets();
    assert!(bases.len() >= 2 && bases[1] <= marker, "{bases:?}");
    let e = t.aborted[0];
    assert_eq!((e.first_offset, e.last_offset), (first, marker));
    let found = |from, to| t.log.aborted_transactions(from, to);
    // The fetch ends in the first segment, the marker is segments later.
    assert_eq!(found(first, first + 1), vec![e]);
    assert_eq!(found(first + 1, bases[1]), vec![e]);
    // At the marker, past it; an upper bound at the first offset, an empty range.
    assert_eq!(found(marker, marker + 1), vec![e]);
    assert!(found(marker + 1, i64::MAX).is_empty());
    assert!(found(0, first).is_empty());
    assert!(found(first, first).is_empty());
}

#[test]
fn entries_that_do_not_fit_the_log_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), small_config()));
    fill(&mut t);
    let leo = t.log.log_end_offset();
    let last = *t.aborted.last().expect("entries");
    let with = |first, last_offset| AbortedTxn {
        producer_id: 9,
        first_offset: first,
        last_offset,
        last_stable_offset: last_offset + 1,
    };
    let refused = [
        (with(leo - 1, leo), "at the log end"),
        (with(0, last.last_offset), "not after the last entry"),
        (with(0, last.last_offset - 1), "before the last entry"),
        (with(leo - 1, leo - 2), "first offset after the last"),
        (with(-1, leo - 1), "negative first offset"),
    ];
    for (entry, what) in refused {
        let r = t.log.append_aborted_txn(entry);
        assert!(
            matches!(
                r,
                Err(LogError::OffsetOutOfRange { .. } | LogError::InvalidArgument(_))
            ),
            "{what}: {r:?}"
        );
    }
    assert_eq!(t.everything(), t.aborted);
    // Below the log start (DeleteRecords moved it).
    t.data(-1, 3);
    let leo = t.log.log_end_offset();
    t.log.set_high_watermark(leo);
    t.log
        .delete_records_before(leo - 2)
        .expect("delete records");
    let r = t.log.append_aborted_txn(with(0, leo - 3));
    assert!(matches!(r, Err(LogError::OffsetOutOfRange { .. })), "{r:?}");
    t.log
        .append_aborted_txn(with(0, leo - 2))
        .expect("at the log start");
}

#[test]
fn truncation_removes_the_entries_of_the_removed_range() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), small_config()));
    fill(&mut t);
    let all = t.aborted.clone();
    // In the middle of an index, then across segments, then everything.
    let cut = all[7].last_offset;
    t.log.truncate_aborted_txns_from(cut).expect("truncate");
    assert_eq!(t.everything(), all[..7].to_vec());
    let cut = all[2].last_offset;
    t.log.truncate_aborted_txns_from(cut).expect("truncate");
    assert_eq!(t.everything(), all[..2].to_vec());
    // The entries come back by replay, as the broker would hand them over.
    for e in &all[2..] {
        t.log.append_aborted_txn(*e).expect("replay");
    }
    assert_eq!(t.everything(), all);
    // Log::truncate_to drops the entries with the batches (and later segments' files).
    let to = all[5].last_offset;
    t.log.truncate_to(to).expect("truncate log");
    assert_eq!(t.everything(), all[..5].to_vec());
    let bases = t.log.segment_base_offsets();
    for f in txn_files(dir.path())
        .iter()
        .filter(|f| !f.ends_with(".deleted"))
    {
        let base: i64 = f[..20].parse().expect("base");
        assert!(bases.contains(&base), "{f} outlived its segment");
    }
    t.log.close().expect("close");
    let log = open(dir.path(), small_config());
    assert_eq!(log.aborted_transactions(0, i64::MAX), all[..5].to_vec());
    log.truncate_fully_and_start_at(1000).expect("reset");
    assert!(log.aborted_transactions(0, i64::MAX).is_empty());
    let live: Vec<String> = txn_files(dir.path())
        .into_iter()
        .filter(|f| !f.ends_with(".deleted"))
        .collect();
    assert!(live.is_empty(), "{live:?}");
}

#[test]
fn removed_segments_take_their_index_with_them() {
    for delay in [0, 10_000] {
        let dir = tempfile::tempdir().expect("tmp");
        let cfg = LogConfig {
            file_delete_delay_ms: delay,
            ..small_config()
        };
        let mut t = Txns::new(open(dir.path(), cfg));
        fill(&mut t);
        let bases = t.log.segment_base_offsets();
        let first_with = t.aborted[0].last_offset;
        assert!(txn_path(dir.path(), bases[0]).exists() && first_with < bases[1]);
        t.log.set_high_watermark(t.log.log_end_offset());
        t.log
            .delete_records_before(bases[2])
            .expect("delete records");
        t.log.apply_retention(NOW).expect("retention");
        assert_eq!(t.log.segment_base_offsets()[0], bases[2]);
        assert!(!txn_path(dir.path(), bases[0]).exists());
        let waiting = txn_files(dir.path())
            .into_iter()
            .filter(|f| f.ends_with(".deleted"))
            .count();
        assert_eq!(waiting > 0, delay > 0, "delay {delay}");
        t.log.delete_retired_files(NOW).expect("sweep");
        t.log
            .delete_retired_files(NOW + delay)
            .expect("sweep after the delay");
        assert!(txn_files(dir.path())
            .iter()
            .all(|f| !f.ends_with(".deleted")));
        let kept: Vec<AbortedTxn> = t
            .aborted
            .iter()
            .filter(|e| e.last_offset >= bases[2])
            .copied()
            .collect();
        assert_eq!(t.everything(), kept);
    }
}

#[test]
fn a_damaged_index_is_cut_back_at_its_first_bad_entry_and_the_log_opens() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), small_config()));
    fill(&mut t);
    t.log.close().expect("close");
    let bases = t.log.segment_base_offsets();
    let path = bases
        .iter()
        .map(|b| txn_path(dir.path(), *b))
        .find(|p| p.exists() && decode_file(p).len() >= 2)
        .expect("a segment with two aborts");
    let good = decode_file(&path);
    let pristine = std::fs::read(&path).expect("read");
    let len = AbortedTxn::ENTRY_LEN;
    let mut torn = pristine.clone();
    torn.extend_from_slice(&[1, 2, 3]);
    let mut bad_version = pristine.clone();
    bad_version[len + 1] = 9;
    let mut reordered = pristine[len..2 * len].to_vec();
    reordered.extend_from_slice(&pristine[..len]);
    for (bytes, kept) in [(torn, good.len()), (bad_version, 1), (reordered, 1)] {
        std::fs::write(&path, &bytes).expect("damage");
        let log = open(dir.path(), small_config());
        // The other segments' entries, and what is left of this one's.
        let mut expected: Vec<AbortedTxn> = t
            .aborted
            .iter()
            .filter(|e| !good.contains(e))
            .chain(decode_file(&path).iter())
            .copied()
            .collect();
        expected.sort_by_key(|e| e.last_offset);
        assert_eq!(decode_file(&path).len(), kept);
        assert_eq!(log.aborted_transactions(0, i64::MAX), expected);
        assert_eq!(log.log_end_offset(), t.log.log_end_offset());
        log.close().expect("close");
    }
}

#[test]
fn a_stray_index_is_removed_when_the_log_opens() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut t = Txns::new(open(dir.path(), small_config()));
    fill(&mut t);
    t.log.close().expect("close");
    let stray = txn_path(dir.path(), 999_999);
    let entry = AbortedTxn {
        producer_id: 1,
        first_offset: 999_999,
        last_offset: 999_999,
        last_stable_offset: 1_000_000,
    };
    std::fs::write(&stray, entry.encode()).expect("write");
    let log = open(dir.path(), small_config());
    assert!(!stray.exists());
    assert_eq!(log.aborted_transactions(0, i64::MAX), t.aborted);
}

fn power_log(dir: &Path, faults: &Arc<FaultInjector>, cfg: LogConfig) -> Txns {
    Txns::new(Log::open_with_faults(dir, cfg, NOW, faults.clone()).expect("open"))
}

#[test]
fn a_power_loss_keeps_synced_entries_and_may_drop_the_others() {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("topic-0");
    let cfg = LogConfig {
        segment_bytes: 1 << 20,
        ..small_config()
    };
    let mut t = power_log(&dir, &faults, cfg.clone());
    t.data(1, 2);
    t.end(1, false);
    t.log.sync_txn_indexes().expect("sync");
    t.data(2, 2);
    t.end(2, false);
    assert_eq!(t.everything().len(), 2);
    drop(t.log);
    let report = faults.power_loss(None).expect("power loss");
    assert!(report.unsynced_writes_dropped > 0);
    let log = Log::open_with_faults(&dir, cfg, NOW, faults.clone()).expect("reopen");
    // Every append was synced (EveryAppend), the second entry was not.
    assert_eq!(log.log_end_offset(), 6);
    assert_eq!(
        log.aborted_transactions(0, i64::MAX),
        t.aborted[..1].to_vec()
    );
    assert!(
        faults.untracked_paths().is_empty(),
        "{:?}",
        faults.untracked_paths()
    );
}

#[test]
fn a_roll_makes_the_rolled_segments_entries_durable() {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("topic-0");
    let mut t = power_log(&dir, &faults, small_config());
    t.data(1, 2);
    t.end(1, false);
    let first_base = t.log.segment_base_offsets()[0];
    while t.log.segment_base_offsets().len() < 2 {
        t.data(-1, 3);
    }
    drop(t.log);
    faults.power_loss(None).expect("power loss");
    let log = Log::open_with_faults(&dir, small_config(), NOW, faults.clone()).expect("reopen");
    assert_eq!(log.segment_base_offsets()[0], first_base);
    assert_eq!(log.aborted_transactions(0, i64::MAX), t.aborted);
}

#[test]
fn an_entry_whose_marker_was_lost_is_dropped_at_open() {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("topic-0");
    // Page-cache appends: the marker is not durable, its synced entry is.
    let cfg = LogConfig {
        flush: FlushPolicy::Interval {
            messages: None,
            ms: None,
        },
        segment_bytes: 1 << 20,
        ..small_config()
    };
    let mut t = power_log(&dir, &faults, cfg.clone());
    t.data(1, 2);
    t.log.flush().expect("flush");
    t.end(1, false);
    t.log.sync_txn_indexes().expect("sync");
    drop(t.log);
    faults.power_loss(None).expect("power loss");
    let log = Log::open_with_faults(&dir, cfg, NOW, faults.clone()).expect("reopen");
    assert_eq!(log.log_end_offset(), 2);
    assert!(log.aborted_transactions(0, i64::MAX).is_empty());
    assert_eq!(decode_file(&txn_path(&dir, 0)), vec![]);
}

#[test]
fn compaction_keeps_the_entries_of_the_segments_it_rewrites() {
    let dir = tempfile::tempdir().expect("tmp");
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        ..small_config()
    };
    let mut t = Txns::new(open(dir.path(), cfg.clone()));
    fill(&mut t);
    fill(&mut t);
    t.log.set_high_watermark(t.log.log_end_offset());
    let st = t.log.compact(NOW).expect("compact");
    assert!(st.segments_rewritten > 0, "{st:?}");
    assert_eq!(t.everything(), t.aborted);
    // After a crash (no clean close) and after a clean close.
    drop(t.log);
    let log = open(dir.path(), cfg.clone());
    assert_eq!(log.aborted_transactions(0, i64::MAX), t.aborted);
    log.close().expect("close");
    let log = open(dir.path(), cfg);
    assert_eq!(log.aborted_transactions(0, i64::MAX), t.aborted);
}

/// One step of [`power_run`].
#[derive(Debug, Clone)]
enum Step {
    Data {
        pid: i64,
        n: i64,
    },
    End {
        pid: i64,
        commit: bool,
    },
    Plain(i64),
    Sync,
    Compact,
    /// Compaction after every delete horizon it set has passed: markers with no record left go,
    /// and abort markers take their index entries with them.
    CompactLater,
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        4 => (0i64..3, 1i64..4).prop_map(|(pid, n)| Step::Data { pid, n }),
        3 => (0i64..3, any::<bool>()).prop_map(|(pid, commit)| Step::End { pid, commit }),
        2 => (1i64..5).prop_map(Step::Plain),
        1 => Just(Step::Sync),
        1 => Just(Step::Compact),
        1 => Just(Step::CompactLater),
    ]
}

/// Runs `steps` on a log under the power model until the power is cut after `crash_after`
/// disk operations (or the steps end), then reboots: the log must open; its entries must be
/// entries appended, in order; every entry appended before the last successful
/// `sync_txn_indexes` (its markers were synced by their appends) must stay unless compaction
/// removed every record it covers (an entry not synced may go with its records left: the
/// broker's replay of its producer state rebuilds it).
fn power_run(
    steps: &[Step],
    crash_after: Option<u64>,
    torn: Option<u64>,
) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("topic-0");
    let cfg = LogConfig {
        cleanup_policy: CleanupPolicy::COMPACT,
        min_cleanable_dirty_ratio: 0.0,
        ..small_config()
    };
    let mut t = power_log(&dir, &faults, cfg.clone());
    faults.crash_after(crash_after);
    let mut durable = 0;
    for s in steps {
        let done = catch(|| match s {
            Step::Data { pid, n } => {
                t.data(*pid, *n);
            }
            Step::End { pid, commit } => {
                t.end(*pid, *commit);
            }
            Step::Plain(n) => {
                t.data(-1, *n);
            }
            Step::Sync => {
                t.log.sync_txn_indexes().expect("sync");
                durable = t.aborted.len();
            }
            Step::Compact => {
                t.log.set_high_watermark(t.log.log_end_offset());
                t.log.compact(NOW).expect("compact");
            }
            Step::CompactLater => {
                t.log.set_high_watermark(t.log.log_end_offset());
                let later = NOW + 2 * t.log.config().delete_retention_ms;
                t.log.compact(later).expect("compact");
            }
        });
        if !done {
            prop_assert!(faults.is_dead(), "{s:?} failed with the power on");
            break;
        }
    }
    let appended = t.aborted.clone();
    drop(t);
    faults.power_loss(torn).expect("power loss");
    let log = Log::open_with_faults(&dir, cfg, NOW, faults.clone()).expect("reopen");
    let got = log.aborted_transactions(0, i64::MAX);
    let mut rest = appended.iter();
    prop_assert!(
        got.iter().all(|e| rest.any(|a| a == e)),
        "entries that were not appended, or out of order: {got:?} of {appended:?}"
    );
    let all = batches(&log);
    let covers = |e: &AbortedTxn, h: &BatchHeader| {
        h.is_transactional()
            && !h.is_control()
            && e.producer_id == h.producer_id
            && e.first_offset <= h.base_offset
            && h.base_offset < e.last_offset
    };
    for e in appended[..durable].iter().filter(|e| !got.contains(e)) {
        prop_assert!(
            !all.iter().any(|(h, _)| covers(e, h)),
            "a synced entry lost while records it covers stay: {e:?}"
        );
    }
    prop_assert!(got.iter().all(|e| e.last_offset < log.log_end_offset()));
    prop_assert!(faults.untracked_paths().is_empty());
    Ok(())
}

/// Runs `f`, telling whether it finished: a step fails (its `expect` panics) once the power is
/// cut, which ends the run there (a failure with the power on fails the test).
fn catch(f: impl FnOnce()) -> bool {
    std::panic::catch_unwind(std::panic::AssertUnwindSafe(f)).is_ok()
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("POWER_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(128),
        ..ProptestConfig::default()
    })]

    #[test]
    fn a_power_loss_anywhere_keeps_the_synced_entries_and_a_whole_prefix(
        steps in proptest::collection::vec(step(), 1..40),
        crash_after in proptest::option::of(0u64..200),
        torn in proptest::option::of(any::<u64>()),
    ) {
        power_run(&steps, crash_after, torn)?;
    }
}
