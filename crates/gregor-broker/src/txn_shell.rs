//! The transaction coordinator shell: one shard per `__transaction_state` partition this node
//! leads, each running gregor-group's pure `TxnCoordinator` for the transactional ids of its
//! partition on a task of its own. A shard loads the partition's log when its node takes the
//! leadership; its records are appended to the partition and count once committed; its
//! decisions' markers go to the data partitions' leaders (`txn_markers`) and, once all are
//! written, the decision is completed.
//!
//! Nothing of it exists until this node hosts a replica of `__transaction_state` (or a
//! transactional request arrives): a cluster that never uses transactions runs exactly as
//! before (gregor-sim's schedules depend on it).
//!
//! The coordinator epoch of a shard is its partition's leader epoch, as in Kafka: a marker of a
//! deposed coordinator is refused by the partitions that saw a newer one.

use std::collections::HashMap;
use std::sync::{Arc, OnceLock, Weak};
use std::time::Duration;

use gregor_group::txn::{
    ProducerIdAndEpoch, TxnConfig, TxnCoordinator, TxnEffect, TxnError, TxnReply,
};
use gregor_group::{partition_for, AppendToken, Record};
use kafka_protocol::ResponseError;
use tokio::sync::{mpsc, oneshot, watch};
use tracing::{info, warn};

use crate::config::BrokerConfig;
use crate::coordinator_shards::{appender, AppendDone, ShardTable};
use crate::forward::ControlPlane;
use crate::metrics::events::{txn_reason, TxnDecisions, TxnMetrics};
use crate::replica::{Partition, ReplicaManager};
use crate::runtime::{blocking, now_ms};
use crate::txn_markers::{MarkerError, MarkerRequest, MarkerSender};

/// The internal topic holding the transactional ids' states.
pub const TXN_TOPIC: &str = "__transaction_state";

/// How long a request that created the internal topic waits for its shard's first load.
const FIRST_LOAD_WAIT: Duration = Duration::from_secs(5);

/// Appends a shard may have queued or under way before it stops taking requests.
const MAX_PENDING_APPENDS: usize = 256;

/// A transactional request for a shard.
#[derive(Debug, Clone)]
pub enum TxnCall {
    /// InitProducerId with a transactional id; `fresh_producer_id` is used for a new id or
    /// when the epoch has run out.
    Init {
        transactional_id: String,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        fresh_producer_id: i64,
    },
    /// AddPartitionsToTxn (and AddOffsetsToTxn with the group's offsets partition).
    AddPartitions {
        transactional_id: String,
        producer: ProducerIdAndEpoch,
        partitions: Vec<(String, i32)>,
    },
    /// EndTxn. `version2`: v5+ (transaction version 2, the decision bumps the epoch), with
    /// the producer id to move to if the epoch has run out (-1 if it cannot have).
    End {
        transactional_id: String,
        producer: ProducerIdAndEpoch,
        commit: bool,
        version2: Option<i64>,
    },
}

impl TxnCall {
    fn transactional_id(&self) -> &str {
        match self {
            TxnCall::Init {
                transactional_id, ..
            }
            | TxnCall::AddPartitions {
                transactional_id, ..
            }
            | TxnCall::End {
                transactional_id, ..
            } => transactional_id,
        }
    }
}

/// What a shard's task is asked.
pub enum TxnMsg {
    Call(TxnCall, oneshot::Sender<TxnReply>),
    /// KIP-890's verification: reads only, answered at once.
    Verify(Verification, oneshot::Sender<VerifyAnswer>),
    /// DescribeTransactions and ListTransactions (KIP-664): a read of the shard's state,
    /// answered at once.
    Read(Box<dyn FnOnce(&TxnCoordinator) + Send>),
}

/// A partition leader's question: are these partitions in the producer's open transaction?
#[derive(Debug, Clone)]
pub struct Verification {
    pub transactional_id: String,
    pub producer: ProducerIdAndEpoch,
    pub partitions: Vec<(String, i32)>,
}

/// Per partition, `None` if it is in the open transaction; or why none of them is.
pub type VerifyAnswer = Result<Vec<Option<TxnError>>, TxnError>;

/// Settings read when a shard is loaded.
#[derive(Clone)]
pub struct TxnSettings {
    config: TxnConfig,
    commit_timeout: Duration,
    metrics: TxnMetrics,
}

