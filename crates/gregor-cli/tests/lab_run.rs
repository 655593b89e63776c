//! `gregor lab run` end to end: a real broker process with fast group settings, real consumers
//! playing seed 002's and seed 004's scenarios ten times faster, and the offline `gregor lab`
//! as the reference for what each strategy should end with.

use std::collections::BTreeMap;
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

fn gregor(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_gregor"))
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("gregor runs")
}

fn ok_json(args: &[&str]) -> Value {
    let out = gregor(args);
    assert!(
        out.status.success(),
        "gregor {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    serde_json::from_slice(&out.stdout).expect("JSON on stdout")
}

/// Runs a failing command and returns its one-line error message.
fn fails(args: &[&str]) -> String {
    let out = gregor(args);
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

/// A broker on a free port, with the group settings scaled runs need; killed when dropped.
struct Broker {
    child: Child,
    port: u16,
    _dir: tempfile::TempDir,
}

impl Broker {
    fn start() -> Broker {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|l| l.local_addr())
            .expect("a free port")
            .port();
        let dir = tempfile::tempdir().expect("scratch dir");
        let child = Command::new(env!("CARGO_BIN_EXE_gregor"))
            .args(["broker", "--listeners"])
            .arg(format!("PLAINTEXT://127.0.0.1:{port}"))
            .arg("--data-dir")
            .arg(dir.path())
            .args(["--override", "group.min.session.timeout.ms=1000"])
            .args(["--override", "group.initial.rebalance.delay.ms=300"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("broker starts");
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(Instant::now() < deadline, "broker did not listen");
            std::thread::sleep(Duration::from_millis(50));
        }
        Broker {
            child,
            port,
            _dir: dir,
        }
    }

    fn bootstrap(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn strategy<'a>(report: &'a Value, name: &str) -> &'a Value {
    report["strategies"]
        .as_array()
        .expect("strategies")
        .iter()
        .find(|s| s["strategy"] == name)
        .unwrap_or_else(|| panic!("no {name} in {report}"))
}

/// Partition numbers per member (topic names differ between live and offline runs).
fn numbers(map: &Value) -> BTreeMap<String, Vec<u32>> {
    map.as_object()
        .expect("member map")
        .iter()
        .map(|(m, ps)| {
            let mut ns: Vec<u32> = ps
                .as_array()
                .expect("partitions")
                .iter()
                .map(|p| {
                    let p = p.as_str().expect("partition name");
                    p.rsplit_once('-').expect("topic-N").1.parse().expect("N")
                })
                .collect();
            ns.sort_unstable();
            (m.clone(), ns)
        })
        .filter(|(_, ns)| !ns.is_empty())
        .collect()
}

fn sizes(step: &Value) -> Vec<u64> {
    let mut v: Vec<u64> = step["sizes"]
        .as_object()
        .expect("sizes")
        .values()
        .map(|n| n.as_u64().expect("size"))
        .collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v
}

/// The member's callbacks, in order: (event, partition count).
fn callbacks(run: &Value, member: &str) -> Vec<(String, usize)> {
    run["timeline"]
        .as_array()
        .expect("timeline")
        .iter()
        .filter(|e| e["member"] == member && e.get("partitions").is_some())
        .map(|e| {
            (
                e["event"].as_str().expect("event").to_string(),
                e["partitions"].as_array().expect("partitions").len(),
            )
        })
        .collect()
}

#[test]
fn live_runs_reproduce_seed_002_and_seed_004() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap();
    let live = ok_json(&[
        "lab",
        "run",
        "--bootstrap",
        &bootstrap,
        "--scenario",
        "seed-002",
        "--strategies",
        "range,cooperative-sticky",
        "--scale",
        "0.1",
        "--json",
    ]);
    let offline = ok_json(&[
        "lab",
        "seed-002",
        "--strategies",
        "range,cooperative-sticky",
        "--json",
    ]);
    for name in ["range", "cooperative-sticky"] {
        let run = strategy(&live, name);
        let steps = run["steps"].as_array().expect("steps");
        let labels: Vec<&str> = steps.iter().map(|s| s["label"].as_str().unwrap()).collect();
        assert_eq!(labels, ["A starts", "B joins", "C joins"], "{name}");
        // Seed 002: 7, then 4-3, then 3-2-2, whatever the strategy.
        assert_eq!(sizes(&steps[0]), [7], "{name}");
        assert_eq!(sizes(&steps[1]), [4, 3], "{name}");
        assert_eq!(sizes(&steps[2]), [3, 2, 2], "{name}");
        // The live group ends where the offline replay says it does, step by step, with the
        // same revoked sets and moves.
        let expected = strategy(&offline, name)["steps"].as_array().unwrap();
        for (got, want) in steps.iter().zip(expected) {
            assert_eq!(
                numbers(&got["assignment"]),
                numbers(&want["assignment"]),
                "{name} {}",
                got["label"]
            );
            assert_eq!(
                numbers(&got["revoked"]),
                numbers(&want["revoked"]),
                "{name} {}",
                got["label"]
            );
            assert_eq!(got["moved"], want["moved"], "{name} {}", got["label"]);
        }
        // Every member owned partitions within its step.
        for (i, m) in ["A", "B", "C"].iter().enumerate() {
            let t = &steps[i]["time_to_own_ms"][m];
            assert!(t.as_i64().is_some_and(|t| t >= 0), "{name} {m}: {t}");
        }
    }
    // Seed 002's C-joins row: range moves 3 and revokes everything from A and B; cooperative
    // moves 2, only A revokes (p2, p3), and B keeps 4-6.
    let range = &strategy(&live, "range")["steps"][2];
    assert_eq!(range["moved"], 3);
    assert_eq!(
        numbers(&range["revoked"]),
        BTreeMap::from([("A".into(), vec![0, 1, 2, 3]), ("B".into(), vec![4, 5, 6])])
    );
    let coop_run = strategy(&live, "cooperative-sticky");
    let coop = &coop_run["steps"][2];
    assert_eq!(coop["moved"], 2);
    assert_eq!(
        numbers(&coop["revoked"]),
        BTreeMap::from([("A".into(), vec![2, 3])])
    );
    assert_eq!(numbers(&coop["assignment"])["B"], [4, 5, 6]);
    // Seed 004: under cooperative a joining member first gets an empty assignment and its
    // partitions only in the second round; under eager range it gets them at once.
    let c = callbacks(coop_run, "C");
    assert_eq!(c[0], ("ASSIGNED".to_string(), 0), "{c:?}");
    assert_eq!(c[1], ("ASSIGNED".to_string(), 2), "{c:?}");
    let c = callbacks(strategy(&live, "range"), "C");
    assert_eq!(c[0], ("ASSIGNED".to_string(), 2), "{c:?}");

    // Seed 004, experiment 3 (range): B stops polling past max.poll.interval.ms, A takes
    // everything; B polls again, hears it lost p2, rejoins, and the group is back to 2-1.
    let stall = ok_json(&[
        "lab",
        "run",
        "--bootstrap",
        &bootstrap,
        "--scenario",
        "seed-004-stall",
        "--strategies",
        "range,cooperative-sticky",
        "--scale",
        "0.1",
        "--json",
    ]);
    // The healthy member waits in JoinGroup for the stalled one for up to max.poll.interval.ms;
    // that wait is not a poll timeout of its own, so it never loses its partitions.
    for name in ["range", "cooperative-sticky"] {
        let a = callbacks(strategy(&stall, name), "A");
        assert!(a.iter().all(|(kind, _)| kind != "LOST"), "{name}: {a:?}");
    }
    let coop = strategy(&stall, "cooperative-sticky");
    let steps = coop["steps"].as_array().expect("steps");
    assert_eq!(
        numbers(&steps[2]["assignment"]),
        BTreeMap::from([("A".into(), vec![0, 1, 2])])
    );
    assert_eq!(sizes(&steps[3]), [2, 1]);
    let run = strategy(&stall, "range");
    let steps = run["steps"].as_array().expect("steps");
    assert_eq!(steps.len(), 4);
    assert_eq!(numbers(&steps[1]["assignment"])["B"], [2]);
    assert_eq!(
        numbers(&steps[2]["assignment"]),
        BTreeMap::from([("A".into(), vec![0, 1, 2])])
    );
    assert_eq!(numbers(&steps[3]["revoked"])["B"], [2]);
    assert_eq!(sizes(&steps[3]), [2, 1]);
    let b = callbacks(run, "B");
    assert!(b.contains(&("LOST".to_string(), 1)), "{b:?}");

    // Text output: the timeline lines and the table.
    let out = gregor(&[
        "lab",
        "run",
        "--bootstrap",
        &bootstrap,
        "--scenario",
        "seed-004-join",
        "--strategies",
        "cooperative-sticky",
        "--scale",
        "0.1",
    ]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(text.contains("A ASSIGNED [p0, p1, p2]"), "{text}");
    assert!(text.contains("A REVOKED [p2]"), "{text}");
    assert!(text.contains("B closes"), "{text}");
}

#[test]
fn live_runs_reject_bad_input_with_one_line() {
    let err = fails(&[
        "lab",
        "run",
        "--bootstrap",
        "127.0.0.1:9",
        "--scenario",
        "no-such-scenario",
    ]);
    assert!(err.contains("no bundled live scenario"), "{err}");
    assert!(err.contains("seed-004-stall"), "{err}");
    let err = fails(&[
        "lab",
        "run",
        "--bootstrap",
        "127.0.0.1:9",
        "--strategies",
        "range,fair",
    ]);
    assert!(err.contains("fair"), "{err}");
    let err = fails(&["lab", "run", "--bootstrap", "127.0.0.1:9", "--scale", "0"]);
    assert!(err.contains("--scale"), "{err}");
    let dir = tempfile::tempdir().expect("scratch dir");
    let file = dir.path().join("bad.json");
    std::fs::write(
        &file,
        r#"{"name":"x","partitions":2,"session_timeout_ms":1000,"heartbeat_interval_ms":300,
            "max_poll_interval_ms":1000,"settle_ms":0,
            "members":[{"id":"A","start_ms":0},{"id":"A","start_ms":5}]}"#,
    )
    .expect("write scenario");
    let err = fails(&[
        "lab",
        "run",
        "--bootstrap",
        "127.0.0.1:9",
        "--scenario",
        file.to_str().expect("utf-8"),
    ]);
    assert!(err.contains("unique"), "{err}");
    // Nothing listens on a port just released.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port")
        .port();
    let started = Instant::now();
    let err = fails(&[
        "lab",
        "run",
        "--bootstrap",
        &format!("127.0.0.1:{port}"),
        "--scale",
        "0.1",
    ]);
    assert!(err.contains("cannot reach"), "{err}");
    assert!(started.elapsed() < Duration::from_secs(15));
}

fn listed(args: &[&str]) -> Vec<String> {
    let out = gregor(args);
    assert!(
        out.status.success(),
        "gregor {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

/// A run deletes the topic and groups it created and says so; `--keep` keeps them. The run
/// takes `--bootstrap-server` like every tool, and still `--bootstrap`.
#[test]
fn live_runs_clean_up_unless_kept() {
    let broker = Broker::start();
    let bootstrap = broker.bootstrap();
    let topics = || listed(&["topics", "--list", "--bootstrap-server", &bootstrap]);
    let groups = || listed(&["groups", "--list", "--bootstrap-server", &bootstrap]);
    let run = |flag: &str, extra: &[&str]| {
        let mut args = vec![
            "lab",
            "run",
            flag,
            &bootstrap,
            "--scenario",
            "seed-004-join",
            "--strategies",
            "range,sticky",
            "--scale",
            "0.1",
        ];
        args.extend_from_slice(extra);
        gregor(&args)
    };

    let out = run("--bootstrap-server", &["--json"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let report: Value = serde_json::from_slice(&out.stdout).expect("JSON on stdout");
    let cleanup = &report["cleanup"];
    assert_eq!(cleanup["kept"], false, "{cleanup}");
    assert_eq!(cleanup["failures"], serde_json::json!({}), "{cleanup}");
    let topic = report["topic"].as_str().expect("topic").to_string();
    assert_eq!(cleanup["topic"], topic.as_str());
    let created: Vec<String> = ["range", "sticky"]
        .iter()
        .map(|s| {
            strategy(&report, s)["group"]
                .as_str()
                .expect("group")
                .to_string()
        })
        .collect();
    assert_eq!(cleanup["groups"], serde_json::json!(created), "{cleanup}");
    assert!(!topics().contains(&topic), "{topic} left behind");
    let left = groups();
    assert!(created.iter().all(|g| !left.contains(g)), "{left:?}");

    let out = run("--bootstrap", &["--keep"]);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8_lossy(&out.stdout);
    let kept = text
        .lines()
        .find(|l| l.starts_with("kept (--keep): topic lab-seed-004-join-"))
        .unwrap_or_else(|| panic!("no kept line in {text}"));
    let topic = kept
        .split_whitespace()
        .nth(3)
        .expect("topic name")
        .to_string();
    assert!(
        kept.contains(" and groups lab-seed-004-join-range-"),
        "{kept}"
    );
    assert!(
        topics().contains(&topic),
        "{topic} was deleted despite --keep"
    );
    assert_eq!(
        groups()
            .iter()
            .filter(|g| g.starts_with("lab-seed-004-join-"))
            .count(),
        2
    );
}
