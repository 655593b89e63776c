//! Tests of the transaction manager (`txn`): no network, no clock; each test feeds answers
//! and checks the requests and completions that come out.

use std::collections::BTreeMap;

use super::txn::*;
use super::wire::ProducerIdentity;
use crate::error::{KafkaCode, KafkaError};
use crate::types::{ConsumerGroupMetadata, TopicPartition};

const ID: ProducerIdentity = ProducerIdentity {
    producer_id: 7000,
    epoch: 3,
};
const COORDINATOR: i32 = 2;
const BACKOFF: u64 = 100;

fn offered(epoch_bump: bool) -> Offered {
    Offered {
        epoch_bump,
        version2: false,
    }
}

fn tp(t: &str, p: i32) -> TopicPartition {
    TopicPartition::new(t, p)
}

fn err(code: i16) -> KafkaError {
    KafkaError::new(KafkaCode(code), Some(format!("code {code}")))
}

fn new() -> TxnManager {
    TxnManager::new("tx".into(), 60_000, BACKOFF)
}

/// The next request, which must exist.
fn next(m: &mut TxnManager, now: u64) -> Outgoing {
    m.next_request(now, false)
        .unwrap_or_else(|| panic!("a request is due in {}", m.state()))
}

/// A manager past init_transactions, with KIP-360 bumps as `bump` says.
fn ready_with(bump: bool) -> TxnManager {
    let mut m = new();
    assert_eq!(m.init(), Ok(Pending::Waiting));
    assert_eq!(m.state(), TxnState::Initializing);
    let find = next(&mut m, 0);
    assert_eq!(
        find,
        Outgoing {
            broker: None,
            request: TxnRequest::FindCoordinator {
                key_type: KEY_TYPE_TRANSACTION,
                key: "tx".into()
            }
        }
    );
    assert_eq!(
        m.on_response(0, TxnResponse::Coordinator(Ok(COORDINATOR))),
        Effects::default()
    );
    let init = next(&mut m, 0);
    assert_eq!(
        init,
        Outgoing {
            broker: Some(COORDINATOR),
            request: TxnRequest::InitProducerId {
                transactional_id: "tx".into(),
                transaction_timeout_ms: 60_000,
                current: None
            }
        }
    );
    let fx = m.on_response(0, TxnResponse::ProducerId(Ok(ID), offered(bump)));
    assert_eq!(fx.identity, Some(ID));
    assert_eq!(fx.completed, Some((Op::InitTransactions, Ok(()))));
    assert_eq!(m.state(), TxnState::Ready);
    assert_eq!(m.next_request(0, false), None, "nothing more to send");
    m
}

fn ready() -> TxnManager {
    ready_with(true)
}

/// In a transaction with `parts` added.
fn with_partitions(parts: &[TopicPartition]) -> TxnManager {
    let mut m = ready();
    m.begin().unwrap();
    for p in parts {
        m.on_send(p).unwrap();
    }
    let add = next(&mut m, 0);
    let results = parts.iter().map(|p| (p.clone(), Ok(()))).collect();
    m.on_response(0, TxnResponse::PartitionsAdded(results));
    assert!(matches!(add.request, TxnRequest::AddPartitions { .. }));
    m
}

fn group() -> ConsumerGroupMetadata {
    ConsumerGroupMetadata {
        group_id: "g".into(),
        generation_id: 4,
        member_id: "m".into(),
        group_instance_id: None,
    }
}

fn illegal(call: &'static str, state: TxnState) -> TxnError {
    TxnError::IllegalState { call, state }
}

