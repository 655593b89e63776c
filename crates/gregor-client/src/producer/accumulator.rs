//! The producer's functional core: per-partition batches, `linger.ms` / `batch.size`, sequence
//! numbers, in-flight bookkeeping, retries in order and delivery timeouts.
//!
//! The shell appends records, asks which batches to send (`drain`), reports each batch's
//! outcome (`complete`) and sleeps until `next_wakeup`. Time is the `now` it passes in
//! (milliseconds). `T` is the shell's per-record reply handle, handed back with the record's
//! result.
//!
//! Ordering with idempotence: sequences are assigned when a batch is first sent, in partition
//! order. A batch that fails retriably goes back to the head of its partition's queue, in
//! sequence order, and while any retried batch is queued the partition has at most one batch in
//! flight, so the broker sees sequences in order again. An `OUT_OF_ORDER_SEQUENCE_NUMBER` for a
//! batch that is not the next after the last acknowledged one only means an earlier batch
//! failed: it is retried. For the next expected batch, on `UNKNOWN_PRODUCER_ID`, or when a
//! numbered batch is given up (a hole in the sequence), the producer bumps its epoch once nothing
//! is in flight and renumbers every unacknowledged batch from 0 (KIP-360: the broker accepts
//! sequence 0 under a higher epoch of the same producer id, so no round trip is needed). On
//! `INVALID_PRODUCER_EPOCH` (another instance has a higher epoch) it takes a new producer id.

use std::collections::{BTreeMap, VecDeque};

use kafka_protocol::records::Compression as Codec;

use super::wire::{encode_batch_as, Appended, ProducerIdentity, RecordData, BATCH_OVERHEAD};
use crate::error::{Error, KafkaCode, KafkaError};
use crate::types::TopicPartition;

const DUPLICATE_SEQUENCE_NUMBER: KafkaCode = KafkaCode(46);
const OUT_OF_ORDER_SEQUENCE_NUMBER: KafkaCode = KafkaCode(45);
const INVALID_PRODUCER_EPOCH: KafkaCode = KafkaCode(47);
const UNKNOWN_PRODUCER_ID: KafkaCode = KafkaCode(59);

/// Where a record ended up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordMetadata {
    pub topic: String,
    pub partition: i32,
    /// -1 when the broker reported the batch as a duplicate of one it already has without
    /// saying where.
    pub offset: i64,
    /// The log-append time when the topic uses it, else the record's create time.
    pub timestamp: i64,
}

/// The core's settings (from `ProducerConfig`).
#[derive(Debug, Clone)]
pub struct AccumulatorConfig {
    pub batch_size: usize,
    pub linger_ms: u64,
    pub max_in_flight: usize,
    pub retries: u32,
    pub retry_backoff_ms: u64,
    pub delivery_timeout_ms: u64,
    pub idempotent: bool,
    pub compression: Codec,
    /// Batches carry the transactional attribute (a producer with `transactional.id`).
    pub transactional: bool,
}

#[derive(Debug)]
struct Batch<T> {
    id: u64,
    records: Vec<RecordData>,
    replies: Vec<T>,
    bytes: usize,
    created_ms: u64,
    /// No more records go in (full, or sent once).
    closed: bool,
    base_sequence: Option<i32>,
    attempts: u32,
    retry_at_ms: u64,
}

#[derive(Debug)]
struct PartitionState<T> {
    /// Unsent batches: retried ones first (in sequence order), the open one last.
    queue: VecDeque<Batch<T>>,
    in_flight: Vec<Batch<T>>,
    next_sequence: i32,
    last_acked: Option<i32>,
}

impl<T> Default for PartitionState<T> {
    fn default() -> Self {
        PartitionState {
            queue: VecDeque::new(),
            in_flight: Vec::new(),
            next_sequence: 0,
            last_acked: None,
        }
    }
}

impl<T> PartitionState<T> {
    fn retrying(&self) -> bool {
        self.queue.iter().any(|b| b.attempts > 0)
    }
}

/// A batch to send, encoded.
#[derive(Debug, Clone)]
pub struct Outgoing {
    pub batch_id: u64,
    pub tp: TopicPartition,
    pub records: bytes::Bytes,
}

