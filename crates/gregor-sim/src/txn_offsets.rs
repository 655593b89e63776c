//! `--transactions`: the consumer offsets a transactional producer commits inside some of its
//! transactions, at the group's coordinator (TxnOffsetCommit after AddOffsetsToTxn, as Kafka's
//! `sendOffsetsToTransaction` does, as a standalone producer: generation -1, no member id);
//! the OffsetFetches made while such a transaction is open, which must not see its offset; and
//! each group's committed offset read once the producers are done. `txn_check.rs` holds them
//! to the transactions' outcomes.

use std::cell::RefCell;
use std::rc::Rc;

use gregor_client::producer::wire::ProducerIdentity;
use gregor_meta::SplitMix64;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    FindCoordinatorRequest, GroupId, OffsetFetchRequest, ProducerId, TopicName, TransactionalId,
    TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::data::{sleep_ms, Links};
use crate::history::{History, OffsetProbe, TXN_TOPIC};

/// The partition of the `txns` topic whose consumer offset the transactions commit.
const OFFSET_PARTITION: i32 = 0;
/// Attempts of one group coordinator request across coordinator moves.
const ATTEMPTS: usize = 20;
/// Attempts of the final stable read: the last commit's markers may still be on their way.
const FINAL_ATTEMPTS: usize = 100;

/// The group transactional id `k` commits its offsets to.
pub(crate) fn group_of(k: u64) -> String {
    format!("sim-txn-group-{k}")
}

/// A client of one group's coordinator (FindCoordinator key type 0).
pub(crate) struct GroupClient {
    history: Rc<RefCell<History>>,
    nodes: usize,
    rng: SplitMix64,
    pub(crate) group: String,
    links: Links,
    coordinator: Option<usize>,
}

/// Errors after which the request goes to the coordinator found again.
fn coordinator_moved(code: i16) -> bool {
    matches!(
        ResponseError::try_from_code(code),
        Some(
            ResponseError::NotCoordinator
                | ResponseError::CoordinatorNotAvailable
                | ResponseError::CoordinatorLoadInProgress
                | ResponseError::ConcurrentTransactions
        )
    )
}

impl GroupClient {
    pub(crate) fn new(
        history: &Rc<RefCell<History>>,
        nodes: usize,
        group: String,
        seed: u64,
    ) -> GroupClient {
        GroupClient {
            history: history.clone(),
            nodes,
            rng: SplitMix64::new(seed),
            group,
            links: Links::new(nodes, "sim-txn-group"),
            coordinator: None,
        }
    }

    fn event(&self, msg: String) {
        self.history
            .borrow_mut()
            .event(format!("{} {msg}", self.group));
    }

