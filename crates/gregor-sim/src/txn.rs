//! `--transactions`: two transactional producers (transactional ids `sim-txn-0` and
//! `sim-txn-1`) write the `txns` topic in transactions of 2-3 partitions, committed or aborted
//! as the seed draws, under the faults; a client sometimes "crashes" mid-transaction and its
//! successor re-initialises the same transactional id, after which the old incarnation (a
//! zombie) tries one more Produce and an EndTxn commit, which must both be refused. Then a
//! read_committed consumer reads every partition to its end (`txn_read.rs`). Some transactions
//! also commit a consumer offset (`txn_offsets.rs`). `sim-txn-1` speaks transaction version 2
//! (KIP-890 part 2, `txn_v2.rs`); `sim-txn-0` version 1. Everything the clients were told is
//! recorded for `txn_check.rs`.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use bytes::Bytes;
use gregor_client::producer::wire::{encode_batch_as, ProducerIdentity, RecordData};
use gregor_meta::SplitMix64;
use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, CreateTopicsRequest, EndTxnRequest,
    FindCoordinatorRequest, GroupId, InitProducerIdRequest, ProduceRequest, ProducerId, TopicName,
    TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::Compression;
use kafka_protocol::ResponseError;

use crate::data::{sleep_ms, Links};
use crate::history::{History, TxnOutcome, TxnRecord, TXN_PARTITIONS, TXN_TOPIC};
use crate::node::now_ms;
use crate::txn_offsets::{group_of, read_final, GroupClient};

/// A version-2 transaction's batch as it was acknowledged (for its late retry, `txn_v2.rs`).
#[derive(Debug, Clone)]
pub(crate) struct SentBatch {
    pub(crate) p: i32,
    pub(crate) values: Vec<String>,
    pub(crate) identity: ProducerIdentity,
    pub(crate) sequence: i32,
    /// Where the leader appended it: the marker is written once the last stable offset is past.
    pub(crate) base_offset: i64,
}

/// The transaction timeout the producers ask for: a transaction left open (by a client that
/// gave up on it) is aborted by its coordinator well within the run's bounds.
const TXN_TIMEOUT_MS: i32 = 5_000;
/// The brokers' wall clock at the start of the simulation (`run.rs`): records stamped with
/// simulated time alone would be 1970's, which `retention.ms` deletes as soon as a segment
/// rolls (the data producers' stay in one segment).
const WALL_CLOCK_EPOCH_MS: i64 = 1_700_000_000_000;
/// Attempts of one coordinator request before the client takes its outcome as unknown.
const ATTEMPTS: usize = 30;
/// Version 2: retries of an EndTxn whose answer was lost, before the outcome is unknown.
const END_RETRIES: usize = 3;
/// Version 2: retries of a batch the leader could not yet add to the transaction.
const PRODUCE_RETRIES: usize = 10;

/// The transactional workload: the topic, both producers, then the read_committed pass.
pub(crate) async fn run(history: Rc<RefCell<History>>, nodes: usize, seed: u64) {
    create_topic(&history, nodes).await;
    tokio::join!(
        client(history.clone(), nodes, seed, 0),
        client(history.clone(), nodes, seed, 1)
    );
    history.borrow_mut().event("transactional producers done");
    crate::txn_read::read_committed(history.clone(), nodes).await;
    read_final(&history, nodes, &[group_of(0), group_of(1)]).await;
}

