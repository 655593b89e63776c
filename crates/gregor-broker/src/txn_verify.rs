//! KIP-890's verification, the partition leader's side: before a transactional producer's
//! first batch opens a transaction in a partition, the leader asks the producer's transaction
//! coordinator whether the partition is in its open transaction. A late retry of a batch whose
//! transaction already ended is refused, so it cannot open a transaction no marker would ever
//! end (a hanging transaction holds the last stable offset, and every read_committed consumer,
//! for good).
//!
//! The coordinator is this node's own shard, or another broker asked with AddPartitionsToTxn v4
//! (`verify_only`) over the inter-broker listener. For a transaction-version-2 producer, which
//! does not add partitions itself, the leader asks the coordinator to add the partition
//! instead (`verify_only` false), which opens the transaction if none is.

use gregor_group::partition_for;
use gregor_group::txn::{ProducerIdAndEpoch, TxnError, TxnRefusal, TxnReply};
use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::{
    AddPartitionsToTxnRequest, AddPartitionsToTxnResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tracing::debug;

use crate::broker_links::BrokerLinks;
use crate::data_plane::TxnVerifyRequest;
use crate::metadata::MetadataManager;
use crate::txn_shell::{Transactions, TxnCall, Verification, TXN_TOPIC};

/// The inter-broker form of AddPartitionsToTxn.
pub const VERIFY_VERSION: i16 = 4;

/// Verifies `r` with its coordinator (or has it add the partition); the error as a Produce
/// answer gives it.
pub async fn verify(
    node_id: i32,
    metadata: &MetadataManager,
    txns: &Transactions,
    links: &BrokerLinks,
    r: TxnVerifyRequest,
) -> Result<(), ResponseError> {
    ask_coordinator(node_id, metadata, txns, links, r)
        .await
        .map_err(for_produce)
}

/// [`verify`] with the coordinator's own error code (TxnOffsetCommit's answer).
pub async fn ask_coordinator(
    node_id: i32,
    metadata: &MetadataManager,
    txns: &Transactions,
    links: &BrokerLinks,
    r: TxnVerifyRequest,
) -> Result<(), ResponseError> {
    let image = metadata.image();
    // No coordinator ever ran: no transaction can be open.
    let Some(topic) = image.topic(TXN_TOPIC).filter(|t| !t.partitions.is_empty()) else {
        return Err(ResponseError::InvalidTxnState);
    };
    let p = partition_for(&r.transactional_id, topic.partitions.len() as i32);
    let leader = topic.partitions.get(&p).map_or(-1, |s| s.leader);
    let answer = if leader < 0 {
        Err(ResponseError::CoordinatorNotAvailable)
    } else if leader == node_id && r.add {
        add_here(&image, node_id, txns, p, &r).await
    } else if leader == node_id {
        let v = Verification {
            transactional_id: r.transactional_id.clone(),
            producer: ProducerIdAndEpoch {
                producer_id: r.producer_id,
                epoch: r.producer_epoch,
            },
            partitions: vec![(r.topic.clone(), r.partition)],
        };
        match txns.verify(&image, node_id, p, v).await {
            Ok(Ok(each)) => each
                .first()
                .copied()
                .flatten()
                .map_or(Ok(()), |e| Err(txn_code(e))),
            Ok(Err(e)) => Err(txn_code(e)),
            Err(e) => Err(e),
        }
    } else {
        let request = verify_request(&r);
        match links.send(&image, leader, &request, VERIFY_VERSION).await {
            Ok(resp) => code_in(&resp, &r),
            Err(e) => {
                debug!(coordinator = leader, error = %e, "transaction verification not answered");
                Err(ResponseError::CoordinatorNotAvailable)
            }
        }
    };
    answer
}

/// Adds `r`'s partition to its producer's transaction at this node's own coordinator shard.
async fn add_here(
    image: &gregor_meta::MetadataImage,
    node_id: i32,
    txns: &Transactions,
    p: i32,
    r: &TxnVerifyRequest,
) -> Result<(), ResponseError> {
    let call = TxnCall::AddPartitions {
        transactional_id: r.transactional_id.clone(),
        producer: ProducerIdAndEpoch {
            producer_id: r.producer_id,
            epoch: r.producer_epoch,
        },
        partitions: vec![(r.topic.clone(), r.partition)],
    };
    match txns.call_here(image, node_id, p, call).await? {
        TxnReply::AddPartitions(Ok(())) => Ok(()),
        TxnReply::AddPartitions(Err(TxnRefusal::Txn(e))) => Err(txn_code(e)),
        TxnReply::AddPartitions(Err(_)) => Err(ResponseError::NotCoordinator),
        _ => Err(ResponseError::UnknownServerError),
    }
}

/// The coordinator's refusal as Kafka's error code.
pub fn txn_code(e: TxnError) -> ResponseError {
    match e {
        TxnError::ConcurrentTransactions => ResponseError::ConcurrentTransactions,
        TxnError::ProducerFenced => ResponseError::ProducerFenced,
        TxnError::InvalidProducerIdMapping => ResponseError::InvalidProducerIdMapping,
        TxnError::InvalidTxnState => ResponseError::InvalidTxnState,
    }
}

/// What a producer is told: a coordinator that cannot answer yet (moving, loading, busy with
/// markers) is NOT_ENOUGH_REPLICAS, which every Produce version retries; a fenced producer
/// INVALID_PRODUCER_EPOCH; a partition not in an open transaction INVALID_TXN_STATE.
fn for_produce(e: ResponseError) -> ResponseError {
    match e {
        ResponseError::ProducerFenced | ResponseError::InvalidProducerEpoch => {
            ResponseError::InvalidProducerEpoch
        }
        ResponseError::InvalidProducerIdMapping | ResponseError::InvalidTxnState => {
            ResponseError::InvalidTxnState
        }
        _ => ResponseError::NotEnoughReplicas,
    }
}

fn verify_request(r: &TxnVerifyRequest) -> AddPartitionsToTxnRequest {
    let mut topic = AddPartitionsToTxnTopic::default();
    topic.name = TopicName(StrBytes::from_string(r.topic.clone()));
    topic.partitions = vec![r.partition];
    let mut t = AddPartitionsToTxnTransaction::default();
    t.transactional_id = TransactionalId(StrBytes::from_string(r.transactional_id.clone()));
    t.producer_id = ProducerId(r.producer_id);
    t.producer_epoch = r.producer_epoch;
    t.verify_only = !r.add;
    t.topics = vec![topic];
    let mut req = AddPartitionsToTxnRequest::default();
    req.transactions = vec![t];
    req
}

/// The answer for `r`'s partition in a v4 response.
fn code_in(resp: &AddPartitionsToTxnResponse, r: &TxnVerifyRequest) -> Result<(), ResponseError> {
    if let Some(e) = ResponseError::try_from_code(resp.error_code) {
        return Err(e);
    }
    let code = resp
        .results_by_transaction
        .iter()
        .filter(|t| t.transactional_id.0.as_str() == r.transactional_id)
        .flat_map(|t| &t.topic_results)
        .filter(|t| t.name.0.as_str() == r.topic)
        .flat_map(|t| &t.results_by_partition)
        .find(|p| p.partition_index == r.partition)
        .map(|p| p.partition_error_code)
        .ok_or(ResponseError::UnknownServerError)?;
    match ResponseError::try_from_code(code) {
        None => Ok(()),
        Some(e) => Err(e),
    }
}
