//! Connections from this broker to other brokers' inter-broker listeners, for the requests a
//! broker sends on its own account: a transaction coordinator's markers, a partition leader's
//! verification of a transaction (KIP-890). One connection per broker, opened on first use
//! over the transport replication uses (TLS, SASL), reused, and dropped after a failed round
//! trip (its state is then unknown; the next request reconnects).

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gregor_client::connection::Connection;
use gregor_meta::MetadataImage;
use kafka_protocol::protocol::Request;

use crate::transport::SharedTransport;

/// How long connecting to a broker and one round trip may take.
#[derive(Debug, Clone, Copy)]
pub struct LinkSettings {
    pub connect_timeout: Duration,
    /// Above the longest a request waits on the other side (a marker's ISR wait, 30 s).
    pub request_timeout: Duration,
}

impl Default for LinkSettings {
    fn default() -> Self {
        LinkSettings {
            connect_timeout: Duration::from_secs(5),
            request_timeout: Duration::from_secs(35),
        }
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// This node's connections to the other brokers.
pub struct BrokerLinks {
    node_id: i32,
    transport: SharedTransport,
    settings: LinkSettings,
    // A BTreeMap: no hash keys drawn (gregor-sim seeds them per thread, and every broker
    // makes one of these at start).
    connections: Mutex<BTreeMap<i32, Arc<Connection>>>,
}

impl BrokerLinks {
    pub fn new(node_id: i32, transport: SharedTransport, settings: LinkSettings) -> BrokerLinks {
        BrokerLinks {
            node_id,
            transport,
            settings,
            connections: Mutex::new(BTreeMap::new()),
        }
    }

    /// Sends `request` at `version` to `broker` (its address from `image`) and waits for its
    /// answer; the error says why not (no address, connection, timeout).
    pub async fn send<R: Request>(
        &self,
        image: &MetadataImage,
        broker: i32,
        request: &R,
        version: i16,
    ) -> Result<R::Response, String> {
        let conn = self.connection(image, broker).await?;
        match conn.send(request, version).await {
            Ok(resp) => Ok(resp),
            Err(e) => {
                conn.close("inter-broker request failed");
                self.forget(broker, &conn);
                Err(format!("broker {broker}: {e}"))
            }
        }
    }

    /// The open connection to `broker`, or a new one to its first (inter-broker) endpoint in
    /// the image.
    async fn connection(
        &self,
        image: &MetadataImage,
        broker: i32,
    ) -> Result<Arc<Connection>, String> {
        if let Some(c) = lock(&self.connections).get(&broker) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let addr = image
            .broker(broker)
            .and_then(|b| b.endpoints.first())
            .map(|ep| format!("{}:{}", ep.host, ep.port))
            .ok_or_else(|| format!("no address known for broker {broker}"))?;
        let timeout = self.settings.connect_timeout;
        let stream = match tokio::time::timeout(timeout, self.transport.connect(&addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(e)) => return Err(format!("connecting to broker {broker} ({addr}): {e}")),
            Err(_) => return Err(format!("connecting to broker {broker} ({addr}): timed out")),
        };
        let conn = Connection::over(
            stream,
            format!("broker {broker} ({addr})"),
            &format!("gregor-broker-{}", self.node_id),
            timeout,
            self.settings.request_timeout,
        )
        .await
        .map_err(|e| format!("broker {broker} ({addr}): {e}"))?;
        let conn = Arc::new(conn);
        // Another request may have connected meanwhile: keep one, use ours this time.
        lock(&self.connections).insert(broker, conn.clone());
        Ok(conn)
    }

    /// Connections kept open (tests check their reuse).
    #[cfg(test)]
    pub fn open_connections(&self) -> usize {
        lock(&self.connections).len()
    }

    fn forget(&self, broker: i32, conn: &Arc<Connection>) {
        let mut conns = lock(&self.connections);
        if conns.get(&broker).is_some_and(|c| Arc::ptr_eq(c, conn)) {
            conns.remove(&broker);
        }
    }
}
