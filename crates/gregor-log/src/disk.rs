//! The log's only door to the file system: file creation, positioned writes, size changes,
//! renames, removals, directory creation and removal, and the syncs of files and directories.
//! Everything goes through [`Disk`], so an optional [`FaultInjector`] can simulate a full disk,
//! a failing fsync, a crash in the middle of an operation, and a power loss that drops whatever
//! was not synced (see `power.rs`).
//!
//! It also carries the durable-write helpers that callers outside the log use for their own
//! small files: [`Disk::write_atomic`] (temp file, fsync, rename, fsync of the directory),
//! [`Disk::create_dir_all`] (each new directory's parent fsynced) and [`Disk::remove_dir_all`].

use std::fs::{self, File, OpenOptions};
use std::io::{self, IoSlice};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use crate::error::{IoContext, Result};
use crate::power::PowerModel;
pub use crate::power::{PowerLossReport, TornWrite};

/// Test hook that makes the log's writes and syncs fail like a full or broken disk would, and
/// (with [`FaultInjector::power_model`]) loses unsynced data like a power cut.
#[derive(Debug)]
pub struct FaultInjector {
    write_budget: AtomicU64,
    fail_sync: AtomicBool,
    /// Milliseconds every sync takes (a slow disk).
    sync_delay_ms: AtomicU64,
    /// Milliseconds every sync owes to a simulated clock (a slow disk under a simulation):
    /// not slept here but added to the calling thread's debt, see [`take_simulated_delay`].
    simulated_sync_delay_ms: AtomicU64,
    /// Mutating operations left before the simulated power cut (`u64::MAX`: none planned).
    ops_left: AtomicU64,
    /// The power is off: every operation fails until [`FaultInjector::power_loss`].
    dead: AtomicBool,
    power: Mutex<Option<PowerModel>>,
}

impl Default for FaultInjector {
    fn default() -> Self {
        FaultInjector {
            write_budget: AtomicU64::new(u64::MAX),
            fail_sync: AtomicBool::new(false),
            sync_delay_ms: AtomicU64::new(0),
            simulated_sync_delay_ms: AtomicU64::new(0),
            ops_left: AtomicU64::new(u64::MAX),
            dead: AtomicBool::new(false),
            power: Mutex::new(None),
        }
    }
}

