//! WriteTxnMarkers, read_committed Fetch and ListOffsets on a real single-node broker, with
//! transactional batches appended to its partition (Produce takes none without a transaction
//! coordinator).

use std::sync::Arc;

use gregor_log::batch::{BatchHeader, Codec};
use gregor_log::records::{encode_batch, BatchSpec, Record};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::handlers::fetch::tests::{create_topic, fetch_request, sb, send, start};
use crate::Broker;

fn batch(pid: i64, count: usize, transactional: bool) -> bytes::Bytes {
    let spec = BatchSpec {
        codec: Codec::None,
        producer_id: pid,
        producer_epoch: if pid < 0 { -1 } else { 0 },
        base_sequence: if pid < 0 { -1 } else { 0 },
        transactional,
        ..BatchSpec::default()
    };
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            offset: i as i64,
            timestamp: crate::runtime::now_ms(),
            key: None,
            value: Some(bytes::Bytes::from(format!("{pid}-{i}"))),
            headers: Vec::new(),
        })
        .collect();
    bytes::Bytes::from(encode_batch(&spec, &records).expect("encode"))
}

async fn append(b: &Arc<Broker>, topic: &str, records: bytes::Bytes) {
    let part = b.replicas.get(topic, 0).expect("hosted");
    let done = part.spawn_append(records).done.await.expect("task");
    done.expect("appended");
}

/// One marker for partition 0 of each of `topics`; the error of each, in order.
async fn markers(
    b: &Arc<Broker>,
    topics: &[&str],
    pid: i64,
    coordinator_epoch: i32,
    commit: bool,
) -> Vec<i16> {
    let mut m = WritableTxnMarker::default();
    m.producer_id = ProducerId(pid);
    m.producer_epoch = 0;
    m.transaction_result = commit;
    m.coordinator_epoch = coordinator_epoch;
    m.topics = topics
        .iter()
        .map(|t| {
            let mut w = WritableTxnMarkerTopic::default();
            w.name = TopicName(sb(t));
            w.partition_indexes = vec![0];
            w
        })
        .collect();
    let mut r = WriteTxnMarkersRequest::default();
    r.markers = vec![m];
    match send(
        b,
        ApiKey::WriteTxnMarkers,
        1,
        RequestKind::WriteTxnMarkers(r),
    )
    .await
    {
        ResponseKind::WriteTxnMarkers(resp) => {
            assert_eq!(resp.markers[0].producer_id, ProducerId(pid));
            resp.markers[0]
                .topics
                .iter()
                .map(|t| t.partitions[0].error_code)
                .collect()
        }
        other => panic!("{other:?}"),
    }
}

/// A v12 fetch from offset 0 at `isolation_level`: the partition's answer and the base
/// offsets of the batches it carries.
async fn fetch_all(
    b: &Arc<Broker>,
    topic: &str,
    isolation_level: i8,
) -> (fetch_response::PartitionData, Vec<i64>) {
    let mut r = fetch_request(topic, Uuid::nil(), 12, 0);
    r.isolation_level = isolation_level;
    let reply = super::super::fetch::fetch(b.data_plane(), r, 12, None, None).await;
    let bytes = reply.records[0].read().expect("read");
    let mut bases = Vec::new();
    let mut rest = &bytes[..];
    while let Some(h) = BatchHeader::parse(rest) {
        bases.push(h.base_offset);
        rest = &rest[h.size()..];
    }
    (reply.response.responses[0].partitions[0].clone(), bases)
}

