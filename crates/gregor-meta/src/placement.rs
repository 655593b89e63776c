//! Replica placement for new topics and partitions: Kafka's round-robin assignment
//! (`AdminUtils.assignReplicasToBrokers`). First replicas go round-robin over the brokers from a
//! start index; followers follow at an increasing shift, so the followers of one broker's
//! partitions spread over the other brokers. When every broker has a rack, brokers are first
//! interleaved by rack and followers prefer racks (then brokers) that hold no replica of the
//! partition yet. Deterministic given [`PlacementStart`].
//!
//! Cost: O(partitions x replication factor) without racks; with racks each follower may skip
//! brokers, at most O(brokers) per replica.

use crate::types::BrokerId;
use std::collections::{BTreeMap, BTreeSet};

/// A broker that can receive replicas.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementBroker {
    /// Id.
    pub id: BrokerId,
    /// `broker.rack`.
    pub rack: Option<String>,
}

/// Where the round-robin starts. Kafka draws both at random; the controller derives them from
/// its seeded generator so placement is reproducible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PlacementStart {
    /// Index (in the broker list) of the first partition's first replica.
    pub start_index: usize,
    /// Initial shift of the followers.
    pub replica_shift: usize,
}

/// Why placement is impossible.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlacementError {
    /// More replicas than brokers (or zero).
    #[error("The target replication factor of {replication_factor} cannot be reached because only {brokers} broker(s) are registered.")]
    ReplicationFactor {
        /// Requested.
        replication_factor: usize,
        /// Available.
        brokers: usize,
    },
}

/// Assign `num_partitions` partitions, numbered from `first_partition`, `replication_factor`
/// replicas each, over `brokers` (any order; sorted by id here). Returns one replica list per
/// partition, preferred leader first.
pub fn assign_replicas(
    brokers: &[PlacementBroker],
    num_partitions: usize,
    replication_factor: usize,
    first_partition: usize,
    start: PlacementStart,
) -> Result<Vec<Vec<BrokerId>>, PlacementError> {
    if replication_factor == 0 || replication_factor > brokers.len() {
        return Err(PlacementError::ReplicationFactor {
            replication_factor,
            brokers: brokers.len(),
        });
    }
    let mut sorted = brokers.to_vec();
    sorted.sort_by_key(|b| b.id);
    sorted.dedup_by_key(|b| b.id);
    if sorted.len() < replication_factor {
        return Err(PlacementError::ReplicationFactor {
            replication_factor,
            brokers: sorted.len(),
        });
    }
    let rack_aware = sorted.iter().all(|b| b.rack.is_some());
    if rack_aware {
        Ok(rack_aware_assignment(
            &sorted,
            num_partitions,
            replication_factor,
            first_partition,
            start,
        ))
    } else {
        let ids: Vec<BrokerId> = sorted.iter().map(|b| b.id).collect();
        Ok(plain_assignment(
            &ids,
            num_partitions,
            replication_factor,
            first_partition,
            start,
        ))
    }
}

/// Index of the `nth` follower: one past the first replica plus a shift that never wraps back
/// onto the first replica.
fn follower_index(first: usize, shift: usize, nth: usize, n: usize) -> usize {
    let offset = 1 + (shift + nth) % (n - 1);
    (first + offset) % n
}

fn plain_assignment(
    ids: &[BrokerId],
    num_partitions: usize,
    rf: usize,
    first_partition: usize,
    start: PlacementStart,
) -> Vec<Vec<BrokerId>> {
    let n = ids.len();
    let start_index = start.start_index % n;
    let mut shift = start.replica_shift % n;
    let mut out = Vec::with_capacity(num_partitions);
    for p in first_partition..first_partition + num_partitions {
        // Each full round over the brokers moves the followers one step further, so the same
        // leader does not always get the same followers.
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let first = (p + start_index) % n;
        let mut replicas = Vec::with_capacity(rf);
        replicas.push(ids[first]);
        for j in 0..rf - 1 {
            replicas.push(ids[follower_index(first, shift, j, n)]);
        }
        out.push(replicas);
    }
    out
}

/// Brokers interleaved by rack: racks in name order, brokers within a rack by id, taking one
/// broker per rack in turn (rack1: 0,1,2; rack2: 3,4,5 -> 0,3,1,4,2,5).
pub fn rack_alternated_brokers(brokers: &[PlacementBroker]) -> Vec<BrokerId> {
    let mut by_rack: BTreeMap<&str, Vec<BrokerId>> = BTreeMap::new();
    for b in brokers {
        by_rack
            .entry(b.rack.as_deref().unwrap_or(""))
            .or_default()
            .push(b.id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
    }
    let longest = by_rack.values().map(Vec::len).max().unwrap_or(0);
    let mut out = Vec::with_capacity(brokers.len());
    for i in 0..longest {
        for ids in by_rack.values() {
            if let Some(&id) = ids.get(i) {
                out.push(id);
            }
        }
    }
    out
}

fn rack_aware_assignment(
    brokers: &[PlacementBroker],
    num_partitions: usize,
    rf: usize,
    first_partition: usize,
    start: PlacementStart,
) -> Vec<Vec<BrokerId>> {
    let rack_of: BTreeMap<BrokerId, &str> = brokers
        .iter()
        .map(|b| (b.id, b.rack.as_deref().unwrap_or("")))
        .collect();
    let num_racks = rack_of.values().collect::<BTreeSet<_>>().len();
    let arranged = rack_alternated_brokers(brokers);
    let n = arranged.len();
    let start_index = start.start_index % n;
    let mut shift = start.replica_shift % n;
    let mut out = Vec::with_capacity(num_partitions);
    for p in first_partition..first_partition + num_partitions {
        if p > 0 && p % n == 0 {
            shift += 1;
        }
        let first = (p + start_index) % n;
        let leader = arranged[first];
        let mut replicas = vec![leader];
        let mut racks_used: BTreeSet<&str> = BTreeSet::from([rack_of[&leader]]);
        let mut k = 0;
        for _ in 0..rf - 1 {
            // Walk the arranged list until a broker fits: a rack without a replica while some
            // rack has none, and a broker without a replica (rf <= brokers, so one exists).
            loop {
                let b = arranged[follower_index(first, shift * num_racks, k, n)];
                k += 1;
                let rack = rack_of[&b];
                let rack_ok = !racks_used.contains(rack) || racks_used.len() == num_racks;
                let broker_ok = !replicas.contains(&b);
                if rack_ok && broker_ok {
                    replicas.push(b);
                    racks_used.insert(rack);
                    break;
                }
            }
        }
        out.push(replicas);
    }
    out
}
