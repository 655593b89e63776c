//! The transaction coordinator's APIs: InitProducerId with a transactional id,
//! AddPartitionsToTxn (v0-3, the client form), AddOffsetsToTxn and EndTxn, converted to calls
//! of the transaction shard that owns the transactional id (`txn_shell`).

use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, InitProducerIdRequest,
    InitProducerIdResponse, ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use gregor_group::txn::metadata::MAX_PRODUCER_EPOCH;
use gregor_group::txn::{ProducerIdAndEpoch, TxnError, TxnRefusal, TxnReply};

use crate::forward::ControlPlane;
use crate::producer_ids::ProducerIdAllocator;
use crate::txn_shell::{Transactions, TxnCall, Verification};
use crate::txn_verify::txn_code;

/// Kafka's error for a refusal of the coordinator.
fn refusal_code(e: TxnRefusal) -> ResponseError {
    match e {
        TxnRefusal::Txn(e) => txn_code(e),
        TxnRefusal::InvalidTransactionTimeout => ResponseError::InvalidTransactionTimeout,
        TxnRefusal::NotCoordinator => ResponseError::NotCoordinator,
    }
}

/// PRODUCER_FENCED is newer than some versions (InitProducerId v0-3, EndTxn v0-1,
/// AddPartitionsToTxn v0-1, AddOffsetsToTxn v0-1): older clients are told
/// INVALID_PRODUCER_EPOCH, which they treat the same way.
fn for_version(e: ResponseError, fenced_since: i16, version: i16) -> ResponseError {
    if e == ResponseError::ProducerFenced && version < fenced_since {
        ResponseError::InvalidProducerEpoch
    } else {
        e
    }
}

/// InitProducerId with a transactional id.
pub async fn init_producer_id(
    b: ControlPlane<'_>,
    txns: &Transactions,
    producer_ids: &ProducerIdAllocator,
    r: &InitProducerIdRequest,
    version: i16,
) -> InitProducerIdResponse {
    let mut resp = InitProducerIdResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    let Some(id) = r.transactional_id.as_ref().map(|t| t.0.to_string()) else {
        return resp;
    };
    let fresh = match producer_ids.next() {
        Ok(pid) => pid,
        Err(e) => {
            tracing::warn!(error = %e, "cannot allocate a producer id");
            resp.error_code = ResponseError::CoordinatorNotAvailable.code();
            return resp;
        }
    };
    // v3+ (KIP-360): a producer that names its current id and epoch is bumped, not replaced.
    let expected = (version >= 3 && r.producer_id.0 >= 0).then_some(ProducerIdAndEpoch {
        producer_id: r.producer_id.0,
        epoch: r.producer_epoch,
    });
    let call = TxnCall::Init {
        transactional_id: id,
        timeout_ms: r.transaction_timeout_ms,
        expected,
        fresh_producer_id: fresh,
    };
    match txns.call(b, call).await {
        Ok(TxnReply::InitProducerId(Ok(p))) => {
            resp.producer_id = ProducerId(p.producer_id);
            resp.producer_epoch = p.epoch;
        }
        Ok(TxnReply::InitProducerId(Err(e))) => {
            resp.error_code = for_version(refusal_code(e), 4, version).code()
        }
        Ok(_) => resp.error_code = ResponseError::UnknownServerError.code(),
        Err(e) => resp.error_code = e.code(),
    }
    resp
}

/// AddPartitionsToTxn: v0-3 from producers; v4 from partition leaders verifying a
/// transaction (KIP-890).
pub async fn add_partitions_any(
    b: ControlPlane<'_>,
    txns: &Transactions,
    r: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    if version >= 4 {
        verify_only(b, txns, r).await
    } else {
        add_partitions(b, txns, r, version).await
    }
}

