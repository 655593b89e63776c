//! Replica fetchers: one task per source broker copies the partitions this node follows from
//! their leader, with Kafka's follower Fetch (the replica id and the current leader epoch) over
//! the leader's client listener.
//!
//! A partition that starts following a leader (or a new leader epoch) first asks the leader,
//! with OffsetForLeaderEpoch, where its log ends for the follower's latest epoch, and truncates
//! only the suffix that diverges (KIP-101 / KIP-279); then it fetches from its log end. Fetched
//! batches are appended and synced before the next fetch, so the offset each fetch names is on
//! the follower's disk: the leader counts it toward the high watermark only then.
//!
//! A round's fetch positions move only for the partitions its answer carried. While nothing
//! else changed since (the partitions followed, their state, the throttle), the next round
//! reads the positions of those only and names those that moved; an idle round names nothing.
//! Only a change to the set or a partition's state goes over every partition again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use gregor_client::connection::Connection;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::offset_for_leader_epoch_request::{
    OffsetForLeaderPartition, OffsetForLeaderTopic,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, OffsetForLeaderEpochRequest, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::sync::Notify;
use tokio::time::Instant;
use tracing::{debug, info, warn};

use crate::partition::Partition;
use crate::quota::Throttles;
use crate::runtime::blocking;
use crate::transport::SharedTransport;

/// Fetch version: replica id in the request body, leader epochs, names (not topic ids).
const FETCH_VERSION: i16 = 12;
const OFFSET_FOR_LEADER_EPOCH_VERSION: i16 = 4;

/// Pause before retrying a partition whose leader has not yet applied the metadata this
/// follower acted on (NOT_LEADER_OR_FOLLOWER, UNKNOWN_LEADER_EPOCH): the metadata log reaches
/// it within milliseconds, and the high watermark waits for this follower meanwhile.
const METADATA_RACE_BACKOFF: Duration = Duration::from_millis(20);

/// The follower settings (`replica.fetch.*`, `replica.socket.timeout.ms`).
#[derive(Debug, Clone, Copy)]
pub struct FetchSettings {
    pub partition_max_bytes: i32,
    pub response_max_bytes: i32,
    pub min_bytes: i32,
    pub max_wait: Duration,
    pub backoff: Duration,
    pub socket_timeout: Duration,
}

impl Default for FetchSettings {
    fn default() -> Self {
        FetchSettings {
            partition_max_bytes: 1 << 20,
            response_max_bytes: 10 << 20,
            min_bytes: 1,
            max_wait: Duration::from_millis(500),
            backoff: Duration::from_millis(1000),
            socket_timeout: Duration::from_secs(30),
        }
    }
}

type Key = (String, i32);

/// One followed partition.
#[derive(Clone)]
struct FetchState {
    part: Arc<Partition>,
    leader_epoch: i32,
    /// Must find its divergence point before fetching.
    truncate: bool,
    retry_at: Option<Instant>,
    /// The fetch offset and log start offset of this round's request, read as the request is
    /// built (see [`still_following`]).
    position: Option<(i64, i64)>,
}

/// The fetcher of one source broker.
struct Fetcher {
    leader: i32,
    partitions: Mutex<HashMap<Key, FetchState>>,
    /// Partitions added or removed: an in-flight fetch is abandoned for one with the new set.
    changed: Notify,
    /// Bumped by every change to `partitions` (added, removed, an outcome applied), so that a
    /// round knows whether the previous one's request still holds.
    generation: AtomicU64,
}

impl Fetcher {
    fn bump(&self) {
        self.generation.fetch_add(1, Ordering::SeqCst);
    }
}

fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A fetcher and its task.
type RunningFetcher = (Arc<Fetcher>, tokio::task::JoinHandle<()>);

