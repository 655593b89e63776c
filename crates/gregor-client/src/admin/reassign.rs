//! Partition reassignment (alter, list) and leader election, sent to the controller.

use std::collections::BTreeMap;

use kafka_protocol::messages::alter_partition_reassignments_request::{
    ReassignablePartition, ReassignableTopic,
};
use kafka_protocol::messages::elect_leaders_request::TopicPartitions;
use kafka_protocol::messages::list_partition_reassignments_request::ListPartitionReassignmentsTopics;
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ElectLeadersRequest, ElectLeadersResponse, ListPartitionReassignmentsRequest,
    ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::base::{retry_entities, Admin, EntityResult};
use crate::client::Target;
use crate::error::{Error, KafkaError, Result};
use crate::types::{group_by_topic, TopicPartition};

/// A reassignment under way.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OngoingReassignment {
    /// The full replica set during the move (target plus replicas being removed).
    pub replicas: Vec<i32>,
    pub adding_replicas: Vec<i32>,
    pub removing_replicas: Vec<i32>,
}

/// Which leader an election picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    /// The first live in-sync replica of the assignment.
    Preferred,
    /// Any live replica when no in-sync one is left (may lose committed records).
    Unclean,
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

/// An AlterPartitionReassignments request: `Some(replicas)` moves a partition, `None`
/// cancels its reassignment.
pub fn alter_partition_reassignments_request(
    changes: &BTreeMap<TopicPartition, Option<Vec<i32>>>,
    timeout_ms: i32,
) -> AlterPartitionReassignmentsRequest {
    let topics = group_by_topic(changes.keys())
        .into_iter()
        .map(|(t, ps)| {
            let partitions = ps
                .into_iter()
                .map(|p| {
                    let replicas = changes
                        .get(&TopicPartition::new(t.clone(), p))
                        .cloned()
                        .expect("partition taken from the same map");
                    ReassignablePartition::default()
                        .with_partition_index(p)
                        .with_replicas(replicas.map(|r| r.into_iter().map(BrokerId).collect()))
                })
                .collect();
            ReassignableTopic::default()
                .with_name(topic_name(&t))
                .with_partitions(partitions)
        })
        .collect();
    AlterPartitionReassignmentsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(topics)
}

/// Per-partition results; a top-level error fails them all.
pub fn parse_alter_partition_reassignments(
    resp: AlterPartitionReassignmentsResponse,
) -> Result<EntityResult<TopicPartition, ()>, KafkaError> {
    KafkaError::check(resp.error_code, resp.error_message.as_deref())?;
    Ok(resp
        .responses
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.to_string();
            t.partitions.into_iter().map(move |p| {
                (
                    TopicPartition::new(topic.clone(), p.partition_index),
                    KafkaError::check(p.error_code, p.error_message.as_deref()),
                )
            })
        })
        .collect())
}

/// A ListPartitionReassignments request: every reassignment (`None`) or those of the listed
/// partitions.
pub fn list_partition_reassignments_request(
    partitions: Option<&[TopicPartition]>,
    timeout_ms: i32,
) -> ListPartitionReassignmentsRequest {
    ListPartitionReassignmentsRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topics(partitions.map(|ps| {
            group_by_topic(ps.iter())
                .into_iter()
                .map(|(t, ps)| {
                    ListPartitionReassignmentsTopics::default()
                        .with_name(topic_name(&t))
                        .with_partition_indexes(ps)
                })
                .collect()
        }))
}

pub fn parse_list_partition_reassignments(
    resp: ListPartitionReassignmentsResponse,
) -> Result<BTreeMap<TopicPartition, OngoingReassignment>, KafkaError> {
    KafkaError::check(resp.error_code, resp.error_message.as_deref())?;
    let ids = |v: Vec<BrokerId>| v.into_iter().map(|b| b.0).collect::<Vec<i32>>();
    Ok(resp
        .topics
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.to_string();
            t.partitions.into_iter().map(move |p| {
                (
                    TopicPartition::new(topic.clone(), p.partition_index),
                    OngoingReassignment {
                        replicas: ids(p.replicas),
                        adding_replicas: ids(p.adding_replicas),
                        removing_replicas: ids(p.removing_replicas),
                    },
                )
            })
        })
        .collect())
}

