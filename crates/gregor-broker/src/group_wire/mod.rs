//! Conversions between Kafka wire messages (`kafka-protocol`) and the coordinator's own structs
//! (`gregor_group::api`), for every version of the nine classic group APIs Gregor serves.
//!
//! Pure functions, no I/O. The coordinator never sees a wire version except through
//! `RequestContext::api_version`; everything that depends on a version's fields lives here.
//!
//! # How the shell uses this module
//!
//! Single-group APIs (JoinGroup, SyncGroup, Heartbeat, LeaveGroup, OffsetCommit):
//!
//! ```text
//! let request = Request::JoinGroup(join_group_request(&wire, version));
//! coordinator.handle(now, Input { request_id, context /* api_version: version */, request })
//! Effect::Respond { response: Response::JoinGroup(r), .. } => join_group_response(r, version)
//! ```
//!
//! The conversions that can refuse a request ([`sync_group_request`], [`offset_fetch_requests`])
//! return `Err(error)`: answer `error_response(api, version, &body, error)` without the
//! coordinator, as Kafka does.
//!
//! LeaveGroup v0-v2 names one member: [`leave_group_request`] turns it into a batch of one, and
//! [`leave_group_response`] collapses the answer into the single error code v0-v2 carry
//! (`LeaveGroupResponse::legacy_error`). The shell does nothing special.
//!
//! OffsetCommit: Kafka answers partitions of unknown topics itself, without the coordinator. Use
//! [`split_unknown_partitions`]; if nothing is left, skip the coordinator (an empty commit could
//! still create a "simple" group) and answer [`offset_commit_response`] of the rejected part
//! alone; otherwise pass the rejected part to [`offset_commit_response`] with the coordinator's.
//!
//! Multi-group APIs: the groups of one request may live on different `__consumer_offsets`
//! partitions, so different coordinators (or none on this broker):
//!
//! * OffsetFetch: [`offset_fetch_requests`] gives one coordinator request per group (v0-v7: one;
//!   v8+: one per entry, in order). Route each by `partition_for(group_id)`; a group this broker
//!   cannot serve gets [`offset_fetch_group_error`]. Merge the answers, in the same order, with
//!   [`offset_fetch_response`].
//! * DescribeGroups: [`describe_groups_split`] gives one coordinator request per partition.
//!   Answer each from that partition's coordinator, or with [`describe_groups_error`]; merge with
//!   [`describe_groups_response`], which restores the request's order.
//! * DeleteGroups: [`delete_groups_split`] (duplicates removed, as Kafka does), then
//!   [`delete_groups_error`] for partitions not served here, then [`delete_groups_response`].
//! * ListGroups: send [`list_groups_request`] to every coordinator partition this broker leads.
//!   Partitions still loading answer [`list_groups_loading`]; merge with [`list_groups_response`].
//!
//! TxnOffsetCommit (v0-v4; v3 adds KIP-447's group metadata and is flexible): as OffsetCommit,
//! with [`txn_offset_commit_request`] (turned into an OffsetCommit's topics for
//! [`split_unknown_partitions`]) and [`txn_offset_commit_response`]. Not in
//! [`GROUP_API_VERSIONS`]: `api` advertises it with the transaction coordinator's APIs.
//!
//! Coordinator-level errors (NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE,
//! COORDINATOR_LOAD_IN_PROGRESS) for a whole request: [`error_response`].
//!
//! # Versions
//!
//! [`GROUP_API_VERSIONS`] lists what this module converts. `kafka-protocol` 0.18 reports
//! OffsetCommit and OffsetFetch up to v10 in `ApiKey::valid_versions`, but its request structs
//! only decode up to v9 (v10 identifies topics by id, KIP-848), so Gregor advertises v9 for both.

mod admin;
mod consumer;
mod convert;
mod membership;
mod offset_delete;
mod offsets;

pub use admin::*;
pub use consumer::*;
pub use membership::*;
pub use offset_delete::*;
pub use offsets::*;

use membership::{join_error, sync_error};
use offsets::commit_error;

use gregor_group::api as g;
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::ResponseError;

/// `(api, min version, max version)` for each group API this module converts. Entries for the
/// broker's `api::SUPPORTED`.
pub const GROUP_API_VERSIONS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 6),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    // KIP-848; refused with UNSUPPORTED_VERSION while `group.version` is below 1.
    (ApiKey::ConsumerGroupHeartbeat, 0, 1),
    (ApiKey::ConsumerGroupDescribe, 0, 1),
];

