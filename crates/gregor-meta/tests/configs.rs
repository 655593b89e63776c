//! Config definitions, static broker config, IncrementalAlterConfigs and DescribeConfigs.

mod common;
use common::*;
use gregor_meta::config::*;
use gregor_meta::*;

#[test]
fn every_default_parses_and_validates() {
    for d in TOPIC_CONFIGS
        .iter()
        .chain(BROKER_CONFIGS)
        .chain(GROUP_CONFIGS)
    {
        if let Some(default) = d.default {
            d.parse(default)
                .unwrap_or_else(|e| panic!("{}: {e}", d.name));
        }
        assert!(!d.doc.is_empty(), "{} has documentation", d.name);
    }
}

#[test]
fn names_are_unique_and_synonyms_are_broker_configs() {
    for table in [TOPIC_CONFIGS, BROKER_CONFIGS] {
        let mut names: Vec<_> = table.iter().map(|d| d.name).collect();
        names.sort_unstable();
        let before = names.len();
        names.dedup();
        assert_eq!(before, names.len());
    }
    // Kafka gives these two no broker-level default: a throttle names replicas of one topic.
    let topic_only = [
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    ];
    for d in TOPIC_CONFIGS {
        assert_eq!(
            d.synonyms.is_empty(),
            topic_only.contains(&d.name),
            "{} has a broker default unless it is topic-only",
            d.name
        );
        for s in d.synonyms {
            let b =
                broker_config(s.name).unwrap_or_else(|| panic!("{} -> {} missing", d.name, s.name));
            assert_eq!(
                b.ty == ConfigType::List,
                d.ty == ConfigType::List,
                "{} and {} agree on list-ness",
                d.name,
                s.name
            );
        }
    }
}

#[test]
fn kafka_defaults() {
    let get = |n: &str| topic_config(n).unwrap().default;
    assert_eq!(get("retention.ms"), Some("604800000"));
    assert_eq!(get("segment.bytes"), Some("1073741824"));
    assert_eq!(get("cleanup.policy"), Some("delete"));
    assert_eq!(get("max.message.bytes"), Some("1048588"));
    assert_eq!(get("unclean.leader.election.enable"), Some("false"));
    assert_eq!(
        topic_config("retention.ms").unwrap().broker_default_name(),
        Some("log.retention.ms")
    );
    let b = |n: &str| broker_config(n).unwrap().default;
    assert_eq!(b("num.partitions"), Some("1"));
    assert_eq!(b("default.replication.factor"), Some("1"));
    assert_eq!(b("offsets.topic.num.partitions"), Some("50"));
    assert_eq!(b("replica.lag.time.max.ms"), Some("30000"));
    assert_eq!(b("leader.imbalance.per.broker.percentage"), Some("10"));
    assert_eq!(b("leader.imbalance.check.interval.seconds"), Some("300"));
    assert_eq!(b("group.initial.rebalance.delay.ms"), Some("3000"));
    assert_eq!(b("group.min.session.timeout.ms"), Some("6000"));
    assert_eq!(b("group.max.session.timeout.ms"), Some("1800000"));
    // Failure detection is faster than Kafka's (docs/configuration.md says why).
    assert_eq!(b("broker.session.timeout.ms"), Some("1500"));
    assert_eq!(b("broker.heartbeat.interval.ms"), Some("250"));
    assert_eq!(b("controller.quorum.election.timeout.ms"), Some("300"));
    assert_eq!(b("socket.request.max.bytes"), Some("104857600"));
}

