//! `isolation.level=read_committed`: dropping the record batches of aborted transactions from
//! one partition's Fetch answer. Pure.
//!
//! In read_committed the broker answers up to the partition's last stable offset and lists the
//! transactions aborted in that range, each as (producer id, first offset). Walking the
//! batches in offset order, before each batch every listed transaction whose first offset is at
//! or before the batch's last offset marks its producer aborted; a transactional batch of an
//! aborted producer is dropped whole, and that producer's abort marker (a control batch) ends
//! it. The list is per answer: the broker lists a transaction in every answer whose range it
//! overlaps, so nothing is carried from one answer to the next.
//!
//! Control batches are kept: the decoder never returns a control record, in either level, and
//! checks their bytes like any batch. Dropped batches still lie before the answer's
//! `next_offset`, so the consumer's position moves past them and past the markers.

use std::cmp::Reverse;
use std::collections::HashSet;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use kafka_protocol::records::RecordBatchDecoder;

/// One entry of a Fetch answer's `aborted_transactions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    pub producer_id: i64,
    pub first_offset: i64,
}

/// What the filter reads of one batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchTxnInfo {
    /// -1 for a batch without a producer id.
    pub producer_id: i64,
    pub last_offset: i64,
    /// Attributes bit 4.
    pub transactional: bool,
    /// A control batch (attributes bit 5) whose record is an abort marker (key type 0).
    pub abort_marker: bool,
}

/// The aborted transactions of one partition's answer, taken in first-offset order as the
/// batches are walked.
#[derive(Debug, Default)]
pub struct TxnFilter {
    /// Not reached yet, the lowest first offset last (popped first).
    pending: Vec<AbortedTxn>,
    /// Producers inside an aborted transaction at the current batch.
    aborted: HashSet<i64>,
}

impl TxnFilter {
    pub fn new(mut aborted: Vec<AbortedTxn>) -> TxnFilter {
        aborted.sort_by_key(|t| Reverse(t.first_offset));
        TxnFilter {
            pending: aborted,
            aborted: HashSet::new(),
        }
    }

    /// Whether the batch stays (its records may reach the application, unless it is a control
    /// batch); call it for every batch of the answer in offset order.
    pub fn keep(&mut self, b: &BatchTxnInfo) -> bool {
        if b.producer_id < 0 {
            return true;
        }
        while let Some(t) = self.pending.last().copied() {
            if t.first_offset > b.last_offset {
                break;
            }
            self.aborted.insert(t.producer_id);
            self.pending.pop();
        }
        if b.abort_marker {
            self.aborted.remove(&b.producer_id);
            return true;
        }
        !(b.transactional && self.aborted.contains(&b.producer_id))
    }
}

/// Bytes of a v2 batch header (up to and including the record count).
const HEADER_LEN: usize = 61;
const TRANSACTIONAL: i16 = 1 << 4;
const CONTROL: i16 = 1 << 5;

/// The complete batches of one partition's answer without those of aborted transactions (see
/// the module's rules). Without aborted transactions the bytes are returned as they are; when
/// every batch kept or dropped forms one run, as a slice of them; otherwise the kept batches
/// are copied together. A batch too short for a header, or whose length runs past the bytes,
/// ends the walk and is kept with the rest (the decoder reports it). An error names a control
/// batch that does not decode or whose key is not a control key.
pub fn drop_aborted(batches: Bytes, aborted: Vec<AbortedTxn>) -> Result<Bytes, String> {
    if aborted.is_empty() {
        return Ok(batches);
    }
    let mut filter = TxnFilter::new(aborted);
    let mut kept: Vec<Range<usize>> = Vec::new();
    let mut at = 0usize;
    while at < batches.len() {
        let Some(end) = batch_end(&batches, at) else {
            break;
        };
        let info = batch_info(&batches, at..end)?;
        if info.is_none_or(|info| filter.keep(&info)) {
            match kept.last_mut() {
                Some(r) if r.end == at => r.end = end,
                _ => kept.push(at..end),
            }
        }
        at = end;
    }
    if at < batches.len() {
        match kept.last_mut() {
            Some(r) if r.end == at => r.end = batches.len(),
            _ => kept.push(at..batches.len()),
        }
    }
    Ok(match kept.as_slice() {
        [] => Bytes::new(),
        [one] if *one == (0..batches.len()) => batches,
        [one] => batches.slice(one.clone()),
        many => {
            let mut out = BytesMut::with_capacity(many.iter().map(|r| r.len()).sum());
            for r in many {
                out.extend_from_slice(&batches[r.clone()]);
            }
            out.freeze()
        }
    })
}

/// Where the batch starting at `at` ends, when its header is there and its length fits.
fn batch_end(bytes: &[u8], at: usize) -> Option<usize> {
    let len = i32::from_be_bytes(read(bytes, at + 8)?);
    let end = (at + 12).checked_add(usize::try_from(len).ok()?)?;
    (end <= bytes.len() && end - at >= HEADER_LEN).then_some(end)
}

/// The filter's view of the batch at `range` (`None`: not a v2 batch, left to the decoder).
fn batch_info(bytes: &Bytes, range: Range<usize>) -> Result<Option<BatchTxnInfo>, String> {
    let b = &bytes[range.clone()];
    if b.get(16) != Some(&2) {
        return Ok(None);
    }
    let (Some(base), Some(attributes), Some(delta), Some(producer_id)) = (
        read(b, 0).map(i64::from_be_bytes),
        read(b, 21).map(i16::from_be_bytes),
        read(b, 23).map(i32::from_be_bytes),
        read(b, 43).map(i64::from_be_bytes),
    ) else {
        return Ok(None);
    };
    let abort_marker = if attributes & CONTROL != 0 && producer_id >= 0 {
        is_abort_marker(bytes.slice(range))
            .map_err(|reason| format!("control batch at offset {base}: {reason}"))?
    } else {
        false
    };
    Ok(Some(BatchTxnInfo {
        producer_id,
        last_offset: base.saturating_add(i64::from(delta)),
        transactional: attributes & TRANSACTIONAL != 0,
        abort_marker,
    }))
}

/// Whether a control batch's first record is an abort marker: its key is an int16 version
/// (0 today) and an int16 type, 0 for abort and 1 for commit. Decoded with kafka-protocol's
/// decoder (a marker is one small record, written uncompressed by Kafka).
fn is_abort_marker(mut batch: Bytes) -> Result<bool, String> {
    let set = RecordBatchDecoder::decode(&mut batch).map_err(|e| e.to_string())?;
    let Some(record) = set.records.first() else {
        // Compaction may leave a control batch without records.
        return Ok(false);
    };
    let key = record.key.as_deref().unwrap_or_default();
    let (Some(version), Some(kind)) = (
        read(key, 0).map(i16::from_be_bytes),
        read(key, 2).map(i16::from_be_bytes),
    ) else {
        return Err(format!("control record key of {} bytes", key.len()));
    };
    if version < 0 {
        return Err(format!("control record key version {version}"));
    }
    Ok(kind == 0)
}

/// `N` bytes at `at`, when there.
fn read<const N: usize>(b: &[u8], at: usize) -> Option<[u8; N]> {
    b.get(at..at.checked_add(N)?)?.try_into().ok()
}

#[cfg(test)]
#[path = "txn_filter_tests.rs"]
mod tests;
