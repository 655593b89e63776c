//! Which partition a record goes to, as Kafka's Java producer decides it.
//!
//! * Keyed records: `toPositive(murmur2(key)) % partitions`, Kafka's `Utils.murmur2` (MurmurHash2,
//!   32-bit, seed `0x9747b28c`). Every Kafka client that claims Java compatibility uses it, so the
//!   same key lands on the same partition whichever client wrote it.
//! * Keyless records: KIP-480 sticky partitioning. All keyless records of a topic go to one
//!   partition (picked at random among partitions that have a leader) until the batch being
//!   filled for it is closed; then another partition is picked. Batches fill faster and linger
//!   less than with round-robin.
//!
//! Pure: the random source is a seeded generator owned by the caller.

use std::collections::HashMap;

/// Kafka's murmur2 seed.
const SEED: u32 = 0x9747_b28c;
const M: u32 = 0x5bd1_e995;
const R: u32 = 24;

/// MurmurHash2 of `data`, bit for bit Kafka's `Utils.murmur2` (which returns a Java `int`).
pub fn murmur2(data: &[u8]) -> i32 {
    let len = data.len();
    let mut h: u32 = SEED ^ (len as u32);
    let mut chunks = data.chunks_exact(4);
    for c in &mut chunks {
        // Little-endian 4-byte words, as Kafka reads them.
        let mut k = u32::from_le_bytes([c[0], c[1], c[2], c[3]]);
        k = k.wrapping_mul(M);
        k ^= k >> R;
        k = k.wrapping_mul(M);
        h = h.wrapping_mul(M);
        h ^= k;
    }
    let tail = chunks.remainder();
    if !tail.is_empty() {
        if tail.len() >= 3 {
            h ^= u32::from(tail[2]) << 16;
        }
        if tail.len() >= 2 {
            h ^= u32::from(tail[1]) << 8;
        }
        h ^= u32::from(tail[0]);
        h = h.wrapping_mul(M);
    }
    h ^= h >> 13;
    h = h.wrapping_mul(M);
    h ^= h >> 15;
    h as i32
}

/// Kafka's `Utils.toPositive`: clears the sign bit (not `abs`, which overflows on `MIN`).
pub fn to_positive(n: i32) -> i32 {
    n & 0x7fff_ffff
}

/// The partition of a keyed record among `num_partitions` (> 0).
pub fn partition_for_key(key: &[u8], num_partitions: i32) -> i32 {
    debug_assert!(num_partitions > 0, "callers check the partition count");
    to_positive(murmur2(key)) % num_partitions.max(1)
}

/// KIP-480 sticky partition choice for keyless records, per topic.
#[derive(Debug)]
pub struct StickyPartitioner {
    current: HashMap<String, i32>,
    rng: fastrand::Rng,
}

impl StickyPartitioner {
    pub fn new(seed: u64) -> StickyPartitioner {
        StickyPartitioner {
            current: HashMap::new(),
            rng: fastrand::Rng::with_seed(seed),
        }
    }

    /// The partition for a keyless record of `topic`. `available` lists the partitions that
    /// have a leader; when none has, any of the `num_partitions` is chosen (the batch waits for
    /// a leader there).
    pub fn partition(&mut self, topic: &str, available: &[i32], num_partitions: i32) -> i32 {
        if let Some(&p) = self.current.get(topic) {
            if p < num_partitions {
                return p;
            }
        }
        let p = self.pick(available, num_partitions, None);
        self.current.insert(topic.to_string(), p);
        p
    }

    /// The batch of `partition` was closed: if it was the sticky partition of `topic`, move to
    /// another one (a different one whenever more than one is available).
    pub fn on_batch_closed(
        &mut self,
        topic: &str,
        partition: i32,
        available: &[i32],
        num_partitions: i32,
    ) {
        if self.current.get(topic) == Some(&partition) {
            let p = self.pick(available, num_partitions, Some(partition));
            self.current.insert(topic.to_string(), p);
        }
    }

    fn pick(&mut self, available: &[i32], num_partitions: i32, not: Option<i32>) -> i32 {
        match available.len() {
            0 => self.rng.i32(0..num_partitions.max(1)),
            1 => available[0],
            n => loop {
                let p = available[self.rng.usize(0..n)];
                if Some(p) != not {
                    return p;
                }
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn murmur2_matches_kafka_vectors() {
        // The vectors of Kafka's UtilsTest.testMurmur2.
        let cases: [(&[u8], i32); 6] = [
            (b"21", -973_932_308),
            (b"foobar", -790_332_482),
            (b"a-little-bit-long-string", -985_981_536),
            (b"a-little-bit-longer-string", -1_486_304_829),
            (
                b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8",
                -58_897_971,
            ),
            (b"abc", 479_470_107),
        ];
        for (data, want) in cases {
            assert_eq!(murmur2(data), want, "{}", String::from_utf8_lossy(data));
        }
    }

    #[test]
    fn keyed_partition_is_positive_hash_modulo_count() {
        // -973932308 & 0x7fffffff = 1173551340; % 3 = 0, % 7 = 1173551340 % 7.
        assert_eq!(to_positive(-973_932_308), 1_173_551_340);
        assert_eq!(partition_for_key(b"21", 3), 1_173_551_340 % 3);
        assert_eq!(partition_for_key(b"21", 7), 1_173_551_340 % 7);
        assert_eq!(to_positive(i32::MIN), 0);
        for p in 1..20 {
            let got = partition_for_key(b"foobar", p);
            assert!((0..p).contains(&got));
        }
    }

    #[test]
    fn sticky_partition_holds_until_its_batch_closes_then_moves() {
        let mut s = StickyPartitioner::new(7);
        let avail = [0, 1, 2, 3];
        let first = s.partition("t", &avail, 4);
        for _ in 0..10 {
            assert_eq!(s.partition("t", &avail, 4), first);
        }
        // Another partition's batch closing changes nothing.
        s.on_batch_closed("t", (first + 1) % 4, &avail, 4);
        assert_eq!(s.partition("t", &avail, 4), first);
        s.on_batch_closed("t", first, &avail, 4);
        let second = s.partition("t", &avail, 4);
        assert_ne!(second, first);
        // Topics are independent.
        let other = s.partition("u", &[5], 6);
        assert_eq!(other, 5);
    }

    #[test]
    fn sticky_prefers_partitions_with_a_leader() {
        let mut s = StickyPartitioner::new(1);
        for _ in 0..20 {
            let p = s.partition("t", &[2], 4);
            assert_eq!(p, 2);
            s.on_batch_closed("t", p, &[2], 4);
        }
        // No leader anywhere: still a valid partition.
        let p = s.partition("v", &[], 3);
        assert!((0..3).contains(&p));
    }
}
