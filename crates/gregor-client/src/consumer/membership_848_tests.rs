use super::*;

const T1: Uuid = Uuid::from_u128(1);

fn settings(instance: Option<&str>) -> Settings848 {
    Settings848 {
        instance_id: instance.map(str::to_string),
        rack_id: None,
        server_assignor: Some("uniform".into()),
        max_poll_interval_ms: 10_000,
        heartbeat_interval_ms: 3_000,
        retry_backoff_ms: 100,
    }
}

fn parts(ps: &[i32]) -> TopicIdPartitions {
    [(T1, ps.iter().copied().collect())].into()
}

fn reply(epoch: i32, assignment: Option<TopicIdPartitions>) -> HeartbeatReply {
    HeartbeatReply {
        member_id: Some("m-1".into()),
        member_epoch: epoch,
        heartbeat_interval_ms: 500,
        assignment,
    }
}

fn sent(a: HeartbeatAction848) -> HeartbeatFields {
    match a {
        HeartbeatAction848::Send(f) => f,
        other => panic!("expected a heartbeat, got {other:?}"),
    }
}

/// Subscribed, polled, joined at epoch 1 with partitions 0 and 1 reconciled.
fn member_with_0_1() -> ConsumerMembership {
    let mut m = ConsumerMembership::new("gen-id".into(), settings(None), 0);
    m.subscribe(Subscription::Topics(vec!["t".into()]));
    assert_eq!(m.heartbeat_action(0), HeartbeatAction848::Idle);
    assert!(m.on_poll(0));
    let join = sent(m.heartbeat_action(0));
    assert_eq!(join.member_epoch, JOIN_EPOCH);
    assert_eq!(join.owned, Some(TopicIdPartitions::new()));
    assert!(!join.member_id_named);
    let out = m.on_answer(&join, Ok(reply(1, Some(parts(&[0, 1])))), 10);
    assert_eq!(out, HeartbeatOutcome848::NewAssignment);
    let r = m.reconciliation().unwrap();
    assert_eq!(r.assign, vec![(T1, 0), (T1, 1)]);
    assert!(r.revoke.is_empty());
    m.reconciled(r.session, parts(&[0, 1]));
    m
}

#[test]
fn joins_on_poll_and_acknowledges_the_assignment_at_once() {
    let mut m = member_with_0_1();
    assert_eq!(m.member_id, "m-1");
    assert_eq!(m.commit_epoch(), Some(1));
    // The acknowledgement is due now, not at the next interval.
    let ack = sent(m.heartbeat_action(20));
    assert_eq!(ack.member_epoch, 1);
    assert_eq!(ack.owned, Some(parts(&[0, 1])));
    assert!(ack.member_id_named);
    assert_eq!(
        m.on_answer(&ack, Ok(reply(1, None)), 30),
        HeartbeatOutcome848::Ok
    );
    assert!(m.reconciliation().is_none());
    // Then at the interval the coordinator named.
    assert_eq!(m.heartbeat_action(40), HeartbeatAction848::WaitUntil(530));
    assert_eq!(sent(m.heartbeat_action(530)).member_epoch, 1);
}

#[test]
fn revokes_before_acknowledging_and_reports_only_what_it_still_owns() {
    let mut m = member_with_0_1();
    let ack = sent(m.heartbeat_action(20));
    // The coordinator takes partition 1 away (the epoch stays until it is revoked).
    assert_eq!(
        m.on_answer(&ack, Ok(reply(1, Some(parts(&[0])))), 30),
        HeartbeatOutcome848::NewAssignment
    );
    // Until the application has revoked it, heartbeats still report it owned.
    let before = sent(m.heartbeat_action(600));
    assert_eq!(before.owned, Some(parts(&[0, 1])));
    m.on_answer(&before, Ok(reply(1, Some(parts(&[0])))), 610);
    let r = m.reconciliation().unwrap();
    assert_eq!(r.revoke, vec![(T1, 1)]);
    assert!(r.assign.is_empty());
    m.reconciled(r.session, parts(&[0]));
    let ack = sent(m.heartbeat_action(620));
    assert_eq!(ack.owned, Some(parts(&[0])));
    // Next epoch, a new partition: assigned, then acknowledged.
    m.on_answer(&ack, Ok(reply(2, Some(parts(&[0, 2])))), 630);
    assert_eq!(m.commit_epoch(), Some(2));
    let r = m.reconciliation().unwrap();
    assert_eq!((r.revoke.len(), r.assign.clone()), (0, vec![(T1, 2)]));
    m.reconciled(r.session, parts(&[0, 2]));
    assert_eq!(sent(m.heartbeat_action(640)).owned, Some(parts(&[0, 2])));
}

