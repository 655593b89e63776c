//! How a broker reaches other nodes and accepts their connections: TCP in production; the
//! deterministic simulator (gregor-sim) brings a simulated network instead. Every connection a
//! broker opens to another node goes through its [`Transport`]: the controller quorum's Raft
//! and forwarding connections, the replica fetchers' connections to partition leaders, and the
//! controller's liveness probes of brokers (replica fetchers wrap it in [`TlsTransport`] when the
//! inter-broker listener is SSL, and in [`SaslTransport`] when it is SASL: [`inter_broker`]; the
//! connections to the controllers likewise per the controller listener: [`controller`]).
//! The controller listener is bound through it too;
//! the client listeners are bound by the caller (`server::bind_listeners`, or the simulator) and
//! its connections are served with `connection::serve_io`.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncWrite};

/// A connected byte stream to another node.
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send + Sync + 'static> Io for T {}

pub type Stream = Box<dyn Io>;

pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// A bound listener.
pub trait Listener: Send + 'static {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Stream, SocketAddr)>>;
}

/// Opens connections to `host:port` addresses and binds listeners.
pub trait Transport: Send + Sync + 'static {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Stream>>;
    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>>;

    /// [`Transport::connect`], with how long the connection's SASL session lasts when the
    /// server said (KIP-368's `session_lifetime_ms`, from `connections.max.reauth.ms`).
    fn connect_session<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, io::Result<(Stream, Option<std::time::Duration>)>> {
        Box::pin(async move { Ok((self.connect(addr).await?, None)) })
    }
}

/// Plain TCP (with Nagle off: requests are small and latency matters more than packets).
#[derive(Debug, Clone, Copy, Default)]
pub struct TcpTransport;

impl Transport for TcpTransport {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Stream>> {
        Box::pin(async move {
            let s = tokio::net::TcpStream::connect(addr).await?;
            s.set_nodelay(true)?;
            Ok(Box::new(s) as Stream)
        })
    }

    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        Box::pin(async move {
            let l = tokio::net::TcpListener::bind(addr).await?;
            Ok(Box::new(TcpListener(l)) as Box<dyn Listener>)
        })
    }
}

struct TcpListener(tokio::net::TcpListener);

impl Listener for TcpListener {
    fn accept(&mut self) -> BoxFuture<'_, io::Result<(Stream, SocketAddr)>> {
        Box::pin(async move {
            let (s, peer) = self.0.accept().await?;
            let _ = s.set_nodelay(true);
            Ok((Box::new(s) as Stream, peer))
        })
    }
}

/// TLS over another transport: what replica fetchers use when the inter-broker listener is
/// SSL. Listeners are bound by the inner transport (TLS servers are `server`'s).
pub struct TlsTransport {
    inner: SharedTransport,
    tls: crate::tls::PeerTls,
}

impl TlsTransport {
    pub fn new(inner: SharedTransport, tls: crate::tls::PeerTls) -> TlsTransport {
        TlsTransport { inner, tls }
    }
}

impl Transport for TlsTransport {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Stream>> {
        Box::pin(async move {
            let stream = self.inner.connect(addr).await?;
            // The listener's stores as they are now: they may have been reloaded.
            let tls = self.tls.current().connect_over(addr, stream).await?;
            Ok(Box::new(tls) as Stream)
        })
    }

    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        self.inner.0.bind(addr)
    }
}

/// A SASL login over another transport (TCP, or TLS for SASL_SSL): what replica fetchers use
/// when the inter-broker listener is SASL_PLAINTEXT or SASL_SSL, and every node's connections
/// to a SASL controller listener. Each connection logs in as the node (its JAAS `username`
/// and `password`) before it is handed over.
pub struct SaslTransport {
    inner: SharedTransport,
    sasl: gregor_client::sasl::ClientSasl,
    client_id: String,
}

impl SaslTransport {
    pub fn new(
        inner: SharedTransport,
        sasl: gregor_client::sasl::ClientSasl,
        client_id: String,
    ) -> SaslTransport {
        SaslTransport {
            inner,
            sasl,
            client_id,
        }
    }
}

