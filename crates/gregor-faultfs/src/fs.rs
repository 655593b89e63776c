//! The FUSE side: translates kernel requests into `Model` calls.
//!
//! The kernel must not remember anything the model may take back: entries and attributes are
//! given with a zero time-to-live (every path walk asks again), and files are opened with
//! `direct_io` (no page cache: every read and write reaches the model, and a read after a power
//! loss sees the reverted bytes). Nothing the broker does needs `mmap`.

use std::collections::HashMap;
use std::ffi::{OsStr, OsString};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};
use std::time::{Duration, SystemTime};

use fuser::{
    Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation, INodeNo, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyEmpty,
    ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow, WriteFlags,
};
use tracing::debug;

use crate::model::{Attr, FsError, Ino, Kind, Model};

const TTL: Duration = Duration::ZERO;
const BLOCK: u32 = 4096;
/// `FALLOC_FL_KEEP_SIZE`.
const KEEP_SIZE: i32 = 0x01;

/// The model, shared with the control socket.
pub type Shared = Arc<Mutex<Model>>;

pub fn lock(m: &Shared) -> MutexGuard<'_, Model> {
    // A panic while holding the lock leaves the model as it was at that point; serving on is
    // what a test tool should do.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

/// A directory listing: `(name, inode, kind)`, `.` and `..` first.
type Listing = Vec<(OsString, Ino, Kind)>;

pub struct FaultFs {
    model: Shared,
    /// Directory listings taken at `opendir`, so that a stream is consistent.
    listings: Mutex<HashMap<u64, Listing>>,
    next_fh: Mutex<u64>,
    /// Pause after each write is applied and before it is answered: the written bytes sit
    /// volatile for that long, so a process killed at a random moment most likely leaves
    /// unsynced data behind for the power loss to take.
    write_delay: Duration,
}

impl FaultFs {
    pub fn new(model: Shared, write_delay: Duration) -> FaultFs {
        FaultFs {
            model,
            listings: Mutex::new(HashMap::new()),
            next_fh: Mutex::new(1),
            write_delay,
        }
    }
}

fn errno(e: FsError) -> Errno {
    match e {
        FsError::NotFound => Errno::ENOENT,
        FsError::Exists => Errno::EEXIST,
        FsError::NotDir => Errno::ENOTDIR,
        FsError::IsDir => Errno::EISDIR,
        FsError::NotEmpty => Errno::ENOTEMPTY,
        FsError::NoSpace => Errno::ENOSPC,
        FsError::Invalid => Errno::EINVAL,
        FsError::NameTooLong => Errno::ENAMETOOLONG,
        FsError::NotSupported => Errno::EOPNOTSUPP,
    }
}

fn file_type(k: Kind) -> FileType {
    match k {
        Kind::File => FileType::RegularFile,
        Kind::Dir => FileType::Directory,
    }
}

fn fuse_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: a.size.div_ceil(512),
        atime: a.mtime,
        mtime: a.mtime,
        ctime: a.ctime,
        crtime: a.ctime,
        kind: file_type(a.kind),
        perm: a.mode,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: 0,
        blksize: BLOCK,
        flags: 0,
    }
}

fn time(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => SystemTime::now(),
    }
}

impl FaultFs {
    fn model(&self) -> MutexGuard<'_, Model> {
        lock(&self.model)
    }

    fn make(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        kind: Kind,
        mode: u32,
        umask: u32,
    ) -> Result<Attr, FsError> {
        let mode = (mode & !umask & 0o7777) as u16;
        self.model().create(
            parent.0,
            name,
            kind,
            mode,
            req.uid(),
            req.gid(),
            SystemTime::now(),
        )
    }
}

