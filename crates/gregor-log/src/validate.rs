//! Records of one batch, read as a stream, and the rules Kafka's log validator applies to them.
//!
//! Nothing here sizes memory or a loop by a number from the batch: records are read one at a
//! time until the (decompressed) records section ends, a compressed section is cut off at the
//! decompression cap, and the header's `recordCount` and `lastOffsetDelta` are only compared
//! with what was actually read.

use std::io::{BufRead, BufReader, Read};

use crate::batch::{self, read_varint, BatchHeader, Codec, Origin, HEADER_LEN, LOG_OVERHEAD};
use crate::codec;
use crate::error::{LogError, RecordErrors, RecordProblem, Result};

fn invalid(m: String) -> LogError {
    LogError::InvalidRecord(m)
}

/// One record, borrowed from the batch (uncompressed) or from the stream's record buffer.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RecordView<'b> {
    /// `timestampDelta` (relative to the batch's base timestamp).
    pub timestamp_delta: i64,
    /// `offsetDelta` (relative to the batch's base offset).
    pub offset_delta: i64,
    /// Key, `None` when null.
    pub key: Option<&'b [u8]>,
    /// Value, `None` when null (a tombstone).
    pub value: Option<&'b [u8]>,
    /// Number of headers.
    pub header_count: usize,
    /// The headers' bytes (already checked to parse).
    pub headers: &'b [u8],
    /// Everything after `offsetDelta`: key, value and headers as encoded.
    pub tail: &'b [u8],
}

impl<'b> RecordView<'b> {
    /// Parse one record body (the bytes after its length varint). The fields must use the
    /// body exactly, as Kafka requires.
    pub fn parse(body: &'b [u8]) -> Result<RecordView<'b>> {
        let mut c = Cursor { buf: body, pos: 0 };
        if body.is_empty() {
            return Err(invalid("empty record".into()));
        }
        c.pos = 1; // attributes: unused in v2
        let timestamp_delta = c.varint("timestamp delta")?;
        let offset_delta = c.varint("offset delta")?;
        let tail_start = c.pos;
        let key = c.nullable("key")?;
        let value = c.nullable("value")?;
        let n = c.varint("header count")?;
        if n < 0 {
            return Err(invalid(format!("negative header count {n}")));
        }
        let headers_start = c.pos;
        let mut header_count = 0usize;
        // Each header takes at least two bytes, so the body bounds this loop, not `n`.
        for _ in 0..n {
            if c.nullable("header key")?.is_none() {
                return Err(invalid("null header key".into()));
            }
            c.nullable("header value")?;
            header_count += 1;
        }
        if c.pos != body.len() {
            return Err(invalid(format!(
                "record of {} bytes has {} bytes after its last field",
                body.len(),
                body.len() - c.pos
            )));
        }
        Ok(RecordView {
            timestamp_delta,
            offset_delta,
            key,
            value,
            header_count,
            headers: &body[headers_start..],
            tail: &body[tail_start..],
        })
    }

    /// The headers as `(key, value)` pairs.
    pub fn header_pairs(&self) -> impl Iterator<Item = (&'b [u8], Option<&'b [u8]>)> {
        let mut c = Cursor {
            buf: self.headers,
            pos: 0,
        };
        (0..self.header_count).map_while(move |_| {
            let k = c.nullable("header key").ok()??;
            let v = c.nullable("header value").ok()?;
            Some((k, v))
        })
    }
}

struct Cursor<'b> {
    buf: &'b [u8],
    pos: usize,
}

impl<'b> Cursor<'b> {
    fn varint(&mut self, what: &str) -> Result<i64> {
        let (v, n) = read_varint(&self.buf[self.pos..])
            .ok_or_else(|| invalid(format!("bad varint in {what}")))?;
        self.pos += n;
        Ok(v)
    }
    fn nullable(&mut self, what: &str) -> Result<Option<&'b [u8]>> {
        let len = self.varint(what)?;
        if len < -1 {
            return Err(invalid(format!("{what} length {len}")));
        }
        let Ok(len) = usize::try_from(len) else {
            return Ok(None);
        };
        let s = self
            .buf
            .get(self.pos..)
            .and_then(|rest| rest.get(..len))
            .ok_or_else(|| invalid(format!("{what} overruns its record")))?;
        self.pos += len;
        Ok(Some(s))
    }
}

