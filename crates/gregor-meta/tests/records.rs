//! Record encoding, image application, deltas and snapshots.

mod common;
use common::*;
use gregor_meta::*;
use proptest::prelude::*;

fn samples() -> Vec<MetadataRecord> {
    let t = Uuid::from_u128(0xabcdef);
    vec![
        MetadataRecord::RegisterBroker(RegisterBrokerRecord {
            broker_id: 3,
            incarnation_id: Uuid::from_u128(7),
            broker_epoch: 1 << 40,
            endpoints: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "kafka-3.example".into(),
                port: 65535,
                security_protocol: 0,
            }],
            rack: Some("rack-b".into()),
            fenced: true,
        }),
        MetadataRecord::UnregisterBroker(BrokerEpochRecord {
            broker_id: 3,
            broker_epoch: 9,
        }),
        MetadataRecord::FenceBroker(BrokerEpochRecord {
            broker_id: 0,
            broker_epoch: -1,
        }),
        MetadataRecord::UnfenceBroker(BrokerEpochRecord {
            broker_id: i32::MAX,
            broker_epoch: i64::MAX,
        }),
        MetadataRecord::Topic(TopicRecord {
            name: "tp_demo_03".into(),
            topic_id: t,
        }),
        MetadataRecord::Partition(PartitionRecord {
            topic_id: t,
            partition: 2,
            replicas: vec![0, 1, 2],
            isr: vec![1, 0],
            removing_replicas: vec![2],
            adding_replicas: vec![],
            leader: 1,
            leader_recovery_state: LeaderRecoveryState::Recovering,
            leader_epoch: 5,
            partition_epoch: i32::MAX,
        }),
        MetadataRecord::PartitionChange(PartitionChangeRecord::new(t, 0)),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            topic_id: t,
            partition: 1,
            isr: Some(vec![]),
            leader: LeaderChange::To(NO_LEADER),
            replicas: Some(vec![4, 5]),
            removing_replicas: Some(vec![5]),
            adding_replicas: Some(vec![4]),
            leader_recovery_state: Some(LeaderRecoveryState::Recovered),
        }),
        MetadataRecord::RemoveTopic(RemoveTopicRecord { topic_id: t }),
        MetadataRecord::Config(ConfigRecord {
            resource: ConfigResource::topic("t"),
            name: "retention.ms".into(),
            value: Some("1".into()),
        }),
        MetadataRecord::Config(ConfigRecord {
            resource: ConfigResource::cluster_default(),
            name: "min.insync.replicas".into(),
            value: None,
        }),
        MetadataRecord::FeatureLevel(FeatureLevelRecord {
            name: "transaction.version".into(),
            level: 2,
        }),
    ]
}

#[test]
fn feature_levels_apply_snapshot_and_refuse_bad_bytes() {
    let level = |level| {
        MetadataRecord::FeatureLevel(FeatureLevelRecord {
            name: features::TRANSACTION_VERSION.into(),
            level,
        })
    };
    let image = MetadataImage::from_records(&[level(1), level(2)]).unwrap();
    assert_eq!(
        image
            .finalized_features()
            .level(features::TRANSACTION_VERSION),
        2
    );
    assert_eq!(image.to_records(), vec![level(2)]);
    assert_eq!(
        MetadataImage::from_records(&image.to_records()).unwrap(),
        image
    );
    let cleared = MetadataImage::from_records(&[level(2), level(0)]).unwrap();
    assert_eq!(cleared, MetadataImage::default());
    // A level that does not fit Kafka's int16 is a decode error, not a truncation.
    let mut bytes = level(2).encode();
    bytes.truncate(bytes.len() - 1);
    bytes.extend_from_slice(&[0x80, 0x80, 0x04]);
    assert!(MetadataRecord::decode(&bytes).is_err());
}

#[test]
fn every_record_type_round_trips() {
    for r in samples() {
        let bytes = r.encode();
        assert_eq!(MetadataRecord::decode(&bytes), Ok(r.clone()), "{r:?}");
    }
}

#[test]
fn encoding_is_compact_and_stable() {
    let r = MetadataRecord::FenceBroker(BrokerEpochRecord {
        broker_id: 1,
        broker_epoch: 2,
    });
    // type 2, version 0, zig-zag 1 -> 2, zig-zag 2 -> 4.
    assert_eq!(r.encode(), vec![2, 0, 2, 4]);
    let t = MetadataRecord::Topic(TopicRecord {
        name: "ab".into(),
        topic_id: Uuid::from_u128(1),
    });
    let mut expected = vec![4, 0, 2, b'a', b'b'];
    expected.extend_from_slice(Uuid::from_u128(1).as_bytes());
    assert_eq!(t.encode(), expected);
}