/// The fetchers of this node, by source broker.
pub struct FetcherManager {
    node_id: i32,
    throttles: Arc<Throttles>,
    settings: Mutex<FetchSettings>,
    /// How fetchers connect to leaders.
    transport: Mutex<SharedTransport>,
    runtime: Option<tokio::runtime::Handle>,
    /// Client listener addresses of the brokers, from the metadata image.
    endpoints: Arc<Mutex<HashMap<i32, String>>>,
    fetchers: Mutex<HashMap<i32, RunningFetcher>>,
}

impl FetcherManager {
    pub fn new(node_id: i32, throttles: Arc<Throttles>) -> FetcherManager {
        FetcherManager {
            node_id,
            throttles,
            settings: Mutex::new(FetchSettings::default()),
            transport: Mutex::new(SharedTransport::tcp()),
            runtime: tokio::runtime::Handle::try_current().ok(),
            endpoints: Arc::new(Mutex::new(HashMap::new())),
            fetchers: Mutex::new(HashMap::new()),
        }
    }

    pub fn set_settings(&self, settings: FetchSettings) {
        *lock(&self.settings) = settings;
    }

    /// How fetchers started from now on connect to leaders (TCP unless set).
    pub fn set_transport(&self, transport: SharedTransport) {
        *lock(&self.transport) = transport;
    }

    /// The brokers' client listener addresses.
    pub fn set_endpoints(&self, endpoints: HashMap<i32, String>) {
        *lock(&self.endpoints) = endpoints;
    }

    /// Follows `part` from `leader` in `leader_epoch`, starting with the divergence check.
    pub fn follow(&self, part: Arc<Partition>, leader: i32, leader_epoch: i32) {
        let key = (part.topic.clone(), part.index);
        debug!(topic = %key.0, partition = key.1, leader, leader_epoch, "following");
        self.stop(&key);
        let Some(runtime) = &self.runtime else {
            warn!(topic = %key.0, partition = key.1, "no runtime to fetch in");
            return;
        };
        let mut fetchers = lock(&self.fetchers);
        let (fetcher, _) = fetchers.entry(leader).or_insert_with(|| {
            let fetcher = Arc::new(Fetcher {
                leader,
                partitions: Mutex::new(HashMap::new()),
                changed: Notify::new(),
                generation: AtomicU64::new(0),
            });
            let task = runtime.spawn(crate::runtime::inherit_clock(run(
                fetcher.clone(),
                self.node_id,
                *lock(&self.settings),
                self.endpoints.clone(),
                self.throttles.clone(),
                lock(&self.transport).clone(),
            )));
            (fetcher, task)
        });
        lock(&fetcher.partitions).insert(
            key,
            FetchState {
                part,
                leader_epoch,
                truncate: true,
                retry_at: None,
                position: None,
            },
        );
        fetcher.bump();
        fetcher.changed.notify_one();
    }

    /// Stops fetching `key` (the replica leads now, went offline, or is gone). A fetcher left
    /// without partitions stops.
    pub fn stop(&self, key: &Key) {
        let mut fetchers = lock(&self.fetchers);
        let mut idle = Vec::new();
        for (&leader, (fetcher, _)) in fetchers.iter() {
            let mut parts = lock(&fetcher.partitions);
            if parts.remove(key).is_some() {
                fetcher.bump();
                fetcher.changed.notify_one();
            }
            if parts.is_empty() {
                idle.push(leader);
            }
        }
        for leader in idle {
            if let Some((_, task)) = fetchers.remove(&leader) {
                task.abort();
            }
        }
    }

    /// Stops every fetcher (shutdown).
    pub fn shutdown(&self) {
        for (_, (_, task)) in lock(&self.fetchers).drain() {
            task.abort();
        }
    }
}

/// What a round leaves the next one, while `generation` holds: the same partitions, of which
/// only those `answered` may have moved their fetch positions.
struct Carried {
    generation: u64,
    fetching: Vec<(Key, FetchState)>,
    /// Where each partition is in `fetching`.
    index: HashMap<Key, usize>,
    answered: Vec<Key>,
}

