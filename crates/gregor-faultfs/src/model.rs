//! The file system's state, with no FUSE in it: every inode has a volatile state (what reads
//! see) and a durable state (what a power loss leaves). Writes, truncations and directory
//! changes touch only the volatile state; `fsync`/`fdatasync` of a file copies its data and size
//! to the durable state, `fsync` of a directory copies its entries. A power loss replaces every
//! volatile state by the durable one and drops the inodes that no durable name reaches.
//!
//! Directory entries are durable per directory, as POSIX promises and nothing more: a new,
//! renamed or removed name is durable once the directory that holds it is synced. A rename from
//! directory A to directory B is two changes: the new name in B (durable when B is synced) and
//! the removal from A (durable when A is synced). Power lost between the two syncs leaves the
//! inode under both names (a file then has two links) or, if A was synced first, under neither
//! (the inode is gone). A directory reached under two names after a power loss keeps the first
//! one found walking from the root in name order; the other entry is removed.

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::ffi::{OsStr, OsString};
use std::time::SystemTime;

/// Inode number. 1 is the root, as in FUSE; numbers are never reused, so the kernel's stale
/// references after a power loss point at nothing rather than at another file.
pub type Ino = u64;
pub const ROOT: Ino = 1;

/// Longest name accepted (as most Linux file systems).
pub const NAME_MAX: usize = 255;

#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum FsError {
    #[error("no such file or directory")]
    NotFound,
    #[error("file exists")]
    Exists,
    #[error("not a directory")]
    NotDir,
    #[error("is a directory")]
    IsDir,
    #[error("directory not empty")]
    NotEmpty,
    #[error("no space left (the --max-bytes budget)")]
    NoSpace,
    #[error("invalid argument")]
    Invalid,
    #[error("name too long")]
    NameTooLong,
    #[error("operation not supported")]
    NotSupported,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    File,
    Dir,
}

/// What `stat` shows.
#[derive(Debug, Clone, Copy)]
pub struct Attr {
    pub ino: Ino,
    pub kind: Kind,
    pub size: u64,
    pub mode: u16,
    pub nlink: u32,
    pub uid: u32,
    pub gid: u32,
    pub mtime: SystemTime,
    pub ctime: SystemTime,
}

#[derive(Debug)]
enum Content {
    File {
        data: Vec<u8>,
        durable: Vec<u8>,
        /// Bytes of `data` that may differ from `durable` (besides the size), as `lo..hi`.
        dirty: Option<(u64, u64)>,
    },
    Dir {
        entries: BTreeMap<OsString, Ino>,
        durable: BTreeMap<OsString, Ino>,
        /// The volatile parent (for `..` and for refusing to move a directory into itself).
        parent: Ino,
    },
}

#[derive(Debug)]
struct Node {
    content: Content,
    mode: u16,
    uid: u32,
    gid: u32,
    mtime: SystemTime,
    ctime: SystemTime,
    /// Names in volatile directory entries.
    links: u32,
    /// Names in durable directory entries (of directories that still exist).
    durable_links: u32,
    /// References the kernel holds (FUSE lookup count): an unlinked but open file lives on.
    lookups: u64,
}

/// Most lines of detail a power-loss report keeps.
const MAX_DETAILS: usize = 200;

/// What a power loss threw away.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct LossReport {
    /// Files whose data or size differed from their durable state.
    pub files_reverted: u64,
    /// Directories whose entries differed from their durable entries.
    pub dirs_reverted: u64,
    /// Inodes no durable name reached (never-synced new files and directories, ...).
    pub inodes_dropped: u64,
    /// Bytes written but never synced, plus the data of dropped files.
    pub bytes_dropped: u64,
    /// What changed, by path (at most `MAX_DETAILS` lines): names that vanish or come back,
    /// files cut back.
    pub details: Vec<String>,
}

#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Stats {
    pub inodes: u64,
    pub used_bytes: u64,
    pub max_bytes: u64,
    /// Files with data or size not yet durable.
    pub unsynced_files: u64,
    /// Directories with entries not yet durable.
    pub unsynced_dirs: u64,
    pub power_losses: u64,
}

#[derive(Debug)]
pub struct Model {
    nodes: HashMap<Ino, Node>,
    next_ino: Ino,
    /// Bytes held: volatile plus durable data of every file.
    used: u64,
    max_bytes: u64,
    power_losses: u64,
}

