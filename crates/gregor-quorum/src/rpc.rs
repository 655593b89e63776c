//! The controller RPC: one length-prefixed protocol on the `CONTROLLER` listener that carries
//! openraft's messages between voters and Kafka requests forwarded by brokers to the active
//! controller (Kafka's request forwarding, KIP-590, without the envelope: the body is the Kafka
//! request as the client sent it, at the client's version).
//!
//! A frame is a 4-byte big-endian length and that many bytes of bincode. Frames over
//! [`crate::MAX_MESSAGE_BYTES`] close the connection before anything is allocated. Requests on
//! one connection are answered in order, one at a time.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use openraft::error::{
    InstallSnapshotError, NetworkError, RPCError, RaftError, RemoteError, Unreachable,
};
use openraft::network::{RPCOption, RaftNetwork, RaftNetworkFactory};
use openraft::raft::{
    AppendEntriesRequest, AppendEntriesResponse, InstallSnapshotRequest, InstallSnapshotResponse,
    VoteRequest, VoteResponse,
};
use openraft::BasicNode;
use serde::{Deserialize, Serialize};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tracing::{debug, info, warn};

pub use crate::metadata_fetch::{MetadataFetch, MetadataUpdate};
use crate::{decode, encode, NodeId, Raft, TypeConfig, MAX_MESSAGE_BYTES};

/// A request on the controller listener.
#[derive(Debug, Serialize, Deserialize)]
#[allow(clippy::large_enum_variant)]
pub enum RpcRequest {
    AppendEntries(AppendEntriesRequest<TypeConfig>),
    Vote(VoteRequest<NodeId>),
    InstallSnapshot(InstallSnapshotRequest<TypeConfig>),
    /// A Kafka request for the active controller (admin requests, broker registration and
    /// heartbeats): API key, version and the request body without its header.
    Kafka {
        api_key: i16,
        api_version: i16,
        body: Vec<u8>,
    },
    /// A broker-only node following the metadata log (Kafka's observers): the committed entries
    /// from index `from` on, waiting up to `max_wait_ms` when there are none yet.
    FetchMetadata {
        from: u64,
        max_wait_ms: u64,
    },
}

/// The answer to a forwarded Kafka request.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct KafkaReply {
    /// The response body (no header), at the request's version.
    pub body: Vec<u8>,
    /// The controller's applied metadata index after handling it: the forwarding broker waits
    /// until its own image has reached it, so what a request created is visible where it was
    /// sent.
    pub applied_index: u64,
}

/// Why a forwarded request was not handled.
#[derive(Debug, Clone, Serialize, Deserialize, thiserror::Error)]
pub enum ForwardError {
    /// This node is not the active controller (the one it knows of, if any).
    #[error("not the active controller (leader: {leader:?})")]
    NotController { leader: Option<NodeId> },
    /// The request is not one a controller handles, or does not decode.
    #[error("{0}")]
    Invalid(String),
}

#[derive(Debug, Serialize, Deserialize)]
pub enum RpcResponse {
    AppendEntries(Result<AppendEntriesResponse<NodeId>, RaftError<NodeId>>),
    Vote(Result<VoteResponse<NodeId>, RaftError<NodeId>>),
    InstallSnapshot(
        Result<InstallSnapshotResponse<NodeId>, RaftError<NodeId, InstallSnapshotError>>,
    ),
    Kafka(Result<KafkaReply, ForwardError>),
    FetchMetadata(Result<MetadataFetch, ForwardError>),
}

/// Handles forwarded Kafka requests (the broker).
pub trait ForwardHandler: Send + Sync + 'static {
    fn handle(
        &self,
        api_key: i16,
        api_version: i16,
        body: Vec<u8>,
    ) -> Pin<Box<dyn Future<Output = Result<KafkaReply, ForwardError>> + Send + '_>>;

    /// The broker whose heartbeat this forwarded request is, if it is one.
    fn heartbeat_of(&self, _api_key: i16, _api_version: i16, _body: &[u8]) -> Option<i32> {
        None
    }

    /// A controller connection on which these brokers heartbeated has closed: perhaps their
    /// process died (the handler may check and act sooner than the session timeout).
    fn connection_closed(&self, _brokers: Vec<i32>) {}
}

