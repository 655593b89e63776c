//! The bench's text output.

use super::figures::{ConsumeCase, ConsumerFigure};

/// The line listing every run's MB/s, when there were several (empty otherwise).
fn render_runs(runs: &[f64]) -> String {
    if runs.len() < 2 {
        return String::new();
    }
    let each: Vec<String> = runs.iter().map(|r| format!("{r:.0}")).collect();
    format!(
        "    the median of {} runs (MB/s, in order: {})\n",
        each.len(),
        each.join(", ")
    )
}

fn render_figure(name: &str, f: &ConsumerFigure) -> String {
    let mut s = format!(
        "  {name:<17} {:>8.1} MB/s  {:.2} of loopback\n",
        f.mb_per_s, f.ratio_to_loopback
    );
    s += &render_runs(&f.runs_mb_per_s);
    if let Some(p) = f.paired_ratio {
        let each: Vec<String> = f
            .runs_paired_ratio
            .iter()
            .map(|r| format!("{r:.2}"))
            .collect();
        s += &format!(
            "    {p:.2} of loopback run by run (each run over a loopback run just before it; in order: {})\n",
            each.join(", ")
        );
    }
    let cpu = |who: &str, per_gb: Option<f64>, share: Option<f64>, ceil: Option<f64>| {
        per_gb.map_or(String::new(), |c| {
            format!(
                "    {who:<7} CPU {c:.2} s/GB, {:.2} of a core, ceiling on one core {:.0} MB/s\n",
                share.unwrap_or(0.0),
                ceil.unwrap_or(0.0)
            )
        })
    };
    s += &cpu(
        "client",
        f.client_cpu_s_per_gb,
        f.client_cpu_share,
        f.client_ceiling_mb_per_s,
    );
    s += &cpu(
        "broker",
        f.broker_cpu_s_per_gb,
        f.broker_cpu_share,
        f.broker_ceiling_mb_per_s,
    );
    if let Some(m) = f.machine_ceiling_mb_per_s {
        s += &format!("    both on all the machine's cores: ceiling {m:.0} MB/s\n");
    }
    if let (Some(n), Some(w)) = (f.fetches, f.fetch_window_bytes) {
        s += &format!(
            "    {n} Fetches, fetch window {:.1} MiB at the end\n",
            w as f64 / f64::from(1u32 << 20)
        );
    }
    s
}

pub(super) fn render(c: &ConsumeCase) -> String {
    let mut s = format!(
        "consume, {} partitions: {} records, {:.1} MB; loopback TCP {:.1} MB/s, page-cache read {:.1} MB/s\n",
        c.partitions,
        c.records,
        c.bytes as f64 / 1e6,
        c.loopback_mb_per_s,
        c.page_cache_mb_per_s
    );
    for l in &c.loopback_runs {
        s += &format!(
            "  loopback, {}-byte reads: {:.1} MB/s, CPU sender {:.2} s/GB, receiver {:.2} s/GB (ceiling on one core {:.0} MB/s){}\n",
            l.read_bytes,
            l.mb_per_s,
            l.sender_cpu_s_per_gb,
            l.receiver_cpu_s_per_gb,
            l.receiver_ceiling_mb_per_s.unwrap_or(0.0),
            if l.read_bytes == c.loopback.read_bytes { " (the baseline)" } else { "" }
        );
        s += &render_runs(&l.runs_mb_per_s);
    }
    if let Some(f) = &c.librdkafka {
        s += &render_figure("librdkafka", f);
    }
    if let Some(f) = &c.librdkafka_tuned {
        s += &render_figure("librdkafka, tuned", f);
    }
    if let Some(cmd) = &c.librdkafka_tuned_command {
        s += &format!("    ({cmd})\n");
    }
    for (name, r) in [
        ("librdkafka, replay", &c.librdkafka_replay),
        ("librdkafka, tuned, replay", &c.librdkafka_tuned_replay),
    ] {
        let Some(r) = r else { continue };
        s += &render_figure(name, &r.consumer);
        s += &format!(
            "    {} Fetches answered from memory ({:.1} MB held), {} forwarded{}; the broker gave librdkafka {:.2} of the replay's MB/s{}\n",
            r.fetches_replayed,
            r.mb_held,
            r.fetches_forwarded,
            if r.replayed_share < 0.95 { " (too few from memory: not a ceiling)" } else { "" },
            r.broker_of_replay.unwrap_or(0.0),
            r.proxy_error.as_ref().map_or(String::new(), |e| format!("; proxy error: {e}"))
        );
    }
    s += &render_figure("gregor", &c.gregor);
    if let (Some(f), Some(n)) = (&c.gregor_tuned, c.gregor_tuned_fetch_max_bytes) {
        s += &render_figure("gregor, tuned", f);
        s += &format!("    (fetch.max.bytes={n})\n");
    }
    s += &format!("  (gregor group join {:.2} s, not timed)", c.gregor_join_s);
    s
}
