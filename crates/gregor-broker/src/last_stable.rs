//! A partition's last stable offset (LSO): read_committed consumers read no further. It is the
//! first offset of the oldest transaction a reader cannot yet know the outcome of: one still
//! open, or one whose commit or abort marker is in the log but not yet below the high
//! watermark (a new leader elected now might not have the marker, and the transaction would be
//! open there again). Without either, it is the high watermark.
//!
//! Pure: the partition tells it the oldest open transaction after every append and each
//! transaction a marker ended; readers ask with the current high watermark.

use std::collections::VecDeque;

use gregor_log::txn::CompletedTxn;

/// What bounds the last stable offset below the high watermark.
#[derive(Debug, Default)]
pub struct LastStable {
    /// First offset of the oldest open transaction.
    open_first: Option<i64>,
    /// Ended transactions whose marker may still be above the high watermark: (marker
    /// offset, first offset), in marker order.
    unreplicated: VecDeque<(i64, i64)>,
}

impl LastStable {
    /// The oldest open transaction now starts at `first` (`None`: none is open).
    pub fn set_open_first(&mut self, first: Option<i64>) {
        self.open_first = first;
    }

    /// A marker ended `c`; it stays unstable until the high watermark passes its marker.
    pub fn completed(&mut self, c: &CompletedTxn) {
        debug_assert!(self
            .unreplicated
            .back()
            .is_none_or(|(marker, _)| *marker < c.last_offset));
        self.unreplicated.push_back((c.last_offset, c.first_offset));
    }

    /// Forgets the ended transactions (after a truncation, whose replay tells them again).
    pub fn clear_completed(&mut self) {
        self.unreplicated.clear();
    }

    /// The last stable offset under `high_watermark`.
    pub fn last_stable_offset(&mut self, high_watermark: i64) -> i64 {
        while self
            .unreplicated
            .front()
            .is_some_and(|(marker, _)| *marker < high_watermark)
        {
            self.unreplicated.pop_front();
        }
        let unreplicated = self.unreplicated.iter().map(|(_, first)| *first).min();
        [Some(high_watermark), self.open_first, unreplicated]
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(high_watermark)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ended(first_offset: i64, last_offset: i64) -> CompletedTxn {
        CompletedTxn {
            producer_id: 1,
            first_offset,
            last_offset,
            aborted: false,
        }
    }

    #[test]
    fn an_open_transaction_holds_the_lso_at_its_first_offset() {
        let mut s = LastStable::default();
        assert_eq!(s.last_stable_offset(10), 10);
        s.set_open_first(Some(4));
        assert_eq!(s.last_stable_offset(10), 4);
        assert_eq!(s.last_stable_offset(3), 3, "never above the high watermark");
    }

    #[test]
    fn an_ended_transaction_is_unstable_until_its_marker_is_below_the_high_watermark() {
        let mut s = LastStable::default();
        s.completed(&ended(4, 9));
        assert_eq!(
            s.last_stable_offset(9),
            4,
            "the marker at 9 is not committed"
        );
        assert_eq!(s.last_stable_offset(10), 10);
        // Once passed, it stays forgotten.
        assert_eq!(s.last_stable_offset(9), 9);
        s.completed(&ended(2, 12));
        s.set_open_first(Some(11));
        assert_eq!(s.last_stable_offset(12), 2);
        s.clear_completed();
        assert_eq!(s.last_stable_offset(12), 11);
    }
}