/// Writes one frame.
pub async fn write_frame<W: AsyncWrite + Unpin, T: Serialize>(
    w: &mut W,
    value: &T,
) -> io::Result<()> {
    let bytes = encode(value).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
    let len = u32::try_from(bytes.len())
        .ok()
        .filter(|l| u64::from(*l) <= MAX_MESSAGE_BYTES)
        .ok_or_else(|| {
            io::Error::new(io::ErrorKind::InvalidData, "controller RPC frame too large")
        })?;
    w.write_all(&len.to_be_bytes()).await?;
    w.write_all(&bytes).await?;
    w.flush().await
}

/// Reads one frame; `Ok(None)` at a clean end of stream.
pub async fn read_frame<R: AsyncRead + Unpin, T: serde::de::DeserializeOwned>(
    r: &mut R,
) -> io::Result<Option<T>> {
    let Some(buf) = read_raw_frame(r).await? else {
        return Ok(None);
    };
    decode(&buf)
        .map(Some)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

/// Reads one frame's bytes; `Ok(None)` at a clean end of stream.
async fn read_raw_frame<R: AsyncRead + Unpin>(r: &mut R) -> io::Result<Option<Vec<u8>>> {
    let mut len = [0u8; 4];
    match r.read_exact(&mut len).await {
        Ok(_) => {}
        Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok(None),
        Err(e) => return Err(e),
    }
    let len = u32::from_be_bytes(len);
    if u64::from(len) > MAX_MESSAGE_BYTES {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("controller RPC frame of {len} bytes is over the limit"),
        ));
    }
    let mut buf = vec![0u8; len as usize];
    r.read_exact(&mut buf).await?;
    Ok(Some(buf))
}

/// Serves one controller connection until it closes or sends something unreadable (no
/// metadata fetches: see [`serve_controller_connection`]).
pub async fn serve_connection<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    raft: Raft,
    forward: Arc<dyn ForwardHandler>,
) {
    serve(stream, raft, None, forward, None).await
}

/// Serves one controller connection of a voter: Raft, forwarded requests and the metadata
/// fetches of broker-only nodes.
pub async fn serve_controller_connection<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    quorum: crate::QuorumHandle,
    forward: Arc<dyn ForwardHandler>,
) {
    serve_controller_session(stream, quorum, forward, None).await
}

/// [`serve_controller_connection`] for a login whose session ends at `session_end`
/// (`connections.max.reauth.ms`, KIP-368): the connection is closed then, between requests
/// (a request being handled is answered first), and a request read after it is not served.
pub async fn serve_controller_session<S: AsyncRead + AsyncWrite + Unpin>(
    stream: S,
    quorum: crate::QuorumHandle,
    forward: Arc<dyn ForwardHandler>,
    session_end: Option<tokio::time::Instant>,
) {
    let raft = quorum.raft().clone();
    serve(stream, raft, Some(quorum), forward, session_end).await
}

