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

use crate::checker::check_acked;
use crate::fence_check::{Fence, HealthLog};
use crate::history::{History, OpRecord};
use crate::links::LinkTable;
use crate::node::{address, host_name, run_node, Live, NodeContext, Registry};
use crate::options::{Mode, Outcome, PlantedBug, SimOptions};
use crate::property::{Property, Violation};
use crate::scenario::{Fault, Scenario, Target};
use crate::workload;

mod checks;
mod faults;

/// The brokers' wall clock: simulated time after a fixed epoch.
fn broker_clock_ms() -> i64 {
    const EPOCH_MS: i64 = 1_700_000_000_000;
    EPOCH_MS + turmoil::sim_elapsed().map_or(0, |d| d.as_millis() as i64)
}

/// A fault in progress, with its targets resolved.
struct Active {
    end_ms: u64,
    fault: Fault,
    a: usize,
    b: usize,
    /// A cascading crash: the leader epoch its first crash left, and the second crash.
    cascade: Option<CascadeState>,
    /// The span in which this fault keeps the nodes it touches from counting as healthy.
    span: usize,
}

struct CascadeState {
    /// The partition's leader epoch when its leader crashed.
    epoch: i32,
    /// The successor to crash, and when.
    next: Option<(usize, u64)>,
    /// The successor, once crashed.
    crashed: Option<usize>,
    /// How long both stay down after the successor's crash.
    hold_ms: u64,
    /// The successor's span of ill health (see [`Active::span`]).
    span: Option<usize>,
}

