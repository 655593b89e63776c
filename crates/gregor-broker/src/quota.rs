//! Replication throttles: Kafka's `leader.replication.throttled.rate` and
//! `follower.replication.throttled.rate`, applied to the partitions listed in a topic's
//! `leader.replication.throttled.replicas` / `follower.replication.throttled.replicas`.
//!
//! As in Kafka, only catch-up traffic is throttled: a replica outside the ISR of a throttled
//! partition is not sent (leader) or does not fetch (follower) while the quota is exceeded;
//! in-sync replicas never wait. Bytes of every throttled partition count toward the quota.
//!
//! The quota is a token bucket: it refills at the rate, holds at most one second's worth, and
//! is exceeded while empty. A response may overdraw it (one fetch is never cut short), which
//! the refill then has to pay back first, so the bytes moved over any span of `t` seconds stay
//! within `rate × (t + 1)` plus one response. Pure: callers pass `now`.

use std::collections::{BTreeSet, HashMap};
use std::sync::{Mutex, MutexGuard, PoisonError, RwLock};

/// A byte-rate quota. `None` rate means unlimited (Kafka's default, `Long.MAX_VALUE`).
#[derive(Debug, Clone)]
pub struct ByteQuota {
    rate: Option<u64>,
    /// Bytes available; negative after an overdraft.
    tokens: f64,
    last_ms: u64,
}

impl ByteQuota {
    pub fn unlimited() -> ByteQuota {
        ByteQuota {
            rate: None,
            tokens: 0.0,
            last_ms: 0,
        }
    }

    /// Sets the rate in bytes per second; a negative value or `i64::MAX` means unlimited. A new
    /// limit starts with one second's worth of bytes.
    pub fn set_rate(&mut self, bytes_per_sec: i64, now_ms: u64) {
        let rate = (0..i64::MAX)
            .contains(&bytes_per_sec)
            .then_some(bytes_per_sec as u64);
        if rate != self.rate {
            self.rate = rate;
            self.tokens = rate.unwrap_or(0) as f64;
            self.last_ms = now_ms;
        }
    }

    pub fn rate(&self) -> Option<u64> {
        self.rate
    }

    fn refill(&mut self, now_ms: u64) {
        let Some(rate) = self.rate else { return };
        let elapsed = now_ms.saturating_sub(self.last_ms);
        self.last_ms = self.last_ms.max(now_ms);
        self.tokens = (self.tokens + rate as f64 * elapsed as f64 / 1000.0).min(rate as f64);
    }

    /// Counts bytes sent or received for throttled partitions.
    pub fn record(&mut self, bytes: u64, now_ms: u64) {
        if self.rate.is_none() {
            return;
        }
        self.refill(now_ms);
        self.tokens -= bytes as f64;
    }

    /// Whether throttled partitions must wait now.
    pub fn is_exceeded(&mut self, now_ms: u64) -> bool {
        if self.rate.is_none() {
            return false;
        }
        self.refill(now_ms);
        self.tokens <= 0.0
    }

    /// How long until the quota admits throttled partitions again (zero when it does now).
    pub fn wait_ms(&mut self, now_ms: u64) -> u64 {
        let exceeded = self.is_exceeded(now_ms);
        match self.rate {
            Some(rate) if exceeded => {
                if rate == 0 {
                    return u64::MAX;
                }
                // Until the bucket holds a little (1 ms of refill), not just zero.
                ((-self.tokens) * 1000.0 / rate as f64).ceil() as u64 + 1
            }
            _ => 0,
        }
    }
}

/// The partitions of one topic a throttled-replicas setting names for one broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ThrottledPartitions {
    All,
    Some(BTreeSet<i32>),
}

impl ThrottledPartitions {
    pub fn contains(&self, partition: i32) -> bool {
        match self {
            ThrottledPartitions::All => true,
            ThrottledPartitions::Some(set) => set.contains(&partition),
        }
    }
}

