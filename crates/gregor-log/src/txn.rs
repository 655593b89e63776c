//! Transactions in a partition's log: the control batches that end them (commit and abort
//! markers), the transactions each producer has open and the last stable offset they allow,
//! and the entries of Kafka's aborted-transaction index (`.txnindex`).
//!
//! Pure: the partition feeds [`OpenTransactions`] every batch it appends (or replays at
//! recovery) and keeps the [`AbortedTxn`] entries it returns.

use std::collections::{BTreeMap, BTreeSet};

use bytes::Bytes;

use crate::batch::BatchHeader;
use crate::error::{LogError, Result};
use crate::records::{decode_batch, encode_batch, BatchSpec, Record};

/// What a control batch says (its one record's key: `int16` version 0, `int16` type).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ControlType {
    /// The producer's open transaction aborted.
    Abort,
    /// The producer's open transaction committed.
    Commit,
    /// A control record this log does not act on (KRaft's own types, or a newer one).
    Other(i16),
}

impl ControlType {
    fn code(self) -> i16 {
        match self {
            ControlType::Abort => 0,
            ControlType::Commit => 1,
            ControlType::Other(c) => c,
        }
    }
}

/// The type of a control batch (`batch` holds exactly it); `None` for a data batch.
pub fn control_type(batch: &[u8]) -> Result<Option<ControlType>> {
    Ok(control_record(batch)?.map(|(kind, _)| kind))
}

/// The type of a control batch and, for a commit or abort marker, the epoch of the
/// coordinator that wrote it (-1 where its value does not say); `None` for a data batch.
pub fn control_record(batch: &[u8]) -> Result<Option<(ControlType, i32)>> {
    let Some(h) = BatchHeader::parse(batch) else {
        return Err(LogError::CorruptMessage("short batch header".into()));
    };
    if !h.is_control() {
        return Ok(None);
    }
    let (_, records) = decode_batch(batch)?;
    let record = records.first();
    let key = record
        .and_then(|r| r.key.as_ref())
        .filter(|k| k.len() >= 4)
        .ok_or_else(|| LogError::InvalidRecord("control record without its key".into()))?;
    let kind = match i16::from_be_bytes([key[2], key[3]]) {
        0 => ControlType::Abort,
        1 => ControlType::Commit,
        other => ControlType::Other(other),
    };
    let coordinator_epoch = record
        .and_then(|r| r.value.as_ref())
        .filter(|v| v.len() >= 6)
        .map_or(-1, |v| i32::from_be_bytes([v[2], v[3], v[4], v[5]]));
    Ok(Some((kind, coordinator_epoch)))
}

/// A transaction marker for one partition, as WriteTxnMarkers asks for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Marker {
    /// The producer whose transaction ends.
    pub producer_id: i64,
    /// Its epoch (the coordinator's, after any bump).
    pub producer_epoch: i16,
    /// The epoch of the transaction coordinator that decided (fences a deposed one).
    pub coordinator_epoch: i32,
    /// Commit (else abort).
    pub commit: bool,
    /// The marker record's timestamp.
    pub timestamp: i64,
}

/// The control batch of `marker`: one record whose key is the control type and whose value is
/// `EndTxnMarker` (`int16` version 0, `int32` coordinator epoch).
pub fn marker_batch(marker: &Marker) -> Result<Vec<u8>> {
    let kind = if marker.commit {
        ControlType::Commit
    } else {
        ControlType::Abort
    };
    let mut key = Vec::with_capacity(4);
    key.extend(0i16.to_be_bytes());
    key.extend(kind.code().to_be_bytes());
    let mut value = Vec::with_capacity(6);
    value.extend(0i16.to_be_bytes());
    value.extend(marker.coordinator_epoch.to_be_bytes());
    let spec = BatchSpec {
        transactional: true,
        control: true,
        producer_id: marker.producer_id,
        producer_epoch: marker.producer_epoch,
        ..BatchSpec::default()
    };
    let record = Record {
        offset: 0,
        timestamp: marker.timestamp,
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: Vec::new(),
    };
    encode_batch(&spec, &[record])
}

/// One entry of the aborted-transaction index: an aborted transaction's span, and the last
/// stable offset once it ended (read_committed fetches that reach it need no earlier entry).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AbortedTxn {
    /// The producer whose transaction aborted.
    pub producer_id: i64,
    /// Its first offset in this partition.
    pub first_offset: i64,
    /// The offset of its abort marker.
    pub last_offset: i64,
    /// The last stable offset once it ended.
    pub last_stable_offset: i64,
}

impl AbortedTxn {
    /// Bytes of one `.txnindex` entry (`int16` version 0, then four `int64`).
    pub const ENTRY_LEN: usize = 34;

    /// The entry's bytes.
    pub fn encode(&self) -> [u8; Self::ENTRY_LEN] {
        let mut b = [0u8; Self::ENTRY_LEN];
        b[2..10].copy_from_slice(&self.producer_id.to_be_bytes());
        b[10..18].copy_from_slice(&self.first_offset.to_be_bytes());
        b[18..26].copy_from_slice(&self.last_offset.to_be_bytes());
        b[26..34].copy_from_slice(&self.last_stable_offset.to_be_bytes());
        b
    }