/// Answers any of the nine group requests (and TxnOffsetCommit) with `error` everywhere it can be reported: the
/// whole-request error, or every group or partition the request names. `None` when `request` is
/// not a group request or does not match `api`.
///
/// As in Kafka, a Heartbeat during COORDINATOR_LOAD_IN_PROGRESS is answered NONE: the member
/// keeps its session, and the loaded group expires it if it has really gone.
pub fn error_response(
    api: ApiKey,
    version: i16,
    request: &RequestKind,
    error: ResponseError,
) -> Option<ResponseKind> {
    let response = match (api, request) {
        (ApiKey::JoinGroup, RequestKind::JoinGroup(_)) => {
            ResponseKind::JoinGroup(join_group_response(join_error(error), version))
        }
        (ApiKey::SyncGroup, RequestKind::SyncGroup(_)) => {
            ResponseKind::SyncGroup(sync_group_response(sync_error(error), version))
        }
        (ApiKey::Heartbeat, RequestKind::Heartbeat(_)) => {
            let error = Some(error).filter(|e| *e != ResponseError::CoordinatorLoadInProgress);
            ResponseKind::Heartbeat(heartbeat_response(g::HeartbeatResponse { error }, version))
        }
        (ApiKey::LeaveGroup, RequestKind::LeaveGroup(_)) => {
            let response = g::LeaveGroupResponse {
                error: Some(error),
                members: Vec::new(),
            };
            ResponseKind::LeaveGroup(leave_group_response(response, version))
        }
        (ApiKey::OffsetCommit, RequestKind::OffsetCommit(r)) => {
            let response = commit_error(&offset_commit_request(r, version), error);
            ResponseKind::OffsetCommit(offset_commit_response(response, None, version))
        }
        (ApiKey::TxnOffsetCommit, RequestKind::TxnOffsetCommit(r)) => {
            let commit = g::OffsetCommitRequest {
                topics: txn_offset_commit_request(r, version).topics,
                ..Default::default()
            };
            let response = g::TxnOffsetCommitResponse {
                topics: commit_error(&commit, error).topics,
            };
            ResponseKind::TxnOffsetCommit(txn_offset_commit_response(response, None, version))
        }
        (ApiKey::OffsetFetch, RequestKind::OffsetFetch(r)) => {
            let groups = offsets::fetch_groups(r, version)
                .iter()
                .map(|group| offset_fetch_group_error(group, error))
                .collect();
            ResponseKind::OffsetFetch(offset_fetch_response(groups, version))
        }
        (ApiKey::DescribeGroups, RequestKind::DescribeGroups(r)) => {
            let part = describe_groups_error(&describe_groups_request(r), error);
            ResponseKind::DescribeGroups(describe_groups_response(r, vec![part], version))
        }
        (ApiKey::ListGroups, RequestKind::ListGroups(_)) => {
            let part = g::ListGroupsResponse {
                error: Some(error),
                groups: Vec::new(),
            };
            ResponseKind::ListGroups(list_groups_response(vec![part], version))
        }
        (ApiKey::DeleteGroups, RequestKind::DeleteGroups(r)) => {
            let parts = vec![delete_groups_error(&delete_groups_request(r), error)];
            ResponseKind::DeleteGroups(delete_groups_response(parts, version))
        }
        (ApiKey::OffsetDelete, RequestKind::OffsetDelete(_)) => {
            ResponseKind::OffsetDelete(offset_delete_error(error))
        }
        (ApiKey::ConsumerGroupHeartbeat, RequestKind::ConsumerGroupHeartbeat(_)) => {
            ResponseKind::ConsumerGroupHeartbeat(consumer_group_heartbeat_error(error))
        }
        (ApiKey::ConsumerGroupDescribe, RequestKind::ConsumerGroupDescribe(r)) => {
            let mut resp = kafka_protocol::messages::ConsumerGroupDescribeResponse::default();
            resp.groups = r
                .group_ids
                .iter()
                .map(|id| {
                    let mut d = kafka_protocol::messages::consumer_group_describe_response::DescribedGroup::default();
                    d.group_id = id.clone();
                    d.error_code = error.code();
                    d.authorized_operations = i32::MIN;
                    d
                })
                .collect();
            ResponseKind::ConsumerGroupDescribe(resp)
        }
        _ => return None,
    };
    Some(response)
}

