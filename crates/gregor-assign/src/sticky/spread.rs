//! The tie-break after balance and stickiness: members with identical subscriptions (a *class*)
//! should hold equally many partitions where the optimum allows it.
//!
//! Among the most balanced assignments a member's load is one of at most two adjacent levels,
//! and members of one class are within one of each other (either could take the other's
//! partitions), so a class's spread is 0 or 1. Which members sit at the higher level is free as
//! far as balance goes: a member `a` at `l + 1` and a member `r` at `l` swap levels through a
//! chain of moves `a -> x1 -> ... -> r`, each hop handing over one partition of a topic both
//! ends subscribe to, which leaves the sorted load vector unchanged. When every hop hands over a
//! *fresh* partition (`c > o`: one the giver did not own), the kept and rack-matched kept counts
//! (`sum min(c, o)`, `sum min(c, om)`) are unchanged too; other chains are applied only when
//! their net change of those counts is zero, so the tie-break never costs criteria 2 and 3. A class at two levels moves its members at the higher level down (or those at the lower
//! one up, whichever are fewer, then the other way if that fails), each with a partner outside
//! the class at the level it leaves for; a partner may not split a class that is level (its own
//! class of two or more members all at one level).
//!
//! First, backward breadth-first searches from the members that would rise, as in the balance
//! phase, over fresh partitions only; each applies every chain of its search tree that is still
//! valid. Then, for classes still split, chains that may pass through kept partitions (a member
//! gives up one it owned and takes back another one it owned): a queue-based Bellman-Ford
//! search with the stickiness costs of the exact phase finds the cheapest chain from a giver to
//! a riser, applied when it costs nothing (the counts are optimal, so no chain gains).
//! Last, a class still split may level only by splitting a level class whose members can then
//! all follow to the other level (one member of it alone would split it, so the rule above
//! refuses; two levelled for one split is a gain): a trial on a copy of the counts lets level
//! classes move, then levels every split class as above, and is kept only when fewer classes
//! are split than before (each trial costs one copy of the counts, charged to the budget). Total
//! search work is bounded by `SEARCH_BUDGET` pair visits or four passes over the pairs,
//! whichever is larger, so the tie-break costs at most a few O(S) passes on large groups and
//! may leave a class split there that a longer search would have levelled.

use std::collections::VecDeque;

use super::exact::Counts;

const NONE: u32 = u32::MAX;

/// Pair visits every group may spend on the tie-break (small groups: no practical limit).
const SEARCH_BUDGET: usize = 1 << 20;

/// Subscription class of each member: members with identical topic lists share one.
pub(super) fn classes<T: Ord>(lists: &[&[T]]) -> Vec<u32> {
    let mut order: Vec<u32> = (0..lists.len() as u32).collect();
    order.sort_by(|a, b| lists[*a as usize].cmp(lists[*b as usize]));
    let mut class = vec![0u32; lists.len()];
    let mut id = 0u32;
    for (i, m) in order.iter().enumerate() {
        if i > 0 && lists[order[i - 1] as usize] != lists[*m as usize] {
            id += 1;
        }
        class[*m as usize] = id;
    }
    class
}

/// Whether some class has members at two different loads.
pub(super) fn any_split(class: &[u32], load: &[u32]) -> bool {
    let n = class.iter().max().map_or(0, |c| *c as usize + 1);
    let mut first = vec![NONE; n];
    class.iter().zip(load).any(|(c, l)| {
        let f = &mut first[*c as usize];
        if *f == NONE {
            *f = *l;
        }
        *f != *l
    })
}

/// Per class: its lowest load, how many members are at it and how many above it (at most one
/// above, in the most balanced assignments).
#[derive(Clone)]
struct Levels {
    low: Vec<u32>,
    at_low: Vec<u32>,
    above: Vec<u32>,
    /// During a trial: a level class may split too (within one of its level).
    relaxed: bool,
}

impl Levels {
    fn new(class: &[u32], load: &[u32]) -> Levels {
        let n = class.iter().max().map_or(0, |c| *c as usize + 1);
        let mut low = vec![u32::MAX; n];
        for (c, l) in class.iter().zip(load) {
            low[*c as usize] = low[*c as usize].min(*l);
        }
        let mut at_low = vec![0u32; n];
        let mut above = vec![0u32; n];
        for (c, l) in class.iter().zip(load) {
            if *l == low[*c as usize] {
                at_low[*c as usize] += 1;
            } else {
                above[*c as usize] += 1;
            }
        }
        Levels {
            low,
            at_low,
            above,
            relaxed: false,
        }
    }

