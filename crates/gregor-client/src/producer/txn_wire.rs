//! The transactional requests on the wire: FindCoordinator (transaction or group key),
//! InitProducerId with a transactional id, AddPartitionsToTxn (the client form, v3 and
//! below), AddOffsetsToTxn, TxnOffsetCommit and EndTxn, and their answers as the transaction
//! manager takes them.

use std::collections::BTreeMap;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::txn_offset_commit_request::{
    TxnOffsetCommitRequestPartition, TxnOffsetCommitRequestTopic,
};
use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddOffsetsToTxnResponse, AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse, EndTxnRequest, EndTxnResponse, FindCoordinatorRequest,
    FindCoordinatorResponse, GroupId, InitProducerIdRequest, InitProducerIdResponse, ProducerId,
    TopicName, TransactionalId, TxnOffsetCommitRequest, TxnOffsetCommitResponse,
};
use kafka_protocol::protocol::{StrBytes, VersionRange};

use super::wire::ProducerIdentity;
use crate::error::{KafkaCode, KafkaError};
use crate::types::{ConsumerGroupMetadata, TopicPartition};

/// Versions this client sends: the transaction-version-1 protocol (the client adds partitions
/// with AddPartitionsToTxn; no epoch bump per transaction). AddPartitionsToTxn v4+ is the
/// brokers' verification form; the versions above these caps belong to KIP-890 part 2
/// (transaction version 2), which this producer does not speak yet.
pub const ADD_PARTITIONS_VERSIONS: VersionRange = VersionRange { min: 0, max: 3 };
pub const END_TXN_VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };
pub const TXN_OFFSET_COMMIT_VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };
pub const INIT_PRODUCER_ID_VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };
pub const ADD_OFFSETS_VERSIONS: VersionRange = VersionRange { min: 0, max: 4 };
/// Produce v12+ lets a transaction-version-2 broker add partitions implicitly; a
/// transactional producer of version 1 sends at most v11, as Kafka's producer does.
pub const TXN_PRODUCE_MAX_VERSION: i16 = 11;
/// Transaction version 2 (KIP-890 part 2): EndTxn v5 bumps the epoch and names it,
/// TxnOffsetCommit v5 and Produce v12 have their partitions added by the brokers.
pub const END_TXN_V2_VERSIONS: VersionRange = VersionRange { min: 5, max: 5 };
pub const TXN_OFFSET_COMMIT_V2_VERSIONS: VersionRange = VersionRange { min: 5, max: 5 };
pub const TXN_PRODUCE_V2_MIN_VERSION: i16 = 12;

/// The EndTxn versions for a transaction of version 2 or not.
pub fn end_txn_versions(version2: bool) -> VersionRange {
    if version2 {
        END_TXN_V2_VERSIONS
    } else {
        END_TXN_VERSIONS
    }
}

/// The TxnOffsetCommit versions for a transaction of version 2 or not.
pub fn txn_offset_commit_versions(version2: bool) -> VersionRange {
    if version2 {
        TXN_OFFSET_COMMIT_V2_VERSIONS
    } else {
        TXN_OFFSET_COMMIT_VERSIONS
    }
}

/// Whether a broker offers transaction version 2: the cluster finalized `transaction.version`
/// at 2 or more, and the broker serves the request versions it needs (Kafka's producer checks
/// the same).
pub fn offers_version2(v: &crate::versions::BrokerVersions) -> bool {
    use kafka_protocol::messages::ApiKey;
    let serves = |key: ApiKey, min: i16| v.range(key as i16).is_some_and(|r| r.max >= min);
    v.finalized_level("transaction.version") >= 2
        && serves(ApiKey::Produce, TXN_PRODUCE_V2_MIN_VERSION)
        && serves(ApiKey::EndTxn, END_TXN_V2_VERSIONS.min)
        && serves(ApiKey::TxnOffsetCommit, TXN_OFFSET_COMMIT_V2_VERSIONS.min)
}
/// The key type only exists from v1.
pub const FIND_COORDINATOR_VERSIONS: VersionRange = VersionRange { min: 1, max: 6 };

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

