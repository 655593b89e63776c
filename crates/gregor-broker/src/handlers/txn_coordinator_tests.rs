//! The transaction coordinator's APIs through the broker's routing: a producer's
//! InitProducerId, AddPartitionsToTxn (v3) and EndTxn, and a partition leader's verification
//! (AddPartitionsToTxn v4 `verify_only`, KIP-890).

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::{
    AddPartitionsToTxnTopic, AddPartitionsToTxnTransaction,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::handlers::fetch::tests::{create_topic, delete_topic, sb, send, start};
use crate::Broker;

/// InitProducerId for `id`; its producer id and epoch.
pub(crate) async fn init(b: &Arc<Broker>, id: &str) -> (i64, i16) {
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

async fn add(b: &Arc<Broker>, id: &str, producer: (i64, i16), topic: &str) -> i16 {
    add_many(b, id, producer, &[topic]).await[0]
}

/// AddPartitionsToTxn v3 of partition 0 of each of `topics`; the codes in order.
async fn add_many(
    b: &Arc<Broker>,
    id: &str,
    (pid, epoch): (i64, i16),
    topics: &[&str],
) -> Vec<i16> {
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = TransactionalId(sb(id));
    r.v3_and_below_producer_id = ProducerId(pid);
    r.v3_and_below_producer_epoch = epoch;
    r.v3_and_below_topics = topics
        .iter()
        .map(|name| {
            let mut t = AddPartitionsToTxnTopic::default();
            t.name = TopicName(sb(name));
            t.partitions = vec![0];
            t
        })
        .collect();
    match send(
        b,
        ApiKey::AddPartitionsToTxn,
        3,
        RequestKind::AddPartitionsToTxn(r),
    )
    .await
    {
        ResponseKind::AddPartitionsToTxn(resp) => {
            let code = |name: &str| {
                let t = resp
                    .results_by_topic_v3_and_below
                    .iter()
                    .find(|t| t.name.0.as_str() == name);
                t.expect("every topic answered").results_by_partition[0].partition_error_code
            };
            topics.iter().map(|t| code(t)).collect()
        }
        other => panic!("{other:?}"),
    }
}

async fn end(
    b: &Arc<Broker>,
    id: &str,
    (pid, epoch): (i64, i16),
    commit: bool,
    version: i16,
) -> i16 {
    let mut r = EndTxnRequest::default();
    r.transactional_id = TransactionalId(sb(id));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.committed = commit;
    until_loaded(|| async {
        match send(b, ApiKey::EndTxn, version, RequestKind::EndTxn(r.clone())).await {
            ResponseKind::EndTxn(resp) => resp.error_code,
            other => panic!("{other:?}"),
        }
    })
    .await
}

/// The code `call` answers once the id's coordinator shard has loaded: the first request of
/// the internal topic creates it, and a shard other than that request's own may still be
/// loading (COORDINATOR_LOAD_IN_PROGRESS, which clients retry).
async fn until_loaded<F: std::future::Future<Output = i16>>(call: impl Fn() -> F) -> i16 {
    let loading = ResponseError::CoordinatorLoadInProgress.code();
    for _ in 0..500 {
        let code = call().await;
        if code != loading {
            return code;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the coordinator shard never loaded");
}

async fn init_with_timeout(b: &Arc<Broker>, id: &str, timeout_ms: i32) -> i16 {
    let mut r = InitProducerIdRequest::default();
    r.transactional_id = Some(TransactionalId(sb(id)));
    r.transaction_timeout_ms = timeout_ms;
    r.producer_id = ProducerId(-1);
    r.producer_epoch = -1;
    until_loaded(|| async {
        let req = RequestKind::InitProducerId(r.clone());
        match send(b, ApiKey::InitProducerId, 4, req).await {
            ResponseKind::InitProducerId(resp) => resp.error_code,
            other => panic!("{other:?}"),
        }
    })
    .await
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

/// Requests a buggy or stale producer could send: each gets Kafka's error, nothing changes,
/// and the coordinator keeps serving.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_transaction_requests_get_kafkas_errors_and_change_nothing() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "kept").await;
    create_topic(&b, "gone").await;
    delete_topic(&b, "gone").await;
    let timeout = ResponseError::InvalidTransactionTimeout.code();
    assert_eq!(init_with_timeout(&b, "tx", i32::MAX).await, timeout);
    assert_eq!(init_with_timeout(&b, "tx", 0).await, timeout);
    let unknown_id = ResponseError::InvalidProducerIdMapping.code();
    assert_eq!(
        end(&b, "never-initialized", (7, 0), true, 3).await,
        unknown_id
    );
    let zombie = init(&b, "tx").await;
    let producer = init(&b, "tx").await;
    assert_eq!(producer, (zombie.0, zombie.1 + 1));
    // EndTxn with no transaction open.
    let invalid = ResponseError::InvalidTxnState.code();
    assert_eq!(end(&b, "tx", producer, true, 3).await, invalid);
    // A deleted and a never-created topic: nothing is added, the rest is not attempted.
    let codes = add_many(&b, "tx", producer, &["kept", "gone", "never"]).await;
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let skipped = ResponseError::OperationNotAttempted.code();
    assert_eq!(codes, [skipped, unknown, unknown]);
    assert_eq!(
        end(&b, "tx", producer, false, 3).await,
        invalid,
        "nothing was opened"
    );
    // A zombie's EndTxn: fenced, in the words its version knows.
    assert_eq!(add(&b, "tx", producer, "kept").await, 0);
    let fenced = ResponseError::ProducerFenced.code();
    assert_eq!(end(&b, "tx", zombie, true, 3).await, fenced);
    let old_fenced = ResponseError::InvalidProducerEpoch.code();
    assert_eq!(end(&b, "tx", zombie, true, 1).await, old_fenced);
    // The transaction is intact and ends as its producer says.
    assert_eq!(end(&b, "tx", producer, true, 3).await, 0);
}

/// EndTxn v5 and its answer: the producer id and epoch to go on with.
async fn end_v5(
    b: &Arc<Broker>,
    id: &str,
    (pid, epoch): (i64, i16),
    commit: bool,
) -> EndTxnResponse {
    let mut r = EndTxnRequest::default();
    r.transactional_id = TransactionalId(sb(id));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.committed = commit;
    for _ in 0..500 {
        match send(b, ApiKey::EndTxn, 5, RequestKind::EndTxn(r.clone())).await {
            ResponseKind::EndTxn(resp)
                if resp.error_code != ResponseError::CoordinatorLoadInProgress.code()
                    && resp.error_code != ResponseError::ConcurrentTransactions.code() =>
            {
                return resp
            }
            ResponseKind::EndTxn(_) => {
                tokio::time::sleep(std::time::Duration::from_millis(10)).await
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("EndTxn v5 never answered");
}

/// AddPartitionsToTxn once the last decision's markers are written.
async fn add_when_free(b: &Arc<Broker>, id: &str, producer: (i64, i16)) -> i16 {
    for _ in 0..500 {
        let code = add(b, id, producer, "in").await;
        if code != ResponseError::ConcurrentTransactions.code() {
            return code;
        }
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
    panic!("the markers were never written");
}

/// Transaction version 2 (KIP-890 part 2): every decision bumps the epoch, the answer names
/// it, a retry whose answer was lost is answered alike, and the old epoch is fenced.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn end_txn_v5_bumps_the_epoch_and_answers_a_lost_retry_alike() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "in").await;
    let p0 = init(&b, "tx2").await;
    assert_eq!(add(&b, "tx2", p0, "in").await, 0);
    let resp = end_v5(&b, "tx2", p0, true).await;
    assert_eq!(resp.error_code, 0, "{resp:?}");
    let p1 = (resp.producer_id.0, resp.producer_epoch);
    assert_eq!(p1, (p0.0, p0.1 + 1));
    let retry = end_v5(&b, "tx2", p0, true).await;
    assert_eq!(
        (retry.error_code, retry.producer_id.0, retry.producer_epoch),
        (0, p1.0, p1.1)
    );
    // The old epoch can no longer open a transaction; the new one can, and its abort bumps.
    let fenced = ResponseError::ProducerFenced.code();
    assert_eq!(add_when_free(&b, "tx2", p0).await, fenced);
    assert_eq!(add_when_free(&b, "tx2", p1).await, 0);
    let resp = end_v5(&b, "tx2", p1, false).await;
    assert_eq!((resp.error_code, resp.producer_epoch), (0, p1.1 + 1));
    // v4 keeps the epoch and names no producer.
    let p2 = (resp.producer_id.0, resp.producer_epoch);
    assert_eq!(add_when_free(&b, "tx2", p2).await, 0);
    assert_eq!(end(&b, "tx2", p2, true, 4).await, 0);
    assert_eq!(
        add_when_free(&b, "tx2", p2).await,
        0,
        "same epoch after a v4 commit"
    );
}
