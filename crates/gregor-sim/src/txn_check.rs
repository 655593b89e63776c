//! `--transactions`: what the transactional producers were told against what the
//! read_committed consumer read at the end (`txn.rs`, `txn_read.rs`).

use std::collections::BTreeMap;

use crate::history::{TxnHistory, TxnOutcome};
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
        let what = format!(
            "{} (producer {} epoch {})",
            txn.client, txn.producer_id, txn.epoch
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
    }
}
