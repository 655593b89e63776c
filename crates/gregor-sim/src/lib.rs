//! Deterministic simulation of a Gregor cluster (today: the controller quorum). Each seed gives
//! one fault schedule and one workload; the same seed gives the same event trace, byte for
//! byte. See the crate README.

mod acls;
mod admin;
mod broker_node;
mod checker;
mod data;
mod data_check;
pub mod entropy;
mod fence_check;
mod group;
mod group_check;
mod history;
mod isolate;
mod links;
mod node;
mod ops;
mod options;
mod property;
mod quotas;
mod replica_logs;
mod run;
mod scenario;
mod side_records;
mod side_view;
mod topics;
mod traffic;
mod txn;
mod txn_check;
mod txn_offsets;
mod txn_read;
mod txn_v2;
mod workload;

pub use isolate::{child_args, run_seed_in_child, run_seeds_in_children, ChildError};
pub use options::{Mode, Outcome, PlantedBug, SimOptions};
pub use property::{Property, Violation};
pub use run::run_seed;
pub use scenario::Scenario;