    fn split(&self, c: u32) -> bool {
        self.at_low[c as usize] > 0 && self.above[c as usize] > 0
    }

    fn split_count(&self) -> usize {
        (0..self.low.len() as u32)
            .filter(|c| self.split(*c))
            .count()
    }

    /// Whether a member of class `c` may move to load `to`: a class of one always may; a split
    /// class only within its two levels (its spread never grows); a level class of two or more
    /// never (that would split it), except during a trial (`relaxed`), by one level.
    fn may_move(&self, c: u32, to: u32) -> bool {
        let ci = c as usize;
        self.at_low[ci] + self.above[ci] == 1
            || (self.split(c) && (to == self.low[ci] || to == self.low[ci] + 1))
            || (self.relaxed
                && !self.split(c)
                && (to + 1 == self.low[ci] || to == self.low[ci] + 1))
    }

    /// Records that a member of class `c` moved from load `from` to `to` (one apart).
    fn shift(&mut self, c: u32, from: u32, to: u32) {
        let ci = c as usize;
        if from == self.low[ci] {
            self.at_low[ci] -= 1;
        } else {
            self.above[ci] -= 1;
        }
        if self.at_low[ci] == 0 {
            // The class is empty now (a class of one) or all above: renormalize.
            self.low[ci] = if self.above[ci] > 0 {
                self.low[ci] + 1
            } else {
                to
            };
            self.at_low[ci] = self.above[ci];
            self.above[ci] = 0;
        }
        if to == self.low[ci] {
            self.at_low[ci] += 1;
        } else if to > self.low[ci] {
            self.above[ci] += 1;
        } else {
            self.above[ci] += self.at_low[ci];
            self.at_low[ci] = 1;
            self.low[ci] = to;
        }
    }
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Direction {
    /// The class's members above its lowest level come down.
    Down,
    /// The class's members at its lowest level go up.
    Up,
}

impl Counts {
    /// Levels the classes where a chain of fresh-partition moves allows it (see the module
    /// comment); loads, kept and rack-matched kept counts are unchanged.
    pub(super) fn level_classes(&mut self, class: &[u32]) {
        if !any_split(class, self.loads()) {
            return;
        }
        let kept_before = self.kept_worth();
        let mut budget = SEARCH_BUDGET.max(4 * self.c.len());
        let mut lv = Levels::new(class, self.loads());
        for k in 0..lv.low.len() as u32 {
            self.level_class(class, &mut lv, k, &mut budget);
        }
        // A class still split may level only by splitting a level class, which can then level
        // again at the other level (two members of it move where one would split it): tried
        // on a copy of the counts, kept only when fewer classes are split in the end.
        for k in 0..lv.low.len() as u32 {
            for dir in [Direction::Down, Direction::Up] {
                if !lv.split(k) || budget <= self.c.len() {
                    break;
                }
                budget -= self.c.len();
                let saved = (self.snapshot(), lv.clone());
                let split_before = lv.split_count();
                lv.relaxed = true;
                while lv.split(k)
                    && budget > 0
                    && self.level_step(class, &mut lv, k, dir, &mut budget)
                {}
                while lv.split(k)
                    && budget > 0
                    && self.level_exchange(class, &mut lv, k, dir, &mut budget)
                {}
                lv.relaxed = false;
                for j in 0..lv.low.len() as u32 {
                    self.level_class(class, &mut lv, j, &mut budget);
                }
                if lv.split_count() >= split_before {
                    self.restore(saved.0);
                    lv = saved.1;
                }
            }
        }
        debug_assert_eq!(
            self.kept_worth(),
            kept_before,
            "the tie-break keeps as much"
        );
    }

    /// Levels class `k` if it is split: fresh-partition chains first (one search applies many),
    /// then chains that may pass through kept partitions at no net loss (one per search).
    fn level_class(&mut self, class: &[u32], lv: &mut Levels, k: u32, budget: &mut usize) {
        let ku = k as usize;
        let order = if lv.above[ku] <= lv.at_low[ku] {
            [Direction::Down, Direction::Up]
        } else {
            [Direction::Up, Direction::Down]
        };
        for dir in order {
            while lv.split(k) && *budget > 0 && self.level_step(class, lv, k, dir, budget) {}
        }
        for dir in order {
            while lv.split(k) && *budget > 0 && self.level_exchange(class, lv, k, dir, budget) {}
        }
    }

