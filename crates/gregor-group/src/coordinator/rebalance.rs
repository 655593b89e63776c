//! The rebalance protocol on one group: join barrier, generations, leader, initial delay, sync
//! barrier, session expiry. Mirrors Kafka's classic `GroupMetadataManager` flows.

use std::collections::HashMap;

use bytes::Bytes;

use super::state::{Cx, PendingAppend};
use crate::api::*;
use crate::effect::Record;
use crate::group::{Group, GroupState, Member};
use crate::history::DepartureCause;
use crate::records::{self, GroupMetadataValue, MemberMetadata, RecordKey};
use crate::timer::{TimerAction, TimerKey};

fn join_key(g: &Group) -> TimerKey {
    TimerKey::Join {
        group: g.group_id.clone(),
    }
}

fn sync_key(g: &Group) -> TimerKey {
    TimerKey::Sync {
        group: g.group_id.clone(),
    }
}

/// A JoinGroup error response.
pub(crate) fn join_error(member_id: &str, error: ResponseError) -> Response {
    Response::JoinGroup(JoinGroupResponse {
        error: Some(error),
        generation_id: -1,
        member_id: member_id.to_string(),
        ..Default::default()
    })
}

pub(crate) fn sync_error(error: ResponseError) -> Response {
    Response::SyncGroup(SyncGroupResponse {
        error: Some(error),
        ..Default::default()
    })
}

/// The current generation as a JoinGroup response for `member_id`.
pub(crate) fn current_generation_response(
    g: &Group,
    member_id: &str,
    with_members: bool,
    leader: String,
    skip_assignment: bool,
) -> Response {
    Response::JoinGroup(JoinGroupResponse {
        error: None,
        generation_id: g.generation_id,
        protocol_type: g.protocol_type.clone(),
        protocol_name: g.protocol_name.clone(),
        leader,
        skip_assignment,
        member_id: member_id.to_string(),
        members: if with_members {
            g.join_response_members()
        } else {
            Vec::new()
        },
    })
}

/// The group's metadata record with these assignments (the members' current ones when `None`).
pub(crate) fn group_metadata_record(
    g: &Group,
    assignment: Option<&HashMap<String, Bytes>>,
) -> Record {
    Record {
        transactional: None,
        key: records::encode_key(&RecordKey::GroupMetadata {
            group: g.group_id.clone(),
        }),
        value: Some(records::encode_group_metadata_value(&group_metadata_value(
            g, assignment,
        ))),
    }
}

fn group_metadata_value(
    g: &Group,
    assignment: Option<&HashMap<String, Bytes>>,
) -> GroupMetadataValue {
    let protocol = g.protocol_name.clone();
    let members = g
        .members
        .values()
        .map(|m| MemberMetadata {
            member_id: m.member_id.clone(),
            group_instance_id: m.group_instance_id.clone(),
            client_id: m.client_id.clone(),
            client_host: m.client_host.clone(),
            rebalance_timeout: m.rebalance_timeout_ms,
            session_timeout: m.session_timeout_ms,
            subscription: m.metadata(protocol.as_deref().unwrap_or_default()),
            assignment: match assignment {
                Some(a) => a.get(&m.member_id).cloned().unwrap_or_default(),
                None => m.assignment.clone(),
            },
        })
        .collect();
    GroupMetadataValue {
        protocol_type: g.protocol_type.clone().unwrap_or_default(),
        generation: g.generation_id,
        protocol,
        leader: g.leader_id.clone(),
        current_state_timestamp: g.state_timestamp.unwrap_or(-1),
        members,
    }
}

/// Removes a member, cancelling its session and answering its parked requests with
/// UNKNOWN_MEMBER_ID so that a still-running client rejoins.
pub(crate) fn remove_member(
    g: &mut Group,
    cx: &mut Cx,
    member_id: &str,
    cause: DepartureCause,
) -> Option<Member> {
    cx.cancel_heartbeat(&g.group_id, member_id);
    let removed = g.remove(member_id)?;
    g.history.departed(removed.to_ref(), cause, cx.now);
    if let Some(id) = removed.awaiting_join {
        cx.respond(id, join_error("", ResponseError::UnknownMemberId));
    }
    if let Some(id) = removed.awaiting_sync {
        cx.respond(id, sync_error(ResponseError::UnknownMemberId));
    }
    Some(removed)
}

