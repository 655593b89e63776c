//! Power-loss property test: random appends (leader and follower), flushes, high-watermark
//! moves, rolls (small `segment.bytes`), truncations, compaction, retention and DeleteRecords,
//! with power cuts between operations and in the middle of them (after a random number of disk
//! operations), with and without a torn last write. The disk model drops every byte not synced
//! and every directory change not made durable by a directory sync.
//!
//! What the log promises after a power loss, and what is checked after every reopen:
//! - recovery never fails (`Log::open` succeeds);
//! - durability: every offset reported durable (an awaited append under `EveryAppend`, a
//!   follower append under `EveryAppend`, a returned `flush`, a clean close) comes back with its
//!   exact batch bytes (records, once compaction may have rewritten batches), unless a later
//!   truncation, DeleteRecords/retention or compaction took it away by design; under compaction
//!   the last record of every key below the recovered log end comes back;
//! - integrity: everything readable is what was appended at that offset, in order, with no hole
//!   (outside compaction), no torn batch, and nothing a truncation removed comes back;
//! - nothing unsynced comes back: without a torn write, the log end after the power loss is at
//!   most where it was at the last operation that may sync the log (an awaited append, a flush,
//!   a truncation, a compaction, a clean close); data written after it is gone. With a torn
//!   write, a whole batch that happened to reach the disk may come back, byte-identical.
//! - every file operation of the log went through the disk model.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use bytes::Bytes;
use gregor_log::batch::{BatchHeader, Codec};
use gregor_log::records::{decode_batch, encode_batch, simple_batch, BatchSpec, Record};
use gregor_log::{CleanupPolicy, FaultInjector, FlushPolicy, Log, LogConfig};
use proptest::prelude::*;

use crate::common::NOW;

#[derive(Debug, Clone)]
enum Op {
    Leader {
        keys: Vec<u8>,
        wait: bool,
    },
    Follower {
        keys: Vec<u8>,
        new_epoch: bool,
    },
    Flush,
    SetHw {
        to_end: bool,
    },
    Checkpoint,
    Truncate(u8),
    DeleteRecords(u8),
    Retention,
    Compact,
    /// Cut the power after this many more disk operations (mid-operation crash).
    ArmCrash {
        after: u8,
        torn: Option<u64>,
    },
    /// Power loss between operations; with `recovery_crash`, the power goes off again after
    /// that many disk operations of the recovery that follows.
    PowerLoss {
        torn: Option<u64>,
        recovery_crash: Option<u8>,
    },
    CloseAndPowerLoss,
}

fn keys() -> impl Strategy<Value = Vec<u8>> {
    proptest::collection::vec(0u8..6, 1..5)
}

fn op() -> impl Strategy<Value = Op> {
    let torn = proptest::option::of(any::<u64>());
    prop_oneof![
        10 => (keys(), any::<bool>()).prop_map(|(keys, wait)| Op::Leader { keys, wait }),
        4 => (keys(), proptest::bool::weighted(0.2))
            .prop_map(|(keys, new_epoch)| Op::Follower { keys, new_epoch }),
        2 => Just(Op::Flush),
        3 => any::<bool>().prop_map(|to_end| Op::SetHw { to_end }),
        1 => Just(Op::Checkpoint),
        2 => any::<u8>().prop_map(Op::Truncate),
        1 => any::<u8>().prop_map(Op::DeleteRecords),
        1 => Just(Op::Retention),
        2 => Just(Op::Compact),
        2 => (0u8..40, torn.clone()).prop_map(|(after, torn)| Op::ArmCrash { after, torn }),
        2 => (torn, proptest::option::weighted(0.3, 0u8..30))
            .prop_map(|(torn, recovery_crash)| Op::PowerLoss { torn, recovery_crash }),
        1 => Just(Op::CloseAndPowerLoss),
    ]
}

fn config(every_append: bool, compact: bool) -> LogConfig {
    LogConfig {
        segment_bytes: 500,
        index_interval_bytes: 128,
        retention_ms: None,
        retention_bytes: (!compact).then_some(1500),
        cleanup_policy: if compact {
            CleanupPolicy::COMPACT
        } else {
            CleanupPolicy::DELETE
        },
        min_cleanable_dirty_ratio: 0.0,
        min_compaction_lag_ms: 0,
        flush: if every_append {
            FlushPolicy::EveryAppend
        } else {
            FlushPolicy::Interval {
                messages: None,
                ms: None,
            }
        },
        ..LogConfig::default()
    }
}

