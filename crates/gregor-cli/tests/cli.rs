//! The `gregor` binary end to end: real process, real files, standard input and exit codes.

use std::io::Write;
use std::process::{Command, Output, Stdio};

use serde_json::{json, Value};

fn gregor(args: &[&str], stdin: Option<&str>) -> Output {
    let mut child = Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("gregor starts");
    {
        let mut input = child.stdin.take().expect("stdin");
        if let Some(s) = stdin {
            input.write_all(s.as_bytes()).expect("write stdin");
        }
    }
    child.wait_with_output().expect("gregor finishes")
}

fn ok_json(args: &[&str], stdin: Option<&str>) -> Value {
    let out = gregor(args, stdin);
    assert!(
        out.status.success(),
        "gregor {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Runs a failing command and returns its one-line error message.
fn fails(args: &[&str], stdin: Option<&str>) -> String {
    let out = gregor(args, stdin);
    assert!(!out.status.success(), "gregor {args:?} should fail");
    let err = String::from_utf8_lossy(&out.stderr).trim().to_string();
    assert_eq!(
        err.lines().count(),
        1,
        "one-line error expected, got: {err}"
    );
    assert!(out.stdout.is_empty(), "nothing on stdout for a failure");
    err
}

const GROUP: &str = r#"{
  "strategy": "range",
  "topics": { "t0": { "partitions": 3, "replica_racks": [["r0"], ["r1"], ["r0", "r1"]] },
              "t1": { "partitions": 2 } },
  "members": [
    { "member_id": "c0", "group_instance_id": null, "rack": "r0", "topics": ["t0", "t1", "not-yet"],
      "owned_partitions": ["t0-0"], "generation": 1 },
    { "member_id": "c1", "topics": ["t0"] },
    { "member_id": "c2", "topics": ["nothing-here"] }
  ]
}"#;

/// c0's rack hosts t0-0 and t0-2, so the rack-aware range pass gives it those two (its quota);
/// c1 has no rack and takes t0-1; c2 subscribes only to a topic that does not exist.
#[test]
fn assign_prints_every_member_with_sorted_partitions() {
    let dir = tempfile::tempdir().expect("temp dir");
    let path = dir.path().join("group.json");
    std::fs::write(&path, GROUP).expect("write");
    let out = ok_json(&["assign", "--input", path.to_str().expect("utf-8")], None);
    assert_eq!(
        out,
        json!({
            "strategy": "range",
            "assignment": { "c0": ["t0-0", "t0-2", "t1-0", "t1-1"], "c1": ["t0-1"], "c2": [] }
        })
    );
}

#[test]
fn assign_reads_standard_input_and_flag_overrides_strategy() {
    let out = ok_json(
        &["assign", "--input", "-", "--strategy", "roundrobin"],
        Some(GROUP),
    );
    assert_eq!(out["strategy"], "roundrobin");
    assert_eq!(
        out["assignment"]["c0"],
        json!(["t0-0", "t0-2", "t1-0", "t1-1"])
    );
    assert_eq!(out["assignment"]["c1"], json!(["t0-1"]));
}

#[test]
fn assign_cooperative_reports_pending_partitions() {
    let group = r#"{ "topics": { "t": { "partitions": 4 } }, "members": [
        { "member_id": "a", "topics": ["t"], "owned_partitions": ["t-0", "t-1", "t-2", "t-3"], "generation": 2 },
        { "member_id": "b", "topics": ["t"] } ] }"#;
    let out = ok_json(
        &["assign", "--input", "-", "--strategy", "cooperative-sticky"],
        Some(group),
    );
    assert_eq!(out["assignment"], json!({ "a": ["t-0", "t-1"], "b": [] }));
    assert_eq!(out["pending"], json!({ "a": [], "b": ["t-2", "t-3"] }));
    let out = ok_json(
        &["assign", "--input", "-", "--strategy", "sticky"],
        Some(group),
    );
    assert_eq!(
        out["assignment"],
        json!({ "a": ["t-0", "t-1"], "b": ["t-2", "t-3"] })
    );
    assert!(out.get("pending").is_none());
}