#[test]
fn parse_errors_name_the_key_and_the_problem() {
    let e = parse_topic_config("retention.ms", "-5").unwrap_err();
    assert_eq!(
        e.to_string(),
        "Invalid value -5 for configuration retention.ms: Value must be at least -1"
    );
    let e = parse_topic_config("segment.bytes", "big").unwrap_err();
    assert_eq!(
        e.to_string(),
        "Invalid value big for configuration segment.bytes: Not a number of type INT"
    );
    let e = parse_topic_config("cleanup.policy", "delete,shred").unwrap_err();
    assert!(e.to_string().contains("shred") && e.to_string().contains("compact, delete"));
    let e = parse_topic_config("preallocate", "maybe").unwrap_err();
    assert!(e.to_string().contains("either true or false"));
    let e = parse_topic_config("retention.hours", "1").unwrap_err();
    assert_eq!(e.to_string(), "Unknown topic config name: retention.hours");
    assert_eq!(
        parse_topic_config("preallocate", " TRUE ").unwrap(),
        ConfigValue::Bool(true)
    );
    assert_eq!(
        parse_topic_config("cleanup.policy", "compact, delete").unwrap(),
        ConfigValue::List(vec!["compact".into(), "delete".into()])
    );
    assert!(parse_topic_config("min.cleanable.dirty.ratio", "NaN").is_err());
    assert!(
        parse_topic_config("segment.bytes", "3000000000").is_err(),
        "INT overflow"
    );
    assert_eq!(parse_broker_config("offsets.topic.replication.factor", "40000").unwrap_err().to_string(),
        "Invalid value 40000 for configuration offsets.topic.replication.factor: Not a number of type SHORT");
}

#[test]
fn static_config_debug_hides_secrets() {
    let jaas = "org.apache.kafka.common.security.plain.PlainLoginModule required username=\"n\" password=\"s3cret-pw\";";
    let cfg = StaticBrokerConfig::from_pairs([
        ("num.partitions", "4"),
        ("listener.name.sasl_ssl.plain.sasl.jaas.config", jaas),
        ("ssl.key.password", "key-pw-1"),
    ])
    .unwrap();
    let shown = format!("{cfg:?}");
    assert!(shown.contains("\"num.partitions\": \"4\""), "{shown}");
    assert!(
        !shown.contains("s3cret-pw") && !shown.contains("key-pw-1"),
        "{shown}"
    );
    assert!(shown.contains("[hidden]"), "{shown}");
}

#[test]
fn static_config_rejects_unknown_and_invalid_settings() {
    let e = StaticBrokerConfig::from_pairs([("num.partitons", "3")]).unwrap_err();
    assert_eq!(e.to_string(), "Unknown broker config name: num.partitons");
    let e = StaticBrokerConfig::from_pairs([("num.partitions", "0")]).unwrap_err();
    assert!(e.to_string().contains("num.partitions"));
    let e = StaticBrokerConfig::from_pairs([("process.roles", "broker,zookeeper")]).unwrap_err();
    assert!(e.to_string().contains("zookeeper"));
    let cfg = StaticBrokerConfig::from_pairs(parse_properties("broker.id=3\nnum.partitions = 4\n"))
        .unwrap();
    assert_eq!(cfg.node_id(), 3);
    assert_eq!(cfg.get("num.partitions"), Some(ConfigValue::Int(4)));
    assert_eq!(
        cfg.get("default.replication.factor"),
        Some(ConfigValue::Int(1))
    );
    assert_eq!(cfg.get("log.retention.ms"), None, "null default");
    let mut cfg = cfg;
    cfg.set("node.id", "7").unwrap();
    assert_eq!(cfg.node_id(), 7, "node.id wins over broker.id");
}

#[test]
fn retention_default_follows_the_broker_synonyms() {
    let image = MetadataImage::new();
    let hours = StaticBrokerConfig::from_pairs([("log.retention.hours", "1")]).unwrap();
    let v = BrokerConfigView::new(&image, &hours, 0)
        .topic_value("t", "retention.ms")
        .unwrap();
    assert_eq!(
        (v.value, v.source),
        (
            ConfigValue::Long(3_600_000),
            ConfigSource::StaticBrokerConfig
        )
    );
    let both = StaticBrokerConfig::from_pairs([
        ("log.retention.hours", "1"),
        ("log.retention.minutes", "2"),
    ])
    .unwrap();
    let v = BrokerConfigView::new(&image, &both, 0)
        .topic_value("t", "retention.ms")
        .unwrap();
    assert_eq!(
        v.value,
        ConfigValue::Long(120_000),
        "minutes win over hours"
    );
    let none = StaticBrokerConfig::new();
    let v = BrokerConfigView::new(&image, &none, 0)
        .topic_value("t", "retention.ms")
        .unwrap();
    assert_eq!(
        (v.value, v.source),
        (ConfigValue::Long(604_800_000), ConfigSource::DefaultConfig)
    );
}

