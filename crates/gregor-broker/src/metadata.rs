//! The metadata shell: this node's member of the controller quorum (gregor-quorum: the
//! `__cluster_metadata-0` log replicated by openraft) and the image every request handler reads.
//!
//! Controller operations run on the active controller only, one at a time: the controller
//! (gregor-meta) turns a request into records, the quorum commits them, and every node applies
//! them in commit order to its image and, through [`ReplicaApplier`], to its replica manager.
//! A node that is not the active controller forwards the Kafka request instead
//! (see `forward.rs`).

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::{Controller, ControllerResult, MetadataDelta, MetadataImage};
use gregor_quorum::rpc::{KafkaReply, Network, RpcClient, RpcRequest, RpcResponse};
use gregor_quorum::{
    ApplyListener, FollowerConfig, MetadataFollower, NodeId, Quorum, QuorumConfig, QuorumError,
    WriteError,
};
use prometheus_client::metrics::histogram::{exponential_buckets, Histogram};
use tokio::sync::Mutex as AsyncMutex;

use crate::recent_fencing::RecentFencing;
use crate::replica::ReplicaManager;
use crate::runtime::now_ms;
use crate::transport::SharedTransport;

use crate::partition_dir::METADATA_LOG_DIR;

/// How long a controller write may wait to be committed before it is answered with
/// REQUEST_TIMED_OUT (it may still commit later, as in Kafka).
pub const CONTROLLER_WRITE_TIMEOUT: Duration = Duration::from_secs(15);

#[derive(Debug, thiserror::Error)]
pub enum MetadataError {
    #[error(transparent)]
    Quorum(#[from] QuorumError),
    #[error("this node is not the active controller")]
    NotController,
    #[error("the metadata write was not committed in time")]
    Timeout,
    #[error("the controller quorum is unavailable: {0}")]
    Unavailable(String),
}

impl From<WriteError> for MetadataError {
    fn from(e: WriteError) -> Self {
        match e {
            WriteError::NotController { .. } => MetadataError::NotController,
            WriteError::Timeout => MetadataError::Timeout,
            WriteError::Unavailable(m) => MetadataError::Unavailable(m),
        }
    }
}

impl MetadataError {
    /// The Kafka error a client gets for it: all retriable.
    pub fn api_error(&self) -> gregor_meta::ApiError {
        use gregor_meta::ResponseError;
        match self {
            MetadataError::NotController => gregor_meta::ApiError::new(
                ResponseError::NotController,
                "this node is not the active controller; retry",
            ),
            MetadataError::Timeout => gregor_meta::ApiError::new(
                ResponseError::RequestTimedOut,
                "the controller quorum did not commit the change in time; it may still take effect",
            ),
            other => gregor_meta::ApiError::new(ResponseError::NotController, other.to_string()),
        }
    }
}

/// Applies committed metadata to this node's replicas.
struct ReplicaApplier {
    node_id: i32,
    replicas: Arc<ReplicaManager>,
    /// Until the node has caught up with the metadata log after it started, what was applied
    /// is merged here instead of handed to the replica manager. Replaying the log record by
    /// record would act out its history on today's files: a replica reassigned away and later
    /// back (or a topic's partitions moved off and on again) was stopped and deleted on the way,
    /// and the log on disk that was deleted is the newer one, written after it came back. Merged
    /// from the empty image this node started with, the changes only open replicas; what the
    /// caught-up image no longer assigns is removed as stray afterwards (`partition_dir.rs`).
    /// Kafka's broker likewise publishes metadata to its replica manager only once it has
    /// caught up. `None` once caught up.
    catching_up: Mutex<Option<MetadataDelta>>,
    /// Told of every applied change to this node's broker configs or the cluster default,
    /// a value set again included (see [`MetadataManager::observe_broker_configs`]).
    broker_config_observer: std::sync::OnceLock<BrokerConfigObserver>,
    /// Leader elections committed since this node caught up (the history it replays at
    /// start-up is not counted, as a restarted Kafka controller's counters start at zero).
    elections: ElectionCounters,
}

/// Leader elections this node applied, clean and unclean.
#[derive(Default)]
struct ElectionCounters {
    clean: std::sync::atomic::AtomicU64,
    unclean: std::sync::atomic::AtomicU64,
}

impl ElectionCounters {
    fn add(&self, e: gregor_meta::LeaderElections) {
        use std::sync::atomic::Ordering::Relaxed;
        self.clean.fetch_add(e.clean, Relaxed);
        self.unclean.fetch_add(e.unclean, Relaxed);
    }

