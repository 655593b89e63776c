//! The records of a run: what the clients and the driver saw, shared by the workloads that
//! write them, the driver and the checkers that read them.

use std::collections::{BTreeMap, BTreeSet};

use crate::node::now_ms;
use crate::ops::{Op, Reply};
use crate::property::Violation;

/// The data topic of a replicated run.
pub const TOPIC: &str = "data";
pub const PARTITIONS: i32 = 2;

/// One operation as the client saw it.
#[derive(Debug, Clone)]
pub struct OpRecord {
    pub id: usize,
    pub op: Op,
    pub end_ms: u64,
    /// Some attempt failed in a way that may still have committed it (timeout, lost
    /// connection): a later attempt may then see its effect.
    pub indeterminate: bool,
    /// The acknowledged answer, if any attempt got one.
    pub reply: Option<Reply>,
}

/// The history of a run, shared by the workload and the driver.
#[derive(Debug, Default)]
pub struct History {
    pub ops: Vec<OpRecord>,
    pub trace: Vec<String>,
    /// Set by the driver once every fault has ended and healed.
    pub faults_over: bool,
    /// The write sent after the faults ended: when it was sent and acknowledged.
    pub final_write: Option<(u64, Option<u64>)>,
    /// Whether that write created its topic (it cannot when no broker is unfenced).
    pub final_created: bool,
    pub done: bool,
    /// What the data workload of a replicated run saw.
    pub data: DataHistory,
}

impl History {
    /// Records an event at simulated time `at_ms`.
    pub fn event_at(&mut self, at_ms: u64, msg: impl AsRef<str>) {
        let line = format!("{at_ms:>7} {}", msg.as_ref());
        self.trace.push(line);
    }

    /// Records an event from inside the simulation (at the current simulated time).
    pub fn event(&mut self, msg: impl AsRef<str>) {
        let line = format!("{:>7} {}", now_ms(), msg.as_ref());
        self.trace.push(line);
    }
}

/// A batch a producer had acknowledged.
#[derive(Debug, Clone)]
pub struct Acked {
    pub partition: i32,
    /// The node that answered (the leader the producer sent to).
    pub leader: i32,
    pub base_offset: i64,
    pub values: Vec<String>,
    pub at_ms: u64,
}

/// One record a consumer fetch returned.
#[derive(Debug, Clone)]
pub struct Read {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
    /// The high watermark the same response reported.
    pub high_watermark: i64,
    /// Whether it directly follows the fetch offset or the record before it in the response.
    pub contiguous: bool,
    /// The final pass after the faults (a fresh read of the whole log).
    pub final_pass: bool,
    pub at_ms: u64,
}

/// A high watermark one consumer fetch reported, with the leader epoch the fetch named (the
/// leader checks it, so the answer comes from that epoch).
#[derive(Debug, Clone)]
pub struct HwSeen {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub at_ms: u64,
}

/// A data partition's leader epoch as the driver first saw it in some node's metadata.
#[derive(Debug, Clone)]
pub struct EpochSeen {
    pub partition: i32,
    pub leader_epoch: i32,
    pub leader: i32,
    pub at_ms: u64,
}

#[derive(Debug, Default)]
pub struct DataHistory {
    pub acked_all: Vec<Acked>,
    pub acked_one: Vec<Acked>,
    /// Every value any producer sent (acknowledged or not).
    pub sent: std::collections::BTreeSet<String>,
    pub reads: Vec<Read>,
    pub hws: Vec<HwSeen>,
    /// Each leader epoch of a data partition, when some node's metadata first showed it.
    pub leader_epochs: Vec<EpochSeen>,
    /// The idempotent producer's first acknowledgement of a batch sent after the faults.
    pub first_ack_after_faults: Option<u64>,
    /// When the final pass had read past every acknowledged `acks=all` record.
    pub final_pass_done: Option<u64>,
    pub producers_done: bool,
    /// `--admin` runs: a reassignment that had not completed within the bound after the
    /// faults (what the partitions' replicas were instead).
    pub reassignment_stuck: Option<String>,
    /// `--groups` runs: what the consumer group's members owned, read and committed.
    pub group: GroupHistory,
    /// `--topic-admin` runs: side topics that did not settle as acknowledged (`topics.rs`).
    pub topic_violations: Vec<Violation>,
    /// `--acls` runs: ACLs that did not settle as acknowledged (`acls.rs`).
    pub acl_violations: Vec<Violation>,
    /// `--quotas` runs: client quotas that did not settle as acknowledged (`quotas.rs`).
    pub quota_violations: Vec<Violation>,
    /// `--transactions` runs: what the transactional producers were told and what the
    /// read_committed consumer read (`txn.rs`).
    pub txn: TxnHistory,
}

impl DataHistory {
    /// The offset past every acknowledged `acks=all` record of `partition` (0 if none).
    pub fn acked_all_end(&self, partition: i32) -> i64 {
        self.acked_all
            .iter()
            .filter(|a| a.partition == partition)
            .map(|a| a.base_offset + a.values.len() as i64)
            .max()
            .unwrap_or(0)
    }
}

