//! Kafka's `__transaction_state` record formats, so that Kafka tooling reads what Gregor's
//! transaction coordinator writes and Gregor loads what Kafka wrote.
//!
//! Key: `int16` version 0, then the transactional id (`TransactionLogKey`). Value (null for an
//! expired transactional id): `int16` version, then `TransactionLogValue`. Version 0 is
//! classic; version 1 is flexible (compact strings and arrays) and adds three tagged fields:
//! the previous and next producer ids (tags 0 and 1, -1 when unset) and the client's
//! transaction version (tag 2, 0 when unset). A value is written at version 0 unless one of
//! those is set. Versions above 1 are read as version 1, their unknown tagged fields skipped:
//! newer versions only add tagged fields.

use bytes::{BufMut, Bytes, BytesMut};

use super::state::TransactionState;
use crate::records::{put_string, CodecError, Reader};

const KEY_VERSION: i16 = 0;
const TAG_PREVIOUS_PRODUCER_ID: u64 = 0;
const TAG_NEXT_PRODUCER_ID: u64 = 1;
const TAG_CLIENT_TRANSACTION_VERSION: u64 = 2;

/// The partitions of one topic a transaction wrote to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitions {
    pub topic: String,
    pub partitions: Vec<i32>,
}

/// A transactional id's state as its coordinator stores it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TransactionLogValue {
    pub producer_id: i64,
    /// The producer id of the last committed transaction, when a bump moved to a new one
    /// (-1: none).
    pub previous_producer_id: i64,
    /// The producer id handed to the producer when the epoch ran out (-1: none).
    pub next_producer_id: i64,
    pub producer_epoch: i16,
    pub transaction_timeout_ms: i32,
    pub state: TransactionState,
    pub partitions: Vec<TopicPartitions>,
    pub last_update_timestamp_ms: i64,
    /// When the open transaction started (-1 when none is open).
    pub start_timestamp_ms: i64,
    /// The transaction version the client used (KIP-890: 2 bumps the epoch on every
    /// transaction); 0 when unknown.
    pub client_transaction_version: i16,
}

pub fn encode_key(transactional_id: &str) -> Bytes {
    let mut buf = BytesMut::new();
    buf.put_i16(KEY_VERSION);
    put_string(&mut buf, transactional_id);
    buf.freeze()
}

/// The transactional id of a key.
pub fn decode_key(bytes: &[u8]) -> Result<String, CodecError> {
    let what = "TransactionLogKey";
    let mut r = Reader::new(bytes, what);
    match r.i16()? {
        KEY_VERSION => {}
        version => return Err(CodecError::UnsupportedVersion { what, version }),
    }
    let id = r.string()?;
    r.finish()?;
    Ok(id)
}

pub fn encode_value(v: &TransactionLogValue) -> Bytes {
    let tagged = tagged_fields(v);
    let flexible = !tagged.is_empty();
    let mut buf = BytesMut::new();
    buf.put_i16(i16::from(flexible));
    buf.put_i64(v.producer_id);
    buf.put_i16(v.producer_epoch);
    buf.put_i32(v.transaction_timeout_ms);
    buf.put_i8(v.state.code());
    put_length(&mut buf, flexible, v.partitions.len());
    for t in &v.partitions {
        if flexible {
            put_uvarint(&mut buf, t.topic.len() as u64 + 1);
            buf.put_slice(t.topic.as_bytes());
        } else {
            put_string(&mut buf, &t.topic);
        }
        put_length(&mut buf, flexible, t.partitions.len());
        for &p in &t.partitions {
            buf.put_i32(p);
        }
        if flexible {
            put_uvarint(&mut buf, 0);
        }
    }
    buf.put_i64(v.last_update_timestamp_ms);
    buf.put_i64(v.start_timestamp_ms);
    if flexible {
        put_uvarint(&mut buf, tagged.len() as u64);
        for (tag, data) in tagged {
            put_uvarint(&mut buf, tag);
            put_uvarint(&mut buf, data.len() as u64);
            buf.put_slice(&data);
        }
    }
    buf.freeze()
}

