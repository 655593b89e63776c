//! The epoch history: bounded and ordered, fed by heartbeats and removals with their `now_ms`.

use std::collections::BTreeMap;

use super::*;
use crate::consumer::heartbeat::{heartbeat, remove_member, ConsumerGroupConfig, TopicsView};
use crate::consumer::model::{ConsumerGroup, TopicMetadata};

const T: u128 = 7;

struct Topics(BTreeMap<String, TopicMetadata>);

impl Topics {
    fn with(partitions: i32) -> Topics {
        let meta = TopicMetadata {
            id: T,
            name: "t".into(),
            partitions,
            replica_racks: Vec::new(),
        };
        Topics(BTreeMap::from([("t".to_string(), meta)]))
    }
}

impl TopicsView for Topics {
    fn topic(&self, name: &str) -> Option<TopicMetadata> {
        self.0.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn version(&self) -> u64 {
        self.0["t"].partitions as u64
    }
}

type Request = crate::consumer::heartbeat::HeartbeatRequest;

fn request(member: &str, epoch: i32, owned: Assignment) -> Request {
    Request {
        version: 1,
        group_id: "g".into(),
        member_id: member.into(),
        client_id: format!("client-{member}"),
        member_epoch: epoch,
        rebalance_timeout_ms: if epoch == 0 { 30_000 } else { -1 },
        subscribed_topic_names: (epoch == 0).then(|| vec!["t".into()]),
        owned: Some(owned),
        ..Request::default()
    }
}

/// One heartbeat at `now_ms`; returns the member's epoch and what it may own now.
fn beat(g: &mut ConsumerGroup, topics: &Topics, req: Request, now_ms: i64) -> (i32, Assignment) {
    let cfg = ConsumerGroupConfig::default();
    let out = heartbeat(g, &cfg, topics, &req, now_ms, String::new).expect("heartbeat");
    let id = &out.reply.member_id;
    let owned = g.members.get(id).map(|m| m.assigned.clone());
    let owned = owned.unwrap_or_default();
    (out.reply.member_epoch, owned)
}

fn progress(g: &ConsumerGroup, epoch: i32, member: &str) -> Progress {
    let r = g
        .epochs
        .recent
        .iter()
        .find(|r| r.epoch == epoch)
        .expect("epoch kept");
    r.members[member].progress
}

#[test]
fn the_history_keeps_the_last_epochs_in_order() {
    let mut h = EpochHistory::default();
    for epoch in 1..=(RECENT_EPOCHS as i32 + 7) {
        let cause = EpochCause::of_member(CauseKind::MemberJoined, "m", "c");
        h.bump(epoch, cause, i64::from(epoch) * 10);
    }
    assert_eq!(h.recent.len(), RECENT_EPOCHS);
    let epochs: Vec<i32> = h.recent.iter().map(|r| r.epoch).collect();
    let expected: Vec<i32> = (8..=(RECENT_EPOCHS as i32 + 7)).collect();
    assert_eq!(epochs, expected);
    assert!(h.recent.iter().all(|r| r.at_ms == i64::from(r.epoch) * 10));
}

#[test]
fn a_large_target_is_kept_bounded_and_counted() {
    let mut h = EpochHistory::default();
    h.bump(1, EpochCause::of_group(CauseKind::MetadataChanged), 5);
    let ids: Vec<String> = (0..EPOCH_MEMBERS + 3).map(|i| format!("m{i:03}")).collect();
    let big: Assignment = BTreeMap::from([(T, (0..200).collect())]);
    let target = ids.iter().map(|id| (id, "c", &big));
    h.target_computed(1, target, 9);
    let r = &h.recent[0];
    assert_eq!(
        (r.target_ms, r.members.len(), r.members_omitted),
        (Some(9), EPOCH_MEMBERS, 3)
    );
    let m = &r.members["m000"];
    assert_eq!((m.partitions.len(), m.count), (TARGET_PARTITIONS, 200));
}

#[test]
fn each_member_is_marked_reconciled_when_it_holds_the_target_at_its_epoch() {
    let topics = Topics::with(4);
    let mut g = ConsumerGroup::new("g");
    let (epoch, a_owned) = beat(&mut g, &topics, request("a", 0, Assignment::new()), 100);
    assert_eq!(epoch, 1);
    let first = &g.epochs.recent[0];
    assert_eq!(
        first.cause,
        EpochCause::of_member(CauseKind::MemberJoined, "a", "client-a")
    );
    assert_eq!((first.at_ms, first.target_ms), (100, Some(100)));
    assert_eq!(progress(&g, 1, "a"), Progress::Reconciled { at_ms: 100 });

    // b joins: epoch 2's target splits the partitions; b waits for a to release two.
    assert_eq!(
        beat(&mut g, &topics, request("b", 0, Assignment::new()), 200).0,
        2
    );
    let second = &g.epochs.recent[1];
    assert_eq!((second.epoch, second.at_ms), (2, 200));
    assert_eq!(second.members.keys().collect::<Vec<_>>(), ["a", "b"]);
    assert_eq!(second.members["b"].client_id, "client-b");
    assert_eq!(second.members["a"].count + second.members["b"].count, 4);
    assert_eq!(progress(&g, 2, "a"), Progress::Reconciling);
    assert_eq!(progress(&g, 2, "b"), Progress::Reconciling);
    // a is told to revoke (still epoch 1), then reports it has: it reaches epoch 2 at 400.
    let (_, kept) = beat(&mut g, &topics, request("a", 1, a_owned), 300);
    assert_eq!(progress(&g, 2, "a"), Progress::Reconciling);
    assert_eq!(beat(&mut g, &topics, request("a", 1, kept), 400).0, 2);
    assert_eq!(progress(&g, 2, "a"), Progress::Reconciled { at_ms: 400 });
    // b takes the released partitions at 500.
    let (_, b_owned) = beat(&mut g, &topics, request("b", 2, Assignment::new()), 500);
    assert_eq!(b_owned.values().map(|ps| ps.len()).sum::<usize>(), 2);
    assert_eq!(progress(&g, 2, "b"), Progress::Reconciled { at_ms: 500 });
    // Epoch 1's record is untouched by the later steps.
    assert_eq!(progress(&g, 1, "a"), Progress::Reconciled { at_ms: 100 });
}

#[test]
fn a_fenced_member_shows_as_fenced_and_starts_the_next_epoch() {
    let topics = Topics::with(4);
    let mut g = ConsumerGroup::new("g");
    beat(&mut g, &topics, request("a", 0, Assignment::new()), 100);
    beat(&mut g, &topics, request("b", 0, Assignment::new()), 200);
    // a never revokes: its revocation deadline passes and the coordinator fences it.
    assert!(remove_member(&mut g, "a", Departure::Fenced, 900).is_some());
    assert_eq!(progress(&g, 2, "a"), Progress::Fenced { at_ms: 900 });
    let third = g.epochs.recent.back().expect("epoch 3");
    assert_eq!((third.epoch, third.at_ms, third.target_ms), (3, 900, None));
    assert_eq!(
        third.cause,
        EpochCause::of_member(CauseKind::MemberFenced, "a", "client-a")
    );
    // b's next heartbeat computes epoch 3's target: b's epoch-2 progress is overtaken by it, and
    // b, alone, takes all four partitions at once.
    let (epoch, b_owned) = beat(&mut g, &topics, request("b", 2, Assignment::new()), 1000);
    assert_eq!(
        (epoch, b_owned.values().map(|ps| ps.len()).sum::<usize>()),
        (3, 4)
    );
    assert_eq!(progress(&g, 2, "b"), Progress::Superseded { at_ms: 1000 });
    assert_eq!(progress(&g, 3, "b"), Progress::Reconciled { at_ms: 1000 });
    assert_eq!(g.epochs.recent.back().and_then(|r| r.target_ms), Some(1000));
}

#[test]
fn a_member_leaving_and_a_new_partition_count_are_causes() {
    let topics = Topics::with(2);
    let mut g = ConsumerGroup::new("g");
    beat(&mut g, &topics, request("a", 0, Assignment::new()), 10);
    beat(&mut g, &topics, request("b", 0, Assignment::new()), 20);
    beat(&mut g, &topics, request("b", -1, Assignment::new()), 30);
    let left = g.epochs.recent.back().expect("epoch 3");
    assert_eq!(
        left.cause,
        EpochCause::of_member(CauseKind::MemberLeft, "b", "client-b")
    );
    assert_eq!(progress(&g, 2, "b"), Progress::Left { at_ms: 30 });
    let more = Topics::with(3);
    let (epoch, _) = beat(&mut g, &more, request("a", 1, Assignment::new()), 40);
    let last = g.epochs.recent.back().expect("epoch 4");
    assert_eq!((epoch, last.epoch), (4, 4));
    assert_eq!(last.cause, EpochCause::of_group(CauseKind::MetadataChanged));
    let epochs: Vec<i32> = g.epochs.recent.iter().map(|r| r.epoch).collect();
    assert_eq!(epochs, [1, 2, 3, 4]);
}
