//! The transaction manager: Kafka's producer transaction state machine, pure (inputs in,
//! requests and completions out; the sender task owns the network and the clock).
//!
//! It follows the Java producer's `TransactionManager`: the same states and transitions, one
//! transactional request in flight at a time, in the same priority (FindCoordinator, then
//! InitProducerId, then AddPartitionsToTxn / AddOffsetsToTxn / TxnOffsetCommit in the order
//! asked, then EndTxn once every batch of the transaction has its answer), and the same
//! classification of error codes into retriable, abortable and fatal.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::fmt;

use super::wire::ProducerIdentity;
use crate::error::{KafkaCode, KafkaError};
use crate::types::{ConsumerGroupMetadata, TopicPartition};

pub const TOPIC_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(29);
pub const GROUP_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(30);
pub const CLUSTER_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(31);
pub const ILLEGAL_GENERATION: KafkaCode = KafkaCode(22);
pub const UNKNOWN_MEMBER_ID: KafkaCode = KafkaCode(25);
pub const UNSUPPORTED_FOR_MESSAGE_FORMAT: KafkaCode = KafkaCode(43);
pub const OUT_OF_ORDER_SEQUENCE_NUMBER: KafkaCode = KafkaCode(45);
pub const INVALID_PRODUCER_EPOCH: KafkaCode = KafkaCode(47);
pub const INVALID_TXN_STATE: KafkaCode = KafkaCode(48);
pub const INVALID_PRODUCER_ID_MAPPING: KafkaCode = KafkaCode(49);
pub const INVALID_TRANSACTION_TIMEOUT: KafkaCode = KafkaCode(50);
pub const CONCURRENT_TRANSACTIONS: KafkaCode = KafkaCode(51);
pub const TRANSACTIONAL_ID_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(53);
pub const OPERATION_NOT_ATTEMPTED: KafkaCode = KafkaCode(55);
pub const UNKNOWN_PRODUCER_ID: KafkaCode = KafkaCode(59);
pub const FENCED_INSTANCE_ID: KafkaCode = KafkaCode(82);
pub const PRODUCER_FENCED: KafkaCode = KafkaCode(90);
pub const TRANSACTION_ABORTABLE: KafkaCode = KafkaCode(120);

/// FindCoordinator key types.
pub const KEY_TYPE_GROUP: i8 = 0;
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// The producer's transaction states (Kafka's names).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnState {
    Uninitialized,
    Initializing,
    Ready,
    InTransaction,
    CommittingTransaction,
    AbortingTransaction,
    /// A failure inside the transaction: only `abort_transaction` is allowed.
    AbortableError,
    /// Fenced, unauthorized or inconsistent: only closing is left.
    FatalError,
}

impl fmt::Display for TxnState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

/// The user calls that complete asynchronously.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    InitTransactions,
    SendOffsets,
    Commit,
    Abort,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::InitTransactions => "init_transactions",
            Op::SendOffsets => "send_offsets_to_transaction",
            Op::Commit => "commit_transaction",
            Op::Abort => "abort_transaction",
        }
    }
}

/// Why a transactional call failed.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum TxnError {
    /// The call is not allowed in the current state (Kafka's `IllegalStateException`).
    #[error("cannot {call} in state {state}")]
    IllegalState { call: &'static str, state: TxnState },
    /// The transaction must be aborted: `abort_transaction`, then a new one.
    #[error("the transaction must be aborted: {0}")]
    Abortable(KafkaError),
    /// The producer can do nothing more (fenced by a newer instance, not authorized...).
    #[error("transactional producer failed for good: {0}")]
    Fatal(KafkaError),
}

impl TxnError {
    /// The Kafka error behind it, if any.
    pub fn kafka(&self) -> Option<&KafkaError> {
        match self {
            TxnError::IllegalState { .. } => None,
            TxnError::Abortable(e) | TxnError::Fatal(e) => Some(e),
        }
    }
}

/// Which request an error code came back on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RequestKind {
    FindCoordinator,
    InitProducerId,
    AddPartitions,
    AddOffsets,
    TxnOffsetCommit,
    EndTxn,
    Produce,
}

/// What an error code means, as Kafka's `TransactionManager` handlers classify it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Send the same request again after a backoff.
    Retry,
    /// The coordinator moved: find it again, then retry.
    FindCoordinator,
    /// Nothing happened for this entity because another failed (OPERATION_NOT_ATTEMPTED).
    Ignore,
    /// The transaction must be aborted.
    Abortable,
    /// Abortable if the broker can bump the epoch (KIP-360, InitProducerId v3+), else fatal.
    AbortableWithBump,
    Fatal,
}

