//! Fetch sessions (KIP-227): a consumer or follower fetching many partitions names them once,
//! then sends only what changed (new partitions, new fetch offsets, forgotten ones), and gets
//! back only the partitions that have something to say (records, an error, a moved high
//! watermark, last stable offset or log start offset).
//!
//! This is the functional core: the cache of sessions, the request's session id and epoch
//! turned into the list of partitions to read ([`FetchSessionCache::begin`]), and the answer
//! cut down to what an incremental response carries ([`FetchSessionCache::finish`]). Time
//! comes in as milliseconds; the handler (`handlers/fetch.rs`) does the reading.
//!
//! An incremental fetch reads only the partitions it names, those that changed since the
//! session last read them (each partition tells the sessions registered with it, see
//! `fetch_signal.rs`), and those not settled at their last read (records or an error to
//! give, a read made before the session was registered with the partition). A partition
//! left out has nothing new to answer, so an idle round costs what changed, not the session.
//!
//! The request's `(session_id, session_epoch)` say what it is:
//!
//! * `(0, -1)`: a full fetch without a session (every version before 7 is one);
//! * `(0, 0)`: a full fetch creating a session; its id is in the response (0 if the cache
//!   had no room);
//! * `(id, 0)`: closes session `id` and creates a new one; `(id, -1)`: closes `id`, no session;
//! * `(id, epoch > 0)`: an incremental fetch in session `id`, whose next epoch must be
//!   `epoch`: FETCH_SESSION_ID_NOT_FOUND for an unknown id, INVALID_FETCH_SESSION_EPOCH for any
//!   other epoch. Epochs go 1, 2, .. `i32::MAX`, then 1 again.
//!
//! The cache holds `max.incremental.fetch.session.cache.slots` sessions. When it is full, a new
//! session takes the place of an existing one only as KIP-227 says: one unused for
//! `min.incremental.fetch.session.eviction.ms` (the least recently used first); else, for a
//! follower's session, a consumer's; else, for a session of more partitions, a consumer's
//! session older than the eviction time with fewer partitions (the smallest first). Otherwise
//! the new fetch is answered without a session, and the fetcher keeps sending full fetches.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::fetch_frame::FetchReply;
use crate::fetch_signal::{PartitionKey, ReadState, SessionSignal};

/// The epoch of a full fetch without a session (and of closing one).
pub const FINAL_EPOCH: i32 = -1;
/// The epoch of a full fetch that creates a session.
pub const INITIAL_EPOCH: i32 = 0;

/// A topic as a fetch names it: by name (Fetch v7-12) or id (v13 and later).
type TopicKey = (TopicName, Uuid);

/// What a session remembers of one partition: what the fetcher last asked for, and what it
/// was last told (to answer only changes).
#[derive(Debug, Clone, PartialEq)]
struct Cached {
    request: FetchPartition,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    /// Where it comes in the order partitions are read: those that returned records move to
    /// the end, so that a response cut by `max_bytes` does not always favour the same ones.
    rank: u64,
}

impl Cached {
    fn new(request: FetchPartition, rank: u64) -> Cached {
        Cached {
            request,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            rank,
        }
    }

    /// Whether an incremental response carries `pd` (with `records` bytes): records, an error
    /// or a moved offset. Remembers what it says.
    fn must_answer(&mut self, pd: &PartitionData, records: usize) -> bool {
        let changed = records > 0
            || pd.error_code != 0
            || pd.high_watermark != self.high_watermark
            || pd.last_stable_offset != self.last_stable_offset
            || pd.log_start_offset != self.log_start_offset;
        self.high_watermark = pd.high_watermark;
        self.last_stable_offset = pd.last_stable_offset;
        self.log_start_offset = pd.log_start_offset;
        changed
    }
}

#[derive(Debug)]
struct Session {
    /// The epoch the next request must carry.
    epoch: i32,
    /// A follower's session: only stale sessions evict it.
    privileged: bool,
    created_ms: u64,
    last_used_ms: u64,
    /// The topics of the session's partitions, each once, at the index its partitions refer
    /// to. A topic whose last partition is forgotten leaves its slot to the next new topic, so
    /// the table holds no more topics than the session has partitions.
    topics: Vec<TopicSlot>,
    /// Slots of `topics` left by forgotten topics.
    free_topics: Vec<u32>,
    topic_index: HashMap<TopicKey, u32>,
    partitions: HashMap<PartitionKey, Cached>,
    /// The next [`Cached::rank`].
    next_rank: u64,
    /// Partitions the next fetch reads whether or not they change: named, changed, or not
    /// settled at their last read.
    pending: HashSet<PartitionKey>,
    /// Tells the session which of its partitions changed.
    signal: Arc<SessionSignal>,
}

