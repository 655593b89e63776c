//! The aborted-transaction index of one segment, `<base>.txnindex` (Kafka's `TransactionIndex`):
//! one [`AbortedTxn`] per abort marker the segment holds, in append order (ascending last
//! offset), 34 bytes each. Held in memory; the file is created on the first entry (a segment
//! without aborted transactions has none), written on every append and synced when its owner
//! asks ([`TxnIndex::sync`]).

use std::fs::File;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::Arc;

use tracing::info;

use crate::batch::HEADER_LEN;
use crate::disk::Disk;
use crate::error::{IoContext, LogError, Result};
use crate::txn::AbortedTxn;

const ENTRY: u64 = AbortedTxn::ENTRY_LEN as u64;

/// The aborted-transaction index of one segment.
#[derive(Debug)]
pub(crate) struct TxnIndex {
    path: PathBuf,
    entries: Vec<AbortedTxn>,
    /// Open once the file exists (found at load or created by the first append).
    file: Option<Arc<File>>,
    /// Bytes written since the last sync.
    unsynced: bool,
    /// Created since its directory was last synced: its name is not durable yet.
    name_unsynced: bool,
    /// The file was handed to another segment ([`TxnIndex::take`]): not this one's to remove.
    detached: bool,
}

impl TxnIndex {
    /// The empty index whose file will be `path` (not created yet).
    pub fn new(path: PathBuf) -> TxnIndex {
        TxnIndex {
            path,
            entries: Vec::new(),
            file: None,
            unsynced: false,
            name_unsynced: false,
            detached: false,
        }
    }

    /// Loads the index at `path` of the segment at `base`, whose batches end at `next_offset` and take
    /// `size` bytes. A missing file is an empty index. From the first entry that is damaged
    /// (a torn length, an entry [`AbortedTxn::decode`] refuses, one not after the entry before
    /// it, or one outside the segment's offsets) the file is cut off, durably: the broker
    /// rebuilds that tail by replaying its producer state.
    pub fn load(
        path: PathBuf,
        base: i64,
        next_offset: i64,
        size: u64,
        disk: &Disk,
    ) -> Result<Self> {
        let mut idx = TxnIndex::new(path);
        if !idx.path.exists() {
            return Ok(idx);
        }
        let path = idx.path.clone();
        let file = disk.open_file(&path).at(&path)?;
        let len = file.metadata().at(&path)?.len();
        // Entries name distinct marker batches of the segment: no more than it holds offsets,
        // nor batches. The file's length is not trusted to size the read.
        let span = u64::try_from(next_offset.saturating_sub(base)).unwrap_or(0);
        let most = span.min(size / HEADER_LEN as u64);
        let want = (len / ENTRY).min(most) * ENTRY;
        let mut bytes = vec![0u8; want as usize];
        file.read_exact_at(&mut bytes, 0).at(&path)?;
        let (entries, problem) = valid_prefix(&bytes, base, next_offset);
        let keep = entries.len() as u64 * ENTRY;
        if keep != len {
            let reason = problem.unwrap_or_else(|| {
                format!("{len} bytes: more entries than the segment has batches, or a torn entry")
            });
            info!(index = %path.display(), kept = entries.len(), len, %reason, "cutting aborted-transaction index back");
            disk.set_len(&file, keep).at(&path)?;
            disk.sync_data(&file).at(&path)?;
        }
        idx.entries = entries;
        idx.file = Some(Arc::new(file));
        Ok(idx)
    }

    /// Whether the file at [`TxnIndex::path`] belongs to this index (to remove with its
    /// segment); false once [`TxnIndex::take`] handed it on.
    pub fn owns_file(&self) -> bool {
        !self.detached
    }

    /// The entries, ascending by last offset.
    pub fn entries(&self) -> &[AbortedTxn] {
        &self.entries
    }

    /// Hands the index (file and entries) to another segment at the same base offset (a
    /// compacted copy), leaving this one empty and without a file to remove.
    pub fn take(&mut self) -> TxnIndex {
        let mut empty = TxnIndex::new(self.path.clone());
        empty.detached = true;
        std::mem::replace(self, empty)
    }

