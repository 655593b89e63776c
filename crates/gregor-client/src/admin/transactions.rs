//! Transactions (KIP-664): list the transactional ids of every coordinator, describe ids at
//! their coordinators, describe a partition's active producers at its leader, and abort a
//! hanging transaction by writing its abort marker to the partition's leader, as Kafka's
//! `Admin` and `kafka-transactions.sh` do.

use std::collections::{BTreeMap, BTreeSet};

use kafka_protocol::messages::describe_producers_request::TopicRequest;
use kafka_protocol::messages::write_txn_markers_request::{
    WritableTxnMarker, WritableTxnMarkerTopic,
};
use kafka_protocol::messages::{
    DescribeProducersRequest, DescribeProducersResponse, DescribeTransactionsRequest,
    DescribeTransactionsResponse, FindCoordinatorRequest, ListTransactionsRequest,
    ListTransactionsResponse, ProducerId, TopicName, TransactionalId, WriteTxnMarkersRequest,
    WriteTxnMarkersResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::base::{missing_result, retry_entities, Admin, EntityResult};
use crate::client::Target;
use crate::coordinator::parse_find_coordinator;
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::types::{group_by_topic, TopicPartition};

/// Kafka's coordinator key type for transactional ids.
pub const KEY_TYPE_TRANSACTION: i8 = 1;

/// ListTransactions' filters (empty: no filter).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ListTransactionsFilter {
    /// State names (`Ongoing`, `PrepareCommit`...).
    pub states: Vec<String>,
    pub producer_ids: Vec<i64>,
    /// Only transactions running longer than this many ms (ListTransactions v1).
    pub min_duration_ms: Option<i64>,
}

/// A transactional id as ListTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionListing {
    pub transactional_id: String,
    pub producer_id: i64,
    pub state: String,
    /// The broker that listed it (its coordinator).
    pub coordinator_id: i32,
}

/// A transactional id as DescribeTransactions reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionDescription {
    pub coordinator_id: i32,
    pub transactional_id: String,
    pub state: String,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub timeout_ms: i32,
    /// When the open transaction started; `None` when none is open.
    pub start_time_ms: Option<i64>,
    pub partitions: Vec<TopicPartition>,
}

/// An active producer of a partition as DescribeProducers reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProducerState {
    pub producer_id: i64,
    pub producer_epoch: i32,
    pub last_sequence: i32,
    pub last_timestamp: i64,
    /// The coordinator epoch of the producer's last marker, if it had one.
    pub coordinator_epoch: Option<i32>,
    /// The first offset of its open transaction, if one is open.
    pub current_txn_start_offset: Option<i64>,
}

/// What `abort_transaction` writes: an abort marker of this producer in this partition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AbortSpec {
    pub partition: TopicPartition,
    pub producer_id: i64,
    pub producer_epoch: i16,
    pub coordinator_epoch: i32,
}

fn s(text: &str) -> StrBytes {
    StrBytes::from_string(text.to_string())
}

/// A ListTransactions request; the duration filter needs v1.
pub fn list_transactions_request(
    filter: &ListTransactionsFilter,
    version: i16,
) -> Result<ListTransactionsRequest> {
    let mut req = ListTransactionsRequest::default()
        .with_state_filters(filter.states.iter().map(|st| s(st)).collect())
        .with_producer_id_filters(filter.producer_ids.iter().map(|p| ProducerId(*p)).collect());
    match filter.min_duration_ms {
        Some(_) if version < 1 => {
            return Err(Error::InvalidArgument(format!(
                "filtering transactions by duration needs ListTransactions v1; the broker \
                 supports v{version}"
            )))
        }
        Some(ms) => req.duration_filter = ms,
        None if version >= 1 => req.duration_filter = -1,
        None => {}
    }
    Ok(req)
}

pub fn parse_list_transactions(
    resp: ListTransactionsResponse,
    broker: i32,
) -> Result<Vec<TransactionListing>, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    Ok(resp
        .transaction_states
        .into_iter()
        .map(|t| TransactionListing {
            transactional_id: t.transactional_id.0.to_string(),
            producer_id: t.producer_id.0,
            state: t.transaction_state.to_string(),
            coordinator_id: broker,
        })
        .collect())
}

