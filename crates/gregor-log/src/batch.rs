//! The Kafka RecordBatch v2 header: parsing, cheap validation and the few in-place rewrites the
//! log performs (base offset, partition leader epoch, LogAppendTime).
//!
//! Layout (big endian):
//! ```text
//! 0  baseOffset i64        | 8  batchLength i32 | 12 partitionLeaderEpoch i32 | 16 magic i8
//! 17 crc u32 (CRC32C of bytes 21..end)         | 21 attributes i16 | 23 lastOffsetDelta i32
//! 27 baseTimestamp i64     | 35 maxTimestamp i64 | 43 producerId i64 | 51 producerEpoch i16
//! 53 baseSequence i32      | 57 recordCount i32  | 61 records...
//! ```

use crate::error::{LogError, Result};

/// Bytes before `batchLength` counts: baseOffset + batchLength.
pub const LOG_OVERHEAD: usize = 12;
/// Size of the v2 batch header.
pub const HEADER_LEN: usize = 61;
const PLE_OFFSET: usize = 12;
const MAGIC_OFFSET: usize = 16;
const CRC_OFFSET: usize = 17;
const ATTR_OFFSET: usize = 21;
const MAX_TS_OFFSET: usize = 35;

/// Attribute bit: timestamp type is LogAppendTime.
pub const ATTR_LOG_APPEND_TIME: i16 = 1 << 3;
/// Attribute bit: transactional batch.
pub const ATTR_TRANSACTIONAL: i16 = 1 << 4;
/// Attribute bit: control batch.
pub const ATTR_CONTROL: i16 = 1 << 5;
/// Attribute bit: `baseTimestamp` holds the delete horizon (KIP-534).
pub const ATTR_DELETE_HORIZON: i16 = 1 << 6;

/// Compression codec of a batch (attribute bits 0..3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Codec {
    /// Uncompressed.
    None,
    /// gzip
    Gzip,
    /// snappy (xerial framing)
    Snappy,
    /// lz4 (frame format)
    Lz4,
    /// zstd
    Zstd,
}

impl Codec {
    /// The codec id in the attributes.
    pub fn id(self) -> i16 {
        match self {
            Codec::None => 0,
            Codec::Gzip => 1,
            Codec::Snappy => 2,
            Codec::Lz4 => 3,
            Codec::Zstd => 4,
        }
    }

    fn from_id(id: i16) -> Option<Codec> {
        Some(match id {
            0 => Codec::None,
            1 => Codec::Gzip,
            2 => Codec::Snappy,
            3 => Codec::Lz4,
            4 => Codec::Zstd,
            _ => return None,
        })
    }
}

/// A parsed v2 batch header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchHeader {
    /// Offset of the first record.
    pub base_offset: i64,
    /// Bytes after the `batchLength` field.
    pub batch_length: i32,
    /// Epoch of the leader that appended the batch.
    pub partition_leader_epoch: i32,
    /// Format version (must be 2).
    pub magic: i8,
    /// Stored CRC32C.
    pub crc: u32,
    /// Attribute bits.
    pub attributes: i16,
    /// `lastOffset - baseOffset`.
    pub last_offset_delta: i32,
    /// First record's timestamp (or the delete horizon, see [`ATTR_DELETE_HORIZON`]).
    pub base_timestamp: i64,
    /// Largest timestamp in the batch.
    pub max_timestamp: i64,
    /// Idempotent producer id (-1 if none).
    pub producer_id: i64,
    /// Producer epoch.
    pub producer_epoch: i16,
    /// First sequence number.
    pub base_sequence: i32,
    /// Number of records in the batch.
    pub record_count: i32,
}

fn be_i16(b: &[u8], at: usize) -> i16 {
    i16::from_be_bytes([b[at], b[at + 1]])
}
fn be_i32(b: &[u8], at: usize) -> i32 {
    i32::from_be_bytes([b[at], b[at + 1], b[at + 2], b[at + 3]])
}
fn be_i64(b: &[u8], at: usize) -> i64 {
    let mut a = [0u8; 8];
    a.copy_from_slice(&b[at..at + 8]);
    i64::from_be_bytes(a)
}

