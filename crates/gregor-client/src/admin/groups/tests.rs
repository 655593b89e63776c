use super::*;
use crate::codec::{decode_response, encode_request, encode_response_frame};
use gregor_assign::protocol::{encode_assignment, Assignment};
use kafka_protocol::messages::consumer_group_describe_response as cgd;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::ConsumerGroupDescribeResponse;
use kafka_protocol::protocol::{Decodable, Message};

fn coordinator() -> BrokerNode {
    BrokerNode {
        id: 1,
        host: "127.0.0.1".into(),
        port: 9092,
        rack: None,
    }
}

#[test]
fn list_groups_filters_need_new_versions() {
    for v in ListGroupsRequest::VERSIONS.min..=ListGroupsRequest::VERSIONS.max {
        let req = list_groups_request(&[], &[], v).unwrap();
        encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
    }
    let stable = vec!["Stable".to_string()];
    assert!(list_groups_request(&stable, &[], 3).is_err());
    assert_eq!(
        list_groups_request(&stable, &[], 4)
            .unwrap()
            .states_filter
            .len(),
        1
    );
    assert!(list_groups_request(&[], &["classic".into()], 4).is_err());
}

#[test]
fn list_groups_response_reports_state_only_when_sent() {
    let resp = ListGroupsResponse::default().with_groups(vec![ListedGroup::default()
        .with_group_id(group_id("b1.rebal.group"))
        .with_protocol_type(StrBytes::from_static_str("consumer"))
        .with_group_state(StrBytes::from_static_str("Stable"))]);
    let frame = encode_response_frame::<ListGroupsRequest>(&resp, 4, 1);
    let got =
        parse_list_groups(decode_response::<ListGroupsRequest>(frame, 4).unwrap(), 4).unwrap();
    assert_eq!(got[0].state.as_deref(), Some("Stable"));
    assert_eq!(got[0].group_type, None);
    let mut old = resp.clone();
    old.groups[0].group_state = StrBytes::default();
    let frame = encode_response_frame::<ListGroupsRequest>(&old, 2, 1);
    let got =
        parse_list_groups(decode_response::<ListGroupsRequest>(frame, 2).unwrap(), 2).unwrap();
    assert_eq!(got[0].state, None);
    let err = parse_list_groups(ListGroupsResponse::default().with_error_code(14), 4).unwrap_err();
    assert_eq!(err.code, KafkaCode::COORDINATOR_LOAD_IN_PROGRESS);
}

#[test]
fn describe_groups_decodes_member_assignments() {
    let assignment = encode_assignment(
        &Assignment {
            partitions: vec![("b1.offsets.demo".to_string(), vec![0, 1])],
            user_data: None,
        },
        3,
    )
    .unwrap();
    let resp = DescribeGroupsResponse::default().with_groups(vec![
        DescribedGroup::default()
            .with_group_id(group_id("b1.rebal.group"))
            .with_group_state(StrBytes::from_static_str("Stable"))
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocol_data(StrBytes::from_static_str("range"))
            .with_members(vec![
                DescribedGroupMember::default()
                    .with_member_id(StrBytes::from_static_str("b1-rebal-A-1"))
                    .with_client_id(StrBytes::from_static_str("b1-rebal-A"))
                    .with_client_host(StrBytes::from_static_str("/172.17.0.1"))
                    .with_member_assignment(assignment),
                DescribedGroupMember::default()
                    .with_member_id(StrBytes::from_static_str("b1-rebal-B-2"))
                    .with_group_instance_id(Some(StrBytes::from_static_str("static-b")))
                    .with_member_assignment(Bytes::from_static(&[0, 3, 0xff])),
            ]),
        DescribedGroup::default()
            .with_group_id(group_id("nope"))
            .with_error_code(69)
            .with_error_message(Some(StrBytes::from_static_str("Group nope not found."))),
    ]);
    let frame = encode_response_frame::<DescribeGroupsRequest>(&resp, 6, 1);
    let parsed = parse_describe_groups(
        decode_response::<DescribeGroupsRequest>(frame, 6).unwrap(),
        &coordinator(),
    );
    let g = parsed[0].1.as_ref().unwrap();
    assert_eq!((g.state.as_str(), g.protocol.as_str()), ("Stable", "range"));
    assert_eq!(
        g.members[0].assignment,
        vec![
            TopicPartition::new("b1.offsets.demo", 0),
            TopicPartition::new("b1.offsets.demo", 1)
        ]
    );
    assert_eq!(g.members[0].client_host, "/172.17.0.1");
    // Corrupt assignment bytes are reported, not fatal.
    assert!(g.members[1].assignment.is_empty());
    assert!(g.members[1].assignment_error.is_some());
    assert_eq!(g.members[1].group_instance_id.as_deref(), Some("static-b"));
    assert_eq!(g.coordinator.id, 1);
    assert_eq!(g.group_type, GroupType::Classic);
    assert_eq!((g.group_epoch, g.members[0].member_epoch), (None, None));
    assert_eq!(g.members[0].target_assignment, None);
    assert_eq!(
        parsed[1].1.as_ref().unwrap_err().code,
        KafkaCode::GROUP_ID_NOT_FOUND
    );
    for v in DescribeGroupsRequest::VERSIONS.min..=DescribeGroupsRequest::VERSIONS.max {
        encode_request(&describe_groups_request(&["g".into()]), v, 1, "c").unwrap();
    }
}

