//! Fetch requests from positions, and fetched record batches decoded into records (with
//! kafka-protocol's `RecordBatchDecoder`, which also decompresses). Pure. In read_committed
//! the batches of aborted transactions are dropped as an answer is split by partition
//! ([`super::txn_filter`]).

use std::sync::Arc;

use bytes::{Buf, Bytes};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::records::RecordBatchDecoder;
use uuid::Uuid;

use super::txn_filter::{self, AbortedTxn};
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::types::{IsolationLevel, TopicPartition};

/// A consumed record.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConsumerRecord {
    /// The topic's name, one allocation shared by every record of a partition's answer (it
    /// derefs to `&str`; `.to_string()` for an owned `String`).
    pub topic: Arc<str>,
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

/// The byte limits as the prefetch plan and the fetch windows use them, as `usize` (checked
/// positive by the configuration).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ByteLimits {
    /// `fetch.max.bytes`.
    pub fetch_max: usize,
    /// `max.partition.fetch.bytes`.
    pub partition_max: usize,
}

/// A full Fetch of `targets`, without a session (session id 0, epoch -1); a
/// [`crate::fetch_session::FetchSession`] turns it into its session's next request.
/// read_committed needs Fetch v4, where `isolation_level` appeared.
pub fn fetch_request(
    targets: &[FetchTarget],
    limits: FetchLimits,
    rack: Option<&str>,
    isolation: IsolationLevel,
    version: i16,
) -> Result<FetchRequest> {
    if isolation == IsolationLevel::ReadCommitted && version < 4 {
        return Err(Error::InvalidArgument(format!(
            "isolation.level=read_committed needs Fetch v4, the broker supports v{version}"
        )));
    }
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
    if version >= 4 {
        req.isolation_level = isolation.wire();
    }
    if version >= 7 {
        req.session_id = 0;
        req.session_epoch = -1;
    }
    if version >= 11 {
        req.rack_id = StrBytes::from_string(rack.unwrap_or("").to_string());
    }
    Ok(req)
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
    isolation: IsolationLevel,
) -> Result<Vec<(TopicPartition, Result<FetchedPartition, KafkaError>)>, KafkaError> {
    let raw = parse_fetch_raw(resp, targets, isolation)?;
    Ok(raw
        .into_iter()
        .map(|(tp, result)| {
            let decoded = result.and_then(|r| {
                let asked = targets.iter().find(|t| t.tp == tp).map_or(0, |t| t.offset);
                r.decode(&tp, asked, true)
            });
            (tp, decoded)
        })
        .collect())
}

/// What one partition returned, its record batches not decoded yet: what the consumer buffers
/// as soon as an answer lands, so that its next Fetch (from `next_offset`) is on the wire
/// before the records are decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RawPartition {
    pub high_watermark: i64,
    /// The last stable offset (Fetch v4+, -1 before): where a read_committed answer ends.
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    /// The complete record batches received (a trailing partial batch cut off), in
    /// read_committed without those of aborted transactions.
    pub batches: Bytes,
    /// The offset after the last complete batch, from the batch headers (their base offset and
    /// last offset delta), `None` without a complete batch.
    pub next_offset: Option<i64>,
}

impl RawPartition {
    /// The size of the complete record batches received.
    pub fn bytes(&self) -> usize {
        self.batches.len()
    }

    /// Decodes the batches, keeping records at or after `from_offset` (the offset asked);
    /// `check_crcs` as in [`decode_records`].
    pub fn decode(
        self,
        tp: &TopicPartition,
        from_offset: i64,
        check_crcs: bool,
    ) -> Result<FetchedPartition, KafkaError> {
        let bytes = self.batches.len();
        decode_records(tp, self.batches, from_offset, check_crcs)
            .map(|(records, _)| FetchedPartition {
                high_watermark: self.high_watermark,
                log_start_offset: self.log_start_offset,
                records,
                next_offset: self.next_offset,
                bytes,
            })
            .map_err(|reason| corrupt(tp, reason))
    }
}

/// A batch that does not decode, as the partition's error (`CORRUPT_MESSAGE`).
pub fn corrupt(tp: &TopicPartition, reason: String) -> KafkaError {
    KafkaError::new(KafkaCode(2), Some(format!("{tp}: {reason}")))
}

/// Per-partition results with the record batches left undecoded (see [`RawPartition`]); a
/// top-level error fails the whole response. In read_committed the batches of the aborted
/// transactions each partition's answer lists are dropped (a control batch that does not
/// decode makes the partition's result `CORRUPT_MESSAGE`); in read_uncommitted that list is
/// ignored.
#[allow(clippy::type_complexity)]
pub fn parse_fetch_raw(
    resp: FetchResponse,
    targets: &[FetchTarget],
    isolation: IsolationLevel,
) -> Result<Vec<(TopicPartition, Result<RawPartition, KafkaError>)>, KafkaError> {
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
            if !targets.iter().any(|x| x.tp == tp) {
                continue;
            }
            let result = KafkaError::check(p.error_code, None).and_then(|()| {
                let mut batches = p.records.unwrap_or_default();
                // From the batches received: the position moves past dropped ones too.
                let (len, next_offset) = complete_batches(&batches);
                batches.truncate(len);
                if isolation == IsolationLevel::ReadCommitted {
                    let aborted = aborted_list(p.aborted_transactions.unwrap_or_default());
                    batches = txn_filter::drop_aborted(batches, aborted)
                        .map_err(|reason| corrupt(&tp, reason))?;
                }
                Ok(RawPartition {
                    high_watermark: p.high_watermark,
                    last_stable_offset: p.last_stable_offset,
                    log_start_offset: p.log_start_offset,
                    batches,
                    next_offset,
                })
            });
            out.push((tp, result));
        }
    }
    Ok(out)
}

