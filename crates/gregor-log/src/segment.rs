//! One segment: `<base>.log` with its in-memory sparse indexes (written to `<base>.index` and
//! `<base>.timeindex` when the segment is rolled or the log closed) and its aborted-transaction
//! index (`<base>.txnindex`, see `txn_index.rs`).

use std::fs::{self, File};
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use tracing::{debug, warn};

use crate::batch::{BatchHeader, HEADER_LEN, LOG_OVERHEAD};
use crate::disk::Disk;
use crate::error::{IoContext, LogError, Result};
use crate::index::{OffsetIndex, TimeIndex};
use crate::txn_index::TxnIndex;
use crate::validate::{self, RecordStream};

/// Read granularity of validating scans (whole batches).
const CHUNK: usize = 1 << 20;
/// Read granularity of header-only scans (index lookups read one or a few headers).
const HEADER_CHUNK: usize = 4096;

/// Suffix of a compacted segment being written.
pub(crate) const CLEANED: &str = ".log.cleaned";
/// Suffix of a compacted segment ready to replace its original.
pub(crate) const SWAP: &str = ".log.swap";
/// Suffix of a segment's aborted-transaction index.
pub(crate) const TXN_INDEX: &str = ".txnindex";
/// Suffix added to a removed segment's files until `file.delete.delay.ms` has passed (Kafka's
/// marker); a file left with it by a stop is removed when the log opens.
pub(crate) const DELETED: &str = ".deleted";

/// File name stem of a segment: the base offset in 20 digits, as Kafka names them.
pub(crate) fn file_name(base: i64, suffix: &str) -> String {
    format!("{base:020}{suffix}")
}

/// Parse `<20 digits><suffix>`.
pub(crate) fn parse_name(name: &str, suffix: &str) -> Option<i64> {
    let stem = name.strip_suffix(suffix)?;
    if stem.len() != 20 || !stem.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    stem.parse().ok()
}

/// How a scan ended.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum ScanEnd {
    /// Reached the end position at a batch boundary.
    Complete,
    /// The callback asked to stop before the batch at this position.
    Stopped(u64),
    /// Data at this position is not a valid batch.
    Invalid { pos: u64, reason: String },
}

/// Walk batches of `file` in `[start, end)`. With `full`, each batch is read whole and validated
/// (CRC included) and passed to `f`; otherwise only headers are read and `f` gets the header
/// bytes. `f` returns `Ok(true)` to continue, `Ok(false)` to stop, `Err(reason)` to declare the
/// batch invalid.
pub(crate) fn scan(
    file: &File,
    start: u64,
    end: u64,
    full: bool,
    f: impl FnMut(u64, &BatchHeader, &[u8]) -> Result<bool, String>,
) -> std::io::Result<ScanEnd> {
    scan_with(file, start, end, full, Wait::Block, f)
}

/// Whether a read may wait for the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Wait {
    /// Read as usual.
    Block,
    /// Read only what the page cache holds: a read that would wait for the disk fails with
    /// `ErrorKind::WouldBlock` instead (`RWF_NOWAIT`), so that an async worker can try first.
    CachedOnly,
}

/// [`scan`], reading as `wait` says.
pub(crate) fn scan_with(
    file: &File,
    start: u64,
    end: u64,
    full: bool,
    wait: Wait,
    mut f: impl FnMut(u64, &BatchHeader, &[u8]) -> Result<bool, String>,
) -> std::io::Result<ScanEnd> {
    let mut window = Window {
        file,
        buf: Vec::new(),
        start,
        end,
        wait,
    };
    let mut pos = start;
    while pos < end {
        let chunk = if full { CHUNK } else { HEADER_CHUNK };
        let h = match window.header_at(pos, chunk)? {
            Ok(h) => h,
            Err(invalid) => return Ok(invalid),
        };
        let size = h.size() as u64;
        let bytes: &[u8] = if full {
            match window.valid_batch_at(pos, size as usize)? {
                Ok(b) => b,
                Err(invalid) => return Ok(invalid),
            }
        } else {
            window.bytes(pos, HEADER_LEN)
        };
        match f(pos, &h, bytes) {
            Ok(true) => {}
            Ok(false) => return Ok(ScanEnd::Stopped(pos)),
            Err(reason) => return Ok(ScanEnd::Invalid { pos, reason }),
        }
        pos += size;
    }
    Ok(ScanEnd::Complete)
}

