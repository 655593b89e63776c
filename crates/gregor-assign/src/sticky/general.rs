//! The sticky assignment when members subscribe to different topics.
//!
//! 1. **Keep.** Every partition keeps its previous owner if the owner still subscribes to its
//!    topic (when rack-aware, also one with no replica on the owner's rack; the exact phase gives
//!    those up before rack-matched ones).
//! 2. **Fill.** Partitions without an owner are dealt in rounds: partition 0 of every topic
//!    (topics with the fewest subscribers first, then by name), then partition 1, and so on. Each
//!    goes to a least loaded subscriber of its topic, preferring one on a rack with a replica
//!    (ties otherwise go by the size buckets' order, which depends only on member ids and the
//!    moves made, not on the order members were given in).
//!    Dealing across topics keeps member sizes level, so little is left to balance.
//! 3. **Balance.** While some topic has a partition on a member with at least two more partitions
//!    than another subscriber of that topic, one such partition moves from the topic's most loaded
//!    holder to its least loaded subscriber. Each move lowers the sum of squared member sizes, so
//!    the loop ends with Kafka's balance criterion met.
//! 4. **Exact.** `exact` takes the resulting member x topic counts to the optimum: the most
//!    balanced load vector (chains of moves, not only single ones), then the most kept partitions
//!    (rack-matched first) for it: exactly on groups up to the exact search's size limit, and on
//!    larger ones when its bounded repairs reach the kept bound (see `exact`). Topics whose counts change, or where a member could hold more of
//!    its own partitions, are re-placed: own partitions back to their owner first, then what the
//!    holder may keep, the rest to members still short (on a replica's rack when possible). When
//!    steps 1-3 already reached the optimum nothing changes.
//!
//! Members are kept in buckets by size. The least loaded subscriber (most loaded holder) of a
//! topic is found by walking the buckets from the bottom (top) until a subscriber (holder)
//! appears; for topics with few subscribers their own list is scanned instead. A move touches two
//! buckets and re-examines only the topics its two members subscribe to.
//!
//! Complexity: fill O(P * w) where w is the bucket walk (O(1) expected when a good share of the
//! members subscribe to the topic, bounded by `M / DENSE` otherwise); balance
//! O(moves * (T_m * w + P_t)), T_m the topics of a member and P_t the partitions of a topic; the
//! exact phase O(P + S) to count and re-place plus its searches (see `exact`).
//! Members are indexed by member id, so results do not depend on the order they were given in.

use crate::model::{GroupSpec, MemberIdx, PartitionId, TopicId};

use super::exact::Counts;
use super::prepare::{Prepared, RackInfo, NONE};
use super::spread;

/// A topic counts as dense, and is served from the size buckets, when at least one member in
/// `DENSE` subscribes to it.
const DENSE: usize = 8;

/// How far the fill looks along the lowest bucket for a subscriber on a matching rack.
const RACK_LOOKAHEAD: usize = 64;

#[derive(Debug, Clone, Copy)]
struct Held {
    topic: TopicId,
    count: u32,
    fresh: u32,
}

/// How many holders the donor search looks at for one with a fresh partition before settling
/// for the most loaded.
const DONOR_LOOKAHEAD: usize = 256;

struct State<'a> {
    group: &'a GroupSpec,
    racks: Option<&'a RackInfo>,
    /// Internal member index (rank by member id) -> member index in the group.
    member_of: Vec<u32>,
    /// Internal index of the current owner of each partition.
    owner: Vec<u32>,
    count: Vec<u32>,
    /// Internal index of each partition's valid previous owner (the one that kept it).
    prev: Vec<u32>,
    /// Per member, sorted by topic: (topic, partitions of it held, of which fresh). Fresh ones
    /// were not the member's before this assignment, so moving them costs no stickiness.
    held: Vec<Vec<Held>>,
    /// Subscribers (internal indexes, ascending) of each topic.
    subscribers: Vec<Vec<u32>>,
    buckets: Buckets,
}

