//! Independent, deliberately naive models used by the property tests: the test-case description,
//! Kafka's member order, reference `range` and `roundrobin` assignors written from the seed
//! document and Kafka's documented behaviour, the "valid previous owner" rule, the balance
//! criterion and a brute-force stickiness oracle.
//!
//! Nothing here uses the crate's strategies or its `GroupSpec` internals: inputs are plain names
//! and numbers, outputs are `member id -> {(topic, partition)}`.
#![allow(dead_code)]

use std::cmp::Ordering;
use std::collections::{BTreeMap, BTreeSet};

use gregor_assign::Member;

/// `(topic, partition)`.
pub type Tp = (String, i32);
/// member id -> partitions.
pub type Named = BTreeMap<String, BTreeSet<Tp>>;

/// A topic of a test case, exactly as handed to `GroupSpec::builder()`.
#[derive(Debug, Clone)]
pub struct TopicDef {
    pub name: String,
    pub partitions: i64,
    /// Per partition the racks of its replicas; empty when unknown.
    pub replica_racks: Vec<Vec<String>>,
}

/// A whole test case: topics and members, in the order they are given to the builder.
#[derive(Clone)]
pub struct Case {
    pub topics: Vec<TopicDef>,
    pub members: Vec<Member>,
}

/// Compact, for readable counterexamples.
impl std::fmt::Debug for Case {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        writeln!(f, "Case {{")?;
        for t in &self.topics {
            write!(f, "  topic {:?} x{}", t.name, t.partitions)?;
            if !t.replica_racks.is_empty() {
                write!(f, " racks {:?}", t.replica_racks)?;
            }
            writeln!(f)?;
        }
        for m in &self.members {
            write!(f, "  member {:?}", m.member_id)?;
            if let Some(i) = &m.group_instance_id {
                write!(f, " instance={i:?}")?;
            }
            if let Some(r) = &m.rack {
                write!(f, " rack={r:?}")?;
            }
            write!(f, " gen={:?} subs={:?}", m.generation, m.topics)?;
            let owns: Vec<String> = m
                .owned_partitions
                .iter()
                .map(|(t, p)| format!("{t}-{p}"))
                .collect();
            writeln!(f, " owns={owns:?}")?;
        }
        write!(f, "}}")
    }
}

impl Case {
    pub fn topic(&self, name: &str) -> Option<&TopicDef> {
        self.topics.iter().find(|t| t.name == name)
    }

    /// Existing topics a member subscribes to.
    pub fn subscription(&self, m: &Member) -> BTreeSet<String> {
        m.topics
            .iter()
            .filter(|t| self.topic(t).is_some())
            .cloned()
            .collect()
    }

    /// Every member subscribes to the same existing topics.
    pub fn identical_subscriptions(&self) -> bool {
        let subs: Vec<BTreeSet<String>> =
            self.members.iter().map(|m| self.subscription(m)).collect();
        subs.windows(2).all(|w| w[0] == w[1])
    }

    /// Existing topics subscribed by at least one member.
    pub fn subscribed_topics(&self) -> BTreeSet<String> {
        self.members
            .iter()
            .flat_map(|m| self.subscription(m))
            .collect()
    }

    /// All partitions of subscribed topics.
    pub fn subscribed_partitions(&self) -> BTreeSet<Tp> {
        let subscribed = self.subscribed_topics();
        self.topics
            .iter()
            .filter(|t| subscribed.contains(&t.name))
            .flat_map(|t| (0..t.partitions as i32).map(move |p| (t.name.clone(), p)))
            .collect()
    }

    /// Member ids subscribing to an (existing) topic, in the order given.
    pub fn subscribers(&self, topic: &str) -> Vec<String> {
        self.members
            .iter()
            .filter(|m| self.topic(topic).is_some() && m.topics.iter().any(|t| t == topic))
            .map(|m| m.member_id.clone())
            .collect()
    }

