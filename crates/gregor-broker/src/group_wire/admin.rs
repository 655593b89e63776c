//! DescribeGroups, ListGroups and DeleteGroups: requests that name several groups (or all of
//! them), which may live on different coordinators.

use std::collections::{HashMap, VecDeque};

use gregor_group::api as g;
use gregor_group::partition_for;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest, DescribeGroupsResponse,
    ListGroupsRequest, ListGroupsResponse,
};
use kafka_protocol::ResponseError;

use super::convert::{code, group_id, opt_str_bytes, str_bytes, string};

/// The authorized-operations bitfield Kafka reports for a group when no authorizer is
/// configured (every operation a group supports): READ (3), DELETE (6), DESCRIBE (8),
/// DESCRIBE_CONFIGS (10) and ALTER_CONFIGS (11). Gregor has no ACLs.
pub const GROUP_AUTHORIZED_OPERATIONS: i32 = (1 << 3) | (1 << 6) | (1 << 8) | (1 << 10) | (1 << 11);

/// Every group id the request names, in order.
pub fn describe_groups_request(req: &DescribeGroupsRequest) -> g::DescribeGroupsRequest {
    g::DescribeGroupsRequest {
        group_ids: req.groups.iter().map(|id| string(id)).collect(),
    }
}

/// One coordinator request per `__consumer_offsets` partition (`offsets.topic.num.partitions`
/// = `num_partitions`), in order of first appearance; ids keep the request's order within each.
pub fn describe_groups_split(
    req: &DescribeGroupsRequest,
    num_partitions: i32,
) -> Vec<(i32, g::DescribeGroupsRequest)> {
    by_partition(describe_groups_request(req).group_ids, num_partitions)
        .into_iter()
        .map(|(p, group_ids)| (p, g::DescribeGroupsRequest { group_ids }))
        .collect()
}

/// Every group of a part answered with `error`, as Kafka's `DescribeGroupsResponse.groupError`
/// (empty state, protocol and members).
pub fn describe_groups_error(
    part: &g::DescribeGroupsRequest,
    error: ResponseError,
) -> g::DescribeGroupsResponse {
    g::DescribeGroupsResponse {
        groups: part
            .group_ids
            .iter()
            .map(|id| g::DescribedGroup {
                error: Some(error),
                group_id: id.clone(),
                ..Default::default()
            })
            .collect(),
    }
}

/// Merges the parts into one response in the request's order.
///
/// * v3+: the authorized operations are reported, for groups without error, only when the
///   request asks for them ([`GROUP_AUTHORIZED_OPERATIONS`]); otherwise "omitted".
/// * v4+: members' group instance ids.
/// * v6 (KIP-1043): a group that does not exist (the coordinator describes it as `Dead` without
///   error) is GROUP_ID_NOT_FOUND with a message; older versions keep Kafka's `Dead`, no error.
pub fn describe_groups_response(
    req: &DescribeGroupsRequest,
    parts: Vec<g::DescribeGroupsResponse>,
    version: i16,
) -> DescribeGroupsResponse {
    let include_operations = version >= 3 && req.include_authorized_operations;
    let mut by_id: HashMap<String, VecDeque<g::DescribedGroup>> = HashMap::new();
    for group in parts.into_iter().flat_map(|p| p.groups) {
        by_id
            .entry(group.group_id.clone())
            .or_default()
            .push_back(group);
    }
    let mut out = DescribeGroupsResponse::default();
    for id in &req.groups {
        let Some(group) = by_id.get_mut(id.as_str()).and_then(|q| q.pop_front()) else {
            continue;
        };
        out.groups
            .push(described_group(group, include_operations, version));
    }
    // Anything the request did not name (a shell bug) still gets reported rather than lost.
    let mut rest: Vec<g::DescribedGroup> = by_id.into_values().flatten().collect();
    rest.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    out.groups.extend(
        rest.into_iter()
            .map(|group| described_group(group, include_operations, version)),
    );
    out
}

fn described_group(
    group: g::DescribedGroup,
    include_operations: bool,
    version: i16,
) -> DescribedGroup {
    let mut out = DescribedGroup::default();
    let not_found = version >= 6
        && group.error.is_none()
        && group.group_state == "Dead"
        && group.members.is_empty();
    if not_found {
        out.error_code = ResponseError::GroupIdNotFound.code();
        out.error_message = Some(str_bytes(format!("Group {} not found.", group.group_id)));
    } else {
        out.error_code = code(group.error);
    }
    if include_operations && out.error_code == 0 {
        out.authorized_operations = GROUP_AUTHORIZED_OPERATIONS;
    }
    out.group_id = group_id(group.group_id);
    out.group_state = str_bytes(group.group_state);
    out.protocol_type = str_bytes(group.protocol_type);
    out.protocol_data = str_bytes(group.protocol_data);
    out.members = group
        .members
        .into_iter()
        .map(|m| {
            let mut member = DescribedGroupMember::default();
            member.member_id = str_bytes(m.member_id);
            member.group_instance_id = opt_str_bytes(m.group_instance_id).filter(|_| version >= 4);
            member.client_id = str_bytes(m.client_id);
            member.client_host = str_bytes(m.client_host);
            member.member_metadata = m.member_metadata;
            member.member_assignment = m.member_assignment;
            member
        })
        .collect();
    out
}