/// What `drain` produced.
#[derive(Debug, Default)]
pub struct Drained<T> {
    pub sends: Vec<Outgoing>,
    /// Partitions whose open batch was closed (for the sticky partitioner).
    pub closed: Vec<TopicPartition>,
    /// Records that failed before being sent (encoding).
    pub failed: Vec<(T, Error)>,
}

/// How a sent batch fared.
#[derive(Debug, Clone)]
pub enum Outcome {
    Appended(Appended),
    Failed(KafkaError),
    /// The broker refused the batch for some of its records (KIP-467): their indexes in the
    /// batch and the broker's message for each. Nothing of the batch was written.
    RecordsRejected(KafkaError, Vec<(i32, Option<String>)>),
    /// The request never got an answer (connection lost, timeout).
    NoResponse(String),
}

/// How the producer must renew its identity before sending numbered batches again. Ordered:
/// a new producer id covers what an epoch bump would.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum IdentityReset {
    /// Same producer id, epoch + 1, sequences from 0 (KIP-360).
    BumpEpoch,
    /// A new producer id from InitProducerId.
    NewProducerId,
}

/// What `complete` produced.
#[derive(Debug)]
pub struct Completed<T> {
    pub delivered: Vec<(T, Result<RecordMetadata, Error>)>,
    /// Leadership changed: refresh metadata before sending again.
    pub refresh_metadata: bool,
    /// The broker lost track of this producer's sequence, or refused its identity.
    pub reset: Option<IdentityReset>,
}

impl<T> Default for Completed<T> {
    fn default() -> Self {
        Completed {
            delivered: Vec::new(),
            refresh_metadata: false,
            reset: None,
        }
    }
}

/// Per-partition batches of one producer.
#[derive(Debug)]
pub struct Accumulator<T> {
    config: AccumulatorConfig,
    partitions: BTreeMap<TopicPartition, PartitionState<T>>,
    next_batch_id: u64,
}

impl<T> Accumulator<T> {
    pub fn new(config: AccumulatorConfig) -> Accumulator<T> {
        Accumulator {
            config,
            partitions: BTreeMap::new(),
            next_batch_id: 0,
        }
    }

    /// Adds a record to its partition's open batch, opening a new one when it would exceed
    /// `batch.size`. Returns whether an open batch was closed for being full.
    pub fn append(&mut self, tp: &TopicPartition, record: RecordData, reply: T, now: u64) -> bool {
        let size = record.estimated_size();
        let batch_size = self.config.batch_size;
        let state = self.partitions.entry(tp.clone()).or_default();
        let mut closed = false;
        if let Some(last) = state.queue.back_mut() {
            if !last.closed {
                if last.records.is_empty() || last.bytes + size <= batch_size {
                    last.bytes += size;
                    last.records.push(record);
                    last.replies.push(reply);
                    if last.bytes >= batch_size {
                        last.closed = true;
                        closed = true;
                    }
                    return closed;
                }
                last.closed = true;
                closed = true;
            }
        }
        self.next_batch_id += 1;
        state.queue.push_back(Batch {
            id: self.next_batch_id,
            bytes: BATCH_OVERHEAD + size,
            records: vec![record],
            replies: vec![reply],
            created_ms: now,
            closed: BATCH_OVERHEAD + size >= batch_size,
            base_sequence: None,
            attempts: 0,
            retry_at_ms: 0,
        });
        closed
    }

    /// Records accepted and not yet answered.
    pub fn pending_records(&self) -> usize {
        self.partitions
            .values()
            .map(|s| {
                s.queue.iter().map(|b| b.records.len()).sum::<usize>()
                    + s.in_flight.iter().map(|b| b.records.len()).sum::<usize>()
            })
            .sum()
    }

    pub fn is_empty(&self) -> bool {
        self.pending_records() == 0
    }

    pub fn in_flight_batches(&self) -> usize {
        self.partitions.values().map(|s| s.in_flight.len()).sum()
    }

