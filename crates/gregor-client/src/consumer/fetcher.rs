//! Fetches in flight: one Fetch per broker at a time, each broker on its own (a slow or
//! parked leader holds back no other), sent whenever [`prefetch::plan`] allows, including
//! right before `poll` returns records so the next ones are on the wire while the application
//! works. A Fetch runs in its own task, which splits the answer by partition and, on a
//! multi-thread runtime, decodes it too (on a current-thread runtime `poll` decodes an answer
//! after it has sent the next Fetch, so the broker works on that one meanwhile); `poll`
//! collects the answers that have landed, keeps those still current ([`prefetch::is_current`]) in the
//! [`Buffer`] and returns records from it.
//!
//! Each broker's fetch session (KIP-227) moves into the task of the Fetch in flight to that
//! broker and comes back with the answer, so a session never has two requests outstanding.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Duration;

use kafka_protocol::messages::FetchRequest;
use tokio::task::{Id, JoinError};

use super::fetch::{self, FetchTarget};
use super::fetch_state::{Answer, Landed, LeaderCache, Planned};
use super::fetch_window::{Answered, FetchWindow};
use super::prefetch::{self, BrokerLoad, Chunk, Fetchable, Leaders, Now, PlannedFetch};
use super::shared::millis;
use super::state::Consumer;
use super::ConsumerRecord;
use crate::client::{Client, Target};
use crate::error::{KafkaCode, KafkaError};
use crate::fetch_session::FetchSession;
use crate::metadata::ClusterMetadata;
use crate::types::{IsolationLevel, TopicPartition};

/// The consumer's fetching, for monitoring and tests.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FetchMetrics {
    /// Bytes of record batches fetched and not yet returned by `poll` (held at most until
    /// their chunk is used up; bounded per broker by `fetch.max.bytes`, see the crate README).
    pub buffered_bytes: usize,
    /// Brokers with a Fetch awaiting its answer.
    pub fetches_in_flight: usize,
    /// Fetch requests sent since the consumer was created.
    pub fetches_sent: u64,
    /// The largest window among the brokers fetched from (0 before the first answer): the
    /// bytes a consumer keeps buffered plus in flight from one broker, 8 MiB on a short round
    /// trip, growing toward `fetch.max.bytes` over a long one (see the crate README).
    pub fetch_window_bytes: usize,
    /// Partition answers dropped because the partition was seeked, paused, reset, revoked
    /// or reassigned while they were in flight.
    pub stale_answers_dropped: u64,
}

impl Consumer {
    /// The fetching's counters and buffer size.
    pub fn fetch_metrics(&self) -> FetchMetrics {
        FetchMetrics {
            buffered_bytes: self.fetcher.buffer.bytes(),
            fetches_in_flight: self.fetcher.busy.len(),
            fetches_sent: self.fetcher.sent,
            fetch_window_bytes: self
                .fetcher
                .windows
                .iter()
                .map(|(_, w, _)| w.bytes(self.settings.byte_limits))
                .max()
                .unwrap_or(0),
            stale_answers_dropped: self.fetcher.stale,
        }
    }

    /// Some Fetch awaits its answer.
    pub(super) fn fetch_in_flight(&self) -> bool {
        !self.fetcher.busy.is_empty()
    }

    /// Up to `max.poll.records` buffered records, moving positions past them.
    pub(super) fn take_buffered(&mut self) -> Vec<ConsumerRecord> {
        self.fetcher
            .buffer
            .take(self.settings.max_poll_records, &mut self.assigned)
    }

    /// Drops a partition's buffered records and makes answers in flight for it stale (a seek,
    /// a pause, a reset or a revocation).
    pub(super) fn drop_buffered(&mut self, tp: &TopicPartition) {
        if let Some(s) = self.assigned.get_mut(tp) {
            s.renew();
        }
        self.fetcher.buffer.drop_partition(tp);
    }

