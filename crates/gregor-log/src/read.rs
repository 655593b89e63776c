//! Reads of the partition log: whole batches copied into memory ([`Log::read`]), located in
//! the segment file for a zero-copy send ([`Log::read_slice`]), and ListOffsets lookups.

use std::path::PathBuf;
use std::sync::Arc;

use bytes::Bytes;

use crate::batch::BatchHeader;
use crate::error::{IoContext, LogError, Result};
use crate::log::{lock, Log};
use crate::segment::{scan_with, Segment, Wait};
use crate::txn::AbortedTxn;

/// Whole batches read from the log, as stored (never re-encoded).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadResult {
    /// Concatenated batches; empty when nothing qualifies.
    pub records: Bytes,
    /// Base offset of the first batch returned, if any.
    pub first_batch_offset: Option<i64>,
    /// Offset after the last batch returned (the next fetch position), if any.
    pub next_offset: Option<i64>,
    /// Log start offset at the time of the read.
    pub log_start_offset: i64,
    /// Log end offset at the time of the read.
    pub log_end_offset: i64,
    /// High watermark at the time of the read.
    pub high_watermark: i64,
}

/// Whole batches located in a segment file, to be sent from it: [`Log::read_slice`].
#[derive(Debug, Clone)]
pub struct SliceRead {
    /// Where the batches are.
    pub records: FileSlice,
    /// Records in those batches (the sum of their headers' counts).
    pub record_count: u64,
    /// Base offset of the first batch, if any.
    pub first_batch_offset: Option<i64>,
    /// Offset after the last batch (the next fetch position), if any.
    pub next_offset: Option<i64>,
    /// Log start offset at the time of the read.
    pub log_start_offset: i64,
    /// Log end offset at the time of the read.
    pub log_end_offset: i64,
    /// High watermark at the time of the read.
    pub high_watermark: i64,
}

impl SliceRead {
    fn into_result(self, records: Bytes) -> ReadResult {
        ReadResult {
            records,
            first_batch_offset: self.first_batch_offset,
            next_offset: self.next_offset,
            log_start_offset: self.log_start_offset,
            log_end_offset: self.log_end_offset,
            high_watermark: self.high_watermark,
        }
    }
}

/// A byte range of a segment file, holding the file open: record bytes on their way from the
/// log to a socket without being copied into a response buffer.
#[derive(Debug, Clone)]
pub struct FileSlice {
    /// The segment file; `None` for an empty slice.
    pub file: Option<Arc<std::fs::File>>,
    /// Its path, for error messages.
    pub path: PathBuf,
    /// Where the bytes start.
    pub pos: u64,
    /// How many bytes.
    pub len: usize,
}

impl FileSlice {
    /// No bytes.
    pub fn empty() -> FileSlice {
        FileSlice {
            file: None,
            path: PathBuf::new(),
            pos: 0,
            len: 0,
        }
    }

    /// A slice of `len` bytes of `file` from `pos` (tests, and callers holding a file).
    pub fn new(file: Arc<std::fs::File>, path: PathBuf, pos: u64, len: usize) -> FileSlice {
        FileSlice {
            file: Some(file),
            path,
            pos,
            len,
        }
    }

    /// Whether the slice holds no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Reads the bytes into memory (fewer if the file is shorter now). Blocking file I/O.
    pub fn read(&self) -> Result<Vec<u8>> {
        self.read_into(Vec::new())
    }

    /// Reads the bytes into `buf` (cleared first, its capacity reused; fewer bytes if the
    /// file is shorter now). Blocking file I/O.
    pub fn read_into(&self, mut buf: Vec<u8>) -> Result<Vec<u8>> {
        buf.clear();
        let Some(file) = &self.file else {
            return Ok(buf);
        };
        Segment::read_at_into(file, self.pos, self.len, &mut buf).at(&self.path)?;
        Ok(buf)
    }
}

/// ListOffsets targets.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OffsetSpec {
    /// `-2`: the log start offset.
    Earliest,
    /// `-1`: the log end offset (cap it at the high watermark for consumers).
    Latest,
    /// `-3` (KIP-734): the record with the largest timestamp.
    MaxTimestamp,
    /// The first record whose timestamp is at or after this one.
    Timestamp(i64),
}

