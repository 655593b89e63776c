//! ApiVersions, Metadata, DescribeCluster, and the broker-to-controller BrokerRegistration and
//! BrokerHeartbeat (handled on the active controller).

use std::collections::BTreeMap;

use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    describe_cluster_response::DescribeClusterBroker, ApiVersionsRequest, ApiVersionsResponse,
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use kafka_protocol::ResponseError;

use gregor_meta::acl::AclResourceType;

use super::s;
use crate::authorize::{Decide, MetadataPlan};
use crate::forward::ControlPlane;
use crate::metadata::MetadataManager;

/// Kafka's "authorized operations not requested" marker.
pub const OPS_NOT_REQUESTED: i32 = i32::MIN;

/// ApiVersions: the APIs, and (v3+) the features with their finalized levels.
pub fn api_versions(
    _r: &ApiVersionsRequest,
    version: i16,
    metadata: &MetadataManager,
) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = crate::api::api_versions();
    // The offset first: the image read after it is at least that new.
    let offset = i64::try_from(metadata.applied_index()).unwrap_or(i64::MAX);
    let image = metadata.image();
    super::features::fill_api_versions(&mut resp, version, &image, offset);
    resp
}

/// The topics a Metadata request names, by name or (v10+) by id; `None` for all topics.
type RequestedTopics = Option<Vec<(Option<String>, gregor_meta::Uuid)>>;

/// Metadata, with the brokers' endpoints on `listener` (the client's, as Kafka answers):
/// brokers without it are left out. Topics the requester may not DESCRIBE are left out of an
/// all-topics answer and answered TOPIC_AUTHORIZATION_FAILED when named, existing or not
/// (`authorize::metadata_plan`).
pub async fn metadata(
    b: ControlPlane<'_>,
    r: MetadataRequest,
    version: i16,
    listener: &str,
    d: &dyn Decide,
) -> MetadataResponse {
    let auto_create =
        b.config.bool("auto.create.topics.enable") && (version < 4 || r.allow_auto_topic_creation);
    let topic_ops = version >= 8 && r.include_topic_authorized_operations;
    let cluster_ops = (8..=10).contains(&version) && r.include_cluster_authorized_operations;
    let requested = requested_topics(r.topics, version);
    let mut image = b.metadata.image();
    let plan = plan_topics(d, &image, &requested, auto_create);
    if requested.is_some() && auto_create && auto_create_topics(b, &image, &plan.described).await {
        image = b.metadata.image();
    }
    let mut resp = MetadataResponse::default();
    resp.brokers = listed_brokers(b.metadata, &image, listener);
    resp.cluster_id = (version >= 2).then(|| s(b.cluster_id));
    resp.controller_id = BrokerId(if version >= 1 {
        client_visible_controller(b.metadata, &image)
    } else {
        -1
    });
    resp.topics = match requested {
        None => plan
            .described
            .iter()
            .map(|name| describe_topic(&image, name, listener))
            .collect(),
        Some(req) => req
            .into_iter()
            .map(|entry| answer_topic(&image, &plan, entry, listener))
            .collect(),
    };
    if topic_ops {
        for t in resp.topics.iter_mut().filter(|t| t.error_code == 0) {
            if let Some(name) = &t.name {
                t.topic_authorized_operations =
                    d.authorized_operations(AclResourceType::Topic, name);
            }
        }
    }
    resp.cluster_authorized_operations = if version < 8 {
        OPS_NOT_REQUESTED
    } else {
        crate::authorize::describe_cluster_operations(d, cluster_ops)
    };
    resp
}

/// The authorizer's part of a Metadata answer, over the names requested (ids resolved).
fn plan_topics(
    d: &dyn Decide,
    image: &gregor_meta::MetadataImage,
    requested: &RequestedTopics,
    auto_create: bool,
) -> MetadataPlan {
    let names = requested.as_ref().map(|req| {
        req.iter()
            .filter_map(|(name, id)| match name {
                Some(n) => Some(n.clone()),
                None => image.topic_by_id(*id).map(|t| t.name.clone()),
            })
            .collect()
    });
    crate::authorize::metadata_plan(
        d,
        names,
        image.topics().values().map(|t| t.name.clone()),
        |t| image.topic(t).is_some(),
        auto_create,
    )
}