/// An ElectLeaders request for the listed partitions, or every partition (`None`).
pub fn elect_leaders_request(
    election: ElectionType,
    partitions: Option<&[TopicPartition]>,
    timeout_ms: i32,
    version: i16,
) -> Result<ElectLeadersRequest> {
    let mut req = ElectLeadersRequest::default()
        .with_timeout_ms(timeout_ms)
        .with_topic_partitions(partitions.map(|ps| {
            group_by_topic(ps.iter())
                .into_iter()
                .map(|(t, ps)| {
                    TopicPartitions::default()
                        .with_topic(topic_name(&t))
                        .with_partitions(ps)
                })
                .collect()
        }));
    match (election, version) {
        (ElectionType::Preferred, 0) => {}
        (ElectionType::Unclean, 0) => {
            return Err(Error::InvalidArgument(
                "unclean leader election needs ElectLeaders v1".to_string(),
            ))
        }
        (ElectionType::Preferred, _) => req.election_type = 0,
        (ElectionType::Unclean, _) => req.election_type = 1,
    }
    Ok(req)
}

/// Per-partition results; a top-level error (v1+) fails them all. `ELECTION_NOT_NEEDED` is
/// kept as an error for the caller to treat as "already led by the preferred replica".
pub fn parse_elect_leaders(
    resp: ElectLeadersResponse,
) -> Result<EntityResult<TopicPartition, ()>, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    Ok(resp
        .replica_election_results
        .into_iter()
        .flat_map(|t| {
            let topic = t.topic.0.to_string();
            t.partition_result.into_iter().map(move |p| {
                (
                    TopicPartition::new(topic.clone(), p.partition_id),
                    KafkaError::check(p.error_code, p.error_message.as_deref()),
                )
            })
        })
        .collect())
}

impl Admin {
    /// Starts (`Some(replicas)`) or cancels (`None`) partition reassignments; one result per
    /// partition.
    pub async fn alter_partition_reassignments(
        &self,
        changes: &BTreeMap<TopicPartition, Option<Vec<i32>>>,
        timeout_ms: i32,
    ) -> Result<EntityResult<TopicPartition, ()>> {
        let keys: Vec<TopicPartition> = changes.keys().cloned().collect();
        retry_entities(
            &self.client,
            "AlterPartitionReassignments",
            keys,
            |pending| {
                let batch: BTreeMap<TopicPartition, Option<Vec<i32>>> = changes
                    .iter()
                    .filter(|(tp, _)| pending.contains(tp))
                    .map(|(tp, r)| (tp.clone(), r.clone()))
                    .collect();
                async move {
                    let (_, resp) = self
                        .client
                        .send::<AlterPartitionReassignmentsRequest, _>(&Target::Controller, |_| {
                            Ok(alter_partition_reassignments_request(&batch, timeout_ms))
                        })
                        .await?;
                    parse_alter_partition_reassignments(resp)
                        .map_err(|e| Error::kafka("AlterPartitionReassignments", e))
                }
            },
        )
        .await
    }

    /// Reassignments under way, for the listed partitions or all.
    pub async fn list_partition_reassignments(
        &self,
        partitions: Option<&[TopicPartition]>,
        timeout_ms: i32,
    ) -> Result<BTreeMap<TopicPartition, OngoingReassignment>> {
        self.client
            .retry("ListPartitionReassignments", || async {
                let (_, resp) = self
                    .client
                    .send::<ListPartitionReassignmentsRequest, _>(&Target::Controller, |_| {
                        Ok(list_partition_reassignments_request(partitions, timeout_ms))
                    })
                    .await?;
                parse_list_partition_reassignments(resp)
                    .map_err(|e| Error::kafka("ListPartitionReassignments", e))
            })
            .await
    }

