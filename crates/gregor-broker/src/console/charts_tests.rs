use super::*;

fn reading(bytes_in: f64) -> Reading {
    Reading {
        bytes_in: vec![("orders".into(), bytes_in)],
        ..Reading::default()
    }
}

fn series<'a>(v: &'a Value, chart: &str, name: &str) -> Option<&'a Vec<Value>> {
    let c = v["charts"].as_array()?.iter().find(|c| c["id"] == chart)?;
    let s = c["series"].as_array()?.iter().find(|s| s["name"] == name)?;
    s["points"].as_array()
}

fn all(_: Subject, _: &str) -> bool {
    true
}

#[test]
fn samples_are_taken_every_interval_and_counters_become_rates() {
    let mut s = Sampler::default();
    assert!(s.due(0));
    assert!(s.record(1_000, &reading(0.0)));
    assert!(!s.due(1_000 + SAMPLE_EVERY_MS - 1));
    assert!(!s.record(5_000, &reading(999.0)), "not due: ignored");
    assert!(s.record(11_000, &reading(20_000.0)));
    assert!(s.record(21_000, &reading(20_000.0)));
    let v = s.to_json(1, 21_000, &all);
    // The first sample only sets the base: 20,000 bytes in 10 s, then none.
    let points = series(&v, "bytes_in", "orders").expect("series");
    assert_eq!(points.len(), 2);
    assert_eq!(points[0], json!([11_000.0, 2_000.0]));
    assert_eq!(points[1], json!([21_000.0, 0.0]));
    assert_eq!(v["last_sample_ms"], 21_000);
}

#[test]
fn a_late_sample_divides_by_the_time_that_passed_and_a_reset_gives_no_point() {
    let mut s = Sampler::default();
    s.record(0, &reading(0.0));
    s.record(40_000, &reading(4_000.0));
    s.record(50_000, &reading(100.0)); // the counter went back: no rate
    s.record(60_000, &reading(1_100.0));
    let v = s.to_json(1, 60_000, &all);
    let points = series(&v, "bytes_in", "orders").expect("series");
    assert_eq!(
        points,
        &vec![json!([40_000.0, 100.0]), json!([60_000.0, 100.0])]
    );
}

#[test]
fn a_counter_that_appears_after_the_first_sample_counts_from_zero() {
    let mut s = Sampler::default();
    s.record(0, &Reading::default());
    s.record(10_000, &reading(5_000.0));
    let v = s.to_json(1, 10_000, &all);
    assert_eq!(
        series(&v, "bytes_in", "orders").expect("series"),
        &vec![json!([10_000.0, 500.0])]
    );
}

#[test]
fn latency_is_the_mean_over_the_interval_and_isr_changes_are_counted() {
    let mut s = Sampler::default();
    let r = |secs: f64, count: f64, shrinks: f64| Reading {
        request_seconds: vec![("Produce".into(), secs, count)],
        isr_shrinks: Some(shrinks),
        isr_expands: Some(0.0),
        ..Reading::default()
    };
    s.record(0, &r(1.0, 100.0, 2.0));
    s.record(10_000, &r(1.5, 200.0, 5.0));
    s.record(20_000, &r(1.5, 200.0, 5.0)); // no request: no latency point
    let v = s.to_json(1, 20_000, &all);
    let latency = series(&v, "request_latency", "Produce").expect("latency");
    assert_eq!(latency, &vec![json!([10_000.0, 5.0])]);
    let shrinks = series(&v, "isr_changes", "shrinks").expect("shrinks");
    assert_eq!(
        shrinks,
        &vec![json!([10_000.0, 3.0]), json!([20_000.0, 0.0])]
    );
}

#[test]
fn rings_keep_one_hour_and_series_are_capped() {
    let mut s = Sampler::default();
    let many = |lag: f64| Reading {
        group_lag: (0..MAX_SERIES + 7)
            .map(|i| (format!("g{i:03}"), lag))
            .collect(),
        ..Reading::default()
    };
    let mut now = 0;
    for i in 0..POINTS + 20 {
        s.record(now, &many(i as f64));
        now += SAMPLE_EVERY_MS;
    }
    let v = s.to_json(1, now, &all);
    let lag = &v["charts"][2];
    assert_eq!(lag["id"], "group_lag");
    assert_eq!(lag["series"].as_array().expect("series").len(), MAX_SERIES);
    assert_eq!(lag["refused"], 7);
    let points = series(&v, "group_lag", "g000").expect("g000");
    assert_eq!(points.len(), POINTS);
    assert_eq!(points[POINTS - 1][1], json!((POINTS + 19) as f64));
    assert!(series(&v, "group_lag", &format!("g{:03}", MAX_SERIES)).is_none());
}

