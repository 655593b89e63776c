//! openraft's log storage over a gregor-log log: Raft entry `i` is a one-record batch at offset
//! `i` whose partition leader epoch is the entry's term; the record's value is the bincode of the
//! entry. The vote, the committed log id and the last purged log id live in small files beside
//! the segments, each replaced atomically (written, fsynced, renamed, directory fsynced).
//!
//! A purge takes effect for openraft at once, but entries leave the disk only once a durable
//! snapshot covers them (see [`crate::durable`]): at every crash point the snapshot on disk
//! covers whatever the log on disk lacks.

use std::fmt::Debug;
use std::ops::{Bound, RangeBounds};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

use gregor_log::records::{decode_batch, encode_batch, BatchSpec, Record};
use gregor_log::{Disk, FaultInjector, Log, LogConfig};
use openraft::storage::{LogFlushed, RaftLogStorage};
use openraft::{AnyError, LogState, RaftLogReader, StorageIOError};

use crate::durable::SnapshotWatermark;
use crate::{decode, encode, Entry, LogId, QuorumError, StorageError, TypeConfig, Vote};

pub(crate) const VOTE_FILE: &str = "quorum-state";
const COMMITTED_FILE: &str = "quorum-committed";
const PURGED_FILE: &str = "quorum-purged";

/// Bytes read from the log per step when loading entries.
const READ_CHUNK: usize = 1 << 20;

struct State {
    vote: Option<Vote>,
    committed: Option<LogId>,
    /// The last entry purged as openraft sees it: nothing at or below it is read.
    last_purged: Option<LogId>,
    /// The last purged entry as `quorum-purged` says it (behind `last_purged` while the
    /// snapshot covering the rest is not yet durable).
    purged_on_disk: Option<LogId>,
    /// Id of the last entry in the log (cached; the log itself is the truth at open).
    last: Option<LogId>,
}

struct Inner {
    log: Log,
    dir: PathBuf,
    disk: Disk,
    state: Mutex<State>,
    /// What a durable snapshot covers: entries leave the disk only below it.
    watermark: SnapshotWatermark,
}

/// The metadata log as openraft sees it. Cloning shares the log (the clone is the log reader).
#[derive(Clone)]
pub struct LogStore {
    inner: Arc<Inner>,
}

fn io_err(e: impl std::fmt::Display) -> AnyError {
    AnyError::error(e.to_string())
}

fn read_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::read_logs(io_err(e)).into()
}

fn write_err(e: impl std::fmt::Display) -> StorageError {
    StorageIOError::write_logs(io_err(e)).into()
}

/// The log's own settings: metadata batches are small and few; one large operation (thousands
/// of partitions) must still fit in one entry.
fn metadata_log_config() -> LogConfig {
    LogConfig {
        max_message_bytes: 32 << 20,
        segment_bytes: 64 << 20,
        retention_ms: None,
        ..LogConfig::default()
    }
}

