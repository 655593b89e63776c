//! Cleanup: retention (`retention.ms`, `retention.bytes`, log start offset) and compaction
//! (`cleanup.policy=compact`). Both work on whole non-active segments below the high
//! watermark (and, for compaction, below the last stable offset; see `cleaner_txn.rs` for what
//! it does with transactions); compaction does its reading and writing without holding the
//! log's lock and only takes it to swap a cleaned segment in.

use std::collections::HashMap;
use std::fs;
use std::sync::Arc;

use bytes::Bytes;
use tracing::info;

use crate::batch::write_varint;
use crate::batch::BatchHeader;
use crate::checkpoint;
use crate::cleaner_txn::{MarkerFate, TxnCleaning};
use crate::config::LogConfig;
use crate::disk::Disk;
use crate::error::{IoContext, LogError, Result};
use crate::log::{lock, Log};
use crate::records::{self, BatchSpec};
use crate::segment::{file_name, scan, ScanEnd, Segment, CLEANED, SWAP};
use crate::txn::AbortedTxn;
use crate::validate::{RecordStream, RecordView, STORED};

/// What a retention pass removed.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RetentionStats {
    /// Segments deleted.
    pub segments_deleted: usize,
    /// Bytes deleted.
    pub bytes_deleted: u64,
    /// Log start offset afterwards.
    pub log_start_offset: i64,
}

/// What a compaction pass did.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct CompactionStats {
    /// Segments examined.
    pub segments_cleaned: usize,
    /// Segments whose contents changed.
    pub segments_rewritten: usize,
    /// Records read.
    pub records_read: u64,
    /// Records kept.
    pub records_kept: u64,
    /// Tombstones dropped because their delete horizon passed.
    pub tombstones_dropped: u64,
    /// Records of aborted transactions dropped.
    pub aborted_records_dropped: u64,
    /// Commit markers dropped: their transaction had no record left, and their delete horizon
    /// passed.
    pub markers_dropped: u64,
    /// Bytes before and after in the rewritten segments.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
    /// Nothing to do: too little dirty data (`min.cleanable.dirty.ratio`) and no tombstone due.
    pub skipped: bool,
    /// Offsets below this are compacted now (the new first dirty offset).
    pub cleaned_up_to: i64,
    /// Bytes of the cleanable segments not yet compacted, before the pass.
    pub dirty_bytes: u64,
    /// Bytes of the cleanable segments (compacted or not), before the pass.
    pub cleanable_bytes: u64,
}

impl CompactionStats {
    /// Whether the pass compacted anything (the log cleaner then looks for more at once,
    /// rather than after `log.cleaner.backoff.ms`).
    pub fn cleaned(&self) -> bool {
        !self.skipped && self.segments_cleaned > 0
    }
}

/// Key-map memory one compaction may use by default (Kafka's `log.cleaner.dedupe.buffer.size`
/// default). A log with more distinct dirty keys is compacted over several passes.
pub const DEFAULT_MAP_BUDGET: usize = 128 << 20;

/// What a key-map entry costs besides the key bytes (key handle, offset, table slot).
const MAP_ENTRY_OVERHEAD: usize = 64;

struct Snapshot {
    base: i64,
    next_offset: i64,
    /// Timestamp of the segment's first batch (its max timestamp), if any.
    first_ts: Option<i64>,
    id: u64,
    size: u64,
    file: Arc<fs::File>,
    path: std::path::PathBuf,
}

/// Runs `f` on every batch of a segment snapshot (with its position), fully validated. An
/// error from `f`, or a segment that does not read cleanly to its end, fails the call.
fn for_each_batch(
    s: &Snapshot,
    mut f: impl FnMut(u64, &BatchHeader, &[u8]) -> Result<()>,
) -> Result<()> {
    let mut failure = None;
    let end = scan(&s.file, 0, s.size, true, |pos, h, b| match f(pos, h, b) {
        Ok(()) => Ok(true),
        Err(e) => {
            let text = e.to_string();
            failure = Some(e);
            Err(text)
        }
    });
    if let Some(e) = failure {
        return Err(e);
    }
    match end.at(&s.path)? {
        ScanEnd::Complete => Ok(()),
        other => Err(LogError::CorruptFile {
            path: s.path.clone(),
            reason: format!("segment unreadable during cleaning: {other:?}"),
        }),
    }
}

