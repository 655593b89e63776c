//! Controller requests from any broker: admin requests that change metadata (CreateTopics,
//! DeleteTopics, CreatePartitions, IncrementalAlterConfigs, ElectLeaders) and the broker's own
//! registration and heartbeats are handled by the active controller. A broker that is not the
//! active controller forwards the Kafka request, as the client sent it, over the controller RPC
//! (Kafka's request forwarding), then waits until its own image has applied what the controller
//! committed, so what a request created is visible on the broker it was sent to.
//!
//! While no controller answers (an election is under way), forwarding is retried for
//! [`FORWARD_TIMEOUT`], or for the request's own `timeout_ms` when it is shorter (an admin
//! request the client has given up on is not sent again: it could otherwise be applied after a
//! newer one the client sent since, as Kafka's controller avoids by dropping requests past
//! their deadline); after that the request is answered here, where it fails with the
//! retriable NOT_CONTROLLER.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use gregor_quorum::rpc::{ForwardError, KafkaReply};
use kafka_protocol::messages::{ApiKey, RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;
use tokio::time::Instant;
use tracing::debug;

use crate::config::BrokerConfig;
use crate::metadata::MetadataManager;
use crate::metrics::events::BrokerMetrics;
use crate::transport::SharedTransport;

/// On the active controller: the metadata index each broker's latest registration (broker id,
/// broker epoch) was committed at. A broker stays fenced until its heartbeats say it has
/// applied that far (it has caught up with the metadata log), as Kafka's controller requires.
pub type RegistrationOffsets = Mutex<HashMap<(i32, i64), u64>>;

/// What controller requests run on, here or forwarded: this node's identity and settings, the
/// metadata shell, and the active controller's registration bookkeeping. Borrowed from the
/// broker; cheap to copy.
#[derive(Clone, Copy)]
pub struct ControlPlane<'a> {
    pub node_id: i32,
    pub config: &'a BrokerConfig,
    pub cluster_id: &'a str,
    pub metadata: &'a MetadataManager,
    pub registration_offsets: &'a RegistrationOffsets,
    /// How this node connects to the others (TCP, or the simulator's network).
    pub transport: &'a SharedTransport,
    pub metrics: &'a BrokerMetrics,
    /// How this node handles a controller request itself (see [`ControllerApis`]).
    pub controller_apis: ControllerApis,
}

/// The controller API handlers, which run a controller request on this node (the active
/// controller, or the forwarding broker once forwarding gave up, where the metadata write fails
/// with NOT_CONTROLLER); `None` for any other API. The handlers sit above this service and run
/// on it, so `broker.rs` plugs them in.
pub type ControllerApis = for<'a> fn(
    ControlPlane<'a>,
    RequestKind,
    i16,
) -> futures::future::BoxFuture<'a, Option<ResponseKind>>;

/// How long a broker keeps trying to reach an active controller for one request.
pub const FORWARD_TIMEOUT: Duration = Duration::from_secs(30);

/// Pause between attempts while no controller answers.
const RETRY_PAUSE: Duration = Duration::from_millis(50);

/// How long a forwarding broker waits for its image to reach what the controller committed.
const APPLY_WAIT: Duration = Duration::from_secs(5);

/// How long one forwarding attempt of a request that is safe to send twice waits for an answer
/// before it is sent again (on a fresh connection): a third of `broker.session.timeout.ms`,
/// within these bounds. A connection can lose a request or its answer for good (a peer that
/// vanished, a middlebox that dropped the flow); the broker's own lifecycle requests must not
/// wait out the whole [`FORWARD_TIMEOUT`] on it, or its session expires meanwhile.
const IDEMPOTENT_ATTEMPT_TIMEOUT: (Duration, Duration) =
    (Duration::from_millis(250), Duration::from_secs(3));

fn idempotent_attempt_timeout(config: &BrokerConfig) -> Duration {
    let third = Duration::from_millis(config.int("broker.session.timeout.ms").max(0) as u64 / 3);
    third.clamp(IDEMPOTENT_ATTEMPT_TIMEOUT.0, IDEMPOTENT_ATTEMPT_TIMEOUT.1)
}

