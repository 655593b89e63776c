//! The APIs and versions Gregor implements: what ApiVersions advertises and what the connection
//! accepts. Each range covers current librdkafka, kafka-python and Java clients.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::ApiKey;

/// `(api, min version, max version)`, besides the group APIs (`group_wire::GROUP_API_VERSIONS`).
pub const SUPPORTED: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 17),
    (ApiKey::ListOffsets, 1, 9),
    (ApiKey::Metadata, 0, 12),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    // v0-3 from producers, v4 (`verify_only`) from partition leaders (KIP-890). A producer
    // adds partitions itself only while `transaction.version` is below 2 (ApiVersions'
    // finalized features); at 2, Produce v12 and TxnOffsetCommit v5 add them.
    (ApiKey::AddPartitionsToTxn, 0, 4),
    (ApiKey::AddOffsetsToTxn, 0, 4),
    // v5: the decision bumps the epoch and the answer names it (KIP-890 part 2).
    (ApiKey::EndTxn, 0, 5),
    // Flexible from v3, where the consumer's member id and generation came (KIP-447).
    // v5: the partition is added to the transaction by the commit (KIP-890 part 2).
    (ApiKey::TxnOffsetCommit, 0, 5),
    (ApiKey::WriteTxnMarkers, 1, 1),
    (ApiKey::DescribeProducers, 0, 0),
    // KIP-664's transaction admin; ListTransactions v1 adds the duration filter (KIP-994).
    (ApiKey::DescribeTransactions, 0, 0),
    (ApiKey::ListTransactions, 0, 1),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 0),
    (ApiKey::ListPartitionReassignments, 0, 0),
    (ApiKey::DescribeCluster, 0, 1),
    (ApiKey::DescribeLogDirs, 0, 4),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::DescribeUserScramCredentials, 0, 0),
    (ApiKey::AlterUserScramCredentials, 0, 0),
    (ApiKey::DescribeClientQuotas, 0, 1),
    (ApiKey::AlterClientQuotas, 0, 1),
    (ApiKey::DescribeAcls, 1, 3),
    (ApiKey::CreateAcls, 1, 3),
    (ApiKey::DeleteAcls, 1, 3),
    // KIP-584's feature levels (`transaction.version`); v2 answers only a top-level error.
    (ApiKey::UpdateFeatures, 0, 2),
    // Answered by the connection (`sasl_session`), never by a handler. SaslHandshake v0 is
    // listed as Kafka lists it (librdkafka before 2.10 requires it, then speaks v1) but
    // refused when sent: its tokens would come without Kafka headers.
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::SaslAuthenticate, 0, 2),
];

/// Every supported API: the list above and the group APIs `group_wire` converts.
fn all() -> impl Iterator<Item = &'static (ApiKey, i16, i16)> {
    SUPPORTED
        .iter()
        .chain(crate::group_wire::GROUP_API_VERSIONS)
}

/// The supported version range of an API, if Gregor implements it.
pub fn supported(api: ApiKey) -> Option<(i16, i16)> {
    all()
        .find(|(k, _, _)| *k == api)
        .map(|(_, lo, hi)| (*lo, *hi))
}

/// The ApiVersions entries.
pub fn api_versions() -> Vec<ApiVersion> {
    all()
        .map(|(k, lo, hi)| {
            let mut v = ApiVersion::default();
            v.api_key = *k as i16;
            v.min_version = *lo;
            v.max_version = *hi;
            v
        })
        .collect()
}

/// The APIs a controller listener serves to Kafka clients (KIP-919's `bootstrap.controllers`):
/// the login, DescribeCluster for the controllers' endpoints, and a node's configs, which is
/// what a controller-only node's certificate rotation needs.
pub const CONTROLLER_LISTENER_APIS: &[ApiKey] = &[
    ApiKey::ApiVersions,
    ApiKey::SaslHandshake,
    ApiKey::SaslAuthenticate,
    ApiKey::DescribeCluster,
    ApiKey::DescribeConfigs,
    ApiKey::IncrementalAlterConfigs,
];

/// [`api_versions`] of the controller listener's APIs.
pub fn controller_listener_api_versions() -> Vec<ApiVersion> {
    api_versions()
        .into_iter()
        .filter(|v| {
            CONTROLLER_LISTENER_APIS
                .iter()
                .any(|k| *k as i16 == v.api_key)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_controller_listener_advertises_each_of_its_apis_with_their_versions() {
        let listed = controller_listener_api_versions();
        assert_eq!(listed.len(), CONTROLLER_LISTENER_APIS.len());
        for v in listed {
            let key = ApiKey::try_from(v.api_key).expect("a known key");
            assert_eq!(supported(key), Some((v.min_version, v.max_version)));
        }
    }

    #[test]
    fn group_apis_are_advertised_and_accepted() {
        assert_eq!(supported(ApiKey::JoinGroup), Some((0, 9)));
        assert_eq!(supported(ApiKey::Produce), Some((3, 12)));
        assert_eq!(supported(ApiKey::ShareFetch), None);
        let keys: Vec<i16> = api_versions().iter().map(|v| v.api_key).collect();
        assert!(keys.contains(&(ApiKey::OffsetCommit as i16)));
        let mut unique = keys.clone();
        unique.sort_unstable();
        unique.dedup();
        assert_eq!(unique.len(), keys.len(), "each API advertised once");
    }
}
