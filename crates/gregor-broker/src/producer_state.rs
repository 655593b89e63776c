//! Idempotent and transactional producers: per partition, the last batches each producer id
//! wrote, so that a retried batch is answered with its original offsets instead of being
//! written twice, and a gap in sequence numbers is refused; and each producer's open
//! transaction, which the commit or abort marker its coordinator writes ends (Kafka's
//! ProducerStateManager).
//!
//! Pure bookkeeping: the partition feeds it batch headers before appending and after, with the
//! time of the append. State is bounded: a producer id that has not written for
//! `producer.id.expiration.ms` is forgotten (as in Kafka), and so is the least recently written
//! one when a partition holds [`MAX_PRODUCERS`] ids. Snapshots ([`ProducerStates::encode`]) let
//! a restart replay only the log written after them.

use std::collections::{BTreeMap, HashMap, VecDeque};

use gregor_log::batch::{crc32c_of, BatchHeader};
use gregor_log::txn::{AbortedTxn, CompletedTxn, ControlType, OpenTransactions};
use gregor_log::DurableToken;
use kafka_protocol::ResponseError;

/// Batches remembered per producer (Kafka keeps five, the most a producer has in flight).
pub const BATCHES_KEPT: usize = 5;

/// Producer ids kept per partition. Kafka bounds them only by expiry; a client that makes up
/// producer ids could otherwise grow a partition's state without limit.
pub const MAX_PRODUCERS: usize = 100_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
    /// When the write became (or becomes) durable; a retry is answered only after that.
    pub durable: DurableToken,
}

#[derive(Debug, Clone)]
struct ProducerEntry {
    epoch: i16,
    /// Time of the producer's last write to this partition (for expiry).
    last_write_ms: i64,
    batches: VecDeque<BatchMeta>,
    /// The epoch of the transaction coordinator whose marker came last (-1: none): a marker of
    /// an older, deposed coordinator is refused.
    coordinator_epoch: i32,
}

/// Outcome of checking a batch before appending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not idempotent, or the next in sequence: append it.
    Append,
    /// Already written: answer with these offsets (once durable).
    Duplicate(BatchMeta),
    /// Refused with this error.
    Reject(ResponseError),
    /// A client's transactional batch would open its producer's transaction here: the
    /// coordinator must verify it first (KIP-890).
    Unverified,
}

/// What DescribeProducers tells of one producer of a partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSummary {
    pub producer_id: i64,
    pub producer_epoch: i16,
    /// The last sequence written (-1: none, or only markers).
    pub last_sequence: i32,
    /// When it last wrote here, by the broker's clock.
    pub last_write_ms: i64,
    /// The epoch of the coordinator whose marker came last (-1: none).
    pub coordinator_epoch: i32,
    /// The first offset of its open transaction (-1: none).
    pub current_txn_start_offset: i64,
}

/// The producers of one partition.
#[derive(Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
    /// Each producer's open transaction, by its first offset (the last stable offset).
    txns: OpenTransactions,
    /// KIP-890: producers whose first transactional batch is being verified with their
    /// coordinator, and the guard each verification holds. A marker of the producer drops its
    /// guard, so a verification that raced the end of its transaction cannot open a new one.
    /// Kept in memory only: a restart makes the producer verify again. A BTreeMap: no hash
    /// keys drawn per partition (gregor-sim seeds them per thread).
    verifying: BTreeMap<i64, u64>,
    next_guard: u64,
}

