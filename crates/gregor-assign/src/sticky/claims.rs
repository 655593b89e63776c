//! After either builder: a partition that some member claims but that went to a member that
//! does not claim it is handed to one of its claimants instead, by swapping it with a partition
//! of the same topic that claimant holds fresh, when that costs nothing.
//!
//! Why: the cooperative protocol withholds a partition from a new owner while any other member
//! still claims it. A partition claimed by two members in the same generation has no valid
//! owner (neither keeps it as *kept*), so the builders deal it like a free one, possibly to a
//! third member; that one then has to wait a round for it. Given to one of its claimants it is
//! not withheld: the claimant may already be consuming it, and the other claimants revoke it on
//! receiving an assignment without it, so no member is added to those that already claim it.
//!
//! The swap: `p` (held by `h`, which does not claim it) goes to a claimant `c` that subscribes to
//! its topic and holds a partition `q` of a topic `h` subscribes to, which `c` did not own
//! (`prev_owner[q] != c`) and does not claim; `q` goes to `h`. Member sizes are unchanged, so
//! balance is (and so is the levelling of classes, which depends on sizes alone); neither `h`
//! (for `p`) nor `c` (for `q`) owned what it gives up, so no kept partition is lost; and with
//! racks, the swap is made only when it loses no rack match of the two placements and creates
//! no rack-mismatched placement (`c` off every replica's rack of `p` while some subscriber is on
//! one, or `h` so for `q` where `c` was not): with identical subscriptions the next round drops
//! such ownership, as Kafka does, so the swap would only move the revocation a round later. `q` is withheld afterwards only if it was before (`c` did not claim it), so
//! each swap withholds at least one partition fewer. A `q` that `h` claims is preferred (two
//! fewer).
//!
//! When no such swap exists, `p` is handed over outright to a claimant `c` holding exactly one
//! partition fewer than `h` (its valid previous owner first, if that is one of them), under the
//! same rack rules, when neither member's class of identical subscriptions gets a wider spread:
//! `h` and `c` trade sizes, so the sorted sizes (balance) are unchanged, `h` did not own `p` and
//! `c` gives up nothing, so no kept partition is lost, and `p` is no longer withheld. Kafka's
//! assignor reaches such groups' first rounds without withholding these partitions, and
//! otherwise Gregor's round withheld one more per partition (found by the comparison against
//! Kafka, `BENCHMARKS.md`).
//!
//! Cost: O(P + claims) to index, then per such `p` and claimant, a scan of the claimant's list
//! (O(log T) per entry for its topic); claimants holding no fresh partition at all, such as an
//! owner that had to give partitions up, are skipped without a scan, and so are claimants off
//! every replica's rack of `p`. The scans visit at most `max(2^20, 4 P)` list entries in all;
//! past that the remaining claimed partitions stay where the builder put them (without the
//! limit, identical subscriptions with racks, where most partitions leave their rack-mismatched
//! owners, cost 10 s on the 1M-partition benchmark group before the rack rule skipped them).

use std::collections::BTreeMap;

use crate::model::{GroupSpec, MemberIdx, PartitionId, TopicId};

use super::prepare::{Prepared, NONE};
use super::spread;

/// List entries the claimant scans may visit on every group (small groups: no practical limit).
const SCAN_BUDGET: usize = 1 << 20;

/// `lists`: each member's partitions, sorted. Swaps partitions between lists as described in
/// the module comment; the lists stay sorted.
pub(super) fn favour_claimants(group: &GroupSpec, prep: &Prepared, lists: &mut [Vec<PartitionId>]) {
    let Some(cl) = Claimants::new(group, prep) else {
        return;
    };
    let total = group.total_partitions() as usize;
    let mut owner = vec![NONE; total];
    for (m, l) in lists.iter().enumerate() {
        for p in l {
            owner[p.0 as usize] = m as u32;
        }
    }
    let mut fresh_held: Vec<u32> = lists
        .iter()
        .enumerate()
        .map(|(m, l)| l.iter().filter(|p| cl.fresh(m as u32, **p)).count() as u32)
        .collect();
    // List entries the scans may visit in all: O(P) work at most, however many partitions are
    // claimed by members holding many fresh ones (a tie-break, not worth more).
    let mut budget = SCAN_BUDGET.max(4 * total);
    // Loads per class of identical subscriptions, for the outright hand-overs (built on first use).
    let mut levels: Option<ClassLoads> = None;
    for pi in 0..total as u32 {
        let p = PartitionId(pi);
        let h = owner[pi as usize];
        if h == NONE || cl.of(p).is_empty() || cl.claims(h, p) {
            continue;
        }
        if budget == 0 {
            break;
        }
        if let Some((c, q)) = cl.best_swap(lists, &fresh_held, h, p, &mut budget) {
            swap(&mut lists[h as usize], p, q);
            swap(&mut lists[c as usize], q, p);
            owner[pi as usize] = c;
            owner[q.0 as usize] = h;
            // c gave up a fresh partition and took one it claims; h's fresh count follows `q`.
            fresh_held[c as usize] -= 1;
            fresh_held[h as usize] = fresh_held[h as usize] - 1 + u32::from(cl.fresh(h, q));
        } else if let Some(c) = cl.direct_claimant(lists, &mut levels, h, p) {
            // No swap: `p` is handed over outright.
            if let Ok(i) = lists[h as usize].binary_search(&p) {
                lists[h as usize].remove(i);
            }
            let list = &mut lists[c as usize];
            let at = list.binary_search(&p).unwrap_or_else(|i| i);
            list.insert(at, p);
            owner[pi as usize] = c;
            fresh_held[h as usize] -= 1;
            // Built by the search that found `c`.
            if let Some(levels) = levels.as_mut() {
                levels.moved(h, c);
            }
        }
    }
}

