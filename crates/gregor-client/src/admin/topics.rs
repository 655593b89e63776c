//! Topics: create, delete, list, describe; and adding partitions.

use kafka_protocol::messages::create_partitions_request::{
    CreatePartitionsAssignment, CreatePartitionsTopic,
};
use kafka_protocol::messages::create_topics_request::{
    CreatableReplicaAssignment, CreatableTopic, CreatableTopicConfig,
};
use kafka_protocol::messages::delete_topics_request::DeleteTopicState;
use kafka_protocol::messages::{
    BrokerId, CreatePartitionsRequest, CreatePartitionsResponse, CreateTopicsRequest,
    CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use uuid::Uuid;

use super::base::{retry_entities, Admin, EntityResult};
use super::configs::{ConfigEntry, ConfigSource};
use crate::client::Target;
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::metadata::TopicMetadata;

/// A topic to create. Either a partition count and replication factor (each `None` for the
/// broker's default, from CreateTopics v4), or an explicit replica assignment.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NewTopic {
    pub name: String,
    pub num_partitions: Option<i32>,
    pub replication_factor: Option<i16>,
    /// Replicas of partition 0, 1, ... in order; the first replica is the preferred leader.
    pub replica_assignment: Option<Vec<Vec<i32>>>,
    pub configs: Vec<(String, String)>,
}

/// CreateTopics options.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CreateTopicsOptions {
    /// Check the request without creating anything.
    pub validate_only: bool,
    /// How long the controller may take, in milliseconds.
    pub timeout_ms: i32,
}

impl Default for CreateTopicsOptions {
    fn default() -> Self {
        CreateTopicsOptions {
            validate_only: false,
            timeout_ms: 30_000,
        }
    }
}

/// What the broker reports about a created topic (details from CreateTopics v5, id from v7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CreatedTopic {
    pub topic_id: Uuid,
    pub num_partitions: Option<i32>,
    pub replication_factor: Option<i16>,
    pub configs: Vec<ConfigEntry>,
}

/// Partitions to add to a topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPartitions {
    pub topic: String,
    /// The partition count after the change.
    pub total_count: i32,
    /// Replicas of each new partition, in order; `None` lets the controller place them.
    pub assignments: Option<Vec<Vec<i32>>>,
}

/// A topic in a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicListing {
    pub name: String,
    pub topic_id: Uuid,
    pub is_internal: bool,
}

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_string()))
}

fn brokers(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().map(|&b| BrokerId(b)).collect()
}

/// A CreateTopics request in the layout of `version`.
pub fn create_topics_request(
    topics: &[NewTopic],
    options: CreateTopicsOptions,
    version: i16,
) -> Result<CreateTopicsRequest> {
    let mut out = Vec::with_capacity(topics.len());
    for t in topics {
        let mut topic = CreatableTopic::default().with_name(topic_name(&t.name));
        match &t.replica_assignment {
            Some(assignment) => {
                // Kafka requires -1 for both when the assignment is explicit.
                topic.num_partitions = -1;
                topic.replication_factor = -1;
                topic.assignments = assignment
                    .iter()
                    .enumerate()
                    .map(|(i, replicas)| {
                        CreatableReplicaAssignment::default()
                            .with_partition_index(i as i32)
                            .with_broker_ids(brokers(replicas))
                    })
                    .collect();
            }
            None => {
                if version < 4 && (t.num_partitions.is_none() || t.replication_factor.is_none()) {
                    return Err(Error::InvalidArgument(format!(
                        "topic '{}': this broker (CreateTopics v{version}) has no default partition \
                         count or replication factor; give both",
                        t.name
                    )));
                }
                topic.num_partitions = t.num_partitions.unwrap_or(-1);
                topic.replication_factor = t.replication_factor.unwrap_or(-1);
            }
        }
        topic.configs = t
            .configs
            .iter()
            .map(|(k, v)| {
                CreatableTopicConfig::default()
                    .with_name(StrBytes::from_string(k.clone()))
                    .with_value(Some(StrBytes::from_string(v.clone())))
            })
            .collect();
        out.push(topic);
    }
    Ok(CreateTopicsRequest::default()
        .with_topics(out)
        .with_timeout_ms(options.timeout_ms)
        .with_validate_only(options.validate_only))
}