    /// The group's coordinator, cached.
    async fn coordinator(&mut self) -> Option<usize> {
        if self.coordinator.is_some() {
            return self.coordinator;
        }
        let node = self.rng.next_below(self.nodes);
        let mut req = FindCoordinatorRequest::default();
        req.key_type = 0;
        req.coordinator_keys = vec![StrBytes::from_string(self.group.clone())];
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

    /// TxnOffsetCommit (v3, or v5 for transaction version 2, which adds the offsets partition
    /// itself) of `offset` in the transaction of `identity`: whether it was acknowledged.
    /// Anything else leaves the transaction to be aborted.
    pub(crate) async fn commit(
        &mut self,
        txn_id: &str,
        identity: ProducerIdentity,
        offset: i64,
        version: i16,
    ) -> bool {
        let mut req = TxnOffsetCommitRequest::default();
        req.transactional_id = TransactionalId(StrBytes::from_string(txn_id.to_string()));
        req.group_id = GroupId(StrBytes::from_string(self.group.clone()));
        req.producer_id = ProducerId(identity.producer_id);
        req.producer_epoch = identity.epoch;
        req.generation_id = -1;
        let mut p = TxnOffsetCommitRequestPartition::default();
        p.partition_index = OFFSET_PARTITION;
        p.committed_offset = offset;
        p.committed_leader_epoch = -1;
        let mut t = TxnOffsetCommitRequestTopic::default();
        t.name = TopicName(StrBytes::from_static_str(TXN_TOPIC));
        t.partitions = vec![p];
        req.topics = vec![t];
        for _ in 0..ATTEMPTS {
            let Some(node) = self.coordinator().await else {
                sleep_ms(100).await;
                continue;
            };
            let code = match self.links.conn(node).await {
                Some(c) => c.send(&req, version).await.ok().map(|r| {
                    r.topics
                        .iter()
                        .flat_map(|t| t.partitions.iter())
                        .map(|p| p.error_code)
                        .find(|&c| c != 0)
                        .unwrap_or(0)
                }),
                None => None,
            };
            match code {
                Some(0) => return true,
                Some(c) if coordinator_moved(c) => self.coordinator = None,
                _ => {
                    self.event(format!("TxnOffsetCommit {offset} n{node}: {code:?}"));
                    if code.is_none() {
                        self.links.drop_conn(node);
                        self.coordinator = None;
                    }
                    return false;
                }
            }
            sleep_ms(50 + self.rng.next_below(50) as u64).await;
        }
        false
    }

    /// One OffsetFetch v7 of the committed partition at the coordinator: the offset (-1 for
    /// none) or the error code; `None` without an answer.
    async fn fetch_once(&mut self, require_stable: bool) -> Option<Result<i64, i16>> {
        let node = self.coordinator().await?;
        let mut req = OffsetFetchRequest::default();
        req.group_id = GroupId(StrBytes::from_string(self.group.clone()));
        let mut t = OffsetFetchRequestTopic::default();
        t.name = TopicName(StrBytes::from_static_str(TXN_TOPIC));
        t.partition_indexes = vec![OFFSET_PARTITION];
        req.topics = Some(vec![t]);
        req.require_stable = require_stable;
        let Some(c) = self.links.conn(node).await else {
            self.coordinator = None;
            return None;
        };
        let Ok(resp) = c.send(&req, 7).await else {
            self.links.drop_conn(node);
            self.coordinator = None;
            return None;
        };
        let p = resp.topics.iter().flat_map(|t| t.partitions.iter()).next();
        let code = match p {
            Some(p) if p.error_code != 0 => p.error_code,
            Some(p) if resp.error_code == 0 => return Some(Ok(p.committed_offset)),
            _ => resp.error_code,
        };
        if coordinator_moved(code) {
            self.coordinator = None;
        }
        Some(Err(code))
    }

    /// An OffsetFetch that follows the coordinator: the first answer other than a
    /// coordinator move (or, with `wait_stable`, UNSTABLE_OFFSET_COMMIT), within `attempts`.
    async fn fetch(
        &mut self,
        require_stable: bool,
        attempts: usize,
        wait_stable: bool,
    ) -> Option<Result<i64, i16>> {
        let unstable = ResponseError::UnstableOffsetCommit.code();
        let mut last = None;
        for _ in 0..attempts {
            last = self.fetch_once(require_stable).await;
            match last {
                Some(Err(c)) if coordinator_moved(c) || (wait_stable && c == unstable) => {}
                Some(_) => return last,
                None => {}
            }
            sleep_ms(50 + self.rng.next_below(50) as u64).await;
        }
        last
    }

    /// While `client`'s transaction holds `pending` uncommitted: what a plain consumer
    /// (require_stable false) and a KIP-447 one (require_stable true) are told.
    pub(crate) async fn probe(&mut self, client: &str, pending: i64) {
        for require_stable in [false, true] {
            let answer = self.fetch(require_stable, 5, false).await;
            self.event(format!(
                "OffsetFetch (require_stable {require_stable}) while {client} holds {pending} pending: {answer:?}"
            ));
            self.history
                .borrow_mut()
                .data
                .txn
                .offset_probes
                .push(OffsetProbe {
                    client: client.to_string(),
                    group: self.group.clone(),
                    pending,
                    require_stable,
                    answer,
                });
        }
    }
}

/// Each group's committed offset once every transaction has ended: read with require_stable
/// until no transaction is pending (the markers of the last commit may still be on their way).
pub(crate) async fn read_final(history: &Rc<RefCell<History>>, nodes: usize, groups: &[String]) {
    for (i, group) in groups.iter().enumerate() {
        let mut c = GroupClient::new(history, nodes, group.clone(), 0x0ff5e7 + i as u64);
        let mut answer = c.fetch(true, FINAL_ATTEMPTS, true).await;
        if !matches!(answer, Some(Ok(_))) {
            // A TxnOffsetCommit that arrived after its transaction ended stays pending (the
            // hanging transaction KIP-890 closes): the committed offset is still checkable.
            c.event(format!("no stable committed offset: {answer:?}"));
            answer = c.fetch(false, ATTEMPTS, false).await;
        }
        match answer {
            Some(Ok(offset)) => {
                c.event(format!("final committed offset {offset}"));
                history
                    .borrow_mut()
                    .data
                    .txn
                    .final_offsets
                    .insert(group.clone(), offset);
            }
            other => c.event(format!("final committed offset not read: {other:?}")),
        }
    }
}
