//! The partition log: its state, append, high watermark, truncation and DeleteRecords. Built on
//! the segments, group commit (`sync.rs`) and the retired-files queue (`retire.rs`); reads live
//! in `read.rs`, opening and recovery in `open.rs`, retention and compaction in `cleaner.rs`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard};

use tracing::debug;

use crate::batch::{self, BatchHeader, Origin};
use crate::checkpoint;
use crate::config::{FlushPolicy, LogConfig, TimestampType};
use crate::disk::Disk;
use crate::epoch::LeaderEpochCache;
use crate::error::{IoContext, LogError, Result};
use crate::prepare::{prepare, Prepared};
use crate::retire::{self, RetiredFiles};
use crate::segment::Segment;
use crate::sync::{GroupCommit, LogStats};
use crate::txn::AbortedTxn;

pub(crate) use crate::sync::lock;

/// What an append did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppendInfo {
    /// Offset of the first record appended.
    pub first_offset: i64,
    /// Offset of the last record appended.
    pub last_offset: i64,
    /// Largest batch max-timestamp appended.
    pub max_timestamp: i64,
    /// The append time stamped on the batches under LogAppendTime.
    pub log_append_time: Option<i64>,
    /// Number of batches.
    pub batches: usize,
    /// Bytes written.
    pub bytes: usize,
    /// The log start offset after the append.
    pub log_start_offset: i64,
}

/// Proof of a written append, to wait on with [`Log::await_durable`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[must_use = "an append is not durable until its token is awaited"]
pub struct DurableToken(Option<u64>);

impl DurableToken {
    /// A token for data already known to be durable (e.g. recovered at open).
    pub const DURABLE: DurableToken = DurableToken(None);
}

/// A log's offsets at one instant ([`Log::offsets`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogOffsets {
    /// The first offset still in the log.
    pub log_start_offset: i64,
    /// The offset the next appended record gets.
    pub log_end_offset: i64,
    /// The high watermark.
    pub high_watermark: i64,
}

/// Mutable state behind the log's lock.
#[derive(Debug)]
pub(crate) struct Inner {
    pub config: LogConfig,
    pub segments: BTreeMap<i64, Segment>,
    pub log_start_offset: i64,
    pub high_watermark: i64,
    pub recovery_point: i64,
    pub epochs: LeaderEpochCache,
    pub written_seq: u64,
    pub unflushed_messages: u64,
    pub last_flush_ms: i64,
    pub offline: bool,
    /// [`Log::close`] began: every write is refused from then on.
    pub closed: bool,
    /// [`Log::close`] finished: the clean-shutdown marker is on disk.
    pub marker_written: bool,
    pub next_segment_id: u64,
    /// Rolled segments whose data is not yet known to be synced.
    pub pending_sync: Vec<(Arc<std::fs::File>, PathBuf)>,
    /// Where compaction stands; `None` until the first compaction.
    pub cleaner: Option<checkpoint::CleanerCheckpoint>,
    /// Files of removed segments waiting out `file.delete.delay.ms`.
    pub retired: Vec<RetiredFiles>,
    /// What the open left durable on disk; a close that finds the log just so has no file
    /// to write but its marker.
    pub at_open: AtOpen,
}

/// A log's state as its open left it durable: checkpoint files written (or, for a missing
/// high-watermark or log-start-offset file, implied exactly as the next open will imply them)
/// and segments synced.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct AtOpen {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub epochs: Vec<(i32, i64)>,
    /// Base offset and size of every segment.
    pub segments: Vec<(i64, u64)>,
}

impl AtOpen {
    pub fn of(g: &Inner) -> AtOpen {
        AtOpen {
            high_watermark: g.high_watermark,
            log_start_offset: g.log_start_offset,
            log_end_offset: g.log_end_offset(),
            epochs: g.epochs.entries().to_vec(),
            segments: g.segments.values().map(|s| (s.base, s.size)).collect(),
        }
    }
}

impl Inner {
    pub fn active(&self) -> &Segment {
        self.segments
            .values()
            .next_back()
            .expect("a log always has an active segment")
    }
    pub fn active_mut(&mut self) -> &mut Segment {
        self.segments
            .values_mut()
            .next_back()
            .expect("a log always has an active segment")
    }
    pub fn log_end_offset(&self) -> i64 {
        self.active().next_offset
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments.values().map(|s| s.size).sum()
    }
    pub fn new_segment_id(&mut self) -> u64 {
        self.next_segment_id += 1;
        self.next_segment_id
    }

    /// Log start <= high watermark <= log end: consumers read below the high watermark and
    /// replication counts on it never passing what the log holds. Checked wherever one of the
    /// three moves.
    pub fn debug_check_offsets(&self) {
        let (lso, hw, leo) = (
            self.log_start_offset,
            self.high_watermark,
            self.log_end_offset(),
        );
        debug_assert!(
            lso <= hw && hw <= leo,
            "offsets out of order: log start {lso}, high watermark {hw}, log end {leo}"
        );
    }
}

