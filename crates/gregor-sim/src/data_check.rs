//! The checker of a replicated run's data: what the producers were acknowledged against what
//! the consumer read.

use std::collections::BTreeMap;

use crate::history::DataHistory;
use crate::property::{Property, Violation};

/// After the first acknowledgement that follows the faults, the consumer's final pass must have
/// read every acknowledged record within this much simulated time.
pub const FINAL_PASS_BOUND_MS: u64 = 15_000;

pub fn check(d: &DataHistory) -> Vec<Violation> {
    let mut out = Vec::new();
    one_value_per_offset(d, &mut out);
    consumer_reads(d, &mut out);
    group_reads_contiguous(d, &mut out);
    let final_log = FinalLog::of(d);
    acked_all_kept(d, &final_log, &mut out);
    acked_one_kept(d, &final_log, &mut out);
    idempotent_once(&final_log, &mut out);
    high_watermark_forward(d, &mut out);
    data_liveness(d, &mut out);
    out.extend(d.topic_violations.iter().cloned());
    out.extend(d.acl_violations.iter().cloned());
    out.extend(d.quota_violations.iter().cloned());
    crate::group_check::check(&d.group, &mut out);
    // Report a handful per property: one broken run can repeat a finding many times.
    let mut count: BTreeMap<Property, usize> = BTreeMap::new();
    out.retain(|v| {
        let n = count.entry(v.property).or_insert(0);
        *n += 1;
        *n <= 3
    });
    // Kept beside the standalone consumer's findings of the same property, not cut by them.
    let mut members = Vec::new();
    group_reads_below_high_watermark(d, &mut members);
    members.truncate(3);
    out.extend(members);
    out
}

/// One value per offset in everything the consumer and the group's members read, and only
/// values some producer sent.
fn one_value_per_offset(d: &DataHistory, out: &mut Vec<Violation>) {
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
}

/// The standalone consumer's fetches: consecutive offsets from the fetch offset, all below the
/// high watermark the same response reported.
fn consumer_reads(d: &DataHistory, out: &mut Vec<Violation>) {
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
}

/// A group member's `poll`s, within one incarnation, member id and generation, return each
/// partition's records at consecutive offsets: its position moves only past what it was given
/// (nobody seeks here). The first read of a generation may start anywhere (the committed
/// offset), and a position reset to the earliest offset goes back, not forward; a forward jump
/// skipped records.
fn group_reads_contiguous(d: &DataHistory, out: &mut Vec<Violation>) {
    let mut last: BTreeMap<(&str, &str, i32, i32), i64> = BTreeMap::new();
    for r in &d.group.reads {
        let key = (
            r.consumer.as_str(),
            r.member_id.as_str(),
            r.generation,
            r.partition,
        );
        if let Some(prev) = last.insert(key, r.offset) {
            if r.offset > prev + 1 {
                out.push(Violation::new(
                    Property::ReadGap,
                    format!(
                        "p{}: member {} (generation {}) was given offset {} after {prev} (at {} ms)",
                        r.partition, r.consumer, r.generation, r.offset, r.at_ms
                    ),
                ));
            }
        }
    }
}

/// A group member is never given a record at or above the highest high watermark its consumer
/// had reported for the partition when its `poll` returned it.
fn group_reads_below_high_watermark(d: &DataHistory, out: &mut Vec<Violation>) {
    for r in &d.group.reads {
        if let Some(hw) = r.high_watermark.filter(|hw| r.offset >= *hw) {
            out.push(Violation::new(
                Property::ReadAboveHighWatermark,
                format!(
                    "p{}@{}: returned to member {} (generation {}) with the high watermark at {hw} ({} ms)",
                    r.partition, r.offset, r.consumer, r.generation, r.at_ms
                ),
            ));
        }
    }
}

/// What the final pass read: a fresh read of each log from offset 0.
struct FinalLog<'a> {
    at: BTreeMap<(i32, i64), &'a str>,
    /// Per partition, the offset past the last record the final pass read: every offset below
    /// it was read (`read-gap` otherwise).
    end: BTreeMap<i32, i64>,
    /// Whether the final pass read past every acknowledged `acks=all` record.
    done: bool,
}

