//! Several quorum members in one process over real TCP on loopback, each with its own metadata
//! log directory: election, replication of controller writes, failover, snapshots, and the
//! conversion of a pre-quorum single-node log.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::{
    BrokerEndpoint, BrokerHeartbeat, BrokerRegistrationRequest, Controller, CreatableTopic,
    CreateTopicsRequest, MetadataDelta, Uuid,
};
use gregor_quorum::rpc::{self, ForwardError, ForwardHandler, KafkaReply, Network, TcpConnector};
use gregor_quorum::{ApplyListener, NodeId, Quorum, QuorumConfig, WriteError};
use tokio::net::TcpListener;

const WAIT: Duration = Duration::from_secs(20);

#[derive(Default)]
struct Counter(AtomicUsize);

impl ApplyListener for Counter {
    fn applied(&self, _c: &Controller, _d: &MetadataDelta) {
        self.0.fetch_add(1, Ordering::SeqCst);
    }
}

struct NoForward;
impl ForwardHandler for NoForward {
    fn handle(
        &self,
        _k: i16,
        _v: i16,
        _b: Vec<u8>,
    ) -> std::pin::Pin<
        Box<dyn std::future::Future<Output = Result<KafkaReply, ForwardError>> + Send + '_>,
    > {
        Box::pin(async { Err(ForwardError::Invalid("not in this test".into())) })
    }
}

struct Node {
    quorum: Arc<Quorum>,
    server: tokio::task::JoinHandle<()>,
}

impl Node {
    async fn stop(self) {
        self.server.abort();
        self.quorum.shutdown().await;
    }
}

fn settings(id: NodeId) -> StaticBrokerConfig {
    let mut s = StaticBrokerConfig::new();
    s.set("node.id", &id.to_string()).expect("node.id");
    s
}

async fn start(
    id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    listener: TcpListener,
    root: &Path,
    snapshot_bytes: u64,
) -> Node {
    start_on(id, voters, listener, root, snapshot_bytes, None).await
}

/// [`start`] with the metadata log behind a fault injector.
async fn start_on(
    id: NodeId,
    voters: &BTreeMap<NodeId, String>,
    listener: TcpListener,
    root: &Path,
    snapshot_bytes: u64,
    faults: Option<Arc<gregor_log::FaultInjector>>,
) -> Node {
    let config = QuorumConfig {
        node_id: id,
        voters: voters.clone(),
        dir: root.join(format!("node-{id}")).join("__cluster_metadata-0"),
        faults,
        election_timeout_ms: 300,
        heartbeat_interval_ms: 50,
        snapshot_bytes,
        static_config: settings(id),
        seed: id,
        now_ms: 0,
    };
    let quorum = Arc::new(
        Quorum::start(
            config,
            Network::new(TcpConnector),
            Arc::new(Counter::default()),
        )
        .await
        .expect("quorum starts"),
    );
    let raft = quorum.handle();
    let server = tokio::spawn(async move {
        loop {
            let Ok((stream, _)) = listener.accept().await else {
                return;
            };
            let raft = raft.clone();
            tokio::spawn(rpc::serve_controller_connection(
                stream,
                raft.clone(),
                Arc::new(NoForward),
            ));
        }
    });
    Node { quorum, server }
}

async fn listeners(n: usize) -> (Vec<TcpListener>, BTreeMap<NodeId, String>) {
    let mut ls = Vec::new();
    let mut voters = BTreeMap::new();
    for id in 0..n {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        voters.insert(id as NodeId, l.local_addr().expect("addr").to_string());
        ls.push(l);
    }
    (ls, voters)
}

