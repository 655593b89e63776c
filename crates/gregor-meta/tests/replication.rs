//! Brokers, fencing, ISR changes, elections and reassignment (seed 001 scenarios).

mod common;
use common::*;
use gregor_meta::*;

fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p)
}

fn line(c: &Cluster, t: &str, p: i32) -> String {
    describe_topic(&c.image, t).unwrap().partitions[p as usize].to_string()
}

/// `--replica-assignment "0:1,1:0,0:1"`, then broker 0 dies, comes back, and a preferred
/// election restores the original leaders.
#[test]
fn seed_failover_restart_and_preferred_election() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(CreatableTopic::new("tp_demo_03").with_assignment(vec![
        vec![0, 1],
        vec![1, 0],
        vec![0, 1],
    ]))
    .unwrap();
    let before: Vec<i32> = (0..3)
        .map(|p| c.partition("tp_demo_03", p).leader_epoch)
        .collect();

    // kill -9 broker 0: its session times out after broker.session.timeout.ms (9000).
    let delta = c.advance(5_000, &[1]);
    assert!(delta.is_empty(), "not yet expired");
    let delta = c.advance(5_000, &[1]);
    assert!(delta.changed_brokers.contains(&0));
    assert!(c.image.broker(0).unwrap().fenced);
    for p in 0..3 {
        let part = c.partition("tp_demo_03", p);
        assert_eq!(
            (part.leader, part.isr.clone()),
            (1, vec![1]),
            "partition {p}"
        );
    }
    assert_eq!(
        line(&c, "tp_demo_03", 0),
        "\tTopic: tp_demo_03\tPartition: 0\tLeader: 1\tReplicas: 0,1\tIsr: 1"
    );
    assert_eq!(
        line(&c, "tp_demo_03", 1),
        "\tTopic: tp_demo_03\tPartition: 1\tLeader: 1\tReplicas: 1,0\tIsr: 1"
    );
    // Leader epochs moved only where the leader moved.
    assert_eq!(c.partition("tp_demo_03", 0).leader_epoch, before[0] + 1);
    assert_eq!(c.partition("tp_demo_03", 1).leader_epoch, before[1]);
    // Broker 1 now leads everything.
    let local = delta.local_changes(1);
    assert_eq!(local.leaders.len(), 3);
    assert_eq!(local.leaders.iter().filter(|l| l.role_changed).count(), 2);

    // Broker 0 restarts (new incarnation), registers and catches up.
    c.register(0, None, 777);
    assert!(c.image.broker(0).unwrap().fenced);
    let reply = c.heartbeat(0, true);
    assert!(reply.is_fenced, "still catching up");
    assert!(!c.heartbeat(0, false).is_fenced);
    // The leader adds it back to the ISR once it has caught up.
    for p in 0..3 {
        let r = c.alter_isr("tp_demo_03", p, vec![1, 0]).unwrap();
        assert_eq!(r.isr, vec![1, 0]);
    }
    assert_eq!(
        line(&c, "tp_demo_03", 0),
        "\tTopic: tp_demo_03\tPartition: 0\tLeader: 1\tReplicas: 0,1\tIsr: 1,0"
    );

    // kafka-preferred-replica-election.sh / kafka-leader-election.sh --election-type preferred
    let res = c.controller.elect_leaders(
        ElectionType::Preferred,
        Some(&[
            tp("tp_demo_03", 0),
            tp("tp_demo_03", 1),
            tp("tp_demo_03", 2),
        ]),
    );
    assert!(res.response[0].1.is_ok());
    assert_eq!(code(&res.response[1].1), ResponseError::ElectionNotNeeded);
    assert!(res.response[2].1.is_ok());
    let delta = c.commit(&res.records);
    let leaders: Vec<i32> = (0..3)
        .map(|p| c.partition("tp_demo_03", p).leader)
        .collect();
    assert_eq!(leaders, vec![0, 1, 0]);
    let local0 = delta.local_changes(0);
    assert_eq!(local0.leaders.len(), 2);
    assert_eq!(delta.local_changes(1).followers.len(), 2);
}

