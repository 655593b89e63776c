//! A parked fetch is answered by the append that gives it its `min_bytes`, not by its
//! `max_wait_ms` timer: on a real single-node broker, a consumer fetch with a 60 s wait parks on
//! an empty partition, and one append answers it with the record, long before the wait.
#![allow(clippy::disallowed_methods)] // the test's own tasks, not a broker's: no clock to keep

mod common;

use std::sync::Arc;
use std::time::Duration;

use gregor_broker::connection::{Handler, Reply, RequestContext};
use gregor_broker::Broker;
use gregor_log::batch::Codec;
use gregor_log::records::simple_batch;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;

use common::{create_topic, sb};

const TOPIC: &str = "wake";
/// Far longer than the test may take: only the append can answer the fetch in time.
const MAX_WAIT_MS: i32 = 60_000;

fn parked_fetch() -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = 0;
    p.partition_max_bytes = 1 << 20;
    p.current_leader_epoch = -1;
    p.log_start_offset = -1;
    p.last_fetched_epoch = -1;
    let mut t = FetchTopic::default();
    t.topic = TopicName(sb(TOPIC));
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.max_wait_ms = MAX_WAIT_MS;
    r.min_bytes = 1;
    r.max_bytes = 1 << 20;
    r.session_id = 0;
    r.session_epoch = -1;
    r.topics = vec![t];
    r
}

async fn fetch(b: Arc<Broker>, r: FetchRequest) -> Reply {
    let ctx = RequestContext {
        api_key: ApiKey::Fetch,
        api_version: 12,
        correlation_id: 1,
        client_id: "fetch-wake-test".into(),
        client_host: "127.0.0.1".into(),
        connection_id: 1,
        min_round_trip: None,
        listener_name: "PLAINTEXT".into(),
        security_protocol: gregor_broker::security::SecurityProtocol::Plaintext,
        principal: std::sync::Arc::new(gregor_broker::security::KafkaPrincipal::anonymous()),
    };
    b.handle(ctx, RequestKind::Fetch(r)).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_fetch_is_answered_by_the_append_not_the_timer() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = common::start(tmp.path(), &[]).await;
    create_topic(&b, TOPIC).await;
    let parked = tokio::spawn(fetch(b.clone(), parked_fetch()));
    // Wait (without sleeping) until the fetch is in the purgatory.
    tokio::time::timeout(Duration::from_secs(10), async {
        while b.metrics.parked_now("fetch") < 1 {
            tokio::task::yield_now().await;
        }
    })
    .await
    .expect("the empty fetch parks");
    assert!(!parked.is_finished());
    let part = b.replicas.get(TOPIC, 0).expect("hosted");
    let batch = simple_batch(Codec::None, 0, &[(None, Some(&b"wake up"[..]))]).expect("batch");
    part.spawn_append(bytes::Bytes::from(batch))
        .done
        .await
        .expect("append task")
        .expect("committed");
    let reply = tokio::time::timeout(Duration::from_secs(10), parked)
        .await
        .expect("the append answers the parked fetch, not its 60 s wait")
        .expect("fetch task");
    let Reply::Fetch(f) = reply else {
        panic!("expected a fetch reply");
    };
    let p = &f.response.responses[0].partitions[0];
    assert_eq!((p.error_code, p.high_watermark), (0, 1), "{p:?}");
    assert!(
        f.records[0].len > 0,
        "the answer carries the appended batch"
    );
    assert_eq!(b.metrics.parked_now("fetch"), 0);
}

/// A fetch racing an append is never left parked past it: whether the append lands before the
/// fetch's first read or while it waits, the fetch answers with the record long before its 60 s
/// wait. (The narrowest window, between the first read and the subscription to the high
/// watermark, has no await in it and is closed by reading again after subscribing; this test
/// rarely lands there.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_racing_an_append_is_answered_by_it() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = common::start(tmp.path(), &[]).await;
    create_topic(&b, TOPIC).await;
    let part = b.replicas.get(TOPIC, 0).expect("hosted");
    for offset in 0..200 {
        let mut r = parked_fetch();
        r.topics[0].partitions[0].fetch_offset = offset;
        let racing = tokio::spawn(fetch(b.clone(), r));
        let batch = simple_batch(Codec::None, 0, &[(None, Some(&b"race"[..]))]).expect("batch");
        part.spawn_append(bytes::Bytes::from(batch))
            .done
            .await
            .expect("append task")
            .expect("committed");
        let reply = tokio::time::timeout(Duration::from_secs(10), racing)
            .await
            .unwrap_or_else(|_| panic!("the fetch at offset {offset} missed the append"))
            .expect("fetch task");
        let Reply::Fetch(f) = reply else {
            panic!("expected a fetch reply");
        };
        let p = &f.response.responses[0].partitions[0];
        assert_eq!((p.error_code, p.high_watermark), (0, offset + 1), "{p:?}");
        assert!(
            f.records[0].len > 0,
            "offset {offset}: the answer carries the batch"
        );
    }
}