/// Requests a controller may receive twice without harm: a registration with the same
/// incarnation is the same registration, a heartbeat is a heartbeat, and an AlterPartition is
/// fenced by its partition epoch. Not topic creation and the like: a resent CreateTopics whose
/// first copy succeeded would answer TOPIC_ALREADY_EXISTS to the client that created it.
fn safe_to_resend(api_key: ApiKey) -> bool {
    matches!(
        api_key,
        ApiKey::BrokerRegistration | ApiKey::BrokerHeartbeat | ApiKey::AlterPartition
    )
}

/// APIs the active controller handles.
pub fn is_controller_api(key: ApiKey) -> bool {
    matches!(
        key,
        ApiKey::CreateTopics
            | ApiKey::DeleteTopics
            | ApiKey::CreatePartitions
            | ApiKey::IncrementalAlterConfigs
            | ApiKey::AlterConfigs
            | ApiKey::ElectLeaders
            | ApiKey::AlterPartitionReassignments
            | ApiKey::CreateAcls
            | ApiKey::DeleteAcls
            | ApiKey::AlterUserScramCredentials
            | ApiKey::AlterClientQuotas
            | ApiKey::UpdateFeatures
            | ApiKey::BrokerRegistration
            | ApiKey::BrokerHeartbeat
            | ApiKey::AlterPartition
    )
}

/// The `timeout_ms` an admin request carries, when it sets one.
fn client_timeout(request: &RequestKind) -> Option<Duration> {
    let ms = match request {
        RequestKind::CreateTopics(r) => r.timeout_ms,
        RequestKind::DeleteTopics(r) => r.timeout_ms,
        RequestKind::CreatePartitions(r) => r.timeout_ms,
        RequestKind::ElectLeaders(r) => r.timeout_ms,
        RequestKind::AlterPartitionReassignments(r) => r.timeout_ms,
        _ => return None,
    };
    u64::try_from(ms)
        .ok()
        .filter(|&ms| ms > 0)
        .map(Duration::from_millis)
}

/// Handles a controller request here if this node is the active controller, else forwards it
/// to the active controller. `None` only for a request that is not a controller API.
pub async fn to_controller(
    b: ControlPlane<'_>,
    api_key: ApiKey,
    version: i16,
    request: RequestKind,
) -> Option<ResponseKind> {
    let budget = client_timeout(&request).map_or(FORWARD_TIMEOUT, |t| t.min(FORWARD_TIMEOUT));
    let deadline = Instant::now() + budget;
    let mut body: Option<Vec<u8>> = None;
    loop {
        match b.metadata.active_controller() {
            Some(id) if id == b.node_id => return (b.controller_apis)(b, request, version).await,
            Some(id) => {
                let bytes = match &body {
                    Some(bytes) => bytes.clone(),
                    None => {
                        let mut buf = BytesMut::new();
                        if let Err(e) = request.encode(&mut buf, version) {
                            tracing::error!(error = %e, api = ?api_key, "cannot encode a request to forward");
                            return (b.controller_apis)(b, request, version).await;
                        }
                        let bytes = buf.to_vec();
                        body = Some(bytes.clone());
                        bytes
                    }
                };
                let mut remaining = deadline.saturating_duration_since(Instant::now());
                if safe_to_resend(api_key) {
                    remaining = remaining.min(idempotent_attempt_timeout(b.config));
                }
                // As Kafka's controller channel does: when another controller takes over, the
                // request goes to it at once. The old one may never answer (it crashed, or
                // the connection to it lost data in a partition), and waiting out the whole
                // timeout here starves heartbeats long enough to fence a healthy broker.
                let attempt = tokio::select! {
                    r = b.metadata.forward(id, api_key as i16, version, bytes, remaining) => r,
                    _ = b.metadata.wait_controller_change(id) => {
                        debug!(controller = id, api = ?api_key, "the active controller changed while forwarding; sending to the new one");
                        if b.metadata.active_controller() == Some(id) {
                            // It changed and changed back: no hurry, and never a loop that
                            // does not yield.
                            tokio::time::sleep(RETRY_PAUSE).await;
                        }
                        continue;
                    }
                };
                match attempt {
                    Ok(reply) => {
                        let skip_wait = match api_key {
                            ApiKey::CreateAcls | ApiKey::DeleteAcls => {
                                planted!(AclAckBeforeApplied)
                            }
                            ApiKey::AlterClientQuotas => planted!(QuotaAckBeforeApplied),
                            _ => false,
                        };
                        if !skip_wait {
                            b.metadata
                                .wait_applied(reply.applied_index, APPLY_WAIT)
                                .await;
                        }
                        match ResponseKind::decode(api_key, &mut Bytes::from(reply.body), version) {
                            Ok(r) => return Some(r),
                            Err(e) => {
                                tracing::error!(error = %e, api = ?api_key, "cannot decode the controller's response");
                            }
                        }
                    }
                    Err(e) => {
                        debug!(controller = id, error = %e, "forwarding to the controller failed; retrying")
                    }
                }
            }
            None => {}
        }
        if Instant::now() >= deadline {
            return (b.controller_apis)(b, request, version).await;
        }
        tokio::time::sleep(RETRY_PAUSE).await;
    }
}

