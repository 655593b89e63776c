//! What the console gathers from other nodes, merged. Pure.
//!
//! Each node lists the groups it coordinates (`/ui/api/groups?scope=local`); the console of any
//! node asks every live broker and merges their answers here. What a peer sent is bounded and
//! re-shaped: at most [`MAX_GROUPS_PER_NODE`] lines are taken from one node, each rebuilt from
//! the known fields, and its coordinator is the node that was asked, not what it claims.
//!
//! Likewise each node lists the sizes and offsets of the partitions it leads
//! (`/ui/api/replicas`), so that every node's Topics page shows the leaders' numbers.

use std::collections::{BTreeMap, HashMap};

use serde_json::{json, Value};

use super::view::{FromLeaders, HostedReplica, Tp};

/// The most groups taken from one node's answer.
pub const MAX_GROUPS_PER_NODE: usize = 10_000;

/// The fields of a group line, as `view::groups` writes them.
const FIELDS: [&str; 9] = [
    "type",
    "state",
    "protocol_type",
    "protocol",
    "generation",
    "members",
    "lag_sum",
    "rebalances",
    "rebalancing",
];

/// A node's answer: its group lines, or why it could not be read.
pub type NodeAnswer = Result<Value, String>;

/// What became of one node when the cluster's groups were gathered.
#[derive(Debug, Clone, PartialEq)]
pub enum NodeGroups {
    /// It answered (or not) with its own list.
    Asked(NodeAnswer),
    /// It was not asked, rightly: it is down (fenced, or shut down) and coordinates no group
    /// (leads no `__consumer_offsets` partition), so no group is missing for it.
    Skipped(String),
}

fn line(v: &Value, coordinator: i32) -> Option<(String, Value)> {
    let id = v.get("group_id")?.as_str()?.to_string();
    let mut out = serde_json::Map::new();
    out.insert("group_id".into(), json!(id));
    for f in FIELDS {
        let x = v.get(f).cloned().unwrap_or(Value::Null);
        // Only scalars: a peer cannot make the page draw nested structures.
        let x = if x.is_object() || x.is_array() {
            Value::Null
        } else {
            x
        };
        out.insert(f.into(), x);
    }
    out.insert("coordinator".into(), json!(coordinator));
    Some((id, Value::Object(out)))
}

/// What the Groups page says of a node that is down (`why`) and was not asked: a note when it
/// leads no `__consumer_offsets` partition (no group can be missing for it), else a failure
/// naming how many partitions' groups are unavailable.
pub fn down_node(why: &str, offsets_led: usize) -> NodeGroups {
    if offsets_led == 0 {
        return NodeGroups::Skipped(format!("{why}; it coordinates no group"));
    }
    NodeGroups::Asked(Err(format!(
        "{why}, not asked: the groups of the {offsets_led} {} partitions it leads are unavailable",
        crate::groups::OFFSETS_TOPIC
    )))
}

/// Merges the group lists of the nodes: `answers` holds each node's `/ui/api/groups?scope=local`
/// answer (this node's own included). A group listed by two nodes (its coordinator moving) is
/// shown once, from the node that reports the later generation (the lower node id on a tie).
pub fn groups(node_id: i32, answers: Vec<(i32, NodeGroups)>) -> Value {
    let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut sorted = answers;
    sorted.sort_by_key(|(n, _)| *n);
    for (node, answer) in sorted {
        let answer = match answer {
            NodeGroups::Asked(answer) => answer,
            NodeGroups::Skipped(why) => {
                nodes.push(json!({ "node_id": node, "ok": true, "skipped": why }));
                continue;
            }
        };
        let lines = answer.and_then(|v| match v.get("groups").and_then(Value::as_array) {
            Some(a) => Ok(a.clone()),
            None => Err("the answer has no group list".to_string()),
        });
        match lines {
            Ok(lines) => {
                let truncated = lines.len() > MAX_GROUPS_PER_NODE;
                let mut count = 0usize;
                for (id, l) in lines
                    .iter()
                    .take(MAX_GROUPS_PER_NODE)
                    .filter_map(|v| line(v, node))
                {
                    count += 1;
                    let newer = match by_id.get(&id) {
                        None => true,
                        Some(old) => generation(&l) > generation(old),
                    };
                    if newer {
                        by_id.insert(id, l);
                    }
                }
                nodes.push(json!({
                    "node_id": node, "ok": true, "groups": count, "truncated": truncated,
                }));
            }
            Err(e) => nodes.push(json!({ "node_id": node, "ok": false, "error": e })),
        }
    }
    json!({
        "node_id": node_id,
        "scope": "cluster",
        "groups": by_id.into_values().collect::<Vec<_>>(),
        "nodes": nodes,
    })
}