enum Source<'a> {
    /// Uncompressed: records are borrowed from the batch.
    Plain { data: &'a [u8], pos: usize },
    /// Compressed: decompressed record by record into `body`.
    Stream {
        reader: BufReader<Box<dyn Read + 'a>>,
        body: Vec<u8>,
        cap_left: usize,
        cap: usize,
    },
}

/// The records of one batch, one at a time.
pub(crate) struct RecordStream<'a> {
    src: Source<'a>,
}

/// Bytes of decoder input buffered between a decompressor and the record parser.
const STREAM_BUFFER: usize = 8 << 10;

impl<'a> RecordStream<'a> {
    /// Records of `batch` (exactly one whole batch whose header is `h`), decompressing at most
    /// `cap` bytes.
    pub fn new(h: &BatchHeader, batch: &'a [u8], cap: usize) -> Result<RecordStream<'a>> {
        let section = batch
            .get(HEADER_LEN..h.size())
            .ok_or_else(|| LogError::CorruptMessage("truncated batch".into()))?;
        let codec = h
            .codec()
            .ok_or_else(|| invalid(format!("unknown compression codec {}", h.attributes & 7)))?;
        let src = if codec == Codec::None {
            Source::Plain {
                data: section,
                pos: 0,
            }
        } else {
            Source::Stream {
                reader: BufReader::with_capacity(
                    STREAM_BUFFER,
                    codec::reader(codec, section, cap)?,
                ),
                body: Vec::new(),
                cap_left: cap,
                cap,
            }
        };
        Ok(RecordStream { src })
    }

    /// The next record, `None` at the end of the records section.
    pub fn next_record(&mut self) -> Result<Option<RecordView<'_>>> {
        match &mut self.src {
            Source::Plain { data, pos } => {
                if *pos >= data.len() {
                    return Ok(None);
                }
                let (len, n) = read_varint(&data[*pos..])
                    .ok_or_else(|| invalid("bad record length varint".into()))?;
                let len = usize::try_from(len)
                    .map_err(|_| invalid(format!("negative record length {len}")))?;
                let start = *pos + n;
                let body = data
                    .get(start..)
                    .and_then(|rest| rest.get(..len))
                    .ok_or_else(|| invalid("record overruns the batch".into()))?;
                *pos = start + len;
                RecordView::parse(body).map(Some)
            }
            Source::Stream {
                reader,
                body,
                cap_left,
                cap,
            } => {
                let Some((len, n)) = read_stream_varint(reader)? else {
                    return Ok(None);
                };
                let len = usize::try_from(len)
                    .map_err(|_| invalid(format!("negative record length {len}")))?;
                let used = n.saturating_add(len);
                if used > *cap_left {
                    return Err(codec::over_cap(*cap));
                }
                *cap_left -= used;
                body.clear();
                // Grows with the data that actually arrives, not with the announced length.
                reader
                    .take(len as u64)
                    .read_to_end(body)
                    .map_err(codec::read_error)?;
                if body.len() != len {
                    return Err(invalid("record overruns the records section".into()));
                }
                RecordView::parse(body).map(Some)
            }
        }
    }
}

/// A varint from a stream: `None` at a clean end of stream (before its first byte).
fn read_stream_varint(r: &mut impl BufRead) -> Result<Option<(i64, usize)>> {
    let mut raw = [0u8; 10];
    for i in 0..raw.len() {
        let buf = r.fill_buf().map_err(codec::read_error)?;
        let Some(&b) = buf.first() else {
            if i == 0 {
                return Ok(None);
            }
            return Err(invalid("records section ends inside a varint".into()));
        };
        r.consume(1);
        raw[i] = b;
        if b & 0x80 == 0 {
            return Ok(read_varint(&raw[..=i]));
        }
    }
    Err(invalid("varint longer than 10 bytes".into()))
}