/// A ListOffsets answer; `timestamp` is -1 for Earliest/Latest, as in Kafka.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    /// The offset.
    pub offset: i64,
    /// The record's timestamp, or -1.
    pub timestamp: i64,
}

impl Log {
    /// Read whole batches starting with the one that contains `from_offset`, up to `max_bytes`
    /// (but at least one batch, KIP-74), stopping before any batch whose last offset reaches
    /// `upper_bound` (exclusive; e.g. the high watermark for consumers). Reads stay within one
    /// segment; the next read continues at `next_offset`. The bytes are copied into memory:
    /// the fetch path uses [`Log::read_slice`] and sends them from the file instead.
    pub fn read(
        &self,
        from_offset: i64,
        max_bytes: usize,
        upper_bound: Option<i64>,
    ) -> Result<ReadResult> {
        let s = self.read_slice(from_offset, max_bytes, upper_bound)?;
        let records = if s.records.is_empty() {
            Bytes::new()
        } else {
            let buf = s.records.read()?;
            if buf.len() < s.records.len {
                // The segment was truncated under us: report nothing rather than torn batches.
                return Ok(ReadResult {
                    records: Bytes::new(),
                    first_batch_offset: None,
                    next_offset: None,
                    ..s.into_result(Bytes::new())
                });
            }
            Bytes::from(buf)
        };
        Ok(s.into_result(records))
    }

    /// Where the batches [`Log::read`] would return lie in the segment file, without reading
    /// them: the header of each batch is read (to stop at whole batches, the upper bound and
    /// `max_bytes`), the record bytes are not. The slice keeps the file open, so a segment
    /// deleted meanwhile (retention, compaction) is still read whole.
    pub fn read_slice(
        &self,
        from_offset: i64,
        max_bytes: usize,
        upper_bound: Option<i64>,
    ) -> Result<SliceRead> {
        self.read_slice_with(from_offset, max_bytes, upper_bound, Wait::Block)
    }

    /// [`Log::read_slice`] if the batch headers it reads are all in the page cache; `None`
    /// where one is not (the read would wait for the disk), so that an async worker can try
    /// this first and leave the rest to a thread that may block. Either way it takes the log's
    /// lock for the index lookup only, as `read_slice` does.
    pub fn read_slice_cached(
        &self,
        from_offset: i64,
        max_bytes: usize,
        upper_bound: Option<i64>,
    ) -> Result<Option<SliceRead>> {
        match self.read_slice_with(from_offset, max_bytes, upper_bound, Wait::CachedOnly) {
            Ok(s) => Ok(Some(s)),
            Err(LogError::Io { source, .. }) if source.kind() == std::io::ErrorKind::WouldBlock => {
                Ok(None)
            }
            Err(e) => Err(e),
        }
    }

    fn read_slice_with(
        &self,
        from_offset: i64,
        max_bytes: usize,
        upper_bound: Option<i64>,
        wait: Wait,
    ) -> Result<SliceRead> {
        let (mut result, bound, located) =
            self.locate(from_offset, max_bytes, upper_bound, wait)?;
        let Some(at) = located else {
            return Ok(result);
        };
        if at.first.last_offset() >= bound {
            return Ok(result);
        }
        let Some(walked) = at.walk(bound, max_bytes, wait)? else {
            return Ok(result);
        };
        result.records = FileSlice {
            file: Some(at.file),
            path: at.path,
            pos: at.pos,
            len: walked.len as usize,
        };
        result.record_count = walked.count;
        result.first_batch_offset = Some(at.first.base_offset);
        result.next_offset = Some(walked.next_offset);
        Ok(result)
    }

