//! The checker of a replicated run's data: what the producers were acknowledged against what
//! the consumer read.

use std::collections::BTreeMap;

use crate::checker::{Property, Violation};
use crate::data::DataHistory;

/// After the first acknowledgement that follows the faults, the consumer's final pass must have
/// read every acknowledged record within this much simulated time.
pub const FINAL_PASS_BOUND_MS: u64 = 15_000;

pub fn check(d: &DataHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    // One value per offset in everything the consumer read.
    let mut at: BTreeMap<(i32, i64), (&str, u64)> = BTreeMap::new();
    let all_reads = d
        .reads
        .iter()
        .map(|r| {
            (
                r.partition,
                r.offset,
                r.value.as_str(),
                r.at_ms,
                "the consumer",
            )
        })
        .chain(d.group.reads.iter().map(|r| {
            (
                r.partition,
                r.offset,
                r.value.as_str(),
                r.at_ms,
                r.consumer.as_str(),
            )
        }));
    for (partition, offset, value, at_ms, who) in all_reads {
        match at.get(&(partition, offset)) {
            Some((v, first_ms)) if *v != value => out.push(Violation::new(
                Property::OffsetHoldsTwoRecords,
                format!("p{partition}@{offset}: read {v:?} at {first_ms} ms, and at {at_ms} ms {value:?} ({who})"),
            )),
            Some(_) => {}
            None => {
                at.insert((partition, offset), (value, at_ms));
            }
        }
        if !d.sent.contains(value) {
            out.push(Violation::new(
                Property::RecordNeverSent,
                format!("p{partition}@{offset}: {who} read {value:?}"),
            ));
        }
    }
    for r in &d.reads {
        if !r.contiguous {
            out.push(Violation::new(
                Property::ReadGap,
                format!(
                    "p{}: a fetch returned offset {} without the offsets before it (at {} ms)",
                    r.partition, r.offset, r.at_ms
                ),
            ));
        }
        if r.offset >= r.high_watermark {
            out.push(Violation::new(
                Property::ReadAboveHighWatermark,
                format!(
                    "p{}@{}: returned to a consumer with the high watermark at {} ({} ms)",
                    r.partition, r.offset, r.high_watermark, r.at_ms
                ),
            ));
        }
    }
    // The final pass: a fresh read of each log from offset 0.
    let mut final_log: BTreeMap<(i32, i64), &str> = BTreeMap::new();
    for r in d.reads.iter().filter(|r| r.final_pass) {
        final_log.insert((r.partition, r.offset), &r.value);
    }
    if d.final_pass_done.is_some() {
        for a in &d.acked_all {
            for (i, v) in a.values.iter().enumerate() {
                let offset = a.base_offset + i as i64;
                match final_log.get(&(a.partition, offset)) {
                    Some(got) if *got == v => {}
                    got => out.push(Violation::new(
                        Property::AckedRecordLost,
                        format!(
                            "p{}@{offset}: {v:?} acknowledged (acks=all) at {} ms; the log now holds {got:?}",
                            a.partition, a.at_ms
                        ),
                    )),
                }
            }
        }
        // The idempotent producer's values are unique: each may appear once in the log.
        let mut seen: BTreeMap<&str, (i32, i64)> = BTreeMap::new();
        for (&(p, o), v) in &final_log {
            if !v.starts_with('a') {
                continue;
            }
            if let Some((p0, o0)) = seen.insert(v, (p, o)) {
                out.push(Violation::new(
                    Property::IdempotentDuplicate,
                    format!("{v:?} is in the log twice: p{p0}@{o0} and p{p}@{o}"),
                ));
            }
        }
    }
    // Within one leader epoch the leader's high watermark never goes back. (Across epochs it
    // may: a new leader learns the high watermark from its followers' fetches, so it can
    // report less than its predecessor did for a while; KIP-207 / KIP-392.)
    let mut last: BTreeMap<(i32, i32), (i64, i32, u64)> = BTreeMap::new();
    for h in &d.hws {
        let key = (h.partition, h.leader_epoch);
        if let Some(&(hw, leader, at)) = last.get(&key) {
            if h.high_watermark < hw {
                out.push(Violation::new(
                    Property::HighWatermarkWentBack,
                    format!(
                        "p{} epoch {}: n{leader} reported {hw} at {at} ms, n{} {} at {} ms",
                        h.partition, h.leader_epoch, h.leader, h.high_watermark, h.at_ms
                    ),
                ));
            }
        }
        let e = last
            .entry(key)
            .or_insert((h.high_watermark, h.leader, h.at_ms));
        if h.high_watermark >= e.0 {
            *e = (h.high_watermark, h.leader, h.at_ms);
        }
    }
    match (d.first_ack_after_faults, d.final_pass_done) {
        (Some(first), Some(done)) if done > first + FINAL_PASS_BOUND_MS => {
            out.push(Violation::new(
                Property::Liveness,
                format!("the consumer read every acknowledged record at {done} ms, {} ms after the first acknowledgement that followed the faults (bound {FINAL_PASS_BOUND_MS} ms)", done - first),
            ))
        }
        (Some(_), None) => out.push(Violation::new(
            Property::Liveness,
            "the consumer never read every acknowledged record",
        )),
        _ => {}
    }
    if let Some(detail) = &d.reassignment_stuck {
        out.push(Violation::new(Property::Liveness, detail.clone()));
    }
    out.extend(d.topic_violations.iter().cloned());
    crate::group_check::check(&d.group, &mut out);
    // Report a handful per property: one broken run can repeat a finding many times.
    let mut count: BTreeMap<Property, usize> = BTreeMap::new();
    out.retain(|v| {
        let n = count.entry(v.property).or_insert(0);
        *n += 1;
        *n <= 3
    });
    out
}
