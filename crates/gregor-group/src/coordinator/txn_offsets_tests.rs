//! TxnOffsetCommit, transaction markers, and their replay.

use std::collections::HashMap;

use bytes::Bytes;

use crate::api::*;
use crate::config::GroupConfig;
use crate::coordinator::{CommittedOffset, GroupCoordinator};
use crate::effect::{AppendToken, Effect, Record};
use crate::records::{self, GroupMetadataValue, MemberMetadata, RecordKey};

const G: &str = "g";
const T: &str = "t";

/// One entry of the partition's log as the shell would write it.
#[derive(Debug, Clone)]
enum Logged {
    Batch(Vec<Record>),
    Marker { producer_id: i64, commit: bool },
}

struct H {
    c: GroupCoordinator,
    now: i64,
    next_id: u64,
    responses: HashMap<u64, Response>,
    log: Vec<Logged>,
    /// Appends held back (when `hold`), oldest first.
    held: Vec<(AppendToken, Vec<Record>)>,
    hold: bool,
}

impl H {
    fn new() -> H {
        H::with(GroupCoordinator::new(GroupConfig::default(), 1))
    }

    fn with(c: GroupCoordinator) -> H {
        H {
            c,
            now: 1_000,
            next_id: 0,
            responses: HashMap::new(),
            log: Vec::new(),
            held: Vec::new(),
            hold: false,
        }
    }

    fn process(&mut self, effects: Vec<Effect>) {
        for e in effects {
            match e {
                Effect::Respond {
                    request_id,
                    response,
                } => {
                    assert!(self.responses.insert(request_id, response).is_none());
                }
                Effect::Append { token, records } => {
                    let first = records[0].transactional;
                    assert!(records.iter().all(|r| r.transactional == first));
                    self.held.push((token, records));
                }
            }
        }
        while !self.hold && !self.held.is_empty() {
            self.complete(Ok(()));
        }
    }

    /// Completes the oldest held append.
    fn complete(&mut self, result: Result<(), ResponseError>) {
        let (token, records) = self.held.remove(0);
        if result.is_ok() {
            self.log.push(Logged::Batch(records));
        }
        let effects = self.c.append_completed(self.now, token, result);
        self.process(effects);
    }

    fn send(&mut self, request: Request) -> u64 {
        self.next_id += 1;
        let id = self.next_id;
        let input = Input {
            request_id: id,
            context: RequestContext {
                api_version: 8,
                ..Default::default()
            },
            request,
        };
        let effects = self.c.handle(self.now, input);
        self.process(effects);
        id
    }

    fn marker(&mut self, producer_id: i64, commit: bool) {
        self.log.push(Logged::Marker {
            producer_id,
            commit,
        });
        let effects = self.c.complete_transaction(self.now, producer_id, commit);
        self.process(effects);
    }

    fn txn_commit(&mut self, req: TxnOffsetCommitRequest) -> Vec<Option<ResponseError>> {
        let id = self.send(Request::TxnOffsetCommit(req));
        match self.responses.get(&id) {
            Some(Response::TxnOffsetCommit(r)) => errors(&r.topics),
            other => panic!("unexpected {other:?}"),
        }
    }

    fn commit(&mut self, partition: i32, offset: i64) {
        let req = OffsetCommitRequest {
            group_id: G.into(),
            generation_id: -1,
            topics: topics(&[(partition, offset)]),
            ..Default::default()
        };
        let id = self.send(Request::OffsetCommit(req));
        match self.responses.get(&id) {
            Some(Response::OffsetCommit(r)) => assert_eq!(errors(&r.topics), vec![None]),
            other => panic!("unexpected {other:?}"),
        }
    }

    /// (offset, error) of one partition.
    fn fetch(&mut self, partition: i32, require_stable: bool) -> (i64, Option<ResponseError>) {
        let req = OffsetFetchRequest {
            group_id: G.into(),
            topics: Some(vec![OffsetFetchTopic {
                name: T.into(),
                partition_indexes: vec![partition],
            }]),
            require_stable,
        };
        let id = self.send(Request::OffsetFetch(req));
        match self.responses.get(&id) {
            Some(Response::OffsetFetch(r)) => {
                let p = &r.topics[0].partitions[0];
                (p.committed_offset, p.error)
            }
            other => panic!("unexpected {other:?}"),
        }
    }