#[test]
fn bad_bytes_are_decode_errors_not_panics() {
    assert_eq!(
        MetadataRecord::decode(&[]),
        Err(DecodeError::Truncated("record type"))
    );
    assert_eq!(
        MetadataRecord::decode(&[42, 0]),
        Err(DecodeError::UnknownType(42))
    );
    assert_eq!(
        MetadataRecord::decode(&[2, 9, 0, 0]),
        Err(DecodeError::UnsupportedVersion {
            record_type: 2,
            version: 9
        })
    );
    assert_eq!(
        MetadataRecord::decode(&[2, 0, 2, 4, 0]),
        Err(DecodeError::TrailingBytes(1))
    );
    assert!(matches!(
        MetadataRecord::decode(&[2, 0, 0xff, 0xff, 0xff, 0xff, 0xff]),
        Err(DecodeError::Truncated(_))
    ));
    // A 64-bit value where a 32-bit broker id belongs.
    assert!(matches!(
        MetadataRecord::decode(&[2, 0, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 0]),
        Err(DecodeError::Invalid { .. })
    ));
    // Every truncation of every sample fails cleanly.
    for r in samples() {
        let bytes = r.encode();
        for n in 0..bytes.len() {
            assert!(
                MetadataRecord::decode(&bytes[..n]).is_err(),
                "{r:?} cut at {n}"
            );
        }
    }
}

#[test]
fn image_rejects_records_that_do_not_fit_and_stays_unchanged() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1]]))
        .unwrap();
    let id = c.image.topic("t").unwrap().id;
    let before = c.image.clone();
    let mut image = c.image.clone();
    let bad = vec![
        MetadataRecord::Topic(TopicRecord {
            name: "t".into(),
            topic_id: Uuid::from_u128(5),
        }),
        MetadataRecord::PartitionChange(PartitionChangeRecord::new(Uuid::from_u128(5), 0)),
        MetadataRecord::PartitionChange(PartitionChangeRecord::new(id, 9)),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            leader: LeaderChange::To(7),
            ..PartitionChangeRecord::new(id, 0)
        }),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            isr: Some(vec![0, 3]),
            ..PartitionChangeRecord::new(id, 0)
        }),
        MetadataRecord::PartitionChange(PartitionChangeRecord {
            replicas: Some(vec![0, 0]),
            ..PartitionChangeRecord::new(id, 0)
        }),
        MetadataRecord::FenceBroker(BrokerEpochRecord {
            broker_id: 9,
            broker_epoch: 1,
        }),
        MetadataRecord::FenceBroker(BrokerEpochRecord {
            broker_id: 0,
            broker_epoch: 999,
        }),
        MetadataRecord::RemoveTopic(RemoveTopicRecord {
            topic_id: Uuid::from_u128(5),
        }),
        MetadataRecord::Config(ConfigRecord {
            resource: ConfigResource::topic("nope"),
            name: "a".into(),
            value: Some("b".into()),
        }),
        MetadataRecord::Config(ConfigRecord {
            resource: ConfigResource {
                resource_type: ConfigResourceType::Broker,
                name: "x".into(),
            },
            name: "a".into(),
            value: Some("b".into()),
        }),
    ];
    for r in &bad {
        assert!(image.apply(r).is_err(), "{r:?}");
        assert_eq!(image, before, "unchanged after {r:?}");
    }
}

#[test]
fn partition_change_semantics() {
    let t = Uuid::from_u128(1);
    let mut image = MetadataImage::new();
    image
        .apply(&MetadataRecord::Topic(TopicRecord {
            name: "t".into(),
            topic_id: t,
        }))
        .unwrap();
    image
        .apply(&MetadataRecord::Partition(PartitionRecord {
            topic_id: t,
            partition: 0,
            replicas: vec![0, 1],
            isr: vec![0, 1],
            removing_replicas: vec![],
            adding_replicas: vec![],
            leader: 0,
            leader_recovery_state: LeaderRecoveryState::Recovered,
            leader_epoch: 0,
            partition_epoch: 0,
        }))
        .unwrap();
    let tp = TopicIdPartition {
        topic_id: t,
        partition: 0,
    };
    image
        .apply(&MetadataRecord::PartitionChange(PartitionChangeRecord {
            isr: Some(vec![0]),
            ..PartitionChangeRecord::new(t, 0)
        }))
        .unwrap();
    let p = image.partition_by_id(tp).unwrap();
    assert_eq!(
        (p.leader_epoch, p.partition_epoch, p.isr.clone()),
        (0, 1, vec![0]),
        "ISR change: partition epoch only"
    );
    let d = image
        .apply(&MetadataRecord::PartitionChange(PartitionChangeRecord {
            leader: LeaderChange::To(0),
            ..PartitionChangeRecord::new(t, 0)
        }))
        .unwrap();
    let p = image.partition_by_id(tp).unwrap();
    assert_eq!(
        (p.leader, p.leader_epoch, p.partition_epoch),
        (0, 1, 2),
        "setting the leader bumps the leader epoch"
    );
    let local = d.local_changes(0);
    assert!(local.leaders[0].role_changed);
    assert!(d.local_changes(1).followers[0].role_changed);
    assert!(d.local_changes(2).leaders.is_empty() && d.local_changes(2).followers.is_empty());
}

