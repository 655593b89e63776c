//! Produce wire format: v2 record batches (encoded and compressed by kafka-protocol's
//! `RecordBatchEncoder`), Produce requests and responses, InitProducerId.

use bytes::{Bytes, BytesMut};
use kafka_protocol::indexmap::IndexMap;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::{
    InitProducerIdRequest, InitProducerIdResponse, ProduceRequest, ProduceResponse, ProducerId,
    TopicName, TransactionalId,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::{
    Compression as Codec, Record, RecordBatchEncoder, RecordEncodeOptions, TimestampType,
};
use uuid::Uuid;

use crate::error::{Error, KafkaError, Result};
use crate::types::TopicPartition;

/// One record as the application gave it, before it has an offset.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordData {
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    /// Header names and values. kafka-protocol keeps headers in a map, so a repeated name
    /// keeps its last value.
    pub headers: Vec<(String, Option<Bytes>)>,
    /// Create time in milliseconds.
    pub timestamp: i64,
}

impl RecordData {
    /// Bytes this record adds to a batch, roughly (varint overheads rounded up), for
    /// `batch.size` and `max.request.size` accounting.
    pub fn estimated_size(&self) -> usize {
        let k = self.key.as_ref().map_or(0, Bytes::len);
        let v = self.value.as_ref().map_or(0, Bytes::len);
        let h: usize = self
            .headers
            .iter()
            .map(|(n, v)| n.len() + v.as_ref().map_or(0, Bytes::len) + 10)
            .sum();
        k + v + h + 21
    }
}

/// The producer identity stamped on idempotent batches.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdentity {
    pub producer_id: i64,
    pub epoch: i16,
}

/// Bytes of the fixed v2 batch header, for size estimates.
pub const BATCH_OVERHEAD: usize = 61;

/// Encodes records as one v2 batch. With an identity, the batch carries the producer id,
/// epoch and `base_sequence` (record `i` has sequence `base_sequence + i`).
pub fn encode_batch(
    records: &[RecordData],
    identity: Option<ProducerIdentity>,
    base_sequence: i32,
    compression: Codec,
) -> Result<Bytes> {
    encode_batch_as(records, identity, base_sequence, compression, false)
}

/// [`encode_batch`], with the transactional attribute (bit 4) when `transactional`.
pub fn encode_batch_as(
    records: &[RecordData],
    identity: Option<ProducerIdentity>,
    base_sequence: i32,
    compression: Codec,
    transactional: bool,
) -> Result<Bytes> {
    let (producer_id, producer_epoch, base_sequence) = match identity {
        Some(id) => (id.producer_id, id.epoch, base_sequence),
        None => (-1, -1, -1),
    };
    let recs: Vec<Record> = records
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let mut headers = IndexMap::new();
            for (name, value) in &r.headers {
                headers.insert(StrBytes::from_string(name.clone()), value.clone());
            }
            Record {
                transactional,
                control: false,
                partition_leader_epoch: -1,
                producer_id,
                producer_epoch,
                timestamp_type: TimestampType::Creation,
                // Offsets are deltas the leader rebases. kafka-protocol starts a new batch
                // whenever `offset - sequence` changes and derives the batch's base sequence
                // from the first record, so sequences step with offsets in both cases: from
                // the base sequence, or from -1 (no sequence) for non-idempotent batches.
                offset: i as i64,
                sequence: base_sequence.wrapping_add(i as i32),
                timestamp: r.timestamp,
                key: r.key.clone(),
                value: encoded_value(records, i),
                headers,
                delete_horizon: false,
            }
        })
        .collect();
    let mut buf = BytesMut::new();
    RecordBatchEncoder::encode(
        &mut buf,
        recs.iter(),
        &RecordEncodeOptions {
            version: 2,
            compression,
        },
    )
    .map_err(|e| Error::InvalidArgument(format!("cannot encode record batch: {e}")))?;
    Ok(buf.freeze())
}

