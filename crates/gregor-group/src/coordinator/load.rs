//! Loading a `__consumer_offsets` partition (replay) and giving it up (unload).

use bytes::Bytes;

use super::offset_store::CommittedOffset;
use super::rebalance::{self, join_error, sync_error};
use super::state::{Cx, GroupCoordinator, PendingAppend};
use crate::api::*;
use crate::consumer::records::{self as consumer_records, ConsumerKey, ConsumerValue};
use crate::effect::Effect;
use crate::group::{Group, GroupState, Member};
use crate::records::{self, CodecError, RecordKey};

/// Why a record could not be replayed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReplayError {
    #[error("undecodable record: {0}")]
    Codec(#[from] CodecError),
    #[error("group {group}: metadata with members but no protocol")]
    MembersWithoutProtocol { group: String },
}

impl GroupCoordinator {
    /// Applies one record of the partition's log, in log order, while loading. Groups come back
    /// as the log last described them: with members in Stable (their sessions start at
    /// [`complete_load`](Self::complete_load), so members that are gone expire), without members
    /// in Empty. Tombstones delete. Records of other key versions (KIP-848 groups) are skipped.
    ///
    /// Only for loading: the coordinator applies its own appends when
    /// [`append_completed`](Self::append_completed) reports them.
    pub fn replay(&mut self, key: &[u8], value: Option<&[u8]>) -> Result<(), ReplayError> {
        match records::decode_key(key)? {
            RecordKey::OffsetCommit {
                group,
                topic,
                partition,
            } => match value {
                Some(bytes) => {
                    let v = records::decode_offset_commit_value(bytes)?;
                    // Offsets without group metadata belong to a simple group.
                    if !self.groups.contains_key(&group) {
                        let g = Group::new(group.clone(), v.commit_timestamp);
                        self.groups.insert(group.clone(), g);
                    }
                    // Planted (simulation only): a later commit does not replace an earlier one.
                    if self.config.replay_keeps_first_commit_planted()
                        && self.offsets.get(&group, &topic, partition).is_some()
                    {
                        return Ok(());
                    }
                    self.offsets.put(
                        &group,
                        topic,
                        partition,
                        CommittedOffset {
                            offset: v.offset,
                            leader_epoch: v.leader_epoch,
                            metadata: v.metadata,
                            commit_timestamp_ms: v.commit_timestamp,
                        },
                    );
                }
                None => self.offsets.remove(&group, &topic, partition),
            },
            RecordKey::GroupMetadata { group } => match value {
                None => {
                    self.groups.remove(&group);
                }
                Some(bytes) => {
                    let v = records::decode_group_metadata_value(bytes)?;
                    let g = group_from_record(group.clone(), v)?;
                    self.groups.insert(group, g);
                }
            },
            RecordKey::Other { version } => match ConsumerKey::decode(key)? {
                Some(k) => {
                    let v = value.map(|b| ConsumerValue::decode(&k, b)).transpose()?;
                    if self.keeps_first_epoch(&k, v.is_some()) {
                        return Ok(());
                    }
                    consumer_records::replay(&mut self.consumer_groups, &k, v.as_ref());
                }
                None => tracing::debug!(
                    version,
                    "skipping a record this coordinator does not handle"
                ),
            },
        }
        Ok(())
    }

    /// Planted (simulation only): a consumer group's later group epoch or target epoch record
    /// does not replace the first one loaded.
    fn keeps_first_epoch(&self, key: &ConsumerKey, is_value: bool) -> bool {
        let epoch_record = matches!(
            key,
            ConsumerKey::GroupMetadata { .. } | ConsumerKey::TargetAssignmentMetadata { .. }
        );
        self.config.consumer_replay_first_epoch_planted()
            && epoch_record
            && is_value
            && self
                .consumer_groups
                .get(key.group())
                .is_some_and(|g| g.group_epoch > 0)
    }

