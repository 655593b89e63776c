//! The console's JSON, built from snapshots of the broker's state. Pure: no locks, no I/O.

use std::collections::HashMap;

use gregor_meta::{MetadataImage, PartitionRegistration};
use serde_json::{json, Value};

use crate::groups::GroupObservation;
use crate::metrics::txns::CoordinatorTxns;

/// Sizes and offsets of a replica this node hosts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct HostedReplica {
    pub size_bytes: u64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
    pub high_watermark: i64,
    /// The last stable offset (`None` from a node that does not report it).
    pub last_stable_offset: Option<i64>,
}

impl HostedReplica {
    /// How far the last stable offset trails the high watermark (Kafka's
    /// `LastStableOffsetLag`), where it is known.
    fn lso_lag(&self) -> Option<i64> {
        self.last_stable_offset
            .map(|lso| (self.high_watermark - lso).max(0))
    }
}

/// What the principal asking may see: with an authorizer, the topics and groups it may DESCRIBE
/// (as Metadata lists topics and ListGroups groups); without one, everything.
pub struct Visible<'a> {
    pub topic: &'a (dyn Fn(&str) -> bool + Sync),
    pub group: &'a (dyn Fn(&str) -> bool + Sync),
    pub transactional_id: &'a (dyn Fn(&str) -> bool + Sync),
    /// DESCRIBE on the cluster (what `/metrics` needs): counts over everything.
    pub cluster: bool,
}

#[cfg(test)]
impl Visible<'_> {
    /// Everything is shown.
    pub fn all() -> Visible<'static> {
        Visible {
            topic: &|_| true,
            group: &|_| true,
            transactional_id: &|_| true,
            cluster: true,
        }
    }
}

/// How this node's console last found a broker's client listener, asked when the page was
/// read: a fenced broker is not asked (the metadata already says it is down).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Reachability {
    /// The node serving the page.
    ThisNode,
    /// Its listener accepted a connection.
    Accepts,
    /// Its listener refused the connection: no process listens there.
    Refused,
    /// No answer in time (a frozen or cut-off process), or another connection error.
    NoAnswer,
    /// Not asked.
    NotProbed,
}

impl Reachability {
    fn name(self) -> &'static str {
        match self {
            Reachability::ThisNode => "this node",
            Reachability::Accepts => "accepts connections",
            Reachability::Refused => "connection refused",
            Reachability::NoAnswer => "no answer",
            Reachability::NotProbed => "not asked",
        }
    }

    fn unreachable(self) -> bool {
        matches!(self, Reachability::Refused | Reachability::NoAnswer)
    }
}

/// A broker's state as the page shows it: the metadata's fencing first; an unfenced broker
/// whose listener refuses connections or does not answer is down before the controller fences
/// it (or when no controller can, as when the quorum lost its majority).
fn liveness(fenced: bool, reach: Reachability) -> &'static str {
    match (fenced, reach) {
        (true, _) => "fenced",
        (false, Reachability::Refused) => "unreachable",
        (false, Reachability::NoAnswer) => "not answering",
        (false, Reachability::NotProbed) => "unfenced",
        (false, _) => "alive",
    }
}

/// A topic partition.
pub type Tp = (String, i32);

/// Partitions other nodes lead, with the leader that reported their sizes and offsets.
pub type FromLeaders = HashMap<Tp, (i32, HostedReplica)>;

/// What `/ui/api/cluster` is made of.
pub struct ClusterInput<'a> {
    pub node_id: i32,
    pub cluster_id: &'a str,
    pub controller: Option<i32>,
    pub applied_index: u64,
    pub image: &'a MetadataImage,
    /// The replicas this node hosts.
    pub hosted: &'a HashMap<Tp, HostedReplica>,
    /// The partitions other nodes lead, as their leaders reported them (`merge::led_replicas`).
    pub from_leaders: &'a FromLeaders,
    /// What the console found of each broker's listener.
    pub reachability: &'a HashMap<i32, Reachability>,
    /// The peers whose partitions' sizes could not be read, and why.
    pub unread: &'a [(i32, String)],
    pub is_internal: fn(&str) -> bool,
    pub visible: &'a Visible<'a>,
}

