//! The marker sender's bookkeeping (pure), and the sender on real brokers: a two-node cluster
//! in this process, each node serving its listeners on real loopback sockets, with markers
//! written locally on node 0 and over node 1's listener.
#![allow(clippy::disallowed_methods)] // the test's own task, not a broker's: no clock to keep

use super::*;

use gregor_log::records::{encode_batch, BatchSpec, Record};
use kafka_protocol::messages::create_topics_request::{CreatableReplicaAssignment, CreatableTopic};
use kafka_protocol::messages::write_txn_markers_response::{
    WritableTxnMarkerPartitionResult, WritableTxnMarkerResult, WritableTxnMarkerTopicResult,
};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, RequestKind, ResponseKind, WriteTxnMarkersResponse,
};

use crate::connection::{Handler, Reply, RequestContext};
use crate::{Broker, BrokerConfig, BrokerOptions};

fn key(t: &str, p: i32) -> Key {
    (t.to_string(), p)
}

// ---- the pure core ----

#[test]
fn a_plan_groups_partitions_by_leader_and_drops_gone_ones() {
    let now = Instant::now();
    let mut p = Pending::new(&[
        key("a", 0),
        key("a", 1),
        key("b", 0),
        key("gone", 0),
        key("leaderless", 0),
        key("a", 0),
    ]);
    let plan = p.plan(
        |t, i| match (t, i) {
            ("a", 0) => Route::Local,
            ("a", 1) | ("b", 0) => Route::Remote(2),
            ("gone", _) => Route::Gone,
            _ => Route::NoLeader,
        },
        now,
    );
    assert_eq!(plan.local, vec![key("a", 0)]);
    assert_eq!(
        plan.remote,
        BTreeMap::from([(2, vec![key("a", 1), key("b", 0)])])
    );
    assert_eq!(plan.leaderless, vec![key("leaderless", 0)]);
    assert_eq!(
        p.remaining(),
        vec![key("a", 0), key("a", 1), key("b", 0), key("leaderless", 0)],
        "the duplicate is one partition; the gone one needs no marker"
    );
    // A partition whose image entry disappears later is done too.
    let plan = p.plan(|_, _| Route::Gone, now);
    assert!(plan.is_empty());
    assert!(p.is_done());
}

#[test]
fn answers_remove_written_partitions_keep_retriable_ones_and_fencing_stops() {
    let now = Instant::now();
    let mut p = Pending::new(&[key("a", 0), key("a", 1), key("a", 2)]);
    assert_eq!(p.record(&key("a", 0), Ok(()), now), Verdict::Written);
    for e in [
        ResponseError::NotLeaderOrFollower,
        ResponseError::UnknownLeaderEpoch,
        ResponseError::NotEnoughReplicas,
        ResponseError::NotEnoughReplicasAfterAppend,
        ResponseError::RequestTimedOut,
        ResponseError::KafkaStorageError,
        ResponseError::UnknownTopicOrPartition,
    ] {
        assert_eq!(
            p.record(&key("a", 1), Err(Failure::Code(e)), now),
            Verdict::Retry,
            "{e:?}"
        );
    }
    assert_eq!(
        p.record(
            &key("a", 1),
            Err(Failure::Connection("refused".into())),
            now
        ),
        Verdict::Retry
    );
    assert!(p.fenced().is_none());
    assert_eq!(p.remaining(), vec![key("a", 1), key("a", 2)]);
    for e in [
        ResponseError::TransactionCoordinatorFenced,
        ResponseError::InvalidProducerEpoch,
    ] {
        assert_eq!(
            p.record(&key("a", 2), Err(Failure::Code(e)), now),
            Verdict::Fenced
        );
    }
    assert_eq!(
        p.fenced(),
        Some(&(key("a", 2), ResponseError::TransactionCoordinatorFenced)),
        "the first fencing answer is kept"
    );
    // A late answer for a partition already written changes nothing.
    p.record(&key("a", 0), Err(Failure::NoLeader), now);
    assert_eq!(p.remaining(), vec![key("a", 1), key("a", 2)]);
}

