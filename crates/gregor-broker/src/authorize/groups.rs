//! FindCoordinator (DESCRIBE on the group or transactional id) and the group APIs: READ on the
//! group to join, sync, heartbeat (classic or KIP-848), leave or commit (and READ on each committed
//! topic, DESCRIBE on each topic a KIP-848 member subscribes to by name), DESCRIBE to fetch
//! offsets (of the topics it may DESCRIBE) or describe it, DELETE to delete it; ListGroups lists
//! the groups it may DESCRIBE, or all with DESCRIBE on the cluster.

use std::collections::BTreeSet;

use gregor_meta::acl::{AclOperation, AclResourceType, CLUSTER_RESOURCE_NAME};
use kafka_protocol::messages::consumer_group_describe_response::DescribedGroup as ConsumerDescribedGroup;
use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::describe_groups_response::DescribedGroup;
use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::offset_fetch_response::OffsetFetchResponseGroup;
use kafka_protocol::messages::{
    ApiKey, BrokerId, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, FindCoordinatorRequest, FindCoordinatorResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, RequestKind, ResponseKind,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, ConsumerGroupDescribeResponse, ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse, OffsetDeleteRequest, OffsetDeleteResponse,
};
use kafka_protocol::ResponseError;

use super::common::{no_fixup, on_response, run_unless_empty, s, split, Decide, Gate};
use crate::connection::Reply;
use crate::group_wire;

const GROUP_AUTHORIZATION_FAILED: ResponseError = ResponseError::GroupAuthorizationFailed;

pub(super) fn gate(d: &dyn Decide, api: ApiKey, version: i16, request: RequestKind) -> Gate {
    let group_read = |group: &str| d.allows(AclOperation::Read, AclResourceType::Group, group);
    let allowed = match &request {
        RequestKind::FindCoordinator(_) => None,
        RequestKind::JoinGroup(r) => Some(group_read(&r.group_id)),
        RequestKind::SyncGroup(r) => Some(group_read(&r.group_id)),
        RequestKind::OffsetDelete(r) => {
            Some(d.allows(AclOperation::Delete, AclResourceType::Group, &r.group_id))
        }
        RequestKind::Heartbeat(r) => Some(group_read(&r.group_id)),
        RequestKind::LeaveGroup(r) => Some(group_read(&r.group_id)),
        RequestKind::OffsetCommit(r) => Some(group_read(&r.group_id)),
        RequestKind::ConsumerGroupHeartbeat(r) => Some(group_read(&r.group_id)),
        RequestKind::OffsetFetch(r) if version < 8 => {
            Some(d.allows(AclOperation::Describe, AclResourceType::Group, &r.group_id))
        }
        _ => None,
    };
    if allowed == Some(false) {
        let answer = group_wire::error_response(api, version, &request, GROUP_AUTHORIZATION_FAILED);
        return Gate::Answer(answer.map_or(Reply::Close, Reply::Respond));
    }
    match request {
        RequestKind::FindCoordinator(r) => find_coordinator(d, r, version),
        RequestKind::OffsetCommit(r) => offset_commit(d, r),
        RequestKind::OffsetFetch(r) => offset_fetch(d, r, version),
        RequestKind::DescribeGroups(r) => describe_groups(d, r),
        RequestKind::ConsumerGroupHeartbeat(r) => consumer_group_heartbeat(d, r),
        RequestKind::ConsumerGroupDescribe(r) => consumer_group_describe(d, r),
        RequestKind::DeleteGroups(r) => delete_groups(d, r),
        RequestKind::OffsetDelete(r) => offset_delete(d, r),
        r @ RequestKind::ListGroups(_) => Gate::Run(r, on_response(list_groups_visible)),
        other => Gate::Run(other, no_fixup()),
    }
}

