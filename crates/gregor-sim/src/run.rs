//! The driver: builds the simulated world for a seed, applies the fault schedule between
//! simulation steps, observes every node's Raft state after each step, and checks the end.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::hash::Hasher;
use std::rc::Rc;
use std::sync::atomic::AtomicI64;
use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use gregor_meta::MetadataImage;
use gregor_quorum::NodeId;
use serde::{Deserialize, Serialize};

use crate::checker::{check_acked, Property, Violation};
use crate::fence_check::{Fence, HealthLog};
use crate::links::LinkTable;
use crate::node::{address, host_name, run_node, Live, NodeContext, Registry};
use crate::scenario::{Scenario, Target};
use crate::workload::{self, History};

mod checks;
mod faults;
use faults::Active;

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
    /// `gregor_broker::util::plant_on_this_thread`, which only a simulation can use).
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
    /// `--groups` runs: the group coordinator answers OffsetFetch with the offset after the
    /// committed one, so a member resuming from it skips a record (found by
    /// `group-skipped-records`).
    FetchPastCommit,
    /// Replicated runs: the metadata image keeps the leader epoch on an election that also
    /// sets the ISR, so two brokers lead one epoch in turn (found by `two-leaders-in-epoch`).
    ElectionKeepsLeaderEpoch,
}

impl PlantedBug {
    /// Every bug, by its command-line name.
    pub const ALL: [(&'static str, PlantedBug); 14] = [
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
        ("fetch-past-commit", PlantedBug::FetchPastCommit),
        ("election-keeps-epoch", PlantedBug::ElectionKeepsLeaderEpoch),
    ];

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
    /// [`Scenario::with_power_losses`]).
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
    /// Replicated runs: full disks and failing fsyncs (see [`Scenario::with_disk_faults`]).
    pub disk_faults: bool,
    /// Replicated runs: slow fsyncs on one node at a time, overlapping the other faults (see
    /// [`Scenario::with_slow_disks`]).
    pub slow_disk: bool,
    /// Replicated runs: one node's wall clock jumps, overlapping the other faults (see
    /// [`Scenario::with_clock_jumps`]).
    pub clock_jumps: bool,
    /// Replicated runs: a data partition's leader crashes, then its successor just after it
    /// takes over (see [`Scenario::with_cascading_crashes`]).
    pub cascading_crashes: bool,
    /// Replicated runs: side topics created, grown and deleted, and unclean elections of
    /// their partitions, while the faults run (see `topics.rs`).
    pub topic_admin: bool,
    /// Replicated runs: the cluster split in two, after the other faults (see
    /// [`Scenario::with_splits`]).
    pub splits: bool,
    /// Replicated runs: partitions that are not transitive, a bridge node reaching both sides,
    /// after the other faults (see [`Scenario::with_bridges`]).
    pub bridges: bool,
    /// More crashes, power losses, network and disk faults that overlap the others and each
    /// other (see [`Scenario::with_overlaps`]).
    pub overlaps: bool,
}

/// The brokers' wall clock: simulated time after a fixed epoch.
fn broker_clock_ms() -> i64 {
    const EPOCH_MS: i64 = 1_700_000_000_000;
    EPOCH_MS + turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as i64)
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

/// One simulation step.
const TICK_MS: u64 = 5;
/// After the faults stop, a write must be acknowledged within this much simulated time, and
/// every node must have applied it within the same bound after that.
pub const LIVENESS_BOUND_MS: u64 = 10_000;

/// What the driver saw of each node's Raft state during the run.
struct Observer {
    /// term -> the last node seen leading in it (openraft allows several, by node id).
    leaders: BTreeMap<u64, usize>,
    /// index -> the leader id of the entry first seen applied there, and by which node.
    applied_ids: BTreeMap<u64, (String, usize)>,
    /// Per node: (start count, last applied index seen in that run).
    applied: Vec<(u64, u64)>,
    /// Per node: the highest Raft term seen, over every start.
    terms: Vec<u64>,
    /// The leader of the highest term seen, for faults that target the leader.
    current_leader: Option<(u64, usize)>,
    violations: Vec<Violation>,
    /// Replicated runs: (partition, leader epoch) -> the leader the first image named, and
    /// which node's image that was.
    partition_leaders: BTreeMap<(String, i32, i32), (i32, usize)>,
    /// The image each node had at the last observation (to skip unchanged ones).
    last_images: Vec<Option<Arc<MetadataImage>>>,
    /// Replicated runs: the nodes' health and the brokers' fences (`healthy-broker-fenced`).
    health: HealthLog,
    /// Each broker's (epoch, fenced) in the most advanced metadata seen, and its index.
    registrations: BTreeMap<i32, (i64, bool)>,
    registrations_index: u64,
    /// Per node: the start count last seen (a change is a boot).
    seen_starts: Vec<u64>,
}

fn live_nodes(registry: &Rc<RefCell<Registry>>) -> Vec<Option<Live>> {
    registry.borrow().live()
}

impl Observer {
    fn observe(
        &mut self,
        now: u64,
        registry: &Rc<RefCell<Registry>>,
        history: &Rc<RefCell<History>>,
    ) {
        let starts = registry.borrow().starts.clone();
        for (i, node) in live_nodes(registry).into_iter().enumerate() {
            self.observe_health(now, i, starts[i], node.is_some());
            let Some(node) = node else { continue };
            if let Live::Broker(b) = &node {
                self.observe_partitions(now, i, &b.metadata.image(), history);
                self.observe_fences(now, node.quorum(), history);
            }
            let q = node.quorum();
            let (term, leader, last_applied) = {
                let m = q.raft().metrics();
                let m = m.borrow();
                (m.current_term, m.current_leader, m.last_applied)
            };
            if leader == Some(i as NodeId) && self.leaders.get(&term) != Some(&i) {
                self.leaders.insert(term, i);
                history
                    .borrow_mut()
                    .event_at(now, format!("n{i} leads term {term}"));
                if self.current_leader.is_none_or(|(t, _)| term >= t) {
                    self.current_leader = Some((term, i));
                }
            }
            let applied = q.applied_index();
            if self.terms.len() <= i {
                self.terms.resize(i + 1, 0);
            }
            let term_back = checks::term_went_back(&mut self.terms[i], term, i);
            let found = last_applied
                .and_then(|l| {
                    checks::applied_entry(
                        &mut self.applied_ids,
                        l.index,
                        l.leader_id.to_string(),
                        i,
                    )
                })
                .into_iter()
                .chain(checks::applied_went_back(
                    self.applied[i],
                    starts[i],
                    applied,
                    i,
                ))
                .chain(term_back);
            for v in found {
                history
                    .borrow_mut()
                    .event_at(now, format!("VIOLATION {}", v.detail));
                self.violations.push(v);
            }
            self.applied[i] = (starts[i], applied);
        }
    }