/// FindCoordinator for `key` of `key_type` (0 group, 1 transaction), one key before v4, a
/// batch of keys from v4.
pub fn find_coordinator_request(key_type: i8, key: &str, version: i16) -> FindCoordinatorRequest {
    let mut req = FindCoordinatorRequest::default().with_key_type(key_type);
    if version >= 4 {
        req.coordinator_keys = vec![s(key)];
    } else {
        req.key = s(key);
    }
    req
}

/// The coordinator's broker id, or the error (with the broker's message).
pub fn parse_find_coordinator(key: &str, resp: FindCoordinatorResponse) -> Result<i32, KafkaError> {
    if resp.coordinators.is_empty() {
        KafkaError::check(resp.error_code, resp.error_message.as_deref())?;
        return Ok(resp.node_id.0);
    }
    match resp
        .coordinators
        .into_iter()
        .find(|c| c.key.as_str() == key)
    {
        Some(c) => {
            KafkaError::check(c.error_code, c.error_message.as_deref())?;
            Ok(c.node_id.0)
        }
        None => Err(KafkaError::new(
            KafkaCode::COORDINATOR_NOT_AVAILABLE,
            Some(format!("FindCoordinator answer does not mention '{key}'")),
        )),
    }
}

/// InitProducerId for a transactional id. `current` (v3+) asks for an epoch bump of that
/// producer id instead of a fresh start (KIP-360).
pub fn init_producer_id_request(
    transactional_id: &str,
    transaction_timeout_ms: i32,
    current: Option<ProducerIdentity>,
    version: i16,
) -> InitProducerIdRequest {
    let mut req = InitProducerIdRequest::default()
        .with_transactional_id(Some(TransactionalId(s(transactional_id))))
        .with_transaction_timeout_ms(transaction_timeout_ms);
    if version >= 3 {
        let id = current.unwrap_or(ProducerIdentity {
            producer_id: -1,
            epoch: -1,
        });
        req.producer_id = ProducerId(id.producer_id);
        req.producer_epoch = id.epoch;
    }
    req
}

pub fn parse_init_producer_id(
    resp: InitProducerIdResponse,
) -> Result<ProducerIdentity, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    Ok(ProducerIdentity {
        producer_id: resp.producer_id.0,
        epoch: resp.producer_epoch,
    })
}

/// AddPartitionsToTxn in the client's form (v3 and below: one transaction, its topics).
pub fn add_partitions_request(
    transactional_id: &str,
    identity: ProducerIdentity,
    partitions: &[TopicPartition],
) -> AddPartitionsToTxnRequest {
    let mut topics: BTreeMap<&str, Vec<i32>> = BTreeMap::new();
    for tp in partitions {
        topics.entry(&tp.topic).or_default().push(tp.partition);
    }
    AddPartitionsToTxnRequest::default()
        .with_v3_and_below_transactional_id(TransactionalId(s(transactional_id)))
        .with_v3_and_below_producer_id(ProducerId(identity.producer_id))
        .with_v3_and_below_producer_epoch(identity.epoch)
        .with_v3_and_below_topics(
            topics
                .into_iter()
                .map(|(name, partitions)| {
                    AddPartitionsToTxnTopic::default()
                        .with_name(TopicName(s(name)))
                        .with_partitions(partitions)
                })
                .collect(),
        )
}

/// Per-partition results of AddPartitionsToTxn (v3 and below).
pub fn parse_add_partitions(
    resp: AddPartitionsToTxnResponse,
) -> Vec<(TopicPartition, Result<(), KafkaError>)> {
    let mut out = Vec::new();
    for t in resp.results_by_topic_v3_and_below {
        for p in t.results_by_partition {
            out.push((
                TopicPartition::new(t.name.0.as_str(), p.partition_index),
                KafkaError::check(p.partition_error_code, None),
            ));
        }
    }
    out
}

