//! The JSON of KIP-848 consumer groups (`group.protocol=consumer`): their lines on the Groups
//! page and their detail view, from what their coordinator shard observed.

use std::collections::{BTreeMap, HashMap};

use gregor_group::consumer::epochs::{EpochRecord, MemberTarget, Progress, RECENT_EPOCHS};
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
/// shown whole, as ConsumerGroupDescribe shows them), reconciliation figures, and the recent
/// epochs with their targets and each member's reconciliation on one time axis.
pub fn group(
    node_id: i32,
    g: &ConsumerGroupObservation,
    hws: &HashMap<(String, i32), i64>,
    visible: &Visible<'_>,
) -> Value {
    let lags = offset_lags(&g.offsets, hws, visible);
    // By partition, so a member's lag costs its own partitions.
    let lag_of: BTreeMap<(&str, i32), i64> = lags
        .iter()
        .filter_map(|l| Some(((l.topic.as_str(), l.partition), l.lag?)))
        .collect();
    let mut owner: BTreeMap<(&str, i32), &str> = BTreeMap::new();
    let members: Vec<Value> = g
        .member_list
        .iter()
        .map(|m| {
            for (t, p) in &m.assigned {
                owner.insert((t.as_str(), *p), m.member_id.as_str());
            }
            let lag = m
                .assigned
                .iter()
                .filter_map(|(t, p)| lag_of.get(&(t.as_str(), *p)).copied())
                .reduce(|a, b| a + b);
            member_json(m, lag)
        })
        .collect();
    let offsets: Vec<Value> = lags
        .iter()
        .map(|l| offset_json(l, owner.get(&(l.topic.as_str(), l.partition)).copied()))
        .collect();
    let (epochs, epochs_scale) = epochs_json(g);
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
        "epochs": epochs,
        "epochs_scale": epochs_scale,
        "epochs_capacity": RECENT_EPOCHS,
        "coordinator_since_ms": g.coordinator_since_ms,
    })
}

/// Where an epoch got to: no target yet (or never: a newer epoch came first), every member of
/// its target holding it, some still on their way, or over without all of them getting there.
fn epoch_status(r: &EpochRecord) -> &'static str {
    let all = |p: fn(&Progress) -> bool| r.members.values().all(|m| p(&m.progress));
    if r.target_ms.is_none() {
        "no target"
    } else if all(|p| matches!(p, Progress::Reconciled { .. })) {
        "reconciled"
    } else if !all(|p| *p != Progress::Reconciling) {
        "reconciling"
    } else {
        "ended"
    }
}

/// A target's partitions by topic name (an id no longer subscribed in hex).
fn target_json(m: &MemberTarget, names: &BTreeMap<u128, String>) -> Value {
    let parts: Vec<(String, i32)> = m
        .partitions
        .iter()
        .map(|(id, p)| {
            let topic = names.get(id).cloned();
            (topic.unwrap_or_else(|| format!("{id:032x}")), *p)
        })
        .collect();
    partitions_json(&parts)
}

/// One member of an epoch's target, with its bar's phases: waiting for the target (from the
/// epoch's start until its target was computed), then reconciling until it held its target
/// (or left, was fenced, or a newer target came); no end while it reconciles.
fn epoch_member_json(
    r: &EpochRecord,
    id: &str,
    m: &MemberTarget,
    names: &BTreeMap<u128, String>,
) -> Value {
    let done = m.progress.at_ms();
    json!({
        "member_id": id,
        "client_id": m.client_id,
        "target": target_json(m, names),
        "target_count": m.count,
        "progress": m.progress.name(),
        "done_ms": done,
        "wait_ms": r.target_ms.map(|t| t - r.at_ms),
        "reconcile_ms": done.zip(r.target_ms).map(|(d, t)| d - t),
        "total_ms": done.map(|d| d - r.at_ms),
    })
}

/// The recorded epochs, oldest first, and the axis all their members' bars share (as the
/// classic groups' rebalance timeline: `timeline::scale_bars_of`).
fn epochs_json(g: &ConsumerGroupObservation) -> (Vec<Value>, Value) {
    let mut epochs: Vec<Value> = Vec::with_capacity(g.epochs.len());
    let mut bars: Vec<Value> = Vec::new();
    for r in &g.epochs {
        let members: Vec<Value> = r
            .members
            .iter()
            .map(|(id, m)| epoch_member_json(r, id, m, &g.topic_names))
            .collect();
        bars.extend(members.iter().map(|m| {
            json!({ "join_ms": m["wait_ms"], "sync_ms": m["reconcile_ms"], "total_ms": m["total_ms"] })
        }));
        let cause_member = r
            .cause
            .member
            .as_ref()
            .map(|(id, client)| json!({ "member_id": id, "client_id": client }));
        epochs.push(json!({
            "epoch": r.epoch,
            "at_ms": r.at_ms,
            "cause": r.cause.kind.name(),
            "cause_member": cause_member,
            "target_ms": r.target_ms,
            "status": epoch_status(r),
            "members": members,
            "members_omitted": r.members_omitted,
            "assignor": r.assignor,
            "moves": r.moves,
            "moves_omitted": r.moves_omitted,
        }));
    }
    let scale = super::timeline::scale_bars_of(&mut bars, "reconciliations");
    let mut bars = bars.into_iter();
    for e in &mut epochs {
        for m in e["members"].as_array_mut().into_iter().flatten() {
            let bar = bars.next().unwrap_or_default();
            m["bar"] = json!({
                "wait_pct": bar["bar"]["join_pct"],
                "reconcile_pct": bar["bar"]["sync_pct"],
            });
        }
    }
    (epochs, scale)
}

#[cfg(test)]
#[path = "consumer_view_tests.rs"]
mod tests;