    /// Every partition is gone (lost, or the consumer left).
    pub(super) fn drop_all_buffered(&mut self) {
        self.fetcher.buffer.clear();
    }

    /// Collects the answers that have landed, sends the Fetches the plan allows now, and
    /// refreshes metadata when leaders are missing (at most every `retry.backoff.ms`).
    pub(super) async fn fetch_more(&mut self) {
        while let Some(joined) = self.fetcher.in_flight.try_join_next_with_id() {
            self.on_landed(joined);
        }
        self.send_fetches();
        let now = self.now();
        if self.fetcher.needs_metadata && now >= self.fetcher.next_metadata_ms {
            self.fetcher.needs_metadata = false;
            self.fetcher.next_metadata_ms = now + millis(self.settings.retry_backoff);
            let topics: Vec<String> = self.subscribed.iter().cloned().collect();
            if let Err(e) = self.client.refresh_metadata(Some(&topics)).await {
                tracing::debug!(error = %e, "metadata refresh for fetching failed");
            }
            self.send_fetches();
        }
        self.decode_landed().await;
    }

    /// Decodes the answers buffered undecoded, as far as the next `poll` returns (see
    /// [`super::prefetch::Buffer::decode_pending`]). The Fetches that follow them were sent
    /// first; on a current-thread runtime the connection's writer only puts them on the wire
    /// when this task waits, so it yields once before decoding: the broker then prepares the
    /// next answer while this one is decoded. A partition whose batches do not decode is
    /// handled as a partition error (its buffer dropped, fetched again after
    /// `retry.backoff.ms`).
    async fn decode_landed(&mut self) {
        let want = self.settings.max_poll_records;
        if !self.fetcher.buffer.needs_decoding(want) {
            return;
        }
        if self.fetch_in_flight() {
            tokio::task::yield_now().await;
        }
        let check_crcs = self.settings.check_crcs;
        let failed = self
            .fetcher
            .buffer
            .decode_pending(want, |tp, batches, asked, spare| {
                fetch::decode_records_into(tp, batches, asked, check_crcs, spare)
                    .map(|(records, _)| records)
                    .map_err(|reason| fetch::corrupt(tp, reason))
            });
        for (tp, e) in failed {
            tracing::debug!(topic = %tp.topic, partition = tp.partition, error = %e, "fetched batches do not decode");
            self.drop_buffered(&tp);
            let until = self.now() + millis(self.settings.retry_backoff);
            self.fetcher.partition_backoff_until.insert(tp, until);
            self.fetcher.needs_metadata = true;
        }
    }

    /// Waits up to `wait` for a Fetch answer (handled at once), a broker's backoff to end, or
    /// the group to need the application thread.
    pub(super) async fn wait_for_fetches(&mut self, wait: Duration) {
        let now = self.now();
        let backoff_ends = self
            .fetcher
            .backoff_until
            .values()
            .chain(self.fetcher.partition_backoff_until.values())
            .filter(|t| **t > now)
            .min()
            .map(|t| Duration::from_millis(t - now));
        let wait = backoff_ends.map_or(wait, |b| b.min(wait));
        let fetcher = &mut self.fetcher;
        let landed = tokio::select! {
            Some(joined) = fetcher.in_flight.join_next_with_id(), if !fetcher.in_flight.is_empty() => Some(joined),
            _ = tokio::time::sleep(wait) => None,
            _ = self.wake_app.notified() => None,
        };
        if let Some(joined) = landed {
            self.on_landed(joined);
        }
    }

