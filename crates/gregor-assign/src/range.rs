//! The `range` strategy: per topic, partitions in numeric order are cut into contiguous ranges,
//! one per subscribed member in Kafka's member order; the first `partitions % members` members get
//! one extra.
//!
//! When members and partition replicas have racks that overlap, and not every partition lives on
//! the same racks, a rack-matching pass runs first, with the same per-topic quotas: topics with the
//! same subscribers and the same partition count are treated as co-partitioned, and partition `i`
//! of all of them goes to the first member whose rack hosts a replica of every one of them. The
//! remaining partitions then go out in ranges as above.
//!
//! Complexity: O(P + S + M log M) without racks, where P is the partition count, S the total
//! number of subscriptions and M the member count; the rack pass adds O(P * r) per topic for r
//! racks per partition, plus, for co-partitioned topics, the scan of candidate members per
//! partition (which stops at the first topic whose rack does not match).

use std::collections::HashMap;

use crate::model::{GroupAssignment, GroupSpec, MemberIdx, PartitionId};
use crate::{AssignError, Assignor};

pub const NAME: &str = "range";

/// Kafka's `RangeAssignor`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RangeAssignor;

impl Assignor for RangeAssignor {
    fn name(&self) -> &str {
        NAME
    }

    fn assign(&self, group: &GroupSpec) -> Result<GroupAssignment, AssignError> {
        Ok(assign(group))
    }
}

struct TopicState<'a> {
    base: u32,
    partitions: u32,
    /// Subscribers in Kafka's member order.
    consumers: Vec<u32>,
    assigned_by_consumer: Vec<u32>,
    per_consumer: u32,
    remaining_with_extra: u32,
    assigned: Vec<bool>,
    /// First partition that may still be unassigned.
    cursor: u32,
    unassigned: u32,
    any_consumer_rack: bool,
    needs_rack_aware: bool,
    racks: Vec<Vec<&'a str>>,
}

impl TopicState<'_> {
    fn max_assignable(&self, pos: usize) -> u32 {
        let cap = self.per_consumer + u32::from(self.remaining_with_extra > 0);
        cap.saturating_sub(self.assigned_by_consumer[pos])
    }

    fn on_assigned(&mut self, pos: usize, count: u32) {
        self.assigned_by_consumer[pos] += count;
        // One decrement per call that leaves the member above the even share, as Kafka does.
        if self.assigned_by_consumer[pos] > self.per_consumer {
            self.remaining_with_extra = self.remaining_with_extra.saturating_sub(1);
        }
        self.unassigned -= count;
    }

    fn racks_match(&self, consumer_rack: Option<&str>, partition: u32) -> bool {
        match consumer_rack {
            None => true,
            Some(r) => self
                .racks
                .get(partition as usize)
                .is_some_and(|racks| racks.contains(&r)),
        }
    }
}

/// Runs the range strategy.
pub fn assign(group: &GroupSpec) -> GroupAssignment {
    let order = group.sorted_members();
    let mut subscribers: Vec<Vec<u32>> = vec![Vec::new(); group.topics().len()];
    for m in &order {
        for t in &group.member(*m).topics {
            subscribers[t.0 as usize].push(m.0);
        }
    }
    let rack_of = |m: u32| group.member(MemberIdx(m)).rack.as_deref();

    let mut states: Vec<TopicState> = Vec::new();
    for (i, consumers) in subscribers.into_iter().enumerate() {
        let spec = &group.topics()[i];
        if spec.partitions == 0 || consumers.is_empty() {
            continue;
        }
        let n = consumers.len() as u32;
        let any_consumer_rack = consumers.iter().any(|c| rack_of(*c).is_some());
        let mut racks: Vec<Vec<&str>> = Vec::new();
        let mut needs_rack_aware = false;
        if any_consumer_rack {
            racks = (0..spec.partitions)
                .map(|p| {
                    let mut r: Vec<&str> = spec.racks_of(p).iter().map(String::as_str).collect();
                    r.sort_unstable();
                    r.dedup();
                    r
                })
                .collect();
            let mut all: Vec<&str> = racks.iter().flatten().copied().collect();
            all.sort_unstable();
            all.dedup();
            let overlap = consumers
                .iter()
                .filter_map(|c| rack_of(*c))
                .any(|r| all.binary_search(&r).is_ok());
            needs_rack_aware = overlap && !racks.iter().all(|r| *r == all);
        }
        states.push(TopicState {
            base: spec.base,
            partitions: spec.partitions,
            assigned_by_consumer: vec![0; consumers.len()],
            per_consumer: spec.partitions / n,
            remaining_with_extra: spec.partitions % n,
            consumers,
            assigned: vec![false; spec.partitions as usize],
            cursor: 0,
            unassigned: spec.partitions,
            any_consumer_rack,
            needs_rack_aware,
            racks,
        });
    }

    let mut lists: Vec<Vec<PartitionId>> = vec![Vec::new(); group.members().len()];
    if states.iter().any(|s| s.needs_rack_aware) {
        assign_with_rack_matching(group, &mut states, &mut lists);
    }
    for s in &mut states {
        assign_ranges_unrestricted(s, &mut lists);
    }
    GroupAssignment::from_lists(lists)
}

