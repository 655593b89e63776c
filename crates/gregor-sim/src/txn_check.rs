//! `--transactions`: what the transactional producers were told against what the
//! read_committed consumer read at the end (`txn.rs`, `txn_read.rs`), and what OffsetFetch
//! said of the offsets the transactions committed (`txn_offsets.rs`).

use std::collections::BTreeMap;

use crate::history::{TxnHistory, TxnOutcome, TxnRecord};
use crate::property::{Property, Violation};

/// Examples named in one violation's detail.
const EXAMPLES: usize = 3;

/// Every transactional property of the run.
pub fn check(t: &TxnHistory) -> Vec<Violation> {
    let mut seen: BTreeMap<&str, usize> = BTreeMap::new();
    for (_, _, v) in &t.committed_reads {
        *seen.entry(v.as_str()).or_default() += 1;
    }
    let count = |v: &str| seen.get(v).copied().unwrap_or(0);
    let mut found: BTreeMap<Property, Vec<String>> = BTreeMap::new();
    let mut report = |p: Property, detail: String| found.entry(p).or_default().push(detail);
    for txn in &t.txns {
        let next = txn
            .next_identity
            .map_or(String::new(), |(id, e)| format!(", then {id}/{e}"));
        let what = format!(
            "{} (producer {} epoch {}, version {}{next})",
            txn.client, txn.producer_id, txn.epoch, txn.version
        );
        let visible: Vec<&str> = txn
            .values
            .iter()
            .map(|(_, v)| v.as_str())
            .filter(|v| count(v) > 0)
            .collect();
        let twice: Vec<&str> = txn
            .values
            .iter()
            .map(|(_, v)| v.as_str())
            .filter(|v| count(v) > 1)
            .collect();
        match txn.outcome {
            TxnOutcome::Aborted if !visible.is_empty() => report(
                Property::TxnAbortedVisible,
                format!("{what}: aborted, yet read_committed reads {visible:?}"),
            ),
            // A pass that did not reach the end proves nothing missing.
            TxnOutcome::Committed if t.read_done && visible.len() < txn.values.len() => report(
                Property::TxnCommittedLost,
                format!(
                    "{what}: committed {:?}, read_committed reads only {visible:?}",
                    txn.values
                ),
            ),
            TxnOutcome::Unknown
                if t.read_done && !visible.is_empty() && visible.len() < txn.values.len() =>
            {
                report(
                    Property::TxnNotAtomic,
                    format!(
                        "{what}: outcome unknown, {:?} sent, only {visible:?} read",
                        txn.values
                    ),
                )
            }
            _ => {}
        }
        if !twice.is_empty() {
            report(
                Property::TxnCommittedLost,
                format!("{what}: {twice:?} read more than once"),
            );
        }
    }
    for (client, v) in &t.fenced_values {
        if count(v) > 0 {
            report(
                Property::TxnFencedAccepted,
                format!("{client} wrote {v} after it was fenced, and it is visible"),
            );
        }
    }
    for ack in &t.fenced_acks {
        report(Property::TxnFencedAccepted, ack.clone());
    }
    for ack in &t.late_retry_acks {
        report(Property::TxnLateRetryAccepted, ack.clone());
    }
    check_offsets(t, &mut report);
    if let Some(stuck) = &t.lso_stuck {
        report(
            Property::LsoStuck,
            format!("the last stable offsets did not reach the high watermarks: {stuck}"),
        );
    }
    found
        .into_iter()
        .map(|(p, details)| {
            let n = details.len();
            let shown: Vec<String> = details.into_iter().take(EXAMPLES).collect();
            Violation::new(p, format!("{n} case(s): {}", shown.join("; ")))
        })
        .collect()
}

