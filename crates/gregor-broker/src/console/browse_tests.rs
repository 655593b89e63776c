use std::collections::HashMap;

use bytes::Bytes;
use gregor_log::batch::{BatchHeader, ATTR_TRANSACTIONAL};
use gregor_log::records::{Header, Record};
use gregor_log::txn::AbortedTxn;

use super::*;

/// `parse` over a query written as `k=v&k=v` (no escapes needed by these tests).
fn parse_q(q: &str) -> Result<BrowseQuery, BrowseError> {
    let mut params: HashMap<String, Vec<String>> = HashMap::new();
    for pair in q.split('&').filter(|p| !p.is_empty()) {
        let (k, v) = pair.split_once('=').unwrap_or((pair, ""));
        params.entry(k.into()).or_default().push(v.into());
    }
    parse(&|name: &str| Ok(params.get(name).cloned().unwrap_or_default()))
}

fn query(filter: Option<&str>, filter_on: FilterOn) -> BrowseQuery {
    BrowseQuery {
        topic: "t".into(),
        partition: 0,
        seek: Seek::Earliest,
        limit: 3,
        filter: filter.map(Into::into),
        filter_on,
        decode: Decode::Utf8,
        read_committed: true,
    }
}

fn record(offset: i64, key: &str, value: &[u8], headers: &[(&str, &str)]) -> Record {
    Record {
        offset,
        timestamp: 1_000 + offset,
        key: Some(Bytes::copy_from_slice(key.as_bytes())),
        value: Some(Bytes::copy_from_slice(value)),
        headers: headers
            .iter()
            .map(|(k, v)| Header {
                key: Bytes::copy_from_slice(k.as_bytes()),
                value: Some(Bytes::copy_from_slice(v.as_bytes())),
            })
            .collect(),
    }
}

fn header(base_offset: i64, count: i32, transactional: bool, producer_id: i64) -> BatchHeader {
    BatchHeader {
        base_offset,
        batch_length: 100,
        partition_leader_epoch: 0,
        magic: 2,
        crc: 0,
        attributes: if transactional { ATTR_TRANSACTIONAL } else { 0 },
        last_offset_delta: count - 1,
        base_timestamp: 0,
        max_timestamp: 0,
        producer_id,
        producer_epoch: 0,
        base_sequence: 0,
        record_count: count,
    }
}

#[test]
fn a_full_query_is_parsed() {
    let q = parse_q(
        "topic=orders&partition=2&offset=17&limit=20&filter=abc&filter_on=header&decode=hex&isolation=read_uncommitted",
    )
    .expect("valid");
    assert_eq!(q.topic, "orders");
    assert_eq!(q.partition, 2);
    assert_eq!(q.seek, Seek::Offset(17));
    assert_eq!(q.limit, 20);
    assert_eq!(q.filter.as_deref(), Some("abc"));
    assert_eq!(q.filter_on, FilterOn::Header);
    assert_eq!(q.decode, Decode::Hex);
    assert!(!q.read_committed);
    let d = parse_q("topic=t&partition=0").expect("valid");
    assert_eq!(
        (
            d.seek,
            d.limit,
            d.filter,
            d.filter_on,
            d.decode,
            d.read_committed
        ),
        (
            Seek::Earliest,
            DEFAULT_LIMIT,
            None,
            FilterOn::Any,
            Decode::Utf8,
            true
        )
    );
    assert_eq!(
        parse_q("topic=t&partition=0&timestamp=5").map(|q| q.seek),
        Ok(Seek::Timestamp(5))
    );
    assert_eq!(
        parse_q("topic=t&partition=0&newest").map(|q| q.seek),
        Ok(Seek::Newest)
    );
    assert_eq!(
        parse_q("topic=t&partition=0&filter=").map(|q| q.filter),
        Ok(None)
    );
}

