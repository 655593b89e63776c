//! The `roundrobin` strategy: all partitions of all subscribed topics, sorted by topic then
//! number, are dealt to the members in Kafka's member order like cards; a member that does not
//! subscribe to a partition's topic is skipped.
//!
//! Complexity: O(S + P log M + M log M). Skipping non-subscribers uses a binary search over the
//! topic's subscribers (by position in member order) instead of stepping member by member, so a
//! topic with few subscribers costs no more than one with many.

use crate::model::{GroupAssignment, GroupSpec, PartitionId};
use crate::{AssignError, Assignor};

pub const NAME: &str = "roundrobin";

/// Kafka's `RoundRobinAssignor`.
#[derive(Debug, Default, Clone, Copy)]
pub struct RoundRobinAssignor;

impl Assignor for RoundRobinAssignor {
    fn name(&self) -> &str {
        NAME
    }

    fn assign(&self, group: &GroupSpec) -> Result<GroupAssignment, AssignError> {
        Ok(assign(group))
    }
}

/// Runs the round-robin strategy.
pub fn assign(group: &GroupSpec) -> GroupAssignment {
    let order = group.sorted_members();
    let m = order.len();
    let mut lists: Vec<Vec<PartitionId>> = vec![Vec::new(); group.members().len()];
    if m == 0 {
        return GroupAssignment::from_lists(lists);
    }
    // Positions (in member order) of each topic's subscribers, ascending.
    let mut subscriber_positions: Vec<Vec<u32>> = vec![Vec::new(); group.topics().len()];
    for (pos, member) in order.iter().enumerate() {
        for t in &group.member(*member).topics {
            subscriber_positions[t.0 as usize].push(pos as u32);
        }
    }
    // The circular iterator's position: the member that would be offered the next partition.
    let mut cursor = 0usize;
    for (t, positions) in subscriber_positions.iter().enumerate() {
        if positions.is_empty() {
            continue;
        }
        let spec = &group.topics()[t];
        let everyone = positions.len() == m;
        for p in spec.base..spec.base + spec.partitions {
            let pos = if everyone {
                cursor
            } else {
                // First subscriber at or after the cursor, wrapping around.
                let i = positions.partition_point(|&x| (x as usize) < cursor);
                positions.get(i).copied().unwrap_or(positions[0]) as usize
            };
            lists[order[pos].0 as usize].push(PartitionId(p));
            cursor = (pos + 1) % m;
        }
    }
    GroupAssignment::from_lists(lists)
}
