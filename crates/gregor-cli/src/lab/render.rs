//! Human-readable tables for `gregor lab`.

use std::collections::BTreeMap;
use std::fmt::Write;

use super::simulate::{LabReport, StepResult};

/// `t[0-3,6] u[1]`: partitions grouped by topic with consecutive numbers folded into ranges.
pub fn compact(partitions: &[String]) -> String {
    let mut by_topic: Vec<(String, Vec<i64>)> = Vec::new();
    for p in partitions {
        let (t, n) = p.rsplit_once('-').unwrap_or((p.as_str(), "0"));
        let n: i64 = n.parse().unwrap_or(0);
        match by_topic.iter_mut().find(|(name, _)| name == t) {
            Some((_, v)) => v.push(n),
            None => by_topic.push((t.to_string(), vec![n])),
        }
    }
    if by_topic.is_empty() {
        return "-".to_string();
    }
    by_topic
        .into_iter()
        .map(|(t, mut ns)| {
            ns.sort_unstable();
            let mut parts = Vec::new();
            let mut i = 0;
            while i < ns.len() {
                let mut j = i;
                while j + 1 < ns.len() && ns[j + 1] == ns[j] + 1 {
                    j += 1;
                }
                parts.push(if j > i + 1 {
                    format!("{}-{}", ns[i], ns[j])
                } else if j == i + 1 {
                    format!("{},{}", ns[i], ns[j])
                } else {
                    ns[i].to_string()
                });
                i = j + 1;
            }
            format!("{t}[{}]", parts.join(","))
        })
        .collect::<Vec<_>>()
        .join(" ")
}

fn sizes_text(sizes: &BTreeMap<String, usize>) -> String {
    if sizes.is_empty() {
        return "-".into();
    }
    // Largest first, as seed 002 writes them (4-3, 3-2-2).
    let mut v: Vec<usize> = sizes.values().copied().collect();
    v.sort_unstable_by(|a, b| b.cmp(a));
    v.iter()
        .map(|s| s.to_string())
        .collect::<Vec<_>>()
        .join("-")
}

pub fn render_text(report: &LabReport) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "scenario {}", report.scenario);
    if !report.description.is_empty() {
        let _ = writeln!(out, "  {}", report.description);
    }
    let topics: Vec<String> = report
        .topics
        .iter()
        .map(|(t, n)| format!("{t} ({n} partitions)"))
        .collect();
    let _ = writeln!(out, "  topics: {}", topics.join(", "));

    for run in &report.strategies {
        let _ = writeln!(out, "\n== {} ({}) ==", run.strategy, run.protocol);
        for (i, step) in run.steps.iter().enumerate() {
            render_step(&mut out, i, step);
        }
    }

    // Seed 002's comparison table: one row per step and strategy.
    if report.strategies.len() > 1 {
        render_comparison(&mut out, report);
    }
    out
}

/// One step of a strategy's run: its figures and each member's assignment.
fn render_step(out: &mut String, i: usize, step: &StepResult) {
    let bound = step.lower_bound.map_or("?".to_string(), |b| b.to_string());
    let _ = writeln!(
        out,
        "step {}: {}  [sizes {}, skew {} (lower bound {}), moved {}, rounds {}]",
        i + 1,
        step.label,
        sizes_text(&step.sizes),
        step.skew,
        bound,
        step.moved,
        step.rounds
    );
    let width = step
        .assignment
        .keys()
        .map(String::len)
        .max()
        .unwrap_or(6)
        .max(6);
    let _ = writeln!(
        out,
        "  {:width$}  {:>5}  {:<32}  revoked",
        "member", "count", "assignment"
    );
    for (m, ps) in &step.assignment {
        let revoked = step.revoked.get(m).map_or("-".to_string(), |r| compact(r));
        let _ = writeln!(
            out,
            "  {m:width$}  {:>5}  {:<32}  {revoked}",
            ps.len(),
            compact(ps)
        );
    }
    if let Some(first) = &step.first_round {
        let firsts: Vec<String> = first
            .iter()
            .map(|(m, ps)| format!("{m}={}", compact(ps)))
            .collect();
        let _ = writeln!(out, "  first round: {}", firsts.join("  "));
    }
}

/// The comparison table: one row per step and strategy.
fn render_comparison(out: &mut String, report: &LabReport) {
    let _ = writeln!(out, "\n== comparison ==");
    let _ = writeln!(
        out,
        "{:<24} {:<20} {:<10} {:>5} {:>8} {:>6}  revoked",
        "step", "strategy", "sizes", "skew", "moved", "rounds"
    );
    let steps = report.strategies[0].steps.len();
    for i in 0..steps {
        for run in &report.strategies {
            let s = &run.steps[i];
            let revoked: Vec<String> = s
                .revoked
                .iter()
                .filter(|(_, r)| !r.is_empty())
                .map(|(m, r)| format!("{m}:{}", compact(r)))
                .collect();
            let _ = writeln!(
                out,
                "{:<24} {:<20} {:<10} {:>5} {:>8} {:>6}  {}",
                truncate(&s.label, 24),
                run.strategy,
                sizes_text(&s.sizes),
                s.skew,
                s.moved,
                s.rounds,
                if revoked.is_empty() {
                    "-".to_string()
                } else {
                    revoked.join(" ")
                }
            );
        }
    }
}

fn truncate(s: &str, n: usize) -> String {
    if s.chars().count() <= n {
        s.to_string()
    } else {
        let mut t: String = s.chars().take(n - 1).collect();
        t.push('…');
        t
    }
}

#[cfg(test)]
mod tests {
    use super::compact;

    #[test]
    fn folds_ranges() {
        let ps: Vec<String> = ["t-0", "t-1", "t-2", "t-3", "t-6", "u-1", "t-8", "t-9"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(compact(&ps), "t[0-3,6,8,9] u[1]");
        assert_eq!(compact(&[]), "-");
    }
}
