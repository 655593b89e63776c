//! IncrementalAlterConfigs for topics, brokers and the cluster-wide broker default.

use super::state::{Controller, ControllerResult};
use crate::config::{
    broker_config, check_supported, dynamic_listener_ssl, group_config, split_list, topic_config,
    validate_group_overrides, validate_topic_overrides, BrokerConfigView, ConfigDef, ConfigError,
    ConfigType, DYNAMIC_LISTENER_SSL_CONFIGS,
};
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::record::{ConfigRecord, ConfigResource, ConfigResourceType, MetadataRecord};
use crate::topic_name::validate_topic_name;
use kafka_protocol::ResponseError;
use std::collections::{BTreeMap, BTreeSet};

/// An IncrementalAlterConfigs operation (Kafka's `AlterConfigOp.OpType` ids 0..=3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AlterConfigOp {
    /// Set the value (0).
    Set,
    /// Remove the override (1).
    Delete,
    /// Add elements to a list config (2).
    Append,
    /// Remove elements from a list config (3).
    Subtract,
}

impl AlterConfigOp {
    /// From Kafka's id.
    pub fn from_i8(v: i8) -> Option<Self> {
        match v {
            0 => Some(AlterConfigOp::Set),
            1 => Some(AlterConfigOp::Delete),
            2 => Some(AlterConfigOp::Append),
            3 => Some(AlterConfigOp::Subtract),
            _ => None,
        }
    }
}

/// One key to alter.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterableConfig {
    /// Key.
    pub name: String,
    /// Operation.
    pub op: AlterConfigOp,
    /// Value (ignored for `Delete`).
    pub value: Option<String>,
}

impl AlterableConfig {
    /// `SET key=value`.
    pub fn set(name: &str, value: &str) -> Self {
        AlterableConfig {
            name: name.into(),
            op: AlterConfigOp::Set,
            value: Some(value.into()),
        }
    }

    /// `DELETE key`.
    pub fn delete(name: &str) -> Self {
        AlterableConfig {
            name: name.into(),
            op: AlterConfigOp::Delete,
            value: None,
        }
    }
}

/// The changes for one resource.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AlterConfigsResource {
    /// Resource.
    pub resource: ConfigResource,
    /// Keys to alter.
    pub configs: Vec<AlterableConfig>,
}

fn current_value(image: &MetadataImage, resource: &ConfigResource, key: &str) -> Option<String> {
    image.configs(resource).and_then(|m| m.get(key)).cloned()
}

/// Kafka's rules for the listener stores' settings (`DynamicBrokerConfig.validateConfigs`):
/// dynamic only per listener (`listener.name.<l>.ssl.keystore.location`) and per broker.
fn check_listener_ssl_scope(resource: &ConfigResource, key: &str) -> Result<bool, ApiError> {
    if DYNAMIC_LISTENER_SSL_CONFIGS.contains(&key) {
        return Err(ApiError::invalid_config(format!(
            "These security configs can be dynamically updated only per-listener using the listener prefix: [{key}]"
        )));
    }
    if dynamic_listener_ssl(key).is_none() {
        return Ok(false);
    }
    if resource.name.is_empty() {
        return Err(ApiError::invalid_config(format!(
            "Cannot update these configs at default cluster level, broker id must be specified: [{key}]"
        )));
    }
    Ok(true)
}

/// The definition of a dynamically alterable topic (or broker) config.
fn dynamic_def(resource: &ConfigResource, key: &str) -> Result<&'static ConfigDef, ApiError> {
    let is_broker = resource.resource_type == ConfigResourceType::Broker;
    let listener_ssl = is_broker && check_listener_ssl_scope(resource, key)?;
    let (def, scope) = match resource.resource_type {
        ConfigResourceType::Topic => (topic_config(key), "topic"),
        ConfigResourceType::Broker => (broker_config(key), "broker"),
        ConfigResourceType::Group => (group_config(key), "group"),
    };
    let def = def.ok_or_else(|| {
        ApiError::invalid_config(
            ConfigError::Unknown {
                scope,
                key: key.to_string(),
            }
            .to_string(),
        )
    })?;
    if !def.dynamic && !listener_ssl {
        return Err(ApiError::invalid_config(
            ConfigError::NotDynamic {
                key: key.to_string(),
            }
            .to_string(),
        ));
    }
    Ok(def)
}