    /// Elects leaders; one result per partition the controller reports on.
    pub async fn elect_leaders(
        &self,
        election: ElectionType,
        partitions: Option<&[TopicPartition]>,
        timeout_ms: i32,
    ) -> Result<EntityResult<TopicPartition, ()>> {
        self.client
            .retry("ElectLeaders", || async {
                let (_, resp) = self
                    .client
                    .send::<ElectLeadersRequest, _>(&Target::Controller, |v| {
                        elect_leaders_request(election, partitions, timeout_ms, v)
                    })
                    .await?;
                parse_elect_leaders(resp).map_err(|e| Error::kafka("ElectLeaders", e))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use crate::error::KafkaCode;
    use kafka_protocol::messages::alter_partition_reassignments_response::{
        ReassignablePartitionResponse, ReassignableTopicResponse,
    };
    use kafka_protocol::messages::elect_leaders_response::{
        PartitionResult, ReplicaElectionResult,
    };
    use kafka_protocol::messages::list_partition_reassignments_response::{
        OngoingPartitionReassignment, OngoingTopicReassignment,
    };
    use kafka_protocol::protocol::{Decodable, Message};

    #[test]
    fn alter_reassignments_moves_and_cancels() {
        let changes: BTreeMap<TopicPartition, Option<Vec<i32>>> = [
            (TopicPartition::new("tp_re_01", 3), Some(vec![1])),
            (TopicPartition::new("tp_re_01", 4), None),
        ]
        .into_iter()
        .collect();
        let req = alter_partition_reassignments_request(&changes, 30_000);
        for v in 0..=AlterPartitionReassignmentsRequest::VERSIONS.max {
            let frame = encode_request(&req, v, 1, "c").unwrap();
            let mut body = frame.slice(4..);
            kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
            let back = AlterPartitionReassignmentsRequest::decode(&mut body, v).unwrap();
            let ps = &back.topics[0].partitions;
            assert_eq!(ps[0].replicas, Some(vec![BrokerId(1)]));
            assert_eq!(ps[1].replicas, None);
        }
        let resp = AlterPartitionReassignmentsResponse::default().with_responses(vec![
            ReassignableTopicResponse::default()
                .with_name(topic_name("tp_re_01"))
                .with_partitions(vec![
                    ReassignablePartitionResponse::default().with_partition_index(3),
                    ReassignablePartitionResponse::default()
                        .with_partition_index(4)
                        .with_error_code(85),
                ]),
        ]);
        let frame = encode_response_frame::<AlterPartitionReassignmentsRequest>(&resp, 0, 1);
        let got = parse_alter_partition_reassignments(
            decode_response::<AlterPartitionReassignmentsRequest>(frame, 0).unwrap(),
        )
        .unwrap();
        assert_eq!(got[0], (TopicPartition::new("tp_re_01", 3), Ok(())));
        assert_eq!(
            got[1].1.as_ref().unwrap_err().code,
            KafkaCode::NO_REASSIGNMENT_IN_PROGRESS
        );
        let top = AlterPartitionReassignmentsResponse::default().with_error_code(41);
        assert_eq!(
            parse_alter_partition_reassignments(top).unwrap_err().code,
            KafkaCode::NOT_CONTROLLER
        );
    }

    #[test]
    fn list_reassignments_reports_adding_and_removing() {
        let tps = [TopicPartition::new("t", 0)];
        for parts in [None, Some(&tps[..])] {
            encode_request(
                &list_partition_reassignments_request(parts, 1000),
                0,
                1,
                "c",
            )
            .unwrap();
        }
        let resp = ListPartitionReassignmentsResponse::default().with_topics(vec![
            OngoingTopicReassignment::default()
                .with_name(topic_name("t"))
                .with_partitions(vec![OngoingPartitionReassignment::default()
                    .with_partition_index(0)
                    .with_replicas(vec![BrokerId(1), BrokerId(0)])
                    .with_adding_replicas(vec![BrokerId(1)])
                    .with_removing_replicas(vec![BrokerId(0)])]),
        ]);
        let frame = encode_response_frame::<ListPartitionReassignmentsRequest>(&resp, 0, 1);
        let got = parse_list_partition_reassignments(
            decode_response::<ListPartitionReassignmentsRequest>(frame, 0).unwrap(),
        )
        .unwrap();
        let r = &got[&TopicPartition::new("t", 0)];
        assert_eq!(
            (r.adding_replicas.clone(), r.removing_replicas.clone()),
            (vec![1], vec![0])
        );
    }

    #[test]
    fn elect_leaders_versions_and_results() {
        let tps = vec![
            TopicPartition::new("tp_demo_03", 0),
            TopicPartition::new("tp_demo_03", 2),
        ];
        for v in ElectLeadersRequest::VERSIONS.min..=ElectLeadersRequest::VERSIONS.max {
            let req = elect_leaders_request(ElectionType::Preferred, Some(&tps), 1000, v).unwrap();
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
            match elect_leaders_request(ElectionType::Unclean, None, 1000, v) {
                Ok(req) => {
                    assert!(v >= 1);
                    assert_eq!(req.election_type, 1);
                    encode_request(&req, v, 1, "c").unwrap();
                }
                Err(_) => assert_eq!(v, 0),
            }
        }
        let resp = ElectLeadersResponse::default().with_replica_election_results(vec![
            ReplicaElectionResult::default()
                .with_topic(topic_name("tp_demo_03"))
                .with_partition_result(vec![
                    PartitionResult::default().with_partition_id(0),
                    PartitionResult::default()
                        .with_partition_id(2)
                        .with_error_code(84),
                ]),
        ]);
        let frame = encode_response_frame::<ElectLeadersRequest>(&resp, 2, 1);
        let got =
            parse_elect_leaders(decode_response::<ElectLeadersRequest>(frame, 2).unwrap()).unwrap();
        assert_eq!(got[0].1, Ok(()));
        assert_eq!(
            got[1].1.as_ref().unwrap_err().code,
            KafkaCode::ELECTION_NOT_NEEDED
        );
    }
}