/// Kafka's classification of `code` answered to a `kind` request.
pub fn classify(kind: RequestKind, code: KafkaCode) -> Class {
    use RequestKind as K;
    match code {
        PRODUCER_FENCED
        | INVALID_PRODUCER_EPOCH
        | TRANSACTIONAL_ID_AUTHORIZATION_FAILED
        | CLUSTER_AUTHORIZATION_FAILED
        | UNSUPPORTED_FOR_MESSAGE_FORMAT
        | INVALID_TRANSACTION_TIMEOUT => Class::Fatal,
        KafkaCode::NOT_COORDINATOR | KafkaCode::COORDINATOR_NOT_AVAILABLE => Class::FindCoordinator,
        KafkaCode::COORDINATOR_LOAD_IN_PROGRESS | CONCURRENT_TRANSACTIONS => Class::Retry,
        KafkaCode::REQUEST_TIMED_OUT if kind == K::TxnOffsetCommit => Class::FindCoordinator,
        KafkaCode::UNKNOWN_TOPIC_OR_PARTITION
            if matches!(kind, K::AddPartitions | K::TxnOffsetCommit) =>
        {
            Class::Retry
        }
        OPERATION_NOT_ATTEMPTED if kind == K::AddPartitions => Class::Ignore,
        TOPIC_AUTHORIZATION_FAILED if kind == K::AddPartitions => Class::Abortable,
        GROUP_AUTHORIZATION_FAILED if matches!(kind, K::AddOffsets | K::TxnOffsetCommit) => {
            Class::Abortable
        }
        GROUP_AUTHORIZATION_FAILED if kind == K::FindCoordinator => Class::Abortable,
        // The consumer's generation is gone: the offsets would belong to a zombie
        // (Kafka's CommitFailedException), so this transaction cannot commit.
        UNKNOWN_MEMBER_ID | ILLEGAL_GENERATION | FENCED_INSTANCE_ID
            if kind == K::TxnOffsetCommit =>
        {
            Class::Abortable
        }
        UNKNOWN_PRODUCER_ID | INVALID_PRODUCER_ID_MAPPING
            if matches!(kind, K::AddPartitions | K::AddOffsets | K::EndTxn) =>
        {
            Class::AbortableWithBump
        }
        TRANSACTION_ABORTABLE => Class::Abortable,
        // A batch of the transaction failed: the broker lost the producer's sequence, so a
        // fresh epoch restarts it (KIP-360); any other produce failure aborts the transaction.
        UNKNOWN_PRODUCER_ID | OUT_OF_ORDER_SEQUENCE_NUMBER if kind == K::Produce => {
            Class::AbortableWithBump
        }
        INVALID_TXN_STATE if kind == K::Produce => Class::Fatal,
        _ if kind == K::Produce => Class::Abortable,
        _ => Class::Fatal,
    }
}

/// A request the shell sends for the transaction manager.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxnRequest {
    /// To any broker: who coordinates `key` (`key_type` transaction or group).
    FindCoordinator { key_type: i8, key: String },
    /// To the transaction coordinator. `current` is set for a KIP-360 epoch bump.
    InitProducerId {
        transactional_id: String,
        transaction_timeout_ms: i32,
        current: Option<ProducerIdentity>,
    },
    AddPartitions {
        transactional_id: String,
        identity: ProducerIdentity,
        partitions: Vec<TopicPartition>,
    },
    AddOffsets {
        transactional_id: String,
        identity: ProducerIdentity,
        group_id: String,
    },
    /// To the group coordinator (`coordinator`). `version2`: v5, with no AddOffsetsToTxn
    /// before it.
    TxnOffsetCommit {
        transactional_id: String,
        identity: ProducerIdentity,
        group: ConsumerGroupMetadata,
        offsets: BTreeMap<TopicPartition, i64>,
        version2: bool,
    },
    /// `version2`: v5, which bumps the epoch and names it.
    EndTxn {
        transactional_id: String,
        identity: ProducerIdentity,
        commit: bool,
        version2: bool,
    },
}

impl TxnRequest {
    pub fn kind(&self) -> RequestKind {
        match self {
            TxnRequest::FindCoordinator { .. } => RequestKind::FindCoordinator,
            TxnRequest::InitProducerId { .. } => RequestKind::InitProducerId,
            TxnRequest::AddPartitions { .. } => RequestKind::AddPartitions,
            TxnRequest::AddOffsets { .. } => RequestKind::AddOffsets,
            TxnRequest::TxnOffsetCommit { .. } => RequestKind::TxnOffsetCommit,
            TxnRequest::EndTxn { .. } => RequestKind::EndTxn,
        }
    }
}

/// A request to send and the broker it goes to (`None`: any broker).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outgoing {
    pub broker: Option<i32>,
    pub request: TxnRequest,
}