#[test]
fn fencing_loses_the_partitions_and_rejoins_with_epoch_0_after_they_are_reported() {
    for code in [FENCED_MEMBER_EPOCH, UNKNOWN_MEMBER_ID] {
        let mut m = member_with_0_1();
        let hb = sent(m.heartbeat_action(20));
        assert_eq!(m.on_answer(&hb, Err(code), 30), HeartbeatOutcome848::Lost);
        assert_eq!(m.commit_epoch(), None);
        // No join before the application reported the loss.
        assert!(!m.on_poll(40));
        assert_eq!(m.heartbeat_action(40), HeartbeatAction848::Idle);
        assert!(m.take_lost());
        assert!(m.on_poll(50));
        let join = sent(m.heartbeat_action(50));
        assert_eq!(join.member_epoch, JOIN_EPOCH);
        assert_eq!(join.owned, Some(TopicIdPartitions::new()));
        // The id stays the member's (KIP-1082).
        assert_eq!(join.member_id, "m-1");
    }
}

#[test]
fn a_reconciliation_overtaken_by_fencing_is_dropped() {
    let mut m = member_with_0_1();
    let hb = sent(m.heartbeat_action(20));
    m.on_answer(&hb, Ok(reply(2, Some(parts(&[0, 1, 2])))), 30);
    let r = m.reconciliation().unwrap();
    let hb = sent(m.heartbeat_action(600));
    m.on_answer(&hb, Err(FENCED_MEMBER_EPOCH), 610);
    m.reconciled(r.session, parts(&[0, 1, 2]));
    assert!(m.take_lost());
    m.on_poll(60);
    assert_eq!(
        sent(m.heartbeat_action(60)).owned,
        Some(TopicIdPartitions::new())
    );
}

#[test]
fn coordinator_moves_are_retried_after_the_backoff() {
    let mut m = member_with_0_1();
    let hb = sent(m.heartbeat_action(20));
    assert_eq!(
        m.on_answer(&hb, Err(KafkaCode::NOT_COORDINATOR), 30),
        HeartbeatOutcome848::CoordinatorUnknown
    );
    assert_eq!(m.heartbeat_action(31), HeartbeatAction848::WaitUntil(130));
    assert_eq!(sent(m.heartbeat_action(130)).member_epoch, 1);
    assert_eq!(m.commit_epoch(), Some(1));
}

#[test]
fn fatal_errors_stop_the_member() {
    let mut m = ConsumerMembership::new("gen-id".into(), settings(None), 0);
    m.subscribe(Subscription::Topics(vec!["t".into()]));
    m.on_poll(0);
    let join = sent(m.heartbeat_action(0));
    assert_eq!(
        m.on_answer(&join, Err(UNSUPPORTED_ASSIGNOR), 10),
        HeartbeatOutcome848::Fatal(UNSUPPORTED_ASSIGNOR)
    );
    assert_eq!(m.fatal(), Some(UNSUPPORTED_ASSIGNOR));
    assert_eq!(m.heartbeat_action(20), HeartbeatAction848::Idle);
}

#[test]
fn poll_timeout_leaves_with_the_static_or_dynamic_leave_epoch() {
    for (instance, epoch) in [(None, LEAVE_EPOCH), (Some("i-1"), STATIC_LEAVE_EPOCH)] {
        let mut m = ConsumerMembership::new("gen-id".into(), settings(instance), 0);
        m.subscribe(Subscription::Topics(vec!["t".into()]));
        m.on_poll(0);
        let join = sent(m.heartbeat_action(0));
        m.on_answer(&join, Ok(reply(1, None)), 10);
        match m.heartbeat_action(10_001) {
            HeartbeatAction848::PollTimeoutExpired(leave) => {
                assert_eq!(leave.member_epoch, epoch);
                assert_eq!(leave.owned, None);
            }
            other => panic!("expected a leave, got {other:?}"),
        }
        assert_eq!(m.commit_epoch(), None);
        assert!(m.take_lost());
        assert!(m.on_poll(10_002));
    }
}

#[test]
fn leaving_ends_the_membership_and_ignores_late_answers() {
    let mut m = member_with_0_1();
    let hb = sent(m.heartbeat_action(20));
    let leave = m.leave().unwrap();
    assert_eq!(leave.member_epoch, LEAVE_EPOCH);
    assert_eq!(
        m.on_answer(&hb, Ok(reply(1, Some(parts(&[0])))), 30),
        HeartbeatOutcome848::Ignored
    );
    assert_eq!(m.heartbeat_action(40), HeartbeatAction848::Idle);
    assert!(m.leave().is_none());
}

#[test]
fn a_subscription_change_is_sent_at_once_and_a_dropped_regex_is_cleared() {
    let mut m = ConsumerMembership::new("gen-id".into(), settings(None), 0);
    m.subscribe(Subscription::Regex("t.*".into()));
    m.on_poll(0);
    let join = sent(m.heartbeat_action(0));
    m.on_answer(&join, Ok(reply(1, None)), 10);
    m.subscribe(Subscription::Topics(vec!["t".into()]));
    let hb = sent(m.heartbeat_action(11));
    assert_eq!(
        hb.subscription,
        Some(Subscription::Topics(vec!["t".into()]))
    );
    assert!(hb.clear_regex);
}