/// Creates the `txns` topic (RF 3, min.insync.replicas=2), retrying through any node until
/// it is created or exists.
async fn create_topic(history: &Rc<RefCell<History>>, nodes: usize) {
    let mut links = Links::new(nodes, "sim-txn-admin");
    let mut node = 0;
    loop {
        let mut req = CreateTopicsRequest::default();
        let mut t = CreatableTopic::default();
        t.name = TopicName(StrBytes::from_static_str(TXN_TOPIC));
        t.num_partitions = TXN_PARTITIONS;
        t.replication_factor = 3;
        let mut c = CreatableTopicConfig::default();
        c.name = StrBytes::from_static_str("min.insync.replicas");
        c.value = Some(StrBytes::from_static_str("2"));
        t.configs = vec![c];
        req.topics = vec![t];
        req.timeout_ms = 5_000;
        if let Some(conn) = links.conn(node).await {
            match conn.send(&req, 7).await {
                Ok(resp) => {
                    let code = resp.topics.first().map_or(-1, |t| t.error_code);
                    history
                        .borrow_mut()
                        .event(format!("create {TXN_TOPIC} via n{node}: code {code}"));
                    if code == 0 || code == ResponseError::TopicAlreadyExists.code() {
                        return;
                    }
                }
                Err(_) => links.drop_conn(node),
            }
        }
        node = (node + 1) % nodes;
        sleep_ms(200).await;
    }
}

/// What a request to the transaction coordinator came to.
enum Answer {
    /// Error code 0.
    Done,
    /// A refusal that retrying will not change.
    Refused,
    /// No answer (timeout, lost connection): it may or may not have been applied.
    Lost,
}

/// One incarnation of a transactional producer.
pub(crate) struct TxnClient {
    pub(crate) history: Rc<RefCell<History>>,
    nodes: usize,
    pub(crate) rng: SplitMix64,
    txn_id: String,
    /// e.g. "t1.2": transactional id 1, its second incarnation.
    pub(crate) name: String,
    pub(crate) links: Links,
    coordinator: Option<usize>,
    identity: Option<ProducerIdentity>,
    sequences: BTreeMap<i32, i32>,
    /// The coordinator of the group this transactional id commits offsets to.
    group: GroupClient,
    /// Transaction version 2: Produce v12 and TxnOffsetCommit v5 add their partitions, and
    /// EndTxn v5 names the identity of the next transaction.
    pub(crate) version2: bool,
    /// Version 2: the current transaction's acknowledged batches, for a late retry.
    pub(crate) sent: Vec<SentBatch>,
    /// Version 2: the identity the last acknowledged EndTxn v5 named.
    next_identity: Option<ProducerIdentity>,
    /// Version 2: an ended transaction's EndTxn (identity, commit) to deliver again late,
    /// once the next transaction is open.
    pub(crate) late_end: Option<(ProducerIdentity, bool)>,
}

/// One transactional id's producer: transactions until one commits after the faults.
async fn client(history: Rc<RefCell<History>>, nodes: usize, seed: u64, k: u64) {
    let mut rng = SplitMix64::new(seed ^ (0x7a_0000 + k));
    let mut incarnation = 1;
    let mut c = TxnClient::new(&history, nodes, &mut rng, k, incarnation);
    let mut counter = 0u64;
    loop {
        let after_faults = history.borrow().faults_over;
        if c.identity.is_none() {
            c.init().await;
        }
        // One transaction in ten "crashes" its client after its writes (before the faults end).
        let crash = !after_faults && rng.next_below(10) == 0;
        let commit = rng.next_below(4) != 0;
        let (outcome, zombie) = c.transaction(&mut counter, commit, crash).await;
        if let Some(zombie) = zombie {
            incarnation += 1;
            let mut next = TxnClient::new(&history, nodes, &mut rng, k, incarnation);
            // The successor's InitProducerId fences the zombie and aborts its transaction.
            next.init().await;
            zombie.act_fenced(&mut counter).await;
            c = next;
        }
        if after_faults && outcome == TxnOutcome::Committed {
            return;
        }
        sleep_ms(rng.next_below(50) as u64).await;
    }
}

impl TxnClient {
    fn new(
        history: &Rc<RefCell<History>>,
        nodes: usize,
        rng: &mut SplitMix64,
        k: u64,
        incarnation: u32,
    ) -> TxnClient {
        let mut rng = SplitMix64::new(rng.next_u64());
        let group = GroupClient::new(history, nodes, group_of(k), rng.next_u64());
        TxnClient {
            history: history.clone(),
            nodes,
            rng,
            txn_id: format!("sim-txn-{k}"),
            name: format!("t{k}.{incarnation}"),
            links: Links::for_topic(nodes, "sim-txn-producer", TXN_TOPIC),
            coordinator: None,
            identity: None,
            sequences: BTreeMap::new(),
            group,
            version2: k == 1,
            sent: Vec::new(),
            next_identity: None,
            late_end: None,
        }
    }

