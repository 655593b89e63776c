//! The broker's static configuration (server properties, `--override`) and how a topic's or
//! broker's effective value is resolved from dynamic overrides, static values and defaults.

use super::defs::{
    broker_config, group_config, parse_broker_config, parse_topic_config, topic_config, ConfigDef,
    TOPIC_CONFIGS,
};
use super::value::{ConfigError, ConfigValue};
use crate::image::MetadataImage;
use crate::record::ConfigResource;
use crate::types::BrokerId;
use std::collections::BTreeMap;

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
    /// A group override (8).
    GroupConfig,
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
            ConfigSource::GroupConfig => 8,
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
            ConfigSource::GroupConfig => "GROUP_CONFIG",
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

/// The broker's static configuration: its properties file plus `--override`s. Only known keys
/// with valid values get in, so a typo fails start-up instead of being ignored. `Debug` hides
/// the values of secrets (JAAS lines, key and store passwords).
#[derive(Clone, PartialEq, Eq, Default)]
pub struct StaticBrokerConfig {
    values: BTreeMap<String, String>,
}

impl std::fmt::Debug for StaticBrokerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let shown = self.values.iter().map(|(k, v)| {
            let secret = super::defs::broker_config(k).is_some_and(|d| d.is_sensitive());
            (k, if secret { "[hidden]" } else { v.as_str() })
        });
        f.debug_map().entries(shown).finish()
    }
}

impl StaticBrokerConfig {
    /// All defaults.
    pub fn new() -> Self {
        Self::default()
    }

    /// From key/value pairs (later pairs override earlier ones), rejecting unknown keys and
    /// invalid values.
    pub fn from_pairs<K: AsRef<str>, V: AsRef<str>>(
        pairs: impl IntoIterator<Item = (K, V)>,
    ) -> Result<Self, ConfigError> {
        let mut cfg = StaticBrokerConfig::new();
        for (k, v) in pairs {
            cfg.set(k.as_ref(), v.as_ref())?;
        }
        Ok(cfg)
    }

    /// Set one key (an `--override key=value`), validating it.
    pub fn set(&mut self, key: &str, value: &str) -> Result<(), ConfigError> {
        parse_broker_config(key, value)?;
        self.values
            .insert(key.to_string(), value.trim().to_string());
        Ok(())
    }

    /// The explicitly set value of a key.
    pub fn raw(&self, key: &str) -> Option<&str> {
        self.values.get(key).map(String::as_str)
    }

    /// Every explicitly set key.
    pub fn explicit(&self) -> &BTreeMap<String, String> {
        &self.values
    }

    /// The value of a key: explicit or default; `None` for unknown keys and null defaults.
    pub fn get(&self, key: &str) -> Option<ConfigValue> {
        let def = broker_config(key)?;
        match self.values.get(key) {
            Some(v) => Some(def.parse(v).expect("validated when set")),
            None => def.default_value(),
        }
    }

    /// The node id (`node.id`, else `broker.id`; -1 when neither is set).
    pub fn node_id(&self) -> BrokerId {
        let id = |k| self.get(k).and_then(|v| v.as_i64()).unwrap_or(-1);
        let node = id("node.id");
        let node = if node >= 0 { node } else { id("broker.id") };
        i32::try_from(node).expect("INT configs fit in i32")
    }
}

/// A broker-level view of configs: dynamic per-broker overrides, then dynamic cluster defaults,
/// then the static config, then built-in defaults.
#[derive(Debug, Clone, Copy)]
pub struct BrokerConfigView<'a> {
    /// Committed metadata (dynamic configs).
    pub image: &'a MetadataImage,
    /// The broker's static config.
    pub static_config: &'a StaticBrokerConfig,
    /// The broker whose per-broker overrides apply.
    pub broker_id: BrokerId,
}

impl<'a> BrokerConfigView<'a> {
    /// A view.
    pub fn new(
        image: &'a MetadataImage,
        static_config: &'a StaticBrokerConfig,
        broker_id: BrokerId,
    ) -> Self {
        BrokerConfigView {
            image,
            static_config,
            broker_id,
        }
    }

    /// Where a broker config's value comes from, if it is set anywhere other than its default.
    fn explicit(&self, key: &str) -> Option<(String, ConfigSource)> {
        let dynamic = |resource: ConfigResource| {
            self.image
                .configs(&resource)
                .and_then(|m| m.get(key))
                .cloned()
        };
        if let Some(v) = dynamic(ConfigResource::broker(self.broker_id)) {
            return Some((v, ConfigSource::DynamicBrokerConfig));
        }
        if let Some(v) = dynamic(ConfigResource::cluster_default()) {
            return Some((v, ConfigSource::DynamicDefaultBrokerConfig));
        }
        self.static_config
            .raw(key)
            .map(|v| (v.to_string(), ConfigSource::StaticBrokerConfig))
    }

    /// The resolved value of a broker config (`None` for unknown keys and unset null defaults).
    pub fn resolve(&self, key: &str) -> Option<ResolvedConfig> {
        let def = broker_config(key)?;
        if let Some((raw, source)) = self.explicit(key) {
            // Dynamic values were validated when altered; a bad one in the log (written by a
            // different version) falls back to the default rather than failing the broker.
            if let Ok(value) = def.parse(&raw) {
                return Some(ResolvedConfig { value, source });
            }
        }
        def.default_value().map(|value| ResolvedConfig {
            value,
            source: ConfigSource::DefaultConfig,
        })
    }

    /// A broker config as i64 (0 if unset; only for integer configs with defaults).
    pub fn i64(&self, key: &str) -> i64 {
        self.resolve(key)
            .and_then(|r| r.value.as_i64())
            .unwrap_or_default()
    }