impl ClusterInput<'_> {
    fn reach(&self, node: i32) -> Reachability {
        if node == self.node_id {
            return Reachability::ThisNode;
        }
        self.reachability
            .get(&node)
            .copied()
            .unwrap_or(Reachability::NotProbed)
    }

    /// The sizes and offsets of a partition from its leader: this node's replica when it leads,
    /// else what the leader reported.
    fn leader_sizes(&self, tp: &Tp, leader: i32) -> Option<HostedReplica> {
        if leader == self.node_id {
            return self.hosted.get(tp).copied();
        }
        self.from_leaders
            .get(tp)
            .filter(|(node, _)| *node == leader)
            .map(|(_, r)| *r)
    }
}

fn broker_json(c: &ClusterInput<'_>, b: &gregor_meta::BrokerRegistration) -> Value {
    let endpoints: Vec<Value> = b
        .endpoints
        .iter()
        .map(|e| json!({ "name": e.name, "host": e.host, "port": e.port }))
        .collect();
    let reach = c.reach(b.id);
    json!({
        "id": b.id,
        "endpoints": endpoints,
        "rack": b.rack,
        "fenced": b.fenced,
        "reachability": reach.name(),
        "liveness": liveness(b.fenced, reach),
        "controller": c.controller == Some(b.id),
        "this_node": b.id == c.node_id,
    })
}

fn partition_json(
    c: &ClusterInput<'_>,
    topic: &str,
    index: i32,
    p: &PartitionRegistration,
) -> Value {
    let tp = (topic.to_string(), index);
    let sizes = c.leader_sizes(&tp, p.leader);
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
        "leader_unreachable": !offline && c.reach(p.leader).unreachable(),
        "hosted_here": c.hosted.contains_key(&tp),
        "sizes_from": sizes.map(|_| p.leader),
        "size_bytes": sizes.map(|h| h.size_bytes),
        "log_start_offset": sizes.map(|h| h.log_start_offset),
        "log_end_offset": sizes.map(|h| h.log_end_offset),
        "high_watermark": sizes.map(|h| h.high_watermark),
        "last_stable_offset": sizes.and_then(|h| h.last_stable_offset),
        "lso_lag": sizes.and_then(|h| h.lso_lag()),
    })
}

/// The counts of the Brokers page: brokers by liveness; partitions (of the topics shown) by
/// the metadata (ISR smaller than the replicas; no leader or a fenced one) and by whether their
/// leader's listener answers.
fn summary(brokers: &[Value], topics: &[Value]) -> Value {
    let count_brokers = |state: &str| brokers.iter().filter(|b| b["liveness"] == state).count();
    let parts: Vec<&Value> = topics
        .iter()
        .filter_map(|t| t["partitions"].as_array())
        .flatten()
        .collect();
    let count_parts = |flag: &str| parts.iter().filter(|p| p[flag] == true).count();
    json!({
        "brokers": brokers.len(),
        "alive": count_brokers("alive"),
        "fenced": count_brokers("fenced"),
        "unreachable": count_brokers("unreachable") + count_brokers("not answering"),
        "partitions": parts.len(),
        "under_replicated": count_parts("under_replicated"),
        "offline": count_parts("offline"),
        "leader_unreachable": count_parts("leader_unreachable"),
    })
}

/// Brokers and topics as this node's metadata image has them (the topics the principal may see;
/// brokers are shown to all, as Metadata shows them), with each broker's liveness and each
/// partition's sizes and offsets from its leader.
pub fn cluster(c: &ClusterInput<'_>) -> Value {
    let brokers: Vec<Value> = c
        .image
        .brokers()
        .values()
        .map(|b| broker_json(c, b))
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
                .map(|(&index, p)| partition_json(c, &t.name, index, p))
                .collect();
            json!({
                "name": t.name,
                "internal": (c.is_internal)(&t.name),
                "partitions": partitions,
            })
        })
        .collect();
    topics.sort_by(|a, b| a["name"].as_str().cmp(&b["name"].as_str()));
    let unread: Vec<Value> = c
        .unread
        .iter()
        .map(|(node, error)| json!({ "node_id": node, "error": error }))
        .collect();
    json!({
        "node_id": c.node_id,
        "cluster_id": c.cluster_id,
        "controller_id": c.controller,
        "applied_index": c.applied_index,
        "summary": summary(&brokers, &topics),
        "brokers": brokers,
        "topics": topics,
        "sizes_unread": unread,
    })
}