/// `message.timestamp.*` bounds for CreateTime records, as absolute timestamps.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TimestampBounds {
    /// Earliest accepted timestamp (`now - message.timestamp.before.max.ms`).
    pub earliest: i64,
    /// Latest accepted timestamp (`now + message.timestamp.after.max.ms`).
    pub latest: i64,
}

/// What the records of a batch must satisfy.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Rules {
    /// Leader (dense deltas) or follower/recovery (ascending deltas, gaps allowed).
    pub origin: Origin,
    /// `cleanup.policy` includes `compact`: every record of a data batch needs a key.
    pub compacted: bool,
    /// CreateTime bounds; `None` skips the check (followers, recovery, LogAppendTime topics).
    pub timestamps: Option<TimestampBounds>,
    /// Cap on decompressed bytes.
    pub cap: usize,
}

/// Rules for batches already in the log (recovery, the cleaner, readers): the follower's
/// offset rules and the decompression cap; nothing that depends on a setting or the clock.
pub(crate) const STORED: Rules = Rules {
    origin: Origin::Follower,
    compacted: false,
    timestamps: None,
    cap: codec::MAX_DECOMPRESSED_BYTES,
};

/// What reading every record showed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Summary {
    /// Largest record timestamp (-1 when none has one); the header's under LogAppendTime.
    pub max_timestamp: i64,
    /// Records read (== the header's `recordCount`).
    pub records: u32,
}

/// One listed refused record per this many bytes of the batch: every record of an uncompressed
/// batch (a record takes at least 7 bytes), while a small compressed batch of many bad records
/// cannot make the broker's answer much larger than the request.
const BATCH_BYTES_PER_RECORD_ERROR: usize = 4;

/// Validate the batch at the start of `buf` and return its header and what its records
/// showed. Checks the length fields against `max_message_bytes` and the buffer, magic 2, the
/// CRC32C, the header's count and offset range, then reads every record (decompressing
/// compressed batches as a stream, at most `rules.cap` bytes) and checks them against the
/// header and `rules` (see [`check_records`]).
pub(crate) fn validate_batch(
    buf: &[u8],
    max_message_bytes: usize,
    rules: &Rules,
) -> Result<(BatchHeader, Summary)> {
    let Some(batch_length) = batch::batch_length(buf) else {
        return Err(LogError::CorruptMessage(format!(
            "{} trailing bytes are too few for a batch",
            buf.len()
        )));
    };
    if batch_length < (HEADER_LEN - LOG_OVERHEAD) as i32 {
        return Err(LogError::CorruptMessage(format!(
            "batchLength {batch_length} is smaller than the v2 header"
        )));
    }
    let size = LOG_OVERHEAD + batch_length as usize;
    if size > max_message_bytes {
        return Err(LogError::MessageTooLarge {
            size,
            max: max_message_bytes,
        });
    }
    if size > buf.len() {
        return Err(LogError::CorruptMessage(format!(
            "batch of {size} bytes truncated to {}",
            buf.len()
        )));
    }
    let batch = &buf[..size];
    let h = BatchHeader::parse(batch).expect("size >= HEADER_LEN was checked");
    if h.magic != 2 {
        return Err(LogError::CorruptMessage(format!(
            "unsupported magic {} (only v2 batches are accepted)",
            h.magic
        )));
    }
    let crc = batch::compute_crc(batch);
    if crc != h.crc {
        return Err(LogError::CorruptMessage(format!(
            "CRC32C mismatch: stored {:#010x}, computed {crc:#010x}",
            h.crc
        )));
    }
    check_header_rules(&h, rules.origin)?;
    let summary = check_records(&h, batch, rules)?;
    Ok((h, summary))
}

