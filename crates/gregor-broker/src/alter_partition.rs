//! AlterPartition: partition leaders ask the active controller to shrink or expand ISRs.
//!
//! Leaders queue proposals (`ReplicaManager::propose_isr`); one task sends them, batched, as
//! Kafka's AlterPartition request (forwarded to the active controller like the other controller
//! requests) with this broker's epoch and each partition's leader and partition epochs, which
//! fence proposals made on stale state. The committed change reaches the leader through the
//! metadata log; a refused proposal is dropped and may be made again. A proposal whose outcome
//! is unknown (no answer: the controller may have lost its leadership or its disk after
//! handing the change to Raft, which may still commit it) stays in flight, so the high
//! watermark keeps counting the replicas it adds, and is sent again until an answer or a newer
//! partition state settles it.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::alter_partition_request::{PartitionData, TopicData};
use kafka_protocol::messages::alter_partition_response::{
    PartitionData as OutPartition, TopicData as OutTopic,
};
use kafka_protocol::messages::{
    AlterPartitionRequest, AlterPartitionResponse, ApiKey, BrokerId, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;
use tracing::{debug, info, warn};

use crate::forward::ControlPlane;
use crate::isr::IsrProposal;
use crate::metadata::MetadataManager;
use crate::partition::Partition;
use crate::replica::IsrProposalQueue;

/// AlterPartition with topic ids and plain broker ids in the ISR.
const VERSION: i16 = 2;

/// Sends the leaders' ISR proposals to the controller until the queue closes, each batch with
/// the broker epoch this node holds at the time.
pub async fn run(b: ControlPlane<'_>, broker_epoch: impl Fn() -> i64, mut queue: IsrProposalQueue) {
    let mut unsettled: Vec<(Arc<Partition>, IsrProposal)> = Vec::new();
    loop {
        let mut batch: Vec<(Arc<Partition>, IsrProposal)> = std::mem::take(&mut unsettled)
            .into_iter()
            .filter(|(part, p)| part.isr_proposal_pending(p))
            .collect();
        if batch.is_empty() {
            match queue.recv().await {
                Some(first) => batch.push(first),
                None => return,
            }
        }
        while let Ok(more) = queue.try_recv() {
            batch.push(more);
        }
        unsettled = send(b, broker_epoch(), batch).await;
    }
}

/// Whether an answer settles a proposal: NOT_CONTROLLER and REQUEST_TIMED_OUT come back when
/// the controller lost its leadership (or gave up waiting) after handing the change to Raft,
/// which may still commit it.
fn settles(code: Option<ResponseError>) -> bool {
    !matches!(
        code,
        Some(
            ResponseError::NotController
                | ResponseError::RequestTimedOut
                | ResponseError::UnknownServerError
        )
    )
}

/// Logs a refused ISR change. A refusal that a race explains is a normal event: a replica fenced
/// or shutting down meanwhile (IneligibleReplica), a topic deleted meanwhile, or a proposal a
/// newer leader epoch or partition epoch overtook (the leader's own state is then already
/// newer). Anything else is worth a warning.
fn refused(part: &Partition, p: &IsrProposal, e: ResponseError) {
    let (topic, partition, isr) = (&part.topic, part.index, &p.isr);
    match e {
        ResponseError::IneligibleReplica
        | ResponseError::UnknownTopicOrPartition
        | ResponseError::UnknownTopicId => {
            info!(%topic, partition, ?isr, error = ?e, "ISR change refused")
        }
        ResponseError::FencedLeaderEpoch | ResponseError::InvalidUpdateVersion => {
            debug!(%topic, partition, ?isr, error = ?e, "ISR change refused")
        }
        _ => warn!(%topic, partition, ?isr, error = ?e, "ISR change refused"),
    }
}

/// Sends one batch; returns the proposals whose outcome is unknown, to send again.
async fn send(
    b: ControlPlane<'_>,
    broker_epoch: i64,
    batch: Vec<(Arc<Partition>, IsrProposal)>,
) -> Vec<(Arc<Partition>, IsrProposal)> {
    let request = alter_partition_request(b.node_id, broker_epoch, &batch);
    let response = crate::forward::to_controller(
        b,
        ApiKey::AlterPartition,
        VERSION,
        RequestKind::AlterPartition(request),
    )
    .await;
    let response = match response {
        Some(ResponseKind::AlterPartition(r)) => Some(r),
        _ => None,
    };
    let top_error = match &response {
        Some(r) => ResponseError::try_from_code(r.error_code),
        None => Some(ResponseError::UnknownServerError),
    };
    if let Some(e) = top_error {
        warn!(error = ?e, proposals = batch.len(), "AlterPartition failed");
        // A pause before anything is sent again (the controller may be electing).
        tokio::time::sleep(Duration::from_millis(100)).await;
        if !settles(top_error) {
            return batch;
        }
        // Refused as a whole (a stale broker epoch...): nothing changed; propose again later.
        for (part, p) in &batch {
            part.isr_proposal_done(p.partition_epoch);
        }
        return Vec::new();
    }
    let unsettled = settle(response.as_ref(), batch);
    if !unsettled.is_empty() {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    unsettled
}

/// The AlterPartition request of one batch of proposals, grouped by topic.
fn alter_partition_request(
    node_id: i32,
    broker_epoch: i64,
    batch: &[(Arc<Partition>, IsrProposal)],
) -> AlterPartitionRequest {
    let mut request = AlterPartitionRequest::default();
    request.broker_id = BrokerId(node_id);
    request.broker_epoch = broker_epoch;
    for (part, p) in batch {
        let mut pd = PartitionData::default();
        pd.partition_index = part.index;
        pd.leader_epoch = p.leader_epoch;
        pd.new_isr = p.isr.iter().map(|&r| BrokerId(r)).collect();
        pd.leader_recovery_state = 0;
        pd.partition_epoch = p.partition_epoch;
        match request
            .topics
            .iter_mut()
            .find(|t| t.topic_id == part.topic_id)
        {
            Some(t) => t.partitions.push(pd),
            None => {
                let mut t = TopicData::default();
                t.topic_id = part.topic_id;
                t.partitions.push(pd);
                request.topics.push(t);
            }
        }
    }
    request
}

/// Settles each proposal of a batch the controller answered (without a top-level error) by
/// its partition's answer; returns those whose outcome is unknown.
fn settle(
    response: Option<&AlterPartitionResponse>,
    batch: Vec<(Arc<Partition>, IsrProposal)>,
) -> Vec<(Arc<Partition>, IsrProposal)> {
    let mut unsettled = Vec::new();
    let mut committed = std::collections::BTreeMap::<String, usize>::new();
    for (part, p) in batch {
        let answer = response.and_then(|r| {
            r.topics
                .iter()
                .filter(|t| t.topic_id == part.topic_id)
                .flat_map(|t| &t.partitions)
                .find(|pd| pd.partition_index == part.index)
                .map(|pd| pd.error_code)
        });
        let code = answer.and_then(ResponseError::try_from_code);
        if answer.is_none() || !settles(code) {
            unsettled.push((part, p));
            continue;
        }
        match code {
            None => {
                // (Counted where the committed change is applied: `ReplicaManager::apply`.)
                *committed.entry(part.topic.clone()).or_default() += 1;
                debug!(topic = %part.topic, partition = part.index, isr = ?p.isr, "ISR change committed")
            }
            Some(e) => refused(&part, &p, e),
        }
        // The forwarding waited until this node applied what the controller committed: a
        // committed change has reached the leader already; otherwise it may propose again.
        part.isr_proposal_done(p.partition_epoch);
    }
    if !committed.is_empty() {
        let by_name = committed.iter().map(|(t, &n)| (t.as_str(), n)).collect();
        info!(
            partitions = committed.values().sum::<usize>(),
            topics = %gregor_meta::topic_name::topics_summary(&by_name),
            "ISR changes committed"
        );
    }
    unsettled
}

/// The active controller's side: runs the request through the controller.
pub async fn handle(
    metadata: &MetadataManager,
    r: AlterPartitionRequest,
) -> AlterPartitionResponse {
    let request = controller_request(&r);
    let mut resp = AlterPartitionResponse::default();
    let results = match metadata.submit(|c| c.alter_partition(&request)).await {
        Ok(Ok(results)) => results,
        Ok(Err(e)) => {
            resp.error_code = e.code.code();
            return resp;
        }
        Err(e) => {
            resp.error_code = e.api_error().code.code();
            return resp;
        }
    };
    for (id, result) in results {
        let mut pd = OutPartition::default();
        pd.partition_index = id.partition;
        match result {
            Ok(state) => {
                pd.leader_id = BrokerId(state.leader);
                pd.leader_epoch = state.leader_epoch;
                pd.isr = state.isr.iter().map(|&r| BrokerId(r)).collect();
                pd.leader_recovery_state = state.leader_recovery_state.as_i8();
                pd.partition_epoch = state.partition_epoch;
            }
            Err(e) => pd.error_code = e.code.code(),
        }
        match resp.topics.iter_mut().find(|t| t.topic_id == id.topic_id) {
            Some(t) => t.partitions.push(pd),
            None => {
                let mut t = OutTopic::default();
                t.topic_id = id.topic_id;
                t.partitions.push(pd);
                resp.topics.push(t);
            }
        }
    }
    resp
}

/// The wire request as the controller state machine takes it (the ISR with or without
/// epochs, by version).
fn controller_request(r: &AlterPartitionRequest) -> gregor_meta::AlterPartitionRequest {
    gregor_meta::AlterPartitionRequest {
        broker_id: r.broker_id.0,
        broker_epoch: r.broker_epoch,
        partitions: r
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(move |p| gregor_meta::AlterPartitionData {
                        topic_id: t.topic_id,
                        partition: p.partition_index,
                        leader_epoch: p.leader_epoch,
                        new_isr: if p.new_isr_with_epochs.is_empty() {
                            p.new_isr.iter().map(|b| b.0).collect()
                        } else {
                            p.new_isr_with_epochs
                                .iter()
                                .map(|s| s.broker_id.0)
                                .collect()
                        },
                        leader_recovery_state: gregor_meta::LeaderRecoveryState::from_i8(
                            p.leader_recovery_state,
                        )
                        .unwrap_or_default(),
                        partition_epoch: p.partition_epoch,
                    })
            })
            .collect(),
    }
}