fn check_name(name: &OsStr) -> Result<(), FsError> {
    if name.len() > NAME_MAX {
        return Err(FsError::NameTooLong);
    }
    if name.is_empty() || name == "." || name == ".." {
        return Err(FsError::Invalid);
    }
    Ok(())
}

impl Node {
    fn new(content: Content, mode: u16, uid: u32, gid: u32, now: SystemTime) -> Node {
        Node {
            content,
            mode,
            uid,
            gid,
            mtime: now,
            ctime: now,
            links: 0,
            durable_links: 0,
            lookups: 0,
        }
    }

    fn kind(&self) -> Kind {
        match self.content {
            Content::File { .. } => Kind::File,
            Content::Dir { .. } => Kind::Dir,
        }
    }
}

fn widen(dirty: &mut Option<(u64, u64)>, lo: u64, hi: u64) {
    *dirty = Some(match *dirty {
        None => (lo, hi),
        Some((a, b)) => (a.min(lo), b.max(hi)),
    });
}

impl Model {
    /// An empty file system (the root directory, durable) holding at most `max_bytes` of file
    /// data, counting volatile and durable copies.
    pub fn new(max_bytes: u64, now: SystemTime) -> Model {
        let mut root = Node::new(
            Content::Dir {
                entries: BTreeMap::new(),
                durable: BTreeMap::new(),
                parent: ROOT,
            },
            0o755,
            0,
            0,
            now,
        );
        root.links = 1;
        root.durable_links = 1;
        Model {
            nodes: HashMap::from([(ROOT, root)]),
            next_ino: ROOT + 1,
            used: 0,
            max_bytes,
            power_losses: 0,
        }
    }

    fn node(&self, ino: Ino) -> Result<&Node, FsError> {
        self.nodes.get(&ino).ok_or(FsError::NotFound)
    }

    fn node_mut(&mut self, ino: Ino) -> Result<&mut Node, FsError> {
        self.nodes.get_mut(&ino).ok_or(FsError::NotFound)
    }

    fn entries(&self, dir: Ino) -> Result<&BTreeMap<OsString, Ino>, FsError> {
        match &self.node(dir)?.content {
            Content::Dir { entries, .. } => Ok(entries),
            Content::File { .. } => Err(FsError::NotDir),
        }
    }

    fn entries_mut(&mut self, dir: Ino) -> Result<&mut BTreeMap<OsString, Ino>, FsError> {
        match &mut self.node_mut(dir)?.content {
            Content::Dir { entries, .. } => Ok(entries),
            Content::File { .. } => Err(FsError::NotDir),
        }
    }

    pub fn attr(&self, ino: Ino) -> Result<Attr, FsError> {
        let n = self.node(ino)?;
        let (size, nlink) = match &n.content {
            Content::File { data, .. } => (data.len() as u64, n.links),
            Content::Dir { entries, .. } => {
                let subdirs = entries
                    .values()
                    .filter(|i| self.nodes.get(i).is_some_and(|c| c.kind() == Kind::Dir))
                    .count();
                (4096, 2 + subdirs as u32)
            }
        };
        Ok(Attr {
            ino,
            kind: n.kind(),
            size,
            mode: n.mode,
            nlink,
            uid: n.uid,
            gid: n.gid,
            mtime: n.mtime,
            ctime: n.ctime,
        })
    }

    /// The inode `name` names in `dir`; with `remember`, the kernel now holds a reference.
    pub fn lookup(&mut self, dir: Ino, name: &OsStr, remember: bool) -> Result<Attr, FsError> {
        let ino = *self.entries(dir)?.get(name).ok_or(FsError::NotFound)?;
        if remember {
            self.node_mut(ino)?.lookups += 1;
        }
        self.attr(ino)
    }

    /// The kernel dropped `n` references.
    pub fn forget(&mut self, ino: Ino, n: u64) {
        if let Some(node) = self.nodes.get_mut(&ino) {
            node.lookups = node.lookups.saturating_sub(n);
            self.collect(ino);
        }
    }

