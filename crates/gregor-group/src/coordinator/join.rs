//! JoinGroup: validation, new members (MEMBER_ID_REQUIRED), existing members, and static members
//! replacing their previous member id (KIP-345).

use super::rebalance::{self, current_generation_response, join_error};
use super::state::{Cx, GroupCoordinator, PendingAppend, StaticRejoin};
use crate::api::*;
use crate::effect::Effect;
use crate::group::{Group, GroupState};
use crate::history::DepartureCause;

/// JoinGroup v4+ requires a member id: a new member is told its id and rejoins with it (KIP-394).
fn requires_known_member_id(api_version: i16) -> bool {
    api_version >= 4
}

/// JoinGroup v9+ lets a rejoining static leader skip the assignment (KIP-814).
fn supports_skip_assignment(api_version: i16) -> bool {
    api_version >= 9
}

impl GroupCoordinator {
    pub(super) fn join_group(
        &mut self,
        now: i64,
        request_id: RequestId,
        ctx: &RequestContext,
        req: JoinGroupRequest,
        out: &mut Vec<Effect>,
    ) {
        let mut reply = |error| {
            out.push(Effect::Respond {
                request_id,
                response: join_error(&req.member_id, error),
            })
        };
        if req.group_id.is_empty() {
            return reply(ResponseError::InvalidGroupId);
        }
        if req.session_timeout_ms < self.config.min_session_timeout_ms
            || req.session_timeout_ms > self.config.max_session_timeout_ms
        {
            return reply(ResponseError::InvalidSessionTimeout);
        }
        let is_unknown_member = req.member_id.is_empty();
        let created = !self.groups.contains_key(&req.group_id);
        if created {
            if !is_unknown_member {
                // A member id for a group that does not exist: it was removed (or never was).
                return reply(ResponseError::UnknownMemberId);
            }
            self.groups
                .insert(req.group_id.clone(), Group::new(req.group_id.clone(), now));
        }
        let group = self
            .groups
            .get_mut(&req.group_id)
            .expect("present or just created");
        let mut cx = Cx {
            now,
            config: &self.config,
            timers: &mut self.timers,
            appends: &mut self.appends,
            out,
        };

        if !accept_joining_member(group, cx.config.max_size, &req.member_id) {
            rebalance::remove_member(group, &mut cx, &req.member_id, DepartureCause::GroupFull);
            tracing::info!(group = %req.group_id, member = %req.member_id, max_size = cx.config.max_size, "group is full");
            cx.respond(
                request_id,
                join_error("", ResponseError::GroupMaxSizeReached),
            );
        } else if is_unknown_member {
            let new_member_id = self
                .uuids
                .member_id(&ctx.client_id, req.group_instance_id.as_deref());
            join_new_member(group, &mut cx, request_id, ctx, &req, new_member_id);
        } else {
            join_existing_member(group, &mut cx, request_id, ctx, &req);
        }

        // A group created by a JoinGroup that failed validation would linger with nothing in it.
        if created {
            let g = &self.groups[&req.group_id];
            if g.is(GroupState::Empty) && g.members.is_empty() && g.pending_join_members.is_empty()
            {
                self.groups.remove(&req.group_id);
            }
        }
    }

