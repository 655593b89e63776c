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

use crate::broker_node::{client_address, user_address};
use crate::history::{Acked, History, HwSeen, OpRecord, Read, PARTITIONS, TOPIC};
use crate::node::now_ms;
use crate::ops::{Op, Reply};

const REQUEST_TIMEOUT: Duration = Duration::from_secs(3);

/// Connections to the nodes and what Metadata said about the topic's leaders.
pub(crate) struct Links {
    nodes: usize,
    conns: Vec<Option<Connection>>,
    /// partition -> (leader, leader epoch)
    leaders: BTreeMap<i32, (i32, i32)>,
    next_metadata_node: usize,
    name: &'static str,
    /// `--acls`: connect as `User:u<user>` (its own port) instead of `User:ANONYMOUS`.
    user: Option<u16>,
    /// The topic whose leaders Metadata is asked for.
    topic: &'static str,
}

impl Links {
    pub(crate) fn new(nodes: usize, name: &'static str) -> Links {
        Links {
            nodes,
            conns: (0..nodes).map(|_| None).collect(),
            leaders: BTreeMap::new(),
            next_metadata_node: 0,
            name,
            user: None,
            topic: TOPIC,
        }
    }

    /// Connections following the leaders of `topic` instead of the data topic's.
    pub(crate) fn for_topic(nodes: usize, name: &'static str, topic: &'static str) -> Links {
        Links {
            topic,
            ..Links::new(nodes, name)
        }
    }

    /// Connections on which every request is `User:u<user>`'s.
    pub(crate) fn as_user(nodes: usize, name: &'static str, user: u16) -> Links {
        Links {
            user: Some(user),
            ..Links::new(nodes, name)
        }
    }