/// Adds the keys of a segment snapshot to `last` (key -> last offset), reading it batch by
/// batch and record by record, and counts the map's new bytes.
fn map_keys(
    s: &Snapshot,
    txns: &TxnCleaning,
    last: &mut HashMap<Bytes, i64>,
    map_bytes: &mut usize,
) -> Result<()> {
    for_each_batch(s, |_, h, b| {
        // An aborted record never shadows a committed one.
        if h.is_control() || txns.is_aborted(h) {
            return Ok(());
        }
        let mut stream = RecordStream::new(h, b, STORED.cap)?;
        while let Some(r) = stream.next_record()? {
            let offset = h.base_offset.saturating_add(r.offset_delta);
            if let Some(k) = r.key {
                match last.get_mut(k) {
                    Some(o) => *o = offset,
                    None => {
                        *map_bytes += k.len() + MAP_ENTRY_OVERHEAD;
                        last.insert(Bytes::copy_from_slice(k), offset);
                    }
                }
            }
        }
        Ok(())
    })
}

/// What the keep rules need besides the batch.
struct RewriteContext<'a> {
    /// Last offset of every key of the mapped dirty section.
    last: &'a HashMap<Bytes, i64>,
    now_ms: i64,
    delete_retention_ms: i64,
}

/// What a compaction pass starts from, taken under the log's lock.
struct Cleanable {
    cfg: LogConfig,
    snaps: Vec<Snapshot>,
    ckpt: Option<checkpoint::CleanerCheckpoint>,
    log_start: i64,
    txns: TxnCleaning,
}

/// Whether compaction runs: a kept tombstone's delete horizon has passed, the oldest dirty
/// record is `max.compaction.lag.ms` old, or the dirty section is at least
/// `min.cleanable.dirty.ratio` of the cleanable bytes.
fn compaction_due(
    cfg: &LogConfig,
    snaps: &[Snapshot],
    ckpt: Option<checkpoint::CleanerCheckpoint>,
    first_dirty: i64,
    now_ms: i64,
) -> bool {
    let total: u64 = snaps.iter().map(|s| s.size).sum();
    let dirty: u64 = snaps
        .iter()
        .filter(|s| s.next_offset > first_dirty)
        .map(|s| s.size)
        .sum();
    let horizon_due = ckpt
        .and_then(|c| c.earliest_delete_horizon)
        .is_some_and(|h| now_ms >= h);
    // max.compaction.lag.ms: the oldest dirty record has waited long enough.
    let lag_due = snaps
        .iter()
        .find(|s| s.next_offset > first_dirty)
        .and_then(|s| s.first_ts)
        .is_some_and(|t| now_ms.saturating_sub(t) >= cfg.max_compaction_lag_ms);
    let ratio = dirty as f64 / total.max(1) as f64;
    let due = horizon_due || (lag_due && dirty > 0);
    due || (dirty != 0 && ratio >= cfg.min_cleanable_dirty_ratio)
}

/// Pass 1 of compaction: the last offset of every key in the dirty section (from
/// `first_dirty`), within `map_budget` (the segment that crosses it is still mapped whole: a
/// bound, not an exact limit), and the end of the mapped range.
fn map_dirty_keys(
    snaps: &[Snapshot],
    txns: &TxnCleaning,
    first_dirty: i64,
    map_budget: usize,
) -> Result<(HashMap<Bytes, i64>, i64)> {
    let mut last: HashMap<Bytes, i64> = HashMap::new();
    let mut map_bytes = 0usize;
    let mut end = first_dirty;
    for s in snaps.iter().filter(|s| s.next_offset > first_dirty) {
        if map_bytes > map_budget {
            break;
        }
        map_keys(s, txns, &mut last, &mut map_bytes)?;
        end = s.next_offset;
    }
    Ok((last, end))
}

/// The fate of one record under the keep rules.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Fate {
    Keep,
    KeepTombstone,
    Drop,
    DropTombstone,
}

