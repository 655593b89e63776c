//! ApiVersions, Metadata, DescribeCluster.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{
    describe_cluster_response::DescribeClusterBroker, ApiVersionsRequest, ApiVersionsResponse,
    BrokerId, DescribeClusterRequest, DescribeClusterResponse, MetadataRequest, MetadataResponse,
    TopicName,
};
use kafka_protocol::ResponseError;

use super::s;
use crate::broker::Broker;

/// Kafka's "authorized operations not requested" marker.
pub const OPS_NOT_REQUESTED: i32 = i32::MIN;

pub fn api_versions(_r: &ApiVersionsRequest, _version: i16) -> ApiVersionsResponse {
    let mut resp = ApiVersionsResponse::default();
    resp.api_keys = crate::api::api_versions();
    resp
}

pub async fn metadata(b: &Broker, r: MetadataRequest, version: i16) -> MetadataResponse {
    let mut image = b.metadata.image();
    // v0: an empty list means all topics; v1+: null means all, empty means none.
    let requested: Option<Vec<(Option<String>, gregor_meta::Uuid)>> = match r.topics {
        None => None,
        Some(ts) if ts.is_empty() && version == 0 => None,
        Some(ts) => Some(
            ts.into_iter()
                .map(|t| (t.name.map(|n| n.0.to_string()), t.topic_id))
                .collect(),
        ),
    };
    let auto_create =
        b.config.bool("auto.create.topics.enable") && (version < 4 || r.allow_auto_topic_creation);
    if let (Some(req), true) = (&requested, auto_create) {
        let missing: Vec<String> = req
            .iter()
            .filter_map(|(n, _)| n.clone())
            .filter(|n| {
                image.topic(n).is_none() && gregor_meta::topic_name::validate_topic_name(n).is_ok()
            })
            .collect();
        if !missing.is_empty() {
            let create = gregor_meta::CreateTopicsRequest {
                topics: missing
                    .iter()
                    .map(gregor_meta::CreatableTopic::new)
                    .collect(),
                validate_only: false,
            };
            if let Err(e) = b
                .metadata
                .submit(&b.replicas, |c| c.create_topics(&create))
                .await
            {
                tracing::warn!(error = %e, "auto topic creation failed");
            }
            image = b.metadata.image();
        }
    }
    let mut resp = MetadataResponse::default();
    resp.brokers = image
        .brokers()
        .values()
        .filter(|br| !br.fenced)
        .filter_map(|br| {
            let ep = br.endpoints.first()?;
            let mut m = MetadataResponseBroker::default();
            m.node_id = BrokerId(br.id);
            m.host = s(ep.host.clone());
            m.port = ep.port as i32;
            m.rack = br.rack.clone().map(s);
            Some(m)
        })
        .collect();
    resp.cluster_id = (version >= 2).then(|| s(b.cluster_id.clone()));
    resp.controller_id = BrokerId(if version >= 1 { b.config.node_id } else { -1 });
    let describe = |name: &str| -> MetadataResponseTopic {
        let mut t = MetadataResponseTopic::default();
        t.name = Some(TopicName(s(name)));
        if let Err(e) = gregor_meta::topic_name::validate_topic_name(name) {
            let _ = e;
            t.error_code = ResponseError::InvalidTopicException.code();
            return t;
        }
        let Some(topic) = image.topic(name) else {
            t.error_code = ResponseError::UnknownTopicOrPartition.code();
            return t;
        };
        fill_topic(&mut t, topic, &image);
        t
    };
    resp.topics = match requested {
        None => image.topics().values().map(|t| describe(&t.name)).collect(),
        Some(req) => req
            .into_iter()
            .map(|(name, id)| match name {
                Some(n) => describe(&n),
                None => match image.topic_by_id(id) {
                    Some(t) => describe(&t.name.clone()),
                    None => {
                        let mut t = MetadataResponseTopic::default();
                        t.topic_id = id;
                        t.error_code = ResponseError::UnknownTopicId.code();
                        t
                    }
                },
            })
            .collect(),
    };
    if version < 8 {
        resp.cluster_authorized_operations = OPS_NOT_REQUESTED;
    }
    resp
}

fn fill_topic(
    t: &mut MetadataResponseTopic,
    topic: &gregor_meta::TopicImage,
    image: &gregor_meta::MetadataImage,
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
            }
            mp
        })
        .collect();
}

pub fn describe_cluster(
    b: &Broker,
    r: &DescribeClusterRequest,
    version: i16,
) -> DescribeClusterResponse {
    let image = b.metadata.image();
    let mut resp = DescribeClusterResponse::default();
    resp.cluster_id = s(b.cluster_id.clone());
    resp.controller_id = BrokerId(b.config.node_id);
    resp.brokers = image
        .brokers()
        .values()
        .filter(|br| !br.fenced || (version >= 2 && r.include_fenced_brokers))
        .filter_map(|br| {
            let ep = br.endpoints.first()?;
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
    if version >= 1 && r.endpoint_type != 1 {
        // Only broker endpoints exist here.
        resp.error_code = ResponseError::UnsupportedEndpointType.code();
    }
    resp.cluster_authorized_operations = OPS_NOT_REQUESTED;
    resp
}