/// Per-topic results of CreateTopics.
pub fn parse_create_topics(resp: CreateTopicsResponse) -> EntityResult<String, CreatedTopic> {
    resp.topics
        .into_iter()
        .map(|t| {
            let name = t.name.0.to_string();
            let result = KafkaError::check(t.error_code, t.error_message.as_deref()).map(|()| {
                CreatedTopic {
                    topic_id: t.topic_id,
                    num_partitions: (t.num_partitions >= 0).then_some(t.num_partitions),
                    replication_factor: (t.replication_factor >= 0).then_some(t.replication_factor),
                    configs: t
                        .configs
                        .unwrap_or_default()
                        .into_iter()
                        .map(|c| ConfigEntry {
                            name: c.name.to_string(),
                            value: c.value.map(|v| v.to_string()),
                            source: ConfigSource::from_wire(c.config_source),
                            is_sensitive: c.is_sensitive,
                            read_only: c.read_only,
                            synonyms: Vec::new(),
                            documentation: None,
                        })
                        .collect(),
                }
            });
            (name, result)
        })
        .collect()
}

/// A DeleteTopics request by name, in the layout of `version`.
pub fn delete_topics_request(
    names: &[String],
    timeout_ms: i32,
    version: i16,
) -> DeleteTopicsRequest {
    let mut req = DeleteTopicsRequest::default().with_timeout_ms(timeout_ms);
    if version >= 6 {
        req.topics = names
            .iter()
            .map(|n| DeleteTopicState::default().with_name(Some(topic_name(n))))
            .collect();
    } else {
        req.topic_names = names.iter().map(|n| topic_name(n)).collect();
    }
    req
}

/// Per-topic results of DeleteTopics.
pub fn parse_delete_topics(resp: DeleteTopicsResponse) -> EntityResult<String, ()> {
    resp.responses
        .into_iter()
        .map(|r| {
            let name = r.name.map(|n| n.0.to_string()).unwrap_or_default();
            (
                name,
                KafkaError::check(r.error_code, r.error_message.as_deref()),
            )
        })
        .collect()
}

/// A CreatePartitions request.
pub fn create_partitions_request(
    changes: &[NewPartitions],
    validate_only: bool,
    timeout_ms: i32,
) -> CreatePartitionsRequest {
    CreatePartitionsRequest::default()
        .with_topics(
            changes
                .iter()
                .map(|c| {
                    CreatePartitionsTopic::default()
                        .with_name(topic_name(&c.topic))
                        .with_count(c.total_count)
                        .with_assignments(c.assignments.as_ref().map(|a| {
                            a.iter()
                                .map(|replicas| {
                                    CreatePartitionsAssignment::default()
                                        .with_broker_ids(brokers(replicas))
                                })
                                .collect()
                        }))
                })
                .collect(),
        )
        .with_timeout_ms(timeout_ms)
        .with_validate_only(validate_only)
}

/// Per-topic results of CreatePartitions.
pub fn parse_create_partitions(resp: CreatePartitionsResponse) -> EntityResult<String, ()> {
    resp.results
        .into_iter()
        .map(|r| {
            (
                r.name.0.to_string(),
                KafkaError::check(r.error_code, r.error_message.as_deref()),
            )
        })
        .collect()
}

impl Admin {
    /// Creates topics; one result per topic. Sent to the controller; topics the controller
    /// refuses with a retriable error (`NOT_CONTROLLER`...) are sent again.
    pub async fn create_topics(
        &self,
        topics: Vec<NewTopic>,
        options: CreateTopicsOptions,
    ) -> Result<EntityResult<String, CreatedTopic>> {
        let names: Vec<String> = topics.iter().map(|t| t.name.clone()).collect();
        retry_entities(&self.client, "CreateTopics", names, |pending| {
            let batch: Vec<NewTopic> = topics
                .iter()
                .filter(|t| pending.contains(&t.name))
                .cloned()
                .collect();
            async move {
                let (_, resp) = self
                    .client
                    .send::<CreateTopicsRequest, _>(&Target::Controller, |v| {
                        create_topics_request(&batch, options, v)
                    })
                    .await?;
                Ok(parse_create_topics(resp))
            }
        })
        .await
    }

    /// Deletes topics by name; one result per topic.
    pub async fn delete_topics(
        &self,
        names: &[String],
        timeout_ms: i32,
    ) -> Result<EntityResult<String, ()>> {
        retry_entities(
            &self.client,
            "DeleteTopics",
            names.to_vec(),
            |pending| async move {
                let (_, resp) = self
                    .client
                    .send::<DeleteTopicsRequest, _>(&Target::Controller, |v| {
                        Ok(delete_topics_request(&pending, timeout_ms, v))
                    })
                    .await?;
                Ok(parse_delete_topics(resp))
            },
        )
        .await
    }