    pub(crate) fn event(&self, msg: String) {
        self.history
            .borrow_mut()
            .event(format!("{} {msg}", self.name));
    }

    /// One transaction: AddPartitionsToTxn for 2-3 partitions, a batch to each, in one of two
    /// a consumer offset (AddOffsetsToTxn, TxnOffsetCommit), EndTxn; version 2 without
    /// AddPartitionsToTxn and AddOffsetsToTxn. With `crash`, the client stops before EndTxn and
    /// is returned as the zombie.
    async fn transaction(
        &mut self,
        counter: &mut u64,
        commit: bool,
        crash: bool,
    ) -> (TxnOutcome, Option<TxnClient>) {
        let Some(identity) = self.identity else {
            return (TxnOutcome::Aborted, None);
        };
        let mut partitions: Vec<i32> = (0..TXN_PARTITIONS).collect();
        let drop = self.rng.next_below(TXN_PARTITIONS as usize + 1);
        if drop < partitions.len() {
            partitions.remove(drop);
        }
        let mut rec = TxnRecord {
            client: self.name.clone(),
            producer_id: identity.producer_id,
            epoch: identity.epoch,
            values: Vec::new(),
            outcome: TxnOutcome::Aborted,
            offset: None,
            version: if self.version2 { 2 } else { 1 },
            next_identity: None,
        };
        let with_offset = self.rng.next_below(2) == 0;
        self.sent.clear();
        // Version 2: each partition's leader adds it when the first batch arrives.
        let mut all_written = self.version2 || self.add_partitions(&partitions).await;
        for &p in &partitions {
            if !all_written {
                break;
            }
            let values = next_values(&mut self.rng, counter, &self.name, p);
            rec.values.extend(values.iter().map(|v| (p, v.clone())));
            all_written = self.produce(p, &values).await;
        }
        if all_written {
            self.send_late_end().await;
        }
        if all_written && with_offset {
            // Unique to this transaction, and growing with every one.
            *counter += 1;
            let offset = *counter as i64;
            rec.offset = Some((self.group.group.clone(), offset));
            all_written = self.commit_offset(offset).await;
        }
        if crash && all_written {
            self.event("crashes mid-transaction".into());
            self.history.borrow_mut().data.txn.txns.push(rec);
            let zombie = std::mem::replace(self, self.successor_shell());
            return (TxnOutcome::Aborted, Some(zombie));
        }
        rec.outcome = if all_written {
            self.end_txn(commit).await
        } else {
            // A write failed: start over at a new epoch, which aborts the transaction and
            // fences any of its batches still on the way.
            self.identity = None;
            TxnOutcome::Aborted
        };
        let outcome = rec.outcome;
        self.ended(rec).await;
        (outcome, None)
    }

    /// Records the ended transaction; for version 2, with the identity EndTxn v5 named, and
    /// sometimes its late retries.
    async fn ended(&mut self, mut rec: TxnRecord) {
        let outcome = rec.outcome;
        let ended = ProducerIdentity {
            producer_id: rec.producer_id,
            epoch: rec.epoch,
        };
        rec.next_identity = self
            .next_identity
            .take()
            .map(|id| (id.producer_id, id.epoch));
        self.event(format!("transaction {outcome:?}: {:?}", rec.values));
        self.history.borrow_mut().data.txn.txns.push(rec);
        if self.version2 && outcome != TxnOutcome::Unknown && self.identity.is_some() {
            self.late_retry(ended, outcome == TxnOutcome::Committed)
                .await;
        }
    }