impl<'a> FinalLog<'a> {
    fn of(d: &'a DataHistory) -> FinalLog<'a> {
        let mut at = BTreeMap::new();
        let mut end: BTreeMap<i32, i64> = BTreeMap::new();
        for r in d.reads.iter().filter(|r| r.final_pass) {
            at.insert((r.partition, r.offset), r.value.as_str());
            let e = end.entry(r.partition).or_insert(0);
            *e = (*e).max(r.offset + 1);
        }
        FinalLog {
            at,
            end,
            done: d.final_pass_done.is_some(),
        }
    }

    /// What the final pass says is at `offset`: `Some(None)` if it read past the offset and
    /// found nothing there, `None` if it never got that far.
    fn get(&self, partition: i32, offset: i64) -> Option<Option<&'a str>> {
        match self.at.get(&(partition, offset)) {
            Some(v) => Some(Some(*v)),
            None if self.end.get(&partition).is_some_and(|e| offset < *e) => Some(None),
            None => None,
        }
    }
}

/// Every acknowledged `acks=all` record is at its offset with its value in the final pass. A
/// pass that did not complete (a liveness failure) is checked as far as it read.
fn acked_all_kept(d: &DataHistory, log: &FinalLog<'_>, out: &mut Vec<Violation>) {
    for a in &d.acked_all {
        for (i, v) in a.values.iter().enumerate() {
            let offset = a.base_offset + i as i64;
            let got = match log.get(a.partition, offset) {
                Some(got) => got,
                None if log.done => None,
                None => continue,
            };
            if got != Some(v.as_str()) {
                out.push(Violation::new(
                    Property::AckedRecordLost,
                    format!(
                        "p{}@{offset}: {v:?} acknowledged (acks=all) at {} ms; the log now holds {got:?}",
                        a.partition, a.at_ms
                    ),
                ));
            }
        }
    }
}

/// `acks=1` promises (docs/cluster.md, "What each `acks` promises") that the batch is on the
/// leader's disk when answered, so it survives that leader's crash or power loss; it does not
/// survive a change of leader before the followers copied it. So: a record acknowledged by a
/// leader in an epoch no later epoch replaced must be at its offset in the final pass. The
/// epoch is the highest one naming the acknowledging node as leader that any node's metadata
/// had shown by the acknowledgement (a deposed leader that had not heard of its successor
/// answers in its own, older epoch, and the successor's then exempts the record).
fn acked_one_kept(d: &DataHistory, log: &FinalLog<'_>, out: &mut Vec<Violation>) {
    for a in &d.acked_one {
        let epochs = || {
            d.leader_epochs
                .iter()
                .filter(move |e| e.partition == a.partition)
        };
        let at_ack = epochs()
            .filter(|e| e.at_ms <= a.at_ms && e.leader == a.leader)
            .map(|e| e.leader_epoch)
            .max();
        let Some(at_ack) = at_ack else { continue };
        if epochs().any(|e| e.leader_epoch > at_ack) {
            continue;
        }
        for (i, v) in a.values.iter().enumerate() {
            let offset = a.base_offset + i as i64;
            let Some(got) = log.get(a.partition, offset) else {
                continue;
            };
            if got != Some(v.as_str()) {
                out.push(Violation::new(
                    Property::AckedRecordLost,
                    format!(
                        "p{}@{offset}: {v:?} acknowledged (acks=1) at {} ms in leader epoch {at_ack}, which no other leader followed; the log now holds {got:?}",
                        a.partition, a.at_ms
                    ),
                ));
            }
        }
    }
}

