//! Feature versions (KIP-584, as KRaft Kafka keeps them): Kafka's `FeatureLevelRecord` and the
//! image's finalized feature levels. A feature is finalized at a level cluster-wide; level 0
//! means "not finalized" (the record with level 0 removes the feature). The features Gregor
//! supports, with the levels its brokers understand, are [`SUPPORTED_FEATURES`].

use crate::error::ImageError;
use std::collections::BTreeMap;

/// `transaction.version` (KIP-890): 1 adds flexible EndTxn fields, 2 is transaction version 2
/// (the epoch bump at every decision, partitions added by Produce and TxnOffsetCommit).
pub const TRANSACTION_VERSION: &str = "transaction.version";

/// `group.version` (KIP-848): 1 enables the consumer group protocol (ConsumerGroupHeartbeat).
pub const GROUP_VERSION: &str = "group.version";

/// A feature the brokers support: its range of levels, and the level a new cluster starts at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SupportedFeature {
    /// Feature name.
    pub name: &'static str,
    /// Lowest level a broker supports (ApiVersions' `SupportedFeatures.MinVersion`).
    pub min_version: i16,
    /// Highest level a broker supports (`SupportedFeatures.MaxVersion`).
    pub max_version: i16,
    /// The level `kafka-storage format` gives a new cluster: Kafka 4.x's latest production one.
    pub bootstrap_level: i16,
}

/// Every feature Gregor's brokers support.
pub const SUPPORTED_FEATURES: &[SupportedFeature] = &[
    SupportedFeature {
        name: GROUP_VERSION,
        min_version: 0,
        max_version: 1,
        bootstrap_level: 1,
    },
    SupportedFeature {
        name: TRANSACTION_VERSION,
        min_version: 0,
        max_version: 2,
        bootstrap_level: 2,
    },
];

/// A supported feature by name.
pub fn supported_feature(name: &str) -> Option<&'static SupportedFeature> {
    SUPPORTED_FEATURES.iter().find(|f| f.name == name)
}

/// `FeatureLevelRecord`: a feature is finalized at `level`; level 0 removes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureLevelRecord {
    /// Feature name.
    pub name: String,
    /// The finalized level (0: the feature is no longer finalized).
    pub level: i16,
}

/// The finalized feature levels of the image (features at level 0 are absent).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FinalizedFeatures {
    levels: BTreeMap<String, i16>,
}

impl FinalizedFeatures {
    /// A feature's finalized level: 0 when it is not finalized.
    pub fn level(&self, name: &str) -> i16 {
        self.levels.get(name).copied().unwrap_or(0)
    }

    /// The finalized features (level >= 1) by name.
    pub fn iter(&self) -> impl Iterator<Item = (&str, i16)> {
        self.levels.iter().map(|(n, l)| (n.as_str(), *l))
    }

    /// Whether no feature is finalized.
    pub fn is_empty(&self) -> bool {
        self.levels.is_empty()
    }

    /// Applies a record. A negative level never comes from a controller: it is refused.
    pub fn apply(&mut self, r: &FeatureLevelRecord) -> Result<(), ImageError> {
        if r.level < 0 {
            return Err(ImageError::Invalid(format!(
                "feature {} at negative level {}",
                r.name, r.level
            )));
        }
        if r.level == 0 {
            self.levels.remove(&r.name);
        } else {
            self.levels.insert(r.name.clone(), r.level);
        }
        Ok(())
    }

    /// The records that restate these levels (a snapshot).
    pub fn to_records(&self) -> impl Iterator<Item = FeatureLevelRecord> + '_ {
        self.levels.iter().map(|(name, level)| FeatureLevelRecord {
            name: name.clone(),
            level: *level,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn level_zero_removes_and_negative_is_refused() {
        let mut f = FinalizedFeatures::default();
        let rec = |level| FeatureLevelRecord {
            name: TRANSACTION_VERSION.into(),
            level,
        };
        f.apply(&rec(2)).expect("apply");
        assert_eq!(f.level(TRANSACTION_VERSION), 2);
        assert_eq!(f.to_records().collect::<Vec<_>>(), vec![rec(2)]);
        f.apply(&rec(0)).expect("apply");
        assert!(f.is_empty());
        assert_eq!(f.level(TRANSACTION_VERSION), 0);
        assert!(f.apply(&rec(-1)).is_err());
        assert!(f.is_empty());
    }
}
