//! What a node needs from the rest of the cluster to show its groups as a Kafka operator
//! expects, outside the Kafka request path (only `/metrics` and the console call it):
//!
//! - the high watermarks of partitions led by other nodes, for the lag of the groups this node
//!   coordinates (kafka-lag-exporter and Burrow semantics: the high watermark from the
//!   partition's leader, the committed offset from the coordinator). They are asked with
//!   gregor-client's [`Admin`] (ListOffsets latest, read_uncommitted, routed to the leaders) and
//!   cached ([`high_watermarks`]); a scrape waits for a refresh at most [`SCRAPE_WAIT`];
//! - the consoles of the other nodes, for a console that shows every group of the cluster: a
//!   node's console address is its `metrics.listener`, which any Kafka client may read with
//!   DescribeConfigs of that broker ([`peer`]). An https one is reached with the TLS client of
//!   this node's own metrics listener settings (`listener.name.metrics.ssl.*` over `ssl.*`: its
//!   trust store checks the peer, its key store is this node's certificate when the peer asks
//!   for one), and each request names the viewer it is made for (`metrics::auth`).
//!
//! The connection to the cluster is this node's own client listener, opened on first use.

pub mod high_watermarks;
pub mod peer;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use gregor_client::admin::{ConfigResource, IsolationLevel, OffsetSpec};
use gregor_client::tls::ClientTls;
use gregor_client::{Admin, ClientConfig, TopicPartition};
use gregor_meta::config::StaticBrokerConfig;
use tracing::{debug, warn};

use crate::metadata::MetadataManager;
use crate::replica::ReplicaManager;
use crate::runtime::now_ms;
use crate::tls::PeerTls;
use high_watermarks::{HighWatermarkCache, Tp};
pub use peer::{OnBehalf, PeerConsole, PeerError};

/// The longest a scrape or a console answer waits for a refresh of remote high watermarks; the
/// refresh goes on in the background and the next scrape uses it.
pub const SCRAPE_WAIT: Duration = Duration::from_millis(800);
/// The budget of one refresh (every leader asked, retries included).
const REFRESH_TIMEOUT: Duration = Duration::from_secs(5);

