//! Group membership requests as a member sends them (JoinGroup, SyncGroup, Heartbeat,
//! LeaveGroup, OffsetCommit with a generation), each in the layout of the negotiated version,
//! and their answers reduced to what the membership core needs.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::{
    GroupId, HeartbeatRequest, JoinGroupRequest, JoinGroupResponse, LeaveGroupRequest,
    LeaveGroupResponse, OffsetCommitRequest, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::membership::JoinAnswer;
use crate::error::{KafkaCode, KafkaError};
use crate::types::TopicPartition;

pub const PROTOCOL_TYPE: &str = gregor_assign::protocol::PROTOCOL_TYPE;

/// Who is asking: the member's identity in the group.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberIdentityRef<'a> {
    pub group_id: &'a str,
    pub member_id: &'a str,
    pub group_instance_id: Option<&'a str>,
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// JoinGroup with one protocol per strategy (name, subscription bytes), preferred first.
pub fn join_group_request(
    who: &MemberIdentityRef<'_>,
    session_timeout_ms: i32,
    rebalance_timeout_ms: i32,
    protocols: &[(String, Bytes)],
    reason: Option<&str>,
    version: i16,
) -> JoinGroupRequest {
    let mut req = JoinGroupRequest::default()
        .with_group_id(GroupId(s(who.group_id)))
        .with_session_timeout_ms(session_timeout_ms)
        .with_member_id(s(who.member_id))
        .with_protocol_type(s(PROTOCOL_TYPE))
        .with_protocols(
            protocols
                .iter()
                .map(|(name, meta)| {
                    JoinGroupRequestProtocol::default()
                        .with_name(s(name))
                        .with_metadata(meta.clone())
                })
                .collect(),
        );
    if version >= 1 {
        req.rebalance_timeout_ms = rebalance_timeout_ms;
    }
    if version >= 5 {
        req.group_instance_id = who.group_instance_id.map(s);
    }
    if version >= 8 {
        req.reason = reason.map(s);
    }
    req
}

/// A member as the leader's JoinGroup answer lists it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JoinedMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub metadata: Bytes,
}

pub fn parse_join_group(resp: JoinGroupResponse) -> (JoinAnswer, Vec<JoinedMember>) {
    let members = resp
        .members
        .into_iter()
        .map(|m| JoinedMember {
            member_id: m.member_id.to_string(),
            group_instance_id: m.group_instance_id.map(|i| i.to_string()),
            metadata: m.metadata,
        })
        .collect();
    (
        JoinAnswer {
            error: KafkaCode::from_code(resp.error_code),
            member_id: resp.member_id.to_string(),
            generation: resp.generation_id,
            protocol_name: resp.protocol_name.map(|p| p.to_string()),
            leader: resp.leader.to_string(),
        },
        members,
    )
}

/// SyncGroup: the leader sends every member's assignment, the others none.
pub fn sync_group_request(
    who: &MemberIdentityRef<'_>,
    generation: i32,
    protocol_name: Option<&str>,
    assignments: &[(String, Bytes)],
    version: i16,
) -> SyncGroupRequest {
    let mut req = SyncGroupRequest::default()
        .with_group_id(GroupId(s(who.group_id)))
        .with_generation_id(generation)
        .with_member_id(s(who.member_id))
        .with_assignments(
            assignments
                .iter()
                .map(|(m, a)| {
                    SyncGroupRequestAssignment::default()
                        .with_member_id(s(m))
                        .with_assignment(a.clone())
                })
                .collect(),
        );
    if version >= 3 {
        req.group_instance_id = who.group_instance_id.map(s);
    }
    if version >= 5 {
        req.protocol_type = Some(s(PROTOCOL_TYPE));
        req.protocol_name = protocol_name.map(s);
    }
    req
}

pub fn parse_sync_group(resp: SyncGroupResponse) -> (Option<KafkaCode>, Bytes) {
    (KafkaCode::from_code(resp.error_code), resp.assignment)
}

pub fn heartbeat_request(
    who: &MemberIdentityRef<'_>,
    generation: i32,
    version: i16,
) -> HeartbeatRequest {
    let mut req = HeartbeatRequest::default()
        .with_group_id(GroupId(s(who.group_id)))
        .with_generation_id(generation)
        .with_member_id(s(who.member_id));
    if version >= 3 {
        req.group_instance_id = who.group_instance_id.map(s);
    }
    req
}

