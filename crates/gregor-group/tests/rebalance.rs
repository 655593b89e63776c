//! The classic rebalance protocol: MEMBER_ID_REQUIRED, the join barrier, leaders, generations,
//! the initial delay, session expiry and the sync phase.

mod common;

use common::*;
use gregor_group::*;

#[test]
fn member_id_required_then_join_after_initial_delay() {
    let mut h = H::new();
    let first = h.send_with(
        9,
        "consumer-a",
        Request::JoinGroup(join_req("", None, RANGE)),
    );
    let r = h.join_resp(first);
    assert_eq!(r.error, Some(ResponseError::MemberIdRequired));
    assert!(r.member_id.starts_with("consumer-a-"), "{}", r.member_id);
    assert_eq!(
        h.c.group(GROUP).unwrap().pending_members,
        vec![r.member_id.clone()]
    );
    assert_eq!(h.state(), GroupState::Empty);

    let second = h.send_with(
        9,
        "consumer-a",
        Request::JoinGroup(join_req(&r.member_id, None, RANGE)),
    );
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert!(
        !h.answered(second),
        "the initial delay holds the first join"
    );
    h.advance(2_999);
    assert!(!h.answered(second));
    h.advance(1);
    let j = h.join_resp(second);
    assert_eq!(j.error, None);
    assert_eq!(j.generation_id, 1);
    assert_eq!(j.leader, r.member_id);
    assert_eq!(j.protocol_name.as_deref(), Some("range"));
    assert_eq!(j.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(j.members.len(), 1);
    assert_eq!(&j.members[0].metadata[..], b"sub");
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    let m = &h.c.group(GROUP).unwrap().members[0];
    assert_eq!(m.client_id, "consumer-a");
    assert_eq!(m.client_host, "/127.0.0.1");
}

#[test]
fn join_before_v4_gets_a_member_id_without_rejoining() {
    let mut h = H::new();
    let id = h.send_with(3, "old", Request::JoinGroup(join_req("", None, RANGE)));
    assert!(!h.answered(id), "parked in the join phase directly");
    h.advance(3_000);
    let j = h.join_resp(id);
    assert_eq!(j.error, None);
    assert!(j.member_id.starts_with("old-"));
    assert_eq!(j.leader, j.member_id);
}

#[test]
fn initial_delay_is_extended_per_new_member_and_capped_by_rebalance_timeout() {
    // Extension: B joins during the first delay, so the phase ends one delay later.
    let mut h = H::new();
    let (_a, ja) = h.new_member(RANGE);
    h.advance(2_000);
    let (_b, jb) = h.new_member(RANGE);
    h.advance(1_000); // first delay over, but a member was added: extend
    assert!(!h.answered(ja) && !h.answered(jb));
    h.advance(2_999);
    assert!(!h.answered(ja) && !h.answered(jb));
    h.advance(1);
    assert_eq!(h.join_resp(ja).generation_id, 1);
    assert_eq!(h.join_resp(jb).generation_id, 1);
    assert_eq!(h.join_resp(ja).members.len(), 2);
    assert!(
        h.join_resp(jb).members.is_empty(),
        "followers get no member list"
    );

    // Cap: with a 5 s rebalance timeout, members arriving every 2 s cannot hold it past 5 s.
    let mut h = H::new();
    let mut req = join_req("", None, RANGE);
    req.rebalance_timeout_ms = 5_000;
    let first = h.send(Request::JoinGroup(req.clone()));
    let id = h.join_resp(first).member_id;
    req.member_id = id;
    let parked = h.send(Request::JoinGroup(req.clone()));
    let start = h.now;
    let mut others = Vec::new();
    while !h.answered(parked) {
        h.advance(1_000);
        if (h.now - start) % 2_000 == 0 {
            let mut r = req.clone();
            r.member_id.clear();
            let f = h.send(Request::JoinGroup(r.clone()));
            r.member_id = h.join_resp(f).member_id;
            others.push(h.send(Request::JoinGroup(r)));
        }
        assert!(
            h.now - start <= 5_000,
            "initial delay ran past the rebalance timeout"
        );
    }
    assert_eq!(h.now - start, 5_000);
}

#[test]
fn join_barrier_waits_for_every_known_member_and_leader_is_kept() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[b"A", b"B"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    assert_eq!(
        h.c.group(GROUP).unwrap().leader_id.as_deref(),
        Some(a.as_str())
    );

    // A third member joins: rebalance; nobody is answered until A and B rejoined.
    let (c, jc) = h.new_member(RANGE);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert_eq!(h.heartbeat(&a, 1), Some(ResponseError::RebalanceInProgress));
    let ja = h.join(&a, RANGE);
    h.advance(1_000);
    assert!(!h.answered(jc) && !h.answered(ja), "B has not rejoined");
    let jb = h.join(&b, RANGE);
    for id in [ja, jb, jc] {
        let r = h.join_resp(id);
        assert_eq!(r.error, None);
        assert_eq!(r.generation_id, 2);
        assert_eq!(r.leader, a, "the leader stays leader while present");
    }
    let members: Vec<String> = h
        .join_resp(ja)
        .members
        .iter()
        .map(|m| m.member_id.clone())
        .collect();
    assert_eq!(members, vec![a.clone(), b.clone(), c.clone()]);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
}

#[test]
fn rebalance_timeout_removes_members_that_did_not_rejoin() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[b"A", b"B"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let ja = h.join(&a, RANGE); // the leader rejoins: rebalance
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    // B keeps heartbeating (alive) but never rejoins.
    for _ in 0..5 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(&b, 1), Some(ResponseError::RebalanceInProgress));
        assert!(!h.answered(ja));
    }
    h.advance(REBALANCE as i64 - 25_000 - 1);
    assert!(!h.answered(ja));
    h.advance(1);
    let r = h.join_resp(ja);
    assert_eq!(r.generation_id, 2);
    assert_eq!(r.members.len(), 1);
    assert_eq!(h.heartbeat(&b, 2), Some(ResponseError::UnknownMemberId));
    // The coordinator's record of the rebalance: B kicked for the rebalance timeout
    // (max.poll.interval.ms), the join phase as long as that timeout.
    let history = h.c.rebalance_history(GROUP).expect("history");
    let last = history.recent.back().expect("a rebalance");
    assert_eq!((last.from_generation, last.generation), (1, Some(2)));
    let kicked: Vec<_> = last.kicked().iter().map(|m| m.member_id.clone()).collect();
    assert_eq!(kicked, vec![b.clone()]);
    assert_eq!(
        last.join_completed_ms.map(|t| t - last.started_ms),
        Some(REBALANCE as i64)
    );
    assert_eq!(last.left().len(), 1);
}