    fn visible(&self, partition: i32) -> Option<i64> {
        self.c.committed_offset(G, T, partition).map(|o| o.offset)
    }
}

fn errors(topics: &[OffsetCommitResponseTopic]) -> Vec<Option<ResponseError>> {
    topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error))
        .collect()
}

fn topics(offsets: &[(i32, i64)]) -> Vec<OffsetCommitTopic> {
    vec![OffsetCommitTopic {
        name: T.into(),
        partitions: offsets
            .iter()
            .map(|(p, o)| OffsetCommitPartition {
                partition_index: *p,
                committed_offset: *o,
                committed_leader_epoch: 4,
                committed_metadata: Some("m".into()),
            })
            .collect(),
    }]
}

/// A transactional commit without consumer group metadata (pre-KIP-447 or a simple consumer).
fn txn(producer_id: i64, offsets: &[(i32, i64)]) -> TxnOffsetCommitRequest {
    TxnOffsetCommitRequest {
        transactional_id: format!("tx-{producer_id}"),
        group_id: G.into(),
        producer_id,
        producer_epoch: 3,
        generation_id: -1,
        member_id: String::new(),
        group_instance_id: None,
        topics: topics(offsets),
    }
}

/// Replays a log as the broker's loader must: plain batches with `replay`, transactional ones
/// with `replay_transactional`, control batches with `replay_marker`.
fn load(log: &[Logged]) -> GroupCoordinator {
    let mut c = GroupCoordinator::new(GroupConfig::default(), 2);
    for entry in log {
        match entry {
            Logged::Batch(records) => {
                for r in records {
                    let value = r.value.as_deref();
                    match r.transactional {
                        Some(p) => c.replay_transactional(p.producer_id, &r.key, value),
                        None => c.replay(&r.key, value),
                    }
                    .expect("replayable");
                }
            }
            Logged::Marker {
                producer_id,
                commit,
            } => c.replay_marker(*producer_id, *commit),
        }
    }
    c.complete_load(5_000);
    c
}

/// A Stable group of generation 5 with member `m1` (static instance `i1`), loaded from its record.
fn stable_group() -> H {
    let mut c = GroupCoordinator::new(GroupConfig::default(), 1);
    let value = GroupMetadataValue {
        protocol_type: "consumer".into(),
        generation: 5,
        protocol: Some("range".into()),
        leader: Some("m1".into()),
        current_state_timestamp: 0,
        members: vec![MemberMetadata {
            member_id: "m1".into(),
            group_instance_id: Some("i1".into()),
            client_id: "c".into(),
            client_host: "/h".into(),
            rebalance_timeout: 30_000,
            session_timeout: 10_000,
            subscription: Bytes::new(),
            assignment: Bytes::new(),
        }],
    };
    let key = records::encode_key(&RecordKey::GroupMetadata { group: G.into() });
    c.replay(&key, Some(&records::encode_group_metadata_value(&value)))
        .expect("replayable");
    c.complete_load(1_000);
    H::with(c)
}

#[test]
fn pending_until_commit_marker_for_a_group_without_members() {
    let mut h = H::new();
    assert_eq!(h.txn_commit(txn(7, &[(0, 20)])), vec![None]);
    // The batch is transactional for the producer.
    let Some(Logged::Batch(records)) = h.log.last() else {
        panic!("nothing appended")
    };
    let producer = records[0].transactional.expect("transactional");
    assert_eq!((producer.producer_id, producer.producer_epoch), (7, 3));
    assert_eq!(h.fetch(0, false), (-1, None));
    assert_eq!(
        h.fetch(0, true),
        (-1, Some(ResponseError::UnstableOffsetCommit))
    );
    assert_eq!(h.c.pending_transactions(), vec![7]);
    // A producer's marker for another producer changes nothing.
    h.marker(8, true);
    assert_eq!(h.visible(0), None);
    h.marker(7, true);
    assert_eq!(h.fetch(0, true), (20, None));
    assert_eq!(h.c.pending_transactions(), Vec::<i64>::new());
}