#[test]
fn deltas_merge_and_topic_create_then_delete_cancels() {
    let mut c = Cluster::with_brokers(&[0]);
    let res = c.controller.create_topics(&CreateTopicsRequest {
        topics: vec![CreatableTopic::new("t").with_layout(2, 1)],
        validate_only: false,
    });
    let mut records = res.records.clone();
    let id = res.response[0].result.as_ref().unwrap().topic_id;
    records.push(MetadataRecord::RemoveTopic(RemoveTopicRecord {
        topic_id: id,
    }));
    let mut image = c.image.clone();
    let delta = image.apply_all(&records).unwrap();
    assert!(delta.created_topics.is_empty() && delta.deleted_topics.is_empty());
    assert!(delta.changed_partitions.is_empty());
    assert!(delta.local_changes(0).leaders.is_empty());

    let d = c.commit(&res.records);
    assert_eq!(d.created_topics.get(&id).map(String::as_str), Some("t"));
    assert_eq!(d.local_changes(0).leaders.len(), 2);
    let res = c.controller.delete_topics(&[TopicRef::Name("t".into())]);
    let d = c.commit(&res.records);
    let stopped = d.local_changes(0).stopped;
    assert_eq!(stopped.len(), 2);
    assert!(stopped.iter().all(|s| s.delete && s.topic == "t"));
}

#[test]
fn snapshot_replays_to_the_same_image() {
    let mut c = Cluster::with_racks(&[(0, "a"), (1, "b"), (2, "a")]);
    c.create(
        CreatableTopic::new("x")
            .with_layout(6, 2)
            .with_config("cleanup.policy", "compact"),
    )
    .unwrap();
    c.create(CreatableTopic::new("y").with_assignment(vec![vec![2, 0]]))
        .unwrap();
    let res = c.controller.incremental_alter_configs(
        &[AlterConfigsResource {
            resource: ConfigResource::broker(1),
            configs: vec![AlterableConfig::set("min.insync.replicas", "2")],
        }],
        false,
    );
    c.commit(&res.records);
    c.advance(10_000, &[0, 1]);
    let snapshot = c.image.to_records();
    assert_eq!(MetadataImage::from_records(&snapshot).unwrap(), c.image);
    // And a controller replaying the whole log rebuilds the same state.
    let mut again = Controller::new(config::StaticBrokerConfig::new(), 1);
    again.replay_all(&c.log).unwrap();
    assert_eq!(again.image(), &c.image);
}

/// Random admin and broker activity, as a record log.
#[derive(Debug, Clone)]
enum Op {
    Create { name: u8, partitions: i32, rf: i16 },
    Delete { name: u8 },
    Grow { name: u8, by: i32 },
    Config { name: u8, retention: u32 },
    Tick { ms: i64, alive: Vec<bool> },
    Restart { broker: u8 },
    Elect,
    Reassign { name: u8, replicas: Vec<u8> },
    Shrink { name: u8 },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (0u8..5, 1i32..5, 1i16..4).prop_map(|(name, partitions, rf)| Op::Create {
            name,
            partitions,
            rf
        }),
        (0u8..5).prop_map(|name| Op::Delete { name }),
        (0u8..5, 1i32..3).prop_map(|(name, by)| Op::Grow { name, by }),
        (0u8..5, 0u32..100_000).prop_map(|(name, retention)| Op::Config { name, retention }),
        (1i64..12_000, proptest::collection::vec(any::<bool>(), 4))
            .prop_map(|(ms, alive)| Op::Tick { ms, alive }),
        (0u8..4).prop_map(|broker| Op::Restart { broker }),
        Just(Op::Elect),
        (0u8..5, proptest::collection::vec(0u8..4, 1..4))
            .prop_map(|(name, replicas)| Op::Reassign { name, replicas }),
        (0u8..5).prop_map(|name| Op::Shrink { name }),
    ]
}

