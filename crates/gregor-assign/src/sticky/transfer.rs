//! The stickiness optimum as a maximum flow, for groups of any size.
//!
//! With each member's load fixed at `L[m]`, a member keeps at most `min(o[m], L[m])` of the
//! `o[m]` partitions it validly owned (`o[m]`: the sum of `o[m][t]` over its topics), and at
//! most `min(om[m], L[m])` rack-matched ones. That bound is met exactly when
//! * every member owning more than its load (`o[m] > L[m]`) gives up `o[m] - L[m]` of its own
//!   partitions, rack-mismatched ones first: `a[m]` mismatched and `b[m]` matched ones, both
//!   known in advance;
//! * every member owning less (`o[m] < L[m]`) keeps all of its own and receives `L[m] - o[m]`
//!   others, of topics it subscribes to;
//! * the partitions nobody validly owned (`u[t]` of topic `t`) and the ones given up are exactly
//!   the ones received.
//!
//! That is a transportation problem: source -> giver (`a[m]`, `b[m]`) -> topic (`o[m][t]` split
//! into mismatched and matched) -> receiver subscribing to the topic -> sink (`L[m] - o[m]`),
//! plus source -> topic (`u[t]`). The bound is met iff the maximum flow saturates the source.
//! Dinic's algorithm finds it (a breadth-first search per phase, then unit augmenting paths
//! along the levels with a current-arc pointer per node), on the member-topic pairs directly,
//! without building the graph. The flow is the new count matrix: `c = o - given + received`.
//!
//! Which loads to fix: the load vector's sorted form is fixed by the balance criterion, but
//! which member sits at which level is not quite: among the most balanced assignments a member's
//! load varies by at most one (their load vectors form a matroidal M-convex set, Frank and
//! Murota), and only to a level some member is at, so the number of members per level is
//! fixed. A level with no level next to it keeps its members. For two adjacent levels `q` and
//! `q + 1` with no level next to them, the `n1` places at `q + 1` go to the members of the two
//! levels gaining most from one more partition (`W` if they own more than `q`, plus one if more
//! than `q` rack-matched): the bound for that choice is the largest over every placement of the
//! loads, so meeting it proves the optimum among all most balanced assignments. Three or more
//! adjacent levels keep the current loads, and the bound proves the optimum only if it equals
//! the general bound (then no member gains from rising a level).

use super::exact::{Counts, Transfer};

const NONE: u32 = u32::MAX;

/// A member's part in the flow.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Role {
    /// Owns exactly its load: keeps everything, takes part in nothing.
    Even,
    /// Owns more than its load: gives up the difference.
    Giver,
    /// Owns less: receives the difference.
    Receiver,
}

/// Flow state: everything the residual arcs are computed from.
struct Flow<'a> {
    counts: &'a Counts,
    n: usize,
    nt: usize,
    role: Vec<Role>,
    /// Per member: mismatched (`a`) and matched (`b`) partitions to give up, partitions to
    /// receive (`need`); and how much of each is done.
    a: Vec<u32>,
    b: Vec<u32>,
    need: Vec<u32>,
    a_done: Vec<u32>,
    b_done: Vec<u32>,
    need_done: Vec<u32>,
    /// Per topic: partitions without a valid owner, and how many are handed out.
    unowned: Vec<u32>,
    unowned_done: Vec<u32>,
    /// Per pair: mismatched / matched partitions given up, partitions received.
    give_mis: Vec<u32>,
    give_mat: Vec<u32>,
    recv: Vec<u32>,
    /// Matched and mismatched kept separately (racks apply), or all as one class.
    split: bool,
    /// Arcs out of topic `t`: `topic_arcs[topic_start[t]..topic_start[t + 1]]`, each `3 * pair +
    /// kind` (0: to a receiver, 1: back to a giver of mismatched, 2: of matched partitions).
    topic_start: Vec<u32>,
    topic_arcs: Vec<u32>,
}

