//! Accepting connections and shutting down cleanly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};
use tracing::{info, warn};

use crate::broker::Broker;
use crate::connection;

/// Connections served at once; further ones wait in the accept queue.
pub const MAX_CONNECTIONS: usize = 4096;

/// Serves until `shutdown` fires, then stops accepting, lets connections finish the requests
/// they have, and shuts the broker down (logs synced, clean-shutdown markers).
pub async fn serve(
    broker: Arc<Broker>,
    listener: TcpListener,
    mut shutdown: watch::Receiver<bool>,
) {
    let max_request = broker.config.int("socket.request.max.bytes").max(1) as usize;
    let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    let ids = AtomicU64::new(0);
    let background = tokio::spawn(broker.clone().run_background(shutdown.clone()));
    let mut connections = tokio::task::JoinSet::new();
    info!(address = %broker.config.bind, "listening");
    loop {
        tokio::select! {
            accepted = listener.accept() => {
                let (stream, peer) = match accepted {
                    Ok(x) => x,
                    Err(e) => {
                        warn!(error = %e, "accept failed");
                        continue;
                    }
                };
                let Ok(permit) = permits.clone().acquire_owned().await else { break };
                let id = ids.fetch_add(1, Ordering::Relaxed);
                let b = broker.clone();
                let sd = shutdown.clone();
                connections.spawn(async move {
                    connection::serve(stream, peer, id, b, max_request, sd).await;
                    drop(permit);
                });
            }
            _ = shutdown.changed() => break,
        }
        while connections.try_join_next().is_some() {}
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