#[test]
fn the_backoff_doubles_per_idle_round_up_to_a_second_and_restarts_after_progress() {
    let now = Instant::now();
    let mut p = Pending::new(&[key("a", 0), key("a", 1)]);
    let pauses: Vec<u64> = (0..9).map(|_| p.backoff().as_millis() as u64).collect();
    assert_eq!(pauses, vec![10, 20, 40, 80, 160, 320, 640, 1000, 1000]);
    p.record(&key("a", 0), Ok(()), now);
    assert_eq!(p.backoff(), Duration::from_millis(10));
    assert_eq!(p.backoff(), Duration::from_millis(20));
}

#[test]
fn a_partition_failing_for_over_ten_seconds_is_reported_once_per_ten_seconds() {
    let t0 = Instant::now();
    let mut p = Pending::new(&[key("a", 0), key("a", 1)]);
    p.record(&key("a", 0), Err(Failure::NoLeader), t0);
    p.record(
        &key("a", 1),
        Err(Failure::NoLeader),
        t0 + Duration::from_secs(5),
    );
    assert!(p.stuck(t0 + Duration::from_secs(9)).is_empty());
    let stuck = p.stuck(t0 + Duration::from_secs(11));
    assert_eq!(
        stuck,
        vec![Stuck {
            topic: "a".into(),
            partition: 0,
            failing_for: Duration::from_secs(11),
            last_failure: Some(Failure::NoLeader),
        }]
    );
    assert!(
        p.stuck(t0 + Duration::from_secs(16)).is_empty(),
        "rate-limited"
    );
    let stuck = p.stuck(t0 + Duration::from_secs(21));
    assert_eq!(stuck.len(), 2);
    // Failing keeps its start: a later failure does not restart the clock.
    p.record(
        &key("a", 0),
        Err(Failure::Code(ResponseError::RequestTimedOut)),
        t0 + Duration::from_secs(30),
    );
    p.record(&key("a", 1), Ok(()), t0 + Duration::from_secs(30));
    let stuck = p.stuck(t0 + Duration::from_secs(31));
    assert_eq!(stuck.len(), 1);
    assert_eq!(stuck[0].failing_for, Duration::from_secs(31));
}

#[test]
fn a_request_names_each_topic_once_and_answers_map_back_to_partitions() {
    let req = MarkerRequest {
        producer_id: 42,
        producer_epoch: 3,
        coordinator_epoch: 7,
        commit: false,
        partitions: vec![],
    };
    let keys = vec![key("a", 0), key("b", 1), key("a", 2), key("c", 0)];
    let r = write_request(&req, &keys);
    let m = &r.markers[0];
    assert_eq!(
        (
            m.producer_id.0,
            m.producer_epoch,
            m.coordinator_epoch,
            m.transaction_result
        ),
        (42, 3, 7, false)
    );
    let topics: Vec<(&str, Vec<i32>)> = m
        .topics
        .iter()
        .map(|t| (t.name.0.as_str(), t.partition_indexes.clone()))
        .collect();
    assert_eq!(
        topics,
        vec![("a", vec![0, 2]), ("b", vec![1]), ("c", vec![0])]
    );

    let part = |index, code| {
        let mut p = WritableTxnMarkerPartitionResult::default();
        p.partition_index = index;
        p.error_code = code;
        p
    };
    let topic = |name: &str, parts| {
        let mut t = WritableTxnMarkerTopicResult::default();
        t.name = TopicName(StrBytes::from_string(name.to_string()));
        t.partitions = parts;
        t
    };
    let mut result = WritableTxnMarkerResult::default();
    result.topics = vec![
        topic(
            "a",
            vec![
                part(0, 0),
                part(2, ResponseError::NotLeaderOrFollower.code()),
            ],
        ),
        topic("b", vec![part(1, -12345)]),
    ];
    let mut resp = WriteTxnMarkersResponse::default();
    resp.markers = vec![result];
    assert_eq!(
        answers(keys, &resp),
        vec![
            (key("a", 0), Ok(())),
            (
                key("b", 1),
                Err(Failure::Code(ResponseError::Unknown(-12345)))
            ),
            (
                key("a", 2),
                Err(Failure::Code(ResponseError::NotLeaderOrFollower))
            ),
            (key("c", 0), Err(Failure::Unanswered)),
        ]
    );
}

