//! A small cluster harness: a controller plus one broker-side image, with records "committed"
//! by replaying them into both (what the broker shell does with the metadata log).

#![allow(dead_code)]

use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::*;

pub struct Cluster {
    pub controller: Controller,
    /// A broker's image, built only from committed records.
    pub image: MetadataImage,
    /// Every committed record, in order.
    pub log: Vec<MetadataRecord>,
    pub now_ms: i64,
}

impl Cluster {
    pub fn new(static_pairs: &[(&str, &str)]) -> Self {
        let cfg = StaticBrokerConfig::from_pairs(static_pairs.iter().copied())
            .expect("test config is valid");
        Cluster {
            controller: Controller::new(cfg, 42),
            image: MetadataImage::new(),
            log: Vec::new(),
            now_ms: 1_000,
        }
    }

    /// A cluster with unfenced brokers `ids`, without racks. The scenarios are timed against
    /// Kafka's 9 s session timeout.
    pub fn with_brokers(ids: &[BrokerId]) -> Self {
        let mut c = Cluster::new(&[("node.id", "0"), ("broker.session.timeout.ms", "9000")]);
        for &id in ids {
            c.add_broker(id, None);
        }
        c
    }

    /// A cluster with unfenced brokers and racks.
    pub fn with_racks(brokers: &[(BrokerId, &str)]) -> Self {
        let mut c = Cluster::new(&[("node.id", "0"), ("broker.session.timeout.ms", "9000")]);
        for &(id, rack) in brokers {
            c.add_broker(id, Some(rack));
        }
        c
    }

    pub fn commit(&mut self, records: &[MetadataRecord]) -> MetadataDelta {
        self.controller
            .replay_all(records)
            .expect("controller records apply");
        let delta = self.image.apply_all(records).expect("records apply");
        self.log.extend_from_slice(records);
        assert_eq!(self.controller.image(), &self.image);
        delta
    }

    pub fn register(&mut self, id: BrokerId, rack: Option<&str>, incarnation: u128) -> i64 {
        let req = BrokerRegistrationRequest {
            broker_id: id,
            incarnation_id: Uuid::from_u128(incarnation),
            endpoints: vec![BrokerEndpoint {
                name: "PLAINTEXT".into(),
                host: "localhost".into(),
                port: 9092 + id as u16,
                security_protocol: 0,
            }],
            rack: rack.map(str::to_string),
        };
        let res = self.controller.register_broker(&req, self.now_ms);
        let epoch = res.response.expect("registration succeeds");
        self.commit(&res.records);
        epoch
    }

    /// A heartbeat from `id` in its current registration, its records not committed.
    pub fn send_heartbeat(
        &mut self,
        id: BrokerId,
        want_fence: bool,
        want_shut_down: bool,
    ) -> ControllerResult<Result<BrokerHeartbeatReply, ApiError>> {
        let epoch = self.image.broker(id).expect("registered").epoch;
        self.controller.broker_heartbeat(
            &BrokerHeartbeat {
                broker_id: id,
                broker_epoch: epoch,
                want_fence,
                want_shut_down,
            },
            self.now_ms,
        )
    }

    pub fn heartbeat(&mut self, id: BrokerId, want_fence: bool) -> BrokerHeartbeatReply {
        let res = self.send_heartbeat(id, want_fence, false);
        let reply = res.response.expect("heartbeat accepted");
        self.commit(&res.records);
        reply
    }

    pub fn add_broker(&mut self, id: BrokerId, rack: Option<&str>) {
        self.register(id, rack, 1000 + id as u128);
        let reply = self.heartbeat(id, false);
        assert!(!reply.is_fenced);
    }

    /// Advance time, heartbeating the given brokers, then let the controller fence the rest.
    pub fn advance(&mut self, ms: i64, alive: &[BrokerId]) -> MetadataDelta {
        self.now_ms += ms;
        for &b in alive {
            self.heartbeat(b, false);
        }
        let records = self.controller.tick(self.now_ms);
        self.commit(&records)
    }

    pub fn create(&mut self, topic: CreatableTopic) -> Result<CreatedTopic, ApiError> {
        let res = self.controller.create_topics(&CreateTopicsRequest {
            topics: vec![topic],
            validate_only: false,
        });
        self.commit(&res.records);
        res.response.into_iter().next().expect("one result").result
    }

    pub fn partition(&self, topic: &str, p: i32) -> PartitionRegistration {
        self.image
            .partition(&TopicPartition::new(topic, p))
            .expect("partition exists")
            .clone()
    }

    /// The leader sends AlterPartition with `new_isr`.
    pub fn alter_isr(
        &mut self,
        topic: &str,
        p: i32,
        new_isr: Vec<BrokerId>,
    ) -> Result<controller_reply::Reply, ApiError> {
        let part = self.partition(topic, p);
        let topic_id = self.image.topic(topic).expect("topic").id;
        let leader = part.leader;
        let epoch = self.image.broker(leader).expect("leader registered").epoch;
        let res = self.controller.alter_partition(&AlterPartitionRequest {
            broker_id: leader,
            broker_epoch: epoch,
            partitions: vec![AlterPartitionData {
                topic_id,
                partition: p,
                leader_epoch: part.leader_epoch,
                new_isr,
                leader_recovery_state: LeaderRecoveryState::Recovered,
                partition_epoch: part.partition_epoch,
            }],
        });
        self.commit(&res.records);
        let (_, r) = res
            .response
            .expect("broker epoch valid")
            .into_iter()
            .next()
            .expect("one partition");
        r
    }
}

pub mod controller_reply {
    pub type Reply = gregor_meta::PartitionStateReply;
}

pub fn code<T: std::fmt::Debug>(r: &Result<T, ApiError>) -> ResponseError {
    match r {
        Ok(v) => panic!("expected an error, got {v:?}"),
        Err(e) => e.code,
    }
}