/// Offsets only grow: every batch of an append starts where the log (or the batch before it)
/// ends, or after it for a follower (its leader's compaction may have left a gap), and ends at
/// or after its start. A violation would write overlapping offsets into the segment, and the
/// check is one comparison per batch, so release builds make it too.
fn assert_offsets_follow(headers: &[BatchHeader], log_end: i64, origin: Origin) {
    let mut end = log_end;
    for h in headers {
        match origin {
            Origin::Leader => assert_eq!(h.base_offset, end, "leader batch not at the log end"),
            Origin::Follower => assert!(
                h.base_offset >= end,
                "follower batch at {} below the log end {end}",
                h.base_offset
            ),
        }
        assert!(
            h.last_offset() >= h.base_offset,
            "batch at {} ends before it starts",
            h.base_offset
        );
        end = h.next_offset();
    }
}

/// The offsets the checkpoint files hold: as the open left them, then as the periodic
/// checkpoint last wrote them (`None`: unknown).
#[derive(Debug, Default)]
pub(crate) struct Checkpointed {
    pub high_watermark: Option<i64>,
    pub recovery_point: Option<i64>,
    pub log_start_offset: Option<i64>,
}

/// The on-disk log of one partition replica, in one directory. All methods take `&self` and
/// may be called from many threads: appends are serialized for offset assignment and share
/// fsyncs (group commit); reads copy batches outside the lock.
#[derive(Debug)]
pub struct Log {
    pub(crate) dir: PathBuf,
    pub(crate) disk: Disk,
    pub(crate) inner: Mutex<Inner>,
    pub(crate) commit: GroupCommit,
    /// Serializes retention/compaction runs and checkpoint writers; holds what the periodic
    /// checkpoint last wrote.
    pub(crate) maintenance: Mutex<Checkpointed>,
}

impl Log {
    /// The partition directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The disk this log writes through (for the small files callers keep beside it).
    pub fn disk(&self) -> &Disk {
        &self.disk
    }

    /// The current configuration.
    pub fn config(&self) -> LogConfig {
        lock(&self.inner).config.clone()
    }

    /// Replace the configuration (dynamic topic config change).
    pub fn set_config(&self, config: LogConfig) -> Result<()> {
        config.validate()?;
        lock(&self.inner).config = config;
        Ok(())
    }

    /// The log start offset, log end offset and high watermark, as one snapshot (one lock: a
    /// Fetch reads them for every partition it names).
    pub fn offsets(&self) -> LogOffsets {
        let inner = lock(&self.inner);
        LogOffsets {
            log_start_offset: inner.log_start_offset,
            log_end_offset: inner.log_end_offset(),
            high_watermark: inner.high_watermark,
        }
    }

    /// The first offset still in the log.
    pub fn log_start_offset(&self) -> i64 {
        lock(&self.inner).log_start_offset
    }

    /// The offset the next appended record gets.
    pub fn log_end_offset(&self) -> i64 {
        lock(&self.inner).log_end_offset()
    }

    /// The high watermark.
    pub fn high_watermark(&self) -> i64 {
        lock(&self.inner).high_watermark
    }

    /// Offset below which everything is known to be on disk.
    pub fn recovery_point(&self) -> i64 {
        lock(&self.inner).recovery_point
    }

    /// The log end offset a replica may count, or report to a leader, as on its disk: the log
    /// end offset while every append has been synced as its flush policy asks, but after a
    /// failed sync took the log offline only what the last successful sync covered (the rest
    /// may already be gone from the page cache, and is gone after a power loss).
    pub fn durable_end_offset(&self) -> i64 {
        let g = lock(&self.inner);
        if g.offline {
            g.recovery_point.min(g.log_end_offset())
        } else {
            g.log_end_offset()
        }
    }

    /// Total bytes of all segments.
    pub fn size_bytes(&self) -> u64 {
        lock(&self.inner).size_bytes()
    }

    /// Base offsets of the segments, oldest first.
    pub fn segment_base_offsets(&self) -> Vec<i64> {
        lock(&self.inner).segments.keys().copied().collect()
    }

    /// Set the high watermark, clamped to `[log_start_offset, log_end_offset]` as Kafka does;
    /// returns the value set. It is persisted by [`Log::checkpoint`] and on close.
    pub fn set_high_watermark(&self, hw: i64) -> i64 {
        let mut g = lock(&self.inner);
        let hw = hw.clamp(g.log_start_offset, g.log_end_offset());
        g.high_watermark = hw;
        g.debug_check_offsets();
        hw
    }

