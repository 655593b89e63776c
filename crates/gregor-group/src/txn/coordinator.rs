//! The transaction coordinator of one `__transaction_state` partition as a pure state machine:
//! requests, timeouts and the shell's reports of durable writes and written markers come in
//! with `now_ms`; effects (records to append, markers to write, responses) go out.
//!
//! A decision is answered once it is durable: EndTxn's PrepareCommit/PrepareAbort record, then
//! the markers are asked for ([`TxnEffect::WriteMarkers`]) and, once the shell reports them
//! written, the CompleteCommit/CompleteAbort record. A coordinator that loads a partition
//! resumes the markers of every prepared decision it finds.

use std::collections::{BTreeMap, BTreeSet};

use super::metadata::{EndOutcome, ProducerIdAndEpoch, Transition, TxnError, TxnMetadata};
use super::records::{self, TransactionLogValue};
use super::state::TransactionState;
use crate::api::RequestId;
use crate::effect::{AppendToken, Record};

/// Limits from the broker's configuration.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TxnConfig {
    /// `transaction.max.timeout.ms`: the longest timeout a producer may ask for.
    pub max_timeout_ms: i32,
    /// `transactional.id.expiration.ms`: how long an idle transactional id is kept.
    pub id_expiration_ms: i64,
}

impl Default for TxnConfig {
    fn default() -> Self {
        TxnConfig {
            max_timeout_ms: 900_000,
            id_expiration_ms: 604_800_000,
        }
    }
}

/// Why a request was refused: a change's own refusal, or one of the coordinator's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnRefusal {
    Txn(TxnError),
    /// The timeout is not in `1..=transaction.max.timeout.ms`.
    InvalidTransactionTimeout,
    /// The write of the change failed (this node may no longer lead the partition): the
    /// producer looks the coordinator up again and retries.
    NotCoordinator,
}

impl From<TxnError> for TxnRefusal {
    fn from(e: TxnError) -> Self {
        TxnRefusal::Txn(e)
    }
}

/// The answer to a request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnReply {
    InitProducerId(Result<ProducerIdAndEpoch, TxnRefusal>),
    AddPartitions(Result<(), TxnRefusal>),
    /// The identity the producer goes on with: after a transaction version 2 decision, the
    /// bumped epoch (or a new producer id); otherwise the one it has.
    EndTxn(Result<ProducerIdAndEpoch, TxnRefusal>),
}

/// What the coordinator asks its shell to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnEffect {
    Respond {
        request_id: RequestId,
        reply: TxnReply,
    },
    /// Append this record to the partition; report with [`TxnCoordinator::append_completed`].
    Append { token: AppendToken, record: Record },
    /// Write a commit or abort marker for `producer` to each partition (WriteTxnMarkers to
    /// their leaders, retried until each is written); report with
    /// [`TxnCoordinator::markers_written`].
    WriteMarkers {
        transactional_id: String,
        producer: ProducerIdAndEpoch,
        commit: bool,
        partitions: Vec<(String, i32)>,
    },
}

/// A change written and not yet durable, and who waits for it.
#[derive(Debug, Clone)]
struct InFlight {
    transactional_id: String,
    transition: Transition,
    waiter: Option<(RequestId, Waiter)>,
    /// The first record of a transactional id: if it fails, the id was never known.
    new_id: bool,
}

#[derive(Debug, Clone, Copy)]
enum Waiter {
    Init,
    AddPartitions,
    End,
}

/// The transaction coordinator of one `__transaction_state` partition.
#[derive(Debug, Clone, Default)]
pub struct TxnCoordinator {
    config: TxnConfig,
    ids: BTreeMap<String, TxnMetadata>,
    in_flight: BTreeMap<AppendToken, InFlight>,
    markers_in_flight: BTreeSet<String>,
    next_token: u64,
    /// When [`TxnCoordinator::tick`] last ran: a completion it must write again waits
    /// [`COMPLETION_RETRY_BACKOFF_MS`] from there, so failing writes are not retried in a loop.
    last_tick_ms: Option<i64>,
    /// A planted bug, for the deterministic simulator to show its checker finds it (set only
    /// in a simulation that planted it): an EndTxn v5 from the epoch before the bump is taken
    /// for a retry of the last decision and acknowledged whatever the transactional id's state
    /// (another decision, or the next transaction open).
    #[cfg(feature = "simulation")]
    planted_v2_any_retry: bool,
}

