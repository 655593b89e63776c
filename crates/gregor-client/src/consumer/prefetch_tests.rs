use std::collections::{BTreeMap, BTreeSet};

use super::*;

fn tp(p: i32) -> TopicPartition {
    TopicPartition::new("t", p)
}

fn cand(p: i32, leader: i32, offset: i64, buffered: usize) -> Fetchable {
    Fetchable {
        tp: tp(p),
        topic_id: uuid::Uuid::nil(),
        leader,
        leader_epoch: -1,
        offset,
        buffered,
        token: 0,
    }
}

const LIMITS: ByteLimits = ByteLimits {
    fetch_max: 100,
    partition_max: 30,
};

fn idle(_: i32) -> BrokerLoad {
    BrokerLoad::default()
}

#[test]
fn a_busy_or_backing_off_broker_holds_back_no_other() {
    let candidates = vec![cand(0, 1, 5, 0), cand(1, 2, 7, 0), cand(2, 3, 9, 0)];
    let planned = plan(
        candidates,
        |b| BrokerLoad {
            in_flight: b == 1,
            backing_off: b == 3,
            buffered: 0,
            window: 0,
        },
        LIMITS,
    );
    assert_eq!(
        planned,
        vec![PlannedFetch {
            broker: 2,
            max_bytes: 50,
            partitions: vec![cand(1, 2, 7, 0)],
        }]
    );
}

#[test]
fn partitions_are_prefetched_while_less_than_a_partition_fetch_is_buffered() {
    let candidates = vec![
        cand(0, 1, 5, 0),
        cand(1, 1, 40, 29),
        cand(2, 1, 60, 30),
        cand(3, 1, 80, 31),
    ];
    let planned = plan(candidates, idle, LIMITS);
    assert_eq!(planned.len(), 1);
    let parts: Vec<(i32, i64)> = planned[0]
        .partitions
        .iter()
        .map(|c| (c.tp.partition, c.offset))
        .collect();
    assert_eq!(parts, vec![(0, 5), (1, 40)]);
}

#[test]
fn a_broker_is_asked_for_the_room_left_under_fetch_max_bytes_at_most_half_of_it() {
    let with_buffered = |buffered| {
        plan(
            vec![cand(0, 1, 0, 0)],
            move |_| BrokerLoad {
                buffered,
                ..BrokerLoad::default()
            },
            LIMITS,
        )
    };
    // At most half: the answer to a Fetch sent with nothing buffered leaves room for the next
    // Fetch as soon as it lands.
    assert_eq!(with_buffered(0)[0].max_bytes, 50);
    assert_eq!(with_buffered(30)[0].max_bytes, 50);
    assert_eq!(with_buffered(50)[0].max_bytes, 50);
    // More than half of fetch.max.bytes buffered: wait until the application consumes, then
    // ask for a large share at once rather than one partition's worth at a time.
    assert!(with_buffered(51).is_empty());
    assert!(with_buffered(500).is_empty());
    // Half of fetch.max.bytes would be less than a partition's worth: wait for that much room.
    let narrow = ByteLimits {
        fetch_max: 100,
        partition_max: 80,
    };
    let at = |buffered| {
        plan(
            vec![cand(0, 1, 0, 0)],
            move |_| BrokerLoad {
                buffered,
                ..BrokerLoad::default()
            },
            narrow,
        )
    };
    assert_eq!(
        at(0)[0].max_bytes,
        80,
        "one partition's worth, more than half"
    );
    assert_eq!(at(20)[0].max_bytes, 80);
    assert!(at(21).is_empty());
    // max.partition.fetch.bytes above fetch.max.bytes: only an empty broker is asked.
    let wide = ByteLimits {
        fetch_max: 10,
        partition_max: 50,
    };
    let planned = plan(vec![cand(0, 1, 0, 0)], idle, wide);
    assert_eq!(planned[0].max_bytes, 10);
    let full = plan(
        vec![cand(0, 1, 0, 0)],
        |_| BrokerLoad {
            buffered: 1,
            ..BrokerLoad::default()
        },
        wide,
    );
    assert!(full.is_empty());
}

