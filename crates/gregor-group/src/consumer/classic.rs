//! Members that speak the classic protocol (JoinGroup, SyncGroup, Heartbeat, LeaveGroup) inside
//! a consumer group, as during a rolling upgrade (KIP-848's online migration).
//!
//! Each JoinGroup is one reconciliation step through the same logic as a ConsumerGroupHeartbeat:
//! the member reports what it owns (a cooperative member's owned partitions; nothing for an
//! eager one, which gave everything up before joining), and gets the partitions it may hold now
//! with its member epoch as the generation. A member that must give partitions up first keeps
//! its epoch and gets only what it keeps; its heartbeats answer REBALANCE_IN_PROGRESS until it
//! rejoins without them. So a partition still moves only after its owner has revoked it, and a
//! classic member never runs an assignor: the JoinGroup names no leader.

use bytes::Bytes;
use gregor_assign::protocol::{self as wire, decode_subscription, encode_assignment};

use super::heartbeat::{
    heartbeat, remove_member, update_target, ConsumerGroupConfig, HeartbeatError, HeartbeatOutcome,
    HeartbeatRequest, TopicsView,
};
use super::model::{
    partitions, Assignment, ClassicMemberMetadata, ConsumerGroup, Departure, MemberState,
    JOIN_EPOCH, STATIC_LEAVE_EPOCH,
};
use crate::api::{
    JoinGroupRequest, JoinGroupResponse, JoinProtocol, LeaveGroupRequest, LeaveMemberResponse,
    RequestContext, ResponseError, SyncGroupRequest, SyncGroupResponse,
};

/// A successful classic JoinGroup: the response and the member's deadlines.
#[derive(Debug, Clone)]
pub struct ClassicJoin {
    pub response: JoinGroupResponse,
    pub outcome: HeartbeatOutcome,
}

/// JoinGroup of a classic member in consumer group `group`.
pub fn classic_join(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    topics: &dyn TopicsView,
    ctx: &RequestContext,
    req: &JoinGroupRequest,
    now_ms: i64,
    new_member_id: impl FnOnce() -> String,
) -> Result<ClassicJoin, ResponseError> {
    if req.protocol_type != wire::PROTOCOL_TYPE || req.protocols.is_empty() {
        return Err(ResponseError::InconsistentGroupProtocol);
    }
    let protocol = common_protocol(group, &req.member_id, &req.protocols)
        .ok_or(ResponseError::InconsistentGroupProtocol)?;
    let metadata = &req
        .protocols
        .iter()
        .find(|p| p.name == protocol)
        .expect("chosen from them");
    let (_, sub) = decode_subscription(&metadata.metadata)
        .map_err(|_| ResponseError::InconsistentGroupProtocol)?;
    let (member_id, member_epoch, owned) = joining_member(group, topics, req, &sub, new_member_id)?;
    let hb = HeartbeatRequest {
        version: 1,
        group_id: req.group_id.clone(),
        member_id: member_id.clone(),
        member_epoch,
        instance_id: req.group_instance_id.clone(),
        rack_id: sub.rack_id.clone().filter(|r| !r.is_empty()),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        subscribed_topic_names: Some(sub.topics.clone()),
        subscribed_topic_regex: None,
        server_assignor: None,
        owned: Some(owned),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
    };
    let mut outcome =
        heartbeat(group, cfg, topics, &hb, now_ms, String::new).map_err(to_classic)?;
    let mut member = group.members[&member_id].clone();
    member.classic = Some(ClassicMemberMetadata {
        session_timeout_ms: req.session_timeout_ms,
        supported_protocols: req
            .protocols
            .iter()
            .map(|p| (p.name.clone(), p.metadata.clone()))
            .collect(),
    });
    let generation_id = member.member_epoch;
    group.put_member(member);
    outcome.session_deadline_ms = Some(now_ms + i64::from(req.session_timeout_ms));
    let response = JoinGroupResponse {
        error: None,
        generation_id,
        protocol_type: Some(wire::PROTOCOL_TYPE.to_string()),
        protocol_name: Some(protocol),
        leader: String::new(),
        skip_assignment: false,
        member_id,
        members: Vec::new(),
    };
    Ok(ClassicJoin { response, outcome })
}

