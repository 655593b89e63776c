//! Record-level encoding and decoding of v2 batches: used where a feature needs records
//! (compaction keys, timestamp search inside a batch) and to build batches (tests, benchmarks,
//! internal writers such as a group coordinator). The append path never comes here.

use bytes::Bytes;

use crate::batch::{
    self, write_varint, BatchHeader, Codec, ATTR_CONTROL, ATTR_DELETE_HORIZON,
    ATTR_LOG_APPEND_TIME, ATTR_TRANSACTIONAL, HEADER_LEN, LOG_OVERHEAD,
};
use crate::codec::{compress, MAX_DECOMPRESSED_BYTES};
use crate::error::{LogError, Result};
use crate::validate::RecordStream;

/// One record header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Header key.
    pub key: Bytes,
    /// Header value (nullable).
    pub value: Option<Bytes>,
}

/// A decoded record with absolute offset and timestamp.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Absolute offset.
    pub offset: i64,
    /// Absolute timestamp (the batch's max timestamp under LogAppendTime).
    pub timestamp: i64,
    /// Key (nullable).
    pub key: Option<Bytes>,
    /// Value (nullable; `None` is a tombstone).
    pub value: Option<Bytes>,
    /// Headers in order (duplicates allowed).
    pub headers: Vec<Header>,
}

/// Decode every record of one batch (`batch` holds exactly one batch; the CRC is not
/// re-checked). Records are read one at a time as the (decompressed) section yields them, at
/// most [`crate::codec::MAX_DECOMPRESSED_BYTES`] decompressed; the header's record count is
/// only compared with what was read, never used to size anything.
pub fn decode_batch(batch: &[u8]) -> Result<(BatchHeader, Vec<Record>)> {
    let h = BatchHeader::parse(batch)
        .ok_or_else(|| LogError::CorruptMessage("short batch header".into()))?;
    if h.size() > batch.len() || h.magic != 2 || h.size() < HEADER_LEN {
        return Err(LogError::CorruptMessage("truncated or non-v2 batch".into()));
    }
    let mut stream = RecordStream::new(&h, batch, MAX_DECOMPRESSED_BYTES)?;
    let mut records = Vec::new();
    while let Some(r) = stream.next_record()? {
        if records.len() >= usize::try_from(h.record_count).unwrap_or(0) {
            return Err(LogError::InvalidRecord(format!(
                "more records than the record count {}",
                h.record_count
            )));
        }
        let timestamp = if h.is_log_append_time() {
            h.max_timestamp
        } else {
            h.base_timestamp.wrapping_add(r.timestamp_delta)
        };
        records.push(Record {
            offset: h.base_offset.saturating_add(r.offset_delta),
            timestamp,
            key: r.key.map(Bytes::copy_from_slice),
            value: r.value.map(Bytes::copy_from_slice),
            headers: r
                .header_pairs()
                .map(|(k, v)| Header {
                    key: Bytes::copy_from_slice(k),
                    value: v.map(Bytes::copy_from_slice),
                })
                .collect(),
        });
    }
    Ok((h, records))
}

fn put_nullable(out: &mut Vec<u8>, b: Option<&Bytes>) {
    match b {
        None => write_varint(out, -1),
        Some(b) => {
            write_varint(out, b.len() as i64);
            out.extend_from_slice(b);
        }
    }
}

fn encode_records(records: &[Record], base_offset: i64, base_timestamp: i64) -> Vec<u8> {
    let mut out = Vec::new();
    let mut body = Vec::new();
    for r in records {
        body.clear();
        body.push(0); // record attributes: unused
        write_varint(&mut body, r.timestamp.wrapping_sub(base_timestamp));
        write_varint(&mut body, r.offset - base_offset);
        put_nullable(&mut body, r.key.as_ref());
        put_nullable(&mut body, r.value.as_ref());
        write_varint(&mut body, r.headers.len() as i64);
        for h in &r.headers {
            put_nullable(&mut body, Some(&h.key));
            put_nullable(&mut body, h.value.as_ref());
        }
        write_varint(&mut out, body.len() as i64);
        out.extend_from_slice(&body);
    }
    out
}