    /// A broker config as bool (false if unset).
    pub fn bool(&self, key: &str) -> bool {
        self.resolve(key)
            .and_then(|r| r.value.as_bool())
            .unwrap_or_default()
    }

    /// The effective value of a topic config for `topic`: the topic's override, else the first
    /// set broker synonym, else the built-in default.
    pub fn topic_value(&self, topic: &str, key: &str) -> Option<ResolvedConfig> {
        let def = topic_config(key)?;
        if let Some(raw) = self
            .image
            .configs(&ConfigResource::topic(topic))
            .and_then(|m| m.get(key))
        {
            if let Ok(value) = def.parse(raw) {
                return Some(ResolvedConfig {
                    value,
                    source: ConfigSource::DynamicTopicConfig,
                });
            }
        }
        self.topic_default(def)
    }

    /// A group config's value: the group's override, else the broker's setting.
    pub fn group_value(&self, group: &str, key: &str) -> Option<ResolvedConfig> {
        let def = group_config(key)?;
        let set = self.image.configs(&ConfigResource::group(group));
        if let Some(value) = set
            .and_then(|m| m.get(key))
            .and_then(|raw| def.parse(raw).ok())
        {
            return Some(ResolvedConfig {
                value,
                source: ConfigSource::GroupConfig,
            });
        }
        self.topic_default(def)
    }

    /// The broker-side default of a topic (or group) config, ignoring its overrides.
    pub fn topic_default(&self, def: &ConfigDef) -> Option<ResolvedConfig> {
        for syn in def.synonyms {
            if let Some((raw, source)) = self.explicit(syn.name) {
                if let Some(v) = broker_config(syn.name).and_then(|d| d.parse(&raw).ok()) {
                    return Some(ResolvedConfig {
                        value: syn.convert(&v),
                        source,
                    });
                }
            }
        }
        def.default_value().map(|value| ResolvedConfig {
            value,
            source: ConfigSource::DefaultConfig,
        })
    }

    /// Every topic config's effective value for `topic` (what the log of that topic runs with).
    pub fn topic_configs(&self, topic: &str) -> BTreeMap<&'static str, ConfigValue> {
        TOPIC_CONFIGS
            .iter()
            .filter_map(|d| self.topic_value(topic, d.name).map(|r| (d.name, r.value)))
            .collect()
    }
}

/// Validate a complete set of topic overrides: every key known, every value valid, and the
/// cross-field rules Kafka checks (`min.compaction.lag.ms` <= `max.compaction.lag.ms`).
pub fn validate_topic_overrides(
    overrides: &BTreeMap<String, String>,
    view: &BrokerConfigView<'_>,
) -> Result<(), ConfigError> {
    for (k, v) in overrides {
        parse_topic_config(k, v)?;
    }
    let effective = |key: &str| -> i64 {
        match overrides.get(key) {
            Some(v) => parse_topic_config(key, v)
                .ok()
                .and_then(|v| v.as_i64())
                .unwrap_or_default(),
            None => topic_config(key)
                .and_then(|d| view.topic_default(d))
                .and_then(|r| r.value.as_i64())
                .unwrap_or_default(),
        }
    };
    let min_lag = effective("min.compaction.lag.ms");
    let max_lag = effective("max.compaction.lag.ms");
    if min_lag > max_lag {
        return Err(ConfigError::Conflict(format!(
            "conflict topic config setting min.compaction.lag.ms ({min_lag}) > max.compaction.lag.ms ({max_lag})"
        )));
    }
    Ok(())
}

/// Validate a complete set of group overrides: every key known and valid, each within the
/// broker's bounds for it (`group.consumer.min.*`/`max.*`), and the heartbeat interval below
/// the session timeout.
pub fn validate_group_overrides(
    overrides: &BTreeMap<String, String>,
    view: &BrokerConfigView<'_>,
) -> Result<(), ConfigError> {
    let mut effective = BTreeMap::new();
    for def in super::defs::GROUP_CONFIGS {
        let value = match overrides.get(def.name) {
            Some(raw) => def.parse(raw)?,
            None => match view.topic_default(def) {
                Some(r) => r.value,
                None => continue,
            },
        };
        effective.insert(def.name, value.as_i64().unwrap_or_default());
    }
    if let Some(k) = overrides.keys().find(|k| group_config(k).is_none()) {
        return Err(ConfigError::Unknown {
            scope: "group",
            key: k.clone(),
        });
    }
    for (key, what) in [
        ("consumer.session.timeout.ms", "session.timeout.ms"),
        ("consumer.heartbeat.interval.ms", "heartbeat.interval.ms"),
    ] {
        let Some(v) = effective.get(key).copied() else {
            continue;
        };
        let bound = |b: &str| {
            view.resolve(&format!("group.consumer.{b}.{what}"))
                .and_then(|r| r.value.as_i64())
        };
        if bound("min").is_some_and(|min| v < min) {
            return Err(ConfigError::Conflict(format!(
                "{key} must be greater than or equal to group.consumer.min.{what}"
            )));
        }
        if bound("max").is_some_and(|max| v > max) {
            return Err(ConfigError::Conflict(format!(
                "{key} must be less than or equal to group.consumer.max.{what}"
            )));
        }
    }
    let get = |k: &str| effective.get(k).copied().unwrap_or_default();
    if get("consumer.heartbeat.interval.ms") >= get("consumer.session.timeout.ms") {
        return Err(ConfigError::Conflict(
            "consumer.heartbeat.interval.ms must be less than consumer.session.timeout.ms".into(),
        ));
    }
    Ok(())
}
