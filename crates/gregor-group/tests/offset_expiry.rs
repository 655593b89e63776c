//! Offset expiry (`offsets.retention.minutes`, Kafka 2.1+): time is the driver's clock.

mod common;

use common::*;
use gregor_group::records::{decode_key, RecordKey};
use gregor_group::*;

const RETENTION: i64 = 60_000;

fn harness() -> H {
    H::with_config(GroupConfig {
        offsets_retention_ms: RETENTION,
        ..GroupConfig::default()
    })
}

fn expire(h: &mut H) {
    let effects = h.c.expire_offsets(h.now);
    h.process(effects);
}

fn committed(h: &H) -> Vec<(String, i32)> {
    h.c.committed_offsets(GROUP)
        .into_iter()
        .map(|(t, p, _)| (t, p))
        .collect()
}

/// Tombstones in the log: (topic, partition) for offsets, ("", -1) for the group.
fn tombstones(h: &H) -> Vec<(String, i32)> {
    h.log
        .iter()
        .filter(|r| r.value.is_none())
        .map(|r| match decode_key(&r.key).expect("a group record key") {
            RecordKey::OffsetCommit {
                topic, partition, ..
            } => (topic, partition),
            RecordKey::GroupMetadata { .. } => (String::new(), -1),
            other => panic!("unexpected record key {other:?}"),
        })
        .collect()
}

#[test]
fn standalone_offsets_expire_a_retention_period_after_their_last_commit() {
    let mut h = harness();
    h.commit("", -1, &[("t", 0, 5)]);
    h.advance(RETENTION / 2);
    h.commit("", -1, &[("t", 1, 7)]);
    h.advance(RETENTION / 2 - 1);
    expire(&mut h);
    assert_eq!(committed(&h).len(), 2, "nothing is due yet");
    h.advance(1);
    expire(&mut h);
    assert_eq!(committed(&h), vec![("t".to_string(), 1)]);
    assert_eq!(tombstones(&h), vec![("t".to_string(), 0)]);
    h.advance(RETENTION / 2);
    expire(&mut h);
    assert!(committed(&h).is_empty());
    // The group had nothing else: it is removed and tombstoned too.
    assert_eq!(
        tombstones(&h),
        vec![
            ("t".to_string(), 0),
            ("t".to_string(), 1),
            (String::new(), -1)
        ]
    );
    assert!(h.c.group(GROUP).is_none());
}

#[test]
fn a_group_with_members_keeps_its_offsets_and_they_expire_once_it_is_empty() {
    let mut h = harness();
    let members = h.stable_group(1, &[b"a"]);
    let generation = h.generation();
    h.commit(&members[0], generation, &[("t", 0, 42)]);
    // Three retention periods with a live member: nothing expires, however old the commit.
    for _ in 0..36 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(&members[0], generation), None);
        expire(&mut h);
    }
    assert_eq!(committed(&h).len(), 1);
    h.leave(&members[0]);
    assert_eq!(h.state(), GroupState::Empty);
    // Retention counts from the moment the group became Empty, not from the commit.
    h.advance(RETENTION - 1);
    expire(&mut h);
    assert_eq!(committed(&h).len(), 1);
    h.advance(1);
    expire(&mut h);
    assert!(committed(&h).is_empty());
    assert_eq!(
        tombstones(&h),
        vec![("t".to_string(), 0), (String::new(), -1)]
    );
    let fetched = h.fetch(Some(&[("t", &[0])]));
    assert_eq!(fetched.topics[0].partitions[0].committed_offset, -1);
}

#[test]
fn an_offset_with_a_commit_in_flight_is_kept() {
    let mut h = harness();
    h.commit("", -1, &[("t", 0, 5)]);
    h.advance(RETENTION);
    h.auto_append = false;
    h.commit("", -1, &[("t", 0, 6)]);
    expire(&mut h);
    assert_eq!(
        h.pending.len(),
        1,
        "no tombstone behind the commit in flight"
    );
    h.complete_all_appends();
    expire(&mut h);
    assert_eq!(
        h.c.committed_offset(GROUP, "t", 0).map(|o| o.offset),
        Some(6),
        "the new commit restarted its retention"
    );
}

#[test]
fn a_stable_consumer_group_loses_offsets_of_topics_it_no_longer_subscribes_to() {
    let mut h = harness();
    let sub = gregor_assign::protocol::encode_subscription(
        &gregor_assign::protocol::Subscription {
            topics: vec!["t".to_string()],
            user_data: None,
            owned_partitions: Vec::new(),
            generation_id: -1,
            rack_id: None,
        },
        1,
    )
    .expect("encodes");
    let protocols: &[(&str, &[u8])] = &[("range", &sub)];
    let (member, join) = h.new_member(protocols);
    h.advance(i64::from(h.c.config().initial_rebalance_delay_ms) * 2);
    let generation = h.join_resp(join).generation_id;
    h.sync(&member, generation, &[(member.as_str(), b"a")]);
    assert_eq!(h.state(), GroupState::Stable);
    h.commit(&member, generation, &[("old", 0, 1), ("t", 0, 2)]);
    for _ in 0..13 {
        h.advance(5_000);
        assert_eq!(h.heartbeat(&member, generation), None);
        expire(&mut h);
    }
    // Older than the retention: the unsubscribed topic's offset goes, the subscribed one stays.
    assert_eq!(committed(&h), vec![("t".to_string(), 0)]);
    assert_eq!(tombstones(&h), vec![("old".to_string(), 0)]);
    assert_eq!(h.state(), GroupState::Stable);
}