    /// Creates a file or directory `name` in `dir` (a volatile name: durable once `dir` is
    /// synced). The kernel holds one reference to it.
    #[allow(clippy::too_many_arguments)]
    pub fn create(
        &mut self,
        dir: Ino,
        name: &OsStr,
        kind: Kind,
        mode: u16,
        uid: u32,
        gid: u32,
        now: SystemTime,
    ) -> Result<Attr, FsError> {
        check_name(name)?;
        if self.entries(dir)?.contains_key(name) {
            return Err(FsError::Exists);
        }
        let content = match kind {
            Kind::File => Content::File {
                data: Vec::new(),
                durable: Vec::new(),
                dirty: None,
            },
            Kind::Dir => Content::Dir {
                entries: BTreeMap::new(),
                durable: BTreeMap::new(),
                parent: dir,
            },
        };
        let ino = self.next_ino;
        self.next_ino += 1;
        let mut node = Node::new(content, mode & 0o7777, uid, gid, now);
        node.links = 1;
        node.lookups = 1;
        self.nodes.insert(ino, node);
        self.entries_mut(dir)?.insert(name.to_owned(), ino);
        let d = self.node_mut(dir)?;
        d.mtime = now;
        d.ctime = now;
        self.attr(ino)
    }

    /// Removes `name` from `dir`: a file (`want_dir` false) or an empty directory.
    pub fn remove(
        &mut self,
        dir: Ino,
        name: &OsStr,
        want_dir: bool,
        now: SystemTime,
    ) -> Result<(), FsError> {
        let ino = *self.entries(dir)?.get(name).ok_or(FsError::NotFound)?;
        match (&self.node(ino)?.content, want_dir) {
            (Content::File { .. }, true) => return Err(FsError::NotDir),
            (Content::Dir { .. }, false) => return Err(FsError::IsDir),
            (Content::Dir { entries, .. }, true) if !entries.is_empty() => {
                return Err(FsError::NotEmpty)
            }
            _ => {}
        }
        self.entries_mut(dir)?.remove(name);
        let d = self.node_mut(dir)?;
        d.mtime = now;
        d.ctime = now;
        let n = self.node_mut(ino)?;
        n.links = n.links.saturating_sub(1);
        n.ctime = now;
        self.collect(ino);
        Ok(())
    }

    /// `rename(2)` with `noreplace` as RENAME_NOREPLACE.
    pub fn rename(
        &mut self,
        from_dir: Ino,
        from: &OsStr,
        to_dir: Ino,
        to: &OsStr,
        noreplace: bool,
        now: SystemTime,
    ) -> Result<(), FsError> {
        check_name(to)?;
        let ino = *self.entries(from_dir)?.get(from).ok_or(FsError::NotFound)?;
        self.entries(to_dir)?;
        let moving_kind = self.node(ino)?.kind();
        if moving_kind == Kind::Dir {
            // A directory cannot move into itself or below itself.
            let mut at = to_dir;
            loop {
                if at == ino {
                    return Err(FsError::Invalid);
                }
                if at == ROOT {
                    break;
                }
                at = match &self.node(at)?.content {
                    Content::Dir { parent, .. } => *parent,
                    Content::File { .. } => return Err(FsError::NotDir),
                };
            }
        }
        let replaced = self.entries(to_dir)?.get(to).copied();
        if let Some(old) = replaced {
            if old == ino {
                return Ok(());
            }
            if noreplace {
                return Err(FsError::Exists);
            }
            match (moving_kind, &self.node(old)?.content) {
                (Kind::File, Content::Dir { .. }) => return Err(FsError::IsDir),
                (Kind::Dir, Content::File { .. }) => return Err(FsError::NotDir),
                (Kind::Dir, Content::Dir { entries, .. }) if !entries.is_empty() => {
                    return Err(FsError::NotEmpty)
                }
                _ => {}
            }
        }
        self.entries_mut(from_dir)?.remove(from);
        self.entries_mut(to_dir)?.insert(to.to_owned(), ino);
        for d in [from_dir, to_dir] {
            let d = self.node_mut(d)?;
            d.mtime = now;
            d.ctime = now;
        }
        let n = self.node_mut(ino)?;
        n.ctime = now;
        if let Content::Dir { parent, .. } = &mut n.content {
            *parent = to_dir;
        }
        if let Some(old) = replaced {
            let o = self.node_mut(old)?;
            o.links = o.links.saturating_sub(1);
            self.collect(old);
        }
        Ok(())
    }

    fn file_data(&self, ino: Ino) -> Result<&Vec<u8>, FsError> {
        match &self.node(ino)?.content {
            Content::File { data, .. } => Ok(data),
            Content::Dir { .. } => Err(FsError::IsDir),
        }
    }

    /// Up to `size` bytes at `offset` (fewer at the end of the file).
    pub fn read(&self, ino: Ino, offset: u64, size: u32) -> Result<&[u8], FsError> {
        let data = self.file_data(ino)?;
        let len = data.len() as u64;
        let start = offset.min(len);
        let end = offset.saturating_add(u64::from(size)).min(len);
        Ok(&data[start as usize..end as usize])
    }