impl Carried {
    fn new(generation: u64, fetching: Vec<(Key, FetchState)>) -> Carried {
        let index = fetching
            .iter()
            .enumerate()
            .map(|(i, (k, _))| (k.clone(), i))
            .collect();
        Carried {
            generation,
            fetching,
            index,
            answered: Vec::new(),
        }
    }
}

/// What a fetch loop keeps between rounds.
struct Loop {
    fetcher: Arc<Fetcher>,
    node_id: i32,
    settings: FetchSettings,
    endpoints: Arc<Mutex<HashMap<i32, String>>>,
    throttles: Arc<Throttles>,
    transport: SharedTransport,
    conn: Option<Connection>,
    /// One fetch session (KIP-227) with the leader: after the first fetch, only partitions
    /// whose fetch offset moved are named, and only those with news are answered.
    session: gregor_client::fetch_session::FetchSession,
    carried: Option<Carried>,
}

/// The fetch loop of one source broker.
async fn run(
    fetcher: Arc<Fetcher>,
    node_id: i32,
    settings: FetchSettings,
    endpoints: Arc<Mutex<HashMap<i32, String>>>,
    throttles: Arc<Throttles>,
    transport: SharedTransport,
) {
    let mut l = Loop {
        fetcher,
        node_id,
        settings,
        endpoints,
        throttles,
        transport,
        conn: None,
        session: gregor_client::fetch_session::FetchSession::new(),
        carried: None,
    };
    loop {
        let generation = l.fetcher.generation.load(Ordering::SeqCst);
        if let Some(carried) = l.carried.take() {
            if l.carry_on(carried, generation).await {
                continue;
            }
        }
        l.round(generation).await;
    }
}

impl Loop {
    /// The next round over the previous one's partitions, naming only those its answer moved,
    /// if nothing else changed; whether it ran.
    async fn carry_on(&mut self, mut carried: Carried, generation: u64) -> bool {
        let now = self.throttles.now_ms();
        if carried.generation != generation
            || self.throttles.follower_quota().wait_ms(now) != 0
            || self.conn.as_ref().is_none_or(|c| c.is_closed())
        {
            return false;
        }
        let mut moved = Vec::with_capacity(carried.answered.len());
        for key in std::mem::take(&mut carried.answered) {
            let Some(&i) = carried.index.get(&key) else {
                continue;
            };
            let st = &mut carried.fetching[i].1;
            // One that no longer follows in this epoch: a full round drops it.
            let Some(position) = st.part.follower_fetch_position(st.leader_epoch) else {
                return false;
            };
            st.position = Some(position);
            moved.push((key, st.clone()));
        }
        let mut request = fetch_request(self.node_id, &self.settings, &moved);
        if !self.session.prepare_changed(&mut request, FETCH_VERSION) {
            return false;
        }
        let Some(c) = self.conn.take() else {
            return false;
        };
        self.carried = self.exchange(c, request, carried).await;
        true
    }

