//! The client shell: bootstrap, one connection per broker, metadata and coordinator caches,
//! request routing and retries with backoff under an operation deadline.

use std::collections::HashMap;
use std::future::Future;
use std::sync::{Arc, Mutex, RwLock};
use std::time::Duration;

use kafka_protocol::messages::{FindCoordinatorRequest, MetadataRequest};
use kafka_protocol::protocol::Request;
use tokio::time::Instant;

use crate::connection::{Connection, Dialer, PendingResponse};
use crate::coordinator::{find_coordinator_request, parse_find_coordinator};
use crate::error::{Error, Result};
use crate::metadata::{metadata_request, parse_metadata, BrokerNode, ClusterMetadata};
use crate::retry::{self, Backoff, RetryAction};

/// Client settings, named after Kafka's where one exists.
#[derive(Debug, Clone)]
pub struct ClientConfig {
    /// `bootstrap.servers`: `host:port` entries used to find the cluster.
    pub bootstrap_servers: Vec<String>,
    /// `client.id`, sent in every request header.
    pub client_id: String,
    /// Budget for one TCP connect plus the ApiVersions handshake, and for reaching any
    /// bootstrap server at all.
    pub connect_timeout: Duration,
    /// `request.timeout.ms`: how long one request waits for its response.
    pub request_timeout: Duration,
    /// `default.api.timeout.ms`: how long one operation may take, retries included.
    pub api_timeout: Duration,
    /// Pause between retries.
    pub backoff: Backoff,
    /// Opens connections instead of TCP when set (the deterministic simulator's network).
    pub dialer: Option<Dialer>,
    /// Kafka's `bootstrap.controllers` (KIP-919): the bootstrap servers are controller
    /// listeners, and the cluster is the controllers DescribeCluster names there. Only what
    /// controllers serve works: DescribeCluster and a node's configs.
    pub bootstrap_controllers: bool,
}

impl ClientConfig {
    /// Parses a comma-separated bootstrap list (`host:port[,host:port...]`) with Kafka's
    /// defaults for the rest (request timeout 30 s, operation timeout 60 s, connect 10 s).
    pub fn new(bootstrap_servers: &str) -> Result<ClientConfig> {
        Ok(ClientConfig {
            bootstrap_servers: parse_bootstrap_servers(bootstrap_servers)?,
            client_id: "gregor-client".to_string(),
            connect_timeout: Duration::from_secs(10),
            request_timeout: Duration::from_secs(30),
            api_timeout: Duration::from_secs(60),
            backoff: Backoff::default(),
            dialer: None,
            bootstrap_controllers: false,
        })
    }
}

/// Validates a bootstrap list: non-empty entries, each `host:port` with a numeric port.
pub fn parse_bootstrap_servers(list: &str) -> Result<Vec<String>> {
    let mut out = Vec::new();
    for entry in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (host, port) = entry.rsplit_once(':').ok_or_else(|| {
            Error::InvalidArgument(format!(
                "invalid bootstrap server '{entry}': expected host:port"
            ))
        })?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        if host.is_empty() || port.parse::<u16>().map_or(true, |p| p == 0) {
            return Err(Error::InvalidArgument(format!(
                "invalid bootstrap server '{entry}': expected host:port with a port in 1..=65535"
            )));
        }
        out.push(entry.to_string());
    }
    if out.is_empty() {
        return Err(Error::InvalidArgument(
            "no bootstrap servers given".to_string(),
        ));
    }
    Ok(out)
}

/// The retry budget of one operation.
#[derive(Debug, Clone)]
pub struct RetryState {
    what: String,
    budget: Duration,
    deadline: Instant,
    retries: u32,
}

impl RetryState {
    fn new(what: &str, budget: Duration) -> RetryState {
        RetryState {
            what: what.to_string(),
            budget,
            deadline: Instant::now() + budget,
            retries: 0,
        }
    }

    pub fn deadline(&self) -> Instant {
        self.deadline
    }

    /// The timeout error, naming the last failure when there was one.
    pub fn timed_out(&self, last: Option<&Error>) -> Error {
        Error::Timeout {
            what: match last {
                Some(e) => format!("{} (last error: {e})", self.what),
                None => self.what.clone(),
            },
            after_ms: u64::try_from(self.budget.as_millis()).unwrap_or(u64::MAX),
        }
    }
}

