//! What every admin command shares: how to reach the cluster, Kafka's column layout, and the
//! error helpers that keep failures to one clear line.

use std::future::Future;
use std::time::Duration;

use std::collections::BTreeMap;

use anyhow::{anyhow, Context, Result};
use gregor_client::sasl::ClientSasl;
use gregor_client::tls::ClientTls;
use gregor_client::{Admin, ClientConfig};

/// A connection failure in the operator's terms: the client names a controller listener
/// (one that answers ApiVersions without Metadata); say which option to change.
pub fn explain_connect_error(e: gregor_client::Error) -> anyhow::Error {
    match &e {
        gregor_client::Error::ControllerListener { addr } => anyhow!(
            "{addr} is a controller listener (it serves the controller quorum, not clients); \
             point --bootstrap-server at a broker listener (one of the node's listeners other \
             than CONTROLLER)"
        ),
        _ => anyhow::Error::new(e),
    }
}

/// Connection options, named as in Kafka's tools.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// The broker(s) to connect to: HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// How long each operation may take, retries included (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// A Kafka client properties file: security.protocol (PLAINTEXT, SSL, SASL_PLAINTEXT,
    /// SASL_SSL), the ssl.* settings (ssl.ca.location or ssl.truststore.location, a client
    /// certificate for mTLS) and the SASL login (sasl.mechanism with sasl.username and
    /// sasl.password, or sasl.jaas.config).
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
}

impl ConnectionArgs {
    /// The client configuration these options describe.
    pub fn client_config(&self) -> Result<ClientConfig> {
        if self.timeout_ms == 0 {
            return Err(anyhow!("--timeout-ms must be positive"));
        }
        let mut config = ClientConfig::new(&self.bootstrap_server)
            .with_context(|| "--bootstrap-server".to_string())?;
        config.client_id = "gregor-cli".to_string();
        let timeout = Duration::from_millis(self.timeout_ms);
        config.api_timeout = timeout;
        config.request_timeout = timeout;
        // An unreachable cluster should be reported well before a slow one would time out.
        config.connect_timeout = timeout.min(Duration::from_secs(10));
        if let Some(path) = &self.command_config {
            apply_command_config(&mut config, path)?;
        }
        Ok(config)
    }

    pub async fn connect(&self) -> Result<Admin> {
        Admin::connect(self.client_config()?)
            .await
            .map_err(explain_connect_error)
    }

    /// Connects to the controller listeners `bootstrap` (KIP-919's `bootstrap.controllers`),
    /// with these options' timeouts and `--command-config`.
    pub async fn connect_controllers(&self, bootstrap: &str) -> Result<Admin> {
        let mut args = self.clone();
        args.bootstrap_server = bootstrap.to_string();
        let mut config = args.client_config().context("--bootstrap-controller")?;
        config.bootstrap_controllers = true;
        Ok(Admin::connect(config).await?)
    }

    /// The server-side timeout sent in admin requests, within the client's own.
    pub fn request_timeout_ms(&self) -> i32 {
        i32::try_from(self.timeout_ms).unwrap_or(i32::MAX)
    }
}

/// Applies a `--command-config` client properties file to `config`: its `client.id`, and the
/// TLS and SASL settings that say how to connect.
pub fn apply_command_config(config: &mut ClientConfig, path: &std::path::Path) -> Result<()> {
    let flag = format!("--command-config {}", path.display());
    let text = std::fs::read_to_string(path).with_context(|| format!("reading {flag}"))?;
    let props = command_config(&text).with_context(|| flag.clone())?;
    if let Some(id) = props.get("client.id") {
        config.client_id = id.clone();
    }
    let tls = ClientTls::from_properties(&props).with_context(|| flag.clone())?;
    let sasl = ClientSasl::from_properties(&props).with_context(|| flag.clone())?;
    config.dialer = gregor_client::sasl::dialer(tls, sasl, &config.client_id);
    Ok(())
}

/// The SASL settings a properties file may hold (librdkafka's and the Java client's).
const SASL_SETTINGS: &[&str] = &[
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    // OAUTHBEARER: the token file (gregor_client::sasl), and the Java client's handler class.
    "sasl.oauthbearer.token.endpoint.url",
    "sasl.login.callback.handler.class",
];

/// A client properties file's settings. Only those that say how to connect (and `client.id`)
/// are taken; any other is refused rather than ignored.
fn command_config(text: &str) -> Result<BTreeMap<String, String>> {
    let props: BTreeMap<String, String> = gregor_meta::config::parse_properties(text)
        .into_iter()
        .collect();
    let taken = |k: &str| {
        k == "security.protocol"
            || k == "client.id"
            || k.starts_with("ssl.")
            || SASL_SETTINGS.contains(&k)
    };
    if let Some(key) = props.keys().find(|k| !taken(k)) {
        return Err(anyhow!(
            "{key} is not supported here (only security.protocol, client.id, ssl.* and {})",
            SASL_SETTINGS.join(", ")
        ));
    }
    Ok(props)
}