/// Reads a `*.replication.throttled.replicas` list (`*`, or `partition:broker` entries) for
/// `broker`: `None` when it names no partition there, or is malformed (malformed values are
/// refused when the config is set, by gregor-meta's validator).
pub fn throttled_partitions<S: AsRef<str>>(
    entries: &[S],
    broker: i32,
) -> Option<ThrottledPartitions> {
    if entries.len() == 1 && entries[0].as_ref().trim() == "*" {
        return Some(ThrottledPartitions::All);
    }
    let mut set = BTreeSet::new();
    for entry in entries {
        let (p, b) = entry.as_ref().trim().split_once(':')?;
        let (p, b): (i32, i32) = (p.trim().parse().ok()?, b.trim().parse().ok()?);
        if b == broker {
            set.insert(p);
        }
    }
    (!set.is_empty()).then_some(ThrottledPartitions::Some(set))
}

/// Per topic: the partitions throttled here on the leader side and on the follower side.
type TopicThrottles = HashMap<String, (Option<ThrottledPartitions>, Option<ThrottledPartitions>)>;

/// This broker's replication throttles: both quotas and the partitions each applies to here.
/// Updated from metadata; read on every follower fetch it serves (leader side) and every fetch
/// it sends (follower side).
pub struct Throttles {
    node_id: i32,
    /// The quotas' clock: tokio's (simulated time under a simulator).
    started: tokio::time::Instant,
    leader: Mutex<ByteQuota>,
    follower: Mutex<ByteQuota>,
    topics: RwLock<TopicThrottles>,
}

impl Throttles {
    pub fn new(node_id: i32) -> Throttles {
        Throttles {
            node_id,
            started: tokio::time::Instant::now(),
            leader: Mutex::new(ByteQuota::unlimited()),
            follower: Mutex::new(ByteQuota::unlimited()),
            topics: RwLock::new(HashMap::new()),
        }
    }

    /// Milliseconds on the quotas' clock.
    pub fn now_ms(&self) -> u64 {
        self.started.elapsed().as_millis() as u64
    }

    /// Sets both rates and, for each topic, its leader and follower throttled-replica lists.
    pub fn update(
        &self,
        leader_rate: i64,
        follower_rate: i64,
        topics: Vec<(String, Vec<String>, Vec<String>)>,
        now_ms: u64,
    ) {
        self.leader_quota().set_rate(leader_rate, now_ms);
        self.follower_quota().set_rate(follower_rate, now_ms);
        let map: TopicThrottles = topics
            .into_iter()
            .filter_map(|(topic, leader, follower)| {
                let l = throttled_partitions(&leader, self.node_id);
                let f = throttled_partitions(&follower, self.node_id);
                (l.is_some() || f.is_some()).then_some((topic, (l, f)))
            })
            .collect();
        *self.topics.write().unwrap_or_else(PoisonError::into_inner) = map;
    }

    fn lookup(
        &self,
        topic: &str,
        pick: impl Fn(
            &(Option<ThrottledPartitions>, Option<ThrottledPartitions>),
        ) -> &Option<ThrottledPartitions>,
        partition: i32,
    ) -> bool {
        let topics = self.topics.read().unwrap_or_else(PoisonError::into_inner);
        topics
            .get(topic)
            .and_then(|t| pick(t).as_ref())
            .is_some_and(|t| t.contains(partition))
    }

    /// Whether this broker, leading `topic`/`partition`, throttles what it sends to
    /// out-of-sync followers.
    pub fn leader_throttled(&self, topic: &str, partition: i32) -> bool {
        self.lookup(topic, |t| &t.0, partition)
    }

    /// Whether this broker, following `topic`/`partition`, throttles its fetches while out of
    /// sync.
    pub fn follower_throttled(&self, topic: &str, partition: i32) -> bool {
        self.lookup(topic, |t| &t.1, partition)
    }

