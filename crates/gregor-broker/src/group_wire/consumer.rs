//! KIP-848's ConsumerGroupHeartbeat and ConsumerGroupDescribe (v0-1), and the cluster's topics
//! as a consumer group's assignor sees them.

use std::collections::{BTreeMap, HashMap};

use gregor_group::api as g;
use gregor_group::consumer::model::TopicMetadata;
use gregor_meta::MetadataImage;
use kafka_protocol::messages::consumer_group_describe_response as describe;
use kafka_protocol::messages::consumer_group_heartbeat_response as beat;
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::admin::by_partition;
use super::convert::{group_id, opt_str_bytes, opt_string, str_bytes, string};

/// Internal topics no subscription reaches, as Kafka's consumers exclude them.
const INTERNAL_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];

/// The cluster's topics for the assignors: id, partition count and each partition's replica
/// racks (empty without racks).
pub fn consumer_topics(image: &MetadataImage) -> BTreeMap<String, TopicMetadata> {
    let rack = |b| image.brokers().get(&b).and_then(|r| r.rack.clone());
    image
        .topics()
        .values()
        .filter(|t| !INTERNAL_TOPICS.contains(&t.name.as_str()))
        .map(|t| {
            let replica_racks = t
                .partitions
                .values()
                .map(|p| p.replicas.iter().filter_map(|b| rack(*b)).collect())
                .collect();
            let meta = TopicMetadata {
                id: t.id.as_u128(),
                name: t.name.clone(),
                partitions: t.partitions.len() as i32,
                replica_racks,
            };
            (t.name.clone(), meta)
        })
        .collect()
}

/// Each group's own settings (its GROUP config resource), as the image holds them. Values were
/// checked when they were set; one that does not parse is left out.
pub fn group_overrides(image: &MetadataImage) -> gregor_group::GroupOverridesMap {
    let int = |m: &BTreeMap<String, String>, k: &str| m.get(k).and_then(|v| v.parse().ok());
    image
        .all_configs()
        .iter()
        .filter(|(r, _)| r.resource_type == gregor_meta::ConfigResourceType::Group)
        .map(|(r, m)| {
            let o = gregor_group::GroupOverrides {
                session_timeout_ms: int(m, "consumer.session.timeout.ms"),
                heartbeat_interval_ms: int(m, "consumer.heartbeat.interval.ms"),
            };
            (r.name.clone(), o)
        })
        .collect()
}

fn assignment_from_wire<'a>(
    parts: impl IntoIterator<Item = (&'a Uuid, &'a Vec<i32>)>,
) -> g::Assignment {
    let mut out = g::Assignment::new();
    for (id, ps) in parts {
        if !ps.is_empty() {
            out.entry(id.as_u128())
                .or_default()
                .extend(ps.iter().copied());
        }
    }
    out
}

pub fn consumer_group_heartbeat_request(
    r: &ConsumerGroupHeartbeatRequest,
    version: i16,
) -> g::ConsumerGroupHeartbeatRequest {
    let owned = r
        .topic_partitions
        .as_ref()
        .map(|tps| assignment_from_wire(tps.iter().map(|t| (&t.topic_id, &t.partitions))));
    g::ConsumerGroupHeartbeatRequest {
        version,
        group_id: r.group_id.0.to_string(),
        member_id: string(&r.member_id),
        member_epoch: r.member_epoch,
        instance_id: opt_string(&r.instance_id),
        rack_id: opt_string(&r.rack_id),
        rebalance_timeout_ms: r.rebalance_timeout_ms,
        subscribed_topic_names: r
            .subscribed_topic_names
            .as_ref()
            .map(|ns| ns.iter().map(|n| n.0.to_string()).collect()),
        subscribed_topic_regex: opt_string(&r.subscribed_topic_regex),
        server_assignor: opt_string(&r.server_assignor),
        owned,
        client_id: String::new(),
        client_host: String::new(),
    }
}

pub fn consumer_group_heartbeat_response(
    r: g::ConsumerGroupHeartbeatResponse,
) -> ConsumerGroupHeartbeatResponse {
    let mut out = ConsumerGroupHeartbeatResponse::default();
    out.error_code = r.error_code;
    out.error_message = opt_str_bytes(r.error_message);
    out.member_id = opt_str_bytes(r.member_id);
    out.member_epoch = r.member_epoch;
    out.heartbeat_interval_ms = r.heartbeat_interval_ms;
    out.assignment = r.assignment.map(|a| {
        let mut wire = beat::Assignment::default();
        wire.topic_partitions = a
            .into_iter()
            .map(|(id, ps)| {
                let mut t = beat::TopicPartitions::default();
                t.topic_id = Uuid::from_u128(id);
                t.partitions = ps.into_iter().collect();
                t
            })
            .collect();
        wire
    });
    out
}