#[test]
fn a_member_that_rejoined_leads_when_the_leader_did_not() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[b"A", b"B"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let jb = h.join(&b, &[("range", b"new-subscription")]);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    h.advance(REBALANCE as i64);
    let r = h.join_resp(jb);
    assert_eq!(r.leader, b);
    assert_eq!(r.members.len(), 1, "the new leader gets the member list");
    assert_eq!(&r.members[0].metadata[..], b"new-subscription");
    assert!(h
        .c
        .group(GROUP)
        .unwrap()
        .members
        .iter()
        .all(|m| m.member_id != a));
}

#[test]
fn session_expiry_removes_the_member_and_rebalances() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[b"A", b"B"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    // A heartbeats every 3 s; B is silent.
    let mut waited = 0;
    while h.state() == GroupState::Stable {
        h.advance(3_000);
        waited += 3_000;
        if h.state() == GroupState::Stable {
            assert_eq!(h.heartbeat(&a, 1), None);
        }
        assert!(waited <= i64::from(SESSION) + 3_000);
    }
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert!(h
        .c
        .group(GROUP)
        .unwrap()
        .members
        .iter()
        .all(|m| m.member_id != b));
    assert_eq!(h.heartbeat(&a, 1), Some(ResponseError::RebalanceInProgress));
    let ja = h.join(&a, RANGE);
    let r = h.join_resp(ja);
    assert_eq!(
        (r.generation_id, r.members.len()),
        (2, 1),
        "A alone completes the barrier"
    );
    assert_eq!(h.heartbeat(&b, 1), Some(ResponseError::UnknownMemberId));
    // B's expiry happened in the Stable group, before the rebalance it started, and is part of
    // that rebalance's record.
    let history = h.c.rebalance_history(GROUP).expect("history");
    let last = history.recent.back().expect("a rebalance");
    assert_eq!(last.reason, "member session expired");
    let departed: Vec<_> = last
        .departures
        .iter()
        .map(|d| (d.member.member_id.clone(), d.cause))
        .collect();
    assert_eq!(departed, vec![(b.clone(), DepartureCause::SessionTimeout)]);
    assert!(last.kicked().is_empty());
}