/// Where a request goes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Target {
    /// Any broker (metadata, describe cluster, configs of topics...).
    Any,
    /// One broker by id (broker configs, per-broker group listings, partition leaders).
    Broker(i32),
    /// The controller as Metadata names it (topic and partition management); any broker when
    /// none is named, as KRaft brokers forward these requests.
    Controller,
    /// The coordinator of a group, found with FindCoordinator and cached.
    Coordinator(String),
}

struct Inner {
    config: ClientConfig,
    /// Open connections by broker address.
    connections: tokio::sync::Mutex<HashMap<String, Arc<Connection>>>,
    metadata: RwLock<Arc<ClusterMetadata>>,
    coordinators: Mutex<HashMap<String, BrokerNode>>,
}

/// An async Kafka client. Cheap to clone; clones share connections and caches.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Client {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Client")
            .field("bootstrap_servers", &self.inner.config.bootstrap_servers)
            .finish_non_exhaustive()
    }
}

impl Client {
    /// Connects to the cluster: reaches a bootstrap server within `connect_timeout` and loads
    /// the broker list.
    pub async fn connect(config: ClientConfig) -> Result<Client> {
        if config.bootstrap_servers.is_empty() {
            return Err(Error::InvalidArgument(
                "no bootstrap servers given".to_string(),
            ));
        }
        let budget = config.connect_timeout.min(config.api_timeout);
        let client = Client {
            inner: Arc::new(Inner {
                config,
                connections: tokio::sync::Mutex::new(HashMap::new()),
                metadata: RwLock::new(Arc::new(ClusterMetadata::default())),
                coordinators: Mutex::new(HashMap::new()),
            }),
        };
        let what = format!(
            "reaching bootstrap servers {}",
            client.inner.config.bootstrap_servers.join(",")
        );
        client
            .retry_within(&what, budget, || client.refresh_metadata(Some(&[])))
            .await?;
        Ok(client)
    }

    pub fn config(&self) -> &ClientConfig {
        &self.inner.config
    }

