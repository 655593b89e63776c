//! Fetch sessions (KIP-227): a consumer or follower fetching many partitions names them once,
//! then sends only what changed (new partitions, new fetch offsets, forgotten ones), and gets
//! back only the partitions that have something to say (records, an error, a moved high
//! watermark, last stable offset or log start offset).
//!
//! This is the functional core: the cache of sessions, the request's session id and epoch
//! turned into the full list of partitions to read ([`FetchSessionCache::begin`]), and the
//! answer cut down to what an incremental response carries ([`FetchSessionCache::finish`]).
//! Time comes in as milliseconds; the handler (`handlers/fetch.rs`) does the reading.
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

use std::collections::HashMap;

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::{FetchRequest, TopicName};
use kafka_protocol::ResponseError;
use uuid::Uuid;

use crate::fetch_frame::FetchReply;

/// The epoch of a full fetch without a session (and of closing one).
pub const FINAL_EPOCH: i32 = -1;
/// The epoch of a full fetch that creates a session.
pub const INITIAL_EPOCH: i32 = 0;

/// A topic as a fetch names it: by name (Fetch v7-12) or id (v13 and later).
type TopicKey = (TopicName, Uuid);

/// A partition of a session: the index of its topic in the session's topic table, and its
/// index. Small and cheap to hash, so that the work per partition of each incremental fetch
/// (a follower or consumer of hundreds of partitions sends several a second) hashes no names.
type PartitionKey = (u32, i32);

/// What a session remembers of one partition: what the fetcher last asked for, and what it
/// was last told (to answer only changes).
#[derive(Debug, Clone, PartialEq)]
struct Cached {
    request: FetchPartition,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
}

