//! One TCP connection to one broker (or a stream of another transport), with pipelining.
//!
//! Any number of tasks may have requests in flight at once. Each request gets a correlation id
//! and a one-shot slot in the pending table; a writer task sends whole frames in order (so a
//! caller that gives up mid-request never leaves half a frame on the socket), and a reader task
//! hands each response to the slot its correlation id names. When the socket fails, every
//! waiting request fails with the reason and the connection is marked closed; the client opens
//! a new one on next use.
//!
//! Order: requests go on the wire in the order their [`Connection::submit`] calls return
//! (the writer drains one FIFO queue), so a caller that must keep requests in order (the
//! producer, with several Produce requests in flight) submits them one after the other and
//! waits for the responses separately. [`Connection::submit_without_response`] is for requests
//! the broker does not answer (Produce with `acks=0`).

use std::collections::HashMap;
use std::sync::atomic::{AtomicI32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::ApiVersionsRequest;
use kafka_protocol::protocol::{Message, Request, StrBytes};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, oneshot};
use tokio::task::JoinHandle;

use crate::codec;
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::versions::{api_name, handshake_step, BrokerVersions, HandshakeStep};

/// A byte stream to a broker opened by a [`Dialer`].
pub trait DialedStream: AsyncRead + AsyncWrite + Send + 'static {}
impl<T: AsyncRead + AsyncWrite + Send + 'static> DialedStream for T {}

/// What a [`Dialer`] returns for one connection attempt.
pub type DialFuture = std::pin::Pin<
    Box<dyn std::future::Future<Output = std::io::Result<Box<dyn DialedStream>>> + Send>,
>;

/// Opens the byte streams to brokers in place of TCP: another transport (the deterministic
/// simulator's network). Given `host:port`; the handshake and framing stay the client's own.
#[derive(Clone)]
pub struct Dialer(std::sync::Arc<dyn Fn(&str) -> DialFuture + Send + Sync>);

impl Dialer {
    pub fn new(dial: impl Fn(&str) -> DialFuture + Send + Sync + 'static) -> Dialer {
        Dialer(std::sync::Arc::new(dial))
    }

    pub fn dial(&self, addr: &str) -> DialFuture {
        (self.0)(addr)
    }
}

/// Waits for `connecting` for at most `connect_timeout`, naming the address or the broker in
/// the error.
async fn within_connect_timeout<S>(
    addr: &str,
    label: &str,
    connect_timeout: Duration,
    connecting: impl std::future::Future<Output = std::io::Result<S>>,
) -> Result<S> {
    match tokio::time::timeout(connect_timeout, connecting).await {
        Ok(Ok(s)) => Ok(s),
        Ok(Err(source)) => match crate::error::authentication_failure(&source) {
            Some(refused) => Err(Error::Authentication {
                addr: addr.to_string(),
                reason: refused.to_string(),
            }),
            None => Err(Error::Connect {
                addr: addr.to_string(),
                source,
            }),
        },
        Err(_) => Err(Error::Timeout {
            what: format!("connecting to {label}"),
            after_ms: millis(connect_timeout),
        }),
    }
}

impl std::fmt::Debug for Dialer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Dialer")
    }
}

/// Requests queued for the writer before senders wait: bounds memory when a broker stalls.
const WRITE_QUEUE: usize = 256;

type Waiter = oneshot::Sender<std::result::Result<Arrived, String>>;

/// A response frame as the reader hands it over.
struct Arrived {
    frame: Bytes,
    /// When the reader read its size, its first bytes.
    first_byte: tokio::time::Instant,
}

/// A frame for the writer, and who to tell once it is on the socket.
struct Outgoing {
    frame: Bytes,
    written: Option<oneshot::Sender<()>>,
}

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

/// A request on its way: resolves to the response. Dropping it (timeout, cancel) frees the
/// request's slot; a late response is then discarded.
pub struct PendingResponse<R: Request> {
    pending: Arc<Mutex<Pending>>,
    correlation_id: i32,
    rx: Option<oneshot::Receiver<std::result::Result<Arrived, String>>>,
    version: i16,
    label: String,
    deadline: tokio::time::Instant,
    request_timeout: Duration,
    _request: std::marker::PhantomData<fn() -> R>,
}