/// Fields of a batch header that a builder sets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSpec {
    /// Base offset written into the batch (a leader append rewrites it).
    pub base_offset: i64,
    /// `lastOffsetDelta`; `None` derives it from the last record.
    pub last_offset_delta: Option<i32>,
    /// Partition leader epoch (-1 if unknown).
    pub partition_leader_epoch: i32,
    /// Compression codec.
    pub codec: Codec,
    /// Whether timestamps are LogAppendTime (then `max_timestamp` must be given).
    pub log_append_time: bool,
    /// Max timestamp override (LogAppendTime); `None` computes it from the records.
    pub max_timestamp: Option<i64>,
    /// Transactional bit.
    pub transactional: bool,
    /// Control bit.
    pub control: bool,
    /// KIP-534 delete horizon; stored in `baseTimestamp`.
    pub delete_horizon: Option<i64>,
    /// Producer id (-1 for none).
    pub producer_id: i64,
    /// Producer epoch (-1 for none).
    pub producer_epoch: i16,
    /// Base sequence (-1 for none).
    pub base_sequence: i32,
}

impl Default for BatchSpec {
    fn default() -> Self {
        BatchSpec {
            base_offset: 0,
            last_offset_delta: None,
            partition_leader_epoch: -1,
            codec: Codec::None,
            log_append_time: false,
            max_timestamp: None,
            transactional: false,
            control: false,
            delete_horizon: None,
            producer_id: -1,
            producer_epoch: -1,
            base_sequence: -1,
        }
    }
}

/// Encode one v2 batch. Record offsets must be ascending and at or after `spec.base_offset`.
pub fn encode_batch(spec: &BatchSpec, records: &[Record]) -> Result<Vec<u8>> {
    let last_delta = match (spec.last_offset_delta, records.last()) {
        (Some(d), _) => d,
        (None, Some(r)) => i32::try_from(r.offset - spec.base_offset)
            .map_err(|_| LogError::InvalidArgument("offset range too large".into()))?,
        (None, None) => return Err(LogError::InvalidArgument("empty batch".into())),
    };
    if records.windows(2).any(|w| w[1].offset <= w[0].offset)
        || records.first().is_some_and(|r| r.offset < spec.base_offset)
        || records
            .last()
            .is_some_and(|r| r.offset - spec.base_offset > i64::from(last_delta))
    {
        return Err(LogError::InvalidArgument(
            "record offsets out of order".into(),
        ));
    }
    let first_ts = records.first().map_or(-1, |r| r.timestamp);
    let max_ts = spec
        .max_timestamp
        .unwrap_or_else(|| records.iter().map(|r| r.timestamp).max().unwrap_or(-1));
    let base_ts = spec.delete_horizon.unwrap_or(first_ts);
    let raw = encode_records(records, spec.base_offset, base_ts);
    let count = i32::try_from(records.len())
        .map_err(|_| LogError::InvalidArgument("too many records".into()))?;
    encode_raw_batch(spec, last_delta, base_ts, max_ts, count, &raw)
}

/// Build one v2 batch around an already encoded (uncompressed) records section `raw` of
/// `count` records whose timestamp deltas are relative to `base_ts`; compresses it with
/// `spec.codec`.
pub(crate) fn encode_raw_batch(
    spec: &BatchSpec,
    last_delta: i32,
    base_ts: i64,
    max_ts: i64,
    count: i32,
    raw: &[u8],
) -> Result<Vec<u8>> {
    let section = compress(spec.codec, raw)?;
    let mut attrs = spec.codec.id();
    if spec.log_append_time {
        attrs |= ATTR_LOG_APPEND_TIME;
    }
    if spec.transactional {
        attrs |= ATTR_TRANSACTIONAL;
    }
    if spec.control {
        attrs |= ATTR_CONTROL;
    }
    if spec.delete_horizon.is_some() {
        attrs |= ATTR_DELETE_HORIZON;
    }
    let size = HEADER_LEN + section.len();
    let batch_length = i32::try_from(size - LOG_OVERHEAD)
        .map_err(|_| LogError::InvalidArgument("batch too large".into()))?;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&spec.base_offset.to_be_bytes());
    out.extend_from_slice(&batch_length.to_be_bytes());
    out.extend_from_slice(&spec.partition_leader_epoch.to_be_bytes());
    out.push(2);
    out.extend_from_slice(&[0; 4]); // crc placeholder
    out.extend_from_slice(&attrs.to_be_bytes());
    out.extend_from_slice(&last_delta.to_be_bytes());
    out.extend_from_slice(&base_ts.to_be_bytes());
    out.extend_from_slice(&max_ts.to_be_bytes());
    out.extend_from_slice(&spec.producer_id.to_be_bytes());
    out.extend_from_slice(&spec.producer_epoch.to_be_bytes());
    out.extend_from_slice(&spec.base_sequence.to_be_bytes());
    out.extend_from_slice(&count.to_be_bytes());
    out.extend_from_slice(&section);
    let crc = batch::compute_crc(&out);
    out[17..21].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// A nullable key and a nullable value.