#[test]
fn calls_outside_their_states_are_refused() {
    let mut m = new();
    assert_eq!(
        m.begin(),
        Err(illegal("begin_transaction", TxnState::Uninitialized))
    );
    assert_eq!(
        m.commit(),
        Err(illegal("commit_transaction", TxnState::Uninitialized))
    );
    assert_eq!(
        m.abort(),
        Err(illegal("abort_transaction", TxnState::Uninitialized))
    );
    assert_eq!(
        m.send_offsets(BTreeMap::new(), group()),
        Err(illegal(
            "send_offsets_to_transaction",
            TxnState::Uninitialized
        ))
    );
    assert_eq!(
        m.on_send(&tp("t", 0)),
        Err(illegal("send", TxnState::Uninitialized))
    );

    let mut m = ready();
    assert_eq!(m.init(), Err(illegal("init_transactions", TxnState::Ready)));
    assert_eq!(
        m.commit(),
        Err(illegal("commit_transaction", TxnState::Ready))
    );
    assert_eq!(
        m.abort(),
        Err(illegal("abort_transaction", TxnState::Ready))
    );
    assert_eq!(
        m.on_send(&tp("t", 0)),
        Err(illegal("send", TxnState::Ready))
    );

    m.begin().unwrap();
    assert_eq!(m.state(), TxnState::InTransaction);
    assert_eq!(
        m.begin(),
        Err(illegal("begin_transaction", TxnState::InTransaction))
    );
    assert_eq!(
        m.init(),
        Err(illegal("init_transactions", TxnState::InTransaction))
    );

    // While committing, only the same call (joining it) is accepted.
    let mut m = with_partitions(&[tp("t", 0)]);
    assert_eq!(m.commit(), Ok(Pending::Waiting));
    assert_eq!(m.state(), TxnState::CommittingTransaction);
    assert_eq!(m.commit(), Ok(Pending::Waiting), "a retried call joins");
    assert_eq!(
        m.abort(),
        Err(illegal(
            "abort_transaction",
            TxnState::CommittingTransaction
        ))
    );
    assert_eq!(
        m.on_send(&tp("t", 1)),
        Err(illegal("send", TxnState::CommittingTransaction))
    );
    assert_eq!(
        m.begin(),
        Err(illegal(
            "begin_transaction",
            TxnState::CommittingTransaction
        ))
    );
}

#[test]
fn partitions_are_added_before_their_batches_go_one_request_at_a_time() {
    let mut m = ready();
    m.begin().unwrap();
    assert_eq!(m.next_request(0, false), None, "begin sends nothing");
    m.on_send(&tp("a", 0)).unwrap();
    m.on_send(&tp("a", 1)).unwrap();
    m.on_send(&tp("a", 0)).unwrap();
    assert!(
        !m.may_send(&tp("a", 0)),
        "not before the coordinator added it"
    );
    let add = next(&mut m, 0);
    assert_eq!(
        add,
        Outgoing {
            broker: Some(COORDINATOR),
            request: TxnRequest::AddPartitions {
                transactional_id: "tx".into(),
                identity: ID,
                partitions: vec![tp("a", 0), tp("a", 1)],
            }
        }
    );
    m.on_send(&tp("b", 0)).unwrap();
    assert_eq!(m.next_request(0, false), None, "one request in flight");
    m.on_response(
        0,
        TxnResponse::PartitionsAdded(vec![(tp("a", 0), Ok(())), (tp("a", 1), Ok(()))]),
    );
    assert!(m.may_send(&tp("a", 0)) && m.may_send(&tp("a", 1)));
    assert!(!m.may_send(&tp("b", 0)));
    let TxnRequest::AddPartitions { partitions, .. } = next(&mut m, 0).request else {
        panic!("AddPartitionsToTxn expected");
    };
    assert_eq!(partitions, vec![tp("b", 0)], "only the new partition");
    m.on_response(0, TxnResponse::PartitionsAdded(vec![(tp("b", 0), Ok(()))]));
    m.on_send(&tp("a", 0)).unwrap();
    assert_eq!(
        m.next_request(0, false),
        None,
        "an added partition is not added again"
    );
}

