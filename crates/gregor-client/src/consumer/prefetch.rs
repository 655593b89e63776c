//! The consumer's prefetching decisions and its record buffer. Pure: the consumer's fetcher
//! feeds them the consumer's state and sends what [`plan`] asks for.
//!
//! Rules (the memory bound is the one documented in the crate README):
//!   - at most one Fetch in flight per broker (a fetch session takes one request at a time,
//!     KIP-227), and a broker that is waiting for its answer, or backing off after a failure,
//!     holds back no other broker;
//!   - a partition is fetched from its leader while fewer than `max.partition.fetch.bytes` of
//!     its records are buffered (not yet returned by `poll`), starting after what is buffered,
//!     so the next chunk is on the wire while the application consumes the current one;
//!   - each broker has a window ([`super::fetch_window`]): from 8 MiB on a short round trip up
//!     to `fetch.max.bytes` on a long one;
//!   - a broker gets a new Fetch only while at most half of its window is buffered from it
//!     (fewer, larger Fetches when many partitions are buffered) and that leaves room for at
//!     least one partition's worth (`min(max.partition.fetch.bytes, window)`), and the Fetch
//!     asks for the room left but at most half of the window (or that one partition's worth),
//!     so that an answer landing on a drained buffer lets the next Fetch go out at once: the
//!     bytes buffered from a broker plus the answer awaited from it stay within its window,
//!     and so within `fetch.max.bytes` (the broker may exceed a limit by one record batch, as
//!     Kafka always returns the first batch whole).

use std::collections::{BTreeMap, HashMap, VecDeque};

use bytes::Bytes;

use super::fetch::{ByteLimits, ConsumerRecord};
use crate::types::TopicPartition;

/// A partition that could be fetched now: assigned, with a position, not paused, with a known
/// leader, and not in any Fetch in flight.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Fetchable {
    pub tp: TopicPartition,
    /// Its topic's id (Fetch v13+ names topics by id; nil when unknown).
    pub topic_id: uuid::Uuid,
    pub leader: i32,
    /// The leader epoch the consumer believes current (-1: unknown).
    pub leader_epoch: i32,
    /// Where its next Fetch starts: after its buffered records, else its position.
    pub offset: i64,
    /// Its bytes fetched and not yet returned.
    pub buffered: usize,
    /// Its token (see [`Now`]) when planned, which its answer must still match.
    pub token: u64,
}

/// A broker as the plan sees it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BrokerLoad {
    /// A Fetch to it is awaiting its answer.
    pub in_flight: bool,
    /// It failed lately and is not asked again before its backoff ends.
    pub backing_off: bool,
    /// Bytes fetched from it and not yet returned.
    pub buffered: usize,
    /// Its window ([`super::fetch_window::FetchWindow`]), at most `fetch.max.bytes`; 0: no
    /// window of its own, `fetch.max.bytes`.
    pub window: usize,
}

impl BrokerLoad {
    /// The limits with `fetch.max.bytes` narrowed to this broker's window.
    fn limits(&self, limits: ByteLimits) -> ByteLimits {
        let fetch_max = match self.window {
            0 => limits.fetch_max,
            w => w.min(limits.fetch_max),
        };
        ByteLimits {
            fetch_max,
            partition_max: limits.partition_max,
        }
    }
}

/// One Fetch to send.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFetch {
    pub broker: i32,
    /// The request's `max_bytes`: the room left under `fetch.max.bytes`, at most half of it
    /// (see [`plan`]'s module rules).
    pub max_bytes: usize,
    pub partitions: Vec<Fetchable>,
}

/// Which partitions to fetch from which broker now (see the module's rules), brokers in id
/// order and partitions in the order given.
pub fn plan(
    candidates: Vec<Fetchable>,
    load: impl Fn(i32) -> BrokerLoad,
    limits: ByteLimits,
) -> Vec<PlannedFetch> {
    let mut by_broker: BTreeMap<i32, Vec<Fetchable>> = BTreeMap::new();
    for c in candidates {
        if c.buffered < limits.partition_max {
            by_broker.entry(c.leader).or_default().push(c);
        }
    }
    by_broker
        .into_iter()
        .filter_map(|(broker, partitions)| {
            let l = load(broker);
            may_fetch_from(l, limits).then(|| PlannedFetch {
                broker,
                max_bytes: fetch_ask(l, limits),
                partitions,
            })
        })
        .collect()
}

