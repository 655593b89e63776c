//! The transaction marker sender: once a transaction coordinator has decided (commit or abort),
//! it writes the marker to every partition of the transaction, on each partition's current
//! leader, and retries until every marker is written (Kafka's TransactionMarkerChannelManager
//! and its completion handler).
//!
//! Partitions this node leads are written through the replica manager; those led elsewhere get
//! one WriteTxnMarkers v1 per leader over the inter-broker listener (the replica fetchers'
//! transport: TLS, SASL), one connection per broker, reused. A partition is done when its marker
//! is in its ISR, or when its topic or partition is gone from the metadata image (a deleted
//! partition needs no marker). Retriable failures are retried with the leader looked up again;
//! INVALID_PRODUCER_EPOCH or TRANSACTION_COORDINATOR_FENCED means this coordinator is stale, and
//! it stops.
//!
//! The bookkeeping ([`Pending`]: which partitions remain, where each goes, what an answer does,
//! the backoff) is pure; [`MarkerSender`] does the I/O around it.

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Weak};
use std::time::Duration;

use futures::future::join_all;

use gregor_log::txn::Marker;
use gregor_meta::{MetadataImage, NO_LEADER};
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{ProducerId, TopicName, WriteTxnMarkersRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;
use tracing::{debug, info};

use crate::broker_links::BrokerLinks;
use crate::data_plane::TxnHooks;
use crate::groups::OFFSETS_TOPIC;
use crate::partition::Partition;
use crate::replica::ReplicaManager;

/// How long a marker waits for the ISR (Kafka bounds it by `request.timeout.ms`, 30 s).
pub const MARKER_TIMEOUT: Duration = Duration::from_secs(30);

/// WriteTxnMarkers v1: flexible versions; v0 is deprecated (KIP-896).
const WRITE_TXN_MARKERS_VERSION: i16 = 1;

/// The first retry's pause, doubled per failed round up to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_millis(10);
const MAX_BACKOFF: Duration = Duration::from_secs(1);

/// A partition failing for longer than this is reported at INFO, at most once per this long
/// per request (a retry alone is DEBUG: leaders move all the time).
const STUCK_AFTER: Duration = Duration::from_secs(10);

/// One decided transaction's markers: the coordinator's producer id and epoch, its own epoch
/// (the partition leaders refuse an older coordinator's), commit or abort, and the partitions.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MarkerRequest {
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
    pub commit: bool,
    pub partitions: Vec<(String, i32)>,
}

/// Why a [`MarkerRequest`] ended without every marker written.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MarkerError {
    /// A partition leader knows a newer producer or coordinator epoch: this coordinator is
    /// stale and must not complete the transaction.
    #[error("coordinator fenced: {topic}-{partition} answered {error:?}")]
    Fenced {
        topic: String,
        partition: i32,
        error: ResponseError,
    },
    /// The caller cancelled (its coordinator shard unloaded).
    #[error("marker sending cancelled")]
    Cancelled,
}

type Key = (String, i32);

/// Where a partition's marker goes now, per the metadata image.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Route {
    /// The topic or partition no longer exists: nothing to write.
    Gone,
    /// No leader at the moment (election, or its only replica is offline).
    NoLeader,
    /// This node leads it.
    Local,
    /// That broker leads it.
    Remote(i32),
}

/// Where `topic`-`partition`'s marker goes, seen from `node_id`.
pub fn route(image: &MetadataImage, node_id: i32, topic: &str, partition: i32) -> Route {
    match image
        .topic(topic)
        .and_then(|t| t.partitions.get(&partition))
    {
        None => Route::Gone,
        Some(p) if p.leader == NO_LEADER || p.leader < 0 => Route::NoLeader,
        Some(p) if p.leader == node_id => Route::Local,
        Some(p) => Route::Remote(p.leader),
    }
}

/// One round's work: the partitions to write here, and those to send to each leader.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Plan {
    pub local: Vec<Key>,
    pub remote: BTreeMap<i32, Vec<Key>>,
    /// Waiting for a leader (already recorded as this round's failure).
    pub leaderless: Vec<Key>,
}

impl Plan {
    /// Nothing to send this round.
    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.local.is_empty() && self.remote.is_empty()
    }
}

/// Why one partition's marker was not written this round.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Failure {
    /// The leader (or this node's replica) answered this error.
    Code(ResponseError),
    /// The leader could not be reached, or its connection failed.
    Connection(String),
    /// The image names no leader.
    NoLeader,
    /// The leader's answer left the partition out.
    Unanswered,
}

/// What an answer does to a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    Written,
    Retry,
    Fenced,
}