/// The next request on a served connection, or `None` when it is to close: at a clean end of
/// stream, on a frame that does not read, or once the session ends (`session_end`).
pub async fn next_request<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    session_end: Option<tokio::time::Instant>,
) -> Option<RpcRequest> {
    let read = async {
        loop {
            let buf = match read_raw_frame(stream).await {
                Ok(buf) => buf?,
                Err(e) => {
                    debug!(error = %e, "closing controller connection");
                    return None;
                }
            };
            let e = match decode(&buf) {
                Ok(request) => return Some(request),
                Err(e) => e,
            };
            // A Kafka client on the wrong listener: answer its ApiVersions so that it can say
            // so (see kafka_probe); its next request, not a controller RPC either, closes.
            let Some(answer) = crate::kafka_probe::api_versions_answer(&buf) else {
                debug!(error = %e, "closing controller connection");
                return None;
            };
            debug!("a Kafka client's ApiVersions on the controller listener");
            if stream.write_all(&answer).await.is_err() || stream.flush().await.is_err() {
                return None;
            }
        }
    };
    let request = match session_end {
        None => read.await,
        Some(end) => tokio::select! {
            r = read => r,
            // Waiting for a request is the only place a session ends: nothing is half written.
            _ = tokio::time::sleep_until(end) => None,
        },
    };
    if !crate::session::open(session_end, tokio::time::Instant::now()) {
        debug!("closing controller connection: its SASL session ended (connections.max.reauth.ms)");
        return None;
    }
    request
}

async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
    mut stream: S,
    raft: Raft,
    quorum: Option<crate::QuorumHandle>,
    forward: Arc<dyn ForwardHandler>,
    session_end: Option<tokio::time::Instant>,
) {
    let mut heartbeats_from: Vec<i32> = Vec::new();
    while let Some(request) = next_request(&mut stream, session_end).await {
        if let RpcRequest::Kafka {
            api_key,
            api_version,
            body,
        } = &request
        {
            if let Some(b) = forward.heartbeat_of(*api_key, *api_version, body) {
                if !heartbeats_from.contains(&b) {
                    heartbeats_from.push(b);
                }
            }
        }
        let response = match request {
            RpcRequest::AppendEntries(r) => {
                if let Some(q) = &quorum {
                    q.note_leader_contact();
                }
                RpcResponse::AppendEntries(raft.append_entries(r).await)
            }
            RpcRequest::Vote(r) => RpcResponse::Vote(raft.vote(r).await),
            RpcRequest::InstallSnapshot(r) => {
                RpcResponse::InstallSnapshot(raft.install_snapshot(r).await)
            }
            RpcRequest::Kafka {
                api_key,
                api_version,
                body,
            } => RpcResponse::Kafka(forward.handle(api_key, api_version, body).await),
            RpcRequest::FetchMetadata { from, max_wait_ms } => {
                RpcResponse::FetchMetadata(match &quorum {
                    Some(q) => q
                        .fetch_metadata(from, Duration::from_millis(max_wait_ms.min(10_000)))
                        .await
                        .map_err(|e| ForwardError::Invalid(e.to_string())),
                    None => Err(ForwardError::Invalid("no metadata served here".into())),
                })
            }
        };
        if write_frame(&mut stream, &response).await.is_err() {
            break;
        }
    }
    if !heartbeats_from.is_empty() {
        forward.connection_closed(heartbeats_from);
    }
}

/// Opens connections to peers (TCP here; the simulator brings its own network).
pub trait Connector: Clone + Send + Sync + 'static {
    type Stream: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static;
    fn connect(&self, addr: &str) -> impl Future<Output = io::Result<Self::Stream>> + Send;

    /// A connection and how long its login's session lasts when the server gave a lifetime
    /// (KIP-368's `session_lifetime_ms`; `None`: it does not end).
    fn connect_session(
        &self,
        addr: &str,
    ) -> impl Future<Output = io::Result<(Self::Stream, Option<Duration>)>> + Send {
        async move { Ok((self.connect(addr).await?, None)) }
    }
}

/// Plain TCP.
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpConnector;

impl Connector for TcpConnector {
    type Stream = TcpStream;
    async fn connect(&self, addr: &str) -> io::Result<TcpStream> {
        let s = TcpStream::connect(addr).await?;
        s.set_nodelay(true)?;
        Ok(s)
    }
}

/// A client of one peer's controller listener, reconnecting after any failure.
pub struct RpcClient<C: Connector> {
    connector: C,
    addr: String,
    stream: Option<Session<C::Stream>>,
}

impl<C: Connector> RpcClient<C> {
    pub fn new(connector: C, addr: impl Into<String>) -> Self {
        RpcClient {
            connector,
            addr: addr.into(),
            stream: None,
        }
    }

