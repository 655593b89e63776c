//! Rebuilding state from `__consumer_offsets` at load (coordinator failover / restart).

mod common;

use common::*;
use gregor_group::*;

fn reload(h: &H) -> GroupCoordinator {
    let mut c = GroupCoordinator::new(GroupConfig::default(), 7);
    for r in &h.log {
        c.replay(&r.key, r.value.as_deref()).expect("replayable");
    }
    c
}

#[test]
fn replay_rebuilds_groups_and_offsets() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[b"A", b"B"]);
    h.commit(&ids[0], 1, &[("t", 0, 10), ("t", 1, 20)]);
    h.commit(&ids[1], 1, &[("t", 1, 21)]);
    h.send(Request::OffsetCommit(commit_req(
        "simple",
        "",
        -1,
        &[("u", 3, 7)],
    )));

    let mut c = reload(&h);
    let before = h.c.group(GROUP).unwrap();
    let after = c.group(GROUP).unwrap();
    assert_eq!(
        after.state,
        GroupState::Stable,
        "members come back with the group Stable"
    );
    assert_eq!(after.generation_id, before.generation_id);
    assert_eq!(after.leader_id, before.leader_id);
    assert_eq!(after.protocol_type, before.protocol_type);
    assert_eq!(after.protocol_name, before.protocol_name);
    let summary = |g: &GroupSummary| -> Vec<_> {
        g.members
            .iter()
            .map(|m| {
                (
                    m.member_id.clone(),
                    m.client_id.clone(),
                    m.session_timeout_ms,
                    m.rebalance_timeout_ms,
                    m.assignment.clone(),
                )
            })
            .collect()
    };
    assert_eq!(summary(&after), summary(&before));
    assert_eq!(c.committed_offsets(GROUP), h.c.committed_offsets(GROUP));
    assert_eq!(c.committed_offset(GROUP, "t", 1).unwrap().offset, 21);
    assert_eq!(c.group("simple").unwrap().state, GroupState::Empty);
    assert_eq!(c.committed_offset("simple", "u", 3).unwrap().offset, 7);

    // Members resume: a heartbeat with the loaded generation is fine.
    let t = h.now + 1_000;
    c.complete_load(t);
    let effects = c.handle(
        t + 1,
        Input {
            request_id: 1,
            context: RequestContext::default(),
            request: Request::Heartbeat(HeartbeatRequest {
                group_id: GROUP.into(),
                generation_id: 1,
                member_id: ids[0].clone(),
                group_instance_id: None,
            }),
        },
    );
    assert_eq!(
        effects,
        vec![Effect::Respond {
            request_id: 1,
            response: Response::Heartbeat(HeartbeatResponse { error: None })
        }]
    );
    // The member that stays silent expires one session after loading; the group rebalances.
    let expiry = c.tick(t + i64::from(SESSION));
    assert!(expiry.is_empty());
    assert_eq!(
        c.group(GROUP).unwrap().state,
        GroupState::PreparingRebalance
    );
    assert_eq!(c.group(GROUP).unwrap().members.len(), 1);
}

#[test]
fn deleted_groups_and_offsets_stay_deleted() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1)]);
    h.send(Request::OffsetCommit(commit_req(
        "keep",
        "",
        -1,
        &[("t", 0, 5)],
    )));
    h.send(Request::DeleteGroups(DeleteGroupsRequest {
        group_ids: vec![GROUP.into()],
    }));
    let c = reload(&h);
    assert!(c.group(GROUP).is_none());
    assert!(c.committed_offset(GROUP, "t", 0).is_none());
    assert_eq!(c.committed_offset("keep", "t", 0).unwrap().offset, 5);
}

