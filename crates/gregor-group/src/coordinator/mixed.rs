//! Consumer groups with classic members (KIP-848's online migration) on the coordinator: the
//! classic requests of a consumer group's members, the upgrade of a classic group when a
//! consumer-protocol member joins it, and the downgrade of a consumer group whose members all
//! speak the classic protocol again. The rules are in `crate::consumer::classic` and
//! `migration`; this layer keeps the timers and writes the records before answering.

use super::consumer::{debug_copy, revocation_key, session_key, Topics};
use super::load_figures::GroupLoads;
use super::migration::{classic_group_from_consumer, consumer_group_from_classic};
use super::rebalance::{self, group_metadata_record, join_error, sync_error};
use super::state::{heartbeat_key, GroupCoordinator, PendingAppend};
use crate::api::*;
use crate::consumer::classic::{
    classic_heartbeat, classic_join, classic_leave, classic_sync, only_classic_members,
};
use crate::consumer::delta::Before;
use crate::effect::{Effect, Record};
use crate::group::GroupState;
use crate::records;
use crate::timer::TimerAction;

impl GroupCoordinator {
    /// JoinGroup for a consumer group: the member joins (or rejoins) as a classic member.
    pub(super) fn consumer_group_join(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        ctx: &RequestContext,
        req: JoinGroupRequest,
        out: &mut Vec<Effect>,
    ) {
        let cfg = self.consumer_config(&req.group_id);
        let Some(group) = self.consumer_groups.get_mut(&req.group_id) else {
            return;
        };
        let replaced = req
            .group_instance_id
            .as_deref()
            .and_then(|i| group.static_member(i))
            .map(str::to_string);
        let touched = [Some(req.member_id.as_str()), replaced.as_deref()];
        let mut before = Before::of(group, touched.into_iter().flatten());
        let full = debug_copy(group);
        let uuids = &mut self.uuids;
        let topics = Topics(
            &self.topics,
            self.topics_version,
            GroupLoads::new(&self.partition_loads, &self.offsets, &req.group_id),
        );
        let new_id = || uuids.member_id(&ctx.client_id, req.group_instance_id.as_deref());
        let joined = classic_join(group, &cfg, &topics, ctx, &req, now_ms, new_id);
        let joined = match joined {
            Ok(j) => j,
            Err(e) => {
                let response = join_error(&req.member_id, e);
                return out.push(Effect::Respond {
                    request_id,
                    response,
                });
            }
        };
        let id = joined.response.member_id.clone();
        before.also(group, &id);
        tracing::debug!(group = %req.group_id, member = %id, generation = joined.response.generation_id, "classic member joined a consumer group");
        self.member_timers(
            &req.group_id,
            &id,
            joined.outcome.session_deadline_ms,
            joined.outcome.revocation,
        );
        let answer = Response::JoinGroup(joined.response);
        self.write_consumer_group(
            now_ms,
            &req.group_id,
            Some((before, full)),
            Some((request_id, answer)),
            out,
        );
    }

    /// SyncGroup of a consumer group's classic member: its partitions, at once (nothing to
    /// write: the JoinGroup wrote them).
    pub(super) fn consumer_group_sync(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        req: SyncGroupRequest,
        out: &mut Vec<Effect>,
    ) {
        let Some(group) = self.consumer_groups.get(&req.group_id) else {
            return;
        };
        let response = match classic_sync(group, &req) {
            Ok(r) => {
                self.refresh_classic_session(now_ms, &req.group_id, &req.member_id);
                Response::SyncGroup(r)
            }
            Err(e) => sync_error(e),
        };
        out.push(Effect::Respond {
            request_id,
            response,
        });
    }

