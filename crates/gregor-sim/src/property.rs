//! The properties a run is held to and the violations the checkers report.

use std::fmt;

use serde::{Deserialize, Serialize};

/// A property the checker holds the run to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Property {
    /// Every acknowledged write is in every node's final image.
    AckedWriteLost,
    /// An acknowledged answer that no history explains (for example "already exists" for a
    /// topic nobody created).
    WrongAnswer,
    /// After healing, every node applied the same index and holds the same image.
    ImagesDiverge,
    /// No two nodes apply different entries at the same log index (Raft's state machine
    /// safety). openraft 0.9 (without `single-term-leader`) orders leaders by (term, node id),
    /// so two leaders in one term are legal there; what must never happen is two different
    /// entries committed at one index.
    AppliedEntriesDiffer,
    /// A node's applied metadata never goes backwards while it runs.
    AppliedWentBack,
    /// A voter's Raft term (kept with its vote on its disk) went back, across a restart or
    /// not: it could then vote twice in one term.
    TermWentBack,
    /// After the faults stop, a write commits and every node applies it within the bound.
    Liveness,
    /// A node restarted on its own files.
    NodeFailedToStart,
    /// Replicated runs: an acknowledged `acks=all` record is not at its acknowledged offset
    /// with its value when the log is read again after the faults.
    AckedRecordLost,
    /// Replicated runs: a consumer read two different records at one offset.
    OffsetHoldsTwoRecords,
    /// Replicated runs: a consumer fetch skipped offsets.
    ReadGap,
    /// Replicated runs: a consumer was given a record at or above the high watermark.
    ReadAboveHighWatermark,
    /// Replicated runs: a consumer read a record no producer sent.
    RecordNeverSent,
    /// Replicated runs: the high watermark reported in one leader epoch went back.
    HighWatermarkWentBack,
    /// Replicated runs: two nodes' metadata named different leaders for one partition and
    /// leader epoch.
    TwoLeadersInEpoch,
    /// Replicated runs: a record of the idempotent producer is in the log twice.
    IdempotentDuplicate,
    /// `--power-loss` runs: a file in a node's data directory was created or written without
    /// going through the simulated disk, so the power model cannot tell what survives.
    DiskBypassed,
    /// `--groups` runs: two members owned one partition in one generation.
    TwoOwnersInGeneration,
    /// `--groups` runs: an acknowledged offset commit moved a partition's committed offset
    /// back.
    CommittedOffsetWentBack,
    /// `--groups` runs: an offset below a committed one was never given to any member.
    GroupSkippedRecords,
    /// `--groups --group-protocol consumer` runs: a member incarnation saw its member epoch
    /// go back.
    MemberEpochWentBack,
    /// `--topic-admin` runs: after the faults, a node's open side-topic logs are not the ones
    /// its metadata assigns it (a deleted topic's log left, an added partition's missing).
    HostedLogsDiffer,
    /// Replicated runs: the controller fenced a broker that had been up, unpaused and with
    /// every link working for longer than its session (see `fence_check.rs`).
    HealthyBrokerFenced,
    /// Replicated runs: at the end, an in-sync follower's log is not its leader's, byte for
    /// byte, below the leader's high watermark (`replica_logs.rs`).
    ReplicaLogsDiverge,
    /// `--transactions` runs: a record of an aborted (or fenced) transaction is visible to a
    /// read_committed consumer.
    TxnAbortedVisible,
    /// `--transactions` runs: a record of an acknowledged commit is not visible to a
    /// read_committed consumer exactly once.
    TxnCommittedLost,
    /// `--transactions` runs: a transaction of unknown outcome is visible in part.
    TxnNotAtomic,
    /// `--transactions` runs: a write or EndTxn of a fenced producer epoch was accepted.
    TxnFencedAccepted,
    /// `--transactions` runs: after the faults, a partition's last stable offset did not reach
    /// its high watermark (a hanging transaction).
    LsoStuck,
    /// `--transactions` runs: an OffsetFetch gave out a consumer offset committed in a
    /// transaction that was still open (before its marker).
    TxnOffsetsEarly,
    /// `--transactions` runs: after the faults, a group's committed offset is not the one of
    /// its last committed transaction (or of a later one of unknown outcome): an aborted
    /// transaction's offset, or a committed one lost.
    TxnOffsetsLost,
    /// `--transactions` runs: a transaction-version-2 batch sent again after its transaction
    /// ended and its partition's marker was written (old epoch, same sequence), or a late copy
    /// of its EndTxn once the next transaction was open, was acknowledged.
    TxnLateRetryAccepted,
}

impl fmt::Display for Property {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            Property::AckedWriteLost => "acked-write-lost",
            Property::HostedLogsDiffer => "hosted-logs-differ",
            Property::HealthyBrokerFenced => "healthy-broker-fenced",
            Property::ReplicaLogsDiverge => "replica-logs-diverge",
            Property::WrongAnswer => "wrong-answer",
            Property::ImagesDiverge => "images-diverge",
            Property::AppliedEntriesDiffer => "applied-entries-differ",
            Property::AppliedWentBack => "applied-went-back",
            Property::TermWentBack => "term-went-back",
            Property::Liveness => "liveness",
            Property::NodeFailedToStart => "node-failed-to-start",
            Property::AckedRecordLost => "acked-record-lost",
            Property::OffsetHoldsTwoRecords => "offset-holds-two-records",
            Property::ReadGap => "read-gap",
            Property::ReadAboveHighWatermark => "read-above-high-watermark",
            Property::RecordNeverSent => "record-never-sent",
            Property::HighWatermarkWentBack => "high-watermark-went-back",
            Property::TwoLeadersInEpoch => "two-leaders-in-epoch",
            Property::IdempotentDuplicate => "idempotent-duplicate",
            Property::DiskBypassed => "disk-bypassed",
            Property::TwoOwnersInGeneration => "two-owners-in-generation",
            Property::CommittedOffsetWentBack => "committed-offset-went-back",
            Property::GroupSkippedRecords => "group-skipped-records",
            Property::MemberEpochWentBack => "member-epoch-went-back",
            Property::TxnAbortedVisible => "txn-aborted-visible",
            Property::TxnCommittedLost => "txn-committed-lost",
            Property::TxnNotAtomic => "txn-not-atomic",
            Property::TxnFencedAccepted => "txn-fenced-accepted",
            Property::LsoStuck => "lso-stuck",
            Property::TxnOffsetsEarly => "txn-offsets-early",
            Property::TxnOffsetsLost => "txn-offsets-lost",
            Property::TxnLateRetryAccepted => "txn-late-retry-accepted",
        };
        f.write_str(s)
    }
}

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Violation {
    pub property: Property,
    pub detail: String,
}

impl Violation {
    pub fn new(property: Property, detail: impl Into<String>) -> Self {
        Violation {
            property,
            detail: detail.into(),
        }
    }
}
