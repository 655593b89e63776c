//! `gregor broker`: start a broker and serve until SIGTERM / Ctrl-C.

use std::path::PathBuf;

use anyhow::{Context, Result};
use gregor_broker::{Broker, BrokerConfig, BrokerOptions};

/// `gregor broker`'s options.
#[derive(Debug, clap::Args)]
pub struct BrokerArgs {
    /// Listeners to bind, e.g. PLAINTEXT://127.0.0.1:9092,SSL://127.0.0.1:9094,CONTROLLER://127.0.0.1:9093
    /// (security protocols from listener.security.protocol.map).
    #[arg(long)]
    pub listeners: Option<String>,
    /// Roles of this node (process.roles): broker, controller, or broker,controller (the
    /// default: a combined node). A controller-only node serves the quorum on its CONTROLLER
    /// listener and no clients; a broker-only node serves clients and does not vote. Either
    /// alone needs --controller-quorum-voters.
    #[arg(long)]
    pub process_roles: Option<String>,
    /// The controller quorum (controller.quorum.voters), e.g. 0@127.0.0.1:9093,1@127.0.0.1:9095.
    #[arg(long)]
    pub controller_quorum_voters: Option<String>,
    /// This broker's rack (broker.rack).
    #[arg(long)]
    pub rack: Option<String>,
    /// The cluster id a new data directory gets (default: derived from the voters, or random
    /// for a single node).
    #[arg(long)]
    pub cluster_id: Option<String>,
    /// Listener published to clients, if different.
    #[arg(long)]
    pub advertised_listeners: Option<String>,
    /// Data directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Node id.
    #[arg(long)]
    pub node_id: Option<i32>,
    /// A server.properties-style file of Kafka settings.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// Any setting, as key=value (repeatable; applied last).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// Log format on stderr: text, or json (one object per line, for log shippers). Default:
    /// $GREGOR_LOG_FORMAT, else text. RUST_LOG sets the filter.
    #[arg(long, value_enum)]
    pub log_format: Option<crate::broker_log::LogFormat>,
}

pub fn run(args: BrokerArgs) -> Result<()> {
    let env = std::env::var(crate::broker_log::FORMAT_ENV).ok();
    let format =
        crate::broker_log::choose(args.log_format, env.as_deref()).map_err(anyhow::Error::msg)?;
    crate::broker_log::init(format);
    let config = broker_config(args)?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(serve(config))
}

/// The broker's configuration from the command line and its --config file.
fn broker_config(args: BrokerArgs) -> Result<BrokerConfig> {
    let properties = match &args.config {
        Some(path) => Some(
            std::fs::read_to_string(path)
                .with_context(|| format!("cannot read --config {}", path.display()))?,
        ),
        None => None,
    };
    let opts = BrokerOptions {
        listeners: args.listeners,
        advertised_listeners: args.advertised_listeners,
        data_dir: args.data_dir,
        node_id: args.node_id,
        properties,
        overrides: args.overrides,
        process_roles: args.process_roles,
        controller_quorum_voters: args.controller_quorum_voters,
        rack: args.rack,
        cluster_id: args.cluster_id,
    };
    BrokerConfig::from_options(&opts).context("invalid configuration")
}

/// Binds the listeners, starts the broker and serves until SIGTERM or Ctrl-C.
async fn serve(config: BrokerConfig) -> Result<()> {
    let listeners = if config.is_broker {
        Some(
            gregor_broker::server::bind_listeners(&config).map_err(|(addr, e)| {
                anyhow::Error::new(e).context(format!("cannot listen on {addr}"))
            })?,
        )
    } else {
        None
    };
    let metrics = serve_metrics(&config).await?;
    // The signal handler is installed before start-up, which can wait as long as the quorum
    // is out of reach (a node whose certificate the controllers refuse waits for good): a
    // SIGTERM then stops the node, as it would a running one, instead of killing it.
    let mut signalled = Box::pin(wait_for_signal());
    let broker = tokio::select! {
        started = Broker::start(config) => started.context("broker start-up failed")?,
        _ = &mut signalled => {
            tracing::info!("stopped by a signal during start-up");
            return Ok(());
        }
    };
    if let Some(target) = &metrics {
        target.set(&broker);
    }
    let (tx, rx) = tokio::sync::watch::channel(false);
    tokio::spawn(async move {
        signalled.await;
        let _ = tx.send(true);
    });
    match listeners {
        Some(listeners) => gregor_broker::server::serve(broker, listeners, rx).await,
        // A controller-only node serves the quorum on its controller listener only.
        None => gregor_broker::server::serve_controller_only(broker, rx).await,
    }
    Ok(())
}

/// Serves metrics.listener, when set, before start-up, so that /healthz answers and /readyz
/// tells why it is not ready; the broker is attached to the returned target once started.
async fn serve_metrics(
    config: &BrokerConfig,
) -> Result<Option<std::sync::Arc<gregor_broker::metrics::http::Target>>> {
    let Some(addr) =
        gregor_broker::metrics::http::listener_address(config).map_err(anyhow::Error::msg)?
    else {
        return Ok(None);
    };
    let security = gregor_broker::metrics::auth::MetricsSecurity::from_settings(
        &config.settings,
        config.metrics_tls.server.clone(),
    )?;
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .with_context(|| format!("cannot listen on metrics.listener {addr}"))?;
    let target = gregor_broker::metrics::http::Target::new();
    tokio::spawn(gregor_broker::metrics::http::serve(
        listener,
        target.clone(),
        std::sync::Arc::new(security),
    ));
    Ok(Some(target))
}

/// Returns on SIGTERM or Ctrl-C.
pub(crate) async fn wait_for_signal() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{signal, SignalKind};
        match signal(SignalKind::terminate()) {
            Ok(mut term) => {
                tokio::select! {
                    _ = term.recv() => {}
                    _ = tokio::signal::ctrl_c() => {}
                }
            }
            Err(_) => {
                let _ = tokio::signal::ctrl_c().await;
            }
        }
    }
    #[cfg(not(unix))]
    {
        let _ = tokio::signal::ctrl_c().await;
    }
}