    /// Sends a Fetch to every broker the plan picks.
    fn send_fetches(&mut self) {
        let md = self.client.metadata();
        let now = self.now();
        self.fetcher
            .partition_backoff_until
            .retain(|_, until| *until > now);
        if self.no_leader_fetchable(&md, now) {
            // What the pass below would find, at twice the cost of this check in tests.
            debug_assert!({
                let p = self.plan_fetches(&md, now);
                p.fetches.is_empty() && !p.leaderless
            });
            return;
        }
        let Planned {
            fetches: planned,
            leaderless,
        } = self.plan_fetches(&md, now);
        if leaderless {
            self.fetcher.needs_metadata = true;
        }
        for p in planned {
            let mut targets = Vec::with_capacity(p.partitions.len());
            let mut tokens = Vec::with_capacity(p.partitions.len());
            for f in p.partitions {
                tokens.push(f.token);
                targets.push(FetchTarget {
                    tp: f.tp,
                    topic_id: f.topic_id,
                    offset: f.offset,
                    current_leader_epoch: f.leader_epoch,
                });
            }
            let mut limits = self.settings.limits;
            limits.max_bytes = i32::try_from(p.max_bytes).unwrap_or(i32::MAX);
            let session = self.fetcher.sessions.remove(&p.broker).unwrap_or_default();
            tracing::trace!(
                broker = p.broker,
                partitions = targets.len(),
                max_bytes = limits.max_bytes,
                "sending fetch"
            );
            let partitions: Vec<TopicPartition> = targets.iter().map(|t| t.tp.clone()).collect();
            let task = fetch_task(
                self.client.clone(),
                p.broker,
                session,
                targets,
                tokens,
                TaskSettings {
                    rack: self.rack.clone(),
                    limits,
                    check_crcs: self.settings.check_crcs,
                    isolation: self.settings.isolation_level,
                },
            );
            let handle = self.fetcher.in_flight.spawn(task);
            self.fetcher
                .busy
                .insert(p.broker, (handle.id(), partitions));
            self.fetcher.sent += 1;
        }
    }

    /// Whether no Fetch can be planned now because every assigned partition has a known leader
    /// and none of those leaders may get a Fetch (one in flight, backing off, or enough
    /// buffered): checked per broker, not per partition, so that a `poll` while the Fetches
    /// are out does not visit every assigned partition.
    fn no_leader_fetchable(&mut self, md: &Arc<ClusterMetadata>, now: u64) -> bool {
        let fresh = self
            .fetcher
            .leaders
            .as_ref()
            .is_some_and(|c| Arc::ptr_eq(&c.metadata, md) && c.assigned == self.assigned.len());
        if !fresh {
            let mut topic_md: Option<&crate::metadata::TopicMetadata> = None;
            let leaders = Leaders::of(self.assigned.keys().map(|tp| {
                if topic_md.is_none_or(|t| t.name != tp.topic) {
                    topic_md = md.topic(&tp.topic);
                }
                topic_md.and_then(|t| t.partition(tp.partition).and_then(|p| p.leader))
            }));
            self.fetcher.leaders = Some(LeaderCache {
                metadata: Arc::clone(md),
                assigned: self.assigned.len(),
                leaders,
            });
        }
        let fetcher = &self.fetcher;
        let limits = self.settings.byte_limits;
        fetcher.leaders.as_ref().is_some_and(|c| {
            c.leaders
                .none_fetchable(|b| fetcher.load(b, now, limits), limits)
        })
    }