    /// A node not running, or booted since the last step, is not healthy now.
    fn observe_health(&mut self, now: u64, node: usize, starts: u64, live: bool) {
        if self.seen_starts.len() <= node {
            self.seen_starts.resize(node + 1, 0);
        }
        if self.seen_starts[node] != starts {
            self.seen_starts[node] = starts;
            self.health.mark(node, now, "boot");
        }
        if !live {
            self.health.mark(node, now, "not running");
        }
    }

    /// Registrations that turn fenced within their epoch, in the metadata of the most
    /// advanced node (a node replaying its log after a restart would show old fences late).
    fn observe_fences(
        &mut self,
        now: u64,
        q: &gregor_quorum::Quorum,
        history: &Rc<RefCell<History>>,
    ) {
        let applied = q.applied_index();
        if applied <= self.registrations_index {
            return;
        }
        self.registrations_index = applied;
        let image = q.image();
        for (&id, reg) in image.brokers() {
            let before = self.registrations.insert(id, (reg.epoch, reg.fenced));
            if reg.fenced && before == Some((reg.epoch, false)) {
                history
                    .borrow_mut()
                    .event_at(now, format!("broker {id} fenced at epoch {}", reg.epoch));
                self.health.fences.push(Fence {
                    broker: id as usize,
                    epoch: reg.epoch,
                    at_ms: now,
                });
            }
        }
    }

