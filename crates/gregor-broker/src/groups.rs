//! The group coordinator shell: one coordinator shard per `__consumer_offsets` partition this
//! node leads. Each shard runs the pure `gregor-group` state machine for the groups of its
//! partition on a task of its own, feeding it requests, timer ticks and append completions and
//! carrying out its effects: responses to the waiting connections, and records appended to the
//! partition and committed (the high watermark past them) before they count.
//!
//! A manager task follows this node's leaderships (the replica manager's role watch): when the
//! node becomes leader of a partition, or its leader epoch changes, the shard is rebuilt from the
//! partition's log; when it stops leading, the shard is unloaded (parked requests get
//! NOT_COORDINATOR) and dropped. A request for a group whose partition has no shard here gets
//! NOT_COORDINATOR, one whose shard is still loading COORDINATOR_LOAD_IN_PROGRESS; clients then
//! look the coordinator up again.
//!
//! The internal topic is created on first use, as Kafka does, with `offsets.topic.num.partitions`
//! partitions and `min(offsets.topic.replication.factor, live brokers)` replicas.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use gregor_group::consumer::model::TopicMetadata;
use gregor_group::{
    partition_for, AppendToken, Effect, GroupConfig, GroupCoordinator, Input, ListGroupsRequest,
    ListGroupsResponse, Record, Request, RequestContext, Response,
};
use gregor_log::batch::BatchHeader;
use gregor_log::txn::{control_type, ControlType};
use kafka_protocol::ResponseError;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::coordinator_shards::{appender, AppendDone, ShardTable};
use crate::forward::ControlPlane;
use crate::replica::Partition;
use crate::replica::ReplicaManager;
use crate::runtime::{blocking, now_ms};

/// The internal topic holding group metadata and committed offsets.
pub const OFFSETS_TOPIC: &str = "__consumer_offsets";

/// What a shard's task is asked.
enum Msg {
    /// A request, with where its answer goes.
    Request(Box<Input>, oneshot::Sender<Response>),
    /// A read-only look at every group of the shard (metrics, the console).
    Observe(oneshot::Sender<ShardObservation>),
    /// A transaction marker of this producer (`commit`, else abort) was appended to the
    /// shard's partition.
    TxnMarker { producer_id: i64, commit: bool },
    /// The cluster's topics for consumer groups' assignors, ahead of a request that needs them.
    Topics(ConsumerView),
    /// The topics (with their partition counts) that groups on the `load` assignor subscribe to.
    LoadPartitions(oneshot::Sender<BTreeMap<String, i32>>),
    /// Fresh partition loads: the shard's `load` groups are reviewed with them.
    ReviewLoad(Arc<gregor_group::PartitionLoads>),
}

/// The cluster's topics by name, as KIP-848 assignors see them.
pub type ConsumerTopics = BTreeMap<String, TopicMetadata>;

/// What consumer group heartbeats need of a metadata image: the cluster's topics and each
/// group's own settings. Both are kept (the same `Arc`s) across images that change neither.
#[derive(Debug, Clone, Default)]
pub struct ConsumerView {
    pub topics: Arc<ConsumerTopics>,
    pub overrides: Arc<gregor_group::GroupOverridesMap>,
}

/// One group as its coordinator shard sees it.
#[derive(Debug, Clone)]
pub struct GroupObservation {
    pub summary: gregor_group::GroupSummary,
    pub rebalances: gregor_group::RebalanceHistory,
    /// Committed offsets: topic, partition, offset.
    pub offsets: Vec<(String, i32, i64)>,
    /// When this node's shard loaded the group's partition (it became the coordinator, or
    /// restarted): the rebalance history, kept in memory, starts there.
    pub coordinator_since_ms: i64,
}

/// One KIP-848 consumer group as its coordinator shard sees it.
#[derive(Debug, Clone)]
pub struct ConsumerGroupObservation {
    pub group_id: String,
    /// Kafka's name of its state (Empty, Assigning, Reconciling, Stable).
    pub state: &'static str,
    pub group_epoch: i32,
    pub target_epoch: i32,
    pub members: usize,
    /// Members speaking the classic protocol (a migration under way).
    pub classic_members: usize,
    pub stats: gregor_group::consumer::model::ConsumerGroupStats,
    /// Time spent computing its target assignments, in this shard's requests that computed one.
    pub assignment: AssignmentTimes,
    /// Committed offsets: topic, partition, offset.
    pub offsets: Vec<(String, i32, i64)>,
    /// Its members, by member id.
    pub member_list: Vec<ConsumerMemberObservation>,
    /// Its recent group epochs, oldest first, with their targets and each member's progress.
    pub epochs: Vec<gregor_group::consumer::epochs::EpochRecord>,
    /// The subscribed topics' names by id, to name the epochs' targets.
    pub topic_names: BTreeMap<u128, String>,
    /// When this node's shard loaded the group's partition: the epochs are recorded from there.
    pub coordinator_since_ms: i64,
}