// ---- real brokers ----

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A broker serving its listeners on real sockets until `stop` turns true.
struct Node {
    broker: Arc<Broker>,
    stop: watch::Sender<bool>,
    serving: tokio::task::JoinHandle<()>,
}

async fn start_node(dir: &std::path::Path, id: i32, controller_port: u16) -> Node {
    let mut listeners = format!("PLAINTEXT://127.0.0.1:{}", free_port());
    if id == 0 {
        listeners.push_str(&format!(",CONTROLLER://127.0.0.1:{controller_port}"));
    }
    let opts = BrokerOptions {
        listeners: Some(listeners),
        data_dir: Some(dir.to_path_buf()),
        node_id: Some(id),
        process_roles: Some(
            if id == 0 {
                "broker,controller"
            } else {
                "broker"
            }
            .into(),
        ),
        controller_quorum_voters: Some(format!("0@127.0.0.1:{controller_port}")),
        cluster_id: Some("gregorTxnMarkerCluster".into()),
        ..BrokerOptions::default()
    };
    let config = BrokerConfig::from_options(&opts).expect("valid config");
    let bound = crate::server::bind_listeners(&config).expect("listens");
    let broker = Broker::start(config).await.expect("broker starts");
    let (stop, rx) = watch::channel(false);
    let serving = crate::runtime::spawn(crate::server::serve(broker.clone(), bound, rx));
    Node {
        broker,
        stop,
        serving,
    }
}

/// A combined broker+controller node 0 and a broker-only node 1.
async fn two_nodes(dir: &std::path::Path) -> (Node, Node) {
    let controller = free_port();
    let (d0, d1) = (dir.join("node0"), dir.join("node1"));
    std::fs::create_dir_all(&d0).expect("dir");
    std::fs::create_dir_all(&d1).expect("dir");
    tokio::join!(
        start_node(&d0, 0, controller),
        start_node(&d1, 1, controller)
    )
}