/// FindCoordinator: DESCRIBE on each group key (GROUP_AUTHORIZATION_FAILED) or transactional
/// id key (TRANSACTIONAL_ID_AUTHORIZATION_FAILED).
fn find_coordinator(d: &dyn Decide, mut r: FindCoordinatorRequest, version: i16) -> Gate {
    let (resource_type, error) = if r.key_type == 1 {
        (
            AclResourceType::TransactionalId,
            ResponseError::TransactionalIdAuthorizationFailed,
        )
    } else {
        (AclResourceType::Group, GROUP_AUTHORIZATION_FAILED)
    };
    let refusal = |key: &str| {
        let mut c = Coordinator::default();
        c.key = s(key);
        c.node_id = BrokerId(-1);
        c.port = -1;
        c.error_code = error.code();
        c
    };
    if version < 4 {
        if d.allows(AclOperation::Describe, resource_type, &r.key) {
            return Gate::Run(RequestKind::FindCoordinator(r), no_fixup());
        }
        let mut resp = FindCoordinatorResponse::default();
        resp.error_code = error.code();
        resp.node_id = BrokerId(-1);
        resp.port = -1;
        return Gate::Answer(Reply::Respond(ResponseKind::FindCoordinator(resp)));
    }
    let keys = std::mem::take(&mut r.coordinator_keys);
    let (kept, refused) = split(d, AclOperation::Describe, resource_type, keys, |k| {
        k.as_str()
    });
    let answers: Vec<Coordinator> = refused.iter().map(|k| refusal(k)).collect();
    r.coordinator_keys = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::FindCoordinator(mut resp) => {
            resp.coordinators.extend(answers);
            ResponseKind::FindCoordinator(resp)
        }
        other => other,
    });
    let empty = ResponseKind::FindCoordinator(FindCoordinatorResponse::default());
    let nothing_left = r.coordinator_keys.is_empty();
    run_unless_empty(
        d,
        nothing_left,
        RequestKind::FindCoordinator(r),
        empty,
        fixup,
    )
}

/// OffsetCommit (READ on the group checked already): READ on each topic.
fn offset_commit(d: &dyn Decide, mut r: OffsetCommitRequest) -> Gate {
    let topics = std::mem::take(&mut r.topics);
    let (kept, refused) = split(d, AclOperation::Read, AclResourceType::Topic, topics, |t| {
        t.name.0.as_str()
    });
    let answers: Vec<OffsetCommitResponseTopic> = refused
        .iter()
        .map(|t| {
            let mut out = OffsetCommitResponseTopic::default();
            out.name = t.name.clone();
            out.topic_id = t.topic_id;
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut a = OffsetCommitResponsePartition::default();
                    a.partition_index = p.partition_index;
                    a.error_code = ResponseError::TopicAuthorizationFailed.code();
                    a
                })
                .collect();
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::OffsetCommit(mut resp) => {
            resp.topics.extend(answers);
            ResponseKind::OffsetCommit(resp)
        }
        other => other,
    });
    let empty = ResponseKind::OffsetCommit(OffsetCommitResponse::default());
    let nothing_left = r.topics.is_empty();
    run_unless_empty(d, nothing_left, RequestKind::OffsetCommit(r), empty, fixup)
}

/// OffsetDelete: (DELETE on the group, checked already) READ on each topic, else its
/// partitions are answered TOPIC_AUTHORIZATION_FAILED.
fn offset_delete(d: &dyn Decide, mut r: OffsetDeleteRequest) -> Gate {
    let topics = std::mem::take(&mut r.topics);
    let (kept, refused) = split(d, AclOperation::Read, AclResourceType::Topic, topics, |t| {
        t.name.0.as_str()
    });
    let answers: Vec<OffsetDeleteResponseTopic> = refused
        .iter()
        .map(|t| {
            let mut out = OffsetDeleteResponseTopic::default();
            out.name = t.name.clone();
            out.partitions = t
                .partitions
                .iter()
                .map(|p| {
                    let mut a = OffsetDeleteResponsePartition::default();
                    a.partition_index = p.partition_index;
                    a.error_code = ResponseError::TopicAuthorizationFailed.code();
                    a
                })
                .collect();
            out
        })
        .collect();
    r.topics = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::OffsetDelete(mut resp) => {
            resp.topics.extend(answers);
            ResponseKind::OffsetDelete(resp)
        }
        other => other,
    });
    let empty = ResponseKind::OffsetDelete(OffsetDeleteResponse::default());
    let nothing_left = r.topics.is_empty();
    run_unless_empty(d, nothing_left, RequestKind::OffsetDelete(r), empty, fixup)
}

