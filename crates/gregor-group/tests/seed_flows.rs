//! The flows of seed 004 (classic rebalance protocol), with real consumer-protocol bytes.

mod common;

use bytes::Bytes;
use common::*;
use gregor_assign::protocol::{self, Assignment, Subscription};
use gregor_group::*;

const TOPIC: &str = "b1.offsets.demo";

fn subscription(owned: &[i32], generation: i32) -> Vec<u8> {
    let sub = Subscription {
        topics: vec![TOPIC.to_string()],
        owned_partitions: if owned.is_empty() {
            vec![]
        } else {
            vec![(TOPIC.to_string(), owned.to_vec())]
        },
        generation_id: generation,
        ..Default::default()
    };
    protocol::encode_subscription(&sub, 3)
        .expect("encodable")
        .to_vec()
}

fn assignment(partitions: &[i32]) -> Vec<u8> {
    let a = Assignment {
        partitions: vec![(TOPIC.to_string(), partitions.to_vec())],
        user_data: None,
    };
    protocol::encode_assignment(&a, 3)
        .expect("encodable")
        .to_vec()
}

fn partitions_of(bytes: &Bytes) -> Vec<i32> {
    let (_, a) = protocol::decode_assignment(bytes).expect("decodable");
    protocol::flatten(&a.partitions)
        .into_iter()
        .map(|(_, p)| p)
        .collect()
}

/// Seed 004, experiment 1 (eager, range): A alone gets 0,1,2 after the 3 s initial delay; B joins,
/// A learns of it through its heartbeat, rejoins, both are in generation 2 (A 0,1; B 2); B leaves,
/// A learns it on its next heartbeat and gets everything back in generation 3.
#[test]
fn two_consumers_join_then_one_leaves() {
    let mut h = H::new();
    let sub = subscription(&[], -1);
    let protocols: &[(&str, &[u8])] = &[("range", &sub)];
    let t0 = h.now;

    let (a, ja) = h.new_member(protocols);
    h.advance(3_000);
    let r = h.join_resp(ja);
    assert_eq!(
        h.now - t0,
        3_000,
        "first assignment waits group.initial.rebalance.delay.ms"
    );
    assert_eq!((r.generation_id, r.leader.as_str()), (1, a.as_str()));
    let all = assignment(&[0, 1, 2]);
    let sa = h.sync(&a, 1, &[(&a, &all)]);
    assert_eq!(partitions_of(&h.sync_resp(sa).assignment), vec![0, 1, 2]);

    // B joins at 8 s; A heartbeats every 3 s.
    h.advance(5_000);
    let (b, jb) = h.new_member(protocols);
    assert!(!h.answered(jb));
    h.advance(1_000);
    assert_eq!(h.heartbeat(&a, 1), Some(ResponseError::RebalanceInProgress));
    let ja = h.join(&a, protocols);
    let (ra, rb) = (h.join_resp(ja), h.join_resp(jb));
    assert_eq!((ra.generation_id, rb.generation_id), (2, 2));
    assert_eq!(ra.leader, a);
    assert_eq!(ra.members.len(), 2, "the leader sees both subscriptions");
    assert!(rb.members.is_empty());
    let (for_a, for_b) = (assignment(&[0, 1]), assignment(&[2]));
    let sb = h.sync(&b, 2, &[]);
    let sa = h.sync(&a, 2, &[(&a, &for_a), (&b, &for_b)]);
    assert_eq!(partitions_of(&h.sync_resp(sa).assignment), vec![0, 1]);
    assert_eq!(partitions_of(&h.sync_resp(sb).assignment), vec![2]);

    // DescribeGroups as `kafka-consumer-groups.sh --describe --members --verbose` reads it.
    let d = h.describe(GROUP);
    assert_eq!(d.group_state, "Stable");
    assert_eq!(d.protocol_type, "consumer");
    assert_eq!(d.protocol_data, "range");
    let assigned: Vec<Vec<i32>> = d
        .members
        .iter()
        .map(|m| partitions_of(&m.member_assignment))
        .collect();
    assert_eq!(assigned, vec![vec![0, 1], vec![2]]);
    assert_eq!(&d.members[1].member_metadata[..], &sub[..]);

    // Both heartbeat for a while; then B closes (LeaveGroup); A learns it on its next heartbeat.
    for _ in 0..7 {
        h.advance(3_000);
        assert_eq!(h.heartbeat(&a, 2), None);
        assert_eq!(h.heartbeat(&b, 2), None);
    }
    assert_eq!(h.leave(&b).members[0].error, None);
    h.advance(3_000);
    assert_eq!(h.heartbeat(&a, 2), Some(ResponseError::RebalanceInProgress));
    let ja = h.join(&a, protocols);
    let r = h.join_resp(ja);
    assert_eq!((r.generation_id, r.members.len()), (3, 1));
    let sa = h.sync(&a, 3, &[(&a, &all)]);
    assert_eq!(partitions_of(&h.sync_resp(sa).assignment), vec![0, 1, 2]);
}

/// Seed 004, session expiry: a consumer whose process freezes stops heartbeating and is removed
/// after session.timeout.ms; the survivor rebalances and takes everything.
#[test]
fn frozen_consumer_is_removed_after_session_timeout() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[&assignment(&[0, 1]), &assignment(&[2])]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    // B's last heartbeat, then it freezes.
    assert_eq!(h.heartbeat(&b, 1), None);
    let frozen_at = h.now;
    let mut removed_at = None;
    for _ in 0..10 {
        h.advance(3_000);
        if h.heartbeat(&a, 1).is_some() && removed_at.is_none() {
            removed_at = Some(h.now);
        }
    }
    let removed_at = removed_at.expect("B removed");
    // Removed at frozen_at + 10 s; A hears of it at its first heartbeat after that.
    assert!(removed_at - frozen_at >= i64::from(SESSION));
    assert!(removed_at - frozen_at < i64::from(SESSION) + 3_000);
    let ja = h.join(&a, RANGE);
    assert_eq!(h.join_resp(ja).members.len(), 1);
    // When B wakes up, its heartbeat says it is no longer a member: it must rejoin from scratch.
    assert_eq!(h.heartbeat(&b, 1), Some(ResponseError::UnknownMemberId));
}

