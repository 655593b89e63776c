//! The data workload of a replicated run: an idempotent `acks=all` producer, an `acks=1`
//! producer and a consumer, speaking Kafka (gregor-client's pipelined `Connection` over
//! turmoil's TCP) to the real brokers, following leaders through Metadata requests as clients
//! do. Everything they were told is recorded for the checker.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Buf, Bytes};
use gregor_client::connection::Connection;
use gregor_client::producer::wire::{encode_batch, ProducerIdentity, RecordData};
use gregor_meta::SplitMix64;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    BrokerId, CreateTopicsRequest, FetchRequest, InitProducerIdRequest, MetadataRequest,
    ProduceRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{Compression, RecordBatchDecoder};
use kafka_protocol::ResponseError;

use crate::broker_node::client_address;
use crate::node::now_ms;
use crate::ops::{Op, Reply};
use crate::workload::{History, OpRecord};

pub const TOPIC: &str = "data";
pub const PARTITIONS: i32 = 2;

/// A batch a producer had acknowledged.
#[derive(Debug, Clone)]
pub struct Acked {
    pub partition: i32,
    /// The node that answered (the leader the producer sent to).
    pub leader: i32,
    pub base_offset: i64,
    pub values: Vec<String>,
    pub at_ms: u64,
}

/// One record a consumer fetch returned.
#[derive(Debug, Clone)]
pub struct Read {
    pub partition: i32,
    pub offset: i64,
    pub value: String,
    /// The high watermark the same response reported.
    pub high_watermark: i64,
    /// Whether it directly follows the fetch offset or the record before it in the response.
    pub contiguous: bool,
    /// The final pass after the faults (a fresh read of the whole log).
    pub final_pass: bool,
    pub at_ms: u64,
}

/// A high watermark one consumer fetch reported, with the leader epoch the fetch named (the
/// leader checks it, so the answer comes from that epoch).
#[derive(Debug, Clone)]
pub struct HwSeen {
    pub partition: i32,
    pub leader: i32,
    pub leader_epoch: i32,
    pub high_watermark: i64,
    pub at_ms: u64,
}

/// A data partition's leader epoch as the driver first saw it in some node's metadata.
#[derive(Debug, Clone)]
pub struct EpochSeen {
    pub partition: i32,
    pub leader_epoch: i32,
    pub leader: i32,
    pub at_ms: u64,
}

#[derive(Debug, Default)]
pub struct DataHistory {
    pub acked_all: Vec<Acked>,
    pub acked_one: Vec<Acked>,
    /// Every value any producer sent (acknowledged or not).
    pub sent: std::collections::BTreeSet<String>,
    pub reads: Vec<Read>,
    pub hws: Vec<HwSeen>,
    /// Each leader epoch of a data partition, when some node's metadata first showed it.
    pub leader_epochs: Vec<EpochSeen>,
    /// The idempotent producer's first acknowledgement of a batch sent after the faults.
    pub first_ack_after_faults: Option<u64>,
    /// When the final pass had read past every acknowledged `acks=all` record.
    pub final_pass_done: Option<u64>,
    pub producers_done: bool,
    /// `--admin` runs: a reassignment that had not completed within the bound after the
    /// faults (what the partitions' replicas were instead).
    pub reassignment_stuck: Option<String>,
    /// `--groups` runs: what the consumer group's members owned, read and committed.
    pub group: crate::group::GroupHistory,
    /// `--topic-admin` runs: side topics that did not settle as acknowledged (`topics.rs`).
    pub topic_violations: Vec<crate::checker::Violation>,
}

impl DataHistory {
    /// The offset past every acknowledged `acks=all` record of `partition` (0 if none).
    pub fn acked_all_end(&self, partition: i32) -> i64 {
        self.acked_all
            .iter()
            .filter(|a| a.partition == partition)
            .map(|a| a.base_offset + a.values.len() as i64)
            .max()
            .unwrap_or(0)
    }
}

const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Connections to the nodes and what Metadata said about the topic's leaders.
pub(crate) struct Links {
    nodes: usize,
    conns: Vec<Option<Connection>>,
    /// partition -> (leader, leader epoch)
    leaders: BTreeMap<i32, (i32, i32)>,
    next_metadata_node: usize,
    name: &'static str,
}