#[test]
fn pending_member_holds_the_barrier_until_its_session_expires() {
    let mut h = H::new();
    let ids = h.stable_group(1, &[b"A"]);
    let first = h.join("", RANGE); // never rejoins with its id
    assert_eq!(
        h.join_resp(first).error,
        Some(ResponseError::MemberIdRequired)
    );
    let ja = h.join(&ids[0], RANGE);
    assert!(!h.answered(ja), "the pending member may still join");
    h.advance(i64::from(SESSION) - 1);
    assert!(!h.answered(ja));
    h.advance(1);
    assert_eq!(h.join_resp(ja).generation_id, 2);
    assert!(h.c.group(GROUP).unwrap().pending_members.is_empty());
}

#[test]
fn followers_wait_for_the_leaders_sync_and_it_is_durable_first() {
    let mut h = H::new();
    let (a, ja) = h.new_member(RANGE);
    let (b, jb) = h.new_member(RANGE);
    h.advance(6_000);
    assert_eq!(h.join_resp(jb).generation_id, 1);
    assert_eq!(h.join_resp(ja).leader, a);
    h.auto_append = false;

    let sb = h.sync(&b, 1, &[]);
    assert!(!h.answered(sb), "a follower waits for the leader");
    assert_eq!(
        h.heartbeat(&b, 1),
        None,
        "CompletingRebalance heartbeats are normal"
    );
    let sa = h.sync(&a, 1, &[(&a, b"for-a"), (&b, b"for-b")]);
    assert!(
        !h.answered(sa) && !h.answered(sb),
        "held until the group metadata is durable"
    );
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    assert_eq!(h.pending.len(), 1);
    h.complete_append(Ok(()));
    assert_eq!(&h.sync_resp(sa).assignment[..], b"for-a");
    assert_eq!(&h.sync_resp(sb).assignment[..], b"for-b");
    assert_eq!(h.sync_resp(sb).protocol_name.as_deref(), Some("range"));
    assert_eq!(h.state(), GroupState::Stable);

    // A late follower SyncGroup in Stable gets its assignment straight away.
    h.auto_append = true;
    let again = h.sync(&b, 1, &[]);
    assert_eq!(&h.sync_resp(again).assignment[..], b"for-b");
    // The record is Kafka's group metadata with the assignment.
    let value = records::decode_group_metadata_value(h.log.last().unwrap().value.as_ref().unwrap())
        .unwrap();
    assert_eq!(value.generation, 1);
    assert_eq!(value.leader.as_deref(), Some(a.as_str()));
    assert_eq!(&value.members[1].assignment[..], b"for-b");
}

#[test]
fn failed_assignment_append_sends_members_back_to_rebalance() {
    let mut h = H::new();
    let (a, _) = h.new_member(RANGE);
    let (b, _) = h.new_member(RANGE);
    h.advance(6_000);
    h.auto_append = false;
    let sb = h.sync(&b, 1, &[]);
    let sa = h.sync(&a, 1, &[(&a, b"x")]);
    h.complete_append(Err(ResponseError::NotLeaderOrFollower));
    assert_eq!(h.sync_resp(sa).error, Some(ResponseError::NotCoordinator));
    assert_eq!(h.sync_resp(sb).error, Some(ResponseError::NotCoordinator));
    assert_eq!(h.state(), GroupState::PreparingRebalance);
}

#[test]
fn members_that_never_sync_are_removed() {
    let mut h = H::new();
    let (a, _) = h.new_member(RANGE);
    let (b, _) = h.new_member(RANGE);
    h.advance(6_000);
    let sa = h.sync(&a, 1, &[(&a, b"x"), (&b, b"y")]);
    assert_eq!(h.sync_resp(sa).error, None);
    assert_eq!(h.state(), GroupState::Stable);
    // B never sends SyncGroup (but heartbeats): removed at the rebalance timeout.
    for _ in 0..(REBALANCE / 5_000) {
        h.advance(5_000);
        h.heartbeat(&a, 1);
        h.heartbeat(&b, 1);
    }
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert!(h
        .c
        .group(GROUP)
        .unwrap()
        .members
        .iter()
        .all(|m| m.member_id != b));
}

