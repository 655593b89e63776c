//! One client connection: requests are read and handled concurrently (pipelining), responses
//! leave in request order.
//!
//! A reader task decodes frames into a bounded channel (so a slow handler applies backpressure
//! to the socket); the connection loop starts a handler future per request and writes the
//! completed ones in order. Requests Kafka answers by closing the connection (unknown API keys,
//! unsupported versions other than ApiVersions', malformed or oversized frames) stop the reading;
//! the responses already owed are still written, then the connection closes.
//!
//! What a client can make the broker hold is bounded across all connections ([`RequestLimits`]):
//! before a request's body is read (and allocated), the reader takes its size from the byte
//! budget `queued.max.request.bytes`, held until the request is decoded and taken by a handler
//! (for a produce request, whose records are views into that buffer, until its handler has
//! finished), and a slot from `queued.max.requests`, held until a handler takes the request. When either runs out, connections stop reading and TCP
//! pushes back on the clients. A connection with nothing in flight that sends no request for
//! `connections.max.idle.ms` is closed.
//!
//! Each request's frame size and queue time (waiting for the budgets, then, once read, for a
//! handler) and each response's size go to the handler (`Handler::request_taken`, `response_written`): the
//! broker's request metrics.
//!
//! On a SASL listener each request read goes first through the connection's SASL state
//! (`sasl_session`), in order: the exchange's own requests are answered there, a refusal is
//! answered after its delay and closes the connection, and every other request runs as the
//! principal in force when it was read.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::stream::{FuturesOrdered, StreamExt};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, RequestKind, ResponseKind};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt, BufReader};
use tokio::net::TcpStream;
use tokio::sync::{mpsc, watch, OwnedSemaphorePermit, Semaphore};
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::api;
use crate::frame::{decode_request, encode_response, read_frame_body, read_frame_size, FrameError};
use crate::sasl_session::{illegal_sasl_state, SaslSession, SaslSetup, SaslStep};
use crate::security::{KafkaPrincipal, SecurityProtocol};
use crate::zero_copy::{write_copying, SendfileCounters, ZeroCopy};

/// Requests in flight per connection before the connection stops reading.
pub const MAX_IN_FLIGHT: usize = 64;

/// Limits shared by every connection of the broker.
#[derive(Debug, Clone)]
pub struct RequestLimits {
    /// `socket.request.max.bytes`: larger requests close the connection.
    pub max_request_bytes: usize,
    /// `connections.max.idle.ms`; `None` never closes an idle connection.
    pub idle: Option<Duration>,
    /// `queued.max.requests`: requests read and not yet taken by a handler, all connections.
    queued: Arc<Semaphore>,
    /// `queued.max.request.bytes`: bytes of requests read and not yet handled, all connections,
    /// with the budget's size; `None` is unbounded (-1).
    request_bytes: Option<(Arc<Semaphore>, u32)>,
}

impl RequestLimits {
    /// The limits every connection shares, from the broker's settings.
    pub fn of(c: &crate::config::BrokerConfig) -> RequestLimits {
        RequestLimits::new(
            usize::try_from(c.int("socket.request.max.bytes").max(1)).unwrap_or(usize::MAX),
            c.int("connections.max.idle.ms"),
            usize::try_from(c.int("queued.max.requests")).unwrap_or(1),
            c.int("queued.max.request.bytes"),
        )
    }

    /// Limits from the settings' values (`idle_ms` < 0: never; `request_bytes` < 0: no budget).
    pub fn new(
        max_request_bytes: usize,
        idle_ms: i64,
        queued_requests: usize,
        request_bytes: i64,
    ) -> RequestLimits {
        let request_bytes = u32::try_from(request_bytes)
            .ok()
            .or((request_bytes > u32::MAX as i64).then_some(u32::MAX))
            .map(|n| (Arc::new(Semaphore::new(n as usize)), n));
        RequestLimits {
            max_request_bytes,
            idle: u64::try_from(idle_ms).ok().map(Duration::from_millis),
            queued: Arc::new(Semaphore::new(queued_requests.max(1))),
            request_bytes,
        }
    }

    /// Bytes of the request budget free now (`None`: unbounded).
    pub fn request_bytes_available(&self) -> Option<usize> {
        self.request_bytes
            .as_ref()
            .map(|(s, _)| s.available_permits())
    }

    /// Takes a request's share of the budgets before its body is read. A request larger than
    /// the whole byte budget takes all of it (it is then read alone) rather than waiting forever.
    async fn admit(&self, size: usize) -> Option<Permits> {
        let bytes = match &self.request_bytes {
            Some((budget, total)) => {
                let n = u32::try_from(size).unwrap_or(u32::MAX).min(*total);
                Some(budget.clone().acquire_many_owned(n).await.ok()?)
            }
            None => None,
        };
        let queued = self.queued.clone().acquire_owned().await.ok()?;
        Some(Permits {
            bytes,
            queued: Some(queued),
        })
    }
}

/// A request's share of the broker-wide budgets; dropping it gives them back.
struct Permits {
    bytes: Option<OwnedSemaphorePermit>,
    queued: Option<OwnedSemaphorePermit>,
}

/// The listener a connection came in on and who is at the other end (Kafka's request context
/// carries the same three), and, on a SASL listener, what its login is checked against.
#[derive(Debug, Clone)]
pub struct ConnectionSecurity {
    pub listener_name: Arc<str>,
    pub security_protocol: SecurityProtocol,
    /// The principal TLS gave (or `User:ANONYMOUS`); on a SASL listener, SASL's replaces it.
    pub principal: Arc<KafkaPrincipal>,
    /// SASL_PLAINTEXT and SASL_SSL: the connection authenticates before anything else.
    pub sasl: Option<SaslSetup>,
}