    /// One round built from the partitions due now.
    async fn round(&mut self, generation: u64) {
        let fetcher = self.fetcher.clone();
        let now = Instant::now();
        let (due, retrying) = {
            let mut parts = lock(&fetcher.partitions);
            let mut due = Vec::new();
            for (k, s) in parts.iter_mut() {
                if s.retry_at.is_none_or(|t| t <= now) {
                    // Its pause is over (an outcome sets the next one).
                    s.retry_at = None;
                    due.push((k.clone(), s.clone()));
                }
            }
            let retrying = due.len() < parts.len();
            (due, retrying)
        };
        if due.is_empty() {
            let next = lock(&fetcher.partitions)
                .values()
                .filter_map(|s| s.retry_at)
                .min();
            let wait = next.map_or(Duration::from_secs(1), |t| t.saturating_duration_since(now));
            let _ = tokio::time::timeout(wait, fetcher.changed.notified()).await;
            return;
        }
        let Some(c) = self.connection().await else {
            return;
        };
        let (truncating, fetching): (Vec<_>, Vec<_>) =
            due.into_iter().partition(|(_, s)| s.truncate);
        if !truncating.is_empty() {
            self.truncate(c, &truncating).await;
            return;
        }
        let wanted = fetching.len();
        let (fetching, wait) = unthrottled(&self.throttles, self.node_id, fetching);
        let fetching = still_following(fetching);
        if fetching.is_empty() {
            self.conn = Some(c);
            let _ = tokio::time::timeout(wait, fetcher.changed.notified()).await;
            return;
        }
        // The next round may carry this one's on only if it holds every partition followed.
        let whole = !retrying && fetching.len() == wanted;
        let mut request = fetch_request(self.node_id, &self.settings, &fetching);
        self.session.prepare(&mut request, FETCH_VERSION);
        let carried = Carried::new(generation, fetching);
        self.carried = self.exchange(c, request, carried).await.filter(|_| whole);
    }

    /// The connection to the leader, made if there is none (`None`, after a pause, if it
    /// cannot be made).
    async fn connection(&mut self) -> Option<Connection> {
        if let Some(c) = self.conn.take().filter(|c| !c.is_closed()) {
            return Some(c);
        }
        let leader = self.fetcher.leader;
        let made = connect(
            leader,
            self.node_id,
            &self.settings,
            &self.endpoints,
            &self.transport,
        )
        .await;
        match made {
            Ok(c) => Some(c),
            Err(e) => {
                debug!(leader, error = %e, "cannot reach the leader to fetch from");
                let changed = self.fetcher.changed.notified();
                let _ = tokio::time::timeout(self.settings.backoff, changed).await;
                None
            }
        }
    }

    /// Finds where the logs of `truncating` diverge from the leader's.
    async fn truncate(&mut self, c: Connection, truncating: &[(Key, FetchState)]) {
        match find_divergence(&c, self.node_id, truncating).await {
            Ok(outcomes) => apply_outcomes(&self.fetcher, outcomes, &self.settings),
            Err(e) => {
                debug!(leader = self.fetcher.leader, error = %e, "OffsetForLeaderEpoch failed");
                tokio::time::sleep(self.settings.backoff.min(Duration::from_millis(100))).await;
                return;
            }
        }
        self.conn = Some(c);
    }

    /// Sends `request` for the partitions of `carried` and applies the answer; what the next
    /// round may carry on with (with the partitions answered), unless the fetch failed.
    async fn exchange(
        &mut self,
        c: Connection,
        request: FetchRequest,
        mut carried: Carried,
    ) -> Option<Carried> {
        let response = tokio::select! {
            r = c.send(&request, FETCH_VERSION) => r,
            // The partition set changed: fetch again with it at once, on a fresh connection
            // (the leader may hold the abandoned fetch for up to its max wait), in a new
            // session (the abandoned fetch may or may not have moved the session on).
            _ = self.fetcher.changed.notified() => {
                self.session.on_failure();
                return None;
            }
        };
        match response {
            Ok(r) => {
                self.session.on_response(&r);
                record_throttled_bytes(&self.throttles, &r);
                let answered_whole = r.error_code == 0;
                carried.answered = answered_keys(&r);
                let outcomes = append_fetched(r, &carried.fetching, &carried.index).await;
                apply_outcomes(&self.fetcher, outcomes, &self.settings);
                self.conn = Some(c);
                answered_whole.then_some(carried)
            }
            Err(e) => {
                self.session.on_failure();
                debug!(leader = self.fetcher.leader, error = %e, "follower fetch failed");
                let changed = self.fetcher.changed.notified();
                let _ = tokio::time::timeout(self.settings.backoff, changed).await;
                None
            }
        }
    }
}

