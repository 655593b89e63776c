//! What the transaction coordinator's APIs need (Kafka's table): WRITE on the transactional
//! id for AddPartitionsToTxn, AddOffsetsToTxn and EndTxn; besides, AddPartitionsToTxn needs
//! WRITE on each topic (refused ones TOPIC_AUTHORIZATION_FAILED, the others then
//! OPERATION_NOT_ATTEMPTED) and AddOffsetsToTxn READ on the group. TxnOffsetCommit needs WRITE
//! on the transactional id (else TRANSACTIONAL_ID_AUTHORIZATION_FAILED on every partition), READ
//! on the group (else GROUP_AUTHORIZATION_FAILED on every partition) and READ on each topic
//! (refused ones TOPIC_AUTHORIZATION_FAILED, the others run).
//!
//! KIP-664's admin APIs: DescribeTransactions needs DESCRIBE on each transactional id (else
//! TRANSACTIONAL_ID_AUTHORIZATION_FAILED for it) and leaves out of a description the topics
//! the principal may not DESCRIBE; ListTransactions lists only the ids it may DESCRIBE.

use gregor_meta::acl::{AclOperation, AclResourceType};
use kafka_protocol::messages::add_partitions_to_txn_response::{
    AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
};
use kafka_protocol::messages::describe_transactions_response::TransactionState as DescribedTxn;
use kafka_protocol::messages::txn_offset_commit_request::TxnOffsetCommitRequestTopic;
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnResponse, AddPartitionsToTxnRequest, AddPartitionsToTxnResponse,
    DescribeTransactionsRequest, DescribeTransactionsResponse, EndTxnResponse, RequestKind,
    ResponseKind, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use super::common::{no_fixup, on_response, run_unless_empty, split, Decide, Gate};
use crate::connection::Reply;

pub(super) fn gate(d: &dyn Decide, request: RequestKind) -> Gate {
    let may_write = |id: &str| d.allows(AclOperation::Write, AclResourceType::TransactionalId, id);
    let txn_refused = ResponseError::TransactionalIdAuthorizationFailed.code();
    match request {
        RequestKind::AddPartitionsToTxn(r) => add_partitions(d, r),
        RequestKind::AddOffsetsToTxn(r) => {
            let code = if !may_write(&r.transactional_id.0) {
                txn_refused
            } else if !d.allows(AclOperation::Read, AclResourceType::Group, &r.group_id.0) {
                ResponseError::GroupAuthorizationFailed.code()
            } else {
                return Gate::Run(RequestKind::AddOffsetsToTxn(r), no_fixup());
            };
            let mut resp = AddOffsetsToTxnResponse::default();
            resp.error_code = code;
            Gate::Answer(Reply::Respond(ResponseKind::AddOffsetsToTxn(resp)))
        }
        RequestKind::EndTxn(r) => {
            if may_write(&r.transactional_id.0) {
                return Gate::Run(RequestKind::EndTxn(r), no_fixup());
            }
            let mut resp = EndTxnResponse::default();
            resp.error_code = txn_refused;
            Gate::Answer(Reply::Respond(ResponseKind::EndTxn(resp)))
        }
        RequestKind::TxnOffsetCommit(r) => txn_offset_commit(d, r),
        RequestKind::DescribeTransactions(r) => describe_transactions(d, r),
        r @ RequestKind::ListTransactions(_) => Gate::Run(r, on_response(list_visible)),
        other => Gate::Run(other, no_fixup()),
    }
}

/// Every partition of `topics` answered `error`.
fn txn_commit_refusals(
    topics: &[TxnOffsetCommitRequestTopic],
    error: ResponseError,
) -> Vec<TxnOffsetCommitResponseTopic> {
    topics
        .iter()
        .map(|t| {
            let mut out = TxnOffsetCommitResponseTopic::default();
            out.name = t.name.clone();
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut a = TxnOffsetCommitResponsePartition::default();
                    a.partition_index = p.partition_index;
                    a.error_code = error.code();
                    a
                })
                .collect();
            out
        })
        .collect()
}

/// TxnOffsetCommit: WRITE on the transactional id, READ on the group, READ on each topic.
fn txn_offset_commit(d: &dyn Decide, mut r: TxnOffsetCommitRequest) -> Gate {
    let whole = if !d.allows(
        AclOperation::Write,
        AclResourceType::TransactionalId,
        &r.transactional_id.0,
    ) {
        Some(ResponseError::TransactionalIdAuthorizationFailed)
    } else if !d.allows(AclOperation::Read, AclResourceType::Group, &r.group_id.0) {
        Some(ResponseError::GroupAuthorizationFailed)
    } else {
        None
    };
    if let Some(error) = whole {
        let mut resp = TxnOffsetCommitResponse::default();
        resp.topics = txn_commit_refusals(&r.topics, error);
        return Gate::Answer(Reply::Respond(ResponseKind::TxnOffsetCommit(resp)));
    }
    let topics = std::mem::take(&mut r.topics);
    let (kept, refused) = split(d, AclOperation::Read, AclResourceType::Topic, topics, |t| {
        t.name.0.as_str()
    });
    let answers = txn_commit_refusals(&refused, ResponseError::TopicAuthorizationFailed);
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::TxnOffsetCommit(mut resp) => {
            resp.topics.extend(answers);
            ResponseKind::TxnOffsetCommit(resp)
        }
        other => other,
    });
    let empty = ResponseKind::TxnOffsetCommit(TxnOffsetCommitResponse::default());
    let nothing_left = r.topics.is_empty();
    run_unless_empty(
        d,
        nothing_left,
        RequestKind::TxnOffsetCommit(r),
        empty,
        fixup,
    )
}

