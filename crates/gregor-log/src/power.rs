//! A model of what a power loss leaves on disk, for tests (see [`crate::FaultInjector::power_model`]).
//!
//! POSIX semantics, taken pessimistically: a file's written bytes (and its size) are durable only
//! once the file is `fsync`ed/`fdatasync`ed, and a directory's entries (names created, renamed
//! or removed in it) only once the directory itself is fsynced. The model keeps the durable
//! state beside the real files: per file (identified by its inode while it is live) the bytes
//! at its last sync, per directory the entries at its last sync. A power loss rewrites the tree
//! under the root from that durable state, so the real files are again exactly what a machine
//! would find after rebooting.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsString;
use std::fs::{self, File};
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

/// A directory entry as last synced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Entry {
    File(u64),
    Dir(u64),
}

/// What [`crate::FaultInjector::power_loss`] restored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PowerLossReport {
    /// Writes (to any file) not yet synced that were dropped.
    pub unsynced_writes_dropped: usize,
    /// The torn last write, if one was kept: its file, position, how many of its bytes were
    /// kept and how long it was.
    pub torn: Option<TornWrite>,
}

/// A prefix of the last unsynced write that survived the power loss.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TornWrite {
    /// The file it landed in (after the restore).
    pub path: PathBuf,
    /// Where the write started.
    pub pos: u64,
    /// Bytes of it kept (`0..=len`).
    pub kept: usize,
    /// Bytes the write had.
    pub len: usize,
}

#[derive(Debug)]
pub(crate) struct PowerModel {
    root: PathBuf,
    root_id: u64,
    next_id: u64,
    /// Live inodes `(dev, ino)` to model ids (ids survive renames, not re-creation; an inode
    /// number reused by the file system for a new file gets a new id).
    ids: HashMap<(u64, u64), u64>,
    /// Durable contents of files (absent: never synced, comes back empty).
    data: HashMap<u64, Vec<u8>>,
    /// Durable entries of directories (absent: never synced, comes back empty).
    dirs: HashMap<u64, BTreeMap<OsString, Entry>>,
    /// The last write to each file since its last sync: `(seq, pos, bytes)`.
    unsynced: HashMap<u64, (u64, u64, Vec<u8>)>,
    seq: u64,
    /// Paths the model met that were not created through it: a file operation that bypassed
    /// the log's `Disk`.
    untracked: Vec<PathBuf>,
}

fn key(meta: &fs::Metadata) -> (u64, u64) {
    (meta.dev(), meta.ino())
}