    /// At most one leader per partition and leader epoch, over every node's images.
    fn observe_partitions(
        &mut self,
        now: u64,
        node: usize,
        image: &Arc<MetadataImage>,
        history: &Rc<RefCell<History>>,
    ) {
        if self.last_images.len() <= node {
            self.last_images.resize(node + 1, None);
        }
        if self.last_images[node]
            .as_ref()
            .is_some_and(|i| Arc::ptr_eq(i, image))
        {
            return;
        }
        self.last_images[node] = Some(image.clone());
        for t in image.topics().values() {
            for (&p, reg) in &t.partitions {
                if reg.leader < 0 {
                    continue;
                }
                let key = (t.name.clone(), p, reg.leader_epoch);
                match checks::partition_leader(&mut self.partition_leaders, key, reg.leader, node) {
                    Err(v) => {
                        history
                            .borrow_mut()
                            .event_at(now, format!("VIOLATION {}", v.detail));
                        self.violations.push(v);
                    }
                    Ok(false) => {}
                    Ok(true) => {
                        history.borrow_mut().event_at(
                            now,
                            format!(
                                "{}-{p} epoch {} leader {} isr {:?}",
                                t.name, reg.leader_epoch, reg.leader, reg.isr
                            ),
                        );
                        if t.name == crate::data::TOPIC {
                            history
                                .borrow_mut()
                                .data
                                .leader_epochs
                                .push(crate::data::EpochSeen {
                                    partition: p,
                                    leader_epoch: reg.leader_epoch,
                                    leader: reg.leader,
                                    at_ms: now,
                                });
                        }
                    }
                }
            }
        }
    }

    /// The leader of `topic`-`partition` at the highest leader epoch any node's metadata has
    /// shown, with that epoch.
    fn partition_leader(&self, topic: &str, partition: i32) -> Option<(i32, usize)> {
        self.partition_leaders
            .iter()
            .filter(|((t, p, _), _)| t == topic && *p == partition)
            .max_by_key(|((_, _, epoch), _)| *epoch)
            .map(|((_, _, epoch), (leader, _))| (*epoch, *leader as usize))
    }

    fn resolve(&self, t: Target) -> usize {
        match t {
            Target::Node(n) => n,
            Target::Leader => self.current_leader.map_or(0, |(_, n)| n),
        }
    }
}

/// A power cut armed on a node's disk, waiting for the disk to die or for its deadline.
struct PendingCut {
    node: usize,
    deadline_ms: u64,
    torn_seed: u64,
}

struct Driver<'a> {
    sim: turmoil::Sim<'a>,
    scenario: Scenario,
    registry: Rc<RefCell<Registry>>,
    history: Rc<RefCell<History>>,
    observer: Observer,
    bug: Option<PlantedBug>,
    dirs: Vec<std::path::PathBuf>,
    /// `--power-loss` runs: each node's disk.
    disks: Vec<Option<Arc<gregor_log::FaultInjector>>>,
    /// Each node's wall-clock skew (`--clock-jumps`), shared with its broker.
    clock_skews: Vec<Arc<AtomicI64>>,
    /// Each node's slow-disk episodes under way (`--slow-disk`): their fsync times.
    slow_syncs: Vec<Vec<u64>>,
    pending_cuts: Vec<PendingCut>,
    power_cuts: usize,
    /// `--topic-admin` runs: check each node's hosted side-topic logs at the end.
    topic_admin: bool,
    /// Replicated runs: compare the replicas' logs at the end.
    replicated: bool,
    /// Which links the faults under way cut or hold.
    links: LinkTable,
    /// Per node: the faults under way that want it down (crashes, power losses); it boots
    /// when the last of them ends.
    down: Vec<u32>,
    /// Per node: the disk faults under way (full disk, failing fsyncs).
    disk_faults: Vec<u32>,
}