    /// Applies one record of a transactional batch of `producer_id`, in log order, while loading.
    /// An offset commit is pending for that producer, invisible to OffsetFetch, until its
    /// marker replays ([`replay_marker`](Self::replay_marker)); a tombstone takes back that
    /// producer's pending offset. Other records apply as [`replay`](Self::replay) applies them.
    pub fn replay_transactional(
        &mut self,
        producer_id: i64,
        key: &[u8],
        value: Option<&[u8]>,
    ) -> Result<(), ReplayError> {
        let RecordKey::OffsetCommit {
            group,
            topic,
            partition,
        } = records::decode_key(key)?
        else {
            return self.replay(key, value);
        };
        match value {
            Some(bytes) => {
                let v = records::decode_offset_commit_value(bytes)?;
                // As for a plain commit: offsets without group metadata make a simple group.
                if !self.groups.contains_key(&group) {
                    let g = Group::new(group.clone(), v.commit_timestamp);
                    self.groups.insert(group.clone(), g);
                }
                self.offsets.put_pending(
                    producer_id,
                    &group,
                    topic,
                    partition,
                    CommittedOffset {
                        offset: v.offset,
                        leader_epoch: v.leader_epoch,
                        metadata: v.metadata,
                        commit_timestamp_ms: v.commit_timestamp,
                    },
                );
            }
            None => self
                .offsets
                .remove_pending(producer_id, &group, &topic, partition),
        }
        Ok(())
    }

    /// Applies a control batch (a transaction marker: `commit` or abort) of `producer_id`, in
    /// log order, while loading: as [`complete_transaction`](Self::complete_transaction) does
    /// live. A producer whose marker never replays keeps its offsets pending.
    pub fn replay_marker(&mut self, producer_id: i64, commit: bool) {
        self.offsets.complete(producer_id, commit);
    }

    /// Ends loading (Kafka's `onLoaded`): every loaded member's session starts now; a group above
    /// `group.max.size` (the setting may have shrunk) rebalances.
    pub fn complete_load(&mut self, now_ms: i64) -> Vec<Effect> {
        let mut out = Vec::new();
        // A consumer group's offsets replay as a simple group's: the consumer group owns them.
        let consumer_groups = &self.consumer_groups;
        self.groups
            .retain(|id, g| !(g.members.is_empty() && consumer_groups.contains_key(id)));
        self.start_consumer_sessions(now_ms);
        let mut ids: Vec<String> = self.groups.keys().cloned().collect();
        ids.sort();
        for id in ids {
            let g = self.groups.get_mut(&id).expect("listed above");
            let mut cx = Cx {
                now: now_ms,
                config: &self.config,
                timers: &mut self.timers,
                appends: &mut self.appends,
                out: &mut out,
            };
            let sessions: Vec<(String, i32)> = g
                .members
                .values()
                .map(|m| (m.member_id.clone(), m.session_timeout_ms))
                .collect();
            for (member, session) in sessions {
                cx.schedule_heartbeat(&id, &member, session);
            }
            tracing::info!(group = %id, members = g.members.len(), generation = g.generation_id, state = %g.state, "loaded group");
            if g.loaded_without_assignment {
                // Its members may hold this generation from their JoinGroups, but no assignment
                // of it was stored: they must join again.
                rebalance::prepare_rebalance(
                    g,
                    &mut cx,
                    "loaded a generation whose assignment was never stored",
                );
            } else if g.members.len() > cx.config.max_size {
                rebalance::prepare_rebalance(g, &mut cx, "loaded group is over group.max.size");
            }
        }
        out
    }

