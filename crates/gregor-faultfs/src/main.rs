//! `gregor-faultfs MOUNTPOINT --control SOCKET`: a test tool. Mounts an in-memory FUSE file
//! system that keeps every write volatile until `fsync` and every new, renamed or removed name
//! volatile until its directory is synced, and that loses everything volatile on a
//! `power-loss` command (see the README for the commands and the exact semantics).

mod control;
mod fs;
mod model;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use anyhow::Context;
use clap::Parser;
use fuser::{Config, MountOption, Session};
use nix::sys::signal::{SigSet, Signal};
use tracing::{error, info};

#[derive(Parser)]
#[command(
    version,
    about = "Test tool: a FUSE file system that loses unsynced data on command"
)]
struct Args {
    /// Directory to mount on (must exist).
    mountpoint: PathBuf,
    /// Unix socket to create for commands (`power-loss`, `stats`, `unmount`), one per line.
    #[arg(long)]
    control: PathBuf,
    /// Most bytes of file data held in memory, counting volatile and durable copies; writes
    /// beyond it fail with ENOSPC.
    #[arg(long, default_value_t = 1 << 30)]
    max_bytes: u64,
    /// Milliseconds each write waits, applied but unanswered: widens the window in which a
    /// killed process leaves written, unsynced bytes behind.
    #[arg(long, default_value_t = 0)]
    write_delay_ms: u64,
}

fn main() -> anyhow::Result<()> {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let args = Args::parse();

    // SIGTERM and SIGINT unmount cleanly: block them here, before any thread exists, so that
    // every thread inherits the mask and only the waiting thread below receives them.
    let mut signals = SigSet::empty();
    signals.add(Signal::SIGTERM);
    signals.add(Signal::SIGINT);
    signals
        .thread_block()
        .context("blocking SIGTERM and SIGINT")?;

    let model = Arc::new(Mutex::new(model::Model::new(
        args.max_bytes,
        SystemTime::now(),
    )));
    let mut config = Config::default();
    config.mount_options = vec![
        MountOption::FSName("gregor-faultfs".into()),
        MountOption::RW,
        MountOption::NoAtime,
    ];
    let mut session = Session::new(
        fs::FaultFs::new(model.clone(), Duration::from_millis(args.write_delay_ms)),
        &args.mountpoint,
        &config,
    )
    .with_context(|| {
        format!(
            "mounting on {} (needs /dev/fuse, and root or fusermount3)",
            args.mountpoint.display()
        )
    })?;
    let unmounter = Arc::new(Mutex::new(session.unmount_callable()));

    let u = unmounter.clone();
    std::thread::Builder::new()
        .name("signals".into())
        .spawn(move || {
            if let Ok(sig) = signals.wait() {
                info!(signal = ?sig, "unmounting");
                control::unmount(&u);
            }
        })
        .context("starting the signal thread")?;

    // The socket appears only once the file system is mounted: its answer means "ready".
    let listener = control::bind(&args.control)?;
    let m = model.clone();
    let u = unmounter.clone();
    std::thread::Builder::new()
        .name("control".into())
        .spawn(move || control::serve(listener, m, u))
        .context("starting the control thread")?;
    info!(mountpoint = %args.mountpoint.display(), control = %args.control.display(), "mounted");

    let r = session.run();
    let _ = std::fs::remove_file(&args.control);
    if let Err(e) = &r {
        error!(error = %e, "session ended with an error");
    }
    r.context("serving FUSE requests")?;
    info!("unmounted");
    Ok(())
}