    pub fn leader_quota(&self) -> MutexGuard<'_, ByteQuota> {
        self.leader.lock().unwrap_or_else(PoisonError::into_inner)
    }

    pub fn follower_quota(&self) -> MutexGuard<'_, ByteQuota> {
        self.follower.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn unlimited_never_throttles() {
        let mut q = ByteQuota::unlimited();
        q.record(u64::MAX / 2, 0);
        assert!(!q.is_exceeded(0));
        q.set_rate(i64::MAX, 0);
        assert!(!q.is_exceeded(0));
        q.set_rate(-1, 0);
        assert!(!q.is_exceeded(0));
    }

    #[test]
    fn exceeded_after_a_second_of_bytes_then_admits_after_refill() {
        let mut q = ByteQuota::unlimited();
        q.set_rate(1000, 0);
        assert!(!q.is_exceeded(0));
        q.record(600, 0);
        assert!(!q.is_exceeded(0));
        q.record(600, 0); // overdrawn by 200
        assert!(q.is_exceeded(0));
        assert_eq!(q.wait_ms(0), 201);
        assert!(q.is_exceeded(150));
        assert!(!q.is_exceeded(201));
    }

    #[test]
    fn the_bucket_holds_at_most_one_second() {
        let mut q = ByteQuota::unlimited();
        q.set_rate(1000, 0);
        // A long idle span does not bank more than a second's worth.
        q.record(1001, 60_000);
        assert!(q.is_exceeded(60_000));
    }

    #[test]
    fn zero_rate_stops_throttled_traffic() {
        let mut q = ByteQuota::unlimited();
        q.set_rate(0, 0);
        assert!(q.is_exceeded(10_000));
        assert_eq!(q.wait_ms(10_000), u64::MAX);
    }

    #[test]
    fn parses_throttled_replicas() {
        let none: [&str; 0] = [];
        assert_eq!(throttled_partitions(&none, 1), None);
        assert_eq!(
            throttled_partitions(&["*"], 1),
            Some(ThrottledPartitions::All)
        );
        let t = throttled_partitions(&["0:1", " 0:2", "3:1"], 1).expect("entries for broker 1");
        assert!(t.contains(0) && t.contains(3) && !t.contains(1));
        assert_eq!(throttled_partitions(&["0:2"], 1), None);
        assert_eq!(throttled_partitions(&["0:x"], 1), None);
        assert_eq!(throttled_partitions(&["7"], 1), None);
    }

    #[test]
    fn throttles_follow_updates() {
        let t = Throttles::new(1);
        assert!(!t.leader_throttled("a", 0));
        t.update(
            1000,
            i64::MAX,
            vec![
                (
                    "a".to_string(),
                    vec!["0:1".to_string(), "1:2".to_string()],
                    vec![],
                ),
                ("b".to_string(), vec![], vec!["*".to_string()]),
            ],
            0,
        );
        assert!(t.leader_throttled("a", 0));
        assert!(!t.leader_throttled("a", 1));
        assert!(!t.follower_throttled("a", 0));
        assert!(t.follower_throttled("b", 7));
        assert_eq!(t.leader_quota().rate(), Some(1000));
        assert_eq!(t.follower_quota().rate(), None);
        t.update(i64::MAX, i64::MAX, vec![], 10);
        assert!(!t.leader_throttled("a", 0));
        assert_eq!(t.leader_quota().rate(), None);
    }

    proptest! {
        /// A sender that sends whenever the quota admits it moves at most rate × (t + 1) plus
        /// one response over t seconds.
        #[test]
        fn a_greedy_sender_stays_within_the_rate(
            rate in 1_000u64..10_000_000,
            chunk in 1u64..2_000_000,
            step_ms in 1u64..50,
            steps in 1usize..3_000,
        ) {
            let mut q = ByteQuota::unlimited();
            q.set_rate(rate as i64, 0);
            let mut sent = 0u64;
            let mut now = 0u64;
            for _ in 0..steps {
                if !q.is_exceeded(now) {
                    q.record(chunk, now);
                    sent += chunk;
                }
                now += step_ms;
            }
            let bound = rate as f64 * (now as f64 / 1000.0 + 1.0) + chunk as f64;
            prop_assert!(sent as f64 <= bound, "sent {sent} > bound {bound}");
        }
    }
}
