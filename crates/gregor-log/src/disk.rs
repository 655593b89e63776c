//! File helpers shared by the log: positioned writes, syncs and atomic file replacement, all
//! routed through an optional [`FaultInjector`] so tests can simulate a full disk or a failing
//! fsync without root privileges.

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;

use crate::error::{IoContext, Result};

/// Test hook that makes the log's writes and syncs fail like a full or broken disk would.
#[derive(Debug)]
pub struct FaultInjector {
    write_budget: AtomicU64,
    fail_sync: AtomicBool,
    /// Milliseconds every sync takes (a slow disk).
    sync_delay_ms: AtomicU64,
}

impl Default for FaultInjector {
    fn default() -> Self {
        FaultInjector {
            write_budget: AtomicU64::new(u64::MAX),
            fail_sync: AtomicBool::new(false),
            sync_delay_ms: AtomicU64::new(0),
        }
    }
}

impl FaultInjector {
    /// A new injector that lets everything through.
    pub fn new() -> Arc<FaultInjector> {
        Arc::new(FaultInjector::default())
    }

    /// Allow only `bytes` more bytes to be written (across all files of the log); the write that
    /// crosses the limit writes what fits and then fails with `ENOSPC`. `None` lifts the limit.
    pub fn set_write_budget(&self, bytes: Option<u64>) {
        self.write_budget
            .store(bytes.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Make every following sync fail with `EIO` (or succeed again).
    pub fn set_fail_sync(&self, fail: bool) {
        self.fail_sync.store(fail, Ordering::SeqCst);
    }

    /// Make every following sync take this long before it completes (a slow disk).
    pub fn set_sync_delay(&self, delay: std::time::Duration) {
        self.sync_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// Take up to `want` bytes from the budget; returns how many may be written.
    fn take(&self, want: u64) -> u64 {
        let mut cur = self.write_budget.load(Ordering::SeqCst);
        loop {
            if cur == u64::MAX {
                return want;
            }
            let grant = want.min(cur);
            match self.write_budget.compare_exchange(
                cur,
                cur - grant,
                Ordering::SeqCst,
                Ordering::SeqCst,
            ) {
                Ok(_) => return grant,
                Err(now) => cur = now,
            }
        }
    }
}

/// The log's access to the disk.
#[derive(Debug, Clone, Default)]
pub(crate) struct Disk {
    pub faults: Option<Arc<FaultInjector>>,
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

impl Disk {
    /// `pwrite` all of `buf` at `pos` (a short write then `ENOSPC` under the fault injector).
    pub fn write_at(&self, file: &File, buf: &[u8], pos: u64) -> io::Result<()> {
        if let Some(f) = &self.faults {
            let grant = f.take(buf.len() as u64) as usize;
            file.write_all_at(&buf[..grant], pos)?;
            if grant < buf.len() {
                return Err(enospc());
            }
            return Ok(());
        }
        file.write_all_at(buf, pos)
    }

    /// Write the concatenation of `parts` at `pos` with positioned vectored writes (no copy).
    pub fn write_parts_at(&self, file: &File, parts: &[&[u8]], pos: u64) -> io::Result<()> {
        if self.faults.is_some() {
            return self.write_at(file, &parts.concat(), pos);
        }
        // One positioned vectored write (pwritev): no seek, no copy of the batch bodies.
        let mut slices: Vec<IoSlice<'_>> = parts.iter().map(|p| IoSlice::new(p)).collect();
        let mut slices = &mut slices[..];
        let mut at = pos;
        while !slices.is_empty() {
            match rustix::io::pwritev(file, slices, at) {
                Ok(0) => return Err(io::Error::from(io::ErrorKind::WriteZero)),
                Ok(n) => {
                    IoSlice::advance_slices(&mut slices, n);
                    at += n as u64;
                }
                Err(e) if e == rustix::io::Errno::INTR => {}
                Err(e) => return Err(e.into()),
            }
        }
        Ok(())
    }

    /// Reserves disk blocks for `len` bytes at `offset` without changing the file's size
    /// (`fallocate` with `FALLOC_FL_KEEP_SIZE`). Appends into reserved blocks skip the file
    /// system's block allocation (about 40% faster page-cache writes on ext4 here), and the file
    /// size still ends at the last batch, so recovery sees no zero tail. Skipped under fault
    /// injection, whose space budget is counted on writes.
    pub fn preallocate(&self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        if self.faults.is_some() || len == 0 {
            return Ok(());
        }
        rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, offset, len)
            .map_err(io::Error::from)
    }

    /// `fdatasync`.
    pub fn sync_data(&self, file: &File) -> io::Result<()> {
        if let Some(f) = &self.faults {
            let delay = f.sync_delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                std::thread::sleep(std::time::Duration::from_millis(delay));
            }
            if f.fail_sync.load(Ordering::SeqCst) {
                return Err(io::Error::from_raw_os_error(5));
            }
        }
        file.sync_data()
    }

    /// `fsync` a directory so that created, renamed and removed entries are durable.
    pub fn sync_dir(&self, dir: &Path) -> Result<()> {
        let d = File::open(dir).at(dir)?;
        self.sync_data(&d).at(dir)
    }

    /// Replace `path` atomically with `contents`: write `path.tmp`, fsync, rename, fsync the
    /// directory. A crash leaves either the old or the new file.
    pub fn write_atomic(&self, path: &Path, contents: &[u8]) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = std::path::PathBuf::from(tmp);
        let f = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .open(&tmp)
            .at(&tmp)?;
        let r = self
            .write_at(&f, contents, 0)
            .and_then(|()| self.sync_data(&f));
        if let Err(e) = r {
            let _ = fs::remove_file(&tmp);
            return Err(crate::LogError::io(&tmp, e));
        }
        drop(f);
        fs::rename(&tmp, path).at(path)?;
        self.sync_dir(path.parent().unwrap_or(Path::new(".")))
    }
}
