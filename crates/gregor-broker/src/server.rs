//! Accepting connections (within `connection_quotas`) and shutting down cleanly.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use std::net::SocketAddr;

use futures::future::select_all;
use tokio::net::{TcpListener, TcpSocket, TcpStream};
use tokio::sync::watch;
use tracing::{debug, info, warn};

use crate::broker::Broker;
use crate::config::{BrokerConfig, ClientListener};
use crate::connection::{self, ConnectionSecurity, RequestLimits};
use crate::connection_quotas::ConnectionQuotas;
use crate::sasl_session::{SaslSetup, ScramCredentialSource};
use crate::security::KafkaPrincipal;
use crate::zero_copy::SendfileCounters;

/// A bound client listener.
pub struct BoundListener {
    pub socket: TcpListener,
    pub listener: Arc<ClientListener>,
}

/// Serves the client listeners until `shutdown` fires, then stops accepting, lets connections
/// finish the requests they have, and shuts the broker down (logs synced, clean-shutdown
/// markers). `max.connections` counts the connections of every listener.
pub async fn serve(
    broker: Arc<Broker>,
    listeners: Vec<BoundListener>,
    mut shutdown: watch::Receiver<bool>,
) {
    if listeners.is_empty() {
        return serve_controller_only(broker, shutdown).await;
    }
    let limits = request_limits(&broker);
    let quotas = connection_quotas(&broker);
    let ids = AtomicU64::new(0);
    let background = crate::runtime::spawn(broker.clone().run_background(shutdown.clone()));
    let mut connections = tokio::task::JoinSet::new();
    for l in &listeners {
        info!(listener = %l.listener.name, protocol = %l.listener.security_protocol, address = %l.listener.bind, "listening");
    }
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
        let accepts = listeners.iter().map(|l| Box::pin(l.socket.accept()));
        tokio::select! {
            (accepted, index, _) = select_all(accepts) => {
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
                let accepted = Accepted {
                    stream,
                    peer,
                    id: ids.fetch_add(1, Ordering::Relaxed),
                    listener: listeners[index].listener.clone(),
                };
                let b = broker.clone();
                let sd = shutdown.clone();
                let limits = limits.clone();
                let sendfile = broker.metrics.sendfile_counters();
                connections.spawn(crate::runtime::inherit_clock(async move {
                    serve_connection(accepted, b, limits, sd, sendfile).await;
                    drop(slot);
                }));
            }
            _ = shutdown.changed() => break,
        }
    }
    info!("shutting down");
    drain(connections).await;
    let _ = background.await;
    broker.shutdown().await;
}

/// `max.connections` and `max.connections.per.ip`, tracked by the metrics.
fn connection_quotas(broker: &Broker) -> Arc<ConnectionQuotas> {
    let quotas = ConnectionQuotas::new(
        usize::try_from(broker.config.int("max.connections")).unwrap_or(0),
        usize::try_from(broker.config.int("max.connections.per.ip")).unwrap_or(0),
        broker.config.connection_overrides.clone(),
    );
    broker.metrics.track_connections(&quotas);
    quotas
}

/// Lets the connections finish the requests they have, for at most 10 s.
async fn drain(mut connections: tokio::task::JoinSet<()>) {
    let finished = async { while connections.join_next().await.is_some() {} };
    if tokio::time::timeout(std::time::Duration::from_secs(10), finished)
        .await
        .is_err()
    {
        warn!("connections still open after 10 s; closing them");
        connections.abort_all();
    }
}

/// A connection just accepted, and the listener it came in on.
struct Accepted {
    stream: TcpStream,
    peer: SocketAddr,
    id: u64,
    listener: Arc<ClientListener>,
}

/// SCRAM credentials as the broker's metadata image holds them when an exchange asks.
struct ImageCredentials(Arc<Broker>);

impl ScramCredentialSource for ImageCredentials {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: gregor_sasl::ScramMechanism,
    ) -> Option<gregor_sasl::ScramCredential> {
        let image = self.0.metadata.image();
        image.scram_credentials().get(user, mechanism).cloned()
    }
}

/// Who a connection of `listener` is before anything is said: `principal` (TLS's, or
/// `User:ANONYMOUS`), and on a SASL listener what its login is checked against.
fn connection_security(
    listener: &ClientListener,
    broker: &Arc<Broker>,
    principal: KafkaPrincipal,
) -> ConnectionSecurity {
    ConnectionSecurity {
        listener_name: listener.name.as_str().into(),
        security_protocol: listener.security_protocol,
        principal: Arc::new(principal),
        sasl: listener.sasl.as_ref().map(|listener| SaslSetup {
            listener: listener.clone(),
            credentials: Arc::new(ImageCredentials(broker.clone())),
        }),
    }
}

/// Serves one connection as its listener says: plain TCP (fetches by `sendfile`), or TLS
/// first (fetches copied), its principal from the client certificate if there is one; on a
/// SASL listener, the connection then logs in (`sasl_session`).
async fn serve_connection(
    c: Accepted,
    broker: Arc<Broker>,
    limits: RequestLimits,
    shutdown: watch::Receiver<bool>,
    sendfile: SendfileCounters,
) {
    let Some(tls) = &c.listener.tls else {
        let security = connection_security(&c.listener, &broker, KafkaPrincipal::anonymous());
        connection::serve(
            c.stream, security, c.peer, c.id, broker, limits, shutdown, sendfile,
        )
        .await;
        return;
    };
    let _ = c.stream.set_nodelay(true);
    let (stream, principal) = match tls.accept(c.stream, limits.idle).await {
        Ok(accepted) => accepted,
        Err(e) => {
            // A client speaking plaintext to a TLS port, or an untrusted, expired or missing
            // client certificate: the connection closes; the listener goes on.
            info!(peer = %c.peer, connection_id = c.id, listener = %c.listener.name, error = %e, "closing connection: TLS handshake failed");
            return;
        }
    };
    debug!(peer = %c.peer, connection_id = c.id, listener = %c.listener.name, %principal, "TLS connection established");
    let security = connection_security(&c.listener, &broker, principal);
    let (rd, wr) = tokio::io::split(stream);
    connection::serve_io_as(rd, wr, security, c.peer, c.id, broker, limits, shutdown).await;
}

/// A controller-only node: no client listener; runs until `shutdown` fires, then stops cleanly.
pub async fn serve_controller_only(broker: Arc<Broker>, mut shutdown: watch::Receiver<bool>) {
    info!(node = broker.config.node_id, "controller-only node running");
    let _ = shutdown.changed().await;
    info!("shutting down");
    broker.shutdown().await;
}

/// Binds every client listener; the error names the address that could not be bound.
pub fn bind_listeners(
    config: &BrokerConfig,
) -> Result<Vec<BoundListener>, (SocketAddr, std::io::Error)> {
    config
        .listeners
        .iter()
        .map(|l| {
            let socket = bind_listener(config, l.bind).map_err(|e| (l.bind, e))?;
            Ok(BoundListener {
                socket,
                listener: Arc::new(l.clone()),
            })
        })
        .collect()
}

/// Binds one listener at `addr`. Accepted connections inherit the listening socket's buffer
/// sizes (`socket.send.buffer.bytes`, `socket.receive.buffer.bytes`; -1 leaves them to the OS).
pub fn bind_listener(config: &BrokerConfig, addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() {
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
    socket.bind(addr)?;
    socket.listen(1024)
}

/// The request limits every connection shares, from the broker's settings.
pub fn request_limits(broker: &Broker) -> RequestLimits {
    RequestLimits::of(&broker.config)
}
