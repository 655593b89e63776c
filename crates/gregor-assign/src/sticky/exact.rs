//! The exact phase of the general sticky builder: it works on counts only, `c[m][t]` = how many
//! partitions of topic `t` member `m` holds, and turns any valid assignment into the optimum:
//!
//! 1. **Balance.** The load vectors reachable by moving partitions between subscribers form an
//!    M-convex set (a polymatroid base); in such a set the load vector with the lexicographically
//!    smallest sorted (descending) form is exactly the one minimizing the sum of squared loads,
//!    and a load vector is that optimum iff no chain of moves `u -> x1 -> ... -> v` (each hop hands
//!    over one partition of a topic both ends subscribe to) runs from a member `u` to a member `v`
//!    with `L[u] >= L[v] + 2`. Such chains are found by a backward breadth-first search from the
//!    members at or below each load level and applied until none is left.
//! 2. **Stickiness.** With the sorted load vector fixed, the number of kept partitions is
//!    `sum min(c[m][t], o[m][t])` (`o`: partitions of `t` that `m` validly owned): inside a topic
//!    each member can always be given its own partitions first. Maximizing it over the balanced
//!    count matrices is a min-cost circulation on members, topics and one node per load level
//!    (which lets a member at level `l` and one at `l + 1` swap loads). First a maximum flow
//!    (`transfer`) tries to meet the upper bound for the best placement of the loads directly;
//!    meeting it proves the optimum and ends the phase (the usual case, at every size). Otherwise
//!    cheap repairs (`repair`: chains of fresh-partition moves, which cost nothing, closed by
//!    handing a member one of its own partitions back) run within two passes over the pairs, and
//!    then, unless the bound `sum min(o[m], cap[m])` is met, negative cycles are found with a
//!    queue-based Bellman-Ford and cancelled one unit at a time until none is left, at any size.
//!
//! Complexity: a search is O(S) (S = member-topic pairs) for the balance; the maximum flow
//! O(S + V) per phase plus the unit augmenting paths (each at most V long), with one phase per
//! distinct shortest augmenting path length (a handful in practice); O(S) for all repairs together; O(V * S) in the worst case for each
//! Bellman-Ford search (V = members + topics + levels), which runs only when the flow could not
//! prove the optimum; none runs when the greedy builder's result is already optimal (loads
//! within one of each other and every member keeping as much as it can hold).

use std::collections::VecDeque;

const NONE: u32 = u32::MAX;

/// Passes over the pairs the cheap stickiness repairs may spend in all.
const REPAIR_PASSES: usize = 2;

/// What `Counts::transfer` (the maximum flow, in `transfer.rs`) reached. Defined here, next to
/// `Counts`, so that `transfer.rs` depends on this file and not the other way round.
pub(crate) enum Transfer {
    /// Counts applied; the kept worth equals the bound for the chosen loads, and that bound is
    /// the proven optimum over every most balanced assignment.
    Optimal,
    /// Counts applied; the kept worth equals the bound for the chosen loads, which may be below
    /// the general bound (more than two levels, members able to rise).
    Improved,
    /// The bound for the chosen loads is not reachable; counts unchanged.
    Unreachable,
}

/// A copy of what chains change: counts, loads, changed topics.
pub(super) struct Snapshot(Vec<u32>, Vec<u32>, Vec<bool>);

/// Member-topic pairs with their counts. Pairs are numbered topic by topic (then by member), so
/// the per-partition passes of the general builder, which go topic by topic, touch one small
/// contiguous slice of each array at a time; the member view is a list of pair numbers.
#[derive(Clone)]
pub(crate) struct Counts {
    /// Pairs of topic `t`: `topic_start[t]..topic_start[t + 1]`, by member.
    topic_start: Vec<u32>,
    pair_topic: Vec<u32>,
    pair_member: Vec<u32>,
    /// Pairs of member `m`: `member_list[member_start[m]..member_start[m + 1]]`, by topic.
    member_start: Vec<u32>,
    member_list: Vec<u32>,
    /// Partitions of the topic the member holds.
    pub c: Vec<u32>,
    /// Partitions of the topic the member validly owned before.
    pub o: Vec<u32>,
    /// Of those, the ones on a rack with a replica (all of them when racks do not apply).
    pub om: Vec<u32>,
    /// Worth of keeping one partition; keeping it rack-matched is worth one more, so the kept
    /// count comes first and the rack-matched part of it second.
    weight: i64,
    load: Vec<u32>,
    /// Topics whose counts changed.
    dirty: Vec<bool>,
    /// Per member, during `repair`: pairs holding a fresh partition (`c > o`), pairs holding
    /// fewer than owned (`c < o`).
    fresh: Vec<u32>,
    short: Vec<u32>,
}

