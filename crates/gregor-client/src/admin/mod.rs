//! The admin client: what Kafka's `Admin` does, over the same requests.
//!
//! Each area is one module holding its pure request builders and response parsers (tested by
//! encoding responses with kafka-protocol) and the async `Admin` methods that route, send and
//! retry them.

pub mod cluster;
pub mod configs;
pub mod groups;
pub mod log_dirs;
pub mod offsets;
pub mod quotas;
pub mod reassign;
pub mod topics;
pub mod transactions;

mod base;

pub use base::{Admin, EntityResult};
pub use cluster::ClusterDescription;
pub use configs::{
    AlterConfigOp, ConfigEntry, ConfigResource, ConfigResourceType, ConfigSource, ConfigSynonym,
};
pub use groups::{
    CommittedOffset, DeletedOffsets, GroupDescription, GroupListing, MemberDescription,
};
pub use log_dirs::{LogDirDescription, ReplicaLogInfo};
pub use offsets::{IsolationLevel, ListedOffset, OffsetSpec};
pub use quotas::{QuotaAlteration, QuotaEntity, QuotaMatch};
pub use reassign::{ElectionType, OngoingReassignment};
pub use topics::{CreateTopicsOptions, CreatedTopic, NewPartitions, NewTopic, TopicListing};
pub use transactions::{
    AbortSpec, ListTransactionsFilter, ProducerState, TransactionDescription, TransactionListing,
};
