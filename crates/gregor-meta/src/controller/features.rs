//! UpdateFeatures (KIP-584, as KRaft Kafka's controller answers it): each feature update is
//! checked on its own against the levels the brokers support and the finalized level, and
//! answered INVALID_UPDATE_VERSION when it cannot be done; the valid ones become
//! `FeatureLevelRecord`s. Also the feature levels a new metadata log starts with.

use super::state::{Controller, ControllerResult};
use crate::error::ApiError;
use crate::features::{supported_feature, FeatureLevelRecord, SUPPORTED_FEATURES};
use crate::record::MetadataRecord;
use kafka_protocol::ResponseError;
use std::collections::BTreeSet;

/// Kafka's `FeatureUpdate.UpgradeType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FeatureUpgradeType {
    /// 1: only upgrades (the default).
    Upgrade,
    /// 2: a downgrade that loses no metadata.
    SafeDowngrade,
    /// 3: a downgrade that may lose metadata.
    UnsafeDowngrade,
}

impl FeatureUpgradeType {
    /// From the wire (UpdateFeatures v1+ `UpgradeType`).
    pub fn from_i8(v: i8) -> Option<Self> {
        match v {
            1 => Some(FeatureUpgradeType::Upgrade),
            2 => Some(FeatureUpgradeType::SafeDowngrade),
            3 => Some(FeatureUpgradeType::UnsafeDowngrade),
            _ => None,
        }
    }

    /// The wire value.
    pub fn as_i8(self) -> i8 {
        match self {
            FeatureUpgradeType::Upgrade => 1,
            FeatureUpgradeType::SafeDowngrade => 2,
            FeatureUpgradeType::UnsafeDowngrade => 3,
        }
    }
}

/// One feature update of an UpdateFeatures request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FeatureUpdate {
    /// Feature name.
    pub feature: String,
    /// The new level; 0 disables the feature.
    pub max_version_level: i16,
    /// Whether a downgrade is allowed, and which kind.
    pub upgrade_type: FeatureUpgradeType,
}

fn invalid_update(u: &FeatureUpdate, why: &str) -> ApiError {
    ApiError::new(
        ResponseError::InvalidUpdateVersion,
        format!(
            "Invalid update version {} for feature {}. {why}",
            u.max_version_level, u.feature
        ),
    )
}

impl Controller {
    /// UpdateFeatures: one result per update, in order. Valid updates of a request are written
    /// together (none with `validate_only`); an update to the finalized level writes nothing.
    pub fn update_features(
        &self,
        updates: &[FeatureUpdate],
        validate_only: bool,
    ) -> ControllerResult<Vec<Result<(), ApiError>>> {
        let mut records = Vec::new();
        let mut results = Vec::with_capacity(updates.len());
        let mut seen = BTreeSet::new();
        for u in updates {
            if !seen.insert(u.feature.as_str()) {
                results.push(Err(ApiError::invalid_request(format!(
                    "Feature {} appears more than once in the request",
                    u.feature
                ))));
                continue;
            }
            match self.feature_update_record(u) {
                Ok(record) => {
                    records.extend(record);
                    results.push(Ok(()));
                }
                Err(e) => results.push(Err(e)),
            }
        }
        if validate_only {
            records.clear();
        }
        let failed = results.iter().filter(|r| r.is_err()).count();
        tracing::info!(
            updates = updates.len(),
            failed,
            records = records.len(),
            validate_only,
            "UpdateFeatures"
        );
        ControllerResult::new(records, results)
    }

    /// The record an update writes (none when the level is already finalized), or why not.
    fn feature_update_record(&self, u: &FeatureUpdate) -> Result<Option<MetadataRecord>, ApiError> {
        let supported = supported_feature(&u.feature).ok_or_else(|| {
            invalid_update(u, "The controller does not support the given feature.")
        })?;
        let level = u.max_version_level;
        if level < 0 {
            return Err(invalid_update(u, "A feature level cannot be negative."));
        }
        // Level 0 disables the feature, which every broker can do without.
        if level != 0 && (level < supported.min_version || level > supported.max_version) {
            return Err(invalid_update(
                u,
                &format!(
                    "The brokers only support versions {}-{}.",
                    supported.min_version, supported.max_version
                ),
            ));
        }
        let current = self.image.finalized_features().level(&u.feature);
        if level < current && u.upgrade_type == FeatureUpgradeType::Upgrade {
            return Err(invalid_update(
                u,
                "Can't downgrade the version of this feature without setting the upgrade type \
                 to either safe or unsafe downgrade.",
            ));
        }
        if level > current && u.upgrade_type != FeatureUpgradeType::Upgrade {
            return Err(invalid_update(u, "Can't downgrade to a newer version."));
        }
        if level == current {
            return Ok(None);
        }
        Ok(Some(MetadataRecord::FeatureLevel(FeatureLevelRecord {
            name: u.feature.clone(),
            level,
        })))
    }
}