fn generation(v: &Value) -> i64 {
    v.get("generation").and_then(Value::as_i64).unwrap_or(-1)
}

/// The most partitions taken from one node's `/ui/api/replicas` answer.
pub const MAX_REPLICAS_PER_NODE: usize = 100_000;

/// One line of a `/ui/api/replicas` answer, if it is well formed: non-negative sizes and
/// offsets, the start not past the high watermark nor that past the end.
fn replica_line(v: &Value) -> Option<(Tp, HostedReplica)> {
    let int = |k: &str| v.get(k)?.as_i64().filter(|x| *x >= 0);
    let topic = v.get("topic")?.as_str()?.to_string();
    let partition = i32::try_from(int("partition")?).ok()?;
    let r = HostedReplica {
        size_bytes: u64::try_from(int("size_bytes")?).ok()?,
        log_start_offset: int("log_start_offset")?,
        log_end_offset: int("log_end_offset")?,
        high_watermark: int("high_watermark")?,
        // A node without transactions support in its console sends none.
        last_stable_offset: int("last_stable_offset"),
    };
    let ordered = r.log_start_offset <= r.high_watermark
        && r.high_watermark <= r.log_end_offset
        && r.last_stable_offset
            .is_none_or(|lso| lso <= r.high_watermark);
    ordered.then_some(((topic, partition), r))
}