/// One requested topic (by name, or by id from v10): described, or refused as the plan says.
fn answer_topic(
    image: &gregor_meta::MetadataImage,
    plan: &MetadataPlan,
    (name, id): (Option<String>, gregor_meta::Uuid),
    listener: &str,
) -> MetadataResponseTopic {
    let refused = |n: &str| {
        plan.refused
            .iter()
            .chain(&plan.refused_create)
            .any(|r| r == n)
    };
    let mut t = MetadataResponseTopic::default();
    match name {
        Some(n) if refused(&n) => {
            // Neither its id nor whether it exists.
            t.is_internal =
                plan.refused_create.contains(&n) && super::produce::is_internal_topic(&n);
            t.name = Some(TopicName(s(n)));
            t.error_code = ResponseError::TopicAuthorizationFailed.code();
            t
        }
        Some(n) => describe_topic(image, &n, listener),
        None => match image.topic_by_id(id) {
            Some(topic) if refused(&topic.name) => {
                // Asked by id: the id is no secret, the name is.
                t.topic_id = id;
                t.error_code = ResponseError::TopicAuthorizationFailed.code();
                t
            }
            Some(topic) => describe_topic(image, &topic.name, listener),
            None => {
                t.topic_id = id;
                t.error_code = ResponseError::UnknownTopicId.code();
                t
            }
        },
    }
}

/// v0: an empty list means all topics; v1+: null means all, empty means none.
fn requested_topics(topics: Option<Vec<MetadataRequestTopic>>, version: i16) -> RequestedTopics {
    match topics {
        None => None,
        Some(ts) if ts.is_empty() && version == 0 => None,
        Some(ts) => Some(
            ts.into_iter()
                .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                .collect(),
        ),
    }
}

/// Creates the topics among `names` that `image` does not have (`auto.create.topics.enable`);
/// whether it asked the controller to create any.
async fn auto_create_topics(
    b: ControlPlane<'_>,
    image: &gregor_meta::MetadataImage,
    names: &[String],
) -> bool {
    let missing: Vec<String> = names
        .iter()
        .filter(|n| {
            image.topic(n).is_none() && gregor_meta::topic_name::validate_topic_name(n).is_ok()
        })
        .cloned()
        .collect();
    if missing.is_empty() {
        return false;
    }
    let create = gregor_meta::CreateTopicsRequest {
        topics: missing
            .iter()
            .map(gregor_meta::CreatableTopic::new)
            .collect(),
        validate_only: false,
    };
    if let Err(e) = super::create_topics_internal(b, &create).await {
        tracing::warn!(error = %e, "auto topic creation failed");
    }
    true
}

/// One topic as Metadata describes it: INVALID_TOPIC_EXCEPTION for a name no topic can have,
/// UNKNOWN_TOPIC_OR_PARTITION for one `image` does not have.
fn describe_topic(
    image: &gregor_meta::MetadataImage,
    name: &str,
    listener: &str,
) -> MetadataResponseTopic {
    let mut t = MetadataResponseTopic::default();
    t.name = Some(TopicName(s(name)));
    if gregor_meta::topic_name::validate_topic_name(name).is_err() {
        t.error_code = ResponseError::InvalidTopicException.code();
        return t;
    }
    let Some(topic) = image.topic(name) else {
        t.error_code = ResponseError::UnknownTopicOrPartition.code();
        return t;
    };
    fill_topic(&mut t, topic, image, listener);
    t
}

/// The brokers Metadata lists: the unfenced ones, and those fenced moments ago (see
/// `recent_fencing.rs`: clients move their partitions away before they forget the broker).
fn listed_brokers(
    metadata: &MetadataManager,
    image: &gregor_meta::MetadataImage,
    listener: &str,
) -> Vec<MetadataResponseBroker> {
    let recently_fenced = metadata.recently_fenced(image);
    image
        .brokers()
        .values()
        .filter(|br| !br.fenced || recently_fenced.contains(&br.id))
        .filter_map(|br| {
            let ep = endpoint_on(br, listener)?;
            let mut m = MetadataResponseBroker::default();
            m.node_id = BrokerId(br.id);
            m.host = s(ep.host.clone());
            m.port = ep.port as i32;
            m.rack = br.rack.clone().map(s);
            Some(m)
        })
        .collect()
}

/// A broker's endpoint on `listener`.
fn endpoint_on<'a>(
    br: &'a gregor_meta::BrokerRegistration,
    listener: &str,
) -> Option<&'a gregor_meta::BrokerEndpoint> {
    br.endpoints.iter().find(|e| e.name == listener)
}

