//! Requests into the coordinator and its responses: plain structs, independent of wire versions.
//! The shell decodes Kafka requests into these and encodes these into Kafka responses for the
//! version the client spoke.

use bytes::Bytes;
pub use kafka_protocol::ResponseError;

/// Chosen by the caller; echoed in the [`crate::Effect::Respond`] that answers the request.
pub type RequestId = u64;

/// Who sent a request, from the request header and the connection.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct RequestContext {
    pub client_id: String,
    /// The client's address as Kafka shows it (`/127.0.0.1`).
    pub client_host: String,
    /// The request's API version. Matters where Kafka's behaviour depends on it: JoinGroup v4+
    /// requires a known member id (MEMBER_ID_REQUIRED), JoinGroup v9+ may skip assignment for a
    /// rejoining static leader, OffsetCommit v9+ answers GROUP_ID_NOT_FOUND for unknown groups.
    pub api_version: i16,
}

/// One request and what the coordinator needs to know about its sender.
#[derive(Debug, Clone, PartialEq)]
pub struct Input {
    pub request_id: RequestId,
    pub context: RequestContext,
    pub request: Request,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    JoinGroup(JoinGroupRequest),
    SyncGroup(SyncGroupRequest),
    Heartbeat(HeartbeatRequest),
    LeaveGroup(LeaveGroupRequest),
    OffsetCommit(OffsetCommitRequest),
    OffsetFetch(OffsetFetchRequest),
    DescribeGroups(DescribeGroupsRequest),
    ListGroups(ListGroupsRequest),
    DeleteGroups(DeleteGroupsRequest),
    OffsetDelete(OffsetDeleteRequest),
    TxnOffsetCommit(TxnOffsetCommitRequest),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest),
    ConsumerGroupDescribe(ConsumerGroupDescribeRequest),
}

#[derive(Debug, Clone, PartialEq)]
pub enum Response {
    JoinGroup(JoinGroupResponse),
    SyncGroup(SyncGroupResponse),
    Heartbeat(HeartbeatResponse),
    LeaveGroup(LeaveGroupResponse),
    OffsetCommit(OffsetCommitResponse),
    OffsetFetch(OffsetFetchResponse),
    DescribeGroups(DescribeGroupsResponse),
    ListGroups(ListGroupsResponse),
    DeleteGroups(DeleteGroupsResponse),
    OffsetDelete(OffsetDeleteResponse),
    TxnOffsetCommit(TxnOffsetCommitResponse),
    ConsumerGroupHeartbeat(ConsumerGroupHeartbeatResponse),
    ConsumerGroupDescribe(ConsumerGroupDescribeResponse),
}

/// The numeric Kafka error code of an optional error (0 for none).
pub fn error_code(error: Option<ResponseError>) -> i16 {
    error.map_or(0, |e| e.code())
}

