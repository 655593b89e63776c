//! Request handlers, one module per family of APIs. Each takes the narrow service it runs on
//! (`DataPlane`, `ControlPlane`, `Groups`, `MetadataManager`); `broker.rs` routes requests to
//! them.

pub(crate) mod admin;
pub(crate) mod cluster;
pub(crate) mod elect;
pub(crate) mod fetch;
pub(crate) mod groups;
pub(crate) mod log_dirs;
pub(crate) mod offsets;
pub(crate) mod produce;
pub(crate) mod reassign;

use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::forward::ControlPlane;

/// Handles a controller API on this node (the active controller, or the forwarding broker
/// once forwarding gave up, where the metadata write fails with NOT_CONTROLLER). `None` for
/// any other API.
pub async fn controller_api(
    b: ControlPlane<'_>,
    request: RequestKind,
    v: i16,
) -> Option<ResponseKind> {
    Some(match request {
        RequestKind::CreateTopics(r) => {
            ResponseKind::CreateTopics(admin::create_topics(b.metadata, r, v).await)
        }
        RequestKind::DeleteTopics(r) => {
            ResponseKind::DeleteTopics(admin::delete_topics(b.metadata, r, v).await)
        }
        RequestKind::CreatePartitions(r) => {
            ResponseKind::CreatePartitions(admin::create_partitions(b.metadata, r).await)
        }
        RequestKind::IncrementalAlterConfigs(r) => ResponseKind::IncrementalAlterConfigs(
            admin::incremental_alter_configs(b.metadata, r).await,
        ),
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(elect::elect_leaders(b.metadata, r, v).await)
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            reassign::alter_partition_reassignments(b.metadata, r).await,
        ),
        RequestKind::BrokerRegistration(r) => {
            ResponseKind::BrokerRegistration(cluster::broker_registration(b, r).await)
        }
        RequestKind::BrokerHeartbeat(r) => {
            ResponseKind::BrokerHeartbeat(cluster::broker_heartbeat(b, r).await)
        }
        RequestKind::AlterPartition(r) => {
            ResponseKind::AlterPartition(crate::alter_partition::handle(b.metadata, r).await)
        }
        _ => return None,
    })
}

/// Creates topics on behalf of the broker itself (auto-creation, `__consumer_offsets`): on this
/// node if it is the active controller, else through a forwarded CreateTopics request. Returns
/// each topic's name and outcome.
pub async fn create_topics_internal(
    b: ControlPlane<'_>,
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
