//! DescribeConfigs: each config's value, where it comes from, and its synonyms.

use super::defs::{ConfigDef, BROKER_CONFIGS, TOPIC_CONFIGS};
use super::value::{ConfigType, ConfigValue};
use super::{BrokerConfigView, StaticBrokerConfig};
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::record::{ConfigResource, ConfigResourceType};
use crate::types::BrokerId;

/// Where a config value comes from (Kafka's DescribeConfigs `config_source` ids).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ConfigSource {
    /// A topic override (1).
    DynamicTopicConfig,
    /// A dynamic override for this broker (2).
    DynamicBrokerConfig,
    /// A dynamic cluster-wide broker default (3).
    DynamicDefaultBrokerConfig,
    /// The broker's properties file or `--override` (4).
    StaticBrokerConfig,
    /// The built-in default (5).
    DefaultConfig,
}

impl ConfigSource {
    /// Kafka's id.
    pub fn id(self) -> i8 {
        match self {
            ConfigSource::DynamicTopicConfig => 1,
            ConfigSource::DynamicBrokerConfig => 2,
            ConfigSource::DynamicDefaultBrokerConfig => 3,
            ConfigSource::StaticBrokerConfig => 4,
            ConfigSource::DefaultConfig => 5,
        }
    }

    /// Kafka's name (`DYNAMIC_TOPIC_CONFIG`, ...), as `kafka-configs.sh --describe` prints it.
    pub fn name(self) -> &'static str {
        match self {
            ConfigSource::DynamicTopicConfig => "DYNAMIC_TOPIC_CONFIG",
            ConfigSource::DynamicBrokerConfig => "DYNAMIC_BROKER_CONFIG",
            ConfigSource::DynamicDefaultBrokerConfig => "DYNAMIC_DEFAULT_BROKER_CONFIG",
            ConfigSource::StaticBrokerConfig => "STATIC_BROKER_CONFIG",
            ConfigSource::DefaultConfig => "DEFAULT_CONFIG",
        }
    }
}

/// A value and where it came from.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedConfig {
    /// Parsed value.
    pub value: ConfigValue,
    /// Its source.
    pub source: ConfigSource,
}

/// A synonym entry of a described config (most to least specific).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonymEntry {
    /// Config name (the topic config itself or a broker synonym).
    pub name: String,
    /// Value as text (`None` for secrets).
    pub value: Option<String>,
    /// Where it is set.
    pub source: ConfigSource,
}

/// One entry of a DescribeConfigs response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DescribedConfig {
    /// Config name.
    pub name: String,
    /// Effective value as text; `None` for secrets and unset null defaults.
    pub value: Option<String>,
    /// Where the effective value comes from.
    pub source: ConfigSource,
    /// Whether IncrementalAlterConfigs may change it.
    pub read_only: bool,
    /// Whether it is a secret.
    pub sensitive: bool,
    /// Type.
    pub config_type: ConfigType,
    /// Documentation.
    pub documentation: &'static str,
    /// Every place it is set, most specific first, ending with the default.
    pub synonyms: Vec<ConfigSynonymEntry>,
}

