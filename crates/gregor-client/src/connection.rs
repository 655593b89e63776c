//! One TCP connection to one broker, with pipelining.
//!
//! Any number of tasks may have requests in flight at once. Each request gets a correlation id
//! and a one-shot slot in the pending table; a writer task sends whole frames in order (so a
//! caller that gives up mid-request never leaves half a frame on the socket), and a reader task
//! hands each response to the slot its correlation id names. When the socket fails, every
//! waiting request fails with the reason and the connection is marked closed; the client opens
//! a new one on next use.

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::protocol::{Message, Request, StrBytes};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::codec;
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::versions::{api_name, handshake_step, BrokerVersions, HandshakeStep};

/// Requests queued for the writer before senders wait: bounds memory when a broker stalls.
const WRITE_QUEUE: usize = 256;

type Waiter = oneshot::Sender<std::result::Result<Bytes, String>>;

#[derive(Default)]
struct Pending {
    /// Why the connection closed; set once, after which no request is accepted.
    closed: Option<String>,
    waiters: HashMap<i32, Waiter>,
}

impl Pending {
    fn close(&mut self, reason: String) {
        if self.closed.is_none() {
            self.closed = Some(reason.clone());
        }
        for (_, waiter) in self.waiters.drain() {
            // The requester may have given up already; nothing to tell it then.
            let _ = waiter.send(Err(reason.clone()));
        }
    }
}

fn lock(pending: &Mutex<Pending>) -> std::sync::MutexGuard<'_, Pending> {
    // A panic while holding this lock leaves a consistent table (every operation is a single
    // insert/remove/drain), so a poisoned lock is still usable.
    pending.lock().unwrap_or_else(|p| p.into_inner())
}

/// Removes a request's slot if its caller goes away before the response (timeout, cancel).
struct SlotGuard<'a> {
    pending: &'a Mutex<Pending>,
    correlation_id: i32,
}

impl Drop for SlotGuard<'_> {
    fn drop(&mut self) {
        lock(self.pending).waiters.remove(&self.correlation_id);
    }
}

/// A connection to one broker, after the ApiVersions handshake.
pub struct Connection {
    label: String,
    client_id: String,
    request_timeout: Duration,
    writer: mpsc::Sender<Bytes>,
    pending: Arc<Mutex<Pending>>,
    next_correlation_id: AtomicI32,
    versions: BrokerVersions,
    reader: JoinHandle<()>,
}

impl Drop for Connection {
    fn drop(&mut self) {
        // The writer task ends when its channel closes; the reader would otherwise wait for
        // the broker to hang up.
        self.reader.abort();
    }
}

impl std::fmt::Debug for Connection {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Connection")
            .field("broker", &self.label)
            .finish_non_exhaustive()
    }
}

impl Connection {
    /// Connects to `addr` (`host:port`) and negotiates API versions. `label` names the broker
    /// in errors ("broker 1 (host:9092)", "bootstrap server host:9092").
    pub async fn connect(
        addr: &str,
        label: String,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Connection> {
        let stream = match tokio::time::timeout(connect_timeout, TcpStream::connect(addr)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => {
                return Err(Error::Connect {
                    addr: addr.to_string(),
                    source,
                })
            }
            Err(_) => {
                return Err(Error::Timeout {
                    what: format!("connecting to {label}"),
                    after_ms: millis(connect_timeout),
                })
            }
        };
        // Requests are small and latency matters more than packet count.
        let _ = stream.set_nodelay(true);
        let (read_half, write_half) = stream.into_split();
        let pending = Arc::new(Mutex::new(Pending::default()));
        let (writer, queue) = mpsc::channel(WRITE_QUEUE);
        tokio::spawn(write_loop(queue, write_half, pending.clone()));
        let reader = tokio::spawn(read_loop(read_half, pending.clone(), label.clone()));
        let mut conn = Connection {
            label,
            client_id: client_id.to_string(),
            // The handshake must not wait longer than the connect budget.
            request_timeout: connect_timeout.min(request_timeout),
            writer,
            pending,
            next_correlation_id: AtomicI32::new(0),
            versions: BrokerVersions::default(),
            reader,
        };
        conn.versions = conn.handshake().await?;
        conn.request_timeout = request_timeout;
        tracing::debug!(broker = %conn.label, "connected");
        Ok(conn)
    }

    /// The broker's advertised API versions.
    pub fn versions(&self) -> &BrokerVersions {
        &self.versions
    }

    pub fn label(&self) -> &str {
        &self.label
    }

    /// Whether the socket failed; a closed connection accepts no more requests.
    pub fn is_closed(&self) -> bool {
        lock(&self.pending).closed.is_some()
    }

    /// The highest version of `R` both sides support.
    pub fn pick_version<R: Request>(&self) -> Result<i16> {
        self.versions
            .pick::<R>()
            .map_err(|e| Error::UnsupportedVersion {
                api: api_name(R::KEY),
                broker: self.label.clone(),
                broker_versions: e.broker_text(),
                client_versions: format!("{}..={}", e.client.min, e.client.max),
            })
    }

    /// Sends `request` in `version` and waits for its response.
    pub async fn send<R: Request>(&self, request: &R, version: i16) -> Result<R::Response> {
        let frame = self.round_trip(request, version).await?;
        codec::decode_response::<R>(frame, version).map_err(|reason| Error::Protocol {
            broker: self.label.clone(),
            reason: format!("{} v{version}: {reason}", api_name(R::KEY)),
        })
    }

    async fn round_trip<R: Request>(&self, request: &R, version: i16) -> Result<Bytes> {
        // Correlation ids only need to be unique among requests in flight; wrapping is fine.
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = codec::encode_request(request, version, correlation_id, &self.client_id)
            .map_err(|reason| {
                Error::InvalidArgument(format!(
                    "cannot encode {} v{version}: {reason}",
                    api_name(R::KEY)
                ))
            })?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if let Some(reason) = &pending.closed {
                return Err(self.disconnected(reason.clone()));
            }
            pending.waiters.insert(correlation_id, tx);
        }
        let _guard = SlotGuard {
            pending: &self.pending,
            correlation_id,
        };
        if self.writer.send(frame).await.is_err() {
            return Err(self.disconnected("writer stopped".to_string()));
        }
        match tokio::time::timeout(self.request_timeout, rx).await {
            Ok(Ok(Ok(frame))) => Ok(frame),
            Ok(Ok(Err(reason))) => Err(self.disconnected(reason)),
            Ok(Err(_)) => Err(self.disconnected("connection closed".to_string())),
            Err(_) => Err(Error::Timeout {
                what: format!(
                    "waiting for {} response from {}",
                    api_name(R::KEY),
                    self.label
                ),
                after_ms: millis(self.request_timeout),
            }),
        }
    }

