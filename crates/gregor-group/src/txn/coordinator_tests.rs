use super::*;
use crate::txn::metadata::MAX_PRODUCER_EPOCH;
use crate::txn::records::decode_value;

const TX: &str = "tx";

fn coordinator() -> TxnCoordinator {
    TxnCoordinator::new(TxnConfig {
        max_timeout_ms: 60_000,
        id_expiration_ms: 1_000_000,
    })
}

/// The appends among `effects`, as (token, decoded state or None for a tombstone).
fn appends(effects: &[TxnEffect]) -> Vec<(AppendToken, Option<TransactionLogValue>)> {
    effects
        .iter()
        .filter_map(|e| match e {
            TxnEffect::Append { token, record } => {
                assert_eq!(records::decode_key(&record.key).unwrap(), TX);
                Some((
                    *token,
                    record.value.as_ref().map(|v| decode_value(v).unwrap()),
                ))
            }
            _ => None,
        })
        .collect()
}

fn replies(effects: &[TxnEffect]) -> Vec<(RequestId, TxnReply)> {
    effects
        .iter()
        .filter_map(|e| match e {
            TxnEffect::Respond { request_id, reply } => Some((*request_id, reply.clone())),
            _ => None,
        })
        .collect()
}

/// A WriteMarkers effect: for whom, commit or abort, to which partitions.
type Markers = (ProducerIdAndEpoch, bool, Vec<(String, i32)>);

fn markers(effects: &[TxnEffect]) -> Vec<Markers> {
    effects
        .iter()
        .filter_map(|e| match e {
            TxnEffect::WriteMarkers {
                producer,
                commit,
                partitions,
                ..
            } => Some((*producer, *commit, partitions.clone())),
            _ => None,
        })
        .collect()
}

/// Makes every append in `effects` durable; returns what that produced.
fn durable(c: &mut TxnCoordinator, effects: &[TxnEffect]) -> Vec<TxnEffect> {
    appends(effects)
        .into_iter()
        .flat_map(|(token, _)| c.append_completed(token, true))
        .collect()
}

fn init(c: &mut TxnCoordinator, now: i64, request: RequestId) -> ProducerIdAndEpoch {
    let e = c.init_producer_id(now, request, TX, 30_000, None, 7);
    let out = durable(c, &e);
    match replies(&out).as_slice() {
        [(r, TxnReply::InitProducerId(Ok(p)))] if *r == request => *p,
        other => panic!("{other:?} (from {e:?})"),
    }
}

fn open(c: &mut TxnCoordinator, now: i64, p: ProducerIdAndEpoch, parts: &[(&str, i32)]) {
    let parts: Vec<(String, i32)> = parts.iter().map(|(t, p)| (t.to_string(), *p)).collect();
    let e = c.add_partitions(now, 50, TX, p, &parts);
    let out = durable(c, &e);
    assert_eq!(replies(&out), vec![(50, TxnReply::AddPartitions(Ok(())))]);
}

#[test]
fn a_commit_is_answered_when_prepared_and_completed_after_its_markers() {
    let mut c = coordinator();
    let p = init(&mut c, 1_000, 1);
    assert_eq!(
        p,
        ProducerIdAndEpoch {
            producer_id: 7,
            epoch: 0
        }
    );
    open(&mut c, 1_100, p, &[("orders", 1), ("orders", 0)]);
    let e = c.end_txn(1_200, 2, TX, p, true, None);
    let written = appends(&e);
    assert_eq!(written.len(), 1);
    assert_eq!(
        written[0].1.as_ref().unwrap().state,
        TransactionState::PrepareCommit
    );
    assert!(
        replies(&e).is_empty(),
        "answered before the decision is durable"
    );
    let out = durable(&mut c, &e);
    assert_eq!(
        replies(&out),
        vec![(2, TxnReply::EndTxn(Ok(p)))],
        "v0-4: no bump"
    );
    assert_eq!(
        markers(&out),
        vec![(p, true, vec![("orders".into(), 0), ("orders".into(), 1)])]
    );
    assert_eq!(
        c.tick(1_300),
        vec![],
        "nothing to redo while the markers are written"
    );
    let e = c.markers_written(1_400, TX);
    assert_eq!(
        appends(&e)[0].1.as_ref().unwrap().state,
        TransactionState::CompleteCommit
    );
    assert!(durable(&mut c, &e).is_empty());
    assert_eq!(
        c.describe(TX).unwrap().state(),
        TransactionState::CompleteCommit
    );
}