/// The states filter exists from v4, the types filter from v5. Send it to every coordinator
/// partition this broker leads.
pub fn list_groups_request(req: &ListGroupsRequest, version: i16) -> g::ListGroupsRequest {
    g::ListGroupsRequest {
        states_filter: if version >= 4 {
            req.states_filter.iter().map(string).collect()
        } else {
            Vec::new()
        },
        types_filter: if version >= 5 {
            req.types_filter.iter().map(string).collect()
        } else {
            Vec::new()
        },
    }
}

/// What a partition that is still loading contributes: Kafka fails the whole ListGroups with
/// COORDINATOR_LOAD_IN_PROGRESS (partitions led elsewhere are simply left out).
pub fn list_groups_loading() -> g::ListGroupsResponse {
    g::ListGroupsResponse {
        error: Some(ResponseError::CoordinatorLoadInProgress),
        groups: Vec::new(),
    }
}

/// Merges the answers of every coordinator partition, sorted by group id. Any error fails the
/// whole response with no groups, as Kafka does. The state exists from v4, the type from v5.
pub fn list_groups_response(parts: Vec<g::ListGroupsResponse>, version: i16) -> ListGroupsResponse {
    let mut out = ListGroupsResponse::default();
    if let Some(error) = parts.iter().find_map(|p| p.error) {
        out.error_code = error.code();
        return out;
    }
    let mut groups: Vec<g::ListedGroup> = parts.into_iter().flat_map(|p| p.groups).collect();
    groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
    out.groups = groups
        .into_iter()
        .map(|lg| {
            let mut wire = ListedGroup::default();
            wire.group_id = group_id(lg.group_id);
            wire.protocol_type = str_bytes(lg.protocol_type);
            if version >= 4 {
                wire.group_state = str_bytes(lg.group_state);
            }
            if version >= 5 {
                wire.group_type = str_bytes(lg.group_type);
            }
            wire
        })
        .collect();
    out
}

/// The group ids to delete, in order, duplicates removed (Kafka's `distinct`).
pub fn delete_groups_request(req: &DeleteGroupsRequest) -> g::DeleteGroupsRequest {
    let mut group_ids: Vec<String> = Vec::with_capacity(req.groups_names.len());
    for id in &req.groups_names {
        if !group_ids.iter().any(|x| x == id.as_str()) {
            group_ids.push(string(id));
        }
    }
    g::DeleteGroupsRequest { group_ids }
}

/// [`delete_groups_request`] as one coordinator request per `__consumer_offsets` partition.
pub fn delete_groups_split(
    req: &DeleteGroupsRequest,
    num_partitions: i32,
) -> Vec<(i32, g::DeleteGroupsRequest)> {
    by_partition(delete_groups_request(req).group_ids, num_partitions)
        .into_iter()
        .map(|(p, group_ids)| (p, g::DeleteGroupsRequest { group_ids }))
        .collect()
}

pub fn delete_groups_error(
    part: &g::DeleteGroupsRequest,
    error: ResponseError,
) -> g::DeleteGroupsResponse {
    g::DeleteGroupsResponse {
        results: part
            .group_ids
            .iter()
            .map(|id| g::DeletableGroupResult {
                group_id: id.clone(),
                error: Some(error),
            })
            .collect(),
    }
}

/// Concatenates the parts' results; every version has the same fields.
pub fn delete_groups_response(
    parts: Vec<g::DeleteGroupsResponse>,
    _version: i16,
) -> DeleteGroupsResponse {
    let mut out = DeleteGroupsResponse::default();
    out.results = parts
        .into_iter()
        .flat_map(|p| p.results)
        .map(|r| {
            let mut wire = DeletableGroupResult::default();
            wire.group_id = group_id(r.group_id);
            wire.error_code = code(r.error);
            wire
        })
        .collect();
    out
}

/// Groups ids by hosting partition, partitions in order of first appearance.
pub(super) fn by_partition(ids: Vec<String>, num_partitions: i32) -> Vec<(i32, Vec<String>)> {
    let mut parts: Vec<(i32, Vec<String>)> = Vec::new();
    for id in ids {
        let p = partition_for(&id, num_partitions);
        match parts.iter_mut().find(|(q, _)| *q == p) {
            Some((_, ids)) => ids.push(id),
            None => parts.push((p, vec![id])),
        }
    }
    parts
}

