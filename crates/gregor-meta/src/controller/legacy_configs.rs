//! AlterConfigs, the API before IncrementalAlterConfigs (KIP-133; Kafka's admin clients and
//! librdkafka's `AlterConfigs` still send it): each resource's dynamic configs become exactly
//! the ones listed, so every override not listed goes back to its default.

use std::collections::BTreeSet;

use super::configs::{AlterConfigOp, AlterConfigsResource, AlterableConfig};
use super::state::{Controller, ControllerResult};
use crate::error::ApiError;
use crate::record::ConfigResource;

/// One config of a legacy AlterConfigs resource: a key and its new value (`None` removes it).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyConfig {
    pub name: String,
    pub value: Option<String>,
}

impl Controller {
    /// AlterConfigs: replaces each resource's whole set of overrides. Validation and errors are
    /// IncrementalAlterConfigs's; the deletions are worked out here, on the image the request
    /// is decided on, so a concurrent change cannot slip between reading and writing.
    pub fn alter_configs(
        &self,
        resources: &[(ConfigResource, Vec<LegacyConfig>)],
        validate_only: bool,
    ) -> ControllerResult<Vec<(ConfigResource, Result<(), ApiError>)>> {
        let full: Vec<AlterConfigsResource> = resources
            .iter()
            .map(|(resource, configs)| self.replacing(resource, configs))
            .collect();
        self.incremental_alter_configs(&full, validate_only)
    }

    /// The incremental form of "these and no others".
    fn replacing(
        &self,
        resource: &ConfigResource,
        configs: &[LegacyConfig],
    ) -> AlterConfigsResource {
        let listed: BTreeSet<&str> = configs.iter().map(|c| c.name.as_str()).collect();
        let mut out: Vec<AlterableConfig> = configs
            .iter()
            .map(|c| AlterableConfig {
                name: c.name.clone(),
                op: if c.value.is_some() {
                    AlterConfigOp::Set
                } else {
                    AlterConfigOp::Delete
                },
                value: c.value.clone(),
            })
            .collect();
        let current = self.image.configs(resource);
        for key in current.into_iter().flat_map(|m| m.keys()) {
            if !listed.contains(key.as_str()) {
                out.push(AlterableConfig {
                    name: key.clone(),
                    op: AlterConfigOp::Delete,
                    value: None,
                });
            }
        }
        AlterConfigsResource {
            resource: resource.clone(),
            configs: out,
        }
    }
}