    /// A placeholder left in the crashed client's place (the caller replaces it).
    fn successor_shell(&self) -> TxnClient {
        TxnClient {
            history: self.history.clone(),
            nodes: self.nodes,
            rng: SplitMix64::new(0),
            txn_id: self.txn_id.clone(),
            name: self.name.clone(),
            links: Links::for_topic(self.nodes, "sim-txn-producer", TXN_TOPIC),
            coordinator: None,
            identity: None,
            sequences: BTreeMap::new(),
            group: GroupClient::new(&self.history, self.nodes, self.group.group.clone(), 0),
            version2: self.version2,
            sent: Vec::new(),
            next_identity: None,
            late_end: None,
        }
    }

    /// The zombie's last acts after its successor initialised: a Produce and an EndTxn
    /// commit, both of which must be refused.
    async fn act_fenced(mut self, counter: &mut u64) {
        let p = self.rng.next_below(TXN_PARTITIONS as usize) as i32;
        let values = next_values(&mut self.rng, counter, &self.name, p);
        {
            let mut h = self.history.borrow_mut();
            for v in &values {
                h.data
                    .txn
                    .fenced_values
                    .push((self.name.clone(), v.clone()));
            }
        }
        if self.produce(p, &values).await {
            let msg = format!("{} (fenced) had Produce {values:?} acknowledged", self.name);
            self.history.borrow_mut().data.txn.fenced_acks.push(msg);
        }
        if let Answer::Done = self.end_txn_request(true).await {
            let msg = format!("{} (fenced) had EndTxn commit acknowledged", self.name);
            self.history.borrow_mut().data.txn.fenced_acks.push(msg);
        }
    }
}

/// 1-3 new unique values for partition `p`.
fn next_values(rng: &mut SplitMix64, counter: &mut u64, name: &str, p: i32) -> Vec<String> {
    let n = 1 + rng.next_below(3);
    (0..n)
        .map(|_| {
            *counter += 1;
            format!("{name}-p{p}-{counter}")
        })
        .collect()
}

impl TxnClient {
    /// The coordinator of the transactional id (FindCoordinator, key type 1), cached.
    async fn coordinator(&mut self) -> Option<usize> {
        if self.coordinator.is_some() {
            return self.coordinator;
        }
        let node = self.rng.next_below(self.nodes);
        let mut req = FindCoordinatorRequest::default();
        req.key_type = 1;
        req.coordinator_keys = vec![StrBytes::from_string(self.txn_id.clone())];
        let c = self.links.conn(node).await?;
        let Ok(resp) = c.send(&req, 4).await else {
            self.links.drop_conn(node);
            return None;
        };
        let found = resp.coordinators.first().filter(|c| c.error_code == 0)?;
        let id = usize::try_from(found.node_id.0)
            .ok()
            .filter(|&id| id < self.nodes)?;
        self.coordinator = Some(id);
        Some(id)
    }

    /// Sends `req` to the coordinator until it is answered with something other than a
    /// coordinator move or CONCURRENT_TRANSACTIONS (after ATTEMPTS, `Refused`: nothing
    /// was applied).
    async fn ask_coordinator(&mut self, req: &CoordRequest) -> Answer {
        let mut last = None;
        for _ in 0..ATTEMPTS {
            let Some(node) = self.coordinator().await else {
                sleep_ms(100).await;
                continue;
            };
            let code = self.send_coordinator(node, req).await;
            let e = code.and_then(ResponseError::try_from_code);
            last = e;
            match (code, e) {
                (Some(0), _) => return Answer::Done,
                (None, _) => {
                    self.event(format!("{req:?} n{node}: no answer"));
                    self.links.drop_conn(node);
                    self.coordinator = None;
                    return Answer::Lost;
                }
                (
                    _,
                    Some(
                        ResponseError::NotCoordinator
                        | ResponseError::CoordinatorNotAvailable
                        | ResponseError::CoordinatorLoadInProgress,
                    ),
                ) => self.coordinator = None,
                (_, Some(ResponseError::ConcurrentTransactions)) => {}
                (Some(c), _) => {
                    self.event(format!("{req:?} n{node}: error {e:?} ({c})"));
                    return Answer::Refused;
                }
            }
            sleep_ms(50 + self.rng.next_below(50) as u64).await;
        }
        self.event(format!(
            "{req:?}: gave up after {ATTEMPTS} attempts, last {last:?}"
        ));
        Answer::Refused
    }