/// How long a decision whose completion record failed to be written waits before the next try.
pub const COMPLETION_RETRY_BACKOFF_MS: i64 = 200;

impl TxnCoordinator {
    pub fn new(config: TxnConfig) -> TxnCoordinator {
        TxnCoordinator {
            config,
            ..TxnCoordinator::default()
        }
    }

    /// Plants (or not) the `planted_v2_any_retry` bug.
    #[cfg(feature = "simulation")]
    pub fn plant_v2_any_retry(&mut self, on: bool) {
        self.planted_v2_any_retry = on;
    }

    #[cfg(feature = "simulation")]
    fn v2_any_retry_planted(&self) -> bool {
        self.planted_v2_any_retry
    }
    #[cfg(not(feature = "simulation"))]
    const fn v2_any_retry_planted(&self) -> bool {
        false
    }

    /// A transactional id's state, as DescribeTransactions reports it.
    pub fn describe(&self, transactional_id: &str) -> Option<&TxnMetadata> {
        self.ids.get(transactional_id)
    }

    /// Every transactional id this partition holds.
    pub fn ids(&self) -> impl Iterator<Item = &TxnMetadata> {
        self.ids.values()
    }

    /// One record of the partition, in log order, at load (`None`: a tombstone).
    pub fn replay(
        &mut self,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), crate::records::CodecError> {
        let id = records::decode_key(key)?;
        match value {
            None => {
                self.ids.remove(&id);
            }
            Some(v) => {
                let value = records::decode_value(v)?;
                self.ids.insert(id.clone(), TxnMetadata::loaded(&id, value));
            }
        }
        Ok(())
    }

    /// The load is done: the markers of every decision that was prepared and not completed
    /// are written again.
    pub fn complete_load(&mut self) -> Vec<TxnEffect> {
        let prepared: Vec<String> = self
            .ids
            .values()
            .filter(|m| m.state().is_preparing())
            .map(|m| m.transactional_id.clone())
            .collect();
        prepared
            .into_iter()
            .filter_map(|id| self.markers(&id))
            .collect()
    }

    /// InitProducerId with a transactional id. `fresh_producer_id` is a producer id the shell
    /// allocated, used for a new id or when the epoch has run out.
    pub fn init_producer_id(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        transactional_id: &str,
        timeout_ms: i32,
        expected: Option<ProducerIdAndEpoch>,
        fresh_producer_id: i64,
    ) -> Vec<TxnEffect> {
        let refuse = |e: TxnRefusal| vec![respond(request_id, TxnReply::InitProducerId(Err(e)))];
        if timeout_ms <= 0 || timeout_ms > self.config.max_timeout_ms {
            return refuse(TxnRefusal::InvalidTransactionTimeout);
        }
        let Some(m) = self.ids.get_mut(transactional_id) else {
            let (m, t) =
                TxnMetadata::prepare_first(transactional_id, fresh_producer_id, timeout_ms, now_ms);
            self.ids.insert(transactional_id.to_string(), m);
            let e = self.write(transactional_id, t, Some((request_id, Waiter::Init)));
            if let TxnEffect::Append { token, .. } = &e {
                if let Some(f) = self.in_flight.get_mut(token) {
                    f.new_id = true;
                }
            }
            return vec![e];
        };
        if m.state() == TransactionState::Ongoing {
            // A new producer takes the id over: the open transaction is aborted at a bumped
            // epoch (unless a change is already being written), and this producer retries.
            let mut out = Vec::new();
            if let Some(t) = m.prepare_fence_and_abort(now_ms) {
                out.push(self.write(transactional_id, t, None));
            }
            out.extend(refuse(TxnError::ConcurrentTransactions.into()));
            return out;
        }
        match m.prepare_init(expected, timeout_ms, fresh_producer_id, now_ms) {
            Ok(t) => vec![self.write(transactional_id, t, Some((request_id, Waiter::Init)))],
            Err(e) => refuse(e.into()),
        }
    }

    /// AddPartitionsToTxn (and AddOffsetsToTxn, with the group's `__consumer_offsets`
    /// partition).
    pub fn add_partitions(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[(String, i32)],
    ) -> Vec<TxnEffect> {
        let reply = |r| vec![respond(request_id, TxnReply::AddPartitions(r))];
        let Some(m) = self.ids.get_mut(transactional_id) else {
            return reply(Err(TxnError::InvalidProducerIdMapping.into()));
        };
        match m.prepare_add_partitions(producer, partitions, now_ms) {
            Ok(None) => reply(Ok(())),
            Ok(Some(t)) => vec![self.write(
                transactional_id,
                t,
                Some((request_id, Waiter::AddPartitions)),
            )],
            Err(e) => reply(Err(e.into())),
        }
    }

