//! The broker's start-up configuration: command-line flags, a `server.properties` file and
//! `--override key=value` settings, validated against gregor-meta's config definitions so that
//! an unknown or invalid setting stops start-up with a message naming it.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use gregor_meta::config::{broker_config, check_supported, parse_properties, StaticBrokerConfig};

/// What the command line gives.
#[derive(Debug, Clone, Default)]
pub struct BrokerOptions {
    /// `--listeners PLAINTEXT://HOST:PORT`.
    pub listeners: Option<String>,
    /// `--advertised-listeners PLAINTEXT://HOST:PORT`.
    pub advertised_listeners: Option<String>,
    /// `--data-dir DIR`.
    pub data_dir: Option<PathBuf>,
    /// `--node-id N`.
    pub node_id: Option<i32>,
    /// `--config FILE` contents (the caller reads the file).
    pub properties: Option<String>,
    /// `--override key=value`, in order.
    pub overrides: Vec<String>,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    pub bind: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
    pub data_dir: PathBuf,
    pub settings: StaticBrokerConfig,
    /// `max.connections.per.ip.overrides`, host names resolved at start-up.
    pub connection_overrides: HashMap<IpAddr, usize>,
}

/// A configuration problem, naming the setting.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    #[error("{0}")]
    Invalid(String),
}

fn invalid(msg: impl Into<String>) -> ConfigError {
    ConfigError::Invalid(msg.into())
}

/// Parses `PLAINTEXT://host:port` (the only listener security protocol Gregor has).
pub fn parse_listener(key: &str, value: &str) -> Result<(String, u16), ConfigError> {
    let first = value.split(',').next().unwrap_or("").trim();
    let rest = first.strip_prefix("PLAINTEXT://").ok_or_else(|| {
        invalid(format!(
            "{key}: '{value}' must look like PLAINTEXT://HOST:PORT"
        ))
    })?;
    let (host, port) = rest
        .rsplit_once(':')
        .ok_or_else(|| invalid(format!("{key}: '{value}' has no port")))?;
    let port: u16 = port
        .parse()
        .map_err(|_| invalid(format!("{key}: '{port}' is not a valid port")))?;
    let host = host
        .trim_start_matches('[')
        .trim_end_matches(']')
        .to_string();
    Ok((host, port))
}

/// Parses `max.connections.per.ip.overrides`: `host:count` entries separated by commas, hosts
/// being IP addresses or names (resolved now, every address of a name getting the limit).
pub fn parse_connection_overrides(text: &str) -> Result<HashMap<IpAddr, usize>, ConfigError> {
    const KEY: &str = "max.connections.per.ip.overrides";
    let mut out = HashMap::new();
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (host, count) = entry
            .rsplit_once(':')
            .ok_or_else(|| invalid(format!("{KEY}: '{entry}' must look like host:count")))?;
        let count: usize = count
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{KEY}: '{count}' in '{entry}' is not a count")))?;
        let host = host.trim().trim_start_matches('[').trim_end_matches(']');
        let ips: Vec<IpAddr> = match host.parse::<IpAddr>() {
            Ok(ip) => vec![ip],
            Err(_) => (host, 0)
                .to_socket_addrs()
                .map_err(|e| invalid(format!("{KEY}: cannot resolve '{host}': {e}")))?
                .map(|a| a.ip())
                .collect(),
        };
        if ips.is_empty() {
            return Err(invalid(format!("{KEY}: '{host}' resolves to nothing")));
        }
        for ip in ips {
            out.insert(ip, count);
        }
    }
    Ok(out)
}