/// What the test knows about the log.
#[derive(Debug, Default)]
struct Model {
    /// (key, value) of every record appended on the current branch of history, including
    /// appends whose outcome a crash left open.
    recs: BTreeMap<i64, (Bytes, Bytes)>,
    /// Stored bytes of every batch read back after its append, by base offset.
    batches: BTreeMap<i64, Vec<u8>>,
    leo: i64,
    /// Offsets below it were reported durable.
    durable: i64,
    /// Upper bound of what may have been synced (without a torn write).
    maybe_synced: i64,
    /// Upper bound of the log start offset.
    lso_max: i64,
    /// Lower bound of the log start offset: what DeleteRecords and retention returned.
    lso_min: i64,
    hw: i64,
    /// Offsets below it may be missing: lost, unsynced, in an earlier power loss that left
    /// the log end past them.
    gap_end: i64,
    epoch: i32,
    next_value: u64,
    compacted: bool,
}

/// Every batch from the log start to the end, with its records at or after the log start.
fn read_everything(log: &Log) -> Vec<(Vec<u8>, Vec<Record>)> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    let leo = log.log_end_offset();
    while at < leo {
        let r = log.read(at, 1 << 20, None).expect("read after recovery");
        let Some(next) = r.next_offset else { break };
        let mut bytes = &r.records[..];
        while let Some(h) = BatchHeader::parse(bytes) {
            let b = &bytes[..h.size()];
            let (_, recs) = decode_batch(b).expect("a readable batch decodes");
            let recs = recs.into_iter().filter(|r| r.offset >= at).collect();
            out.push((b.to_vec(), recs));
            bytes = &bytes[h.size()..];
        }
        assert!(bytes.is_empty(), "read returned a partial batch");
        at = next;
    }
    out
}

struct Harness {
    dir: std::path::PathBuf,
    faults: Arc<FaultInjector>,
    cfg: LogConfig,
    every_append: bool,
    m: Model,
    log: Option<Log>,
    /// Torn-write seed for the next planned mid-operation crash.
    armed_torn: Option<u64>,
    power_losses: usize,
}

impl Harness {
    fn log(&self) -> &Log {
        self.log.as_ref().expect("log open")
    }

    fn open(&mut self) {
        let log = Log::open_with_faults(&self.dir, self.cfg.clone(), NOW, self.faults.clone())
            .expect("recovery never fails");
        self.log = Some(log);
    }

    fn batch_for(&mut self, keys: &[u8], base: i64) -> (Vec<u8>, Vec<(Bytes, Bytes)>) {
        let mut kvs = Vec::new();
        for k in keys {
            self.m.next_value += 1;
            kvs.push((
                Bytes::from(format!("k{k}")),
                Bytes::from(format!("v{}", self.m.next_value)),
            ));
        }
        let records: Vec<Record> = kvs
            .iter()
            .enumerate()
            .map(|(i, (k, v))| Record {
                offset: base + i as i64,
                timestamp: NOW,
                key: Some(k.clone()),
                value: Some(v.clone()),
                headers: Vec::new(),
            })
            .collect();
        let spec = BatchSpec {
            base_offset: base,
            partition_leader_epoch: self.m.epoch,
            ..BatchSpec::default()
        };
        (encode_batch(&spec, &records).expect("encode"), kvs)
    }

    /// Records an append's records as (possibly) written.
    fn tentative(&mut self, base: i64, kvs: Vec<(Bytes, Bytes)>) {
        for (i, kv) in kvs.into_iter().enumerate() {
            self.m.recs.insert(base + i as i64, kv);
        }
    }

    fn read_back(&mut self, base: i64) {
        let r = self.log().read(base, 1 << 20, None).expect("read");
        let h = BatchHeader::parse(&r.records).expect("a batch");
        assert_eq!(h.base_offset, base);
        self.m.batches.insert(base, r.records[..h.size()].to_vec());
    }

