//! ListOffsets: a partition's earliest, latest, max-timestamp or by-timestamp offset, asked of
//! each partition's leader.

use std::collections::BTreeMap;

use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::base::{retry_entities, Admin, EntityResult};
use crate::client::Target;
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::metadata::ClusterMetadata;
use crate::types::{group_by_topic, TopicPartition};

/// Which offset to look up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// The log start offset.
    Earliest,
    /// The log end offset (the high watermark for read-uncommitted).
    Latest,
    /// The offset of the record with the largest timestamp (ListOffsets v7+).
    MaxTimestamp,
    /// The first offset whose timestamp is at or after the given one (milliseconds).
    Timestamp(i64),
}

impl OffsetSpec {
    /// The timestamp field Kafka uses to ask for this offset.
    pub fn wire_timestamp(self) -> i64 {
        match self {
            OffsetSpec::Latest => -1,
            OffsetSpec::Earliest => -2,
            OffsetSpec::MaxTimestamp => -3,
            OffsetSpec::Timestamp(ts) => ts,
        }
    }

    fn min_version(self) -> i16 {
        match self {
            OffsetSpec::MaxTimestamp => 7,
            _ => 1,
        }
    }
}

/// Which records count for the latest offset (defined with the consumer's other value types).
pub use crate::types::IsolationLevel;

/// One looked-up offset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListedOffset {
    /// -1 when no record matches (a timestamp after every record's).
    pub offset: i64,
    /// The matching record's timestamp, -1 when not applicable.
    pub timestamp: i64,
    pub leader_epoch: Option<i32>,
}

/// A ListOffsets request for partitions all led by one broker.
pub fn list_offsets_request(
    partitions: &[(TopicPartition, OffsetSpec)],
    isolation: IsolationLevel,
    version: i16,
) -> Result<ListOffsetsRequest> {
    if let Some((tp, spec)) = partitions.iter().find(|(_, s)| s.min_version() > version) {
        return Err(Error::InvalidArgument(format!(
            "{tp}: {spec:?} needs ListOffsets v{}, the broker supports v{version}",
            spec.min_version()
        )));
    }
    if isolation == IsolationLevel::ReadCommitted && version < 2 {
        return Err(Error::InvalidArgument(
            "read_committed needs ListOffsets v2".to_string(),
        ));
    }
    let specs: BTreeMap<&TopicPartition, OffsetSpec> =
        partitions.iter().map(|(tp, s)| (tp, *s)).collect();
    let topics = group_by_topic(partitions.iter().map(|(tp, _)| tp))
        .into_iter()
        .map(|(topic, ps)| {
            let parts = ps
                .into_iter()
                .map(|p| {
                    let key = TopicPartition::new(topic.clone(), p);
                    let spec = specs.get(&key).copied().unwrap_or(OffsetSpec::Latest);
                    ListOffsetsPartition::default()
                        .with_partition_index(p)
                        .with_current_leader_epoch(-1)
                        .with_timestamp(spec.wire_timestamp())
                })
                .collect();
            ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic)))
                .with_partitions(parts)
        })
        .collect();
    let mut req = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(topics);
    if version >= 2 {
        req.isolation_level = isolation.wire();
    }
    if version >= 10 {
        req.timeout_ms = 30_000;
    }
    Ok(req)
}

/// Per-partition results of ListOffsets.
pub fn parse_list_offsets(resp: ListOffsetsResponse) -> EntityResult<TopicPartition, ListedOffset> {
    let mut out = Vec::new();
    for t in resp.topics {
        for p in t.partitions {
            let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
            let result = KafkaError::check(p.error_code, None).map(|()| ListedOffset {
                offset: p.offset,
                timestamp: p.timestamp,
                leader_epoch: (p.leader_epoch >= 0).then_some(p.leader_epoch),
            });
            out.push((tp, result));
        }
    }
    out
}

