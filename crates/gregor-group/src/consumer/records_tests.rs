use std::collections::BTreeMap;

use super::*;
use crate::consumer::heartbeat::{heartbeat, ConsumerGroupConfig, HeartbeatRequest, TopicsView};
use crate::consumer::model::{Assignment, ConsumerGroup, TopicMetadata};

#[test]
fn keys_and_a_group_epoch_have_kafkas_bytes() {
    let key = ConsumerKey::CurrentMemberAssignment {
        group: "g".into(),
        member: "m1".into(),
    };
    assert_eq!(key.encode().as_ref(), &[0, 8, 0, 1, b'g', 0, 2, b'm', b'1']);
    assert_eq!(ConsumerKey::decode(&key.encode()).unwrap(), Some(key));
    let key = ConsumerKey::GroupMetadata { group: "g".into() };
    assert_eq!(key.encode().as_ref(), &[0, 3, 0, 1, b'g']);
    let value = ConsumerValue::GroupMetadata {
        epoch: 5,
        metadata_hash: 0,
    };
    // Version 0, the epoch, an empty tagged-field section.
    assert_eq!(value.encode().as_ref(), &[0, 0, 0, 0, 0, 5, 0]);
    // With the metadata hash: tagged field 0, 8 bytes (Kafka 4.1's MetadataHash).
    let value = ConsumerValue::GroupMetadata {
        epoch: 5,
        metadata_hash: 0x0102_0304_0506_0708,
    };
    let bytes = [0, 0, 0, 0, 0, 5, 1, 0, 8, 1, 2, 3, 4, 5, 6, 7, 8];
    assert_eq!(value.encode().as_ref(), &bytes);
    assert_eq!(ConsumerValue::decode(&key, &bytes).unwrap(), value);
    // Another tag is skipped.
    let other = [0, 0, 0, 0, 0, 5, 1, 3, 2, 9, 9];
    let plain = ConsumerValue::GroupMetadata {
        epoch: 5,
        metadata_hash: 0,
    };
    assert_eq!(ConsumerValue::decode(&key, &other).unwrap(), plain);
    // Classic keys are not consumer group records.
    assert_eq!(ConsumerKey::decode(&[0, 2, 0, 1, b'g']).unwrap(), None);
}

#[test]
fn a_current_assignment_has_kafkas_bytes() {
    let mut assigned = Assignment::new();
    assigned.insert(1, [0, 2].into());
    let value = ConsumerValue::CurrentMemberAssignment(CurrentAssignment {
        member_epoch: 4,
        previous_member_epoch: 3,
        state: MemberState::UnrevokedPartitions,
        assigned,
        pending_revocation: Assignment::new(),
    });
    let mut expected = vec![0, 0, 0, 0, 0, 4, 0, 0, 0, 3, 1, 2];
    expected.extend_from_slice(&1u128.to_be_bytes());
    expected.extend_from_slice(&[3, 0, 0, 0, 0, 0, 0, 0, 2, 0, 1, 0]);
    assert_eq!(value.encode().as_ref(), expected.as_slice());
    let key = ConsumerKey::CurrentMemberAssignment {
        group: "g".into(),
        member: "m".into(),
    };
    assert_eq!(ConsumerValue::decode(&key, &expected).unwrap(), value);
}

#[test]
fn unknown_tagged_fields_are_skipped_and_damage_is_refused() {
    let key = ConsumerKey::TargetAssignmentMetadata { group: "g".into() };
    // Kafka 4.3 writes AssignmentTimestamp as tag 0 (8 bytes).
    let mut bytes = vec![0, 0, 0, 0, 0, 9, 1, 0, 8];
    bytes.extend_from_slice(&77i64.to_be_bytes());
    let value = ConsumerValue::decode(&key, &bytes).unwrap();
    assert_eq!(
        value,
        ConsumerValue::TargetAssignmentMetadata {
            assignment_epoch: 9
        }
    );
    assert!(ConsumerValue::decode(&key, &bytes[..5]).is_err());
    assert!(ConsumerValue::decode(&key, &[0, 1, 0, 0, 0, 9, 0]).is_err());
    // An array count far beyond the bytes left is refused before any loop runs on it.
    let key = ConsumerKey::TargetAssignmentMember {
        group: "g".into(),
        member: "m".into(),
    };
    assert!(ConsumerValue::decode(&key, &[0, 0, 0xFF, 0xFF, 0xFF, 0x7F, 0]).is_err());
}

struct OneTopic;

impl TopicsView for OneTopic {
    fn topic(&self, name: &str) -> Option<TopicMetadata> {
        (name == "t").then(|| TopicMetadata {
            id: 7,
            name: "t".into(),
            partitions: 6,
            replica_racks: Vec::new(),
        })
    }
    fn names(&self) -> Vec<String> {
        vec!["t".into()]
    }
    fn version(&self) -> u64 {
        1
    }
}