/// One member of a KIP-848 consumer group, its partitions named by topic (a topic id no longer
/// subscribed shows as its id in hex).
#[derive(Debug, Clone)]
pub struct ConsumerMemberObservation {
    pub member_id: String,
    pub instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub member_epoch: i32,
    /// STABLE, UNREVOKED_PARTITIONS or UNRELEASED_PARTITIONS.
    pub state: &'static str,
    pub assigned: Vec<(String, i32)>,
    pub pending_revocation: Vec<(String, i32)>,
    pub target: Vec<(String, i32)>,
    /// It speaks the classic protocol (a migration under way).
    pub classic: bool,
}

/// The subscribed topics' names by id.
fn topic_names(g: &gregor_group::consumer::model::ConsumerGroup) -> BTreeMap<u128, String> {
    g.subscribed_topics
        .values()
        .map(|t| (t.id, t.name.clone()))
        .collect()
}

fn observe_members(
    g: &gregor_group::consumer::model::ConsumerGroup,
    names: &BTreeMap<u128, String>,
) -> Vec<ConsumerMemberObservation> {
    let named = |a: &gregor_group::consumer::model::Assignment| -> Vec<(String, i32)> {
        a.iter()
            .flat_map(|(id, ps)| {
                let topic = names
                    .get(id)
                    .map_or_else(|| format!("{id:032x}"), |n| n.to_string());
                ps.iter().map(move |p| (topic.clone(), *p))
            })
            .collect()
    };
    g.members
        .values()
        .map(|m| ConsumerMemberObservation {
            member_id: m.member_id.clone(),
            instance_id: m.instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            member_epoch: m.member_epoch,
            state: m.state.name(),
            assigned: named(&m.assigned),
            pending_revocation: named(&m.pending_revocation),
            target: g.target.get(&m.member_id).map(&named).unwrap_or_default(),
            classic: m.classic.is_some(),
        })
        .collect()
}

/// How long one consumer group's target assignments took to compute.
#[derive(Debug, Clone, Copy, Default)]
pub struct AssignmentTimes {
    pub count: u64,
    pub seconds_total: f64,
    pub last_seconds: f64,
}

/// Every group of one shard.
#[derive(Debug, Default)]
pub struct ShardObservation {
    pub classic: Vec<GroupObservation>,
    pub consumer: Vec<ConsumerGroupObservation>,
}

fn observe(shell: &ShardShell, coordinator: &GroupCoordinator) -> ShardObservation {
    let consumer = coordinator
        .consumer_groups()
        .map(|g| (g, topic_names(g)))
        .map(|(g, names)| ConsumerGroupObservation {
            group_id: g.group_id.clone(),
            state: g.state().name(),
            group_epoch: g.group_epoch,
            target_epoch: g.target_epoch,
            members: g.members.len(),
            classic_members: g.members.values().filter(|m| m.classic.is_some()).count(),
            stats: g.stats.clone(),
            assignment: shell
                .assignment
                .get(&g.group_id)
                .copied()
                .unwrap_or_default(),
            offsets: coordinator
                .committed_offsets(&g.group_id)
                .into_iter()
                .map(|(t, p, o)| (t, p, o.offset))
                .collect(),
            member_list: observe_members(g, &names),
            epochs: g.epochs.recent.iter().cloned().collect(),
            topic_names: names,
            coordinator_since_ms: shell.loaded_ms,
        })
        .collect();
    ShardObservation {
        classic: observe_classic(coordinator, shell.loaded_ms),
        consumer,
    }
}

fn observe_classic(coordinator: &GroupCoordinator, loaded_ms: i64) -> Vec<GroupObservation> {
    coordinator
        .group_ids()
        .into_iter()
        .filter_map(|id| {
            let summary = coordinator.group(&id)?;
            let rebalances = coordinator
                .rebalance_history(&id)
                .cloned()
                .unwrap_or_default();
            let offsets = coordinator
                .committed_offsets(&id)
                .into_iter()
                .map(|(t, p, o)| (t, p, o.offset))
                .collect();
            Some(GroupObservation {
                summary,
                rebalances,
                offsets,
                coordinator_since_ms: loaded_ms,
            })
        })
        .collect()
}

/// Appends a shard may have queued or under way before it stops taking requests (requests wait
/// in the bounded request channel meanwhile): the append queue stays bounded however fast
/// clients commit.
const MAX_PENDING_APPENDS: usize = 256;

/// How long a group request that found the internal topic missing waits for this node's shard of
/// its group to load (the first requests of a new cluster; later ones get LOAD_IN_PROGRESS at
/// once).
const FIRST_LOAD_WAIT: Duration = Duration::from_secs(5);

/// Producers a loading shard must still hear the marker of, at most (one entry per producer;
/// a partition's producer state holds at most as many).
const MAX_EARLY_MARKERS: usize = crate::producer_state::MAX_PRODUCERS;