/// Kafka's reading of a partition's error: fencing stops, everything else is retried with the
/// leader looked up again. UNKNOWN_TOPIC_OR_PARTITION is retried too: the next lookup drops
/// the partition if the image no longer has it, and retries if the leader just lags behind.
/// Errors Kafka calls unexpected (CORRUPT_MESSAGE, UNKNOWN_SERVER_ERROR...) are retried rather
/// than given up on, since a transaction with a missing marker would hang its partition's
/// last stable offset; they show in the INFO report of a stuck partition.
pub fn verdict(result: &Result<(), Failure>) -> Verdict {
    match result {
        Ok(()) => Verdict::Written,
        Err(Failure::Code(
            ResponseError::InvalidProducerEpoch | ResponseError::TransactionCoordinatorFenced,
        )) => Verdict::Fenced,
        Err(_) => Verdict::Retry,
    }
}

/// A partition still waiting for its marker.
#[derive(Debug, Clone, Default)]
struct Waiting {
    /// Since when it has failed without a success in between.
    failing_since: Option<Instant>,
    last_failure: Option<Failure>,
}

/// A partition failing for a long time, for the INFO report.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stuck {
    pub topic: String,
    pub partition: i32,
    pub failing_for: Duration,
    pub last_failure: Option<Failure>,
}

/// The bookkeeping of one [`MarkerRequest`]: pure; the caller brings the routes, the answers
/// and the time.
#[derive(Debug)]
pub struct Pending {
    waiting: BTreeMap<Key, Waiting>,
    /// Rounds in a row that wrote nothing (the backoff's exponent).
    idle_rounds: u32,
    fenced: Option<(Key, ResponseError)>,
    last_report: Option<Instant>,
}

impl Pending {
    /// Every partition of the request, each once.
    pub fn new(partitions: &[Key]) -> Pending {
        Pending {
            waiting: partitions
                .iter()
                .map(|k| (k.clone(), Waiting::default()))
                .collect(),
            idle_rounds: 0,
            fenced: None,
            last_report: None,
        }
    }

    pub fn is_done(&self) -> bool {
        self.waiting.is_empty()
    }

    /// The partitions still waiting, in order.
    #[cfg(test)]
    pub fn remaining(&self) -> Vec<Key> {
        self.waiting.keys().cloned().collect()
    }

    /// The partition and error that fenced this coordinator, if one did.
    pub fn fenced(&self) -> Option<&(Key, ResponseError)> {
        self.fenced.as_ref()
    }

    /// This round's work, from each waiting partition's route now: gone partitions are done,
    /// leaderless ones fail the round, the rest are grouped by leader.
    pub fn plan(&mut self, route: impl Fn(&str, i32) -> Route, now: Instant) -> Plan {
        let mut plan = Plan::default();
        let mut gone = Vec::new();
        let mut leaderless = Vec::new();
        for key in self.waiting.keys() {
            match route(&key.0, key.1) {
                Route::Gone => gone.push(key.clone()),
                Route::NoLeader => leaderless.push(key.clone()),
                Route::Local => plan.local.push(key.clone()),
                Route::Remote(leader) => plan.remote.entry(leader).or_default().push(key.clone()),
            }
        }
        for key in gone {
            self.waiting.remove(&key);
        }
        for key in &leaderless {
            self.record(key, Err(Failure::NoLeader), now);
        }
        plan.leaderless = leaderless;
        plan
    }

    /// A partition's answer this round. Answers for partitions no longer waiting are ignored.
    pub fn record(&mut self, key: &Key, result: Result<(), Failure>, now: Instant) -> Verdict {
        let v = verdict(&result);
        match v {
            Verdict::Written => {
                if self.waiting.remove(key).is_some() {
                    self.idle_rounds = 0;
                }
            }
            Verdict::Fenced => {
                if let Err(Failure::Code(e)) = result {
                    self.fenced.get_or_insert((key.clone(), e));
                }
            }
            Verdict::Retry => {
                if let Some(w) = self.waiting.get_mut(key) {
                    w.failing_since.get_or_insert(now);
                    w.last_failure = result.err();
                }
            }
        }
        v
    }

    /// The pause before the next round: 10 ms after a round that wrote something, doubling
    /// per round that wrote nothing, at most 1 s. Call once per round, after its answers.
    pub fn backoff(&mut self) -> Duration {
        let pause = FIRST_BACKOFF
            .saturating_mul(1u32 << self.idle_rounds.min(16))
            .min(MAX_BACKOFF);
        self.idle_rounds = self.idle_rounds.saturating_add(1);
        pause
    }