#[test]
fn abort_marker_drops_pending_offsets() {
    let mut h = H::new();
    h.commit(0, 10);
    assert_eq!(h.txn_commit(txn(7, &[(0, 20), (1, 21)])), vec![None, None]);
    h.marker(7, false);
    assert_eq!(h.fetch(0, true), (10, None));
    assert_eq!(h.fetch(1, true), (-1, None));
    // A later commit marker of the same producer finds nothing of the aborted transaction.
    h.marker(7, true);
    assert_eq!(h.visible(0), Some(10));
    assert_eq!(h.visible(1), None);
}

#[test]
fn log_order_decides_between_plain_and_transactional_commits() {
    let mut h = H::new();
    h.commit(0, 10); // before the transaction's offset: replaced by it
    h.txn_commit(txn(7, &[(0, 20), (1, 21)]));
    // A plain commit to a partition with a pending offset works and is visible at once.
    h.commit(1, 11);
    assert_eq!(h.fetch(1, false), (11, None));
    assert_eq!(
        h.fetch(1, true),
        (-1, Some(ResponseError::UnstableOffsetCommit))
    );
    h.marker(7, true);
    assert_eq!(h.visible(0), Some(20));
    // Appended after the transaction's offset, the plain commit stays.
    assert_eq!(h.visible(1), Some(11));
    assert_eq!(h.fetch(1, true), (11, None));
}

#[test]
fn fetch_all_with_require_stable_marks_unstable_partitions() {
    let mut h = H::new();
    h.commit(0, 10);
    h.commit(1, 11);
    h.txn_commit(txn(7, &[(1, 21)]));
    let fetch_all = |h: &mut H, require_stable| {
        let id = h.send(Request::OffsetFetch(OffsetFetchRequest {
            group_id: G.into(),
            topics: None,
            require_stable,
        }));
        match h.responses.get(&id) {
            Some(Response::OffsetFetch(r)) => r.topics[0]
                .partitions
                .iter()
                .map(|p| (p.partition_index, p.committed_offset, p.error))
                .collect::<Vec<_>>(),
            other => panic!("unexpected {other:?}"),
        }
    };
    let unstable = Some(ResponseError::UnstableOffsetCommit);
    assert_eq!(
        fetch_all(&mut h, true),
        vec![(0, 10, None), (1, -1, unstable)]
    );
    assert_eq!(fetch_all(&mut h, false), vec![(0, 10, None), (1, 11, None)]);
}

#[test]
fn member_and_generation_are_checked_only_when_given() {
    let mut h = stable_group();
    let with = |generation_id: i32, member: &str, instance: Option<&str>| TxnOffsetCommitRequest {
        generation_id,
        member_id: member.into(),
        group_instance_id: instance.map(str::to_string),
        ..txn(7, &[(0, 20)])
    };
    use ResponseError::*;
    assert_eq!(
        h.txn_commit(with(4, "m1", None)),
        vec![Some(IllegalGeneration)]
    );
    assert_eq!(
        h.txn_commit(with(5, "m2", None)),
        vec![Some(UnknownMemberId)]
    );
    assert_eq!(
        h.txn_commit(with(5, "m2", Some("i1"))),
        vec![Some(FencedInstanceId)]
    );
    assert_eq!(h.c.pending_transactions(), Vec::<i64>::new());
    // Without group metadata a Stable group with members accepts it (KIP-447 is optional).
    assert_eq!(h.txn_commit(with(-1, "", None)), vec![None]);
    assert_eq!(h.txn_commit(with(5, "m1", Some("i1"))), vec![None]);
    assert_eq!(h.c.pending_transactions(), vec![7]);
    // A generation for a group this coordinator does not know.
    let unknown = TxnOffsetCommitRequest {
        group_id: "other".into(),
        ..with(5, "m1", None)
    };
    assert_eq!(h.txn_commit(unknown), vec![Some(IllegalGeneration)]);
    assert!(h.c.group("other").is_none());
}