pub fn parse_describe_transactions(
    resp: DescribeTransactionsResponse,
    coordinator_id: i32,
) -> EntityResult<String, TransactionDescription> {
    resp.transaction_states
        .into_iter()
        .map(|t| {
            let id = t.transactional_id.0.to_string();
            let result = KafkaError::check(t.error_code, None).map(|()| TransactionDescription {
                coordinator_id,
                transactional_id: id.clone(),
                state: t.transaction_state.to_string(),
                producer_id: t.producer_id.0,
                producer_epoch: t.producer_epoch,
                timeout_ms: t.transaction_timeout_ms,
                start_time_ms: (t.transaction_start_time_ms >= 0)
                    .then_some(t.transaction_start_time_ms),
                partitions: t
                    .topics
                    .iter()
                    .flat_map(|tp| {
                        tp.partitions
                            .iter()
                            .map(|p| TopicPartition::new(tp.topic.0.to_string(), *p))
                    })
                    .collect(),
            });
            (id, result)
        })
        .collect()
}

pub fn describe_producers_request(partitions: &[TopicPartition]) -> DescribeProducersRequest {
    DescribeProducersRequest::default().with_topics(
        group_by_topic(partitions.iter())
            .into_iter()
            .map(|(t, ps)| {
                TopicRequest::default()
                    .with_name(TopicName(s(&t)))
                    .with_partition_indexes(ps)
            })
            .collect(),
    )
}

pub fn parse_describe_producers(
    resp: DescribeProducersResponse,
) -> EntityResult<TopicPartition, Vec<ProducerState>> {
    let mut out = Vec::new();
    for t in resp.topics {
        for p in t.partitions {
            let tp = TopicPartition::new(t.name.0.to_string(), p.partition_index);
            let result = KafkaError::check(p.error_code, p.error_message.as_deref()).map(|()| {
                p.active_producers
                    .iter()
                    .map(|a| ProducerState {
                        producer_id: a.producer_id.0,
                        producer_epoch: a.producer_epoch,
                        last_sequence: a.last_sequence,
                        last_timestamp: a.last_timestamp,
                        coordinator_epoch: (a.coordinator_epoch >= 0)
                            .then_some(a.coordinator_epoch),
                        current_txn_start_offset: (a.current_txn_start_offset >= 0)
                            .then_some(a.current_txn_start_offset),
                    })
                    .collect()
            });
            out.push((tp, result));
        }
    }
    out
}

/// The abort marker `kafka-transactions.sh abort` sends: WriteTxnMarkers, result abort.
pub fn abort_request(spec: &AbortSpec) -> WriteTxnMarkersRequest {
    let topic = WritableTxnMarkerTopic::default()
        .with_name(TopicName(s(&spec.partition.topic)))
        .with_partition_indexes(vec![spec.partition.partition]);
    WriteTxnMarkersRequest::default().with_markers(vec![WritableTxnMarker::default()
        .with_producer_id(ProducerId(spec.producer_id))
        .with_producer_epoch(spec.producer_epoch)
        .with_transaction_result(false)
        .with_coordinator_epoch(spec.coordinator_epoch)
        .with_topics(vec![topic])])
}

/// The partition's code in a WriteTxnMarkers response.
pub fn parse_abort(resp: WriteTxnMarkersResponse, spec: &AbortSpec) -> Result<(), KafkaError> {
    let code = resp
        .markers
        .iter()
        .filter(|m| m.producer_id.0 == spec.producer_id)
        .flat_map(|m| m.topics.iter())
        .filter(|t| t.name.0.as_str() == spec.partition.topic)
        .flat_map(|t| t.partitions.iter())
        .find(|p| p.partition_index == spec.partition.partition)
        .map(|p| p.error_code)
        .ok_or_else(|| missing_result(&spec.partition.to_string()))?;
    KafkaError::check(code, None)
}

/// A FindCoordinator request for one transactional id (key type 1, FindCoordinator v1+).
fn find_txn_coordinator_request(id: &str, version: i16) -> Result<FindCoordinatorRequest> {
    if version < 1 {
        return Err(Error::InvalidArgument(
            "finding a transaction coordinator needs FindCoordinator v1".to_string(),
        ));
    }
    let mut req = FindCoordinatorRequest::default().with_key_type(KEY_TYPE_TRANSACTION);
    if version >= 4 {
        req.coordinator_keys = vec![s(id)];
    } else {
        req.key = s(id);
    }
    Ok(req)
}

/// Each partition's leader (partitions of unknown topics, or without a leader, answered at
/// once; the second is retriable).
fn by_leader(
    admin: &Admin,
    partitions: &[TopicPartition],
) -> (
    BTreeMap<i32, Vec<TopicPartition>>,
    EntityResult<TopicPartition, Vec<ProducerState>>,
) {
    let md = admin.client.metadata();
    let mut routed: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    let mut failed = Vec::new();
    for tp in partitions {
        let leader = match md.topic(&tp.topic).and_then(|t| t.partition(tp.partition)) {
            None => Err(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION),
            Some(p) => p.leader.ok_or(KafkaCode::LEADER_NOT_AVAILABLE),
        };
        match leader {
            Ok(id) => routed.entry(id).or_default().push(tp.clone()),
            Err(code) => failed.push((tp.clone(), Err(KafkaError::new(code, None)))),
        }
    }
    (routed, failed)
}

