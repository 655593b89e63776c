//! The coordinator's entry points: routes requests to their handlers, fires deadlines, hands
//! completed appends to whatever waits on them, and answers read-only queries.

use bytes::Bytes;

use super::offset_store::CommittedOffset;
use super::rebalance;
use super::state::{
    append_error_to_response_error, heartbeat_key, GroupCoordinator, PendingAppend,
};
use crate::api::*;
use crate::effect::{AppendToken, Effect};
use crate::group::GroupState;
use crate::history::RebalanceHistory;
use crate::timer::{TimerAction, TimerKey};

/// A snapshot of one group, for tooling and tests.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupSummary {
    pub group_id: String,
    pub state: GroupState,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    pub members: Vec<MemberSummary>,
    /// Member ids handed out with MEMBER_ID_REQUIRED that have not joined yet.
    pub pending_members: Vec<String>,
    pub state_timestamp_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberSummary {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub session_timeout_ms: i32,
    pub rebalance_timeout_ms: i32,
    pub protocols: Vec<JoinProtocol>,
    pub assignment: Bytes,
    pub awaiting_join: bool,
    pub awaiting_sync: bool,
    /// When the coordinator removes the member unless it hears from it.
    pub session_deadline_ms: Option<i64>,
}

impl GroupCoordinator {
    /// Handles one request. Responses that need no durable write come back as
    /// [`Effect::Respond`] right away; parked JoinGroup/SyncGroup requests and responses waiting
    /// for an append come back from later calls.
    pub fn handle(&mut self, now_ms: i64, input: Input) -> Vec<Effect> {
        let mut out = Vec::new();
        self.fire_timers(now_ms, &mut out);
        let Input {
            request_id,
            context,
            request,
        } = input;
        match request {
            // A consumer group's classic members (a migration in progress).
            Request::JoinGroup(r) if self.consumer_groups.contains_key(&r.group_id) => {
                self.consumer_group_join(now_ms, request_id, &context, r, &mut out)
            }
            Request::SyncGroup(r) if self.consumer_groups.contains_key(&r.group_id) => {
                self.consumer_group_sync(now_ms, request_id, r, &mut out)
            }
            Request::Heartbeat(r) if self.consumer_groups.contains_key(&r.group_id) => {
                self.consumer_group_classic_heartbeat(now_ms, request_id, r, &mut out)
            }
            Request::LeaveGroup(r) if self.consumer_groups.contains_key(&r.group_id) => {
                self.consumer_group_leave(now_ms, request_id, r, &mut out)
            }
            Request::JoinGroup(r) => self.join_group(now_ms, request_id, &context, r, &mut out),
            Request::SyncGroup(r) => self.sync_group(now_ms, request_id, r, &mut out),
            Request::Heartbeat(r) => self.heartbeat(now_ms, request_id, r, &mut out),
            Request::LeaveGroup(r) => self.leave_group(now_ms, request_id, r, &mut out),
            Request::OffsetCommit(r) => {
                self.offset_commit(now_ms, request_id, &context, r, &mut out)
            }
            Request::OffsetFetch(r) => {
                let response = self.offset_fetch(&r);
                out.push(Effect::Respond {
                    request_id,
                    response: Response::OffsetFetch(response),
                });
            }
            Request::DescribeGroups(r) => {
                let response = self.describe_groups(&r);
                out.push(Effect::Respond {
                    request_id,
                    response: Response::DescribeGroups(response),
                });
            }
            Request::ListGroups(r) => {
                let response = self.list_groups(&r);
                out.push(Effect::Respond {
                    request_id,
                    response: Response::ListGroups(response),
                });
            }
            Request::DeleteGroups(r) => self.delete_groups(now_ms, request_id, r, &mut out),
            Request::OffsetDelete(r) => self.offset_delete(now_ms, request_id, r, &mut out),
            Request::TxnOffsetCommit(r) => self.txn_offset_commit(now_ms, request_id, r, &mut out),
            Request::ConsumerGroupHeartbeat(r) => {
                self.consumer_group_heartbeat(now_ms, request_id, &context, r, &mut out)
            }
            Request::ConsumerGroupDescribe(r) => out.push(Effect::Respond {
                request_id,
                response: Response::ConsumerGroupDescribe(self.consumer_group_describe(&r)),
            }),
        }
        out
    }