    /// The partitions failing for over 10 s, when a report is due (at most one per 10 s).
    pub fn stuck(&mut self, now: Instant) -> Vec<Stuck> {
        if self
            .last_report
            .is_some_and(|t| now.saturating_duration_since(t) < STUCK_AFTER)
        {
            return Vec::new();
        }
        let stuck: Vec<Stuck> = self
            .waiting
            .iter()
            .filter_map(|(k, w)| {
                let since = w.failing_since?;
                let failing_for = now.saturating_duration_since(since);
                (failing_for >= STUCK_AFTER).then(|| Stuck {
                    topic: k.0.clone(),
                    partition: k.1,
                    failing_for,
                    last_failure: w.last_failure.clone(),
                })
            })
            .collect();
        if !stuck.is_empty() {
            self.last_report = Some(now);
        }
        stuck
    }
}

/// Appends `marker` to `part` (which must lead) in turn with the producers' batches and waits
/// until the ISR holds it, at most [`MARKER_TIMEOUT`]: what WriteTxnMarkers does per partition
/// and what the sender does for the partitions this node leads.
/// In a `__consumer_offsets` partition, the group coordinator then settles the producer's
/// pending transactional offsets (`hooks`) before the marker counts as written: the producer's
/// next transaction's offsets must not be settled by this marker.
pub async fn append_marker(
    part: &Arc<Partition>,
    marker: Marker,
    hooks: Option<&dyn TxnHooks>,
) -> Result<(), ResponseError> {
    let pending = part.spawn_marker(marker);
    let _ = pending.written.await;
    let replicated = async {
        let outcome = pending.done.await.unwrap_or_else(|e| {
            tracing::error!(topic = %part.topic, partition = part.index, error = %e, "marker task failed");
            Err(ResponseError::UnknownServerError.into())
        })?;
        part.await_high_watermark(outcome.end_offset).await?;
        Ok(())
    };
    tokio::time::timeout(MARKER_TIMEOUT, replicated)
        .await
        .unwrap_or(Err(ResponseError::RequestTimedOut))?;
    if part.topic == OFFSETS_TOPIC {
        if let Some(hooks) = hooks {
            hooks
                .offsets_marker_written(part.index, marker.producer_id, marker.commit)
                .await;
        }
    }
    Ok(())
}

/// The current metadata image (the broker's `MetadataManager::image`).
pub type ImageSource = Arc<dyn Fn() -> Arc<MetadataImage> + Send + Sync>;

/// Writes [`MarkerRequest`]s; one per node, shared by the coordinator shards (requests run
/// concurrently and share the connections).
pub struct MarkerSender {
    node_id: i32,
    image: ImageSource,
    replicas: Arc<ReplicaManager>,
    links: Arc<BrokerLinks>,
    /// The broker, for the group coordinator's side of `__consumer_offsets` markers.
    hooks: Weak<dyn TxnHooks>,
}

/// One partition's answer in a round.
type Answer = (Key, Result<(), Failure>);

impl MarkerSender {
    pub fn new(
        node_id: i32,
        image: ImageSource,
        replicas: Arc<ReplicaManager>,
        links: Arc<BrokerLinks>,
        hooks: Weak<dyn TxnHooks>,
    ) -> MarkerSender {
        MarkerSender {
            node_id,
            image,
            replicas,
            links,
            hooks,
        }
    }

    /// Writes `req`'s marker to all its partitions; returns once each is written or gone.
    /// Stops with [`MarkerError::Fenced`] when a leader says this coordinator is stale, and
    /// with [`MarkerError::Cancelled`] once `cancel` turns true or its sender is dropped.
    pub async fn send(
        &self,
        req: &MarkerRequest,
        mut cancel: watch::Receiver<bool>,
    ) -> Result<(), MarkerError> {
        let mut pending = Pending::new(&req.partitions);
        loop {
            let image = (self.image)();
            let plan = pending.plan(|t, p| route(&image, self.node_id, t, p), Instant::now());
            drop(image);
            for (topic, partition) in &plan.leaderless {
                debug!(%topic, partition, producer_id = req.producer_id, "transaction marker waits for a leader");
            }
            let answers = tokio::select! {
                biased;
                _ = cancelled(&mut cancel) => return Err(MarkerError::Cancelled),
                answers = self.round(req, plan) => answers,
            };
            let now = Instant::now();
            for (key, result) in answers {
                if let Err(f) = &result {
                    debug!(topic = %key.0, partition = key.1, producer_id = req.producer_id, failure = ?f, "transaction marker not written; retrying");
                }
                pending.record(&key, result, now);
            }
            if let Some(((topic, partition), error)) = pending.fenced() {
                return Err(MarkerError::Fenced {
                    topic: topic.clone(),
                    partition: *partition,
                    error: *error,
                });
            }
            if pending.is_done() {
                return Ok(());
            }
            report_stuck(req, pending.stuck(now));
            let pause = pending.backoff();
            tokio::select! {
                biased;
                _ = cancelled(&mut cancel) => return Err(MarkerError::Cancelled),
                _ = tokio::time::sleep(pause) => {}
            }
        }
    }