impl TxnSettings {
    /// The shards count their decisions and time their markers in `metrics`.
    pub fn with_metrics(mut self, metrics: TxnMetrics) -> TxnSettings {
        self.metrics = metrics;
        self
    }
}

/// The settings from the broker's static configuration.
pub fn txn_settings(config: &BrokerConfig) -> TxnSettings {
    TxnSettings {
        config: TxnConfig {
            max_timeout_ms: config.int("transaction.max.timeout.ms") as i32,
            id_expiration_ms: config.int("transactional.id.expiration.ms"),
        },
        // The same bound as a group's offset commit: the append waits for the ISR.
        commit_timeout: Duration::from_millis(config.int("offsets.commit.timeout.ms").max(1) as u64),
        metrics: TxnMetrics::default(),
    }
}

/// The transaction coordinator shards of this node.
#[derive(Default)]
pub struct Transactions {
    /// Made on first use (see the module's comment).
    table: OnceLock<ShardTable<TxnMsg>>,
}

impl Transactions {
    fn table(&self) -> &ShardTable<TxnMsg> {
        self.table
            .get_or_init(|| ShardTable::new(TXN_TOPIC, "transaction coordinator"))
    }

    /// The partition of `transactional_id` (the topic's own count once it exists).
    pub fn partition_of(b: ControlPlane<'_>, transactional_id: &str) -> i32 {
        partition_for(
            transactional_id,
            Transactions::count_in(&b.metadata.image(), b.config),
        )
    }

    /// Partitions of the internal topic: its own count once it exists,
    /// `transaction.state.log.num.partitions` before.
    fn count_in(image: &gregor_meta::MetadataImage, config: &BrokerConfig) -> i32 {
        match image.topic(TXN_TOPIC) {
            Some(t) if !t.partitions.is_empty() => t.partitions.len() as i32,
            _ => config.int("transaction.state.log.num.partitions") as i32,
        }
    }

    /// Brings the shards in line with the `__transaction_state` partitions this node leads;
    /// nothing at all while it hosts none and never did.
    pub fn reconcile(
        self: &Arc<Self>,
        replicas: &ReplicaManager,
        settings: &TxnSettings,
        markers: &Arc<MarkerSender>,
    ) {
        if self.table.get().is_none() && !replicas.all().iter().any(|p| p.topic == TXN_TOPIC) {
            return;
        }
        let weak = Arc::downgrade(self);
        self.table().reconcile(replicas, |part, epoch, stop| {
            crate::runtime::spawn(load_and_run(
                weak.clone(),
                part,
                epoch,
                settings.clone(),
                markers.clone(),
                stop,
            ));
        });
    }

    /// Sends `call` to the shard of its transactional id, creating the internal topic first if
    /// it does not exist yet.
    pub async fn call(
        &self,
        b: ControlPlane<'_>,
        call: TxnCall,
    ) -> Result<TxnReply, ResponseError> {
        let p = self
            .partition_after_creation(b, call.transactional_id())
            .await?;
        self.ask(&b.metadata.image(), b.node_id, p, |reply| {
            TxnMsg::Call(call, reply)
        })
        .await
    }

    /// A call to the shard of partition `p` of the internal topic, hosted here (a partition
    /// leader adding a partition for a transaction-version-2 producer).
    pub async fn call_here(
        &self,
        image: &gregor_meta::MetadataImage,
        node_id: i32,
        p: i32,
        call: TxnCall,
    ) -> Result<TxnReply, ResponseError> {
        self.ask(image, node_id, p, |reply| TxnMsg::Call(call, reply))
            .await
    }

    /// Verifies with the shard of partition `p` of the internal topic, hosted here.
    pub async fn verify(
        &self,
        image: &gregor_meta::MetadataImage,
        node_id: i32,
        p: i32,
        v: Verification,
    ) -> Result<VerifyAnswer, ResponseError> {
        self.ask(image, node_id, p, |reply| TxnMsg::Verify(v, reply))
            .await
    }