/// Node numbering: member `m` as giver of mismatched partitions, or as receiver, is `m`; as
/// giver of matched partitions `n + m`; topic `t` is `2n + t`; then the source and the sink.
impl Flow<'_> {
    fn source(&self) -> usize {
        2 * self.n + self.nt
    }

    fn sink(&self) -> usize {
        2 * self.n + self.nt + 1
    }

    fn topic_node(&self, t: u32) -> usize {
        2 * self.n + t as usize
    }

    fn mis_cap(&self, s: usize) -> u32 {
        if self.split {
            self.counts.o[s] - self.counts.om[s]
        } else {
            self.counts.o[s]
        }
    }

    fn mat_cap(&self, s: usize) -> u32 {
        if self.split {
            self.counts.om[s]
        } else {
            0
        }
    }

    /// Number of arcs (residual or not) out of node `x`.
    fn degree(&self, x: usize) -> usize {
        let n = self.n;
        if x == self.source() {
            2 * n + self.nt
        } else if x == self.sink() {
            0
        } else if x < n {
            match self.role[x] {
                Role::Giver => self.counts.member_pairs(x as u32).len(),
                Role::Receiver => 1 + self.counts.member_pairs(x as u32).len(),
                Role::Even => 0,
            }
        } else if x < 2 * n {
            if self.role[x - n] == Role::Giver {
                self.counts.member_pairs((x - n) as u32).len()
            } else {
                0
            }
        } else {
            let t = x - 2 * n;
            (self.topic_start[t + 1] - self.topic_start[t]) as usize
        }
    }

    /// Arc `i` out of `x` as (head, residual capacity > 0).
    fn arc(&self, x: usize, i: usize) -> Option<usize> {
        let n = self.n;
        let c = self.counts;
        if x == self.source() {
            return if i < n {
                (self.a_done[i] < self.a[i]).then_some(i)
            } else if i < 2 * n {
                (self.b_done[i - n] < self.b[i - n]).then_some(i)
            } else {
                let t = i - 2 * n;
                (self.unowned_done[t] < self.unowned[t]).then(|| self.topic_node(t as u32))
            };
        }
        if x < n && self.role[x] == Role::Receiver {
            if i == 0 {
                return (self.need_done[x] < self.need[x]).then(|| self.sink());
            }
            let s = c.member_pairs(x as u32)[i - 1] as usize;
            return (self.recv[s] > 0).then(|| self.topic_node(c.pair_topic(s)));
        }
        if x < n {
            let s = c.member_pairs(x as u32)[i] as usize;
            return (self.give_mis[s] < self.mis_cap(s)).then(|| self.topic_node(c.pair_topic(s)));
        }
        if x < 2 * n {
            let s = c.member_pairs((x - n) as u32)[i] as usize;
            return (self.give_mat[s] < self.mat_cap(s)).then(|| self.topic_node(c.pair_topic(s)));
        }
        let e = self.topic_arcs[self.topic_start[x - 2 * n] as usize + i] as usize;
        let s = e / 3;
        let m = c.pair_member(s) as usize;
        match e % 3 {
            0 => (self.role[m] == Role::Receiver).then_some(m),
            1 => (self.give_mis[s] > 0).then_some(m),
            _ => (self.give_mat[s] > 0).then_some(n + m),
        }
    }

    /// Pushes one unit along arc `i` out of `x`.
    fn push(&mut self, x: usize, i: usize) {
        let n = self.n;
        let c = self.counts;
        if x == self.source() {
            if i < n {
                self.a_done[i] += 1;
            } else if i < 2 * n {
                self.b_done[i - n] += 1;
            } else {
                self.unowned_done[i - 2 * n] += 1;
            }
        } else if x < n && self.role[x] == Role::Receiver {
            if i == 0 {
                self.need_done[x] += 1;
            } else {
                self.recv[c.member_pairs(x as u32)[i - 1] as usize] -= 1;
            }
        } else if x < n {
            self.give_mis[c.member_pairs(x as u32)[i] as usize] += 1;
        } else if x < 2 * n {
            self.give_mat[c.member_pairs((x - n) as u32)[i] as usize] += 1;
        } else {
            let e = self.topic_arcs[self.topic_start[x - 2 * n] as usize + i] as usize;
            let s = e / 3;
            match e % 3 {
                0 => self.recv[s] += 1,
                1 => self.give_mis[s] -= 1,
                _ => self.give_mat[s] -= 1,
            }
        }
    }

    /// Dinic's maximum flow; returns the flow value.
    fn max_flow(&mut self) -> u64 {
        let v = self.sink() + 1;
        let (src, snk) = (self.source(), self.sink());
        let mut level = vec![NONE; v];
        let mut cur = vec![0usize; v];
        let mut queue = Vec::with_capacity(v);
        let mut path: Vec<(usize, usize)> = Vec::new();
        let mut total = 0u64;
        loop {
            level.fill(NONE);
            level[src] = 0;
            queue.clear();
            queue.push(src);
            let mut head = 0;
            while head < queue.len() {
                let x = queue[head];
                head += 1;
                // Nodes at the sink's level or beyond lie on no shortest path.
                if level[snk] != NONE && level[x] + 1 >= level[snk] {
                    break;
                }
                for i in 0..self.degree(x) {
                    if let Some(y) = self.arc(x, i) {
                        if level[y] == NONE {
                            level[y] = level[x] + 1;
                            queue.push(y);
                        }
                    }
                }
            }
            if level[snk] == NONE {
                return total;
            }
            cur.fill(0);
            path.clear();
            let mut x = src;
            loop {
                if x == snk {
                    for &(y, i) in &path {
                        self.push(y, i);
                    }
                    total += 1;
                    path.clear();
                    x = src;
                    continue;
                }
                let deg = self.degree(x);
                let mut next = None;
                while cur[x] < deg {
                    if let Some(y) = self.arc(x, cur[x]) {
                        if level[y] == level[x] + 1 {
                            next = Some(y);
                            break;
                        }
                    }
                    cur[x] += 1;
                }
                match next {
                    Some(y) => {
                        path.push((x, cur[x]));
                        x = y;
                    }
                    None => {
                        // Dead end in this phase.
                        level[x] = NONE;
                        match path.pop() {
                            Some((y, i)) => {
                                cur[y] = i + 1;
                                x = y;
                            }
                            None => break,
                        }
                    }
                }
            }
        }
    }
}