async fn leader_of(nodes: &[&Node]) -> NodeId {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        for n in nodes {
            if let Some(l) = n.quorum.active_controller() {
                if nodes
                    .iter()
                    .any(|m| m.quorum.node_id() == l && m.quorum.active_controller() == Some(l))
                {
                    return l;
                }
            }
        }
        assert!(tokio::time::Instant::now() < deadline, "no leader elected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Runs a write on whichever node leads, retrying while leadership moves (as brokers do).
async fn on_leader<T>(
    nodes: &[&Node],
    op: impl Fn(&mut Controller) -> gregor_meta::ControllerResult<T>,
) -> Result<(T, u64), WriteError> {
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        let leader = leader_of(nodes).await;
        let q = &nodes
            .iter()
            .find(|n| n.quorum.node_id() == leader)
            .expect("leader is a node")
            .quorum;
        match q.write(WAIT, &op).await {
            // Both retriable, as for a forwarding broker: leadership moved, or the leader could
            // not confirm it in time (a heartbeat round lost on a loaded machine).
            Err(WriteError::NotController { .. } | WriteError::Timeout)
                if tokio::time::Instant::now() < deadline =>
            {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            other => return other,
        }
    }
}

async fn register_all(nodes: &[&Node], ids: &[NodeId]) {
    for &id in ids {
        let req = BrokerRegistrationRequest {
            broker_id: id as i32,
            incarnation_id: Uuid::from_u128(0x1000 + id as u128),
            endpoints: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9000 + id as u16,
                security_protocol: 0,
            }],
            rack: None,
        };
        let (epoch, _) = on_leader(nodes, |c| c.register_broker(&req, 0))
            .await
            .expect("registered");
        let epoch = epoch.expect("accepted");
        let hb = BrokerHeartbeat {
            broker_id: id as i32,
            broker_epoch: epoch,
            want_fence: false,
            want_shut_down: false,
        };
        on_leader(nodes, |c| c.broker_heartbeat(&hb, 0))
            .await
            .expect("heartbeat")
            .0
            .expect("unfenced");
    }
}