    fn read(&self) -> gregor_meta::LeaderElections {
        use std::sync::atomic::Ordering::Relaxed;
        gregor_meta::LeaderElections {
            clean: self.clean.load(Relaxed),
            unclean: self.unclean.load(Relaxed),
        }
    }
}

/// What [`MetadataManager::observe_broker_configs`] calls, with this node's config view.
pub type BrokerConfigObserver =
    Box<dyn Fn(&gregor_meta::config::BrokerConfigView<'_>) + Send + Sync>;

impl ReplicaApplier {
    /// The node has caught up: applies everything merged so far, from now on each change as
    /// it commits. Call under the metadata lock (so no change is applied in between).
    fn caught_up(&self, controller: &Controller) {
        let pending = self
            .catching_up
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take();
        if let Some(delta) = pending {
            self.apply_now(controller, &delta);
        }
    }

    fn apply_now(&self, controller: &Controller, delta: &MetadataDelta) {
        let view = controller.config_view();
        let local = delta.local_changes(self.node_id);
        self.replicas.apply(&view, controller.image(), &local);
        let node = self.node_id.to_string();
        let broker_wide = delta.changed_configs.iter().any(|r| {
            r.resource_type == gregor_meta::ConfigResourceType::Broker
                && (r.name.is_empty() || r.name == node)
        });
        if broker_wide {
            // Broker defaults of topic configs reach every running log.
            self.replicas.reconfigure_all(&view);
            if let Some(observe) = self.broker_config_observer.get() {
                observe(&view);
            }
        } else {
            for resource in &delta.changed_configs {
                if resource.resource_type == gregor_meta::ConfigResourceType::Topic {
                    self.replicas.reconfigure(&resource.name, &view);
                }
            }
        }
        let replicas_changed =
            !(local.leaders.is_empty() && local.followers.is_empty() && local.stopped.is_empty());
        if replicas_changed || !delta.changed_configs.is_empty() {
            self.replicas.update_throttles(&view);
        }
    }
}

impl ApplyListener for ReplicaApplier {
    fn applied(&self, controller: &Controller, delta: &MetadataDelta) {
        let mut catching_up = self
            .catching_up
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        if let Some(pending) = catching_up.as_mut() {
            pending.merge(delta.clone());
            return;
        }
        drop(catching_up);
        self.elections.add(delta.leader_elections());
        self.apply_now(controller, delta);
    }
}

/// Settings of the quorum member, from the broker's configuration.
pub struct QuorumSettings {
    /// A voter (controller role) or a broker-only node following the log.
    pub voter: bool,
    pub voters: BTreeMap<NodeId, String>,
    pub election_timeout_ms: u64,
    pub snapshot_bytes: u64,
    /// How this node reaches the controllers.
    pub transport: SharedTransport,
    /// The seed of topic ids and placement; a random one when `None`. The simulator fixes it.
    pub seed: Option<u64>,
    /// The range an election timeout is drawn from, in place of the one derived from
    /// `election_timeout_ms`. The simulator pins it to one value drawn from its seed (openraft
    /// draws from a generator no seed controls).
    pub election_timeout_range_ms: Option<(u64, u64)>,
    /// What the metadata log is written through (the broker's disk).
    pub disk: gregor_log::Disk,
}

/// This node's part in the quorum.
enum Member {
    /// A controller: a voter of the Raft quorum.
    Voter(Quorum),
    /// A broker-only node: follows the committed log by fetching from the voters.
    Observer(MetadataFollower),
}

pub struct MetadataManager {
    node_id: i32,
    /// How this node reaches each voter's controller listener (`controller.quorum.voters`).
    addresses: BTreeMap<NodeId, String>,
    member: Member,
    static_config: StaticBrokerConfig,
    /// One connection per controller for forwarded requests (more are opened while it is busy).
    forward_clients: Mutex<HashMap<NodeId, Arc<AsyncMutex<RpcClient<SharedTransport>>>>>,
    transport: SharedTransport,
    applier: Arc<ReplicaApplier>,
    /// Fenced brokers Metadata still lists for a moment (see `recent_fencing.rs`).
    recent_fencing: Mutex<RecentFencing>,
    /// How long this voter's writes took to commit while it led (empty elsewhere).
    commit_latency: Histogram,
}

/// 0.25 ms .. ~16 s: a commit takes a quorum round trip and an fsync on a majority.
fn commit_histogram() -> Histogram {
    Histogram::new(exponential_buckets(0.000_25, 2.0, 17))
}

impl MetadataManager {
    /// Opens the metadata log, starts this node's quorum member and applies what is committed
    /// to its image before returning. Its replicas open once it has caught up
    /// ([`MetadataManager::caught_up`]).
    pub async fn open(
        data_dir: &std::path::Path,
        node_id: i32,
        static_config: StaticBrokerConfig,
        settings: QuorumSettings,
        replicas: Arc<ReplicaManager>,
    ) -> Result<MetadataManager, MetadataError> {
        let election = settings.election_timeout_ms.max(10);
        let addresses = settings.voters.clone();
        let config = QuorumConfig {
            node_id: node_id as NodeId,
            voters: settings.voters,
            dir: data_dir.join(METADATA_LOG_DIR),
            faults: settings.disk.faults().cloned(),
            election_timeout_ms: election,
            // openraft also bounds each replication message by this interval: a third of the
            // election timeout leaves a follower that long to sync its log, and still three
            // heartbeats within the shortest election wait (1.5 election timeouts).
            heartbeat_interval_ms: (election / 3).max(5),
            snapshot_bytes: settings.snapshot_bytes,
            static_config: static_config.clone(),
            seed: settings.seed.unwrap_or_else(rand_seed),
            now_ms: now_ms(),
        };
        let applier = Arc::new(ReplicaApplier {
            node_id,
            replicas,
            catching_up: Mutex::new(Some(MetadataDelta::default())),
            broker_config_observer: std::sync::OnceLock::new(),
            elections: ElectionCounters::default(),
        });
        let transport = settings.transport;
        let range = settings.election_timeout_range_ms;
        let member = if settings.voter {
            Member::Voter(
                Quorum::start_with(
                    config,
                    Network::with_addresses(transport.clone(), addresses.clone()),
                    applier.clone(),
                    |c| {
                        if let Some((min, max)) = range {
                            c.election_timeout_min = min;
                            c.election_timeout_max = max;
                        }
                    },
                )
                .await?,
            )
        } else {
            Member::Observer(MetadataFollower::start(
                FollowerConfig {
                    node_id: node_id as NodeId,
                    voters: addresses.clone(),
                    static_config: static_config.clone(),
                    seed: config.seed,
                },
                transport.clone(),
                applier.clone(),
            ))
        };
        let commit_latency = commit_histogram();
        if let Member::Voter(q) = &member {
            let observed = commit_latency.clone();
            q.observe_commits(Box::new(move |d| observed.observe(d.as_secs_f64())));
            // What `gregor storage format` left for a new metadata log (KIP-900 SCRAM credentials,
            // feature levels).
            let bootstrap = crate::bootstrap::read(data_dir)
                .map_err(|e| MetadataError::Unavailable(e.to_string()))?;
            // A new cluster starts at the latest feature levels, as Kafka 4.x formats one.
            let bootstrap = gregor_meta::with_bootstrap_features(bootstrap);
            q.update_volatile(|c| c.set_bootstrap_records(bootstrap));
        }
        Ok(MetadataManager {
            node_id,
            addresses,
            member,
            static_config,
            forward_clients: Mutex::new(HashMap::new()),
            transport,
            applier,
            recent_fencing: Mutex::new(RecentFencing::default()),
            commit_latency,
        })
    }

    pub fn node_id(&self) -> i32 {
        self.node_id
    }

    /// Leader elections applied since this node caught up with the metadata log.
    pub fn leader_elections(&self) -> gregor_meta::LeaderElections {
        self.applier.elections.read()
    }

    /// The commit latency of this voter's writes (Kafka's raft-metrics commit-latency).
    pub fn commit_latency(&self) -> &Histogram {
        &self.commit_latency
    }

    /// This node has caught up with the metadata log (its image holds the registration it made
    /// after it started, or it hosts no replicas): the replica manager gets, at once, what was
    /// committed until now, and from then on each change as it commits.
    pub async fn caught_up(&self) {
        let applier = self.applier.clone();
        self.read(move |controller| applier.caught_up(controller))
            .await;
    }

    /// Calls `observe` whenever this node applies a change to its broker configs or the
    /// cluster default (a value set again included), from the moment it has caught up with
    /// the metadata log (then once for all it replayed). Set once, before catching up.
    pub fn observe_broker_configs(&self, observe: BrokerConfigObserver) {
        let _ = self.applier.broker_config_observer.set(observe);
    }

    pub fn static_config(&self) -> &StaticBrokerConfig {
        &self.static_config
    }

    /// The quorum member, if this node is a voter (for the controller listener).
    pub fn quorum(&self) -> Option<&Quorum> {
        match &self.member {
            Member::Voter(q) => Some(q),
            Member::Observer(_) => None,
        }
    }

    /// The latest committed image this node has applied.
    pub fn image(&self) -> Arc<MetadataImage> {
        match &self.member {
            Member::Voter(q) => q.image(),
            Member::Observer(f) => f.image(),
        }
    }

    /// The fenced brokers of `image` that Metadata still lists (fenced moments ago, see
    /// `recent_fencing.rs`).
    pub fn recently_fenced(&self, image: &MetadataImage) -> Vec<i32> {
        let brokers = image.brokers().values().map(|b| (b.id, b.fenced));
        self.recent_fencing
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .observe(brokers, now_ms())
    }

    /// The active controller as this node knows it.
    pub fn active_controller(&self) -> Option<i32> {
        let id = match &self.member {
            Member::Voter(q) => q.active_controller(),
            Member::Observer(f) => f.active_controller(),
        };
        id.and_then(|id| i32::try_from(id).ok())
    }

    /// Whether this voter has not heard from the active controller it names for a few Raft
    /// heartbeats (it has probably died; an election is due).
    pub fn active_controller_unheard(&self) -> bool {
        match &self.member {
            Member::Voter(q) => q.leader_unheard(),
            Member::Observer(_) => false,
        }
    }

    pub fn is_active_controller(&self) -> bool {
        matches!(self.member, Member::Voter(_)) && self.active_controller() == Some(self.node_id)
    }

    /// Returns once this node no longer names `from` as the active controller.
    pub async fn wait_controller_change(&self, from: i32) {
        let from = u64::try_from(from).ok();
        match &self.member {
            Member::Voter(q) => q.wait_leader_change(from).await,
            Member::Observer(f) => f.wait_leader_change(from).await,
        }
    }

    /// Waits until an active controller is known, at most `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Option<i32> {
        let id = match &self.member {
            Member::Voter(q) => q.wait_for_leader(timeout).await,
            Member::Observer(f) => f.wait_for_leader(timeout).await,
        };
        id.and_then(|id| i32::try_from(id).ok())
    }

    /// Index of the last applied metadata entry plus one.
    pub fn applied_index(&self) -> u64 {
        match &self.member {
            Member::Voter(q) => q.applied_index(),
            Member::Observer(f) => f.applied_index(),
        }
    }

    pub async fn wait_applied(&self, index: u64, timeout: Duration) -> bool {
        match &self.member {
            Member::Voter(q) => q.wait_applied(index, timeout).await,
            Member::Observer(f) => f.wait_applied(index, timeout).await,
        }
    }

    /// Runs a controller operation on this node, which must be the active controller: its
    /// records are committed by the quorum and applied here before the response is returned.
    pub async fn submit<T>(
        &self,
        op: impl FnOnce(&mut Controller) -> ControllerResult<T>,
    ) -> Result<T, MetadataError> {
        match &self.member {
            Member::Voter(q) => {
                let (response, _) = q.write(CONTROLLER_WRITE_TIMEOUT, op).await?;
                Ok(response)
            }
            Member::Observer(_) => Err(MetadataError::NotController),
        }
    }

    /// [`MetadataManager::submit`] for heartbeats and the controller's periodic checks: an
    /// answer that writes no records is not held for a quorum round confirming this node
    /// still leads ([`gregor_quorum::Quorum::write_unconfirmed`]).
    pub async fn submit_unconfirmed<T>(
        &self,
        op: impl FnOnce(&mut Controller) -> ControllerResult<T>,
    ) -> Result<T, MetadataError> {
        match &self.member {
            Member::Voter(q) => {
                let (response, _) = q.write_unconfirmed(CONTROLLER_WRITE_TIMEOUT, op).await?;
                Ok(response)
            }
            Member::Observer(_) => Err(MetadataError::NotController),
        }
    }

    /// Renews a broker's heartbeat session on this controller as the heartbeat arrives
    /// ([`gregor_meta::Controller::renew_session`]); nothing on an observer.
    pub fn renew_session(&self, broker_id: i32, broker_epoch: i64, now_ms: i64) {
        if let Member::Voter(q) = &self.member {
            q.update_volatile(|c| c.renew_session(broker_id, broker_epoch, now_ms));
        }
    }

    /// Reads the controller (configs, describe) without changing it.
    pub async fn read<R>(&self, f: impl FnOnce(&Controller) -> R) -> R {
        match &self.member {
            Member::Voter(q) => q.read(f),
            Member::Observer(o) => o.read(f),
        }
    }

    /// Sends a Kafka request to the controller `target` over the controller RPC.
    pub async fn forward(
        &self,
        target: i32,
        api_key: i16,
        api_version: i16,
        body: Vec<u8>,
        timeout: Duration,
    ) -> Result<KafkaReply, String> {
        let id = target as NodeId;
        let addr = self
            .addresses
            .get(&id)
            .filter(|a| !a.is_empty())
            .cloned()
            .or_else(|| self.quorum().and_then(|q| q.voter_address(id)))
            .ok_or_else(|| format!("no address for controller {target}"))?;
        let shared = {
            let mut clients = self
                .forward_clients
                .lock()
                .unwrap_or_else(PoisonError::into_inner);
            clients
                .entry(id)
                .or_insert_with(|| {
                    Arc::new(AsyncMutex::new(RpcClient::new(
                        self.transport.clone(),
                        addr.clone(),
                    )))
                })
                .clone()
        };
        let mut own;
        let mut guard;
        let client = match shared.try_lock() {
            Ok(g) => {
                guard = g;
                &mut *guard
            }
            Err(_) => {
                own = RpcClient::new(self.transport.clone(), addr);
                &mut own
            }
        };
        let request = RpcRequest::Kafka {
            api_key,
            api_version,
            body,
        };
        match client.call(&request, timeout).await {
            Ok(RpcResponse::Kafka(Ok(reply))) => Ok(reply),
            Ok(RpcResponse::Kafka(Err(e))) => Err(e.to_string()),
            Ok(_) => Err("unexpected controller response".into()),
            Err(e) => Err(e.to_string()),
        }
    }

    /// Stops the quorum member (its log is synced on every append).
    pub async fn close(&self) {
        match &self.member {
            Member::Voter(q) => q.shutdown().await,
            Member::Observer(f) => f.shutdown(),
        }
    }
}

/// Seed for topic ids and placement: different per process, as Kafka's random topic ids are.
fn rand_seed() -> u64 {
    let u = uuid::Uuid::new_v4();
    let (hi, lo) = u.as_u64_pair();
    hi ^ lo
}
