//! The read_committed filter over real encoded batches: data batches encoded by the producer's
//! `encode_batch` and made transactional, control batches holding a marker record.

use bytes::Bytes;
use kafka_protocol::records::Compression;

use super::*;
use crate::consumer::fetch::{complete_batches, decode_records};
use crate::consumer::prefetch::{Buffer, Chunk, Positions};
use crate::producer::wire::{encode_batch, ProducerIdentity, RecordData};
use crate::types::TopicPartition;

const P1: i64 = 1001;
const P2: i64 = 1002;
const P3: i64 = 1003;

/// Stamps the base offset and attribute bits the leader and the transaction coordinator set,
/// and the CRC over them.
fn stamp(mut b: Vec<u8>, base: i64, attributes: i16) -> Vec<u8> {
    b[0..8].copy_from_slice(&base.to_be_bytes());
    let a = i16::from_be_bytes([b[21], b[22]]) | attributes;
    b[21..23].copy_from_slice(&a.to_be_bytes());
    let crc = crc32c::crc32c(&b[21..]);
    b[17..21].copy_from_slice(&crc.to_be_bytes());
    b
}

fn records(base: i64, n: usize) -> Vec<RecordData> {
    (0..n)
        .map(|i| RecordData {
            key: None,
            value: Some(Bytes::from(format!("v{}", base + i as i64))),
            headers: vec![],
            timestamp: 1,
        })
        .collect()
}

fn id(producer_id: i64) -> Option<ProducerIdentity> {
    Some(ProducerIdentity {
        producer_id,
        epoch: 0,
    })
}

/// `n` records of a transaction of `pid` at `base`.
fn txn(base: i64, pid: i64, n: usize) -> Vec<u8> {
    let b = encode_batch(&records(base, n), id(pid), 0, Compression::None).unwrap();
    stamp(b.to_vec(), base, TRANSACTIONAL)
}

/// `n` records of an idempotent (non-transactional) producer, or of none with `pid` -1.
fn plain(base: i64, pid: i64, n: usize) -> Vec<u8> {
    let identity = if pid < 0 { None } else { id(pid) };
    let b = encode_batch(&records(base, n), identity, 0, Compression::None).unwrap();
    stamp(b.to_vec(), base, 0)
}

/// A transaction marker: key int16 version 0 + int16 type (0 abort, 1 commit), value int16
/// version 0 + int32 coordinator epoch.
fn marker(base: i64, pid: i64, kind: i16) -> Vec<u8> {
    let mut key = 0i16.to_be_bytes().to_vec();
    key.extend_from_slice(&kind.to_be_bytes());
    let mut value = 0i16.to_be_bytes().to_vec();
    value.extend_from_slice(&7i32.to_be_bytes());
    let rec = RecordData {
        key: Some(Bytes::from(key)),
        value: Some(Bytes::from(value)),
        headers: vec![],
        timestamp: 1,
    };
    let b = encode_batch(&[rec], id(pid), 0, Compression::None).unwrap();
    stamp(b.to_vec(), base, TRANSACTIONAL | CONTROL)
}

const ABORT: i16 = 0;
const COMMIT: i16 = 1;

fn answer(batches: &[Vec<u8>]) -> Bytes {
    Bytes::from(batches.concat())
}

fn aborted(list: &[(i64, i64)]) -> Vec<AbortedTxn> {
    list.iter()
        .map(|&(producer_id, first_offset)| AbortedTxn {
            producer_id,
            first_offset,
        })
        .collect()
}

/// The offsets the application gets from an answer asked at `from`, in read_committed.
fn read_committed(bytes: Bytes, list: &[(i64, i64)], from: i64) -> Vec<i64> {
    let kept = drop_aborted(bytes, aborted(list)).unwrap();
    let (recs, _) = decode_records(&TopicPartition::new("t", 0), kept, from, true).unwrap();
    recs.iter().map(|r| r.offset).collect()
}