    /// The earliest time something may become sendable or expire; `None` when nothing waits.
    pub fn next_wakeup(&self) -> Option<u64> {
        let mut at: Option<u64> = None;
        let mut consider = |t: u64| at = Some(at.map_or(t, |a| a.min(t)));
        for s in self.partitions.values() {
            for b in &s.queue {
                consider(b.created_ms + self.config.delivery_timeout_ms);
                if b.attempts > 0 {
                    consider(b.retry_at_ms);
                } else if !b.closed {
                    consider(b.created_ms + self.config.linger_ms);
                } else {
                    consider(b.created_ms);
                }
            }
        }
        at
    }

    /// Batches ready to send: closed, lingered long enough, flushing, or due for retry; within
    /// the in-flight limit (one while retrying) and with a known leader. Assigns sequence
    /// numbers to first attempts when `identity` is set. Records are encoded here.
    pub fn drain(
        &mut self,
        now: u64,
        flushing: bool,
        identity: Option<ProducerIdentity>,
        mut has_leader: impl FnMut(&TopicPartition) -> bool,
    ) -> Drained<T> {
        let mut out = Drained {
            sends: Vec::new(),
            closed: Vec::new(),
            failed: Vec::new(),
        };
        let config = self.config.clone();
        for (tp, state) in self.partitions.iter_mut() {
            if !has_leader(tp) {
                continue;
            }
            loop {
                let limit = if state.retrying() {
                    1
                } else {
                    config.max_in_flight
                };
                if state.in_flight.len() >= limit {
                    break;
                }
                let Some(front) = state.queue.front() else {
                    break;
                };
                let ready = if front.attempts > 0 {
                    now >= front.retry_at_ms
                } else {
                    front.closed || flushing || now >= front.created_ms + config.linger_ms
                };
                if !ready {
                    break;
                }
                let mut batch = state.queue.pop_front().expect("front exists");
                if !batch.closed {
                    batch.closed = true;
                    out.closed.push(tp.clone());
                }
                let identity = if config.idempotent { identity } else { None };
                if identity.is_some() && batch.base_sequence.is_none() {
                    batch.base_sequence = Some(state.next_sequence);
                    state.next_sequence =
                        state.next_sequence.wrapping_add(batch.records.len() as i32) & i32::MAX;
                }
                match encode_batch_as(
                    &batch.records,
                    identity,
                    batch.base_sequence.unwrap_or(-1),
                    config.compression,
                    config.transactional,
                ) {
                    Ok(bytes) => {
                        batch.attempts += 1;
                        out.sends.push(Outgoing {
                            batch_id: batch.id,
                            tp: tp.clone(),
                            records: bytes,
                        });
                        state.in_flight.push(batch);
                    }
                    Err(e) => {
                        let text = e.to_string();
                        for reply in batch.replies {
                            out.failed
                                .push((reply, Error::InvalidArgument(text.clone())));
                        }
                    }
                }
            }
        }
        out
    }

    /// Applies the outcome of a sent batch.
    pub fn complete(
        &mut self,
        tp: &TopicPartition,
        batch_id: u64,
        outcome: Outcome,
        now: u64,
    ) -> Completed<T> {
        let mut done = Completed::default();
        let config = self.config.clone();
        let Some(state) = self.partitions.get_mut(tp) else {
            return done;
        };
        let Some(pos) = state.in_flight.iter().position(|b| b.id == batch_id) else {
            return done;
        };
        let batch = state.in_flight.remove(pos);
        let mut rejected_records = Vec::new();
        let error = match outcome {
            Outcome::Appended(a) => {
                deliver_ok(tp, batch, a, state, &mut done);
                return done;
            }
            Outcome::Failed(e) if e.code == DUPLICATE_SEQUENCE_NUMBER => {
                let a = Appended {
                    base_offset: -1,
                    log_append_time: -1,
                };
                deliver_ok(tp, batch, a, state, &mut done);
                return done;
            }
            Outcome::Failed(e) => e,
            Outcome::RecordsRejected(e, records) => {
                rejected_records = records;
                e
            }
            Outcome::NoResponse(reason) => {
                KafkaError::new(KafkaCode::NETWORK_EXCEPTION, Some(reason))
            }
        };
        let next_expected = state.last_acked.map_or(0, |s| s.wrapping_add(1) & i32::MAX);
        let in_sequence = batch.base_sequence == Some(next_expected);
        let retry = retriable(&config, error.code, in_sequence, &mut done);
        let expired = now >= batch.created_ms + config.delivery_timeout_ms;
        if retry && batch.attempts <= config.retries && !expired {
            requeue(state, batch, now + config.retry_backoff_ms);
            return done;
        }
        if config.idempotent && batch.base_sequence.is_some() {
            // A failed batch leaves a hole in the sequence: start a fresh one.
            done.reset = done.reset.max(Some(IdentityReset::BumpEpoch));
        }
        let what = if expired && retry {
            format!("{tp}: delivery.timeout.ms expired (last error: {error})")
        } else {
            format!("producing to {tp}")
        };
        for (i, reply) in batch.replies.into_iter().enumerate() {
            let e = record_error(&error, &rejected_records, i);
            done.delivered
                .push((reply, Err(Error::kafka(what.clone(), e))));
        }
        done
    }