pub fn add_offsets_request(
    transactional_id: &str,
    identity: ProducerIdentity,
    group_id: &str,
) -> AddOffsetsToTxnRequest {
    AddOffsetsToTxnRequest::default()
        .with_transactional_id(TransactionalId(s(transactional_id)))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_group_id(GroupId(s(group_id)))
}

pub fn parse_add_offsets(resp: AddOffsetsToTxnResponse) -> Result<(), KafkaError> {
    KafkaError::check(resp.error_code, None)
}

/// TxnOffsetCommit to the group coordinator; from v3 with the consumer's generation, member
/// id and instance id, so a member fenced since cannot commit.
pub fn txn_offset_commit_request(
    transactional_id: &str,
    identity: ProducerIdentity,
    group: &ConsumerGroupMetadata,
    offsets: &BTreeMap<TopicPartition, i64>,
    version: i16,
) -> TxnOffsetCommitRequest {
    let mut topics: BTreeMap<&str, Vec<TxnOffsetCommitRequestPartition>> = BTreeMap::new();
    for (tp, offset) in offsets {
        topics.entry(&tp.topic).or_default().push(
            TxnOffsetCommitRequestPartition::default()
                .with_partition_index(tp.partition)
                .with_committed_offset(*offset)
                .with_committed_leader_epoch(-1)
                .with_committed_metadata(Some(StrBytes::default())),
        );
    }
    let mut req = TxnOffsetCommitRequest::default()
        .with_transactional_id(TransactionalId(s(transactional_id)))
        .with_group_id(GroupId(s(&group.group_id)))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_topics(
            topics
                .into_iter()
                .map(|(name, partitions)| {
                    TxnOffsetCommitRequestTopic::default()
                        .with_name(TopicName(s(name)))
                        .with_partitions(partitions)
                })
                .collect(),
        );
    if version >= 3 {
        req.generation_id = group.generation_id;
        req.member_id = s(&group.member_id);
        req.group_instance_id = group.group_instance_id.as_deref().map(s);
    }
    req
}

pub fn parse_txn_offset_commit(
    resp: TxnOffsetCommitResponse,
) -> Vec<(TopicPartition, Result<(), KafkaError>)> {
    let mut out = Vec::new();
    for t in resp.topics {
        for p in t.partitions {
            out.push((
                TopicPartition::new(t.name.0.as_str(), p.partition_index),
                KafkaError::check(p.error_code, None),
            ));
        }
    }
    out
}

pub fn end_txn_request(
    transactional_id: &str,
    identity: ProducerIdentity,
    commit: bool,
) -> EndTxnRequest {
    EndTxnRequest::default()
        .with_transactional_id(TransactionalId(s(transactional_id)))
        .with_producer_id(ProducerId(identity.producer_id))
        .with_producer_epoch(identity.epoch)
        .with_committed(commit)
}

