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
    // The zombie's epoch is fenced, for adding too. Without `verify_only` (a leader adding
    // a partition for a transaction-version-2 producer) the partition joins the transaction.
    let fenced = ResponseError::ProducerFenced.code();
    assert_eq!(verify(&b, "tx", first, &["in"], true).await, [fenced]);
    assert_eq!(verify(&b, "tx", first, &["out"], false).await, [fenced]);
    assert_eq!(verify(&b, "tx", producer, &["out"], false).await, [0]);
    assert_eq!(
        verify(&b, "tx", producer, &["in", "out"], true).await,
        [0, 0]
    );
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
    // Epochs past the last one, or negative, name no producer: fenced, nothing bumped.
    for epoch in [i16::MAX, i16::MAX - 1, -1, i16::MIN] {
        let resp = end_v5(&b, "tx", (producer.0, epoch), true).await;
        assert_eq!(resp.error_code, fenced, "epoch {epoch}");
        assert_eq!((resp.producer_id.0, resp.producer_epoch), (-1, -1));
    }
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

/// Produce v12 (transaction version 2: no AddPartitionsToTxn before it) of one transactional
/// record to partition 0 of `topic`; the partition's error code.
async fn produce_v12(b: &Arc<Broker>, id: &str, (pid, epoch): (i64, i16), seq: i32) -> i16 {
    use gregor_log::records::{encode_batch, BatchSpec, Record};
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let spec = BatchSpec {
        producer_id: pid,
        producer_epoch: epoch,
        base_sequence: seq,
        transactional: true,
        ..BatchSpec::default()
    };
    let record = Record {
        offset: 0,
        timestamp: crate::runtime::now_ms(),
        key: None,
        value: Some(bytes::Bytes::from(format!("{epoch}-{seq}"))),
        headers: Vec::new(),
    };
    let mut part = PartitionProduceData::default();
    part.records = Some(bytes::Bytes::from(
        encode_batch(&spec, &[record]).expect("encode"),
    ));
    let mut t = TopicProduceData::default();
    t.name = TopicName(sb("in"));
    t.partition_data = vec![part];
    let mut r = ProduceRequest::default();
    r.transactional_id = Some(TransactionalId(sb(id)));
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    match send(b, ApiKey::Produce, 12, RequestKind::Produce(r)).await {
        ResponseKind::Produce(resp) => resp.responses[0].partition_responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// TxnOffsetCommit v5 (no AddOffsetsToTxn before it) of offset `offset` of `in`-0 for group
/// `g`; the partition's error code.
async fn txn_offset_commit_v5(b: &Arc<Broker>, id: &str, (pid, epoch): (i64, i16)) -> i16 {
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    let mut p = TxnOffsetCommitRequestPartition::default();
    p.committed_offset = 42;
    let mut t = TxnOffsetCommitRequestTopic::default();
    t.name = TopicName(sb("in"));
    t.partitions = vec![p];
    let mut r = TxnOffsetCommitRequest::default();
    r.transactional_id = TransactionalId(sb(id));
    r.group_id = GroupId(sb("g"));
    r.producer_id = ProducerId(pid);
    r.producer_epoch = epoch;
    r.generation_id = -1;
    r.topics = vec![t];
    for _ in 0..500 {
        match send(
            b,
            ApiKey::TxnOffsetCommit,
            5,
            RequestKind::TxnOffsetCommit(r.clone()),
        )
        .await
        {
            ResponseKind::TxnOffsetCommit(resp) => {
                let code = resp.topics[0].partitions[0].error_code;
                if code != ResponseError::CoordinatorLoadInProgress.code() {
                    return code;
                }
                tokio::time::sleep(std::time::Duration::from_millis(10)).await;
            }
            other => panic!("{other:?}"),
        }
    }
    panic!("the group coordinator never loaded");
}

/// Transaction version 2 end to end on one broker: Produce v12 and TxnOffsetCommit v5 add
/// their partitions themselves, EndTxn v5 commits at a bumped epoch, after which the old
/// epoch cannot write to the partition, and the new one opens the next transaction.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_v12_and_txn_offset_commit_v5_add_their_partitions() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "in").await;
    let p0 = init(&b, "tv2").await;
    assert_eq!(
        produce_v12(&b, "tv2", p0, 0).await,
        0,
        "added by the leader"
    );
    assert_eq!(txn_offset_commit_v5(&b, "tv2", p0).await, 0);
    let latest = crate::handlers::txn::tests::latest;
    assert_eq!(
        latest(&b, "in", 1).await,
        0,
        "the open transaction holds the LSO"
    );
    let resp = end_v5(&b, "tv2", p0, true).await;
    assert_eq!(resp.error_code, 0, "{resp:?}");
    let p1 = (resp.producer_id.0, resp.producer_epoch);
    // Once the markers are written the LSO passes the record and its marker.
    assert_eq!(add_when_free(&b, "tv2", p1).await, 0);
    assert_eq!(latest(&b, "in", 1).await, 2);
    // A late batch of the ended transaction cannot open another: the marker bumped the epoch.
    let stale = produce_v12(&b, "tv2", p0, 1).await;
    assert_eq!(stale, ResponseError::InvalidProducerEpoch.code());
    assert_eq!(produce_v12(&b, "tv2", p1, 0).await, 0);
    let resp = end_v5(&b, "tv2", p1, false).await;
    assert_eq!((resp.error_code, resp.producer_epoch), (0, p1.1 + 1));
}
