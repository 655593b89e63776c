//! A group's rebalance timeline for the console: for each rebalance its coordinator recorded, who
//! joined and who departed (and why), how long the join and sync phases took, and — comparing the
//! assignment it produced with the one before — which partitions moved between members, which were
//! revoked from members that stayed, and which were newly assigned. Pure.

use std::collections::{BTreeMap, HashMap};

use gregor_group::history::{MemberRef, RebalanceHistory, RebalanceRecord};
use serde_json::{json, Value};

type Tp = (String, i32);

/// A member's partitions from its assignment bytes (the consumer protocol's
/// `ConsumerProtocolAssignment`), sorted, with a note when they cannot be read (another
/// protocol type, or bytes a consumer would not accept).
pub(super) fn decode(consumer: bool, bytes: &[u8]) -> (Vec<Tp>, Option<String>) {
    if !consumer {
        return (Vec::new(), Some("not a consumer group".into()));
    }
    match gregor_assign::protocol::decode_assignment(bytes) {
        Ok((_, a)) => {
            let mut out: Vec<Tp> = a
                .partitions
                .into_iter()
                .flat_map(|(t, ps)| ps.into_iter().map(move |p| (t.clone(), p)))
                .collect();
            out.sort();
            (out, None)
        }
        Err(e) => (Vec::new(), Some(format!("unreadable assignment: {e}"))),
    }
}

pub(super) fn partitions_json(ps: &[Tp]) -> Vec<Value> {
    ps.iter()
        .map(|(t, p)| json!({ "topic": t, "partition": p }))
        .collect()
}

/// Who owned each partition at the end of a rebalance.
fn owners(consumer: bool, r: &RebalanceRecord) -> HashMap<Tp, String> {
    let mut out = HashMap::new();
    for (member, bytes) in &r.assignments {
        for tp in decode(consumer, bytes).0 {
            out.insert(tp, member.clone());
        }
    }
    out
}

/// Differences between the assignment before and after a rebalance.
#[derive(Debug, Default, PartialEq, Eq)]
struct Changes {
    /// Partitions whose owner changed: (partition, from, to).
    moved: Vec<(Tp, String, String)>,
    /// Partitions taken from members that are still in the group, per member.
    revoked: BTreeMap<String, Vec<Tp>>,
    /// Partitions that had no owner before, per new owner.
    assigned: BTreeMap<String, Vec<Tp>>,
}

fn changes(before: &HashMap<Tp, String>, after: &HashMap<Tp, String>, stayed: &[&str]) -> Changes {
    let mut c = Changes::default();
    for (tp, to) in after {
        match before.get(tp) {
            Some(from) if from != to => c.moved.push((tp.clone(), from.clone(), to.clone())),
            Some(_) => {}
            None => c.assigned.entry(to.clone()).or_default().push(tp.clone()),
        }
    }
    for (tp, from) in before {
        if after.get(tp) != Some(from) && stayed.contains(&from.as_str()) {
            c.revoked.entry(from.clone()).or_default().push(tp.clone());
        }
    }
    c.moved.sort();
    c.revoked.values_mut().for_each(|v| v.sort());
    c.assigned.values_mut().for_each(|v| v.sort());
    c
}

/// A member as the console names it.
fn member_ref(m: &MemberRef) -> Value {
    json!({
        "member_id": m.member_id,
        "group_instance_id": m.group_instance_id,
        "client_id": m.client_id,
        "client_host": m.client_host,
    })
}

fn find<'a>(r: &'a RebalanceRecord, member: &str) -> Option<&'a MemberRef> {
    r.members_after
        .iter()
        .chain(&r.members_before)
        .chain(r.departures.iter().map(|d| &d.member))
        .find(|m| m.member_id == member)
}

fn reference(r: &RebalanceRecord, member: &str) -> Value {
    match find(r, member) {
        Some(m) => member_ref(m),
        None => {
            json!({ "member_id": member, "client_id": "", "client_host": "", "group_instance_id": null })
        }
    }
}

/// What a completed rebalance changed against the assignment `before` it: partitions moved
/// between members, revoked from members that stayed, and newly assigned.
fn changes_json(
    r: &RebalanceRecord,
    before: &HashMap<Tp, String>,
    after: &HashMap<Tp, String>,
) -> (Vec<Value>, Vec<Value>, Vec<Value>) {
    let stayed: Vec<&str> = r
        .members_after
        .iter()
        .map(|m| m.member_id.as_str())
        .collect();
    let c = changes(before, after, &stayed);
    let moved = c
        .moved
        .iter()
        .map(|((t, p), from, to)| {
            let client = |m: &str| find(r, m).map(|x| x.client_id.clone());
            json!({
                "topic": t, "partition": p, "from": from, "to": to,
                "from_client": client(from), "to_client": client(to),
            })
        })
        .collect();
    let revoked = c
        .revoked
        .iter()
        .map(|(m, ps)| json!({ "member": reference(r, m), "partitions": partitions_json(ps) }))
        .collect();
    let assigned = c
        .assigned
        .iter()
        .map(|(m, ps)| json!({ "member": reference(r, m), "partitions": partitions_json(ps) }))
        .collect();
    (moved, revoked, assigned)
}

