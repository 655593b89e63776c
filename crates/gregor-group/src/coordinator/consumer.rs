//! KIP-848 consumer groups on the coordinator: ConsumerGroupHeartbeat, the members' session and
//! revocation deadlines, and the records that make each change durable before its answer goes
//! out. The group logic itself is in `crate::consumer`.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::load_figures::GroupLoads;
use super::state::{GroupCoordinator, PendingAppend};
use crate::api::*;
use crate::config::GroupOverridesMap;
use crate::consumer::delta::{self, Before};
use crate::consumer::heartbeat::{heartbeat, remove_member, RevocationTimer, TopicsView};
use crate::consumer::model::{ConsumerGroup, Departure, TopicMetadata};
use crate::consumer::records::{group_records, ConsumerKey, ConsumerValue};
use crate::effect::{Effect, Record};
use crate::timer::{TimerAction, TimerKey};

/// The cluster's topics, their version, and one group's load figures.
pub(super) struct Topics<'a>(
    pub &'a BTreeMap<String, TopicMetadata>,
    pub u64,
    pub GroupLoads<'a>,
);

impl TopicsView for Topics<'_> {
    fn topic(&self, name: &str) -> Option<TopicMetadata> {
        self.0.get(name).cloned()
    }
    fn names(&self) -> Vec<String> {
        self.0.keys().cloned().collect()
    }
    fn version(&self) -> u64 {
        self.1
    }
    fn partition_load(&self, topic: &str, partition: i32) -> Option<f64> {
        self.2.figure(topic, partition)
    }
}

pub(super) fn session_key(group: &str, member: &str) -> TimerKey {
    TimerKey::ConsumerSession {
        group: group.to_string(),
        member: member.to_string(),
    }
}

pub(super) fn revocation_key(group: &str, member: &str) -> TimerKey {
    TimerKey::ConsumerRevocation {
        group: group.to_string(),
        member: member.to_string(),
    }
}

fn error_response(code: i16, message: Option<String>) -> ConsumerGroupHeartbeatResponse {
    ConsumerGroupHeartbeatResponse {
        error_code: code,
        error_message: message,
        ..Default::default()
    }
}

impl GroupCoordinator {
    /// The cluster's topics, after each metadata change: a consumer group whose subscribed
    /// topics changed gets a new target assignment at its next heartbeat.
    pub fn update_topics(&mut self, topics: impl Into<Arc<BTreeMap<String, TopicMetadata>>>) {
        let topics = topics.into();
        if !Arc::ptr_eq(&self.topics, &topics) && *self.topics != *topics {
            self.topics_version += 1;
        }
        self.topics = topics;
    }

    /// Each consumer group's own settings, after each metadata change; a heartbeat uses its
    /// group's from then on.
    pub fn update_group_overrides(&mut self, overrides: Arc<GroupOverridesMap>) {
        self.group_overrides = overrides;
    }

    /// Every KIP-848 consumer group, by id.
    pub fn consumer_groups(&self) -> impl Iterator<Item = &ConsumerGroup> {
        self.consumer_groups.values()
    }

    /// A KIP-848 consumer group, for tooling and tests.
    pub fn consumer_group(&self, group_id: &str) -> Option<&ConsumerGroup> {
        self.consumer_groups.get(group_id)
    }