#[test]
fn missing_group_is_dead_or_group_id_not_found() {
    let dead = GroupDescription {
        group_id: "g".into(),
        state: "Dead".into(),
        protocol_type: String::new(),
        protocol: String::new(),
        members: vec![],
        coordinator: coordinator(),
        group_type: GroupType::Classic,
        group_epoch: None,
        assignment_epoch: None,
    };
    assert!(is_missing_group(&Ok(dead.clone())));
    let empty = GroupDescription {
        state: "Empty".into(),
        ..dead
    };
    assert!(!is_missing_group(&Ok(empty)));
    let not_found = Err(Error::kafka(
        "g",
        KafkaError::new(KafkaCode::GROUP_ID_NOT_FOUND, None),
    ));
    assert!(is_missing_group(&not_found));
}

#[test]
fn offset_fetch_request_in_both_layouts() {
    let tps = [TopicPartition::new("t", 0), TopicPartition::new("t", 2)];
    for v in OffsetFetchRequest::VERSIONS.min..=OffsetFetchRequest::VERSIONS.max {
        for parts in [Some(&tps[..]), None] {
            match offset_fetch_request("g", parts, true, v) {
                Ok(req) => {
                    let frame =
                        encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
                    let mut body = frame.slice(4..);
                    kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
                    let back = OffsetFetchRequest::decode(&mut body, v).unwrap();
                    if v >= 8 {
                        assert_eq!(back.groups[0].group_id.0.as_str(), "g");
                        assert_eq!(back.groups[0].topics.is_none(), parts.is_none());
                    } else {
                        assert_eq!(back.group_id.0.as_str(), "g");
                        assert_eq!(back.topics.is_none(), parts.is_none());
                    }
                    assert_eq!(back.require_stable, v >= 7);
                }
                Err(_) => assert!(parts.is_none() && v < 2, "v{v}"),
            }
        }
    }
}

