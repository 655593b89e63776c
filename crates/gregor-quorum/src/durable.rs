//! What a durable snapshot covers, shared by the state machine and the log store.
//!
//! openraft 0.9 does not order the log's purge after the state machine's snapshot install: on
//! a follower that installs a leader's snapshot, `RaftLogStorage::purge` runs while the state
//! machine still writes the snapshot. Entries removed before the snapshot that covers them is
//! on disk leave, after a power cut, a log that starts past everything the node can rebuild
//! (issue 36). So the log store removes entries only below what [`SnapshotWatermark`] says a
//! fsynced snapshot covers.

use std::sync::Arc;

use tokio::sync::watch;

use crate::LogId;

#[derive(Debug, Clone, Default)]
struct Coverage {
    /// The last log id a snapshot on disk (file and directory entry fsynced) covers.
    last: Option<LogId>,
    /// The state machine failed to write a snapshot: nothing will move the mark any more.
    failed: Option<String>,
}

/// The last log id that a durable snapshot covers (cheap to clone; clones share it).
#[derive(Debug, Clone)]
pub(crate) struct SnapshotWatermark {
    tx: Arc<watch::Sender<Coverage>>,
}

impl SnapshotWatermark {
    pub fn new() -> SnapshotWatermark {
        SnapshotWatermark {
            tx: Arc::new(watch::channel(Coverage::default()).0),
        }
    }

    /// The last log id a durable snapshot covers.
    pub fn covered(&self) -> Option<LogId> {
        self.tx.borrow().last
    }

    /// Whether a durable snapshot covers `id`.
    pub fn covers(&self, id: LogId) -> bool {
        self.covered().is_some_and(|c| c.index >= id.index)
    }

    /// A snapshot covering `last` is now durable (the mark never moves back).
    pub fn advance(&self, last: Option<LogId>) {
        self.tx.send_if_modified(|c| {
            let moved = last > c.last;
            if moved {
                c.last = last;
            }
            moved
        });
    }

    /// Writing a snapshot failed: whoever waits for one gives up.
    pub fn fail(&self, reason: String) {
        self.tx.send_modify(|c| {
            c.failed.get_or_insert(reason);
        });
    }

    /// Waits until a durable snapshot covers `id`; an error when the state machine failed to
    /// write one.
    pub async fn wait_covers(&self, id: LogId) -> Result<(), String> {
        let covers = |c: &Coverage| c.last.is_some_and(|l| l.index >= id.index);
        let mut rx = self.tx.subscribe();
        let got = rx
            .wait_for(|c| covers(c) || c.failed.is_some())
            .await
            // The sender lives in this struct, which the caller holds.
            .map_err(|_| "snapshot watermark closed".to_string())?;
        match &got.failed {
            Some(reason) if !covers(&got) => Err(format!(
                "no durable snapshot covers {id}: writing it failed: {reason}"
            )),
            _ => Ok(()),
        }
    }
}