fn alter(
    c: &mut Cluster,
    resource: ConfigResource,
    configs: Vec<AlterableConfig>,
) -> Result<(), ApiError> {
    let res = c
        .controller
        .incremental_alter_configs(&[AlterConfigsResource { resource, configs }], false);
    c.commit(&res.records);
    res.response.into_iter().next().unwrap().1
}

fn op(name: &str, op: AlterConfigOp, value: &str) -> AlterableConfig {
    AlterableConfig {
        name: name.into(),
        op,
        value: Some(value.into()),
    }
}

#[test]
fn set_delete_append_subtract_on_a_topic() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("t")).unwrap();
    let topic = ConfigResource::topic("t");
    alter(
        &mut c,
        topic.clone(),
        vec![AlterableConfig::set("retention.ms", "1000")],
    )
    .unwrap();
    assert_eq!(c.image.configs(&topic).unwrap()["retention.ms"], "1000");
    // APPEND starts from the value in effect (the default "delete").
    alter(
        &mut c,
        topic.clone(),
        vec![op("cleanup.policy", AlterConfigOp::Append, "compact")],
    )
    .unwrap();
    assert_eq!(
        c.image.configs(&topic).unwrap()["cleanup.policy"],
        "delete,compact"
    );
    alter(
        &mut c,
        topic.clone(),
        vec![op("cleanup.policy", AlterConfigOp::Append, "compact")],
    )
    .unwrap();
    assert_eq!(
        c.image.configs(&topic).unwrap()["cleanup.policy"],
        "delete,compact",
        "no duplicates"
    );
    alter(
        &mut c,
        topic.clone(),
        vec![op("cleanup.policy", AlterConfigOp::Subtract, "delete")],
    )
    .unwrap();
    assert_eq!(
        c.image.configs(&topic).unwrap()["cleanup.policy"],
        "compact"
    );
    alter(
        &mut c,
        topic.clone(),
        vec![
            AlterableConfig::delete("retention.ms"),
            AlterableConfig::delete("cleanup.policy"),
        ],
    )
    .unwrap();
    assert!(c.image.configs(&topic).is_none());
    // Deleting what is not set is a no-op without records.
    let res = c.controller.incremental_alter_configs(
        &[AlterConfigsResource {
            resource: topic,
            configs: vec![AlterableConfig::delete("retention.ms")],
        }],
        false,
    );
    assert!(res.response[0].1.is_ok());
    assert!(res.records.is_empty());
}