/// What one member owned in one generation, as its consumer reported it after a `poll`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Owned {
    /// The member's incarnation ("m1.2": member 1, second consumer).
    pub consumer: String,
    pub member_id: String,
    pub generation: i32,
    pub partitions: BTreeSet<i32>,
    pub at_ms: u64,
}

/// A record a member's `poll` returned.
#[derive(Debug, Clone)]
pub struct GroupRead {
    pub consumer: String,
    pub member_id: String,
    pub generation: i32,
    pub partition: i32,
    pub offset: i64,
    pub value: String,
    /// The highest high watermark the member's consumer had reported for the partition by
    /// then (its cached one, sampled after every `poll` of the incarnation): a record at or
    /// above it was read above the high watermark of the answer that carried it.
    pub high_watermark: Option<i64>,
    pub at_ms: u64,
}

/// An offset commit the coordinator acknowledged.
#[derive(Debug, Clone)]
pub struct Commit {
    pub consumer: String,
    pub generation: i32,
    pub partition: i32,
    pub offset: i64,
    pub at_ms: u64,
}

/// What the group workload saw.
#[derive(Debug, Default)]
pub struct GroupHistory {
    pub strategy: String,
    /// Static members: an incarnation may take its predecessor's place, and assignment, in
    /// the same generation (its member id replaces the other's at the coordinator).
    pub static_members: bool,
    /// `group.protocol=consumer`: the generations recorded are member epochs.
    pub consumer_protocol: bool,
    /// `--group-protocol mixed`: classic and consumer-protocol incarnations share the group.
    pub mixed_protocols: bool,
    pub owned: Vec<Owned>,
    pub reads: Vec<GroupRead>,
    /// In the order the acknowledgements arrived.
    pub commits: Vec<Commit>,
    /// When the group had committed past every acknowledged `acks=all` record.
    pub done_at: Option<u64>,
    /// Why the group did not get there within the bound, if it did not.
    pub stuck: Option<String>,
}

/// The topic the transactional producers write (`--transactions`): the data topic's readers
/// assume no transactions, so they keep their own.
pub const TXN_TOPIC: &str = "txns";
pub const TXN_PARTITIONS: i32 = 3;

/// How a transaction ended, as far as its producer can tell.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnOutcome {
    /// EndTxn commit acknowledged: every record visible, once.
    Committed,
    /// EndTxn abort acknowledged, or the transaction never asked to commit (its producer
    /// re-initialised, which aborts it, or was fenced): no record visible.
    Aborted,
    /// EndTxn commit sent but never answered (or refused after an attempt whose answer was
    /// lost): all or nothing.
    Unknown,
}

/// One transaction of one producer incarnation.
#[derive(Debug, Clone)]
pub struct TxnRecord {
    /// The incarnation, e.g. "t1.2" (transactional id 1, its second client).
    pub client: String,
    pub producer_id: i64,
    pub epoch: i16,
    /// Every value a Produce of this transaction carried (answered or not), with its partition.
    pub values: Vec<(i32, String)>,
    pub outcome: TxnOutcome,
    /// The consumer offset this transaction committed with TxnOffsetCommit (acknowledged),
    /// with its group; `None` if it committed none.
    pub offset: Option<(String, i64)>,
    /// The transaction version its producer spoke (1, or 2: KIP-890 part 2).
    pub version: u8,
    /// Version 2: the producer id and epoch EndTxn v5 answered for the next transaction.
    pub next_identity: Option<(i64, i16)>,
}

/// An OffsetFetch of a group made while a transaction that committed an offset to it was
/// still open (`txn_offsets.rs`): it must not give out the pending offset.
#[derive(Debug, Clone)]
pub struct OffsetProbe {
    pub client: String,
    pub group: String,
    /// The open transaction's offset.
    pub pending: i64,
    pub require_stable: bool,
    /// The committed offset answered, or the error code (`None`: no answer).
    pub answer: Option<Result<i64, i16>>,
}

/// What the transactional workload saw.
#[derive(Debug, Default)]
pub struct TxnHistory {
    pub txns: Vec<TxnRecord>,
    /// Values a fenced incarnation sent after a newer one of its transactional id had
    /// initialised, with the client: none may be visible.
    pub fenced_values: Vec<(String, String)>,
    /// A fenced incarnation's acknowledged Produce or EndTxn (each must be refused).
    pub fenced_acks: Vec<String>,
    /// Late retries of a version-2 transaction's batch (sent after it ended and its marker
    /// was written) or EndTxn (once the next was open) that were acknowledged (each must be
    /// refused).
    pub late_retry_acks: Vec<String>,
    /// The read_committed consumer's final pass: (partition, offset, value).
    pub committed_reads: Vec<(i32, i64, String)>,
    /// Why the partitions' last stable offsets did not reach their high watermarks in time.
    pub lso_stuck: Option<String>,
    /// Whether the final read_committed pass ran to the end of every partition.
    pub read_done: bool,
    /// OffsetFetches made while a transaction's offset was pending.
    pub offset_probes: Vec<OffsetProbe>,
    /// Each group's committed offset read (stable) after the producers were done; -1 for
    /// none. A group missing was not read.
    pub final_offsets: BTreeMap<String, i64>,
}