impl Counts {
    /// Target loads and their bound (see the module documentation), and whether that bound is
    /// the optimum over every placement of the loads.
    fn target_loads(
        &self,
        general_bound: u64,
        owned: &[u32],
        matched: &[u32],
    ) -> (Vec<u32>, u64, bool) {
        let n = self.members();
        let worth = |m: usize, l: u32| {
            self.weight() as u64 * u64::from(owned[m].min(l)) + u64::from(matched[m].min(l))
        };
        let mut levels: Vec<u32> = self.loads().to_vec();
        levels.sort_unstable();
        levels.dedup();
        let mut target = self.loads().to_vec();
        // Levels `l` and `l + 1` with neither `l - 1` nor `l + 2` present form a pair: their
        // members trade places among themselves only. Longer runs of consecutive levels keep
        // the current loads.
        let mut exact = true;
        let mut i = 0;
        while i < levels.len() {
            let mut j = i;
            while j + 1 < levels.len() && levels[j + 1] == levels[j] + 1 {
                j += 1;
            }
            match j - i {
                0 => {}
                1 => {
                    let q = levels[i];
                    let mut pair: Vec<usize> = (0..n)
                        .filter(|m| self.loads()[*m] == q || self.loads()[*m] == q + 1)
                        .collect();
                    let high = pair.iter().filter(|m| self.loads()[**m] > q).count();
                    // Best first: most gained by the higher level, then already there, then
                    // member order.
                    pair.sort_by_key(|&m| {
                        (
                            std::cmp::Reverse(worth(m, q + 1) - worth(m, q)),
                            self.loads()[m] == q,
                            m,
                        )
                    });
                    for (rank, &m) in pair.iter().enumerate() {
                        target[m] = if rank < high { q + 1 } else { q };
                    }
                }
                _ => exact = false,
            }
            i = j + 1;
        }
        let bound: u64 = (0..n).map(|m| worth(m, target[m])).sum();
        (target, bound, exact || bound == general_bound)
    }