pub type KeyValue<'a> = (Option<&'a [u8]>, Option<&'a [u8]>);

/// Convenience for producers, tests and benchmarks: a batch of `(key, value)` records with
/// offsets `0..n` and timestamp `timestamp` on every record.
pub fn simple_batch(codec: Codec, timestamp: i64, kvs: &[KeyValue<'_>]) -> Result<Vec<u8>> {
    let records: Vec<Record> = kvs
        .iter()
        .enumerate()
        .map(|(i, (k, v))| Record {
            offset: i as i64,
            timestamp,
            key: k.map(Bytes::copy_from_slice),
            value: v.map(Bytes::copy_from_slice),
            headers: Vec::new(),
        })
        .collect();
    encode_batch(
        &BatchSpec {
            codec,
            ..BatchSpec::default()
        },
        &records,
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::Origin;
    use crate::validate::{validate_batch as validate, Rules, STORED};

    const LEADER: Rules = Rules {
        origin: Origin::Leader,
        ..STORED
    };

    fn rec(offset: i64, ts: i64, k: &str, v: Option<&str>) -> Record {
        Record {
            offset,
            timestamp: ts,
            key: Some(Bytes::copy_from_slice(k.as_bytes())),
            value: v.map(|v| Bytes::copy_from_slice(v.as_bytes())),
            headers: vec![
                Header {
                    key: Bytes::from_static(b"h"),
                    value: None,
                },
                Header {
                    key: Bytes::from_static(b"h"),
                    value: Some(Bytes::from_static(b"dup")),
                },
            ],
        }
    }

    #[test]
    fn round_trip_every_codec() {
        for codec in [
            Codec::None,
            Codec::Gzip,
            Codec::Snappy,
            Codec::Lz4,
            Codec::Zstd,
        ] {
            let recs = vec![rec(0, 1000, "a", Some("x")), rec(1, 990, "b", None)];
            let b = encode_batch(
                &BatchSpec {
                    codec,
                    ..BatchSpec::default()
                },
                &recs,
            )
            .expect("encode");
            let h = validate(&b, usize::MAX, &LEADER).expect("valid").0;
            assert_eq!(h.codec(), Some(codec));
            assert_eq!(h.max_timestamp, 1000);
            let (_, back) = decode_batch(&b).expect("decode");
            assert_eq!(back, recs, "{codec:?}");
        }
    }

    #[test]
    fn delete_horizon_keeps_record_timestamps() {
        let recs = vec![rec(5, 1000, "a", None), rec(9, 2000, "b", Some("v"))];
        let spec = BatchSpec {
            base_offset: 5,
            last_offset_delta: Some(7),
            delete_horizon: Some(50_000),
            ..BatchSpec::default()
        };
        let b = encode_batch(&spec, &recs).expect("encode");
        let h = validate(&b, usize::MAX, &STORED).expect("valid").0;
        assert_eq!(h.delete_horizon(), Some(50_000));
        assert_eq!(h.last_offset(), 12);
        assert_eq!(decode_batch(&b).expect("decode").1, recs);
        // A leader refuses gaps.
        assert!(matches!(
            validate(&b, usize::MAX, &LEADER),
            Err(LogError::InvalidRecord(_))
        ));
    }
}
