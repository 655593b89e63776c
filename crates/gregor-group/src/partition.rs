//! Which `__consumer_offsets` partition hosts a group, exactly as Kafka computes it, so that
//! `FindCoordinator` answers the same broker a Kafka cluster with the same layout would.

/// Java's `String.hashCode()`: `s[0]*31^(n-1) + ... + s[n-1]` over UTF-16 code units, wrapping.
pub fn java_string_hash(s: &str) -> i32 {
    s.encode_utf16().fold(0i32, |h, unit| {
        h.wrapping_mul(31).wrapping_add(i32::from(unit))
    })
}

/// Kafka's `Utils.abs`: the absolute value, except that `i32::MIN` maps to 0 (not to itself).
pub fn kafka_abs(n: i32) -> i32 {
    if n == i32::MIN {
        0
    } else {
        n.abs()
    }
}

/// The `__consumer_offsets` partition of `group_id`: `Utils.abs(groupId.hashCode()) % numPartitions`.
///
/// `num_partitions` is `offsets.topic.num.partitions` (50 by default); values below 1 are treated
/// as 1 so that a misconfiguration cannot divide by zero.
pub fn partition_for(group_id: &str, num_partitions: i32) -> i32 {
    kafka_abs(java_string_hash(group_id)) % num_partitions.max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hash_matches_java_definition() {
        // "a" = 97; "ab" = 97*31 + 98 = 3105; "abc" = 3105*31 + 99 = 96354.
        assert_eq!(java_string_hash(""), 0);
        assert_eq!(java_string_hash("a"), 97);
        assert_eq!(java_string_hash("ab"), 3105);
        assert_eq!(java_string_hash("abc"), 96354);
        // Wrapping arithmetic: "hello world".hashCode() == 1794106052 in Java.
        assert_eq!(java_string_hash("hello world"), 1794106052);
        // "polygenelubricants".hashCode() == Integer.MIN_VALUE in Java (a well-known example).
        assert_eq!(java_string_hash("polygenelubricants"), i32::MIN);
    }

    #[test]
    fn hash_uses_utf16_code_units() {
        // U+00E9 is one UTF-16 unit (233); U+1F600 is the surrogate pair D83D DE00.
        assert_eq!(java_string_hash("\u{e9}"), 233);
        assert_eq!(java_string_hash("\u{1F600}"), 0xD83D * 31 + 0xDE00);
    }

    #[test]
    fn partition_matches_kafka() {
        // abs(96354) % 50 = 4.
        assert_eq!(partition_for("abc", 50), 4);
        // "hello world": 1794106052 % 50 = 2.
        assert_eq!(partition_for("hello world", 50), 2);
        // Integer.MIN_VALUE maps to 0 through Utils.abs, not to a negative partition.
        assert_eq!(partition_for("polygenelubricants", 50), 0);
        // A negative hash: "my-group".hashCode() = -1906497762; 1906497762 % 50 = 12.
        assert_eq!(java_string_hash("my-group"), -1906497762);
        assert_eq!(partition_for("my-group", 50), 12);
        assert_eq!(partition_for("anything", 1), 0);
        assert_eq!(partition_for("anything", 0), 0);
    }
}
