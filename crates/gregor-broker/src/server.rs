//! Accepting connections (within `connection_quotas`) and shutting down cleanly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::watch;
use tracing::{info, warn};

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection::{self, RequestLimits};
use crate::connection_quotas::ConnectionQuotas;

/// Serves until `shutdown` fires, then stops accepting, lets connections finish the requests
/// they have, and shuts the broker down (logs synced, clean-shutdown markers).
pub async fn serve(
    broker: Arc<Broker>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let limits = request_limits(&broker);
    let quotas = ConnectionQuotas::new(
        usize::try_from(broker.config.int("max.connections")).unwrap_or(0),
        usize::try_from(broker.config.int("max.connections.per.ip")).unwrap_or(0),
        broker.config.connection_overrides.clone(),
    );
    broker.metrics.track_connections(&quotas);
    let ids = AtomicU64::new(0);
    let background = crate::runtime::spawn(broker.clone().run_background(shutdown.clone()));
    let mut connections = tokio::task::JoinSet::new();
    info!(address = %broker.config.bind, "listening");
    loop {
        while connections.try_join_next().is_some() {}
        if quotas.open() >= quotas.max_connections() {
            warn!(
                limit = quotas.max_connections(),
                "max.connections reached; not accepting until a connection closes"
            );
        }
        tokio::select! {
            _ = quotas.wait_for_slot() => {}
            _ = shutdown.changed() => break,
        }
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        // Out of file descriptors, typically: back off instead of spinning.
                        warn!(error = %e, "accept failed");
                        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
                        continue;
                    }
                };
                let slot = match quotas.try_admit(peer.ip()) {
                    Ok(slot) => slot,
                    Err(e) => {
                        info!(%peer, error = %e, "closing new connection");
                        drop(stream);
                        continue;
                    }
                };
                let id = ids.fetch_add(1, Ordering::Relaxed);
                let b = broker.clone();
                let sd = shutdown.clone();
                let limits = limits.clone();
                let sendfile = broker.metrics.sendfile_counters();
                connections.spawn(crate::runtime::inherit_clock(async move {
                    connection::serve(stream, peer, id, b, limits, sd, sendfile).await;
                    drop(slot);
                }));
            }
            _ = shutdown.changed() => break,
        }
    }
    info!("shutting down");
    let drain = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(std::time::Duration::from_secs(10), drain)
        .await
        .is_err()
    {
        warn!("connections still open after 10 s; closing them");
        connections.abort_all();
    }
    let _ = background.await;
    broker.shutdown().await;
}

/// A controller-only node: no client listener; runs until `shutdown` fires, then stops cleanly.
pub async fn serve_controller_only(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    info!(node = broker.config.node_id, "controller-only node running");
    let _ = shutdown.changed().await;
    info!("shutting down");
    broker.shutdown().await;
}

/// Binds the listener. Accepted connections inherit the listening socket's buffer sizes
/// (`socket.send.buffer.bytes`, `socket.receive.buffer.bytes`; -1 leaves them to the OS).
pub fn bind_listener(config: &BrokerConfig) -> std::io::Result<TcpListener> {
    let socket = if config.bind.is_ipv4() {
        TcpSocket::new_v4()?
    } else {
        TcpSocket::new_v6()?
    };
    socket.set_reuseaddr(true)?;
    if let Ok(n) = u32::try_from(config.int("socket.send.buffer.bytes")) {
        socket.set_send_buffer_size(n)?;
    }
    if let Ok(n) = u32::try_from(config.int("socket.receive.buffer.bytes")) {
        socket.set_recv_buffer_size(n)?;
    }
    socket.bind(config.bind)?;
    socket.listen(1024)
}

/// The request limits every connection shares, from the broker's settings.
pub fn request_limits(broker: &Broker) -> RequestLimits {
    let c = &broker.config;
    RequestLimits::new(
        usize::try_from(c.int("socket.request.max.bytes").max(1)).unwrap_or(usize::MAX),
        c.int("connections.max.idle.ms"),
        usize::try_from(c.int("queued.max.requests")).unwrap_or(1),
        c.int("queued.max.request.bytes"),
    )
}