/// The replicas this node leads (of the topics the principal may see), with their sizes and
/// offsets: what other nodes' consoles show for them (`/ui/api/replicas`).
pub fn led_replicas(
    node_id: i32,
    image: &MetadataImage,
    hosted: &HashMap<Tp, HostedReplica>,
    visible: &Visible<'_>,
) -> Value {
    let mut replicas: Vec<Value> = hosted
        .iter()
        .filter(|((t, p), _)| {
            (visible.topic)(t)
                && image
                    .topic(t)
                    .and_then(|topic| topic.partitions.get(p))
                    .is_some_and(|reg| reg.leader == node_id)
        })
        .map(|((t, p), r)| {
            json!({
                "topic": t,
                "partition": p,
                "size_bytes": r.size_bytes,
                "log_start_offset": r.log_start_offset,
                "log_end_offset": r.log_end_offset,
                "high_watermark": r.high_watermark,
                "last_stable_offset": r.last_stable_offset,
            })
        })
        .collect();
    replicas.sort_by(|a, b| {
        (a["topic"].as_str(), a["partition"].as_i64())
            .cmp(&(b["topic"].as_str(), b["partition"].as_i64()))
    });
    json!({ "node_id": node_id, "replicas": replicas })
}

/// A group's committed offset for a partition, with its lag where the high watermark is known
/// here.
pub(super) struct PartitionLag {
    pub topic: String,
    pub partition: i32,
    pub committed: i64,
    pub high_watermark: Option<i64>,
    pub lag: Option<i64>,
}

/// The committed offsets of the topics the principal may see (OffsetFetch of all topics hides
/// the others).
fn lags(
    g: &GroupObservation,
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Vec<PartitionLag> {
    offset_lags(&g.offsets, hws, visible)
}

pub(super) fn offset_lags(
    offsets: &[(String, i32, i64)],
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Vec<PartitionLag> {
    let mut out: Vec<_> = offsets
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

/// A lag from this many records on is drawn amber on the group page.
pub const LAG_WARN: i64 = 1_000;
/// A lag from this many records on is drawn red.
pub const LAG_HIGH: i64 = 100_000;

/// How a lag is coloured: by fixed thresholds, so a lag of 10 never looks alarming because it
/// happens to be the group's largest.
pub(super) fn lag_level(lag: Option<i64>) -> Option<&'static str> {
    match lag? {
        l if l >= LAG_HIGH => Some("high"),
        l if l >= LAG_WARN => Some("warn"),
        _ => Some("ok"),
    }
}

/// One partition's line of a group's offsets: its committed offset, lag and owner.
pub(super) fn offset_json(l: &PartitionLag, owner: Option<&str>) -> Value {
    json!({
        "topic": l.topic,
        "partition": l.partition,
        "committed": l.committed,
        "high_watermark": l.high_watermark,
        "lag": l.lag,
        "lag_level": lag_level(l.lag),
        "owner": owner,
    })
}

pub(super) fn lag_sum(lags: &[PartitionLag]) -> Option<i64> {
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
                "type": "classic",
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
                "lag_level": lag_level(lag),
            })
        })
        .collect();
    let offsets: Vec<Value> = lags
        .iter()
        .map(|l| {
            offset_json(
                l,
                owner
                    .get(&(l.topic.clone(), l.partition))
                    .map(String::as_str),
            )
        })
        .collect();
    let mut timeline = super::timeline::timeline(consumer, &g.rebalances);
    let scale = super::timeline::scale_bars(&mut timeline);
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
        "lag_thresholds": { "warn": LAG_WARN, "high": LAG_HIGH },
        "skew": skew(&per_member_lag),
        "rebalances": {
            "generations": g.rebalances.generations,
            "completed": g.rebalances.completed,
            "completed_ms_total": g.rebalances.completed_ms_total,
        },
        "timeline": timeline,
        "timeline_scale": scale,
        "timeline_capacity": gregor_group::history::RECENT_REBALANCES,
    })
}

/// The most open transactions `/ui/api/transactions` lists (the oldest first).
pub const MAX_OPEN_TXNS: usize = 100;