/// What a broker's Fetch asks for: the room left in its window, but at most half of it (or
/// one partition's worth, when that is more). An answer that lands on a drained buffer
/// then leaves at most half buffered, so the next Fetch goes out at once, before the answer is
/// decoded, and the broker prepares it meanwhile; asking for all the room left, an answer that
/// landed after the application had drained the buffer held the next Fetch back until the
/// answer was decoded and partly returned, and broker and consumer took turns.
fn fetch_ask(l: BrokerLoad, limits: ByteLimits) -> usize {
    let limits = l.limits(limits);
    let room = limits.fetch_max.saturating_sub(l.buffered);
    let share = (limits.fetch_max / 2).max(limits.partition_max.min(limits.fetch_max));
    room.min(share)
}

/// Whether a partition's next Fetch would start at or past its last known high watermark
/// (nothing to read there now); unknown: not caught up.
pub fn caught_up(f: &Fetchable, high_watermark: Option<i64>) -> bool {
    high_watermark.is_some_and(|hw| f.offset >= hw)
}

/// Whether a broker may get a Fetch now: none in flight, not backing off, at most half of its
/// window buffered from it (so Fetches stay large rather than one per partition consumed),
/// and room for at least `min(max.partition.fetch.bytes, window)`.
pub fn may_fetch_from(l: BrokerLoad, limits: ByteLimits) -> bool {
    let limits = l.limits(limits);
    let room = limits.fetch_max.saturating_sub(l.buffered);
    !l.in_flight
        && !l.backing_off
        && l.buffered <= limits.fetch_max / 2
        && room >= limits.partition_max.min(limits.fetch_max)
}

/// The leaders of the assigned partitions in one metadata snapshot, so that a `poll` during
/// which no leader may get a Fetch skips the pass over every assigned partition (twice per
/// `poll`; most of them while the leaders' Fetches are in flight or their buffers full).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Leaders {
    /// The brokers leading an assigned partition, in id order, each once.
    pub brokers: Vec<i32>,
    /// Some assigned partition has no known leader (or its topic is unknown).
    pub leaderless: bool,
}

impl Leaders {
    /// From each assigned partition's leader (`None`: none known).
    pub fn of(leaders: impl IntoIterator<Item = Option<i32>>) -> Leaders {
        let mut l = Leaders::default();
        for leader in leaders {
            match leader {
                Some(b) => l.brokers.push(b),
                None => l.leaderless = true,
            }
        }
        l.brokers.sort_unstable();
        l.brokers.dedup();
        l
    }

    /// Whether [`plan`] has nothing to send now whatever the partitions' state: every
    /// partition has a known leader and none of them [`may_fetch_from`]. (A superset of the
    /// leaders, as after a partition is revoked, only makes this `false` more often.)
    pub fn none_fetchable(&self, load: impl Fn(i32) -> BrokerLoad, limits: ByteLimits) -> bool {
        !self.leaderless
            && self
                .brokers
                .iter()
                .all(|b| !may_fetch_from(load(*b), limits))
    }
}

/// The partition as it is when a Fetch answer lands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Now {
    /// Changed by every seek, pause, reset and (re)assignment.
    pub token: u64,
    pub paused: bool,
    pub position: Option<i64>,
    /// Where its next Fetch would start, when it has buffered records.
    pub buffered_end: Option<i64>,
}

/// Whether an answer for a partition, asked at `offset` when its token was `token`, may be
/// buffered: the partition is still assigned (`now` is `Some`), was not seeked, paused, reset
/// or reassigned since, and the answer continues exactly where its buffered records (or its
/// position) end. Anything else is stale and dropped.
pub fn is_current(token: u64, offset: i64, now: Option<Now>) -> bool {
    let Some(now) = now else {
        return false;
    };
    now.token == token && !now.paused && now.buffered_end.or(now.position) == Some(offset)
}

/// Records of one partition from one Fetch answer, not yet all returned.
#[derive(Debug)]
pub struct Chunk {
    pub tp: TopicPartition,
    /// The broker it came from (its bytes count against that broker until returned).
    pub broker: i32,
    /// Decoded, not yet returned, in offset order (a `Vec`, not a `VecDeque`: a whole chunk
    /// is moved out with one copy, where a deque's drain moved the 136-byte records one call
    /// at a time).
    pub records: Vec<ConsumerRecord>,
    /// The record batches as received and the offset they were asked from, until
    /// [`Buffer::decode_pending`] turns them into `records` (answers are buffered first, so
    /// that the partition's next Fetch goes out before they are decoded).
    pub undecoded: Option<(Bytes, i64)>,
    /// The offset after the chunk's last batch (past control records too): the partition's
    /// position once every record of the chunk is returned, and where its next Fetch starts.
    pub next_offset: i64,
    /// The record batches' size on the wire.
    pub bytes: usize,
}

#[derive(Debug, Default, Clone, Copy)]
struct Tally {
    bytes: usize,
    chunks: usize,
    /// The `next_offset` of its newest chunk.
    end: i64,
}

