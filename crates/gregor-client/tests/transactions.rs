//! The transactional producer and the read_committed consumer against a real Gregor broker
//! process (`target/debug/gregor`): committed transactions are read, aborted ones skipped, a
//! second producer with the same transactional id fences the first, and a consume-transform-
//! produce pipeline of Gregor's client is exactly once across a SIGKILLed instance.
//!
//! Build the broker first when running alone: `cargo build -p gregor-cli`.

use std::collections::BTreeMap;
use std::io::BufRead;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gregor_client::admin::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::AutoOffsetReset;
use gregor_client::producer::ProducerConfig;
use gregor_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, IsolationLevel, KafkaCode, Producer,
    ProducerRecord, TopicPartition,
};

mod common;
use common::gregor_binary;

/// PRODUCER_FENCED and INVALID_PRODUCER_EPOCH: a fenced producer's errors.
const FENCED: [KafkaCode; 2] = [KafkaCode(90), KafkaCode(47)];

/// A broker process, killed when the test ends.
struct Broker {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let data = tempfile::tempdir().expect("scratch dir");
        let child = Command::new(gregor_binary())
            .arg("broker")
            .arg("--listeners")
            .arg(format!("PLAINTEXT://127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(data.path())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gregor broker starts");
        Broker {
            child,
            port,
            _data: data,
        }
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Broker {
    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    async fn create_topic(&self, name: &str, partitions: i32) {
        let mut config = ClientConfig::new(&self.bootstrap()).unwrap();
        config.connect_timeout = Duration::from_secs(20);
        let admin = Admin::connect(config).await.expect("broker reachable");
        let topic = NewTopic {
            name: name.into(),
            num_partitions: Some(partitions),
            replication_factor: Some(1),
            ..Default::default()
        };
        let created = admin
            .create_topics(vec![topic], CreateTopicsOptions::default())
            .await
            .unwrap();
        assert!(created[0].1.is_ok(), "{created:?}");
    }

    async fn producer(&self, transactional_id: &str) -> Producer {
        let mut config = ProducerConfig::new(&self.bootstrap()).unwrap();
        config.client.connect_timeout = Duration::from_secs(20);
        config.transactional_id = Some(transactional_id.into());
        let producer = Producer::connect(config).await.expect("broker reachable");
        producer
            .init_transactions(Duration::from_secs(30))
            .await
            .expect("init_transactions");
        producer
    }

    /// Every value of `topic` a consumer with `isolation` reads within a few seconds.
    async fn read(&self, topic: &str, isolation: IsolationLevel, expect: usize) -> Vec<String> {
        let mut config = ConsumerConfig::new(&self.bootstrap(), &format!("read-{topic}")).unwrap();
        config.client.connect_timeout = Duration::from_secs(20);
        config.auto_offset_reset = AutoOffsetReset::Earliest;
        config.enable_auto_commit = false;
        config.isolation_level = isolation;
        config.fetch_max_wait = Duration::from_millis(100);
        let mut c = Consumer::new(config).await.unwrap();
        c.subscribe(&[topic]).await.unwrap();
        let mut values = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        // Past `expect`, a little longer: anything more would be wrong.
        let mut extra = None;
        while Instant::now() < deadline && extra.is_none_or(|until| Instant::now() < until) {
            for r in c.poll(Duration::from_millis(200)).await.unwrap() {
                values.push(String::from_utf8_lossy(r.value.as_deref().unwrap_or(b"")).into());
            }
            if values.len() >= expect && extra.is_none() {
                extra = Some(Instant::now() + Duration::from_secs(1));
            }
        }
        c.close().await.unwrap();
        values.sort();
        values
    }
}

async fn send(producer: &Producer, topic: &str, value: &str) {
    let delivery = producer
        .send(ProducerRecord::new(topic).value(value.to_string()))
        .await
        .expect("queued");
    delivery.await.expect("delivered");
}

#[tokio::test]
async fn committed_transactions_are_read_and_aborted_ones_skipped() {
    let broker = Broker::start();
    broker.create_topic("t", 2).await;
    let producer = broker.producer("txn-basic").await;
    producer.begin_transaction().await.unwrap();
    for v in ["c1", "c2", "c3"] {
        send(&producer, "t", v).await;
    }
    producer
        .commit_transaction(Duration::from_secs(30))
        .await
        .unwrap();
    producer.begin_transaction().await.unwrap();
    for v in ["a1", "a2"] {
        send(&producer, "t", v).await;
    }
    producer
        .abort_transaction(Duration::from_secs(30))
        .await
        .unwrap();
    producer.begin_transaction().await.unwrap();
    send(&producer, "t", "c4").await;
    producer
        .commit_transaction(Duration::from_secs(30))
        .await
        .unwrap();
    producer.close().await.unwrap();

    let committed = broker.read("t", IsolationLevel::ReadCommitted, 4).await;
    assert_eq!(committed, ["c1", "c2", "c3", "c4"]);
    let all = broker.read("t", IsolationLevel::ReadUncommitted, 6).await;
    assert_eq!(all, ["a1", "a2", "c1", "c2", "c3", "c4"]);
}

#[tokio::test]
async fn a_second_producer_with_the_same_transactional_id_fences_the_first() {
    let broker = Broker::start();
    broker.create_topic("f", 1).await;
    let zombie = broker.producer("txn-fence").await;
    zombie.begin_transaction().await.unwrap();
    send(&zombie, "f", "zombie").await;
    // Its InitProducerId aborts the zombie's open transaction and bumps the epoch.
    let fresh = broker.producer("txn-fence").await;
    let err = zombie
        .commit_transaction(Duration::from_secs(30))
        .await
        .expect_err("the zombie is fenced");
    assert!(
        err.kafka_code().is_some_and(|c| FENCED.contains(&c)),
        "{err}"
    );
    fresh.begin_transaction().await.unwrap();
    send(&fresh, "f", "fresh").await;
    fresh
        .commit_transaction(Duration::from_secs(30))
        .await
        .unwrap();
    fresh.close().await.unwrap();
    assert_eq!(
        broker.read("f", IsolationLevel::ReadCommitted, 1).await,
        ["fresh"]
    );
}

/// A new cluster finalizes transaction.version 2 (KIP-890 part 2): the producer adds no
/// partitions itself, and each commit or abort bumps its epoch (EndTxn v5 answers it), which
/// its next transaction's batches carry; the records read as before.
#[tokio::test]
async fn transaction_version_2_bumps_the_epoch_at_every_transaction() {
    let broker = Broker::start();
    broker.create_topic("v2", 2).await;
    let producer = broker.producer("txn-v2").await;
    let first = producer.metrics().identity.expect("initialised");
    for (i, commit) in [true, false, true].into_iter().enumerate() {
        producer.begin_transaction().await.unwrap();
        for p in 0..2 {
            let value = format!("{}{i}-{p}", if commit { "c" } else { "a" });
            let record = ProducerRecord::new("v2").partition(p).value(value);
            producer
                .send(record)
                .await
                .expect("queued")
                .await
                .expect("delivered");
        }
        let ended = match commit {
            true => producer.commit_transaction(Duration::from_secs(30)).await,
            false => producer.abort_transaction(Duration::from_secs(30)).await,
        };
        ended.unwrap();
    }
    let metrics = producer.metrics();
    let now = metrics.identity.expect("initialised");
    assert_eq!(
        (now.producer_id, now.epoch),
        (first.producer_id, first.epoch + 3)
    );
    assert_eq!(metrics.epoch_bumps, 3);
    producer.close().await.unwrap();
    let committed = broker.read("v2", IsolationLevel::ReadCommitted, 4).await;
    assert_eq!(committed, ["c0-0", "c0-1", "c2-0", "c2-1"]);
}

/// Set in the environment of [`eos_pipeline_instance`]'s process: the bootstrap address.
const PIPELINE_ENV: &str = "GREGOR_EOS_PIPELINE_BOOTSTRAP";
const PIPELINE_IN: &str = "eos-in";
const PIPELINE_OUT: &str = "eos-out";
const PIPELINE_GROUP: &str = "eos-pipe";

/// One instance of an exactly-once consume-transform-produce pipeline, run as a child process
/// by [`an_exactly_once_pipeline_survives_a_sigkilled_instance`] (this test binary again, with
/// `--ignored --exact`): reads `eos-in` (read_committed, group `eos-pipe`, one static member),
/// writes each record to `eos-out` with its key and partition and `V` before its value, and
/// commits the input offsets in the same transaction. Prints `committed N` after each commit
/// (N records so far); ends after 4 s without records.
#[tokio::test]
#[ignore = "the child process of an_exactly_once_pipeline_survives_a_sigkilled_instance"]
async fn eos_pipeline_instance() {
    let Ok(bootstrap) = std::env::var(PIPELINE_ENV) else {
        return;
    };
    let mut config = ConsumerConfig::new(&bootstrap, PIPELINE_GROUP).unwrap();
    config.group_instance_id = Some("eos-pipe-0".into());
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.enable_auto_commit = false;
    config.isolation_level = IsolationLevel::ReadCommitted;
    config.fetch_max_wait = Duration::from_millis(100);
    config.max_poll_records = 25;
    let mut consumer = Consumer::new(config).await.unwrap();
    consumer.subscribe(&[PIPELINE_IN]).await.unwrap();
    let mut config = ProducerConfig::new(&bootstrap).unwrap();
    config.transactional_id = Some("eos-pipe".into());
    let producer = Producer::connect(config).await.unwrap();
    producer
        .init_transactions(Duration::from_secs(30))
        .await
        .unwrap();
    let (mut done, mut idle_since) = (0usize, Instant::now());
    while idle_since.elapsed() < Duration::from_secs(4) {
        let records = consumer.poll(Duration::from_millis(200)).await.unwrap();
        if records.is_empty() {
            continue;
        }
        idle_since = Instant::now();
        producer.begin_transaction().await.unwrap();
        let mut offsets = BTreeMap::new();
        for r in &records {
            let value = [b"V".as_slice(), r.value.as_deref().unwrap_or_default()].concat();
            let mut out = ProducerRecord::new(PIPELINE_OUT)
                .value(value)
                .partition(r.partition);
            if let Some(k) = &r.key {
                out = out.key(k.clone());
            }
            // Delivery is awaited by the commit.
            drop(producer.send(out).await.unwrap());
            offsets.insert(TopicPartition::new(&*r.topic, r.partition), r.offset + 1);
        }
        let group = consumer.consumer_group_metadata();
        producer
            .send_offsets_to_transaction(&offsets, &group)
            .await
            .unwrap();
        producer
            .commit_transaction(Duration::from_secs(30))
            .await
            .unwrap();
        done += records.len();
        println!("committed {done}");
    }
    producer.close().await.unwrap();
    consumer.close().await.unwrap();
}

/// Starts [`eos_pipeline_instance`] against `broker`; its stdout lines go to the channel.
fn pipeline_instance(broker: &Broker) -> (Child, std::sync::mpsc::Receiver<String>) {
    let mut child = Command::new(std::env::current_exe().expect("this test binary"))
        .args([
            "--ignored",
            "--exact",
            "eos_pipeline_instance",
            "--nocapture",
        ])
        .env(PIPELINE_ENV, broker.bootstrap())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("the pipeline instance starts");
    let out = child.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(out).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    (child, rx)
}

/// Input: keys `k0..k7`, each key's values `k{key}-{i}` with `i` rising, over 2 partitions.
async fn pipeline_input(broker: &Broker, count: usize) {
    let mut config = ProducerConfig::new(&broker.bootstrap()).unwrap();
    config.linger = Duration::from_millis(5);
    let producer = Producer::connect(config).await.unwrap();
    let mut deliveries = Vec::new();
    for i in 0..count {
        let key = format!("k{}", i % 8);
        let record = ProducerRecord::new(PIPELINE_IN)
            .key(key.clone())
            .value(format!("{key}-{i:04}"));
        deliveries.push(producer.send(record).await.unwrap());
    }
    for d in deliveries {
        d.await.unwrap();
    }
    producer.close().await.unwrap();
}

/// The output as a read_committed consumer sees it: each key's values in offset order.
async fn pipeline_output(broker: &Broker, expect: usize) -> BTreeMap<String, Vec<String>> {
    let mut config = ConsumerConfig::new(&broker.bootstrap(), "eos-check").unwrap();
    config.auto_offset_reset = AutoOffsetReset::Earliest;
    config.enable_auto_commit = false;
    config.isolation_level = IsolationLevel::ReadCommitted;
    config.fetch_max_wait = Duration::from_millis(100);
    let mut c = Consumer::new(config).await.unwrap();
    c.subscribe(&[PIPELINE_OUT]).await.unwrap();
    let mut by_key: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let (mut seen, deadline) = (0, Instant::now() + Duration::from_secs(30));
    let mut extra = None;
    while Instant::now() < deadline && extra.is_none_or(|until| Instant::now() < until) {
        for r in c.poll(Duration::from_millis(200)).await.unwrap() {
            let key = String::from_utf8_lossy(r.key.as_deref().unwrap_or_default()).into_owned();
            let value = String::from_utf8_lossy(r.value.as_deref().unwrap_or_default());
            by_key.entry(key).or_default().push(value.into_owned());
            seen += 1;
        }
        if seen >= expect && extra.is_none() {
            extra = Some(Instant::now() + Duration::from_secs(1));
        }
    }
    c.close().await.unwrap();
    by_key
}

#[tokio::test]
async fn an_exactly_once_pipeline_survives_a_sigkilled_instance() {
    const COUNT: usize = 400;
    let broker = Broker::start();
    broker.create_topic(PIPELINE_IN, 2).await;
    broker.create_topic(PIPELINE_OUT, 2).await;
    pipeline_input(&broker, COUNT).await;
    // The first instance is SIGKILLed once it has committed 100 records, most likely with a
    // transaction open; the second fences it, aborts that transaction and resumes from the
    // offsets the last commit wrote.
    let (mut first, lines) = pipeline_instance(&broker);
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut committed = 0;
    while committed < 100 {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = lines
            .recv_timeout(left)
            .expect("the first instance commits 100 records");
        if let Some(n) = line.strip_prefix("committed ") {
            committed = n.parse().expect("a count");
        }
    }
    first.kill().expect("SIGKILL");
    first.wait().expect("reaped");
    let (mut second, _lines) = pipeline_instance(&broker);
    let status = second.wait().expect("the second instance ends");
    assert!(status.success(), "{status}");

    let output = pipeline_output(&broker, COUNT).await;
    let mut expected: BTreeMap<String, Vec<String>> = BTreeMap::new();
    for i in 0..COUNT {
        let key = format!("k{}", i % 8);
        let value = format!("V{key}-{i:04}");
        expected.entry(key).or_default().push(value);
    }
    // Every input once, in input order per key (a key stays in its partition).
    assert_eq!(output, expected, "first instance committed {committed}");
}
