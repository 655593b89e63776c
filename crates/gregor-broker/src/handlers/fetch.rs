//! Fetch: consumers read up to the high watermark (read_committed ones up to the last stable
//! offset, told of the aborted transactions in what they read); a fetch naming a replica id (followers) reads
//! to the log end, but only from a broker that is a follower replica of the partition: any other
//! replica id is refused as Kafka refuses it (UNKNOWN_LEADER_EPOCH when the request carries the
//! current leader epoch, NOT_LEADER_OR_FOLLOWER otherwise), so that no client can read past the
//! high watermark by claiming to be a replica.
//!
//! A fetch that finds fewer than `min_bytes` parks until an append moves a high watermark it
//! reads, or until `max_wait_ms`; it returns as soon as `min_bytes` are there. The response is
//! capped by the request's `max_bytes` and the broker's `fetch.max.bytes` (KIP-74: the first
//! non-empty partition may exceed them by one batch). Disk reads run on the blocking pool, not
//! on the async workers. Fetch sessions (KIP-227, `fetch_session.rs`): an incremental fetch
//! reads the partitions it names and those of its session that changed or are not settled,
//! parks on its session's one signal (`fetch_signal.rs`) rather than a watch per partition,
//! returns as soon as a partition of the session changes (the next fetch reads it), and is
//! answered with the partitions that have news.
//!
//! The record bytes are not read here: the answer names where they lie in the segment files
//! ([`FetchReply`]), and the connection sends them from there (`fetch_frame.rs`,
//! `zero_copy.rs`). Only batch headers are read, to stop at whole batches within the limits.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures::future::select_all;
use gregor_log::FileSlice;
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse};
use kafka_protocol::ResponseError;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::data_plane::DataPlane;
use crate::fetch_frame::FetchReply;
use crate::fetch_session::{FetchSessionCache, SessionContext};
use crate::fetch_signal::{ReadState, SessionSignal};
use crate::replica::Partition;
use crate::runtime::blocking;

/// Who reads: a consumer (to the high watermark), a follower replica (to the log end), or a
/// client claiming a replica id it does not hold.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Reader {
    Consumer,
    Follower,
    NotAReplica { replica_id: i32 },
}

#[derive(Clone)]
struct Target {
    topic_index: usize,
    partition: i32,
    fetch_offset: i64,
    max_bytes: usize,
    current_leader_epoch: i32,
    replica_id: i32,
    reader: Reader,
    /// A consumer's read_committed fetch (`isolation_level` 1, v4+).
    read_committed: bool,
    part: Result<Arc<Partition>, ResponseError>,
    /// A follower's fetch of a partition this leader throttles (its bytes count toward the
    /// leader quota).
    throttled: bool,
    /// Sent without records this round: an out-of-sync follower of a throttled partition
    /// while the leader quota is exceeded.
    held: bool,
}

/// The replica id a fetch names (-1 for consumers): `replica_id` before v15, `replica_state`
/// from v15 (KIP-903).
fn replica_id(r: &FetchRequest, version: i16) -> i32 {
    if version >= 15 {
        r.replica_state.replica_id.0
    } else {
        r.replica_id.0
    }
}

/// How a fetch from `replica_id` may read `topic`/`partition`: only a follower replica of the
/// partition (a replica other than this broker) reads past the high watermark.
fn reader_for(b: DataPlane<'_>, replica_id: i32, topic: &str, partition: i32) -> Reader {
    if replica_id < 0 {
        return Reader::Consumer;
    }
    let image = b.metadata.image();
    let is_follower = replica_id != b.node_id
        && image
            .topic(topic)
            .and_then(|t| t.partitions.get(&partition))
            .is_some_and(|p| p.replicas.contains(&replica_id));
    if is_follower {
        Reader::Follower
    } else {
        Reader::NotAReplica { replica_id }
    }
}

/// Which topics the requester may read (`authorize::fetch_reader`; `None`: all, no authorizer);
/// the partitions of the others answer TOPIC_AUTHORIZATION_FAILED, whether or not they exist,
/// beside the read of the rest, which waits as usual (a fetch of only those answers at once).
pub type MayRead<'a> = Option<&'a (dyn Fn(&str) -> bool + Sync)>;