/// `v` parses as `def` and is a value Gregor supports.
fn check_value(def: &ConfigDef, v: &str) -> Result<(), ApiError> {
    let value = def
        .parse(v)
        .map_err(|e| ApiError::invalid_config(e.to_string()))?;
    check_supported(def, &value).map_err(|e| ApiError::invalid_config(e.to_string()))
}

impl Controller {
    /// IncrementalAlterConfigs. Each resource succeeds or fails as a whole. Errors:
    /// `INVALID_REQUEST` (resource or key twice, bad broker name, empty topic name),
    /// `INVALID_TOPIC_EXCEPTION`, `UNKNOWN_TOPIC_OR_PARTITION`, `INVALID_CONFIG` (unknown key,
    /// invalid value, read-only broker config, APPEND/SUBTRACT on a non-list, conflicting
    /// values).
    pub fn incremental_alter_configs(
        &self,
        resources: &[AlterConfigsResource],
        validate_only: bool,
    ) -> ControllerResult<Vec<(ConfigResource, Result<(), ApiError>)>> {
        let mut counts: BTreeMap<&ConfigResource, usize> = BTreeMap::new();
        for r in resources {
            *counts.entry(&r.resource).or_default() += 1;
        }
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(resources.len());
        for r in resources {
            let result = if counts[&r.resource] > 1 {
                Err(ApiError::invalid_request("Duplicate resource in request."))
            } else {
                self.alter_resource(r)
            };
            match result {
                Ok(recs) => {
                    tracing::info!(resource = ?r.resource, changes = recs.len(), "altering configs");
                    records.extend(recs);
                    results.push((r.resource.clone(), Ok(())));
                }
                Err(e) => {
                    tracing::info!(resource = ?r.resource, code = ?e.code, message = %e.message, "IncrementalAlterConfigs rejected a resource");
                    results.push((r.resource.clone(), Err(e)));
                }
            }
        }
        if validate_only {
            records.clear();
        }
        ControllerResult::new(records, results)
    }

    fn alter_resource(&self, r: &AlterConfigsResource) -> Result<Vec<MetadataRecord>, ApiError> {
        let resource = &r.resource;
        self.check_resource(resource)?;
        let mut keys = BTreeSet::new();
        for c in &r.configs {
            if !keys.insert(c.name.as_str()) {
                return Err(ApiError::invalid_request(format!(
                    "Error due to duplicate config keys: {}",
                    c.name
                )));
            }
        }
        let is_broker = resource.resource_type == ConfigResourceType::Broker;
        let mut overrides: BTreeMap<String, String> =
            self.image.configs(resource).cloned().unwrap_or_default();
        for c in &r.configs {
            match self.altered_value(resource, c)? {
                Some(v) => {
                    overrides.insert(c.name.clone(), v);
                }
                None => {
                    overrides.remove(&c.name);
                }
            }
        }
        let view = self.config_view();
        let valid = match resource.resource_type {
            ConfigResourceType::Topic => validate_topic_overrides(&overrides, &view),
            ConfigResourceType::Group => validate_group_overrides(&overrides, &view),
            ConfigResourceType::Broker => Ok(()),
        };
        valid.map_err(|e| ApiError::invalid_config(e.to_string()))?;
        // One record per key whose override changes; for a broker, one per key set even to
        // the value it has (KAFKA-14136): applying it makes the broker re-read the files its
        // listeners' stores name.
        let mut records = Vec::new();
        for c in &r.configs {
            let before = current_value(&self.image, resource, &c.name);
            let after = overrides.get(&c.name).cloned();
            if before != after || is_broker {
                records.push(MetadataRecord::Config(ConfigRecord {
                    resource: resource.clone(),
                    name: c.name.clone(),
                    value: after,
                }));
            }
        }
        Ok(records)
    }