    /// The partitions each member claims (owned_partitions), restricted to partitions that
    /// exist, deduplicated.
    pub fn claims(&self) -> BTreeMap<String, BTreeSet<Tp>> {
        self.members
            .iter()
            .map(|m| {
                let set = m
                    .owned_partitions
                    .iter()
                    .filter(|(t, p)| {
                        self.topic(t)
                            .is_some_and(|d| *p >= 0 && (*p as i64) < d.partitions)
                    })
                    .cloned()
                    .collect();
                (m.member_id.clone(), set)
            })
            .collect()
    }

    /// partition -> ids of the members claiming it.
    pub fn claimants(&self) -> BTreeMap<Tp, BTreeSet<String>> {
        let mut out: BTreeMap<Tp, BTreeSet<String>> = BTreeMap::new();
        for (m, set) in self.claims() {
            for tp in set {
                out.entry(tp).or_default().insert(m.clone());
            }
        }
        out
    }

    /// "Valid previous owner": the claimant with the unique highest generation (a missing
    /// generation counts as -1, Kafka's default) among the members claiming the partition, who
    /// still subscribes to its topic; a tie at the highest generation means no previous owner.
    pub fn valid_previous_owners(&self) -> BTreeMap<Tp, String> {
        let generation: BTreeMap<&str, i32> = self
            .members
            .iter()
            .map(|m| (m.member_id.as_str(), m.generation.unwrap_or(-1)))
            .collect();
        let mut out = BTreeMap::new();
        for (tp, claimants) in self.claimants() {
            let best = claimants
                .iter()
                .map(|m| generation[m.as_str()])
                .max()
                .expect("a claimed partition has claimants");
            let top: Vec<&String> = claimants
                .iter()
                .filter(|m| generation[m.as_str()] == best)
                .collect();
            if top.len() != 1 {
                continue;
            }
            let owner = top[0];
            let member = self
                .members
                .iter()
                .find(|m| &m.member_id == owner)
                .expect("claimant is a member");
            if member.topics.contains(&tp.0) {
                out.insert(tp, owner.clone());
            }
        }
        out
    }
}

/// Java's `String.compareTo`: lexicographic over UTF-16 code units.
pub fn java_order(a: &str, b: &str) -> Ordering {
    let a: Vec<u16> = a.encode_utf16().collect();
    let b: Vec<u16> = b.encode_utf16().collect();
    a.cmp(&b)
}

/// Kafka's member order: members with a group.instance.id first, ordered by it; then the rest by
/// member id. Returns indices into `members`.
pub fn member_order(members: &[Member]) -> Vec<usize> {
    let mut idx: Vec<usize> = (0..members.len()).collect();
    idx.sort_by(|&a, &b| {
        let (ma, mb) = (&members[a], &members[b]);
        match (&ma.group_instance_id, &mb.group_instance_id) {
            (Some(x), Some(y)) => java_order(x, y),
            (Some(_), None) => Ordering::Less,
            (None, Some(_)) => Ordering::Greater,
            (None, None) => java_order(&ma.member_id, &mb.member_id),
        }
    });
    idx
}

fn rack_of(m: &Member) -> Option<&str> {
    m.rack.as_deref().filter(|r| !r.is_empty())
}

fn empty_result(case: &Case) -> Named {
    case.members
        .iter()
        .map(|m| (m.member_id.clone(), BTreeSet::new()))
        .collect()
}

// ------------------------------------------------------------------------------------ range

/// Per-topic state of the reference range assignor.
struct RangeTopic {
    name: String,
    partitions: usize,
    /// Replica rack set of each partition.
    racks: Vec<BTreeSet<String>>,
    /// Subscribers (indices into the case's members) in Kafka's member order.
    subs: Vec<usize>,
    assigned_count: Vec<usize>,
    per_member: usize,
    remaining_extra: i64,
    unassigned: Vec<bool>,
    any_member_rack: bool,
    needs_rack_aware: bool,
}

impl RangeTopic {
    fn quota_left(&self, pos: usize) -> usize {
        let cap = self.per_member + usize::from(self.remaining_extra > 0);
        cap.saturating_sub(self.assigned_count[pos])
    }