    /// Heartbeat of a consumer group's classic member.
    pub(super) fn consumer_group_classic_heartbeat(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        req: HeartbeatRequest,
        out: &mut Vec<Effect>,
    ) {
        let cfg = self.consumer_config(&req.group_id);
        let Some(group) = self.consumer_groups.get_mut(&req.group_id) else {
            return;
        };
        let before = (
            Before::of(group, [req.member_id.as_str()]),
            debug_copy(group),
        );
        let topics = Topics(
            &self.topics,
            self.topics_version,
            GroupLoads::new(&self.partition_loads, &self.offsets, &req.group_id),
        );
        let result = classic_heartbeat(group, &cfg, &topics, &req, now_ms);
        if !matches!(
            result,
            Err(ResponseError::UnknownMemberId
                | ResponseError::IllegalGeneration
                | ResponseError::FencedInstanceId)
        ) {
            self.refresh_classic_session(now_ms, &req.group_id, &req.member_id);
        }
        let answer = Response::Heartbeat(HeartbeatResponse {
            error: result.err(),
        });
        // A new target (the topics changed) is written before the answer.
        self.write_consumer_group(
            now_ms,
            &req.group_id,
            Some(before),
            Some((request_id, answer)),
            out,
        );
    }

    /// A classic member was heard from: its session starts again.
    fn refresh_classic_session(&mut self, now_ms: i64, group_id: &str, member_id: &str) {
        let session = self
            .consumer_groups
            .get(group_id)
            .and_then(|g| g.members.get(member_id))
            .and_then(|m| m.classic.as_ref())
            .map(|c| c.session_timeout_ms);
        if let Some(ms) = session {
            let at = now_ms + i64::from(ms);
            self.timers
                .schedule(session_key(group_id, member_id), at, TimerAction::Heartbeat);
        }
    }

    /// LeaveGroup of a consumer group's classic members.
    pub(super) fn consumer_group_leave(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        req: LeaveGroupRequest,
        out: &mut Vec<Effect>,
    ) {
        let Some(group) = self.consumer_groups.get_mut(&req.group_id) else {
            return;
        };
        let ids: Vec<String> = group.members.keys().cloned().collect();
        let before = (
            Before::of(group, ids.iter().map(String::as_str)),
            debug_copy(group),
        );
        let (members, _) = classic_leave(group, &req, now_ms);
        let answer = Response::LeaveGroup(LeaveGroupResponse {
            error: None,
            members,
        });
        self.write_consumer_group(
            now_ms,
            &req.group_id,
            Some(before),
            Some((request_id, answer)),
            out,
        );
        self.maybe_downgrade(now_ms, &req.group_id, out);
    }

    /// A classic group becomes a consumer group for a consumer-protocol member's join, when the
    /// migration policy allows it and the group is Stable. Its records are written whole with
    /// the join's; the classic record gets a tombstone first. Err: the code and message to refuse
    /// the join with.
    pub(super) fn upgrade_classic(
        &mut self,
        now_ms: i64,
        group_id: &str,
        out: &mut Vec<Effect>,
    ) -> Result<(), (ResponseError, String)> {
        let Some(classic) = self.groups.get(group_id) else {
            return Ok(());
        };
        let not_consumer = || {
            (
                ResponseError::GroupIdNotFound,
                format!("Group {group_id} is not a consumer group."),
            )
        };
        if !classic.members.is_empty() {
            if !self.config.consumer.migration_policy.upgrades() {
                return Err(not_consumer());
            }
            if classic.state != GroupState::Stable {
                // Retriable: the client asks again once the classic rebalance is over.
                let why =
                    format!("Classic group {group_id} is rebalancing; it is upgraded once stable.");
                return Err((ResponseError::CoordinatorNotAvailable, why));
            }
        }
        let topics = Topics(
            &self.topics,
            self.topics_version,
            GroupLoads::new(&self.partition_loads, &self.offsets, group_id),
        );
        let converted = match classic.members.is_empty() {
            true => Some(empty_successor(classic)),
            false => Some(
                consumer_group_from_classic(classic, &topics)
                    .map_err(|why| (ResponseError::GroupIdNotFound, why))?,
            ),
        };
        let converted = converted.map(|mut g| {
            if self.config.upgrade_drops_assignment_planted() {
                forget_assignments(&mut g);
            }
            if !g.members.is_empty() {
                note_upgrade(&mut g, now_ms);
            }
            g
        });
        let classic = self.groups.remove(group_id).expect("present above");
        for m in classic.members.keys() {
            self.timers.cancel(&heartbeat_key(group_id, m));
        }
        let key = records::encode_key(&records::RecordKey::GroupMetadata {
            group: group_id.to_string(),
        });
        let then = PendingAppend::GroupMetadata {
            group_id: group_id.to_string(),
        };
        let mut cx = Self::cx(
            now_ms,
            &self.config,
            &mut self.timers,
            &mut self.appends,
            out,
        );
        cx.append(vec![Record::plain(key, None)], then);
        if let Some(group) = converted {
            tracing::info!(group = %group_id, epoch = group.group_epoch, members = group.members.len(), "classic group upgraded to a consumer group");
            for (id, m) in &group.members {
                let session = m.classic.as_ref().map_or(0, |c| c.session_timeout_ms);
                let at = now_ms + i64::from(session);
                self.timers
                    .schedule(session_key(group_id, id), at, TimerAction::Heartbeat);
            }
            self.consumer_groups.insert(group_id.to_string(), group);
            // Its first write holds the whole group.
            self.consumer_dirty.insert(group_id.to_string());
        }
        Ok(())
    }