/// AddPartitionsToTxn v4+ from partition leaders, per transaction: with `verify_only`, its
/// partitions checked against its open transaction without changing it; without, added to it
/// (for a transaction-version-2 producer, which does not add partitions itself).
async fn verify_only(
    b: ControlPlane<'_>,
    txns: &Transactions,
    r: AddPartitionsToTxnRequest,
) -> AddPartitionsToTxnResponse {
    let image = b.metadata.image();
    let mut resp = AddPartitionsToTxnResponse::default();
    for t in r.transactions {
        let partitions: Vec<(String, i32)> = t
            .topics
            .iter()
            .flat_map(|tp| tp.partitions.iter().map(|p| (tp.name.0.to_string(), *p)))
            .collect();
        let id = t.transactional_id.0.to_string();
        let producer = ProducerIdAndEpoch {
            producer_id: t.producer_id.0,
            epoch: t.producer_epoch,
        };
        let answer: Result<Vec<Option<TxnError>>, ResponseError> = if !t.verify_only {
            let call = TxnCall::AddPartitions {
                transactional_id: id,
                producer,
                partitions: partitions.clone(),
            };
            match txns.call(b, call).await {
                Ok(TxnReply::AddPartitions(Ok(()))) => Ok(vec![None; partitions.len()]),
                Ok(TxnReply::AddPartitions(Err(e))) => Err(refusal_code(e)),
                Ok(_) => Err(ResponseError::UnknownServerError),
                Err(e) => Err(e),
            }
        } else {
            let p = Transactions::partition_of(b, &id);
            let v = Verification {
                transactional_id: id,
                producer,
                partitions: partitions.clone(),
            };
            match txns.verify(&image, b.node_id, p, v).await {
                Ok(Ok(each)) => Ok(each),
                Ok(Err(e)) => Err(txn_code(e)),
                Err(e) => Err(e),
            }
        };
        let code_of = |i: usize| match &answer {
            Ok(each) => each
                .get(i)
                .copied()
                .flatten()
                .map_or(0, |e| txn_code(e).code()),
            Err(e) => e.code(),
        };
        resp.results_by_transaction
            .push(txn_result(&t.transactional_id, &partitions, code_of));
    }
    resp
}

/// One transaction's v4 result: its partitions grouped by topic in order, each with its code.
fn txn_result(
    id: &kafka_protocol::messages::TransactionalId,
    partitions: &[(String, i32)],
    code_of: impl Fn(usize) -> i16,
) -> AddPartitionsToTxnResult {
    let mut out = AddPartitionsToTxnResult::default();
    out.transactional_id = id.clone();
    for (i, (topic, p)) in partitions.iter().enumerate() {
        let mut pr = AddPartitionsToTxnPartitionResult::default();
        pr.partition_index = *p;
        pr.partition_error_code = code_of(i);
        match out
            .topic_results
            .iter_mut()
            .find(|t| t.name.0.as_str() == topic)
        {
            Some(t) => t.results_by_partition.push(pr),
            None => {
                let mut t = AddPartitionsToTxnTopicResult::default();
                t.name = TopicName(StrBytes::from_string(topic.clone()));
                t.results_by_partition = vec![pr];
                out.topic_results.push(t);
            }
        }
    }
    out
}

/// AddPartitionsToTxn v0-3: every partition must exist (else UNKNOWN_TOPIC_OR_PARTITION, and
/// the others OPERATION_NOT_ATTEMPTED); then all are added at once.
async fn add_partitions(
    b: ControlPlane<'_>,
    txns: &Transactions,
    r: AddPartitionsToTxnRequest,
    version: i16,
) -> AddPartitionsToTxnResponse {
    let image = b.metadata.image();
    let requested: Vec<(String, i32)> = r
        .v3_and_below_topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (t.name.0.to_string(), *p)))
        .collect();
    let exists = |(t, p): &(String, i32)| {
        image
            .topic(t)
            .is_some_and(|topic| topic.partitions.contains_key(p))
    };
    // All added at once, or none: the coordinator's one answer for every partition.
    let added = if requested.iter().all(exists) {
        let call = TxnCall::AddPartitions {
            transactional_id: r.v3_and_below_transactional_id.0.to_string(),
            producer: ProducerIdAndEpoch {
                producer_id: r.v3_and_below_producer_id.0,
                epoch: r.v3_and_below_producer_epoch,
            },
            partitions: requested.clone(),
        };
        Some(match txns.call(b, call).await {
            Ok(TxnReply::AddPartitions(Ok(()))) => 0,
            Ok(TxnReply::AddPartitions(Err(e))) => for_version(refusal_code(e), 2, version).code(),
            Ok(_) => ResponseError::UnknownServerError.code(),
            Err(e) => e.code(),
        })
    } else {
        None
    };
    let code_of = |tp: &(String, i32)| match added {
        Some(code) => code,
        None if exists(tp) => ResponseError::OperationNotAttempted.code(),
        None => ResponseError::UnknownTopicOrPartition.code(),
    };
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_topic_v3_and_below = r
        .v3_and_below_topics
        .iter()
        .map(|t| {
            let mut out = AddPartitionsToTxnTopicResult::default();
            out.name = t.name.clone();
            out.results_by_partition = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = *p;
                    pr.partition_error_code = code_of(&(t.name.0.to_string(), *p));
                    pr
                })
                .collect();
            out
        })
        .collect();
    resp
}

