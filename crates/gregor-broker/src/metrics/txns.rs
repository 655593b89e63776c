//! What the metrics scrape and the console read of transactions on this node: the
//! transactional ids of its transaction coordinator shards (by state, and the open ones), and
//! the last stable offset of each partition it leads with the transactions open there. Read
//! when asked, never kept.

use std::collections::BTreeMap;

use gregor_group::txn::{TransactionState, TxnCoordinator, TxnMetadata};

use crate::broker_view::BrokerView;

/// A partition's LSO trailing its high watermark at one offset for longer than this is
/// reported as stalled (a transaction left open, or a marker that cannot be written).
pub const LSO_STALL_MS: i64 = 60_000;

/// A transaction open at a coordinator shard of this node: Ongoing, or decided and writing
/// its markers (PrepareCommit, PrepareAbort, PrepareEpochFence).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTxn {
    pub transactional_id: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub state: TransactionState,
    pub partitions: Vec<(String, i32)>,
    /// When the transaction started (its first AddPartitionsToTxn), by the coordinator's clock.
    pub started_ms: i64,
    pub last_update_ms: i64,
    pub timeout_ms: i32,
    /// The `__transaction_state` partition whose shard holds it.
    pub coordinator_partition: i32,
}

/// This node's coordinator shards as the metrics and the console show them.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CoordinatorTxns {
    /// Transactional ids per state, over every loaded shard.
    pub by_state: BTreeMap<TransactionState, i64>,
    /// The oldest open transactions first, at most the cap asked for.
    pub open: Vec<OpenTxn>,
    /// Open transactions in all, shown or not.
    pub open_total: usize,
    /// `__transaction_state` partitions with a loaded shard here, and with one still loading.
    pub shards: Vec<i32>,
    pub loading: Vec<i32>,
}

fn is_open(state: TransactionState) -> bool {
    state == TransactionState::Ongoing || state.is_preparing()
}

fn open_txn(m: &TxnMetadata, coordinator_partition: i32) -> OpenTxn {
    OpenTxn {
        transactional_id: m.transactional_id.clone(),
        producer_id: m.current.producer_id,
        producer_epoch: m.current.producer_epoch,
        state: m.state(),
        partitions: m.partitions().into_iter().collect(),
        started_ms: m.current.start_timestamp_ms,
        last_update_ms: m.current.last_update_timestamp_ms,
        timeout_ms: m.current.transaction_timeout_ms,
        coordinator_partition,
    }
}

/// One shard's share: its ids by state and its `cap` oldest open transactions (so a shard with
/// many sends no more than the merged answer can use).
pub fn shard_txns(c: &TxnCoordinator, partition: i32, cap: usize) -> CoordinatorTxns {
    let mut out = CoordinatorTxns::default();
    for m in c.ids() {
        *out.by_state.entry(m.state()).or_default() += 1;
        if is_open(m.state()) {
            out.open_total += 1;
            out.open.push(open_txn(m, partition));
        }
    }
    out.shards.push(partition);
    out.keep_oldest(cap);
    out
}

impl CoordinatorTxns {
    /// Adds another shard's share, keeping the `cap` oldest open transactions.
    pub fn merge(&mut self, other: CoordinatorTxns, cap: usize) {
        for (state, n) in other.by_state {
            *self.by_state.entry(state).or_default() += n;
        }
        self.open.extend(other.open);
        self.open_total += other.open_total;
        self.shards.extend(other.shards);
        self.loading.extend(other.loading);
        self.keep_oldest(cap);
    }

    fn keep_oldest(&mut self, cap: usize) {
        self.open.sort_by(|a, b| {
            (a.started_ms, &a.transactional_id).cmp(&(b.started_ms, &b.transactional_id))
        });
        self.open.truncate(cap);
    }
}

/// Reads every loaded coordinator shard of this node (none if it never hosted
/// `__transaction_state`); `cap` bounds the open transactions listed.
pub async fn coordinator(b: BrokerView<'_>, cap: usize) -> CoordinatorTxns {
    let (loaded, loading) = b.txns.shard_partitions();
    let image = b.metadata.image();
    let mut out = CoordinatorTxns {
        loading,
        ..CoordinatorTxns::default()
    };
    for p in loaded {
        // A shard that unloaded meanwhile is skipped: its partition's new leader reports it.
        if let Ok(share) = b
            .txns
            .read(&image, b.node_id(), p, move |c| shard_txns(c, p, cap))
            .await
        {
            out.merge(share, cap);
        }
    }
    out.shards.sort_unstable();
    out
}

/// A partition this node leads, with its last stable offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LedPartitionTxns {
    pub topic: String,
    pub partition: i32,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    /// How long the LSO has trailed the high watermark at its offset (0: it does not).
    pub stalled_ms: i64,
    /// Producers with a transaction open in it.
    pub open_transactions: usize,
}

impl LedPartitionTxns {
    /// How many offsets read_committed consumers cannot read yet (Kafka's
    /// `LastStableOffsetLag`).
    pub fn lag(&self) -> i64 {
        (self.high_watermark - self.last_stable_offset).max(0)
    }

    pub fn stalled(&self) -> bool {
        self.stalled_ms > LSO_STALL_MS
    }
}

