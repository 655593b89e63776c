//! The coordinator driving KIP-848 groups: answers wait for their records, deadlines fence
//! members, and a reload from the written records gives the same group.

use std::collections::BTreeMap;

use crate::api::*;
use crate::consumer::model::{ConsumerGroupState, TopicMetadata};
use crate::effect::{AppendToken, Effect, Record};
use crate::{GroupConfig, GroupCoordinator};

fn topics() -> BTreeMap<String, TopicMetadata> {
    let t = TopicMetadata {
        id: 7,
        name: "t".into(),
        partitions: 4,
        replica_racks: Vec::new(),
    };
    BTreeMap::from([("t".to_string(), t)])
}

fn join(member: &str) -> Request {
    Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
        group_id: "g".into(),
        member_id: member.into(),
        rebalance_timeout_ms: 10_000,
        subscribed_topic_names: Some(vec!["t".into()]),
        owned: Some(Assignment::new()),
        ..Default::default()
    })
}

fn input(id: u64, request: Request) -> Input {
    let context = RequestContext {
        client_id: "c".into(),
        client_host: "/127.0.0.1".into(),
        api_version: 1,
    };
    Input {
        request_id: id,
        context,
        request,
    }
}

struct H {
    c: GroupCoordinator,
    log: Vec<Record>,
}

impl H {
    fn new() -> H {
        let mut c = GroupCoordinator::new(GroupConfig::default(), 1);
        c.update_topics(topics());
        H { c, log: Vec::new() }
    }

    /// Completes every append at once (appending its records to the log), returning the answers.
    fn settle(&mut self, now: i64, mut effects: Vec<Effect>) -> Vec<(u64, Response)> {
        let mut answers = Vec::new();
        while let Some(e) = effects.pop() {
            match e {
                Effect::Respond {
                    request_id,
                    response,
                } => answers.push((request_id, response)),
                Effect::Append { token, records } => {
                    self.log.extend(records);
                    effects.extend(self.c.append_completed(now, token, Ok(())));
                }
            }
        }
        answers
    }
}

fn heartbeat_of(answers: &[(u64, Response)], id: u64) -> ConsumerGroupHeartbeatResponse {
    answers
        .iter()
        .find_map(|(i, r)| match r {
            Response::ConsumerGroupHeartbeat(h) if *i == id => Some(h.clone()),
            _ => None,
        })
        .expect("an answer")
}

#[test]
fn a_join_is_answered_once_its_records_are_durable() {
    let mut h = H::new();
    let effects = h.c.handle(0, input(1, join("a")));
    let [Effect::Append { token, records }] = effects.as_slice() else {
        panic!("one append and no answer yet: {effects:?}");
    };
    assert_eq!(
        records.len(),
        5,
        "member, group epoch, target member and epoch, current assignment"
    );
    let answers = h.c.append_completed(0, *token, Ok(()));
    let Effect::Respond {
        response: Response::ConsumerGroupHeartbeat(r),
        ..
    } = &answers[0]
    else {
        panic!("{answers:?}");
    };
    assert_eq!((r.error_code, r.member_epoch), (0, 1));
    assert_eq!(r.assignment.as_ref().map(|a| a[&7].len()), Some(4));
}

#[test]
fn a_failed_write_fails_the_heartbeat_and_the_next_write_is_whole() {
    let mut h = H::new();
    let effects = h.c.handle(0, input(1, join("a")));
    let Effect::Append { token, .. } = &effects[0] else {
        panic!()
    };
    let answers =
        h.c.append_completed(0, *token, Err(ResponseError::NotLeaderOrFollower));
    let Effect::Respond {
        response: Response::ConsumerGroupHeartbeat(r),
        ..
    } = &answers[0]
    else {
        panic!("{answers:?}");
    };
    assert_eq!(r.error_code, ResponseError::NotCoordinator.code());
    let effects = h.c.handle(1, input(2, join("b")));
    let Effect::Append { records, .. } = &effects[0] else {
        panic!("{effects:?}")
    };
    // Both members' metadata, whole, though only b is new.
    assert!(records.len() >= 8, "{}", records.len());
}

