//! Transactions in a partition: the last stable offset, the markers a coordinator writes, the
//! aborted-transaction index, and all of it across a restart.

use std::path::Path;

use gregor_log::batch::Codec;
use gregor_log::records::{encode_batch, BatchSpec, Record};
use gregor_log::txn::AbortedTxn;
use gregor_log::LogConfig;

use super::*;

fn leader(dir: &Path) -> Arc<Partition> {
    let log = Log::open(dir, LogConfig::default(), now_ms()).expect("open log");
    let state = PartitionState {
        leader_epoch: 0,
        partition_epoch: 0,
        replicas: vec![1],
        isr: vec![1],
    };
    let role = Role {
        is_leader: true,
        leader_epoch: 0,
    };
    Arc::new(Partition::new("t", 0, Uuid::nil(), 1, log, &state, role))
}

/// A batch of `count` records of producer `pid` (epoch 0) from sequence `seq`.
fn batch(pid: i64, seq: i32, count: usize, transactional: bool) -> bytes::Bytes {
    let spec = BatchSpec {
        codec: Codec::None,
        producer_id: pid,
        producer_epoch: 0,
        base_sequence: seq,
        transactional,
        ..BatchSpec::default()
    };
    let records: Vec<Record> = (0..count)
        .map(|i| Record {
            offset: i as i64,
            timestamp: now_ms(),
            key: None,
            value: Some(bytes::Bytes::from(format!("v{i}"))),
            headers: Vec::new(),
        })
        .collect();
    bytes::Bytes::from(encode_batch(&spec, &records).expect("encode"))
}

fn marker(pid: i64, epoch: i16, coordinator_epoch: i32, commit: bool) -> Marker {
    Marker {
        producer_id: pid,
        producer_epoch: epoch,
        coordinator_epoch,
        commit,
        timestamp: now_ms(),
    }
}

async fn append(
    part: &Arc<Partition>,
    records: bytes::Bytes,
) -> Result<ProduceOutcome, ResponseError> {
    part.spawn_append(records)
        .done
        .await
        .expect("task")
        .map_err(|e| e.response_error())
}

async fn end(part: &Arc<Partition>, m: Marker) -> Result<ProduceOutcome, ResponseError> {
    part.spawn_marker(m)
        .done
        .await
        .expect("task")
        .map_err(|e| e.response_error())
}

fn lso(part: &Partition) -> i64 {
    part.last_stable_offset(part.high_watermark())
}

#[tokio::test]
async fn an_open_transaction_holds_the_lso_until_its_marker_and_an_abort_is_indexed() {
    let dir = tempfile::tempdir().expect("temp dir");
    let part = leader(dir.path());
    append(&part, batch(-1, -1, 2, false)).await.expect("plain"); // 0-1
    append(&part, batch(7, 0, 3, true)).await.expect("txn 7"); // 2-4
    append(&part, batch(8, 0, 1, true)).await.expect("txn 8"); // 5
    append(&part, batch(-1, -1, 1, false)).await.expect("plain"); // 6
    assert_eq!(part.high_watermark(), 7);
    assert_eq!(lso(&part), 2, "held at producer 7's first offset");
    assert_eq!(part.open_transactions().await, vec![(7, 2), (8, 5)]);

    let aborted = end(&part, marker(7, 0, 1, false)).await.expect("abort"); // 7
    assert_eq!(aborted.base_offset, 7);
    assert_eq!(lso(&part), 5, "producer 8 is still open");
    assert_eq!(
        part.log.aborted_transactions(0, 8),
        vec![AbortedTxn {
            producer_id: 7,
            first_offset: 2,
            last_offset: 7,
            last_stable_offset: 5,
        }]
    );
    end(&part, marker(8, 0, 1, true)).await.expect("commit"); // 8
    assert_eq!(lso(&part), 9);
    assert_eq!(
        part.log.aborted_transactions(0, 9).len(),
        1,
        "a commit is not indexed"
    );
    // A retried marker finds nothing open: written again, nothing changes.
    end(&part, marker(8, 0, 1, true))
        .await
        .expect("retried commit");
    assert_eq!(lso(&part), 10);
    assert!(part.open_transactions().await.is_empty());
}

#[tokio::test]
async fn stale_markers_and_plain_writes_inside_a_transaction_are_refused() {
    let dir = tempfile::tempdir().expect("temp dir");
    let part = leader(dir.path());
    append(&part, batch(7, 0, 1, true)).await.expect("txn");
    assert_eq!(
        append(&part, batch(7, 1, 1, false)).await,
        Err(ResponseError::InvalidTxnState)
    );
    // The coordinator of epoch 3 bumps the producer to epoch 1.
    end(&part, marker(7, 1, 3, false)).await.expect("abort");
    assert_eq!(
        end(&part, marker(7, 1, 2, true)).await,
        Err(ResponseError::TransactionCoordinatorFenced),
        "a deposed coordinator"
    );
    assert_eq!(
        end(&part, marker(7, 0, 3, true)).await,
        Err(ResponseError::InvalidProducerEpoch),
        "a fenced producer epoch"
    );
    assert_eq!(part.log.log_end_offset(), 2, "nothing refused was written");
    // The bumped producer starts its next transaction at sequence 0 of epoch 1.
    let spec = BatchSpec {
        codec: Codec::None,
        producer_id: 7,
        producer_epoch: 1,
        base_sequence: 0,
        transactional: true,
        ..BatchSpec::default()
    };
    let next = encode_batch(
        &spec,
        &[Record {
            offset: 0,
            timestamp: now_ms(),
            key: None,
            value: None,
            headers: Vec::new(),
        }],
    )
    .expect("encode");
    append(&part, bytes::Bytes::from(next))
        .await
        .expect("next transaction");
    assert_eq!(lso(&part), 2);
}

