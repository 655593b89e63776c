//! DescribeConfigs: each config's value, where it comes from, and its synonyms.

use super::defs::{
    broker_config, dynamic_listener_ssl, listener_override_base, ConfigDef, BROKER_CONFIGS,
    GROUP_CONFIGS, TOPIC_CONFIGS,
};
use super::resolve::{BrokerConfigView, ConfigSource, ResolvedConfig, StaticBrokerConfig};
use super::value::ConfigType;
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::record::{ConfigResource, ConfigResourceType};
use crate::types::BrokerId;

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
    let wanted = |name: &str| keys.is_none_or(|k| k.iter().any(|k| k == name));
    match resource.resource_type {
        ConfigResourceType::Topic => describe_topic(&view, image, resource, wanted),
        // The cluster default resource lists only what is set there.
        ConfigResourceType::Broker if resource.name.is_empty() => {
            Ok(describe_cluster_default(image, resource, wanted))
        }
        ConfigResourceType::Broker => describe_broker(&view, resource, local_broker, wanted),
        ConfigResourceType::Group => describe_group(&view, resource, wanted),
    }
}

/// A group's configs, whether or not the group exists (as Kafka answers): its override, the
/// broker setting it overrides, the default.
fn describe_group(
    view: &BrokerConfigView<'_>,
    resource: &ConfigResource,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<DescribedConfig>, ApiError> {
    if resource.name.is_empty() {
        return Err(ApiError::invalid_request("Group name must not be empty."));
    }
    let resolve = |key: &str| view.group_value(&resource.name, key);
    let source = ConfigSource::GroupConfig;
    Ok(describe_overridable(
        view,
        GROUP_CONFIGS,
        resource,
        source,
        resolve,
        wanted,
    ))
}

/// A topic's configs: its override, the broker synonyms, the default.
fn describe_topic(
    view: &BrokerConfigView<'_>,
    image: &MetadataImage,
    resource: &ConfigResource,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<DescribedConfig>, ApiError> {
    if image.topic(&resource.name).is_none() {
        return Err(ApiError::unknown_topic_or_partition(format!(
            "Topic {} does not exist.",
            resource.name
        )));
    }
    let resolve = |key: &str| view.topic_value(&resource.name, key);
    let source = ConfigSource::DynamicTopicConfig;
    Ok(describe_overridable(
        view,
        TOPIC_CONFIGS,
        resource,
        source,
        resolve,
        wanted,
    ))
}

/// The configs `defs` of a resource that overrides broker settings (a topic, a group): each
/// with its synonyms, the resource's own value (`source`) first, then the broker's, then the
/// default; `resolve` gives the value in effect.
fn describe_overridable(
    view: &BrokerConfigView<'_>,
    defs: &'static [ConfigDef],
    resource: &ConfigResource,
    source: ConfigSource,
    resolve: impl Fn(&str) -> Option<ResolvedConfig>,
    wanted: impl Fn(&str) -> bool,
) -> Vec<DescribedConfig> {
    let overrides = view.image.configs(resource);
    defs.iter()
        .filter(|d| wanted(d.name))
        .map(|d| {
            let mut synonyms = Vec::new();
            if let Some(v) = overrides.and_then(|m| m.get(d.name)) {
                synonyms.push(entry(d, d.name, v.clone(), source));
            }
            for syn in d.synonyms {
                push_broker_synonyms(view, syn.name, &mut synonyms);
            }
            if let Some(default) = d.default {
                let e = entry(d, d.name, default.to_string(), ConfigSource::DefaultConfig);
                synonyms.push(e);
            }
            described(d, false, resolve(d.name), synonyms)
        })
        .collect()
}

/// The cluster-wide broker defaults that are set.
fn describe_cluster_default(
    image: &MetadataImage,
    resource: &ConfigResource,
    wanted: impl Fn(&str) -> bool,
) -> Vec<DescribedConfig> {
    let set = image.configs(resource);
    BROKER_CONFIGS
        .iter()
        .filter(|d| wanted(d.name))
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
        .collect()
}

/// The local broker's configs; another broker's id is refused.
fn describe_broker(
    view: &BrokerConfigView<'_>,
    resource: &ConfigResource,
    local_broker: BrokerId,
    wanted: impl Fn(&str) -> bool,
) -> Result<Vec<DescribedConfig>, ApiError> {
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
        .filter(|d| wanted(d.name))
        .map(|d| {
            let mut synonyms = Vec::new();
            push_broker_synonyms(view, d.name, &mut synonyms);
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
        .chain(listener_overrides(view, &wanted))
        .collect())
}

/// The per-listener settings (`listener.name.<l>.ssl.*`, ...) set for the broker, statically
/// or dynamically, listed under their own names as Kafka lists them (secrets without a value).
fn listener_overrides(
    view: &BrokerConfigView<'_>,
    wanted: impl Fn(&str) -> bool,
) -> Vec<DescribedConfig> {
    let dynamic = |r: ConfigResource| view.image.configs(&r).cloned().unwrap_or_default();
    let mut names: Vec<String> = dynamic(ConfigResource::broker(view.broker_id))
        .into_keys()
        .chain(dynamic(ConfigResource::cluster_default()).into_keys())
        .chain(view.static_config.explicit().keys().cloned())
        .filter(|k| listener_override_base(k.as_str()).is_some() && wanted(k.as_str()))
        .collect();
    names.sort();
    names.dedup();
    names
        .into_iter()
        .filter_map(|name| {
            let d = broker_config(&name)?;
            let mut synonyms = Vec::new();
            push_broker_synonyms(view, &name, &mut synonyms);
            let read_only = !d.dynamic && dynamic_listener_ssl(&name).is_none();
            let mut c = described(d, read_only, view.resolve(&name), synonyms);
            c.name = name;
            Some(c)
        })
        .collect()
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
    let Some(def) = broker_config(name) else {
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