impl Counts {
    /// `subscribers[t]`: the members (ascending) subscribing to topic `t`; `n`: members.
    pub fn new(subscribers: &[Vec<u32>], n: usize) -> Counts {
        let mut topic_start = Vec::with_capacity(subscribers.len() + 1);
        let pairs: usize = subscribers.iter().map(Vec::len).sum();
        let mut pair_topic = Vec::with_capacity(pairs);
        let mut pair_member = Vec::with_capacity(pairs);
        let mut per_member = vec![0u32; n + 1];
        topic_start.push(0);
        for (t, subs) in subscribers.iter().enumerate() {
            for &m in subs {
                pair_topic.push(t as u32);
                pair_member.push(m);
                per_member[m as usize + 1] += 1;
            }
            topic_start.push(pair_member.len() as u32);
        }
        for i in 1..per_member.len() {
            per_member[i] += per_member[i - 1];
        }
        let member_start = per_member.clone();
        let mut member_list = vec![0u32; pair_member.len()];
        for (s, m) in pair_member.iter().enumerate() {
            let slot = &mut per_member[*m as usize];
            member_list[*slot as usize] = s as u32;
            *slot += 1;
        }
        Counts {
            topic_start,
            pair_topic,
            pair_member,
            member_start,
            member_list,
            c: vec![0; pairs],
            o: vec![0; pairs],
            om: vec![0; pairs],
            weight: 1,
            load: vec![0; n],
            dirty: vec![false; subscribers.len()],
            fresh: Vec::new(),
            short: Vec::new(),
        }
    }

    pub(super) fn members(&self) -> usize {
        self.member_start.len() - 1
    }

    pub(super) fn topics(&self) -> usize {
        self.topic_start.len() - 1
    }

    pub(super) fn pair_topic(&self, s: usize) -> u32 {
        self.pair_topic[s]
    }

    pub(super) fn weight(&self) -> i64 {
        self.weight
    }

    pub(super) fn loads(&self) -> &[u32] {
        &self.load
    }

    /// Replaces the loads (after the counts changed to match them).
    pub(super) fn set_loads(&mut self, loads: &[u32]) {
        self.load.copy_from_slice(loads);
        debug_assert!(
            (0..self.members()).all(|m| self
                .member_pairs(m as u32)
                .iter()
                .map(|s| self.c[*s as usize])
                .sum::<u32>()
                == self.load[m]),
            "loads follow the counts"
        );
    }

    /// Counts, loads and changed topics, for a trial that may be undone (`restore`).
    pub(super) fn snapshot(&self) -> Snapshot {
        Snapshot(self.c.clone(), self.load.clone(), self.dirty.clone())
    }

    pub(super) fn restore(&mut self, saved: Snapshot) {
        (self.c, self.load, self.dirty) = (saved.0, saved.1, saved.2);
    }

    /// Sets pair `s`'s count, marking its topic changed when it differs.
    pub(super) fn set_count(&mut self, s: usize, c: u32) {
        if self.c[s] != c {
            self.c[s] = c;
            self.dirty[self.pair_topic[s] as usize] = true;
        }
    }

    /// Per member: partitions validly owned, and of those the rack-matched ones.
    pub(super) fn owned_per_member(&self) -> (Vec<u32>, Vec<u32>) {
        let n = self.members();
        let mut owned = vec![0u32; n];
        let mut matched = vec![0u32; n];
        for (s, m) in self.pair_member.iter().enumerate() {
            owned[*m as usize] += self.o[s];
            matched[*m as usize] += self.om[s];
        }
        (owned, matched)
    }

    pub(super) fn kept_worth(&self) -> u64 {
        self.kept()
    }

    /// The pairs of member `m`, by topic.
    pub(super) fn member_pairs(&self, m: u32) -> &[u32] {
        &self.member_list
            [self.member_start[m as usize] as usize..self.member_start[m as usize + 1] as usize]
    }

    /// The pairs of topic `t`, by member.
    pub fn topic_pairs(&self, t: u32) -> std::ops::Range<usize> {
        self.topic_start[t as usize] as usize..self.topic_start[t as usize + 1] as usize
    }

    pub fn pair_member(&self, s: usize) -> u32 {
        self.pair_member[s]
    }

    /// Whether the counts of topic `t` changed.
    pub fn changed(&self, t: u32) -> bool {
        self.dirty[t as usize]
    }

    /// Runs both phases on the counts.
    pub fn optimize(&mut self) {
        self.load.fill(0);
        for (s, m) in self.pair_member.iter().enumerate() {
            self.load[*m as usize] += self.c[s];
        }
        let owned: u64 = self.o.iter().map(|o| u64::from(*o)).sum();
        self.weight = owned as i64 + 1;
        while self.balance_step() {}
        let bound = self.kept_bound();
        if self.kept() >= bound {
            return;
        }
        match self.transfer(bound, true) {
            Transfer::Optimal => return,
            Transfer::Improved => {}
            Transfer::Unreachable => {
                // The kept partitions' bound alone may still be reachable.
                self.transfer(bound, false);
            }
        }
        if self.kept() >= bound {
            return;
        }
        self.repair(bound);
        if self.kept() < bound {
            self.stickiness();
        }
    }