impl ConnectionSecurity {
    /// An unauthenticated connection (`User:ANONYMOUS`) on a PLAINTEXT listener.
    pub fn plaintext(listener_name: &str) -> ConnectionSecurity {
        ConnectionSecurity {
            listener_name: listener_name.into(),
            security_protocol: SecurityProtocol::Plaintext,
            principal: Arc::new(KafkaPrincipal::anonymous()),
            sasl: None,
        }
    }
}

/// Who sent a request.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub api_key: ApiKey,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_id: String,
    pub client_host: String,
    pub connection_id: u64,
    /// The connection's minimum round-trip time, read for Fetch requests on TCP connections
    /// (`None` for other requests, other transports, or when the kernel has no sample).
    pub min_round_trip: Option<std::time::Duration>,
    /// The listener the request came in on (Metadata answers with that listener's endpoints).
    pub listener_name: Arc<str>,
    pub security_protocol: SecurityProtocol,
    /// Who sent it: `User:ANONYMOUS`, or the principal TLS client authentication gave.
    pub principal: Arc<KafkaPrincipal>,
}

/// What a handler answers a request with. (As large as the response it carries, like the
/// `Option<ResponseKind>` it replaced; boxing would cost an allocation per response.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum Reply {
    /// A response to write.
    Respond(ResponseKind),
    /// A fetch response whose record bytes are written from the segment files.
    Fetch(Box<crate::fetch_frame::FetchReply>),
    /// No response (produce with `acks=0`).
    Nothing,
    /// No response, and the connection closes once the responses owed before it are written
    /// (Kafka's answer to an `acks=0` produce that failed, so the client refreshes metadata).
    Close,
}

impl From<Option<ResponseKind>> for Reply {
    fn from(r: Option<ResponseKind>) -> Reply {
        r.map_or(Reply::Nothing, Reply::Respond)
    }
}

/// Answers decoded requests.
pub trait Handler: Send + Sync + 'static {
    fn handle(
        self: Arc<Self>,
        ctx: RequestContext,
        request: RequestKind,
    ) -> impl Future<Output = Reply> + Send;

    /// How long to stop reading from `connection_id` now that a response was written: a client
    /// quota's throttle (KIP-219: the response goes out at once, then the channel is muted).
    fn throttle_after_response(&self, _connection_id: u64) -> Option<Duration> {
        None
    }

    /// A request is taken from the connection's queue: its frame was `bytes` long (with the
    /// size field) and it waited `queued` in all for the budgets and then, once read, for a
    /// handler (Kafka's request queue time); `follower` for a Fetch from a follower replica
    /// ([`from_follower`]).
    fn request_taken(&self, _api_key: ApiKey, _follower: bool, _bytes: usize, _queued: Duration) {}

    /// A response frame of `bytes` (with the size field) was written for a request of
    /// `api_key`.
    fn response_written(&self, _api_key: ApiKey, _follower: bool, _bytes: usize) {}
}

/// Whether `request` is a Fetch from a follower replica (a replica id of 0 or more, in the
/// field of its version), which Kafka's request metrics count as FetchFollower.
pub fn from_follower(request: &RequestKind) -> bool {
    match request {
        RequestKind::Fetch(r) => r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0,
        _ => false,
    }
}

/// When a request was read and how long it waited for the request budgets before its body
/// was read: its queue time, until a handler takes it, is both.
struct Arrival {
    bytes: usize,
    admitted_after: Duration,
    read_at: Instant,
}

enum Incoming {
    Request(Box<crate::frame::Request>, Permits, Arrival),
    /// An ApiVersions request at a version we do not support: answered with v0 and the
    /// versions we do (KIP-511).
    UnsupportedApiVersions {
        correlation_id: i32,
    },
}

/// Serves one plain TCP connection until the peer closes it, it sends something that closes
/// it, it stays idle too long, or `shutdown` fires. Its `sendfile` bytes are counted in
/// `sendfile`.
#[allow(clippy::too_many_arguments)]
pub async fn serve<H: Handler>(
    stream: TcpStream,
    security: ConnectionSecurity,
    peer: SocketAddr,
    connection_id: u64,
    handler: Arc<H>,
    limits: RequestLimits,
    shutdown: watch::Receiver<bool>,
    sendfile: SendfileCounters,
) {
    let _ = stream.set_nodelay(true);
    let zero_copy = ZeroCopy::new(&stream, sendfile);
    let (rd, wr) = stream.into_split();
    serve_conn(
        rd,
        wr,
        zero_copy,
        security,
        peer,
        connection_id,
        handler,
        limits,
        shutdown,
    )
    .await;
}