#[test]
fn a_timeout_outside_the_limit_is_refused() {
    let mut c = coordinator();
    for t in [0, -5, 60_001] {
        let e = c.init_producer_id(0, 9, TX, t, None, 7);
        assert_eq!(
            replies(&e),
            vec![(
                9,
                TxnReply::InitProducerId(Err(TxnRefusal::InvalidTransactionTimeout))
            )]
        );
        assert!(appends(&e).is_empty());
    }
    assert!(c.describe(TX).is_none());
}

#[test]
fn a_new_producer_fences_the_old_ones_open_transaction() {
    let mut c = coordinator();
    let old = init(&mut c, 1_000, 1);
    open(&mut c, 1_100, old, &[("a", 0)]);
    let e = c.init_producer_id(1_200, 2, TX, 30_000, None, 7);
    assert_eq!(
        replies(&e),
        vec![(
            2,
            TxnReply::InitProducerId(Err(TxnRefusal::Txn(TxnError::ConcurrentTransactions)))
        )]
    );
    let abort = appends(&e)[0].1.clone().unwrap();
    assert_eq!(
        (abort.state, abort.producer_epoch),
        (TransactionState::PrepareAbort, 1)
    );
    let out = durable(&mut c, &e);
    let fenced_epoch = ProducerIdAndEpoch {
        producer_id: 7,
        epoch: 1,
    };
    assert_eq!(
        markers(&out),
        vec![(fenced_epoch, false, vec![("a".into(), 0)])]
    );
    // The old producer can neither commit nor add partitions now.
    let e = c.end_txn(1_300, 3, TX, old, true, None);
    assert_eq!(
        replies(&e),
        vec![(
            3,
            TxnReply::EndTxn(Err(TxnRefusal::Txn(TxnError::ProducerFenced)))
        )]
    );
    // The new producer waits until the abort completes, then gets the next epoch.
    let e = c.init_producer_id(1_300, 4, TX, 30_000, None, 7);
    assert_eq!(
        replies(&e),
        vec![(
            4,
            TxnReply::InitProducerId(Err(TxnRefusal::Txn(TxnError::ConcurrentTransactions)))
        )]
    );
    let done = c.markers_written(1_400, TX);
    durable(&mut c, &done);
    assert_eq!(
        init(&mut c, 1_500, 5),
        ProducerIdAndEpoch {
            producer_id: 7,
            epoch: 2
        }
    );
}

#[test]
fn an_expired_transaction_is_aborted_by_tick() {
    let mut c = coordinator();
    let p = init(&mut c, 1_000, 1);
    open(&mut c, 2_000, p, &[("a", 0)]);
    assert_eq!(c.next_deadline(), Some(32_001));
    assert!(c.tick(32_000).is_empty());
    let e = c.tick(32_001);
    let abort = appends(&e)[0].1.clone().unwrap();
    assert_eq!(
        (abort.state, abort.producer_epoch),
        (TransactionState::PrepareAbort, 1)
    );
    let out = durable(&mut c, &e);
    assert_eq!(markers(&out).len(), 1);
    assert!(replies(&out).is_empty());
    assert_eq!(c.next_deadline(), None);
    let e = c.add_partitions(32_100, 6, TX, p, &[("a".into(), 1)]);
    assert_eq!(
        replies(&e),
        vec![(
            6,
            TxnReply::AddPartitions(Err(TxnRefusal::Txn(TxnError::ProducerFenced)))
        )]
    );
}

#[test]
fn a_failed_write_changes_nothing_and_tells_the_producer_to_look_again() {
    let mut c = coordinator();
    let e = c.init_producer_id(1_000, 1, TX, 30_000, None, 7);
    let (token, _) = appends(&e)[0].clone();
    let out = c.append_completed(token, false);
    assert_eq!(
        replies(&out),
        vec![(1, TxnReply::InitProducerId(Err(TxnRefusal::NotCoordinator)))]
    );
    assert!(
        c.describe(TX).is_none(),
        "a first record that failed leaves the id unknown"
    );
    let p = init(&mut c, 1_100, 2);
    open(&mut c, 1_200, p, &[("a", 0)]);
    let e = c.end_txn(1_300, 3, TX, p, false, None);
    let (token, _) = appends(&e)[0].clone();
    let out = c.append_completed(token, false);
    assert_eq!(
        replies(&out),
        vec![(3, TxnReply::EndTxn(Err(TxnRefusal::NotCoordinator)))]
    );
    assert!(markers(&out).is_empty());
    assert_eq!(c.describe(TX).unwrap().state(), TransactionState::Ongoing);
    // The retry goes through.
    let e = c.end_txn(1_400, 4, TX, p, false, None);
    let out = durable(&mut c, &e);
    assert_eq!(replies(&out), vec![(4, TxnReply::EndTxn(Ok(p)))]);
    // Its completion fails to be written: the next tick writes it again.
    let e = c.markers_written(1_500, TX);
    let (token, _) = appends(&e)[0].clone();
    assert!(c.append_completed(token, false).is_empty());
    let e = c.tick(1_600);
    assert_eq!(
        appends(&e)[0].1.as_ref().unwrap().state,
        TransactionState::CompleteAbort
    );
    durable(&mut c, &e);
    assert_eq!(
        c.describe(TX).unwrap().state(),
        TransactionState::CompleteAbort
    );
}

