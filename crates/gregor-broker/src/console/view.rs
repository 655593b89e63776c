//! The console's JSON, built from snapshots of the broker's state. Pure: no locks, no I/O.

use std::collections::HashMap;

use gregor_meta::MetadataImage;
use serde_json::{json, Value};

use crate::groups::GroupObservation;

/// Sizes and offsets of a replica this node hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostedReplica {
    pub size_bytes: u64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
}

/// What the principal asking may see: with an authorizer, the topics and groups it may DESCRIBE
/// (as Metadata lists topics and ListGroups groups); without one, everything.
pub struct Visible<'a> {
    pub topic: &'a (dyn Fn(&str) -> bool + Sync),
    pub group: &'a (dyn Fn(&str) -> bool + Sync),
}

#[cfg(test)]
impl Visible<'_> {
    /// Everything is shown.
    pub fn all() -> Visible<'static> {
        Visible {
            topic: &|_| true,
            group: &|_| true,
        }
    }
}

/// What `/ui/api/cluster` is made of.
pub struct ClusterInput<'a> {
    pub node_id: i32,
    pub cluster_id: &'a str,
    pub controller: Option<i32>,
    pub applied_index: u64,
    pub image: &'a MetadataImage,
    pub hosted: &'a HashMap<(String, i32), HostedReplica>,
    pub is_internal: fn(&str) -> bool,
    pub visible: &'a Visible<'a>,
}

/// Brokers and topics as this node's metadata image has them (the topics the principal may see;
/// brokers are shown to all, as Metadata shows them).
pub fn cluster(c: &ClusterInput<'_>) -> Value {
    let brokers: Vec<Value> = c
        .image
        .brokers()
        .values()
        .map(|b| {
            let endpoints: Vec<Value> = b
                .endpoints
                .iter()
                .map(|e| json!({ "name": e.name, "host": e.host, "port": e.port }))
                .collect();
            json!({
                "id": b.id,
                "endpoints": endpoints,
                "rack": b.rack,
                "fenced": b.fenced,
                "controller": c.controller == Some(b.id),
                "this_node": b.id == c.node_id,
            })
        })
        .collect();
    let mut topics: Vec<Value> = c
        .image
        .topics()
        .values()
        .filter(|t| (c.visible.topic)(&t.name))
        .map(|t| {
            let partitions: Vec<Value> = t
                .partitions
                .iter()
                .map(|(&index, p)| {
                    let hosted = c.hosted.get(&(t.name.clone(), index));
                    let offline = p.leader < 0 || !c.image.is_broker_active(p.leader);
                    json!({
                        "partition": index,
                        "leader": p.leader,
                        "leader_epoch": p.leader_epoch,
                        "replicas": p.replicas,
                        "isr": p.isr,
                        "adding": p.adding_replicas,
                        "removing": p.removing_replicas,
                        "under_replicated": p.isr.len() < p.replicas.len(),
                        "offline": offline,
                        "hosted_here": hosted.is_some(),
                        "size_bytes": hosted.map(|h| h.size_bytes),
                        "log_start_offset": hosted.map(|h| h.log_start_offset),
                        "log_end_offset": hosted.map(|h| h.log_end_offset),
                        "high_watermark": hosted.map(|h| h.high_watermark),
                    })
                })
                .collect();
            json!({
                "name": t.name,
                "internal": (c.is_internal)(&t.name),
                "partitions": partitions,
            })
        })
        .collect();
    topics.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    json!({
        "node_id": c.node_id,
        "cluster_id": c.cluster_id,
        "controller_id": c.controller,
        "applied_index": c.applied_index,
        "brokers": brokers,
        "topics": topics,
    })
}

/// A group's committed offset for a partition, with its lag where the high watermark is known
/// here.
struct PartitionLag {
    topic: String,
    partition: i32,
    committed: i64,
    high_watermark: Option<i64>,
    lag: Option<i64>,
}

