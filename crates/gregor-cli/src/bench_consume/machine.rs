//! What the machine itself gives and costs, for the bench's baselines: a process's CPU time
//! from `/proc`, and loopback TCP between two threads of this process.

use std::io::{Read, Write};
use std::time::Instant;

use anyhow::{bail, Context, Result};

use super::figures::LoopbackFigure;

/// User + system CPU seconds of a process so far (fields 14 and 15 of `/proc/<pid>/stat`,
/// in clock ticks), all its threads included.
pub(super) fn cpu_seconds(pid: u32, ticks_per_s: f64) -> Result<f64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat"))
        .with_context(|| format!("--broker-pid {pid}"))?;
    stat_cpu(&stat, 11, ticks_per_s)
}

/// This process's CPU seconds so far: its own, or with `children` its reaped children's.
pub(super) fn self_cpu_seconds(children: bool, ticks_per_s: f64) -> Result<f64> {
    let stat = std::fs::read_to_string("/proc/self/stat").context("/proc/self/stat")?;
    stat_cpu(&stat, if children { 13 } else { 11 }, ticks_per_s)
}

/// Fields `at` and `at + 1` of a `/proc/<pid>/stat` line, counted from field 3, in seconds.
fn stat_cpu(stat: &str, at: usize, ticks_per_s: f64) -> Result<f64> {
    // The command name (field 2) may hold spaces; the fields after it start past its ')'.
    let rest = stat
        .rsplit_once(')')
        .map(|(_, r)| r)
        .context("unexpected /proc stat format")?;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    // `rest` starts at field 3 (state): utime is field 14, stime 15 (at 11), cutime 16 and
    // cstime 17 (at 13).
    let utime: f64 = fields.get(at).context("no utime")?.parse()?;
    let stime: f64 = fields.get(at + 1).context("no stime")?.parse()?;
    Ok((utime + stime) / ticks_per_s)
}

/// Clock ticks per second, as `getconf` reports them (the unit of `/proc/<pid>/stat`).
pub(super) fn clock_ticks() -> Result<f64> {
    let out = std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .context("getconf CLK_TCK")?;
    let ticks: f64 = String::from_utf8_lossy(&out.stdout).trim().parse()?;
    if ticks <= 0.0 {
        bail!("getconf CLK_TCK gave {ticks}");
    }
    Ok(ticks)
}

/// Loopback TCP: one thread sends `bytes` over 127.0.0.1 in 1 MiB writes, this one receives
/// them `read_bytes` at a time; MB/s from the connection to the last byte received, and each
/// thread's CPU time (`CLOCK_THREAD_CPUTIME_ID`) per GB.
pub(super) fn loopback(bytes: u64, read_bytes: usize) -> Result<LoopbackFigure> {
    let listener = std::net::TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let start = Instant::now();
    let sender = std::thread::spawn(move || -> std::io::Result<f64> {
        let cpu = crate::bench_assign::thread_cpu_ms();
        let mut s = std::net::TcpStream::connect(addr)?;
        let buf = vec![b'x'; 1 << 20];
        let mut left = bytes;
        while left > 0 {
            let n = left.min(buf.len() as u64) as usize;
            s.write_all(&buf[..n])?;
            left -= n as u64;
        }
        Ok(crate::bench_assign::thread_cpu_ms() - cpu)
    });
    let cpu = crate::bench_assign::thread_cpu_ms();
    let (mut r, _) = listener.accept()?;
    let mut buf = vec![0u8; read_bytes];
    let mut got = 0u64;
    while got < bytes {
        let n = r.read(&mut buf)?;
        if n == 0 {
            bail!("loopback sender stopped after {got} of {bytes} bytes");
        }
        got += n as u64;
    }
    let secs = start.elapsed().as_secs_f64();
    let receiver_ms = crate::bench_assign::thread_cpu_ms() - cpu;
    let sender_ms = sender
        .join()
        .map_err(|_| anyhow::anyhow!("loopback sender panicked"))??;
    let gb = bytes as f64 / 1e9;
    let receiver_cpu_s_per_gb = receiver_ms / 1e3 / gb;
    let mb_per_s = bytes as f64 / 1e6 / secs.max(1e-9);
    Ok(LoopbackFigure {
        read_bytes,
        mb_per_s,
        runs_mb_per_s: vec![mb_per_s],
        sender_cpu_s_per_gb: sender_ms / 1e3 / gb,
        receiver_cpu_s_per_gb,
        receiver_ceiling_mb_per_s: ceiling(receiver_cpu_s_per_gb),
    })
}

/// MB/s one core reaches at `cpu_s_per_gb` CPU seconds per GB (`None` when no CPU time was
/// measured: too short a run for the clock's ticks).
pub(super) fn ceiling(cpu_s_per_gb: f64) -> Option<f64> {
    (cpu_s_per_gb > 0.0).then(|| 1e3 / cpu_s_per_gb)
}
