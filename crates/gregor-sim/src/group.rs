//! Consumer groups in a replicated run (`--groups`): two or three members of one group, each the
//! real gregor-client `Consumer` (its group membership, heartbeats, assignors, fetching and
//! offset commits) on turmoil's network, consume the data topic with one of the four built-in
//! strategies while the faults run. Members come and go: each incarnation lives a random while,
//! then leaves the group (LeaveGroup) or vanishes (its heartbeats stop and its session expires),
//! and a new one joins. What each member owned in which generation, what it read and which
//! commits were acknowledged go to the checker (`group_check.rs`). With `--group-protocol
//! consumer` the members use KIP-848 (`group.protocol=consumer`) with the coordinator's
//! `uniform` or `range` assignor drawn per seed; a "generation" is then the member epoch.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;
use std::time::Duration;

use gregor_client::connection::{DialedStream, Dialer};
use gregor_client::consumer::{AutoOffsetReset, GroupProtocol};
use gregor_client::{Consumer, ConsumerConfig, ConsumerRecord, TopicPartition};
use gregor_meta::SplitMix64;

use crate::broker_node::client_address;
use crate::data::sleep_ms;
use crate::history::{Commit, GroupRead, History, Owned, PARTITIONS, TOPIC};
use crate::node::now_ms;

pub const GROUP: &str = "sim-group";

/// After the first acknowledgement that follows the faults, the group must have committed past
/// every acknowledged `acks=all` record within this much simulated time, or be catching up:
/// its commits moving forward at least every [`GROUP_STALL_MS`].
pub const GROUP_BOUND_MS: u64 = 20_000;

/// A group still catching up past [`GROUP_BOUND_MS`] fails once its commits stand still this
/// long. A group that lost its progress during the faults re-reads its backlog a few records
/// per `poll`, one synchronous commit each, which can take longer than the bound.
pub const GROUP_STALL_MS: u64 = 5_000;

/// However steadily it commits, the group must be done this long after the first
/// acknowledgement that follows the faults.
pub const GROUP_CATCH_UP_MS: u64 = 60_000;

/// The strategies a seed draws from (every member of a run uses the same one).
pub const STRATEGIES: [&str; 4] = ["range", "roundrobin", "sticky", "cooperative-sticky"];

/// The coordinator's assignors a `--group-protocol consumer` seed draws from
/// (`group.remote.assignor`, the same for every member).
pub const REMOTE_ASSIGNORS: [&str; 2] = ["uniform", "range"];

/// What the group workload does besides consuming (`--stalls`, `--static-members`).
#[derive(Debug, Clone, Copy, Default)]
pub struct GroupWorkload {
    /// One incarnation in four stalls past its `max.poll.interval.ms` once, while the faults
    /// run, between a `poll` and its commit.
    pub stalls: bool,
    /// Every member has a `group.instance.id` ("sim-m0", ...), kept by each of its
    /// incarnations.
    pub static_members: bool,
    /// The members use `group.protocol=consumer` (KIP-848); their generations are member
    /// epochs.
    pub consumer_protocol: bool,
    /// Each incarnation speaks the classic protocol or the consumer protocol, drawn as it
    /// starts: the group migrates online between them (KIP-848's upgrade and downgrade), its
    /// classic members inside a consumer group in between.
    pub mixed_protocols: bool,
    /// With `consumer_protocol`: every member asks for the coordinator's `load` assignor.
    pub load_assignor: bool,
}

/// The coordinator's assignor of the consumer-protocol incarnations of a mixed group.
const MIXED_REMOTE_ASSIGNOR: &str = "uniform";

const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// `max.poll.interval.ms` of a member incarnation that stalls (`--stalls`); it stalls
/// 0.3-2.3 s longer than this.
const STALL_POLL_INTERVAL_MS: u64 = 2_500;