#[test]
fn assign_rejects_bad_input_with_a_clear_message() {
    let cases: &[(&str, &str)] = &[
        (
            r#"{ "strategy": "fastest", "topics": {}, "members": [] }"#,
            "unknown assignment strategy 'fastest'",
        ),
        (
            r#"{ "strategy": "range", "topics": { "t": { "partitions": 1 } }, "members": [
               { "member_id": "a", "topics": ["t"] }, { "member_id": "a", "topics": ["t"] } ] }"#,
            "duplicate member a",
        ),
        (
            r#"{ "strategy": "range", "topics": { "t": { "partitions": -2 } }, "members": [] }"#,
            "partition count -2",
        ),
        (
            r#"{ "strategy": "range", "topics": "#,
            "malformed group description",
        ),
        (r#"{ "topics": {}, "members": [] }"#, "no strategy"),
        (
            r#"{ "strategy": "range", "topics": {}, "members": [], "extra": 1 }"#,
            "unknown field `extra`",
        ),
        (
            r#"{ "strategy": "sticky", "topics": { "t": { "partitions": 1 } }, "members": [
               { "member_id": "a", "topics": ["t"], "owned_partitions": ["t:0"] } ] }"#,
            "partition 't:0' is not of the form topic-N",
        ),
        (
            r#"{ "strategy": "range", "topics": { "t": { "partitions": 2, "replica_racks": [["r"]] } }, "members": [] }"#,
            "replica_racks has 1 entries for 2 partitions",
        ),
    ];
    for (input, expected) in cases {
        let err = fails(&["assign", "--input", "-"], Some(input));
        assert!(err.contains(expected), "expected '{expected}' in: {err}");
    }
    let err = fails(&["assign", "--input", "/nonexistent/group.json"], None);
    assert!(err.contains("cannot read /nonexistent/group.json"), "{err}");
}

fn step<'a>(report: &'a Value, strategy: &str, i: usize) -> &'a Value {
    let runs = report["strategies"].as_array().expect("strategies");
    let run = runs
        .iter()
        .find(|r| r["strategy"] == strategy)
        .expect("strategy present");
    &run["steps"][i]
}

fn sizes(step: &Value) -> Vec<u64> {
    let mut v: Vec<u64> = step["sizes"]
        .as_object()
        .expect("sizes")
        .values()
        .map(|v| v.as_u64().expect("number"))
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

fn parts(v: &Value) -> Vec<u32> {
    v.as_array()
        .expect("list")
        .iter()
        .map(|p| {
            let s = p.as_str().expect("string");
            s.rsplit_once('-')
                .expect("topic-N")
                .1
                .parse()
                .expect("number")
        })
        .collect()
}

#[test]
fn lab_reproduces_seed_002_table() {
    let report = ok_json(&["lab", "seed-002", "--json"], None);
    for strategy in ["range", "roundrobin", "sticky", "cooperative-sticky"] {
        assert_eq!(sizes(step(&report, strategy, 1)), vec![4, 3], "{strategy}");
        assert_eq!(
            sizes(step(&report, strategy, 2)),
            vec![3, 2, 2],
            "{strategy}"
        );
    }
    // Eager strategies revoke everything each member owned when C joins.
    for strategy in ["range", "roundrobin", "sticky"] {
        let c_joins = step(&report, strategy, 2);
        let b_joins = step(&report, strategy, 1);
        for m in ["A", "B"] {
            assert_eq!(
                c_joins["revoked"][m], b_joins["assignment"][m],
                "{strategy} {m}"
            );
        }
        assert_eq!(c_joins["rounds"], 1);
    }
    // Cooperative: A revokes only p2, p3; B revokes nothing; two rounds.
    let coop = step(&report, "cooperative-sticky", 2);
    assert_eq!(parts(&coop["revoked"]["A"]), vec![2, 3]);
    assert_eq!(parts(&coop["revoked"]["B"]), Vec::<u32>::new());
    assert_eq!(coop["rounds"], 2);
    assert_eq!(parts(&coop["first_round"]["C"]), Vec::<u32>::new());
    assert_eq!(parts(&coop["assignment"]["C"]), vec![2, 3]);
    // Partitions moved when C joins: range 3, roundrobin 4, sticky and cooperative-sticky 2.
    for (strategy, moved) in [
        ("range", 3),
        ("roundrobin", 4),
        ("sticky", 2),
        ("cooperative-sticky", 2),
    ] {
        assert_eq!(step(&report, strategy, 2)["moved"], moved, "{strategy}");
        assert_eq!(step(&report, strategy, 2)["lower_bound"], 1, "{strategy}");
    }
}

#[test]
fn lab_multi_topic_skew() {
    let report = ok_json(&["lab", "seed-002-multi-topic", "--json"], None);
    assert_eq!(sizes(step(&report, "range", 0)), vec![4, 2, 2]);
    assert_eq!(sizes(step(&report, "roundrobin", 0)), vec![3, 3, 2]);
    assert_eq!(step(&report, "range", 0)["skew"], 2);
    assert_eq!(step(&report, "range", 0)["lower_bound"], 1);
}

#[test]
fn lab_text_output_and_every_bundled_scenario_runs() {
    let out = gregor(&["lab"], None);
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("scenario seed-002"));
    assert!(text.contains("== comparison =="));
    assert!(text.contains("3-2-2"));
    let list = gregor(&["lab", "--list"], None);
    let names: Vec<String> = String::from_utf8_lossy(&list.stdout)
        .lines()
        .map(|l| l.split_whitespace().next().expect("name").to_string())
        .collect();
    assert!(names.len() >= 13, "{names:?}");
    for name in names {
        let report = ok_json(&["lab", &name, "--json"], None);
        for run in report["strategies"].as_array().expect("runs") {
            for s in run["steps"].as_array().expect("steps") {
                // Every strategy assigns every partition of the scenario's subscribed topics.
                let total: u64 = s["sizes"]
                    .as_object()
                    .expect("sizes")
                    .values()
                    .map(|v| v.as_u64().expect("n"))
                    .sum();
                assert!(total > 0, "{name}: {s}");
            }
        }
    }
}

