//! Consumer groups: list, describe (ConsumerGroupDescribe for KIP-848 consumer groups,
//! DescribeGroups for classic ones), committed offsets (fetch, alter and delete), delete.

use std::collections::BTreeMap;

use bytes::Bytes;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::offset_fetch_request::{
    OffsetFetchRequestGroup, OffsetFetchRequestTopic, OffsetFetchRequestTopics,
};
use kafka_protocol::messages::{
    ConsumerGroupDescribeRequest, DeleteGroupsRequest, DeleteGroupsResponse, DescribeGroupsRequest,
    DescribeGroupsResponse, GroupId, ListGroupsRequest, ListGroupsResponse, OffsetCommitRequest,
    OffsetCommitResponse, OffsetFetchRequest, OffsetFetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::base::{missing_result, retry_entities, Admin, EntityResult};
use crate::client::Target;
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::metadata::BrokerNode;
use crate::types::{group_by_topic, TopicPartition};

mod consumer;
mod model;
mod offset_delete;

pub use consumer::{
    classic_candidates, consumer_group_describe_request, parse_consumer_group_describe,
};
pub use model::{GroupDescription, GroupType, MemberDescription};
pub use offset_delete::{offset_delete_request, parse_offset_delete, DeletedOffsets};

/// A group as ListGroups reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupListing {
    pub group_id: String,
    /// `consumer` for consumer groups; empty for groups that only commit offsets.
    pub protocol_type: String,
    /// From ListGroups v4.
    pub state: Option<String>,
    /// `classic` or `consumer`, from ListGroups v5.
    pub group_type: Option<String>,
}

/// A committed offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: Option<i32>,
    pub metadata: Option<String>,
}

fn group_id(g: &str) -> GroupId {
    GroupId(StrBytes::from_string(g.to_string()))
}

fn topic_name(t: &str) -> TopicName {
    TopicName(StrBytes::from_string(t.to_string()))
}

/// A ListGroups request; state and type filters need v4 and v5.
pub fn list_groups_request(
    states: &[String],
    types: &[String],
    version: i16,
) -> Result<ListGroupsRequest> {
    if !states.is_empty() && version < 4 {
        return Err(Error::InvalidArgument(format!(
            "filtering groups by state needs ListGroups v4; the broker supports v{version}"
        )));
    }
    if !types.is_empty() && version < 5 {
        return Err(Error::InvalidArgument(format!(
            "filtering groups by type needs ListGroups v5; the broker supports v{version}"
        )));
    }
    let strs = |v: &[String]| v.iter().map(|s| StrBytes::from_string(s.clone())).collect();
    let mut req = ListGroupsRequest::default();
    if version >= 4 {
        req.states_filter = strs(states);
    }
    if version >= 5 {
        req.types_filter = strs(types);
    }
    Ok(req)
}

pub fn parse_list_groups(
    resp: ListGroupsResponse,
    version: i16,
) -> Result<Vec<GroupListing>, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    Ok(resp
        .groups
        .into_iter()
        .map(|g| GroupListing {
            group_id: g.group_id.0.to_string(),
            protocol_type: g.protocol_type.to_string(),
            state: (version >= 4).then(|| g.group_state.to_string()),
            group_type: (version >= 5).then(|| g.group_type.to_string()),
        })
        .collect())
}

pub fn describe_groups_request(groups: &[String]) -> DescribeGroupsRequest {
    DescribeGroupsRequest::default().with_groups(groups.iter().map(|g| group_id(g)).collect())
}

/// Decodes a member's assignment when the group uses the consumer protocol.
fn decode_member_assignment(
    protocol_type: &str,
    bytes: &Bytes,
) -> (Vec<TopicPartition>, Option<String>) {
    if bytes.is_empty() {
        return (Vec::new(), None);
    }
    if protocol_type != gregor_assign::protocol::PROTOCOL_TYPE {
        return (
            Vec::new(),
            Some(format!(
                "protocol type '{protocol_type}' is not the consumer protocol"
            )),
        );
    }
    match gregor_assign::protocol::decode_assignment(bytes) {
        Ok((_, a)) => (
            gregor_assign::protocol::flatten(&a.partitions)
                .into_iter()
                .map(|(t, p)| TopicPartition::new(t, p))
                .collect(),
            None,
        ),
        Err(e) => (Vec::new(), Some(e.to_string())),
    }
}

