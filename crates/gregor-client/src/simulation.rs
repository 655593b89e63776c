//! Classic client bugs the deterministic simulator (gregor-sim) plants to show that its checker
//! finds them. Compiled only with the `simulation` feature, which only gregor-sim enables, and
//! off on every thread until the simulator turns one on for its own.

use std::cell::Cell;

/// A bug in this crate that a simulation can plant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// The batch encoder reuses one value buffer without clearing it: every record after the
    /// first of a batch carries the values before it in front of its own.
    BatchValueBufferReused,
    /// The consumer's decoder stops one record short in a batch of several (an off-by-one in
    /// its record loop) while its position still moves past the whole batch.
    DecoderDropsLastRecord,
}

thread_local! {
    static PLANTED: Cell<Option<PlantedBug>> = const { Cell::new(None) };
}

/// Plants `bug` (or none) on this thread: a simulation's clients run on the thread that
/// drives it.
pub fn plant_on_this_thread(bug: Option<PlantedBug>) {
    PLANTED.with(|p| p.set(bug));
}

/// Whether `bug` is planted on this thread.
pub(crate) fn planted(bug: PlantedBug) -> bool {
    PLANTED.with(|p| p.get()) == Some(bug)
}