/// Raises each data partition's entry in `highest` to the high watermark `consumer` cached
/// from its last Fetch answer. The highest, not the last: the records a `poll` returns may
/// come from an earlier answer than the last one, and a new leader can report a lower high
/// watermark for a while (KIP-207). Every answer's records are returned no earlier than the
/// `poll` that took the answer in, after which this samples it.
fn note_high_watermarks(consumer: &Consumer, highest: &mut BTreeMap<i32, i64>) {
    for partition in 0..PARTITIONS {
        if let Some(hw) = consumer.cached_high_watermark(&TopicPartition::new(TOPIC, partition)) {
            let e = highest.entry(partition).or_insert(hw);
            *e = (*e).max(hw);
        }
    }
}

/// turmoil's simulated TCP for the consumer's connections.
fn sim_dialer() -> Dialer {
    Dialer::new(|addr| {
        let addr = addr.to_string();
        Box::pin(async move {
            let s = turmoil::net::TcpStream::connect(addr.as_str()).await?;
            Ok(Box::new(s) as Box<dyn DialedStream>)
        })
    })
}

fn consumer_config(
    nodes: usize,
    strategy: &str,
    consumer_protocol: bool,
    label: &str,
    rng: &mut SplitMix64,
) -> ConsumerConfig {
    let bootstrap: Vec<String> = (0..nodes).map(client_address).collect();
    let mut c = ConsumerConfig::new(&bootstrap.join(","), GROUP)
        .expect("the simulated bootstrap list is valid");
    c.client.client_id = format!("sim-{label}");
    c.client.connect_timeout = REQUEST_TIMEOUT;
    c.client.request_timeout = REQUEST_TIMEOUT;
    c.client.api_timeout = Duration::from_secs(6);
    c.client.dialer = Some(sim_dialer());
    // Kafka's timings scaled down as the brokers' are (the brokers allow 1 s sessions).
    c.session_timeout = Duration::from_millis(3_000);
    c.heartbeat_interval = Duration::from_millis(500);
    c.max_poll_interval = Duration::from_millis(10_000);
    if consumer_protocol {
        // The coordinator assigns, with its heartbeat interval and session timeout.
        c.group_protocol = GroupProtocol::Consumer;
        c.group_remote_assignor = Some(strategy.to_string());
    } else {
        c.partition_assignment_strategy = vec![strategy.to_string()];
    }
    c.enable_auto_commit = false;
    c.auto_offset_reset = AutoOffsetReset::Earliest;
    c.fetch_max_wait = Duration::from_millis(200);
    // Few records per poll, so commits are frequent and ownership changes fall between them.
    c.max_poll_records = 1 + rng.next_below(4);
    c
}

/// Per partition, the offset past every acknowledged `acks=all` record (once the producers
/// are done), which the group's commits must reach.
fn target(h: &History) -> Option<BTreeMap<i32, i64>> {
    if !h.data.producers_done || h.data.first_ack_after_faults.is_none() {
        return None;
    }
    Some(
        (0..PARTITIONS)
            .map(|p| (p, h.data.acked_all_end(p)))
            .collect(),
    )
}

/// Whether the group is done (its commits reached the target) or past its bound; records
/// either once.
fn check_finished(history: &Rc<RefCell<History>>) -> bool {
    let mut h = history.borrow_mut();
    if h.data.group.done_at.is_some() || h.data.group.stuck.is_some() {
        return true;
    }
    let Some(target) = target(&h) else {
        return false;
    };
    let mut committed: BTreeMap<i32, i64> = BTreeMap::new();
    let mut last_progress_ms = 0;
    for c in &h.data.group.commits {
        let e = committed.entry(c.partition).or_insert(i64::MIN);
        if c.offset > *e {
            *e = c.offset;
            last_progress_ms = c.at_ms;
        }
    }
    let now = now_ms() as u64;
    if target
        .iter()
        .all(|(p, end)| committed.get(p).copied().unwrap_or(0) >= *end)
    {
        h.data.group.done_at = Some(now);
        h.event(format!(
            "group committed past every acknowledged record: {committed:?}"
        ));
        return true;
    }
    let first = h.data.first_ack_after_faults.expect("target() checked it");
    let since_first = now.saturating_sub(first);
    let stalled = now.saturating_sub(last_progress_ms) > GROUP_STALL_MS;
    if since_first > GROUP_CATCH_UP_MS || (since_first > GROUP_BOUND_MS && stalled) {
        h.data.group.stuck = Some(format!(
            "the group's commits {committed:?} had not reached {target:?} {since_first} ms after the first acknowledgement that followed the faults (last progress {last_progress_ms} ms)"
        ));
        return true;
    }
    false
}

