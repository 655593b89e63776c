//! CreateTopics / DeleteTopics / CreatePartitions request paths.

mod common;
use common::*;
use gregor_meta::*;

#[test]
fn single_node_create_uses_broker_defaults() {
    let mut c = Cluster::with_brokers(&[0]);
    let created = c.create(CreatableTopic::new("tp_re_01")).unwrap();
    assert_eq!(created.num_partitions, 1, "num.partitions defaults to 1");
    assert_eq!(created.replication_factor, 1);
    let p = c.partition("tp_re_01", 0);
    assert_eq!(
        (p.leader, p.replicas.clone(), p.isr.clone()),
        (0, vec![0], vec![0])
    );
    assert_eq!((p.leader_epoch, p.partition_epoch), (0, 0));
    assert_eq!(c.image.topic("tp_re_01").unwrap().id, created.topic_id);
    // The response carries the effective configs.
    let retention = created
        .configs
        .iter()
        .find(|e| e.name == "retention.ms")
        .unwrap();
    assert_eq!(retention.value.as_deref(), Some("604800000"));
}

#[test]
fn static_num_partitions_and_replication_factor_apply_to_minus_one() {
    let mut c = Cluster::new(&[
        ("node.id", "0"),
        ("num.partitions", "3"),
        ("default.replication.factor", "2"),
    ]);
    c.add_broker(0, None);
    c.add_broker(1, None);
    let created = c.create(CreatableTopic::new("t")).unwrap();
    assert_eq!((created.num_partitions, created.replication_factor), (3, 2));
}

#[test]
fn five_partitions_on_one_broker_like_the_seed() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("tp_re_01").with_layout(5, 1))
        .unwrap();
    for p in 0..5 {
        let part = c.partition("tp_re_01", p);
        assert_eq!(
            (part.leader, part.replicas, part.isr),
            (0, vec![0], vec![0])
        );
    }
}

#[test]
fn manual_replica_assignment_first_replica_leads() {
    // kafka-topics.sh --create --topic tp_demo_03 --replica-assignment "0:1,1:0,0:1"
    let mut c = Cluster::with_brokers(&[0, 1]);
    let created = c
        .create(CreatableTopic::new("tp_demo_03").with_assignment(vec![
            vec![0, 1],
            vec![1, 0],
            vec![0, 1],
        ]))
        .unwrap();
    assert_eq!((created.num_partitions, created.replication_factor), (3, 2));
    let leaders: Vec<_> = (0..3)
        .map(|p| c.partition("tp_demo_03", p).leader)
        .collect();
    assert_eq!(leaders, vec![0, 1, 0]);
    assert_eq!(c.partition("tp_demo_03", 1).replicas, vec![1, 0]);
    assert_eq!(c.partition("tp_demo_03", 1).isr, vec![1, 0]);
}

#[test]
fn manual_assignment_with_fenced_broker_leaves_it_out_of_the_isr() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.advance(20_000, &[0]); // broker 1 fenced
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![1, 0]]))
        .unwrap();
    let p = c.partition("t", 0);
    assert_eq!((p.leader, p.isr), (0, vec![0]));
    let e = c.create(CreatableTopic::new("u").with_assignment(vec![vec![1]]));
    assert_eq!(code(&e), ResponseError::InvalidReplicaAssignment);
}

#[test]
fn invalid_names_are_invalid_topic_exception() {
    let mut c = Cluster::with_brokers(&[0]);
    let long = "a".repeat(250);
    for name in [
        "",
        ".",
        "..",
        "has space",
        "slash/",
        "ünïcode",
        long.as_str(),
    ] {
        let e = c.create(CreatableTopic::new(name));
        assert_eq!(code(&e), ResponseError::InvalidTopicException, "{name:?}");
    }
    assert!(c.create(CreatableTopic::new("a".repeat(249))).is_ok());
    assert!(c.image.topics().len() == 1);
}

#[test]
fn existing_topic_and_collisions() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("a.b")).unwrap();
    let e = c.create(CreatableTopic::new("a.b"));
    assert_eq!(code(&e), ResponseError::TopicAlreadyExists);
    assert_eq!(e.unwrap_err().message, "Topic 'a.b' already exists.");
    let e = c.create(CreatableTopic::new("a_b"));
    assert_eq!(code(&e), ResponseError::InvalidTopicException);
    assert!(e
        .unwrap_err()
        .message
        .contains("collides with existing topic: a.b"));
    // '-' is not a collision character.
    assert!(c.create(CreatableTopic::new("a-b")).is_ok());
}