#[test]
fn alter_config_errors() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("t")).unwrap();
    let t = ConfigResource::topic("t");
    let cases: Vec<(ConfigResource, Vec<AlterableConfig>, ResponseError)> = vec![
        (
            ConfigResource::topic("missing"),
            vec![AlterableConfig::set("retention.ms", "1")],
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            ConfigResource::topic(""),
            vec![AlterableConfig::set("retention.ms", "1")],
            ResponseError::InvalidRequest,
        ),
        (
            ConfigResource::topic("bad/name"),
            vec![AlterableConfig::set("retention.ms", "1")],
            ResponseError::InvalidTopicException,
        ),
        (
            t.clone(),
            vec![AlterableConfig::set("retention.mss", "1")],
            ResponseError::InvalidConfig,
        ),
        (
            t.clone(),
            vec![AlterableConfig::set("retention.ms", "x")],
            ResponseError::InvalidConfig,
        ),
        (
            t.clone(),
            vec![AlterableConfig {
                name: "retention.ms".into(),
                op: AlterConfigOp::Set,
                value: None,
            }],
            ResponseError::InvalidConfig,
        ),
        (
            t.clone(),
            vec![op("retention.ms", AlterConfigOp::Append, "5")],
            ResponseError::InvalidConfig,
        ),
        (
            t.clone(),
            vec![op("cleanup.policy", AlterConfigOp::Append, "shred")],
            ResponseError::InvalidConfig,
        ),
        (
            t.clone(),
            vec![
                AlterableConfig::set("min.compaction.lag.ms", "10"),
                AlterableConfig::set("max.compaction.lag.ms", "5"),
            ],
            ResponseError::InvalidConfig,
        ),
        (
            t.clone(),
            vec![
                AlterableConfig::set("retention.ms", "1"),
                AlterableConfig::set("retention.ms", "2"),
            ],
            ResponseError::InvalidRequest,
        ),
        (
            ConfigResource {
                resource_type: ConfigResourceType::Broker,
                name: "x".into(),
            },
            vec![AlterableConfig::set("min.insync.replicas", "2")],
            ResponseError::InvalidRequest,
        ),
        (
            ConfigResource {
                resource_type: ConfigResourceType::Broker,
                name: "-1".into(),
            },
            vec![AlterableConfig::set("min.insync.replicas", "2")],
            ResponseError::InvalidRequest,
        ),
        (
            ConfigResource::broker(0),
            vec![AlterableConfig::set("num.partitions", "3")],
            ResponseError::InvalidConfig,
        ),
        (
            ConfigResource::broker(0),
            vec![AlterableConfig::set("no.such", "3")],
            ResponseError::InvalidConfig,
        ),
        (
            ConfigResource::cluster_default(),
            vec![AlterableConfig::set("min.insync.replicas", "0")],
            ResponseError::InvalidConfig,
        ),
    ];
    for (resource, configs, expected) in cases {
        let res = c.controller.incremental_alter_configs(
            &[AlterConfigsResource {
                resource: resource.clone(),
                configs: configs.clone(),
            }],
            false,
        );
        assert_eq!(
            code(&res.response[0].1),
            expected,
            "{resource:?} {configs:?}"
        );
        assert!(res.records.is_empty(), "a failed resource writes nothing");
    }
    // The same resource twice.
    let r = AlterConfigsResource {
        resource: t.clone(),
        configs: vec![AlterableConfig::set("retention.ms", "1")],
    };
    let res = c
        .controller
        .incremental_alter_configs(&[r.clone(), r], false);
    assert!(res
        .response
        .iter()
        .all(|x| code(&x.1) == ResponseError::InvalidRequest));
    // A read-only error message names the key.
    let e = alter(
        &mut c,
        ConfigResource::broker(0),
        vec![AlterableConfig::set("num.partitions", "3")],
    )
    .unwrap_err();
    assert_eq!(
        e.message,
        "Cannot update these configs dynamically: num.partitions"
    );
}

#[test]
fn validate_only_alter_writes_nothing() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("t")).unwrap();
    let res = c.controller.incremental_alter_configs(
        &[AlterConfigsResource {
            resource: ConfigResource::topic("t"),
            configs: vec![AlterableConfig::set("retention.ms", "1")],
        }],
        true,
    );
    assert!(res.response[0].1.is_ok());
    assert!(res.records.is_empty());
}

#[test]
fn describe_reports_sources_in_precedence_order() {
    let mut c = Cluster::new(&[
        ("node.id", "0"),
        ("log.retention.hours", "24"),
        ("min.insync.replicas", "2"),
    ]);
    c.add_broker(0, None);
    c.create(CreatableTopic::new("t")).unwrap();
    let describe = |c: &Cluster, key: &str| {
        c.controller
            .describe_configs(&ConfigResource::topic("t"), Some(&[key.to_string()]))
            .unwrap()
            .remove(0)
    };
    let d = describe(&c, "retention.ms");
    assert_eq!(
        (d.value.as_deref(), d.source),
        (Some("86400000"), ConfigSource::StaticBrokerConfig)
    );
    assert!(!d.read_only && !d.sensitive);
    assert_eq!(d.config_type, ConfigType::Long);
    alter(
        &mut c,
        ConfigResource::cluster_default(),
        vec![AlterableConfig::set("log.retention.ms", "5000")],
    )
    .unwrap();
    let d = describe(&c, "retention.ms");
    assert_eq!(
        (d.value.as_deref(), d.source),
        (Some("5000"), ConfigSource::DynamicDefaultBrokerConfig)
    );
    alter(
        &mut c,
        ConfigResource::broker(0),
        vec![AlterableConfig::set("log.retention.ms", "6000")],
    )
    .unwrap();
    let d = describe(&c, "retention.ms");
    assert_eq!(
        (d.value.as_deref(), d.source),
        (Some("6000"), ConfigSource::DynamicBrokerConfig)
    );
    alter(
        &mut c,
        ConfigResource::topic("t"),
        vec![AlterableConfig::set("retention.ms", "7000")],
    )
    .unwrap();
    let d = describe(&c, "retention.ms");
    assert_eq!(
        (d.value.as_deref(), d.source),
        (Some("7000"), ConfigSource::DynamicTopicConfig)
    );
    let sources: Vec<_> = d
        .synonyms
        .iter()
        .map(|s| (s.name.as_str(), s.source))
        .collect();
    assert_eq!(
        sources,
        vec![
            ("retention.ms", ConfigSource::DynamicTopicConfig),
            ("log.retention.ms", ConfigSource::DynamicBrokerConfig),
            ("log.retention.ms", ConfigSource::DynamicDefaultBrokerConfig),
            ("log.retention.hours", ConfigSource::StaticBrokerConfig),
            ("retention.ms", ConfigSource::DefaultConfig),
        ]
    );
    let all = c
        .controller
        .describe_configs(&ConfigResource::topic("t"), None)
        .unwrap();
    assert_eq!(all.len(), TOPIC_CONFIGS.len());
    let isr = all
        .iter()
        .find(|d| d.name == "min.insync.replicas")
        .unwrap();
    assert_eq!(
        (isr.value.as_deref(), isr.source),
        (Some("2"), ConfigSource::StaticBrokerConfig)
    );
}

