//! JoinGroup, SyncGroup, Heartbeat and LeaveGroup.

use gregor_group::api as g;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{
    HeartbeatRequest, HeartbeatResponse, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::ResponseError;

use super::convert::{code, opt_str_bytes, opt_string, str_bytes, string};

/// JoinGroup v0 has no rebalance timeout: Kafka uses the session timeout in its place. Fields a
/// version lacks decode as absent (`group_instance_id` before v5, `reason` before v8).
pub fn join_group_request(req: &JoinGroupRequest, version: i16) -> g::JoinGroupRequest {
    let rebalance_timeout_ms = if version == 0 {
        req.session_timeout_ms
    } else {
        req.rebalance_timeout_ms
    };
    g::JoinGroupRequest {
        group_id: string(&req.group_id),
        session_timeout_ms: req.session_timeout_ms,
        rebalance_timeout_ms,
        member_id: string(&req.member_id),
        group_instance_id: opt_string(&req.group_instance_id).filter(|_| version >= 5),
        protocol_type: string(&req.protocol_type),
        protocols: req
            .protocols
            .iter()
            .map(|p| g::JoinProtocol {
                name: string(&p.name),
                metadata: p.metadata.clone(),
            })
            .collect(),
        reason: opt_string(&req.reason).filter(|_| version >= 8),
    }
}

/// The protocol name is a non-null string before v7 (empty when unknown) and null when unknown
/// from v7, as Kafka's `JoinGroupResponse` normalises it. The protocol type exists from v7,
/// `skip_assignment` from v9 and the members' group instance ids from v5.
pub fn join_group_response(resp: g::JoinGroupResponse, version: i16) -> JoinGroupResponse {
    let protocol_name = resp.protocol_name.filter(|n| !n.is_empty());
    let mut out = JoinGroupResponse::default();
    out.error_code = code(resp.error);
    out.generation_id = resp.generation_id;
    out.protocol_type = opt_str_bytes(resp.protocol_type).filter(|_| version >= 7);
    out.protocol_name = if version >= 7 {
        opt_str_bytes(protocol_name)
    } else {
        Some(str_bytes(protocol_name.unwrap_or_default()))
    };
    out.leader = str_bytes(resp.leader);
    out.skip_assignment = resp.skip_assignment && version >= 9;
    out.member_id = str_bytes(resp.member_id);
    out.members = resp
        .members
        .into_iter()
        .map(|m| {
            let mut member = JoinGroupResponseMember::default();
            member.member_id = str_bytes(m.member_id);
            member.group_instance_id = opt_str_bytes(m.group_instance_id).filter(|_| version >= 5);
            member.metadata = m.metadata;
            member
        })
        .collect();
    out
}

/// SyncGroup v5+ must carry the protocol type and name (KIP-559): Kafka answers
/// INCONSISTENT_GROUP_PROTOCOL without consulting the coordinator when either is null.
pub fn sync_group_request(
    req: &SyncGroupRequest,
    version: i16,
) -> Result<g::SyncGroupRequest, ResponseError> {
    let (protocol_type, protocol_name) = if version >= 5 {
        match (
            opt_string(&req.protocol_type),
            opt_string(&req.protocol_name),
        ) {
            (Some(t), Some(n)) => (Some(t), Some(n)),
            _ => return Err(ResponseError::InconsistentGroupProtocol),
        }
    } else {
        (None, None)
    };
    Ok(g::SyncGroupRequest {
        group_id: string(&req.group_id),
        generation_id: req.generation_id,
        member_id: string(&req.member_id),
        group_instance_id: opt_string(&req.group_instance_id).filter(|_| version >= 3),
        protocol_type,
        protocol_name,
        assignments: req
            .assignments
            .iter()
            .map(|a| g::SyncGroupAssignment {
                member_id: string(&a.member_id),
                assignment: a.assignment.clone(),
            })
            .collect(),
    })
}

/// The protocol type and name exist from v5.
pub fn sync_group_response(resp: g::SyncGroupResponse, version: i16) -> SyncGroupResponse {
    let mut out = SyncGroupResponse::default();
    out.error_code = code(resp.error);
    if version >= 5 {
        out.protocol_type = opt_str_bytes(resp.protocol_type);
        out.protocol_name = opt_str_bytes(resp.protocol_name);
    }
    out.assignment = resp.assignment;
    out
}

pub fn heartbeat_request(req: &HeartbeatRequest, version: i16) -> g::HeartbeatRequest {
    g::HeartbeatRequest {
        group_id: string(&req.group_id),
        generation_id: req.generation_id,
        member_id: string(&req.member_id),
        group_instance_id: opt_string(&req.group_instance_id).filter(|_| version >= 3),
    }
}

pub fn heartbeat_response(resp: g::HeartbeatResponse, _version: i16) -> HeartbeatResponse {
    let mut out = HeartbeatResponse::default();
    out.error_code = code(resp.error);
    out
}

/// v0-v2 name a single member id: it becomes a batch of one (Kafka's `normalizedData`). v3+
/// carry the batch, with group instance ids, and a reason per member from v5.
pub fn leave_group_request(req: &LeaveGroupRequest, version: i16) -> g::LeaveGroupRequest {
    let members = if version <= 2 {
        vec![g::MemberIdentity {
            member_id: string(&req.member_id),
            group_instance_id: None,
            reason: None,
        }]
    } else {
        req.members
            .iter()
            .map(|m| g::MemberIdentity {
                member_id: string(&m.member_id),
                group_instance_id: opt_string(&m.group_instance_id),
                reason: opt_string(&m.reason).filter(|_| version >= 5),
            })
            .collect()
    };
    g::LeaveGroupRequest {
        group_id: string(&req.group_id),
        members,
    }
}

/// v0-v2 carry one error code: the top-level error, or else the first member's error
/// (`legacy_error`), as Kafka's `LeaveGroupResponse` collapses it. v3+ carry both levels.
pub fn leave_group_response(resp: g::LeaveGroupResponse, version: i16) -> LeaveGroupResponse {
    let mut out = LeaveGroupResponse::default();
    if version <= 2 {
        out.error_code = code(resp.legacy_error());
        return out;
    }
    out.error_code = code(resp.error);
    out.members = resp
        .members
        .into_iter()
        .map(|m| {
            let mut member = MemberResponse::default();
            member.member_id = str_bytes(m.member_id);
            member.group_instance_id = opt_str_bytes(m.group_instance_id);
            member.error_code = code(m.error);
            member
        })
        .collect();
    out
}

/// A JoinGroup answered with `error` alone, as Kafka's `getErrorResponse` builds it.
pub(super) fn join_error(error: ResponseError) -> g::JoinGroupResponse {
    g::JoinGroupResponse {
        error: Some(error),
        generation_id: -1,
        ..Default::default()
    }
}

pub(super) fn sync_error(error: ResponseError) -> g::SyncGroupResponse {
    g::SyncGroupResponse {
        error: Some(error),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::super::wire_check::assert_roundtrip;
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
    use kafka_protocol::messages::leave_group_request::MemberIdentity;
    use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
    use kafka_protocol::messages::GroupId;
    use kafka_protocol::protocol::StrBytes;

    fn sb(s: &'static str) -> StrBytes {
        StrBytes::from_static_str(s)
    }

    /// Encodes and decodes a wire request as a client would send it at `version`.
    fn sent<M>(req: &M, version: i16) -> M
    where
        M: kafka_protocol::protocol::Encodable + kafka_protocol::protocol::Decodable,
    {
        super::super::wire_check::roundtrip(req, version)
    }

    fn join_request(version: i16) -> JoinGroupRequest {
        let mut req = JoinGroupRequest::default();
        req.group_id = GroupId(sb("g"));
        req.session_timeout_ms = 10_000;
        if version >= 1 {
            req.rebalance_timeout_ms = 60_000;
        }
        req.member_id = sb("m-1");
        if version >= 5 {
            req.group_instance_id = Some(sb("i-1"));
        }
        req.protocol_type = sb("consumer");
        let mut range = JoinGroupRequestProtocol::default();
        range.name = sb("range");
        range.metadata = Bytes::from_static(b"sub");
        req.protocols = vec![range];
        if version >= 8 {
            req.reason = Some(sb("rejoin"));
        }
        req
    }

    #[test]
    fn join_group_request_at_lowest_middle_highest() {
        for version in [0, 5, 9] {
            let wire = sent(&join_request(version), version);
            let req = join_group_request(&wire, version);
            assert_eq!(req.group_id, "g");
            assert_eq!(req.session_timeout_ms, 10_000);
            // v0 has no rebalance timeout; Kafka uses the session timeout.
            let rebalance = if version == 0 { 10_000 } else { 60_000 };
            assert_eq!(req.rebalance_timeout_ms, rebalance, "v{version}");
            assert_eq!(req.member_id, "m-1");
            assert_eq!(req.group_instance_id.is_some(), version >= 5);
            assert_eq!(req.protocol_type, "consumer");
            assert_eq!(req.protocols.len(), 1);
            assert_eq!(req.protocols[0].name, "range");
            assert_eq!(req.protocols[0].metadata, Bytes::from_static(b"sub"));
            assert_eq!(req.reason.as_deref(), (version >= 8).then_some("rejoin"));
        }
    }

    fn leader_response() -> g::JoinGroupResponse {
        g::JoinGroupResponse {
            error: None,
            generation_id: 3,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            leader: "m-1".into(),
            skip_assignment: false,
            member_id: "m-1".into(),
            members: vec![
                g::JoinGroupMember {
                    member_id: "m-1".into(),
                    group_instance_id: Some("i-1".into()),
                    metadata: Bytes::from_static(b"a"),
                },
                g::JoinGroupMember {
                    member_id: "m-2".into(),
                    group_instance_id: None,
                    metadata: Bytes::from_static(b"b"),
                },
            ],
        }
    }

    #[test]
    fn join_group_response_at_every_version_keeps_what_the_version_has() {
        for version in 0..=9 {
            let wire = assert_roundtrip(&join_group_response(leader_response(), version), version);
            assert_eq!(wire.generation_id, 3);
            assert_eq!(wire.leader.as_str(), "m-1");
            assert_eq!(wire.protocol_name.as_deref(), Some("range"));
            assert_eq!(
                wire.protocol_type.as_deref(),
                (version >= 7).then_some("consumer")
            );
            assert_eq!(wire.members.len(), 2);
            assert_eq!(
                wire.members[0].group_instance_id.as_deref(),
                (version >= 5).then_some("i-1")
            );
            assert_eq!(wire.members[1].metadata, Bytes::from_static(b"b"));
        }
    }

    #[test]
    fn member_id_required_returns_the_new_member_id() {
        let resp = g::JoinGroupResponse {
            error: Some(ResponseError::MemberIdRequired),
            generation_id: -1,
            member_id: "consumer-1-abc".into(),
            ..Default::default()
        };
        for version in [4, 6, 9] {
            let wire = assert_roundtrip(&join_group_response(resp.clone(), version), version);
            assert_eq!(wire.error_code, ResponseError::MemberIdRequired.code());
            assert_eq!(wire.member_id.as_str(), "consumer-1-abc");
            assert_eq!(wire.generation_id, -1);
            // Unknown protocol: empty before v7, null from v7.
            let expected = if version >= 7 { None } else { Some("") };
            assert_eq!(wire.protocol_name.as_deref(), expected, "v{version}");
        }
    }

    #[test]
    fn skip_assignment_only_reaches_v9() {
        let resp = g::JoinGroupResponse {
            skip_assignment: true,
            ..leader_response()
        };
        assert!(assert_roundtrip(&join_group_response(resp.clone(), 9), 9).skip_assignment);
        let v8 = assert_roundtrip(&join_group_response(resp, 8), 8);
        assert!(!v8.skip_assignment);
    }

    #[test]
    fn sync_group_request_versions_and_missing_protocol() {
        for version in [0, 3, 5] {
            let mut wire = SyncGroupRequest::default();
            wire.group_id = GroupId(sb("g"));
            wire.generation_id = 4;
            wire.member_id = sb("m-1");
            if version >= 3 {
                wire.group_instance_id = Some(sb("i-1"));
            }
            if version >= 5 {
                wire.protocol_type = Some(sb("consumer"));
                wire.protocol_name = Some(sb("range"));
            }
            let mut a = SyncGroupRequestAssignment::default();
            a.member_id = sb("m-1");
            a.assignment = Bytes::from_static(b"p0");
            wire.assignments = vec![a];
            let wire = sent(&wire, version);
            let req = sync_group_request(&wire, version).expect("valid");
            assert_eq!(req.group_id, "g");
            assert_eq!(req.generation_id, 4);
            assert_eq!(req.member_id, "m-1");
            assert_eq!(req.group_instance_id.is_some(), version >= 3);
            assert_eq!(
                req.protocol_name.as_deref(),
                (version >= 5).then_some("range")
            );
            assert_eq!(req.assignments[0].assignment, Bytes::from_static(b"p0"));

            if version >= 5 {
                let mut missing = wire.clone();
                missing.protocol_name = None;
                assert_eq!(
                    sync_group_request(&missing, version),
                    Err(ResponseError::InconsistentGroupProtocol)
                );
            }
        }
    }

    #[test]
    fn sync_group_response_at_lowest_middle_highest() {
        let resp = g::SyncGroupResponse {
            error: None,
            protocol_type: Some("consumer".into()),
            protocol_name: Some("range".into()),
            assignment: Bytes::from_static(b"p0"),
        };
        for version in [0, 3, 5] {
            let wire = assert_roundtrip(&sync_group_response(resp.clone(), version), version);
            assert_eq!(wire.assignment, Bytes::from_static(b"p0"));
            assert_eq!(
                wire.protocol_name.as_deref(),
                (version >= 5).then_some("range")
            );
        }
        let error = sync_error(ResponseError::RebalanceInProgress);
        let wire = assert_roundtrip(&sync_group_response(error, 5), 5);
        assert_eq!(wire.error_code, ResponseError::RebalanceInProgress.code());
        assert!(wire.assignment.is_empty());
    }

    #[test]
    fn heartbeat_at_lowest_middle_highest() {
        for version in [0, 3, 4] {
            let mut wire = HeartbeatRequest::default();
            wire.group_id = GroupId(sb("g"));
            wire.generation_id = 7;
            wire.member_id = sb("m-1");
            if version >= 3 {
                wire.group_instance_id = Some(sb("i-1"));
            }
            let req = heartbeat_request(&sent(&wire, version), version);
            assert_eq!((req.group_id.as_str(), req.generation_id), ("g", 7));
            assert_eq!(req.member_id, "m-1");
            assert_eq!(req.group_instance_id.is_some(), version >= 3);

            let resp = g::HeartbeatResponse {
                error: Some(ResponseError::RebalanceInProgress),
            };
            let wire = assert_roundtrip(&heartbeat_response(resp, version), version);
            assert_eq!(wire.error_code, ResponseError::RebalanceInProgress.code());
        }
    }

    #[test]
    fn legacy_leave_group_is_a_batch_of_one_with_one_error() {
        for version in [0, 1, 2] {
            let mut wire = LeaveGroupRequest::default();
            wire.group_id = GroupId(sb("g"));
            wire.member_id = sb("m-1");
            let req = leave_group_request(&sent(&wire, version), version);
            assert_eq!(req.group_id, "g");
            assert_eq!(
                req.members,
                vec![g::MemberIdentity {
                    member_id: "m-1".into(),
                    group_instance_id: None,
                    reason: None,
                }]
            );

            // The member's error becomes the response's only error code.
            let resp = g::LeaveGroupResponse {
                error: None,
                members: vec![g::LeaveMemberResponse {
                    member_id: "m-1".into(),
                    group_instance_id: None,
                    error: Some(ResponseError::UnknownMemberId),
                }],
            };
            let wire = assert_roundtrip(&leave_group_response(resp, version), version);
            assert_eq!(wire.error_code, ResponseError::UnknownMemberId.code());
            assert!(wire.members.is_empty());

            let ok = g::LeaveGroupResponse {
                error: None,
                members: vec![g::LeaveMemberResponse {
                    member_id: "m-1".into(),
                    ..Default::default()
                }],
            };
            assert_eq!(leave_group_response(ok, version).error_code, 0);
        }
    }

    #[test]
    fn batched_leave_group_keeps_both_levels() {
        for version in [3, 4, 5] {
            let mut wire = LeaveGroupRequest::default();
            wire.group_id = GroupId(sb("g"));
            let mut static_member = MemberIdentity::default();
            static_member.group_instance_id = Some(sb("i-1"));
            if version >= 5 {
                static_member.reason = Some(sb("admin removal"));
            }
            let mut dynamic = MemberIdentity::default();
            dynamic.member_id = sb("m-2");
            wire.members = vec![static_member, dynamic];
            let req = leave_group_request(&sent(&wire, version), version);
            assert_eq!(req.members.len(), 2);
            assert_eq!(req.members[0].member_id, "");
            assert_eq!(req.members[0].group_instance_id.as_deref(), Some("i-1"));
            assert_eq!(
                req.members[0].reason.as_deref(),
                (version >= 5).then_some("admin removal")
            );
            assert_eq!(req.members[1].member_id, "m-2");

            let resp = g::LeaveGroupResponse {
                error: None,
                members: vec![
                    g::LeaveMemberResponse {
                        member_id: "".into(),
                        group_instance_id: Some("i-1".into()),
                        error: None,
                    },
                    g::LeaveMemberResponse {
                        member_id: "m-2".into(),
                        group_instance_id: None,
                        error: Some(ResponseError::UnknownMemberId),
                    },
                ],
            };
            let wire = assert_roundtrip(&leave_group_response(resp, version), version);
            assert_eq!(wire.error_code, 0);
            assert_eq!(wire.members.len(), 2);
            assert_eq!(wire.members[0].group_instance_id.as_deref(), Some("i-1"));
            assert_eq!(
                wire.members[1].error_code,
                ResponseError::UnknownMemberId.code()
            );
        }
    }

    #[test]
    fn whole_request_leave_error_reaches_every_version() {
        for version in [0, 3, 5] {
            let resp = g::LeaveGroupResponse {
                error: Some(ResponseError::InvalidGroupId),
                members: Vec::new(),
            };
            let wire = assert_roundtrip(&leave_group_response(resp, version), version);
            assert_eq!(wire.error_code, ResponseError::InvalidGroupId.code());
        }
    }
}