impl BrokerConfig {
    pub fn from_options(opts: &BrokerOptions) -> Result<BrokerConfig, ConfigError> {
        let mut pairs: Vec<(String, String)> = Vec::new();
        if let Some(text) = &opts.properties {
            pairs.extend(parse_properties(text));
        }
        if let Some(l) = &opts.listeners {
            pairs.push(("listeners".into(), l.clone()));
        }
        if let Some(l) = &opts.advertised_listeners {
            pairs.push(("advertised.listeners".into(), l.clone()));
        }
        if let Some(d) = &opts.data_dir {
            pairs.push(("log.dirs".into(), d.display().to_string()));
        }
        if let Some(n) = opts.node_id {
            pairs.push(("node.id".into(), n.to_string()));
        }
        for o in &opts.overrides {
            let (k, v) = o
                .split_once('=')
                .ok_or_else(|| invalid(format!("--override '{o}' must be key=value")))?;
            pairs.push((k.trim().to_string(), v.trim().to_string()));
        }
        let mut settings = StaticBrokerConfig::new();
        for (k, v) in &pairs {
            settings.set(k, v).map_err(|e| invalid(e.to_string()))?;
        }
        // Settings whose feature does not exist yet are refused, not ignored.
        for key in settings.explicit().keys() {
            let def = broker_config(key).expect("set() accepts only known keys");
            let value = settings.get(key).expect("set() validated the value");
            check_supported(def, &value).map_err(|e| invalid(e.to_string()))?;
        }
        // Gregor's defaults where they differ from Kafka's: a bare broker is node 1 on
        // 127.0.0.1:9092 with its data in ./gregor-data.
        let node_id = match settings.node_id() {
            -1 => {
                // Recorded in the settings too, so the controller and DescribeConfigs agree.
                settings
                    .set("node.id", "1")
                    .map_err(|e| invalid(e.to_string()))?;
                1
            }
            n => n,
        };
        let listeners = settings
            .raw("listeners")
            .unwrap_or("PLAINTEXT://127.0.0.1:9092")
            .to_string();
        let (host, port) = parse_listener("listeners", &listeners)?;
        let bind_host = if host.is_empty() {
            "0.0.0.0".to_string()
        } else {
            host.clone()
        };
        let bind = (bind_host.as_str(), port)
            .to_socket_addrs()
            .map_err(|e| invalid(format!("listeners: cannot resolve '{bind_host}': {e}")))?
            .next()
            .ok_or_else(|| invalid(format!("listeners: '{bind_host}' resolves to nothing")))?;
        let (advertised_host, advertised_port) = match settings.raw("advertised.listeners") {
            Some(a) => parse_listener("advertised.listeners", a)?,
            None if host.is_empty() || host == "0.0.0.0" => ("127.0.0.1".to_string(), port),
            None => (host, port),
        };
        let dirs = settings.raw("log.dirs").or(settings.raw("log.dir"));
        if let Some(d) = dirs {
            if d.split(',').filter(|x| !x.trim().is_empty()).count() > 1 {
                return Err(invalid(format!(
                    "log.dirs: '{d}' names several directories; Gregor keeps its data in one"
                )));
            }
        }
        let data_dir = dirs
            .map(|d| PathBuf::from(d.split(',').next().unwrap_or(d).trim()))
            .unwrap_or_else(|| PathBuf::from("gregor-data"));
        let connection_overrides = parse_connection_overrides(
            settings
                .raw("max.connections.per.ip.overrides")
                .unwrap_or(""),
        )?;
        Ok(BrokerConfig {
            node_id,
            bind,
            advertised_host,
            advertised_port,
            data_dir,
            settings,
            connection_overrides,
        })
    }

    /// A broker setting as an integer (explicit or default).
    pub fn int(&self, key: &str) -> i64 {
        self.settings
            .get(key)
            .and_then(|v| v.as_i64())
            .unwrap_or_else(|| panic!("{key} is a known integer setting with a default"))
    }