    /// Reads the state of the shard of partition `p` of the internal topic, hosted here:
    /// NOT_COORDINATOR when it is not, COORDINATOR_LOAD_IN_PROGRESS while it loads. Never
    /// creates the internal topic (nor this node's shard table).
    pub async fn read<T: Send + 'static>(
        &self,
        image: &gregor_meta::MetadataImage,
        node_id: i32,
        p: i32,
        f: impl FnOnce(&TxnCoordinator) -> T + Send + 'static,
    ) -> Result<T, ResponseError> {
        if self.table.get().is_none() {
            return Err(ResponseError::NotCoordinator);
        }
        self.ask(image, node_id, p, |reply| {
            TxnMsg::Read(Box::new(move |c| {
                let _ = reply.send(f(c));
            }))
        })
        .await
    }

    /// Partitions of the internal topic with a loaded shard here, and with one still loading.
    pub fn shard_partitions(&self) -> (Vec<i32>, Vec<i32>) {
        match self.table.get() {
            Some(t) => t.shard_partitions(),
            None => (Vec::new(), Vec::new()),
        }
    }

    async fn ask<T>(
        &self,
        image: &gregor_meta::MetadataImage,
        node_id: i32,
        p: i32,
        msg: impl FnOnce(oneshot::Sender<T>) -> TxnMsg,
    ) -> Result<T, ResponseError> {
        let table = self.table();
        if !table.hosts(p) && table.taking_over(image, node_id, p) {
            return Err(ResponseError::CoordinatorLoadInProgress);
        }
        let tx = table.route(p)?;
        let (reply, rx) = oneshot::channel();
        tx.send(msg(reply))
            .await
            .map_err(|_| ResponseError::NotCoordinator)?;
        rx.await.map_err(|_| ResponseError::NotCoordinator)
    }

    /// Makes sure the internal topic exists and answers the partition of `transactional_id`
    /// (FindCoordinator).
    pub async fn coordinator_partition(
        &self,
        b: ControlPlane<'_>,
        transactional_id: &str,
    ) -> Result<i32, ResponseError> {
        self.partition_after_creation(b, transactional_id).await
    }

    /// The partition of `transactional_id`, after creating the internal topic if needed (and
    /// then waiting a bounded time for its first load).
    async fn partition_after_creation(
        &self,
        b: ControlPlane<'_>,
        transactional_id: &str,
    ) -> Result<i32, ResponseError> {
        if b.metadata.image().topic(TXN_TOPIC).is_some() {
            return Ok(Transactions::partition_of(b, transactional_id));
        }
        ensure_topic(b).await?;
        Ok(self
            .table()
            .await_first_load(
                || b.metadata.image(),
                b.node_id,
                |image| partition_for(transactional_id, Transactions::count_in(image, b.config)),
                FIRST_LOAD_WAIT,
            )
            .await)
    }
}

/// Creates `__transaction_state` if it does not exist: `transaction.state.log.*` partitions,
/// replication factor (capped by the live brokers) and `min.insync.replicas`, compacted.
async fn ensure_topic(b: ControlPlane<'_>) -> Result<(), ResponseError> {
    if b.metadata.image().topic(TXN_TOPIC).is_some() {
        return Ok(());
    }
    let live = b.metadata.image().active_brokers().count().max(1) as i64;
    let rf = b
        .config
        .int("transaction.state.log.replication.factor")
        .min(live);
    let min_isr = b.config.int("transaction.state.log.min.isr").min(rf);
    let partitions = b.config.int("transaction.state.log.num.partitions") as i32;
    let topic = gregor_meta::CreatableTopic::new(TXN_TOPIC)
        .with_layout(partitions, rf as i16)
        .with_config("cleanup.policy", "compact")
        .with_config("min.insync.replicas", &min_isr.to_string())
        .with_config(
            "segment.bytes",
            &b.config
                .int("transaction.state.log.segment.bytes")
                .to_string(),
        );
    crate::forward::create_internal_topic(b, topic).await
}

/// Rebuilds one shard from its partition's log (control batches are no transaction records).
/// Blocking file work.
fn load(part: &Partition, config: TxnConfig) -> Result<TxnCoordinator, ResponseError> {
    let mut coordinator = TxnCoordinator::new(config);
    crate::coordinator_shards::for_each_batch(part, "transaction state", |h, _, records| {
        // Control batches (markers of the partition's own producers) hold no state.
        if h.is_control() {
            return;
        }
        for r in records {
            let Some(key) = r.key else { continue };
            if let Err(e) = coordinator.replay(&key, r.value.as_deref()) {
                warn!(partition = part.index, offset = r.offset, error = %e, "skipping an unreadable transaction log record");
            }
        }
    })?;
    Ok(coordinator)
}