    /// Fails queued batches older than `delivery.timeout.ms`. Returns their records and whether
    /// the epoch must be bumped (a batch that had been numbered is given up: a sequence hole).
    pub fn expire(&mut self, now: u64) -> (Vec<(T, Error)>, Option<IdentityReset>) {
        let mut failed = Vec::new();
        let mut reset = None;
        let timeout = self.config.delivery_timeout_ms;
        for (tp, state) in self.partitions.iter_mut() {
            let (keep, gone): (Vec<Batch<T>>, Vec<Batch<T>>) = state
                .queue
                .drain(..)
                .partition(|b| now < b.created_ms + timeout);
            state.queue = keep.into();
            for b in gone {
                if b.base_sequence.is_some() && self.config.idempotent {
                    reset = Some(IdentityReset::BumpEpoch);
                }
                let n = b.records.len();
                for reply in b.replies {
                    failed.push((
                        reply,
                        Error::Timeout {
                            what: format!("delivering {n} record(s) to {tp}"),
                            after_ms: timeout,
                        },
                    ));
                }
            }
        }
        (failed, reset)
    }

    /// A new producer identity: every partition's sequence restarts at 0 and unacknowledged
    /// batches are renumbered when next sent. Call with nothing in flight.
    pub fn reset_sequences(&mut self) {
        debug_assert_eq!(
            self.in_flight_batches(),
            0,
            "renumbering with batches in flight"
        );
        for state in self.partitions.values_mut() {
            state.next_sequence = 0;
            state.last_acked = None;
            for b in &mut state.queue {
                b.base_sequence = None;
            }
            let mut q: Vec<Batch<T>> = state.queue.drain(..).collect();
            // Keep the order the records were appended in (batch ids grow with it).
            q.sort_by_key(|b| b.id);
            state.queue = q.into();
        }
    }

    /// Fails every batch not in flight (a transaction aborting: Kafka's producer never sends
    /// them). Also says whether one of them already had a sequence number (it had been sent
    /// and waited for a retry), which leaves a hole in the partition's sequence.
    pub fn abort_undrained(&mut self, error: impl Fn() -> Error) -> (Vec<(T, Error)>, bool) {
        let mut failed = Vec::new();
        let mut numbered = false;
        for state in self.partitions.values_mut() {
            for b in state.queue.drain(..) {
                numbered |= b.base_sequence.is_some();
                for reply in b.replies {
                    failed.push((reply, error()));
                }
            }
        }
        (failed, numbered)
    }

    /// Fails every unsent batch (closing without waiting).
    pub fn abort_all(&mut self, reason: &str) -> Vec<(T, Error)> {
        let mut failed = Vec::new();
        for state in self.partitions.values_mut() {
            for b in state.queue.drain(..).chain(state.in_flight.drain(..)) {
                for reply in b.replies {
                    failed.push((reply, Error::InvalidArgument(reason.to_string())));
                }
            }
        }
        failed
    }
}