/// Members grouped by size.
struct Buckets {
    by_count: Vec<Vec<u32>>,
    pos: Vec<u32>,
}

impl Buckets {
    fn new(count: &[u32]) -> Buckets {
        let max = count.iter().copied().max().unwrap_or(0) as usize;
        let mut by_count = vec![Vec::new(); max + 1];
        let mut pos = vec![0; count.len()];
        for (m, c) in count.iter().enumerate() {
            pos[m] = by_count[*c as usize].len() as u32;
            by_count[*c as usize].push(m as u32);
        }
        Buckets { by_count, pos }
    }

    fn shift(&mut self, m: u32, from: u32, to: u32) {
        let bucket = &mut self.by_count[from as usize];
        let i = self.pos[m as usize] as usize;
        bucket.swap_remove(i);
        if let Some(&moved) = bucket.get(i) {
            self.pos[moved as usize] = i as u32;
        }
        if to as usize >= self.by_count.len() {
            self.by_count.resize(to as usize + 1, Vec::new());
        }
        self.pos[m as usize] = self.by_count[to as usize].len() as u32;
        self.by_count[to as usize].push(m);
    }
}

impl State<'_> {
    fn subscribes(&self, m: u32, t: TopicId) -> bool {
        self.group
            .member(MemberIdx(self.member_of[m as usize]))
            .subscribes(t)
    }

    fn held(&self, m: u32, t: TopicId) -> Option<Held> {
        let h = &self.held[m as usize];
        h.binary_search_by_key(&t, |e| e.topic).ok().map(|i| h[i])
    }

    /// Records that `m` gains (`gain`) or loses partition `p` of topic `t`.
    fn track(&mut self, m: u32, t: TopicId, p: u32, gain: bool) {
        let fresh = u32::from(self.prev[p as usize] != m);
        let h = &mut self.held[m as usize];
        match h.binary_search_by_key(&t, |e| e.topic) {
            Ok(i) if gain => {
                h[i].count += 1;
                h[i].fresh += fresh;
            }
            Ok(i) => {
                h[i].count -= 1;
                h[i].fresh -= fresh;
            }
            Err(i) => {
                debug_assert!(gain, "a member loses only partitions it holds");
                h.insert(
                    i,
                    Held {
                        topic: t,
                        count: 1,
                        fresh,
                    },
                );
            }
        }
    }

    fn set_count(&mut self, m: u32, c: u32) {
        let old = self.count[m as usize];
        self.buckets.shift(m, old, c);
        self.count[m as usize] = c;
    }

    fn dense(&self, t: TopicId) -> bool {
        self.subscribers[t.0 as usize].len() * DENSE >= self.count.len()
    }

    /// The least loaded subscriber of `t`; with `p`, prefers one whose rack hosts `p`.
    fn least_loaded(&self, t: TopicId, p: Option<u32>) -> Option<u32> {
        let rack_match = |m: u32| match (self.racks, p) {
            (Some(r), Some(p)) => r.matches(self.member_of[m as usize], p),
            _ => false,
        };
        if !self.dense(t) {
            let subs = &self.subscribers[t.0 as usize];
            let min = subs.iter().map(|m| self.count[*m as usize]).min()?;
            let mut lowest = subs
                .iter()
                .copied()
                .filter(|m| self.count[*m as usize] == min);
            let first = lowest.clone().next();
            return lowest.find(|m| rack_match(*m)).or(first);
        }
        for bucket in &self.buckets.by_count {
            let mut first = None;
            let mut seen = 0;
            for &m in bucket {
                if !self.subscribes(m, t) {
                    continue;
                }
                if first.is_none() {
                    first = Some(m);
                    if self.racks.is_none() || p.is_none() {
                        break;
                    }
                }
                if rack_match(m) {
                    return Some(m);
                }
                seen += 1;
                if seen >= RACK_LOOKAHEAD {
                    break;
                }
            }
            if first.is_some() {
                return first;
            }
        }
        None
    }

    /// A member holding a partition of `t` with at least `min_count` partitions: preferably
    /// one holding a fresh partition of `t` (most loaded first), else the most loaded holder.
    fn donor(&self, t: TopicId, min_count: u32) -> Option<u32> {
        let holds = |m: u32| self.held(m, t).filter(|h| h.count > 0);
        if !self.dense(t) {
            return self.subscribers[t.0 as usize]
                .iter()
                .copied()
                .filter(|m| self.count[*m as usize] >= min_count)
                .filter_map(|m| holds(m).map(|h| (m, h)))
                .max_by_key(|(m, h)| (h.fresh > 0, self.count[*m as usize], std::cmp::Reverse(*m)))
                .map(|(m, _)| m);
        }
        let mut most_loaded = None;
        let mut looked = 0;
        for (c, bucket) in self.buckets.by_count.iter().enumerate().rev() {
            if (c as u32) < min_count {
                break;
            }
            for &m in bucket {
                let Some(h) = holds(m) else { continue };
                if h.fresh > 0 {
                    return Some(m);
                }
                most_loaded.get_or_insert(m);
                looked += 1;
                if looked >= DONOR_LOOKAHEAD {
                    return most_loaded;
                }
            }
        }
        most_loaded
    }
}