fn fill_topic(
    t: &mut MetadataResponseTopic,
    topic: &gregor_meta::TopicImage,
    image: &gregor_meta::MetadataImage,
    listener: &str,
) {
    t.topic_id = topic.id;
    t.is_internal = super::produce::is_internal_topic(&topic.name);
    t.partitions = topic
        .partitions
        .iter()
        .map(|(idx, p)| {
            let mut mp = MetadataResponsePartition::default();
            mp.partition_index = *idx;
            mp.leader_id = BrokerId(p.leader);
            mp.leader_epoch = p.leader_epoch;
            mp.replica_nodes = p.replicas.iter().map(|r| BrokerId(*r)).collect();
            mp.isr_nodes = p.isr.iter().map(|r| BrokerId(*r)).collect();
            mp.offline_replicas = p
                .replicas
                .iter()
                .filter(|r| !image.is_broker_active(**r))
                .map(|r| BrokerId(*r))
                .collect();
            if p.leader < 0 {
                mp.error_code = ResponseError::LeaderNotAvailable.code();
            } else if leader_lacks_listener(image, p.leader, listener) {
                // A live leader the client cannot reach on its listener (Kafka's answer).
                mp.leader_id = BrokerId(-1);
                mp.error_code = ResponseError::ListenerNotFound.code();
            }
            mp
        })
        .collect();
}

/// Whether `leader` is a live broker without an endpoint on `listener`.
fn leader_lacks_listener(image: &gregor_meta::MetadataImage, leader: i32, listener: &str) -> bool {
    image
        .broker(leader)
        .filter(|br| !br.fenced)
        .is_some_and(|br| endpoint_on(br, listener).is_none())
}

/// The controller id Metadata names (clients send admin requests there): this node when it is
/// a live broker, since it forwards them to the active controller, else the live broker with the
/// lowest id. As Kafka names a live broker rather than the active controller, so a client that
/// asks right after the active controller died is never sent to it and left waiting out its
/// own timeout. DescribeCluster names the active controller (see [`active_controller_id`]).
fn client_visible_controller(
    metadata: &MetadataManager,
    image: &gregor_meta::MetadataImage,
) -> i32 {
    if image.is_broker_active(metadata.node_id()) {
        return metadata.node_id();
    }
    image.active_brokers().map(|br| br.id).min().unwrap_or(-1)
}

/// The controller id DescribeCluster names, for operators and tools: the active controller
/// when it is a live broker this node hears from; otherwise as Metadata names it.
fn active_controller_id(metadata: &MetadataManager, image: &gregor_meta::MetadataImage) -> i32 {
    match metadata.active_controller() {
        Some(id) if image.is_broker_active(id) && !metadata.active_controller_unheard() => id,
        _ => client_visible_controller(metadata, image),
    }
}

/// Kafka's DescribeCluster endpoint types (KIP-919).
const BROKER_ENDPOINTS: i8 = 1;
const CONTROLLER_ENDPOINTS: i8 = 2;

/// DescribeCluster, with the brokers' endpoints on `listener` (the client's); on a controller
/// listener (`controllers`: the quorum's voters, id to `host:port`), the controllers'
/// endpoints instead, as KIP-919 answers `bootstrap.controllers` clients. KIP-430's cluster
/// authorized operations when asked.
pub fn describe_cluster(
    b: ControlPlane<'_>,
    r: &DescribeClusterRequest,
    version: i16,
    listener: &str,
    controllers: Option<&BTreeMap<u64, String>>,
    d: &dyn Decide,
) -> DescribeClusterResponse {
    let asked = if version >= 1 {
        r.endpoint_type
    } else {
        BROKER_ENDPOINTS
    };
    let mut resp = match controllers {
        Some(voters) => describe_controllers(b, voters),
        None => describe_brokers(b, r, version, listener),
    };
    let served = match controllers {
        Some(_) => CONTROLLER_ENDPOINTS,
        None => BROKER_ENDPOINTS,
    };
    if asked != served {
        resp.brokers.clear();
        resp.error_code = ResponseError::UnsupportedEndpointType.code();
        resp.error_message = Some(s(format!(
            "this listener serves endpoint type {served}, not {asked}"
        )));
    }
    if version >= 1 {
        resp.endpoint_type = served;
    }
    resp.cluster_authorized_operations =
        crate::authorize::describe_cluster_operations(d, r.include_cluster_authorized_operations);
    resp
}