    /// A consumer group whose members all speak the classic protocol becomes a classic group
    /// (when the migration policy allows it) and rebalances, so its members rejoin as in any
    /// classic group.
    pub(super) fn maybe_downgrade(&mut self, now_ms: i64, group_id: &str, out: &mut Vec<Effect>) {
        if !self.config.consumer.migration_policy.downgrades() {
            return;
        }
        let Some(group) = self
            .consumer_groups
            .get(group_id)
            .filter(|g| only_classic_members(g))
        else {
            return;
        };
        let Some(mut classic) = classic_group_from_consumer(group, now_ms) else {
            return;
        };
        let group = self
            .consumer_groups
            .remove(group_id)
            .expect("present above");
        self.consumer_dirty.remove(group_id);
        let mut records = super::consumer::changes(group_id, Some(&group), None);
        records.push(group_metadata_record(&classic, None));
        let mut cx = Self::cx(
            now_ms,
            &self.config,
            &mut self.timers,
            &mut self.appends,
            out,
        );
        for (id, m) in &group.members {
            cx.timers.cancel(&session_key(group_id, id));
            cx.timers.cancel(&revocation_key(group_id, id));
            cx.schedule_heartbeat(
                group_id,
                id,
                m.classic.as_ref().map_or(0, |c| c.session_timeout_ms),
            );
        }
        let then = PendingAppend::GroupMetadata {
            group_id: group_id.to_string(),
        };
        cx.append(records, then);
        tracing::info!(group = %group_id, generation = classic.generation_id, members = classic.members.len(), "consumer group downgraded to a classic group");
        rebalance::prepare_rebalance(&mut classic, &mut cx, "downgraded from a consumer group");
        self.groups.insert(group_id.to_string(), classic);
    }
}

/// The consumer group that replaces an empty classic group: no members, its epochs going on
/// from the classic generation (as a downgrade's generation goes on from the group epoch), so
/// that no generation a classic member used is handed out again under the same group id.
fn empty_successor(classic: &crate::group::Group) -> crate::consumer::model::ConsumerGroup {
    debug_assert!(classic.members.is_empty());
    let mut g = crate::consumer::model::ConsumerGroup::new(&classic.group_id);
    g.group_epoch = classic.generation_id.max(0);
    g.target_epoch = g.group_epoch;
    g
}

/// The upgrade as the group's first epoch in its history: its classic assignment is the target,
/// which every member holds already.
fn note_upgrade(g: &mut crate::consumer::model::ConsumerGroup, now_ms: i64) {
    use crate::consumer::model::{CauseKind, EpochCause};
    let cause = EpochCause::of_group(CauseKind::UpgradedFromClassic);
    g.epochs.bump(g.group_epoch, cause, now_ms);
    g.note_target_computed(now_ms);
    for m in g.members.values() {
        let holds = g.target.get(&m.member_id) == Some(&m.assigned);
        g.epochs
            .member_at(&m.member_id, m.member_epoch, holds, now_ms);
    }
}

/// The planted bug `upgrade-drops-assignment`: the members own nothing after the upgrade.
fn forget_assignments(g: &mut crate::consumer::model::ConsumerGroup) {
    let members: Vec<_> = g.members.values().cloned().collect();
    for mut m in members {
        m.assigned.clear();
        g.put_member(m);
    }
    std::sync::Arc::make_mut(&mut g.target).clear();
}

#[cfg(test)]
#[path = "mixed_tests.rs"]
mod tests;