#[test]
fn a_loaded_partition_resumes_the_markers_of_prepared_decisions() {
    let mut c = coordinator();
    let p = init(&mut c, 1_000, 1);
    open(&mut c, 1_100, p, &[("a", 0), ("b", 3)]);
    let e = c.end_txn(1_200, 2, TX, p, true, None);
    let prepared = match &e[0] {
        TxnEffect::Append { record, .. } => record.clone(),
        other => panic!("{other:?}"),
    };
    // A new coordinator (after a failover) loads the records up to the prepared decision.
    let mut next = coordinator();
    next.replay(&prepared.key, prepared.value.as_deref())
        .unwrap();
    let resumed = next.complete_load();
    assert_eq!(resumed.len(), 1);
    assert_eq!(
        markers(&resumed),
        vec![(p, true, vec![("a".into(), 0), ("b".into(), 3)])]
    );
    let e = next.markers_written(2_000, TX);
    durable(&mut next, &e);
    assert_eq!(
        next.describe(TX).unwrap().state(),
        TransactionState::CompleteCommit
    );
    // A tombstone removes the id; a corrupt record is an error, not a panic.
    next.replay(&prepared.key, None).unwrap();
    assert!(next.describe(TX).is_none());
    assert!(next.replay(&prepared.key, Some(&[0, 0, 1])).is_err());
}

#[test]
fn an_idle_id_expires_into_a_tombstone() {
    let mut c = coordinator();
    init(&mut c, 1_000, 1);
    assert!(c.tick(1_001_000).is_empty());
    let e = c.tick(1_001_001);
    assert_eq!(appends(&e), vec![(appends(&e)[0].0, None)]);
    durable(&mut c, &e);
    assert!(c.describe(TX).is_none());
}

#[test]
fn requests_for_an_unknown_id_are_refused() {
    let mut c = coordinator();
    let p = ProducerIdAndEpoch {
        producer_id: 1,
        epoch: 0,
    };
    let e = c.end_txn(0, 1, TX, p, true, None);
    assert_eq!(
        replies(&e),
        vec![(
            1,
            TxnReply::EndTxn(Err(TxnRefusal::Txn(TxnError::InvalidProducerIdMapping)))
        )]
    );
    let e = c.add_partitions(0, 2, TX, p, &[("a".into(), 0)]);
    assert_eq!(
        replies(&e),
        vec![(
            2,
            TxnReply::AddPartitions(Err(TxnRefusal::Txn(TxnError::InvalidProducerIdMapping)))
        )]
    );
    assert!(c.append_completed(AppendToken(99), true).is_empty());
    assert!(c.markers_written(0, TX).is_empty());
}

#[test]
fn verification_accepts_only_partitions_of_the_open_transaction() {
    let mut c = coordinator();
    let tp = |t: &str, p: i32| (t.to_string(), p);
    assert_eq!(
        c.verify(
            TX,
            ProducerIdAndEpoch {
                producer_id: 7,
                epoch: 0
            },
            &[tp("a", 0)]
        ),
        Err(TxnError::InvalidProducerIdMapping),
        "an unknown transactional id"
    );
    let p = init(&mut c, 1_000, 1);
    assert_eq!(
        c.verify(TX, p, &[tp("a", 0)]),
        Ok(vec![Some(TxnError::InvalidTxnState)]),
        "no transaction is open"
    );
    open(&mut c, 1_100, p, &[("a", 0)]);
    assert_eq!(
        c.verify(TX, p, &[tp("a", 0), tp("a", 1)]),
        Ok(vec![None, Some(TxnError::InvalidTxnState)])
    );
    let old = ProducerIdAndEpoch {
        epoch: p.epoch - 1,
        ..p
    };
    assert_eq!(
        c.verify(TX, old, &[tp("a", 0)]),
        Err(TxnError::ProducerFenced)
    );
    let other = ProducerIdAndEpoch {
        producer_id: 99,
        ..p
    };
    assert_eq!(
        c.verify(TX, other, &[tp("a", 0)]),
        Err(TxnError::InvalidProducerIdMapping)
    );
    // Ended: a late produce of the committed transaction cannot open a new one.
    let e = c.end_txn(1_200, 2, TX, p, true, None);
    let _ = durable(&mut c, &e);
    assert_eq!(
        c.verify(TX, p, &[tp("a", 0)]),
        Err(TxnError::ConcurrentTransactions),
        "while the markers are written"
    );
    let e = c.markers_written(1_300, TX);
    let _ = durable(&mut c, &e);
    assert_eq!(
        c.verify(TX, p, &[tp("a", 0)]),
        Ok(vec![Some(TxnError::InvalidTxnState)])
    );
}