impl Transport for SaslTransport {
    fn connect<'a>(&'a self, addr: &'a str) -> BoxFuture<'a, io::Result<Stream>> {
        Box::pin(async move { Ok(self.connect_session(addr).await?.0) })
    }

    fn connect_session<'a>(
        &'a self,
        addr: &'a str,
    ) -> BoxFuture<'a, io::Result<(Stream, Option<std::time::Duration>)>> {
        Box::pin(async move {
            let mut stream = self.inner.connect(addr).await?;
            let lifetime_ms =
                gregor_client::sasl::authenticate(&mut stream, &self.sasl, &self.client_id).await?;
            let lifetime = u64::try_from(lifetime_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(std::time::Duration::from_millis);
            Ok((stream, lifetime))
        })
    }

    fn bind(&self, addr: SocketAddr) -> BoxFuture<'_, io::Result<Box<dyn Listener>>> {
        self.inner.0.bind(addr)
    }
}

/// How replica fetchers reach other brokers' inter-broker listener over `base`: TLS when
/// `tls` is set (SSL, SASL_SSL), then the SASL login when `sasl` is (SASL_*).
pub fn inter_broker(
    base: SharedTransport,
    tls: Option<crate::tls::PeerTls>,
    sasl: Option<gregor_client::sasl::ClientSasl>,
    node_id: i32,
) -> SharedTransport {
    secured(base, tls, sasl, format!("gregor-replica-fetcher-{node_id}"))
}

/// How a node reaches the controllers' listener over `base` (quorum RPCs, metadata fetches,
/// registration, heartbeats, forwarding): TLS when `tls` is set, then the node's login
/// (`sasl.mechanism.controller.protocol`) when `sasl` is. gregor-quorum gets streams ready
/// for its RPC frames.
pub fn controller(
    base: SharedTransport,
    tls: Option<crate::tls::PeerTls>,
    sasl: Option<gregor_client::sasl::ClientSasl>,
    node_id: i32,
) -> SharedTransport {
    secured(
        base,
        tls,
        sasl,
        format!("gregor-controller-client-{node_id}"),
    )
}

fn secured(
    base: SharedTransport,
    tls: Option<crate::tls::PeerTls>,
    sasl: Option<gregor_client::sasl::ClientSasl>,
    client_id: String,
) -> SharedTransport {
    let secured = match tls {
        Some(tls) => SharedTransport(Arc::new(TlsTransport::new(base, tls))),
        None => base,
    };
    match sasl {
        Some(sasl) => SharedTransport(Arc::new(SaslTransport::new(secured, sasl, client_id))),
        None => secured,
    }
}

/// A shared transport, usable wherever gregor-quorum takes a [`gregor_quorum::rpc::Connector`].
#[derive(Clone)]
pub struct SharedTransport(pub Arc<dyn Transport>);

impl SharedTransport {
    pub fn tcp() -> SharedTransport {
        SharedTransport(Arc::new(TcpTransport))
    }

    pub async fn connect(&self, addr: &str) -> io::Result<Stream> {
        self.0.connect(addr).await
    }

    /// The transport as gregor-client's dialer, for the clients a broker runs itself (the
    /// cluster view's admin client): they reach the cluster the way the broker does.
    pub fn dialer(&self) -> gregor_client::connection::Dialer {
        let transport = self.clone();
        gregor_client::connection::Dialer::new(move |addr| {
            let transport = transport.clone();
            let addr = addr.to_string();
            Box::pin(async move {
                let s = transport.connect(&addr).await?;
                Ok(Box::new(s) as Box<dyn gregor_client::connection::DialedStream>)
            })
        })
    }
}

impl std::fmt::Debug for SharedTransport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SharedTransport")
    }
}

impl gregor_quorum::rpc::Connector for SharedTransport {
    type Stream = Stream;
    async fn connect(&self, addr: &str) -> io::Result<Stream> {
        self.0.connect(addr).await
    }

    async fn connect_session(
        &self,
        addr: &str,
    ) -> io::Result<(Stream, Option<std::time::Duration>)> {
        self.0.connect_session(addr).await
    }
}