#[test]
fn describe_broker_and_cluster_default() {
    let mut c = Cluster::new(&[("node.id", "0"), ("num.partitions", "6")]);
    c.add_broker(0, None);
    let all = c
        .controller
        .describe_configs(&ConfigResource::broker(0), None)
        .unwrap();
    let np = all.iter().find(|d| d.name == "num.partitions").unwrap();
    assert_eq!(
        (np.value.as_deref(), np.source, np.read_only),
        (Some("6"), ConfigSource::StaticBrokerConfig, true)
    );
    let mir = all
        .iter()
        .find(|d| d.name == "min.insync.replicas")
        .unwrap();
    assert_eq!(
        (mir.source, mir.read_only),
        (ConfigSource::DefaultConfig, false)
    );
    let unset = all.iter().find(|d| d.name == "log.retention.ms").unwrap();
    assert_eq!(unset.value, None);
    assert!(c
        .controller
        .describe_configs(&ConfigResource::cluster_default(), None)
        .unwrap()
        .is_empty());
    alter(
        &mut c,
        ConfigResource::cluster_default(),
        vec![AlterableConfig::set(
            "unclean.leader.election.enable",
            "true",
        )],
    )
    .unwrap();
    let d = c
        .controller
        .describe_configs(&ConfigResource::cluster_default(), None)
        .unwrap();
    assert_eq!(d.len(), 1);
    assert_eq!(d[0].source, ConfigSource::DynamicDefaultBrokerConfig);
    // Errors.
    let e = c
        .controller
        .describe_configs(&ConfigResource::broker(5), None);
    assert_eq!(code(&e), ResponseError::InvalidRequest);
    let e = c.controller.describe_configs(
        &ConfigResource {
            resource_type: ConfigResourceType::Broker,
            name: "abc".into(),
        },
        None,
    );
    assert_eq!(code(&e), ResponseError::InvalidRequest);
    let e = c
        .controller
        .describe_configs(&ConfigResource::topic("missing"), None);
    assert_eq!(code(&e), ResponseError::UnknownTopicOrPartition);
    // Unknown keys are left out.
    let d = c
        .controller
        .describe_configs(&ConfigResource::broker(0), Some(&["nope".to_string()]))
        .unwrap();
    assert!(d.is_empty());
}

#[test]
fn effective_topic_configs_for_the_log() {
    let mut c = Cluster::new(&[("node.id", "0"), ("log.segment.bytes", "1048576")]);
    c.add_broker(0, None);
    c.create(CreatableTopic::new("t").with_config("cleanup.policy", "compact"))
        .unwrap();
    let cfg = c.controller.config_view().topic_configs("t");
    assert_eq!(cfg["segment.bytes"], ConfigValue::Int(1_048_576));
    assert_eq!(
        cfg["cleanup.policy"],
        ConfigValue::List(vec!["compact".into()])
    );
    assert_eq!(cfg["retention.ms"], ConfigValue::Long(604_800_000));
    assert_eq!(cfg.len(), TOPIC_CONFIGS.len());
}

