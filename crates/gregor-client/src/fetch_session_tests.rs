//! The fetcher's session bookkeeping against the broker's answers.

use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::*;

fn full(partitions: &[(i32, i64)]) -> FetchRequest {
    let mut t = FetchTopic::default();
    t.topic = TopicName(StrBytes::from_static_str("t"));
    t.partitions = partitions
        .iter()
        .map(|&(p, o)| {
            let mut fp = FetchPartition::default();
            fp.partition = p;
            fp.fetch_offset = o;
            fp
        })
        .collect();
    let mut r = FetchRequest::default();
    r.topics = vec![t];
    r
}

fn named(r: &FetchRequest) -> Vec<(i32, i64)> {
    r.topics
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| (p.partition, p.fetch_offset)))
        .collect()
}

fn forgotten(r: &FetchRequest) -> Vec<i32> {
    r.forgotten_topics_data
        .iter()
        .flat_map(|f| f.partitions.clone())
        .collect()
}

fn answer(session_id: i32, error_code: i16) -> FetchResponse {
    let mut resp = FetchResponse::default();
    resp.session_id = session_id;
    resp.error_code = error_code;
    resp
}

#[test]
fn full_then_only_what_changed() {
    let mut s = FetchSession::new();
    let mut r = full(&[(0, 0), (1, 0), (2, 0)]);
    s.prepare(&mut r, 12);
    assert_eq!((r.session_id, r.session_epoch), (0, 0));
    assert_eq!(named(&r).len(), 3);
    s.on_response(&answer(77, 0));
    assert_eq!(s.id(), 77);
    // Partition 1 moved on, partition 2 is no longer wanted, partition 3 is new.
    let mut r = full(&[(0, 0), (1, 5), (3, 0)]);
    s.prepare(&mut r, 12);
    assert_eq!((r.session_id, r.session_epoch), (77, 1));
    assert_eq!(named(&r), vec![(1, 5), (3, 0)]);
    assert_eq!(forgotten(&r), vec![2]);
    s.on_response(&answer(77, 0));
    // Nothing changed: an empty incremental fetch at the next epoch.
    let mut r = full(&[(0, 0), (1, 5), (3, 0)]);
    s.prepare(&mut r, 12);
    assert_eq!((r.session_id, r.session_epoch), (77, 2));
    assert!(named(&r).is_empty() && forgotten(&r).is_empty());
}

#[test]
fn a_refused_or_failed_session_starts_over_with_a_full_fetch() {
    for error in [70, 71] {
        let mut s = FetchSession::new();
        let mut r = full(&[(0, 0), (1, 0)]);
        s.prepare(&mut r, 12);
        s.on_response(&answer(9, 0));
        let mut r = full(&[(0, 3), (1, 0)]);
        s.prepare(&mut r, 12);
        s.on_response(&answer(0, error));
        let mut r = full(&[(0, 3), (1, 0)]);
        s.prepare(&mut r, 12);
        // Closes session 9 and asks for a new one, naming every partition.
        assert_eq!((r.session_id, r.session_epoch), (9, 0), "error {error}");
        assert_eq!(named(&r), vec![(0, 3), (1, 0)]);
    }
    let mut s = FetchSession::new();
    let mut r = full(&[(0, 0)]);
    s.prepare(&mut r, 12);
    s.on_response(&answer(9, 0));
    let mut r = full(&[(0, 1)]);
    s.prepare(&mut r, 12);
    s.on_failure();
    let mut r = full(&[(0, 1)]);
    s.prepare(&mut r, 12);
    assert_eq!((r.session_id, r.session_epoch), (9, 0));
}

#[test]
fn no_room_for_a_session_means_full_fetches() {
    let mut s = FetchSession::new();
    for _ in 0..3 {
        let mut r = full(&[(0, 0), (1, 0)]);
        s.prepare(&mut r, 12);
        assert_eq!((r.session_id, r.session_epoch), (0, 0));
        assert_eq!(named(&r).len(), 2);
        s.on_response(&answer(0, 0));
    }
}

#[test]
fn versions_before_7_have_no_sessions() {
    let mut s = FetchSession::new();
    let mut r = full(&[(0, 0)]);
    s.prepare(&mut r, 6);
    assert_eq!((r.session_id, r.session_epoch), (0, -1));
    s.on_response(&answer(0, 0));
    let mut r = full(&[(0, 0)]);
    s.prepare(&mut r, 6);
    assert_eq!(named(&r).len(), 1);
}