    /// Charges `grow` more bytes against the budget.
    fn reserve(&mut self, grow: u64) -> Result<(), FsError> {
        if self.used.saturating_add(grow) > self.max_bytes {
            return Err(FsError::NoSpace);
        }
        self.used += grow;
        Ok(())
    }

    /// `pwrite`: volatile until the file is synced.
    pub fn write(
        &mut self,
        ino: Ino,
        offset: u64,
        buf: &[u8],
        now: SystemTime,
    ) -> Result<u32, FsError> {
        let len = self.file_data(ino)?.len() as u64;
        let end = offset
            .checked_add(buf.len() as u64)
            .ok_or(FsError::Invalid)?;
        let written = u32::try_from(buf.len()).map_err(|_| FsError::Invalid)?;
        // The budget is checked before anything is allocated: an offset far past the end is
        // refused, not zero-filled.
        self.reserve(end.saturating_sub(len))?;
        let n = self.node_mut(ino)?;
        n.mtime = now;
        n.ctime = now;
        if let Content::File { data, dirty, .. } = &mut n.content {
            if end as usize > data.len() {
                data.resize(end as usize, 0);
            }
            data[offset as usize..end as usize].copy_from_slice(buf);
            widen(dirty, offset, end);
        }
        Ok(written)
    }

    /// `ftruncate`: volatile until the file is synced.
    pub fn set_len(&mut self, ino: Ino, size: u64, now: SystemTime) -> Result<(), FsError> {
        let len = self.file_data(ino)?.len() as u64;
        if size > len {
            self.reserve(size - len)?;
        } else {
            self.used -= len - size;
        }
        let n = self.node_mut(ino)?;
        n.mtime = now;
        n.ctime = now;
        if let Content::File { data, dirty, .. } = &mut n.content {
            data.resize(size as usize, 0);
            widen(dirty, size.min(len), size.max(len));
        }
        Ok(())
    }

    /// `fallocate`: `keep_size` reserves nothing here (memory is taken on write) and succeeds;
    /// without it the file grows to `offset + len` like a truncation up.
    pub fn allocate(
        &mut self,
        ino: Ino,
        offset: u64,
        len: u64,
        keep_size: bool,
        now: SystemTime,
    ) -> Result<(), FsError> {
        let size = self.file_data(ino)?.len() as u64;
        let end = offset.checked_add(len).ok_or(FsError::Invalid)?;
        if keep_size || end <= size {
            return Ok(());
        }
        self.set_len(ino, end, now)
    }

    pub fn set_mode(&mut self, ino: Ino, mode: u16, now: SystemTime) -> Result<(), FsError> {
        let n = self.node_mut(ino)?;
        n.mode = mode & 0o7777;
        n.ctime = now;
        Ok(())
    }

    pub fn set_owner(
        &mut self,
        ino: Ino,
        uid: Option<u32>,
        gid: Option<u32>,
    ) -> Result<(), FsError> {
        let n = self.node_mut(ino)?;
        n.uid = uid.unwrap_or(n.uid);
        n.gid = gid.unwrap_or(n.gid);
        Ok(())
    }

    pub fn set_mtime(&mut self, ino: Ino, mtime: SystemTime) -> Result<(), FsError> {
        self.node_mut(ino)?.mtime = mtime;
        Ok(())
    }

    /// `fsync`/`fdatasync` of a file: its data and size become durable. Its name does not.
    /// For a directory this is `fsync_dir`.
    pub fn sync(&mut self, ino: Ino) -> Result<(), FsError> {
        let n = self.node_mut(ino)?;
        let grow = match &mut n.content {
            Content::File {
                data,
                durable,
                dirty,
            } => {
                let before = durable.len() as u64;
                if durable.len() != data.len() {
                    durable.resize(data.len(), 0);
                }
                if let Some((lo, hi)) = dirty.take() {
                    let hi = (hi as usize).min(data.len());
                    let lo = (lo as usize).min(hi);
                    durable[lo..hi].copy_from_slice(&data[lo..hi]);
                }
                durable.len() as i128 - before as i128
            }
            Content::Dir { .. } => return self.sync_dir(ino),
        };
        // A sync is never refused for space: the durable copy may take the budget over by at
        // most the volatile size, so memory stays under twice --max-bytes.
        self.used = (self.used as i128 + grow).max(0) as u64;
        Ok(())
    }