impl Links {
    pub(crate) fn new(nodes: usize, name: &'static str) -> Links {
        Links {
            nodes,
            conns: (0..nodes).map(|_| None).collect(),
            leaders: BTreeMap::new(),
            next_metadata_node: 0,
            name,
        }
    }

    pub(crate) async fn conn(&mut self, node: usize) -> Option<&Connection> {
        if self.conns[node].as_ref().is_some_and(|c| c.is_closed()) {
            self.conns[node] = None;
        }
        if self.conns[node].is_none() {
            let addr = client_address(node);
            let stream = tokio::time::timeout(
                REQUEST_TIMEOUT,
                turmoil::net::TcpStream::connect(addr.as_str()),
            )
            .await
            .ok()?
            .ok()?;
            let c = Connection::over(
                stream,
                format!("n{node}"),
                self.name,
                REQUEST_TIMEOUT,
                REQUEST_TIMEOUT,
            )
            .await
            .ok()?;
            self.conns[node] = Some(c);
        }
        self.conns[node].as_ref()
    }

    pub(crate) fn drop_conn(&mut self, node: usize) {
        self.conns[node] = None;
    }

    /// Asks the next node for the topic's leaders.
    async fn refresh(&mut self) {
        let node = self.next_metadata_node % self.nodes;
        self.next_metadata_node += 1;
        let mut req = MetadataRequest::default();
        let mut t = MetadataRequestTopic::default();
        t.name = Some(TopicName(StrBytes::from_static_str(TOPIC)));
        req.topics = Some(vec![t]);
        let Some(c) = self.conn(node).await else {
            return;
        };
        let Ok(resp) = c.send(&req, 9).await else {
            self.drop_conn(node);
            return;
        };
        for t in resp.topics {
            for p in t.partitions {
                if p.error_code == 0 && p.leader_id.0 >= 0 {
                    let known = self.leaders.get(&p.partition_index).map_or(-1, |l| l.1);
                    // A node behind on metadata may name an older leader.
                    if p.leader_epoch >= known {
                        self.leaders
                            .insert(p.partition_index, (p.leader_id.0, p.leader_epoch));
                    }
                }
            }
        }
    }

    fn leader(&self, partition: i32) -> Option<(usize, i32)> {
        self.leaders.get(&partition).and_then(|&(l, e)| {
            usize::try_from(l)
                .ok()
                .filter(|&l| l < self.nodes)
                .map(|l| (l, e))
        })
    }
}

pub(crate) async fn sleep_ms(ms: u64) {
    tokio::time::sleep(Duration::from_millis(ms)).await;
}

/// Creates the topic (RF 3, min.insync.replicas=2), retrying through any node.
async fn create_topic(history: &Rc<RefCell<History>>, nodes: usize) {
    let mut links = Links::new(nodes, "sim-admin");
    let mut node = 0;
    // Any failed attempt may still have created the topic (a lost answer, a timeout, a
    // controller that lost its leadership mid-write): a later TopicAlreadyExists is then no
    // wrong answer.
    let mut indeterminate = false;
    loop {
        let mut req = CreateTopicsRequest::default();
        let mut t = CreatableTopic::default();
        t.name = TopicName(StrBytes::from_static_str(TOPIC));
        t.num_partitions = PARTITIONS;
        t.replication_factor = 3;
        let mut c = CreatableTopicConfig::default();
        c.name = StrBytes::from_static_str("min.insync.replicas");
        c.value = Some(StrBytes::from_static_str("2"));
        t.configs = vec![c];
        req.topics = vec![t];
        req.timeout_ms = 5_000;
        if let Some(conn) = links.conn(node).await {
            // v7: the answer names the topic's id, which the checker finds in every image.
            match conn.send(&req, 7).await {
                Ok(resp) => {
                    let (code, id) = resp
                        .topics
                        .first()
                        .map_or((-1, 0), |t| (t.error_code, t.topic_id.as_u128()));
                    history
                        .borrow_mut()
                        .event(format!("create {TOPIC} via n{node}: code {code}"));
                    let reply = match code {
                        0 => Some(Ok((id, PARTITIONS))),
                        c if c == ResponseError::TopicAlreadyExists.code() => {
                            Some(Err("TopicAlreadyExists".to_string()))
                        }
                        _ => None,
                    };
                    if let Some(reply) = reply {
                        record_create(history, reply, indeterminate);
                        return;
                    }
                }
                Err(_) => links.drop_conn(node),
            }
        }
        indeterminate = true;
        node = (node + 1) % nodes;
        sleep_ms(200).await;
    }
}