    /// Runs one operation; returns false if the power went off in the middle of it.
    fn step(&mut self, op: &Op) -> bool {
        let r = self.step_inner(op);
        if std::env::var("POWER_DEBUG").is_ok() {
            let (leo, files) = match &self.log {
                Some(l) => (l.log_end_offset(), l.segment_base_offsets()),
                None => (-1, vec![]),
            };
            eprintln!(
                "{op:?} -> alive {r} leo {leo} segs {files:?} durable {} model leo {}",
                self.m.durable, self.m.leo
            );
        }
        r
    }

    fn step_inner(&mut self, op: &Op) -> bool {
        let alive = |h: &Harness, what: &str, e: gregor_log::LogError| {
            assert!(h.faults.is_dead(), "{what} failed without a power cut: {e}");
        };
        match op {
            Op::Leader { keys, wait } => {
                let base = self.m.leo;
                let (bytes, kvs) = self.batch_for(keys, 0);
                self.tentative(base, kvs);
                self.m.leo += keys.len() as i64;
                let syncs = self.every_append && *wait;
                if syncs {
                    self.m.maybe_synced = self.m.leo;
                }
                match self
                    .log()
                    .append_as_leader_deferred(&bytes, self.m.epoch, NOW)
                {
                    Ok((info, token)) => {
                        assert_eq!(info.first_offset, base);
                        self.read_back(base);
                        if *wait {
                            match self.log().await_durable(token) {
                                Ok(()) if syncs => self.m.durable = self.m.leo,
                                Ok(()) => {}
                                Err(e) => alive(self, "await_durable", e),
                            }
                        }
                    }
                    Err(e) => alive(self, "leader append", e),
                }
            }
            Op::Follower { keys, new_epoch } => {
                if *new_epoch {
                    self.m.epoch += 1;
                }
                let base = self.m.leo;
                let (bytes, kvs) = self.batch_for(keys, base);
                self.tentative(base, kvs);
                self.m.leo += keys.len() as i64;
                if self.every_append {
                    self.m.maybe_synced = self.m.leo;
                }
                match self.log().append_as_follower(&bytes, NOW) {
                    Ok(info) => {
                        assert_eq!(info.first_offset, base);
                        self.read_back(base);
                        if self.every_append {
                            self.m.durable = self.m.leo;
                        }
                    }
                    Err(e) => alive(self, "follower append", e),
                }
            }
            Op::Flush => {
                self.m.maybe_synced = self.m.leo;
                match self.log().flush() {
                    Ok(()) => self.m.durable = self.m.leo,
                    Err(e) => alive(self, "flush", e),
                }
            }
            Op::SetHw { to_end } => {
                // The high watermark never moves back (committed data is never truncated).
                let want = if *to_end { self.m.leo } else { self.m.durable }.max(self.m.hw);
                self.m.hw = self.log().set_high_watermark(want);
            }
            Op::Checkpoint => {
                if let Err(e) = self.log().checkpoint() {
                    alive(self, "checkpoint", e);
                }
            }
            Op::Truncate(x) => {
                // Committed data (below the high watermark) is never truncated.
                let lo = self.m.hw.max(self.log().log_start_offset());
                if lo >= self.m.leo {
                    return true;
                }
                let target = lo + (self.m.leo - lo) * i64::from(*x) / 256;
                // Whole batches go: the batch holding `target` too.
                let cut = self
                    .log()
                    .read(target, 1, None)
                    .expect("read")
                    .first_batch_offset
                    .unwrap_or(target)
                    .min(target);
                self.m.maybe_synced = self.m.maybe_synced.max(self.m.leo);
                // After a gap of lost offsets the cut can reach back to the last record.
                let after_last = self
                    .m
                    .recs
                    .range(..target)
                    .next_back()
                    .map_or(0, |(o, _)| o + 1);
                self.m.durable = self.m.durable.min(cut).min(after_last);
                match self.log().truncate_to(target) {
                    Ok(_) => {
                        let leo = self.log().log_end_offset();
                        // Whole batches go (after a gap of lost offsets, the gap too).
                        assert!(
                            leo <= cut,
                            "truncation to {target} left the log end at {leo}"
                        );
                        self.m.durable = self.m.durable.min(leo);
                        self.m.lso_min = self.m.lso_min.min(leo);
                        self.m.recs.split_off(&leo);
                        self.m.batches.split_off(&leo);
                        self.m.leo = leo;
                        self.m.hw = self.log().high_watermark();
                    }
                    Err(e) => alive(self, "truncate", e),
                }
            }
            Op::DeleteRecords(x) => {
                if self.m.compacted || self.cfg.cleanup_policy.compact {
                    return true;
                }
                let lso = self.log().log_start_offset();
                let to = lso + (self.m.hw - lso).max(0) * i64::from(*x) / 255;
                self.m.lso_max = self.m.lso_max.max(to);
                match self.log().delete_records_before(to) {
                    Ok(lso) => self.m.lso_min = self.m.lso_min.max(lso),
                    Err(e) => alive(self, "DeleteRecords", e),
                }
            }
            Op::Retention => {
                self.m.lso_max = self.m.lso_max.max(self.m.hw);
                match self.log().apply_retention(NOW) {
                    Ok(stats) => self.m.lso_min = self.m.lso_min.max(stats.log_start_offset),
                    Err(e) => alive(self, "retention", e),
                }
            }
            Op::Compact => {
                if !self.cfg.cleanup_policy.compact {
                    return true;
                }
                self.m.compacted = true;
                // A segment compacted to nothing is removed: after a reopen the log starts at
                // the first remaining segment (below the high watermark).
                self.m.lso_max = self.m.lso_max.max(self.m.hw);
                // Compaction syncs the rolled segments before it drops anything.
                self.m.maybe_synced = self.m.leo;
                if let Err(e) = self.log().compact(NOW) {
                    alive(self, "compaction", e);
                }
            }
            Op::ArmCrash { after, torn } => {
                self.faults.crash_after(Some(u64::from(*after)));
                self.armed_torn = *torn;
            }
            Op::PowerLoss {
                torn,
                recovery_crash,
            } => {
                self.power_loss_with(*torn, *recovery_crash);
            }
            Op::CloseAndPowerLoss => {
                self.m.maybe_synced = self.m.leo;
                let log = self.log.take().expect("log open");
                match log.close() {
                    Ok(()) => self.m.durable = self.m.leo,
                    Err(e) => alive(self, "close", e),
                }
                self.power_loss(None);
            }
        }
        !self.faults.is_dead()
    }