/// Fetched records waiting for `poll`, in arrival order, with byte counts per partition and
/// per broker.
#[derive(Debug, Default)]
pub struct Buffer {
    chunks: VecDeque<Chunk>,
    partitions: HashMap<TopicPartition, Tally>,
    brokers: HashMap<i32, usize>,
    bytes: usize,
    /// Record vectors of chunks used up, emptied, for the next answers decoded (see
    /// [`super::fetch::decode_records_into`]).
    spare: Vec<Vec<ConsumerRecord>>,
    /// Chunks still undecoded.
    undecoded: usize,
}

/// Spare record vectors kept: enough for the answers of a few partitions in turn, and a bound
/// on the memory held (each about one `max.partition.fetch.bytes` answer's records).
const SPARE_VECS: usize = 4;

impl Buffer {
    pub fn push(&mut self, chunk: Chunk) {
        let t = self.partitions.entry(chunk.tp.clone()).or_default();
        t.bytes += chunk.bytes;
        t.chunks += 1;
        t.end = chunk.next_offset;
        *self.brokers.entry(chunk.broker).or_default() += chunk.bytes;
        self.bytes += chunk.bytes;
        self.undecoded += usize::from(chunk.undecoded.is_some());
        self.chunks.push_back(chunk);
    }

    /// Where the partition's next Fetch starts, when it has buffered chunks.
    pub fn end(&self, tp: &TopicPartition) -> Option<i64> {
        self.partitions.get(tp).map(|t| t.end)
    }

    pub fn partition_bytes(&self, tp: &TopicPartition) -> usize {
        self.partitions.get(tp).map_or(0, |t| t.bytes)
    }

    pub fn broker_bytes(&self, broker: i32) -> usize {
        self.brokers.get(&broker).copied().unwrap_or(0)
    }

    /// Every buffered byte.
    pub fn bytes(&self) -> usize {
        self.bytes
    }

    #[cfg(test)]
    pub fn is_empty(&self) -> bool {
        self.chunks.is_empty()
    }

    /// Drops a partition's buffered records (seek, pause, revocation, reset).
    pub fn drop_partition(&mut self, tp: &TopicPartition) {
        if self.partitions.remove(tp).is_none() {
            return;
        }
        let mut kept = VecDeque::with_capacity(self.chunks.len());
        for c in self.chunks.drain(..) {
            if c.tp == *tp {
                release(&mut self.brokers, &mut self.bytes, c.broker, c.bytes);
                self.undecoded -= usize::from(c.undecoded.is_some());
            } else {
                kept.push_back(c);
            }
        }
        self.chunks = kept;
    }

    pub fn clear(&mut self) {
        *self = Buffer::default();
    }

    /// Whether some chunk is still undecoded.
    pub fn has_undecoded(&self) -> bool {
        self.undecoded > 0
    }

    /// Whether [`Buffer::decode_pending`] with `want` would decode a chunk: fewer than `want`
    /// records are decoded ahead of the oldest undecoded chunk.
    pub fn needs_decoding(&self, want: usize) -> bool {
        self.next_to_decode(want).is_some()
    }

    /// The index of the oldest undecoded chunk, when fewer than `want` records are decoded
    /// ahead of it.
    fn next_to_decode(&self, want: usize) -> Option<usize> {
        if self.undecoded == 0 {
            return None;
        }
        let mut ready = 0usize;
        for (i, c) in self.chunks.iter().enumerate() {
            if ready >= want {
                return None;
            }
            if c.undecoded.is_some() {
                return Some(i);
            }
            ready += c.records.len();
        }
        None
    }

    /// Decodes undecoded chunks, oldest first, with `decode` (its partition, batches and the
    /// offset asked) until the decoded chunks at the front of the buffer hold at least `want`
    /// records: what the next [`Buffer::take`] of `want` records returns, no more. Returns the
    /// partitions whose batches failed to decode, with the reason; their chunks stay empty
    /// until the caller drops the partition's buffer.
    /// `decode` gets an empty vector to decode into (one kept from a used-up chunk when there
    /// is one).
    ///
    /// Decoding on demand rather than whole answers: a whole answer (up to half of
    /// `fetch.max.bytes`, 25,000 records of 1 KiB at the defaults) decoded at once made 3.4 MB
    /// of records, out of the CPU's caches by the time `poll` moved them out, and a record
    /// vector per partition more than the spare ones kept, fresh memory each time.
    pub fn decode_pending<E>(
        &mut self,
        want: usize,
        mut decode: impl FnMut(
            &TopicPartition,
            Bytes,
            i64,
            Vec<ConsumerRecord>,
        ) -> Result<Vec<ConsumerRecord>, E>,
    ) -> Vec<(TopicPartition, E)> {
        let mut failed = Vec::new();
        while let Some(i) = self.next_to_decode(want) {
            let c = &mut self.chunks[i];
            let (batches, asked) = c
                .undecoded
                .take()
                .expect("next_to_decode names an undecoded chunk");
            self.undecoded -= 1;
            let spare = self.spare.pop().unwrap_or_default();
            match decode(&c.tp, batches, asked, spare) {
                Ok(records) => c.records = records,
                Err(e) => failed.push((c.tp.clone(), e)),
            }
        }
        failed
    }