#[test]
fn a_retriable_add_is_sent_again_after_the_backoff_with_the_partitions_not_added() {
    let mut m = ready();
    m.begin().unwrap();
    m.on_send(&tp("a", 0)).unwrap();
    m.on_send(&tp("a", 1)).unwrap();
    next(&mut m, 1_000);
    m.on_response(
        1_000,
        TxnResponse::PartitionsAdded(vec![
            (tp("a", 0), Ok(())),
            (tp("a", 1), Err(err(51))), // CONCURRENT_TRANSACTIONS
        ]),
    );
    assert_eq!(m.state(), TxnState::InTransaction);
    assert_eq!(m.next_request(1_000 + BACKOFF - 1, false), None);
    let TxnRequest::AddPartitions { partitions, .. } = next(&mut m, 1_000 + BACKOFF).request else {
        panic!("AddPartitionsToTxn expected");
    };
    assert_eq!(partitions, vec![tp("a", 1)]);
    // OPERATION_NOT_ATTEMPTED is no failure of its own: sent again with the rest.
    m.on_response(
        2_000,
        TxnResponse::PartitionsAdded(vec![(tp("a", 1), Err(err(55)))]),
    );
    assert_eq!(m.state(), TxnState::InTransaction);
    assert!(matches!(
        next(&mut m, 2_000).request,
        TxnRequest::AddPartitions { .. }
    ));
}

#[test]
fn not_coordinator_finds_the_coordinator_again() {
    let mut m = with_partitions(&[tp("a", 0)]);
    m.commit().unwrap();
    next(&mut m, 0);
    m.on_response(0, TxnResponse::Ended(Err(err(16)))); // NOT_COORDINATOR
    assert_eq!(m.state(), TxnState::CommittingTransaction);
    let find = next(&mut m, BACKOFF);
    assert!(matches!(
        find.request,
        TxnRequest::FindCoordinator {
            key_type: KEY_TYPE_TRANSACTION,
            ..
        }
    ));
    m.on_response(BACKOFF, TxnResponse::Coordinator(Ok(5)));
    let end = next(&mut m, BACKOFF);
    assert_eq!(end.broker, Some(5), "EndTxn goes to the new coordinator");
    // A lost answer also sends the client looking for the coordinator.
    m.on_response(BACKOFF, TxnResponse::NoResponse("connection reset".into()));
    assert!(matches!(
        next(&mut m, 2 * BACKOFF).request,
        TxnRequest::FindCoordinator { .. }
    ));
    m.on_response(2 * BACKOFF, TxnResponse::Coordinator(Ok(5)));
    next(&mut m, 2 * BACKOFF);
    let fx = m.on_response(2 * BACKOFF, TxnResponse::Ended(Ok(None)));
    assert_eq!(fx.completed, Some((Op::Commit, Ok(()))));
}

#[test]
fn commit_waits_for_every_batch_then_ends_the_transaction() {
    let mut m = with_partitions(&[tp("a", 0)]);
    assert_eq!(m.commit(), Ok(Pending::Waiting));
    assert_eq!(m.next_request(0, true), None, "batches still unanswered");
    let end = m.next_request(0, false).unwrap();
    assert_eq!(
        end,
        Outgoing {
            broker: Some(COORDINATOR),
            request: TxnRequest::EndTxn {
                transactional_id: "tx".into(),
                identity: ID,
                commit: true,
                version2: false,
            }
        }
    );
    let fx = m.on_response(0, TxnResponse::Ended(Ok(None)));
    assert_eq!(fx.completed, Some((Op::Commit, Ok(()))));
    assert_eq!(m.state(), TxnState::Ready);
    // The next transaction adds its partitions again.
    m.begin().unwrap();
    m.on_send(&tp("a", 0)).unwrap();
    assert!(!m.may_send(&tp("a", 0)));
    assert!(matches!(
        next(&mut m, 0).request,
        TxnRequest::AddPartitions { .. }
    ));
}

