//! OffsetCommit / OffsetFetch, DescribeGroups / ListGroups / DeleteGroups.

mod common;

use common::*;
use gregor_group::*;

fn commit_errors(r: &OffsetCommitResponse) -> Vec<Option<ResponseError>> {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error))
        .collect()
}

#[test]
fn simple_commit_creates_an_empty_group_and_fetch_returns_it() {
    let mut h = H::new();
    let id = h.commit("", -1, &[("t", 0, 10), ("t", 1, 11), ("u", 0, 5)]);
    assert_eq!(commit_errors(&h.commit_resp(id)), vec![None; 3]);
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(
        h.c.group(GROUP).unwrap().protocol_type,
        None,
        "a simple group"
    );

    let f = h.fetch(Some(&[("t", &[0, 1, 2])]));
    let p = &f.topics[0].partitions;
    assert_eq!(
        (
            p[0].committed_offset,
            p[0].committed_leader_epoch,
            p[0].metadata.as_str()
        ),
        (10, 3, "m10")
    );
    assert_eq!(p[1].committed_offset, 11);
    assert_eq!(
        (
            p[2].committed_offset,
            p[2].committed_leader_epoch,
            p[2].metadata.as_str()
        ),
        (-1, -1, "")
    );
    // All offsets of the group, by topic then partition.
    let all = h.fetch(None);
    let flat: Vec<(String, i32, i64)> = all
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(move |p| (t.name.clone(), p.partition_index, p.committed_offset))
        })
        .collect();
    assert_eq!(
        flat,
        vec![("t".into(), 0, 10), ("t".into(), 1, 11), ("u".into(), 0, 5)]
    );
    // An unknown group has no offsets and no error.
    let id = h.send(Request::OffsetFetch(OffsetFetchRequest {
        group_id: "other".into(),
        topics: None,
        require_stable: true,
    }));
    assert_eq!(
        h.responses[&id],
        Response::OffsetFetch(OffsetFetchResponse {
            group_id: "other".into(),
            error: None,
            topics: vec![]
        })
    );
    // The commit timestamp is the coordinator's clock.
    assert_eq!(
        h.c.committed_offset(GROUP, "t", 0)
            .unwrap()
            .commit_timestamp_ms,
        h.now
    );
}

#[test]
fn commit_generation_checks() {
    let mut h = H::new();
    // Unknown group with a generation: ILLEGAL_GENERATION before v9, GROUP_ID_NOT_FOUND since.
    let req = commit_req(GROUP, "m", 1, &[("t", 0, 1)]);
    let id = h.send_with(8, "c", Request::OffsetCommit(req.clone()));
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::IllegalGeneration)]
    );
    let id = h.send_with(9, "c", Request::OffsetCommit(req));
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::GroupIdNotFound)]
    );
    assert!(h.c.group(GROUP).is_none());

    let ids = h.stable_group(2, &[b"A", b"B"]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    let ok = h.commit(&a, 1, &[("t", 0, 100)]);
    assert_eq!(commit_errors(&h.commit_resp(ok)), vec![None]);
    let id = h.commit(&a, 2, &[("t", 0, 1)]);
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::IllegalGeneration)]
    );
    let id = h.commit("stranger", 1, &[("t", 0, 1)]);
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::UnknownMemberId)]
    );
    // A simple commit to a group with members is refused.
    let id = h.commit("", -1, &[("t", 0, 1)]);
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::UnknownMemberId)]
    );
    // PreparingRebalance: the previous generation may still commit (before revoking).
    h.join(&a, RANGE);
    let id = h.commit(&b, 1, &[("t", 1, 7)]);
    assert_eq!(commit_errors(&h.commit_resp(id)), vec![None]);
    // CompletingRebalance: REBALANCE_IN_PROGRESS.
    h.join(&b, RANGE);
    assert_eq!(h.state(), GroupState::CompletingRebalance);
    let id = h.commit(&b, 2, &[("t", 1, 8)]);
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::RebalanceInProgress)]
    );
    assert_eq!(h.c.committed_offset(GROUP, "t", 0).unwrap().offset, 100);
    assert_eq!(h.c.committed_offset(GROUP, "t", 1).unwrap().offset, 7);
}

#[test]
fn commit_keeps_the_session_alive() {
    let mut h = H::new();
    let ids = h.stable_group(1, &[b"A"]);
    for _ in 0..5 {
        h.advance(i64::from(SESSION) - 1_000);
        let id = h.commit(&ids[0], 1, &[("t", 0, 1)]);
        assert_eq!(commit_errors(&h.commit_resp(id)), vec![None]);
    }
    assert_eq!(h.state(), GroupState::Stable);
}