/// The controllers, from `controller.quorum.voters`, and the active one.
fn describe_controllers(
    b: ControlPlane<'_>,
    voters: &BTreeMap<u64, String>,
) -> DescribeClusterResponse {
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = s(b.cluster_id);
    resp.controller_id = BrokerId(b.metadata.active_controller().unwrap_or(-1));
    resp.brokers = voters
        .iter()
        .filter_map(|(id, address)| {
            let (host, port) = address.rsplit_once(':')?;
            let mut d = DescribeClusterBroker::default();
            d.broker_id = BrokerId(i32::try_from(*id).ok()?);
            d.host = s(host
                .trim_start_matches('[')
                .trim_end_matches(']')
                .to_string());
            d.port = port.parse().ok()?;
            Some(d)
        })
        .collect();
    resp
}

/// The brokers with an endpoint on `listener`.
fn describe_brokers(
    b: ControlPlane<'_>,
    r: &DescribeClusterRequest,
    version: i16,
    listener: &str,
) -> DescribeClusterResponse {
    let image = b.metadata.image();
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = s(b.cluster_id);
    resp.controller_id = BrokerId(active_controller_id(b.metadata, &image));
    resp.brokers = image
        .brokers()
        .values()
        .filter(|br| !br.fenced || (version >= 2 && r.include_fenced_brokers))
        .filter_map(|br| {
            let ep = endpoint_on(br, listener)?;
            let mut d = DescribeClusterBroker::default();
            d.broker_id = BrokerId(br.id);
            d.host = s(ep.host.clone());
            d.port = ep.port as i32;
            d.rack = br.rack.clone().map(s);
            if version >= 2 {
                d.is_fenced = br.fenced;
            }
            Some(d)
        })
        .collect();
    resp
}

/// BrokerRegistration, on the active controller.
pub async fn broker_registration(
    b: ControlPlane<'_>,
    r: kafka_protocol::messages::BrokerRegistrationRequest,
) -> kafka_protocol::messages::BrokerRegistrationResponse {
    let mut resp = kafka_protocol::messages::BrokerRegistrationResponse::default();
    if r.cluster_id.as_str() != b.cluster_id {
        resp.error_code = ResponseError::InconsistentClusterId.code();
        tracing::warn!(broker = r.broker_id.0, cluster_id = %r.cluster_id, ours = %b.cluster_id, "registration from another cluster refused");
        return resp;
    }
    let request = gregor_meta::BrokerRegistrationRequest {
        broker_id: r.broker_id.0,
        incarnation_id: r.incarnation_id,
        endpoints: r
            .listeners
            .iter()
            .map(|l| gregor_meta::BrokerEndpoint {
                name: l.name.to_string(),
                host: l.host.to_string(),
                port: l.port,
                security_protocol: l.security_protocol,
            })
            .collect(),
        rack: r.rack.map(|r| r.to_string()),
    };
    let now = crate::runtime::now_ms();
    match b
        .metadata
        .submit(|c| c.register_broker(&request, now))
        .await
    {
        Ok(Ok(epoch)) => {
            resp.broker_epoch = epoch;
            b.registration_offsets
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .insert((request.broker_id, epoch), b.metadata.applied_index());
        }
        Ok(Err(e)) => resp.error_code = e.code.code(),
        Err(e) => resp.error_code = e.api_error().code.code(),
    }
    resp
}

/// BrokerHeartbeat, on the active controller.
pub async fn broker_heartbeat(
    b: ControlPlane<'_>,
    r: kafka_protocol::messages::BrokerHeartbeatRequest,
) -> kafka_protocol::messages::BrokerHeartbeatResponse {
    let mut resp = kafka_protocol::messages::BrokerHeartbeatResponse::default();
    // Caught up: the broker has applied the metadata up to its own registration. (A controller
    // elected since then does not know that offset and takes the broker's word.)
    let registered_at = b
        .registration_offsets
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
        .get(&(r.broker_id.0, r.broker_epoch))
        .copied();
    let caught_up = registered_at.is_none_or(|at| r.current_metadata_offset + 1 >= at as i64);
    let hb = gregor_meta::BrokerHeartbeat {
        broker_id: r.broker_id.0,
        broker_epoch: r.broker_epoch,
        want_fence: r.want_fence || !caught_up,
        want_shut_down: r.want_shut_down,
    };
    let now = crate::runtime::now_ms();
    b.metadata.renew_session(hb.broker_id, hb.broker_epoch, now);
    match b
        .metadata
        .submit_unconfirmed(|c| c.broker_heartbeat(&hb, now))
        .await
    {
        Ok(Ok(reply)) => {
            resp.is_caught_up = caught_up;
            resp.is_fenced = reply.is_fenced;
            resp.should_shut_down = reply.should_shut_down;
        }
        Ok(Err(e)) => resp.error_code = e.code.code(),
        Err(e) => resp.error_code = e.api_error().code.code(),
    }
    resp
}