/// Answers a Fetch. `min_round_trip` is the connection's (where known): a consumer on a short
/// one gets smaller answers (`answer_limit`).
pub async fn fetch(
    b: DataPlane<'_>,
    mut r: FetchRequest,
    version: i16,
    min_round_trip: Option<Duration>,
    may_read: MayRead<'_>,
) -> FetchReply {
    // An incremental fetch becomes the fetch of the session's partitions it names, that
    // changed, or that a read left unsettled, here.
    let began = lock_sessions(b).begin(&mut r, version, now_ms());
    let mut context = match began {
        Ok(c) => c,
        Err(e) => {
            tracing::debug!(session_id = r.session_id, session_epoch = r.session_epoch, error = ?e, "fetch session refused");
            return session_error(e);
        }
    };
    let follower = replica_id(&r, version) >= 0;
    // Followers are Gregor's own fetchers, which size their requests themselves.
    let latency_cap = if follower {
        None
    } else {
        b.fetch_latency_cap(min_round_trip)
    };
    let deadline = Instant::now() + Duration::from_millis(r.max_wait_ms.max(0) as u64);
    // A session's parked fetch woken by a change reads the session's changed partitions
    // itself (the same epoch), rather than answer empty and leave them to the next fetch.
    let (mut reply, reads) = loop {
        let planned = plan(b, &r, version, may_read);
        watch_before_read(&context, &planned.targets);
        let park = match context.signal() {
            Some((signal, whole)) => Park::Session { signal, whole },
            None => Park::Watches,
        };
        let (reply, reads, changed) =
            answer(b, &r, version, planned, latency_cap, park, deadline).await;
        if !changed || !lock_sessions(b).reread(&mut context, &mut r) {
            break (reply, reads);
        }
    };
    let limits = b.fetch_session_limits();
    lock_sessions(b).finish(context, &r, &mut reply, follower, limits, now_ms(), &reads);
    reply
}

/// Registers an incremental fetch's session with the partitions it reads before it reads
/// them, so that a change after the read wakes it (and a read it settles stays settled).
fn watch_before_read(context: &SessionContext, targets: &[Target]) {
    let SessionContext::Incremental { signal, keys, .. } = context else {
        return;
    };
    for (key, t) in keys.iter().zip(targets) {
        if let Ok(part) = &t.part {
            signal.watch(*key, part.fetch_listeners());
        }
    }
}

/// What a fetch parks on while it has fewer than `min_bytes`.
#[derive(Clone, Copy)]
enum Park<'a> {
    /// A watch per partition read (a fetch outside an incremental session).
    Watches,
    /// The session's signal; `whole`: the read covers all of the session's partitions.
    Session {
        signal: &'a SessionSignal,
        whole: bool,
    },
}

fn lock_sessions<'a>(b: DataPlane<'a>) -> std::sync::MutexGuard<'a, FetchSessionCache> {
    b.fetch_sessions
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The whole-response error of a fetch its session refuses (no partitions, session id 0).
fn session_error(e: ResponseError) -> FetchReply {
    let mut resp = FetchResponse::default();
    resp.error_code = e.code();
    FetchReply {
        response: resp,
        records: Vec::new(),
    }
}

/// Milliseconds on the broker's clock (the simulator's under simulation).
fn now_ms() -> u64 {
    u64::try_from(crate::runtime::now_ms()).unwrap_or(0)
}

/// A fetch's partitions, located in the metadata image and the hosted replicas, and the
/// response's topics they are answered under.
struct Planned {
    targets: Vec<Target>,
    topics_out: Vec<FetchableTopicResponse>,
}

/// Locates the partitions a fetch names (the functional part before any read); those of a
/// topic it may not read are refused before they are looked up.
fn plan(b: DataPlane<'_>, r: &FetchRequest, version: i16, may_read: MayRead<'_>) -> Planned {
    let replica_id = replica_id(r, version);
    let mut targets = Vec::new();
    let mut topics_out = Vec::new();
    for (ti, t) in r.topics.iter().enumerate() {
        let name = t.topic.0.to_string();
        let mut out = FetchableTopicResponse::default();
        out.topic = t.topic.clone();
        out.topic_id = t.topic_id;
        topics_out.push(out);
        let located = if readable(b, &name, t.topic_id, may_read) {
            b.locate_many(&name, t.topic_id, t.partitions.iter().map(|p| p.partition))
        } else {
            vec![Err(ResponseError::TopicAuthorizationFailed); t.partitions.len()]
        };
        for (p, part) in t.partitions.iter().zip(located) {
            let topic_name = part.as_ref().map_or(name.as_str(), |p| p.topic.as_str());
            let reader = reader_for(b, replica_id, topic_name, p.partition);
            let throttled = reader == Reader::Follower
                && b.replicas
                    .throttles()
                    .leader_throttled(topic_name, p.partition);
            targets.push(Target {
                topic_index: ti,
                partition: p.partition,
                fetch_offset: p.fetch_offset,
                max_bytes: p.partition_max_bytes.max(0) as usize,
                current_leader_epoch: p.current_leader_epoch,
                replica_id,
                reader,
                read_committed: reader == Reader::Consumer
                    && version >= 4
                    && r.isolation_level == 1,
                part,
                throttled,
                held: false,
            });
        }
    }
    Planned {
        targets,
        topics_out,
    }
}

