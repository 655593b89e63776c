//! The fetch session cache on its own: session ids and epochs, incremental requests rewritten
//! into full ones, answers cut to what changed, and KIP-227's eviction rules, with time given.

use std::path::PathBuf;

use gregor_log::FileSlice;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ForgottenTopic};
use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use std::sync::Arc;

use crate::fetch_signal::{Listeners, ReadState};

use super::*;

const LIMITS: SessionLimits = SessionLimits {
    slots: 10,
    eviction_ms: 1_000,
};

fn request(id: i32, epoch: i32, topic: &str, partitions: &[(i32, i64)]) -> FetchRequest {
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_string(topic.to_string()));
    t.partitions = partitions
        .iter()
        .map(|&(p, offset)| {
            let mut fp = FetchPartition::default();
            fp.partition = p;
            fp.fetch_offset = offset;
            fp.partition_max_bytes = 1 << 20;
            fp
        })
        .collect();
    let mut r = FetchRequest::default();
    r.session_id = id;
    r.session_epoch = epoch;
    if !t.partitions.is_empty() {
        r.topics = vec![t];
    }
    r
}

/// The partitions a (rewritten) request reads: `(partition, fetch offset)`.
fn read(r: &FetchRequest) -> Vec<(i32, i64)> {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
        .collect()
}

/// The answer to `r` as the handler gives it: per partition `(high watermark, record bytes)`.
fn reply(r: &FetchRequest, answers: &[(i64, usize)]) -> FetchReply {
    let mut response = FetchResponse::default();
    let mut records = Vec::new();
    let mut answers = answers.iter();
    for t in &r.topics {
        let mut out = FetchableTopicResponse::default();
        out.topic = t.topic.clone();
        out.topic_id = t.topic_id;
        for p in &t.partitions {
            let &(hw, bytes) = answers.next().expect("an answer per partition");
            let mut pd = PartitionData::default();
            pd.partition_index = p.partition;
            pd.high_watermark = hw;
            pd.records = Some(Default::default());
            out.partitions.push(pd);
            records.push(FileSlice {
                file: None,
                path: PathBuf::new(),
                pos: 0,
                len: bytes,
            });
        }
        response.responses.push(out);
    }
    FetchReply { response, records }
}

fn answered(reply: &FetchReply) -> Vec<(i32, i64, usize)> {
    reply
        .response
        .responses
        .iter()
        .flat_map(|t| &t.partitions)
        .zip(&reply.records)
        .map(|(p, s)| (p.partition_index, p.high_watermark, s.len))
        .collect()
}

/// Runs one full fetch creating a session of `partitions` (all at high watermark 5); its id.
fn open(
    cache: &mut FetchSessionCache,
    partitions: usize,
    follower: bool,
    limits: SessionLimits,
    now: u64,
) -> i32 {
    let parts: Vec<(i32, i64)> = (0..partitions as i32).map(|p| (p, 0)).collect();
    let mut r = request(0, INITIAL_EPOCH, "t", &parts);
    let ctx = cache
        .begin(&mut r, 12, now)
        .expect("a full fetch is never refused");
    let mut rep = reply(&r, &vec![(5, 0); partitions]);
    cache.finish(ctx, &r, &mut rep, follower, limits, now, &[]);
    rep.response.session_id
}

