//! Static membership (KIP-345) and LeaveGroup batches.

mod common;

use common::*;
use gregor_group::*;

/// Two static members (A leads) in a Stable generation 1. Returns their member ids.
fn static_group(h: &mut H) -> (String, String) {
    let ja = h.join_static("", "inst-a", RANGE);
    let jb = h.join_static("", "inst-b", RANGE);
    assert!(
        !h.answered(ja),
        "static members join without MEMBER_ID_REQUIRED"
    );
    h.advance(6_000);
    let (a, b) = (h.join_resp(ja).member_id, h.join_resp(jb).member_id);
    assert!(a.starts_with("inst-a-"), "{a}");
    h.sync(&b, 1, &[]);
    h.sync(&a, 1, &[(&a, b"for-a"), (&b, b"for-b")]);
    assert_eq!(h.state(), GroupState::Stable);
    (a, b)
}

fn static_heartbeat(
    h: &mut H,
    member: &str,
    instance: &str,
    generation: i32,
) -> Option<ResponseError> {
    let id = h.send(Request::Heartbeat(HeartbeatRequest {
        group_id: GROUP.into(),
        generation_id: generation,
        member_id: member.into(),
        group_instance_id: Some(instance.into()),
    }));
    h.hb_error(id)
}

#[test]
fn restarted_static_follower_rejoins_without_rebalance() {
    let mut h = H::new();
    let (a, b) = static_group(&mut h);
    h.auto_append = false;
    let rejoin = h.join_static("", "inst-b", RANGE);
    assert!(
        !h.answered(rejoin),
        "answered once the new member id is durable"
    );
    assert_eq!(h.state(), GroupState::Stable);
    h.complete_append(Ok(()));
    let r = h.join_resp(rejoin);
    assert_eq!(r.error, None);
    assert_eq!(r.generation_id, 1, "no new generation");
    assert_eq!(r.leader, a);
    assert!(r.members.is_empty());
    let new_b = r.member_id.clone();
    assert_ne!(new_b, b);
    assert_eq!(h.state(), GroupState::Stable);
    assert_eq!(h.generation(), 1);

    // The new id has the old assignment; the old id is fenced.
    h.auto_append = true;
    let s = h.sync(&new_b, 1, &[]);
    assert_eq!(&h.sync_resp(s).assignment[..], b"for-b");
    assert_eq!(
        static_heartbeat(&mut h, &b, "inst-b", 1),
        Some(ResponseError::FencedInstanceId)
    );
    assert_eq!(static_heartbeat(&mut h, &new_b, "inst-b", 1), None);
    assert_eq!(h.heartbeat(&b, 1), Some(ResponseError::UnknownMemberId));
    // The record names the new member id with the old assignment.
    let v = records::decode_group_metadata_value(h.log.last().unwrap().value.as_ref().unwrap())
        .unwrap();
    assert_eq!(v.members[1].member_id, new_b);
    assert_eq!(&v.members[1].assignment[..], b"for-b");
}

#[test]
fn restarted_static_leader_keeps_the_assignment() {
    // v9+: told it leads, with skip_assignment.
    let mut h = H::new();
    let (a, _b) = static_group(&mut h);
    let rejoin = h.join_static("", "inst-a", RANGE);
    let r = h.join_resp(rejoin);
    assert_eq!(r.generation_id, 1);
    assert_eq!(r.leader, r.member_id);
    assert!(r.skip_assignment);
    assert_eq!(r.members.len(), 2);
    assert_ne!(r.member_id, a);
    assert_eq!(
        h.c.group(GROUP).unwrap().leader_id,
        Some(r.member_id.clone())
    );

    // Before v9: told the old leader id, so it acts as a follower and does not reassign.
    let mut h = H::new();
    let (a, _b) = static_group(&mut h);
    let rejoin = h.send_with(
        5,
        "client",
        Request::JoinGroup(join_req("", Some("inst-a"), RANGE)),
    );
    let r = h.join_resp(rejoin);
    assert_eq!(r.leader, a);
    assert!(!r.skip_assignment && r.members.is_empty());
    let s = h.sync(&r.member_id, 1, &[]);
    assert_eq!(&h.sync_resp(s).assignment[..], b"for-a");
}

