//! gregor-client against a real Gregor broker: the `gregor` binary is started on a free port
//! with a scratch data directory, and the admin calls are checked end to end.
//!
//! They need `target/debug/gregor`: `cargo test --workspace` builds it before running any test;
//! alone, run `cargo build -p gregor-cli` first.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use gregor_client::admin::{
    AlterConfigOp, ConfigResource, ConfigSource, CreateTopicsOptions, IsolationLevel,
    NewPartitions, NewTopic, OffsetSpec,
};
use gregor_client::{Admin, ClientConfig, KafkaCode, TopicPartition};

mod common;
use common::gregor_binary;

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

    /// An admin client; its connect budget covers the broker's start-up.
    async fn admin(&self) -> Admin {
        let mut config = ClientConfig::new(&format!("127.0.0.1:{}", self.port)).unwrap();
        config.connect_timeout = Duration::from_secs(20);
        config.api_timeout = Duration::from_secs(20);
        Admin::connect(config).await.expect("broker reachable")
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn topic(name: &str, partitions: i32) -> NewTopic {
    NewTopic {
        name: name.into(),
        num_partitions: Some(partitions),
        replication_factor: Some(1),
        ..Default::default()
    }
}

#[tokio::test]
async fn topic_lifecycle() {
    let broker = Broker::start();
    let admin = broker.admin().await;

    let created = admin
        .create_topics(vec![topic("orders", 3)], CreateTopicsOptions::default())
        .await
        .unwrap();
    assert!(created[0].1.is_ok(), "{created:?}");
    let again = admin
        .create_topics(vec![topic("orders", 3)], CreateTopicsOptions::default())
        .await
        .unwrap();
    assert_eq!(
        again[0].1.as_ref().unwrap_err().code,
        KafkaCode::TOPIC_ALREADY_EXISTS
    );

    let listed: Vec<String> = admin
        .list_topics(false)
        .await
        .unwrap()
        .into_iter()
        .map(|t| t.name)
        .collect();
    assert!(listed.contains(&"orders".to_string()), "{listed:?}");

    let described = admin.describe_topics(&["orders".into()]).await.unwrap();
    let t = &described[0];
    assert_eq!(t.partitions.len(), 3);
    assert!(!t.topic_id.is_nil());
    for p in &t.partitions {
        assert!(p.leader.is_some());
        assert_eq!(p.replicas.len(), 1);
        assert_eq!(p.isr, p.replicas);
    }

    let grown = admin
        .create_partitions(
            vec![NewPartitions {
                topic: "orders".into(),
                total_count: 5,
                assignments: None,
            }],
            false,
            10_000,
        )
        .await
        .unwrap();
    assert_eq!(grown[0].1, Ok(()));
    let shrink = admin
        .create_partitions(
            vec![NewPartitions {
                topic: "orders".into(),
                total_count: 2,
                assignments: None,
            }],
            false,
            10_000,
        )
        .await
        .unwrap();
    assert_eq!(
        shrink[0].1.as_ref().unwrap_err().code,
        KafkaCode::INVALID_PARTITIONS
    );
    assert_eq!(
        admin.describe_topics(&["orders".into()]).await.unwrap()[0]
            .partitions
            .len(),
        5
    );

    let deleted = admin
        .delete_topics(&["orders".into()], 10_000)
        .await
        .unwrap();
    assert_eq!(deleted[0].1, Ok(()));
    let gone = admin.describe_topics(&["orders".into()]).await.unwrap_err();
    assert_eq!(
        gone.kafka_code(),
        Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
        "{gone}"
    );
}

#[tokio::test]
async fn impossible_topics_get_kafka_error_codes() {
    let broker = Broker::start();
    let admin = broker.admin().await;
    let results = admin
        .create_topics(
            vec![
                topic("zero", 0),
                NewTopic {
                    replication_factor: Some(3),
                    ..topic("too-many-replicas", 1)
                },
                NewTopic {
                    replica_assignment: Some(vec![vec![42]]),
                    ..NewTopic {
                        name: "unknown-broker".into(),
                        ..Default::default()
                    }
                },
            ],
            CreateTopicsOptions::default(),
        )
        .await
        .unwrap();
    let codes: BTreeMap<String, KafkaCode> = results
        .into_iter()
        .map(|(t, r)| (t, r.unwrap_err().code))
        .collect();
    assert_eq!(codes["zero"], KafkaCode::INVALID_PARTITIONS);
    assert_eq!(
        codes["too-many-replicas"],
        KafkaCode::INVALID_REPLICATION_FACTOR
    );
    assert_eq!(
        codes["unknown-broker"],
        KafkaCode::INVALID_REPLICA_ASSIGNMENT
    );

    let validate_only = admin
        .create_topics(
            vec![topic("dry", 2)],
            CreateTopicsOptions {
                validate_only: true,
                timeout_ms: 10_000,
            },
        )
        .await
        .unwrap();
    assert!(validate_only[0].1.is_ok());
    let err = admin.describe_topics(&["dry".into()]).await.unwrap_err();
    assert_eq!(
        err.kafka_code(),
        Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION)
    );
}