/// OffsetFetch: DESCRIBE on each group (v8+: per group; before, checked already), and the
/// offsets of topics it may not DESCRIBE are hidden: left out of an all-topics answer,
/// TOPIC_AUTHORIZATION_FAILED for a topic it named.
fn offset_fetch(d: &dyn Decide, mut r: OffsetFetchRequest, version: i16) -> Gate {
    let mut refused_groups = Vec::new();
    let all_topics: BTreeSet<String> = if version >= 8 {
        let groups = std::mem::take(&mut r.groups);
        let (kept, refused) = split(
            d,
            AclOperation::Describe,
            AclResourceType::Group,
            groups,
            |g| g.group_id.0.as_str(),
        );
        r.groups = kept;
        refused_groups = refused
            .into_iter()
            .map(|g| {
                let mut out = OffsetFetchResponseGroup::default();
                out.group_id = g.group_id;
                out.error_code = GROUP_AUTHORIZATION_FAILED.code();
                out
            })
            .collect();
        r.groups
            .iter()
            .filter(|g| g.topics.is_none())
            .map(|g| g.group_id.0.to_string())
            .collect()
    } else {
        BTreeSet::new()
    };
    let top_level_all = version < 8 && r.topics.is_none();
    let fixup = on_response(move |d, resp| match resp {
        ResponseKind::OffsetFetch(mut resp) => {
            hide_offsets(d, &mut resp, top_level_all, &all_topics);
            resp.groups.extend(refused_groups);
            ResponseKind::OffsetFetch(resp)
        }
        other => other,
    });
    let nothing_left = version >= 8 && r.groups.is_empty();
    let empty = ResponseKind::OffsetFetch(OffsetFetchResponse::default());
    run_unless_empty(d, nothing_left, RequestKind::OffsetFetch(r), empty, fixup)
}

/// What an OffsetFetch answer shows of a topic the requester may not DESCRIBE.
/// `top_level_all`: a request before v8 for all of its group's topics; `all_topics`: the
/// groups of a v8+ request that asked for all their topics.
fn hide_offsets(
    d: &dyn Decide,
    resp: &mut OffsetFetchResponse,
    top_level_all: bool,
    all_topics: &BTreeSet<String>,
) {
    let visible = |t: &str, quietly: bool| {
        if quietly {
            d.allows_quietly(AclOperation::Describe, AclResourceType::Topic, t)
        } else {
            d.allows(AclOperation::Describe, AclResourceType::Topic, t)
        }
    };
    let refused = ResponseError::TopicAuthorizationFailed.code();
    // Before v8: one group, at the top level.
    resp.topics
        .retain(|t| !top_level_all || visible(&t.name.0, true));
    for t in resp
        .topics
        .iter_mut()
        .filter(|t| !visible(&t.name.0, false))
    {
        for p in &mut t.partitions {
            (p.committed_offset, p.committed_leader_epoch) = (-1, -1);
            p.metadata = Some(s(""));
            p.error_code = refused;
        }
    }
    for g in &mut resp.groups {
        let all = all_topics.contains(g.group_id.0.as_str());
        g.topics.retain(|t| !all || visible(&t.name.0, true));
        for t in g.topics.iter_mut().filter(|t| !visible(&t.name.0, false)) {
            for p in &mut t.partitions {
                (p.committed_offset, p.committed_leader_epoch) = (-1, -1);
                p.metadata = Some(s(""));
                p.error_code = refused;
            }
        }
    }
}

/// DescribeGroups: DESCRIBE on each group; KIP-430's authorized operations when asked.
fn describe_groups(d: &dyn Decide, mut r: DescribeGroupsRequest) -> Gate {
    let with_operations = r.include_authorized_operations;
    let groups = std::mem::take(&mut r.groups);
    let (kept, refused) = split(
        d,
        AclOperation::Describe,
        AclResourceType::Group,
        groups,
        |g| g.0.as_str(),
    );
    let answers: Vec<DescribedGroup> = refused
        .into_iter()
        .map(|g| {
            let mut out = DescribedGroup::default();
            out.group_id = g;
            out.error_code = GROUP_AUTHORIZATION_FAILED.code();
            out
        })
        .collect();
    r.groups = kept;
    let fixup = on_response(move |d, resp| match resp {
        ResponseKind::DescribeGroups(mut resp) => {
            if with_operations {
                for g in &mut resp.groups {
                    g.authorized_operations =
                        d.authorized_operations(AclResourceType::Group, &g.group_id.0);
                }
            }
            resp.groups.extend(answers);
            ResponseKind::DescribeGroups(resp)
        }
        other => other,
    });
    let empty = ResponseKind::DescribeGroups(DescribeGroupsResponse::default());
    let nothing_left = r.groups.is_empty();
    run_unless_empty(
        d,
        nothing_left,
        RequestKind::DescribeGroups(r),
        empty,
        fixup,
    )
}