    /// KIP-890's verification (AddPartitionsToTxn v4 `verify_only`), asked by a partition
    /// leader before the first transactional batch of `producer` opens a transaction there:
    /// each partition is fine (`None`) only if it is in `producer`'s open transaction. A
    /// produce that arrives after its transaction ended (a late retry) is refused, so it
    /// cannot open a transaction nothing would end. Reads only: no effects.
    pub fn verify(
        &self,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        partitions: &[(String, i32)],
    ) -> Result<Vec<Option<TxnError>>, TxnError> {
        let m = self
            .ids
            .get(transactional_id)
            .ok_or(TxnError::InvalidProducerIdMapping)?;
        if m.current.producer_id != producer.producer_id {
            return Err(TxnError::InvalidProducerIdMapping);
        }
        if m.current.producer_epoch != producer.epoch {
            return Err(TxnError::ProducerFenced);
        }
        if m.state().is_preparing() {
            return Err(TxnError::ConcurrentTransactions);
        }
        let open = m.state() == TransactionState::Ongoing;
        let added = m.partitions();
        Ok(partitions
            .iter()
            .map(|tp| (!(open && added.contains(tp))).then_some(TxnError::InvalidTxnState))
            .collect())
    }

    /// EndTxn. `version2` for v5+ (transaction version 2, KIP-890 part 2): the decision bumps
    /// the epoch, and the value is the producer id to move to if the epoch has run out.
    pub fn end_txn(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        transactional_id: &str,
        producer: ProducerIdAndEpoch,
        commit: bool,
        version2: Option<i64>,
    ) -> Vec<TxnEffect> {
        let reply = |r| vec![respond(request_id, TxnReply::EndTxn(r))];
        let any_retry = self.v2_any_retry_planted();
        let Some(m) = self.ids.get_mut(transactional_id) else {
            return reply(Err(TxnError::InvalidProducerIdMapping.into()));
        };
        let outcome = match version2 {
            None => m.prepare_end(producer, commit, now_ms),
            Some(_) if any_retry && m.is_retry_after_bump(producer) => Ok(EndOutcome::AlreadyDone),
            Some(fresh) => m.prepare_end_v2(producer, commit, fresh, now_ms),
        };
        match outcome {
            Ok(EndOutcome::AlreadyDone) => reply(Ok(m.next_identity())),
            Ok(EndOutcome::Prepare(t)) => {
                vec![self.write(transactional_id, t, Some((request_id, Waiter::End)))]
            }
            Err(e) => reply(Err(e.into())),
        }
    }

    /// Timeouts: open transactions past their timeout are aborted (epoch bumped), decisions
    /// whose completion could not be written are written again, and idle ids past
    /// `transactional.id.expiration.ms` are removed.
    pub fn tick(&mut self, now_ms: i64) -> Vec<TxnEffect> {
        self.last_tick_ms = Some(now_ms);
        let expiration = self.config.id_expiration_ms;
        let mut writes = Vec::new();
        for (id, m) in self.ids.iter_mut() {
            let t = if m.timed_out(now_ms) {
                m.prepare_fence_and_abort(now_ms)
            } else if m.state().is_preparing() && !self.markers_in_flight.contains(id) {
                m.prepare_complete(now_ms)
            } else {
                m.prepare_expire(now_ms, expiration)
            };
            if let Some(t) = t {
                writes.push((id.clone(), t));
            }
        }
        writes
            .into_iter()
            .map(|(id, t)| self.write(&id, t, None))
            .collect()
    }

    /// The next moment [`TxnCoordinator::tick`] has work: the earliest transaction timeout, the
    /// retry of a completion that failed to be written, or an idle id's expiry; never sooner
    /// than [`COMPLETION_RETRY_BACKOFF_MS`] after the last tick, so that a write that keeps
    /// failing is not retried in a loop. An id with a write in flight has none: its answer
    /// comes first (and the caller asks again then).
    pub fn next_deadline(&self) -> Option<i64> {
        let retry = self
            .last_tick_ms
            .map_or(0, |t| t.saturating_add(COMPLETION_RETRY_BACKOFF_MS));
        let expiration = self.config.id_expiration_ms;
        self.ids
            .iter()
            .filter(|(_, m)| !m.is_pending())
            .filter_map(|(id, m)| match m.state() {
                TransactionState::Ongoing => Some(
                    m.current
                        .start_timestamp_ms
                        .saturating_add(i64::from(m.current.transaction_timeout_ms))
                        .saturating_add(1),
                ),
                s if s.is_preparing() => (!self.markers_in_flight.contains(id)).then_some(retry),
                s if s.is_idle() => Some(
                    m.current
                        .last_update_timestamp_ms
                        .saturating_add(expiration)
                        .saturating_add(1),
                ),
                _ => None,
            })
            .min()
            .map(|at| at.max(retry))
    }