#[test]
fn settings_of_missing_features_are_refused_naming_them() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("t")).unwrap();
    let broker = ConfigResource::broker(0);
    for (resource, key, value) in [
        (broker.clone(), "num.replica.fetchers", "4"),
        (ConfigResource::cluster_default(), "num.io.threads", "16"),
        (broker.clone(), "log.roll.jitter.ms", "10"),
        (ConfigResource::topic("t"), "segment.jitter.ms", "10"),
    ] {
        let before = c.controller.image().configs(&resource).cloned();
        let e = alter(
            &mut c,
            resource.clone(),
            vec![AlterableConfig::set(key, value)],
        )
        .expect_err("refused");
        assert_eq!(e.code, ResponseError::InvalidConfig, "{key}");
        assert!(
            e.message.contains(key) && e.message.contains("not supported"),
            "{}",
            e.message
        );
        assert_eq!(
            c.controller.image().configs(&resource).cloned(),
            before,
            "{key}: nothing written"
        );
    }
    // The default is what Gregor does, so setting it is accepted.
    alter(
        &mut c,
        broker,
        vec![AlterableConfig::set("num.io.threads", "8")],
    )
    .expect("the default is accepted");
    assert!(unsupported_reason("metadata.log.dir").is_some());
    // The quorum's settings are supported now.
    assert!(unsupported_reason("controller.quorum.voters").is_none());
    assert!(unsupported_reason("process.roles").is_none());
    assert!(unsupported_reason("log.retention.ms").is_none());
}

#[test]
fn segment_deletion_delay_and_cleaner_backoff_are_kafkas_settings() {
    let mut c = Cluster::new(&[("node.id", "0"), ("log.segment.delete.delay.ms", "5000")]);
    c.add_broker(0, None);
    c.create(CreatableTopic::new("t")).unwrap();
    let delay =
        |c: &Cluster| c.controller.config_view().topic_configs("t")["file.delete.delay.ms"].clone();
    // The broker default (log.segment.delete.delay.ms) applies to a topic without its own.
    assert_eq!(delay(&c), ConfigValue::Long(5_000));
    alter(
        &mut c,
        ConfigResource::topic("t"),
        vec![AlterableConfig::set("file.delete.delay.ms", "10000")],
    )
    .expect("accepted");
    assert_eq!(delay(&c), ConfigValue::Long(10_000));
    let e = alter(
        &mut c,
        ConfigResource::topic("t"),
        vec![AlterableConfig::set("file.delete.delay.ms", "-1")],
    )
    .expect_err("a negative delay");
    assert_eq!(e.code, ResponseError::InvalidConfig);
    assert!(e.message.contains("file.delete.delay.ms"), "{}", e.message);
    assert_eq!(delay(&c), ConfigValue::Long(10_000), "nothing written");
    alter(
        &mut c,
        ConfigResource::broker(0),
        vec![AlterableConfig::set("log.cleaner.backoff.ms", "1000")],
    )
    .expect("a dynamic broker setting");
    for key in [
        "file.delete.delay.ms",
        "log.segment.delete.delay.ms",
        "log.cleaner.backoff.ms",
    ] {
        assert!(unsupported_reason(key).is_none(), "{key}");
    }
}

#[test]
fn throttled_replica_lists_take_star_or_partition_broker_pairs() {
    use gregor_meta::config::parse_topic_config;
    for key in [
        "leader.replication.throttled.replicas",
        "follower.replication.throttled.replicas",
    ] {
        for good in ["", "*", "0:1", "0:1, 1:2,10:0"] {
            assert!(parse_topic_config(key, good).is_ok(), "{key}={good}");
        }
        for bad in ["0", "a:1", "0:1,*", "-1:0", "0:1:2", "0:"] {
            let e = parse_topic_config(key, bad).expect_err(bad).to_string();
            assert!(
                e.contains("must be the literal '*' or a list of replicas"),
                "{key}={bad}: {e}"
            );
        }
    }
}

fn legacy(name: &str, value: Option<&str>) -> LegacyConfig {
    LegacyConfig {
        name: name.into(),
        value: value.map(String::from),
    }
}