fn fate(h: &BatchHeader, r: &RecordView<'_>, ctx: &RewriteContext<'_>) -> Fate {
    let offset = h.base_offset.saturating_add(r.offset_delta);
    let latest = match r.key {
        None => false,
        Some(k) => ctx.last.get(k).is_none_or(|o| *o == offset),
    };
    let horizon_passed = h.delete_horizon().is_some_and(|d| ctx.now_ms >= d);
    match (latest, r.value.is_none()) {
        (false, _) => Fate::Drop,
        (true, false) => Fate::Keep,
        (true, true) if horizon_passed => Fate::DropTombstone,
        (true, true) => Fate::KeepTombstone,
    }
}

fn record_ts(h: &BatchHeader, r: &RecordView<'_>) -> i64 {
    if h.is_log_append_time() {
        h.max_timestamp
    } else {
        h.base_timestamp.wrapping_add(r.timestamp_delta)
    }
}

/// Applies the compaction rules to one (non-control) batch: `None` when it stays byte for
/// byte, else its replacement (empty when nothing of it is kept); and whether it keeps any
/// record. A key the map does not know
/// is below the first dirty offset, where keys are already unique: it stays. Keyless records
/// have no place in a compacted log. Tombstones get a delete horizon on their first cleaning
/// and go on the first cleaning after it. Records are streamed twice (decide, then rewrite),
/// so memory stays at the rewritten records section, never a decoded copy of every record.
fn keep_rules(
    h: &BatchHeader,
    b: &[u8],
    ctx: &RewriteContext<'_>,
    stats: &mut CompactionStats,
    earliest_horizon: &mut Option<i64>,
) -> Result<(Option<Vec<u8>>, bool)> {
    let t = tally(h, b, ctx)?;
    stats.records_read += t.read;
    stats.records_kept += t.kept;
    stats.tombstones_dropped += t.tombstones_dropped;
    let horizon = (t.tombstones > 0).then(|| {
        h.delete_horizon()
            .unwrap_or(ctx.now_ms + ctx.delete_retention_ms)
    });
    if let Some(t) = horizon {
        note_horizon(earliest_horizon, t);
    }
    let needs_horizon = t.tombstones > 0 && h.delete_horizon().is_none();
    if t.kept == t.read && !needs_horizon {
        return Ok((None, t.kept > 0));
    }
    let Some(first_ts) = t.first_kept_ts else {
        return Ok((Some(Vec::new()), false));
    };
    // Offsets deltas stay (same base offset); timestamp deltas move to the new base timestamp.
    let base_ts = horizon.unwrap_or(first_ts);
    let kept = |r: &RecordView<'_>| !matches!(fate(h, r, ctx), Fate::Drop | Fate::DropTombstone);
    let new = rebuild(h, b, kept, base_ts, horizon)?;
    Ok((Some(new), true))
}

fn note_horizon(earliest: &mut Option<i64>, t: i64) {
    *earliest = Some(earliest.map_or(t, |e| e.min(t)));
}

/// A batch's replacement under the transaction rules, or `None` when it goes through the keep
/// rules as any batch does: an aborted transaction's batch goes whole; a commit marker whose
/// transaction has no record left gets a delete horizon, then goes.
fn txn_rules(
    h: &BatchHeader,
    b: &[u8],
    ctx: &RewriteContext<'_>,
    txns: &mut TxnCleaning,
    stats: &mut CompactionStats,
    earliest_horizon: &mut Option<i64>,
) -> Result<Option<Option<Vec<u8>>>> {
    if txns.is_aborted(h) {
        let n = u64::try_from(h.record_count).unwrap_or(0);
        stats.records_read += n;
        stats.aborted_records_dropped += n;
        return Ok(Some(Some(Vec::new())));
    }
    if !h.is_control() {
        return Ok(None);
    }
    Ok(Some(
        match txns.marker_fate(h, b, ctx.now_ms, ctx.delete_retention_ms)? {
            MarkerFate::Keep => {
                if let Some(d) = h.delete_horizon() {
                    note_horizon(earliest_horizon, d);
                }
                None
            }
            MarkerFate::Drop => {
                stats.markers_dropped += 1;
                Some(Vec::new())
            }
            MarkerFate::SetHorizon(d) => {
                note_horizon(earliest_horizon, d);
                Some(rebuild(h, b, |_| true, d, Some(d))?)
            }
        },
    ))
}