/// One slot of a session's topic table.
#[derive(Debug)]
struct TopicSlot {
    topic: TopicKey,
    /// The session's partitions of this topic; at 0 the slot is free.
    partitions: usize,
}

impl Session {
    fn new(privileged: bool, now_ms: u64, size: usize, replica: Option<i32>) -> Session {
        Session {
            epoch: 1,
            privileged,
            created_ms: now_ms,
            last_used_ms: now_ms,
            topics: Vec::new(),
            free_topics: Vec::new(),
            topic_index: HashMap::new(),
            partitions: HashMap::with_capacity(size),
            next_rank: 0,
            pending: HashSet::with_capacity(size),
            signal: SessionSignal::new(replica, i64::try_from(now_ms).unwrap_or(i64::MAX)),
        }
    }

    /// The index of topic `name` / `id`, if the session has named it.
    fn topic_of(&self, name: &TopicName, id: Uuid) -> Option<u32> {
        self.topic_index.get(&(name.clone(), id)).copied()
    }

    /// The index of topic `name` / `id`, added to the table if new.
    fn intern(&mut self, name: &TopicName, id: Uuid) -> u32 {
        if let Some(i) = self.topic_of(name, id) {
            return i;
        }
        let slot = TopicSlot {
            topic: (name.clone(), id),
            partitions: 0,
        };
        let i = match self.free_topics.pop() {
            Some(i) => {
                self.topics[i as usize] = slot;
                i
            }
            None => {
                self.topics.push(slot);
                u32::try_from(self.topics.len() - 1)
                    .expect("no more topics than partitions, which a request's size bounds")
            }
        };
        self.topic_index.insert((name.clone(), id), i);
        i
    }

    /// Removes partition `partition` of the topic at `topic`, freeing the topic's slot with
    /// its last partition.
    fn forget(&mut self, topic: u32, partition: i32) {
        if self.partitions.remove(&(topic, partition)).is_none() {
            return;
        }
        self.pending.remove(&(topic, partition));
        self.signal.forget((topic, partition));
        let slot = &mut self.topics[topic as usize];
        slot.partitions -= 1;
        if slot.partitions == 0 {
            self.topic_index.remove(&slot.topic);
            self.free_topics.push(topic);
        }
    }

    /// Adds or updates partition `p` of topic `topic` as the fetcher now asks for it.
    fn upsert(&mut self, topic: u32, p: &FetchPartition) -> &mut Cached {
        let key = (topic, p.partition);
        let (next_rank, topics) = (&mut self.next_rank, &mut self.topics);
        let c = self.partitions.entry(key).or_insert_with(|| {
            topics[topic as usize].partitions += 1;
            *next_rank += 1;
            Cached::new(p.clone(), *next_rank)
        });
        c.request = p.clone();
        c
    }

    /// Applies an incremental request's forgotten and named partitions; the named ones are
    /// read this round.
    fn apply_changes(&mut self, r: &FetchRequest) {
        for t in &r.forgotten_topics_data {
            let Some(topic) = self.topic_of(&t.topic, t.topic_id) else {
                continue;
            };
            for &partition in &t.partitions {
                self.forget(topic, partition);
            }
        }
        for t in &r.topics {
            let topic = self.intern(&t.topic, t.topic_id);
            for p in &t.partitions {
                self.upsert(topic, p);
                self.pending.insert((topic, p.partition));
            }
        }
    }

    /// The partitions this round reads, in the session's order: the pending ones and those
    /// that changed. They stay pending until a read settles them (a fetch abandoned before
    /// its answer loses nothing).
    fn keys_to_read(&mut self) -> Vec<PartitionKey> {
        self.pending.extend(self.signal.take_dirty());
        let partitions = &self.partitions;
        self.pending.retain(|k| partitions.contains_key(k));
        let mut keys: Vec<PartitionKey> = self.pending.iter().copied().collect();
        keys.sort_by_key(|k| partitions.get(k).map_or(u64::MAX, |c| c.rank));
        keys
    }