/// A ConsumerGroupHeartbeat refused as a whole.
pub fn consumer_group_heartbeat_error(error: ResponseError) -> ConsumerGroupHeartbeatResponse {
    let mut out = ConsumerGroupHeartbeatResponse::default();
    out.error_code = error.code();
    out
}

/// One coordinator request per `__consumer_offsets` partition.
pub fn consumer_group_describe_split(
    req: &ConsumerGroupDescribeRequest,
    num_partitions: i32,
) -> Vec<(i32, g::ConsumerGroupDescribeRequest)> {
    let ids = req.group_ids.iter().map(|id| id.0.to_string()).collect();
    by_partition(ids, num_partitions)
        .into_iter()
        .map(|(p, group_ids)| (p, g::ConsumerGroupDescribeRequest { group_ids }))
        .collect()
}

/// Every group of a part answered with `error`.
pub fn consumer_group_describe_error(
    part: &g::ConsumerGroupDescribeRequest,
    error: ResponseError,
) -> g::ConsumerGroupDescribeResponse {
    let groups = part
        .group_ids
        .iter()
        .map(|id| g::DescribedConsumerGroup {
            error_code: error.code(),
            group_id: id.clone(),
            ..Default::default()
        })
        .collect();
    g::ConsumerGroupDescribeResponse { groups }
}

/// Merges the parts in the request's order, naming topics from `image` (a topic deleted
/// meanwhile keeps an empty name).
pub fn consumer_group_describe_response(
    req: &ConsumerGroupDescribeRequest,
    parts: Vec<g::ConsumerGroupDescribeResponse>,
    image: &MetadataImage,
) -> ConsumerGroupDescribeResponse {
    let by_id: HashMap<String, g::DescribedConsumerGroup> = parts
        .into_iter()
        .flat_map(|p| p.groups)
        .map(|d| (d.group_id.clone(), d))
        .collect();
    let mut out = ConsumerGroupDescribeResponse::default();
    out.groups = req
        .group_ids
        .iter()
        .map(|id| match by_id.get(id.0.as_str()) {
            Some(d) => described_group(d.clone(), image),
            None => described_group(
                g::DescribedConsumerGroup {
                    error_code: ResponseError::UnknownServerError.code(),
                    group_id: id.0.to_string(),
                    ..Default::default()
                },
                image,
            ),
        })
        .collect();
    out
}

fn described_group(
    d: g::DescribedConsumerGroup,
    image: &MetadataImage,
) -> describe::DescribedGroup {
    let mut out = describe::DescribedGroup::default();
    out.error_code = d.error_code;
    out.error_message = opt_str_bytes(d.error_message);
    out.group_id = group_id(d.group_id);
    out.group_state = str_bytes(d.group_state);
    out.group_epoch = d.group_epoch;
    out.assignment_epoch = d.assignment_epoch;
    out.assignor_name = str_bytes(d.assignor_name);
    out.members = d.members.into_iter().map(|m| member(m, image)).collect();
    out.authorized_operations = i32::MIN;
    out
}

fn member(m: g::DescribedConsumerMember, image: &MetadataImage) -> describe::Member {
    let mut out = describe::Member::default();
    out.member_id = str_bytes(m.member_id);
    out.instance_id = opt_str_bytes(m.instance_id);
    out.rack_id = opt_str_bytes(m.rack_id);
    out.member_epoch = m.member_epoch;
    out.client_id = str_bytes(m.client_id);
    out.client_host = str_bytes(m.client_host);
    out.subscribed_topic_names = m
        .subscribed_topic_names
        .into_iter()
        .map(|n| TopicName(str_bytes(n)))
        .collect();
    out.subscribed_topic_regex = opt_str_bytes(m.subscribed_topic_regex);
    out.assignment = assignment(&m.assignment, image);
    out.target_assignment = assignment(&m.target_assignment, image);
    // v1: every member of a consumer group speaks the consumer protocol.
    out.member_type = 1;
    out
}

fn assignment(a: &g::Assignment, image: &MetadataImage) -> describe::Assignment {
    let mut out = describe::Assignment::default();
    out.topic_partitions = a
        .iter()
        .map(|(id, ps)| {
            let uuid = Uuid::from_u128(*id);
            let name = image
                .topic_by_id(uuid)
                .map(|t| t.name.clone())
                .unwrap_or_default();
            let mut t = describe::TopicPartitions::default();
            t.topic_id = uuid;
            t.topic_name = TopicName(StrBytes::from_string(name));
            t.partitions = ps.iter().copied().collect();
            t
        })
        .collect();
    out
}