/// The recorded rebalances, oldest first.
pub(super) fn timeline(consumer: bool, h: &RebalanceHistory) -> Vec<Value> {
    let last = h.recent.len().saturating_sub(1);
    let mut previous: Option<HashMap<Tp, String>> = None;
    let mut out = Vec::with_capacity(h.recent.len());
    for (i, r) in h.recent.iter().enumerate() {
        let status = if r.completed_ms.is_some() {
            "completed"
        } else if i == last && h.in_progress().is_some() {
            "in progress"
        } else {
            "abandoned"
        };
        let join_ms = r.join_completed_ms.map(|t| t - r.started_ms);
        let sync_ms = r
            .completed_ms
            .zip(r.join_completed_ms)
            .map(|(end, joined)| end - joined);
        let total_ms = r.completed_ms.map(|t| t - r.started_ms);
        let joined: Vec<Value> = r.joined().into_iter().map(member_ref).collect();
        let departed: Vec<Value> = r
            .departures
            .iter()
            .map(|d| json!({ "member": member_ref(&d.member), "cause": d.cause.name(), "at_ms": d.at_ms }))
            .collect();
        let (mut moved, mut revoked, mut assigned) = (Vec::new(), Vec::new(), Vec::new());
        if r.completed_ms.is_some() {
            let after = owners(consumer, r);
            let before = previous.unwrap_or_default();
            (moved, revoked, assigned) = changes_json(r, &before, &after);
            previous = Some(after);
        }
        out.push(json!({
            "reason": r.reason,
            "from_generation": r.from_generation,
            "generation": r.generation,
            "protocol": r.protocol,
            "status": status,
            "started_ms": r.started_ms,
            "join_ms": join_ms,
            "sync_ms": sync_ms,
            "total_ms": total_ms,
            "leader": r.leader.as_deref().map(|l| reference(r, l)),
            "members_before": r.members_before.iter().map(member_ref).collect::<Vec<_>>(),
            "members_after": r.members_after.iter().map(member_ref).collect::<Vec<_>>(),
            "joined": joined,
            "departed": departed,
            "moved": moved,
            "revoked": revoked,
            "assigned": assigned,
        }));
    }
    out
}

/// When the longest rebalance shown is more than this many times the shortest, the bars are
/// drawn on a log scale: on a linear one the short ones would vanish.
const LOG_SCALE_RANGE: f64 = 20.0;

/// A rebalance's length on the bars' axis: its total, or for one not completed the phase it
/// finished (join), else nothing yet.
fn bar_ms(r: &Value) -> f64 {
    let ms = |k: &str| r[k].as_i64().unwrap_or(0).max(0) as f64;
    if r["total_ms"].is_i64() {
        ms("total_ms")
    } else {
        ms("join_ms")
    }
}

/// Puts every rebalance of `timeline` on one axis shared by all of them (not one per
/// rebalance, where 1 ms and 3 s would look alike): each gets `bar` with the widths, in percent
/// of the axis, of its join and sync phases. The axis is linear up to the longest rebalance, or
/// logarithmic (`log10(1 + ms)`) when the range is wide; the phases split a bar's length in
/// proportion to their durations. Returns the axis, with a label for the legend.
pub(super) fn scale_bars(timeline: &mut [Value]) -> Value {
    scale_bars_of(timeline, "rebalances")
}

/// [`scale_bars`] for any bars with `join_ms`, `sync_ms` and `total_ms` (the consumer groups'
/// reconciliations too); `what` names them in the label.
pub(super) fn scale_bars_of(timeline: &mut [Value], what: &str) -> Value {
    let lengths: Vec<f64> = timeline.iter().map(bar_ms).collect();
    let max = lengths.iter().cloned().fold(0.0, f64::max);
    let min = lengths
        .iter()
        .cloned()
        .filter(|&l| l > 0.0)
        .fold(max, f64::min);
    let log = max > 0.0 && max / min.max(1.0) > LOG_SCALE_RANGE;
    let axis = |ms: f64| -> f64 {
        if max <= 0.0 {
            0.0
        } else if log {
            100.0 * (1.0 + ms).log10() / (1.0 + max).log10()
        } else {
            100.0 * ms / max
        }
    };
    for (r, &len) in timeline.iter_mut().zip(&lengths) {
        let width = axis(len);
        let part = |k: &str| match r[k].as_i64() {
            Some(v) if len > 0.0 => width * (v.max(0) as f64 / len).min(1.0),
            _ => 0.0,
        };
        let (join, sync) = (part("join_ms"), part("sync_ms"));
        r["bar"] = json!({ "join_pct": round2(join), "sync_pct": round2(sync) });
    }
    let kind = if log { "log" } else { "linear" };
    let label = if log {
        format!(
            "one logarithmic axis for all {what} (log10 of 1 + ms): full width = {}, half width = {}",
            duration(max),
            duration((1.0 + max).sqrt() - 1.0)
        )
    } else {
        format!(
            "one linear axis for all {what}: full width = {}",
            duration(max)
        )
    };
    json!({ "kind": kind, "max_ms": max as i64, "label": label })
}

