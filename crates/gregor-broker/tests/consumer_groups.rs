//! KIP-848 consumer groups through the broker's own handler on a real single-node broker:
//! ApiVersions advertises ConsumerGroupHeartbeat and ConsumerGroupDescribe, a member joins and
//! gets its partitions by topic id, ConsumerGroupDescribe names the topics, bad heartbeats get
//! Kafka's error codes and the broker keeps serving, and `group.version` 0 turns the protocol
//! off as Kafka does.

mod common;

use std::sync::Arc;

use common::*;
use gregor_broker::Broker;
use kafka_protocol::messages::consumer_group_heartbeat_request::TopicPartitions;
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

const GROUP: &str = "kip848";

fn join(member: &str) -> ConsumerGroupHeartbeatRequest {
    let mut r = ConsumerGroupHeartbeatRequest::default();
    r.group_id = GroupId(sb(GROUP));
    r.member_id = sb(member);
    r.member_epoch = 0;
    r.rebalance_timeout_ms = 30_000;
    r.subscribed_topic_names = Some(vec![TopicName(sb("orders"))]);
    r.topic_partitions = Some(Vec::new());
    r
}

async fn heartbeat(
    b: &Arc<Broker>,
    r: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let req = RequestKind::ConsumerGroupHeartbeat(r);
    match send(b, ApiKey::ConsumerGroupHeartbeat, 1, req).await {
        ResponseKind::ConsumerGroupHeartbeat(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn describe(b: &Arc<Broker>, groups: &[&str]) -> ConsumerGroupDescribeResponse {
    let mut r = ConsumerGroupDescribeRequest::default();
    r.group_ids = groups.iter().map(|g| GroupId(sb(g))).collect();
    let req = RequestKind::ConsumerGroupDescribe(r);
    match send(b, ApiKey::ConsumerGroupDescribe, 1, req).await {
        ResponseKind::ConsumerGroupDescribe(r) => r,
        other => panic!("{other:?}"),
    }
}

/// A heartbeat, retried while the coordinator shard of a new cluster is still loading.
async fn heartbeat_loaded(
    b: &Arc<Broker>,
    r: ConsumerGroupHeartbeatRequest,
) -> ConsumerGroupHeartbeatResponse {
    let loading = ResponseError::CoordinatorLoadInProgress.code();
    for _ in 0..100 {
        let answer = heartbeat(b, r.clone()).await;
        if answer.error_code != loading {
            return answer;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("the coordinator never loaded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_member_joins_is_described_and_bad_heartbeats_get_kafkas_errors() {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = start(dir.path(), &["offsets.topic.num.partitions=1".into()]).await;
    let versions = match send(
        &b,
        ApiKey::ApiVersions,
        3,
        RequestKind::ApiVersions(Default::default()),
    )
    .await
    {
        ResponseKind::ApiVersions(r) => r,
        other => panic!("{other:?}"),
    };
    for api in [
        ApiKey::ConsumerGroupHeartbeat,
        ApiKey::ConsumerGroupDescribe,
    ] {
        let v = versions.api_keys.iter().find(|k| k.api_key == api as i16);
        assert_eq!(
            v.map(|v| (v.min_version, v.max_version)),
            Some((0, 1)),
            "{api:?}"
        );
    }
    create_topic(&b, "orders").await;
    let joined = heartbeat_loaded(&b, join("m1")).await;
    assert_eq!(
        (joined.error_code, joined.member_epoch),
        (0, 1),
        "{joined:?}"
    );
    assert_eq!(joined.member_id.as_ref().map(|m| m.as_str()), Some("m1"));
    let assignment = joined.assignment.expect("an assignment");
    assert_eq!(assignment.topic_partitions[0].partitions, vec![0]);
    let topic_id = assignment.topic_partitions[0].topic_id;

    let d = describe(&b, &[GROUP, "nobody"]).await;
    let (g, missing) = (&d.groups[0], &d.groups[1]);
    assert_eq!((g.error_code, g.group_state.as_str()), (0, "Stable"));
    assert_eq!((g.group_epoch, g.assignment_epoch), (1, 1));
    let m = &g.members[0];
    assert_eq!(
        (m.member_id.as_str(), m.member_epoch, m.member_type),
        ("m1", 1, 1)
    );
    assert_eq!(m.client_id.as_str(), "broker-integration-test");
    let owned = &m.assignment.topic_partitions[0];
    assert_eq!(
        (owned.topic_id, owned.topic_name.as_str()),
        (topic_id, "orders")
    );
    assert_eq!(missing.error_code, ResponseError::GroupIdNotFound.code());

    // Bad heartbeats: each gets its error, and the group and broker go on.
    let mut bad = join("m2");
    bad.server_assignor = Some(sb("roundrobin"));
    assert_eq!(
        heartbeat(&b, bad).await.error_code,
        ResponseError::UnsupportedAssignor.code()
    );
    let mut bad = join("m2");
    bad.subscribed_topic_names = None;
    bad.subscribed_topic_regex = Some(sb("orders-("));
    let code = heartbeat(&b, bad).await.error_code;
    assert_eq!(code, ResponseError::InvalidRegularExpression.code());
    let mut bad = join("ghost");
    bad.member_epoch = 7;
    assert_eq!(
        heartbeat(&b, bad).await.error_code,
        ResponseError::UnknownMemberId.code()
    );
    let mut bad = join("m1");
    bad.member_epoch = 9;
    let code = heartbeat(&b, bad).await.error_code;
    assert_eq!(code, ResponseError::FencedMemberEpoch.code());
    // Partitions of a topic id nobody knows, and absurd partition numbers, are not the
    // member's to report: the member stays as it was.
    let mut odd = join("m1");
    odd.member_epoch = 1;
    let mut tp = TopicPartitions::default();
    tp.topic_id = uuid::Uuid::from_u128(42);
    tp.partitions = vec![i32::MAX, -5, 0];
    odd.topic_partitions = Some(vec![tp]);
    let answer = heartbeat(&b, odd).await;
    assert_eq!(
        (answer.error_code, answer.member_epoch),
        (0, 1),
        "{answer:?}"
    );
    let d = describe(&b, &[GROUP]).await;
    assert_eq!(
        d.groups[0].members[0].assignment.topic_partitions[0].partitions,
        vec![0]
    );

    // `group.version` 0 turns the protocol off: heartbeats get UNSUPPORTED_VERSION.
    let mut u = FeatureUpdateKey::default();
    u.feature = sb("group.version");
    u.max_version_level = 0;
    u.upgrade_type = 2; // safe downgrade
    let mut r = UpdateFeaturesRequest::default();
    r.feature_updates = vec![u];
    r.timeout_ms = 10_000;
    match send(
        &b,
        ApiKey::UpdateFeatures,
        1,
        RequestKind::UpdateFeatures(r),
    )
    .await
    {
        ResponseKind::UpdateFeatures(r) => assert_eq!(r.results[0].error_code, 0, "{r:?}"),
        other => panic!("{other:?}"),
    }
    let mut beat = join("m1");
    beat.member_epoch = 1;
    let code = heartbeat(&b, beat).await.error_code;
    assert_eq!(code, ResponseError::UnsupportedVersion.code());
    b.shutdown().await;
}

async fn alter_group_config(b: &Arc<Broker>, group: &str, key: &str, value: &str) -> i16 {
    use incremental_alter_configs_request::{AlterConfigsResource, AlterableConfig};
    let mut c = AlterableConfig::default();
    c.name = sb(key);
    c.config_operation = 0;
    c.value = Some(sb(value));
    let mut res = AlterConfigsResource::default();
    res.resource_type = 32;
    res.resource_name = sb(group);
    res.configs = vec![c];
    let mut r = IncrementalAlterConfigsRequest::default();
    r.resources = vec![res];
    let req = RequestKind::IncrementalAlterConfigs(r);
    match send(b, ApiKey::IncrementalAlterConfigs, 1, req).await {
        ResponseKind::IncrementalAlterConfigs(r) => r.responses[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// A group's own `consumer.heartbeat.interval.ms` (its GROUP config resource) is what its
/// members are told; other groups keep the broker's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_config_sets_its_members_heartbeat_interval() {
    let dir = tempfile::tempdir().expect("temp dir");
    let b = start(dir.path(), &["offsets.topic.num.partitions=1".into()]).await;
    create_topic(&b, "orders").await;
    let code = alter_group_config(&b, GROUP, "consumer.heartbeat.interval.ms", "7000").await;
    assert_eq!(code, 0);
    let bad = alter_group_config(&b, GROUP, "consumer.heartbeat.interval.ms", "999999").await;
    assert_eq!(bad, ResponseError::InvalidConfig.code());
    // The change reaches this broker's metadata image shortly after it is committed.
    let mut interval = 0;
    for attempt in 0..100 {
        let mut r = join(&format!("m{attempt}"));
        r.group_id = GroupId(sb(GROUP));
        let answer = heartbeat_loaded(&b, r).await;
        assert_eq!(answer.error_code, 0, "{answer:?}");
        interval = answer.heartbeat_interval_ms;
        if interval == 7000 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    assert_eq!(interval, 7000);
    let mut other = join("x");
    other.group_id = GroupId(sb("other-group"));
    assert_eq!(
        heartbeat_loaded(&b, other).await.heartbeat_interval_ms,
        5000
    );
}