#[test]
fn no_deadline_while_a_write_is_in_flight_so_the_shell_never_spins() {
    let mut c = coordinator();
    let p = init(&mut c, 1_000, 1);
    open(&mut c, 2_000, p, &[("a", 0)]);
    // The timeout's abort is being written: nothing is due until its answer.
    let e = c.tick(32_001);
    assert_eq!(appends(&e).len(), 1);
    assert_eq!(c.next_deadline(), None);
    // It failed: the abort is due again, not before the retry backoff.
    let (token, _) = appends(&e)[0].clone();
    assert!(c.append_completed(token, false).is_empty());
    assert_eq!(
        c.next_deadline(),
        Some(32_001 + COMPLETION_RETRY_BACKOFF_MS)
    );
    assert!(c.tick(32_001 + COMPLETION_RETRY_BACKOFF_MS).len() == 1);
}

#[test]
fn a_completion_that_failed_is_due_again_without_any_open_transaction() {
    let mut c = coordinator();
    let p = init(&mut c, 1_000, 1);
    open(&mut c, 1_200, p, &[("a", 0)]);
    let e = c.end_txn(1_300, 3, TX, p, true, None);
    durable(&mut c, &e);
    assert_eq!(c.next_deadline(), None, "markers in flight");
    let e = c.markers_written(1_500, TX);
    let (token, _) = appends(&e)[0].clone();
    assert!(c.append_completed(token, false).is_empty());
    // Nothing else would tick: the completion's retry is a deadline of its own.
    let due = c.next_deadline().expect("a retry is due");
    let e = c.tick(due);
    assert_eq!(
        appends(&e)[0].1.as_ref().unwrap().state,
        TransactionState::CompleteCommit
    );
    durable(&mut c, &e);
    assert_eq!(
        c.describe(TX).unwrap().state(),
        TransactionState::CompleteCommit
    );
}

#[test]
fn an_idle_ids_expiry_is_a_deadline() {
    let mut c = coordinator();
    init(&mut c, 1_000, 1);
    assert_eq!(c.next_deadline(), Some(1_000 + 1_000_000 + 1));
    let e = c.tick(1_000 + 1_000_000 + 1);
    assert_eq!(appends(&e), vec![(appends(&e)[0].0, None)], "a tombstone");
    durable(&mut c, &e);
    assert!(c.describe(TX).is_none());
    assert_eq!(c.next_deadline(), None);
}

/// An EndTxn v5 and its durable decision; the reply.
fn end_v2(
    c: &mut TxnCoordinator,
    now: i64,
    request: RequestId,
    p: ProducerIdAndEpoch,
    commit: bool,
) -> (Vec<TxnEffect>, TxnReply) {
    let e = c.end_txn(now, request, TX, p, commit, Some(900));
    let out = if appends(&e).is_empty() {
        e
    } else {
        durable(c, &e)
    };
    let reply = match replies(&out).as_slice() {
        [(r, reply)] if *r == request => reply.clone(),
        other => panic!("{other:?}"),
    };
    (out, reply)
}

fn complete(c: &mut TxnCoordinator, now: i64) {
    let e = c.markers_written(now, TX);
    durable(c, &e);
}