/// A partition answer's `aborted_transactions` as the filter takes them.
fn aborted_list(
    list: Vec<kafka_protocol::messages::fetch_response::AbortedTransaction>,
) -> Vec<AbortedTxn> {
    list.into_iter()
        .map(|t| AbortedTxn {
            producer_id: t.producer_id.0,
            first_offset: t.first_offset,
        })
        .collect()
}

/// The length of the complete batches at the start of a `records` field, and the offset after
/// the last of them from its header (base offset + last offset delta + 1; a batch too short
/// for a header moves nothing, its decoding fails).
pub fn complete_batches(bytes: &[u8]) -> (usize, Option<i64>) {
    let mut at = 0usize;
    let mut next: Option<i64> = None;
    while let Some(header) = bytes.get(at..at + 12) {
        let len = i32::from_be_bytes(field(header, 8));
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| (at + 12).checked_add(l))
        else {
            break;
        };
        if end > bytes.len() {
            break;
        }
        if let Some(h) = bytes.get(at..end).filter(|b| b.len() >= BATCH_HEADER_LEN) {
            let base = i64::from_be_bytes(field(h, 0));
            let delta = i32::from_be_bytes(field(h, 23));
            if let Some(after) = base.checked_add(i64::from(delta) + 1) {
                next = Some(next.map_or(after, |n| n.max(after)));
            }
        }
        at = end;
    }
    (at, next)
}

/// The length of the complete batches at the start of a `records` field.
pub fn complete_batches_len(bytes: &[u8]) -> usize {
    complete_batches(bytes).0
}

/// Decodes the complete batches of a fetched `records` field (a response may end with a
/// partial batch, which is skipped), keeping data records at or after `from_offset`. Returns
/// the records and the offset after the last complete batch.
///
/// Uncompressed batches (what a fetch mostly carries) are decoded here in one pass: the CRC
/// checked over the batch in place, each record's key and value a slice of `bytes` (no copy),
/// no intermediate record list. Compressed batches go through kafka-protocol's
/// `RecordBatchDecoder`, which decompresses them. Every length read from the wire is checked
/// against the bytes actually there before it is used, and allocations are bounded by those
/// bytes, not by counts from the wire.
///
/// `check_crcs` (the consumer's `check.crcs`): with `false` the CRC of an uncompressed batch
/// is not computed (every other check stays); a compressed batch's CRC is still checked by the
/// decompressing decoder. The records share one allocation of the topic's name.
pub fn decode_records(
    tp: &TopicPartition,
    bytes: Bytes,
    from_offset: i64,
    check_crcs: bool,
) -> Result<(Vec<ConsumerRecord>, Option<i64>), String> {
    decode_records_into(tp, bytes, from_offset, check_crcs, Vec::new())
}

/// [`decode_records`] into `out` (emptied first): a vector whose records were all returned
/// already, so that its allocation is reused. A fresh vector for every answer (136 bytes per
/// record, over glibc's 128 KiB trim threshold for a 1 MiB answer) made the heap shrink and
/// grow again for each, with a page fault per page regrown.
pub fn decode_records_into(
    tp: &TopicPartition,
    mut bytes: Bytes,
    from_offset: i64,
    check_crcs: bool,
    mut out: Vec<ConsumerRecord>,
) -> Result<(Vec<ConsumerRecord>, Option<i64>), String> {
    out.clear();
    out.reserve(records_in(&bytes));
    let topic: Arc<str> = Arc::from(tp.topic.as_str());
    let mut next_offset = None;
    while bytes.len() >= 12 {
        let len = i32::from_be_bytes([bytes[8], bytes[9], bytes[10], bytes[11]]);
        let Ok(len) = usize::try_from(len) else {
            return Err(format!("negative batch length {len}"));
        };
        if bytes.len() - 12 < len {
            break;
        }
        let batch = bytes.split_to(12 + len);
        let base_offset = (&batch[0..8]).get_i64();
        let header = BatchHeader::parse(&batch, check_crcs)
            .map_err(|reason| format!("batch at offset {base_offset}: {reason}"))?;
        #[cfg(feature = "simulation")]
        let before = out.len();
        let decoded = if header.compression == 0 {
            decode_plain_batch(&topic, tp.partition, &batch, &header, from_offset, &mut out)
        } else {
            decode_compressed_batch(&topic, tp.partition, batch, from_offset, &mut out)
        };
        let last = decoded.map_err(|reason| format!("batch at offset {base_offset}: {reason}"))?;
        #[cfg(feature = "simulation")]
        if out.len() >= before + 2
            && crate::simulation::planted(crate::simulation::PlantedBug::DecoderDropsLastRecord)
        {
            out.pop();
        }
        if let Some(last) = last {
            next_offset = Some(next_offset.map_or(last + 1, |n: i64| n.max(last + 1)));
        }
    }
    Ok((out, next_offset))
}

/// How many records the complete batches at the start of `bytes` declare, each batch's count
/// capped by the records its bytes could hold: the size to reserve for decoding them all at
/// once, never more than the bytes present allow.
fn records_in(bytes: &[u8]) -> usize {
    let mut at = 0usize;
    let mut total = 0usize;
    while let Some(header) = bytes.get(at..at + BATCH_HEADER_LEN) {
        let len = i32::from_be_bytes(field(header, 8));
        let Some(end) = usize::try_from(len)
            .ok()
            .and_then(|l| (at + 12).checked_add(l))
            .filter(|end| *end <= bytes.len())
        else {
            break;
        };
        let count = usize::try_from(i32::from_be_bytes(field(header, 57))).unwrap_or(0);
        let room = (end - at).saturating_sub(BATCH_HEADER_LEN) / MIN_RECORD_LEN;
        total += count.min(room);
        at = end;
    }
    total
}