#[test]
fn preferred_election_over_all_partitions_skips_those_not_needing_it() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1], vec![1, 0]]))
        .unwrap();
    let res = c.controller.elect_leaders(ElectionType::Preferred, None);
    assert!(res.response.is_empty());
    assert!(res.records.is_empty());
    c.advance(10_000, &[1]);
    // Preferred replica 0 is fenced.
    let res = c.controller.elect_leaders(ElectionType::Preferred, None);
    assert_eq!(res.response.len(), 1);
    assert_eq!(
        code(&res.response[0].1),
        ResponseError::PreferredLeaderNotAvailable
    );
    let res = c
        .controller
        .elect_leaders(ElectionType::Preferred, Some(&[tp("t", 7), tp("nope", 0)]));
    assert!(res
        .response
        .iter()
        .all(|r| code(&r.1) == ResponseError::UnknownTopicOrPartition));
}

#[test]
fn last_isr_member_stays_and_leads_again_when_back() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1]]))
        .unwrap();
    c.alter_isr("t", 0, vec![0]).unwrap(); // follower 1 fell behind
    c.advance(10_000, &[1]); // leader 0 dies
    let p = c.partition("t", 0);
    assert_eq!(
        (p.leader, p.isr.clone()),
        (NO_LEADER, vec![0]),
        "clean election finds no leader"
    );
    assert_eq!(
        line(&c, "t", 0),
        "\tTopic: t\tPartition: 0\tLeader: none\tReplicas: 0,1\tIsr: 0"
    );
    assert!(describe_topic(&c.image, "t").unwrap().partitions[0].is_unavailable());
    // An explicit unclean election could pick 1, but here we wait: 0 comes back and leads.
    c.register(0, None, 5);
    c.heartbeat(0, false);
    let p = c.partition("t", 0);
    assert_eq!((p.leader, p.isr), (0, vec![0]));
}

#[test]
fn unclean_election_when_the_topic_allows_it() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(
        CreatableTopic::new("t")
            .with_assignment(vec![vec![0, 1]])
            .with_config("unclean.leader.election.enable", "true"),
    )
    .unwrap();
    c.alter_isr("t", 0, vec![0]).unwrap();
    c.advance(10_000, &[1]);
    let p = c.partition("t", 0);
    assert_eq!(
        (p.leader, p.isr.clone()),
        (1, vec![1]),
        "out-of-sync replica elected"
    );
    assert_eq!(p.leader_recovery_state, LeaderRecoveryState::Recovering);
    // The recovered leader reports RECOVERED with its ISR.
    let part = c.partition("t", 0);
    let topic_id = c.image.topic("t").unwrap().id;
    let res = c.controller.alter_partition(&AlterPartitionRequest {
        broker_id: 1,
        broker_epoch: c.image.broker(1).unwrap().epoch,
        partitions: vec![AlterPartitionData {
            topic_id,
            partition: 0,
            leader_epoch: part.leader_epoch,
            new_isr: vec![1],
            leader_recovery_state: LeaderRecoveryState::Recovered,
            partition_epoch: part.partition_epoch,
        }],
    });
    c.commit(&res.records);
    assert_eq!(
        c.partition("t", 0).leader_recovery_state,
        LeaderRecoveryState::Recovered
    );
}

#[test]
fn unclean_election_on_request() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1]]))
        .unwrap();
    c.alter_isr("t", 0, vec![0]).unwrap();
    c.advance(10_000, &[1, 2]);
    assert_eq!(c.partition("t", 0).leader, NO_LEADER);
    let res = c
        .controller
        .elect_leaders(ElectionType::Unclean, Some(&[tp("t", 0)]));
    assert!(res.response[0].1.is_ok());
    c.commit(&res.records);
    assert_eq!(c.partition("t", 0).leader, 1);
    let res = c
        .controller
        .elect_leaders(ElectionType::Unclean, Some(&[tp("t", 0)]));
    assert_eq!(code(&res.response[0].1), ResponseError::ElectionNotNeeded);
    // No live replica at all.
    c.advance(10_000, &[2]);
    let res = c
        .controller
        .elect_leaders(ElectionType::Unclean, Some(&[tp("t", 0)]));
    assert_eq!(
        code(&res.response[0].1),
        ResponseError::EligibleLeadersNotAvailable
    );
}

#[test]
fn cluster_wide_unclean_setting_applies_to_topics_without_override() {
    let mut c = Cluster::new(&[("node.id", "0"), ("unclean.leader.election.enable", "true")]);
    c.add_broker(0, None);
    c.add_broker(1, None);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1]]))
        .unwrap();
    c.alter_isr("t", 0, vec![0]).unwrap();
    c.advance(10_000, &[1]);
    assert_eq!(c.partition("t", 0).leader, 1);
}