/// The records a new metadata log starts with: `records` (what `kafka-storage format` left),
/// plus each supported feature at its bootstrap level unless `records` sets it. A level-0
/// feature record is dropped: an absent feature is already at level 0.
pub fn with_bootstrap_features(mut records: Vec<MetadataRecord>) -> Vec<MetadataRecord> {
    let named: BTreeSet<String> = records
        .iter()
        .filter_map(|r| match r {
            MetadataRecord::FeatureLevel(f) => Some(f.name.clone()),
            _ => None,
        })
        .collect();
    let defaults = SUPPORTED_FEATURES
        .iter()
        .filter(|f| !named.contains(f.name) && f.bootstrap_level > 0)
        .map(|f| {
            MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name: f.name.to_string(),
                level: f.bootstrap_level,
            })
        });
    let mut out: Vec<MetadataRecord> = defaults.collect();
    records.retain(|r| !matches!(r, MetadataRecord::FeatureLevel(f) if f.level == 0));
    out.append(&mut records);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::StaticBrokerConfig;
    use crate::features::{GROUP_VERSION, TRANSACTION_VERSION};

    fn update(level: i16, upgrade_type: FeatureUpgradeType) -> FeatureUpdate {
        FeatureUpdate {
            feature: TRANSACTION_VERSION.into(),
            max_version_level: level,
            upgrade_type,
        }
    }

    fn commit(c: &mut Controller, updates: &[FeatureUpdate]) -> Vec<Result<(), ApiError>> {
        let res = c.update_features(updates, false);
        c.replay_all(&res.records).expect("replay");
        res.response
    }

    fn level(c: &Controller) -> i16 {
        c.image().finalized_features().level(TRANSACTION_VERSION)
    }

    fn code(r: &Result<(), ApiError>) -> Option<ResponseError> {
        r.as_ref().err().map(|e| e.code)
    }

    #[test]
    fn upgrade_downgrade_and_disable() {
        use FeatureUpgradeType::*;
        let mut c = Controller::new(StaticBrokerConfig::new(), 1);
        assert_eq!(level(&c), 0);
        assert_eq!(commit(&mut c, &[update(1, Upgrade)]), vec![Ok(())]);
        assert_eq!(level(&c), 1);
        assert_eq!(commit(&mut c, &[update(2, Upgrade)]), vec![Ok(())]);
        assert_eq!(level(&c), 2);
        // Same level: answered, nothing written.
        let res = c.update_features(&[update(2, Upgrade)], false);
        assert_eq!((res.records.len(), res.response), (0, vec![Ok(())]));
        // A downgrade needs a downgrade type; an upgrade must not have one.
        let r = commit(&mut c, &[update(1, Upgrade)]);
        assert_eq!(code(&r[0]), Some(ResponseError::InvalidUpdateVersion));
        assert_eq!(level(&c), 2);
        assert_eq!(commit(&mut c, &[update(1, SafeDowngrade)]), vec![Ok(())]);
        let r = commit(&mut c, &[update(2, SafeDowngrade)]);
        assert_eq!(code(&r[0]), Some(ResponseError::InvalidUpdateVersion));
        assert_eq!(commit(&mut c, &[update(0, UnsafeDowngrade)]), vec![Ok(())]);
        assert_eq!(level(&c), 0);
        assert!(c.image().finalized_features().is_empty());
    }

    #[test]
    fn unknown_features_and_levels_out_of_range_are_refused_per_feature() {
        use FeatureUpgradeType::*;
        let mut c = Controller::new(StaticBrokerConfig::new(), 1);
        let unknown = FeatureUpdate {
            feature: "no.such.feature".into(),
            max_version_level: 1,
            upgrade_type: Upgrade,
        };
        let r = commit(&mut c, &[unknown, update(3, Upgrade)]);
        assert_eq!(code(&r[0]), Some(ResponseError::InvalidUpdateVersion));
        assert_eq!(code(&r[1]), Some(ResponseError::InvalidUpdateVersion));
        let r = commit(&mut c, &[update(-1, UnsafeDowngrade)]);
        assert_eq!(code(&r[0]), Some(ResponseError::InvalidUpdateVersion));
        let r = commit(&mut c, &[update(2, Upgrade), update(1, Upgrade)]);
        assert_eq!(r[0], Ok(()));
        assert_eq!(code(&r[1]), Some(ResponseError::InvalidRequest));
        assert_eq!(level(&c), 2);
        // validate_only answers without writing.
        let res = c.update_features(&[update(0, SafeDowngrade)], true);
        assert_eq!((res.records.len(), res.response), (0, vec![Ok(())]));
    }

    #[test]
    fn bootstrap_features_default_to_the_latest_levels_unless_formatted() {
        let feature = |name: &str, level| {
            MetadataRecord::FeatureLevel(FeatureLevelRecord {
                name: name.into(),
                level,
            })
        };
        let rec = |level| feature(TRANSACTION_VERSION, level);
        let group = feature(GROUP_VERSION, 1);
        assert_eq!(
            with_bootstrap_features(Vec::new()),
            vec![group.clone(), rec(2)]
        );
        assert_eq!(
            with_bootstrap_features(vec![rec(1)]),
            vec![group.clone(), rec(1)]
        );
        assert_eq!(with_bootstrap_features(vec![rec(0)]), vec![group]);
        // A cluster formatted without the consumer group protocol keeps it off.
        let off = feature(GROUP_VERSION, 0);
        assert_eq!(with_bootstrap_features(vec![off]), vec![rec(2)]);
    }
}