fn last_seq(h: &BatchHeader) -> i32 {
    // Sequences wrap at i32::MAX.
    ((h.base_sequence as i64 + h.last_offset_delta as i64) % (i32::MAX as i64 + 1)) as i32
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerStates {
    /// Number of producer ids known (tests read it).
    #[cfg(test)]
    pub fn producer_count(&self) -> usize {
        self.producers.len()
    }

    /// Starts (or joins) the verification of `producer_id`'s transaction: the guard its batch
    /// must carry to [`ProducerStates::check_verified`] once the coordinator agrees.
    pub fn verification_guard(&mut self, producer_id: i64) -> u64 {
        let next = &mut self.next_guard;
        *self.verifying.entry(producer_id).or_insert_with(|| {
            *next += 1;
            *next
        })
    }

    /// [`ProducerStates::check`] for a client's transactional batch. One that would open its
    /// producer's transaction needs a verification: without a guard it is
    /// [`Check::Unverified`]; with one, the guard must be the producer's current one, which no
    /// marker ended since (else INVALID_TXN_STATE: a late retry of an ended transaction).
    ///
    /// A batch of a newer epoch than the producer's open transaction here is its next
    /// transaction (transaction version 2 bumps the epoch at each EndTxn) arriving before this
    /// partition has the last one's marker: joining the open transaction would end these
    /// records with that marker. It waits for the marker: NOT_ENOUGH_REPLICAS, which every
    /// producer retries.
    pub fn check_verified(&self, h: &BatchHeader, guard: Option<u64>) -> Check {
        let txn = h.is_transactional() && h.producer_id >= 0;
        let open = self.txns.open_since(h.producer_id).is_some();
        if txn && open && self.newer_epoch(h) {
            return Check::Reject(ResponseError::NotEnoughReplicas);
        }
        let opens = txn && !open;
        match guard {
            _ if !opens || (planted!(TxnFencedProduce) && self.older_epoch(h)) => self.check(h),
            None => Check::Unverified,
            Some(g) if self.verifying.get(&h.producer_id) == Some(&g) => self.check(h),
            Some(_) => Check::Reject(ResponseError::InvalidTxnState),
        }
    }

    /// Whether `h` is of a newer epoch than its producer's.
    fn newer_epoch(&self, h: &BatchHeader) -> bool {
        self.producers
            .get(&h.producer_id)
            .is_some_and(|p| h.producer_epoch > p.epoch)
    }

    /// Whether `h` is of an older epoch than its producer's (the planted `TxnFencedProduce`).
    fn older_epoch(&self, h: &BatchHeader) -> bool {
        self.producers
            .get(&h.producer_id)
            .is_some_and(|p| h.producer_epoch < p.epoch)
    }

    /// Checks one batch header (before offsets are assigned).
    pub fn check(&self, h: &BatchHeader) -> Check {
        if h.producer_id < 0 {
            return Check::Append;
        }
        let Some(p) = self.producers.get(&h.producer_id) else {
            // An unknown producer (new, or its state expired): accept it.
            return Check::Append;
        };
        if h.producer_epoch < p.epoch && !planted!(TxnFencedProduce) {
            return Check::Reject(ResponseError::InvalidProducerEpoch);
        }
        if !h.is_transactional() && self.txns.open_since(h.producer_id).is_some() {
            // A plain write while its transaction is open would be neither in it nor out.
            return Check::Reject(ResponseError::InvalidTxnState);
        }
        if h.producer_epoch > p.epoch {
            return if h.base_sequence == 0 {
                Check::Append
            } else {
                Check::Reject(ResponseError::OutOfOrderSequenceNumber)
            };
        }
        let last = last_seq(h);
        if let Some(b) = p
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last)
        {
            return Check::Duplicate(*b);
        }
        match p.batches.back() {
            Some(b) if next_seq(b.last_seq) != h.base_sequence => {
                Check::Reject(ResponseError::OutOfOrderSequenceNumber)
            }
            _ => Check::Append,
        }
    }

    /// Checks a batch a coordinator writes itself (a group coordinator's transactional offset
    /// commit), as Kafka checks a coordinator-origin append: an older producer epoch than the
    /// partition has seen is INVALID_PRODUCER_EPOCH (a fenced producer's commit), but the
    /// batch carries no sequence (-1), so there is none to check and no duplicate to find.
    pub fn check_coordinator(&self, h: &BatchHeader) -> Check {
        match self.producers.get(&h.producer_id) {
            Some(p) if h.producer_id >= 0 && h.producer_epoch < p.epoch => {
                Check::Reject(ResponseError::InvalidProducerEpoch)
            }
            _ => Check::Append,
        }
    }

    /// Checks a commit or abort marker of `producer_id` before it is appended: an older
    /// producer epoch than the partition has seen is INVALID_PRODUCER_EPOCH, an older
    /// coordinator epoch TRANSACTION_COORDINATOR_FENCED.
    pub fn check_marker(
        &self,
        producer_id: i64,
        producer_epoch: i16,
        coordinator_epoch: i32,
    ) -> Result<(), ResponseError> {
        let Some(p) = self.producers.get(&producer_id) else {
            return Ok(());
        };
        if producer_epoch < p.epoch {
            return Err(ResponseError::InvalidProducerEpoch);
        }
        if coordinator_epoch < p.coordinator_epoch {
            return Err(ResponseError::TransactionCoordinatorFenced);
        }
        Ok(())
    }

    fn entry(&mut self, h: &BatchHeader, now_ms: i64) -> &mut ProducerEntry {
        if !self.producers.contains_key(&h.producer_id) && self.producers.len() >= MAX_PRODUCERS {
            self.evict_least_recent();
        }
        self.producers
            .entry(h.producer_id)
            .or_insert_with(|| ProducerEntry {
                epoch: h.producer_epoch,
                last_write_ms: now_ms,
                batches: VecDeque::new(),
                coordinator_epoch: -1,
            })
    }

    /// Records an appended marker batch (header with its final offset) of type `control`,
    /// written by the coordinator of `coordinator_epoch`: a newer producer epoch replaces the
    /// producer's (its sequences start again), and the producer's open transaction ends, which
    /// is returned (`None` for a retried marker: nothing was open).
    pub fn record_marker(
        &mut self,
        h: &BatchHeader,
        control: ControlType,
        coordinator_epoch: i32,
        now_ms: i64,
    ) -> Option<CompletedTxn> {
        debug_assert!(h.is_control());
        if h.producer_id < 0 {
            return None;
        }
        let p = self.entry(h, now_ms);
        if h.producer_epoch > p.epoch {
            p.epoch = h.producer_epoch;
            p.batches.clear();
        }
        p.coordinator_epoch = p.coordinator_epoch.max(coordinator_epoch);
        p.last_write_ms = p.last_write_ms.max(now_ms);
        self.verifying.remove(&h.producer_id);
        self.txns.observe(h, Some(control))
    }

    /// The aborted-transaction index entry of `c` (just returned by
    /// [`ProducerStates::record_marker`]), if it aborted.
    pub fn aborted_entry(&self, c: &CompletedTxn) -> Option<AbortedTxn> {
        self.txns.aborted_entry(c)
    }

    /// The first offset of the oldest open transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.txns.first_unstable_offset()
    }

    /// Every producer this partition remembers, by id (DescribeProducers).
    pub fn describe(&self) -> Vec<ProducerSummary> {
        let mut out: Vec<ProducerSummary> = self
            .producers
            .iter()
            .map(|(pid, p)| ProducerSummary {
                producer_id: *pid,
                producer_epoch: p.epoch,
                last_sequence: p.batches.back().map_or(-1, |b| b.last_seq),
                last_write_ms: p.last_write_ms,
                coordinator_epoch: p.coordinator_epoch,
                current_txn_start_offset: self.txns.open_since(*pid).unwrap_or(-1),
            })
            .collect();
        out.sort_unstable_by_key(|p| p.producer_id);
        out
    }

    /// The open transactions (producer id, first offset), for tools.
    pub fn open_transactions(&self) -> Vec<(i64, i64)> {
        let mut open: Vec<(i64, i64)> = self
            .producers
            .keys()
            .filter_map(|pid| self.txns.open_since(*pid).map(|o| (*pid, o)))
            .collect();
        open.sort_unstable();
        open
    }

    /// Records a data batch that was appended (header with its final offsets) at `now_ms`;
    /// `durable` tells when it is durable. A transactional batch opens its producer's
    /// transaction if none is open.
    pub fn record(&mut self, h: &BatchHeader, durable: DurableToken, now_ms: i64) {
        debug_assert!(!h.is_control());
        if h.producer_id < 0 {
            return;
        }
        self.txns.observe(h, None);
        if h.is_transactional() {
            // Its transaction is open now: the verification is used up.
            self.verifying.remove(&h.producer_id);
        }
        let p = self.entry(h, now_ms);
        if h.producer_epoch != p.epoch {
            p.epoch = h.producer_epoch;
            p.batches.clear();
        }
        p.last_write_ms = p.last_write_ms.max(now_ms);
        if h.base_sequence < 0 {
            // A coordinator's batch (no sequence): nothing a retry could be matched against.
            return;
        }
        p.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: last_seq(h),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
            durable,
        });
        while p.batches.len() > BATCHES_KEPT {
            p.batches.pop_front();
        }
    }

    /// Drops the producer that wrote least recently, of those without an open transaction
    /// (forgetting one would leave its transaction open, and the last stable offset, for good).
    fn evict_least_recent(&mut self) {
        let txns = &self.txns;
        if let Some(pid) = self
            .producers
            .iter()
            .filter(|(pid, _)| txns.open_since(**pid).is_none())
            .min_by_key(|(pid, p)| (p.last_write_ms, **pid))
            .map(|(pid, _)| *pid)
        {
            self.producers.remove(&pid);
        }
    }

    /// Forgets producers that have not written since `now_ms - expiration_ms`; returns how
    /// many were removed.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        let horizon = now_ms.saturating_sub(expiration_ms);
        let txns = &self.txns;
        self.producers
            .retain(|pid, p| p.last_write_ms >= horizon || txns.open_since(*pid).is_some());
        before - self.producers.len()
    }

    /// Encodes the state for a snapshot: every batch it holds must already be durable.
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::with_capacity(8 + self.producers.len() * 64);
        out.extend_from_slice(&(self.producers.len() as u32).to_be_bytes());
        let mut ids: Vec<&i64> = self.producers.keys().collect();
        ids.sort_unstable();
        for pid in ids {
            let p = &self.producers[pid];
            out.extend_from_slice(&pid.to_be_bytes());
            out.extend_from_slice(&p.epoch.to_be_bytes());
            out.extend_from_slice(&p.last_write_ms.to_be_bytes());
            out.extend_from_slice(&p.coordinator_epoch.to_be_bytes());
            let txn_first = self.txns.open_since(*pid).unwrap_or(-1);
            out.extend_from_slice(&txn_first.to_be_bytes());
            out.push(p.batches.len() as u8);
            for b in &p.batches {
                out.extend_from_slice(&b.first_seq.to_be_bytes());
                out.extend_from_slice(&b.last_seq.to_be_bytes());
                out.extend_from_slice(&b.first_offset.to_be_bytes());
                out.extend_from_slice(&b.last_offset.to_be_bytes());
            }
        }
        out
    }

    /// Decodes a snapshot made by [`ProducerStates::encode`]; `None` if it is malformed.
    /// Counts are checked against the bytes present before anything is sized by them.
    #[cfg(test)]
    pub fn decode(buf: &[u8]) -> Option<ProducerStates> {
        Self::decode_version(buf, true)
    }

    /// [`ProducerStates::decode`] of a snapshot of format `GPS1` (`with_txns` false: written
    /// before transactions, without coordinator epochs and open transactions) or `GPS2`.
    fn decode_version(mut buf: &[u8], with_txns: bool) -> Option<ProducerStates> {
        fn take<const N: usize>(buf: &mut &[u8]) -> Option<[u8; N]> {
            let (head, rest) = buf.split_first_chunk::<N>()?;
            *buf = rest;
            Some(*head)
        }
        let producer_bytes: usize = 8 + 2 + 8 + 1 + if with_txns { 4 + 8 } else { 0 };
        const BATCH_BYTES: usize = 4 + 4 + 8 + 8;
        let count = u32::from_be_bytes(take::<4>(&mut buf)?) as usize;
        if count > MAX_PRODUCERS || count * producer_bytes > buf.len() {
            return None;
        }
        let mut producers = HashMap::with_capacity(count);
        let mut txns = OpenTransactions::default();
        for _ in 0..count {
            let pid = i64::from_be_bytes(take::<8>(&mut buf)?);
            let epoch = i16::from_be_bytes(take::<2>(&mut buf)?);
            let last_write_ms = i64::from_be_bytes(take::<8>(&mut buf)?);
            let (coordinator_epoch, txn_first) = if with_txns {
                let c = i32::from_be_bytes(take::<4>(&mut buf)?);
                (c, i64::from_be_bytes(take::<8>(&mut buf)?))
            } else {
                (-1, -1)
            };
            if txn_first >= 0 {
                txns.begin(pid, txn_first);
            } else if txn_first != -1 {
                return None;
            }
            let n = take::<1>(&mut buf)?[0] as usize;
            if n > BATCHES_KEPT || n * BATCH_BYTES > buf.len() {
                return None;
            }
            let mut batches = VecDeque::with_capacity(n);
            for _ in 0..n {
                batches.push_back(BatchMeta {
                    first_seq: i32::from_be_bytes(take::<4>(&mut buf)?),
                    last_seq: i32::from_be_bytes(take::<4>(&mut buf)?),
                    first_offset: i64::from_be_bytes(take::<8>(&mut buf)?),
                    last_offset: i64::from_be_bytes(take::<8>(&mut buf)?),
                    durable: DurableToken::DURABLE,
                });
            }
            let entry = ProducerEntry {
                epoch,
                last_write_ms,
                batches,
                coordinator_epoch,
            };
            if producers.insert(pid, entry).is_some() {
                return None;
            }
        }
        buf.is_empty().then_some(ProducerStates {
            producers,
            txns,
            ..ProducerStates::default()
        })
    }
}