#[test]
fn a_sessionless_fetch_creates_no_session() {
    let mut cache = FetchSessionCache::new(7);
    for version in [4, 7, 12] {
        let mut r = request(0, FINAL_EPOCH, "t", &[(0, 3)]);
        let ctx = cache.begin(&mut r, version, 0).expect("full fetch");
        let mut rep = reply(&r, &[(5, 0)]);
        cache.finish(ctx, &r, &mut rep, false, LIMITS, 0, &[]);
        assert_eq!(rep.response.session_id, 0);
        assert_eq!(answered(&rep), vec![(0, 5, 0)]);
    }
    // Before v7 there are no session fields: whatever they hold, the fetch is sessionless.
    let mut r = request(0, INITIAL_EPOCH, "t", &[(0, 3)]);
    let ctx = cache.begin(&mut r, 6, 0).expect("full fetch");
    let mut rep = reply(&r, &[(5, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 0, &[]);
    assert_eq!(rep.response.session_id, 0);
    assert!(cache.is_empty());
}

#[test]
fn an_incremental_fetch_reads_the_whole_session_and_answers_what_changed() {
    let mut cache = FetchSessionCache::new(7);
    let id = open(&mut cache, 3, false, LIMITS, 0);
    assert!(id > 0);
    assert_eq!(cache.session_partitions(id), Some(3));
    // Epoch 1 names only partition 1's new offset; all three are read (no read settled them:
    // the handler's reads say what settles, see the tests below).
    let mut r = request(id, 1, "t", &[(1, 4)]);
    let ctx = cache.begin(&mut r, 12, 10).expect("in session");
    assert_eq!(read(&r), vec![(0, 0), (1, 4), (2, 0)]);
    // Partition 0 unchanged, partition 1 returns records, partition 2's high watermark moved.
    let mut rep = reply(&r, &[(5, 0), (5, 100), (6, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 10, &[]);
    assert_eq!(rep.response.session_id, id);
    assert_eq!(answered(&rep), vec![(1, 5, 100), (2, 6, 0)]);
    // Epoch 2: nothing changed anywhere, nothing is answered; partition 1 (which returned
    // records) is now read last.
    let mut r = request(id, 2, "t", &[]);
    let ctx = cache.begin(&mut r, 12, 20).expect("in session");
    assert_eq!(read(&r), vec![(0, 0), (2, 0), (1, 4)]);
    let mut rep = reply(&r, &[(5, 0), (6, 0), (5, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 20, &[]);
    assert!(answered(&rep).is_empty());
    assert!(rep.response.responses.is_empty());
}

#[test]
fn an_error_is_always_answered() {
    let mut cache = FetchSessionCache::new(7);
    let id = open(&mut cache, 1, false, LIMITS, 0);
    let mut r = request(id, 1, "t", &[]);
    let ctx = cache.begin(&mut r, 12, 1).expect("in session");
    let mut rep = reply(&r, &[(5, 0)]);
    rep.response.responses[0].partitions[0].error_code = ResponseError::NotLeaderOrFollower.code();
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 1, &[]);
    assert_eq!(answered(&rep), vec![(0, 5, 0)]);
}

#[test]
fn forgotten_partitions_leave_and_new_ones_join_the_session() {
    let mut cache = FetchSessionCache::new(7);
    let id = open(&mut cache, 3, false, LIMITS, 0);
    let mut r = request(id, 1, "t", &[(7, 9)]);
    let mut forget = ForgottenTopic::default();
    forget.topic = TopicName(StrBytes::from_static_str("t"));
    forget.partitions = vec![0, 2, 42];
    r.forgotten_topics_data = vec![forget];
    let ctx = cache.begin(&mut r, 12, 1).expect("in session");
    assert_eq!(read(&r), vec![(1, 0), (7, 9)]);
    assert!(r.forgotten_topics_data.is_empty());
    let mut rep = reply(&r, &[(5, 0), (1, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 1, &[]);
    // The new partition is answered (its high watermark was never sent), the old one not.
    assert_eq!(answered(&rep), vec![(7, 1, 0)]);
    assert_eq!(cache.session_partitions(id), Some(2));
}

/// A request naming topics by id (Fetch v13 and later: empty names), `(topic id, partitions)`.
fn request_by_id(id: i32, epoch: i32, topics: &[(Uuid, &[(i32, i64)])]) -> FetchRequest {
    let mut r = request(id, epoch, "", &[]);
    for &(topic_id, partitions) in topics {
        let mut t = request(0, 0, "", partitions).topics.remove(0);
        t.topic_id = topic_id;
        r.topics.push(t);
    }
    r
}

/// The topics a (rewritten) request reads, in order: `(topic id, partitions)`.
fn read_by_id(r: &FetchRequest) -> Vec<(Uuid, Vec<i32>)> {
    r.topics
        .iter()
        .map(|t| {
            (
                t.topic_id,
                t.partitions.iter().map(|p| p.partition).collect(),
            )
        })
        .collect()
}

#[test]
fn topics_named_by_id_keep_their_partitions_apart() {
    let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
    let mut cache = FetchSessionCache::new(7);
    // Both topics have partition 0 and the same (empty) name: only their ids tell them apart.
    let mut r = request_by_id(0, INITIAL_EPOCH, &[(a, &[(0, 0), (1, 0)]), (b, &[(0, 0)])]);
    let ctx = cache.begin(&mut r, 13, 0).expect("a full fetch");
    let mut rep = reply(&r, &[(5, 0), (5, 0), (5, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 0, &[]);
    let id = rep.response.session_id;
    assert!(id > 0);
    assert_eq!(cache.session_partitions(id), Some(3));
    // Epoch 1: only topic a's partition 0 returns records; it moves to the end, after b's.
    let mut r = request_by_id(id, 1, &[]);
    let ctx = cache.begin(&mut r, 13, 1).expect("in session");
    assert_eq!(read_by_id(&r), vec![(a, vec![0, 1]), (b, vec![0])]);
    let mut rep = reply(&r, &[(9, 400), (5, 0), (5, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 1, &[]);
    assert_eq!(answered(&rep), vec![(0, 9, 400)]);
    assert_eq!(rep.response.responses[0].topic_id, a);
    // Epoch 2 forgets topic b and moves a-1 on: a's partitions are read as two runs of a.
    let mut r = request_by_id(id, 2, &[(a, &[(1, 3)])]);
    let mut forget = ForgottenTopic::default();
    forget.topic_id = b;
    forget.partitions = vec![0];
    r.forgotten_topics_data = vec![forget];
    let ctx = cache.begin(&mut r, 13, 2).expect("in session");
    assert_eq!(read_by_id(&r), vec![(a, vec![1, 0])]);
    assert_eq!(read(&r), vec![(1, 3), (0, 0)]);
    let mut rep = reply(&r, &[(5, 0), (9, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 2, &[]);
    assert!(answered(&rep).is_empty());
    assert_eq!(cache.session_partitions(id), Some(2));
    // Epoch 3 names b-0 again: it joins at the end and is answered (never told to the
    // fetcher since it rejoined), while topic a's unchanged partitions are not.
    let mut r = request_by_id(id, 3, &[(b, &[(0, 7)])]);
    let ctx = cache.begin(&mut r, 13, 3).expect("in session");
    assert_eq!(read_by_id(&r), vec![(a, vec![1, 0]), (b, vec![0])]);
    assert_eq!(read(&r), vec![(1, 3), (0, 0), (0, 7)]);
    let mut rep = reply(&r, &[(5, 0), (9, 0), (5, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 3, &[]);
    assert_eq!(answered(&rep), vec![(0, 5, 0)]);
    assert_eq!(rep.response.responses[0].topic_id, b);
}

#[test]
fn an_unknown_session_or_a_wrong_epoch_is_refused() {
    let mut cache = FetchSessionCache::new(7);
    let id = open(&mut cache, 1, false, LIMITS, 0);
    let refused = |cache: &mut FetchSessionCache, id, epoch| {
        let mut r = request(id, epoch, "t", &[(0, 1)]);
        cache.begin(&mut r, 12, 1).err()
    };
    let not_found = Some(ResponseError::FetchSessionIdNotFound);
    let bad_epoch = Some(ResponseError::InvalidFetchSessionEpoch);
    assert_eq!(refused(&mut cache, id.wrapping_add(1), 1), not_found);
    assert_eq!(refused(&mut cache, 0, 1), not_found);
    assert_eq!(refused(&mut cache, id, 2), bad_epoch);
    assert_eq!(refused(&mut cache, id, -2), bad_epoch);
    // The right epoch goes through once; sent again (a retry, a pipelined duplicate) it is
    // refused.
    assert_eq!(refused(&mut cache, id, 1), None);
    assert_eq!(refused(&mut cache, id, 1), bad_epoch);
    assert_eq!(refused(&mut cache, id, 2), None);
}

#[test]
fn epochs_wrap_from_the_largest_to_one() {
    assert_eq!(next_epoch(1), 2);
    assert_eq!(next_epoch(i32::MAX), 1);
}

#[test]
fn a_fetcher_closes_or_restarts_its_session() {
    let mut cache = FetchSessionCache::new(7);
    let id = open(&mut cache, 2, false, LIMITS, 0);
    // (id, -1): closed, answered whole without a session.
    let mut r = request(id, FINAL_EPOCH, "t", &[(0, 0)]);
    let ctx = cache.begin(&mut r, 12, 1).expect("full fetch");
    assert!(matches!(ctx, SessionContext::Full { create: false }));
    assert_eq!(cache.session_partitions(id), None);
    // (id, 0) of a live session: closed, and a new one created.
    let id = open(&mut cache, 2, false, LIMITS, 2);
    let mut r = request(id, INITIAL_EPOCH, "t", &[(0, 0)]);
    let ctx = cache.begin(&mut r, 12, 3).expect("full fetch");
    let mut rep = reply(&r, &[(5, 0)]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, 3, &[]);
    let new_id = rep.response.session_id;
    assert!(new_id > 0 && new_id != id);
    assert_eq!(cache.session_partitions(id), None);
    assert_eq!(cache.session_partitions(new_id), Some(1));
    assert_eq!(cache.len(), 1);
}

#[test]
fn no_slots_no_sessions() {
    let mut cache = FetchSessionCache::new(7);
    let off = SessionLimits {
        slots: 0,
        eviction_ms: 1_000,
    };
    assert_eq!(open(&mut cache, 3, true, off, 0), 0);
    assert!(cache.is_empty());
}

#[test]
fn a_full_cache_evicts_only_as_kip_227_says() {
    let limits = SessionLimits {
        slots: 2,
        eviction_ms: 1_000,
    };
    let mut cache = FetchSessionCache::new(7);
    let small = open(&mut cache, 2, false, limits, 0);
    let big = open(&mut cache, 5, false, limits, 0);
    // Young sessions: a consumer's new session of more partitions does not replace them.
    assert_eq!(open(&mut cache, 9, false, limits, 500), 0);
    // A follower's replaces the smallest consumer session.
    let follower = open(&mut cache, 1, true, limits, 600);
    assert!(follower > 0);
    assert_eq!(cache.session_partitions(small), None);
    assert_eq!(cache.session_partitions(big), Some(5));
    // Keep the follower's session in use.
    let mut r = request(follower, 1, "t", &[]);
    let ctx = cache.begin(&mut r, 12, 1_200).expect("in session");
    let mut rep = reply(&r, &[(5, 0)]);
    cache.finish(ctx, &r, &mut rep, true, limits, 1_200, &[]);
    // At 1 200 ms the consumer session "big" was last used 1 200 ms ago: unused that long,
    // any new session replaces it (the least recently used first).
    let newer = open(&mut cache, 1, false, limits, 1_200);
    assert!(newer > 0);
    assert_eq!(cache.session_partitions(big), None);
    assert_eq!(cache.session_partitions(follower), Some(1));
    // A consumer never replaces a follower's session in use, nor a consumer session with as
    // many partitions or younger than the eviction time.
    assert_eq!(open(&mut cache, 1, false, limits, 1_300), 0);
    // Once "newer" is older than the eviction time, a consumer session with more partitions
    // replaces it.
    let mut r = request(newer, 1, "t", &[]);
    let ctx = cache.begin(&mut r, 12, 2_100).expect("in session");
    let mut rep = reply(&r, &[(5, 0)]);
    cache.finish(ctx, &r, &mut rep, false, limits, 2_100, &[]);
    let mut r = request(follower, 2, "t", &[]);
    let ctx = cache.begin(&mut r, 12, 2_150).expect("in session");
    let mut rep = reply(&r, &[(5, 0)]);
    cache.finish(ctx, &r, &mut rep, true, limits, 2_150, &[]);
    assert_eq!(open(&mut cache, 1, false, limits, 2_250), 0);
    let bigger = open(&mut cache, 4, false, limits, 2_250);
    assert!(bigger > 0);
    assert_eq!(cache.session_partitions(newer), None);
    assert_eq!(cache.session_partitions(follower), Some(1));
}

#[test]
fn session_ids_are_positive_and_distinct() {
    let mut cache = FetchSessionCache::new(0);
    let limits = SessionLimits {
        slots: 1_000,
        eviction_ms: 1_000,
    };
    let mut ids = std::collections::HashSet::new();
    for _ in 0..1_000 {
        let id = open(&mut cache, 1, false, limits, 0);
        assert!(id > 0);
        assert!(ids.insert(id), "id {id} given twice");
    }
}

#[test]
fn forgotten_topics_leave_the_topic_table() {
    let mut cache = FetchSessionCache::new(7);
    let id = open(&mut cache, 1, false, LIMITS, 0);
    // A fetcher that names a new topic and forgets the previous one, fetch after fetch.
    for epoch in 1..200 {
        let mut r = request(id, epoch, &format!("x{epoch}"), &[(0, 0)]);
        if epoch > 1 {
            let mut forget = ForgottenTopic::default();
            forget.topic = TopicName(StrBytes::from_string(format!("x{}", epoch - 1)));
            forget.partitions = vec![0];
            r.forgotten_topics_data = vec![forget];
        }
        let ctx = cache.begin(&mut r, 12, 1).expect("in session");
        let names: Vec<String> = r.topics.iter().map(|t| t.topic.0.to_string()).collect();
        assert_eq!(names, vec!["t".to_string(), format!("x{epoch}")]);
        let mut rep = reply(&r, &[(5, 0), (5, 0)]);
        cache.finish(ctx, &r, &mut rep, false, LIMITS, 1, &[]);
    }
    let s = &cache.sessions[&id];
    assert_eq!(s.partitions.len(), 2);
    assert!(s.topics.len() <= 3, "{} topic slots", s.topics.len());
    assert_eq!(s.topic_index.len(), 2);
}

/// One round of session `id` at `epoch`, naming `named`: the partitions it reads; the
/// handler answers each at high watermark 5 without records, and `settled` says whether the
/// read left anything to give, with the partitions' `listeners` (partition `p` is index `p`).
fn idle_round(
    cache: &mut FetchSessionCache,
    id: i32,
    epoch: i32,
    named: &[(i32, i64)],
    listeners: &[Arc<Listeners>],
    settled: bool,
) -> Vec<i32> {
    let mut r = request(id, epoch, "t", named);
    let ctx = cache.begin(&mut r, 12, epoch as u64).expect("in session");
    let parts: Vec<i32> = read(&r).into_iter().map(|(p, _)| p).collect();
    // As the handler does: registered with what it reads before it reads.
    if let SessionContext::Incremental { signal, keys, .. } = &ctx {
        for (k, &p) in keys.iter().zip(&parts) {
            signal.watch(*k, &listeners[p as usize]);
        }
    }
    let reads: Vec<ReadState> = parts
        .iter()
        .map(|&p| ReadState {
            settled,
            listeners: Some(listeners[p as usize].clone()),
        })
        .collect();
    let mut rep = reply(&r, &vec![(5, 0); parts.len()]);
    cache.finish(ctx, &r, &mut rep, false, LIMITS, epoch as u64, &reads);
    parts
}

#[test]
fn a_settled_session_reads_only_what_is_named_changed_or_unsettled() {
    use crate::fetch_signal::Change;
    let mut cache = FetchSessionCache::new(7);
    let listeners: Vec<Arc<Listeners>> = (0..4).map(|_| Arc::default()).collect();
    let id = open(&mut cache, 4, false, LIMITS, 0);
    // The full fetch's reads settled nothing (none given): all are read again once.
    assert_eq!(
        idle_round(&mut cache, id, 1, &[], &listeners, true),
        vec![0, 1, 2, 3]
    );
    assert!(
        listeners.iter().all(|l| l.len() == 1),
        "registered once each"
    );
    assert!(idle_round(&mut cache, id, 2, &[], &listeners, true).is_empty());
    // A change is read once; so is a named partition.
    listeners[2].announce(Change::Any);
    assert_eq!(
        idle_round(&mut cache, id, 3, &[], &listeners, true),
        vec![2]
    );
    assert_eq!(
        idle_round(&mut cache, id, 4, &[(1, 7)], &listeners, true),
        vec![1]
    );
    assert!(idle_round(&mut cache, id, 5, &[], &listeners, true).is_empty());
    // An append alone is no news for a consumer's session.
    listeners[0].announce(Change::LogEnd);
    assert!(idle_round(&mut cache, id, 6, &[], &listeners, true).is_empty());
    // A read that leaves something to give is read again until one settles it.
    listeners[3].announce(Change::Any);
    assert_eq!(
        idle_round(&mut cache, id, 7, &[], &listeners, false),
        vec![3]
    );
    assert_eq!(
        idle_round(&mut cache, id, 8, &[], &listeners, true),
        vec![3]
    );
    assert!(idle_round(&mut cache, id, 9, &[], &listeners, true).is_empty());
    // The replica behind a key changes (re-created): the session follows the new one.
    let mut moved = listeners.clone();
    moved[1] = Arc::default();
    assert_eq!(
        idle_round(&mut cache, id, 10, &[(1, 7)], &moved, true),
        vec![1]
    );
    assert_eq!(listeners[1].len(), 0, "unregistered from the old replica");
    listeners[1].announce(Change::Any);
    assert!(idle_round(&mut cache, id, 11, &[], &moved, true).is_empty());
    moved[1].announce(Change::Any);
    assert_eq!(idle_round(&mut cache, id, 12, &[], &moved, true), vec![1]);
}

#[test]
fn a_followers_session_hears_of_appends_and_speaks_for_its_fetches() {
    use crate::fetch_signal::Change;
    let mut cache = FetchSessionCache::new(7);
    let listeners: Vec<Arc<Listeners>> = (0..2).map(|_| Arc::default()).collect();
    let mut r = request(0, INITIAL_EPOCH, "t", &[(0, 0), (1, 0)]);
    r.replica_id = kafka_protocol::messages::BrokerId(3);
    let ctx = cache.begin(&mut r, 12, 0).expect("a full fetch");
    let mut rep = reply(&r, &[(5, 0), (5, 0)]);
    // Settled reads, but made before the new session registered with the partitions.
    let reads: Vec<ReadState> = listeners
        .iter()
        .map(|l| ReadState {
            settled: true,
            listeners: Some(l.clone()),
        })
        .collect();
    cache.finish(ctx, &r, &mut rep, true, LIMITS, 0, &reads);
    let id = rep.response.session_id;
    assert_eq!(
        idle_round(&mut cache, id, 1, &[], &listeners, true),
        vec![0, 1]
    );
    assert_eq!(listeners[0].last_fetch_by(3), Some(1));
    assert_eq!(listeners[0].last_fetch_by(4), None, "another replica's");
    // Its later fetches name nothing, yet say where it was as of then (time = epoch here).
    assert!(idle_round(&mut cache, id, 2, &[], &listeners, true).is_empty());
    assert_eq!(listeners[1].last_fetch_by(3), Some(2));
    // An append wakes the session and is read.
    let mut r = request(id, 3, "t", &[]);
    let ctx = cache.begin(&mut r, 12, 3).expect("in session");
    let SessionContext::Incremental { signal, .. } = &ctx else {
        panic!("an incremental fetch");
    };
    let signal = signal.clone();
    assert!(
        futures::FutureExt::now_or_never(signal.changed()).is_none(),
        "nothing changed"
    );
    listeners[0].announce(Change::LogEnd);
    assert!(
        futures::FutureExt::now_or_never(signal.changed()).is_some(),
        "woken"
    );
    let mut rep = reply(&r, &[]);
    cache.finish(ctx, &r, &mut rep, true, LIMITS, 3, &[]);
    assert_eq!(
        idle_round(&mut cache, id, 4, &[], &listeners, true),
        vec![0]
    );
    // A forgotten partition no longer speaks for the follower.
    let mut r = request(id, 5, "t", &[]);
    let mut forget = ForgottenTopic::default();
    forget.topic = TopicName(StrBytes::from_static_str("t"));
    forget.partitions = vec![1];
    r.forgotten_topics_data = vec![forget];
    let ctx = cache.begin(&mut r, 12, 5).expect("in session");
    let mut rep = reply(&r, &[]);
    cache.finish(ctx, &r, &mut rep, true, LIMITS, 5, &[]);
    assert_eq!(listeners[1].last_fetch_by(3), None);
    assert_eq!(listeners[0].last_fetch_by(3), Some(5));
    // An evicted or closed session neither.
    let mut r = request(id, FINAL_EPOCH, "t", &[]);
    cache.begin(&mut r, 12, 6).expect("closes the session");
    drop(signal);
    assert_eq!(listeners[0].last_fetch_by(3), None);
}
