//! Several client listeners: every advertised one is registered, and Metadata, DescribeCluster
//! and FindCoordinator answer with the endpoints of the listener the request came in on.

mod common;

use std::sync::Arc;

use gregor_broker::connection::{Handler, Reply, RequestContext};
use gregor_broker::security::{KafkaPrincipal, SecurityProtocol};
use gregor_broker::{Broker, BrokerConfig, BrokerOptions};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::*;

use common::sb;

/// A single node with listeners EXTERNAL and INTERNAL (INTERNAL between brokers), each
/// advertised under its own name.
async fn start(dir: &std::path::Path) -> Arc<Broker> {
    let opts = BrokerOptions {
        listeners: Some("EXTERNAL://127.0.0.1:19501,INTERNAL://127.0.0.1:19502".into()),
        advertised_listeners: Some(
            "EXTERNAL://kafka.example.com:9092,INTERNAL://10.1.1.1:9093".into(),
        ),
        data_dir: Some(dir.to_path_buf()),
        overrides: vec![
            "listener.security.protocol.map=EXTERNAL:PLAINTEXT,INTERNAL:PLAINTEXT,CONTROLLER:PLAINTEXT".into(),
            "inter.broker.listener.name=INTERNAL".into(),
            "offsets.topic.num.partitions=1".into(),
        ],
        ..BrokerOptions::default()
    };
    let config = BrokerConfig::from_options(&opts).expect("valid config");
    Broker::start(config).await.expect("broker starts")
}

/// Sends `req` as if it came in on `listener`.
async fn send_on(b: &Arc<Broker>, listener: &str, version: i16, req: RequestKind) -> ResponseKind {
    let api_key = match &req {
        RequestKind::Metadata(_) => ApiKey::Metadata,
        RequestKind::DescribeCluster(_) => ApiKey::DescribeCluster,
        RequestKind::FindCoordinator(_) => ApiKey::FindCoordinator,
        other => panic!("not used here: {other:?}"),
    };
    let ctx = RequestContext {
        api_key,
        api_version: version,
        correlation_id: 1,
        client_id: "listeners-test".into(),
        client_host: "127.0.0.1".into(),
        connection_id: 1,
        min_round_trip: None,
        listener_name: listener.into(),
        security_protocol: SecurityProtocol::Plaintext,
        principal: Arc::new(KafkaPrincipal::anonymous()),
    };
    match b.clone().handle(ctx, req).await {
        Reply::Respond(r) => r,
        other => panic!("expected a response, got {other:?}"),
    }
}

async fn metadata_on(b: &Arc<Broker>, listener: &str) -> MetadataResponse {
    let mut topic = MetadataRequestTopic::default();
    topic.name = Some(TopicName(sb("t")));
    let mut r = MetadataRequest::default();
    r.topics = Some(vec![topic]);
    match send_on(b, listener, 9, RequestKind::Metadata(r)).await {
        ResponseKind::Metadata(m) => m,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_listener_is_answered_with_its_own_endpoints() {
    let dir = tempfile::tempdir().expect("dir");
    let b = start(dir.path()).await;
    common::create_topic(&b, "t").await;

    let endpoints = |m: &MetadataResponse| -> Vec<(String, i32)> {
        m.brokers
            .iter()
            .map(|br| (br.host.to_string(), br.port))
            .collect()
    };
    let external = metadata_on(&b, "EXTERNAL").await;
    assert_eq!(
        endpoints(&external),
        vec![("kafka.example.com".into(), 9092)]
    );
    assert_eq!(external.topics[0].partitions[0].leader_id.0, 1);
    let internal = metadata_on(&b, "INTERNAL").await;
    assert_eq!(endpoints(&internal), vec![("10.1.1.1".into(), 9093)]);

    // A listener the leader does not have: no broker to name, LISTENER_NOT_FOUND (Kafka's).
    let other = metadata_on(&b, "OTHER").await;
    assert!(other.brokers.is_empty());
    let p = &other.topics[0].partitions[0];
    assert_eq!(
        (p.error_code, p.leader_id.0),
        (kafka_protocol::ResponseError::ListenerNotFound.code(), -1)
    );

    let described = match send_on(
        &b,
        "INTERNAL",
        1,
        RequestKind::DescribeCluster(DescribeClusterRequest::default()),
    )
    .await
    {
        ResponseKind::DescribeCluster(d) => d,
        other => panic!("{other:?}"),
    };
    let listed: Vec<(String, i32)> = described
        .brokers
        .iter()
        .map(|br| (br.host.to_string(), br.port))
        .collect();
    assert_eq!(listed, vec![("10.1.1.1".into(), 9093)]);

    let mut find = FindCoordinatorRequest::default();
    find.key = sb("some-group");
    let coordinator = |r: ResponseKind| match r {
        ResponseKind::FindCoordinator(c) => (c.error_code, c.host.to_string(), c.port),
        other => panic!("{other:?}"),
    };
    // The first FindCoordinator creates the offsets topic, led by this node.
    let found = coordinator(
        send_on(
            &b,
            "EXTERNAL",
            3,
            RequestKind::FindCoordinator(find.clone()),
        )
        .await,
    );
    assert_eq!(found, (0, "kafka.example.com".into(), 9092));
    let internal =
        coordinator(send_on(&b, "INTERNAL", 3, RequestKind::FindCoordinator(find)).await);
    assert_eq!(internal, (0, "10.1.1.1".into(), 9093));
    b.shutdown().await;
}
