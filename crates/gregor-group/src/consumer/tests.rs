//! KIP-848 group behaviour: joins, reconciliation without double ownership, fencing, static
//! members, leaving, and a property test driving random members.

use std::collections::{BTreeMap, BTreeSet};

use proptest::prelude::*;

use super::heartbeat::{
    heartbeat, remove_member, ConsumerGroupConfig, HeartbeatError, HeartbeatRequest,
    RevocationTimer, TopicsView,
};
use super::model::{
    count, Assignment, ConsumerGroup, ConsumerGroupState, Departure, MemberState, TopicMetadata,
};

const T: u128 = 7;

struct Topics(BTreeMap<String, TopicMetadata>);

impl Topics {
    fn new(list: &[(&str, u128, i32)]) -> Topics {
        Topics(
            list.iter()
                .map(|(n, id, p)| {
                    let meta = TopicMetadata {
                        id: *id,
                        name: n.to_string(),
                        partitions: *p,
                        replica_racks: Vec::new(),
                    };
                    (n.to_string(), meta)
                })
                .collect(),
        )
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
        super::model::metadata_hash(&self.0) as u64
    }
}

fn join(member: &str) -> HeartbeatRequest {
    HeartbeatRequest {
        version: 1,
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: 0,
        rebalance_timeout_ms: 30_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Assignment::new()),
        ..HeartbeatRequest::default()
    }
}

fn beat(member: &str, epoch: i32, owned: Option<Assignment>) -> HeartbeatRequest {
    HeartbeatRequest {
        version: 1,
        group_id: "g".into(),
        member_id: member.into(),
        member_epoch: epoch,
        rebalance_timeout_ms: -1,
        owned,
        ..HeartbeatRequest::default()
    }
}

fn parts(a: &Assignment) -> BTreeSet<i32> {
    a.get(&T).cloned().unwrap_or_default()
}

fn hb(
    g: &mut ConsumerGroup,
    topics: &Topics,
    req: HeartbeatRequest,
) -> super::heartbeat::HeartbeatOutcome {
    heartbeat(g, &ConsumerGroupConfig::default(), topics, &req, 0, || {
        "gen".into()
    })
    .unwrap()
}

#[test]
fn a_first_member_gets_every_partition_at_epoch_one() {
    let topics = Topics::new(&[("t", T, 4)]);
    let mut g = ConsumerGroup::new("g");
    let out = hb(&mut g, &topics, join("a"));
    assert_eq!(out.reply.member_epoch, 1);
    assert_eq!(
        parts(out.reply.assignment.as_ref().unwrap()),
        (0..4).collect()
    );
    assert_eq!(g.state(), ConsumerGroupState::Stable);
}

#[test]
fn a_partition_moves_only_after_its_previous_holder_revoked_it() {
    let topics = Topics::new(&[("t", T, 4)]);
    let mut g = ConsumerGroup::new("g");
    let a = hb(&mut g, &topics, join("a")).reply;
    let a_owned = a.assignment.unwrap();
    // b joins: the new target splits the partitions, but a still holds them all.
    let b = hb(&mut g, &topics, join("b")).reply;
    assert_eq!(b.member_epoch, 2);
    assert_eq!(b.assignment, Some(Assignment::new()));
    assert_eq!(g.members["b"].state, MemberState::UnreleasedPartitions);
    // While it waits, b heartbeats 20 times as often (5000 ms / 20), to take its partitions
    // soon after a releases them.
    assert_eq!(b.heartbeat_interval_ms, 250);
    // a is told to revoke two partitions and keeps epoch 1 meanwhile.
    let out = hb(&mut g, &topics, beat("a", 1, Some(a_owned.clone())));
    assert_eq!(out.reply.member_epoch, 1);
    assert!(matches!(
        out.revocation,
        RevocationTimer::Start { at_ms: 30_000 }
    ));
    let kept = out.reply.assignment.unwrap();
    assert_eq!(parts(&kept).len(), 2);
    assert_eq!(g.members["a"].state, MemberState::UnrevokedPartitions);
    // b asks again: still nothing, a has not let go.
    assert_eq!(
        hb(&mut g, &topics, beat("b", 2, Some(Assignment::new())))
            .reply
            .assignment,
        None
    );
    // a reports it owns only what it kept: it moves to epoch 2, and b gets the other two.
    let out = hb(&mut g, &topics, beat("a", 1, Some(kept.clone())));
    assert_eq!(
        (out.reply.member_epoch, out.revocation),
        (2, RevocationTimer::Cancel)
    );
    let b = hb(&mut g, &topics, beat("b", 2, Some(Assignment::new()))).reply;
    let got = parts(b.assignment.as_ref().unwrap());
    assert_eq!(got.len(), 2);
    assert_eq!(
        b.heartbeat_interval_ms, 5000,
        "back to the group's interval"
    );
    assert!(got.is_disjoint(&parts(&kept)));
    assert_eq!(g.state(), ConsumerGroupState::Stable);
}