/// AddOffsetsToTxn: the group's `__consumer_offsets` partition joins the transaction.
pub async fn add_offsets(
    b: ControlPlane<'_>,
    txns: &Transactions,
    r: AddOffsetsToTxnRequest,
    version: i16,
) -> AddOffsetsToTxnResponse {
    let group = r.group_id.0.to_string();
    let partition = crate::groups::Groups::partition_of(b, &group);
    let call = TxnCall::AddPartitions {
        transactional_id: r.transactional_id.0.to_string(),
        producer: ProducerIdAndEpoch {
            producer_id: r.producer_id.0,
            epoch: r.producer_epoch,
        },
        partitions: vec![(crate::groups::OFFSETS_TOPIC.to_string(), partition)],
    };
    let mut resp = AddOffsetsToTxnResponse::default();
    resp.error_code = match txns.call(b, call).await {
        Ok(TxnReply::AddPartitions(Ok(()))) => 0,
        Ok(TxnReply::AddPartitions(Err(e))) => for_version(refusal_code(e), 2, version).code(),
        Ok(_) => ResponseError::UnknownServerError.code(),
        Err(e) => e.code(),
    };
    resp
}

/// EndTxn: commit or abort; answered once the decision is durable (the markers follow).
/// v5+ is transaction version 2 (KIP-890 part 2): the decision bumps the epoch and the answer
/// names the producer id and epoch of the producer's next transaction.
pub async fn end_txn(
    b: ControlPlane<'_>,
    txns: &Transactions,
    producer_ids: &ProducerIdAllocator,
    r: EndTxnRequest,
    version: i16,
) -> EndTxnResponse {
    let mut resp = EndTxnResponse::default();
    resp.producer_id = ProducerId(-1);
    resp.producer_epoch = -1;
    // Only a producer at the last epoch can need a new id; retries name an older epoch.
    let version2 = match version >= 5 {
        false => None,
        true if r.producer_epoch < MAX_PRODUCER_EPOCH => Some(-1),
        true => match producer_ids.next() {
            Ok(pid) => Some(pid),
            Err(e) => {
                tracing::warn!(error = %e, "cannot allocate a producer id");
                resp.error_code = ResponseError::CoordinatorNotAvailable.code();
                return resp;
            }
        },
    };
    let call = TxnCall::End {
        transactional_id: r.transactional_id.0.to_string(),
        producer: ProducerIdAndEpoch {
            producer_id: r.producer_id.0,
            epoch: r.producer_epoch,
        },
        commit: r.committed,
        version2,
    };
    match txns.call(b, call).await {
        Ok(TxnReply::EndTxn(Ok(next))) => {
            if version >= 5 {
                resp.producer_id = ProducerId(next.producer_id);
                resp.producer_epoch = next.epoch;
            }
        }
        Ok(TxnReply::EndTxn(Err(e))) => {
            resp.error_code = for_version(refusal_code(e), 2, version).code()
        }
        Ok(_) => resp.error_code = ResponseError::UnknownServerError.code(),
        Err(e) => resp.error_code = e.code(),
    }
    resp
}

#[cfg(test)]
#[path = "txn_coordinator_tests.rs"]
pub(crate) mod tests;