fn check_header_rules(h: &BatchHeader, origin: Origin) -> Result<()> {
    let invalid = |m: String| Err(LogError::InvalidRecord(m));
    if h.codec().is_none() {
        return invalid(format!("unknown compression codec {}", h.attributes & 7));
    }
    if h.last_offset_delta < 0 {
        return invalid(format!("negative lastOffsetDelta {}", h.last_offset_delta));
    }
    if h.record_count < 0 {
        return invalid(format!("negative record count {}", h.record_count));
    }
    match origin {
        Origin::Leader => {
            if h.record_count == 0
                || i64::from(h.record_count) != i64::from(h.last_offset_delta) + 1
            {
                return invalid(format!(
                    "record count {} does not match lastOffsetDelta {}",
                    h.record_count, h.last_offset_delta
                ));
            }
        }
        Origin::Follower => {
            if i64::from(h.record_count) > i64::from(h.last_offset_delta) + 1 {
                return invalid(format!(
                    "record count {} exceeds the offset range of lastOffsetDelta {}",
                    h.record_count, h.last_offset_delta
                ));
            }
            if h.base_offset < 0 {
                return invalid(format!("negative base offset {}", h.base_offset));
            }
        }
    }
    Ok(())
}

/// Read every record of `batch` and check it against the header and `rules`, as Kafka's log
/// validator does: the number of records equals `recordCount`; offset deltas are `0..n` for a
/// leader and ascending within `lastOffsetDelta` otherwise (these, and a record that does not
/// parse, refuse the batch at once); keys are present on compacted topics, CreateTime
/// timestamps lie within the bounds and a producer's batch is not LogAppendTime (these are
/// checked on every record and reported per record, [`LogError::RecordErrors`]).
pub(crate) fn check_records(h: &BatchHeader, batch: &[u8], rules: &Rules) -> Result<Summary> {
    let mut stream = RecordStream::new(h, batch, rules.cap)?;
    let expected = u32::try_from(h.record_count)
        .map_err(|_| invalid(format!("negative record count {}", h.record_count)))?;
    let mut refused = RecordErrors::new(batch.len() / BATCH_BYTES_PER_RECORD_ERROR);
    let mut n: u32 = 0;
    let mut prev_delta: i64 = -1;
    let mut max_ts: i64 = -1;
    while let Some(r) = stream.next_record()? {
        if n >= expected {
            return Err(invalid(format!(
                "more records than the record count {expected}"
            )));
        }
        let delta = r.offset_delta;
        let ok = match rules.origin {
            Origin::Leader => delta == i64::from(n),
            Origin::Follower => delta > prev_delta && delta <= i64::from(h.last_offset_delta),
        };
        if !ok {
            return Err(invalid(format!(
                "record {n} has offset delta {delta} (lastOffsetDelta {})",
                h.last_offset_delta
            )));
        }
        prev_delta = delta;
        let ts = if h.is_log_append_time() {
            h.max_timestamp
        } else {
            h.base_timestamp.wrapping_add(r.timestamp_delta)
        };
        if let Some(problem) = record_problem(h, &r, ts, rules) {
            refused.push(n, problem);
        }
        max_ts = max_ts.max(ts);
        n += 1;
    }
    if n != expected {
        return Err(invalid(format!(
            "record count {expected} but the batch holds {n} records"
        )));
    }
    if !refused.is_empty() {
        return Err(LogError::RecordErrors(refused));
    }
    Ok(Summary {
        max_timestamp: max_ts,
        records: n,
    })
}