#[test]
fn collision_within_one_request_and_duplicates() {
    let mut c = Cluster::with_brokers(&[0]);
    let res = c.controller.create_topics(&CreateTopicsRequest {
        topics: vec![
            CreatableTopic::new("x.y"),
            CreatableTopic::new("x_y"),
            CreatableTopic::new("dup"),
            CreatableTopic::new("dup"),
            CreatableTopic::new("ok"),
        ],
        validate_only: false,
    });
    let codes: Vec<_> = res
        .response
        .iter()
        .map(|r| r.result.as_ref().err().map(|e| e.code))
        .collect();
    assert_eq!(
        codes,
        vec![
            None,
            Some(ResponseError::InvalidTopicException),
            Some(ResponseError::InvalidRequest),
            Some(ResponseError::InvalidRequest),
            None
        ]
    );
    c.commit(&res.records);
    assert_eq!(
        c.image.topic_ids().keys().cloned().collect::<Vec<_>>(),
        vec!["ok", "x.y"]
    );
}

#[test]
fn bad_partition_counts_and_replication_factors() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    for n in [0, -2, i32::MIN] {
        let e = c.create(CreatableTopic::new("t").with_layout(n, 1));
        assert_eq!(code(&e), ResponseError::InvalidPartitions, "{n}");
    }
    for rf in [0, -2] {
        let e = c.create(CreatableTopic::new("t").with_layout(1, rf));
        assert_eq!(code(&e), ResponseError::InvalidReplicationFactor, "{rf}");
    }
    let e = c.create(CreatableTopic::new("t").with_layout(1, 3));
    assert_eq!(code(&e), ResponseError::InvalidReplicationFactor);
    assert!(e.unwrap_err().message.contains("only 2 broker(s)"));
    // Fenced brokers do not count.
    c.advance(20_000, &[0]);
    let e = c.create(CreatableTopic::new("t").with_layout(1, 2));
    assert_eq!(code(&e), ResponseError::InvalidReplicationFactor);
    let e = c.create(CreatableTopic::new("t").with_layout(20_000, 1));
    assert_eq!(code(&e), ResponseError::PolicyViolation);
    assert!(c.image.topics().is_empty());
}

#[test]
fn bad_manual_assignments() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    let cases: Vec<(CreatableTopic, ResponseError)> = vec![
        (
            CreatableTopic::new("t").with_assignment(vec![vec![]]),
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatableTopic::new("t").with_assignment(vec![vec![0, 0]]),
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatableTopic::new("t").with_assignment(vec![vec![0, 7]]),
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatableTopic::new("t").with_assignment(vec![vec![0, 1], vec![1]]),
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatableTopic {
                assignments: vec![(0, vec![0]), (2, vec![1])],
                ..CreatableTopic::new("t")
            },
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatableTopic {
                assignments: vec![(0, vec![0]), (0, vec![1])],
                ..CreatableTopic::new("t")
            },
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatableTopic::new("t")
                .with_assignment(vec![vec![0]])
                .with_layout(1, -1),
            ResponseError::InvalidRequest,
        ),
        (
            CreatableTopic::new("t")
                .with_assignment(vec![vec![0]])
                .with_layout(-1, 1),
            ResponseError::InvalidRequest,
        ),
    ];
    for (t, expected) in cases {
        let e = c.create(t.clone());
        assert_eq!(code(&e), expected, "{t:?}");
    }
    assert!(c.image.topics().is_empty());
}

