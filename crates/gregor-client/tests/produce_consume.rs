//! The producer and the consumer against a real Gregor broker (`target/debug/gregor`, started
//! on a free port with a scratch data directory and fast group settings).
//!
//! Build the broker first when running alone: `cargo build -p gregor-cli`.

use std::collections::{BTreeMap, BTreeSet};
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use gregor_client::admin::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::{AutoOffsetReset, RebalanceKind};
use gregor_client::producer::{Compression, ProducerConfig};
use gregor_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, ConsumerRecord, KafkaCode, Producer,
    ProducerRecord, RebalanceContext, RebalanceListener, RecordingListener, TopicPartition,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod common;
use common::gregor_binary;

/// A broker process with fast group settings; killed when dropped.
struct Broker {
    child: Option<Child>,
    port: u16,
    data: tempfile::TempDir,
    overrides: Vec<String>,
}

impl Broker {
    fn start() -> Broker {
        Broker::start_with(&[])
    }

    /// With extra `--override key=value` settings.
    fn start_with(overrides: &[&str]) -> Broker {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let mut b = Broker {
            child: None,
            port,
            data: tempfile::tempdir().expect("scratch dir"),
            overrides: overrides.iter().map(|o| o.to_string()).collect(),
        };
        b.spawn();
        b
    }

    fn spawn(&mut self) {
        let child = Command::new(gregor_binary())
            .arg("broker")
            .arg("--listeners")
            .arg(format!("PLAINTEXT://127.0.0.1:{}", self.port))
            .arg("--data-dir")
            .arg(self.data.path())
            .args(["--override", "group.initial.rebalance.delay.ms=0"])
            .args(["--override", "group.min.session.timeout.ms=1000"])
            .args(
                self.overrides
                    .iter()
                    .flat_map(|o| ["--override", o.as_str()]),
            )
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gregor broker starts");
        self.child = Some(child);
    }