    /// The Fetches to send now: one pass over the assigned partitions.
    fn plan_fetches(&self, md: &ClusterMetadata, now: u64) -> Planned {
        let fetcher = &self.fetcher;
        let limits = self.settings.byte_limits;
        let rc = self.settings.isolation_level == IsolationLevel::ReadCommitted;
        let load = |b: i32| fetcher.load(b, now, limits);
        // This runs up to twice per `poll` over every assigned partition: each broker's load
        // (three hash lookups) is worked out once per call, not once per partition.
        let mut loads: Vec<(i32, BrokerLoad)> = Vec::new();
        let mut load_of = |b: i32| match loads.iter().find(|(id, _)| *id == b) {
            Some((_, l)) => *l,
            None => {
                let l = load(b);
                loads.push((b, l));
                l
            }
        };
        // The topic of the previous partition (the map is in topic order).
        let mut topic_md: Option<&crate::metadata::TopicMetadata> = None;
        let mut candidates = Vec::new();
        let mut leaderless = false;
        // Partitions in the Fetch in flight to another broker (after a leader change).
        let mut in_flight: Option<HashSet<&TopicPartition>> = None;
        // Brokers with a partition still behind its high watermark but not fetchable now
        // (enough of it buffered).
        let mut waiting_on: HashSet<i32> = HashSet::new();
        for (tp, s) in &self.assigned {
            let (Some(position), false, false) = (s.position, s.paused, s.reset) else {
                continue;
            };
            if topic_md.is_none_or(|t| t.name != tp.topic) {
                topic_md = md.topic(&tp.topic);
            }
            let Some((topic_id, leader, epoch)) = leader_of(topic_md, tp.partition) else {
                leaderless = true;
                continue;
            };
            // Cheap checks first: this runs at every poll, mostly while the leader is busy.
            if !prefetch::may_fetch_from(load_of(leader), limits) {
                continue;
            }
            let in_flight = in_flight.get_or_insert_with(|| {
                fetcher.busy.values().flat_map(|(_, parts)| parts).collect()
            });
            if in_flight.contains(tp) || fetcher.partition_backoff_until.contains_key(tp) {
                continue;
            }
            let c = Fetchable {
                tp: tp.clone(),
                topic_id,
                leader,
                leader_epoch: epoch,
                offset: fetcher.buffer.end(tp).unwrap_or(position),
                buffered: fetcher.buffer.partition_bytes(tp),
                token: s.token,
            };
            if c.buffered >= limits.partition_max
                && !prefetch::caught_up(&c, fetcher.readable_ends(rc).get(tp).copied())
            {
                waiting_on.insert(leader);
            }
            candidates.push(c);
        }
        let mut fetches = prefetch::plan(candidates, load, limits);
        hold_back_caught_up(&mut fetches, &waiting_on, fetcher.readable_ends(rc));
        Planned {
            fetches,
            leaderless,
        }
    }

    fn on_landed(&mut self, joined: std::result::Result<(Id, Landed), JoinError>) {
        let l = match joined {
            Ok((_, l)) => l,
            Err(e) => {
                // The task panicked or was cancelled: its session is gone; start over.
                let id = e.id();
                self.fetcher.busy.retain(|_, (task, _)| *task != id);
                tracing::warn!(error = %e, "fetch task ended without an answer");
                return;
            }
        };
        self.fetcher.busy.remove(&l.broker);
        self.fetcher.sessions.insert(l.broker, l.session);
        let parts = match l.outcome {
            Ok(Ok(parts)) => parts,
            Ok(Err(e)) => {
                tracing::debug!(broker = l.broker, error = %e, "fetch refused");
                self.back_off(l.broker);
                return;
            }
            Err(e) => {
                tracing::debug!(broker = l.broker, error = %e, "fetch failed");
                self.back_off(l.broker);
                return;
            }
        };
        self.fetcher.backoff_until.remove(&l.broker);
        if let Some(first_byte) = l.first_byte {
            self.adapt_window(
                l.broker,
                l.sent_at,
                Answered {
                    asked: l.asked,
                    bytes: parts
                        .iter()
                        .filter_map(|(_, r)| r.as_ref().ok())
                        .map(|f| f.raw.bytes())
                        .sum(),
                    round_trip: first_byte.saturating_duration_since(l.sent_at),
                    since_previous: Duration::ZERO,
                },
            );
        }
        for (tp, result) in parts {
            let Some(i) = l.targets.iter().position(|t| t.tp == tp) else {
                continue;
            };
            let (asked, token) = (l.targets[i].offset, l.tokens[i]);
            let now = self.assigned.get(&tp).map(|s| Now {
                token: s.token,
                paused: s.paused,
                position: s.position,
                buffered_end: self.fetcher.buffer.end(&tp),
            });
            if !prefetch::is_current(token, asked, now) {
                tracing::trace!(topic = %tp.topic, partition = tp.partition, offset = asked, "stale fetch answer dropped");
                self.fetcher.stale += 1;
                continue;
            }
            match result {
                Ok(f) => self.buffer_answer(l.broker, tp, f, asked),
                Err(e) => self.on_partition_error(l.broker, tp, &e, asked),
            }
        }
    }