/// `txn-offsets-early`: no OffsetFetch made while a transaction's offset was pending gave it
/// out. `txn-offsets-lost`: each group's final committed offset is its last committed
/// transaction's (none before any), or that of a transaction of unknown outcome after it.
fn check_offsets(t: &TxnHistory, report: &mut impl FnMut(Property, String)) {
    for p in &t.offset_probes {
        if p.answer == Some(Ok(p.pending)) {
            report(
                Property::TxnOffsetsEarly,
                format!(
                    "OffsetFetch of {} (require_stable {}) answered {}, pending in {}'s open transaction",
                    p.group, p.require_stable, p.pending, p.client
                ),
            );
        }
    }
    for (group, &read) in &t.final_offsets {
        let txns: Vec<(&TxnRecord, i64)> = t
            .txns
            .iter()
            .filter_map(|x| match &x.offset {
                Some((g, o)) if g == group => Some((x, *o)),
                _ => None,
            })
            .collect();
        let last = txns
            .iter()
            .rposition(|(x, _)| x.outcome == TxnOutcome::Committed);
        let expected = last.map_or(-1, |i| txns[i].1);
        let after = last.map_or(0, |i| i + 1);
        let allowed = read == expected
            || txns[after..]
                .iter()
                .any(|(x, o)| x.outcome == TxnOutcome::Unknown && *o == read);
        if allowed {
            continue;
        }
        let by = txns.iter().find(|(_, o)| *o == read).map_or_else(
            || "no transaction".to_string(),
            |(x, _)| format!("{} ({:?})", x.client, x.outcome),
        );
        report(
            Property::TxnOffsetsLost,
            format!("{group}: committed offset {read} (written by {by}), expected {expected}"),
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::TxnRecord;

    fn txn(client: &str, values: &[&str], outcome: TxnOutcome) -> TxnRecord {
        TxnRecord {
            client: client.into(),
            producer_id: 1,
            epoch: 0,
            values: values.iter().map(|v| (0, v.to_string())).collect(),
            outcome,
            offset: None,
            version: 1,
            next_identity: None,
        }
    }

    fn history(txns: Vec<TxnRecord>, read: &[&str]) -> TxnHistory {
        TxnHistory {
            txns,
            committed_reads: read
                .iter()
                .enumerate()
                .map(|(i, v)| (0, i as i64, v.to_string()))
                .collect(),
            read_done: true,
            ..TxnHistory::default()
        }
    }

    fn properties(t: &TxnHistory) -> Vec<Property> {
        check(t).into_iter().map(|v| v.property).collect()
    }

    #[test]
    fn a_consistent_history_passes() {
        let t = history(
            vec![
                txn("t0.1", &["a", "b"], TxnOutcome::Committed),
                txn("t0.1", &["c"], TxnOutcome::Aborted),
                txn("t0.1", &["d", "e"], TxnOutcome::Unknown),
                txn("t0.1", &["f", "g"], TxnOutcome::Unknown),
            ],
            &["a", "b", "d", "e"],
        );
        assert!(check(&t).is_empty(), "{:?}", check(&t));
    }

    #[test]
    fn each_property_fails_on_its_own_history() {
        let aborted = history(vec![txn("t0.1", &["c"], TxnOutcome::Aborted)], &["c"]);
        assert_eq!(properties(&aborted), vec![Property::TxnAbortedVisible]);
        let lost = history(
            vec![txn("t0.1", &["a", "b"], TxnOutcome::Committed)],
            &["a"],
        );
        assert_eq!(properties(&lost), vec![Property::TxnCommittedLost]);
        let twice = history(
            vec![txn("t0.1", &["a"], TxnOutcome::Committed)],
            &["a", "a"],
        );
        assert_eq!(properties(&twice), vec![Property::TxnCommittedLost]);
        let half = history(vec![txn("t0.1", &["d", "e"], TxnOutcome::Unknown)], &["e"]);
        assert_eq!(properties(&half), vec![Property::TxnNotAtomic]);
        let mut fenced = history(Vec::new(), &["z"]);
        fenced.fenced_values.push(("t0.1".into(), "z".into()));
        assert_eq!(properties(&fenced), vec![Property::TxnFencedAccepted]);
        let stuck = TxnHistory {
            lso_stuck: Some("p0".into()),
            ..TxnHistory::default()
        };
        assert_eq!(properties(&stuck), vec![Property::LsoStuck]);
        let mut late = history(Vec::new(), &[]);
        late.late_retry_acks
            .push("t1.1 late retry acknowledged".into());
        assert_eq!(properties(&late), vec![Property::TxnLateRetryAccepted]);
    }

    fn with_offset(outcome: TxnOutcome, offset: i64) -> TxnRecord {
        TxnRecord {
            offset: Some(("g".into(), offset)),
            ..txn("t0.1", &[], outcome)
        }
    }

    fn offsets(txns: Vec<TxnRecord>, read: i64) -> TxnHistory {
        let mut t = history(txns, &[]);
        t.final_offsets.insert("g".into(), read);
        t
    }

    #[test]
    fn a_group_ends_at_its_last_committed_offset() {
        let committed = || with_offset(TxnOutcome::Committed, 1);
        let txns = |last| vec![committed(), with_offset(TxnOutcome::Aborted, 2), last];
        // The last commit, or a later transaction of unknown outcome.
        let unknown = || with_offset(TxnOutcome::Unknown, 3);
        assert!(check(&offsets(txns(unknown()), 1)).is_empty());
        assert!(check(&offsets(txns(unknown()), 3)).is_empty());
        assert!(check(&offsets(vec![], -1)).is_empty());
        // An aborted transaction's offset, a commit lost, one never committed.
        let lost = vec![Property::TxnOffsetsLost];
        assert_eq!(properties(&offsets(txns(unknown()), 2)), lost);
        let later = with_offset(TxnOutcome::Committed, 4);
        assert_eq!(properties(&offsets(txns(later.clone()), 1)), lost);
        assert_eq!(properties(&offsets(txns(later), 3)), lost);
        assert_eq!(properties(&offsets(vec![committed()], -1)), lost);
    }

    #[test]
    fn a_pending_offset_fetched_is_early() {
        let mut t = history(Vec::new(), &[]);
        let probe = |answer| crate::history::OffsetProbe {
            client: "t0.1".into(),
            group: "g".into(),
            pending: 7,
            require_stable: true,
            answer,
        };
        t.offset_probes.push(probe(Some(Ok(5))));
        t.offset_probes.push(probe(Some(Err(88))));
        t.offset_probes.push(probe(None));
        assert!(check(&t).is_empty());
        t.offset_probes.push(probe(Some(Ok(7))));
        assert_eq!(properties(&t), vec![Property::TxnOffsetsEarly]);
    }
}