#[test]
fn single_node_restart_keeps_its_partitions() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("t").with_layout(2, 1))
        .unwrap();
    let epoch0 = c.partition("t", 0).leader_epoch;
    // The process restarts with a new incarnation before its session expired.
    assert_eq!(
        code(&register_incarnation(&mut c, 0, 2)),
        ResponseError::DuplicateBrokerRegistration
    );
    c.advance(10_000, &[]);
    assert_eq!(c.partition("t", 0).leader, NO_LEADER);
    c.register(0, None, 2);
    let delta_records = c.controller.broker_heartbeat(
        &BrokerHeartbeat {
            broker_id: 0,
            broker_epoch: c.image.broker(0).unwrap().epoch,
            want_fence: false,
            want_shut_down: false,
        },
        c.now_ms,
    );
    let delta = c.commit(&delta_records.records);
    let p = c.partition("t", 0);
    assert_eq!((p.leader, p.isr), (0, vec![0]));
    assert_eq!(p.leader_epoch, epoch0 + 2);
    let local = delta.local_changes(0);
    assert_eq!(local.leaders.len(), 2);
    assert!(local.leaders.iter().all(|l| l.role_changed));
}

/// A controller that took over granted sessions it never heard renewed: a restarted
/// incarnation registers at once instead of waiting for its dead predecessor's session to run
/// out. A predecessor this controller did hear from still holds the id.
#[test]
fn a_new_controller_lets_a_restarted_incarnation_register_at_once() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.controller.reset_sessions();
    let granted = c.controller.tick(c.now_ms);
    assert!(
        granted.is_empty(),
        "a takeover grants sessions, it fences nobody"
    );
    // Broker 1 heartbeats to the new controller; broker 0's old incarnation never does.
    c.heartbeat(1, false);
    let registered = register_incarnation(&mut c, 0, 70);
    assert!(registered.is_ok(), "{registered:?}");
    // Broker 1 restarts too, but this controller heard its old incarnation: still refused.
    assert_eq!(
        code(&register_incarnation(&mut c, 1, 71)),
        ResponseError::DuplicateBrokerRegistration
    );
}

/// A BrokerRegistration of `broker` by the process `incarnation`, without endpoints or rack.
fn register_incarnation(c: &mut Cluster, broker: i32, incarnation: u128) -> Result<i64, ApiError> {
    c.controller
        .register_broker(
            &BrokerRegistrationRequest {
                broker_id: broker,
                incarnation_id: Uuid::from_u128(incarnation),
                endpoints: vec![],
                rack: None,
            },
            c.now_ms,
        )
        .response
}

#[test]
fn registration_and_heartbeat_errors() {
    let mut c = Cluster::with_brokers(&[0]);
    let epoch = c.image.broker(0).unwrap().epoch;
    let res = c.controller.broker_heartbeat(
        &BrokerHeartbeat {
            broker_id: 9,
            broker_epoch: 1,
            want_fence: false,
            want_shut_down: false,
        },
        c.now_ms,
    );
    assert_eq!(code(&res.response), ResponseError::BrokerIdNotRegistered);
    let res = c.controller.broker_heartbeat(
        &BrokerHeartbeat {
            broker_id: 0,
            broker_epoch: epoch + 5,
            want_fence: false,
            want_shut_down: false,
        },
        c.now_ms,
    );
    assert_eq!(code(&res.response), ResponseError::StaleBrokerEpoch);
    let res = c.controller.register_broker(
        &BrokerRegistrationRequest {
            broker_id: -3,
            incarnation_id: Uuid::from_u128(1),
            endpoints: vec![],
            rack: None,
        },
        c.now_ms,
    );
    assert_eq!(code(&res.response), ResponseError::InvalidRequest);
    // Epochs grow with every registration.
    let e1 = c.register(1, None, 11);
    assert!(e1 > epoch);
    // A retried registration of the same process is idempotent.
    let res = c.controller.register_broker(
        &BrokerRegistrationRequest {
            broker_id: 1,
            incarnation_id: Uuid::from_u128(11),
            endpoints: c.image.broker(1).unwrap().endpoints.clone(),
            rack: None,
        },
        c.now_ms,
    );
    assert_eq!(res.response, Ok(e1));
    assert!(res.records.is_empty());
}