impl Driver<'_> {
    fn now(&self) -> u64 {
        self.sim.elapsed().as_millis() as u64
    }

    fn others(&self, n: usize) -> Vec<String> {
        (0..self.scenario.nodes)
            .filter(|&j| j != n)
            .map(host_name)
            .collect()
    }

    /// One step; a turmoil error (a host's software failed) is a finding.
    fn step(&mut self) -> Result<(), Violation> {
        self.sim.step().map_err(|e| {
            Violation::new(
                Property::NodeFailedToStart,
                format!("simulation error: {e}"),
            )
        })?;
        self.cut_power_where_due();
        let now = self.now();
        self.observer.observe(now, &self.registry, &self.history);
        Ok(())
    }

    /// Runs the faults and the workload, then checks the end state. A liveness failure does
    /// not stop the checks that follow it: a seed reports every violation it has.
    fn run(&mut self) -> Vec<Violation> {
        let mut violations = Vec::new();
        let Ok(faults_end) = self.run_faults(&mut violations) else {
            return violations;
        };
        self.final_write_live(faults_end, &mut violations);
        if self.converge(&mut violations).is_err() {
            return violations;
        }
        if self.topic_admin && self.hosted_logs(&mut violations).is_err() {
            return violations;
        }
        if self.replicated {
            let _ = self.replica_logs(&mut violations);
        }
        violations
    }

    /// Plays the fault schedule until the workload is done (or must have been). Returns when
    /// the faults ended; `Err` if the simulation itself failed (no step can follow).
    fn run_faults(&mut self, violations: &mut Vec<Violation>) -> Result<u64, ()> {
        let episodes = self.scenario.episodes.clone();
        let background = self.scenario.background.clone();
        let mut next = 0;
        let mut next_background = 0;
        let mut active: Option<Active> = None;
        let mut active_background: Vec<Active> = Vec::new();
        let mut faults_end: Option<u64> = None;
        loop {
            let now = self.now();
            if active.as_ref().is_some_and(|a| now >= a.end_ms) {
                let a = active.take().expect("checked just above");
                self.heal(&a);
            }
            let (ended, going_on): (Vec<Active>, Vec<Active>) =
                std::mem::take(&mut active_background)
                    .into_iter()
                    .partition(|a| now >= a.end_ms);
            active_background = going_on;
            for a in &ended {
                self.heal(a);
            }
            if active.is_none() && next < episodes.len() && now >= episodes[next].start_ms {
                active = Some(self.begin(&episodes[next]));
                next += 1;
            }
            if let Some(a) = active.as_mut() {
                self.cascade_step(a);
            }
            while next_background < background.len() && now >= background[next_background].start_ms
            {
                let a = self.begin(&background[next_background]);
                active_background.push(a);
                next_background += 1;
            }
            let background_over =
                next_background == background.len() && active_background.is_empty();
            if active.is_none() && next == episodes.len() && background_over && faults_end.is_none()
            {
                faults_end = Some(now);
                let mut h = self.history.borrow_mut();
                h.faults_over = true;
                h.event_at(now, "faults over");
            }
            if let Err(v) = self.step() {
                violations.push(v);
                return Err(());
            }
            if self.history.borrow().done {
                break;
            }
            if let Some(end) = faults_end {
                // The workload may be mid-way through an operation that started under faults;
                // it gives up on one after 20 s.
                if now > end + LIVENESS_BOUND_MS + 25_000 {
                    violations.push(Violation::new(
                        Property::Liveness,
                        format!(
                            "the workload did not finish within {} ms after the faults",
                            now - end
                        ),
                    ));
                    return Ok(end);
                }
            }
        }
        Ok(faults_end.expect("set before the workload can finish"))
    }

    /// The first write after the faults was acknowledged within the bound.
    fn final_write_live(&self, faults_end: u64, violations: &mut Vec<Violation>) {
        let Some((sent, acked)) = self.history.borrow().final_write else {
            // The workload never finished: reported already.
            return;
        };
        match acked {
            None => violations.push(Violation::new(
                Property::Liveness,
                format!("the write sent at {sent} ms after the faults ended at {faults_end} ms was never acknowledged"),
            )),
            Some(acked) if acked > faults_end + LIVENESS_BOUND_MS => violations.push(Violation::new(
                Property::Liveness,
                format!("faults ended at {faults_end} ms; the next write was acknowledged at {acked} ms (bound {LIVENESS_BOUND_MS} ms)"),
            )),
            Some(_) => {}
        }
    }

    /// Convergence: every node applies the same index (and has the final topic, when the
    /// final write created it).
    fn converge(&mut self, violations: &mut Vec<Violation>) -> Result<(), ()> {
        let final_created = self.history.borrow().final_created;
        let deadline = self.now() + LIVENESS_BOUND_MS;
        loop {
            let qs = live_nodes(&self.registry);
            let applied: Vec<Option<u64>> = qs
                .iter()
                .map(|q| q.as_ref().map(|q| q.quorum().applied_index()))
                .collect();
            let max = applied.iter().flatten().max().copied().unwrap_or(0);
            let has_final = !final_created
                || qs
                    .iter()
                    .flatten()
                    .all(|q| q.quorum().image().topic(workload::FINAL_TOPIC).is_some());
            if has_final && applied.iter().all(|a| *a == Some(max)) {
                return Ok(());
            }
            if self.now() > deadline {
                violations.push(Violation::new(
                    Property::Liveness,
                    format!(
                        "nodes did not converge within {LIVENESS_BOUND_MS} ms: applied {applied:?}"
                    ),
                ));
                return Ok(());
            }
            self.step_or_report(violations)?;
        }
    }

    fn step_or_report(&mut self, violations: &mut Vec<Violation>) -> Result<(), ()> {
        self.step().map_err(|v| violations.push(v))
    }

    /// `--topic-admin`: each node hosts exactly the side-topic logs its metadata gives it: a
    /// deleted topic's logs are gone, every added partition's log is there.
    fn hosted_logs(&mut self, violations: &mut Vec<Violation>) -> Result<(), ()> {
        let deadline = self.now() + HOSTED_LOGS_BOUND_MS;
        loop {
            let differ = hosted_side_logs_differ(&self.registry);
            if differ.is_empty() {
                return Ok(());
            }
            if self.now() > deadline {
                violations.push(Violation::new(
                    Property::HostedLogsDiffer,
                    differ.join("; "),
                ));
                return Ok(());
            }
            self.step_or_report(violations)?;
        }
    }

    /// Every in-sync replica's log is its leader's below the high watermark. The check is a
    /// safety one and holds at any moment; it is retried for a short while only so that a
    /// replica caught between two steps (a leader's ISR read before its log) is not reported.
    fn replica_logs(&mut self, violations: &mut Vec<Violation>) -> Result<(), ()> {
        let deadline = self.now() + REPLICA_LOGS_BOUND_MS;
        loop {
            let differ = crate::replica_logs::diverging(&replica_logs(&self.registry));
            if differ.is_empty() {
                return Ok(());
            }
            if self.now() > deadline {
                violations.extend(
                    differ
                        .into_iter()
                        .map(|d| Violation::new(Property::ReplicaLogsDiverge, d)),
                );
                return Ok(());
            }
            self.step_or_report(violations)?;
        }
    }
}