#[tokio::test]
async fn cluster_offsets_and_configs() {
    let broker = Broker::start();
    let admin = broker.admin().await;
    let cluster = admin.describe_cluster().await.unwrap();
    assert_eq!(cluster.brokers.len(), 1);
    assert_eq!(cluster.brokers[0].port, i32::from(broker.port));

    admin
        .create_topics(vec![topic("events", 2)], CreateTopicsOptions::default())
        .await
        .unwrap();
    let asked: Vec<(TopicPartition, OffsetSpec)> = [OffsetSpec::Earliest, OffsetSpec::Latest]
        .into_iter()
        .enumerate()
        .map(|(p, spec)| (TopicPartition::new("events", p as i32), spec))
        .chain([(TopicPartition::new("events", 9), OffsetSpec::Latest)])
        .collect();
    let offsets = admin
        .list_offsets(&asked, IsolationLevel::ReadUncommitted)
        .await
        .unwrap();
    assert_eq!(
        offsets[&TopicPartition::new("events", 0)]
            .as_ref()
            .unwrap()
            .offset,
        0
    );
    assert_eq!(
        offsets[&TopicPartition::new("events", 1)]
            .as_ref()
            .unwrap()
            .offset,
        0
    );
    assert_eq!(
        offsets[&TopicPartition::new("events", 9)]
            .as_ref()
            .unwrap_err()
            .code,
        KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
    );

    let resource = ConfigResource::topic("events");
    let altered = admin
        .incremental_alter_configs(
            &[(
                resource.clone(),
                vec![AlterConfigOp::Set {
                    name: "retention.ms".into(),
                    value: "1000".into(),
                }],
            )],
            false,
        )
        .await
        .unwrap();
    assert_eq!(altered[0].1, Ok(()));
    let described = admin
        .describe_configs(std::slice::from_ref(&resource), true, false)
        .await
        .unwrap();
    let entries = described[0].1.as_ref().unwrap();
    let retention = entries.iter().find(|e| e.name == "retention.ms").unwrap();
    assert_eq!(retention.value.as_deref(), Some("1000"));
    assert_eq!(retention.source, ConfigSource::DynamicTopic);

    let bad = admin
        .incremental_alter_configs(
            &[(
                resource,
                vec![AlterConfigOp::Set {
                    name: "retention.ms".into(),
                    value: "soon".into(),
                }],
            )],
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        bad[0].1.as_ref().unwrap_err().code,
        KafkaCode::INVALID_CONFIG
    );
}

#[tokio::test]
async fn group_offsets_reset_and_delete() {
    let broker = Broker::start();
    let admin = broker.admin().await;
    admin
        .create_topics(
            vec![topic("b1.offsets.demo", 3)],
            CreateTopicsOptions::default(),
        )
        .await
        .unwrap();
    // An inactive group's offsets, committed from outside it as --reset-offsets does.
    let offsets: BTreeMap<TopicPartition, i64> = (0..3)
        .map(|p| (TopicPartition::new("b1.offsets.demo", p), 0))
        .collect();
    let committed = admin
        .alter_committed_offsets("b1.rebal.group", &offsets)
        .await
        .unwrap();
    assert!(committed.iter().all(|(_, r)| r.is_ok()), "{committed:?}");

    let fetched = admin
        .list_committed_offsets("b1.rebal.group", None, false)
        .await
        .unwrap();
    assert_eq!(fetched.len(), 3);
    let some = admin
        .list_committed_offsets(
            "b1.rebal.group",
            Some(&[TopicPartition::new("b1.offsets.demo", 1)]),
            false,
        )
        .await
        .unwrap();
    assert_eq!(
        some.keys().cloned().collect::<Vec<_>>(),
        vec![TopicPartition::new("b1.offsets.demo", 1)]
    );

    let group = admin.describe_group("b1.rebal.group").await.unwrap();
    assert_eq!(group.state, "Empty");
    assert!(group.members.is_empty());
    let groups = admin.list_groups(&[], &[]).await.unwrap();
    assert!(
        groups.iter().any(|g| g.group_id == "b1.rebal.group"),
        "{groups:?}"
    );

    let deleted = admin.delete_groups(&["b1.rebal.group".into()]).await;
    assert!(deleted[0].1.is_ok(), "{deleted:?}");
    let after = admin.describe_group("b1.rebal.group").await;
    assert!(
        gregor_client::admin::groups::is_missing_group(&after),
        "{after:?}"
    );
}