#[test]
fn bad_queries_are_refused_before_any_number_is_used() {
    let err = |q: &str| parse_q(q).expect_err(q).to_string();
    assert!(err("partition=0").contains("missing parameter topic"));
    assert!(err("topic=t").contains("missing parameter partition"));
    assert!(err("topic=t&topic=u&partition=0").contains("more than once"));
    assert!(err("topic=&partition=0").contains("topic"));
    assert!(err(&format!("topic={}&partition=0", "x".repeat(250))).contains("249"));
    assert!(err("topic=t&partition=-1").contains("partition"));
    assert!(err("topic=t&partition=99999999999").contains("partition"));
    assert!(err("topic=t&partition=0&limit=0").contains("1 to 500"));
    assert!(err("topic=t&partition=0&limit=501").contains("1 to 500"));
    assert!(err("topic=t&partition=0&limit=18446744073709551616").contains("limit"));
    assert!(err("topic=t&partition=0&offset=-3").contains("offset"));
    assert!(err("topic=t&partition=0&offset=abc").contains("offset"));
    assert!(err("topic=t&partition=0&timestamp=x").contains("timestamp"));
    assert!(err("topic=t&partition=0&offset=1&newest").contains("at most one"));
    assert!(err("topic=t&partition=0&offset=1&timestamp=1").contains("at most one"));
    assert!(err("topic=t&partition=0&decode=base64").contains("utf8, json or hex"));
    assert!(err("topic=t&partition=0&filter_on=body").contains("any, key, value or header"));
    assert!(err("topic=t&partition=0&isolation=x").contains("read_committed"));
    assert!(err(&format!("topic=t&partition=0&filter={}", "a".repeat(129))).contains("128"));
    let long = format!("topic=t&partition=0&decode={}", "z".repeat(10_000));
    assert!(
        err(&long).len() < 200,
        "the error quotes a bounded part of the input"
    );
}

#[test]
fn the_query_round_trips_for_the_leader() {
    let q =
        parse_q("topic=a b&partition=1&timestamp=9&filter=x&decode=json&limit=7").expect("valid");
    let again = q.to_query(&|s: &str| s.replace(' ', "%20"));
    let back = parse_q(&again.replace("%20", " ")).expect("valid");
    assert_eq!(back, q);
}

#[test]
fn start_offsets_stay_in_the_readable_range() {
    assert_eq!(start_offset(Seek::Earliest, 10, 5, 50, None), 5);
    assert_eq!(start_offset(Seek::Offset(2), 10, 5, 50, None), 5);
    assert_eq!(start_offset(Seek::Offset(20), 10, 5, 50, None), 20);
    assert_eq!(start_offset(Seek::Offset(99), 10, 5, 50, None), 50);
    assert_eq!(start_offset(Seek::Newest, 10, 5, 50, None), 40);
    assert_eq!(start_offset(Seek::Newest, 100, 5, 50, None), 5);
    assert_eq!(start_offset(Seek::Timestamp(7), 10, 5, 50, Some(33)), 33);
    assert_eq!(start_offset(Seek::Timestamp(7), 10, 5, 50, None), 50);
    assert_eq!(start_offset(Seek::Offset(i64::MAX), 10, 0, 0, None), 0);
}

#[test]
fn filters_look_where_they_are_told() {
    let r = record(0, "user-42", b"{\"total\": 7}", &[("trace", "abc123")]);
    let m = |f: &str, on| matches(&query(Some(f), on), &r);
    assert!(m("42", FilterOn::Any) && m("42", FilterOn::Key));
    assert!(!m("42", FilterOn::Value) && !m("42", FilterOn::Header));
    assert!(m("total", FilterOn::Value) && !m("total", FilterOn::Key));
    assert!(m("abc1", FilterOn::Header) && m("trace", FilterOn::Header));
    assert!(m("abc1", FilterOn::Any));
    assert!(!m("absent", FilterOn::Any));
    assert!(matches(&query(None, FilterOn::Key), &r));
    let null_key = Record {
        key: None,
        ..r.clone()
    };
    assert!(!matches(&query(Some("user"), FilterOn::Key), &null_key));
}