pub(crate) fn assign(group: &GroupSpec, prep: &Prepared) -> Vec<Vec<PartitionId>> {
    // 1. Keep valid previous ownership.
    let mut st = State::keep_previous(group, prep);
    // 2. Fill, dealing partition r of every topic before partition r + 1.
    let mut topic_order: Vec<usize> = (0..group.topics().len())
        .filter(|t| !st.subscribers[*t].is_empty())
        .collect();
    topic_order.sort_by_key(|t| (st.subscribers[*t].len(), *t));
    fill(&mut st, &topic_order);
    // 3. Balance.
    balance(&mut st, &topic_order);
    // 4. Exact: the optimal counts, then the partitions that realize them.
    optimize(&mut st);
    let mut lists: Vec<Vec<PartitionId>> = (0..st.count.len()).map(|_| Vec::new()).collect();
    for (p, o) in st.owner.iter().enumerate() {
        if *o != NONE {
            lists[st.member_of[*o as usize] as usize].push(PartitionId(p as u32));
        }
    }
    lists
}

impl<'a> State<'a> {
    /// The starting state: members ranked by id, every partition with its previous owner if
    /// that owner still subscribes to its topic.
    fn keep_previous(group: &'a GroupSpec, prep: &'a Prepared) -> State<'a> {
        let members = group.members();
        let n = members.len();
        let mut member_of = vec![0u32; n];
        let mut internal = vec![0u32; n];
        for (m, rank) in prep.id_rank.iter().enumerate() {
            member_of[*rank as usize] = m as u32;
            internal[m] = *rank;
        }
        let mut subscribers: Vec<Vec<u32>> = vec![Vec::new(); group.topics().len()];
        for (i, m) in member_of.iter().enumerate() {
            for t in &members[*m as usize].topics {
                subscribers[t.0 as usize].push(i as u32);
            }
        }
        let mut owner = vec![NONE; group.total_partitions() as usize];
        let mut count = vec![0u32; n];
        let mut held: Vec<Vec<Held>> = vec![Vec::new(); n];
        for (t, subs) in subscribers.iter().enumerate() {
            if subs.is_empty() {
                continue;
            }
            let topic = TopicId(t as u32);
            for p in group.partitions_of(topic) {
                let o = prep.prev_owner[p as usize];
                if o == NONE || !members[o as usize].subscribes(topic) {
                    continue;
                }
                let i = internal[o as usize];
                owner[p as usize] = i;
                count[i as usize] += 1;
                match held[i as usize].last_mut() {
                    Some(last) if last.topic == topic => last.count += 1,
                    _ => held[i as usize].push(Held {
                        topic,
                        count: 1,
                        fresh: 0,
                    }),
                }
            }
        }
        State {
            prev: owner.clone(),
            group,
            racks: prep.racks.as_ref(),
            member_of,
            buckets: Buckets::new(&count),
            owner,
            count,
            held,
            subscribers,
        }
    }
}