/// The joining member's id, the epoch its join is checked at and what it owns. A new member
/// owns nothing in the group's eyes; a static member restarting with a new id takes over its
/// old one's place.
fn joining_member(
    group: &mut ConsumerGroup,
    topics: &dyn TopicsView,
    req: &JoinGroupRequest,
    sub: &wire::Subscription,
    new_member_id: impl FnOnce() -> String,
) -> Result<(String, i32, Assignment), ResponseError> {
    if req.member_id.is_empty() {
        if let Some(old) = req
            .group_instance_id
            .as_deref()
            .and_then(|i| group.static_member(i))
        {
            let old = old.to_string();
            if group.members[&old].classic.is_none() {
                return Err(ResponseError::FencedInstanceId);
            }
            // Its previous process is gone: as if it had left for now (epoch -2).
            let mut m = group.members[&old].clone();
            m.member_epoch = STATIC_LEAVE_EPOCH;
            group.put_member(m);
        }
        return Ok((new_member_id(), JOIN_EPOCH, Assignment::new()));
    }
    let m = group
        .members
        .get(&req.member_id)
        .filter(|m| m.classic.is_some())
        .ok_or(ResponseError::UnknownMemberId)?;
    if m.instance_id != req.group_instance_id {
        return Err(ResponseError::FencedInstanceId);
    }
    let mut owned = Assignment::new();
    for (name, ps) in &sub.owned_partitions {
        if let Some(t) = topics.topic(name) {
            owned.entry(t.id).or_default().extend(ps);
        }
    }
    Ok((req.member_id.clone(), m.member_epoch, owned))
}

/// The first of `protocols` (the member's order of preference) that every other classic member
/// of the group supports too.
fn common_protocol(group: &ConsumerGroup, me: &str, protocols: &[JoinProtocol]) -> Option<String> {
    let others: Vec<&ClassicMemberMetadata> = group
        .members
        .values()
        .filter(|m| m.member_id != me)
        .filter_map(|m| m.classic.as_ref())
        .collect();
    protocols
        .iter()
        .find(|p| {
            others
                .iter()
                .all(|o| o.supported_protocols.iter().any(|(n, _)| *n == p.name))
        })
        .map(|p| p.name.clone())
}

fn to_classic(e: HeartbeatError) -> ResponseError {
    match e {
        HeartbeatError::UnknownMemberId(_) => ResponseError::UnknownMemberId,
        HeartbeatError::FencedMemberEpoch { .. } => ResponseError::IllegalGeneration,
        HeartbeatError::UnreleasedInstanceId(_) => ResponseError::FencedInstanceId,
        HeartbeatError::GroupMaxSizeReached(_) => ResponseError::GroupMaxSizeReached,
        HeartbeatError::InvalidRequest(_)
        | HeartbeatError::UnsupportedAssignor(_)
        | HeartbeatError::InvalidRegularExpression(_) => ResponseError::InvalidRequest,
    }
}

/// A classic member of `group`, checked as the classic protocol checks it.
fn classic_member<'a>(
    group: &'a ConsumerGroup,
    member_id: &str,
    instance_id: Option<&str>,
    generation_id: i32,
) -> Result<&'a super::model::ConsumerMember, ResponseError> {
    let m = group
        .members
        .get(member_id)
        .filter(|m| m.classic.is_some())
        .ok_or(ResponseError::UnknownMemberId)?;
    if instance_id.is_some() && m.instance_id.as_deref() != instance_id {
        return Err(ResponseError::FencedInstanceId);
    }
    if m.member_epoch != generation_id {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(m)
}

