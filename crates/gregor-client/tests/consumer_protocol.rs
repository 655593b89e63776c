//! gregor-client's Consumer with `group.protocol=consumer` (KIP-848) against a real Gregor
//! broker process: the coordinator assigns, the members reconcile through
//! ConsumerGroupHeartbeat. Members split the partitions, one closes and the others take its
//! share, and at no moment do two members own a partition (as their listeners see it);
//! committed offsets are where the next owner resumes.
//!
//! They need `target/debug/gregor`: run `cargo build -p gregor-cli` first.

use std::collections::BTreeMap;
use std::net::TcpListener;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use gregor_client::admin::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::{
    AutoOffsetReset, GroupProtocol, RebalanceContext, RebalanceListener,
};
use gregor_client::{
    Admin, ClientConfig, Consumer, ConsumerConfig, Producer, ProducerConfig, ProducerRecord,
    TopicPartition,
};
use tokio::sync::watch;
use tokio::task::JoinHandle;

mod common;
use common::gregor_binary;

/// A broker with fast KIP-848 timings (heartbeats every 300 ms); killed when dropped.
struct Broker {
    child: Child,
    port: u16,
    _data: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        let port = TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let data = tempfile::tempdir().expect("scratch dir");
        let mut cmd = Command::new(gregor_binary());
        cmd.arg("broker")
            .arg("--listeners")
            .arg(format!("PLAINTEXT://127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(data.path());
        for o in [
            "group.consumer.session.timeout.ms=6000",
            "group.consumer.min.session.timeout.ms=6000",
            "group.consumer.heartbeat.interval.ms=300",
            "group.consumer.min.heartbeat.interval.ms=300",
        ] {
            cmd.args(["--override", o]);
        }
        let child = cmd
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("gregor broker starts");
        Broker {
            child,
            port,
            _data: data,
        }
    }

    fn client_config(&self) -> ClientConfig {
        let mut c = ClientConfig::new(&format!("127.0.0.1:{}", self.port)).unwrap();
        c.connect_timeout = Duration::from_secs(20);
        c.api_timeout = Duration::from_secs(20);
        c.request_timeout = Duration::from_secs(10);
        c
    }

    async fn create_topic(&self, name: &str, partitions: i32) {
        let admin = Admin::connect(self.client_config()).await.unwrap();
        let created = admin
            .create_topics(
                vec![NewTopic {
                    name: name.into(),
                    num_partitions: Some(partitions),
                    replication_factor: Some(1),
                    ..Default::default()
                }],
                CreateTopicsOptions::default(),
            )
            .await
            .unwrap();
        assert!(created[0].1.is_ok(), "{created:?}");
    }

    async fn consumer(&self, group: &str, assignor: &str, listener: Tracker) -> Consumer {
        let mut c = ConsumerConfig::new(&format!("127.0.0.1:{}", self.port), group).unwrap();
        c.client = self.client_config();
        c.group_protocol = GroupProtocol::Consumer;
        c.group_remote_assignor = Some(assignor.to_string());
        c.max_poll_interval = Duration::from_secs(20);
        c.auto_offset_reset = AutoOffsetReset::Earliest;
        c.enable_auto_commit = true;
        c.auto_commit_interval = Duration::from_millis(200);
        c.fetch_max_wait = Duration::from_millis(100);
        let mut consumer = Consumer::new(c).await.unwrap();
        consumer.set_rebalance_listener(Box::new(listener));
        consumer
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Partition owners across members, from the listener callbacks, and every violation seen:
/// a partition assigned while another member owns it, or an epoch going backwards.
#[derive(Clone)]
struct Tracker {
    name: String,
    owners: Arc<Mutex<BTreeMap<TopicPartition, String>>>,
    violations: Arc<Mutex<Vec<String>>>,
    last_epoch: Arc<Mutex<i32>>,
    lost: Arc<Mutex<usize>>,
}

impl Tracker {
    fn new(name: &str, owners: &Tracker) -> Tracker {
        Tracker {
            name: name.into(),
            owners: owners.owners.clone(),
            violations: owners.violations.clone(),
            last_epoch: Arc::new(Mutex::new(0)),
            lost: owners.lost.clone(),
        }
    }

    fn root() -> Tracker {
        Tracker {
            name: String::new(),
            owners: Arc::default(),
            violations: Arc::default(),
            last_epoch: Arc::default(),
            lost: Arc::default(),
        }
    }

    fn owned_by(&self, name: &str) -> usize {
        let owners = self.owners.lock().unwrap();
        owners.values().filter(|o| *o == name).count()
    }

    fn release(&self, partitions: &[TopicPartition]) {
        let mut owners = self.owners.lock().unwrap();
        for tp in partitions {
            if owners.get(tp) == Some(&self.name) {
                owners.remove(tp);
            }
        }
    }
}

impl RebalanceListener for Tracker {
    fn on_partitions_revoked(&mut self, partitions: &[TopicPartition], _: &RebalanceContext) {
        self.release(partitions);
    }
    fn on_partitions_assigned(&mut self, partitions: &[TopicPartition], ctx: &RebalanceContext) {
        let mut last = self.last_epoch.lock().unwrap();
        if ctx.generation < *last {
            self.violations.lock().unwrap().push(format!(
                "{}: epoch went back from {} to {}",
                self.name, *last, ctx.generation
            ));
        }
        *last = ctx.generation;
        let mut owners = self.owners.lock().unwrap();
        for tp in partitions {
            if let Some(other) = owners.insert(tp.clone(), self.name.clone()) {
                if other != self.name {
                    self.violations.lock().unwrap().push(format!(
                        "{tp} given to {} while {other} owned it",
                        self.name
                    ));
                }
            }
        }
    }
    fn on_partitions_lost(&mut self, partitions: &[TopicPartition], _: &RebalanceContext) {
        *self.lost.lock().unwrap() += partitions.len();
        self.release(partitions);
    }
}

/// A member polling in its own task until told to stop; counts the records it got.
fn run_member(
    mut consumer: Consumer,
    mut stop: watch::Receiver<bool>,
    seen: Arc<Mutex<BTreeMap<(i32, i64), usize>>>,
) -> JoinHandle<Consumer> {
    tokio::spawn(async move {
        while !*stop.borrow_and_update() {
            for r in consumer.poll(Duration::from_millis(100)).await.unwrap() {
                *seen
                    .lock()
                    .unwrap()
                    .entry((r.partition, r.offset))
                    .or_default() += 1;
            }
        }
        consumer
    })
}

async fn wait_until(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(secs);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn produce(broker: &Broker, topic: &str, partitions: i32, per_partition: i64) {
    let mut c = ProducerConfig::new(&format!("127.0.0.1:{}", broker.port)).unwrap();
    c.client = broker.client_config();
    let producer = Producer::connect(c).await.unwrap();
    let mut acks = Vec::new();
    for p in 0..partitions {
        for i in 0..per_partition {
            let r = ProducerRecord::new(topic)
                .value(format!("{p}-{i}"))
                .partition(p);
            acks.push(producer.send(r).await.unwrap());
        }
    }
    for a in acks {
        a.await.unwrap();
    }
    producer.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn members_split_hand_over_on_close_and_resume_from_commits() {
    let broker = Broker::start();
    let (topic, n) = ("kip848", 6);
    broker.create_topic(topic, n).await;
    produce(&broker, topic, n, 20).await;
    let root = Tracker::root();
    let seen = Arc::new(Mutex::new(BTreeMap::new()));
    let (stop_tx, stop_rx) = watch::channel(false);
    let mut handles = Vec::new();
    for (name, assignor) in [("A", "uniform"), ("B", "uniform"), ("C", "uniform")] {
        let c = broker
            .consumer("kip848-g", assignor, Tracker::new(name, &root))
            .await;
        let mut c = c;
        c.subscribe(&[topic]).await.unwrap();
        handles.push(run_member(c, stop_rx.clone(), seen.clone()));
    }
    wait_until("three members with two partitions each", 30, || {
        ["A", "B", "C"].iter().all(|m| root.owned_by(m) == 2)
    })
    .await;
    wait_until("every record consumed", 30, || {
        seen.lock().unwrap().len() == (n as usize) * 20
    })
    .await;
    // A closes: it revokes (committing) and leaves; B and C take its share.
    stop_tx.send(true).unwrap();
    let mut members = Vec::new();
    for h in handles {
        members.push(h.await.unwrap());
    }
    let a = members.remove(0);
    a.close().await.unwrap();
    let (stop_tx, stop_rx) = watch::channel(false);
    let handles: Vec<_> = members
        .into_iter()
        .map(|c| run_member(c, stop_rx.clone(), seen.clone()))
        .collect();
    wait_until("B and C own everything", 30, || {
        root.owned_by("A") == 0 && root.owned_by("B") + root.owned_by("C") == n as usize
    })
    .await;
    produce(&broker, topic, n, 5).await;
    wait_until("the new records consumed", 30, || {
        seen.lock().unwrap().len() == (n as usize) * 25
    })
    .await;
    stop_tx.send(true).unwrap();
    for h in handles {
        h.await.unwrap().close().await.unwrap();
    }
    assert!(
        root.violations.lock().unwrap().is_empty(),
        "{:?}",
        root.violations.lock().unwrap()
    );
    assert_eq!(*root.lost.lock().unwrap(), 0, "no member was fenced");
    // Commits resumed: A's partitions went on where A committed, so nothing was consumed twice.
    let twice: Vec<_> = seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(k, _)| *k)
        .collect();
    assert!(twice.is_empty(), "consumed twice: {twice:?}");
    // A new member of the group starts at the committed offsets: the end of every partition.
    let tracker = Tracker::new("D", &root);
    let mut d = broker.consumer("kip848-g", "range", tracker).await;
    d.subscribe(&[topic]).await.unwrap();
    wait_until_polled("D owns everything", &mut d, || {
        root.owned_by("D") == n as usize
    })
    .await;
    for p in 0..n {
        let pos = d.position(&TopicPartition::new(topic, p)).await.unwrap();
        assert_eq!(pos, 25, "partition {p}");
    }
    d.close().await.unwrap();
}

async fn wait_until_polled(what: &str, c: &mut Consumer, mut cond: impl FnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !cond() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "timed out waiting for {what}"
        );
        let got = c.poll(Duration::from_millis(100)).await.unwrap();
        assert!(got.is_empty(), "{} records after the commits", got.len());
    }
}