impl BatchHeader {
    /// Parse a header from the first [`HEADER_LEN`] bytes of `buf`; `None` if `buf` is shorter.
    /// No validation beyond the length.
    pub fn parse(buf: &[u8]) -> Option<BatchHeader> {
        if buf.len() < HEADER_LEN {
            return None;
        }
        Some(BatchHeader {
            base_offset: be_i64(buf, 0),
            batch_length: be_i32(buf, 8),
            partition_leader_epoch: be_i32(buf, PLE_OFFSET),
            magic: buf[MAGIC_OFFSET] as i8,
            crc: u32::from_be_bytes([buf[17], buf[18], buf[19], buf[20]]),
            attributes: be_i16(buf, ATTR_OFFSET),
            last_offset_delta: be_i32(buf, 23),
            base_timestamp: be_i64(buf, 27),
            max_timestamp: be_i64(buf, MAX_TS_OFFSET),
            producer_id: be_i64(buf, 43),
            producer_epoch: be_i16(buf, 51),
            base_sequence: be_i32(buf, 53),
            record_count: be_i32(buf, 57),
        })
    }

    /// Total size of the batch on disk, `12 + batchLength` (0 if the length is negative).
    pub fn size(&self) -> usize {
        LOG_OVERHEAD + usize::try_from(self.batch_length).unwrap_or(0)
    }

    /// Offset of the last record (`base + lastOffsetDelta`).
    pub fn last_offset(&self) -> i64 {
        self.base_offset + i64::from(self.last_offset_delta)
    }

    /// Offset after the batch.
    pub fn next_offset(&self) -> i64 {
        self.last_offset() + 1
    }

    /// Compression codec, `None` for an unknown id.
    pub fn codec(&self) -> Option<Codec> {
        Codec::from_id(self.attributes & 0x7)
    }

    /// Whether the batch carries LogAppendTime.
    pub fn is_log_append_time(&self) -> bool {
        self.attributes & ATTR_LOG_APPEND_TIME != 0
    }

    /// Whether this is a control batch (transaction markers).
    pub fn is_control(&self) -> bool {
        self.attributes & ATTR_CONTROL != 0
    }

    /// Whether this batch is part of a transaction.
    pub fn is_transactional(&self) -> bool {
        self.attributes & ATTR_TRANSACTIONAL != 0
    }

    /// The delete horizon set by compaction, if any.
    pub fn delete_horizon(&self) -> Option<i64> {
        (self.attributes & ATTR_DELETE_HORIZON != 0).then_some(self.base_timestamp)
    }
}

/// CRC32C as stored in a batch: over `attributes..end`.
pub fn compute_crc(batch: &[u8]) -> u32 {
    crc_fast::crc32_iscsi(&batch[ATTR_OFFSET..])
}

/// CRC-32C (Castagnoli) of `parts` in order, as if they were one slice.
pub fn crc32c_of(parts: &[&[u8]]) -> u32 {
    let mut digest = crc_fast::Digest::new(crc_fast::CrcAlgorithm::Crc32Iscsi);
    for part in parts {
        digest.update(part);
    }
    digest.finalize() as u32
}

/// Who is appending: decides which offset rules apply.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Origin {
    /// Batches from a producer: dense offset deltas `0..count`.
    Leader,
    /// Batches copied from the leader: may be compacted (gaps in offset deltas).
    Follower,
}

/// Read a zig-zag varint (Kafka's varint/varlong); returns the value and bytes consumed.
pub(crate) fn read_varint(buf: &[u8]) -> Option<(i64, usize)> {
    let mut raw: u64 = 0;
    for (i, &b) in buf.iter().enumerate().take(10) {
        raw |= u64::from(b & 0x7f) << (7 * i);
        if b & 0x80 == 0 {
            let v = ((raw >> 1) as i64) ^ -((raw & 1) as i64);
            return Some((v, i + 1));
        }
    }
    None
}

/// Append a zig-zag varint.
pub(crate) fn write_varint(out: &mut Vec<u8>, v: i64) {
    let mut z = ((v << 1) ^ (v >> 63)) as u64;
    loop {
        if z < 0x80 {
            out.push(z as u8);
            return;
        }
        out.push((z as u8 & 0x7f) | 0x80);
        z >>= 7;
    }
}

/// Overwrite the base offset (not covered by the CRC).
pub(crate) fn set_base_offset(batch: &mut [u8], offset: i64) {
    batch[..8].copy_from_slice(&offset.to_be_bytes());
}