    fn racks_match(&self, member: &Member, p: usize) -> bool {
        match rack_of(member) {
            None => true,
            Some(r) => self.racks[p].contains(r),
        }
    }

    fn assign(&mut self, out: &mut Named, case: &Case, pos: usize, ps: &[usize]) {
        let id = &case.members[self.subs[pos]].member_id;
        for &p in ps {
            assert!(
                self.unassigned[p],
                "reference range assigns a partition twice"
            );
            self.unassigned[p] = false;
            out.get_mut(id)
                .expect("member")
                .insert((self.name.clone(), p as i32));
        }
        self.assigned_count[pos] += ps.len();
        if self.assigned_count[pos] > self.per_member {
            self.remaining_extra -= 1;
        }
    }

    /// One range pass: each subscriber in order takes the first unassigned partitions allowed by
    /// `may`, up to its quota.
    fn ranges(&mut self, out: &mut Named, case: &Case, rack_aware: bool) {
        for pos in 0..self.subs.len() {
            if !self.unassigned.iter().any(|u| *u) {
                break;
            }
            let member = &case.members[self.subs[pos]];
            let take: Vec<usize> = (0..self.partitions)
                .filter(|&p| self.unassigned[p] && (!rack_aware || self.racks_match(member, p)))
                .take(self.quota_left(pos))
                .collect();
            if take.is_empty() {
                continue;
            }
            self.assign(out, case, pos, &take);
        }
    }
}

/// Reference `range`: per topic, subscribers in member order, the first `P % n` get `P/n + 1`
/// consecutive partitions, the others `P/n`; with Kafka's rack-aware first pass.
pub fn range(case: &Case) -> Named {
    let order = member_order(&case.members);
    let mut out = empty_result(case);
    let mut states: Vec<RangeTopic> = Vec::new();
    for t in &case.topics {
        let subs: Vec<usize> = order
            .iter()
            .copied()
            .filter(|&m| case.members[m].topics.contains(&t.name))
            .collect();
        if subs.is_empty() {
            continue;
        }
        let partitions = t.partitions as usize;
        let racks: Vec<BTreeSet<String>> = (0..partitions)
            .map(|p| {
                t.replica_racks
                    .get(p)
                    .map(|rs| rs.iter().cloned().collect())
                    .unwrap_or_default()
            })
            .collect();
        let member_racks: BTreeSet<&str> = subs
            .iter()
            .filter_map(|&m| rack_of(&case.members[m]))
            .collect();
        let all_partition_racks: BTreeSet<String> = racks.iter().flatten().cloned().collect();
        let any_member_rack = !member_racks.is_empty();
        let overlap = member_racks
            .iter()
            .any(|r| all_partition_racks.contains(*r));
        let all_same = racks.iter().all(|r| *r == all_partition_racks);
        let n = subs.len();
        states.push(RangeTopic {
            name: t.name.clone(),
            partitions,
            racks,
            assigned_count: vec![0; n],
            per_member: partitions / n,
            remaining_extra: (partitions % n) as i64,
            unassigned: vec![true; partitions],
            any_member_rack,
            needs_rack_aware: any_member_rack && overlap && !all_same,
            subs,
        });
    }

    if states.iter().any(|s| s.needs_rack_aware) {
        // Co-partitioned groups: same subscriber list and, when a subscriber has a rack, the same
        // partition count (Kafka keys on the size of its partition-rack map, which is empty
        // without consumer racks).
        let key = |s: &RangeTopic| {
            (
                s.subs.clone(),
                if s.any_member_rack { s.partitions } else { 0 },
            )
        };
        let mut done = vec![false; states.len()];
        for i in 0..states.len() {
            if done[i] {
                continue;
            }
            let k = key(&states[i]);
            let group: Vec<usize> = (i..states.len())
                .filter(|&j| !done[j] && key(&states[j]) == k)
                .collect();
            for &j in &group {
                done[j] = true;
            }
            if group.len() > 1 {
                co_partitioned(case, &mut states, &group, k.1, &mut out);
            } else if states[i].needs_rack_aware {
                states[i].ranges(&mut out, case, true);
            }
        }
    }
    for s in &mut states {
        s.ranges(&mut out, case, false);
    }
    out
}

