//! The cluster's group list from each node's own list. Pure.
//!
//! Each node lists the groups it coordinates (`/ui/api/groups?scope=local`); the console of any
//! node asks every live broker and merges their answers here. What a peer sent is bounded and
//! re-shaped: at most [`MAX_GROUPS_PER_NODE`] lines are taken from one node, each rebuilt from
//! the known fields, and its coordinator is the node that was asked, not what it claims.

use std::collections::BTreeMap;

use serde_json::{json, Value};

/// The most groups taken from one node's answer.
pub const MAX_GROUPS_PER_NODE: usize = 10_000;

/// The fields of a group line, as `view::groups` writes them.
const FIELDS: [&str; 8] = [
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

/// Merges the group lists of the nodes: `answers` holds each node's `/ui/api/groups?scope=local`
/// answer (this node's own included). A group listed by two nodes (its coordinator moving) is
/// shown once, from the node that reports the later generation (the lower node id on a tie).
pub fn groups(node_id: i32, answers: Vec<(i32, NodeAnswer)>) -> Value {
    let mut by_id: BTreeMap<String, Value> = BTreeMap::new();
    let mut nodes = Vec::new();
    let mut sorted = answers;
    sorted.sort_by_key(|(n, _)| *n);
    for (node, answer) in sorted {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn list(groups: Value) -> NodeAnswer {
        Ok(json!({ "node_id": 99, "groups": groups }))
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
                (3, Err("connecting: refused".into())),
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
                (4, Ok(json!({"nothing": true}))),
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
}