    pub(super) fn consumer_group_heartbeat(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        context: &RequestContext,
        mut req: ConsumerGroupHeartbeatRequest,
        out: &mut Vec<Effect>,
    ) {
        let respond = |out: &mut Vec<Effect>, r| {
            out.push(Effect::Respond {
                request_id,
                response: Response::ConsumerGroupHeartbeat(r),
            })
        };
        if self.groups.contains_key(&req.group_id) {
            let upgraded = match req.member_epoch {
                0 => self.upgrade_classic(now_ms, &req.group_id, out),
                _ => Err((
                    ResponseError::GroupIdNotFound,
                    format!("Group {} is not a consumer group.", req.group_id),
                )),
            };
            if let Err((error, message)) = upgraded {
                return respond(out, error_response(error.code(), Some(message)));
            }
        }
        req.version = context.api_version;
        req.client_id = context.client_id.clone();
        req.client_host = context.client_host.clone();
        let existing = self.consumer_groups.get(&req.group_id);
        let created = existing.is_none();
        let before = existing.map(|g| {
            // The static member a join may replace is touched too.
            let replaced = req.instance_id.as_deref().and_then(|i| g.static_member(i));
            let touched = [Some(req.member_id.as_str()), replaced];
            (Before::of(g, touched.into_iter().flatten()), debug_copy(g))
        });
        let group = self
            .consumer_groups
            .entry(req.group_id.clone())
            .or_insert_with(|| ConsumerGroup::new(&req.group_id));
        let uuids = &mut self.uuids;
        let loads = GroupLoads::new(&self.partition_loads, &self.offsets, &req.group_id);
        let topics = Topics(&self.topics, self.topics_version, loads);
        let cfg = self
            .config
            .consumer
            .for_group(&self.group_overrides, &req.group_id);
        let result = heartbeat(group, &cfg, &topics, &req, now_ms, || uuids.next_uuid());
        let outcome = match result {
            Ok(o) => o,
            Err(e) => {
                if created {
                    self.consumer_groups.remove(&req.group_id);
                }
                return respond(out, error_response(e.code(), Some(e.to_string())));
            }
        };
        let reply = outcome.reply.clone();
        let id = reply.member_id.clone();
        self.member_timers(
            &req.group_id,
            &id,
            outcome.session_deadline_ms,
            outcome.revocation,
        );
        let response = ConsumerGroupHeartbeatResponse {
            member_id: Some(reply.member_id),
            member_epoch: reply.member_epoch,
            heartbeat_interval_ms: reply.heartbeat_interval_ms,
            assignment: reply.assignment,
            ..Default::default()
        };
        // A version-0 join named its member only now.
        let before = before.map(|(mut b, full)| {
            if let Some(g) = self.consumer_groups.get(&req.group_id) {
                b.also(g, &id);
            }
            (b, full)
        });
        let answer = Response::ConsumerGroupHeartbeat(response);
        self.write_consumer_group(
            now_ms,
            &req.group_id,
            before,
            Some((request_id, answer)),
            out,
        );
        self.maybe_downgrade(now_ms, &req.group_id, out);
    }

    /// Writes what changed in a consumer group since `before` (the whole group when it is new
    /// or an earlier write failed), then answers `answer`, or answers at once when nothing
    /// changed.
    pub(super) fn write_consumer_group(
        &mut self,
        now_ms: i64,
        group_id: &str,
        before: Option<(Before, Option<ConsumerGroup>)>,
        answer: Option<(RequestId, Response)>,
        out: &mut Vec<Effect>,
    ) {
        if let Some(g) = self.consumer_groups.get_mut(group_id) {
            let moved = before
                .as_ref()
                .is_none_or(|(b, _)| b.target_epoch() != g.target_epoch);
            let state = g.state();
            g.stats.note(state, moved, now_ms);
        }
        let after = self.consumer_groups.get(group_id);
        let dirty = self.consumer_dirty.remove(group_id);
        let records = match (&before, after) {
            (Some((b, full)), Some(a)) if !dirty => {
                for m in b.removed(a) {
                    self.timers.cancel(&session_key(group_id, m));
                    self.timers.cancel(&revocation_key(group_id, m));
                }
                let records: Vec<Record> = delta::changes(b, a)
                    .into_iter()
                    .map(|(k, v)| Record::plain(k.encode(), v.map(|v| v.encode())))
                    .collect();
                debug_assert!(
                    full.as_ref().is_none_or(|f| same_records(
                        &records,
                        &changes(group_id, Some(f), Some(a))
                    )),
                    "the scoped records of {group_id} differ from the whole diff"
                );
                records
            }
            _ => changes(group_id, None, after),
        };
        let (request_id, response) = match answer {
            Some((r, resp)) => (Some(r), resp),
            None => (None, Response::ConsumerGroupHeartbeat(Default::default())),
        };
        if records.is_empty() {
            if let Some(request_id) = request_id {
                out.push(Effect::Respond {
                    request_id,
                    response,
                });
            }
            return;
        }
        let mut cx = Self::cx(
            now_ms,
            &self.config,
            &mut self.timers,
            &mut self.appends,
            out,
        );
        let then = PendingAppend::ConsumerGroup {
            group_id: group_id.to_string(),
            request_id,
            response,
        };
        cx.append(records, then);
    }