#[test]
fn partitions_not_yet_added_are_added_before_end_txn() {
    let mut m = ready();
    m.begin().unwrap();
    m.on_send(&tp("a", 0)).unwrap();
    m.commit().unwrap();
    assert!(matches!(
        next(&mut m, 0).request,
        TxnRequest::AddPartitions { .. }
    ));
    m.on_response(0, TxnResponse::PartitionsAdded(vec![(tp("a", 0), Ok(()))]));
    assert!(m.may_send(&tp("a", 0)), "its batches go while committing");
    assert_eq!(m.next_request(0, true), None);
    assert!(matches!(
        next(&mut m, 0).request,
        TxnRequest::EndTxn { commit: true, .. }
    ));
}

#[test]
fn an_empty_transaction_ends_without_a_request() {
    let mut m = ready();
    m.begin().unwrap();
    assert_eq!(m.commit(), Ok(Pending::Done(Ok(()))));
    assert_eq!(m.state(), TxnState::Ready);
    m.begin().unwrap();
    assert_eq!(m.abort(), Ok(Pending::Done(Ok(()))));
    assert_eq!(m.state(), TxnState::Ready);
    assert_eq!(m.next_request(0, false), None);
}

#[test]
fn offsets_go_to_the_transaction_then_to_the_group_coordinator() {
    let mut m = ready();
    m.begin().unwrap();
    let offsets: BTreeMap<TopicPartition, i64> = [(tp("in", 0), 10), (tp("in", 1), 20)].into();
    assert_eq!(
        m.send_offsets(offsets.clone(), group()),
        Ok(Pending::Waiting)
    );
    assert_eq!(
        next(&mut m, 0),
        Outgoing {
            broker: Some(COORDINATOR),
            request: TxnRequest::AddOffsets {
                transactional_id: "tx".into(),
                identity: ID,
                group_id: "g".into()
            }
        }
    );
    assert_eq!(
        m.on_response(0, TxnResponse::OffsetsAdded(Ok(()))),
        Effects::default()
    );
    assert_eq!(
        next(&mut m, 0).request,
        TxnRequest::FindCoordinator {
            key_type: KEY_TYPE_GROUP,
            key: "g".into()
        }
    );
    m.on_response(0, TxnResponse::Coordinator(Ok(9)));
    assert_eq!(
        next(&mut m, 0),
        Outgoing {
            broker: Some(9),
            request: TxnRequest::TxnOffsetCommit {
                transactional_id: "tx".into(),
                identity: ID,
                group: group(),
                offsets,
                version2: false,
            }
        }
    );
    // One partition's coordinator is loading: only it is sent again.
    let fx = m.on_response(
        0,
        TxnResponse::OffsetsCommitted(vec![(tp("in", 0), Ok(())), (tp("in", 1), Err(err(14)))]),
    );
    assert_eq!(fx.completed, None);
    let again = next(&mut m, BACKOFF);
    let TxnRequest::TxnOffsetCommit { offsets, .. } = again.request else {
        panic!("TxnOffsetCommit expected");
    };
    assert_eq!(offsets, [(tp("in", 1), 20)].into());
    let fx = m.on_response(
        BACKOFF,
        TxnResponse::OffsetsCommitted(vec![(tp("in", 1), Ok(()))]),
    );
    assert_eq!(fx.completed, Some((Op::SendOffsets, Ok(()))));
    assert_eq!(m.state(), TxnState::InTransaction);
    // Offsets alone make a transaction: commit sends EndTxn.
    m.commit().unwrap();
    assert!(matches!(
        next(&mut m, BACKOFF).request,
        TxnRequest::EndTxn { commit: true, .. }
    ));
}

#[test]
fn a_fenced_member_makes_the_transaction_abortable() {
    let mut m = ready();
    m.begin().unwrap();
    m.send_offsets([(tp("in", 0), 1)].into(), group()).unwrap();
    next(&mut m, 0);
    m.on_response(0, TxnResponse::OffsetsAdded(Ok(())));
    next(&mut m, 0);
    m.on_response(0, TxnResponse::Coordinator(Ok(9)));
    next(&mut m, 0);
    let fx = m.on_response(
        0,
        TxnResponse::OffsetsCommitted(vec![(tp("in", 0), Err(err(22)))]), // ILLEGAL_GENERATION
    );
    assert_eq!(
        fx.completed,
        Some((Op::SendOffsets, Err(TxnError::Abortable(err(22)))))
    );
    assert_eq!(m.state(), TxnState::AbortableError);
}

