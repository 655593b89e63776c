//! `gregor broker`: start a broker and serve until SIGTERM / Ctrl-C.

use anyhow::{Context, Result};
use gregor_broker::{Broker, BrokerConfig, BrokerOptions};

use crate::BrokerArgs;

pub fn run(args: BrokerArgs) -> Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            // openraft's own INFO lines narrate every election step; Gregor logs the outcomes.
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,openraft=warn".into()),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
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
    let config = BrokerConfig::from_options(&opts).context("invalid configuration")?;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    runtime.block_on(async move {
        let bind = config.bind;
        let listener = if config.is_broker {
            Some(
                gregor_broker::server::bind_listener(&config)
                    .with_context(|| format!("cannot listen on {bind}"))?,
            )
        } else {
            None
        };
        // Bound before start-up so that /healthz answers and /readyz tells why it is not ready.
        let metrics = match gregor_broker::metrics::http::listener_address(&config)
            .map_err(anyhow::Error::msg)?
        {
            Some(addr) => {
                let listener = tokio::net::TcpListener::bind(addr)
                    .await
                    .with_context(|| format!("cannot listen on metrics.listener {addr}"))?;
                let target = gregor_broker::metrics::http::Target::new();
                tokio::spawn(gregor_broker::metrics::http::serve(
                    listener,
                    target.clone(),
                ));
                Some(target)
            }
            None => None,
        };
        let broker = Broker::start(config)
            .await
            .context("broker start-up failed")?;
        if let Some(target) = &metrics {
            target.set(&broker);
        }
        let (tx, rx) = tokio::sync::watch::channel(false);
        tokio::spawn(async move {
            wait_for_signal().await;
            let _ = tx.send(true);
        });
        match listener {
            Some(listener) => gregor_broker::server::serve(broker, listener, rx).await,
            // A controller-only node serves the quorum on its controller listener only.
            None => gregor_broker::server::serve_controller_only(broker, rx).await,
        }
        Ok(())
    })
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