    /// One request and its response within `timeout`. The connection is kept for the next
    /// call only when this one got its response: after a failure, a timeout, or a caller that
    /// stopped waiting (its future dropped mid-call) it is gone, so a late response can never
    /// answer the next request.
    pub async fn call(
        &mut self,
        request: &RpcRequest,
        timeout: Duration,
    ) -> io::Result<RpcResponse> {
        // Taken out for the call, put back only on success: dropping this future mid-way
        // leaves no connection with a response still on its way.
        let mut stream = self.stream.take();
        let result = tokio::time::timeout(
            timeout,
            Self::call_on(&self.connector, &self.addr, &mut stream, request),
        )
        .await;
        match result {
            Ok(Ok(response)) => {
                self.stream = stream;
                Ok(response)
            }
            Ok(Err(e)) => Err(e),
            Err(_) => Err(io::Error::new(
                io::ErrorKind::TimedOut,
                "controller RPC timed out",
            )),
        }
    }

    async fn call_on(
        connector: &C,
        addr: &str,
        stream: &mut Option<Session<C::Stream>>,
        request: &RpcRequest,
    ) -> io::Result<RpcResponse> {
        Session::refresh(stream, connector, addr).await;
        let s = match stream {
            Some(s) => s,
            None => stream.insert(Session::connect(connector, addr).await?),
        };
        write_frame(&mut s.stream, request).await?;
        read_frame(&mut s.stream).await?.ok_or_else(|| {
            io::Error::new(io::ErrorKind::UnexpectedEof, "peer closed the connection")
        })
    }
}

/// A connection to a controller listener and, when its login's session ends
/// (`connections.max.reauth.ms`), what replaces it: a fresh login on a new connection, made
/// in the background while this one serves (see [`crate::session`]).
pub(crate) struct Session<S: Send + 'static> {
    stream: S,
    lifetime: Option<crate::session::Lifetime>,
    /// The fresh login under way.
    renewal: Option<Renewal<S>>,
    /// Fresh logins refused in a row, and when to try again.
    refused: u32,
    retry_at: Option<tokio::time::Instant>,
}

/// A fresh login on its own task; aborted if the session it would replace is dropped first.
struct Renewal<S: Send + 'static>(tokio::task::JoinHandle<io::Result<Session<S>>>);

impl<S: Send + 'static> Drop for Renewal<S> {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Refused fresh logins are told at INFO at most this often (per process).
static REFUSED_RENEWALS: crate::session::Quiet =
    crate::session::Quiet::new(Duration::from_secs(10));