fn co_partitioned(
    case: &Case,
    states: &mut [RangeTopic],
    group: &[usize],
    num_partitions: usize,
    out: &mut Named,
) {
    let subs = states[group[0]].subs.clone();
    let mut remaining: Vec<usize> = (0..subs.len()).collect();
    for p in 0..num_partitions {
        let found = remaining.iter().position(|&pos| {
            let member = &case.members[subs[pos]];
            group
                .iter()
                .all(|&t| states[t].racks_match(member, p) && states[t].quota_left(pos) > 0)
        });
        let Some(i) = found else { continue };
        let pos = remaining[i];
        for &t in group {
            states[t].assign(out, case, pos, &[p]);
        }
        if group.iter().all(|&t| states[t].quota_left(pos) == 0) {
            remaining.remove(i);
            if remaining.is_empty() {
                break;
            }
        }
    }
}

// ------------------------------------------------------------------------------- roundrobin

/// Reference `roundrobin`: partitions of subscribed existing topics sorted by topic name (Java
/// order) then number, dealt to the members in member order around a circle, skipping members
/// that do not subscribe to the partition's topic.
pub fn roundrobin(case: &Case) -> Named {
    let order = member_order(&case.members);
    let mut out = empty_result(case);
    let mut topics: Vec<&TopicDef> = case
        .topics
        .iter()
        .filter(|t| case.members.iter().any(|m| m.topics.contains(&t.name)))
        .collect();
    topics.sort_by(|a, b| java_order(&a.name, &b.name));
    let mut cursor = 0usize;
    for t in topics {
        for p in 0..t.partitions as i32 {
            while !case.members[order[cursor]].topics.contains(&t.name) {
                cursor = (cursor + 1) % order.len();
            }
            out.get_mut(&case.members[order[cursor]].member_id)
                .expect("member")
                .insert((t.name.clone(), p));
            cursor = (cursor + 1) % order.len();
        }
    }
    out
}

// --------------------------------------------------------------------------------- balance

/// The balance criterion, or why it fails: with identical subscriptions, sizes differ by at most
/// one; in every case no partition could move to a subscriber of its topic that has two or more
/// fewer partitions.
pub fn balance_violation(case: &Case, target: &Named) -> Option<String> {
    let count = |m: &str| target.get(m).map_or(0, BTreeSet::len);
    if case.identical_subscriptions() && !case.members.is_empty() {
        let max = case
            .members
            .iter()
            .map(|m| count(&m.member_id))
            .max()
            .unwrap_or(0);
        let min = case
            .members
            .iter()
            .map(|m| count(&m.member_id))
            .min()
            .unwrap_or(0);
        if max > min + 1 {
            return Some(format!("identical subscriptions but sizes {min}..{max}"));
        }
    }
    for (owner, parts) in target {
        for (t, p) in parts {
            for s in case.subscribers(t) {
                if count(owner) >= count(&s) + 2 {
                    return Some(format!(
                        "{t}-{p} could move from {owner:?} ({}) to {s:?} ({})",
                        count(owner),
                        count(&s)
                    ));
                }
            }
        }
    }
    None
}

/// Number of partitions whose valid previous owner does not hold them in `target`.
pub fn moved(prev: &BTreeMap<Tp, String>, target: &Named) -> usize {
    prev.iter()
        .filter(|(tp, owner)| !target.get(*owner).is_some_and(|s| s.contains(*tp)))
        .count()
}

// ----------------------------------------------------------------------------- stickiness

