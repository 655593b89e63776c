//! Accepting connections and shutting down cleanly.
//!
//! Connection limits follow Kafka: while `max.connections` connections are open the listener
//! stops accepting (new connections wait in the kernel's backlog until one closes); a new
//! connection from an address that already has `max.connections.per.ip` (or its entry in
//! `max.connections.per.ip.overrides`) is closed at once.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::net::{TcpListener, TcpSocket};
use tokio::sync::{watch, Notify};
use tracing::{info, warn};

use crate::broker::Broker;
use crate::config::BrokerConfig;
use crate::connection::{self, RequestLimits};

/// Why a new connection was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum QuotaError {
    #[error("too many connections from {ip} (limit {limit})")]
    PerIp { ip: IpAddr, limit: usize },
    #[error("too many connections (max.connections {limit})")]
    Total { limit: usize },
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// Open connections, in total and per client address, against their limits.
#[derive(Debug)]
pub struct ConnectionQuotas {
    max_connections: usize,
    per_ip: usize,
    overrides: HashMap<IpAddr, usize>,
    counts: Mutex<Counts>,
    released: Notify,
}

/// One admitted connection's place in the counts; dropping it frees the place.
#[derive(Debug)]
pub struct ConnectionSlot {
    quotas: Arc<ConnectionQuotas>,
    ip: IpAddr,
}

impl Drop for ConnectionSlot {
    fn drop(&mut self) {
        let mut c = self.quotas.lock();
        c.total = c.total.saturating_sub(1);
        if let Some(n) = c.per_ip.get_mut(&self.ip) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                c.per_ip.remove(&self.ip);
            }
        }
        drop(c);
        self.quotas.released.notify_waiters();
    }
}

impl ConnectionQuotas {
    pub fn new(
        max_connections: usize,
        per_ip: usize,
        overrides: HashMap<IpAddr, usize>,
    ) -> Arc<ConnectionQuotas> {
        Arc::new(ConnectionQuotas {
            max_connections,
            per_ip,
            overrides,
            counts: Mutex::new(Counts::default()),
            released: Notify::new(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Open connections.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    fn limit_for(&self, ip: IpAddr) -> usize {
        self.overrides.get(&ip).copied().unwrap_or(self.per_ip)
    }

    /// Counts a new connection from `ip`, or says which limit refuses it.
    pub fn try_admit(self: &Arc<Self>, ip: IpAddr) -> Result<ConnectionSlot, QuotaError> {
        let mut c = self.lock();
        if c.total >= self.max_connections {
            return Err(QuotaError::Total {
                limit: self.max_connections,
            });
        }
        let limit = self.limit_for(ip);
        let from_ip = c.per_ip.get(&ip).copied().unwrap_or(0);
        if from_ip >= limit {
            return Err(QuotaError::PerIp { ip, limit });
        }
        c.total += 1;
        *c.per_ip.entry(ip).or_insert(0) += 1;
        Ok(ConnectionSlot {
            quotas: self.clone(),
            ip,
        })
    }

    /// Returns once fewer than `max.connections` connections are open.
    pub async fn wait_for_slot(&self) {
        loop {
            let released = self.released.notified();
            tokio::pin!(released);
            // Registered before the check, so a close between check and wait is not missed.
            released.as_mut().enable();
            if self.open() < self.max_connections {
                return;
            }
            released.await;
        }
    }
}

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
    let background = crate::util::spawn(broker.clone().run_background(shutdown.clone()));
    let mut connections = tokio::task::JoinSet::new();
    info!(address = %broker.config.bind, "listening");
    loop {
        while connections.try_join_next().is_some() {}
        if quotas.open() >= quotas.max_connections {
            warn!(
                limit = quotas.max_connections,
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
                connections.spawn(crate::util::inherit_clock(async move {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().expect("ip")
    }

    #[test]
    fn per_ip_limit_refuses_the_next_connection_and_frees_on_close() {
        let q = ConnectionQuotas::new(100, 2, HashMap::new());
        let a = q.try_admit(ip("127.0.0.1")).expect("first");
        let _b = q.try_admit(ip("127.0.0.1")).expect("second");
        assert_eq!(
            q.try_admit(ip("127.0.0.1")).expect_err("third"),
            QuotaError::PerIp {
                ip: ip("127.0.0.1"),
                limit: 2
            }
        );
        // Another address has its own count.
        let _c = q.try_admit(ip("127.0.0.2")).expect("other address");
        drop(a);
        q.try_admit(ip("127.0.0.1"))
            .expect("a place freed by a close");
    }

    #[test]
    fn overrides_replace_the_per_ip_limit() {
        let overrides = HashMap::from([(ip("127.0.0.9"), 0), (ip("127.0.0.8"), 3)]);
        let q = ConnectionQuotas::new(100, 1, overrides);
        assert!(matches!(
            q.try_admit(ip("127.0.0.9")),
            Err(QuotaError::PerIp { limit: 0, .. })
        ));
        let held: Vec<_> = (0..3)
            .map(|_| q.try_admit(ip("127.0.0.8")).expect("override allows 3"))
            .collect();
        assert!(q.try_admit(ip("127.0.0.8")).is_err());
        assert_eq!(q.open(), 3);
        drop(held);
        assert_eq!(q.open(), 0);
    }

    #[tokio::test]
    async fn total_limit_blocks_until_a_connection_closes() {
        let q = ConnectionQuotas::new(2, 10, HashMap::new());
        let a = q.try_admit(ip("127.0.0.1")).expect("first");
        let _b = q.try_admit(ip("127.0.0.2")).expect("second");
        assert_eq!(
            q.try_admit(ip("127.0.0.3")).expect_err("full"),
            QuotaError::Total { limit: 2 }
        );
        let waiter = {
            let q = q.clone();
            crate::util::spawn(async move { q.wait_for_slot().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished(), "no place while both are open");
        drop(a);
        waiter.await.expect("woken by the close");
        q.try_admit(ip("127.0.0.3"))
            .expect("admitted after the close");
    }
}
