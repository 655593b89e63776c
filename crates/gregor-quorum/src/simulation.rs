//! Classic state-machine and log-store bugs the deterministic simulator (gregor-sim) plants to
//! show that its checker finds them. Compiled only with the `simulation` feature, which only
//! gregor-sim enables, and off on every thread until the simulator turns one on for its own.

use std::cell::Cell;

/// A bug in this crate's storage that a simulation can plant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// Taking a snapshot first resets the state machine to the node's previous snapshot (a
    /// reload that reads the stale file): the applied index and the image go back while the
    /// node runs, and openraft, which saw those entries applied, never re-applies them.
    ReloadStaleSnapshot,
    /// A restarted voter takes its log end for committed: it applies entries of a deposed
    /// leader that never committed and that its new leader later truncates.
    CommittedIsLogEnd,
    /// A snapshot leaves out the partitions' leader and partition epochs (a field forgotten in
    /// its encoding): a node that restarts from it, or installs it from its leader, counts
    /// them from 0 again, while its peers go on from where they were.
    SnapshotWithoutEpochs,
    /// The active controller answers an operation that writes no records from its own image
    /// without confirming it still leads: a deposed leader answers from an image the cluster
    /// has moved past.
    DecideUnconfirmed,
}

thread_local! {
    static PLANTED: Cell<Option<PlantedBug>> = const { Cell::new(None) };
}

/// Plants `bug` (or none) on this thread: every node of a simulation runs on the thread that
/// drives it.
pub fn plant_on_this_thread(bug: Option<PlantedBug>) {
    PLANTED.with(|p| p.set(bug));
}

/// Whether `bug` is planted on this thread.
pub(crate) fn planted(bug: PlantedBug) -> bool {
    PLANTED.with(|p| p.get()) == Some(bug)
}