#[test]
fn a_silent_member_is_fenced_at_its_session_and_the_group_reloads_from_the_log() {
    let mut h = H::new();
    let e = h.c.handle(0, input(1, join("a")));
    h.settle(0, e);
    let e = h.c.handle(0, input(2, join("b")));
    let answers = h.settle(0, e);
    assert_eq!(heartbeat_of(&answers, 2).member_epoch, 2);
    // Only b heartbeats; a's session (45 s) ends.
    for t in (5_000..=50_000).step_by(5_000) {
        let req = Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
            group_id: "g".into(),
            member_id: "b".into(),
            member_epoch: 2,
            rebalance_timeout_ms: -1,
            ..Default::default()
        });
        let e = h.c.handle(t, input(t as u64, req));
        h.settle(t, e);
    }
    let g = h.c.consumer_group("g").expect("group");
    assert!(!g.members.contains_key("a"));
    assert_eq!(g.members["b"].assigned[&7].len(), 4);
    assert_eq!(g.state(), ConsumerGroupState::Stable);
    let mut loaded = GroupCoordinator::new(GroupConfig::default(), 2);
    for r in &h.log {
        loaded.replay(&r.key, r.value.as_deref()).expect("replays");
    }
    loaded.complete_load(60_000);
    let back = loaded.consumer_group("g").expect("reloaded");
    assert_eq!(back.members, g.members);
    assert_eq!(
        (back.group_epoch, back.target_epoch),
        (g.group_epoch, g.target_epoch)
    );
    assert_eq!(back.target, g.target);
    // The loaded member's session runs from the load.
    assert!(loaded.tick(60_000 + 44_000).is_empty());
    assert!(!loaded.tick(60_000 + 45_000).is_empty());
}

#[test]
fn unload_answers_waiting_heartbeats_and_a_refused_heartbeat_creates_no_group() {
    let mut h = H::new();
    let effects = h.c.handle(0, input(1, join("a")));
    assert!(matches!(
        effects[0],
        Effect::Append {
            token: AppendToken(_),
            ..
        }
    ));
    let answers = h.c.unload();
    let Effect::Respond {
        response: Response::ConsumerGroupHeartbeat(r),
        ..
    } = &answers[0]
    else {
        panic!("{answers:?}");
    };
    assert_eq!(r.error_code, ResponseError::NotCoordinator.code());
    assert!(h.c.consumer_group("g").is_none());
    let unknown = Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
        group_id: "g".into(),
        member_id: "x".into(),
        member_epoch: 3,
        ..Default::default()
    });
    let answers = h.c.handle(0, input(2, unknown));
    assert_eq!(heartbeat_of(&h.settle(0, answers), 2).error_code, 25);
    assert!(
        h.c.consumer_group("g").is_none(),
        "a refused heartbeat creates no group"
    );
}

fn commit(member: &str, epoch: i32) -> Request {
    Request::OffsetCommit(OffsetCommitRequest {
        group_id: "g".into(),
        generation_id: epoch,
        member_id: member.into(),
        group_instance_id: None,
        topics: vec![OffsetCommitTopic {
            name: "t".into(),
            partitions: vec![OffsetCommitPartition {
                partition_index: 0,
                committed_offset: 42,
                ..Default::default()
            }],
        }],
    })
}

/// An OffsetCommit v9 (the first that carries member epochs).
fn v9(id: u64, request: Request) -> Input {
    let mut i = input(id, request);
    i.context.api_version = 9;
    i
}

fn commit_error(answers: &[(u64, Response)], id: u64) -> Option<ResponseError> {
    answers.iter().find_map(|(i, r)| match r {
        Response::OffsetCommit(c) if *i == id => Some(c.topics[0].partitions[0].error),
        _ => None,
    })?
}

