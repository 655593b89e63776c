//! One transactional id at its coordinator and the changes requests and timeouts make to it.
//!
//! Every change is two steps, as the coordinator must store it before it counts: a `prepare_*`
//! function checks the request against the current state and returns the [`Transition`] to
//! write to `__transaction_state` (marking it pending), and [`TxnMetadata::apply`] makes it the
//! current state once the write is durable (or [`TxnMetadata::abandon`] drops it when the write
//! failed). While a transition is pending every other change waits: CONCURRENT_TRANSACTIONS, the
//! retriable error Kafka's producers retry on.

use std::collections::BTreeSet;

use super::records::{TopicPartitions, TransactionLogValue};
use super::state::TransactionState;

/// The highest epoch a producer id is given; the next bump moves to a new producer id (Kafka
/// keeps `Short.MAX_VALUE` itself unused, so that an epoch + 1 never overflows).
pub const MAX_PRODUCER_EPOCH: i16 = i16::MAX - 1;

/// Why a request cannot change a transactional id, each one of Kafka's error codes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum TxnError {
    /// Another change is being written, or markers are: retry.
    #[error("CONCURRENT_TRANSACTIONS")]
    ConcurrentTransactions,
    /// A newer producer with the same transactional id took over.
    #[error("PRODUCER_FENCED")]
    ProducerFenced,
    /// The producer id is not the one this transactional id has.
    #[error("INVALID_PRODUCER_ID_MAPPING")]
    InvalidProducerIdMapping,
    /// The request does not fit the transaction's state (EndTxn with none open, a commit of
    /// an aborting transaction).
    #[error("INVALID_TXN_STATE")]
    InvalidTxnState,
}

/// A producer's identity as a request names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdAndEpoch {
    pub producer_id: i64,
    pub epoch: i16,
}

/// A change to write: the transactional id's state after it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Transition {
    pub value: TransactionLogValue,
}

/// What `prepare_end` decided.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndOutcome {
    /// Write this (PrepareCommit or PrepareAbort), then the markers.
    Prepare(Transition),
    /// The same decision is already complete (a retried EndTxn): answer success.
    AlreadyDone,
}

/// A transactional id's state at its coordinator.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TxnMetadata {
    pub transactional_id: String,
    pub current: TransactionLogValue,
    /// The epoch before the last bump, so that a producer retrying an InitProducerId whose
    /// answer it lost is recognised (KIP-360); -1 when none.
    pub last_producer_epoch: i16,
    pending: Option<TransactionLogValue>,
}

impl TxnMetadata {
    /// A transactional id seen for the first time, given `producer_id` at epoch 0 (written
    /// through [`TxnMetadata::prepare_first`]'s transition).
    pub fn prepare_first(
        transactional_id: &str,
        producer_id: i64,
        timeout_ms: i32,
        now_ms: i64,
    ) -> (TxnMetadata, Transition) {
        let value = TransactionLogValue {
            producer_id,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 0,
            transaction_timeout_ms: timeout_ms,
            state: TransactionState::Empty,
            partitions: Vec::new(),
            last_update_timestamp_ms: now_ms,
            start_timestamp_ms: -1,
            client_transaction_version: 0,
        };
        let mut m = TxnMetadata::loaded(transactional_id, value.clone());
        m.pending = Some(value.clone());
        (m, Transition { value })
    }

    /// A transactional id as `__transaction_state` holds it (at load).
    pub fn loaded(transactional_id: &str, current: TransactionLogValue) -> TxnMetadata {
        TxnMetadata {
            transactional_id: transactional_id.to_string(),
            current,
            last_producer_epoch: -1,
            pending: None,
        }
    }

    pub fn state(&self) -> TransactionState {
        self.current.state
    }

    pub fn is_pending(&self) -> bool {
        self.pending.is_some()
    }

    /// The partitions of the open transaction.
    pub fn partitions(&self) -> BTreeSet<(String, i32)> {
        flatten(&self.current.partitions)
    }

