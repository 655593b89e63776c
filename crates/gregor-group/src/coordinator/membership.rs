//! SyncGroup, Heartbeat and LeaveGroup.

use std::collections::HashMap;

use bytes::Bytes;

use super::join::{validate_member, validate_member_generation};
use super::rebalance::{self, sync_error};
use super::state::{Cx, GroupCoordinator, PendingAppend};
use crate::api::*;
use crate::effect::Effect;
use crate::group::{Group, GroupState};
use crate::history::DepartureCause;
use crate::timer::TimerKey;

fn protocol_inconsistent(requested: Option<&str>, group: Option<&str>) -> bool {
    matches!((requested, group), (Some(r), Some(g)) if r != g)
}

fn heartbeat_response(error: Option<ResponseError>) -> Response {
    Response::Heartbeat(HeartbeatResponse { error })
}

impl GroupCoordinator {
    pub(super) fn sync_group(
        &mut self,
        now: i64,
        request_id: RequestId,
        req: SyncGroupRequest,
        out: &mut Vec<Effect>,
    ) {
        let mut reply = |error| {
            out.push(Effect::Respond {
                request_id,
                response: sync_error(error),
            })
        };
        if req.group_id.is_empty() {
            return reply(ResponseError::InvalidGroupId);
        }
        let Some(g) = self.groups.get_mut(&req.group_id) else {
            return reply(ResponseError::UnknownMemberId);
        };
        if let Err(error) = check_sync(g, &req) {
            return reply(error);
        }
        let mut cx = Cx {
            now,
            config: &self.config,
            timers: &mut self.timers,
            appends: &mut self.appends,
            out,
        };
        match g.state {
            GroupState::PreparingRebalance => {
                cx.respond(request_id, sync_error(ResponseError::RebalanceInProgress))
            }
            GroupState::CompletingRebalance => {
                let previous = g
                    .member(&req.member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default();
                if cx.config.stale_sync_planted()
                    && !g.is_leader(&req.member_id)
                    && !previous.is_empty()
                {
                    remove_pending_sync_member(g, &mut cx, &req.member_id);
                    return cx.respond(
                        request_id,
                        Response::SyncGroup(SyncGroupResponse {
                            error: None,
                            protocol_type: g.protocol_type.clone(),
                            protocol_name: g.protocol_name.clone(),
                            assignment: previous,
                        }),
                    );
                }
                sync_completing(g, &mut cx, request_id, req);
            }
            GroupState::Stable => sync_stable(g, &mut cx, request_id, &req.member_id),
            GroupState::Empty | GroupState::Dead => {
                cx.respond(request_id, sync_error(ResponseError::UnknownMemberId))
            }
        }
    }

    pub(super) fn sync_appended(
        &mut self,
        now: i64,
        group_id: &str,
        generation: i32,
        assignment: HashMap<String, Bytes>,
        result: Result<(), ResponseError>,
        out: &mut Vec<Effect>,
    ) {
        let Some(g) = self.groups.get_mut(group_id) else {
            return;
        };
        // Another member may have joined meanwhile and restarted the rebalance; then the parked
        // syncs were already told so.
        if !g.is(GroupState::CompletingRebalance) || g.generation_id != generation {
            return;
        }
        let mut cx = Cx {
            now,
            config: &self.config,
            timers: &mut self.timers,
            appends: &mut self.appends,
            out,
        };
        match result {
            Ok(()) => {
                rebalance::set_and_propagate_assignment(g, &mut cx, &assignment);
                g.transition_to(GroupState::Stable, now);
                tracing::info!(group = %group_id, generation, "group is stable");
            }
            Err(error) => {
                tracing::warn!(group = %group_id, generation, %error, "failed to persist the assignment");
                rebalance::reset_and_propagate_assignment_with_error(g, &mut cx, error);
                rebalance::maybe_prepare_rebalance_or_complete_join(
                    g,
                    &mut cx,
                    "failed to persist the assignment",
                );
            }
        }
    }

    pub(super) fn heartbeat(
        &mut self,
        now: i64,
        request_id: RequestId,
        req: HeartbeatRequest,
        out: &mut Vec<Effect>,
    ) {
        let error = self.heartbeat_error(now, &req);
        out.push(Effect::Respond {
            request_id,
            response: heartbeat_response(error),
        });
    }

    fn heartbeat_error(&mut self, now: i64, req: &HeartbeatRequest) -> Option<ResponseError> {
        if req.group_id.is_empty() {
            return Some(ResponseError::InvalidGroupId);
        }
        let Some(g) = self.groups.get(&req.group_id) else {
            return Some(ResponseError::UnknownMemberId);
        };
        if g.is(GroupState::Dead) {
            return Some(ResponseError::CoordinatorNotAvailable);
        }
        if let Err(error) = validate_member_generation(
            g,
            &req.member_id,
            req.group_instance_id.as_deref(),
            req.generation_id,
        ) {
            return Some(error);
        }
        let session = g.member(&req.member_id).map_or(0, |m| m.session_timeout_ms);
        let state = g.state;
        let reschedule = |timers: &mut crate::timer::Timers| {
            timers.schedule(
                super::state::heartbeat_key(&req.group_id, &req.member_id),
                now.saturating_add(i64::from(session)),
                crate::timer::TimerAction::Heartbeat,
            )
        };
        match state {
            GroupState::PreparingRebalance => {
                reschedule(&mut self.timers);
                Some(ResponseError::RebalanceInProgress)
            }
            // Members heartbeat from their JoinGroup response on, while the group is still
            // CompletingRebalance: that is a normal heartbeat.
            GroupState::CompletingRebalance | GroupState::Stable => {
                reschedule(&mut self.timers);
                None
            }
            GroupState::Empty | GroupState::Dead => Some(ResponseError::UnknownMemberId),
        }
    }

    pub(super) fn leave_group(
        &mut self,
        now: i64,
        request_id: RequestId,
        req: LeaveGroupRequest,
        out: &mut Vec<Effect>,
    ) {
        let mut reply = |error| {
            out.push(Effect::Respond {
                request_id,
                response: Response::LeaveGroup(LeaveGroupResponse {
                    error: Some(error),
                    members: Vec::new(),
                }),
            })
        };
        if req.group_id.is_empty() {
            return reply(ResponseError::InvalidGroupId);
        }
        let Some(g) = self.groups.get_mut(&req.group_id) else {
            return reply(ResponseError::UnknownMemberId);
        };
        if g.is(GroupState::Dead) {
            return reply(ResponseError::CoordinatorNotAvailable);
        }
        let mut cx = Cx {
            now,
            config: &self.config,
            timers: &mut self.timers,
            appends: &mut self.appends,
            out,
        };
        let mut members = Vec::with_capacity(req.members.len());
        let mut left = Vec::new();
        for identity in req.members {
            let error = leave_one(g, &mut cx, &identity);
            if error.is_none() {
                left.push(identity.member_id.clone());
            }
            members.push(LeaveMemberResponse {
                member_id: identity.member_id,
                group_instance_id: identity.group_instance_id,
                error,
            });
        }
        if !left.is_empty() {
            tracing::info!(group = %g.group_id, members = ?left, "members left the group");
            match g.state {
                GroupState::Stable | GroupState::CompletingRebalance => {
                    rebalance::maybe_prepare_rebalance_or_complete_join(
                        g,
                        &mut cx,
                        "members left the group",
                    )
                }
                GroupState::PreparingRebalance => rebalance::maybe_complete_join_phase(g, &mut cx),
                GroupState::Empty | GroupState::Dead => {}
            }
        }
        cx.respond(
            request_id,
            Response::LeaveGroup(LeaveGroupResponse {
                error: None,
                members,
            }),
        );
    }
}

/// Removes one member named in a LeaveGroup; the error for that member, if any.
fn leave_one(g: &mut Group, cx: &mut Cx, identity: &MemberIdentity) -> Option<ResponseError> {
    if identity.member_id.is_empty() {
        // Admin removal of a static member by group instance id alone.
        let Some(member_id) = identity
            .group_instance_id
            .as_deref()
            .and_then(|i| g.static_member_id(i))
            .map(str::to_string)
        else {
            return Some(ResponseError::UnknownMemberId);
        };
        rebalance::remove_member(g, cx, &member_id, DepartureCause::RemovedByAdmin);
        return None;
    }
    if g.is_pending_member(&identity.member_id) {
        cx.cancel_heartbeat(&g.group_id, &identity.member_id);
        g.remove(&identity.member_id);
        return None;
    }
    if let Err(error) = validate_member(
        g,
        &identity.member_id,
        identity.group_instance_id.as_deref(),
    ) {
        return Some(error);
    }
    rebalance::remove_member(g, cx, &identity.member_id, DepartureCause::Left);
    None
}

/// SyncGroup's checks before the group's state decides: the group is live, the member and
/// generation are current, and the protocol matches.
fn check_sync(g: &Group, req: &SyncGroupRequest) -> Result<(), ResponseError> {
    if g.is(GroupState::Empty) {
        return Err(ResponseError::UnknownMemberId);
    }
    if g.is(GroupState::Dead) {
        return Err(ResponseError::CoordinatorNotAvailable);
    }
    validate_member_generation(
        g,
        &req.member_id,
        req.group_instance_id.as_deref(),
        req.generation_id,
    )?;
    if protocol_inconsistent(req.protocol_type.as_deref(), g.protocol_type.as_deref())
        || protocol_inconsistent(req.protocol_name.as_deref(), g.protocol_name.as_deref())
    {
        return Err(ResponseError::InconsistentGroupProtocol);
    }
    Ok(())
}

/// SyncGroup while the group completes a rebalance: the member waits for the assignment; the
/// leader's assignment is persisted, and answered once durable.
fn sync_completing(g: &mut Group, cx: &mut Cx, request_id: RequestId, req: SyncGroupRequest) {
    rebalance::park_sync(g, cx, &req.member_id, request_id);
    remove_pending_sync_member(g, cx, &req.member_id);
    if !g.is_leader(&req.member_id) {
        return;
    }
    // Members the leader left out get an empty assignment.
    let mut assignment: HashMap<String, Bytes> = req
        .assignments
        .into_iter()
        .map(|a| (a.member_id, a.assignment))
        .collect();
    assignment.retain(|id, _| g.has_member(id));
    for id in g.members.keys() {
        assignment.entry(id.clone()).or_default();
    }
    tracing::info!(group = %g.group_id, member = %req.member_id, generation = g.generation_id, members = g.members.len(), "assignment received from leader");
    // The assignment takes effect once durable: a new coordinator must not hand out a
    // different one for the same generation.
    let record = rebalance::group_metadata_record(g, Some(&assignment));
    cx.append(
        vec![record],
        PendingAppend::Sync {
            group_id: g.group_id.clone(),
            generation: g.generation_id,
            assignment,
        },
    );
}

/// SyncGroup in a stable group: the member's current assignment, at once.
fn sync_stable(g: &mut Group, cx: &mut Cx, request_id: RequestId, member_id: &str) {
    remove_pending_sync_member(g, cx, member_id);
    let assignment = g
        .member(member_id)
        .map(|m| m.assignment.clone())
        .unwrap_or_default();
    cx.respond(
        request_id,
        Response::SyncGroup(SyncGroupResponse {
            error: None,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol_name.clone(),
            assignment,
        }),
    );
}

/// A member sent SyncGroup in this generation; once all have, the sync deadline is moot.
fn remove_pending_sync_member(g: &mut Group, cx: &mut Cx, member_id: &str) {
    g.pending_sync_members.remove(member_id);
    if g.pending_sync_members.is_empty() {
        cx.timers.cancel(&TimerKey::Sync {
            group: g.group_id.clone(),
        });
    }
}