/// Loads a shard and, if its slot still wants it, runs it until it is stopped.
async fn load_and_run(
    txns: Weak<Transactions>,
    part: Arc<Partition>,
    leader_epoch: i32,
    settings: TxnSettings,
    markers: Arc<MarkerSender>,
    mut stop: oneshot::Receiver<()>,
) {
    let config = settings.config;
    let loading = part.clone();
    let loaded = tokio::select! {
        r = blocking(move || load(&loading, config)) => r,
        _ = &mut stop => return,
    };
    let coordinator = match loaded {
        Ok(c) => c,
        Err(e) => {
            warn!(partition = part.index, leader_epoch, error = ?e, "cannot load transaction coordinator shard");
            return;
        }
    };
    // The planted bugs live on the simulation's thread, not the blocking load's.
    #[cfg(feature = "simulation")]
    let coordinator = {
        let mut c = coordinator;
        c.plant_v2_any_retry(planted!(TxnV2AnyRetry));
        c
    };
    let Some(txns) = txns.upgrade() else { return };
    let Some(rx) = txns.table().install(&part, leader_epoch) else {
        return;
    };
    drop(txns);
    let shard = Shard {
        part,
        coordinator_epoch: leader_epoch,
        markers,
        waiting: HashMap::new(),
        next_id: 1,
        decisions: TxnDecisions::default(),
        metrics: settings.metrics.clone(),
    };
    shard.run(settings, coordinator, rx, stop).await;
}

/// Answers a message that only reads the shard's state (KIP-890's verification, KIP-664's
/// describe and list), at once.
fn answer_read(coordinator: &TxnCoordinator, msg: TxnMsg) {
    match msg {
        TxnMsg::Verify(v, reply) => {
            let _ = reply.send(coordinator.verify(&v.transactional_id, v.producer, &v.partitions));
        }
        TxnMsg::Read(read) => read(coordinator),
        // A change goes through the shard's `handle`, never here.
        TxnMsg::Call(..) => {}
    }
}

/// A running shard's shell state.
struct Shard {
    part: Arc<Partition>,
    coordinator_epoch: i32,
    markers: Arc<MarkerSender>,
    waiting: HashMap<u64, oneshot::Sender<TxnReply>>,
    next_id: u64,
    /// Which queued appends are decisions, for `gregor_transactions_ended_total`.
    decisions: TxnDecisions,
    metrics: TxnMetrics,
}

/// What a shard's effects queue.
struct Queues {
    appends: mpsc::UnboundedSender<(AppendToken, Vec<Record>)>,
    markers_done: mpsc::UnboundedSender<Result<String, MarkerError>>,
}