#[test]
fn unregister_broker() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    let res = c.controller.unregister_broker(1, c.now_ms);
    assert_eq!(
        code(&res.response),
        ResponseError::InvalidRequest,
        "still alive"
    );
    let res = c.controller.unregister_broker(5, c.now_ms);
    assert_eq!(code(&res.response), ResponseError::BrokerIdNotRegistered);
    c.advance(10_000, &[0]);
    let res = c.controller.unregister_broker(1, c.now_ms);
    assert!(res.response.is_ok());
    c.commit(&res.records);
    assert!(c.image.broker(1).is_none());
}

fn alter_raw(
    c: &mut Cluster,
    broker: BrokerId,
    data: AlterPartitionData,
) -> Result<PartitionStateReply, ApiError> {
    let res = c.controller.alter_partition(&AlterPartitionRequest {
        broker_id: broker,
        broker_epoch: c.image.broker(broker).unwrap().epoch,
        partitions: vec![data],
    });
    c.commit(&res.records);
    res.response.unwrap().remove(0).1
}

#[test]
fn alter_partition_is_fenced_by_epochs() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1, 2]]))
        .unwrap();
    let topic_id = c.image.topic("t").unwrap().id;
    let part = c.partition("t", 0);
    let base = AlterPartitionData {
        topic_id,
        partition: 0,
        leader_epoch: part.leader_epoch,
        new_isr: vec![0, 1],
        leader_recovery_state: LeaderRecoveryState::Recovered,
        partition_epoch: part.partition_epoch,
    };
    // Shrink succeeds and bumps the partition epoch, not the leader epoch.
    let r = alter_raw(&mut c, 0, base.clone()).unwrap();
    assert_eq!(
        (r.isr, r.partition_epoch, r.leader_epoch),
        (vec![0, 1], part.partition_epoch + 1, part.leader_epoch)
    );
    // The same request again is stale.
    let e = alter_raw(&mut c, 0, base.clone());
    assert_eq!(code(&e), ResponseError::InvalidUpdateVersion);
    let fresh = |c: &Cluster| {
        let p = c.partition("t", 0);
        AlterPartitionData {
            leader_epoch: p.leader_epoch,
            partition_epoch: p.partition_epoch,
            ..base.clone()
        }
    };
    let cases: Vec<(BrokerId, AlterPartitionData, ResponseError)> = vec![
        (
            0,
            AlterPartitionData {
                leader_epoch: fresh(&c).leader_epoch - 1,
                ..fresh(&c)
            },
            ResponseError::FencedLeaderEpoch,
        ),
        (
            0,
            AlterPartitionData {
                leader_epoch: fresh(&c).leader_epoch + 1,
                ..fresh(&c)
            },
            ResponseError::NotController,
        ),
        (
            0,
            AlterPartitionData {
                partition_epoch: fresh(&c).partition_epoch + 1,
                ..fresh(&c)
            },
            ResponseError::NotController,
        ),
        (1, fresh(&c), ResponseError::InvalidRequest),
        (
            0,
            AlterPartitionData {
                new_isr: vec![1, 2],
                ..fresh(&c)
            },
            ResponseError::InvalidRequest,
        ),
        (
            0,
            AlterPartitionData {
                new_isr: vec![0, 5],
                ..fresh(&c)
            },
            ResponseError::InvalidRequest,
        ),
        (
            0,
            AlterPartitionData {
                new_isr: vec![0, 0],
                ..fresh(&c)
            },
            ResponseError::InvalidRequest,
        ),
        (
            0,
            AlterPartitionData {
                new_isr: vec![0, 1],
                leader_recovery_state: LeaderRecoveryState::Recovering,
                ..fresh(&c)
            },
            ResponseError::InvalidRequest,
        ),
        (
            0,
            AlterPartitionData {
                partition: 3,
                ..fresh(&c)
            },
            ResponseError::UnknownTopicOrPartition,
        ),
        (
            0,
            AlterPartitionData {
                topic_id: Uuid::from_u128(5),
                ..fresh(&c)
            },
            ResponseError::UnknownTopicId,
        ),
    ];
    for (broker, data, expected) in cases {
        let e = alter_raw(&mut c, broker, data.clone());
        assert_eq!(code(&e), expected, "{data:?}");
    }
    // A fenced broker cannot join the ISR.
    c.advance(10_000, &[0, 1]);
    let data = AlterPartitionData {
        new_isr: vec![0, 1, 2],
        ..fresh(&c)
    };
    let e = alter_raw(&mut c, 0, data);
    assert_eq!(code(&e), ResponseError::IneligibleReplica);
    // Stale broker epoch fails the whole request.
    let res = c.controller.alter_partition(&AlterPartitionRequest {
        broker_id: 0,
        broker_epoch: -1,
        partitions: vec![fresh(&c)],
    });
    assert_eq!(code(&res.response), ResponseError::StaleBrokerEpoch);
    // Expanding back once 2 is alive.
    c.register(2, None, 3);
    c.heartbeat(2, false);
    let data = AlterPartitionData {
        new_isr: vec![0, 1, 2],
        ..fresh(&c)
    };
    let r = alter_raw(&mut c, 0, data).unwrap();
    assert_eq!(r.isr, vec![0, 1, 2]);
}