/// Every partition this node leads, with its LSO at `now_ms`.
pub async fn led_partitions(b: BrokerView<'_>, now_ms: i64) -> Vec<LedPartitionTxns> {
    let mut out = Vec::new();
    for p in b.replicas.all() {
        if !p.role().is_leader {
            continue;
        }
        let (last_stable_offset, stalled_ms) = p.last_stable_stall(now_ms);
        out.push(LedPartitionTxns {
            topic: p.topic.clone(),
            partition: p.index,
            high_watermark: p.high_watermark(),
            last_stable_offset,
            stalled_ms,
            open_transactions: p.open_transactions().await.len(),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(id: &str, started_ms: i64, partition: i32) -> OpenTxn {
        OpenTxn {
            transactional_id: id.to_string(),
            producer_id: 7,
            producer_epoch: 0,
            state: TransactionState::Ongoing,
            partitions: vec![("t".to_string(), 0)],
            started_ms,
            last_update_ms: started_ms,
            timeout_ms: 60_000,
            coordinator_partition: partition,
        }
    }

    fn share(partition: i32, open_txns: Vec<OpenTxn>, empty: i64) -> CoordinatorTxns {
        let mut by_state = BTreeMap::new();
        by_state.insert(TransactionState::Ongoing, open_txns.len() as i64);
        by_state.insert(TransactionState::Empty, empty);
        CoordinatorTxns {
            by_state,
            open_total: open_txns.len(),
            open: open_txns,
            shards: vec![partition],
            loading: Vec::new(),
        }
    }

    #[test]
    fn shards_merge_into_counts_and_the_oldest_open_transactions() {
        let mut all = CoordinatorTxns::default();
        all.merge(share(3, vec![open("c", 30, 3), open("a", 10, 3)], 2), 2);
        all.merge(share(1, vec![open("b", 20, 1)], 1), 2);
        assert_eq!(all.by_state[&TransactionState::Ongoing], 3);
        assert_eq!(all.by_state[&TransactionState::Empty], 3);
        assert_eq!(all.open_total, 3, "counted whole");
        let ids: Vec<&str> = all
            .open
            .iter()
            .map(|t| t.transactional_id.as_str())
            .collect();
        assert_eq!(ids, ["a", "b"], "the cap keeps the oldest");
        assert_eq!(all.shards, [3, 1]);
    }

    /// A shard holding `ids` as its log left them: (id, state, start, partitions of topic "t").
    fn shard(ids: &[(&str, TransactionState, i64, &[i32])]) -> TxnCoordinator {
        use gregor_group::txn::records::{encode_key, encode_value};
        use gregor_group::txn::{TopicPartitions, TransactionLogValue};
        let mut c = TxnCoordinator::new(Default::default());
        for (i, (id, state, start, partitions)) in ids.iter().enumerate() {
            let value = TransactionLogValue {
                producer_id: 100 + i as i64,
                previous_producer_id: -1,
                next_producer_id: -1,
                producer_epoch: 3,
                transaction_timeout_ms: 60_000,
                state: *state,
                partitions: vec![TopicPartitions {
                    topic: "t".to_string(),
                    partitions: partitions.to_vec(),
                }],
                last_update_timestamp_ms: *start,
                start_timestamp_ms: *start,
                client_transaction_version: 0,
            };
            c.replay(&encode_key(id), Some(&encode_value(&value)))
                .expect("replayed");
        }
        c
    }

    #[test]
    fn a_shard_reports_its_ids_by_state_and_its_open_transactions_oldest_first() {
        let c = shard(&[
            ("done", TransactionState::CompleteCommit, -1, &[]),
            ("late", TransactionState::Ongoing, 900, &[1]),
            ("early", TransactionState::PrepareAbort, 100, &[0, 2]),
            ("idle", TransactionState::Empty, -1, &[]),
        ]);
        let s = shard_txns(&c, 7, 10);
        assert_eq!(s.by_state[&TransactionState::Ongoing], 1);
        assert_eq!(s.by_state[&TransactionState::PrepareAbort], 1);
        assert_eq!(s.by_state[&TransactionState::CompleteCommit], 1);
        assert_eq!(s.by_state[&TransactionState::Empty], 1);
        assert_eq!(s.open_total, 2, "Complete* and Empty are not open");
        let ids: Vec<&str> = s.open.iter().map(|t| t.transactional_id.as_str()).collect();
        assert_eq!(ids, ["early", "late"]);
        let early = &s.open[0];
        assert_eq!(
            early.partitions,
            [("t".to_string(), 0), ("t".to_string(), 2)]
        );
        assert_eq!((early.producer_epoch, early.coordinator_partition), (3, 7));
        let capped = shard_txns(&c, 7, 1);
        assert_eq!(capped.open.len(), 1);
        assert_eq!(
            capped.open_total, 2,
            "the count is whole when the list is cut"
        );
    }

    #[test]
    fn a_stall_counts_past_a_minute_only() {
        let mut p = LedPartitionTxns {
            topic: "t".to_string(),
            partition: 0,
            high_watermark: 10,
            last_stable_offset: 4,
            stalled_ms: LSO_STALL_MS,
            open_transactions: 1,
        };
        assert_eq!(p.lag(), 6);
        assert!(!p.stalled());
        p.stalled_ms += 1;
        assert!(p.stalled());
    }
}
