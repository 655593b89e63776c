//! The sticky assignment when every member subscribes to the same topics (Kafka's "constrained"
//! builder).
//!
//! With `n` members and `P` partitions every member ends with `minQuota = floor(P / n)` or
//! `maxQuota = ceil(P / n)` partitions, and exactly `P % n` members with `maxQuota`.
//!
//! 1. Each member keeps what it owned (when rack-aware, partitions with no replica on its rack
//!    are dropped if another subscriber's rack has one), in
//!    (partition number, topic) order, up to its quota. The `P % n` max-quota places go to members
//!    that owned at least `maxQuota`: first those that owned exactly `maxQuota` (they then revoke
//!    nothing), then the others in member-id order. Kafka leaves this choice to hash-map order.
//! 2. The rest, sorted by topic and number (and, when rack-aware, stably by how many members
//!    share a rack with them, fewest first), go round-robin to the members still under
//!    `minQuota`: a rack-matching pass first, then a plain one; once all members reach
//!    `minQuota`, the remaining partitions raise members to `maxQuota` in first-come order.
//!
//! 3. When rack-aware: partitions dropped for rack locality (or over quota) that no member on a
//!    replica's rack took go back to their previous owner while it has room (before the plain
//!    pass), or are swapped back afterwards with a partition the owner did not own, when the swap
//!    loses no rack match. Kafka leaves these to the round-robin order; here they never cost a
//!    kept partition that a swap could save.
//!
//! Complexity: O(P log P) for the sorts; the rack pass scans members per partition only until a
//! rack match (O(P * M) in the worst case of partitions whose racks host no unfilled member).

use std::collections::VecDeque;

use crate::model::{GroupSpec, PartitionId};

use super::prepare::{Prepared, NONE};

pub(crate) fn assign(group: &GroupSpec, prep: &Prepared) -> Vec<Vec<PartitionId>> {
    let members = group.members();
    let n = members.len();
    let topics = &members[0].topics;
    let total: u32 = topics.iter().map(|t| group.topic(*t).partitions).sum();
    let q = Quotas {
        min_quota: (total / n as u32) as usize,
        max_quota: total.div_ceil(n as u32) as usize,
        expected_over_min: (total % n as u32) as usize,
    };
    let racks = prep.racks.as_ref();

    // Step 1: owned partitions, up to the quotas.
    let owned = owned_by_number(group, prep, topics);
    let (mut d, taken) = Dealing::keep_owned(prep, owned, &q, group.total_partitions() as usize);

    // Step 2: the rest, in topic-partition order.
    let mut unassigned: Vec<PartitionId> = Vec::with_capacity(total as usize);
    for t in topics {
        for p in group.partitions_of(*t) {
            if !taken[p as usize] {
                unassigned.push(PartitionId(p));
            }
        }
    }
    if let Some(r) = racks {
        unassigned.sort_by_key(|p| r.members_near(p.0));
        unassigned = rack_aware_round_robin(
            &q,
            r,
            unassigned,
            &mut d.assignment,
            &mut d.under_min,
            &mut d.exactly_min,
            &mut d.current_over_min,
        );
        // Partitions dropped for rack locality that no member on a replica's rack took go back
        // to their previous owner while it has room: a place it would fill with some other
        // partition anyway, and (cooperative) one revocation less.
        unassigned = return_to_owners(
            &q,
            prep,
            unassigned,
            &mut d.assignment,
            &mut d.under_min,
            &mut d.exactly_min,
            &mut d.current_over_min,
        );
    }
    d.round_robin(unassigned, q.min_quota);
    if let Some(r) = racks {
        swap_back_to_owners(prep, r, &mut d.assignment);
    }
    d.assignment
}

/// Each member's validly owned partitions (when rack-aware, not those with no replica on its
/// rack), in (partition number, topic) order: a counting sort by partition number of the owned
/// partitions listed in topic order.
fn owned_by_number(
    group: &GroupSpec,
    prep: &Prepared,
    topics: &[crate::model::TopicId],
) -> Vec<Vec<PartitionId>> {
    let racks = prep.racks.as_ref();
    let widest = topics
        .iter()
        .map(|t| group.topic(*t).partitions)
        .max()
        .unwrap_or(0) as usize;
    let mut per_number = vec![0u32; widest + 1];
    let mut kept_owned: Vec<(u32, u32)> = Vec::new();
    for t in topics {
        for p in group.partitions_of(*t) {
            let owner = prep.prev_owner[p as usize];
            if owner == NONE || racks.is_some_and(|r| r.mismatch(owner, p, *t)) {
                continue;
            }
            let num = p - group.topic(*t).base;
            per_number[num as usize + 1] += 1;
            kept_owned.push((p, num));
        }
    }
    for i in 1..per_number.len() {
        per_number[i] += per_number[i - 1];
    }
    let mut by_number = vec![0u32; kept_owned.len()];
    for &(p, num) in &kept_owned {
        let slot = &mut per_number[num as usize];
        by_number[*slot as usize] = p;
        *slot += 1;
    }
    let mut owned: Vec<Vec<PartitionId>> = vec![Vec::new(); prep.id_rank.len()];
    for p in by_number {
        owned[prep.prev_owner[p as usize] as usize].push(PartitionId(p));
    }
    owned
}