fn give(s: &mut TopicState, pos: usize, partition: u32, lists: &mut [Vec<PartitionId>]) {
    debug_assert!(!s.assigned[partition as usize]);
    s.assigned[partition as usize] = true;
    lists[s.consumers[pos] as usize].push(PartitionId(s.base + partition));
}

/// The final pass: every member, in order, takes the first unassigned partitions up to its quota.
fn assign_ranges_unrestricted(s: &mut TopicState, lists: &mut [Vec<PartitionId>]) {
    for pos in 0..s.consumers.len() {
        if s.unassigned == 0 {
            break;
        }
        let mut take = s.max_assignable(pos);
        if take == 0 {
            continue;
        }
        let mut given = 0;
        while take > 0 && s.cursor < s.partitions {
            let p = s.cursor;
            s.cursor += 1;
            if s.assigned[p as usize] {
                continue;
            }
            give(s, pos, p, lists);
            take -= 1;
            given += 1;
        }
        if given > 0 {
            s.on_assigned(pos, given);
        }
    }
}

/// Rack pass for a topic that is not co-partitioned with another: each member in order takes the
/// first unassigned partitions with a replica on its rack, up to its quota.
fn assign_ranges_rack_matched(
    group: &GroupSpec,
    s: &mut TopicState,
    lists: &mut [Vec<PartitionId>],
) {
    // Per rack, the partitions with a replica there, in order, with a cursor each.
    let mut by_rack: HashMap<&str, (Vec<u32>, usize)> = HashMap::new();
    for (p, racks) in s.racks.iter().enumerate() {
        for r in racks {
            by_rack.entry(r).or_default().0.push(p as u32);
        }
    }
    let mut any_cursor = 0u32;
    for pos in 0..s.consumers.len() {
        if s.unassigned == 0 {
            break;
        }
        let mut take = s.max_assignable(pos);
        if take == 0 {
            continue;
        }
        let mut chosen = Vec::new();
        match group.member(MemberIdx(s.consumers[pos])).rack.as_deref() {
            None => {
                while take > 0 && any_cursor < s.partitions {
                    if !s.assigned[any_cursor as usize] {
                        chosen.push(any_cursor);
                        take -= 1;
                    }
                    any_cursor += 1;
                }
            }
            Some(rack) => {
                if let Some((list, cursor)) = by_rack.get_mut(rack) {
                    while take > 0 && *cursor < list.len() {
                        let p = list[*cursor];
                        *cursor += 1;
                        if !s.assigned[p as usize] {
                            chosen.push(p);
                            take -= 1;
                        }
                    }
                }
            }
        }
        if chosen.is_empty() {
            continue;
        }
        let count = chosen.len() as u32;
        for p in chosen {
            give(s, pos, p, lists);
        }
        s.on_assigned(pos, count);
    }
}

/// Subscribers (positions in member order) and partition count of a co-partitioned group.
type GroupKey<'a> = (&'a [u32], u32);

fn assign_with_rack_matching(
    group: &GroupSpec,
    states: &mut [TopicState],
    lists: &mut [Vec<PartitionId>],
) {
    // Topics with the same subscribers (and so the same member racks), then the same partition
    // count, are assigned together. Topics whose subscribers have no racks key on 0 partitions,
    // as they carry no rack information.
    let mut groups: HashMap<GroupKey, Vec<usize>> = HashMap::new();
    let keys: Vec<(Vec<u32>, u32)> = states
        .iter()
        .map(|s| {
            let n = if s.any_consumer_rack { s.partitions } else { 0 };
            (s.consumers.clone(), n)
        })
        .collect();
    for (i, (consumers, n)) in keys.iter().enumerate() {
        groups
            .entry((consumers.as_slice(), *n))
            .or_default()
            .push(i);
    }
    // Group order does not change the result (every topic is in exactly one group and quotas are
    // per topic), but keep it deterministic anyway.
    let mut groups: Vec<(GroupKey, Vec<usize>)> = groups.into_iter().collect();
    groups.sort_by_key(|(_, members)| members[0]);
    for ((_, num_partitions), members) in groups {
        if members.len() > 1 {
            assign_co_partitioned(group, states, &members, num_partitions, lists);
        } else {
            let s = &mut states[members[0]];
            if s.needs_rack_aware {
                assign_ranges_rack_matched(group, s, lists);
            }
        }
    }
}

fn assign_co_partitioned(
    group: &GroupSpec,
    states: &mut [TopicState],
    topics: &[usize],
    num_partitions: u32,
    lists: &mut [Vec<PartitionId>],
) {
    let consumers = states[topics[0]].consumers.clone();
    let mut remaining: Vec<usize> = (0..consumers.len()).collect();
    for p in 0..num_partitions {
        let found = remaining.iter().position(|&pos| {
            let rack = group.member(MemberIdx(consumers[pos])).rack.as_deref();
            topics.iter().all(|&t| {
                let s = &states[t];
                s.racks_match(rack, p) && s.max_assignable(pos) > 0
            })
        });
        let Some(idx) = found else { continue };
        let pos = remaining[idx];
        for &t in topics {
            let s = &mut states[t];
            give(s, pos, p, lists);
            s.on_assigned(pos, 1);
        }
        if topics.iter().all(|&t| states[t].max_assignable(pos) == 0) {
            remaining.remove(idx);
            if remaining.is_empty() {
                break;
            }
        }
    }
}