/// Record `i`'s value as encoded: its own, unless the simulator planted
/// [`crate::simulation::PlantedBug::BatchValueBufferReused`] (then the values before it too).
#[cfg(feature = "simulation")]
fn encoded_value(records: &[RecordData], i: usize) -> Option<Bytes> {
    use crate::simulation::{planted, PlantedBug};
    if i == 0 || !planted(PlantedBug::BatchValueBufferReused) {
        return records.get(i).and_then(|r| r.value.clone());
    }
    let mut buf = BytesMut::new();
    for v in records.iter().take(i + 1).filter_map(|r| r.value.as_ref()) {
        buf.extend_from_slice(v);
    }
    Some(buf.freeze())
}

#[cfg(not(feature = "simulation"))]
fn encoded_value(records: &[RecordData], i: usize) -> Option<Bytes> {
    records.get(i).and_then(|r| r.value.clone())
}

/// One batch of a Produce request.
#[derive(Debug, Clone)]
pub struct BatchToSend {
    pub tp: TopicPartition,
    /// Needed from Produce v13, which names topics by id.
    pub topic_id: Uuid,
    pub records: Bytes,
}

/// A Produce request carrying `batches` (at most one per partition), with the producer's
/// `transactional.id` when it has one.
pub fn produce_request(
    batches: &[BatchToSend],
    acks: i16,
    timeout_ms: i32,
    version: i16,
    transactional_id: Option<&str>,
) -> ProduceRequest {
    let mut topics: Vec<TopicProduceData> = Vec::new();
    for b in batches {
        let part = PartitionProduceData::default()
            .with_index(b.tp.partition)
            .with_records(Some(b.records.clone()));
        let same = |t: &TopicProduceData| {
            if version >= 13 {
                t.topic_id == b.topic_id
            } else {
                t.name.0.as_str() == b.tp.topic
            }
        };
        match topics.iter_mut().find(|t| same(t)) {
            Some(t) => t.partition_data.push(part),
            None => {
                let mut t = TopicProduceData::default().with_partition_data(vec![part]);
                if version >= 13 {
                    t.topic_id = b.topic_id;
                } else {
                    t.name = TopicName(StrBytes::from_string(b.tp.topic.clone()));
                }
                topics.push(t);
            }
        }
    }
    ProduceRequest::default()
        .with_transactional_id(
            transactional_id.map(|t| TransactionalId(StrBytes::from_string(t.to_string()))),
        )
        .with_acks(acks)
        .with_timeout_ms(timeout_ms)
        .with_topic_data(topics)
}

/// A partition's answer: the base offset and log-append time (-1 for create time) of its batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    pub base_offset: i64,
    pub log_append_time: i64,
}

/// A partition's refusal in a Produce response: the error, and the records the broker named
/// (KIP-467 `record_errors`: index in the batch, message), if any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rejected {
    pub error: KafkaError,
    pub records: Vec<(i32, Option<String>)>,
}

/// Per-partition results of a Produce response. `batches` resolves v13 topic ids to names.
pub fn parse_produce_response(
    resp: ProduceResponse,
    batches: &[BatchToSend],
) -> Vec<(TopicPartition, std::result::Result<Appended, Rejected>)> {
    let mut out = Vec::new();
    for t in resp.responses {
        let name = if t.name.0.is_empty() {
            match batches.iter().find(|b| b.topic_id == t.topic_id) {
                Some(b) => b.tp.topic.clone(),
                None => continue,
            }
        } else {
            t.name.0.to_string()
        };
        for p in t.partition_responses {
            let message = p.error_message.as_ref().map(|m| m.as_str());
            let result = KafkaError::check(p.error_code, message)
                .map(|()| Appended {
                    base_offset: p.base_offset,
                    log_append_time: p.log_append_time_ms,
                })
                .map_err(|error| Rejected {
                    error,
                    records: p
                        .record_errors
                        .iter()
                        .map(|r| {
                            (
                                r.batch_index,
                                r.batch_index_error_message.as_ref().map(|m| m.to_string()),
                            )
                        })
                        .collect(),
                });
            out.push((TopicPartition::new(name.clone(), p.index), result));
        }
    }
    out
}

