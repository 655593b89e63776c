//! The sticky assignment when members subscribe to different topics.
//!
//! 1. **Keep.** Every partition keeps its previous owner if the owner still subscribes to its
//!    topic (and, when rack-aware, is on a rack with a replica).
//! 2. **Fill.** Partitions without an owner go, topic by topic (topics with the fewest subscribers
//!    first, then by name), to the subscriber with the fewest partitions; ties go to a member on a
//!    rack with a replica, then to the lowest member id.
//! 3. **Balance.** While some topic has a partition on a member with at least two more partitions
//!    than another subscriber of that topic, one such partition moves from the topic's most loaded
//!    owner to its least loaded subscriber. This is exactly the balance criterion: at the end no
//!    partition could move to a subscriber of its topic with two or more fewer partitions. Each
//!    move lowers the sum of squared member sizes, so the loop ends; only partitions whose move is
//!    forced by that criterion ever leave an owner that kept them in step 1.
//!
//! Complexity: the fill uses a heap per topic, O(S + P log M). Balancing keeps, per topic, a
//! lazily pruned max-heap of owners and min-heap of subscribers keyed by member size; a move
//! updates the heaps of the topics the two members subscribe to, and re-examines only those
//! topics: O(moves * (T_m log M + P_t)) where T_m is the topics a member subscribes to and P_t
//! the partitions of the topic. No step compares all members with all partitions.

use std::cmp::Reverse;
use std::collections::BinaryHeap;

use crate::model::{GroupSpec, PartitionId, TopicId};

use super::prepare::{Prepared, RackInfo, NONE};

struct State<'a> {
    group: &'a GroupSpec,
    racks: Option<&'a RackInfo>,
    id_rank: &'a [u32],
    owner: Vec<u32>,
    count: Vec<u32>,
    /// Per member: (topic, partitions of it the member holds), sorted by topic.
    held: Vec<Vec<(TopicId, u32)>>,
    /// Subscribers of each topic.
    subscribers: Vec<Vec<u32>>,
}

impl State<'_> {
    fn held_of(&self, m: u32, t: TopicId) -> u32 {
        let h = &self.held[m as usize];
        h.binary_search_by_key(&t, |e| e.0).map_or(0, |i| h[i].1)
    }

    fn add_held(&mut self, m: u32, t: TopicId, delta: i32) {
        let h = &mut self.held[m as usize];
        match h.binary_search_by_key(&t, |e| e.0) {
            Ok(i) => h[i].1 = (h[i].1 as i32 + delta) as u32,
            Err(i) => {
                debug_assert!(delta > 0);
                h.insert(i, (t, delta as u32));
            }
        }
    }

    fn give(&mut self, p: u32, m: u32) {
        let (t, _) = self.group.partition(PartitionId(p));
        self.owner[p as usize] = m;
        self.count[m as usize] += 1;
        self.add_held(m, t, 1);
    }
}

pub(crate) fn assign(group: &GroupSpec, prep: &Prepared) -> Vec<Vec<PartitionId>> {
    let members = group.members();
    let n_topics = group.topics().len();
    let mut subscribers: Vec<Vec<u32>> = vec![Vec::new(); n_topics];
    for (m, spec) in members.iter().enumerate() {
        for t in &spec.topics {
            subscribers[t.0 as usize].push(m as u32);
        }
    }
    let mut st = State {
        group,
        racks: prep.racks.as_ref(),
        id_rank: &prep.id_rank,
        owner: vec![NONE; group.total_partitions() as usize],
        count: vec![0; members.len()],
        held: vec![Vec::new(); members.len()],
        subscribers,
    };

    // 1. Keep valid previous ownership.
    for (t, subs) in st.subscribers.iter().enumerate() {
        if subs.is_empty() {
            continue;
        }
        let topic = TopicId(t as u32);
        for p in group.partitions_of(topic) {
            let o = prep.prev_owner[p as usize];
            if o == NONE || !members[o as usize].subscribes(topic) {
                continue;
            }
            if st.racks.is_some_and(|r| r.mismatch(o, p)) {
                continue;
            }
            st.owner[p as usize] = o;
            st.count[o as usize] += 1;
        }
    }
    for (p, o) in st.owner.iter().enumerate() {
        if *o != NONE {
            let (t, _) = group.partition(PartitionId(p as u32));
            let h = &mut st.held[*o as usize];
            match h.last_mut() {
                Some(last) if last.0 == t => last.1 += 1,
                _ => h.push((t, 1)),
            }
        }
    }

    // 2. Fill, topics with the fewest subscribers first.
    let mut topic_order: Vec<usize> = (0..n_topics)
        .filter(|t| !st.subscribers[*t].is_empty())
        .collect();
    topic_order.sort_by_key(|t| (st.subscribers[*t].len(), *t));
    for &t in &topic_order {
        fill_topic(&mut st, TopicId(t as u32));
    }

    // 3. Balance.
    balance(&mut st, &topic_order);

    let mut lists: Vec<Vec<PartitionId>> = (0..members.len())
        .map(|m| Vec::with_capacity(st.count[m] as usize))
        .collect();
    for (p, o) in st.owner.iter().enumerate() {
        if *o != NONE {
            lists[*o as usize].push(PartitionId(p as u32));
        }
    }
    lists
}

type MinEntry = Reverse<(u32, u32, u32)>; // (count, id rank, member)