    /// Under the log's lock: the offsets for the answer (an empty one so far), the exclusive
    /// bound on the last offset read, and where the batch holding `from_offset` lies, if any
    /// segment holds it below the bound.
    fn locate(
        &self,
        from_offset: i64,
        max_bytes: usize,
        upper_bound: Option<i64>,
        wait: Wait,
    ) -> Result<(SliceRead, i64, Option<Located>)> {
        let g = lock(&self.inner);
        let (lso, leo, hw) = (g.log_start_offset, g.log_end_offset(), g.high_watermark);
        if from_offset < lso || from_offset > leo {
            return Err(LogError::OffsetOutOfRange {
                offset: from_offset,
                log_start_offset: lso,
                log_end_offset: leo,
            });
        }
        let result = SliceRead {
            records: FileSlice::empty(),
            record_count: 0,
            first_batch_offset: None,
            next_offset: None,
            log_start_offset: lso,
            log_end_offset: leo,
            high_watermark: hw,
        };
        let bound = upper_bound.unwrap_or(i64::MAX).min(leo);
        if from_offset >= bound {
            return Ok((result, bound, None));
        }
        let start_key = g
            .segments
            .range(..=from_offset)
            .next_back()
            .map_or(i64::MIN, |(k, _)| *k);
        for seg in g.segments.range(start_key..).map(|(_, s)| s) {
            if let Some((pos, h)) = seg.translate_with(from_offset, wait)? {
                let located = Located::in_segment(seg, pos, h, bound, max_bytes, wait)?;
                return Ok((result, bound, Some(located)));
            }
        }
        Ok((result, bound, None))
    }

    /// The aborted transactions a read_committed fetch of `[fetch_offset, upper_bound)` must
    /// be told of: every entry of the aborted-transaction index whose last offset is
    /// `>= fetch_offset` and whose first offset is `< upper_bound`, in index order. Pass the
    /// offset after the batches returned as `upper_bound`. No I/O: the indexes are in memory.
    ///
    /// The search starts at the segment holding `fetch_offset` (an entry lives in its
    /// marker's segment, so no earlier one can reach the range) and goes on, as Kafka's does,
    /// until an entry whose last stable offset is `>= upper_bound` shows that no later
    /// transaction began below the bound. A transaction that began in the range may end in a
    /// later segment, so the scan does not stop at the bound. The answer is bounded by the
    /// range: one entry per abort marker in it, plus one per producer whose transaction was
    /// open across `upper_bound`.
    pub fn aborted_transactions(&self, fetch_offset: i64, upper_bound: i64) -> Vec<AbortedTxn> {
        let mut out = Vec::new();
        if upper_bound <= fetch_offset {
            return out;
        }
        let g = lock(&self.inner);
        let start_key = g
            .segments
            .range(..=fetch_offset)
            .next_back()
            .map_or(i64::MIN, |(k, _)| *k);
        for seg in g.segments.range(start_key..).map(|(_, s)| s) {
            if seg.txn_index.collect(fetch_offset, upper_bound, &mut out) {
                break;
            }
        }
        out
    }

    /// ListOffsets.
    pub fn list_offset(&self, spec: OffsetSpec) -> Result<Option<TimestampOffset>> {
        let g = lock(&self.inner);
        let lso = g.log_start_offset;
        match spec {
            OffsetSpec::Earliest => Ok(Some(TimestampOffset {
                offset: lso,
                timestamp: -1,
            })),
            OffsetSpec::Latest => Ok(Some(TimestampOffset {
                offset: g.log_end_offset(),
                timestamp: -1,
            })),
            OffsetSpec::MaxTimestamp => {
                let best = g
                    .segments
                    .values()
                    .filter(|s| s.max_ts >= 0 && s.next_offset > lso)
                    .max_by_key(|s| (s.max_ts, std::cmp::Reverse(s.base)));
                let Some(seg) = best else { return Ok(None) };
                let (ts, off) = (seg.max_ts, seg.offset_of_max_ts);
                let Some((pos, h)) = seg.translate(off)? else {
                    return Ok(None);
                };
                let hit = seg.first_record_matching(pos, &h, |o, t| t == ts && o >= lso)?;
                Ok(hit.map(|(offset, timestamp)| TimestampOffset { offset, timestamp }))
            }
            OffsetSpec::Timestamp(ts) => {
                for seg in g.segments.values() {
                    if seg.next_offset <= lso || seg.max_ts < ts {
                        continue;
                    }
                    if let Some((offset, timestamp)) = seg.find_by_timestamp(ts, lso)? {
                        return Ok(Some(TimestampOffset { offset, timestamp }));
                    }
                }
                Ok(None)
            }
        }
    }
}