/// The group coordinator shards of this node, by `__consumer_offsets` partition.
pub struct Groups {
    table: ShardTable<Msg>,
    /// Markers appended to a partition while its shard loads, by partition: producer id ->
    /// commit of the first one. The load may have read the log before them; the shard applies
    /// them once installed. Only the first marker of a producer matters: while a shard loads it
    /// writes nothing, so no offsets can become pending for a producer after its marker.
    early_markers: Mutex<BTreeMap<i32, BTreeMap<i64, bool>>>,
    /// The topics of the last metadata image a consumer group heartbeat saw, built once per
    /// image.
    topics: Mutex<Option<(Arc<gregor_meta::MetadataImage>, ConsumerView)>>,
}

/// `old` if it holds the same as `new`, else `new` in a new `Arc`.
fn keep_if_same<T: PartialEq>(old: Arc<T>, new: T) -> Arc<T> {
    if *old == new {
        old
    } else {
        Arc::new(new)
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Default for Groups {
    fn default() -> Self {
        Self::new()
    }
}

/// What a shard needs besides its partition: settings read when it is loaded.
#[derive(Clone)]
pub struct ShardSettings {
    group: GroupConfig,
    commit_timeout: Duration,
    retention_check: Duration,
}

impl Groups {
    pub fn new() -> Groups {
        Groups {
            table: ShardTable::new(OFFSETS_TOPIC, "group coordinator"),
            early_markers: Mutex::new(BTreeMap::new()),
            topics: Mutex::new(None),
        }
    }

    /// Number of `__consumer_offsets` partitions: the topic's own count once it exists (groups
    /// were placed by it), `offsets.topic.num.partitions` before.
    pub fn num_partitions(b: ControlPlane<'_>) -> i32 {
        Groups::num_partitions_in(&b.metadata.image(), b.config)
    }

    /// [`Groups::num_partitions`] by `image` and this node's `config`.
    pub fn num_partitions_in(image: &gregor_meta::MetadataImage, config: &BrokerConfig) -> i32 {
        match image.topic(OFFSETS_TOPIC) {
            Some(t) if !t.partitions.is_empty() => t.partitions.len() as i32,
            _ => config.int("offsets.topic.num.partitions") as i32,
        }
    }

    /// [`Groups::partition_of`] by `image` and this node's `config`.
    pub fn partition_in(
        image: &gregor_meta::MetadataImage,
        config: &BrokerConfig,
        group: &str,
    ) -> i32 {
        partition_for(group, Groups::num_partitions_in(image, config))
    }

    /// The partition a group's metadata and offsets live in.
    pub fn partition_of(b: ControlPlane<'_>, group: &str) -> i32 {
        partition_for(group, Groups::num_partitions(b))
    }

    /// Starts the task that loads and unloads shards as this node's leaderships change;
    /// `also` runs after each pass (the transaction coordinator's shards follow the same
    /// changes on the same task).
    pub fn start_manager(
        self: &Arc<Self>,
        replicas: Arc<ReplicaManager>,
        settings: ShardSettings,
        also: impl Fn(&ReplicaManager) + Send + 'static,
    ) -> tokio::task::JoinHandle<()> {
        let weak = Arc::downgrade(self);
        let mut roles = replicas.watch_roles();
        crate::runtime::spawn(async move {
            loop {
                roles.borrow_and_update();
                match weak.upgrade() {
                    Some(groups) => groups.reconcile(&replicas, &settings),
                    None => return,
                }
                also(&replicas);
                if roles.changed().await.is_err() {
                    return;
                }
            }
        })
    }

    /// A receiver that changes whenever a shard starts loading, is loaded or stops.
    pub fn watch_shards(&self) -> watch::Receiver<u64> {
        self.table.watch_shards()
    }

    /// Partitions with a loaded shard, and with one still loading.
    pub fn shard_partitions(&self) -> (Vec<i32>, Vec<i32>) {
        self.table.shard_partitions()
    }

    /// Brings the shards in line with the `__consumer_offsets` partitions this node leads.
    fn reconcile(self: &Arc<Self>, replicas: &ReplicaManager, settings: &ShardSettings) {
        let weak = Arc::downgrade(self);
        self.table.reconcile(replicas, |part, epoch, stop| {
            crate::runtime::spawn(load_and_run(
                weak.clone(),
                part,
                epoch,
                settings.clone(),
                stop,
            ));
        });
    }

    /// Sends one request to the shard of `partition` and waits for its answer. A shard that
    /// stops before answering (its node lost the leadership) answers NOT_COORDINATOR.
    pub async fn call_partition(
        &self,
        partition: i32,
        context: RequestContext,
        request: Request,
    ) -> Result<Response, ResponseError> {
        let tx = self.table.route(partition)?;
        let (reply, rx) = oneshot::channel();
        let input = Input {
            request_id: 0, // assigned by the shard's task
            context,
            request,
        };
        tx.send(Msg::Request(Box::new(input), reply))
            .await
            .map_err(|_| ResponseError::NotCoordinator)?;
        rx.await.map_err(|_| ResponseError::NotCoordinator)
    }

    /// The topics of `image` for consumer groups (built once per image).
    pub fn consumer_view(&self, image: &Arc<gregor_meta::MetadataImage>) -> ConsumerView {
        let mut cache = lock(&self.topics);
        if let Some((seen, view)) = cache.as_ref() {
            if Arc::ptr_eq(seen, image) {
                return view.clone();
            }
        }
        let old = cache.take().map(|(_, v)| v).unwrap_or_default();
        let topics = crate::group_wire::consumer_topics(image);
        let overrides = crate::group_wire::group_overrides(image);
        // Most images change neither: the shards then keep their resolved subscriptions.
        let view = ConsumerView {
            topics: keep_if_same(old.topics, topics),
            overrides: keep_if_same(old.overrides, overrides),
        };
        *cache = Some((image.clone(), view.clone()));
        view
    }

    /// [`Groups::call`] for a request that needs the cluster's topics: they reach the shard
    /// first, on the same queue.
    pub async fn call_with_topics(
        &self,
        b: ControlPlane<'_>,
        group: &str,
        context: RequestContext,
        request: Request,
        topics: ConsumerView,
    ) -> Result<Response, ResponseError> {
        let p = self.ensure_topic_for(b, group).await?;
        if let Ok(tx) = self.table.route(p) {
            // A shard gone meanwhile answers the request NOT_COORDINATOR below.
            let _ = tx.send(Msg::Topics(topics)).await;
        }
        self.call(b, group, context, request).await
    }

    /// A transaction marker of `producer_id` (`commit`, else abort) was appended to
    /// `__consumer_offsets` partition `partition`: the shard of that partition makes the
    /// offsets the transaction committed visible, or drops them. Call it after each marker
    /// appended to the partition as its leader, in marker order. Waits only for room in the
    /// shard's request queue, so anything the caller does next (the producer's next
    /// transaction) reaches the shard after the marker. A partition without a shard here needs
    /// nothing: the shard that loads it replays the marker from the log.
    pub async fn complete_transaction(&self, partition: i32, producer_id: i64, commit: bool) {
        let tx = {
            let mut early = lock(&self.early_markers);
            match self.table.route(partition) {
                Ok(tx) => tx,
                Err(ResponseError::CoordinatorLoadInProgress) => {
                    let markers = early.entry(partition).or_default();
                    if markers.len() < MAX_EARLY_MARKERS {
                        markers.entry(producer_id).or_insert(commit);
                    } else {
                        warn!(partition, producer_id, "too many markers while the group coordinator shard loads; this one is dropped");
                    }
                    return;
                }
                Err(_) => return,
            }
        };
        // A shard that stops meanwhile is no longer this node's to tell.
        let _ = tx
            .send(Msg::TxnMarker {
                producer_id,
                commit,
            })
            .await;
    }

    /// Every group of every loaded shard of this node (a shard that unloads meanwhile is
    /// skipped: its groups are no longer this node's).
    pub async fn observe(&self) -> Vec<GroupObservation> {
        self.observe_all().await.classic
    }

    /// Every KIP-848 consumer group this node coordinates.
    pub async fn observe_consumer(&self) -> Vec<ConsumerGroupObservation> {
        self.observe_all().await.consumer
    }

    /// The topics, with their partition counts, that consumer groups on the `load` assignor
    /// coordinated here subscribe to.
    pub async fn load_partitions(&self) -> BTreeMap<String, i32> {
        let (loaded, _) = self.shard_partitions();
        let mut out = BTreeMap::new();
        for p in loaded {
            let Ok(tx) = self.table.route(p) else {
                continue;
            };
            let (reply, rx) = oneshot::channel();
            if tx.send(Msg::LoadPartitions(reply)).await.is_err() {
                continue;
            }
            if let Ok(topics) = rx.await {
                out.extend(topics);
            }
        }
        out
    }

    /// Hands fresh partition loads to every shard, which reviews its `load` groups with them.
    pub async fn review_load(&self, loads: Arc<gregor_group::PartitionLoads>) {
        let (loaded, _) = self.shard_partitions();
        for p in loaded {
            if let Ok(tx) = self.table.route(p) {
                let _ = tx.send(Msg::ReviewLoad(loads.clone())).await;
            }
        }
    }

    /// Every group this node coordinates, classic and consumer, in one pass over the shards.
    pub async fn observe_all(&self) -> ShardObservation {
        let (loaded, _) = self.shard_partitions();
        let mut out = ShardObservation::default();
        for p in loaded {
            let Ok(tx) = self.table.route(p) else {
                continue;
            };
            let (reply, rx) = oneshot::channel();
            if tx.send(Msg::Observe(reply)).await.is_err() {
                continue;
            }
            if let Ok(groups) = rx.await {
                out.classic.extend(groups.classic);
                out.consumer.extend(groups.consumer);
            }
        }
        out
    }

    /// Sends a request about `group` to its shard, creating the internal topic first if it does
    /// not exist yet (a client that skipped FindCoordinator on a new cluster).
    pub async fn call(
        &self,
        b: ControlPlane<'_>,
        group: &str,
        context: RequestContext,
        request: Request,
    ) -> Result<Response, ResponseError> {
        let p = self.ensure_topic_for(b, group).await?;
        // The metadata says this node leads the group's partition, but its replica has not
        // taken the leadership (started the shard) yet: the client should retry here shortly
        // rather than look for another coordinator (FindCoordinator would name this node
        // again). Kafka answers a coordinator still loading the same way. A shard that stops
        // while a request waits (leadership lost) still answers NOT_COORDINATOR.
        if !self.table.hosts(p) && self.table.taking_over(&b.metadata.image(), b.node_id, p) {
            return Err(ResponseError::CoordinatorLoadInProgress);
        }
        self.call_partition(p, context, request).await
    }

    /// The partition of `group`, after creating the internal topic if needed. A request that
    /// found the topic missing (it created it, or a concurrent request did) then waits, a
    /// bounded time, for this node's shard of the group if this node leads it: the first
    /// requests of a new cluster are not bounced with LOAD_IN_PROGRESS.
    async fn ensure_topic_for(
        &self,
        b: ControlPlane<'_>,
        group: &str,
    ) -> Result<i32, ResponseError> {
        if b.metadata.image().topic(OFFSETS_TOPIC).is_some() {
            return Ok(Groups::partition_of(b, group));
        }
        create_offsets_topic(b).await?;
        Ok(self
            .table
            .await_first_load(
                || b.metadata.image(),
                b.node_id,
                |image| Groups::partition_in(image, b.config, group),
                FIRST_LOAD_WAIT,
            )
            .await)
    }

    /// Makes sure the internal topic exists and answers the partition of `group`
    /// (FindCoordinator).
    pub async fn coordinator_partition(
        &self,
        b: ControlPlane<'_>,
        group: &str,
    ) -> Result<i32, ResponseError> {
        self.ensure_topic_for(b, group).await
    }

    /// ListGroups over every shard of this node (each broker lists the groups it coordinates,
    /// as Kafka's do). While a shard loads, the answer is COORDINATOR_LOAD_IN_PROGRESS.
    pub async fn list_groups(
        &self,
        context: RequestContext,
        request: ListGroupsRequest,
    ) -> Vec<ListGroupsResponse> {
        let (loaded, loading) = self.shard_partitions();
        let mut parts = Vec::with_capacity(loaded.len() + 1);
        if !loading.is_empty() {
            parts.push(crate::group_wire::list_groups_loading());
        }
        for p in loaded {
            match self
                .call_partition(p, context.clone(), Request::ListGroups(request.clone()))
                .await
            {
                Ok(Response::ListGroups(x)) => parts.push(x),
                // Unloaded meanwhile: its groups are no longer this node's to list.
                Err(ResponseError::NotCoordinator) => {}
                Ok(_) => parts.push(ListGroupsResponse {
                    error: Some(ResponseError::UnknownServerError),
                    groups: Vec::new(),
                }),
                Err(e) => parts.push(ListGroupsResponse {
                    error: Some(e),
                    groups: Vec::new(),
                }),
            }
        }
        parts
    }
}

/// Creates the internal topic if it does not exist.
async fn create_offsets_topic(b: ControlPlane<'_>) -> Result<(), ResponseError> {
    if b.metadata.image().topic(OFFSETS_TOPIC).is_some() {
        return Ok(());
    }
    let live = b.metadata.image().active_brokers().count().max(1) as i64;
    let rf = b.config.int("offsets.topic.replication.factor").min(live) as i16;
    let partitions = b.config.int("offsets.topic.num.partitions") as i32;
    let topic = gregor_meta::CreatableTopic::new(OFFSETS_TOPIC)
        .with_layout(partitions, rf)
        .with_config("cleanup.policy", "compact")
        .with_config(
            "segment.bytes",
            &b.config.int("offsets.topic.segment.bytes").to_string(),
        );
    crate::forward::create_internal_topic(b, topic).await
}

/// The shard settings from the broker's static configuration.
pub fn shard_settings(config: &BrokerConfig) -> ShardSettings {
    let group = GroupConfig {
        min_session_timeout_ms: config.int("group.min.session.timeout.ms") as i32,
        max_session_timeout_ms: config.int("group.max.session.timeout.ms") as i32,
        initial_rebalance_delay_ms: config.int("group.initial.rebalance.delay.ms") as i32,
        max_size: config.int("group.max.size").max(1) as usize,
        offset_metadata_max_bytes: config.int("offset.metadata.max.bytes").max(0) as usize,
        offsets_retention_ms: config
            .int("offsets.retention.minutes")
            .saturating_mul(60_000),
        consumer: consumer_settings(config),
        #[cfg(feature = "simulation")]
        planted_stale_sync: planted!(StaleSyncAssignment),
        #[cfg(feature = "simulation")]
        planted_replay_keeps_first_commit: planted!(ReplayKeepsFirstCommit),
        #[cfg(feature = "simulation")]
        planted_fetch_past_commit: planted!(FetchPastCommit),
        #[cfg(feature = "simulation")]
        planted_txn_offsets_early: planted!(TxnOffsetsEarly),
        #[cfg(feature = "simulation")]
        planted_consumer_replay_first_epoch: planted!(ConsumerReplayKeepsFirstEpoch),
        #[cfg(feature = "simulation")]
        planted_upgrade_drops_assignment: planted!(UpgradeDropsAssignment),
        ..GroupConfig::default()
    };
    ShardSettings {
        group,
        commit_timeout: Duration::from_millis(config.int("offsets.commit.timeout.ms").max(1) as u64),
        retention_check: Duration::from_millis(
            config.int("offsets.retention.check.interval.ms").max(1) as u64,
        ),
    }
}

/// KIP-848 groups' settings (bounds checked when the configuration was read).
pub fn consumer_settings(config: &BrokerConfig) -> gregor_group::ConsumerGroupConfig {
    let assignors = config
        .settings
        .get("group.consumer.assignors")
        .and_then(|v| v.as_list().map(<[String]>::to_vec))
        .filter(|l| !l.is_empty())
        .unwrap_or_else(|| vec!["uniform".to_string()]);
    gregor_group::ConsumerGroupConfig {
        session_timeout_ms: config.int("group.consumer.session.timeout.ms") as i32,
        heartbeat_interval_ms: config.int("group.consumer.heartbeat.interval.ms") as i32,
        max_size: config.int("group.consumer.max.size").max(1) as usize,
        assignors,
        migration_policy: config
            .settings
            .get("group.consumer.migration.policy")
            .and_then(|v| v.as_str().and_then(gregor_group::MigrationPolicy::parse))
            .unwrap_or_default(),
    }
}

/// Rebuilds one shard from its partition's log, from the log start to the log end offset: a new
/// leader's whole log is what will be committed. Blocking file work.
fn load(part: &Partition, config: GroupConfig) -> Result<GroupCoordinator, ResponseError> {
    let mut coordinator = GroupCoordinator::new(config, uuid::Uuid::new_v4().as_u64_pair().0);
    let mut records = 0usize;
    let end = part.log.log_end_offset();
    crate::coordinator_shards::for_each_batch(part, "group metadata", |h, batch, recs| {
        records += replay_batch(&mut coordinator, part.index, h, batch, recs);
    })?;
    info!(
        partition = part.index,
        records,
        log_end_offset = end,
        "group coordinator shard loaded"
    );
    Ok(coordinator)
}

/// Replays one batch of the log (`batch`: its bytes, `recs`: its records) into the coordinator;
/// returns how many records it applied. A transactional batch's offsets are pending for its
/// producer until that producer's marker (a control batch) replays; a marker of a producer with
/// nothing pending changes nothing.
fn replay_batch(
    coordinator: &mut GroupCoordinator,
    partition: i32,
    h: &BatchHeader,
    batch: &[u8],
    recs: Vec<gregor_log::records::Record>,
) -> usize {
    if h.is_control() {
        match control_type(batch) {
            Ok(Some(ControlType::Commit)) => coordinator.replay_marker(h.producer_id, true),
            Ok(Some(ControlType::Abort)) => coordinator.replay_marker(h.producer_id, false),
            Ok(_) => {}
            Err(e) => {
                warn!(partition, offset = h.base_offset, error = %e, "skipping unreadable control batch")
            }
        }
        return 0;
    }
    let mut applied = 0;
    for r in recs {
        let Some(key) = r.key else { continue };
        let replayed = if h.is_transactional() {
            coordinator.replay_transactional(h.producer_id, &key, r.value.as_deref())
        } else {
            coordinator.replay(&key, r.value.as_deref())
        };
        if let Err(e) = replayed {
            warn!(partition, offset = r.offset, error = %e, "skipping unreadable group record");
        }
        applied += 1;
    }
    applied
}

/// Loads a shard and, if its slot still wants it, runs it until it is stopped.
async fn load_and_run(
    groups: Weak<Groups>,
    part: Arc<Partition>,
    leader_epoch: i32,
    settings: ShardSettings,
    mut stop: oneshot::Receiver<()>,
) {
    let config = settings.group.clone();
    let loading = part.clone();
    // Markers from an earlier load of this partition are in the log this load reads.
    if let Some(groups) = groups.upgrade() {
        lock(&groups.early_markers).remove(&part.index);
    }
    let loaded = tokio::select! {
        r = blocking(move || load(&loading, config)) => r,
        // Unloaded while loading.
        _ = &mut stop => return,
    };
    let mut coordinator = match loaded {
        Ok(c) => c,
        Err(e) => {
            // The slot stays loading (COORDINATOR_LOAD_IN_PROGRESS) until the next role change.
            warn!(partition = part.index, leader_epoch, error = ?e, "cannot load group coordinator shard");
            return;
        }
    };
    let Some(groups) = groups.upgrade() else {
        return;
    };
    // Installed and the early markers taken under one lock: a marker after this goes to the
    // shard's queue (`complete_transaction`).
    let (rx, early) = {
        let mut early = lock(&groups.early_markers);
        let rx = groups.table.install(&part, leader_epoch);
        (rx, early.remove(&part.index))
    };
    let Some(rx) = rx else {
        return;
    };
    drop(groups);
    for (producer_id, commit) in early.into_iter().flatten() {
        coordinator.replay_marker(producer_id, commit);
    }
    run(part, settings, coordinator, rx, stop).await;
}

/// A shard's task: requests, timers and append completions, one at a time, until the shard is
/// stopped (its node lost the leadership), when it unloads.
async fn run(
    part: Arc<Partition>,
    settings: ShardSettings,
    mut coordinator: GroupCoordinator,
    mut rx: mpsc::Receiver<Msg>,
    mut stop: oneshot::Receiver<()>,
) {
    let mut shell = ShardShell {
        waiting: HashMap::new(),
        next_id: 1,
        loaded_ms: now_ms(),
        assignment: BTreeMap::new(),
    };
    // Appends are written in the order they are queued, as the coordinator requires. The queue
    // is bounded by `pending`: no request is taken while MAX_PENDING_APPENDS are outstanding.
    let (append_tx, append_rx) = mpsc::unbounded_channel::<(AppendToken, Vec<Record>)>();
    let (done_tx, mut done_rx) = mpsc::unbounded_channel::<AppendDone>();
    crate::runtime::spawn(appender(
        part.clone(),
        settings.commit_timeout,
        "offsets.commit.timeout.ms",
        append_rx,
        done_tx,
    ));
    let mut pending = 0usize;
    let effects = coordinator.complete_load(shell.loaded_ms);
    pending += carry_out(effects, &mut shell.waiting, &append_tx);
    // Offset expiry runs every offsets.retention.check.interval.ms (first after one interval).
    let check = settings.retention_check;
    let mut expiry = tokio::time::interval_at(tokio::time::Instant::now() + check, check);
    expiry.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let deadline = coordinator.next_deadline();
        let sleep = async {
            match deadline {
                Some(at) => {
                    let wait = (at - now_ms()).max(0) as u64;
                    tokio::time::sleep(Duration::from_millis(wait)).await
                }
                None => std::future::pending().await,
            }
        };
        let effects = tokio::select! {
            _ = &mut stop => {
                let effects = coordinator.unload();
                carry_out(effects, &mut shell.waiting, &append_tx);
                // Requests still queued are dropped unanswered: their callers answer
                // NOT_COORDINATOR.
                rx.close();
                info!(partition = part.index, "group coordinator shard unloaded");
                return;
            }
            m = rx.recv(), if pending < MAX_PENDING_APPENDS => match m {
                Some(msg) => on_msg(&mut coordinator, msg, &mut shell),
                None => return,
            },
            Some((token, result)) = done_rx.recv() => {
                pending -= 1;
                coordinator.append_completed(now_ms(), token, result)
            }
            _ = sleep => coordinator.tick(now_ms()),
            _ = expiry.tick() => coordinator.expire_offsets(now_ms()),
        };
        pending += carry_out(effects, &mut shell.waiting, &append_tx);
    }
}

/// A shard task's own state around its coordinator.
struct ShardShell {
    /// Requests waiting for their answer, by request id.
    waiting: HashMap<u64, oneshot::Sender<Response>>,
    next_id: u64,
    /// When the shard loaded its partition.
    loaded_ms: i64,
    /// Per consumer group: the time its target assignments took (measured here: the
    /// coordinator reads no clock).
    assignment: BTreeMap<String, AssignmentTimes>,
}

/// The consumer group a request may compute a target assignment of.
fn consumer_group_of(request: &Request) -> Option<&str> {
    match request {
        Request::ConsumerGroupHeartbeat(r) => Some(&r.group_id),
        Request::JoinGroup(r) => Some(&r.group_id),
        Request::Heartbeat(r) => Some(&r.group_id),
        _ => None,
    }
}

/// Handles a request, timing it when it computed a consumer group's target assignment.
fn handle_timed(
    coordinator: &mut GroupCoordinator,
    input: Input,
    shell: &mut ShardShell,
) -> Vec<Effect> {
    let Some(group) = consumer_group_of(&input.request).map(str::to_string) else {
        return coordinator.handle(now_ms(), input);
    };
    let targets = |c: &GroupCoordinator| c.consumer_group(&group).map_or(0, |g| g.stats.targets);
    let before = targets(coordinator);
    let started = tokio::time::Instant::now();
    let effects = coordinator.handle(now_ms(), input);
    if targets(coordinator) > before {
        let took = started.elapsed().as_secs_f64();
        let t = shell.assignment.entry(group).or_default();
        t.count += 1;
        t.seconds_total += took;
        t.last_seconds = took;
    }
    effects
}

/// One message to a shard's task: what the coordinator makes of it (a request gets the next
/// request id, its answer is awaited in `waiting`).
fn on_msg(coordinator: &mut GroupCoordinator, msg: Msg, shell: &mut ShardShell) -> Vec<Effect> {
    match msg {
        Msg::Request(input, reply) => {
            let mut input = *input;
            input.request_id = shell.next_id;
            shell.waiting.insert(shell.next_id, reply);
            shell.next_id += 1;
            handle_timed(coordinator, input, shell)
        }
        Msg::Observe(reply) => {
            let _ = reply.send(observe(shell, coordinator));
            Vec::new()
        }
        Msg::TxnMarker {
            producer_id,
            commit,
        } => coordinator.complete_transaction(now_ms(), producer_id, commit),
        Msg::Topics(view) => {
            coordinator.update_topics(view.topics);
            coordinator.update_group_overrides(view.overrides);
            Vec::new()
        }
        Msg::LoadPartitions(reply) => {
            let _ = reply.send(coordinator.load_partitions());
            Vec::new()
        }
        Msg::ReviewLoad(loads) => coordinator.review_load(now_ms(), loads),
    }
}

/// Carries out effects; returns how many appends it queued.
fn carry_out(
    effects: Vec<Effect>,
    waiting: &mut HashMap<u64, oneshot::Sender<Response>>,
    append_tx: &mpsc::UnboundedSender<(AppendToken, Vec<Record>)>,
) -> usize {
    let mut appends = 0;
    for e in effects {
        match e {
            Effect::Respond {
                request_id,
                response,
            } => {
                if let Some(reply) = waiting.remove(&request_id) {
                    // The connection may have gone; nothing to do then.
                    let _ = reply.send(response);
                }
            }
            Effect::Append { token, records } => {
                if append_tx.send((token, records)).is_ok() {
                    appends += 1;
                }
            }
        }
    }
    appends
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::coordinator_shards::Slot;

    fn lock<T>(m: &std::sync::Mutex<T>) -> std::sync::MutexGuard<'_, T> {
        m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn context() -> RequestContext {
        RequestContext {
            client_id: "test".into(),
            client_host: "/127.0.0.1".into(),
            api_version: 4,
        }
    }

    fn fetch(group: &str) -> Request {
        Request::OffsetFetch(gregor_group::OffsetFetchRequest {
            group_id: group.into(),
            topics: None,
            require_stable: false,
        })
    }

    fn slot(tx: Option<mpsc::Sender<Msg>>) -> (Slot<Msg>, oneshot::Receiver<()>) {
        let (stop, stopped) = oneshot::channel();
        let slot = Slot {
            leader_epoch: 3,
            partition: Weak::new(),
            tx,
            _stop: stop,
        };
        (slot, stopped)
    }

    #[tokio::test]
    async fn requests_route_by_shard_state() {
        let groups = Groups::new();
        let (loading, _) = slot(None);
        let (tx, mut rx) = mpsc::channel(4);
        let (loaded, _) = slot(Some(tx));
        lock(&groups.table.shards).insert(1, loading);
        lock(&groups.table.shards).insert(2, loaded);
        // No shard: this node does not lead the partition.
        assert_eq!(
            groups.call_partition(0, context(), fetch("g")).await,
            Err(ResponseError::NotCoordinator)
        );
        // Loading: the client retries the same coordinator.
        assert_eq!(
            groups.call_partition(1, context(), fetch("g")).await,
            Err(ResponseError::CoordinatorLoadInProgress)
        );
        assert_eq!(groups.shard_partitions(), (vec![2], vec![1]));
        // Loaded: the request reaches the shard's task; a shard that stops without answering
        // (unloaded) answers NOT_COORDINATOR.
        let call = groups.call_partition(2, context(), fetch("g"));
        let shard = async {
            let Some(Msg::Request(input, reply)) = rx.recv().await else {
                panic!("request delivered");
            };
            assert!(matches!(input.request, Request::OffsetFetch(ref r) if r.group_id == "g"));
            drop(reply);
        };
        let (answer, ()) = tokio::join!(call, shard);
        assert_eq!(answer, Err(ResponseError::NotCoordinator));
    }

    #[tokio::test]
    async fn markers_reach_a_loaded_shard_and_wait_for_a_loading_one() {
        let groups = Groups::new();
        let (loading, _) = slot(None);
        let (tx, mut rx) = mpsc::channel(4);
        let (loaded, _) = slot(Some(tx));
        lock(&groups.table.shards).insert(1, loading);
        lock(&groups.table.shards).insert(2, loaded);
        groups.complete_transaction(2, 7, true).await;
        assert!(matches!(
            rx.try_recv(),
            Ok(Msg::TxnMarker {
                producer_id: 7,
                commit: true
            })
        ));
        // Loading: kept for the shard (a producer's first marker counts); not hosted: nothing.
        groups.complete_transaction(1, 7, true).await;
        groups.complete_transaction(1, 7, false).await;
        groups.complete_transaction(1, 8, false).await;
        groups.complete_transaction(0, 9, true).await;
        let early = lock(&groups.early_markers).clone();
        assert_eq!(
            early,
            BTreeMap::from([(1, BTreeMap::from([(7, true), (8, false)]))])
        );
    }

    #[tokio::test]
    async fn dropping_a_slot_stops_its_shard() {
        let groups = Groups::new();
        let (s, mut stopped) = slot(None);
        lock(&groups.table.shards).insert(5, s);
        assert!(stopped
            .try_recv()
            .is_err_and(|e| e == oneshot::error::TryRecvError::Empty));
        lock(&groups.table.shards).remove(&5);
        assert_eq!(
            stopped.try_recv(),
            Err(oneshot::error::TryRecvError::Closed)
        );
    }
}