impl LogStore {
    /// Opens (creating if needed) the metadata log in `dir`.
    pub fn open(
        dir: &Path,
        faults: Option<Arc<FaultInjector>>,
        now_ms: i64,
    ) -> Result<LogStore, QuorumError> {
        let (log, disk) = match &faults {
            Some(f) => (
                Log::open_with_faults(dir, metadata_log_config(), now_ms, f.clone())?,
                Disk::with_faults(f.clone()),
            ),
            None => (Log::open(dir, metadata_log_config(), now_ms)?, Disk::real()),
        };
        let vote = read_file::<Vote>(&dir.join(VOTE_FILE))?;
        let committed = read_file::<LogId>(&dir.join(COMMITTED_FILE))?;
        let last_purged = read_file::<LogId>(&dir.join(PURGED_FILE))?;
        let store = LogStore {
            inner: Arc::new(Inner {
                log,
                dir: dir.to_path_buf(),
                disk,
                state: Mutex::new(State {
                    vote,
                    committed,
                    last_purged,
                    purged_on_disk: last_purged,
                    last: None,
                }),
                watermark: SnapshotWatermark::new(),
            }),
        };
        let leo = store.inner.log.log_end_offset();
        let last = if leo > store.inner.log.log_start_offset() && store.has_quorum_state() {
            let entries = store.read_range(leo - 1, leo)?;
            entries.last().map(|e| e.log_id)
        } else {
            None
        };
        store.lock().last = last;
        Ok(store)
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.inner
            .state
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// Whether this log was ever written by the quorum (a vote was saved). A log without it is
    /// either new or a pre-quorum single-node metadata log.
    pub fn has_quorum_state(&self) -> bool {
        self.inner.dir.join(VOTE_FILE).exists()
    }

    /// The underlying log (for converting a pre-quorum log).
    pub(crate) fn log(&self) -> &Log {
        &self.inner.log
    }

    pub(crate) fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// What a durable snapshot covers (the state machine moves it).
    pub(crate) fn watermark(&self) -> &SnapshotWatermark {
        &self.inner.watermark
    }

    /// The first index a reader may ask for: after the last purged entry.
    pub(crate) fn first_index(&self) -> u64 {
        let purged = self.lock().last_purged.map_or(0, |p| p.index + 1);
        purged.max(self.inner.log.log_start_offset().max(0) as u64)
    }

    /// At start, once the state machine loaded its snapshot: the entries the log lacks must be
    /// in it, or nothing can rebuild them.
    pub(crate) fn check_snapshot_covers_purged(&self) -> Result<(), QuorumError> {
        let purged = self.lock().purged_on_disk;
        match purged {
            Some(p) if !self.inner.watermark.covers(p) => Err(QuorumError::PurgedPastSnapshot {
                purged: p.to_string(),
                snapshot: format!("{:?}", self.inner.watermark.covered()),
            }),
            _ => Ok(()),
        }
    }

    /// Closes the metadata log cleanly (synced, checkpoints and clean-shutdown marker written)
    /// once Raft no longer writes it; any write that still comes is refused.
    pub(crate) fn close(&self) -> Result<(), QuorumError> {
        Ok(self.inner.log.close()?)
    }

    /// Empties the log and records `purged` as the last entry a snapshot covers (conversion of a
    /// pre-quorum log, whose records the snapshot now holds).
    pub(crate) fn reset_after(&self, purged: LogId, vote: Vote) -> Result<(), QuorumError> {
        write_file(&self.inner.disk, &self.inner.dir.join(PURGED_FILE), &purged)?;
        write_file(
            &self.inner.disk,
            &self.inner.dir.join(COMMITTED_FILE),
            &purged,
        )?;
        self.inner
            .log
            .truncate_fully_and_start_at(purged.index as i64 + 1)?;
        write_file(&self.inner.disk, &self.inner.dir.join(VOTE_FILE), &vote)?;
        let mut s = self.lock();
        s.last_purged = Some(purged);
        s.purged_on_disk = Some(purged);
        s.committed = Some(purged);
        s.vote = Some(vote);
        s.last = None;
        Ok(())
    }

    /// Marks a new, empty log as a quorum log (an empty vote, fsynced), so that a crash before
    /// the first real vote is not mistaken for a pre-quorum log.
    pub(crate) fn reset_after_empty(&self) -> Result<(), QuorumError> {
        let vote = Vote::default();
        write_file(&self.inner.disk, &self.inner.dir.join(VOTE_FILE), &vote)?;
        self.lock().vote = Some(vote);
        Ok(())
    }

    /// Entries at offsets `[start, end)` that exist in the log and are not purged.
    pub(crate) fn read_range(&self, start: i64, end: i64) -> Result<Vec<Entry>, QuorumError> {
        let start = start.max(self.first_index() as i64);
        let mut out = Vec::new();
        for_each_record(&self.inner.log, start, end, |offset, value| {
            let entry: Entry = decode(value).map_err(|e| e.to_string())?;
            if entry.log_id.index as i64 != offset {
                return Err(format!("entry {} stored at offset {offset}", entry.log_id));
            }
            out.push(entry);
            Ok(())
        })?;
        Ok(out)
    }
}

/// Calls `f(offset, value)` for every record at offsets `[start, end)` in the log, in order; an
/// undecodable batch or an error from `f` is [`QuorumError::Corrupt`] at that offset.
pub(crate) fn for_each_record(
    log: &Log,
    start: i64,
    end: i64,
    mut f: impl FnMut(i64, &[u8]) -> Result<(), String>,
) -> Result<(), QuorumError> {
    let mut offset = start.max(log.log_start_offset());
    let end = end.min(log.log_end_offset());
    while offset < end {
        let read = log.read(offset, READ_CHUNK, None)?;
        let Some(next) = read.next_offset else { break };
        let mut rest: &[u8] = &read.records;
        while !rest.is_empty() {
            let (header, records) = decode_batch(rest).map_err(|e| QuorumError::Corrupt {
                offset,
                reason: e.to_string(),
            })?;
            for r in records {
                if r.offset < offset || r.offset >= end {
                    continue;
                }
                let value = r.value.unwrap_or_default();
                f(r.offset, &value).map_err(|reason| QuorumError::Corrupt {
                    offset: r.offset,
                    reason,
                })?;
            }
            rest = &rest[header.size()..];
        }
        if next <= offset {
            break;
        }
        offset = next;
    }
    Ok(())
}

fn read_file<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, QuorumError> {
    match std::fs::read(path) {
        Ok(bytes) => decode(&bytes).map(Some).map_err(|e| QuorumError::File {
            path: path.to_path_buf(),
            reason: format!("unreadable: {e}"),
        }),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(QuorumError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        }),
    }
}