#[test]
fn fencing_is_fatal_and_every_later_call_fails_with_it() {
    for (code, when) in [(90, "EndTxn"), (47, "EndTxn"), (53, "EndTxn")] {
        let mut m = with_partitions(&[tp("a", 0)]);
        m.commit().unwrap();
        next(&mut m, 0);
        let fx = m.on_response(0, TxnResponse::Ended(Err(err(code))));
        let fatal = TxnError::Fatal(err(code));
        assert_eq!(
            fx.completed,
            Some((Op::Commit, Err(fatal.clone()))),
            "{when} {code}"
        );
        assert_eq!(m.state(), TxnState::FatalError);
        assert_eq!(m.begin(), Err(fatal.clone()));
        assert_eq!(m.abort(), Err(fatal.clone()));
        assert_eq!(m.commit(), Err(fatal.clone()));
        assert_eq!(m.on_send(&tp("a", 0)), Err(fatal.clone()));
        assert_eq!(m.next_request(10_000, false), None);
        assert!(m.drop_unsent().is_some());
    }
    // A produce answer can fence too.
    let mut m = with_partitions(&[tp("a", 0)]);
    m.on_batch_failed(&err(90));
    assert_eq!(m.state(), TxnState::FatalError);
}

#[test]
fn init_against_a_broker_without_transactions_fails_at_once() {
    let mut m = new();
    m.init().unwrap();
    next(&mut m, 0);
    let refusal = KafkaError::new(
        TRANSACTIONAL_ID_AUTHORIZATION_FAILED,
        Some("transactions are not supported by this Gregor broker".into()),
    );
    let fx = m.on_response(0, TxnResponse::Coordinator(Err(refusal.clone())));
    assert_eq!(
        fx.completed,
        Some((Op::InitTransactions, Err(TxnError::Fatal(refusal))))
    );
    assert_eq!(m.state(), TxnState::FatalError);
    assert_eq!(m.next_request(60_000, false), None, "nothing is retried");
    // The same refusal from InitProducerId.
    let mut m = new();
    m.init().unwrap();
    next(&mut m, 0);
    m.on_response(0, TxnResponse::Coordinator(Ok(1)));
    next(&mut m, 0);
    let fx = m.on_response(0, TxnResponse::ProducerId(Err(err(53)), offered(true)));
    assert_eq!(
        fx.completed,
        Some((Op::InitTransactions, Err(TxnError::Fatal(err(53)))))
    );
}

#[test]
fn init_retries_a_busy_coordinator_and_a_late_caller_gets_the_result() {
    let mut m = new();
    m.init().unwrap();
    next(&mut m, 0);
    m.on_response(0, TxnResponse::Coordinator(Err(err(15)))); // COORDINATOR_NOT_AVAILABLE
    assert_eq!(m.next_request(BACKOFF - 1, false), None);
    next(&mut m, BACKOFF);
    m.on_response(BACKOFF, TxnResponse::Coordinator(Ok(1)));
    next(&mut m, BACKOFF);
    m.on_response(
        BACKOFF,
        TxnResponse::ProducerId(Err(err(51)), offered(true)),
    ); // CONCURRENT_TRANSACTIONS
    assert_eq!(m.state(), TxnState::Initializing);
    // The caller timed out and calls again: it joins the call in progress.
    assert_eq!(m.init(), Ok(Pending::Waiting));
    let again = next(&mut m, 2 * BACKOFF);
    assert!(matches!(again.request, TxnRequest::InitProducerId { .. }));
    let fx = m.on_response(2 * BACKOFF, TxnResponse::ProducerId(Ok(ID), offered(true)));
    let done = fx.completed.expect("init completes");
    // Nobody waited: the next init_transactions gets the result instead of a refusal.
    m.unclaimed(done.0, done.1);
    assert_eq!(m.init(), Ok(Pending::Done(Ok(()))));
    assert_eq!(m.init(), Err(illegal("init_transactions", TxnState::Ready)));
}

