//! The transactional producer and the read_committed consumer against a real Gregor broker
//! process (`target/debug/gregor`): committed transactions are read, aborted ones skipped, and
//! a second producer with the same transactional id fences the first.
//!
//! Build the broker first when running alone: `cargo build -p gregor-cli`.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gregor_client::admin::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::AutoOffsetReset;
use gregor_client::producer::ProducerConfig;
use gregor_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, IsolationLevel, KafkaCode, Producer,
    ProducerRecord,
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
