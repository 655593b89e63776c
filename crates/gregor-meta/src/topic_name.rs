//! Topic name rules, as Kafka's `Topic.validate`: 1 to 249 characters from `[a-zA-Z0-9._-]`,
//! not `.` or `..`. Names that differ only by `.` versus `_` collide (metric names would clash).

/// Longest legal topic name.
pub const MAX_TOPIC_NAME_LENGTH: usize = 249;

/// Why a name is invalid, worded as Kafka words it (`Topic name is invalid: ...`), or `Ok`.
pub fn validate_topic_name(name: &str) -> Result<(), String> {
    let reason = if name.is_empty() {
        Some("the empty string is not allowed".to_string())
    } else if name == "." {
        Some("'.' is not allowed".to_string())
    } else if name == ".." {
        Some("'..' is not allowed".to_string())
    } else if name.chars().count() > MAX_TOPIC_NAME_LENGTH {
        Some(format!(
            "the length of '{name}' is longer than the max allowed length {MAX_TOPIC_NAME_LENGTH}"
        ))
    } else if !name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '.' || c == '_' || c == '-')
    {
        Some(format!(
            "'{name}' contains one or more characters other than ASCII alphanumerics, '.', '_' and '-'"
        ))
    } else {
        None
    };
    match reason {
        Some(r) => Err(format!("Topic name is invalid: {r}")),
        None => Ok(()),
    }
}

/// Whether the name contains `.` or `_`, the characters that can collide.
pub fn has_collision_chars(name: &str) -> bool {
    name.contains(['.', '_'])
}

/// The name with `.` replaced by `_`: two topics with the same unified name collide.
pub fn unify_collision_chars(name: &str) -> String {
    name.replace('.', "_")
}

/// At most this many topics are named in a summary line; the rest are counted.
const TOPICS_NAMED: usize = 10;

/// "name (partitions), ..." for a log line that sums up many partitions: the topics by name
/// (the operator need not map topic ids), the first [`TOPICS_NAMED`] of them.
pub fn topics_summary(counts: &std::collections::BTreeMap<&str, usize>) -> String {
    let mut out: Vec<String> = counts
        .iter()
        .take(TOPICS_NAMED)
        .map(|(name, n)| format!("{name} ({n})"))
        .collect();
    if counts.len() > TOPICS_NAMED {
        out.push(format!("and {} more", counts.len() - TOPICS_NAMED));
    }
    out.join(", ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn legal_names() {
        for n in [
            "a",
            "tp_demo_02",
            "tp-re.01",
            "A-Z.a_z-0.9",
            &"x".repeat(249),
        ] {
            assert_eq!(validate_topic_name(n), Ok(()), "{n}");
        }
    }

    #[test]
    fn illegal_names_say_why() {
        let cases = [
            ("", "the empty string is not allowed"),
            (".", "'.' is not allowed"),
            ("..", "'..' is not allowed"),
            ("a b", "contains one or more characters"),
            ("tópico", "contains one or more characters"),
            ("a/b", "contains one or more characters"),
        ];
        for (name, why) in cases {
            let err = validate_topic_name(name).unwrap_err();
            assert!(err.starts_with("Topic name is invalid: "), "{err}");
            assert!(err.contains(why), "{name}: {err}");
        }
        let long = "x".repeat(250);
        assert!(validate_topic_name(&long)
            .unwrap_err()
            .contains("longer than the max allowed length 249"));
    }

    #[test]
    fn collisions() {
        assert!(has_collision_chars("a.b"));
        assert!(has_collision_chars("a_b"));
        assert!(!has_collision_chars("a-b"));
        assert_eq!(
            unify_collision_chars("a.b_c"),
            unify_collision_chars("a_b.c")
        );
    }

    #[test]
    fn a_summary_names_the_first_topics_and_counts_the_rest() {
        let few = std::collections::BTreeMap::from([("orders", 3), ("audit", 1)]);
        assert_eq!(topics_summary(&few), "audit (1), orders (3)");
        let names: Vec<String> = (0..12).map(|i| format!("t{i:02}")).collect();
        let many = names.iter().map(|n| (n.as_str(), 1)).collect();
        let line = topics_summary(&many);
        assert!(line.starts_with("t00 (1), t01 (1)"), "{line}");
        assert!(line.ends_with("t09 (1), and 2 more"), "{line}");
    }
}