/// Identical subscriptions, no racks: the fewest previously owned partitions any balanced
/// assignment must move. Each member keeps at most its quota (floor or ceil of P/n, exactly P%n
/// members at ceil); ceil slots go where they save a move, i.e. to members owning more than the
/// floor.
pub fn min_moves_identical(case: &Case) -> usize {
    let n = case.members.len();
    if n == 0 {
        return 0;
    }
    let p = case.subscribed_partitions().len();
    let (floor, extra) = (p / n, p % n);
    let prev = case.valid_previous_owners();
    let mut owned: BTreeMap<&str, usize> = BTreeMap::new();
    for owner in prev.values() {
        *owned.entry(owner.as_str()).or_default() += 1;
    }
    let total: usize = owned.values().sum();
    let keep_floor: usize = owned.values().map(|k| (*k).min(floor)).sum();
    let could_use_ceil = owned.values().filter(|k| **k > floor).count();
    total - keep_floor - could_use_ceil.min(extra)
}

/// Brute force over every assignment of the subscribed partitions to subscribers of their topics
/// that meets the balance criterion: the fewest valid previously owned partitions that move.
/// Exponential; for tiny cases only.
pub fn min_moves_brute_force(case: &Case) -> usize {
    let members: Vec<String> = case.members.iter().map(|m| m.member_id.clone()).collect();
    let parts: Vec<Tp> = case.subscribed_partitions().into_iter().collect();
    let candidates: Vec<Vec<usize>> = parts
        .iter()
        .map(|(t, _)| {
            members
                .iter()
                .enumerate()
                .filter(|(_, m)| case.subscribers(t).contains(m))
                .map(|(i, _)| i)
                .collect()
        })
        .collect();
    let prev = case.valid_previous_owners();
    let prev_idx: Vec<Option<usize>> = parts
        .iter()
        .map(|tp| {
            prev.get(tp)
                .map(|o| members.iter().position(|m| m == o).expect("member"))
        })
        .collect();
    struct Search<'a> {
        candidates: &'a [Vec<usize>],
        prev: &'a [Option<usize>],
        choice: Vec<usize>,
        count: Vec<usize>,
        best: usize,
    }
    impl Search<'_> {
        fn balanced(&self) -> bool {
            self.choice.iter().enumerate().all(|(i, &o)| {
                self.candidates[i]
                    .iter()
                    .all(|&s| self.count[o] < self.count[s] + 2)
            })
        }
        fn go(&mut self, i: usize, cost: usize) {
            if cost >= self.best {
                return;
            }
            if i == self.candidates.len() {
                if self.balanced() {
                    self.best = cost;
                }
                return;
            }
            for k in 0..self.candidates[i].len() {
                let m = self.candidates[i][k];
                let c = cost + usize::from(self.prev[i].is_some_and(|o| o != m));
                self.choice.push(m);
                self.count[m] += 1;
                self.go(i + 1, c);
                self.count[m] -= 1;
                self.choice.pop();
            }
        }
    }
    let mut s = Search {
        candidates: &candidates,
        prev: &prev_idx,
        choice: Vec::new(),
        count: vec![0; members.len()],
        best: usize::MAX,
    };
    s.go(0, 0);
    assert!(s.best != usize::MAX, "some balanced assignment exists");
    s.best
}

// ----------------------------------------------------------------------------- minimizing

/// Greedily simplifies a failing case while `fails` still holds: drops members, topics,
/// partitions, claims, subscriptions, racks, instance ids and generations, until no single step
/// keeps it failing. Far smaller counterexamples than generic shrinking of the generator.
pub fn minimize(mut case: Case, fails: &dyn Fn(&Case) -> bool) -> Case {
    loop {
        let mut progressed = false;
        for candidate in simplifications(&case) {
            if fails(&candidate) {
                case = candidate;
                progressed = true;
                break;
            }
        }
        if !progressed {
            return case;
        }
    }
}