/// Bytes of a v2 record batch before its records: base offset (8), length (4), partition
/// leader epoch (4), magic (1), CRC (4), attributes (2), last offset delta (4), base and max
/// timestamps (8 + 8), producer id (8) and epoch (2), base sequence (4), record count (4).
const BATCH_HEADER_LEN: usize = 61;
/// Where the CRC-covered part of a batch starts (the attributes).
const CRC_START: usize = 21;
/// The fewest bytes a record can take: its length, attributes, timestamp delta, offset delta,
/// key length, value length and header count, one byte each.
const MIN_RECORD_LEN: usize = 7;

/// The fields of a v2 batch header the consumer uses.
#[derive(Debug)]
struct BatchHeader {
    base_offset: i64,
    partition_leader_epoch: i32,
    compression: i16,
    control: bool,
    base_timestamp: i64,
    record_count: usize,
}

impl BatchHeader {
    /// Reads and checks the header of one complete batch (`batch` holds exactly the base
    /// offset, the length and the `length` bytes after it): magic 2, the CRC (with
    /// `check_crc`), a known codec and a non-negative record count.
    fn parse(batch: &[u8], check_crc: bool) -> Result<BatchHeader, String> {
        if batch.len() < BATCH_HEADER_LEN {
            // A magic 0/1 message set can be this short; say which it is when we can tell.
            if let Some(magic) = batch.get(16).filter(|m| **m != 2) {
                return Err(format!("message format v{magic} is unsupported"));
            }
            return Err(format!(
                "batch of {} bytes is shorter than a v2 batch header ({BATCH_HEADER_LEN})",
                batch.len()
            ));
        }
        let magic = batch[16];
        if magic != 2 {
            return Err(format!("message format v{magic} is unsupported"));
        }
        if check_crc {
            let supplied = u32::from_be_bytes([batch[17], batch[18], batch[19], batch[20]]);
            let actual = crc_fast::crc32_iscsi(&batch[CRC_START..]);
            if supplied != actual {
                return Err(format!(
                    "CRC mismatch (batch says {supplied:#010x}, bytes give {actual:#010x})"
                ));
            }
        }
        let attributes = i16::from_be_bytes([batch[21], batch[22]]);
        let compression = attributes & 0x7;
        if compression > 4 {
            return Err(format!("unknown compression codec {compression}"));
        }
        let record_count = i32::from_be_bytes([batch[57], batch[58], batch[59], batch[60]]);
        let record_count = usize::try_from(record_count)
            .map_err(|_| format!("negative record count {record_count}"))?;
        Ok(BatchHeader {
            base_offset: i64::from_be_bytes(field(batch, 0)),
            partition_leader_epoch: i32::from_be_bytes(field(batch, 12)),
            compression,
            control: attributes & (1 << 5) != 0,
            base_timestamp: i64::from_be_bytes(field(batch, 27)),
            record_count,
        })
    }

    fn leader_epoch(&self) -> Option<i32> {
        (self.partition_leader_epoch >= 0).then_some(self.partition_leader_epoch)
    }
}

/// `N` bytes at `at` of a slice already checked to hold them.
fn field<const N: usize>(b: &[u8], at: usize) -> [u8; N] {
    let mut out = [0u8; N];
    out.copy_from_slice(&b[at..at + N]);
    out
}

/// Decodes the records of an uncompressed batch straight from the received bytes, appending
/// the data records at or after `from_offset` to `out`. Returns the batch's last record
/// offset (control and skipped records included), `None` for a batch without records.
fn decode_plain_batch(
    topic: &Arc<str>,
    partition: i32,
    batch: &Bytes,
    header: &BatchHeader,
    from_offset: i64,
    out: &mut Vec<ConsumerRecord>,
) -> Result<Option<i64>, String> {
    let mut r = Reader {
        bytes: batch,
        at: BATCH_HEADER_LEN,
        end: batch.len(),
    };
    let leader_epoch = header.leader_epoch();
    if !header.control {
        // Bounded by the bytes present: a record takes at least MIN_RECORD_LEN of them.
        out.reserve(
            header
                .record_count
                .min((batch.len() - BATCH_HEADER_LEN) / MIN_RECORD_LEN),
        );
    }
    let mut last = None;
    for i in 0..header.record_count {
        let size = r.varint().map_err(|e| format!("record {i}: {e}"))?;
        let size =
            usize::try_from(size).map_err(|_| format!("record {i}: negative size {size}"))?;
        if size > r.end - r.at {
            return Err(format!(
                "record {i}: size {size} runs past the batch ({} bytes left)",
                r.end - r.at
            ));
        }
        let record_end = r.at + size;
        let mut rec = Reader {
            bytes: batch,
            at: r.at,
            end: record_end,
        };
        r.at = record_end;
        let keep = |offset: i64| !header.control && offset >= from_offset;
        let offset = decode_record(&mut rec, topic, partition, header, leader_epoch, keep, out)
            .map_err(|e| format!("record {i}: {e}"))?;
        if rec.at != rec.end {
            return Err(format!(
                "record {i}: {} bytes left over inside its declared size",
                rec.end - rec.at
            ));
        }
        last = Some(offset);
    }
    if r.at != r.end {
        return Err(format!(
            "{} bytes after the {} records the batch declares",
            r.end - r.at,
            header.record_count
        ));
    }
    Ok(last)
}

