//! What the broker's integration tests share: a single-node broker in a directory, and requests
//! sent through its own handler.

#![allow(dead_code)] // each test file uses a part

use std::sync::Arc;

use gregor_broker::connection::{Handler, Reply, RequestContext};
use gregor_broker::{Broker, BrokerConfig, BrokerOptions};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

pub fn sb(s: &str) -> StrBytes {
    StrBytes::from_string(s.to_string())
}

/// A single-node broker keeping its data in `dir`, with these config overrides.
pub async fn start(dir: &std::path::Path, overrides: &[String]) -> Arc<Broker> {
    let opts = BrokerOptions {
        data_dir: Some(dir.to_path_buf()),
        overrides: overrides.to_vec(),
        ..BrokerOptions::default()
    };
    let config = BrokerConfig::from_options(&opts).expect("valid config");
    Broker::start(config).await.expect("broker starts")
}

pub async fn send(
    b: &Arc<Broker>,
    api_key: ApiKey,
    version: i16,
    req: RequestKind,
) -> ResponseKind {
    let ctx = RequestContext {
        api_key,
        api_version: version,
        correlation_id: 1,
        client_id: "broker-integration-test".into(),
        client_host: "127.0.0.1".into(),
        connection_id: 1,
        min_round_trip: None,
        listener_name: "PLAINTEXT".into(),
        security_protocol: gregor_broker::security::SecurityProtocol::Plaintext,
        principal: std::sync::Arc::new(gregor_broker::security::KafkaPrincipal::anonymous()),
    };
    match b.clone().handle(ctx, req).await {
        Reply::Respond(r) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

/// Creates `name` with one partition on this node.
pub async fn create_topic(b: &Arc<Broker>, name: &str) {
    let mut t = CreatableTopic::default();
    t.name = TopicName(sb(name));
    t.num_partitions = 1;
    t.replication_factor = 1;
    let mut r = CreateTopicsRequest::default();
    r.topics = vec![t];
    r.timeout_ms = 10_000;
    match send(b, ApiKey::CreateTopics, 5, RequestKind::CreateTopics(r)).await {
        ResponseKind::CreateTopics(r) => assert_eq!(r.topics[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
}
