//! DescribeGroups, ListGroups and DeleteGroups.

use std::collections::BTreeSet;

use super::consumer_admin::CONSUMER_TYPE;
use super::offsets::offset_tombstone;
use super::state::{DeletingGroups, GroupCoordinator, PendingAppend};
use crate::api::*;
use crate::effect::{Effect, Record};
use crate::group::GroupState;
use crate::records::{self, RecordKey};

impl GroupCoordinator {
    pub(super) fn describe_groups(&self, req: &DescribeGroupsRequest) -> DescribeGroupsResponse {
        let groups = req
            .group_ids
            .iter()
            .map(|id| match self.groups.get(id) {
                // Kafka describes an unknown group as Dead, without an error.
                None => DescribedGroup {
                    error: None,
                    group_id: id.clone(),
                    group_state: GroupState::Dead.name().to_string(),
                    ..Default::default()
                },
                Some(g) => {
                    // Member metadata is only meaningful once the protocol is settled.
                    let stable_protocol = g
                        .protocol_name
                        .as_deref()
                        .filter(|_| g.is(GroupState::Stable));
                    DescribedGroup {
                        error: None,
                        group_id: id.clone(),
                        group_state: g.state.name().to_string(),
                        protocol_type: g.protocol_type.clone().unwrap_or_default(),
                        protocol_data: stable_protocol.unwrap_or_default().to_string(),
                        members: g
                            .members
                            .values()
                            .map(|m| DescribedMember {
                                member_id: m.member_id.clone(),
                                group_instance_id: m.group_instance_id.clone(),
                                client_id: m.client_id.clone(),
                                client_host: m.client_host.clone(),
                                member_metadata: stable_protocol
                                    .map(|p| m.metadata(p))
                                    .unwrap_or_default(),
                                member_assignment: m.assignment.clone(),
                            })
                            .collect(),
                    }
                }
            })
            .collect();
        DescribeGroupsResponse { groups }
    }

    pub(super) fn list_groups(&self, req: &ListGroupsRequest) -> ListGroupsResponse {
        let states: Vec<String> = req
            .states_filter
            .iter()
            .map(|s| s.trim().to_lowercase())
            .collect();
        let wants = |kind: &str| {
            req.types_filter.is_empty()
                || req
                    .types_filter
                    .iter()
                    .any(|t| t.trim().eq_ignore_ascii_case(kind))
        };
        let mut groups: Vec<ListedGroup> = Vec::new();
        if wants("classic") {
            groups.extend(
                self.groups
                    .values()
                    .filter(|g| {
                        states.is_empty() || states.contains(&g.state.name().to_lowercase())
                    })
                    .map(|g| ListedGroup {
                        group_id: g.group_id.clone(),
                        protocol_type: g.protocol_type.clone().unwrap_or_default(),
                        group_state: g.state.name().to_string(),
                        group_type: "classic".to_string(),
                    }),
            );
        }
        if wants(CONSUMER_TYPE) {
            groups.extend(self.list_consumer_groups(&states));
        }
        groups.sort_by(|a, b| a.group_id.cmp(&b.group_id));
        ListGroupsResponse {
            error: None,
            groups,
        }
    }