#[test]
fn a_failed_batch_makes_the_transaction_abortable_and_abort_recovers() {
    let mut m = with_partitions(&[tp("a", 0), tp("b", 0)]);
    m.on_send(&tp("c", 0)).unwrap();
    m.on_batch_failed(&err(10)); // MESSAGE_TOO_LARGE
    assert_eq!(m.state(), TxnState::AbortableError);
    let abortable = TxnError::Abortable(err(10));
    assert_eq!(m.commit(), Err(abortable.clone()));
    assert_eq!(m.begin(), Err(abortable.clone()));
    assert_eq!(m.on_send(&tp("a", 0)), Err(abortable.clone()));
    assert_eq!(
        m.send_offsets(BTreeMap::new(), group()),
        Err(abortable.clone())
    );
    assert_eq!(m.drop_unsent(), Some(abortable));
    assert_eq!(
        m.next_request(0, false),
        None,
        "the new partition is not added"
    );
    assert_eq!(m.abort(), Ok(Pending::Waiting));
    assert_eq!(m.state(), TxnState::AbortingTransaction);
    assert!(m.drop_unsent().is_some());
    // Batches failing during the abort change nothing.
    m.on_batch_failed(&err(6));
    assert_eq!(m.state(), TxnState::AbortingTransaction);
    assert_eq!(
        m.next_request(0, true),
        None,
        "EndTxn waits for batches in flight"
    );
    assert!(matches!(
        next(&mut m, 0).request,
        TxnRequest::EndTxn { commit: false, .. }
    ));
    let fx = m.on_response(0, TxnResponse::Ended(Ok(None)));
    assert_eq!(fx.completed, Some((Op::Abort, Ok(()))));
    assert_eq!(fx.identity, None, "no bump needed");
    assert_eq!(m.state(), TxnState::Ready);
    assert_eq!(m.drop_unsent(), None);
    m.begin().unwrap();
}

#[test]
fn a_lost_sequence_is_aborted_then_the_epoch_bumped() {
    let mut m = with_partitions(&[tp("a", 0)]);
    m.on_batch_failed(&err(59)); // UNKNOWN_PRODUCER_ID
    assert_eq!(m.state(), TxnState::AbortableError);
    m.abort().unwrap();
    assert!(matches!(
        next(&mut m, 0).request,
        TxnRequest::EndTxn { commit: false, .. }
    ));
    assert_eq!(
        m.on_response(0, TxnResponse::Ended(Ok(None))).completed,
        None
    );
    assert_eq!(m.state(), TxnState::AbortingTransaction);
    assert_eq!(
        next(&mut m, 0),
        Outgoing {
            broker: Some(COORDINATOR),
            request: TxnRequest::InitProducerId {
                transactional_id: "tx".into(),
                transaction_timeout_ms: 60_000,
                current: Some(ID),
            }
        }
    );
    let bumped = ProducerIdentity {
        producer_id: ID.producer_id,
        epoch: ID.epoch + 1,
    };
    let fx = m.on_response(0, TxnResponse::ProducerId(Ok(bumped), offered(true)));
    assert_eq!(
        fx.identity,
        Some(bumped),
        "sequences restart under the new epoch"
    );
    assert_eq!(fx.completed, Some((Op::Abort, Ok(()))));
    assert_eq!(m.state(), TxnState::Ready);
    assert_eq!(m.identity(), Some(bumped));
}

