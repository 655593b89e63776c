//! Each seed in a process of its own.
//!
//! A seed's run depends on nothing but the seed inside one process (see `entropy`), but some
//! state outlives a run in the process: tokio seeds every new runtime's scheduler (the branch
//! order of `select!`) from a process-wide counter, so a seed run after other seeds in the same
//! process can take another path than the same seed run alone. Runs of many seeds therefore
//! start one `gregor-sim --child` process per seed: every seed behaves exactly as
//! `gregor-sim --seed S` replays it. Separate processes also run in parallel.

use std::collections::BTreeMap;
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;

use crate::run::{Mode, Outcome, SimOptions};

/// Why a child run gave no outcome.
#[derive(Debug, thiserror::Error)]
pub enum ChildError {
    #[error("cannot start {exe}: {source}")]
    Spawn { exe: String, source: std::io::Error },
    #[error("seed {seed}: the child process failed ({status}; its stderr above says why)")]
    Failed {
        seed: u64,
        status: std::process::ExitStatus,
    },
    #[error("seed {seed}: unreadable outcome from the child process: {source}")]
    Unreadable {
        seed: u64,
        source: serde_json::Error,
    },
}

/// The arguments that make `gregor-sim` run `options` alone and print its whole outcome.
pub fn child_args(options: &SimOptions) -> Vec<String> {
    let mut args = vec![
        "--child".to_string(),
        "--seed".to_string(),
        options.seed.to_string(),
    ];
    if options.mode == Mode::Replication {
        args.push("--replication".into());
    }
    let flags = [
        (options.power_loss, "--power-loss"),
        (options.admin, "--admin"),
        (options.groups, "--groups"),
        (options.disk_faults, "--disk-faults"),
        (options.slow_disk, "--slow-disk"),
        (options.clock_jumps, "--clock-jumps"),
        (options.cascading_crashes, "--cascading-crashes"),
        (options.topic_admin, "--topic-admin"),
    ];
    args.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, flag)| flag.to_string()),
    );
    if let Some(bug) = options.bug {
        args.push("--plant".into());
        args.push(bug.name().into());
    }
    args
}

/// Runs one seed in a child process of the simulator binary `exe`.
pub fn run_seed_in_child(exe: &Path, options: SimOptions) -> Result<Outcome, ChildError> {
    // The child's logs (RUST_LOG) go where this process's go.
    let out = Command::new(exe)
        .args(child_args(&options))
        .stderr(std::process::Stdio::inherit())
        .output()
        .map_err(|source| ChildError::Spawn {
            exe: exe.display().to_string(),
            source,
        })?;
    if !out.status.success() {
        return Err(ChildError::Failed {
            seed: options.seed,
            status: out.status,
        });
    }
    serde_json::from_slice(&out.stdout).map_err(|source| ChildError::Unreadable {
        seed: options.seed,
        source,
    })
}

/// Runs every seed of `runs` in a child process, `jobs` at a time, and hands each outcome to
/// `each` in the order of `runs` (as soon as it and every earlier one are done).
pub fn run_seeds_in_children(
    exe: &Path,
    runs: &[SimOptions],
    jobs: usize,
    mut each: impl FnMut(Result<Outcome, ChildError>),
) {
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel();
    std::thread::scope(|s| {
        for _ in 0..jobs.clamp(1, runs.len().max(1)) {
            let tx = tx.clone();
            let next = &next;
            s.spawn(move || loop {
                let i = next.fetch_add(1, Ordering::Relaxed);
                let Some(options) = runs.get(i) else {
                    return;
                };
                if tx.send((i, run_seed_in_child(exe, *options))).is_err() {
                    return;
                }
            });
        }
        drop(tx);
        let mut done = BTreeMap::new();
        let mut printed = 0;
        for (i, outcome) in rx {
            done.insert(i, outcome);
            while let Some(outcome) = done.remove(&printed) {
                each(outcome);
                printed += 1;
            }
        }
    });
}