    /// One attempt of `req` at `node`: its error code, or `None` without an answer. An
    /// InitProducerId answered without error sets the identity.
    async fn send_coordinator(&mut self, node: usize, req: &CoordRequest) -> Option<i16> {
        let txn_id = TransactionalId(StrBytes::from_string(self.txn_id.clone()));
        let identity = self.identity;
        let conn = self.links.conn(node).await?;
        match req {
            CoordRequest::Init => {
                let mut r = InitProducerIdRequest::default();
                r.transactional_id = Some(txn_id);
                r.transaction_timeout_ms = TXN_TIMEOUT_MS;
                r.producer_id = ProducerId(-1);
                r.producer_epoch = -1;
                let resp = conn.send(&r, 4).await.ok()?;
                if resp.error_code == 0 {
                    self.identity = Some(ProducerIdentity {
                        producer_id: resp.producer_id.0,
                        epoch: resp.producer_epoch,
                    });
                }
                Some(resp.error_code)
            }
            CoordRequest::Add(partitions) => {
                let id = identity?;
                let mut r = AddPartitionsToTxnRequest::default();
                r.v3_and_below_transactional_id = txn_id;
                r.v3_and_below_producer_id = ProducerId(id.producer_id);
                r.v3_and_below_producer_epoch = id.epoch;
                let mut t = AddPartitionsToTxnTopic::default();
                t.name = TopicName(StrBytes::from_static_str(TXN_TOPIC));
                t.partitions = partitions.clone();
                r.v3_and_below_topics = vec![t];
                let resp = conn.send(&r, 3).await.ok()?;
                // The first partition error stands for all (they fail together).
                let code = resp
                    .results_by_topic_v3_and_below
                    .iter()
                    .flat_map(|t| t.results_by_partition.iter())
                    .map(|p| p.partition_error_code)
                    .find(|&c| c != 0)
                    .unwrap_or(resp.error_code);
                Some(code)
            }
            CoordRequest::AddOffsets => {
                let id = identity?;
                let mut r = AddOffsetsToTxnRequest::default();
                r.transactional_id = txn_id;
                r.producer_id = ProducerId(id.producer_id);
                r.producer_epoch = id.epoch;
                r.group_id = GroupId(StrBytes::from_string(self.group.group.clone()));
                Some(conn.send(&r, 3).await.ok()?.error_code)
            }
            CoordRequest::End(commit) => {
                let r = end_txn_request(txn_id, identity?, *commit);
                let version = if self.version2 { 5 } else { 3 };
                let resp = conn.send(&r, version).await.ok()?;
                if resp.error_code == 0 && self.version2 {
                    self.ended_v2(resp.producer_id.0, resp.producer_epoch);
                }
                Some(resp.error_code)
            }
            CoordRequest::EndAs(id, commit) => {
                let r = end_txn_request(txn_id, *id, *commit);
                Some(conn.send(&r, 5).await.ok()?.error_code)
            }
        }
    }

    /// InitProducerId until it succeeds: a new epoch, which aborts (or completes, if its
    /// commit was being written) whatever transaction this id had open.
    async fn init(&mut self) {
        self.identity = None;
        self.sequences.clear();
        loop {
            if let Answer::Done = self.ask_coordinator(&CoordRequest::Init).await {
                if let Some(id) = self.identity {
                    self.event(format!("producer {} epoch {}", id.producer_id, id.epoch));
                    return;
                }
            }
            sleep_ms(100).await;
        }
    }

    /// AddOffsetsToTxn, then TxnOffsetCommit of `offset`: whether the offset is in the
    /// transaction. Then, while it is still open, what OffsetFetch tells of the group.
    async fn commit_offset(&mut self, offset: i64) -> bool {
        let Some(identity) = self.identity else {
            return false;
        };
        // Version 2: the group coordinator's broker adds the offsets partition itself.
        if !self.version2
            && !matches!(
                self.ask_coordinator(&CoordRequest::AddOffsets).await,
                Answer::Done
            )
        {
            return false;
        }
        let version = if self.version2 { 5 } else { 3 };
        if !self
            .group
            .commit(&self.txn_id, identity, offset, version)
            .await
        {
            return false;
        }
        self.group.probe(&self.name, offset).await;
        true
    }

