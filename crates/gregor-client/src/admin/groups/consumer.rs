//! ConsumerGroupDescribe (KIP-848): how a consumer group (`group.protocol=consumer`) is
//! described. A coordinator answers `GROUP_ID_NOT_FOUND` for a classic group, which is then
//! described with DescribeGroups, as Kafka's admin does.

use kafka_protocol::messages::consumer_group_describe_response::{Assignment, DescribedGroup};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, GroupId,
};
use kafka_protocol::protocol::StrBytes;

use super::model::{GroupDescription, GroupType, MemberDescription};
use crate::admin::base::EntityResult;
use crate::error::{KafkaCode, KafkaError};
use crate::metadata::BrokerNode;
use crate::types::TopicPartition;

pub fn consumer_group_describe_request(groups: &[String]) -> ConsumerGroupDescribeRequest {
    ConsumerGroupDescribeRequest::default().with_group_ids(
        groups
            .iter()
            .map(|g| GroupId(StrBytes::from_string(g.clone())))
            .collect(),
    )
}

/// An assignment's partitions, by the topic names the response carries.
fn assignment_partitions(a: &Assignment) -> Vec<TopicPartition> {
    let mut out: Vec<TopicPartition> = a
        .topic_partitions
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.topic_name.0.to_string(), *p))
        })
        .collect();
    out.sort();
    out
}

fn described_group(g: DescribedGroup, coordinator: &BrokerNode) -> GroupDescription {
    let members = g
        .members
        .into_iter()
        .map(|m| MemberDescription {
            group_instance_id: m.instance_id.map(|s| s.to_string()),
            assignment: assignment_partitions(&m.assignment),
            member_epoch: Some(m.member_epoch),
            rack: m.rack_id.map(|s| s.to_string()),
            subscribed_topic_names: m
                .subscribed_topic_names
                .iter()
                .map(|t| t.0.to_string())
                .collect(),
            subscribed_topic_regex: m
                .subscribed_topic_regex
                .map(|s| s.to_string())
                .filter(|s| !s.is_empty()),
            target_assignment: Some(assignment_partitions(&m.target_assignment)),
            ..MemberDescription::new(
                m.member_id.to_string(),
                m.client_id.to_string(),
                m.client_host.to_string(),
            )
        })
        .collect();
    GroupDescription {
        group_id: g.group_id.0.to_string(),
        group_type: GroupType::Consumer,
        state: g.group_state.to_string(),
        // What ListGroups reports for a consumer group.
        protocol_type: gregor_assign::protocol::PROTOCOL_TYPE.to_string(),
        protocol: g.assignor_name.to_string(),
        members,
        coordinator: coordinator.clone(),
        group_epoch: Some(g.group_epoch),
        assignment_epoch: Some(g.assignment_epoch),
    }
}

/// Per-group results of ConsumerGroupDescribe.
pub fn parse_consumer_group_describe(
    resp: ConsumerGroupDescribeResponse,
    coordinator: &BrokerNode,
) -> EntityResult<String, GroupDescription> {
    resp.groups
        .into_iter()
        .map(|g| {
            let id = g.group_id.0.to_string();
            let result = KafkaError::check(g.error_code, g.error_message.as_deref())
                .map(|()| described_group(g, coordinator));
            (id, result)
        })
        .collect()
}

/// The groups of a ConsumerGroupDescribe answer that are not consumer groups (or do not
/// exist): those DescribeGroups must describe instead.
pub fn classic_candidates(results: &EntityResult<String, GroupDescription>) -> Vec<String> {
    results
        .iter()
        .filter(|(_, r)| {
            r.as_ref()
                .is_err_and(|e| e.code == KafkaCode::GROUP_ID_NOT_FOUND)
        })
        .map(|(g, _)| g.clone())
        .collect()
}