    /// Writes the planned partitions, local and remote at once.
    async fn round(&self, req: &MarkerRequest, plan: Plan) -> Vec<Answer> {
        let marker = Marker {
            producer_id: req.producer_id,
            producer_epoch: req.producer_epoch,
            coordinator_epoch: req.coordinator_epoch,
            commit: req.commit,
            timestamp: crate::runtime::now_ms(),
        };
        let local = join_all(plan.local.into_iter().map(|key| async move {
            let hooks = self.hooks.upgrade();
            let result = match self.replicas.get(&key.0, key.1) {
                Some(part) => append_marker(&part, marker, hooks.as_deref()).await,
                None => Err(ResponseError::NotLeaderOrFollower),
            };
            (key, result.map_err(Failure::Code))
        }));
        let remote = join_all(
            plan.remote
                .into_iter()
                .map(|(leader, keys)| self.send_remote(leader, req, keys)),
        );
        let (mut answers, remote) = tokio::join!(local, remote);
        answers.extend(remote.into_iter().flatten());
        answers
    }

    /// One WriteTxnMarkers to `leader` for `keys`; a connection failure fails them all.
    async fn send_remote(&self, leader: i32, req: &MarkerRequest, keys: Vec<Key>) -> Vec<Answer> {
        let request = write_request(req, &keys);
        let image = (self.image)();
        match self
            .links
            .send(&image, leader, &request, WRITE_TXN_MARKERS_VERSION)
            .await
        {
            Ok(resp) => answers(keys, &resp),
            Err(e) => fail_all(keys, &e),
        }
    }
}

/// Resolves once `cancel` turns true or its sender is gone.
async fn cancelled(cancel: &mut watch::Receiver<bool>) {
    let _ = cancel.wait_for(|c| *c).await;
}

fn report_stuck(req: &MarkerRequest, stuck: Vec<Stuck>) {
    for s in stuck {
        info!(
            topic = %s.topic,
            partition = s.partition,
            producer_id = req.producer_id,
            commit = req.commit,
            failing_secs = s.failing_for.as_secs(),
            last_failure = ?s.last_failure,
            "transaction marker still not written"
        );
    }
}

fn fail_all(keys: Vec<Key>, reason: &str) -> Vec<Answer> {
    keys.into_iter()
        .map(|k| (k, Err(Failure::Connection(reason.to_string()))))
        .collect()
}

/// WriteTxnMarkers for one marker, its partitions grouped by topic in order.
pub fn write_request(req: &MarkerRequest, keys: &[Key]) -> WriteTxnMarkersRequest {
    let mut topics: Vec<WritableTxnMarkerTopic> = Vec::new();
    for (topic, partition) in keys {
        match topics.iter_mut().find(|t| t.name.0.as_str() == topic) {
            Some(t) => t.partition_indexes.push(*partition),
            None => {
                let mut t = WritableTxnMarkerTopic::default();
                t.name = TopicName(StrBytes::from_string(topic.clone()));
                t.partition_indexes = vec![*partition];
                topics.push(t);
            }
        }
    }
    let mut m = WritableTxnMarker::default();
    m.producer_id = ProducerId(req.producer_id);
    m.producer_epoch = req.producer_epoch;
    m.transaction_result = req.commit;
    m.coordinator_epoch = req.coordinator_epoch;
    m.topics = topics;
    let mut r = WriteTxnMarkersRequest::default();
    r.markers = vec![m];
    r
}

/// Each asked partition's answer in `resp`; one it leaves out is [`Failure::Unanswered`].
pub fn answers(
    keys: Vec<Key>,
    resp: &kafka_protocol::messages::WriteTxnMarkersResponse,
) -> Vec<Answer> {
    let mut codes: HashMap<(&str, i32), i16> = HashMap::new();
    for m in &resp.markers {
        for t in &m.topics {
            for p in &t.partitions {
                codes.insert((t.name.0.as_str(), p.partition_index), p.error_code);
            }
        }
    }
    keys.into_iter()
        .map(|k| {
            let result = match codes.get(&(k.0.as_str(), k.1)) {
                None => Err(Failure::Unanswered),
                Some(0) => Ok(()),
                Some(&code) => Err(Failure::Code(
                    ResponseError::try_from_code(code).unwrap_or(ResponseError::UnknownServerError),
                )),
            };
            (k, result)
        })
        .collect()
}

#[cfg(test)]
#[path = "txn_markers_tests.rs"]
mod tests;