#[test]
fn lab_rejects_bad_scenarios() {
    let err = fails(&["lab", "no-such-scenario"], None);
    assert!(
        err.contains("no bundled scenario or file named 'no-such-scenario'"),
        "{err}"
    );
    let dir = tempfile::tempdir().expect("temp dir");
    let bad = dir.path().join("bad.json");
    std::fs::write(
        &bad,
        r#"{ "name": "x", "topics": {}, "steps": [ { "label": "l", "leave": ["ghost"] } ] }"#,
    )
    .expect("write");
    let err = fails(&["lab", bad.to_str().expect("utf-8")], None);
    assert!(
        err.contains("member ghost leaves but is not in the group"),
        "{err}"
    );
    std::fs::write(&bad, "{ not json").expect("write");
    let err = fails(&["lab", bad.to_str().expect("utf-8")], None);
    assert!(err.contains("malformed scenario"), "{err}");
    let err = fails(&["lab", "seed-002", "--strategies", "range,best"], None);
    assert!(err.contains("unknown assignment strategy 'best'"), "{err}");
}

#[test]
fn bench_assign_reports_timing_and_memory() {
    let out = ok_json(
        &[
            "bench",
            "assign",
            "--strategy",
            "sticky",
            "--topics",
            "20",
            "--partitions",
            "50",
            "--members",
            "30",
            "--subs",
            "nonuniform",
            "--owned",
            "prev",
            "--racks",
            "3",
            "--runs",
            "3",
            "--json",
        ],
        None,
    );
    assert_eq!(out["assigned_partitions"], 1000);
    assert_eq!(out["runs"], 3);
    let min = out["min_ms"].as_f64().expect("min");
    let median = out["median_ms"].as_f64().expect("median");
    let max = out["max_ms"].as_f64().expect("max");
    assert!(min <= median && median <= max);
    let cpu_min = out["cpu_min_ms"].as_f64().expect("cpu min");
    let cpu_median = out["cpu_median_ms"].as_f64().expect("cpu median");
    let cpu_max = out["cpu_max_ms"].as_f64().expect("cpu max");
    // A thread's CPU clock advances during the call, and never faster than the wall clock.
    assert!(0.0 < cpu_min && cpu_min <= cpu_median && cpu_median <= cpu_max);
    assert!(cpu_min <= max + 1.0);
    assert!(out["peak_mib"].as_f64().expect("peak") > 0.0);
    let err = fails(
        &[
            "bench",
            "assign",
            "--strategy",
            "sticky",
            "--topics",
            "0",
            "--partitions",
            "1",
            "--members",
            "1",
        ],
        None,
    );
    assert!(
        err.contains("--topics and --members must be at least 1"),
        "{err}"
    );
}

