//! Group commit: an appender waits until an fdatasync that started after its write has
//! finished. One thread syncs at a time; every append written before its sync started is
//! covered by it, so concurrent appenders share syncs.

use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use tracing::error;

use crate::error::{LogError, Result};
use crate::log::{lock, Log};

/// Progress of syncing, behind its own mutex (never held together with the log's lock).
#[derive(Debug, Default)]
pub(crate) struct SyncState {
    /// Every append with a sequence number `<=` this is durable.
    pub synced_seq: u64,
    /// A thread is running fdatasync now.
    pub syncing: bool,
    /// An fdatasync failed: the log is offline.
    pub failed: bool,
    /// fdatasync calls made for appends.
    pub syncs: u64,
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

impl Log {
    /// Block until the append with sequence number `seq` is durable.
    pub(crate) fn wait_durable(&self, seq: u64) -> Result<()> {
        let mut st = lock(&self.sync);
        loop {
            if st.synced_seq >= seq {
                return Ok(());
            }
            if st.failed {
                return Err(LogError::Offline(self.dir.clone()));
            }
            if st.syncing {
                st = self
                    .sync_cv
                    .wait(st)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                continue;
            }
            st.syncing = true;
            drop(st);
            let observer = sync_observer();
            let started = observer.as_ref().map(|_| Instant::now());
            let r = self.sync_once();
            st = lock(&self.sync);
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
                    self.sync_cv.notify_all();
                    drop(st);
                    error!(dir = %self.dir.display(), error = %e, "fdatasync failed; log offline");
                    lock(&self.inner).offline = true;
                    return Err(e);
                }
            }
            self.sync_cv.notify_all();
        }
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
        let syncs = lock(&self.sync).syncs;
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

    /// Under [`crate::FlushPolicy::Interval`], flush if `flush.ms` has passed since the last
    /// flush. Returns whether it flushed.
    pub fn flush_if_due(&self, now_ms: i64) -> Result<bool> {
        let seq = {
            let mut g = lock(&self.inner);
            let due = match g.config.flush {
                crate::FlushPolicy::EveryAppend => false,
                crate::FlushPolicy::Interval { ms, .. } => {
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
}
