//! Configs: DescribeConfigs and IncrementalAlterConfigs for topics, brokers and the rest.

use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    DescribeConfigsRequest, DescribeConfigsResponse, IncrementalAlterConfigsRequest,
    IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::base::{missing_result, retry_entities, Admin, EntityResult};
use crate::client::Target;
use crate::error::{KafkaError, Result};

/// Kafka's config resource types, with their wire codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ConfigResourceType {
    Topic,
    Broker,
    BrokerLogger,
    ClientMetrics,
    Group,
}

impl ConfigResourceType {
    pub fn code(self) -> i8 {
        match self {
            ConfigResourceType::Topic => 2,
            ConfigResourceType::Broker => 4,
            ConfigResourceType::BrokerLogger => 8,
            ConfigResourceType::ClientMetrics => 16,
            ConfigResourceType::Group => 32,
        }
    }

    pub fn from_code(code: i8) -> Option<ConfigResourceType> {
        Some(match code {
            2 => ConfigResourceType::Topic,
            4 => ConfigResourceType::Broker,
            8 => ConfigResourceType::BrokerLogger,
            16 => ConfigResourceType::ClientMetrics,
            32 => ConfigResourceType::Group,
            _ => return None,
        })
    }
}

/// A config resource: a topic by name, a broker by id (empty name: the cluster-wide broker
/// default), a group...
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConfigResource {
    pub kind: ConfigResourceType,
    pub name: String,
}

impl ConfigResource {
    pub fn topic(name: impl Into<String>) -> ConfigResource {
        ConfigResource {
            kind: ConfigResourceType::Topic,
            name: name.into(),
        }
    }

    pub fn broker(id: i32) -> ConfigResource {
        ConfigResource {
            kind: ConfigResourceType::Broker,
            name: id.to_string(),
        }
    }

    /// Broker and broker-logger configs are answered by the broker itself; the cluster-wide
    /// default and every other resource by any broker.
    pub fn target(&self) -> Target {
        match self.kind {
            ConfigResourceType::Broker | ConfigResourceType::BrokerLogger => {
                match self.name.parse::<i32>() {
                    Ok(id) => Target::Broker(id),
                    Err(_) => Target::Any,
                }
            }
            _ => Target::Any,
        }
    }
}

/// Where a config value comes from (Kafka's `ConfigEntry.ConfigSource`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigSource {
    Unknown,
    DynamicTopic,
    DynamicBroker,
    DynamicDefaultBroker,
    StaticBroker,
    Default,
    DynamicBrokerLogger,
    DynamicClientMetrics,
    DynamicGroup,
}

impl ConfigSource {
    pub fn from_wire(code: i8) -> ConfigSource {
        match code {
            1 => ConfigSource::DynamicTopic,
            2 => ConfigSource::DynamicBroker,
            3 => ConfigSource::DynamicDefaultBroker,
            4 => ConfigSource::StaticBroker,
            5 => ConfigSource::Default,
            6 => ConfigSource::DynamicBrokerLogger,
            7 => ConfigSource::DynamicClientMetrics,
            8 => ConfigSource::DynamicGroup,
            _ => ConfigSource::Unknown,
        }
    }

    /// Kafka's name for the source, as `kafka-configs.sh` prints it in synonyms.
    pub fn name(self) -> &'static str {
        match self {
            ConfigSource::Unknown => "UNKNOWN",
            ConfigSource::DynamicTopic => "DYNAMIC_TOPIC_CONFIG",
            ConfigSource::DynamicBroker => "DYNAMIC_BROKER_CONFIG",
            ConfigSource::DynamicDefaultBroker => "DYNAMIC_DEFAULT_BROKER_CONFIG",
            ConfigSource::StaticBroker => "STATIC_BROKER_CONFIG",
            ConfigSource::Default => "DEFAULT_CONFIG",
            ConfigSource::DynamicBrokerLogger => "DYNAMIC_BROKER_LOGGER_CONFIG",
            ConfigSource::DynamicClientMetrics => "DYNAMIC_CLIENT_METRICS_CONFIG",
            ConfigSource::DynamicGroup => "DYNAMIC_GROUP_CONFIG",
        }
    }
}

/// One inherited value of a config, most specific first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
}

/// One config of a resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// `None` for sensitive values.
    pub value: Option<String>,
    pub source: ConfigSource,
    pub is_sensitive: bool,
    pub read_only: bool,
    pub synonyms: Vec<ConfigSynonym>,
    pub documentation: Option<String>,
}