#[test]
fn version_2_bumps_the_epoch_at_every_decision_and_answers_retries_alike() {
    let mut c = coordinator();
    let p0 = init(&mut c, 1_000, 1);
    open(&mut c, 1_100, p0, &[("orders", 0)]);
    let (out, reply) = end_v2(&mut c, 1_200, 2, p0, true);
    let p1 = ProducerIdAndEpoch {
        producer_id: 7,
        epoch: 1,
    };
    assert_eq!(reply, TxnReply::EndTxn(Ok(p1)));
    // The markers carry the bumped epoch: the partitions fence what came before it.
    assert_eq!(markers(&out), vec![(p1, true, vec![("orders".into(), 0)])]);
    let v = c.describe(TX).unwrap();
    assert_eq!(v.current.client_transaction_version, 2);
    // A retry while the markers are written waits; after them it is answered as the first.
    let (_, reply) = end_v2(&mut c, 1_250, 3, p0, true);
    assert_eq!(
        reply,
        TxnReply::EndTxn(Err(TxnError::ConcurrentTransactions.into()))
    );
    complete(&mut c, 1_300);
    let (_, reply) = end_v2(&mut c, 1_400, 4, p0, true);
    assert_eq!(reply, TxnReply::EndTxn(Ok(p1)));
    // A retry that names the other decision, or an older epoch, is refused.
    let (_, reply) = end_v2(&mut c, 1_400, 5, p0, false);
    assert_eq!(
        reply,
        TxnReply::EndTxn(Err(TxnError::ProducerFenced.into()))
    );
    let stale = ProducerIdAndEpoch {
        producer_id: 7,
        epoch: -1,
    };
    let (_, reply) = end_v2(&mut c, 1_400, 6, stale, true);
    assert_eq!(
        reply,
        TxnReply::EndTxn(Err(TxnError::ProducerFenced.into()))
    );
    // The next transaction runs at the bumped epoch; the old one can no longer add to it.
    let e = c.add_partitions(1_500, 7, TX, p0, &[("orders".into(), 1)]);
    assert_eq!(
        replies(&e),
        vec![(
            7,
            TxnReply::AddPartitions(Err(TxnError::ProducerFenced.into()))
        )]
    );
    open(&mut c, 1_500, p1, &[("orders", 1)]);
    let (_, reply) = end_v2(&mut c, 1_600, 8, p1, false);
    let p2 = ProducerIdAndEpoch {
        producer_id: 7,
        epoch: 2,
    };
    assert_eq!(reply, TxnReply::EndTxn(Ok(p2)));
}

#[test]
fn version_2_abort_with_nothing_open_still_bumps_the_epoch() {
    let mut c = coordinator();
    let p0 = init(&mut c, 1_000, 1);
    let (_, reply) = end_v2(&mut c, 1_100, 2, p0, true);
    assert_eq!(
        reply,
        TxnReply::EndTxn(Err(TxnError::InvalidTxnState.into())),
        "a commit of nothing"
    );
    let (out, reply) = end_v2(&mut c, 1_100, 3, p0, false);
    let p1 = ProducerIdAndEpoch {
        producer_id: 7,
        epoch: 1,
    };
    assert_eq!(reply, TxnReply::EndTxn(Ok(p1)));
    assert_eq!(markers(&out), vec![(p1, false, vec![])]);
    complete(&mut c, 1_200);
    assert_eq!(
        c.describe(TX).unwrap().state(),
        TransactionState::CompleteAbort
    );
}

#[test]
fn version_2_moves_to_a_fresh_producer_id_when_the_epoch_runs_out() {
    let mut c = coordinator();
    let p0 = init(&mut c, 1_000, 1);
    // Run the epoch up to its last value through the log, as a long-lived producer would.
    let mut v = c.describe(TX).unwrap().current.clone();
    v.producer_epoch = MAX_PRODUCER_EPOCH;
    let value = records::encode_value(&v);
    c.replay(&records::encode_key(TX), Some(&value)).unwrap();
    let last = ProducerIdAndEpoch {
        producer_id: p0.producer_id,
        epoch: MAX_PRODUCER_EPOCH,
    };
    open(&mut c, 1_100, last, &[("orders", 0)]);
    let (out, reply) = end_v2(&mut c, 1_200, 2, last, true);
    let moved = ProducerIdAndEpoch {
        producer_id: 900,
        epoch: 0,
    };
    assert_eq!(reply, TxnReply::EndTxn(Ok(moved)));
    // The markers are the old producer's: its records are the ones they end.
    assert_eq!(
        markers(&out),
        vec![(last, true, vec![("orders".into(), 0)])]
    );
    complete(&mut c, 1_300);
    let v = &c.describe(TX).unwrap().current;
    assert_eq!((v.producer_id, v.producer_epoch), (900, 0));
    assert_eq!((v.previous_producer_id, v.next_producer_id), (7, -1));
    // The retry with the exhausted identity is answered as the first.
    let (_, reply) = end_v2(&mut c, 1_400, 3, last, true);
    assert_eq!(reply, TxnReply::EndTxn(Ok(moved)));
    open(&mut c, 1_500, moved, &[("orders", 1)]);
}