/// A buffered window on `[.., end)` of a segment file for a scan: `buf` holds the bytes from
/// `start`.
struct Window<'f> {
    file: &'f File,
    buf: Vec<u8>,
    start: u64,
    end: u64,
    wait: Wait,
}

impl Window<'_> {
    /// The header of the batch at `pos`, or how the data there is not a whole batch (too
    /// short for a header, a bad header, or a batch torn at `end`). Reads ahead `chunk`.
    fn header_at(
        &mut self,
        pos: u64,
        chunk: usize,
    ) -> std::io::Result<Result<BatchHeader, ScanEnd>> {
        let end = self.end;
        if pos + HEADER_LEN as u64 > end {
            return Ok(Err(ScanEnd::Invalid {
                pos,
                reason: format!("{} trailing bytes are not a batch", end - pos),
            }));
        }
        self.load(pos, HEADER_LEN, chunk)?;
        let h = BatchHeader::parse(self.bytes(pos, HEADER_LEN)).expect("load() read a full header");
        if h.magic != 2 || (h.batch_length as i64) < (HEADER_LEN - LOG_OVERHEAD) as i64 {
            return Ok(Err(ScanEnd::Invalid {
                pos,
                reason: format!("bad header (magic {}, length {})", h.magic, h.batch_length),
            }));
        }
        let size = h.size() as u64;
        if pos + size > end {
            return Ok(Err(ScanEnd::Invalid {
                pos,
                reason: format!("batch of {size} bytes torn at {}", end - pos),
            }));
        }
        Ok(Ok(h))
    }

    /// The whole batch of `size` bytes at `pos`, validated as a stored batch (CRC included).
    fn valid_batch_at(&mut self, pos: u64, size: usize) -> std::io::Result<Result<&[u8], ScanEnd>> {
        self.load(pos, size, CHUNK)?;
        let b = self.bytes(pos, size);
        if let Err(e) = validate::validate_batch(b, usize::MAX, &validate::STORED) {
            return Ok(Err(ScanEnd::Invalid {
                pos,
                reason: e.to_string(),
            }));
        }
        Ok(Ok(b))
    }

    /// `[pos, pos + len)`, which [`Window::load`] made the window hold.
    fn bytes(&self, pos: u64, len: usize) -> &[u8] {
        let off = (pos - self.start) as usize;
        &self.buf[off..off + len]
    }

    /// Make the window hold `[pos, pos + len)`, reading ahead up to `chunk` bytes (never
    /// past `end`) when it does not.
    fn load(&mut self, pos: u64, len: usize, chunk: usize) -> std::io::Result<()> {
        if pos >= self.start && pos + len as u64 <= self.start + self.buf.len() as u64 {
            return Ok(());
        }
        let want = len.max(chunk).min((self.end - pos) as usize).max(len);
        self.buf.resize(want, 0);
        match self.wait {
            Wait::Block => self.file.read_exact_at(&mut self.buf, pos)?,
            Wait::CachedOnly => read_exact_cached(self.file, &mut self.buf, pos)?,
        }
        self.start = pos;
        Ok(())
    }
}

