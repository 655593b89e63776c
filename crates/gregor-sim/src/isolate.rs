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

use crate::options::{Mode, Outcome, SimOptions};

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
    #[error(
        "seed {seed}: the child process made no progress for {secs} s of real time and was \
         killed (a hang: replay it with --seed {seed} and attach a debugger)"
    )]
    Hung { seed: u64, secs: u64 },
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
        (options.stalls, "--stalls"),
        (options.static_members, "--static-members"),
        (options.disk_faults, "--disk-faults"),
        (options.slow_disk, "--slow-disk"),
        (options.clock_jumps, "--clock-jumps"),
        (options.cascading_crashes, "--cascading-crashes"),
        (options.topic_admin, "--topic-admin"),
        (options.acls, "--acls"),
        (options.quotas, "--quotas"),
        (options.transactions, "--transactions"),
        (options.splits, "--splits"),
        (options.bridges, "--bridges"),
        (options.overlaps, "--overlaps"),
    ];
    args.extend(
        flags
            .iter()
            .filter(|(on, _)| *on)
            .map(|(_, flag)| flag.to_string()),
    );
    if options.consumer_protocol || options.mixed_protocols {
        args.push("--group-protocol".into());
        let protocol = if options.mixed_protocols {
            "mixed"
        } else if options.load_assignor {
            "load"
        } else {
            "consumer"
        };
        args.push(protocol.into());
    }
    if let Some(bug) = options.bug {
        args.push("--plant".into());
        args.push(bug.name().into());
    }
    args
}

/// A seed takes seconds of real time; one still running after this long is stuck (a deadlock
/// of the simulated world's one thread stops simulated time too, so no simulated bound fires).
pub const CHILD_REAL_TIME_LIMIT: std::time::Duration = std::time::Duration::from_secs(600);

/// Runs one seed in a child process of the simulator binary `exe`.
pub fn run_seed_in_child(exe: &Path, options: SimOptions) -> Result<Outcome, ChildError> {
    // The child's logs (RUST_LOG) go where this process's go.
    let spawn_error = |source| ChildError::Spawn {
        exe: exe.display().to_string(),
        source,
    };
    let mut command = Command::new(exe);
    if let Some(dir) = node_files_dir() {
        command.env("TMPDIR", dir);
    }
    let mut child = command
        .args(child_args(&options))
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::inherit())
        .spawn()
        .map_err(spawn_error)?;
    // Read the outcome while the child runs (a long trace would fill the pipe).
    let mut stdout = child.stdout.take().expect("stdout was piped");
    let reader = std::thread::spawn(move || {
        let mut bytes = Vec::new();
        std::io::Read::read_to_end(&mut stdout, &mut bytes).map(|_| bytes)
    });
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().map_err(spawn_error)? {
            break status;
        }
        if started.elapsed() > CHILD_REAL_TIME_LIMIT {
            let _ = child.kill();
            let _ = child.wait();
            return Err(ChildError::Hung {
                seed: options.seed,
                secs: CHILD_REAL_TIME_LIMIT.as_secs(),
            });
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    };
    let stdout = match reader.join() {
        Ok(Ok(bytes)) => bytes,
        Ok(Err(e)) => return Err(spawn_error(e)),
        Err(panic) => std::panic::resume_unwind(panic),
    };
    if !status.success() {
        return Err(ChildError::Failed {
            seed: options.seed,
            status,
        });
    }
    serde_json::from_slice(&stdout).map_err(|source| ChildError::Unreadable {
        seed: options.seed,
        source,
    })
}

/// Where a child puts its nodes' files: the caller's `TMPDIR` if it set one, else tmpfs
/// (`/dev/shm`) where there is a writable one. A seed is bound by its nodes' fsyncs on a real
/// disk (a replicated seed took 1.2 s of wall time per seed on ext4 against 0.3 s on tmpfs, two
/// at a time on two cores); the trace holds no paths, so a seed runs the same on either.
fn node_files_dir() -> Option<&'static str> {
    const TMPFS: &str = "/dev/shm";
    if std::env::var_os("TMPDIR").is_some() {
        return None;
    }
    let writable = std::fs::metadata(TMPFS)
        .map(|m| m.is_dir() && !m.permissions().readonly())
        .unwrap_or(false);
    writable.then_some(TMPFS)
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