    pub(crate) async fn conn(&mut self, node: usize) -> Option<&Connection> {
        if self.conns[node].as_ref().is_some_and(|c| c.is_closed()) {
            self.conns[node] = None;
        }
        if self.conns[node].is_none() {
            let addr = match self.user {
                Some(user) => user_address(node, user),
                None => client_address(node),
            };
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
    pub(crate) async fn refresh(&mut self) {
        let node = self.next_metadata_node % self.nodes;
        self.next_metadata_node += 1;
        let mut req = MetadataRequest::default();
        let mut t = MetadataRequestTopic::default();
        t.name = Some(TopicName(StrBytes::from_static_str(self.topic)));
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

    pub(crate) fn leader(&self, partition: i32) -> Option<(usize, i32)> {
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
pub(crate) async fn create_topic(history: &Rc<RefCell<History>>, nodes: usize) {
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

/// A batch of one producer: its partition, values and base sequence.
struct Batch {
    partition: i32,
    values: Vec<String>,
    base_sequence: i32,
}

/// One producer's state across its batches.
struct Producer {
    history: Rc<RefCell<History>>,
    nodes: usize,
    /// `acks=all` and idempotent, or `acks=1`.
    all: bool,
    tag: &'static str,
    rng: SplitMix64,
    links: Links,
    identity: Option<ProducerIdentity>,
    sequences: BTreeMap<i32, i32>,
    counter: u64,
    /// A batch to send again (`acks=all`): its outcome is unknown or it was refused.
    pending: Option<Batch>,
}

/// The idempotent `acks=all` producer (`all == true`) or the plain `acks=1` one.
pub(crate) async fn produce(history: Rc<RefCell<History>>, nodes: usize, seed: u64, all: bool) {
    let name = if all {
        "sim-producer-all"
    } else {
        "sim-producer-one"
    };
    let mut p = Producer {
        history,
        nodes,
        all,
        tag: if all { "a" } else { "b" },
        rng: SplitMix64::new(seed ^ if all { 0xa11 } else { 0x0e1 }),
        links: Links::new(nodes, name),
        identity: None,
        sequences: BTreeMap::new(),
        counter: 0,
        pending: None,
    };
    let mut acked_after_faults = false;
    while !acked_after_faults {
        if p.all && p.identity.is_none() {
            p.init_producer_id().await;
            if p.identity.is_none() {
                sleep_ms(100).await;
                continue;
            }
        }
        let sent_after_faults = p.history.borrow().faults_over;
        let batch = match p.pending.take() {
            Some(b) => b,
            None => p.next_batch(),
        };
        if p.links.leader(batch.partition).is_none() {
            p.links.refresh().await;
        }
        let Some((leader, _)) = p.links.leader(batch.partition) else {
            p.pending = p.all.then_some(batch);
            sleep_ms(50).await;
            continue;
        };
        match p.send(leader, &batch).await {
            Ok((0, base_offset)) => {
                p.acked(leader, base_offset, &batch, sent_after_faults);
                acked_after_faults = sent_after_faults;
            }
            Ok((code, _)) => p.refused(leader, code, batch).await,
            Err(e) => p.failed(leader, &e, batch).await,
        }
        sleep_ms(p.rng.next_below(40) as u64).await;
    }
}

impl Producer {
    /// Asks a random node for a producer id and epoch (`acks=all`: idempotent).
    async fn init_producer_id(&mut self) {
        let tag = self.tag;
        let node = self.rng.next_below(self.nodes);
        let mut req = InitProducerIdRequest::default();
        req.transactional_id = None;
        req.transaction_timeout_ms = 60_000;
        req.producer_id = kafka_protocol::messages::ProducerId(-1);
        req.producer_epoch = -1;
        let Some(c) = self.links.conn(node).await else {
            return;
        };
        match c.send(&req, 4).await {
            Ok(r) if r.error_code == 0 => {
                self.identity = Some(ProducerIdentity {
                    producer_id: r.producer_id.0,
                    epoch: r.producer_epoch,
                });
                self.sequences.clear();
                self.history
                    .borrow_mut()
                    .event(format!("{tag} producer id {}", r.producer_id.0));
            }
            Ok(r) => self.history.borrow_mut().event(format!(
                "{tag} InitProducerId n{node}: error {}",
                r.error_code
            )),
            Err(e) => {
                self.history
                    .borrow_mut()
                    .event(format!("{tag} InitProducerId n{node}: {e}"));
                self.links.drop_conn(node);
            }
        }
    }

    /// A new batch of 1-3 values to a random partition, recorded as sent.
    fn next_batch(&mut self) -> Batch {
        let partition = self.rng.next_below(PARTITIONS as usize) as i32;
        let n = 1 + self.rng.next_below(3);
        let values: Vec<String> = (0..n)
            .map(|_| {
                self.counter += 1;
                format!("{}{partition}-{}", self.tag, self.counter)
            })
            .collect();
        let base_sequence = *self.sequences.get(&partition).unwrap_or(&0);
        let mut h = self.history.borrow_mut();
        for v in &values {
            h.data.sent.insert(v.clone());
        }
        Batch {
            partition,
            values,
            base_sequence,
        }
    }

    /// Sends the batch to `leader`: its error code and base offset, or why no answer came.
    async fn send(&mut self, leader: usize, batch: &Batch) -> Result<(i16, i64), String> {
        let req = produce_request(
            TOPIC,
            batch.partition,
            &batch.values,
            if self.all { self.identity } else { None },
            batch.base_sequence,
            if self.all { -1 } else { 1 },
        );
        let outcome = match self.links.conn(leader).await {
            Some(c) => c.send(&req, 9).await.map_err(|e| e.to_string()),
            None => Err("cannot connect".to_string()),
        };
        outcome.and_then(|r| {
            r.responses
                .first()
                .and_then(|t| t.partition_responses.first())
                .map(|p| (p.error_code, p.base_offset))
                .ok_or_else(|| "empty produce response".to_string())
        })
    }

    /// Records an acknowledged batch; `acks=all`: its sequence moves on.
    fn acked(&mut self, leader: usize, base_offset: i64, batch: &Batch, sent_after_faults: bool) {
        let (tag, partition, values) = (self.tag, batch.partition, &batch.values);
        let at_ms = now_ms() as u64;
        let mut h = self.history.borrow_mut();
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
        if self.all {
            h.data.acked_all.push(acked);
            self.sequences
                .insert(partition, batch.base_sequence + values.len() as i32);
        } else {
            h.data.acked_one.push(acked);
        }
        if sent_after_faults && self.all {
            h.data.first_ack_after_faults = Some(at_ms);
        }
    }

    /// A refusal; `acks=all`: a fatal one resets the idempotent producer, another sends the
    /// batch again.
    async fn refused(&mut self, leader: usize, code: i16, batch: Batch) {
        let (tag, partition) = (self.tag, batch.partition);
        let e = ResponseError::try_from_code(code);
        self.history
            .borrow_mut()
            .event(format!("{tag} p{partition} n{leader} error {e:?}"));
        if self.all
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
            self.identity = None;
        } else if self.all {
            self.pending = Some(batch);
        }
        self.links.refresh().await;
        sleep_ms(50).await;
    }

    /// No answer: the connection is dropped and an `acks=all` batch is sent again.
    async fn failed(&mut self, leader: usize, e: &str, batch: Batch) {
        let (tag, partition) = (self.tag, batch.partition);
        self.history
            .borrow_mut()
            .event(format!("{tag} p{partition} n{leader} failed: {e}"));
        self.links.drop_conn(leader);
        if self.all {
            // The outcome is unknown: the same batch again, with its sequence.
            self.pending = Some(batch);
        }
        self.links.refresh().await;
        sleep_ms(50).await;
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
pub(crate) async fn consume(history: Rc<RefCell<History>>, nodes: usize) {
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
            progressed |= fetch_once(&history, &mut links, partition, &mut next, final_pass).await;
        }
        if !progressed {
            sleep_ms(20).await;
        }
    }
}

/// One fetch of `partition` from its leader at the consumer's next offset, its records and
/// high watermark recorded; whether it read any record.
async fn fetch_once(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    partition: i32,
    next: &mut BTreeMap<i32, i64>,
    final_pass: bool,
) -> bool {
    if links.leader(partition).is_none() {
        links.refresh().await;
    }
    let Some((leader, epoch)) = links.leader(partition) else {
        return false;
    };
    let offset = next[&partition];
    let req = fetch_request(partition, epoch, offset);
    let resp = match links.conn(leader).await {
        Some(c) => c.send(&req, 12).await.ok(),
        None => None,
    };
    let Some(resp) = resp else {
        links.drop_conn(leader);
        links.refresh().await;
        return false;
    };
    let Some(pd) = resp
        .responses
        .first()
        .and_then(|t| t.partitions.first())
        .cloned()
    else {
        return false;
    };
    if pd.error_code != 0 {
        if pd.error_code == ResponseError::OffsetOutOfRange.code() {
            history.borrow_mut().event(format!(
                "consumer p{partition}@{offset} n{leader} epoch {epoch}: OFFSET_OUT_OF_RANGE"
            ));
        }
        links.refresh().await;
        return false;
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
    let mut progressed = false;
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
    progressed
}

/// A consumer's fetch of one partition of the data topic at `offset`, naming the leader epoch.
fn fetch_request(partition: i32, epoch: i32, offset: i64) -> FetchRequest {
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
    req
}
