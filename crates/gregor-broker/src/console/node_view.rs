//! The JSON of one node's details (`/ui/api/broker`) and of a topic's configs
//! (`/ui/api/topic-configs`), from facts the shell read (`node`). Pure.

use gregor_meta::config::DescribedConfig;
use serde_json::{json, Value};

/// The file system of one data directory: `(total, usable)` bytes, or why it could not be read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogDirSpace {
    pub path: String,
    pub space: Result<(u64, u64), String>,
}

/// What the shell read of this node.
#[derive(Debug)]
pub struct NodeFacts<'a> {
    pub node_id: i32,
    pub version: &'a str,
    pub commit: &'a str,
    /// The process's start, in milliseconds since the epoch (`process_start_time_seconds`).
    pub started_ms: Option<i64>,
    pub now_ms: i64,
    /// `None` when the viewer may not DESCRIBE the cluster (DescribeLogDirs' rule).
    pub log_dirs: Option<&'a [LogDirSpace]>,
    /// `None` when the viewer may not DESCRIBE_CONFIGS the cluster (DescribeConfigs' rule for a
    /// BROKER resource); else the answer or its error.
    pub configs: Option<&'a Result<Vec<DescribedConfig>, String>>,
}

/// `/ui/api/broker` of this node.
pub fn node(f: &NodeFacts<'_>) -> Value {
    let log_dirs = f.log_dirs.map(|dirs| {
        dirs.iter()
            .map(|d| match &d.space {
                Ok((total, usable)) => json!({
                    "path": d.path,
                    "total_bytes": total,
                    "free_bytes": usable,
                    "used_bytes": total.saturating_sub(*usable),
                }),
                Err(e) => json!({ "path": d.path, "error": e }),
            })
            .collect::<Vec<_>>()
    });
    let (configs, configs_error) = match f.configs {
        None => (
            Value::Null,
            Some("not authorized to describe the cluster's configs".to_string()),
        ),
        Some(Ok(list)) => (configs(list), None),
        Some(Err(e)) => (Value::Null, Some(e.clone())),
    };
    json!({
        "node_id": f.node_id,
        "broker_id": f.node_id,
        "version": f.version,
        "commit": f.commit,
        "started_ms": f.started_ms,
        // A clock stepped back is not a negative uptime.
        "uptime_ms": f.started_ms.map(|s| f.now_ms.saturating_sub(s).max(0)),
        "log_dirs": log_dirs,
        "log_dirs_error": f.log_dirs.is_none().then_some("not authorized to describe the cluster"),
        "configs": configs,
        "configs_error": configs_error,
    })
}

/// `/ui/api/topic-configs` of `topic`.
pub fn topic_configs(node_id: i32, topic: &str, list: &[DescribedConfig]) -> Value {
    json!({ "node_id": node_id, "topic": topic, "configs": configs(list) })
}