/// `read_exact_at` from the page cache only: `WouldBlock` where a page is not there,
/// `UnexpectedEof` past the end. A file system that refuses `RWF_NOWAIT` (tmpfs) is read
/// as usual once `cachestat(2)` finds every page of the range cached; where neither can tell
/// (kernels before 4.14 or 6.5) the answer is `WouldBlock`.
fn read_exact_cached(file: &File, buf: &mut [u8], pos: u64) -> std::io::Result<()> {
    use rustix::io::{Errno, ReadWriteFlags};
    use std::sync::atomic::{AtomicBool, Ordering};
    // Set once a file refused `RWF_NOWAIT` and `cachestat` answered instead, so that later
    // reads go to `cachestat` at once rather than pay a failed call first (several per fetch
    // on tmpfs). Process-wide: a file system that does support the flag then costs one call
    // more per read, never a wrong answer.
    static NOWAIT_REFUSED: AtomicBool = AtomicBool::new(false);
    let mut done = 0;
    while done < buf.len() {
        let at = pos + done as u64;
        let outcome = if NOWAIT_REFUSED.load(Ordering::Relaxed) {
            Err(Errno::OPNOTSUPP)
        } else {
            let mut slice = [std::io::IoSliceMut::new(&mut buf[done..])];
            rustix::io::preadv2(file, &mut slice, at, ReadWriteFlags::NOWAIT)
        };
        match outcome {
            Ok(0) => return Err(std::io::ErrorKind::UnexpectedEof.into()),
            Ok(n) => done += n,
            Err(Errno::INTR) => {}
            Err(e @ (Errno::OPNOTSUPP | Errno::INVAL | Errno::NOSYS)) => {
                if !crate::page_cache::is_cached(file, at, buf.len() - done) {
                    return Err(std::io::ErrorKind::WouldBlock.into());
                }
                // Only once `cachestat` has answered: where it cannot (kernels before 6.5),
                // `RWF_NOWAIT` stays the only way to read without waiting.
                if e != Errno::INVAL {
                    NOWAIT_REFUSED.store(true, Ordering::Relaxed);
                }
                return file.read_exact_at(&mut buf[done..], at);
            }
            Err(Errno::AGAIN) => return Err(std::io::ErrorKind::WouldBlock.into()),
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// A segment of the log.
#[derive(Debug)]
pub(crate) struct Segment {
    pub base: i64,
    pub dir: PathBuf,
    pub file: Arc<File>,
    /// Bytes of valid batches in the file.
    pub size: u64,
    /// Offset after the last batch (== base when empty).
    pub next_offset: i64,
    /// Largest batch max-timestamp, -1 when empty.
    pub max_ts: i64,
    /// Last offset of the batch that carried `max_ts`.
    pub offset_of_max_ts: i64,
    pub offset_index: OffsetIndex,
    pub time_index: TimeIndex,
    /// The aborted transactions whose markers this segment holds.
    pub txn_index: TxnIndex,
    bytes_since_index: u64,
    /// Max timestamp of the first batch: what `segment.ms` is measured from.
    pub rolling_ts: Option<i64>,
    /// When this process created the segment (fallback for `segment.ms`).
    pub created_ms: i64,
    /// Unique id of this segment instance (detects concurrent replacement).
    pub id: u64,
    /// In-memory indexes differ from the files.
    pub indexes_dirty: bool,
    /// File offset up to which blocks are reserved for appends (see [`Segment::reserve`]).
    reserved_to: u64,
    /// Preallocation failed once (unsupported file system, no space for the reserve): plain
    /// appends from then on.
    reserve_failed: bool,
}

/// Smallest and largest block reservation made ahead of appends. Reservations grow with the
/// segment, so a quiet partition reserves little and a busy one makes few `fallocate` calls.
const MIN_RESERVE: u64 = 1 << 20;
const MAX_RESERVE: u64 = 16 << 20;

impl Segment {
    pub fn log_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base, ".log"))
    }
    pub fn index_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base, ".index"))
    }
    pub fn time_index_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base, ".timeindex"))
    }
    pub fn txn_index_path(&self) -> PathBuf {
        self.dir.join(file_name(self.base, TXN_INDEX))
    }

    fn empty(dir: &Path, base: i64, file: File, now_ms: i64, id: u64) -> Segment {
        Segment {
            base,
            dir: dir.to_path_buf(),
            file: Arc::new(file),
            size: 0,
            next_offset: base,
            max_ts: -1,
            offset_of_max_ts: base - 1,
            offset_index: OffsetIndex::default(),
            time_index: TimeIndex::default(),
            txn_index: TxnIndex::new(dir.join(file_name(base, TXN_INDEX))),
            bytes_since_index: 0,
            rolling_ts: None,
            created_ms: now_ms,
            id,
            indexes_dirty: true,
            reserved_to: 0,
            reserve_failed: false,
        }
    }

    /// Makes sure blocks are reserved for `len` more bytes at the end of the file, reserving
    /// ahead by about the segment's current size (1 to 16 MiB). A failed reservation is not an
    /// error: the append goes ahead and reports a full disk itself if there is one.
    fn reserve(&mut self, len: u64, disk: &Disk) {
        let end = self.size + len;
        if self.reserve_failed || end <= self.reserved_to {
            return;
        }
        let ahead = self.size.clamp(MIN_RESERVE, MAX_RESERVE).max(len);
        match disk.preallocate(&self.file, self.size, ahead) {
            Ok(()) => self.reserved_to = self.size + ahead,
            Err(e) => {
                debug!(segment = %self.log_path().display(), error = %e, "no block reservation");
                self.reserve_failed = true;
            }
        }
    }

    /// Whether blocks are reserved past the last batch ([`Segment::release_reservation`] has
    /// something to free).
    pub fn has_reservation(&self) -> bool {
        self.reserved_to > self.size
    }

    /// An empty segment without index files: an open reads it as empty indexes, which is
    /// what its indexes are, so they need not be written.
    pub fn indexes_implied_empty(&self) -> bool {
        self.size == 0 && !self.index_path().exists() && !self.time_index_path().exists()
    }

    /// Returns blocks reserved past the last batch to the file system (a segment that will not
    /// be appended to again: rolled, closed, or left over from a crash). Cutting the file at its
    /// own size frees them.
    pub fn release_reservation(&mut self, disk: &Disk) -> Result<()> {
        disk.set_len(&self.file, self.size).at(&self.log_path())?;
        self.reserved_to = self.size;
        Ok(())
    }

    /// Create a new empty segment (an existing file of that name is emptied).
    pub fn create(dir: &Path, base: i64, now_ms: i64, id: u64, disk: &Disk) -> Result<Segment> {
        let path = dir.join(file_name(base, ".log"));
        let file = disk.create_file(&path).at(&path)?;
        for suffix in [".index", ".timeindex", TXN_INDEX] {
            disk.remove_if_exists(&dir.join(file_name(base, suffix)))?;
        }
        Ok(Segment::empty(dir, base, file, now_ms, id))
    }

    /// Open an existing segment file. With `trusted`, load the index files (sanity checked) and
    /// scan only the tail after the last index entry; otherwise (or if an index is missing or
    /// corrupt) validate every batch and rebuild the indexes, truncating at the first invalid
    /// byte. Returns the segment and whether it was truncated. Its aborted-transaction index is
    /// loaded last, against the batches that remain.
    pub fn open(
        dir: &Path,
        base: i64,
        trusted: bool,
        index_interval: u64,
        now_ms: i64,
        id: u64,
        disk: &Disk,
    ) -> Result<(Segment, bool)> {
        let (mut seg, truncated) =
            Segment::open_data(dir, base, trusted, index_interval, now_ms, id, disk)?;
        let path = seg.txn_index_path();
        seg.txn_index = TxnIndex::load(path, base, seg.next_offset, seg.size, disk)?;
        Ok((seg, truncated))
    }

    fn open_data(
        dir: &Path,
        base: i64,
        trusted: bool,
        index_interval: u64,
        now_ms: i64,
        id: u64,
        disk: &Disk,
    ) -> Result<(Segment, bool)> {
        let path = dir.join(file_name(base, ".log"));
        let file = disk.open_file(&path).at(&path)?;
        let file_len = file.metadata().at(&path)?.len();
        let mut seg = Segment::empty(dir, base, file, now_ms, id);
        seg.size = file_len;
        if trusted {
            match seg.load_indexes() {
                Ok(()) => match seg.scan_tail() {
                    Ok(()) => {
                        seg.indexes_dirty = false;
                        seg.load_rolling_ts()?;
                        return Ok((seg, false));
                    }
                    Err(reason) => {
                        warn!(segment = %path.display(), %reason, "tail invalid; recovering segment")
                    }
                },
                Err(reason) => {
                    warn!(segment = %path.display(), %reason, "index unusable; rebuilding")
                }
            }
        }
        let truncated = seg.recover(index_interval, disk)?;
        seg.load_rolling_ts()?;
        if !truncated {
            // A crash can leave blocks reserved past the last batch (recovery's own cut frees
            // them when it truncates).
            seg.release_reservation(disk)?;
        }
        Ok((seg, truncated))
    }

    /// Build a segment over an already written file (a compacted segment before it is renamed
    /// into place), validating every batch and building its indexes.
    pub fn from_file(
        dir: &Path,
        base: i64,
        file: File,
        index_interval: u64,
        now_ms: i64,
        id: u64,
        disk: &Disk,
    ) -> Result<Segment> {
        let mut seg = Segment::empty(dir, base, file, now_ms, id);
        if seg.recover(index_interval, disk)? {
            return Err(LogError::CorruptFile {
                path: seg.log_path(),
                reason: "freshly written segment failed validation".into(),
            });
        }
        seg.load_rolling_ts()?;
        Ok(seg)
    }

    fn load_rolling_ts(&mut self) -> Result<()> {
        self.rolling_ts = None;
        if self.size >= HEADER_LEN as u64 {
            let mut h = [0u8; HEADER_LEN];
            self.file.read_exact_at(&mut h, 0).at(&self.log_path())?;
            self.rolling_ts = BatchHeader::parse(&h).map(|h| h.max_timestamp);
        }
        Ok(())
    }

    fn load_indexes(&mut self) -> Result<(), String> {
        // An empty segment's indexes are empty: a clean close does not write them.
        let empty = self.size == 0;
        let read = |p: PathBuf| match fs::read(&p) {
            Err(e) if empty && e.kind() == std::io::ErrorKind::NotFound => Ok(Vec::new()),
            r => r.map_err(|e| format!("{}: {e}", p.display())),
        };
        let oi = read(self.index_path())?;
        let ti = read(self.time_index_path())?;
        self.offset_index = OffsetIndex::decode(&oi, self.size, u64::from(u32::MAX))?;
        self.time_index = TimeIndex::decode(&ti, u64::from(u32::MAX))?;
        Ok(())
    }

    /// Recompute `next_offset`, `max_ts`, `bytes_since_index` from the last offset-index entry
    /// to the end of the file (headers only), checking that the indexes fit the data.
    fn scan_tail(&mut self) -> Result<(), String> {
        let start = self.offset_index.last().map_or(0, |e| u64::from(e.pos));
        self.next_offset = self.base;
        if let Some(e) = self.offset_index.last() {
            self.next_offset = self.base + i64::from(e.rel) + 1;
        }
        match self.time_index.last() {
            Some(t) => {
                self.max_ts = t.ts;
                self.offset_of_max_ts = self.base + i64::from(t.rel);
            }
            None => {
                self.max_ts = -1;
                self.offset_of_max_ts = self.base - 1;
            }
        }
        let mut next = self.next_offset;
        let mut first = true;
        let (mut max_ts, mut max_off) = (self.max_ts, self.offset_of_max_ts);
        let mut since = 0u64;
        let base = self.base;
        let indexed_last = self.offset_index.last().map(|e| base + i64::from(e.rel));
        let end = scan(&self.file, start, self.size, false, |_, h, _| {
            if first && indexed_last.is_some_and(|l| h.last_offset() != l) {
                return Err("index entry does not match its batch".into());
            }
            if (!first && h.base_offset < next) || h.base_offset < base {
                return Err(format!("offset {} goes backwards", h.base_offset));
            }
            first = false;
            next = h.next_offset();
            if h.max_timestamp > max_ts {
                max_ts = h.max_timestamp;
                max_off = h.last_offset();
            }
            since += h.size() as u64;
            Ok(true)
        })
        .map_err(|e| e.to_string())?;
        if end != ScanEnd::Complete {
            return Err(format!("{end:?}"));
        }
        if let Some(t) = self.time_index.last() {
            if self.base + i64::from(t.rel) >= next {
                return Err("time index points past the data".into());
            }
        }
        self.next_offset = next;
        self.max_ts = max_ts;
        self.offset_of_max_ts = max_off;
        self.bytes_since_index = since;
        Ok(())
    }

    /// Validate every batch, rebuild the indexes, truncate an invalid tail. Returns whether the
    /// file was truncated.
    pub fn recover(&mut self, index_interval: u64, disk: &Disk) -> Result<bool> {
        let path = self.log_path();
        let file_len = self.file.metadata().at(&path)?.len();
        self.reset_state();
        let file = Arc::clone(&self.file);
        let base = self.base;
        let mut next = self.base;
        let mut batches: Vec<(u64, BatchHeader)> = Vec::new();
        let end = scan(&file, 0, file_len, true, |pos, h, _| {
            if h.base_offset < next {
                return Err(format!(
                    "offset {} goes backwards (expected >= {next})",
                    h.base_offset
                ));
            }
            if h.last_offset() - base > i64::from(u32::MAX) {
                return Err("offset too far from the segment base".into());
            }
            next = h.next_offset();
            batches.push((pos, *h));
            Ok(true)
        })
        .at(&path)?;
        for (pos, h) in &batches {
            self.index_batch(*pos, h, index_interval);
        }
        self.size = batches.last().map_or(0, |(p, h)| p + h.size() as u64);
        self.indexes_dirty = true;
        if let ScanEnd::Invalid { pos, reason } = end {
            warn!(segment = %path.display(), pos, file_len, %reason, "truncating invalid tail");
            disk.set_len(&self.file, pos).at(&path)?;
            disk.sync_data(&self.file).at(&path)?;
            return Ok(true);
        }
        Ok(false)
    }

    fn reset_state(&mut self) {
        self.size = 0;
        self.next_offset = self.base;
        self.max_ts = -1;
        self.offset_of_max_ts = self.base - 1;
        self.offset_index = OffsetIndex::default();
        self.time_index = TimeIndex::default();
        self.bytes_since_index = 0;
    }

    fn rel(&self, offset: i64) -> u32 {
        u32::try_from((offset - self.base).max(0)).unwrap_or(u32::MAX)
    }

    /// Account for a batch written at `pos` (Kafka's `LogSegment.append` bookkeeping).
    fn index_batch(&mut self, pos: u64, h: &BatchHeader, interval: u64) {
        if h.max_timestamp > self.max_ts {
            self.max_ts = h.max_timestamp;
            self.offset_of_max_ts = h.last_offset();
        }
        if self.bytes_since_index > interval {
            let rel = self.rel(h.last_offset());
            self.offset_index.push(rel, pos as u32);
            let trel = self.rel(self.offset_of_max_ts);
            self.time_index.maybe_push(self.max_ts, trel);
            self.bytes_since_index = 0;
        }
        self.bytes_since_index += h.size() as u64;
        self.next_offset = h.next_offset();
        if self.rolling_ts.is_none() {
            self.rolling_ts = Some(h.max_timestamp);
        }
    }

    /// Write validated batches (the concatenation of `parts`, whose batches are `headers`) at
    /// the end of the file. On failure the file is cut back so nothing of them remains.
    pub fn append(
        &mut self,
        parts: &[&[u8]],
        headers: &[BatchHeader],
        interval: u64,
        disk: &Disk,
    ) -> Result<()> {
        let path = self.log_path();
        let len: u64 = parts.iter().map(|p| p.len() as u64).sum();
        self.reserve(len, disk);
        if let Err(e) = disk.write_parts_at(&self.file, parts, self.size) {
            if let Err(e2) = disk.set_len(&self.file, self.size) {
                warn!(segment = %path.display(), error = %e2, "cannot cut back a failed write");
            }
            return Err(LogError::io(path, e));
        }
        let mut pos = self.size;
        for h in headers {
            self.index_batch(pos, h, interval);
            pos += h.size() as u64;
        }
        self.size = pos;
        self.indexes_dirty = true;
        Ok(())
    }

    /// Whether appending `count` more offsets ending at `last_offset` would overflow the
    /// relative offsets or positions of the index.
    pub fn can_hold(&self, last_offset: i64, bytes: u64) -> bool {
        last_offset - self.base <= i64::from(u32::MAX) && self.size + bytes <= u64::from(u32::MAX)
    }

    /// Record the final time index entry and write both index files atomically.
    pub fn write_indexes(&mut self, disk: &Disk) -> Result<()> {
        if self.max_ts >= 0 {
            let rel = self.rel(self.offset_of_max_ts);
            self.time_index.maybe_push(self.max_ts, rel);
        }
        disk.write_atomic(&self.index_path(), &self.offset_index.encode())?;
        disk.write_atomic(&self.time_index_path(), &self.time_index.encode())?;
        self.indexes_dirty = false;
        Ok(())
    }

    /// First batch whose last offset is `>= offset`: its position and header.
    pub fn translate(&self, offset: i64) -> Result<Option<(u64, BatchHeader)>> {
        self.translate_with(offset, Wait::Block)
    }

    /// [`Segment::translate`], reading as `wait` says.
    pub fn translate_with(&self, offset: i64, wait: Wait) -> Result<Option<(u64, BatchHeader)>> {
        let start = if offset <= self.base {
            0
        } else {
            u64::from(self.offset_index.lookup(self.rel(offset)))
        };
        let mut found = None;
        scan_with(&self.file, start, self.size, false, wait, |pos, h, _| {
            if h.last_offset() >= offset {
                found = Some((pos, *h));
                return Ok(false);
            }
            Ok(true)
        })
        .at(&self.log_path())?;
        Ok(found)
    }

    /// Read `len` bytes at `pos` (fewer if the file is shorter now). The bytes go straight into
    /// the vector's spare capacity: a fetch-sized buffer is not zeroed first.
    pub fn read_at(file: &File, pos: u64, len: usize) -> std::io::Result<Vec<u8>> {
        let mut buf = Vec::new();
        Segment::read_at_into(file, pos, len, &mut buf)?;
        Ok(buf)
    }

    /// [`Segment::read_at`] into `buf` (emptied first; its capacity is reused).
    pub fn read_at_into(
        file: &File,
        pos: u64,
        len: usize,
        buf: &mut Vec<u8>,
    ) -> std::io::Result<()> {
        buf.clear();
        buf.reserve(len);
        while buf.len() < len {
            let at = pos + buf.len() as u64;
            match rustix::io::pread(file, rustix::buffer::spare_capacity(&mut *buf), at) {
                Ok(0) => break,
                Ok(_) => {}
                Err(rustix::io::Errno::INTR) => {}
                Err(e) => return Err(e.into()),
            }
        }
        // The capacity may exceed `len`, and a read may have filled past it.
        buf.truncate(len);
        Ok(())
    }

    /// First record at or after `min_offset` whose timestamp is `>= ts`: `(offset, timestamp)`.
    pub fn find_by_timestamp(&self, ts: i64, min_offset: i64) -> Result<Option<(i64, i64)>> {
        if self.max_ts < ts {
            return Ok(None);
        }
        let from = self
            .time_index
            .floor_below(ts)
            .map_or(self.base, |e| self.base + i64::from(e.rel));
        let start = u64::from(self.offset_index.lookup(self.rel(from.max(min_offset))));
        let mut hit = None;
        scan(&self.file, start, self.size, false, |pos, h, _| {
            if h.max_timestamp >= ts && h.last_offset() >= min_offset {
                hit = Some((pos, *h));
                return Ok(false);
            }
            Ok(true)
        })
        .at(&self.log_path())?;
        let Some((pos, h)) = hit else { return Ok(None) };
        self.first_record_matching(pos, &h, |o, t| o >= min_offset && t >= ts)
    }

    /// Read the records of the batch at `pos` one at a time (never all of them at once) and
    /// return the first whose `(offset, timestamp)` satisfies `pred`.
    pub fn first_record_matching(
        &self,
        pos: u64,
        h: &BatchHeader,
        pred: impl Fn(i64, i64) -> bool,
    ) -> Result<Option<(i64, i64)>> {
        let bytes = Segment::read_at(&self.file, pos, h.size()).at(&self.log_path())?;
        let mut stream = RecordStream::new(h, &bytes, validate::STORED.cap)?;
        while let Some(r) = stream.next_record()? {
            let offset = h.base_offset.saturating_add(r.offset_delta);
            let ts = if h.is_log_append_time() {
                h.max_timestamp
            } else {
                h.base_timestamp.wrapping_add(r.timestamp_delta)
            };
            if pred(offset, ts) {
                return Ok(Some((offset, ts)));
            }
        }
        Ok(None)
    }

    /// Remove every batch whose last offset is `>= offset` (Kafka truncates whole batches).
    /// Returns whether anything was removed. Aborted-transaction entries of the removed range
    /// go too.
    pub fn truncate_to(&mut self, offset: i64, disk: &Disk) -> Result<bool> {
        self.txn_index.truncate_from(offset, disk)?;
        let Some((pos, _)) = self.translate(offset)? else {
            return Ok(false);
        };
        let path = self.log_path();
        disk.set_len(&self.file, pos).at(&path)?;
        disk.sync_data(&self.file).at(&path)?;
        self.size = pos;
        self.offset_index.truncate_to_position(pos as u32);
        let rel = self.rel(offset);
        self.time_index.truncate_to_rel(rel);
        self.indexes_dirty = true;
        self.scan_tail()
            .map_err(|reason| LogError::CorruptFile { path, reason })?;
        if self.size == 0 {
            self.rolling_ts = None;
        }
        Ok(true)
    }

    /// The segment's files (some may not exist: indexes are written at a roll or a close, the
    /// aborted-transaction index only for a segment with aborted transactions).
    fn file_paths(&self) -> Vec<PathBuf> {
        let mut paths = vec![self.log_path(), self.index_path(), self.time_index_path()];
        if self.txn_index.owns_file() {
            paths.push(self.txn_index_path());
        }
        paths
    }

    /// Delete the segment's files.
    pub fn delete_files(&self, disk: &Disk) -> Result<()> {
        for p in self.file_paths() {
            disk.remove_if_exists(&p)?;
        }
        Ok(())
    }

    /// Makes the aborted-transaction index durable (its file, and its name when new).
    pub fn sync_txn_index(&mut self, disk: &Disk) -> Result<()> {
        if self.txn_index.sync(disk)? {
            disk.sync_dir(&self.dir)?;
            self.txn_index.name_synced();
        }
        Ok(())
    }

    /// Renames the segment's files to `<name>.deleted`, to be unlinked later; returns the new
    /// paths. Open handles (reads in flight) keep working; the segment's own names are free
    /// for a new segment at the same base offset.
    pub fn rename_for_deletion(&self, disk: &Disk) -> Result<Vec<PathBuf>> {
        let mut renamed = Vec::with_capacity(4);
        for p in self.file_paths() {
            let mut to = p.clone().into_os_string();
            to.push(DELETED);
            let to = PathBuf::from(to);
            match disk.rename(&p, &to) {
                Ok(()) => renamed.push(to),
                // Index files exist only once written (at a roll, a close, an abort marker).
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => return Err(LogError::io(&p, e)),
            }
        }
        Ok(renamed)
    }
}