/// What the keep rules make of one batch's records (first of the two streams).
struct Tally {
    read: u64,
    kept: u64,
    /// Tombstones kept.
    tombstones: u64,
    tombstones_dropped: u64,
    first_kept_ts: Option<i64>,
}

fn tally(h: &BatchHeader, b: &[u8], ctx: &RewriteContext<'_>) -> Result<Tally> {
    let mut t = Tally {
        read: 0,
        kept: 0,
        tombstones: 0,
        tombstones_dropped: 0,
        first_kept_ts: None,
    };
    let mut stream = RecordStream::new(h, b, STORED.cap)?;
    while let Some(r) = stream.next_record()? {
        t.read += 1;
        match fate(h, &r, ctx) {
            Fate::Drop => continue,
            Fate::DropTombstone => {
                t.tombstones_dropped += 1;
                continue;
            }
            Fate::KeepTombstone => t.tombstones += 1,
            Fate::Keep => {}
        }
        t.kept += 1;
        t.first_kept_ts.get_or_insert(record_ts(h, &r));
    }
    Ok(t)
}

/// The batch `h` rebuilt with the records `keep` keeps (second stream), timestamp deltas
/// relative to `base_ts`, and the delete `horizon` if it holds tombstones (or is a marker due to
/// go).
fn rebuild(
    h: &BatchHeader,
    b: &[u8],
    keep: impl Fn(&RecordView<'_>) -> bool,
    base_ts: i64,
    horizon: Option<i64>,
) -> Result<Vec<u8>> {
    let mut raw = Vec::new();
    let mut body = Vec::new();
    let mut max_ts = -1i64;
    let mut kept = 0u64;
    let mut stream = RecordStream::new(h, b, STORED.cap)?;
    while let Some(r) = stream.next_record()? {
        if !keep(&r) {
            continue;
        }
        kept += 1;
        let ts = record_ts(h, &r);
        max_ts = max_ts.max(ts);
        body.clear();
        body.push(0); // record attributes: unused
        write_varint(&mut body, ts.wrapping_sub(base_ts));
        write_varint(&mut body, r.offset_delta);
        body.extend_from_slice(r.tail);
        write_varint(&mut raw, body.len() as i64);
        raw.extend_from_slice(&body);
    }
    let spec = BatchSpec {
        base_offset: h.base_offset,
        last_offset_delta: Some(h.last_offset_delta),
        partition_leader_epoch: h.partition_leader_epoch,
        codec: h
            .codec()
            .ok_or_else(|| LogError::InvalidRecord("codec".into()))?,
        log_append_time: h.is_log_append_time(),
        max_timestamp: None,
        transactional: h.is_transactional(),
        control: h.is_control(),
        delete_horizon: horizon,
        producer_id: h.producer_id,
        producer_epoch: h.producer_epoch,
        base_sequence: h.base_sequence,
    };
    let max_ts = if h.is_log_append_time() {
        h.max_timestamp
    } else {
        max_ts
    };
    let count = i32::try_from(kept).map_err(|_| LogError::InvalidRecord("record count".into()))?;
    records::encode_raw_batch(&spec, h.last_offset_delta, base_ts, max_ts, count, &raw)
}

/// A segment's cleaned copy, written and synced.
struct Cleaned {
    file: fs::File,
    len: u64,
    /// Offsets of the abort markers it no longer holds.
    dropped_aborts: Vec<i64>,
}

/// Writes `.log.cleaned` through the log's `Disk` (so fault injection sees it), buffered.
struct CleanedWriter {
    disk: Disk,
    path: std::path::PathBuf,
    file: fs::File,
    buf: Vec<u8>,
    written: u64,
}

/// Bytes buffered before a write to `.log.cleaned`.
const CLEANED_WRITE_BUFFER: usize = 1 << 20;

impl CleanedWriter {
    fn create(disk: &Disk, path: &std::path::Path) -> Result<CleanedWriter> {
        let file = disk.create_file(path).at(path)?;
        Ok(CleanedWriter {
            disk: disk.clone(),
            path: path.to_path_buf(),
            file,
            buf: Vec::with_capacity(CLEANED_WRITE_BUFFER),
            written: 0,
        })
    }

    /// Copies the first `len` bytes of the original segment.
    fn copy_prefix(
        &mut self,
        from: &fs::File,
        from_path: &std::path::Path,
        len: u64,
    ) -> Result<()> {
        let mut at = 0u64;
        while at < len {
            let n = (len - at).min(CLEANED_WRITE_BUFFER as u64) as usize;
            let chunk = Segment::read_at(from, at, n).at(from_path)?;
            self.write(&chunk)?;
            at += n as u64;
        }
        Ok(())
    }

    fn write(&mut self, bytes: &[u8]) -> Result<()> {
        self.buf.extend_from_slice(bytes);
        if self.buf.len() >= CLEANED_WRITE_BUFFER {
            self.flush()?;
        }
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        if self.buf.is_empty() {
            return Ok(());
        }
        self.disk
            .write_at(&self.file, &self.buf, self.written)
            .map_err(|e| LogError::io(&self.path, e))?;
        self.written += self.buf.len() as u64;
        self.buf.clear();
        Ok(())
    }

    fn finish(mut self) -> Result<Cleaned> {
        self.flush()?;
        self.disk
            .sync_data(&self.file)
            .map_err(|e| LogError::io(&self.path, e))?;
        Ok(Cleaned {
            file: self.file,
            len: self.written,
            dropped_aborts: Vec::new(),
        })
    }
}

impl Log {
    /// Apply `retention.ms` and `retention.bytes` (if `cleanup.policy` includes `delete`) and
    /// drop segments wholly below the log start offset. Never deletes the active segment nor
    /// anything at or above the high watermark.
    pub fn apply_retention(&self, now_ms: i64) -> Result<RetentionStats> {
        let _m = lock(&self.maintenance);
        let mut g = lock(&self.inner);
        self.check_not_closed(&g)?;
        let cfg = g.config.clone();
        let active = g.active().base;
        let hw = g.high_watermark;
        let mut stats = RetentionStats::default();
        let mut total = g.size_bytes();
        let mut doomed = Vec::new();
        for seg in g.segments.values() {
            if seg.base == active || seg.next_offset > hw {
                break;
            }
            let below_start = seg.next_offset <= g.log_start_offset;
            let ts = if seg.max_ts >= 0 {
                seg.max_ts
            } else {
                seg.created_ms
            };
            let by_time =
                cfg.cleanup_policy.delete && cfg.retention_ms.is_some_and(|ms| now_ms - ts > ms);
            let by_size = cfg.cleanup_policy.delete
                && cfg
                    .retention_bytes
                    .is_some_and(|max| total - seg.size >= max);
            if !(below_start || by_time || by_size) {
                break;
            }
            total -= seg.size;
            doomed.push(seg.base);
        }
        for base in doomed {
            if let Some(seg) = g.segments.remove(&base) {
                self.retire_segment(&mut g, &seg, Some(now_ms))?;
                stats.segments_deleted += 1;
                stats.bytes_deleted += seg.size;
            }
        }
        let first = *g.segments.keys().next().expect("active segment remains");
        if stats.segments_deleted > 0 {
            self.disk.sync_dir(&self.dir)?;
            if first > g.log_start_offset {
                g.log_start_offset = first;
                // Only empty segments (offsets lost in a power loss) lie above the high
                // watermark here; it never stays below the log start.
                g.high_watermark = g.high_watermark.max(first);
                g.debug_check_offsets();
                if g.epochs.truncate_from_start(first) {
                    checkpoint::write_epochs(&self.disk, &self.dir, g.epochs.entries())?;
                }
                checkpoint::write_offset(
                    &self.disk,
                    &self.dir,
                    checkpoint::LOG_START_OFFSET,
                    first,
                )?;
            }
            info!(dir = %self.dir.display(), deleted = stats.segments_deleted, lso = g.log_start_offset, "retention deleted segments");
        }
        stats.log_start_offset = g.log_start_offset;
        Ok(stats)
    }

    /// Whether a compaction pass has anything to look at: `cleanup.policy` includes
    /// `compact` and a rolled segment lies below the high watermark. No I/O: the log cleaner
    /// asks before it takes a thread for the pass.
    pub fn has_cleanable_segments(&self) -> bool {
        let g = lock(&self.inner);
        let active = g.active().base;
        g.config.cleanup_policy.compact
            && !g.closed
            && g.segments
                .values()
                .next()
                .is_some_and(|s| s.base != active && s.next_offset <= g.high_watermark)
    }

    /// Compact the log (if `cleanup.policy` includes `compact`) with the default key-map
    /// budget; see [`Log::compact_within`].
    pub fn compact(&self, now_ms: i64) -> Result<CompactionStats> {
        self.compact_within(now_ms, DEFAULT_MAP_BUDGET)
    }

    /// Compact the non-active segments below the high watermark, keeping only the last record
    /// of each key. Kafka's scheme: the keys of the dirty section (appended since the last
    /// compaction, per the cleaner checkpoint) are mapped to their last offsets, segment by
    /// segment until about `map_budget` bytes of map; then every segment up to the end of the
    /// mapped range is rewritten without the records the map supersedes, and the checkpoint
    /// moves there. Tombstones get a delete horizon of `now + delete.retention.ms` the first
    /// time they are cleaned (KIP-534) and are dropped by the first cleaning after it. Runs
    /// only when the dirty section is at least `min.cleanable.dirty.ratio` of the cleanable
    /// bytes, a kept tombstone's horizon has passed, or the oldest dirty record is
    /// `max.compaction.lag.ms` old; segments younger than `min.compaction.lag.ms` wait. Runs
    /// beside appends and reads.
    pub fn compact_within(&self, now_ms: i64, map_budget: usize) -> Result<CompactionStats> {
        self.compact_below(now_ms, map_budget, i64::MAX)
    }

    /// [`Log::compact_within`] that looks at no segment reaching `last_stable_offset`: records
    /// of a transaction still open (which may yet abort) neither shadow nor are shadowed. The
    /// partition passes its last stable offset.
    pub fn compact_below(
        &self,
        now_ms: i64,
        map_budget: usize,
        last_stable_offset: i64,
    ) -> Result<CompactionStats> {
        let _m = lock(&self.maintenance);
        let Cleanable {
            cfg,
            snaps,
            ckpt,
            log_start,
            mut txns,
        } = self.cleanable(now_ms, last_stable_offset)?;
        let first_dirty = ckpt
            .map_or(log_start, |c| c.first_dirty_offset)
            .max(log_start);
        let mut stats = CompactionStats {
            cleaned_up_to: first_dirty,
            ..CompactionStats::default()
        };
        if !cfg.cleanup_policy.compact || snaps.is_empty() {
            return Ok(stats);
        }
        stats.cleanable_bytes = snaps.iter().map(|s| s.size).sum();
        stats.dirty_bytes = snaps
            .iter()
            .filter(|s| s.next_offset > first_dirty)
            .map(|s| s.size)
            .sum();
        if !compaction_due(&cfg, &snaps, ckpt, first_dirty, now_ms) {
            stats.skipped = true;
            return Ok(stats);
        }
        // Everything compaction reads is durable before anything it supersedes is dropped.
        self.sync_rolled()?;
        let (last, end) = map_dirty_keys(&snaps, &txns, first_dirty, map_budget)?;
        // Pass 2: rewrite each segment up to the end of the mapped range that loses something.
        // Below the first dirty offset keys are already unique: a key the map does not know
        // stays.
        let mut earliest_horizon: Option<i64> = None;
        let ctx = RewriteContext {
            last: &last,
            now_ms,
            delete_retention_ms: cfg.delete_retention_ms,
        };
        for s in snaps.iter().filter(|s| s.next_offset <= end) {
            stats.segments_cleaned += 1;
            let Some(cleaned) =
                self.rewrite(s, &ctx, &mut txns, &mut stats, &mut earliest_horizon)?
            else {
                continue;
            };
            stats.segments_rewritten += 1;
            stats.bytes_before += s.size;
            stats.bytes_after += cleaned.len;
            self.swap_in(s, cleaned, &cfg, now_ms)?;
        }
        let checkpoint = {
            let mut g = lock(&self.inner);
            // A truncation meanwhile leaves less compacted.
            let c = checkpoint::CleanerCheckpoint {
                first_dirty_offset: end.min(g.log_end_offset()),
                earliest_delete_horizon: earliest_horizon,
            };
            g.cleaner = Some(c);
            c
        };
        checkpoint::write_cleaner(&self.disk, &self.dir, checkpoint)?;
        stats.cleaned_up_to = checkpoint.first_dirty_offset;
        info!(dir = %self.dir.display(), ?stats, "compaction done");
        Ok(stats)
    }

    /// Under the log's lock: the configuration, the cleaner checkpoint, the log start offset
    /// and snapshots of the cleanable segments: the non-active segments below the high
    /// watermark whose newest record is at least `min.compaction.lag.ms` old, a prefix of the
    /// log; and the aborted transactions of the whole log below that bound.
    fn cleanable(&self, now_ms: i64, last_stable_offset: i64) -> Result<Cleanable> {
        let g = lock(&self.inner);
        self.check_not_closed(&g)?;
        let active = g.active().base;
        let lag = g.config.min_compaction_lag_ms;
        let bound = g.high_watermark.min(last_stable_offset);
        let snaps: Vec<Snapshot> = g
            .segments
            .values()
            .take_while(|s| {
                s.base != active
                    && s.next_offset <= bound
                    && (lag == 0 || s.max_ts < 0 || s.max_ts <= now_ms.saturating_sub(lag))
            })
            .map(|s| Snapshot {
                base: s.base,
                next_offset: s.next_offset,
                first_ts: s.rolling_ts.filter(|t| *t >= 0),
                id: s.id,
                size: s.size,
                file: Arc::clone(&s.file),
                path: s.log_path(),
            })
            .collect();
        // Only transactions with data in the snapshots matter.
        let snap_end = snaps.last().map_or(i64::MIN, |s| s.next_offset);
        let aborted = g
            .segments
            .values()
            .flat_map(|s| s.txn_index.entries().iter().copied())
            .filter(|e| e.first_offset < snap_end);
        Ok(Cleanable {
            cfg: g.config.clone(),
            txns: TxnCleaning::new(aborted, bound),
            snaps,
            ckpt: g.cleaner,
            log_start: g.log_start_offset,
        })
    }

    /// Streams segment `s` through the keep rules. Nothing is written while every batch stays
    /// as it is; at the first change the unchanged prefix is copied from the original into
    /// `.log.cleaned` and the rest follows batch by batch, so memory stays at one batch and
    /// the write buffer. Returns the synced copy, or `None` when nothing changed.
    fn rewrite(
        &self,
        s: &Snapshot,
        ctx: &RewriteContext<'_>,
        txns: &mut TxnCleaning,
        stats: &mut CompactionStats,
        earliest_horizon: &mut Option<i64>,
    ) -> Result<Option<Cleaned>> {
        let path = self.dir.join(file_name(s.base, CLEANED));
        let mut out: Option<CleanedWriter> = None;
        let streamed = for_each_batch(s, |pos, h, b| {
            let rewritten = match txn_rules(h, b, ctx, txns, stats, earliest_horizon)? {
                Some(decided) => decided,
                None => {
                    let (new, kept_any) = keep_rules(h, b, ctx, stats, earliest_horizon)?;
                    txns.data_seen(h, kept_any);
                    new
                }
            };
            match (&mut out, rewritten) {
                (None, None) => Ok(()),
                (None, Some(new)) => {
                    let w = out.insert(CleanedWriter::create(&self.disk, &path)?);
                    w.copy_prefix(&s.file, &s.path, pos)?;
                    w.write(&new)
                }
                (Some(w), None) => w.write(b),
                (Some(w), Some(new)) => w.write(&new),
            }
        });
        let dropped_aborts = txns.take_dropped_aborts();
        let finished = streamed.and_then(|()| out.map(CleanedWriter::finish).transpose());
        if finished.is_err() {
            let _ = self.disk.remove_file(&path);
        }
        finished.map(|c| {
            c.map(|c| Cleaned {
                dropped_aborts,
                ..c
            })
        })
    }

    /// Replace segment `s` with its cleaned copy (already written and synced as
    /// `.log.cleaned`), crash-safely: under the lock, if the segment is unchanged, rename to
    /// `.log.swap`, retire the original's files (renamed to `.deleted` until
    /// `file.delete.delay.ms` has passed), rename the `.swap` to `.log`, write the new indexes.
    /// A crash before `.swap` exists keeps the original; after, open completes the swap.
    fn swap_in(
        &self,
        s: &Snapshot,
        cleaned_copy: Cleaned,
        cfg: &LogConfig,
        now_ms: i64,
    ) -> Result<()> {
        let disk: &Disk = &self.disk;
        let cleaned = self.dir.join(file_name(s.base, CLEANED));
        let swap = self.dir.join(file_name(s.base, SWAP));
        let file = cleaned_copy.file;
        let cleaned_copy_dropped = cleaned_copy.dropped_aborts;
        // Validate and index the new file before taking the lock.
        let mut seg = Segment::from_file(
            &self.dir,
            s.base,
            file,
            cfg.index_interval_bytes,
            now_ms,
            0,
            disk,
        )?;
        let mut g = lock(&self.inner);
        seg.id = g.new_segment_id();
        let unchanged = g
            .segments
            .get(&s.base)
            .is_some_and(|cur| cur.id == s.id && cur.size == s.size && cur.base != g.active().base);
        if !unchanged {
            drop(g);
            disk.remove_file(&cleaned).at(&cleaned)?;
            return Ok(());
        }
        disk.rename(&cleaned, &swap).at(&swap)?;
        disk.sync_dir(&self.dir)?;
        let mut old = g.segments.remove(&s.base).expect("checked above");
        if seg.size == 0 {
            // The .swap goes first: a crash before the original is retired keeps it whole.
            disk.remove_file(&swap).at(&swap)?;
            self.retire_segment(&mut g, &old, Some(now_ms))?;
            disk.sync_dir(&self.dir)?;
            return Ok(());
        }
        // While it holds every abort marker, the compacted copy keeps the original's
        // aborted-transaction index, file and all, and the file never leaves its name (a crash
        // anywhere in the swap keeps it). Otherwise the original's goes with its other files and
        // a new one holds the entries whose markers stay: a crash before it is written loses
        // only entries of this (cleaned) segment, whose aborted records are gone already.
        let kept_entries: Vec<AbortedTxn> = old
            .txn_index
            .entries()
            .iter()
            .filter(|e| !cleaned_copy_dropped.contains(&e.last_offset))
            .copied()
            .collect();
        if cleaned_copy_dropped.is_empty() {
            seg.txn_index = old.txn_index.take();
        }
        // The original's other files (its stale indexes too) are retired like a deleted
        // segment's; a crash from here on leaves the .swap, which open completes.
        self.retire_segment(&mut g, &old, Some(now_ms))?;
        disk.sync_dir(&self.dir)?;
        disk.rename(&swap, &old.log_path()).at(&old.log_path())?;
        disk.sync_dir(&self.dir)?;
        seg.write_indexes(disk)?;
        if !cleaned_copy_dropped.is_empty() {
            for e in kept_entries {
                seg.txn_index.append(e, disk)?;
            }
            if seg.txn_index.sync(disk)? {
                disk.sync_dir(&self.dir)?;
                seg.txn_index.name_synced();
            }
        }
        debug_assert!(
            seg.txn_index
                .entries()
                .last()
                .is_none_or(|e| e.last_offset < seg.next_offset),
            "an aborted-transaction index entry past its segment"
        );
        g.segments.insert(s.base, seg);
        Ok(())
    }
}
