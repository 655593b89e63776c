//! The high watermarks of partitions led by other nodes, as their leaders last answered
//! ListOffsets (latest, read_uncommitted), for the consumer lag of the groups this node
//! coordinates. Pure: the time is passed in, the lookups are made by the caller.
//!
//! A refresh is planned at most every [`REFRESH_EVERY_MS`], one at a time; a value older than
//! [`MAX_AGE_MS`], or whose last lookup failed, is not used (the lag is left out rather than
//! computed from a stale high watermark). The entries are bounded by the partitions the
//! coordinator's own groups committed: anything not asked for in a refresh is dropped.

use std::collections::{HashMap, HashSet};

pub type Tp = (String, i32);

/// How often the leaders are asked again, at most.
pub const REFRESH_EVERY_MS: i64 = 2_000;
/// The oldest high watermark used for a lag.
pub const MAX_AGE_MS: i64 = 10_000;
/// A refresh still running after this long is presumed lost, and another may start.
pub const REFRESH_ABANDONED_MS: i64 = 15_000;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Entry {
    high_watermark: i64,
    at_ms: i64,
}

/// The cache; see the module documentation.
#[derive(Debug, Default)]
pub struct HighWatermarkCache {
    entries: HashMap<Tp, Entry>,
    /// When the refresh under way started.
    refreshing_since: Option<i64>,
    /// When the last refresh started.
    last_started: Option<i64>,
    /// Lookups that failed (a leader that did not answer, or answered an error), since start.
    failures: u64,
}

impl HighWatermarkCache {
    /// The high watermark of `tp` if it was looked up within [`MAX_AGE_MS`] of `now_ms`.
    pub fn get(&self, tp: &Tp, now_ms: i64) -> Option<i64> {
        let e = self.entries.get(tp)?;
        (now_ms - e.at_ms <= MAX_AGE_MS && e.at_ms <= now_ms).then_some(e.high_watermark)
    }

    /// Whether a refresh of `wanted` should start now; if so it is marked as under way and
    /// the caller must report it with [`HighWatermarkCache::refreshed`]. A refresh starts when
    /// none runs and the last one started [`REFRESH_EVERY_MS`] ago, or sooner when a wanted
    /// partition has never been looked up.
    pub fn start_refresh(&mut self, wanted: &HashSet<Tp>, now_ms: i64) -> bool {
        if wanted.is_empty() {
            return false;
        }
        if let Some(since) = self.refreshing_since {
            if now_ms - since < REFRESH_ABANDONED_MS {
                return false;
            }
        }
        let due = match self.last_started {
            None => true,
            Some(at) => {
                now_ms - at >= REFRESH_EVERY_MS
                    || wanted.iter().any(|tp| !self.entries.contains_key(tp))
            }
        };
        if due {
            self.refreshing_since = Some(now_ms);
            self.last_started = Some(now_ms);
        }
        due
    }

    /// The results of the refresh that started at `started_ms`: each asked partition with its
    /// leader's high watermark, or `None` when the lookup failed (its old value is dropped).
    /// Partitions not asked for are dropped too.
    pub fn refreshed(&mut self, started_ms: i64, results: Vec<(Tp, Option<i64>)>, now_ms: i64) {
        if self.refreshing_since == Some(started_ms) {
            self.refreshing_since = None;
        }
        let asked: HashSet<&Tp> = results.iter().map(|(tp, _)| tp).collect();
        self.entries.retain(|tp, _| asked.contains(tp));
        for (tp, hw) in results {
            match hw {
                Some(high_watermark) => {
                    self.entries.insert(
                        tp,
                        Entry {
                            high_watermark,
                            at_ms: now_ms,
                        },
                    );
                }
                None => {
                    self.failures += 1;
                    self.entries.remove(&tp);
                }
            }
        }
    }

    /// A refresh that could not run at all (no connection to the cluster): every entry stays
    /// until it ages out.
    pub fn refresh_failed(&mut self, started_ms: i64, asked: usize) {
        if self.refreshing_since == Some(started_ms) {
            self.refreshing_since = None;
        }
        self.failures += asked as u64;
    }