/// One member of the group across its incarnations.
struct Member {
    history: Rc<RefCell<History>>,
    nodes: usize,
    index: usize,
    strategy: &'static str,
    workload: GroupWorkload,
    rng: SplitMix64,
    /// Its own stream, so that the other draws stay what they are without `--stalls`.
    stall_rng: SplitMix64,
    /// The generation and assignment the previous incarnation last reported.
    predecessor: Option<(i32, BTreeSet<i32>)>,
}

/// One incarnation of a member: its consumer and what it last reported.
struct Incarnation {
    label: String,
    consumer: Consumer,
    /// This incarnation gets stuck once in its processing, past max.poll.interval.ms.
    stall_ms: Option<u64>,
    /// The member id, generation and assignment it last reported.
    last: Option<(String, i32, BTreeSet<i32>)>,
    high_watermarks: BTreeMap<i32, i64>,
}

/// One member: a consumer per incarnation, until the group is done.
async fn member(
    history: Rc<RefCell<History>>,
    nodes: usize,
    index: usize,
    strategy: &'static str,
    seed: u64,
    workload: GroupWorkload,
) {
    let mut m = Member {
        history,
        nodes,
        index,
        strategy,
        workload,
        rng: SplitMix64::new(seed ^ 0x6709_0000 ^ (index as u64) << 8),
        stall_rng: SplitMix64::new(seed ^ 0x5747_0000 ^ (index as u64) << 8),
        predecessor: None,
    };
    sleep_ms(m.rng.next_below(2_000) as u64).await;
    let mut incarnation = 0;
    while !check_finished(&m.history) {
        incarnation += 1;
        let Some(mut inc) = m.start(format!("m{index}.{incarnation}")).await else {
            continue;
        };
        // While the faults run, an incarnation lives a while; after them, until the end.
        let lifetime_end = now_ms() as u64 + 1_500 + m.rng.next_below(4_500) as u64;
        let vanish = m.rng.next_below(4) == 0;
        m.live(&mut inc, lifetime_end).await;
        m.end(inc, vanish).await;
    }
}

impl Member {
    /// A new incarnation's consumer, subscribed to the data topic.
    async fn start(&mut self, label: String) -> Option<Incarnation> {
        let consumer_protocol = self.workload.consumer_protocol
            || (self.workload.mixed_protocols && self.rng.next_below(2) == 0);
        let strategy = match (consumer_protocol, self.workload.mixed_protocols) {
            (true, true) => MIXED_REMOTE_ASSIGNOR,
            _ => self.strategy,
        };
        let mut config = consumer_config(
            self.nodes,
            strategy,
            consumer_protocol,
            &label,
            &mut self.rng,
        );
        if self.workload.static_members {
            config.group_instance_id = Some(format!("sim-m{}", self.index));
        }
        let stall_ms = (self.workload.stalls && self.stall_rng.next_below(4) == 0)
            .then(|| STALL_POLL_INTERVAL_MS + 300 + self.stall_rng.next_below(2_000) as u64);
        if stall_ms.is_some() {
            config.max_poll_interval = Duration::from_millis(STALL_POLL_INTERVAL_MS);
        }
        let mut consumer = match Consumer::new(config).await {
            Ok(c) => c,
            Err(e) => {
                self.history
                    .borrow_mut()
                    .event(format!("{label} cannot start: {e}"));
                sleep_ms(200).await;
                return None;
            }
        };
        if let Err(e) = consumer.subscribe(&[TOPIC]).await {
            self.history
                .borrow_mut()
                .event(format!("{label} cannot subscribe: {e}"));
            return None;
        }
        self.history.borrow_mut().event(format!("{label} started"));
        Some(Incarnation {
            label,
            consumer,
            stall_ms,
            last: None,
            high_watermarks: BTreeMap::new(),
        })
    }