#[test]
fn offset_fetch_response_in_both_layouts_skips_uncommitted() {
    let old = OffsetFetchResponse::default().with_topics(vec![OffsetFetchResponseTopic::default()
        .with_name(topic_name("t"))
        .with_partitions(vec![
            OffsetFetchResponsePartition::default()
                .with_partition_index(0)
                .with_committed_offset(10)
                .with_committed_leader_epoch(2),
            OffsetFetchResponsePartition::default()
                .with_partition_index(1)
                .with_committed_offset(-1),
        ])]);
    let frame = encode_response_frame::<OffsetFetchRequest>(&old, 7, 1);
    let got = parse_offset_fetch(
        "g",
        decode_response::<OffsetFetchRequest>(frame, 7).unwrap(),
    )
    .unwrap();
    assert_eq!(got.len(), 1);
    assert_eq!(got[&TopicPartition::new("t", 0)].offset, 10);
    assert_eq!(got[&TopicPartition::new("t", 0)].leader_epoch, Some(2));

    let new = OffsetFetchResponse::default().with_groups(vec![OffsetFetchResponseGroup::default()
        .with_group_id(group_id("g"))
        .with_topics(vec![OffsetFetchResponseTopics::default()
            .with_name(topic_name("t"))
            .with_partitions(vec![OffsetFetchResponsePartitions::default()
                .with_partition_index(3)
                .with_committed_offset(7)])])]);
    let frame = encode_response_frame::<OffsetFetchRequest>(&new, 8, 1);
    let got = parse_offset_fetch(
        "g",
        decode_response::<OffsetFetchRequest>(frame, 8).unwrap(),
    )
    .unwrap();
    assert_eq!(got[&TopicPartition::new("t", 3)].offset, 7);

    let failed =
        OffsetFetchResponse::default().with_groups(vec![OffsetFetchResponseGroup::default()
            .with_group_id(group_id("g"))
            .with_error_code(16)]);
    assert_eq!(
        parse_offset_fetch("g", failed).unwrap_err().code,
        KafkaCode::NOT_COORDINATOR
    );
}

#[test]
fn offset_commit_as_non_member() {
    let offsets: BTreeMap<TopicPartition, i64> = [
        (TopicPartition::new("t", 1), 5),
        (TopicPartition::new("t", 0), 3),
        (TopicPartition::new("u", 0), 0),
    ]
    .into_iter()
    .collect();
    for v in OffsetCommitRequest::VERSIONS.min..=OffsetCommitRequest::VERSIONS.max {
        let req = offset_commit_request("g", &offsets, v);
        let frame = encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
        let mut body = frame.slice(4..);
        kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
        let back = OffsetCommitRequest::decode(&mut body, v).unwrap();
        assert_eq!(back.generation_id_or_member_epoch, -1);
        assert_eq!(back.member_id.as_str(), "");
        assert_eq!(back.topics[0].partitions[0].committed_offset, 3);
        assert_eq!(back.topics[1].name.0.as_str(), "u");
    }
    let resp =
        OffsetCommitResponse::default().with_topics(vec![OffsetCommitResponseTopic::default()
            .with_name(topic_name("t"))
            .with_partitions(vec![
                OffsetCommitResponsePartition::default().with_partition_index(0),
                OffsetCommitResponsePartition::default()
                    .with_partition_index(1)
                    .with_error_code(25),
            ])]);
    let frame = encode_response_frame::<OffsetCommitRequest>(&resp, 8, 1);
    let got = parse_offset_commit(decode_response::<OffsetCommitRequest>(frame, 8).unwrap());
    assert_eq!(got[0], (TopicPartition::new("t", 0), Ok(())));
    assert_eq!(
        got[1].1.as_ref().unwrap_err().code.name(),
        "UNKNOWN_MEMBER_ID"
    );
}

#[test]
fn delete_groups_per_group() {
    for v in DeleteGroupsRequest::VERSIONS.min..=DeleteGroupsRequest::VERSIONS.max {
        encode_request(&delete_groups_request(&["g".into()]), v, 1, "c").unwrap();
    }
    let resp = DeleteGroupsResponse::default().with_results(vec![
        DeletableGroupResult::default().with_group_id(group_id("a")),
        DeletableGroupResult::default()
            .with_group_id(group_id("b"))
            .with_error_code(68),
    ]);
    let frame = encode_response_frame::<DeleteGroupsRequest>(&resp, 2, 1);
    let got = parse_delete_groups(decode_response::<DeleteGroupsRequest>(frame, 2).unwrap());
    assert!(single("a", got.clone()).is_ok());
    let e = single("b", got.clone()).unwrap_err();
    assert_eq!(e.to_string(), "group 'b': NON_EMPTY_GROUP (68)");
    assert!(single("c", got).is_err());
}

