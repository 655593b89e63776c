//! Delayed deletion of removed segments (`file.delete.delay.ms`). A segment that retention,
//! DeleteRecords, truncation or compaction removes leaves the log at once, and its files are
//! renamed to `<file>.deleted` (Kafka's marker); they are unlinked once the delay has passed,
//! when the log is closed, or (after a stop) when the log opens again.

use std::path::{Path, PathBuf};

use tracing::{debug, warn};

use crate::disk::Disk;
use crate::error::{LogError, Result};
use crate::segment::Segment;

/// The files of one removed segment, waiting out `file.delete.delay.ms`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct RetiredFiles {
    pub paths: Vec<PathBuf>,
    /// The delay in force when the segment was removed.
    pub delay_ms: i64,
    /// When the files may go. `None` for a removal made without a clock (truncation,
    /// DeleteRecords): the next sweep starts the delay, so it is never cut short.
    pub due_ms: Option<i64>,
}

/// Starts the delay of entries that have none and takes those due at `now_ms` out of
/// `retired`.
pub(crate) fn take_due(retired: &mut Vec<RetiredFiles>, now_ms: i64) -> Vec<RetiredFiles> {
    for r in retired.iter_mut() {
        r.due_ms.get_or_insert(now_ms.saturating_add(r.delay_ms));
    }
    let (due, waiting) = std::mem::take(retired)
        .into_iter()
        .partition(|r| r.due_ms.is_some_and(|d| d <= now_ms));
    *retired = waiting;
    due
}

/// Removes `seg` (already taken out of the segment map) from the disk: with a `delay_ms`
/// (`file.delete.delay.ms`) above 0 its files are renamed to `.deleted` and queued in `retired`
/// for [`unlink_due`]; with 0 at once. `now_ms` starts the delay where the caller knows the time.
pub(crate) fn retire_segment(
    retired: &mut Vec<RetiredFiles>,
    disk: &Disk,
    seg: &Segment,
    delay_ms: i64,
    now_ms: Option<i64>,
) -> Result<()> {
    if delay_ms == 0 {
        return seg.delete_files(disk);
    }
    let paths = seg.rename_for_deletion(disk)?;
    if !paths.is_empty() {
        retired.push(RetiredFiles {
            paths,
            delay_ms,
            due_ms: now_ms.map(|n| n.saturating_add(delay_ms)),
        });
    }
    Ok(())
}

/// Whether [`take_due`] would take anything at `now_ms`, or some delay has yet to start.
pub(crate) fn any_pending(retired: &[RetiredFiles], now_ms: i64) -> bool {
    retired.iter().any(|r| r.due_ms.is_none_or(|d| d <= now_ms))
}

/// What [`unlink_due`] did: files unlinked, entries with files left, and the first failure.
pub(crate) struct Unlinked {
    pub deleted: usize,
    pub left: Vec<RetiredFiles>,
    pub failure: Option<LogError>,
}

/// Unlinks the files of `due` (taken from the queue by [`take_due`]); an entry whose file
/// cannot be unlinked keeps its remaining files, for the caller to queue again.
pub(crate) fn unlink_due(disk: &Disk, dir: &Path, due: Vec<RetiredFiles>) -> Unlinked {
    let mut done = Unlinked {
        deleted: 0,
        left: Vec::new(),
        failure: None,
    };
    for mut r in due {
        while let Some(p) = r.paths.last() {
            match disk.remove_if_exists(p) {
                Ok(()) => {
                    done.deleted += 1;
                    r.paths.pop();
                }
                Err(e) => {
                    done.failure.get_or_insert(e);
                    break;
                }
            }
        }
        if !r.paths.is_empty() {
            done.left.push(r);
        }
    }
    if done.deleted > 0 {
        debug!(dir = %dir.display(), files = done.deleted, "deleted retired segment files");
    }
    done
}

/// At close: nothing reads the log any more, so the waiting files go now.
pub(crate) fn delete_all(retired: &mut Vec<RetiredFiles>, disk: &Disk) {
    for p in std::mem::take(retired).iter().flat_map(|r| &r.paths) {
        if let Err(e) = disk.remove_if_exists(p) {
            // The next open removes what is left.
            warn!(path = %p.display(), error = %e, "cannot delete a retired segment file");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(name: &str, delay_ms: i64, due_ms: Option<i64>) -> RetiredFiles {
        RetiredFiles {
            paths: vec![PathBuf::from(name)],
            delay_ms,
            due_ms,
        }
    }

    #[test]
    fn only_entries_past_their_delay_are_taken() {
        let mut retired = vec![entry("a", 10, Some(100)), entry("b", 10, Some(101))];
        assert!(take_due(&mut retired, 99).is_empty());
        let due = take_due(&mut retired, 100);
        assert_eq!(due, vec![entry("a", 10, Some(100))]);
        assert_eq!(retired, vec![entry("b", 10, Some(101))]);
    }

    #[test]
    fn a_removal_without_a_clock_waits_a_full_delay_from_the_first_sweep() {
        let mut retired = vec![entry("t", 10_000, None)];
        assert!(take_due(&mut retired, 5_000).is_empty());
        assert_eq!(retired, vec![entry("t", 10_000, Some(15_000))]);
        assert!(take_due(&mut retired, 14_999).is_empty());
        assert_eq!(take_due(&mut retired, 15_000).len(), 1);
        assert!(retired.is_empty());
    }
}