/// Name of a partition's producer-state snapshot file (in the partition directory).
pub const SNAPSHOT_FILE: &str = "producer-state.snapshot";

/// The snapshot format written: `GPS2` holds each producer's coordinator epoch and open
/// transaction. `GPS1` (before transactions) is still read.
const SNAPSHOT_MAGIC: &[u8; 4] = b"GPS2";
const SNAPSHOT_MAGIC_V1: &[u8; 4] = b"GPS1";

/// A snapshot file: magic, the log offset the state is current through (every batch below it
/// is reflected, none at or after it), a CRC32C of the offset and the state, the state.
pub fn snapshot_bytes(states: &ProducerStates, offset: i64) -> Vec<u8> {
    let body = states.encode();
    let mut out = Vec::with_capacity(16 + body.len());
    out.extend_from_slice(SNAPSHOT_MAGIC);
    out.extend_from_slice(&offset.to_be_bytes());
    let crc = crc32c_of(&[&offset.to_be_bytes(), &body]);
    out.extend_from_slice(&crc.to_be_bytes());
    out.extend_from_slice(&body);
    out
}

/// Reads a snapshot file's bytes; `None` if damaged in any way.
pub fn parse_snapshot(bytes: &[u8]) -> Option<(i64, ProducerStates)> {
    let (rest, with_txns) = match bytes.strip_prefix(SNAPSHOT_MAGIC) {
        Some(rest) => (rest, true),
        None => (bytes.strip_prefix(SNAPSHOT_MAGIC_V1)?, false),
    };
    let (offset, rest) = rest.split_first_chunk::<8>()?;
    let (crc, body) = rest.split_first_chunk::<4>()?;
    if crc32c_of(&[offset, body]) != u32::from_be_bytes(*crc) {
        return None;
    }
    let offset = i64::from_be_bytes(*offset);
    (offset >= 0).then_some(())?;
    Some((offset, ProducerStates::decode_version(body, with_txns)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: DurableToken = DurableToken::DURABLE;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset: offset,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn the_next_epochs_batch_waits_for_the_open_transactions_marker() {
        let mut s = ProducerStates::default();
        let mut first = header(7, 6, 0, 2, 10);
        first.attributes = 0x10;
        let g = s.verification_guard(7);
        assert_eq!(s.check_verified(&first, Some(g)), Check::Append);
        s.record(&first, D, 0);
        // Epoch 7 (the bump of the EndTxn that ends epoch 6's transaction) before the marker.
        let next = BatchHeader {
            producer_epoch: 7,
            base_sequence: 0,
            base_offset: -1,
            ..first
        };
        let wait = Check::Reject(ResponseError::NotEnoughReplicas);
        assert_eq!(s.check_verified(&next, None), wait);
        let g = s.verification_guard(7);
        assert_eq!(s.check_verified(&next, Some(g)), wait, "verified or not");
        // Its own epoch's batches still join it.
        let more = BatchHeader {
            base_sequence: 2,
            base_offset: -1,
            ..first
        };
        assert_eq!(s.check_verified(&more, None), Check::Append);
        // Once the marker (at the bumped epoch) is here, the next transaction is verified.
        let mut marker = header(7, 7, -1, 1, 12);
        marker.attributes = 0x30;
        s.record_marker(&marker, ControlType::Commit, 0, 0);
        assert_eq!(s.check_verified(&next, None), Check::Unverified);
        let g = s.verification_guard(7);
        assert_eq!(s.check_verified(&next, Some(g)), Check::Append);
    }

    #[test]
    fn retried_batch_is_a_duplicate_with_its_offsets() {
        let mut s = ProducerStates::default();
        let h = header(7, 0, 0, 3, 10);
        assert_eq!(s.check(&h), Check::Append);
        s.record(&h, D, 0);
        let retry = header(7, 0, 0, 3, -1);
        match s.check(&retry) {
            Check::Duplicate(b) => assert_eq!((b.first_offset, b.last_offset), (10, 12)),
            other => panic!("expected duplicate, got {other:?}"),
        }
        assert_eq!(s.check(&header(7, 0, 3, 1, -1)), Check::Append);
    }

    #[test]
    fn a_coordinators_batches_open_the_transaction_and_fence_only_by_epoch() {
        let mut s = ProducerStates::default();
        // Transactional, no sequence: two commits of the same producer are both written.
        let mut h = header(7, 2, -1, 2, 10);
        h.attributes = 0x10;
        assert_eq!(s.check_coordinator(&h), Check::Append);
        s.record(&h, D, 0);
        assert_eq!(s.open_transactions(), vec![(7, 10)]);
        let again = BatchHeader {
            base_offset: 12,
            ..h
        };
        assert_eq!(s.check_coordinator(&again), Check::Append);
        s.record(&again, D, 0);
        assert_eq!(s.describe()[0].last_sequence, -1);
        // A newer epoch is taken; an older one is a fenced producer's.
        let newer = BatchHeader {
            producer_epoch: 3,
            ..again
        };
        assert_eq!(s.check_coordinator(&newer), Check::Append);
        s.record(&newer, D, 0);
        assert_eq!(
            s.check_coordinator(&h),
            Check::Reject(ResponseError::InvalidProducerEpoch)
        );
    }

    #[test]
    fn gaps_and_old_epochs_are_refused() {
        let mut s = ProducerStates::default();
        s.record(&header(7, 1, 0, 2, 0), D, 0);
        assert_eq!(
            s.check(&header(7, 1, 5, 1, -1)),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            s.check(&header(7, 0, 2, 1, -1)),
            Check::Reject(ResponseError::InvalidProducerEpoch)
        );
        // A new epoch starts again at 0.
        assert_eq!(s.check(&header(7, 2, 0, 1, -1)), Check::Append);
        assert_eq!(
            s.check(&header(7, 2, 4, 1, -1)),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        // Non-idempotent batches are never checked.
        assert_eq!(s.check(&header(-1, -1, -1, 5, -1)), Check::Append);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.record(&header(1, 0, i, 1, i as i64), D, 0);
        }
        assert_eq!(
            s.check(&header(1, 0, 0, 1, -1)),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        assert!(matches!(
            s.check(&header(1, 0, 6, 1, -1)),
            Check::Duplicate(_)
        ));
        let mut w = ProducerStates::default();
        w.record(&header(2, 0, i32::MAX, 1, 0), D, 0);
        assert_eq!(w.check(&header(2, 0, 0, 1, -1)), Check::Append);
    }

    #[test]
    fn producers_expire_after_the_expiration_time_without_writes() {
        let mut s = ProducerStates::default();
        s.record(&header(1, 0, 0, 1, 0), D, 1_000);
        s.record(&header(2, 0, 0, 1, 1), D, 5_000);
        assert_eq!(
            s.expire(10_000, 6_000),
            1,
            "producer 1 last wrote at 1000 < 4000"
        );
        assert_eq!(s.producer_count(), 1);
        // Forgotten: its next batch is accepted as from a new producer, not as a duplicate.
        assert_eq!(s.check(&header(1, 0, 0, 1, -1)), Check::Append);
        assert!(matches!(
            s.check(&header(2, 0, 0, 1, -1)),
            Check::Duplicate(_)
        ));
        assert_eq!(s.expire(10_000, 6_000), 0);
    }

    #[test]
    fn a_partition_keeps_at_most_max_producers_dropping_the_least_recent() {
        let mut s = ProducerStates::default();
        for pid in 0..MAX_PRODUCERS as i64 {
            s.record(&header(pid, 0, 0, 1, pid), D, 1_000 + pid);
        }
        assert_eq!(s.producer_count(), MAX_PRODUCERS);
        s.record(&header(-5, 0, 0, 1, 0), D, 0); // not idempotent: ignored
        s.record(&header(i64::MAX, 0, 0, 1, 0), D, 9_999_999);
        assert_eq!(s.producer_count(), MAX_PRODUCERS);
        assert_eq!(
            s.check(&header(0, 0, 0, 1, -1)),
            Check::Append,
            "pid 0 evicted"
        );
        assert!(matches!(
            s.check(&header(1, 0, 0, 1, -1)),
            Check::Duplicate(_)
        ));
    }

    #[test]
    fn snapshot_round_trips_and_rejects_damage() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.record(&header(3, 2, i * 2, 2, i as i64 * 2), D, 77);
        }
        s.record(&header(9, 0, 0, 1, 20), D, 78);
        let bytes = s.encode();
        let back = ProducerStates::decode(&bytes).expect("decodes");
        assert_eq!(back.producer_count(), 2);
        assert!(matches!(
            back.check(&header(3, 2, 12, 2, -1)),
            Check::Duplicate(BatchMeta {
                first_offset: 12,
                ..
            })
        ));
        assert_eq!(back.check(&header(3, 2, 14, 1, -1)), Check::Append);
        assert_eq!(back.encode(), bytes);
        // Truncated, extended, or lying about its counts: refused, nothing sized by the count.
        assert!(ProducerStates::decode(&bytes[..bytes.len() - 1]).is_none());
        let mut longer = bytes.clone();
        longer.push(0);
        assert!(ProducerStates::decode(&longer).is_none());
        let mut lying = bytes.clone();
        lying[..4].copy_from_slice(&u32::MAX.to_be_bytes());
        assert!(ProducerStates::decode(&lying).is_none());
        assert!(ProducerStates::decode(&[]).is_none());
    }

    #[test]
    fn snapshot_files_carry_their_offset_and_refuse_any_damage() {
        let mut s = ProducerStates::default();
        s.record(&header(5, 1, 0, 3, 40), D, 9);
        let file = snapshot_bytes(&s, 43);
        let (offset, back) = parse_snapshot(&file).expect("valid");
        assert_eq!(offset, 43);
        assert!(matches!(
            back.check(&header(5, 1, 0, 3, -1)),
            Check::Duplicate(_)
        ));
        for i in 0..file.len() {
            let mut bad = file.clone();
            bad[i] ^= 0x40;
            assert!(
                parse_snapshot(&bad).is_none(),
                "flipped byte {i} went unnoticed"
            );
        }
        assert!(parse_snapshot(&file[..file.len() - 1]).is_none());
        assert!(parse_snapshot(b"GPS1").is_none());
    }
}