/// Whether a batch that failed with `code` is sent again, noting in `done` the identity reset
/// or metadata refresh that must come first. `in_sequence`: the batch is numbered right after
/// the partition's last acknowledged one.
fn retriable<T>(
    config: &AccumulatorConfig,
    code: KafkaCode,
    in_sequence: bool,
    done: &mut Completed<T>,
) -> bool {
    if config.idempotent && code == INVALID_PRODUCER_EPOCH {
        // Fenced by a higher epoch of this producer id: only a new id gets through.
        done.reset = Some(IdentityReset::NewProducerId);
        true
    } else if config.idempotent
        && (code == UNKNOWN_PRODUCER_ID || (code == OUT_OF_ORDER_SEQUENCE_NUMBER && in_sequence))
    {
        // The broker does not know where this producer's sequence stands: renumber
        // under the next epoch and send again.
        done.reset = Some(IdentityReset::BumpEpoch);
        true
    } else if code == OUT_OF_ORDER_SEQUENCE_NUMBER && config.idempotent {
        // An earlier batch is missing; it is being retried too.
        true
    } else if code.is_retriable() || code == KafkaCode::NETWORK_EXCEPTION {
        done.refresh_metadata |= matches!(
            crate::retry::action_for_code(code),
            crate::retry::RetryAction::RefreshMetadata
        ) || code == KafkaCode::NETWORK_EXCEPTION
            || code == KafkaCode::UNKNOWN_TOPIC_OR_PARTITION;
        true
    } else {
        false
    }
}

/// The error of record `index` of a failed batch: its own, when the broker named the records
/// it refused (KIP-467); otherwise the batch's. A record the broker did not name was refused
/// only for its batch's sake (librdkafka's INVALID_DIFFERENT_RECORD), and says so.
fn record_error(batch: &KafkaError, named: &[(i32, Option<String>)], index: usize) -> KafkaError {
    if named.is_empty() {
        return batch.clone();
    }
    match named
        .iter()
        .find(|(i, _)| usize::try_from(*i).ok() == Some(index))
    {
        Some((_, message)) => KafkaError::new(
            batch.code,
            message.clone().or_else(|| batch.message.clone()),
        ),
        None => KafkaError::new(
            batch.code,
            Some("not written: another record of its batch was invalid".to_string()),
        ),
    }
}

fn deliver_ok<T>(
    tp: &TopicPartition,
    batch: Batch<T>,
    a: Appended,
    state: &mut PartitionState<T>,
    done: &mut Completed<T>,
) {
    if let Some(seq) = batch.base_sequence {
        let last = seq.wrapping_add(batch.records.len() as i32 - 1) & i32::MAX;
        state.last_acked = Some(match state.last_acked {
            // Responses can complete out of order only for failed batches; keep the highest.
            Some(prev) if prev > last => prev,
            _ => last,
        });
    }
    for (i, (reply, rec)) in batch.replies.into_iter().zip(&batch.records).enumerate() {
        let offset = if a.base_offset >= 0 {
            a.base_offset + i as i64
        } else {
            -1
        };
        let timestamp = if a.log_append_time >= 0 {
            a.log_append_time
        } else {
            rec.timestamp
        };
        done.delivered.push((
            reply,
            Ok(RecordMetadata {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset,
                timestamp,
            }),
        ));
    }
}