/// `--topic-admin` runs: once metadata has converged, each node's side-topic logs must match
/// its metadata within this much simulated time.
const HOSTED_LOGS_BOUND_MS: u64 = 5_000;

/// How long a divergence of in-sync replica logs may last at the end before it is reported.
const REPLICA_LOGS_BOUND_MS: u64 = 1_000;

/// Every hosted replica of every live broker, its log read below its partition's high
/// watermark as its leader reports it (on a follower, below its own log end: the comparison
/// stops at the leader's).
fn replica_logs(registry: &Rc<RefCell<Registry>>) -> Vec<crate::replica_logs::ReplicaLog> {
    let mut out = Vec::new();
    for (node, live) in live_nodes(registry).into_iter().enumerate() {
        let Some(Live::Broker(b)) = live else {
            continue;
        };
        for part in b.replicas.all() {
            let role = part.role();
            let log = &part.log;
            let mut batches = BTreeMap::new();
            let mut offset = log.log_start_offset();
            let end = if role.is_leader {
                part.high_watermark()
            } else {
                log.log_end_offset()
            };
            while offset < end {
                let Ok(r) = log.read(offset, 1 << 20, Some(end)) else {
                    break;
                };
                let Some(next) = r.next_offset.filter(|n| *n > offset) else {
                    break;
                };
                crate::replica_logs::split_batches(r.records, &mut batches);
                offset = next;
            }
            out.push(crate::replica_logs::ReplicaLog {
                node,
                topic: part.topic.clone(),
                partition: part.index,
                is_leader: role.is_leader,
                leader_epoch: role.leader_epoch,
                isr: part.isr(),
                high_watermark: part.high_watermark(),
                log_start_offset: log.log_start_offset(),
                compacted: log.config().cleanup_policy.compact,
                batches,
            });
        }
    }
    out
}

