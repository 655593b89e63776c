//! DescribeTransactions and ListTransactions (KIP-664): what the transaction coordinator shards
//! of this node hold, read without changing anything. Authorization (DESCRIBE on each
//! transactional id and topic) is `authorize/txn`'s.

use std::collections::BTreeSet;

use gregor_group::txn::{TransactionState, TxnCoordinator, TxnMetadata};
use kafka_protocol::messages::describe_transactions_response::{
    TopicData, TransactionState as DescribedTxn,
};
use kafka_protocol::messages::list_transactions_response::TransactionState as ListedTxn;
use kafka_protocol::messages::{
    DescribeTransactionsRequest, DescribeTransactionsResponse, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TopicName, TransactionalId,
};
use kafka_protocol::ResponseError;

use super::s;
use crate::forward::ControlPlane;
use crate::runtime::now_ms;
use crate::txn_shell::Transactions;

/// ListTransactions' filters; an empty set filters nothing.
#[derive(Debug, Clone, Default)]
pub(crate) struct ListFilter {
    pub states: BTreeSet<TransactionState>,
    pub producer_ids: BTreeSet<i64>,
    /// Only transactions running longer than this (ms); negative: no filter (v1, KIP-994).
    pub duration_ms: i64,
}

impl ListFilter {
    /// The filters of `r`, and the state names no transaction state has.
    pub(crate) fn of(r: &ListTransactionsRequest, version: i16) -> (ListFilter, Vec<String>) {
        let mut unknown = Vec::new();
        let mut states = BTreeSet::new();
        for name in &r.state_filters {
            match TransactionState::from_name(name) {
                Some(state) => {
                    states.insert(state);
                }
                None => unknown.push(name.to_string()),
            }
        }
        let filter = ListFilter {
            states,
            producer_ids: r.producer_id_filters.iter().map(|p| p.0).collect(),
            duration_ms: if version >= 1 { r.duration_filter } else { -1 },
        };
        (filter, unknown)
    }

    /// Whether the listing shows `m` at `now_ms`. Dead ids are being expired: never listed, as
    /// in Kafka. The duration is measured from the transaction's start as Kafka does (an id
    /// with none open has start -1, so it passes any duration).
    pub(crate) fn keeps(&self, m: &TxnMetadata, now_ms: i64) -> bool {
        let state = m.state();
        state != TransactionState::Dead
            && (self.producer_ids.is_empty() || self.producer_ids.contains(&m.current.producer_id))
            && (self.states.is_empty() || self.states.contains(&state))
            && (self.duration_ms < 0 || now_ms - m.current.start_timestamp_ms > self.duration_ms)
    }
}

/// The listed entries of one shard.
fn listed(c: &TxnCoordinator, filter: &ListFilter, now_ms: i64) -> Vec<ListedTxn> {
    c.ids()
        .filter(|m| filter.keeps(m, now_ms))
        .map(|m| {
            let mut t = ListedTxn::default();
            t.transactional_id = TransactionalId(s(m.transactional_id.clone()));
            t.producer_id = ProducerId(m.current.producer_id);
            t.transaction_state = s(m.state().name());
            t
        })
        .collect()
}

/// ListTransactions: the transactional ids of every shard on this node, filtered. While any
/// shard loads the whole answer is COORDINATOR_LOAD_IN_PROGRESS, as Kafka answers.
pub async fn list_transactions(
    b: ControlPlane<'_>,
    txns: &Transactions,
    r: ListTransactionsRequest,
    version: i16,
) -> ListTransactionsResponse {
    let mut resp = ListTransactionsResponse::default();
    let (loaded, loading) = txns.shard_partitions();
    if !loading.is_empty() {
        resp.error_code = ResponseError::CoordinatorLoadInProgress.code();
        return resp;
    }
    let (filter, unknown) = ListFilter::of(&r, version);
    resp.unknown_state_filters = unknown.into_iter().map(s).collect();
    let image = b.metadata.image();
    let now = now_ms();
    for p in loaded {
        let f = filter.clone();
        match txns
            .read(&image, b.node_id, p, move |c| listed(c, &f, now))
            .await
        {
            Ok(states) => resp.transaction_states.extend(states),
            // Unloaded since the table was read: its ids are another coordinator's now.
            Err(ResponseError::NotCoordinator) => {}
            Err(e) => {
                resp.error_code = e.code();
                resp.transaction_states.clear();
                return resp;
            }
        }
    }
    resp
}

/// One transactional id as DescribeTransactions reports it (Dead: being expired, not found).
pub(crate) fn described(id: &str, m: Option<&TxnMetadata>) -> DescribedTxn {
    let mut out = DescribedTxn::default();
    out.transactional_id = TransactionalId(s(id));
    out.transaction_start_time_ms = -1;
    out.producer_id = ProducerId(-1);
    out.producer_epoch = -1;
    let Some(m) = m.filter(|m| m.state() != TransactionState::Dead) else {
        out.error_code = ResponseError::TransactionalIdNotFound.code();
        return out;
    };
    out.transaction_state = s(m.state().name());
    out.transaction_timeout_ms = m.current.transaction_timeout_ms;
    out.transaction_start_time_ms = m.current.start_timestamp_ms;
    out.producer_id = ProducerId(m.current.producer_id);
    out.producer_epoch = m.current.producer_epoch;
    // `partitions()` is sorted by topic: each topic's partitions are consecutive.
    for (topic, p) in m.partitions() {
        match out.topics.last_mut() {
            Some(t) if t.topic.0.as_str() == topic => t.partitions.push(p),
            _ => {
                let mut t = TopicData::default();
                t.topic = TopicName(s(topic));
                t.partitions = vec![p];
                out.topics.push(t);
            }
        }
    }
    out
}

/// DescribeTransactions: each transactional id at the shard of its partition, if it is here.
pub async fn describe_transactions(
    b: ControlPlane<'_>,
    txns: &Transactions,
    r: DescribeTransactionsRequest,
) -> DescribeTransactionsResponse {
    let image = b.metadata.image();
    let mut resp = DescribeTransactionsResponse::default();
    for id in r.transactional_ids {
        let id = id.0.to_string();
        let p = Transactions::partition_of(b, &id);
        let key = id.clone();
        let read = txns
            .read(&image, b.node_id, p, move |c| c.describe(&key).cloned())
            .await;
        resp.transaction_states.push(match read {
            Ok(m) => described(&id, m.as_ref()),
            Err(e) => {
                let mut out = described(&id, None);
                out.error_code = e.code();
                out
            }
        });
    }
    resp
}

#[cfg(test)]
#[path = "txn_admin_tests.rs"]
mod tests;
