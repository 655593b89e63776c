//! The seam a deterministic simulation (gregor-sim) plugs into: the simulated world's clock, one
//! wall clock per broker (a clock jump moves one broker's), file work run inline, and the classic
//! replication bugs the simulator plants to show that its checker finds them. Compiled only
//! with the `simulation` feature, which only gregor-sim enables: the broker binary has none of it.

use std::future::Future;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, OnceLock};

/// What a deterministic simulation (gregor-sim) replaces in this process: the wall clock, and
/// the blocking pool (whose threads finish in an order no seed controls). Installed at most once
/// per process, before any broker starts.
#[derive(Debug, Clone, Copy)]
pub struct Simulation {
    /// Milliseconds since the Unix epoch, as the simulated world's clock says.
    pub now_ms: fn() -> i64,
}

static SIMULATION: OnceLock<Simulation> = OnceLock::new();

/// Installs the simulation's clock and inline file work for the rest of the process. Returns
/// false if one was installed already (the first one stays).
pub fn install_simulation(sim: Simulation) -> bool {
    SIMULATION.set(sim).is_ok()
}

/// Whether this process runs under an installed [`Simulation`].
pub(crate) fn installed() -> bool {
    SIMULATION.get().is_some()
}

/// Classic replication bugs the simulator plants to show that its checker finds them. Only a
/// thread of a process that installed a [`Simulation`] can turn one on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlantedBug {
    /// The leader takes the high watermark as the largest durable log end offset over the ISR
    /// instead of the smallest: an `acks=all` write is acknowledged once the leader alone has
    /// it.
    HighWatermarkMaxOverIsr,
    /// A follower that must find where its log leaves the new leader's truncates to its own
    /// high watermark instead of asking the leader for the end of its last epoch (Kafka before
    /// KIP-101).
    TruncateToHighWatermark,
    /// A leader shrinks its ISR for itself as soon as it proposes the shrink, before the
    /// controller commits it (so the high watermark stops waiting for the dropped follower,
    /// which the controller may still elect).
    IsrShrinkBeforeCommit,
    /// A follower appends fetched batches without syncing them before its next fetch, which
    /// tells the leader they are on its disk: an `acks=all` write can be acknowledged while
    /// only the leader has it durably.
    SkipFollowerSync,
    /// The group coordinator answers a follower's SyncGroup that arrives before the leader's
    /// assignment with the follower's assignment of the previous generation (two members can
    /// then own a partition in one generation).
    StaleSyncAssignment,
    /// The controller's liveness probe (on taking over, or when a broker's heartbeat
    /// connection closes) takes a broker whose listener accepts for gone, and fences it.
    ProbeFencesLive,
    /// A follower stamps every batch it fetches with the leader epoch it fetches in, instead
    /// of keeping the epoch the batch was written in: its log leaves the leader's below the
    /// high watermark (and its epoch cache with it), which no consumer of the leader sees.
    FollowerRestampsEpoch,
    /// A leader serves consumers up to its log end instead of its high watermark: they read
    /// records no follower may have, which a change of leader can take back.
    ConsumerReadsUncommitted,
    /// A follower appends fetched batches without recording their idempotent producers: once
    /// it leads, a producer's retry of a batch it already holds is written a second time.
    FollowerSkipsProducerState,
    /// A group coordinator loading a `__consumer_offsets` partition keeps the first commit of
    /// each group's partition instead of the last (as if compaction had left one record per
    /// key): after the coordinator moves, members resume from an old offset.
    ReplayKeepsFirstCommit,
    /// A group coordinator loading a `__consumer_offsets` partition keeps the first group
    /// epoch and target epoch of each consumer group (KIP-848) instead of the last: after the
    /// coordinator moves, the next target takes its members' epochs back.
    ConsumerReplayKeepsFirstEpoch,
    /// A classic group upgraded to a consumer group (KIP-848's migration) forgets what its
    /// classic members own: their partitions go to the joining member while they still
    /// consume them.
    UpgradeDropsAssignment,
    /// The group coordinator answers OffsetFetch with the offset after the committed one
    /// (taking a commit for the last record consumed): a member resuming from it skips one.
    FetchPastCommit,
    /// The metadata image keeps the leader epoch on an election that also sets the ISR
    /// (planted in gregor-meta's images): two brokers lead one epoch in turn.
    ElectionKeepsLeaderEpoch,
    /// A restarting broker keeps the partition logs its caught-up metadata no longer gives it
    /// (a topic deleted, or its replica moved away, while the broker was down): stray logs
    /// stay on disk, and come back if a topic of the same name is created.
    StrayLogsKept,
    /// A broker answers an ACL change it forwarded as soon as the controller commits it,
    /// without waiting for its own image to apply it: right after the acknowledgement it can
    /// still enforce (and describe) the ACLs from before the change.
    AclAckBeforeApplied,
    /// The same for a forwarded AlterClientQuotas: right after the acknowledgement the broker
    /// can still describe (and throttle by) the quotas from before the change.
    QuotaAckBeforeApplied,
    /// A follower names its current log end in a fetch it planned in an earlier leader epoch,
    /// without checking that it still follows in that epoch: once it has become a leader and
    /// appended records of its own, the old leader counts them as copies of its records.
    FetchPositionPastEpoch,
    /// A read_committed fetch leaves out the aborted transactions of the records it returns:
    /// the consumer takes an aborted transaction's records for committed ones.
    TxnAbortVisible,
    /// A partition leader accepts a transactional batch of an older producer epoch than it has
    /// seen (and does not ask the coordinator to verify it): a fenced producer's late write
    /// lands in the log.
    TxnFencedProduce,
    /// The group coordinator makes a TxnOffsetCommit's offsets visible once they are durable,
    /// as if committed, instead of pending until the transaction's marker.
    TxnOffsetsEarly,
    /// The transaction coordinator sends a decision's markers as soon as it appends its
    /// PrepareCommit/PrepareAbort, before that record is durable: a coordinator that fails
    /// over meanwhile leaves some partitions committed and the rest to a successor that
    /// never saw the decision.
    TxnMarkerBeforePrepare,
    /// The transaction coordinator takes any EndTxn v5 from the epoch before the bump for a
    /// retry of its last decision and acknowledges it, without checking that the decision is
    /// the one asked for and that no later transaction is open (KIP-890 part 2).
    TxnV2AnyRetry,
}