    fn power_loss(&mut self, torn: Option<u64>) {
        self.power_loss_with(torn, None);
    }

    fn power_loss_with(&mut self, torn: Option<u64>, recovery_crash: Option<u8>) {
        self.log = None;
        let rep = self
            .faults
            .power_loss(torn)
            .expect("power loss restores the durable state");
        if std::env::var("POWER_DEBUG").is_ok() {
            eprintln!("{rep:?}");
            for e in std::fs::read_dir(&self.dir).unwrap() {
                let e = e.unwrap();
                eprintln!("  {:?} {}", e.file_name(), e.metadata().unwrap().len());
            }
        }
        self.power_losses += 1;
        if let Some(n) = recovery_crash {
            // The power fails again while recovery runs; the next recovery must still work.
            self.faults.crash_after(Some(u64::from(n)));
            match Log::open_with_faults(&self.dir, self.cfg.clone(), NOW, self.faults.clone()) {
                Ok(log) => self.log = Some(log),
                Err(e) => {
                    assert!(
                        self.faults.is_dead(),
                        "recovery failed without a power cut: {e}"
                    );
                    self.faults.power_loss(None).expect("power loss");
                }
            }
        }
        if self.log.is_none() {
            self.open();
        }
        self.check(torn.is_some());
    }

    fn check(&mut self, torn: bool) {
        let log = self.log();
        let (lso, leo) = (log.log_start_offset(), log.log_end_offset());
        let m = &self.m;
        assert!(
            leo >= m.durable,
            "durable offsets lost: log end {leo} after the power loss, {} reported durable",
            m.durable
        );
        // The log start moves only where DeleteRecords, retention or compaction took it (or
        // over offsets lost earlier, which hold no record): never past a durable record.
        if let Some((first, _)) = m
            .recs
            .range(m.lso_max.max(0)..m.durable.max(m.lso_max.max(0)))
            .next()
        {
            assert!(
                lso <= *first,
                "log start {lso} moved past durable offset {first} (allowed up to {})",
                m.lso_max
            );
        }
        // A returned DeleteRecords or retention is durable: deleted records stay deleted.
        assert!(
            lso >= m.lso_min.min(leo),
            "log start {lso} went back below {}",
            m.lso_min
        );
        let got = read_everything(log);
        let mut next = lso;
        let mut present = BTreeMap::new();
        for (bytes, recs) in &got {
            for r in recs {
                let want = m.recs.get(&r.offset).unwrap_or_else(|| {
                    panic!("offset {} came back but was never appended", r.offset)
                });
                assert_eq!(
                    (r.key.as_ref(), r.value.as_ref()),
                    (Some(&want.0), Some(&want.1)),
                    "offset {} came back with other contents",
                    r.offset
                );
                assert!(r.offset >= next, "offset {} out of order", r.offset);
                if !m.compacted && r.offset <= m.durable && r.offset > m.gap_end {
                    assert_eq!(r.offset, next, "durable offsets before {} lost", r.offset);
                }
                assert!(
                    torn || r.offset < m.maybe_synced,
                    "offset {} came back, but nothing past {} was synced",
                    r.offset,
                    m.maybe_synced
                );
                next = r.offset + 1;
                present.insert(r.offset, r.key.clone());
            }
            if !m.compacted {
                let h = BatchHeader::parse(bytes).expect("header");
                if let Some(stored) = m.batches.get(&h.base_offset) {
                    assert_eq!(bytes, stored, "batch {} changed bytes", h.base_offset);
                }
            }
        }
        if !m.compacted {
            // Every durable record is there. (A gap is unsynced data that was lost while a
            // later segment's file survived: the log end stays past it, as in Kafka; its
            // offsets were dropped from `recs` when it happened.)
            for o in m.recs.range(lso..m.durable.max(lso)).map(|(o, _)| *o) {
                assert!(
                    present.contains_key(&o),
                    "durable offset {o} lost (log {lso}..{leo})"
                );
            }
        } else {
            // For every key, its last durable record, or a later one, survives compaction.
            let mut last: BTreeMap<&Bytes, i64> = BTreeMap::new();
            for (o, (k, _)) in m.recs.range(lso..m.durable.max(lso)) {
                last.insert(k, *o);
            }
            for (k, o) in last {
                let kept = present.range(o..).any(|(_, key)| key.as_ref() == Some(k));
                assert!(kept, "key {k:?}: its last durable record at {o} is gone, and no later one came back (log {lso}..{leo})");
            }
        }
        // Start again from what the log holds now: all of it is on disk.
        let hw = log.high_watermark();
        let m = &mut self.m;
        m.recs.retain(|o, _| present.contains_key(o));
        m.batches.retain(|o, _| present.contains_key(o));
        m.leo = leo;
        // everything on disk is durable now; the offsets of a gap never come back
        m.durable = next.max(lso);
        m.gap_end = leo;
        m.maybe_synced = leo;
        m.lso_max = lso;
        m.lso_min = lso;
        m.hw = hw;
    }
}