/// The open transactions of this node's coordinator shards (those whose transactional id the
/// principal may DESCRIBE, with the partitions of the topics it may, as DescribeTransactions
/// answers), oldest first; the counts per state only for a principal that may DESCRIBE the
/// cluster, as `/metrics` shows them.
pub fn transactions(
    node_id: i32,
    c: &CoordinatorTxns,
    now_ms: i64,
    visible: &Visible<'_>,
) -> Value {
    let listed: Vec<Value> = c
        .open
        .iter()
        .filter(|t| (visible.transactional_id)(&t.transactional_id))
        .map(|t| {
            let partitions: Vec<Value> = t
                .partitions
                .iter()
                .filter(|(topic, _)| (visible.topic)(topic))
                .map(|(topic, partition)| json!({ "topic": topic, "partition": partition }))
                .collect();
            let started = (t.started_ms >= 0).then_some(t.started_ms);
            json!({
                "transactional_id": t.transactional_id,
                "producer_id": t.producer_id,
                "producer_epoch": t.producer_epoch,
                "state": t.state.name(),
                "partitions": partitions,
                "started_ms": started,
                "age_ms": started.map(|s| (now_ms - s).max(0)),
                "last_update_ms": t.last_update_ms,
                "timeout_ms": t.timeout_ms,
                "coordinator_partition": t.coordinator_partition,
            })
        })
        .collect();
    let states: serde_json::Map<String, Value> = c
        .by_state
        .iter()
        .map(|(state, n)| (state.name().to_string(), json!(n)))
        .collect();
    json!({
        "node_id": node_id,
        "shards": c.shards,
        "loading": c.loading,
        "states": visible.cluster.then_some(states),
        "open_total": visible.cluster.then_some(c.open_total),
        "truncated": c.open_total > c.open.len(),
        "max_listed": MAX_OPEN_TXNS,
        "transactions": listed,
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
            transactional_id: &|_| true,
            cluster: true,
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
        let from_leaders = HashMap::new();
        let reachability = HashMap::new();
        let input = |visible| ClusterInput {
            node_id: 1,
            cluster_id: "c",
            controller: None,
            applied_index: 0,
            image: &image,
            hosted: &hosted,
            from_leaders: &from_leaders,
            reachability: &reachability,
            unread: &[],
            is_internal: |_| false,
            visible,
        };
        let only_a = Visible {
            topic: &|t| t.starts_with("a-"),
            group: &|_| false,
            transactional_id: &|_| true,
            cluster: true,
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

    /// Three brokers (1 the serving node; 3 fenced) and topic `t`: partition 0 led by 1 with
    /// the whole ISR, 1 led by 2 with 3 out of the ISR, 2 led by 3 (fenced, so offline).
    fn three_brokers() -> MetadataImage {
        use gregor_meta::{
            BrokerEndpoint, BrokerEpochRecord, MetadataRecord as R, PartitionRecord,
            RegisterBrokerRecord, TopicRecord, Uuid,
        };
        let mut image = MetadataImage::new();
        let topic_id = Uuid::new_v4();
        let mut records = vec![];
        for id in 1..=3 {
            records.push(R::RegisterBroker(RegisterBrokerRecord {
                broker_id: id,
                incarnation_id: Uuid::new_v4(),
                broker_epoch: 10 + i64::from(id),
                endpoints: vec![BrokerEndpoint {
                    name: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9090 + id as u16,
                    security_protocol: 0,
                }],
                rack: None,
                fenced: false,
            }));
        }
        records.push(R::Topic(TopicRecord {
            name: "t".into(),
            topic_id,
        }));
        for (partition, leader, isr) in [(0, 1, vec![1, 2, 3]), (1, 2, vec![1, 2]), (2, 3, vec![3])]
        {
            records.push(R::Partition(PartitionRecord {
                topic_id,
                partition,
                replicas: vec![1, 2, 3],
                isr,
                removing_replicas: vec![],
                adding_replicas: vec![],
                leader,
                leader_recovery_state: Default::default(),
                leader_epoch: 0,
                partition_epoch: 0,
            }));
        }
        records.push(R::FenceBroker(BrokerEpochRecord {
            broker_id: 3,
            broker_epoch: 13,
        }));
        for r in &records {
            image.apply(r).expect("applied");
        }
        image
    }

    fn replica(hw: i64) -> HostedReplica {
        HostedReplica {
            size_bytes: 100 * hw as u64,
            log_start_offset: 0,
            log_end_offset: hw,
            high_watermark: hw,
            last_stable_offset: Some(hw),
        }
    }

    fn cluster_of(
        image: &MetadataImage,
        hosted: &HashMap<Tp, HostedReplica>,
        from_leaders: &HashMap<Tp, (i32, HostedReplica)>,
        reachability: &HashMap<i32, Reachability>,
    ) -> Value {
        let all = Visible::all();
        cluster(&ClusterInput {
            node_id: 1,
            cluster_id: "c",
            controller: Some(2),
            applied_index: 7,
            image,
            hosted,
            from_leaders,
            reachability,
            unread: &[],
            is_internal: |_| false,
            visible: &all,
        })
    }

    #[test]
    fn brokers_show_the_metadata_s_fencing_and_whether_their_listener_answers() {
        let image = three_brokers();
        let reach = HashMap::from([(2, Reachability::Refused)]);
        let c = cluster_of(&image, &HashMap::new(), &HashMap::new(), &reach);
        let liveness: Vec<&str> = c["brokers"]
            .as_array()
            .expect("brokers")
            .iter()
            .map(|b| b["liveness"].as_str().expect("liveness"))
            .collect();
        // 2 is unfenced in the metadata but its process is gone (the controller has not fenced
        // it yet, or cannot); 3 is fenced whatever its listener does.
        assert_eq!(liveness, ["alive", "unreachable", "fenced"]);
        assert_eq!(c["brokers"][1]["reachability"], "connection refused");
        let s = &c["summary"];
        assert_eq!(
            (s["brokers"].as_i64(), s["alive"].as_i64()),
            (Some(3), Some(1))
        );
        assert_eq!(
            (s["fenced"].as_i64(), s["unreachable"].as_i64()),
            (Some(1), Some(1))
        );
        // From the metadata: partition 1 and 2 have a short ISR, partition 2 a fenced leader;
        // partition 1's leader (2) does not answer.
        assert_eq!(s["under_replicated"], 2);
        assert_eq!(s["offline"], 1);
        assert_eq!(s["leader_unreachable"], 1);
        assert_eq!(c["controller_id"], 2);
        let no_answer = HashMap::from([(2, Reachability::NoAnswer)]);
        let c = cluster_of(&image, &HashMap::new(), &HashMap::new(), &no_answer);
        assert_eq!(c["brokers"][1]["liveness"], "not answering");
        assert_eq!(c["summary"]["unreachable"], 1);
    }

    #[test]
    fn sizes_and_offsets_come_from_each_partition_s_leader() {
        let image = three_brokers();
        let tp = |p: i32| ("t".to_string(), p);
        // This node hosts every replica; its own copies of 1 and 2 are behind.
        let hosted = HashMap::from([
            (tp(0), replica(50)),
            (tp(1), replica(3)),
            (tp(2), replica(1)),
        ]);
        let from_leaders = HashMap::from([
            (tp(1), (2, replica(40))),
            // Reported by a node that does not lead partition 2: not used.
            (tp(2), (2, replica(99))),
        ]);
        let reach = HashMap::from([(2, Reachability::Accepts)]);
        let c = cluster_of(&image, &hosted, &from_leaders, &reach);
        let parts = c["topics"][0]["partitions"].as_array().expect("partitions");
        let hw: Vec<Value> = parts.iter().map(|p| p["high_watermark"].clone()).collect();
        assert_eq!(hw, [json!(50), json!(40), Value::Null]);
        assert_eq!(parts[1]["sizes_from"], 2);
        assert_eq!(parts[1]["size_bytes"], 4000);
        assert_eq!(parts[1]["hosted_here"], true);
        assert_eq!(parts[2]["sizes_from"], Value::Null);
        let led = led_replicas(1, &image, &hosted, &Visible::all());
        assert_eq!(
            led["replicas"],
            json!([{"topic": "t", "partition": 0, "size_bytes": 5000, "log_start_offset": 0,
                    "log_end_offset": 50, "high_watermark": 50, "last_stable_offset": 50}]),
            "only the partitions this node leads"
        );
    }

    #[test]
    fn each_partition_shows_its_leader_s_last_stable_offset_and_its_lag() {
        let image = three_brokers();
        let tp = |p: i32| ("t".to_string(), p);
        let held = HostedReplica {
            last_stable_offset: Some(32),
            ..replica(40)
        };
        let old_peer = HostedReplica {
            last_stable_offset: None,
            ..replica(7)
        };
        let hosted = HashMap::from([(tp(0), replica(50))]);
        let from_leaders = HashMap::from([(tp(1), (2, held)), (tp(2), (3, old_peer))]);
        let image_reach = HashMap::from([(2, Reachability::Accepts)]);
        let c = cluster_of(&image, &hosted, &from_leaders, &image_reach);
        let parts = c["topics"][0]["partitions"].as_array().expect("partitions");
        let col = |k: &str| -> Vec<Value> { parts.iter().map(|p| p[k].clone()).collect() };
        assert_eq!(
            col("last_stable_offset"),
            [json!(50), json!(32), Value::Null]
        );
        assert_eq!(
            col("lso_lag"),
            [json!(0), json!(8), Value::Null],
            "the lag where the leader reported an LSO"
        );
    }

    fn open_txn(id: &str, started_ms: i64, topics: &[&str]) -> crate::metrics::txns::OpenTxn {
        crate::metrics::txns::OpenTxn {
            transactional_id: id.to_string(),
            producer_id: 4000,
            producer_epoch: 2,
            state: gregor_group::txn::TransactionState::Ongoing,
            partitions: topics.iter().map(|t| (t.to_string(), 0)).collect(),
            started_ms,
            last_update_ms: started_ms + 5,
            timeout_ms: 60_000,
            coordinator_partition: 3,
        }
    }

    #[test]
    fn open_transactions_list_what_the_principal_may_describe() {
        use gregor_group::txn::TransactionState;
        let c = CoordinatorTxns {
            by_state: std::collections::BTreeMap::from([
                (TransactionState::Ongoing, 2),
                (TransactionState::Empty, 5),
            ]),
            open: vec![
                open_txn("a-tx", 1_000, &["a-in", "b-out"]),
                open_txn("b-tx", 2_000, &["a-in"]),
            ],
            open_total: 3,
            shards: vec![3],
            loading: vec![],
        };
        let all = transactions(1, &c, 61_000, &Visible::all());
        assert_eq!(
            names(&all, "transactions", "transactional_id"),
            ["a-tx", "b-tx"]
        );
        let t = &all["transactions"][0];
        assert_eq!(t["state"], "Ongoing");
        assert_eq!(
            (t["producer_id"].as_i64(), t["producer_epoch"].as_i64()),
            (Some(4000), Some(2))
        );
        assert_eq!(t["age_ms"], 60_000);
        assert_eq!(
            t["partitions"],
            json!([{"topic": "a-in", "partition": 0}, {"topic": "b-out", "partition": 0}])
        );
        assert_eq!(all["states"]["Empty"], 5);
        assert_eq!(all["open_total"], 3);
        assert_eq!(all["truncated"], true, "three open, two listed");
        let only_a = Visible {
            topic: &|t| t.starts_with("a-"),
            group: &|_| true,
            transactional_id: &|id| id.starts_with("a-"),
            cluster: false,
        };
        let some = transactions(1, &c, 61_000, &only_a);
        assert_eq!(names(&some, "transactions", "transactional_id"), ["a-tx"]);
        assert_eq!(
            some["transactions"][0]["partitions"],
            json!([{"topic": "a-in", "partition": 0}])
        );
        assert_eq!(
            some["states"],
            Value::Null,
            "counts need DESCRIBE on the cluster"
        );
        assert_eq!(some["open_total"], Value::Null);
    }

    #[test]
    fn lag_is_coloured_by_fixed_thresholds() {
        assert_eq!(lag_level(None), None);
        assert_eq!(lag_level(Some(0)), Some("ok"));
        assert_eq!(lag_level(Some(10)), Some("ok"));
        assert_eq!(lag_level(Some(LAG_WARN - 1)), Some("ok"));
        assert_eq!(lag_level(Some(LAG_WARN)), Some("warn"));
        assert_eq!(lag_level(Some(LAG_HIGH)), Some("high"));
        // A group whose only lag is 10: its largest, but not alarming.
        let g = observation("g", &[("a", 5)]);
        let hws = HashMap::from([(("a".to_string(), 0), 15)]);
        let v = group(1, &g, &hws, &Visible::all());
        assert_eq!(v["offsets"][0]["lag"], 10);
        assert_eq!(v["offsets"][0]["lag_level"], "ok");
        assert_eq!(
            v["lag_thresholds"],
            json!({"warn": LAG_WARN, "high": LAG_HIGH})
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