/// Describe a topic or broker resource as `local_broker` sees it. `keys` restricts the answer
/// (unknown keys are left out, as Kafka does); `None` means all configs.
///
/// Errors: `UNKNOWN_TOPIC_OR_PARTITION` for a missing topic, `INVALID_REQUEST` for a broker
/// resource that is neither `local_broker` nor the cluster default `""`.
pub fn describe_configs(
    image: &MetadataImage,
    static_config: &StaticBrokerConfig,
    local_broker: BrokerId,
    resource: &ConfigResource,
    keys: Option<&[String]>,
) -> Result<Vec<DescribedConfig>, ApiError> {
    let view = BrokerConfigView::new(image, static_config, local_broker);
    let wanted = |d: &ConfigDef| keys.is_none_or(|k| k.iter().any(|k| k == d.name));
    match resource.resource_type {
        ConfigResourceType::Topic => {
            if image.topic(&resource.name).is_none() {
                return Err(ApiError::unknown_topic_or_partition(format!(
                    "Topic {} does not exist.",
                    resource.name
                )));
            }
            let overrides = image.configs(resource);
            Ok(TOPIC_CONFIGS
                .iter()
                .filter(|d| wanted(d))
                .map(|d| {
                    let mut synonyms = Vec::new();
                    if let Some(v) = overrides.and_then(|m| m.get(d.name)) {
                        synonyms.push(entry(
                            d,
                            d.name,
                            v.clone(),
                            ConfigSource::DynamicTopicConfig,
                        ));
                    }
                    for syn in d.synonyms {
                        push_broker_synonyms(&view, syn.name, &mut synonyms);
                    }
                    if let Some(default) = d.default {
                        synonyms.push(entry(
                            d,
                            d.name,
                            default.to_string(),
                            ConfigSource::DefaultConfig,
                        ));
                    }
                    let resolved = view.topic_value(&resource.name, d.name);
                    described(d, false, resolved, synonyms)
                })
                .collect())
        }
        ConfigResourceType::Broker => {
            if resource.name.is_empty() {
                // The cluster default resource lists only what is set there.
                let set = image.configs(resource);
                return Ok(BROKER_CONFIGS
                    .iter()
                    .filter(|d| wanted(d))
                    .filter_map(|d| {
                        let v = set?.get(d.name)?;
                        let e = entry(
                            d,
                            d.name,
                            v.clone(),
                            ConfigSource::DynamicDefaultBrokerConfig,
                        );
                        Some(DescribedConfig {
                            name: d.name.to_string(),
                            value: e.value.clone(),
                            source: e.source,
                            read_only: !d.dynamic,
                            sensitive: d.is_sensitive(),
                            config_type: d.ty,
                            documentation: d.doc,
                            synonyms: vec![e],
                        })
                    })
                    .collect());
            }
            let id: BrokerId = resource.name.parse().map_err(|_| {
                ApiError::invalid_request("Unable to parse broker name as a base 10 number.")
            })?;
            if id != local_broker {
                return Err(ApiError::invalid_request(format!(
                    "Unexpected broker id, expected {local_broker} or empty string, but received {id}"
                )));
            }
            Ok(BROKER_CONFIGS
                .iter()
                .filter(|d| wanted(d))
                .map(|d| {
                    let mut synonyms = Vec::new();
                    push_broker_synonyms(&view, d.name, &mut synonyms);
                    if let Some(default) = d.default {
                        synonyms.push(entry(
                            d,
                            d.name,
                            default.to_string(),
                            ConfigSource::DefaultConfig,
                        ));
                    }
                    described(d, !d.dynamic, view.resolve(d.name), synonyms)
                })
                .collect())
        }
    }
}

fn entry(def: &ConfigDef, name: &str, value: String, source: ConfigSource) -> ConfigSynonymEntry {
    ConfigSynonymEntry {
        name: name.to_string(),
        value: (!def.is_sensitive()).then_some(value),
        source,
    }
}

fn push_broker_synonyms(
    view: &BrokerConfigView<'_>,
    name: &str,
    out: &mut Vec<ConfigSynonymEntry>,
) {
    let Some(def) = super::broker_config(name) else {
        return;
    };
    let dynamic = |r: ConfigResource| view.image.configs(&r).and_then(|m| m.get(name)).cloned();
    if let Some(v) = dynamic(ConfigResource::broker(view.broker_id)) {
        out.push(entry(def, name, v, ConfigSource::DynamicBrokerConfig));
    }
    if let Some(v) = dynamic(ConfigResource::cluster_default()) {
        out.push(entry(
            def,
            name,
            v,
            ConfigSource::DynamicDefaultBrokerConfig,
        ));
    }
    if let Some(v) = view.static_config.raw(name) {
        out.push(entry(
            def,
            name,
            v.to_string(),
            ConfigSource::StaticBrokerConfig,
        ));
    }
}

fn described(
    def: &ConfigDef,
    read_only: bool,
    resolved: Option<ResolvedConfig>,
    synonyms: Vec<ConfigSynonymEntry>,
) -> DescribedConfig {
    let (value, source) = match resolved {
        Some(r) => (Some(r.value.to_string()), r.source),
        None => (None, ConfigSource::DefaultConfig),
    };
    DescribedConfig {
        name: def.name.to_string(),
        value: value.filter(|_| !def.is_sensitive()),
        source,
        read_only,
        sensitive: def.is_sensitive(),
        config_type: def.ty,
        documentation: def.doc,
        synonyms,
    }
}