/// Per-group results of DescribeGroups. `GROUP_ID_NOT_FOUND` (v6) is reported as such; older
/// brokers describe an unknown group as state `Dead` with no error.
pub fn parse_describe_groups(
    resp: DescribeGroupsResponse,
    coordinator: &BrokerNode,
) -> EntityResult<String, GroupDescription> {
    resp.groups
        .into_iter()
        .map(|g| {
            let id = g.group_id.0.to_string();
            let result = KafkaError::check(g.error_code, g.error_message.as_deref()).map(|()| {
                let protocol_type = g.protocol_type.to_string();
                GroupDescription {
                    group_id: id.clone(),
                    state: g.group_state.to_string(),
                    protocol: g.protocol_data.to_string(),
                    members: g
                        .members
                        .into_iter()
                        .map(|m| {
                            let (assignment, assignment_error) =
                                decode_member_assignment(&protocol_type, &m.member_assignment);
                            MemberDescription {
                                group_instance_id: m.group_instance_id.map(|s| s.to_string()),
                                assignment,
                                assignment_error,
                                metadata: m.member_metadata,
                                raw_assignment: m.member_assignment,
                                ..MemberDescription::new(
                                    m.member_id.to_string(),
                                    m.client_id.to_string(),
                                    m.client_host.to_string(),
                                )
                            }
                        })
                        .collect(),
                    protocol_type,
                    coordinator: coordinator.clone(),
                    group_type: GroupType::Classic,
                    group_epoch: None,
                    assignment_epoch: None,
                }
            });
            (id, result)
        })
        .collect()
}

/// An OffsetFetch request for one group: all its partitions (`None`) or the listed ones.
pub fn offset_fetch_request(
    group: &str,
    partitions: Option<&[TopicPartition]>,
    require_stable: bool,
    version: i16,
) -> Result<OffsetFetchRequest> {
    if partitions.is_none() && version < 2 {
        return Err(Error::InvalidArgument(
            "fetching all committed offsets of a group needs OffsetFetch v2".to_string(),
        ));
    }
    let grouped = partitions.map(|ps| group_by_topic(ps.iter()));
    let mut req = OffsetFetchRequest::default();
    if version >= 8 {
        let mut g = OffsetFetchRequestGroup::default().with_group_id(group_id(group));
        g.topics = grouped.map(|ts| {
            ts.into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopics::default()
                        .with_name(topic_name(&t))
                        .with_partition_indexes(ps)
                })
                .collect()
        });
        req.groups = vec![g];
    } else {
        req.group_id = group_id(group);
        req.topics = grouped.map(|ts| {
            ts.into_iter()
                .map(|(t, ps)| {
                    OffsetFetchRequestTopic::default()
                        .with_name(topic_name(&t))
                        .with_partition_indexes(ps)
                })
                .collect()
        });
    }
    // Unstable offsets (of open transactions) are only waited for when the broker can say so.
    req.require_stable = require_stable && version >= 7;
    Ok(req)
}

/// The committed offsets in an OffsetFetch response of either layout. Partitions without a
/// committed offset (-1) are left out, as Kafka's admin reports them as absent.
pub fn parse_offset_fetch(
    group: &str,
    resp: OffsetFetchResponse,
) -> Result<BTreeMap<TopicPartition, CommittedOffset>, KafkaError> {
    let mut out = BTreeMap::new();
    let mut add = |topic: &str,
                   partition: i32,
                   error_code: i16,
                   offset: i64,
                   epoch: i32,
                   metadata: Option<&StrBytes>|
     -> Result<(), KafkaError> {
        KafkaError::check(error_code, None)?;
        if offset >= 0 {
            out.insert(
                TopicPartition::new(topic, partition),
                CommittedOffset {
                    offset,
                    leader_epoch: (epoch >= 0).then_some(epoch),
                    metadata: metadata.map(|m| m.to_string()),
                },
            );
        }
        Ok(())
    };
    if resp.groups.is_empty() {
        KafkaError::check(resp.error_code, None)?;
        for t in &resp.topics {
            for p in &t.partitions {
                add(
                    &t.name.0,
                    p.partition_index,
                    p.error_code,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata.as_ref(),
                )?;
            }
        }
    } else {
        let g = resp
            .groups
            .iter()
            .find(|g| g.group_id.0.as_str() == group)
            .ok_or_else(|| missing_result(&format!("group '{group}'")))?;
        KafkaError::check(g.error_code, None)?;
        for t in &g.topics {
            for p in &t.partitions {
                add(
                    &t.name.0,
                    p.partition_index,
                    p.error_code,
                    p.committed_offset,
                    p.committed_leader_epoch,
                    p.metadata.as_ref(),
                )?;
            }
        }
    }
    Ok(out)
}