    /// Worth of what is kept: `weight` per kept partition plus one per rack-matched one.
    fn kept(&self) -> u64 {
        (0..self.c.len())
            .map(|s| {
                let c = self.c[s];
                self.weight as u64 * u64::from(c.min(self.o[s])) + u64::from(c.min(self.om[s]))
            })
            .sum()
    }

    /// The largest load member `m` may have with the sorted load vector fixed: its level, or the
    /// next one if some member is there.
    fn caps(&self) -> Vec<u32> {
        let mut levels: Vec<u32> = self.load.clone();
        levels.sort_unstable();
        levels.dedup();
        self.load
            .iter()
            .map(|&l| {
                if levels.binary_search(&(l + 1)).is_ok() {
                    l + 1
                } else {
                    l
                }
            })
            .collect()
    }

    /// No balanced count matrix keeps more: a member keeps at most what it owned and at most
    /// the largest load it may have.
    fn kept_bound(&self) -> u64 {
        let caps = self.caps();
        let n = self.members();
        let (owned, matched) = self.owned_per_member();
        (0..n)
            .map(|m| {
                self.weight as u64 * u64::from(owned[m].min(caps[m]))
                    + u64::from(matched[m].min(caps[m]))
            })
            .sum()
    }

    /// Cheap improvements of the kept count, exact whenever they reach `bound`. For a member `u`
    /// holding fewer partitions of a topic `t` than it owned there: a breadth-first search over
    /// moves of fresh partitions (ones their holder did not own, so moving them costs nothing),
    /// starting with one of `u`'s, ends at a member `z`; a holder `h` of a fresh partition of `t`
    /// then hands it back to `u`. That keeps the sorted load vector when `h == z` or `h` is one
    /// level above `z` (the two swap loads), and keeps one more partition. Work is bounded by a
    /// few passes over the pairs; stopping early leaves a valid, equally balanced result.
    fn repair(&mut self, bound: u64) {
        let n = self.members();
        let nt = self.topics();
        let mut search = RepairSearch::new(n, nt, REPAIR_PASSES * (self.c.len() + n + nt));
        let mut kept = self.kept();
        let mut levels: Vec<u32> = self.load.clone();
        levels.sort_unstable();
        levels.dedup();
        self.count_fresh_and_short();
        loop {
            let mut improved = false;
            for u in 0..n as u32 {
                loop {
                    if search.budget == 0 || kept >= bound {
                        return;
                    }
                    // Without a fresh partition to give, u can only rise a level (swapping with a
                    // holder one above it).
                    if self.short[u as usize] == 0
                        || (self.fresh[u as usize] == 0
                            && levels.binary_search(&(self.load[u as usize] + 1)).is_err())
                    {
                        break;
                    }
                    search.round += 1;
                    self.collect_fresh_holders(&mut search, u);
                    if search.above.is_empty() {
                        break;
                    }
                    let Some(found) = self.find_repair_path(&mut search, u) else {
                        break;
                    };
                    let gain = self.apply_repair(&search.via, found);
                    kept = kept.saturating_add_signed(gain);
                    improved = true;
                }
            }
            if !improved {
                return;
            }
        }
    }

    /// Counts, per member, the pairs holding a fresh partition and the pairs holding fewer
    /// than owned.
    fn count_fresh_and_short(&mut self) {
        let n = self.members();
        self.fresh = vec![0; n];
        self.short = vec![0; n];
        for (s, m) in self.pair_member.iter().enumerate() {
            self.fresh[*m as usize] += u32::from(self.c[s] > self.o[s]);
            self.short[*m as usize] += u32::from(self.c[s] < self.o[s]);
        }
    }

    /// Records the holders of fresh partitions of `u`'s short topics: per member, and one per
    /// load in `search.above`.
    fn collect_fresh_holders(&self, search: &mut RepairSearch, u: u32) {
        search.above.clear();
        for &su in self.member_pairs(u) {
            let su = su as usize;
            if self.c[su] >= self.o[su] {
                continue;
            }
            let t = self.pair_topic[su];
            let r = self.topic_pairs(t);
            search.budget = search.budget.saturating_sub(r.len());
            for sh in r {
                let h = self.pair_member[sh];
                if self.c[sh] <= self.o[sh] || search.holder[h as usize] == search.round {
                    continue;
                }
                search.holder[h as usize] = search.round;
                search.holder_pairs[h as usize] = (sh as u32, su as u32);
                let l = self.load[h as usize];
                if !search.above.iter().any(|e| e.0 == l) {
                    search.above.push((l, h, sh as u32, su as u32));
                }
            }
        }
    }