#[test]
fn a_brokers_window_takes_the_place_of_fetch_max_bytes_and_never_exceeds_it() {
    let at = |buffered, window| {
        plan(
            vec![cand(0, 1, 0, 0)],
            move |_| BrokerLoad {
                buffered,
                window,
                ..BrokerLoad::default()
            },
            ByteLimits {
                fetch_max: 100,
                partition_max: 10,
            },
        )
    };
    // A window of 40 under a fetch.max.bytes of 100: asks for half of it, and waits while
    // more than half of it is buffered.
    assert_eq!(at(0, 40)[0].max_bytes, 20);
    assert_eq!(at(20, 40)[0].max_bytes, 20);
    assert!(at(21, 40).is_empty());
    // A window past fetch.max.bytes counts as fetch.max.bytes.
    assert_eq!(at(0, 1000)[0].max_bytes, 50);
    assert!(at(51, 1000).is_empty());
    // Buffered and awaited together stay within the window.
    for buffered in 0..=40 {
        if let Some(p) = at(buffered, 40).first() {
            assert!(buffered + p.max_bytes <= 40, "{buffered} + {}", p.max_bytes);
        }
    }
}

#[test]
fn brokers_are_planned_independently_in_id_order() {
    let planned = plan(
        vec![cand(0, 2, 0, 0), cand(1, 1, 0, 0), cand(2, 2, 3, 0)],
        idle,
        LIMITS,
    );
    let shape: Vec<(i32, Vec<i32>)> = planned
        .iter()
        .map(|p| {
            (
                p.broker,
                p.partitions.iter().map(|c| c.tp.partition).collect(),
            )
        })
        .collect();
    assert_eq!(shape, vec![(1, vec![1]), (2, vec![0, 2])]);
}

#[test]
fn answers_after_a_seek_pause_reset_or_revocation_are_stale() {
    let now = Now {
        token: 7,
        paused: false,
        position: Some(10),
        buffered_end: None,
    };
    assert!(is_current(7, 10, Some(now)));
    // Revoked (no longer assigned).
    assert!(!is_current(7, 10, None));
    // Seeked, paused, reset or reassigned: a new token, even back to the same offset.
    assert!(!is_current(6, 10, Some(now)));
    assert!(!is_current(
        7,
        10,
        Some(Now {
            paused: true,
            ..now
        })
    ));
    // Asked elsewhere than where the partition's records continue.
    assert!(!is_current(7, 11, Some(now)));
    let buffered = Now {
        buffered_end: Some(25),
        ..now
    };
    assert!(is_current(7, 25, Some(buffered)));
    assert!(!is_current(7, 10, Some(buffered)));
    assert!(!is_current(
        7,
        10,
        Some(Now {
            position: None,
            ..now
        })
    ));
}

/// Positions for the buffer tests: partition -> position; partitions in `paused` are not
/// returnable.
#[derive(Default)]
struct TestPositions {
    at: BTreeMap<TopicPartition, i64>,
    paused: BTreeSet<TopicPartition>,
}

impl Positions for TestPositions {
    fn returnable(&self, tp: &TopicPartition) -> Option<i64> {
        if self.paused.contains(tp) {
            return None;
        }
        self.at.get(tp).copied()
    }

    fn advance(&mut self, tp: &TopicPartition, position: i64) {
        self.at.insert(tp.clone(), position);
    }
}

fn record(p: i32, offset: i64) -> ConsumerRecord {
    ConsumerRecord {
        topic: "t".into(),
        partition: p,
        offset,
        timestamp: 0,
        key: None,
        value: None,
        headers: vec![],
        leader_epoch: None,
    }
}

fn chunk(p: i32, broker: i32, offsets: std::ops::Range<i64>, next: i64, bytes: usize) -> Chunk {
    Chunk {
        tp: tp(p),
        broker,
        records: offsets.map(|o| record(p, o)).collect(),
        undecoded: None,
        next_offset: next,
        bytes,
    }
}

fn offsets(records: &[ConsumerRecord]) -> Vec<(i32, i64)> {
    records.iter().map(|r| (r.partition, r.offset)).collect()
}

#[test]
fn the_buffer_counts_bytes_per_partition_and_broker_until_a_chunk_is_used_up() {
    let mut b = Buffer::default();
    b.push(chunk(0, 1, 0..3, 3, 30));
    b.push(chunk(1, 2, 10..12, 12, 20));
    b.push(chunk(0, 1, 3..5, 5, 40));
    assert_eq!(b.bytes(), 90);
    assert_eq!(b.partition_bytes(&tp(0)), 70);
    assert_eq!(b.broker_bytes(1), 70);
    assert_eq!(b.broker_bytes(2), 20);
    assert_eq!(b.end(&tp(0)), Some(5));
    assert_eq!(b.end(&tp(1)), Some(12));

    let mut pos = TestPositions::default();
    pos.at.insert(tp(0), 0);
    pos.at.insert(tp(1), 10);
    let first = b.take(2, &mut pos);
    assert_eq!(offsets(&first), vec![(0, 0), (0, 1)]);
    assert_eq!(pos.at[&tp(0)], 2);
    // The chunk is not used up: its bytes still count.
    assert_eq!(b.bytes(), 90);
    let second = b.take(3, &mut pos);
    assert_eq!(offsets(&second), vec![(0, 2), (1, 10), (1, 11)]);
    assert_eq!(b.bytes(), 40);
    assert_eq!(b.broker_bytes(2), 0);
    assert_eq!(b.end(&tp(1)), None);
    assert_eq!(b.partition_bytes(&tp(0)), 40);
    let rest = b.take(10, &mut pos);
    assert_eq!(offsets(&rest), vec![(0, 3), (0, 4)]);
    assert!(b.is_empty());
    assert_eq!((b.bytes(), b.broker_bytes(1), b.end(&tp(0))), (0, 0, None));
    assert_eq!(pos.at[&tp(0)], 5);
}