impl Admin {
    /// Lists the transactional ids of every broker's coordinator shards, merged (an id is on
    /// one coordinator only).
    pub async fn list_transactions(
        &self,
        filter: &ListTransactionsFilter,
    ) -> Result<Vec<TransactionListing>> {
        let md = self
            .client
            .retry("listing brokers", || {
                self.client.refresh_metadata(Some(&[]))
            })
            .await?;
        let mut all: BTreeMap<String, TransactionListing> = BTreeMap::new();
        for broker in &md.brokers {
            let what = format!("ListTransactions on broker {}", broker.id);
            let target = Target::Broker(broker.id);
            let listed = self
                .client
                .retry(&what, || async {
                    let (_, resp) = self
                        .client
                        .send::<ListTransactionsRequest, _>(&target, |v| {
                            list_transactions_request(filter, v)
                        })
                        .await?;
                    parse_list_transactions(resp, broker.id).map_err(|e| Error::kafka(&what, e))
                })
                .await?;
            for t in listed {
                all.insert(t.transactional_id.clone(), t);
            }
        }
        Ok(all.into_values().collect())
    }

    /// The coordinator of a transactional id (FindCoordinator, key type 1).
    pub async fn find_transaction_coordinator(&self, id: &str) -> Result<i32> {
        let (_, resp) = self
            .client
            .send::<FindCoordinatorRequest, _>(&Target::Any, |v| {
                find_txn_coordinator_request(id, v)
            })
            .await?;
        Ok(parse_find_coordinator(id, resp)?.id)
    }

