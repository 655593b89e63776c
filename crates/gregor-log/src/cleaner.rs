//! Cleanup: retention (`retention.ms`, `retention.bytes`, log start offset) and compaction
//! (`cleanup.policy=compact`). Both work on whole non-active segments below the high
//! watermark; compaction does its reading and writing without holding the log's lock and only
//! takes it to swap a cleaned segment in.

use std::collections::HashMap;
use std::fs::{self, OpenOptions};
use std::sync::Arc;

use bytes::Bytes;
use tracing::info;

use crate::batch::BatchHeader;
use crate::checkpoint;
use crate::disk::Disk;
use crate::error::{IoContext, LogError, Result};
use crate::log::{lock, Log};
use crate::open::{CLEANED, SWAP};
use crate::records::{self, BatchSpec, Record};
use crate::segment::{file_name, scan, ScanEnd, Segment};

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
    /// Bytes before and after in the rewritten segments.
    pub bytes_before: u64,
    /// Bytes after.
    pub bytes_after: u64,
}

struct Snapshot {
    base: i64,
    id: u64,
    size: u64,
    file: Arc<fs::File>,
    path: std::path::PathBuf,
}

/// Every batch of a segment snapshot, fully validated.
fn batches_of(s: &Snapshot) -> Result<Vec<(BatchHeader, Bytes)>> {
    let mut out = Vec::new();
    let end = scan(&s.file, 0, s.size, true, |_, h, b| {
        out.push((*h, Bytes::copy_from_slice(b)));
        Ok(true)
    })
    .at(&s.path)?;
    match end {
        ScanEnd::Complete => Ok(out),
        other => Err(LogError::CorruptFile {
            path: s.path.clone(),
            reason: format!("segment unreadable during cleaning: {other:?}"),
        }),
    }
}