#[test]
fn stale_and_future_epochs_are_fenced_but_a_lost_answer_is_tolerated() {
    let topics = Topics::new(&[("t", T, 2)]);
    let mut g = ConsumerGroup::new("g");
    let owned = hb(&mut g, &topics, join("a")).reply.assignment.unwrap();
    hb(&mut g, &topics, join("b"));
    let kept = hb(&mut g, &topics, beat("a", 1, Some(owned)))
        .reply
        .assignment
        .unwrap();
    assert_eq!(
        hb(&mut g, &topics, beat("a", 1, Some(kept.clone())))
            .reply
            .member_epoch,
        2
    );
    let cfg = ConsumerGroupConfig::default();
    let err = heartbeat(&mut g, &cfg, &topics, &beat("a", 5, None), 0, String::new).unwrap_err();
    assert_eq!(err.code(), 110);
    // Epoch 1 is a's previous epoch: the answer that moved it to 2 may have been lost.
    let ok = heartbeat(
        &mut g,
        &cfg,
        &topics,
        &beat("a", 1, Some(kept)),
        0,
        String::new,
    );
    assert_eq!(ok.unwrap().reply.member_epoch, 2);
    let err = heartbeat(&mut g, &cfg, &topics, &beat("a", 1, None), 0, String::new).unwrap_err();
    assert!(matches!(
        err,
        HeartbeatError::FencedMemberEpoch { got: 1, current: 2 }
    ));
    let err = heartbeat(&mut g, &cfg, &topics, &beat("x", 1, None), 0, String::new).unwrap_err();
    assert_eq!(err.code(), 25);
}

#[test]
fn bad_requests_get_kafkas_codes() {
    let topics = Topics::new(&[("t", T, 2)]);
    let mut g = ConsumerGroup::new("g");
    let cfg = ConsumerGroupConfig::default();
    let mut run = |req: HeartbeatRequest| {
        heartbeat(&mut g, &cfg, &topics, &req, 0, String::new)
            .unwrap_err()
            .code()
    };
    assert_eq!(
        run(HeartbeatRequest {
            rebalance_timeout_ms: -1,
            ..join("a")
        }),
        42
    );
    assert_eq!(
        run(HeartbeatRequest {
            subscribed_topic_names: None,
            ..join("a")
        }),
        42
    );
    assert_eq!(
        run(HeartbeatRequest {
            member_id: String::new(),
            ..join("a")
        }),
        42
    );
    assert_eq!(
        run(HeartbeatRequest {
            member_epoch: -3,
            ..join("a")
        }),
        42
    );
    let regex = Some("t[".to_string());
    assert_eq!(
        run(HeartbeatRequest {
            subscribed_topic_regex: regex,
            ..join("a")
        }),
        128
    );
    let assignor = Some("roundrobin".to_string());
    assert_eq!(
        run(HeartbeatRequest {
            server_assignor: assignor,
            ..join("a")
        }),
        112
    );
    let cfg = ConsumerGroupConfig {
        max_size: 1,
        ..ConsumerGroupConfig::default()
    };
    heartbeat(&mut g, &cfg, &topics, &join("a"), 0, String::new).unwrap();
    let err = heartbeat(&mut g, &cfg, &topics, &join("b"), 0, String::new).unwrap_err();
    assert_eq!(err.code(), 81);
}