    /// Tries to meet the bound for the target loads by a maximum flow; on success the counts
    /// and loads become the flow's. `split`: mismatched and matched partitions as two classes
    /// (meeting both bounds), or one (meeting the kept-partitions part only).
    pub(super) fn transfer(&mut self, general_bound: u64, split: bool) -> Transfer {
        let (owned, matched) = self.owned_per_member();
        let (target, bound, exact) = self.target_loads(general_bound, &owned, &matched);
        let n = self.members();
        let nt = self.topics();
        let shares = flow_shares(&target, &owned, &matched, split);
        let required: u64 = shares.need.iter().map(|x| u64::from(*x)).sum();
        let pairs = self.c.len();
        let (topic_start, topic_arcs) = self.topic_arcs(&shares.role, split);
        let mut flow = Flow {
            counts: self,
            n,
            nt,
            role: shares.role,
            a: shares.a,
            b: shares.b,
            need: shares.need,
            a_done: vec![0; n],
            b_done: vec![0; n],
            need_done: vec![0; n],
            unowned: self.unowned_per_topic(),
            unowned_done: vec![0; nt],
            give_mis: vec![0; pairs],
            give_mat: vec![0; pairs],
            recv: vec![0; pairs],
            split,
            topic_start,
            topic_arcs,
        };
        if flow.max_flow() < required {
            return Transfer::Unreachable;
        }
        let Flow {
            give_mis,
            give_mat,
            recv,
            ..
        } = flow;
        for s in 0..pairs {
            let c = self.o[s] - give_mis[s] - give_mat[s] + recv[s];
            self.set_count(s, c);
        }
        self.set_loads(&target);
        debug_assert!(
            !split || self.kept_worth() == bound,
            "the flow meets the bound"
        );
        if split && exact {
            Transfer::Optimal
        } else {
            Transfer::Improved
        }
    }

    /// Per topic: the partitions without a valid owner.
    fn unowned_per_topic(&self) -> Vec<u32> {
        (0..self.topics() as u32)
            .map(|t| {
                let r = self.topic_pairs(t);
                let total: u32 = self.c[r.clone()].iter().sum();
                let owned: u32 = self.o[r].iter().sum();
                total - owned
            })
            .collect()
    }

    /// The arcs out of each topic node that can ever carry flow: to receivers, back to givers
    /// that own some. Returns `(topic_start, topic_arcs)` as in [`Flow`].
    fn topic_arcs(&self, role: &[Role], split: bool) -> (Vec<u32>, Vec<u32>) {
        let nt = self.topics();
        // Arcs are numbered `3 * pair + kind` in 32 bits.
        assert!(
            self.c.len() < (u32::MAX / 3) as usize,
            "member-topic pairs are counted in 32 bits"
        );
        let mut topic_start = Vec::with_capacity(nt + 1);
        let mut topic_arcs = Vec::new();
        topic_start.push(0);
        for t in 0..nt as u32 {
            for s in self.topic_pairs(t) {
                let e = 3 * s as u32;
                match role[self.pair_member(s) as usize] {
                    Role::Receiver => topic_arcs.push(e),
                    Role::Giver => {
                        let mat = if split { self.om[s] } else { 0 };
                        if self.o[s] > mat {
                            topic_arcs.push(e + 1);
                        }
                        if mat > 0 {
                            topic_arcs.push(e + 2);
                        }
                    }
                    Role::Even => {}
                }
            }
            topic_start.push(topic_arcs.len() as u32);
        }
        (topic_start, topic_arcs)
    }
}

/// Each member's role and what it gives up or receives, for the target loads.
struct Shares {
    role: Vec<Role>,
    /// Mismatched and matched partitions to give up.
    a: Vec<u32>,
    b: Vec<u32>,
    /// Partitions to receive.
    need: Vec<u32>,
}

/// Givers drop rack-mismatched partitions first (when `split`); receivers take the difference.
fn flow_shares(target: &[u32], owned: &[u32], matched: &[u32], split: bool) -> Shares {
    let n = target.len();
    let mut role = vec![Role::Even; n];
    let (mut a, mut b, mut need) = (vec![0u32; n], vec![0u32; n], vec![0u32; n]);
    for m in 0..n {
        let l = target[m];
        if owned[m] > l {
            role[m] = Role::Giver;
            if !split {
                a[m] = owned[m] - l;
            } else if matched[m] > l {
                a[m] = owned[m] - matched[m];
                b[m] = matched[m] - l;
            } else {
                a[m] = owned[m] - l;
            }
        } else if owned[m] < l {
            role[m] = Role::Receiver;
            need[m] = l - owned[m];
        }
    }
    Shares { role, a, b, need }
}