    /// Breadth-first search over moves of fresh partitions from `u` to a member `z` a holder can
    /// close; returns `(z, h, h's pair, u's pair)`, the path left in `search.via`.
    fn find_repair_path(&self, search: &mut RepairSearch, u: u32) -> Option<(u32, u32, u32, u32)> {
        let round = search.round;
        search.queue.clear();
        search.seen[u as usize] = round;
        search.via[u as usize] = (NONE, NONE, NONE);
        if let Some((h, sh, su)) = search.close(self, u, u) {
            return Some((u, h, sh, su));
        }
        search.queue.push_back(u);
        while let Some(a) = search.queue.pop_front() {
            if self.fresh[a as usize] == 0 {
                continue;
            }
            let pairs = self.member_pairs(a);
            search.budget = search.budget.saturating_sub(pairs.len());
            for &sa in pairs {
                let sa = sa as usize;
                let t = self.pair_topic[sa] as usize;
                if self.c[sa] <= self.o[sa] || search.expanded[t] == round {
                    continue;
                }
                search.expanded[t] = round;
                let r = self.topic_pairs(t as u32);
                search.budget = search.budget.saturating_sub(r.len());
                for sb in r {
                    let b = self.pair_member[sb];
                    if search.seen[b as usize] == round {
                        continue;
                    }
                    search.seen[b as usize] = round;
                    search.via[b as usize] = (a, sa as u32, sb as u32);
                    if let Some((h, sh, su)) = search.close(self, u, b) {
                        if self.path_leaves_fresh(b, sh, &search.via) {
                            return Some((b, h, sh, su));
                        }
                    }
                    search.queue.push_back(b);
                }
            }
            if search.budget == 0 {
                break;
            }
        }
        None
    }

    /// Moves the partitions along the path to `z`, then `h` hands `u` one of its own back;
    /// returns the gain in kept worth.
    fn apply_repair(&mut self, via: &[(u32, u32, u32)], found: (u32, u32, u32, u32)) -> i64 {
        let (z, h, sh, su) = found;
        let mut x = z;
        let mut gain = 0i64;
        while via[x as usize].0 != NONE {
            let (a, sa, sb) = via[x as usize];
            gain += self.shift(sa as usize, false);
            gain += self.shift(sb as usize, true);
            x = a;
        }
        gain += self.shift(sh as usize, false);
        gain += self.shift(su as usize, true);
        debug_assert!(gain > 0, "a repair keeps more");
        self.load[z as usize] += 1;
        self.load[h as usize] -= 1;
        gain
    }

    /// Whether `h`'s pair `sh` still holds a fresh partition after the path to `z` moved
    /// partitions into and out of it.
    fn path_leaves_fresh(&self, z: u32, sh: u32, via: &[(u32, u32, u32)]) -> bool {
        let mut c = i64::from(self.c[sh as usize]);
        let mut x = z;
        while via[x as usize].0 != NONE {
            let (a, sa, sb) = via[x as usize];
            c += i64::from(sb == sh) - i64::from(sa == sh);
            x = a;
        }
        c > i64::from(self.o[sh as usize])
    }

    /// Worth kept at pair `s`.
    fn value(&self, s: usize) -> u64 {
        let c = self.c[s];
        self.weight as u64 * u64::from(c.min(self.o[s])) + u64::from(c.min(self.om[s]))
    }

    /// Adds one to (`up`) or takes one from pair `s`; returns the change of the kept worth.
    fn shift(&mut self, s: usize, up: bool) -> i64 {
        let before = self.value(s) as i64;
        let m = self.pair_member[s] as usize;
        self.fresh[m] -= u32::from(self.c[s] > self.o[s]);
        self.short[m] -= u32::from(self.c[s] < self.o[s]);
        if up {
            self.c[s] += 1;
        } else {
            self.c[s] -= 1;
        }
        self.fresh[m] += u32::from(self.c[s] > self.o[s]);
        self.short[m] += u32::from(self.c[s] < self.o[s]);
        self.dirty[self.pair_topic[s] as usize] = true;
        self.value(s) as i64 - before
    }