impl Filesystem for FaultFs {
    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        match self.model().lookup(parent.0, name, true) {
            Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn forget(&self, _req: &Request, ino: INodeNo, nlookup: u64) {
        self.model().forget(ino.0, nlookup);
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.model().attr(ino.0) {
            Ok(a) => reply.attr(&TTL, &fuse_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        _atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<fuser::BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let now = SystemTime::now();
        let mut m = self.model();
        let r = (|| {
            if let Some(size) = size {
                m.set_len(ino.0, size, now)?;
            }
            if let Some(mode) = mode {
                m.set_mode(ino.0, (mode & 0o7777) as u16, now)?;
            }
            if uid.is_some() || gid.is_some() {
                m.set_owner(ino.0, uid, gid)?;
            }
            if let Some(t) = mtime {
                m.set_mtime(ino.0, time(t))?;
            }
            m.attr(ino.0)
        })();
        match r {
            Ok(a) => reply.attr(&TTL, &fuse_attr(&a)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        match self.make(req, parent, name, Kind::Dir, mode, umask) {
            Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        // Regular files only (mknod is how the kernel creates a file when create is missing).
        if mode & (libc_s_ifmt()) != 0o100000 {
            return reply.error(Errno::EOPNOTSUPP);
        }
        match self.make(req, parent, name, Kind::File, mode, umask) {
            Ok(a) => reply.entry(&TTL, &fuse_attr(&a), Generation(0)),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        match self.make(req, parent, name, Kind::File, mode, umask) {
            Ok(a) => reply.created(
                &TTL,
                &fuse_attr(&a),
                Generation(0),
                FileHandle(0),
                FopenFlags::FOPEN_DIRECT_IO,
            ),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self
            .model()
            .remove(parent.0, name, false, SystemTime::now())
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        match self.model().remove(parent.0, name, true, SystemTime::now()) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !(flags - RenameFlags::RENAME_NOREPLACE).is_empty() {
            return reply.error(Errno::EINVAL);
        }
        let noreplace = flags.contains(RenameFlags::RENAME_NOREPLACE);
        match self.model().rename(
            parent.0,
            name,
            newparent.0,
            newname,
            noreplace,
            SystemTime::now(),
        ) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.model().attr(ino.0) {
            Ok(a) if a.kind == Kind::Dir => reply.error(Errno::EISDIR),
            Ok(_) => reply.opened(FileHandle(0), FopenFlags::FOPEN_DIRECT_IO),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        match self.model().read(ino.0, offset, size) {
            Ok(d) => reply.data(d),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = self.model().write(ino.0, offset, data, SystemTime::now());
        if !self.write_delay.is_zero() {
            std::thread::sleep(self.write_delay);
        }
        match written {
            Ok(n) => reply.written(n),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _lock_owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        // close() makes nothing durable.
        reply.ok();
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        datasync: bool,
        reply: ReplyEmpty,
    ) {
        debug!(ino = ino.0, datasync, "fsync");
        match self.model().sync(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn opendir(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        let m = self.model();
        let listing = m.list(ino.0).and_then(|mut l| {
            let parent = m.parent(ino.0)?;
            l.insert(0, (OsString::from(".."), parent, Kind::Dir));
            l.insert(0, (OsString::from("."), ino.0, Kind::Dir));
            Ok(l)
        });
        drop(m);
        match listing {
            Ok(l) => {
                let fh = {
                    let mut n = self.next_fh.lock().unwrap_or_else(PoisonError::into_inner);
                    *n += 1;
                    *n
                };
                self.listings
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner)
                    .insert(fh, l);
                reply.opened(FileHandle(fh), FopenFlags::empty());
            }
            Err(e) => reply.error(errno(e)),
        }
    }

    fn readdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listings = self.listings.lock().unwrap_or_else(PoisonError::into_inner);
        let Some(l) = listings.get(&fh.0) else {
            return reply.error(Errno::EBADF);
        };
        // The offset handed back for an entry is the index of the next one.
        for (i, (name, ino, kind)) in l.iter().enumerate().skip(offset as usize) {
            if reply.add(INodeNo(*ino), i as u64 + 1, file_type(*kind), name) {
                break;
            }
        }
        reply.ok();
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.listings
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .remove(&fh.0);
        reply.ok();
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        debug!(ino = ino.0, "fsyncdir");
        match self.model().sync_dir(ino.0) {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.model().stats();
        let blocks = s.max_bytes / u64::from(BLOCK);
        let free = s.max_bytes.saturating_sub(s.used_bytes) / u64::from(BLOCK);
        reply.statfs(blocks, free, free, 1 << 20, 1 << 20, BLOCK, 255, BLOCK);
    }

    // No extended attributes and no access(2) checks (root runs the tests): answered here so
    // that the kernel remembers it, without a warning per call.
    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENOSYS);
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, _size: u32, reply: ReplyXattr) {
        reply.error(Errno::ENOSYS);
    }

    fn access(&self, _req: &Request, _ino: INodeNo, _mask: fuser::AccessFlags, reply: ReplyEmpty) {
        reply.ok();
    }

    fn fallocate(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if mode & !KEEP_SIZE != 0 {
            // Punching holes, zeroing ranges...: not modelled.
            return reply.error(errno(FsError::NotSupported));
        }
        let keep = mode & KEEP_SIZE != 0;
        match self
            .model()
            .allocate(ino.0, offset, length, keep, SystemTime::now())
        {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(e)),
        }
    }
}

/// `S_IFMT`.
fn libc_s_ifmt() -> u32 {
    0o170000
}