/// Reads the planned partitions, parking while fewer than `min_bytes` are there, and answers;
/// with what each read left for a fetch session to know, and whether a change to the session
/// ended the wait (its changed partitions are to be read before answering).
async fn answer(
    b: DataPlane<'_>,
    r: &FetchRequest,
    version: i16,
    planned: Planned,
    latency_cap: Option<usize>,
    park: Park<'_>,
    deadline: Instant,
) -> (FetchReply, Vec<ReadState>, bool) {
    let Planned {
        mut targets,
        topics_out,
    } = planned;
    let min_bytes = r.min_bytes.max(0) as usize;
    let requested = r.max_bytes.max(0) as usize;
    let broker_max = b.fetch_max_bytes();
    let max_bytes = answer_limit(requested, min_bytes, broker_max, latency_cap);
    if max_bytes < answer_limit(requested, min_bytes, broker_max, None) {
        b.metrics.latency_capped();
    }
    // A follower's fetch offset is its durable log end offset: the leader's high watermark and
    // ISR move with it (before the read, so the answer carries the new high watermark).
    if replica_id(r, version) >= 0 {
        record_follower_progress(b, &targets);
    }
    let limits = ReadLimits {
        min_bytes,
        max_bytes,
        deadline,
    };
    let (results, changed) = read_until_min_bytes(b, r, version, &mut targets, limits, park).await;
    record_throttled_bytes(b, &targets, &results);
    for (t, pr) in targets.iter().zip(&results) {
        if let Ok(part) = &t.part {
            b.metrics.fetched(
                &part.topic,
                pr.records.len,
                pr.record_count,
                t.reader == Reader::Follower,
            );
        }
    }
    let reads: Vec<ReadState> = targets
        .iter()
        .zip(&results)
        .map(|(t, pr)| ReadState {
            settled: pr.settled,
            listeners: t.part.as_ref().ok().map(|p| p.fetch_listeners().clone()),
        })
        .collect();
    (fetch_reply(&targets, results, topics_out), reads, changed)
}

/// How much a fetch waits for, how much it may carry, and until when it waits.
#[derive(Debug, Clone, Copy)]
struct ReadLimits {
    min_bytes: usize,
    max_bytes: usize,
    deadline: Instant,
}

/// Reads the partitions until they hold `min_bytes`, one the requester may read answers an
/// error, or the deadline passes, parking in between (see [`Park`]); a fetch in a session
/// returns once a partition of its session changed (`true`: the caller reads what changed).
async fn read_until_min_bytes(
    b: DataPlane<'_>,
    r: &FetchRequest,
    version: i16,
    targets: &mut Vec<Target>,
    limits: ReadLimits,
    park: Park<'_>,
) -> (Vec<PartRead>, bool) {
    // Outside a session, the partitions' watches, subscribed only once a read falls short of
    // `min_bytes`: a consumer streaming a backlog never parks, and needs no watch per
    // partition per Fetch. Followers wait for appends (the log end), consumers for the high
    // watermark. (A partition's log takes a new high watermark before its watch announces
    // it, so a read after subscribing sees whatever the watch will not report.)
    let mut watches: Option<Vec<watch::Receiver<i64>>> = None;
    let mut woke = false;
    loop {
        if let Some(watches) = &mut watches {
            for w in watches.iter_mut() {
                w.borrow_and_update();
            }
        }
        // After a wake-up, look the partitions up again: one may have been deleted or moved.
        if woke {
            *targets = relocated(b, r, targets);
        }
        let (results, bytes) = read_current(b, r, targets, limits.max_bytes, version).await;
        // As in Kafka, a refused partition is an error beside the read, not an error of the
        // read: it ends no wait, but a fetch of refused partitions only has nothing to wait for.
        let any_error = targets
            .iter()
            .zip(&results)
            .any(|(t, p)| p.data.error_code != 0 && !refused(t));
        let whole = match park {
            Park::Watches => true,
            Park::Session { whole, .. } => whole,
        };
        let only_refused = whole && targets.iter().all(refused);
        if bytes >= limits.min_bytes
            || any_error
            || only_refused
            || Instant::now() >= limits.deadline
        {
            return (results, false);
        }
        match wait(b, park, &mut watches, targets, limits.deadline).await {
            Parked::Subscribed => {}
            Parked::Woke => woke = true,
            Parked::SessionChanged => return (results, true),
            Parked::Done => return (results, false),
            Parked::TimedOut => {
                *targets = relocated(b, r, targets);
                let (results, _) = read_current(b, r, targets, limits.max_bytes, version).await;
                return (results, false);
            }
        }
    }
}

