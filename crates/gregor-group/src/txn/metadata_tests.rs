use super::*;
use TransactionState::*;

fn id(m: &TxnMetadata) -> ProducerIdAndEpoch {
    ProducerIdAndEpoch {
        producer_id: m.current.producer_id,
        epoch: m.current.producer_epoch,
    }
}

fn parts(list: &[(&str, i32)]) -> Vec<(String, i32)> {
    list.iter().map(|(t, p)| (t.to_string(), *p)).collect()
}

/// A transactional id initialised once (producer id 100, epoch 0), durable.
fn fresh() -> TxnMetadata {
    let (mut m, t) = TxnMetadata::prepare_first("tx", 100, 60_000, 1_000);
    assert!(m.is_pending());
    m.apply(&t);
    m
}

fn commit_cycle(m: &mut TxnMetadata, now: i64, commit: bool) {
    let t = m
        .prepare_add_partitions(id(m), &parts(&[("orders", 0)]), now)
        .unwrap()
        .unwrap();
    m.apply(&t);
    let EndOutcome::Prepare(t) = m.prepare_end(id(m), commit, now + 1).unwrap() else {
        panic!("nothing to prepare");
    };
    m.apply(&t);
    let t = m.prepare_complete(now + 2).unwrap();
    m.apply(&t);
}

#[test]
fn a_transaction_goes_ongoing_prepare_complete() {
    let mut m = fresh();
    let t = m
        .prepare_add_partitions(id(&m), &parts(&[("b", 1), ("a", 0), ("a", 2)]), 2_000)
        .unwrap()
        .unwrap();
    assert_eq!(t.value.state, Ongoing);
    assert_eq!(t.value.start_timestamp_ms, 2_000);
    assert_eq!(
        t.value.partitions.len(),
        2,
        "grouped by topic: {:?}",
        t.value.partitions
    );
    m.apply(&t);
    // Adding partitions it holds writes nothing; adding one more keeps the start time.
    assert_eq!(
        m.prepare_add_partitions(id(&m), &parts(&[("a", 0)]), 2_100),
        Ok(None)
    );
    let t = m
        .prepare_add_partitions(id(&m), &parts(&[("c", 0)]), 2_200)
        .unwrap()
        .unwrap();
    assert_eq!(t.value.start_timestamp_ms, 2_000);
    m.apply(&t);
    assert_eq!(m.partitions().len(), 4);
    let EndOutcome::Prepare(t) = m.prepare_end(id(&m), true, 3_000).unwrap() else {
        panic!()
    };
    assert_eq!(t.value.state, PrepareCommit);
    assert_eq!(
        t.value.partitions.len(),
        3,
        "the markers need the partitions"
    );
    m.apply(&t);
    let t = m.prepare_complete(3_100).unwrap();
    m.apply(&t);
    assert_eq!(m.state(), CompleteCommit);
    assert!(m.partitions().is_empty());
    // A retried EndTxn(commit) succeeds; an abort now is refused.
    assert_eq!(
        m.prepare_end(id(&m), true, 3_200),
        Ok(EndOutcome::AlreadyDone)
    );
    assert_eq!(
        m.prepare_end(id(&m), false, 3_200),
        Err(TxnError::InvalidTxnState)
    );
}

#[test]
fn while_a_change_is_written_every_other_waits() {
    let mut m = fresh();
    let t = m
        .prepare_add_partitions(id(&m), &parts(&[("a", 0)]), 2_000)
        .unwrap()
        .unwrap();
    let busy: Result<(), TxnError> = Err(TxnError::ConcurrentTransactions);
    assert_eq!(
        m.prepare_add_partitions(id(&m), &parts(&[("a", 1)]), 2_001)
            .map(|_| ()),
        busy
    );
    assert_eq!(m.prepare_end(id(&m), true, 2_001).map(|_| ()), busy);
    assert_eq!(m.prepare_init(None, 1_000, 7, 2_001).map(|_| ()), busy);
    assert_eq!(m.prepare_fence_and_abort(2_001), None);
    // The write failed: nothing changed, and the next request may go.
    m.abandon();
    assert_eq!(m.state(), Empty);
    assert_eq!(t.value.state, Ongoing);
    let t = m
        .prepare_add_partitions(id(&m), &parts(&[("a", 0)]), 2_002)
        .unwrap()
        .unwrap();
    m.apply(&t);
    assert_eq!(m.state(), Ongoing);
}

#[test]
fn markers_in_flight_make_the_producer_wait() {
    let mut m = fresh();
    let t = m
        .prepare_add_partitions(id(&m), &parts(&[("a", 0)]), 2_000)
        .unwrap()
        .unwrap();
    m.apply(&t);
    let EndOutcome::Prepare(t) = m.prepare_end(id(&m), false, 2_100).unwrap() else {
        panic!()
    };
    m.apply(&t);
    let busy: Result<(), TxnError> = Err(TxnError::ConcurrentTransactions);
    assert_eq!(m.prepare_end(id(&m), false, 2_200).map(|_| ()), busy);
    assert_eq!(
        m.prepare_end(id(&m), true, 2_200).map(|_| ()),
        Err(TxnError::InvalidTxnState)
    );
    assert_eq!(
        m.prepare_add_partitions(id(&m), &parts(&[("a", 1)]), 2_200)
            .map(|_| ()),
        busy
    );
    assert_eq!(m.prepare_init(None, 1_000, 7, 2_200).map(|_| ()), busy);
}

