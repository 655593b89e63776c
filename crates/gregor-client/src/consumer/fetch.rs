//! Fetch requests from positions, and fetched record batches decoded into records (with
//! kafka-protocol's `RecordBatchDecoder`, which also decompresses). Pure.

use bytes::{Buf, Bytes};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use uuid::Uuid;

use crate::error::{KafkaCode, KafkaError};
use crate::types::TopicPartition;

/// A consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub timestamp: i64,
    pub key: Option<Bytes>,
    pub value: Option<Bytes>,
    pub headers: Vec<(String, Option<Bytes>)>,
    /// The leader epoch the batch was written in, when known.
    pub leader_epoch: Option<i32>,
}

/// One partition to fetch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchTarget {
    pub tp: TopicPartition,
    /// Used from Fetch v13, which names topics by id.
    pub topic_id: Uuid,
    pub offset: i64,
    /// The leader epoch the consumer believes current (-1: unknown).
    pub current_leader_epoch: i32,
}

/// Fetch limits (`fetch.*` settings).
#[derive(Debug, Clone, Copy)]
pub struct FetchLimits {
    pub max_wait_ms: i32,
    pub min_bytes: i32,
    pub max_bytes: i32,
    pub partition_max_bytes: i32,
}

/// A full Fetch of `targets`, without a session (session id 0, epoch -1); a
/// [`crate::fetch_session::FetchSession`] turns it into its session's next request.
pub fn fetch_request(
    targets: &[FetchTarget],
    limits: FetchLimits,
    rack: Option<&str>,
    version: i16,
) -> FetchRequest {
    let mut topics: Vec<FetchTopic> = Vec::new();
    for t in targets {
        let mut part = FetchPartition::default()
            .with_partition(t.tp.partition)
            .with_fetch_offset(t.offset)
            .with_partition_max_bytes(limits.partition_max_bytes);
        if version >= 9 {
            part.current_leader_epoch = t.current_leader_epoch;
        }
        if version >= 5 {
            part.log_start_offset = -1;
        }
        if version >= 12 {
            part.last_fetched_epoch = -1;
        }
        let same = |x: &FetchTopic| {
            if version >= 13 {
                x.topic_id == t.topic_id
            } else {
                x.topic.0.as_str() == t.tp.topic
            }
        };
        match topics.iter_mut().find(|x| same(x)) {
            Some(x) => x.partitions.push(part),
            None => {
                let mut x = FetchTopic::default().with_partitions(vec![part]);
                if version >= 13 {
                    x.topic_id = t.topic_id;
                } else {
                    x.topic = TopicName(StrBytes::from_string(t.tp.topic.clone()));
                }
                topics.push(x);
            }
        }
    }
    let mut req = FetchRequest::default()
        .with_max_wait_ms(limits.max_wait_ms)
        .with_min_bytes(limits.min_bytes)
        .with_topics(topics);
    if version <= 14 {
        req.replica_id = BrokerId(-1);
    }
    if version >= 3 {
        req.max_bytes = limits.max_bytes;
    }
    if version >= 7 {
        req.session_id = 0;
        req.session_epoch = -1;
    }
    if version >= 11 {
        req.rack_id = StrBytes::from_string(rack.unwrap_or("").to_string());
    }
    req
}

/// What one partition returned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FetchedPartition {
    pub high_watermark: i64,
    pub log_start_offset: i64,
    /// Records at or after the fetch offset, in offset order.
    pub records: Vec<ConsumerRecord>,
    /// The offset after the last complete batch (even if all its records were control
    /// records or before the fetch offset), so a consumer can move past it.
    pub next_offset: Option<i64>,
    /// The size of the complete record batches received (a trailing partial batch is not
    /// counted: it is dropped).
    pub bytes: usize,
}

/// Per-partition results; a top-level error fails the whole response.
#[allow(clippy::type_complexity)]
pub fn parse_fetch(
    resp: FetchResponse,
    targets: &[FetchTarget],
) -> Result<Vec<(TopicPartition, Result<FetchedPartition, KafkaError>)>, KafkaError> {
    KafkaError::check(resp.error_code, None)?;
    let mut out = Vec::new();
    for t in resp.responses {
        let name = if t.topic.0.is_empty() {
            match targets.iter().find(|x| x.topic_id == t.topic_id) {
                Some(x) => x.tp.topic.clone(),
                None => continue,
            }
        } else {
            t.topic.0.to_string()
        };
        for p in t.partitions {
            let tp = TopicPartition::new(name.clone(), p.partition_index);
            let Some(target) = targets.iter().find(|x| x.tp == tp) else {
                continue;
            };
            let result = match KafkaError::check(p.error_code, None) {
                Err(e) => Err(e),
                Ok(()) => {
                    let raw = p.records.unwrap_or_default();
                    let bytes = complete_batches_len(&raw);
                    decode_records(&tp, raw, target.offset)
                        .map(|(records, next_offset)| FetchedPartition {
                            high_watermark: p.high_watermark,
                            log_start_offset: p.log_start_offset,
                            records,
                            next_offset,
                            bytes,
                        })
                        .map_err(|reason| {
                            KafkaError::new(KafkaCode(2), Some(format!("{tp}: {reason}")))
                        })
                }
            };
            out.push((tp, result));
        }
    }
    Ok(out)
}

/// The length of the complete batches at the start of a `records` field.
pub fn complete_batches_len(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    while let Some(header) = bytes.get(at..at + 12) {
        let len = i32::from_be_bytes([header[8], header[9], header[10], header[11]]);
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| (at + 12).checked_add(l))
        else {
            break;
        };
        if end > bytes.len() {
            break;
        }
        at = end;
    }
    at
}