/// How a fetch's wait ended.
enum Parked {
    /// The watches were just subscribed: read again before waiting.
    Subscribed,
    /// An append (or a partition stopping) woke us, or a partition went away.
    Woke,
    /// A partition of the session changed: the session says which to read.
    SessionChanged,
    /// Nothing to wait for (no watch).
    Done,
    TimedOut,
}

/// Waits as `park` says until something changes or the deadline.
async fn wait(
    b: DataPlane<'_>,
    park: Park<'_>,
    watches: &mut Option<Vec<watch::Receiver<i64>>>,
    targets: &[Target],
    deadline: Instant,
) -> Parked {
    let waited = match park {
        Park::Session { signal, .. } => {
            let _parked = b.metrics.parked("fetch");
            return match tokio::time::timeout_at(deadline, signal.changed()).await {
                Ok(()) => Parked::SessionChanged,
                Err(_) => Parked::TimedOut,
            };
        }
        Park::Watches => {
            let Some(subscribed) = watches.as_mut() else {
                // Subscribe, then read again: an append between the read and the
                // subscription moved nothing the watches will report.
                *watches = Some(subscribe(targets));
                return Parked::Subscribed;
            };
            if subscribed.is_empty() {
                return Parked::Done;
            }
            let changed = select_all(subscribed.iter_mut().map(|w| Box::pin(w.changed())));
            let _parked = b.metrics.parked("fetch");
            tokio::time::timeout_at(deadline, changed).await.map(|_| ())
        }
    };
    match waited {
        Ok(()) => Parked::Woke,
        Err(_) => Parked::TimedOut,
    }
}

/// The answer: partitions in the order of the request's topics, which the slices follow.
fn fetch_reply(
    targets: &[Target],
    results: Vec<PartRead>,
    mut topics_out: Vec<FetchableTopicResponse>,
) -> FetchReply {
    let mut slices: Vec<Vec<FileSlice>> = vec![Vec::new(); topics_out.len()];
    for (t, pr) in targets.iter().zip(results) {
        topics_out[t.topic_index].partitions.push(pr.data);
        slices[t.topic_index].push(pr.records);
    }
    let mut resp = FetchResponse::default();
    resp.responses = topics_out;
    FetchReply {
        response: resp,
        records: slices.into_iter().flatten().collect(),
    }
}

/// The most one answer carries (KIP-74's first batch aside): what the request asks, within
/// the broker's `fetch.max.bytes` (whatever the client asks), and within the latency cap of a
/// consumer's connection, except that the cap never goes below the request's `min_bytes` (a
/// fetch waits for `min_bytes`, so an answer must be allowed to hold them).
pub(crate) fn answer_limit(
    requested: usize,
    min_bytes: usize,
    broker_max: usize,
    latency_cap: Option<usize>,
) -> usize {
    let limit = requested.min(broker_max);
    match latency_cap {
        Some(cap) => limit.min(cap.max(min_bytes)),
        None => limit,
    }
}

/// A watch per located partition: of its log end for a follower, of its high watermark for a
/// consumer.
fn subscribe(targets: &[Target]) -> Vec<watch::Receiver<i64>> {
    targets
        .iter()
        .filter_map(|t| {
            t.part.as_ref().ok().map(|p| match t.reader {
                Reader::Follower => p.watch_leo(),
                _ => p.watch_hw(),
            })
        })
        .collect()
}