#[test]
fn a_lost_producer_id_mapping_skips_end_txn() {
    let mut m = with_partitions(&[tp("a", 0)]);
    m.on_send(&tp("b", 0)).unwrap();
    next(&mut m, 0);
    m.on_response(
        0,
        TxnResponse::PartitionsAdded(vec![(tp("b", 0), Err(err(49)))]), // INVALID_PRODUCER_ID_MAPPING
    );
    assert_eq!(m.state(), TxnState::AbortableError);
    m.abort().unwrap();
    let TxnRequest::InitProducerId { current, .. } = next(&mut m, 0).request else {
        panic!("straight to the epoch bump");
    };
    assert_eq!(current, Some(ID));
}

#[test]
fn without_epoch_bumps_a_lost_sequence_is_fatal() {
    let mut m = ready_with(false);
    m.begin().unwrap();
    m.on_send(&tp("a", 0)).unwrap();
    next(&mut m, 0);
    m.on_response(0, TxnResponse::PartitionsAdded(vec![(tp("a", 0), Ok(()))]));
    m.on_batch_failed(&err(45)); // OUT_OF_ORDER_SEQUENCE_NUMBER
    assert_eq!(m.state(), TxnState::FatalError);
}

#[test]
fn an_abortable_error_while_committing_fails_the_commit() {
    let mut m = with_partitions(&[tp("a", 0)]);
    m.commit().unwrap();
    next(&mut m, 0);
    let fx = m.on_response(0, TxnResponse::Ended(Err(err(120)))); // TRANSACTION_ABORTABLE
    assert_eq!(
        fx.completed,
        Some((Op::Commit, Err(TxnError::Abortable(err(120)))))
    );
    assert_eq!(m.state(), TxnState::AbortableError);
    m.abort().unwrap();
    assert!(matches!(
        next(&mut m, 0).request,
        TxnRequest::EndTxn { commit: false, .. }
    ));
}

#[test]
fn invalid_txn_state_is_fatal() {
    let mut m = with_partitions(&[tp("a", 0)]);
    m.commit().unwrap();
    next(&mut m, 0);
    m.on_response(0, TxnResponse::Ended(Err(err(48))));
    assert_eq!(m.state(), TxnState::FatalError);
}

#[test]
fn error_codes_are_classified_as_kafka_does() {
    use RequestKind as K;
    let all = [
        K::FindCoordinator,
        K::InitProducerId,
        K::AddPartitions,
        K::AddOffsets,
        K::TxnOffsetCommit,
        K::EndTxn,
        K::Produce,
    ];
    for kind in all {
        for fatal in [90, 47, 53] {
            assert_eq!(
                classify(kind, KafkaCode(fatal)),
                Class::Fatal,
                "{kind:?} {fatal}"
            );
        }
    }
    for kind in [
        K::InitProducerId,
        K::AddPartitions,
        K::AddOffsets,
        K::EndTxn,
    ] {
        assert_eq!(classify(kind, KafkaCode(51)), Class::Retry, "{kind:?}");
        assert_eq!(classify(kind, KafkaCode(14)), Class::Retry, "{kind:?}");
        assert_eq!(
            classify(kind, KafkaCode(16)),
            Class::FindCoordinator,
            "{kind:?}"
        );
        assert_eq!(
            classify(kind, KafkaCode(15)),
            Class::FindCoordinator,
            "{kind:?}"
        );
    }
    assert_eq!(classify(K::EndTxn, KafkaCode(48)), Class::Fatal);
    assert_eq!(classify(K::AddPartitions, KafkaCode(48)), Class::Fatal);
    assert_eq!(classify(K::Produce, KafkaCode(48)), Class::Fatal);
    assert_eq!(classify(K::AddPartitions, KafkaCode(29)), Class::Abortable);
    assert_eq!(classify(K::AddPartitions, KafkaCode(55)), Class::Ignore);
    assert_eq!(classify(K::AddPartitions, KafkaCode(3)), Class::Retry);
    assert_eq!(
        classify(K::TxnOffsetCommit, KafkaCode(7)),
        Class::FindCoordinator
    );
    assert_eq!(
        classify(K::TxnOffsetCommit, KafkaCode(25)),
        Class::Abortable
    );
    assert_eq!(
        classify(K::TxnOffsetCommit, KafkaCode(82)),
        Class::Abortable
    );
    assert_eq!(classify(K::AddOffsets, KafkaCode(30)), Class::Abortable);
    for kind in [K::AddPartitions, K::AddOffsets, K::EndTxn, K::Produce] {
        assert_eq!(
            classify(kind, KafkaCode(59)),
            Class::AbortableWithBump,
            "{kind:?}"
        );
    }
    assert_eq!(
        classify(K::Produce, KafkaCode(45)),
        Class::AbortableWithBump
    );
    assert_eq!(classify(K::Produce, KafkaCode(10)), Class::Abortable);
    assert_eq!(classify(K::InitProducerId, KafkaCode(50)), Class::Fatal);
    assert_eq!(
        classify(K::EndTxn, KafkaCode(-1)),
        Class::Fatal,
        "unknown: fatal"
    );
}