    /// Fires every deadline due at `now_ms` (session expiry, end of join phase, initial delay,
    /// end of sync phase).
    pub fn tick(&mut self, now_ms: i64) -> Vec<Effect> {
        let mut out = Vec::new();
        self.fire_timers(now_ms, &mut out);
        out
    }

    /// The earliest deadline; call [`tick`](Self::tick) (or any other entry point) at or after it.
    pub fn next_deadline(&self) -> Option<i64> {
        self.timers.next_deadline()
    }

    /// Reports the outcome of an [`Effect::Append`]: `Ok` once its records are durable, `Err`
    /// with the append's error otherwise. Appends to one partition complete in token order.
    pub fn append_completed(
        &mut self,
        now_ms: i64,
        token: AppendToken,
        result: Result<(), ResponseError>,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        self.fire_timers(now_ms, &mut out);
        let Some(pending) = self.appends.pending.remove(&token) else {
            tracing::warn!(token = token.0, "completion of an unknown append");
            return out;
        };
        let result = result.map_err(append_error_to_response_error);
        match pending {
            PendingAppend::Generation {
                group_id,
                generation,
            } => {
                if let Some(g) = self.groups.get_mut(&group_id) {
                    let mut cx = Self::cx(
                        now_ms,
                        &self.config,
                        &mut self.timers,
                        &mut self.appends,
                        &mut out,
                    );
                    rebalance::generation_stored(g, &mut cx, generation, result);
                }
            }
            PendingAppend::Sync {
                group_id,
                generation,
                assignment,
            } => self.sync_appended(now_ms, &group_id, generation, assignment, result, &mut out),
            PendingAppend::StaticRejoin(rejoin) => {
                self.static_rejoin_appended(now_ms, rejoin, result, &mut out)
            }
            PendingAppend::OffsetCommit {
                request_id,
                group_id,
                offsets,
                response,
            } => self
                .offset_commit_appended(request_id, &group_id, offsets, response, result, &mut out),
            PendingAppend::TxnOffsetCommit(commit) => {
                self.txn_offset_commit_appended(commit, result, &mut out)
            }
            PendingAppend::DeleteGroups(d) => {
                self.delete_groups_appended(now_ms, d, result, &mut out)
            }
            PendingAppend::OffsetDelete {
                request_id,
                group_id,
                partitions,
                response,
            } => self.offset_delete_appended(
                request_id, &group_id, partitions, response, result, &mut out,
            ),
            PendingAppend::GroupMetadata { group_id } => {
                if let Err(error) = result {
                    // Nothing waits on it; the previous generation in the log has no live members
                    // either, so a reload would expire them. Kafka only warns too.
                    tracing::warn!(group = %group_id, %error, "failed to write empty group metadata");
                }
            }
            PendingAppend::ConsumerGroup {
                group_id,
                request_id,
                response,
            } => self.consumer_group_appended(group_id, request_id, response, result, &mut out),
            PendingAppend::ExpiredOffsets { group_id } => {
                if let Err(error) = result {
                    // The offsets are gone from memory; a reload finds them in the log and
                    // expires them again.
                    tracing::warn!(group = %group_id, %error, "failed to write expired-offset tombstones");
                }
            }
        }
        out
    }

    /// A transaction marker of `producer_id` (a control batch: `commit` or abort) is durable in
    /// this partition: the offsets that producer's transaction committed, in every group,
    /// become visible (commit; a plain commit of the same partition appended after them stays)
    /// or are dropped (abort). Call it for every marker written to the partition while it
    /// leads; at load, use [`replay_marker`](Self::replay_marker) instead.
    pub fn complete_transaction(
        &mut self,
        now_ms: i64,
        producer_id: i64,
        commit: bool,
    ) -> Vec<Effect> {
        let mut out = Vec::new();
        self.fire_timers(now_ms, &mut out);
        self.apply_txn_marker(producer_id, commit);
        out
    }

