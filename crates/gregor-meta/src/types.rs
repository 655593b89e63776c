//! Small shared vocabulary: ids, topic-partitions and the deterministic random source the
//! controller uses for topic ids and placement start offsets.

use std::fmt;
use uuid::Uuid;

/// A broker (node) id, as in Kafka's `node.id` / `broker.id`.
pub type BrokerId = i32;

/// `-1`: no leader (Kafka's `LeaderAndIsr.NO_LEADER`).
pub const NO_LEADER: BrokerId = -1;

/// A partition named by topic id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicIdPartition {
    /// Topic id.
    pub topic_id: Uuid,
    /// Partition index.
    pub partition: i32,
}

/// A partition named by topic name (what tools and most requests use).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    /// Topic name.
    pub topic: String,
    /// Partition index.
    pub partition: i32,
}

impl TopicPartition {
    /// `topic-partition`.
    pub fn new(topic: impl Into<String>, partition: i32) -> Self {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// SplitMix64: a tiny deterministic generator. The controller is a pure state machine, so the
/// randomness Kafka uses (topic ids, the placement start index) comes from a seed the shell
/// chooses (from the OS at start-up; fixed in tests and simulations).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitMix64 {
    state: u64,
}

impl SplitMix64 {
    /// A generator seeded with `seed`.
    pub fn new(seed: u64) -> Self {
        SplitMix64 { state: seed }
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// A value in `0..bound` (`bound > 0`).
    pub fn next_below(&mut self, bound: usize) -> usize {
        debug_assert!(bound > 0);
        (self.next_u64() % bound as u64) as usize
    }

    /// A topic id as Kafka makes them: never the reserved ids `0` and `1`, and never one whose
    /// base64 form starts with `-` (such ids look like command-line flags).
    pub fn next_topic_id(&mut self) -> Uuid {
        loop {
            let hi = self.next_u64();
            let lo = self.next_u64();
            let id = Uuid::from_u64_pair(hi, lo);
            // The first base64url character is '-' (index 62) when the top six bits are 111110.
            let starts_with_dash = (hi >> 58) == 0b11_1110;
            if hi == 0 && lo <= 1 || starts_with_dash {
                continue;
            }
            return id;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topic_ids_are_deterministic_and_never_reserved() {
        let mut a = SplitMix64::new(7);
        let mut b = SplitMix64::new(7);
        for _ in 0..1000 {
            let id = a.next_topic_id();
            assert_eq!(id, b.next_topic_id());
            assert!(!id.is_nil());
            assert_ne!(id.as_u64_pair(), (0, 1));
            assert_ne!(id.as_bytes()[0] >> 2, 0b11_1110);
        }
    }
}