/// InitProducerId for an idempotent (non-transactional) producer.
pub fn init_producer_id_request(version: i16) -> InitProducerIdRequest {
    let mut req = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(-1);
    if version >= 3 {
        req.producer_id = ProducerId(-1);
        req.producer_epoch = -1;
    }
    req
}

pub fn parse_init_producer_id(
    resp: InitProducerIdResponse,
) -> std::result::Result<ProducerIdentity, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    Ok(ProducerIdentity {
        producer_id: resp.producer_id.0,
        epoch: resp.producer_epoch,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use kafka_protocol::messages::produce_response::{
        BatchIndexAndErrorMessage, PartitionProduceResponse, TopicProduceResponse,
    };
    use kafka_protocol::protocol::Message;
    use kafka_protocol::records::RecordBatchDecoder;

    fn rec(k: &str, v: &str) -> RecordData {
        RecordData {
            key: Some(Bytes::copy_from_slice(k.as_bytes())),
            value: Some(Bytes::copy_from_slice(v.as_bytes())),
            headers: vec![("h".into(), Some(Bytes::from_static(b"x")))],
            timestamp: 1_700_000_000_000,
        }
    }

    #[test]
    fn batches_round_trip_with_every_codec_and_carry_sequences() {
        let records: Vec<RecordData> = (0..50).map(|i| rec(&format!("k{i}"), "v")).collect();
        for codec in [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ] {
            let id = ProducerIdentity {
                producer_id: 42,
                epoch: 3,
            };
            let mut bytes = encode_batch(&records, Some(id), 7, codec).unwrap();
            let sets = RecordBatchDecoder::decode_all(&mut bytes).unwrap();
            assert_eq!(sets.len(), 1, "{codec:?}: one batch");
            assert_eq!(sets[0].compression, codec);
            let rs = &sets[0].records;
            assert_eq!(rs.len(), 50);
            assert_eq!(rs[0].producer_id, 42);
            assert_eq!(rs[0].producer_epoch, 3);
            assert_eq!(rs[0].sequence, 7);
            assert_eq!(rs[49].sequence, 56);
            assert_eq!(rs[49].key.as_deref(), Some(&b"k49"[..]));
            assert_eq!(
                rs[3].headers.get(&b"h"[..]).cloned().flatten().as_deref(),
                Some(&b"x"[..])
            );
        }
    }

    #[test]
    fn non_idempotent_batches_have_no_producer_and_stay_one_batch() {
        let records = [rec("a", "b"), rec("c", "d"), rec("e", "f")];
        let mut bytes = encode_batch(&records, None, 0, Codec::None).unwrap();
        let infos = RecordBatchDecoder::decode_batch_info(&mut bytes.clone()).unwrap();
        assert_eq!(infos.len(), 1, "one batch");
        assert_eq!(infos[0].base_sequence, -1);
        assert_eq!(infos[0].producer_id, -1);
        let sets = RecordBatchDecoder::decode_all(&mut bytes).unwrap();
        assert_eq!(sets[0].records.len(), 3);
        assert_eq!(sets[0].records[0].producer_id, -1);
    }

    #[test]
    fn produce_request_groups_by_topic_in_every_version() {
        let b = |t: &str, p: i32| BatchToSend {
            tp: TopicPartition::new(t, p),
            topic_id: Uuid::from_u128(t.len() as u128),
            records: encode_batch(&[rec("a", "b")], None, 0, Codec::None).unwrap(),
        };
        let batches = vec![b("t", 0), b("uu", 1), b("t", 2)];
        for v in ProduceRequest::VERSIONS.min..=ProduceRequest::VERSIONS.max {
            let req = produce_request(&batches, -1, 30_000, v, None);
            assert_eq!(req.topic_data.len(), 2);
            assert_eq!(req.topic_data[0].partition_data.len(), 2);
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
    }

    #[test]
    fn transactional_batches_and_requests_say_so() {
        let id = ProducerIdentity {
            producer_id: 9,
            epoch: 2,
        };
        let bytes = encode_batch_as(&[rec("a", "b")], Some(id), 4, Codec::None, true).unwrap();
        let infos = RecordBatchDecoder::decode_batch_info(&mut bytes.clone()).unwrap();
        assert!(infos[0].transactional, "attribute bit 4");
        assert_eq!(infos[0].base_sequence, 4);
        let plain = encode_batch(&[rec("a", "b")], Some(id), 4, Codec::None).unwrap();
        let infos = RecordBatchDecoder::decode_batch_info(&mut plain.clone()).unwrap();
        assert!(!infos[0].transactional);
        let batches = vec![BatchToSend {
            tp: TopicPartition::new("t", 0),
            topic_id: Uuid::from_u128(1),
            records: bytes,
        }];
        for v in 3..=ProduceRequest::VERSIONS.max {
            let req = produce_request(&batches, -1, 1_000, v, Some("tx"));
            assert_eq!(
                req.transactional_id.as_ref().map(|t| t.0.as_str()),
                Some("tx")
            );
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
            assert_eq!(
                produce_request(&batches, -1, 1_000, v, None).transactional_id,
                None
            );
        }
    }

    #[test]
    fn produce_response_maps_errors_and_topic_ids() {
        let batches = vec![BatchToSend {
            tp: TopicPartition::new("t", 0),
            topic_id: Uuid::from_u128(9),
            records: Bytes::new(),
        }];
        let resp = ProduceResponse::default().with_responses(vec![TopicProduceResponse::default()
            .with_topic_id(Uuid::from_u128(9))
            .with_partition_responses(vec![
                PartitionProduceResponse::default()
                    .with_index(0)
                    .with_base_offset(10)
                    .with_log_append_time_ms(-1),
                PartitionProduceResponse::default()
                    .with_index(1)
                    .with_error_code(45)
                    .with_base_offset(-1),
                PartitionProduceResponse::default()
                    .with_index(2)
                    .with_error_code(87)
                    .with_base_offset(-1)
                    .with_record_errors(vec![BatchIndexAndErrorMessage::default()
                        .with_batch_index(3)
                        .with_batch_index_error_message(Some("bad".into()))]),
            ])]);
        let frame = encode_response_frame::<ProduceRequest>(&resp, 13, 1);
        let parsed = parse_produce_response(
            decode_response::<ProduceRequest>(frame, 13).unwrap(),
            &batches,
        );
        assert_eq!(parsed[0].0, TopicPartition::new("t", 0));
        assert_eq!(parsed[0].1.as_ref().unwrap().base_offset, 10);
        assert_eq!(
            parsed[1].1.as_ref().unwrap_err().error.code,
            crate::error::KafkaCode(45)
        );
        assert!(parsed[1].1.as_ref().unwrap_err().records.is_empty());
        assert_eq!(
            parsed[2].1.as_ref().unwrap_err().records,
            vec![(3, Some("bad".to_string()))]
        );
    }

    #[test]
    fn init_producer_id_encodes_in_every_version() {
        for v in InitProducerIdRequest::VERSIONS.min..=InitProducerIdRequest::VERSIONS.max {
            encode_request(&init_producer_id_request(v), v, 1, "c")
                .unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
        let ok = InitProducerIdResponse::default()
            .with_producer_id(ProducerId(5))
            .with_producer_epoch(0);
        assert_eq!(
            parse_init_producer_id(ok).unwrap(),
            ProducerIdentity {
                producer_id: 5,
                epoch: 0
            }
        );
        let bad = InitProducerIdResponse::default().with_error_code(15);
        assert!(parse_init_producer_id(bad).is_err());
    }
}