#[test]
fn an_emptied_group_reloads_empty_with_its_generation() {
    let mut h = H::new();
    let ids = h.stable_group(1, &[b"A"]);
    h.commit(&ids[0], 1, &[("t", 0, 3)]);
    h.leave(&ids[0]);
    assert_eq!(h.state(), GroupState::Empty);
    let c = reload(&h);
    let g = c.group(GROUP).unwrap();
    assert_eq!(
        (g.state, g.generation_id, g.members.len()),
        (GroupState::Empty, 2, 0)
    );
    assert_eq!(g.protocol_type.as_deref(), Some("consumer"));
    assert_eq!(c.committed_offset(GROUP, "t", 0).unwrap().offset, 3);
}

#[test]
fn static_rejoin_is_persisted() {
    let mut h = H::new();
    let ja = h.join_static("", "inst-a", RANGE);
    h.advance(3_000);
    let a = h.join_resp(ja).member_id;
    h.sync(&a, 1, &[(&a, b"x")]);
    let again = h.join_static("", "inst-a", RANGE);
    let new_a = h.join_resp(again).member_id;
    let c = reload(&h);
    let g = c.group(GROUP).unwrap();
    assert_eq!(g.members[0].member_id, new_a);
    assert_eq!(g.members[0].group_instance_id.as_deref(), Some("inst-a"));
    assert_eq!(g.leader_id.as_deref(), Some(new_a.as_str()));
    assert_eq!(&g.members[0].assignment[..], b"x");
}

#[test]
fn failed_appends_leave_no_trace_in_the_log() {
    let mut h = H::new();
    h.auto_append = false;
    h.commit("", -1, &[("t", 0, 1)]);
    h.complete_append(Err(ResponseError::RequestTimedOut));
    assert!(h.log.is_empty());
    assert!(h.c.committed_offset(GROUP, "t", 0).is_none());
}

#[test]
fn replay_rejects_corrupt_records_and_skips_foreign_ones() {
    let mut c = GroupCoordinator::new(GroupConfig::default(), 1);
    assert!(matches!(
        c.replay(&[0, 1, 0], None),
        Err(ReplayError::Codec(_))
    ));
    let key = records::encode_key(&records::RecordKey::GroupMetadata { group: "g".into() });
    assert!(matches!(
        c.replay(&key, Some(&[0, 3, 0])),
        Err(ReplayError::Codec(_))
    ));
    // Members without a protocol cannot be rebuilt.
    let value = records::encode_group_metadata_value(&records::GroupMetadataValue {
        protocol_type: "consumer".into(),
        generation: 1,
        protocol: None,
        leader: None,
        current_state_timestamp: -1,
        members: vec![records::MemberMetadata {
            member_id: "m".into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "h".into(),
            rebalance_timeout: -1,
            session_timeout: 10_000,
            subscription: Default::default(),
            assignment: Default::default(),
        }],
    });
    assert!(matches!(
        c.replay(&key, Some(&value)),
        Err(ReplayError::MembersWithoutProtocol { .. })
    ));
    // KIP-848 records load into consumer groups; a truncated one is refused.
    assert!(c.replay(&[0, 3, 0, 1, b'g'], Some(&[0, 0])).is_err());
    assert_eq!(
        c.replay(&[0, 3, 0, 1, b'g'], Some(&[0, 0, 0, 0, 0, 5, 0])),
        Ok(())
    );
    assert_eq!(c.consumer_group("g").map(|g| g.group_epoch), Some(5));
    // Record types of other group kinds (share groups: 10 and up) are skipped.
    assert_eq!(c.replay(&[0, 11, 0, 1, b's'], Some(&[0, 0])), Ok(()));
    assert!(c.group_ids().is_empty());
}

#[test]
fn unload_answers_a_pending_static_rejoin_once() {
    let mut h = H::new();
    let ja = h.join_static("", "inst-a", RANGE);
    h.advance(3_000);
    let a = h.join_resp(ja).member_id;
    h.sync(&a, 1, &[(&a, b"x")]);
    h.auto_append = false;
    let again = h.join_static("", "inst-a", RANGE);
    assert!(!h.answered(again));
    let effects = h.c.unload();
    h.process(effects); // the harness fails on a second answer
    assert_eq!(
        h.join_resp(again).error,
        Some(ResponseError::NotCoordinator)
    );
}