/// A manager past init_transactions whose coordinator offers transaction version 2.
fn ready_v2() -> TxnManager {
    let mut m = new();
    m.init().unwrap();
    next(&mut m, 0);
    m.on_response(0, TxnResponse::Coordinator(Ok(COORDINATOR)));
    next(&mut m, 0);
    let offered = Offered {
        epoch_bump: true,
        version2: true,
    };
    m.on_response(0, TxnResponse::ProducerId(Ok(ID), offered));
    assert_eq!(m.state(), TxnState::Ready);
    m
}

#[test]
fn version_2_adds_nothing_itself_and_goes_on_with_the_epoch_endtxn_names() {
    let mut m = ready_v2();
    assert!(!m.version2(), "decided when a transaction begins");
    m.begin().unwrap();
    assert!(m.version2());
    // Batches go at once (Produce v12: the leader adds the partition); no AddPartitionsToTxn.
    m.on_send(&tp("out", 0)).unwrap();
    assert!(m.may_send(&tp("out", 0)));
    assert_eq!(m.next_request(0, false), None);
    // Offsets go straight to the group coordinator (TxnOffsetCommit v5).
    let offsets: BTreeMap<TopicPartition, i64> = [(tp("in", 0), 10)].into();
    m.send_offsets(offsets.clone(), group()).unwrap();
    assert!(matches!(
        next(&mut m, 0).request,
        TxnRequest::FindCoordinator {
            key_type: KEY_TYPE_GROUP,
            ..
        }
    ));
    m.on_response(0, TxnResponse::Coordinator(Ok(9)));
    let commit = next(&mut m, 0);
    assert!(
        matches!(
            commit.request,
            TxnRequest::TxnOffsetCommit { version2: true, .. }
        ),
        "{commit:?}"
    );
    let fx = m.on_response(
        0,
        TxnResponse::OffsetsCommitted(vec![(tp("in", 0), Ok(()))]),
    );
    assert_eq!(fx.completed, Some((Op::SendOffsets, Ok(()))));
    assert_eq!(m.commit(), Ok(Pending::Waiting));
    let end = next(&mut m, 0);
    assert!(
        matches!(
            end.request,
            TxnRequest::EndTxn {
                commit: true,
                version2: true,
                identity: ID,
                ..
            }
        ),
        "{end:?}"
    );
    let bumped = ProducerIdentity {
        producer_id: ID.producer_id,
        epoch: ID.epoch + 1,
    };
    let fx = m.on_response(0, TxnResponse::Ended(Ok(Some(bumped))));
    assert_eq!(
        fx.identity,
        Some(bumped),
        "sequences restart at the new epoch"
    );
    assert_eq!(fx.completed, Some((Op::Commit, Ok(()))));
    assert_eq!(m.identity(), Some(bumped));
    // An abort with nothing sent needs no EndTxn.
    m.begin().unwrap();
    assert_eq!(m.abort(), Ok(Pending::Done(Ok(()))));
}