#[test]
fn in_a_chart_that_refused_series_a_newcomer_starts_at_its_second_sample() {
    let mut s = Sampler::default();
    let topics = |names: &[String], v: f64| Reading {
        bytes_in: names.iter().map(|n| (n.clone(), v)).collect(),
        ..Reading::default()
    };
    let first: Vec<String> = (0..MAX_SERIES).map(|i| format!("t{i:03}")).collect();
    let mut all_topics = first.clone();
    all_topics.push("late".into());
    s.record(0, &topics(&all_topics, 0.0));
    // The first ones stop being read (deleted) and age out; "late" has counted meanwhile.
    let late = |v: f64| Reading {
        bytes_in: vec![("late".into(), v)],
        ..Reading::default()
    };
    let mut now = SAMPLE_EVERY_MS;
    while now <= WINDOW_MS + SAMPLE_EVERY_MS {
        s.record(now, &late(1e9));
        now += SAMPLE_EVERY_MS;
    }
    s.record(now, &late(1e9 + 10_000.0));
    let v = s.to_json(1, now, &all);
    let points = series(&v, "bytes_in", "late").expect("admitted once there was room");
    assert!(
        points.iter().all(|p| p[1].as_f64() <= Some(1_000.0)),
        "{points:?}"
    );
    assert_eq!(points.last(), Some(&json!([now as f64, 1_000.0])));
}

#[test]
fn series_no_longer_read_age_out_after_the_window() {
    let mut s = Sampler::default();
    let groups = |names: &[&str]| Reading {
        group_lag: names.iter().map(|n| (n.to_string(), 1.0)).collect(),
        ..Reading::default()
    };
    s.record(0, &groups(&["gone"]));
    let mut now = SAMPLE_EVERY_MS;
    while now <= WINDOW_MS {
        s.record(now, &groups(&["kept"]));
        now += SAMPLE_EVERY_MS;
    }
    // Within the hour its point is still shown; then it is dropped, freeing its place.
    assert!(series(&s.to_json(1, now, &all), "group_lag", "gone").is_some());
    s.record(now, &groups(&["kept"]));
    assert!(series(&s.to_json(1, now, &all), "group_lag", "gone").is_none());
    assert!(series(&s.to_json(1, now, &all), "group_lag", "kept").is_some());
    assert_eq!(s.charts[&Chart::GroupLag].series.len(), 1);
}

#[test]
fn a_viewer_sees_only_the_series_it_may() {
    let mut s = Sampler::default();
    let r = Reading {
        bytes_in: vec![("public".into(), 1.0), ("secret".into(), 1.0)],
        group_lag: vec![("g".into(), 3.0)],
        isr_shrinks: Some(0.0),
        ..Reading::default()
    };
    s.record(0, &r);
    s.record(10_000, &r);
    let topics_only = |subject: Subject, name: &str| subject == Subject::Topic && name == "public";
    let v = s.to_json(1, 10_000, &topics_only);
    assert!(series(&v, "bytes_in", "public").is_some());
    assert!(series(&v, "bytes_in", "secret").is_none());
    assert!(series(&v, "group_lag", "g").is_none());
    assert!(series(&v, "isr_changes", "shrinks").is_none());
}

#[test]
fn time_lag_is_the_age_of_the_oldest_unconsumed_record() {
    use Unconsumed::{CaughtUp, Since, Unknown};
    assert_eq!(oldest_unconsumed(&[CaughtUp, CaughtUp]), Some(None));
    assert_eq!(
        oldest_unconsumed(&[CaughtUp, Since(5_000), Since(3_000), Unknown]),
        Some(Some(3_000))
    );
    assert_eq!(oldest_unconsumed(&[Unknown]), None);
    assert_eq!(oldest_unconsumed(&[]), None);
    assert_eq!(time_lag(10_000, Some(3_000)), 7_000);
    assert_eq!(time_lag(10_000, None), 0);
    assert_eq!(
        time_lag(10_000, Some(12_000)),
        0,
        "a record from the future is not late"
    );

    let mut s = Sampler::default();
    let r = |oldest: Option<i64>| Reading {
        group_oldest_unconsumed: vec![("g".into(), oldest)],
        ..Reading::default()
    };
    s.record(100_000, &r(Some(40_000)));
    s.record(110_000, &r(Some(40_000))); // nothing consumed: ten seconds older
    s.record(120_000, &r(None)); // caught up
    let v = s.to_json(1, 120_000, &all);
    assert_eq!(
        series(&v, "group_time_lag", "g").expect("series"),
        &vec![
            json!([100_000.0, 60_000.0]),
            json!([110_000.0, 70_000.0]),
            json!([120_000.0, 0.0])
        ]
    );
    let hidden = s.to_json(1, 120_000, &|subject, _| subject != Subject::Group);
    assert!(series(&hidden, "group_time_lag", "g").is_none());
}