fn cgd_assignment(topics: &[(&'static str, &[i32])]) -> cgd::Assignment {
    cgd::Assignment::default().with_topic_partitions(
        topics
            .iter()
            .map(|(t, ps)| {
                cgd::TopicPartitions::default()
                    .with_topic_name(topic_name(t))
                    .with_partitions(ps.to_vec())
            })
            .collect(),
    )
}

#[test]
fn consumer_group_describe_reads_epochs_and_both_assignments() {
    let resp = ConsumerGroupDescribeResponse::default().with_groups(vec![
        cgd::DescribedGroup::default()
            .with_group_id(group_id("cg"))
            .with_group_state(StrBytes::from_static_str("Reconciling"))
            .with_group_epoch(7)
            .with_assignment_epoch(7)
            .with_assignor_name(StrBytes::from_static_str("uniform"))
            .with_members(vec![cgd::Member::default()
                .with_member_id(StrBytes::from_static_str("m-1"))
                .with_instance_id(Some(StrBytes::from_static_str("i-1")))
                .with_rack_id(Some(StrBytes::from_static_str("r1")))
                .with_member_epoch(6)
                .with_client_id(StrBytes::from_static_str("rdkafka"))
                .with_client_host(StrBytes::from_static_str("/127.0.0.1"))
                .with_subscribed_topic_names(vec![topic_name("b"), topic_name("a")])
                .with_subscribed_topic_regex(Some(StrBytes::from_static_str("")))
                .with_assignment(cgd_assignment(&[("b", &[1]), ("a", &[2, 0])]))
                .with_target_assignment(cgd_assignment(&[("a", &[0])]))]),
        cgd::DescribedGroup::default()
            .with_group_id(group_id("classic"))
            .with_error_code(69)
            .with_error_message(Some(StrBytes::from_static_str(
                "Group classic is not a consumer group.",
            ))),
    ]);
    for v in 0..=1 {
        let frame = encode_response_frame::<ConsumerGroupDescribeRequest>(&resp, v, 1);
        let parsed = parse_consumer_group_describe(
            decode_response::<ConsumerGroupDescribeRequest>(frame, v).unwrap(),
            &coordinator(),
        );
        let g = parsed[0].1.as_ref().unwrap();
        assert_eq!(g.group_type, GroupType::Consumer);
        assert_eq!(
            (
                g.state.as_str(),
                g.protocol.as_str(),
                g.protocol_type.as_str()
            ),
            ("Reconciling", "uniform", "consumer")
        );
        assert_eq!((g.group_epoch, g.assignment_epoch), (Some(7), Some(7)));
        let m = &g.members[0];
        assert_eq!(m.member_epoch, Some(6));
        assert_eq!(m.group_instance_id.as_deref(), Some("i-1"));
        assert_eq!(m.rack.as_deref(), Some("r1"));
        assert_eq!(m.subscribed_topic_names, vec!["b", "a"]);
        // An empty pattern is no pattern.
        assert_eq!(m.subscribed_topic_regex, None);
        assert_eq!(
            m.assignment,
            vec![
                TopicPartition::new("a", 0),
                TopicPartition::new("a", 2),
                TopicPartition::new("b", 1)
            ]
        );
        assert_eq!(m.target_assignment, Some(vec![TopicPartition::new("a", 0)]));
        // The group that is not a consumer group goes to DescribeGroups.
        assert_eq!(classic_candidates(&parsed), vec!["classic".to_string()]);
        encode_request(&consumer_group_describe_request(&["cg".into()]), v, 1, "c").unwrap();
    }
    let denied = vec![("g".to_string(), Err(KafkaError::new(KafkaCode(30), None)))];
    assert!(classic_candidates(&denied).is_empty());
}
