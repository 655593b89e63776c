//! Request handlers, one module per family of APIs.

mod admin;
mod cluster;
mod fetch;
mod groups;
mod offsets;
mod produce;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use tracing::error;

use crate::broker::Broker;
use crate::connection::{Reply, RequestContext};

/// Routes a request to its handler.
pub async fn dispatch(
    b: &std::sync::Arc<Broker>,
    ctx: &RequestContext,
    request: RequestKind,
) -> Reply {
    let v = ctx.api_version;
    Reply::Respond(match request {
        RequestKind::FindCoordinator(r) => {
            ResponseKind::FindCoordinator(groups::find_coordinator(b, r, v).await)
        }
        r @ (RequestKind::JoinGroup(_)
        | RequestKind::SyncGroup(_)
        | RequestKind::Heartbeat(_)
        | RequestKind::LeaveGroup(_)
        | RequestKind::OffsetCommit(_)
        | RequestKind::OffsetFetch(_)
        | RequestKind::DescribeGroups(_)
        | RequestKind::ListGroups(_)
        | RequestKind::DeleteGroups(_)) => return groups::handle(b, ctx, r).await.into(),
        RequestKind::ApiVersions(r) => ResponseKind::ApiVersions(cluster::api_versions(&r, v)),
        RequestKind::Metadata(r) => ResponseKind::Metadata(cluster::metadata(b, r, v).await),
        RequestKind::DescribeCluster(r) => {
            ResponseKind::DescribeCluster(cluster::describe_cluster(b, &r, v))
        }
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(admin::create_topics(b, r, v).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(b, r, v).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(b, r).await)
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(admin::describe_configs(b, r, v).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(admin::incremental_alter_configs(b, r).await)
        }
        RequestKind::Produce(r) => return produce::produce(b, r, v).await,
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(produce::init_producer_id(b, &r))
        }
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch::fetch(b, r, v).await),
        RequestKind::ListOffsets(r) => ResponseKind::ListOffsets(offsets::list_offsets(b, r, v)),
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offsets::offset_for_leader_epoch(b, r))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(offsets::delete_records(b, r).await)
        }
        other => {
            // The connection only decodes APIs listed in `api::SUPPORTED`, all routed above.
            error!(api = ?ctx.api_key, request = ?std::mem::discriminant(&other), "no handler for a supported API");
            return Reply::Close;
        }
    })
}

/// What a broker without transactions tells a transactional client, in FindCoordinator
/// (transaction key type) and InitProducerId with a transactional id.
pub(crate) const TRANSACTIONS_UNSUPPORTED: &str =
    "transactions are not supported by this Gregor broker; use an idempotent producer without transactional.id";

/// The error code that refuses transactions (see [`TRANSACTIONS_UNSUPPORTED`]). Of the codes a
/// FindCoordinator answer can carry, this is the one librdkafka treats as fatal at once (the
/// retriable ones make `init_transactions()` spin until its timeout); the error message beside
/// it tells the user why.
pub(crate) fn transactions_unsupported() -> kafka_protocol::ResponseError {
    kafka_protocol::ResponseError::TransactionalIdAuthorizationFailed
}

pub(crate) fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}