    /// Buffers a current partition answer's records (kept undecoded when the task did not
    /// decode them), and notes its high watermark (and in read_committed its last stable
    /// offset, where such answers end).
    fn buffer_answer(&mut self, broker: i32, tp: TopicPartition, f: Answer, asked: i64) {
        self.fetcher
            .high_watermarks
            .insert(tp.clone(), f.raw.high_watermark);
        if self.settings.isolation_level == IsolationLevel::ReadCommitted {
            let lso = f.raw.last_stable_offset;
            let end = if lso >= 0 { lso } else { f.raw.high_watermark };
            self.fetcher.last_stable_offsets.insert(tp.clone(), end);
        }
        let Some(next_offset) = f.raw.next_offset.filter(|n| *n > asked) else {
            // Nothing complete at or after the offset yet.
            return;
        };
        let bytes = f.raw.bytes();
        let (records, undecoded) = match f.decoded {
            Some(records) => (records, None),
            None => (Default::default(), Some((f.raw.batches, asked))),
        };
        self.fetcher.buffer.push(Chunk {
            tp,
            broker,
            records,
            undecoded,
            next_offset,
            bytes,
        });
    }

    /// A current partition answer that is an error: out of range resets the position (per
    /// `auto.offset.reset`); anything else backs the partition off while metadata is refreshed.
    fn on_partition_error(&mut self, broker: i32, tp: TopicPartition, e: &KafkaError, asked: i64) {
        if e.code == KafkaCode::OFFSET_OUT_OF_RANGE {
            tracing::info!(topic = %tp.topic, partition = tp.partition, offset = asked, "offset out of range: applying auto.offset.reset");
            self.drop_buffered(&tp);
            if let Some(s) = self.assigned.get_mut(&tp) {
                s.position = None;
                s.reset = true;
            }
            return;
        }
        tracing::debug!(topic = %tp.topic, partition = tp.partition, broker, error = %e, "fetch error");
        let until = self.now() + millis(self.settings.retry_backoff);
        self.fetcher.partition_backoff_until.insert(tp, until);
        self.fetcher.needs_metadata = true;
    }

    /// Adapts a broker's window to an answer that landed now, from a Fetch sent at `sent_at`
    /// (`answered.since_previous` is worked out here).
    fn adapt_window(&mut self, broker: i32, sent_at: tokio::time::Instant, mut answered: Answered) {
        let now = tokio::time::Instant::now();
        let limits = self.settings.byte_limits;
        let windows = &mut self.fetcher.windows;
        let i = match windows.iter().position(|(b, ..)| *b == broker) {
            Some(i) => i,
            None => {
                windows.push((broker, FetchWindow::new(limits), sent_at));
                windows.len() - 1
            }
        };
        let (_, window, previous) = &mut windows[i];
        answered.since_previous = now.saturating_duration_since(*previous);
        *previous = now;
        window.on_answer(answered, limits);
        tracing::trace!(
            broker,
            bytes = answered.bytes,
            round_trip_us = answered.round_trip.as_micros(),
            window = window.bytes(limits),
            "fetch answer landed"
        );
    }

    fn back_off(&mut self, broker: i32) {
        let until = self.now() + millis(self.settings.retry_backoff);
        self.fetcher.backoff_until.insert(broker, until);
        self.fetcher.needs_metadata = true;
    }
}