    /// The request's topics for `keys` (in their order, a topic repeated when they leave it
    /// and come back), with the offsets the fetcher last named.
    fn request_topics(&self, keys: &[PartitionKey]) -> Vec<FetchTopic> {
        let mut topics: Vec<FetchTopic> = Vec::new();
        let mut last_topic = None;
        for k in keys {
            let Some(c) = self.partitions.get(k) else {
                continue;
            };
            if last_topic != Some(k.0) {
                let (name, id) = &self.topics[k.0 as usize].topic;
                let mut t = FetchTopic::default();
                t.topic = name.clone();
                t.topic_id = *id;
                topics.push(t);
                last_topic = Some(k.0);
            }
            if let Some(t) = topics.last_mut() {
                t.partitions.push(c.request.clone());
            }
        }
        topics
    }

    /// Whether the answer carries partition `key` as read (`pd`, with `records` bytes); one
    /// that returned records goes to the end of the order.
    fn answered(&mut self, key: PartitionKey, pd: &PartitionData, records: usize) -> bool {
        let rank = self.next_rank + 1;
        let Some(c) = self.partitions.get_mut(&key) else {
            return true;
        };
        let keep = c.must_answer(pd, records);
        if records > 0 {
            c.rank = rank;
            self.next_rank = rank;
        }
        keep
    }

    /// After a read of `key`: settled, it is read again only when it changes or is named,
    /// which needs the session registered with it before the read (else a change between
    /// the read and the registration would go unseen).
    fn note_read(&mut self, key: PartitionKey, read: Option<&ReadState>) {
        let known = read
            .and_then(|r| r.listeners.as_ref())
            .is_some_and(|l| self.signal.watch(key, l));
        if known && read.is_some_and(|r| r.settled) {
            self.pending.remove(&key);
        } else {
            self.pending.insert(key);
        }
    }
}

/// The replica id a fetch names (-1 for consumers), whatever its version: the field of the
/// other versions holds its default, -1.
fn replica_of(r: &FetchRequest) -> Option<i32> {
    let id = r.replica_id.0.max(r.replica_state.replica_id.0);
    (id >= 0).then_some(id)
}

/// The fetch session settings.
#[derive(Debug, Clone, Copy)]
pub struct SessionLimits {
    /// `max.incremental.fetch.session.cache.slots`: 0 turns sessions off.
    pub slots: usize,
    /// `min.incremental.fetch.session.eviction.ms`.
    pub eviction_ms: u64,
}

/// How a fetch is answered, decided by [`FetchSessionCache::begin`].
#[derive(Debug)]
pub enum SessionContext {
    /// A full fetch, answered whole; a session is created for it afterwards when asked
    /// (`create`).
    Full { create: bool },
    /// An incremental fetch of session `id`: the request read lists `keys`, the session's
    /// partitions named, changed or pending (`whole`: all of them), the answer only what
    /// changed. A parked read waits on `signal`.
    Incremental {
        id: i32,
        signal: Arc<SessionSignal>,
        keys: Vec<PartitionKey>,
        whole: bool,
    },
}

impl SessionContext {
    /// The session's signal and whether the read covers the whole session, for an
    /// incremental fetch.
    pub fn signal(&self) -> Option<(&Arc<SessionSignal>, bool)> {
        match self {
            SessionContext::Incremental { signal, whole, .. } => Some((signal, *whole)),
            SessionContext::Full { .. } => None,
        }
    }
}

/// Every fetch session of this broker.
#[derive(Debug)]
pub struct FetchSessionCache {
    sessions: HashMap<i32, Session>,
    /// State of the session id generator (xorshift); ids are never 0 and never reused while
    /// their session lives.
    rng: u64,
}

fn next_epoch(epoch: i32) -> i32 {
    if epoch == i32::MAX {
        1
    } else {
        epoch + 1
    }
}

impl FetchSessionCache {
    /// An empty cache; `seed` starts the session id sequence.
    pub fn new(seed: u64) -> FetchSessionCache {
        FetchSessionCache {
            sessions: HashMap::new(),
            rng: seed | 1,
        }
    }

    /// Sessions held.
    pub fn len(&self) -> usize {
        self.sessions.len()
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.sessions.is_empty()
    }

