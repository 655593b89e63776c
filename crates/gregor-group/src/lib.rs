//! The classic consumer-group coordinator of Gregor as a pure state machine.
//!
//! * [`GroupCoordinator`]: JoinGroup / SyncGroup / Heartbeat / LeaveGroup / OffsetCommit /
//!   OffsetFetch / DescribeGroups / ListGroups / DeleteGroups for the groups of one
//!   `__consumer_offsets` partition, driven by [`GroupCoordinator::handle`],
//!   [`GroupCoordinator::tick`] and [`GroupCoordinator::append_completed`], each returning
//!   [`Effect`]s for the shell to carry out.
//! * [`records`]: Kafka's `__consumer_offsets` key and value formats.
//! * [`partition_for`]: which `__consumer_offsets` partition hosts a group.
//! * [`txn`]: transaction states and Kafka's `__transaction_state` record formats (the
//!   transaction coordinator's model).
//!
//! No I/O, no clocks, no threads: time comes in as `now_ms`, randomness from a seed.

pub mod api;
mod config;
pub mod consumer;
mod coordinator;
mod effect;
mod group;
pub mod history;
mod member_id;
mod partition;
pub mod records;
mod timer;
pub mod txn;

pub use api::*;
pub use config::{
    ConsumerGroupConfig, GroupConfig, GroupOverrides, GroupOverridesMap, MigrationPolicy,
};
pub use coordinator::{
    CommittedOffset, GroupCoordinator, GroupSummary, MemberSummary, PartitionLoad, PartitionLoads,
    ReplayError,
};
pub use effect::{AppendToken, Effect, Record, TxnProducer};
pub use group::GroupState;
pub use history::{Departure, DepartureCause, MemberRef, RebalanceHistory, RebalanceRecord};
pub use member_id::UuidSource;
pub use partition::{java_string_hash, kafka_abs, partition_for};