/// An OffsetCommit request from outside the group (generation -1, empty member id), as tools
/// send it to reset the offsets of an inactive group.
pub fn offset_commit_request(
    group: &str,
    offsets: &BTreeMap<TopicPartition, i64>,
    version: i16,
) -> OffsetCommitRequest {
    let keys: Vec<&TopicPartition> = offsets.keys().collect();
    let topics = group_by_topic(keys.iter().copied())
        .into_iter()
        .map(|(t, ps)| {
            let parts = ps
                .into_iter()
                .map(|p| {
                    let offset = offsets
                        .get(&TopicPartition::new(t.clone(), p))
                        .copied()
                        .expect("partition taken from the same map");
                    let mut part = OffsetCommitRequestPartition::default()
                        .with_partition_index(p)
                        .with_committed_offset(offset)
                        .with_committed_metadata(Some(StrBytes::from_static_str("")));
                    if version >= 6 {
                        part.committed_leader_epoch = -1;
                    }
                    part
                })
                .collect();
            OffsetCommitRequestTopic::default()
                .with_name(topic_name(&t))
                .with_partitions(parts)
        })
        .collect();
    let mut req = OffsetCommitRequest::default()
        .with_group_id(group_id(group))
        .with_generation_id_or_member_epoch(-1)
        .with_member_id(StrBytes::from_static_str(""))
        .with_topics(topics);
    if (2..=4).contains(&version) {
        // Keep offsets for the broker's offsets.retention.minutes.
        req.retention_time_ms = -1;
    }
    req
}

/// Per-partition results of OffsetCommit.
pub fn parse_offset_commit(resp: OffsetCommitResponse) -> EntityResult<TopicPartition, ()> {
    resp.topics
        .into_iter()
        .flat_map(|t| {
            let topic = t.name.0.to_string();
            t.partitions.into_iter().map(move |p| {
                (
                    TopicPartition::new(topic.clone(), p.partition_index),
                    KafkaError::check(p.error_code, None),
                )
            })
        })
        .collect()
}

pub fn delete_groups_request(groups: &[String]) -> DeleteGroupsRequest {
    DeleteGroupsRequest::default().with_groups_names(groups.iter().map(|g| group_id(g)).collect())
}

pub fn parse_delete_groups(resp: DeleteGroupsResponse) -> EntityResult<String, ()> {
    resp.results
        .into_iter()
        .map(|r| {
            (
                r.group_id.0.to_string(),
                KafkaError::check(r.error_code, None),
            )
        })
        .collect()
}

/// The one result a single-group call expects.
fn single<T>(group: &str, results: EntityResult<String, T>) -> Result<T> {
    let context = format!("group '{group}'");
    match results.into_iter().find(|(g, _)| g == group) {
        Some((_, Ok(v))) => Ok(v),
        Some((_, Err(e))) => Err(Error::kafka(context, e)),
        None => Err(Error::kafka(context, missing_result("the group"))),
    }
}

impl Admin {
    /// Groups known to any broker (each broker lists the groups it coordinates), sorted by id.
    /// Filters by state (v4) and type (v5) are applied by the brokers.
    pub async fn list_groups(
        &self,
        states: &[String],
        types: &[String],
    ) -> Result<Vec<GroupListing>> {
        let md = self
            .client
            .retry("listing brokers", || {
                self.client.refresh_metadata(Some(&[]))
            })
            .await?;
        let mut all: BTreeMap<String, GroupListing> = BTreeMap::new();
        for broker in &md.brokers {
            let target = Target::Broker(broker.id);
            let groups = self
                .client
                .retry(&format!("ListGroups on broker {}", broker.id), || async {
                    let (v, resp) = self
                        .client
                        .send::<ListGroupsRequest, _>(&target, |v| {
                            list_groups_request(states, types, v)
                        })
                        .await?;
                    parse_list_groups(resp, v)
                        .map_err(|e| Error::kafka(format!("ListGroups on broker {}", broker.id), e))
                })
                .await?;
            for g in groups {
                all.insert(g.group_id.clone(), g);
            }
        }
        Ok(all.into_values().collect())
    }