    /// Append batches from a producer: validate, assign offsets from the log end, stamp the
    /// leader epoch (and LogAppendTime if configured), write, and (by default) wait until the
    /// data is synced. Nothing is written if any batch is invalid.
    pub fn append_as_leader(
        &self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<AppendInfo> {
        let (info, durable) = self.append_as_leader_deferred(records, leader_epoch, now_ms)?;
        self.await_durable(durable)?;
        Ok(info)
    }

    /// [`Log::append_as_leader`] without the wait: the batches are written (and readable by the
    /// caller's own bookkeeping) but not yet known to be durable. The caller must pass the token
    /// to [`Log::await_durable`] before acknowledging the write; in the meantime it may release
    /// its own locks, so that concurrent appends share one fdatasync.
    pub fn append_as_leader_deferred(
        &self,
        records: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(AppendInfo, DurableToken)> {
        let config = self.config();
        let p = prepare(records, &config, Origin::Leader, now_ms)?;
        self.append_prepared_as_leader(p, &config, leader_epoch, now_ms)
    }

    /// Appends one commit or abort marker (a control batch the broker built for a transaction
    /// coordinator, see [`crate::txn::marker_batch`]) as the leader: validated as a copy is
    /// (producers may not send control batches), then placed like a producer's batch. Returns
    /// as [`Log::append_as_leader_deferred`] does.
    pub fn append_marker_as_leader_deferred(
        &self,
        batch: &[u8],
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(AppendInfo, DurableToken)> {
        let one_control = BatchHeader::parse(batch)
            .is_some_and(|h| h.is_control() && h.size() == batch.len() && h.record_count == 1);
        if !one_control {
            return Err(LogError::InvalidRecord(
                "a marker is exactly one control batch of one record".into(),
            ));
        }
        let config = self.config();
        let p = prepare(batch, &config, Origin::Follower, now_ms)?;
        self.append_prepared_as_leader(p, &config, leader_epoch, now_ms)
    }

    fn append_prepared_as_leader(
        &self,
        mut p: Prepared<'_>,
        config: &LogConfig,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<(AppendInfo, DurableToken)> {
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        let mut next = g.log_end_offset();
        for (h, hdr) in p.headers.iter_mut().zip(&mut p.patched) {
            batch::set_base_offset(hdr, next);
            batch::set_partition_leader_epoch(hdr, leader_epoch);
            h.base_offset = next;
            h.partition_leader_epoch = leader_epoch;
            next = h.next_offset();
        }
        let first = p.headers[0].base_offset;
        if g.epochs.assign(leader_epoch, first) {
            checkpoint::write_epochs(&self.disk, &self.dir, g.epochs.entries())?;
        }
        let log_append_time =
            (config.timestamp_type == TimestampType::LogAppendTime).then_some(now_ms);
        self.write_locked(g, p, Origin::Leader, now_ms, log_append_time)
    }

    /// Waits until the append behind `token` is durable (a no-op when the flush policy did not
    /// require a sync for it).
    pub fn await_durable(&self, token: DurableToken) -> Result<()> {
        match token.0 {
            Some(seq) => self.wait_durable(seq),
            None => Ok(()),
        }
    }

    /// Append batches copied from the leader, keeping their offsets and epochs. The first batch
    /// must start at or after the log end offset and batches must not overlap.
    pub fn append_as_follower(&self, records: &[u8], now_ms: i64) -> Result<AppendInfo> {
        let (info, durable) = self.append_as_follower_deferred(records, now_ms)?;
        self.await_durable(durable)?;
        Ok(info)
    }

    /// [`Log::append_as_follower`] that returns before the batches are durable: they are once
    /// [`Log::await_durable`] returns for the token (with [`FlushPolicy::EveryAppend`], the
    /// waiter is who syncs).
    pub fn append_as_follower_deferred(
        &self,
        records: &[u8],
        now_ms: i64,
    ) -> Result<(AppendInfo, DurableToken)> {
        let config = self.config();
        let p = prepare(records, &config, Origin::Follower, now_ms)?;
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        let mut expected = g.log_end_offset();
        for h in &p.headers {
            if h.base_offset < expected {
                return Err(LogError::NonContiguousAppend {
                    expected,
                    got: h.base_offset,
                });
            }
            expected = h.next_offset();
        }
        let mut changed = false;
        for h in &p.headers {
            changed |= g.epochs.assign(h.partition_leader_epoch, h.base_offset);
        }
        if changed {
            checkpoint::write_epochs(&self.disk, &self.dir, g.epochs.entries())?;
        }
        self.write_locked(g, p, Origin::Follower, now_ms, None)
    }

    /// Whether the log may be written: not offline, not closed.
    fn check_writable(&self, g: &Inner) -> Result<()> {
        if g.offline {
            return Err(LogError::Offline(self.dir.clone()));
        }
        self.check_not_closed(g)
    }

    /// Refuses any change to the files once [`Log::close`] began.
    pub(crate) fn check_not_closed(&self, g: &Inner) -> Result<()> {
        if g.closed {
            return Err(LogError::Closed(self.dir.clone()));
        }
        Ok(())
    }

    fn write_locked(
        &self,
        mut g: MutexGuard<'_, Inner>,
        p: Prepared<'_>,
        origin: Origin,
        now_ms: i64,
        log_append_time: Option<i64>,
    ) -> Result<(AppendInfo, DurableToken)> {
        assert_offsets_follow(&p.headers, g.log_end_offset(), origin);
        let first = p.headers[0].base_offset;
        let last = p.headers.last().map_or(first, |h| h.last_offset());
        let max_ts = p
            .headers
            .iter()
            .map(|h| h.max_timestamp)
            .max()
            .unwrap_or(-1);
        let len = p.len();
        self.maybe_roll(&mut g, len as u64, first, last, max_ts, now_ms)?;
        let interval = g.config.index_interval_bytes;
        let disk = self.disk.clone();
        g.active_mut()
            .append(&p.parts(), &p.headers, interval, &disk)?;
        debug_assert_eq!(g.log_end_offset(), last + 1, "log end after an append");
        g.debug_check_offsets();
        g.written_seq += 1;
        let seq = g.written_seq;
        g.unflushed_messages += p.records;
        let must_sync = match g.config.flush {
            FlushPolicy::EveryAppend => true,
            FlushPolicy::Interval { messages, ms } => {
                messages.is_some_and(|m| g.unflushed_messages >= m)
                    || ms.is_some_and(|ms| now_ms - g.last_flush_ms >= ms)
            }
        };
        if must_sync {
            g.unflushed_messages = 0;
            g.last_flush_ms = now_ms;
        }
        let info = AppendInfo {
            first_offset: first,
            last_offset: last,
            max_timestamp: max_ts,
            log_append_time,
            batches: p.headers.len(),
            bytes: len,
            log_start_offset: g.log_start_offset,
        };
        drop(g);
        Ok((info, DurableToken(must_sync.then_some(seq))))
    }

    /// Roll to a new segment if the active one is full (`segment.bytes`), old (`segment.ms`),
    /// or cannot index the incoming offsets. The old segment is synced and its indexes written.
    fn maybe_roll(
        &self,
        g: &mut Inner,
        bytes: u64,
        first: i64,
        last: i64,
        max_ts: i64,
        now_ms: i64,
    ) -> Result<()> {
        let a = g.active();
        if a.size == 0 {
            return Ok(());
        }
        let elapsed = match a.rolling_ts {
            Some(ts) if max_ts >= 0 && ts >= 0 => max_ts - ts,
            _ => now_ms - a.created_ms,
        };
        let full = a.size + bytes > g.config.segment_bytes;
        let old = elapsed > g.config.segment_ms;
        if !(full || old || !a.can_hold(last, bytes)) {
            return Ok(());
        }
        let new_base = first.max(a.next_offset);
        debug!(dir = %self.dir.display(), new_base, full, old, "rolling segment");
        let disk = self.disk.clone();
        let a = g.active_mut();
        a.write_indexes(&disk)?;
        a.sync_txn_index(&disk)?;
        a.release_reservation(&disk)?;
        // The old segment is synced by the next group commit (or flush), not here under the
        // lock: until then the recovery point stays below it.
        let pending = (Arc::clone(&a.file), a.log_path());
        let id = g.new_segment_id();
        let seg = Segment::create(&self.dir, new_base, now_ms, id, &disk)?;
        disk.sync_dir(&self.dir)?;
        g.segments.insert(new_base, seg);
        g.pending_sync.push(pending);
        checkpoint::write_offset(
            &disk,
            &self.dir,
            checkpoint::RECOVERY_POINT,
            g.recovery_point,
        )?;
        Ok(())
    }

    /// The latest leader epoch in the epoch cache.
    pub fn latest_epoch(&self) -> Option<i32> {
        lock(&self.inner).epochs.latest_epoch()
    }

    /// Starts leader epoch `epoch` at the log end offset, as a replica that becomes leader does,
    /// so that OffsetForLeaderEpoch answers for the new epoch before its first append.
    pub fn assign_epoch_at_end(&self, epoch: i32) -> Result<()> {
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        let end = g.log_end_offset();
        if g.epochs.assign(epoch, end) {
            checkpoint::write_epochs(&self.disk, &self.dir, g.epochs.entries())?;
        }
        Ok(())
    }

    /// The leader epoch cache's entries `(epoch, start offset)`.
    pub fn epoch_entries(&self) -> Vec<(i32, i64)> {
        lock(&self.inner).epochs.entries().to_vec()
    }

    /// OffsetForLeaderEpoch: `(epoch, end offset)` for `epoch` (Kafka's semantics: the start
    /// offset of the next higher epoch, or the log end offset for the latest epoch;
    /// `(-1, -1)` when unknown).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> (i32, i64) {
        let g = lock(&self.inner);
        g.epochs.end_offset_for(epoch, g.log_end_offset())
    }

    /// Remove every record at or after `offset` (a follower after a leader change). Whole
    /// batches go: a batch containing `offset` is removed too, as in Kafka. Returns whether
    /// anything was removed.
    pub fn truncate_to(&self, offset: i64) -> Result<bool> {
        if offset < 0 {
            return Err(LogError::InvalidArgument(format!("truncate to {offset}")));
        }
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        if offset >= g.log_end_offset() {
            return Ok(false);
        }
        let first_base = *g
            .segments
            .keys()
            .next()
            .expect("a log always has a segment");
        if offset < first_base {
            self.reset_locked(&mut g, offset)?;
        } else {
            let doomed: Vec<i64> = g.segments.range(offset + 1..).map(|(k, _)| *k).collect();
            for base in doomed {
                if let Some(seg) = g.segments.remove(&base) {
                    self.retire_segment(&mut g, &seg, None)?;
                }
            }
            self.disk.sync_dir(&self.dir)?;
            let disk = self.disk.clone();
            g.active_mut().truncate_to(offset, &disk)?;
            let leo = g.log_end_offset();
            if leo < g.log_start_offset {
                g.log_start_offset = leo;
                checkpoint::write_offset(&self.disk, &self.dir, checkpoint::LOG_START_OFFSET, leo)?;
            }
            g.high_watermark = g.high_watermark.min(leo);
            g.recovery_point = g.recovery_point.min(leo);
            g.debug_check_offsets();
            if g.epochs.truncate_from_end(leo) {
                checkpoint::write_epochs(&self.disk, &self.dir, g.epochs.entries())?;
            }
            self.rewind_cleaner(&mut g, leo)?;
        }
        checkpoint::write_offset(
            &self.disk,
            &self.dir,
            checkpoint::RECOVERY_POINT,
            g.recovery_point,
        )?;
        debug!(dir = %self.dir.display(), offset, leo = g.log_end_offset(), "truncated log");
        Ok(true)
    }

    /// Delete everything and start again, empty, at `offset` (Kafka's
    /// `truncateFullyAndStartAt`).
    pub fn truncate_fully_and_start_at(&self, offset: i64) -> Result<()> {
        if offset < 0 {
            return Err(LogError::InvalidArgument(format!("start at {offset}")));
        }
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        self.reset_locked(&mut g, offset)?;
        checkpoint::write_offset(&self.disk, &self.dir, checkpoint::RECOVERY_POINT, offset)
    }

    /// After a truncation to `offset`: whatever is appended from there on has not been
    /// compacted, so the cleaner's first dirty offset moves back to it.
    fn rewind_cleaner(&self, g: &mut Inner, offset: i64) -> Result<()> {
        match g.cleaner.as_mut() {
            Some(c) if c.first_dirty_offset > offset => {
                c.first_dirty_offset = offset;
                let c = *c;
                checkpoint::write_cleaner(&self.disk, &self.dir, c)
            }
            _ => Ok(()),
        }
    }

    fn reset_locked(&self, g: &mut Inner, offset: i64) -> Result<()> {
        for (_, seg) in std::mem::take(&mut g.segments) {
            self.retire_segment(g, &seg, None)?;
        }
        let id = g.new_segment_id();
        let seg = Segment::create(&self.dir, offset, g.last_flush_ms, id, &self.disk)?;
        g.segments.insert(offset, seg);
        self.disk.sync_dir(&self.dir)?;
        g.log_start_offset = offset;
        g.high_watermark = offset;
        g.recovery_point = offset;
        g.debug_check_offsets();
        g.epochs = LeaderEpochCache::default();
        checkpoint::write_epochs(&self.disk, &self.dir, &[])?;
        self.rewind_cleaner(g, offset)?;
        checkpoint::write_offset(&self.disk, &self.dir, checkpoint::LOG_START_OFFSET, offset)
    }

    /// DeleteRecords: move the log start offset to `offset` (at most the high watermark) and
    /// delete the segments wholly below it. Returns the new log start offset.
    pub fn delete_records_before(&self, offset: i64) -> Result<i64> {
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        if offset > g.high_watermark || offset < 0 {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: g.log_start_offset,
                log_end_offset: g.high_watermark,
            });
        }
        if offset <= g.log_start_offset {
            return Ok(g.log_start_offset);
        }
        g.log_start_offset = offset;
        g.debug_check_offsets();
        if g.epochs.truncate_from_start(offset) {
            checkpoint::write_epochs(&self.disk, &self.dir, g.epochs.entries())?;
        }
        checkpoint::write_offset(&self.disk, &self.dir, checkpoint::LOG_START_OFFSET, offset)?;
        self.delete_segments_below_start(&mut g)?;
        Ok(offset)
    }

    /// Delete non-active segments that end at or before the log start offset.
    pub(crate) fn delete_segments_below_start(&self, g: &mut Inner) -> Result<usize> {
        let lso = g.log_start_offset;
        let active = g.active().base;
        let doomed: Vec<i64> = g
            .segments
            .values()
            .filter(|s| s.base != active && s.next_offset <= lso)
            .map(|s| s.base)
            .collect();
        // only a prefix may go: segments are ordered and contiguous
        let mut n = 0;
        for base in doomed {
            if let Some(seg) = g.segments.remove(&base) {
                self.retire_segment(g, &seg, None)?;
                n += 1;
            }
        }
        if n > 0 {
            self.disk.sync_dir(&self.dir)?;
        }
        Ok(n)
    }

    /// Persist the high watermark, recovery point and log start offset (call periodically,
    /// like Kafka's checkpoint intervals).
    /// A checkpoint file is rewritten only when its value changed since this log last wrote it:
    /// an idle partition costs no fsyncs. A closed log has written its last checkpoints.
    pub fn checkpoint(&self) -> Result<()> {
        let mut guard = lock(&self.maintenance);
        let m = &mut *guard;
        let (hw, rp, lso) = {
            let g = lock(&self.inner);
            if g.closed {
                return Ok(());
            }
            (g.high_watermark, g.recovery_point, g.log_start_offset)
        };
        for (slot, name, value) in [
            (&mut m.high_watermark, checkpoint::HIGH_WATERMARK, hw),
            (&mut m.recovery_point, checkpoint::RECOVERY_POINT, rp),
            (&mut m.log_start_offset, checkpoint::LOG_START_OFFSET, lso),
        ] {
            if *slot != Some(value) {
                checkpoint::write_offset(&self.disk, &self.dir, name, value)?;
                *slot = Some(value);
            }
        }
        Ok(())
    }

    /// Sync everything, write all indexes and checkpoints and leave the clean-shutdown marker
    /// so the next open skips recovery. Takes a shared reference: other holders (requests,
    /// fetchers, the group coordinator) may keep the log, and from here on it refuses their
    /// writes (appends, truncation, DeleteRecords, retention, compaction) so that the marker
    /// stays true; reads go on. Once a close succeeded, closing again does nothing. A log
    /// unchanged since its open writes only the marker: everything else is durable already.
    pub fn close(&self) -> Result<()> {
        self.close_with(true)
    }

    /// [`Log::close`] for one of many logs closed together: the same, but the marker's name is
    /// not synced here (no other file depends on it). The caller makes the markers durable
    /// with one [`Disk::sync_fs`] after closing them all, instead of two syncs per log.
    pub fn close_leaving_marker_unsynced(&self) -> Result<()> {
        self.close_with(false)
    }

    fn close_with(&self, sync_marker: bool) -> Result<()> {
        // Waits out a retention, compaction or checkpoint run; none starts after this.
        let m = lock(&self.maintenance);
        {
            let mut g = lock(&self.inner);
            if g.marker_written {
                return Ok(());
            }
            if g.offline {
                return Err(LogError::Offline(self.dir.clone()));
            }
            g.closed = true;
        }
        // Every append admitted before the flag was written under the lock: this syncs them.
        self.flush()?;
        let mut g = lock(&self.inner);
        let disk = self.disk.clone();
        for seg in g.segments.values_mut() {
            if seg.indexes_dirty && !seg.indexes_implied_empty() {
                seg.write_indexes(&disk)?;
            }
            seg.sync_txn_index(&disk)?;
        }
        let active = g.active_mut();
        if active.has_reservation() {
            active.release_reservation(&disk)?;
            // The cut must be durable too: a trusted open takes the file's length as the data's.
            disk.sync_data(&active.file).at(&active.log_path())?;
        }
        g.recovery_point = g.log_end_offset();
        // The checkpoint files the open left (and no periodic checkpoint has rewritten since)
        // hold these values already.
        let at = &g.at_open;
        let rewritten = [
            (m.high_watermark, at.high_watermark),
            (m.recovery_point, at.log_end_offset),
            (m.log_start_offset, at.log_start_offset),
        ]
        .iter()
        .any(|(written, at_open)| written.is_some_and(|w| w != *at_open));
        if rewritten || AtOpen::of(&g) != g.at_open {
            self.write_final_checkpoints(&g)?;
        }
        let marker = self.dir.join(checkpoint::CLEAN_SHUTDOWN);
        if sync_marker {
            disk.write_atomic(&marker, b"0\n")?;
        } else {
            // Everything it vouches for is durable already; only its own name waits.
            disk.write_unsynced(&marker, b"0\n")?;
        }
        g.marker_written = true;
        retire::delete_all(&mut g.retired, &disk);
        debug!(dir = %self.dir.display(), leo = g.log_end_offset(), "log closed cleanly");
        Ok(())
    }

    /// Refuses every later change to the files, writing nothing (no sync, no checkpoints, no
    /// clean-shutdown marker), for a log whose directory is about to be deleted (a replica
    /// reassigned away, a deleted topic). A write in progress holds the locks this takes, so
    /// it finishes first: once this returns, no writer is half-way through a file in the
    /// directory (a checkpoint's `.tmp` about to be renamed), and every later one gets
    /// [`LogError::Closed`] instead of an I/O error about a file that went with the directory.
    pub fn close_for_deletion(&self) {
        let _m = lock(&self.maintenance);
        let mut g = lock(&self.inner);
        g.closed = true;
        // Their files go with the directory.
        g.retired.clear();
    }

    /// Every checkpoint file, each written atomically (file and directory synced).
    fn write_final_checkpoints(&self, g: &Inner) -> Result<()> {
        for (name, value) in [
            (checkpoint::HIGH_WATERMARK, g.high_watermark),
            (checkpoint::RECOVERY_POINT, g.recovery_point),
            (checkpoint::LOG_START_OFFSET, g.log_start_offset),
        ] {
            checkpoint::write_offset(&self.disk, &self.dir, name, value)?;
        }
        checkpoint::write_epochs(&self.disk, &self.dir, g.epochs.entries())
    }
}

/// The aborted-transaction index (`.txnindex` per segment): the broker hands each aborted
/// transaction's entry over when it appends (or replays at recovery) the abort marker.
impl Log {
    /// Appends `entry` to the aborted-transaction index of the segment holding its marker
    /// (`entry.last_offset`). Written, not synced: see [`Log::sync_txn_indexes`]. Refused
    /// (nothing written) when the marker lies outside the log or in no segment's batches, when
    /// the entry is not after the last one appended, or when its span is not one.
    pub fn append_aborted_txn(&self, entry: AbortedTxn) -> Result<()> {
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        let (start, end) = (g.log_start_offset, g.log_end_offset());
        let at = entry.last_offset;
        if at < start || at >= end {
            return Err(LogError::OffsetOutOfRange {
                offset: at,
                log_start_offset: start,
                log_end_offset: end,
            });
        }
        if entry.first_offset < 0 || entry.first_offset > at {
            return Err(LogError::InvalidArgument(format!(
                "aborted transaction spans [{}, {at}]",
                entry.first_offset
            )));
        }
        let last = g
            .segments
            .values()
            .rev()
            .find_map(|s| s.txn_index.entries().last());
        if let Some(last) = last.filter(|l| l.last_offset >= at) {
            return Err(LogError::InvalidArgument(format!(
                "aborted transaction ending at {at} is not after the last one, ending at {}",
                last.last_offset
            )));
        }
        let disk = self.disk.clone();
        match g.segments.range_mut(..=at).next_back() {
            Some((_, seg)) if at < seg.next_offset => seg.txn_index.append(entry, &disk),
            _ => Err(LogError::InvalidArgument(format!(
                "no batch at offset {at} for an abort marker"
            ))),
        }
    }