    pub(super) fn static_rejoin_appended(
        &mut self,
        now: i64,
        rejoin: StaticRejoin,
        result: Result<(), ResponseError>,
        out: &mut Vec<Effect>,
    ) {
        let Some(g) = self.groups.get_mut(&rejoin.group_id) else {
            out.push(Effect::Respond {
                request_id: rejoin.request_id,
                response: join_error("", ResponseError::UnknownMemberId),
            });
            return;
        };
        let mut cx = Cx {
            now,
            config: &self.config,
            timers: &mut self.timers,
            appends: &mut self.appends,
            out,
        };
        // Still parked in this request? If the group rebalanced meanwhile, the join phase answered
        // it already (or the member was fenced again), and there is nothing left to do.
        let parked = g
            .member(&rejoin.new_member_id)
            .is_some_and(|m| m.awaiting_join == Some(rejoin.request_id));
        if !parked {
            return;
        }
        match result {
            Err(error) => {
                // Undo the replacement: the old member id is what the log still says.
                tracing::warn!(group = %rejoin.group_id, group_instance_id = %rejoin.group_instance_id, %error, "failed to persist static member; reverting");
                g.set_awaiting_join(&rejoin.new_member_id, None);
                if let Some(m) = g.member_mut(&rejoin.new_member_id) {
                    m.protocols = rejoin.old_protocols;
                    m.rebalance_timeout_ms = rejoin.old_rebalance_timeout_ms;
                    m.session_timeout_ms = rejoin.old_session_timeout_ms;
                }
                replace_static_member(
                    g,
                    &mut cx,
                    &rejoin.group_instance_id,
                    &rejoin.new_member_id,
                    &rejoin.old_member_id,
                );
                let generation = g.generation_id;
                cx.respond(
                    rejoin.request_id,
                    Response::JoinGroup(JoinGroupResponse {
                        error: Some(error),
                        generation_id: generation,
                        protocol_type: g.protocol_type.clone(),
                        protocol_name: g.protocol_name.clone(),
                        leader: rejoin.previous_leader,
                        member_id: String::new(),
                        ..Default::default()
                    }),
                );
            }
            Ok(()) => {
                g.set_awaiting_join(&rejoin.new_member_id, None);
                let response = if rejoin.supports_skip_assignment {
                    // The leader learns it leads but keeps the current assignment (KIP-814).
                    let is_leader = g.is_leader(&rejoin.new_member_id);
                    let leader = g.leader_id.clone().unwrap_or_default();
                    current_generation_response(
                        g,
                        &rejoin.new_member_id,
                        is_leader,
                        leader,
                        is_leader,
                    )
                } else {
                    // Older clients are told the previous leader id, so a rejoining leader acts as
                    // a follower and does not reassign.
                    current_generation_response(
                        g,
                        &rejoin.new_member_id,
                        false,
                        rejoin.previous_leader,
                        false,
                    )
                };
                tracing::info!(group = %rejoin.group_id, member = %rejoin.new_member_id, group_instance_id = %rejoin.group_instance_id, generation = g.generation_id, "static member rejoined without rebalance");
                cx.respond(rejoin.request_id, response);
            }
        }
    }
}

/// Kafka's `acceptJoiningMember`: whether `group.max.size` lets this member in.
fn accept_joining_member(g: &Group, max_size: usize, member_id: &str) -> bool {
    match g.state {
        GroupState::Empty | GroupState::Dead => true,
        // Counting members awaiting join (not members) lets a shrunken max size kick out the
        // last rejoiners.
        GroupState::PreparingRebalance => {
            g.member(member_id)
                .is_some_and(|m| m.awaiting_join.is_some())
                || g.num_awaiting_join() < max_size
        }
        GroupState::CompletingRebalance | GroupState::Stable => {
            g.has_member(member_id) || g.members.len() < max_size
        }
    }
}

fn join_new_member(
    g: &mut Group,
    cx: &mut Cx,
    request_id: RequestId,
    ctx: &RequestContext,
    req: &JoinGroupRequest,
    new_member_id: String,
) {
    if g.is(GroupState::Dead) {
        return cx.respond(
            request_id,
            join_error("", ResponseError::CoordinatorNotAvailable),
        );
    }
    if !g.supports_protocols(&req.protocol_type, &req.protocols) {
        return cx.respond(
            request_id,
            join_error("", ResponseError::InconsistentGroupProtocol),
        );
    }
    match req.group_instance_id.as_deref() {
        Some(instance) => match g.static_member_id(instance).map(str::to_string) {
            Some(old_member_id) => update_static_member_then_rebalance_or_complete_join(
                g,
                cx,
                request_id,
                ctx,
                req,
                instance,
                &old_member_id,
                &new_member_id,
            ),
            None => rebalance::add_member_then_rebalance_or_complete_join(
                g,
                cx,
                ctx,
                req,
                &new_member_id,
                request_id,
            ),
        },
        None if requires_known_member_id(ctx.api_version) => {
            // The member must rejoin with this id; until then it holds up the join barrier for at
            // most its session timeout.
            g.pending_join_members.insert(new_member_id.clone());
            cx.schedule_heartbeat(&g.group_id, &new_member_id, req.session_timeout_ms);
            tracing::info!(group = %g.group_id, member = %new_member_id, "new member must rejoin with its member id");
            cx.respond(
                request_id,
                Response::JoinGroup(JoinGroupResponse {
                    error: Some(ResponseError::MemberIdRequired),
                    generation_id: -1,
                    member_id: new_member_id,
                    ..Default::default()
                }),
            );
        }
        None => rebalance::add_member_then_rebalance_or_complete_join(
            g,
            cx,
            ctx,
            req,
            &new_member_id,
            request_id,
        ),
    }
}