    /// A broker setting as a boolean (explicit or default).
    pub fn bool(&self, key: &str) -> bool {
        self.settings
            .get(key)
            .and_then(|v| v.as_bool())
            .unwrap_or_else(|| panic!("{key} is a known boolean setting with a default"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_a_local_single_node() {
        let c = BrokerConfig::from_options(&BrokerOptions::default()).expect("valid");
        assert_eq!(c.node_id, 1);
        assert_eq!(c.bind, "127.0.0.1:9092".parse().expect("addr"));
        assert_eq!(
            (c.advertised_host.as_str(), c.advertised_port),
            ("127.0.0.1", 9092)
        );
        assert_eq!(c.data_dir, PathBuf::from("gregor-data"));
        assert_eq!(c.int("num.partitions"), 1);
    }

    #[test]
    fn flags_file_and_overrides_combine_later_wins() {
        let opts = BrokerOptions {
            listeners: Some("PLAINTEXT://127.0.0.1:19092".into()),
            data_dir: Some("/tmp/x".into()),
            node_id: Some(7),
            properties: Some(
                "num.partitions=3\n# comment\nauto.create.topics.enable=false\n".into(),
            ),
            overrides: vec!["num.partitions=5".into()],
            ..Default::default()
        };
        let c = BrokerConfig::from_options(&opts).expect("valid");
        assert_eq!(c.node_id, 7);
        assert_eq!(c.bind.port(), 19092);
        assert_eq!(c.int("num.partitions"), 5);
        assert!(!c.bool("auto.create.topics.enable"));
    }

    #[test]
    fn unknown_or_invalid_settings_are_named() {
        let bad = |o: &str| {
            BrokerConfig::from_options(&BrokerOptions {
                overrides: vec![o.to_string()],
                ..Default::default()
            })
            .expect_err("invalid")
            .to_string()
        };
        assert!(bad("num.partitons=3").contains("num.partitons"));
        assert!(bad("num.partitions=zero").contains("num.partitions"));
        assert!(bad("no-equals").contains("key=value"));
        // The cleaner's settings are checked like the rest.
        assert!(bad("log.cleaner.dedupe.buffer.size=5").contains("log.cleaner.dedupe.buffer.size"));
        assert!(
            bad("log.cleaner.min.cleanable.ratio=1.5").contains("log.cleaner.min.cleanable.ratio")
        );
        assert!(bad("log.cleaner.min.compaction.lag.ms=-1")
            .contains("log.cleaner.min.compaction.lag.ms"));
        assert!(bad("log.dirs=/tmp/a,/tmp/b").contains("log.dirs"));
        assert!(bad("max.connections.per.ip.overrides=127.0.0.1").contains("host:count"));
        let e = BrokerConfig::from_options(&BrokerOptions {
            listeners: Some("127.0.0.1:9092".into()),
            ..Default::default()
        })
        .expect_err("invalid");
        assert!(e.to_string().contains("PLAINTEXT://"));
    }

    #[test]
    fn settings_of_missing_features_are_refused_unless_default() {
        let start = |o: &str| {
            BrokerConfig::from_options(&BrokerOptions {
                overrides: vec![o.to_string()],
                ..Default::default()
            })
        };
        for o in [
            "controller.quorum.voters=1@127.0.0.1:9093",
            "replica.lag.time.max.ms=10000",
            "replica.fetch.max.bytes=5",
            "num.replica.fetchers=4",
            "process.roles=broker",
            "num.io.threads=16",
            "log.roll.jitter.ms=5",
        ] {
            let key = o.split('=').next().expect("key");
            let e = start(o).expect_err("refused").to_string();
            assert!(e.contains(key) && e.contains("not supported"), "{o}: {e}");
        }
        // Kafka's default value is what Gregor does, so it is accepted.
        start("replica.lag.time.max.ms=30000").expect("the default is accepted");
        start("controller.quorum.voters=").expect("empty is the default");
    }

    #[test]
    fn connection_overrides_parse_addresses_and_names() {
        let ip = |s: &str| s.parse::<IpAddr>().expect("ip");
        let o = parse_connection_overrides("127.0.0.2:5, [::1]:9").expect("valid");
        assert_eq!(o.get(&ip("127.0.0.2")), Some(&5));
        assert_eq!(o.get(&ip("::1")), Some(&9));
        let o = parse_connection_overrides("localhost:7").expect("localhost resolves");
        assert_eq!(o.get(&ip("127.0.0.1")), Some(&7));
        assert!(parse_connection_overrides("127.0.0.1:x").is_err());
        assert!(parse_connection_overrides("").expect("empty").is_empty());
    }
}
