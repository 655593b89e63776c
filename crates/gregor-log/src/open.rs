//! Opening a log directory: crash recovery, index rebuilding, checkpoints.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Mutex};

use tracing::{debug, warn};

use crate::checkpoint;
use crate::config::LogConfig;
use crate::disk::{Disk, FaultInjector};
use crate::epoch::LeaderEpochCache;
use crate::error::{IoContext, Result};
use crate::log::{AtOpen, Checkpointed};
use crate::log::{Inner, Log};
use crate::segment::{file_name, parse_name, Segment, CLEANED, DELETED, SWAP, TXN_INDEX};
use crate::sync::GroupCommit;

/// Read a checkpoint, treating a corrupt one as missing (recovery then does more work).
fn lenient<T>(dir: &Path, what: &str, r: Result<Option<T>>) -> Option<T> {
    match r {
        Ok(v) => v,
        Err(e) => {
            warn!(dir = %dir.display(), what, error = %e, "ignoring unreadable checkpoint");
            None
        }
    }
}

impl Log {
    /// Open (or create) the log in `dir`. After a crash (no clean-shutdown marker) every
    /// segment from the one holding the recovery point on is validated batch by batch, a torn
    /// or corrupt tail is truncated and the indexes rebuilt; missing or corrupt index files are
    /// rebuilt in any case.
    pub fn open(dir: &Path, config: LogConfig, now_ms: i64) -> Result<Log> {
        Self::open_inner(dir, config, now_ms, Disk::default())
    }

    /// [`Log::open`] with a fault injector for tests of full disks and failing syncs.
    pub fn open_with_faults(
        dir: &Path,
        config: LogConfig,
        now_ms: i64,
        faults: Arc<FaultInjector>,
    ) -> Result<Log> {
        Self::open_inner(
            dir,
            config,
            now_ms,
            Disk {
                faults: Some(faults),
            },
        )
    }

    /// [`Log::open`] on `disk` (the real file system, or one behind a fault injector).
    pub fn open_on(dir: &Path, config: LogConfig, now_ms: i64, disk: Disk) -> Result<Log> {
        Self::open_inner(dir, config, now_ms, disk)
    }

    fn open_inner(dir: &Path, config: LogConfig, now_ms: i64, disk: Disk) -> Result<Log> {
        config.validate()?;
        let existed = dir.is_dir();
        disk.create_dir_all(dir)?;
        let bases = tidy_dir(dir, &disk)?;
        let marker = dir.join(checkpoint::CLEAN_SHUTDOWN);
        let clean = marker.exists();
        let ckpt = Checkpoints::read(dir);
        let loaded = load_segments(dir, &bases, clean, &ckpt, &config, now_ms, &disk)?;
        // Data read during recovery may only have been in the page cache: make it durable
        // before the recovery point moves past it.
        for base in &loaded.recovered {
            if let Some(seg) = loaded.segments.get(base) {
                disk.sync_data(&seg.file).at(&seg.log_path())?;
            }
        }
        if clean {
            disk.remove_file(&marker).at(&marker)?;
        } else if existed {
            // After a crash, the directory's own name may not have reached the disk if its
            // creation was interrupted before its parent was synced: sync the parent again.
            if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
                disk.sync_dir(parent)?;
            }
        }
        disk.sync_dir(dir)?;
        let offsets = reconcile_checkpoints(dir, &disk, &ckpt, &loaded.segments)?;
        debug!(dir = %dir.display(), clean, segments = loaded.segments.len(), recovered = loaded.recovered.len(), lso = offsets.log_start_offset, leo = offsets.log_end_offset, hw = offsets.high_watermark, "log opened");
        let mut inner = Inner {
            config,
            segments: loaded.segments,
            log_start_offset: offsets.log_start_offset,
            high_watermark: offsets.high_watermark,
            recovery_point: offsets.log_end_offset,
            epochs: offsets.epochs,
            written_seq: 0,
            unflushed_messages: 0,
            last_flush_ms: now_ms,
            offline: false,
            closed: false,
            marker_written: false,
            next_segment_id: loaded.next_id,
            pending_sync: Vec::new(),
            cleaner: offsets.cleaner,
            retired: Vec::new(),
            at_open: AtOpen {
                high_watermark: 0,
                log_start_offset: 0,
                log_end_offset: 0,
                epochs: Vec::new(),
                segments: Vec::new(),
            },
        };
        // Recovered segments were synced above, the directory too, and every checkpoint file
        // that disagreed with these values rewritten.
        inner.at_open = AtOpen::of(&inner);
        inner.debug_check_offsets();
        // The periodic checkpoint rewrites only what changes from here on.
        let checkpointed = Checkpointed {
            high_watermark: Some(inner.at_open.high_watermark),
            recovery_point: Some(inner.at_open.log_end_offset),
            log_start_offset: Some(inner.at_open.log_start_offset),
        };
        Ok(Log {
            dir: dir.to_path_buf(),
            disk,
            inner: Mutex::new(inner),
            commit: GroupCommit::default(),
            maintenance: Mutex::new(checkpointed),
        })
    }
}