#[test]
fn invalid_configs_are_invalid_config() {
    let mut c = Cluster::with_brokers(&[0]);
    let cases = [
        ("no.such.config", "1"),
        ("retention.ms", "-2"),
        ("retention.ms", "soon"),
        ("cleanup.policy", "compact,archive"),
        ("min.insync.replicas", "0"),
        ("message.timestamp.type", "createtime"),
        ("compression.type", "brotli"),
        ("unclean.leader.election.enable", "yes"),
        ("min.cleanable.dirty.ratio", "1.5"),
        ("segment.bytes", "13"),
    ];
    for (k, v) in cases {
        let e = c.create(CreatableTopic::new("t").with_config(k, v));
        assert_eq!(code(&e), ResponseError::InvalidConfig, "{k}={v}");
        assert!(
            e.unwrap_err().message.contains(k),
            "error names the key {k}"
        );
    }
    let e = c.create(
        CreatableTopic::new("t")
            .with_config("min.compaction.lag.ms", "10")
            .with_config("max.compaction.lag.ms", "5"),
    );
    assert_eq!(code(&e), ResponseError::InvalidConfig);
    let e = c.create(CreatableTopic {
        configs: vec![("retention.ms".into(), None)],
        ..CreatableTopic::new("t")
    });
    assert_eq!(code(&e), ResponseError::InvalidConfig);
    assert!(c.image.topics().is_empty());
}

#[test]
fn configs_are_stored_and_described_as_topic_overrides() {
    let mut c = Cluster::with_brokers(&[0]);
    let created = c
        .create(
            CreatableTopic::new("compacted")
                .with_config("cleanup.policy", "compact")
                .with_config("retention.ms", "1000"),
        )
        .unwrap();
    let policy = created
        .configs
        .iter()
        .find(|e| e.name == "cleanup.policy")
        .unwrap();
    assert_eq!(policy.value.as_deref(), Some("compact"));
    assert_eq!(policy.source, config::ConfigSource::DynamicTopicConfig);
    let overrides = c
        .image
        .configs(&ConfigResource::topic("compacted"))
        .unwrap();
    assert_eq!(
        overrides.get("retention.ms").map(String::as_str),
        Some("1000")
    );
    // Record order: topic, its configs, its partitions.
    let tail: Vec<&str> = c.log[c.log.len() - 4..]
        .iter()
        .map(|r| match r {
            MetadataRecord::Topic(_) => "topic",
            MetadataRecord::Config(_) => "config",
            MetadataRecord::Partition(_) => "partition",
            _ => "other",
        })
        .collect();
    assert_eq!(tail, vec!["topic", "config", "config", "partition"]);
}

#[test]
fn validate_only_produces_no_records_but_full_answers() {
    let mut c = Cluster::with_brokers(&[0]);
    let res = c.controller.create_topics(&CreateTopicsRequest {
        topics: vec![
            CreatableTopic::new("v").with_layout(4, 1),
            CreatableTopic::new("bad name"),
        ],
        validate_only: true,
    });
    assert!(res.records.is_empty());
    let ok = res.response[0].result.as_ref().unwrap();
    assert_eq!(ok.num_partitions, 4);
    assert_eq!(
        code(&res.response[1].result),
        ResponseError::InvalidTopicException
    );
    assert!(c.image.topic("v").is_none());
}

#[test]
fn delete_topics_by_name_and_id() {
    let mut c = Cluster::with_brokers(&[0]);
    let a = c.create(CreatableTopic::new("a")).unwrap().topic_id;
    c.create(CreatableTopic::new("b").with_config("retention.ms", "5"))
        .unwrap();
    let res = c.controller.delete_topics(&[
        TopicRef::Id(a),
        TopicRef::Name("b".into()),
        TopicRef::Name("missing".into()),
        TopicRef::Id(Uuid::from_u128(99)),
    ]);
    assert_eq!(res.response[0].result, Ok(("a".to_string(), a)));
    assert_eq!(res.response[1].result.as_ref().unwrap().0, "b");
    assert_eq!(
        code(&res.response[2].result),
        ResponseError::UnknownTopicOrPartition
    );
    assert_eq!(code(&res.response[3].result), ResponseError::UnknownTopicId);
    let delta = c.commit(&res.records);
    assert!(c.image.topics().is_empty());
    assert!(
        c.image.configs(&ConfigResource::topic("b")).is_none(),
        "configs go with the topic"
    );
    assert_eq!(delta.deleted_topics.len(), 2);
    // The name is free again.
    assert!(c.create(CreatableTopic::new("b")).is_ok());
}