#[test]
fn a_wrong_producer_is_refused_with_kafkas_codes() {
    let mut m = fresh();
    let mut stale = id(&m);
    let other = ProducerIdAndEpoch {
        producer_id: 101,
        epoch: 0,
    };
    assert_eq!(
        m.prepare_add_partitions(other, &parts(&[("a", 0)]), 2_000),
        Err(TxnError::InvalidProducerIdMapping)
    );
    let t = m.prepare_init(None, 60_000, 7, 2_000).unwrap();
    m.apply(&t);
    assert_eq!(m.current.producer_epoch, 1);
    assert_eq!(
        m.prepare_add_partitions(stale, &parts(&[("a", 0)]), 2_100),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        m.prepare_end(stale, true, 2_100),
        Err(TxnError::ProducerFenced)
    );
    stale.epoch = 5;
    assert_eq!(
        m.prepare_end(stale, true, 2_100),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(
        m.prepare_end(id(&m), true, 2_100),
        Err(TxnError::InvalidTxnState)
    );
}

#[test]
fn a_recovering_producer_names_its_identity() {
    let mut m = fresh();
    let before = id(&m);
    let t = m.prepare_init(Some(before), 60_000, 7, 2_000).unwrap();
    m.apply(&t);
    // The answer was lost: the retry names the identity before the bump, and is bumped again.
    let t = m.prepare_init(Some(before), 60_000, 7, 2_100).unwrap();
    assert_eq!(t.value.producer_epoch, 2);
    m.apply(&t);
    let ancient = ProducerIdAndEpoch {
        producer_id: 100,
        epoch: 0,
    };
    assert_eq!(
        m.prepare_init(Some(ancient), 60_000, 7, 2_200),
        Err(TxnError::ProducerFenced)
    );
    let stranger = ProducerIdAndEpoch {
        producer_id: 55,
        epoch: 2,
    };
    assert_eq!(
        m.prepare_init(Some(stranger), 60_000, 7, 2_200),
        Err(TxnError::InvalidProducerIdMapping)
    );
}

#[test]
fn an_exhausted_epoch_moves_to_a_fresh_producer_id() {
    let mut m = fresh();
    m.current.producer_epoch = MAX_PRODUCER_EPOCH - 1;
    let t = m.prepare_init(None, 60_000, 900, 2_000).unwrap();
    assert_eq!(
        (t.value.producer_id, t.value.producer_epoch),
        (100, MAX_PRODUCER_EPOCH)
    );
    m.apply(&t);
    let t = m.prepare_init(None, 60_000, 900, 2_100).unwrap();
    assert_eq!((t.value.producer_id, t.value.producer_epoch), (900, 0));
    assert_eq!(t.value.previous_producer_id, 100);
    m.apply(&t);
    commit_cycle(&mut m, 3_000, true);
    assert_eq!(m.state(), CompleteCommit);
}

#[test]
fn a_timed_out_transaction_is_aborted_with_the_epoch_bumped() {
    let mut m = fresh();
    let t = m
        .prepare_add_partitions(id(&m), &parts(&[("a", 0)]), 10_000)
        .unwrap()
        .unwrap();
    m.apply(&t);
    let opener = id(&m);
    assert!(!m.timed_out(70_000));
    assert!(m.timed_out(70_001));
    let t = m.prepare_fence_and_abort(70_001).unwrap();
    assert_eq!(t.value.state, PrepareAbort);
    assert_eq!(t.value.producer_epoch, opener.epoch + 1);
    m.apply(&t);
    assert!(!m.timed_out(200_000), "only an open transaction times out");
    // The producer that opened it is fenced from ending it, even once the abort completes.
    assert_eq!(
        m.prepare_end(opener, true, 70_100),
        Err(TxnError::ProducerFenced)
    );
    let t = m.prepare_complete(70_200).unwrap();
    m.apply(&t);
    assert_eq!(m.state(), CompleteAbort);
    assert_eq!(
        m.prepare_end(opener, false, 70_300),
        Err(TxnError::ProducerFenced)
    );
    assert_eq!(m.prepare_fence_and_abort(70_300), None);
}

#[test]
fn a_transaction_restarts_after_it_completes() {
    let mut m = fresh();
    commit_cycle(&mut m, 2_000, false);
    assert_eq!(m.state(), CompleteAbort);
    commit_cycle(&mut m, 3_000, true);
    assert_eq!(m.state(), CompleteCommit);
    assert_eq!(m.current.start_timestamp_ms, 3_000);
}