#[test]
fn members_commit_at_their_epoch_and_outsiders_only_to_an_empty_group() {
    let mut h = H::new();
    let e = h.c.handle(0, input(1, join("a")));
    h.settle(0, e);
    let e = h.c.handle(0, v9(2, commit("a", 1)));
    assert_eq!(commit_error(&h.settle(0, e), 2), None);
    assert_eq!(
        h.c.committed_offset("g", "t", 0).map(|o| o.offset),
        Some(42)
    );
    let e = h.c.handle(0, v9(3, commit("a", 0)));
    assert_eq!(
        commit_error(&h.settle(0, e), 3),
        Some(ResponseError::StaleMemberEpoch)
    );
    let e = h.c.handle(0, v9(4, commit("zz", 1)));
    assert_eq!(
        commit_error(&h.settle(0, e), 4),
        Some(ResponseError::UnknownMemberId)
    );
    let e = h.c.handle(0, v9(5, commit("", -1)));
    assert_eq!(
        commit_error(&h.settle(0, e), 5),
        Some(ResponseError::UnknownMemberId)
    );
    let mut old = input(6, commit("a", 1));
    old.context.api_version = 8;
    let e = h.c.handle(0, old);
    assert_eq!(
        commit_error(&h.settle(0, e), 6),
        Some(ResponseError::UnsupportedVersion)
    );
}

/// Replays `log` into a fresh coordinator and completes the load.
fn reload(log: &[Record]) -> GroupCoordinator {
    let mut loaded = GroupCoordinator::new(GroupConfig::default(), 3);
    loaded.update_topics(topics());
    for r in log {
        loaded.replay(&r.key, r.value.as_deref()).expect("replays");
    }
    loaded.complete_load(1_000);
    loaded
}

fn listed(c: &mut GroupCoordinator, types: &[&str]) -> Vec<(String, String, String)> {
    let req = ListGroupsRequest {
        states_filter: Vec::new(),
        types_filter: types.iter().map(|t| t.to_string()).collect(),
    };
    match &c.handle(0, input(90, Request::ListGroups(req)))[..] {
        [Effect::Respond {
            response: Response::ListGroups(r),
            ..
        }] => r
            .groups
            .iter()
            .map(|g| {
                (
                    g.group_id.clone(),
                    g.group_type.clone(),
                    g.group_state.clone(),
                )
            })
            .collect(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_reloaded_consumer_group_with_offsets_is_not_also_a_simple_group() {
    let mut h = H::new();
    let e = h.c.handle(0, input(1, join("a")));
    h.settle(0, e);
    let e = h.c.handle(0, v9(2, commit("a", 1)));
    h.settle(0, e);
    let mut loaded = reload(&h.log);
    assert_eq!(
        loaded.committed_offset("g", "t", 0).map(|o| o.offset),
        Some(42)
    );
    let consumer = (
        "g".to_string(),
        "consumer".to_string(),
        "Stable".to_string(),
    );
    assert_eq!(listed(&mut loaded, &[]), vec![consumer.clone()]);
    assert_eq!(listed(&mut loaded, &["Consumer"]), vec![consumer]);
    assert!(listed(&mut loaded, &["classic"]).is_empty());
    // The member heartbeats on at its epoch after the reload.
    let req = Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
        group_id: "g".into(),
        member_id: "a".into(),
        member_epoch: 1,
        rebalance_timeout_ms: -1,
        ..Default::default()
    });
    let e = loaded.handle(2_000, input(3, req));
    let mut h2 = H {
        c: loaded,
        log: Vec::new(),
    };
    let answer = heartbeat_of(&h2.settle(2_000, e), 3);
    // The same topics after the reload: no new group epoch (the metadata hash came back).
    assert_eq!((answer.error_code, answer.member_epoch), (0, 1));
    assert_eq!(h2.c.consumer_group("g").map(|g| g.group_epoch), Some(1));
}

fn describe(c: &mut GroupCoordinator, ids: &[&str]) -> Vec<DescribedConsumerGroup> {
    let req = ConsumerGroupDescribeRequest {
        group_ids: ids.iter().map(|s| s.to_string()).collect(),
    };
    match &c.handle(0, input(91, Request::ConsumerGroupDescribe(req)))[..] {
        [Effect::Respond {
            response: Response::ConsumerGroupDescribe(r),
            ..
        }] => r.groups.clone(),
        other => panic!("{other:?}"),
    }
}

#[test]
fn describe_shows_epochs_members_and_assignments_and_refuses_other_groups() {
    let mut h = H::new();
    for (i, m) in ["a", "b"].iter().enumerate() {
        let e = h.c.handle(0, input(i as u64 + 1, join(m)));
        h.settle(0, e);
    }
    let [g, missing] = &describe(&mut h.c, &["g", "nope"])[..] else {
        panic!()
    };
    assert_eq!((g.error_code, g.group_epoch, g.assignment_epoch), (0, 2, 2));
    assert_eq!(g.assignor_name, "uniform");
    assert_eq!(g.members.len(), 2);
    let a = &g.members[0];
    assert_eq!((a.member_id.as_str(), a.client_id.as_str()), ("a", "c"));
    assert_eq!(a.subscribed_topic_names, vec!["t".to_string()]);
    assert_eq!(a.target_assignment[&7].len(), 2, "{a:?}");
    assert_eq!(missing.error_code, ResponseError::GroupIdNotFound.code());
    assert_eq!(
        missing.error_message.as_deref(),
        Some("Group nope not found.")
    );
}

fn delete(h: &mut H, id: u64, group: &str, fail: bool) -> Option<ResponseError> {
    let req = Request::DeleteGroups(DeleteGroupsRequest {
        group_ids: vec![group.to_string()],
    });
    let mut effects = h.c.handle(0, input(id, req));
    if fail {
        let Some(Effect::Append { token, .. }) = effects.pop() else {
            panic!("a write")
        };
        effects =
            h.c.append_completed(0, token, Err(ResponseError::NotLeaderOrFollower));
    }
    match &h.settle(0, effects)[..] {
        [(_, Response::DeleteGroups(r))] => r.results[0].error,
        other => panic!("{other:?}"),
    }
}

#[test]
fn only_an_empty_consumer_group_is_deleted_and_a_failed_delete_keeps_it() {
    let mut h = H::new();
    let e = h.c.handle(0, input(1, join("a")));
    h.settle(0, e);
    let e = h.c.handle(0, v9(2, commit("a", 1)));
    h.settle(0, e);
    assert_eq!(
        delete(&mut h, 3, "g", false),
        Some(ResponseError::NonEmptyGroup)
    );
    let leave = Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
        group_id: "g".into(),
        member_id: "a".into(),
        member_epoch: -1,
        rebalance_timeout_ms: -1,
        ..Default::default()
    });
    let e = h.c.handle(0, input(4, leave));
    h.settle(0, e);
    assert_eq!(
        delete(&mut h, 5, "g", true),
        Some(ResponseError::NotCoordinator)
    );
    assert!(
        h.c.consumer_group("g").is_some(),
        "a failed delete leaves the group"
    );
    assert_eq!(delete(&mut h, 6, "g", false), None);
    assert!(h.c.consumer_group("g").is_none());
    assert_eq!(h.c.committed_offset("g", "t", 0), None);
    let mut loaded = reload(&h.log);
    assert!(
        loaded.consumer_group("g").is_none(),
        "the tombstones delete it on reload"
    );
    assert!(listed(&mut loaded, &[]).is_empty());
    assert_eq!(loaded.committed_offset("g", "t", 0), None);
}