/// Nodes whose open side-topic logs are not the side-topic partitions their own metadata
/// assigns them.
fn hosted_side_logs_differ(registry: &Rc<RefCell<Registry>>) -> Vec<String> {
    let mut out = Vec::new();
    for (i, node) in live_nodes(registry).into_iter().enumerate() {
        let Some(Live::Broker(b)) = node else {
            continue;
        };
        let image = b.metadata.image();
        let wanted: std::collections::BTreeSet<(String, i32)> = image
            .topics()
            .values()
            .filter(|t| t.name.starts_with(crate::topics::SIDE_PREFIX))
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .filter(|(_, reg)| reg.replicas.contains(&(i as i32)))
                    .map(|(&p, _)| (t.name.clone(), p))
            })
            .collect();
        let hosted: std::collections::BTreeSet<(String, i32)> = b
            .replicas
            .all()
            .iter()
            .filter(|p| p.topic.starts_with(crate::topics::SIDE_PREFIX))
            .map(|p| (p.topic.clone(), p.index))
            .collect();
        out.extend(checks::side_logs_differ(i, &wanted, &hosted));
    }
    out
}

pub(crate) fn image_digest(image: &MetadataImage) -> u64 {
    let mut h = fnv::FnvHasher::default();
    h.write(format!("{image:?}").as_bytes());
    h.finish()
}

/// Runs one seed to its end and checks it.
pub fn run_seed(options: SimOptions) -> Outcome {
    // A thread of its own, seeded: the thread's randomness (std's hash keys among it, taken
    // once per thread) is then the same on every run of this seed (see `entropy`).
    let runner = std::thread::Builder::new()
        .name(format!("sim-seed-{}", options.seed))
        // The brokers' futures nest deeply; the main thread's default size, not a spawned one's.
        .stack_size(64 << 20)
        .spawn(move || {
            crate::entropy::seed_this_thread(options.seed);
            run_seed_on_this_thread(options)
        })
        .expect("a thread for the simulation");
    match runner.join() {
        Ok(outcome) => outcome,
        Err(panic) => std::panic::resume_unwind(panic),
    }
}