/// Clears what an interrupted operation left in `dir` (temp files, unfinished compactions,
/// files waiting for deletion, indexes without a segment), finishes a compaction swap that was
/// complete, and returns the segments' base offsets in order. The directory is synced when
/// anything changed in it (a tidy one, the rule after a clean shutdown, costs no sync).
fn tidy_dir(dir: &Path, disk: &Disk) -> Result<Vec<i64>> {
    let mut bases = Vec::new();
    let mut changed = false;
    let mut names = Vec::new();
    for entry in fs::read_dir(dir).at(dir)? {
        let entry = entry.at(dir)?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    for name in &names {
        let path = dir.join(name);
        if name.ends_with(".tmp") || name.ends_with(CLEANED) || name.ends_with(DELETED) {
            disk.remove_if_exists(&path)?;
            changed = true;
        } else if let Some(base) = parse_name(name, SWAP) {
            // A compacted segment that was complete (synced) before it was renamed to
            // .swap: finish replacing the original.
            warn!(dir = %dir.display(), base, "completing interrupted compaction swap");
            disk.rename(&path, &dir.join(file_name(base, ".log")))
                .at(&path)?;
            disk.remove_if_exists(&dir.join(file_name(base, ".index")))?;
            disk.remove_if_exists(&dir.join(file_name(base, ".timeindex")))?;
            // The `.txnindex` stays: compaction hands it to the compacted copy unchanged.
            bases.push(base);
            changed = true;
        } else if let Some(base) = parse_name(name, ".log") {
            bases.push(base);
        }
    }
    bases.sort_unstable();
    bases.dedup();
    for name in &names {
        let orphan = parse_name(name, ".index")
            .or_else(|| parse_name(name, ".timeindex"))
            .or_else(|| parse_name(name, TXN_INDEX))
            .is_some_and(|b| bases.binary_search(&b).is_err());
        if orphan {
            disk.remove_if_exists(&dir.join(name))?;
            changed = true;
        }
    }
    if changed {
        disk.sync_dir(dir)?;
    }
    Ok(bases)
}

/// The checkpoint files as found at open, each `None` if missing or unreadable.
struct Checkpoints {
    recovery_point: Option<i64>,
    high_watermark: Option<i64>,
    log_start_offset: Option<i64>,
    epochs: Option<Vec<(i32, i64)>>,
    cleaner: Option<checkpoint::CleanerCheckpoint>,
}

impl Checkpoints {
    fn read(dir: &Path) -> Checkpoints {
        let offset =
            |what: &str, name: &str| lenient(dir, what, checkpoint::read_offset(dir, name));
        Checkpoints {
            recovery_point: offset("recovery point", checkpoint::RECOVERY_POINT),
            high_watermark: offset("high watermark", checkpoint::HIGH_WATERMARK),
            log_start_offset: offset("log start offset", checkpoint::LOG_START_OFFSET),
            epochs: lenient(dir, "leader epochs", checkpoint::read_epochs(dir)),
            // An unreadable cleaner checkpoint only costs a full compaction.
            cleaner: lenient(dir, "cleaner", checkpoint::read_cleaner(dir)),
        }
    }
}

/// The segments opened from the directory.
struct Loaded {
    segments: BTreeMap<i64, Segment>,
    /// The last segment id handed out.
    next_id: u64,
    /// Base offsets of the segments that were validated (not trusted) and may hold data that
    /// was only in the page cache.
    recovered: Vec<i64>,
}

/// Opens the segments at `bases`: trusted (index files sanity-checked) after a clean shutdown
/// or when wholly below the recovery point, validated batch by batch otherwise. A segment that
/// overlaps its predecessor, and every segment after one recovery truncated, is deleted. An
/// empty directory gets one segment at the checkpointed log start offset.
fn load_segments(
    dir: &Path,
    bases: &[i64],
    clean: bool,
    ckpt: &Checkpoints,
    config: &LogConfig,
    now_ms: i64,
    disk: &Disk,
) -> Result<Loaded> {
    let recovery_point = ckpt.recovery_point.unwrap_or(i64::MIN);
    let mut loaded = Loaded {
        segments: BTreeMap::new(),
        next_id: 0,
        recovered: Vec::new(),
    };
    let mut prev_next: Option<i64> = None;
    for (i, &base) in bases.iter().enumerate() {
        let next_base = bases.get(i + 1).copied();
        if prev_next.is_some_and(|p| base < p) {
            warn!(dir = %dir.display(), base, "segment overlaps its predecessor; dropping it and later ones");
            remove_segment_files(dir, &bases[i..], disk)?;
            break;
        }
        let trusted = clean || next_base.is_some_and(|nb| nb <= recovery_point);
        loaded.next_id += 1;
        let interval = config.index_interval_bytes;
        let (seg, truncated) =
            Segment::open(dir, base, trusted, interval, now_ms, loaded.next_id, disk)?;
        if !trusted {
            loaded.recovered.push(base);
        }
        prev_next = Some(seg.next_offset);
        loaded.segments.insert(base, seg);
        if truncated {
            let later = &bases[i + 1..];
            if !later.is_empty() {
                warn!(dir = %dir.display(), base, dropped = later.len(), "segment was truncated; deleting later segments");
            }
            remove_segment_files(dir, later, disk)?;
            break;
        }
    }
    if loaded.segments.is_empty() {
        let base = ckpt.log_start_offset.unwrap_or(0).max(0);
        loaded.next_id += 1;
        let seg = Segment::create(dir, base, now_ms, loaded.next_id, disk)?;
        loaded.segments.insert(base, seg);
    }
    Ok(loaded)
}

/// Deletes the files of the segments at `bases`.
fn remove_segment_files(dir: &Path, bases: &[i64], disk: &Disk) -> Result<()> {
    for &b in bases {
        for s in [".log", ".index", ".timeindex", TXN_INDEX] {
            disk.remove_if_exists(&dir.join(file_name(b, s)))?;
        }
    }
    Ok(())
}

/// The log's offsets, epochs and cleaner state after an open.
struct Reconciled {
    log_start_offset: i64,
    log_end_offset: i64,
    high_watermark: i64,
    epochs: LeaderEpochCache,
    cleaner: Option<checkpoint::CleanerCheckpoint>,
}

/// Clamps the checkpointed offsets, epochs and cleaner state to the segments that survived
/// and writes back every checkpoint that changed, then the recovery point at the log end.
fn reconcile_checkpoints(
    dir: &Path,
    disk: &Disk,
    ckpt: &Checkpoints,
    segments: &BTreeMap<i64, Segment>,
) -> Result<Reconciled> {
    let first_base = *segments.keys().next().expect("at least one segment");
    let leo = segments
        .values()
        .next_back()
        .expect("at least one segment")
        .next_offset;
    let lso = ckpt
        .log_start_offset
        .unwrap_or(first_base)
        .max(first_base)
        .min(leo);
    // Recovery may have cut the log below what was compacted.
    let cleaner = ckpt.cleaner.map(|c| checkpoint::CleanerCheckpoint {
        first_dirty_offset: c.first_dirty_offset.min(leo),
        ..c
    });
    let hw = ckpt.high_watermark.unwrap_or(lso).clamp(lso, leo);
    let mut epochs = LeaderEpochCache::from_entries(ckpt.epochs.clone().unwrap_or_default());
    epochs.truncate_from_end(leo);
    epochs.truncate_from_start(lso);
    if ckpt.epochs.as_deref() != Some(epochs.entries()) {
        checkpoint::write_epochs(disk, dir, epochs.entries())?;
    }
    // Checkpoints written before a power loss can point past what survived it: persist the
    // clamped values, or appends reusing those offsets would be hidden (below a stale log
    // start offset) or taken for compacted at the next open.
    if ckpt.log_start_offset.is_some_and(|c| c != lso) {
        checkpoint::write_offset(disk, dir, checkpoint::LOG_START_OFFSET, lso)?;
    }
    if ckpt.high_watermark.is_some_and(|c| c != hw) {
        checkpoint::write_offset(disk, dir, checkpoint::HIGH_WATERMARK, hw)?;
    }
    if let Some(c) = cleaner.filter(|c| ckpt.cleaner != Some(*c)) {
        checkpoint::write_cleaner(disk, dir, c)?;
    }
    // A file that already says so is durable (written atomically, its name synced above):
    // a clean restart rewrites nothing.
    if ckpt.recovery_point != Some(leo) {
        checkpoint::write_offset(disk, dir, checkpoint::RECOVERY_POINT, leo)?;
    }
    Ok(Reconciled {
        log_start_offset: lso,
        log_end_offset: leo,
        high_watermark: hw,
        epochs,
        cleaner,
    })
}