    /// The append of `token` is durable (`ok`) or failed.
    pub fn append_completed(&mut self, token: AppendToken, ok: bool) -> Vec<TxnEffect> {
        let Some(f) = self.in_flight.remove(&token) else {
            return Vec::new();
        };
        let Some(m) = self.ids.get_mut(&f.transactional_id) else {
            return Vec::new();
        };
        if !ok {
            m.abandon();
            if f.new_id {
                self.ids.remove(&f.transactional_id);
            }
            return f.waiter.map_or_else(Vec::new, |(r, w)| {
                vec![respond(r, refusal(w, TxnRefusal::NotCoordinator))]
            });
        }
        m.apply(&f.transition);
        let current = m.current.clone();
        if current.state == TransactionState::Dead {
            self.ids.remove(&f.transactional_id);
        }
        let mut out: Vec<TxnEffect> = f
            .waiter
            .map_or_else(Vec::new, |(r, w)| vec![respond(r, success(w, &current))]);
        if current.state.is_preparing() {
            out.extend(self.markers(&f.transactional_id));
        }
        out
    }

    /// Every marker of `transactional_id`'s prepared decision is written.
    pub fn markers_written(&mut self, now_ms: i64, transactional_id: &str) -> Vec<TxnEffect> {
        self.markers_in_flight.remove(transactional_id);
        let Some(m) = self.ids.get_mut(transactional_id) else {
            return Vec::new();
        };
        match m.prepare_complete(now_ms) {
            Some(t) => vec![self.write(transactional_id, t, None)],
            None => Vec::new(),
        }
    }

    fn markers(&mut self, transactional_id: &str) -> Option<TxnEffect> {
        let m = self.ids.get(transactional_id)?;
        let commit = match m.state() {
            TransactionState::PrepareCommit => true,
            TransactionState::PrepareAbort => false,
            _ => return None,
        };
        self.markers_in_flight.insert(transactional_id.to_string());
        Some(TxnEffect::WriteMarkers {
            transactional_id: transactional_id.to_string(),
            producer: ProducerIdAndEpoch {
                producer_id: m.current.producer_id,
                epoch: m.current.producer_epoch,
            },
            commit,
            partitions: m.partitions().into_iter().collect(),
        })
    }

    fn write(
        &mut self,
        transactional_id: &str,
        transition: Transition,
        waiter: Option<(RequestId, Waiter)>,
    ) -> TxnEffect {
        self.next_token += 1;
        let token = AppendToken(self.next_token);
        let value = match transition.value.state {
            TransactionState::Dead => None,
            _ => Some(records::encode_value(&transition.value)),
        };
        let record = Record::plain(records::encode_key(transactional_id), value);
        self.in_flight.insert(
            token,
            InFlight {
                transactional_id: transactional_id.to_string(),
                transition,
                waiter,
                new_id: false,
            },
        );
        TxnEffect::Append { token, record }
    }
}

fn respond(request_id: RequestId, reply: TxnReply) -> TxnEffect {
    TxnEffect::Respond { request_id, reply }
}

fn refusal(w: Waiter, e: TxnRefusal) -> TxnReply {
    match w {
        Waiter::Init => TxnReply::InitProducerId(Err(e)),
        Waiter::AddPartitions => TxnReply::AddPartitions(Err(e)),
        Waiter::End => TxnReply::EndTxn(Err(e)),
    }
}

fn success(w: Waiter, current: &TransactionLogValue) -> TxnReply {
    match w {
        Waiter::Init => TxnReply::InitProducerId(Ok(ProducerIdAndEpoch {
            producer_id: current.producer_id,
            epoch: current.producer_epoch,
        })),
        Waiter::AddPartitions => TxnReply::AddPartitions(Ok(())),
        Waiter::End => TxnReply::EndTxn(Ok(super::metadata::next_identity(current))),
    }
}

#[cfg(test)]
#[path = "coordinator_tests.rs"]
mod tests;
