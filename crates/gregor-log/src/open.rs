//! Opening a log directory: crash recovery, index rebuilding, checkpoints.

use std::collections::BTreeMap;
use std::fs;
use std::path::Path;
use std::sync::{Arc, Condvar, Mutex};

use tracing::{info, warn};

use crate::checkpoint;
use crate::config::LogConfig;
use crate::disk::{Disk, FaultInjector};
use crate::epoch::LeaderEpochCache;
use crate::error::{IoContext, Result};
use crate::log::Checkpointed;
use crate::log::{Inner, Log};
use crate::segment::{file_name, parse_name, Segment};
use crate::sync::SyncState;

/// Suffix of a compacted segment being written.
pub(crate) const CLEANED: &str = ".log.cleaned";
/// Suffix of a compacted segment ready to replace its original.
pub(crate) const SWAP: &str = ".log.swap";
/// Suffix added to a removed segment's files until `file.delete.delay.ms` has passed (Kafka's
/// marker); a file left with it by a stop is removed when the log opens.
pub(crate) const DELETED: &str = ".deleted";

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
        let mut bases = Vec::new();
        let mut names = Vec::new();
        for entry in fs::read_dir(dir).at(dir)? {
            let entry = entry.at(dir)?;
            names.push(entry.file_name().to_string_lossy().into_owned());
        }
        for name in &names {
            let path = dir.join(name);
            if name.ends_with(".tmp") || name.ends_with(CLEANED) || name.ends_with(DELETED) {
                disk.remove_if_exists(&path)?;
            } else if let Some(base) = parse_name(name, SWAP) {
                // A compacted segment that was complete (synced) before it was renamed to
                // .swap: finish replacing the original.
                warn!(dir = %dir.display(), base, "completing interrupted compaction swap");
                disk.rename(&path, &dir.join(file_name(base, ".log")))
                    .at(&path)?;
                disk.remove_if_exists(&dir.join(file_name(base, ".index")))?;
                disk.remove_if_exists(&dir.join(file_name(base, ".timeindex")))?;
                bases.push(base);
            } else if let Some(base) = parse_name(name, ".log") {
                bases.push(base);
            }
        }
        bases.sort_unstable();
        bases.dedup();
        for name in &names {
            let orphan = parse_name(name, ".index")
                .or_else(|| parse_name(name, ".timeindex"))
                .is_some_and(|b| bases.binary_search(&b).is_err());
            if orphan {
                disk.remove_if_exists(&dir.join(name))?;
            }
        }
        disk.sync_dir(dir)?;

        let marker = dir.join(checkpoint::CLEAN_SHUTDOWN);
        let clean = marker.exists();
        let rp_ckpt = lenient(
            dir,
            "recovery point",
            checkpoint::read_offset(dir, checkpoint::RECOVERY_POINT),
        );
        let hw_ckpt = lenient(
            dir,
            "high watermark",
            checkpoint::read_offset(dir, checkpoint::HIGH_WATERMARK),
        );
        let lso_ckpt = lenient(
            dir,
            "log start offset",
            checkpoint::read_offset(dir, checkpoint::LOG_START_OFFSET),
        );
        let epochs = lenient(dir, "leader epochs", checkpoint::read_epochs(dir));
        // An unreadable cleaner checkpoint only costs a full compaction.
        let cleaner_ckpt = lenient(dir, "cleaner", checkpoint::read_cleaner(dir));
        let recovery_point = rp_ckpt.unwrap_or(i64::MIN);

        let mut segments = BTreeMap::new();
        let mut next_id = 0u64;
        let mut recovered = Vec::new();
        let mut prev_next: Option<i64> = None;
        for (i, &base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied();
            if prev_next.is_some_and(|p| base < p) {
                warn!(dir = %dir.display(), base, "segment overlaps its predecessor; dropping it and later ones");
                for &b in &bases[i..] {
                    for s in [".log", ".index", ".timeindex"] {
                        disk.remove_if_exists(&dir.join(file_name(b, s)))?;
                    }
                }
                break;
            }
            let trusted = clean || next_base.is_some_and(|nb| nb <= recovery_point);
            next_id += 1;
            let (seg, truncated) = Segment::open(
                dir,
                base,
                trusted,
                config.index_interval_bytes,
                now_ms,
                next_id,
                &disk,
            )?;
            if !trusted {
                recovered.push(base);
            }
            prev_next = Some(seg.next_offset);
            segments.insert(base, seg);
            if truncated {
                let later = &bases[i + 1..];
                if !later.is_empty() {
                    warn!(dir = %dir.display(), base, dropped = later.len(), "segment was truncated; deleting later segments");
                }
                for &b in later {
                    for s in [".log", ".index", ".timeindex"] {
                        disk.remove_if_exists(&dir.join(file_name(b, s)))?;
                    }
                }
                break;
            }
        }
        if segments.is_empty() {
            let base = lso_ckpt.unwrap_or(0).max(0);
            next_id += 1;
            segments.insert(base, Segment::create(dir, base, now_ms, next_id, &disk)?);
        }
        // Data read during recovery may only have been in the page cache: make it durable
        // before the recovery point moves past it.
        for base in &recovered {
            if let Some(seg) = segments.get(base) {
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

        let first_base = *segments.keys().next().expect("at least one segment");
        let leo = segments
            .values()
            .next_back()
            .expect("at least one segment")
            .next_offset;
        let lso = lso_ckpt.unwrap_or(first_base).max(first_base).min(leo);
        // Recovery may have cut the log below what was compacted.
        let cleaner = cleaner_ckpt.map(|c| checkpoint::CleanerCheckpoint {
            first_dirty_offset: c.first_dirty_offset.min(leo),
            ..c
        });
        let hw = hw_ckpt.unwrap_or(lso).clamp(lso, leo);
        let mut epoch_cache = LeaderEpochCache::from_entries(epochs.clone().unwrap_or_default());
        epoch_cache.truncate_from_end(leo);
        epoch_cache.truncate_from_start(lso);
        if epochs.as_deref() != Some(epoch_cache.entries()) {
            checkpoint::write_epochs(&disk, dir, epoch_cache.entries())?;
        }
        // Checkpoints written before a power loss can point past what survived it: persist the
        // clamped values, or appends reusing those offsets would be hidden (below a stale log
        // start offset) or taken for compacted at the next open.
        if lso_ckpt.is_some_and(|c| c != lso) {
            checkpoint::write_offset(&disk, dir, checkpoint::LOG_START_OFFSET, lso)?;
        }
        if hw_ckpt.is_some_and(|c| c != hw) {
            checkpoint::write_offset(&disk, dir, checkpoint::HIGH_WATERMARK, hw)?;
        }
        if let Some(c) = cleaner.filter(|c| cleaner_ckpt != Some(*c)) {
            checkpoint::write_cleaner(&disk, dir, c)?;
        }
        checkpoint::write_offset(&disk, dir, checkpoint::RECOVERY_POINT, leo)?;
        info!(dir = %dir.display(), clean, segments = segments.len(), recovered = recovered.len(), lso, leo, hw, "log opened");
        let inner = Inner {
            config,
            segments,
            log_start_offset: lso,
            high_watermark: hw,
            recovery_point: leo,
            epochs: epoch_cache,
            written_seq: 0,
            unflushed_messages: 0,
            last_flush_ms: now_ms,
            offline: false,
            closed: false,
            marker_written: false,
            next_segment_id: next_id,
            pending_sync: Vec::new(),
            cleaner,
            retired: Vec::new(),
        };
        Ok(Log {
            dir: dir.to_path_buf(),
            disk,
            inner: Mutex::new(inner),
            sync: Mutex::new(SyncState::default()),
            sync_cv: Condvar::new(),
            maintenance: Mutex::new(Checkpointed::default()),
        })
    }
}
