//! The broker: owns the metadata shell, the replica manager and the group coordinator shell,
//! and routes each decoded request to its handler.

use std::path::PathBuf;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use kafka_protocol::messages::broker_registration_request::Listener;
use kafka_protocol::messages::{
    ApiKey, BrokerHeartbeatRequest, BrokerRegistrationRequest, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;
use tracing::{debug, error, info, warn};

use crate::authorize;
use crate::config::BrokerConfig;
use crate::connection::{Handler, Reply, RequestContext};
use crate::forward::{ControlPlane, RegistrationOffsets};
use crate::handlers;
use crate::metadata::{MetadataError, MetadataManager, QuorumSettings};
use crate::producer_ids::ProducerIdAllocator;
use crate::replica::ReplicaManager;
use crate::runtime::now_ms;
use crate::transport::SharedTransport;
use gregor_quorum::rpc::{ForwardHandler, KafkaReply};

/// A running broker's state, shared by all connections.
pub struct Broker {
    pub config: BrokerConfig,
    pub cluster_id: String,
    pub metadata: MetadataManager,
    pub replicas: Arc<ReplicaManager>,
    pub producer_ids: ProducerIdAllocator,
    pub groups: Arc<crate::groups::Groups>,
    /// The transaction coordinator's shards (none until transactions are used).
    pub txns: Arc<crate::txn_shell::Transactions>,
    /// Connections to other brokers for the requests this one sends itself (transaction
    /// markers, KIP-890's verification).
    pub links: Arc<crate::broker_links::BrokerLinks>,
    pub incarnation: gregor_meta::Uuid,
    pub registration_offsets: RegistrationOffsets,
    pub metrics: Arc<crate::metrics::events::BrokerMetrics>,
    /// The rest of the cluster as `/metrics` and the console need it (remote high watermarks,
    /// other nodes' consoles).
    pub cluster_view: Arc<crate::cluster_view::ClusterView>,
    /// Fetch sessions (KIP-227).
    pub fetch_sessions: Mutex<crate::fetch_session::FetchSessionCache>,
    /// Client quota rates and the connections to mute (KIP-219).
    pub client_quotas: crate::client_quota::ClientQuotaManager,
    broker_epoch: AtomicI64,
    /// How this broker reaches other nodes.
    pub transport: SharedTransport,
    /// The controller listener, heartbeat and controller tasks, stopped at shutdown.
    tasks: Mutex<Vec<tokio::task::JoinHandle<()>>>,
    /// Refused controller connections are told at INFO at most every 10 s: a refused node
    /// retries every 100 ms.
    controller_refusals: [crate::runtime::LogEvery; 3],
}

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("data directory {dir}: {source}")]
    DataDir {
        dir: PathBuf,
        source: std::io::Error,
    },
    #[error(transparent)]
    Metadata(#[from] MetadataError),
    #[error("controller listener {addr}: {source}")]
    ControllerListener {
        addr: std::net::SocketAddr,
        source: std::io::Error,
    },
    #[error("broker registration refused: {0}")]
    Registration(String),
}

/// The longest a controlled shutdown waits for a controller that does not answer.
const MAX_CONTROLLED_SHUTDOWN_WAIT: Duration = Duration::from_secs(10);

/// How often the active controller checks broker sessions (a check that finds nothing due
/// costs no quorum round).
const SESSION_CHECK_INTERVAL: Duration = Duration::from_millis(100);

/// What [`Broker::start_with`] takes besides the configuration; [`Broker::start`] uses the
/// defaults (TCP, random seeds). The deterministic simulator (gregor-sim) sets all of them.
pub struct StartOptions {
    /// How the broker reaches other nodes and binds its controller listener.
    pub transport: SharedTransport,
    /// The seed of the controller's topic ids and placement.
    pub seed: Option<u64>,
    /// The incarnation id this start registers with.
    pub incarnation: Option<gregor_meta::Uuid>,
    /// The range openraft draws election timeouts from (see [`QuorumSettings`]).
    pub election_timeout_range_ms: Option<(u64, u64)>,
    /// What every file of the data directory is written through: the real file system, or (in
    /// the simulator) one behind a fault injector that models power loss.
    pub disk: gregor_log::Disk,
}

impl Default for StartOptions {
    fn default() -> Self {
        StartOptions {
            transport: SharedTransport::tcp(),
            seed: None,
            incarnation: None,
            election_timeout_range_ms: None,
            disk: gregor_log::Disk::real(),
        }
    }
}

impl Broker {
    /// Opens the data directory, joins the controller quorum (replaying committed metadata and
    /// opening the hosted logs), starts the controller listener, and registers this broker with
    /// the active controller, waiting until it is unfenced.
    pub async fn start(config: BrokerConfig) -> Result<Arc<Broker>, StartError> {
        Self::start_with(config, StartOptions::default()).await
    }

    /// [`Broker::start`] on another transport, with fixed seeds.
    pub async fn start_with(
        config: BrokerConfig,
        options: StartOptions,
    ) -> Result<Arc<Broker>, StartError> {
        let cluster_id = open_data_dir(&config, &options.disk)?;
        // Bound before the quorum starts, so peers can reach this voter as soon as it runs.
        let controller_listener = match config.controller_bind {
            Some(addr) => Some(
                options
                    .transport
                    .0
                    .bind(addr)
                    .await
                    .map_err(|source| StartError::ControllerListener { addr, source })?,
            ),
            None => None,
        };
        let broker = Self::open(config, options, cluster_id).await?;
        broker.metrics.observe_log_syncs();
        if let Some(listener) = controller_listener {
            broker.serve_controller_listener(listener);
        }
        if !broker.config.is_broker {
            // A controller alone hosts no replicas: nothing to wait for.
            broker.metadata.caught_up().await;
        }
        if broker.config.is_broker {
            broker.register_until_unfenced().await?;
            broker.add_task(crate::runtime::spawn(broker.clone().remove_stray_logs()));
        }
        broker.add_task(crate::runtime::spawn(
            broker.clone().run_controller_duties(),
        ));
        if broker.config.is_broker {
            broker.add_task(crate::runtime::spawn(broker.clone().run_heartbeats()));
        }
        broker.start_alter_partition();
        if broker.config.is_broker {
            broker.add_task(crate::runtime::spawn(broker.clone().run_isr_shrink()));
            broker.start_group_coordinator();
        }
        info!(node = broker.config.node_id, cluster_id = %broker.cluster_id, "broker started");
        Ok(broker)
    }