/// Seed section 三: move partitions 3 and 4 of tp_re_01 to the new broker 1.
#[test]
fn seed_reassignment_to_a_new_broker() {
    let mut c = Cluster::with_brokers(&[0]);
    c.create(CreatableTopic::new("tp_re_01").with_layout(5, 1))
        .unwrap();
    c.add_broker(1, None);
    let res = c.controller.alter_partition_reassignments(&[
        (tp("tp_re_01", 3), Some(vec![1])),
        (tp("tp_re_01", 4), Some(vec![1])),
    ]);
    assert!(res.response.iter().all(|r| r.1.is_ok()));
    let delta = c.commit(&res.records);
    let p = c.partition("tp_re_01", 3);
    assert_eq!(
        (
            p.replicas.clone(),
            p.adding_replicas.clone(),
            p.removing_replicas.clone()
        ),
        (vec![1, 0], vec![1], vec![0])
    );
    assert_eq!(
        p.leader, 0,
        "the old leader leads until the new replica is in sync"
    );
    assert_eq!(
        line(&c, "tp_re_01", 3),
        "\tTopic: tp_re_01\tPartition: 3\tLeader: 0\tReplicas: 1,0\tIsr: 0\tAdding Replicas: 1\tRemoving Replicas: 0"
    );
    assert_eq!(
        delta.local_changes(1).followers.len(),
        2,
        "broker 1 starts fetching"
    );
    let ongoing = c.controller.list_partition_reassignments(None);
    assert_eq!(ongoing.len(), 2);
    assert_eq!(ongoing[0].adding_replicas, vec![1]);
    assert_eq!(
        c.controller
            .list_partition_reassignments(Some(&[tp("tp_re_01", 0), tp("nope", 1)]))
            .len(),
        0
    );
    // Broker 1 caught up: the leader adds it to the ISR, which completes the reassignment.
    for p in [3, 4] {
        let e = c.alter_isr("tp_re_01", p, vec![0, 1]);
        assert_eq!(code(&e), ResponseError::NewLeaderElected);
    }
    for p in [3, 4] {
        let part = c.partition("tp_re_01", p);
        assert_eq!(
            (part.leader, part.replicas.clone(), part.isr.clone()),
            (1, vec![1], vec![1])
        );
        assert!(!part.is_reassigning());
    }
    assert!(c.controller.list_partition_reassignments(None).is_empty());
    assert_eq!(
        line(&c, "tp_re_01", 4),
        "\tTopic: tp_re_01\tPartition: 4\tLeader: 1\tReplicas: 1\tIsr: 1"
    );
    assert_eq!(
        line(&c, "tp_re_01", 2),
        "\tTopic: tp_re_01\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0"
    );
}

#[test]
fn reassignment_completion_tells_the_old_replica_to_stop() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0]]))
        .unwrap();
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), Some(vec![1]))]);
    c.commit(&res.records);
    let part = c.partition("t", 0);
    let topic_id = c.image.topic("t").unwrap().id;
    let res = c.controller.alter_partition(&AlterPartitionRequest {
        broker_id: 0,
        broker_epoch: c.image.broker(0).unwrap().epoch,
        partitions: vec![AlterPartitionData {
            topic_id,
            partition: 0,
            leader_epoch: part.leader_epoch,
            new_isr: vec![0, 1],
            leader_recovery_state: LeaderRecoveryState::Recovered,
            partition_epoch: part.partition_epoch,
        }],
    });
    let delta = c.commit(&res.records);
    let stopped = delta.local_changes(0).stopped;
    assert_eq!(stopped.len(), 1);
    assert!(stopped[0].delete);
    let leaders = delta.local_changes(1).leaders;
    assert_eq!(leaders.len(), 1);
    assert!(leaders[0].role_changed);
}