fn fill_topic(st: &mut State, topic: TopicId) {
    let range = st.group.partitions_of(topic);
    if !range.clone().any(|p| st.owner[p as usize] == NONE) {
        return;
    }
    let subs = &st.subscribers[topic.0 as usize];
    let entry = |st: &State, m: u32| Reverse((st.count[m as usize], st.id_rank[m as usize], m));
    let mut heap: BinaryHeap<MinEntry> = subs.iter().map(|m| entry(st, *m)).collect();
    // When rack-aware, one heap per rack among the subscribers, for the tie-break.
    let mut rack_heaps: Vec<BinaryHeap<MinEntry>> = Vec::new();
    if let Some(r) = st.racks {
        rack_heaps = vec![BinaryHeap::new(); r.rack_count()];
        for m in subs {
            let rack = r.member_rack[*m as usize];
            if rack != NONE {
                rack_heaps[rack as usize].push(entry(st, *m));
            }
        }
    }
    for p in range {
        if st.owner[p as usize] != NONE {
            continue;
        }
        let Reverse((least, _, mut chosen)) =
            *pop_valid(&mut heap, &st.count).expect("a topic in the fill has subscribers");
        if let Some(r) = st.racks {
            let mut best: Option<(u32, u32)> = None;
            for rack in r.racks_of(p) {
                if let Some(Reverse((c, rank, m))) =
                    pop_valid(&mut rack_heaps[*rack as usize], &st.count).copied()
                {
                    if c == least && best.is_none_or(|(br, _)| rank < br) {
                        best = Some((rank, m));
                    }
                }
            }
            if let Some((_, m)) = best {
                chosen = m;
            }
        }
        st.give(p, chosen);
        let e = entry(st, chosen);
        heap.push(e);
        if let Some(r) = st.racks {
            let rack = r.member_rack[chosen as usize];
            if rack != NONE {
                rack_heaps[rack as usize].push(e);
            }
        }
    }
}

/// Peeks at the heap's smallest entry whose count is current, dropping stale ones.
fn pop_valid<'h>(heap: &'h mut BinaryHeap<MinEntry>, count: &[u32]) -> Option<&'h MinEntry> {
    while let Some(Reverse((c, _, m))) = heap.peek() {
        if count[*m as usize] == *c {
            break;
        }
        heap.pop();
    }
    heap.peek()
}

fn balance(st: &mut State, topics: &[usize]) {
    let n_topics = st.group.topics().len();
    // Per topic: owners by size (max-heap) and subscribers by size (min-heap), pruned lazily.
    let mut donors: Vec<BinaryHeap<(u32, Reverse<u32>, u32)>> = vec![BinaryHeap::new(); n_topics];
    let mut receivers: Vec<BinaryHeap<MinEntry>> = vec![BinaryHeap::new(); n_topics];
    for &t in topics {
        if st.subscribers[t].len() < 2 {
            continue;
        }
        receivers[t] = st.subscribers[t]
            .iter()
            .map(|m| Reverse((st.count[*m as usize], st.id_rank[*m as usize], *m)))
            .collect();
    }
    for (m, held) in st.held.iter().enumerate() {
        for (t, k) in held {
            if *k > 0 && st.subscribers[t.0 as usize].len() >= 2 {
                donors[t.0 as usize].push((st.count[m], Reverse(st.id_rank[m]), m as u32));
            }
        }
    }
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
        loop {
            // Most loaded member that still holds a partition of the topic.
            let donor = loop {
                let Some(&(c, _, m)) = donors[t].peek() else {
                    break None;
                };
                if st.count[m as usize] == c && st.held_of(m, topic) > 0 {
                    break Some((c, m));
                }
                donors[t].pop();
            };
            let Some((dc, donor)) = donor else { break };
            let Some(&Reverse((rc, _, receiver))) = pop_valid(&mut receivers[t], &st.count) else {
                break;
            };
            if dc < rc + 2 {
                break;
            }
            let p = pick_partition(st, topic, donor, receiver);
            move_partition(st, p, donor, receiver, topic);
            // Refresh both members' entries everywhere they appear, and re-examine those topics.
            for m in [donor, receiver] {
                let count = st.count[m as usize];
                let rank = st.id_rank[m as usize];
                let subs = st.group.member(crate::model::MemberIdx(m)).topics.clone();
                for s in subs {
                    let si = s.0 as usize;
                    if st.subscribers[si].len() < 2 {
                        continue;
                    }
                    receivers[si].push(Reverse((count, rank, m)));
                    if st.held_of(m, s) > 0 {
                        donors[si].push((count, Reverse(rank), m));
                    }
                    if si != t && !queued[si] {
                        queued[si] = true;
                        queue.push_back(si);
                    }
                }
            }
        }
    }
}

/// Which of the donor's partitions of `topic` moves: one local to the receiver's rack if any,
/// preferably one not local to the donor; else the donor's last one.
fn pick_partition(st: &State, topic: TopicId, donor: u32, receiver: u32) -> u32 {
    let mut fallback = NONE;
    let mut near_receiver = NONE;
    for p in st.group.partitions_of(topic).rev() {
        if st.owner[p as usize] != donor {
            continue;
        }
        match st.racks {
            None => return p,
            Some(r) => {
                if fallback == NONE {
                    fallback = p;
                }
                if r.matches(receiver, p) {
                    if !r.matches(donor, p) {
                        return p;
                    }
                    if near_receiver == NONE {
                        near_receiver = p;
                    }
                }
            }
        }
    }
    if near_receiver != NONE {
        near_receiver
    } else {
        debug_assert!(fallback != NONE, "the donor holds a partition of the topic");
        fallback
    }
}

fn move_partition(st: &mut State, p: u32, from: u32, to: u32, topic: TopicId) {
    st.owner[p as usize] = to;
    st.count[from as usize] -= 1;
    st.count[to as usize] += 1;
    st.add_held(from, topic, -1);
    st.add_held(to, topic, 1);
}