/// Updates the leaders' view of a follower from the offsets its fetch names, and sends any ISR
/// expansion that follows to the controller.
fn record_follower_progress(b: DataPlane<'_>, targets: &[Target]) {
    for t in targets {
        let (Reader::Follower, Ok(part)) = (t.reader, &t.part) else {
            continue;
        };
        let role = part.role();
        if !role.is_leader
            || (t.current_leader_epoch >= 0 && t.current_leader_epoch != role.leader_epoch)
        {
            continue;
        }
        if let Some(p) = part.follower_fetched(t.replica_id, t.fetch_offset) {
            b.replicas.propose_isr(part, p);
        }
    }
}

/// How many times one read looks its partitions up again because one stopped under it.
const MAX_RELOCATIONS: usize = 3;

/// Reads the targets (see [`read_targets`]). A partition that stopped after it was located
/// (its topic deleted, or its replica moved off this broker, between the lookup and the read)
/// reads as NOT_LEADER_OR_FOLLOWER; the partitions are then looked up again and read again,
/// so that the answer says what the metadata says now, as Kafka's does: a deleted topic is
/// UNKNOWN_TOPIC_OR_PARTITION (UNKNOWN_TOPIC_ID by id), a replica moved away is still
/// NOT_LEADER_OR_FOLLOWER. The metadata image is published before a replica stops, so the
/// lookup after seeing the stop sees the metadata that stopped it.
async fn read_current(
    b: DataPlane<'_>,
    r: &FetchRequest,
    targets: &mut Vec<Target>,
    max_bytes: usize,
    version: i16,
) -> (Vec<PartRead>, usize) {
    let mut relocations = 0;
    loop {
        hold_throttled(b, targets);
        b.metrics.partitions_read(targets.len());
        let (results, bytes) = read_targets(targets, max_bytes, version).await;
        let stale = results
            .iter()
            .any(|p| p.data.error_code == ResponseError::NotLeaderOrFollower.code())
            && any_stopped(b, targets);
        if !stale || relocations == MAX_RELOCATIONS {
            return (results, bytes);
        }
        relocations += 1;
        tracing::debug!(
            relocations,
            "a fetched partition stopped after it was located; looking the partitions up again"
        );
        *targets = relocated(b, r, targets);
    }
}

/// Whether a target's partition is no longer the replica this broker hosts under its name
/// (stopped: deleted, moved away, or replaced).
fn any_stopped(b: DataPlane<'_>, targets: &[Target]) -> bool {
    targets.iter().any(|t| {
        t.part.as_ref().is_ok_and(|p| {
            !b.replicas
                .get(&p.topic, t.partition)
                .is_some_and(|hosted| Arc::ptr_eq(&hosted, p))
        })
    })
}

/// Whether the topic a fetch names (by name, or by id from v13) may be read; an id this node
/// does not know is left to the lookup (UNKNOWN_TOPIC_ID).
fn readable(
    b: DataPlane<'_>,
    name: &str,
    topic_id: gregor_meta::Uuid,
    may_read: MayRead<'_>,
) -> bool {
    let Some(may_read) = may_read else {
        return true;
    };
    if !name.is_empty() || topic_id.is_nil() {
        return may_read(name);
    }
    match b.metadata.image().topic_by_id(topic_id) {
        Some(t) => may_read(&t.name),
        None => true,
    }
}

/// Whether a target is of a topic the requester may not read (TOPIC_AUTHORIZATION_FAILED).
fn refused(t: &Target) -> bool {
    matches!(t.part, Err(ResponseError::TopicAuthorizationFailed))
}

/// Looks the targets' partitions up again (after one was removed); a refused one stays
/// refused.
fn relocated(b: DataPlane<'_>, r: &FetchRequest, targets: &[Target]) -> Vec<Target> {
    targets
        .iter()
        .map(|t| {
            let topic = &r.topics[t.topic_index];
            if refused(t) {
                return t.clone();
            }
            Target {
                part: b.locate(&topic.topic.0, topic.topic_id, t.partition),
                ..t.clone()
            }
        })
        .collect()
}