#[test]
fn interleaved_producers_lose_only_the_aborted_transactions_batches() {
    let bytes = answer(&[
        txn(0, P1, 2),         // 0-1: P1, aborted
        txn(2, P2, 2),         // 2-3: P2, committed
        plain(4, -1, 1),       // 4: no producer id
        txn(5, P1, 1),         // 5: P1, same aborted transaction
        plain(6, P1, 1),       // 6: P1's idempotent, not transactional: kept
        marker(7, P2, COMMIT), // 7
        marker(8, P1, ABORT),  // 8
        txn(9, P1, 2),         // 9-10: P1's next transaction, not aborted
    ]);
    assert_eq!(
        read_committed(bytes.clone(), &[(P1, 0)], 0),
        vec![2, 3, 4, 6, 9, 10]
    );
    // Read uncommitted (no filter), the same answer gives every data record, no marker.
    let (all, next) = decode_records(&TopicPartition::new("t", 0), bytes.clone(), 0, true).unwrap();
    let offsets: Vec<i64> = all.iter().map(|r| r.offset).collect();
    assert_eq!(offsets, vec![0, 1, 2, 3, 4, 5, 6, 9, 10]);
    assert_eq!(next, Some(11));
    // The position moves past everything received, dropped batches and markers included.
    assert_eq!(complete_batches(&bytes).1, Some(11));
}

#[test]
fn an_aborted_transaction_spanning_two_answers_is_dropped_from_both() {
    // The first answer ends inside the transaction; the broker lists it in both answers, the
    // second time with a first offset before the answer's first batch.
    let first = answer(&[txn(10, P1, 2), plain(12, -1, 1), txn(13, P2, 1)]);
    assert_eq!(read_committed(first.clone(), &[(P1, 10)], 10), vec![12, 13]);
    assert_eq!(complete_batches(&first).1, Some(14));
    let second = answer(&[
        txn(14, P1, 3),
        marker(17, P2, COMMIT),
        marker(18, P1, ABORT),
        txn(19, P2, 1),
    ]);
    assert_eq!(read_committed(second.clone(), &[(P1, 10)], 14), vec![19]);
    assert_eq!(complete_batches(&second).1, Some(20));
}

#[test]
fn a_committed_transaction_or_no_aborted_list_keeps_every_data_record() {
    let bytes = answer(&[txn(0, P1, 3), marker(3, P1, COMMIT), plain(4, -1, 1)]);
    assert_eq!(read_committed(bytes.clone(), &[], 0), vec![0, 1, 2, 4]);
    // Nothing aborted: the very same bytes, not a copy.
    let same = drop_aborted(bytes.clone(), Vec::new()).unwrap();
    assert_eq!(same.as_ptr(), bytes.as_ptr());
    // Another producer's aborted transaction in the range changes nothing for P1.
    assert_eq!(read_committed(bytes, &[(P2, 1)], 0), vec![0, 1, 2, 4]);
}

#[test]
fn a_marker_of_a_producer_not_aborted_leaves_the_set_alone() {
    let bytes = answer(&[
        txn(0, P1, 1),
        marker(1, P3, ABORT), // P3 is not in the set (its transaction was elsewhere)
        txn(2, P1, 1),        // still P1's aborted transaction
        marker(3, P1, COMMIT), // not an abort marker: P1 stays aborted
        txn(4, P1, 1),
        marker(5, P1, ABORT),
        txn(6, P3, 1),
    ]);
    assert_eq!(read_committed(bytes, &[(P1, 0)], 0), vec![6]);
}

#[test]
fn one_producer_aborting_twice_in_one_answer_listed_out_of_order() {
    let bytes = answer(&[
        txn(0, P1, 2),
        marker(2, P1, ABORT),
        txn(3, P1, 1), // committed
        marker(4, P1, COMMIT),
        txn(5, P1, 2),
        marker(7, P1, ABORT),
        plain(8, -1, 1),
    ]);
    // The second transaction only counts from its first offset on.
    assert_eq!(read_committed(bytes, &[(P1, 5), (P1, 0)], 0), vec![3, 8]);
}