#[test]
fn oversized_metadata_fails_only_that_partition() {
    let mut h = H::new();
    let mut req = commit_req(GROUP, "", -1, &[("t", 0, 1), ("t", 1, 2)]);
    req.topics[0].partitions[0].committed_metadata = Some("x".repeat(4_097));
    req.topics[0].partitions[1].committed_metadata = Some("y".repeat(4_096));
    let id = h.send(Request::OffsetCommit(req));
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::OffsetMetadataTooLarge), None]
    );
    assert!(h.c.committed_offset(GROUP, "t", 0).is_none());
    assert_eq!(
        h.c.committed_offset(GROUP, "t", 1).unwrap().metadata.len(),
        4_096
    );
    // Java counts UTF-16 units: 4096 two-byte characters fit.
    let mut req = commit_req(GROUP, "", -1, &[("t", 2, 3)]);
    req.topics[0].partitions[0].committed_metadata = Some("\u{e9}".repeat(4_096));
    let id = h.send(Request::OffsetCommit(req));
    assert_eq!(commit_errors(&h.commit_resp(id)), vec![None]);
}

#[test]
fn commits_are_durable_before_the_response_and_visible_only_then() {
    let mut h = H::new();
    h.auto_append = false;
    let id = h.commit("", -1, &[("t", 0, 42)]);
    assert!(!h.answered(id));
    assert_eq!(
        h.fetch(Some(&[("t", &[0])])).topics[0].partitions[0].committed_offset,
        -1
    );
    let (_, records) = h.pending.front().unwrap().clone();
    assert_eq!(records.len(), 1);
    assert_eq!(
        records::decode_key(&records[0].key).unwrap(),
        records::RecordKey::OffsetCommit {
            group: GROUP.into(),
            topic: "t".into(),
            partition: 0
        }
    );
    let v = records::decode_offset_commit_value(records[0].value.as_ref().unwrap()).unwrap();
    assert_eq!(
        (v.offset, v.leader_epoch, v.metadata.as_str()),
        (42, 3, "m42")
    );
    h.complete_append(Ok(()));
    assert_eq!(commit_errors(&h.commit_resp(id)), vec![None]);
    assert_eq!(
        h.fetch(Some(&[("t", &[0])])).topics[0].partitions[0].committed_offset,
        42
    );

    // A failed append: the client gets the mapped error and the offset is not committed.
    let id = h.commit("", -1, &[("t", 0, 43)]);
    h.complete_append(Err(ResponseError::NotEnoughReplicas));
    assert_eq!(
        commit_errors(&h.commit_resp(id)),
        vec![Some(ResponseError::CoordinatorNotAvailable)]
    );
    assert_eq!(h.c.committed_offset(GROUP, "t", 0).unwrap().offset, 42);
}

#[test]
fn describe_and_list_groups() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1)]);
    let d = h.describe(GROUP);
    assert_eq!(
        (
            d.group_state.as_str(),
            d.protocol_type.as_str(),
            d.members.len()
        ),
        ("Empty", "", 0)
    );
    let d = h.describe("missing");
    assert_eq!((d.error, d.group_state.as_str()), (None, "Dead"));

    let mut h = H::new();
    let (a, _) = h.new_member(RANGE);
    let d = h.describe(GROUP);
    assert_eq!(d.group_state, "PreparingRebalance");
    assert_eq!(d.protocol_data, "");
    assert!(
        d.members[0].member_metadata.is_empty(),
        "no metadata before Stable"
    );
    h.advance(3_000);
    assert_eq!(h.describe(GROUP).group_state, "CompletingRebalance");
    h.sync(&a, 1, &[(&a, b"asg")]);
    let d = h.describe(GROUP);
    assert_eq!(d.group_state, "Stable");
    assert_eq!(d.protocol_data, "range");
    let m = &d.members[0];
    assert_eq!(
        (
            m.member_id.as_str(),
            m.client_id.as_str(),
            m.client_host.as_str()
        ),
        (a.as_str(), "client", "/127.0.0.1")
    );
    assert_eq!(
        (&m.member_metadata[..], &m.member_assignment[..]),
        (&b"sub"[..], &b"asg"[..])
    );

    let list = |h: &mut H, states: &[&str], types: &[&str]| -> Vec<(String, String)> {
        let id = h.send(Request::ListGroups(ListGroupsRequest {
            states_filter: states.iter().map(|s| s.to_string()).collect(),
            types_filter: types.iter().map(|s| s.to_string()).collect(),
        }));
        match &h.responses[&id] {
            Response::ListGroups(r) => r
                .groups
                .iter()
                .map(|g| (g.group_id.clone(), g.group_state.clone()))
                .collect(),
            other => panic!("{other:?}"),
        }
    };
    h.send(Request::OffsetCommit(commit_req(
        "simple",
        "",
        -1,
        &[("t", 0, 1)],
    )));
    assert_eq!(
        list(&mut h, &[], &[]),
        vec![
            (GROUP.into(), "Stable".into()),
            ("simple".into(), "Empty".into())
        ]
    );
    assert_eq!(
        list(&mut h, &["stable"], &[]),
        vec![(GROUP.into(), "Stable".into())]
    );
    assert_eq!(
        list(&mut h, &["Empty", "Dead"], &["Classic"]),
        vec![("simple".into(), "Empty".into())]
    );
    assert!(list(&mut h, &[], &["consumer"]).is_empty());
}

