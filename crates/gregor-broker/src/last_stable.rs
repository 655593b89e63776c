//! A partition's last stable offset (LSO): read_committed consumers read no further. It is the
//! first offset of the oldest transaction a reader cannot yet know the outcome of: one still
//! open, or one whose commit or abort marker is in the log but not yet below the high
//! watermark (a new leader elected now might not have the marker, and the transaction would be
//! open there again). Without either, it is the high watermark.
//!
//! Pure: the partition tells it the oldest open transaction after every append and each
//! transaction a marker ended; readers ask with the current high watermark.
//!
//! It also remembers since when the LSO has been held at one offset below the high watermark
//! ([`LsoStall`]), fed the time by the partition whenever the high watermark moves and by the
//! metrics scrape: a transaction left open (a hanging one) shows as a stall that only grows.

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
    stall: LsoStall,
}

/// Since when the last stable offset has trailed the high watermark at the same offset.
///
/// The clock starts when the high watermark is seen above the LSO and restarts whenever the
/// LSO moves (the oldest unstable transaction ended and the next one now holds it), so it
/// measures how long one transaction has held read_committed consumers back, never the sum of
/// a stream of short ones that keep the LSO just below the high watermark.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct LsoStall {
    /// (the LSO held, since when in ms); `None` while the LSO equals the high watermark.
    held: Option<(i64, i64)>,
}

impl LsoStall {
    /// The LSO is `lso` under `high_watermark` at `now_ms`.
    pub fn observe(&mut self, lso: i64, high_watermark: i64, now_ms: i64) {
        self.held = match self.held {
            _ if lso >= high_watermark => None,
            Some((held, since)) if held == lso => Some((held, since.min(now_ms))),
            _ => Some((lso, now_ms)),
        };
    }

    /// How long the LSO has trailed the high watermark at its current offset, as of `now_ms`
    /// (0 when it does not trail it).
    pub fn stalled_ms(&self, now_ms: i64) -> i64 {
        self.held.map_or(0, |(_, since)| (now_ms - since).max(0))
    }
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

    /// The last stable offset under `high_watermark` at `now_ms`, remembering since when it
    /// has trailed it; with how long that is (ms).
    pub fn observe(&mut self, high_watermark: i64, now_ms: i64) -> (i64, i64) {
        let lso = self.last_stable_offset(high_watermark);
        self.stall.observe(lso, high_watermark, now_ms);
        (lso, self.stall.stalled_ms(now_ms))
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

    #[test]
    fn a_stall_is_timed_from_when_the_high_watermark_passed_the_lso() {
        let mut s = LastStable::default();
        assert_eq!(s.observe(10, 1_000), (10, 0), "no transaction: no stall");
        s.set_open_first(Some(10));
        assert_eq!(
            s.observe(10, 2_000),
            (10, 0),
            "the HW has not passed it yet"
        );
        assert_eq!(s.observe(12, 5_000), (10, 0), "the stall starts now");
        assert_eq!(s.observe(15, 65_000), (10, 60_000));
        assert_eq!(s.observe(15, 65_001), (10, 60_001), "past a minute");
        // The transaction ends; its marker (offset 15) must pass the HW first.
        s.set_open_first(None);
        s.completed(&ended(10, 15));
        assert_eq!(
            s.observe(15, 66_000),
            (10, 61_000),
            "marker not yet committed"
        );
        assert_eq!(
            s.observe(16, 67_000),
            (16, 0),
            "stable again: the clock stops"
        );
        assert_eq!(s.observe(16, 200_000), (16, 0));
    }

    #[test]
    fn a_new_transaction_holding_the_lso_restarts_the_clock() {
        let mut s = LastStable::default();
        s.set_open_first(Some(3));
        assert_eq!(s.observe(8, 0), (3, 0));
        assert_eq!(s.observe(8, 50_000), (3, 50_000));
        // The oldest ends and a later one (opened at 6) now holds the LSO below the HW.
        s.set_open_first(Some(6));
        s.completed(&ended(3, 7));
        assert_eq!(s.observe(9, 55_000), (6, 0), "a moved LSO is a new stall");
        assert_eq!(s.observe(9, 70_000), (6, 15_000));
    }

    #[test]
    fn a_stall_never_counts_backwards_in_time() {
        let mut t = LsoStall::default();
        t.observe(5, 9, 1_000);
        assert_eq!(
            t.stalled_ms(500),
            0,
            "a clock read before the start is no stall"
        );
        t.observe(5, 9, 400);
        assert_eq!(t.stalled_ms(1_000), 600, "the earliest sighting wins");
        t.observe(9, 9, 2_000);
        assert_eq!(t.stalled_ms(10_000), 0);
    }
}