/// One record of an uncompressed batch (its size already read; `r` ends where it does),
/// pushed onto `out` when `keep` says so for its offset. Returns its offset. Pushed here rather
/// than returned: a returned record (136 bytes) was copied once more on its way.
#[inline]
fn decode_record(
    r: &mut Reader<'_>,
    topic: &Arc<str>,
    partition: i32,
    header: &BatchHeader,
    leader_epoch: Option<i32>,
    keep: impl Fn(i64) -> bool,
    out: &mut Vec<ConsumerRecord>,
) -> Result<i64, String> {
    r.skip(1)?; // attributes: unused in v2 records
    let timestamp_delta = r.varlong()?;
    let offset_delta = r.varint()?;
    let offset = header
        .base_offset
        .checked_add(i64::from(offset_delta))
        .ok_or_else(|| format!("offset delta {offset_delta} overflows"))?;
    let key = r.nullable_bytes("key")?;
    let value = r.nullable_bytes("value")?;
    let count = r.varint()?;
    let headers = if count == 0 {
        Vec::new()
    } else {
        r.headers(count)?
    };
    if keep(offset) {
        out.push(ConsumerRecord {
            topic: topic.clone(),
            partition,
            offset,
            timestamp: header.base_timestamp.wrapping_add(timestamp_delta),
            key,
            value,
            headers,
            leader_epoch,
        });
    }
    Ok(offset)
}

/// A bounded cursor over part of a received batch (`at <= end <= bytes.len()`).
struct Reader<'a> {
    bytes: &'a Bytes,
    at: usize,
    end: usize,
}

impl Reader<'_> {
    /// The bytes left in the record.
    #[inline]
    fn rest(&self) -> &[u8] {
        self.bytes.get(self.at..self.end).unwrap_or_default()
    }

    #[inline]
    fn take(&mut self, n: usize) -> Result<std::ops::Range<usize>, String> {
        if n > self.end - self.at {
            return Err(format!(
                "{n} bytes wanted, {} left in the record",
                self.end - self.at
            ));
        }
        let range = self.at..self.at + n;
        self.at += n;
        Ok(range)
    }

    #[inline]
    fn skip(&mut self, n: usize) -> Result<(), String> {
        self.take(n).map(|_| ())
    }

    /// An unsigned LEB128 value of at most `max_bytes` bytes. Inlined with a one-byte fast
    /// path: a record has six varints, most of them one byte long, and the call and the
    /// `Result<_, String>` it returned cost more than the decoding.
    #[inline(always)]
    fn uvarint(&mut self, max_bytes: usize) -> Result<u64, String> {
        let rest = self.rest();
        match *rest {
            [b, ..] if b < 0x80 => {
                self.at += 1;
                Ok(u64::from(b))
            }
            // Two bytes: a record's size and a value's length from 64 to 8191 bytes.
            [b0, b1, ..] if b1 < 0x80 && max_bytes >= 2 => {
                self.at += 2;
                Ok(u64::from(b0 & 0x7f) | (u64::from(b1) << 7))
            }
            _ => self.uvarint_long(max_bytes),
        }
    }

    /// The rest of [`Reader::uvarint`]: varints of two bytes or more, and the errors.
    #[inline(never)]
    fn uvarint_long(&mut self, max_bytes: usize) -> Result<u64, String> {
        let rest = self.rest();
        let mut value = 0u64;
        for (i, &b) in rest.iter().take(max_bytes).enumerate() {
            value |= u64::from(b & 0x7f) << (7 * i);
            if b & 0x80 == 0 {
                self.at += i + 1;
                return Ok(value);
            }
        }
        if rest.len() < max_bytes {
            Err("varint runs past the record".to_string())
        } else {
            Err(format!("varint longer than {max_bytes} bytes"))
        }
    }

    /// A zigzag-encoded `int32` varint.
    #[inline(always)]
    fn varint(&mut self) -> Result<i32, String> {
        let v = self.uvarint(5)?;
        let v = u32::try_from(v).map_err(|_| "varint overflows 32 bits".to_string())?;
        Ok(((v >> 1) as i32) ^ -((v & 1) as i32))
    }

    /// A zigzag-encoded `int64` varint.
    #[inline(always)]
    fn varlong(&mut self) -> Result<i64, String> {
        let v = self.uvarint(10)?;
        Ok(((v >> 1) as i64) ^ -((v & 1) as i64))
    }

    /// A varint length (-1: null) and that many bytes, as a slice of the batch.
    #[inline(always)]
    fn nullable_bytes(&mut self, what: &str) -> Result<Option<Bytes>, String> {
        let len = self.varint()?;
        if len == -1 {
            return Ok(None);
        }
        let len = usize::try_from(len).map_err(|_| format!("{what} length {len}"))?;
        let range = self
            .take(len)
            .map_err(|e| format!("{what} of {len} bytes: {e}"))?;
        Ok(Some(self.bytes.slice(range)))
    }

    /// A record's `count` headers (its header count already read).
    #[inline(never)]
    fn headers(&mut self, count: i32) -> Result<Vec<(String, Option<Bytes>)>, String> {
        let count = usize::try_from(count).map_err(|_| format!("negative header count {count}"))?;
        // Bounded by the bytes present: a header takes at least two of them.
        let mut headers = Vec::with_capacity(count.min((self.end - self.at) / 2));
        for _ in 0..count {
            let key = self
                .nullable_bytes("header key")?
                .ok_or_else(|| "null header key".to_string())?;
            let key = std::str::from_utf8(&key)
                .map_err(|_| "header key is not UTF-8".to_string())?
                .to_string();
            headers.push((key, self.nullable_bytes("header value")?));
        }
        Ok(headers)
    }
}

