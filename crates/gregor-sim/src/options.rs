//! The vocabulary of a run shared by the driver, the workloads and the checkers: its
//! options, the bugs it can plant and its outcome.

use serde::{Deserialize, Serialize};

use crate::property::Violation;

/// A classic quorum bug the simulator can plant (in its own layer, never in the broker) to
/// show that the checker finds it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
pub enum PlantedBug {
    /// A node acknowledges a write it decided and appended but that did not commit in time.
    AckUncommitted,
    /// A node forgets its vote (and term) when it restarts: its vote file is reset to empty.
    ForgetVote,
    /// Replicated runs: a partition leader takes the high watermark as the largest durable log
    /// end over the ISR instead of the smallest (planted in the broker through
    /// `gregor_broker::simulation::plant_on_this_thread`, which only a simulation can use).
    HighWatermarkMax,
    /// Replicated runs: a follower truncates to its high watermark instead of using the
    /// leader's epochs (Kafka before KIP-101).
    TruncateToHighWatermark,
    /// Replicated runs: a leader applies its own ISR shrink before the controller commits it.
    IsrShrinkBeforeCommit,
    /// Replicated runs: a follower does not sync fetched batches before its next fetch tells
    /// the leader it has them (found by `--power-loss` runs).
    SkipFollowerSync,
    /// `--groups` runs: the group coordinator answers a follower's SyncGroup that arrives
    /// before the leader's assignment with the follower's assignment of the previous
    /// generation.
    StaleSyncAssignment,
    /// Replicated runs: the controller's liveness probe (on taking over, or when a broker's
    /// heartbeat connection closes) takes a listening broker for gone and fences it.
    ProbeFencesLive,
    /// Replicated runs: a follower stamps the batches it fetches with its current leader
    /// epoch, so its log leaves the leader's below the high watermark without it ever being
    /// elected (found by `replica-logs-diverge` only).
    FollowerRestampsEpoch,
    /// Replicated runs: a leader serves consumers up to its log end instead of its high
    /// watermark (found by `read-above-high-watermark`).
    ConsumerReadsUncommitted,
    /// Replicated runs: a follower appends fetched batches without recording their idempotent
    /// producers, so once it leads it writes a producer's retry of a batch it already holds a
    /// second time (found by `idempotent-duplicate`).
    FollowerForgetsProducers,
    /// `--groups` runs: a group coordinator loading a `__consumer_offsets` partition keeps the
    /// first commit of each group's partition instead of the last, so after the coordinator
    /// moves members resume from an old offset (found by `committed-offset-went-back`).
    ReplayKeepsFirstCommit,
    /// `--groups --group-protocol consumer` runs: a group coordinator loading a
    /// `__consumer_offsets` partition keeps each consumer group's first group epoch and target
    /// epoch instead of the last, so after the coordinator moves the next target takes the
    /// members' epochs back (found by `member-epoch-went-back`).
    ConsumerReplayKeepsFirstEpoch,
    /// `--groups --group-protocol mixed` runs: a classic group upgraded to a consumer group
    /// forgets what its classic members own, so the coordinator gives their partitions to the
    /// consumer-protocol member at once, and both commit them (found by
    /// `committed-offset-went-back`).
    UpgradeDropsAssignment,
    /// `--groups` runs: the group coordinator answers OffsetFetch with the offset after the
    /// committed one, so a member resuming from it skips a record (found by
    /// `group-skipped-records`).
    FetchPastCommit,
    /// Replicated runs: the metadata image keeps the leader epoch on an election that also
    /// sets the ISR, so two brokers lead one epoch in turn (found by `two-leaders-in-epoch`).
    ElectionKeepsLeaderEpoch,
    /// Quorum runs: taking a snapshot first resets a node's state machine to its previous
    /// snapshot (gregor-quorum's `simulation`), so its applied index goes back (found by
    /// `applied-went-back`).
    ReloadStaleSnapshot,
    /// Quorum runs: a restarted voter takes its log end for committed (gregor-quorum's
    /// `simulation`) and applies a deposed leader's entries that never committed (found by
    /// `applied-entries-differ`).
    CommittedIsLogEnd,
    /// Quorum runs: snapshots leave out the partitions' leader and partition epochs
    /// (gregor-quorum's `simulation`), so a node restarted from one holds another image than
    /// its peers at the same index (found by `images-diverge`).
    SnapshotWithoutEpochs,
    /// Quorum runs: a node retries a write that timed out on the client's behalf instead of
    /// answering that its outcome is unknown, so a creation that did commit is answered with
    /// the retry's TopicAlreadyExists (found by `wrong-answer`).
    RetryTimedOutWrite,
    /// Replicated runs: the producers' batch encoder reuses its value buffer without clearing
    /// it (gregor-client's `simulation`), so a record carries the values before it in its batch
    /// (found by `record-never-sent`).
    ReuseValueBuffer,
    /// `--groups` runs: the group members' decoder drops the last record of a batch of several
    /// (gregor-client's `simulation`) while their position moves past the batch (found by
    /// `read-gap`).
    DecoderDropsLastRecord,
    /// `--topic-admin` runs: a restarting broker keeps the partition logs its caught-up
    /// metadata no longer gives it (a side topic deleted while it was down), so it hosts logs
    /// of a deleted topic (found by `hosted-logs-differ`).
    StrayLogsKept,
    /// `--acls` runs: a broker acknowledges an ACL change once the controller has committed it,
    /// before its own image applies it, so it describes (and enforces) the ACLs from before
    /// the change it acknowledged (found by `wrong-answer`).
    AclAckBeforeApplied,
    /// `--quotas` runs: a broker acknowledges an AlterClientQuotas once the controller has
    /// committed it, before its own image applies it, so it describes (and throttles by) the
    /// quotas from before the change it acknowledged (found by `wrong-answer`).
    QuotaAckBeforeApplied,
    /// Replicated runs: a follower names its current log end in a fetch it planned in an
    /// earlier leader epoch, so a deposed leader counts a new leader's own records as copies
    /// of its own and commits records the new leader never had (found by
    /// `offset-holds-two-records`, seed 1328 with every flag).
    FetchPositionPastEpoch,
    /// The active controller answers an operation that writes no records from its own image
    /// without a quorum round confirming it still leads (gregor-quorum's `simulation`): a
    /// deposed leader cut off from the others acknowledges a change as a no-op that the new
    /// leader's history never saw (found by `acked-write-lost`, seed 1467 with every flag: a
    /// quota removal).
    DecideUnconfirmed,
    /// `--transactions` runs: a read_committed fetch leaves out the aborted-transactions list,
    /// so the consumer reads aborted records (found by `txn-aborted-visible`).
    TxnAbortVisible,
    /// `--transactions` runs: a partition leader accepts (without verifying it with the
    /// coordinator) a transactional batch of an older producer epoch, so a fenced zombie's
    /// write lands (found by `txn-fenced-accepted`).
    TxnFencedProduce,
    /// `--transactions` runs: the group coordinator makes a TxnOffsetCommit's offsets visible
    /// at once, before the transaction's marker (found by `txn-offsets-early`).
    TxnOffsetsEarly,
    /// `--transactions` runs: the transaction coordinator sends a decision's markers before
    /// its PrepareCommit/PrepareAbort record is durable, so a failover can leave a transaction
    /// half committed (found by `txn-not-atomic` and its neighbours).
    TxnMarkerBeforePrepare,
    /// `--transactions` runs: the transaction coordinator acknowledges any EndTxn v5 from the
    /// epoch before the bump as a retry of its last decision, even once the next transaction
    /// is open (found by `txn-late-retry-accepted`).
    TxnV2AnyRetry,
}