/// A request forwarded to this node by another broker (controller RPC).
pub async fn handle_forwarded(
    b: ControlPlane<'_>,
    api_key: i16,
    api_version: i16,
    body: Vec<u8>,
) -> Result<KafkaReply, ForwardError> {
    let key = ApiKey::try_from(api_key)
        .map_err(|_| ForwardError::Invalid(format!("unknown API key {api_key}")))?;
    if !is_controller_api(key) {
        return Err(ForwardError::Invalid(format!(
            "{key:?} is not a controller request"
        )));
    }
    if !b.metadata.is_active_controller() {
        return Err(ForwardError::NotController {
            leader: b.metadata.active_controller().map(|id| id as u64),
        });
    }
    let request = RequestKind::decode(key, &mut Bytes::from(body), api_version)
        .map_err(|e| ForwardError::Invalid(format!("{key:?} v{api_version}: {e}")))?;
    let response = (b.controller_apis)(b, request, api_version)
        .await
        .ok_or_else(|| ForwardError::Invalid(format!("{key:?} is not a controller request")))?;
    let mut buf = BytesMut::new();
    response
        .encode(&mut buf, api_version)
        .map_err(|e| ForwardError::Invalid(format!("cannot encode the response: {e}")))?;
    Ok(KafkaReply {
        body: buf.to_vec(),
        applied_index: b.metadata.applied_index(),
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
    wire.timeout_ms = FORWARD_TIMEOUT.as_millis() as i32;
    wire.validate_only = request.validate_only;
    wire.topics = request
        .topics
        .iter()
        .map(|t| {
            let mut out = CreatableTopic::default();
            out.name = TopicName(StrBytes::from_string(t.name.clone()));
            out.num_partitions = t.num_partitions;
            out.replication_factor = t.replication_factor;
            out.configs = t
                .configs
                .iter()
                .map(|(k, v)| {
                    let mut c = CreatableTopicConfig::default();
                    c.name = StrBytes::from_string(k.clone());
                    c.value = v.clone().map(StrBytes::from_string);
                    c
                })
                .collect();
            out
        })
        .collect();
    const VERSION: i16 = 5;
    match to_controller(
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

/// Creates one of the coordinators' internal topics (`__consumer_offsets`,
/// `__transaction_state`): COORDINATOR_NOT_AVAILABLE if the controller cannot. A topic another
/// request created meanwhile is fine.
pub async fn create_internal_topic(
    b: ControlPlane<'_>,
    topic: gregor_meta::CreatableTopic,
) -> Result<(), kafka_protocol::ResponseError> {
    use kafka_protocol::ResponseError;
    let (name, partitions, rf) = (
        topic.name.clone(),
        topic.num_partitions,
        topic.replication_factor,
    );
    let request = gregor_meta::CreateTopicsRequest {
        topics: vec![topic],
        validate_only: false,
    };
    let results = create_topics_internal(b, &request)
        .await
        .map_err(|_| ResponseError::CoordinatorNotAvailable)?;
    match results.into_iter().next().map(|(_, result)| result) {
        Some(Ok(_)) => {
            tracing::info!(topic = %name, partitions, replication_factor = rf, "created internal topic");
            Ok(())
        }
        Some(Err(e)) if e.code == ResponseError::TopicAlreadyExists => Ok(()),
        Some(Err(e)) => {
            tracing::warn!(topic = %name, code = ?e.code, message = %e.message, "cannot create internal topic");
            Err(ResponseError::CoordinatorNotAvailable)
        }
        None => Err(ResponseError::CoordinatorNotAvailable),
    }
}

/// How long one liveness probe of a broker's client listener may take.
const PROBE_TIMEOUT: Duration = Duration::from_millis(500);

/// Probes of a broker whose controller connection closed, and the pause between them: a
/// killed process's listening socket may outlive its connections by a moment, and every
/// `acks=all` write to its partitions waits until it is fenced.
const PROBES: u32 = 16;
const PROBE_SPACING: Duration = Duration::from_millis(25);

/// Whether the processes of these brokers are gone: asked when the controller connection their
/// heartbeats came on closed, and of every broker when this node becomes the active controller.
/// A broker whose client listener now refuses connections has no process listening there: the
/// operating system says it is gone, so its session ends now instead of after
/// `broker.session.timeout.ms` (a hung or cut-off broker still accepts, or does not answer, and
/// is left to the session timeout). The brokers are probed at the same time.
pub async fn check_brokers_alive(b: ControlPlane<'_>, brokers: Vec<i32>) {
    // Each broker is fenced as soon as its own probes tell: a live one, probed a few times,
    // must not hold up the fencing of a dead one.
    let probes = brokers.into_iter().map(|id| async move {
        if listener_refuses(b, id).await {
            fence_gone_broker(b, id).await;
        }
    });
    futures::future::join_all(probes).await;
}

async fn fence_gone_broker(b: ControlPlane<'_>, id: i32) {
    if !b.metadata.is_active_controller() {
        return;
    }
    let result = b
        .metadata
        .submit(|c| {
            c.expire_session(id);
            gregor_meta::ControllerResult {
                records: c.tick(crate::runtime::now_ms()),
                response: (),
            }
        })
        .await;
    if let Err(e) = result {
        tracing::warn!(broker = id, error = %e, "could not fence a broker whose process is gone");
    }
}

/// Whether broker `id`'s client listener refuses connections (see [`check_brokers_alive`]).
async fn listener_refuses(b: ControlPlane<'_>, id: i32) -> bool {
    if id == b.node_id || !b.metadata.is_active_controller() {
        return false;
    }
    let image = b.metadata.image();
    let Some(reg) = image.broker(id).filter(|r| !r.fenced) else {
        return false;
    };
    let Some(ep) = reg.endpoints.first() else {
        return false;
    };
    if planted!(ProbeFencesLive) {
        return true;
    }
    let addr = format!("{}:{}", ep.host, ep.port);
    // A dying process may close its connections a moment before its listening socket (which
    // meanwhile still completes handshakes): a few probes a little apart tell.
    let mut refused = false;
    for attempt in 0..PROBES {
        if attempt > 0 {
            tokio::time::sleep(PROBE_SPACING).await;
        }
        let probe = tokio::time::timeout(PROBE_TIMEOUT, b.transport.connect(&addr)).await;
        refused = matches!(
            &probe,
            Ok(Err(e)) if e.kind() == std::io::ErrorKind::ConnectionRefused
        );
        if refused {
            break;
        }
    }
    if refused {
        // Several closed connections of one dead broker each start a probe: the controller's
        // fencing line (one per fencing) tells the operator, not each probe.
        tracing::debug!(broker = id, %addr, "broker's listener refuses connections: its process is gone; ending its session");
    } else {
        tracing::debug!(broker = id, %addr, "probed broker is listening");
    }
    refused
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::{
        BrokerHeartbeatRequest, CreateTopicsRequest, ElectLeadersRequest,
    };

    #[test]
    fn an_admin_requests_own_timeout_bounds_its_forwarding() {
        let create =
            |ms| RequestKind::CreateTopics(CreateTopicsRequest::default().with_timeout_ms(ms));
        assert_eq!(
            client_timeout(&create(2_000)),
            Some(Duration::from_millis(2_000))
        );
        // No timeout (0) or a nonsensical one: the broker's own 30 s.
        assert_eq!(client_timeout(&create(0)), None);
        assert_eq!(client_timeout(&create(-5)), None);
        let elect = RequestKind::ElectLeaders(ElectLeadersRequest::default().with_timeout_ms(750));
        assert_eq!(client_timeout(&elect), Some(Duration::from_millis(750)));
        let heartbeat = RequestKind::BrokerHeartbeat(BrokerHeartbeatRequest::default());
        assert_eq!(client_timeout(&heartbeat), None);
    }
}