/// Configs by name, each with its effective value and where it comes from; a sensitive value is
/// never shown (null), as DescribeConfigs answers it.
pub fn configs(list: &[DescribedConfig]) -> Value {
    let mut sorted: Vec<&DescribedConfig> = list.iter().collect();
    sorted.sort_by(|a, b| a.name.cmp(&b.name));
    sorted
        .into_iter()
        .map(|c| {
            json!({
                "name": c.name,
                "value": if c.sensitive { None } else { c.value.as_deref() },
                "source": c.source.name(),
                "sensitive": c.sensitive,
                "read_only": c.read_only,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use gregor_meta::config::{ConfigSource, ConfigType};

    fn config(
        name: &str,
        value: Option<&str>,
        source: ConfigSource,
        sensitive: bool,
    ) -> DescribedConfig {
        DescribedConfig {
            name: name.into(),
            value: value.map(String::from),
            source,
            read_only: true,
            sensitive,
            config_type: ConfigType::String,
            documentation: "",
            synonyms: Vec::new(),
        }
    }

    fn facts<'a>(
        dirs: Option<&'a [LogDirSpace]>,
        configs: Option<&'a Result<Vec<DescribedConfig>, String>>,
    ) -> NodeFacts<'a> {
        NodeFacts {
            node_id: 2,
            version: "0.1.0",
            commit: "abc123",
            started_ms: Some(1_000),
            now_ms: 61_000,
            log_dirs: dirs,
            configs,
        }
    }

    #[test]
    fn sensitive_values_are_hidden_and_configs_sorted_with_their_source() {
        let list = vec![
            config(
                "ssl.truststore.password",
                Some("hunter2"),
                ConfigSource::StaticBrokerConfig,
                true,
            ),
            config(
                "log.retention.ms",
                Some("1000"),
                ConfigSource::DynamicBrokerConfig,
                false,
            ),
            config("compression.type", None, ConfigSource::DefaultConfig, false),
        ];
        let v = configs(&list);
        let names: Vec<&str> = v
            .as_array()
            .expect("array")
            .iter()
            .map(|c| c["name"].as_str().expect("name"))
            .collect();
        assert_eq!(
            names,
            [
                "compression.type",
                "log.retention.ms",
                "ssl.truststore.password"
            ]
        );
        assert_eq!(v[1]["value"], "1000");
        assert_eq!(v[1]["source"], "DYNAMIC_BROKER_CONFIG");
        assert_eq!(v[2]["value"], Value::Null);
        assert_eq!(v[2]["sensitive"], true);
        assert_eq!(v[2]["source"], "STATIC_BROKER_CONFIG");
        assert!(!v.to_string().contains("hunter2"));
        assert_eq!(v[0]["value"], Value::Null);
        assert_eq!(v[0]["source"], "DEFAULT_CONFIG");
    }

    #[test]
    fn node_details_give_uptime_disk_and_configs() {
        let dirs = [
            LogDirSpace {
                path: "/data".into(),
                space: Ok((1000, 250)),
            },
            LogDirSpace {
                path: "/gone".into(),
                space: Err("no such directory".into()),
            },
        ];
        let configs = Ok(vec![config(
            "node.id",
            Some("2"),
            ConfigSource::StaticBrokerConfig,
            false,
        )]);
        let v = node(&facts(Some(&dirs), Some(&configs)));
        assert_eq!(v["broker_id"], 2);
        assert_eq!(v["version"], "0.1.0");
        assert_eq!(v["commit"], "abc123");
        assert_eq!(v["uptime_ms"], 60_000);
        assert_eq!(v["log_dirs"][0]["free_bytes"], 250);
        assert_eq!(v["log_dirs"][0]["used_bytes"], 750);
        assert_eq!(v["log_dirs"][1]["error"], "no such directory");
        assert_eq!(v["log_dirs_error"], Value::Null);
        assert_eq!(v["configs"][0]["value"], "2");
        assert_eq!(v["configs_error"], Value::Null);
    }

    #[test]
    fn what_the_viewer_may_not_see_is_left_out_with_the_reason() {
        let v = node(&facts(None, None));
        assert_eq!(v["log_dirs"], Value::Null);
        assert!(v["log_dirs_error"]
            .as_str()
            .expect("reason")
            .contains("not authorized"));
        assert_eq!(v["configs"], Value::Null);
        assert!(v["configs_error"]
            .as_str()
            .expect("reason")
            .contains("not authorized"));
        let failed = Err("the metadata is loading".to_string());
        let v = node(&facts(None, Some(&failed)));
        assert_eq!(v["configs_error"], "the metadata is loading");
    }

    #[test]
    fn a_clock_stepped_back_gives_no_negative_uptime() {
        let mut f = facts(None, None);
        f.now_ms = 500;
        assert_eq!(node(&f)["uptime_ms"], 0);
        f.started_ms = None;
        assert_eq!(node(&f)["uptime_ms"], Value::Null);
    }
}
