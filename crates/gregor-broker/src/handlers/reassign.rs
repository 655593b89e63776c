//! AlterPartitionReassignments (KIP-455) on the active controller, and
//! ListPartitionReassignments from this broker's metadata image.
//!
//! A reassignment adds the target's new replicas (they start following the leader and copy its
//! log), and completes through the leader's AlterPartition once every new replica is in the
//! ISR: the replicas not in the target are then removed (and delete their data), and leadership
//! moves if the leader was one of them.

use gregor_meta::{ApiError, TopicPartition};
use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse, BrokerId,
    ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};

use super::s;
use crate::metadata::MetadataManager;

/// The request's targets: `Some(replicas)` to move to, `None` to cancel.
fn targets(r: &AlterPartitionReassignmentsRequest) -> Vec<(TopicPartition, Option<Vec<i32>>)> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions.iter().map(move |p| {
                (
                    TopicPartition::new(t.name.0.to_string(), p.partition_index),
                    p.replicas
                        .as_ref()
                        .map(|rs| rs.iter().map(|b| b.0).collect()),
                )
            })
        })
        .collect()
}

fn alter_response(
    results: Vec<(TopicPartition, Result<(), ApiError>)>,
) -> AlterPartitionReassignmentsResponse {
    let mut resp = AlterPartitionReassignmentsResponse::default();
    for (tp, result) in results {
        let mut p = ReassignablePartitionResponse::default();
        p.partition_index = tp.partition;
        p.error_message = None;
        if let Err(e) = result {
            p.error_code = e.code.code();
            p.error_message = Some(s(e.message));
        }
        match resp
            .responses
            .iter_mut()
            .find(|t| t.name.0.as_str() == tp.topic)
        {
            Some(t) => t.partitions.push(p),
            None => {
                let mut t = ReassignableTopicResponse::default();
                t.name = TopicName(s(tp.topic));
                t.partitions.push(p);
                resp.responses.push(t);
            }
        }
    }
    resp
}

pub async fn alter_partition_reassignments(
    metadata: &MetadataManager,
    r: AlterPartitionReassignmentsRequest,
) -> AlterPartitionReassignmentsResponse {
    let wanted = targets(&r);
    tracing::info!(partitions = wanted.len(), "AlterPartitionReassignments");
    match metadata
        .submit(|c| c.alter_partition_reassignments(&wanted))
        .await
    {
        Ok(results) => alter_response(results),
        Err(e) => {
            let e = e.api_error();
            let mut resp = alter_response(
                wanted
                    .into_iter()
                    .map(|(tp, _)| (tp, Err(e.clone())))
                    .collect(),
            );
            resp.error_code = e.code.code();
            resp.error_message = Some(s(e.message));
            resp
        }
    }
}

/// Reassignments in progress: every one, or those of the listed partitions.
pub fn list_partition_reassignments(
    metadata: &MetadataManager,
    r: &ListPartitionReassignmentsRequest,
) -> ListPartitionReassignmentsResponse {
    let image = metadata.image();
    let wanted: Option<Vec<TopicPartition>> = r.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|&p| TopicPartition::new(t.name.0.to_string(), p))
            })
            .collect()
    });
    let mut resp = ListPartitionReassignmentsResponse::default();
    resp.error_message = None;
    for t in image.topics().values() {
        for (&index, p) in &t.partitions {
            if !p.is_reassigning() {
                continue;
            }
            let tp = TopicPartition::new(t.name.clone(), index);
            if wanted.as_ref().is_some_and(|w| !w.contains(&tp)) {
                continue;
            }
            let mut out = OngoingPartitionReassignment::default();
            out.partition_index = index;
            out.replicas = p.replicas.iter().map(|&b| BrokerId(b)).collect();
            out.adding_replicas = p.adding_replicas.iter().map(|&b| BrokerId(b)).collect();
            out.removing_replicas = p.removing_replicas.iter().map(|&b| BrokerId(b)).collect();
            match resp.topics.iter_mut().find(|o| o.name.0.as_str() == t.name) {
                Some(o) => o.partitions.push(out),
                None => {
                    let mut o = OngoingTopicReassignment::default();
                    o.name = TopicName(s(t.name.clone()));
                    o.partitions.push(out);
                    resp.topics.push(o);
                }
            }
        }
    }
    resp
}