/// splitmix64: a small seeded generator for the torn-write length.
fn mix(seed: u64) -> u64 {
    let mut z = seed.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

impl PowerModel {
    /// Start with everything under `root` (which must exist) durable.
    pub fn new(root: &Path) -> io::Result<PowerModel> {
        let mut m = PowerModel {
            root: root.to_path_buf(),
            root_id: 0,
            next_id: 1,
            ids: HashMap::new(),
            data: HashMap::new(),
            dirs: HashMap::new(),
            unsynced: HashMap::new(),
            seq: 0,
            untracked: Vec::new(),
        };
        m.root_id = m.snapshot_tree(root)?;
        Ok(m)
    }

    fn fresh(&mut self, k: (u64, u64)) -> u64 {
        let id = self.next_id;
        self.next_id += 1;
        self.ids.insert(k, id);
        id
    }

    /// Register `dir` and everything below it as durable; returns its id.
    fn snapshot_tree(&mut self, dir: &Path) -> io::Result<u64> {
        let id = self.fresh(key(&fs::symlink_metadata(dir)?));
        let mut entries = BTreeMap::new();
        for e in fs::read_dir(dir)? {
            let e = e?;
            let p = e.path();
            let meta = fs::symlink_metadata(&p)?;
            if meta.is_dir() {
                entries.insert(e.file_name(), Entry::Dir(self.snapshot_tree(&p)?));
            } else {
                let fid = self.fresh(key(&meta));
                self.data.insert(fid, fs::read(&p)?);
                entries.insert(e.file_name(), Entry::File(fid));
            }
        }
        self.dirs.insert(id, entries);
        Ok(id)
    }

    fn under_root(&self, p: &Path) -> bool {
        p.starts_with(&self.root)
    }

    /// The id of a live inode, registering one the model has not seen (and noting the path).
    fn id_of(&mut self, meta: &fs::Metadata, path: &Path) -> u64 {
        let k = key(meta);
        if let Some(id) = self.ids.get(&k) {
            return *id;
        }
        if self.under_root(path) {
            self.untracked.push(path.to_path_buf());
        }
        self.fresh(k)
    }

    /// `path` was just created as a new file or directory.
    pub fn created(&mut self, path: &Path) -> io::Result<()> {
        if self.under_root(path) {
            let meta = fs::symlink_metadata(path)?;
            self.fresh(key(&meta));
        }
        Ok(())
    }

    /// `path` was opened (and maybe truncated) without being created: it must be known.
    pub fn opened(&mut self, path: &Path, file: &File) -> io::Result<()> {
        if self.under_root(path) {
            let meta = file.metadata()?;
            self.id_of(&meta, path);
        }
        Ok(())
    }

    /// `bytes` were written at `pos` of `file`.
    pub fn wrote(&mut self, file: &File, pos: u64, bytes: &[u8]) -> io::Result<()> {
        let meta = file.metadata()?;
        let Some(&id) = self.ids.get(&key(&meta)) else {
            return Ok(());
        };
        self.seq += 1;
        self.unsynced.insert(id, (self.seq, pos, bytes.to_vec()));
        Ok(())
    }

    /// `file` was synced: its current contents are durable.
    pub fn synced_file(&mut self, file: &File) -> io::Result<()> {
        let meta = file.metadata()?;
        let Some(&id) = self.ids.get(&key(&meta)) else {
            return Ok(());
        };
        let mut buf = vec![0u8; meta.len() as usize];
        file.read_exact_at(&mut buf, 0)?;
        self.data.insert(id, buf);
        self.unsynced.remove(&id);
        Ok(())
    }

    /// Directory `dir` was synced: its current entries are durable.
    pub fn synced_dir(&mut self, dir: &Path) -> io::Result<()> {
        if !self.under_root(dir) {
            return Ok(());
        }
        let id = self.id_of(&fs::symlink_metadata(dir)?, dir);
        let mut entries = BTreeMap::new();
        for e in fs::read_dir(dir)? {
            let e = e?;
            let p = e.path();
            let meta = fs::symlink_metadata(&p)?;
            let eid = self.id_of(&meta, &p);
            let entry = if meta.is_dir() {
                Entry::Dir(eid)
            } else {
                Entry::File(eid)
            };
            entries.insert(e.file_name(), entry);
        }
        self.dirs.insert(id, entries);
        Ok(())
    }

    /// The whole file system was synced (`syncfs`): every file and directory under the root
    /// is durable as it is now.
    pub fn synced_everything(&mut self) -> io::Result<()> {
        let root = self.root.clone();
        self.sync_tree(&root)
    }

    fn sync_tree(&mut self, dir: &Path) -> io::Result<()> {
        self.synced_dir(dir)?;
        for e in fs::read_dir(dir)? {
            let p = e?.path();
            if fs::symlink_metadata(&p)?.is_dir() {
                self.sync_tree(&p)?;
            } else {
                self.synced_file(&File::open(&p)?)?;
            }
        }
        Ok(())
    }

    /// Paths met that were not created through the model.
    pub fn untracked(&self) -> Vec<PathBuf> {
        self.untracked.clone()
    }

    /// Rewrite the tree under the root to its durable state (plus, with `torn_seed`, a seeded
    /// prefix of the last unsynced write), then start over with everything durable.
    pub fn power_loss(&mut self, torn_seed: Option<u64>) -> io::Result<PowerLossReport> {
        let mut report = PowerLossReport {
            unsynced_writes_dropped: self.unsynced.len(),
            torn: None,
        };
        let last = self
            .unsynced
            .iter()
            .max_by_key(|(_, (seq, _, _))| *seq)
            .map(|(id, (_, pos, bytes))| (*id, *pos, bytes.clone()));
        let torn = match (torn_seed, last) {
            (Some(seed), Some((id, pos, bytes))) => {
                let kept = (mix(seed) % (bytes.len() as u64 + 1)) as usize;
                Some((id, pos, bytes, kept))
            }
            _ => None,
        };
        for e in fs::read_dir(&self.root)? {
            let p = e?.path();
            if fs::symlink_metadata(&p)?.is_dir() {
                fs::remove_dir_all(&p)?;
            } else {
                fs::remove_file(&p)?;
            }
        }
        let root = self.root.clone();
        self.restore(&root, self.root_id, torn.as_ref(), &mut report)?;
        let fresh = PowerModel::new(&root)?;
        let untracked = std::mem::take(&mut self.untracked);
        *self = fresh;
        self.untracked = untracked;
        Ok(report)
    }

    fn restore(
        &self,
        dir: &Path,
        id: u64,
        torn: Option<&(u64, u64, Vec<u8>, usize)>,
        report: &mut PowerLossReport,
    ) -> io::Result<()> {
        let Some(entries) = self.dirs.get(&id) else {
            return Ok(());
        };
        for (name, entry) in entries {
            let p = dir.join(name);
            match *entry {
                Entry::Dir(d) => {
                    fs::create_dir(&p)?;
                    self.restore(&p, d, torn, report)?;
                }
                Entry::File(f) => {
                    let mut contents = self.data.get(&f).cloned().unwrap_or_default();
                    if let Some((tid, pos, bytes, kept)) = torn {
                        if *tid == f {
                            let pos = *pos as usize;
                            let end = pos + kept;
                            if contents.len() < end {
                                contents.resize(end, 0);
                            }
                            contents[pos..end].copy_from_slice(&bytes[..*kept]);
                            report.torn = Some(TornWrite {
                                path: p.clone(),
                                pos: pos as u64,
                                kept: *kept,
                                len: bytes.len(),
                            });
                        }
                    }
                    fs::write(&p, &contents)?;
                }
            }
        }
        Ok(())
    }
}