    /// Describes one group at its coordinator: ConsumerGroupDescribe first when the
    /// coordinator supports it, DescribeGroups when it does not or when the group is not a
    /// consumer group (`GROUP_ID_NOT_FOUND`), as Kafka's admin does.
    pub async fn describe_group(&self, group: &str) -> Result<GroupDescription> {
        let keys = vec![group.to_string()];
        let results = retry_entities(&self.client, "DescribeGroups", keys, |pending| async move {
            let coordinator = self.client.find_coordinator(group).await?;
            let target = Target::Coordinator(group.to_string());
            let mut results = match self
                .client
                .send::<ConsumerGroupDescribeRequest, _>(&target, |_| {
                    Ok(consumer_group_describe_request(&pending))
                })
                .await
            {
                Ok((_, resp)) => parse_consumer_group_describe(resp, &coordinator),
                Err(Error::UnsupportedVersion { .. }) => Vec::new(),
                Err(e) => return Err(e),
            };
            let classic: Vec<String> = if results.is_empty() {
                pending
            } else {
                classic_candidates(&results)
            };
            if classic.is_empty() {
                return Ok(results);
            }
            results.retain(|(g, _)| !classic.contains(g));
            let (_, resp) = self
                .client
                .send::<DescribeGroupsRequest, _>(&target, |_| {
                    Ok(describe_groups_request(&classic))
                })
                .await?;
            results.extend(parse_describe_groups(resp, &coordinator));
            Ok(results)
        })
        .await?;
        single(group, results)
    }

    /// Describes each group at its own coordinator; one result per group, in the order given.
    pub async fn describe_groups(
        &self,
        groups: &[String],
    ) -> Vec<(String, Result<GroupDescription>)> {
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            out.push((g.clone(), self.describe_group(g).await));
        }
        out
    }

    /// A group's committed offsets: all of them, or those of the listed partitions.
    pub async fn list_committed_offsets(
        &self,
        group: &str,
        partitions: Option<&[TopicPartition]>,
        require_stable: bool,
    ) -> Result<BTreeMap<TopicPartition, CommittedOffset>> {
        self.client
            .retry(&format!("OffsetFetch for group '{group}'"), || async {
                let (_, resp) = self
                    .client
                    .send::<OffsetFetchRequest, _>(&Target::Coordinator(group.to_string()), |v| {
                        offset_fetch_request(group, partitions, require_stable, v)
                    })
                    .await?;
                parse_offset_fetch(group, resp)
                    .map_err(|e| Error::kafka(format!("group '{group}'"), e))
            })
            .await
    }

    /// Commits offsets for a group from outside it (what `--reset-offsets --execute` does);
    /// the coordinator accepts this only while the group has no active members.
    pub async fn alter_committed_offsets(
        &self,
        group: &str,
        offsets: &BTreeMap<TopicPartition, i64>,
    ) -> Result<EntityResult<TopicPartition, ()>> {
        let keys: Vec<TopicPartition> = offsets.keys().cloned().collect();
        retry_entities(&self.client, "OffsetCommit", keys, |pending| {
            let batch: BTreeMap<TopicPartition, i64> = offsets
                .iter()
                .filter(|(tp, _)| pending.contains(tp))
                .map(|(tp, o)| (tp.clone(), *o))
                .collect();
            async move {
                let (_, resp) = self
                    .client
                    .send::<OffsetCommitRequest, _>(&Target::Coordinator(group.to_string()), |v| {
                        Ok(offset_commit_request(group, &batch, v))
                    })
                    .await?;
                Ok(parse_offset_commit(resp))
            }
        })
        .await
    }

    /// Deletes groups (each at its coordinator); one result per group, in the order given.
    /// Kafka refuses groups with active members (`NON_EMPTY_GROUP`).
    pub async fn delete_groups(&self, groups: &[String]) -> Vec<(String, Result<()>)> {
        let mut out = Vec::with_capacity(groups.len());
        for g in groups {
            let result = retry_entities(
                &self.client,
                "DeleteGroups",
                vec![g.clone()],
                |pending| async move {
                    let (_, resp) = self
                        .client
                        .send::<DeleteGroupsRequest, _>(&Target::Coordinator(g.clone()), |_| {
                            Ok(delete_groups_request(&pending))
                        })
                        .await?;
                    Ok(parse_delete_groups(resp))
                },
            )
            .await
            .and_then(|r| single(g, r));
            out.push((g.clone(), result));
        }
        out
    }
}

/// Whether a DescribeGroups answer means the group does not exist (`Dead` before v6,
/// `GROUP_ID_NOT_FOUND` from v6).
pub fn is_missing_group(result: &Result<GroupDescription>) -> bool {
    match result {
        Ok(g) => g.state == "Dead",
        Err(e) => e.kafka_code() == Some(KafkaCode::GROUP_ID_NOT_FOUND),
    }
}

#[cfg(test)]
mod tests;
