//! The `load` assignor on a consumer group: chosen by the members, fed measured load, reviewed
//! when the group is settled; it moves hot partitions apart in a new epoch with each move
//! explained, and leaves a balanced group alone.

use std::collections::BTreeMap;

use super::*;
use crate::consumer::heartbeat::{heartbeat, HeartbeatRequest};
use crate::consumer::model::TopicMetadata;

const T: u128 = 7;

/// One topic `t` of six partitions, with measured loads by partition.
struct Loaded(BTreeMap<String, TopicMetadata>, BTreeMap<i32, f64>);

impl Loaded {
    fn new(loads: &[(i32, f64)]) -> Loaded {
        let meta = TopicMetadata {
            id: T,
            name: "t".into(),
            partitions: 6,
            replica_racks: Vec::new(),
        };
        Loaded(
            BTreeMap::from([("t".to_string(), meta)]),
            loads.iter().copied().collect(),
        )
    }
}

impl TopicsView for Loaded {
    fn topic(&self, name: &str) -> Option<TopicMetadata> {
        self.0.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn version(&self) -> u64 {
        1
    }
    fn partition_load(&self, topic: &str, partition: i32) -> Option<f64> {
        (topic == "t").then(|| self.1.get(&partition).copied())?
    }
}

fn cfg() -> ConsumerGroupConfig {
    ConsumerGroupConfig {
        assignors: vec!["uniform".into(), "range".into(), "load".into()],
        ..ConsumerGroupConfig::default()
    }
}

fn request(member: &str, epoch: i32, owned: Assignment, assignor: &str) -> HeartbeatRequest {
    HeartbeatRequest {
        version: 1,
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        server_assignor: Some(assignor.into()),
        owned: Some(owned),
        ..HeartbeatRequest::default()
    }
}

/// Heartbeats every member, each reporting what it was last given, until the group is stable.
fn settle(g: &mut ConsumerGroup, topics: &Loaded, assignor: &str, now_ms: i64) {
    for _ in 0..10 {
        if g.state() == ConsumerGroupState::Stable {
            return;
        }
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for id in ids {
            let m = &g.members[&id];
            let req = request(&id, m.member_epoch, m.assigned.clone(), assignor);
            heartbeat(g, &cfg(), topics, &req, now_ms, || unreachable!()).unwrap();
        }
    }
    panic!("the group did not settle: {:?}", g.state());
}

/// Members `a` and `b` asking for `assignor`, settled with no load measured.
fn group_of_two(assignor: &str) -> ConsumerGroup {
    let mut g = ConsumerGroup::new("g");
    let topics = Loaded::new(&[]);
    for id in ["a", "b"] {
        let req = request(id, 0, Assignment::new(), assignor);
        heartbeat(&mut g, &cfg(), &topics, &req, 0, || unreachable!()).unwrap();
    }
    settle(&mut g, &topics, assignor, 0);
    g
}

fn partitions_of(g: &ConsumerGroup, member: &str) -> Vec<i32> {
    let a = g.target.get(member).cloned().unwrap_or_default();
    a.get(&T).into_iter().flatten().copied().collect()
}

#[test]
fn an_even_load_leaves_a_settled_group_as_it_is() {
    let mut g = group_of_two("load");
    assert_eq!(partitions_of(&g, "a").len(), 3);
    let epoch = g.group_epoch;
    let even = Loaded::new(&[
        (0, 10.0),
        (1, 10.0),
        (2, 10.0),
        (3, 10.0),
        (4, 10.0),
        (5, 10.0),
    ]);
    assert_eq!(
        review_load(&mut g, &cfg(), &even, 1),
        Err(Skipped::Balanced)
    );
    assert_eq!(g.group_epoch, epoch);
}

#[test]
fn hot_partitions_on_one_member_are_split_in_a_new_epoch_that_explains_its_moves() {
    let mut g = group_of_two("load");
    let epoch = g.group_epoch;
    // Both hot partitions are a's.
    let a = partitions_of(&g, "a");
    let hot: Vec<(i32, f64)> = (0..6)
        .map(|p| (p, if a[..2].contains(&p) { 1000.0 } else { 1.0 }))
        .collect();
    let topics = Loaded::new(&hot);
    assert_eq!(review_load(&mut g, &cfg(), &topics, 5), Ok(()));
    assert_eq!(g.group_epoch, epoch + 1);
    assert_eq!(g.target_epoch, epoch + 1);
    let on = |m: &str| {
        partitions_of(&g, m)
            .iter()
            .filter(|p| a[..2].contains(p))
            .count()
    };
    assert_eq!((on("a"), on("b")), (1, 1), "one hot partition each");
    let record = g.epochs.recent.back().unwrap();
    assert_eq!(record.cause, EpochCause::of_group(CauseKind::LoadShifted));
    assert_eq!(record.assignor, Some("load"));
    assert!(!record.moves.is_empty());
    assert!(
        record.moves.iter().any(|m| m.contains("balance")),
        "{:?}",
        record.moves
    );
    // The members reconcile; another review moves nothing more.
    settle(&mut g, &topics, "load", 6);
    assert_eq!(
        review_load(&mut g, &cfg(), &topics, 7),
        Err(Skipped::Balanced)
    );
    assert_eq!(g.group_epoch, epoch + 1);
}

#[test]
fn only_settled_groups_on_the_load_assignor_are_reviewed() {
    let hot = Loaded::new(&[(0, 1000.0), (1, 1000.0), (2, 1000.0)]);
    let mut uniform = group_of_two("uniform");
    assert_eq!(
        review_load(&mut uniform, &cfg(), &hot, 1),
        Err(Skipped::OtherAssignor)
    );
    let mut g = group_of_two("load");
    // c joins: a new target, not yet reconciled.
    let req = request("c", 0, Assignment::new(), "load");
    heartbeat(&mut g, &cfg(), &hot, &req, 1, || unreachable!()).unwrap();
    assert_ne!(g.state(), ConsumerGroupState::Stable);
    assert_eq!(
        review_load(&mut g, &cfg(), &hot, 2),
        Err(Skipped::NotStable)
    );
}

#[test]
fn a_join_under_the_load_assignor_places_by_measured_load() {
    // Partitions 0 and 1 carry nearly everything: two members get one each.
    let hot = Loaded::new(&[
        (0, 1000.0),
        (1, 1000.0),
        (2, 1.0),
        (3, 1.0),
        (4, 1.0),
        (5, 1.0),
    ]);
    let mut g = ConsumerGroup::new("g");
    for id in ["a", "b"] {
        let req = request(id, 0, Assignment::new(), "load");
        heartbeat(&mut g, &cfg(), &hot, &req, 0, || unreachable!()).unwrap();
    }
    settle(&mut g, &hot, "load", 0);
    let has = |m: &str, p: i32| partitions_of(&g, m).contains(&p);
    assert!(
        has("a", 0) != has("a", 1),
        "a: {:?}",
        partitions_of(&g, "a")
    );
    assert!(
        has("b", 0) != has("b", 1),
        "b: {:?}",
        partitions_of(&g, "b")
    );
}