fn topics(topics: &[(&'static str, &[(i32, i64)])]) -> FetchRequest {
    let mut r = FetchRequest::default();
    r.topics = topics
        .iter()
        .map(|(name, partitions)| {
            let mut t = full(partitions).topics.remove(0);
            t.topic = TopicName(StrBytes::from_static_str(name));
            t
        })
        .collect();
    r
}

fn named_by_topic(r: &FetchRequest) -> Vec<(String, i32, i64)> {
    r.topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.topic.0.to_string(), p.partition, p.fetch_offset))
        })
        .collect()
}

#[test]
fn several_topics_name_what_changed_and_forget_in_topic_order() {
    let mut s = FetchSession::new();
    let mut r = topics(&[("b", &[(0, 0), (1, 0), (2, 0)]), ("a", &[(0, 0), (1, 0)])]);
    s.prepare(&mut r, 12);
    assert_eq!(named_by_topic(&r).len(), 5);
    s.on_response(&answer(5, 0));
    // a-1 moved on, b-2 did not, c-0 is new; a-0, b-0 and b-1 are no longer wanted.
    let mut r = topics(&[("b", &[(2, 0)]), ("a", &[(1, 7)]), ("c", &[(0, 0)])]);
    s.prepare(&mut r, 12);
    assert_eq!((r.session_id, r.session_epoch), (5, 1));
    assert_eq!(
        named_by_topic(&r),
        vec![("a".to_string(), 1, 7), ("c".to_string(), 0, 0)]
    );
    let forgotten: Vec<(String, Vec<i32>)> = r
        .forgotten_topics_data
        .iter()
        .map(|f| (f.topic.0.to_string(), f.partitions.clone()))
        .collect();
    assert_eq!(
        forgotten,
        vec![("a".to_string(), vec![0]), ("b".to_string(), vec![0, 1])]
    );
    s.on_response(&answer(5, 0));
    // A whole topic no longer wanted is forgotten whole.
    let mut r = topics(&[("b", &[(2, 0)]), ("a", &[(1, 7)])]);
    s.prepare(&mut r, 12);
    assert!(named_by_topic(&r).is_empty());
    assert_eq!(r.forgotten_topics_data.len(), 1);
    assert_eq!(r.forgotten_topics_data[0].topic.0.as_str(), "c");
    assert_eq!(r.forgotten_topics_data[0].partitions, vec![0]);
}

#[test]
fn a_round_naming_only_what_may_have_moved_keeps_the_rest_of_the_session() {
    let mut s = FetchSession::new();
    let mut r = full(&[(0, 0)]);
    assert!(!s.prepare_changed(&mut r, 12), "no session yet");
    let mut r = full(&[(0, 0), (1, 0), (2, 0)]);
    s.prepare(&mut r, 12);
    s.on_response(&answer(5, 0));
    // Nothing moved: an empty incremental fetch.
    let mut r = FetchRequest::default();
    assert!(s.prepare_changed(&mut r, 12));
    assert_eq!((r.session_id, r.session_epoch), (5, 1));
    assert!(named(&r).is_empty() && forgotten(&r).is_empty());
    s.on_response(&answer(5, 0));
    // Partitions 0 and 1 were answered; only 1 moved: only 1 is named, none forgotten.
    let mut r = full(&[(0, 0), (1, 4)]);
    assert!(s.prepare_changed(&mut r, 12));
    assert_eq!((r.session_id, r.session_epoch), (5, 2));
    assert_eq!(named(&r), vec![(1, 4)]);
    assert!(forgotten(&r).is_empty());
    s.on_response(&answer(5, 0));
    // The session holds all three, partition 1 at 4: a full list shows no change.
    let mut r = full(&[(0, 0), (1, 4), (2, 0)]);
    s.prepare(&mut r, 12);
    assert_eq!((r.session_id, r.session_epoch), (5, 3));
    assert!(named(&r).is_empty() && forgotten(&r).is_empty());
    // After a failure the next fetch is full.
    s.on_failure();
    let mut r = FetchRequest::default();
    assert!(!s.prepare_changed(&mut r, 12));
}