/// LeaveGroup for this member (a single member id before v3, a member list from v3).
pub fn leave_group_request(
    who: &MemberIdentityRef<'_>,
    reason: &str,
    version: i16,
) -> LeaveGroupRequest {
    let mut req = LeaveGroupRequest::default().with_group_id(GroupId(s(who.group_id)));
    if version >= 3 {
        let mut m = MemberIdentity::default()
            .with_member_id(s(who.member_id))
            .with_group_instance_id(who.group_instance_id.map(s));
        if version >= 5 {
            m.reason = Some(s(reason));
        }
        req.members = vec![m];
    } else {
        req.member_id = s(who.member_id);
    }
    req
}

pub fn parse_leave_group(resp: LeaveGroupResponse) -> Result<(), KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    for m in resp.members {
        KafkaError::check(m.error_code, None)?;
    }
    Ok(())
}

/// OffsetCommit from a member of the current generation.
pub fn member_offset_commit_request(
    who: &MemberIdentityRef<'_>,
    generation: i32,
    offsets: &BTreeMap<TopicPartition, i64>,
    version: i16,
) -> OffsetCommitRequest {
    let mut req = crate::admin::groups::offset_commit_request(who.group_id, offsets, version);
    if version >= 1 {
        req.generation_id_or_member_epoch = generation;
        req.member_id = s(who.member_id);
    }
    if version >= 7 {
        req.group_instance_id = who.group_instance_id.map(s);
    }
    req
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
    use kafka_protocol::protocol::Message;

    const WHO: MemberIdentityRef<'static> = MemberIdentityRef {
        group_id: "g",
        member_id: "m-1",
        group_instance_id: Some("i-1"),
    };

    #[test]
    fn every_request_encodes_in_every_version() {
        let protocols = vec![("range".to_string(), Bytes::from_static(b"\0\0"))];
        for v in JoinGroupRequest::VERSIONS.min..=JoinGroupRequest::VERSIONS.max {
            let req = join_group_request(&WHO, 10_000, 30_000, &protocols, Some("r"), v);
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("join v{v}: {e}"));
        }
        let assignments = vec![("m-1".to_string(), Bytes::from_static(b"\0\0"))];
        for v in SyncGroupRequest::VERSIONS.min..=SyncGroupRequest::VERSIONS.max {
            let req = sync_group_request(&WHO, 3, Some("range"), &assignments, v);
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("sync v{v}: {e}"));
        }
        for v in HeartbeatRequest::VERSIONS.min..=HeartbeatRequest::VERSIONS.max {
            encode_request(&heartbeat_request(&WHO, 3, v), v, 1, "c")
                .unwrap_or_else(|e| panic!("heartbeat v{v}: {e}"));
        }
        for v in LeaveGroupRequest::VERSIONS.min..=LeaveGroupRequest::VERSIONS.max {
            encode_request(&leave_group_request(&WHO, "closing", v), v, 1, "c")
                .unwrap_or_else(|e| panic!("leave v{v}: {e}"));
        }
        let offsets: BTreeMap<TopicPartition, i64> = [(TopicPartition::new("t", 0), 5)].into();
        for v in 2..=OffsetCommitRequest::VERSIONS.max {
            let req = member_offset_commit_request(&WHO, 3, &offsets, v);
            assert_eq!(req.generation_id_or_member_epoch, 3);
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("commit v{v}: {e}"));
        }
    }

    #[test]
    fn join_answer_keeps_members_and_errors() {
        let resp = JoinGroupResponse::default()
            .with_generation_id(4)
            .with_protocol_name(Some(s("range")))
            .with_leader(s("m-1"))
            .with_member_id(s("m-1"))
            .with_members(vec![JoinGroupResponseMember::default()
                .with_member_id(s("m-1"))
                .with_group_instance_id(Some(s("i-1")))
                .with_metadata(Bytes::from_static(b"xy"))]);
        let frame = encode_response_frame::<JoinGroupRequest>(&resp, 7, 1);
        let (a, members) = parse_join_group(decode_response::<JoinGroupRequest>(frame, 7).unwrap());
        assert_eq!(a.error, None);
        assert_eq!(a.generation, 4);
        assert_eq!(a.leader, "m-1");
        assert_eq!(members[0].group_instance_id.as_deref(), Some("i-1"));
        let err = JoinGroupResponse::default()
            .with_error_code(79)
            .with_member_id(s("new"));
        let (a, _) = parse_join_group(err);
        assert_eq!(a.error, Some(KafkaCode(79)));
        assert_eq!(a.member_id, "new");
    }

    #[test]
    fn leave_answer_checks_each_member() {
        use kafka_protocol::messages::leave_group_response::MemberResponse;
        let resp = LeaveGroupResponse::default()
            .with_members(vec![MemberResponse::default().with_error_code(25)]);
        assert_eq!(parse_leave_group(resp).unwrap_err().code, KafkaCode(25));
        assert!(parse_leave_group(LeaveGroupResponse::default()).is_ok());
    }
}