    /// Finds and applies one chain of moves from a member to one with two or fewer partitions;
    /// false when there is none (the loads are optimal).
    fn balance_step(&mut self) -> bool {
        let n = self.members();
        let (Some(&min), Some(&max)) = (self.load.iter().min(), self.load.iter().max()) else {
            return false;
        };
        if max <= min + 1 {
            return false;
        }
        let mut levels: Vec<u32> = self.load.clone();
        levels.sort_unstable();
        levels.dedup();
        // Reached from member m: it hands partition of pair `via[m]` (its own pair) to `next[m]`.
        let mut next = vec![NONE; n];
        let mut via = vec![NONE; n];
        let mut seen = vec![false; n];
        let mut expanded = vec![false; self.topics()];
        let mut heavy: Vec<u32> = Vec::new();
        for &level in &levels {
            if level + 2 > max {
                break;
            }
            seen.fill(false);
            expanded.fill(false);
            next.fill(NONE);
            let mut queue: VecDeque<u32> = (0..n as u32)
                .filter(|m| self.load[*m as usize] <= level)
                .collect();
            for m in &queue {
                seen[*m as usize] = true;
            }
            while let Some(b) = queue.pop_front() {
                for &s in self.member_pairs(b) {
                    let t = self.pair_topic[s as usize] as usize;
                    if expanded[t] {
                        continue;
                    }
                    expanded[t] = true;
                    for sa in self.topic_pairs(t as u32) {
                        let a = self.pair_member[sa];
                        if seen[a as usize] || self.c[sa] == 0 {
                            continue;
                        }
                        seen[a as usize] = true;
                        next[a as usize] = b;
                        via[a as usize] = sa as u32;
                        if self.load[a as usize] >= level + 2 {
                            heavy.push(a);
                        }
                        queue.push_back(a);
                    }
                }
            }
            // Apply every chain of this search that is still valid after the earlier ones.
            let mut applied = false;
            for &a in &heavy {
                let mut m = a;
                let mut ok = true;
                while next[m as usize] != NONE {
                    if self.c[via[m as usize] as usize] == 0 {
                        ok = false;
                        break;
                    }
                    m = next[m as usize];
                }
                if ok && self.load[a as usize] >= self.load[m as usize] + 2 {
                    self.apply_chain(a, &next, &via);
                    applied = true;
                }
            }
            if applied {
                return true;
            }
            heavy.clear();
        }
        false
    }

    /// Moves one partition along the chain from `a`: each member hands one partition of the
    /// topic of `via[m]` to `next[m]`, until a search source (no `next`) is reached.
    pub(super) fn apply_chain(&mut self, a: u32, next: &[u32], via: &[u32]) {
        let mut m = a;
        self.load[a as usize] -= 1;
        while next[m as usize] != NONE {
            let s = via[m as usize] as usize;
            let b = next[m as usize];
            self.c[s] -= 1;
            let t = self.pair_topic[s];
            self.dirty[t as usize] = true;
            let sb = self
                .pair_of(b, t)
                .expect("the next member subscribes to the topic");
            self.c[sb] += 1;
            m = b;
        }
        self.load[m as usize] += 1;
    }

    fn pair_of(&self, m: u32, t: u32) -> Option<usize> {
        let r = self.topic_pairs(t);
        let start = r.start;
        self.pair_member[r]
            .binary_search(&m)
            .ok()
            .map(|i| start + i)
    }

    /// Cost of member's pair `s` giving one partition: what keeping it was worth (members give
    /// up mismatched partitions before matched ones).
    pub(super) fn give_cost(&self, s: usize) -> i64 {
        let c = self.c[s];
        if c <= self.om[s] {
            self.weight + 1
        } else if c <= self.o[s] {
            self.weight
        } else {
            0
        }
    }

    /// Cost of member's pair `s` receiving one partition: regaining an owned one gains what
    /// keeping it is worth (matched ones first).
    pub(super) fn receive_cost(&self, s: usize) -> i64 {
        let c = self.c[s];
        if c < self.om[s] {
            -(self.weight + 1)
        } else if c < self.o[s] {
            -self.weight
        } else {
            0
        }
    }