/// The data topic's acknowledged creation, as an operation of the history: the checker finds
/// it (its id, its partition count) in every node's final image (`acked-write-lost`), and a
/// TopicAlreadyExists no earlier attempt explains is a `wrong-answer`.
fn record_create(
    history: &Rc<RefCell<History>>,
    reply: Result<(u128, i32), String>,
    indeterminate: bool,
) {
    let mut h = history.borrow_mut();
    let id = h.ops.len();
    h.ops.push(OpRecord {
        id,
        op: Op::CreateTopic {
            name: TOPIC.to_string(),
            partitions: PARTITIONS,
            rf: 3,
        },
        end_ms: now_ms() as u64,
        indeterminate,
        reply: Some(Reply::Created(reply)),
    });
}

/// The idempotent `acks=all` producer (`all == true`) or the plain `acks=1` one.
async fn produce(history: Rc<RefCell<History>>, nodes: usize, seed: u64, all: bool) {
    let name = if all {
        "sim-producer-all"
    } else {
        "sim-producer-one"
    };
    let tag = if all { "a" } else { "b" };
    let mut rng = SplitMix64::new(seed ^ if all { 0xa11 } else { 0x0e1 });
    let mut links = Links::new(nodes, name);
    let mut identity: Option<ProducerIdentity> = None;
    let mut sequences: BTreeMap<i32, i32> = BTreeMap::new();
    let mut counter = 0u64;
    let mut pending: Option<(i32, Vec<String>, i32)> = None;
    let mut acked_after_faults = false;
    while !acked_after_faults {
        if all && identity.is_none() {
            let node = rng.next_below(nodes);
            let mut req = InitProducerIdRequest::default();
            req.transactional_id = None;
            req.transaction_timeout_ms = 60_000;
            req.producer_id = kafka_protocol::messages::ProducerId(-1);
            req.producer_epoch = -1;
            if let Some(c) = links.conn(node).await {
                match c.send(&req, 4).await {
                    Ok(r) if r.error_code == 0 => {
                        identity = Some(ProducerIdentity {
                            producer_id: r.producer_id.0,
                            epoch: r.producer_epoch,
                        });
                        sequences.clear();
                        history
                            .borrow_mut()
                            .event(format!("{tag} producer id {}", r.producer_id.0));
                    }
                    Ok(r) => history.borrow_mut().event(format!(
                        "{tag} InitProducerId n{node}: error {}",
                        r.error_code
                    )),
                    Err(e) => {
                        history
                            .borrow_mut()
                            .event(format!("{tag} InitProducerId n{node}: {e}"));
                        links.drop_conn(node);
                    }
                }
            }
            if identity.is_none() {
                sleep_ms(100).await;
                continue;
            }
        }
        let sent_after_faults = history.borrow().faults_over;
        let (partition, values, base_sequence) = match pending.take() {
            Some(p) => p,
            None => {
                let partition = rng.next_below(PARTITIONS as usize) as i32;
                let n = 1 + rng.next_below(3);
                let values: Vec<String> = (0..n)
                    .map(|_| {
                        counter += 1;
                        format!("{tag}{partition}-{counter}")
                    })
                    .collect();
                let seq = *sequences.get(&partition).unwrap_or(&0);
                let mut h = history.borrow_mut();
                for v in &values {
                    h.data.sent.insert(v.clone());
                }
                (partition, values, seq)
            }
        };
        if links.leader(partition).is_none() {
            links.refresh().await;
        }
        let Some((leader, _)) = links.leader(partition) else {
            pending = all.then_some((partition, values, base_sequence));
            sleep_ms(50).await;
            continue;
        };
        let req = produce_request(
            TOPIC,
            partition,
            &values,
            if all { identity } else { None },
            base_sequence,
            if all { -1 } else { 1 },
        );
        let outcome = match links.conn(leader).await {
            Some(c) => c.send(&req, 9).await.map_err(|e| e.to_string()),
            None => Err("cannot connect".to_string()),
        };
        let result = outcome.and_then(|r| {
            r.responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .map(|p| (p.error_code, p.base_offset))
                .ok_or_else(|| "empty produce response".to_string())
        });
        match result {
            Ok((0, base_offset)) => {
                let at_ms = now_ms() as u64;
                let mut h = history.borrow_mut();
                h.event(format!(
                    "{tag} ack p{partition}@{base_offset} {values:?} from n{leader}"
                ));
                let acked = Acked {
                    partition,
                    leader: leader as i32,
                    base_offset,
                    values: values.clone(),
                    at_ms,
                };
                if all {
                    h.data.acked_all.push(acked);
                    sequences.insert(partition, base_sequence + values.len() as i32);
                } else {
                    h.data.acked_one.push(acked);
                }
                if sent_after_faults {
                    acked_after_faults = true;
                    if all {
                        h.data.first_ack_after_faults = Some(at_ms);
                    }
                }
            }
            Ok((code, _)) => {
                let e = ResponseError::try_from_code(code);
                history
                    .borrow_mut()
                    .event(format!("{tag} p{partition} n{leader} error {e:?}"));
                if all
                    && matches!(
                        e,
                        Some(
                            ResponseError::OutOfOrderSequenceNumber
                                | ResponseError::UnknownProducerId
                                | ResponseError::InvalidProducerEpoch
                        )
                    )
                {
                    // The producer's state is gone on the leader: start over with a new
                    // identity, as a producer resets after a fatal error.
                    identity = None;
                } else if all {
                    pending = Some((partition, values, base_sequence));
                }
                links.refresh().await;
                sleep_ms(50).await;
            }
            Err(e) => {
                history
                    .borrow_mut()
                    .event(format!("{tag} p{partition} n{leader} failed: {e}"));
                links.drop_conn(leader);
                if all {
                    // The outcome is unknown: the same batch again, with its sequence.
                    pending = Some((partition, values, base_sequence));
                }
                links.refresh().await;
                sleep_ms(50).await;
            }
        }
        sleep_ms(rng.next_below(40) as u64).await;
    }
}