impl Shard {
    /// Requests, timeouts, append completions and written markers, one at a time, until the
    /// shard is stopped (its node lost the leadership).
    async fn run(
        mut self,
        settings: TxnSettings,
        mut coordinator: TxnCoordinator,
        mut rx: mpsc::Receiver<TxnMsg>,
        mut stop: oneshot::Receiver<()>,
    ) {
        let (append_tx, append_rx) = mpsc::unbounded_channel();
        let (done_tx, mut done_rx) = mpsc::unbounded_channel::<AppendDone>();
        let (markers_tx, mut markers_rx) = mpsc::unbounded_channel();
        let queues = Queues {
            appends: append_tx,
            markers_done: markers_tx,
        };
        // Dropped with the shard: the marker tasks it started stop retrying.
        let (_cancel, cancel) = watch::channel(false);
        crate::runtime::spawn(appender(
            self.part.clone(),
            settings.commit_timeout,
            "offsets.commit.timeout.ms",
            append_rx,
            done_tx,
        ));
        let mut pending = self.carry_out(coordinator.complete_load(), &queues, &cancel);
        info!(
            partition = self.part.index,
            "transaction coordinator shard loaded"
        );
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
                    rx.close();
                    info!(partition = self.part.index, "transaction coordinator shard unloaded");
                    return;
                }
                m = rx.recv(), if pending < MAX_PENDING_APPENDS => match m {
                    Some(TxnMsg::Call(call, reply)) => self.handle(&mut coordinator, call, reply),
                    Some(read_only) => {
                        answer_read(&coordinator, read_only);
                        Vec::new()
                    }
                    None => return,
                },
                Some((token, result)) = done_rx.recv() => {
                    pending -= 1;
                    self.append_completed(&mut coordinator, token, result.is_ok())
                }
                Some(written) = markers_rx.recv() => match written {
                    Ok(id) => coordinator.markers_written(now_ms(), &id),
                    // A newer coordinator fenced this one, or the shard is stopping: either way
                    // it is about to unload, and the next coordinator resumes the markers.
                    Err(e) => {
                        info!(partition = self.part.index, error = %e, "transaction markers not written");
                        Vec::new()
                    }
                },
                _ = sleep => self.tick(&mut coordinator),
            };
            pending += self.carry_out(effects, &queues, &cancel);
        }
    }

    /// An append is durable (or failed); a decision it made durable is counted.
    fn append_completed(
        &mut self,
        coordinator: &mut TxnCoordinator,
        token: AppendToken,
        ok: bool,
    ) -> Vec<TxnEffect> {
        let effects = coordinator.append_completed(token, ok);
        self.decisions.completed(token, &effects, &self.metrics);
        effects
    }

    /// Timeouts: the aborts they decide are the coordinator's own.
    fn tick(&mut self, coordinator: &mut TxnCoordinator) -> Vec<TxnEffect> {
        let effects = coordinator.tick(now_ms());
        self.decisions.queued(txn_reason::TIMEOUT, &effects);
        effects
    }

    fn handle(
        &mut self,
        coordinator: &mut TxnCoordinator,
        call: TxnCall,
        reply: oneshot::Sender<TxnReply>,
    ) -> Vec<TxnEffect> {
        let id = self.next_id;
        self.next_id += 1;
        self.waiting.insert(id, reply);
        let now = now_ms();
        // A decision an InitProducerId makes aborts the open transaction it fences.
        let reason = match &call {
            TxnCall::Init { .. } => Some(txn_reason::FENCED),
            TxnCall::End { .. } => Some(txn_reason::END_TXN),
            TxnCall::AddPartitions { .. } => None,
        };
        let effects = match call {
            TxnCall::Init {
                transactional_id,
                timeout_ms,
                expected,
                fresh_producer_id,
            } => coordinator.init_producer_id(
                now,
                id,
                &transactional_id,
                timeout_ms,
                expected,
                fresh_producer_id,
            ),
            TxnCall::AddPartitions {
                transactional_id,
                producer,
                partitions,
            } => coordinator.add_partitions(now, id, &transactional_id, producer, &partitions),
            TxnCall::End {
                transactional_id,
                producer,
                commit,
                version2,
            } => coordinator.end_txn(now, id, &transactional_id, producer, commit, version2),
        };
        if let Some(reason) = reason {
            self.decisions.queued(reason, &effects);
        }
        effects
    }

    /// Carries out effects; returns how many appends it queued.
    fn carry_out(
        &mut self,
        effects: Vec<TxnEffect>,
        queues: &Queues,
        cancel: &watch::Receiver<bool>,
    ) -> usize {
        #[cfg(feature = "simulation")]
        let effects = crate::simulation::markers_before_prepare(effects);
        let mut appends = 0;
        for e in effects {
            match e {
                TxnEffect::Respond { request_id, reply } => {
                    if let Some(waiter) = self.waiting.remove(&request_id) {
                        let _ = waiter.send(reply);
                    }
                }
                TxnEffect::Append { token, record } => {
                    if queues.appends.send((token, vec![record])).is_ok() {
                        appends += 1;
                    }
                }
                TxnEffect::WriteMarkers {
                    transactional_id,
                    producer,
                    commit,
                    partitions,
                } => {
                    let request = MarkerRequest {
                        producer_id: producer.producer_id,
                        producer_epoch: producer.epoch,
                        coordinator_epoch: self.coordinator_epoch,
                        commit,
                        partitions,
                    };
                    let sender = self.markers.clone();
                    let done = queues.markers_done.clone();
                    let cancel = cancel.clone();
                    let (metrics, decided_ms) = (self.metrics.clone(), now_ms());
                    crate::runtime::spawn(async move {
                        let result = sender.send(&request, cancel).await;
                        if result.is_ok() {
                            metrics.markers_written(now_ms() - decided_ms);
                        }
                        let _ = done.send(result.map(|()| transactional_id));
                    });
                }
            }
        }
        appends
    }
}
