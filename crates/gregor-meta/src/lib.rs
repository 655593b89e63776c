//! Cluster metadata for Gregor: the records that describe the cluster, the [`MetadataImage`]
//! every broker builds from them, and the [`Controller`] state machine that turns admin and
//! broker requests into records.
//!
//! Everything here is pure: no I/O, no clocks (time comes in as `now_ms`), no threads. The broker
//! shell stores records in the metadata log (openraft for a quorum), applies them and acts on the
//! resulting [`MetadataDelta`].

pub mod acl;
mod codec;
pub mod config;
mod controller;
mod delta;
mod describe;
mod error;
pub mod features;
mod image;
mod image_diff;
pub mod placement;
pub mod quota;
pub mod reassign_plan;
mod record;
mod registration;
mod scram;
pub mod topic_name;
mod types;

pub use controller::*;
pub use delta::{
    LeaderElections, LocalPartition, LocalReplicaChanges, MetadataDelta, PartitionDelta,
    StoppedReplica,
};
pub use describe::{
    describe_topic, describe_topics, kafka_uuid_string, PartitionDescription, TopicDescription,
};
pub use error::{ApiError, DecodeError, ImageError};
pub use image::{BrokerRegistration, MetadataImage, PartitionRegistration, TopicImage};
pub use kafka_protocol::ResponseError;
pub use record::*;
#[cfg(feature = "simulation")]
pub use registration::plant_election_keeps_leader_epoch;
pub use scram::{
    RemoveUserScramCredentialRecord, ScramCredential, ScramCredentials, ScramMechanism,
    UserScramCredentialRecord,
};
pub use types::{BrokerId, SplitMix64, TopicIdPartition, TopicPartition, NO_LEADER};
pub use uuid::Uuid;