/// Overwrite the partition leader epoch (not covered by the CRC).
pub(crate) fn set_partition_leader_epoch(batch: &mut [u8], epoch: i32) {
    batch[PLE_OFFSET..PLE_OFFSET + 4].copy_from_slice(&epoch.to_be_bytes());
}

/// Stamp a batch with LogAppendTime: set the timestamp-type bit and `maxTimestamp` in its
/// header, then recompute the CRC over the header's tail and the (unchanged) `body`, the bytes
/// after the header. Records are untouched (their timestamps are ignored under LogAppendTime).
pub(crate) fn set_log_append_time(header: &mut [u8; HEADER_LEN], body: &[u8], now_ms: i64) {
    let attrs = be_i16(header, ATTR_OFFSET) | ATTR_LOG_APPEND_TIME;
    header[ATTR_OFFSET..ATTR_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    set_max_timestamp(header, body, now_ms);
}

/// Overwrite `maxTimestamp` (what the records hold, when a producer's header says otherwise)
/// and recompute the CRC over the header's tail and `body`.
pub(crate) fn set_max_timestamp(header: &mut [u8; HEADER_LEN], body: &[u8], max_ts: i64) {
    header[MAX_TS_OFFSET..MAX_TS_OFFSET + 8].copy_from_slice(&max_ts.to_be_bytes());
    let crc = crc32c_of(&[&header[ATTR_OFFSET..], body]);
    header[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
}

/// A copy of the batch whose header is `header` (its first [`HEADER_LEN`] bytes) with `section`
/// as its records section, compressed with `codec`: the other header fields are kept, the codec
/// bits, the length and the CRC are rewritten.
pub(crate) fn with_records_section(header: &[u8], codec: Codec, section: &[u8]) -> Result<Vec<u8>> {
    let size = HEADER_LEN + section.len();
    let batch_length = i32::try_from(size - LOG_OVERHEAD)
        .map_err(|_| LogError::InvalidRecord("recompressed batch is too large".into()))?;
    let mut out = Vec::with_capacity(size);
    out.extend_from_slice(&header[..HEADER_LEN]);
    out.extend_from_slice(section);
    out[8..12].copy_from_slice(&batch_length.to_be_bytes());
    let attrs = (be_i16(header, ATTR_OFFSET) & !0x7) | codec.id();
    out[ATTR_OFFSET..ATTR_OFFSET + 2].copy_from_slice(&attrs.to_be_bytes());
    let crc = compute_crc(&out);
    out[CRC_OFFSET..CRC_OFFSET + 4].copy_from_slice(&crc.to_be_bytes());
    Ok(out)
}

/// The `batchLength` field of the batch at the start of `buf`; `None` if `buf` is shorter
/// than [`LOG_OVERHEAD`].
pub(crate) fn batch_length(buf: &[u8]) -> Option<i32> {
    (buf.len() >= LOG_OVERHEAD).then(|| be_i32(buf, 8))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn varint_round_trip() {
        for v in [
            0i64,
            1,
            -1,
            63,
            -64,
            64,
            300,
            -300,
            i32::MAX as i64,
            i64::MIN,
            i64::MAX,
        ] {
            let mut out = Vec::new();
            write_varint(&mut out, v);
            assert_eq!(read_varint(&out), Some((v, out.len())), "value {v}");
        }
        assert_eq!(read_varint(&[0x80, 0x80]), None);
    }

    proptest::proptest! {
        /// The SIMD CRC-32C agrees with an independent implementation on every length and
        /// alignment (its folding paths change at 16, 64 and 256 bytes), and in parts as whole.
        #[test]
        fn crc32c_matches_an_independent_implementation(
            bytes in proptest::collection::vec(proptest::num::u8::ANY, 0..3000),
            skip in 0usize..64,
            split in 0usize..3000,
        ) {
            let data = &bytes[skip.min(bytes.len())..];
            let want = crc32c::crc32c(data);
            proptest::prop_assert_eq!(crc_fast::crc32_iscsi(data), want);
            let (head, tail) = data.split_at(split.min(data.len()));
            proptest::prop_assert_eq!(crc32c_of(&[head, tail]), want);
        }
    }
}