    /// The broker's state over its data directory: the hosted replicas, the metadata shell
    /// (joined to the controller quorum, replaying committed metadata) and the producer ids.
    async fn open(
        config: BrokerConfig,
        options: StartOptions,
        cluster_id: String,
    ) -> Result<Arc<Broker>, StartError> {
        let dir = config.data_dir.clone();
        let disk = options.disk.clone();
        let metrics = Arc::new(crate::metrics::events::BrokerMetrics::new());
        let replicas = Arc::new(ReplicaManager::new(
            config.node_id,
            &dir,
            disk.clone(),
            metrics.isr_change_counters(),
        ));
        // Replication goes to other brokers' inter-broker listener: over TLS when it is SSL,
        // logged in when it is SASL.
        replicas
            .fetchers()
            .set_transport(crate::transport::inter_broker(
                options.transport.clone(),
                config.inter_broker_tls.clone(),
                config.inter_broker_sasl.clone(),
                config.node_id,
            ));
        replicas.fetchers().set_settings(fetch_settings(&config));
        let metadata = MetadataManager::open(
            &dir,
            config.node_id,
            config.settings.clone(),
            quorum_settings(&config, &options),
            replicas.clone(),
        )
        .await?;
        // Listeners' stores, and the client side of connections to other nodes, reload when
        // this node's broker configs change them.
        let listener_tls = handlers::broker_configs::listener_tls(&config);
        let node = gregor_meta::ConfigResource::broker(config.node_id);
        metadata.observe_broker_configs(Box::new(
            move |view: &gregor_meta::config::BrokerConfigView<'_>| {
                listener_tls.apply(view.image.configs(&node));
            },
        ));
        let producer_ids = ProducerIdAllocator::open_on(disk, &dir, config.node_id)
            .map_err(|source| StartError::DataDir { dir, source })?;
        let cluster_view = Arc::new(crate::cluster_view::ClusterView::new(
            config.node_id,
            bootstrap_address(&config),
            config.metrics_tls.peers.clone(),
            options.transport.dialer(),
        ));
        let incarnation = options
            .incarnation
            .unwrap_or_else(gregor_meta::Uuid::new_v4);
        let links = Arc::new(crate::broker_links::BrokerLinks::new(
            config.node_id,
            crate::transport::inter_broker(
                options.transport.clone(),
                config.inter_broker_tls.clone(),
                config.inter_broker_sasl.clone(),
                config.node_id,
            ),
            crate::broker_links::LinkSettings::default(),
        ));
        Ok(Arc::new(Broker {
            cluster_view,
            incarnation,
            // Session ids from the incarnation: random, but fixed where the simulator fixes it.
            client_quotas: Default::default(),
            fetch_sessions: Mutex::new(crate::fetch_session::FetchSessionCache::new(
                incarnation.as_u64_pair().0,
            )),
            config,
            cluster_id,
            metadata,
            replicas,
            producer_ids,
            groups: Arc::new(crate::groups::Groups::new()),
            txns: Arc::default(),
            links,
            broker_epoch: AtomicI64::new(-1),
            registration_offsets: Mutex::new(std::collections::HashMap::new()),
            transport: options.transport,
            metrics,
            tasks: Mutex::new(Vec::new()),
            controller_refusals: std::array::from_fn(|_| crate::runtime::LogEvery::new(10_000)),
        }))
    }

    /// Accepts the controller listener's connections (quorum RPCs and forwarded requests), on
    /// a task of its own; a node outside the quorum has nothing to serve there.
    fn serve_controller_listener(
        self: &Arc<Self>,
        mut listener: Box<dyn crate::transport::Listener>,
    ) {
        let Some(quorum) = self.metadata.quorum() else {
            return;
        };
        let target = Arc::new(ForwardTarget {
            broker: std::sync::OnceLock::new(),
        });
        let _ = target.broker.set(Arc::downgrade(self));
        let handle = quorum.handle();
        let accept = self.controller_accept();
        let broker = Arc::downgrade(self);
        let task = crate::runtime::spawn(async move {
            loop {
                match listener.accept().await {
                    Ok((stream, peer)) => {
                        let (handle, target, broker, accept) = (
                            handle.clone(),
                            target.clone(),
                            broker.clone(),
                            accept.clone(),
                        );
                        crate::runtime::spawn(async move {
                            let Some(login) =
                                accept_controller_connection(&broker, accept, stream, peer).await
                            else {
                                return;
                            };
                            serve_controller_peer(broker, handle, target, login, peer).await
                        });
                    }
                    Err(e) => {
                        warn!(error = %e, "controller listener accept failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
            }
        });
        self.add_task(task);
    }

    /// Sends the ISR changes this node's leaders propose to the controller (AlterPartition),
    /// on a task of its own.
    fn start_alter_partition(self: &Arc<Self>) {
        let Some(queue) = self.replicas.take_isr_proposals() else {
            return;
        };
        let b = self.clone();
        let task = crate::runtime::spawn(async move {
            crate::alter_partition::run(b.control_plane(), || b.broker_epoch(), queue).await
        });
        self.add_task(task);
    }

    /// Starts the group coordinator's shard manager: coordinator shards follow this node's
    /// `__consumer_offsets` leaderships.
    fn start_group_coordinator(self: &Arc<Self>) {
        let txns = self.txns.clone();
        let txn_settings =
            crate::txn_shell::txn_settings(&self.config).with_metrics(self.metrics.txn_metrics());
        let markers = Arc::new(self.marker_sender());
        let manager = self.groups.start_manager(
            self.replicas.clone(),
            crate::groups::shard_settings(&self.config),
            move |replicas| txns.reconcile(replicas, &txn_settings, &markers),
        );
        self.add_task(manager);
        // Groups can only be on the `load` assignor when it is allowed.
        let load = crate::groups::consumer_settings(&self.config).assignors;
        if !load.iter().any(|a| a == gregor_assign::load::NAME) {
            return;
        }
        let interval = self
            .config
            .int("group.consumer.load.review.interval.ms")
            .max(1) as u64;
        let b = self.clone();
        self.add_task(crate::runtime::spawn(async move {
            let sources = crate::load_review::Sources {
                groups: &b.groups,
                metadata: &b.metadata,
                replicas: &b.replicas,
                cluster_view: &b.cluster_view,
            };
            crate::load_review::run(sources, Duration::from_millis(interval)).await
        }));
    }

    /// The transaction coordinator's marker sender: to other brokers over the inter-broker
    /// listener, as replication does.
    fn marker_sender(self: &Arc<Self>) -> crate::txn_markers::MarkerSender {
        let weak = Arc::downgrade(self);
        crate::txn_markers::MarkerSender::new(
            self.config.node_id,
            Arc::new(move || {
                weak.upgrade()
                    .map(|b| b.metadata.image())
                    .unwrap_or_default()
            }),
            self.replicas.clone(),
            self.links.clone(),
            Arc::downgrade(self) as std::sync::Weak<dyn crate::data_plane::TxnHooks>,
        )
    }

    fn add_task(&self, task: tokio::task::JoinHandle<()>) {
        self.tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(task);
    }

    /// Registers with the active controller (retrying until one answers), opens the replicas
    /// it hosts once it has caught up with the metadata (see [`MetadataManager::caught_up`]),
    /// then heartbeats until the controller unfences this broker.
    async fn register_until_unfenced(self: &Arc<Self>) -> Result<(), StartError> {
        let mut warned = tokio::time::Instant::now();
        loop {
            if self.metadata.active_controller().is_none() {
                self.metadata.wait_for_leader(Duration::from_secs(1)).await;
            }
            match self.register().await {
                Ok(()) => break,
                Err(RegisterError::Refused(e)) => return Err(StartError::Registration(e)),
                Err(RegisterError::Retriable(e)) => {
                    if warned.elapsed() > Duration::from_secs(5) {
                        warn!(error = %e, "still waiting for an active controller to register with");
                        warned = tokio::time::Instant::now();
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        }
        if !self.wait_for_own_registration().await {
            warn!(
                node = self.config.node_id,
                "own registration not seen in the metadata; opening the replicas it assigns as they are"
            );
        }
        self.metadata.caught_up().await;
        loop {
            match self.heartbeat(false).await {
                Ok(reply) if !reply.is_fenced => return Ok(()),
                Ok(_) => {}
                Err(e) => {
                    if warned.elapsed() > Duration::from_secs(5) {
                        warn!(error = %e, "still waiting to be unfenced");
                        warned = tokio::time::Instant::now();
                    }
                }
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Waits (at most a minute) until this node's image holds its own current registration,
    /// so it has applied every record that could have made it host a replica before it
    /// stopped; whether it does.
    async fn wait_for_own_registration(&self) -> bool {
        let node = self.config.node_id;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let epoch = self.broker_epoch.load(Ordering::SeqCst);
            let image = self.metadata.image();
            if image.broker(node).is_some_and(|b| b.epoch == epoch) {
                return true;
            }
            if tokio::time::Instant::now() > deadline {
                return false;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    /// Once this node has caught up with the metadata, deletes the partition directories its
    /// image no longer assigns to it (see `partition_dir.rs`).
    async fn remove_stray_logs(self: Arc<Self>) {
        if !self.wait_for_own_registration().await {
            warn!(
                node = self.config.node_id,
                "own registration not seen in the metadata; stray partition directories are left in place"
            );
            return;
        }
        let replicas = self.replicas.clone();
        let set_aside = self
            .metadata
            .read(|controller| replicas.set_aside_stray_logs(controller.image()))
            .await;
        if !set_aside.is_empty() {
            let replicas = self.replicas.clone();
            crate::runtime::blocking(move || replicas.purge_deleted()).await;
        }
    }

    /// One BrokerRegistration with the active controller.
    async fn register(self: &Arc<Self>) -> Result<(), RegisterError> {
        let mut request = BrokerRegistrationRequest::default();
        request.broker_id = kafka_protocol::messages::BrokerId(self.config.node_id);
        request.cluster_id = handlers::s(self.cluster_id.clone());
        request.incarnation_id = self.incarnation;
        // Every advertised client listener, the inter-broker one first (other nodes reach this
        // one at the first endpoint).
        request.listeners = self
            .config
            .listeners
            .iter()
            .filter_map(|l| {
                let (host, port) = l.advertised.clone()?;
                let mut listener = Listener::default();
                listener.name = handlers::s(l.name.clone());
                listener.host = handlers::s(host);
                listener.port = port;
                listener.security_protocol = l.security_protocol.id();
                Some(listener)
            })
            .collect();
        request.rack = self.config.rack.clone().map(handlers::s);
        let response = crate::forward::to_controller(
            self.control_plane(),
            ApiKey::BrokerRegistration,
            0,
            RequestKind::BrokerRegistration(request),
        )
        .await;
        let Some(ResponseKind::BrokerRegistration(r)) = response else {
            return Err(RegisterError::Retriable("no registration response".into()));
        };
        match ResponseError::try_from_code(r.error_code) {
            None => {
                self.broker_epoch.store(r.broker_epoch, Ordering::SeqCst);
                info!(
                    node = self.config.node_id,
                    epoch = r.broker_epoch,
                    "registered with the controller"
                );
                Ok(())
            }
            Some(
                e @ (ResponseError::NotController
                | ResponseError::RequestTimedOut
                | ResponseError::DuplicateBrokerRegistration),
            ) => Err(RegisterError::Retriable(format!("{e:?}"))),
            Some(e) => Err(RegisterError::Refused(format!("{e:?}"))),
        }
    }

    /// One BrokerHeartbeat to the active controller. A heartbeat refused because the
    /// controller no longer knows this registration registers again.
    pub async fn heartbeat(
        self: &Arc<Self>,
        want_shut_down: bool,
    ) -> Result<gregor_meta::BrokerHeartbeatReply, String> {
        let mut request = BrokerHeartbeatRequest::default();
        request.broker_id = kafka_protocol::messages::BrokerId(self.config.node_id);
        request.broker_epoch = self.broker_epoch.load(Ordering::SeqCst);
        request.current_metadata_offset = self.metadata.applied_index() as i64 - 1;
        request.want_fence = false;
        request.want_shut_down = want_shut_down;
        let response = crate::forward::to_controller(
            self.control_plane(),
            ApiKey::BrokerHeartbeat,
            0,
            RequestKind::BrokerHeartbeat(request),
        )
        .await;
        let Some(ResponseKind::BrokerHeartbeat(r)) = response else {
            return Err("no heartbeat response".into());
        };
        match ResponseError::try_from_code(r.error_code) {
            None => Ok(gregor_meta::BrokerHeartbeatReply {
                is_fenced: r.is_fenced,
                should_shut_down: r.should_shut_down,
            }),
            Some(e @ (ResponseError::StaleBrokerEpoch | ResponseError::BrokerIdNotRegistered)) => {
                warn!(error = ?e, "heartbeat refused; registering again");
                self.register().await.map_err(|e| e.to_string())?;
                Err(format!("{e:?}"))
            }
            Some(e) => Err(format!("{e:?}")),
        }
    }

    /// Heartbeats to the active controller every `broker.heartbeat.interval.ms`, in a task of
    /// its own: a heartbeat waiting on a controller that is changing must not hold up the
    /// controller's own duties on this node.
    async fn run_heartbeats(self: Arc<Self>) {
        let every =
            Duration::from_millis(self.config.int("broker.heartbeat.interval.ms").max(10) as u64);
        let mut heartbeat = tokio::time::interval(every);
        heartbeat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            heartbeat.tick().await;
            if let Err(e) = self.heartbeat(false).await {
                // Normal while the controller changes; the next heartbeat retries.
                debug!(error = %e, "heartbeat failed");
            }
        }
    }

    /// While this node is the active controller: fences brokers whose sessions expired, moves
    /// leadership back to preferred replicas, and, on taking over, fences at once the brokers
    /// whose processes are gone (a new controller gives every broker a full session, so a
    /// broker that died with the old controller would otherwise stay in the ISRs that long).
    async fn run_controller_duties(self: Arc<Self>) {
        let mut sessions = tokio::time::interval(SESSION_CHECK_INTERVAL);
        sessions.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // Automatic leader rebalance: the first check one interval after start, as in Kafka.
        let imbalance_every = Duration::from_secs(
            self.config
                .int("leader.imbalance.check.interval.seconds")
                .max(1) as u64,
        );
        let mut imbalance = tokio::time::interval_at(
            tokio::time::Instant::now() + imbalance_every,
            imbalance_every,
        );
        imbalance.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut controller = None;
        loop {
            let leader = self.metadata.active_controller();
            if leader != controller {
                controller = leader;
                if self.metadata.is_active_controller() {
                    info!(node = self.config.node_id, "became the active controller");
                    self.probe_brokers_on_takeover();
                }
            }
            tokio::select! {
                _ = self.metadata.wait_controller_change(leader.unwrap_or(-1)) => {}
                _ = imbalance.tick() => self.rebalance_leaders().await,
                _ = sessions.tick() => self.check_sessions().await,
            }
        }
    }

    /// A new active controller probes every unfenced broker's listener (see
    /// [`crate::forward::check_brokers_alive`]).
    fn probe_brokers_on_takeover(self: &Arc<Self>) {
        let brokers: Vec<i32> = self
            .metadata
            .image()
            .active_brokers()
            .map(|b| b.id)
            .filter(|&id| id != self.config.node_id)
            .collect();
        if brokers.is_empty() {
            return;
        }
        let b = self.clone();
        crate::runtime::spawn(async move {
            crate::forward::check_brokers_alive(b.control_plane(), brokers).await
        });
    }

    async fn rebalance_leaders(&self) {
        if !self.metadata.is_active_controller() {
            return;
        }
        let result = self
            .metadata
            .submit_unconfirmed(|c| gregor_meta::ControllerResult {
                records: c.rebalance_leaders(),
                response: (),
            })
            .await;
        if let Err(e) = result {
            warn!(error = %e, "automatic leader rebalance failed");
        }
    }

    /// Fences brokers whose sessions expired; a quorum round only when one may have.
    async fn check_sessions(&self) {
        if !self.metadata.is_active_controller() {
            return;
        }
        let now = now_ms();
        if !self.metadata.read(|c| c.sessions_due(now)).await {
            return;
        }
        let result = self
            .metadata
            .submit_unconfirmed(|c| gregor_meta::ControllerResult {
                records: c.tick(now_ms()),
                response: (),
            })
            .await;
        if let Err(e) = result {
            warn!(error = %e, "broker session check failed");
        }
    }

    /// This broker's epoch (its latest registration), -1 before it registered.
    pub fn broker_epoch(&self) -> i64 {
        self.broker_epoch.load(Ordering::SeqCst)
    }

    /// Every `replica.lag.time.max.ms / 2`, leaders drop from their ISRs the followers that
    /// have not caught up for `replica.lag.time.max.ms`.
    async fn run_isr_shrink(self: Arc<Self>) {
        let lag_max_ms = self.config.int("replica.lag.time.max.ms").max(1);
        let mut check =
            tokio::time::interval(Duration::from_millis((lag_max_ms as u64 / 2).max(10)));
        check.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            check.tick().await;
            let now = now_ms();
            for part in self.replicas.all() {
                if let Some(p) = part.shrink_isr(now, lag_max_ms) {
                    self.replicas.propose_isr(&part, p);
                }
            }
        }
    }

    /// Background duties: retention, the log cleaner (its own task), the deletion of removed
    /// segments' files, checkpoints, producer expiry.
    pub async fn run_background(self: Arc<Self>, mut shutdown: tokio::sync::watch::Receiver<bool>) {
        if self.config.bool("log.cleaner.enable") {
            let b = self.clone();
            let backoff_ms = move || b.dynamic_i64("log.cleaner.backoff.ms");
            let cleaner = crate::log_cleaner::LogCleaner::new(
                self.replicas.clone(),
                &self.config,
                backoff_ms,
                self.metrics.log_cleaner().clone(),
            );
            crate::runtime::spawn(cleaner.run(shutdown.clone()));
        }
        let mut cleanup = tokio::time::interval(std::time::Duration::from_millis(
            self.config.int("log.retention.check.interval.ms").max(1000) as u64,
        ));
        let mut retired_files = tokio::time::interval(crate::log_cleaner::RETIRED_FILES_CHECK);
        retired_files.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut checkpoint = tokio::time::interval(std::time::Duration::from_millis(
            self.config
                .int("log.flush.offset.checkpoint.interval.ms")
                .max(100) as u64,
        ));
        let mut producer_expiry = tokio::time::interval(std::time::Duration::from_millis(
            self.config
                .int("producer.id.expiration.check.interval.ms")
                .max(1) as u64,
        ));
        loop {
            tokio::select! {
                _ = cleanup.tick() => {
                    let parts = self.replicas.all();
                    crate::runtime::blocking(move || {
                        let now = now_ms();
                        for p in parts {
                            let start = p.log.log_start_offset();
                            if let Err(e) = p.log.apply_retention(now) {
                                warn!(topic = %p.topic, partition = p.index, error = %e, "retention failed");
                            }
                            if p.log.log_start_offset() != start {
                                p.log_start_moved();
                            }
                        }
                    }).await;
                }
                _ = retired_files.tick() => crate::log_cleaner::delete_retired_files(&self.replicas).await,
                _ = checkpoint.tick() => {
                    let parts = self.replicas.all();
                    crate::runtime::blocking(move || {
                        for p in parts {
                            let _ = p.log.flush_if_due(now_ms());
                            let _ = p.log.checkpoint();
                            if let Err(e) = p.snapshot_producers() {
                                warn!(topic = %p.topic, partition = p.index, error = %e, "cannot write the producer-state snapshot");
                            }
                        }
                    }).await;
                }
                _ = producer_expiry.tick() => self.expire_producers().await,
                _ = shutdown.changed() => return,
            }
        }
    }

    /// Forgets idempotent producers that have not written to a partition for
    /// `producer.id.expiration.ms` (a dynamic broker config).
    async fn expire_producers(&self) {
        let expiration_ms = self.dynamic_i64("producer.id.expiration.ms");
        let now = now_ms();
        for p in self.replicas.all() {
            let expired = p.expire_producers(now, expiration_ms).await;
            if expired > 0 {
                info!(topic = %p.topic, partition = p.index, expired, "expired idempotent producer ids");
            }
        }
    }

    /// Controlled shutdown: where another broker can take over, the controller moves this
    /// broker's leaderships away (and takes it out of the ISRs) before it stops.
    async fn controlled_shutdown(self: &Arc<Self>) {
        if !self.config.is_broker {
            return;
        }
        let others = self
            .metadata
            .image()
            .active_brokers()
            .filter(|b| b.id != self.config.node_id)
            .count();
        if others == 0 {
            return;
        }
        // Past the session timeout the controller fences this broker anyway; waiting longer for
        // a controller that does not answer (no majority) gains nothing.
        let bound =
            Duration::from_millis(self.config.int("broker.session.timeout.ms").max(1) as u64)
                .min(MAX_CONTROLLED_SHUTDOWN_WAIT);
        let started = tokio::time::Instant::now();
        let done = tokio::time::timeout(bound, async {
            loop {
                match self.heartbeat(true).await {
                    Ok(reply) if reply.should_shut_down => return,
                    Ok(_) => {}
                    Err(e) => warn!(error = %e, "controlled shutdown request failed; retrying"),
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await;
        match done {
            Ok(()) => info!(
                elapsed_ms = started.elapsed().as_millis() as u64,
                "controlled shutdown complete: leaderships moved away"
            ),
            Err(_) => warn!("controlled shutdown timed out; stopping anyway"),
        }
    }

    /// Clean shutdown: leaderships handed over, quorum member stopped, logs synced,
    /// checkpoints and clean-shutdown markers written.
    pub async fn shutdown(self: &Arc<Self>) {
        self.controlled_shutdown().await;
        for task in self
            .tasks
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .drain(..)
        {
            task.abort();
        }
        self.replicas.fetchers().shutdown();
        self.metadata.close().await;
        let threads = self.dynamic_i64("num.recovery.threads.per.data.dir").max(1) as usize;
        let replicas = &self.replicas;
        tokio::task::block_in_place(|| replicas.close_all(threads));
        info!("broker stopped cleanly");
    }
}

#[derive(Debug, thiserror::Error)]
enum RegisterError {
    #[error("{0}")]
    Retriable(String),
    #[error("{0}")]
    Refused(String),
}

/// Creates the data directory (purging what a crash left half-deleted) and reads or records
/// the cluster id in it.
fn open_data_dir(config: &BrokerConfig, disk: &gregor_log::Disk) -> Result<String, StartError> {
    let dir = &config.data_dir;
    disk.create_dir_all(dir)
        .and_then(|()| disk.purge_deleted_dirs(dir))
        .map_err(|e| StartError::DataDir {
            dir: dir.clone(),
            source: std::io::Error::other(e),
        })?;
    // A cluster of one without `controller.quorum.voters` gets a random id; configured
    // voters give every node configured alike the same one.
    let configured_voters = if config.voters_configured() {
        config.voters.clone()
    } else {
        Default::default()
    };
    crate::cluster_id::cluster_id_for(disk, dir, &configured_voters, config.cluster_id.as_deref())
        .map_err(|source| StartError::DataDir {
            dir: dir.clone(),
            source,
        })
}

/// The replica fetchers' `replica.*` settings.
fn fetch_settings(config: &BrokerConfig) -> crate::fetcher::FetchSettings {
    let ms = |key: &str, min: i64| Duration::from_millis(config.int(key).max(min) as u64);
    crate::fetcher::FetchSettings {
        partition_max_bytes: config.int("replica.fetch.max.bytes") as i32,
        response_max_bytes: config.int("replica.fetch.response.max.bytes") as i32,
        min_bytes: config.int("replica.fetch.min.bytes") as i32,
        max_wait: ms("replica.fetch.wait.max.ms", 0),
        backoff: ms("replica.fetch.backoff.ms", 0),
        socket_timeout: ms("replica.socket.timeout.ms", 1),
    }
}

/// What a connection to the controller listener goes through before its first RPC, per the
/// listener's protocol: TLS (SSL, SASL_SSL), then the SASL login (SASL_PLAINTEXT, SASL_SSL).
#[derive(Clone)]
struct ControllerAccept {
    tls: Option<crate::tls::TlsListener>,
    sasl: Option<crate::sasl_session::SaslSetup>,
}

/// SCRAM credentials for logins on the controller listener: the metadata image's, or, while
/// the image is still empty (a new metadata log, before its first commit), those of
/// `gregor storage format --add-scram` (KIP-900), which the first commit will hold. Without the
/// fallback, voters of a new cluster could not verify each other's SCRAM logins to elect the
/// leader whose first write commits the credentials.
struct ControllerCredentials {
    broker: std::sync::Weak<Broker>,
    bootstrap: gregor_meta::MetadataImage,
}

impl crate::sasl_session::ScramCredentialSource for ControllerCredentials {
    fn scram_credential(
        &self,
        user: &str,
        mechanism: gregor_sasl::ScramMechanism,
    ) -> Option<gregor_sasl::ScramCredential> {
        let image = self.broker.upgrade()?.metadata.image();
        let source = match *image == gregor_meta::MetadataImage::default() {
            true => &self.bootstrap,
            false => &*image,
        };
        source.scram_credentials().get(user, mechanism).cloned()
    }
}

impl Broker {
    /// Whether `listener` is the controller listener this node serves.
    fn serves_controller_listener(&self, listener: &str) -> bool {
        let served = self.config.controller_tls.server_name.as_deref();
        served.is_some_and(|name| name.eq_ignore_ascii_case(listener))
    }

    /// How the controller listener's connections are accepted (see [`ControllerAccept`]).
    fn controller_accept(self: &Arc<Self>) -> ControllerAccept {
        let security = &self.config.controller_tls;
        let sasl = security.server_sasl.clone().map(|listener| {
            let mut bootstrap = gregor_meta::MetadataImage::default();
            match crate::bootstrap::read(&self.config.data_dir) {
                Ok(records) => records.iter().for_each(|r| {
                    let _ = bootstrap.apply(r);
                }),
                Err(e) => warn!(error = %e, "bootstrap records not read for controller logins"),
            }
            crate::sasl_session::SaslSetup {
                listener,
                credentials: Arc::new(ControllerCredentials {
                    broker: Arc::downgrade(self),
                    bootstrap,
                }),
            }
        });
        ControllerAccept {
            tls: security.server.clone(),
            sasl,
        }
    }
}

/// A controller connection past TLS and the SASL login.
struct ControllerLogin {
    stream: crate::transport::Stream,
    /// The SASL login's, else the certificate's, else `User:ANONYMOUS`.
    principal: crate::security::KafkaPrincipal,
    /// When the SASL session ends (`connections.max.reauth.ms`).
    session_end: Option<tokio::time::Instant>,
    /// Whether the listener has TLS or SASL (a PLAINTEXT one checks nothing).
    secured: bool,
}

/// A new connection to the controller listener: TLS and the SASL login as the listener's
/// protocol says, each bounded by `connections.max.idle.ms`. `None`: refused, and logged why.
async fn accept_controller_connection(
    broker: &std::sync::Weak<Broker>,
    accept: ControllerAccept,
    stream: crate::transport::Stream,
    peer: std::net::SocketAddr,
) -> Option<ControllerLogin> {
    if accept.tls.is_none() && accept.sasl.is_none() {
        return Some(ControllerLogin {
            stream,
            principal: crate::security::KafkaPrincipal::anonymous(),
            session_end: None,
            secured: false,
        });
    }
    let idle = {
        let b = broker.upgrade()?;
        u64::try_from(b.config.int("connections.max.idle.ms"))
            .ok()
            .map(Duration::from_millis)
    };
    let (mut stream, principal) = match accept.tls {
        Some(tls) => match tls.accept(stream, idle).await {
            Ok((s, p)) => (Box::new(s) as crate::transport::Stream, p),
            Err(e) => {
                refused(broker, peer, Refusal::Tls, &e);
                return None;
            }
        },
        None => (stream, crate::security::KafkaPrincipal::anonymous()),
    };
    let (principal, session_end) = match accept.sasl {
        Some(setup) => match crate::controller_sasl::login(&mut stream, setup, idle).await {
            Ok(login) => ((*login.principal).clone(), login.session_end),
            Err(e) => {
                refused(broker, peer, Refusal::Sasl, &e);
                return None;
            }
        },
        None => (principal, None),
    };
    Some(ControllerLogin {
        stream,
        principal,
        session_end,
        secured: true,
    })
}

/// A controller connection past its login: the quorum's RPCs from another node, or an admin
/// tool's Kafka requests (KIP-919; see `controller_kafka`). With an authorizer configured and
/// a TLS or SASL listener, RPCs (quorum, BrokerRegistration, BrokerHeartbeat, forwarded
/// requests) need Kafka's check of the controller-only APIs: CLUSTER_ACTION on the cluster for
/// the connection's principal (normally in `super.users`); a Kafka client's requests are each
/// authorized as on a client listener.
async fn serve_controller_peer(
    broker: std::sync::Weak<Broker>,
    quorum: gregor_quorum::QuorumHandle,
    target: Arc<ForwardTarget>,
    login: ControllerLogin,
    peer: std::net::SocketAddr,
) {
    use crate::controller_kafka::{first_frame, FirstFrame};
    let max = usize::try_from(gregor_quorum::MAX_MESSAGE_BYTES).unwrap_or(usize::MAX);
    let is_rpc =
        |frame: &[u8]| gregor_quorum::decode::<gregor_quorum::rpc::RpcRequest>(frame).is_ok();
    let Some((kind, stream)) = first_frame(login.stream, max, is_rpc).await else {
        return;
    };
    match kind {
        FirstFrame::Rpc => {
            if login.secured && !controller_peer_authorized(&broker, peer, &login.principal) {
                return;
            }
            let session_end = login.session_end;
            gregor_quorum::rpc::serve_controller_session(stream, quorum, target, session_end).await
        }
        FirstFrame::Kafka => {
            let Some(b) = broker.upgrade() else {
                return;
            };
            serve_controller_clients(b, stream, login.principal, login.session_end, peer).await
        }
    }
}

/// An admin tool's Kafka requests on the controller listener, as `principal`, until it closes,
/// its SASL session ends (`session_end`; no re-authentication there) or the node stops.
async fn serve_controller_clients<S>(
    b: Arc<Broker>,
    stream: S,
    principal: crate::security::KafkaPrincipal,
    session_end: Option<tokio::time::Instant>,
    peer: std::net::SocketAddr,
) where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send + 'static,
{
    // Apart from the client listeners' ids (`server`), which count from 0.
    static IDS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(1 << 62);
    let id = IDS.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let security = &b.config.controller_tls;
    let security = crate::connection::ConnectionSecurity {
        listener_name: security
            .server_name
            .as_deref()
            .unwrap_or("CONTROLLER")
            .into(),
        security_protocol: security
            .server_protocol
            .unwrap_or(crate::security::SecurityProtocol::Plaintext),
        principal: Arc::new(principal),
        sasl: None,
    };
    debug!(%peer, connection_id = id, principal = %security.principal, "a Kafka client on the controller listener");
    let limits = crate::connection::RequestLimits::of(&b.config);
    let (ended, end) = tokio::sync::watch::channel(false);
    if let Some(at) = session_end {
        let ended = ended.clone();
        crate::runtime::spawn(async move {
            tokio::time::sleep_until(at).await;
            let _ = ended.send(true);
        });
    }
    let (rd, wr) = tokio::io::split(stream);
    let handler = Arc::new(ControllerListenerClients(b));
    crate::connection::serve_io_as(rd, wr, security, peer, id, handler, limits, end).await;
    drop(ended);
}

/// What Kafka clients on the controller listener may ask (`api::CONTROLLER_LISTENER_APIS`);
/// anything else closes the connection, as Kafka's controllers refuse an API their listener
/// does not serve.
struct ControllerListenerClients(Arc<Broker>);

impl Handler for ControllerListenerClients {
    async fn handle(self: Arc<Self>, ctx: RequestContext, request: RequestKind) -> Reply {
        if !crate::api::CONTROLLER_LISTENER_APIS.contains(&ctx.api_key) {
            debug!(api = ?ctx.api_key, "closing a Kafka client's controller connection: not an API of the controller listener");
            return Reply::Close;
        }
        match request {
            RequestKind::ApiVersions(r) => {
                let b = &self.0;
                let mut resp = handlers::cluster::api_versions(&r, ctx.api_version, &b.metadata);
                resp.api_keys = crate::api::controller_listener_api_versions();
                Reply::Respond(ResponseKind::ApiVersions(resp))
            }
            r => dispatch(&self.0, &ctx, r).await,
        }
    }
}

/// Why a controller connection was closed; each is told at INFO at most every 10 s.
#[derive(Debug, Clone, Copy)]
enum Refusal {
    Tls = 0,
    Sasl = 1,
    NotAuthorized = 2,
}

/// Logs a refused controller connection: at INFO at most every 10 s for each reason (with
/// how many were held back), else at DEBUG.
fn refused(
    broker: &std::sync::Weak<Broker>,
    peer: std::net::SocketAddr,
    why: Refusal,
    error: &dyn std::fmt::Display,
) {
    let due = broker
        .upgrade()
        .and_then(|b| b.controller_refusals[why as usize].due(crate::runtime::now_ms()));
    let Some(held_back) = due else {
        debug!(%peer, ?why, error = %error, "closing controller connection");
        return;
    };
    match why {
        Refusal::Tls => {
            info!(%peer, error = %error, held_back, "closing controller connection: TLS handshake failed")
        }
        Refusal::Sasl => {
            info!(%peer, error = %error, held_back, "closing controller connection: SASL authentication failed")
        }
        Refusal::NotAuthorized => {
            info!(%peer, error = %error, held_back, "closing controller connection: principal not authorized")
        }
    }
}

/// Whether `principal` may speak on the controller listener: CLUSTER_ACTION on the cluster,
/// when an authorizer is configured.
fn controller_peer_authorized(
    broker: &std::sync::Weak<Broker>,
    peer: std::net::SocketAddr,
    principal: &crate::security::KafkaPrincipal,
) -> bool {
    let Some(b) = broker.upgrade() else {
        return false;
    };
    let Some(config) = gregor_meta::acl::AuthorizerConfig::from_static(b.metadata.static_config())
    else {
        return true;
    };
    let image = b.metadata.image();
    let name = principal.to_string();
    let who = gregor_meta::acl::RequestIdentity {
        principal: &name,
        host: peer.ip(),
    };
    let allowed = gregor_meta::acl::Authorizer::new(image.acls(), &config)
        .authorize(
            &who,
            gregor_meta::acl::AclOperation::ClusterAction,
            gregor_meta::acl::AclResourceType::Cluster,
            gregor_meta::acl::CLUSTER_RESOURCE_NAME,
        )
        .is_allowed();
    if !allowed {
        let why = format!("{principal} may not ClusterAction on the cluster");
        refused(broker, peer, Refusal::NotAuthorized, &why);
        return false;
    }
    debug!(%peer, %principal, "controller connection authenticated");
    true
}

/// How this node takes part in the controller quorum.
fn quorum_settings(config: &BrokerConfig, options: &StartOptions) -> QuorumSettings {
    QuorumSettings {
        voter: config.is_controller,
        voters: config.voters.clone(),
        election_timeout_ms: config.int("controller.quorum.election.timeout.ms") as u64,
        snapshot_bytes: config.int("metadata.log.max.record.bytes.between.snapshots") as u64,
        // Quorum RPCs, registration, heartbeats and forwarding: over TLS when the controller
        // listener is SSL or SASL_SSL, logged in when it is SASL.
        transport: crate::transport::controller(
            options.transport.clone(),
            config.controller_tls.client.clone(),
            config.controller_tls.client_sasl.clone(),
            config.node_id,
        ),
        seed: options.seed,
        election_timeout_range_ms: options.election_timeout_range_ms,
        disk: options.disk.clone(),
    }
}

/// This broker's advertised client endpoint as a bootstrap address (IPv6 hosts bracketed).
fn bootstrap_address(config: &BrokerConfig) -> String {
    if config.advertised_host.contains(':') {
        format!("[{}]:{}", config.advertised_host, config.advertised_port)
    } else {
        format!("{}:{}", config.advertised_host, config.advertised_port)
    }
}

/// Asks the authorizer (`authorize::gate`: with `authorizer.class.name` set, what Kafka checks
/// of each API, with the connection's principal and address), then routes what may run to its
/// handler and completes the answer with the refused parts.
async fn dispatch(b: &Arc<Broker>, ctx: &RequestContext, request: RequestKind) -> Reply {
    let access = authorize::Access::for_request(&b.metadata, ctx);
    let (request, fixup) = match access.image() {
        None => (request, authorize::no_fixup()),
        Some(image) => {
            match authorize::gate(&access, image, ctx.api_key, ctx.api_version, request) {
                authorize::Gate::Answer(reply) => return reply,
                authorize::Gate::Run(request, fixup) => (request, fixup),
            }
        }
    };
    let reply = route(b, ctx, &access, request).await;
    fixup(&access as &dyn authorize::Decide, reply)
}

/// Routes a request to its handler, with the services that handler runs on.
async fn route(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    access: &authorize::Access,
    request: RequestKind,
) -> Reply {
    let v = ctx.api_version;
    Reply::Respond(match request {
        RequestKind::FindCoordinator(r) => ResponseKind::FindCoordinator(
            handlers::coordinator::find_coordinator(
                b.control_plane(),
                &b.groups,
                &b.txns,
                r,
                v,
                &ctx.listener_name,
            )
            .await,
        ),
        r @ (RequestKind::JoinGroup(_)
        | RequestKind::SyncGroup(_)
        | RequestKind::Heartbeat(_)
        | RequestKind::LeaveGroup(_)
        | RequestKind::OffsetCommit(_)
        | RequestKind::OffsetFetch(_)
        | RequestKind::DescribeGroups(_)
        | RequestKind::ListGroups(_)
        | RequestKind::DeleteGroups(_)
        | RequestKind::OffsetDelete(_)
        | RequestKind::ConsumerGroupHeartbeat(_)
        | RequestKind::ConsumerGroupDescribe(_)) => {
            return handlers::groups::handle(b.control_plane(), &b.groups, ctx, r)
                .await
                .into()
        }
        RequestKind::TxnOffsetCommit(r) => return b.txn_offset_commit(ctx, r).await,
        RequestKind::ApiVersions(r) => {
            ResponseKind::ApiVersions(handlers::cluster::api_versions(&r, v, &b.metadata))
        }
        RequestKind::Metadata(r) => {
            let listener = &ctx.listener_name;
            ResponseKind::Metadata(
                handlers::cluster::metadata(b.control_plane(), r, v, listener, access).await,
            )
        }
        RequestKind::DescribeCluster(r) => {
            let controllers = b
                .serves_controller_listener(&ctx.listener_name)
                .then_some(&b.config.voters);
            ResponseKind::DescribeCluster(handlers::cluster::describe_cluster(
                b.control_plane(),
                &r,
                v,
                &ctx.listener_name,
                controllers,
                access,
            ))
        }
        r @ (RequestKind::CreateTopics(_)
        | RequestKind::DeleteTopics(_)
        | RequestKind::CreatePartitions(_)
        | RequestKind::IncrementalAlterConfigs(_)
        | RequestKind::AlterConfigs(_)
        | RequestKind::ElectLeaders(_)
        | RequestKind::AlterPartitionReassignments(_)
        | RequestKind::AlterUserScramCredentials(_)
        | RequestKind::AlterClientQuotas(_)
        | RequestKind::UpdateFeatures(_)
        | RequestKind::DescribeClientQuotas(_)
        | RequestKind::CreateAcls(_)
        | RequestKind::DeleteAcls(_)
        | RequestKind::DescribeAcls(_)
        | RequestKind::DescribeLogDirs(_)
        | RequestKind::ListPartitionReassignments(_)
        | RequestKind::DescribeUserScramCredentials(_)
        | RequestKind::DescribeConfigs(_)) => return route_admin(b, ctx, r).await,
        r @ (RequestKind::InitProducerId(_)
        | RequestKind::AddPartitionsToTxn(_)
        | RequestKind::AddOffsetsToTxn(_)
        | RequestKind::EndTxn(_)
        | RequestKind::DescribeTransactions(_)
        | RequestKind::ListTransactions(_)) => return route_txn(b, ctx, r).await,
        r @ (RequestKind::Produce(_)
        | RequestKind::Fetch(_)
        | RequestKind::ListOffsets(_)
        | RequestKind::OffsetForLeaderEpoch(_)
        | RequestKind::DeleteRecords(_)
        | RequestKind::WriteTxnMarkers(_)
        | RequestKind::DescribeProducers(_)) => return route_data(b, ctx, access, r).await,
        other => {
            // The connection only decodes APIs listed in `api::SUPPORTED`, all routed above.
            error!(api = ?ctx.api_key, request = ?std::mem::discriminant(&other), "no handler for a supported API");
            return Reply::Close;
        }
    })
}

/// Routes a request of the data plane: produce, fetch, offsets and transaction markers.
async fn route_data(
    b: &Arc<Broker>,
    ctx: &RequestContext,
    access: &authorize::Access,
    request: RequestKind,
) -> Reply {
    let v = ctx.api_version;
    Reply::Respond(match request {
        RequestKind::Produce(r) => return handlers::produce::produce(b.data_plane(), r, v).await,
        RequestKind::Fetch(r) => {
            let reader = authorize::fetch_reader(access, &r, v);
            let may_read: handlers::fetch::MayRead<'_> = if access.image().is_some() {
                Some(&reader)
            } else {
                None
            };
            return Reply::Fetch(Box::new(
                handlers::fetch::fetch(b.data_plane(), r, v, ctx.min_round_trip, may_read).await,
            ));
        }
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(handlers::offsets::list_offsets(b.data_plane(), r, v))
        }
        RequestKind::OffsetForLeaderEpoch(r) => ResponseKind::OffsetForLeaderEpoch(
            handlers::offsets::offset_for_leader_epoch(b.data_plane(), r),
        ),
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(handlers::offsets::delete_records(b.data_plane(), r).await)
        }
        RequestKind::WriteTxnMarkers(r) => {
            ResponseKind::WriteTxnMarkers(handlers::txn::write_txn_markers(b.data_plane(), r).await)
        }
        RequestKind::DescribeProducers(r) => ResponseKind::DescribeProducers(
            handlers::txn::describe_producers(b.data_plane(), r).await,
        ),
        other => {
            error!(api = ?ctx.api_key, request = ?std::mem::discriminant(&other), "not a data-plane request");
            return Reply::Close;
        }
    })
}

/// Routes a request of the transaction coordinator (InitProducerId of an idempotent producer
/// too: it needs no coordinator, only a fresh producer id).
async fn route_txn(b: &Arc<Broker>, ctx: &RequestContext, request: RequestKind) -> Reply {
    use handlers::txn_coordinator as tc;
    let v = ctx.api_version;
    let (cp, txns) = (b.control_plane(), &b.txns);
    Reply::Respond(match request {
        RequestKind::InitProducerId(r) if r.transactional_id.is_some() => {
            ResponseKind::InitProducerId(
                tc::init_producer_id(cp, txns, &b.producer_ids, &r, v).await,
            )
        }
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(handlers::produce::init_producer_id(&b.producer_ids, &r))
        }
        RequestKind::AddPartitionsToTxn(r) => {
            ResponseKind::AddPartitionsToTxn(tc::add_partitions_any(cp, txns, r, v).await)
        }
        RequestKind::AddOffsetsToTxn(r) => {
            ResponseKind::AddOffsetsToTxn(tc::add_offsets(cp, txns, r, v).await)
        }
        RequestKind::EndTxn(r) => {
            ResponseKind::EndTxn(tc::end_txn(cp, txns, &b.producer_ids, r, v).await)
        }
        RequestKind::DescribeTransactions(r) => ResponseKind::DescribeTransactions(
            handlers::txn_admin::describe_transactions(cp, txns, r).await,
        ),
        RequestKind::ListTransactions(r) => ResponseKind::ListTransactions(
            handlers::txn_admin::list_transactions(cp, txns, r, v).await,
        ),
        other => {
            error!(api = ?ctx.api_key, request = ?std::mem::discriminant(&other), "not a transaction request");
            return Reply::Close;
        }
    })
}

/// Routes an admin request: to the active controller (here or forwarded) when it changes
/// metadata, else to its handler over this node's image.
async fn route_admin(b: &Arc<Broker>, ctx: &RequestContext, request: RequestKind) -> Reply {
    let v = ctx.api_version;
    Reply::Respond(match request {
        // This node's listener stores are validated here before the controller commits.
        RequestKind::IncrementalAlterConfigs(r) => {
            match handlers::broker_configs::incremental_alter_configs(b.control_plane(), r, v).await
            {
                Some(response) => response,
                None => return Reply::Close,
            }
        }
        r @ (RequestKind::CreateTopics(_)
        | RequestKind::DeleteTopics(_)
        | RequestKind::CreatePartitions(_)
        | RequestKind::AlterConfigs(_)
        | RequestKind::ElectLeaders(_)
        | RequestKind::AlterPartitionReassignments(_)
        | RequestKind::AlterUserScramCredentials(_)
        | RequestKind::AlterClientQuotas(_)
        | RequestKind::UpdateFeatures(_)) => {
            match crate::forward::to_controller(b.control_plane(), ctx.api_key, v, r).await {
                Some(response) => response,
                None => return Reply::Close,
            }
        }
        r @ (RequestKind::CreateAcls(_) | RequestKind::DeleteAcls(_)) => {
            match handlers::acls::to_controller(b.control_plane(), ctx.api_key, v, r).await {
                Some(response) => response,
                None => return Reply::Close,
            }
        }
        RequestKind::DescribeAcls(r) => {
            ResponseKind::DescribeAcls(handlers::acls::describe_acls(&b.metadata, &r))
        }
        RequestKind::DescribeLogDirs(r) => ResponseKind::DescribeLogDirs(
            handlers::log_dirs::describe_log_dirs(b.data_plane(), &r, v),
        ),
        RequestKind::ListPartitionReassignments(r) => ResponseKind::ListPartitionReassignments(
            handlers::reassign::list_partition_reassignments(&b.metadata, &r),
        ),
        RequestKind::DescribeUserScramCredentials(r) => ResponseKind::DescribeUserScramCredentials(
            handlers::scram::describe_user_scram_credentials(&b.metadata, &r),
        ),
        RequestKind::DescribeClientQuotas(r) => ResponseKind::DescribeClientQuotas(
            handlers::quotas::describe_client_quotas(&b.metadata, &r),
        ),
        RequestKind::DescribeConfigs(r) => ResponseKind::DescribeConfigs(
            handlers::admin::describe_configs(&b.metadata, r, v).await,
        ),
        other => {
            error!(api = ?ctx.api_key, request = ?std::mem::discriminant(&other), "not an admin request");
            return Reply::Close;
        }
    })
}

/// The controller listener's handler of forwarded requests, bound to the broker once it exists.
pub struct ForwardTarget {
    pub broker: std::sync::OnceLock<std::sync::Weak<Broker>>,
}

impl ForwardHandler for ForwardTarget {
    fn handle(
        &self,
        api_key: i16,
        api_version: i16,
        body: Vec<u8>,
    ) -> std::pin::Pin<
        Box<
            dyn std::future::Future<Output = Result<KafkaReply, gregor_quorum::rpc::ForwardError>>
                + Send
                + '_,
        >,
    > {
        Box::pin(async move {
            let broker = self.broker.get().and_then(std::sync::Weak::upgrade);
            match broker {
                Some(b) => {
                    crate::forward::handle_forwarded(b.control_plane(), api_key, api_version, body)
                        .await
                }
                None => Err(gregor_quorum::rpc::ForwardError::NotController { leader: None }),
            }
        })
    }

    fn heartbeat_of(&self, api_key: i16, api_version: i16, body: &[u8]) -> Option<i32> {
        use kafka_protocol::messages::{ApiKey, BrokerHeartbeatRequest};
        use kafka_protocol::protocol::Decodable;
        if api_key != ApiKey::BrokerHeartbeat as i16 {
            return None;
        }
        let mut bytes = bytes::Bytes::copy_from_slice(body);
        BrokerHeartbeatRequest::decode(&mut bytes, api_version)
            .ok()
            .map(|r| r.broker_id.0)
    }

    fn connection_closed(&self, brokers: Vec<i32>) {
        if let Some(b) = self.broker.get().and_then(std::sync::Weak::upgrade) {
            crate::runtime::spawn(async move {
                crate::forward::check_brokers_alive(b.control_plane(), brokers).await
            });
        }
    }
}

impl Handler for Broker {
    async fn handle(self: Arc<Self>, ctx: RequestContext, request: RequestKind) -> Reply {
        let started = std::time::Instant::now();
        let used = handlers::quotas::QuotaUse::of(&request);
        let follower = crate::connection::from_follower(&request);
        let mut reply = dispatch(&self, &ctx, request).await;
        let (quotas, elapsed) = (&self.client_quotas, started.elapsed());
        handlers::quotas::account(quotas, &self.metadata, &ctx, used, elapsed, &mut reply);
        self.metrics
            .request_done(ctx.api_key, follower, started, &reply);
        reply
    }

    fn request_taken(&self, api_key: ApiKey, follower: bool, bytes: usize, queued: Duration) {
        self.metrics.request_taken(api_key, follower, bytes, queued);
    }

    fn response_written(&self, api_key: ApiKey, follower: bool, bytes: usize) {
        self.metrics.response_written(api_key, follower, bytes);
    }

    fn throttle_after_response(&self, connection_id: u64) -> Option<Duration> {
        self.client_quotas
            .take_mute(connection_id)
            .map(Duration::from_millis)
    }
}

impl Broker {
    /// TxnOffsetCommit. From v5 (transaction version 2) the producer did not add the group's
    /// offsets partition with AddOffsetsToTxn, so its transaction coordinator adds it first.
    async fn txn_offset_commit(
        &self,
        ctx: &RequestContext,
        r: kafka_protocol::messages::TxnOffsetCommitRequest,
    ) -> Reply {
        if ctx.api_version >= 5 {
            let added = crate::data_plane::TxnVerifyRequest {
                transactional_id: r.transactional_id.0.to_string(),
                producer_id: r.producer_id.0,
                producer_epoch: r.producer_epoch,
                topic: crate::groups::OFFSETS_TOPIC.to_string(),
                partition: crate::groups::Groups::partition_of(self.control_plane(), &r.group_id.0),
                add: true,
            };
            let (node, links) = (self.config.node_id, &self.links);
            let added =
                crate::txn_verify::ask_coordinator(node, &self.metadata, &self.txns, links, added);
            if let Err(e) = added.await {
                let request = RequestKind::TxnOffsetCommit(r);
                return handlers::groups::refuse(ctx, &request, e).into();
            }
        }
        let request = RequestKind::TxnOffsetCommit(r);
        handlers::groups::handle(self.control_plane(), &self.groups, ctx, request)
            .await
            .into()
    }

    /// A broker config's value now: dynamic per-broker override, dynamic cluster default,
    /// static setting, default (for settings that may change at run time).
    pub fn dynamic_i64(&self, key: &str) -> i64 {
        let image = self.metadata.image();
        gregor_meta::config::BrokerConfigView::new(
            &image,
            &self.config.settings,
            self.config.node_id,
        )
        .i64(key)
    }

    /// The service controller requests run on.
    pub fn control_plane(&self) -> ControlPlane<'_> {
        ControlPlane {
            node_id: self.config.node_id,
            config: &self.config,
            cluster_id: &self.cluster_id,
            metadata: &self.metadata,
            registration_offsets: &self.registration_offsets,
            transport: &self.transport,
            metrics: &self.metrics,
            controller_apis: handlers::boxed_controller_api,
        }
    }

    /// The service the partition data APIs run on.
    pub fn data_plane(&self) -> crate::data_plane::DataPlane<'_> {
        crate::data_plane::DataPlane {
            node_id: self.config.node_id,
            settings: &self.config.settings,
            metadata: &self.metadata,
            replicas: &self.replicas,
            metrics: &self.metrics,
            fetch_sessions: &self.fetch_sessions,
            txn: self,
        }
    }

    /// What observability (metrics, `/readyz`, the console) reads of this broker.
    pub fn view(&self) -> crate::broker_view::BrokerView<'_> {
        crate::broker_view::BrokerView {
            config: &self.config,
            cluster_id: &self.cluster_id,
            metadata: &self.metadata,
            replicas: &self.replicas,
            groups: &self.groups,
            txns: &self.txns,
            fetch_sessions: &self.fetch_sessions,
            metrics: &self.metrics,
            cluster_view: &self.cluster_view,
        }
    }
}

impl crate::data_plane::TxnHooks for Broker {
    fn verify(
        &self,
        request: crate::data_plane::TxnVerifyRequest,
    ) -> futures::future::BoxFuture<'_, Result<(), kafka_protocol::ResponseError>> {
        Box::pin(crate::txn_verify::verify(
            self.config.node_id,
            &self.metadata,
            &self.txns,
            &self.links,
            request,
        ))
    }

    fn offsets_marker_written(
        &self,
        partition: i32,
        producer_id: i64,
        commit: bool,
    ) -> futures::future::BoxFuture<'_, ()> {
        Box::pin(
            self.groups
                .complete_transaction(partition, producer_id, commit),
        )
    }
}

impl crate::broker_view::Observable for Broker {
    fn view(&self) -> crate::broker_view::BrokerView<'_> {
        Broker::view(self)
    }

    fn request(
        self: Arc<Self>,
        ctx: RequestContext,
        request: RequestKind,
    ) -> futures::future::BoxFuture<'static, Reply> {
        Box::pin(Handler::handle(self, ctx, request))
    }
}