/// The follower side of the replication throttle: while the follower quota is exceeded, this
/// replica's out-of-sync replicas of throttled partitions sit this round out. Returns the
/// partitions to fetch now and, if none, how long to wait for the quota.
fn unthrottled(
    throttles: &Throttles,
    node_id: i32,
    fetching: Vec<(Key, FetchState)>,
) -> (Vec<(Key, FetchState)>, Duration) {
    let now = throttles.now_ms();
    let wait_ms = throttles.follower_quota().wait_ms(now);
    if wait_ms == 0 {
        return (fetching, Duration::ZERO);
    }
    let (held, go): (Vec<_>, Vec<_>) = fetching.into_iter().partition(|((topic, p), st)| {
        throttles.follower_throttled(topic, *p) && !st.part.is_in_sync(node_id)
    });
    if !held.is_empty() {
        debug!(
            partitions = held.len(),
            wait_ms, "follower replication throttle: holding fetches"
        );
    }
    // Check again at least every second: the rate may be raised or removed meanwhile.
    (go, Duration::from_millis(wait_ms.min(1000)))
}

/// Counts the record bytes of throttled partitions against the follower quota.
fn record_throttled_bytes(throttles: &Throttles, r: &kafka_protocol::messages::FetchResponse) {
    let bytes: usize = r
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(move |p| (t, p)))
        .filter(|(t, p)| throttles.follower_throttled(t.topic.0.as_str(), p.partition_index))
        .map(|(_, p)| p.records.as_ref().map_or(0, Bytes::len))
        .sum();
    if bytes > 0 {
        let now = throttles.now_ms();
        throttles.follower_quota().record(bytes as u64, now);
    }
}

async fn connect(
    leader: i32,
    node_id: i32,
    settings: &FetchSettings,
    endpoints: &Mutex<HashMap<i32, String>>,
    transport: &SharedTransport,
) -> Result<Connection, String> {
    let addr = lock(endpoints)
        .get(&leader)
        .cloned()
        .ok_or_else(|| format!("no address known for broker {leader}"))?;
    let connect_timeout = settings.socket_timeout.min(Duration::from_secs(5));
    debug!(leader, %addr, "fetcher connecting");
    let stream = match tokio::time::timeout(connect_timeout, transport.connect(&addr)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("connecting to broker {leader} ({addr}): {e}")),
        Err(_) => return Err(format!("connecting to broker {leader} ({addr}): timed out")),
    };
    Connection::over(
        stream,
        format!("broker {leader} ({addr})"),
        &format!("gregor-replica-fetcher-{node_id}"),
        connect_timeout,
        // A parked fetch may take its max wait; the socket timeout bounds the rest.
        settings.socket_timeout + settings.max_wait,
    )
    .await
    .map_err(|e| e.to_string())
}

/// What became of one partition in a round.
enum Outcome {
    /// Fetched, appended or truncated: fetch again now.
    Progress { truncated: bool },
    /// The log must find its divergence point again.
    Truncate,
    /// Retry after a pause.
    Retry(Duration),
}