impl Log {
    /// Apply `retention.ms` and `retention.bytes` (if `cleanup.policy` includes `delete`) and
    /// drop segments wholly below the log start offset. Never deletes the active segment nor
    /// anything at or above the high watermark.
    pub fn apply_retention(&self, now_ms: i64) -> Result<RetentionStats> {
        let _m = lock(&self.maintenance);
        let mut g = lock(&self.inner);
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
                seg.delete_files()?;
                stats.segments_deleted += 1;
                stats.bytes_deleted += seg.size;
            }
        }
        let first = *g.segments.keys().next().expect("active segment remains");
        if stats.segments_deleted > 0 {
            self.disk.sync_dir(&self.dir)?;
            if first > g.log_start_offset {
                g.log_start_offset = first;
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

    /// Compact the log (if `cleanup.policy` includes `compact`): in the non-active segments
    /// below the high watermark keep only the last record of each key; tombstones get a delete
    /// horizon of `now + delete.retention.ms` the first time they are cleaned (KIP-534) and are
    /// dropped by the first cleaning after it. Runs beside appends and reads.
    pub fn compact(&self, now_ms: i64) -> Result<CompactionStats> {
        let _m = lock(&self.maintenance);
        let (cfg, snaps) = {
            let g = lock(&self.inner);
            let active = g.active().base;
            let snaps: Vec<Snapshot> = g
                .segments
                .values()
                .filter(|s| s.base != active && s.next_offset <= g.high_watermark)
                .map(|s| Snapshot {
                    base: s.base,
                    id: s.id,
                    size: s.size,
                    file: Arc::clone(&s.file),
                    path: s.log_path(),
                })
                .collect();
            (g.config.clone(), snaps)
        };
        let mut stats = CompactionStats::default();
        if !cfg.cleanup_policy.compact || snaps.is_empty() {
            return Ok(stats);
        }
        // Pass 1: the last offset of every key in the cleanable range.
        let mut last: HashMap<Bytes, i64> = HashMap::new();
        for s in &snaps {
            for (h, b) in batches_of(s)? {
                if h.is_control() {
                    continue;
                }
                for r in records::decode_batch(&b)?.1 {
                    if let Some(k) = r.key {
                        last.insert(k, r.offset);
                    }
                }
            }
        }
        // Pass 2: rewrite each segment that loses something.
        for s in &snaps {
            stats.segments_cleaned += 1;
            let mut out: Vec<u8> = Vec::with_capacity(s.size as usize);
            let mut changed = false;
            for (h, b) in batches_of(s)? {
                if h.is_control() {
                    out.extend_from_slice(&b);
                    continue;
                }
                let recs = records::decode_batch(&b)?.1;
                stats.records_read += recs.len() as u64;
                let horizon_passed = h.delete_horizon().is_some_and(|d| now_ms >= d);
                let mut kept: Vec<Record> = Vec::with_capacity(recs.len());
                let mut tombstones = 0;
                for r in recs.iter() {
                    let latest = r
                        .key
                        .as_ref()
                        .is_some_and(|k| last.get(k) == Some(&r.offset));
                    if !latest {
                        continue;
                    }
                    if r.value.is_none() {
                        if horizon_passed {
                            stats.tombstones_dropped += 1;
                            continue;
                        }
                        tombstones += 1;
                    }
                    kept.push(r.clone());
                }
                stats.records_kept += kept.len() as u64;
                let needs_horizon = tombstones > 0 && h.delete_horizon().is_none();
                if kept.len() == recs.len() && !needs_horizon {
                    out.extend_from_slice(&b);
                    continue;
                }
                changed = true;
                if kept.is_empty() {
                    continue;
                }
                let spec = BatchSpec {
                    base_offset: h.base_offset,
                    last_offset_delta: Some(h.last_offset_delta),
                    partition_leader_epoch: h.partition_leader_epoch,
                    codec: h
                        .codec()
                        .ok_or_else(|| LogError::InvalidRecord("codec".into()))?,
                    log_append_time: h.is_log_append_time(),
                    max_timestamp: h.is_log_append_time().then_some(h.max_timestamp),
                    transactional: h.is_transactional(),
                    control: false,
                    delete_horizon: if tombstones > 0 {
                        Some(
                            h.delete_horizon()
                                .unwrap_or(now_ms + cfg.delete_retention_ms),
                        )
                    } else {
                        None
                    },
                    producer_id: h.producer_id,
                    producer_epoch: h.producer_epoch,
                    base_sequence: h.base_sequence,
                };
                out.extend_from_slice(&records::encode_batch(&spec, &kept)?);
            }
            if !changed {
                continue;
            }
            stats.segments_rewritten += 1;
            stats.bytes_before += s.size;
            stats.bytes_after += out.len() as u64;
            self.swap_in(s, &out, &cfg, now_ms)?;
        }
        info!(dir = %self.dir.display(), ?stats, "compaction done");
        Ok(stats)
    }

    /// Replace segment `s` with `contents`, crash-safely:
    /// write `.log.cleaned` + fsync; then under the lock, if the segment is unchanged, rename
    /// to `.log.swap`, remove the old index files, rename over `.log`, write the new indexes.
    /// A crash before `.swap` exists keeps the original; after, open completes the swap.
    fn swap_in(
        &self,
        s: &Snapshot,
        contents: &[u8],
        cfg: &crate::LogConfig,
        now_ms: i64,
    ) -> Result<()> {
        let disk: &Disk = &self.disk;
        let cleaned = self.dir.join(file_name(s.base, CLEANED));
        let swap = self.dir.join(file_name(s.base, SWAP));
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(&cleaned)
            .at(&cleaned)?;
        let written = disk
            .write_at(&file, contents, 0)
            .and_then(|()| disk.sync_data(&file));
        if let Err(e) = written {
            let _ = fs::remove_file(&cleaned);
            return Err(LogError::io(cleaned, e));
        }
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
            fs::remove_file(&cleaned).at(&cleaned)?;
            return Ok(());
        }
        fs::rename(&cleaned, &swap).at(&swap)?;
        disk.sync_dir(&self.dir)?;
        let old = g.segments.remove(&s.base).expect("checked above");
        for p in [old.index_path(), old.time_index_path()] {
            match fs::remove_file(&p) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io(p, e)),
            }
        }
        disk.sync_dir(&self.dir)?;
        if seg.size == 0 {
            fs::remove_file(&swap).at(&swap)?;
            fs::remove_file(old.log_path()).at(&old.log_path())?;
            disk.sync_dir(&self.dir)?;
            return Ok(());
        }
        fs::rename(&swap, old.log_path()).at(&old.log_path())?;
        disk.sync_dir(&self.dir)?;
        seg.write_indexes(disk)?;
        g.segments.insert(s.base, seg);
        Ok(())
    }
}