#[cfg(test)]
mod tests {
    use super::super::wire_check::{assert_roundtrip, roundtrip};
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::protocol::StrBytes;

    /// DescribeGroups' "authorized operations not requested" (Kafka's `Integer.MIN_VALUE`),
    /// the wire default an answer keeps when they were not asked for.
    const AUTHORIZED_OPERATIONS_OMITTED: i32 = i32::MIN;

    fn gid(s: &str) -> GroupId {
        GroupId(StrBytes::from_string(s.to_string()))
    }

    fn stable(id: &str) -> g::DescribedGroup {
        g::DescribedGroup {
            error: None,
            group_id: id.into(),
            group_state: "Stable".into(),
            protocol_type: "consumer".into(),
            protocol_data: "range".into(),
            members: vec![g::DescribedMember {
                member_id: "m-1".into(),
                group_instance_id: Some("i-1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                member_metadata: Bytes::from_static(b"sub"),
                member_assignment: Bytes::from_static(b"asg"),
            }],
        }
    }

    fn unknown(id: &str) -> g::DescribedGroup {
        g::DescribedGroup {
            error: None,
            group_id: id.into(),
            group_state: "Dead".into(),
            ..Default::default()
        }
    }

    #[test]
    fn describe_groups_at_lowest_middle_highest() {
        for version in [0, 3, 6] {
            let mut wire = DescribeGroupsRequest::default();
            wire.groups = vec![gid("a"), gid("b")];
            wire.include_authorized_operations = version >= 3;
            let wire = roundtrip(&wire, version);
            assert_eq!(describe_groups_request(&wire).group_ids, vec!["a", "b"]);

            let parts = vec![g::DescribeGroupsResponse {
                groups: vec![unknown("b"), stable("a")],
            }];
            let out = assert_roundtrip(&describe_groups_response(&wire, parts, version), version);
            // The request's order, whatever order the parts came in.
            assert_eq!(out.groups[0].group_id.as_str(), "a");
            assert_eq!(out.groups[1].group_id.as_str(), "b");
            let a = &out.groups[0];
            assert_eq!((a.error_code, a.group_state.as_str()), (0, "Stable"));
            assert_eq!(a.protocol_data.as_str(), "range");
            assert_eq!(a.members[0].member_assignment, Bytes::from_static(b"asg"));
            assert_eq!(
                a.members[0].group_instance_id.as_deref(),
                (version >= 4).then_some("i-1")
            );
            let operations = if version >= 3 {
                GROUP_AUTHORIZED_OPERATIONS
            } else {
                AUTHORIZED_OPERATIONS_OMITTED
            };
            assert_eq!(a.authorized_operations, operations);
            // An unknown group: Dead without error before v6, GROUP_ID_NOT_FOUND from v6.
            let b = &out.groups[1];
            assert_eq!(b.group_state.as_str(), "Dead");
            let expected = if version >= 6 {
                ResponseError::GroupIdNotFound.code()
            } else {
                0
            };
            assert_eq!(b.error_code, expected, "v{version}");
            // Kafka reports operations for every group described without error.
            let operations = if (3..6).contains(&version) {
                GROUP_AUTHORIZED_OPERATIONS
            } else {
                AUTHORIZED_OPERATIONS_OMITTED
            };
            assert_eq!(b.authorized_operations, operations, "v{version}");
        }
    }

    #[test]
    fn authorized_operations_only_when_asked() {
        let mut wire = DescribeGroupsRequest::default();
        wire.groups = vec![gid("a")];
        wire.include_authorized_operations = false;
        let parts = vec![g::DescribeGroupsResponse {
            groups: vec![stable("a")],
        }];
        let out = assert_roundtrip(&describe_groups_response(&wire, parts, 5), 5);
        assert_eq!(
            out.groups[0].authorized_operations,
            AUTHORIZED_OPERATIONS_OMITTED
        );
    }

    #[test]
    fn describe_split_routes_groups_and_merge_restores_order() {
        let mut wire = DescribeGroupsRequest::default();
        let ids = ["g0", "g1", "g2", "g3", "g4", "g5"];
        wire.groups = ids.iter().map(|s| gid(s)).collect();
        let parts = describe_groups_split(&wire, 3);
        assert!(
            parts.len() > 1,
            "six ids should span several of 3 partitions"
        );
        for (p, part) in &parts {
            assert!(part.group_ids.iter().all(|id| partition_for(id, 3) == *p));
        }
        assert_eq!(
            parts.iter().map(|(_, r)| r.group_ids.len()).sum::<usize>(),
            6
        );
        // The first partition is served here; the others are led by another broker.
        let answers = parts
            .iter()
            .enumerate()
            .map(|(i, (_, part))| {
                if i == 0 {
                    g::DescribeGroupsResponse {
                        groups: part.group_ids.iter().map(|id| stable(id)).collect(),
                    }
                } else {
                    describe_groups_error(part, ResponseError::NotCoordinator)
                }
            })
            .collect();
        let out = assert_roundtrip(&describe_groups_response(&wire, answers, 5), 5);
        let got: Vec<&str> = out.groups.iter().map(|g| g.group_id.as_str()).collect();
        assert_eq!(got, ids);
        for group in &out.groups {
            let served = parts[0]
                .1
                .group_ids
                .iter()
                .any(|id| id == group.group_id.as_str());
            let expected = if served {
                0
            } else {
                ResponseError::NotCoordinator.code()
            };
            assert_eq!(group.error_code, expected);
            assert_eq!(group.group_state.is_empty(), !served);
        }
    }

    #[test]
    fn list_groups_at_lowest_middle_highest() {
        for version in [0, 4, 5] {
            let mut wire = ListGroupsRequest::default();
            if version >= 4 {
                wire.states_filter = vec![StrBytes::from_static_str("Stable")];
            }
            if version >= 5 {
                wire.types_filter = vec![StrBytes::from_static_str("classic")];
            }
            let req = list_groups_request(&roundtrip(&wire, version), version);
            assert_eq!(req.states_filter.len(), usize::from(version >= 4));
            assert_eq!(req.types_filter.len(), usize::from(version >= 5));

            let listed = |id: &str| g::ListedGroup {
                group_id: id.into(),
                protocol_type: "consumer".into(),
                group_state: "Stable".into(),
                group_type: "classic".into(),
            };
            let parts = vec![
                g::ListGroupsResponse {
                    error: None,
                    groups: vec![listed("b")],
                },
                g::ListGroupsResponse {
                    error: None,
                    groups: vec![listed("a")],
                },
            ];
            let out = assert_roundtrip(&list_groups_response(parts, version), version);
            let ids: Vec<&str> = out.groups.iter().map(|g| g.group_id.as_str()).collect();
            assert_eq!(ids, vec!["a", "b"]);
            assert_eq!(out.groups[0].protocol_type.as_str(), "consumer");
            let state = if version >= 4 { "Stable" } else { "" };
            assert_eq!(out.groups[0].group_state.as_str(), state);
            let kind = if version >= 5 { "classic" } else { "" };
            assert_eq!(out.groups[0].group_type.as_str(), kind);
        }
    }

    #[test]
    fn a_loading_partition_fails_list_groups() {
        let parts = vec![
            g::ListGroupsResponse {
                error: None,
                groups: vec![g::ListedGroup {
                    group_id: "a".into(),
                    ..Default::default()
                }],
            },
            list_groups_loading(),
        ];
        let out = assert_roundtrip(&list_groups_response(parts, 3), 3);
        assert_eq!(
            out.error_code,
            ResponseError::CoordinatorLoadInProgress.code()
        );
        assert!(out.groups.is_empty());
    }

    #[test]
    fn delete_groups_at_every_version_dedups_and_routes() {
        for version in [0, 1, 2] {
            let mut wire = DeleteGroupsRequest::default();
            wire.groups_names = vec![gid("a"), gid("b"), gid("a")];
            let wire = roundtrip(&wire, version);
            let parts = delete_groups_split(&wire, 50);
            let ids: Vec<&String> = parts.iter().flat_map(|(_, r)| &r.group_ids).collect();
            assert_eq!(ids.len(), 2, "duplicates removed");
            for (p, part) in &parts {
                assert!(part.group_ids.iter().all(|id| partition_for(id, 50) == *p));
            }
            let answers = parts
                .iter()
                .map(|(_, part)| g::DeleteGroupsResponse {
                    results: part
                        .group_ids
                        .iter()
                        .map(|id| g::DeletableGroupResult {
                            group_id: id.clone(),
                            error: (id == "b").then_some(ResponseError::NonEmptyGroup),
                        })
                        .collect(),
                })
                .collect();
            let out = assert_roundtrip(&delete_groups_response(answers, version), version);
            let mut got: Vec<(&str, i16)> = out
                .results
                .iter()
                .map(|r| (r.group_id.as_str(), r.error_code))
                .collect();
            got.sort();
            assert_eq!(
                got,
                vec![("a", 0), ("b", ResponseError::NonEmptyGroup.code())]
            );
        }
    }

    #[test]
    fn delete_groups_error_covers_every_group() {
        let part = g::DeleteGroupsRequest {
            group_ids: vec!["a".into(), "b".into()],
        };
        let out = delete_groups_response(
            vec![delete_groups_error(
                &part,
                ResponseError::CoordinatorNotAvailable,
            )],
            2,
        );
        assert!(out
            .results
            .iter()
            .all(|r| r.error_code == ResponseError::CoordinatorNotAvailable.code()));
        assert_eq!(out.results.len(), 2);
    }
}