    pub(super) fn delete_groups(
        &mut self,
        now: i64,
        request_id: RequestId,
        req: DeleteGroupsRequest,
        out: &mut Vec<Effect>,
    ) {
        let mut response = DeleteGroupsResponse::default();
        let mut records = Vec::new();
        let mut deleting = Vec::new();
        let mut consumer_groups = Vec::new();
        for id in req.group_ids {
            let error = match (
                self.groups.get(&id).map(|g| g.state),
                self.consumer_group_deletable(&id),
            ) {
                (_, Some(e)) => e,
                (None | Some(GroupState::Dead), None) => Some(ResponseError::GroupIdNotFound),
                (Some(GroupState::Empty), None) => None,
                (Some(_), None) => Some(ResponseError::NonEmptyGroup),
            };
            if error.is_none() && !deleting.contains(&id) {
                let offsets = self.offset_tombstones(&id);
                tracing::info!(group = %id, offsets = offsets.len(), "deleting group");
                records.extend(offsets);
                if let Some((g, tombstones)) = self.take_consumer_group(&id) {
                    records.extend(tombstones);
                    consumer_groups.push(g);
                }
                // For a consumer group too: its offsets replay as a simple group's, which
                // this ends.
                records.push(self.kill_classic_group(now, &id));
                deleting.push(id.clone());
            }
            response.results.push(DeletableGroupResult {
                group_id: id,
                error,
            });
        }
        if records.is_empty() {
            out.push(Effect::Respond {
                request_id,
                response: Response::DeleteGroups(response),
            });
            return;
        }
        let then = PendingAppend::DeleteGroups(DeletingGroups {
            request_id,
            group_ids: deleting,
            consumer_groups,
            response,
        });
        Self::cx(now, &self.config, &mut self.timers, &mut self.appends, out).append(records, then);
    }

    /// Tombstones for every committed offset of a group being deleted, and for commits still
    /// in flight: their records precede these in the log, so they must be deleted too.
    fn offset_tombstones(&self, id: &str) -> Vec<Record> {
        let mut partitions: BTreeSet<(String, i32)> =
            self.offsets.partitions(id).into_iter().collect();
        for pending in self.appends.pending.values() {
            if let PendingAppend::OffsetCommit {
                group_id, offsets, ..
            } = pending
            {
                if group_id == id {
                    partitions.extend(offsets.iter().map(|(t, p, _)| (t.clone(), *p)));
                }
            }
        }
        // Offsets of open transactions go too (a tombstone removes them, as in Kafka), so a
        // later commit marker cannot bring them back.
        partitions.extend(self.offsets.pending_partitions(id));
        partitions.extend(self.txn_commits_in_flight(id));
        partitions
            .iter()
            .map(|(t, p)| offset_tombstone(id, t, *p))
            .collect()
    }

    /// A classic group being deleted is Dead until its tombstones are durable: joins and
    /// commits are refused meanwhile, as Kafka refuses them for a group being removed. Returns
    /// the group's tombstone.
    fn kill_classic_group(&mut self, now: i64, id: &str) -> Record {
        if let Some(g) = self.groups.get_mut(id) {
            g.transition_to(GroupState::Dead, now);
            for member in g.pending_join_members.drain() {
                self.timers
                    .cancel(&super::state::heartbeat_key(id, &member));
            }
        }
        Record {
            transactional: None,
            key: records::encode_key(&RecordKey::GroupMetadata {
                group: id.to_string(),
            }),
            value: None,
        }
    }

    pub(super) fn delete_groups_appended(
        &mut self,
        now: i64,
        deleting: DeletingGroups,
        result: Result<(), ResponseError>,
        out: &mut Vec<Effect>,
    ) {
        let DeletingGroups {
            request_id,
            group_ids,
            consumer_groups,
            mut response,
        } = deleting;
        if result.is_err() {
            for g in consumer_groups {
                self.restore_consumer_group(g);
            }
        }
        for id in &group_ids {
            let dead = self.groups.get(id).is_some_and(|g| g.is(GroupState::Dead));
            match result {
                Ok(()) => {
                    if dead {
                        self.groups.remove(id);
                    }
                    self.offsets.remove_group(id);
                }
                Err(error) => {
                    if let Some(g) = self.groups.get_mut(id).filter(|_| dead) {
                        // The log still holds the group: it is Empty again. (Kafka reverts its
                        // in-memory state to the last committed snapshot to the same effect.)
                        g.previous_state = GroupState::Dead;
                        g.state = GroupState::Empty;
                        g.state_timestamp = Some(now);
                    }
                    for r in response.results.iter_mut().filter(|r| &r.group_id == id) {
                        r.error = Some(error);
                    }
                }
            }
        }
        out.push(Effect::Respond {
            request_id,
            response: Response::DeleteGroups(response),
        });
    }
}