#[test]
fn a_regex_subscription_follows_new_topics() {
    let mut topics = Topics::new(&[("orders-eu", 1, 2), ("payments", 2, 2)]);
    let mut g = ConsumerGroup::new("g");
    let req = HeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("orders-.*".into()),
        ..join("a")
    };
    // The new regex is resolved at the group's next heartbeat, as Kafka resolves it off the
    // heartbeat's path.
    let a = hb(&mut g, &topics, req).reply;
    assert_eq!(a.assignment, Some(Assignment::new()));
    let a = hb(&mut g, &topics, beat("a", 1, a.assignment.clone())).reply;
    assert_eq!(a.member_epoch, 2);
    assert_eq!(
        a.assignment
            .as_ref()
            .unwrap()
            .keys()
            .copied()
            .collect::<Vec<_>>(),
        vec![1]
    );
    topics = Topics::new(&[("orders-eu", 1, 2), ("orders-us", 3, 1), ("payments", 2, 2)]);
    let out = hb(&mut g, &topics, beat("a", 2, a.assignment.clone()));
    assert_eq!(out.reply.member_epoch, 3);
    let got = out.reply.assignment.unwrap();
    assert_eq!(got.keys().copied().collect::<Vec<_>>(), vec![1, 3]);
}

/// Topic ids of an assignment.
fn topic_ids(a: &Assignment) -> Vec<u128> {
    a.keys().copied().collect()
}

#[test]
fn a_new_regex_gets_its_topics_a_heartbeat_after_the_literal_ones() {
    let topics = Topics::new(&[("regex1", 1, 4), ("regex2", 2, 4), ("lit", 3, 2)]);
    let mut g = ConsumerGroup::new("g");
    let req = HeartbeatRequest {
        subscribed_topic_names: Some(vec!["lit".into()]),
        subscribed_topic_regex: Some("^.*regex.*".into()),
        ..join("a")
    };
    let a = hb(&mut g, &topics, req).reply;
    assert_eq!(topic_ids(a.assignment.as_ref().unwrap()), vec![3]);
    let a = hb(&mut g, &topics, beat("a", 1, a.assignment.clone())).reply;
    assert_eq!(a.member_epoch, 2);
    assert_eq!(topic_ids(a.assignment.as_ref().unwrap()), vec![1, 2, 3]);
    // A second member with the same regex finds it resolved: no wait.
    let b = HeartbeatRequest {
        subscribed_topic_names: Some(Vec::new()),
        subscribed_topic_regex: Some("^.*regex.*".into()),
        ..join("b")
    };
    hb(&mut g, &topics, b);
    // Ten partitions, b may take any of the eight its regex matches: half of them all.
    assert_eq!(count(&g.target["b"]), 5);
}

#[test]
fn a_regex_matching_a_topic_another_member_names_still_moves_the_target() {
    let topics = Topics::new(&[("t", T, 4)]);
    let mut g = ConsumerGroup::new("g");
    let a = hb(&mut g, &topics, join("a")).reply;
    let b = HeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("t".into()),
        ..join("b")
    };
    // b's regex is new: b gets nothing at first, though `t` is subscribed already.
    let b = hb(&mut g, &topics, b).reply;
    assert_eq!(count(&g.target["b"]), 0);
    // At the next heartbeat the regex matches `t`: the group needs a new target with b in it.
    hb(
        &mut g,
        &topics,
        beat("b", b.member_epoch, Some(Assignment::new())),
    );
    assert!(g.target_epoch > b.member_epoch);
    assert_eq!(count(&g.target["b"]), 2);
    assert_eq!(count(&g.target["a"]), 2);
    let _ = a;
}