/// The assignment being dealt and the members still able to take partitions.
struct Dealing {
    assignment: Vec<Vec<PartitionId>>,
    /// Members under `minQuota`, in member-id order.
    under_min: Vec<u32>,
    /// Members at exactly `minQuota` that may still rise to `maxQuota`.
    exactly_min: VecDeque<u32>,
    current_over_min: usize,
}

impl Dealing {
    /// Each member keeps its `owned` partitions up to its quota; the max-quota places go to
    /// members that owned exactly `maxQuota`, then the others that owned at least that, in
    /// member-id order. Returns the dealing and which partitions are taken.
    fn keep_owned(
        prep: &Prepared,
        owned: Vec<Vec<PartitionId>>,
        q: &Quotas,
        total_partitions: usize,
    ) -> (Dealing, Vec<bool>) {
        let n = owned.len();
        let mut max_candidates: Vec<u32> = (0..n as u32)
            .filter(|m| owned[*m as usize].len() >= q.max_quota)
            .collect();
        max_candidates.sort_by_key(|m| {
            (
                owned[*m as usize].len() != q.max_quota,
                prep.id_rank[*m as usize],
            )
        });
        let mut gets_max = vec![false; n];
        for m in max_candidates.iter().take(q.expected_over_min) {
            gets_max[*m as usize] = true;
        }
        let current_over_min = max_candidates.len().min(q.expected_over_min);
        let mut assignment: Vec<Vec<PartitionId>> = Vec::with_capacity(n);
        let mut taken = vec![false; total_partitions];
        let mut under_min: Vec<u32> = Vec::new();
        let mut exactly_min: Vec<u32> = Vec::new();
        for (m, list) in owned.into_iter().enumerate() {
            let keep = if list.len() < q.min_quota {
                under_min.push(m as u32);
                list.len()
            } else if gets_max[m] {
                q.max_quota
            } else {
                exactly_min.push(m as u32);
                q.min_quota
            };
            let mut kept = Vec::with_capacity(q.max_quota);
            kept.extend_from_slice(&list[..keep]);
            for p in &kept {
                taken[p.0 as usize] = true;
            }
            assignment.push(kept);
        }
        if current_over_min == q.expected_over_min {
            exactly_min.clear();
        }
        under_min.sort_by_key(|m| prep.id_rank[*m as usize]);
        exactly_min.sort_by_key(|m| prep.id_rank[*m as usize]);
        let dealing = Dealing {
            assignment,
            under_min,
            exactly_min: exactly_min.into(),
            current_over_min,
        };
        (dealing, taken)
    }

    /// The plain round-robin: partitions go to the members under `minQuota` in turn; once all
    /// reach it, to members at exactly `minQuota`, first come first served.
    fn round_robin(&mut self, unassigned: Vec<PartitionId>, min_quota: usize) {
        let under_min = &mut self.under_min;
        let exactly_min = &mut self.exactly_min;
        let mut it = 0usize;
        for p in unassigned {
            let m = if it < under_min.len() {
                it += 1;
                under_min[it - 1]
            } else if under_min.is_empty() {
                match exactly_min.pop_front() {
                    Some(m) => m,
                    None => unreachable!("quotas leave room for every partition"),
                }
            } else {
                it = 1;
                under_min[0]
            };
            let list = &mut self.assignment[m as usize];
            list.push(p);
            if list.len() == min_quota && it > 0 && under_min.get(it - 1) == Some(&m) {
                under_min.remove(it - 1);
                it -= 1;
                exactly_min.push_back(m);
            }
        }
        debug_assert!(under_min
            .iter()
            .all(|m| self.assignment[*m as usize].len() == min_quota));
    }
}

/// A previously owned partition that ended with a member on no rack of its replicas, while its
/// previous owner holds a partition it did not own, is swapped back with that partition when the
/// swap loses no rack match (the other member matches the swapped partition, or the owner did
/// not). Loads are unchanged; one more partition stays with its owner per swap.
fn swap_back_to_owners(
    prep: &Prepared,
    racks: &super::prepare::RackInfo,
    assignment: &mut [Vec<PartitionId>],
) {
    let total = prep.prev_owner.len();
    let mut holder = vec![NONE; total];
    let mut pos = vec![0u32; total];
    for (m, list) in assignment.iter().enumerate() {
        for (i, p) in list.iter().enumerate() {
            holder[p.0 as usize] = m as u32;
            pos[p.0 as usize] = i as u32;
        }
    }
    for p in 0..total as u32 {
        let owner = prep.prev_owner[p as usize];
        let x = holder[p as usize];
        if owner == NONE || x == NONE || x == owner || racks.matches(x, p) {
            continue;
        }
        let found = assignment[owner as usize].iter().position(|q| {
            prep.prev_owner[q.0 as usize] != owner
                && (racks.matches(x, q.0) || !racks.matches(owner, q.0))
        });
        if let Some(i) = found {
            let q = assignment[owner as usize][i];
            let j = pos[p as usize] as usize;
            assignment[owner as usize][i] = PartitionId(p);
            assignment[x as usize][j] = q;
            holder[p as usize] = owner;
            pos[p as usize] = i as u32;
            holder[q.0 as usize] = x;
            pos[q.0 as usize] = j as u32;
        }
    }
}