/// The answer to the request in flight, as the shell parsed it.
#[derive(Debug, Clone, PartialEq)]
pub enum TxnResponse {
    Coordinator(Result<i32, KafkaError>),
    /// With what the coordinator's broker offers.
    ProducerId(Result<ProducerIdentity, KafkaError>, Offered),
    PartitionsAdded(Vec<(TopicPartition, Result<(), KafkaError>)>),
    OffsetsAdded(Result<(), KafkaError>),
    OffsetsCommitted(Vec<(TopicPartition, Result<(), KafkaError>)>),
    /// With transaction version 2, the identity of the producer's next transaction.
    Ended(Result<Option<ProducerIdentity>, KafkaError>),
    /// No answer (connection lost, request timeout): the coordinator is looked up again.
    NoResponse(String),
}

/// What the transaction coordinator's broker offers, learnt with InitProducerId.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Offered {
    /// InitProducerId v3+: KIP-360 epoch bumps.
    pub epoch_bump: bool,
    /// Transaction version 2 (KIP-890 part 2), finalized and served: the brokers add the
    /// partitions and EndTxn bumps the epoch.
    pub version2: bool,
}

/// What an input produced for the shell to do.
#[derive(Debug, Default, PartialEq)]
pub struct Effects {
    /// A user call finished.
    pub completed: Option<(Op, Result<(), TxnError>)>,
    /// A new producer id or epoch: stamp it on batches and restart sequences at 0.
    pub identity: Option<ProducerIdentity>,
}

/// A queued step (AddPartitionsToTxn is not one: it is made from the new partitions).
#[derive(Debug, Clone, PartialEq, Eq)]
enum Step {
    InitProducerId { bump: bool },
    AddOffsets(ConsumerGroupMetadata, BTreeMap<TopicPartition, i64>),
    TxnOffsetCommit(ConsumerGroupMetadata, BTreeMap<TopicPartition, i64>),
    EndTxn { commit: bool },
}

/// The transaction manager of one producer.
#[derive(Debug)]
pub struct TxnManager {
    transactional_id: String,
    timeout_ms: i32,
    retry_backoff_ms: u64,
    state: TxnState,
    identity: Option<ProducerIdentity>,
    coordinator: Option<i32>,
    group_coordinators: BTreeMap<String, i32>,
    bump_supported: bool,
    /// Transaction version 2 offered by the coordinator's broker, and in use by the current
    /// transaction (decided when it begins).
    version2_offered: bool,
    version2: bool,
    epoch_bump_required: bool,
    last_error: Option<TxnError>,
    /// Partitions the coordinator knows are in the transaction: their batches may go.
    in_txn: BTreeSet<TopicPartition>,
    /// Partitions with records in this transaction, not yet added.
    new_partitions: BTreeSet<TopicPartition>,
    /// Partitions in the AddPartitionsToTxn in flight.
    adding: BTreeSet<TopicPartition>,
    steps: VecDeque<Step>,
    in_flight: Option<Outgoing>,
    retry_at_ms: u64,
    op: Option<Op>,
    /// A finished call nobody was waiting for (its caller timed out): the next call of the
    /// same kind gets it, as Kafka's producer caches its `TransactionalRequestResult`.
    unclaimed: Option<(Op, Result<(), TxnError>)>,
    /// The coordinator added a partition or offsets to the current transaction.
    txn_started: bool,
}

/// How a call started.
#[derive(Debug, Clone, PartialEq)]
enum Start {
    New,
    Joined,
    Done(Result<(), TxnError>),
}

impl Start {
    fn pending(self) -> Pending {
        match self {
            Start::Done(r) => Pending::Done(r),
            Start::New | Start::Joined => Pending::Waiting,
        }
    }
}

/// A call's state right after it was made.
#[derive(Debug, Clone, PartialEq)]
pub enum Pending {
    /// Finished at once (nothing to send, or a result its earlier caller did not wait for).
    Done(Result<(), TxnError>),
    /// Wait for [`Effects::completed`].
    Waiting,
}

impl TxnManager {
    pub fn new(transactional_id: String, timeout_ms: i32, retry_backoff_ms: u64) -> TxnManager {
        TxnManager {
            transactional_id,
            timeout_ms,
            retry_backoff_ms,
            state: TxnState::Uninitialized,
            identity: None,
            coordinator: None,
            group_coordinators: BTreeMap::new(),
            bump_supported: false,
            version2_offered: false,
            version2: false,
            epoch_bump_required: false,
            last_error: None,
            in_txn: BTreeSet::new(),
            new_partitions: BTreeSet::new(),
            adding: BTreeSet::new(),
            steps: VecDeque::new(),
            in_flight: None,
            retry_at_ms: 0,
            op: None,
            unclaimed: None,
            txn_started: false,
        }
    }