/// The idempotent producer's values are unique: each may appear once in the log (as far as the
/// final pass read it).
fn idempotent_once(log: &FinalLog<'_>, out: &mut Vec<Violation>) {
    let mut seen: BTreeMap<&str, (i32, i64)> = BTreeMap::new();
    for (&(p, o), v) in &log.at {
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

fn high_watermark_forward(d: &DataHistory, out: &mut Vec<Violation>) {
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
}

fn data_liveness(d: &DataHistory, out: &mut Vec<Violation>) {
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{Acked, Commit, EpochSeen, GroupRead, HwSeen, Read};

    fn read(partition: i32, offset: i64, value: &str, hw: i64, final_pass: bool) -> Read {
        Read {
            partition,
            offset,
            value: value.into(),
            high_watermark: hw,
            contiguous: true,
            final_pass,
            at_ms: 100 + offset as u64,
        }
    }

    fn acked(partition: i32, leader: i32, base_offset: i64, values: &[&str], at_ms: u64) -> Acked {
        Acked {
            partition,
            leader,
            base_offset,
            values: values.iter().map(|v| v.to_string()).collect(),
            at_ms,
        }
    }

    /// Two `acks=all` records at p0@0..2, one `acks=1` record at p0@2, read during the run and
    /// in a complete final pass, all in leader epoch 1 of n0.
    fn healthy() -> DataHistory {
        let mut d = DataHistory::default();
        for v in ["a0-1", "a0-2", "b0-3"] {
            d.sent.insert(v.into());
        }
        d.acked_all.push(acked(0, 0, 0, &["a0-1", "a0-2"], 50));
        d.acked_one.push(acked(0, 0, 2, &["b0-3"], 60));
        d.leader_epochs.push(EpochSeen {
            partition: 0,
            leader_epoch: 1,
            leader: 0,
            at_ms: 10,
        });
        for final_pass in [false, true] {
            d.reads.push(read(0, 0, "a0-1", 3, final_pass));
            d.reads.push(read(0, 1, "a0-2", 3, final_pass));
            d.reads.push(read(0, 2, "b0-3", 3, final_pass));
        }
        for (hw, at_ms) in [(2, 70), (3, 80)] {
            d.hws.push(HwSeen {
                partition: 0,
                leader: 0,
                leader_epoch: 1,
                high_watermark: hw,
                at_ms,
            });
        }
        d.first_ack_after_faults = Some(1_000);
        d.final_pass_done = Some(2_000);
        d
    }

    fn properties(d: &DataHistory) -> Vec<Property> {
        check(d).into_iter().map(|v| v.property).collect()
    }

    #[test]
    fn a_healthy_history_passes() {
        assert_eq!(check(&healthy()), Vec::new());
    }

    #[test]
    fn another_value_at_a_read_offset_holds_two_records() {
        let mut d = healthy();
        d.sent.insert("b0-9".into());
        d.group.reads.push(GroupRead {
            consumer: "m0.1".into(),
            member_id: "x".into(),
            generation: 1,
            partition: 0,
            offset: 1,
            value: "b0-9".into(),
            high_watermark: Some(2),
            at_ms: 500,
        });
        assert_eq!(properties(&d), vec![Property::OffsetHoldsTwoRecords]);
    }

    #[test]
    fn a_value_nobody_sent_was_never_sent() {
        let mut d = healthy();
        d.sent.remove("b0-3");
        assert_eq!(
            properties(&d),
            vec![Property::RecordNeverSent, Property::RecordNeverSent]
        );
    }

    #[test]
    fn a_fetch_that_skips_offsets_is_a_read_gap() {
        let mut d = healthy();
        d.reads[1].contiguous = false;
        assert_eq!(properties(&d), vec![Property::ReadGap]);
    }

    #[test]
    fn a_group_member_given_offsets_with_a_hole_is_a_read_gap() {
        let member = |offset, generation| GroupRead {
            consumer: "m0.1".into(),
            member_id: "x".into(),
            generation,
            partition: 0,
            offset,
            value: ["a0-1", "a0-2", "b0-3"][offset as usize].into(),
            high_watermark: Some(3),
            at_ms: 500,
        };
        let mut d = healthy();
        // Offsets 0 then 0 again (a reset to the earliest offset) and a new generation starting
        // elsewhere (its committed offset) are no gap.
        d.group.reads = vec![member(0, 1), member(0, 1), member(0, 2)];
        assert_eq!(check(&d), Vec::new());
        d.group.reads.push(member(2, 2));
        assert_eq!(properties(&d), vec![Property::ReadGap]);
    }

    #[test]
    fn a_record_at_the_high_watermark_was_read_above_it() {
        let mut d = healthy();
        d.reads[2].high_watermark = 2;
        assert_eq!(properties(&d), vec![Property::ReadAboveHighWatermark]);
    }

    #[test]
    fn a_group_member_given_a_record_at_its_high_watermark_read_above_it() {
        let member = |offset, high_watermark| GroupRead {
            consumer: "m0.1".into(),
            member_id: "x".into(),
            generation: 1,
            partition: 0,
            offset,
            value: ["a0-1", "a0-2", "b0-3"][offset as usize].into(),
            high_watermark,
            at_ms: 500,
        };
        let mut d = healthy();
        // Below the high watermark, or before any was reported, is no finding.
        d.group.reads = vec![member(0, None), member(1, Some(2))];
        assert_eq!(check(&d), Vec::new());
        d.group.reads.push(member(2, Some(2)));
        assert_eq!(properties(&d), vec![Property::ReadAboveHighWatermark]);
    }

    #[test]
    fn an_acks_all_record_missing_from_the_final_pass_is_lost() {
        let mut d = healthy();
        d.reads.retain(|r| !(r.final_pass && r.offset == 1));
        d.reads.iter_mut().for_each(|r| r.contiguous = true);
        assert_eq!(properties(&d), vec![Property::AckedRecordLost]);
    }

    #[test]
    fn a_final_pass_that_did_not_complete_is_checked_as_far_as_it_read() {
        let mut d = healthy();
        d.final_pass_done = None;
        d.reads.retain(|r| !(r.final_pass && r.offset >= 1));
        // Offset 1 was not reached: only the pass's own liveness failure.
        assert_eq!(properties(&d), vec![Property::Liveness]);
        // A replaced record below where it got is still lost.
        d.sent.insert("b0-7".into());
        d.reads
            .iter_mut()
            .filter(|r| r.final_pass)
            .for_each(|r| r.value = "b0-7".into());
        let p = properties(&d);
        assert!(p.contains(&Property::AckedRecordLost), "{p:?}");
        assert!(p.contains(&Property::OffsetHoldsTwoRecords), "{p:?}");
    }

    #[test]
    fn an_acks_1_record_is_lost_only_if_no_new_leader_followed_its_own() {
        let mut d = healthy();
        // The final pass reads p0@0..2 only: offset 2 is gone, the log shorter.
        d.acked_one[0].base_offset = 1;
        d.acked_one[0].values = vec!["b0-3".into()];
        d.reads.retain(|r| !(r.final_pass && r.offset == 2));
        assert_eq!(properties(&d), vec![Property::AckedRecordLost]);
        // A later leader epoch (another leader elected before the followers copied it) is
        // what acks=1 does not survive.
        d.leader_epochs.push(EpochSeen {
            partition: 0,
            leader_epoch: 2,
            leader: 1,
            at_ms: 65,
        });
        assert_eq!(check(&d), Vec::new());
    }

    #[test]
    fn an_acks_1_answer_from_a_deposed_leader_promises_nothing_past_its_successor() {
        let mut d = healthy();
        // n1 led epoch 2 before n0 (which led epoch 1) answered: n0 answered as a deposed
        // leader, and its record is gone.
        d.leader_epochs.push(EpochSeen {
            partition: 0,
            leader_epoch: 2,
            leader: 1,
            at_ms: 55,
        });
        d.reads
            .iter_mut()
            .filter(|r| r.offset == 2)
            .for_each(|r| r.value = "a0-2".into());
        let p = properties(&d);
        assert!(!p.contains(&Property::AckedRecordLost), "{p:?}");
    }

    #[test]
    fn a_value_of_the_idempotent_producer_twice_in_the_log_is_a_duplicate() {
        let mut d = healthy();
        for r in d.reads.iter_mut().filter(|r| r.offset == 2) {
            r.value = "a0-2".into();
        }
        d.acked_one.clear();
        assert_eq!(properties(&d), vec![Property::IdempotentDuplicate]);
    }

    #[test]
    fn a_high_watermark_going_back_within_an_epoch_is_reported_but_not_across_epochs() {
        let mut d = healthy();
        let back = |epoch| HwSeen {
            partition: 0,
            leader: 1,
            leader_epoch: epoch,
            high_watermark: 1,
            at_ms: 90,
        };
        d.hws.push(back(2));
        assert_eq!(check(&d), Vec::new());
        d.hws.push(back(1));
        assert_eq!(properties(&d), vec![Property::HighWatermarkWentBack]);
    }

    #[test]
    fn a_final_pass_past_its_bound_or_never_done_is_a_liveness_failure() {
        let mut d = healthy();
        d.final_pass_done = Some(1_000 + FINAL_PASS_BOUND_MS + 1);
        assert_eq!(properties(&d), vec![Property::Liveness]);
        d.final_pass_done = None;
        assert_eq!(properties(&d), vec![Property::Liveness]);
    }

    #[test]
    fn group_violations_join_the_data_checks() {
        let mut d = healthy();
        let commit = |offset, at_ms| Commit {
            consumer: "m0.1".into(),
            generation: 1,
            partition: 0,
            offset,
            at_ms,
        };
        d.group.commits = vec![commit(2, 100), commit(1, 200)];
        let p = properties(&d);
        assert!(p.contains(&Property::CommittedOffsetWentBack), "{p:?}");
        assert!(p.contains(&Property::GroupSkippedRecords), "{p:?}");
    }
}