fn run(ops: &[Op]) -> Cluster {
    let mut c = Cluster::with_racks(&[(0, "a"), (1, "b"), (2, "a"), (3, "c")]);
    let mut incarnation = 100;
    for op in ops {
        let name = |n: &u8| format!("topic-{n}");
        match op {
            Op::Create {
                name: n,
                partitions,
                rf,
            } => {
                let _ = c.create(CreatableTopic::new(name(n)).with_layout(*partitions, *rf));
            }
            Op::Delete { name: n } => {
                let res = c.controller.delete_topics(&[TopicRef::Name(name(n))]);
                c.commit(&res.records);
            }
            Op::Grow { name: n, by } => {
                if let Some(t) = c.image.topic(&name(n)) {
                    let count = t.partitions.len() as i32 + by;
                    let res = c.controller.create_partitions(
                        &[CreatePartitionsTopic {
                            name: name(n),
                            count,
                            assignments: None,
                        }],
                        false,
                    );
                    c.commit(&res.records);
                }
            }
            Op::Config { name: n, retention } => {
                let res = c.controller.incremental_alter_configs(
                    &[AlterConfigsResource {
                        resource: ConfigResource::topic(name(n)),
                        configs: vec![AlterableConfig::set("retention.ms", &retention.to_string())],
                    }],
                    false,
                );
                c.commit(&res.records);
            }
            Op::Tick { ms, alive } => {
                let alive: Vec<BrokerId> = (0..4)
                    .filter(|&b| alive[b as usize] && c.image.is_broker_active(b))
                    .collect();
                c.advance(*ms, &alive);
            }
            Op::Restart { broker } => {
                let b = BrokerId::from(*broker);
                if c.image.broker(b).is_some_and(|r| r.fenced) {
                    incarnation += 1;
                    c.register(b, Some(["a", "b", "a", "c"][*broker as usize]), incarnation);
                    c.heartbeat(b, false);
                }
            }
            Op::Elect => {
                let res = c.controller.elect_leaders(ElectionType::Preferred, None);
                c.commit(&res.records);
            }
            Op::Reassign { name: n, replicas } => {
                let mut target: Vec<BrokerId> =
                    replicas.iter().map(|&b| BrokerId::from(b)).collect();
                target.dedup();
                let res = c.controller.alter_partition_reassignments(&[(
                    TopicPartition::new(name(n), 0),
                    Some(target),
                )]);
                c.commit(&res.records);
            }
            Op::Shrink { name: n } => {
                // The leader of partition 0 proposes ISR = leader + adding replicas (catching up).
                if let Some(p) = c.image.partition(&TopicPartition::new(name(n), 0)).cloned() {
                    if p.leader != NO_LEADER {
                        let mut isr = vec![p.leader];
                        isr.extend(
                            p.adding_replicas
                                .iter()
                                .filter(|&&b| c.image.is_broker_active(b) && b != p.leader),
                        );
                        let _ = c.alter_isr(&name(n), 0, isr);
                    }
                }
            }
        }
    }
    c
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn encoded_log_and_snapshot_rebuild_the_same_image(ops in proptest::collection::vec(op(), 1..40)) {
        let c = run(&ops);
        // Round trip every record through bytes.
        let decoded: Vec<MetadataRecord> = c.log.iter().map(|r| MetadataRecord::decode(&r.encode()).unwrap()).collect();
        prop_assert_eq!(&decoded, &c.log);
        let from_bytes = MetadataImage::from_records(&decoded).unwrap();
        prop_assert_eq!(&from_bytes, &c.image);
        // A snapshot of the image replays to the same image.
        let snapshot = c.image.to_records();
        let from_snapshot = MetadataImage::from_records(&snapshot).unwrap();
        prop_assert_eq!(&from_snapshot, &c.image);
        // Invariants of every partition.
        for t in c.image.topics().values() {
            for p in t.partitions.values() {
                prop_assert!(p.validate().is_ok());
                prop_assert!(!p.isr.is_empty(), "the ISR is never empty");
                if p.leader != NO_LEADER {
                    prop_assert!(c.image.is_broker_active(p.leader), "leaders are live");
                    prop_assert!(p.isr.contains(&p.leader) || p.leader_recovery_state == LeaderRecoveryState::Recovering);
                }
            }
        }
    }
}