#[test]
fn delete_groups() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1), ("t", 1, 2)]);
    // "busy" has a member.
    let mut req = join_req("", None, RANGE);
    req.group_id = "busy".into();
    h.send_with(3, "c", Request::JoinGroup(req));

    h.auto_append = false;
    let id = h.send(Request::DeleteGroups(DeleteGroupsRequest {
        group_ids: vec![GROUP.into(), "busy".into(), "missing".into()],
    }));
    assert!(!h.answered(id), "answered once the tombstones are durable");
    assert_eq!(h.state(), GroupState::Dead);
    // A Dead group refuses joins and commits meanwhile.
    let j = h.join("", RANGE);
    assert_eq!(
        h.join_resp(j).error,
        Some(ResponseError::CoordinatorNotAvailable)
    );
    let c = h.commit("", -1, &[("t", 0, 9)]);
    assert_eq!(
        commit_errors(&h.commit_resp(c)),
        vec![Some(ResponseError::CoordinatorNotAvailable)]
    );
    assert_eq!(
        h.heartbeat("m", 0),
        Some(ResponseError::CoordinatorNotAvailable)
    );
    let sy = h.sync("m", 0, &[]);
    assert_eq!(
        h.sync_resp(sy).error,
        Some(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(
        h.leave("m").error,
        Some(ResponseError::CoordinatorNotAvailable)
    );
    assert_eq!(h.describe(GROUP).group_state, "Dead");

    let (_, recs) = h.pending.front().unwrap().clone();
    let keys: Vec<_> = recs
        .iter()
        .map(|r| (records::decode_key(&r.key).unwrap(), r.value.is_none()))
        .collect();
    assert_eq!(
        keys,
        vec![
            (
                records::RecordKey::OffsetCommit {
                    group: GROUP.into(),
                    topic: "t".into(),
                    partition: 0
                },
                true
            ),
            (
                records::RecordKey::OffsetCommit {
                    group: GROUP.into(),
                    topic: "t".into(),
                    partition: 1
                },
                true
            ),
            (
                records::RecordKey::GroupMetadata {
                    group: GROUP.into()
                },
                true
            ),
        ]
    );
    h.complete_append(Ok(()));
    let r = match &h.responses[&id] {
        Response::DeleteGroups(r) => r.clone(),
        other => panic!("{other:?}"),
    };
    let errors: Vec<_> = r
        .results
        .iter()
        .map(|r| (r.group_id.as_str(), r.error))
        .collect();
    assert_eq!(
        errors,
        vec![
            (GROUP, None),
            ("busy", Some(ResponseError::NonEmptyGroup)),
            ("missing", Some(ResponseError::GroupIdNotFound)),
        ]
    );
    assert!(h.c.group(GROUP).is_none());
    assert_eq!(
        h.fetch(Some(&[("t", &[0])])).topics[0].partitions[0].committed_offset,
        -1
    );
    assert_eq!(h.describe(GROUP).group_state, "Dead");
}

#[test]
fn failed_delete_restores_the_group() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 1)]);
    h.auto_append = false;
    let id = h.send(Request::DeleteGroups(DeleteGroupsRequest {
        group_ids: vec![GROUP.into()],
    }));
    h.complete_append(Err(ResponseError::NotLeaderOrFollower));
    match &h.responses[&id] {
        Response::DeleteGroups(r) => {
            assert_eq!(r.results[0].error, Some(ResponseError::NotCoordinator))
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(h.state(), GroupState::Empty);
    assert_eq!(h.c.committed_offset(GROUP, "t", 0).unwrap().offset, 1);
}

#[test]
fn delete_covers_commits_still_in_flight() {
    let mut h = H::new();
    h.auto_append = false;
    let c = h.commit("", -1, &[("t", 5, 1)]);
    let d = h.send(Request::DeleteGroups(DeleteGroupsRequest {
        group_ids: vec![GROUP.into()],
    }));
    let (_, recs) = h.pending.back().unwrap().clone();
    assert!(recs.iter().any(|r| r.value.is_none()
        && records::decode_key(&r.key).unwrap()
            == records::RecordKey::OffsetCommit {
                group: GROUP.into(),
                topic: "t".into(),
                partition: 5
            }));
    h.complete_all_appends();
    assert!(h.answered(c) && h.answered(d));
    assert!(h.c.committed_offset(GROUP, "t", 5).is_none());
    assert!(h.c.group(GROUP).is_none());
}

fn offset_delete(h: &mut H, group: &str, topics: &[(&str, &[i32])]) -> u64 {
    h.send(Request::OffsetDelete(OffsetDeleteRequest {
        group_id: group.into(),
        topics: topics
            .iter()
            .map(|(t, ps)| (t.to_string(), ps.to_vec()))
            .collect(),
    }))
}

fn offset_delete_resp(h: &H, id: u64) -> OffsetDeleteResponse {
    match h.responses.get(&id) {
        Some(Response::OffsetDelete(r)) => r.clone(),
        other => panic!("expected an OffsetDelete response, got {other:?}"),
    }
}

fn committed(h: &mut H, topic: &str, partition: i32) -> i64 {
    h.fetch(Some(&[(topic, &[partition])])).topics[0].partitions[0].committed_offset
}

#[test]
fn offset_delete_removes_offsets_durably_and_refuses_unknown_groups() {
    let mut h = H::new();
    h.commit("", -1, &[("t", 0, 10), ("t", 1, 11), ("u", 0, 5)]);
    let before = h.log.len();
    // Partition 5 has no offset: nothing to write for it, and no error.
    let id = offset_delete(&mut h, GROUP, &[("t", &[0, 5])]);
    let r = offset_delete_resp(&h, id);
    assert_eq!(r.error, None);
    assert_eq!(
        r.topics,
        vec![("t".to_string(), vec![(0, None), (5, None)])]
    );
    assert_eq!(h.log.len(), before + 1, "one tombstone");
    assert!(h.log.last().unwrap().value.is_none());
    assert_eq!(committed(&mut h, "t", 0), -1);
    assert_eq!(committed(&mut h, "t", 1), 11);

    let id = offset_delete(&mut h, "nobody", &[("t", &[0])]);
    assert_eq!(
        offset_delete_resp(&h, id).error,
        Some(ResponseError::GroupIdNotFound)
    );

    // A failed write answers its error and keeps the offset.
    h.auto_append = false;
    let id = offset_delete(&mut h, GROUP, &[("u", &[0])]);
    assert!(!h.answered(id));
    h.complete_append(Err(ResponseError::NotLeaderOrFollower));
    // Mapped as every coordinator write failure is: the client looks for the coordinator.
    assert_eq!(
        offset_delete_resp(&h, id).error,
        Some(ResponseError::NotCoordinator)
    );
    h.auto_append = true;
    assert_eq!(committed(&mut h, "u", 0), 5);
}

#[test]
fn offset_delete_keeps_the_offsets_of_topics_the_group_consumes() {
    let mut h = H::new();
    let sub = gregor_assign::protocol::Subscription {
        topics: vec!["t".into()],
        ..Default::default()
    };
    let meta = gregor_assign::protocol::encode_subscription(&sub, 0).unwrap();
    let protocols: &[(&str, &[u8])] = &[("range", &meta)];
    let (member, join) = h.new_member(protocols);
    h.advance(i64::from(h.c.config().initial_rebalance_delay_ms) * 2);
    let generation = h.join_resp(join).generation_id;
    h.sync(&member, generation, &[(member.as_str(), b"a")]);
    assert_eq!(h.state(), GroupState::Stable);
    h.commit(&member, generation, &[("t", 0, 7), ("old", 0, 3)]);

    let id = offset_delete(&mut h, GROUP, &[("t", &[0]), ("old", &[0])]);
    let r = offset_delete_resp(&h, id);
    assert_eq!(r.error, None);
    assert_eq!(
        r.topics,
        vec![
            (
                "t".to_string(),
                vec![(0, Some(ResponseError::GroupSubscribedToTopic))]
            ),
            ("old".to_string(), vec![(0, None)]),
        ]
    );
    assert_eq!(committed(&mut h, "t", 0), 7);
    assert_eq!(committed(&mut h, "old", 0), -1);
}