    /// Takes up to `max` records, oldest chunk first, moving the positions in `positions`;
    /// records before a partition's position are skipped, and a chunk of a partition without a
    /// returnable position is dropped.
    pub fn take(&mut self, max: usize, positions: &mut impl Positions) -> Vec<ConsumerRecord> {
        // Sized once: growing by doubling moved every record several times per `poll`.
        let held: usize = self.chunks.iter().map(|c| c.records.len()).sum();
        let mut out = Vec::with_capacity(max.min(held));
        while out.len() < max {
            let Some(mut chunk) = self.chunks.pop_front() else {
                break;
            };
            if chunk.undecoded.is_some() {
                // Not decoded yet (the caller decodes before taking): never skip past it.
                self.chunks.push_front(chunk);
                break;
            }
            let Some(mut position) = positions.returnable(&chunk.tp) else {
                self.used_up(&chunk);
                continue;
            };
            let n = (max - out.len()).min(chunk.records.len());
            if in_order_from(chunk.records[..n].iter(), position) {
                // The usual case, every record at or past the position and in offset order:
                // moved in bulk (popped one by one, each 136-byte record was copied once more
                // on the way).
                if let Some(r) = chunk.records.get(n.wrapping_sub(1)) {
                    position = r.offset.saturating_add(1);
                }
                if n == chunk.records.len() {
                    out.append(&mut chunk.records);
                } else {
                    // The rest moves to the front once; at most once per `take`.
                    out.extend(chunk.records.drain(..n));
                }
            } else {
                let mut rest = std::mem::take(&mut chunk.records).into_iter();
                while out.len() < max {
                    let Some(r) = rest.next() else {
                        break;
                    };
                    if r.offset >= position {
                        position = r.offset.saturating_add(1);
                        out.push(r);
                    }
                }
                chunk.records = rest.collect();
            }
            let tp = chunk.tp.clone();
            if chunk.records.is_empty() {
                position = position.max(chunk.next_offset);
                self.used_up(&chunk);
                if self.spare.len() < SPARE_VECS {
                    // Empty: no record moves, the allocation is kept.
                    self.spare.push(chunk.records);
                }
            } else {
                self.chunks.push_front(chunk);
            }
            positions.advance(&tp, position);
        }
        out
    }

    /// A chunk left the buffer: its bytes no longer count.
    fn used_up(&mut self, chunk: &Chunk) {
        self.undecoded -= usize::from(chunk.undecoded.is_some());
        release(
            &mut self.brokers,
            &mut self.bytes,
            chunk.broker,
            chunk.bytes,
        );
        if let Some(t) = self.partitions.get_mut(&chunk.tp) {
            t.chunks = t.chunks.saturating_sub(1);
            t.bytes = t.bytes.saturating_sub(chunk.bytes);
            if t.chunks == 0 {
                self.partitions.remove(&chunk.tp);
            }
        }
    }
}

/// Whether every record is at or past `position` and after the one before it: what the
/// record-by-record loop of [`Buffer::take`] would return whole, in the same order.
fn in_order_from<'a>(records: impl Iterator<Item = &'a ConsumerRecord>, position: i64) -> bool {
    let mut next = position;
    for r in records {
        if r.offset < next {
            return false;
        }
        next = r.offset.saturating_add(1);
    }
    true
}

/// The positions [`Buffer::take`] reads and moves.
pub trait Positions {
    /// The partition's position when its records may be returned now (assigned, positioned,
    /// not paused).
    fn returnable(&self, tp: &TopicPartition) -> Option<i64>;
    /// Records were returned (or skipped as control records) up to `position`.
    fn advance(&mut self, tp: &TopicPartition, position: i64);
}

fn release(brokers: &mut HashMap<i32, usize>, total: &mut usize, broker: i32, bytes: usize) {
    if let Some(b) = brokers.get_mut(&broker) {
        *b = b.saturating_sub(bytes);
        if *b == 0 {
            brokers.remove(&broker);
        }
    }
    *total = total.saturating_sub(bytes);
}

#[cfg(test)]
#[path = "prefetch_tests.rs"]
mod tests;
