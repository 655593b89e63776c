//! Metadata records: the only way cluster metadata changes. The controller turns requests into
//! records, the metadata log (openraft in a quorum, a local log for one node) stores them, and
//! every broker applies them to its [`crate::MetadataImage`]. Fields follow Kafka's KRaft records
//! (`metadata/src/main/resources/common/metadata/*Record.json`).

pub use crate::acl::types::{AccessControlEntryRecord, RemoveAccessControlEntryRecord};
pub use crate::features::FeatureLevelRecord;
pub use crate::quota::ClientQuotaRecord;
pub use crate::scram::{RemoveUserScramCredentialRecord, UserScramCredentialRecord};
use crate::types::BrokerId;
use uuid::Uuid;

/// A network endpoint a broker listens on (`listeners` / `advertised.listeners`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct BrokerEndpoint {
    /// Listener name, e.g. `PLAINTEXT`.
    pub name: String,
    /// Host clients connect to.
    pub host: String,
    /// Port.
    pub port: u16,
    /// Kafka security protocol id (0 PLAINTEXT, 1 SSL, 2 SASL_PLAINTEXT, 3 SASL_SSL).
    pub security_protocol: i16,
}

/// `RegisterBrokerRecord`: a broker (re)registered; it starts fenced until it has caught up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RegisterBrokerRecord {
    /// Broker id.
    pub broker_id: BrokerId,
    /// Random id of this broker process; a restart gets a new one.
    pub incarnation_id: Uuid,
    /// Broker epoch assigned by the controller; grows with every registration.
    pub broker_epoch: i64,
    /// Listeners.
    pub endpoints: Vec<BrokerEndpoint>,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// Whether the broker starts fenced (true for a normal registration).
    pub fenced: bool,
}

/// `FenceBrokerRecord` / `UnfenceBrokerRecord` / `UnregisterBrokerRecord` payload.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BrokerEpochRecord {
    /// Broker id.
    pub broker_id: BrokerId,
    /// The registration epoch the change applies to.
    pub broker_epoch: i64,
}

/// `TopicRecord`: a topic exists with this name and id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicRecord {
    /// Topic name.
    pub name: String,
    /// Topic id.
    pub topic_id: Uuid,
}

/// Whether the leader was elected uncleanly and is still rebuilding the ISR (KIP-704).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub enum LeaderRecoveryState {
    /// Normal: the leader came from the ISR.
    #[default]
    Recovered,
    /// The leader was elected from outside the ISR and has not yet recovered.
    Recovering,
}

impl LeaderRecoveryState {
    /// Kafka's wire value.
    pub fn as_i8(self) -> i8 {
        match self {
            LeaderRecoveryState::Recovered => 0,
            LeaderRecoveryState::Recovering => 1,
        }
    }

    /// From Kafka's wire value.
    pub fn from_i8(v: i8) -> Option<Self> {
        match v {
            0 => Some(LeaderRecoveryState::Recovered),
            1 => Some(LeaderRecoveryState::Recovering),
            _ => None,
        }
    }
}

/// `PartitionRecord`: the full state of one partition (on creation, and in snapshots).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionRecord {
    /// Topic id.
    pub topic_id: Uuid,
    /// Partition index.
    pub partition: i32,
    /// Replicas in preferred order (the first is the preferred leader).
    pub replicas: Vec<BrokerId>,
    /// In-sync replicas.
    pub isr: Vec<BrokerId>,
    /// Replicas being removed by a reassignment.
    pub removing_replicas: Vec<BrokerId>,
    /// Replicas being added by a reassignment.
    pub adding_replicas: Vec<BrokerId>,
    /// Leader, or [`crate::NO_LEADER`].
    pub leader: BrokerId,
    /// Leader recovery state.
    pub leader_recovery_state: LeaderRecoveryState,
    /// Leader epoch.
    pub leader_epoch: i32,
    /// Partition epoch: bumped by every change; fences `AlterPartition`.
    pub partition_epoch: i32,
}

/// The leader field of a [`PartitionChangeRecord`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaderChange {
    /// Kafka's `-2`: the leader did not change (the leader epoch stays).
    Unchanged,
    /// A new leader ([`crate::NO_LEADER`] for none); the leader epoch is bumped.
    To(BrokerId),
}

/// `PartitionChangeRecord`: a partial update; `None` fields are unchanged. Applying one always
/// bumps the partition epoch, and bumps the leader epoch when `leader` is set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionChangeRecord {
    /// Topic id.
    pub topic_id: Uuid,
    /// Partition index.
    pub partition: i32,
    /// New ISR.
    pub isr: Option<Vec<BrokerId>>,
    /// New leader.
    pub leader: LeaderChange,
    /// New replica list.
    pub replicas: Option<Vec<BrokerId>>,
    /// New removing replicas.
    pub removing_replicas: Option<Vec<BrokerId>>,
    /// New adding replicas.
    pub adding_replicas: Option<Vec<BrokerId>>,
    /// New leader recovery state.
    pub leader_recovery_state: Option<LeaderRecoveryState>,
}