thread_local! {
    static PLANTED: std::cell::Cell<Option<PlantedBug>> = const { std::cell::Cell::new(None) };
    /// Simulated time on a thread doing a simulation's file work (time stands still meanwhile).
    static FROZEN_NOW: std::cell::Cell<Option<i64>> = const { std::cell::Cell::new(None) };
}

/// Plants `bug` (or none) in the brokers this thread simulates. Ignored without a simulation.
pub fn plant_on_this_thread(bug: Option<PlantedBug>) {
    if installed() {
        PLANTED.with(|p| p.set(bug));
        // The one planted bug that lives in gregor-meta's images.
        gregor_meta::plant_election_keeps_leader_epoch(
            bug == Some(PlantedBug::ElectionKeepsLeaderEpoch),
        );
    }
}

/// Whether `bug` is planted on this thread (use the crate's `planted!` macro, which is `false`
/// in a build without this module).
pub(crate) fn planted(bug: PlantedBug) -> bool {
    installed() && PLANTED.with(|p| p.get()) == Some(bug)
}

/// `TxnMarkerBeforePrepare`, when planted: each append of a PrepareCommit/PrepareAbort among
/// `effects` is followed at once by its markers (the coordinator asks for them again once the
/// record is durable).
pub(crate) fn markers_before_prepare(
    effects: Vec<gregor_group::txn::TxnEffect>,
) -> Vec<gregor_group::txn::TxnEffect> {
    use gregor_group::txn::{records, ProducerIdAndEpoch, TransactionState, TxnEffect};
    if !planted(PlantedBug::TxnMarkerBeforePrepare) {
        return effects;
    }
    let mut out = Vec::with_capacity(effects.len());
    for e in effects {
        let early = match &e {
            TxnEffect::Append { record, .. } => record
                .value
                .as_ref()
                .and_then(|v| records::decode_value(v).ok())
                .filter(|v| {
                    matches!(
                        v.state,
                        TransactionState::PrepareCommit | TransactionState::PrepareAbort
                    )
                })
                .and_then(|v| {
                    let id = records::decode_key(&record.key).ok()?;
                    Some(TxnEffect::WriteMarkers {
                        transactional_id: id,
                        producer: ProducerIdAndEpoch {
                            producer_id: v.producer_id,
                            epoch: v.producer_epoch,
                        },
                        commit: v.state == TransactionState::PrepareCommit,
                        partitions: v
                            .partitions
                            .iter()
                            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.clone(), p)))
                            .collect(),
                    })
                }),
            _ => None,
        };
        out.push(e);
        out.extend(early);
    }
    out
}

tokio::task_local! {
    /// Under a simulation: how far the wall clock of the broker this task belongs to is off
    /// the simulated world's (a clock jump). Tasks a broker spawns keep it
    /// (`runtime::spawn`).
    static CLOCK_SKEW: Option<Arc<AtomicI64>>;
}

/// Runs `fut`, and every task it spawns through `runtime::spawn`, with a wall clock
/// `skew` milliseconds off the simulated world's; the simulator changes `skew` to make that
/// broker's clock jump. Without an installed simulation the skew is ignored.
pub fn with_clock_skew<F: Future>(skew: Arc<AtomicI64>, fut: F) -> impl Future<Output = F::Output> {
    CLOCK_SKEW.scope(Some(skew), fut)
}

/// `fut` keeping the clock skew of the task that wraps it (none outside a simulation).
pub(crate) fn inherit_clock<F: Future>(fut: F) -> impl Future<Output = F::Output> {
    let skew = match SIMULATION.get() {
        Some(_) => CLOCK_SKEW.try_with(Clone::clone).ok().flatten(),
        None => None,
    };
    CLOCK_SKEW.scope(skew, fut)
}

/// The simulated wall clock of the broker this task belongs to, if a simulation is installed.
pub(crate) fn now_ms() -> Option<i64> {
    let sim = SIMULATION.get()?;
    if let Some(frozen) = FROZEN_NOW.with(|t| t.get()) {
        return Some(frozen);
    }
    let skew = CLOCK_SKEW
        .try_with(|s| s.as_ref().map_or(0, |s| s.load(Ordering::SeqCst)))
        .unwrap_or(0);
    Some((sim.now_ms)() + skew)
}

/// Runs file work `f` under a simulation: the calling thread waits for it (on a thread of its
/// own, where blocking on a lock is allowed), with simulated time standing still and this
/// thread's planted bug; returns what the simulated disk's syncs owe.
pub(crate) fn file_work_inline<T: Send + 'static>(
    f: impl FnOnce() -> T + Send + 'static,
) -> (T, std::time::Duration) {
    let now = now_ms();
    let planted = PLANTED.with(|p| p.get());
    let worker = std::thread::spawn(move || {
        FROZEN_NOW.with(|t| t.set(now));
        PLANTED.with(|p| p.set(planted));
        (f(), gregor_log::take_simulated_delay())
    });
    match worker.join() {
        Ok(done) => done,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}