    /// Cancels negative cycles of the stickiness circulation until none is left (the kept worth
    /// is then maximal for the sorted load vector).
    ///
    /// Nodes: members `0..n`, topics `n..n + T`, load levels after that. Edges: member -> topic
    /// (it gives a partition of the topic), topic -> member (it receives one), member at level
    /// `l` -> level node `l` (its load rises to `l + 1`), level node `l` -> member at `l + 1` (its
    /// load drops to `l`); the level edges keep the sorted load vector unchanged.
    ///
    /// One queue-based Bellman-Ford run: a cycle found is cancelled on the spot and its nodes
    /// (the tails of every edge whose cost or existence it changed) are queued again, so the run
    /// ends with labels under which no edge has a negative reduced cost, which proves that no
    /// negative cycle is left.
    fn stickiness(&mut self) {
        let n = self.members();
        let nt = self.topics();
        let mut levels: Vec<u32> = self.load.clone();
        levels.sort_unstable();
        levels.dedup();
        let nl = levels.len();
        let mut at_level = self.members_at_levels(&levels);
        let v = n + nt + nl;
        let mut search = CycleSearch::new(v);
        let mut edges: Vec<(usize, i64, u32)> = Vec::new();
        let mut stamp = vec![0u32; v];
        let mut round = 0u32;
        // Relaxations since the parent pointers were last checked for a cycle.
        let mut relaxed = 0usize;
        while let Some(x) = search.queue.pop_front() {
            search.in_queue[x as usize] = false;
            self.circulation_edges(x as usize, &levels, &at_level, &mut edges);
            relaxed += search.relax(x, &edges);
            if relaxed < v {
                continue;
            }
            relaxed = 0;
            // Any cycle of parent pointers is a negative cycle (or was one before an earlier
            // cancellation changed costs, which cancel_cycle checks).
            round += 1;
            let Some(w) = find_parent_cycle(&search.parent, &mut stamp, round) else {
                continue;
            };
            let cancelled =
                self.cancel_cycle(w, &search.parent, &search.parent_pair, &levels, n, nt);
            if let Some(nodes) = cancelled {
                at_level = self.members_at_levels(&levels);
                for &w in &nodes {
                    search.enqueue(w);
                }
                // The level nodes' edges follow the members' loads.
                for li in 0..nl {
                    search.enqueue(n + nt + li);
                }
            }
            // Break the cycle in the parent pointers so it is not found again.
            search.parent[w] = NONE;
        }
    }

    /// The members at each load level (`levels`: the sorted distinct loads).
    fn members_at_levels(&self, levels: &[u32]) -> Vec<Vec<u32>> {
        let mut at_level: Vec<Vec<u32>> = vec![Vec::new(); levels.len()];
        for (m, load) in self.load.iter().enumerate() {
            let li = levels
                .binary_search(load)
                .expect("a member's load is a level");
            at_level[li].push(m as u32);
        }
        at_level
    }

    /// Out-edges of node `x` of the stickiness circulation as (head, cost, pair), into `edges`.
    fn circulation_edges(
        &self,
        x: usize,
        levels: &[u32],
        at_level: &[Vec<u32>],
        edges: &mut Vec<(usize, i64, u32)>,
    ) {
        let n = self.members();
        let nt = self.topics();
        let nl = levels.len();
        edges.clear();
        if x < n {
            for &s in self.member_pairs(x as u32) {
                let s = s as usize;
                if self.c[s] > 0 {
                    edges.push((n + self.pair_topic[s] as usize, self.give_cost(s), s as u32));
                }
            }
            let li = levels
                .binary_search(&self.load[x])
                .expect("a member's load is a level");
            if li + 1 < nl && levels[li + 1] == levels[li] + 1 {
                edges.push((n + nt + li, 0, NONE));
            }
        } else if x < n + nt {
            for s in self.topic_pairs((x - n) as u32) {
                edges.push((self.pair_member[s] as usize, self.receive_cost(s), s as u32));
            }
        } else {
            let li = x - n - nt;
            if li + 1 < nl && levels[li + 1] == levels[li] + 1 {
                edges.extend(at_level[li + 1].iter().map(|u| (*u as usize, 0, NONE)));
            }
        }
    }

    /// Cancels the cycle of parent pointers through `w` if it is negative; returns its nodes.
    fn cancel_cycle(
        &mut self,
        w: usize,
        parent: &[u32],
        parent_pair: &[u32],
        levels: &[u32],
        n: usize,
        nt: usize,
    ) -> Option<Vec<usize>> {
        // Collect the cycle's edges (into-node, pair).
        let mut edges = Vec::new();
        let mut x = w;
        loop {
            edges.push((x, parent_pair[x]));
            x = parent[x] as usize;
            if x == w {
                break;
            }
            if edges.len() > parent.len() {
                return None;
            }
        }
        // Parent pointers may be older than the last cancellation: every edge must still exist.
        let next_level = |li: usize| li + 1 < levels.len() && levels[li + 1] == levels[li] + 1;
        for &(into, pair) in &edges {
            let from = parent[into] as usize;
            let ok = if into < n && from < n + nt {
                pair != NONE
                    && self.pair_member[pair as usize] as usize == into
                    && self.pair_topic[pair as usize] as usize + n == from
            } else if into < n {
                let li = from - n - nt;
                next_level(li) && self.load[into] == levels[li] + 1
            } else if into < n + nt {
                from < n
                    && pair != NONE
                    && self.pair_member[pair as usize] as usize == from
                    && self.pair_topic[pair as usize] as usize + n == into
                    && self.c[pair as usize] > 0
            } else {
                let li = into - n - nt;
                from < n && next_level(li) && self.load[from] == levels[li]
            };
            if !ok {
                return None;
            }
        }
        let cost: i64 = edges
            .iter()
            .map(|&(into, pair)| {
                if pair == NONE {
                    0
                } else if into < n {
                    self.receive_cost(pair as usize)
                } else if into < n + nt {
                    self.give_cost(pair as usize)
                } else {
                    0
                }
            })
            .sum();
        if cost >= 0 {
            return None;
        }
        let nodes = edges.iter().map(|e| e.0).collect();
        for (into, pair) in edges {
            if pair == NONE {
                continue;
            }
            let m = self.pair_member[pair as usize] as usize;
            self.dirty[self.pair_topic[pair as usize] as usize] = true;
            if into < n {
                self.c[pair as usize] += 1;
                self.load[m] += 1;
            } else {
                self.c[pair as usize] -= 1;
                self.load[m] -= 1;
            }
        }
        Some(nodes)
    }
}