    fn kill(&mut self) {
        if let Some(mut c) = self.child.take() {
            let _ = c.kill();
            let _ = c.wait();
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new(&self.bootstrap()).unwrap();
        c.connect_timeout = Duration::from_secs(20);
        c.api_timeout = Duration::from_secs(20);
        c.request_timeout = Duration::from_secs(10);
        c
    }

    async fn create_topic(&self, name: &str, partitions: i32) {
        self.create_topic_with(name, partitions, &[]).await
    }

    async fn create_topic_with(&self, name: &str, partitions: i32, configs: &[(&str, &str)]) {
        let admin = Admin::connect(self.client_config()).await.unwrap();
        let created = admin
            .create_topics(
                vec![NewTopic {
                    name: name.into(),
                    num_partitions: Some(partitions),
                    replication_factor: Some(1),
                    configs: configs
                        .iter()
                        .map(|(k, v)| (k.to_string(), v.to_string()))
                        .collect(),
                    ..Default::default()
                }],
                CreateTopicsOptions::default(),
            )
            .await
            .unwrap();
        assert!(created[0].1.is_ok(), "{created:?}");
    }

    async fn producer(&self, compression: Compression) -> Producer {
        let mut c = ProducerConfig::new(&self.bootstrap()).unwrap();
        c.client = self.client_config();
        c.compression = compression;
        c.delivery_timeout = Duration::from_secs(40);
        c.retry_backoff = Duration::from_millis(50);
        Producer::connect(c).await.unwrap()
    }

    fn consumer_config(&self, group: &str, strategy: &str) -> ConsumerConfig {
        let mut c = ConsumerConfig::new(&self.bootstrap(), group).unwrap();
        c.client = self.client_config();
        c.session_timeout = Duration::from_secs(6);
        c.heartbeat_interval = Duration::from_millis(200);
        c.max_poll_interval = Duration::from_secs(10);
        c.partition_assignment_strategy = vec![strategy.to_string()];
        c.auto_offset_reset = AutoOffsetReset::Earliest;
        c.enable_auto_commit = false;
        c.fetch_max_wait = Duration::from_millis(100);
        c
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        self.kill();
    }
}

/// Waits (polling every 50 ms) until `cond` holds, failing after `secs`.
async fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn consume_n(consumer: &mut Consumer, n: usize, secs: u64) -> Vec<ConsumerRecord> {
    let mut out = Vec::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while out.len() < n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "got {} of {n} records",
            out.len()
        );
        out.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn round_trip_with_every_codec_and_java_key_partitioning() {
    let broker = Broker::start();
    // Kafka's murmur2 test vectors: the partition of each key is toPositive(hash) % 7.
    let vectors: [(&str, i32); 6] = [
        ("21", -973_932_308),
        ("foobar", -790_332_482),
        ("a-little-bit-long-string", -985_981_536),
        ("a-little-bit-longer-string", -1_486_304_829),
        (
            "lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
            -58_897_971,
        ),
        ("abc", 479_470_107),
    ];
    for (name, codec) in [
        ("none", Compression::None),
        ("gzip", Compression::Gzip),
        ("snappy", Compression::Snappy),
        ("lz4", Compression::Lz4),
        ("zstd", Compression::Zstd),
    ] {
        let topic = format!("codec-{name}");
        broker.create_topic(&topic, 7).await;
        let producer = broker.producer(codec).await;
        let mut futures = Vec::new();
        for (key, _) in &vectors {
            futures.push(
                producer
                    .send(
                        ProducerRecord::new(&topic)
                            .key(key.as_bytes().to_vec())
                            .value(format!("v-{key}")),
                    )
                    .await
                    .unwrap(),
            );
        }
        for i in 0..100 {
            futures.push(
                producer
                    .send(ProducerRecord::new(&topic).value(format!("keyless-{i}")))
                    .await
                    .unwrap(),
            );
        }
        let mut acked = Vec::new();
        for f in futures {
            acked.push(f.await.unwrap());
        }
        for ((key, hash), meta) in vectors.iter().zip(&acked) {
            assert_eq!(
                meta.partition,
                (hash & 0x7fff_ffff) % 7,
                "{name}: key {key}"
            );
            assert!(meta.offset >= 0);
        }
        // Offsets per partition are dense and unique.
        let mut per_partition: BTreeMap<i32, Vec<i64>> = BTreeMap::new();
        for m in &acked {
            per_partition.entry(m.partition).or_default().push(m.offset);
        }
        for offsets in per_partition.values() {
            let mut sorted = offsets.clone();
            sorted.sort();
            assert_eq!(sorted, (0..offsets.len() as i64).collect::<Vec<_>>());
        }
        producer.close().await.unwrap();

        let mut consumer = Consumer::new(broker.consumer_config(&format!("g-{name}"), "range"))
            .await
            .unwrap();
        consumer.subscribe(&[&topic]).await.unwrap();
        let records = consume_n(&mut consumer, 106, 20).await;
        assert_eq!(records.len(), 106, "{name}: no duplicates");
        let values: BTreeSet<Bytes> = records.iter().filter_map(|r| r.value.clone()).collect();
        assert_eq!(values.len(), 106);
        for (key, hash) in &vectors {
            let r = records
                .iter()
                .find(|r| r.key.as_deref() == Some(key.as_bytes()))
                .unwrap_or_else(|| panic!("{name}: key {key} consumed"));
            assert_eq!(r.partition, (hash & 0x7fff_ffff) % 7);
            assert_eq!(r.value.as_deref(), Some(format!("v-{key}").as_bytes()));
        }
        consumer.close().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_producer_retries_across_a_broker_restart_without_duplicates() {
    let mut broker = Broker::start();
    broker.create_topic("idem", 2).await;
    let producer = broker.producer(Compression::Lz4).await;
    let mut first = Vec::new();
    for i in 0..50 {
        first.push(
            producer
                .send(
                    ProducerRecord::new("idem")
                        .key(format!("k{}", i % 5))
                        .value(format!("a{i}")),
                )
                .await
                .unwrap(),
        );
    }
    for f in first {
        f.await.unwrap();
    }
    // The broker dies with records queued; they are retried until it is back.
    broker.kill();
    let mut second = Vec::new();
    for i in 0..50 {
        second.push(
            producer
                .send(
                    ProducerRecord::new("idem")
                        .key(format!("k{}", i % 5))
                        .value(format!("b{i}")),
                )
                .await
                .unwrap(),
        );
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    broker.spawn();
    for f in second {
        f.await.expect("delivered after the restart");
    }
    producer.close().await.unwrap();

    let mut consumer = Consumer::new(broker.consumer_config("idem-g", "range"))
        .await
        .unwrap();
    consumer.subscribe(&["idem"]).await.unwrap();
    let records = consume_n(&mut consumer, 100, 20).await;
    // Nothing more arrives.
    let extra = consumer.poll(Duration::from_millis(500)).await.unwrap();
    assert!(extra.is_empty(), "duplicates: {extra:?}");
    let values: Vec<String> = records
        .iter()
        .map(|r| String::from_utf8(r.value.clone().unwrap().to_vec()).unwrap())
        .collect();
    let distinct: BTreeSet<&String> = values.iter().collect();
    assert_eq!(distinct.len(), 100);
    // Per key, the order of sends is kept.
    for k in 0..5 {
        let key = format!("k{k}");
        let seq: Vec<&String> = records
            .iter()
            .zip(&values)
            .filter(|(r, _)| r.key.as_deref() == Some(key.as_bytes()))
            .map(|(_, v)| v)
            .collect();
        let expected: Vec<String> = (0..50)
            .filter(|i| i % 5 == k)
            .map(|i| format!("a{i}"))
            .chain((0..50).filter(|i| i % 5 == k).map(|i| format!("b{i}")))
            .collect();
        assert_eq!(seq, expected.iter().collect::<Vec<_>>(), "{key}");
    }
}

fn value_text(r: &ConsumerRecord) -> String {
    String::from_utf8(r.value.clone().unwrap_or_default().to_vec()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn several_produce_requests_in_flight_keep_the_send_order() {
    let broker = Broker::start();
    broker.create_topic("pipe", 1).await;
    let mut c = ProducerConfig::new(&broker.bootstrap()).unwrap();
    c.client = broker.client_config();
    // Small batches sent at once: many requests, each waiting for the broker's fdatasync.
    c.batch_size = 512;
    c.linger = Duration::ZERO;
    let producer = Producer::connect(c).await.unwrap();
    let mut futures = Vec::new();
    for i in 0..3000 {
        let record = ProducerRecord::new("pipe").value(format!("{i:0100}"));
        futures.push(producer.send(record).await.unwrap());
    }
    let mut offsets = Vec::new();
    for f in futures {
        offsets.push(f.await.expect("delivered").offset);
    }
    assert_eq!(
        offsets,
        (0..3000).collect::<Vec<i64>>(),
        "offsets follow sends"
    );
    let m = producer.metrics();
    assert!(
        m.peak_requests_in_flight > 1 && m.peak_requests_in_flight <= 5,
        "{m:?}"
    );
    assert!(m.requests > 10, "{m:?}");
    assert_eq!((m.producer_ids, m.epoch_bumps), (1, 0), "{m:?}");
    producer.close().await.unwrap();
    let mut consumer = Consumer::new(broker.consumer_config("pipe-g", "range"))
        .await
        .unwrap();
    consumer.subscribe(&["pipe"]).await.unwrap();
    let records = consume_n(&mut consumer, 3000, 20).await;
    let values: Vec<String> = records.iter().map(value_text).collect();
    let expected: Vec<String> = (0..3000).map(|i| format!("{i:0100}")).collect();
    assert_eq!(values, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn waiting_for_an_unknown_topic_does_not_hold_up_other_sends() {
    let broker = Broker::start_with(&["auto.create.topics.enable=false"]);
    broker.create_topic("known", 1).await;
    let mut c = ProducerConfig::new(&broker.bootstrap()).unwrap();
    c.client = broker.client_config();
    c.max_block = Duration::from_secs(3);
    let producer = Arc::new(Producer::connect(c).await.unwrap());
    let p = producer.clone();
    let missing = tokio::spawn(async move {
        let r = p.send(ProducerRecord::new("missing").value("x")).await;
        r.map(|_| ()).expect_err("the topic does not exist")
    });
    let mut futures = Vec::new();
    for i in 0..50 {
        let record = ProducerRecord::new("known").value(format!("v{i}"));
        futures.push(producer.send(record).await.unwrap());
    }
    for f in futures {
        f.await.expect("delivered");
    }
    assert!(
        !missing.is_finished(),
        "the known topic's records were delivered while the other send still waited"
    );
    let err = missing.await.unwrap();
    assert_eq!(
        err.kafka_code(),
        Some(gregor_client::KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
        "{err}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_zero_delivers_without_waiting_for_the_broker() {
    let broker = Broker::start();
    broker.create_topic("fire", 2).await;
    let mut c = ProducerConfig::new(&broker.bootstrap()).unwrap();
    c.client = broker.client_config();
    c.acks = gregor_client::producer::Acks::parse("0").unwrap();
    c.enable_idempotence = false;
    let producer = Producer::connect(c).await.unwrap();
    let mut futures = Vec::new();
    for i in 0..500 {
        let record = ProducerRecord::new("fire")
            .key(format!("k{}", i % 7))
            .value(format!("v{i}"));
        futures.push(producer.send(record).await.unwrap());
    }
    for f in futures {
        let m = f.await.expect("written");
        assert_eq!(m.offset, -1, "acks=0 gives no offset, as Kafka's producer");
    }
    assert_eq!(
        producer.metrics().identity,
        None,
        "no producer id without idempotence"
    );
    producer.close().await.unwrap();
    let mut consumer = Consumer::new(broker.consumer_config("fire-g", "range"))
        .await
        .unwrap();
    consumer.subscribe(&["fire"]).await.unwrap();
    let records = consume_n(&mut consumer, 500, 20).await;
    // Per key (so per partition), the send order.
    for k in 0..7 {
        let key = format!("k{k}");
        let got: Vec<String> = records
            .iter()
            .filter(|r| r.key.as_deref() == Some(key.as_bytes()))
            .map(value_text)
            .collect();
        let expected: Vec<String> = (0..500)
            .filter(|i| i % 7 == k)
            .map(|i| format!("v{i}"))
            .collect();
        assert_eq!(got, expected, "{key}");
    }
    // acks=0 with idempotence is refused, as Kafka refuses it.
    let mut bad = ProducerConfig::new(&broker.bootstrap()).unwrap();
    bad.acks = gregor_client::producer::Acks::None;
    let err = Producer::connect(bad).await.unwrap_err();
    assert!(err.to_string().contains("acks=all"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rejected_batch_bumps_the_epoch_and_later_records_go_through() {
    let broker = Broker::start();
    broker
        .create_topic_with("small", 1, &[("max.message.bytes", "2000")])
        .await;
    let producer = broker.producer(Compression::None).await;
    let send = |value: String| {
        let p = &producer;
        async move {
            p.send(ProducerRecord::new("small").value(value))
                .await
                .unwrap()
                .await
        }
    };
    assert_eq!(send("first".into()).await.unwrap().offset, 0);
    let before = producer.metrics().identity.expect("idempotent");
    // Too large for the topic: refused for good, which leaves a hole in the sequence.
    let err = send("x".repeat(5000)).await.unwrap_err();
    assert_eq!(
        err.kafka_code(),
        Some(gregor_client::KafkaCode(10)),
        "{err}"
    );
    // The next records are numbered from 0 under the next epoch of the same producer id.
    assert_eq!(send("second".into()).await.unwrap().offset, 1);
    assert_eq!(send("third".into()).await.unwrap().offset, 2);
    let m = producer.metrics();
    assert_eq!(m.epoch_bumps, 1, "{m:?}");
    assert_eq!(m.producer_ids, 1, "no new producer id: {m:?}");
    let after = m.identity.unwrap();
    assert_eq!(after.producer_id, before.producer_id);
    assert_eq!(after.epoch, before.epoch + 1);
    producer.close().await.unwrap();
}

/// Records callbacks and checks, across members, that no partition is ever owned twice.
#[derive(Clone)]
struct Tracker {
    name: String,
    owners: Arc<Mutex<BTreeMap<TopicPartition, String>>>,
    violations: Arc<Mutex<Vec<String>>>,
    events: RecordingListener,
}

impl Tracker {
    fn new(
        name: &str,
        owners: &Arc<Mutex<BTreeMap<TopicPartition, String>>>,
        violations: &Arc<Mutex<Vec<String>>>,
    ) -> Tracker {
        Tracker {
            name: name.into(),
            owners: owners.clone(),
            violations: violations.clone(),
            events: RecordingListener::new(),
        }
    }

    fn owned(&self) -> usize {
        self.owners
            .lock()
            .unwrap()
            .values()
            .filter(|o| **o == self.name)
            .count()
    }

    fn count(&self, kind: RebalanceKind) -> usize {
        self.events
            .events()
            .iter()
            .filter(|e| e.kind == kind)
            .map(|e| e.partitions.len())
            .sum()
    }
}

impl RebalanceListener for Tracker {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        let mut owners = self.owners.lock().unwrap();
        for tp in partitions {
            if owners.get(tp) == Some(&self.name) {
                owners.remove(tp);
            }
        }
        self.events.on_partitions_revoked(partitions, ctx);
    }
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        let mut owners = self.owners.lock().unwrap();
        for tp in partitions {
            if let Some(other) = owners.insert(tp.clone(), self.name.clone()) {
                if other != self.name {
                    self.violations.lock().unwrap().push(format!(
                        "{tp} given to {} while {other} owned it",
                        self.name
                    ));
                }
            }
        }
        self.events.on_partitions_assigned(partitions, ctx);
    }
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        let mut owners = self.owners.lock().unwrap();
        for tp in partitions {
            if owners.get(tp) == Some(&self.name) {
                owners.remove(tp);
            }
        }
        self.events.on_partitions_lost(partitions, ctx);
    }
}

/// A member polling in its own task until told to stop (or to stall); returns the consumer.
fn run_member(
    mut consumer: Consumer,
    mut stop: watch::Receiver<bool>,
    stall: Option<watch::Receiver<bool>>,
) -> JoinHandle<Consumer> {
    tokio::spawn(async move {
        loop {
            if *stop.borrow() {
                return consumer;
            }
            if let Some(s) = &stall {
                if *s.borrow() {
                    // Not polling: the heartbeat task keeps running.
                    let _ = stop.changed().await;
                    continue;
                }
            }
            consumer.poll(Duration::from_millis(100)).await.unwrap();
        }
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cooperative_sticky_members_join_one_by_one_revoking_only_what_moves() {
    let broker = Broker::start();
    broker.create_topic("coop", 6).await;
    let owners = Arc::new(Mutex::new(BTreeMap::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut trackers = Vec::new();
    let mut handles = Vec::new();
    for (i, name) in ["A", "B", "C"].iter().enumerate() {
        let tracker = Tracker::new(name, &owners, &violations);
        let mut c = Consumer::new(broker.consumer_config("coop-g", "cooperative-sticky"))
            .await
            .unwrap();
        c.set_rebalance_listener(Box::new(tracker.clone()));
        c.subscribe(&["coop"]).await.unwrap();
        handles.push(run_member(c, stop_rx.clone(), None));
        trackers.push(tracker);
        let share = 6 / (i + 1);
        let ts = trackers.clone();
        wait_until(
            &format!("{} members at {share} partitions each", i + 1),
            20,
            || ts.iter().all(|t| t.owned() == share),
        )
        .await;
    }
    stop_tx.send(true).unwrap();
    for h in handles {
        h.await.unwrap();
    }
    assert!(
        violations.lock().unwrap().is_empty(),
        "{:?}",
        violations.lock().unwrap()
    );
    // B joining moved 3 partitions off A; C joining moved one off A and one off B. Nothing
    // else was revoked, and nothing was lost.
    assert_eq!(trackers[0].count(RebalanceKind::Revoked), 4, "A");
    assert_eq!(trackers[1].count(RebalanceKind::Revoked), 1, "B");
    assert_eq!(trackers[2].count(RebalanceKind::Revoked), 0, "C");
    for t in &trackers {
        assert_eq!(t.count(RebalanceKind::Lost), 0);
    }
    // Seed 004: a joining member first gets an empty assignment, then its partitions in the
    // second round.
    let c_events = trackers[2].events.events();
    assert!(
        c_events[0].kind == RebalanceKind::Assigned && c_events[0].partitions.is_empty(),
        "{c_events:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn added_partitions_are_assigned_after_a_rebalance() {
    let broker = Broker::start();
    broker.create_topic("grow", 2).await;
    let owners = Arc::new(Mutex::new(BTreeMap::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut trackers = Vec::new();
    let mut handles = Vec::new();
    for name in ["A", "B"] {
        let tracker = Tracker::new(name, &owners, &violations);
        let mut config = broker.consumer_config("grow-g", "cooperative-sticky");
        config.metadata_max_age = Duration::from_millis(300);
        let mut c = Consumer::new(config).await.unwrap();
        c.set_rebalance_listener(Box::new(tracker.clone()));
        c.subscribe(&["grow"]).await.unwrap();
        handles.push(run_member(c, stop_rx.clone(), None));
        trackers.push(tracker);
    }
    let ts = trackers.clone();
    wait_until("1-1", 20, || ts.iter().all(|t| t.owned() == 1)).await;
    // Whoever joined first may have held both partitions and handed one over; only what
    // happens from here on is about the added partitions.
    let before: Vec<_> = trackers
        .iter()
        .map(|t| {
            (
                t.count(RebalanceKind::Revoked),
                t.count(RebalanceKind::Lost),
            )
        })
        .collect();
    let admin = Admin::connect(broker.client_config()).await.unwrap();
    let grown = admin
        .create_partitions(
            vec![gregor_client::admin::topics::NewPartitions {
                topic: "grow".into(),
                total_count: 6,
                assignments: None,
            }],
            false,
            10_000,
        )
        .await
        .unwrap();
    assert!(grown[0].1.is_ok(), "{grown:?}");
    // The leader sees the new partition count within metadata.max.age.ms and rebalances.
    let ts = trackers.clone();
    wait_until("3-3 over six partitions", 20, || {
        ts.iter().all(|t| t.owned() == 3)
    })
    .await;
    // Cooperative: the original partitions stayed where they were.
    for (t, (revoked, lost)) in trackers.iter().zip(before) {
        let history = t.events.events();
        assert_eq!(
            t.count(RebalanceKind::Revoked),
            revoked,
            "{}: {history:?}",
            t.name
        );
        assert_eq!(
            t.count(RebalanceKind::Lost),
            lost,
            "{}: {history:?}",
            t.name
        );
    }
    stop_tx.send(true).unwrap();
    for h in handles {
        h.await.unwrap().close().await.unwrap();
    }
    assert!(
        violations.lock().unwrap().is_empty(),
        "{:?}",
        violations.lock().unwrap()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn eager_range_members_revoke_everything_on_each_rebalance() {
    let broker = Broker::start();
    broker.create_topic("eager", 4).await;
    let owners = Arc::new(Mutex::new(BTreeMap::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let a = Tracker::new("A", &owners, &violations);
    let b = Tracker::new("B", &owners, &violations);
    let mut ca = Consumer::new(broker.consumer_config("eager-g", "range"))
        .await
        .unwrap();
    ca.set_rebalance_listener(Box::new(a.clone()));
    ca.subscribe(&["eager"]).await.unwrap();
    let ha = run_member(ca, stop_rx.clone(), None);
    wait_until("A owns all", 20, || a.owned() == 4).await;
    let mut cb = Consumer::new(broker.consumer_config("eager-g", "range"))
        .await
        .unwrap();
    cb.set_rebalance_listener(Box::new(b.clone()));
    cb.subscribe(&["eager"]).await.unwrap();
    let hb = run_member(cb, stop_rx.clone(), None);
    wait_until("2-2", 20, || a.owned() == 2 && b.owned() == 2).await;
    stop_tx.send(true).unwrap();
    ha.await.unwrap().close().await.unwrap();
    hb.await.unwrap().close().await.unwrap();
    let events: Vec<(RebalanceKind, usize)> = a
        .events
        .events()
        .iter()
        .map(|e| (e.kind, e.partitions.len()))
        .collect();
    // Seed 004, eager: ASSIGNED [0,1,2,3]; REVOKED [0,1,2,3]; ASSIGNED [two of them].
    assert_eq!(
        &events[..3],
        &[
            (RebalanceKind::Assigned, 4),
            (RebalanceKind::Revoked, 4),
            (RebalanceKind::Assigned, 2)
        ]
    );
    assert!(violations.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn exceeding_max_poll_interval_loses_partitions_to_the_others() {
    let broker = Broker::start();
    broker.create_topic("stall", 4).await;
    let owners = Arc::new(Mutex::new(BTreeMap::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let (stall_tx, stall_rx) = watch::channel(false);
    let a = Tracker::new("A", &owners, &violations);
    let b = Tracker::new("B", &owners, &violations);
    let mut config = broker.consumer_config("stall-g", "range");
    config.max_poll_interval = Duration::from_secs(2);
    let mut ca = Consumer::new(config).await.unwrap();
    ca.set_rebalance_listener(Box::new(a.clone()));
    ca.subscribe(&["stall"]).await.unwrap();
    let ha = run_member(ca, stop_rx.clone(), None);
    let mut config = broker.consumer_config("stall-g", "range");
    config.max_poll_interval = Duration::from_secs(2);
    let mut cb = Consumer::new(config).await.unwrap();
    cb.set_rebalance_listener(Box::new(b.clone()));
    cb.subscribe(&["stall"]).await.unwrap();
    let hb = run_member(cb, stop_rx.clone(), Some(stall_rx));
    wait_until("2-2", 20, || a.owned() == 2 && b.owned() == 2).await;
    // B stops polling; after max.poll.interval.ms it leaves and A takes everything.
    stall_tx.send(true).unwrap();
    wait_until("A owns all after B's poll timeout", 20, || a.owned() == 4).await;
    // B polls again: its partitions are reported lost, then it rejoins.
    stall_tx.send(false).unwrap();
    stop_tx.send_modify(|_| {});
    wait_until("B lost its partitions", 20, || {
        b.count(RebalanceKind::Lost) == 2
    })
    .await;
    wait_until("2-2 again", 20, || a.owned() == 2 && b.owned() == 2).await;
    stop_tx.send(true).unwrap();
    ha.await.unwrap();
    hb.await.unwrap();
    // The only double ownership: A given B's partitions before B, polling again, reported them
    // lost (past max.poll.interval.ms B had left the group; Kafka's semantics). None on B's
    // return, none twice.
    let mut expected: Vec<String> = b
        .events
        .events()
        .iter()
        .filter(|e| e.kind == RebalanceKind::Lost)
        .flat_map(|e| {
            e.partitions
                .iter()
                .map(|tp| format!("{tp} given to A while B owned it"))
        })
        .collect();
    expected.sort();
    let mut got = violations.lock().unwrap().clone();
    got.sort();
    assert_eq!(got, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn static_member_restart_rejoins_without_a_rebalance() {
    let broker = Broker::start();
    broker.create_topic("static", 4).await;
    let owners = Arc::new(Mutex::new(BTreeMap::new()));
    let violations = Arc::new(Mutex::new(Vec::new()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let static_config = |name: &str| {
        let mut c = broker.consumer_config("static-g", "range");
        c.group_instance_id = Some(name.to_string());
        c
    };
    let a = Tracker::new("A", &owners, &violations);
    let b = Tracker::new("B", &owners, &violations);
    let mut ca = Consumer::new(static_config("a")).await.unwrap();
    ca.set_rebalance_listener(Box::new(a.clone()));
    ca.subscribe(&["static"]).await.unwrap();
    let ha = run_member(ca, stop_rx.clone(), None);
    wait_until("A owns all", 20, || a.owned() == 4).await;
    let mut cb = Consumer::new(static_config("b")).await.unwrap();
    cb.set_rebalance_listener(Box::new(b.clone()));
    cb.subscribe(&["static"]).await.unwrap();
    let (stop_b_tx, stop_b_rx) = watch::channel(false);
    let hb = run_member(cb, stop_b_rx, None);
    wait_until("2-2", 20, || a.owned() == 2 && b.owned() == 2).await;
    let a_events_before = a.events.events().len();
    // B restarts: closing a static member sends no LeaveGroup, so the group keeps its place.
    stop_b_tx.send(true).unwrap();
    let cb = hb.await.unwrap();
    let b_assignment = cb.assignment();
    let (_, generation) = cb.group_metadata();
    cb.close().await.unwrap();
    let b2 = Tracker::new("B", &owners, &violations);
    let mut cb2 = Consumer::new(static_config("b")).await.unwrap();
    cb2.set_rebalance_listener(Box::new(b2.clone()));
    cb2.subscribe(&["static"]).await.unwrap();
    let hb2 = run_member(cb2, stop_rx.clone(), None);
    wait_until("B back with its partitions", 20, || b2.owned() == 2).await;
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    stop_tx.send(true).unwrap();
    ha.await.unwrap();
    let cb2 = hb2.await.unwrap();
    assert_eq!(cb2.assignment(), b_assignment, "same partitions");
    assert_eq!(cb2.group_metadata().1, generation, "no new generation");
    assert_eq!(
        a.events.events().len(),
        a_events_before,
        "A saw no rebalance"
    );
    assert!(violations.lock().unwrap().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn commits_resume_and_positions() {
    let broker = Broker::start();
    broker.create_topic("commits", 1).await;
    broker.create_topic("pat-one", 1).await;
    broker.create_topic("pat-two", 1).await;
    let producer = broker.producer(Compression::Snappy).await;
    let mut acks = Vec::new();
    for i in 0..30 {
        acks.push(
            producer
                .send(ProducerRecord::new("commits").value(format!("r{i}")))
                .await
                .unwrap(),
        );
    }
    for t in ["pat-one", "pat-two"] {
        acks.push(
            producer
                .send(ProducerRecord::new(t).value("x"))
                .await
                .unwrap(),
        );
    }
    for a in acks {
        a.await.unwrap();
    }
    let tp = TopicPartition::new("commits", 0);

    let mut config = broker.consumer_config("commits-g", "roundrobin");
    config.max_poll_records = 10;
    let mut c = Consumer::new(config).await.unwrap();
    // Bad input: no subscription, seek on a partition not assigned, a broken pattern.
    assert!(c.poll(Duration::from_millis(10)).await.is_err());
    assert!(c.seek(&tp, 3).is_err());
    assert!(c.subscribe_pattern("(").is_err());
    c.subscribe(&["commits"]).await.unwrap();
    let first = c.poll(Duration::from_secs(10)).await.unwrap();
    assert_eq!(first.len(), 10);
    assert_eq!(first[0].offset, 0);
    assert_eq!(c.position(&tp).await.unwrap(), 10);
    c.commit_sync(None).await.unwrap();
    assert_eq!(
        c.committed(std::slice::from_ref(&tp)).await.unwrap()[&tp],
        Some(10)
    );
    // Seek back, pause and resume.
    c.seek(&tp, 5).unwrap();
    assert!(c.seek(&tp, -1).is_err());
    c.pause(std::slice::from_ref(&tp)).unwrap();
    assert!(c.poll(Duration::from_millis(300)).await.unwrap().is_empty());
    c.resume(std::slice::from_ref(&tp)).unwrap();
    let again = c.poll(Duration::from_secs(5)).await.unwrap();
    assert_eq!(again[0].offset, 5);
    // An async commit of an explicit offset.
    c.commit_async(Some([(tp.clone(), 12)].into()))
        .await
        .unwrap()
        .unwrap();
    c.close().await.unwrap();

    // A new member of the group resumes from the committed offset.
    let mut c2 = Consumer::new(broker.consumer_config("commits-g", "roundrobin"))
        .await
        .unwrap();
    c2.subscribe(&["commits"]).await.unwrap();
    let resumed = consume_n(&mut c2, 18, 10).await;
    assert_eq!(resumed[0].offset, 12);
    assert_eq!(resumed.last().unwrap().offset, 29);
    c2.close().await.unwrap();

    // Pattern subscription.
    let mut c3 = Consumer::new(broker.consumer_config("pattern-g", "range"))
        .await
        .unwrap();
    c3.subscribe_pattern("pat-.*").unwrap();
    let recs = consume_n(&mut c3, 2, 10).await;
    let topics: BTreeSet<String> = recs.iter().map(|r| r.topic.to_string()).collect();
    assert_eq!(
        topics,
        ["pat-one".to_string(), "pat-two".to_string()].into()
    );
    c3.close().await.unwrap();

    // auto.offset.reset=none with nothing committed is an error.
    let mut config = broker.consumer_config("none-g", "range");
    config.auto_offset_reset = AutoOffsetReset::None;
    let mut c4 = Consumer::new(config).await.unwrap();
    c4.subscribe(&["commits"]).await.unwrap();
    let err = c4.poll(Duration::from_secs(5)).await.unwrap_err();
    assert!(err.to_string().contains("auto.offset.reset=none"), "{err}");
    producer.close().await.unwrap();
}

/// A `Dialer` replaces TCP for every connection the client opens (the simulator's network
/// uses it): here one that counts its calls and connects over TCP carries a whole
/// produce-and-consume round trip; one that cannot connect makes the client fail with the
/// address and the dialer's reason, not hang.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dialer_carries_every_connection_and_its_failure_is_reported() {
    use gregor_client::connection::{DialedStream, Dialer};
    use std::sync::atomic::{AtomicUsize, Ordering};

    let broker = Broker::start();
    broker.create_topic("dialed", 1).await;
    let dials = Arc::new(AtomicUsize::new(0));
    let counted = dials.clone();
    let dialer = Dialer::new(move |addr| {
        counted.fetch_add(1, Ordering::SeqCst);
        let addr = addr.to_string();
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect(addr).await?;
            Ok(Box::new(s) as Box<dyn DialedStream>)
        })
    });
    let mut config = broker.client_config();
    config.dialer = Some(dialer);
    let mut pconfig = ProducerConfig::new(&broker.bootstrap()).unwrap();
    pconfig.client = config.clone();
    let producer = Producer::connect(pconfig).await.unwrap();
    producer
        .send(ProducerRecord::new("dialed").value(Bytes::from_static(b"v")))
        .await
        .unwrap()
        .await
        .unwrap();
    let mut cconfig = ConsumerConfig::new(&broker.bootstrap(), "dialed-group").unwrap();
    cconfig.client = config;
    cconfig.auto_offset_reset = AutoOffsetReset::Earliest;
    let mut consumer = Consumer::new(cconfig).await.unwrap();
    consumer.subscribe(&["dialed"]).await.unwrap();
    let mut got = Vec::new();
    for _ in 0..100 {
        got.extend(consumer.poll(Duration::from_millis(200)).await.unwrap());
        if !got.is_empty() {
            break;
        }
    }
    assert_eq!(got.len(), 1);
    assert_eq!(got[0].value.as_deref(), Some(&b"v"[..]));
    // Producer, consumer and the consumer's group connections all came through the dialer.
    assert!(dials.load(Ordering::SeqCst) >= 3, "{dials:?}");

    let mut refused = broker.client_config();
    refused.connect_timeout = Duration::from_secs(2);
    refused.api_timeout = Duration::from_secs(2);
    refused.dialer = Some(Dialer::new(|_| {
        Box::pin(async {
            Err(std::io::Error::new(
                std::io::ErrorKind::ConnectionRefused,
                "no route in this test",
            ))
        })
    }));
    let err = Admin::connect(refused).await.unwrap_err().to_string();
    assert!(
        err.contains(&broker.bootstrap()) && err.contains("no route in this test"),
        "{err}"
    );
}

/// A stream that stops carrying bytes, both ways, once its switch is thrown, without closing:
/// what a connection to a broker that lost power, or across a link a firewall silently drops,
/// looks like from the client.
struct Freezable {
    inner: tokio::net::TcpStream,
    frozen: Arc<std::sync::atomic::AtomicBool>,
}

impl Freezable {
    fn is_frozen(&self) -> bool {
        self.frozen.load(std::sync::atomic::Ordering::SeqCst)
    }
}

impl tokio::io::AsyncRead for Freezable {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.is_frozen() {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_read(cx, buf)
    }
}

impl tokio::io::AsyncWrite for Freezable {
    fn poll_write(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
        buf: &[u8],
    ) -> std::task::Poll<std::io::Result<usize>> {
        if self.is_frozen() {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        if self.is_frozen() {
            return std::task::Poll::Pending;
        }
        std::pin::Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        std::pin::Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

/// Every connection a consumer had stops answering at once and stays open (found by the
/// simulation: after a split healed, a member's connection to its coordinator never carried
/// another byte, and its commits timed out for good). The consumer gives those connections
/// up (a request unanswered within request.timeout.ms closes its connection; a heartbeat
/// unanswered closes the coordinator's) and carries on over fresh ones: it reads what was
/// produced since and commits it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_consumer_gives_up_connections_that_stopped_answering() {
    use gregor_client::connection::{DialedStream, Dialer};
    use std::sync::atomic::{AtomicBool, Ordering};

    let broker = Broker::start();
    broker.create_topic("frozen", 1).await;
    let producer = broker.producer(Compression::None).await;
    let switches: Arc<Mutex<Vec<Arc<AtomicBool>>>> = Arc::default();
    let dialed = switches.clone();
    let dialer = Dialer::new(move |addr| {
        let frozen = Arc::new(AtomicBool::new(false));
        dialed.lock().unwrap().push(frozen.clone());
        let addr = addr.to_string();
        Box::pin(async move {
            let inner = tokio::net::TcpStream::connect(addr).await?;
            Ok(Box::new(Freezable { inner, frozen }) as Box<dyn DialedStream>)
        })
    });
    let mut config = ConsumerConfig::new(&broker.bootstrap(), "frozen-group").unwrap();
    config.client = broker.client_config();
    config.client.request_timeout = Duration::from_secs(3);
    config.client.dialer = Some(dialer);
    config.session_timeout = Duration::from_secs(3);
    config.heartbeat_interval = Duration::from_millis(500);
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.enable_auto_commit = false;
    let mut consumer = Consumer::new(config).await.unwrap();
    consumer.subscribe(&["frozen"]).await.unwrap();
    let tp = TopicPartition::new("frozen", 0);

    let send = |value: &'static str| {
        let producer = &producer;
        async move {
            producer
                .send(ProducerRecord::new("frozen").value(value))
                .await
                .unwrap()
                .await
                .unwrap()
        }
    };
    send("before").await;
    let got = consume_n(&mut consumer, 1, 30).await;
    assert_eq!(got[0].value.as_deref(), Some(&b"before"[..]));
    consumer.commit_sync(None).await.unwrap();

    let before = {
        let all = switches.lock().unwrap();
        for s in all.iter() {
            s.store(true, Ordering::SeqCst);
        }
        all.len()
    };
    send("after").await;
    // Polls and commits may fail while the connections are being given up; the consumer
    // recovers on its own.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    let mut got = Vec::new();
    let mut errors = Vec::new();
    while got.is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "nothing read after the freeze; errors: {errors:?}"
        );
        match consumer.poll(Duration::from_millis(200)).await {
            Ok(records) => got.extend(records),
            Err(e) => errors.push(e.to_string()),
        }
    }
    assert_eq!(got[0].value.as_deref(), Some(&b"after"[..]));
    assert_eq!(got[0].offset, 1);
    // Commit the offset that was read, not the consumer's position: with a 3 s session the
    // freeze may cost the member its partition, and a rebalance between reading and
    // committing resets the position to the committed offset until the record is read again.
    let read = BTreeMap::from([(tp.clone(), got[0].offset + 1)]);
    let mut committed = None;
    for _ in 0..20 {
        match consumer.commit_sync(Some(read.clone())).await {
            Ok(()) => {
                committed = Some(consumer.committed(std::slice::from_ref(&tp)).await.unwrap());
                break;
            }
            Err(_) => {
                consumer.poll(Duration::from_millis(200)).await.ok();
            }
        }
    }
    let committed = committed.expect("a commit went through over a fresh connection");
    assert_eq!(committed.get(&tp).copied().flatten(), Some(2));
    assert!(
        switches.lock().unwrap().len() > before,
        "fresh connections were dialed"
    );
}

/// A member that stopped polling past max.poll.interval.ms has left its group; when it wakes
/// up and commits what it had processed, the commit is refused before it is sent (as Kafka's
/// `CommitFailedException`), even once the group has emptied and would take a commit without
/// a generation as a simple consumer's: the offset another member committed since stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_removed_for_not_polling_cannot_move_offsets_back() {
    let broker = Broker::start();
    broker.create_topic("zombie", 1).await;
    let producer = broker.producer(Compression::None).await;
    let mut acks = Vec::new();
    for i in 0..10 {
        acks.push(
            producer
                .send(ProducerRecord::new("zombie").value(format!("r{i}")))
                .await
                .unwrap(),
        );
    }
    for a in acks {
        a.await.unwrap();
    }
    let tp = TopicPartition::new("zombie", 0);
    let mut config = broker.consumer_config("zombie-g", "range");
    config.max_poll_interval = Duration::from_secs(2);
    config.max_poll_records = 5;
    let mut a = Consumer::new(config).await.unwrap();
    a.subscribe(&["zombie"]).await.unwrap();
    let first = consume_n(&mut a, 5, 30).await;
    assert_eq!(first.last().unwrap().offset, 4);
    // A works on these records for longer than max.poll.interval.ms.
    let (member_id, _) = a.group_metadata();
    wait_until("A left the group after its poll timeout", 20, || {
        a.group_metadata().1 == -1
    })
    .await;
    assert!(!member_id.is_empty());

    // B takes the partition over, reads everything, commits 10 and leaves: the group is empty.
    let mut b = Consumer::new(broker.consumer_config("zombie-g", "range"))
        .await
        .unwrap();
    b.subscribe(&["zombie"]).await.unwrap();
    let all = consume_n(&mut b, 10, 30).await;
    assert_eq!(all.last().unwrap().offset, 9);
    b.commit_sync(None).await.unwrap();
    b.close().await.unwrap();

    // A wakes up and commits what it processed (5).
    let err = a
        .commit_sync(Some(BTreeMap::from([(tp.clone(), 5)])))
        .await
        .expect_err("a member outside any generation does not commit");
    assert!(
        matches!(&err, gregor_client::Error::CommitFailed(reason) if reason.contains("max.poll.interval.ms")),
        "{err}"
    );
    let committed = a.committed(std::slice::from_ref(&tp)).await.unwrap();
    assert_eq!(committed.get(&tp).copied().flatten(), Some(10));
    // Its next polls report the partition lost and rejoin; then it commits again.
    poll_until_in_a_generation(&mut a).await;
    a.commit_sync(Some(BTreeMap::from([(tp.clone(), 10)])))
        .await
        .unwrap();
}

/// Polls until the consumer is in a generation again.
async fn poll_until_in_a_generation(c: &mut Consumer) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while c.group_metadata().1 < 0 {
        assert!(tokio::time::Instant::now() < deadline, "never rejoined");
        c.poll(Duration::from_millis(200)).await.ok();
    }
    // The generation is stable once a poll has returned after the join.
    c.poll(Duration::from_millis(100)).await.unwrap();
}

/// KIP-467: a batch with some records a compacted topic refuses (no key) fails whole; the
/// records the broker named fail with its reason, the rest of their batch says it was refused
/// for another record's sake, nothing is stored, and the producer goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_a_batch_was_refused_for_fail_with_their_own_reason() {
    let broker = Broker::start();
    broker
        .create_topic_with("compacted", 1, &[("cleanup.policy", "compact")])
        .await;
    let mut c = ProducerConfig::new(&broker.bootstrap()).unwrap();
    c.client = broker.client_config();
    // One batch: the records are queued long before linger.ms runs out.
    c.linger = Duration::from_millis(500);
    let producer = Producer::connect(c).await.unwrap();
    let mut futures = Vec::new();
    for i in 0..5 {
        let mut record = ProducerRecord::new("compacted").value(format!("v{i}"));
        if i != 2 {
            record = record.key(format!("k{i}"));
        }
        futures.push(producer.send(record).await.unwrap());
    }
    let mut errors = Vec::new();
    for f in futures {
        let e = f.await.expect_err("the batch is refused");
        assert_eq!(e.kafka_code(), Some(KafkaCode(87)), "INVALID_RECORD: {e}");
        errors.push(e.to_string());
    }
    assert!(errors[2].contains("without a key"), "{errors:?}");
    for i in [0, 1, 3, 4] {
        assert!(
            errors[i].contains("another record of its batch"),
            "{errors:?}"
        );
    }
    let delivered = producer
        .send(ProducerRecord::new("compacted").key("k").value("good"))
        .await
        .unwrap()
        .await
        .expect("a good record afterwards is stored");
    assert_eq!(
        delivered.offset, 0,
        "nothing of the refused batch was stored"
    );
    producer.close().await.unwrap();
}