/// Parks a member's JoinGroup. A request it supersedes (a client retrying after a timeout) is
/// answered with REBALANCE_IN_PROGRESS so that no request is left without an answer.
pub(crate) fn park_join(g: &mut Group, cx: &mut Cx, member_id: &str, request_id: RequestId) {
    if let Some(previous) = g.set_awaiting_join(member_id, Some(request_id)) {
        if previous != request_id {
            cx.respond(
                previous,
                join_error(member_id, ResponseError::RebalanceInProgress),
            );
        }
    }
}

/// Parks a member's SyncGroup, answering a superseded one like [`park_join`] does.
pub(crate) fn park_sync(g: &mut Group, cx: &mut Cx, member_id: &str, request_id: RequestId) {
    if let Some(m) = g.member_mut(member_id) {
        if let Some(previous) = m.awaiting_sync.replace(request_id) {
            if previous != request_id {
                cx.respond(previous, sync_error(ResponseError::RebalanceInProgress));
            }
        }
    }
}

/// Kafka's `updateMember` + `maybePrepareRebalanceOrCompleteJoin` for an existing member.
pub(crate) fn update_member_then_rebalance_or_complete_join(
    g: &mut Group,
    cx: &mut Cx,
    req: &JoinGroupRequest,
    member_id: &str,
    request_id: RequestId,
    reason: &str,
) {
    if let Some(m) = g.member_mut(member_id) {
        m.protocols = req.protocols.clone();
        m.rebalance_timeout_ms = req.rebalance_timeout_ms;
        m.session_timeout_ms = req.session_timeout_ms;
    }
    park_join(g, cx, member_id, request_id);
    maybe_prepare_rebalance_or_complete_join(g, cx, reason);
}

/// Adds a new member (parked in its JoinGroup) and rebalances or completes the join phase.
pub(crate) fn add_member_then_rebalance_or_complete_join(
    g: &mut Group,
    cx: &mut Cx,
    ctx: &RequestContext,
    req: &JoinGroupRequest,
    member_id: &str,
    request_id: RequestId,
) {
    let member = Member {
        member_id: member_id.to_string(),
        group_instance_id: req.group_instance_id.clone(),
        client_id: ctx.client_id.clone(),
        client_host: ctx.client_host.clone(),
        rebalance_timeout_ms: req.rebalance_timeout_ms,
        session_timeout_ms: req.session_timeout_ms,
        protocol_type: req.protocol_type.clone(),
        protocols: req.protocols.clone(),
        assignment: Bytes::new(),
        awaiting_join: Some(request_id),
        awaiting_sync: None,
        is_new: true,
    };
    // A member joining during the initial delay extends it.
    if g.is(GroupState::PreparingRebalance) && g.previous_state == GroupState::Empty {
        g.new_member_added = true;
    }
    g.add(member);
    // A new member cannot heartbeat until its JoinGroup returns, so its session is the (long)
    // new-member join timeout; a client that gave up and retried leaves a defunct member that
    // this removes.
    cx.schedule_heartbeat(&g.group_id, member_id, cx.config.new_member_join_timeout_ms);
    tracing::info!(group = %g.group_id, member = %member_id, group_instance_id = ?req.group_instance_id, state = %g.state, "member added");
    maybe_prepare_rebalance_or_complete_join(g, cx, "new member joined");
}

pub(crate) fn maybe_prepare_rebalance_or_complete_join(g: &mut Group, cx: &mut Cx, reason: &str) {
    if g.can_rebalance() {
        prepare_rebalance(g, cx, reason);
    } else {
        maybe_complete_join_phase(g, cx);
    }
}