async fn create_topic(nodes: &[&Node], name: &str, rf: i16) -> Result<u64, WriteError> {
    let req = CreateTopicsRequest {
        topics: vec![CreatableTopic::new(name).with_layout(3, rf)],
        validate_only: false,
    };
    let (results, applied) = on_leader(nodes, |c| c.create_topics(&req)).await?;
    results[0].result.as_ref().expect("topic created");
    Ok(applied)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_voters_replicate_writes_and_survive_the_leaders_loss() {
    let dir = tempfile::tempdir().expect("tmp");
    let (ls, voters) = listeners(3).await;
    let mut nodes = Vec::new();
    for (id, l) in ls.into_iter().enumerate() {
        nodes.push(Some(
            start(id as NodeId, &voters, l, dir.path(), 1 << 20).await,
        ));
    }
    let all: Vec<&Node> = nodes.iter().flatten().collect();
    let leader = leader_of(&all).await;
    // A write on a follower is refused with the leader's id.
    let follower = all
        .iter()
        .find(|n| n.quorum.node_id() != leader)
        .expect("a follower");
    // The leader knows itself before its first heartbeat tells the follower.
    assert_eq!(follower.quorum.wait_for_leader(WAIT).await, Some(leader));
    let err = follower
        .quorum
        .write(WAIT, |c| gregor_meta::ControllerResult {
            records: c.tick(0),
            response: (),
        })
        .await;
    assert_eq!(
        err,
        Err(WriteError::NotController {
            leader: Some(leader)
        })
    );
    register_all(&all, &[0, 1, 2]).await;
    let applied = create_topic(&all, "orders", 3).await.expect("created");
    for n in &all {
        assert!(
            n.quorum.wait_applied(applied, WAIT).await,
            "node {} applied",
            n.quorum.node_id()
        );
        let t = n
            .quorum
            .image()
            .topic("orders")
            .cloned()
            .expect("topic on every node");
        assert_eq!(t.partitions.len(), 3);
        assert!(t.partitions.values().all(|p| p.replicas.len() == 3));
    }
    // The leader goes away: the other two elect a new one, which accepts writes.
    let old = nodes[leader as usize].take().expect("leader node");
    old.stop().await;
    let rest: Vec<&Node> = nodes.iter().flatten().collect();
    let new_leader = leader_of(&rest).await;
    assert_ne!(new_leader, leader);
    let applied = create_topic(&rest, "payments", 2)
        .await
        .expect("created by the new leader");
    for n in &rest {
        assert!(n.quorum.wait_applied(applied, WAIT).await);
        assert!(
            n.quorum.image().topic("orders").is_some()
                && n.quorum.image().topic("payments").is_some()
        );
    }
    for n in nodes.into_iter().flatten() {
        n.stop().await;
    }
}

/// A voter whose metadata log cannot be synced stops its Raft (a fatal storage error). The
/// leader it last named then stays what it reports, so waiting for a leader change must not
/// return as if one had happened: a broker forwarding a heartbeat retries on every change, and
/// spun without yielding (found by gregor-sim's power-loss runs, where a node whose disk had
/// died kept a simulation step from ever ending).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_voter_whose_metadata_log_failed_reports_no_leader_change() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut ls, voters) = listeners(1).await;
    let faults = gregor_log::FaultInjector::new();
    let node = start_on(
        0,
        &voters,
        ls.remove(0),
        dir.path(),
        1 << 20,
        Some(faults.clone()),
    )
    .await;
    let leader = leader_of(&[&node]).await;
    faults.set_fail_sync(true);
    // A registration always writes a record.
    let req = BrokerRegistrationRequest {
        broker_id: 0,
        incarnation_id: Uuid::from_u128(0x1000),
        endpoints: vec![BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: "127.0.0.1".into(),
            port: 9000,
            security_protocol: 0,
        }],
        rack: None,
    };
    let written = node
        .quorum
        .write(WAIT, |c| c.register_broker(&req, 0))
        .await;
    assert!(
        matches!(written, Err(WriteError::Unavailable(_))),
        "a write the log cannot sync fails: {:?}",
        written.map(|(_, applied)| applied)
    );
    assert_eq!(node.quorum.active_controller(), Some(leader));
    let changed = tokio::time::timeout(
        Duration::from_millis(500),
        node.quorum.wait_leader_change(Some(leader)),
    )
    .await;
    assert!(changed.is_err(), "a stopped Raft reported a leader change");
    node.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_a_snapshot_catches_up_from_it_and_restarts_from_it() {
    let dir = tempfile::tempdir().expect("tmp");
    let (mut ls, voters) = listeners(3).await;
    let l2 = ls.pop().expect("third listener");
    let mut nodes = Vec::new();
    for (id, l) in ls.into_iter().enumerate() {
        // Snapshot after every ~2 KiB of records.
        nodes.push(start(id as NodeId, &voters, l, dir.path(), 2048).await);
    }
    let all: Vec<&Node> = nodes.iter().collect();
    let leader = leader_of(&all).await;
    register_all(&all, &[0, 1]).await;
    let mut applied = 0;
    for i in 0..40 {
        applied = create_topic(&all, &format!("t{i}"), 2)
            .await
            .unwrap_or_else(|e| panic!("t{i} not created: {e:?}"));
    }
    // The snapshot replaced the early entries on the leader.
    let leader_dir = dir
        .path()
        .join(format!("node-{leader}"))
        .join("__cluster_metadata-0");
    let deadline = tokio::time::Instant::now() + WAIT;
    while !leader_dir.join("snapshot").exists() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "no snapshot written"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Node 2 was never up: it can only catch up from the snapshot.
    let late = start(2, &voters, l2, dir.path(), 2048).await;
    assert!(
        late.quorum.wait_applied(applied, WAIT).await,
        "late node caught up"
    );
    assert_eq!(late.quorum.image().topics().len(), 40);
    assert!(
        dir.path()
            .join("node-2/__cluster_metadata-0/snapshot")
            .exists(),
        "installed snapshot stored"
    );
    late.stop().await;
    for n in nodes {
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_single_node_restarts_with_its_image() {
    let dir = tempfile::tempdir().expect("tmp");
    let mut voters = BTreeMap::new();
    voters.insert(1, String::new());
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let n = start(1, &voters, l, dir.path(), 1 << 20).await;
    register_all(&[&n], &[1]).await;
    create_topic(&[&n], "kept", 1).await.expect("created");
    n.stop().await;
    // A stopped quorum closed its metadata log cleanly: the restart skips recovery.
    let marker = dir
        .path()
        .join("node-1/__cluster_metadata-0")
        .join(gregor_log::checkpoint::CLEAN_SHUTDOWN);
    assert!(marker.exists(), "clean-shutdown marker after stop");
    let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
    let n = start(1, &voters, l, dir.path(), 1 << 20).await;
    assert!(!marker.exists(), "marker consumed by the open");
    // Committed entries are applied before start returns.
    assert!(n.quorum.image().topic("kept").is_some());
    create_topic(&[&n], "more", 1)
        .await
        .expect("writes after restart");
    n.stop().await;
    assert!(
        marker.exists(),
        "clean-shutdown marker after the second stop"
    );
}

/// A metadata log as a single-node Gregor wrote it before the quorum existed: plain batches of
/// metadata records, no vote file.
fn write_pre_quorum_log(dir: &Path) {
    use gregor_log::records::{encode_batch, BatchSpec, Record};
    let mut c = Controller::new(settings(1), 7);
    let mut records = Vec::new();
    let mut run = |c: &mut Controller, rs: Vec<gregor_meta::MetadataRecord>| {
        c.replay_all(&rs).expect("replays");
        records.extend(rs);
    };
    let reg = BrokerRegistrationRequest {
        broker_id: 1,
        incarnation_id: Uuid::from_u128(9),
        endpoints: vec![],
        rack: None,
    };
    let r = c.register_broker(&reg, 0);
    let epoch = r.response.clone().expect("registered");
    run(&mut c, r.records);
    let hb = BrokerHeartbeat {
        broker_id: 1,
        broker_epoch: epoch,
        want_fence: false,
        want_shut_down: false,
    };
    let r = c.broker_heartbeat(&hb, 0);
    run(&mut c, r.records);
    let r = c.create_topics(&CreateTopicsRequest {
        topics: vec![CreatableTopic::new("old-topic").with_layout(2, 1)],
        validate_only: false,
    });
    run(&mut c, r.records);
    let log = gregor_log::Log::open(dir, gregor_log::LogConfig::default(), 0).expect("log");
    for chunk in records.chunks(2) {
        let recs: Vec<Record> = chunk
            .iter()
            .enumerate()
            .map(|(i, r)| Record {
                offset: i as i64,
                timestamp: 0,
                key: None,
                value: Some(r.encode().into()),
                headers: Vec::new(),
            })
            .collect();
        let batch = encode_batch(&BatchSpec::default(), &recs).expect("batch");
        log.append_as_leader(&batch, 0, 0).expect("append");
    }
    log.close().expect("close");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pre_quorum_single_node_log_opens_with_its_metadata() {
    let dir = tempfile::tempdir().expect("tmp");
    write_pre_quorum_log(&dir.path().join("node-1/__cluster_metadata-0"));
    // Configured with other voters, it refuses to start rather than lose its metadata.
    let mut others = BTreeMap::new();
    others.insert(1, "127.0.0.1:1".to_string());
    others.insert(2, "127.0.0.1:2".to_string());
    let config = QuorumConfig {
        node_id: 1,
        voters: others,
        dir: dir.path().join("node-1/__cluster_metadata-0"),
        faults: None,
        election_timeout_ms: 300,
        heartbeat_interval_ms: 50,
        snapshot_bytes: 1 << 20,
        static_config: settings(1),
        seed: 1,
        now_ms: 0,
    };
    let refused = Quorum::start(
        config,
        Network::new(TcpConnector),
        Arc::new(Counter::default()),
    )
    .await;
    assert!(matches!(
        refused,
        Err(gregor_quorum::QuorumError::VotersChanged { .. })
    ));
    let mut voters = BTreeMap::new();
    voters.insert(1, String::new());
    for round in 0..2 {
        let l = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let n = start(1, &voters, l, dir.path(), 1 << 20).await;
        let topic = n.quorum.image().topic("old-topic").cloned();
        assert_eq!(topic.map(|t| t.partitions.len()), Some(2), "round {round}");
        assert!(n.quorum.image().broker(1).is_some());
        create_topic(&[&n], &format!("new-{round}"), 1)
            .await
            .expect("writes");
        n.stop().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_only_node_follows_the_log_and_snapshots_without_voting() {
    use gregor_quorum::{FollowerConfig, MetadataFollower};
    let dir = tempfile::tempdir().expect("tmp");
    let (ls, voters) = listeners(3).await;
    let mut nodes = Vec::new();
    for (id, l) in ls.into_iter().enumerate() {
        nodes.push(start(id as NodeId, &voters, l, dir.path(), 2048).await);
    }
    let all: Vec<&Node> = nodes.iter().collect();
    register_all(&all, &[0, 1, 2]).await;
    let follower = |id: NodeId| {
        MetadataFollower::start(
            FollowerConfig {
                node_id: id,
                voters: voters.clone(),
                static_config: settings(id),
                seed: id,
            },
            TcpConnector,
            Arc::new(Counter::default()),
        )
    };
    let early = follower(7);
    let mut applied = 0;
    for i in 0..30 {
        applied = create_topic(&all, &format!("t{i}"), 2)
            .await
            .unwrap_or_else(|e| panic!("t{i} not created: {e:?}"));
    }
    // Started after snapshots replaced the early entries: it catches up from a snapshot.
    let late = follower(8);
    for f in [&early, &late] {
        assert!(f.wait_applied(applied, WAIT).await, "follower caught up");
        assert_eq!(f.image().topics().len(), 30);
        let leader = leader_of(&all).await;
        assert_eq!(f.wait_for_leader(WAIT).await, Some(leader));
    }
    // It follows changes as they commit.
    let more = create_topic(&all, "later", 1).await.expect("created");
    assert!(late.wait_applied(more, WAIT).await);
    assert!(late.image().topic("later").is_some());
    // It never became a voter.
    let leader = leader_of(&all).await;
    let voter_ids: Vec<NodeId> = all[leader as usize]
        .quorum
        .raft()
        .metrics()
        .borrow()
        .membership_config
        .membership()
        .voter_ids()
        .collect();
    assert_eq!(voter_ids, vec![0, 1, 2]);
    for n in nodes {
        n.stop().await;
    }
}
