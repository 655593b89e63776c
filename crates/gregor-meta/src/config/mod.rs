//! Configs: the definition table ([`defs`]), parsing and validation ([`value`]), the broker's
//! static configuration (server properties, `--override`), how a topic's or broker's effective
//! value is resolved from overrides and defaults, and DescribeConfigs entries.

pub mod defs;
mod describe;
mod properties;
mod resolve;
pub mod value;

pub use defs::{
    broker_config, check_supported, dynamic_listener_ssl, group_config, parse_broker_config,
    parse_topic_config, topic_config, unsupported_reason, ConfigDef, Synonym, SynonymUnit,
    BROKER_CONFIGS, DYNAMIC_LISTENER_SSL_CONFIGS, GROUP_CONFIGS, TOPIC_CONFIGS, UNSUPPORTED,
};
pub use describe::{describe_configs, ConfigSynonymEntry, DescribedConfig};
pub use properties::parse_properties;
pub use resolve::{
    validate_group_overrides, validate_topic_overrides, BrokerConfigView, ConfigSource,
    ResolvedConfig, StaticBrokerConfig,
};
pub use value::{split_list, ConfigError, ConfigType, ConfigValue, Validator};
