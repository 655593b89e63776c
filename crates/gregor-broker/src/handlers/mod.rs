//! Request handlers, one module per family of APIs. Each takes the narrow service it runs on
//! (`DataPlane`, `ControlPlane`, `Groups`, `MetadataManager`); `broker.rs` routes requests to
//! them.

pub(crate) mod acls;
pub(crate) mod admin;
pub(crate) mod broker_configs;
pub(crate) mod cluster;
mod common;
pub(crate) mod coordinator;
pub(crate) mod elect;
pub(crate) mod features;
pub(crate) mod fetch;
pub(crate) mod groups;
pub(crate) mod legacy_configs;
pub(crate) mod log_dirs;
pub(crate) mod offsets;
pub(crate) mod produce;
pub(crate) mod quotas;
pub(crate) mod reassign;
pub(crate) mod scram;
pub(crate) mod txn;
pub(crate) mod txn_admin;
pub(crate) mod txn_coordinator;

use kafka_protocol::messages::{RequestKind, ResponseKind};

use crate::forward::ControlPlane;
pub(crate) use common::s;
// Topics the broker creates for itself: a control-plane service the handlers use too.
pub(crate) use crate::forward::create_topics_internal;

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
        RequestKind::AlterConfigs(r) => {
            ResponseKind::AlterConfigs(legacy_configs::alter_configs(b.metadata, r).await)
        }
        RequestKind::ElectLeaders(r) => {
            ResponseKind::ElectLeaders(elect::elect_leaders(b.metadata, r, v).await)
        }
        RequestKind::AlterPartitionReassignments(r) => ResponseKind::AlterPartitionReassignments(
            reassign::alter_partition_reassignments(b.metadata, r).await,
        ),
        RequestKind::CreateAcls(r) => {
            ResponseKind::CreateAcls(acls::create_acls(b.metadata, r).await)
        }
        RequestKind::DeleteAcls(r) => {
            ResponseKind::DeleteAcls(acls::delete_acls(b.metadata, r).await)
        }
        RequestKind::AlterUserScramCredentials(r) => ResponseKind::AlterUserScramCredentials(
            scram::alter_user_scram_credentials(b.metadata, r).await,
        ),
        RequestKind::AlterClientQuotas(r) => {
            ResponseKind::AlterClientQuotas(quotas::alter_client_quotas(b.metadata, r).await)
        }
        RequestKind::UpdateFeatures(r) => {
            ResponseKind::UpdateFeatures(features::update_features(b.metadata, r, v).await)
        }
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

/// [`controller_api`] as the control plane's `forward::ControllerApis`.
pub fn boxed_controller_api(
    b: ControlPlane<'_>,
    request: RequestKind,
    v: i16,
) -> futures::future::BoxFuture<'_, Option<ResponseKind>> {
    Box::pin(controller_api(b, request, v))
}
