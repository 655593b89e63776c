//! Deterministic simulation of a Gregor cluster (today: the controller quorum). Each seed gives
//! one fault schedule and one workload; the same seed gives the same event trace, byte for
//! byte. See the crate README.

mod checker;
mod node;
mod ops;
mod run;
mod scenario;
mod workload;

pub use checker::{Property, Violation};
pub use run::{run_seed, Outcome, PlantedBug, SimOptions};
pub use scenario::Scenario;
