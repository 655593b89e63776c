//! KIP-848 consumer groups in the admin APIs: ConsumerGroupDescribe, and their part of
//! ListGroups and DeleteGroups.

use super::consumer::changes;
use super::state::GroupCoordinator;
use crate::api::*;
use crate::consumer::heartbeat::pick_assignor;
use crate::consumer::model::{ConsumerGroup, ConsumerMember};
use crate::effect::Record;

/// How ListGroups shows a consumer group's type and protocol type.
pub(super) const CONSUMER_TYPE: &str = "consumer";

fn describe_member(g: &ConsumerGroup, m: &ConsumerMember) -> DescribedConsumerMember {
    DescribedConsumerMember {
        member_id: m.member_id.clone(),
        instance_id: m.instance_id.clone(),
        rack_id: m.subscription.rack.clone(),
        member_epoch: m.member_epoch,
        client_id: m.client_id.clone(),
        client_host: m.client_host.clone(),
        subscribed_topic_names: m.subscription.topic_names.iter().cloned().collect(),
        subscribed_topic_regex: m.subscription.topic_regex.clone(),
        assignment: m.assigned.clone(),
        target_assignment: g.target.get(&m.member_id).cloned().unwrap_or_default(),
    }
}

impl GroupCoordinator {
    pub(super) fn consumer_group_describe(
        &self,
        req: &ConsumerGroupDescribeRequest,
    ) -> ConsumerGroupDescribeResponse {
        let groups = req
            .group_ids
            .iter()
            .map(|id| self.describe_one(id))
            .collect();
        ConsumerGroupDescribeResponse { groups }
    }

    fn describe_one(&self, id: &str) -> DescribedConsumerGroup {
        let Some(g) = self.consumer_groups.get(id) else {
            let message = match self.groups.contains_key(id) {
                true => format!("Group {id} is not a consumer group."),
                false => format!("Group {id} not found."),
            };
            return DescribedConsumerGroup {
                error_code: ResponseError::GroupIdNotFound.code(),
                error_message: Some(message),
                group_id: id.to_string(),
                ..Default::default()
            };
        };
        DescribedConsumerGroup {
            error_code: 0,
            error_message: None,
            group_id: id.to_string(),
            group_state: g.state().name().to_string(),
            group_epoch: g.group_epoch,
            assignment_epoch: g.target_epoch,
            assignor_name: pick_assignor(g, &self.consumer_config(&g.group_id))
                .name()
                .to_string(),
            members: g.members.values().map(|m| describe_member(g, m)).collect(),
        }
    }

    /// The consumer groups ListGroups shows for `states` (lower case; empty: all).
    pub(super) fn list_consumer_groups(&self, states: &[String]) -> Vec<ListedGroup> {
        self.consumer_groups
            .values()
            .map(|g| (g, g.state().name()))
            .filter(|(_, s)| states.is_empty() || states.contains(&s.to_lowercase()))
            .map(|(g, s)| ListedGroup {
                group_id: g.group_id.clone(),
                protocol_type: CONSUMER_TYPE.to_string(),
                group_state: s.to_string(),
                group_type: CONSUMER_TYPE.to_string(),
            })
            .collect()
    }

    /// DeleteGroups of a consumer group: `Some(error)` when it cannot go (it has members),
    /// `Some(None)` when it can, `None` when `id` is not a consumer group.
    pub(super) fn consumer_group_deletable(&self, id: &str) -> Option<Option<ResponseError>> {
        let g = self.consumer_groups.get(id)?;
        Some(match g.members.is_empty() {
            true => None,
            false => Some(ResponseError::NonEmptyGroup),
        })
    }

    /// Removes an empty consumer group at once (a heartbeat after this starts a new one, whose
    /// records follow these tombstones); returns the group and its records' tombstones.
    pub(super) fn take_consumer_group(&mut self, id: &str) -> Option<(ConsumerGroup, Vec<Record>)> {
        let g = self.consumer_groups.remove(id)?;
        self.consumer_dirty.remove(id);
        let tombstones = changes(id, Some(&g), None);
        Some((g, tombstones))
    }

    /// A failed DeleteGroups write: the log still holds the group, so it is back, unless a new
    /// group of that id began meanwhile; its next write is whole.
    pub(super) fn restore_consumer_group(&mut self, g: ConsumerGroup) {
        let id = g.group_id.clone();
        if !self.consumer_groups.contains_key(&id) {
            self.consumer_groups.insert(id.clone(), g);
        }
        self.consumer_dirty.insert(id);
    }
}