    /// `fsync` of a directory: its entries (names created, renamed in or out, removed) become
    /// durable. The directory's own name, in its parent, does not.
    pub fn sync_dir(&mut self, ino: Ino) -> Result<(), FsError> {
        let (old, new) = match &mut self.node_mut(ino)?.content {
            Content::Dir {
                entries, durable, ..
            } => {
                let old = std::mem::replace(durable, entries.clone());
                (old, entries.clone())
            }
            Content::File { .. } => return Err(FsError::NotDir),
        };
        for i in new.values() {
            if let Some(n) = self.nodes.get_mut(i) {
                n.durable_links += 1;
            }
        }
        for i in old.values() {
            if let Some(n) = self.nodes.get_mut(i) {
                n.durable_links = n.durable_links.saturating_sub(1);
            }
            self.collect(*i);
        }
        Ok(())
    }

    /// Frees `ino` once nothing can reach it: no volatile name, no durable name, no kernel
    /// reference. A freed directory's durable entries stop counting for their inodes.
    fn collect(&mut self, ino: Ino) {
        let mut work = vec![ino];
        while let Some(ino) = work.pop() {
            let free = self
                .nodes
                .get(&ino)
                .is_some_and(|n| n.links == 0 && n.durable_links == 0 && n.lookups == 0);
            if !free || ino == ROOT {
                continue;
            }
            let node = self.nodes.remove(&ino).expect("checked above");
            match node.content {
                Content::File { data, durable, .. } => {
                    self.used -= (data.len() + durable.len()) as u64;
                }
                Content::Dir { durable, .. } => {
                    for child in durable.into_values() {
                        if let Some(c) = self.nodes.get_mut(&child) {
                            c.durable_links = c.durable_links.saturating_sub(1);
                            work.push(child);
                        }
                    }
                }
            }
        }
    }

    /// The volatile entries of `dir`, for `readdir`: `(name, ino, kind)` in name order.
    pub fn list(&self, dir: Ino) -> Result<Vec<(OsString, Ino, Kind)>, FsError> {
        let entries = self.entries(dir)?;
        Ok(entries
            .iter()
            .filter_map(|(name, ino)| self.nodes.get(ino).map(|n| (name.clone(), *ino, n.kind())))
            .collect())
    }

    /// The volatile parent of a directory (for `..`).
    pub fn parent(&self, dir: Ino) -> Result<Ino, FsError> {
        match &self.node(dir)?.content {
            Content::Dir { parent, .. } => Ok(*parent),
            Content::File { .. } => Err(FsError::NotDir),
        }
    }

    pub fn stats(&self) -> Stats {
        let mut s = Stats {
            inodes: self.nodes.len() as u64,
            used_bytes: self.used,
            max_bytes: self.max_bytes,
            power_losses: self.power_losses,
            ..Stats::default()
        };
        for n in self.nodes.values() {
            match &n.content {
                Content::File {
                    data,
                    durable,
                    dirty,
                } => {
                    if dirty.is_some() || data.len() != durable.len() {
                        s.unsynced_files += 1;
                    }
                }
                Content::Dir {
                    entries, durable, ..
                } => {
                    if entries != durable {
                        s.unsynced_dirs += 1;
                    }
                }
            }
        }
        s
    }

    /// Paths (from the mountpoint) of the inodes the volatile tree reaches, by their first name.
    fn volatile_paths(&self) -> HashMap<Ino, String> {
        let mut paths = HashMap::from([(ROOT, String::new())]);
        let mut queue = VecDeque::from([ROOT]);
        while let Some(dir) = queue.pop_front() {
            let Some(Content::Dir { entries, .. }) = self.nodes.get(&dir).map(|n| &n.content)
            else {
                continue;
            };
            let base = paths[&dir].clone();
            for (name, ino) in entries {
                if paths.contains_key(ino) {
                    continue;
                }
                paths.insert(*ino, format!("{base}/{}", name.to_string_lossy()));
                if self.nodes.get(ino).is_some_and(|n| n.kind() == Kind::Dir) {
                    queue.push_back(*ino);
                }
            }
        }
        paths
    }