/// Decodes the complete batches of a fetched `records` field (a response may end with a
/// partial batch, which is skipped), keeping data records at or after `from_offset`. Returns
/// the records and the offset after the last complete batch.
pub fn decode_records(
    tp: &TopicPartition,
    mut bytes: Bytes,
    from_offset: i64,
) -> Result<(Vec<ConsumerRecord>, Option<i64>), String> {
    let mut out = Vec::new();
    let mut next_offset = None;
    while bytes.len() >= 12 {
        let len = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let Ok(len) = usize::try_from(len) else {
            return Err(format!("negative batch length {len}"));
        };
        if bytes.len() < 12 + len {
            break;
        }
        let mut batch = bytes.split_to(12 + len);
        let base_offset = (&batch[0..8]).get_i64();
        let set = RecordBatchDecoder::decode(&mut batch)
            .map_err(|e| format!("batch at offset {base_offset}: {e}"))?;
        for r in set.records {
            next_offset = Some(next_offset.map_or(r.offset + 1, |n: i64| n.max(r.offset + 1)));
            if r.control || r.offset < from_offset {
                continue;
            }
            out.push(ConsumerRecord {
                topic: tp.topic.clone(),
                partition: tp.partition,
                offset: r.offset,
                timestamp: r.timestamp,
                key: r.key,
                value: r.value,
                headers: r
                    .headers
                    .into_iter()
                    .map(|(k, v)| (k.to_string(), v))
                    .collect(),
                leader_epoch: (r.partition_leader_epoch >= 0).then_some(r.partition_leader_epoch),
            });
        }
    }
    Ok((out, next_offset))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::codec::{decode_response, encode_request, encode_response_frame};
    use crate::producer::wire::{encode_batch, RecordData};
    use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
    use kafka_protocol::protocol::Message;
    use kafka_protocol::records::Compression;

    fn batch(base: i64, n: usize, codec: Compression) -> Bytes {
        let recs: Vec<RecordData> = (0..n)
            .map(|i| RecordData {
                key: Some(Bytes::from(format!("k{i}"))),
                value: Some(Bytes::from(format!("v{i}"))),
                headers: vec![],
                timestamp: 1,
            })
            .collect();
        let mut b = encode_batch(&recs, None, 0, codec).unwrap().to_vec();
        // The leader stamps the base offset.
        b[0..8].copy_from_slice(&base.to_be_bytes());
        Bytes::from(b)
    }

    fn target(offset: i64) -> FetchTarget {
        FetchTarget {
            tp: TopicPartition::new("t", 0),
            topic_id: Uuid::from_u128(7),
            offset,
            current_leader_epoch: -1,
        }
    }

    #[test]
    fn request_encodes_in_every_version() {
        let limits = FetchLimits {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
        };
        for v in FetchRequest::VERSIONS.min..=FetchRequest::VERSIONS.max {
            let req = fetch_request(&[target(5)], limits, Some("r1"), v);
            encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
        }
    }

    #[test]
    fn records_before_the_position_and_partial_batches_are_dropped() {
        let mut all = Vec::new();
        all.extend_from_slice(&batch(10, 3, Compression::Lz4));
        all.extend_from_slice(&batch(13, 2, Compression::None));
        let partial = batch(15, 4, Compression::None);
        all.extend_from_slice(&partial[..partial.len() - 5]);
        let tp = TopicPartition::new("t", 0);
        let (recs, next) = decode_records(&tp, Bytes::from(all.clone()), 11).unwrap();
        let offsets: Vec<i64> = recs.iter().map(|r| r.offset).collect();
        assert_eq!(offsets, vec![11, 12, 13, 14]);
        assert_eq!(next, Some(15));
        assert_eq!(complete_batches_len(&all), all.len() - (partial.len() - 5));
        assert_eq!(complete_batches_len(&all[..5]), 0);
        assert_eq!(recs[0].key.as_deref(), Some(&b"k1"[..]));
    }

    #[test]
    fn corrupt_batch_is_an_error_not_a_panic() {
        let mut b = batch(0, 2, Compression::None).to_vec();
        let last = b.len() - 1;
        b[last] ^= 0xff;
        b[20] ^= 0xff; // inside the CRC-covered part
        let tp = TopicPartition::new("t", 0);
        // kafka-protocol checks CRCs on decode; at worst the records differ — but never panic.
        let _ = decode_records(&tp, Bytes::from(b), 0);
        let mut neg = vec![0u8; 12];
        neg[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(decode_records(&tp, Bytes::from(neg), 0).is_err());
    }

    #[test]
    fn response_by_topic_id_maps_back_to_names_and_errors() {
        let resp = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic_id(Uuid::from_u128(7))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_high_watermark(20)
                .with_records(Some(batch(0, 2, Compression::Zstd)))])]);
        let frame = encode_response_frame::<FetchRequest>(&resp, 13, 1);
        let parsed = parse_fetch(
            decode_response::<FetchRequest>(frame, 13).unwrap(),
            &[target(0)],
        )
        .unwrap();
        let f = parsed[0].1.as_ref().unwrap();
        assert_eq!(f.high_watermark, 20);
        assert_eq!(f.records.len(), 2);
        let err = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_error_code(1)])]);
        let parsed = parse_fetch(err, &[target(0)]).unwrap();
        assert_eq!(
            parsed[0].1.as_ref().unwrap_err().code,
            KafkaCode::OFFSET_OUT_OF_RANGE
        );
        assert!(parse_fetch(FetchResponse::default().with_error_code(71), &[]).is_err());
    }
}
