//! The controller quorum: the cluster metadata log replicated by openraft, stored with
//! gregor-log and applied to gregor-meta's controller. See the crate README.

// The large error types are openraft's own (its traits return them); boxing ours would not help.
#![allow(clippy::result_large_err)]

mod durable;
mod error;
mod follower;
mod kafka_probe;
mod log_store;
mod metadata_fetch;
mod node;
mod peer_health;
pub mod rpc;
pub mod session;
#[cfg(feature = "simulation")]
pub mod simulation;
mod state_machine;

use std::io::Cursor;

use serde::{Deserialize, Serialize};

pub use error::QuorumError;
pub use follower::{FollowerConfig, MetadataFollower};
pub use log_store::LogStore;
pub use node::{open_storage, CommitObserver, Quorum, QuorumConfig, QuorumHandle, WriteError};
pub use state_machine::{ApplyListener, StateMachineStore};

/// openraft's node id: Kafka's `node.id` (non-negative).
pub type NodeId = u64;

/// The payload of one Raft entry: the metadata records of one controller operation, each in
/// gregor-meta's encoding. Records of one operation commit together or not at all.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct MetadataBatch {
    pub records: Vec<Vec<u8>>,
}

impl std::fmt::Display for MetadataBatch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} metadata records", self.records.len())
    }
}

openraft::declare_raft_types!(
    /// Gregor's Raft types.
    pub TypeConfig:
        D = MetadataBatch,
        R = (),
        NodeId = NodeId,
        Node = openraft::BasicNode,
        Entry = openraft::Entry<TypeConfig>,
        SnapshotData = Cursor<Vec<u8>>,
        AsyncRuntime = openraft::TokioRuntime,
);

pub type Raft = openraft::Raft<TypeConfig>;
pub type LogId = openraft::LogId<NodeId>;
pub type Entry = openraft::Entry<TypeConfig>;
pub type Vote = openraft::Vote<NodeId>;
pub type StorageError = openraft::StorageError<NodeId>;
pub type StoredMembership = openraft::StoredMembership<NodeId, openraft::BasicNode>;
pub type SnapshotMeta = openraft::SnapshotMeta<NodeId, openraft::BasicNode>;

/// Bound on one encoded Raft message or stored entry: nothing a peer or a file says is sized
/// beyond it.
pub const MAX_MESSAGE_BYTES: u64 = 64 << 20;

fn bincode_options() -> impl bincode::Options {
    use bincode::Options;
    bincode::DefaultOptions::new()
        .with_fixint_encoding()
        .allow_trailing_bytes()
        .with_limit(MAX_MESSAGE_BYTES)
}

/// Encodes with the crate's bounded bincode options.
pub fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, bincode::Error> {
    use bincode::Options;
    bincode_options().serialize(value)
}

/// Decodes with the crate's bounded bincode options (allocations bounded by
/// [`MAX_MESSAGE_BYTES`]).
pub fn decode<T: serde::de::DeserializeOwned>(bytes: &[u8]) -> Result<T, bincode::Error> {
    use bincode::Options;
    bincode_options().deserialize(bytes)
}
