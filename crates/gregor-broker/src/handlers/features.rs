//! Feature versions (KIP-584): UpdateFeatures on the active controller (forwarded there like
//! the other metadata writes), and the features ApiVersions v3+ reports.

use gregor_meta::features::SUPPORTED_FEATURES;
use gregor_meta::{ApiError, FeatureUpdate, FeatureUpgradeType, MetadataImage};
use kafka_protocol::messages::api_versions_response::{FinalizedFeatureKey, SupportedFeatureKey};
use kafka_protocol::messages::update_features_response::UpdatableFeatureResult;
use kafka_protocol::messages::{
    ApiVersionsResponse, UpdateFeaturesRequest, UpdateFeaturesResponse,
};
use kafka_protocol::ResponseError;

use super::s;
use crate::metadata::MetadataManager;

/// Fills ApiVersions' feature fields: the supported features (v3 leaves out those with a
/// minimum of 0, as Kafka does, since older clients refuse such a range), the finalized ones
/// of `image` and their epoch. The epoch is the metadata offset `image` is at, as KRaft
/// brokers report it: it only grows, so a client keeps the newest answer of any broker.
pub fn fill_api_versions(
    resp: &mut ApiVersionsResponse,
    version: i16,
    image: &MetadataImage,
    metadata_offset: i64,
) {
    if version < 3 {
        return;
    }
    resp.supported_features = SUPPORTED_FEATURES
        .iter()
        .filter(|f| version >= 4 || f.min_version > 0)
        .map(|f| {
            let mut k = SupportedFeatureKey::default();
            k.name = s(f.name.to_string());
            k.min_version = f.min_version;
            k.max_version = f.max_version;
            k
        })
        .collect();
    resp.finalized_features_epoch = metadata_offset;
    resp.finalized_features = image
        .finalized_features()
        .iter()
        .map(|(name, level)| {
            let mut k = FinalizedFeatureKey::default();
            k.name = s(name.to_string());
            k.min_version_level = level;
            k.max_version_level = level;
            k
        })
        .collect();
}

/// The updates of a request; v0's `allow_downgrade` is a safe downgrade. `Err` for an upgrade
/// type Kafka does not define.
fn updates(r: &UpdateFeaturesRequest, version: i16) -> Result<Vec<FeatureUpdate>, ApiError> {
    r.feature_updates
        .iter()
        .map(|u| {
            let upgrade_type = if version == 0 {
                if u.allow_downgrade {
                    FeatureUpgradeType::SafeDowngrade
                } else {
                    FeatureUpgradeType::Upgrade
                }
            } else {
                FeatureUpgradeType::from_i8(u.upgrade_type).ok_or_else(|| {
                    ApiError::invalid_request(format!(
                        "Unknown upgrade type {} for feature {}",
                        u.upgrade_type, u.feature
                    ))
                })?
            };
            Ok(FeatureUpdate {
                feature: u.feature.to_string(),
                max_version_level: u.max_version_level,
                upgrade_type,
            })
        })
        .collect()
}

/// UpdateFeatures on the active controller.
pub async fn update_features(
    metadata: &MetadataManager,
    r: UpdateFeaturesRequest,
    version: i16,
) -> UpdateFeaturesResponse {
    let updates = match updates(&r, version) {
        Ok(u) => u,
        Err(e) => return refuse_update(&r, version, &e),
    };
    let validate_only = r.validate_only;
    let results = match metadata
        .submit(|c| c.update_features(&updates, validate_only))
        .await
    {
        Ok(results) => results,
        Err(e) => {
            tracing::info!(error = %e, "UpdateFeatures not committed");
            return refuse_update(&r, version, &e.api_error());
        }
    };
    let mut resp = UpdateFeaturesResponse::default();
    resp.error_message = None;
    // v2 answers only at the top: the first failure, if any.
    if let Some(e) = results.iter().find_map(|x| x.as_ref().err()) {
        if version >= 2 {
            resp.error_code = e.code.code();
            resp.error_message = Some(s(e.message.clone()));
        }
    }
    resp.results = r
        .feature_updates
        .iter()
        .zip(results)
        .map(|(u, result)| {
            let mut out = UpdatableFeatureResult::default();
            out.feature = u.feature.clone();
            out.error_message = None;
            if let Err(e) = result {
                out.error_code = e.code.code();
                out.error_message = Some(s(e.message));
            }
            out
        })
        .collect();
    resp
}

/// The whole request refused with `e`: at the top and on each feature (v0-1 list them).
pub fn refuse_update(
    r: &UpdateFeaturesRequest,
    version: i16,
    e: &ApiError,
) -> UpdateFeaturesResponse {
    let mut resp = UpdateFeaturesResponse::default();
    resp.error_code = e.code.code();
    resp.error_message = Some(s(e.message.clone()));
    if version <= 1 {
        resp.results = r
            .feature_updates
            .iter()
            .map(|u| {
                let mut out = UpdatableFeatureResult::default();
                out.feature = u.feature.clone();
                out.error_code = e.code.code();
                out.error_message = Some(s(e.message.clone()));
                out
            })
            .collect();
    }
    resp
}

/// CLUSTER_AUTHORIZATION_FAILED for a principal without ALTER on the cluster.
pub fn refuse_unauthorized(r: &UpdateFeaturesRequest, version: i16) -> UpdateFeaturesResponse {
    let e = ResponseError::ClusterAuthorizationFailed;
    refuse_update(r, version, &ApiError::new(e, e.to_string()))
}
