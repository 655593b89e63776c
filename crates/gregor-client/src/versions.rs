//! API version negotiation: each request goes out in the highest version both this client
//! and the broker support (the broker's range comes from its ApiVersions response).

use std::collections::{BTreeMap, HashMap};
use std::fmt;

use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::{Request, VersionRange};

/// The versions of an API this client can build and parse: kafka-protocol's range, narrowed
/// where a request builder does not handle the oldest layouts.
pub fn client_range<R: Request>() -> VersionRange {
    let all = R::VERSIONS;
    match ApiKey::try_from(R::KEY) {
        // v0 encodes "all topics" as an empty list, which this client never needs to send.
        Ok(ApiKey::Metadata) => VersionRange {
            min: all.min.max(1),
            max: all.max,
        },
        _ => all,
    }
}

/// A name for an API key in messages (`Metadata`, `CreateTopics`...).
pub fn api_name(key: i16) -> &'static str {
    match ApiKey::try_from(key) {
        Ok(ApiKey::Produce) => "Produce",
        Ok(ApiKey::Fetch) => "Fetch",
        Ok(ApiKey::ListOffsets) => "ListOffsets",
        Ok(ApiKey::Metadata) => "Metadata",
        Ok(ApiKey::OffsetCommit) => "OffsetCommit",
        Ok(ApiKey::OffsetFetch) => "OffsetFetch",
        Ok(ApiKey::FindCoordinator) => "FindCoordinator",
        Ok(ApiKey::JoinGroup) => "JoinGroup",
        Ok(ApiKey::Heartbeat) => "Heartbeat",
        Ok(ApiKey::LeaveGroup) => "LeaveGroup",
        Ok(ApiKey::SyncGroup) => "SyncGroup",
        Ok(ApiKey::DescribeGroups) => "DescribeGroups",
        Ok(ApiKey::ListGroups) => "ListGroups",
        Ok(ApiKey::ApiVersions) => "ApiVersions",
        Ok(ApiKey::CreateTopics) => "CreateTopics",
        Ok(ApiKey::DeleteTopics) => "DeleteTopics",
        Ok(ApiKey::DeleteGroups) => "DeleteGroups",
        Ok(ApiKey::DescribeConfigs) => "DescribeConfigs",
        Ok(ApiKey::AlterConfigs) => "AlterConfigs",
        Ok(ApiKey::CreatePartitions) => "CreatePartitions",
        Ok(ApiKey::ElectLeaders) => "ElectLeaders",
        Ok(ApiKey::IncrementalAlterConfigs) => "IncrementalAlterConfigs",
        Ok(ApiKey::AlterPartitionReassignments) => "AlterPartitionReassignments",
        Ok(ApiKey::ListPartitionReassignments) => "ListPartitionReassignments",
        Ok(ApiKey::DescribeCluster) => "DescribeCluster",
        Ok(ApiKey::ConsumerGroupDescribe) => "ConsumerGroupDescribe",
        _ => "API",
    }
}

/// The version ranges one broker advertised.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct BrokerVersions {
    ranges: HashMap<i16, (i16, i16)>,
    /// The cluster's finalized feature levels the broker reported (KIP-584), by name.
    finalized: BTreeMap<String, i16>,
}

impl BrokerVersions {
    pub fn from_response(response: &ApiVersionsResponse) -> BrokerVersions {
        BrokerVersions {
            ranges: response
                .api_keys
                .iter()
                .map(|k| (k.api_key, (k.min_version, k.max_version)))
                .collect(),
            finalized: response
                .finalized_features
                .iter()
                .map(|f| (f.name.to_string(), f.max_version_level))
                .collect(),
        }
    }

    /// The finalized level of `feature` (0 when the broker reports none, as Kafka reads it).
    pub fn finalized_level(&self, feature: &str) -> i16 {
        self.finalized.get(feature).copied().unwrap_or(0)
    }

    /// The broker's range for an API key, if it supports the API at all.
    pub fn range(&self, api_key: i16) -> Option<VersionRange> {
        self.ranges
            .get(&api_key)
            .map(|&(min, max)| VersionRange { min, max })
    }

    /// The highest version of `api_key` in both ranges.
    pub fn negotiate(&self, api_key: i16, client: VersionRange) -> Result<i16, NoCommonVersion> {
        let broker = self.range(api_key);
        match broker {
            Some(b) => {
                let common = b.intersect(&client);
                if common.is_empty() {
                    Err(NoCommonVersion { broker, client })
                } else {
                    Ok(common.max)
                }
            }
            None => Err(NoCommonVersion { broker, client }),
        }
    }

    /// The highest version of `R` both sides support.
    pub fn pick<R: Request>(&self) -> Result<i16, NoCommonVersion> {
        self.negotiate(R::KEY, client_range::<R>())
    }
}