#[test]
fn delete_topics_duplicates_and_disabled() {
    let mut c = Cluster::with_brokers(&[0]);
    let id = c.create(CreatableTopic::new("a")).unwrap().topic_id;
    let res = c
        .controller
        .delete_topics(&[TopicRef::Name("a".into()), TopicRef::Name("a".into())]);
    assert!(res
        .response
        .iter()
        .all(|r| code(&r.result) == ResponseError::InvalidRequest));
    assert!(res.records.is_empty());
    let res = c
        .controller
        .delete_topics(&[TopicRef::Name("a".into()), TopicRef::Id(id)]);
    assert!(res.response[0].result.is_ok());
    assert_eq!(code(&res.response[1].result), ResponseError::InvalidRequest);
    assert_eq!(res.records.len(), 1);

    let mut c = Cluster::new(&[("node.id", "0"), ("delete.topic.enable", "false")]);
    c.add_broker(0, None);
    c.create(CreatableTopic::new("a")).unwrap();
    let res = c.controller.delete_topics(&[TopicRef::Name("a".into())]);
    assert_eq!(
        code(&res.response[0].result),
        ResponseError::TopicDeletionDisabled
    );
    assert!(res.records.is_empty());
}

#[test]
fn create_partitions_grows_topics() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_layout(2, 2))
        .unwrap();
    let res = c.controller.create_partitions(
        &[CreatePartitionsTopic {
            name: "t".into(),
            count: 5,
            assignments: None,
        }],
        false,
    );
    assert!(res.response[0].1.is_ok());
    c.commit(&res.records);
    assert_eq!(c.image.topic("t").unwrap().partitions.len(), 5);
    for p in 2..5 {
        let part = c.partition("t", p);
        assert_eq!(part.replicas.len(), 2, "same replication factor");
        assert_eq!(part.leader, part.replicas[0]);
    }
    let res = c.controller.create_partitions(
        &[CreatePartitionsTopic {
            name: "t".into(),
            count: 6,
            assignments: Some(vec![vec![2, 0]]),
        }],
        false,
    );
    assert!(res.response[0].1.is_ok());
    c.commit(&res.records);
    assert_eq!(c.partition("t", 5).replicas, vec![2, 0]);
}

#[test]
fn create_partitions_bad_input() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(CreatableTopic::new("t").with_layout(3, 2))
        .unwrap();
    let cases = vec![
        (
            CreatePartitionsTopic {
                name: "t".into(),
                count: 3,
                assignments: None,
            },
            ResponseError::InvalidPartitions,
        ),
        (
            CreatePartitionsTopic {
                name: "t".into(),
                count: 2,
                assignments: None,
            },
            ResponseError::InvalidPartitions,
        ),
        (
            CreatePartitionsTopic {
                name: "nope".into(),
                count: 4,
                assignments: None,
            },
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            CreatePartitionsTopic {
                name: "t".into(),
                count: 5,
                assignments: Some(vec![vec![0, 1]]),
            },
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatePartitionsTopic {
                name: "t".into(),
                count: 4,
                assignments: Some(vec![vec![0]]),
            },
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatePartitionsTopic {
                name: "t".into(),
                count: 4,
                assignments: Some(vec![vec![0, 9]]),
            },
            ResponseError::InvalidReplicaAssignment,
        ),
        (
            CreatePartitionsTopic {
                name: "t".into(),
                count: 50_000,
                assignments: None,
            },
            ResponseError::PolicyViolation,
        ),
    ];
    for (t, expected) in cases {
        let res = c
            .controller
            .create_partitions(std::slice::from_ref(&t), false);
        assert_eq!(code(&res.response[0].1), expected, "{t:?}");
        assert!(res.records.is_empty());
    }
    let dup = CreatePartitionsTopic {
        name: "t".into(),
        count: 4,
        assignments: None,
    };
    let res = c.controller.create_partitions(&[dup.clone(), dup], false);
    assert!(res
        .response
        .iter()
        .all(|r| code(&r.1) == ResponseError::InvalidRequest));
    // Not enough live brokers for the topic's replication factor.
    c.advance(20_000, &[0]);
    let res = c.controller.create_partitions(
        &[CreatePartitionsTopic {
            name: "t".into(),
            count: 4,
            assignments: None,
        }],
        false,
    );
    assert_eq!(
        code(&res.response[0].1),
        ResponseError::InvalidReplicationFactor
    );
    // validate_only answers without records.
    let res = c.controller.create_partitions(
        &[CreatePartitionsTopic {
            name: "t".into(),
            count: 4,
            assignments: Some(vec![vec![0, 1]]),
        }],
        true,
    );
    assert!(res.response[0].1.is_ok());
    assert!(res.records.is_empty());
}