    /// The latest metadata snapshot.
    pub fn metadata(&self) -> Arc<ClusterMetadata> {
        self.inner
            .metadata
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Fetches metadata from any broker: `None` for every topic, `Some(&[])` for brokers only.
    /// The cache keeps brokers and controller from the answer, and replaces the topics it names
    /// (all of them when every topic was asked for).
    pub async fn refresh_metadata(&self, topics: Option<&[String]>) -> Result<ClusterMetadata> {
        let fresh = match self.inner.config.bootstrap_controllers {
            true => self.controllers().await?,
            false => {
                let (_, resp) = self
                    .send::<MetadataRequest, _>(&Target::Any, |v| Ok(metadata_request(topics, v)))
                    .await?;
                parse_metadata(resp).map_err(|e| Error::kafka("Metadata", e))?
            }
        };
        let mut cache = self
            .inner
            .metadata
            .write()
            .unwrap_or_else(|p| p.into_inner());
        let mut merged = ClusterMetadata {
            cluster_id: fresh.cluster_id.clone(),
            controller_id: fresh.controller_id,
            brokers: fresh.brokers.clone(),
            topics: if topics.is_none() {
                Vec::new()
            } else {
                cache.topics.clone()
            },
        };
        for t in &fresh.topics {
            merged.topics.retain(|old| old.name != t.name);
            if t.error.is_none() {
                merged.topics.push(t.clone());
            }
        }
        merged.topics.sort_by(|a, b| a.name.cmp(&b.name));
        *cache = Arc::new(merged);
        Ok(fresh)
    }

    /// With `bootstrap.controllers`: the controllers as DescribeCluster names them, as the
    /// cluster's nodes (no topics).
    async fn controllers(&self) -> Result<ClusterMetadata> {
        use crate::metadata::{describe_cluster_request, parse_describe_cluster};
        use kafka_protocol::messages::DescribeClusterRequest;
        let (_, resp) = self
            .send::<DescribeClusterRequest, _>(&Target::Any, |v| {
                if v < 1 {
                    return Err(Error::InvalidArgument(
                        "the controller does not serve DescribeCluster v1 (KIP-919)".into(),
                    ));
                }
                Ok(describe_cluster_request(v, true))
            })
            .await?;
        let described =
            parse_describe_cluster(resp).map_err(|e| Error::kafka("DescribeCluster", e))?;
        Ok(ClusterMetadata {
            cluster_id: described.cluster_id,
            controller_id: described.controller_id,
            brokers: described.brokers,
            topics: Vec::new(),
        })
    }

    /// The coordinator of `group`, from the cache or FindCoordinator.
    pub async fn find_coordinator(&self, group: &str) -> Result<BrokerNode> {
        if let Some(node) = self.cached_coordinator(group) {
            return Ok(node);
        }
        // Straight to a connection: routing through `send` would ask for the coordinator again.
        let conn = self.any_connection().await?;
        let (_, resp) =
            send_on::<FindCoordinatorRequest, _>(&conn, |v| Ok(find_coordinator_request(group, v)))
                .await?;
        let node = parse_find_coordinator(group, resp)?;
        self.inner
            .coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .insert(group.to_string(), node.clone());
        Ok(node)
    }

    fn cached_coordinator(&self, group: &str) -> Option<BrokerNode> {
        self.inner
            .coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .get(group)
            .cloned()
    }

    /// Sends one request to `target` without retrying. `build` receives the negotiated version
    /// and makes the request in that version's layout. Returns the version used and the
    /// response.
    pub async fn send<R, F>(&self, target: &Target, build: F) -> Result<(i16, R::Response)>
    where
        R: Request,
        F: FnOnce(i16) -> Result<R>,
    {
        let conn = self.connection_for(target).await?;
        send_on(&conn, build).await
    }

    /// [`Client::send`], with when the answer's first bytes were read (see
    /// [`crate::connection::PendingResponse::timed_response`]).
    pub async fn send_timed<R, F>(
        &self,
        target: &Target,
        build: F,
    ) -> Result<(R::Response, tokio::time::Instant)>
    where
        R: Request,
        F: FnOnce(i16) -> Result<R>,
    {
        let (_, pending) = self.submit_built(target, None, build).await?;
        pending.timed_response().await
    }

    /// [`Client::send`] with a request timeout of its own instead of `request.timeout.ms`.
    pub async fn send_within<R, F>(
        &self,
        target: &Target,
        request_timeout: Duration,
        build: F,
    ) -> Result<(i16, R::Response)>
    where
        R: Request,
        F: FnOnce(i16) -> Result<R>,
    {
        let (version, pending) = self
            .submit_built(target, Some(request_timeout), build)
            .await?;
        Ok((version, pending.response().await?))
    }

    /// Builds the request in the version picked for `target`'s connection and queues it, with
    /// `request.timeout.ms` or `request_timeout` when given.
    async fn submit_built<R, F>(
        &self,
        target: &Target,
        request_timeout: Option<Duration>,
        build: F,
    ) -> Result<(i16, PendingResponse<R>)>
    where
        R: Request,
        F: FnOnce(i16) -> Result<R>,
    {
        let conn = self.connection_for(target).await?;
        let version = conn.pick_version::<R>()?;
        let request = build(version)?;
        let pending = match request_timeout {
            Some(t) => conn.submit_within(&request, version, t).await?,
            None => conn.submit(&request, version).await?,
        };
        Ok((version, pending))
    }

    /// Runs `attempt` until it succeeds, fails for good, or the operation timeout passes.
    /// Between attempts it refreshes metadata or forgets cached coordinators as the error asks.
    pub async fn retry<T, F, Fut>(&self, what: &str, attempt: F) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        self.retry_within(what, self.inner.config.api_timeout, attempt)
            .await
    }

