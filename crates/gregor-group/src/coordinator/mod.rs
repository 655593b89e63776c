//! The coordinator: routes requests, fires deadlines, holds responses until their records are
//! durable, and rebuilds its state from `__consumer_offsets` at load.
//!
//! Layers, bottom up: `offset_store` and `state` (the coordinator's data and shared context),
//! the request handlers (`rebalance`, then `join`, `membership`, `offsets`, `admin`, `expiry`,
//! `load`, `txn_offsets`, `consumer` for KIP-848 groups, `mixed` for their classic members and
//! the migrations between protocols), and `dispatch` (the public entry points that route to them).

mod admin;
mod consumer;
mod consumer_admin;
mod consumer_load;
mod dispatch;
mod expiry;
mod join;
mod load;
mod load_figures;
mod membership;
mod migration;
mod mixed;
mod offset_delete;
mod offset_store;
mod offsets;
mod rebalance;
mod state;
mod txn_offsets;

pub use dispatch::{GroupSummary, MemberSummary};
pub use load::ReplayError;
pub use load_figures::{PartitionLoad, PartitionLoads};
pub use offset_store::CommittedOffset;
pub use state::GroupCoordinator;