fn reopen(part: Arc<Partition>) -> Arc<Partition> {
    let dir = part.log.dir().to_path_buf();
    part.log.close().expect("close");
    drop(part);
    leader(&dir)
}

#[tokio::test]
async fn open_transactions_and_aborted_ones_survive_a_restart_with_and_without_a_snapshot() {
    for snapshot in [false, true] {
        let dir = tempfile::tempdir().expect("temp dir");
        let part = leader(dir.path());
        append(&part, batch(7, 0, 2, true)).await.expect("txn 7"); // 0-1
        end(&part, marker(7, 0, 1, false)).await.expect("abort"); // 2
        append(&part, batch(9, 0, 1, true)).await.expect("txn 9"); // 3
        if snapshot {
            let p = part.clone();
            tokio::task::spawn_blocking(move || p.snapshot_producers())
                .await
                .expect("task")
                .expect("snapshot");
        }
        append(&part, batch(-1, -1, 1, false)).await.expect("plain"); // 4
        let part = reopen(part);
        assert_eq!(
            lso(&part),
            3,
            "producer 9's transaction is open again (snapshot {snapshot})"
        );
        let entries = part.log.aborted_transactions(0, 5);
        assert_eq!(
            entries.len(),
            1,
            "the abort is indexed once (snapshot {snapshot})"
        );
        assert_eq!((entries[0].first_offset, entries[0].last_offset), (0, 2));
        end(&part, marker(9, 0, 1, false)).await.expect("abort 9");
        assert_eq!(lso(&part), 6);
        assert_eq!(part.log.aborted_transactions(0, 6).len(), 2);
    }
}

/// A follower learns transactions from what it copies, so that it holds the same last stable
/// offset and index once it leads.
#[test]
fn a_follower_tracks_transactions_from_the_batches_it_copies() {
    let leader_dir = tempfile::tempdir().expect("temp dir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    let part = leader(leader_dir.path());
    runtime.block_on(async {
        append(&part, batch(7, 0, 2, true)).await.expect("txn 7");
        end(&part, marker(7, 0, 1, false)).await.expect("abort");
        append(&part, batch(9, 0, 1, true)).await.expect("txn 9");
    });
    let copied = part.log.read(0, 1 << 20, None).expect("read").records;
    let follower_dir = tempfile::tempdir().expect("temp dir");
    let log = Log::open(follower_dir.path(), LogConfig::default(), now_ms()).expect("open");
    let state = PartitionState {
        leader_epoch: 0,
        partition_epoch: 0,
        replicas: vec![1, 2],
        isr: vec![1, 2],
    };
    let role = Role {
        is_leader: false,
        leader_epoch: 0,
    };
    let follower = Partition::new("t", 0, Uuid::nil(), 2, log, &state, role);
    assert!(follower.append_as_follower(0, &copied, 4).expect("copy"));
    assert_eq!(follower.last_stable_offset(4), 3);
    assert_eq!(
        follower.log.aborted_transactions(0, 4),
        part.log.aborted_transactions(0, 4)
    );
    // Truncated below the abort marker: the transaction is open again, and not indexed.
    assert_eq!(
        follower.truncate_as_follower(0, 2).expect("truncate"),
        Some(2)
    );
    assert!(follower.log.aborted_transactions(0, 2).is_empty());
    assert_eq!(follower.last_stable_offset(2), 0);
}

async fn txn_append(
    part: &Arc<Partition>,
    records: bytes::Bytes,
    guard: Option<u64>,
) -> Result<ProduceOutcome, ProduceError> {
    part.spawn_txn_append(records, guard)
        .done
        .await
        .expect("task")
}

#[tokio::test]
async fn a_client_batch_opens_a_transaction_only_with_a_verification_no_marker_ended() {
    let dir = tempfile::tempdir().expect("temp dir");
    let part = leader(dir.path());
    // The first batch of a transaction needs the coordinator's word: nothing is written.
    let Err(ProduceError::Unverified(guard)) = txn_append(&part, batch(7, 0, 2, true), None).await
    else {
        panic!("an unverified batch must not open a transaction");
    };
    assert_eq!(part.log.log_end_offset(), 0);
    // Verified: written, and the transaction is open.
    txn_append(&part, batch(7, 0, 2, true), Some(guard))
        .await
        .expect("verified batch"); // 0-1
    assert_eq!(part.open_transactions().await, vec![(7, 0)]);
    // Inside the open transaction, no verification.
    txn_append(&part, batch(7, 2, 1, true), None)
        .await
        .expect("next batch"); // 2
    end(&part, marker(7, 0, 1, true)).await.expect("commit"); // 3

    // A verification raced the end of its transaction: the marker voids its guard, so the late
    // batch cannot open a transaction no coordinator knows of.
    let Err(ProduceError::Unverified(stale)) = txn_append(&part, batch(7, 3, 1, true), None).await
    else {
        panic!("no transaction is open");
    };
    end(&part, marker(7, 0, 1, false)).await.expect("abort"); // 4
    let late = txn_append(&part, batch(7, 3, 1, true), Some(stale)).await;
    assert_eq!(
        late.map_err(|e| e.response_error()).unwrap_err(),
        ResponseError::InvalidTxnState
    );
    assert!(part.open_transactions().await.is_empty());
    assert_eq!(lso(&part), part.log.log_end_offset());
}
