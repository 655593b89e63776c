//! Text tables for `gregor lab load`: per step the strategies side by side, the `load`
//! assignor's moves with their reasons, then a summary over the whole scenario.

use std::fmt::Write;

use super::load_sim::{LoadReport, StepFigures};

pub fn render(report: &LoadReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "scenario {} (load threshold {:.0}%)",
        report.scenario,
        report.threshold * 100.0
    );
    if !report.description.is_empty() {
        let _ = writeln!(out, "  {}", report.description);
    }
    let topics: Vec<String> = report
        .topics
        .iter()
        .map(|(t, n)| format!("{t} ({n} partitions)"))
        .collect();
    let _ = writeln!(out, "  topics: {}", topics.join(", "));
    let steps = report.strategies.first().map_or(0, |s| s.steps.len());
    for i in 0..steps {
        render_step(&mut out, report, i);
    }
    render_summary(&mut out, report);
    out
}

fn render_step(out: &mut String, report: &LoadReport, i: usize) {
    let first = &report.strategies[0].steps[i];
    let _ = writeln!(
        out,
        "\nstep {}: {}  [total {:.2} MB/s; no assignment gives the most loaded member under {}]",
        i + 1,
        first.label,
        first.total_load / 1e6,
        pct(first.bound_share)
    );
    let _ = writeln!(
        out,
        "  {:<9} {:>9} {:>6} {:>6} {:>9}  member loads (MB/s, largest first)",
        "strategy", "max share", "moved", "rounds", "compute"
    );
    for run in &report.strategies {
        let s = &run.steps[i];
        let _ = writeln!(
            out,
            "  {:<9} {:>9} {:>6} {:>6} {:>6} us  {}",
            run.strategy,
            pct(s.max_share),
            s.moved,
            s.rounds,
            s.compute_micros,
            loads_text(s)
        );
    }
    for run in &report.strategies {
        for line in &run.steps[i].timeline {
            let _ = writeln!(out, "    {} {line}", run.strategy);
        }
    }
}

fn render_summary(out: &mut String, report: &LoadReport) {
    let _ = writeln!(out, "\n== summary (all steps, same run) ==");
    let _ = writeln!(
        out,
        "{:<9} {:>15} {:>12} {:>6} {:>6} {:>11}",
        "strategy", "worst max share", "worst excess", "moved", "rounds", "compute"
    );
    for run in &report.strategies {
        let worst = run.steps.iter().map(|s| s.max_share).fold(0.0, f64::max);
        // How far above the bound the most loaded member sat, at its worst step.
        let excess = run
            .steps
            .iter()
            .map(|s| s.max_share - s.bound_share)
            .fold(0.0, f64::max);
        let moved: usize = run.steps.iter().map(|s| s.moved).sum();
        let rounds: u32 = run.steps.iter().map(|s| s.rounds).sum();
        let micros: u128 = run.steps.iter().map(|s| s.compute_micros).sum();
        let _ = writeln!(
            out,
            "{:<9} {:>15} {:>12} {:>6} {:>6} {:>8} us",
            run.strategy,
            pct(worst),
            format!("+{}", pct(excess)),
            moved,
            rounds,
            micros
        );
    }
}

fn pct(share: f64) -> String {
    format!("{:.1}%", share * 100.0)
}

fn loads_text(s: &StepFigures) -> String {
    let mut v: Vec<f64> = s.member_loads.values().copied().collect();
    v.sort_by(|a, b| b.total_cmp(a));
    v.iter()
        .map(|l| format!("{:.2}", l / 1e6))
        .collect::<Vec<_>>()
        .join(" ")
}