impl Cached {
    fn new(request: FetchPartition) -> Cached {
        Cached {
            request,
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
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
    /// The partitions, in the order they are read; those that returned records move to the
    /// end, so that a response cut by `max_bytes` does not always favour the same ones.
    order: Vec<PartitionKey>,
}

/// One slot of a session's topic table.
#[derive(Debug)]
struct TopicSlot {
    topic: TopicKey,
    /// The session's partitions of this topic; at 0 the slot is free.
    partitions: usize,
}

impl Session {
    fn new(privileged: bool, now_ms: u64, size: usize) -> Session {
        Session {
            epoch: 1,
            privileged,
            created_ms: now_ms,
            last_used_ms: now_ms,
            topics: Vec::new(),
            free_topics: Vec::new(),
            topic_index: HashMap::new(),
            partitions: HashMap::with_capacity(size),
            order: Vec::with_capacity(size),
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
        let (order, topics) = (&mut self.order, &mut self.topics);
        let c = self.partitions.entry(key).or_insert_with(|| {
            order.push(key);
            topics[topic as usize].partitions += 1;
            Cached::new(p.clone())
        });
        c.request = p.clone();
        c
    }
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
    /// An incremental fetch of session `id`: the request read is the session's whole
    /// partition list, the answer only what changed.
    Incremental { id: i32 },
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

    /// Decides how `r` is answered and, for an incremental fetch, rewrites `r` into the full
    /// fetch it stands for (the session's partitions with their latest offsets, no forgotten
    /// topics). The error is a whole-response error code.
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
        for t in &r.forgotten_topics_data {
            let Some(topic) = s.topic_of(&t.topic, t.topic_id) else {
                continue;
            };
            for &partition in &t.partitions {
                s.forget(topic, partition);
            }
        }
        if !r.forgotten_topics_data.is_empty() {
            let partitions = &s.partitions;
            s.order.retain(|k| partitions.contains_key(k));
        }
        for t in &r.topics {
            let topic = s.intern(&t.topic, t.topic_id);
            for p in &t.partitions {
                s.upsert(topic, p);
            }
        }
        s.epoch = next_epoch(epoch);
        s.last_used_ms = now_ms;
        r.forgotten_topics_data.clear();
        r.topics = Vec::new();
        let mut last_topic = None;
        for k in &s.order {
            let Some(c) = s.partitions.get(k) else {
                continue;
            };
            if last_topic != Some(k.0) {
                let (name, id) = &s.topics[k.0 as usize].topic;
                let mut t = FetchTopic::default();
                t.topic = name.clone();
                t.topic_id = *id;
                r.topics.push(t);
                last_topic = Some(k.0);
            }
            if let Some(t) = r.topics.last_mut() {
                t.partitions.push(c.request.clone());
            }
        }
        Ok(SessionContext::Incremental { id })
    }

    /// Completes the answer to a fetch [`FetchSessionCache::begin`] let through: sets the
    /// response's session id, creates the session of a full fetch that asked for one (when
    /// the cache has or can make room), and cuts an incremental answer down to the partitions
    /// that changed. `request` is the (rewritten) request that was read.
    pub fn finish(
        &mut self,
        context: SessionContext,
        request: &FetchRequest,
        reply: &mut FetchReply,
        follower: bool,
        limits: SessionLimits,
        now_ms: u64,
    ) {
        match context {
            SessionContext::Full { create: false } => reply.response.session_id = 0,
            SessionContext::Full { create: true } => {
                let id = self.create(request, reply, follower, limits, now_ms);
                reply.response.session_id = id.unwrap_or(0);
            }
            SessionContext::Incremental { id } => {
                reply.response.session_id = id;
                let Some(s) = self.sessions.get_mut(&id) else {
                    // Evicted while the fetch was parked: this answer is still whole-session
                    // correct; the next request learns the session is gone.
                    return;
                };
                keep_changed(s, request, reply);
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
        let mut session = Session::new(follower, now_ms, size);
        // The answer names the partitions in the request's order.
        let mut answered = reply.response.responses.iter().flat_map(|t| &t.partitions);
        'topics: for t in &request.topics {
            let topic = session.intern(&t.topic, t.topic_id);
            for p in &t.partitions {
                let Some(pd) = answered.next() else {
                    break 'topics;
                };
                session.upsert(topic, p).must_answer(pd, 0);
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

/// Keeps in `reply` only the partitions of session `s` that changed (`request`, the session's
/// partitions as they were read, names them in the reply's order), and moves those that
/// returned records to the end of the session's order.
fn keep_changed(s: &mut Session, request: &FetchRequest, reply: &mut FetchReply) {
    // Each answered partition's key, `None` for a topic the session no longer knows (its
    // partitions were forgotten while the fetch was parked: answered anyway, as read).
    let topic_index = &s.topic_index;
    let mut keys = request.topics.iter().flat_map(|t| {
        let topic = topic_index.get(&(t.topic.clone(), t.topic_id)).copied();
        t.partitions
            .iter()
            .map(move |p| topic.map(|i| (i, p.partition)))
    });
    let mut slices = std::mem::take(&mut reply.records).into_iter();
    let mut kept_slices = Vec::new();
    let mut with_records = std::collections::HashSet::new();
    for t in &mut reply.response.responses {
        let parts = std::mem::take(&mut t.partitions);
        for pd in parts {
            let slice = slices.next().unwrap_or_else(gregor_log::FileSlice::empty);
            let key = keys.next().flatten();
            let keep = match key.and_then(|k| s.partitions.get_mut(&k)) {
                Some(c) => c.must_answer(&pd, slice.len),
                None => true,
            };
            if let (Some(k), true) = (key, slice.len > 0) {
                with_records.insert(k);
            }
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
    if !with_records.is_empty() {
        let (mut stay, moved): (Vec<PartitionKey>, Vec<PartitionKey>) =
            std::mem::take(&mut s.order)
                .into_iter()
                .partition(|k| !with_records.contains(k));
        stay.extend(moved);
        s.order = stay;
    }
}

#[cfg(test)]
#[path = "fetch_session_tests.rs"]
mod tests;