/// Seed section 五: raise the replication factor of tp_re_02 from 1 to 2 by reassignment.
#[test]
fn seed_increase_replication_factor() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.create(CreatableTopic::new("tp_re_02").with_assignment(vec![vec![1], vec![0], vec![1]]))
        .unwrap();
    let plan = vec![
        (tp("tp_re_02", 0), Some(vec![0, 1])),
        (tp("tp_re_02", 1), Some(vec![0, 1])),
        (tp("tp_re_02", 2), Some(vec![1, 0])),
    ];
    let res = c.controller.alter_partition_reassignments(&plan);
    c.commit(&res.records);
    assert_eq!(c.partition("tp_re_02", 0).adding_replicas, vec![0]);
    assert!(c.partition("tp_re_02", 0).removing_replicas.is_empty());
    for p in 0..3 {
        let leader = c.partition("tp_re_02", p).leader;
        let other = 1 - leader;
        c.alter_isr("tp_re_02", p, vec![leader, other]).unwrap();
    }
    let summary = describe_topic(&c.image, "tp_re_02").unwrap();
    assert_eq!(summary.replication_factor, 2);
    let lines: Vec<String> = summary.partitions.iter().map(|p| p.to_string()).collect();
    assert_eq!(
        lines,
        vec![
            "\tTopic: tp_re_02\tPartition: 0\tLeader: 1\tReplicas: 0,1\tIsr: 1,0",
            "\tTopic: tp_re_02\tPartition: 1\tLeader: 0\tReplicas: 0,1\tIsr: 0,1",
            "\tTopic: tp_re_02\tPartition: 2\tLeader: 1\tReplicas: 1,0\tIsr: 1,0",
        ]
    );
}

#[test]
fn reassignment_cancel_and_errors() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1]]))
        .unwrap();
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), None)]);
    assert_eq!(
        code(&res.response[0].1),
        ResponseError::NoReassignmentInProgress
    );
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), Some(vec![1, 2]))]);
    c.commit(&res.records);
    assert_eq!(c.partition("t", 0).replicas, vec![1, 2, 0]);
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), None)]);
    assert!(res.response[0].1.is_ok());
    c.commit(&res.records);
    let p = c.partition("t", 0);
    // As in Kafka, the replica set is restored in the merged order (targets first), so the
    // preferred leader may differ from before the reassignment.
    assert_eq!(
        (p.replicas, p.adding_replicas, p.removing_replicas, p.isr),
        (vec![1, 0], vec![], vec![], vec![0, 1])
    );
    assert_eq!(p.leader, 0, "the leader stays");
    let bad = vec![
        (tp("t", 0), Some(vec![])),
        (tp("t", 0), Some(vec![1, 1])),
        (tp("t", 0), Some(vec![1, 9])),
    ];
    let res = c.controller.alter_partition_reassignments(&bad);
    assert!(res
        .response
        .iter()
        .all(|r| code(&r.1) == ResponseError::InvalidReplicaAssignment));
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 9), Some(vec![0])), (tp("x", 0), Some(vec![0]))]);
    assert!(res
        .response
        .iter()
        .all(|r| code(&r.1) == ResponseError::UnknownTopicOrPartition));
    assert!(res.records.is_empty());
}

#[test]
fn removing_a_replica_completes_at_once_and_bumps_the_leader_epoch() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1, 2]]))
        .unwrap();
    let before = c.partition("t", 0);
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), Some(vec![0, 1]))]);
    let delta = c.commit(&res.records);
    let after = c.partition("t", 0);
    assert_eq!(
        (after.replicas.clone(), after.isr.clone(), after.leader),
        (vec![0, 1], vec![0, 1], 0)
    );
    assert_eq!(
        after.leader_epoch,
        before.leader_epoch + 1,
        "removed replicas are fenced"
    );
    assert_eq!(delta.local_changes(2).stopped.len(), 1);
}

