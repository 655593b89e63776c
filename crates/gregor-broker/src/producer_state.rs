//! Idempotent producers: per partition, the last batches each producer id wrote, so that a
//! retried batch is answered with its original offsets instead of being written twice, and a
//! gap in sequence numbers is refused (Kafka's ProducerStateManager, for non-transactional
//! producers).
//!
//! Pure bookkeeping: the partition feeds it batch headers before appending and after.

use std::collections::{HashMap, VecDeque};

use gregor_log::batch::BatchHeader;
use kafka_protocol::ResponseError;

/// Batches remembered per producer (Kafka keeps five, the most a producer has in flight).
pub const BATCHES_KEPT: usize = 5;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchMeta {
    pub first_seq: i32,
    pub last_seq: i32,
    pub first_offset: i64,
    pub last_offset: i64,
}

#[derive(Debug, Clone, Default)]
struct ProducerEntry {
    epoch: i16,
    batches: VecDeque<BatchMeta>,
}

/// Outcome of checking a batch before appending it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Check {
    /// Not idempotent, or the next in sequence: append it.
    Append,
    /// Already written: answer with these offsets.
    Duplicate(BatchMeta),
    /// Refused with this error.
    Reject(ResponseError),
}

/// The producers of one partition.
#[derive(Debug, Default)]
pub struct ProducerStates {
    producers: HashMap<i64, ProducerEntry>,
}

fn last_seq(h: &BatchHeader) -> i32 {
    // Sequences wrap at i32::MAX.
    ((h.base_sequence as i64 + h.last_offset_delta as i64) % (i32::MAX as i64 + 1)) as i32
}

fn next_seq(seq: i32) -> i32 {
    if seq == i32::MAX {
        0
    } else {
        seq + 1
    }
}

impl ProducerStates {
    /// Checks one batch header (before offsets are assigned).
    pub fn check(&self, h: &BatchHeader) -> Check {
        if h.producer_id < 0 {
            return Check::Append;
        }
        let Some(p) = self.producers.get(&h.producer_id) else {
            // An unknown producer (new, or its state was cleaned up): accept it.
            return Check::Append;
        };
        if h.producer_epoch < p.epoch {
            return Check::Reject(ResponseError::InvalidProducerEpoch);
        }
        if h.producer_epoch > p.epoch {
            return if h.base_sequence == 0 {
                Check::Append
            } else {
                Check::Reject(ResponseError::OutOfOrderSequenceNumber)
            };
        }
        let last = last_seq(h);
        if let Some(b) = p
            .batches
            .iter()
            .find(|b| b.first_seq == h.base_sequence && b.last_seq == last)
        {
            return Check::Duplicate(*b);
        }
        match p.batches.back() {
            Some(b) if next_seq(b.last_seq) != h.base_sequence => {
                Check::Reject(ResponseError::OutOfOrderSequenceNumber)
            }
            _ => Check::Append,
        }
    }

    /// Records a batch that was appended (header with its final offsets).
    pub fn record(&mut self, h: &BatchHeader) {
        if h.producer_id < 0 {
            return;
        }
        let p = self.producers.entry(h.producer_id).or_default();
        if h.producer_epoch != p.epoch {
            p.epoch = h.producer_epoch;
            p.batches.clear();
        }
        p.batches.push_back(BatchMeta {
            first_seq: h.base_sequence,
            last_seq: last_seq(h),
            first_offset: h.base_offset,
            last_offset: h.last_offset(),
        });
        while p.batches.len() > BATCHES_KEPT {
            p.batches.pop_front();
        }
    }

    /// Forgets batches at or after `offset` (after a truncation).
    pub fn truncate(&mut self, offset: i64) {
        for p in self.producers.values_mut() {
            p.batches.retain(|b| b.last_offset < offset);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(pid: i64, epoch: i16, seq: i32, count: i32, offset: i64) -> BatchHeader {
        BatchHeader {
            base_offset: offset,
            batch_length: 0,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: count - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id: pid,
            producer_epoch: epoch,
            base_sequence: seq,
            record_count: count,
        }
    }

    #[test]
    fn retried_batch_is_a_duplicate_with_its_offsets() {
        let mut s = ProducerStates::default();
        let h = header(7, 0, 0, 3, 10);
        assert_eq!(s.check(&h), Check::Append);
        s.record(&h);
        let retry = header(7, 0, 0, 3, -1);
        match s.check(&retry) {
            Check::Duplicate(b) => assert_eq!((b.first_offset, b.last_offset), (10, 12)),
            other => panic!("expected duplicate, got {other:?}"),
        }
        assert_eq!(s.check(&header(7, 0, 3, 1, -1)), Check::Append);
    }

    #[test]
    fn gaps_and_old_epochs_are_refused() {
        let mut s = ProducerStates::default();
        s.record(&header(7, 1, 0, 2, 0));
        assert_eq!(
            s.check(&header(7, 1, 5, 1, -1)),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        assert_eq!(
            s.check(&header(7, 0, 2, 1, -1)),
            Check::Reject(ResponseError::InvalidProducerEpoch)
        );
        // A new epoch starts again at 0.
        assert_eq!(s.check(&header(7, 2, 0, 1, -1)), Check::Append);
        assert_eq!(
            s.check(&header(7, 2, 4, 1, -1)),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        // Non-idempotent batches are never checked.
        assert_eq!(s.check(&header(-1, -1, -1, 5, -1)), Check::Append);
    }

    #[test]
    fn only_the_last_five_batches_are_remembered_and_sequences_wrap() {
        let mut s = ProducerStates::default();
        for i in 0..7 {
            s.record(&header(1, 0, i, 1, i as i64));
        }
        assert_eq!(
            s.check(&header(1, 0, 0, 1, -1)),
            Check::Reject(ResponseError::OutOfOrderSequenceNumber)
        );
        assert!(matches!(
            s.check(&header(1, 0, 6, 1, -1)),
            Check::Duplicate(_)
        ));
        let mut w = ProducerStates::default();
        w.record(&header(2, 0, i32::MAX, 1, 0));
        assert_eq!(w.check(&header(2, 0, 0, 1, -1)), Check::Append);
        // After a truncation to offset 3, the producer continues from the batch at offset 2.
        s.truncate(3);
        assert_eq!(s.check(&header(1, 0, 3, 1, -1)), Check::Append);
    }
}