/// Negotiation failed: the broker does not know the API, or the ranges do not overlap.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct NoCommonVersion {
    pub broker: Option<VersionRange>,
    pub client: VersionRange,
}

impl NoCommonVersion {
    pub fn broker_text(&self) -> String {
        match self.broker {
            Some(r) => format!("{}..={}", r.min, r.max),
            None => "none".to_string(),
        }
    }
}

impl fmt::Display for NoCommonVersion {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "broker {}, client {}..={}",
            self.broker_text(),
            self.client.min,
            self.client.max
        )
    }
}

/// What to do with an ApiVersions answer.
#[derive(Debug, Clone, PartialEq)]
pub enum HandshakeStep {
    /// The broker's ranges are known.
    Done(BrokerVersions),
    /// The broker does not speak the version sent; ask again in this (lower) version.
    RetryWith(i16),
    /// The broker answered with an error, or with `UNSUPPORTED_VERSION` and no version of
    /// ApiVersions below the one sent that both sides know.
    Fail(i16),
}

/// Interprets an ApiVersions response to a request sent in `sent_version` (KIP-511: a broker
/// that does not know the version answers `UNSUPPORTED_VERSION` with its own ranges, and the
/// client retries in the highest version both know).
pub fn handshake_step(sent_version: i16, response: &ApiVersionsResponse) -> HandshakeStep {
    let broker = BrokerVersions::from_response(response);
    if response.error_code == crate::error::KafkaCode::UNSUPPORTED_VERSION.0 {
        let ours = <kafka_protocol::messages::ApiVersionsRequest as kafka_protocol::protocol::Message>::VERSIONS;
        return match broker.negotiate(ApiKey::ApiVersions as i16, ours) {
            Ok(v) if v < sent_version => HandshakeStep::RetryWith(v),
            _ => HandshakeStep::Fail(response.error_code),
        };
    }
    if response.error_code != 0 {
        return HandshakeStep::Fail(response.error_code);
    }
    HandshakeStep::Done(broker)
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::ApiVersion;
    use kafka_protocol::messages::{CreateTopicsRequest, MetadataRequest};
    use kafka_protocol::protocol::Message;

    fn broker(ranges: &[(i16, i16, i16)]) -> BrokerVersions {
        let mut r = ApiVersionsResponse::default();
        r.api_keys = ranges
            .iter()
            .map(|&(k, min, max)| {
                ApiVersion::default()
                    .with_api_key(k)
                    .with_min_version(min)
                    .with_max_version(max)
            })
            .collect();
        BrokerVersions::from_response(&r)
    }

    impl BrokerVersions {
        fn ranges_for_test(&self) -> Vec<ApiVersion> {
            let mut v: Vec<ApiVersion> = self
                .ranges
                .iter()
                .map(|(&k, &(min, max))| {
                    ApiVersion::default()
                        .with_api_key(k)
                        .with_min_version(min)
                        .with_max_version(max)
                })
                .collect();
            v.sort_by_key(|a| a.api_key);
            v
        }
    }

    #[test]
    fn picks_the_highest_common_version() {
        // An older broker: Metadata up to 9 (client knows more) -> 9.
        let b = broker(&[(3, 0, 9), (19, 2, 99)]);
        assert_eq!(b.pick::<MetadataRequest>(), Ok(9));
        // A newer broker than the client: the client's max wins.
        assert_eq!(
            b.pick::<CreateTopicsRequest>(),
            Ok(CreateTopicsRequest::VERSIONS.max)
        );
    }

    #[test]
    fn unsupported_api_versions_version_retries_lower_once() {
        let mut resp = ApiVersionsResponse::default().with_error_code(35);
        resp.api_keys = broker(&[(18, 0, 2), (3, 0, 12)]).ranges_for_test();
        assert_eq!(handshake_step(4, &resp), HandshakeStep::RetryWith(2));
        // The broker claims to support what was sent and still refuses: no loop.
        assert_eq!(handshake_step(2, &resp), HandshakeStep::Fail(35));
        // No ApiVersions entry at all.
        let bare = ApiVersionsResponse::default().with_error_code(35);
        assert_eq!(handshake_step(4, &bare), HandshakeStep::Fail(35));
        // Any other error is final.
        assert_eq!(
            handshake_step(3, &ApiVersionsResponse::default().with_error_code(-1)),
            HandshakeStep::Fail(-1)
        );
        let ok = ApiVersionsResponse::default();
        assert!(matches!(handshake_step(3, &ok), HandshakeStep::Done(_)));
    }

    #[test]
    fn no_overlap_or_unknown_api_is_an_error() {
        let b = broker(&[(3, 0, 0)]);
        // The client does not send Metadata v0.
        let e = b.pick::<MetadataRequest>().unwrap_err();
        assert_eq!(e.broker_text(), "0..=0");
        assert!(b
            .pick::<CreateTopicsRequest>()
            .unwrap_err()
            .broker
            .is_none());
    }
}