/// A compressed batch, through kafka-protocol's decoder (which decompresses it and checks its
/// CRC again). Returns the batch's last record offset.
fn decode_compressed_batch(
    topic: &Arc<str>,
    partition: i32,
    mut batch: Bytes,
    from_offset: i64,
    out: &mut Vec<ConsumerRecord>,
) -> Result<Option<i64>, String> {
    let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| e.to_string())?;
    let mut last: Option<i64> = None;
    for r in set.records {
        last = Some(last.map_or(r.offset, |l| l.max(r.offset)));
        if r.control || r.offset < from_offset {
            continue;
        }
        out.push(ConsumerRecord {
            topic: topic.clone(),
            partition,
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
    Ok(last)
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
            for isolation in [
                IsolationLevel::ReadUncommitted,
                IsolationLevel::ReadCommitted,
            ] {
                let Ok(req) = fetch_request(&[target(5)], limits, Some("r1"), isolation, v) else {
                    assert!(v < 4 && isolation == IsolationLevel::ReadCommitted, "v{v}");
                    continue;
                };
                encode_request(&req, v, 1, "c").unwrap_or_else(|e| panic!("v{v}: {e}"));
            }
        }
    }

    #[test]
    fn the_request_carries_the_isolation_level_and_read_committed_needs_v4() {
        let limits = FetchLimits {
            max_wait_ms: 500,
            min_bytes: 1,
            max_bytes: 1 << 20,
            partition_max_bytes: 1 << 20,
        };
        for v in 4..=FetchRequest::VERSIONS.max {
            let committed =
                fetch_request(&[target(5)], limits, None, IsolationLevel::ReadCommitted, v)
                    .unwrap();
            // Through the wire and back: the field the broker reads.
            let frame = encode_request(&committed, v, 9, "c").unwrap();
            let decoded = decode_request_body(frame, v);
            assert_eq!(decoded.isolation_level, 1, "v{v}");
            let uncommitted = fetch_request(
                &[target(5)],
                limits,
                None,
                IsolationLevel::ReadUncommitted,
                v,
            )
            .unwrap();
            assert_eq!(uncommitted.isolation_level, 0, "v{v}");
        }
        let err = fetch_request(&[target(5)], limits, None, IsolationLevel::ReadCommitted, 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("read_committed needs Fetch v4"), "{err}");
        // A fetch session's full and incremental requests keep it.
        let mut session = crate::fetch_session::FetchSession::default();
        for (i, offset) in [5, 9].into_iter().enumerate() {
            let mut req = fetch_request(
                &[target(offset)],
                limits,
                None,
                IsolationLevel::ReadCommitted,
                13,
            )
            .unwrap();
            session.prepare(&mut req, 13);
            assert_eq!(req.session_epoch, i as i32, "full, then incremental");
            assert_eq!(req.isolation_level, 1);
            session.on_response(&FetchResponse::default().with_session_id(77));
        }
    }

    /// A request frame (size, header, body) decoded back into its body.
    fn decode_request_body(frame: Bytes, version: i16) -> FetchRequest {
        use kafka_protocol::messages::RequestHeader;
        use kafka_protocol::protocol::{Decodable, HeaderVersion};
        let mut buf = frame.slice(4..);
        let header_version = FetchRequest::header_version(version);
        RequestHeader::decode(&mut buf, header_version).unwrap();
        FetchRequest::decode(&mut buf, version).unwrap()
    }

    /// A transactional batch (attributes bit 4) of producer `pid`, or its abort marker.
    fn txn_batch(base: i64, pid: i64, n: usize, abort_marker: bool) -> Vec<u8> {
        use crate::producer::wire::ProducerIdentity;
        let recs: Vec<RecordData> = if abort_marker {
            vec![RecordData {
                key: Some(Bytes::from_static(&[0, 0, 0, 0])), // version 0, type 0: abort
                value: Some(Bytes::from_static(&[0, 0, 0, 0, 0, 3])), // version 0, epoch 3
                headers: vec![],
                timestamp: 1,
            }]
        } else {
            (0..n)
                .map(|i| RecordData {
                    key: None,
                    value: Some(Bytes::from(format!("v{i}"))),
                    headers: vec![],
                    timestamp: 1,
                })
                .collect()
        };
        let identity = Some(ProducerIdentity {
            producer_id: pid,
            epoch: 0,
        });
        let mut b = encode_batch(&recs, identity, 0, Compression::None)
            .unwrap()
            .to_vec();
        b[0..8].copy_from_slice(&base.to_be_bytes());
        b[22] |= if abort_marker { 0x30 } else { 0x10 };
        recrc(&mut b);
        b
    }

    #[test]
    fn read_committed_drops_aborted_batches_and_read_uncommitted_ignores_the_list() {
        use kafka_protocol::messages::fetch_response::AbortedTransaction;
        use kafka_protocol::messages::ProducerId;
        let mut records = txn_batch(0, 7, 2, false);
        records.extend(batch(2, 1, Compression::None));
        records.extend(txn_batch(3, 7, 1, true));
        let resp = FetchResponse::default().with_responses(vec![FetchableTopicResponse::default()
            .with_topic(TopicName(StrBytes::from_static_str("t")))
            .with_partitions(vec![PartitionData::default()
                .with_partition_index(0)
                .with_high_watermark(9)
                .with_last_stable_offset(4)
                .with_aborted_transactions(Some(vec![AbortedTransaction::default()
                    .with_producer_id(ProducerId(7))
                    .with_first_offset(0)]))
                .with_records(Some(Bytes::from(records)))])]);
        let frame = encode_response_frame::<FetchRequest>(&resp, 12, 1);
        let resp = decode_response::<FetchRequest>(frame, 12).unwrap();
        let offsets = |isolation| {
            let parsed = parse_fetch(resp.clone(), &[target(0)], isolation).unwrap();
            let f = parsed[0].1.clone().unwrap();
            assert_eq!(f.next_offset, Some(4), "the marker is passed too");
            let raw = parse_fetch_raw(resp.clone(), &[target(0)], isolation).unwrap();
            assert_eq!(raw[0].1.as_ref().unwrap().last_stable_offset, 4);
            f.records.iter().map(|r| r.offset).collect::<Vec<i64>>()
        };
        assert_eq!(offsets(IsolationLevel::ReadCommitted), vec![2]);
        assert_eq!(offsets(IsolationLevel::ReadUncommitted), vec![0, 1, 2]);
    }

    #[test]
    fn records_before_the_position_and_partial_batches_are_dropped() {
        let mut all = Vec::new();
        all.extend_from_slice(&batch(10, 3, Compression::Lz4));
        all.extend_from_slice(&batch(13, 2, Compression::None));
        let partial = batch(15, 4, Compression::None);
        all.extend_from_slice(&partial[..partial.len() - 5]);
        let tp = TopicPartition::new("t", 0);
        let (recs, next) = decode_records(&tp, Bytes::from(all.clone()), 11, true).unwrap();
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
        let _ = decode_records(&tp, Bytes::from(b), 0, true);
        let mut neg = vec![0u8; 12];
        neg[8..12].copy_from_slice(&(-5i32).to_be_bytes());
        assert!(decode_records(&tp, Bytes::from(neg), 0, true).is_err());
    }

    /// A batch of `n` records with varied keys, values and headers (null key for even
    /// records, null value every third, two headers on odd ones, one with a null value).
    fn varied_batch(base: i64, n: usize, codec: Compression) -> Vec<u8> {
        let recs: Vec<RecordData> = (0..n)
            .map(|i| RecordData {
                key: (i % 2 == 1).then(|| Bytes::from(format!("key-{i}"))),
                value: (i % 3 != 0).then(|| Bytes::from(vec![i as u8; 100 + i])),
                headers: if i % 2 == 1 {
                    vec![
                        ("h1".to_string(), Some(Bytes::from(format!("x{i}")))),
                        ("h2".to_string(), None),
                    ]
                } else {
                    vec![]
                },
                timestamp: 1_000 + i as i64,
            })
            .collect();
        let mut b = encode_batch(&recs, None, 0, codec).unwrap().to_vec();
        b[0..8].copy_from_slice(&base.to_be_bytes());
        b
    }

    /// Stamps a correct CRC on a batch whose CRC-covered bytes were changed.
    fn recrc(b: &mut [u8]) {
        let crc = crc32c::crc32c(&b[CRC_START..]);
        b[17..21].copy_from_slice(&crc.to_be_bytes());
    }

    /// The reference: kafka-protocol's decoder, which the compressed path uses.
    fn reference(bytes: &[u8], from: i64) -> Vec<ConsumerRecord> {
        let mut out = Vec::new();
        let mut rest = Bytes::copy_from_slice(bytes);
        while !rest.is_empty() {
            let len = i32::from_be_bytes([rest[8], rest[9], rest[10], rest[11]]) as usize;
            let b = rest.split_to(12 + len);
            decode_compressed_batch(&Arc::from("t"), 0, b, from, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn plain_batches_decode_as_kafka_protocol_decodes_them() {
        let tp = TopicPartition::new("t", 0);
        let mut all = varied_batch(100, 7, Compression::None);
        all.extend(varied_batch(107, 1, Compression::None));
        all.extend(varied_batch(108, 5, Compression::Snappy));
        all.extend(varied_batch(113, 40, Compression::None));
        for from in [0, 103, 107, 108, 152, 153, 400] {
            let (recs, next) = decode_records(&tp, Bytes::from(all.clone()), from, true).unwrap();
            assert_eq!(recs, reference(&all, from), "from {from}");
            assert_eq!(next, Some(153));
        }
        let (recs, _) = decode_records(&tp, Bytes::from(all), 0, true).unwrap();
        assert_eq!(recs.len(), 53);
        assert_eq!(recs[1].key.as_deref(), Some(&b"key-1"[..]));
        assert_eq!(recs[0].value, None);
        assert_eq!(recs[1].headers[1], ("h2".to_string(), None));
        assert_eq!(recs[3].timestamp, 1_003);
    }

    #[test]
    fn a_control_batch_moves_the_offset_but_returns_nothing() {
        let mut b = varied_batch(20, 3, Compression::None);
        b[22] |= 1 << 5; // attributes, low byte: the control bit
        recrc(&mut b);
        let (recs, next) =
            decode_records(&TopicPartition::new("t", 0), Bytes::from(b), 0, true).unwrap();
        assert!(recs.is_empty());
        assert_eq!(next, Some(23));
    }

    #[test]
    fn decoded_values_share_the_received_bytes() {
        let b = Bytes::from(varied_batch(0, 4, Compression::None));
        let (recs, _) = decode_records(&TopicPartition::new("t", 0), b.clone(), 0, true).unwrap();
        let value = recs[1].value.as_ref().unwrap();
        let (lo, hi) = (b.as_ptr() as usize, b.as_ptr() as usize + b.len());
        assert!(
            (lo..hi).contains(&(value.as_ptr() as usize)),
            "value was copied"
        );
    }

    #[test]
    fn every_truncation_and_every_corrupt_byte_is_handled_without_panic() {
        let tp = TopicPartition::new("t", 0);
        let whole = varied_batch(0, 6, Compression::None);
        // Cut anywhere: a partial batch is skipped, never decoded.
        for cut in 0..whole.len() {
            let (recs, next) = decode_records(&tp, Bytes::copy_from_slice(&whole[..cut]), 0, true)
                .unwrap_or_else(|e| panic!("cut at {cut}: {e}"));
            assert!(recs.is_empty() && next.is_none(), "cut at {cut}");
        }
        // Any byte changed without fixing the CRC: an error naming the CRC.
        for at in CRC_START..whole.len() {
            let mut b = whole.clone();
            b[at] ^= 0x5a;
            let err = decode_records(&tp, Bytes::from(b), 0, true).unwrap_err();
            assert!(err.contains("CRC"), "byte {at}: {err}");
        }
        // Any byte after the record count changed, CRC fixed: decodes or fails, no panic.
        for at in BATCH_HEADER_LEN..whole.len() {
            for x in [0x01, 0x80, 0xff] {
                let mut b = whole.clone();
                b[at] ^= x;
                recrc(&mut b);
                let _ = decode_records(&tp, Bytes::from(b), 0, true);
            }
        }
    }

    #[test]
    fn check_crcs_off_accepts_a_corrupted_crc_and_on_rejects_it() {
        let tp = TopicPartition::new("t", 0);
        let whole = varied_batch(40, 5, Compression::None);
        let mut bad = whole.clone();
        bad[17] ^= 0xff; // the stored CRC itself
        let err = decode_records(&tp, Bytes::from(bad.clone()), 0, true).unwrap_err();
        assert!(err.contains("CRC mismatch"), "{err}");
        assert!(err.contains("batch at offset 40"), "{err}");
        let (recs, next) = decode_records(&tp, Bytes::from(bad), 0, false).unwrap();
        let (good, _) = decode_records(&tp, Bytes::from(whole.clone()), 0, true).unwrap();
        assert_eq!(recs, good);
        assert_eq!(next, Some(45));
        // Without the CRC, the structure is still checked: a record count that does not fit
        // the bytes is an error either way.
        let mut count = whole;
        count[57..61].copy_from_slice(&9i32.to_be_bytes());
        assert!(decode_records(&tp, Bytes::from(count), 0, false)
            .unwrap_err()
            .contains("record 5"));
    }

    #[test]
    fn records_of_one_answer_share_one_topic_name() {
        let tp = TopicPartition::new("shared-topic", 3);
        let mut all = varied_batch(0, 4, Compression::None);
        all.extend(varied_batch(4, 3, Compression::Lz4));
        let (recs, _) = decode_records(&tp, Bytes::from(all), 0, true).unwrap();
        assert_eq!(recs.len(), 7);
        assert!(recs
            .iter()
            .all(|r| &*r.topic == "shared-topic" && r.partition == 3));
        assert!(recs.iter().all(|r| Arc::ptr_eq(&r.topic, &recs[0].topic)));
    }

    #[test]
    fn malformed_batches_with_valid_crcs_are_clear_errors() {
        let tp = TopicPartition::new("t", 0);
        let whole = varied_batch(0, 2, Compression::None);
        let decode = |b: Vec<u8>| decode_records(&tp, Bytes::from(b), 0, true);
        let with = |edit: &dyn Fn(&mut Vec<u8>)| {
            let mut b = whole.clone();
            edit(&mut b);
            b
        };
        let set_len = |b: &mut Vec<u8>| {
            let len = (b.len() - 12) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
        };
        let count = |n: i32| {
            with(&|b: &mut Vec<u8>| {
                b[57..61].copy_from_slice(&n.to_be_bytes());
                recrc(b);
            })
        };
        // More records declared than present, by one or by billions (no allocation follows
        // the count: at most one record per 7 bytes present is reserved).
        assert!(decode(count(3)).unwrap_err().contains("record 2"));
        assert!(decode(count(i32::MAX)).unwrap_err().contains("record 2"));
        assert!(decode(count(-1))
            .unwrap_err()
            .contains("negative record count"));
        // Fewer: the rest is left over.
        assert!(decode(count(1))
            .unwrap_err()
            .contains("bytes after the 1 records"));
        // Old message formats and unknown codecs.
        let magic1 = with(&|b: &mut Vec<u8>| b[16] = 1);
        assert!(decode(magic1).unwrap_err().contains("v1 is unsupported"));
        let codec = with(&|b: &mut Vec<u8>| {
            b[22] = (b[22] & !7) | 6;
            recrc(b);
        });
        assert!(decode(codec)
            .unwrap_err()
            .contains("unknown compression codec 6"));
        // A batch too short for its header.
        let mut short = whole[..40].to_vec();
        set_len(&mut short);
        assert!(decode(short)
            .unwrap_err()
            .contains("shorter than a v2 batch header"));
        // The first record's size (a zigzag varint right after the header) made huge.
        let huge = with(&|b: &mut Vec<u8>| {
            let mut v = b[..BATCH_HEADER_LEN].to_vec();
            v.extend_from_slice(&[0xfe, 0xff, 0xff, 0xff, 0x0f]); // i32::MAX
            v.extend_from_slice(&b[BATCH_HEADER_LEN + 1..]);
            *b = v;
            set_len(b);
            recrc(b);
        });
        assert!(decode(huge).unwrap_err().contains("runs past the batch"));
        // A varint that never ends.
        let endless = with(&|b: &mut Vec<u8>| {
            b.truncate(BATCH_HEADER_LEN);
            b.extend_from_slice(&[0xff; 12]);
            set_len(b);
            recrc(b);
        });
        assert!(decode(endless).unwrap_err().contains("varint"));
        // A record whose header count claims more headers than its bytes hold.
        let one = varied_batch(0, 1, Compression::None);
        let mut headers = one.clone();
        let last = headers.len() - 1; // record 0 has no headers: its last byte is the count 0
        assert_eq!(headers[last], 0);
        headers[last] = 0x7e; // 63 headers
        recrc(&mut headers);
        assert!(decode(headers).unwrap_err().contains("record 0"));
    }

    /// A batch of one record per value length, with timestamps spread so that the deltas
    /// take one to several varint bytes.
    fn sized_batch(base: i64, lens: &[usize]) -> Vec<u8> {
        let recs: Vec<RecordData> = lens
            .iter()
            .enumerate()
            .map(|(i, &n)| RecordData {
                key: (i % 2 == 0).then(|| Bytes::from(vec![b'k'; n % 200])),
                value: Some(Bytes::from(vec![i as u8; n])),
                headers: vec![],
                timestamp: 1_000 + (1i64 << (i % 40)),
            })
            .collect();
        let mut b = encode_batch(&recs, None, 0, Compression::None)
            .unwrap()
            .to_vec();
        b[0..8].copy_from_slice(&base.to_be_bytes());
        b
    }

    #[test]
    fn one_two_and_longer_varints_decode_as_kafka_protocol_decodes_them() {
        // Value lengths on each side of the one-, two- and three-byte varint boundaries
        // (zigzag: 63 is the largest one-byte length, 8191 the largest two-byte one).
        let lens = [0, 1, 63, 64, 127, 128, 1024, 8191, 8192, 70_000];
        let tp = TopicPartition::new("t", 0);
        let all = sized_batch(7, &lens);
        let (recs, next) = decode_records(&tp, Bytes::from(all.clone()), 0, true).unwrap();
        assert_eq!(recs, reference(&all, 0));
        assert_eq!(next, Some(7 + lens.len() as i64));
        let got: Vec<usize> = recs
            .iter()
            .map(|r| r.value.as_ref().unwrap().len())
            .collect();
        assert_eq!(got, lens);
    }

    #[test]
    fn decoding_into_a_used_vector_empties_it_first() {
        let tp = TopicPartition::new("t", 0);
        let all = Bytes::from(varied_batch(0, 5, Compression::None));
        let (fresh, _) = decode_records(&tp, all.clone(), 0, true).unwrap();
        let mut used = reference(&varied_batch(50, 9, Compression::None), 0);
        used.reserve(1000);
        let (reused, next) = decode_records_into(&tp, all, 0, true, used).unwrap();
        assert_eq!(reused, fresh);
        assert_eq!(next, Some(5));
        assert!(reused.capacity() >= 1000, "the allocation was not kept");
    }

    #[test]
    fn a_record_cut_inside_a_varint_or_past_the_batch_is_an_error_not_a_panic() {
        let tp = TopicPartition::new("t", 0);
        let decode = |b: Vec<u8>| decode_records(&tp, Bytes::from(b), 0, true);
        let set_len = |b: &mut Vec<u8>| {
            let len = (b.len() - 12) as i32;
            b[8..12].copy_from_slice(&len.to_be_bytes());
        };
        // One record, 1,024-byte value, no key: size (2 bytes), attributes, timestamp delta,
        // offset delta, key length, then the value length's two bytes.
        let whole = sized_batch(0, &[1024]);
        let mut keyless = whole.clone();
        let rec = BATCH_HEADER_LEN;
        // Record 0 of `sized_batch` has a key (1024 % 200 = 24 bytes): drop it for a plain
        // layout, then fix the record's size.
        assert_eq!(keyless[rec + 5], 48); // key length 24, zigzag
        keyless.drain(rec + 6..rec + 6 + 24);
        keyless[rec + 5] = 1; // null key
        let size = (keyless.len() - rec - 2) as u64;
        let zz = size << 1;
        keyless[rec] = (zz as u8 & 0x7f) | 0x80;
        keyless[rec + 1] = (zz >> 7) as u8;
        set_len(&mut keyless);
        recrc(&mut keyless);
        let (recs, _) = decode(keyless.clone()).unwrap();
        assert_eq!(recs[0].value.as_ref().map(|v| v.len()), Some(1024));
        assert_eq!(recs[0].key, None);
        // The record's declared size cut to end after the first byte of the value length (a
        // two-byte varint): the varint runs past the record.
        let mut cut = keyless.clone();
        let inner = 1 + 1 + 1 + 1 + 1; // attributes, timestamp delta (0), offset delta, key, first length byte
        assert_eq!(cut[rec + 2 + inner - 1] & 0x80, 0x80);
        let zz = (inner as u64) << 1;
        cut[rec] = zz as u8;
        cut.remove(rec + 1);
        cut.truncate(rec + 1 + inner);
        set_len(&mut cut);
        recrc(&mut cut);
        let err = decode(cut).unwrap_err();
        assert!(
            err.contains("record 0") && err.contains("varint runs past"),
            "{err}"
        );
        // The record's size one byte beyond the batch.
        let mut over = keyless.clone();
        let zz = (size + 1) << 1;
        over[rec] = (zz as u8 & 0x7f) | 0x80;
        over[rec + 1] = (zz >> 7) as u8;
        recrc(&mut over);
        let err = decode(over).unwrap_err();
        assert!(
            err.contains("size 1032 runs past the batch (1031 bytes left)"),
            "{err}"
        );
        // The value's length one beyond the record (the record's size unchanged).
        let mut value = keyless.clone();
        let at = rec + 2 + 4; // size (2), attributes, timestamp delta, offset delta, key length
        let zz = 1026u64 << 1; // 1,025 bytes are left: the value and the header count
        value[at] = (zz as u8 & 0x7f) | 0x80;
        value[at + 1] = (zz >> 7) as u8;
        recrc(&mut value);
        let err = decode(value).unwrap_err();
        assert!(err.contains("value of 1026 bytes"), "{err}");
        // A batch truncated anywhere: dropped as partial, never decoded past its end.
        for end in 0..keyless.len() {
            let (recs, next) = decode(keyless[..end].to_vec()).unwrap();
            assert!(recs.is_empty() && next.is_none());
        }
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
            IsolationLevel::ReadUncommitted,
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
        let parsed = parse_fetch(err, &[target(0)], IsolationLevel::ReadCommitted).unwrap();
        assert_eq!(
            parsed[0].1.as_ref().unwrap_err().code,
            KafkaCode::OFFSET_OUT_OF_RANGE
        );
        assert!(parse_fetch(
            FetchResponse::default().with_error_code(71),
            &[],
            IsolationLevel::ReadUncommitted
        )
        .is_err());
    }
}
