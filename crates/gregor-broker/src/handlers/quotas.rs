//! AlterClientQuotas (a controller write, forwarded to the active controller like the other
//! admin writes) and DescribeClientQuotas (answered from this broker's image, as a KRaft broker
//! does); and the `throttle_time_ms` a quota puts on a response (KIP-219).

use kafka_protocol::messages::alter_client_quotas_response::{
    EntityData as AlterEntity, EntryData as AlterResult,
};
use kafka_protocol::messages::describe_client_quotas_response::{
    EntityData as DescribedEntity, EntryData as DescribedEntry, ValueData,
};
use kafka_protocol::messages::{
    AlterClientQuotasRequest, AlterClientQuotasResponse, DescribeClientQuotasRequest,
    DescribeClientQuotasResponse, ResponseKind,
};

use gregor_meta::{ApiError, QuotaAlteration, QuotaFilterComponent, QuotaOp};

use super::s;
use crate::connection::Reply;
use crate::metadata::MetadataManager;

/// One alteration per request entry, as sent.
fn alterations(r: &AlterClientQuotasRequest) -> Vec<QuotaAlteration> {
    r.entries
        .iter()
        .map(|e| QuotaAlteration {
            entity: e
                .entity
                .iter()
                .map(|p| {
                    (
                        p.entity_type.to_string(),
                        p.entity_name.as_ref().map(|n| n.to_string()),
                    )
                })
                .collect(),
            ops: e
                .ops
                .iter()
                .map(|o| QuotaOp {
                    key: o.key.to_string(),
                    value: (!o.remove).then_some(o.value),
                })
                .collect(),
        })
        .collect()
}

/// AlterClientQuotas on the active controller.
pub async fn alter_client_quotas(
    metadata: &MetadataManager,
    r: AlterClientQuotasRequest,
) -> AlterClientQuotasResponse {
    let entries = alterations(&r);
    let validate_only = r.validate_only;
    let results = match metadata
        .submit(|c| c.alter_client_quotas(&entries, validate_only))
        .await
    {
        Ok(results) => results,
        Err(e) => {
            tracing::error!(error = %e, "AlterClientQuotas failed");
            vec![Err(e.api_error()); entries.len()]
        }
    };
    let mut resp = AlterClientQuotasResponse::default();
    resp.entries = r
        .entries
        .into_iter()
        .zip(results)
        .map(|(entry, result)| {
            let mut out = AlterResult::default();
            out.entity = entry
                .entity
                .into_iter()
                .map(|p| {
                    let mut e = AlterEntity::default();
                    e.entity_type = p.entity_type;
                    e.entity_name = p.entity_name;
                    e
                })
                .collect();
            if let Err(e) = result {
                out.error_code = e.code.code();
                out.error_message = Some(s(e.message));
            }
            out
        })
        .collect();
    resp
}

/// Every entry refused with `e` (CLUSTER_AUTHORIZATION_FAILED when not allowed).
pub fn refuse_alter(r: &AlterClientQuotasRequest, e: &ApiError) -> AlterClientQuotasResponse {
    let mut resp = AlterClientQuotasResponse::default();
    resp.entries = r
        .entries
        .iter()
        .map(|entry| {
            let mut out = AlterResult::default();
            out.entity = entry
                .entity
                .iter()
                .map(|p| {
                    let mut x = AlterEntity::default();
                    x.entity_type = p.entity_type.clone();
                    x.entity_name = p.entity_name.clone();
                    x
                })
                .collect();
            out.error_code = e.code.code();
            out.error_message = Some(s(e.message.clone()));
            out
        })
        .collect();
    resp
}

/// DescribeClientQuotas from this broker's metadata image.
pub fn describe_client_quotas(
    metadata: &MetadataManager,
    r: &DescribeClientQuotasRequest,
) -> DescribeClientQuotasResponse {
    let components: Vec<QuotaFilterComponent> = r
        .components
        .iter()
        .map(|c| QuotaFilterComponent {
            entity_type: c.entity_type.to_string(),
            match_type: c.match_type,
            name: c._match.as_ref().map(|m| m.to_string()),
        })
        .collect();
    let image = metadata.image();
    let mut resp = DescribeClientQuotasResponse::default();
    match gregor_meta::describe_client_quotas(&image, &components, r.strict) {
        Ok(found) => {
            resp.entries = Some(
                found
                    .into_iter()
                    .map(|(entity, values)| {
                        let mut out = DescribedEntry::default();
                        out.entity = entity
                            .parts()
                            .into_iter()
                            .map(|(t, n)| {
                                let mut e = DescribedEntity::default();
                                e.entity_type = s(t.to_string());
                                e.entity_name = n.map(|n| s(n.to_string()));
                                e
                            })
                            .collect();
                        out.values = values
                            .into_iter()
                            .map(|(k, v)| {
                                let mut x = ValueData::default();
                                x.key = s(k);
                                x.value = v;
                                x
                            })
                            .collect();
                        out
                    })
                    .collect(),
            );
        }
        Err(e) => {
            resp.error_code = e.code.code();
            resp.error_message = Some(s(e.message));
        }
    }
    resp
}