    /// Partitions in all sessions.
    pub fn partitions(&self) -> usize {
        self.sessions.values().map(|s| s.partitions.len()).sum()
    }

    /// Partitions of session `id`, if it exists.
    pub fn session_partitions(&self, id: i32) -> Option<usize> {
        self.sessions.get(&id).map(|s| s.partitions.len())
    }

    /// Decides how `r` is answered and, for an incremental fetch, rewrites `r` into the fetch
    /// to read (the session's partitions it names, that changed, or that are pending, with
    /// their latest offsets; no forgotten topics). The error is a whole-response error code.
    pub fn begin(
        &mut self,
        r: &mut FetchRequest,
        version: i16,
        now_ms: u64,
    ) -> Result<SessionContext, ResponseError> {
        if version < 7 {
            return Ok(SessionContext::Full { create: false });
        }
        let (id, epoch) = (r.session_id, r.session_epoch);
        if epoch == INITIAL_EPOCH || epoch == FINAL_EPOCH {
            if id != 0 && self.sessions.remove(&id).is_some() {
                tracing::debug!(session_id = id, "fetch session closed by its fetcher");
            }
            return Ok(SessionContext::Full {
                create: epoch == INITIAL_EPOCH,
            });
        }
        if id == 0 {
            // An incremental epoch without a session.
            return Err(ResponseError::FetchSessionIdNotFound);
        }
        let Some(s) = self.sessions.get_mut(&id) else {
            return Err(ResponseError::FetchSessionIdNotFound);
        };
        if epoch != s.epoch {
            return Err(ResponseError::InvalidFetchSessionEpoch);
        }
        s.apply_changes(r);
        s.epoch = next_epoch(epoch);
        s.last_used_ms = now_ms;
        s.signal
            .fetched_at(i64::try_from(now_ms).unwrap_or(i64::MAX));
        let keys = s.keys_to_read();
        r.forgotten_topics_data.clear();
        r.topics = s.request_topics(&keys);
        Ok(SessionContext::Incremental {
            id,
            signal: s.signal.clone(),
            whole: keys.len() == s.partitions.len(),
            keys,
        })
    }

    /// After a change woke a parked incremental fetch: rewrites `r` and `context` to read the
    /// session's partitions now pending or changed (in the same epoch; those read before are
    /// still pending, as no answer settled them). False when the fetch is not incremental or
    /// its session is gone.
    pub fn reread(&mut self, context: &mut SessionContext, r: &mut FetchRequest) -> bool {
        let SessionContext::Incremental {
            id, keys, whole, ..
        } = context
        else {
            return false;
        };
        let Some(s) = self.sessions.get_mut(id) else {
            return false;
        };
        *keys = s.keys_to_read();
        r.topics = s.request_topics(keys);
        *whole = keys.len() == s.partitions.len();
        true
    }

    /// Completes the answer to a fetch [`FetchSessionCache::begin`] let through: sets the
    /// response's session id, creates the session of a full fetch that asked for one (when
    /// the cache has or can make room), and cuts an incremental answer down to the partitions
    /// that changed. `request` is the (rewritten) request that was read, `reads` what each
    /// of its partitions' reads left (in its order; a partition without one is read again
    /// next round).
    #[allow(clippy::too_many_arguments)]
    pub fn finish(
        &mut self,
        context: SessionContext,
        request: &FetchRequest,
        reply: &mut FetchReply,
        follower: bool,
        limits: SessionLimits,
        now_ms: u64,
        reads: &[ReadState],
    ) {
        match context {
            SessionContext::Full { create: false } => reply.response.session_id = 0,
            SessionContext::Full { create: true } => {
                let id = self.create(request, reply, follower, limits, now_ms, reads);
                reply.response.session_id = id.unwrap_or(0);
            }
            SessionContext::Incremental { id, keys, .. } => {
                reply.response.session_id = id;
                let Some(s) = self.sessions.get_mut(&id) else {
                    // Evicted while the fetch was parked: answered as read (what it read is
                    // all that can have changed); the next request learns the session is gone.
                    return;
                };
                keep_changed(s, &keys, reply, reads);
            }
        }
    }