#[test]
fn legacy_alter_configs_replaces_the_whole_set() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("t")).unwrap();
    let topic = ConfigResource::topic("t");
    alter(
        &mut c,
        topic.clone(),
        vec![
            AlterableConfig::set("retention.ms", "1000"),
            AlterableConfig::set("cleanup.policy", "compact"),
        ],
    )
    .unwrap();
    // Only compression.type listed: the two overrides above go back to their defaults.
    let res = c.controller.alter_configs(
        &[(
            topic.clone(),
            vec![legacy("compression.type", Some("gzip"))],
        )],
        false,
    );
    c.commit(&res.records);
    assert!(res.response[0].1.is_ok(), "{:?}", res.response);
    let now = c.image.configs(&topic).unwrap();
    assert_eq!(now.len(), 1, "{now:?}");
    assert_eq!(now["compression.type"], "gzip");
    // A null value removes the key; nothing listed removes everything.
    let res = c.controller.alter_configs(
        &[(topic.clone(), vec![legacy("compression.type", None)])],
        false,
    );
    c.commit(&res.records);
    assert!(c.image.configs(&topic).is_none());
}

#[test]
fn legacy_alter_configs_validates_as_incremental_does() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("t")).unwrap();
    let topic = ConfigResource::topic("t");
    alter(
        &mut c,
        topic.clone(),
        vec![AlterableConfig::set("retention.ms", "1000")],
    )
    .unwrap();
    let res = c.controller.alter_configs(
        &[
            (topic.clone(), vec![legacy("no.such.config", Some("1"))]),
            (
                ConfigResource::topic("missing"),
                vec![legacy("retention.ms", Some("1"))],
            ),
        ],
        false,
    );
    assert_eq!(
        res.response[0].1.as_ref().unwrap_err().code,
        ResponseError::InvalidConfig
    );
    assert_eq!(
        res.response[1].1.as_ref().unwrap_err().code,
        ResponseError::UnknownTopicOrPartition
    );
    assert!(res.records.is_empty(), "a refused resource changes nothing");
    // validate_only writes nothing, and the old override stays.
    let res = c.controller.alter_configs(
        &[(topic.clone(), vec![legacy("compression.type", Some("lz4"))])],
        true,
    );
    assert!(res.response[0].1.is_ok());
    assert!(res.records.is_empty());
    assert_eq!(c.image.configs(&topic).unwrap()["retention.ms"], "1000");
}

#[test]
fn listener_stores_are_dynamic_per_listener_and_per_broker_and_a_reset_writes_a_record() {
    let mut c = Cluster::with_brokers(&[0]);
    let node = ConfigResource::broker(0);
    let key = "listener.name.ssl.ssl.keystore.location";
    let set_a = vec![AlterableConfig::set(key, "/a.pem")];
    alter(&mut c, node.clone(), set_a.clone()).unwrap();
    // Setting the same value again still writes a record (KAFKA-14136): applying it makes the
    // broker re-read the file.
    let again = c.controller.incremental_alter_configs(
        &[AlterConfigsResource {
            resource: node.clone(),
            configs: set_a,
        }],
        false,
    );
    assert!(again.response[0].1.is_ok());
    assert_eq!(again.records.len(), 1);
    // A secret: set, but never shown by a record's Debug.
    let password = AlterableConfig::set("listener.name.ssl.ssl.key.password", "key-secret");
    let res = c.controller.incremental_alter_configs(
        &[AlterConfigsResource {
            resource: node.clone(),
            configs: vec![password],
        }],
        false,
    );
    assert!(res.response[0].1.is_ok());
    assert!(!format!("{:?}", res.records).contains("key-secret"));
    c.commit(&res.records);
    // Without the listener prefix, or at the cluster default: Kafka's refusals.
    let plain = alter(
        &mut c,
        node.clone(),
        vec![AlterableConfig::set("ssl.keystore.location", "/a.pem")],
    )
    .unwrap_err();
    assert_eq!(plain.code, ResponseError::InvalidConfig);
    assert!(
        plain.message.contains("only per-listener"),
        "{}",
        plain.message
    );
    let default = alter(
        &mut c,
        ConfigResource::cluster_default(),
        vec![AlterableConfig::set(key, "/a.pem")],
    )
    .unwrap_err();
    assert_eq!(default.code, ResponseError::InvalidConfig);
    assert!(default.message.contains("broker id must be specified"));
    // Other listener settings stay read-only.
    let auth = alter(
        &mut c,
        node.clone(),
        vec![AlterableConfig::set(
            "listener.name.ssl.ssl.client.auth",
            "required",
        )],
    )
    .unwrap_err();
    assert_eq!(auth.code, ResponseError::InvalidConfig);
    // Described under its own name, as a secret (no value).
    let described = describe_configs(
        c.controller.image(),
        &StaticBrokerConfig::new(),
        0,
        &node,
        Some(&["listener.name.ssl.ssl.key.password".to_string()]),
    )
    .unwrap();
    assert_eq!(described.len(), 1);
    assert!(described[0].sensitive && described[0].value.is_none());
    assert_eq!(described[0].source, ConfigSource::DynamicBrokerConfig);
}