impl ConfigEntry {
    /// Whether the value is the built-in default (Kafka's `ConfigEntry.isDefault`).
    pub fn is_default(&self) -> bool {
        self.source == ConfigSource::Default
    }
}

/// One change of IncrementalAlterConfigs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AlterConfigOp {
    Set {
        name: String,
        value: String,
    },
    Delete {
        name: String,
    },
    /// Add to a list-valued config.
    Append {
        name: String,
        value: String,
    },
    /// Remove from a list-valued config.
    Subtract {
        name: String,
        value: String,
    },
}

impl AlterConfigOp {
    fn wire(&self) -> AlterableConfig {
        let (name, op, value) = match self {
            AlterConfigOp::Set { name, value } => (name, 0, Some(value)),
            AlterConfigOp::Delete { name } => (name, 1, None),
            AlterConfigOp::Append { name, value } => (name, 2, Some(value)),
            AlterConfigOp::Subtract { name, value } => (name, 3, Some(value)),
        };
        AlterableConfig::default()
            .with_name(StrBytes::from_string(name.clone()))
            .with_config_operation(op)
            .with_value(value.map(|v| StrBytes::from_string(v.clone())))
    }
}

/// A DescribeConfigs request for every config of each resource.
pub fn describe_configs_request(
    resources: &[ConfigResource],
    include_synonyms: bool,
    include_documentation: bool,
    version: i16,
) -> DescribeConfigsRequest {
    DescribeConfigsRequest::default()
        .with_resources(
            resources
                .iter()
                .map(|r| {
                    DescribeConfigsResource::default()
                        .with_resource_type(r.kind.code())
                        .with_resource_name(StrBytes::from_string(r.name.clone()))
                        .with_configuration_keys(None)
                })
                .collect(),
        )
        .with_include_synonyms(include_synonyms)
        // Documentation exists from v3; older brokers simply do not send it.
        .with_include_documentation(include_documentation && version >= 3)
}

fn resource_of(kind: i8, name: &StrBytes) -> Option<ConfigResource> {
    Some(ConfigResource {
        kind: ConfigResourceType::from_code(kind)?,
        name: name.to_string(),
    })
}

/// Per-resource configs of a DescribeConfigs response, in the broker's order.
pub fn parse_describe_configs(
    resp: DescribeConfigsResponse,
) -> EntityResult<ConfigResource, Vec<ConfigEntry>> {
    resp.results
        .into_iter()
        .filter_map(|r| {
            let resource = resource_of(r.resource_type, &r.resource_name)?;
            let result = KafkaError::check(r.error_code, r.error_message.as_deref()).map(|()| {
                r.configs
                    .into_iter()
                    .map(|c| ConfigEntry {
                        name: c.name.to_string(),
                        value: c.value.map(|v| v.to_string()),
                        source: ConfigSource::from_wire(c.config_source),
                        is_sensitive: c.is_sensitive,
                        read_only: c.read_only,
                        synonyms: c
                            .synonyms
                            .into_iter()
                            .map(|s| ConfigSynonym {
                                name: s.name.to_string(),
                                value: s.value.map(|v| v.to_string()),
                                source: ConfigSource::from_wire(s.source),
                            })
                            .collect(),
                        documentation: c.documentation.map(|d| d.to_string()),
                    })
                    .collect()
            });
            Some((resource, result))
        })
        .collect()
}

/// An IncrementalAlterConfigs request.
pub fn incremental_alter_configs_request(
    changes: &[(ConfigResource, Vec<AlterConfigOp>)],
    validate_only: bool,
) -> IncrementalAlterConfigsRequest {
    IncrementalAlterConfigsRequest::default()
        .with_resources(
            changes
                .iter()
                .map(|(r, ops)| {
                    AlterConfigsResource::default()
                        .with_resource_type(r.kind.code())
                        .with_resource_name(StrBytes::from_string(r.name.clone()))
                        .with_configs(ops.iter().map(AlterConfigOp::wire).collect())
                })
                .collect(),
        )
        .with_validate_only(validate_only)
}

/// Per-resource results of IncrementalAlterConfigs.
pub fn parse_incremental_alter_configs(
    resp: IncrementalAlterConfigsResponse,
) -> EntityResult<ConfigResource, ()> {
    resp.responses
        .into_iter()
        .filter_map(|r| {
            let resource = resource_of(r.resource_type, &r.resource_name)?;
            Some((
                resource,
                KafkaError::check(r.error_code, r.error_message.as_deref()),
            ))
        })
        .collect()
}

