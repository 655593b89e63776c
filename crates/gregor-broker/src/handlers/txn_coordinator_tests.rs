//! The transaction coordinator's APIs through the broker's routing: a producer's
//! InitProducerId, AddPartitionsToTxn (v3) and EndTxn, and a partition leader's verification
//! (AddPartitionsToTxn v4 `verify_only`, KIP-890).

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::handlers::fetch::tests::{create_topic, sb, send, start};
use crate::Broker;

async fn init(b: &Arc<Broker>, id: &str) -> (i64, i16) {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(TransactionalId(sb(id)));
    r.transaction_timeout_ms = 60_000;
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    match send(b, ApiKey::InitProducerId, 4, RequestKind::InitProducerId(r)).await {
        ResponseKind::InitProducerId(resp) => {
            assert_eq!(resp.error_code, 0, "{resp:?}");
            (resp.producer_id.0, resp.producer_epoch)
        }
        other => panic!("{other:?}"),
    }
}

async fn add(b: &Arc<Broker>, id: &str, (pid, epoch): (i64, i16), topic: &str) -> i16 {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(sb(topic));
    t.partitions = vec![0];
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = TransactionalId(sb(id));
    r.v3_and_below_producer_id = ProducerId(pid);
    r.v3_and_below_producer_epoch = epoch;
    r.v3_and_below_topics = vec![t];
    match send(
        b,
        ApiKey::AddPartitionsToTxn,
        3,
        RequestKind::AddPartitionsToTxn(r),
    )
    .await
    {
        ResponseKind::AddPartitionsToTxn(resp) => {
            resp.results_by_topic_v3_and_below[0].results_by_partition[0].partition_error_code
        }
        other => panic!("{other:?}"),
    }
}

/// Verifies partition 0 of each of `topics`; the codes in order.
async fn verify(
    b: &Arc<Broker>,
    id: &str,
    (pid, epoch): (i64, i16),
    topics: &[&str],
    verify_only: bool,
) -> Vec<i16> {
    let mut t = AddPartitionsToTxnTransaction::default();
    t.transactional_id = TransactionalId(sb(id));
    t.producer_id = ProducerId(pid);
    t.producer_epoch = epoch;
    t.verify_only = verify_only;
    t.topics = topics
        .iter()
        .map(|name| {
            let mut tp = AddPartitionsToTxnTopic::default();
            tp.name = TopicName(sb(name));
            tp.partitions = vec![0];
            tp
        })
        .collect();
    let mut r = AddPartitionsToTxnRequest::default();
    r.transactions = vec![t];
    match send(
        b,
        ApiKey::AddPartitionsToTxn,
        4,
        RequestKind::AddPartitionsToTxn(r),
    )
    .await
    {
        ResponseKind::AddPartitionsToTxn(resp) => resp.results_by_transaction[0]
            .topic_results
            .iter()
            .map(|t| t.results_by_partition[0].partition_error_code)
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_leader_verifies_that_a_partition_is_in_the_producers_open_transaction() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "in").await;
    create_topic(&b, "out").await;
    let first = init(&b, "tx").await;
    // A second InitProducerId of the id bumps the epoch: the first instance is a zombie.
    let producer = init(&b, "tx").await;
    assert_eq!(producer, (first.0, first.1 + 1));
    assert_eq!(add(&b, "tx", producer, "in").await, 0);

    let in_txn = verify(&b, "tx", producer, &["in", "out"], true).await;
    let invalid = ResponseError::InvalidTxnState.code();
    assert_eq!(in_txn, [0, invalid]);
    // The zombie's epoch is fenced; adding through v4 is not offered.
    let fenced = ResponseError::ProducerFenced.code();
    assert_eq!(verify(&b, "tx", first, &["in"], true).await, [fenced]);
    let refused = verify(&b, "tx", producer, &["in"], false).await;
    assert_eq!(refused, [ResponseError::InvalidRequest.code()]);
    // An unknown transactional id has no transaction.
    let unknown = verify(&b, "nobody", producer, &["in"], true).await;
    assert_eq!(unknown, [ResponseError::InvalidProducerIdMapping.code()]);
}