fn simplifications(c: &Case) -> Vec<Case> {
    let mut out = Vec::new();
    for i in 0..c.members.len() {
        let mut x = c.clone();
        x.members.remove(i);
        out.push(x);
    }
    for i in 0..c.topics.len() {
        if c.topics.len() > 1 {
            let mut x = c.clone();
            let name = x.topics.remove(i).name;
            for m in &mut x.members {
                m.topics.retain(|t| *t != name);
                m.owned_partitions.retain(|(t, _)| *t != name);
            }
            out.push(x);
        }
        if c.topics[i].partitions > 0 {
            let mut x = c.clone();
            let t = &mut x.topics[i];
            t.partitions -= 1;
            if !t.replica_racks.is_empty() {
                t.replica_racks.pop();
            }
            let (name, n) = (t.name.clone(), t.partitions as i32);
            for m in &mut x.members {
                m.owned_partitions.retain(|(t, p)| *t != name || *p < n);
            }
            out.push(x);
        }
        if !c.topics[i].replica_racks.is_empty() {
            let mut x = c.clone();
            x.topics[i].replica_racks.clear();
            out.push(x);
            for p in 0..c.topics[i].replica_racks.len() {
                for r in 0..c.topics[i].replica_racks[p].len() {
                    let mut x = c.clone();
                    x.topics[i].replica_racks[p].remove(r);
                    out.push(x);
                }
            }
        }
    }
    for i in 0..c.members.len() {
        let m = &c.members[i];
        for k in 0..m.owned_partitions.len() {
            let mut x = c.clone();
            x.members[i].owned_partitions.remove(k);
            out.push(x);
        }
        for k in 0..m.topics.len() {
            let mut x = c.clone();
            x.members[i].topics.remove(k);
            out.push(x);
        }
        if m.rack.is_some() {
            let mut x = c.clone();
            x.members[i].rack = None;
            out.push(x);
        }
        if m.group_instance_id.is_some() {
            let mut x = c.clone();
            x.members[i].group_instance_id = None;
            out.push(x);
        }
        if m.generation.is_some() && m.owned_partitions.is_empty() {
            let mut x = c.clone();
            x.members[i].generation = None;
            out.push(x);
        }
        if let Some(g) = m.generation {
            if g > 1 {
                let mut x = c.clone();
                x.members[i].generation = Some(g - 1);
                out.push(x);
            }
        }
    }
    out
}

// -------------------------------------------------------------------------------- optimum

/// Whether the sticky strategies' rack rule applies to the group: some member has a rack, a
/// replica of some partition of a subscribed topic is on a member's rack, and not every such
/// partition has its replicas on the same set of racks.
fn rack_aware(case: &Case) -> bool {
    let member_racks: BTreeSet<&str> = case.members.iter().filter_map(rack_of).collect();
    if member_racks.is_empty() {
        return false;
    }
    let subscribed = case.subscribed_topics();
    let sets: Vec<BTreeSet<&str>> = case
        .topics
        .iter()
        .filter(|t| subscribed.contains(&t.name))
        .flat_map(|t| {
            (0..t.partitions as usize).map(move |p| {
                t.replica_racks
                    .get(p)
                    .map(|rs| rs.iter().map(String::as_str).collect())
                    .unwrap_or_default()
            })
        })
        .collect();
    let overlap = sets
        .iter()
        .any(|s| s.iter().any(|r| member_racks.contains(r)));
    overlap && sets.windows(2).any(|w| w[0] != w[1])
}

/// The valid previous owners, each with whether its ownership is rack-matched: when the rack
/// rule applies, an owner with a rack that hosts no replica of the partition, while some
/// subscriber of the topic is on a rack that does, is mismatched. The sticky strategies keep
/// as many previously owned partitions as balance allows, the rack-matched ones first.
pub fn previous_owners_with_racks(case: &Case) -> BTreeMap<Tp, (String, bool)> {
    let prev = case.valid_previous_owners();
    let aware = rack_aware(case);
    let member_racks: BTreeSet<&str> = case.members.iter().filter_map(rack_of).collect();
    prev.into_iter()
        .map(|((t, p), owner)| {
            let member = case
                .members
                .iter()
                .find(|m| m.member_id == owner)
                .expect("owner is a member");
            let matched = match rack_of(member) {
                Some(r) if aware => {
                    let def = case.topic(&t).expect("topic exists");
                    let replicas: BTreeSet<&str> = def
                        .replica_racks
                        .get(p as usize)
                        .map(|rs| {
                            rs.iter()
                                .map(String::as_str)
                                .filter(|x| member_racks.contains(x))
                                .collect()
                        })
                        .unwrap_or_default();
                    replicas.contains(r)
                        || !case.members.iter().any(|m| {
                            m.topics.contains(&t)
                                && rack_of(m).is_some_and(|mr| replicas.contains(mr))
                        })
                }
                _ => true,
            };
            ((t, p), (owner, matched))
        })
        .collect()
}