/// The claimants of each partition (CSR, in member-id order) and the tests on them.
struct Claimants<'a> {
    group: &'a GroupSpec,
    prep: &'a Prepared,
    start: Vec<u32>,
    claimant: Vec<u32>,
}

impl<'a> Claimants<'a> {
    /// `None` when no member claims anything.
    fn new(group: &'a GroupSpec, prep: &'a Prepared) -> Option<Claimants<'a>> {
        let total = group.total_partitions() as usize;
        let mut start = vec![0u32; total + 1];
        for claims in &prep.claims {
            for p in claims {
                start[p.0 as usize + 1] += 1;
            }
        }
        if start.iter().all(|c| *c == 0) {
            return None;
        }
        for i in 1..start.len() {
            start[i] += start[i - 1];
        }
        let mut fill = start.clone();
        let mut claimant = vec![0u32; start[total] as usize];
        for (m, claims) in prep.claims.iter().enumerate() {
            for p in claims {
                let slot = &mut fill[p.0 as usize];
                claimant[*slot as usize] = m as u32;
                *slot += 1;
            }
        }
        // Claimants in member-id order, so the result does not depend on the order members
        // came in.
        for p in 0..total {
            claimant[start[p] as usize..start[p + 1] as usize]
                .sort_unstable_by_key(|m| prep.id_rank[*m as usize]);
        }
        Some(Claimants {
            group,
            prep,
            start,
            claimant,
        })
    }

    fn of(&self, p: PartitionId) -> &[u32] {
        &self.claimant[self.start[p.0 as usize] as usize..self.start[p.0 as usize + 1] as usize]
    }

    fn claims(&self, m: u32, p: PartitionId) -> bool {
        self.of(p).contains(&m)
    }

    /// Fresh for its holder: neither owned nor claimed by it.
    fn fresh(&self, m: u32, p: PartitionId) -> bool {
        self.prep.prev_owner[p.0 as usize] != m && !self.claims(m, p)
    }

    fn rack_match(&self, m: u32, p: PartitionId) -> bool {
        self.prep.racks.as_ref().is_some_and(|r| r.matches(m, p.0))
    }

    /// A placement the next round would give up for rack locality (identical subscriptions
    /// drop such ownership, as Kafka does), which would make the swap cost a revocation later.
    fn mismatch(&self, m: u32, p: PartitionId) -> bool {
        self.prep
            .racks
            .as_ref()
            .is_some_and(|r| r.mismatch(m, p.0, self.group.partition(p).0))
    }

    /// A claimant `c` of `p` (held by `h`) and a fresh partition `q` of its to trade for `p`,
    /// one that `h` claims if there is one.
    fn best_swap(
        &self,
        lists: &[Vec<PartitionId>],
        fresh_held: &[u32],
        h: u32,
        p: PartitionId,
        budget: &mut usize,
    ) -> Option<(u32, PartitionId)> {
        let group = self.group;
        let (topic, _) = group.partition(p);
        let holder = group.member(MemberIdx(h));
        let mut best: Option<(u32, PartitionId, bool)> = None;
        for &c in self.of(p) {
            if fresh_held[c as usize] == 0 || !group.member(MemberIdx(c)).subscribes(topic) {
                continue;
            }
            let before =
                |q: PartitionId| u8::from(self.rack_match(h, p)) + u8::from(self.rack_match(c, q));
            let after =
                |q: PartitionId| u8::from(self.rack_match(h, q)) + u8::from(self.rack_match(c, p));
            if self.mismatch(c, p) {
                continue;
            }
            *budget = budget.saturating_sub(lists[c as usize].len());
            for &q in &lists[c as usize] {
                if !self.fresh(c, q)
                    || !holder.subscribes(group.partition(q).0)
                    || after(q) < before(q)
                    || (self.mismatch(h, q) && !self.mismatch(c, q))
                {
                    continue;
                }
                let h_claims = self.claims(h, q);
                if best.is_none_or(|b| h_claims && !b.2) {
                    best = Some((c, q, h_claims));
                }
                if h_claims {
                    break;
                }
            }
            if best.is_some_and(|b| b.2) {
                break;
            }
        }
        best.map(|(c, q, _)| (c, q))
    }

    /// A claimant to hand `p` over to outright: one holding one partition fewer than the
    /// holder `h`, without widening its class's spread, the valid previous owner first.
    fn direct_claimant(
        &self,
        lists: &[Vec<PartitionId>],
        levels: &mut Option<ClassLoads>,
        h: u32,
        p: PartitionId,
    ) -> Option<u32> {
        let (topic, _) = self.group.partition(p);
        let size = lists[h as usize].len();
        let mut direct = None;
        for &c in self.of(p) {
            if lists[c as usize].len() + 1 != size
                || !self.group.member(MemberIdx(c)).subscribes(topic)
                || self.mismatch(c, p)
                || (self.rack_match(h, p) && !self.rack_match(c, p))
            {
                continue;
            }
            // The classes are found only once some claimant passes the cheaper tests.
            let levels = levels.get_or_insert_with(|| ClassLoads::new(self.group, lists));
            let owner_of_p = self.prep.prev_owner[p.0 as usize] == c;
            if (direct.is_none() || owner_of_p) && levels.keeps_spreads(h, c) {
                direct = Some(c);
                if owner_of_p {
                    break;
                }
            }
        }
        direct
    }
}

