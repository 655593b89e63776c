//! `metrics.partition.topics`: which topics get per-partition series (labels `topic` and
//! `partition`). Gregor's own setting (Kafka has none): per-partition series grow with the
//! partition count, and internal topics' partitions interest few dashboards. Aggregates (the
//! counts of partitions, a group's total lag) still cover every partition.

use gregor_meta::config::ConfigValue;
use regex::Regex;

/// The setting's name.
pub const SETTING: &str = "metrics.partition.topics";

/// The topics whose partitions have series; the default one has every topic but the internal
/// ones.
#[derive(Debug, Clone, Default)]
pub struct PartitionFilter {
    /// `None`: the default, every topic but the internal ones (`__` names).
    pattern: Option<Regex>,
}

impl PartitionFilter {
    /// The filter `value` describes: empty for the default, else a regular expression that
    /// must match a topic's whole name (internal topics included only if it matches them).
    pub fn new(value: &str) -> Result<PartitionFilter, String> {
        if value.is_empty() {
            return Ok(PartitionFilter { pattern: None });
        }
        Regex::new(&format!("^(?:{value})$"))
            .map(|re| PartitionFilter { pattern: Some(re) })
            .map_err(|e| format!("{SETTING} {value:?} is not a regular expression: {e}"))
    }

    /// The filter of a broker's settings.
    pub fn from_settings(
        settings: &gregor_meta::config::StaticBrokerConfig,
    ) -> Result<PartitionFilter, String> {
        match settings.get(SETTING) {
            Some(ConfigValue::String(s)) => PartitionFilter::new(&s),
            _ => PartitionFilter::new(""),
        }
    }

    /// Whether `topic`'s partitions have series.
    pub fn includes(&self, topic: &str) -> bool {
        match &self.pattern {
            None => !topic.starts_with("__"),
            Some(re) => re.is_match(topic),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn by_default_every_topic_but_the_internal_ones() {
        let f = PartitionFilter::new("").expect("default");
        assert!(f.includes("orders"));
        assert!(f.includes("_single_underscore"));
        assert!(!f.includes("__consumer_offsets"));
        assert!(!f.includes("__transaction_state"));
    }

    #[test]
    fn a_pattern_matches_whole_names_and_names_internal_topics_explicitly() {
        let f = PartitionFilter::new("orders|payments-.*").expect("valid");
        assert!(f.includes("orders"));
        assert!(f.includes("payments-eu"));
        assert!(!f.includes("orders-archive"));
        assert!(!f.includes("old-orders"));
        assert!(!f.includes("__consumer_offsets"));
        let internal = PartitionFilter::new("__consumer_offsets|orders").expect("valid");
        assert!(internal.includes("__consumer_offsets"));
        assert!(!internal.includes("__transaction_state"));
        let none = PartitionFilter::new("^$").expect("valid");
        assert!(!none.includes("orders"));
    }

    #[test]
    fn an_invalid_pattern_is_refused_with_the_setting_named() {
        let e = PartitionFilter::new("orders(").expect_err("invalid");
        assert!(e.contains(SETTING), "{e}");
    }
}
