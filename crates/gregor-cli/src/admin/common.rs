//! What every admin command shares: how to reach the cluster, Kafka's column layout, and the
//! error helpers that keep failures to one clear line.

use std::future::Future;
use std::time::Duration;

use anyhow::{anyhow, Context, Result};
use gregor_client::{Admin, ClientConfig};

/// Connection options, named as in Kafka's tools.
#[derive(Debug, Clone, clap::Args)]
pub struct ConnectionArgs {
    /// The broker(s) to connect to: HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// How long each operation may take, retries included (milliseconds).
    #[arg(long, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
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
        Ok(config)
    }

    pub async fn connect(&self) -> Result<Admin> {
        Ok(Admin::connect(self.client_config()?).await?)
    }

    /// The server-side timeout sent in admin requests, within the client's own.
    pub fn request_timeout_ms(&self) -> i32 {
        i32::try_from(self.timeout_ms).unwrap_or(i32::MAX)
    }
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
        };
        let e = args.client_config().unwrap_err();
        assert!(format!("{e:#}").contains("expected host:port"), "{e:#}");
        let args = ConnectionArgs {
            bootstrap_server: "127.0.0.1:9092".into(),
            timeout_ms: 0,
        };
        assert!(args.client_config().is_err());
        let args = ConnectionArgs {
            bootstrap_server: "a:1,b:2".into(),
            timeout_ms: 60_000,
        };
        let c = args.client_config().unwrap();
        assert_eq!(c.bootstrap_servers.len(), 2);
        assert_eq!(c.connect_timeout, Duration::from_secs(10));
        assert_eq!(c.api_timeout, Duration::from_secs(60));
    }
}
