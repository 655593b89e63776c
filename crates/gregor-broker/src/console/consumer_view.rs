//! The JSON of KIP-848 consumer groups (`group.protocol=consumer`): their lines on the Groups
//! page and their detail view, from what their coordinator shard observed.

use std::collections::HashMap;

use serde_json::{json, Value};

use super::view::{lag_level, lag_sum, offset_json, offset_lags, Visible, LAG_HIGH, LAG_WARN};
use crate::groups::{ConsumerGroupObservation, ConsumerMemberObservation};

/// The consumer groups the principal may DESCRIBE, one Groups-page line each, as the classic
/// groups' lines (`generation` holds the group epoch, which the merge compares).
pub fn lines(
    node_id: i32,
    observed: &[ConsumerGroupObservation],
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Vec<Value> {
    observed
        .iter()
        .filter(|g| (visible.group)(&g.group_id))
        .map(|g| {
            json!({
                "group_id": g.group_id,
                "type": "consumer",
                "state": g.state,
                "protocol_type": "consumer",
                "protocol": Value::Null,
                "generation": g.group_epoch,
                "members": g.members,
                "lag_sum": lag_sum(&offset_lags(&g.offsets, hws, visible)),
                "rebalances": g.stats.targets,
                "rebalancing": g.state != "Stable" && g.state != "Empty",
                "coordinator": node_id,
            })
        })
        .collect()
}

/// `[{topic, partition}]`, sorted, as the classic members' assignments.
fn partitions_json(parts: &[(String, i32)]) -> Value {
    let mut parts = parts.to_vec();
    parts.sort();
    json!(super::timeline::partitions_json(&parts))
}

fn member_json(m: &ConsumerMemberObservation, lag: Option<i64>) -> Value {
    json!({
        "member_id": m.member_id,
        "group_instance_id": m.instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
        "member_epoch": m.member_epoch,
        "member_state": m.state,
        "assignment": partitions_json(&m.assigned),
        "pending_revocation": partitions_json(&m.pending_revocation),
        "target": partitions_json(&m.target),
        "classic_protocol": m.classic,
        "lag_sum": lag,
        "lag_level": lag_level(lag),
    })
}

/// The reconciliation figures: how many completed, their last and mean duration, and the one
/// under way (since when).
fn reconciliation_json(g: &ConsumerGroupObservation) -> Value {
    let s = &g.stats;
    let mean = (s.reconciliations > 0)
        .then(|| s.reconciliation_ms_total as f64 / s.reconciliations as f64);
    json!({
        "count": s.reconciliations,
        "total_ms": s.reconciliation_ms_total,
        "last_ms": s.last_reconciliation_ms,
        "mean_ms": mean,
        "in_progress": s.reconciling_since_ms.is_some(),
        "since_ms": s.reconciling_since_ms,
        "targets_computed": s.targets,
        "assignment_count": g.assignment.count,
        "assignment_last_ms": g.assignment.last_seconds * 1000.0,
        "assignment_total_ms": g.assignment.seconds_total * 1000.0,
    })
}

/// One consumer group in full: epochs, members with their current, pending and target
/// partitions, committed offsets and lag of the topics the principal may see (assignments are
/// shown whole, as ConsumerGroupDescribe shows them), reconciliation figures.
pub fn group(
    node_id: i32,
    g: &ConsumerGroupObservation,
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Value {
    let lags = offset_lags(&g.offsets, hws, visible);
    let mut owner: HashMap<(&str, i32), &str> = HashMap::new();
    let members: Vec<Value> = g
        .member_list
        .iter()
        .map(|m| {
            for (t, p) in &m.assigned {
                owner.insert((t.as_str(), *p), m.member_id.as_str());
            }
            let lag = lags
                .iter()
                .filter(|l| {
                    m.assigned
                        .iter()
                        .any(|(t, p)| *t == l.topic && *p == l.partition)
                })
                .filter_map(|l| l.lag)
                .reduce(|a, b| a + b);
            member_json(m, lag)
        })
        .collect();
    let offsets: Vec<Value> = lags
        .iter()
        .map(|l| offset_json(l, owner.get(&(l.topic.as_str(), l.partition)).copied()))
        .collect();
    json!({
        "node_id": node_id,
        "coordinator": node_id,
        "type": "consumer",
        "group_id": g.group_id,
        "state": g.state,
        "protocol_type": "consumer",
        "group_epoch": g.group_epoch,
        "target_assignment_epoch": g.target_epoch,
        "classic_members": g.classic_members,
        "members": members,
        "offsets": offsets,
        "lag_sum": lag_sum(&lags),
        "lag_thresholds": { "warn": LAG_WARN, "high": LAG_HIGH },
        "reconciliation": reconciliation_json(g),
    })
}

#[cfg(test)]
#[path = "consumer_view_tests.rs"]
mod tests;