#[test]
fn dropped_and_unreturnable_partitions_release_their_bytes_and_records() {
    let mut b = Buffer::default();
    b.push(chunk(0, 1, 0..3, 3, 30));
    b.push(chunk(1, 1, 0..3, 3, 30));
    b.push(chunk(2, 1, 0..3, 3, 30));
    b.drop_partition(&tp(1));
    assert_eq!((b.bytes(), b.broker_bytes(1)), (60, 60));
    assert_eq!(b.end(&tp(1)), None);
    let mut pos = TestPositions::default();
    pos.at.insert(tp(0), 0);
    pos.at.insert(tp(2), 0);
    pos.paused.insert(tp(0));
    let got = b.take(10, &mut pos);
    assert_eq!(offsets(&got), vec![(2, 0), (2, 1), (2, 2)]);
    assert!(b.is_empty());
    assert_eq!(b.bytes(), 0);
    assert_eq!(pos.at[&tp(0)], 0, "a paused partition does not move");
    b.push(chunk(0, 1, 0..1, 1, 5));
    b.clear();
    assert_eq!((b.bytes(), b.end(&tp(0))), (0, None));
}

#[test]
fn records_before_the_position_are_skipped_and_control_records_move_it() {
    let mut b = Buffer::default();
    b.push(chunk(0, 1, 0..4, 4, 10));
    // Only control records (or records before the position): no records, the position moves.
    b.push(chunk(0, 1, 0..0, 9, 10));
    let mut pos = TestPositions::default();
    pos.at.insert(tp(0), 2);
    let got = b.take(10, &mut pos);
    assert_eq!(offsets(&got), vec![(0, 2), (0, 3)]);
    assert_eq!(pos.at[&tp(0)], 9);
    assert!(b.is_empty());
}

#[test]
fn undecoded_chunks_are_never_taken_or_skipped_and_decode_failures_are_reported() {
    let mut b = Buffer::default();
    let mut raw = chunk(0, 1, 0..0, 3, 30);
    raw.undecoded = Some((Bytes::from_static(b"batches"), 0));
    b.push(raw);
    b.push(chunk(1, 1, 10..12, 12, 20));
    let mut bad = chunk(2, 1, 0..0, 9, 10);
    bad.undecoded = Some((Bytes::from_static(b"corrupt"), 4));
    b.push(bad);
    assert!(b.has_undecoded());
    let mut pos = TestPositions::default();
    for p in 0..3 {
        pos.at.insert(tp(p), if p == 1 { 10 } else { 0 });
    }
    // The oldest chunk is not decoded yet: nothing is taken, no position moves past it.
    assert!(b.take(10, &mut pos).is_empty());
    assert_eq!(pos.at[&tp(0)], 0);

    let mut seen = Vec::new();
    let failed = b.decode_pending(usize::MAX, |tp, batches, asked, _spare| {
        seen.push((tp.partition, batches.clone(), asked));
        if &batches[..] == b"corrupt" {
            Err(format!("{tp}: bad"))
        } else {
            Ok((0..3).map(|o| record(tp.partition, o)).collect())
        }
    });
    assert_eq!(failed, vec![(tp(2), "t-2: bad".to_string())]);
    assert_eq!(seen.len(), 2);
    assert_eq!((seen[1].0, seen[1].2), (2, 4));
    assert!(!b.has_undecoded());
    // Decoded once: a second pass does nothing.
    assert!(b
        .decode_pending(usize::MAX, |_, _, _, _| Err::<Vec<ConsumerRecord>, _>(
            "again"
        ))
        .is_empty());
    b.drop_partition(&tp(2));
    let all = b.take(10, &mut pos);
    assert_eq!(
        offsets(&all),
        vec![(0, 0), (0, 1), (0, 2), (1, 10), (1, 11)]
    );
    assert!(b.is_empty());
}