    async fn retry_within<T, F, Fut>(
        &self,
        what: &str,
        budget: Duration,
        mut attempt: F,
    ) -> Result<T>
    where
        F: FnMut() -> Fut,
        Fut: Future<Output = Result<T>>,
    {
        let mut state = RetryState::new(what, budget);
        loop {
            match tokio::time::timeout_at(state.deadline, attempt()).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) => self.prepare_retry(&mut state, e).await?,
                Err(_) => return Err(state.timed_out(None)),
            }
        }
    }

    /// A retry budget for one operation, starting now, of the operation timeout.
    pub fn retry_state(&self, what: &str) -> RetryState {
        RetryState::new(what, self.inner.config.api_timeout)
    }

    /// After a failed attempt: returns the error if it is final or the deadline is too close
    /// for another attempt; otherwise refreshes metadata or forgets coordinators as the error
    /// asks, pauses, and returns `Ok(())` for the caller to try again.
    pub async fn prepare_retry(&self, state: &mut RetryState, error: Error) -> Result<()> {
        let action = retry::action(&error);
        if action == RetryAction::Fail {
            return Err(error);
        }
        let pause = Duration::from_millis(self.inner.config.backoff.delay_ms(state.retries));
        if Instant::now() + pause >= state.deadline {
            return Err(state.timed_out(Some(&error)));
        }
        tracing::debug!(operation = %state.what, retries = state.retries, %error, ?action, "retrying");
        match action {
            RetryAction::RefreshMetadata => {
                // Best effort: if no broker answers, the next attempt reports why.
                let _ =
                    tokio::time::timeout_at(state.deadline, self.refresh_metadata(Some(&[]))).await;
            }
            RetryAction::FindCoordinator => self
                .inner
                .coordinators
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .clear(),
            RetryAction::Backoff | RetryAction::Fail => {}
        }
        tokio::time::sleep(pause).await;
        state.retries += 1;
        Ok(())
    }

    /// Forgets `group`'s coordinator and gives up the connection to it, for a coordinator
    /// that stopped answering (as Kafka's consumer disconnects when it marks its coordinator
    /// unknown): whatever waits on that connection fails now, and the next group request
    /// looks the coordinator up again and opens a fresh connection.
    pub async fn coordinator_unreachable(&self, group: &str, reason: &str) {
        let node = self
            .inner
            .coordinators
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .remove(group);
        if let Some(node) = node {
            if let Some(conn) = self.inner.connections.lock().await.remove(&node.address()) {
                tracing::info!(
                    group,
                    coordinator = node.id,
                    reason,
                    "disconnecting from the group coordinator"
                );
                conn.close(reason);
            }
        }
    }

    /// The connection requests to `target` go over (opened if needed), for callers that
    /// pipeline several requests in a fixed order ([`Connection::submit`]).
    pub async fn connection_for(&self, target: &Target) -> Result<Arc<Connection>> {
        match target {
            Target::Any => self.any_connection().await,
            Target::Broker(id) => self.broker_connection(*id).await,
            Target::Controller => match self.metadata().controller_id {
                Some(id) => self.broker_connection(id).await,
                None => self.any_connection().await,
            },
            Target::Coordinator(group) => {
                let node = self.find_coordinator(group).await?;
                self.connection(
                    &node.address(),
                    format!("coordinator {} ({})", node.id, node.address()),
                )
                .await
            }
        }
    }

    async fn broker_connection(&self, id: i32) -> Result<Arc<Connection>> {
        let metadata = self.metadata();
        let node = metadata.broker(id).ok_or(Error::UnknownBroker(id))?;
        self.connection(
            &node.address(),
            format!("broker {} ({})", node.id, node.address()),
        )
        .await
    }

    /// An open connection if there is one, else the first broker (then bootstrap server) that
    /// accepts a connection.
    async fn any_connection(&self) -> Result<Arc<Connection>> {
        {
            let connections = self.inner.connections.lock().await;
            if let Some(c) = connections.values().find(|c| !c.is_closed()) {
                return Ok(c.clone());
            }
        }
        let metadata = self.metadata();
        let mut candidates: Vec<(String, String)> = metadata
            .brokers
            .iter()
            .map(|b| (b.address(), format!("broker {} ({})", b.id, b.address())))
            .collect();
        candidates.extend(
            self.inner
                .config
                .bootstrap_servers
                .iter()
                .map(|a| (a.clone(), format!("bootstrap server {a}"))),
        );
        let mut last_error = None;
        for (addr, label) in candidates {
            match self.connection(&addr, label).await {
                Ok(c) => return Ok(c),
                Err(e) => {
                    tracing::debug!(%addr, error = %e, "broker unreachable");
                    // A controller listener among the addresses is what to report: trying
                    // again will not help, unlike a broker that is down.
                    if !matches!(last_error, Some(Error::ControllerListener { .. })) {
                        last_error = Some(e);
                    }
                }
            }
        }
        Err(last_error.unwrap_or_else(|| Error::InvalidArgument("no brokers known".to_string())))
    }

    async fn connection(&self, addr: &str, label: String) -> Result<Arc<Connection>> {
        let mut connections = self.inner.connections.lock().await;
        if let Some(c) = connections.get(addr) {
            if !c.is_closed() {
                return Ok(c.clone());
            }
        }
        let config = &self.inner.config;
        let conn = Connection::open(
            config.dialer.as_ref(),
            addr,
            label,
            &config.client_id,
            config.connect_timeout,
            config.request_timeout,
        )
        .await?;
        if !config.bootstrap_controllers && conn.versions().range(MetadataRequest::KEY).is_none() {
            return Err(Error::ControllerListener {
                addr: addr.to_string(),
            });
        }
        let conn = Arc::new(conn);
        connections.insert(addr.to_string(), conn.clone());
        Ok(conn)
    }
}