/// Splits partitions by leader. Partitions of unknown topics or without a leader get their
/// error right away (the second is retriable: an election may be under way).
#[allow(clippy::type_complexity)]
pub fn route_to_leaders(
    metadata: &ClusterMetadata,
    partitions: &[(TopicPartition, OffsetSpec)],
) -> (
    Vec<(i32, Vec<(TopicPartition, OffsetSpec)>)>,
    EntityResult<TopicPartition, ListedOffset>,
) {
    let mut routed: Vec<(i32, Vec<(TopicPartition, OffsetSpec)>)> = Vec::new();
    let mut failed = Vec::new();
    for (tp, spec) in partitions {
        let leader = match metadata.topic(&tp.topic) {
            None => Err(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
            Some(t) => match t.partition(tp.partition) {
                None => Err(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
                Some(p) => p.leader.ok_or(KafkaCode::LEADER_NOT_AVAILABLE),
            },
        };
        match leader {
            Ok(id) => match routed.iter_mut().find(|(l, _)| *l == id) {
                Some((_, v)) => v.push((tp.clone(), *spec)),
                None => routed.push((id, vec![(tp.clone(), *spec)])),
            },
            Err(code) => failed.push((tp.clone(), Err(KafkaError::new(code, None)))),
        }
    }
    (routed, failed)
}

impl Admin {
    /// Looks up offsets; one result per partition. Each partition is asked of its leader;
    /// leadership errors refresh metadata and retry until the deadline.
    pub async fn list_offsets(
        &self,
        partitions: &[(TopicPartition, OffsetSpec)],
        isolation: IsolationLevel,
    ) -> Result<BTreeMap<TopicPartition, std::result::Result<ListedOffset, KafkaError>>> {
        let keys: Vec<TopicPartition> = partitions.iter().map(|(tp, _)| tp.clone()).collect();
        let mut topics: Vec<String> = keys.iter().map(|tp| tp.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        let results = retry_entities(&self.client, "ListOffsets", keys, |pending| {
            let topics = topics.clone();
            let batch: Vec<(TopicPartition, OffsetSpec)> = partitions
                .iter()
                .filter(|(tp, _)| pending.contains(tp))
                .cloned()
                .collect();
            async move {
                let md = self.client.refresh_metadata(Some(&topics)).await?;
                let (routed, mut results) = route_to_leaders(&md, &batch);
                for (leader, group) in routed {
                    let sent = self
                        .client
                        .send::<ListOffsetsRequest, _>(&Target::Broker(leader), |v| {
                            list_offsets_request(&group, isolation, v)
                        })
                        .await;
                    match sent {
                        Ok((_, resp)) => results.extend(parse_list_offsets(resp)),
                        // One unreachable leader should not sink the other leaders' answers:
                        // its partitions are retried.
                        Err(e) if crate::retry::action(&e) != crate::retry::RetryAction::Fail => {
                            let code = e.kafka_code().unwrap_or(KafkaCode::NETWORK_EXCEPTION);
                            results.extend(group.into_iter().map(|(tp, _)| {
                                (tp, Err(KafkaError::new(code, Some(e.to_string()))))
                            }));
                        }
                        Err(e) => return Err(e),
                    }
                }
                Ok(results)
            }
        })
        .await?;
        Ok(results.into_iter().collect())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use crate::metadata::{PartitionMetadata, TopicMetadata};
    use kafka_protocol::messages::list_offsets_response::{
        ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
    };
    use kafka_protocol::protocol::{Decodable, Message};

    fn specs() -> Vec<(TopicPartition, OffsetSpec)> {
        vec![
            (TopicPartition::new("t", 0), OffsetSpec::Earliest),
            (TopicPartition::new("t", 1), OffsetSpec::Latest),
            (
                TopicPartition::new("u", 0),
                OffsetSpec::Timestamp(1_700_000_000_000),
            ),
        ]
    }

    #[test]
    fn request_sends_kafka_timestamps_in_every_version() {
        for v in ListOffsetsRequest::VERSIONS.min..=ListOffsetsRequest::VERSIONS.max {
            let req = list_offsets_request(&specs(), IsolationLevel::ReadUncommitted, v).unwrap();
            let frame = encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
            let mut body = frame.slice(4..);
            kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
            let back = ListOffsetsRequest::decode(&mut body, v).unwrap();
            assert_eq!(back.replica_id, BrokerId(-1));
            let ts: Vec<i64> = back
                .topics
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| p.timestamp))
                .collect();
            assert_eq!(ts, vec![-2, -1, 1_700_000_000_000]);
        }
    }

    #[test]
    fn max_timestamp_needs_v7() {
        let s = vec![(TopicPartition::new("t", 0), OffsetSpec::MaxTimestamp)];
        assert!(list_offsets_request(&s, IsolationLevel::ReadUncommitted, 6).is_err());
        let req = list_offsets_request(&s, IsolationLevel::ReadCommitted, 7).unwrap();
        assert_eq!(req.topics[0].partitions[0].timestamp, -3);
        assert_eq!(req.isolation_level, 1);
    }

    #[test]
    fn response_per_partition() {
        let resp =
            ListOffsetsResponse::default().with_topics(vec![ListOffsetsTopicResponse::default()
                .with_name(TopicName(StrBytes::from_static_str("t")))
                .with_partitions(vec![
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(0)
                        .with_offset(42)
                        .with_timestamp(-1)
                        .with_leader_epoch(3),
                    ListOffsetsPartitionResponse::default()
                        .with_partition_index(1)
                        .with_error_code(6),
                ])]);
        let frame = encode_response_frame::<ListOffsetsRequest>(&resp, 9, 1);
        let parsed = parse_list_offsets(decode_response::<ListOffsetsRequest>(frame, 9).unwrap());
        assert_eq!(
            parsed[0],
            (
                TopicPartition::new("t", 0),
                Ok(ListedOffset {
                    offset: 42,
                    timestamp: -1,
                    leader_epoch: Some(3)
                })
            )
        );
        assert_eq!(
            parsed[1].1.as_ref().unwrap_err().code,
            KafkaCode::NOT_LEADER_OR_FOLLOWER
        );
    }

    #[test]
    fn routing_groups_by_leader_and_flags_missing_or_leaderless() {
        let part = |p: i32, leader: Option<i32>| PartitionMetadata {
            partition: p,
            leader,
            leader_epoch: 0,
            replicas: vec![],
            isr: vec![],
            offline_replicas: vec![],
            error: None,
        };
        let md = ClusterMetadata {
            topics: vec![TopicMetadata {
                name: "t".into(),
                topic_id: uuid::Uuid::nil(),
                is_internal: false,
                partitions: vec![
                    part(0, Some(1)),
                    part(1, Some(2)),
                    part(2, None),
                    part(3, Some(1)),
                ],
                error: None,
            }],
            ..Default::default()
        };
        let asked: Vec<(TopicPartition, OffsetSpec)> = [0, 1, 2, 3, 9]
            .into_iter()
            .map(|p| (TopicPartition::new("t", p), OffsetSpec::Latest))
            .chain([(TopicPartition::new("nope", 0), OffsetSpec::Latest)])
            .collect();
        let (routed, failed) = route_to_leaders(&md, &asked);
        assert_eq!(routed.len(), 2);
        assert_eq!(routed[0].0, 1);
        assert_eq!(routed[0].1.len(), 2);
        let codes: Vec<(i32, KafkaCode)> = failed
            .iter()
            .map(|(tp, r)| (tp.partition, r.as_ref().unwrap_err().code))
            .collect();
        assert_eq!(
            codes,
            vec![
                (2, KafkaCode::LEADER_NOT_AVAILABLE),
                (9, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
                (0, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION)
            ]
        );
    }
}
