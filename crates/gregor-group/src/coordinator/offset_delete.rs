//! OffsetDelete (KIP-496): a group's committed offsets of some partitions are removed, except
//! those of topics the group is subscribed to (GROUP_SUBSCRIBED_TO_TOPIC), which its members may
//! still be using. The tombstones are written before the offsets leave memory and before the
//! answer goes out.

use std::collections::BTreeSet;

use super::offsets::offset_tombstone;
use super::state::{GroupCoordinator, PendingAppend};
use crate::api::*;
use crate::effect::Effect;
use crate::group::GroupState;

/// The classic protocol type whose members' metadata are consumer subscriptions.
const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

impl GroupCoordinator {
    pub(super) fn offset_delete(
        &mut self,
        now_ms: i64,
        request_id: RequestId,
        req: OffsetDeleteRequest,
        out: &mut Vec<Effect>,
    ) {
        let subscribed = match self.subscribed_topics(&req.group_id) {
            Ok(s) => s,
            Err(error) => {
                let response = OffsetDeleteResponse {
                    error: Some(error),
                    topics: Vec::new(),
                };
                return respond(out, request_id, response);
            }
        };
        let mut response = OffsetDeleteResponse::default();
        let mut tombstones = Vec::new();
        let mut partitions = Vec::new();
        for (topic, ps) in &req.topics {
            let refused = subscribed.contains(topic);
            let mut answers = Vec::new();
            for &p in ps {
                if refused {
                    answers.push((p, Some(ResponseError::GroupSubscribedToTopic)));
                    continue;
                }
                if self.offsets.get(&req.group_id, topic, p).is_some() {
                    tombstones.push(offset_tombstone(&req.group_id, topic, p));
                    partitions.push((topic.clone(), p));
                }
                answers.push((p, None));
            }
            response.topics.push((topic.clone(), answers));
        }
        if tombstones.is_empty() {
            return respond(out, request_id, response);
        }
        tracing::info!(group = %req.group_id, offsets = partitions.len(), "deleting offsets");
        let then = PendingAppend::OffsetDelete {
            request_id,
            group_id: req.group_id,
            partitions,
            response,
        };
        let mut cx = Self::cx(
            now_ms,
            &self.config,
            &mut self.timers,
            &mut self.appends,
            out,
        );
        cx.append(tombstones, then);
    }

    /// The topics group `id` is subscribed to, whose offsets stay; or why none of its offsets
    /// can be deleted.
    fn subscribed_topics(&self, id: &str) -> Result<BTreeSet<String>, ResponseError> {
        if let Some(g) = self.consumer_groups.get(id) {
            let by_regex = g.resolved.regex_topics.values().flatten();
            let names = g.subscriptions.names.keys().chain(by_regex);
            return Ok(names.cloned().collect());
        }
        let Some(g) = self.groups.get(id) else {
            return match self.offsets.partitions(id).is_empty() {
                true => Err(ResponseError::GroupIdNotFound),
                false => Ok(BTreeSet::new()),
            };
        };
        let consumer = g.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE);
        match g.state {
            GroupState::Dead => Err(ResponseError::GroupIdNotFound),
            GroupState::Empty => Ok(BTreeSet::new()),
            // Not consumers: what their members use is unknown, so nothing may go.
            _ if !consumer => Err(ResponseError::NonEmptyGroup),
            _ => Ok(classic_subscriptions(g)),
        }
    }

    pub(super) fn offset_delete_appended(
        &mut self,
        request_id: RequestId,
        group_id: &str,
        partitions: Vec<(String, i32)>,
        mut response: OffsetDeleteResponse,
        result: Result<(), ResponseError>,
        out: &mut Vec<Effect>,
    ) {
        match result {
            Ok(()) => {
                for (topic, p) in &partitions {
                    self.offsets.remove(group_id, topic, *p);
                }
            }
            Err(error) => {
                tracing::warn!(group = %group_id, %error, "failed to persist offset deletion");
                response = OffsetDeleteResponse {
                    error: Some(error),
                    topics: Vec::new(),
                };
            }
        }
        respond(out, request_id, response);
    }
}

/// The topics a classic consumer group's members subscribe to, from their protocol metadata
/// for the group's chosen protocol (a member whose metadata does not decode adds none).
fn classic_subscriptions(g: &crate::group::Group) -> BTreeSet<String> {
    let Some(protocol) = g.protocol_name.as_deref() else {
        return BTreeSet::new();
    };
    g.members
        .values()
        .filter_map(|m| gregor_assign::protocol::decode_subscription(&m.metadata(protocol)).ok())
        .flat_map(|(_, s)| s.topics)
        .collect()
}

fn respond(out: &mut Vec<Effect>, request_id: RequestId, response: OffsetDeleteResponse) {
    out.push(Effect::Respond {
        request_id,
        response: Response::OffsetDelete(response),
    });
}