#[test]
fn bench_log_prints_json_lines_with_ratios() {
    let dir = tempfile::tempdir().expect("temp dir");
    let out = gregor(
        &[
            "bench",
            "log",
            "--dir",
            dir.path().to_str().expect("utf-8"),
            "--seconds",
            "0.2",
            "--batch-bytes",
            "16384",
            "--writers",
            "1,4",
            "--json",
        ],
        None,
    );
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let lines: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert!(lines.len() >= 4, "{lines:?}");
    for c in &lines {
        for field in [
            "case",
            "fsync",
            "writers",
            "mb_per_s",
            "raw_mb_per_s",
            "ratio",
        ] {
            assert!(c.get(field).is_some(), "{field} missing in {c}");
        }
        assert!(c["mb_per_s"].as_f64().expect("number") > 0.0);
    }
    assert!(lines
        .iter()
        .any(|c| c["fsync"] == true && c["writers"] == 4));
    // A directory that cannot exist: its parent is a regular file.
    let file = dir.path().join("plain-file");
    std::fs::write(&file, b"x").expect("write");
    let bad = file.join("sub");
    let err = fails(
        &[
            "bench",
            "log",
            "--dir",
            bad.to_str().expect("utf-8"),
            "--seconds",
            "0.1",
        ],
        None,
    );
    assert!(err.contains("plain-file/sub"), "{err}");
}