    /// InitProducerId for an idle transactional id: the epoch bumped (a new producer id,
    /// `fresh_producer_id`, once the epoch is exhausted), the timeout taken, the state Empty.
    /// `expected` is the identity a recovering producer names (KIP-360): it must be the current
    /// one, or the one before a bump whose answer the producer lost.
    pub fn prepare_init(
        &mut self,
        expected: Option<ProducerIdAndEpoch>,
        timeout_ms: i32,
        fresh_producer_id: i64,
        now_ms: i64,
    ) -> Result<Transition, TxnError> {
        self.check_free()?;
        if !self.state().is_idle() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if let Some(e) = expected {
            let retried_bump = e.epoch == self.last_producer_epoch && e.epoch >= 0;
            if e.producer_id != self.current.producer_id {
                return Err(TxnError::InvalidProducerIdMapping);
            }
            if e.epoch != self.current.producer_epoch && !retried_bump {
                return Err(TxnError::ProducerFenced);
            }
        }
        let mut v = self.current.clone();
        if v.producer_epoch >= MAX_PRODUCER_EPOCH {
            v.previous_producer_id = v.producer_id;
            v.producer_id = fresh_producer_id;
            v.producer_epoch = 0;
        } else {
            v.producer_epoch += 1;
        }
        v.transaction_timeout_ms = timeout_ms;
        v.state = TransactionState::Empty;
        v.partitions.clear();
        v.start_timestamp_ms = -1;
        v.last_update_timestamp_ms = now_ms;
        Ok(self.begin(v))
    }

    /// AddPartitionsToTxn / AddOffsetsToTxn: the transaction opens (if idle) and holds
    /// `partitions`. `None` when it already holds them all: nothing to write.
    pub fn prepare_add_partitions(
        &mut self,
        producer: ProducerIdAndEpoch,
        partitions: &[(String, i32)],
        now_ms: i64,
    ) -> Result<Option<Transition>, TxnError> {
        self.check_producer(producer)?;
        self.check_free()?;
        if self.state().is_preparing() {
            return Err(TxnError::ConcurrentTransactions);
        }
        if self.state() == TransactionState::Dead {
            return Err(TxnError::InvalidTxnState);
        }
        let mut set = if self.state() == TransactionState::Ongoing {
            self.partitions()
        } else {
            BTreeSet::new()
        };
        let before = set.len();
        set.extend(partitions.iter().cloned());
        if self.state() == TransactionState::Ongoing && set.len() == before {
            return Ok(None);
        }
        let mut v = self.current.clone();
        if v.state != TransactionState::Ongoing {
            v.start_timestamp_ms = now_ms;
        }
        v.state = TransactionState::Ongoing;
        v.partitions = grouped(&set);
        v.last_update_timestamp_ms = now_ms;
        Ok(Some(self.begin(v)))
    }

    /// EndTxn from the producer.
    pub fn prepare_end(
        &mut self,
        producer: ProducerIdAndEpoch,
        commit: bool,
        now_ms: i64,
    ) -> Result<EndOutcome, TxnError> {
        use TransactionState::*;
        self.check_producer(producer)?;
        self.check_free()?;
        let target = if commit { PrepareCommit } else { PrepareAbort };
        match (self.state(), commit) {
            (Ongoing, _) => Ok(EndOutcome::Prepare(self.decide(target, now_ms))),
            (CompleteCommit, true) | (CompleteAbort, false) => Ok(EndOutcome::AlreadyDone),
            (PrepareCommit, true) | (PrepareAbort, false) => Err(TxnError::ConcurrentTransactions),
            _ => Err(TxnError::InvalidTxnState),
        }
    }