/// A Produce request of one batch of `values` (no keys, timestamps now) to one partition.
pub(crate) fn produce_request(
    topic: &str,
    partition: i32,
    values: &[String],
    identity: Option<ProducerIdentity>,
    base_sequence: i32,
    acks: i16,
) -> ProduceRequest {
    let records: Vec<RecordData> = values
        .iter()
        .map(|v| RecordData {
            key: None,
            value: Some(Bytes::from(v.clone())),
            headers: Vec::new(),
            timestamp: now_ms(),
        })
        .collect();
    let batch = encode_batch(&records, identity, base_sequence, Compression::None)
        .expect("a small batch encodes");
    let mut req = ProduceRequest::default();
    req.acks = acks;
    req.timeout_ms = 2_000;
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_string(topic.to_string()));
    let mut p = PartitionProduceData::default();
    p.index = partition;
    p.records = Some(batch);
    t.partition_data = vec![p];
    req.topic_data = vec![t];
    req
}

/// Decodes the records of a fetch response's partition: (offset, value).
pub(crate) fn decode_records(mut bytes: Bytes) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    while bytes.len() >= 12 {
        let len = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let Ok(len) = usize::try_from(len) else {
            break;
        };
        if bytes.len() < 12 + len {
            break;
        }
        let mut batch = bytes.split_to(12 + len);
        let Ok(set) = RecordBatchDecoder::decode(&mut batch) else {
            out.push((-1, "<undecodable batch>".into()));
            break;
        };
        for r in set.records {
            let value = r
                .value
                .map(|mut v| String::from_utf8_lossy(&v.copy_to_bytes(v.len())).into_owned())
                .unwrap_or_default();
            out.push((r.offset, value));
        }
    }
    out
}