/// Starts a rebalance: parked syncs are told to rejoin, the join barrier is armed.
pub(crate) fn prepare_rebalance(g: &mut Group, cx: &mut Cx, reason: &str) {
    if g.is(GroupState::CompletingRebalance) {
        reset_and_propagate_assignment_with_error(g, cx, ResponseError::RebalanceInProgress);
    }
    g.pending_sync_members.clear();
    cx.timers.cancel(&sync_key(g));

    let initial = g.is(GroupState::Empty);
    if initial {
        // A new group waits for more members before its first generation.
        let delay = i64::from(cx.config.initial_rebalance_delay_ms);
        let remaining = (i64::from(g.rebalance_timeout_ms()) - delay).max(0);
        cx.timers.schedule(
            join_key(g),
            cx.now.saturating_add(delay),
            TimerAction::InitialJoin {
                delay_ms: delay,
                remaining_ms: remaining,
            },
        );
    }
    g.transition_to(GroupState::PreparingRebalance, cx.now);
    g.history.set_reason(reason);
    tracing::info!(group = %g.group_id, generation = g.generation_id, reason, "preparing to rebalance");
    if !initial {
        maybe_complete_join_else_schedule(g, cx);
    }
}

fn maybe_complete_join_else_schedule(g: &mut Group, cx: &mut Cx) {
    if g.has_all_members_joined() {
        complete_join(g, cx);
    } else {
        let at = cx.now.saturating_add(i64::from(g.rebalance_timeout_ms()));
        cx.timers.schedule(join_key(g), at, TimerAction::Join);
    }
}

/// Completes the join phase if every member has rejoined, except during the initial delay,
/// which only its own deadline ends.
pub(crate) fn maybe_complete_join_phase(g: &mut Group, cx: &mut Cx) {
    if !g.is(GroupState::PreparingRebalance) || g.previous_state == GroupState::Empty {
        return;
    }
    if g.has_all_members_joined() {
        complete_join(g, cx);
    }
}

/// The initial delay's deadline: extend it if a member joined meanwhile and time remains,
/// otherwise complete the join phase.
pub(crate) fn try_complete_initial_rebalance(
    g: &mut Group,
    cx: &mut Cx,
    delay_ms: i64,
    remaining_ms: i64,
) {
    if g.new_member_added && remaining_ms != 0 {
        g.new_member_added = false;
        let new_delay = cx.config.initial_rebalance_delay_ms.into();
        let new_delay = remaining_ms.min(new_delay);
        let new_remaining = (remaining_ms - delay_ms).max(0);
        cx.timers.schedule(
            join_key(g),
            cx.now.saturating_add(new_delay),
            TimerAction::InitialJoin {
                delay_ms: new_delay,
                remaining_ms: new_remaining,
            },
        );
    } else {
        complete_join(g, cx);
    }
}

/// Ends the join phase: dynamic members that did not rejoin are removed, the generation advances
/// and every parked JoinGroup is answered (the leader's with the member list).
pub(crate) fn complete_join(g: &mut Group, cx: &mut Cx) {
    cx.timers.cancel(&join_key(g));
    let not_rejoined: Vec<String> = g
        .not_yet_rejoined()
        .into_iter()
        .filter(|id| g.member(id).is_some_and(|m| m.group_instance_id.is_none()))
        .collect();
    for id in &not_rejoined {
        remove_member(g, cx, id, DepartureCause::RebalanceTimeout);
    }
    if !not_rejoined.is_empty() {
        tracing::info!(group = %g.group_id, members = ?not_rejoined, "removed dynamic members that did not rejoin");
    }

    if g.is(GroupState::Dead) {
        return;
    }
    if !g.maybe_elect_new_joined_leader() && !g.members.is_empty() {
        // Only static members that have not rejoined remain: wait another rebalance timeout for
        // them to rejoin or for their sessions to expire.
        tracing::warn!(group = %g.group_id, "no member rejoined; postponing the end of the join phase");
        let at = cx.now.saturating_add(i64::from(g.rebalance_timeout_ms()));
        cx.timers.schedule(join_key(g), at, TimerAction::Join);
        return;
    }

    g.generation_id += 1;
    if g.members.is_empty() {
        g.protocol_name = None;
        g.transition_to(GroupState::Empty, cx.now);
        g.pending_sync_members.clear();
        tracing::info!(group = %g.group_id, generation = g.generation_id, "group is now empty");
        let record = group_metadata_record(g, None);
        cx.append(
            vec![record],
            PendingAppend::GroupMetadata {
                group_id: g.group_id.clone(),
            },
        );
        return;
    }

    g.protocol_name = g.select_protocol();
    g.transition_to(GroupState::CompletingRebalance, cx.now);
    g.pending_sync_members.clear();
    tracing::info!(group = %g.group_id, generation = g.generation_id, members = g.members.len(), protocol = ?g.protocol_name, leader = ?g.leader_id, "join phase complete; storing the generation");
    // Every member took part in a generation now: none is new any more, and the parked
    // JoinGroups keep them alive until they are answered.
    for m in g.members.values_mut() {
        m.is_new = false;
    }
    // The generation is stored before anyone learns it. Kafka's classic coordinator stores a
    // generation only with its assignment, so after a failover between the join and the sync
    // phase it hands the same generation number out a second time, to a different set of owners.
    g.storing_generation = Some(g.generation_id);
    cx.append(
        vec![generation_record(g)],
        PendingAppend::Generation {
            group_id: g.group_id.clone(),
            generation: g.generation_id,
        },
    );
}

