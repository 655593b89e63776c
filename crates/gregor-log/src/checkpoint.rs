//! Small checkpoint files of a partition directory, written atomically (temp file, fsync,
//! rename, fsync of the directory), in the style of Kafka's checkpoint files: a version line
//! followed by the contents.

use std::fs;
use std::io::ErrorKind;
use std::path::Path;

use crate::disk::Disk;
use crate::error::{LogError, Result};

/// `recovery-point`: every offset below it is synced and needs no scan on restart.
pub const RECOVERY_POINT: &str = "recovery-point";
/// `high-watermark`: the last high watermark the caller set.
pub const HIGH_WATERMARK: &str = "high-watermark";
/// `log-start-offset`: moved by retention and DeleteRecords.
pub const LOG_START_OFFSET: &str = "log-start-offset";
/// `leader-epoch-checkpoint`: Kafka's format, `0`, count, then `epoch startOffset` lines.
pub const LEADER_EPOCH: &str = "leader-epoch-checkpoint";
/// `cleaner-checkpoint`: `0`, the first dirty offset (everything below it has been compacted),
/// and the earliest delete horizon of a tombstone kept below it (`-1` for none).
pub const CLEANER: &str = "cleaner-checkpoint";
/// Present only between a clean close and the next open.
pub const CLEAN_SHUTDOWN: &str = ".clean-shutdown";

fn corrupt(path: &Path, reason: impl Into<String>) -> LogError {
    LogError::CorruptFile {
        path: path.to_path_buf(),
        reason: reason.into(),
    }
}

/// Read a checkpoint's lines after the version line; `None` if the file does not exist.
fn read_lines(path: &Path) -> Result<Option<Vec<String>>> {
    let text = match fs::read_to_string(path) {
        Ok(t) => t,
        Err(e) if e.kind() == ErrorKind::NotFound => return Ok(None),
        Err(e) if e.kind() == ErrorKind::InvalidData => return Err(corrupt(path, "not UTF-8")),
        Err(e) => return Err(LogError::io(path, e)),
    };
    let mut lines = text.lines();
    match lines.next() {
        Some("0") => {}
        other => return Err(corrupt(path, format!("unknown version line {other:?}"))),
    }
    Ok(Some(lines.map(str::to_owned).collect()))
}

/// Read a single-offset checkpoint.
pub fn read_offset(dir: &Path, name: &str) -> Result<Option<i64>> {
    let path = dir.join(name);
    let Some(lines) = read_lines(&path)? else {
        return Ok(None);
    };
    match lines.as_slice() {
        [v] => v
            .trim()
            .parse()
            .map(Some)
            .map_err(|_| corrupt(&path, format!("bad offset {v:?}"))),
        _ => Err(corrupt(&path, "expected exactly one offset")),
    }
}

/// Write a single-offset checkpoint atomically.
pub(crate) fn write_offset(disk: &Disk, dir: &Path, name: &str, value: i64) -> Result<()> {
    disk.write_atomic(&dir.join(name), format!("0\n{value}\n").as_bytes())
}

/// Where compaction stands (see [`CLEANER`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CleanerCheckpoint {
    /// Offsets below it have been compacted: their keys are unique there.
    pub first_dirty_offset: i64,
    /// The earliest delete horizon among tombstones kept below the first dirty offset: once
    /// it passes, compaction runs even with nothing dirty, to drop them.
    pub earliest_delete_horizon: Option<i64>,
}

/// Read the cleaner checkpoint; `None` if the log was never compacted.
pub fn read_cleaner(dir: &Path) -> Result<Option<CleanerCheckpoint>> {
    let path = dir.join(CLEANER);
    let Some(lines) = read_lines(&path)? else {
        return Ok(None);
    };
    let num = |v: &String| -> Result<i64> {
        v.trim()
            .parse()
            .map_err(|_| corrupt(&path, format!("bad number {v:?}")))
    };
    match lines.as_slice() {
        [dirty, horizon] => {
            let horizon = num(horizon)?;
            Ok(Some(CleanerCheckpoint {
                first_dirty_offset: num(dirty)?,
                earliest_delete_horizon: (horizon >= 0).then_some(horizon),
            }))
        }
        _ => Err(corrupt(
            &path,
            "expected a first dirty offset and a horizon",
        )),
    }
}

/// Write the cleaner checkpoint atomically.
pub(crate) fn write_cleaner(disk: &Disk, dir: &Path, c: CleanerCheckpoint) -> Result<()> {
    let horizon = c.earliest_delete_horizon.unwrap_or(-1);
    disk.write_atomic(
        &dir.join(CLEANER),
        format!("0\n{}\n{horizon}\n", c.first_dirty_offset).as_bytes(),
    )
}

/// Read the leader-epoch checkpoint.
pub fn read_epochs(dir: &Path) -> Result<Option<Vec<(i32, i64)>>> {
    let path = dir.join(LEADER_EPOCH);
    let Some(lines) = read_lines(&path)? else {
        return Ok(None);
    };
    let (count, rest) = lines
        .split_first()
        .ok_or_else(|| corrupt(&path, "missing entry count"))?;
    let count: usize = count
        .trim()
        .parse()
        .map_err(|_| corrupt(&path, "bad entry count"))?;
    if rest.len() != count {
        return Err(corrupt(
            &path,
            format!("expected {count} entries, found {}", rest.len()),
        ));
    }
    let mut out = Vec::with_capacity(count);
    for l in rest {
        let mut it = l.split_whitespace();
        let (Some(e), Some(o), None) = (it.next(), it.next(), it.next()) else {
            return Err(corrupt(&path, format!("bad line {l:?}")));
        };
        let e = e
            .parse()
            .map_err(|_| corrupt(&path, format!("bad epoch {e:?}")))?;
        let o = o
            .parse()
            .map_err(|_| corrupt(&path, format!("bad offset {o:?}")))?;
        out.push((e, o));
    }
    Ok(Some(out))
}

/// Write the leader-epoch checkpoint atomically.
pub(crate) fn write_epochs(disk: &Disk, dir: &Path, entries: &[(i32, i64)]) -> Result<()> {
    let mut s = format!("0\n{}\n", entries.len());
    for (e, o) in entries {
        s.push_str(&format!("{e} {o}\n"));
    }
    disk.write_atomic(&dir.join(LEADER_EPOCH), s.as_bytes())
}