async fn handle(b: &Arc<Broker>, api_key: ApiKey, version: i16, req: RequestKind) -> ResponseKind {
    let ctx = RequestContext {
        api_key,
        api_version: version,
        correlation_id: 1,
        client_id: "txn-markers-test".into(),
        client_host: "127.0.0.1".into(),
        connection_id: 1,
        min_round_trip: None,
        listener_name: "PLAINTEXT".into(),
        security_protocol: crate::security::SecurityProtocol::Plaintext,
        principal: Arc::new(crate::security::KafkaPrincipal::anonymous()),
    };
    match b.clone().handle(ctx, req).await {
        Reply::Respond(r) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

/// Creates `name` with its one partition on `node`, and waits until that node leads it.
async fn create_on(b: &Arc<Broker>, leader: &Arc<Broker>, name: &str, node: i32) {
    let mut a = CreatableReplicaAssignment::default();
    a.partition_index = 0;
    a.broker_ids = vec![kafka_protocol::messages::BrokerId(node)];
    let mut t = CreatableTopic::default();
    t.name = TopicName(StrBytes::from_string(name.to_string()));
    t.num_partitions = -1;
    t.replication_factor = -1;
    t.assignments = vec![a];
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 10_000;
    match handle(b, ApiKey::CreateTopics, 7, RequestKind::CreateTopics(r)).await {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
    let mut roles = leader.replicas.watch_roles();
    tokio::time::timeout(Duration::from_secs(30), async {
        while !leader
            .replicas
            .get(name, 0)
            .is_some_and(|p| p.role().is_leader)
        {
            let _ = roles.changed().await;
        }
    })
    .await
    .expect("the leader opens the partition");
}

/// Appends a transactional batch of `count` records by `pid` to partition 0 of `topic`.
async fn open_transaction(b: &Arc<Broker>, topic: &str, pid: i64, count: usize) {
    let spec = BatchSpec {
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: 0,
        transactional: true,
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
    let batch = bytes::Bytes::from(encode_batch(&spec, &records).expect("encode"));
    let part = b.replicas.get(topic, 0).expect("hosted");
    let done = part.spawn_append(batch).done.await.expect("task");
    done.expect("appended");
}

/// Partition 0 of `topic`: (log end offset, last stable offset).
fn ends(b: &Arc<Broker>, topic: &str) -> (i64, i64) {
    let part = b.replicas.get(topic, 0).expect("hosted");
    let hw = part.high_watermark();
    (part.log.log_end_offset(), part.last_stable_offset(hw))
}

fn sender_on(b: &Arc<Broker>) -> MarkerSender {
    let image_of = b.clone();
    MarkerSender::new(
        b.config.node_id,
        Arc::new(move || image_of.metadata.image()),
        b.replicas.clone(),
        Arc::new(crate::broker_links::BrokerLinks::new(
            b.config.node_id,
            crate::transport::inter_broker(
                crate::transport::SharedTransport::tcp(),
                None,
                None,
                b.config.node_id,
            ),
            crate::broker_links::LinkSettings::default(),
        )),
        Arc::downgrade(b) as Weak<dyn TxnHooks>,
    )
}

/// `fut`, or a failed test if it takes over 30 s (a marker the sender cannot write would
/// otherwise be retried for ever).
async fn within<T>(fut: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(Duration::from_secs(30), fut)
        .await
        .expect("finished within 30 s")
}

fn request(pid: i64, coordinator_epoch: i32, partitions: &[(&str, i32)]) -> MarkerRequest {
    MarkerRequest {
        producer_id: pid,
        producer_epoch: 0,
        coordinator_epoch,
        commit: true,
        partitions: partitions.iter().map(|&(t, p)| key(t, p)).collect(),
    }
}

/// Node 0 writes one transaction's markers to its own partition (through its replica
/// manager) and to node 1's (WriteTxnMarkers over node 1's listener), drops a partition that
/// does not exist, is fenced by node 1 for an older coordinator epoch, and stops retrying a
/// leader that is gone when cancelled.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn markers_reach_local_and_remote_leaders_over_real_sockets() {
    let dir = tempfile::tempdir().expect("temp dir");
    let (n0, n1) = two_nodes(dir.path()).await;
    create_on(&n0.broker, &n0.broker, "here", 0).await;
    create_on(&n0.broker, &n1.broker, "there", 1).await;
    open_transaction(&n0.broker, "here", 7, 2).await;
    open_transaction(&n1.broker, "there", 7, 3).await;
    assert_eq!(
        ends(&n0.broker, "here"),
        (2, 0),
        "the open transaction holds the LSO"
    );
    assert_eq!(ends(&n1.broker, "there"), (3, 0));

    let sender = sender_on(&n0.broker);
    let (_keep, cancel) = watch::channel(false);
    let req = request(7, 3, &[("here", 0), ("there", 0), ("never-created", 0)]);
    assert_eq!(within(sender.send(&req, cancel.clone())).await, Ok(()));
    assert_eq!(ends(&n0.broker, "here"), (3, 3), "committed here");
    assert_eq!(ends(&n1.broker, "there"), (4, 4), "committed on node 1");
    assert_eq!(
        sender.links.open_connections(),
        1,
        "one connection to node 1"
    );

    let stale = request(7, 2, &[("there", 0)]);
    assert_eq!(
        within(sender.send(&stale, cancel.clone())).await,
        Err(MarkerError::Fenced {
            topic: "there".into(),
            partition: 0,
            error: ResponseError::TransactionCoordinatorFenced,
        })
    );
    assert_eq!(ends(&n1.broker, "there"), (4, 4), "nothing written");

    // Node 1 stops: its partition cannot be written, and the sender retries until cancelled.
    n1.stop.send(true).expect("node 1 serving");
    n1.serving.await.expect("node 1 stopped");
    let (cancel_tx, cancel) = watch::channel(false);
    let req = request(8, 3, &[("there", 0)]);
    let mut sending = std::pin::pin!(sender.send(&req, cancel));
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut sending)
            .await
            .is_err(),
        "still retrying"
    );
    cancel_tx.send(true).expect("sender listening");
    assert_eq!(within(sending).await, Err(MarkerError::Cancelled));

    n0.stop.send(true).expect("node 0 serving");
    n0.serving.await.expect("node 0 stopped");
}