struct Quotas {
    min_quota: usize,
    max_quota: usize,
    expected_over_min: usize,
}

/// Gives partitions to members under `minQuota` on a rack with a replica, cycling through them;
/// when none is under `minQuota`, to a rack-matching member at exactly `minQuota` while max-quota
/// places remain. Returns the partitions left for the plain round-robin.
fn rack_aware_round_robin(
    q: &Quotas,
    racks: &super::prepare::RackInfo,
    unassigned: Vec<PartitionId>,
    assignment: &mut [Vec<PartitionId>],
    under_min: &mut Vec<u32>,
    exactly_min: &mut VecDeque<u32>,
    current_over_min: &mut usize,
) -> Vec<PartitionId> {
    let mut left = Vec::new();
    let mut next = 0usize;
    for p in unassigned {
        let mut chosen = None;
        if let Some(mut idx) =
            next_rack_member(racks, p.0, under_min.iter().copied(), under_min.len(), next)
        {
            let m = under_min[idx];
            let count = assignment[m as usize].len() + 1;
            if count >= q.min_quota {
                under_min.remove(idx);
                if count < q.max_quota && *current_over_min < q.expected_over_min {
                    exactly_min.push_back(m);
                }
            } else {
                idx += 1;
            }
            next = if under_min.is_empty() {
                0
            } else {
                idx % under_min.len()
            };
            chosen = Some(m);
        } else if !exactly_min.is_empty() {
            if let Some(idx) = next_rack_member(
                racks,
                p.0,
                exactly_min.iter().copied(),
                exactly_min.len(),
                0,
            ) {
                let m = exactly_min[idx];
                if assignment[m as usize].len() + 1 == q.max_quota {
                    exactly_min.remove(idx);
                    *current_over_min += 1;
                    if *current_over_min == q.expected_over_min {
                        exactly_min.clear();
                    }
                }
                chosen = Some(m);
            }
        }
        match chosen {
            Some(m) => assignment[m as usize].push(p),
            None => left.push(p),
        }
    }
    left
}

/// Gives each partition whose previous owner is still under `minQuota`, or at exactly
/// `minQuota` while max-quota places remain, back to that owner, with the same bookkeeping as
/// the round-robin passes. Returns the partitions left.
fn return_to_owners(
    q: &Quotas,
    prep: &Prepared,
    unassigned: Vec<PartitionId>,
    assignment: &mut [Vec<PartitionId>],
    under_min: &mut Vec<u32>,
    exactly_min: &mut VecDeque<u32>,
    current_over_min: &mut usize,
) -> Vec<PartitionId> {
    let mut in_exactly = vec![false; assignment.len()];
    for m in exactly_min.iter() {
        in_exactly[*m as usize] = true;
    }
    let mut left = Vec::new();
    for p in unassigned {
        let owner = prep.prev_owner[p.0 as usize];
        if owner == NONE {
            left.push(p);
            continue;
        }
        let m = owner as usize;
        let len = assignment[m].len();
        if len < q.min_quota {
            assignment[m].push(p);
            if len + 1 == q.min_quota {
                if let Some(i) = under_min.iter().position(|x| *x == owner) {
                    under_min.remove(i);
                }
                if len + 1 < q.max_quota && *current_over_min < q.expected_over_min {
                    exactly_min.push_back(owner);
                    in_exactly[m] = true;
                }
            }
        } else if in_exactly[m] && len + 1 == q.max_quota {
            assignment[m].push(p);
            in_exactly[m] = false;
            if let Some(i) = exactly_min.iter().position(|x| *x == owner) {
                exactly_min.remove(i);
            }
            *current_over_min += 1;
            if *current_over_min == q.expected_over_min {
                exactly_min.clear();
                in_exactly.iter_mut().for_each(|x| *x = false);
            }
        } else {
            left.push(p);
        }
    }
    left
}

/// Index of the first member, cycling from `first`, whose rack hosts a replica of `p`.
fn next_rack_member(
    racks: &super::prepare::RackInfo,
    p: u32,
    members: impl Iterator<Item = u32> + Clone,
    len: usize,
    first: usize,
) -> Option<usize> {
    if len == 0 || racks.racks_of(p).is_empty() {
        return None;
    }
    let ordered = members.clone().skip(first).chain(members.take(first));
    ordered
        .enumerate()
        .find(|(_, m)| racks.matches(*m, p))
        .map(|(i, _)| (first + i) % len)
}