#[test]
fn a_static_member_that_rejoins_keeps_its_partitions_without_a_new_epoch() {
    let topics = Topics::new(&[("t", T, 4)]);
    let mut g = ConsumerGroup::new("g");
    let with_instance = |mut r: HeartbeatRequest, i: &str| {
        r.instance_id = Some(i.into());
        r
    };
    let a = hb(&mut g, &topics, with_instance(join("a"), "i-a")).reply;
    hb(&mut g, &topics, with_instance(join("b"), "i-b"));
    let a = hb(
        &mut g,
        &topics,
        beat("a", a.member_epoch, a.assignment.clone()),
    );
    let a_parts = g.members["a"].assigned.clone();
    let epoch = g.group_epoch;
    // A second process with a's instance id is refused while a is active.
    let cfg = ConsumerGroupConfig::default();
    let err = heartbeat(
        &mut g,
        &cfg,
        &topics,
        &with_instance(join("a2"), "i-a"),
        0,
        String::new,
    );
    assert_eq!(err.unwrap_err().code(), 111);
    // a leaves for now: its partitions stay with it; a2 takes its place.
    let leave = with_instance(beat("a", -2, None), "i-a");
    assert_eq!(hb(&mut g, &topics, leave).reply.member_epoch, -2);
    assert_eq!(g.members["a"].assigned, a_parts);
    let a2 = hb(&mut g, &topics, with_instance(join("a2"), "i-a")).reply;
    assert_eq!(
        g.group_epoch, epoch,
        "no new target for a static member's return"
    );
    assert_eq!(a2.assignment.as_ref().map(count), Some(count(&a_parts)));
    assert!(!g.members.contains_key("a"));
    let _ = a;
}

#[test]
fn a_member_leaving_frees_its_partitions_for_the_others() {
    let topics = Topics::new(&[("t", T, 4)]);
    let mut g = ConsumerGroup::new("g");
    let a = hb(&mut g, &topics, join("a")).reply;
    hb(&mut g, &topics, join("b"));
    hb(&mut g, &topics, beat("a", 1, a.assignment.clone()));
    let out = hb(&mut g, &topics, beat("a", -1, None));
    assert_eq!(out.reply.member_epoch, -1);
    let b = hb(&mut g, &topics, beat("b", 2, Some(Assignment::new()))).reply;
    assert_eq!(parts(b.assignment.as_ref().unwrap()), (0..4).collect());
    assert_eq!(b.member_epoch, 3);
}

/// One step of a random run: a client joins, heartbeats (reporting what it owns), leaves, or
/// dies (its session ends on the coordinator).
#[derive(Debug, Clone)]
enum Step {
    Join(u8),
    Beat(u8),
    Leave(u8),
    Die(u8),
    Resize(i32),
}

fn step() -> impl Strategy<Value = Step> {
    prop_oneof![
        1 => (0u8..5).prop_map(Step::Join),
        4 => (0u8..5).prop_map(Step::Beat),
        1 => (0u8..5).prop_map(Step::Leave),
        1 => (0u8..5).prop_map(Step::Die),
        1 => (1i32..9).prop_map(Step::Resize),
    ]
}

/// A client as KIP-848 asks it to behave: it takes a new assignment in (revoking what it
/// lacks, taking what it adds) only later, just before its next heartbeat, which reports what
/// it owns. Until then it still owns what it had.
#[derive(Debug, Default)]
struct Client {
    epoch: i32,
    owned: Assignment,
    received: Option<Assignment>,
}

fn apply(clients: &mut BTreeMap<u8, Client>, id: u8, reply: &super::heartbeat::HeartbeatReply) {
    let c = clients.entry(id).or_default();
    c.epoch = reply.member_epoch;
    if let Some(a) = &reply.assignment {
        c.received = Some(a.clone());
    }
}