/// The first rule record `r` (timestamp `ts`) of the batch `h` breaks, if any: a missing key
/// on a compacted topic, then a timestamp out of bounds, then LogAppendTime claimed by a
/// producer.
fn record_problem(
    h: &BatchHeader,
    r: &RecordView<'_>,
    ts: i64,
    rules: &Rules,
) -> Option<RecordProblem> {
    if rules.compacted && !h.is_control() && r.key.is_none() {
        return Some(RecordProblem::NoKeyOnCompactedTopic);
    }
    if let Some(b) = rules.timestamps {
        if ts != -1 && (ts < b.earliest || ts > b.latest) {
            return Some(RecordProblem::TimestampOutOfRange {
                timestamp: ts,
                earliest: b.earliest,
                latest: b.latest,
            });
        }
    }
    if rules.origin == Origin::Leader && h.is_log_append_time() {
        return Some(RecordProblem::LogAppendTimeFromProducer);
    }
    None
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;
    use crate::error::{kafka_code, RecordError};
    use crate::records::{encode_batch, simple_batch, BatchSpec, Record};

    const NOW: i64 = 1_700_000_000_000;

    fn leader(compacted: bool, timestamps: Option<TimestampBounds>) -> Rules {
        Rules {
            origin: Origin::Leader,
            compacted,
            timestamps,
            ..STORED
        }
    }

    fn check(batch: &[u8], rules: &Rules) -> Result<Summary> {
        let h = BatchHeader::parse(batch).expect("header");
        check_records(&h, batch, rules)
    }

    fn refused(r: Result<Summary>) -> RecordErrors {
        match r {
            Err(LogError::RecordErrors(e)) => e,
            other => panic!("expected record errors, got {other:?}"),
        }
    }

    fn indexes(e: &RecordErrors) -> Vec<u32> {
        e.errors().iter().map(|e| e.batch_index).collect()
    }

    fn record(offset: i64, timestamp: i64, key: Option<&'static [u8]>) -> Record {
        Record {
            offset,
            timestamp,
            key: key.map(Bytes::from_static),
            value: Some(Bytes::from_static(b"v")),
            headers: Vec::new(),
        }
    }

    #[test]
    fn keyless_records_on_a_compacted_topic_are_each_reported() {
        let kvs: Vec<_> = (0..10)
            .map(|i| {
                (
                    if i % 4 == 1 { None } else { Some(&b"k"[..]) },
                    Some(&b"v"[..]),
                )
            })
            .collect();
        for codec in [Codec::None, Codec::Gzip, Codec::Zstd] {
            let b = simple_batch(codec, NOW, &kvs).expect("encode");
            let e = refused(check(&b, &leader(true, None)));
            assert_eq!(indexes(&e), [1, 5, 9], "{codec:?}");
            assert_eq!(e.total(), 3);
            assert!(e
                .errors()
                .iter()
                .all(|e| e.problem == RecordProblem::NoKeyOnCompactedTopic));
            assert_eq!(e.kafka_error_code(), kafka_code::INVALID_RECORD);
            assert_eq!(
                e.to_string(),
                "3 records refused, so the batch was not appended: record 1: compacted topic \
                 cannot accept a record without a key; record 5: compacted topic cannot accept \
                 a record without a key; record 9: compacted topic cannot accept a record \
                 without a key"
            );
            // Not compacted: the same batch is fine.
            assert_eq!(check(&b, &leader(false, None)).expect("valid").records, 10);
        }
    }

    #[test]
    fn timestamps_out_of_bounds_are_reported_per_record_as_invalid_timestamp() {
        let bounds = TimestampBounds {
            earliest: NOW - 100,
            latest: NOW + 10,
        };
        let recs = [
            record(0, NOW, Some(b"k")),
            record(1, NOW - 101, Some(b"k")),
            record(2, NOW + 10, Some(b"k")),
            record(3, NOW + 11, None),
            record(4, -1, Some(b"k")),
            record(5, NOW + 11, Some(b"k")),
        ];
        let b = encode_batch(&BatchSpec::default(), &recs).expect("encode");
        let e = refused(check(&b, &leader(false, Some(bounds))));
        let out = |timestamp| RecordProblem::TimestampOutOfRange {
            timestamp,
            earliest: NOW - 100,
            latest: NOW + 10,
        };
        let expected = [(1, out(NOW - 101)), (3, out(NOW + 11)), (5, out(NOW + 11))];
        let expected: Vec<_> = expected
            .into_iter()
            .map(|(batch_index, problem)| RecordError {
                batch_index,
                problem,
            })
            .collect();
        assert_eq!(e.errors(), expected);
        assert_eq!(e.kafka_error_code(), kafka_code::INVALID_TIMESTAMP);
        assert_eq!(
            e.errors()[0].problem.to_string(),
            format!(
                "timestamp {} is out of range [{}, {}]",
                NOW - 101,
                NOW - 100,
                NOW + 10
            )
        );
        // On a compacted topic the missing key of record 3 is its first problem, and one bad
        // timestamp among the rest still makes the partition's error INVALID_TIMESTAMP.
        let e = refused(check(&b, &leader(true, Some(bounds))));
        assert_eq!(indexes(&e), [1, 3, 5]);
        assert_eq!(e.errors()[1].problem, RecordProblem::NoKeyOnCompactedTopic);
        assert_eq!(e.kafka_error_code(), kafka_code::INVALID_TIMESTAMP);
    }

    #[test]
    fn a_producer_batch_claiming_log_append_time_refuses_every_record() {
        let recs = [record(0, NOW, Some(b"k")), record(1, NOW, Some(b"k"))];
        let spec = BatchSpec {
            log_append_time: true,
            max_timestamp: Some(NOW),
            ..BatchSpec::default()
        };
        let b = encode_batch(&spec, &recs).expect("encode");
        let e = refused(check(&b, &leader(false, None)));
        assert_eq!(indexes(&e), [0, 1]);
        assert!(e
            .errors()
            .iter()
            .all(|e| e.problem == RecordProblem::LogAppendTimeFromProducer));
        assert_eq!(e.kafka_error_code(), kafka_code::INVALID_TIMESTAMP);
        // A leader's own LogAppendTime batch, copied by a follower or recovered, is fine.
        assert_eq!(check(&b, &STORED).expect("stored").max_timestamp, NOW);
    }

    #[test]
    fn batch_level_errors_win_over_record_errors() {
        // Record 0 has no key, record 1 jumps an offset: the batch is refused as a whole.
        let recs = [record(0, NOW, None), record(2, NOW, Some(b"k"))];
        let spec = BatchSpec {
            last_offset_delta: Some(2),
            ..BatchSpec::default()
        };
        let b = encode_batch(&spec, &recs).expect("encode");
        let err = check(&b, &leader(true, None)).expect_err("offset delta");
        assert!(
            matches!(err, LogError::InvalidRecord(ref m) if m.contains("offset delta")),
            "{err}"
        );
        // A record count the records contradict, likewise.
        let mut b = simple_batch(Codec::None, NOW, &[(None, Some(b"v")), (None, Some(b"v"))])
            .expect("encode");
        b[57..61].copy_from_slice(&3i32.to_be_bytes());
        let err = check(&b, &leader(true, None)).expect_err("record count");
        assert!(
            matches!(err, LogError::InvalidRecord(ref m) if m.contains("record count")),
            "{err}"
        );
    }

    #[test]
    fn the_list_is_bounded_by_the_batch_size_not_by_the_record_count() {
        let kvs = vec![(None, None); 20_000];
        // Uncompressed, every record is listed.
        let b = simple_batch(Codec::None, NOW, &kvs).expect("encode");
        let e = refused(check(&b, &leader(true, None)));
        assert_eq!((e.total(), e.errors().len()), (20_000, 20_000));
        assert!(indexes(&e).iter().copied().eq(0..20_000));
        // Compressed into a few hundred bytes, only the first records are listed; the count
        // and the message still tell how many were refused.
        let b = simple_batch(Codec::Zstd, NOW, &kvs).expect("encode");
        let e = refused(check(&b, &leader(true, None)));
        let listed = b.len() / BATCH_BYTES_PER_RECORD_ERROR;
        assert!(listed < 20_000, "{} bytes", b.len());
        assert_eq!((e.total(), e.errors().len()), (20_000, listed));
        assert!(indexes(&e).iter().copied().eq(0..listed as u32));
        assert!(
            e.to_string()
                .ends_with(&format!("; 19997 more (the first {listed} are listed)")),
            "{e}"
        );
    }
}