    /// AddPartitionsToTxn: whether the partitions are in the transaction.
    async fn add_partitions(&mut self, partitions: &[i32]) -> bool {
        matches!(
            self.ask_coordinator(&CoordRequest::Add(partitions.to_vec()))
                .await,
            Answer::Done
        )
    }

    /// EndTxn, and what the producer can tell of the outcome. Anything but an acknowledgement
    /// re-initialises the producer, which ends the transaction either way.
    async fn end_txn(&mut self, commit: bool) -> TxnOutcome {
        let mut answer = self.end_txn_request(commit).await;
        // Version 2: as a real client, retry with the identity the transaction was sent with
        // (the coordinator answers a retry of a decision it made as it answered the first).
        for _ in 0..END_RETRIES {
            if !self.version2 || !matches!(answer, Answer::Lost) {
                break;
            }
            self.event("retries EndTxn v5 after a lost answer".into());
            answer = self.end_txn_request(commit).await;
        }
        match (answer, commit) {
            (Answer::Done, true) => TxnOutcome::Committed,
            (Answer::Done, false) => TxnOutcome::Aborted,
            (_, false) => {
                self.identity = None;
                TxnOutcome::Aborted
            }
            // A commit whose answer was lost, or refused after a coordinator move: the new
            // epoch completes it if its PrepareCommit was written, and aborts it otherwise.
            (_, true) => {
                self.identity = None;
                TxnOutcome::Unknown
            }
        }
    }

    async fn end_txn_request(&mut self, commit: bool) -> Answer {
        self.ask_coordinator(&CoordRequest::End(commit)).await
    }

    /// Version 2: the late copy of the last transaction's EndTxn, delivered while the next is
    /// open (as a request on a connection the client gave up on may be read late). It is
    /// from the epoch before the bump and asks for a decision already made: it must be
    /// refused, not taken for a retry of that decision.
    async fn send_late_end(&mut self) {
        let Some((id, commit)) = self.late_end.take() else {
            return;
        };
        let what = format!(
            "late EndTxn (commit {commit}) producer {} epoch {}",
            id.producer_id, id.epoch
        );
        match self.ask_coordinator(&CoordRequest::EndAs(id, commit)).await {
            Answer::Done => {
                self.event(format!("{what}: acknowledged"));
                let msg = format!(
                    "{} {what} acknowledged while its next transaction was open",
                    self.name
                );
                self.history.borrow_mut().data.txn.late_retry_acks.push(msg);
            }
            Answer::Refused => self.event(format!("{what}: refused")),
            Answer::Lost => self.event(format!("{what}: no answer")),
        }
    }

    /// One transactional batch of `values` to partition `p`'s leader: whether it was
    /// acknowledged (its sequence moves on).
    async fn produce(&mut self, p: i32, values: &[String]) -> bool {
        let Some(identity) = self.identity else {
            return false;
        };
        let sequence = *self.sequences.get(&p).unwrap_or(&0);
        let mut answer = self.send_batch(p, values, identity, sequence).await;
        // Version 2: the leader answers NOT_ENOUGH_REPLICAS while the coordinator cannot add
        // the partition yet (the last transaction's markers are still being written); a
        // client retries the batch as it is.
        let busy = ResponseError::NotEnoughReplicas.code();
        for _ in 0..PRODUCE_RETRIES {
            if !self.version2 || !matches!(answer, Some((_, Some(c), _)) if c == busy) {
                break;
            }
            sleep_ms(50 + self.rng.next_below(50) as u64).await;
            answer = self.send_batch(p, values, identity, sequence).await;
        }
        let Some((leader, code, base_offset)) = answer else {
            return false;
        };
        if code == Some(0) {
            self.sequences.insert(p, sequence + values.len() as i32);
            if self.version2 {
                self.sent.push(SentBatch {
                    p,
                    values: values.to_vec(),
                    identity,
                    sequence,
                    base_offset,
                });
            }
            return true;
        }
        self.event(format!("produce p{p} n{leader}: {code:?}"));
        if code.is_none() {
            self.links.drop_conn(leader);
        }
        self.links.refresh().await;
        false
    }
}