    /// EndTxn v5+ (KIP-890 part 2, transaction version 2). The decision bumps the epoch, so
    /// that nothing the producer sent in this transaction can land in its next one, and the
    /// producer carries on with the identity the answer names ([`TxnMetadata::next_identity`]);
    /// once the epoch is exhausted the decision names `fresh_producer_id` instead, taken at
    /// completion. A retry whose answer was lost names the identity from before the bump and
    /// is answered as the first was. An abort with nothing open bumps the epoch too: such a
    /// producer cannot know whether a leader added a partition for it.
    pub fn prepare_end_v2(
        &mut self,
        producer: ProducerIdAndEpoch,
        commit: bool,
        fresh_producer_id: i64,
        now_ms: i64,
    ) -> Result<EndOutcome, TxnError> {
        use TransactionState::*;
        let retry = self.is_retry_after_bump(producer);
        if !retry {
            self.check_producer(producer)?;
        }
        self.check_free()?;
        let target = if commit { PrepareCommit } else { PrepareAbort };
        match (self.state(), commit) {
            (PrepareCommit, true) | (PrepareAbort, false) => Err(TxnError::ConcurrentTransactions),
            (CompleteCommit, true) | (CompleteAbort, false) if retry => Ok(EndOutcome::AlreadyDone),
            _ if retry => Err(TxnError::ProducerFenced),
            (Ongoing, _) | (Empty | CompleteCommit | CompleteAbort, false) => {
                let t = self.decide_bumped(target, fresh_producer_id, now_ms);
                Ok(EndOutcome::Prepare(t))
            }
            _ => Err(TxnError::InvalidTxnState),
        }
    }

    /// The identity the producer uses after the current decision: the bumped epoch, or the
    /// fresh producer id at epoch 0 once the epoch ran out.
    pub fn next_identity(&self) -> ProducerIdAndEpoch {
        next_identity(&self.current)
    }

    /// Whether `p` is the identity from before the last decision's bump (its answer was lost).
    pub(crate) fn is_retry_after_bump(&self, p: ProducerIdAndEpoch) -> bool {
        let v = &self.current;
        let bumped = p.producer_id == v.producer_id
            && p.epoch >= 0
            && p.epoch.checked_add(1) == Some(v.producer_epoch);
        let moved = p.producer_id == v.previous_producer_id
            && v.previous_producer_id >= 0
            && p.epoch == MAX_PRODUCER_EPOCH
            && v.producer_epoch == 0;
        bumped || moved
    }

    fn decide_bumped(
        &mut self,
        target: TransactionState,
        fresh_producer_id: i64,
        now_ms: i64,
    ) -> Transition {
        let mut v = self.current.clone();
        if v.state != TransactionState::Ongoing {
            v.start_timestamp_ms = now_ms;
        }
        v.state = target;
        v.last_update_timestamp_ms = now_ms;
        v.client_transaction_version = 2;
        if v.producer_epoch >= MAX_PRODUCER_EPOCH {
            // Without one (the shell's mistake) the producer stays at its last epoch.
            debug_assert!(fresh_producer_id >= 0, "no producer id to move to");
            v.next_producer_id = fresh_producer_id;
        } else {
            v.producer_epoch += 1;
        }
        self.begin(v)
    }

    /// The coordinator aborts the open transaction itself (it outlived its timeout, or a new
    /// producer is taking the transactional id over), bumping the epoch so that the producer
    /// that opened it can no longer write in it or end it. `None` if nothing is open or a
    /// change is already pending.
    pub fn prepare_fence_and_abort(&mut self, now_ms: i64) -> Option<Transition> {
        if self.pending.is_some() || self.state() != TransactionState::Ongoing {
            return None;
        }
        let mut t = self.decide(TransactionState::PrepareAbort, now_ms);
        if t.value.producer_epoch < MAX_PRODUCER_EPOCH {
            t.value.producer_epoch += 1;
        }
        self.pending = Some(t.value.clone());
        Some(t)
    }