#[test]
fn values_are_decoded_as_asked_with_plainer_fallbacks() {
    let v = shown(b"caf\xc3\xa9", Decode::Utf8);
    assert_eq!(
        (v["encoding"].as_str(), v["text"].as_str()),
        (Some("utf8"), Some("café"))
    );
    assert_eq!(v["bytes"], 5);
    let v = shown(b"\x00\xff\x10", Decode::Utf8);
    assert_eq!(
        (v["encoding"].as_str(), v["text"].as_str()),
        (Some("hex"), Some("00ff10"))
    );
    assert!(v["note"].as_str().is_some_and(|n| n.contains("not UTF-8")));
    let v = shown(br#"{"a":[1,2]}"#, Decode::Json);
    assert_eq!(v["encoding"], "json");
    assert_eq!(v["text"], "{\n  \"a\": [\n    1,\n    2\n  ]\n}");
    let v = shown(b"plain", Decode::Json);
    assert_eq!(
        (v["encoding"].as_str(), v["text"].as_str()),
        (Some("utf8"), Some("plain"))
    );
    assert!(v["note"].as_str().is_some_and(|n| n.contains("not JSON")));
    let v = shown(b"AB", Decode::Hex);
    assert_eq!(v["text"], "4142");
    let big = "é".repeat(SHOWN_PER_FIELD);
    let v = shown(big.as_bytes(), Decode::Utf8);
    assert_eq!(v["truncated"], true);
    let text = v["text"].as_str().expect("text");
    assert!(text.len() <= SHOWN_PER_FIELD && text.chars().all(|c| c == 'é'));
    let v = shown(&vec![7u8; SHOWN_PER_FIELD], Decode::Hex);
    assert_eq!(
        (v["truncated"].as_bool(), v["text"].as_str().map(str::len)),
        (Some(true), Some(SHOWN_PER_FIELD))
    );
}

#[test]
fn aborted_batches_are_those_of_an_aborted_transactions_span() {
    let aborted = [AbortedTxn {
        producer_id: 9,
        first_offset: 10,
        last_offset: 20,
        last_stable_offset: 21,
    }];
    assert!(is_aborted(&header(12, 2, true, 9), &aborted));
    assert!(!is_aborted(&header(12, 2, true, 8), &aborted));
    assert!(!is_aborted(&header(21, 2, true, 9), &aborted));
    assert!(!is_aborted(&header(12, 2, false, 9), &aborted));
}

#[test]
fn a_page_skips_aborted_and_control_and_stops_at_its_limit() {
    let q = query(None, FilterOn::Any);
    let mut p = PageBuilder::new(&q, 1);
    // Offset 0 is before the start: the batch holding the start offset is read whole.
    p.take_batch(
        &header(0, 2, false, -1),
        &[record(0, "a", b"0", &[]), record(1, "b", b"1", &[])],
        false,
    );
    p.take_batch(
        &header(2, 2, true, 5),
        &[record(2, "c", b"2", &[]), record(3, "d", b"3", &[])],
        true,
    );
    p.control_batch(&header(4, 1, true, 5));
    assert!(!p.full());
    let batch = [
        record(5, "e", b"5", &[]),
        record(6, "f", b"6", &[]),
        record(7, "g", b"7", &[]),
    ];
    p.take_batch(&header(5, 3, false, -1), &batch, false);
    assert!(p.full() && p.stop == Some(Stop::Limit));
    assert_eq!(
        p.next_offset, 7,
        "the next page starts after the last record taken"
    );
    let range = Range {
        log_start: 0,
        high_watermark: 8,
        last_stable: 8,
        end: 8,
    };
    let v = p.finish(1, range, 300);
    let offsets: Vec<i64> = v["records"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["offset"].as_i64().unwrap_or(-1))
        .collect();
    assert_eq!(offsets, [1, 5, 6]);
    assert_eq!(v["skipped"]["aborted_records"], 2);
    assert_eq!(v["skipped"]["control_batches"], 1);
    assert_eq!(
        (v["more"].as_bool(), v["stopped_by"].as_str()),
        (Some(true), Some("limit"))
    );
}

#[test]
fn read_uncommitted_shows_aborted_records_flagged_and_filters_count_what_they_drop() {
    let mut q = query(Some("keep"), FilterOn::Value);
    q.read_committed = false;
    let mut p = PageBuilder::new(&q, 0);
    let batch = [
        record(0, "k", b"keep me", &[]),
        record(1, "k", b"drop me", &[]),
    ];
    p.take_batch(&header(0, 2, true, 3), &batch, true);
    let range = Range {
        log_start: 0,
        high_watermark: 2,
        last_stable: 0,
        end: 2,
    };
    let v = p.finish(0, range, 100);
    let records = v["records"].as_array().expect("records");
    assert_eq!(records.len(), 1);
    assert_eq!(
        (
            records[0]["aborted"].as_bool(),
            records[0]["transactional"].as_bool()
        ),
        (Some(true), Some(true))
    );
    assert_eq!(v["skipped"]["filtered_out"], 1);
    assert_eq!(
        (v["more"].as_bool(), v["next_offset"].as_i64()),
        (Some(false), Some(2))
    );
}

#[test]
fn a_page_stops_at_its_answer_budget() {
    let mut q = query(None, FilterOn::Any);
    q.limit = MAX_LIMIT;
    let mut p = PageBuilder::new(&q, 0);
    let big = vec![b'x'; SHOWN_PER_FIELD];
    let mut offset = 0;
    while !p.full() {
        p.take_batch(
            &header(offset, 1, false, -1),
            &[record(offset, "k", &big, &[])],
            false,
        );
        offset += 1;
    }
    assert_eq!(p.stop, Some(Stop::AnswerBudget));
    assert!(offset as usize <= ANSWER_BUDGET / SHOWN_PER_FIELD + 1);
}