    pub fn state(&self) -> TxnState {
        self.state
    }

    pub fn identity(&self) -> Option<ProducerIdentity> {
        self.identity
    }

    /// Whether the current transaction uses transaction version 2: its Produce requests go
    /// in v12+, which has the leaders add their partitions.
    pub fn version2(&self) -> bool {
        self.version2
    }

    pub fn transactional_id(&self) -> &str {
        &self.transactional_id
    }

    /// A call in progress (the caller may have timed out and call again).
    pub fn pending_op(&self) -> Option<Op> {
        self.op
    }

    /// When a request waits for its backoff: the shell wakes up then.
    pub fn retry_at_ms(&self) -> Option<u64> {
        (self.in_flight.is_none() && self.has_work()).then_some(self.retry_at_ms)
    }

    fn has_work(&self) -> bool {
        !self.steps.is_empty() || !self.new_partitions.is_empty()
    }

    /// Starts a call, or joins the same call already running (its caller timed out and
    /// called again), or hands back its unclaimed result.
    fn start(&mut self, op: Op, allowed: &[TxnState]) -> Result<Start, TxnError> {
        if let Some((done, result)) = self.unclaimed.take() {
            if done == op {
                return Ok(Start::Done(result));
            }
        }
        if self.op == Some(op) {
            return Ok(Start::Joined);
        }
        if self.state == TxnState::FatalError {
            return Err(self.stored_error());
        }
        if self.state == TxnState::AbortableError && op != Op::Abort {
            return Err(self.stored_error());
        }
        if self.op.is_some() || !allowed.contains(&self.state) {
            return Err(TxnError::IllegalState {
                call: op.name(),
                state: self.state,
            });
        }
        self.op = Some(op);
        Ok(Start::New)
    }

    fn stored_error(&self) -> TxnError {
        self.last_error.clone().unwrap_or(TxnError::IllegalState {
            call: "continue",
            state: self.state,
        })
    }

    /// `init_transactions`: a producer id for the transactional id, fencing older instances.
    pub fn init(&mut self) -> Result<Pending, TxnError> {
        let start = self.start(Op::InitTransactions, &[TxnState::Uninitialized])?;
        if start == Start::New {
            self.state = TxnState::Initializing;
            self.steps.push_back(Step::InitProducerId { bump: false });
        }
        Ok(start.pending())
    }

    /// `begin_transaction`: local only; nothing is sent until records or offsets are.
    pub fn begin(&mut self) -> Result<(), TxnError> {
        match self.state {
            TxnState::Ready if self.op.is_none() => {
                self.state = TxnState::InTransaction;
                self.unclaimed = None;
                self.version2 = self.version2_offered;
                Ok(())
            }
            TxnState::FatalError | TxnState::AbortableError => Err(self.stored_error()),
            state => Err(TxnError::IllegalState {
                call: "begin_transaction",
                state,
            }),
        }
    }

    /// A record for `tp` is accepted into the transaction: refused outside one; the partition
    /// is added to the transaction (AddPartitionsToTxn) unless it already is.
    pub fn on_send(&mut self, tp: &TopicPartition) -> Result<(), TxnError> {
        match self.state {
            // Version 2: the leader adds the partition with the first batch.
            TxnState::InTransaction if self.version2 => {
                self.in_txn.insert(tp.clone());
                self.txn_started = true;
                Ok(())
            }
            TxnState::InTransaction => {
                if !self.in_txn.contains(tp) && !self.adding.contains(tp) {
                    self.new_partitions.insert(tp.clone());
                }
                Ok(())
            }
            TxnState::FatalError | TxnState::AbortableError => Err(self.stored_error()),
            state => Err(TxnError::IllegalState {
                call: "send",
                state,
            }),
        }
    }

    /// Whether batches of `tp` may be sent: only once the coordinator added the partition.
    pub fn may_send(&self, tp: &TopicPartition) -> bool {
        self.identity.is_some() && self.in_txn.contains(tp)
    }

    /// Why unsent batches are to be failed, when the transaction is aborting or failed:
    /// Kafka's producer fails its undrained batches then and never sends them.
    pub fn drop_unsent(&self) -> Option<TxnError> {
        match self.state {
            TxnState::AbortingTransaction | TxnState::AbortableError | TxnState::FatalError => {
                Some(self.last_error.clone().unwrap_or_else(|| {
                    TxnError::Abortable(KafkaError::new(
                        TRANSACTION_ABORTABLE,
                        Some("the transaction was aborted".to_string()),
                    ))
                }))
            }
            _ => None,
        }
    }