    /// One entry; `None` for another length, another version or offsets out of order.
    pub fn decode(b: &[u8]) -> Option<AbortedTxn> {
        if b.len() != Self::ENTRY_LEN || b[0..2] != [0, 0] {
            return None;
        }
        let at = |i: usize| {
            let mut a = [0u8; 8];
            a.copy_from_slice(&b[i..i + 8]);
            i64::from_be_bytes(a)
        };
        let e = AbortedTxn {
            producer_id: at(2),
            first_offset: at(10),
            last_offset: at(18),
            last_stable_offset: at(26),
        };
        (0 <= e.first_offset && e.first_offset <= e.last_offset).then_some(e)
    }
}

/// The aborted transactions a read_committed fetch of `[fetch_offset, upper_bound)` must be
/// told of: those whose span reaches into it.
pub fn aborted_in_range(
    entries: &[AbortedTxn],
    fetch_offset: i64,
    upper_bound: i64,
) -> Vec<AbortedTxn> {
    entries
        .iter()
        .filter(|e| e.last_offset >= fetch_offset && e.first_offset < upper_bound)
        .copied()
        .collect()
}

/// A transaction that a marker ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CompletedTxn {
    /// The producer whose transaction ended.
    pub producer_id: i64,
    /// Its first offset in this partition.
    pub first_offset: i64,
    /// The offset of the marker that ended it.
    pub last_offset: i64,
    /// Whether the marker aborted it.
    pub aborted: bool,
}

/// The transactions open in a partition: each producer's first offset in its open one.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct OpenTransactions {
    by_producer: BTreeMap<i64, i64>,
    by_offset: BTreeSet<(i64, i64)>,
}

impl OpenTransactions {
    /// Takes one appended batch (`control`: its [`control_type`]). A transactional data batch
    /// opens its producer's transaction if none is; a commit or abort marker ends it and
    /// returns it (`None` for a marker of a producer with nothing open: a retried marker).
    pub fn observe(
        &mut self,
        h: &BatchHeader,
        control: Option<ControlType>,
    ) -> Option<CompletedTxn> {
        if !h.is_transactional() {
            return None;
        }
        let pid = h.producer_id;
        let aborted = match control {
            None => {
                if let std::collections::btree_map::Entry::Vacant(e) = self.by_producer.entry(pid) {
                    e.insert(h.base_offset);
                    self.by_offset.insert((h.base_offset, pid));
                }
                return None;
            }
            Some(ControlType::Abort) => true,
            Some(ControlType::Commit) => false,
            Some(ControlType::Other(_)) => return None,
        };
        let first_offset = self.by_producer.remove(&pid)?;
        self.by_offset.remove(&(first_offset, pid));
        Some(CompletedTxn {
            producer_id: pid,
            first_offset,
            last_offset: h.base_offset,
            aborted,
        })
    }

    /// The index entry of `c` (just returned by [`OpenTransactions::observe`]), if it aborted:
    /// the last stable offset is the first offset still open, or the offset after its marker.
    pub fn aborted_entry(&self, c: &CompletedTxn) -> Option<AbortedTxn> {
        c.aborted.then(|| AbortedTxn {
            producer_id: c.producer_id,
            first_offset: c.first_offset,
            last_offset: c.last_offset,
            last_stable_offset: self.first_unstable_offset().unwrap_or(c.last_offset + 1),
        })
    }

    /// The first offset of the oldest open transaction.
    pub fn first_unstable_offset(&self) -> Option<i64> {
        self.by_offset.first().map(|&(offset, _)| offset)
    }

    /// The last stable offset: read_committed readers go no further.
    pub fn last_stable_offset(&self, high_watermark: i64) -> i64 {
        self.first_unstable_offset()
            .map_or(high_watermark, |o| o.min(high_watermark))
    }

    /// Opens `producer_id`'s transaction at `first_offset` (a snapshot's open transaction);
    /// one already open keeps its first offset.
    pub fn begin(&mut self, producer_id: i64, first_offset: i64) {
        if let std::collections::btree_map::Entry::Vacant(e) = self.by_producer.entry(producer_id) {
            e.insert(first_offset);
            self.by_offset.insert((first_offset, producer_id));
        }
    }

    /// The number of open transactions.
    pub fn len(&self) -> usize {
        self.by_producer.len()
    }

    /// Whether no transaction is open.
    pub fn is_empty(&self) -> bool {
        self.by_producer.is_empty()
    }

    /// The open transaction of `producer_id`, by its first offset.
    pub fn open_since(&self, producer_id: i64) -> Option<i64> {
        self.by_producer.get(&producer_id).copied()
    }

    /// The log was truncated to `offset`: transactions that opened at or after it are gone.
    /// (One that opened before and ended after is open again: its marker was removed, which
    /// the partition learns by replaying from a snapshot; this forgets only what is gone.)
    pub fn truncate_to(&mut self, offset: i64) {
        let gone: Vec<(i64, i64)> = self
            .by_offset
            .range((offset, i64::MIN)..)
            .copied()
            .collect();
        for (o, pid) in gone {
            self.by_offset.remove(&(o, pid));
            self.by_producer.remove(&pid);
        }
    }
}

#[cfg(test)]
#[path = "txn_tests.rs"]
mod tests;
