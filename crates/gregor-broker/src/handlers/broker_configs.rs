//! IncrementalAlterConfigs on the node the client sent it to, before it goes to the controller
//! (Kafka's `ConfigAdminManager.preprocess`): a change to this node's listener stores
//! (`listener.name.<l>.ssl.keystore.location` and the other
//! `gregor_meta::config::DYNAMIC_LISTENER_SSL_CONFIGS`) is validated here, by the node that
//! reads the files, so a store that does not load, a key that is not the certificate's or a
//! certificate with other names is refused (INVALID_CONFIG) and the served one stays. Another
//! node's stores are that node's to check: INVALID_REQUEST, as Kafka answers (admin clients
//! send a broker's resource to that broker). The rest goes to the controller and the answers
//! come back in request order.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::incremental_alter_configs_request::AlterConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{
    ApiKey, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse, RequestKind,
    ResponseKind,
};
use kafka_protocol::ResponseError;

use gregor_meta::config::dynamic_listener_ssl;
use gregor_meta::{ApiError, ConfigResource};

use super::s;
use crate::config::{BrokerConfig, METRICS_LISTENER_NAME};
use crate::forward::ControlPlane;
use crate::tls::ListenerTlsSet;

/// Kafka's id of the BROKER config resource type.
const BROKER: i8 = 4;

/// The TLS of this node's client listeners, controller listener and https metrics listener, and
/// of its connections to other brokers, to the controllers and to other nodes' consoles,
/// sharing what they use.
pub(crate) fn listener_tls(config: &BrokerConfig) -> ListenerTlsSet {
    let (security, metrics) = (&config.controller_tls, &config.metrics_tls);
    let controller = security
        .server_name
        .as_deref()
        .zip(security.server.as_ref());
    ListenerTlsSet::new(
        &config.settings,
        config
            .listeners
            .iter()
            .filter_map(|l| Some((l.name.as_str(), l.tls.as_ref()?)))
            .chain(controller)
            .chain(metrics.server.as_ref().map(|t| (METRICS_LISTENER_NAME, t))),
        config
            .inter_broker_tls
            .iter()
            .chain(config.controller_tls.client.iter())
            .chain(metrics.peers.iter()),
    )
}

/// Validates this node's listener-store changes, sends the rest to the controller, and answers
/// every resource in request order. `None` when the controller's answer cannot be used.
pub async fn incremental_alter_configs(
    b: ControlPlane<'_>,
    r: IncrementalAlterConfigsRequest,
    version: i16,
) -> Option<ResponseKind> {
    let touching: Vec<_> = r.resources.iter().map(listeners_touched).collect();
    let refused: Vec<Option<ApiError>> = if touching.iter().all(BTreeSet::is_empty) {
        vec![None; r.resources.len()]
    } else {
        let image = b.metadata.image();
        let overrides = image
            .configs(&ConfigResource::broker(b.node_id))
            .cloned()
            .unwrap_or_default();
        let (tls, node) = (listener_tls(b.config), b.node_id);
        let resources = r.resources.clone();
        // Reading the stores (and decrypting a key) is file and CPU work.
        crate::runtime::blocking(move || {
            resources
                .iter()
                .zip(touching)
                .map(|(res, touched)| check(node, &overrides, &tls, res, &touched).err())
                .collect()
        })
        .await
    };
    if refused.iter().all(Option::is_none) {
        return to_controller(b, r, version).await;
    }
    let mut rest = r.clone();
    rest.resources = r
        .resources
        .iter()
        .zip(&refused)
        .filter(|(_, e)| e.is_none())
        .map(|(res, _)| res.clone())
        .collect();
    let mut response = if rest.resources.is_empty() {
        IncrementalAlterConfigsResponse::default()
    } else {
        match to_controller(b, rest, version).await? {
            ResponseKind::IncrementalAlterConfigs(resp) => resp,
            _ => return None,
        }
    };
    let mut forwarded = std::mem::take(&mut response.responses).into_iter();
    for (res, error) in r.resources.iter().zip(refused) {
        let answer = match error {
            Some(e) => refusal(res, e),
            None => forwarded.next().unwrap_or_else(|| {
                refusal(
                    res,
                    ApiError::new(ResponseError::UnknownServerError, "no answer for it"),
                )
            }),
        };
        response.responses.push(answer);
    }
    Some(ResponseKind::IncrementalAlterConfigs(response))
}

async fn to_controller(
    b: ControlPlane<'_>,
    r: IncrementalAlterConfigsRequest,
    version: i16,
) -> Option<ResponseKind> {
    let request = RequestKind::IncrementalAlterConfigs(r);
    crate::forward::to_controller(b, ApiKey::IncrementalAlterConfigs, version, request).await
}

/// The listeners (lower-case) whose stores a broker resource's changes name.
fn listeners_touched(res: &AlterConfigsResource) -> BTreeSet<String> {
    if res.resource_type != BROKER {
        return BTreeSet::new();
    }
    res.configs
        .iter()
        .filter_map(|c| dynamic_listener_ssl(&c.name).map(|(l, _)| l.to_string()))
        .collect()
}

/// A broker resource's listener-store changes, checked on this node (`node`, whose broker
/// configs are `overrides`). A resource without such changes, the cluster default and a name
/// that is not a broker id are left to the controller, which answers them.
fn check(
    node: i32,
    overrides: &BTreeMap<String, String>,
    tls: &ListenerTlsSet,
    res: &AlterConfigsResource,
    touched: &BTreeSet<String>,
) -> Result<(), ApiError> {
    if touched.is_empty() {
        return Ok(());
    }
    let Ok(id) = res.resource_name.parse::<i32>() else {
        return Ok(());
    };
    if id != node {
        return Err(ApiError::invalid_request(format!(
            "Unexpected broker id, expected {node}, but received {id}: a broker's listener stores are changed through that broker"
        )));
    }
    let mut after = overrides.clone();
    for c in &res.configs {
        match (c.config_operation, &c.value) {
            (0, Some(v)) => {
                after.insert(c.name.to_string(), v.to_string());
            }
            (1, _) => {
                after.remove(&*c.name);
            }
            // The controller refuses the rest (a null value, APPEND to a string).
            _ => {}
        }
    }
    tls.validate(&after, touched).map_err(|e| {
        ApiError::invalid_config(format!(
            "Validation of dynamic config update of the listener's SSL stores failed: {e}"
        ))
    })
}

fn refusal(res: &AlterConfigsResource, e: ApiError) -> AlterConfigsResourceResponse {
    tracing::info!(resource = %&*res.resource_name, code = ?e.code, message = %e.message, "IncrementalAlterConfigs refused a broker resource");
    let mut out = AlterConfigsResourceResponse::default();
    out.resource_type = res.resource_type;
    out.resource_name = res.resource_name.clone();
    out.error_code = e.code.code();
    out.error_message = Some(s(e.message));
    out
}