impl PartitionChangeRecord {
    /// A change that changes nothing yet (fill in the fields that change).
    pub fn new(topic_id: Uuid, partition: i32) -> Self {
        PartitionChangeRecord {
            topic_id,
            partition,
            isr: None,
            leader: LeaderChange::Unchanged,
            replicas: None,
            removing_replicas: None,
            adding_replicas: None,
            leader_recovery_state: None,
        }
    }
}

/// `RemoveTopicRecord`: the topic, its partitions and its configs are gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoveTopicRecord {
    /// Topic id.
    pub topic_id: Uuid,
}

/// The kind of resource a config belongs to (Kafka's `ConfigResource.Type` ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigResourceType {
    /// `TOPIC` (2).
    Topic,
    /// `BROKER` (4); name `""` is the cluster-wide default, otherwise a broker id.
    Broker,
    /// `GROUP` (32): a consumer group's settings (KIP-848), whether or not the group exists.
    Group,
}

impl ConfigResourceType {
    /// Kafka's id.
    pub fn as_i8(self) -> i8 {
        match self {
            ConfigResourceType::Topic => 2,
            ConfigResourceType::Broker => 4,
            ConfigResourceType::Group => 32,
        }
    }

    /// From Kafka's id.
    pub fn from_i8(v: i8) -> Option<Self> {
        match v {
            2 => Some(ConfigResourceType::Topic),
            4 => Some(ConfigResourceType::Broker),
            32 => Some(ConfigResourceType::Group),
            _ => None,
        }
    }
}

/// A config resource: a topic by name, a broker by id, or the cluster default (`Broker`, `""`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ConfigResource {
    /// Resource type.
    pub resource_type: ConfigResourceType,
    /// Resource name.
    pub name: String,
}

impl ConfigResource {
    /// A topic resource.
    pub fn topic(name: impl Into<String>) -> Self {
        ConfigResource {
            resource_type: ConfigResourceType::Topic,
            name: name.into(),
        }
    }

    /// A broker resource (`broker_id`).
    pub fn broker(broker_id: BrokerId) -> Self {
        ConfigResource {
            resource_type: ConfigResourceType::Broker,
            name: broker_id.to_string(),
        }
    }

    /// A consumer group resource.
    pub fn group(name: impl Into<String>) -> Self {
        ConfigResource {
            resource_type: ConfigResourceType::Group,
            name: name.into(),
        }
    }

    /// The cluster-wide dynamic broker default (broker resource with an empty name).
    pub fn cluster_default() -> Self {
        ConfigResource {
            resource_type: ConfigResourceType::Broker,
            name: String::new(),
        }
    }
}

/// `ConfigRecord`: set (`Some`) or delete (`None`) one dynamic config key. `Debug` hides the
/// value of a secret (`listener.name.<l>.ssl.key.password`, ...).
#[derive(Clone, PartialEq, Eq)]
pub struct ConfigRecord {
    /// The resource.
    pub resource: ConfigResource,
    /// Config key.
    pub name: String,
    /// New value, `None` to delete the override.
    pub value: Option<String>,
}

impl std::fmt::Debug for ConfigRecord {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let secret =
            crate::config::defs::broker_config(&self.name).is_some_and(|d| d.is_sensitive());
        let value = match &self.value {
            Some(_) if secret => Some("[hidden]"),
            v => v.as_deref(),
        };
        f.debug_struct("ConfigRecord")
            .field("resource", &self.resource)
            .field("name", &self.name)
            .field("value", &value)
            .finish()
    }
}

/// One metadata record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MetadataRecord {
    /// A broker registered.
    RegisterBroker(RegisterBrokerRecord),
    /// A broker is gone for good (its registration is removed).
    UnregisterBroker(BrokerEpochRecord),
    /// A broker is fenced: no leadership, not eligible for ISRs.
    FenceBroker(BrokerEpochRecord),
    /// A broker is unfenced: it may lead and join ISRs.
    UnfenceBroker(BrokerEpochRecord),
    /// A topic was created.
    Topic(TopicRecord),
    /// A partition was created (or is restated in a snapshot).
    Partition(PartitionRecord),
    /// A partition changed.
    PartitionChange(PartitionChangeRecord),
    /// A topic was deleted.
    RemoveTopic(RemoveTopicRecord),
    /// A dynamic config was set or deleted.
    Config(ConfigRecord),
    /// An ACL binding was created.
    AccessControlEntry(AccessControlEntryRecord),
    /// An ACL binding was deleted.
    RemoveAccessControlEntry(RemoveAccessControlEntryRecord),
    /// A user's SCRAM credential for one mechanism was set.
    UserScramCredential(UserScramCredentialRecord),
    /// A user's SCRAM credential for one mechanism was deleted.
    RemoveUserScramCredential(RemoveUserScramCredentialRecord),
    /// A client quota of one entity was set or removed.
    ClientQuota(ClientQuotaRecord),
    /// A feature was finalized at a level (level 0: no longer finalized).
    FeatureLevel(FeatureLevelRecord),
}