/// The record of a generation whose join phase just ended: its members and their subscriptions,
/// no assignments, and no leader. No other record has members without a leader, which is how a
/// coordinator loading it knows that the generation never got its assignment.
fn generation_record(g: &Group) -> Record {
    let value = GroupMetadataValue {
        leader: None,
        ..group_metadata_value(g, Some(&HashMap::new()))
    };
    Record {
        transactional: None,
        key: records::encode_key(&RecordKey::GroupMetadata {
            group: g.group_id.clone(),
        }),
        value: Some(records::encode_group_metadata_value(&value)),
    }
}

/// The generation's record is durable (or failed to be written).
pub(crate) fn generation_stored(
    g: &mut Group,
    cx: &mut Cx,
    generation: i32,
    result: Result<(), ResponseError>,
) {
    if g.storing_generation != Some(generation) || !g.is(GroupState::CompletingRebalance) {
        // The group moved on (a member joined, left or expired): the JoinGroups stay parked for
        // the next join phase, or were answered when their members were removed.
        return;
    }
    g.storing_generation = None;
    if let Err(error) = result {
        // Nobody has learnt this generation. The members retry their JoinGroups (the error
        // makes them look for the coordinator again) and the next join phase skips a number.
        tracing::warn!(group = %g.group_id, generation, %error, "failed to store the generation; rebalancing");
        let ids: Vec<String> = g.members.keys().cloned().collect();
        for id in ids {
            if let Some(request_id) = g.set_awaiting_join(&id, None) {
                cx.respond(request_id, join_error(&id, error));
            }
            let session = g.member(&id).map_or(0, |m| m.session_timeout_ms);
            cx.schedule_heartbeat(&g.group_id, &id, session);
        }
        prepare_rebalance(g, cx, "the generation could not be stored");
        return;
    }
    answer_joins(g, cx);
}

/// Answers every parked JoinGroup with the current generation (the leader's with the member
/// list) and arms the sync barrier.
fn answer_joins(g: &mut Group, cx: &mut Cx) {
    let leader = g.leader_id.clone().unwrap_or_default();
    let ids: Vec<String> = g.members.keys().cloned().collect();
    for id in ids {
        let response = current_generation_response(g, &id, g.is_leader(&id), leader.clone(), false);
        if let Some(request_id) = g.set_awaiting_join(&id, None) {
            cx.respond(request_id, response);
        }
        let session = g.member(&id).map_or(0, |m| m.session_timeout_ms);
        cx.schedule_heartbeat(&g.group_id, &id, session);
        g.pending_sync_members.insert(id);
    }
    let at = cx.now.saturating_add(i64::from(g.rebalance_timeout_ms()));
    cx.timers.schedule(
        sync_key(g),
        at,
        TimerAction::Sync {
            generation: g.generation_id,
        },
    );
}

