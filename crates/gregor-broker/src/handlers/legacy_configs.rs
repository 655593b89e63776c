//! AlterConfigs (the API before IncrementalAlterConfigs, still sent by librdkafka's and older
//! Java admin clients): each resource's dynamic configs become exactly the ones listed. The
//! controller works out what to remove (`Controller::alter_configs`).

use kafka_protocol::messages::alter_configs_response::AlterConfigsResourceResponse;
use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse};

use kafka_protocol::ResponseError;

use gregor_meta::config::dynamic_listener_ssl;
use gregor_meta::{ApiError, ConfigResource, LegacyConfig};

use super::admin::resource;
use super::s;
use crate::metadata::MetadataManager;

/// Kafka's id of the BROKER config resource type.
const BROKER: i8 = 4;

pub async fn alter_configs(
    metadata: &MetadataManager,
    r: AlterConfigsRequest,
) -> AlterConfigsResponse {
    // Resources that name a valid type and broker go to the controller; the others are
    // answered with their own error, in the request's order.
    let parsed: Vec<Result<(ConfigResource, Vec<LegacyConfig>), ApiError>> = r
        .resources
        .iter()
        .map(|res| {
            let configs = res
                .configs
                .iter()
                .map(|c| LegacyConfig {
                    name: c.name.to_string(),
                    value: c.value.as_ref().map(|v| v.to_string()),
                })
                .collect();
            let stores = res
                .configs
                .iter()
                .find(|c| dynamic_listener_ssl(&c.name).is_some());
            match stores {
                // The node that reads the files validates store changes before they are
                // committed (`broker_configs`); that check takes IncrementalAlterConfigs.
                Some(c) if res.resource_type == BROKER => Err(ApiError::invalid_request(format!(
                    "{} is a listener store setting: change it with IncrementalAlterConfigs",
                    c.name.as_str()
                ))),
                _ => resource(res.resource_type, &res.resource_name).map(|rs| (rs, configs)),
            }
        })
        .collect();
    let good: Vec<(ConfigResource, Vec<LegacyConfig>)> = parsed
        .iter()
        .filter_map(|p| p.as_ref().ok().cloned())
        .collect();
    let results: Vec<Result<(), ApiError>> = match metadata
        .submit(|c| c.alter_configs(&good, r.validate_only))
        .await
    {
        Ok(results) => results.into_iter().map(|(_, res)| res).collect(),
        Err(e) => {
            tracing::error!(error = %e, "AlterConfigs failed");
            good.iter().map(|_| Err(e.api_error())).collect()
        }
    };
    debug_assert_eq!(results.len(), good.len(), "one result per resource");
    let mut results = results.into_iter();
    let mut resp = AlterConfigsResponse::default();
    for (res, p) in r.resources.iter().zip(parsed) {
        let outcome = match p {
            Ok(_) => results.next().unwrap_or_else(|| {
                Err(ApiError::new(
                    ResponseError::UnknownServerError,
                    "the controller answered fewer resources than it was sent",
                ))
            }),
            Err(e) => Err(e),
        };
        let mut out = AlterConfigsResourceResponse::default();
        out.resource_type = res.resource_type;
        out.resource_name = res.resource_name.clone();
        if let Err(e) = outcome {
            out.error_code = e.code.code();
            out.error_message = Some(s(e.message));
        }
        resp.responses.push(out);
    }
    resp
}