    /// One search for class `k` (split) in direction `dir`; applies every chain of its search
    /// tree that is still valid. False when it applied none.
    fn level_step(
        &mut self,
        class: &[u32],
        lv: &mut Levels,
        k: u32,
        dir: Direction,
        budget: &mut usize,
    ) -> bool {
        let low = lv.low[k as usize];
        let n = self.members();
        // Risers go from the class's lower level to the upper one, givers the other way.
        let rises = |lv: &Levels, load: &[u32], m: usize| {
            load[m] == low
                && match dir {
                    Direction::Down => class[m] != k && lv.may_move(class[m], low + 1),
                    Direction::Up => class[m] == k,
                }
        };
        let gives = |lv: &Levels, load: &[u32], m: usize| {
            load[m] == low + 1
                && match dir {
                    Direction::Down => class[m] == k,
                    Direction::Up => class[m] != k && lv.may_move(class[m], low),
                }
        };
        // Reached from member m: it hands a fresh partition of pair `via[m]` to `next[m]`.
        let mut next = vec![NONE; n];
        let mut via = vec![NONE; n];
        let mut seen = vec![false; n];
        let mut expanded = vec![false; self.topics()];
        let mut queue: VecDeque<u32> = (0..n as u32)
            .filter(|m| rises(lv, self.loads(), *m as usize))
            .collect();
        for m in &queue {
            seen[*m as usize] = true;
        }
        let mut givers: Vec<u32> = Vec::new();
        while let Some(b) = queue.pop_front() {
            for &s in self.member_pairs(b) {
                let t = self.pair_topic(s as usize);
                if expanded[t as usize] {
                    continue;
                }
                expanded[t as usize] = true;
                let pairs = self.topic_pairs(t);
                *budget = budget.saturating_sub(pairs.len());
                for sa in pairs {
                    let a = self.pair_member(sa);
                    if seen[a as usize] || self.c[sa] <= self.o[sa] {
                        continue;
                    }
                    seen[a as usize] = true;
                    next[a as usize] = b;
                    via[a as usize] = sa as u32;
                    if gives(lv, self.loads(), a as usize) {
                        givers.push(a);
                    } else {
                        queue.push_back(a);
                    }
                }
            }
        }
        let mut applied = false;
        for a in givers {
            if !lv.split(k) {
                break;
            }
            // Earlier chains may have used a hop's fresh partition or moved either end.
            let mut m = a;
            let mut ok = gives(lv, self.loads(), a as usize);
            while ok && next[m as usize] != NONE {
                let s = via[m as usize] as usize;
                ok = self.c[s] > self.o[s];
                m = next[m as usize];
            }
            let r = m as usize;
            if ok && rises(lv, self.loads(), r) {
                self.apply_chain(a, &next, &via);
                lv.shift(class[a as usize], low + 1, low);
                lv.shift(class[r], low, low + 1);
                applied = true;
            }
        }
        applied
    }
}

impl Counts {
    /// One chain for class `k` in direction `dir` that may pass through kept partitions: a
    /// shortest path (queue-based Bellman-Ford, costs in kept worth: giving a kept partition
    /// costs what keeping it was worth, taking back an owned one gains it) from the givers to a
    /// riser, applied when it loses nothing. False when there is none (or the budget ran out).
    fn level_exchange(
        &mut self,
        class: &[u32],
        lv: &mut Levels,
        k: u32,
        dir: Direction,
        budget: &mut usize,
    ) -> bool {
        let low = lv.low[k as usize];
        let n = self.members();
        let load = self.loads();
        let is_riser = |m: usize| {
            load[m] == low
                && match dir {
                    Direction::Down => class[m] != k && lv.may_move(class[m], low + 1),
                    Direction::Up => class[m] == k,
                }
        };
        let is_giver = |m: usize| {
            load[m] == low + 1
                && match dir {
                    Direction::Down => class[m] == k,
                    Direction::Up => class[m] != k && lv.may_move(class[m], low),
                }
        };
        let givers: Vec<usize> = (0..n).filter(|m| is_giver(*m)).collect();
        let risers: Vec<usize> = (0..n).filter(|m| is_riser(*m)).collect();
        if givers.is_empty() || risers.is_empty() {
            return false;
        }
        let Some(paths) = self.cheapest_chains(&givers, budget) else {
            return false;
        };
        let Some(&r) = risers
            .iter()
            .filter(|r| paths.dist[**r] <= 0)
            .min_by_key(|r| paths.dist[**r])
        else {
            return false;
        };
        let Some((a, next, via)) = paths.chain_to(r, n) else {
            return false;
        };
        self.apply_chain(a as u32, &next, &via);
        lv.shift(class[a], low + 1, low);
        lv.shift(class[r], low, low + 1);
        true
    }