/// Clears assignments and answers every parked SyncGroup with `error`.
pub(crate) fn reset_and_propagate_assignment_with_error(
    g: &mut Group,
    cx: &mut Cx,
    error: ResponseError,
) {
    for m in g.members.values_mut() {
        m.assignment = Bytes::new();
    }
    propagate_assignment(g, cx, Some(error));
}

/// Installs the leader's assignment and answers every parked SyncGroup.
pub(crate) fn set_and_propagate_assignment(
    g: &mut Group,
    cx: &mut Cx,
    assignment: &HashMap<String, Bytes>,
) {
    for m in g.members.values_mut() {
        m.assignment = assignment.get(&m.member_id).cloned().unwrap_or_default();
    }
    propagate_assignment(g, cx, None);
}

fn propagate_assignment(g: &mut Group, cx: &mut Cx, error: Option<ResponseError>) {
    let (protocol_type, protocol_name) = if error.is_none() {
        (g.protocol_type.clone(), g.protocol_name.clone())
    } else {
        (None, None)
    };
    let group_id = g.group_id.clone();
    for m in g.members.values_mut() {
        if let Some(request_id) = m.awaiting_sync.take() {
            if error.is_none() && m.assignment.is_empty() {
                tracing::debug!(group = %group_id, member = %m.member_id, "sending an empty assignment");
            }
            cx.respond(
                request_id,
                Response::SyncGroup(SyncGroupResponse {
                    error,
                    protocol_type: protocol_type.clone(),
                    protocol_name: protocol_name.clone(),
                    assignment: m.assignment.clone(),
                }),
            );
            // The session restarts once the member has its answer: while parked it could not
            // be expected to heartbeat.
            cx.schedule_heartbeat(&group_id, &m.member_id, m.session_timeout_ms);
        }
    }
}

/// A member's or pending member's session deadline passed.
pub(crate) fn expire_heartbeat(g: &mut Group, cx: &mut Cx, member_id: &str) {
    if g.is(GroupState::Dead) {
        return;
    }
    if g.is_pending_member(member_id) {
        tracing::info!(group = %g.group_id, member = %member_id, "pending member expired without joining");
        g.remove(member_id);
        if g.is(GroupState::PreparingRebalance) && g.has_all_members_joined() {
            complete_join(g, cx);
        }
        return;
    }
    let Some(member) = g.member(member_id) else {
        return;
    };
    if member.has_satisfied_heartbeat() {
        // Parked in a join or sync: alive by definition; the session restarts when answered.
        return;
    }
    tracing::info!(group = %g.group_id, member = %member_id, generation = g.generation_id, "session expired; removing member");
    remove_member_and_update_group(
        g,
        cx,
        member_id,
        DepartureCause::SessionTimeout,
        "member session expired",
    );
}

/// Removes a member after a failure and rebalances or completes the join phase.
pub(crate) fn remove_member_and_update_group(
    g: &mut Group,
    cx: &mut Cx,
    member_id: &str,
    cause: DepartureCause,
    reason: &str,
) {
    remove_member(g, cx, member_id, cause);
    match g.state {
        GroupState::Stable | GroupState::CompletingRebalance => {
            maybe_prepare_rebalance_or_complete_join(g, cx, reason)
        }
        GroupState::PreparingRebalance if g.has_all_members_joined() => complete_join(g, cx),
        _ => {}
    }
}

/// The sync deadline of `generation` passed: members that never sent SyncGroup are removed and
/// the group rebalances.
pub(crate) fn expire_pending_sync(g: &mut Group, cx: &mut Cx, generation: i32) {
    if generation != g.generation_id {
        return;
    }
    if !(g.is(GroupState::CompletingRebalance) || g.is(GroupState::Stable)) {
        return;
    }
    if g.pending_sync_members.is_empty() {
        return;
    }
    let mut pending: Vec<String> = g.pending_sync_members.iter().cloned().collect();
    pending.sort();
    for id in &pending {
        remove_member(g, cx, id, DepartureCause::SyncTimeout);
    }
    tracing::info!(group = %g.group_id, generation, members = ?pending, "removed members that did not sync");
    prepare_rebalance(g, cx, "members did not sync in time");
}