    /// Polls, records what it owns and reads, and commits, until its lifetime ends (while the
    /// faults run) or the group workload finishes.
    async fn live(&mut self, inc: &mut Incarnation, lifetime_end: u64) {
        loop {
            if check_finished(&self.history) {
                break;
            }
            let faults_over = self.history.borrow().faults_over;
            if !faults_over && now_ms() as u64 >= lifetime_end {
                break;
            }
            let polled = inc.consumer.poll(Duration::from_millis(100)).await;
            let (member_id, generation) = inc.consumer.group_metadata();
            let assignment: BTreeSet<i32> = inc
                .consumer
                .assignment()
                .into_iter()
                .filter(|tp| tp.topic == TOPIC)
                .map(|tp| tp.partition)
                .collect();
            let at_ms = now_ms() as u64;
            note_high_watermarks(&inc.consumer, &mut inc.high_watermarks);
            self.note_owned(inc, (member_id.clone(), generation, assignment), at_ms);
            let records = match polled {
                Ok(r) => r,
                Err(e) => {
                    let label = &inc.label;
                    self.history
                        .borrow_mut()
                        .event(format!("{label} poll: {e}"));
                    sleep_ms(50).await;
                    continue;
                }
            };
            if records.is_empty() {
                continue;
            }
            let positions = self.note_reads(inc, &member_id, generation, &records, at_ms);
            self.stall(inc).await;
            self.commit(inc, generation, positions).await;
        }
    }

    /// Records a new (member id, generation, assignment) the consumer reports.
    fn note_owned(
        &self,
        inc: &mut Incarnation,
        snapshot: (String, i32, BTreeSet<i32>),
        at_ms: u64,
    ) {
        if inc.last.as_ref() == Some(&snapshot) {
            return;
        }
        let label = &inc.label;
        let (member_id, generation, assignment) = snapshot.clone();
        let mut h = self.history.borrow_mut();
        h.event(format!(
            "{label} member {member_id} generation {generation} owns {assignment:?}"
        ));
        let took_over = inc.last.is_none()
            && generation >= 0
            && !assignment.is_empty()
            && self
                .predecessor
                .as_ref()
                .is_some_and(|(g, _)| *g == generation);
        if took_over {
            let (_, before) = self.predecessor.as_ref().expect("took_over checked it");
            h.event(format!(
                "{label} took its static predecessor's place in generation {generation} without a rebalance (it owned {before:?})"
            ));
        }
        h.data.group.owned.push(Owned {
            consumer: label.clone(),
            member_id,
            generation,
            partitions: assignment,
            at_ms,
        });
        inc.last = Some(snapshot);
    }

    /// Records what a poll returned; the positions to commit after it.
    fn note_reads(
        &self,
        inc: &Incarnation,
        member_id: &str,
        generation: i32,
        records: &[ConsumerRecord],
        at_ms: u64,
    ) -> BTreeMap<TopicPartition, i64> {
        let mut positions = BTreeMap::new();
        let mut h = self.history.borrow_mut();
        for r in records {
            let value = r
                .value
                .as_ref()
                .map(|v| String::from_utf8_lossy(v).into_owned())
                .unwrap_or_default();
            h.data.group.reads.push(GroupRead {
                consumer: inc.label.clone(),
                member_id: member_id.to_string(),
                generation,
                partition: r.partition,
                offset: r.offset,
                value,
                high_watermark: inc.high_watermarks.get(&r.partition).copied(),
                at_ms,
            });
            let tp = TopicPartition::new(&*r.topic, r.partition);
            positions.insert(tp, r.offset + 1);
        }
        positions
    }

