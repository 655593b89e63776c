//! What describing a group yields, for both group protocols: a classic group (DescribeGroups)
//! and a KIP-848 consumer group (ConsumerGroupDescribe).

use bytes::Bytes;

use crate::metadata::BrokerNode;
use crate::types::TopicPartition;

/// The rebalance protocol a group runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupType {
    /// JoinGroup/SyncGroup, assignments computed by a member (described by DescribeGroups).
    Classic,
    /// KIP-848 (`group.protocol=consumer`): the coordinator assigns and members reconcile
    /// through ConsumerGroupHeartbeat (described by ConsumerGroupDescribe).
    Consumer,
}

impl GroupType {
    /// The name ListGroups v5 uses (`classic`, `consumer`).
    pub fn as_str(self) -> &'static str {
        match self {
            GroupType::Classic => "classic",
            GroupType::Consumer => "consumer",
        }
    }
}

/// A group member.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberDescription {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The member's partitions: decoded from its classic consumer-protocol assignment, or a
    /// consumer group member's current assignment.
    pub assignment: Vec<TopicPartition>,
    /// Why the assignment bytes could not be decoded, if they could not (a non-consumer
    /// protocol type, or corrupt bytes).
    pub assignment_error: Option<String>,
    /// Classic groups only: the member's protocol metadata and raw assignment bytes.
    pub metadata: Bytes,
    pub raw_assignment: Bytes,
    /// Consumer groups only: the epoch the member has reconciled to.
    pub member_epoch: Option<i32>,
    /// Consumer groups only: the rack the member reported.
    pub rack: Option<String>,
    /// Consumer groups only: the topics the member subscribed to by name.
    pub subscribed_topic_names: Vec<String>,
    /// Consumer groups only: the member's subscription pattern, if it subscribed by regex.
    pub subscribed_topic_regex: Option<String>,
    /// Consumer groups only: the partitions the coordinator wants the member to own once it
    /// has reconciled (`None` for classic groups).
    pub target_assignment: Option<Vec<TopicPartition>>,
}

impl MemberDescription {
    /// A member with its identity only, the rest empty (parsers fill in what they read).
    pub fn new(member_id: String, client_id: String, client_host: String) -> MemberDescription {
        MemberDescription {
            member_id,
            group_instance_id: None,
            client_id,
            client_host,
            assignment: Vec::new(),
            assignment_error: None,
            metadata: Bytes::new(),
            raw_assignment: Bytes::new(),
            member_epoch: None,
            rack: None,
            subscribed_topic_names: Vec::new(),
            subscribed_topic_regex: None,
            target_assignment: None,
        }
    }
}

/// A group as DescribeGroups or ConsumerGroupDescribe reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupDescription {
    pub group_id: String,
    pub group_type: GroupType,
    /// Kafka's state name: `Empty`, `PreparingRebalance`, `CompletingRebalance`, `Stable`,
    /// `Dead` for classic groups; `Empty`, `Assigning`, `Reconciling`, `Stable`, `Dead` for
    /// consumer groups.
    pub state: String,
    /// `consumer` for consumer groups of either protocol.
    pub protocol_type: String,
    /// The assignor: a classic group's selected one (`range`, `cooperative-sticky`...), or a
    /// consumer group's server-side one (`uniform`, `range`); empty while none is chosen.
    pub protocol: String,
    pub members: Vec<MemberDescription>,
    pub coordinator: BrokerNode,
    /// Consumer groups only: the epoch of the group's membership and subscriptions.
    pub group_epoch: Option<i32>,
    /// Consumer groups only: the group epoch the target assignment was computed for.
    pub assignment_epoch: Option<i32>,
}