/// Puts a failed batch back at the head of the queue, among other retried batches by sequence
/// (by creation when unnumbered), ahead of never-sent ones.
fn requeue<T>(state: &mut PartitionState<T>, mut batch: Batch<T>, retry_at: u64) {
    batch.retry_at_ms = retry_at;
    let key = |b: &Batch<T>| (b.base_sequence.unwrap_or(i32::MAX), b.id);
    let pos = state
        .queue
        .iter()
        .position(|b| b.attempts == 0 || key(b) > key(&batch))
        .unwrap_or(state.queue.len());
    state.queue.insert(pos, batch);
    // Retried batches wait together so they go out in order.
    for b in state.queue.iter_mut().filter(|b| b.attempts > 0) {
        b.retry_at_ms = b.retry_at_ms.max(retry_at);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::records::RecordBatchDecoder;

    fn config() -> AccumulatorConfig {
        AccumulatorConfig {
            batch_size: 200,
            linger_ms: 10,
            max_in_flight: 5,
            retries: 100,
            retry_backoff_ms: 50,
            delivery_timeout_ms: 10_000,
            idempotent: true,
            compression: Codec::None,
            transactional: false,
        }
    }

    fn rec(n: usize) -> RecordData {
        RecordData {
            key: None,
            value: Some(Bytes::from(vec![b'x'; n])),
            headers: vec![],
            timestamp: 5,
        }
    }

    const ID: ProducerIdentity = ProducerIdentity {
        producer_id: 9,
        epoch: 0,
    };

    fn tp() -> TopicPartition {
        TopicPartition::new("t", 0)
    }

    fn seqs(sends: &[Outgoing]) -> Vec<i32> {
        sends
            .iter()
            .map(|o| {
                let mut b = o.records.clone();
                RecordBatchDecoder::decode(&mut b).unwrap().records[0].sequence
            })
            .collect()
    }

    fn failed(code: KafkaCode) -> Outcome {
        Outcome::Failed(KafkaError::new(code, None))
    }

    fn ok(offset: i64) -> Outcome {
        Outcome::Appended(Appended {
            base_offset: offset,
            log_append_time: -1,
        })
    }

    #[test]
    fn transactional_batches_are_marked_and_an_abort_fails_only_unsent_ones() {
        let mut acc = Accumulator::new(AccumulatorConfig {
            transactional: true,
            ..config()
        });
        acc.append(&tp(), rec(1), 1, 0);
        let d = acc.drain(0, true, Some(ID), |_| true);
        let mut bytes = d.sends[0].records.clone();
        let info = RecordBatchDecoder::decode_batch_info(&mut bytes).unwrap();
        assert!(info[0].transactional, "attribute bit 4 set");
        acc.append(&tp(), rec(1), 2, 1);
        let (dropped, numbered) =
            acc.abort_undrained(|| Error::InvalidArgument("aborted".to_string()));
        let replies: Vec<i32> = dropped.iter().map(|(r, _)| *r).collect();
        assert_eq!(
            replies,
            vec![2],
            "the batch in flight keeps waiting for its answer"
        );
        assert!(!numbered, "the dropped batch had no sequence yet");
        assert_eq!(acc.in_flight_batches(), 1);
        // A batch waiting for a retry was numbered: dropping it leaves a sequence hole.
        acc.complete(
            &tp(),
            d.sends[0].batch_id,
            failed(KafkaCode::REQUEST_TIMED_OUT),
            2,
        );
        let (dropped, numbered) = acc.abort_undrained(|| Error::InvalidArgument("x".into()));
        assert_eq!(dropped.len(), 1);
        assert!(numbered);
        assert!(acc.is_empty());
    }

    #[test]
    fn linger_and_batch_size_decide_when_a_batch_goes() {
        let mut acc = Accumulator::new(config());
        assert!(!acc.append(&tp(), rec(10), 1, 0));
        assert_eq!(acc.next_wakeup(), Some(10));
        assert!(acc.drain(9, false, Some(ID), |_| true).sends.is_empty());
        let d = acc.drain(10, false, Some(ID), |_| true);
        assert_eq!(d.sends.len(), 1);
        assert_eq!(d.closed, vec![tp()]);
        // A record that does not fit closes the open batch at once.
        acc.append(&tp(), rec(100), 2, 20);
        assert!(acc.append(&tp(), rec(100), 3, 20));
        let d = acc.drain(20, false, Some(ID), |_| true);
        assert_eq!(d.sends.len(), 1, "only the full batch goes before linger");
        // Flushing sends the open one too.
        let d = acc.drain(21, true, Some(ID), |_| true);
        assert_eq!(d.sends.len(), 1);
        // No leader: nothing is sent.
        acc.append(&TopicPartition::new("u", 0), rec(1), 4, 30);
        assert!(acc.drain(100, true, Some(ID), |_| false).sends.is_empty());
    }

    #[test]
    fn sequences_follow_records_and_offsets_come_back_per_record() {
        let mut acc = Accumulator::new(config());
        for i in 0..3 {
            acc.append(&tp(), rec(1), i, 0);
        }
        let d = acc.drain(0, true, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![0]);
        acc.append(&tp(), rec(1), 3, 1);
        let d2 = acc.drain(1, true, Some(ID), |_| true);
        assert_eq!(seqs(&d2.sends), vec![3]);
        let done = acc.complete(&tp(), d.sends[0].batch_id, ok(100), 2);
        let offsets: Vec<(i32, i64)> = done
            .delivered
            .iter()
            .map(|(r, m)| (*r, m.as_ref().unwrap().offset))
            .collect();
        assert_eq!(offsets, vec![(0, 100), (1, 101), (2, 102)]);
        assert!(!acc.is_empty());
        acc.complete(&tp(), d2.sends[0].batch_id, ok(103), 2);
        assert!(acc.is_empty());
    }

    #[test]
    fn a_failed_batch_and_its_followers_are_resent_in_order_one_at_a_time() {
        let mut acc = Accumulator::new(config());
        let mut sent = Vec::new();
        for i in 0..3 {
            acc.append(&tp(), rec(1), i, 0);
            sent.extend(acc.drain(0, true, Some(ID), |_| true).sends);
        }
        assert_eq!(seqs(&sent), vec![0, 1, 2]);
        // Batch 0 is lost in transit, so the broker refuses 1 and 2 as out of order; the
        // answers arrive in any order.
        let c = acc.complete(
            &tp(),
            sent[2].batch_id,
            failed(OUT_OF_ORDER_SEQUENCE_NUMBER),
            1,
        );
        assert!(c.reset.is_none() && c.delivered.is_empty());
        acc.complete(
            &tp(),
            sent[0].batch_id,
            Outcome::NoResponse("gone".into()),
            1,
        );
        acc.complete(
            &tp(),
            sent[1].batch_id,
            failed(OUT_OF_ORDER_SEQUENCE_NUMBER),
            1,
        );
        // Nothing before the backoff.
        assert!(acc.drain(10, false, Some(ID), |_| true).sends.is_empty());
        let d = acc.drain(51, false, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![0], "one in flight while retrying");
        acc.complete(&tp(), d.sends[0].batch_id, ok(0), 52);
        let d = acc.drain(52, false, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![1]);
        acc.complete(&tp(), d.sends[0].batch_id, ok(1), 53);
        let d = acc.drain(53, false, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![2]);
    }

    #[test]
    fn duplicate_is_success_and_unknown_producer_renumbers() {
        let mut acc = Accumulator::new(config());
        acc.append(&tp(), rec(1), 0, 0);
        let d = acc.drain(0, true, Some(ID), |_| true);
        let c = acc.complete(
            &tp(),
            d.sends[0].batch_id,
            failed(DUPLICATE_SEQUENCE_NUMBER),
            1,
        );
        assert!(c.delivered[0].1.is_ok());
        acc.append(&tp(), rec(1), 1, 2);
        acc.append(&tp(), rec(300), 2, 2);
        let d = acc.drain(2, true, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![1, 2]);
        let c = acc.complete(&tp(), d.sends[0].batch_id, failed(UNKNOWN_PRODUCER_ID), 3);
        assert_eq!(c.reset, Some(IdentityReset::BumpEpoch));
        acc.complete(
            &tp(),
            d.sends[1].batch_id,
            failed(OUT_OF_ORDER_SEQUENCE_NUMBER),
            3,
        );
        acc.reset_sequences();
        let new_id = ProducerIdentity {
            producer_id: 9,
            epoch: 1,
        };
        let d = acc.drain(100, false, Some(new_id), |_| true);
        assert_eq!(seqs(&d.sends), vec![0]);
    }

    #[test]
    fn a_fenced_epoch_needs_a_new_producer_id_and_wins_over_a_bump() {
        let mut acc = Accumulator::new(config());
        acc.append(&tp(), rec(1), 0, 0);
        acc.append(&tp(), rec(300), 1, 0);
        let d = acc.drain(0, true, Some(ID), |_| true);
        assert_eq!(d.sends.len(), 2);
        let c = acc.complete(
            &tp(),
            d.sends[0].batch_id,
            failed(INVALID_PRODUCER_EPOCH),
            1,
        );
        assert_eq!(c.reset, Some(IdentityReset::NewProducerId));
        assert!(c.delivered.is_empty(), "retried under the new id");
        let c = acc.complete(&tp(), d.sends[1].batch_id, failed(UNKNOWN_PRODUCER_ID), 1);
        assert_eq!(c.reset, Some(IdentityReset::BumpEpoch));
        assert!(
            Some(IdentityReset::NewProducerId) > Some(IdentityReset::BumpEpoch),
            "the shell keeps the stronger reset"
        );
        acc.reset_sequences();
        let d = acc.drain(200, false, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![0], "renumbered from 0, one at a time");
        acc.complete(&tp(), d.sends[0].batch_id, ok(0), 201);
        let d = acc.drain(201, false, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![1]);
    }

    #[test]
    fn fatal_errors_fail_records_and_timeouts_expire_them() {
        let mut acc = Accumulator::new(config());
        acc.append(&tp(), rec(1), 0, 0);
        let d = acc.drain(0, true, Some(ID), |_| true);
        let c = acc.complete(&tp(), d.sends[0].batch_id, failed(KafkaCode(10)), 1);
        let err = c.delivered[0].1.as_ref().unwrap_err();
        assert_eq!(err.kafka_code(), Some(KafkaCode(10)));
        assert_eq!(
            c.reset,
            Some(IdentityReset::BumpEpoch),
            "a hole in the sequence needs a new epoch"
        );
        // A batch that never gets a leader expires.
        acc.append(&TopicPartition::new("u", 0), rec(1), 1, 0);
        assert!(acc.drain(5_000, true, Some(ID), |_| false).sends.is_empty());
        let (failed, reset) = acc.expire(10_000);
        assert_eq!(failed.len(), 1);
        assert_eq!(reset, None);
        assert!(matches!(failed[0].1, Error::Timeout { .. }));
        assert!(acc.is_empty());
    }

    #[test]
    fn records_the_broker_names_fail_with_its_message_and_the_others_say_why() {
        let mut acc = Accumulator::new(config());
        for i in 0..3 {
            acc.append(&tp(), rec(1), i, 0);
        }
        let d = acc.drain(0, true, Some(ID), |_| true);
        let invalid = KafkaCode(87); // INVALID_RECORD
        let outcome = Outcome::RecordsRejected(
            KafkaError::new(invalid, Some("one record is invalid".into())),
            vec![(1, Some("record 1 has no key".into()))],
        );
        let c = acc.complete(&tp(), d.sends[0].batch_id, outcome, 1);
        let errors: Vec<(i32, String)> = c
            .delivered
            .iter()
            .map(|(r, e)| (*r, e.as_ref().unwrap_err().to_string()))
            .collect();
        assert_eq!(errors.len(), 3, "not retried: {errors:?}");
        assert!(errors[1].1.contains("record 1 has no key"), "{errors:?}");
        for i in [0, 2] {
            assert!(
                errors[i].1.contains("another record of its batch"),
                "{errors:?}"
            );
            assert!(!errors[i].1.contains("no key"), "{errors:?}");
        }
        for (_, e) in &c.delivered {
            assert_eq!(e.as_ref().unwrap_err().kafka_code(), Some(invalid));
        }
    }

    #[test]
    fn retriable_errors_ask_for_metadata_and_retry_until_the_deadline() {
        let mut acc = Accumulator::new(config());
        acc.append(&tp(), rec(1), 0, 0);
        let d = acc.drain(0, true, Some(ID), |_| true);
        let c = acc.complete(
            &tp(),
            d.sends[0].batch_id,
            failed(KafkaCode::NOT_LEADER_OR_FOLLOWER),
            1,
        );
        assert!(c.refresh_metadata && c.delivered.is_empty());
        let d = acc.drain(100, false, Some(ID), |_| true);
        assert_eq!(seqs(&d.sends), vec![0], "same sequence on retry");
        let c = acc.complete(
            &tp(),
            d.sends[0].batch_id,
            failed(KafkaCode::NOT_LEADER_OR_FOLLOWER),
            10_001,
        );
        assert!(c.delivered[0].1.is_err(), "past delivery.timeout.ms");
    }
}
