//! The controller: validates admin and broker requests against the committed metadata and turns
//! them into records. It never applies its own output: the caller appends the records to the
//! metadata log and then feeds them back through [`Controller::replay`] (a replicated quorum
//! does the same with committed entries). Requests must be handled one at a time, each after the
//! previous one's records were replayed, as Kafka's single-threaded controller does.
//!
//! Besides the image, the controller keeps only volatile state: broker heartbeat sessions and
//! the random generator. A new active controller rebuilds everything else by replaying the log.

mod acls;
mod brokers;
mod change;
mod configs;
mod features;
mod legacy_configs;
mod partitions;
mod quotas;
mod scram;
mod state;
mod topics;

pub use acls::{describe_acls, validate_new_acl, DeleteAclsFilterResult};
pub use brokers::{BrokerHeartbeat, BrokerHeartbeatReply, BrokerRegistrationRequest};
pub use change::Election;
pub use configs::{AlterConfigOp, AlterConfigsResource, AlterableConfig};
pub use features::{with_bootstrap_features, FeatureUpdate, FeatureUpgradeType};
pub use legacy_configs::LegacyConfig;
pub use partitions::{
    AlterPartitionData, AlterPartitionRequest, ElectionType, OngoingReassignment,
    PartitionStateReply,
};
pub use quotas::{
    describe_client_quotas, parse_entity, DescribedQuotaEntity, QuotaAlteration,
    QuotaFilterComponent, QuotaOp,
};
pub use scram::{
    describe_user_scram_credentials, DescribedScramUser, ScramCredentialDeletion,
    ScramCredentialInfo, ScramCredentialUpsertion, ScramUserResult,
};
pub use state::{Controller, ControllerResult, MAX_RECORDS_PER_USER_OP};
pub use topics::{
    CreatableTopic, CreatePartitionsTopic, CreateTopicResult, CreateTopicsRequest, CreatedTopic,
    DeleteTopicResult, TopicRef,
};
