//! OffsetCommit, TxnOffsetCommit and OffsetFetch.

use gregor_group::api as g;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::txn_offset_commit_response::{
    TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
};
use kafka_protocol::messages::{
    OffsetCommitRequest, OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
    TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::ResponseError;

use super::convert::{code, group_id, opt_string, str_bytes, string};

/// Fields a version lacks decode as absent: the group instance id before v7, the leader epoch
/// (-1) before v6. The retention time of v2-v4 is dropped: Gregor keeps offsets until they are
/// deleted (no offset expiry), and the v1 commit timestamp is not decodable by `kafka-protocol`.
pub fn offset_commit_request(req: &OffsetCommitRequest, version: i16) -> g::OffsetCommitRequest {
    g::OffsetCommitRequest {
        group_id: string(&req.group_id),
        generation_id: req.generation_id_or_member_epoch,
        member_id: string(&req.member_id),
        group_instance_id: opt_string(&req.group_instance_id).filter(|_| version >= 7),
        topics: req
            .topics
            .iter()
            .map(|t| g::OffsetCommitTopic {
                name: string(&t.name),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| g::OffsetCommitPartition {
                        partition_index: p.partition_index,
                        committed_offset: p.committed_offset,
                        committed_leader_epoch: if version >= 6 {
                            p.committed_leader_epoch
                        } else {
                            -1
                        },
                        committed_metadata: opt_string(&p.committed_metadata),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// Removes the partitions `exists` rejects, as Kafka answers commits to unknown topics or
/// partitions UNKNOWN_TOPIC_OR_PARTITION before the coordinator sees them. Returns the request
/// to send to the coordinator (topics left without partitions are dropped) and the response
/// for the rejected partitions, to pass to [`offset_commit_response`]. When the request has no
/// topics left, answer with the rejected part alone: the coordinator must not see an empty
/// commit, which could create a group.
pub fn split_unknown_partitions(
    mut req: g::OffsetCommitRequest,
    mut exists: impl FnMut(&str, i32) -> bool,
) -> (g::OffsetCommitRequest, g::OffsetCommitResponse) {
    let mut rejected = g::OffsetCommitResponse::default();
    for topic in &mut req.topics {
        let mut unknown = Vec::new();
        topic.partitions.retain(|p| {
            let known = exists(&topic.name, p.partition_index);
            if !known {
                unknown.push(g::OffsetCommitResponsePartition {
                    partition_index: p.partition_index,
                    error: Some(ResponseError::UnknownTopicOrPartition),
                });
            }
            known
        });
        if !unknown.is_empty() {
            rejected.topics.push(g::OffsetCommitResponseTopic {
                name: topic.name.clone(),
                partitions: unknown,
            });
        }
    }
    req.topics.retain(|t| !t.partitions.is_empty());
    (req, rejected)
}

/// The coordinator's answer, plus the partitions rejected before it (if any), for any version.
/// A topic present in both keeps one entry: the coordinator's partitions, then the rejected ones.
pub fn offset_commit_response(
    resp: g::OffsetCommitResponse,
    rejected: Option<g::OffsetCommitResponse>,
    _version: i16,
) -> OffsetCommitResponse {
    let mut topics: Vec<OffsetCommitResponseTopic> = Vec::new();
    let all = resp
        .topics
        .into_iter()
        .chain(rejected.into_iter().flat_map(|r| r.topics));
    for t in all {
        let partitions = t.partitions.into_iter().map(|p| {
            let mut out = OffsetCommitResponsePartition::default();
            out.partition_index = p.partition_index;
            out.error_code = code(p.error);
            out
        });
        match topics.iter_mut().find(|x| x.name.0.as_str() == t.name) {
            Some(existing) => existing.partitions.extend(partitions),
            None => {
                let mut topic = OffsetCommitResponseTopic::default();
                topic.name = TopicName(str_bytes(t.name));
                topic.partitions = partitions.collect();
                topics.push(topic);
            }
        }
    }
    let mut out = OffsetCommitResponse::default();
    out.topics = topics;
    out
}

/// The same error for every partition of a commit.
pub(super) fn commit_error(
    req: &g::OffsetCommitRequest,
    error: ResponseError,
) -> g::OffsetCommitResponse {
    g::OffsetCommitResponse {
        topics: req
            .topics
            .iter()
            .map(|t| g::OffsetCommitResponseTopic {
                name: t.name.clone(),
                partitions: t
                    .partitions
                    .iter()
                    .map(|p| g::OffsetCommitResponsePartition {
                        partition_index: p.partition_index,
                        error: Some(error),
                    })
                    .collect(),
            })
            .collect(),
    }
}

/// TxnOffsetCommit v0-v4. Before v3 a request carries no group metadata (KIP-447): generation
/// -1, no member id, no instance id, so the coordinator checks no member; the leader epoch
/// exists from v2.
pub fn txn_offset_commit_request(
    req: &TxnOffsetCommitRequest,
    version: i16,
) -> g::TxnOffsetCommitRequest {
    let v3 = version >= 3;
    let topics = req
        .topics
        .iter()
        .map(|t| g::OffsetCommitTopic {
            name: string(&t.name),
            partitions: t
                .partitions
                .iter()
                .map(|p| g::OffsetCommitPartition {
                    partition_index: p.partition_index,
                    committed_offset: p.committed_offset,
                    committed_leader_epoch: if version >= 2 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    committed_metadata: opt_string(&p.committed_metadata),
                })
                .collect(),
        })
        .collect();
    g::TxnOffsetCommitRequest {
        transactional_id: string(&req.transactional_id),
        group_id: string(&req.group_id),
        producer_id: req.producer_id.0,
        producer_epoch: req.producer_epoch,
        generation_id: if v3 { req.generation_id } else { -1 },
        member_id: if v3 {
            string(&req.member_id)
        } else {
            String::new()
        },
        group_instance_id: opt_string(&req.group_instance_id).filter(|_| v3),
        topics,
    }
}

/// The coordinator's answer to a TxnOffsetCommit, plus the partitions rejected before it (see
/// [`split_unknown_partitions`]), as [`offset_commit_response`] merges them. Before v3 a client
/// knows no member or generation errors, and its request carried none for the coordinator to
/// check, so none can arise; they are passed on unchanged.
pub fn txn_offset_commit_response(
    resp: g::TxnOffsetCommitResponse,
    rejected: Option<g::OffsetCommitResponse>,
    version: i16,
) -> TxnOffsetCommitResponse {
    let merged = offset_commit_response(
        g::OffsetCommitResponse {
            topics: resp.topics,
        },
        rejected,
        version,
    );
    let mut out = TxnOffsetCommitResponse::default();
    out.topics = merged
        .topics
        .into_iter()
        .map(|t| {
            let mut topic = TxnOffsetCommitResponseTopic::default();
            topic.name = t.name;
            topic.partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let mut out = TxnOffsetCommitResponsePartition::default();
                    out.partition_index = p.partition_index;
                    out.error_code = p.error_code;
                    out
                })
                .collect();
            topic
        })
        .collect();
    out
}

/// One coordinator request per group: v0-v7 name one group, v8+ a list (kept in order, one
/// entry each). `require_stable` exists from v7. v1 cannot ask for "all topics" (a null topic
/// list arrives only from v2): INVALID_REQUEST. The v9 member id and epoch belong to KIP-848
/// consumer groups and are ignored for classic groups.
pub fn offset_fetch_requests(
    req: &OffsetFetchRequest,
    version: i16,
) -> Result<Vec<g::OffsetFetchRequest>, ResponseError> {
    if version < 2 && req.topics.is_none() {
        return Err(ResponseError::InvalidRequest);
    }
    Ok(fetch_groups(req, version))
}

/// The groups of a request, without validation (also used to answer it with an error).
pub(super) fn fetch_groups(req: &OffsetFetchRequest, version: i16) -> Vec<g::OffsetFetchRequest> {
    let require_stable = req.require_stable && version >= 7;
    if version <= 7 {
        let topics = req.topics.as_ref().map(|topics| {
            topics
                .iter()
                .map(|t| g::OffsetFetchTopic {
                    name: string(&t.name),
                    partition_indexes: t.partition_indexes.clone(),
                })
                .collect()
        });
        return vec![g::OffsetFetchRequest {
            group_id: string(&req.group_id),
            topics,
            require_stable,
        }];
    }
    req.groups
        .iter()
        .map(|group| g::OffsetFetchRequest {
            group_id: string(&group.group_id),
            topics: group.topics.as_ref().map(|topics| {
                topics
                    .iter()
                    .map(|t| g::OffsetFetchTopic {
                        name: string(&t.name),
                        partition_indexes: t.partition_indexes.clone(),
                    })
                    .collect()
            }),
            require_stable,
        })
        .collect()
}

/// A group this broker cannot answer for (NOT_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, ...).
/// The requested partitions are listed so that v0-v1, which have no group-level error, can carry
/// the error on each of them.
pub fn offset_fetch_group_error(
    req: &g::OffsetFetchRequest,
    error: ResponseError,
) -> g::OffsetFetchResponse {
    let topics = req
        .topics
        .iter()
        .flatten()
        .map(|t| g::OffsetFetchResponseTopic {
            name: t.name.clone(),
            partitions: t
                .partition_indexes
                .iter()
                .map(|p| no_offset(*p, Some(error)))
                .collect(),
        })
        .collect();
    g::OffsetFetchResponse {
        group_id: req.group_id.clone(),
        error: Some(error),
        topics,
    }
}

fn no_offset(
    partition_index: i32,
    error: Option<ResponseError>,
) -> g::OffsetFetchResponsePartition {
    g::OffsetFetchResponsePartition {
        partition_index,
        committed_offset: -1,
        committed_leader_epoch: -1,
        metadata: String::new(),
        error,
    }
}

/// Merges the per-group answers, in the order of [`offset_fetch_requests`], into the response
/// for `version`:
///
/// * v0-v1 have no group-level error: a group error goes on every partition (offset -1), as
///   Kafka's `OffsetFetchResponse` does for these versions.
/// * v2-v7 carry the group error at the top level, with no partitions (Kafka's error response).
/// * v8+ carry one entry per group with its own error code.
///
/// The leader epoch exists from v5.
pub fn offset_fetch_response(
    groups: Vec<g::OffsetFetchResponse>,
    version: i16,
) -> OffsetFetchResponse {
    let mut out = OffsetFetchResponse::default();
    if version >= 8 {
        out.groups = groups
            .into_iter()
            .map(|group| {
                let mut wire = OffsetFetchResponseGroup::default();
                wire.error_code = code(group.error);
                if group.error.is_none() {
                    wire.topics = group.topics.into_iter().map(topics_v8).collect();
                }
                wire.group_id = group_id(group.group_id);
                wire
            })
            .collect();
        return out;
    }
    // v0-v7 name exactly one group; the split made exactly one request.
    let Some(group) = groups.into_iter().next() else {
        return out;
    };
    let group_error = group.error;
    if version >= 2 {
        out.error_code = code(group_error);
        if group_error.is_some() {
            return out;
        }
    }
    out.topics = group
        .topics
        .into_iter()
        .map(|t| {
            let mut topic = OffsetFetchResponseTopic::default();
            topic.name = TopicName(str_bytes(t.name));
            topic.partitions = t
                .partitions
                .into_iter()
                .map(|p| {
                    let p = match group_error {
                        Some(error) => no_offset(p.partition_index, Some(error)),
                        None => p,
                    };
                    let mut wire = OffsetFetchResponsePartition::default();
                    wire.partition_index = p.partition_index;
                    wire.committed_offset = p.committed_offset;
                    if version >= 5 {
                        wire.committed_leader_epoch = p.committed_leader_epoch;
                    }
                    wire.metadata = Some(str_bytes(p.metadata));
                    wire.error_code = code(p.error);
                    wire
                })
                .collect();
            topic
        })
        .collect();
    out
}

fn topics_v8(t: g::OffsetFetchResponseTopic) -> OffsetFetchResponseTopics {
    let mut topic = OffsetFetchResponseTopics::default();
    topic.name = TopicName(str_bytes(t.name));
    topic.partitions = t
        .partitions
        .into_iter()
        .map(|p| {
            let mut wire = OffsetFetchResponsePartitions::default();
            wire.partition_index = p.partition_index;
            wire.committed_offset = p.committed_offset;
            wire.committed_leader_epoch = p.committed_leader_epoch;
            wire.metadata = Some(str_bytes(p.metadata));
            wire.error_code = code(p.error);
            wire
        })
        .collect();
    topic
}

#[cfg(test)]
mod tests {
    use super::super::wire_check::{assert_roundtrip, roundtrip};
    use super::*;
    use kafka_protocol::messages::offset_commit_request::{
        OffsetCommitRequestPartition, OffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::offset_fetch_request::{
        OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
    };
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::protocol::StrBytes;

    fn sb(s: &'static str) -> StrBytes {
        StrBytes::from_static_str(s)
    }

    fn commit_request(version: i16) -> OffsetCommitRequest {
        let mut req = OffsetCommitRequest::default();
        req.group_id = GroupId(sb("g"));
        req.generation_id_or_member_epoch = 5;
        req.member_id = sb("m-1");
        if version >= 7 {
            req.group_instance_id = Some(sb("i-1"));
        }
        if version <= 4 {
            req.retention_time_ms = 86_400_000;
        }
        let mut topic = OffsetCommitRequestTopic::default();
        topic.name = TopicName(sb("t"));
        topic.partitions = (0..2)
            .map(|i| {
                let mut p = OffsetCommitRequestPartition::default();
                p.partition_index = i;
                p.committed_offset = 100 + i64::from(i);
                if version >= 6 {
                    p.committed_leader_epoch = 9;
                }
                p.committed_metadata = if i == 0 { Some(sb("meta")) } else { None };
                p
            })
            .collect();
        req.topics = vec![topic];
        req
    }

    #[test]
    fn offset_commit_request_at_lowest_middle_highest() {
        for version in [2, 6, 9] {
            let wire = roundtrip(&commit_request(version), version);
            let req = offset_commit_request(&wire, version);
            assert_eq!(req.group_id, "g");
            assert_eq!(req.generation_id, 5);
            assert_eq!(req.member_id, "m-1");
            assert_eq!(req.group_instance_id.is_some(), version >= 7);
            let p = &req.topics[0].partitions;
            assert_eq!((p[0].partition_index, p[0].committed_offset), (0, 100));
            assert_eq!(p[1].committed_offset, 101);
            let epoch = if version >= 6 { 9 } else { -1 };
            assert_eq!(p[0].committed_leader_epoch, epoch, "v{version}");
            assert_eq!(p[0].committed_metadata.as_deref(), Some("meta"));
            assert_eq!(p[1].committed_metadata, None);
        }
    }

    #[test]
    fn offset_commit_response_with_rejected_partitions() {
        let wire = roundtrip(&commit_request(8), 8);
        let mut req = offset_commit_request(&wire, 8);
        req.topics.push(g::OffsetCommitTopic {
            name: "missing".into(),
            partitions: vec![g::OffsetCommitPartition {
                partition_index: 0,
                committed_offset: 1,
                committed_leader_epoch: -1,
                committed_metadata: None,
            }],
        });
        // Topic "t" has one partition (0); "missing" does not exist.
        let (kept, rejected) = split_unknown_partitions(req, |t, p| t == "t" && p == 0);
        assert_eq!(kept.topics.len(), 1);
        assert_eq!(kept.topics[0].partitions.len(), 1);
        let coordinator = g::OffsetCommitResponse {
            topics: vec![g::OffsetCommitResponseTopic {
                name: "t".into(),
                partitions: vec![g::OffsetCommitResponsePartition {
                    partition_index: 0,
                    error: None,
                }],
            }],
        };
        for version in [2, 6, 9] {
            let wire = offset_commit_response(coordinator.clone(), Some(rejected.clone()), version);
            let wire = assert_roundtrip(&wire, version);
            let got: Vec<(String, i32, i16)> = wire
                .topics
                .iter()
                .flat_map(|t| {
                    t.partitions
                        .iter()
                        .map(|p| (t.name.0.to_string(), p.partition_index, p.error_code))
                })
                .collect();
            let unknown = ResponseError::UnknownTopicOrPartition.code();
            assert_eq!(
                got,
                vec![
                    ("t".to_string(), 0, 0),
                    ("t".to_string(), 1, unknown),
                    ("missing".to_string(), 0, unknown),
                ]
            );
        }
    }

    #[test]
    fn commit_with_only_unknown_partitions_leaves_nothing_for_the_coordinator() {
        let req = offset_commit_request(&roundtrip(&commit_request(9), 9), 9);
        let (kept, rejected) = split_unknown_partitions(req, |_, _| false);
        assert!(kept.topics.is_empty());
        assert_eq!(rejected.topics[0].partitions.len(), 2);
    }

    fn fetch_request(version: i16) -> OffsetFetchRequest {
        let mut req = OffsetFetchRequest::default();
        if version <= 7 {
            req.group_id = GroupId(sb("g"));
            let mut t = OffsetFetchRequestTopic::default();
            t.name = TopicName(sb("t"));
            t.partition_indexes = vec![0, 1];
            req.topics = Some(vec![t]);
        } else {
            let mut first = OffsetFetchRequestGroup::default();
            first.group_id = GroupId(sb("g"));
            let mut t = OffsetFetchRequestTopics::default();
            t.name = TopicName(sb("t"));
            t.partition_indexes = vec![0, 1];
            first.topics = Some(vec![t]);
            let mut all = OffsetFetchRequestGroup::default();
            all.group_id = GroupId(sb("h"));
            all.topics = None;
            req.groups = vec![first, all];
        }
        req.require_stable = version >= 7;
        req
    }

    #[test]
    fn offset_fetch_request_single_and_multi_group() {
        for version in [1, 7, 9] {
            let wire = roundtrip(&fetch_request(version), version);
            let reqs = offset_fetch_requests(&wire, version).expect("valid");
            assert_eq!(reqs[0].group_id, "g");
            let topics = reqs[0].topics.as_ref().expect("named topics");
            assert_eq!(topics[0].partition_indexes, vec![0, 1]);
            assert_eq!(reqs[0].require_stable, version >= 7);
            if version >= 8 {
                assert_eq!(reqs.len(), 2);
                assert_eq!(reqs[1].group_id, "h");
                assert_eq!(reqs[1].topics, None);
            } else {
                assert_eq!(reqs.len(), 1);
            }
        }
        // v2+ may ask for every partition of the group.
        let mut all = fetch_request(2);
        all.topics = None;
        let reqs = offset_fetch_requests(&roundtrip(&all, 2), 2).expect("valid");
        assert_eq!(reqs[0].topics, None);
    }

    #[test]
    fn offset_fetch_v1_cannot_fetch_all_topics() {
        let mut req = fetch_request(1);
        req.topics = None;
        assert_eq!(
            offset_fetch_requests(&req, 1),
            Err(ResponseError::InvalidRequest)
        );
    }

    fn committed(group: &str) -> g::OffsetFetchResponse {
        g::OffsetFetchResponse {
            group_id: group.into(),
            error: None,
            topics: vec![g::OffsetFetchResponseTopic {
                name: "t".into(),
                partitions: vec![
                    g::OffsetFetchResponsePartition {
                        partition_index: 0,
                        committed_offset: 42,
                        committed_leader_epoch: 3,
                        metadata: "meta".into(),
                        error: None,
                    },
                    no_offset(1, None),
                ],
            }],
        }
    }

    #[test]
    fn offset_fetch_response_at_every_version() {
        for version in 1..=9 {
            let groups = if version >= 8 {
                vec![committed("g"), committed("h")]
            } else {
                vec![committed("g")]
            };
            let wire = assert_roundtrip(&offset_fetch_response(groups, version), version);
            let epoch = if version >= 5 { 3 } else { -1 };
            if version >= 8 {
                assert_eq!(wire.groups.len(), 2);
                assert_eq!(wire.groups[1].group_id.as_str(), "h");
                let p = &wire.groups[0].topics[0].partitions;
                assert_eq!(
                    (p[0].committed_offset, p[0].committed_leader_epoch),
                    (42, 3)
                );
                assert_eq!(p[1].committed_offset, -1);
            } else {
                let p = &wire.topics[0].partitions;
                assert_eq!(p[0].committed_offset, 42);
                assert_eq!(p[0].committed_leader_epoch, epoch, "v{version}");
                assert_eq!(p[0].metadata.as_deref(), Some("meta"));
                assert_eq!(p[1].committed_offset, -1);
                assert_eq!(wire.error_code, 0);
            }
        }
    }

    #[test]
    fn group_error_is_top_level_from_v2_and_per_partition_before() {
        let loading = ResponseError::CoordinatorLoadInProgress;
        for version in [1, 2, 7] {
            let reqs = offset_fetch_requests(&fetch_request(version), version).expect("valid");
            let groups = reqs
                .iter()
                .map(|r| offset_fetch_group_error(r, loading))
                .collect();
            let wire = assert_roundtrip(&offset_fetch_response(groups, version), version);
            if version < 2 {
                let codes: Vec<i16> = wire.topics[0]
                    .partitions
                    .iter()
                    .map(|p| p.error_code)
                    .collect();
                assert_eq!(codes, vec![loading.code(); 2]);
                assert!(wire.topics[0]
                    .partitions
                    .iter()
                    .all(|p| p.committed_offset == -1));
            } else {
                assert_eq!(wire.error_code, loading.code(), "v{version}");
                assert!(wire.topics.is_empty());
            }
        }
    }

    #[test]
    fn multi_group_fetch_reports_errors_per_group() {
        let reqs = offset_fetch_requests(&fetch_request(9), 9).expect("valid");
        // "g" is served here; "h" lives on a partition another broker leads.
        let answers = vec![
            committed("g"),
            offset_fetch_group_error(&reqs[1], ResponseError::NotCoordinator),
        ];
        let wire = assert_roundtrip(&offset_fetch_response(answers, 9), 9);
        assert_eq!(wire.groups[0].error_code, 0);
        assert_eq!(wire.groups[0].topics.len(), 1);
        assert_eq!(wire.groups[1].group_id.as_str(), "h");
        assert_eq!(
            wire.groups[1].error_code,
            ResponseError::NotCoordinator.code()
        );
        assert!(wire.groups[1].topics.is_empty());
    }
}

#[cfg(test)]
mod txn_tests {
    use super::*;
    use crate::group_wire::wire_check::{assert_roundtrip, roundtrip};
    use kafka_protocol::messages::txn_offset_commit_request::{
        TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
    };
    use kafka_protocol::messages::{
        ApiKey, GroupId, ProducerId, RequestKind, ResponseKind, TransactionalId,
    };
    use kafka_protocol::protocol::StrBytes;

    fn sb(s: &'static str) -> StrBytes {
        StrBytes::from_static_str(s)
    }

    fn wire(version: i16) -> TxnOffsetCommitRequest {
        let mut p = TxnOffsetCommitRequestPartition::default();
        p.partition_index = 1;
        p.committed_offset = 42;
        p.committed_metadata = Some(sb("meta"));
        if version >= 2 {
            p.committed_leader_epoch = 7;
        }
        let mut t = TxnOffsetCommitRequestTopic::default();
        t.name = TopicName(sb("t"));
        t.partitions = vec![p];
        let mut r = TxnOffsetCommitRequest::default();
        r.transactional_id = TransactionalId(sb("tx"));
        r.group_id = GroupId(sb("g"));
        r.producer_id = ProducerId(1000);
        r.producer_epoch = 3;
        if version >= 3 {
            r.generation_id = 5;
            r.member_id = sb("m-1");
            r.group_instance_id = Some(sb("i-1"));
        }
        r.topics = vec![t];
        r
    }

    #[test]
    fn txn_offset_commit_request_by_version() {
        for version in 0..=4 {
            let req = txn_offset_commit_request(&roundtrip(&wire(version), version), version);
            assert_eq!(
                (req.transactional_id.as_str(), req.group_id.as_str()),
                ("tx", "g")
            );
            assert_eq!((req.producer_id, req.producer_epoch), (1000, 3));
            let v3 = version >= 3;
            assert_eq!(req.generation_id, if v3 { 5 } else { -1 });
            assert_eq!(req.member_id, if v3 { "m-1" } else { "" });
            assert_eq!(req.group_instance_id.is_some(), v3);
            let p = &req.topics[0].partitions[0];
            assert_eq!((p.partition_index, p.committed_offset), (1, 42));
            assert_eq!(p.committed_leader_epoch, if version >= 2 { 7 } else { -1 });
            assert_eq!(p.committed_metadata.as_deref(), Some("meta"));
        }
    }

    #[test]
    fn txn_offset_commit_response_merges_rejected_partitions_at_every_version() {
        let answered = g::TxnOffsetCommitResponse {
            topics: vec![g::OffsetCommitResponseTopic {
                name: "t".into(),
                partitions: vec![g::OffsetCommitResponsePartition {
                    partition_index: 0,
                    error: None,
                }],
            }],
        };
        let (_, rejected) = split_unknown_partitions(
            g::OffsetCommitRequest {
                topics: vec![g::OffsetCommitTopic {
                    name: "t".into(),
                    partitions: vec![g::OffsetCommitPartition {
                        partition_index: 9,
                        ..Default::default()
                    }],
                }],
                ..Default::default()
            },
            |_, p| p != 9,
        );
        for version in 0..=4 {
            let resp =
                txn_offset_commit_response(answered.clone(), Some(rejected.clone()), version);
            let resp = assert_roundtrip(&resp, version);
            let codes: Vec<(i32, i16)> = resp.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.error_code))
                .collect();
            assert_eq!(
                codes,
                vec![(0, 0), (9, ResponseError::UnknownTopicOrPartition.code())]
            );
        }
    }

    #[test]
    fn txn_offset_commit_error_response_names_every_partition() {
        let request = RequestKind::TxnOffsetCommit(wire(3));
        let Some(ResponseKind::TxnOffsetCommit(resp)) = crate::group_wire::error_response(
            ApiKey::TxnOffsetCommit,
            3,
            &request,
            ResponseError::NotCoordinator,
        ) else {
            panic!("a TxnOffsetCommit answer");
        };
        let p = &resp.topics[0].partitions[0];
        assert_eq!(
            (p.partition_index, p.error_code),
            (1, ResponseError::NotCoordinator.code())
        );
    }
}
