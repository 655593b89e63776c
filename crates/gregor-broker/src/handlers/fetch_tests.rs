//! The fetch handler on a real single-node broker, with the metadata changing between the
//! lookup of a fetch's partitions and their read.

use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use uuid::Uuid;

use super::{answer, fetch, plan, Park};
use crate::connection::{Handler, Reply, RequestContext};
use crate::{Broker, BrokerConfig, BrokerOptions};
use tokio::time::Instant;

pub(crate) async fn start(dir: &std::path::Path) -> Arc<Broker> {
    let opts = BrokerOptions {
        data_dir: Some(dir.to_path_buf()),
        ..BrokerOptions::default()
    };
    let config = BrokerConfig::from_options(&opts).expect("valid config");
    Broker::start(config).await.expect("broker starts")
}

pub(crate) async fn send(
    b: &Arc<Broker>,
    api_key: ApiKey,
    version: i16,
    req: RequestKind,
) -> ResponseKind {
    let ctx = RequestContext {
        api_key,
        api_version: version,
        correlation_id: 1,
        client_id: "fetch-handler-test".into(),
        client_host: "127.0.0.1".into(),
        connection_id: 1,
        min_round_trip: None,
        listener_name: "PLAINTEXT".into(),
        security_protocol: crate::security::SecurityProtocol::Plaintext,
        principal: std::sync::Arc::new(crate::security::KafkaPrincipal::anonymous()),
    };
    match b.clone().handle(ctx, req).await {
        Reply::Respond(r) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

pub(crate) fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// Creates `name` (one partition) and returns its id.
pub(crate) async fn create_topic(b: &Arc<Broker>, name: &str) -> Uuid {
    let mut t = CreatableTopic::default();
    t.name = TopicName(sb(name));
    t.num_partitions = 1;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 10_000;
    match send(b, ApiKey::CreateTopics, 7, RequestKind::CreateTopics(r)).await {
        ResponseKind::CreateTopics(r) => {
            assert_eq!(r.topics[0].error_code, 0, "{r:?}");
            r.topics[0].topic_id
        }
        other => panic!("{other:?}"),
    }
}

/// Deletes `name` and waits until this node no longer hosts its partition.
pub(crate) async fn delete_topic(b: &Arc<Broker>, name: &str) {
    let mut t = DeleteTopicState::default();
    t.name = Some(TopicName(sb(name)));
    let mut r = DeleteTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 10_000;
    match send(b, ApiKey::DeleteTopics, 6, RequestKind::DeleteTopics(r)).await {
        ResponseKind::DeleteTopics(r) => assert_eq!(r.responses[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
    for _ in 0..500 {
        if b.replicas.get(name, 0).is_none() {
            return;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!("{name} still hosted after its deletion");
}

/// A consumer fetch of partition 0 of `topic` (by name, or by id from v13).
pub(crate) fn fetch_request(
    topic: &str,
    topic_id: Uuid,
    version: i16,
    max_wait_ms: i32,
) -> FetchRequest {
    let mut p = FetchPartition::default();
    p.partition = 0;
    p.fetch_offset = 0;
    p.partition_max_bytes = 1 << 20;
    p.current_leader_epoch = -1;
    let mut t = FetchTopic::default();
    if version >= 13 {
        t.topic_id = topic_id;
    } else {
        t.topic = TopicName(sb(topic));
    }
    t.partitions = vec![p];
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(-1);
    r.replica_state.replica_id = BrokerId(-1);
    r.max_wait_ms = max_wait_ms;
    r.min_bytes = 1;
    r.max_bytes = 1 << 20;
    r.topics = vec![t];
    r
}

/// A fetch whose partitions were located before their topic was deleted, and read after the
/// replica stopped (the window between the lookup and the read on the blocking pool, which a
/// loaded machine widens), answers what the metadata says now: the topic is unknown. It was
/// answered NOT_LEADER_OR_FOLLOWER, read from the stopped replica, and a client then retries
/// a topic that no longer exists as if its leader had moved.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fetch_located_before_its_topic_is_deleted_answers_unknown_topic() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    for (version, topic, expected) in [
        (12, "gone-by-name", ResponseError::UnknownTopicOrPartition),
        (13, "gone-by-id", ResponseError::UnknownTopicId),
    ] {
        let id = create_topic(&b, topic).await;
        // max_wait 0: the answer is the first read, which must not be the stopped replica's.
        let r = fetch_request(topic, id, version, 0);
        let planned = plan(b.data_plane(), &r, version, None);
        assert!(
            planned.targets[0].part.is_ok(),
            "{topic} is hosted when located"
        );
        delete_topic(&b, topic).await;
        let deadline = Instant::now();
        let (reply, _, _) = answer(
            b.data_plane(),
            &r,
            version,
            planned,
            None,
            Park::Watches,
            deadline,
        )
        .await;
        let p = &reply.response.responses[0].partitions[0];
        assert_eq!(
            p.error_code,
            expected.code(),
            "Fetch v{version} of {topic}: {p:?}"
        );
        assert!(reply.records.iter().all(|s| s.is_empty()));
    }
}

#[test]
fn an_answer_keeps_to_the_request_the_broker_and_the_latency_cap_but_holds_min_bytes() {
    use super::answer_limit;
    const MIB: usize = 1 << 20;
    // The request's max_bytes and the broker's fetch.max.bytes: the smaller.
    assert_eq!(answer_limit(50 * MIB, 1, 30 * MIB, None), 30 * MIB);
    assert_eq!(answer_limit(MIB, 1, 30 * MIB, None), MIB);
    // A latency cap below both wins.
    assert_eq!(answer_limit(50 * MIB, 1, 30 * MIB, Some(2 * MIB)), 2 * MIB);
    // ...but never below the request's min_bytes, which the fetch waits for.
    assert_eq!(
        answer_limit(50 * MIB, 5 * MIB, 30 * MIB, Some(2 * MIB)),
        5 * MIB
    );
    // ...nor above what the request and the broker allow.
    assert_eq!(
        answer_limit(4 * MIB, 5 * MIB, 30 * MIB, Some(2 * MIB)),
        4 * MIB
    );
    assert_eq!(
        answer_limit(50 * MIB, 40 * MIB, 30 * MIB, Some(2 * MIB)),
        30 * MIB
    );
}

/// Produces one record to partition 0 of `topic`.
async fn produce_one(b: &Arc<Broker>, topic: &str) {
    use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
    let record = gregor_log::records::Record {
        offset: 0,
        timestamp: 1,
        key: None,
        value: Some(bytes::Bytes::from_static(b"hello")),
        headers: Vec::new(),
    };
    let batch = gregor_log::records::encode_batch(&Default::default(), &[record]).expect("batch");
    let mut part = PartitionProduceData::default();
    part.index = 0;
    part.records = Some(bytes::Bytes::from(batch));
    let mut t = TopicProduceData::default();
    t.name = TopicName(sb(topic));
    t.partition_data = vec![part];
    let mut r = ProduceRequest::default();
    r.acks = 1;
    r.timeout_ms = 10_000;
    r.topic_data = vec![t];
    match send(b, ApiKey::Produce, 8, RequestKind::Produce(r)).await {
        ResponseKind::Produce(resp) => {
            let p = &resp.responses[0].partition_responses[0];
            assert_eq!(p.error_code, 0, "produce to {topic}: {p:?}");
        }
        other => panic!("expected a Produce response, got {other:?}"),
    }
}

/// Kafka answers the partitions a consumer may not read as TOPIC_AUTHORIZATION_FAILED beside
/// the read of the others, which still waits for `min_bytes` (or `max_wait_ms`); only a fetch
/// of nothing but refused partitions answers at once. Gregor answered every such mixed fetch at
/// once, with the readable partitions empty: a consumer of one readable and one refused topic
/// then polled in a busy loop.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_partitions_answer_beside_a_fetch_that_still_waits() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "readable").await;
    create_topic(&b, "secret").await;
    let may_read = |t: &str| t == "readable";
    let mut r = fetch_request("readable", Uuid::nil(), 12, 60_000);
    let mut secret = r.topics[0].clone();
    secret.topic = TopicName(sb("secret"));
    r.topics.push(secret.clone());

    // Mixed: parked (nothing to read yet) until a record arrives.
    let fetching = fetch(b.data_plane(), r, 12, None, Some(&may_read));
    tokio::pin!(fetching);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut fetching).await;
    assert!(
        early.is_err(),
        "answered without waiting: {:?}",
        early.map(|r| r.response)
    );
    produce_one(&b, "readable").await;
    let reply = tokio::time::timeout(Duration::from_secs(20), fetching)
        .await
        .expect("the append ends the wait");
    let codes: Vec<(String, i16)> = reply
        .response
        .responses
        .iter()
        .map(|t| (t.topic.0.to_string(), t.partitions[0].error_code))
        .collect();
    let refused = ResponseError::TopicAuthorizationFailed.code();
    assert_eq!(
        codes,
        vec![("readable".to_string(), 0), ("secret".to_string(), refused)]
    );
    assert!(reply.records.iter().any(|s| !s.is_empty()), "the record");

    // Only refused partitions: nothing to wait for, answered at once (well within max_wait).
    let mut only = fetch_request("secret", Uuid::nil(), 12, 60_000);
    only.topics = vec![secret];
    let reply = tokio::time::timeout(
        Duration::from_secs(20),
        fetch(b.data_plane(), only, 12, None, Some(&may_read)),
    )
    .await
    .expect("answered at once");
    assert_eq!(
        reply.response.responses[0].partitions[0].error_code,
        refused
    );
}

/// A consumer's fetch in session `id` at `epoch`, naming partition 0 of each of `named` at
/// its fetch offset, waiting up to `max_wait_ms`.
fn session_fetch(id: i32, epoch: i32, named: &[(&str, i64)], max_wait_ms: i32) -> FetchRequest {
    let mut r = fetch_request("", Uuid::nil(), 12, max_wait_ms);
    r.session_id = id;
    r.session_epoch = epoch;
    r.topics = named
        .iter()
        .map(|(topic, offset)| {
            let mut t = fetch_request(topic, Uuid::nil(), 12, 0).topics.remove(0);
            t.partitions[0].fetch_offset = *offset;
            t
        })
        .collect();
    r
}

/// One answered partition: topic, error code, high watermark, log start offset, record bytes.
type Answered = (String, i16, i64, i64, usize);

/// Runs a fetch: how many partition reads it made, what it answered, and its session id.
async fn round(b: &Arc<Broker>, r: FetchRequest) -> (u64, Vec<Answered>, i32) {
    let before = b.data_plane().metrics.partitions_read_total();
    let reply = fetch(b.data_plane(), r, 12, None, None).await;
    let reads = b.data_plane().metrics.partitions_read_total() - before;
    (reads, answered(&reply), reply.response.session_id)
}

fn answered(reply: &crate::fetch_frame::FetchReply) -> Vec<Answered> {
    let mut slices = reply.records.iter();
    let mut out = Vec::new();
    for t in &reply.response.responses {
        for p in &t.partitions {
            let bytes = slices.next().map_or(0, |s| s.len);
            let (hw, start) = (p.high_watermark, p.log_start_offset);
            out.push((t.topic.0.to_string(), p.error_code, hw, start, bytes));
        }
    }
    out
}

/// Deletes the records of partition 0 of `topic` before `offset`.
async fn delete_records(b: &Arc<Broker>, topic: &str, offset: i64) {
    use kafka_protocol::messages::delete_records_request::{
        DeleteRecordsPartition, DeleteRecordsTopic,
    };
    let mut p = DeleteRecordsPartition::default();
    p.partition_index = 0;
    p.offset = offset;
    let mut t = DeleteRecordsTopic::default();
    t.name = TopicName(sb(topic));
    t.partitions = vec![p];
    let mut r = DeleteRecordsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 10_000;
    match send(b, ApiKey::DeleteRecords, 2, RequestKind::DeleteRecords(r)).await {
        ResponseKind::DeleteRecords(r) => {
            let p = &r.topics[0].partitions[0];
            assert_eq!((p.error_code, p.low_watermark), (0, offset), "{p:?}");
        }
        other => panic!("{other:?}"),
    }
}

/// Issue 41: an incremental fetch read every partition of its session each round, so idle
/// followers of 10,000 partitions kept two cores busy. A round now reads only the partitions
/// it names and those that changed (or have something left to give), and each kind of change
/// is still answered: an append, a moved high watermark, a moved log start offset, a
/// leadership change, a deletion.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_session_round_reads_nothing_and_every_change_is_still_answered() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    for t in ["s0", "s1", "s2"] {
        create_topic(&b, t).await;
    }
    let all = [("s0", 0), ("s1", 0), ("s2", 0)];
    let (reads, _, id) = round(&b, session_fetch(0, 0, &all, 0)).await;
    assert_eq!(reads, 3);
    assert!(id > 0, "a session was created");
    // Registered with its partitions only after that read, the session reads them once more.
    let (reads, answered, _) = round(&b, session_fetch(id, 1, &[], 0)).await;
    assert_eq!((reads, answered.len()), (3, 0));
    let (reads, answered, _) = round(&b, session_fetch(id, 2, &[], 0)).await;
    assert_eq!(
        (reads, answered.len()),
        (0, 0),
        "an idle round reads nothing"
    );

    // An append (and the high watermark it moves) to s1.
    produce_one(&b, "s1").await;
    let (reads, answered, _) = round(&b, session_fetch(id, 3, &[], 0)).await;
    assert_eq!(reads, 1);
    assert_eq!(answered.len(), 1, "{answered:?}");
    let (topic, error, hw, _, bytes) = &answered[0];
    assert_eq!((topic.as_str(), *error, *hw), ("s1", 0, 1));
    assert!(*bytes > 0, "the record");
    // The consumer names its new offset: read, nothing new to answer; then idle again.
    let (reads, answered, _) = round(&b, session_fetch(id, 4, &[("s1", 1)], 0)).await;
    assert_eq!((reads, answered.len()), (1, 0), "{answered:?}");
    let (reads, _, _) = round(&b, session_fetch(id, 5, &[], 0)).await;
    assert_eq!(reads, 0);

    // DeleteRecords moves s1's log start offset.
    delete_records(&b, "s1", 1).await;
    let (reads, answered, _) = round(&b, session_fetch(id, 6, &[], 0)).await;
    assert_eq!(reads, 1);
    assert_eq!(answered, vec![("s1".to_string(), 0, 1, 1, 0)]);

    // A parked round wakes when a partition it did not read changes, and answers it itself
    // (answering empty would cost the fetcher another round trip for the record).
    let fetching = round(&b, session_fetch(id, 7, &[], 60_000));
    tokio::pin!(fetching);
    let early = tokio::time::timeout(Duration::from_millis(300), &mut fetching).await;
    assert!(early.is_err(), "answered an idle round without waiting");
    produce_one(&b, "s2").await;
    let (reads, answered, _) = tokio::time::timeout(Duration::from_secs(20), fetching)
        .await
        .expect("the append ends the wait");
    assert_eq!(reads, 1, "only s2 is read after the wake-up");
    assert_eq!(answered.len(), 1, "{answered:?}");
    assert_eq!((answered[0].0.as_str(), answered[0].2), ("s2", 1));
    assert!(answered[0].4 > 0, "the record");
    let (reads, _, _) = round(&b, session_fetch(id, 8, &[("s2", 1)], 0)).await;
    assert_eq!(reads, 1);
    let (reads, answered, _) = round(&b, session_fetch(id, 9, &[], 0)).await;
    assert_eq!((reads, answered.len()), (0, 0), "idle again");

    // s2's leadership moves to another broker.
    let part = b.replicas.get("s2", 0).expect("hosted");
    let epoch = part.role().leader_epoch + 1;
    let node = b.data_plane().node_id;
    part.apply_state(
        node + 1,
        crate::isr::PartitionState {
            leader_epoch: epoch,
            partition_epoch: epoch,
            replicas: vec![node, node + 1],
            isr: vec![node, node + 1],
        },
    );
    let (reads, answered, _) = round(&b, session_fetch(id, 10, &[], 0)).await;
    assert_eq!(reads, 1);
    let not_leader = ResponseError::NotLeaderOrFollower.code();
    assert_eq!((answered[0].0.as_str(), answered[0].1), ("s2", not_leader));

    // s0 is deleted (s2's error is read and answered each round, as before).
    delete_topic(&b, "s0").await;
    let (reads, answered, _) = round(&b, session_fetch(id, 11, &[], 0)).await;
    assert_eq!(reads, 2);
    let unknown = ResponseError::UnknownTopicOrPartition.code();
    let errors: Vec<(&str, i16)> = answered.iter().map(|a| (a.0.as_str(), a.1)).collect();
    assert_eq!(errors, vec![("s0", unknown), ("s2", not_leader)]);
}
