//! What compaction does with transactions (the cleaner's part of KIP-98):
//! - it cleans only below the last stable offset, so that no record of a transaction still open
//!   (which may yet abort) shadows an earlier one of its key;
//! - records of aborted transactions are dropped and never mapped, so that an aborted record
//!   never shadows a committed one;
//! - a marker whose transaction has no record left (an abort marker's never has, once cleaned)
//!   gets a delete horizon, and goes on the first cleaning after it, as a tombstone does. A
//!   dropped abort marker's entry leaves the segment's aborted-transaction index with it: by
//!   then no record of its transaction is left for a read_committed consumer to skip.

use std::collections::BTreeMap;

use crate::batch::BatchHeader;
use crate::error::Result;
use crate::txn::{control_type, AbortedTxn, ControlType};

/// The transactions one compaction pass meets, in log order.
#[derive(Debug, Default)]
pub(crate) struct TxnCleaning {
    /// (producer id, first offset) -> offset of its abort marker: the spans of the aborted
    /// transactions whose markers lie below the cleaning's bound.
    aborted: BTreeMap<(i64, i64), i64>,
    /// Producers whose current transaction (its data since the producer's last marker) still
    /// holds a record after the keep rules.
    holding: BTreeMap<i64, bool>,
    /// Offsets of the abort markers dropped in the segment being cleaned.
    dropped_aborts: Vec<i64>,
}

/// What the keep rules make of a control batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MarkerFate {
    /// Stays byte for byte.
    Keep,
    /// Stays, rewritten with this delete horizon.
    SetHorizon(i64),
    /// Its delete horizon passed: it goes.
    Drop,
}

impl TxnCleaning {
    /// From the aborted-transaction index entries of the log, keeping those whose marker lies
    /// below `bound` (the cleaning never looks past it).
    pub(crate) fn new(entries: impl IntoIterator<Item = AbortedTxn>, bound: i64) -> TxnCleaning {
        let aborted = entries
            .into_iter()
            .filter(|e| e.last_offset < bound)
            .map(|e| ((e.producer_id, e.first_offset), e.last_offset))
            .collect();
        TxnCleaning {
            aborted,
            holding: BTreeMap::new(),
            dropped_aborts: Vec::new(),
        }
    }

    /// Whether `h` is a data batch of an aborted transaction.
    pub(crate) fn is_aborted(&self, h: &BatchHeader) -> bool {
        if !h.is_transactional() || h.is_control() {
            return false;
        }
        let (pid, at) = (h.producer_id, h.base_offset);
        self.aborted
            .range(..=(pid, at))
            .next_back()
            .is_some_and(|(&(p, first), &marker)| p == pid && first <= at && at < marker)
    }

    /// A data batch went through the keep rules, keeping `kept_any` of its records.
    pub(crate) fn data_seen(&mut self, h: &BatchHeader, kept_any: bool) {
        if h.is_transactional() && !h.is_control() {
            *self.holding.entry(h.producer_id).or_default() |= kept_any;
        }
    }

    /// The fate of control batch `batch` (header `h`) at `now_ms`; a new horizon is `now_ms +
    /// delete_retention_ms`. Ends its producer's transaction in the tracking either way. An
    /// aborted transaction's records are dropped before its marker is seen (never
    /// [`TxnCleaning::data_seen`]), so its marker is empty, unless the index lacked its entry.
    pub(crate) fn marker_fate(
        &mut self,
        h: &BatchHeader,
        batch: &[u8],
        now_ms: i64,
        delete_retention_ms: i64,
    ) -> Result<MarkerFate> {
        let kind = control_type(batch)?;
        if !matches!(kind, Some(ControlType::Commit | ControlType::Abort)) {
            return Ok(MarkerFate::Keep);
        }
        if self.holding.remove(&h.producer_id).unwrap_or(false) {
            return Ok(MarkerFate::Keep);
        }
        Ok(match h.delete_horizon() {
            Some(d) if now_ms >= d => {
                if kind == Some(ControlType::Abort) {
                    self.dropped_aborts.push(h.base_offset);
                }
                MarkerFate::Drop
            }
            Some(_) => MarkerFate::Keep,
            None => MarkerFate::SetHorizon(now_ms.saturating_add(delete_retention_ms)),
        })
    }