    /// Raises partition counts; one result per topic.
    pub async fn create_partitions(
        &self,
        changes: Vec<NewPartitions>,
        validate_only: bool,
        timeout_ms: i32,
    ) -> Result<EntityResult<String, ()>> {
        let names: Vec<String> = changes.iter().map(|c| c.topic.clone()).collect();
        retry_entities(&self.client, "CreatePartitions", names, |pending| {
            let batch: Vec<NewPartitions> = changes
                .iter()
                .filter(|c| pending.contains(&c.topic))
                .cloned()
                .collect();
            async move {
                let (_, resp) = self
                    .client
                    .send::<CreatePartitionsRequest, _>(&Target::Controller, |_| {
                        Ok(create_partitions_request(&batch, validate_only, timeout_ms))
                    })
                    .await?;
                Ok(parse_create_partitions(resp))
            }
        })
        .await
    }

    /// Every topic, sorted by name; internal topics (`__consumer_offsets`...) only when asked.
    pub async fn list_topics(&self, include_internal: bool) -> Result<Vec<TopicListing>> {
        let md = self
            .client
            .retry("listing topics", || self.client.refresh_metadata(None))
            .await?;
        Ok(md
            .topics
            .into_iter()
            .filter(|t| t.error.is_none() && (include_internal || !t.is_internal))
            .map(|t| TopicListing {
                name: t.name,
                topic_id: t.topic_id,
                is_internal: t.is_internal,
            })
            .collect())
    }

    /// Metadata of the named topics, in the order asked. A topic that does not exist fails the
    /// call with `UNKNOWN_TOPIC_OR_PARTITION` naming it; topics still electing leaders are
    /// asked again until the deadline.
    pub async fn describe_topics(&self, names: &[String]) -> Result<Vec<TopicMetadata>> {
        self.client
            .retry("describing topics", || async {
                let md = self.client.refresh_metadata(Some(names)).await?;
                check_described_topics(names, &md.topics)
            })
            .await
    }
}