impl<R: Request> Drop for PendingResponse<R> {
    fn drop(&mut self) {
        lock(&self.pending).waiters.remove(&self.correlation_id);
    }
}

impl<R: Request> PendingResponse<R> {
    /// Waits for the response (at most `request.timeout.ms` from the submission) and decodes
    /// it.
    pub async fn response(self) -> Result<R::Response> {
        Ok(self.timed_response().await?.0)
    }

    /// [`PendingResponse::response`], with when its first bytes were read: the time from
    /// sending to then is the round trip (the network's and the broker's), the time from then
    /// to now the answer's transfer. A consumer sizes its Fetches by the round trip.
    pub async fn timed_response(self) -> Result<(R::Response, tokio::time::Instant)> {
        let version = self.version;
        let label = self.label.clone();
        let Arrived { frame, first_byte } = self.frame().await?;
        let response =
            codec::decode_response::<R>(frame, version).map_err(|reason| Error::Protocol {
                broker: label,
                reason: format!("{} v{version}: {reason}", api_name(R::KEY)),
            })?;
        Ok((response, first_byte))
    }

    /// The response frame, undecoded.
    async fn frame(mut self) -> Result<Arrived> {
        let rx = self.rx.take().expect("a pending response is awaited once");
        let disconnected = |reason: String| Error::Disconnected {
            broker: self.label.clone(),
            reason,
        };
        match tokio::time::timeout_at(self.deadline, rx).await {
            Ok(Ok(Ok(arrived))) => Ok(arrived),
            Ok(Ok(Err(reason))) => Err(disconnected(reason)),
            Ok(Err(_)) => Err(disconnected("connection closed".to_string())),
            Err(_) => {
                // A broker answers a connection's requests in order, so nothing behind this one
                // will be answered either: the connection is closed (as Kafka's clients do on a
                // request timeout), failing what else waits on it, and the next request opens a
                // fresh one. A peer that vanished without a reset (power loss, a dropped link)
                // would otherwise hold the connection until TCP gave up, hours later.
                lock(&self.pending).close(format!(
                    "no answer to {} within request.timeout.ms ({} ms)",
                    api_name(R::KEY),
                    millis(self.request_timeout)
                ));
                Err(Error::Timeout {
                    what: format!(
                        "waiting for {} response from {}",
                        api_name(R::KEY),
                        self.label
                    ),
                    after_ms: millis(self.request_timeout),
                })
            }
        }
    }
}

/// A request the broker will not answer, queued for the socket: resolves once its frame has
/// been written (not when the broker has read it).
pub struct Written {
    rx: oneshot::Receiver<()>,
    label: String,
}

impl Written {
    pub async fn written(self) -> Result<()> {
        self.rx.await.map_err(|_| Error::Disconnected {
            broker: self.label,
            reason: "the connection closed before the request was written".to_string(),
        })
    }
}