    /// A topic resource must name an existing topic; a broker resource a non-negative id or
    /// the cluster default `""`.
    fn check_resource(&self, resource: &ConfigResource) -> Result<(), ApiError> {
        match resource.resource_type {
            ConfigResourceType::Topic => {
                if resource.name.is_empty() {
                    return Err(ApiError::invalid_request(
                        "Default topic resources are not allowed.",
                    ));
                }
                validate_topic_name(&resource.name)
                    .map_err(|m| ApiError::new(ResponseError::InvalidTopicException, m))?;
                if self.image.topic(&resource.name).is_none() {
                    return Err(ApiError::unknown_topic_or_partition(format!(
                        "Topic {} does not exist.",
                        resource.name
                    )));
                }
            }
            ConfigResourceType::Group if resource.name.is_empty() => {
                return Err(ApiError::invalid_request("Group name must not be empty."));
            }
            ConfigResourceType::Group => {}
            ConfigResourceType::Broker => {
                if !resource.name.is_empty() {
                    let id: i64 = resource.name.parse().map_err(|_| {
                        ApiError::invalid_request(
                            "Unable to parse broker name as a base 10 number.",
                        )
                    })?;
                    if id < 0 {
                        return Err(ApiError::invalid_request("Invalid negative broker ID."));
                    }
                }
            }
        }
        Ok(())
    }

    /// The override of key `c.name` after applying `c`; `None` removes it.
    fn altered_value(
        &self,
        resource: &ConfigResource,
        c: &AlterableConfig,
    ) -> Result<Option<String>, ApiError> {
        match c.op {
            AlterConfigOp::Delete => Ok(None),
            AlterConfigOp::Set => {
                let def = dynamic_def(resource, &c.name)?;
                let v = c.value.as_deref().ok_or_else(|| {
                    ApiError::invalid_config(format!("Null value not supported for : {}", c.name))
                })?;
                check_value(def, v)?;
                Ok(Some(v.trim().to_string()))
            }
            AlterConfigOp::Append | AlterConfigOp::Subtract => {
                let def = dynamic_def(resource, &c.name)?;
                if def.ty != ConfigType::List {
                    return Err(ApiError::invalid_config(format!(
                        "Can't {} to key {} because its type is not LIST.",
                        if c.op == AlterConfigOp::Append {
                            "APPEND"
                        } else {
                            "SUBTRACT"
                        },
                        c.name
                    )));
                }
                // The base is the override, else the value in effect now.
                let mut list = match current_value(&self.image, resource, &c.name) {
                    Some(v) => split_list(&v),
                    None => self.effective_list(resource, def),
                };
                for item in split_list(c.value.as_deref().unwrap_or("")) {
                    if c.op == AlterConfigOp::Append {
                        if !list.contains(&item) {
                            list.push(item);
                        }
                    } else {
                        list.retain(|x| *x != item);
                    }
                }
                let joined = list.join(",");
                check_value(def, &joined)?;
                Ok(Some(joined))
            }
        }
    }

    fn effective_list(&self, resource: &ConfigResource, def: &ConfigDef) -> Vec<String> {
        let view = self.config_view();
        let value = match resource.resource_type {
            ConfigResourceType::Topic => view.topic_value(&resource.name, def.name),
            ConfigResourceType::Group => view.group_value(&resource.name, def.name),
            ConfigResourceType::Broker => {
                let id = resource.name.parse().unwrap_or(self.node_id);
                BrokerConfigView::new(&self.image, &self.static_config, id).resolve(def.name)
            }
        };
        value
            .and_then(|r| r.value.as_list().map(<[String]>::to_vec))
            .unwrap_or_default()
    }
}