    /// Queue-based Bellman-Ford from the `givers` over members and topics, with the stickiness
    /// costs; `None` when the budget runs out (a negative cycle, the counts not being optimal,
    /// or a very large search).
    fn cheapest_chains(&self, givers: &[usize], budget: &mut usize) -> Option<ChainPaths> {
        let n = self.members();
        let v = n + self.topics();
        let mut paths = ChainPaths {
            dist: vec![i64::MAX; v],
            parent: vec![NONE; v],
            parent_pair: vec![NONE; v],
        };
        let mut in_queue = vec![false; v];
        let mut queue: VecDeque<u32> = VecDeque::new();
        for &m in givers {
            paths.dist[m] = 0;
            in_queue[m] = true;
            queue.push_back(m as u32);
        }
        while let Some(x) = queue.pop_front() {
            let xi = x as usize;
            in_queue[xi] = false;
            let dx = paths.dist[xi];
            let mut relax = |y: usize, cost: i64, pair: usize| {
                if dx + cost < paths.dist[y] {
                    paths.dist[y] = dx + cost;
                    paths.parent[y] = x;
                    paths.parent_pair[y] = pair as u32;
                    if !in_queue[y] {
                        in_queue[y] = true;
                        queue.push_back(y as u32);
                    }
                }
            };
            if xi < n {
                let pairs = self.member_pairs(x);
                *budget = budget.saturating_sub(pairs.len());
                for &s in pairs {
                    let s = s as usize;
                    if self.c[s] > 0 {
                        relax(n + self.pair_topic(s) as usize, self.give_cost(s), s);
                    }
                }
            } else {
                let pairs = self.topic_pairs((xi - n) as u32);
                *budget = budget.saturating_sub(pairs.len());
                for s in pairs {
                    relax(self.pair_member(s) as usize, self.receive_cost(s), s);
                }
            }
            if *budget == 0 {
                return None;
            }
        }
        Some(paths)
    }
}

/// Shortest paths of `cheapest_chains`: nodes are members `0..n`, then topics.
struct ChainPaths {
    dist: Vec<i64>,
    parent: Vec<u32>,
    /// The pair an edge into a node uses: the giver's pair into a topic node, the receiver's
    /// pair into a member node.
    parent_pair: Vec<u32>,
}

impl ChainPaths {
    /// The chain ending at riser `r` as `(giver, next, via)` for `Counts::apply_chain`, walked
    /// back member <- topic <- member ... <- giver; `None` if it does not end within `n` steps.
    fn chain_to(&self, r: usize, n: usize) -> Option<(usize, Vec<u32>, Vec<u32>)> {
        let mut next = vec![NONE; n];
        let mut via = vec![NONE; n];
        let mut cur = r;
        let mut steps = 0;
        loop {
            let t = self.parent[cur] as usize;
            let u = self.parent[t] as usize;
            next[u] = cur as u32;
            via[u] = self.parent_pair[t];
            cur = u;
            steps += 1;
            if self.parent[u] == NONE {
                return Some((u, next, via));
            }
            if steps > n {
                return None;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn classes_group_identical_lists() {
        let lists: Vec<&[u32]> = vec![&[1, 2], &[1], &[1, 2], &[], &[1]];
        let c = classes(&lists);
        assert_eq!(c[0], c[2]);
        assert_eq!(c[1], c[4]);
        assert_ne!(c[0], c[1]);
        assert_ne!(c[3], c[0]);
        assert_ne!(c[3], c[1]);
    }

    #[test]
    fn split_classes_are_found() {
        assert!(any_split(&[0, 0, 1], &[3, 4, 4]));
        assert!(!any_split(&[0, 1, 0], &[3, 4, 3]));
    }
}