    /// `send_offsets_to_transaction`: AddOffsetsToTxn to the transaction coordinator, then
    /// TxnOffsetCommit to the group coordinator.
    pub fn send_offsets(
        &mut self,
        offsets: BTreeMap<TopicPartition, i64>,
        group: ConsumerGroupMetadata,
    ) -> Result<Pending, TxnError> {
        let start = self.start(Op::SendOffsets, &[TxnState::InTransaction])?;
        if start == Start::New && self.version2 {
            // The group coordinator has the offsets partition added (TxnOffsetCommit v5).
            self.txn_started = true;
            self.steps.push_back(Step::TxnOffsetCommit(group, offsets));
        } else if start == Start::New {
            self.steps.push_back(Step::AddOffsets(group, offsets));
        }
        Ok(start.pending())
    }

    fn in_flight_is(&self, kind: RequestKind) -> bool {
        self.in_flight
            .as_ref()
            .is_some_and(|o| o.request.kind() == kind)
    }

    /// Whether the coordinator has heard of this transaction (a partition or offsets added,
    /// or being added); if not, ending it needs no EndTxn, as in Kafka's producer.
    fn started(&self) -> bool {
        self.txn_started
            || self.in_flight_is(RequestKind::AddPartitions)
            || self.in_flight_is(RequestKind::AddOffsets)
            || !self.new_partitions.is_empty()
            || !self.steps.is_empty()
    }

    /// `commit_transaction`: EndTxn(commit) once every partition is added and every batch
    /// has its answer (the shell flushes).
    pub fn commit(&mut self) -> Result<Pending, TxnError> {
        let start = self.start(Op::Commit, &[TxnState::InTransaction])?;
        if start != Start::New {
            return Ok(start.pending());
        }
        if !self.started() {
            self.op = None;
            self.state = TxnState::Ready;
            return Ok(Pending::Done(Ok(())));
        }
        self.state = TxnState::CommittingTransaction;
        self.steps.push_back(Step::EndTxn { commit: true });
        Ok(Pending::Waiting)
    }

    /// `abort_transaction`: allowed in a transaction and after an abortable error. Unsent
    /// batches are dropped; EndTxn(abort) waits for those in flight; then, if the broker lost
    /// the producer's sequence, InitProducerId bumps the epoch (KIP-360).
    pub fn abort(&mut self) -> Result<Pending, TxnError> {
        let start = self.start(
            Op::Abort,
            &[TxnState::InTransaction, TxnState::AbortableError],
        )?;
        if start != Start::New {
            return Ok(start.pending());
        }
        self.new_partitions.clear();
        // Offsets not yet committed belong to nothing now.
        self.steps.clear();
        let started = self.started();
        self.state = TxnState::AbortingTransaction;
        let mapping_lost = self
            .last_error
            .as_ref()
            .and_then(TxnError::kafka)
            .is_some_and(|e| e.code == INVALID_PRODUCER_ID_MAPPING);
        // The coordinator refuses EndTxn for a producer id it no longer maps: straight to the
        // bump then, as Kafka's producer does.
        if started && !mapping_lost {
            self.steps.push_back(Step::EndTxn { commit: false });
        }
        if self.epoch_bump_required {
            self.steps.push_back(Step::InitProducerId { bump: true });
        }
        if self.steps.is_empty() && !self.in_flight_is(RequestKind::AddPartitions) {
            self.op = None;
            self.state = TxnState::Ready;
            self.last_error = None;
            return Ok(Pending::Done(Ok(())));
        }
        Ok(Pending::Waiting)
    }

    /// A batch of the transaction failed for good with `code`.
    pub fn on_batch_failed(&mut self, error: &KafkaError) {
        let class = classify(RequestKind::Produce, error.code);
        match self.state {
            TxnState::InTransaction
            | TxnState::CommittingTransaction
            | TxnState::AbortableError => self.fail(class, error.clone()),
            // Batches failing while the transaction aborts are expected; only a fence or a
            // lost sequence matters then.
            TxnState::AbortingTransaction => match class {
                Class::Fatal => self.fail(class, error.clone()),
                Class::AbortableWithBump if self.bump_supported => self.require_bump(),
                _ => {}
            },
            _ => {}
        }
    }

    /// An unsent batch that already had a sequence number was dropped (the transaction is
    /// aborting): the broker's sequence has a hole now, so the abort ends with an epoch bump
    /// where the broker can do one.
    pub fn on_sequence_gap(&mut self) {
        if self.bump_supported && self.state == TxnState::AbortingTransaction {
            self.require_bump();
        }
    }

    /// The abort under way ends with an epoch bump (KIP-360).
    fn require_bump(&mut self) {
        self.epoch_bump_required = true;
        if !self
            .steps
            .iter()
            .any(|s| matches!(s, Step::InitProducerId { .. }))
        {
            self.steps.push_back(Step::InitProducerId { bump: true });
        }
    }