/// A broker process on a free port, stopped (SIGTERM) when dropped.
struct BrokerProcess {
    child: std::process::Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl BrokerProcess {
    fn start() -> BrokerProcess {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("addr")
            .port();
        let dir = tempfile::tempdir().expect("temp dir");
        let child = Command::new(env!("CARGO_BIN_EXE_gregor"))
            .args([
                "broker",
                "--listeners",
                &format!("PLAINTEXT://127.0.0.1:{port}"),
                "--data-dir",
                dir.path().to_str().expect("utf-8"),
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("broker starts");
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "broker did not listen"
            );
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        BrokerProcess {
            child,
            port,
            _dir: dir,
        }
    }
}

impl Drop for BrokerProcess {
    fn drop(&mut self) {
        let _ = Command::new("kill")
            .arg(self.child.id().to_string())
            .status();
        let _ = self.child.wait();
    }
}

#[test]
fn bench_produce_and_consume_against_a_broker() {
    let broker = BrokerProcess::start();
    let bootstrap = format!("127.0.0.1:{}", broker.port);
    let raw = tempfile::tempdir().expect("temp dir");
    let common = [
        "--bootstrap-server",
        bootstrap.as_str(),
        "--seconds",
        "1",
        "--partitions",
        "2",
        "--raw-dir",
        raw.path().to_str().expect("utf-8"),
        "--json",
    ];
    let mut args = vec!["bench", "produce"];
    args.extend(common);
    let produced = ok_json(&args, None);
    let records = produced["records"].as_u64().expect("records");
    assert!(records > 0, "{produced}");
    for field in [
        "mb_per_s",
        "latency_p50_ms",
        "latency_p99_ms",
        "latency_p999_ms",
        "raw_fdatasync_mb_per_s",
        "ratio",
    ] {
        assert!(
            produced[field].as_f64().expect(field) > 0.0,
            "{field}: {produced}"
        );
    }
    assert!(produced["latency_p50_ms"].as_f64() <= produced["latency_p999_ms"].as_f64());
    // The consume suite fills its own topics (one per partition count) and reads them back
    // with kcat (when installed) and the Gregor consumer.
    let raw_dir = raw.path().to_str().expect("utf-8");
    let mut args = vec![
        "bench",
        "consume",
        "--bootstrap-server",
        bootstrap.as_str(),
        "--partitions",
        "1,3",
        "--mb",
        "2",
        "--gregor-runs",
        "2",
        "--loopback-runs",
        "3",
        "--gregor-tuned-fetch-max-bytes",
        "1048576",
        "--raw-dir",
        raw_dir,
        "--json",
    ];
    let has_kcat = std::path::Path::new("/usr/bin/kcat").exists();
    if has_kcat {
        args.extend(["--kcat", "/usr/bin/kcat"]);
    } else {
        args.push("--skip-kcat");
    }
    let out = gregor(&args, None);
    assert!(
        out.status.success(),
        "gregor {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let cases: Vec<Value> = String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(|l| serde_json::from_str(l).expect("one JSON object per line"))
        .collect();
    assert_eq!(cases.len(), 2, "one case per partition count");
    for c in &cases {
        let records = c["records"].as_u64().expect("records");
        assert!(records > 0, "{c}");
        assert_eq!(c["gregor"]["records"].as_u64(), Some(records), "{c}");
        // The Gregor consumer's Fetches, and its fetch window at its 8 MiB floor on loopback
        // (2 MB never fills a larger one).
        assert!(c["gregor"]["fetches"].as_u64().expect("fetches") > 0, "{c}");
        assert_eq!(
            c["gregor"]["fetch_window_bytes"].as_u64(),
            Some(8 << 20),
            "{c}"
        );
        // Two Gregor runs (each a fresh group reading the whole topic); the median reported.
        let gregor_runs = c["gregor"]["runs_mb_per_s"].as_array().expect("runs");
        assert_eq!(gregor_runs.len(), 2, "{c}");
        assert!(gregor_runs
            .iter()
            .any(|r| r.as_f64() == c["gregor"]["mb_per_s"].as_f64()));
        // And the tuned series (off by default), alternated with it.
        assert_eq!(
            c["gregor_tuned_fetch_max_bytes"].as_i64(),
            Some(1 << 20),
            "{c}"
        );
        assert_eq!(c["gregor_tuned"]["records"].as_u64(), Some(records), "{c}");
        let tuned_runs = c["gregor_tuned"]["runs_mb_per_s"].as_array().expect("runs");
        assert_eq!(tuned_runs.len(), 2, "{c}");
        for field in ["loopback_mb_per_s", "page_cache_mb_per_s"] {
            assert!(c[field].as_f64().expect(field) > 0.0, "{field}: {c}");
        }
        assert!(c["gregor"]["ratio_to_loopback"].as_f64().expect("ratio") > 0.0);
        // Each run paired with a loopback run just before it; the series gives the median
        // of the runs' ratios.
        for series in ["gregor", "gregor_tuned"] {
            let f = &c[series];
            let ratios = f64s(&f["runs_paired_ratio"], "runs_paired_ratio");
            assert_eq!(ratios.len(), 2, "{series}: {c}");
            assert!(ratios.iter().all(|&r| r > 0.0), "{series}: {c}");
            assert_eq!(
                f["paired_ratio"].as_f64(),
                Some(ratios[0].min(ratios[1])),
                "{series}: {c}"
            );
            let paired = f["paired_loopback_mb_per_s"].as_f64().expect("paired");
            let mb = f["mb_per_s"].as_f64().expect("mb_per_s");
            assert!(
                ratios.iter().any(|&r| (r - mb / paired).abs() < 1e-9),
                "the median run's own ratio is among the runs': {c}"
            );
        }
        // What loopback costs its two threads, and the consumers' own CPU (the ceilings may
        // be absent: a 2 MB case can take less than one clock tick of CPU).
        for field in ["sender_cpu_s_per_gb", "receiver_cpu_s_per_gb"] {
            assert!(c["loopback"][field].as_f64().expect(field) >= 0.0, "{c}");
        }
        // Loopback once per default read size; the baseline is the fastest of them.
        let runs = c["loopback_runs"].as_array().expect("loopback_runs");
        let reads: Vec<u64> = runs
            .iter()
            .map(|r| r["read_bytes"].as_u64().expect("read_bytes"))
            .collect();
        assert_eq!(reads, [65_536, 1_048_576], "{c}");
        // Three runs per read size, each read size reporting its median one.
        for r in runs {
            let all = f64s(&r["runs_mb_per_s"], "runs_mb_per_s");
            assert_eq!(all.len(), 3, "{c}");
            let mut sorted = all.clone();
            sorted.sort_by(f64::total_cmp);
            assert_eq!(r["mb_per_s"].as_f64(), Some(sorted[1]), "{c}");
        }
        let fastest = runs
            .iter()
            .map(|r| r["mb_per_s"].as_f64().expect("mb_per_s"))
            .fold(0.0, f64::max);
        assert_eq!(c["loopback_mb_per_s"].as_f64(), Some(fastest), "{c}");
        assert!(c["gregor"]["client_cpu_s_per_gb"].as_f64().is_some(), "{c}");
        assert!(c["gregor"]["client_cpu_share"].as_f64().is_some(), "{c}");
        if has_kcat {
            assert_eq!(c["librdkafka"]["records"].as_u64(), Some(records), "{c}");
            assert_eq!(
                c["librdkafka_tuned"]["records"].as_u64(),
                Some(records),
                "{c}"
            );
            for series in ["librdkafka", "librdkafka_tuned"] {
                assert!(
                    c[series]["paired_ratio"].as_f64().expect("paired") > 0.0,
                    "{c}"
                );
            }
            let cmd = c["librdkafka_tuned_command"].as_str().expect("command");
            assert!(cmd.contains("-X fetch.max.bytes=1048576"), "{cmd}");
            // The same consumer against the broker's answers replayed from memory: it read
            // every record, and with one partition its Fetches had been recorded (all but
            // perhaps a last one at the end of the log, which the recording run may not
            // have sent before it exited).
            // The tuned consumer against the same replay reads every record too, some of it
            // from memory. Its 1 MiB requests can make answers composed from a recorded one
            // end earlier, so its next Fetch may start at an offset never recorded and be
            // forwarded: how many is timing, not a property.
            for series in ["librdkafka_replay", "librdkafka_tuned_replay"] {
                let replay = &c[series];
                assert_eq!(replay["consumer"]["records"].as_u64(), Some(records), "{c}");
                assert!(replay["proxy_error"].is_null(), "{c}");
                assert!(replay["mb_held"].as_f64().expect("mb_held") > 0.0, "{c}");
                // Composed answers keep to the broker's fetch.max.bytes (its default; the
                // latency cap is off by default).
                assert_eq!(replay["answer_cap_bytes"].as_u64(), Some(30 << 20), "{c}");
                if c["partitions"] == 1 {
                    assert!(replay["fetches_replayed"].as_u64() > Some(0), "{c}");
                }
            }
            if c["partitions"] == 1 {
                let forwarded = c["librdkafka_replay"]["fetches_forwarded"].as_u64();
                assert!(forwarded <= Some(1), "{c}");
            }
        }
    }
    let err = fails(
        &["bench", "consume", "--partitions", "0", "--skip-kcat"],
        None,
    );
    assert!(err.contains("--partitions"), "{err}");
    let err = fails(
        &["bench", "consume", "--skip-kcat", "--loopback-reads", "0"],
        None,
    );
    assert!(err.contains("--loopback-reads"), "{err}");
    let err = fails(&["bench", "consume", "--kcat-runs", "0"], None);
    assert!(err.contains("--kcat-runs"), "{err}");
    let err = fails(&["bench", "consume", "--gregor-runs", "0"], None);
    assert!(err.contains("--gregor-runs"), "{err}");
    let err = fails(&["bench", "consume", "--loopback-runs", "0"], None);
    assert!(err.contains("--loopback-runs"), "{err}");
    let err = fails(
        &["bench", "consume", "--gregor-tuned-fetch-max-bytes=-1"],
        None,
    );
    assert!(err.contains("--gregor-tuned-fetch-max-bytes"), "{err}");
    let err = fails(
        &[
            "bench",
            "consume",
            "--skip-kcat",
            "--kcat-tuned",
            "fetch.max.bytes",
        ],
        None,
    );
    assert!(err.contains("--kcat-tuned"), "{err}");
    let mut bad = vec!["bench", "produce", "--concurrency", "0"];
    bad.extend(common);
    let err = fails(&bad, None);
    assert!(err.contains("must be at least 1"), "{err}");
    let err = fails(
        &[
            "bench",
            "produce",
            "--bootstrap-server",
            "127.0.0.1:1",
            "--seconds",
            "1",
        ],
        None,
    );
    assert!(err.contains("127.0.0.1:1"), "{err}");
}

/// A setting whose feature does not exist yet stops the broker at start-up, naming it, rather
/// than being accepted and ignored; its default value is accepted.
#[test]
fn broker_refuses_settings_of_missing_features_at_start_up() {
    let dir = tempfile::tempdir().expect("temp dir");
    let data = dir.path().join("data");
    let data = data.to_str().expect("utf-8 path");
    for (setting, key) in [
        ("num.replica.fetchers=2", "num.replica.fetchers"),
        ("num.io.threads=16", "num.io.threads"),
    ] {
        let out = gregor(
            &[
                "broker",
                "--listeners",
                "PLAINTEXT://127.0.0.1:0",
                "--data-dir",
                data,
                "--override",
                setting,
            ],
            None,
        );
        assert!(!out.status.success(), "{setting} must stop start-up");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(
            err.contains(key) && err.contains("not supported"),
            "{setting}: {err}"
        );
        assert!(
            !std::path::Path::new(data)
                .join("__cluster_metadata-0")
                .exists(),
            "refused before anything is written"
        );
    }
}

/// A JSON array of numbers, as `f64`s.
fn f64s(v: &Value, what: &str) -> Vec<f64> {
    v.as_array()
        .unwrap_or_else(|| panic!("{what}: not an array: {v}"))
        .iter()
        .map(|x| {
            x.as_f64()
                .unwrap_or_else(|| panic!("{what}: not a number: {x}"))
        })
        .collect()
}

/// Three keyed records on a one-partition topic, written with gregor-client's producer.
fn produce_three(bootstrap: &str, topic: &str) {
    use gregor_client::{Producer, ProducerConfig, ProducerRecord};
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("runtime");
    runtime.block_on(async {
        let producer = Producer::connect(ProducerConfig::new(bootstrap).expect("config"))
            .await
            .expect("producer connects");
        for i in 0..3 {
            let record = ProducerRecord::new(topic)
                .key(format!("k{i}"))
                .value(format!("v{i}"));
            producer
                .send(record)
                .await
                .expect("sent")
                .await
                .expect("delivered");
        }
        producer.close().await.expect("producer closes");
    });
}

#[test]
fn consume_prints_records_in_read_committed_and_refuses_a_bad_level() {
    let err = fails(
        &["consume", "--topic", "t", "--isolation-level", "committed"],
        None,
    );
    assert!(
        err.contains("--isolation-level") && err.contains("read_uncommitted or read_committed"),
        "{err}"
    );
    let broker = BrokerProcess::start();
    let bootstrap = format!("127.0.0.1:{}", broker.port);
    let created = gregor(
        &[
            "topics",
            "--bootstrap-server",
            &bootstrap,
            "--create",
            "--topic",
            "txt",
            "--partitions",
            "1",
            "--replication-factor",
            "1",
        ],
        None,
    );
    assert!(created.status.success(), "{created:?}");
    produce_three(&bootstrap, "txt");
    for level in ["read_committed", "read_uncommitted"] {
        let out = gregor(
            &[
                "consume",
                "--bootstrap-server",
                &bootstrap,
                "--topic",
                "txt",
                "--from-beginning",
                "--max-messages",
                "3",
                "--timeout-ms",
                "20000",
                "--isolation-level",
                level,
                "--property",
                "print.key=true",
                "--property",
                "print.offset=true",
            ],
            None,
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{level}: {stderr}");
        assert_eq!(
            String::from_utf8_lossy(&out.stdout),
            "Offset:0\tk0\tv0\nOffset:1\tk1\tv1\nOffset:2\tk2\tv2\n",
            "{level}"
        );
        assert!(
            stderr.contains("Processed a total of 3 messages"),
            "{stderr}"
        );
    }
}

/// `gregor features` (kafka-features.sh) against a broker process: a new cluster is at
/// transaction.version 2; downgrades, dry runs and disabling change it (or not); a bad
/// feature name or level fails with Kafka's line and a non-zero exit.
#[test]
fn features_describe_upgrade_downgrade_and_refusals() {
    let broker = BrokerProcess::start();
    let bootstrap = format!("127.0.0.1:{}", broker.port);
    let run = |args: &[&str]| {
        let mut all = vec!["features", "--bootstrap-server", bootstrap.as_str()];
        all.extend_from_slice(args);
        let out = gregor(&all, None);
        let stdout = String::from_utf8_lossy(&out.stdout).to_string();
        let stderr = String::from_utf8_lossy(&out.stderr).trim().to_string();
        (out.status.success(), stdout, stderr)
    };
    let level = |expected: &str| {
        let (ok, stdout, stderr) = run(&["describe"]);
        assert!(ok, "{stderr}");
        let line = stdout
            .lines()
            .find(|l| l.starts_with("Feature: transaction.version\t"))
            .unwrap_or_else(|| panic!("no transaction.version line in {stdout}"));
        assert!(
            line.starts_with(
                "Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\t"
            ),
            "{line}"
        );
        assert!(
            line.contains(&format!("\tFinalizedVersionLevel: {expected}\tEpoch: ")),
            "{line}"
        );
    };
    level("2");
    let (ok, stdout, _) = run(&["upgrade", "--feature", "transaction.version=2"]);
    assert!(ok);
    assert_eq!(stdout.trim(), "transaction.version was upgraded to 2.");
    let (ok, stdout, _) = run(&["downgrade", "--feature", "transaction.version=1"]);
    assert!(ok);
    assert_eq!(stdout.trim(), "transaction.version was downgraded to 1.");
    level("1");
    let (ok, stdout, _) = run(&[
        "downgrade",
        "--feature",
        "transaction.version=0",
        "--unsafe",
        "--dry-run",
    ]);
    assert!(ok);
    assert_eq!(stdout.trim(), "transaction.version can be downgraded to 0.");
    level("1");
    // An upgrade that is a downgrade, a level beyond the brokers', a feature that is not one.
    for (args, line) in [
        (
            ["upgrade", "--feature", "transaction.version=0"],
            "Could not upgrade transaction.version to 0. Invalid update version 0",
        ),
        (
            ["upgrade", "--feature", "transaction.version=3"],
            "Could not upgrade transaction.version to 3. Invalid update version 3",
        ),
        (
            ["upgrade", "--feature", "no.such.feature=1"],
            "Could not upgrade no.such.feature to 1. Invalid update version 1",
        ),
    ] {
        let (ok, stdout, stderr) = run(&args);
        assert!(!ok, "{args:?} should fail");
        assert!(stdout.starts_with(line), "{args:?}: {stdout}");
        assert!(
            stderr.contains("1 out of 1 operation(s) failed."),
            "{stderr}"
        );
    }
    let (ok, _, stderr) = run(&["upgrade", "--feature", "transaction.version=two"]);
    assert!(!ok);
    assert!(
        stderr.contains("unable to parse two as a short"),
        "{stderr}"
    );
    level("1");
    let (ok, stdout, _) = run(&["disable", "--feature", "transaction.version"]);
    assert!(ok);
    assert_eq!(stdout.trim(), "transaction.version was disabled.");
    level("0");
}

/// A tool pointed at a controller listener says so at once instead of timing out: the
/// listener answers the client's ApiVersions with ApiVersions alone.
#[test]
fn a_tool_on_a_controller_listener_says_so() {
    let free = || {
        std::net::TcpListener::bind("127.0.0.1:0")
            .expect("free port")
            .local_addr()
            .expect("addr")
            .port()
    };
    let (port, controller) = (free(), free());
    let dir = tempfile::tempdir().expect("temp dir");
    let child = Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args([
            "broker",
            "--node-id",
            "0",
            "--listeners",
            &format!("PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller}"),
            "--controller-quorum-voters",
            &format!("0@127.0.0.1:{controller}"),
            "--data-dir",
            dir.path().to_str().expect("utf-8"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("broker starts");
    let broker = BrokerProcess {
        child,
        port,
        _dir: dir,
    };
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", broker.port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "broker did not listen"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let started = std::time::Instant::now();
    let err = fails(
        &[
            "topics",
            "--list",
            "--bootstrap-server",
            &format!("127.0.0.1:{controller}"),
        ],
        None,
    );
    assert!(
        err.contains("is a controller listener")
            && err.contains("point --bootstrap-server at a broker listener"),
        "{err}"
    );
    // Not the 10 s connect timeout a closed connection used to cost.
    assert!(
        started.elapsed() < std::time::Duration::from_secs(5),
        "{err}"
    );
    let listed = gregor(
        &[
            "topics",
            "--list",
            "--bootstrap-server",
            &format!("127.0.0.1:{}", broker.port),
        ],
        None,
    );
    assert!(listed.status.success(), "{listed:?}");
}

/// `broker --help` describes each node's roles as configured, not every node as both.
#[test]
fn broker_help_describes_the_process_roles() {
    let out = gregor(&["broker", "--help"], None);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout)
        .split_whitespace()
        .collect::<Vec<_>>()
        .join(" ");
    assert!(
        help.contains("Roles of this node (process.roles): broker, controller, or broker,controller (the default: a combined node)"),
        "{help}"
    );
    assert!(
        help.contains(
            "A controller-only node serves the quorum on its CONTROLLER listener and no clients"
        ),
        "{help}"
    );
    assert!(
        help.contains("Either alone needs --controller-quorum-voters"),
        "{help}"
    );
}