/// The leader side of the replication throttle: while the leader quota is exceeded, the
/// out-of-sync followers of throttled partitions get no records (in-sync ones always do).
fn hold_throttled(b: DataPlane<'_>, targets: &mut [Target]) {
    if !targets.iter().any(|t| t.throttled) {
        return;
    }
    let throttles = b.replicas.throttles();
    let now = throttles.now_ms();
    let exceeded = throttles.leader_quota().is_exceeded(now);
    for t in targets.iter_mut() {
        t.held =
            exceeded && t.throttled && t.part.as_ref().is_ok_and(|p| !p.is_in_sync(t.replica_id));
    }
}

/// Counts the record bytes sent for throttled partitions against the leader quota.
fn record_throttled_bytes(b: DataPlane<'_>, targets: &[Target], results: &[PartRead]) {
    let bytes: usize = targets
        .iter()
        .zip(results)
        .filter(|(t, _)| t.throttled)
        .map(|(_, pr)| pr.records.len)
        .sum();
    if bytes > 0 {
        let throttles = b.replicas.throttles();
        let now = throttles.now_ms();
        throttles.leader_quota().record(bytes as u64, now);
    }
}

/// Reads every target: on this worker when every batch header the read needs is in the page
/// cache (the common case, and no thread hand-off on a fetch's way), else all again on the
/// blocking pool, where a read may wait for the disk.
async fn read_targets(
    targets: &[Target],
    max_bytes: usize,
    version: i16,
) -> (Vec<PartRead>, usize) {
    if let Ok(done) = read_all(targets, max_bytes, version, ReadOn::Worker) {
        return done;
    }
    let targets = targets.to_vec();
    blocking(move || {
        read_all(&targets, max_bytes, version, ReadOn::BlockingPool)
            .expect("a read on the blocking pool waits for the disk instead of giving up")
    })
    .await
}

/// Where a fetch's log reads run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ReadOn {
    /// An async worker: only what the page cache holds.
    Worker,
    /// The blocking pool: a read may wait for the disk.
    BlockingPool,
}

/// A read on a worker needed a page the page cache does not hold.
#[derive(Debug)]
struct NotCached;

/// One partition's answer: its response fields, and where its record bytes lie.
struct PartRead {
    /// The partition's response; `records` is empty when the bytes come from `records` below.
    data: PartitionData,
    records: FileSlice,
    record_count: u64,
    /// No error, and the fetch offset is at the end this reader reads to: nothing to give
    /// until the partition changes (see `fetch_signal::ReadState`).
    settled: bool,
}

fn read_all(
    targets: &[Target],
    max_bytes: usize,
    version: i16,
    on: ReadOn,
) -> Result<(Vec<PartRead>, usize), NotCached> {
    let mut total = 0usize;
    // A later partition's first batch did not fit in what was left of `max_bytes`: the answer
    // is full, and the partitions after it are not read (each would cost a batch-header read
    // for a batch that cannot fit either, as Kafka gives them nothing after a torn one).
    let mut full = false;
    let mut out = Vec::with_capacity(targets.len());
    for t in targets {
        // KIP-74: the first non-empty partition may exceed the limits by one batch (the log
        // returns at least one whole batch); later ones may not.
        let left = if full {
            0
        } else {
            max_bytes.saturating_sub(total)
        };
        let budget = t.max_bytes.min(left);
        let first = total == 0;
        let budget = if first { budget.max(1) } else { budget };
        let mut pr = read_one(t, budget, version, on)?;
        if !first && pr.records.len > budget {
            // The log returned a first batch larger than the partition's budget. Kafka would
            // send it torn, which no client can use; it is left for a later Fetch instead, in
            // which the session's order brings this partition forward.
            full = pr.records.len > left;
            pr.records = FileSlice::empty();
            pr.record_count = 0;
            pr.settled = false;
        }
        total += pr.records.len;
        out.push(pr);
    }
    Ok((out, total))
}

fn read_one(t: &Target, budget: usize, version: i16, on: ReadOn) -> Result<PartRead, NotCached> {
    let mut data = PartitionData::default();
    let mut settled = false;
    let (records, record_count) = read_into(t, budget, version, on, &mut data, &mut settled)?
        .unwrap_or_else(|| (FileSlice::empty(), 0));
    Ok(PartRead {
        data,
        records,
        record_count,
        settled,
    })
}

