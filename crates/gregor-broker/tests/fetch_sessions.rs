//! Fetch sessions (KIP-227) through the broker's own request handler, on a real single-node
//! broker: a full fetch creates a session, incremental fetches in it answer only partitions
//! with news (records appended, a moved high watermark), an unknown session id or a wrong
//! epoch is refused with Kafka's errors, and `max.incremental.fetch.session.cache.slots=0`
//! turns sessions off.

mod common;

use std::sync::Arc;

use gregor_broker::connection::{Handler, Reply, RequestContext};
use gregor_broker::fetch_frame::FetchReply;
use gregor_broker::Broker;
use gregor_log::batch::Codec;
use gregor_log::records::simple_batch;
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use common::{sb, send};

const TOPIC: &str = "sessions";

async fn create_topic(b: &Arc<Broker>, partitions: i32) {
    let mut t = CreatableTopic::default();
    t.name = TopicName(sb(TOPIC));
    t.num_partitions = partitions;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 10_000;
    match send(b, ApiKey::CreateTopics, 5, RequestKind::CreateTopics(r)).await {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
}

/// Appends one record to `partition` and waits until it is committed.
async fn append(b: &Arc<Broker>, partition: i32) {
    append_sized(b, partition, 1).await;
}

/// A fetch in session `(id, epoch)` naming `partitions` at `offset` (no wait).
fn request(id: i32, epoch: i32, partitions: &[(i32, i64)]) -> FetchRequest {
    let mut t = FetchTopic::default();
    t.topic = TopicName(sb(TOPIC));
    t.partitions = partitions
        .iter()
        .map(|&(p, offset)| {
            let mut fp = FetchPartition::default();
            fp.partition = p;
            fp.fetch_offset = offset;
            fp.partition_max_bytes = 1 << 20;
            fp.current_leader_epoch = -1;
            fp.log_start_offset = -1;
            fp.last_fetched_epoch = -1;
            fp
        })
        .collect();
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.max_wait_ms = 0;
    r.min_bytes = 0;
    r.max_bytes = 1 << 20;
    r.session_id = id;
    r.session_epoch = epoch;
    if !t.partitions.is_empty() {
        r.topics = vec![t];
    }
    r
}

async fn fetch(b: &Arc<Broker>, r: FetchRequest) -> FetchReply {
    fetch_over(b, r, None).await
}

/// A fetch on a connection whose minimum round trip is `min_round_trip`.
async fn fetch_over(
    b: &Arc<Broker>,
    r: FetchRequest,
    min_round_trip: Option<std::time::Duration>,
) -> FetchReply {
    let ctx = RequestContext {
        api_key: ApiKey::Fetch,
        api_version: 12,
        correlation_id: 1,
        client_id: "fetch-session-test".into(),
        client_host: "127.0.0.1".into(),
        connection_id: 1,
        min_round_trip,
        listener_name: "PLAINTEXT".into(),
        security_protocol: gregor_broker::security::SecurityProtocol::Plaintext,
        principal: std::sync::Arc::new(gregor_broker::security::KafkaPrincipal::anonymous()),
    };
    match b.clone().handle(ctx, RequestKind::Fetch(r)).await {
        Reply::Fetch(f) => *f,
        other => panic!("expected a fetch reply, got {other:?}"),
    }
}

/// `(partition, high watermark, record bytes)` of each partition answered.
fn answered(f: &FetchReply) -> Vec<(i32, i64, usize)> {
    f.response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .zip(&f.records)
        .map(|(p, s)| (p.partition_index, p.high_watermark, s.len))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn incremental_fetches_answer_only_partitions_with_news() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = common::start(tmp.path(), &[]).await;
    create_topic(&b, 3).await;
    append(&b, 0).await;
    // Full fetch creating a session: every partition.
    let full = fetch(&b, request(0, 0, &[(0, 0), (1, 0), (2, 0)])).await;
    let id = full.response.session_id;
    assert!(id > 0, "{:?}", full.response);
    let got = answered(&full);
    assert_eq!(got.len(), 3, "{got:?}");
    assert!(got[0].2 > 0 && got[1].2 == 0 && got[2].2 == 0, "{got:?}");
    // Epoch 1 moves partition 0 past its record: nothing has news.
    let inc = fetch(&b, request(id, 1, &[(0, 1)])).await;
    assert_eq!(inc.response.error_code, 0);
    assert_eq!(inc.response.session_id, id);
    assert!(answered(&inc).is_empty(), "{:?}", answered(&inc));
    // A record on partition 2: only partition 2 is answered, with it, though the request
    // names no partition.
    append(&b, 2).await;
    let inc = fetch(&b, request(id, 2, &[])).await;
    let got = answered(&inc);
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!((got[0].0, got[0].1), (2, 1));
    assert!(got[0].2 > 0);
    // The same epoch again (a retry): refused; an unknown session: refused.
    let again = fetch(&b, request(id, 2, &[])).await;
    assert_eq!(
        again.response.error_code,
        ResponseError::InvalidFetchSessionEpoch.code()
    );
    assert!(again.response.responses.is_empty() && again.records.is_empty());
    let unknown = fetch(&b, request(id.wrapping_add(1).max(1), 1, &[])).await;
    assert_eq!(
        unknown.response.error_code,
        ResponseError::FetchSessionIdNotFound.code()
    );
    // The session is intact after the refusals: epoch 3 goes through.
    let inc = fetch(&b, request(id, 3, &[])).await;
    assert_eq!(inc.response.error_code, 0);
    // Closing it (epoch -1): a full answer without a session; the id is gone.
    let closed = fetch(&b, request(id, -1, &[(0, 0)])).await;
    assert_eq!(closed.response.session_id, 0);
    assert_eq!(answered(&closed).len(), 1);
    let gone = fetch(&b, request(id, 4, &[])).await;
    assert_eq!(
        gone.response.error_code,
        ResponseError::FetchSessionIdNotFound.code()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_cache_slots_no_sessions() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = common::start(
        tmp.path(),
        &["max.incremental.fetch.session.cache.slots=0".to_string()],
    )
    .await;
    create_topic(&b, 1).await;
    let full = fetch(&b, request(0, 0, &[(0, 0)])).await;
    assert_eq!(full.response.session_id, 0);
    assert_eq!(answered(&full).len(), 1);
}

/// Appends one record with a `size`-byte value to `partition` and waits until it is committed.
async fn append_sized(b: &Arc<Broker>, partition: i32, size: usize) {
    let part = b.replicas.get(TOPIC, partition).expect("hosted");
    let value = vec![b'v'; size];
    let batch = simple_batch(Codec::None, 0, &[(None, Some(&value[..]))]).expect("batch");
    let pending = part.spawn_append(bytes::Bytes::from(batch));
    pending
        .done
        .await
        .expect("append task")
        .expect("appended and committed");
}

/// KIP-74 lets only the first partition with records exceed `max_bytes`, by its first batch.
/// A later partition whose budget left is smaller than its first batch gets no records (Kafka
/// would send that batch torn, which no client can use), and neither do the partitions after
/// it (as Kafka's answer is full after a torn batch): the answer stays within `max_bytes`, and
/// their records come in a later Fetch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_first_partition_may_exceed_max_bytes() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = common::start(tmp.path(), &[]).await;
    create_topic(&b, 3).await;
    for _ in 0..3 {
        append_sized(&b, 0, 1000).await;
        append_sized(&b, 1, 1000).await;
    }
    append_sized(&b, 2, 1).await;
    let all = [(0, 0), (1, 0), (2, 0)];
    let everything = answered(&fetch(&b, request(0, -1, &all)).await);
    let (batch, small) = (everything[0].2 / 3, everything[2].2);
    assert_eq!(
        (everything[0].2, everything[1].2),
        (3 * batch, 3 * batch),
        "{everything:?}"
    );
    assert!(small > 0 && small < batch / 2, "{everything:?}");
    let within = |max_bytes: usize| {
        let mut r = request(0, -1, &all);
        r.max_bytes = i32::try_from(max_bytes).expect("small");
        r
    };
    // Half a batch left for partition 1: nothing from it, nor from partition 2 after it,
    // though partition 2's batch alone would fit.
    let got = answered(&fetch(&b, within(3 * batch + batch / 2)).await);
    assert_eq!((got[0].2, got[1].2, got[2].2), (3 * batch, 0, 0), "{got:?}");
    // A whole batch left: one batch from partition 1, and still nothing from partition 2.
    let got = answered(&fetch(&b, within(4 * batch)).await);
    assert_eq!(
        (got[0].2, got[1].2, got[2].2),
        (3 * batch, batch, 0),
        "{got:?}"
    );
    // One byte: partition 0's first batch whole, nothing after it.
    let got = answered(&fetch(&b, within(1)).await);
    assert_eq!((got[0].2, got[1].2, got[2].2), (batch, 0, 0), "{got:?}");
    // A partition whose own limit is below its first batch gets nothing, but the answer is
    // not full: the partitions after it are still read.
    let mut r = request(0, -1, &all);
    r.topics[0].partitions[1].partition_max_bytes = i32::try_from(batch / 2).expect("small");
    let got = answered(&fetch(&b, r).await);
    assert_eq!(
        (got[0].2, got[1].2, got[2].2),
        (3 * batch, 0, small),
        "{got:?}"
    );
}

/// `fetch.low.latency.max.bytes`: a consumer on a short round trip gets answers of at most that
/// (KIP-74's first batch aside), never fewer than its `min_bytes`; on a long round trip, or
/// where the round trip is unknown, the request's own limit holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_a_short_round_trip_gets_answers_within_the_low_latency_cap() {
    use std::time::Duration;
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = common::start(
        tmp.path(),
        &["fetch.low.latency.max.bytes=250000".to_string()],
    )
    .await;
    create_topic(&b, 3).await;
    for _ in 0..3 {
        for p in 0..3 {
            append_sized(&b, p, 100_000).await;
        }
    }
    let all = [(0, 0), (1, 0), (2, 0)];
    let batches = |f: &FetchReply, batch: usize| {
        answered(f)
            .iter()
            .map(|&(_, _, bytes)| bytes / batch)
            .collect::<Vec<_>>()
    };
    let whole = fetch_over(&b, request(0, -1, &all), None).await;
    assert_eq!(b.metrics.latency_capped_total(), 0);
    let batch = answered(&whole)[0].2 / 3;
    assert!(batch > 100_000 && batch < 101_000, "{:?}", answered(&whole));
    assert_eq!(batches(&whole, batch), [3, 3, 3]);
    // Loopback's round trip: 250,000 bytes, two batches.
    let short = Some(Duration::from_micros(20));
    let got = fetch_over(&b, request(0, -1, &all), short).await;
    assert_eq!(batches(&got, batch), [2, 0, 0]);
    // gregor_fetch_latency_capped counts it.
    assert_eq!(b.metrics.latency_capped_total(), 1);
    // 20 ms at 10 GB/s is 200 MB: the request's 1 MiB holds.
    let long = Some(Duration::from_millis(20));
    let got = fetch_over(&b, request(0, -1, &all), long).await;
    assert_eq!(batches(&got, batch), [3, 3, 3]);
    assert_eq!(b.metrics.latency_capped_total(), 1);
    // min_bytes above the cap: the answer may hold them.
    let mut r = request(0, -1, &all);
    r.min_bytes = 500_000;
    let got = fetch_over(&b, r, short).await;
    assert_eq!(batches(&got, batch), [3, 1, 0]);
}