/// One simulation step.
const TICK_MS: u64 = 5;
/// After the faults stop, a write must be acknowledged within this much simulated time, and
/// every node must have applied it within the same bound after that.
pub const LIVENESS_BOUND_MS: u64 = 10_000;
/// How long after the faults the workload may take to finish: an operation that started
/// under faults is given up after 20 s.
const WORKLOAD_BOUND_MS: u64 = LIVENESS_BOUND_MS + 25_000;
/// `--transactions` runs: one inter-broker request timeout (35 s) more. A cut link drops what
/// it carries on an established simulated TCP connection, which no retransmission recovers,
/// so a WriteTxnMarkers sent into a cut waits out the marker sender's request timeout (as
/// Kafka's marker channel waits `request.timeout.ms` on a black-holed connection) before the
/// transactional id stops answering CONCURRENT_TRANSACTIONS.
const TXN_MARKER_TIMEOUT_MS: u64 = 35_000;

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
    fn new(nodes: usize) -> Self {
        Observer {
            leaders: BTreeMap::new(),
            applied_ids: BTreeMap::new(),
            applied: vec![(0, 0); nodes],
            terms: Vec::new(),
            current_leader: None,
            violations: Vec::new(),
            partition_leaders: BTreeMap::new(),
            last_images: Vec::new(),
            health: HealthLog::default(),
            registrations: BTreeMap::new(),
            registrations_index: 0,
            seen_starts: Vec::new(),
        }
    }

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
            let (term, leader, last_applied, stopped) = {
                let m = q.raft().metrics();
                let m = m.borrow();
                let stopped = m.running_state.is_err();
                (m.current_term, m.current_leader, m.last_applied, stopped)
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
            // A Raft that stopped on a storage error (a full disk refusing the vote file) shows
            // the term it failed to save: never durable, never sent, so not a term it was at.
            let term_back = match stopped {
                true => None,
                false => checks::term_went_back(&mut self.terms[i], term, i),
            };
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
                        if t.name == crate::history::TOPIC {
                            history.borrow_mut().data.leader_epochs.push(
                                crate::history::EpochSeen {
                                    partition: p,
                                    leader_epoch: reg.leader_epoch,
                                    leader: reg.leader,
                                    at_ms: now,
                                },
                            );
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
    /// How long after the faults the workload may take to finish.
    workload_bound_ms: u64,
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
                if now > end + self.workload_bound_ms {
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
            .filter(|t| t.name.starts_with(crate::side_view::SIDE_PREFIX))
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
            .filter(|p| p.topic.starts_with(crate::side_view::SIDE_PREFIX))
            .map(|p| (p.topic.clone(), p.index))
            .collect();
        let on_disk = side_dirs_on_disk(b.replicas.data_dir());
        out.extend(checks::side_logs_differ(i, &wanted, &hosted, &on_disk));
    }
    out
}

/// The side topics' partition directories in a broker's data directory, open or not (a
/// deleted partition's directory is renamed aside at once, so it no longer counts).
fn side_dirs_on_disk(data_dir: &std::path::Path) -> std::collections::BTreeSet<(String, i32)> {
    use gregor_broker::partition_dir::{stray_dirs, METADATA_LOG_DIR};
    let side = |topic: &str, _| !topic.starts_with(crate::side_view::SIDE_PREFIX);
    stray_dirs(data_dir, &[METADATA_LOG_DIR], side)
        .unwrap_or_default()
        .iter()
        .filter_map(|dir| {
            let name = dir.file_name()?.to_str()?;
            let (topic, partition) = name.rsplit_once('-')?;
            Some((topic.to_string(), partition.parse().ok()?))
        })
        .collect()
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
    plant_bugs(options.bug);
    let scenario = scenario_of(&options);
    let clock_skews: Vec<Arc<AtomicI64>> = (0..scenario.nodes)
        .map(|_| Arc::new(AtomicI64::new(0)))
        .collect();
    let root = tempfile::tempdir().expect("a temporary directory for the nodes' files");
    let dirs: Vec<_> = (0..scenario.nodes)
        .map(|i| root.path().join(host_name(i)).join("__cluster_metadata-0"))
        .collect();
    let disks = node_disks(&options, scenario.nodes, root.path());
    let sim = build_sim(&options, &scenario);
    let registry = new_registry(scenario.nodes);
    let history = Rc::new(RefCell::new(History::default()));
    history.borrow_mut().trace.push(format!("{scenario:?}"));
    let mut driver = Driver {
        sim,
        scenario: scenario.clone(),
        registry: registry.clone(),
        history: history.clone(),
        observer: Observer::new(scenario.nodes),
        bug: options.bug,
        dirs: dirs.clone(),
        disks: disks.clone(),
        clock_skews: clock_skews.clone(),
        slow_syncs: vec![Vec::new(); scenario.nodes],
        pending_cuts: Vec::new(),
        power_cuts: 0,
        topic_admin: options.topic_admin,
        replicated: options.mode == Mode::Replication,
        workload_bound_ms: WORKLOAD_BOUND_MS
            + if options.transactions {
                TXN_MARKER_TIMEOUT_MS
            } else {
                0
            },
        links: LinkTable::default(),
        down: vec![0; scenario.nodes],
        disk_faults: vec![0; scenario.nodes],
    };
    for (i, dir) in dirs.iter().enumerate() {
        let ctx = NodeContext {
            node: i,
            dir: dir.clone(),
            voters: voters(scenario.nodes),
            scenario: scenario.clone(),
            bug: options.bug,
            registry: registry.clone(),
            faults: disks[i].clone(),
            clock_skew: clock_skews[i].clone(),
            acl_users: options.acls,
            load_reviews: options.load_assignor,
        };
        host_node(&mut driver.sim, options.mode, i, ctx);
    }
    start_client(&mut driver.sim, &options, &history, scenario.nodes);
    let mut violations = driver.run();
    violations.append(&mut driver.observer.violations);
    let ops = history.borrow().ops.clone();
    check_end(&options, &driver, &ops, &mut violations);
    violations.extend(disks_bypassed(&disks, root.path()));
    violations.sort_by_key(|v| v.property);
    violations.dedup();
    let sim_ms = driver.now();
    let power_cuts = driver.power_cuts;
    // Stop every host before the directory goes away.
    drop(driver);
    let run = RunEnd {
        nodes: scenario.nodes,
        sim_ms,
        power_cuts,
    };
    outcome_of(&options, &history, &ops, violations, run)
}

fn new_registry(nodes: usize) -> Rc<RefCell<Registry>> {
    Rc::new(RefCell::new(Registry {
        quorums: vec![None; nodes],
        brokers: vec![None; nodes],
        starts: vec![0; nodes],
        start_errors: Vec::new(),
        disk_failing: vec![false; nodes],
        expected_start_errors: Vec::new(),
    }))
}

/// Files the nodes wrote around their fault-injecting disks.
fn disks_bypassed(
    disks: &[Option<Arc<gregor_log::FaultInjector>>],
    root: &std::path::Path,
) -> Vec<Violation> {
    let mut out = Vec::new();
    for (i, disk) in disks.iter().enumerate() {
        let bypassed = disk
            .as_ref()
            .map(|d| d.untracked_paths())
            .unwrap_or_default();
        let root = root.join(host_name(i));
        out.extend(checks::disk_bypassed(i, &bypassed, &root));
    }
    out
}

/// Installs the brokers' simulated clock and plants the run's bug where it lives.
fn plant_bugs(bug: Option<PlantedBug>) {
    use gregor_broker::simulation::PlantedBug as Broker;
    // The brokers read simulated time and do their file work inline (see gregor-broker's
    // `simulation::Simulation`); harmless for quorum runs, which use neither.
    gregor_broker::simulation::install_simulation(gregor_broker::simulation::Simulation {
        now_ms: broker_clock_ms,
    });
    gregor_broker::simulation::plant_on_this_thread(match bug {
        Some(PlantedBug::HighWatermarkMax) => Some(Broker::HighWatermarkMaxOverIsr),
        Some(PlantedBug::TruncateToHighWatermark) => Some(Broker::TruncateToHighWatermark),
        Some(PlantedBug::IsrShrinkBeforeCommit) => Some(Broker::IsrShrinkBeforeCommit),
        Some(PlantedBug::SkipFollowerSync) => Some(Broker::SkipFollowerSync),
        Some(PlantedBug::StaleSyncAssignment) => Some(Broker::StaleSyncAssignment),
        Some(PlantedBug::ProbeFencesLive) => Some(Broker::ProbeFencesLive),
        Some(PlantedBug::FollowerRestampsEpoch) => Some(Broker::FollowerRestampsEpoch),
        Some(PlantedBug::ConsumerReadsUncommitted) => Some(Broker::ConsumerReadsUncommitted),
        Some(PlantedBug::FollowerForgetsProducers) => Some(Broker::FollowerSkipsProducerState),
        Some(PlantedBug::ReplayKeepsFirstCommit) => Some(Broker::ReplayKeepsFirstCommit),
        Some(PlantedBug::FetchPastCommit) => Some(Broker::FetchPastCommit),
        Some(PlantedBug::ConsumerReplayKeepsFirstEpoch) => {
            Some(Broker::ConsumerReplayKeepsFirstEpoch)
        }
        Some(PlantedBug::UpgradeDropsAssignment) => Some(Broker::UpgradeDropsAssignment),
        Some(PlantedBug::ElectionKeepsLeaderEpoch) => Some(Broker::ElectionKeepsLeaderEpoch),
        Some(PlantedBug::StrayLogsKept) => Some(Broker::StrayLogsKept),
        Some(PlantedBug::AclAckBeforeApplied) => Some(Broker::AclAckBeforeApplied),
        Some(PlantedBug::QuotaAckBeforeApplied) => Some(Broker::QuotaAckBeforeApplied),
        Some(PlantedBug::FetchPositionPastEpoch) => Some(Broker::FetchPositionPastEpoch),
        Some(PlantedBug::TxnAbortVisible) => Some(Broker::TxnAbortVisible),
        Some(PlantedBug::TxnFencedProduce) => Some(Broker::TxnFencedProduce),
        Some(PlantedBug::TxnOffsetsEarly) => Some(Broker::TxnOffsetsEarly),
        Some(PlantedBug::TxnMarkerBeforePrepare) => Some(Broker::TxnMarkerBeforePrepare),
        Some(PlantedBug::TxnV2AnyRetry) => Some(Broker::TxnV2AnyRetry),
        _ => None,
    });
    if let Some(bug) = bug {
        bug.plant_in_quorum_and_client();
    }
}

/// The seed's scenario with the fault kinds the options ask for.
fn scenario_of(options: &SimOptions) -> Scenario {
    let mut scenario = match options.power_loss {
        false => Scenario::from_seed(options.seed),
        true => Scenario::from_seed(options.seed).with_power_losses(),
    };
    if options.disk_faults {
        scenario = scenario.with_disk_faults();
    }
    if options.slow_disks() {
        scenario = scenario.with_slow_disks();
    }
    if options.clock_jumps {
        scenario = scenario.with_clock_jumps();
    }
    if options.cascading_crashes {
        scenario = scenario.with_cascading_crashes(crate::history::PARTITIONS);
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
    scenario
}

/// Each node's disk, when the run injects disk faults: its data directory, empty and durable
/// at the start.
fn node_disks(
    options: &SimOptions,
    nodes: usize,
    root: &std::path::Path,
) -> Vec<Option<Arc<gregor_log::FaultInjector>>> {
    (0..nodes)
        .map(|i| {
            (options.power_loss || options.disk_faults || options.slow_disks()).then(|| {
                let data_dir = root.join(host_name(i));
                std::fs::create_dir_all(&data_dir).expect("a node's data directory");
                gregor_log::FaultInjector::power_model(&data_dir)
                    .expect("a power model of an empty directory")
            })
        })
        .collect()
}

/// The turmoil simulation of the seed: its timings and message latencies.
fn build_sim<'a>(options: &SimOptions, scenario: &Scenario) -> turmoil::Sim<'a> {
    turmoil::Builder::new()
        .simulation_duration(Duration::from_secs(3600))
        .tick_duration(Duration::from_millis(TICK_MS))
        .min_message_latency(Duration::from_millis(1))
        .max_message_latency(Duration::from_millis(scenario.max_latency_ms))
        .epoch(UNIX_EPOCH + Duration::from_secs(1_700_000_000))
        .tcp_capacity(4096)
        .rng_seed(options.seed)
        .build()
}

/// The controller quorum's voters and their addresses.
fn voters(nodes: usize) -> BTreeMap<NodeId, String> {
    (0..nodes).map(|i| (i as NodeId, address(i))).collect()
}

/// Hosts node `i`: a controller quorum member, or a whole broker.
fn host_node(sim: &mut turmoil::Sim<'_>, mode: Mode, i: usize, ctx: NodeContext) {
    match mode {
        Mode::Quorum => sim.host(host_name(i).as_str(), move || run_node(ctx.clone())),
        Mode::Replication => sim.host(host_name(i).as_str(), move || {
            crate::broker_node::run_broker_node(ctx.clone())
        }),
    }
}

/// The client host: controller operations, or the data-plane workloads.
fn start_client(
    sim: &mut turmoil::Sim<'_>,
    options: &SimOptions,
    history: &Rc<RefCell<History>>,
    nodes: usize,
) {
    match options.mode {
        Mode::Quorum => sim.client(
            "client",
            workload::run(history.clone(), options.seed, nodes),
        ),
        Mode::Replication => sim.client(
            "client",
            crate::traffic::run(history.clone(), *options, nodes),
        ),
    }
}

/// The checks of the end state: nodes that failed to start, every node's final image against
/// the acknowledged history and the others', and (replicated runs) the data and fences.
fn check_end(
    options: &SimOptions,
    driver: &Driver<'_>,
    ops: &[OpRecord],
    violations: &mut Vec<Violation>,
) {
    let registry = &driver.registry;
    let history = &driver.history;
    for (node, e) in registry.borrow().expected_start_errors.iter() {
        history.borrow_mut().trace.push(format!(
            "n{node} could not start on its failing or powerless disk: {e}"
        ));
    }
    violations.extend(checks::start_failures(&registry.borrow().start_errors));
    // The end state of every node.
    let finals: Vec<Option<(u64, Arc<MetadataImage>)>> = live_nodes(registry)
        .iter()
        .map(|q| {
            q.as_ref()
                .map(|q| (q.quorum().applied_index(), q.quorum().image()))
        })
        .collect();
    let converged = !violations.iter().any(|v| v.property == Property::Liveness);
    for (i, f) in finals.iter().enumerate() {
        let Some((applied, image)) = f else { continue };
        history.borrow_mut().trace.push(format!(
            "end n{i} applied={applied} image={:016x} topics={} brokers={}",
            checks::image_digest(image),
            image.topics().len(),
            image.brokers().len()
        ));
        violations.extend(check_acked(ops, i, image));
    }
    violations.extend(checks::images_diverge(&finals, converged));
    if options.mode == Mode::Replication {
        violations.extend(crate::data_check::check(&history.borrow().data));
        violations.extend(crate::fence_check::check(&driver.observer.health));
        if options.transactions {
            violations.extend(crate::txn_check::check(&history.borrow().data.txn));
        }
    }
}

/// What the driver knows of a run once its hosts stopped.
struct RunEnd {
    nodes: usize,
    sim_ms: u64,
    power_cuts: usize,
}

/// The outcome, with the violations at the end of the trace.
fn outcome_of(
    options: &SimOptions,
    history: &Rc<RefCell<History>>,
    ops: &[OpRecord],
    violations: Vec<Violation>,
    run: RunEnd,
) -> Outcome {
    let mut h = history.borrow_mut();
    for v in &violations {
        h.trace
            .push(format!("violation {}: {}", v.property, v.detail));
    }
    let trace = std::mem::take(&mut h.trace);
    let mut hasher = fnv::FnvHasher::default();
    for line in &trace {
        hasher.write(line.as_bytes());
        hasher.write_u8(b'\n');
    }
    Outcome {
        seed: options.seed,
        nodes: run.nodes,
        trace_hash: hasher.finish(),
        trace,
        acked: match options.mode {
            Mode::Quorum => ops.iter().filter(|o| o.reply.is_some()).count(),
            Mode::Replication => h.data.acked_all.len(),
        },
        ops: ops.len(),
        violations,
        sim_ms: run.sim_ms,
        power_cuts: run.power_cuts,
    }
}
