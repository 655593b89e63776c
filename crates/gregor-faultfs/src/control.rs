//! The control socket: one command per line, one answer line per command (`ok ...` or
//! `err ...`).
//!
//! - `power-loss`: every file and directory reverts to its durable state; answers
//!   `ok files_reverted=N dirs_reverted=N inodes_dropped=N bytes_dropped=N`.
//! - `stats`: `ok inodes=N used_bytes=N max_bytes=N unsynced_files=N unsynced_dirs=N
//!   power_losses=N`.
//! - `unmount`: answers `ok`, then unmounts; the process exits once the kernel lets go.

use std::io::{BufRead, BufReader, Read, Write};
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::Path;
use std::sync::{Arc, Mutex, PoisonError};

use anyhow::Context;
use fuser::SessionUnmounter;
use tracing::{info, warn};

use crate::fs::{lock, Shared};

/// Longest command line read.
const MAX_LINE: u64 = 256;

pub fn bind(path: &Path) -> anyhow::Result<UnixListener> {
    match std::fs::remove_file(path) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
        Err(e) => return Err(e).with_context(|| format!("removing {}", path.display())),
    }
    UnixListener::bind(path).with_context(|| format!("binding {}", path.display()))
}

pub fn unmount(u: &Mutex<SessionUnmounter>) {
    if let Err(e) = u.lock().unwrap_or_else(PoisonError::into_inner).unmount() {
        warn!(error = %e, "unmount failed (busy?); `umount -l` the mountpoint");
    }
}

pub fn serve(listener: UnixListener, model: Shared, unmounter: Arc<Mutex<SessionUnmounter>>) {
    for conn in listener.incoming() {
        let Ok(conn) = conn else { continue };
        let model = model.clone();
        let unmounter = unmounter.clone();
        // One thread per client: a test holds at most a couple of connections.
        std::thread::spawn(move || {
            if let Err(e) = client(conn, &model, &unmounter) {
                warn!(error = %e, "control connection");
            }
        });
    }
}

fn client(
    conn: UnixStream,
    model: &Shared,
    unmounter: &Mutex<SessionUnmounter>,
) -> std::io::Result<()> {
    let mut out = conn.try_clone()?;
    let mut reader = BufReader::new(conn);
    loop {
        let mut line = String::new();
        if (&mut reader).take(MAX_LINE).read_line(&mut line)? == 0 {
            return Ok(());
        }
        let cmd = line.trim();
        match cmd {
            "power-loss" => {
                let r = lock(model).power_loss();
                info!(
                    files_reverted = r.files_reverted,
                    dirs_reverted = r.dirs_reverted,
                    inodes_dropped = r.inodes_dropped,
                    bytes_dropped = r.bytes_dropped,
                    "power loss"
                );
                for d in &r.details {
                    info!(detail = %d, "lost in the power loss");
                }
                writeln!(
                    out,
                    "ok files_reverted={} dirs_reverted={} inodes_dropped={} bytes_dropped={}",
                    r.files_reverted, r.dirs_reverted, r.inodes_dropped, r.bytes_dropped
                )?;
            }
            "stats" => {
                let s = lock(model).stats();
                writeln!(
                    out,
                    "ok inodes={} used_bytes={} max_bytes={} unsynced_files={} unsynced_dirs={} \
                     power_losses={}",
                    s.inodes,
                    s.used_bytes,
                    s.max_bytes,
                    s.unsynced_files,
                    s.unsynced_dirs,
                    s.power_losses
                )?;
            }
            "unmount" => {
                // Answered even if the client has already gone; unmounted either way.
                let _ = writeln!(out, "ok");
                unmount(unmounter);
                return Ok(());
            }
            "" => {}
            other => {
                let shown: String = other.chars().take(40).collect();
                writeln!(
                    out,
                    "err unknown command {shown:?} (commands: power-loss, stats, unmount)"
                )?;
            }
        }
    }
}