#[test]
fn group_configs_are_checked_against_the_broker_bounds_and_described() {
    let mut c = Cluster::new(&[
        ("node.id", "0"),
        ("group.consumer.max.session.timeout.ms", "90000"),
    ]);
    c.add_broker(0, None);
    // The group need not exist.
    let g = ConfigResource::group("orders");
    alter(
        &mut c,
        g.clone(),
        vec![AlterableConfig::set("consumer.session.timeout.ms", "50000")],
    )
    .unwrap();
    assert_eq!(
        c.image.configs(&g).unwrap()["consumer.session.timeout.ms"],
        "50000"
    );
    let refused = |c: &mut Cluster, key: &str, v: &str| {
        alter(c, g.clone(), vec![AlterableConfig::set(key, v)]).unwrap_err()
    };
    // Below group.consumer.min.session.timeout.ms (45000), above the max, not below the
    // heartbeat interval, unknown: INVALID_CONFIG naming the rule.
    for (key, v, says) in [
        (
            "consumer.session.timeout.ms",
            "1000",
            "greater than or equal",
        ),
        ("consumer.session.timeout.ms", "95000", "less than or equal"),
        (
            "consumer.heartbeat.interval.ms",
            "16000",
            "less than or equal",
        ),
        (
            "consumer.heartbeat.interval.ms",
            "x",
            "consumer.heartbeat.interval.ms",
        ),
        ("session.timeout.ms", "50000", "Unknown group config"),
    ] {
        let e = refused(&mut c, key, v);
        assert_eq!(
            e.code,
            kafka_protocol::ResponseError::InvalidConfig,
            "{key}={v}"
        );
        assert!(e.message.contains(says), "{key}={v}: {}", e.message);
    }
    assert_eq!(
        c.image.configs(&g).unwrap().len(),
        1,
        "a refused change leaves the group's configs alone"
    );
    let empty = alter(&mut c, ConfigResource::group(""), vec![]).unwrap_err();
    assert_eq!(empty.code, kafka_protocol::ResponseError::InvalidRequest);

    let described = c.controller.describe_configs(&g, None).unwrap();
    let get = |name: &str| described.iter().find(|d| d.name == name).unwrap().clone();
    let session = get("consumer.session.timeout.ms");
    assert_eq!(
        (session.value.as_deref(), session.source),
        (Some("50000"), ConfigSource::GroupConfig)
    );
    assert_eq!(session.synonyms[0].source, ConfigSource::GroupConfig);
    let beat = get("consumer.heartbeat.interval.ms");
    assert_eq!(
        (beat.value.as_deref(), beat.source),
        (Some("5000"), ConfigSource::DefaultConfig)
    );
    // Another group, never configured, reads the broker's settings.
    let other = c
        .controller
        .describe_configs(&ConfigResource::group("other"), None)
        .unwrap();
    assert_eq!(other.len(), 2);
    assert!(other.iter().all(|d| d.source != ConfigSource::GroupConfig));

    // Group configs survive a snapshot.
    let records = c.image.to_records();
    assert!(records.iter().any(|r| matches!(
        r,
        MetadataRecord::Config(ConfigRecord { resource, .. }) if *resource == g
    )));
    alter(
        &mut c,
        g.clone(),
        vec![AlterableConfig::delete("consumer.session.timeout.ms")],
    )
    .unwrap();
    assert!(c.image.configs(&g).is_none());
}