    fn create(
        &mut self,
        request: &FetchRequest,
        reply: &FetchReply,
        follower: bool,
        limits: SessionLimits,
        now_ms: u64,
        reads: &[ReadState],
    ) -> Option<i32> {
        if limits.slots == 0 {
            return None;
        }
        let size: usize = request.topics.iter().map(|t| t.partitions.len()).sum();
        if self.sessions.len() >= limits.slots {
            let victim = self.eviction_victim(follower, size, limits, now_ms)?;
            tracing::debug!(
                session_id = victim,
                new_partitions = size,
                follower,
                "fetch session evicted"
            );
            self.sessions.remove(&victim);
        }
        let mut session = Session::new(follower, now_ms, size, replica_of(request));
        // The answer names the partitions in the request's order, as `reads` does.
        let mut answered = reply.response.responses.iter().flat_map(|t| &t.partitions);
        let mut reads = reads.iter();
        'topics: for t in &request.topics {
            let topic = session.intern(&t.topic, t.topic_id);
            for p in &t.partitions {
                let Some(pd) = answered.next() else {
                    break 'topics;
                };
                session.upsert(topic, p).must_answer(pd, 0);
                session.note_read((topic, p.partition), reads.next());
            }
        }
        let id = self.new_id();
        self.sessions.insert(id, session);
        tracing::debug!(
            session_id = id,
            partitions = size,
            follower,
            "fetch session created"
        );
        Some(id)
    }

    /// The session a new one of `size` partitions replaces when the cache is full, if any
    /// (KIP-227's rules, see the module documentation).
    fn eviction_victim(
        &self,
        follower: bool,
        size: usize,
        limits: SessionLimits,
        now_ms: u64,
    ) -> Option<i32> {
        let aged = |since: u64| now_ms.saturating_sub(since) >= limits.eviction_ms;
        let idle = self
            .sessions
            .iter()
            .filter(|(_, s)| aged(s.last_used_ms))
            .min_by_key(|(id, s)| (s.last_used_ms, **id));
        if let Some((id, _)) = idle {
            return Some(*id);
        }
        let smallest_consumer = |eligible: &dyn Fn(&Session) -> bool| {
            self.sessions
                .iter()
                .filter(|(_, s)| !s.privileged && eligible(s))
                .min_by_key(|(id, s)| (s.partitions.len(), s.last_used_ms, **id))
                .map(|(id, _)| *id)
        };
        if follower {
            if let Some(id) = smallest_consumer(&|_| true) {
                return Some(id);
            }
        }
        smallest_consumer(&|s| aged(s.created_ms) && s.partitions.len() < size)
    }

    fn new_id(&mut self) -> i32 {
        loop {
            self.rng ^= self.rng << 13;
            self.rng ^= self.rng >> 7;
            self.rng ^= self.rng << 17;
            let id = (self.rng >> 33) as i32;
            if id > 0 && !self.sessions.contains_key(&id) {
                return id;
            }
        }
    }
}

/// Keeps in `reply` only the partitions of session `s` that changed (`keys` names them in
/// the reply's order, `reads` what their reads left), moves those that returned records to
/// the end of the session's order, and keeps pending those a read did not settle.
fn keep_changed(
    s: &mut Session,
    keys: &[PartitionKey],
    reply: &mut FetchReply,
    reads: &[ReadState],
) {
    let mut keys = keys.iter().copied();
    let mut reads = reads.iter();
    let mut slices = std::mem::take(&mut reply.records).into_iter();
    let mut kept_slices = Vec::new();
    for t in &mut reply.response.responses {
        let parts = std::mem::take(&mut t.partitions);
        for pd in parts {
            let slice = slices.next().unwrap_or_else(gregor_log::FileSlice::empty);
            let read = reads.next();
            // `None`: a partition forgotten while the fetch was parked, answered as read.
            let key = keys.next().filter(|k| s.partitions.contains_key(k));
            let keep = match key {
                Some(k) => {
                    let keep = s.answered(k, &pd, slice.len);
                    s.note_read(k, read);
                    keep
                }
                None => true,
            };
            if keep {
                t.partitions.push(pd);
                kept_slices.push(slice);
            }
        }
    }
    reply
        .response
        .responses
        .retain(|t| !t.partitions.is_empty());
    reply.records = kept_slices;
}

#[cfg(test)]
#[path = "fetch_session_tests.rs"]
mod tests;