fn write_file<T: serde::Serialize>(disk: &Disk, path: &Path, value: &T) -> Result<(), QuorumError> {
    let bytes = encode(value).map_err(|e| QuorumError::File {
        path: path.to_path_buf(),
        reason: e.to_string(),
    })?;
    disk.write_atomic(path, &bytes)
        .map_err(|e| QuorumError::File {
            path: path.to_path_buf(),
            reason: e.to_string(),
        })
}

/// One entry as a one-record batch at offset = index.
fn entry_batch(entry: &Entry) -> Result<Vec<u8>, StorageError> {
    let value = encode(entry).map_err(write_err)?;
    let offset = entry.log_id.index as i64;
    let spec = BatchSpec {
        base_offset: offset,
        partition_leader_epoch: i32::try_from(entry.log_id.leader_id.term).unwrap_or(i32::MAX),
        ..BatchSpec::default()
    };
    encode_batch(
        &spec,
        &[Record {
            offset,
            timestamp: 0,
            key: None,
            value: Some(value.into()),
            headers: Vec::new(),
        }],
    )
    .map_err(write_err)
}

fn bounds<RB: RangeBounds<u64>>(range: &RB) -> (i64, i64) {
    let start = match range.start_bound() {
        Bound::Included(s) => *s as i64,
        Bound::Excluded(s) => *s as i64 + 1,
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(e) => (*e as i64).saturating_add(1),
        Bound::Excluded(e) => *e as i64,
        Bound::Unbounded => i64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + Send>(
        &mut self,
        range: RB,
    ) -> Result<Vec<Entry>, StorageError> {
        let (start, end) = bounds(&range);
        self.read_range(start, end).map_err(read_err)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = LogStore;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, StorageError> {
        let s = self.lock();
        let last_purged_log_id = s.last_purged;
        let last_log_id = s.last.or(last_purged_log_id);
        Ok(LogState {
            last_purged_log_id,
            last_log_id,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &Vote) -> Result<(), StorageError> {
        let _stale = gregor_log::take_simulated_delay();
        write_file(&self.inner.disk, &self.inner.dir.join(VOTE_FILE), vote)
            .map_err(|e| StorageIOError::write_vote(io_err(e)))?;
        wait_for_simulated_disk().await;
        self.lock().vote = Some(*vote);
        Ok(())
    }

    async fn read_vote(&mut self) -> Result<Option<Vote>, StorageError> {
        Ok(self.lock().vote)
    }

    async fn save_committed(&mut self, committed: Option<LogId>) -> Result<(), StorageError> {
        if let Some(c) = committed {
            if self.lock().committed == Some(c) {
                return Ok(());
            }
            let _stale = gregor_log::take_simulated_delay();
            write_file(&self.inner.disk, &self.inner.dir.join(COMMITTED_FILE), &c)
                .map_err(write_err)?;
            wait_for_simulated_disk().await;
        }
        self.lock().committed = committed;
        Ok(())
    }

    async fn read_committed(&mut self) -> Result<Option<LogId>, StorageError> {
        #[cfg(feature = "simulation")]
        if crate::simulation::planted(crate::simulation::PlantedBug::CommittedIsLogEnd) {
            return Ok(self.get_log_state().await?.last_log_id);
        }
        Ok(self.lock().committed)
    }

    async fn append<I>(
        &mut self,
        entries: I,
        callback: LogFlushed<TypeConfig>,
    ) -> Result<(), StorageError>
    where
        I: IntoIterator<Item = Entry> + Send,
        I::IntoIter: Send,
    {
        let result = self.append_durably(entries).await;
        // Only now: openraft counts the entries as stored once the callback says so.
        callback.log_io_completed(
            result
                .as_ref()
                .map(|_| ())
                .map_err(|e| std::io::Error::other(e.to_string())),
        );
        result
    }

    async fn truncate(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // Removes the entries at and after `log_id` (a conflict with the leader's log).
        self.inner
            .log
            .truncate_to(log_id.index as i64)
            .map_err(write_err)?;
        let index = log_id.index;
        let last = if index == 0 {
            None
        } else {
            let prev = self
                .read_range(index as i64 - 1, index as i64)
                .map_err(read_err)?;
            prev.last().map(|e| e.log_id)
        };
        let mut s = self.lock();
        s.last = last.or(s.last_purged);
        Ok(())
    }

    async fn purge(&mut self, log_id: LogId) -> Result<(), StorageError> {
        // The entries up to and including `log_id` are gone for openraft from now on (a
        // snapshot covers them); they leave the disk once that snapshot is durable, which on a
        // follower installing it may be a little later (openraft purges while the state
        // machine still writes it).
        {
            let mut s = self.lock();
            if s.last_purged.is_some_and(|p| p.index >= log_id.index) {
                return Ok(());
            }
            s.last_purged = Some(log_id);
            if s.last.is_some_and(|l| l.index <= log_id.index) {
                s.last = None;
            }
        }
        self.remove_purged_if_covered()
    }
}

impl LogStore {
    /// What [`RaftLogStorage::append`] does before it reports the flush: appends `entries`
    /// and returns once they are durable (synced, and the simulated disk's time waited out).
    /// Public for the storage's own tests, which cannot build openraft's flush callback.
    pub async fn append_durably(
        &self,
        entries: impl IntoIterator<Item = Entry>,
    ) -> Result<(), StorageError> {
        let _stale = gregor_log::take_simulated_delay();
        let mut bytes = Vec::new();
        let mut first = None;
        let mut last = None;
        for e in entries {
            first.get_or_insert(e.log_id.index);
            last = Some(e.log_id);
            bytes.extend_from_slice(&entry_batch(&e)?);
        }
        if let (Some(first), Some(last)) = (first, last) {
            self.make_room_for(first).await?;
            self.inner
                .log
                .append_as_follower(&bytes, 0)
                .map_err(write_err)?;
            self.lock().last = Some(last);
        }
        // The flush completes only once the (simulated) disk has taken its time.
        wait_for_simulated_disk().await;
        Ok(())
    }

    /// Removes from the disk the entries openraft purged, if a durable snapshot covers them
    /// (otherwise they stay until one does). The purged id is recorded first, so a crash in
    /// between leaves entries openraft will not read.
    fn remove_purged_if_covered(&self) -> Result<(), StorageError> {
        let (target, on_disk) = {
            let s = self.lock();
            (s.last_purged, s.purged_on_disk)
        };
        let Some(target) = target else { return Ok(()) };
        if on_disk.is_some_and(|d| d.index >= target.index) || !self.inner.watermark.covers(target)
        {
            return Ok(());
        }
        write_file(&self.inner.disk, &self.inner.dir.join(PURGED_FILE), &target)
            .map_err(write_err)?;
        self.lock().purged_on_disk = Some(target);
        let log = &self.inner.log;
        let start = target.index as i64 + 1;
        if start >= log.log_end_offset() {
            log.truncate_fully_and_start_at(start).map_err(write_err)?;
        } else {
            log.set_high_watermark(log.log_end_offset());
            log.delete_records_before(start).map_err(write_err)?;
        }
        Ok(())
    }

    /// Before entries from index `first` are appended: a log that ends before `first` starts
    /// over at `first`. If it holds entries, they must have been purged (an installed snapshot
    /// covers them), and it starts over only once that snapshot is durable: until then the old
    /// entries are all that would rebuild the state after a power loss.
    async fn make_room_for(&self, first: u64) -> Result<(), StorageError> {
        let log = &self.inner.log;
        if first as i64 <= log.log_end_offset() {
            return self.remove_purged_if_covered();
        }
        if log.log_start_offset() >= log.log_end_offset() {
            // An empty log loses nothing by starting over at `first`.
            self.remove_purged_if_covered()?;
            return log
                .truncate_fully_and_start_at(first as i64)
                .map_err(write_err);
        }
        let purged = self.lock().last_purged;
        let Some(purged) = purged.filter(|p| p.index + 1 >= first) else {
            return Err(write_err(format!(
                "entries from {first} would leave a gap after the log's end {}",
                log.log_end_offset()
            )));
        };
        self.inner
            .watermark
            .wait_covers(purged)
            .await
            .map_err(write_err)?;
        self.remove_purged_if_covered()?;
        if first as i64 > log.log_end_offset() {
            // A purge that a crash cut short: the durable snapshot covers what is missing.
            tracing::info!(
                first,
                leo = log.log_end_offset(),
                "metadata log restarts after a snapshot"
            );
            log.truncate_fully_and_start_at(first as i64)
                .map_err(write_err)?;
        }
        Ok(())
    }
}

/// Waits out, on the runtime's clock, what a simulated slow disk charged the syncs this thread
/// just ran (`gregor_log::FaultInjector::set_simulated_sync_delay`; nothing outside a
/// simulation). Each storage call first drops debt left on the thread by other work, which is
/// not its own.
async fn wait_for_simulated_disk() {
    let owed = gregor_log::take_simulated_delay();
    if !owed.is_zero() {
        tokio::time::sleep(owed).await;
    }
}