impl<S: Send + 'static> Session<S> {
    /// A new connection, logged in; its session counted from before the login began.
    async fn connect<C: Connector<Stream = S>>(connector: &C, addr: &str) -> io::Result<Self> {
        let started = tokio::time::Instant::now();
        let (stream, lasts) = connector.connect_session(addr).await?;
        Ok(Session {
            stream,
            lifetime: lasts.map(|lasts| crate::session::Lifetime {
                started,
                lasts,
                jitter: crate::session::jitter(),
            }),
            renewal: None,
            refused: 0,
            retry_at: None,
        })
    }

    /// Makes `slot` hold a session fit for the next request, or nothing (a new connection is
    /// then opened): a renewed session replaces the old one once its login is done, which
    /// closes the old connection (idle: requests on a connection go one at a time); a
    /// retired one without a renewal in time is dropped.
    async fn refresh<C: Connector<Stream = S>>(slot: &mut Option<Self>, connector: &C, addr: &str) {
        let Some(s) = slot else { return };
        let now = tokio::time::Instant::now();
        match crate::session::phase(s.lifetime.as_ref(), now) {
            crate::session::Phase::Fresh => {}
            crate::session::Phase::Renew => {
                if let Some(renewed) = s.renewed(connector, addr, now) {
                    *slot = Some(renewed);
                }
            }
            crate::session::Phase::Retired => {
                // A fresh login still under way is waited for rather than started again.
                *slot = match s.renewal.take() {
                    Some(mut r) => match (&mut r.0).await {
                        Ok(Ok(renewed)) => Some(renewed),
                        Ok(Err(e)) => {
                            s.refused_renewal(addr, &e, now);
                            None
                        }
                        Err(_) => None,
                    },
                    None => None,
                };
                if slot.is_none() {
                    debug!(
                        addr,
                        "controller connection retired at the end of its SASL session"
                    );
                }
            }
        }
    }

    /// The renewed session if its login is done; starts the login when none is under way.
    fn renewed<C: Connector<Stream = S>>(
        &mut self,
        connector: &C,
        addr: &str,
        now: tokio::time::Instant,
    ) -> Option<Self> {
        let done = self.renewal.as_ref().is_some_and(|r| r.0.is_finished());
        if done {
            let mut r = self.renewal.take()?;
            // Finished, so this does not wait.
            match finished_output(&mut r.0) {
                Some(Ok(Ok(renewed))) => {
                    debug!(
                        addr,
                        "controller connection renewed with a fresh SASL login"
                    );
                    return Some(renewed);
                }
                Some(Ok(Err(e))) => self.refused_renewal(addr, &e, now),
                _ => self.refused_renewal(addr, &"the login task ended", now),
            }
        }
        let waiting = self.retry_at.is_some_and(|at| now < at);
        if self.renewal.is_none() && !waiting {
            let (connector, addr) = (connector.clone(), addr.to_string());
            self.renewal = Some(Renewal(tokio::spawn(async move {
                Session::connect(&connector, &addr).await
            })));
        }
        None
    }

    fn refused_renewal(
        &mut self,
        addr: &str,
        e: &dyn std::fmt::Display,
        now: tokio::time::Instant,
    ) {
        self.refused = self.refused.saturating_add(1);
        let retry = crate::session::retry_after(self.refused);
        self.retry_at = Some(now + retry);
        let left = self
            .lifetime
            .map(|l| l.retire_at().saturating_duration_since(now));
        match REFUSED_RENEWALS.due(now) {
            Some(held_back) => info!(addr, error = %e, ?retry, session_left = ?left, held_back,
                "fresh controller login refused; retried while the current SASL session lasts"),
            None => debug!(addr, error = %e, ?retry, "fresh controller login refused"),
        }
    }
}

/// The output of a finished task, without waiting.
fn finished_output<T>(
    handle: &mut tokio::task::JoinHandle<T>,
) -> Option<Result<T, tokio::task::JoinError>> {
    let waker = std::task::Waker::noop();
    let mut cx = std::task::Context::from_waker(waker);
    match Pin::new(handle).poll(&mut cx) {
        std::task::Poll::Ready(r) => Some(r),
        std::task::Poll::Pending => None,
    }
}

/// Idle connections to one peer, shared by every openraft client of that peer. openraft makes
/// a new client for each leadership check (every controller write) and each election; without
/// the pool each of those opened a fresh TCP connection, and the TIME_WAIT sockets they left
/// behind used up ephemeral ports.
struct PeerPool<S> {
    idle: std::sync::Mutex<Vec<S>>,
    /// Whether the peer answers, for one line when it goes and one when it is back.
    health: std::sync::Mutex<crate::peer_health::PeerHealth>,
}

/// Idle connections kept per peer: enough for the replication stream plus the leadership checks
/// and votes that overlap it.
const MAX_IDLE_PER_PEER: usize = 4;

impl<S> PeerPool<S> {
    fn take(&self) -> Option<S> {
        self.idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .pop()
    }

    fn put(&self, stream: S) {
        let mut idle = self
            .idle
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if idle.len() < MAX_IDLE_PER_PEER {
            idle.push(stream);
        }
    }
}

type Pools<S> =
    Arc<std::sync::Mutex<std::collections::BTreeMap<(NodeId, String), Arc<PeerPool<Session<S>>>>>>;