/// Test helpers: encode a response at a version with `kafka-protocol`, decode it back, and check
/// nothing was lost or refused.
#[cfg(test)]
pub(crate) mod wire_check {
    use bytes::BytesMut;
    use kafka_protocol::protocol::{Decodable, Encodable};

    /// Encodes `message` at `version` (failing if a field is set that the version lacks) and
    /// returns what a client decodes from those bytes.
    pub fn roundtrip<M: Encodable + Decodable>(message: &M, version: i16) -> M {
        let mut buf = BytesMut::new();
        message
            .encode(&mut buf, version)
            .unwrap_or_else(|e| panic!("encoding at v{version} failed: {e}"));
        let mut bytes = buf.freeze();
        let decoded = M::decode(&mut bytes, version)
            .unwrap_or_else(|e| panic!("decoding at v{version} failed: {e}"));
        assert!(bytes.is_empty(), "trailing bytes at v{version}");
        decoded
    }

    /// Round-trips and asserts that the client sees exactly what was built.
    pub fn assert_roundtrip<M>(message: &M, version: i16) -> M
    where
        M: Encodable + Decodable + PartialEq + std::fmt::Debug,
    {
        let decoded = roundtrip(message, version);
        assert_eq!(&decoded, message, "v{version} lost or changed a field");
        decoded
    }
}

#[cfg(test)]
mod tests {
    use super::convert::group_id;
    use super::*;
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::StrBytes;

    fn encodes(response: &ResponseKind, version: i16) -> bool {
        let mut buf = bytes::BytesMut::new();
        response.encode(&mut buf, version).is_ok()
    }

    #[test]
    fn advertised_ranges_fit_the_crate() {
        for (api, min, max) in GROUP_API_VERSIONS {
            let crate_range = api.valid_versions();
            assert!(
                *min >= crate_range.min && *max <= crate_range.max,
                "{api:?}"
            );
        }
    }

    #[test]
    fn error_response_answers_every_group_api_at_every_version() {
        let requests: Vec<(ApiKey, RequestKind)> = vec![
            (
                ApiKey::JoinGroup,
                RequestKind::JoinGroup(Default::default()),
            ),
            (
                ApiKey::SyncGroup,
                RequestKind::SyncGroup(Default::default()),
            ),
            (
                ApiKey::Heartbeat,
                RequestKind::Heartbeat(Default::default()),
            ),
            (
                ApiKey::LeaveGroup,
                RequestKind::LeaveGroup(Default::default()),
            ),
            (
                ApiKey::OffsetCommit,
                RequestKind::OffsetCommit(Default::default()),
            ),
            (
                ApiKey::OffsetFetch,
                RequestKind::OffsetFetch(Default::default()),
            ),
            (
                ApiKey::DescribeGroups,
                RequestKind::DescribeGroups(Default::default()),
            ),
            (
                ApiKey::ListGroups,
                RequestKind::ListGroups(Default::default()),
            ),
            (
                ApiKey::DeleteGroups,
                RequestKind::DeleteGroups(Default::default()),
            ),
            (
                ApiKey::OffsetDelete,
                RequestKind::OffsetDelete(Default::default()),
            ),
        ];
        for (api, request) in &requests {
            let (min, max) = GROUP_API_VERSIONS
                .iter()
                .find(|(k, _, _)| k == api)
                .map(|(_, lo, hi)| (*lo, *hi))
                .expect("listed");
            for version in min..=max {
                let response =
                    error_response(*api, version, request, ResponseError::NotCoordinator)
                        .expect("a group request");
                assert!(encodes(&response, version), "{api:?} v{version}");
            }
        }
    }

    #[test]
    fn error_response_refuses_mismatched_or_foreign_requests() {
        let heartbeat = RequestKind::Heartbeat(Default::default());
        assert!(error_response(
            ApiKey::JoinGroup,
            4,
            &heartbeat,
            ResponseError::NotCoordinator
        )
        .is_none());
        let metadata = RequestKind::Metadata(Default::default());
        assert!(error_response(
            ApiKey::Metadata,
            4,
            &metadata,
            ResponseError::NotCoordinator
        )
        .is_none());
    }

