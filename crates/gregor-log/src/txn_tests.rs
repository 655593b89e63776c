use super::*;

fn record(offset: i64) -> Record {
    Record {
        offset,
        timestamp: 1_000,
        key: None,
        value: Some(Bytes::from_static(b"v")),
        headers: Vec::new(),
    }
}

/// A data batch of `n` records of `pid` at `base`.
fn data(pid: i64, base: i64, n: i64, transactional: bool) -> Vec<u8> {
    let spec = BatchSpec {
        base_offset: base,
        transactional,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: 0,
        ..BatchSpec::default()
    };
    let records: Vec<Record> = (base..base + n).map(record).collect();
    encode_batch(&spec, &records).unwrap()
}

/// The marker of `pid` placed at `offset` (as an append assigns it).
fn marker(pid: i64, offset: i64, commit: bool) -> Vec<u8> {
    let mut b = marker_batch(&Marker {
        producer_id: pid,
        producer_epoch: 0,
        coordinator_epoch: 3,
        commit,
        timestamp: 2_000,
    })
    .unwrap();
    b[0..8].copy_from_slice(&offset.to_be_bytes());
    b
}

fn feed(open: &mut OpenTransactions, batch: &[u8]) -> Option<CompletedTxn> {
    let h = BatchHeader::parse(batch).unwrap();
    open.observe(&h, control_type(batch).unwrap())
}

#[test]
fn a_marker_batch_is_kafkas_control_batch() {
    let b = marker(7, 0, true);
    let h = BatchHeader::parse(&b).unwrap();
    assert!(h.is_control() && h.is_transactional());
    assert_eq!((h.producer_id, h.record_count), (7, 1));
    assert_eq!(control_type(&b).unwrap(), Some(ControlType::Commit));
    assert_eq!(
        control_type(&marker(7, 0, false)).unwrap(),
        Some(ControlType::Abort)
    );
    let (_, records) = decode_batch(&b).unwrap();
    assert_eq!(records[0].key.as_deref(), Some(&[0u8, 0, 0, 1][..]));
    assert_eq!(records[0].value.as_deref(), Some(&[0u8, 0, 0, 0, 0, 3][..]));
    assert_eq!(control_type(&data(7, 0, 2, true)).unwrap(), None);
}

#[test]
fn open_transactions_hold_the_last_stable_offset() {
    let mut open = OpenTransactions::default();
    assert_eq!(feed(&mut open, &data(-1, 0, 5, false)), None);
    assert_eq!(open.last_stable_offset(5), 5);
    feed(&mut open, &data(1, 5, 2, true));
    feed(&mut open, &data(2, 7, 2, true));
    feed(&mut open, &data(1, 9, 2, true));
    assert_eq!(open.open_since(1), Some(5));
    assert_eq!(open.last_stable_offset(11), 5);
    assert_eq!(
        open.last_stable_offset(3),
        3,
        "never past the high watermark"
    );
    let c = feed(&mut open, &marker(1, 11, true)).unwrap();
    assert_eq!(
        c,
        CompletedTxn {
            producer_id: 1,
            first_offset: 5,
            last_offset: 11,
            aborted: false
        }
    );
    assert_eq!(open.aborted_entry(&c), None);
    assert_eq!(open.last_stable_offset(12), 7);
    let c = feed(&mut open, &marker(2, 12, false)).unwrap();
    assert_eq!(
        open.aborted_entry(&c),
        Some(AbortedTxn {
            producer_id: 2,
            first_offset: 7,
            last_offset: 12,
            last_stable_offset: 13
        })
    );
    assert_eq!(open.last_stable_offset(13), 13);
    // A retried marker, for nothing open, ends nothing.
    assert_eq!(feed(&mut open, &marker(2, 13, false)), None);
}

#[test]
fn an_abort_entry_names_the_transaction_still_open() {
    let mut open = OpenTransactions::default();
    feed(&mut open, &data(1, 0, 1, true));
    feed(&mut open, &data(2, 1, 1, true));
    let c = feed(&mut open, &marker(2, 2, false)).unwrap();
    assert_eq!(open.aborted_entry(&c).unwrap().last_stable_offset, 0);
}

