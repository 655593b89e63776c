//! Group commit: an appender waits until an fdatasync that started after its write has
//! finished. One thread syncs at a time; every append written before its sync started is
//! covered by it, so concurrent appenders share syncs. This module knows nothing of the log:
//! the log hands it the sync to run.

use std::path::Path;
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tracing::error;

use crate::error::{LogError, Result};

/// Progress of syncing, behind its own mutex (never held together with the log's lock).
#[derive(Debug, Default)]
struct SyncState {
    /// Every append with a sequence number `<=` this is durable.
    synced_seq: u64,
    /// A thread is running fdatasync now.
    syncing: bool,
    /// An fdatasync failed: the log is offline.
    failed: bool,
    /// fdatasync calls made for appends.
    syncs: u64,
}

/// Told of every fdatasync that made appends durable: how long it took and how many appends it
/// covered (group commit). For metrics; process-wide.
pub type SyncObserver = Arc<dyn Fn(Duration, u64) + Send + Sync>;

static SYNC_OBSERVER: RwLock<Option<SyncObserver>> = RwLock::new(None);

/// Installs (or with `None` removes) the process-wide [`SyncObserver`]. The clock is read around
/// an fdatasync only while one is installed.
pub fn set_sync_observer(observer: Option<SyncObserver>) {
    *SYNC_OBSERVER
        .write()
        .unwrap_or_else(PoisonError::into_inner) = observer;
}

fn sync_observer() -> Option<SyncObserver> {
    SYNC_OBSERVER
        .read()
        .unwrap_or_else(PoisonError::into_inner)
        .clone()
}

/// Counters since the log was opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LogStats {
    /// Appends written.
    pub appends: u64,
    /// fdatasyncs made to make appends durable.
    pub syncs: u64,
}

/// Lock a mutex, recovering the guard if another thread panicked while holding it (every
/// critical section leaves the state consistent before anything that can panic).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// The sync progress of one log and the condition its waiting appenders sleep on.
#[derive(Debug, Default)]
pub(crate) struct GroupCommit {
    state: Mutex<SyncState>,
    cv: Condvar,
}

impl GroupCommit {
    /// fdatasync calls made for appends so far.
    pub fn syncs(&self) -> u64 {
        lock(&self.state).syncs
    }

    /// Block until the append with sequence number `seq` is durable. When no sync is running,
    /// this thread runs `sync_once` (which returns the sequence number it covered); a failed
    /// sync marks the log failed for good, and `mark_offline` is called once, for the caller
    /// to refuse further writes. `dir` names the log in errors.
    pub fn wait_durable(
        &self,
        seq: u64,
        dir: &Path,
        sync_once: impl Fn() -> Result<u64>,
        mark_offline: impl FnOnce(),
    ) -> Result<()> {
        let mut st = lock(&self.state);
        loop {
            if st.synced_seq >= seq {
                return Ok(());
            }
            if st.failed {
                return Err(LogError::Offline(dir.to_path_buf()));
            }
            if st.syncing {
                st = self.cv.wait(st).unwrap_or_else(PoisonError::into_inner);
                continue;
            }
            st.syncing = true;
            drop(st);
            let observer = sync_observer();
            let started = observer.as_ref().map(|_| Instant::now());
            let r = sync_once();
            st = lock(&self.state);
            st.syncing = false;
            match r {
                Ok(done) => {
                    let covered = done.saturating_sub(st.synced_seq);
                    st.synced_seq = st.synced_seq.max(done);
                    st.syncs += 1;
                    if let (Some(observe), Some(started)) = (observer, started) {
                        observe(started.elapsed(), covered);
                    }
                }
                Err(e) => {
                    st.failed = true;
                    self.cv.notify_all();
                    drop(st);
                    error!(dir = %dir.display(), error = %e, "fdatasync failed; log offline");
                    mark_offline();
                    return Err(e);
                }
            }
            self.cv.notify_all();
        }
    }
}