pub(crate) async fn latest(b: &Arc<Broker>, topic: &str, isolation_level: i8) -> i64 {
    let mut p = ListOffsetsPartition::default();
    p.partition_index = 0;
    p.timestamp = -1;
    p.current_leader_epoch = -1;
    let mut t = ListOffsetsTopic::default();
    t.name = TopicName(sb(topic));
    t.partitions = vec![p];
    let mut r = ListOffsetsRequest::default();
    r.replica_id = BrokerId(-1);
    r.isolation_level = isolation_level;
    r.topics = vec![t];
    match send(b, ApiKey::ListOffsets, 7, RequestKind::ListOffsets(r)).await {
        ResponseKind::ListOffsets(resp) => resp.topics[0].partitions[0].offset,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_end_transactions_and_read_committed_stops_at_the_lso() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "tx").await;
    append(&b, "tx", batch(7, 3, true)).await; // 0-2
    append(&b, "tx", batch(-1, 1, false)).await; // 3
    append(&b, "tx", batch(8, 1, true)).await; // 4
    assert_eq!(markers(&b, &["tx"], 7, 0, false).await, vec![0]); // abort at 5

    let (committed, bases) = fetch_all(&b, "tx", 1).await;
    assert_eq!(
        (committed.high_watermark, committed.last_stable_offset),
        (6, 4)
    );
    assert_eq!(
        bases,
        vec![0, 3],
        "read_committed stops before producer 8's open batch"
    );
    let aborted = committed.aborted_transactions.expect("listed");
    assert_eq!(aborted.len(), 1);
    assert_eq!(
        (aborted[0].producer_id, aborted[0].first_offset),
        (ProducerId(7), 0)
    );
    let (uncommitted, bases) = fetch_all(&b, "tx", 0).await;
    assert_eq!(uncommitted.last_stable_offset, 4);
    assert_eq!(bases, vec![0, 3, 4, 5]);
    assert!(uncommitted
        .aborted_transactions
        .unwrap_or_default()
        .is_empty());
    assert_eq!(
        (latest(&b, "tx", 1).await, latest(&b, "tx", 0).await),
        (4, 6)
    );

    assert_eq!(markers(&b, &["tx"], 8, 0, true).await, vec![0]); // commit at 6
    let (committed, bases) = fetch_all(&b, "tx", 1).await;
    assert_eq!(committed.last_stable_offset, 7);
    assert_eq!(bases, vec![0, 3, 4, 5, 6]);
    assert_eq!(latest(&b, "tx", 1).await, 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_markers_get_kafkas_errors_and_nothing_is_written() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "tx").await;
    append(&b, "tx", batch(7, 1, true)).await;
    assert_eq!(markers(&b, &["tx"], 7, 5, false).await, vec![0]);
    let fenced = ResponseError::TransactionCoordinatorFenced.code();
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    assert_eq!(
        markers(&b, &["tx", "no-such-topic"], 7, 4, true).await,
        vec![fenced, unknown],
        "a deposed coordinator's marker, and one for a missing topic"
    );
    assert_eq!(
        markers(&b, &["tx"], -1, 5, true).await,
        vec![ResponseError::InvalidProducerEpoch.code()]
    );
    let part = b.replicas.get("tx", 0).expect("hosted");
    assert_eq!(part.log.log_end_offset(), 2, "only the abort was written");
    assert_eq!(latest(&b, "tx", 1).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_producers_lists_each_producer_and_its_open_transaction() {
    use kafka_protocol::messages::describe_producers_request::TopicRequest;
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "tx").await;
    append(&b, "tx", batch(7, 3, true)).await; // 0-2
    append(&b, "tx", batch(9, 2, false)).await; // 3-4: idempotent, sequences 0-1
    append(&b, "tx", batch(8, 1, true)).await; // 5
    assert_eq!(markers(&b, &["tx"], 8, 2, true).await, vec![0]);
    let mut t = TopicRequest::default();
    t.name = TopicName(sb("tx"));
    t.partition_indexes = vec![0, 3];
    let mut r = DescribeProducersRequest::default();
    r.topics = vec![t];
    let resp = match send(
        &b,
        ApiKey::DescribeProducers,
        0,
        RequestKind::DescribeProducers(r),
    )
    .await
    {
        ResponseKind::DescribeProducers(resp) => resp,
        other => panic!("{other:?}"),
    };
    let parts = &resp.topics[0].partitions;
    assert_eq!(
        parts[1].error_code,
        ResponseError::UnknownTopicOrPartition.code()
    );
    let seen: Vec<(i64, i32, i32, i64)> = parts[0]
        .active_producers
        .iter()
        .map(|p| {
            (
                p.producer_id.0,
                p.last_sequence,
                p.coordinator_epoch,
                p.current_txn_start_offset,
            )
        })
        .collect();
    assert_eq!(seen, vec![(7, 2, -1, 0), (8, 0, 2, -1), (9, 1, -1, -1)]);
}

/// A transactional batch no coordinator knows of (no transactional id to ask with, or none in
/// an open transaction) must not open one: nothing would end it and the last stable offset
/// would hang (KIP-890). Produce answers INVALID_TXN_STATE and writes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn produce_refuses_a_transactional_batch_no_coordinator_verifies() {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "tx").await;
    let mut part = PartitionProduceData::default();
    part.index = 0;
    part.records = Some(batch(7, 1, true));
    let mut t = TopicProduceData::default();
    t.name = TopicName(sb("tx"));
    t.partition_data = vec![part];
    let mut r = ProduceRequest::default();
    r.acks = -1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    for transactional_id in [None, Some("never-initialized")] {
        let mut r = r.clone();
        r.transactional_id = transactional_id.map(|t| TransactionalId(sb(t)));
        match send(&b, ApiKey::Produce, 9, RequestKind::Produce(r)).await {
            ResponseKind::Produce(resp) => {
                let p = &resp.responses[0].partition_responses[0];
                assert_eq!(p.error_code, ResponseError::InvalidTxnState.code());
            }
            other => panic!("{other:?}"),
        }
    }
    let part = b.replicas.get("tx", 0).expect("hosted");
    assert_eq!(part.log.log_end_offset(), 0);
    assert_eq!(latest(&b, "tx", 1).await, 0);
}