    /// Makes every aborted-transaction entry appended so far durable: syncs each index file
    /// written since its last sync, and the directory if one of them is new. The broker calls
    /// it before it writes a producer-state snapshot at offset X, so that the entries of every
    /// marker below X are durable whenever that snapshot is. Under the log's lock (appends
    /// wait): usually nothing or one small file to sync. A closed log has synced them all.
    pub fn sync_txn_indexes(&self) -> Result<()> {
        let mut g = lock(&self.inner);
        if g.offline {
            return Err(LogError::Offline(self.dir.clone()));
        }
        let mut new_name = false;
        let mut failure = None;
        for seg in g.segments.values_mut() {
            match seg.txn_index.sync(&self.disk) {
                Ok(new) => new_name |= new,
                Err(e) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        if failure.is_none() && new_name {
            match self.disk.sync_dir(&self.dir) {
                Ok(()) => g
                    .segments
                    .values_mut()
                    .for_each(|s| s.txn_index.name_synced()),
                Err(e) => failure = Some(e),
            }
        }
        // As for data: after a failed sync the page cache cannot be trusted.
        failure.map_or(Ok(()), |e| {
            g.offline = true;
            Err(e)
        })
    }

    /// Removes, durably, every aborted-transaction entry whose marker is at or after `offset`
    /// in every segment (the broker replays its producer state from there: at recovery from
    /// its snapshot, after a truncation).
    pub fn truncate_aborted_txns_from(&self, offset: i64) -> Result<()> {
        let mut g = lock(&self.inner);
        self.check_writable(&g)?;
        let disk = self.disk.clone();
        for seg in g.segments.values_mut() {
            seg.txn_index.truncate_from(offset, &disk)?;
        }
        Ok(())
    }
}

/// Group commit and the delayed deletion of removed segments, as the write path, close and
/// cleanup use them (the state and its rules live in `sync.rs` and `retire.rs`).
impl Log {
    /// Block until the append with sequence number `seq` is durable.
    pub(crate) fn wait_durable(&self, seq: u64) -> Result<()> {
        self.commit.wait_durable(
            seq,
            &self.dir,
            || self.sync_once(),
            || lock(&self.inner).offline = true,
        )
    }

    /// Sync rolled segments not yet synced, then the active one; returns the sequence number
    /// that the sync covers.
    fn sync_once(&self) -> Result<u64> {
        let (seq, pending, file, path, leo) = {
            let mut g = lock(&self.inner);
            let pending = std::mem::take(&mut g.pending_sync);
            let a = g.active();
            (
                g.written_seq,
                pending,
                Arc::clone(&a.file),
                a.log_path(),
                a.next_offset,
            )
        };
        for (f, p) in pending.iter().chain(std::iter::once(&(file, path))) {
            if let Err(e) = self.disk.sync_data(f) {
                return Err(LogError::io(p, e));
            }
        }
        let mut g = lock(&self.inner);
        let leo_now = g.log_end_offset();
        g.recovery_point = g.recovery_point.max(leo.min(leo_now));
        Ok(seq)
    }

    /// Sync the rolled segments not synced yet (without moving the recovery point). Compaction
    /// calls it before dropping records: the records that supersede them must be durable first,
    /// or a power loss could leave a key with no value at all.
    pub(crate) fn sync_rolled(&self) -> Result<()> {
        let pending = std::mem::take(&mut lock(&self.inner).pending_sync);
        for (i, (f, p)) in pending.iter().enumerate() {
            if let Err(e) = self.disk.sync_data(f) {
                // The next group commit retries them.
                lock(&self.inner)
                    .pending_sync
                    .extend(pending[i..].iter().cloned());
                return Err(LogError::io(p, e));
            }
        }
        Ok(())
    }

    /// Counters: appends written and fdatasyncs made for them (group commit makes the second
    /// smaller than the first under concurrency).
    pub fn stats(&self) -> LogStats {
        let appends = lock(&self.inner).written_seq;
        let syncs = self.commit.syncs();
        LogStats { appends, syncs }
    }

    /// Make every append so far durable (Kafka's `flush`).
    pub fn flush(&self) -> Result<()> {
        let seq = {
            let mut g = lock(&self.inner);
            if g.offline {
                return Err(LogError::Offline(self.dir.clone()));
            }
            g.unflushed_messages = 0;
            g.written_seq
        };
        self.wait_durable(seq)
    }

    /// Under [`FlushPolicy::Interval`], flush if `flush.ms` has passed since the last
    /// flush. Returns whether it flushed.
    pub fn flush_if_due(&self, now_ms: i64) -> Result<bool> {
        let seq = {
            let mut g = lock(&self.inner);
            let due = match g.config.flush {
                FlushPolicy::EveryAppend => false,
                FlushPolicy::Interval { ms, .. } => {
                    ms.is_some_and(|ms| now_ms - g.last_flush_ms >= ms)
                }
            };
            if !due || g.unflushed_messages == 0 {
                return Ok(false);
            }
            g.unflushed_messages = 0;
            g.last_flush_ms = now_ms;
            g.written_seq
        };
        self.wait_durable(seq)?;
        Ok(true)
    }

    /// Removes `seg` (already taken out of the segment map) from the disk: with a
    /// `file.delete.delay.ms` above 0 its files are renamed to `.deleted` and unlinked by a
    /// later [`Log::delete_retired_files`]; with 0 at once. `now_ms` starts the delay where
    /// the caller knows the time.
    pub(crate) fn retire_segment(
        &self,
        g: &mut Inner,
        seg: &Segment,
        now_ms: Option<i64>,
    ) -> Result<()> {
        let delay_ms = g.config.file_delete_delay_ms;
        retire::retire_segment(&mut g.retired, &self.disk, seg, delay_ms, now_ms)
    }

    /// Whether [`Log::delete_retired_files`] has work at `now_ms`: files whose delay has passed
    /// or has yet to start. No I/O.
    pub fn retired_files_pending(&self, now_ms: i64) -> bool {
        retire::any_pending(&lock(&self.inner).retired, now_ms)
    }

    /// Unlinks the files of removed segments whose `file.delete.delay.ms` has passed by
    /// `now_ms` (and starts the delay of those removed without a clock). Returns how many
    /// files went. A file that cannot be unlinked stays queued and fails the call.
    pub fn delete_retired_files(&self, now_ms: i64) -> Result<usize> {
        let due = retire::take_due(&mut lock(&self.inner).retired, now_ms);
        // Unlinked outside the log's lock: freeing a large file's blocks takes a while.
        let done = retire::unlink_due(&self.disk, &self.dir, due);
        if !done.left.is_empty() {
            lock(&self.inner).retired.extend(done.left);
        }
        done.failure.map_or(Ok(done.deleted), Err)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(base_offset: i64, last_offset_delta: i32) -> BatchHeader {
        BatchHeader {
            base_offset,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta,
            base_timestamp: -1,
            max_timestamp: -1,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
            record_count: last_offset_delta + 1,
        }
    }

    #[test]
    fn batches_that_follow_the_log_end_pass() {
        assert_offsets_follow(&[header(10, 2), header(13, 0)], 10, Origin::Leader);
        assert_offsets_follow(&[header(12, 2), header(20, 0)], 10, Origin::Follower);
    }

    #[test]
    #[should_panic(expected = "leader batch not at the log end")]
    fn a_leader_gap_is_caught() {
        assert_offsets_follow(&[header(10, 2), header(14, 0)], 10, Origin::Leader);
    }

    #[test]
    #[should_panic(expected = "below the log end")]
    fn a_follower_overlap_is_caught() {
        assert_offsets_follow(&[header(10, 2), header(12, 0)], 10, Origin::Follower);
    }

    #[test]
    #[should_panic(expected = "ends before it starts")]
    fn a_negative_span_is_caught() {
        assert_offsets_follow(&[header(10, -1)], 10, Origin::Follower);
    }
}