#[test]
fn a_partition_is_caught_up_only_at_or_past_a_known_high_watermark() {
    let c = cand(0, 1, 50, 0);
    assert!(!caught_up(&c, None));
    assert!(!caught_up(&c, Some(51)));
    assert!(caught_up(&c, Some(50)));
    assert!(caught_up(&c, Some(40)));
}

#[test]
fn records_out_of_order_or_before_the_position_are_taken_one_by_one_as_before() {
    // The bulk move applies only to records in order from the position; anything else goes
    // record by record, with the same result as always.
    let mut b = Buffer::default();
    let mut c = chunk(0, 1, 0..0, 10, 10);
    c.records = [5, 3, 6, 6, 8].into_iter().map(|o| record(0, o)).collect();
    b.push(c);
    b.push(chunk(1, 1, 20..24, 24, 10));
    let mut pos = TestPositions::default();
    pos.at.insert(tp(0), 4);
    pos.at.insert(tp(1), 21);
    let got = b.take(10, &mut pos);
    assert_eq!(
        offsets(&got),
        vec![(0, 5), (0, 6), (0, 8), (1, 21), (1, 22), (1, 23)]
    );
    assert_eq!((pos.at[&tp(0)], pos.at[&tp(1)]), (10, 24));
    // In order, taken in parts across polls.
    b.push(chunk(2, 1, 0..7, 7, 10));
    pos.at.insert(tp(2), 0);
    assert_eq!(offsets(&b.take(3, &mut pos)), vec![(2, 0), (2, 1), (2, 2)]);
    assert_eq!(pos.at[&tp(2)], 3);
    assert_eq!(offsets(&b.take(3, &mut pos)), vec![(2, 3), (2, 4), (2, 5)]);
    assert_eq!(offsets(&b.take(3, &mut pos)), vec![(2, 6)]);
    assert_eq!(pos.at[&tp(2)], 7);
    assert!(b.is_empty());
}

#[test]
fn a_used_up_chunks_record_vector_is_handed_to_the_next_decode() {
    let mut b = Buffer::default();
    let mut c = chunk(0, 1, 0..0, 100, 10);
    c.records = (0..100).map(|o| record(0, o)).collect();
    let capacity = c.records.capacity();
    b.push(c);
    let mut pos = TestPositions::default();
    pos.at.insert(tp(0), 0);
    assert_eq!(b.take(1000, &mut pos).len(), 100);
    let mut raw = chunk(0, 1, 0..0, 103, 10);
    raw.undecoded = Some((Bytes::from_static(b"batches"), 100));
    b.push(raw);
    let mut spare_capacity = None;
    let failed = b.decode_pending(usize::MAX, |tp, _, asked, mut spare| {
        assert!(spare.is_empty());
        spare_capacity = Some(spare.capacity());
        spare.extend((asked..asked + 3).map(|o| record(tp.partition, o)));
        Ok::<_, String>(spare)
    });
    assert!(failed.is_empty());
    assert!(spare_capacity.is_some_and(|c| c >= capacity.min(100)));
    assert_eq!(
        offsets(&b.take(10, &mut pos)),
        vec![(0, 100), (0, 101), (0, 102)]
    );
    // Without a used-up chunk, a fresh (empty) vector.
    let mut fresh = Buffer::default();
    let mut raw = chunk(0, 1, 0..0, 3, 10);
    raw.undecoded = Some((Bytes::from_static(b"batches"), 0));
    fresh.push(raw);
    fresh.decode_pending(usize::MAX, |_, _, _, spare| {
        assert_eq!(spare.capacity(), 0);
        Ok::<_, String>(spare)
    });
}

#[test]
fn leaders_skip_planning_only_when_no_leader_may_get_a_fetch() {
    let l = Leaders::of([Some(3), Some(1), Some(3), Some(2)]);
    assert_eq!(l.brokers, vec![1, 2, 3]);
    assert!(!l.leaderless);
    let busy = |b: i32| BrokerLoad {
        in_flight: b != 2,
        backing_off: b == 2,
        buffered: 0,
        window: 0,
    };
    assert!(l.none_fetchable(busy, LIMITS));
    // One broker with room: plan.
    let one_free = |b: i32| BrokerLoad {
        in_flight: b == 1,
        backing_off: false,
        buffered: if b == 3 { 51 } else { 0 },
        window: 0,
    };
    assert!(!l.none_fetchable(one_free, LIMITS));
    // More than half of fetch.max.bytes buffered everywhere: nothing to plan.
    let full = |_| BrokerLoad {
        in_flight: false,
        backing_off: false,
        buffered: 51,
        window: 0,
    };
    assert!(l.none_fetchable(full, LIMITS));
    // A partition without a leader: always plan (it asks for metadata).
    let partial = Leaders::of([Some(1), None]);
    assert!(partial.leaderless);
    assert!(!partial.none_fetchable(busy, LIMITS));
    // No partition assigned: nothing to plan.
    assert!(Leaders::of([]).none_fetchable(idle, LIMITS));
}