/// EndTxn's answer; from v5, the producer id and epoch the producer goes on with.
pub fn parse_end_txn(
    resp: EndTxnResponse,
    version: i16,
) -> Result<Option<ProducerIdentity>, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    Ok((version >= 5).then_some(ProducerIdentity {
        producer_id: resp.producer_id.0,
        epoch: resp.producer_epoch,
    }))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use kafka_protocol::messages::add_partitions_to_txn_response::{
        AddPartitionsToTxnPartitionResult, AddPartitionsToTxnTopicResult,
    };
    use kafka_protocol::messages::find_coordinator_response::Coordinator;
    use kafka_protocol::messages::txn_offset_commit_response::{
        TxnOffsetCommitResponsePartition, TxnOffsetCommitResponseTopic,
    };
    use kafka_protocol::protocol::{Decodable, Encodable};

    const ID: ProducerIdentity = ProducerIdentity {
        producer_id: 7000,
        epoch: 3,
    };

    fn versions(r: VersionRange) -> std::ops::RangeInclusive<i16> {
        r.min..=r.max
    }

    /// Encodes and decodes `req` in `version`, as the broker would read it.
    fn round_trip<R: Encodable + Decodable + kafka_protocol::protocol::Request>(
        req: &R,
        version: i16,
    ) -> R {
        encode_request(req, version, 1, "c").unwrap_or_else(|e| panic!("v{version}: {e}"));
        let mut buf = bytes::BytesMut::new();
        req.encode(&mut buf, version).unwrap();
        R::decode(&mut buf.freeze(), version).unwrap()
    }

    #[test]
    fn find_coordinator_names_the_key_type_in_both_layouts() {
        for v in versions(FIND_COORDINATOR_VERSIONS) {
            let got = round_trip(&find_coordinator_request(1, "tx", v), v);
            assert_eq!(got.key_type, 1, "v{v}");
            if v >= 4 {
                assert_eq!(got.coordinator_keys, vec![s("tx")]);
            } else {
                assert_eq!(got.key.as_str(), "tx");
            }
        }
        assert_eq!(find_coordinator_request(0, "g", 3).key_type, 0);
    }

    #[test]
    fn find_coordinator_answers_carry_the_brokers_refusal() {
        let refused =
            FindCoordinatorResponse::default().with_coordinators(vec![Coordinator::default()
                .with_key(s("tx"))
                .with_error_code(53)
                .with_error_message(Some(s("transactions are not supported")))]);
        let frame = encode_response_frame::<FindCoordinatorRequest>(&refused, 4, 1);
        let e = parse_find_coordinator(
            "tx",
            decode_response::<FindCoordinatorRequest>(frame, 4).unwrap(),
        )
        .unwrap_err();
        assert_eq!(e.code, KafkaCode(53));
        assert!(e.to_string().contains("not supported"), "{e}");
        let old = FindCoordinatorResponse::default().with_node_id(4.into());
        assert_eq!(parse_find_coordinator("tx", old), Ok(4));
        let other = FindCoordinatorResponse::default()
            .with_coordinators(vec![Coordinator::default().with_key(s("other"))]);
        assert_eq!(
            parse_find_coordinator("tx", other).unwrap_err().code,
            KafkaCode::COORDINATOR_NOT_AVAILABLE
        );
    }

    #[test]
    fn init_producer_id_carries_the_transaction_and_the_bump() {
        for v in versions(INIT_PRODUCER_ID_VERSIONS) {
            let got = round_trip(&init_producer_id_request("tx", 60_000, Some(ID), v), v);
            assert_eq!(
                got.transactional_id.as_ref().map(|t| t.0.as_str()),
                Some("tx")
            );
            assert_eq!(got.transaction_timeout_ms, 60_000);
            if v >= 3 {
                assert_eq!((got.producer_id.0, got.producer_epoch), (7000, 3), "v{v}");
            }
            let fresh = round_trip(&init_producer_id_request("tx", 1, None, v), v);
            if v >= 3 {
                assert_eq!((fresh.producer_id.0, fresh.producer_epoch), (-1, -1));
            }
        }
        let refused = InitProducerIdResponse::default().with_error_code(53);
        assert_eq!(
            parse_init_producer_id(refused).unwrap_err().code,
            KafkaCode(53)
        );
    }

    #[test]
    fn add_partitions_groups_by_topic_in_the_client_form() {
        let parts = vec![
            TopicPartition::new("a", 0),
            TopicPartition::new("b", 2),
            TopicPartition::new("a", 1),
        ];
        for v in versions(ADD_PARTITIONS_VERSIONS) {
            let got = round_trip(&add_partitions_request("tx", ID, &parts), v);
            assert_eq!(got.v3_and_below_transactional_id.0.as_str(), "tx");
            assert_eq!(got.v3_and_below_producer_id.0, 7000);
            assert_eq!(got.v3_and_below_producer_epoch, 3);
            let topics: Vec<(String, Vec<i32>)> = got
                .v3_and_below_topics
                .iter()
                .map(|t| (t.name.0.to_string(), t.partitions.clone()))
                .collect();
            assert_eq!(
                topics,
                vec![("a".to_string(), vec![0, 1]), ("b".to_string(), vec![2])]
            );
        }
        let resp = AddPartitionsToTxnResponse::default().with_results_by_topic_v3_and_below(vec![
            AddPartitionsToTxnTopicResult::default()
                .with_name(TopicName(s("a")))
                .with_results_by_partition(vec![
                    AddPartitionsToTxnPartitionResult::default().with_partition_index(0),
                    AddPartitionsToTxnPartitionResult::default()
                        .with_partition_index(1)
                        .with_partition_error_code(51),
                ]),
        ]);
        let frame = encode_response_frame::<AddPartitionsToTxnRequest>(&resp, 3, 1);
        let parsed =
            parse_add_partitions(decode_response::<AddPartitionsToTxnRequest>(frame, 3).unwrap());
        assert_eq!(parsed[0], (TopicPartition::new("a", 0), Ok(())));
        assert_eq!(parsed[1].1.as_ref().unwrap_err().code, KafkaCode(51));
    }

    #[test]
    fn add_offsets_and_end_txn_carry_the_identity() {
        for v in versions(ADD_OFFSETS_VERSIONS) {
            let got = round_trip(&add_offsets_request("tx", ID, "g"), v);
            assert_eq!(got.transactional_id.0.as_str(), "tx");
            assert_eq!((got.producer_id.0, got.producer_epoch), (7000, 3));
            assert_eq!(got.group_id.0.as_str(), "g");
        }
        for v in versions(END_TXN_VERSIONS) {
            for commit in [true, false] {
                let got = round_trip(&end_txn_request("tx", ID, commit), v);
                assert_eq!(got.committed, commit);
                assert_eq!((got.producer_id.0, got.producer_epoch), (7000, 3));
            }
        }
        assert_eq!(
            parse_end_txn(EndTxnResponse::default().with_error_code(90), 4)
                .unwrap_err()
                .code,
            KafkaCode(90)
        );
        assert!(parse_add_offsets(AddOffsetsToTxnResponse::default()).is_ok());
    }

    #[test]
    fn txn_offset_commit_sends_the_group_metadata_from_v3() {
        let group = ConsumerGroupMetadata {
            group_id: "g".into(),
            generation_id: 5,
            member_id: "m-1".into(),
            group_instance_id: Some("i-1".into()),
        };
        let offsets: BTreeMap<TopicPartition, i64> = [
            (TopicPartition::new("in", 1), 42),
            (TopicPartition::new("in", 0), 7),
        ]
        .into();
        for v in versions(TXN_OFFSET_COMMIT_VERSIONS) {
            let got = round_trip(&txn_offset_commit_request("tx", ID, &group, &offsets, v), v);
            assert_eq!(got.group_id.0.as_str(), "g");
            assert_eq!((got.producer_id.0, got.producer_epoch), (7000, 3));
            let parts: Vec<(i32, i64)> = got.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset))
                .collect();
            assert_eq!(parts, vec![(0, 7), (1, 42)]);
            if v >= 3 {
                assert_eq!(got.generation_id, 5, "v{v}");
                assert_eq!(got.member_id.as_str(), "m-1");
                assert_eq!(got.group_instance_id.as_deref(), Some("i-1"));
            }
        }
        let resp = TxnOffsetCommitResponse::default().with_topics(vec![
            TxnOffsetCommitResponseTopic::default()
                .with_name(TopicName(s("in")))
                .with_partitions(vec![TxnOffsetCommitResponsePartition::default()
                    .with_partition_index(0)
                    .with_error_code(22)]),
        ]);
        let parsed = parse_txn_offset_commit(resp);
        assert_eq!(parsed[0].0, TopicPartition::new("in", 0));
        assert_eq!(parsed[0].1.as_ref().unwrap_err().code, KafkaCode(22));
    }
}
