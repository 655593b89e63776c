//! Property test: random appends, truncations, DeleteRecords and (clean or crash) reopens
//! against an in-memory model of the log.

use crate::common::*;
use gregor_log::{Log, LogConfig, OffsetSpec};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append { records: usize, batches: usize },
    Truncate(u8),
    DeleteRecords(u8),
    Reopen { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (1usize..6, 1usize..3).prop_map(|(records, batches)| Op::Append { records, batches }),
        2 => any::<u8>().prop_map(Op::Truncate),
        1 => any::<u8>().prop_map(Op::DeleteRecords),
        2 => any::<bool>().prop_map(|clean| Op::Reopen { clean }),
    ]
}

#[derive(Debug, Default)]
struct Model {
    /// (base offset, record count, timestamp) of every batch, in order.
    batches: Vec<(i64, i64, i64)>,
    lso: i64,
}

impl Model {
    fn leo(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.0 + b.1)
    }
    fn pick(&self, x: u8) -> i64 {
        let (lo, hi) = (self.lso, self.leo());
        lo + (hi - lo) * i64::from(x) / 255
    }
    fn expected(&self) -> Vec<(i64, String, i64)> {
        let mut out = Vec::new();
        for &(base, n, ts) in &self.batches {
            for i in 0..n {
                if base + i >= self.lso {
                    out.push((base + i, format!("v{base}-{i}"), ts));
                }
            }
        }
        out
    }
}

fn config() -> LogConfig {
    LogConfig {
        segment_bytes: 600,
        index_interval_bytes: 128,
        retention_ms: None,
        ..LogConfig::default()
    }
}

fn check(log: &Log, m: &Model) {
    let got: Vec<(i64, String, i64)> = read_all(log)
        .into_iter()
        .map(|r| {
            let v = String::from_utf8(r.value.expect("value").to_vec()).expect("utf8");
            (r.offset, v, r.timestamp)
        })
        .collect();
    let want = m.expected();
    assert_eq!(got, want);
    assert_eq!(log.log_end_offset(), m.leo());
    assert_eq!(log.log_start_offset(), m.lso);
    for probe in [0, 3, 7, 20] {
        let expect = want.iter().find(|r| r.2 >= probe).map(|r| r.0);
        let got = log
            .list_offset(OffsetSpec::Timestamp(probe))
            .expect("list")
            .map(|t| t.offset);
        assert_eq!(got, expect, "timestamp {probe}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig {
        // 256 cases take about 6 s on the loaded 2-core machine; GREGOR_PROPTEST_CASES=5000 for
        // a longer hunt.
        cases: std::env::var("GREGOR_PROPTEST_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(256),
        ..ProptestConfig::default()
    })]
    #[test]
    fn log_matches_model(ops in proptest::collection::vec(op(), 1..30)) {
        let dir = tempfile::tempdir().expect("tmp");
        let mut log = Some(open(dir.path(), config()));
        let mut m = Model::default();
        for (step, op) in ops.iter().enumerate() {
            let l = log.as_ref().expect("open log");
            match *op {
                Op::Append { records, batches } => {
                    let mut buf = Vec::new();
                    let ts = step as i64;
                    let mut base = m.leo();
                    let mut metas = Vec::new();
                    for _ in 0..batches {
                        let vals: Vec<String> =
                            (0..records).map(|i| format!("v{base}-{i}")).collect();
                        let kvs: Vec<(&str, Option<&str>)> =
                            vals.iter().map(|v| ("k", Some(v.as_str()))).collect();
                        buf.extend(kv_batch(&kvs, ts));
                        metas.push((base, records as i64, ts));
                        base += records as i64;
                    }
                    let info = l.append_as_leader(&buf, 0, NOW).expect("append");
                    prop_assert_eq!(info.first_offset, m.leo());
                    m.batches.extend(metas);
                }
                Op::Truncate(x) => {
                    let to = m.pick(x);
                    l.truncate_to(to).expect("truncate");
                    m.batches.retain(|b| b.0 + b.1 - 1 < to);
                    m.lso = m.lso.min(m.leo());
                }
                Op::DeleteRecords(x) => {
                    l.set_high_watermark(m.leo());
                    let to = m.pick(x);
                    l.delete_records_before(to).expect("delete records");
                    m.lso = m.lso.max(to);
                }
                Op::Reopen { clean } => {
                    let old = log.take().expect("open log");
                    if clean {
                        old.close().expect("close");
                    } else {
                        drop(old);
                    }
                    log = Some(open(dir.path(), config()));
                }
            }
            check(log.as_ref().expect("open log"), &m);
        }
    }
}