fn run(ops: &[Op], every_append: bool, compact: bool) -> Result<(), TestCaseError> {
    let tmp = tempfile::tempdir().expect("tmp");
    let dir = tmp.path().join("topic-0");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let cfg = config(every_append, compact);
    let mut h = Harness {
        dir,
        faults,
        cfg,
        every_append,
        m: Model::default(),
        log: None,
        armed_torn: None,
        power_losses: 0,
    };
    h.open();
    for op in ops {
        if !h.step(op) {
            // The power went off in the middle of the operation.
            let torn = h.armed_torn.take();
            h.power_loss(torn);
        }
    }
    h.power_loss(None);
    prop_assert!(
        h.faults.untracked_paths().is_empty(),
        "file operations bypassed the disk model: {:?}",
        h.faults.untracked_paths()
    );
    Ok(())
}

proptest! {
    // 256 cases run in a few seconds (the model skips real fsyncs); POWER_CASES raises it for
    // a longer soak.
    #![proptest_config(ProptestConfig {
        cases: std::env::var("POWER_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]

    #[test]
    fn power_loss_keeps_what_was_durable_and_nothing_torn(
        ops in proptest::collection::vec(op(), 1..60),
        every_append in any::<bool>(),
        compact in any::<bool>(),
    ) {
        run(&ops, every_append, compact)?;
    }
}

fn durable_log(dir: &Path, faults: &Arc<FaultInjector>) -> Log {
    Log::open_with_faults(dir, config(true, false), NOW, faults.clone()).expect("open")
}

/// Finding 11: a new partition directory is durable before its first append is acknowledged.
#[test]
fn a_new_partition_directory_survives_a_power_loss() {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("data").join("topic-0");
    let log = durable_log(&dir, &faults);
    let b = simple_batch(Codec::None, NOW, &[(Some(b"k"), Some(b"acked"))]).expect("encode");
    log.append_as_leader(&b, 0, NOW).expect("append");
    drop(log);
    faults.power_loss(None).expect("power loss");
    assert!(dir.is_dir(), "the partition directory vanished");
    let log = durable_log(&dir, &faults);
    assert_eq!(log.log_end_offset(), 1, "the acknowledged record is lost");
}

/// Unsynced appends are dropped by a power loss (the model has teeth), synced ones are not.
#[test]
fn page_cache_appends_are_lost_and_flushed_ones_kept() {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("topic-0");
    let cfg = config(false, false);
    let log = Log::open_with_faults(&dir, cfg.clone(), NOW, faults.clone()).expect("open");
    let b = simple_batch(Codec::None, NOW, &[(Some(b"k"), Some(b"v"))]).expect("encode");
    for _ in 0..3 {
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    log.flush().expect("flush");
    for _ in 0..4 {
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    assert_eq!(log.log_end_offset(), 7);
    drop(log);
    let report = faults.power_loss(None).expect("power loss");
    assert!(report.unsynced_writes_dropped > 0);
    let log = Log::open_with_faults(&dir, cfg, NOW, faults.clone()).expect("open");
    assert_eq!(log.log_end_offset(), 3);
}

/// A durable directory removal does not come back after a power loss.
#[test]
fn a_removed_directory_stays_removed() {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("topic-0");
    let log = durable_log(&dir, &faults);
    let b = simple_batch(Codec::None, NOW, &[(Some(b"k"), Some(b"v"))]).expect("encode");
    log.append_as_leader(&b, 0, NOW).expect("append");
    drop(log);
    gregor_log::Disk::with_faults(faults.clone())
        .remove_dir_all(&dir)
        .expect("remove");
    faults.power_loss(None).expect("power loss");
    assert!(!dir.exists(), "a deleted partition came back");
    let doomed = tmp
        .path()
        .join(format!("topic-0{}", gregor_log::DELETE_SUFFIX));
    assert!(!doomed.exists());
}

/// DeleteRecords over records still in the page cache, then a power loss that drops them: the
/// log start offset checkpoint points past the recovered log end. Records appended after the
/// reopen must not be hidden below it at the next one.
#[test]
fn a_stale_log_start_checkpoint_does_not_hide_later_records() {
    let tmp = tempfile::tempdir().expect("tmp");
    let faults = FaultInjector::power_model(tmp.path()).expect("model");
    let dir = tmp.path().join("topic-0");
    let cfg = config(false, false);
    let open = || Log::open_with_faults(&dir, cfg.clone(), NOW, faults.clone()).expect("open");
    let b = simple_batch(Codec::None, NOW, &[(Some(b"k"), Some(b"v"))]).expect("encode");
    let log = open();
    for _ in 0..2 {
        log.append_as_leader(&b, 0, NOW).expect("append");
    }
    log.set_high_watermark(2);
    assert_eq!(log.delete_records_before(1).expect("delete records"), 1);
    drop(log);
    faults.power_loss(None).expect("power loss");
    let log = open();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
    log.append_as_leader(&b, 0, NOW).expect("append");
    log.append_as_leader(&b, 0, NOW).expect("append");
    log.flush().expect("flush");
    drop(log);
    faults.power_loss(None).expect("power loss");
    let log = open();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 2));
}
