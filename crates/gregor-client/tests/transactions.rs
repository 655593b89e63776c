//! The transactional producer against a real Gregor broker (`target/debug/gregor`). Today's
//! broker has no transaction coordinator and refuses transactional producers; this checks that
//! the producer reports that refusal at once, clearly, instead of retrying until its timeout.
//! The full end-to-end transaction test comes with the broker's coordinator.
//!
//! Build the broker first when running alone: `cargo build -p gregor-cli`.

use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use gregor_client::admin::{CreateTopicsOptions, NewTopic};
use gregor_client::producer::ProducerConfig;
use gregor_client::{Admin, ClientConfig, KafkaCode, Producer, ProducerRecord};

mod common;
use common::gregor_binary;

/// TRANSACTIONAL_ID_AUTHORIZATION_FAILED: the code the broker refuses transactions with.
const REFUSED: KafkaCode = KafkaCode(53);

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

#[tokio::test]
async fn init_transactions_reports_the_brokers_refusal_at_once() {
    let broker = Broker::start();
    let mut admin_config = ClientConfig::new(&format!("127.0.0.1:{}", broker.port)).unwrap();
    admin_config.connect_timeout = Duration::from_secs(20);
    let admin = Admin::connect(admin_config)
        .await
        .expect("broker reachable");
    let topic = NewTopic {
        name: "t".into(),
        num_partitions: Some(1),
        replication_factor: Some(1),
        ..Default::default()
    };
    let created = admin
        .create_topics(vec![topic], CreateTopicsOptions::default())
        .await
        .unwrap();
    assert!(created[0].1.is_ok(), "{created:?}");
    let mut config = ProducerConfig::new(&format!("127.0.0.1:{}", broker.port)).unwrap();
    config.client.connect_timeout = Duration::from_secs(20);
    config.transactional_id = Some("txn-refused".into());
    let producer = Producer::connect(config).await.expect("broker reachable");

    let started = Instant::now();
    let err = producer
        .init_transactions(Duration::from_secs(30))
        .await
        .expect_err("this broker refuses transactional producers");
    let took = started.elapsed();
    assert_eq!(err.kafka_code(), Some(REFUSED), "{err}");
    assert!(
        err.to_string().contains("transactions are not supported"),
        "the broker's message reaches the caller: {err}"
    );
    assert!(
        took < Duration::from_secs(5),
        "refused at once, not retried: {took:?}"
    );

    // The failure is fatal: every later transactional call reports it, and so does a send.
    let again = producer.begin_transaction().await.unwrap_err();
    assert_eq!(again.kafka_code(), Some(REFUSED), "{again}");
    let delivery = producer
        .send(ProducerRecord::new("t").value("v"))
        .await
        .expect("the topic exists");
    let e = delivery.await.unwrap_err();
    assert_eq!(e.kafka_code(), Some(REFUSED), "{e}");
    // A second init_transactions after the failure does not start over.
    let init = producer
        .init_transactions(Duration::from_secs(1))
        .await
        .unwrap_err();
    assert_eq!(init.kafka_code(), Some(REFUSED), "{init}");
    producer.close().await.unwrap();
}