/// The optimum of the sticky strategies for mixed subscriptions.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Optimum {
    /// Member sizes, largest first: the lexicographically smallest is the most balanced.
    pub loads: Vec<usize>,
    /// Previously owned partitions kept by their owner.
    pub kept: usize,
    /// Of those, the rack-matched ones.
    pub kept_matched: usize,
}

/// Brute force over every assignment of the subscribed partitions to subscribers of their
/// topics: the lexicographically smallest load vector (sorted, largest first); among the
/// assignments with that vector the most partitions kept by their previous owner; among those
/// the most rack-matched kept ones. Exponential; for tiny cases only.
pub fn optimum_brute_force(case: &Case) -> Optimum {
    let members: Vec<String> = case.members.iter().map(|m| m.member_id.clone()).collect();
    let parts: Vec<Tp> = case.subscribed_partitions().into_iter().collect();
    let candidates: Vec<Vec<usize>> = parts
        .iter()
        .map(|(t, _)| {
            let subs = case.subscribers(t);
            (0..members.len())
                .filter(|i| subs.contains(&members[*i]))
                .collect()
        })
        .collect();
    let prev = previous_owners_with_racks(case);
    let prev_idx: Vec<Option<(usize, bool)>> = parts
        .iter()
        .map(|tp| {
            prev.get(tp).map(|(o, matched)| {
                (
                    members.iter().position(|m| m == o).expect("member"),
                    *matched,
                )
            })
        })
        .collect();
    struct Search<'a> {
        candidates: &'a [Vec<usize>],
        prev: &'a [Option<(usize, bool)>],
        count: Vec<usize>,
        best: Option<Optimum>,
    }
    impl Search<'_> {
        fn go(&mut self, i: usize, kept: usize, matched: usize) {
            if i == self.candidates.len() {
                let mut loads = self.count.clone();
                loads.sort_unstable_by(|a, b| b.cmp(a));
                let better = match &self.best {
                    None => true,
                    Some(b) => {
                        (&loads, std::cmp::Reverse(kept), std::cmp::Reverse(matched))
                            < (
                                &b.loads,
                                std::cmp::Reverse(b.kept),
                                std::cmp::Reverse(b.kept_matched),
                            )
                    }
                };
                if better {
                    self.best = Some(Optimum {
                        loads,
                        kept,
                        kept_matched: matched,
                    });
                }
                return;
            }
            for k in 0..self.candidates[i].len() {
                let m = self.candidates[i][k];
                let (dk, dm) = match self.prev[i] {
                    Some((o, is_matched)) if o == m => (1, usize::from(is_matched)),
                    _ => (0, 0),
                };
                self.count[m] += 1;
                self.go(i + 1, kept + dk, matched + dm);
                self.count[m] -= 1;
            }
        }
    }
    let mut s = Search {
        candidates: &candidates,
        prev: &prev_idx,
        count: vec![0; members.len()],
        best: None,
    };
    s.go(0, 0, 0);
    s.best.expect("some assignment exists")
}

/// Load vector (largest first), kept and rack-matched kept partitions of an assignment.
pub fn optimum_measures(case: &Case, target: &Named) -> Optimum {
    let mut loads: Vec<usize> = case
        .members
        .iter()
        .map(|m| target.get(&m.member_id).map_or(0, BTreeSet::len))
        .collect();
    loads.sort_unstable_by(|a, b| b.cmp(a));
    let prev = previous_owners_with_racks(case);
    let held = |tp: &Tp, o: &String| target.get(o).is_some_and(|s| s.contains(tp));
    Optimum {
        loads,
        kept: prev.iter().filter(|(tp, (o, _))| held(tp, o)).count(),
        kept_matched: prev.iter().filter(|(tp, (o, m))| *m && held(tp, o)).count(),
    }
}