#[test]
fn an_empty_group_without_a_generation_accepts_any_member_id() {
    let mut h = H::new();
    h.commit(0, 5);
    // As Kafka: generation -1 on an Empty group skips the member check.
    let req = TxnOffsetCommitRequest {
        member_id: "gone".into(),
        ..txn(7, &[(0, 20)])
    };
    assert_eq!(h.txn_commit(req), vec![None]);
    assert_eq!(h.c.pending_transactions(), vec![7]);
}

#[test]
fn the_empty_group_id_is_invalid() {
    let mut h = H::new();
    let req = TxnOffsetCommitRequest {
        group_id: String::new(),
        ..txn(7, &[(0, 20)])
    };
    assert_eq!(h.txn_commit(req), vec![Some(ResponseError::InvalidGroupId)]);
    assert!(h.c.group("").is_none());
}

#[test]
fn too_large_metadata_fails_only_its_partition() {
    let mut h = H::new();
    let mut req = txn(7, &[(0, 20), (1, 21)]);
    req.topics[0].partitions[1].committed_metadata = Some("x".repeat(4_097));
    assert_eq!(
        h.txn_commit(req),
        vec![None, Some(ResponseError::OffsetMetadataTooLarge)]
    );
    h.marker(7, true);
    assert_eq!((h.visible(0), h.visible(1)), (Some(20), None));
}

#[test]
fn marker_while_the_offsets_are_in_flight_applies_when_they_land() {
    let mut h = H::new();
    h.hold = true;
    let id = h.send(Request::TxnOffsetCommit(txn(7, &[(0, 20)])));
    assert_eq!(
        h.fetch(0, true),
        (-1, Some(ResponseError::UnstableOffsetCommit))
    );
    h.marker(7, true);
    assert!(!h.responses.contains_key(&id));
    h.complete(Ok(()));
    assert!(h.responses.contains_key(&id));
    assert_eq!(h.fetch(0, true), (20, None));
    // The same with an abort.
    let id = h.send(Request::TxnOffsetCommit(txn(8, &[(0, 30)])));
    h.marker(8, false);
    h.complete(Ok(()));
    assert!(h.responses.contains_key(&id));
    assert_eq!(h.fetch(0, true), (20, None));
    assert_eq!(h.c.pending_transactions(), Vec::<i64>::new());
}

#[test]
fn failed_append_leaves_nothing_pending() {
    let mut h = H::new();
    h.hold = true;
    let id = h.send(Request::TxnOffsetCommit(txn(7, &[(0, 20)])));
    h.complete(Err(ResponseError::NotLeaderOrFollower));
    match h.responses.get(&id) {
        Some(Response::TxnOffsetCommit(r)) => {
            // Mapped as for OffsetCommit: the client looks the coordinator up again.
            assert_eq!(errors(&r.topics), vec![Some(ResponseError::NotCoordinator)])
        }
        other => panic!("unexpected {other:?}"),
    }
    assert_eq!(h.c.pending_transactions(), Vec::<i64>::new());
    assert_eq!(h.fetch(0, true), (-1, None));
}

#[test]
fn unload_answers_commits_in_flight() {
    let mut h = H::new();
    h.hold = true;
    let id = h.send(Request::TxnOffsetCommit(txn(7, &[(0, 20)])));
    let effects = h.c.unload();
    h.process(effects);
    match h.responses.get(&id) {
        Some(Response::TxnOffsetCommit(r)) => {
            assert_eq!(errors(&r.topics), vec![Some(ResponseError::NotCoordinator)])
        }
        other => panic!("unexpected {other:?}"),
    }
}