fn txn_commit(member: &str, epoch: i32) -> Request {
    Request::TxnOffsetCommit(TxnOffsetCommitRequest {
        transactional_id: "tx".into(),
        group_id: "g".into(),
        producer_id: 5,
        producer_epoch: 0,
        generation_id: epoch,
        member_id: member.into(),
        group_instance_id: None,
        topics: vec![OffsetCommitTopic {
            name: "t".into(),
            partitions: vec![OffsetCommitPartition {
                partition_index: 0,
                committed_offset: 42,
                ..Default::default()
            }],
        }],
    })
}

fn txn_commit_error(answers: &[(u64, Response)], id: u64) -> Option<ResponseError> {
    answers.iter().find_map(|(i, r)| match r {
        Response::TxnOffsetCommit(c) if *i == id => Some(c.topics[0].partitions[0].error),
        _ => None,
    })?
}

#[test]
fn a_transaction_commits_for_a_consumer_group_member_at_its_epoch() {
    let mut h = H::new();
    let e = h.c.handle(0, input(1, join("a")));
    h.settle(0, e);
    // A producer sending the offsets of member a (epoch 1) to its transaction: the group is a
    // consumer group, which takes the member epoch as the generation.
    let e = h.c.handle(0, input(2, txn_commit("a", 1)));
    let answers = h.settle(0, e);
    assert!(answers.iter().any(|(i, _)| *i == 2));
    assert_eq!(txn_commit_error(&answers, 2), None);
    let e = h.c.handle(0, input(3, txn_commit("a", 0)));
    assert_eq!(
        txn_commit_error(&h.settle(0, e), 3),
        Some(ResponseError::StaleMemberEpoch)
    );
    let e = h.c.handle(0, input(4, txn_commit("zz", 1)));
    assert_eq!(
        txn_commit_error(&h.settle(0, e), 4),
        Some(ResponseError::UnknownMemberId)
    );
    // Without any member information (TxnOffsetCommit before v3), as in a classic group.
    let e = h.c.handle(0, input(5, txn_commit("", -1)));
    assert_eq!(txn_commit_error(&h.settle(0, e), 5), None);
    assert!(h.c.consumer_group("g").is_some());
}