impl TxnClient {
    /// Sends one transactional batch to partition `p`'s leader (Produce v12 for version 2, v9
    /// otherwise): the leader, the error code (`None` without an answer) and the base offset.
    pub(crate) async fn send_batch(
        &mut self,
        p: i32,
        values: &[String],
        identity: ProducerIdentity,
        sequence: i32,
    ) -> Option<(usize, Option<i16>, i64)> {
        if self.links.leader(p).is_none() {
            self.links.refresh().await;
        }
        let (leader, _) = self.links.leader(p)?;
        let req = produce_request(&self.txn_id, p, values, identity, sequence)?;
        let version = if self.version2 { 12 } else { 9 };
        let answer = match self.links.conn(leader).await {
            Some(c) => c.send(&req, version).await.ok(),
            None => None,
        };
        let part = answer.as_ref().and_then(|r| {
            r.responses
                .first()
                .and_then(|t| t.partition_responses.first())
        });
        let code = part.map(|p| p.error_code);
        Some((leader, code, part.map_or(-1, |p| p.base_offset)))
    }

    /// An EndTxn v5 acknowledged: the identity of the next transaction, whose sequences start
    /// at 0 again (without a valid one, the producer initialises again).
    fn ended_v2(&mut self, producer_id: i64, epoch: i16) {
        let next =
            (producer_id >= 0 && epoch >= 0).then_some(ProducerIdentity { producer_id, epoch });
        self.identity = next;
        self.next_identity = next;
        self.sequences.clear();
        if let Some(id) = next {
            self.event(format!(
                "EndTxn v5 answered producer {} epoch {}",
                id.producer_id, id.epoch
            ));
        }
    }
}

/// A request to the transaction coordinator.
#[derive(Debug)]
enum CoordRequest {
    Init,
    Add(Vec<i32>),
    AddOffsets,
    End(bool),
    /// Version 2: an EndTxn (commit or not) sent with an identity other than the producer's
    /// own, as a late copy of an earlier one.
    EndAs(ProducerIdentity, bool),
}

/// EndTxn of `id`'s transaction: commit or abort.
fn end_txn_request(txn_id: TransactionalId, id: ProducerIdentity, commit: bool) -> EndTxnRequest {
    let mut r = EndTxnRequest::default();
    r.transactional_id = txn_id;
    r.producer_id = ProducerId(id.producer_id);
    r.producer_epoch = id.epoch;
    r.committed = commit;
    r
}

/// A transactional Produce of one batch of `values` to partition `p` of the `txns` topic.
fn produce_request(
    txn_id: &str,
    p: i32,
    values: &[String],
    identity: ProducerIdentity,
    base_sequence: i32,
) -> Option<ProduceRequest> {
    let records: Vec<RecordData> = values
        .iter()
        .map(|v| RecordData {
            key: None,
            value: Some(Bytes::from(v.clone())),
            headers: Vec::new(),
            timestamp: WALL_CLOCK_EPOCH_MS + now_ms(),
        })
        .collect();
    let batch = encode_batch_as(
        &records,
        Some(identity),
        base_sequence,
        Compression::None,
        true,
    )
    .ok()?;
    let mut req = ProduceRequest::default();
    req.transactional_id = Some(TransactionalId(StrBytes::from_string(txn_id.to_string())));
    req.acks = -1;
    req.timeout_ms = 2_000;
    let mut t = TopicProduceData::default();
    t.name = TopicName(StrBytes::from_static_str(TXN_TOPIC));
    let mut pd = PartitionProduceData::default();
    pd.index = p;
    pd.records = Some(batch);
    t.partition_data = vec![pd];
    req.topic_data = vec![t];
    Some(req)
}