impl PlantedBug {
    /// Every bug, by its command-line name.
    pub const ALL: [(&'static str, PlantedBug); 32] = [
        ("ack-uncommitted", PlantedBug::AckUncommitted),
        ("forget-vote", PlantedBug::ForgetVote),
        ("hw-max", PlantedBug::HighWatermarkMax),
        ("truncate-to-hw", PlantedBug::TruncateToHighWatermark),
        ("isr-shrink-early", PlantedBug::IsrShrinkBeforeCommit),
        ("skip-follower-fsync", PlantedBug::SkipFollowerSync),
        ("stale-sync", PlantedBug::StaleSyncAssignment),
        ("probe-fences-live", PlantedBug::ProbeFencesLive),
        ("restamp-epoch", PlantedBug::FollowerRestampsEpoch),
        ("read-uncommitted", PlantedBug::ConsumerReadsUncommitted),
        (
            "follower-forgets-producers",
            PlantedBug::FollowerForgetsProducers,
        ),
        (
            "replay-keeps-first-commit",
            PlantedBug::ReplayKeepsFirstCommit,
        ),
        (
            "consumer-replay-first-epoch",
            PlantedBug::ConsumerReplayKeepsFirstEpoch,
        ),
        (
            "upgrade-drops-assignment",
            PlantedBug::UpgradeDropsAssignment,
        ),
        ("fetch-past-commit", PlantedBug::FetchPastCommit),
        ("election-keeps-epoch", PlantedBug::ElectionKeepsLeaderEpoch),
        ("reload-stale-snapshot", PlantedBug::ReloadStaleSnapshot),
        ("committed-is-log-end", PlantedBug::CommittedIsLogEnd),
        ("snapshot-without-epochs", PlantedBug::SnapshotWithoutEpochs),
        ("retry-timed-out-write", PlantedBug::RetryTimedOutWrite),
        ("reuse-value-buffer", PlantedBug::ReuseValueBuffer),
        ("drop-last-record", PlantedBug::DecoderDropsLastRecord),
        ("keep-stray-logs", PlantedBug::StrayLogsKept),
        ("ack-acl-unapplied", PlantedBug::AclAckBeforeApplied),
        ("ack-quota-unapplied", PlantedBug::QuotaAckBeforeApplied),
        ("stale-fetch-position", PlantedBug::FetchPositionPastEpoch),
        ("decide-unconfirmed", PlantedBug::DecideUnconfirmed),
        ("txn-abort-visible", PlantedBug::TxnAbortVisible),
        ("txn-fenced-produce", PlantedBug::TxnFencedProduce),
        ("txn-offsets-early", PlantedBug::TxnOffsetsEarly),
        (
            "txn-marker-before-prepare",
            PlantedBug::TxnMarkerBeforePrepare,
        ),
        ("txn-v2-any-retry", PlantedBug::TxnV2AnyRetry),
    ];

    /// The bug as gregor-quorum's or gregor-client's `simulation` feature plants it, if it
    /// lives there.
    pub(crate) fn plant_in_quorum_and_client(self) {
        use gregor_client::simulation::PlantedBug as Client;
        use gregor_quorum::simulation::PlantedBug as Quorum;
        gregor_quorum::simulation::plant_on_this_thread(match self {
            PlantedBug::ReloadStaleSnapshot => Some(Quorum::ReloadStaleSnapshot),
            PlantedBug::CommittedIsLogEnd => Some(Quorum::CommittedIsLogEnd),
            PlantedBug::SnapshotWithoutEpochs => Some(Quorum::SnapshotWithoutEpochs),
            PlantedBug::DecideUnconfirmed => Some(Quorum::DecideUnconfirmed),
            _ => None,
        });
        gregor_client::simulation::plant_on_this_thread(match self {
            PlantedBug::ReuseValueBuffer => Some(Client::BatchValueBufferReused),
            PlantedBug::DecoderDropsLastRecord => Some(Client::DecoderDropsLastRecord),
            _ => None,
        });
    }

    /// The bug named `name` on the command line.
    pub fn from_name(name: &str) -> Option<PlantedBug> {
        Self::ALL.iter().find(|(n, _)| *n == name).map(|(_, b)| *b)
    }

    /// This bug's command-line name.
    pub fn name(self) -> &'static str {
        Self::ALL
            .iter()
            .find(|(_, b)| *b == self)
            .map(|(n, _)| *n)
            .expect("every bug is in ALL")
    }
}