/// Seed 004, max.poll.interval.ms: the stalled consumer's heartbeat thread sends LeaveGroup; the
/// other member takes everything; when it polls again it rejoins and the group rebalances again.
#[test]
fn stalled_consumer_leaves_and_rejoins() {
    let mut h = H::new();
    let ids = h.stable_group(2, &[&assignment(&[0, 1]), &assignment(&[2])]);
    let (a, b) = (ids[0].clone(), ids[1].clone());
    h.leave(&b);
    assert_eq!(h.heartbeat(&a, 1), Some(ResponseError::RebalanceInProgress));
    let ja = h.join(&a, RANGE);
    assert_eq!(h.join_resp(ja).generation_id, 2);
    h.sync(&a, 2, &[(&a, &assignment(&[0, 1, 2]))]);
    // B polls again: a new member id, a third generation.
    let (b2, jb) = h.new_member(RANGE);
    assert_ne!(b2, b);
    assert_eq!(h.heartbeat(&a, 2), Some(ResponseError::RebalanceInProgress));
    let ja = h.join(&a, RANGE);
    assert_eq!(
        (h.join_resp(ja).generation_id, h.join_resp(jb).generation_id),
        (3, 3)
    );
}

/// Seed 004, experiment 2 (cooperative-sticky): members rejoin keeping their partitions, with the
/// owned partitions in their subscription; the coordinator just runs another generation with the
/// same protocol (two rounds: revoke, then hand over).
#[test]
fn cooperative_members_rejoin_with_owned_partitions() {
    let mut h = H::new();
    let coop = |owned: &[i32], generation| subscription(owned, generation);
    let a_sub = coop(&[], -1);
    let (a, ja) = h.new_member(&[("cooperative-sticky", &a_sub)]);
    h.advance(3_000);
    assert_eq!(
        h.join_resp(ja).protocol_name.as_deref(),
        Some("cooperative-sticky")
    );
    h.sync(&a, 1, &[(&a, &assignment(&[0, 1, 2]))]);

    // Round 1: B joins; A rejoins owning 0,1,2; the leader revokes 2 from A, gives B nothing yet.
    let b_sub = coop(&[], -1);
    let (b, _) = h.new_member(&[("cooperative-sticky", &b_sub)]);
    let a_owned = coop(&[0, 1, 2], 1);
    let ja = h.join(&a, &[("cooperative-sticky", &a_owned)]);
    let r = h.join_resp(ja);
    assert_eq!(r.generation_id, 2);
    let meta: Vec<&[u8]> = r.members.iter().map(|m| &m.metadata[..]).collect();
    assert_eq!(
        meta,
        vec![&a_owned[..], &b_sub[..]],
        "the leader sees owned partitions"
    );
    h.sync(&b, 2, &[]);
    let empty = assignment(&[]);
    let sa = h.sync(&a, 2, &[(&a, &assignment(&[0, 1])), (&b, &empty)]);
    assert_eq!(partitions_of(&h.sync_resp(sa).assignment), vec![0, 1]);
    assert_eq!(h.state(), GroupState::Stable);

    // Round 2: A (having revoked 2) rejoins with its new owned partitions: a new generation with
    // the same protocol; B, unchanged, rejoins too and gets 2.
    let a_owned = coop(&[0, 1], 2);
    let ja = h.join(&a, &[("cooperative-sticky", &a_owned)]);
    assert_eq!(h.state(), GroupState::PreparingRebalance);
    let jb = h.join(&b, &[("cooperative-sticky", &b_sub)]);
    let (ra, rb) = (h.join_resp(ja), h.join_resp(jb));
    assert_eq!((ra.error, rb.error), (None, None));
    assert_eq!((ra.generation_id, rb.generation_id), (3, 3));
    assert_eq!(ra.protocol_name.as_deref(), Some("cooperative-sticky"));
    let sb = h.sync(&b, 3, &[]);
    h.sync(
        &a,
        3,
        &[(&a, &assignment(&[0, 1])), (&b, &assignment(&[2]))],
    );
    assert_eq!(partitions_of(&h.sync_resp(sb).assignment), vec![2]);
}

/// Seed 002: with Kafka's default `[range, cooperative-sticky]` on every member the group runs
/// range; a member that only supports cooperative-sticky cannot join a range-only group.
#[test]
fn strategy_negotiation() {
    let mut h = H::new();
    let default: &[(&str, &[u8])] = &[("range", b"r"), ("cooperative-sticky", b"c")];
    let (_a, ja) = h.new_member(default);
    let (_b, jb) = h.new_member(default);
    h.advance(6_000);
    assert_eq!(h.join_resp(ja).protocol_name.as_deref(), Some("range"));
    assert_eq!(&h.join_resp(ja).members[1].metadata[..], b"r");
    assert!(h.answered(jb));

    let mut h = H::new();
    let (_a, _) = h.new_member(&[("range", b"")]);
    let id = h.join("", &[("cooperative-sticky", b"")]);
    assert_eq!(
        h.join_resp(id).error,
        Some(ResponseError::InconsistentGroupProtocol)
    );
}