/// A protocol (assignment strategy) a member supports, with its metadata (subscription) bytes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinProtocol {
    pub name: String,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupRequest {
    pub group_id: String,
    pub session_timeout_ms: i32,
    /// JoinGroup v0 has no rebalance timeout: the shell passes the session timeout, as Kafka does.
    pub rebalance_timeout_ms: i32,
    /// Empty for a member joining for the first time.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub protocol_type: String,
    pub protocols: Vec<JoinProtocol>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct JoinGroupResponse {
    pub error: Option<ResponseError>,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    /// The leader's member id; empty when there is none.
    pub leader: String,
    pub skip_assignment: bool,
    pub member_id: String,
    /// Every member with its metadata for the chosen protocol, for the leader; empty otherwise.
    pub members: Vec<JoinGroupMember>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinGroupMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// SyncGroup v5+; checked against the group's when present.
    pub protocol_type: Option<String>,
    /// SyncGroup v5+; checked against the group's when present.
    pub protocol_name: Option<String>,
    /// The leader's assignment per member id; empty for followers.
    pub assignments: Vec<SyncGroupAssignment>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncGroupAssignment {
    pub member_id: String,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SyncGroupResponse {
    pub error: Option<ResponseError>,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatRequest {
    pub group_id: String,
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct HeartbeatResponse {
    pub error: Option<ResponseError>,
}

/// LeaveGroup v3+ carries a batch of members; the shell turns a v0-v2 request (one member id) into
/// a batch of one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupRequest {
    pub group_id: String,
    pub members: Vec<MemberIdentity>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct MemberIdentity {
    /// Empty to remove a static member by its group instance id alone (admin removal).
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub reason: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveGroupResponse {
    /// Whole-request error (unknown group, invalid group id, coordinator not available).
    pub error: Option<ResponseError>,
    pub members: Vec<LeaveMemberResponse>,
}

impl LeaveGroupResponse {
    /// The single error of a LeaveGroup v0-v2 response: the top-level error, or else the first
    /// member's error.
    pub fn legacy_error(&self) -> Option<ResponseError> {
        self.error
            .or_else(|| self.members.iter().find_map(|m| m.error))
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LeaveMemberResponse {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub error: Option<ResponseError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitRequest {
    pub group_id: String,
    /// -1 for commits from outside group management ("simple" commits; OffsetCommit v0).
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub topics: Vec<OffsetCommitTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitTopic {
    pub name: String,
    pub partitions: Vec<OffsetCommitPartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitPartition {
    pub partition_index: i32,
    pub committed_offset: i64,
    /// -1 when unknown.
    pub committed_leader_epoch: i32,
    pub committed_metadata: Option<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitResponse {
    pub topics: Vec<OffsetCommitResponseTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitResponseTopic {
    pub name: String,
    pub partitions: Vec<OffsetCommitResponsePartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetCommitResponsePartition {
    pub partition_index: i32,
    pub error: Option<ResponseError>,
}

/// TxnOffsetCommit (v3 fields; the shell fills older versions with generation -1, an empty
/// member id and no instance id): offsets committed inside a transaction, visible once its
/// commit marker is.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsetCommitRequest {
    pub transactional_id: String,
    pub group_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// -1 when the producer does not send its consumer's group metadata (before v3, or KIP-447
    /// unused): then no member or generation is checked.
    pub generation_id: i32,
    /// Empty when unknown.
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// The same fields as OffsetCommit's partitions.
    pub topics: Vec<OffsetCommitTopic>,
}

/// Per-partition errors, as OffsetCommit's.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct TxnOffsetCommitResponse {
    pub topics: Vec<OffsetCommitResponseTopic>,
}

/// One group of an OffsetFetch request (v8+ carries several; the shell splits them).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchRequest {
    pub group_id: String,
    /// `None` fetches every committed offset of the group.
    pub topics: Option<Vec<OffsetFetchTopic>>,
    /// v7+: a partition with an offset in an open transaction is answered with
    /// UNSTABLE_OFFSET_COMMIT (the client retries) instead of its last visible offset.
    pub require_stable: bool,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchTopic {
    pub name: String,
    pub partition_indexes: Vec<i32>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchResponse {
    pub group_id: String,
    pub error: Option<ResponseError>,
    pub topics: Vec<OffsetFetchResponseTopic>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchResponseTopic {
    pub name: String,
    pub partitions: Vec<OffsetFetchResponsePartition>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetFetchResponsePartition {
    pub partition_index: i32,
    /// -1 when nothing is committed.
    pub committed_offset: i64,
    /// -1 when unknown.
    pub committed_leader_epoch: i32,
    pub metadata: String,
    pub error: Option<ResponseError>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsRequest {
    pub group_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribeGroupsResponse {
    pub groups: Vec<DescribedGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedGroup {
    pub error: Option<ResponseError>,
    pub group_id: String,
    /// Kafka's state name: `Empty`, `PreparingRebalance`, `CompletingRebalance`, `Stable`, `Dead`.
    pub group_state: String,
    pub protocol_type: String,
    /// The chosen protocol when the group is Stable, empty otherwise.
    pub protocol_data: String,
    pub members: Vec<DescribedMember>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DescribedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    /// The member's metadata for the chosen protocol; empty unless the group is Stable.
    pub member_metadata: Bytes,
    pub member_assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsRequest {
    /// Case-insensitive state names; empty lists every state.
    pub states_filter: Vec<String>,
    /// Case-insensitive group types (`classic`, `consumer`, ...); empty lists every type.
    pub types_filter: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListGroupsResponse {
    pub error: Option<ResponseError>,
    pub groups: Vec<ListedGroup>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ListedGroup {
    pub group_id: String,
    pub protocol_type: String,
    pub group_state: String,
    /// `classic` or `consumer` (KIP-848).
    pub group_type: String,
}

/// OffsetDelete (KIP-496): a group's committed offsets of some partitions, removed.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetDeleteRequest {
    pub group_id: String,
    /// Topic name -> partitions.
    pub topics: Vec<(String, Vec<i32>)>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct OffsetDeleteResponse {
    /// For the whole request (GROUP_ID_NOT_FOUND, NON_EMPTY_GROUP, NOT_COORDINATOR, ...).
    pub error: Option<ResponseError>,
    /// Per topic and partition (GROUP_SUBSCRIBED_TO_TOPIC).
    pub topics: Vec<(String, PartitionErrors)>,
}

/// Each partition's error (`None`: done).
pub type PartitionErrors = Vec<(i32, Option<ResponseError>)>;

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteGroupsRequest {
    pub group_ids: Vec<String>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeleteGroupsResponse {
    pub results: Vec<DeletableGroupResult>,
}

#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct DeletableGroupResult {
    pub group_id: String,
    pub error: Option<ResponseError>,
}

/// A topic id (Kafka's topic UUID) as one number; the shell converts from the wire's UUID.
pub type TopicUuid = u128;

/// Partitions by topic id (KIP-848 assignments). Empty sets are never stored, so two equal
/// assignments compare equal.
pub type Assignment = std::collections::BTreeMap<TopicUuid, std::collections::BTreeSet<i32>>;

/// A ConsumerGroupHeartbeat request (KIP-848), decoded.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroupHeartbeatRequest {
    pub version: i16,
    pub group_id: String,
    pub member_id: String,
    pub member_epoch: i32,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    /// -1 when unchanged.
    pub rebalance_timeout_ms: i32,
    /// `None` when unchanged.
    pub subscribed_topic_names: Option<Vec<String>>,
    pub subscribed_topic_regex: Option<String>,
    pub server_assignor: Option<String>,
    /// What the member owns, `None` when unchanged.
    pub owned: Option<Assignment>,
    pub client_id: String,
    pub client_host: String,
}

/// The answer to a ConsumerGroupHeartbeat.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroupHeartbeatResponse {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub member_id: Option<String>,
    pub member_epoch: i32,
    pub heartbeat_interval_ms: i32,
    /// Sent when the member's assignment changed, or it reported another one.
    pub assignment: Option<Assignment>,
}

/// ConsumerGroupDescribe (KIP-848): groups of one coordinator.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroupDescribeRequest {
    pub group_ids: Vec<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ConsumerGroupDescribeResponse {
    pub groups: Vec<DescribedConsumerGroup>,
}

/// One consumer group as ConsumerGroupDescribe shows it; topics by id (the shell names them).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedConsumerGroup {
    pub error_code: i16,
    pub error_message: Option<String>,
    pub group_id: String,
    pub group_state: String,
    pub group_epoch: i32,
    pub assignment_epoch: i32,
    pub assignor_name: String,
    pub members: Vec<DescribedConsumerMember>,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DescribedConsumerMember {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub rack_id: Option<String>,
    pub member_epoch: i32,
    pub client_id: String,
    pub client_host: String,
    pub subscribed_topic_names: Vec<String>,
    pub subscribed_topic_regex: Option<String>,
    pub assignment: Assignment,
    pub target_assignment: Assignment,
}