    /// Gives the partition up (leadership moved): every parked request and every response waiting
    /// for an append is answered with NOT_COORDINATOR, so clients find the new coordinator, and
    /// all state is dropped.
    pub fn unload(&mut self) -> Vec<Effect> {
        let mut out = Vec::new();
        let not_coordinator = ResponseError::NotCoordinator;
        let mut ids: Vec<String> = self.groups.keys().cloned().collect();
        ids.sort();
        for id in ids {
            let g = self.groups.get_mut(&id).expect("listed above");
            for m in g.members.values_mut() {
                if let Some(request_id) = m.awaiting_join.take() {
                    out.push(Effect::Respond {
                        request_id,
                        response: join_error(&m.member_id, not_coordinator),
                    });
                }
                if let Some(request_id) = m.awaiting_sync.take() {
                    out.push(Effect::Respond {
                        request_id,
                        response: sync_error(not_coordinator),
                    });
                }
            }
            tracing::info!(group = %id, generation = g.generation_id, "unloading group");
        }
        for (_, pending) in std::mem::take(&mut self.appends.pending) {
            let (request_id, response) = match pending {
                PendingAppend::OffsetCommit {
                    request_id,
                    mut response,
                    ..
                } => {
                    for t in &mut response.topics {
                        for p in &mut t.partitions {
                            p.error = Some(not_coordinator);
                        }
                    }
                    (request_id, Response::OffsetCommit(response))
                }
                PendingAppend::TxnOffsetCommit(mut c) => {
                    for p in c.response.topics.iter_mut().flat_map(|t| &mut t.partitions) {
                        p.error = Some(not_coordinator);
                    }
                    (c.request_id, Response::TxnOffsetCommit(c.response))
                }
                PendingAppend::DeleteGroups(mut d) => {
                    for r in &mut d.response.results {
                        r.error.get_or_insert(not_coordinator);
                    }
                    (d.request_id, Response::DeleteGroups(d.response))
                }
                PendingAppend::OffsetDelete { request_id, .. } => {
                    let response = OffsetDeleteResponse {
                        error: Some(not_coordinator),
                        topics: Vec::new(),
                    };
                    (request_id, Response::OffsetDelete(response))
                }
                // A static rejoin's and a new generation's JoinGroups are parked on their members
                // and were answered above.
                PendingAppend::ConsumerGroup {
                    request_id: Some(request_id),
                    ..
                } => {
                    let code = not_coordinator.code();
                    let response = ConsumerGroupHeartbeatResponse {
                        error_code: code,
                        ..Default::default()
                    };
                    (request_id, Response::ConsumerGroupHeartbeat(response))
                }
                PendingAppend::ConsumerGroup { .. }
                | PendingAppend::StaticRejoin(_)
                | PendingAppend::Generation { .. }
                | PendingAppend::Sync { .. }
                | PendingAppend::GroupMetadata { .. }
                | PendingAppend::ExpiredOffsets { .. } => continue,
            };
            out.push(Effect::Respond {
                request_id,
                response,
            });
        }
        self.groups.clear();
        self.consumer_groups.clear();
        self.consumer_dirty.clear();
        self.offsets.clear();
        self.timers.clear();
        out
    }
}

fn group_from_record(
    group_id: String,
    v: records::GroupMetadataValue,
) -> Result<Group, ReplayError> {
    let mut g = Group::new(group_id.clone(), v.current_state_timestamp);
    g.state_timestamp = (v.current_state_timestamp >= 0).then_some(v.current_state_timestamp);
    g.generation_id = v.generation;
    g.protocol_type = (!v.protocol_type.is_empty()).then_some(v.protocol_type.clone());
    g.protocol_name = v.protocol.clone();
    if !v.members.is_empty() {
        let Some(protocol) = v.protocol.clone() else {
            return Err(ReplayError::MembersWithoutProtocol { group: group_id });
        };
        g.state = GroupState::Stable;
        for m in v.members {
            g.add(Member {
                member_id: m.member_id,
                group_instance_id: m.group_instance_id,
                client_id: m.client_id,
                client_host: m.client_host,
                // Version 0 records have no rebalance timeout: Kafka uses the session timeout.
                rebalance_timeout_ms: if m.rebalance_timeout == -1 {
                    m.session_timeout
                } else {
                    m.rebalance_timeout
                },
                session_timeout_ms: m.session_timeout,
                protocol_type: v.protocol_type.clone(),
                // Only the chosen protocol's metadata is persisted.
                protocols: vec![JoinProtocol {
                    name: protocol.clone(),
                    metadata: m.subscription,
                }],
                assignment: if m.assignment.is_empty() {
                    Bytes::new()
                } else {
                    m.assignment
                },
                awaiting_join: None,
                awaiting_sync: None,
                is_new: false,
            });
        }
    }
    // Only the record of a generation stored before its assignment has members and no leader.
    g.loaded_without_assignment = !g.members.is_empty() && v.leader.is_none();
    // `add` made the first member leader; the record says who leads.
    g.leader_id = v.leader.filter(|l| g.has_member(l)).or(g.leader_id);
    Ok(g)
}
