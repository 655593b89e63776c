//! The consumer's fetching against real Gregor brokers over real sockets: fetches in flight per
//! broker, prefetching while the application consumes, the buffer's memory bound, and records
//! fetched before a seek or a pause never returned. One test runs a two-node cluster (a
//! combined broker+controller and a broker-only node) and parks one node with SIGSTOP.
//!
//! Build the broker first when running alone: `cargo build -p gregor-cli`.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gregor_client::admin::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::{AutoOffsetReset, FetchMetrics};
use gregor_client::producer::ProducerConfig;
use gregor_client::{
    Admin, Client, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, Producer,
    ProducerRecord, TopicPartition,
};

mod common;
use common::gregor_binary;
#[path = "common/delay.rs"]
mod delay;
use delay::delayed_dialer;

fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port()
}

/// A broker process; killed when dropped (SIGKILL also ends a stopped process).
struct Node {
    child: Child,
    port: u16,
}

impl Node {
    fn spawn(args: &[String], data: &Path) -> Node {
        let port = args
            .iter()
            .find_map(|a| a.strip_prefix("PLAINTEXT://127.0.0.1:"))
            .and_then(|rest| rest.split(',').next())
            .and_then(|p| p.parse().ok())
            .expect("a PLAINTEXT listener");
        let child = Command::new(gregor_binary())
            .arg("broker")
            .args(args)
            .arg("--data-dir")
            .arg(data)
            .args(["--override", "group.initial.rebalance.delay.ms=0"])
            .args(["--override", "group.min.session.timeout.ms=1000"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gregor broker starts");
        Node { child, port }
    }

    fn signal(&self, sig: &str) {
        let ok = Command::new("kill")
            .arg(format!("-{sig}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill runs")
            .success();
        assert!(ok, "kill -{sig}");
    }
}

impl Drop for Node {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// One node, or a combined node 0 and a broker-only node 1 (the controller quorum is node 0).
struct Cluster {
    nodes: Vec<Node>,
    _data: tempfile::TempDir,
}

impl Cluster {
    fn single() -> Cluster {
        let data = tempfile::tempdir().expect("scratch dir");
        let args = vec![
            "--listeners".to_string(),
            format!("PLAINTEXT://127.0.0.1:{}", free_port()),
        ];
        let node = Node::spawn(&args, data.path());
        Cluster {
            nodes: vec![node],
            _data: data,
        }
    }

    async fn two_nodes() -> Cluster {
        let data = tempfile::tempdir().expect("scratch dir");
        let controller = free_port();
        let voters = format!("0@127.0.0.1:{controller}");
        let mut nodes = Vec::new();
        for id in 0..2 {
            let mut listeners = format!("PLAINTEXT://127.0.0.1:{}", free_port());
            if id == 0 {
                listeners.push_str(&format!(",CONTROLLER://127.0.0.1:{controller}"));
            }
            let roles = if id == 0 {
                "broker,controller"
            } else {
                "broker"
            };
            let args: Vec<String> = [
                "--node-id",
                &id.to_string(),
                "--process-roles",
                roles,
                "--listeners",
                &listeners,
                "--controller-quorum-voters",
                &voters,
                "--cluster-id",
                "gregorFetchTestCluster",
            ]
            .iter()
            .map(|s| s.to_string())
            .collect();
            let dir = data.path().join(format!("node{id}"));
            std::fs::create_dir_all(&dir).expect("node dir");
            nodes.push(Node::spawn(&args, &dir));
        }
        let cluster = Cluster { nodes, _data: data };
        let admin = cluster.admin().await;
        let deadline = Instant::now() + Duration::from_secs(40);
        loop {
            if let Ok(d) = admin.describe_cluster().await {
                if d.brokers.len() == 2 {
                    break;
                }
            }
            assert!(Instant::now() < deadline, "both brokers registered");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        cluster
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.nodes[0].port)
    }

    /// A fetch parked at a stopped broker would wait this long for its answer.
    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new(&self.bootstrap()).unwrap();
        c.connect_timeout = Duration::from_secs(20);
        c.api_timeout = Duration::from_secs(30);
        c.request_timeout = Duration::from_secs(30);
        c
    }

    async fn admin(&self) -> Admin {
        Admin::connect(self.client_config()).await.unwrap()
    }

    async fn create_topic(&self, name: &str, partitions: i32, assignment: Option<Vec<Vec<i32>>>) {
        let created = self
            .admin()
            .await
            .create_topics(
                vec![NewTopic {
                    name: name.into(),
                    num_partitions: assignment.is_none().then_some(partitions),
                    replication_factor: assignment.is_none().then_some(1),
                    replica_assignment: assignment,
                    ..Default::default()
                }],
                CreateTopicsOptions::default(),
            )
            .await
            .unwrap();
        assert!(created[0].1.is_ok(), "{created:?}");
    }

    /// Small batches (about four 200-byte records each), so fetches return several.
    async fn producer(&self) -> Producer {
        let mut c = ProducerConfig::new(&self.bootstrap()).unwrap();
        c.client = self.client_config();
        c.batch_size = 1024;
        c.linger = Duration::from_millis(1);
        c.delivery_timeout = Duration::from_secs(40);
        Producer::connect(c).await.unwrap()
    }

    fn consumer_config(&self, group: &str) -> ConsumerConfig {
        let mut c = ConsumerConfig::new(&self.bootstrap(), group).unwrap();
        c.client = self.client_config();
        c.session_timeout = Duration::from_secs(10);
        c.heartbeat_interval = Duration::from_millis(200);
        c.max_poll_interval = Duration::from_secs(30);
        c.partition_assignment_strategy = vec!["range".to_string()];
        c.auto_offset_reset = AutoOffsetReset::Earliest;
        c.enable_auto_commit = false;
        c.fetch_max_wait = Duration::from_millis(100);
        c
    }
}

async fn produce(producer: &Producer, topic: &str, partition: i32, n: usize) {
    let mut acks = Vec::new();
    for i in 0..n {
        let value = format!("{i:0>200}");
        acks.push(
            producer
                .send(ProducerRecord::new(topic).partition(partition).value(value))
                .await
                .unwrap(),
        );
    }
    for a in acks {
        a.await.unwrap();
    }
}

/// Checks that every partition's records come in offset order without gaps or repeats from
/// `next` (which it moves on).
fn check_in_sequence(next: &mut BTreeMap<i32, i64>, records: &[ConsumerRecord]) {
    for r in records {
        let want = next.entry(r.partition).or_insert(0);
        assert_eq!(
            r.offset, *want,
            "partition {}: got offset {}, expected {}",
            r.partition, r.offset, *want
        );
        *want += 1;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parked_leader_does_not_hold_back_records_from_another() {
    let cluster = Cluster::two_nodes().await;
    cluster
        .create_topic("split", 2, Some(vec![vec![0], vec![1]]))
        .await;
    // A group whose coordinator is node 0, so parking node 1 leaves the group alone.
    let client = Client::connect(cluster.client_config()).await.unwrap();
    let mut group = None;
    for i in 0..50 {
        let g = format!("split-g{i}");
        if client.find_coordinator(&g).await.unwrap().id == 0 {
            group = Some(g);
            break;
        }
    }
    let group = group.expect("a group coordinated by node 0");
    let producer = cluster.producer().await;
    produce(&producer, "split", 0, 10).await;
    produce(&producer, "split", 1, 10).await;

    let mut c = Consumer::new(cluster.consumer_config(&group))
        .await
        .unwrap();
    c.subscribe(&["split"]).await.unwrap();
    let mut next = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while next.values().sum::<i64>() < 20 {
        assert!(Instant::now() < deadline, "first records: {next:?}");
        let got = c.poll(Duration::from_millis(200)).await.unwrap();
        check_in_sequence(&mut next, &got);
    }

    // Node 1 stops answering: its fetch stays in flight (up to request.timeout.ms, 30 s).
    cluster.nodes[1].signal("STOP");
    // Let the consumer send node 1 a fetch that will not be answered.
    let started = Instant::now();
    let _ = c.poll(Duration::from_millis(300)).await.unwrap();
    assert!(c.fetch_metrics().fetches_in_flight >= 1);
    produce(&producer, "split", 0, 10).await;
    while next[&0] < 20 {
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "records of node 0's partition held back by the parked node 1: {next:?}"
        );
        let got = c.poll(Duration::from_millis(200)).await.unwrap();
        assert!(got.iter().all(|r| r.partition == 0));
        check_in_sequence(&mut next, &got);
    }
    // Far below the 30 s the parked fetch waits for its answer.
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(10),
        "node 0's records took {took:?} behind the parked node 1"
    );
    cluster.nodes[1].signal("CONT");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefetched_records_are_dropped_on_seek_and_pause_and_memory_stays_bounded() {
    let cluster = Cluster::single();
    cluster.create_topic("prefetch", 2, None).await;
    let producer = cluster.producer().await;
    produce(&producer, "prefetch", 0, 400).await;
    produce(&producer, "prefetch", 1, 400).await;
    let (p0, p1) = (
        TopicPartition::new("prefetch", 0),
        TopicPartition::new("prefetch", 1),
    );

    let mut config = cluster.consumer_config("prefetch-g");
    config.max_poll_records = 7;
    config.max_partition_fetch_bytes = 4096;
    config.fetch_max_bytes = 32_768;
    // fetch.max.bytes plus one batch the broker may add beyond it.
    let bound = 32_768 + 2048;
    let mut c = Consumer::new(config).await.unwrap();
    c.subscribe(&["prefetch"]).await.unwrap();
    let mut next = BTreeMap::new();
    let mut prefetching_seen = 0;
    let mut max_buffered = 0;
    let mut observe = |c: &mut Consumer| {
        let m = c.fetch_metrics();
        max_buffered = max_buffered.max(m.buffered_bytes);
        assert!(
            m.buffered_bytes <= bound,
            "{} bytes buffered",
            m.buffered_bytes
        );
        // Records are buffered and the next fetch is already out while the caller works.
        if m.buffered_bytes > 0 && m.fetches_in_flight == 1 {
            prefetching_seen += 1;
        }
    };

    // Seek partition 0 back and forth, each time right after a poll returned some of its
    // records, while its next records are buffered or in flight.
    for k in 0..20 {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            assert!(Instant::now() < deadline, "{next:?}");
            let got = c.poll(Duration::from_millis(200)).await.unwrap();
            observe(&mut c);
            check_in_sequence(&mut next, &got);
            if got.iter().any(|r| r.partition == 0) {
                break;
            }
        }
        let to = 60 + 10 * k;
        c.seek(&p0, to).unwrap();
        next.insert(0, to);
    }

    // Pause partition 1 with records of it buffered or in flight: none come until resumed.
    c.pause(std::slice::from_ref(&p1)).unwrap();
    let paused_at = c.position(&p1).await.unwrap();
    assert_eq!(paused_at, next.get(&1).copied().unwrap_or(0));
    let deadline = Instant::now() + Duration::from_secs(20);
    while next[&0] < 400 {
        assert!(Instant::now() < deadline, "{next:?}");
        let got = c.poll(Duration::from_millis(200)).await.unwrap();
        observe(&mut c);
        assert!(got.iter().all(|r| r.partition == 0), "paused partition 1");
        check_in_sequence(&mut next, &got);
    }
    assert_eq!(c.position(&p1).await.unwrap(), paused_at);
    c.resume(std::slice::from_ref(&p1)).unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while next.get(&1).copied().unwrap_or(0) < 400 {
        assert!(Instant::now() < deadline, "{next:?}");
        let got = c.poll(Duration::from_millis(200)).await.unwrap();
        observe(&mut c);
        check_in_sequence(&mut next, &got);
    }
    assert!(
        prefetching_seen > 0,
        "never a fetch in flight with records buffered"
    );
    assert!(
        c.fetch_metrics().stale_answers_dropped > 0,
        "no answer in flight at any of the seeks and the pause"
    );
    assert!(max_buffered > 0);
    c.close().await.unwrap();
    producer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_of_revoked_partitions_are_never_returned() {
    let cluster = Cluster::single();
    cluster.create_topic("moving", 4, None).await;
    let producer = cluster.producer().await;
    for p in 0..4 {
        produce(&producer, "moving", p, 300).await;
    }
    let config = |c: &Cluster| {
        let mut config = c.consumer_config("moving-g");
        config.partition_assignment_strategy = vec!["cooperative-sticky".to_string()];
        config.max_poll_records = 5;
        config.max_partition_fetch_bytes = 4096;
        config
    };
    let mut a = Consumer::new(config(&cluster)).await.unwrap();
    a.subscribe(&["moving"]).await.unwrap();
    let mut next = BTreeMap::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while next.len() < 4 {
        assert!(Instant::now() < deadline, "{next:?}");
        let got = a.poll(Duration::from_millis(200)).await.unwrap();
        check_in_sequence(&mut next, &got);
    }

    // A second member joins: two of the four partitions move to it while the first member has
    // their records buffered and in flight.
    let (stop, mut stopped) = tokio::sync::watch::channel(false);
    let mut b = Consumer::new(config(&cluster)).await.unwrap();
    b.subscribe(&["moving"]).await.unwrap();
    let other = tokio::spawn(async move {
        while !*stopped.borrow_and_update() {
            b.poll(Duration::from_millis(100)).await.unwrap();
        }
        b.close().await.unwrap();
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut polls_after_move = 0;
    while polls_after_move < 30 {
        assert!(Instant::now() < deadline, "the partitions never moved");
        let got = a.poll(Duration::from_millis(100)).await.unwrap();
        let owned = a.assignment();
        for r in &got {
            let tp = TopicPartition::new(&*r.topic, r.partition);
            assert!(owned.contains(&tp), "{tp} returned after it was revoked");
        }
        check_in_sequence(&mut next, &got);
        if owned.len() == 2 {
            polls_after_move += 1;
        }
    }
    stop.send(true).unwrap();
    other.await.unwrap();
    a.close().await.unwrap();
    producer.close().await.unwrap();
}

/// Flips the stored CRC of the first batch of `topic`'s partition 0 in the broker's segment
/// file (the broker sends a segment's bytes as they are on disk).
fn corrupt_first_crc(data: &Path, topic: &str) {
    use std::os::unix::fs::FileExt;
    let log = data
        .join(format!("{topic}-0"))
        .join("00000000000000000000.log");
    let f = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .open(&log)
        .unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    // A v2 batch: base offset (8), length (4), leader epoch (4), magic (1), then the CRC.
    let mut crc = [0u8; 4];
    f.read_exact_at(&mut crc, 17)
        .expect("the first batch's CRC");
    for b in &mut crc {
        *b ^= 0xff;
    }
    f.write_all_at(&crc, 17).expect("CRC flipped");
}

/// `check.crcs`: with it off, a batch whose CRC does not match its bytes is returned as it
/// is; with it on (the default) it is never returned, nor anything after it.
async fn a_corrupted_crc_is_returned_only_without_check_crcs() {
    let cluster = Cluster::single();
    cluster.create_topic("crc", 1, None).await;
    let producer = cluster.producer().await;
    produce(&producer, "crc", 0, 20).await;
    producer.close().await.unwrap();
    corrupt_first_crc(cluster._data.path(), "crc");

    let mut config = cluster.consumer_config("crc-off");
    config.check_crcs = false;
    let mut c = Consumer::new(config).await.unwrap();
    c.subscribe(&["crc"]).await.unwrap();
    let mut got: Vec<ConsumerRecord> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(20);
    while got.len() < 20 {
        assert!(Instant::now() < deadline, "{} of 20 records", got.len());
        got.extend(c.poll(Duration::from_millis(200)).await.unwrap());
    }
    let offsets: Vec<i64> = got.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, (0..20).collect::<Vec<i64>>());
    assert_eq!(
        got[0].value.as_deref(),
        Some(format!("{:0>200}", 0).as_bytes())
    );
    assert_eq!(&*got[0].topic, "crc");
    c.close().await.unwrap();

    let config = cluster.consumer_config("crc-on");
    assert!(config.check_crcs, "check.crcs defaults to true");
    let mut c = Consumer::new(config).await.unwrap();
    c.subscribe(&["crc"]).await.unwrap();
    let until = Instant::now() + Duration::from_secs(3);
    while Instant::now() < until {
        let got = c.poll(Duration::from_millis(200)).await.unwrap();
        assert!(got.is_empty(), "returned from a corrupted batch: {got:?}");
    }
    assert!(c.fetch_metrics().fetches_sent > 0, "never fetched");
    c.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn check_crcs_decoding_in_the_fetch_task() {
    a_corrupted_crc_is_returned_only_without_check_crcs().await;
}

/// On a current-thread runtime `poll` decodes the answers, not the Fetch task.
#[tokio::test(flavor = "current_thread")]
async fn check_crcs_decoding_in_poll() {
    a_corrupted_crc_is_returned_only_without_check_crcs().await;
}

/// Reads `count` records of `topic` from the start with `client` settings, and returns the
/// consumer's fetch metrics then.
async fn read_all(
    cluster: &Cluster,
    topic: &str,
    count: usize,
    client: ClientConfig,
) -> FetchMetrics {
    let mut c = cluster.consumer_config(&format!("{topic}-{}", count));
    c.client = client;
    let mut consumer = Consumer::new(c).await.unwrap();
    consumer.subscribe(&[topic]).await.unwrap();
    let mut next = BTreeMap::new();
    let mut got = 0;
    let deadline = Instant::now() + Duration::from_secs(60);
    while got < count {
        assert!(Instant::now() < deadline, "read {got} of {count}");
        let records = consumer.poll(Duration::from_millis(500)).await.unwrap();
        check_in_sequence(&mut next, &records);
        got += records.len();
    }
    let m = consumer.fetch_metrics();
    consumer.close().await.unwrap();
    m
}

#[tokio::test(flavor = "current_thread")]
async fn the_fetch_window_stays_at_its_floor_on_loopback_and_grows_over_a_long_round_trip() {
    const MIB: usize = 1 << 20;
    let cluster = Cluster::single();
    let (topic, partitions) = ("window", 32);
    cluster.create_topic(topic, partitions, None).await;
    // 40 MiB in 16 KiB records, large batches: answers of several MiB.
    let mut pc = ProducerConfig::new(&cluster.bootstrap()).unwrap();
    pc.client = cluster.client_config();
    pc.batch_size = 512 << 10;
    pc.linger = Duration::from_millis(5);
    let producer = Producer::connect(pc).await.unwrap();
    let value = vec![b'w'; 16 << 10];
    let count = 40 * MIB / value.len();
    let mut acks = Vec::new();
    for i in 0..count {
        let partition = i32::try_from(i).unwrap() % partitions;
        let record = ProducerRecord::new(topic)
            .partition(partition)
            .value(value.clone());
        acks.push(producer.send(record).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }

    let direct = read_all(&cluster, topic, count, cluster.client_config()).await;
    let mut far = cluster.client_config();
    far.dialer = Some(delayed_dialer(Duration::from_millis(50)));
    let delayed = read_all(&cluster, topic, count, far).await;
    eprintln!("direct {direct:?}; 100 ms round trip {delayed:?}");
    // On loopback a few MiB cover the round trip: the window stays at its 8 MiB floor, and so
    // does what the consumer holds, far below fetch.max.bytes (50 MiB).
    assert_eq!(direct.fetch_window_bytes, 8 * MIB);
    // Over 100 ms the consumer's pace times the round trip is more than that: the window grows.
    assert!(
        delayed.fetch_window_bytes > 8 * MIB,
        "the window did not grow over a 100 ms round trip: {delayed:?}"
    );
    assert!(delayed.fetch_window_bytes <= 50 * MIB);
}

/// The broker's `fetch.low.latency.max.bytes` over a real loopback connection: the broker reads
/// the connection's minimum round trip from the kernel (tens of microseconds here), so a
/// consumer's Fetch asking for 50 MiB gets at most the cap (plus KIP-74's first batch), and
/// the whole 6 MiB once the cap is turned off with IncrementalAlterConfigs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_on_loopback_gets_answers_within_the_low_latency_cap() {
    use gregor_client::admin::{AlterConfigOp, ConfigResource};
    use gregor_client::Target;
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::{BrokerId, FetchRequest, TopicName};
    use kafka_protocol::protocol::StrBytes;

    const MIB: usize = 1 << 20;
    let data = tempfile::tempdir().expect("scratch dir");
    let args = vec![
        "--listeners".to_string(),
        format!("PLAINTEXT://127.0.0.1:{}", free_port()),
        "--override".to_string(),
        format!("fetch.low.latency.max.bytes={MIB}"),
    ];
    let cluster = Cluster {
        nodes: vec![Node::spawn(&args, data.path())],
        _data: data,
    };
    let (topic, partitions) = ("low-latency", 4);
    cluster.create_topic(topic, partitions, None).await;
    // 1.5 MiB per partition in 64 KiB records.
    let mut pc = ProducerConfig::new(&cluster.bootstrap()).unwrap();
    pc.client = cluster.client_config();
    pc.batch_size = 256 << 10;
    pc.linger = Duration::from_millis(5);
    let producer = Producer::connect(pc).await.unwrap();
    let value = vec![b'l'; 64 << 10];
    let mut acks = Vec::new();
    for i in 0..(4 * 24) {
        let record = ProducerRecord::new(topic)
            .partition(i % partitions)
            .value(value.clone());
        acks.push(producer.send(record).await.unwrap());
    }
    for a in acks {
        a.await.unwrap();
    }

    let client = Client::connect(cluster.client_config()).await.unwrap();
    let meta = client
        .refresh_metadata(Some(&[topic.to_string()]))
        .await
        .unwrap();
    let topic_id = meta.topic(topic).expect("the topic").topic_id;
    // A consumer's sessionless Fetch of every partition from the start, as librdkafka sends.
    let fetch = || async {
        let (_, resp) = client
            .send::<FetchRequest, _>(&Target::Broker(1), |_| {
                let mut t = FetchTopic::default();
                t.topic = TopicName(StrBytes::from_string(topic.to_string()));
                t.topic_id = topic_id;
                t.partitions = (0..partitions)
                    .map(|p| {
                        let mut fp = FetchPartition::default();
                        fp.partition = p;
                        fp.partition_max_bytes = i32::try_from(8 * MIB).unwrap();
                        fp.current_leader_epoch = -1;
                        fp.log_start_offset = -1;
                        fp.last_fetched_epoch = -1;
                        fp
                    })
                    .collect();
                let mut r = FetchRequest::default();
                r.replica_id = BrokerId(-1);
                r.max_wait_ms = 0;
                r.min_bytes = 1;
                r.max_bytes = i32::try_from(50 * MIB).unwrap();
                r.session_epoch = -1;
                r.topics = vec![t];
                Ok(r)
            })
            .await
            .unwrap();
        let sizes: Vec<usize> = resp
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| {
                assert_eq!(p.error_code, 0, "{p:?}");
                p.records.as_ref().map_or(0, |r| r.len())
            })
            .collect();
        sizes
    };
    let capped = fetch().await;
    let total: usize = capped.iter().sum();
    // Batches of about 256 KiB: the answer stops within the cap, plus one batch at most.
    assert!(
        total > MIB / 2 && total <= MIB + (320 << 10),
        "an answer of {total} bytes on loopback with a 1 MiB cap: {capped:?}"
    );

    let admin = cluster.admin().await;
    let altered = admin
        .incremental_alter_configs(
            &[(
                ConfigResource::broker(1),
                vec![AlterConfigOp::Set {
                    name: "fetch.low.latency.max.bytes".into(),
                    value: "0".into(),
                }],
            )],
            false,
        )
        .await
        .unwrap();
    assert_eq!(altered[0].1, Ok(()));
    let whole = fetch().await;
    assert!(
        whole.iter().all(|&bytes| bytes >= 3 * MIB / 2),
        "every partition whole without the cap: {whole:?}"
    );
}
