//! Request handlers, one module per family of APIs.

mod admin;
mod cluster;
mod elect;
mod fetch;
mod groups;
mod offsets;
mod produce;
mod reassign;

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
        r @ (RequestKind::CreateTopics(_)
        | RequestKind::DeleteTopics(_)
        | RequestKind::CreatePartitions(_)
        | RequestKind::IncrementalAlterConfigs(_)
        | RequestKind::ElectLeaders(_)
        | RequestKind::AlterPartitionReassignments(_)) => {
            match crate::forward::to_controller(b, ctx.api_key, v, r).await {
                Some(response) => response,
                None => return Reply::Close,
            }
        }
        RequestKind::ListPartitionReassignments(r) => {
            ResponseKind::ListPartitionReassignments(reassign::list_partition_reassignments(b, &r))
        }
        RequestKind::DescribeConfigs(r) => {
            ResponseKind::DescribeConfigs(admin::describe_configs(b, r, v).await)
        }
        RequestKind::Produce(r) => return produce::produce(b.data_plane(), r, v).await,
        RequestKind::InitProducerId(r) => {
            ResponseKind::InitProducerId(produce::init_producer_id(&b.producer_ids, &r))
        }
        RequestKind::Fetch(r) => ResponseKind::Fetch(fetch::fetch(b.data_plane(), r, v).await),
        RequestKind::ListOffsets(r) => {
            ResponseKind::ListOffsets(offsets::list_offsets(b.data_plane(), r, v))
        }
        RequestKind::OffsetForLeaderEpoch(r) => {
            ResponseKind::OffsetForLeaderEpoch(offsets::offset_for_leader_epoch(b.data_plane(), r))
        }
        RequestKind::DeleteRecords(r) => {
            ResponseKind::DeleteRecords(offsets::delete_records(b.data_plane(), r).await)
        }
        other => {
            // The connection only decodes APIs listed in `api::SUPPORTED`, all routed above.
            error!(api = ?ctx.api_key, request = ?std::mem::discriminant(&other), "no handler for a supported API");
            return Reply::Close;
        }
    })
}

/// Handles a controller API on this node (the active controller, or the forwarding broker
/// once forwarding gave up, where the metadata write fails with NOT_CONTROLLER). `None` for
/// any other API.
pub async fn controller_api(
    b: &std::sync::Arc<Broker>,
    request: RequestKind,
    v: i16,
) -> Option<ResponseKind> {
    Some(match request {
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(admin::create_topics(b, r, v).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(b, r, v).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(b, r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => {
            ResponseKind::IncrementalAlterConfigs(admin::incremental_alter_configs(b, r).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(elect::elect_leaders(b, r, v).await)
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            reassign::alter_partition_reassignments(b, r).await,
        ),
        RequestKind::BrokerRegistration(r) => {
            ResponseKind::BrokerRegistration(cluster::broker_registration(b, r).await)
        }
        RequestKind::BrokerHeartbeat(r) => {
            ResponseKind::BrokerHeartbeat(cluster::broker_heartbeat(b, r).await)
        }
        RequestKind::AlterPartition(r) => {
            ResponseKind::AlterPartition(crate::alter_partition::handle(b, r).await)
        }
        _ => return None,
    })
}

/// Creates topics on behalf of the broker itself (auto-creation, `__consumer_offsets`): on this
/// node if it is the active controller, else through a forwarded CreateTopics request. Returns
/// each topic's name and outcome.
pub async fn create_topics_internal(
    b: &std::sync::Arc<Broker>,
    request: &gregor_meta::CreateTopicsRequest,
) -> Result<Vec<(String, Result<(), gregor_meta::ApiError>)>, crate::metadata::MetadataError> {
    use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
    use kafka_protocol::messages::{ApiKey, CreateTopicsRequest, TopicName};
    if b.metadata.is_active_controller() {
        let results = b.metadata.submit(|c| c.create_topics(request)).await?;
        return Ok(results
            .into_iter()
            .map(|r| (r.name, r.result.map(|_| ())))
            .collect());
    }
    let mut wire = CreateTopicsRequest::default();
    wire.timeout_ms = crate::forward::FORWARD_TIMEOUT.as_millis() as i32;
    wire.validate_only = request.validate_only;
    wire.topics = request
        .topics
        .iter()
        .map(|t| {
            let mut out = CreatableTopic::default();
            out.name = TopicName(s(t.name.clone()));
            out.num_partitions = t.num_partitions;
            out.replication_factor = t.replication_factor;
            out.configs = t
                .configs
                .iter()
                .map(|(k, v)| {
                    let mut c = CreatableTopicConfig::default();
                    c.name = s(k.clone());
                    c.value = v.clone().map(s);
                    c
                })
                .collect();
            out
        })
        .collect();
    const VERSION: i16 = 5;
    match crate::forward::to_controller(
        b,
        ApiKey::CreateTopics,
        VERSION,
        RequestKind::CreateTopics(wire),
    )
    .await
    {
        Some(ResponseKind::CreateTopics(r)) => Ok(r
            .topics
            .into_iter()
            .map(|t| {
                let outcome = match kafka_protocol::ResponseError::try_from_code(t.error_code) {
                    None => Ok(()),
                    Some(code) => Err(gregor_meta::ApiError::new(
                        code,
                        t.error_message.map(|m| m.to_string()).unwrap_or_default(),
                    )),
                };
                (t.name.0.to_string(), outcome)
            })
            .collect()),
        _ => Err(crate::metadata::MetadataError::NotController),
    }
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