/// Member loads per class of identical subscriptions (`spread::classes`), so that handing a
/// partition from one member to another never widens a class's spread (criterion 5).
struct ClassLoads {
    class: Vec<u32>,
    load: Vec<u32>,
    /// Per class: load -> members at it.
    hist: Vec<BTreeMap<u32, u32>>,
}

impl ClassLoads {
    fn new(group: &GroupSpec, lists: &[Vec<PartitionId>]) -> ClassLoads {
        let topics: Vec<&[TopicId]> = group
            .members()
            .iter()
            .map(|m| m.topics.as_slice())
            .collect();
        let class = spread::classes(&topics);
        let load: Vec<u32> = lists.iter().map(|l| l.len() as u32).collect();
        let n = class.iter().max().map_or(0, |c| *c as usize + 1);
        let mut hist = vec![BTreeMap::new(); n];
        for (c, l) in class.iter().zip(&load) {
            *hist[*c as usize].entry(*l).or_insert(0) += 1;
        }
        ClassLoads { class, load, hist }
    }

    fn spread(&self, k: usize) -> u32 {
        match (
            self.hist[k].first_key_value(),
            self.hist[k].last_key_value(),
        ) {
            (Some((lo, _)), Some((hi, _))) => hi - lo,
            _ => 0,
        }
    }

    fn shift(&mut self, m: u32, to: u32) {
        let k = self.class[m as usize] as usize;
        let from = std::mem::replace(&mut self.load[m as usize], to);
        let h = &mut self.hist[k];
        if let Some(n) = h.get_mut(&from) {
            *n -= 1;
            if *n == 0 {
                h.remove(&from);
            }
        }
        *h.entry(to).or_insert(0) += 1;
    }

    /// Whether `h` giving one partition to `c` leaves both classes' spreads no wider.
    fn keeps_spreads(&mut self, h: u32, c: u32) -> bool {
        let (kh, kc) = (
            self.class[h as usize] as usize,
            self.class[c as usize] as usize,
        );
        if kh == kc {
            return true;
        }
        let before = (self.spread(kh), self.spread(kc));
        self.moved(h, c);
        let ok = self.spread(kh) <= before.0 && self.spread(kc) <= before.1;
        self.moved(c, h);
        ok
    }

    /// Records that `h` gave one partition to `c`.
    fn moved(&mut self, h: u32, c: u32) {
        let (lh, lc) = (self.load[h as usize], self.load[c as usize]);
        self.shift(h, lh - 1);
        self.shift(c, lc + 1);
    }
}

/// Replaces `out` by `inn` in a sorted list, keeping it sorted.
fn swap(list: &mut Vec<PartitionId>, out: PartitionId, inn: PartitionId) {
    if let Ok(i) = list.binary_search(&out) {
        list.remove(i);
    }
    let at = list.binary_search(&inn).unwrap_or_else(|i| i);
    list.insert(at, inn);
}