/// Deals the partitions without an owner in rounds, partition r of every topic (in
/// `topic_order`) before partition r + 1, each to a least loaded subscriber.
fn fill(st: &mut State, topic_order: &[usize]) {
    let group = st.group;
    let rounds = topic_order
        .iter()
        .map(|t| group.topics()[*t].partitions)
        .max()
        .unwrap_or(0);
    for r in 0..rounds {
        for &t in topic_order {
            let spec = &group.topics()[t];
            if r >= spec.partitions {
                continue;
            }
            let p = spec.base + r;
            if st.owner[p as usize] != NONE {
                continue;
            }
            let topic = TopicId(t as u32);
            let m = st
                .least_loaded(topic, Some(p))
                .expect("a topic in the fill has subscribers");
            st.owner[p as usize] = m;
            let c = st.count[m as usize];
            st.set_count(m, c + 1);
            st.track(m, topic, p, true);
        }
    }
}

/// Computes the optimal count matrix from the current one (see `exact`) and re-places the
/// partitions of every topic whose counts changed, or where a member holds fewer of its own
/// partitions than it could: each member first gets back its own partitions (those it holds
/// already first), then keeps what it holds, and the rest go to members still short, on a
/// replica's rack when possible.
fn optimize(st: &mut State) {
    let lists: Vec<&[TopicId]> = st
        .member_of
        .iter()
        .map(|m| st.group.member(MemberIdx(*m)).topics.as_slice())
        .collect();
    let class = spread::classes(&lists);
    if nothing_to_improve(st, &class) {
        return;
    }
    let mut counted = Counted::new(st);
    counted.counts.optimize();
    counted.counts.level_classes(&class);
    let n = st.count.len();
    let mut placement = Placement {
        base: 0,
        target: vec![0; n],
        got: vec![0; n],
        placed: Vec::new(),
    };
    for t in 0..st.group.topics().len() as u32 {
        if counted.topic_changed(t) {
            placement.replace_topic(st, &counted, t);
        }
    }
}

/// Loads within one of each other are the most balanced, and keeping every previously owned
/// partition is the most sticky: then there is nothing to improve, unless members with
/// identical subscriptions hold different numbers (the tie-break after both).
fn nothing_to_improve(st: &State, class: &[u32]) -> bool {
    let (min, max) = st
        .count
        .iter()
        .fold((u32::MAX, 0), |(lo, hi), c| (lo.min(*c), hi.max(*c)));
    max <= min.saturating_add(1)
        && st
            .prev
            .iter()
            .zip(&st.owner)
            .all(|(p, o)| *p == NONE || p == o)
        && !spread::any_split(class, &st.count)
}

/// The member x topic counts of the current assignment, with what the exact phase needs to
/// know which topics to re-place.
struct Counted {
    counts: Counts,
    /// Per topic: partitions held by their previous owner, and of those the rack-matched ones.
    own_held: Vec<u32>,
    matched_held: Vec<u32>,
    /// Previously owned partitions with no replica on the owner's rack (while another
    /// subscriber's rack has one): kept only after the matched ones.
    mismatched: Vec<bool>,
}

impl Counted {
    fn new(st: &State) -> Counted {
        let n = st.count.len();
        let n_topics = st.group.topics().len();
        let mut counts = Counts::new(&st.subscribers, n);
        // Pair of each subscriber of the topic being counted.
        let mut pair_of = vec![NONE; n];
        let mut own_held = vec![0u32; n_topics];
        let mut matched_held = vec![0u32; n_topics];
        let mut mismatched = vec![false; st.owner.len()];
        for t in 0..n_topics as u32 {
            for s in counts.topic_pairs(t) {
                pair_of[counts.pair_member(s) as usize] = s as u32;
            }
            for p in st.group.partitions_of(TopicId(t)) {
                let o = st.owner[p as usize];
                if o == NONE {
                    continue;
                }
                let s = pair_of[o as usize] as usize;
                counts.c[s] += 1;
                let prev = st.prev[p as usize];
                if prev != NONE {
                    let sp = pair_of[prev as usize] as usize;
                    let bad = st
                        .racks
                        .is_some_and(|r| r.mismatch(st.member_of[prev as usize], p, TopicId(t)));
                    mismatched[p as usize] = bad;
                    counts.o[sp] += 1;
                    counts.om[sp] += u32::from(!bad);
                    if prev == o {
                        own_held[t as usize] += 1;
                        matched_held[t as usize] += u32::from(!bad);
                    }
                }
            }
        }
        Counted {
            counts,
            own_held,
            matched_held,
            mismatched,
        }
    }