    /// A member's session or revocation deadline passed: it is fenced out of its group.
    pub(super) fn expire_consumer_member(
        &mut self,
        at_ms: i64,
        group_id: &str,
        member_id: &str,
        out: &mut Vec<Effect>,
    ) {
        let Some(group) = self.consumer_groups.get_mut(group_id) else {
            return;
        };
        let before = (Before::of(group, [member_id]), debug_copy(group));
        if remove_member(group, member_id, Departure::Fenced, at_ms).is_none() {
            return;
        }
        tracing::info!(group = %group_id, member = %member_id, "consumer group member fenced: session or revocation deadline passed");
        self.write_consumer_group(at_ms, group_id, Some(before), None, out);
        self.maybe_downgrade(at_ms, group_id, out);
    }

    /// The records of a consumer group are durable (or failed): the heartbeat's answer goes
    /// out; after a failure the group is written whole with its next change.
    pub(super) fn consumer_group_appended(
        &mut self,
        group_id: String,
        request_id: Option<RequestId>,
        response: Response,
        result: Result<(), ResponseError>,
        out: &mut Vec<Effect>,
    ) {
        let response = match result {
            Ok(()) => response,
            Err(e) => {
                tracing::warn!(group = %group_id, error = %e, "failed to write consumer group records");
                self.consumer_dirty.insert(group_id);
                failed(response, e)
            }
        };
        if let Some(request_id) = request_id {
            out.push(Effect::Respond {
                request_id,
                response,
            });
        }
    }

    /// A consumer group's checks of an OffsetCommit (`None`: not a consumer group). Outside
    /// the group (epoch -1) only an empty group takes commits; a member commits at its
    /// current epoch (STALE_MEMBER_EPOCH otherwise), with OffsetCommit v9 or later.
    pub(super) fn validate_consumer_commit(
        &self,
        ctx: &RequestContext,
        req: &OffsetCommitRequest,
    ) -> Option<Result<(), ResponseError>> {
        let g = self.consumer_groups.get(&req.group_id)?;
        if req.generation_id < 0 && g.members.is_empty() {
            return Some(Ok(()));
        }
        Some(match g.members.get(&req.member_id) {
            None => Err(ResponseError::UnknownMemberId),
            // A classic member commits as in a classic group, at its generation.
            Some(m) if m.classic.is_some() && m.member_epoch != req.generation_id => {
                Err(ResponseError::IllegalGeneration)
            }
            Some(m) if m.classic.is_some() => Ok(()),
            Some(_) if ctx.api_version < 9 => Err(ResponseError::UnsupportedVersion),
            Some(m) if m.member_epoch != req.generation_id => Err(ResponseError::StaleMemberEpoch),
            Some(_) => Ok(()),
        })
    }

    /// Sets a member's session and revocation deadlines after a change.
    pub(super) fn member_timers(
        &mut self,
        group_id: &str,
        member_id: &str,
        session_deadline_ms: Option<i64>,
        revocation: RevocationTimer,
    ) {
        let session = session_key(group_id, member_id);
        match session_deadline_ms {
            Some(at) => self.timers.schedule(session, at, TimerAction::Heartbeat),
            None => self.timers.cancel(&session),
        }
        let revoke = revocation_key(group_id, member_id);
        match revocation {
            RevocationTimer::Start { at_ms } => {
                self.timers.schedule(revoke, at_ms, TimerAction::Heartbeat)
            }
            RevocationTimer::Cancel => self.timers.cancel(&revoke),
            RevocationTimer::Keep => {}
        }
    }