fn run_step(
    g: &mut ConsumerGroup,
    topics: &mut Topics,
    clients: &mut BTreeMap<u8, Client>,
    s: Step,
) {
    let name = |i: u8| format!("m{i}");
    let cfg = ConsumerGroupConfig::default();
    match s {
        Step::Join(i) if !clients.contains_key(&i) => {
            // Even members subscribe by regex, odd ones by name: both mean topic t.
            let req = match i % 2 {
                0 => HeartbeatRequest {
                    subscribed_topic_names: None,
                    subscribed_topic_regex: Some("t".into()),
                    ..join(&name(i))
                },
                _ => join(&name(i)),
            };
            let out = heartbeat(g, &cfg, topics, &req, 0, String::new).unwrap();
            apply(clients, i, &out.reply);
        }
        Step::Beat(i) if clients.contains_key(&i) => {
            let c = clients.get_mut(&i).expect("checked");
            if let Some(a) = c.received.take() {
                c.owned = a;
            }
            let req = beat(&name(i), c.epoch, Some(c.owned.clone()));
            let out = heartbeat(g, &cfg, topics, &req, 0, String::new).unwrap();
            apply(clients, i, &out.reply);
        }
        Step::Leave(i) if clients.remove(&i).is_some() => {
            heartbeat(g, &cfg, topics, &beat(&name(i), -1, None), 0, String::new).unwrap();
        }
        Step::Die(i) if clients.remove(&i).is_some() => {
            remove_member(g, &name(i), Departure::Fenced, 0);
        }
        Step::Resize(n) => {
            let now = topics.0.get("t").map_or(0, |t| t.partitions);
            // Kafka only adds partitions.
            *topics = Topics::new(&[("t", T, n.max(now))]);
        }
        _ => {}
    }
}

type Counts = (BTreeMap<String, usize>, BTreeMap<String, usize>);

/// The group's subscription index.
fn counted(g: &ConsumerGroup) -> Counts {
    (
        g.subscriptions.names.clone(),
        g.subscriptions.regexes.clone(),
    )
}

/// The subscription index, counted again from every member.
fn recounted(g: &ConsumerGroup) -> Counts {
    let mut out = Counts::default();
    for m in g.members.values() {
        for n in &m.subscription.topic_names {
            *out.0.entry(n.clone()).or_default() += 1;
        }
        if let Some(re) = &m.subscription.topic_regex {
            *out.1.entry(re.clone()).or_default() += 1;
        }
    }
    out
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    /// Whatever members do, no two clients own one partition at any moment, and once every
    /// client has heartbeated enough the group is Stable with every partition owned.
    #[test]
    fn no_partition_has_two_owners_and_the_group_converges(steps in prop::collection::vec(step(), 1..60)) {
        let mut topics = Topics::new(&[("t", T, 4)]);
        let mut g = ConsumerGroup::new("g");
        let mut clients: BTreeMap<u8, Client> = BTreeMap::new();
        for s in steps {
            run_step(&mut g, &mut topics, &mut clients, s);
            prop_assert_eq!(counted(&g), recounted(&g));
            let mut seen = BTreeSet::new();
            for c in clients.values() {
                for p in parts(&c.owned) {
                    prop_assert!(seen.insert(p), "partition {} owned twice: {:?}", p, clients);
                }
            }
        }
        for _ in 0..6 {
            let ids: Vec<u8> = clients.keys().copied().collect();
            for i in ids {
                run_step(&mut g, &mut topics, &mut clients, Step::Beat(i));
            }
        }
        if !clients.is_empty() {
            prop_assert_eq!(g.state(), ConsumerGroupState::Stable);
            let owned: usize = clients.values().map(|c| count(&c.owned)).sum();
            prop_assert_eq!(owned as i32, topics.0["t"].partitions);
        }
    }
}

#[test]
fn steady_heartbeats_do_not_resolve_subscriptions_again() {
    let topics = Topics::new(&[("t", T, 4)]);
    let mut g = ConsumerGroup::new("g");
    let req = HeartbeatRequest {
        subscribed_topic_names: None,
        subscribed_topic_regex: Some("t".into()),
        ..join("a")
    };
    let a = hb(&mut g, &topics, req).reply;
    // The new regex is resolved at the next heartbeat; from then on, steady heartbeats.
    let a = hb(
        &mut g,
        &topics,
        beat("a", a.member_epoch, a.assignment.clone()),
    )
    .reply;
    let resolved = g.resolved.against;
    assert!(resolved.is_some());
    let generation = g.subscriptions.generation;
    hb(
        &mut g,
        &topics,
        beat("a", a.member_epoch, a.assignment.clone()),
    );
    assert_eq!(g.subscriptions.generation, generation);
    assert_eq!(g.resolved.against, resolved);
    // A second member with another subscription makes the group resolve again.
    hb(&mut g, &topics, join("b"));
    assert_ne!(g.subscriptions.generation, generation);
    assert_ne!(g.resolved.against, resolved);
}