fn run_seed_on_this_thread(options: SimOptions) -> Outcome {
    // The brokers read simulated time and do their file work inline (see gregor-broker's
    // `util::Simulation`); harmless for quorum runs, which use neither.
    gregor_broker::util::install_simulation(gregor_broker::util::Simulation {
        now_ms: broker_clock_ms,
    });
    gregor_broker::util::plant_on_this_thread(match options.bug {
        Some(PlantedBug::HighWatermarkMax) => {
            Some(gregor_broker::util::PlantedBug::HighWatermarkMaxOverIsr)
        }
        Some(PlantedBug::TruncateToHighWatermark) => {
            Some(gregor_broker::util::PlantedBug::TruncateToHighWatermark)
        }
        Some(PlantedBug::IsrShrinkBeforeCommit) => {
            Some(gregor_broker::util::PlantedBug::IsrShrinkBeforeCommit)
        }
        Some(PlantedBug::SkipFollowerSync) => {
            Some(gregor_broker::util::PlantedBug::SkipFollowerSync)
        }
        Some(PlantedBug::StaleSyncAssignment) => {
            Some(gregor_broker::util::PlantedBug::StaleSyncAssignment)
        }
        Some(PlantedBug::ProbeFencesLive) => Some(gregor_broker::util::PlantedBug::ProbeFencesLive),
        Some(PlantedBug::FollowerRestampsEpoch) => {
            Some(gregor_broker::util::PlantedBug::FollowerRestampsEpoch)
        }
        Some(PlantedBug::ConsumerReadsUncommitted) => {
            Some(gregor_broker::util::PlantedBug::ConsumerReadsUncommitted)
        }
        Some(PlantedBug::FollowerForgetsProducers) => {
            Some(gregor_broker::util::PlantedBug::FollowerSkipsProducerState)
        }
        Some(PlantedBug::ReplayKeepsFirstCommit) => {
            Some(gregor_broker::util::PlantedBug::ReplayKeepsFirstCommit)
        }
        Some(PlantedBug::FetchPastCommit) => Some(gregor_broker::util::PlantedBug::FetchPastCommit),
        Some(PlantedBug::ElectionKeepsLeaderEpoch) => {
            Some(gregor_broker::util::PlantedBug::ElectionKeepsLeaderEpoch)
        }
        Some(PlantedBug::AckUncommitted | PlantedBug::ForgetVote) | None => None,
    });
    let mut scenario = match options.power_loss {
        false => Scenario::from_seed(options.seed),
        true => Scenario::from_seed(options.seed).with_power_losses(),
    };
    if options.disk_faults {
        scenario = scenario.with_disk_faults();
    }
    if options.slow_disk {
        scenario = scenario.with_slow_disks();
    }
    if options.clock_jumps {
        scenario = scenario.with_clock_jumps();
    }
    if options.cascading_crashes {
        scenario = scenario.with_cascading_crashes(crate::data::PARTITIONS);
    }
    if options.splits {
        scenario = scenario.with_splits();
    }
    if options.bridges {
        scenario = scenario.with_bridges();
    }
    if options.overlaps {
        scenario = scenario.with_overlaps(options.power_loss, options.disk_faults);
    }
    let clock_skews: Vec<Arc<AtomicI64>> = (0..scenario.nodes)
        .map(|_| Arc::new(AtomicI64::new(0)))
        .collect();
    let root = tempfile::tempdir().expect("a temporary directory for the nodes' files");
    let dirs: Vec<_> = (0..scenario.nodes)
        .map(|i| root.path().join(host_name(i)).join("__cluster_metadata-0"))
        .collect();
    // Each node's disk: its data directory, empty and durable at the start.
    let disks: Vec<Option<Arc<gregor_log::FaultInjector>>> = (0..scenario.nodes)
        .map(|i| {
            (options.power_loss || options.disk_faults || options.slow_disk).then(|| {
                let data_dir = root.path().join(host_name(i));
                std::fs::create_dir_all(&data_dir).expect("a node's data directory");
                gregor_log::FaultInjector::power_model(&data_dir)
                    .expect("a power model of an empty directory")
            })
        })
        .collect();
    let sim = turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(3600))
        .tick_duration(Duration::from_millis(TICK_MS))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(scenario.max_latency_ms))
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .tcp_capacity(4096)
        .rng_seed(options.seed)
        .build();
    let registry = Rc::new(RefCell::new(Registry {
        quorums: vec![None; scenario.nodes],
        brokers: vec![None; scenario.nodes],
        starts: vec![0; scenario.nodes],
        start_errors: Vec::new(),
        disk_failing: vec![false; scenario.nodes],
        expected_start_errors: Vec::new(),
    }));
    let history = Rc::new(RefCell::new(History::default()));
    history.borrow_mut().trace.push(format!("{scenario:?}"));
    let voters: BTreeMap<NodeId, String> = (0..scenario.nodes)
        .map(|i| (i as NodeId, address(i)))
        .collect();
    let mut driver = Driver {
        sim,
        scenario: scenario.clone(),
        registry: registry.clone(),
        history: history.clone(),
        observer: Observer {
            leaders: BTreeMap::new(),
            applied_ids: BTreeMap::new(),
            applied: vec![(0, 0); scenario.nodes],
            terms: Vec::new(),
            current_leader: None,
            violations: Vec::new(),
            partition_leaders: BTreeMap::new(),
            last_images: Vec::new(),
            health: HealthLog::default(),
            registrations: BTreeMap::new(),
            registrations_index: 0,
            seen_starts: Vec::new(),
        },
        bug: options.bug,
        dirs: dirs.clone(),
        disks: disks.clone(),
        clock_skews: clock_skews.clone(),
        slow_syncs: vec![Vec::new(); scenario.nodes],
        pending_cuts: Vec::new(),
        power_cuts: 0,
        topic_admin: options.topic_admin,
        replicated: options.mode == Mode::Replication,
        links: LinkTable::default(),
        down: vec![0; scenario.nodes],
        disk_faults: vec![0; scenario.nodes],
    };
    for (i, dir) in dirs.iter().enumerate() {
        let ctx = NodeContext {
            node: i,
            dir: dir.clone(),
            voters: voters.clone(),
            scenario: scenario.clone(),
            bug: options.bug,
            registry: registry.clone(),
            faults: disks[i].clone(),
            clock_skew: clock_skews[i].clone(),
        };
        match options.mode {
            Mode::Quorum => driver
                .sim
                .host(host_name(i).as_str(), move || run_node(ctx.clone())),
            Mode::Replication => driver.sim.host(host_name(i).as_str(), move || {
                crate::broker_node::run_broker_node(ctx.clone())
            }),
        }
    }
    match options.mode {
        Mode::Quorum => driver.sim.client(
            "client",
            workload::run(history.clone(), options.seed, scenario.nodes),
        ),
        Mode::Replication => driver.sim.client(
            "client",
            crate::data::run(
                history.clone(),
                options.seed,
                scenario.nodes,
                options.admin,
                options.groups.then_some(crate::group::GroupWorkload {
                    stalls: options.stalls,
                    static_members: options.static_members,
                }),
                options.topic_admin,
            ),
        ),
    }
    let mut violations = driver.run();
    violations.append(&mut driver.observer.violations);
    for (node, e) in registry.borrow().expected_start_errors.iter() {
        history.borrow_mut().trace.push(format!(
            "n{node} could not start on its failing or powerless disk: {e}"
        ));
    }
    violations.extend(checks::start_failures(&registry.borrow().start_errors));
    // The end state of every node.
    let finals: Vec<Option<(u64, Arc<MetadataImage>)>> = live_nodes(&registry)
        .iter()
        .map(|q| {
            q.as_ref()
                .map(|q| (q.quorum().applied_index(), q.quorum().image()))
        })
        .collect();
    let ops = history.borrow().ops.clone();
    let converged = !violations.iter().any(|v| v.property == Property::Liveness);
    for (i, f) in finals.iter().enumerate() {
        let Some((applied, image)) = f else { continue };
        history.borrow_mut().trace.push(format!(
            "end n{i} applied={applied} image={:016x} topics={} brokers={}",
            image_digest(image),
            image.topics().len(),
            image.brokers().len()
        ));
        violations.extend(check_acked(&ops, i, image));
    }
    violations.extend(checks::images_diverge(&finals, converged));
    if options.mode == Mode::Replication {
        violations.extend(crate::data_check::check(&history.borrow().data));
        violations.extend(crate::fence_check::check(&driver.observer.health));
    }
    for (i, disk) in disks.iter().enumerate() {
        let bypassed = disk
            .as_ref()
            .map(|d| d.untracked_paths())
            .unwrap_or_default();
        let root = root.path().join(host_name(i));
        violations.extend(checks::disk_bypassed(i, &bypassed, &root));
    }
    violations.sort_by_key(|v| v.property);
    violations.dedup();
    let sim_ms = driver.now();
    let power_cuts = driver.power_cuts;
    // Stop every host before the directory goes away.
    drop(driver);
    let mut h = history.borrow_mut();
    for v in &violations {
        h.trace
            .push(format!("violation {}: {}", v.property, v.detail));
    }
    let trace = std::mem::take(&mut h.trace);
    let acked_batches = h.data.acked_all.len();
    let mut hasher = fnv::FnvHasher::default();
    for line in &trace {
        hasher.write(line.as_bytes());
        hasher.write_u8(b'\n');
    }
    Outcome {
        seed: options.seed,
        nodes: scenario.nodes,
        trace_hash: hasher.finish(),
        trace,
        acked: match options.mode {
            Mode::Quorum => ops.iter().filter(|o| o.reply.is_some()).count(),
            Mode::Replication => acked_batches,
        },
        ops: ops.len(),
        violations,
        sim_ms,
        power_cuts,
    }
}