/// Puts a quota's throttle time on the responses that carry one (Produce and Fetch, the ones
/// byte-rate quotas apply to; a request-percentage throttle of another API shows in the
/// connection being muted). Keeps a larger throttle already there.
pub fn set_throttle_time(reply: &mut Reply, throttle_ms: u64) {
    let ms = i32::try_from(throttle_ms).unwrap_or(i32::MAX);
    let slot = match reply {
        Reply::Respond(ResponseKind::Produce(r)) => &mut r.throttle_time_ms,
        Reply::Respond(ResponseKind::Fetch(r)) => &mut r.throttle_time_ms,
        Reply::Fetch(f) => &mut f.response.throttle_time_ms,
        _ => return,
    };
    *slot = (*slot).max(ms);
}

/// What a request counts toward, read before it is handled.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum QuotaUse {
    /// A produce request with this many record bytes (`producer_byte_rate`).
    Produce(usize),
    /// A consumer's fetch (`consumer_byte_rate` on the response bytes).
    ConsumerFetch,
    /// A request that only counts toward `request_percentage`.
    Other,
    /// Not subject to client quotas: a follower's fetch (replication has its own throttles),
    /// and group joins, which wait for the other members by design.
    Exempt,
}

impl QuotaUse {
    /// What `request` counts toward.
    pub fn of(request: &kafka_protocol::messages::RequestKind) -> QuotaUse {
        use kafka_protocol::messages::RequestKind as R;
        match request {
            R::Produce(r) => QuotaUse::Produce(
                r.topic_data
                    .iter()
                    .flat_map(|t| &t.partition_data)
                    .map(|p| p.records.as_ref().map_or(0, bytes::Bytes::len))
                    .sum(),
            ),
            R::Fetch(r) if r.replica_id.0 >= 0 || r.replica_state.replica_id.0 >= 0 => {
                QuotaUse::Exempt
            }
            R::Fetch(_) => QuotaUse::ConsumerFetch,
            R::JoinGroup(_) | R::SyncGroup(_) => QuotaUse::Exempt,
            _ => QuotaUse::Other,
        }
    }
}

/// Counts a handled request toward the client's quotas and, when one is exceeded, puts the
/// throttle time on the response and mutes the connection for it once the response is out
/// (KIP-219). `handled` is the time the request took to handle.
pub fn account(
    quotas: &crate::client_quota::ClientQuotaManager,
    metadata: &MetadataManager,
    ctx: &crate::connection::RequestContext,
    used: QuotaUse,
    handled: std::time::Duration,
    reply: &mut Reply,
) {
    use gregor_meta::quota::{CONSUMER_BYTE_RATE, PRODUCER_BYTE_RATE, REQUEST_PERCENTAGE};
    if used == QuotaUse::Exempt {
        return;
    }
    let image = metadata.image();
    let configs = image.client_quotas();
    if configs.is_empty() {
        return;
    }
    let now_ms = crate::runtime::now_ms().max(0) as u64;
    let (user, client) = (ctx.principal.name.as_str(), ctx.client_id.as_str());
    let bytes = match used {
        QuotaUse::Produce(n) => Some((PRODUCER_BYTE_RATE, n)),
        QuotaUse::ConsumerFetch => Some((CONSUMER_BYTE_RATE, response_bytes(reply))),
        _ => None,
    };
    let byte_throttle = bytes.map_or(0, |(key, n)| {
        quotas.record(configs, key, user, client, n as f64, now_ms)
    });
    // A fetch's time is mostly its wait for data, which is not work done for the client.
    let time_throttle = if used == QuotaUse::ConsumerFetch {
        0
    } else {
        let pct = crate::client_quota::nanos_to_percentage(handled.as_nanos());
        quotas.record(configs, REQUEST_PERCENTAGE, user, client, pct, now_ms)
    };
    let throttle = byte_throttle.max(time_throttle);
    if throttle == 0 {
        return;
    }
    tracing::debug!(user, client_id = client, api = ?ctx.api_key, throttle_ms = throttle, "client quota exceeded: throttling");
    set_throttle_time(reply, throttle);
    quotas.mute(ctx.connection_id, throttle);
}

/// The record bytes of a fetch response.
fn response_bytes(reply: &Reply) -> usize {
    match reply {
        Reply::Fetch(f) => f.record_bytes(),
        Reply::Respond(ResponseKind::Fetch(r)) => r
            .responses
            .iter()
            .flat_map(|t| &t.partitions)
            .map(|p| p.records.as_ref().map_or(0, bytes::Bytes::len))
            .sum(),
        _ => 0,
    }
}