    /// Lines saying what the coming power loss changes, before it happens.
    fn describe_loss(&self, out: &mut Vec<String>) {
        let paths = self.volatile_paths();
        let path = |ino: &Ino| {
            paths
                .get(ino)
                .cloned()
                .unwrap_or_else(|| format!("<inode {ino}>"))
        };
        let mut inos: Vec<&Ino> = self.nodes.keys().collect();
        inos.sort_by_key(|i| path(i));
        for ino in inos {
            match &self.nodes[ino].content {
                Content::File {
                    data,
                    durable,
                    dirty,
                } => {
                    if dirty.is_some() || data.len() != durable.len() {
                        out.push(format!(
                            "file {}: size {} -> {} (unsynced bytes {:?})",
                            path(ino),
                            data.len(),
                            durable.len(),
                            dirty
                        ));
                    }
                }
                Content::Dir {
                    entries, durable, ..
                } => {
                    for (name, i) in entries {
                        if durable.get(name) != Some(i) {
                            out.push(format!(
                                "name {}/{} vanishes (never synced in its directory)",
                                path(ino),
                                name.to_string_lossy()
                            ));
                        }
                    }
                    for (name, i) in durable {
                        if entries.get(name) != Some(i) {
                            out.push(format!(
                                "name {}/{} comes back (its removal was never synced)",
                                path(ino),
                                name.to_string_lossy()
                            ));
                        }
                    }
                }
            }
        }
        out.truncate(MAX_DETAILS);
    }

    /// Power loss: every file and directory goes back to its durable state, and every inode no
    /// durable name reaches from the root is dropped. Kernel references to dropped inodes
    /// become stale (operations on them fail with "not found").
    pub fn power_loss(&mut self) -> LossReport {
        let mut report = LossReport::default();
        self.describe_loss(&mut report.details);
        for node in self.nodes.values_mut() {
            match &mut node.content {
                Content::File {
                    data,
                    durable,
                    dirty,
                } => {
                    if dirty.is_some() || data.len() != durable.len() {
                        report.files_reverted += 1;
                        let (lo, hi) = dirty.unwrap_or((0, 0));
                        let hi = hi.min(data.len() as u64);
                        report.bytes_dropped += hi.saturating_sub(lo);
                        data.clone_from(durable);
                        *dirty = None;
                    }
                }
                Content::Dir {
                    entries, durable, ..
                } => {
                    if entries != durable {
                        report.dirs_reverted += 1;
                        entries.clone_from(durable);
                    }
                }
            }
        }
        // Walk the durable tree from the root, in name order; recount links on the way.
        for n in self.nodes.values_mut() {
            n.links = 0;
            n.durable_links = 0;
        }
        let mut reached = std::collections::HashSet::from([ROOT]);
        let mut queue = VecDeque::from([ROOT]);
        while let Some(dir) = queue.pop_front() {
            let names: Vec<(OsString, Ino)> = match &self.nodes[&dir].content {
                Content::Dir { entries, .. } => {
                    entries.iter().map(|(k, v)| (k.clone(), *v)).collect()
                }
                Content::File { .. } => continue,
            };
            let mut cut = Vec::new();
            for (name, ino) in names {
                let Some(child) = self.nodes.get_mut(&ino) else {
                    cut.push(name);
                    continue;
                };
                let is_dir = child.kind() == Kind::Dir;
                if is_dir && reached.contains(&ino) {
                    cut.push(name); // a directory has one name
                    continue;
                }
                child.links += 1;
                child.durable_links += 1;
                if let Content::Dir { parent, .. } = &mut child.content {
                    *parent = dir;
                }
                if reached.insert(ino) && is_dir {
                    queue.push_back(ino);
                }
            }
            if let Content::Dir {
                entries, durable, ..
            } = &mut self.nodes.get_mut(&dir).expect("queued").content
            {
                for name in cut {
                    entries.remove(&name);
                    durable.remove(&name);
                }
            }
        }
        let root = self.nodes.get_mut(&ROOT).expect("the root is never freed");
        root.links = 1;
        root.durable_links = 1;
        let dropped: Vec<Ino> = self
            .nodes
            .keys()
            .copied()
            .filter(|i| !reached.contains(i))
            .collect();
        for ino in dropped {
            let node = self.nodes.remove(&ino).expect("listed above");
            report.inodes_dropped += 1;
            if let Content::File { data, .. } = node.content {
                report.bytes_dropped += data.len() as u64;
            }
        }
        self.used = self
            .nodes
            .values()
            .map(|n| match &n.content {
                Content::File { data, durable, .. } => (data.len() + durable.len()) as u64,
                Content::Dir { .. } => 0,
            })
            .sum();
        self.power_losses += 1;
        report
    }
}

#[cfg(test)]
mod tests;