thread_local! {
    /// Simulated time this thread's syncs have owed since the last [`take_simulated_delay`].
    static SIMULATED_DELAY_MS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Takes (and clears) the simulated time the syncs run on this thread have owed since the last
/// call (zero unless a [`FaultInjector::set_simulated_sync_delay`] is in force). Code that
/// runs under a simulation waits this long on its simulated clock after its file work.
pub fn take_simulated_delay() -> std::time::Duration {
    std::time::Duration::from_millis(SIMULATED_DELAY_MS.with(|d| d.replace(0)))
}

fn eio() -> io::Error {
    io::Error::from_raw_os_error(5)
}

impl FaultInjector {
    /// A new injector that lets everything through.
    pub fn new() -> Arc<FaultInjector> {
        Arc::new(FaultInjector::default())
    }

    /// An injector that also models power loss for everything under `root` (which must exist;
    /// its current contents count as durable). Written bytes stay volatile until their file is
    /// synced, and created, renamed and removed names until their directory is synced;
    /// [`FaultInjector::power_loss`] drops the rest.
    pub fn power_model(root: &Path) -> io::Result<Arc<FaultInjector>> {
        let f = FaultInjector::default();
        *f.model() = Some(PowerModel::new(root)?);
        Ok(Arc::new(f))
    }

    fn model(&self) -> MutexGuard<'_, Option<PowerModel>> {
        self.power.lock().unwrap_or_else(PoisonError::into_inner)
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

    /// Make every following sync (of a file or a directory) take this long on a simulated
    /// clock: the sync itself returns at once and the delay is added to the calling thread's
    /// debt, which the caller waits out on the clock it runs on ([`take_simulated_delay`]).
    /// A deterministic simulation cannot let a thread sleep in real time.
    pub fn set_simulated_sync_delay(&self, delay: std::time::Duration) {
        self.simulated_sync_delay_ms
            .store(delay.as_millis() as u64, Ordering::SeqCst);
    }

    /// A sync is about to complete: charge the simulated delay, if any, to this thread.
    fn charge_simulated_delay(&self) {
        let ms = self.simulated_sync_delay_ms.load(Ordering::SeqCst);
        if ms > 0 {
            SIMULATED_DELAY_MS.with(|d| d.set(d.get().saturating_add(ms)));
        }
    }

    /// Cut the power after `ops` more mutating operations (writes, size changes, creations,
    /// renames, removals, syncs): from then on every operation fails with `EIO`, as if the
    /// machine had stopped there. `None` cancels a planned cut.
    pub fn crash_after(&self, ops: Option<u64>) {
        self.ops_left
            .store(ops.unwrap_or(u64::MAX), Ordering::SeqCst);
    }

    /// Whether the power is off (a planned cut happened).
    pub fn is_dead(&self) -> bool {
        self.dead.load(Ordering::SeqCst)
    }

    /// Simulate a power loss and reboot: every byte not synced and every directory change not
    /// made durable by a directory sync is lost (the files under the model's root are rewritten
    /// to their durable state). With `torn_seed`, a prefix (seeded length, possibly empty or
    /// whole) of the last unsynced write survives as well. The power is on again afterwards.
    /// Close every log on the directory first. Fails if the injector has no power model.
    pub fn power_loss(&self, torn_seed: Option<u64>) -> io::Result<PowerLossReport> {
        let mut m = self.model();
        let Some(model) = m.as_mut() else {
            return Err(io::Error::other("fault injector has no power model"));
        };
        let report = model.power_loss(torn_seed)?;
        self.dead.store(false, Ordering::SeqCst);
        self.ops_left.store(u64::MAX, Ordering::SeqCst);
        Ok(report)
    }

    /// Paths the power model met that were not created through the log's `Disk` (a file
    /// operation that bypassed it; empty when every operation was routed).
    pub fn untracked_paths(&self) -> Vec<PathBuf> {
        self.model()
            .as_ref()
            .map(PowerModel::untracked)
            .unwrap_or_default()
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

    /// One mutating operation is about to run: fail it if the power is (now) off.
    fn gate(&self) -> io::Result<()> {
        if self.dead.load(Ordering::SeqCst) {
            return Err(eio());
        }
        let mut cur = self.ops_left.load(Ordering::SeqCst);
        while cur != u64::MAX {
            if cur == 0 {
                self.dead.store(true, Ordering::SeqCst);
                return Err(eio());
            }
            match self
                .ops_left
                .compare_exchange(cur, cur - 1, Ordering::SeqCst, Ordering::SeqCst)
            {
                Ok(_) => break,
                Err(now) => cur = now,
            }
        }
        Ok(())
    }
}

/// The log's access to the disk: the real file system, optionally behind a [`FaultInjector`].
#[derive(Debug, Clone, Default)]
pub struct Disk {
    pub(crate) faults: Option<Arc<FaultInjector>>,
}

fn enospc() -> io::Error {
    io::Error::from_raw_os_error(28)
}

impl Disk {
    /// The real file system.
    pub fn real() -> Disk {
        Disk::default()
    }

    /// The real file system behind a fault injector (and its power model, if it has one).
    pub fn with_faults(faults: Arc<FaultInjector>) -> Disk {
        Disk {
            faults: Some(faults),
        }
    }

    /// The fault injector behind this disk, if any (to hand the same one to another component
    /// that keeps files in the same directory tree).
    pub fn faults(&self) -> Option<&Arc<FaultInjector>> {
        self.faults.as_ref()
    }

    fn gate(&self) -> io::Result<()> {
        match &self.faults {
            Some(f) => f.gate(),
            None => Ok(()),
        }
    }

    /// Whether a power model decides what is durable (then real syncs are skipped: they would
    /// only slow tests down, and the model's answer does not depend on them).
    fn modelled(&self) -> bool {
        self.faults.as_ref().is_some_and(|f| f.model().is_some())
    }

    /// Tell the power model (if any) about an operation that succeeded.
    fn note(&self, f: impl FnOnce(&mut PowerModel) -> io::Result<()>) -> io::Result<()> {
        if let Some(faults) = &self.faults {
            if let Some(m) = faults.model().as_mut() {
                return f(m);
            }
        }
        Ok(())
    }

    /// `pwrite` all of `buf` at `pos` (a short write then `ENOSPC` under the fault injector).
    pub(crate) fn write_at(&self, file: &File, buf: &[u8], pos: u64) -> io::Result<()> {
        if let Some(f) = &self.faults {
            f.gate()?;
            let grant = f.take(buf.len() as u64) as usize;
            let r = file.write_all_at(&buf[..grant], pos);
            self.note(|m| m.wrote(file, pos, &buf[..grant]))?;
            r?;
            if grant < buf.len() {
                return Err(enospc());
            }
            return Ok(());
        }
        file.write_all_at(buf, pos)
    }

    /// Write the concatenation of `parts` at `pos` with positioned vectored writes (no copy).
    pub(crate) fn write_parts_at(&self, file: &File, parts: &[&[u8]], pos: u64) -> io::Result<()> {
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
    /// injection, whose space budget is counted on writes (it changes neither size nor
    /// contents, so the power model has nothing to record).
    pub(crate) fn preallocate(&self, file: &File, offset: u64, len: u64) -> io::Result<()> {
        if len == 0 {
            return Ok(());
        }
        if self.faults.is_some() {
            return self.gate();
        }
        rustix::fs::fallocate(file, rustix::fs::FallocateFlags::KEEP_SIZE, offset, len)
            .map_err(io::Error::from)
    }

    /// `ftruncate`: the new size is volatile until the file is synced.
    pub(crate) fn set_len(&self, file: &File, len: u64) -> io::Result<()> {
        self.gate()?;
        file.set_len(len)
    }

    /// `fdatasync`.
    pub(crate) fn sync_data(&self, file: &File) -> io::Result<()> {
        if let Some(f) = &self.faults {
            f.gate()?;
            let delay = f.sync_delay_ms.load(Ordering::SeqCst);
            if delay > 0 {
                std::thread::sleep(std::time::Duration::from_millis(delay));
            }
            f.charge_simulated_delay();
            if f.fail_sync.load(Ordering::SeqCst) {
                return Err(eio());
            }
        }
        if !self.modelled() {
            file.sync_data()?;
        }
        self.note(|m| m.synced_file(file))
    }

    /// Create (or empty) `path` for reading and writing. The new name is durable only once its
    /// directory is synced.
    pub(crate) fn create_file(&self, path: &Path) -> io::Result<File> {
        self.gate()?;
        let existed = fs::symlink_metadata(path).is_ok();
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        self.note(|m| {
            if existed {
                m.opened(path, &file)
            } else {
                m.created(path)
            }
        })?;
        Ok(file)
    }

    /// Open an existing file for reading and writing.
    pub(crate) fn open_file(&self, path: &Path) -> io::Result<File> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        self.note(|m| m.opened(path, &file))?;
        Ok(file)
    }

    /// `rename`; durable once the directories involved are synced.
    pub(crate) fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.gate()?;
        fs::rename(from, to)
    }

    /// `unlink`; durable once the directory is synced.
    pub(crate) fn remove_file(&self, path: &Path) -> io::Result<()> {
        self.gate()?;
        fs::remove_file(path)
    }

    /// Remove a file if it is there (durable once its directory is synced).
    pub fn remove_if_exists(&self, path: &Path) -> Result<()> {
        match self.remove_file(path) {
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
            r => r.at(path),
        }
    }

    /// The injected faults a directory or file-system sync meets first: a closed gate, a
    /// simulated sync's cost, a failing sync.
    fn dir_sync_faults(&self) -> io::Result<()> {
        self.gate()?;
        if let Some(f) = &self.faults {
            f.charge_simulated_delay();
            if f.fail_sync.load(Ordering::SeqCst) {
                return Err(eio());
            }
        }
        Ok(())
    }

    /// `fsync` a directory so that created, renamed and removed entries are durable.
    pub fn sync_dir(&self, dir: &Path) -> Result<()> {
        let sync = || -> io::Result<()> {
            self.dir_sync_faults()?;
            let d = File::open(dir)?;
            if !self.modelled() {
                d.sync_all()?;
            }
            self.note(|m| m.synced_dir(dir))
        };
        sync().at(dir)
    }

    /// `syncfs` of the file system holding `dir`: every file's data and every directory's
    /// entries written there so far are durable when it returns. One call instead of a sync per
    /// file and directory, for work that touched many directories (a clean shutdown's markers).
    /// Under a power model, everything under the model's root becomes durable.
    pub fn sync_fs(&self, dir: &Path) -> Result<()> {
        let sync = || -> io::Result<()> {
            self.dir_sync_faults()?;
            if !self.modelled() {
                rustix::fs::syncfs(File::open(dir)?).map_err(io::Error::from)?;
            }
            self.note(PowerModel::synced_everything)
        };
        sync().at(dir)
    }

    /// The size of the filesystem holding `dir` and the bytes an unprivileged writer can still
    /// use there (DescribeLogDirs' `total_bytes` / `usable_bytes`).
    pub fn space(&self, dir: &Path) -> std::io::Result<(u64, u64)> {
        let st = rustix::fs::statvfs(dir).map_err(std::io::Error::from)?;
        Ok((
            st.f_blocks.saturating_mul(st.f_frsize),
            st.f_bavail.saturating_mul(st.f_frsize),
        ))
    }

    /// Create `dir` and any missing parents, fsyncing the parent of each directory created so
    /// that the new names survive a power loss (a directory that already exists is left
    /// alone).
    pub fn create_dir_all(&self, dir: &Path) -> Result<()> {
        if dir.is_dir() {
            return Ok(());
        }
        if let Some(parent) = dir.parent().filter(|p| !p.as_os_str().is_empty()) {
            self.create_dir_all(parent)?;
        }
        let create = || -> io::Result<()> {
            self.gate()?;
            match fs::create_dir(dir) {
                Ok(()) => self.note(|m| m.created(dir)),
                // created meanwhile by someone else
                Err(e) if e.kind() == io::ErrorKind::AlreadyExists && dir.is_dir() => Ok(()),
                Err(e) => Err(e),
            }
        };
        create().at(dir)?;
        self.sync_dir(parent_of(dir))
    }

    /// Remove `dir` and everything in it durably: rename it to `<name>-delete` (Kafka's suffix
    /// for directories being deleted; never a partition directory name, which ends in digits),
    /// fsync the parent, so that after a power loss the old contents can no longer come back
    /// under the old name, then remove it and fsync the parent again. A leftover `-delete`
    /// directory (a crash in between) is removed by [`Disk::purge_deleted_dirs`].
    pub fn remove_dir_all(&self, dir: &Path) -> Result<()> {
        let doomed = self.set_aside_for_deletion(dir)?;
        self.remove_tree(&doomed)?;
        self.sync_dir(parent_of(dir))
    }

    /// The first, quick half of [`Disk::remove_dir_all`]: rename `dir` to `<name>-delete` and
    /// fsync the parent, so the old contents can never come back under the old name; returns
    /// the new path. [`Disk::purge_deleted_dirs`] removes it later.
    pub fn set_aside_for_deletion(&self, dir: &Path) -> Result<PathBuf> {
        let parent = parent_of(dir);
        let Some(name) = dir.file_name() else {
            return Err(crate::LogError::InvalidArgument(format!(
                "cannot remove {}",
                dir.display()
            )));
        };
        let mut doomed = name.to_owned();
        doomed.push(DELETE_SUFFIX);
        let doomed = parent.join(doomed);
        if doomed.exists() {
            self.remove_tree(&doomed)?;
        }
        self.rename(dir, &doomed).at(dir)?;
        self.sync_dir(parent)?;
        Ok(doomed)
    }

    /// Remove directories left with the `-delete` suffix by an interrupted
    /// [`Disk::remove_dir_all`] in `parent`; returns how many.
    pub fn purge_deleted_dirs(&self, parent: &Path) -> Result<usize> {
        let mut n = 0;
        for e in fs::read_dir(parent).at(parent)? {
            let e = e.at(parent)?;
            let is_doomed = e.file_name().to_string_lossy().ends_with(DELETE_SUFFIX)
                && e.file_type().at(&e.path())?.is_dir();
            if is_doomed {
                self.remove_tree(&e.path())?;
                n += 1;
            }
        }
        if n > 0 {
            self.sync_dir(parent)?;
        }
        Ok(n)
    }

    fn remove_tree(&self, dir: &Path) -> Result<()> {
        let rm = || -> io::Result<()> {
            self.gate()?;
            fs::remove_dir_all(dir)
        };
        rm().at(dir)
    }

    /// Replace `path` atomically and durably with `contents`: write `path.tmp`, fsync, rename,
    /// fsync the directory. A crash or power loss leaves either the old or the new file.
    pub fn write_atomic(&self, path: &Path, contents: &[u8]) -> Result<()> {
        let mut tmp = path.as_os_str().to_owned();
        tmp.push(".tmp");
        let tmp = PathBuf::from(tmp);
        let f = self.create_file(&tmp).at(&tmp)?;
        let r = self
            .write_at(&f, contents, 0)
            .and_then(|()| self.sync_data(&f));
        if let Err(e) = r {
            let _ = self.remove_file(&tmp);
            return Err(crate::LogError::io(&tmp, e));
        }
        drop(f);
        self.rename(&tmp, path).at(path)?;
        self.sync_dir(parent_of(path))
    }

    /// Create (or empty) `path` with `contents`, syncing nothing: neither survives a power loss
    /// until the file and its directory are synced (or the file system, [`Disk::sync_fs`]).
    pub fn write_unsynced(&self, path: &Path, contents: &[u8]) -> Result<()> {
        let f = self.create_file(path).at(path)?;
        self.write_at(&f, contents, 0).at(path)
    }
}

/// Suffix of a directory being removed by [`Disk::remove_dir_all`].
pub const DELETE_SUFFIX: &str = "-delete";

fn parent_of(p: &Path) -> &Path {
    match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => Path::new("."),
    }
}
