//! Feature versions (KIP-584): a new cluster starts at `transaction.version` 2, ApiVersions
//! reports it, UpdateFeatures changes it through the metadata log, and a restart replays it.

mod common;

use common::*;
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::*;

const TV: &str = "transaction.version";

async fn api_versions(b: &std::sync::Arc<gregor_broker::Broker>, v: i16) -> ApiVersionsResponse {
    match send(
        b,
        ApiKey::ApiVersions,
        v,
        RequestKind::ApiVersions(Default::default()),
    )
    .await
    {
        ResponseKind::ApiVersions(r) => r,
        other => panic!("{other:?}"),
    }
}

/// The finalized level of transaction.version (None: not finalized) and the epoch.
async fn finalized(b: &std::sync::Arc<gregor_broker::Broker>) -> (Option<i16>, i64) {
    let r = api_versions(b, 4).await;
    let level = r
        .finalized_features
        .iter()
        .find(|f| f.name.as_str() == TV)
        .map(|f| f.max_version_level);
    (level, r.finalized_features_epoch)
}

async fn update(
    b: &std::sync::Arc<gregor_broker::Broker>,
    level: i16,
    upgrade_type: i8,
) -> UpdateFeaturesResponse {
    let mut u = FeatureUpdateKey::default();
    u.feature = sb(TV);
    u.max_version_level = level;
    u.upgrade_type = upgrade_type;
    let mut r = UpdateFeaturesRequest::default();
    r.feature_updates = vec![u];
    r.timeout_ms = 10_000;
    match send(b, ApiKey::UpdateFeatures, 1, RequestKind::UpdateFeatures(r)).await {
        ResponseKind::UpdateFeatures(r) => r,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn new_cluster_reports_transaction_version_2_and_updates_persist() {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = start(dir.path(), &[]).await;
    let r = api_versions(&b, 4).await;
    let supported = r
        .supported_features
        .iter()
        .find(|f| f.name.as_str() == TV)
        .expect("transaction.version supported");
    assert_eq!((supported.min_version, supported.max_version), (0, 2));
    let txn_offset_commit = r
        .api_keys
        .iter()
        .find(|k| k.api_key == ApiKey::TxnOffsetCommit as i16)
        .expect("TxnOffsetCommit listed");
    assert_eq!(txn_offset_commit.max_version, 5);
    // v3 leaves out features whose range starts at 0, as Kafka does.
    assert!(api_versions(&b, 3).await.supported_features.is_empty());
    let (level, epoch) = finalized(&b).await;
    assert_eq!(level, Some(2));
    assert!(epoch >= 0);

    // A downgrade needs a downgrade type; with one, the level goes down and the epoch up.
    let r = update(&b, 1, 1).await;
    assert_eq!(r.results[0].error_code, 95, "INVALID_UPDATE_VERSION: {r:?}");
    let r = update(&b, 1, 2).await;
    assert_eq!((r.error_code, r.results[0].error_code), (0, 0), "{r:?}");
    let (level, later) = finalized(&b).await;
    assert_eq!(level, Some(1));
    assert!(later > epoch, "{later} > {epoch}");
    let r = update(&b, 3, 1).await;
    assert_eq!(r.results[0].error_code, 95, "{r:?}");
    let r = update(&b, 0, 3).await;
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    assert_eq!(finalized(&b).await.0, None);
    let r = update(&b, 2, 1).await;
    assert_eq!(r.results[0].error_code, 0, "{r:?}");

    // The level is in the metadata log: a restarted broker replays it.
    b.shutdown().await;
    drop(b);
    let b = start(dir.path(), &[]).await;
    assert_eq!(finalized(&b).await.0, Some(2));
    let r = update(&b, 0, 2).await;
    assert_eq!(r.results[0].error_code, 0, "{r:?}");
    b.shutdown().await;
    drop(b);
    let b = start(dir.path(), &[]).await;
    assert_eq!(
        finalized(&b).await.0,
        None,
        "a disabled feature stays disabled"
    );
    b.shutdown().await;
}