fn add_partitions(d: &dyn Decide, r: AddPartitionsToTxnRequest) -> Gate {
    // v4 (transactions, not the v3 fields) comes from partition leaders verifying a
    // transaction (KIP-890): CLUSTER_ACTION on the cluster, as WriteTxnMarkers.
    if !r.transactions.is_empty() {
        if d.cluster(AclOperation::ClusterAction) {
            return Gate::Run(RequestKind::AddPartitionsToTxn(r), no_fixup());
        }
        let mut resp = AddPartitionsToTxnResponse::default();
        resp.error_code = ResponseError::ClusterAuthorizationFailed.code();
        return Gate::Answer(Reply::Respond(ResponseKind::AddPartitionsToTxn(resp)));
    }
    let id = r.v3_and_below_transactional_id.0.as_str();
    let txn_ok = d.allows(AclOperation::Write, AclResourceType::TransactionalId, id);
    let refused: Vec<bool> = r
        .v3_and_below_topics
        .iter()
        .map(|t| !d.allows(AclOperation::Write, AclResourceType::Topic, &t.name.0))
        .collect();
    if txn_ok && !refused.contains(&true) {
        return Gate::Run(RequestKind::AddPartitionsToTxn(r), no_fixup());
    }
    let code_of = |topic_refused: bool| {
        if !txn_ok {
            ResponseError::TransactionalIdAuthorizationFailed.code()
        } else if topic_refused {
            ResponseError::TopicAuthorizationFailed.code()
        } else {
            ResponseError::OperationNotAttempted.code()
        }
    };
    let mut resp = AddPartitionsToTxnResponse::default();
    resp.results_by_topic_v3_and_below = r
        .v3_and_below_topics
        .iter()
        .zip(refused)
        .map(|(t, topic_refused)| {
            let mut out = AddPartitionsToTxnTopicResult::default();
            out.name = t.name.clone();
            out.results_by_partition = t
                .partitions
                .iter()
                .map(|p| {
                    let mut pr = AddPartitionsToTxnPartitionResult::default();
                    pr.partition_index = *p;
                    pr.partition_error_code = code_of(topic_refused);
                    pr
                })
                .collect();
            out
        })
        .collect();
    Gate::Answer(Reply::Respond(ResponseKind::AddPartitionsToTxn(resp)))
}

/// DescribeTransactions: the ids it may DESCRIBE run; the others are answered
/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED. Descriptions keep only the topics it may DESCRIBE.
fn describe_transactions(d: &dyn Decide, mut r: DescribeTransactionsRequest) -> Gate {
    let ids = std::mem::take(&mut r.transactional_ids);
    let (kept, refused) = split(
        d,
        AclOperation::Describe,
        AclResourceType::TransactionalId,
        ids,
        |id| id.0.as_str(),
    );
    r.transactional_ids = kept;
    let answers: Vec<DescribedTxn> = refused
        .into_iter()
        .map(|id| {
            let mut t = DescribedTxn::default();
            t.transactional_id = id;
            t.error_code = ResponseError::TransactionalIdAuthorizationFailed.code();
            t.transaction_start_time_ms = -1;
            t.producer_id = kafka_protocol::messages::ProducerId(-1);
            t.producer_epoch = -1;
            t
        })
        .collect();
    let fixup = on_response(move |d, resp| match resp {
        ResponseKind::DescribeTransactions(mut resp) => {
            for t in &mut resp.transaction_states {
                t.topics.retain(|tp| {
                    d.allows(AclOperation::Describe, AclResourceType::Topic, &tp.topic.0)
                });
            }
            resp.transaction_states.extend(answers);
            ResponseKind::DescribeTransactions(resp)
        }
        other => other,
    });
    let empty = ResponseKind::DescribeTransactions(DescribeTransactionsResponse::default());
    let nothing_left = r.transactional_ids.is_empty();
    run_unless_empty(
        d,
        nothing_left,
        RequestKind::DescribeTransactions(r),
        empty,
        fixup,
    )
}

/// ListTransactions: only the transactional ids it may DESCRIBE (quietly: a filter, no error).
fn list_visible(d: &dyn Decide, resp: ResponseKind) -> ResponseKind {
    match resp {
        ResponseKind::ListTransactions(mut resp) => {
            resp.transaction_states.retain(|t| {
                d.allows_quietly(
                    AclOperation::Describe,
                    AclResourceType::TransactionalId,
                    &t.transactional_id.0,
                )
            });
            ResponseKind::ListTransactions(resp)
        }
        other => other,
    }
}