    /// Appends `entry`, which the caller checked comes after the last one; written, not
    /// synced. A failed write is cut back so that nothing of it remains.
    pub fn append(&mut self, entry: AbortedTxn, disk: &Disk) -> Result<()> {
        debug_assert!(
            self.entries
                .last()
                .is_none_or(|l| l.last_offset < entry.last_offset),
            "aborted transactions out of order: {entry:?} after {:?}",
            self.entries.last()
        );
        debug_assert!(!self.detached, "append to a handed-on index");
        let file = match &self.file {
            Some(f) => Arc::clone(f),
            None => {
                let f = Arc::new(disk.create_file(&self.path).at(&self.path)?);
                self.name_unsynced = true;
                self.file = Some(Arc::clone(&f));
                f
            }
        };
        let at = self.entries.len() as u64 * ENTRY;
        if let Err(e) = disk.write_at(&file, &entry.encode(), at) {
            if let Err(e2) = disk.set_len(&file, at) {
                tracing::warn!(index = %self.path.display(), error = %e2, "cannot cut back a failed write");
            }
            return Err(LogError::io(&self.path, e));
        }
        self.entries.push(entry);
        self.unsynced = true;
        Ok(())
    }

    /// Removes every entry whose last offset is `>= offset`, durably (the file is cut and
    /// synced: removed entries never come back). Returns whether any went.
    pub fn truncate_from(&mut self, offset: i64, disk: &Disk) -> Result<bool> {
        let keep = self.entries.partition_point(|e| e.last_offset < offset);
        if keep == self.entries.len() {
            return Ok(false);
        }
        if let Some(file) = &self.file {
            disk.set_len(file, keep as u64 * ENTRY).at(&self.path)?;
            disk.sync_data(file).at(&self.path)?;
            self.unsynced = false;
        }
        self.entries.truncate(keep);
        Ok(true)
    }

    /// Makes what was written durable: syncs the file if it was written since the last sync.
    /// Returns whether its name is new, in which case the caller syncs the directory (once for
    /// all the indexes it syncs) and then calls [`TxnIndex::name_synced`].
    pub fn sync(&mut self, disk: &Disk) -> Result<bool> {
        if let (Some(file), true) = (&self.file, self.unsynced) {
            disk.sync_data(file).at(&self.path)?;
            self.unsynced = false;
        }
        Ok(self.name_unsynced)
    }

    /// The directory holding the file was synced.
    pub fn name_synced(&mut self) {
        self.name_unsynced = false;
    }

    /// Adds to `out` the entries a read_committed fetch of `[fetch_offset, upper_bound)` must
    /// be told of (last offset `>= fetch_offset`, first offset `< upper_bound`). Returns
    /// whether the search is complete: an entry whose last stable offset reaches
    /// `upper_bound` proves that every transaction open below the bound had ended by then, so
    /// no later entry (here or in a later segment) overlaps the range.
    pub fn collect(&self, fetch_offset: i64, upper_bound: i64, out: &mut Vec<AbortedTxn>) -> bool {
        let from = self
            .entries
            .partition_point(|e| e.last_offset < fetch_offset);
        for e in &self.entries[from..] {
            if e.first_offset < upper_bound {
                out.push(*e);
            }
            if e.last_stable_offset >= upper_bound {
                return true;
            }
        }
        false
    }
}

/// The entries of `bytes` (an index file of the segment at `base` ending at `next_offset`)
/// up to the first damaged one, and what is wrong with that one (`None` when every whole
/// entry is sound; a torn tail is for the caller to see in the length).
pub(crate) fn valid_prefix(
    bytes: &[u8],
    base: i64,
    next_offset: i64,
) -> (Vec<AbortedTxn>, Option<String>) {
    let mut entries: Vec<AbortedTxn> = Vec::new();
    for (i, chunk) in bytes.chunks_exact(AbortedTxn::ENTRY_LEN).enumerate() {
        let problem = match AbortedTxn::decode(chunk) {
            None => Some("not a version 0 entry with 0 <= first offset <= last offset".into()),
            Some(e) if e.last_offset < base || e.last_offset >= next_offset => Some(format!(
                "last offset {} outside the segment [{base}, {next_offset})",
                e.last_offset
            )),
            // An abort marker comes after its transaction's first record: an entry whose
            // first offset is its marker's is no entry the log wrote (a zero-filled tail a power
            // loss left, for one).
            Some(e) if e.first_offset >= e.last_offset => Some(format!(
                "first offset {} not before its marker at {}",
                e.first_offset, e.last_offset
            )),
            Some(e)
                if entries
                    .last()
                    .is_some_and(|l| l.last_offset >= e.last_offset) =>
            {
                Some(format!("last offset {} out of order", e.last_offset))
            }
            Some(e) => {
                entries.push(e);
                None
            }
        };
        if let Some(p) = problem {
            return (entries, Some(format!("entry {i}: {p}")));
        }
    }
    (entries, None)
}

#[cfg(test)]
#[path = "txn_index_tests.rs"]
mod tests;