/// Runs an admin command on a runtime of its own (the CLI's `main` is synchronous).
pub fn block_on<F: Future>(future: F) -> Result<F::Output> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("starting the async runtime")?;
    Ok(runtime.block_on(future))
}

/// Java's `%-Ns`: left-aligned in at least `width` characters.
pub fn pad(value: &str, width: usize) -> String {
    format!("{value:<width$}")
}

/// A column's width in Kafka's tables: the longest value, but at least `min`.
pub fn width<'a>(min: usize, values: impl IntoIterator<Item = &'a str>) -> usize {
    values
        .into_iter()
        .map(|v| v.chars().count())
        .fold(min, usize::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn padding_matches_java_format() {
        assert_eq!(pad("GROUP", 8), "GROUP   ");
        assert_eq!(pad("longer-than-width", 4), "longer-than-width");
        assert_eq!(width(15, ["a", "abcdefghijklmnopq"]), 17);
        assert_eq!(width(15, ["a"]), 15);
    }

    #[test]
    fn connection_args_validate_servers_and_timeout() {
        let args = ConnectionArgs {
            bootstrap_server: "localhost".into(),
            timeout_ms: 1000,
            command_config: None,
        };
        let e = args.client_config().unwrap_err();
        assert!(format!("{e:#}").contains("expected host:port"), "{e:#}");
        let args = ConnectionArgs {
            bootstrap_server: "127.0.0.1:9092".into(),
            timeout_ms: 0,
            command_config: None,
        };
        assert!(args.client_config().is_err());
        let args = ConnectionArgs {
            bootstrap_server: "a:1,b:2".into(),
            timeout_ms: 60_000,
            command_config: None,
        };
        let c = args.client_config().unwrap();
        assert_eq!(c.bootstrap_servers.len(), 2);
        assert_eq!(c.connect_timeout, Duration::from_secs(10));
        assert_eq!(c.api_timeout, Duration::from_secs(60));
        assert!(c.dialer.is_none(), "PLAINTEXT without --command-config");
    }

    #[test]
    fn command_config_takes_only_connection_settings() {
        let dir = tempfile::tempdir().expect("dir");
        let args = |text: &str| {
            let path = dir.path().join("client.properties");
            std::fs::write(&path, text).expect("write");
            ConnectionArgs {
                bootstrap_server: "127.0.0.1:9092".into(),
                timeout_ms: 1000,
                command_config: Some(path),
            }
            .client_config()
        };
        let c = args("# admin\nsecurity.protocol=PLAINTEXT\nclient.id = ops\n").expect("plain");
        assert!(c.dialer.is_none() && c.client_id == "ops");
        let e = args("security.protocol=SSL\nlinger.ms=5\n").expect_err("refused");
        assert!(
            format!("{e:#}").contains("linger.ms is not supported"),
            "{e:#}"
        );
        let e = args("security.protocol=SSL\n").expect_err("no CA");
        assert!(format!("{e:#}").contains("ssl.ca.location"), "{e:#}");
        let e = args("security.protocol=SASL_SSL\nsasl.mechanism=PLAIN\n").expect_err("no CA");
        assert!(format!("{e:#}").contains("ssl.ca.location"), "{e:#}");
        let e = args("security.protocol=SASL_PLAINTEXT\n").expect_err("no mechanism");
        assert!(format!("{e:#}").contains("sasl.mechanism"), "{e:#}");
        let e = args("security.protocol=SASL_PLAINTEXT\nsasl.kerberos.service.name=kafka\n")
            .expect_err("refused");
        assert!(
            format!("{e:#}").contains("sasl.kerberos.service.name is not supported"),
            "{e:#}"
        );
        let c = args(
            "security.protocol=SASL_PLAINTEXT\nsasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password=admin-secret\n",
        )
        .expect("SASL");
        assert!(c.dialer.is_some(), "SASL logs in on every new connection");
        let e = args("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\nsasl.username=a\n")
            .expect_err("no password");
        assert!(format!("{e:#}").contains("sasl.password"), "{e:#}");
        let e = ConnectionArgs {
            bootstrap_server: "127.0.0.1:9092".into(),
            timeout_ms: 1000,
            command_config: Some(dir.path().join("missing.properties")),
        }
        .client_config()
        .expect_err("unreadable");
        assert!(format!("{e:#}").contains("--command-config"), "{e:#}");
    }
}