    /// The next request to send, if any: one at a time, and EndTxn only when
    /// `batches_pending` is false (every batch of the transaction has its answer).
    pub fn next_request(&mut self, now: u64, batches_pending: bool) -> Option<Outgoing> {
        if self.in_flight.is_some() || now < self.retry_at_ms || self.state == TxnState::FatalError
        {
            return None;
        }
        let out = self.pick(batches_pending)?;
        self.in_flight = Some(out.clone());
        Some(out)
    }

    fn pick(&mut self, batches_pending: bool) -> Option<Outgoing> {
        let txn_id = self.transactional_id.clone();
        if !self.has_work() {
            return None;
        }
        let step = self.next_step();
        if let Some(Step::TxnOffsetCommit(group, _)) = &step {
            return match self.group_coordinators.get(&group.group_id) {
                Some(&b) => Some(self.outgoing(Some(b), step?)),
                None => Some(Outgoing {
                    broker: None,
                    request: TxnRequest::FindCoordinator {
                        key_type: KEY_TYPE_GROUP,
                        key: group.group_id.clone(),
                    },
                }),
            };
        }
        let Some(coordinator) = self.coordinator else {
            return Some(Outgoing {
                broker: None,
                request: TxnRequest::FindCoordinator {
                    key_type: KEY_TYPE_TRANSACTION,
                    key: txn_id,
                },
            });
        };
        match step {
            // Both end what the batches in flight belong to (a bump renumbers sequences).
            Some(Step::EndTxn { .. } | Step::InitProducerId { bump: true }) if batches_pending => {
                None
            }
            Some(step) => Some(self.outgoing(Some(coordinator), step)),
            None => {
                let identity = self.identity?;
                self.adding = std::mem::take(&mut self.new_partitions);
                Some(Outgoing {
                    broker: Some(coordinator),
                    request: TxnRequest::AddPartitions {
                        transactional_id: txn_id,
                        identity,
                        partitions: self.adding.iter().cloned().collect(),
                    },
                })
            }
        }
    }

    /// The queued step to send next; `None` when AddPartitionsToTxn comes first (it goes
    /// before offsets and EndTxn, after InitProducerId).
    fn next_step(&self) -> Option<Step> {
        match self.steps.front() {
            Some(s @ Step::InitProducerId { .. }) => Some(s.clone()),
            _ if !self.new_partitions.is_empty() && self.identity.is_some() => None,
            s => s.cloned(),
        }
    }

    fn outgoing(&self, broker: Option<i32>, step: Step) -> Outgoing {
        let transactional_id = self.transactional_id.clone();
        let identity = self.identity.unwrap_or(ProducerIdentity {
            producer_id: -1,
            epoch: -1,
        });
        let request = match step {
            Step::InitProducerId { bump } => TxnRequest::InitProducerId {
                transactional_id,
                transaction_timeout_ms: self.timeout_ms,
                current: if bump { self.identity } else { None },
            },
            Step::AddOffsets(group, _) => TxnRequest::AddOffsets {
                transactional_id,
                identity,
                group_id: group.group_id,
            },
            Step::TxnOffsetCommit(group, offsets) => TxnRequest::TxnOffsetCommit {
                transactional_id,
                identity,
                group,
                offsets,
                version2: self.version2,
            },
            Step::EndTxn { commit } => TxnRequest::EndTxn {
                transactional_id,
                identity,
                commit,
                version2: self.version2,
            },
        };
        Outgoing { broker, request }
    }

    /// The answer to the request in flight.
    pub fn on_response(&mut self, now: u64, response: TxnResponse) -> Effects {
        let mut fx = Effects::default();
        let Some(sent) = self.in_flight.take() else {
            return fx;
        };
        let kind = sent.request.kind();
        let result = match response {
            TxnResponse::NoResponse(reason) => {
                tracing::debug!(transactional_id = %self.transactional_id, ?kind, reason, "no answer; coordinator looked up again");
                self.forget_coordinator(&sent.request);
                self.back_off(now);
                Ok(())
            }
            TxnResponse::Coordinator(r) => self.on_coordinator(now, &sent.request, r),
            TxnResponse::ProducerId(r, offered) => {
                if r.is_ok() {
                    self.bump_supported = offered.epoch_bump;
                    self.version2_offered = offered.version2;
                }
                self.on_producer_id(now, &sent.request, r, &mut fx)
            }
            TxnResponse::PartitionsAdded(parts) => self.on_partitions_added(now, &sent, parts),
            TxnResponse::OffsetsAdded(r) => self.on_offsets_added(now, &sent.request, r),
            TxnResponse::OffsetsCommitted(parts) => {
                self.on_offsets_committed(now, &sent.request, parts)
            }
            TxnResponse::Ended(r) => self.on_ended(now, &sent.request, r, &mut fx),
        };
        if let Err(e) = result {
            self.fail(classify(kind, e.code), e);
        }
        fx.completed = self.finish_op();
        fx
    }