/// Splits resources by the broker that must answer for them, keeping first-seen order.
fn by_target<T: Clone>(items: &[(ConfigResource, T)]) -> Vec<(Target, Vec<(ConfigResource, T)>)> {
    let mut out: Vec<(Target, Vec<(ConfigResource, T)>)> = Vec::new();
    for (r, t) in items {
        let target = r.target();
        match out.iter_mut().find(|(k, _)| *k == target) {
            Some((_, v)) => v.push((r.clone(), t.clone())),
            None => out.push((target, vec![(r.clone(), t.clone())])),
        }
    }
    out
}

impl Admin {
    /// Every config of each resource, with synonyms when asked; one result per resource, in
    /// the order given.
    pub async fn describe_configs(
        &self,
        resources: &[ConfigResource],
        include_synonyms: bool,
        include_documentation: bool,
    ) -> Result<EntityResult<ConfigResource, Vec<ConfigEntry>>> {
        let items: Vec<(ConfigResource, ())> = resources.iter().map(|r| (r.clone(), ())).collect();
        let mut all = Vec::new();
        for (target, group) in by_target(&items) {
            let keys: Vec<ConfigResource> = group.into_iter().map(|(r, ())| r).collect();
            let results = retry_entities(&self.client, "DescribeConfigs", keys, |pending| {
                let target = target.clone();
                async move {
                    let (_, resp) = self
                        .client
                        .send::<DescribeConfigsRequest, _>(&target, |v| {
                            Ok(describe_configs_request(
                                &pending,
                                include_synonyms,
                                include_documentation,
                                v,
                            ))
                        })
                        .await?;
                    Ok(parse_describe_configs(resp))
                }
            })
            .await?;
            all.extend(results);
        }
        Ok(order_like(resources, all))
    }

    /// Applies config changes; one result per resource, in the order given.
    pub async fn incremental_alter_configs(
        &self,
        changes: &[(ConfigResource, Vec<AlterConfigOp>)],
        validate_only: bool,
    ) -> Result<EntityResult<ConfigResource, ()>> {
        let mut all = Vec::new();
        for (target, group) in by_target(changes) {
            let keys: Vec<ConfigResource> = group.iter().map(|(r, _)| r.clone()).collect();
            let results =
                retry_entities(&self.client, "IncrementalAlterConfigs", keys, |pending| {
                    let target = target.clone();
                    let batch: Vec<(ConfigResource, Vec<AlterConfigOp>)> = group
                        .iter()
                        .filter(|(r, _)| pending.contains(r))
                        .cloned()
                        .collect();
                    async move {
                        let (_, resp) = self
                            .client
                            .send::<IncrementalAlterConfigsRequest, _>(&target, |_| {
                                Ok(incremental_alter_configs_request(&batch, validate_only))
                            })
                            .await?;
                        Ok(parse_incremental_alter_configs(resp))
                    }
                })
                .await?;
            all.extend(results);
        }
        let keys: Vec<ConfigResource> = changes.iter().map(|(r, _)| r.clone()).collect();
        Ok(order_like(&keys, all))
    }
}