    /// Describes each transactional id at its coordinator; one result per id, in order.
    pub async fn describe_transactions(
        &self,
        ids: &[String],
    ) -> Vec<(String, Result<TransactionDescription>)> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            out.push((id.clone(), self.describe_transaction(id).await));
        }
        out
    }

    async fn describe_transaction(&self, id: &str) -> Result<TransactionDescription> {
        let keys = vec![id.to_string()];
        let results = retry_entities(
            &self.client,
            "DescribeTransactions",
            keys,
            |pending| async move {
                let coordinator = self.find_transaction_coordinator(id).await?;
                let ids = pending.iter().map(|i| TransactionalId(s(i))).collect();
                let (_, resp) = self
                    .client
                    .send::<DescribeTransactionsRequest, _>(&Target::Broker(coordinator), |_| {
                        Ok(DescribeTransactionsRequest::default().with_transactional_ids(ids))
                    })
                    .await?;
                Ok(parse_describe_transactions(resp, coordinator))
            },
        )
        .await?;
        match results.into_iter().next() {
            Some((_, Ok(d))) => Ok(d),
            Some((_, Err(e))) => Err(Error::kafka(format!("transactional id '{id}'"), e)),
            None => Err(Error::kafka(
                "DescribeTransactions",
                missing_result(&format!("transactional id '{id}'")),
            )),
        }
    }

    /// The active producers of each partition, asked of its leader.
    pub async fn describe_producers(
        &self,
        partitions: &[TopicPartition],
    ) -> Result<BTreeMap<TopicPartition, std::result::Result<Vec<ProducerState>, KafkaError>>> {
        let mut topics: Vec<String> = partitions.iter().map(|tp| tp.topic.clone()).collect();
        topics.sort();
        topics.dedup();
        let keys: Vec<TopicPartition> = partitions
            .iter()
            .cloned()
            .collect::<BTreeSet<_>>()
            .into_iter()
            .collect();
        let results = retry_entities(&self.client, "DescribeProducers", keys, |pending| {
            let topics = topics.clone();
            async move {
                self.client.refresh_metadata(Some(&topics)).await?;
                let (routed, mut results) = by_leader(self, &pending);
                for (leader, group) in routed {
                    let (_, resp) = self
                        .client
                        .send::<DescribeProducersRequest, _>(&Target::Broker(leader), |_| {
                            Ok(describe_producers_request(&group))
                        })
                        .await?;
                    results.extend(parse_describe_producers(resp));
                }
                Ok(results)
            }
        })
        .await?;
        Ok(results.into_iter().collect())
    }

    /// Writes an abort marker for `spec`'s producer to its partition's leader: ends a hanging
    /// transaction the coordinator no longer knows (needs CLUSTER_ACTION, as in Kafka).
    pub async fn abort_transaction(&self, spec: &AbortSpec) -> Result<()> {
        let what = format!("aborting the transaction in {}", spec.partition);
        let topics = vec![spec.partition.topic.clone()];
        self.client
            .retry(&what, || async {
                let md = self.client.refresh_metadata(Some(&topics)).await?;
                let leader = md
                    .topic(&spec.partition.topic)
                    .and_then(|t| t.partition(spec.partition.partition))
                    .ok_or_else(|| {
                        Error::kafka(
                            &what,
                            KafkaError::new(KafkaCode::UNKNOWN_TOPIC_OR_PARTITION, None),
                        )
                    })?
                    .leader
                    .ok_or_else(|| {
                        Error::kafka(
                            &what,
                            KafkaError::new(KafkaCode::LEADER_NOT_AVAILABLE, None),
                        )
                    })?;
                let (_, resp) = self
                    .client
                    .send::<WriteTxnMarkersRequest, _>(&Target::Broker(leader), |_| {
                        Ok(abort_request(spec))
                    })
                    .await?;
                parse_abort(resp, spec).map_err(|e| Error::kafka(&what, e))
            })
            .await
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use kafka_protocol::messages::describe_transactions_response::{TopicData, TransactionState};
    use kafka_protocol::protocol::{Decodable, Message};

    #[test]
    fn list_request_sends_the_duration_only_from_v1() {
        let f = ListTransactionsFilter {
            states: vec!["Ongoing".into()],
            producer_ids: vec![7],
            min_duration_ms: Some(60_000),
        };
        assert!(list_transactions_request(&f, 0).is_err());
        let req = list_transactions_request(&f, 1).unwrap();
        let frame = encode_request(&req, 1, 1, "c").unwrap();
        let mut body = frame.slice(4..);
        kafka_protocol::protocol::decode_request_header_from_buffer(&mut body).unwrap();
        let back = ListTransactionsRequest::decode(&mut body, 1).unwrap();
        assert_eq!(back.duration_filter, 60_000);
        assert_eq!(back.producer_id_filters, vec![ProducerId(7)]);
        let none = list_transactions_request(&ListTransactionsFilter::default(), 1).unwrap();
        assert_eq!(none.duration_filter, -1);
    }

    #[test]
    fn describe_response_per_id() {
        let ok = TransactionState::default()
            .with_transactional_id(TransactionalId(s("tx")))
            .with_transaction_state(s("Ongoing"))
            .with_producer_id(ProducerId(5))
            .with_producer_epoch(2)
            .with_transaction_timeout_ms(60_000)
            .with_transaction_start_time_ms(1_000)
            .with_topics(vec![TopicData::default()
                .with_topic(TopicName(s("t")))
                .with_partitions(vec![0, 3])]);
        let missing = TransactionState::default()
            .with_transactional_id(TransactionalId(s("gone")))
            .with_error_code(105)
            .with_transaction_start_time_ms(-1);
        let resp =
            DescribeTransactionsResponse::default().with_transaction_states(vec![ok, missing]);
        let frame = encode_response_frame::<DescribeTransactionsRequest>(&resp, 0, 1);
        let parsed = parse_describe_transactions(
            decode_response::<DescribeTransactionsRequest>(frame, 0).unwrap(),
            1,
        );
        let d = parsed[0].1.as_ref().unwrap();
        assert_eq!(
            d.partitions,
            vec![TopicPartition::new("t", 0), TopicPartition::new("t", 3)]
        );
        assert_eq!(
            (d.producer_id, d.producer_epoch, d.start_time_ms),
            (5, 2, Some(1_000))
        );
        assert_eq!(parsed[1].1.as_ref().unwrap_err().code, KafkaCode(105));
    }

    #[test]
    fn abort_is_an_abort_marker_of_the_producer() {
        let spec = AbortSpec {
            partition: TopicPartition::new("t", 2),
            producer_id: 9,
            producer_epoch: 3,
            coordinator_epoch: 4,
        };
        let req = abort_request(&spec);
        let m = &req.markers[0];
        assert!(!m.transaction_result);
        assert_eq!(
            (m.producer_id.0, m.producer_epoch, m.coordinator_epoch),
            (9, 3, 4)
        );
        assert_eq!(m.topics[0].partition_indexes, vec![2]);
        let v = WriteTxnMarkersRequest::VERSIONS.max;
        encode_request(&req, v, 1, "c").unwrap();
    }
}