    fn back_off(&mut self, now: u64) {
        self.retry_at_ms = now + self.retry_backoff_ms;
    }

    fn forget_coordinator(&mut self, request: &TxnRequest) {
        match request {
            TxnRequest::TxnOffsetCommit { group, .. } => {
                self.group_coordinators.remove(&group.group_id);
            }
            TxnRequest::FindCoordinator { .. } => {}
            _ => self.coordinator = None,
        }
    }

    /// A failed answer: retried, or the transaction (or producer) fails.
    fn retry_or(
        &mut self,
        now: u64,
        kind: RequestKind,
        request: &TxnRequest,
        e: KafkaError,
    ) -> Result<(), KafkaError> {
        match classify(kind, e.code) {
            Class::Retry => {
                self.back_off(now);
                Ok(())
            }
            Class::FindCoordinator => {
                self.forget_coordinator(request);
                self.back_off(now);
                Ok(())
            }
            _ => Err(e),
        }
    }

    fn on_coordinator(
        &mut self,
        now: u64,
        request: &TxnRequest,
        r: Result<i32, KafkaError>,
    ) -> Result<(), KafkaError> {
        let TxnRequest::FindCoordinator { key_type, key } = request else {
            return Ok(());
        };
        match r {
            Ok(node) if *key_type == KEY_TYPE_GROUP => {
                self.group_coordinators.insert(key.clone(), node);
                Ok(())
            }
            Ok(node) => {
                self.coordinator = Some(node);
                Ok(())
            }
            // Not there yet (Kafka retries COORDINATOR_NOT_AVAILABLE from FindCoordinator).
            Err(e) if classify(RequestKind::FindCoordinator, e.code) == Class::FindCoordinator => {
                self.back_off(now);
                Ok(())
            }
            Err(e) => self.retry_or(now, RequestKind::FindCoordinator, request, e),
        }
    }

    fn on_producer_id(
        &mut self,
        now: u64,
        request: &TxnRequest,
        r: Result<ProducerIdentity, KafkaError>,
        fx: &mut Effects,
    ) -> Result<(), KafkaError> {
        match r {
            Ok(identity) => {
                self.steps.pop_front();
                self.identity = Some(identity);
                self.epoch_bump_required = false;
                self.last_error = None;
                self.in_txn.clear();
                self.txn_started = false;
                self.state = TxnState::Ready;
                fx.identity = Some(identity);
                Ok(())
            }
            Err(e) => self.retry_or(now, RequestKind::InitProducerId, request, e),
        }
    }

    fn on_partitions_added(
        &mut self,
        now: u64,
        sent: &Outgoing,
        parts: Vec<(TopicPartition, Result<(), KafkaError>)>,
    ) -> Result<(), KafkaError> {
        let adding = std::mem::take(&mut self.adding);
        let mut retry = false;
        let mut failure = None;
        for (tp, r) in parts {
            match r {
                Ok(()) => {
                    self.txn_started = true;
                    self.in_txn.insert(tp);
                }
                Err(e) => match classify(RequestKind::AddPartitions, e.code) {
                    Class::Ignore => {}
                    Class::Retry | Class::FindCoordinator => {
                        retry = true;
                        if classify(RequestKind::AddPartitions, e.code) == Class::FindCoordinator {
                            self.forget_coordinator(&sent.request);
                        }
                    }
                    _ => failure = failure.or(Some(e)),
                },
            }
        }
        if let Some(e) = failure {
            return Err(e);
        }
        // Whatever was not added goes into the next request (an answer that left a partition
        // out counts as not added).
        let missing: Vec<TopicPartition> = adding
            .into_iter()
            .filter(|tp| !self.in_txn.contains(tp))
            .collect();
        if matches!(
            self.state,
            TxnState::InTransaction | TxnState::CommittingTransaction
        ) {
            self.new_partitions.extend(missing);
        }
        if retry {
            self.back_off(now);
        }
        Ok(())
    }

    fn on_offsets_added(
        &mut self,
        now: u64,
        request: &TxnRequest,
        r: Result<(), KafkaError>,
    ) -> Result<(), KafkaError> {
        match r {
            Ok(()) => {
                self.txn_started = true;
                if let Some(Step::AddOffsets(group, offsets)) = self.steps.pop_front() {
                    self.steps.push_front(Step::TxnOffsetCommit(group, offsets));
                }
                Ok(())
            }
            Err(e) => self.retry_or(now, RequestKind::AddOffsets, request, e),
        }
    }