/// The tagged fields that differ from their defaults, in tag order.
fn tagged_fields(v: &TransactionLogValue) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    if v.previous_producer_id != -1 {
        out.push((
            TAG_PREVIOUS_PRODUCER_ID,
            v.previous_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if v.next_producer_id != -1 {
        out.push((
            TAG_NEXT_PRODUCER_ID,
            v.next_producer_id.to_be_bytes().to_vec(),
        ));
    }
    if v.client_transaction_version != 0 {
        out.push((
            TAG_CLIENT_TRANSACTION_VERSION,
            v.client_transaction_version.to_be_bytes().to_vec(),
        ));
    }
    out
}

fn put_uvarint(buf: &mut BytesMut, mut v: u64) {
    while v >= 0x80 {
        buf.put_u8((v as u8 & 0x7F) | 0x80);
        v >>= 7;
    }
    buf.put_u8(v as u8);
}

/// An array length: `int32` in version 0, `uvarint(n + 1)` in flexible versions.
fn put_length(buf: &mut BytesMut, flexible: bool, n: usize) {
    if flexible {
        put_uvarint(buf, n as u64 + 1);
    } else {
        buf.put_i32(i32::try_from(n).unwrap_or(i32::MAX));
    }
}

pub fn decode_value(bytes: &[u8]) -> Result<TransactionLogValue, CodecError> {
    let what = "TransactionLogValue";
    let mut r = Reader::new(bytes, what);
    let version = r.i16()?;
    if version < 0 {
        return Err(CodecError::UnsupportedVersion { what, version });
    }
    r.flexible = version >= 1;
    let producer_id = r.i64()?;
    let producer_epoch = r.i16()?;
    let transaction_timeout_ms = r.i32()?;
    let code = r.take(1)?[0] as i8;
    let state = TransactionState::from_code(code).ok_or(CodecError::UnknownCode {
        what,
        code: i64::from(code),
    })?;
    let partitions = read_partitions(&mut r)?;
    let last_update_timestamp_ms = r.i64()?;
    let start_timestamp_ms = r.i64()?;
    let mut v = TransactionLogValue {
        producer_id,
        previous_producer_id: -1,
        next_producer_id: -1,
        producer_epoch,
        transaction_timeout_ms,
        state,
        partitions,
        last_update_timestamp_ms,
        start_timestamp_ms,
        client_transaction_version: 0,
    };
    if r.flexible {
        read_tagged_fields(&mut r, &mut v)?;
    }
    r.finish()?;
    Ok(v)
}

/// The transaction's partitions (a null array reads as none).
fn read_partitions(r: &mut Reader<'_>) -> Result<Vec<TopicPartitions>, CodecError> {
    let Some(count) = r.length(true)? else {
        return Ok(Vec::new());
    };
    // Each entry takes at least three bytes: refuse counts the rest cannot hold before
    // allocating for them.
    bounded(r, count)?;
    let mut out = Vec::with_capacity(count);
    for _ in 0..count {
        let topic = r.string()?;
        let n = r.array_len()?;
        bounded(r, n)?;
        let mut partitions = Vec::with_capacity(n);
        for _ in 0..n {
            partitions.push(r.i32()?);
        }
        r.tagged_fields()?;
        out.push(TopicPartitions { topic, partitions });
    }
    Ok(out)
}

fn bounded(r: &Reader<'_>, count: usize) -> Result<(), CodecError> {
    if count > r.buf.len() {
        return Err(CodecError::InvalidLength {
            what: r.what,
            length: count as i64,
        });
    }
    Ok(())
}

/// A flexible value's tagged fields: the three known ones are read, others skipped.
fn read_tagged_fields(r: &mut Reader<'_>, v: &mut TransactionLogValue) -> Result<(), CodecError> {
    let count = r.uvarint()?;
    for _ in 0..count {
        let tag = r.uvarint()?;
        let size = usize::try_from(r.uvarint()?).unwrap_or(usize::MAX);
        let data = r.take(size)?;
        let mut field = Reader::new(data, r.what);
        match tag {
            TAG_PREVIOUS_PRODUCER_ID => v.previous_producer_id = field.i64()?,
            TAG_NEXT_PRODUCER_ID => v.next_producer_id = field.i64()?,
            TAG_CLIENT_TRANSACTION_VERSION => v.client_transaction_version = field.i16()?,
            _ => continue,
        }
        field.finish()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn value() -> TransactionLogValue {
        TransactionLogValue {
            producer_id: 4000,
            previous_producer_id: -1,
            next_producer_id: -1,
            producer_epoch: 7,
            transaction_timeout_ms: 60_000,
            state: TransactionState::Ongoing,
            partitions: vec![
                TopicPartitions {
                    topic: "orders".into(),
                    partitions: vec![0, 3],
                },
                TopicPartitions {
                    topic: "__consumer_offsets".into(),
                    partitions: vec![17],
                },
            ],
            last_update_timestamp_ms: 1_700_000_000_123,
            start_timestamp_ms: 1_700_000_000_100,
            client_transaction_version: 0,
        }
    }

    #[test]
    fn a_key_is_version_zero_and_the_id() {
        let k = encode_key("tx-1");
        assert_eq!(&k[..], &[0, 0, 0, 4, b't', b'x', b'-', b'1']);
        assert_eq!(decode_key(&k).unwrap(), "tx-1");
        assert!(decode_key(&[0, 1, 0, 0]).is_err());
        assert!(decode_key(&[0, 0, 0, 9, b'x']).is_err());
    }

    #[test]
    fn a_value_without_tagged_fields_is_version_zero_byte_for_byte() {
        let mut v = value();
        v.partitions.truncate(1);
        let b = encode_value(&v);
        let mut want = vec![0, 0];
        want.extend(4000i64.to_be_bytes());
        want.extend(7i16.to_be_bytes());
        want.extend(60_000i32.to_be_bytes());
        want.push(1);
        want.extend(1i32.to_be_bytes());
        want.extend([0, 6]);
        want.extend(b"orders");
        want.extend(2i32.to_be_bytes());
        want.extend(0i32.to_be_bytes());
        want.extend(3i32.to_be_bytes());
        want.extend(1_700_000_000_123i64.to_be_bytes());
        want.extend(1_700_000_000_100i64.to_be_bytes());
        assert_eq!(&b[..], &want[..]);
        assert_eq!(decode_value(&b).unwrap(), v);
    }

    #[test]
    fn tagged_fields_make_a_flexible_value_that_round_trips() {
        let mut v = value();
        v.previous_producer_id = 3999;
        v.next_producer_id = 4001;
        v.client_transaction_version = 2;
        let b = encode_value(&v);
        assert_eq!(&b[..2], &[0, 1]);
        assert_eq!(decode_value(&b).unwrap(), v);
        v.next_producer_id = -1;
        assert_eq!(decode_value(&encode_value(&v)).unwrap(), v);
    }

    #[test]
    fn a_newer_version_reads_as_version_one_skipping_unknown_tags() {
        let mut v = value();
        v.client_transaction_version = 2;
        let mut b = encode_value(&v).to_vec();
        b[1] = 3;
        // Replace the tagged-field block (one field: tag 2, size 2) with it plus an unknown tag.
        let end = b.len() - 5;
        b.truncate(end);
        b.extend([2, 2, 2, 0, 2, 9, 1, 0xAB]);
        assert_eq!(decode_value(&b).unwrap(), v);
    }

    #[test]
    fn bad_values_are_errors() {
        let b = encode_value(&value());
        for cut in 0..b.len() {
            assert!(decode_value(&b[..cut]).is_err(), "cut at {cut}");
        }
        let mut trailing = b.to_vec();
        trailing.push(0);
        assert!(decode_value(&trailing).is_err());
        let mut state = b.to_vec();
        state[16] = 9;
        assert!(matches!(
            decode_value(&state),
            Err(CodecError::UnknownCode { code: 9, .. })
        ));
        let mut huge = b.to_vec();
        huge[17..21].copy_from_slice(&i32::MAX.to_be_bytes());
        assert!(matches!(
            decode_value(&huge),
            Err(CodecError::InvalidLength { .. })
        ));
    }

    proptest::proptest! {
        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..256)) {
            let _ = decode_value(&bytes);
            let _ = decode_key(&bytes);
        }

        #[test]
        fn every_value_round_trips(
            producer_id in proptest::prelude::any::<i64>(),
            previous in proptest::prelude::any::<i64>(),
            epoch in proptest::prelude::any::<i16>(),
            state in 0i8..8,
            topics in proptest::collection::vec(("[a-z._-]{1,20}", proptest::collection::vec(0i32..1000, 0..5)), 0..4),
            tv in 0i16..3,
        ) {
            let v = TransactionLogValue {
                producer_id,
                previous_producer_id: previous,
                next_producer_id: -1,
                producer_epoch: epoch,
                transaction_timeout_ms: 1000,
                state: TransactionState::from_code(state).unwrap(),
                partitions: topics
                    .into_iter()
                    .map(|(topic, partitions)| TopicPartitions { topic, partitions })
                    .collect(),
                last_update_timestamp_ms: 5,
                start_timestamp_ms: -1,
                client_transaction_version: tv,
            };
            proptest::prop_assert_eq!(decode_value(&encode_value(&v)).unwrap(), v);
        }
    }
}