/// Results in the order of `keys`; a key without a result gets one saying so.
fn order_like<T>(
    keys: &[ConfigResource],
    mut results: EntityResult<ConfigResource, T>,
) -> EntityResult<ConfigResource, T> {
    keys.iter()
        .map(|k| match results.iter().position(|(r, _)| r == k) {
            Some(i) => results.swap_remove(i),
            None => (
                k.clone(),
                Err(missing_result(&format!("{:?} {}", k.kind, k.name))),
            ),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use crate::error::KafkaCode;
    use kafka_protocol::messages::describe_configs_response::{
        DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
    };
    use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
    use kafka_protocol::protocol::{Decodable, Message};

    #[test]
    fn resources_route_to_the_broker_that_owns_them() {
        assert_eq!(ConfigResource::broker(2).target(), Target::Broker(2));
        assert_eq!(
            ConfigResource {
                kind: ConfigResourceType::Broker,
                name: String::new()
            }
            .target(),
            Target::Any
        );
        assert_eq!(ConfigResource::topic("t").target(), Target::Any);
        let items = vec![
            (ConfigResource::topic("a"), 1),
            (ConfigResource::broker(1), 2),
            (ConfigResource::topic("b"), 3),
        ];
        let split = by_target(&items);
        assert_eq!(split.len(), 2);
        assert_eq!(split[0].1.len(), 2);
    }

    #[test]
    fn describe_request_encodes_in_every_version() {
        let rs = vec![ConfigResource::topic("t"), ConfigResource::broker(0)];
        for v in DescribeConfigsRequest::VERSIONS.min..=DescribeConfigsRequest::VERSIONS.max {
            let req = describe_configs_request(&rs, true, true, v);
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
            assert_eq!(req.resources[1].resource_type, 4);
        }
    }

    #[test]
    fn describe_response_with_sources_and_synonyms() {
        let resp = DescribeConfigsResponse::default().with_results(vec![
            DescribeConfigsResult::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("t"))
                .with_configs(vec![
                    DescribeConfigsResourceResult::default()
                        .with_name(StrBytes::from_static_str("cleanup.policy"))
                        .with_value(Some(StrBytes::from_static_str("compact")))
                        .with_config_source(1)
                        .with_synonyms(vec![
                            DescribeConfigsSynonym::default()
                                .with_name(StrBytes::from_static_str("cleanup.policy"))
                                .with_value(Some(StrBytes::from_static_str("compact")))
                                .with_source(1),
                            DescribeConfigsSynonym::default()
                                .with_name(StrBytes::from_static_str("log.cleanup.policy"))
                                .with_value(Some(StrBytes::from_static_str("delete")))
                                .with_source(5),
                        ]),
                    DescribeConfigsResourceResult::default()
                        .with_name(StrBytes::from_static_str("retention.ms"))
                        .with_value(Some(StrBytes::from_static_str("604800000")))
                        .with_config_source(5),
                ]),
            DescribeConfigsResult::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("gone"))
                .with_error_code(3),
        ]);
        let frame = encode_response_frame::<DescribeConfigsRequest>(&resp, 4, 1);
        let parsed =
            parse_describe_configs(decode_response::<DescribeConfigsRequest>(frame, 4).unwrap());
        let entries = parsed[0].1.as_ref().unwrap();
        assert_eq!(entries[0].source, ConfigSource::DynamicTopic);
        assert!(!entries[0].is_default());
        assert!(entries[1].is_default());
        assert_eq!(entries[0].synonyms[1].source.name(), "DEFAULT_CONFIG");
        assert_eq!(
            parsed[1].1.as_ref().unwrap_err().code,
            KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
        );
    }

    #[test]
    fn alter_request_carries_operations() {
        let changes = vec![(
            ConfigResource::topic("t"),
            vec![
                AlterConfigOp::Set {
                    name: "retention.ms".into(),
                    value: "1000".into(),
                },
                AlterConfigOp::Delete {
                    name: "cleanup.policy".into(),
                },
            ],
        )];
        let req = incremental_alter_configs_request(&changes, false);
        for v in 0..=IncrementalAlterConfigsRequest::VERSIONS.max {
            let frame = encode_request(&req, v, 1, "c").unwrap();
            let mut body = frame.slice(4..);
            kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
            let back = IncrementalAlterConfigsRequest::decode(&mut body, v).unwrap();
            let ops = &back.resources[0].configs;
            assert_eq!(
                (ops[0].config_operation, ops[0].value.as_deref()),
                (0, Some("1000"))
            );
            assert_eq!(
                (ops[1].config_operation, ops[1].value.as_deref()),
                (1, None)
            );
        }
        let resp = IncrementalAlterConfigsResponse::default().with_responses(vec![
            AlterConfigsResourceResponse::default()
                .with_resource_type(2)
                .with_resource_name(StrBytes::from_static_str("t"))
                .with_error_code(40)
                .with_error_message(Some(StrBytes::from_static_str("Invalid value x"))),
        ]);
        let frame = encode_response_frame::<IncrementalAlterConfigsRequest>(&resp, 1, 1);
        let parsed = parse_incremental_alter_configs(
            decode_response::<IncrementalAlterConfigsRequest>(frame, 1).unwrap(),
        );
        assert_eq!(parsed[0].0, ConfigResource::topic("t"));
        assert_eq!(
            parsed[0].1.as_ref().unwrap_err().code,
            KafkaCode::INVALID_CONFIG
        );
    }

    #[test]
    fn results_come_back_in_request_order_and_missing_ones_are_reported() {
        let keys = vec![ConfigResource::topic("a"), ConfigResource::topic("b")];
        let results: EntityResult<ConfigResource, ()> = vec![(ConfigResource::topic("b"), Ok(()))];
        let ordered = order_like(&keys, results);
        assert_eq!(ordered[0].0, ConfigResource::topic("a"));
        assert!(ordered[0].1.is_err());
        assert_eq!(ordered[1], (ConfigResource::topic("b"), Ok(())));
    }
}