    fn disconnected(&self, reason: String) -> Error {
        Error::Disconnected {
            broker: self.label.clone(),
            reason,
        }
    }

    async fn handshake(&self) -> Result<BrokerVersions> {
        let mut version = ApiVersionsRequest::VERSIONS.max;
        // At most one downgrade: the second answer names a version the broker claims to know.
        for _ in 0..2 {
            let mut request = ApiVersionsRequest::default();
            if version >= 3 {
                request.client_software_name = StrBytes::from_static_str("gregor-client");
                request.client_software_version =
                    StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
            }
            let frame = self.round_trip(&request, version).await?;
            let (_, response) =
                codec::decode_api_versions_response(frame, version).map_err(|reason| {
                    Error::Protocol {
                        broker: self.label.clone(),
                        reason,
                    }
                })?;
            match handshake_step(version, &response) {
                HandshakeStep::Done(versions) => return Ok(versions),
                HandshakeStep::RetryWith(lower) => {
                    tracing::debug!(broker = %self.label, from = version, to = lower, "ApiVersions downgrade");
                    version = lower;
                }
                HandshakeStep::Fail(code) => {
                    return Err(Error::kafka(
                        format!("ApiVersions v{version} to {}", self.label),
                        KafkaError::new(KafkaCode(code), None),
                    ))
                }
            }
        }
        Err(Error::Protocol {
            broker: self.label.clone(),
            reason: "ApiVersions still unsupported after downgrading".to_string(),
        })
    }
}

fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

async fn write_loop(
    mut queue: mpsc::Receiver<Bytes>,
    mut socket: OwnedWriteHalf,
    pending: Arc<Mutex<Pending>>,
) {
    while let Some(frame) = queue.recv().await {
        if let Err(e) = socket.write_all(&frame).await {
            lock(&pending).close(format!("write failed: {e}"));
            return;
        }
    }
    // Every sender is gone: the connection was dropped.
    let _ = socket.shutdown().await;
}

async fn read_loop(mut socket: OwnedReadHalf, pending: Arc<Mutex<Pending>>, label: String) {
    let reason = loop {
        let size = match socket.read_i32().await {
            Ok(size) => size,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break "broker closed the connection".to_string()
            }
            Err(e) => break format!("read failed: {e}"),
        };
        let len = match codec::check_frame_size(size) {
            Ok(len) => len,
            Err(reason) => break reason,
        };
        let mut frame = vec![0u8; len];
        if let Err(e) = socket.read_exact(&mut frame).await {
            break format!("read failed mid-response: {e}");
        }
        let Some(correlation_id) = codec::response_correlation_id(&frame) else {
            break "response shorter than its header".to_string();
        };
        let waiter = lock(&pending).waiters.remove(&correlation_id);
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(Bytes::from(frame)));
            }
            // A request whose caller timed out; its late answer has nowhere to go.
            None => {
                tracing::debug!(broker = %label, correlation_id, "response without a waiting request")
            }
        }
    };
    tracing::debug!(broker = %label, %reason, "connection closed");
    lock(&pending).close(reason);
}