    /// The offsets of the abort markers dropped since the last call (one segment's).
    pub(crate) fn take_dropped_aborts(&mut self) -> Vec<i64> {
        std::mem::take(&mut self.dropped_aborts)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::records::{encode_batch, BatchSpec, Record};
    use crate::txn::{marker_batch, Marker};
    use bytes::Bytes;

    fn data(pid: i64, base: i64) -> BatchHeader {
        let spec = BatchSpec {
            base_offset: base,
            transactional: true,
            producer_id: pid,
            producer_epoch: 0,
            base_sequence: 0,
            ..BatchSpec::default()
        };
        let r = Record {
            offset: base,
            timestamp: 0,
            key: Some(Bytes::from_static(b"k")),
            value: None,
            headers: Vec::new(),
        };
        BatchHeader::parse(&encode_batch(&spec, &[r]).expect("batch")).expect("header")
    }

    fn marker(pid: i64, commit: bool) -> (BatchHeader, Vec<u8>) {
        let b = marker_batch(&Marker {
            producer_id: pid,
            producer_epoch: 0,
            coordinator_epoch: 0,
            commit,
            timestamp: 0,
        })
        .expect("marker");
        (BatchHeader::parse(&b).expect("header"), b)
    }

    fn entry(pid: i64, first: i64, last: i64) -> AbortedTxn {
        AbortedTxn {
            producer_id: pid,
            first_offset: first,
            last_offset: last,
            last_stable_offset: last + 1,
        }
    }

    #[test]
    fn a_batch_is_aborted_only_inside_its_producers_span() {
        let t = TxnCleaning::new([entry(7, 10, 20), entry(8, 30, 40)], 100);
        assert!(t.is_aborted(&data(7, 10)));
        assert!(t.is_aborted(&data(7, 19)));
        assert!(!t.is_aborted(&data(7, 9)));
        assert!(!t.is_aborted(&data(7, 21)));
        assert!(!t.is_aborted(&data(8, 15)), "another producer's span");
        assert!(t.is_aborted(&data(8, 35)));
        assert!(!t.is_aborted(&data(6, 35)));
    }

    #[test]
    fn spans_whose_marker_is_at_or_past_the_bound_do_not_count() {
        let t = TxnCleaning::new([entry(7, 10, 20)], 20);
        assert!(!t.is_aborted(&data(7, 12)));
    }

    #[test]
    fn a_commit_marker_goes_only_once_its_transaction_is_empty_and_its_horizon_passed() {
        let mut t = TxnCleaning::default();
        t.data_seen(&data(7, 0), true);
        t.data_seen(&data(7, 1), false);
        let (h, b) = marker(7, true);
        assert_eq!(
            t.marker_fate(&h, &b, 100, 50).expect("fate"),
            MarkerFate::Keep
        );
        t.data_seen(&data(7, 3), false);
        assert_eq!(
            t.marker_fate(&h, &b, 100, 50).expect("fate"),
            MarkerFate::SetHorizon(150)
        );
        // No data at all before it (compacted away earlier, or below the log start).
        assert_eq!(
            t.marker_fate(&h, &b, 100, 50).expect("fate"),
            MarkerFate::SetHorizon(150)
        );
    }

    #[test]
    fn an_abort_marker_goes_like_a_commit_marker_and_is_reported() {
        let mut t = TxnCleaning::default();
        let (h, b) = marker(7, false);
        assert_eq!(
            t.marker_fate(&h, &b, 100, 0).expect("fate"),
            MarkerFate::SetHorizon(100)
        );
        assert!(t.take_dropped_aborts().is_empty());
        // Records the index did not name as aborted were kept: the marker stays.
        t.data_seen(&data(7, 0), true);
        assert_eq!(
            t.marker_fate(&h, &b, 100, 0).expect("fate"),
            MarkerFate::Keep
        );
    }
}