    fn on_offsets_committed(
        &mut self,
        now: u64,
        request: &TxnRequest,
        parts: Vec<(TopicPartition, Result<(), KafkaError>)>,
    ) -> Result<(), KafkaError> {
        let mut retry = false;
        let mut committed = Vec::new();
        for (tp, r) in parts {
            match r {
                Ok(()) => committed.push(tp),
                Err(e) => {
                    self.retry_or(now, RequestKind::TxnOffsetCommit, request, e)?;
                    retry = true;
                }
            }
        }
        if let Some(Step::TxnOffsetCommit(_, offsets)) = self.steps.front_mut() {
            for tp in committed {
                offsets.remove(&tp);
            }
            // Only the partitions that failed retriably are sent again.
            if !retry || offsets.is_empty() {
                self.steps.pop_front();
            }
        }
        Ok(())
    }

    fn on_ended(
        &mut self,
        now: u64,
        request: &TxnRequest,
        r: Result<Option<ProducerIdentity>, KafkaError>,
        fx: &mut Effects,
    ) -> Result<(), KafkaError> {
        match r {
            Ok(next) => {
                // Version 2: the decision bumped the epoch (or moved to a new producer id).
                if let Some(next) = next.filter(|n| Some(*n) != self.identity) {
                    self.identity = Some(next);
                    fx.identity = Some(next);
                }
                self.steps.pop_front();
                self.in_txn.clear();
                self.txn_started = false;
                if !self
                    .steps
                    .iter()
                    .any(|s| matches!(s, Step::InitProducerId { .. }))
                {
                    self.state = TxnState::Ready;
                    self.last_error = None;
                }
                Ok(())
            }
            Err(e) => self.retry_or(now, RequestKind::EndTxn, request, e),
        }
    }

    /// Moves to AbortableError or FatalError as `class` says.
    fn fail(&mut self, class: Class, e: KafkaError) {
        let abortable = match class {
            Class::Abortable => true,
            Class::AbortableWithBump if self.bump_supported => {
                self.epoch_bump_required = true;
                true
            }
            Class::Retry | Class::FindCoordinator | Class::Ignore => return,
            Class::AbortableWithBump | Class::Fatal => false,
        };
        // Failing during init or an abort leaves nothing to abort into: fatal.
        let in_txn = matches!(
            self.state,
            TxnState::InTransaction | TxnState::CommittingTransaction | TxnState::AbortableError
        );
        if abortable && in_txn {
            tracing::warn!(transactional_id = %self.transactional_id, error = %e, "transaction must be aborted");
            self.last_error = Some(TxnError::Abortable(e));
            self.state = TxnState::AbortableError;
            // What was queued for this transaction will not be sent.
            self.steps.clear();
            self.new_partitions.clear();
        } else if abortable
            && self.state == TxnState::AbortingTransaction
            && self.epoch_bump_required
        {
            // The abort cannot end with EndTxn (the broker lost the producer id): the epoch
            // bump ends it instead.
            self.steps.clear();
            self.require_bump();
            self.last_error = Some(TxnError::Abortable(e));
        } else {
            tracing::error!(transactional_id = %self.transactional_id, error = %e, state = %self.state, "transactional producer failed");
            self.last_error = Some(TxnError::Fatal(e));
            self.state = TxnState::FatalError;
            self.steps.clear();
            self.new_partitions.clear();
        }
    }

    /// The call in progress, if it is finished now.
    fn finish_op(&mut self) -> Option<(Op, Result<(), TxnError>)> {
        let op = self.op?;
        let result = match (op, self.state) {
            (_, TxnState::FatalError) => Err(self.stored_error()),
            (Op::Commit | Op::SendOffsets, TxnState::AbortableError) => Err(self.stored_error()),
            (Op::InitTransactions | Op::Commit | Op::Abort, TxnState::Ready) => Ok(()),
            (Op::SendOffsets, TxnState::InTransaction)
                if !self
                    .steps
                    .iter()
                    .any(|s| matches!(s, Step::AddOffsets(..) | Step::TxnOffsetCommit(..)))
                    && !self.in_flight_is(RequestKind::TxnOffsetCommit)
                    && !self.in_flight_is(RequestKind::AddOffsets) =>
            {
                Ok(())
            }
            _ => return None,
        };
        self.op = None;
        Some((op, result))
    }

    /// The shell had nobody to give a finished call's result to.
    pub fn unclaimed(&mut self, op: Op, result: Result<(), TxnError>) {
        self.unclaimed = Some((op, result));
    }
}
