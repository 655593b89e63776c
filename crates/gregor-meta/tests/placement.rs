//! Replica placement: Kafka's documented examples and balance properties.

use gregor_meta::placement::*;
use gregor_meta::BrokerId;
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};

fn brokers(ids: &[BrokerId]) -> Vec<PlacementBroker> {
    ids.iter()
        .map(|&id| PlacementBroker { id, rack: None })
        .collect()
}

fn racked(pairs: &[(BrokerId, &str)]) -> Vec<PlacementBroker> {
    pairs
        .iter()
        .map(|&(id, r)| PlacementBroker {
            id,
            rack: Some(r.to_string()),
        })
        .collect()
}

const ZERO: PlacementStart = PlacementStart {
    start_index: 0,
    replica_shift: 0,
};

#[test]
fn kafka_rack_unaware_example() {
    // AdminUtils' table: 5 brokers, 10 partitions, 3 replicas, start 0.
    let a = assign_replicas(&brokers(&[0, 1, 2, 3, 4]), 10, 3, 0, ZERO).unwrap();
    assert_eq!(a[0], vec![0, 1, 2]);
    assert_eq!(a[4], vec![4, 0, 1]);
    assert_eq!(a[5], vec![0, 2, 3]);
    assert_eq!(a[9], vec![4, 1, 2]);
}

#[test]
fn kafka_rack_aware_example() {
    // 0 -> rack1, 1 -> rack3, 2 -> rack3, 3 -> rack2, 4 -> rack2, 5 -> rack1
    let b = racked(&[
        (0, "rack1"),
        (1, "rack3"),
        (2, "rack3"),
        (3, "rack2"),
        (4, "rack2"),
        (5, "rack1"),
    ]);
    assert_eq!(rack_alternated_brokers(&b), vec![0, 3, 1, 5, 4, 2]);
    let a = assign_replicas(&b, 7, 3, 0, ZERO).unwrap();
    assert_eq!(
        a,
        vec![
            vec![0, 3, 1],
            vec![3, 1, 5],
            vec![1, 5, 4],
            vec![5, 4, 2],
            vec![4, 2, 0],
            vec![2, 0, 3],
            vec![0, 4, 2], // the second round shifts the followers
        ]
    );
}

#[test]
fn start_index_and_first_partition_shift_the_layout() {
    let b = brokers(&[0, 1, 2]);
    let a = assign_replicas(
        &b,
        3,
        1,
        0,
        PlacementStart {
            start_index: 1,
            replica_shift: 0,
        },
    )
    .unwrap();
    assert_eq!(a, vec![vec![1], vec![2], vec![0]]);
    // CreatePartitions continues the round-robin from the first new index.
    let a = assign_replicas(&b, 2, 1, 3, ZERO).unwrap();
    assert_eq!(a, vec![vec![0], vec![1]]);
}

#[test]
fn impossible_replication_factor() {
    let e = assign_replicas(&brokers(&[0, 1]), 1, 3, 0, ZERO).unwrap_err();
    assert_eq!(e.to_string(), "The target replication factor of 3 cannot be reached because only 2 broker(s) are registered.");
    assert!(assign_replicas(&brokers(&[0]), 1, 0, 0, ZERO).is_err());
    assert!(assign_replicas(&[], 1, 1, 0, ZERO).is_err());
}

#[test]
fn mixed_rack_information_falls_back_to_rack_unaware() {
    let mut b = racked(&[(0, "a"), (1, "a")]);
    b.push(PlacementBroker { id: 2, rack: None });
    let a = assign_replicas(&b, 3, 2, 0, ZERO).unwrap();
    assert_eq!(
        a,
        assign_replicas(&brokers(&[0, 1, 2]), 3, 2, 0, ZERO).unwrap()
    );
}

fn counts(a: &[Vec<BrokerId>], only_leaders: bool) -> BTreeMap<BrokerId, usize> {
    let mut m = BTreeMap::new();
    for r in a {
        let take = if only_leaders { 1 } else { r.len() };
        for &b in &r[..take] {
            *m.entry(b).or_default() += 1;
        }
    }
    m
}

proptest! {
    #[test]
    fn placement_is_valid_and_balanced(
        n in 1usize..9,
        partitions in 1usize..60,
        rf_seed in 0usize..9,
        start in 0usize..20,
        shift in 0usize..20,
        racks in 0usize..4,
    ) {
        let rf = 1 + rf_seed % n;
        let b: Vec<PlacementBroker> = (0..n)
            .map(|i| PlacementBroker {
                id: (i * 3) as BrokerId,
                rack: (racks > 0).then(|| format!("r{}", i % racks)),
            })
            .collect();
        let a = assign_replicas(&b, partitions, rf, 0, PlacementStart { start_index: start, replica_shift: shift }).unwrap();
        prop_assert_eq!(a.len(), partitions);
        for r in &a {
            prop_assert_eq!(r.len(), rf);
            prop_assert_eq!(r.iter().collect::<BTreeSet<_>>().len(), rf, "no duplicate replica");
        }
        // Leaders are round-robin: counts differ by at most one.
        let leaders = counts(&a, true);
        let (lmin, lmax) = (leaders.values().min().copied().unwrap_or(0), leaders.values().max().copied().unwrap_or(0));
        let lmin = if leaders.len() < n { 0 } else { lmin };
        prop_assert!(lmax - lmin <= 1, "leaders {:?}", leaders);
        // Full rounds give every broker the same number of replicas (rack-unaware).
        if racks == 0 && partitions % n == 0 {
            let all = counts(&a, false);
            prop_assert!(all.values().all(|&c| c == rf * partitions / n), "replicas {:?}", all);
        }
        // With racks: as many distinct racks per partition as possible.
        if racks > 0 {
            let num_racks = racks.min(n);
            for r in &a {
                let used: BTreeSet<_> = r.iter().map(|&id| (id as usize / 3) % racks).collect();
                prop_assert_eq!(used.len(), rf.min(num_racks), "racks spread for {:?}", r);
            }
        }
    }

    #[test]
    fn placement_is_deterministic(n in 1usize..8, p in 1usize..30, start in 0usize..10) {
        let b = brokers(&(0..n as BrokerId).collect::<Vec<_>>());
        let s = PlacementStart { start_index: start, replica_shift: start };
        prop_assert_eq!(assign_replicas(&b, p, 1, 0, s), assign_replicas(&b, p, 1, 0, s));
    }
}