/// Heartbeats every member of `g` with what it was last given, until the group is stable.
fn settle_group(h: &mut H, now: i64) {
    for round in 0..10u64 {
        let g = h.c.consumer_group("g").expect("group");
        if g.state() == ConsumerGroupState::Stable {
            return;
        }
        let members: Vec<_> = g.members.values().cloned().collect();
        for (i, m) in members.into_iter().enumerate() {
            let req = Request::ConsumerGroupHeartbeat(ConsumerGroupHeartbeatRequest {
                group_id: "g".into(),
                member_id: m.member_id.clone(),
                member_epoch: m.member_epoch,
                rebalance_timeout_ms: -1,
                owned: Some(m.assigned.clone()),
                ..Default::default()
            });
            let e = h.c.handle(now, input(1_000 + round * 10 + i as u64, req));
            h.settle(now, e);
        }
    }
    panic!("the group did not settle");
}

fn join_with(member: &str, assignor: &str) -> Request {
    let Request::ConsumerGroupHeartbeat(mut r) = join(member) else {
        unreachable!()
    };
    r.server_assignor = Some(assignor.into());
    Request::ConsumerGroupHeartbeat(r)
}

#[test]
fn a_load_review_writes_its_epoch_and_target_before_members_get_them() {
    let mut h = H::new();
    for (i, m) in ["a", "b"].into_iter().enumerate() {
        let e = h.c.handle(0, input(i as u64 + 1, join_with(m, "load")));
        h.settle(0, e);
    }
    settle_group(&mut h, 0);
    assert_eq!(
        h.c.load_partitions(),
        BTreeMap::from([("t".to_string(), 4)])
    );
    let g = h.c.consumer_group("g").unwrap().clone();
    let a: Vec<i32> = g.target["a"][&7].iter().copied().collect();
    assert_eq!(a.len(), 2);
    // Both of a's partitions are hot.
    let figure = |p: i32| crate::PartitionLoad {
        bytes_in_per_sec: if a.contains(&p) { 1e6 } else { 10.0 },
        high_watermark: 0,
        bytes_per_record: 100.0,
    };
    let loads = BTreeMap::from([("t".to_string(), (0..4).map(|p| (p, figure(p))).collect())]);
    let effects = h.c.review_load(5_000, std::sync::Arc::new(loads));
    assert!(
        effects.iter().any(|e| matches!(e, Effect::Append { .. })),
        "{effects:?}"
    );
    h.settle(5_000, effects);
    let moved = h.c.consumer_group("g").unwrap().clone();
    assert_eq!(moved.group_epoch, g.group_epoch + 1);
    let hot_of = |m: &str| moved.target[m][&7].iter().filter(|p| a.contains(p)).count();
    assert_eq!((hot_of("a"), hot_of("b")), (1, 1));
    // The new epoch and target are in the log: a reload has them.
    let back = reload(&h.log);
    let reloaded = back.consumer_group("g").expect("reloaded");
    assert_eq!(
        (reloaded.group_epoch, reloaded.target_epoch),
        (moved.group_epoch, moved.target_epoch)
    );
    assert_eq!(reloaded.target, moved.target);
}

#[test]
fn groups_on_other_assignors_are_neither_measured_nor_reviewed() {
    let mut h = H::new();
    let e = h.c.handle(0, input(1, join_with("a", "uniform")));
    h.settle(0, e);
    assert!(h.c.load_partitions().is_empty());
    let loads = BTreeMap::from([("t".to_string(), BTreeMap::new())]);
    assert!(h
        .c
        .review_load(1_000, std::sync::Arc::new(loads))
        .is_empty());
}