    #[test]
    fn offset_fetch_error_response_follows_the_version() {
        let loading = ResponseError::CoordinatorLoadInProgress;
        let mut single = OffsetFetchRequest::default();
        single.group_id = group_id("g".into());
        let mut topic = offset_fetch_request::OffsetFetchRequestTopic::default();
        topic.name = TopicName(StrBytes::from_static_str("t"));
        topic.partition_indexes = vec![0, 1];
        single.topics = Some(vec![topic]);
        let fetch = |request: OffsetFetchRequest, version| {
            let kind = RequestKind::OffsetFetch(request);
            match error_response(ApiKey::OffsetFetch, version, &kind, loading) {
                Some(ResponseKind::OffsetFetch(r)) => r,
                other => panic!("offset fetch response expected, got {other:?}"),
            }
        };
        // v1: no top-level error; every requested partition carries it.
        let v1 = fetch(single.clone(), 1);
        assert_eq!(v1.topics[0].partitions.len(), 2);
        assert!(v1.topics[0]
            .partitions
            .iter()
            .all(|p| p.error_code == loading.code() && p.committed_offset == -1));
        // v2-v7: top level.
        let v5 = fetch(single, 5);
        assert_eq!(v5.error_code, loading.code());
        assert!(v5.topics.is_empty());
        // v8+: every group.
        let mut multi = OffsetFetchRequest::default();
        multi.groups = ["a", "b"]
            .into_iter()
            .map(|id| {
                let mut group = offset_fetch_request::OffsetFetchRequestGroup::default();
                group.group_id = group_id(id.into());
                group.topics = None;
                group
            })
            .collect();
        let v9 = fetch(multi, 9);
        let got: Vec<(&str, i16)> = v9
            .groups
            .iter()
            .map(|g| (g.group_id.as_str(), g.error_code))
            .collect();
        assert_eq!(got, vec![("a", loading.code()), ("b", loading.code())]);
    }

    #[test]
    fn heartbeat_while_loading_is_answered_none_like_kafka() {
        let request = RequestKind::Heartbeat(Default::default());
        let Some(ResponseKind::Heartbeat(r)) = error_response(
            ApiKey::Heartbeat,
            4,
            &request,
            ResponseError::CoordinatorLoadInProgress,
        ) else {
            panic!("heartbeat response expected");
        };
        assert_eq!(r.error_code, 0);
        let Some(ResponseKind::Heartbeat(r)) = error_response(
            ApiKey::Heartbeat,
            4,
            &request,
            ResponseError::NotCoordinator,
        ) else {
            panic!("heartbeat response expected");
        };
        assert_eq!(r.error_code, ResponseError::NotCoordinator.code());
    }

    #[test]
    fn error_response_reaches_every_partition_and_group() {
        let mut commit = OffsetCommitRequest::default();
        let mut topic = offset_commit_request::OffsetCommitRequestTopic::default();
        topic.name = TopicName(StrBytes::from_static_str("t"));
        topic.partitions = (0..3)
            .map(|i| {
                let mut p = offset_commit_request::OffsetCommitRequestPartition::default();
                p.partition_index = i;
                p
            })
            .collect();
        commit.topics = vec![topic];
        let Some(ResponseKind::OffsetCommit(r)) = error_response(
            ApiKey::OffsetCommit,
            8,
            &RequestKind::OffsetCommit(commit),
            ResponseError::CoordinatorLoadInProgress,
        ) else {
            panic!("offset commit response expected");
        };
        let codes: Vec<i16> = r.topics[0]
            .partitions
            .iter()
            .map(|p| p.error_code)
            .collect();
        assert_eq!(
            codes,
            vec![ResponseError::CoordinatorLoadInProgress.code(); 3]
        );

        let mut describe = DescribeGroupsRequest::default();
        describe.groups = vec![group_id("a".into()), group_id("b".into())];
        let Some(ResponseKind::DescribeGroups(r)) = error_response(
            ApiKey::DescribeGroups,
            5,
            &RequestKind::DescribeGroups(describe),
            ResponseError::NotCoordinator,
        ) else {
            panic!("describe response expected");
        };
        let got: Vec<(&str, i16)> = r
            .groups
            .iter()
            .map(|g| (g.group_id.as_str(), g.error_code))
            .collect();
        let nc = ResponseError::NotCoordinator.code();
        assert_eq!(got, vec![("a", nc), ("b", nc)]);
    }
}