fn join_existing_member(
    g: &mut Group,
    cx: &mut Cx,
    request_id: RequestId,
    ctx: &RequestContext,
    req: &JoinGroupRequest,
) {
    let member_id = req.member_id.as_str();
    if g.is(GroupState::Dead) {
        return cx.respond(
            request_id,
            join_error(member_id, ResponseError::CoordinatorNotAvailable),
        );
    }
    if !g.supports_protocols(&req.protocol_type, &req.protocols) {
        return cx.respond(
            request_id,
            join_error(member_id, ResponseError::InconsistentGroupProtocol),
        );
    }
    if g.is_pending_member(member_id) {
        if req.group_instance_id.is_some() {
            // Pending ids are only handed to dynamic members; Kafka fails such a request with
            // an internal error too.
            return cx.respond(
                request_id,
                join_error(member_id, ResponseError::UnknownServerError),
            );
        }
        tracing::info!(group = %g.group_id, member = %member_id, "pending member joins");
        return rebalance::add_member_then_rebalance_or_complete_join(
            g, cx, ctx, req, member_id, request_id,
        );
    }
    if let Err(error) = validate_member(g, member_id, req.group_instance_id.as_deref()) {
        return cx.respond(request_id, join_error(member_id, error));
    }
    let matches = g
        .member(member_id)
        .is_some_and(|m| m.protocols == req.protocols);
    match g.state {
        GroupState::PreparingRebalance => rebalance::update_member_then_rebalance_or_complete_join(
            g,
            cx,
            req,
            member_id,
            request_id,
            "member rejoins during PreparingRebalance",
        ),
        GroupState::CompletingRebalance if matches && g.storing_generation.is_some() => {
            // A retry while the generation is being stored: it waits like the first request.
            rebalance::park_join(g, cx, member_id, request_id);
        }
        GroupState::CompletingRebalance if matches => {
            // It missed its JoinGroup response: send the current generation again.
            let leader = g.leader_id.clone().unwrap_or_default();
            let response =
                current_generation_response(g, member_id, g.is_leader(member_id), leader, false);
            cx.respond(request_id, response);
        }
        GroupState::Stable if matches && !g.is_leader(member_id) => {
            // A follower with unchanged metadata just gets the current generation back.
            let leader = g.leader_id.clone().unwrap_or_default();
            let response = current_generation_response(g, member_id, false, leader, false);
            cx.respond(request_id, response);
        }
        GroupState::CompletingRebalance | GroupState::Stable => {
            // Changed metadata, or the leader asking for a rebalance (e.g. topic metadata change).
            rebalance::update_member_then_rebalance_or_complete_join(
                g,
                cx,
                req,
                member_id,
                request_id,
                "member rejoins with new metadata, or leader rejoins",
            )
        }
        GroupState::Empty | GroupState::Dead => cx.respond(
            request_id,
            join_error(member_id, ResponseError::UnknownMemberId),
        ),
    }
}

/// Kafka's `validateMember`: a given group instance id must map to this member id (else
/// FENCED_INSTANCE_ID, or UNKNOWN_MEMBER_ID when unknown), and the member must exist.
/// A known member of the group in its current generation (SyncGroup, Heartbeat, OffsetCommit).
pub(crate) fn validate_member_generation(
    g: &Group,
    member_id: &str,
    group_instance_id: Option<&str>,
    generation_id: i32,
) -> Result<(), ResponseError> {
    validate_member(g, member_id, group_instance_id)?;
    if generation_id != g.generation_id {
        return Err(ResponseError::IllegalGeneration);
    }
    Ok(())
}

pub(crate) fn validate_member(
    g: &Group,
    member_id: &str,
    group_instance_id: Option<&str>,
) -> Result<(), ResponseError> {
    if let Some(instance) = group_instance_id {
        match g.static_member_id(instance) {
            None => return Err(ResponseError::UnknownMemberId),
            Some(existing) if existing != member_id => {
                tracing::info!(group = %g.group_id, member = %member_id, group_instance_id = %instance, existing_member = %existing, "fenced static member");
                return Err(ResponseError::FencedInstanceId);
            }
            Some(_) => {}
        }
    }
    if g.has_member(member_id) {
        Ok(())
    } else {
        Err(ResponseError::UnknownMemberId)
    }
}