/// Fills in `pd` and `settled` (see [`PartRead`]); the slice of the log to send with it, if
/// any.
fn read_into(
    t: &Target,
    budget: usize,
    version: i16,
    on: ReadOn,
    pd: &mut PartitionData,
    settled: &mut bool,
) -> Result<Option<(FileSlice, u64)>, NotCached> {
    pd.partition_index = t.partition;
    pd.high_watermark = -1;
    pd.last_stable_offset = -1;
    pd.log_start_offset = -1;
    if version >= 4 {
        pd.aborted_transactions = Some(Vec::new());
    }
    let part = match readable_leader(t) {
        Ok(p) => p,
        Err(e) => {
            pd.error_code = e.code();
            return Ok(None);
        }
    };
    let follower = t.reader == Reader::Follower;
    let log = &part.log;
    let offsets = log.offsets();
    let hw = offsets.high_watermark;
    pd.high_watermark = hw;
    let lso = part.last_stable_offset(hw);
    if version >= 4 {
        pd.last_stable_offset = lso;
    }
    if version >= 5 {
        pd.log_start_offset = offsets.log_start_offset;
    }
    if t.fetch_offset < offsets.log_start_offset || t.fetch_offset > offsets.log_end_offset {
        pd.error_code = ResponseError::OffsetOutOfRange.code();
        return Ok(None);
    }
    // The planted bug: consumers read up to the log end, as followers do.
    let bounded = !follower && !planted!(ConsumerReadsUncommitted);
    let bound = if t.read_committed { lso } else { hw };
    let upper = if bounded { Some(bound) } else { None };
    *settled = t.fetch_offset >= upper.unwrap_or(offsets.log_end_offset);
    if bounded && t.fetch_offset >= bound {
        pd.records = Some(Bytes::new());
        return Ok(None);
    }
    if budget == 0 || t.held {
        pd.records = Some(Bytes::new());
        return Ok(None);
    }
    let read = match on {
        ReadOn::Worker => log.read_slice_cached(t.fetch_offset, budget, upper),
        ReadOn::BlockingPool => log.read_slice(t.fetch_offset, budget, upper).map(Some),
    };
    match read {
        Ok(Some(read)) => {
            pd.records = Some(Bytes::new());
            if t.read_committed && !planted!(TxnAbortVisible) {
                let end = read.next_offset.unwrap_or(bound).min(bound);
                pd.aborted_transactions = Some(aborted_in(log, t.fetch_offset, end));
            }
            Ok(Some((read.records, read.record_count)))
        }
        Ok(None) => Err(NotCached),
        Err(e) => {
            pd.error_code = crate::replica::log_error(&e).code();
            *settled = false;
            Ok(None)
        }
    }
}

/// The aborted transactions a read_committed consumer must be told of in `[from, to)`.
fn aborted_in(
    log: &gregor_log::Log,
    from: i64,
    to: i64,
) -> Vec<kafka_protocol::messages::fetch_response::AbortedTransaction> {
    log.aborted_transactions(from, to)
        .into_iter()
        .map(|a| {
            let mut t = kafka_protocol::messages::fetch_response::AbortedTransaction::default();
            t.producer_id = kafka_protocol::messages::ProducerId(a.producer_id);
            t.first_offset = a.first_offset;
            t
        })
        .collect()
}

/// The partition `t` reads, if this replica leads it in the epoch the fetch names and the
/// reader may read it; else the partition's error.
fn readable_leader(t: &Target) -> Result<&Arc<Partition>, ResponseError> {
    let part = t.part.as_ref().map_err(|e| *e)?;
    let role = part.role();
    if !role.is_leader {
        return Err(ResponseError::NotLeaderOrFollower);
    }
    if t.current_leader_epoch >= 0 && t.current_leader_epoch != role.leader_epoch {
        return Err(if t.current_leader_epoch < role.leader_epoch {
            ResponseError::FencedLeaderEpoch
        } else {
            ResponseError::UnknownLeaderEpoch
        });
    }
    if let Reader::NotAReplica { replica_id } = t.reader {
        // Kafka's answer to a replica id outside the replica set: with the current leader
        // epoch the (replica, epoch) pair is not recognised, without it the leader cannot
        // tell whose state is stale.
        tracing::debug!(topic = %part.topic, partition = t.partition, replica_id, "fetch from a replica id that is not a follower of the partition");
        return Err(if t.current_leader_epoch >= 0 {
            ResponseError::UnknownLeaderEpoch
        } else {
            ResponseError::NotLeaderOrFollower
        });
    }
    Ok(part)
}

#[cfg(test)]
#[path = "fetch_tests.rs"]
pub(in crate::handlers) mod tests;
