//! The broker's start-up configuration: command-line flags, a `server.properties` file and
//! `--override key=value` settings, validated against gregor-meta's config definitions so that
//! an unknown or invalid setting stops start-up with a message naming it.

use std::collections::{BTreeMap, HashMap};
use std::net::{IpAddr, SocketAddr, ToSocketAddrs};
use std::path::PathBuf;

use gregor_meta::config::{broker_config, check_supported, parse_properties, StaticBrokerConfig};

use gregor_client::sasl::ClientSasl;

use crate::sasl_config::SaslListener;
use crate::security::SecurityProtocol;
use crate::tls::{PeerTls, TlsListener};

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
    /// `--process-roles broker,controller`.
    pub process_roles: Option<String>,
    /// `--controller-quorum-voters id@host:port,...`.
    pub controller_quorum_voters: Option<String>,
    /// `--rack R` (`broker.rack`).
    pub rack: Option<String>,
    /// `--cluster-id ID`: the cluster id a new data directory gets.
    pub cluster_id: Option<String>,
}

/// Validated configuration.
#[derive(Debug, Clone)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// The inter-broker listener's address (a controller-only node's: its controller
    /// listener's), and the endpoint other nodes reach it at.
    pub bind: SocketAddr,
    pub advertised_host: String,
    pub advertised_port: u16,
    /// Every client listener, the inter-broker one first; empty on a controller-only node.
    pub listeners: Vec<ClientListener>,
    /// TLS for the connections this broker opens to other brokers' inter-broker listeners
    /// (replication), when that listener is SSL or SASL_SSL.
    /// Reloaded with the listener's stores (`crate::tls::ListenerTlsSet`).
    pub inter_broker_tls: Option<PeerTls>,
    /// The SASL login of those connections, when that listener is SASL_PLAINTEXT or SASL_SSL.
    pub inter_broker_sasl: Option<ClientSasl>,
    pub data_dir: PathBuf,
    pub settings: StaticBrokerConfig,
    /// `max.connections.per.ip.overrides`, host names resolved at start-up.
    pub connection_overrides: HashMap<IpAddr, usize>,
    /// Where the controller listener binds (`listeners` entry named in
    /// `controller.listener.names`); `None` for a single node without one.
    pub controller_bind: Option<SocketAddr>,
    /// TLS of the controller listener and of the connections to the controllers.
    pub controller_tls: ControllerTls,
    /// `controller.quorum.voters` (id -> `host:port`); a single node without the setting is
    /// its own quorum of one (with no address: nobody needs to reach it).
    pub voters: BTreeMap<u64, String>,
    /// `broker.rack`.
    pub rack: Option<String>,
    /// `process.roles` has `broker`: serves clients, registers, hosts replicas.
    pub is_broker: bool,
    /// `process.roles` has `controller`: votes in the quorum.
    pub is_controller: bool,
    /// `--cluster-id`.
    pub cluster_id: Option<String>,
    /// TLS of an https `metrics.listener`; reloaded with the listener stores.
    pub metrics_tls: MetricsTls,
}

/// The name of the metrics listener in `listener.name.<name>.ssl.*` settings.
pub const METRICS_LISTENER_NAME: &str = "metrics";

/// Whether a `metrics.listener` value asks for TLS.
pub fn is_https(value: &str) -> bool {
    value.trim().starts_with("https://")
}

/// An https `metrics.listener`'s TLS, built at start-up from `listener.name.metrics.ssl.*` (over
/// `ssl.*`) and shared with the reload of listener stores (`crate::tls::ListenerTlsSet`), so
/// that an IncrementalAlterConfigs of those settings reaches the listener and the console's
/// client without a restart.
#[derive(Debug, Clone, Default)]
pub struct MetricsTls {
    /// What the listener serves; a bad store stops start-up.
    pub server: Option<TlsListener>,
    /// The same settings as a client of the other nodes' consoles. `None` when they do not
    /// make a client: the console then says why when it needs one.
    pub peers: Option<PeerTls>,
}

impl MetricsTls {
    /// From the settings: nothing unless `metrics.listener` is an https URL.
    pub fn of(settings: &StaticBrokerConfig) -> Result<MetricsTls, ConfigError> {
        if !settings.raw("metrics.listener").is_some_and(is_https) {
            return Ok(MetricsTls::default());
        }
        let server = TlsListener::from_settings(settings, METRICS_LISTENER_NAME)
            .map_err(|e| invalid(format!("metrics.listener: {e}")))?;
        let peers = PeerTls::from_settings(
            settings,
            METRICS_LISTENER_NAME,
            crate::tls::PeerRole::ConsolePeers,
        )
        .ok();
        Ok(MetricsTls {
            server: Some(server),
            peers,
        })
    }
}

/// One `listeners` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listener {
    pub name: String,
    pub host: String,
    pub port: u16,
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

/// Parses a `listeners` (or `advertised.listeners`) list: `NAME://host:port` entries separated
/// by commas, each name once. Which names may appear is `listener.security.protocol.map`'s
/// call ([`ListenerConfig::of`]).
pub fn parse_listeners(key: &str, value: &str) -> Result<Vec<Listener>, ConfigError> {
    let mut out: Vec<Listener> = Vec::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, rest) = entry.split_once("://").ok_or_else(|| {
            invalid(format!(
                "{key}: '{entry}' must look like PLAINTEXT://HOST:PORT"
            ))
        })?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or_else(|| invalid(format!("{key}: '{entry}' has no port")))?;
        let port: u16 = port
            .parse()
            .map_err(|_| invalid(format!("{key}: '{port}' is not a valid port")))?;
        if out.iter().any(|l| l.name == name) {
            return Err(invalid(format!("{key}: listener '{name}' appears twice")));
        }
        out.push(Listener {
            name: name.to_string(),
            host: host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string(),
            port,
        });
    }
    if out.is_empty() {
        return Err(invalid(format!(
            "{key}: '{value}' must look like PLAINTEXT://HOST:PORT"
        )));
    }
    Ok(out)
}