/// Moves a static member to a new member id, keeping everything else. Requests parked under the
/// old id are answered with FENCED_INSTANCE_ID: that client instance has been replaced.
fn replace_static_member(
    g: &mut Group,
    cx: &mut Cx,
    group_instance_id: &str,
    old_member_id: &str,
    new_member_id: &str,
) {
    cx.cancel_heartbeat(&g.group_id, old_member_id);
    let was_leader = g.is_leader(old_member_id);
    let Some(mut member) = g.remove(old_member_id) else {
        tracing::error!(group = %g.group_id, member = %old_member_id, "cannot replace a missing static member");
        return;
    };
    if let Some(id) = member.awaiting_join.take() {
        cx.respond(
            id,
            Response::JoinGroup(JoinGroupResponse {
                error: Some(ResponseError::FencedInstanceId),
                generation_id: -1,
                member_id: old_member_id.to_string(),
                ..Default::default()
            }),
        );
    }
    if let Some(id) = member.awaiting_sync.take() {
        cx.respond(id, rebalance::sync_error(ResponseError::FencedInstanceId));
    }
    member.member_id = new_member_id.to_string();
    member.group_instance_id = Some(group_instance_id.to_string());
    member.is_new = false;
    // `remove` may have handed leadership to another member; the replacement keeps it.
    let leader_before = g.leader_id.clone();
    g.add(member);
    if was_leader {
        g.leader_id = Some(new_member_id.to_string());
    } else {
        g.leader_id = leader_before.or_else(|| Some(new_member_id.to_string()));
    }
    // The member keeps its place for pending syncs.
    if g.pending_sync_members.remove(old_member_id) {
        g.pending_sync_members.insert(new_member_id.to_string());
    }
    let session = g.member(new_member_id).map_or(0, |m| m.session_timeout_ms);
    cx.schedule_heartbeat(&g.group_id, new_member_id, session);
}

/// A known static member joins with an unknown member id (a restarted instance): it takes over
/// the old member id's place. In a Stable group whose protocol would not change, there is no
/// rebalance: the new id is persisted and the member gets the current generation.
#[allow(clippy::too_many_arguments)]
fn update_static_member_then_rebalance_or_complete_join(
    g: &mut Group,
    cx: &mut Cx,
    request_id: RequestId,
    ctx: &RequestContext,
    req: &JoinGroupRequest,
    group_instance_id: &str,
    old_member_id: &str,
    new_member_id: &str,
) {
    tracing::info!(group = %g.group_id, group_instance_id, old_member = %old_member_id, new_member = %new_member_id, state = %g.state, "static member rejoins with a new member id");
    let previous_leader = g.leader_id.clone().unwrap_or_default();
    replace_static_member(g, cx, group_instance_id, old_member_id, new_member_id);
    let Some(m) = g.member_mut(new_member_id) else {
        return cx.respond(request_id, join_error("", ResponseError::UnknownMemberId));
    };
    let old_protocols = std::mem::replace(&mut m.protocols, req.protocols.clone());
    let old_rebalance_timeout_ms =
        std::mem::replace(&mut m.rebalance_timeout_ms, req.rebalance_timeout_ms);
    let old_session_timeout_ms =
        std::mem::replace(&mut m.session_timeout_ms, req.session_timeout_ms);
    rebalance::park_join(g, cx, new_member_id, request_id);

    match g.state {
        GroupState::Stable => {
            if g.select_protocol() == g.protocol_name {
                let record = rebalance::group_metadata_record(g, None);
                cx.append(
                    vec![record],
                    PendingAppend::StaticRejoin(StaticRejoin {
                        request_id,
                        group_id: g.group_id.clone(),
                        group_instance_id: group_instance_id.to_string(),
                        old_member_id: old_member_id.to_string(),
                        new_member_id: new_member_id.to_string(),
                        previous_leader,
                        supports_skip_assignment: supports_skip_assignment(ctx.api_version),
                        old_protocols,
                        old_rebalance_timeout_ms,
                        old_session_timeout_ms,
                    }),
                );
            } else {
                rebalance::maybe_prepare_rebalance_or_complete_join(
                    g,
                    cx,
                    "static member rejoined with protocols that change the group's protocol",
                );
            }
        }
        // The leader may have computed an assignment for the old member id: rebalance so that
        // the new id gets one.
        GroupState::CompletingRebalance => {
            rebalance::prepare_rebalance(g, cx, "static member replaced during CompletingRebalance")
        }
        GroupState::PreparingRebalance => rebalance::maybe_complete_join_phase(g, cx),
        GroupState::Empty | GroupState::Dead => {
            tracing::error!(group = %g.group_id, state = %g.state, "static member known in a group without members");
        }
    }
}