#[test]
fn moving_the_leader_away_elects_a_new_one_on_completion() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1]]))
        .unwrap();
    // Target [1]: nothing to add, so it completes immediately and 1 takes over.
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), Some(vec![1]))]);
    c.commit(&res.records);
    let p = c.partition("t", 0);
    assert_eq!((p.leader, p.replicas, p.isr), (1, vec![1], vec![1]));
}

#[test]
fn automatic_leader_rebalance_respects_the_imbalance_percentage() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    // Broker 0 is the preferred leader of 10 partitions.
    c.create(CreatableTopic::new("t").with_assignment((0..10).map(|_| vec![0, 1]).collect()))
        .unwrap();
    c.advance(10_000, &[1]);
    c.register(0, None, 9);
    c.heartbeat(0, false);
    for p in 0..10 {
        c.alter_isr("t", p, vec![1, 0]).unwrap();
    }
    assert!((0..10).all(|p| c.partition("t", p).leader == 1));
    let records = c.controller.rebalance_leaders();
    c.commit(&records);
    assert!(
        (0..10).all(|p| c.partition("t", p).leader == 0),
        "100% imbalance > 10%"
    );
    // One partition of ten off its preferred leader is exactly 10%: left alone.
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), Some(vec![1, 0]))]);
    c.commit(&res.records);
    let res = c
        .controller
        .elect_leaders(ElectionType::Preferred, Some(&[tp("t", 0)]));
    c.commit(&res.records);
    let res = c
        .controller
        .alter_partition_reassignments(&[(tp("t", 0), Some(vec![0, 1]))]);
    c.commit(&res.records);
    assert_eq!(c.partition("t", 0).leader, 1);
    assert!(c.controller.rebalance_leaders().is_empty());
    // Disabled: nothing happens whatever the imbalance.
    let mut off = Cluster::new(&[("node.id", "0"), ("auto.leader.rebalance.enable", "false")]);
    off.add_broker(0, None);
    off.add_broker(1, None);
    off.create(CreatableTopic::new("t").with_assignment(vec![vec![0, 1]]))
        .unwrap();
    off.advance(10_000, &[1]);
    off.register(0, None, 9);
    off.heartbeat(0, false);
    off.alter_isr("t", 0, vec![1, 0]).unwrap();
    assert!(off.controller.rebalance_leaders().is_empty());
}

#[test]
fn controlled_shutdown_moves_leaderships_away_before_the_broker_stops() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_layout(6, 3))
        .expect("created");
    let led_by_0 = (0..6).filter(|&p| c.partition("t", p).leader == 0).count();
    assert!(led_by_0 > 0, "broker 0 leads something before");
    let res = c.send_heartbeat(0, false, true);
    let reply = res.response.expect("accepted");
    assert!(reply.should_shut_down && reply.is_fenced);
    c.commit(&res.records);
    for p in 0..6 {
        let part = c.partition("t", p);
        assert_ne!(
            part.leader, 0,
            "partition {p} still led by the stopping broker"
        );
        assert!(!part.isr.contains(&0), "partition {p} keeps it in the ISR");
    }
    assert!(c.image.broker(0).unwrap().fenced);
    // Asking again (a retried heartbeat) changes nothing more.
    let again = c.send_heartbeat(0, false, true);
    assert!(again.records.is_empty());
    assert!(again.response.expect("accepted").should_shut_down);
}

/// The broker's periodic heartbeat can cross its controlled-shutdown request and be answered
/// after it (found by the e2e suite: a stopped node was back in an ISR). The ask stands: that
/// heartbeat neither unfences the broker nor lets a leader take it back into an ISR, until the
/// broker registers again.
#[test]
fn a_heartbeat_after_a_controlled_shutdown_request_does_not_take_it_back() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("t").with_assignment(vec![vec![1, 0, 2]]))
        .expect("created");
    let res = c.send_heartbeat(0, false, true);
    assert!(res.response.expect("accepted").should_shut_down);
    c.commit(&res.records);
    assert_eq!(c.partition("t", 0).isr, vec![1, 2]);
    // The periodic heartbeat, sent before the ask, answered after it.
    let reply = c.heartbeat(0, false);
    assert!(reply.is_fenced && reply.should_shut_down, "{reply:?}");
    assert!(c.image.broker(0).unwrap().fenced);
    // Its leader, which saw it caught up, cannot take it back into the ISR.
    assert_eq!(
        code(&c.alter_isr("t", 0, vec![1, 2, 0])),
        ResponseError::IneligibleReplica
    );
    assert_eq!(c.partition("t", 0).isr, vec![1, 2]);
    // Restarted (a new registration), it is unfenced by its first heartbeat as ever.
    c.register(0, None, 7);
    let reply = c.heartbeat(0, false);
    assert!(!reply.is_fenced && !reply.should_shut_down, "{reply:?}");
    c.alter_isr("t", 0, vec![1, 2, 0]).expect("back in the ISR");
}