    /// The settings of consumer group `group_id` (the broker's, with the group's own).
    pub(super) fn consumer_config(&self, group_id: &str) -> crate::config::ConsumerGroupConfig {
        self.config
            .consumer
            .for_group(&self.group_overrides, group_id)
            .into_owned()
    }

    /// After loading: every consumer group member's session starts now.
    pub(super) fn start_consumer_sessions(&mut self, now_ms: i64) {
        for (id, g) in &self.consumer_groups {
            let cfg = self.config.consumer.for_group(&self.group_overrides, id);
            for (m, member) in &g.members {
                let session = match &member.classic {
                    Some(c) => c.session_timeout_ms,
                    None => cfg.session_timeout_ms,
                };
                let at = now_ms + i64::from(session);
                self.timers
                    .schedule(session_key(id, m), at, TimerAction::Heartbeat);
            }
        }
    }
}

/// The answer to send instead of `response` when its records could not be written.
fn failed(response: Response, e: ResponseError) -> Response {
    match response {
        Response::JoinGroup(r) => super::rebalance::join_error(&r.member_id, e),
        Response::LeaveGroup(_) => Response::LeaveGroup(LeaveGroupResponse {
            error: Some(e),
            members: Vec::new(),
        }),
        _ => Response::ConsumerGroupHeartbeat(error_response(e.code(), None)),
    }
}

/// The records that take a group from `before` to `after` (`None`: the group as a whole).
pub(super) fn changes(
    group_id: &str,
    before: Option<&ConsumerGroup>,
    after: Option<&ConsumerGroup>,
) -> Vec<Record> {
    let old: BTreeMap<ConsumerKey, ConsumerValue> = before
        .map(|b| group_records(b).into_iter().collect())
        .unwrap_or_default();
    let new: Vec<(ConsumerKey, ConsumerValue)> = after.map(group_records).unwrap_or_default();
    let mut out = Vec::new();
    // Tombstones first: a member's current assignment, target and metadata; the group last.
    let gone = |k: &&ConsumerKey| !new.iter().any(|(n, _)| n == *k);
    let mut removed: Vec<&ConsumerKey> = old.keys().filter(gone).collect();
    removed.sort_by_key(|k| std::cmp::Reverse(tombstone_rank(k)));
    for k in removed {
        out.push(Record::plain(k.encode(), None));
    }
    for (k, v) in &new {
        if old.get(k) != Some(v) {
            out.push(Record::plain(k.encode(), Some(v.encode())));
        }
    }
    debug_assert!(out.iter().all(
        |r| ConsumerKey::decode(&r.key).is_ok_and(|k| k.is_some_and(|k| k.group() == group_id))
    ));
    out
}

/// A whole copy of the group, kept in debug builds only to check the scoped records against the
/// whole diff.
pub(super) fn debug_copy(g: &ConsumerGroup) -> Option<ConsumerGroup> {
    cfg!(debug_assertions).then(|| g.clone())
}

/// Whether two record lists write the same keys and values (in any order).
fn same_records(a: &[Record], b: &[Record]) -> bool {
    let set = |r: &[Record]| {
        r.iter()
            .map(|r| (r.key.clone(), r.value.clone()))
            .collect::<std::collections::BTreeSet<_>>()
    };
    a.len() == b.len() && set(a) == set(b)
}

fn tombstone_rank(k: &ConsumerKey) -> u8 {
    match k {
        ConsumerKey::CurrentMemberAssignment { .. } => 4,
        ConsumerKey::TargetAssignmentMember { .. } => 3,
        ConsumerKey::MemberMetadata { .. } => 2,
        ConsumerKey::TargetAssignmentMetadata { .. } => 1,
        ConsumerKey::GroupMetadata { .. } => 0,
    }
}

#[cfg(test)]
#[path = "consumer_tests.rs"]
mod tests;