/// The node's view of the rest of the cluster; see the module documentation.
pub struct ClusterView {
    node_id: i32,
    bootstrap: String,
    admin: tokio::sync::OnceCell<Admin>,
    high_watermarks: Mutex<HighWatermarkCache>,
    /// Console addresses of other nodes, by node id and registration incarnation (a restarted
    /// node may listen elsewhere).
    consoles: Mutex<HashMap<(i32, gregor_meta::Uuid), PeerConsole>>,
    /// The TLS client for https consoles: this node's https metrics listener's, reloaded with
    /// its stores (`BrokerConfig::metrics_tls`)...
    reloaded_tls: Option<PeerTls>,
    /// ... else made from the settings on first use (or why it cannot be).
    peer_tls: OnceLock<Result<ClientTls, String>>,
    /// How the admin client dials: the broker's own transport.
    dialer: gregor_client::connection::Dialer,
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl ClusterView {
    /// A view reaching the cluster through `bootstrap` (this node's client listener), and the
    /// https consoles of other nodes with `console_tls` when it is set.
    pub fn new(
        node_id: i32,
        bootstrap: String,
        console_tls: Option<PeerTls>,
        dialer: gregor_client::connection::Dialer,
    ) -> ClusterView {
        ClusterView {
            dialer,
            node_id,
            bootstrap,
            reloaded_tls: console_tls,
            admin: tokio::sync::OnceCell::new(),
            high_watermarks: Mutex::new(HighWatermarkCache::default()),
            consoles: Mutex::new(HashMap::new()),
            peer_tls: OnceLock::new(),
        }
    }

    async fn admin(&self) -> Result<&Admin, gregor_client::Error> {
        self.admin
            .get_or_try_init(|| async {
                let mut config = ClientConfig::new(&self.bootstrap)?;
                config.client_id = format!("gregor-broker-{}-cluster-view", self.node_id);
                config.connect_timeout = Duration::from_secs(2);
                config.request_timeout = Duration::from_secs(3);
                config.api_timeout = REFRESH_TIMEOUT;
                config.dialer = Some(self.dialer.clone());
                Admin::connect(config).await
            })
            .await
    }

    /// Failed remote high watermark lookups since start.
    pub fn high_watermark_failures(&self) -> u64 {
        lock(&self.high_watermarks).failures()
    }

    /// The partitions of `wanted` this node leads, and the others by their leader; partitions
    /// without a leader are left out.
    fn by_leader(
        &self,
        metadata: &MetadataManager,
        wanted: impl IntoIterator<Item = Tp>,
    ) -> (Vec<Tp>, HashMap<i32, Vec<Tp>>) {
        let image = metadata.image();
        let mut local = Vec::new();
        let mut remote: HashMap<i32, Vec<Tp>> = HashMap::new();
        for tp in wanted {
            let leader = image
                .topic(&tp.0)
                .and_then(|t| t.partitions.get(&tp.1))
                .map(|p| p.leader);
            match leader {
                Some(l) if l == self.node_id => local.push(tp),
                Some(l) if l >= 0 => remote.entry(l).or_default().push(tp),
                _ => {}
            }
        }
        (local, remote)
    }

    /// The high watermark of each partition of `wanted` as its leader has it: read here for
    /// partitions this node leads, asked of the other leaders (cached, refreshed at most every
    /// [`high_watermarks::REFRESH_EVERY_MS`]). Partitions without a leader, or whose leader did
    /// not answer lately, are left out.
    pub async fn high_watermarks(
        self: &Arc<Self>,
        metadata: &MetadataManager,
        replicas: &ReplicaManager,
        wanted: HashSet<Tp>,
    ) -> HashMap<Tp, i64> {
        let (local, remote) = self.by_leader(metadata, wanted);
        let mut out: HashMap<Tp, i64> = local
            .into_iter()
            .filter_map(|tp| replicas.get(&tp.0, tp.1).map(|p| (tp, p.high_watermark())))
            .collect();
        if remote.is_empty() {
            return out;
        }
        let all: HashSet<Tp> = remote.values().flatten().cloned().collect();
        let started = now_ms();
        if lock(&self.high_watermarks).start_refresh(&all, started) {
            let view = self.clone();
            let refresh = crate::runtime::spawn(async move { view.refresh(started, remote).await });
            // The scrape waits a little for fresh values; the refresh goes on without it.
            let _ = tokio::time::timeout(SCRAPE_WAIT, refresh).await;
        }
        let cache = lock(&self.high_watermarks);
        let now = now_ms();
        for tp in all {
            if let Some(hw) = cache.get(&tp, now) {
                out.insert(tp, hw);
            }
        }
        out
    }

    /// Each partition of `wanted` as its leader has it now, uncached: the high watermark and the
    /// log's size in bytes. Read here for partitions this node leads; the other leaders are asked
    /// all at once (ListOffsets and DescribeLogDirs), each within [`REFRESH_TIMEOUT`]. Partitions
    /// without a leader, or whose leader did not answer, are left out. For the `load` assignor.
    pub async fn leader_samples(
        &self,
        metadata: &MetadataManager,
        replicas: &ReplicaManager,
        wanted: impl IntoIterator<Item = Tp>,
    ) -> HashMap<Tp, (i64, Option<i64>)> {
        let (local, remote) = self.by_leader(metadata, wanted);
        let mut out: HashMap<Tp, (i64, Option<i64>)> = local
            .into_iter()
            .filter_map(|tp| {
                let p = replicas.get(&tp.0, tp.1)?;
                let size = p.log.size_bytes().min(i64::MAX as u64) as i64;
                Some((tp, (p.high_watermark(), Some(size))))
            })
            .collect();
        if remote.is_empty() {
            return out;
        }
        let admin = match tokio::time::timeout(REFRESH_TIMEOUT, self.admin()).await {
            Ok(Ok(admin)) => admin,
            _ => {
                debug!(
                    leaders = remote.len(),
                    "cannot connect to sample remote partitions' load"
                );
                return out;
            }
        };
        let lookups = remote
            .into_iter()
            .map(|(leader, tps)| leader_sample(admin, leader, tps));
        for found in futures::future::join_all(lookups).await {
            out.extend(found);
        }
        out
    }

    /// Asks each leader for its partitions' high watermarks, all leaders at once, each within
    /// [`REFRESH_TIMEOUT`]: a leader that does not answer loses only its own partitions' lag.
    async fn refresh(&self, started: i64, by_leader: HashMap<i32, Vec<Tp>>) {
        let asked: usize = by_leader.values().map(Vec::len).sum();
        let admin = match tokio::time::timeout(REFRESH_TIMEOUT, self.admin()).await {
            Ok(Ok(admin)) => admin,
            Ok(Err(e)) => {
                warn!(error = %e, partitions = asked, "cannot connect to look up remote high watermarks");
                lock(&self.high_watermarks).refresh_failed(started, asked);
                return;
            }
            Err(_) => {
                warn!(
                    partitions = asked,
                    "connecting to look up remote high watermarks timed out"
                );
                lock(&self.high_watermarks).refresh_failed(started, asked);
                return;
            }
        };
        let lookups = by_leader
            .into_iter()
            .map(|(leader, tps)| leader_high_watermarks(admin, leader, tps));
        let results: Vec<(Tp, Option<i64>)> = futures::future::join_all(lookups)
            .await
            .into_iter()
            .flatten()
            .collect();
        lock(&self.high_watermarks).refreshed(started, results, now_ms());
    }

    /// The console address of `node`: its `metrics.listener` as DescribeConfigs of that broker
    /// answers it, with the host of its client listener when it listens on every interface.
    pub async fn console_address(
        &self,
        metadata: &MetadataManager,
        node: i32,
    ) -> Result<PeerConsole, PeerError> {
        let registration = metadata
            .image()
            .broker(node)
            .cloned()
            .ok_or(PeerError::NotRegistered(node))?;
        let key = (node, registration.incarnation_id);
        if let Some(console) = lock(&self.consoles).get(&key) {
            return Ok(*console);
        }
        let admin = self.admin().await.map_err(PeerError::Lookup)?;
        let described = tokio::time::timeout(
            peer::PEER_TIMEOUT,
            admin.describe_configs(&[ConfigResource::broker(node)], false, false),
        )
        .await
        .map_err(|_| PeerError::Timeout)?
        .map_err(PeerError::Lookup)?;
        let value = described
            .into_iter()
            .find_map(|(_, r)| r.ok())
            .and_then(|entries| {
                entries
                    .into_iter()
                    .find(|e| e.name == "metrics.listener")
                    .and_then(|e| e.value)
            })
            .unwrap_or_default();
        let host = registration.endpoints.first().map(|e| e.host.clone());
        let addr = peer::console_address(node, &value, host.as_deref()).await?;
        let mut consoles = lock(&self.consoles);
        consoles.retain(|(n, _), _| *n != node);
        consoles.insert(key, addr);
        Ok(addr)
    }

    /// GETs `path_and_query` from `node`'s console for `on_behalf`: its status and JSON.
    /// `settings` are this node's, for the TLS client of an https console.
    pub async fn get_from(
        &self,
        metadata: &MetadataManager,
        settings: &StaticBrokerConfig,
        node: i32,
        path_and_query: &str,
        on_behalf: OnBehalf<'_>,
    ) -> Result<(hyper::StatusCode, serde_json::Value), PeerError> {
        self.call(metadata, settings, node, path_and_query, None, on_behalf)
            .await
    }

    /// A console action POSTed to node `node`'s console for the viewer `on_behalf`, as
    /// [`get_from`](Self::get_from) reads.
    pub async fn post_to(
        &self,
        metadata: &MetadataManager,
        settings: &StaticBrokerConfig,
        node: i32,
        path: &str,
        post: peer::Post<'_>,
        on_behalf: OnBehalf<'_>,
    ) -> Result<(hyper::StatusCode, serde_json::Value), PeerError> {
        self.call(metadata, settings, node, path, Some(post), on_behalf)
            .await
    }

    async fn call(
        &self,
        metadata: &MetadataManager,
        settings: &StaticBrokerConfig,
        node: i32,
        path_and_query: &str,
        post: Option<peer::Post<'_>>,
        on_behalf: OnBehalf<'_>,
    ) -> Result<(hyper::StatusCode, serde_json::Value), PeerError> {
        let console = self.console_address(metadata, node).await?;
        let tls = match console.https {
            true => Some(self.peer_tls(settings)?),
            false => None,
        };
        let answer =
            peer::call_json(console, tls.as_ref(), path_and_query, post, Some(on_behalf)).await;
        if answer.is_err() {
            // Looked up again next time: it may have restarted elsewhere.
            lock(&self.consoles).retain(|(n, _), _| *n != node);
        }
        answer
    }

    /// The client side of this node's metrics listener TLS settings, as a client of the other
    /// nodes' metrics listeners.
    fn peer_tls(&self, settings: &StaticBrokerConfig) -> Result<ClientTls, PeerError> {
        if let Some(tls) = &self.reloaded_tls {
            return Ok(tls.current());
        }
        let made = self.peer_tls.get_or_init(|| {
            crate::tls::PeerTls::from_settings(
                settings,
                crate::metrics::auth::LISTENER_NAME,
                crate::tls::PeerRole::ConsolePeers,
            )
            .map(|peer| peer.current())
            .map_err(|e| {
                    format!("listener.name.metrics.ssl.* (or ssl.*) as a client of other nodes' consoles: {e}")
                })
        });
        made.clone().map_err(PeerError::TlsSettings)
    }
}

/// The high watermarks of partitions led by `leader` (by this node's metadata), `None` for each
/// the lookup failed for.
/// One leader's high watermarks and log sizes of `tps` (a size is `None` when DescribeLogDirs
/// failed; a partition without a high watermark is left out).
async fn leader_sample(admin: &Admin, leader: i32, tps: Vec<Tp>) -> Vec<(Tp, (i64, Option<i64>))> {
    let listed: Vec<TopicPartition> = tps
        .iter()
        .map(|(t, p)| TopicPartition::new(t.clone(), *p))
        .collect();
    let sizes = tokio::time::timeout(
        REFRESH_TIMEOUT,
        admin.describe_log_dirs(leader, Some(&listed)),
    );
    let (hws, sizes) = tokio::join!(leader_high_watermarks(admin, leader, tps), sizes);
    let mut by_partition: HashMap<TopicPartition, i64> = HashMap::new();
    match sizes {
        Ok(Ok(dirs)) => {
            for d in dirs {
                for (tp, r) in d.replicas {
                    if !r.is_future {
                        by_partition.insert(tp, r.size_bytes);
                    }
                }
            }
        }
        Ok(Err(e)) => debug!(leader, error = %e, "remote log size lookup failed"),
        Err(_) => debug!(leader, "remote log size lookup timed out"),
    }
    hws.into_iter()
        .filter_map(|(tp, hw)| {
            let size = by_partition
                .get(&TopicPartition::new(tp.0.clone(), tp.1))
                .copied();
            hw.map(|hw| (tp, (hw, size)))
        })
        .collect()
}

async fn leader_high_watermarks(
    admin: &Admin,
    leader: i32,
    tps: Vec<Tp>,
) -> Vec<(Tp, Option<i64>)> {
    let specs: Vec<(TopicPartition, OffsetSpec)> = tps
        .iter()
        .map(|(t, p)| (TopicPartition::new(t.clone(), *p), OffsetSpec::Latest))
        .collect();
    let looked_up = tokio::time::timeout(
        REFRESH_TIMEOUT,
        admin.list_offsets(&specs, IsolationLevel::ReadUncommitted),
    )
    .await;
    let results = match looked_up {
        Ok(Ok(results)) => results,
        Ok(Err(e)) => {
            warn!(leader, error = %e, partitions = tps.len(), "remote high watermark lookup failed");
            return tps.into_iter().map(|tp| (tp, None)).collect();
        }
        Err(_) => {
            warn!(
                leader,
                partitions = tps.len(),
                timeout_ms = REFRESH_TIMEOUT.as_millis() as u64,
                "remote high watermark lookup timed out"
            );
            return tps.into_iter().map(|tp| (tp, None)).collect();
        }
    };
    tps.into_iter()
        .map(|tp| {
            let key = TopicPartition::new(tp.0.clone(), tp.1);
            let hw = match results.get(&key) {
                Some(Ok(listed)) if listed.offset >= 0 => Some(listed.offset),
                Some(Err(e)) => {
                    debug!(leader, topic = %tp.0, partition = tp.1, error = %e,
                        "remote high watermark lookup failed");
                    None
                }
                _ => None,
            };
            (tp, hw)
        })
        .collect()
}