/// openraft's network over [`RpcClient`]s. Each node reaches a voter at the address its own
/// `controller.quorum.voters` gives (as Kafka's static voters work), falling back to the address
/// stored in the quorum's membership; so a node may reach its peers through a proxy of its own.
/// Connections to a peer are kept and reused across openraft's clients (see [`PeerPool`]).
#[derive(Clone)]
pub struct Network<C: Connector> {
    connector: C,
    addresses: std::collections::BTreeMap<NodeId, String>,
    pools: Pools<C::Stream>,
}

impl<C: Connector> Network<C> {
    pub fn new(connector: C) -> Self {
        Self::with_addresses(connector, Default::default())
    }

    /// Peers reached at these addresses rather than the membership's.
    pub fn with_addresses(
        connector: C,
        addresses: std::collections::BTreeMap<NodeId, String>,
    ) -> Self {
        Network {
            connector,
            addresses,
            pools: Default::default(),
        }
    }

    fn pool(&self, target: NodeId, addr: &str) -> Arc<PeerPool<Session<C::Stream>>> {
        self.pools
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry((target, addr.to_string()))
            .or_insert_with(|| {
                Arc::new(PeerPool {
                    idle: Default::default(),
                    health: Default::default(),
                })
            })
            .clone()
    }
}

impl<C: Connector> RaftNetworkFactory<TypeConfig> for Network<C> {
    type Network = PeerConnection<C>;

    async fn new_client(&mut self, target: NodeId, node: &BasicNode) -> PeerConnection<C> {
        let addr = self
            .addresses
            .get(&target)
            .filter(|a| !a.is_empty())
            .cloned()
            .unwrap_or_else(|| node.addr.clone());
        PeerConnection {
            target,
            node: node.clone(),
            pool: self.pool(target, &addr),
            client: RpcClient::new(self.connector.clone(), addr),
        }
    }
}

pub struct PeerConnection<C: Connector> {
    target: NodeId,
    node: BasicNode,
    pool: Arc<PeerPool<Session<C::Stream>>>,
    client: RpcClient<C>,
}

type RpcResult<T, E> = Result<T, RPCError<NodeId, BasicNode, RaftError<NodeId, E>>>;

impl<C: Connector> PeerConnection<C> {
    /// One Raft message on a pooled connection (or a new one). A pooled connection may have
    /// been closed by the peer while idle (it restarted): the message then goes once more on a
    /// fresh connection, which Raft allows (its messages may be delivered twice).
    async fn send(
        &mut self,
        request: RpcRequest,
        option: &RPCOption,
    ) -> Result<RpcResponse, io::Error> {
        let deadline = tokio::time::Instant::now() + option.hard_ttl();
        let reused = self.client.stream.is_none() && {
            self.client.stream = self.pool.take();
            self.client.stream.is_some()
        };
        let mut result = self.client.call(&request, option.hard_ttl()).await;
        if reused && matches!(&result, Err(e) if e.kind() != io::ErrorKind::TimedOut) {
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            result = self.client.call(&request, remaining).await;
        }
        self.observe(&result);
        let response = result?;
        if let Some(stream) = self.client.stream.take() {
            self.pool.put(stream);
        }
        Ok(response)
    }

    /// Tells the operator when the peer stops answering and when it is back (openraft's own
    /// per-attempt lines are filtered out by the broker's default log filter).
    fn observe<T>(&self, result: &io::Result<T>) {
        use crate::peer_health::Change;
        let now = tokio::time::Instant::now();
        let change = {
            let mut health = self
                .pool
                .health
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match result {
                Ok(_) => health.answered(now),
                Err(e) => health.failed(now, e.kind() == io::ErrorKind::TimedOut),
            }
        };
        let (voter, addr) = (self.target, self.client.addr.as_str());
        let error = result.as_ref().err().map(|e| e.to_string());
        match change {
            None => {}
            Some(Change::Down {
                ever_answered: true,
            }) => warn!(voter, addr, error, "controller peer unreachable"),
            Some(Change::Down {
                ever_answered: false,
            }) => info!(voter, addr, error, "controller peer not reachable yet"),
            Some(Change::StillDown { down_for, failures }) => info!(
                voter,
                addr,
                error,
                down_secs = down_for.as_secs(),
                failures,
                "controller peer still unreachable"
            ),
            Some(Change::Back { down_for, failures }) => info!(
                voter,
                addr,
                down_ms = down_for.as_millis() as u64,
                failures,
                "controller peer reachable again"
            ),
        }
    }