async fn send_on<R, F>(conn: &Connection, build: F) -> Result<(i16, R::Response)>
where
    R: Request,
    F: FnOnce(i16) -> Result<R>,
{
    let version = conn.pick_version::<R>()?;
    let request = build(version)?;
    let response = conn.send(&request, version).await?;
    Ok((version, response))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bootstrap_lists_are_validated() {
        assert_eq!(
            parse_bootstrap_servers("127.0.0.1:9092, b:9093,").unwrap(),
            vec!["127.0.0.1:9092", "b:9093"]
        );
        assert_eq!(
            parse_bootstrap_servers("[::1]:9092").unwrap(),
            vec!["[::1]:9092"]
        );
        for bad in [
            "",
            " , ",
            "localhost",
            "localhost:",
            ":9092",
            "h:0",
            "h:70000",
            "h:x",
        ] {
            let e = parse_bootstrap_servers(bad).unwrap_err();
            assert!(matches!(e, Error::InvalidArgument(_)), "{bad}: {e}");
        }
    }

    /// A peer that answers ApiVersions as a controller listener does (ApiVersions alone), and
    /// every further connection the same way.
    async fn controller_listener() -> String {
        use bytes::{BufMut, BytesMut};
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        use kafka_protocol::messages::ApiVersionsResponse;
        use kafka_protocol::protocol::Encodable;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        tokio::spawn(async move {
            while let Ok((mut socket, _)) = listener.accept().await {
                let size = socket.read_i32().await.unwrap();
                // An ApiVersions request is small: anything else is not the client under test.
                let Ok(size @ 8..=65_536) = usize::try_from(size) else {
                    continue;
                };
                let mut frame = vec![0u8; size];
                socket.read_exact(&mut frame).await.unwrap();
                let version = i16::from_be_bytes([frame[2], frame[3]]);
                let mut response = ApiVersionsResponse::default();
                let mut key = ApiVersion::default();
                key.api_key = 18;
                key.max_version = 4;
                response.api_keys.push(key);
                let mut body = BytesMut::new();
                body.put_slice(&frame[4..8]);
                response.encode(&mut body, version).unwrap();
                socket.write_i32(body.len() as i32).await.unwrap();
                socket.write_all(&body).await.unwrap();
            }
        });
        addr
    }

    #[tokio::test]
    async fn a_controller_listener_is_named_at_once() {
        let addr = controller_listener().await;
        let mut config = ClientConfig::new(&addr).unwrap();
        config.connect_timeout = Duration::from_secs(30);
        let err = Client::connect(config).await.unwrap_err();
        assert!(
            matches!(&err, Error::ControllerListener { addr: a } if *a == addr),
            "{err}"
        );
        assert!(
            err.to_string().contains("is a controller listener"),
            "{err}"
        );
        // Listed before a broker that is down, it is still what the client reports.
        let down = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let down_addr = down.local_addr().unwrap().to_string();
        drop(down);
        let mut config = ClientConfig::new(&format!("{addr},{down_addr}")).unwrap();
        config.connect_timeout = Duration::from_secs(30);
        let err = Client::connect(config).await.unwrap_err();
        assert!(matches!(err, Error::ControllerListener { .. }), "{err}");
    }

    // Paused time: the backoff pauses advance the clock instead of sleeping.
    #[tokio::test(start_paused = true)]
    async fn unreachable_bootstrap_fails_within_the_connect_budget() {
        // A port nothing listens on: bind one, note it, drop the listener.
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap().to_string();
        drop(listener);
        let mut config = ClientConfig::new(&addr).unwrap();
        config.connect_timeout = Duration::from_millis(300);
        config.backoff = Backoff {
            initial_ms: 10,
            max_ms: 50,
        };
        let started = Instant::now();
        let err = Client::connect(config).await.unwrap_err();
        assert!(started.elapsed() <= Duration::from_millis(300));
        let text = err.to_string();
        assert!(matches!(err, Error::Timeout { .. }), "{text}");
        assert!(text.contains(&addr), "{text}");
        assert!(text.contains("cannot connect"), "{text}");
    }
}