    /// Whether topic `t` must be re-placed: its counts changed, or some member could hold more
    /// of its own partitions (rack-matched ones first). Each member holds as many as its count
    /// allows exactly when the topic's totals reach the counts' ones.
    fn topic_changed(&self, t: u32) -> bool {
        let counts = &self.counts;
        let (own, matched) = counts.topic_pairs(t).fold((0, 0), |(own, matched), s| {
            (
                own + counts.c[s].min(counts.o[s]),
                matched + counts.c[s].min(counts.om[s]),
            )
        });
        counts.changed(t)
            || self.own_held[t as usize] < own
            || self.matched_held[t as usize] < matched
    }
}

/// Re-placement of one topic's partitions: per member its target count and what it got so
/// far; per partition of the topic (from `base`) whether it is placed.
struct Placement {
    base: u32,
    target: Vec<u32>,
    got: Vec<u32>,
    placed: Vec<bool>,
}

impl Placement {
    fn place(&mut self, st: &mut State, p: u32, m: u32) {
        st.owner[p as usize] = m;
        self.got[m as usize] += 1;
        self.placed[(p - self.base) as usize] = true;
    }

    fn is_placed(&self, p: u32) -> bool {
        self.placed[(p - self.base) as usize]
    }

    fn is_full(&self, m: u32) -> bool {
        self.got[m as usize] >= self.target[m as usize]
    }

    /// Re-places topic `t` to meet the counts: own partitions, then what holders keep, then
    /// the rest to members still short.
    fn replace_topic(&mut self, st: &mut State, counted: &Counted, t: u32) {
        let counts = &counted.counts;
        let pairs = counts.topic_pairs(t);
        for s in pairs.clone() {
            self.target[counts.pair_member(s) as usize] = counts.c[s];
        }
        let range = st.group.partitions_of(TopicId(t));
        self.base = range.start;
        self.placed.clear();
        self.placed.resize(range.len(), false);
        // Own partitions: rack-matched ones first; those the owner holds, then those it gets
        // back.
        for (matched, held_first) in [(true, true), (true, false), (false, true), (false, false)] {
            for p in range.clone() {
                let prev = st.prev[p as usize];
                if self.is_placed(p)
                    || prev == NONE
                    || counted.mismatched[p as usize] == matched
                    || (st.owner[p as usize] == prev) != held_first
                    || self.is_full(prev)
                {
                    continue;
                }
                self.place(st, p, prev);
            }
        }
        // What the holder may keep.
        for p in range.clone() {
            let o = st.owner[p as usize];
            if self.is_placed(p) || o == NONE || self.is_full(o) {
                continue;
            }
            self.place(st, p, o);
        }
        let short: Vec<u32> = pairs
            .clone()
            .map(|s| counts.pair_member(s))
            .filter(|m| !self.is_full(*m))
            .collect();
        self.place_rest(st, range, &short);
        for s in pairs {
            let m = counts.pair_member(s) as usize;
            debug_assert_eq!(
                self.got[m], self.target[m],
                "every member of the topic gets its count"
            );
            self.target[m] = 0;
            self.got[m] = 0;
        }
    }