#[test]
fn unload_answers_everything_parked_with_not_coordinator() {
    let mut h = H::new();
    let (a, ja) = h.new_member(RANGE);
    h.auto_append = false;
    let c = h.commit("", -1, &[]);
    assert!(h.answered(c), "nothing to write, answered at once");
    let mut req = commit_req("other", "", -1, &[("t", 0, 1)]);
    req.group_id = "other".into();
    let pending_commit = h.send(Request::OffsetCommit(req));
    assert!(!h.answered(ja) && !h.answered(pending_commit));
    let effects = h.c.unload();
    h.process(effects);
    assert_eq!(h.join_resp(ja).error, Some(ResponseError::NotCoordinator));
    assert_eq!(
        commit_errors(&h.commit_resp(pending_commit)),
        vec![Some(ResponseError::NotCoordinator)]
    );
    assert!(h.c.group(GROUP).is_none());
    assert_eq!(h.c.next_deadline(), None);
    let _ = a;
}

fn commit_errors(r: &OffsetCommitResponse) -> Vec<Option<ResponseError>> {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error))
        .collect()
}

#[test]
fn a_generation_stored_without_its_assignment_reloads_into_a_rebalance() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[b"A", b"B"]);
    h.commit(&ids[0], 1, &[("t", 0, 10)]);
    // A third member makes generation 2; its JoinGroups are answered (the generation is
    // stored), and then the coordinator fails before the leader's SyncGroup arrives.
    let (c3, j3) = h.new_member(RANGE);
    let ja = h.join(&ids[0], RANGE);
    let jb = h.join(&ids[1], RANGE);
    assert_eq!(h.join_resp(j3).generation_id, 2);
    assert_eq!(h.join_resp(ja).generation_id, 2);
    assert_eq!(h.join_resp(jb).generation_id, 2);

    let mut c = reload(&h);
    let t = h.now + 1_000;
    let effects = c.complete_load(t);
    assert!(effects.is_empty());
    let g = c.group(GROUP).unwrap();
    // Generation 2 has no assignment anywhere: the group rebalances instead of waiting for a
    // SyncGroup the new coordinator could only answer with nothing.
    assert_eq!(g.state, GroupState::PreparingRebalance);
    assert_eq!(g.generation_id, 2);
    assert_eq!(g.members.len(), 3);
    assert_eq!(c.committed_offset(GROUP, "t", 0).unwrap().offset, 10);

    let send = |c: &mut GroupCoordinator, id: u64, at: i64, request: Request| {
        c.handle(
            at,
            Input {
                request_id: id,
                context: RequestContext::default(),
                request,
            },
        )
    };
    let sync = send(
        &mut c,
        1,
        t + 1,
        Request::SyncGroup(SyncGroupRequest {
            group_id: GROUP.into(),
            generation_id: 2,
            member_id: ids[0].clone(),
            group_instance_id: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignments: vec![],
        }),
    );
    assert!(
        matches!(&sync[..], [Effect::Respond { response: Response::SyncGroup(r), .. }]
            if r.error == Some(ResponseError::RebalanceInProgress)),
        "{sync:?}"
    );
    // Everyone rejoins: the next generation is 3, never a second generation 2.
    let mut out = Vec::new();
    for (i, m) in [&ids[0], &ids[1], &c3].into_iter().enumerate() {
        out.extend(send(
            &mut c,
            10 + i as u64,
            t + 2,
            Request::JoinGroup(join_req(m, None, RANGE)),
        ));
    }
    let mut answered = Vec::new();
    while let Some(effect) = out.pop() {
        match effect {
            Effect::Append { token, .. } => out.extend(c.append_completed(t + 2, token, Ok(()))),
            Effect::Respond {
                response: Response::JoinGroup(r),
                ..
            } => answered.push((r.error, r.generation_id)),
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(answered, vec![(None, 3); 3]);
}