/// Search state of `repair`, reset between searches by stamping with `round` instead of
/// clearing.
struct RepairSearch {
    /// Work left, in pairs looked at.
    budget: usize,
    round: u32,
    seen: Vec<u32>,
    expanded: Vec<u32>,
    holder: Vec<u32>,
    holder_pairs: Vec<(u32, u32)>,
    /// Reached member -> (previous member, pair it gave from, pair this one received into).
    via: Vec<(u32, u32, u32)>,
    /// One holder of a fresh partition per load: (load, h, h's pair, u's pair).
    above: Vec<(u32, u32, u32, u32)>,
    queue: VecDeque<u32>,
}

impl RepairSearch {
    fn new(n: usize, nt: usize, budget: usize) -> RepairSearch {
        RepairSearch {
            budget,
            round: 0,
            seen: vec![0; n],
            expanded: vec![0; nt],
            holder: vec![0; n],
            holder_pairs: vec![(0, 0); n],
            via: vec![(NONE, NONE, NONE); n],
            above: Vec::new(),
            queue: VecDeque::new(),
        }
    }

    /// Closes a search from `u` ending at `z`: (h, h's pair, u's pair).
    fn close(&self, counts: &Counts, u: u32, z: u32) -> Option<(u32, u32, u32)> {
        if self.holder[z as usize] == self.round && z != u {
            let (sh, su) = self.holder_pairs[z as usize];
            return Some((z, sh, su));
        }
        let l = counts.load[z as usize] + 1;
        self.above
            .iter()
            .find(|e| e.0 == l)
            .map(|e| (e.1, e.2, e.3))
    }
}

/// Queue-based Bellman-Ford state of `stickiness`.
struct CycleSearch {
    dist: Vec<i64>,
    parent: Vec<u32>,
    /// The pair an edge into a member or topic node uses (NONE for level edges).
    parent_pair: Vec<u32>,
    in_queue: Vec<bool>,
    queue: VecDeque<u32>,
}

impl CycleSearch {
    /// Every node starts at distance zero, queued.
    fn new(v: usize) -> CycleSearch {
        CycleSearch {
            dist: vec![0; v],
            parent: vec![NONE; v],
            parent_pair: vec![NONE; v],
            in_queue: vec![true; v],
            queue: (0..v as u32).collect(),
        }
    }

    fn enqueue(&mut self, y: usize) {
        if !self.in_queue[y] {
            self.in_queue[y] = true;
            self.queue.push_back(y as u32);
        }
    }

    /// Relaxes the out-edges of `x`; returns how many improved a distance.
    fn relax(&mut self, x: u32, edges: &[(usize, i64, u32)]) -> usize {
        let dx = self.dist[x as usize];
        let mut relaxed = 0;
        for &(y, cost, pair) in edges {
            if dx + cost < self.dist[y] {
                self.dist[y] = dx + cost;
                self.parent[y] = x;
                self.parent_pair[y] = pair;
                relaxed += 1;
                self.enqueue(y);
            }
        }
        relaxed
    }
}