    /// openraft backs a replication stream off for [`PeerConnection::backoff`] after an
    /// Unreachable error, and retries at once after any other. A message that timed out (a
    /// follower busy syncing its log, a loaded machine) is retried at once, so that the
    /// followers keep hearing from their leader within their election timeout; the time out
    /// itself paces the retries. Any other failure (refused, closed, reset, even on a fresh
    /// connection) is Unreachable: retried after the short backoff, never in a tight loop.
    fn failed<E: std::error::Error>(
        e: io::Error,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        if e.kind() == io::ErrorKind::TimedOut {
            RPCError::Network(NetworkError::new(&e))
        } else {
            RPCError::Unreachable(Unreachable::new(&e))
        }
    }

    fn unexpected<E: std::error::Error>(
        &self,
    ) -> RPCError<NodeId, BasicNode, RaftError<NodeId, E>> {
        RPCError::Network(NetworkError::new(&io::Error::new(
            io::ErrorKind::InvalidData,
            "unexpected controller RPC response",
        )))
    }

    fn remote<T, E: std::error::Error>(
        &self,
        r: Result<T, RaftError<NodeId, E>>,
    ) -> RpcResult<T, E> {
        r.map_err(|e| {
            RPCError::RemoteError(RemoteError::new_with_node(
                self.target,
                self.node.clone(),
                e,
            ))
        })
    }
}

/// How long a replication stream waits after its peer refused a connection (openraft's default
/// is 500 ms, longer than the shortest election wait): a restarted voter is reached again within
/// a Raft heartbeat or two.
const UNREACHABLE_BACKOFF: Duration = Duration::from_millis(100);

impl<C: Connector> RaftNetwork<TypeConfig> for PeerConnection<C> {
    fn backoff(&self) -> openraft::network::Backoff {
        openraft::network::Backoff::new(std::iter::repeat(UNREACHABLE_BACKOFF))
    }

    async fn append_entries(
        &mut self,
        rpc: AppendEntriesRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<AppendEntriesResponse<NodeId>, openraft::error::Infallible> {
        match self.send(RpcRequest::AppendEntries(rpc), &option).await {
            Ok(RpcResponse::AppendEntries(r)) => self.remote(r),
            Ok(_) => Err(self.unexpected()),
            Err(e) => Err(Self::failed(e)),
        }
    }

    async fn install_snapshot(
        &mut self,
        rpc: InstallSnapshotRequest<TypeConfig>,
        option: RPCOption,
    ) -> RpcResult<InstallSnapshotResponse<NodeId>, InstallSnapshotError> {
        match self.send(RpcRequest::InstallSnapshot(rpc), &option).await {
            Ok(RpcResponse::InstallSnapshot(r)) => self.remote(r),
            Ok(_) => Err(self.unexpected()),
            Err(e) => Err(Self::failed(e)),
        }
    }

    async fn vote(
        &mut self,
        rpc: VoteRequest<NodeId>,
        option: RPCOption,
    ) -> RpcResult<VoteResponse<NodeId>, openraft::error::Infallible> {
        match self.send(RpcRequest::Vote(rpc), &option).await {
            Ok(RpcResponse::Vote(r)) => self.remote(r),
            Ok(_) => Err(self.unexpected()),
            Err(e) => Err(Self::failed(e)),
        }
    }
}