    /// Producers with transactional offsets waiting for their marker, ascending.
    pub fn pending_transactions(&self) -> Vec<i64> {
        self.offsets.pending_producers()
    }

    /// Appends handed out and not yet completed.
    pub fn pending_appends(&self) -> usize {
        self.appends.pending.len()
    }

    /// A snapshot of a group.
    pub fn group(&self, group_id: &str) -> Option<GroupSummary> {
        let g = self.groups.get(group_id)?;
        let mut pending_members: Vec<String> = g.pending_join_members.iter().cloned().collect();
        pending_members.sort();
        Some(GroupSummary {
            group_id: g.group_id.clone(),
            state: g.state,
            generation_id: g.generation_id,
            protocol_type: g.protocol_type.clone(),
            protocol_name: g.protocol_name.clone(),
            leader_id: g.leader_id.clone(),
            members: g
                .members
                .values()
                .map(|m| MemberSummary {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    session_timeout_ms: m.session_timeout_ms,
                    rebalance_timeout_ms: m.rebalance_timeout_ms,
                    protocols: m.protocols.clone(),
                    assignment: m.assignment.clone(),
                    awaiting_join: m.awaiting_join.is_some(),
                    awaiting_sync: m.awaiting_sync.is_some(),
                    session_deadline_ms: self
                        .timers
                        .deadline(&heartbeat_key(&g.group_id, &m.member_id)),
                })
                .collect(),
            pending_members,
            state_timestamp_ms: g.state_timestamp,
        })
    }

    /// The rebalances of a group since this coordinator loaded it.
    pub fn rebalance_history(&self, group_id: &str) -> Option<&RebalanceHistory> {
        self.groups.get(group_id).map(|g| &g.history)
    }

    /// Ids of every group, sorted.
    pub fn group_ids(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.groups.keys().cloned().collect();
        ids.sort();
        ids
    }

    /// The committed offset of one partition for a group.
    pub fn committed_offset(
        &self,
        group_id: &str,
        topic: &str,
        partition: i32,
    ) -> Option<&CommittedOffset> {
        self.offsets.get(group_id, topic, partition)
    }

    /// Every committed offset of a group, by topic then partition.
    pub fn committed_offsets(&self, group_id: &str) -> Vec<(String, i32, CommittedOffset)> {
        self.offsets.all(group_id)
    }

    pub(super) fn fire_timers(&mut self, now_ms: i64, out: &mut Vec<Effect>) {
        while let Some((at, key, action)) = self.timers.pop_due(now_ms) {
            // Deadlines fire at their own time: what they schedule is relative to when they were
            // due, not to when the shell got round to ticking.
            let group_id = match &key {
                TimerKey::Heartbeat { group, .. }
                | TimerKey::Join { group }
                | TimerKey::Sync { group } => group.clone(),
                TimerKey::ConsumerSession { group, member }
                | TimerKey::ConsumerRevocation { group, member } => {
                    let (group, member) = (group.clone(), member.clone());
                    self.expire_consumer_member(at, &group, &member, out);
                    continue;
                }
            };
            let Some(group) = self.groups.get_mut(&group_id) else {
                continue;
            };
            let mut cx = Self::cx(at, &self.config, &mut self.timers, &mut self.appends, out);
            match (key, action) {
                (TimerKey::Heartbeat { member, .. }, _) => {
                    rebalance::expire_heartbeat(group, &mut cx, &member)
                }
                (
                    TimerKey::Join { .. },
                    TimerAction::InitialJoin {
                        delay_ms,
                        remaining_ms,
                    },
                ) => rebalance::try_complete_initial_rebalance(
                    group,
                    &mut cx,
                    delay_ms,
                    remaining_ms,
                ),
                (TimerKey::Join { .. }, _) => rebalance::complete_join(group, &mut cx),
                (TimerKey::Sync { .. }, TimerAction::Sync { generation }) => {
                    rebalance::expire_pending_sync(group, &mut cx, generation)
                }
                (TimerKey::Sync { .. }, _) => {}
                (TimerKey::ConsumerSession { .. } | TimerKey::ConsumerRevocation { .. }, _) => {}
            }
        }
    }
}