/// Plain and transactional commits interleaved, a commit marker, an abort marker and a producer
/// whose marker never came: a reload rebuilds the same visible and pending offsets.
#[test]
fn load_rebuilds_pending_offsets() {
    let mut h = H::new();
    h.commit(0, 10);
    h.txn_commit(txn(7, &[(0, 20)]));
    h.txn_commit(txn(8, &[(1, 30)]));
    h.txn_commit(txn(9, &[(2, 40)]));
    h.commit(1, 11); // after producer 8's offset of partition 1
    h.txn_commit(txn(10, &[(3, 50)]));
    h.marker(7, true);
    h.marker(8, true);
    h.marker(10, false);
    let expected: Vec<(i32, i64)> = vec![(0, 20), (1, 11)];
    let visible = |c: &GroupCoordinator| -> Vec<(i32, i64)> {
        c.committed_offsets(G)
            .into_iter()
            .map(|(_, p, o): (String, i32, CommittedOffset)| (p, o.offset))
            .collect()
    };
    assert_eq!(visible(&h.c), expected);
    assert_eq!(h.c.pending_transactions(), vec![9]);

    let mut loaded = H::with(load(&h.log));
    assert_eq!(visible(&loaded.c), expected);
    assert_eq!(loaded.c.pending_transactions(), vec![9]);
    assert_eq!(loaded.fetch(2, false), (-1, None));
    assert_eq!(
        loaded.fetch(2, true),
        (-1, Some(ResponseError::UnstableOffsetCommit))
    );
    // Producer 9's marker arrives after the reload.
    loaded.marker(9, true);
    assert_eq!(loaded.fetch(2, true), (40, None));
}

#[test]
fn tombstone_in_a_transactional_batch_takes_back_the_pending_offset() {
    let key = records::encode_key(&RecordKey::OffsetCommit {
        group: G.into(),
        topic: T.into(),
        partition: 0,
    });
    let mut h = H::new();
    h.txn_commit(txn(7, &[(0, 20)]));
    let Some(Logged::Batch(records)) = h.log.last().cloned() else {
        panic!("nothing appended")
    };
    let mut c = GroupCoordinator::new(GroupConfig::default(), 2);
    c.replay_transactional(7, &records[0].key, records[0].value.as_deref())
        .expect("replayable");
    assert_eq!(c.pending_transactions(), vec![7]);
    c.replay_transactional(7, &key, None).expect("replayable");
    assert_eq!(c.pending_transactions(), Vec::<i64>::new());
    c.replay_marker(7, true);
    assert!(c.committed_offset(G, T, 0).is_none());
}

#[test]
fn delete_groups_removes_pending_offsets_for_good() {
    let mut h = H::new();
    h.commit(0, 10);
    h.txn_commit(txn(7, &[(0, 20), (1, 21)]));
    let id = h.send(Request::DeleteGroups(DeleteGroupsRequest {
        group_ids: vec![G.into()],
    }));
    match h.responses.get(&id) {
        Some(Response::DeleteGroups(r)) => assert_eq!(r.results[0].error, None),
        other => panic!("unexpected {other:?}"),
    }
    // Tombstones for the visible and for the pending-only partition.
    let Some(Logged::Batch(tombstones)) = h.log.last() else {
        panic!("nothing appended")
    };
    assert_eq!(tombstones.len(), 3);
    assert_eq!(h.c.pending_transactions(), Vec::<i64>::new());
    h.marker(7, true);
    assert_eq!((h.visible(0), h.visible(1)), (None, None));
    let loaded = load(&h.log);
    assert_eq!(loaded.committed_offsets(G), Vec::new());
    assert_eq!(loaded.pending_transactions(), Vec::<i64>::new());
}

#[test]
fn expiry_keeps_pending_offsets_and_their_group() {
    let mut h = H::new();
    h.commit(0, 10);
    h.commit(1, 11);
    h.txn_commit(txn(7, &[(1, 21), (2, 22)]));
    let later = h.now + GroupConfig::default().offsets_retention_ms + 1;
    let effects = h.c.expire_offsets(later);
    h.process(effects);
    // Partition 0 expired; partition 1 has an open transaction's offset, so it stays.
    assert_eq!((h.visible(0), h.visible(1)), (None, Some(11)));
    assert!(h.c.group(G).is_some());
    h.marker(7, true);
    assert_eq!((h.visible(1), h.visible(2)), (Some(21), Some(22)));
}