/// The consumer's settings a Fetch task uses.
struct TaskSettings {
    rack: Option<String>,
    limits: fetch::FetchLimits,
    /// `check.crcs`, for the decoding done in the task.
    check_crcs: bool,
    /// `isolation.level`: sent in the request, and read_committed drops the aborted
    /// transactions' batches as the answer is split.
    isolation: IsolationLevel,
}

/// One Fetch to `broker` in its session; splits the answer by partition here, and decodes the
/// record batches too on a multi-thread runtime (see [`Answer`]).
async fn fetch_task(
    client: Client,
    broker: i32,
    mut session: FetchSession,
    targets: Vec<FetchTarget>,
    tokens: Vec<u64>,
    settings: TaskSettings,
) -> Landed {
    let TaskSettings {
        rack,
        limits,
        check_crcs,
        isolation,
    } = settings;
    let sent_at = tokio::time::Instant::now();
    let sent = client
        .send_timed::<FetchRequest, _>(&Target::Broker(broker), |v| {
            let mut req = fetch::fetch_request(&targets, limits, rack.as_deref(), isolation, v)?;
            session.prepare(&mut req, v);
            Ok(req)
        })
        .await;
    let first_byte = match &sent {
        Ok((resp, first_byte)) => {
            session.on_response(resp);
            Some(*first_byte)
        }
        Err(_) => {
            session.on_failure();
            None
        }
    };
    // On a multi-thread runtime this task runs beside the application: decode here. On a
    // current-thread one it would run before `poll` gets the answer and can send the next
    // Fetch: leave the decoding to `poll`, after that Fetch is out.
    let decode_here = tokio::runtime::Handle::current().runtime_flavor()
        != tokio::runtime::RuntimeFlavor::CurrentThread;
    let outcome = sent.map(|(resp, _)| {
        fetch::parse_fetch_raw(resp, &targets, isolation).map(|parts| {
            parts
                .into_iter()
                .map(|(tp, result)| {
                    let answer = result.and_then(|raw| {
                        if !decode_here {
                            return Ok(Answer { raw, decoded: None });
                        }
                        let asked = targets.iter().find(|t| t.tp == tp).map_or(0, |t| t.offset);
                        let records =
                            fetch::decode_records(&tp, raw.batches.clone(), asked, check_crcs)
                                .map_err(|reason| fetch::corrupt(&tp, reason))?
                                .0;
                        Ok(Answer {
                            raw,
                            decoded: Some(records),
                        })
                    });
                    (tp, answer)
                })
                .collect()
        })
    });
    Landed {
        broker,
        session,
        asked: usize::try_from(limits.max_bytes).unwrap_or(0),
        sent_at,
        first_byte,
        targets,
        tokens,
        outcome,
    }
}

/// A partition's topic id, leader and leader epoch, when it has a leader.
fn leader_of(
    topic: Option<&crate::metadata::TopicMetadata>,
    partition: i32,
) -> Option<(uuid::Uuid, i32, i32)> {
    topic.and_then(|t| {
        t.partition(partition)
            .and_then(|p| p.leader.map(|l| (t.topic_id, l, p.leader_epoch)))
    })
}

/// Drops the Fetches to a broker in `waiting_on` that name only partitions already read to
/// their high watermark (last stable offset in read_committed). The broker would park such a Fetch for `fetch.max.wait.ms`, holding
/// back a partition of the same broker that still has data to read and becomes fetchable as
/// soon as its buffer is used up: wait for that one and fetch them together.
fn hold_back_caught_up(
    fetches: &mut Vec<PlannedFetch>,
    waiting_on: &HashSet<i32>,
    readable_ends: &HashMap<TopicPartition, i64>,
) {
    fetches.retain(|p| {
        !waiting_on.contains(&p.broker)
            || !p
                .partitions
                .iter()
                .all(|f| prefetch::caught_up(f, readable_ends.get(&f.tp).copied()))
    });
}
