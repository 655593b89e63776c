//! Coordinator shards follow `__consumer_offsets` leadership, on a real single-node `Broker`
//! (real logs in a temporary directory, requests through the broker's own handler). Leadership
//! changes are applied to the broker's replica manager as the metadata shell applies them; the
//! role a change gives is chosen by the test (this node stops leading a partition, then leads
//! it again under a new leader epoch), since a single node cannot lose a leadership otherwise.
#![allow(clippy::disallowed_methods)] // the test's own tasks, not a broker's: no clock to keep

use std::sync::Arc;
use std::time::Duration;

mod common;

use common::{create_topic, sb, send};
use gregor_broker::groups::{Groups, OFFSETS_TOPIC};
use gregor_broker::Broker;
use gregor_group::partition_for;
use gregor_meta::{LocalPartition, LocalReplicaChanges, TopicIdPartition};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

const PARTITIONS: i32 = 4;

async fn start(dir: &std::path::Path) -> Arc<Broker> {
    common::start(
        dir,
        &[
            format!("offsets.topic.num.partitions={PARTITIONS}"),
            // A first JoinGroup parks for this long: long enough to be unloaded while parked.
            "group.initial.rebalance.delay.ms=600000".into(),
        ],
    )
    .await
}

async fn find_coordinator(b: &Arc<Broker>, group: &str) -> FindCoordinatorResponse {
    let mut r = FindCoordinatorRequest::default();
    r.key = sb(group);
    match send(
        b,
        ApiKey::FindCoordinator,
        3,
        RequestKind::FindCoordinator(r),
    )
    .await
    {
        ResponseKind::FindCoordinator(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn commit(b: &Arc<Broker>, group: &str, topic: &str, offset: i64) -> i16 {
    let mut p = OffsetCommitRequestPartition::default();
    p.partition_index = 0;
    p.committed_offset = offset;
    p.committed_metadata = Some(sb(""));
    let mut t = OffsetCommitRequestTopic::default();
    t.name = TopicName(sb(topic));
    t.partitions = vec![p];
    let mut r = OffsetCommitRequest::default();
    r.group_id = GroupId(sb(group));
    r.generation_id_or_member_epoch = -1;
    r.retention_time_ms = -1;
    r.topics = vec![t];
    match send(b, ApiKey::OffsetCommit, 2, RequestKind::OffsetCommit(r)).await {
        ResponseKind::OffsetCommit(r) => r.topics[0].partitions[0].error_code,
        other => panic!("{other:?}"),
    }
}

/// The group's error and its committed offset of `topic`-0 (-1 if none).
async fn fetch(b: &Arc<Broker>, group: &str, topic: &str) -> (i16, i64) {
    let mut r = OffsetFetchRequest::default();
    r.group_id = GroupId(sb(group));
    r.topics = None;
    match send(b, ApiKey::OffsetFetch, 3, RequestKind::OffsetFetch(r)).await {
        ResponseKind::OffsetFetch(r) => {
            let offset = r
                .topics
                .iter()
                .filter(|t| t.name.0.as_str() == topic)
                .flat_map(|t| t.partitions.iter())
                .find(|p| p.partition_index == 0)
                .map_or(-1, |p| p.committed_offset);
            (r.error_code, offset)
        }
        other => panic!("{other:?}"),
    }
}

async fn join(b: &Arc<Broker>, group: &str, member_id: &str) -> JoinGroupResponse {
    let mut r = JoinGroupRequest::default();
    r.group_id = GroupId(sb(group));
    r.session_timeout_ms = 30_000;
    r.rebalance_timeout_ms = 60_000;
    r.member_id = sb(member_id);
    r.protocol_type = sb("consumer");
    let mut range = JoinGroupRequestProtocol::default();
    range.name = sb("range");
    range.metadata = bytes::Bytes::from_static(b"sub");
    r.protocols = vec![range];
    match send(b, ApiKey::JoinGroup, 5, RequestKind::JoinGroup(r)).await {
        ResponseKind::JoinGroup(r) => r,
        other => panic!("{other:?}"),
    }
}

async fn list_groups(b: &Arc<Broker>) -> Vec<String> {
    let r = ListGroupsRequest::default();
    match send(b, ApiKey::ListGroups, 3, RequestKind::ListGroups(r)).await {
        ResponseKind::ListGroups(r) => {
            assert_eq!(r.error_code, 0);
            r.groups.iter().map(|g| g.group_id.0.to_string()).collect()
        }
        other => panic!("{other:?}"),
    }
}

/// The member ids DescribeGroups shows for `group`.
async fn members(b: &Arc<Broker>, group: &str) -> Vec<String> {
    let mut r = DescribeGroupsRequest::default();
    r.groups = vec![GroupId(sb(group))];
    match send(b, ApiKey::DescribeGroups, 5, RequestKind::DescribeGroups(r)).await {
        ResponseKind::DescribeGroups(r) => r
            .groups
            .iter()
            .flat_map(|g| g.members.iter().map(|m| m.member_id.to_string()))
            .collect(),
        other => panic!("{other:?}"),
    }
}

/// Applies a role for `__consumer_offsets` partition `p` to the broker's replica manager, as a
/// metadata delta naming `leader` with `leader_epoch` would.
async fn set_role(b: &Arc<Broker>, p: i32, leader: i32, leader_epoch: i32) {
    let image = b.metadata.image();
    let topic = image.topic(OFFSETS_TOPIC).expect("internal topic exists");
    let mut registration = topic.partitions[&p].clone();
    registration.leader = leader;
    registration.leader_epoch = leader_epoch;
    let local = LocalPartition {
        topic: OFFSETS_TOPIC.to_string(),
        id: TopicIdPartition {
            topic_id: topic.id,
            partition: p,
        },
        registration,
        role_changed: true,
    };
    let mut changes = LocalReplicaChanges::default();
    if leader == b.config.node_id {
        changes.leaders.push(local);
    } else {
        changes.followers.push(local);
    }
    let replicas = b.replicas.clone();
    b.metadata
        .read(move |c| replicas.apply(&c.config_view(), &image, &changes))
        .await;
}

/// Waits until the shard table satisfies `done` (loaded, loading partitions).
async fn wait_shards(b: &Arc<Broker>, done: impl Fn(&[i32], &[i32]) -> bool) {
    let mut changed = b.groups.watch_shards();
    let wait = async {
        loop {
            changed.borrow_and_update();
            let (loaded, loading) = b.groups.shard_partitions();
            if done(&loaded, &loading) {
                return;
            }
            changed.changed().await.expect("groups alive");
        }
    };
    tokio::time::timeout(Duration::from_secs(30), wait)
        .await
        .expect("shards reach the expected state");
}

/// Another group id that lands in the same partition as `group`, and one that does not.
fn neighbours(group: &str) -> (String, String) {
    let p = partition_for(group, PARTITIONS);
    let same = (0..)
        .map(|i| format!("same-{i}"))
        .find(|g| partition_for(g, PARTITIONS) == p)
        .expect("some id hashes there");
    let other = (0..)
        .map(|i| format!("other-{i}"))
        .find(|g| partition_for(g, PARTITIONS) != p)
        .expect("some id hashes elsewhere");
    (same, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_follow_leadership_of_their_partition() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = start(dir.path()).await;
    let group = "orders";
    let (parked_group, other_group) = neighbours(group);
    let p = Groups::partition_of(b.control_plane(), group);

    // FindCoordinator creates the internal topic; this node leads every partition.
    let c = find_coordinator(&b, group).await;
    assert_eq!((c.error_code, c.node_id.0), (0, b.config.node_id), "{c:?}");
    wait_shards(&b, |loaded, _| loaded.len() == PARTITIONS as usize).await;

    create_topic(&b, "t").await;
    assert_eq!(commit(&b, group, "t", 42).await, 0);
    assert_eq!(commit(&b, &other_group, "t", 7).await, 0);
    assert_eq!(fetch(&b, group, "t").await, (0, 42));

    // A JoinGroup parks in the group's shard (the initial rebalance delay).
    let first = join(&b, &parked_group, "").await;
    assert_eq!(
        first.error_code,
        ResponseError::MemberIdRequired.code(),
        "{first:?}"
    );
    let parked = {
        let b = b.clone();
        let member = first.member_id.to_string();
        let group = parked_group.clone();
        tokio::spawn(async move { join(&b, &group, &member).await })
    };
    // Parked: the group is listed (PreparingRebalance) while the join waits.
    let mut listed = Vec::new();
    for _ in 0..3000 {
        listed = list_groups(&b).await;
        if listed.contains(&parked_group) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(listed.contains(&parked_group), "{listed:?}");
    // The second join has reached the shard (its member is in the group) and waits there.
    let member = first.member_id.to_string();
    for _ in 0..3000 {
        if members(&b, &parked_group).await.contains(&member) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    assert!(members(&b, &parked_group).await.contains(&member));
    assert!(!parked.is_finished());

    // This node stops leading the partition: the shard unloads, the parked join is answered.
    let epoch = b
        .metadata
        .image()
        .topic(OFFSETS_TOPIC)
        .expect("exists")
        .partitions[&p]
        .leader_epoch;
    set_role(&b, p, b.config.node_id + 1, epoch + 1).await;
    let answered = tokio::time::timeout(Duration::from_secs(30), parked)
        .await
        .expect("parked join answered on unload")
        .expect("join task");
    assert_eq!(
        answered.error_code,
        ResponseError::NotCoordinator.code(),
        "{answered:?}"
    );
    wait_shards(&b, |loaded, loading| {
        !loaded.contains(&p) && !loading.contains(&p)
    })
    .await;
    assert_eq!(
        fetch(&b, group, "t").await.0,
        ResponseError::NotCoordinator.code()
    );
    assert_eq!(
        commit(&b, group, "t", 43).await,
        ResponseError::NotCoordinator.code()
    );
    // Groups of the partitions still led here are unaffected, and listed; unloaded ones not.
    assert_eq!(fetch(&b, &other_group, "t").await, (0, 7));
    let listed = list_groups(&b).await;
    assert!(listed.contains(&other_group), "{listed:?}");
    assert!(!listed.contains(&group.to_string()), "{listed:?}");

    // Leading it again under a new epoch: the shard is rebuilt from the partition's log.
    set_role(&b, p, b.config.node_id, epoch + 2).await;
    wait_shards(&b, |loaded, _| loaded.contains(&p)).await;
    assert_eq!(fetch(&b, group, "t").await, (0, 42));
    assert_eq!(commit(&b, group, "t", 44).await, 0);
    assert_eq!(fetch(&b, group, "t").await, (0, 44));

    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn committed_offsets_are_reloaded_after_a_restart() {
    let dir = tempfile::tempdir().expect("tempdir");
    let b = start(dir.path()).await;
    assert_eq!(find_coordinator(&b, "g").await.error_code, 0);
    create_topic(&b, "t").await;
    assert_eq!(commit(&b, "g", "t", 5).await, 0);
    b.shutdown().await;
    drop(b);

    let b = start(dir.path()).await;
    wait_shards(&b, |loaded, _| loaded.len() == PARTITIONS as usize).await;
    assert_eq!(fetch(&b, "g", "t").await, (0, 5));
    b.shutdown().await;
}

/// A TxnOffsetCommit of `offset` for `topic`-0, straight to the group's shard (producer epoch
/// 0, no group metadata, as a v0-v2 client sends it): the partition's error.
async fn txn_commit(
    b: &Arc<Broker>,
    group: &str,
    topic: &str,
    producer_id: i64,
    offset: i64,
) -> Option<ResponseError> {
    use gregor_group::{OffsetCommitPartition, OffsetCommitTopic, Request, Response};
    let req = gregor_group::TxnOffsetCommitRequest {
        transactional_id: format!("tx-{producer_id}"),
        group_id: group.into(),
        producer_id,
        producer_epoch: 0,
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        topics: vec![OffsetCommitTopic {
            name: topic.into(),
            partitions: vec![OffsetCommitPartition {
                partition_index: 0,
                committed_offset: offset,
                committed_leader_epoch: -1,
                committed_metadata: None,
            }],
        }],
    };
    let ctx = gregor_group::RequestContext {
        client_id: "test".into(),
        client_host: "/127.0.0.1".into(),
        api_version: 3,
    };
    let answer = b
        .groups
        .call(b.control_plane(), group, ctx, Request::TxnOffsetCommit(req))
        .await;
    match answer {
        Ok(Response::TxnOffsetCommit(r)) => r.topics[0].partitions[0].error,
        other => panic!("{other:?}"),
    }
}

/// Appends the marker of `producer_id`'s transaction to `__consumer_offsets` partition `p` and
/// tells the group shards, as the transaction coordinator's marker path does.
async fn marker(b: &Arc<Broker>, p: i32, producer_id: i64, commit: bool) {
    let part = b.replicas.get(OFFSETS_TOPIC, p).expect("partition hosted");
    let written = part.spawn_marker(gregor_log::txn::Marker {
        producer_id,
        producer_epoch: 0,
        coordinator_epoch: 0,
        commit,
        timestamp: 0,
    });
    written
        .done
        .await
        .expect("marker task")
        .expect("marker appended");
    b.groups.complete_transaction(p, producer_id, commit).await;
}

/// OffsetFetch v7 of `topic`-0: the partition's error and offset.
async fn fetch_v7(b: &Arc<Broker>, group: &str, topic: &str, require_stable: bool) -> (i16, i64) {
    let mut t = offset_fetch_request::OffsetFetchRequestTopic::default();
    t.name = TopicName(sb(topic));
    t.partition_indexes = vec![0];
    let mut r = OffsetFetchRequest::default();
    r.group_id = GroupId(sb(group));
    r.topics = Some(vec![t]);
    r.require_stable = require_stable;
    match send(b, ApiKey::OffsetFetch, 7, RequestKind::OffsetFetch(r)).await {
        ResponseKind::OffsetFetch(r) => {
            assert_eq!(r.error_code, 0, "{r:?}");
            let p = &r.topics[0].partitions[0];
            (p.error_code, p.committed_offset)
        }
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn transactional_offsets_are_visible_only_after_their_commit_marker() {
    const UNSTABLE: i16 = 88; // UNSTABLE_OFFSET_COMMIT
    let dir = tempfile::tempdir().expect("tempdir");
    let b = start(dir.path()).await;
    let g = "txn-group";
    assert_eq!(find_coordinator(&b, g).await.error_code, 0);
    wait_shards(&b, |loaded, _| loaded.len() == PARTITIONS as usize).await;
    create_topic(&b, "t").await;
    create_topic(&b, "u").await;
    let p = Groups::partition_of(b.control_plane(), g);
    let part = b.replicas.get(OFFSETS_TOPIC, p).expect("hosted");
    assert_eq!(commit(&b, g, "t", 5).await, 0);

    // Two commits of one transaction (batches without sequences): pending, and the
    // partition's last stable offset stays at the transaction's first batch.
    assert_eq!(txn_commit(&b, g, "t", 1000, 9).await, None);
    assert_eq!(txn_commit(&b, g, "t", 1000, 10).await, None);
    assert_eq!(fetch_v7(&b, g, "t", true).await, (UNSTABLE, -1));
    assert_eq!(fetch_v7(&b, g, "t", false).await, (0, 5));
    assert!(part.last_stable_offset(part.high_watermark()) < part.high_watermark());
    marker(&b, p, 1000, true).await;
    assert_eq!(fetch_v7(&b, g, "t", true).await, (0, 10));

    // An aborted transaction's offset is dropped.
    assert_eq!(txn_commit(&b, g, "t", 2000, 20).await, None);
    marker(&b, p, 2000, false).await;
    assert_eq!(fetch_v7(&b, g, "t", true).await, (0, 10));

    // One left open, one committed and one aborted after it; all as the log replays them.
    assert_eq!(txn_commit(&b, g, "t", 3000, 30).await, None);
    assert_eq!(txn_commit(&b, g, "u", 4000, 40).await, None);
    marker(&b, p, 4000, false).await;
    b.shutdown().await;
    drop((b, part));

    let b = start(dir.path()).await;
    wait_shards(&b, |loaded, _| loaded.len() == PARTITIONS as usize).await;
    assert_eq!(fetch_v7(&b, g, "t", true).await, (UNSTABLE, -1));
    assert_eq!(fetch_v7(&b, g, "t", false).await, (0, 10));
    assert_eq!(fetch_v7(&b, g, "u", false).await, (0, -1));
    marker(&b, p, 3000, true).await;
    assert_eq!(fetch_v7(&b, g, "t", true).await, (0, 30));
    b.shutdown().await;
}