/// The asked-for topics out of a Metadata answer, or the first topic-level error.
pub fn check_described_topics(
    names: &[String],
    topics: &[TopicMetadata],
) -> Result<Vec<TopicMetadata>> {
    names
        .iter()
        .map(|name| {
            let t = topics.iter().find(|t| &t.name == name).ok_or_else(|| {
                Error::kafka(
                    format!("topic '{name}'"),
                    KafkaError::new(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION, None),
                )
            })?;
            match t.error {
                None => Ok(t.clone()),
                Some(code) => Err(Error::kafka(
                    format!("topic '{name}'"),
                    KafkaError::new(code, None),
                )),
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
    use kafka_protocol::messages::create_topics_response::{
        CreatableTopicConfigs, CreatableTopicResult,
    };
    use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
    use kafka_protocol::protocol::{Decodable, Message};

    fn demo_topics() -> Vec<NewTopic> {
        vec![
            NewTopic {
                name: "tp_demo_02".into(),
                num_partitions: Some(2),
                replication_factor: Some(3),
                configs: vec![("cleanup.policy".into(), "compact".into())],
                ..Default::default()
            },
            NewTopic {
                name: "tp_demo_03".into(),
                replica_assignment: Some(vec![vec![0, 1], vec![1, 0], vec![0, 1]]),
                ..Default::default()
            },
        ]
    }

    #[test]
    fn create_topics_request_carries_counts_or_assignment() {
        for v in CreateTopicsRequest::VERSIONS.min..=CreateTopicsRequest::VERSIONS.max {
            let req =
                create_topics_request(&demo_topics(), CreateTopicsOptions::default(), v).unwrap();
            let frame = encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
            // What the broker decodes is what was asked.
            let mut body = frame.slice(4..);
            kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
            let decoded = CreateTopicsRequest::decode(&mut body, v).unwrap();
            let explicit = &decoded.topics[1];
            assert_eq!(
                (explicit.num_partitions, explicit.replication_factor),
                (-1, -1)
            );
            assert_eq!(
                explicit.assignments[1].broker_ids,
                vec![BrokerId(1), BrokerId(0)]
            );
            assert_eq!(explicit.assignments[2].partition_index, 2);
            let counted = &decoded.topics[0];
            assert_eq!((counted.num_partitions, counted.replication_factor), (2, 3));
            assert_eq!(counted.configs[0].value.as_deref(), Some("compact"));
        }
    }

    #[test]
    fn broker_defaults_need_create_topics_v4() {
        let t = vec![NewTopic {
            name: "t".into(),
            ..Default::default()
        }];
        let req = create_topics_request(&t, CreateTopicsOptions::default(), 4).unwrap();
        assert_eq!(req.topics[0].num_partitions, -1);
        assert!(matches!(
            create_topics_request(&t, CreateTopicsOptions::default(), 3),
            Err(Error::InvalidArgument(_))
        ));
    }

    #[test]
    fn create_topics_response_per_topic() {
        let resp = CreateTopicsResponse::default().with_topics(vec![
            CreatableTopicResult::default()
                .with_name(topic_name("ok"))
                .with_topic_id(Uuid::from_u128(7))
                .with_num_partitions(3)
                .with_replication_factor(1)
                .with_configs(Some(vec![CreatableTopicConfigs::default()
                    .with_name(StrBytes::from_static_str("segment.bytes"))
                    .with_value(Some(StrBytes::from_static_str("1073741824")))
                    .with_config_source(4)])),
            CreatableTopicResult::default()
                .with_name(topic_name("dup"))
                .with_error_code(36)
                .with_error_message(Some(StrBytes::from_static_str(
                    "Topic 'dup' already exists.",
                ))),
        ]);
        let frame = encode_response_frame::<CreateTopicsRequest>(&resp, 7, 1);
        let parsed = parse_create_topics(decode_response::<CreateTopicsRequest>(frame, 7).unwrap());
        let ok = parsed[0].1.as_ref().unwrap();
        assert_eq!(ok.topic_id, Uuid::from_u128(7));
        assert_eq!(ok.num_partitions, Some(3));
        assert_eq!(ok.configs[0].source, ConfigSource::StaticBroker);
        let dup = parsed[1].1.as_ref().unwrap_err();
        assert_eq!(dup.code, KafkaCode::TOPIC_ALREADY_EXISTS);
        assert_eq!(dup.message.as_deref(), Some("Topic 'dup' already exists."));
    }

    #[test]
    fn delete_topics_both_layouts() {
        let names = vec!["a".to_string(), "b".to_string()];
        for v in DeleteTopicsRequest::VERSIONS.min..=DeleteTopicsRequest::VERSIONS.max {
            let req = delete_topics_request(&names, 1000, v);
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
        let resp = DeleteTopicsResponse::default().with_responses(vec![
            DeletableTopicResult::default().with_name(Some(topic_name("a"))),
            DeletableTopicResult::default()
                .with_name(Some(topic_name("b")))
                .with_error_code(3),
        ]);
        for v in [1, 6] {
            let frame = encode_response_frame::<DeleteTopicsRequest>(&resp, v, 1);
            let parsed =
                parse_delete_topics(decode_response::<DeleteTopicsRequest>(frame, v).unwrap());
            assert_eq!(parsed[0], ("a".to_string(), Ok(())));
            assert_eq!(
                parsed[1].1.as_ref().unwrap_err().code,
                KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
            );
        }
    }

    #[test]
    fn create_partitions_request_and_errors() {
        let changes = vec![
            NewPartitions {
                topic: "t".into(),
                total_count: 4,
                assignments: Some(vec![vec![1, 0]]),
            },
            NewPartitions {
                topic: "u".into(),
                total_count: 2,
                assignments: None,
            },
        ];
        let req = create_partitions_request(&changes, true, 500);
        for v in CreatePartitionsRequest::VERSIONS.min..=CreatePartitionsRequest::VERSIONS.max {
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
        assert!(req.validate_only);
        assert_eq!(req.topics[0].count, 4);
        assert!(req.topics[1].assignments.is_none());
        let resp = CreatePartitionsResponse::default().with_results(vec![
            CreatePartitionsTopicResult::default()
                .with_name(topic_name("t"))
                .with_error_code(37)
                .with_error_message(Some(StrBytes::from_static_str(
                    "Topic currently has 4 partitions, which is higher than the requested 2.",
                ))),
        ]);
        let frame = encode_response_frame::<CreatePartitionsRequest>(&resp, 3, 1);
        let parsed =
            parse_create_partitions(decode_response::<CreatePartitionsRequest>(frame, 3).unwrap());
        assert_eq!(
            parsed[0].1.as_ref().unwrap_err().code,
            KafkaCode::INVALID_PARTITIONS
        );
    }

    #[test]
    fn describing_a_missing_topic_names_it() {
        let known = TopicMetadata {
            name: "a".into(),
            topic_id: Uuid::nil(),
            is_internal: false,
            partitions: vec![],
            error: None,
        };
        let missing = TopicMetadata {
            name: "gone".into(),
            error: Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
            ..known.clone()
        };
        let got = check_described_topics(&["a".into()], &[known.clone(), missing.clone()]).unwrap();
        assert_eq!(got, vec![known.clone()]);
        let err =
            check_described_topics(&["a".into(), "gone".into()], &[known, missing]).unwrap_err();
        assert_eq!(
            err.kafka_code(),
            Some(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION)
        );
        assert_eq!(
            err.to_string(),
            "topic 'gone': UNKNOWN_TOPIC_OR_PARTITION (3)"
        );
    }
}
