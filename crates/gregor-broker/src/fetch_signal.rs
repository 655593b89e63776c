//! The link between hosted partitions and the fetch sessions (KIP-227) that read them, so that
//! an incremental fetch costs what changed, not what the session holds.
//!
//! Each session has a [`SessionSignal`]: the set of its partitions that moved since it last
//! read them (log end, high watermark, log start, role, the replica stopping) and one
//! notification that a parked fetch of the session waits on. Each partition has its
//! [`Listeners`]: one entry per session registered with it, told of every change. A round of
//! a session reads only the partitions the request names, those changed since, and those not
//! yet settled (see `fetch_session.rs`).
//!
//! A follower's session also keeps when it last fetched: a partition it holds and names no new
//! offset for has the same fetch offset as before, so if that offset is the leader's log end,
//! the follower was caught up at that fetch (`isr.rs` reads it through
//! [`Listeners::last_fetch_by`] instead of every fetch touching every partition).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};

use tokio::sync::Notify;

/// A partition of a session: the index of its topic in the session's topic table, and its
/// index.
pub type PartitionKey = (u32, i32);

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// What moved in a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// Only the log end offset (an append not yet committed): news for followers only.
    LogEnd,
    /// What consumers see too: the high watermark, the log start offset, the role, the ISR,
    /// the replica stopping.
    Any,
    /// Nothing an answer carries, but the next fetch of each session should look at the
    /// partition again (an ISR proposal was settled: another may follow from a follower's
    /// fetch). Wakes no parked fetch, so a refused proposal is retried at the fetch rate.
    Recheck,
}

/// One fetch session's view of its partitions' changes.
#[derive(Debug)]
pub struct SessionSignal {
    /// The replica id of a follower's session; `None` for a consumer's.
    replica: Option<i32>,
    /// Partitions that changed since the session last drained the set.
    dirty: Mutex<HashSet<PartitionKey>>,
    /// Woken (one permit kept) when a partition joins `dirty`.
    notify: Notify,
    /// The partitions' listener lists this session is registered with, by key.
    registered: Mutex<HashMap<PartitionKey, Weak<Listeners>>>,
    /// When the session's last fetch began (ms on the broker's clock).
    last_fetch_ms: AtomicI64,
}

impl SessionSignal {
    pub fn new(replica: Option<i32>, now_ms: i64) -> Arc<SessionSignal> {
        Arc::new(SessionSignal {
            replica,
            dirty: Mutex::new(HashSet::new()),
            notify: Notify::new(),
            registered: Mutex::new(HashMap::new()),
            last_fetch_ms: AtomicI64::new(now_ms),
        })
    }

    /// Partition `key` changed.
    fn mark(&self, key: PartitionKey, change: Change) {
        // Consumers read to the high watermark: an append alone shows them nothing. (The
        // planted bug has them read to the log end, as followers do.)
        let consumer_blind = self.replica.is_none() && !planted!(ConsumerReadsUncommitted);
        if change == Change::LogEnd && consumer_blind {
            return;
        }
        lock(&self.dirty).insert(key);
        if change != Change::Recheck {
            self.notify.notify_one();
        }
    }

    /// The partitions that changed since the last call, and forgets a wake-up they left: the
    /// caller is about to read them.
    pub fn take_dirty(&self) -> Vec<PartitionKey> {
        // A permit stored by marks taken here would wake the next park for nothing. (Taken
        // first: a mark after the drain keeps its permit.)
        let _ = futures::FutureExt::now_or_never(self.notify.notified());
        lock(&self.dirty).drain().collect()
    }

    /// Resolves when a partition of the session changes (at once if one did since the last
    /// [`SessionSignal::take_dirty`]).
    pub async fn changed(&self) {
        self.notify.notified().await
    }

    /// A fetch of the session began at `now_ms`.
    pub fn fetched_at(&self, now_ms: i64) {
        self.last_fetch_ms.fetch_max(now_ms, Ordering::Relaxed);
    }

    /// Registers the session with a partition's `listeners` under `key`. Returns whether it
    /// already was: if not, a read made before this call may have missed a change.
    pub fn watch(self: &Arc<Self>, key: PartitionKey, listeners: &Arc<Listeners>) -> bool {
        let mut registered = lock(&self.registered);
        if registered
            .get(&key)
            .is_some_and(|w| std::ptr::eq(w.as_ptr(), Arc::as_ptr(listeners)))
        {
            return true;
        }
        // The key now names another replica (the partition was re-created or came back).
        if let Some(old) = registered
            .insert(key, Arc::downgrade(listeners))
            .and_then(|w| w.upgrade())
        {
            old.remove(self, key);
        }
        listeners.add(self, key);
        false
    }

    /// The session no longer holds partition `key`.
    pub fn forget(&self, key: PartitionKey) {
        let old = lock(&self.registered).remove(&key);
        if let Some(l) = old.and_then(|w| w.upgrade()) {
            l.remove(self, key);
        }
        lock(&self.dirty).remove(&key);
    }
}

/// The fetch sessions that hold one partition, each with the key it has there.
#[derive(Debug, Default)]
pub struct Listeners(Mutex<Vec<(Weak<SessionSignal>, PartitionKey)>>);

impl Listeners {
    /// Tells every live session holding the partition that it changed.
    pub fn announce(&self, change: Change) {
        lock(&self.0).retain(|(s, key)| match s.upgrade() {
            Some(s) => {
                s.mark(*key, change);
                true
            }
            None => false,
        });
    }

    fn add(&self, s: &Arc<SessionSignal>, key: PartitionKey) {
        let mut l = lock(&self.0);
        l.retain(|(w, _)| w.strong_count() > 0);
        let ptr = Arc::as_ptr(s);
        if !l
            .iter()
            .any(|(w, k)| *k == key && std::ptr::eq(w.as_ptr(), ptr))
        {
            l.push((Arc::downgrade(s), key));
        }
    }

    fn remove(&self, s: &SessionSignal, key: PartitionKey) {
        let ptr: *const SessionSignal = s;
        lock(&self.0).retain(|(w, k)| !(*k == key && std::ptr::eq(w.as_ptr(), ptr)));
    }

    /// When follower `replica` last fetched in a live session holding this partition: as of
    /// then its fetch offset for it was the one it last named.
    pub fn last_fetch_by(&self, replica: i32) -> Option<i64> {
        lock(&self.0)
            .iter()
            .filter_map(|(w, _)| w.upgrade())
            .filter(|s| s.replica == Some(replica))
            .map(|s| s.last_fetch_ms.load(Ordering::Relaxed))
            .max()
    }

    /// Sessions registered (live or not yet pruned).
    pub fn len(&self) -> usize {
        lock(&self.0).len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What one read of a partition in a session round leaves for the session to know.
#[derive(Debug, Clone, Default)]
pub struct ReadState {
    /// Nothing for the reader there: no error, its fetch offset at the end it reads to. A
    /// settled partition is read again only when it changes or the fetcher names it.
    pub settled: bool,
    /// The partition's listeners (it was located).
    pub listeners: Option<Arc<Listeners>>,
}