#[test]
fn a_group_reloads_from_its_records_with_epochs_intact() {
    let mut g = ConsumerGroup::new("g");
    let cfg = ConsumerGroupConfig::default();
    for (m, instance) in [("a", Some("i-a")), ("b", None), ("c", None)] {
        let req = HeartbeatRequest {
            version: 1,
            group_id: "g".into(),
            member_id: m.into(),
            instance_id: instance.map(String::from),
            rebalance_timeout_ms: 5000,
            subscribed_topic_names: Some(vec!["t".into()]),
            owned: Some(Assignment::new()),
            client_id: format!("client-{m}"),
            ..HeartbeatRequest::default()
        };
        heartbeat(&mut g, &cfg, &OneTopic, &req, 0, String::new).unwrap();
    }
    // a is mid-revocation: the state that must survive a failover.
    let a = g.members["a"].clone();
    let req = HeartbeatRequest {
        version: 1,
        group_id: "g".into(),
        member_id: "a".into(),
        member_epoch: a.member_epoch,
        rebalance_timeout_ms: -1,
        owned: Some(a.assigned.clone()),
        ..HeartbeatRequest::default()
    };
    heartbeat(&mut g, &cfg, &OneTopic, &req, 0, String::new).unwrap();
    let mut loaded = BTreeMap::new();
    for (key, value) in group_records(&g) {
        let (k, v) = (key.encode(), value.encode());
        let key = ConsumerKey::decode(&k).unwrap().unwrap();
        let value = ConsumerValue::decode(&key, &v).unwrap();
        replay(&mut loaded, &key, Some(&value));
    }
    let back = &loaded["g"];
    assert_eq!(back.members, g.members);
    assert_eq!(back.target, g.target);
    assert_eq!(
        (back.group_epoch, back.target_epoch),
        (g.group_epoch, g.target_epoch)
    );
    assert_eq!(back.holders, g.holders);
    assert_eq!(back.static_member("i-a"), Some("a"));
    // Tombstones remove a member, then the group.
    let member = ConsumerKey::MemberMetadata {
        group: "g".into(),
        member: "b".into(),
    };
    replay(&mut loaded, &member, None);
    assert!(!loaded["g"].members.contains_key("b"));
    replay(
        &mut loaded,
        &ConsumerKey::GroupMetadata { group: "g".into() },
        None,
    );
    assert!(loaded.is_empty());
}

#[test]
fn a_classic_members_metadata_is_tagged_field_zero() {
    use crate::consumer::model::{ClassicMemberMetadata, Subscription};
    let key = ConsumerKey::MemberMetadata {
        group: "g".into(),
        member: "m".into(),
    };
    let mut meta = MemberMetadata {
        instance_id: None,
        client_id: "c".into(),
        client_host: "h".into(),
        subscription: Subscription {
            rebalance_timeout_ms: -1,
            ..Subscription::default()
        },
        classic: None,
    };
    let plain: &[u8] = &[
        0, 0, // version 0
        0, 0, // no instance id, no rack
        2, b'c', 2, b'h', // client id, client host
        1, 0, // no topic names, no regex
        0xff, 0xff, 0xff, 0xff, // rebalance timeout -1
        0,    // no server assignor
        0,    // no tagged fields
    ];
    assert_eq!(
        ConsumerValue::MemberMetadata(meta.clone())
            .encode()
            .as_ref(),
        plain
    );
    meta.classic = Some(ClassicMemberMetadata {
        session_timeout_ms: 45_000,
        supported_protocols: vec![("range".into(), bytes::Bytes::from_static(&[1, 2]))],
    });
    let mut tagged = plain[..plain.len() - 1].to_vec();
    tagged.extend_from_slice(&[
        1, 0, 16, // one tagged field: tag 0, 16 bytes
        0, 0, 0xaf, 0xc8, // session timeout 45000
        2, 6, b'r', b'a', b'n', b'g', b'e', 3, 1, 2, 0, // one protocol: "range", [1, 2]
        0, // the struct's tagged fields
    ]);
    let value = ConsumerValue::MemberMetadata(meta);
    assert_eq!(value.encode().as_ref(), &tagged[..]);
    assert_eq!(ConsumerValue::decode(&key, &tagged).unwrap(), value);
    // A protocol count larger than the bytes that follow is refused, not allocated.
    let mut bad = tagged.clone();
    let at = plain.len() - 1 + 3 + 4;
    bad[at] = 0x7f;
    assert!(ConsumerValue::decode(&key, &bad).is_err());
}