/// Where a read's first batch lies in its segment file, and how far the read may go.
struct Located {
    file: Arc<std::fs::File>,
    path: PathBuf,
    /// Position of the first batch.
    pos: u64,
    /// Header of the first batch.
    first: BatchHeader,
    /// Bytes from `pos` the answer may take.
    limit: u64,
    /// Where the header walk starts (batches between `pos` and it are whole in the answer).
    walk_from: u64,
}

/// What the header walk found: the answer's length from the first batch, the offset after
/// it and the offsets it holds.
struct Walked {
    len: u64,
    next_offset: i64,
    count: u64,
}

impl Located {
    /// The first batch `h` at `pos` in `seg`, with the limits of a read bounded by `bound`
    /// (exclusive) and `max_bytes`.
    fn in_segment(
        seg: &Segment,
        pos: u64,
        h: BatchHeader,
        bound: i64,
        max_bytes: usize,
        wait: Wait,
    ) -> Result<Located> {
        // Where readable data ends in this segment: before the batch that reaches the
        // upper bound (the high watermark for consumers), else at the segment's end.
        let end = if bound < seg.next_offset {
            seg.translate_with(bound, wait)?
                .map_or(seg.size, |(p, _)| p)
        } else {
            seg.size
        };
        // What the fetch asked for, but never past the readable end; a first batch
        // larger than that is returned whole (KIP-74). Its size was checked against
        // the segment when it was located and against max.message.bytes when it was
        // appended.
        let limit = (max_bytes as u64)
            .min(end.saturating_sub(pos))
            .max(h.size() as u64);
        // The batches before an indexed batch start inside the limit are whole and
        // inside it (and below the bound, which `end` is before), so their headers
        // need not be read: one syscall each, a dozen per fetch of 64 KiB batches.
        // The walk starts at the last indexed start but one, whose batch is then in
        // the answer for certain, so the offset after the answer is read, not guessed.
        let walk_from = seg
            .offset_index
            .second_last_start_within(pos, pos + limit)
            .map_or(pos, u64::from);
        Ok(Located {
            file: Arc::clone(&seg.file),
            path: seg.log_path(),
            pos,
            first: h,
            limit,
            walk_from,
        })
    }

    /// Reads the headers from `walk_from` to the limit, stopping before a batch that reaches
    /// `bound` or would take the answer past `max_bytes` (after the first). `None` when no
    /// whole batch was found: a batch torn at the limit ends the walk as "invalid", the
    /// batches before it are whole and the torn one is left for the next fetch, and nothing
    /// whole where the walk began (the segment was truncated under us) reports nothing rather
    /// than torn bytes.
    fn walk(&self, bound: i64, max_bytes: usize, wait: Wait) -> Result<Option<Walked>> {
        let (pos, first) = (self.pos, &self.first);
        let mut len = self.walk_from - pos;
        let mut next = None;
        let mut count = 0u64;
        let mut skipped = self.walk_from > pos;
        scan_with(
            &self.file,
            self.walk_from,
            pos + self.limit,
            false,
            wait,
            |_, h, _| {
                if skipped {
                    // The batches skipped hold the offsets from the first batch's to this one's
                    // (a compacted segment has gaps: they are counted too).
                    skipped = false;
                    count = u64::try_from(h.base_offset - first.base_offset).unwrap_or(0);
                }
                if h.last_offset() >= bound || (len > 0 && len + h.size() as u64 > max_bytes as u64)
                {
                    return Ok(false);
                }
                len += h.size() as u64;
                next = Some(h.next_offset());
                count += u64::try_from(h.record_count).unwrap_or(0);
                Ok(true)
            },
        )
        .at(&self.path)?;
        Ok(next.map(|next_offset| Walked {
            len,
            next_offset,
            count,
        }))
    }
}