/// SyncGroup of a classic member: what it may hold now, in the consumer protocol's assignment
/// format (whatever a leader sent is ignored: the coordinator assigns).
pub fn classic_sync(
    group: &ConsumerGroup,
    req: &SyncGroupRequest,
) -> Result<SyncGroupResponse, ResponseError> {
    let m = classic_member(
        group,
        &req.member_id,
        req.group_instance_id.as_deref(),
        req.generation_id,
    )?;
    let classic = m.classic.as_ref().expect("a classic member");
    if req
        .protocol_type
        .as_deref()
        .is_some_and(|t| t != wire::PROTOCOL_TYPE)
    {
        return Err(ResponseError::InconsistentGroupProtocol);
    }
    let protocol = match &req.protocol_name {
        Some(name) => classic.supported_protocols.iter().find(|(n, _)| n == name),
        None => classic.supported_protocols.first(),
    }
    .ok_or(ResponseError::InconsistentGroupProtocol)?;
    // Answer in the version the member subscribed with, at most the newest we write.
    let version = decode_subscription(&protocol.1)
        .map(|(v, _)| v.clamp(0, wire::ASSIGNMENT_VERSION))
        .unwrap_or(0);
    let assignment = wire::Assignment {
        partitions: by_name(group, &m.assigned),
        user_data: None,
    };
    let bytes: Bytes =
        encode_assignment(&assignment, version).map_err(|_| ResponseError::UnknownServerError)?;
    Ok(SyncGroupResponse {
        error: None,
        protocol_type: Some(wire::PROTOCOL_TYPE.to_string()),
        protocol_name: Some(protocol.0.clone()),
        assignment: bytes,
    })
}

/// An assignment by topic name, as the classic protocol carries it.
fn by_name(group: &ConsumerGroup, a: &Assignment) -> wire::TopicPartitions {
    let mut out: wire::TopicPartitions = Vec::new();
    for (topic, ps) in a {
        let name = group.subscribed_topics.values().find(|t| t.id == *topic);
        if let Some(t) = name {
            out.push((t.name.clone(), ps.iter().copied().collect()));
        }
    }
    out
}

/// Heartbeat of a classic member: REBALANCE_IN_PROGRESS when it must rejoin, to give up what it
/// must revoke, to take partitions their owners have released, or to reach a newer target.
pub fn classic_heartbeat(
    group: &mut ConsumerGroup,
    cfg: &ConsumerGroupConfig,
    topics: &dyn TopicsView,
    req: &crate::api::HeartbeatRequest,
    now_ms: i64,
) -> Result<(), ResponseError> {
    classic_member(
        group,
        &req.member_id,
        req.group_instance_id.as_deref(),
        req.generation_id,
    )?;
    // The group's topics may have changed with nobody else heartbeating.
    update_target(group, cfg, topics, now_ms).map_err(to_classic)?;
    let m = &group.members[&req.member_id];
    let me = m.member_id.as_str();
    let released = || {
        let target = group.target.get(me).cloned().unwrap_or_default();
        let free = partitions(&target).any(|(t, p)| {
            !m.assigned.get(&t).is_some_and(|ps| ps.contains(&p))
                && group.held_by_other(me, t, p).is_none()
        });
        free
    };
    let rejoin = match m.state {
        MemberState::UnrevokedPartitions => true,
        MemberState::UnreleasedPartitions => released(),
        MemberState::Stable => m.member_epoch < group.target_epoch,
    };
    match rejoin {
        true => Err(ResponseError::RebalanceInProgress),
        false => Ok(()),
    }
}

/// LeaveGroup of classic members: each leaves for good (its partitions are free at once).
/// Returns each member's answer and whether anyone left.
pub fn classic_leave(
    group: &mut ConsumerGroup,
    req: &LeaveGroupRequest,
    now_ms: i64,
) -> (Vec<LeaveMemberResponse>, bool) {
    let mut left = false;
    let answers = req
        .members
        .iter()
        .map(|who| {
            let id = match &who.group_instance_id {
                Some(instance) => group.static_member(instance).map(str::to_string),
                None => Some(who.member_id.clone()),
            };
            let error =
                match id.filter(|id| group.members.get(id).is_some_and(|m| m.classic.is_some())) {
                    None => Some(ResponseError::UnknownMemberId),
                    Some(id) if !who.member_id.is_empty() && id != who.member_id => {
                        Some(ResponseError::FencedInstanceId)
                    }
                    Some(id) => {
                        left |= remove_member(group, &id, Departure::Left, now_ms).is_some();
                        None
                    }
                };
            LeaveMemberResponse {
                member_id: who.member_id.clone(),
                group_instance_id: who.group_instance_id.clone(),
                error,
            }
        })
        .collect();
    (answers, left)
}

/// Whether every member of the group speaks the classic protocol (a downgrade may follow).
pub fn only_classic_members(group: &ConsumerGroup) -> bool {
    !group.members.is_empty() && group.members.values().all(|m| m.classic.is_some())
}

#[cfg(test)]
#[path = "classic_tests.rs"]
mod tests;