/// Parses `listener.security.protocol.map`: `NAME:PROTOCOL` entries separated by commas.
pub fn parse_protocol_map(value: &str) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    const KEY: &str = "listener.security.protocol.map";
    let mut out = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (name, protocol) = entry
            .split_once(':')
            .ok_or_else(|| invalid(format!("{KEY}: '{entry}' must look like NAME:PROTOCOL")))?;
        let protocol = SecurityProtocol::parse(protocol).ok_or_else(|| {
            invalid(format!(
                "{KEY}: '{protocol}' in '{entry}' is not PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL"
            ))
        })?;
        if out.insert(name.trim().to_string(), protocol).is_some() {
            return Err(invalid(format!("{KEY}: listener '{name}' appears twice")));
        }
    }
    Ok(out)
}

/// Parses `controller.quorum.voters`: `id@host:port` entries separated by commas.
pub fn parse_voters(value: &str) -> Result<BTreeMap<u64, String>, ConfigError> {
    const KEY: &str = "controller.quorum.voters";
    let mut out = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, addr) = entry
            .split_once('@')
            .ok_or_else(|| invalid(format!("{KEY}: '{entry}' must look like id@host:port")))?;
        let id: u64 = id
            .trim()
            .parse()
            .map_err(|_| invalid(format!("{KEY}: '{id}' in '{entry}' is not a node id")))?;
        let (host, port) = addr
            .rsplit_once(':')
            .ok_or_else(|| invalid(format!("{KEY}: '{entry}' has no port")))?;
        if host.is_empty() || port.parse::<u16>().is_err() {
            return Err(invalid(format!(
                "{KEY}: '{entry}' must look like id@host:port"
            )));
        }
        if out.insert(id, addr.to_string()).is_some() {
            return Err(invalid(format!("{KEY}: node {id} appears twice")));
        }
    }
    Ok(out)
}