#[test]
fn static_member_rejoin_that_changes_the_selected_protocol_rebalances() {
    let mut h = H::new();
    let rr_first: &[(&str, &[u8])] = &[("roundrobin", b"r"), ("range", b"g")];
    let range_first: &[(&str, &[u8])] = &[("range", b"g"), ("roundrobin", b"r")];
    let ja = h.join_static("", "inst-a", range_first);
    let jb = h.join_static("", "inst-b", rr_first);
    let jc = h.join_static("", "inst-c", range_first);
    h.advance(6_000);
    let a = h.join_resp(ja).member_id;
    assert_eq!(
        h.join_resp(ja).protocol_name.as_deref(),
        Some("range"),
        "2 votes to 1"
    );
    for id in [jb, jc] {
        let m = h.join_resp(id).member_id;
        h.sync(&m, 1, &[]);
    }
    h.sync(&a, 1, &[]);
    assert_eq!(h.state(), GroupState::Stable);

    // C restarts preferring range still: selected protocol unchanged, no rebalance.
    let same = h.join_static("", "inst-c", range_first);
    assert_eq!(h.join_resp(same).generation_id, 1);
    assert_eq!(h.state(), GroupState::Stable);
    // C restarts preferring roundrobin: the vote would flip, so the group rebalances.
    let flip = h.join_static("", "inst-c", rr_first);
    assert!(!h.answered(flip));
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    h.join(&a, range_first);
    let b = h.c.group(GROUP).unwrap().members[1].member_id.clone();
    h.send(Request::JoinGroup(join_req(&b, Some("inst-b"), rr_first)));
    let r = h.join_resp(flip);
    assert_eq!(
        (r.generation_id, r.protocol_name.as_deref()),
        (2, Some("roundrobin"))
    );
}

#[test]
fn static_replacement_fences_the_parked_old_instance() {
    let mut h = H::new();
    let (a, b) = static_group(&mut h);
    // A rebalance starts; the old B instance parks its JoinGroup...
    let ja = h.join(&a, RANGE);
    let old_b = h.send(Request::JoinGroup(join_req(&b, Some("inst-b"), RANGE)));
    assert!(h.answered(ja) && h.answered(old_b));
    // ...in generation 2 both sync-wait; now a new inst-b process starts.
    let sb = h.send(Request::SyncGroup(SyncGroupRequest {
        group_id: GROUP.into(),
        generation_id: 2,
        member_id: b.clone(),
        group_instance_id: Some("inst-b".into()),
        ..Default::default()
    }));
    assert!(!h.answered(sb));
    let new_b = h.join_static("", "inst-b", RANGE);
    assert_eq!(h.sync_resp(sb).error, Some(ResponseError::FencedInstanceId));
    // CompletingRebalance: replacing a member forces a new rebalance.
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    assert!(!h.answered(new_b));
    let ja = h.join(&a, RANGE);
    assert_eq!(h.join_resp(new_b).generation_id, 3);
    assert_eq!(h.join_resp(ja).members.len(), 2);
}

#[test]
fn static_members_that_did_not_rejoin_stay_until_their_session_expires() {
    let mut h = H::new();
    let (a, b) = static_group(&mut h);
    let ja = h.join(&a, RANGE);
    // B (static) heartbeats but does not rejoin within the rebalance timeout...
    for _ in 0..(REBALANCE / 5_000) {
        h.advance(5_000);
        static_heartbeat(&mut h, &b, "inst-b", 1);
    }
    // ...and is kept: the leader sees it.
    let r = h.join_resp(ja);
    assert_eq!(r.members.len(), 2);
    assert!(r.members.iter().any(|m| m.member_id == b));
    // Its session (restarted at the end of the join phase) then expires.
    h.advance(i64::from(SESSION));
    assert!(h
        .c
        .group(GROUP)
        .unwrap()
        .members
        .iter()
        .all(|m| m.member_id != b));
}