/// The consumer: reads both partitions from their leaders from offset 0 while the workload
/// runs, then a final pass from offset 0 again until it has read past every acknowledged
/// `acks=all` record.
async fn consume(history: Rc<RefCell<History>>, nodes: usize) {
    let mut links = Links::new(nodes, "sim-consumer");
    let mut next: BTreeMap<i32, i64> = (0..PARTITIONS).map(|p| (p, 0)).collect();
    let mut final_pass = false;
    loop {
        if !final_pass && history.borrow().data.producers_done {
            final_pass = true;
            next = (0..PARTITIONS).map(|p| (p, 0)).collect();
            history.borrow_mut().event("consumer final pass");
        }
        if final_pass {
            let h = history.borrow();
            let done = (0..PARTITIONS).all(|p| next[&p] >= h.data.acked_all_end(p));
            drop(h);
            if done {
                let now = now_ms() as u64;
                let mut h = history.borrow_mut();
                h.data.final_pass_done = Some(now);
                h.event("consumer final pass done");
                return;
            }
        }
        let mut progressed = false;
        for partition in 0..PARTITIONS {
            if links.leader(partition).is_none() {
                links.refresh().await;
            }
            let Some((leader, epoch)) = links.leader(partition) else {
                continue;
            };
            let offset = next[&partition];
            let mut req = FetchRequest::default();
            req.replica_id = BrokerId(-1);
            req.max_wait_ms = 100;
            req.min_bytes = 1;
            req.max_bytes = 1 << 20;
            let mut fp = FetchPartition::default();
            fp.partition = partition;
            fp.current_leader_epoch = epoch;
            fp.fetch_offset = offset;
            fp.log_start_offset = -1;
            fp.partition_max_bytes = 1 << 20;
            let mut ft = FetchTopic::default();
            ft.topic = TopicName(StrBytes::from_static_str(TOPIC));
            ft.partitions = vec![fp];
            req.topics = vec![ft];
            let resp = match links.conn(leader).await {
                Some(c) => c.send(&req, 12).await.ok(),
                None => None,
            };
            let Some(resp) = resp else {
                links.drop_conn(leader);
                links.refresh().await;
                continue;
            };
            let Some(pd) = resp
                .responses
                .first()
                .and_then(|t| t.partitions.first())
                .cloned()
            else {
                continue;
            };
            if pd.error_code != 0 {
                if pd.error_code == ResponseError::OffsetOutOfRange.code() {
                    history.borrow_mut().event(format!(
                        "consumer p{partition}@{offset} n{leader} epoch {epoch}: OFFSET_OUT_OF_RANGE"
                    ));
                }
                links.refresh().await;
                continue;
            }
            let at_ms = now_ms() as u64;
            let records = pd.records.map(decode_records).unwrap_or_default();
            let mut h = history.borrow_mut();
            h.data.hws.push(HwSeen {
                partition,
                leader: leader as i32,
                leader_epoch: epoch,
                high_watermark: pd.high_watermark,
                at_ms,
            });
            let mut expected = offset;
            for (o, value) in records {
                if o < offset {
                    continue;
                }
                h.data.reads.push(Read {
                    partition,
                    offset: o,
                    value,
                    high_watermark: pd.high_watermark,
                    contiguous: o == expected,
                    final_pass,
                    at_ms,
                });
                expected = o + 1;
                next.insert(partition, o + 1);
                progressed = true;
            }
        }
        if !progressed {
            sleep_ms(20).await;
        }
    }
}

/// The whole data workload: topic, producers and consumer. Sets `done` when the consumer's
/// final pass has read every acknowledged record (or never, which the driver's bound reports).
pub async fn run(
    history: Rc<RefCell<History>>,
    seed: u64,
    nodes: usize,
    admin: bool,
    group: Option<crate::group::GroupWorkload>,
    topic_admin: bool,
) -> turmoil::Result {
    create_topic(&history, nodes).await;
    let producers = async {
        tokio::join!(
            produce(history.clone(), nodes, seed, true),
            produce(history.clone(), nodes, seed, false)
        );
        let mut h = history.borrow_mut();
        h.data.producers_done = true;
        h.event("producers done");
    };
    let admin_ops = async {
        if admin {
            crate::admin::run(history.clone(), nodes, seed).await;
        }
    };
    let group = async {
        if let Some(workload) = group {
            crate::group::run(history.clone(), nodes, seed, workload).await;
        }
    };
    let topic_ops = async {
        if topic_admin {
            crate::topics::run(history.clone(), nodes, seed).await;
        }
    };
    tokio::join!(
        producers,
        consume(history.clone(), nodes),
        admin_ops,
        group,
        topic_ops
    );
    let mut h = history.borrow_mut();
    // The driver's liveness check: the first `acks=all` acknowledgement after the faults.
    h.final_write = Some((0, h.data.first_ack_after_faults));
    h.done = true;
    Ok(())
}