/// Applies a round's outcomes; a change to a partition's state (not mere progress) tells the
/// loop that the next round cannot carry this one's on.
fn apply_outcomes(fetcher: &Fetcher, outcomes: Vec<(Key, i32, Outcome)>, settings: &FetchSettings) {
    let mut parts = lock(&fetcher.partitions);
    let mut changed = false;
    for (key, epoch, outcome) in outcomes {
        // The partition may have been re-added in another epoch meanwhile: leave that alone.
        let Some(s) = parts.get_mut(&key).filter(|s| s.leader_epoch == epoch) else {
            continue;
        };
        match outcome {
            Outcome::Progress { truncated } => {
                changed |= truncated || s.retry_at.is_some();
                if truncated {
                    s.truncate = false;
                }
                s.retry_at = None;
            }
            Outcome::Truncate => {
                changed = true;
                s.truncate = true;
                s.retry_at = None;
            }
            Outcome::Retry(after) => {
                changed = true;
                let after = if after.is_zero() {
                    settings.backoff
                } else {
                    after
                };
                s.retry_at = Some(Instant::now() + after);
            }
        }
    }
    if changed {
        fetcher.bump();
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// Groups partitions by topic, in a stable order.
fn by_topic(parts: &[(Key, FetchState)]) -> Vec<(String, Vec<&FetchState>)> {
    let mut topics: Vec<(String, Vec<&FetchState>)> = Vec::new();
    for ((topic, _), st) in parts {
        match topics.iter_mut().find(|(t, _)| t == topic) {
            Some((_, v)) => v.push(st),
            None => topics.push((topic.clone(), vec![st])),
        }
    }
    topics
}

/// Reads each partition's fetch position as the request is built, dropping those that no
/// longer follow in the epoch this round was planned with: the set was copied before the
/// connection to the leader was made, which can take as long as a network fault lasts, and in
/// that time the replica may have become a leader and appended records of its own.
fn still_following(fetching: Vec<(Key, FetchState)>) -> Vec<(Key, FetchState)> {
    fetching
        .into_iter()
        .filter_map(|(key, mut st)| {
            st.position = Some(st.part.follower_fetch_position(st.leader_epoch)?);
            Some((key, st))
        })
        .collect()
}

fn fetch_request(
    node_id: i32,
    settings: &FetchSettings,
    parts: &[(Key, FetchState)],
) -> FetchRequest {
    let mut r = FetchRequest::default();
    r.replica_id = BrokerId(node_id);
    r.max_wait_ms = settings.max_wait.as_millis().min(i32::MAX as u128) as i32;
    r.min_bytes = settings.min_bytes;
    r.max_bytes = settings.response_max_bytes;
    r.isolation_level = 0;
    r.session_id = 0;
    r.session_epoch = -1;
    r.topics = by_topic(parts)
        .into_iter()
        .map(|(topic, states)| {
            let mut t = FetchTopic::default();
            t.topic = TopicName(s(&topic));
            t.partitions = states
                .into_iter()
                .filter_map(|st| {
                    // The leader counts the offset a fetch names as on this disk: after a
                    // failed sync, only what a sync covered is.
                    let (fetch_offset, log_start_offset) = st.position?;
                    let mut p = FetchPartition::default();
                    p.partition = st.part.index;
                    p.current_leader_epoch = st.leader_epoch;
                    p.fetch_offset = fetch_offset;
                    p.log_start_offset = log_start_offset;
                    p.last_fetched_epoch = -1;
                    p.partition_max_bytes = settings.partition_max_bytes;
                    Some(p)
                })
                .collect();
            t
        })
        .collect();
    r
}

/// What a partition error from the leader means for the follower.
fn on_error(key: &Key, error: ResponseError) -> Outcome {
    match error {
        // The leader has not applied the leadership change yet, or this follower has not.
        ResponseError::NotLeaderOrFollower
        | ResponseError::UnknownLeaderEpoch
        | ResponseError::FencedLeaderEpoch
        | ResponseError::UnknownTopicOrPartition
        | ResponseError::UnknownTopicId => Outcome::Retry(METADATA_RACE_BACKOFF),
        other => {
            warn!(topic = %key.0, partition = key.1, error = ?other, "follower fetch error");
            Outcome::Retry(Duration::ZERO)
        }
    }
}

/// The partitions an answer carries: their fetch positions may move.
fn answered_keys(r: &kafka_protocol::messages::FetchResponse) -> Vec<Key> {
    r.responses
        .iter()
        .flat_map(|t| {
            let topic = t.topic.0.to_string();
            t.partitions
                .iter()
                .map(move |p| (topic.clone(), p.partition_index))
        })
        .collect()
}

/// Appends what a fetch returned, every partition on the blocking pool at once (each syncs
/// its own log: one fsync per partition per round, shared by all its batches).
async fn append_fetched(
    response: kafka_protocol::messages::FetchResponse,
    parts: &[(Key, FetchState)],
    index: &HashMap<Key, usize>,
) -> Vec<(Key, i32, Outcome)> {
    let mut work = Vec::new();
    for t in response.responses {
        let topic = t.topic.0.to_string();
        for pd in t.partitions {
            let key = (topic.clone(), pd.partition_index);
            let Some((_, st)) = index.get(&key).and_then(|&i| parts.get(i)) else {
                continue;
            };
            let st = st.clone();
            work.push(async move {
                let epoch = st.leader_epoch;
                if let Some(e) = ResponseError::try_from_code(pd.error_code) {
                    let outcome = if e == ResponseError::OffsetOutOfRange {
                        let part = st.part.clone();
                        let leader_start = pd.log_start_offset;
                        blocking(move || out_of_range(&part, epoch, leader_start)).await
                    } else {
                        on_error(&key, e)
                    };
                    return (key, epoch, outcome);
                }
                let records = pd.records.unwrap_or_else(Bytes::new);
                let part = st.part.clone();
                let hw = pd.high_watermark;
                let appended =
                    blocking(move || part.append_as_follower(epoch, &records, hw)).await;
                let outcome = match appended {
                    Ok(_) => Outcome::Progress { truncated: false },
                    Err(gregor_log::LogError::NonContiguousAppend { expected, got }) => {
                        warn!(topic = %key.0, partition = key.1, expected, got, "fetched batches do not continue the log; checking for divergence");
                        Outcome::Truncate
                    }
                    // The replica was stopped (reassigned away, deleted, or the broker is
                    // shutting down) while its fetch was in flight: nothing is wrong.
                    Err(e @ gregor_log::LogError::Closed(_)) => {
                        debug!(topic = %key.0, partition = key.1, error = %e, "fetched batches for a closed log");
                        Outcome::Retry(METADATA_RACE_BACKOFF)
                    }
                    Err(e) => {
                        warn!(topic = %key.0, partition = key.1, error = %e, "cannot append fetched batches");
                        Outcome::Retry(Duration::ZERO)
                    }
                };
                (key, epoch, outcome)
            });
        }
    }
    futures::future::join_all(work).await
}

/// OFFSET_OUT_OF_RANGE: behind the leader's log start the follower starts over there;
/// otherwise its log end is past the leader's and the divergence check runs again.
fn out_of_range(part: &Partition, epoch: i32, leader_start: i64) -> Outcome {
    let end = part.log.log_end_offset();
    if leader_start >= 0 && end < leader_start {
        match part.restart_as_follower_at(epoch, leader_start) {
            Ok(_) => {
                info!(topic = %part.topic, partition = part.index, from = end, to = leader_start, "behind the leader's log start: log restarted there");
                Outcome::Progress { truncated: false }
            }
            Err(e @ gregor_log::LogError::Closed(_)) => {
                debug!(topic = %part.topic, partition = part.index, error = %e, "restart of a closed log");
                Outcome::Retry(METADATA_RACE_BACKOFF)
            }
            Err(e) => {
                warn!(topic = %part.topic, partition = part.index, error = %e, "cannot restart the log at the leader's log start");
                Outcome::Retry(Duration::ZERO)
            }
        }
    } else {
        Outcome::Truncate
    }
}

/// OffsetForLeaderEpoch for the follower's latest epoch, then truncation of whatever follows
/// the point where the logs agree.
async fn find_divergence(
    c: &Connection,
    node_id: i32,
    parts: &[(Key, FetchState)],
) -> Result<Vec<(Key, i32, Outcome)>, String> {
    let mut request = OffsetForLeaderEpochRequest::default();
    request.replica_id = BrokerId(node_id);
    let mut asked: HashMap<Key, (FetchState, i32)> = HashMap::new();
    request.topics = by_topic(parts)
        .into_iter()
        .map(|(topic, states)| {
            let mut t = OffsetForLeaderTopic::default();
            t.topic = TopicName(s(&topic));
            t.partitions = states
                .into_iter()
                .map(|st| {
                    let latest = st.part.log.latest_epoch().unwrap_or(-1);
                    asked.insert((topic.clone(), st.part.index), (st.clone(), latest));
                    let mut p = OffsetForLeaderPartition::default();
                    p.partition = st.part.index;
                    p.current_leader_epoch = st.leader_epoch;
                    p.leader_epoch = latest;
                    p
                })
                .collect();
            t
        })
        .collect();
    let response = c
        .send(&request, OFFSET_FOR_LEADER_EPOCH_VERSION)
        .await
        .map_err(|e| e.to_string())?;
    let mut out = Vec::new();
    for t in response.topics {
        let topic = t.topic.0.to_string();
        for p in t.partitions {
            let key = (topic.clone(), p.partition);
            let Some((st, asked_epoch)) = asked.remove(&key) else {
                continue;
            };
            let epoch = st.leader_epoch;
            if let Some(e) = ResponseError::try_from_code(p.error_code) {
                out.push((key.clone(), epoch, on_error(&key, e)));
                continue;
            }
            let part = st.part.clone();
            let (leader_epoch, leader_end) = (p.leader_epoch, p.end_offset);
            let outcome = blocking(move || {
                truncate_to_divergence(&part, epoch, asked_epoch, leader_epoch, leader_end)
            })
            .await;
            out.push((key, epoch, outcome));
        }
    }
    Ok(out)
}

/// Where the follower's log stops agreeing with the leader's, from the leader's answer for the
/// follower's latest epoch: the leader's end of that epoch, or — when the leader answers with
/// an older epoch it has — the smaller of both logs' ends of that epoch. A leader that knows no
/// epoch at or before the follower's has none of its records.
fn truncate_to_divergence(
    part: &Partition,
    epoch: i32,
    asked_epoch: i32,
    leader_epoch: i32,
    leader_end: i64,
) -> Outcome {
    let leo = part.log.log_end_offset();
    let target = if planted!(TruncateToHighWatermark) {
        part.high_watermark().min(leo)
    } else if asked_epoch < 0 || leader_epoch < 0 || leader_end < 0 {
        if leo == part.log.log_start_offset() {
            leo
        } else {
            part.log.log_start_offset()
        }
    } else if leader_epoch == asked_epoch {
        leader_end.min(leo)
    } else {
        let (local_epoch, local_end) = part.log.end_offset_for_epoch(leader_epoch);
        if local_epoch < 0 || local_end < 0 {
            leader_end.min(leo)
        } else {
            leader_end.min(local_end)
        }
    };
    match part.truncate_as_follower(epoch, target) {
        Ok(Some(removed)) => {
            if removed > 0 {
                warn!(
                    topic = %part.topic,
                    partition = part.index,
                    from_offset = target,
                    to_offset = leo,
                    removed_offsets = removed,
                    leader_epoch = epoch,
                    "truncated the log's suffix that diverges from the new leader's; those records are gone from this replica"
                );
            }
            Outcome::Progress { truncated: true }
        }
        Ok(None) => Outcome::Retry(METADATA_RACE_BACKOFF),
        // The replica was stopped meanwhile (as for an append): nothing is wrong.
        Err(e @ gregor_log::LogError::Closed(_)) => {
            debug!(topic = %part.topic, partition = part.index, error = %e, "truncation of a closed log");
            Outcome::Retry(METADATA_RACE_BACKOFF)
        }
        Err(e) => {
            warn!(topic = %part.topic, partition = part.index, error = %e, "cannot truncate");
            Outcome::Retry(Duration::ZERO)
        }
    }
}