    /// Failed lookups since start.
    pub fn failures(&self) -> u64 {
        self.failures
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> Tp {
        (t.to_string(), p)
    }

    fn set(tps: &[Tp]) -> HashSet<Tp> {
        tps.iter().cloned().collect()
    }

    #[test]
    fn one_refresh_at_a_time_and_at_most_every_interval() {
        let mut c = HighWatermarkCache::default();
        let wanted = set(&[tp("a", 0), tp("a", 1)]);
        assert!(!c.start_refresh(&HashSet::new(), 0), "nothing wanted");
        assert!(c.start_refresh(&wanted, 1_000));
        assert!(!c.start_refresh(&wanted, 1_100), "one already runs");
        c.refreshed(
            1_000,
            vec![(tp("a", 0), Some(10)), (tp("a", 1), Some(7))],
            1_200,
        );
        assert!(!c.start_refresh(&wanted, 2_000), "refreshed 1 s ago");
        assert!(c.start_refresh(&wanted, 3_000));
        c.refreshed(
            3_000,
            vec![(tp("a", 0), Some(12)), (tp("a", 1), Some(7))],
            3_100,
        );
        assert_eq!(c.get(&tp("a", 0), 3_200), Some(12));
    }

    #[test]
    fn a_new_partition_is_looked_up_at_once() {
        let mut c = HighWatermarkCache::default();
        assert!(c.start_refresh(&set(&[tp("a", 0)]), 0));
        c.refreshed(0, vec![(tp("a", 0), Some(1))], 10);
        assert!(!c.start_refresh(&set(&[tp("a", 0)]), 500));
        assert!(c.start_refresh(&set(&[tp("a", 0), tp("b", 0)]), 600));
    }

    #[test]
    fn old_and_failed_values_are_not_used() {
        let mut c = HighWatermarkCache::default();
        let wanted = set(&[tp("a", 0), tp("a", 1)]);
        assert!(c.start_refresh(&wanted, 0));
        c.refreshed(0, vec![(tp("a", 0), Some(10)), (tp("a", 1), Some(20))], 0);
        assert_eq!(c.get(&tp("a", 0), MAX_AGE_MS), Some(10));
        assert_eq!(c.get(&tp("a", 0), MAX_AGE_MS + 1), None, "too old");
        assert_eq!(c.get(&tp("a", 0), -1), None, "from the future");
        assert!(c.start_refresh(&wanted, 5_000));
        c.refreshed(
            5_000,
            vec![(tp("a", 0), Some(11)), (tp("a", 1), None)],
            5_000,
        );
        assert_eq!(c.get(&tp("a", 0), 5_001), Some(11));
        assert_eq!(c.get(&tp("a", 1), 5_001), None, "its leader did not answer");
        assert_eq!(c.failures(), 1);
    }

    #[test]
    fn partitions_no_longer_asked_for_are_dropped() {
        let mut c = HighWatermarkCache::default();
        assert!(c.start_refresh(&set(&[tp("a", 0), tp("b", 0)]), 0));
        c.refreshed(0, vec![(tp("a", 0), Some(1)), (tp("b", 0), Some(2))], 0);
        assert!(c.start_refresh(&set(&[tp("a", 0)]), 3_000));
        c.refreshed(3_000, vec![(tp("a", 0), Some(1))], 3_000);
        assert_eq!(c.get(&tp("b", 0), 3_000), None);
        assert_eq!(c.entries.len(), 1);
    }

    #[test]
    fn a_lost_refresh_does_not_block_the_next_one_forever() {
        let mut c = HighWatermarkCache::default();
        let wanted = set(&[tp("a", 0)]);
        assert!(c.start_refresh(&wanted, 0));
        assert!(!c.start_refresh(&wanted, REFRESH_ABANDONED_MS - 1));
        assert!(c.start_refresh(&wanted, REFRESH_ABANDONED_MS));
        // The abandoned one reporting late does not end the newer one.
        c.refreshed(0, vec![(tp("a", 0), Some(3))], REFRESH_ABANDONED_MS + 1);
        assert!(!c.start_refresh(&wanted, REFRESH_ABANDONED_MS + 2));
        c.refresh_failed(REFRESH_ABANDONED_MS, 1);
        assert_eq!(c.failures(), 1);
        assert!(c.start_refresh(&wanted, REFRESH_ABANDONED_MS + REFRESH_EVERY_MS));
    }
}