/// ConsumerGroupHeartbeat (after READ on the group): DESCRIBE on every topic named in the
/// subscription, else TOPIC_AUTHORIZATION_FAILED naming them, as Kafka answers.
fn consumer_group_heartbeat(d: &dyn Decide, r: ConsumerGroupHeartbeatRequest) -> Gate {
    let refused: Vec<&str> = r
        .subscribed_topic_names
        .iter()
        .flatten()
        .map(|t| t.0.as_str())
        .filter(|t| !d.allows(AclOperation::Describe, AclResourceType::Topic, t))
        .collect();
    if refused.is_empty() {
        return Gate::Run(RequestKind::ConsumerGroupHeartbeat(r), no_fixup());
    }
    let mut out = ConsumerGroupHeartbeatResponse::default();
    out.error_code = ResponseError::TopicAuthorizationFailed.code();
    out.error_message = Some(s(format!(
        "The member is not authorized to describe topics {}.",
        refused.join(", ")
    )));
    Gate::Answer(Reply::Respond(ResponseKind::ConsumerGroupHeartbeat(out)))
}

/// ConsumerGroupDescribe: DESCRIBE on each group; KIP-430's authorized operations when asked.
fn consumer_group_describe(d: &dyn Decide, mut r: ConsumerGroupDescribeRequest) -> Gate {
    let with_operations = r.include_authorized_operations;
    let groups = std::mem::take(&mut r.group_ids);
    let (kept, refused) = split(
        d,
        AclOperation::Describe,
        AclResourceType::Group,
        groups,
        |g| g.0.as_str(),
    );
    let answers: Vec<ConsumerDescribedGroup> = refused
        .into_iter()
        .map(|g| {
            let mut out = ConsumerDescribedGroup::default();
            out.group_id = g;
            out.error_code = GROUP_AUTHORIZATION_FAILED.code();
            out.authorized_operations = i32::MIN;
            out
        })
        .collect();
    r.group_ids = kept;
    let fixup = on_response(move |d, resp| match resp {
        ResponseKind::ConsumerGroupDescribe(mut resp) => {
            if with_operations {
                for g in resp.groups.iter_mut().filter(|g| g.error_code == 0) {
                    g.authorized_operations =
                        d.authorized_operations(AclResourceType::Group, &g.group_id.0);
                }
            }
            resp.groups.extend(answers);
            ResponseKind::ConsumerGroupDescribe(resp)
        }
        other => other,
    });
    let empty = ResponseKind::ConsumerGroupDescribe(ConsumerGroupDescribeResponse::default());
    let nothing_left = r.group_ids.is_empty();
    let request = RequestKind::ConsumerGroupDescribe(r);
    run_unless_empty(d, nothing_left, request, empty, fixup)
}

/// DeleteGroups: DELETE on each group.
fn delete_groups(d: &dyn Decide, mut r: DeleteGroupsRequest) -> Gate {
    let groups = std::mem::take(&mut r.groups_names);
    let (kept, refused) = split(
        d,
        AclOperation::Delete,
        AclResourceType::Group,
        groups,
        |g| g.0.as_str(),
    );
    let answers: Vec<DeletableGroupResult> = refused
        .into_iter()
        .map(|g| {
            let mut out = DeletableGroupResult::default();
            out.group_id = g;
            out.error_code = GROUP_AUTHORIZATION_FAILED.code();
            out
        })
        .collect();
    r.groups_names = kept;
    let fixup = on_response(move |_, resp| match resp {
        ResponseKind::DeleteGroups(mut resp) => {
            resp.results.extend(answers);
            ResponseKind::DeleteGroups(resp)
        }
        other => other,
    });
    let empty = ResponseKind::DeleteGroups(DeleteGroupsResponse::default());
    let nothing_left = r.groups_names.is_empty();
    run_unless_empty(d, nothing_left, RequestKind::DeleteGroups(r), empty, fixup)
}

/// ListGroups: every group with DESCRIBE on the cluster, else those it may DESCRIBE.
fn list_groups_visible(d: &dyn Decide, resp: ResponseKind) -> ResponseKind {
    match resp {
        ResponseKind::ListGroups(mut resp) => {
            let all = d.allows_quietly(
                AclOperation::Describe,
                AclResourceType::Cluster,
                CLUSTER_RESOURCE_NAME,
            );
            if !all {
                resp.groups.retain(|g| {
                    d.allows_quietly(
                        AclOperation::Describe,
                        AclResourceType::Group,
                        &g.group_id.0,
                    )
                });
            }
            ResponseKind::ListGroups(resp)
        }
        other => other,
    }
}