#[test]
fn sync_errors() {
    let mut h = H::new();
    let mut req = SyncGroupRequest {
        group_id: String::new(),
        generation_id: 1,
        member_id: "m".into(),
        ..Default::default()
    };
    let id = h.send(Request::SyncGroup(req.clone()));
    assert_eq!(h.sync_resp(id).error, Some(ResponseError::InvalidGroupId));
    req.group_id = "nope".into();
    let id = h.send(Request::SyncGroup(req.clone()));
    assert_eq!(h.sync_resp(id).error, Some(ResponseError::UnknownMemberId));

    let ids = h.stable_group(2, &[b"A", b"B"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let id = h.sync("stranger", 1, &[]);
    assert_eq!(h.sync_resp(id).error, Some(ResponseError::UnknownMemberId));
    let id = h.sync(&b, 7, &[]);
    assert_eq!(
        h.sync_resp(id).error,
        Some(ResponseError::IllegalGeneration)
    );
    let mut wrong = SyncGroupRequest {
        group_id: GROUP.into(),
        generation_id: 1,
        member_id: b.clone(),
        protocol_name: Some("roundrobin".into()),
        ..Default::default()
    };
    let id = h.send(Request::SyncGroup(wrong.clone()));
    assert_eq!(
        h.sync_resp(id).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    wrong.protocol_name = None;
    wrong.protocol_type = Some("connect".into());
    let id = h.send(Request::SyncGroup(wrong));
    assert_eq!(
        h.sync_resp(id).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    h.join(&a, RANGE);
    let id = h.sync(&b, 1, &[]);
    assert_eq!(
        h.sync_resp(id).error,
        Some(ResponseError::RebalanceInProgress)
    );
}

#[test]
fn heartbeat_errors() {
    let mut h = H::new();
    let mut req = HeartbeatRequest {
        group_id: String::new(),
        generation_id: 1,
        member_id: "m".into(),
        group_instance_id: None,
    };
    let id = h.send(Request::Heartbeat(req.clone()));
    assert_eq!(h.hb_error(id), Some(ResponseError::InvalidGroupId));
    req.group_id = "nope".into();
    let id = h.send(Request::Heartbeat(req.clone()));
    assert_eq!(h.hb_error(id), Some(ResponseError::UnknownMemberId));

    let ids = h.stable_group(1, &[b"A"]);
    assert_eq!(h.heartbeat(&ids[0], 1), None);
    assert_eq!(
        h.heartbeat(&ids[0], 0),
        Some(ResponseError::IllegalGeneration)
    );
    assert_eq!(
        h.heartbeat("stranger", 1),
        Some(ResponseError::UnknownMemberId)
    );
    req.group_id = GROUP.into();
    req.member_id = ids[0].clone();
    req.group_instance_id = Some("not-static".into());
    let id = h.send(Request::Heartbeat(req));
    assert_eq!(h.hb_error(id), Some(ResponseError::UnknownMemberId));
}

#[test]
fn join_bad_input() {
    let mut h = H::new();
    let mut req = join_req("", None, RANGE);
    req.group_id.clear();
    let id = h.send(Request::JoinGroup(req));
    assert_eq!(h.join_resp(id).error, Some(ResponseError::InvalidGroupId));
    for timeout in [5_999, 1_800_001] {
        let mut req = join_req("", None, RANGE);
        req.session_timeout_ms = timeout;
        let id = h.send(Request::JoinGroup(req));
        assert_eq!(
            h.join_resp(id).error,
            Some(ResponseError::InvalidSessionTimeout),
            "{timeout}"
        );
    }
    // A member id for a group that does not exist.
    let id = h.join("ghost", RANGE);
    assert_eq!(h.join_resp(id).error, Some(ResponseError::UnknownMemberId));
    // Empty protocol list or protocol type in an empty group.
    let id = h.join("", &[]);
    assert_eq!(
        h.join_resp(id).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    assert!(
        h.c.group(GROUP).is_none(),
        "a failed join leaves no group behind"
    );

    let ids = h.stable_group(1, &[b"A"]);
    // No protocol in common.
    let id = h.join("", &[("roundrobin", b"")]);
    assert_eq!(
        h.join_resp(id).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    // Another protocol type.
    let mut req = join_req("", None, RANGE);
    req.protocol_type = "connect".into();
    let id = h.send(Request::JoinGroup(req));
    assert_eq!(
        h.join_resp(id).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
    // Unknown member id in an existing group.
    let id = h.join("stranger", RANGE);
    assert_eq!(h.join_resp(id).error, Some(ResponseError::UnknownMemberId));
    assert_eq!(
        h.state(),
        GroupState::Stable,
        "bad joins do not disturb the group"
    );
    assert_eq!(h.heartbeat(&ids[0], 1), None);
}

#[test]
fn group_max_size() {
    let mut h = H::with_config(GroupConfig {
        max_size: 2,
        ..GroupConfig::default()
    });
    h.stable_group(2, &[b"A", b"B"]);
    // A full Stable group turns a third member away before handing it a member id.
    let jc = h.join("", RANGE);
    let r = h.join_resp(jc);
    assert_eq!(r.error, Some(ResponseError::GroupMaxSizeReached));
    assert_eq!(r.member_id, "");
    assert_eq!(h.c.group(GROUP).unwrap().members.len(), 2);
    assert!(h.c.group(GROUP).unwrap().pending_members.is_empty());
    assert_eq!(h.state(), GroupState::Stable);
}

#[test]
fn state_transitions() {
    let mut h = H::new();
    // Empty -> PreparingRebalance -> CompletingRebalance -> Stable
    let (a, _) = h.new_member(RANGE);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    h.advance(3_000);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    h.sync(&a, 1, &[(&a, b"x")]);
    assert_eq!(h.state(), GroupState::Stable);
    // Stable -> PreparingRebalance (a member joins) -> CompletingRebalance
    let (b, _) = h.new_member(RANGE);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    h.join(&a, RANGE);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    // CompletingRebalance -> PreparingRebalance (a member leaves before the leader syncs)
    let sb = h.sync(&b, 2, &[]);
    h.leave(&b);
    assert_eq!(h.sync_resp(sb).error, Some(ResponseError::UnknownMemberId));
    // A is the only member and was not parked: the barrier waits for it.
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    // PreparingRebalance -> Empty (the last member leaves)
    h.leave(&a);
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(h.generation(), 3);
    let empty = records::decode_group_metadata_value(h.log.last().unwrap().value.as_ref().unwrap())
        .unwrap();
    assert!(empty.members.is_empty() && empty.protocol.is_none() && empty.leader.is_none());
    assert_eq!(empty.generation, 3);
    // Empty -> Dead (deleted)
    h.auto_append = false;
    h.send(Request::DeleteGroups(DeleteGroupsRequest {
        group_ids: vec![GROUP.into()],
    }));
    assert_eq!(h.state(), GroupState::Dead);
    h.complete_all_appends();
    assert!(h.c.group(GROUP).is_none());
}

#[test]
fn kafka_transition_table() {
    use GroupState::*;
    let all = [Empty, PreparingRebalance, CompletingRebalance, Stable, Dead];
    let allowed = [
        (Empty, PreparingRebalance),
        (PreparingRebalance, CompletingRebalance),
        (PreparingRebalance, Empty),
        (CompletingRebalance, Stable),
        (CompletingRebalance, PreparingRebalance),
        (Stable, PreparingRebalance),
    ];
    for from in all {
        for to in all {
            let expected = to == Dead || allowed.contains(&(from, to));
            assert_eq!(from.can_transition_to(to), expected, "{from} -> {to}");
        }
    }
    assert_eq!(
        all.map(GroupState::name),
        [
            "Empty",
            "PreparingRebalance",
            "CompletingRebalance",
            "Stable",
            "Dead"
        ]
    );
}

#[test]
fn retried_join_answers_the_superseded_request() {
    let mut h = H::new();
    let (a, first) = h.new_member(RANGE);
    let second = h.join(&a, RANGE);
    assert_eq!(
        h.join_resp(first).error,
        Some(ResponseError::RebalanceInProgress)
    );
    h.advance(3_000);
    assert_eq!(h.join_resp(second).generation_id, 1);
}

#[test]
fn next_deadline_tracks_timers() {
    let mut h = H::new();
    assert_eq!(h.c.next_deadline(), None);
    let (_a, _) = h.new_member(RANGE);
    assert_eq!(h.c.next_deadline(), Some(h.now + 3_000));
}

#[test]
fn join_responses_wait_until_the_generation_is_stored() {
    let mut h = H::new();
    h.auto_append = false;
    let (a, ja) = h.new_member(RANGE);
    let (b, jb) = h.new_member(RANGE);
    h.advance(6_000);
    // The join phase is over, but nobody learns generation 1 before its record is durable.
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    assert_eq!(h.generation(), 1);
    assert!(!h.answered(ja) && !h.answered(jb));
    assert_eq!(h.pending.len(), 1);
    // A retried JoinGroup waits too; the request it replaces is told to retry.
    let ja2 = h.join(&a, RANGE);
    assert_eq!(
        h.join_resp(ja).error,
        Some(ResponseError::RebalanceInProgress)
    );
    assert!(!h.answered(ja2));
    // The sessions do not run out while the record is written (the JoinGroups keep them alive).
    h.advance(i64::from(SESSION) * 2);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    h.complete_append(Ok(()));
    let (ra, rb) = (h.join_resp(ja2), h.join_resp(jb));
    assert_eq!((ra.error, rb.error), (None, None));
    assert_eq!((ra.generation_id, rb.generation_id), (1, 1));
    assert_eq!(ra.leader, a);
    assert_eq!(ra.members.len(), 2, "the leader gets the member list");
    assert!(rb.members.is_empty());
    // The stored record names the members but no leader and no assignment.
    let stored = h.log.last().expect("the generation record");
    let value = gregor_group::records::decode_group_metadata_value(
        stored.value.as_deref().expect("a value"),
    )
    .expect("decodable");
    assert_eq!(value.generation, 1);
    assert_eq!(value.leader, None);
    assert_eq!(value.members.len(), 2);
    assert!(value.members.iter().all(|m| m.assignment.is_empty()));
    let sa = h.sync(&a, 1, &[(&a, b"x"), (&b, b"y")]);
    let sb = h.sync(&b, 1, &[]);
    h.complete_append(Ok(()));
    assert_eq!(h.sync_resp(sa).error, None);
    assert_eq!(h.sync_resp(sb).assignment, b"y".to_vec());
    assert_eq!(h.state(), GroupState::Stable);
}

#[test]
fn a_generation_that_cannot_be_stored_is_never_handed_out() {
    let mut h = H::new();
    h.auto_append = false;
    let (a, ja) = h.new_member(RANGE);
    let (b, jb) = h.new_member(RANGE);
    h.advance(6_000);
    h.complete_append(Err(ResponseError::NotLeaderOrFollower));
    // The members are sent to find the coordinator again; nobody heard of generation 1.
    assert_eq!(h.join_resp(ja).error, Some(ResponseError::NotCoordinator));
    assert_eq!(h.join_resp(jb).error, Some(ResponseError::NotCoordinator));
    assert_eq!(h.join_resp(ja).generation_id, -1);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert!(h.log.is_empty());
    // They rejoin; the next generation gets a number of its own.
    let ja = h.join(&a, RANGE);
    let jb = h.join(&b, RANGE);
    h.complete_append(Ok(()));
    assert_eq!(h.join_resp(ja).generation_id, 2);
    assert_eq!(h.join_resp(jb).generation_id, 2);
}

#[test]
fn a_member_leaving_while_the_generation_is_stored_restarts_the_join_phase() {
    let mut h = H::new();
    h.auto_append = false;
    let (a, ja) = h.new_member(RANGE);
    let (b, jb) = h.new_member(RANGE);
    h.advance(6_000);
    assert_eq!(h.pending.len(), 1);
    h.leave(&b);
    assert_eq!(h.join_resp(jb).error, Some(ResponseError::UnknownMemberId));
    // The record of generation 1 completes late: it answers nobody, A's JoinGroup stays parked
    // for the next join phase, which completes with A alone.
    h.complete_append(Ok(()));
    assert!(!h.answered(ja));
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    assert_eq!(h.generation(), 2);
    h.complete_all_appends();
    let r = h.join_resp(ja);
    assert_eq!((r.error, r.generation_id), (None, 2));
    assert_eq!(r.leader, a);
}