#[test]
fn delta_between_two_images_matches_the_records_between_them() {
    let mut c = Cluster::with_brokers(&[0, 1, 2]);
    c.create(CreatableTopic::new("gone").with_layout(2, 2))
        .expect("created");
    c.create(CreatableTopic::new("stays").with_layout(3, 3))
        .expect("created");
    let before = c.image.clone();
    let mark = c.log.len();
    // Fence broker 1 (leaderships and ISRs change), delete a topic, create another.
    c.advance(10_000, &[0, 2]);
    let res = c.controller.delete_topics(&[TopicRef::Name("gone".into())]);
    c.commit(&res.records);
    c.create(CreatableTopic::new("new").with_layout(1, 2))
        .expect("created");
    let mut replayed = MetadataDelta::default();
    let mut image = before.clone();
    for r in &c.log[mark..] {
        replayed.merge(image.apply(r).expect("applies"));
    }
    let between = MetadataDelta::between(&before, &c.image);
    for broker in 0..3 {
        assert_eq!(
            between.local_changes(broker),
            replayed.local_changes(broker),
            "broker {broker}"
        );
    }
    assert_eq!(between.created_topics, replayed.created_topics);
    assert_eq!(between.deleted_topics, replayed.deleted_topics);
    assert_eq!(between.changed_brokers, replayed.changed_brokers);
}

#[test]
fn an_expired_session_is_fenced_at_the_next_tick_only_for_live_brokers() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    c.controller.expire_session(1);
    // Well within broker.session.timeout.ms, yet fenced: its process is known to be gone.
    c.now_ms += 1;
    let records = c.controller.tick(c.now_ms);
    c.commit(&records);
    assert!(c.image.broker(1).unwrap().fenced);
    assert!(!c.image.broker(0).unwrap().fenced);
    // Expiring an unknown or already fenced broker changes nothing.
    c.controller.expire_session(7);
    c.controller.expire_session(1);
    assert!(c.controller.tick(c.now_ms).is_empty());
}

#[test]
fn a_heartbeat_renews_its_session_on_arrival_and_a_late_turn_does_not_take_it_back() {
    let mut c = Cluster::with_brokers(&[0, 1]);
    let epoch = c.image.broker(1).unwrap().epoch;
    let arrived_first = c.now_ms;
    // Broker 1's heartbeats arrive while a write waits for the quorum: each renews the session
    // as it arrives, though its turn on the write path has not come.
    for _ in 0..2 {
        c.now_ms += 8_000;
        c.controller.renew_session(1, epoch, c.now_ms);
    }
    // A registration the heartbeat does not name is not renewed.
    c.controller.renew_session(0, epoch + 100, c.now_ms);
    c.controller.renew_session(9, 1, c.now_ms);
    c.now_ms += 1_000;
    // The quorum is back: 17 s after broker 0's last heartbeat, 1 s after broker 1's.
    let records = c.controller.tick(c.now_ms);
    c.commit(&records);
    assert!(c.image.broker(0).unwrap().fenced);
    assert!(!c.image.broker(1).unwrap().fenced);
    // The first heartbeat's turn on the write path comes last; it must not move the session
    // back to when it arrived.
    let late = c.controller.broker_heartbeat(
        &BrokerHeartbeat {
            broker_id: 1,
            broker_epoch: epoch,
            want_fence: false,
            want_shut_down: false,
        },
        arrived_first,
    );
    assert!(late.response.is_ok());
    c.now_ms += 7_000;
    assert!(
        c.controller.tick(c.now_ms).is_empty(),
        "8 s since broker 1's last heartbeat"
    );
    c.now_ms += 2_000;
    let records = c.controller.tick(c.now_ms);
    c.commit(&records);
    assert!(c.image.broker(1).unwrap().fenced);
}