    /// The partitions not yet placed, to the `short` members, on a replica's rack when one is
    /// near the front.
    fn place_rest(&mut self, st: &mut State, range: std::ops::Range<u32>, short: &[u32]) {
        let mut first = 0usize;
        for p in range {
            if self.is_placed(p) {
                continue;
            }
            while first < short.len() && self.is_full(short[first]) {
                first += 1;
            }
            let rack_match = |m: u32| {
                st.racks
                    .is_some_and(|r| r.matches(st.member_of[m as usize], p))
            };
            let m = short[first..]
                .iter()
                .copied()
                .filter(|m| !self.is_full(*m))
                .take(RACK_LOOKAHEAD)
                .find(|m| rack_match(*m))
                .unwrap_or(short[first]);
            self.place(st, p, m);
        }
    }
}

fn balance(st: &mut State, topics: &[usize]) {
    let n_topics = st.group.topics().len();
    let mut queued = vec![false; n_topics];
    let mut queue: std::collections::VecDeque<usize> = std::collections::VecDeque::new();
    for &t in topics {
        if st.subscribers[t].len() >= 2 {
            queued[t] = true;
            queue.push_back(t);
        }
    }
    while let Some(t) = queue.pop_front() {
        queued[t] = false;
        let topic = TopicId(t as u32);
        while let Some((donor, receiver)) = violation(st, topic) {
            // Any partition the receiver may take fixes the sizes; prefer one costing no
            // stickiness, from this topic or another one the two share.
            let moved_topic = topic_to_move(st, topic, donor, receiver);
            let p = pick_partition(st, moved_topic, donor, receiver);
            st.owner[p as usize] = receiver;
            let (dc, rc) = (st.count[donor as usize], st.count[receiver as usize]);
            st.set_count(donor, dc - 1);
            st.set_count(receiver, rc + 1);
            st.track(donor, moved_topic, p, false);
            st.track(receiver, moved_topic, p, true);
            // The donor may now receive elsewhere and the receiver give elsewhere: re-examine
            // the topics they subscribe to.
            for m in [donor, receiver] {
                let member = st.group.member(MemberIdx(st.member_of[m as usize]));
                for s in &member.topics {
                    let si = s.0 as usize;
                    if si != t && !queued[si] && st.subscribers[si].len() >= 2 {
                        queued[si] = true;
                        queue.push_back(si);
                    }
                }
            }
        }
    }
}

/// The topic's least loaded subscriber and a holder with two or more partitions more, if any.
fn violation(st: &State, topic: TopicId) -> Option<(u32, u32)> {
    let receiver = st.least_loaded(topic, None)?;
    let donor = st.donor(topic, st.count[receiver as usize] + 2)?;
    Some((donor, receiver))
}

/// The topic to move a partition of from `donor` to `receiver`, which have a violation in
/// `topic`: `topic` itself if the donor holds a fresh partition of it; else another topic the
/// receiver subscribes to where the donor holds a fresh partition; else `topic`.
fn topic_to_move(st: &State, topic: TopicId, donor: u32, receiver: u32) -> TopicId {
    if st.held(donor, topic).is_some_and(|h| h.fresh > 0) {
        return topic;
    }
    st.held[donor as usize]
        .iter()
        .find(|h| h.fresh > 0 && st.subscribes(receiver, h.topic))
        .map_or(topic, |h| h.topic)
}

/// Which of the donor's partitions of `topic` moves, best first: one that was not the donor's
/// before this assignment (moving it costs no stickiness), one that returns to its previous
/// owner, then one local to the receiver's rack and not to the donor's; ties go to the highest
/// partition number.
fn pick_partition(st: &State, topic: TopicId, donor: u32, receiver: u32) -> u32 {
    let rack_gain = |p: u32| match st.racks {
        Some(r) => {
            let (d, rc) = (
                st.member_of[donor as usize],
                st.member_of[receiver as usize],
            );
            u8::from(r.matches(rc, p)) * 2 + u8::from(!r.matches(d, p))
        }
        None => 0,
    };
    st.group
        .partitions_of(topic)
        .rev()
        .filter(|p| st.owner[*p as usize] == donor)
        .max_by_key(|p| {
            let prev = st.prev[*p as usize];
            (prev != donor, prev == receiver, rack_gain(*p))
        })
        .expect("the donor holds a partition of the topic")
}