/// A node on a cycle of parent pointers, if there is one. `stamp` marks the nodes walked in
/// `round`; O(V).
fn find_parent_cycle(parent: &[u32], stamp: &mut [u32], round: u32) -> Option<usize> {
    // Each walk is tagged with its start so a walk stopping on its own trail found a cycle.
    let mut walk_of = vec![NONE; parent.len()];
    for start in 0..parent.len() {
        if stamp[start] == round {
            continue;
        }
        let mut x = start;
        while x as u32 != NONE && stamp[x] != round {
            stamp[x] = round;
            walk_of[x] = start as u32;
            x = parent[x] as usize;
            if parent.get(x).is_none() {
                break;
            }
        }
        if x < parent.len() && stamp[x] == round && walk_of[x] == start as u32 {
            return Some(x);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Rng(u64);

    impl Rng {
        fn below(&mut self, n: u32) -> u32 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            (self.0 % u64::from(n.max(1))) as u32
        }
    }

    /// A random group's counts with loads already most balanced: random subscriptions, each
    /// topic's partitions dealt at random to its subscribers, a random part of them owned
    /// before (some rack-matched) by random subscribers.
    fn random_counts(rng: &mut Rng) -> Counts {
        let n = 2 + rng.below(24) as usize;
        let nt = 1 + rng.below(8) as usize;
        let subscribers: Vec<Vec<u32>> = (0..nt)
            .map(|_| {
                let mut s: Vec<u32> = (0..n as u32).filter(|_| rng.below(3) == 0).collect();
                if s.is_empty() {
                    s.push(rng.below(n as u32));
                }
                s
            })
            .collect();
        let mut counts = Counts::new(&subscribers, n);
        for t in 0..nt as u32 {
            let r = counts.topic_pairs(t);
            let k = r.len() as u32;
            for _ in 0..rng.below(14) {
                counts.c[r.start + rng.below(k) as usize] += 1;
                if rng.below(4) != 0 {
                    let s = r.start + rng.below(k) as usize;
                    counts.o[s] += 1;
                    counts.om[s] += u32::from(rng.below(3) != 0);
                }
            }
        }
        counts.load.fill(0);
        for (s, m) in counts.pair_member.iter().enumerate() {
            counts.load[*m as usize] += counts.c[s];
        }
        counts.weight = counts.o.iter().map(|o| i64::from(*o)).sum::<i64>() + 1;
        while counts.balance_step() {}
        counts
    }

    fn topic_totals(c: &Counts) -> Vec<u32> {
        (0..c.topics() as u32)
            .map(|t| c.topic_pairs(t).map(|s| c.c[s]).sum())
            .collect()
    }

    fn sorted_loads(c: &Counts) -> Vec<u32> {
        let mut l = c.load.clone();
        l.sort_unstable();
        l
    }

    /// The repair step alone keeps every topic's total and the sorted load vector, never keeps
    /// less, and never more than the exact search proves possible; after it the exact search
    /// reaches the same optimum as without it.
    #[test]
    fn repair_improves_within_the_optimum() {
        let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
        let mut improved = 0;
        for _ in 0..3000 {
            let base = random_counts(&mut rng);
            let bound = base.kept_bound();
            let mut exact = base.clone();
            exact.stickiness();
            let mut repaired = base.clone();
            repaired.repair(bound);
            assert_eq!(topic_totals(&repaired), topic_totals(&base));
            assert_eq!(sorted_loads(&repaired), sorted_loads(&base));
            let mut loads = vec![0u32; repaired.members()];
            for (s, m) in repaired.pair_member.iter().enumerate() {
                loads[*m as usize] += repaired.c[s];
            }
            assert_eq!(loads, repaired.load, "loads follow the counts");
            assert!(repaired.kept() >= base.kept());
            assert!(repaired.kept() <= exact.kept());
            assert!(exact.kept() <= bound);
            improved += usize::from(repaired.kept() > base.kept());
            repaired.stickiness();
            assert_eq!(repaired.kept(), exact.kept());
        }
        assert!(improved > 100, "the repairs ran: {improved}");
    }

    /// The maximum flow: when it claims the optimum, the exact search agrees and finds nothing
    /// more; when it only improves, the exact search still reaches the optimum from there;
    /// either way topic totals and the sorted loads are kept and the loads follow the counts.
    #[test]
    fn transfer_agrees_with_the_exact_search() {
        let mut rng = Rng(0x2545_f491_4f6c_dd1d);
        let (mut optimal, mut improved) = (0, 0);
        for _ in 0..3000 {
            let base = random_counts(&mut rng);
            let bound = base.kept_bound();
            let mut exact = base.clone();
            exact.stickiness();
            for split in [true, false] {
                let mut flow = base.clone();
                let outcome = flow.transfer(bound, split);
                assert_eq!(topic_totals(&flow), topic_totals(&base));
                assert_eq!(sorted_loads(&flow), sorted_loads(&base));
                let mut loads = vec![0u32; flow.members()];
                for (s, m) in flow.pair_member.iter().enumerate() {
                    loads[*m as usize] += flow.c[s];
                }
                assert_eq!(loads, flow.load, "loads follow the counts");
                assert!(flow.kept() <= exact.kept());
                match outcome {
                    Transfer::Optimal => {
                        assert!(split);
                        assert_eq!(flow.kept(), exact.kept(), "claimed optimum");
                        optimal += 1;
                    }
                    Transfer::Improved => improved += 1,
                    Transfer::Unreachable => assert_eq!(flow.c, base.c, "left unchanged"),
                }
                flow.stickiness();
                assert_eq!(flow.kept(), exact.kept());
            }
        }
        assert!(
            optimal > 300 && improved > 50,
            "{optimal} optimal, {improved} improved"
        );
    }
}