/// What runs on the simulated hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize)]
pub enum Mode {
    /// Controller quorum members, driven with controller operations.
    #[default]
    Quorum,
    /// Whole brokers (controller and broker roles) replicating an RF 3 topic, driven by
    /// producers and a consumer.
    Replication,
}

#[derive(Debug, Clone, Copy, Default)]
pub struct SimOptions {
    pub seed: u64,
    pub bug: Option<PlantedBug>,
    pub mode: Mode,
    /// Disk faults: crashes become power losses, and outages of the whole cluster (see
    /// [`crate::Scenario::with_power_losses`]).
    pub power_loss: bool,
    /// Replicated runs: reassignments and preferred elections of the data topic's partitions
    /// while the faults run (see `admin.rs`).
    pub admin: bool,
    /// Replicated runs: a consumer group of two or three members consumes the data topic
    /// while the faults run (see `group.rs`).
    pub groups: bool,
    /// Replicated runs with `groups`: members that stop polling past their
    /// `max.poll.interval.ms` and then commit (see `group.rs`).
    pub stalls: bool,
    /// Replicated runs with `groups`: every member has a `group.instance.id`, which each of
    /// its incarnations keeps (see `group.rs`).
    pub static_members: bool,
    /// Replicated runs with `groups`: the members use `group.protocol=consumer` (KIP-848)
    /// with the coordinator's `uniform` or `range` assignor instead of the classic protocol
    /// (`--group-protocol consumer`; see `group.rs`).
    pub consumer_protocol: bool,
    /// Replicated runs with `groups`: each member incarnation draws the classic or the consumer
    /// protocol, so the group is upgraded and downgraded online (`--group-protocol mixed`).
    pub mixed_protocols: bool,
    /// Replicated runs with `groups` and `consumer_protocol`: the members ask for the `load`
    /// assignor, which the brokers allow and review every 500 ms (`--group-protocol load`).
    pub load_assignor: bool,
    /// Replicated runs: full disks and failing fsyncs (see [`crate::Scenario::with_disk_faults`]).
    pub disk_faults: bool,
    /// Replicated runs: slow fsyncs on one node at a time, overlapping the other faults (see
    /// [`crate::Scenario::with_slow_disks`]).
    pub slow_disk: bool,
    /// Replicated runs: one node's wall clock jumps, overlapping the other faults (see
    /// [`crate::Scenario::with_clock_jumps`]).
    pub clock_jumps: bool,
    /// Replicated runs: a data partition's leader crashes, then its successor just after it
    /// takes over (see [`crate::Scenario::with_cascading_crashes`]).
    pub cascading_crashes: bool,
    /// Replicated runs: side topics created, grown and deleted, and unclean elections of
    /// their partitions, while the faults run (see `topics.rs`).
    pub topic_admin: bool,
    /// Replicated runs: ACL bindings created and deleted while the faults run (see `acls.rs`).
    pub acls: bool,
    /// Replicated runs: users' client quotas set and removed while the faults run (see
    /// `quotas.rs`).
    pub quotas: bool,
    /// Replicated runs: the cluster split in two, after the other faults (see
    /// [`crate::Scenario::with_splits`]).
    pub splits: bool,
    /// Replicated runs: partitions that are not transitive, a bridge node reaching both sides,
    /// after the other faults (see [`crate::Scenario::with_bridges`]).
    pub bridges: bool,
    /// More crashes, power losses, network and disk faults that overlap the others and each
    /// other (see [`crate::Scenario::with_overlaps`]).
    pub overlaps: bool,
    /// Replicated runs: transactional producers and a read_committed consumer on a topic of
    /// their own (see `txn.rs`).
    pub transactions: bool,
}

impl SimOptions {
    /// Whether nodes get slow-disk episodes: with `--slow-disk`, and in `--acls` and `--quotas`
    /// runs, whose checks need a node whose metadata lags the controller's while it forwards
    /// (its metadata log flushes late, so it applies a change after the others commit it).
    pub fn slow_disks(&self) -> bool {
        self.slow_disk || self.acls || self.quotas
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Outcome {
    pub seed: u64,
    pub nodes: usize,
    pub trace_hash: u64,
    /// The event trace (left out of the JSON a user asks for; a child process sends it).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub trace: Vec<String>,
    pub violations: Vec<Violation>,
    /// Simulated time the run took.
    pub sim_ms: u64,
    pub ops: usize,
    /// Acknowledged operations (quorum runs) or acknowledged `acks=all` batches (replicated runs).
    pub acked: usize,
    /// Nodes that lost power (`--power-loss` runs).
    #[serde(default)]
    pub power_cuts: usize,
}

impl Outcome {
    pub fn passed(&self) -> bool {
        self.violations.is_empty()
    }
}