/// A connection to one broker, after the ApiVersions handshake.
pub struct Connection {
    label: String,
    client_id: String,
    request_timeout: Duration,
    writer: mpsc::Sender<Outgoing>,
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
        let stream =
            within_connect_timeout(addr, &label, connect_timeout, TcpStream::connect(addr)).await?;
        // Requests are small and latency matters more than packet count.
        let _ = stream.set_nodelay(true);
        let (read_half, write_half) = stream.into_split();
        Self::start(
            read_half,
            write_half,
            label,
            client_id,
            connect_timeout,
            request_timeout,
        )
        .await
    }

    /// [`Connection::connect`] through `dialer` when one is given (another transport than TCP).
    pub async fn open(
        dialer: Option<&Dialer>,
        addr: &str,
        label: String,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Connection> {
        let Some(dialer) = dialer else {
            return Self::connect(addr, label, client_id, connect_timeout, request_timeout).await;
        };
        let stream =
            within_connect_timeout(addr, &label, connect_timeout, dialer.dial(addr)).await?;
        let stream = Box::into_pin(stream);
        Self::over(stream, label, client_id, connect_timeout, request_timeout).await
    }

    /// Negotiates API versions over a stream the caller connected (another transport than
    /// TCP: the deterministic simulator's network). `connect_timeout` bounds the handshake.
    pub async fn over<S>(
        stream: S,
        label: String,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Connection>
    where
        S: AsyncRead + AsyncWrite + Send + 'static,
    {
        let (read_half, write_half) = tokio::io::split(stream);
        Self::start(
            read_half,
            write_half,
            label,
            client_id,
            connect_timeout,
            request_timeout,
        )
        .await
    }

    async fn start<R, W>(
        read_half: R,
        write_half: W,
        label: String,
        client_id: &str,
        connect_timeout: Duration,
        request_timeout: Duration,
    ) -> Result<Connection>
    where
        R: AsyncRead + Unpin + Send + 'static,
        W: AsyncWrite + Unpin + Send + 'static,
    {
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

    /// Gives the connection up: what waits on it fails with `reason` and nothing more is
    /// sent over it. For a peer that stopped answering; the socket is shut when the last
    /// handle to the connection is dropped.
    pub fn close(&self, reason: &str) {
        lock(&self.pending).close(reason.to_string());
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
        self.submit(request, version).await?.response().await
    }

    /// Queues `request` for the socket behind every request submitted before it and returns
    /// its response to come. Waits only while the write queue is full.
    pub async fn submit<R: Request>(
        &self,
        request: &R,
        version: i16,
    ) -> Result<PendingResponse<R>> {
        self.submit_within(request, version, self.request_timeout)
            .await
    }

    /// [`Connection::submit`] with a request timeout of its own, for a request the broker may
    /// rightly hold longer than `request.timeout.ms` (JoinGroup, up to the rebalance timeout).
    pub async fn submit_within<R: Request>(
        &self,
        request: &R,
        version: i16,
        request_timeout: Duration,
    ) -> Result<PendingResponse<R>> {
        let (correlation_id, frame) = self.encode(request, version)?;
        let (tx, rx) = oneshot::channel();
        {
            let mut pending = lock(&self.pending);
            if let Some(reason) = &pending.closed {
                return Err(self.disconnected(reason.clone()));
            }
            pending.waiters.insert(correlation_id, tx);
        }
        // From here the slot is freed when the handle is dropped, whatever happens.
        let handle = PendingResponse {
            pending: self.pending.clone(),
            correlation_id,
            rx: Some(rx),
            version,
            label: self.label.clone(),
            deadline: tokio::time::Instant::now() + request_timeout,
            request_timeout,
            _request: std::marker::PhantomData,
        };
        let out = Outgoing {
            frame,
            written: None,
        };
        if self.writer.send(out).await.is_err() {
            return Err(self.disconnected("writer stopped".to_string()));
        }
        Ok(handle)
    }

    /// Queues a request the broker sends no response to (Produce with `acks=0`), in order
    /// with [`Connection::submit`]. The returned handle tells when its frame is on the socket.
    pub async fn submit_without_response<R: Request>(
        &self,
        request: &R,
        version: i16,
    ) -> Result<Written> {
        let (_, frame) = self.encode(request, version)?;
        if let Some(reason) = &lock(&self.pending).closed {
            return Err(self.disconnected(reason.clone()));
        }
        let (tx, rx) = oneshot::channel();
        let out = Outgoing {
            frame,
            written: Some(tx),
        };
        if self.writer.send(out).await.is_err() {
            return Err(self.disconnected("writer stopped".to_string()));
        }
        Ok(Written {
            rx,
            label: self.label.clone(),
        })
    }

    fn encode<R: Request>(&self, request: &R, version: i16) -> Result<(i32, Bytes)> {
        // Correlation ids only need to be unique among requests in flight; wrapping is fine.
        let correlation_id = self.next_correlation_id.fetch_add(1, Ordering::Relaxed);
        let frame = codec::encode_request(request, version, correlation_id, &self.client_id)
            .map_err(|reason| {
                Error::InvalidArgument(format!(
                    "cannot encode {} v{version}: {reason}",
                    api_name(R::KEY)
                ))
            })?;
        Ok((correlation_id, frame))
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
            let frame = self.submit(&request, version).await?.frame().await?.frame;
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

async fn write_loop<W: AsyncWrite + Unpin>(
    mut queue: mpsc::Receiver<Outgoing>,
    mut socket: W,
    pending: Arc<Mutex<Pending>>,
) {
    while let Some(out) = queue.recv().await {
        if let Err(e) = socket.write_all(&out.frame).await {
            lock(&pending).close(format!("write failed: {e}"));
            return;
        }
        if let Some(written) = out.written {
            // The submitter may have stopped waiting; the frame is out either way.
            let _ = written.send(());
        }
    }
    // Every sender is gone: the connection was dropped.
    let _ = socket.shutdown().await;
}

async fn read_loop<R: AsyncRead + Unpin>(
    mut socket: R,
    pending: Arc<Mutex<Pending>>,
    label: String,
) {
    let mut buffers = FrameBuffers::default();
    let reason = loop {
        let size = match socket.read_i32().await {
            Ok(size) => size,
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => {
                break "broker closed the connection".to_string()
            }
            Err(e) => break format!("read failed: {e}"),
        };
        let first_byte = tokio::time::Instant::now();
        let len = match codec::check_frame_size(size) {
            Ok(len) => len,
            Err(reason) => break reason,
        };
        let frame = match read_body(&mut socket, len, &mut buffers).await {
            Ok(frame) => frame,
            Err(e) => break format!("read failed mid-response: {e}"),
        };
        let Some(correlation_id) = codec::response_correlation_id(&frame) else {
            break "response shorter than its header".to_string();
        };
        let waiter = lock(&pending).waiters.remove(&correlation_id);
        match waiter {
            Some(w) => {
                let _ = w.send(Ok(Arrived { frame, first_byte }));
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

/// Frames at least this large are read into a pooled buffer; smaller ones (metadata, group
/// and admin answers, which may be kept for long) get their own allocation.
const POOLED_FRAME_MIN: usize = 64 * 1024;
/// Buffers a connection keeps for large frames; the memory kept is at most this many of the
/// largest frames read (Fetch answers, within `fetch.max.bytes`). Answers covering several
/// partitions stay in use until each partition's records are returned, so several are alive
/// at once: with two buffers most answers got a fresh allocation, faulted in page by page
/// (57,000 page faults per GB consumed at 8 partitions; 13,000 with four, and 18% less CPU).
/// Four, each sized for its own frame, still gave a consumer of 8 partitions 21 fresh
/// allocations per GB (its answers range from 1 to 8 MiB); eight, each sized for the largest
/// frame, 6, with 2-5 times fewer page faults and 4-9% less CPU
/// (bench/history/produce-consume-2026-12-04-to-12-05.md, "Frame buffers sized for the largest
/// answer").
const POOLED_BUFFERS: usize = 8;

/// The reader's reusable buffers for large frames. A frame is handed out as `Bytes` sharing its
/// buffer's allocation; once every slice of it is dropped (the consumer returned and the
/// application dropped its records), the allocation is reclaimed for a later frame instead of
/// being freed and a fresh one faulted in page by page.
#[derive(Default)]
struct FrameBuffers {
    pool: Vec<BytesMut>,
    /// The largest pooled frame read. A fresh buffer gets this much room, so that any free
    /// buffer can take any later frame: a consumer's answers range from one partition's worth
    /// to `fetch.max.bytes`, and a buffer sized for a small one could not be reused for a large
    /// one. Room never written is never faulted in. At most `codec::MAX_RESPONSE_BYTES`: every
    /// frame size is checked against it before its body is read.
    largest: usize,
}

impl FrameBuffers {
    /// An empty buffer with room for `len` bytes.
    fn take(&mut self, len: usize) -> BytesMut {
        if len < POOLED_FRAME_MIN {
            return BytesMut::with_capacity(len);
        }
        // Newest first: the buffer read into last is the likeliest to be in the caches still,
        // and older ones that go unused are the first let go (fewer pages kept resident).
        if let Some(i) = self
            .pool
            .iter_mut()
            .rposition(|b| b.capacity() >= len || b.try_reclaim(len))
        {
            return self.pool.remove(i);
        }
        self.largest = self.largest.max(len);
        BytesMut::with_capacity(self.largest)
    }

    /// Keeps what is left of a buffer a large frame was split from; past [`POOLED_BUFFERS`],
    /// lets go of the one with the least room left (the oldest of those).
    fn keep(&mut self, rest: BytesMut, len: usize) {
        if len >= POOLED_FRAME_MIN {
            self.pool.push(rest);
            if self.pool.len() > POOLED_BUFFERS {
                let least = (0..self.pool.len())
                    .min_by_key(|&i| self.pool[i].capacity())
                    .expect("the pool is not empty");
                self.pool.remove(least);
            }
        }
    }
}

/// Reads a frame body of `len` bytes (already checked against [`codec::MAX_RESPONSE_BYTES`])
/// straight from the socket into uninitialised capacity (no zeroing pass over a buffer the
/// socket is about to fill), in a reused buffer when one is free ([`FrameBuffers`]). The frame
/// is handed over as `Bytes`, so the records decoded from it are slices of it, not copies.
async fn read_body<R: AsyncRead + Unpin>(
    socket: &mut R,
    len: usize,
    buffers: &mut FrameBuffers,
) -> std::io::Result<Bytes> {
    let mut buf = buffers.take(len);
    while buf.len() < len {
        let want = len - buf.len();
        if socket.read_buf(&mut (&mut buf).limit(want)).await? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
    }
    let frame = buf.split().freeze();
    buffers.keep(buf, len);
    Ok(frame)
}

#[cfg(test)]
mod tests {
    //! Against a scripted peer on a real socket: it answers the handshake, then reads several
    //! requests before answering any, in reverse order.

    use super::*;
    use bytes::{BufMut, BytesMut};
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::ApiVersionsResponse;
    use kafka_protocol::protocol::Encodable;
    use tokio::net::TcpListener;

    /// Reads one request frame: (api version, correlation id).
    async fn read_request(socket: &mut TcpStream) -> (i16, i32) {
        let size = socket.read_i32().await.expect("frame size");
        let mut frame = vec![0u8; size as usize];
        socket.read_exact(&mut frame).await.expect("frame");
        let version = i16::from_be_bytes([frame[2], frame[3]]);
        let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
        (version, correlation_id)
    }

    /// An ApiVersions response (header v0, as ApiVersions always uses) whose throttle time
    /// carries `tag`, so the test can tell which answer reached which request.
    async fn answer(socket: &mut TcpStream, version: i16, correlation_id: i32, tag: i32) {
        let mut response = ApiVersionsResponse::default();
        response.throttle_time_ms = tag;
        let mut key = ApiVersion::default();
        key.api_key = 18;
        key.min_version = 0;
        key.max_version = 4;
        response.api_keys.push(key);
        let mut body = BytesMut::new();
        body.put_i32(correlation_id);
        response.encode(&mut body, version).expect("encode");
        socket.write_i32(body.len() as i32).await.expect("write");
        socket.write_all(&body).await.expect("write");
    }

    async fn connect_to_script() -> (Connection, TcpStream) {
        connect_to_script_within(Duration::from_secs(5)).await
    }

    async fn connect_to_script_within(request_timeout: Duration) -> (Connection, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr").to_string();
        let peer = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.expect("accept");
            let (version, id) = read_request(&mut socket).await;
            answer(&mut socket, version, id, 0).await;
            socket
        });
        let conn = Connection::connect(
            &addr,
            "scripted broker".to_string(),
            "test",
            Duration::from_secs(5),
            request_timeout,
        )
        .await
        .expect("handshake");
        (conn, peer.await.expect("peer"))
    }

    #[tokio::test]
    async fn requests_are_pipelined_in_order_and_answers_matched_out_of_order() {
        let (conn, mut socket) = connect_to_script().await;
        let version = conn.pick_version::<ApiVersionsRequest>().expect("version");
        let request = ApiVersionsRequest::default();
        let mut pending = Vec::new();
        for _ in 0..3 {
            pending.push(conn.submit(&request, version).await.expect("submit"));
        }
        // The peer sees all three before answering any: nothing waited for a response.
        let mut seen = Vec::new();
        for _ in 0..3 {
            seen.push(read_request(&mut socket).await);
        }
        let ids: Vec<i32> = seen.iter().map(|(_, id)| *id).collect();
        assert!(
            ids.windows(2).all(|w| w[1] == w[0] + 1),
            "in submit order: {ids:?}"
        );
        for (v, id) in seen.iter().rev() {
            answer(&mut socket, *v, *id, 1000 + id).await;
        }
        for (p, id) in pending.into_iter().zip(ids) {
            let response = p.response().await.expect("response");
            assert_eq!(response.throttle_time_ms, 1000 + id);
        }
    }

    #[tokio::test]
    async fn a_request_timeout_gives_the_connection_up() {
        let (conn, mut socket) = connect_to_script_within(Duration::from_millis(300)).await;
        let version = conn.pick_version::<ApiVersionsRequest>().expect("version");
        let request = ApiVersionsRequest::default();
        let first = conn.submit(&request, version).await.expect("submit");
        // A request allowed longer than request.timeout.ms (a JoinGroup) behind it.
        let patient = conn
            .submit_within(&request, version, Duration::from_secs(60))
            .await
            .expect("submit");
        // The peer reads both and answers neither, keeping the socket open (a broker that
        // vanished without a reset looks the same from here).
        let (v, first_id) = read_request(&mut socket).await;
        read_request(&mut socket).await;
        let err = first.response().await.expect_err("no answer");
        assert!(matches!(err, Error::Timeout { .. }), "{err}");
        assert!(
            conn.is_closed(),
            "a timed-out request closes its connection"
        );
        // What waited behind it fails at once instead of after its own 60 s.
        let err = tokio::time::timeout(Duration::from_secs(5), patient.response())
            .await
            .expect("failed at once")
            .expect_err("the connection is gone");
        assert!(
            matches!(&err, Error::Disconnected { reason, .. } if reason.contains("request.timeout.ms")),
            "{err}"
        );
        let err = conn
            .submit(&request, version)
            .await
            .err()
            .expect("closed connection refuses");
        assert!(matches!(err, Error::Disconnected { .. }), "{err}");
        // A late answer finds nobody waiting and is dropped.
        answer(&mut socket, v, first_id, 1).await;
    }

    #[tokio::test]
    async fn a_request_without_response_is_reported_written_and_the_next_one_still_matches() {
        let (conn, mut socket) = connect_to_script().await;
        let version = conn.pick_version::<ApiVersionsRequest>().expect("version");
        let request = ApiVersionsRequest::default();
        let written = conn
            .submit_without_response(&request, version)
            .await
            .expect("queued");
        written.written().await.expect("on the socket");
        let (_, unanswered) = read_request(&mut socket).await;
        let next = conn.submit(&request, version).await.expect("submit");
        let (v, id) = read_request(&mut socket).await;
        assert_ne!(id, unanswered);
        answer(&mut socket, v, id, 7).await;
        assert_eq!(next.response().await.expect("answer").throttle_time_ms, 7);
        // A broken socket fails what waits and refuses what comes.
        let waiting = conn.submit(&request, version).await.expect("submit");
        drop(socket);
        let err = waiting.response().await.expect_err("peer gone");
        assert!(matches!(err, Error::Disconnected { .. }), "{err}");
        assert!(conn.is_closed());
        let err = conn
            .submit_without_response(&request, version)
            .await
            .err()
            .expect("closed connection refuses");
        assert!(matches!(err, Error::Disconnected { .. }), "{err}");
    }
}

#[cfg(test)]
mod frame_tests {
    use super::*;

    /// Writes frames of the given sizes (each filled with its index) to one end of a pipe.
    async fn frames_over_a_pipe(sizes: &[usize]) -> tokio::io::DuplexStream {
        let (mut tx, rx) = tokio::io::duplex(1 << 16);
        let sizes = sizes.to_vec();
        tokio::spawn(async move {
            for (i, n) in sizes.into_iter().enumerate() {
                tx.write_all(&vec![i as u8; n]).await.expect("pipe");
            }
        });
        rx
    }

    #[tokio::test]
    async fn large_frames_reuse_a_buffer_once_every_slice_of_it_is_dropped() {
        let big = POOLED_FRAME_MIN * 2;
        let sizes = [big, big, big, big / 2, 100, big];
        let mut rx = frames_over_a_pipe(&sizes).await;
        let mut buffers = FrameBuffers::default();
        let f0 = read_body(&mut rx, big, &mut buffers).await.unwrap();
        let f1 = read_body(&mut rx, big, &mut buffers).await.unwrap();
        assert!(f0.iter().all(|b| *b == 0) && f1.iter().all(|b| *b == 1));
        let (at0, at1) = (f0.as_ptr(), f1.as_ptr());
        // A slice of frame 0 outlives it (a record's value): nothing is reclaimed yet.
        let value = f0.slice(10..20);
        drop(f0);
        let f2 = read_body(&mut rx, big, &mut buffers).await.unwrap();
        assert_ne!(f2.as_ptr(), at0);
        assert_ne!(f2.as_ptr(), at1, "frame 1 is still held");
        assert!(f2.iter().all(|b| *b == 2));
        let at2 = f2.as_ptr();
        assert!(buffers.pool.len() <= POOLED_BUFFERS);
        drop((value, f1, f2));
        // Everything dropped: the next large frame lands in an allocation read into before.
        let f3 = read_body(&mut rx, big / 2, &mut buffers).await.unwrap();
        assert!(f3.iter().all(|b| *b == 3));
        // The pool is searched newest first: frame 2's buffer, free again, is taken.
        assert_eq!(f3.as_ptr(), at2, "frame 2's allocation was reclaimed");
        // A small frame gets its own allocation and leaves the pool alone.
        let pooled = buffers.pool.len();
        let f4 = read_body(&mut rx, 100, &mut buffers).await.unwrap();
        assert_eq!((f4.len(), buffers.pool.len()), (100, pooled));
        let f5 = read_body(&mut rx, big, &mut buffers).await.unwrap();
        assert!(f5.iter().all(|b| *b == 5));
        // The stream ends: a frame cut short is an error, not a short frame.
        drop(rx);
        let mut rx = frames_over_a_pipe(&[10]).await;
        let err = read_body(&mut rx, 20, &mut buffers).await.unwrap_err();
        assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof);
    }

    #[tokio::test]
    async fn the_pool_keeps_at_most_its_number_of_buffers_and_drops_the_oldest_when_all_are_full() {
        let big = POOLED_FRAME_MIN * 2;
        let count = POOLED_BUFFERS + 2;
        let mut rx = frames_over_a_pipe(&vec![big; count + 1]).await;
        let mut buffers = FrameBuffers::default();
        // Every frame is still held while the next is read: none can be reused.
        let mut held = Vec::new();
        for i in 0..count {
            let f = read_body(&mut rx, big, &mut buffers).await.unwrap();
            assert!(f.iter().all(|b| *b == i as u8));
            assert!(!held.iter().any(|h: &Bytes| h.as_ptr() == f.as_ptr()));
            held.push(f);
            assert_eq!(buffers.pool.len(), (i + 1).min(POOLED_BUFFERS));
        }
        // The oldest buffers were let go: once every frame is dropped, the next one lands
        // in one of the newest allocations only.
        let newest: Vec<*const u8> = held[count - POOLED_BUFFERS..]
            .iter()
            .map(|f| f.as_ptr())
            .collect();
        drop(held);
        let last = read_body(&mut rx, big, &mut buffers).await.unwrap();
        assert!(newest.contains(&last.as_ptr()));
    }

    #[tokio::test]
    async fn a_buffer_first_read_into_by_a_small_frame_takes_a_large_one_later() {
        let (small, large) = (POOLED_FRAME_MIN, POOLED_FRAME_MIN * 4);
        let mut rx = frames_over_a_pipe(&[large, small, large]).await;
        let mut buffers = FrameBuffers::default();
        let f0 = read_body(&mut rx, large, &mut buffers).await.unwrap();
        // Frame 0 is held: the small frame gets a fresh buffer, with room for a large one.
        let f1 = read_body(&mut rx, small, &mut buffers).await.unwrap();
        assert!(f1.iter().all(|b| *b == 1));
        let at1 = f1.as_ptr();
        drop(f1);
        let f2 = read_body(&mut rx, large, &mut buffers).await.unwrap();
        assert!(f2.iter().all(|b| *b == 2));
        assert_eq!(
            f2.as_ptr(),
            at1,
            "the small frame's allocation took the large frame"
        );
        drop(f0);
    }
}