    /// `--stalls`: the incarnation's one stall, while the faults run.
    async fn stall(&self, inc: &mut Incarnation) {
        if let Some(ms) = inc.stall_ms.filter(|_| !self.history.borrow().faults_over) {
            // Stuck between reading and committing: the coordinator hands its partitions
            // to the others meanwhile, and the commit that follows must not move theirs.
            inc.stall_ms = None;
            let label = &inc.label;
            self.history
                .borrow_mut()
                .event(format!("{label} stalls {ms} ms before committing"));
            sleep_ms(ms).await;
        }
    }

    /// Commits what was just processed (at-least-once), as an application does.
    async fn commit(
        &self,
        inc: &mut Incarnation,
        generation: i32,
        positions: BTreeMap<TopicPartition, i64>,
    ) {
        let label = &inc.label;
        match inc.consumer.commit_sync(Some(positions.clone())).await {
            Ok(()) => {
                let at_ms = now_ms() as u64;
                let mut h = self.history.borrow_mut();
                let summary: Vec<String> = positions
                    .iter()
                    .map(|(tp, o)| format!("p{}@{o}", tp.partition))
                    .collect();
                h.event(format!(
                    "{label} generation {generation} committed {summary:?}"
                ));
                for (tp, offset) in positions {
                    h.data.group.commits.push(Commit {
                        consumer: label.clone(),
                        generation,
                        partition: tp.partition,
                        offset,
                        at_ms,
                    });
                }
            }
            Err(e) => self.history.borrow_mut().event(format!(
                "{label} generation {generation} commit failed: {e}"
            )),
        }
    }

    /// The incarnation leaves the group, or vanishes; the next starts a while later.
    async fn end(&mut self, inc: Incarnation, vanish: bool) {
        let label = inc.label;
        // Only a static member's next incarnation can take its place (a dynamic one joins as a
        // new member, whatever generation it lands in).
        if self.workload.static_members {
            self.predecessor = inc
                .last
                .map(|(_, generation, assignment)| (generation, assignment));
        }
        if vanish && !check_finished(&self.history) {
            self.history.borrow_mut().event(format!("{label} vanishes"));
            drop(inc.consumer);
        } else {
            let result = inc.consumer.close().await;
            self.history
                .borrow_mut()
                .event(format!("{label} left the group: {result:?}"));
        }
        sleep_ms(200 + self.rng.next_below(1_300) as u64).await;
    }
}

/// The group workload: `members` consumers with one strategy, drawn from the seed.
pub async fn run(history: Rc<RefCell<History>>, nodes: usize, seed: u64, workload: GroupWorkload) {
    let mut rng = SplitMix64::new(seed ^ 0x0067_7209);
    let strategy = match workload.consumer_protocol {
        true => REMOTE_ASSIGNORS[rng.next_below(REMOTE_ASSIGNORS.len())],
        false => STRATEGIES[rng.next_below(STRATEGIES.len())],
    };
    // Drawn all the same, so that the rest of the seed's draws stay those of `consumer` runs.
    let strategy = if workload.load_assignor {
        "load"
    } else {
        strategy
    };
    let members = 2 + rng.next_below(2);
    {
        let mut h = history.borrow_mut();
        h.data.group.strategy = strategy.to_string();
        h.data.group.static_members = workload.static_members;
        h.data.group.consumer_protocol = workload.consumer_protocol;
        h.data.group.mixed_protocols = workload.mixed_protocols;
        let kind = if workload.static_members {
            "static members"
        } else {
            "members"
        };
        let protocol = match (workload.consumer_protocol, workload.mixed_protocols) {
            (true, _) => "group.protocol=consumer, group.remote.assignor=",
            (false, true) => {
                "group.protocol classic or consumer (uniform) per incarnation, classic "
            }
            (false, false) => "",
        };
        h.event(format!(
            "group {GROUP}: {members} {kind}, {protocol}{strategy}"
        ));
    }
    let tasks: Vec<_> = (0..members)
        .map(|i| member(history.clone(), nodes, i, strategy, seed, workload))
        .collect();
    futures::future::join_all(tasks).await;
}