#[test]
fn the_kept_batches_are_a_slice_when_contiguous_and_a_copy_otherwise() {
    let head = txn(0, P1, 2);
    let tail = plain(2, -1, 2);
    let bytes = answer(&[head.clone(), tail.clone()]);
    let kept = drop_aborted(bytes.clone(), aborted(&[(P1, 0)])).unwrap();
    assert_eq!(&kept[..], &tail[..]);
    assert_eq!(kept.as_ptr(), bytes[head.len()..].as_ptr(), "copied");
    let every = answer(&[txn(0, P1, 2), txn(2, P1, 1)]);
    assert!(drop_aborted(every, aborted(&[(P1, 0)])).unwrap().is_empty());
    let gaps = answer(&[plain(0, -1, 1), txn(1, P1, 1), plain(2, -1, 1)]);
    let kept = drop_aborted(gaps, aborted(&[(P1, 1)])).unwrap();
    assert_eq!(&kept[..], &answer(&[plain(0, -1, 1), plain(2, -1, 1)])[..]);
}

#[test]
fn a_control_batch_whose_key_is_not_a_control_key_is_an_error() {
    let mut bad = marker(3, P1, ABORT);
    // The record's key length (4, zigzag 8) made 1 (zigzag 2): either the record no longer
    // parses or its key is one byte; either way the batch is refused, never taken for a
    // commit.
    let at = 61 + 1 + 1 + 1 + 1; // size, attributes, timestamp delta, offset delta
    assert_eq!(bad[at], 8);
    bad[at] = 2;
    let bad = stamp(bad, 3, 0);
    let err = drop_aborted(answer(&[txn(0, P1, 3), bad]), aborted(&[(P1, 0)])).unwrap_err();
    assert!(err.contains("control batch at offset 3"), "{err}");
}

#[test]
fn a_truncated_tail_is_left_for_the_decoder() {
    let whole = answer(&[txn(0, P1, 1), plain(1, -1, 1)]);
    // A batch length past the end: the walk stops there and keeps the rest as it is.
    let mut cut = whole.to_vec();
    cut.extend_from_slice(&[0, 0, 0, 0, 0, 0, 0, 9, 0x7f, 0, 0, 0]);
    let kept = drop_aborted(Bytes::from(cut.clone()), aborted(&[(P1, 0)])).unwrap();
    assert_eq!(&kept[..], &cut[whole.len() - plain(1, -1, 1).len()..]);
}

/// Positions as a map, for [`Buffer::take`].
#[derive(Default)]
struct At(std::collections::HashMap<TopicPartition, i64>);

impl Positions for At {
    fn returnable(&self, tp: &TopicPartition) -> Option<i64> {
        self.0.get(tp).copied()
    }
    fn advance(&mut self, tp: &TopicPartition, position: i64) {
        self.0.insert(tp.clone(), position);
    }
}

#[test]
fn the_position_moves_past_an_answer_of_only_aborted_batches_and_markers() {
    let tp = TopicPartition::new("t", 0);
    let bytes = answer(&[txn(40, P1, 3), marker(43, P1, ABORT)]);
    let next_offset = complete_batches(&bytes).1.unwrap();
    let kept = drop_aborted(bytes, aborted(&[(P1, 40)])).unwrap();
    let (recs, _) = decode_records(&tp, kept.clone(), 40, true).unwrap();
    assert!(recs.is_empty());
    let mut buffer = Buffer::default();
    buffer.push(Chunk {
        tp: tp.clone(),
        broker: 1,
        records: recs,
        undecoded: None,
        next_offset,
        bytes: kept.len(),
    });
    let mut at = At::default();
    at.0.insert(tp.clone(), 40);
    assert!(buffer.take(10, &mut at).is_empty());
    assert_eq!(at.0[&tp], 44);
    assert_eq!(buffer.bytes(), 0);
}