    /// Every marker of the prepared decision is written: CompleteCommit or CompleteAbort.
    pub fn prepare_complete(&mut self, now_ms: i64) -> Option<Transition> {
        let done = match self.state() {
            TransactionState::PrepareCommit => TransactionState::CompleteCommit,
            TransactionState::PrepareAbort => TransactionState::CompleteAbort,
            _ => return None,
        };
        if self.pending.is_some() {
            return None;
        }
        let mut v = self.current.clone();
        v.state = done;
        v.partitions.clear();
        v.last_update_timestamp_ms = now_ms;
        if v.next_producer_id >= 0 {
            // The epoch ran out at the decision: the producer moves to the id it was given.
            v.previous_producer_id = v.producer_id;
            v.producer_id = v.next_producer_id;
            v.producer_epoch = 0;
            v.next_producer_id = -1;
        }
        Some(self.begin(v))
    }

    /// The transactional id has been idle for `expiration_ms` (`transactional.id.expiration.ms`):
    /// it is removed (Dead is written as a tombstone). `None` while a transaction is open or
    /// finishing, or a change is pending.
    pub fn prepare_expire(&mut self, now_ms: i64, expiration_ms: i64) -> Option<Transition> {
        if self.pending.is_some()
            || !self.state().is_idle()
            || now_ms - self.current.last_update_timestamp_ms <= expiration_ms
        {
            return None;
        }
        Some(self.decide(TransactionState::Dead, now_ms))
    }

    /// Whether the open transaction has outlived its timeout at `now_ms`.
    pub fn timed_out(&self, now_ms: i64) -> bool {
        self.state() == TransactionState::Ongoing
            && self.pending.is_none()
            && now_ms - self.current.start_timestamp_ms
                > i64::from(self.current.transaction_timeout_ms)
    }

    /// The pending transition is durable: it is the state now.
    pub fn apply(&mut self, t: &Transition) {
        debug_assert_eq!(
            self.pending.as_ref(),
            Some(&t.value),
            "applied a transition never prepared"
        );
        debug_assert!(
            t.value.state.can_follow(self.current.state) || t.value == self.current,
            "{:?} -> {:?}",
            self.current.state,
            t.value.state
        );
        if t.value.producer_epoch != self.current.producer_epoch {
            self.last_producer_epoch = self.current.producer_epoch;
        }
        self.current = t.value.clone();
        self.pending = None;
    }

    /// The pending transition's write failed: the state stays as it was.
    pub fn abandon(&mut self) {
        self.pending = None;
    }

    fn check_free(&self) -> Result<(), TxnError> {
        match self.pending {
            Some(_) => Err(TxnError::ConcurrentTransactions),
            None => Ok(()),
        }
    }

    fn check_producer(&self, p: ProducerIdAndEpoch) -> Result<(), TxnError> {
        if p.producer_id != self.current.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if p.epoch != self.current.producer_epoch {
            return Err(TxnError::ProducerFenced);
        }
        Ok(())
    }

    fn decide(&mut self, target: TransactionState, now_ms: i64) -> Transition {
        let mut v = self.current.clone();
        v.state = target;
        v.last_update_timestamp_ms = now_ms;
        self.begin(v)
    }

    fn begin(&mut self, value: TransactionLogValue) -> Transition {
        self.pending = Some(value.clone());
        Transition { value }
    }
}

/// [`TxnMetadata::next_identity`] of a stored state.
pub fn next_identity(v: &TransactionLogValue) -> ProducerIdAndEpoch {
    match v.next_producer_id {
        next if next >= 0 => ProducerIdAndEpoch {
            producer_id: next,
            epoch: 0,
        },
        _ => ProducerIdAndEpoch {
            producer_id: v.producer_id,
            epoch: v.producer_epoch,
        },
    }
}

fn flatten(topics: &[TopicPartitions]) -> BTreeSet<(String, i32)> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.clone(), p)))
        .collect()
}

fn grouped(set: &BTreeSet<(String, i32)>) -> Vec<TopicPartitions> {
    let mut out: Vec<TopicPartitions> = Vec::new();
    for (topic, p) in set {
        match out.last_mut() {
            Some(t) if &t.topic == topic => t.partitions.push(*p),
            _ => out.push(TopicPartitions {
                topic: topic.clone(),
                partitions: vec![*p],
            }),
        }
    }
    out
}

#[cfg(test)]
#[path = "metadata_tests.rs"]
mod tests;