/// The committed offsets of the topics the principal may see (OffsetFetch of all topics hides
/// the others).
fn lags(
    g: &GroupObservation,
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Vec<PartitionLag> {
    let mut out: Vec<_> = g
        .offsets
        .iter()
        .filter(|(t, _, _)| (visible.topic)(t))
        .map(|(t, p, committed)| {
            let hw = hws.get(&(t.clone(), *p)).copied();
            PartitionLag {
                topic: t.clone(),
                partition: *p,
                committed: *committed,
                high_watermark: hw,
                lag: hw.map(|hw| (hw - committed).max(0)),
            }
        })
        .collect();
    out.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    out
}

fn lag_sum(lags: &[PartitionLag]) -> Option<i64> {
    lags.iter().filter_map(|l| l.lag).reduce(|a, b| a + b)
}

/// The groups this node coordinates that the principal may see, one line each
/// (`/ui/api/groups?scope=local`).
pub fn groups(
    node_id: i32,
    observed: &[GroupObservation],
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Value {
    let mut groups: Vec<Value> = observed
        .iter()
        .filter(|g| (visible.group)(&g.summary.group_id))
        .map(|g| {
            let s = &g.summary;
            json!({
                "group_id": s.group_id,
                "state": s.state.name(),
                "protocol_type": s.protocol_type,
                "protocol": s.protocol_name,
                "generation": s.generation_id,
                "members": s.members.len(),
                "lag_sum": lag_sum(&lags(g, hws, visible)),
                "rebalances": g.rebalances.generations,
                "rebalancing": g.rebalances.in_progress().is_some(),
                "coordinator": node_id,
            })
        })
        .collect();
    groups.sort_by(|a, b| a["group_id"].as_str().cmp(&b["group_id"].as_str()));
    json!({ "node_id": node_id, "scope": "local", "groups": groups })
}

/// One group in full: members with their assignments and lag, committed offsets (of the topics
/// the principal may see; assignments are shown whole, as DescribeGroups shows them), timeline.
pub fn group(
    node_id: i32,
    g: &GroupObservation,
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Value {
    let s = &g.summary;
    let consumer = s.protocol_type.as_deref() == Some("consumer");
    let lags = lags(g, hws, visible);
    let mut owner: HashMap<(String, i32), String> = HashMap::new();
    let mut per_member_lag: Vec<Option<i64>> = Vec::new();
    let members: Vec<Value> = s
        .members
        .iter()
        .map(|m| {
            let (partitions, error) = super::timeline::decode(consumer, &m.assignment);
            for (t, p) in &partitions {
                owner.insert((t.clone(), *p), m.member_id.clone());
            }
            let lag = lags
                .iter()
                .filter(|l| {
                    partitions
                        .iter()
                        .any(|(t, p)| *t == l.topic && *p == l.partition)
                })
                .filter_map(|l| l.lag)
                .reduce(|a, b| a + b);
            if !partitions.is_empty() {
                per_member_lag.push(lag);
            }
            json!({
                "member_id": m.member_id,
                "group_instance_id": m.group_instance_id,
                "client_id": m.client_id,
                "client_host": m.client_host,
                "session_timeout_ms": m.session_timeout_ms,
                "rebalance_timeout_ms": m.rebalance_timeout_ms,
                "assignment": super::timeline::partitions_json(&partitions),
                "assignment_error": error,
                "lag_sum": lag,
            })
        })
        .collect();
    let offsets: Vec<Value> = lags
        .iter()
        .map(|l| {
            json!({
                "topic": l.topic,
                "partition": l.partition,
                "committed": l.committed,
                "high_watermark": l.high_watermark,
                "lag": l.lag,
                "owner": owner.get(&(l.topic.clone(), l.partition)),
            })
        })
        .collect();
    json!({
        "node_id": node_id,
        "coordinator": node_id,
        "coordinator_since_ms": g.coordinator_since_ms,
        "group_id": s.group_id,
        "state": s.state.name(),
        "protocol_type": s.protocol_type,
        "protocol": s.protocol_name,
        "generation": s.generation_id,
        "leader": s.leader_id,
        "state_since_ms": s.state_timestamp_ms,
        "members": members,
        "offsets": offsets,
        "lag_sum": lag_sum(&lags),
        "skew": skew(&per_member_lag),
        "rebalances": {
            "generations": g.rebalances.generations,
            "completed": g.rebalances.completed,
            "completed_ms_total": g.rebalances.completed_ms_total,
        },
        "timeline": super::timeline::timeline(consumer, &g.rebalances),
        "timeline_capacity": gregor_group::history::RECENT_REBALANCES,
    })
}

/// How unevenly the lag falls on the members that own partitions: the largest member's lag over
/// the mean (1 is even); `None` without lag or without at least two such members.
fn skew(per_member: &[Option<i64>]) -> Option<f64> {
    if per_member.len() < 2 {
        return None;
    }
    let lags: Vec<f64> = per_member.iter().map(|l| l.unwrap_or(0) as f64).collect();
    let mean = lags.iter().sum::<f64>() / lags.len() as f64;
    if mean <= 0.0 {
        return None;
    }
    let max = lags.iter().cloned().fold(0.0, f64::max);
    Some(max / mean)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn observation(group_id: &str, offsets: &[(&str, i64)]) -> GroupObservation {
        GroupObservation {
            summary: gregor_group::GroupSummary {
                group_id: group_id.into(),
                state: gregor_group::GroupState::Empty,
                generation_id: 0,
                protocol_type: Some("consumer".into()),
                protocol_name: None,
                leader_id: None,
                members: vec![],
                pending_members: vec![],
                state_timestamp_ms: None,
            },
            rebalances: Default::default(),
            offsets: offsets
                .iter()
                .map(|(t, o)| (t.to_string(), 0, *o))
                .collect(),
            coordinator_since_ms: 0,
        }
    }

    fn names(v: &Value, list: &str, key: &str) -> Vec<String> {
        v[list]
            .as_array()
            .expect("a list")
            .iter()
            .map(|x| x[key].as_str().expect("a name").to_string())
            .collect()
    }

    #[test]
    fn groups_and_their_offsets_are_filtered_by_what_the_principal_may_see() {
        let observed = [
            observation("a-orders", &[("a-in", 5), ("b-secret", 1)]),
            observation("b-billing", &[("b-secret", 2)]),
        ];
        let hws = HashMap::from([
            (("a-in".to_string(), 0), 9),
            (("b-secret".to_string(), 0), 100),
        ]);
        let only_a = Visible {
            topic: &|t| t.starts_with("a-"),
            group: &|g| g.starts_with("a-"),
        };
        let list = groups(1, &observed, &hws, &only_a);
        assert_eq!(names(&list, "groups", "group_id"), ["a-orders"]);
        assert_eq!(
            list["groups"][0]["lag_sum"], 4,
            "b-secret's lag is not counted"
        );
        let all = groups(1, &observed, &hws, &Visible::all());
        assert_eq!(names(&all, "groups", "group_id"), ["a-orders", "b-billing"]);
        assert_eq!(all["groups"][0]["lag_sum"], 103);
        let one = group(1, &observed[0], &hws, &only_a);
        assert_eq!(names(&one, "offsets", "topic"), ["a-in"]);
        assert_eq!(one["lag_sum"], 4);
    }

    #[test]
    fn topics_are_filtered_and_brokers_are_not() {
        use gregor_meta::{MetadataRecord, TopicRecord, Uuid};
        let mut image = MetadataImage::new();
        for name in ["a-one", "b-two"] {
            image
                .apply(&MetadataRecord::Topic(TopicRecord {
                    name: name.into(),
                    topic_id: Uuid::new_v4(),
                }))
                .expect("applied");
        }
        let hosted = HashMap::new();
        let input = |visible| ClusterInput {
            node_id: 1,
            cluster_id: "c",
            controller: None,
            applied_index: 0,
            image: &image,
            hosted: &hosted,
            is_internal: |_| false,
            visible,
        };
        let only_a = Visible {
            topic: &|t| t.starts_with("a-"),
            group: &|_| false,
        };
        assert_eq!(
            names(&cluster(&input(&only_a)), "topics", "name"),
            ["a-one"]
        );
        let all = Visible::all();
        assert_eq!(
            names(&cluster(&input(&all)), "topics", "name"),
            ["a-one", "b-two"]
        );
    }

    #[test]
    fn skew_is_the_largest_lag_over_the_mean() {
        assert_eq!(skew(&[Some(10), Some(10)]), Some(1.0));
        assert_eq!(skew(&[Some(30), Some(0), None]), Some(3.0));
        assert_eq!(skew(&[Some(5)]), None);
        assert_eq!(skew(&[Some(0), None]), None);
    }
}