#[test]
fn no_fetchable_leader_means_an_empty_plan() {
    // Whatever the candidates, `plan` sends nothing when `none_fetchable` holds.
    let candidates = || vec![cand(0, 1, 5, 0), cand(1, 2, 7, 0), cand(2, 1, 9, 10)];
    let l = Leaders::of(candidates().iter().map(|c| Some(c.leader)));
    for (in_flight, buffered) in [(true, 0), (false, 51), (false, 80), (false, 0), (false, 50)] {
        let load = |_| BrokerLoad {
            in_flight,
            backing_off: false,
            buffered,
            window: 0,
        };
        let planned = plan(candidates(), load, LIMITS);
        assert_eq!(l.none_fetchable(load, LIMITS), planned.is_empty());
    }
}

/// An undecoded chunk of partition `p` whose decoding yields `n` records from the offset asked.
fn raw_chunk(p: i32, asked: i64, n: i64) -> Chunk {
    let mut c = chunk(p, 1, 0..0, asked + n, 10);
    c.undecoded = Some((Bytes::from(n.to_string()), asked));
    c
}

fn decode_count(
    tp: &TopicPartition,
    batches: Bytes,
    asked: i64,
) -> Result<Vec<ConsumerRecord>, String> {
    let n: i64 = std::str::from_utf8(&batches).unwrap().parse().unwrap();
    Ok((asked..asked + n)
        .map(|o| record(tp.partition, o))
        .collect())
}

#[test]
fn chunks_are_decoded_only_as_far_as_the_next_take_returns() {
    let mut b = Buffer::default();
    for p in 0..4 {
        b.push(raw_chunk(p, 0, 3));
    }
    let mut pos = TestPositions::default();
    for p in 0..4 {
        pos.at.insert(tp(p), 0);
    }
    let decoded = std::cell::RefCell::new(Vec::new());
    let decode = |tp: &TopicPartition, batches: Bytes, asked: i64, _spare| {
        decoded.borrow_mut().push(tp.partition);
        decode_count(tp, batches, asked)
    };
    // Four records wanted: the first two chunks (3 + 3) are decoded, the others wait.
    assert!(b.needs_decoding(4));
    assert!(b.decode_pending(4, decode).is_empty());
    assert_eq!(*decoded.borrow(), vec![0, 1]);
    assert!(b.has_undecoded() && !b.needs_decoding(4));
    assert_eq!(b.take(4, &mut pos).len(), 4);
    // Two records left decoded ahead: the next chunk is decoded for the next four.
    assert!(b.needs_decoding(4));
    assert!(b.decode_pending(4, decode).is_empty());
    assert_eq!(*decoded.borrow(), vec![0, 1, 2]);
    assert_eq!(
        offsets(&b.take(4, &mut pos)),
        vec![(1, 1), (1, 2), (2, 0), (2, 1)]
    );
    // A take stops at an undecoded chunk rather than pass it.
    assert_eq!(offsets(&b.take(4, &mut pos)), vec![(2, 2)]);
    assert!(b.decode_pending(4, decode).is_empty());
    assert_eq!(*decoded.borrow(), vec![0, 1, 2, 3]);
    assert!(!b.has_undecoded() && !b.needs_decoding(4));
    assert_eq!(b.take(4, &mut pos).len(), 3);
    assert!(b.is_empty() && b.bytes() == 0);
}

#[test]
fn dropping_or_skipping_undecoded_chunks_keeps_the_count_of_undecoded_ones() {
    let mut b = Buffer::default();
    b.push(raw_chunk(0, 0, 2));
    b.push(raw_chunk(1, 0, 2));
    b.push(raw_chunk(0, 2, 2));
    b.drop_partition(&tp(0));
    assert!(b.has_undecoded());
    let mut pos = TestPositions::default();
    pos.at.insert(tp(1), 0);
    // Paused after the answer landed: its decoded records are skipped and nothing is left.
    pos.paused.insert(tp(1));
    assert!(b
        .decode_pending(1, |tp, batches, asked, _| decode_count(tp, batches, asked))
        .is_empty());
    assert!(!b.has_undecoded());
    assert!(b.take(10, &mut pos).is_empty());
    assert!(b.is_empty() && b.bytes() == 0);
}
