//! Whether a range of a file is in the page cache, asked of the kernel with `cachestat(2)`
//! (Linux 6.5 and later).
//!
//! The fetch path reads segment files from async workers only where that cannot wait for the
//! disk: `sendfile` (which reads the file) when every page of its slice is cached, and the
//! batch-header reads that locate a fetch's records (with `RWF_NOWAIT`, or where a file system
//! refuses that flag, as tmpfs does, after this check). The rest goes to the blocking pool.
//!
//! The answer can be stale by the time the read runs (a page evicted in between): the worker
//! then waits for that page, which is what every `sendfile` on a network thread risks without
//! the check. Where the kernel lacks the call, or a sandbox refuses it, every range counts as
//! not cached and callers use the blocking pool.

use std::fs::File;
use std::sync::atomic::{AtomicBool, Ordering};

/// Set once the kernel has refused `cachestat`: later ranges skip the call.
static UNSUPPORTED: AtomicBool = AtomicBool::new(false);

/// True when every page of `len` bytes at `pos` in `file` is in the page cache now.
/// An empty range is cached; any failure of the call answers `false`.
pub fn is_cached(file: &File, pos: u64, len: usize) -> bool {
    if len == 0 {
        return true;
    }
    if UNSUPPORTED.load(Ordering::Relaxed) {
        return false;
    }
    let Some(end) = pos.checked_add(len as u64) else {
        return false;
    };
    let page = page_size();
    let pages = (end - 1) / page - pos / page + 1;
    match cachestat(file, pos, len as u64) {
        Ok(cached) => cached >= pages,
        Err(e) => {
            let refused = matches!(e.raw_os_error(), Some(libc::ENOSYS | libc::EPERM));
            if refused && !UNSUPPORTED.swap(true, Ordering::Relaxed) {
                tracing::info!(error = %e, "cachestat(2) unavailable: fetch responses' file bytes are sent from the blocking pool");
            }
            false
        }
    }
}

fn page_size() -> u64 {
    // SAFETY: sysconf reads a constant of the running system.
    let size = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    u64::try_from(size).ok().filter(|s| *s > 0).unwrap_or(4096)
}

/// `cachestat_range` of the kernel's UAPI.
#[repr(C)]
struct CachestatRange {
    off: u64,
    len: u64,
}

/// `cachestat` of the kernel's UAPI.
#[repr(C)]
#[derive(Default)]
struct Cachestat {
    nr_cache: u64,
    nr_dirty: u64,
    nr_writeback: u64,
    nr_evicted: u64,
    nr_recently_evicted: u64,
}

/// `cachestat`'s number: 451 in the table every architecture has shared since Linux 5.1.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const SYS_CACHESTAT: libc::c_long = 451;

/// Pages of the range in the page cache (dirty and under writeback included).
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
fn cachestat(file: &File, off: u64, len: u64) -> std::io::Result<u64> {
    use std::os::fd::AsRawFd;
    let range = CachestatRange { off, len };
    let mut stat = Cachestat::default();
    // SAFETY: the descriptor is open for the call (borrowed from `file`); both pointers name
    // live structs laid out as the kernel's, and flags must be 0.
    let r = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0u32,
        )
    };
    if r == 0 {
        Ok(stat.nr_cache)
    } else {
        Err(std::io::Error::last_os_error())
    }
}

#[cfg(not(any(target_arch = "x86_64", target_arch = "aarch64")))]
fn cachestat(_file: &File, _off: u64, _len: u64) -> std::io::Result<u64> {
    Err(std::io::Error::from_raw_os_error(libc::ENOSYS))
}

/// Writes the file's dirty pages and drops its clean ones from the page cache
/// (`POSIX_FADV_DONTNEED`): tests and benchmarks of cold reads. A tmpfs keeps every page.
pub fn evict(file: &File) -> std::io::Result<()> {
    file.sync_data()?;
    rustix::fs::fadvise(file, 0, None, rustix::fs::Advice::DontNeed)?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;

    #[test]
    fn written_pages_are_cached_and_evicted_ones_are_not() {
        let dir = tempfile::tempdir().expect("dir");
        let path = dir.path().join("segment");
        let mut f = File::create(&path).expect("create");
        f.write_all(&vec![7u8; 4 << 20]).expect("write");
        assert!(is_cached(&f, 0, 4 << 20), "just written");
        assert!(is_cached(&f, 4095, 2), "across a page boundary");
        assert!(is_cached(&f, 5, 0), "empty range");
        assert!(!is_cached(&f, (4 << 20) - 10, 4096 * 3), "past the end");
        evict(&f).expect("evict");
        assert!(!is_cached(&f, 0, 4 << 20), "evicted");
        // Reading a few bytes back caches their page (and readahead's few next ones), not
        // the file's last megabyte.
        let r = File::open(&path).expect("open");
        let mut buf = [0u8; 16];
        std::os::unix::fs::FileExt::read_exact_at(&r, &mut buf, 8192 + 100).expect("read");
        assert!(is_cached(&f, 8192, 4096), "read back");
        assert!(!is_cached(&f, 3 << 20, 1 << 20), "far from the read");
    }
}