#[test]
fn leave_group_batch_reports_per_member_errors() {
    let mut h = H::new();
    let (a, b) = static_group(&mut h);
    let (c, jc) = h.new_member(RANGE);
    h.join(&a, RANGE);
    h.send(Request::JoinGroup(join_req(&b, Some("inst-b"), RANGE)));
    assert!(h.answered(jc));
    let id = h.send(Request::LeaveGroup(LeaveGroupRequest {
        group_id: GROUP.into(),
        members: vec![
            MemberIdentity {
                member_id: c.clone(),
                ..Default::default()
            },
            MemberIdentity {
                member_id: String::new(),
                group_instance_id: Some("inst-a".into()),
                reason: Some("admin removal".into()),
            },
            MemberIdentity {
                member_id: "stranger".into(),
                ..Default::default()
            },
            MemberIdentity {
                member_id: String::new(),
                group_instance_id: Some("inst-zzz".into()),
                reason: None,
            },
            MemberIdentity {
                member_id: "impostor".into(),
                group_instance_id: Some("inst-b".into()),
                reason: None,
            },
        ],
    }));
    let r = h.leave_resp(id);
    assert_eq!(r.error, None);
    let errors: Vec<Option<ResponseError>> = r.members.iter().map(|m| m.error).collect();
    assert_eq!(
        errors,
        vec![
            None,
            None,
            Some(ResponseError::UnknownMemberId),
            Some(ResponseError::UnknownMemberId),
            Some(ResponseError::FencedInstanceId),
        ]
    );
    assert_eq!(r.members[1].group_instance_id.as_deref(), Some("inst-a"));
    let g = h.c.group(GROUP).unwrap();
    assert_eq!(g.members.len(), 1);
    assert_eq!(g.members[0].member_id, b);
    assert_eq!(
        g.leader_id.as_deref(),
        Some(b.as_str()),
        "leadership passes on"
    );
    assert_eq!(
        h.state(),
        GroupState::PreparingRebalance,
        "leaving triggers a rebalance"
    );
    // The static member leaving by LeaveGroup (by member id) is removed too.
    let r = h.send(Request::LeaveGroup(LeaveGroupRequest {
        group_id: GROUP.into(),
        members: vec![MemberIdentity {
            member_id: b.clone(),
            group_instance_id: Some("inst-b".into()),
            reason: None,
        }],
    }));
    assert_eq!(h.leave_resp(r).members[0].error, None);
    assert_eq!(h.state(), GroupState::Empty);
}

#[test]
fn leave_group_errors_and_legacy_shape() {
    let mut h = H::new();
    let mut req = LeaveGroupRequest {
        group_id: String::new(),
        members: vec![MemberIdentity {
            member_id: "m".into(),
            ..Default::default()
        }],
    };
    let id = h.send(Request::LeaveGroup(req.clone()));
    assert_eq!(h.leave_resp(id).error, Some(ResponseError::InvalidGroupId));
    req.group_id = "nope".into();
    let id = h.send(Request::LeaveGroup(req));
    assert_eq!(
        h.leave_resp(id).legacy_error(),
        Some(ResponseError::UnknownMemberId)
    );
    h.stable_group(1, &[b"A"]);
    let r = h.leave("stranger");
    assert_eq!(r.error, None);
    assert_eq!(
        r.legacy_error(),
        Some(ResponseError::UnknownMemberId),
        "v0-v2 carry the member's error"
    );
    // A pending member (MEMBER_ID_REQUIRED) may leave before joining.
    let first = h.join("", RANGE);
    let pending = h.join_resp(first).member_id;
    assert_eq!(h.leave(&pending).legacy_error(), None);
    assert!(h.c.group(GROUP).unwrap().pending_members.is_empty());
}