/// Serves one connection of a PLAINTEXT listener given as its two halves (a TCP stream's, or
/// an in-memory pipe's in tests).
pub async fn serve_io<R, W, H>(
    rd: R,
    wr: W,
    peer: SocketAddr,
    connection_id: u64,
    handler: Arc<H>,
    limits: RequestLimits,
    shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send,
    H: Handler,
{
    let security = ConnectionSecurity::plaintext("PLAINTEXT");
    serve_io_as(
        rd,
        wr,
        security,
        peer,
        connection_id,
        handler,
        limits,
        shutdown,
    )
    .await;
}

/// Serves one connection given as its two halves (a TLS stream's), as `security` says who it
/// is. Fetch responses are copied (no `sendfile` through TLS).
#[allow(clippy::too_many_arguments)]
pub async fn serve_io_as<R, W, H>(
    rd: R,
    wr: W,
    security: ConnectionSecurity,
    peer: SocketAddr,
    connection_id: u64,
    handler: Arc<H>,
    limits: RequestLimits,
    shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send,
    H: Handler,
{
    serve_conn(
        rd,
        wr,
        None,
        security,
        peer,
        connection_id,
        handler,
        limits,
        shutdown,
    )
    .await;
}

/// A request's answer once its handler is done: the API key, version and correlation id its
/// response frame is encoded with, the reply, and whether the request was a follower's Fetch
/// (for the response's metrics).
type Done = (ApiKey, i16, i32, Reply, bool);

/// A request being handled; the connection writes the answers in the order they were pushed.
type PendingReply = Pin<Box<dyn Future<Output = Done> + Send>>;

/// Serves a connection; with `zero_copy`, fetch responses' record bytes go from the segment
/// files to the socket by `sendfile` (`wr` must then be that socket's write half).
#[allow(clippy::too_many_arguments)]
async fn serve_conn<R, W, H>(
    rd: R,
    wr: W,
    zero_copy: Option<ZeroCopy>,
    security: ConnectionSecurity,
    peer: SocketAddr,
    connection_id: u64,
    handler: Arc<H>,
    limits: RequestLimits,
    mut shutdown: watch::Receiver<bool>,
) where
    R: AsyncRead + Unpin + Send + 'static,
    W: AsyncWrite + Unpin + Send,
    H: Handler,
{
    let (tx, mut rx) = mpsc::channel::<Incoming>(MAX_IN_FLIGHT);
    let idle = limits.idle;
    let reader = crate::runtime::spawn(read_requests(rd, limits, peer, connection_id, tx));
    let mut pipeline = Pipeline {
        handler,
        client_host: peer.ip().to_string(),
        connection_id,
        sasl: security.sasl.clone().map(SaslSession::new),
        security,
    };
    let mut writer = ResponseWriter {
        wr,
        zero_copy,
        copy_buf: Vec::new(),
        peer,
        connection_id,
    };
    let mut pending: FuturesOrdered<PendingReply> = FuturesOrdered::new();
    let mut reading = true;
    let mut last_active = Instant::now();
    // Reading stops until then: a client quota's throttle (KIP-219).
    let mut muted_until = Instant::now();
    // Once throttled, one request at a time, as Kafka serves every connection: pipelined
    // requests would each be admitted before the first one's throttle mutes the connection,
    // overdrawing the quota by a whole client queue per throttle.
    let mut in_flight = MAX_IN_FLIGHT;
    // Far enough never to fire when idle connections are kept. A muted connection is not idle:
    // its silence counts from the end of the mute.
    let idle_after = idle.unwrap_or(Duration::from_secs(100 * 365 * 86_400));
    while reading || !pending.is_empty() {
        tokio::select! {
            incoming = rx.recv(), if reading && pending.len() < in_flight && muted_until <= Instant::now() => {
                last_active = Instant::now();
                match incoming {
                    Some(incoming) => {
                        pipeline.start(incoming, writer.zero_copy.as_ref(), &mut pending);
                    }
                    None => reading = false,
                }
            }
            Some(done) = pending.next(), if !pending.is_empty() => {
                last_active = Instant::now();
                let (api_key, follower) = (done.0, done.4);
                match writer.write_reply(done).await {
                    None => break,
                    Some(0) => {}
                    Some(n) => pipeline.handler.response_written(api_key, follower, n),
                }
                if let Some(t) = pipeline.handler.throttle_after_response(connection_id) {
                    muted_until = muted_until.max(Instant::now() + t);
                    in_flight = 1;
                }
            }
            _ = tokio::time::sleep_until(muted_until), if muted_until > Instant::now() => {}
            _ = tokio::time::sleep_until(last_active.max(muted_until) + idle_after), if idle.is_some() && pending.is_empty() => {
                info!(%peer, connection_id, idle_ms = idle_after.as_millis() as u64, "closing idle connection (connections.max.idle.ms)");
                break;
            }
            _ = shutdown.changed() => {
                reading = false;
            }
        }
    }
    reader.abort();
    let _ = writer.wr.shutdown().await;
}

/// The reader task: decodes frames into `tx` until the peer closes the connection, sends
/// something that closes it, or the connection loop stops taking them.
async fn read_requests<R: AsyncRead + Unpin>(
    rd: R,
    limits: RequestLimits,
    peer: SocketAddr,
    connection_id: u64,
    tx: mpsc::Sender<Incoming>,
) {
    let mut rd = BufReader::with_capacity(64 * 1024, rd);
    while let Some(incoming) = read_request(&mut rd, &limits, peer, connection_id).await {
        if tx.send(incoming).await.is_err() {
            return;
        }
    }
}

/// Reads and decodes one request; `None` when reading stops (the peer closed the connection,
/// or the frame closes it).
async fn read_request<R: AsyncRead + Unpin>(
    rd: &mut BufReader<R>,
    limits: &RequestLimits,
    peer: SocketAddr,
    connection_id: u64,
) -> Option<Incoming> {
    let size = match read_frame_size(rd, limits.max_request_bytes).await {
        Ok(size) => size?,
        // A peer that went away abruptly (a killed client or broker resets its connections)
        // is routine, as a clean close is; a frame this broker refuses is worth a warning.
        Err(FrameError::Io(e)) if peer_went_away(&e) => {
            debug!(%peer, connection_id, error = %e, "closing connection: the peer went away");
            return None;
        }
        Err(e) => {
            warn!(%peer, connection_id, error = %e, "closing connection");
            return None;
        }
    };
    // The budgets are taken before the body is allocated: under pressure the connection stops
    // reading and TCP pushes back.
    let waiting = Instant::now();
    let permits = limits.admit(size).await?;
    let admitted_after = waiting.elapsed();
    let frame = match read_frame_body(rd, size).await {
        Ok(f) => f,
        Err(e) => {
            debug!(%peer, connection_id, error = %e, "connection closed mid-request");
            return None;
        }
    };
    let arrival = Arrival {
        bytes: size + 4,
        admitted_after,
        read_at: Instant::now(),
    };
    match decode_request(frame) {
        Ok(r) => Some(Incoming::Request(Box::new(r), permits, arrival)),
        Err(FrameError::UnsupportedVersion {
            api: ApiKey::ApiVersions,
            correlation_id,
            ..
        }) => Some(Incoming::UnsupportedApiVersions { correlation_id }),
        Err(e) => {
            warn!(%peer, connection_id, error = %e, "closing connection");
            None
        }
    }
}

/// Starts a handler future per request read, so that requests of one connection are handled
/// concurrently.
struct Pipeline<H> {
    handler: Arc<H>,
    client_host: String,
    connection_id: u64,
    security: ConnectionSecurity,
    /// The connection's SASL state, on a SASL listener.
    sasl: Option<SaslSession>,
}

/// An answer that is ready.
fn ready(done: Done) -> PendingReply {
    Box::pin(async move { done })
}

impl<H: Handler> Pipeline<H> {
    /// Queues the answer(s) to `incoming` on `pending`. `zero_copy` is the connection's socket,
    /// if it has one (Fetch requests read its round-trip time).
    fn start(
        &mut self,
        incoming: Incoming,
        zero_copy: Option<&ZeroCopy>,
        pending: &mut FuturesOrdered<PendingReply>,
    ) {
        let (req, mut permits, arrival) = match incoming {
            Incoming::Request(req, permits, arrival) => (req, permits, arrival),
            Incoming::UnsupportedApiVersions { correlation_id } => {
                let mut r = ApiVersionsResponse::default();
                r.error_code = kafka_protocol::ResponseError::UnsupportedVersion.code();
                r.api_keys = api::api_versions();
                let reply = Reply::Respond(ResponseKind::ApiVersions(r));
                pending.push_back(ready((
                    ApiKey::ApiVersions,
                    0,
                    correlation_id,
                    reply,
                    false,
                )));
                return;
            }
        };
        let follower = from_follower(&req.body);
        let queued = arrival.admitted_after + arrival.read_at.elapsed();
        self.handler
            .request_taken(req.api_key, follower, arrival.bytes, queued);
        let principal = match self.authenticate(&req, follower) {
            Ok(principal) => principal,
            Err(answers) => {
                answers.into_iter().for_each(|a| pending.push_back(a));
                return;
            }
        };
        // A handler takes it now: it no longer counts as queued. A produce request's records
        // are views into its frame, so its bytes stay counted until the handler is done; any
        // other request's frame is gone once decoded, and a parked request (a fetch waiting
        // max_wait_ms, a join waiting for its group) must not hold the budget.
        permits.queued = None;
        if req.api_key != ApiKey::Produce {
            permits.bytes = None;
        }
        let version = req.header.request_api_version;
        let correlation_id = req.header.correlation_id;
        let api_key = req.api_key;
        let ctx = RequestContext {
            api_key,
            api_version: version,
            correlation_id,
            client_id: req.header.client_id.as_deref().unwrap_or("").to_string(),
            client_host: self.client_host.clone(),
            connection_id: self.connection_id,
            min_round_trip: match (zero_copy, api_key) {
                (Some(z), ApiKey::Fetch) => crate::tcp_info::min_round_trip(z.socket()),
                _ => None,
            },
            listener_name: self.security.listener_name.clone(),
            security_protocol: self.security.security_protocol,
            principal,
        };
        let h = self.handler.clone();
        pending.push_back(Box::pin(async move {
            let response = h.handle(ctx, req.body).await;
            drop(permits);
            (api_key, version, correlation_id, response, follower)
        }));
    }

    /// Who `req` runs as: the principal in force when it was read. `Err` holds the answers
    /// that take its place: a step of the SASL exchange, or a refusal and the close.
    fn authenticate(
        &mut self,
        req: &crate::frame::Request,
        follower: bool,
    ) -> Result<Arc<KafkaPrincipal>, Vec<PendingReply>> {
        let (api_key, version) = (req.api_key, req.header.request_api_version);
        let correlation_id = req.header.correlation_id;
        let Some(session) = &mut self.sasl else {
            return match illegal_sasl_state(api_key) {
                Some(r) => Err(vec![ready((
                    api_key,
                    version,
                    correlation_id,
                    Reply::Respond(r),
                    follower,
                ))]),
                None => Ok(self.security.principal.clone()),
            };
        };
        match session.on_request(api_key, version, &req.body, Instant::now()) {
            SaslStep::Handle(principal) => Ok(principal),
            SaslStep::Respond(r) => Err(vec![ready((
                api_key,
                version,
                correlation_id,
                Reply::Respond(r),
                follower,
            ))]),
            SaslStep::Close {
                response,
                delay,
                reason,
            } => {
                info!(peer = %self.client_host, connection_id = self.connection_id, listener = %self.security.listener_name, %reason, "closing connection: SASL authentication failed or expired");
                let reply = response.map_or(Reply::Close, Reply::Respond);
                // The wait is this connection's own: other connections are served meanwhile.
                let answer: PendingReply = Box::pin(async move {
                    tokio::time::sleep(delay).await;
                    (api_key, version, correlation_id, reply, follower)
                });
                Err(vec![
                    answer,
                    ready((api_key, version, correlation_id, Reply::Close, follower)),
                ])
            }
        }
    }
}

/// Writes the answers, in request order.
struct ResponseWriter<W> {
    wr: W,
    /// The socket, when fetch responses' record bytes can go from the files by `sendfile`.
    zero_copy: Option<ZeroCopy>,
    /// The buffer fetch responses' records are read into when they cannot be sent from the
    /// file: one per connection, reused.
    copy_buf: Vec<u8>,
    peer: SocketAddr,
    connection_id: u64,
}

impl<W: AsyncWrite + Unpin + Send> ResponseWriter<W> {
    /// Writes one request's answer: the bytes written (0 for no response), or `None` when the
    /// connection closes.
    async fn write_reply(
        &mut self,
        (api_key, version, correlation_id, reply, _): Done,
    ) -> Option<usize> {
        let (peer, connection_id) = (self.peer, self.connection_id);
        let response = match reply {
            Reply::Respond(r) => r,
            Reply::Fetch(f) => return self.write_fetch(api_key, version, correlation_id, &f).await,
            Reply::Nothing => return Some(0),
            Reply::Close => {
                debug!(%peer, connection_id, api = ?api_key, "closing connection after a failed request without response");
                return None;
            }
        };
        match encode_response(api_key, version, correlation_id, &response) {
            Ok(bytes) => {
                let n = bytes.len();
                match write(&mut self.wr, bytes).await {
                    Ok(()) => Some(n),
                    Err(e) => {
                        debug!(%peer, connection_id, error = %e, "write failed");
                        None
                    }
                }
            }
            Err(e) => {
                warn!(%peer, connection_id, api = ?api_key, version, error = %e, "closing connection");
                None
            }
        }
    }

    /// Writes a fetch response, its record bytes from the segment files: the bytes written, or
    /// `None` when the connection closes.
    async fn write_fetch(
        &mut self,
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
        reply: &crate::fetch_frame::FetchReply,
    ) -> Option<usize> {
        let (peer, connection_id) = (self.peer, self.connection_id);
        let chunks = match crate::fetch_frame::frame(version, correlation_id, reply) {
            Ok(c) => c,
            Err(e) => {
                warn!(%peer, connection_id, api = ?api_key, version, error = %e, "closing connection");
                return None;
            }
        };
        let size = chunks.iter().map(crate::fetch_frame::Chunk::len).sum();
        let written = match &self.zero_copy {
            Some(z) => z.write(chunks).await,
            None => {
                let buf = std::mem::take(&mut self.copy_buf);
                write_copying(&mut self.wr, chunks, buf)
                    .await
                    .map(|buf| self.copy_buf = buf)
            }
        };
        let Err(e) = written else { return Some(size) };
        // A segment truncated under the fetch ends here too: the frame cannot be finished, so
        // the connection closes.
        if peer_went_away(&e) {
            debug!(%peer, connection_id, error = %e, "fetch response write failed: the client went away");
        } else {
            warn!(%peer, connection_id, error = %e, "fetch response write failed; closing connection");
        }
        None
    }
}

async fn write<W: AsyncWrite + Unpin>(wr: &mut W, bytes: Bytes) -> std::io::Result<()> {
    wr.write_all(&bytes).await
}

/// Whether a read or write failed because the client closed or reset its end (a normal event: a
/// consumer that stopped, a broker shutting down or killed), not because of this broker.
fn peer_went_away(e: &std::io::Error) -> bool {
    use std::io::ErrorKind::{BrokenPipe, ConnectionAborted, ConnectionReset};
    matches!(e.kind(), BrokenPipe | ConnectionReset | ConnectionAborted)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};
    use tokio::io::{AsyncReadExt, DuplexStream};

    /// Answers every request with an empty ApiVersions response once `gate` lets it.
    struct Gated {
        gate: Semaphore,
        handled: AtomicUsize,
    }

    impl Handler for Gated {
        async fn handle(self: Arc<Self>, _ctx: RequestContext, _request: RequestKind) -> Reply {
            self.handled.fetch_add(1, Ordering::SeqCst);
            self.gate.acquire().await.expect("open").forget();
            Reply::Respond(ResponseKind::ApiVersions(ApiVersionsResponse::default()))
        }
    }

    /// ApiVersions v0 with a null client id: a 10-byte frame body.
    fn api_versions_frame(correlation_id: i32) -> Vec<u8> {
        let mut f = 10i32.to_be_bytes().to_vec();
        f.extend_from_slice(&18i16.to_be_bytes());
        f.extend_from_slice(&0i16.to_be_bytes());
        f.extend_from_slice(&correlation_id.to_be_bytes());
        f.extend_from_slice(&(-1i16).to_be_bytes());
        f
    }

    async fn response_correlation(client: &mut DuplexStream) -> std::io::Result<i32> {
        let size = client.read_i32().await?;
        let mut body = vec![0u8; size as usize];
        client.read_exact(&mut body).await?;
        Ok(i32::from_be_bytes([body[0], body[1], body[2], body[3]]))
    }

    fn start(
        handler: Arc<Gated>,
        limits: RequestLimits,
    ) -> (
        DuplexStream,
        tokio::task::JoinHandle<()>,
        watch::Sender<bool>,
    ) {
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (rd, wr) = tokio::io::split(server);
        let (tx, rx) = watch::channel(false);
        let peer: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        let task = crate::runtime::spawn(serve_io(rd, wr, peer, 7, handler, limits, rx));
        (client, task, tx)
    }

    fn open_gate() -> Arc<Gated> {
        Arc::new(Gated {
            gate: Semaphore::new(Semaphore::MAX_PERMITS),
            handled: AtomicUsize::new(0),
        })
    }

    #[tokio::test(start_paused = true)]
    async fn idle_connection_closes_after_connections_max_idle_ms_of_silence() {
        let limits = RequestLimits::new(1 << 20, 1_000, 10, -1);
        let (mut client, task, _shutdown) = start(open_gate(), limits);
        client
            .write_all(&api_versions_frame(1))
            .await
            .expect("write");
        assert_eq!(response_correlation(&mut client).await.expect("answer"), 1);
        // A request before the limit keeps the connection open and restarts the clock.
        tokio::time::sleep(Duration::from_millis(700)).await;
        client
            .write_all(&api_versions_frame(2))
            .await
            .expect("write");
        assert_eq!(response_correlation(&mut client).await.expect("answer"), 2);
        let last = Instant::now();
        let mut rest = Vec::new();
        let n = client.read_to_end(&mut rest).await.expect("clean close");
        assert_eq!(n, 0, "nothing but the close");
        let silent = Instant::now() - last;
        assert!(
            silent >= Duration::from_millis(1_000) && silent < Duration::from_millis(1_100),
            "closed after {silent:?} of silence"
        );
        task.await.expect("connection task ends");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_a_request_in_flight_is_not_idle() {
        let handler = Arc::new(Gated {
            gate: Semaphore::new(0),
            handled: AtomicUsize::new(0),
        });
        let limits = RequestLimits::new(1 << 20, 1_000, 10, -1);
        let (mut client, _task, _shutdown) = start(handler.clone(), limits);
        client
            .write_all(&api_versions_frame(1))
            .await
            .expect("write");
        tokio::time::sleep(Duration::from_millis(5_000)).await;
        handler.gate.add_permits(1);
        assert_eq!(
            response_correlation(&mut client).await.expect("answered"),
            1
        );
    }

    /// [`Gated`] whose every response carries a quota throttle of one second.
    struct Throttling(Arc<Gated>);

    impl Handler for Throttling {
        async fn handle(self: Arc<Self>, ctx: RequestContext, request: RequestKind) -> Reply {
            self.0.clone().handle(ctx, request).await
        }

        fn throttle_after_response(&self, _connection_id: u64) -> Option<Duration> {
            Some(Duration::from_secs(1))
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_throttled_connection_is_muted_then_served_one_request_at_a_time() {
        let gated = Arc::new(Gated {
            gate: Semaphore::new(0),
            handled: AtomicUsize::new(0),
        });
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        let (rd, wr) = tokio::io::split(server);
        let (_shutdown, rx) = watch::channel(false);
        let limits = RequestLimits::new(1 << 20, 1_000, 10, -1);
        let handler = Arc::new(Throttling(gated.clone()));
        let peer: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        crate::runtime::spawn(serve_io(rd, wr, peer, 7, handler, limits, rx));
        let frames: Vec<u8> = (1..=5).flat_map(api_versions_frame).collect();
        client.write_all(&frames).await.expect("write");
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            gated.handled.load(Ordering::SeqCst),
            5,
            "pipelined until throttled"
        );
        gated.gate.add_permits(5);
        for id in 1..=5 {
            assert_eq!(response_correlation(&mut client).await.expect("answer"), id);
        }
        let frames: Vec<u8> = (6..=8).flat_map(api_versions_frame).collect();
        client.write_all(&frames).await.expect("write");
        tokio::time::sleep(Duration::from_millis(990)).await;
        assert_eq!(
            gated.handled.load(Ordering::SeqCst),
            5,
            "muted for the throttle"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
        assert_eq!(
            gated.handled.load(Ordering::SeqCst),
            6,
            "then one request at a time"
        );
        gated.gate.add_permits(3);
        assert_eq!(response_correlation(&mut client).await.expect("answer"), 6);
        let answered = Instant::now();
        assert_eq!(response_correlation(&mut client).await.expect("answer"), 7);
        assert!(
            Instant::now() - answered >= Duration::from_secs(1),
            "muted between them"
        );
    }

    /// A Produce v3 request with `n` bytes of (unchecked) records, as the connection sees it.
    fn produce_frame(correlation_id: i32, n: usize) -> Vec<u8> {
        use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
        use kafka_protocol::messages::{ProduceRequest, RequestHeader, TopicName};
        use kafka_protocol::protocol::{Encodable, StrBytes};
        let mut header = RequestHeader::default();
        header.request_api_key = ApiKey::Produce as i16;
        header.request_api_version = 3;
        header.correlation_id = correlation_id;
        let mut part = PartitionProduceData::default();
        part.records = Some(Bytes::from(vec![0u8; n]));
        let mut topic = TopicProduceData::default();
        topic.name = TopicName(StrBytes::from_static_str("t"));
        topic.partition_data = vec![part];
        let mut body = ProduceRequest::default();
        body.acks = 1;
        body.topic_data = vec![topic];
        let mut buf = bytes::BytesMut::new();
        header.encode(&mut buf, 1).expect("header");
        body.encode(&mut buf, 3).expect("body");
        let mut f = (buf.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(&buf);
        f
    }

    #[tokio::test(start_paused = true)]
    async fn produce_bytes_count_until_appended_and_stop_reading_when_over_budget() {
        let handler = Arc::new(Gated {
            gate: Semaphore::new(0),
            handled: AtomicUsize::new(0),
        });
        let size = produce_frame(1, 1000).len() - 4;
        // Room for two of these produce requests, not three.
        let budget = (2 * size + size / 2) as i64;
        let limits = RequestLimits::new(1 << 20, -1, 100, budget);
        let (mut client, _task, _shutdown) = start(handler.clone(), limits.clone());
        for id in 1..=3 {
            client
                .write_all(&produce_frame(id, 1000))
                .await
                .expect("write");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            handler.handled.load(Ordering::SeqCst),
            2,
            "the third is not read"
        );
        // The third request has taken what is left and waits for the rest.
        assert_eq!(limits.request_bytes_available(), Some(0));
        handler.gate.add_permits(3);
        for id in 1..=3 {
            assert_eq!(response_correlation(&mut client).await.expect("answer"), id);
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(handler.handled.load(Ordering::SeqCst), 3);
        assert_eq!(
            limits.request_bytes_available(),
            Some(budget as usize),
            "all given back"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn parked_requests_other_than_produce_do_not_hold_the_byte_budget() {
        let handler = Arc::new(Gated {
            gate: Semaphore::new(0),
            handled: AtomicUsize::new(0),
        });
        // Room for two 10-byte requests at a time.
        let limits = RequestLimits::new(1 << 20, -1, 100, 25);
        let (mut client, _task, _shutdown) = start(handler.clone(), limits.clone());
        for id in 1..=10 {
            client
                .write_all(&api_versions_frame(id))
                .await
                .expect("write");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
        assert_eq!(
            handler.handled.load(Ordering::SeqCst),
            10,
            "all read while parked"
        );
        assert_eq!(limits.request_bytes_available(), Some(25));
        handler.gate.add_permits(10);
        for id in 1..=10 {
            assert_eq!(response_correlation(&mut client).await.expect("answer"), id);
        }
    }

    #[tokio::test(start_paused = true)]
    async fn one_queue_slot_for_all_connections_still_serves_them_all() {
        let handler = Arc::new(Gated {
            gate: Semaphore::new(Semaphore::MAX_PERMITS),
            handled: AtomicUsize::new(0),
        });
        let limits = RequestLimits::new(1 << 20, -1, 1, -1);
        // One queued request at most: two connections still get every answer, in turn.
        let (mut a, _ta, _sa) = start(handler.clone(), limits.clone());
        let (mut b, _tb, _sb) = start(handler.clone(), limits.clone());
        for id in 1..=5 {
            a.write_all(&api_versions_frame(id)).await.expect("write");
            b.write_all(&api_versions_frame(100 + id))
                .await
                .expect("write");
        }
        for id in 1..=5 {
            assert_eq!(response_correlation(&mut a).await.expect("a"), id);
            assert_eq!(response_correlation(&mut b).await.expect("b"), 100 + id);
        }
    }

    /// Answers with an empty ApiVersions response, keeping who sent each request.
    #[derive(Default)]
    struct Recording(std::sync::Mutex<Vec<(String, SecurityProtocol, String)>>);

    impl Handler for Recording {
        async fn handle(self: Arc<Self>, ctx: RequestContext, _request: RequestKind) -> Reply {
            let seen = (
                ctx.listener_name.to_string(),
                ctx.security_protocol,
                ctx.principal.to_string(),
            );
            self.0.lock().expect("lock").push(seen);
            Reply::Respond(ResponseKind::ApiVersions(ApiVersionsResponse::default()))
        }
    }

    #[tokio::test]
    async fn handlers_see_the_listener_and_principal_of_the_connection() {
        let handler = Arc::new(Recording::default());
        let peer: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        let limits = RequestLimits::new(1 << 20, -1, 10, -1);
        let (_tx, rx) = watch::channel(false);
        let security = ConnectionSecurity {
            listener_name: "SSL".into(),
            security_protocol: SecurityProtocol::Ssl,
            principal: Arc::new(KafkaPrincipal::user("CN=alice")),
            sasl: None,
        };
        let (mut tls_client, server) = tokio::io::duplex(64 * 1024);
        let (rd, wr) = tokio::io::split(server);
        let h = handler.clone();
        let (lim, sd) = (limits.clone(), rx.clone());
        crate::runtime::spawn(serve_io_as(rd, wr, security, peer, 1, h, lim, sd));
        let (mut plain_client, server) = tokio::io::duplex(64 * 1024);
        let (rd, wr) = tokio::io::split(server);
        crate::runtime::spawn(serve_io(rd, wr, peer, 2, handler.clone(), limits, rx));
        for client in [&mut tls_client, &mut plain_client] {
            client
                .write_all(&api_versions_frame(1))
                .await
                .expect("write");
            assert_eq!(response_correlation(client).await.expect("answer"), 1);
        }
        let seen = handler.0.lock().expect("lock").clone();
        assert_eq!(
            seen,
            vec![
                ("SSL".into(), SecurityProtocol::Ssl, "User:CN=alice".into()),
                (
                    "PLAINTEXT".into(),
                    SecurityProtocol::Plaintext,
                    "User:ANONYMOUS".into()
                ),
            ]
        );
    }

    /// A request frame of `body` (header v1 or v2 as the API version needs).
    fn frame_of<B: kafka_protocol::protocol::Encodable>(
        api_key: ApiKey,
        version: i16,
        correlation_id: i32,
        body: &B,
    ) -> Vec<u8> {
        use kafka_protocol::messages::RequestHeader;
        use kafka_protocol::protocol::Encodable;
        let mut header = RequestHeader::default();
        header.request_api_key = api_key as i16;
        header.request_api_version = version;
        header.correlation_id = correlation_id;
        let mut buf = bytes::BytesMut::new();
        header
            .encode(&mut buf, api_key.request_header_version(version))
            .expect("header");
        body.encode(&mut buf, version).expect("body");
        let mut f = (buf.len() as i32).to_be_bytes().to_vec();
        f.extend_from_slice(&buf);
        f
    }

    /// A PLAIN listener's connection (users: alice), failed logins answered after 100 ms.
    fn start_sasl(handler: Arc<Gated>) -> DuplexStream {
        use crate::sasl_config::{SaslListener, SaslMechanism};
        use crate::sasl_session::ScramCredentialSource;
        struct NoScram;
        impl ScramCredentialSource for NoScram {
            fn scram_credential(
                &self,
                _: &str,
                _: gregor_sasl::ScramMechanism,
            ) -> Option<gregor_sasl::ScramCredential> {
                None
            }
        }
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;
        let listener = SaslListener {
            mechanisms: vec![SaslMechanism::Plain],
            plain_users: Some(gregor_sasl::PlainUsers::from_jaas(jaas).expect("jaas")),
            max_reauth: None,
            failed_authentication_delay: Duration::from_millis(100),
            oauthbearer: None,
        };
        let security = ConnectionSecurity {
            listener_name: "SASL_PLAINTEXT".into(),
            security_protocol: SecurityProtocol::SaslPlaintext,
            principal: Arc::new(KafkaPrincipal::anonymous()),
            sasl: Some(SaslSetup {
                listener: Arc::new(listener),
                credentials: Arc::new(NoScram),
            }),
        };
        let (client, server) = tokio::io::duplex(64 * 1024);
        let (rd, wr) = tokio::io::split(server);
        let (tx, rx) = watch::channel(false);
        let peer: SocketAddr = "127.0.0.1:40000".parse().expect("addr");
        let limits = RequestLimits::new(1 << 20, -1, 10, -1);
        crate::runtime::spawn(async move {
            // The connection runs until the client closes it, not until a shutdown.
            let _keep_open = tx;
            serve_io_as(rd, wr, security, peer, 3, handler, limits, rx).await
        });
        client
    }

    fn sasl_frames(password: &str) -> Vec<u8> {
        use kafka_protocol::messages::{SaslAuthenticateRequest, SaslHandshakeRequest};
        let mut handshake = SaslHandshakeRequest::default();
        handshake.mechanism = kafka_protocol::protocol::StrBytes::from_static_str("PLAIN");
        let mut token = SaslAuthenticateRequest::default();
        token.auth_bytes = Bytes::from(format!("\0alice\0{password}").into_bytes());
        let mut f = frame_of(ApiKey::SaslHandshake, 1, 1, &handshake);
        f.extend(frame_of(ApiKey::SaslAuthenticate, 2, 2, &token));
        f
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_sasl_login_is_answered_after_the_delay_without_holding_up_others() {
        let handler = open_gate();
        let mut failing = start_sasl(handler.clone());
        let mut other = start_sasl(handler.clone());
        let started = Instant::now();
        failing
            .write_all(&sasl_frames("wrong"))
            .await
            .expect("write");
        assert_eq!(
            response_correlation(&mut failing).await.expect("handshake"),
            1
        );
        // Meanwhile another connection logs in and is served at once.
        other
            .write_all(&sasl_frames("alice-secret"))
            .await
            .expect("write");
        other
            .write_all(&api_versions_frame(3))
            .await
            .expect("write");
        for id in 1..=3 {
            assert_eq!(response_correlation(&mut other).await.expect("served"), id);
        }
        assert!(Instant::now() - started < Duration::from_millis(100));
        assert_eq!(
            response_correlation(&mut failing).await.expect("refusal"),
            2
        );
        assert!(Instant::now() - started >= Duration::from_millis(100));
        let mut rest = Vec::new();
        assert_eq!(failing.read_to_end(&mut rest).await.expect("closed"), 0);
        // Only the other connection's ApiVersions, after its login, reached the broker.
        assert_eq!(handler.handled.load(Ordering::SeqCst), 1);
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_before_sasl_authentication_closes_the_connection() {
        let handler = open_gate();
        let mut client = start_sasl(handler.clone());
        let produce = produce_frame(5, 10);
        client.write_all(&produce).await.expect("write");
        let mut rest = Vec::new();
        assert_eq!(
            client.read_to_end(&mut rest).await.expect("closed"),
            0,
            "no answer"
        );
        assert_eq!(handler.handled.load(Ordering::SeqCst), 0, "never handled");
    }

    #[tokio::test]
    async fn a_request_larger_than_the_whole_budget_is_read_alone() {
        let limits = RequestLimits::new(1 << 20, -1, 10, 4);
        let (mut client, _task, _shutdown) = start(open_gate(), limits);
        client
            .write_all(&api_versions_frame(9))
            .await
            .expect("write");
        assert_eq!(response_correlation(&mut client).await.expect("answer"), 9);
    }
}