/// The sizes and offsets of the partitions other nodes lead, from their `/ui/api/replicas`
/// answers: each node's lines are kept only for the partitions `leaders` (this node's metadata)
/// says it leads, so a node cannot speak for another's partitions, and at most
/// [`MAX_REPLICAS_PER_NODE`] are read from one answer. Returns them with the nodes that could
/// not be read, and why.
pub fn led_replicas(
    answers: Vec<(i32, NodeAnswer)>,
    leaders: &HashMap<Tp, i32>,
) -> (FromLeaders, Vec<(i32, String)>) {
    let mut out = HashMap::new();
    let mut unread = Vec::new();
    for (node, answer) in answers {
        let lines = answer.and_then(|v| match v.get("replicas").and_then(Value::as_array) {
            Some(a) => Ok(a.clone()),
            None => Err("the answer has no replica list".to_string()),
        });
        match lines {
            Ok(lines) => {
                let led = lines
                    .iter()
                    .take(MAX_REPLICAS_PER_NODE)
                    .filter_map(replica_line)
                    .filter(|(tp, _)| leaders.get(tp) == Some(&node));
                out.extend(led.map(|(tp, r)| (tp, (node, r))));
            }
            Err(e) => unread.push((node, e)),
        }
    }
    unread.sort();
    (out, unread)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn list(groups: Value) -> NodeGroups {
        NodeGroups::Asked(Ok(json!({ "node_id": 99, "groups": groups })))
    }

    #[test]
    fn every_node_s_groups_are_listed_with_their_coordinator() {
        let merged = groups(
            1,
            vec![
                (
                    2,
                    list(
                        json!([{"group_id": "b", "state": "Stable", "generation": 3, "members": 2, "lag_sum": 7}]),
                    ),
                ),
                (
                    1,
                    list(
                        json!([{"group_id": "a", "state": "Empty", "generation": 0, "members": 0, "lag_sum": null}]),
                    ),
                ),
                (3, NodeGroups::Asked(Err("connecting: refused".into()))),
            ],
        );
        let g = merged["groups"].as_array().expect("groups");
        assert_eq!(g.len(), 2);
        assert_eq!(g[0]["group_id"], "a");
        assert_eq!(g[0]["coordinator"], 1);
        assert_eq!(g[1]["group_id"], "b");
        assert_eq!(
            g[1]["coordinator"], 2,
            "the node asked, not the node_id it sent"
        );
        assert_eq!(g[1]["lag_sum"], 7);
        assert_eq!(merged["node_id"], 1);
        let nodes = merged["nodes"].as_array().expect("nodes");
        assert_eq!(nodes.len(), 3);
        assert_eq!(
            nodes[2],
            json!({"node_id": 3, "ok": false, "error": "connecting: refused"})
        );
        assert_eq!(nodes[1]["groups"], 1);
    }

    #[test]
    fn a_group_listed_twice_is_shown_from_its_later_generation() {
        let merged = groups(
            1,
            vec![
                (1, list(json!([{"group_id": "g", "generation": 4}]))),
                (2, list(json!([{"group_id": "g", "generation": 5}]))),
                (3, list(json!([{"group_id": "g", "generation": 5}]))),
            ],
        );
        let g = merged["groups"].as_array().expect("groups");
        assert_eq!(g.len(), 1);
        assert_eq!(g[0]["coordinator"], 2);
        assert_eq!(g[0]["generation"], 5);
    }

    #[test]
    fn what_a_peer_sends_is_bounded_and_reshaped() {
        let many: Vec<Value> = (0..MAX_GROUPS_PER_NODE + 5)
            .map(|i| json!({"group_id": format!("g{i}"), "generation": 1}))
            .collect();
        let merged = groups(
            1,
            vec![
                (2, list(Value::Array(many))),
                (
                    3,
                    list(
                        json!([{"group_id": 5}, {"group_id": "x", "state": {"html": "<b>"}, "extra": "no"}]),
                    ),
                ),
                (4, NodeGroups::Asked(Ok(json!({"nothing": true})))),
            ],
        );
        let g = merged["groups"].as_array().expect("groups");
        assert_eq!(g.len(), MAX_GROUPS_PER_NODE + 1);
        let x = g.iter().find(|l| l["group_id"] == "x").expect("x");
        assert_eq!(x["state"], Value::Null);
        assert!(x.get("extra").is_none());
        let nodes = merged["nodes"].as_array().expect("nodes");
        assert_eq!(nodes[0]["truncated"], true);
        assert_eq!(
            nodes[1]["groups"], 1,
            "a line without a string id is dropped"
        );
        assert_eq!(nodes[2]["ok"], false);
    }

    #[test]
    fn a_node_that_is_down_and_coordinates_nothing_is_a_note_not_a_failure() {
        let merged = groups(
            0,
            vec![
                (0, list(json!([{"group_id": "g", "generation": 1}]))),
                (
                    3,
                    NodeGroups::Skipped("fenced; it coordinates no group".into()),
                ),
                (4, NodeGroups::Asked(Err("fenced, not asked".into()))),
            ],
        );
        let nodes = merged["nodes"].as_array().expect("nodes");
        assert_eq!(
            nodes[1],
            json!({"node_id": 3, "ok": true, "skipped": "fenced; it coordinates no group"})
        );
        assert_eq!(
            nodes[2]["ok"], false,
            "a node whose groups are missing stays a failure"
        );
        assert_eq!(merged["groups"].as_array().expect("groups").len(), 1);
    }

    fn sizes(topic: &str, partition: i64, hw: i64) -> Value {
        json!({"topic": topic, "partition": partition, "size_bytes": hw * 10,
               "log_start_offset": 0, "log_end_offset": hw + 1, "high_watermark": hw})
    }

    #[test]
    fn partition_sizes_are_taken_from_their_leaders_only() {
        let tp = |t: &str, p: i32| (t.to_string(), p);
        let leaders = HashMap::from([(tp("a", 0), 2), (tp("a", 1), 3), (tp("b", 0), 4)]);
        let (sizes, unread) = led_replicas(
            vec![
                // Node 2 also reports a partition node 3 leads, and a malformed line.
                (
                    2,
                    Ok(json!({"replicas": [sizes("a", 0, 7), sizes("a", 1, 1),
                    {"topic": "a", "partition": 0, "size_bytes": -1}]})),
                ),
                (3, Ok(json!({"replicas": [sizes("a", 1, 9)]}))),
                (4, Err("connecting to 127.0.0.1:1: refused".into())),
                (5, Ok(json!({"nothing": 1}))),
            ],
            &leaders,
        );
        assert_eq!(sizes.len(), 2);
        let (node, r) = sizes[&tp("a", 0)];
        assert_eq!(
            (node, r.high_watermark, r.size_bytes, r.log_end_offset),
            (2, 7, 70, 8)
        );
        assert_eq!(
            sizes[&tp("a", 1)].0,
            3,
            "the leader's numbers, not another node's"
        );
        assert_eq!(unread.iter().map(|(n, _)| *n).collect::<Vec<_>>(), [4, 5]);
        // Offsets out of order are not believed.
        let bad = json!({"replicas": [{"topic": "a", "partition": 0, "size_bytes": 1,
            "log_start_offset": 5, "log_end_offset": 9, "high_watermark": 3}]});
        assert!(led_replicas(vec![(2, Ok(bad))], &leaders).0.is_empty());
    }
}