fn round2(x: f64) -> f64 {
    (x * 100.0).round() / 100.0
}

fn duration(ms: f64) -> String {
    if ms < 1000.0 {
        format!("{} ms", ms as i64)
    } else {
        format!("{:.2} s", ms / 1000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn owned(v: &[(&str, i32, &str)]) -> HashMap<Tp, String> {
        v.iter()
            .map(|(t, p, m)| ((t.to_string(), *p), m.to_string()))
            .collect()
    }

    #[test]
    fn moves_revocations_and_new_assignments_are_told_apart() {
        let before = owned(&[
            ("t", 0, "a"),
            ("t", 1, "a"),
            ("t", 2, "b"),
            ("t", 3, "gone"),
        ]);
        let after = owned(&[("t", 0, "a"), ("t", 1, "c"), ("t", 3, "b"), ("u", 0, "c")]);
        let c = changes(&before, &after, &["a", "b", "c"]);
        assert_eq!(
            c.moved,
            vec![
                (("t".into(), 1), "a".into(), "c".into()),
                (("t".into(), 3), "gone".into(), "b".into()),
            ]
        );
        // t-2 is no longer b's (cooperative: revoked now, assigned in the next generation);
        // t-1 left a too. The departed member's t-3 is not a revocation: it moved.
        assert_eq!(
            c.revoked,
            BTreeMap::from([
                ("a".to_string(), vec![("t".to_string(), 1)]),
                ("b".to_string(), vec![("t".to_string(), 2)]),
            ])
        );
        assert_eq!(
            c.assigned,
            BTreeMap::from([("c".to_string(), vec![("u".to_string(), 0)])])
        );
    }

    #[test]
    fn the_first_assignment_is_all_new() {
        let after = owned(&[("t", 0, "a"), ("t", 1, "b")]);
        let c = changes(&HashMap::new(), &after, &["a", "b"]);
        assert!(c.moved.is_empty() && c.revoked.is_empty());
        assert_eq!(c.assigned.len(), 2);
    }

    #[test]
    fn assignments_of_other_protocols_are_not_decoded() {
        assert_eq!(
            decode(false, b"\x00\x00"),
            (Vec::new(), Some("not a consumer group".into()))
        );
        assert_eq!(decode(true, b""), (Vec::new(), None));
        assert!(decode(true, b"\x00\x01\xff").1.is_some());
    }

    fn rebalance(join: i64, sync: Option<i64>) -> Value {
        json!({ "join_ms": join, "sync_ms": sync, "total_ms": sync.map(|s| join + s) })
    }

    #[test]
    fn bars_share_one_axis_and_a_wide_range_is_drawn_on_a_log_scale() {
        // 1 ms and 3 s: on one log axis, not both full width.
        let mut t = vec![rebalance(1, Some(0)), rebalance(2000, Some(1000))];
        let scale = scale_bars(&mut t);
        assert_eq!(scale["kind"], "log");
        assert_eq!(scale["max_ms"], 3000);
        assert!(scale["label"].as_str().expect("label").contains("3.00 s"));
        let width = |r: &Value| {
            r["bar"]["join_pct"].as_f64().expect("join")
                + r["bar"]["sync_pct"].as_f64().expect("sync")
        };
        assert!((width(&t[1]) - 100.0).abs() < 0.01, "{}", t[1]);
        assert!(width(&t[0]) < 10.0, "{}", t[0]);
        // The phases split a bar in proportion: 2 s join, 1 s sync.
        assert!((t[1]["bar"]["join_pct"].as_f64().expect("join") - 66.67).abs() < 0.01);
        // A narrow range stays linear: 100 ms is half of 200 ms; an unfinished one shows its
        // join phase.
        let mut t = vec![
            rebalance(100, Some(0)),
            rebalance(150, Some(50)),
            rebalance(20, None),
        ];
        let scale = scale_bars(&mut t);
        assert_eq!(scale["kind"], "linear");
        assert_eq!(t[0]["bar"]["join_pct"], 50.0);
        assert_eq!(t[1]["bar"], json!({"join_pct": 75.0, "sync_pct": 25.0}));
        assert_eq!(t[2]["bar"], json!({"join_pct": 10.0, "sync_pct": 0.0}));
        let mut none: Vec<Value> = vec![];
        assert_eq!(scale_bars(&mut none)["max_ms"], 0);
    }
}