#[test]
fn truncation_forgets_transactions_that_opened_after_it() {
    let mut open = OpenTransactions::default();
    feed(&mut open, &data(1, 0, 2, true));
    feed(&mut open, &data(2, 2, 2, true));
    feed(&mut open, &data(3, 4, 2, true));
    open.truncate_to(2);
    assert_eq!(open.open_since(1), Some(0));
    assert_eq!((open.open_since(2), open.open_since(3)), (None, None));
    feed(&mut open, &data(2, 2, 1, true));
    assert_eq!(open.open_since(2), Some(2));
}

#[test]
fn index_entries_are_kafkas_34_bytes_and_bad_ones_are_refused() {
    let e = AbortedTxn {
        producer_id: 9,
        first_offset: 10,
        last_offset: 20,
        last_stable_offset: 21,
    };
    let b = e.encode();
    assert_eq!(&b[0..2], &[0, 0]);
    assert_eq!(&b[2..10], &9i64.to_be_bytes());
    assert_eq!(AbortedTxn::decode(&b), Some(e));
    assert_eq!(AbortedTxn::decode(&b[..33]), None);
    let mut v1 = b;
    v1[1] = 1;
    assert_eq!(AbortedTxn::decode(&v1), None);
    let backwards = AbortedTxn {
        first_offset: 30,
        ..e
    }
    .encode();
    assert_eq!(AbortedTxn::decode(&backwards), None);
}

#[test]
fn a_fetch_is_told_of_the_aborted_transactions_that_reach_into_it() {
    let entries = [
        AbortedTxn {
            producer_id: 1,
            first_offset: 0,
            last_offset: 4,
            last_stable_offset: 5,
        },
        AbortedTxn {
            producer_id: 2,
            first_offset: 6,
            last_offset: 10,
            last_stable_offset: 11,
        },
        AbortedTxn {
            producer_id: 3,
            first_offset: 20,
            last_offset: 25,
            last_stable_offset: 26,
        },
    ];
    let pids = |f, u| -> Vec<i64> {
        aborted_in_range(&entries, f, u)
            .iter()
            .map(|e| e.producer_id)
            .collect()
    };
    assert_eq!(pids(0, 100), vec![1, 2, 3]);
    assert_eq!(pids(5, 20), vec![2]);
    assert_eq!(pids(4, 6), vec![1]);
    assert_eq!(pids(11, 20), Vec::<i64>::new());
    assert_eq!(pids(25, 26), vec![3]);
}

proptest::proptest! {
    /// The last stable offset is never past an open transaction's first offset, nor the
    /// high watermark, and with nothing open it is the high watermark.
    #[test]
    fn the_last_stable_offset_never_passes_an_open_transaction(
        steps in proptest::collection::vec((0i64..4, proptest::prelude::any::<bool>(), proptest::prelude::any::<bool>()), 1..60)
    ) {
        let mut open = OpenTransactions::default();
        let mut model: BTreeMap<i64, i64> = BTreeMap::new();
        let mut offset = 0;
        for (pid, is_marker, commit) in steps {
            let b = if is_marker { marker(pid, offset, commit) } else { data(pid, offset, 1, true) };
            let c = feed(&mut open, &b);
            if is_marker {
                proptest::prop_assert_eq!(c.map(|c| c.first_offset), model.remove(&pid));
            } else {
                model.entry(pid).or_insert(offset);
            }
            offset += 1;
            let lso = open.last_stable_offset(offset);
            proptest::prop_assert_eq!(lso, model.values().copied().min().unwrap_or(offset));
        }
    }

    #[test]
    fn index_entries_round_trip_or_are_refused(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 34)) {
        if let Some(e) = AbortedTxn::decode(&bytes) {
            proptest::prop_assert_eq!(&e.encode()[..], &bytes[..]);
        }
    }
}