fn resolve(key: &str, host: &str, port: u16) -> Result<SocketAddr, ConfigError> {
    let bind_host = if host.is_empty() { "0.0.0.0" } else { host };
    (bind_host, port)
        .to_socket_addrs()
        .map_err(|e| invalid(format!("{key}: cannot resolve '{bind_host}': {e}")))?
        .next()
        .ok_or_else(|| invalid(format!("{key}: '{bind_host}' resolves to nothing")))
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

/// The settings as `key=value` pairs, later ones winning: the properties file, then the
/// command-line flags, then `--override`s.
fn option_pairs(opts: &BrokerOptions) -> Result<Vec<(String, String)>, ConfigError> {
    let mut pairs: Vec<(String, String)> = Vec::new();
    if let Some(text) = &opts.properties {
        pairs.extend(parse_properties(text));
    }
    let flags = [
        ("listeners", opts.listeners.clone()),
        ("advertised.listeners", opts.advertised_listeners.clone()),
        (
            "log.dirs",
            opts.data_dir.as_ref().map(|d| d.display().to_string()),
        ),
        ("node.id", opts.node_id.map(|n| n.to_string())),
        ("process.roles", opts.process_roles.clone()),
        (
            "controller.quorum.voters",
            opts.controller_quorum_voters.clone(),
        ),
        ("broker.rack", opts.rack.clone()),
    ];
    for (key, value) in flags {
        if let Some(value) = value {
            pairs.push((key.into(), value));
        }
    }
    for o in &opts.overrides {
        let (k, v) = o
            .split_once('=')
            .ok_or_else(|| invalid(format!("--override '{o}' must be key=value")))?;
        pairs.push((k.trim().to_string(), v.trim().to_string()));
    }
    Ok(pairs)
}

/// The pairs as validated settings. Settings whose feature does not exist yet are refused,
/// not ignored.
fn settings_from(pairs: &[(String, String)]) -> Result<StaticBrokerConfig, ConfigError> {
    let mut settings = StaticBrokerConfig::new();
    for (k, v) in pairs {
        settings.set(k, v).map_err(|e| invalid(e.to_string()))?;
    }
    for key in settings.explicit().keys() {
        let def = broker_config(key).expect("set() accepts only known keys");
        let value = settings.get(key).expect("set() validated the value");
        check_supported(def, &value).map_err(|e| invalid(e.to_string()))?;
    }
    Ok(settings)
}

/// `node.id`. Gregor's defaults where they differ from Kafka's: a bare broker is node 1 on
/// 127.0.0.1:9092 with its data in ./gregor-data.
fn node_id(settings: &mut StaticBrokerConfig) -> Result<i32, ConfigError> {
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
    // Producer ids embed the node id (see `producer_ids.rs`).
    if node_id >= 1 << 23 {
        return Err(invalid(format!(
            "node.id: {node_id} is too large; node ids must be below 8388608"
        )));
    }
    Ok(node_id)
}

/// KIP-848's settings lie within their bounds, and a member heartbeats within its session.
fn consumer_group_bounds(settings: &StaticBrokerConfig) -> Result<(), ConfigError> {
    let int = |k: &str| settings.get(k).and_then(|v| v.as_i64()).unwrap_or(0);
    for what in ["session.timeout.ms", "heartbeat.interval.ms"] {
        let (key, min_key, max_key) = (
            format!("group.consumer.{what}"),
            format!("group.consumer.min.{what}"),
            format!("group.consumer.max.{what}"),
        );
        let (v, min, max) = (int(&key), int(&min_key), int(&max_key));
        if min > max {
            return Err(invalid(format!(
                "{min_key} ({min}) must not exceed {max_key} ({max})"
            )));
        }
        if v < min || v > max {
            return Err(invalid(format!(
                "{key} ({v}) must lie within {min_key} ({min}) and {max_key} ({max})"
            )));
        }
    }
    let (beat, session) = (
        int("group.consumer.heartbeat.interval.ms"),
        int("group.consumer.session.timeout.ms"),
    );
    if beat >= session {
        return Err(invalid(format!(
            "group.consumer.heartbeat.interval.ms ({beat}) must be below group.consumer.session.timeout.ms ({session})"
        )));
    }
    Ok(())
}

/// `process.roles` and `controller.listener.names`.
struct Roles {
    roles: Vec<String>,
    is_broker: bool,
    is_controller: bool,
    controller_names: Vec<String>,
}

impl Roles {
    fn of(settings: &StaticBrokerConfig) -> Roles {
        let roles: Vec<String> = settings
            .raw("process.roles")
            .unwrap_or("broker,controller")
            .split(',')
            .map(str::trim)
            .filter(|r| !r.is_empty())
            .map(str::to_string)
            .collect();
        let controller_names = settings
            .raw("controller.listener.names")
            .unwrap_or("CONTROLLER")
            .split(',')
            .map(|n| n.trim().to_string())
            .filter(|n| !n.is_empty())
            .collect();
        Roles {
            is_broker: roles.iter().any(|r| r == "broker"),
            is_controller: roles.iter().any(|r| r == "controller"),
            roles,
            controller_names,
        }
    }
}

/// A listener clients (and other brokers) connect to: where it binds, what it advertises, its
/// security protocol and, for `SSL` and `SASL_SSL`, its TLS configuration, for `SASL_*` its
/// SASL settings.
#[derive(Debug, Clone)]
pub struct ClientListener {
    pub name: String,
    pub security_protocol: SecurityProtocol,
    pub bind: SocketAddr,
    /// The endpoint registered for it (`advertised.listeners`); `None` when
    /// `advertised.listeners` leaves it out (served, but not published, as in Kafka).
    pub advertised: Option<(String, u16)>,
    pub tls: Option<TlsListener>,
    pub sasl: Option<std::sync::Arc<SaslListener>>,
}

/// Where the node listens (`listeners`) and what it tells clients (`advertised.listeners`).
struct ListenerConfig {
    /// Client listeners, the inter-broker one first.
    clients: Vec<ClientListener>,
    controller: Option<Listener>,
    controller_bind: Option<SocketAddr>,
    controller_tls: ControllerTls,
}

/// TLS and SASL on the controller quorum's links, as the controller listener's protocol says.
#[derive(Debug, Clone, Default)]
pub struct ControllerTls {
    /// This node's controller listener (a controller's), serving over TLS.
    pub server: Option<TlsListener>,
    /// The controller listener this node serves (of `controller.listener.names`), TLS or not.
    pub server_name: Option<String>,
    /// Its protocol.
    pub server_protocol: Option<SecurityProtocol>,
    /// The connections this node opens to the controllers (every node's); reloaded with the
    /// listener's stores.
    pub client: Option<PeerTls>,
    /// SASL_PLAINTEXT / SASL_SSL: what connections to this node's controller listener log in
    /// against (after TLS for SASL_SSL).
    pub server_sasl: Option<std::sync::Arc<SaslListener>>,
    /// SASL_PLAINTEXT / SASL_SSL: this node's own login to the controllers.
    pub client_sasl: Option<ClientSasl>,
}

impl ControllerTls {
    /// The security of the controller listener: the one nodes connect to (the first of
    /// `controller.listener.names`) and `controller`, the one this node serves. Any of Kafka's
    /// four protocols, each with that listener's `ssl.*` / `sasl.*` settings as server and, as
    /// Kafka does, as client.
    fn of(
        settings: &StaticBrokerConfig,
        roles: &Roles,
        protocols: &BTreeMap<String, SecurityProtocol>,
        controller: Option<&Listener>,
    ) -> Result<ControllerTls, ConfigError> {
        let protocol = |name: &str| {
            protocols
                .get(name)
                .copied()
                .unwrap_or(SecurityProtocol::Plaintext)
        };
        let is_sasl = |p: SecurityProtocol| {
            matches!(
                p,
                SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl
            )
        };
        let mut out = ControllerTls::default();
        if let Some(c) = controller {
            let p = protocol(&c.name);
            out.server_name = Some(c.name.clone());
            out.server_protocol = Some(p);
            if p.uses_tls() {
                out.server = Some(
                    TlsListener::from_settings(settings, &c.name)
                        .map_err(|e| invalid(format!("listener {}: {e}", c.name)))?,
                );
            }
            if is_sasl(p) {
                out.server_sasl = Some(std::sync::Arc::new(
                    SaslListener::from_settings(settings, &c.name)
                        .map_err(|e| invalid(format!("listener {}: {e}", c.name)))?,
                ));
            }
        }
        let Some(name) = roles.controller_names.first() else {
            return Ok(out);
        };
        let p = protocol(name);
        if p.uses_tls() {
            out.client = Some(
                crate::tls::controller_client(settings, name)
                    .map_err(|e| invalid(e.to_string()))?,
            );
        }
        if is_sasl(p) {
            let serving = controller
                .filter(|c| c.name == *name)
                .and(out.server_sasl.as_deref());
            out.client_sasl = Some(controller_login(settings, name, serving)?);
        }
        Ok(out)
    }
}

/// This node's login to the controllers on a SASL controller listener `listener`:
/// `sasl.mechanism.controller.protocol` (Kafka's default, GSSAPI, is not available) and the
/// `username` / `password` of that mechanism's JAAS line on the listener
/// (`listener.name.<listener>.<mechanism>.sasl.jaas.config`, else `sasl.jaas.config`).
/// `serving` is the listener as this node serves it, whose mechanisms must include it.
fn controller_login(
    settings: &StaticBrokerConfig,
    listener: &str,
    serving: Option<&SaslListener>,
) -> Result<ClientSasl, ConfigError> {
    const KEY: &str = "sasl.mechanism.controller.protocol";
    let name = settings.raw(KEY).unwrap_or("GSSAPI");
    let mechanism = crate::sasl_config::SaslMechanism::from_name(name)
        .filter(|m| *m != crate::sasl_config::SaslMechanism::OAuthBearer)
        .ok_or_else(|| {
            invalid(format!(
                "{KEY}: '{name}' is not supported; the controller listener {listener} is SASL, so set it to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default is GSSAPI)"
            ))
        })?;
    if serving.is_some_and(|l| !l.accepts(mechanism)) {
        return Err(invalid(format!(
            "{KEY}: {name} must be among the sasl.enabled.mechanisms of the controller listener {listener}"
        )));
    }
    let own_key = gregor_sasl::listener_jaas_key(listener, name);
    let text = gregor_sasl::jaas_config_for(listener, name, |k| settings.raw(k)).ok_or_else(|| {
        invalid(format!(
            "{own_key}: the controller listener {listener} needs this node's own login for {name}: a JAAS line with username and password"
        ))
    })?;
    let key = match settings.raw(&own_key) {
        Some(_) => own_key,
        None => "sasl.jaas.config".to_string(),
    };
    ClientSasl::from_jaas(name, text, &key).map_err(|e| invalid(e.to_string()))
}

impl ListenerConfig {
    fn of(settings: &StaticBrokerConfig, roles: &Roles) -> Result<ListenerConfig, ConfigError> {
        let protocols = protocol_map(settings, &roles.controller_names)?;
        let listeners = parse_listeners(
            "listeners",
            settings
                .raw("listeners")
                .unwrap_or("PLAINTEXT://127.0.0.1:9092"),
        )?;
        let is_controller_listener = |l: &Listener| roles.controller_names.contains(&l.name);
        let controller = listeners.iter().find(|l| is_controller_listener(l));
        let controller_tls = ControllerTls::of(settings, roles, &protocols, controller)?;
        let advertised = match settings.raw("advertised.listeners") {
            Some(a) => Some(parse_listeners("advertised.listeners", a)?),
            None => None,
        };
        let mut clients = Vec::new();
        for l in listeners.iter().filter(|l| !is_controller_listener(l)) {
            let protocol = *protocols.get(&l.name).ok_or_else(|| {
                invalid(format!(
                    "listeners: listener '{}' has no security protocol in listener.security.protocol.map",
                    l.name
                ))
            })?;
            clients.push(client_listener(
                settings,
                l,
                protocol,
                advertised.as_deref(),
            )?);
        }
        check_advertised(advertised.as_deref(), &clients, &roles.controller_names)?;
        if roles.is_broker {
            if clients.is_empty() {
                return Err(invalid(
                    "listeners: a broker needs a client listener, e.g. PLAINTEXT://HOST:PORT",
                ));
            }
            order_inter_broker_first(settings, &mut clients)?;
        }
        let controller_bind = controller
            .map(|l| resolve("listeners", &l.host, l.port))
            .transpose()?;
        Ok(ListenerConfig {
            clients,
            controller: controller.cloned(),
            controller_bind,
            controller_tls,
        })
    }

    /// The address the node is reached at: its inter-broker listener, else (a controller-only
    /// node, which serves no clients) its controller listener.
    fn primary(&self) -> Result<(SocketAddr, String, u16), ConfigError> {
        if let Some(c) = self.clients.first() {
            let (host, port) = c
                .advertised
                .clone()
                .unwrap_or_else(|| (advertised_host(&c.bind.ip().to_string()), c.bind.port()));
            return Ok((c.bind, host, port));
        }
        match (&self.controller, self.controller_bind) {
            (Some(l), Some(bind)) => Ok((bind, advertised_host(&l.host), l.port)),
            _ => Err(invalid("listeners: no listener to serve")),
        }
    }
}

/// The host published for a listener bound to `host`: 127.0.0.1 for a wildcard.
fn advertised_host(host: &str) -> String {
    if host.is_empty() || host == "0.0.0.0" || host == "::" {
        "127.0.0.1".to_string()
    } else {
        host.to_string()
    }
}

/// `listener.security.protocol.map`, the controller listeners PLAINTEXT unless it says
/// otherwise (when it is left at its default).
fn protocol_map(
    settings: &StaticBrokerConfig,
    controller_names: &[String],
) -> Result<BTreeMap<String, SecurityProtocol>, ConfigError> {
    const KEY: &str = "listener.security.protocol.map";
    let explicit = settings.raw(KEY);
    let default = broker_config(KEY).and_then(|d| d.default).unwrap_or("");
    let mut map = parse_protocol_map(explicit.unwrap_or(default))?;
    for name in controller_names {
        if map.contains_key(name) {
            continue;
        }
        if explicit.is_some() {
            return Err(invalid(format!(
                "{KEY}: no entry for the controller listener {name} (e.g. {name}:PLAINTEXT)"
            )));
        }
        map.insert(name.clone(), SecurityProtocol::Plaintext);
    }
    Ok(map)
}

/// One client listener: its address resolved, its TLS and SASL set up.
fn client_listener(
    settings: &StaticBrokerConfig,
    l: &Listener,
    protocol: SecurityProtocol,
    advertised: Option<&[Listener]>,
) -> Result<ClientListener, ConfigError> {
    let sasl = match protocol {
        SecurityProtocol::SaslPlaintext | SecurityProtocol::SaslSsl => Some(std::sync::Arc::new(
            SaslListener::from_settings(settings, &l.name)
                .map_err(|e| invalid(format!("listener {}: {e}", l.name)))?,
        )),
        SecurityProtocol::Plaintext | SecurityProtocol::Ssl => None,
    };
    let tls = match protocol.uses_tls() {
        true => Some(
            TlsListener::from_settings(settings, &l.name)
                .map_err(|e| invalid(format!("listener {}: {e}", l.name)))?,
        ),
        false => None,
    };
    let advertised = match advertised {
        Some(list) => list
            .iter()
            .find(|a| a.name == l.name)
            .map(|a| (a.host.clone(), a.port)),
        None => Some((advertised_host(&l.host), l.port)),
    };
    Ok(ClientListener {
        name: l.name.clone(),
        security_protocol: protocol,
        bind: resolve("listeners", &l.host, l.port)?,
        advertised,
        tls,
        sasl,
    })
}

/// `advertised.listeners` may name only listeners the node has (controller listeners, which
/// clients never use, are skipped).
fn check_advertised(
    advertised: Option<&[Listener]>,
    clients: &[ClientListener],
    controller_names: &[String],
) -> Result<(), ConfigError> {
    for a in advertised.unwrap_or_default() {
        if controller_names.contains(&a.name) || clients.iter().any(|c| c.name == a.name) {
            continue;
        }
        return Err(invalid(format!(
            "advertised.listeners: listener '{}' is not in listeners",
            a.name
        )));
    }
    Ok(())
}

/// `inter.broker.listener.name`, else the listener named after `security.inter.broker.protocol`:
/// what other brokers replicate from. It goes first (endpoint order tells other nodes where
/// to reach this one), and must be advertised.
fn order_inter_broker_first(
    settings: &StaticBrokerConfig,
    clients: &mut [ClientListener],
) -> Result<(), ConfigError> {
    let name =
        match (
            settings.raw("inter.broker.listener.name"),
            settings.raw("security.inter.broker.protocol"),
        ) {
            (Some(_), Some(_)) => return Err(invalid(
                "inter.broker.listener.name: set it or security.inter.broker.protocol, not both",
            )),
            (Some(n), None) => ("inter.broker.listener.name", n.to_string()),
            (None, p) => (
                "security.inter.broker.protocol",
                p.unwrap_or("PLAINTEXT").to_string(),
            ),
        };
    let (key, name) = name;
    let i = clients.iter().position(|c| c.name == name).ok_or_else(|| {
        invalid(format!(
            "{key}: the inter-broker listener {name} is not among the client listeners ({})",
            names(clients)
        ))
    })?;
    let c = &clients[i];
    if c.advertised.is_none() {
        return Err(invalid(format!(
            "advertised.listeners: the inter-broker listener {name} must be advertised"
        )));
    }
    clients[..=i].rotate_right(1);
    Ok(())
}

fn names(clients: &[ClientListener]) -> String {
    clients
        .iter()
        .map(|c| c.name.as_str())
        .collect::<Vec<_>>()
        .join(",")
}

/// `controller.quorum.voters`, checked against the node's roles and listeners; without it, a
/// broker,controller node is a cluster of one.
fn quorum_voters(
    settings: &StaticBrokerConfig,
    node_id: i32,
    roles: &Roles,
    listeners: &ListenerConfig,
) -> Result<BTreeMap<u64, String>, ConfigError> {
    let voters_text = settings.raw("controller.quorum.voters").unwrap_or("");
    let mut voters = parse_voters(voters_text)?;
    let names = roles.controller_names.join(",");
    let is_voter = voters.contains_key(&(node_id as u64));
    if voters.is_empty() {
        if !(roles.is_broker && roles.is_controller) {
            return Err(invalid(format!(
                "process.roles: a {} node needs controller.quorum.voters (only a broker,controller node may be a cluster of one)",
                roles.roles.join(",")
            )));
        }
        // A cluster of one: this node alone, reachable by nobody else.
        let addr = listeners
            .controller
            .as_ref()
            .map(|l| {
                let host = if l.host.is_empty() {
                    "127.0.0.1"
                } else {
                    &l.host
                };
                format!("{host}:{}", l.port)
            })
            .unwrap_or_default();
        voters.insert(node_id as u64, addr);
    } else if roles.is_controller {
        if !is_voter {
            return Err(invalid(format!(
                "controller.quorum.voters: node.id {node_id} is not among the voters {voters_text}, but process.roles includes controller"
            )));
        }
        if listeners.controller_bind.is_none() {
            return Err(invalid(format!(
                "listeners: a controller needs a listener named in controller.listener.names ({names}), e.g. CONTROLLER://127.0.0.1:9093"
            )));
        }
    } else {
        if is_voter {
            return Err(invalid(format!(
                "controller.quorum.voters: node.id {node_id} is a voter, but process.roles=broker (a broker-only node does not vote)"
            )));
        }
        if listeners.controller_bind.is_some() {
            return Err(invalid(format!(
                "listeners: a broker-only node has no controller listener ({names})"
            )));
        }
    }
    Ok(voters)
}

/// How replica fetchers reach other brokers' inter-broker listener: TLS for SSL and SASL_SSL,
/// the broker's own SASL login for SASL_PLAINTEXT and SASL_SSL.
fn inter_broker_client(
    settings: &StaticBrokerConfig,
    roles: &Roles,
    listeners: &ListenerConfig,
) -> Result<(Option<PeerTls>, Option<ClientSasl>), ConfigError> {
    let Some(l) = listeners.clients.first().filter(|_| roles.is_broker) else {
        return Ok((None, None));
    };
    let tls = match l.security_protocol.uses_tls() {
        true => Some(
            crate::tls::inter_broker_client(settings, &l.name)
                .map_err(|e| invalid(e.to_string()))?,
        ),
        false => None,
    };
    let sasl = match &l.sasl {
        Some(sasl) => Some(
            crate::sasl_config::inter_broker_login(settings, sasl, &l.name)
                .map_err(|e| invalid(format!("inter-broker listener {}: {e}", l.name)))?,
        ),
        None => None,
    };
    Ok((tls, sasl))
}

/// `--cluster-id`: what a Kafka cluster id may be.
fn check_cluster_id(id: &str) -> Result<(), ConfigError> {
    let ok = !id.is_empty()
        && id.len() <= 64
        && id
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_');
    if ok {
        return Ok(());
    }
    Err(invalid(format!(
        "--cluster-id: '{id}' must be 1 to 64 letters, digits, '-' or '_' (e.g. a 22-character Kafka cluster id)"
    )))
}

/// `log.dirs` (or `log.dir`): one directory.
fn data_dir(settings: &StaticBrokerConfig) -> Result<PathBuf, ConfigError> {
    let dirs = settings.raw("log.dirs").or(settings.raw("log.dir"));
    if let Some(d) = dirs {
        if d.split(',').filter(|x| !x.trim().is_empty()).count() > 1 {
            return Err(invalid(format!(
                "log.dirs: '{d}' names several directories; Gregor keeps its data in one"
            )));
        }
    }
    Ok(dirs
        .map(|d| PathBuf::from(d.split(',').next().unwrap_or(d).trim()))
        .unwrap_or_else(|| PathBuf::from("gregor-data")))
}

impl BrokerConfig {
    /// Whether `controller.quorum.voters` was set (a cluster of one may leave it out).
    pub fn voters_configured(&self) -> bool {
        self.settings
            .raw("controller.quorum.voters")
            .is_some_and(|v| !v.trim().is_empty())
    }

    pub fn from_options(opts: &BrokerOptions) -> Result<BrokerConfig, ConfigError> {
        let mut settings = settings_from(&option_pairs(opts)?)?;
        let node_id = node_id(&mut settings)?;
        consumer_group_bounds(&settings)?;
        let roles = Roles::of(&settings);
        let listeners = ListenerConfig::of(&settings, &roles)?;
        let voters = quorum_voters(&settings, node_id, &roles, &listeners)?;
        let (bind, advertised_host, advertised_port) = listeners.primary()?;
        let (inter_broker_tls, inter_broker_sasl) =
            inter_broker_client(&settings, &roles, &listeners)?;
        let rack = settings.raw("broker.rack").map(str::to_string);
        if let Some(id) = &opts.cluster_id {
            check_cluster_id(id)?;
        }
        let data_dir = data_dir(&settings)?;
        let metrics_tls = MetricsTls::of(&settings)?;
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
            listeners: listeners.clients,
            inter_broker_tls,
            inter_broker_sasl,
            data_dir,
            settings,
            connection_overrides,
            controller_bind: listeners.controller_bind,
            controller_tls: listeners.controller_tls,
            voters,
            rack,
            is_broker: roles.is_broker,
            is_controller: roles.is_controller,
            cluster_id: opts.cluster_id.clone(),
            metrics_tls,
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
            "replica.high.watermark.checkpoint.interval.ms=100",
            "num.replica.fetchers=4",
            "num.io.threads=16",
            "log.roll.jitter.ms=5",
        ] {
            let key = o.split('=').next().expect("key");
            let e = start(o).expect_err("refused").to_string();
            assert!(e.contains(key) && e.contains("not supported"), "{o}: {e}");
        }
        // Kafka's default value is what Gregor does, so it is accepted.
        start("num.replica.fetchers=1").expect("the default is accepted");
        // Replication's own settings are supported.
        start("replica.lag.time.max.ms=10000").expect("supported");
        start("replica.fetch.max.bytes=5").expect("supported");
        start("controller.quorum.voters=").expect("empty is the default");
    }

    fn cluster_node(overrides: &[&str]) -> Result<BrokerConfig, ConfigError> {
        BrokerConfig::from_options(&BrokerOptions {
            node_id: Some(0),
            listeners: Some("PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093".into()),
            controller_quorum_voters: Some(
                "0@127.0.0.1:19093,1@127.0.0.1:19095,2@127.0.0.1:19097".into(),
            ),
            rack: Some("r1".into()),
            overrides: overrides.iter().map(|o| o.to_string()).collect(),
            ..Default::default()
        })
    }

    #[test]
    fn a_cluster_node_has_voters_a_controller_listener_and_a_rack() {
        let c = cluster_node(&[]).expect("valid");
        assert_eq!(c.node_id, 0, "node id 0 is a valid id");
        assert_eq!(c.bind.port(), 19092);
        assert_eq!(c.controller_bind.map(|a| a.port()), Some(19093));
        assert_eq!(c.voters.len(), 3);
        assert_eq!(c.voters[&1], "127.0.0.1:19095");
        assert_eq!(c.rack.as_deref(), Some("r1"));
        // The same through server.properties names.
        let c = BrokerConfig::from_options(&BrokerOptions {
            properties: Some(
                "node.id=2\nprocess.roles=broker,controller\nlisteners=PLAINTEXT://127.0.0.1:1,CTL://127.0.0.1:2\ncontroller.listener.names=CTL\ncontroller.quorum.voters=2@127.0.0.1:2\nbroker.rack=east\n".into(),
            ),
            ..Default::default()
        })
        .expect("valid");
        assert_eq!(
            (c.node_id, c.controller_bind.map(|a| a.port())),
            (2, Some(2))
        );
        assert_eq!(c.rack.as_deref(), Some("east"));
        // No voters: a cluster of one.
        let c = BrokerConfig::from_options(&BrokerOptions::default()).expect("valid");
        assert_eq!(c.voters.keys().copied().collect::<Vec<_>>(), vec![1]);
        assert!(c.controller_bind.is_none());
    }

    #[test]
    fn broker_only_and_controller_only_nodes() {
        let broker = BrokerConfig::from_options(&BrokerOptions {
            node_id: Some(5),
            process_roles: Some("broker".into()),
            listeners: Some("PLAINTEXT://127.0.0.1:19099".into()),
            controller_quorum_voters: Some("0@127.0.0.1:19093".into()),
            ..Default::default()
        })
        .expect("valid");
        assert!(broker.is_broker && !broker.is_controller && broker.controller_bind.is_none());
        let controller = BrokerConfig::from_options(&BrokerOptions {
            node_id: Some(0),
            process_roles: Some("controller".into()),
            listeners: Some("CONTROLLER://127.0.0.1:19093".into()),
            controller_quorum_voters: Some("0@127.0.0.1:19093".into()),
            ..Default::default()
        })
        .expect("valid");
        assert!(!controller.is_broker && controller.is_controller);
        assert_eq!(controller.controller_bind.map(|a| a.port()), Some(19093));
        let with_controller_listener = BrokerConfig::from_options(&BrokerOptions {
            node_id: Some(5),
            process_roles: Some("broker".into()),
            listeners: Some("PLAINTEXT://127.0.0.1:1,CONTROLLER://127.0.0.1:2".into()),
            controller_quorum_voters: Some("0@127.0.0.1:19093".into()),
            ..Default::default()
        })
        .expect_err("refused")
        .to_string();
        assert!(
            with_controller_listener.contains("broker-only"),
            "{with_controller_listener}"
        );
    }

    #[test]
    fn cluster_settings_that_cannot_work_are_named() {
        let err = |o: &[&str]| cluster_node(o).expect_err("invalid").to_string();
        assert!(
            err(&["controller.quorum.voters=1@127.0.0.1:19095"]).contains("not among the voters")
        );
        assert!(err(&["controller.quorum.voters=0@127.0.0.1"]).contains("has no port"));
        assert!(err(&["controller.quorum.voters=0@:1"]).contains("id@host:port"));
        assert!(err(&["controller.quorum.voters=x@127.0.0.1:1"]).contains("not a node id"));
        assert!(err(&["controller.quorum.voters=0@h:1,0@h:2"]).contains("appears twice"));
        assert!(
            err(&["listeners=PLAINTEXT://127.0.0.1:19092"]).contains("controller needs a listener")
        );
        assert!(err(&["listeners=PLAINTEXT://127.0.0.1:1,SSL://127.0.0.1:2"]).contains("SSL"));
        assert!(err(&["process.roles=broker"]).contains("does not vote"));
        assert!(err(&["process.roles=cook"]).contains("process.roles"));
        let alone = BrokerConfig::from_options(&BrokerOptions {
            overrides: vec!["process.roles=broker".into()],
            ..Default::default()
        })
        .expect_err("a broker-only node needs voters")
        .to_string();
        assert!(alone.contains("controller.quorum.voters"), "{alone}");
    }

    fn listeners_node(listeners: &str, overrides: &[&str]) -> Result<BrokerConfig, ConfigError> {
        BrokerConfig::from_options(&BrokerOptions {
            listeners: Some(listeners.into()),
            overrides: overrides.iter().map(|o| o.to_string()).collect(),
            ..Default::default()
        })
    }

    #[test]
    fn several_client_listeners_each_with_its_protocol_and_advertised_endpoint() {
        let c = listeners_node(
            "EXTERNAL://127.0.0.1:19192,INTERNAL://0.0.0.0:19193",
            &[
                "listener.security.protocol.map=EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "inter.broker.listener.name=INTERNAL",
                "advertised.listeners=EXTERNAL://kafka.example:9092,INTERNAL://10.0.0.5:19193",
            ],
        )
        .expect("valid");
        type Summary<'a> = (&'a str, u16, Option<(String, u16)>);
        let summary: Vec<Summary> = c
            .listeners
            .iter()
            .map(|l| (l.name.as_str(), l.bind.port(), l.advertised.clone()))
            .collect();
        assert_eq!(
            summary,
            vec![
                ("INTERNAL", 19193, Some(("10.0.0.5".into(), 19193))),
                ("EXTERNAL", 19192, Some(("kafka.example".into(), 9092))),
            ],
            "the inter-broker listener first"
        );
        assert_eq!(
            (c.bind.port(), c.advertised_host.as_str(), c.advertised_port),
            (19193, "10.0.0.5", 19193)
        );
        // Without advertised.listeners every listener is published; a wildcard as 127.0.0.1.
        let c = listeners_node(
            "PLAINTEXT://0.0.0.0:19192,OTHER://127.0.0.1:19194",
            &["listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT"],
        );
        let e = c.expect_err("controller listener unmapped").to_string();
        assert!(e.contains("CONTROLLER"), "{e}");
        let c = listeners_node("PLAINTEXT://0.0.0.0:19192,OTHER://127.0.0.1:19194", &[
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT,CONTROLLER:PLAINTEXT",
        ])
        .expect("valid");
        assert_eq!(c.listeners[0].advertised, Some(("127.0.0.1".into(), 19192)));
        assert_eq!(c.listeners[1].advertised, Some(("127.0.0.1".into(), 19194)));
        assert!(c
            .listeners
            .iter()
            .all(|l| l.security_protocol == SecurityProtocol::Plaintext));
    }

    #[test]
    fn an_ssl_listener_gets_its_tls_configuration() {
        let key = rcgen::KeyPair::generate().expect("key");
        let cert = rcgen::CertificateParams::new(vec!["localhost".to_string()])
            .expect("params")
            .self_signed(&key)
            .expect("cert");
        let key_pem = format!("ssl.keystore.key={}", key.serialize_pem());
        let chain_pem = format!("ssl.keystore.certificate.chain={}", cert.pem());
        let c = listeners_node(
            "PLAINTEXT://127.0.0.1:19192,SSL://127.0.0.1:19193",
            &[&key_pem, &chain_pem],
        )
        .expect("valid");
        let ssl = c
            .listeners
            .iter()
            .find(|l| l.name == "SSL")
            .expect("SSL listener");
        assert_eq!(ssl.security_protocol, SecurityProtocol::Ssl);
        assert!(ssl.tls.is_some());
        assert_eq!(c.listeners[0].name, "PLAINTEXT", "inter-broker: PLAINTEXT");
        assert!(c.listeners[0].tls.is_none());
        assert!(c.inter_broker_tls.is_none());
        // Replication over the SSL listener: its trust store verifies the other brokers.
        let ssl_between = "security.inter.broker.protocol=SSL";
        let e = listeners_node(
            "PLAINTEXT://127.0.0.1:19192,SSL://127.0.0.1:19193",
            &[&key_pem, &chain_pem, ssl_between],
        )
        .expect_err("no trust store")
        .to_string();
        assert!(
            e.contains("inter-broker") && e.contains("ssl.truststore.location"),
            "{e}"
        );
        let trust = format!("ssl.truststore.certificates={}", cert.pem());
        let c = listeners_node(
            "PLAINTEXT://127.0.0.1:19192,SSL://127.0.0.1:19193",
            &[&key_pem, &chain_pem, ssl_between, &trust],
        )
        .expect("valid");
        assert_eq!(c.listeners[0].name, "SSL", "inter-broker: SSL");
        assert!(c.inter_broker_tls.is_some());
    }

    #[test]
    fn sasl_listeners_and_replication_over_sasl() {
        let plain = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";"#;
        let jaas = format!("listener.name.sasl_plaintext.plain.sasl.jaas.config={plain}");
        let c = listeners_node(
            "PLAINTEXT://127.0.0.1:19192,SASL_PLAINTEXT://127.0.0.1:19193",
            &["sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-512", &jaas],
        )
        .expect("valid");
        let sasl = c
            .listeners
            .iter()
            .find(|l| l.name == "SASL_PLAINTEXT")
            .and_then(|l| l.sasl.clone())
            .expect("SASL settings");
        assert_eq!(sasl.mechanisms.len(), 2);
        assert!(c.listeners[0].sasl.is_none() && c.inter_broker_sasl.is_none());
        // Replication over it needs a mechanism other than Kafka's default GSSAPI.
        let between = "security.inter.broker.protocol=SASL_PLAINTEXT";
        let e = listeners_node(
            "PLAINTEXT://127.0.0.1:19192,SASL_PLAINTEXT://127.0.0.1:19193",
            &["sasl.enabled.mechanisms=PLAIN", &jaas, between],
        )
        .expect_err("GSSAPI")
        .to_string();
        assert!(
            e.contains("sasl.mechanism.inter.broker.protocol") && e.contains("GSSAPI"),
            "{e}"
        );
        let c = listeners_node(
            "PLAINTEXT://127.0.0.1:19192,SASL_PLAINTEXT://127.0.0.1:19193",
            &[
                "sasl.enabled.mechanisms=PLAIN",
                &jaas,
                between,
                "sasl.mechanism.inter.broker.protocol=PLAIN",
            ],
        )
        .expect("valid");
        assert_eq!(c.listeners[0].name, "SASL_PLAINTEXT", "inter-broker first");
        let login = c.inter_broker_sasl.expect("the broker's own login");
        assert_eq!(login.username(), "broker");
        assert!(c.inter_broker_tls.is_none());
        assert!(!format!("{:?}", c.listeners).contains("alice-secret"));
    }

    #[test]
    fn listener_settings_that_cannot_work_are_named() {
        let err = |listeners: &str, overrides: &[&str]| {
            listeners_node(listeners, overrides)
                .expect_err("refused")
                .to_string()
        };
        let sasl = err("PLAINTEXT://127.0.0.1:1,SASL_PLAINTEXT://127.0.0.1:2", &[]);
        assert!(
            sasl.contains(
                "listener SASL_PLAINTEXT: sasl.enabled.mechanisms: GSSAPI is not supported"
            ),
            "{sasl}"
        );
        let unmapped = err("PLAINTEXT://127.0.0.1:1,FOO://127.0.0.1:2", &[]);
        assert!(
            unmapped.contains("'FOO'") && unmapped.contains("listener.security.protocol.map"),
            "{unmapped}"
        );
        let bad_map = err(
            "PLAINTEXT://127.0.0.1:1",
            &["listener.security.protocol.map=PLAINTEXT:TLS"],
        );
        assert!(bad_map.contains("'TLS'"), "{bad_map}");
        let both = err(
            "PLAINTEXT://127.0.0.1:1",
            &[
                "inter.broker.listener.name=PLAINTEXT",
                "security.inter.broker.protocol=PLAINTEXT",
            ],
        );
        assert!(both.contains("not both"), "{both}");
        let missing = err(
            "OTHER://127.0.0.1:1",
            &["listener.security.protocol.map=OTHER:PLAINTEXT,CONTROLLER:PLAINTEXT"],
        );
        assert!(
            missing.contains("inter-broker listener PLAINTEXT"),
            "{missing}"
        );
        let unknown = err(
            "PLAINTEXT://127.0.0.1:1",
            &["advertised.listeners=NOPE://h:1"],
        );
        assert!(unknown.contains("'NOPE' is not in listeners"), "{unknown}");
        let unadvertised = err(
            "PLAINTEXT://127.0.0.1:1,OTHER://127.0.0.1:2",
            &[
                "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,OTHER:PLAINTEXT,CONTROLLER:PLAINTEXT",
                "advertised.listeners=OTHER://h:2",
            ],
        );
        assert!(
            unadvertised.contains("must be advertised"),
            "{unadvertised}"
        );
        // SSL needs the listener's key store.
        let no_keystore =
            cluster_node(&["listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SSL"])
                .expect_err("refused")
                .to_string();
        assert!(
            no_keystore.contains("listener CONTROLLER") && no_keystore.contains("keystore"),
            "{no_keystore}"
        );
    }

    #[test]
    fn a_sasl_controller_listener_needs_a_mechanism_and_the_nodes_own_login() {
        const MAP: &str =
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:SASL_PLAINTEXT";
        let scram = "listener.name.controller.scram-sha-512.sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required username=\"node\" password=\"node-secret\";";
        let err = |overrides: &[&str]| cluster_node(overrides).expect_err("refused").to_string();
        let e = err(&[MAP]);
        assert!(
            e.contains("listener CONTROLLER: sasl.enabled.mechanisms: GSSAPI is not supported"),
            "{e}"
        );
        let mechanisms = "listener.name.controller.sasl.enabled.mechanisms=SCRAM-SHA-512";
        let e = err(&[MAP, mechanisms, scram]);
        assert!(
            e.starts_with("sasl.mechanism.controller.protocol: 'GSSAPI' is not supported")
                && e.contains("PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512"),
            "{e}"
        );
        let e = err(&[
            MAP,
            mechanisms,
            scram,
            "sasl.mechanism.controller.protocol=OAUTHBEARER",
        ]);
        assert!(e.contains("'OAUTHBEARER' is not supported"), "{e}");
        let e = err(&[
            MAP,
            mechanisms,
            scram,
            "sasl.mechanism.controller.protocol=SCRAM-SHA-256",
        ]);
        assert!(
            e.contains("must be among the sasl.enabled.mechanisms"),
            "{e}"
        );
        let chosen = "sasl.mechanism.controller.protocol=SCRAM-SHA-512";
        let e = err(&[MAP, mechanisms, chosen]);
        assert!(
            e.starts_with("listener.name.controller.scram-sha-512.sasl.jaas.config:")
                && e.contains("own login"),
            "{e}"
        );
        let c = cluster_node(&[MAP, mechanisms, scram, chosen]).expect("valid");
        let security = &c.controller_tls;
        assert!(
            security.server.is_none() && security.client.is_none(),
            "no TLS"
        );
        let served = security
            .server_sasl
            .as_ref()
            .expect("the listener logs peers in");
        assert_eq!(served.mechanisms.len(), 1);
        let login = security.client_sasl.as_ref().expect("the node's own login");
        assert_eq!(login.username(), "node");
        assert!(
            !format!("{security:?}").contains("node-secret"),
            "password redacted"
        );
        // A broker-only node serves no controller listener but logs in to the controllers.
        let broker_only = BrokerConfig::from_options(&BrokerOptions {
            node_id: Some(5),
            listeners: Some("PLAINTEXT://127.0.0.1:19099".into()),
            process_roles: Some("broker".into()),
            controller_quorum_voters: Some("0@127.0.0.1:19093".into()),
            overrides: vec![MAP.into(), scram.into(), chosen.into()],
            ..Default::default()
        })
        .expect("valid");
        assert!(broker_only.controller_tls.server_sasl.is_none());
        assert!(broker_only.controller_tls.client_sasl.is_some());
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
