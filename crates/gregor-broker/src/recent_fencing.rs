//! Which fenced brokers Metadata still lists for a moment after they were fenced.
//!
//! The controller fences a dead broker and elects new leaders for its partitions in one
//! commit, so a Metadata answer that drops the broker from its broker list also moves its
//! partitions. librdkafka then tears down its handle of the dropped broker while a partition
//! is still being moved away from it, loses the partition's new leader on the way, and finds it
//! again only in its next one-second scan: a producer waited a second longer than the election.
//! Listing the fenced broker for [`FENCED_LISTING_GRACE_MS`] more lets clients move their
//! partitions first; it leads nothing, so no request is sent to it.

use std::collections::HashMap;

/// How long after this node first saw a broker fenced Metadata still lists it.
pub const FENCED_LISTING_GRACE_MS: i64 = 3_000;

/// When this node first saw each broker fenced, learnt from the images its Metadata answers
/// read (a functional core: the caller passes the image's brokers and `now`).
#[derive(Debug, Default)]
pub struct RecentFencing {
    /// Broker id -> when it was first seen fenced (`None`: seen unfenced last).
    seen: HashMap<i32, Option<i64>>,
}

impl RecentFencing {
    /// Notes each broker's state, `(id, fenced)`; returns the fenced brokers to list still.
    /// A broker already fenced when first seen was fenced before this node looked (at start,
    /// or long ago), so it is not listed.
    pub fn observe(
        &mut self,
        brokers: impl IntoIterator<Item = (i32, bool)>,
        now_ms: i64,
    ) -> Vec<i32> {
        let mut listed = Vec::new();
        let mut present = Vec::new();
        for (id, fenced) in brokers {
            present.push(id);
            let entry = self
                .seen
                .entry(id)
                .or_insert(if fenced { Some(i64::MIN) } else { None });
            match (fenced, *entry) {
                (false, _) => *entry = None,
                (true, None) => {
                    *entry = Some(now_ms);
                    listed.push(id);
                }
                (true, Some(since)) => {
                    if now_ms.saturating_sub(since) < FENCED_LISTING_GRACE_MS {
                        listed.push(id);
                    }
                }
            }
        }
        // Unregistered brokers are forgotten.
        self.seen.retain(|id, _| present.contains(id));
        listed
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_broker_fenced_while_watched_is_listed_for_the_grace_period() {
        let mut r = RecentFencing::default();
        assert!(r.observe([(0, false), (1, false)], 1_000).is_empty());
        assert_eq!(r.observe([(0, true), (1, false)], 2_000), vec![0]);
        assert_eq!(r.observe([(0, true), (1, false)], 4_999), vec![0]);
        assert!(r.observe([(0, true), (1, false)], 5_000).is_empty());
    }

    #[test]
    fn a_broker_fenced_before_it_was_first_seen_is_not_listed() {
        let mut r = RecentFencing::default();
        assert!(r.observe([(0, true)], 1_000).is_empty());
        assert!(r.observe([(0, true)], 1_001).is_empty());
    }

    #[test]
    fn unfencing_and_fencing_again_starts_a_new_grace_period() {
        let mut r = RecentFencing::default();
        r.observe([(0, false)], 0);
        r.observe([(0, true)], 10);
        assert!(r.observe([(0, true)], 10_000).is_empty());
        r.observe([(0, false)], 10_001);
        assert_eq!(r.observe([(0, true)], 20_000), vec![0]);
    }

    #[test]
    fn an_unregistered_broker_is_forgotten() {
        let mut r = RecentFencing::default();
        r.observe([(0, false)], 0);
        r.observe([], 1);
        // Registered again, already fenced: as if first seen.
        assert!(r.observe([(0, true)], 2).is_empty());
    }
}
