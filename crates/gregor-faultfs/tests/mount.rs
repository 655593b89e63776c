//! The real binary, mounted, driven with ordinary file system calls and the control socket.
//! Needs /dev/fuse and root (or fusermount3); it fails, never skips, when it cannot mount.

use std::fs::{self, File, OpenOptions};
use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

struct Mounted {
    child: Child,
    _dir: tempfile::TempDir,
    mnt: PathBuf,
    sock: PathBuf,
}

fn is_mounted(mnt: &Path) -> bool {
    let mounts = fs::read_to_string("/proc/self/mountinfo").expect("read mountinfo");
    let mnt = mnt.to_str().expect("utf-8 temp path");
    mounts.lines().any(|l| l.split(' ').nth(4) == Some(mnt))
}

impl Mounted {
    fn new(max_bytes: u64) -> Mounted {
        let dir = tempfile::tempdir().expect("temp dir");
        let mnt = dir.path().join("mnt");
        let sock = dir.path().join("ctl.sock");
        fs::create_dir(&mnt).expect("mountpoint");
        let child = Command::new(env!("CARGO_BIN_EXE_gregor-faultfs"))
            .arg(&mnt)
            .arg("--control")
            .arg(&sock)
            .arg("--max-bytes")
            .arg(max_bytes.to_string())
            .stdin(Stdio::null())
            .spawn()
            .expect("start gregor-faultfs");
        let mut m = Mounted {
            child,
            _dir: dir,
            mnt,
            sock,
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(status) = m.child.try_wait().expect("wait") {
                panic!("gregor-faultfs exited with {status} before mounting (needs /dev/fuse and root or fusermount3)");
            }
            if UnixStream::connect(&m.sock).is_ok() {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "gregor-faultfs did not mount within 10 s"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        assert!(is_mounted(&m.mnt), "control socket up but nothing mounted");
        m
    }

    fn command(&self, cmd: &str) -> String {
        let mut s = UnixStream::connect(&self.sock).expect("connect control socket");
        writeln!(s, "{cmd}").expect("send command");
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).expect("read answer");
        line.trim().to_owned()
    }

    fn power_loss(&self) -> String {
        let a = self.command("power-loss");
        assert!(a.starts_with("ok "), "{a}");
        a
    }

    fn path(&self, p: &str) -> PathBuf {
        self.mnt.join(p)
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = UnixStream::connect(&self.sock).and_then(|mut s| writeln!(s, "unmount"));
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if is_mounted(&self.mnt) {
            let _ = Command::new("umount").arg("-l").arg(&self.mnt).status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn sync_dir(p: &Path) {
    File::open(p)
        .expect("open dir")
        .sync_all()
        .expect("fsync dir");
}

fn read(p: &Path) -> Option<Vec<u8>> {
    fs::read(p).ok()
}

fn names(p: &Path) -> Vec<String> {
    let mut v: Vec<String> = fs::read_dir(p)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .collect();
    v.sort();
    v
}

#[test]
fn synced_file_survives_power_loss_and_unsynced_tail_does_not() {
    let m = Mounted::new(64 << 20);
    let p = m.path("seg.log");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&p)
        .expect("create");
    f.write_all_at(b"durable;", 0).expect("write");
    f.sync_data().expect("fdatasync");
    sync_dir(&m.mnt);
    f.write_all_at(b"volatile", 8).expect("write");
    assert_eq!(read(&p).as_deref(), Some(&b"durable;volatile"[..]));
    drop(f);
    let a = m.power_loss();
    assert!(a.contains("files_reverted=1"), "{a}");
    assert_eq!(read(&p).as_deref(), Some(&b"durable;"[..]));
    assert_eq!(fs::metadata(&p).expect("stat").len(), 8);
}

#[test]
fn unsynced_names_vanish_even_with_synced_data() {
    let m = Mounted::new(64 << 20);
    fs::create_dir(m.path("topic-0")).expect("mkdir");
    let f = File::create(m.path("topic-0/0.log")).expect("create");
    (&f).write_all(b"abc").expect("write");
    f.sync_all().expect("fsync");
    sync_dir(&m.path("topic-0"));
    // The directory's own name was never synced in the root: everything under it goes.
    m.power_loss();
    assert!(names(&m.mnt).is_empty());

    fs::create_dir(m.path("topic-0")).expect("mkdir");
    sync_dir(&m.mnt);
    let f = File::create(m.path("topic-0/0.log")).expect("create");
    (&f).write_all(b"abc").expect("write");
    f.sync_all().expect("fsync");
    m.power_loss();
    assert_eq!(names(&m.mnt), ["topic-0"]);
    assert!(
        names(&m.path("topic-0")).is_empty(),
        "0.log's name was never synced"
    );
}

#[test]
fn rename_not_followed_by_directory_fsync_reverts() {
    let m = Mounted::new(64 << 20);
    fs::write(m.path("meta.properties"), b"old").expect("write");
    File::open(m.path("meta.properties"))
        .expect("open")
        .sync_all()
        .expect("fsync");
    fs::write(m.path("meta.properties.tmp"), b"new").expect("write");
    File::open(m.path("meta.properties.tmp"))
        .expect("open")
        .sync_all()
        .expect("fsync");
    sync_dir(&m.mnt);
    fs::rename(m.path("meta.properties.tmp"), m.path("meta.properties")).expect("rename");
    m.power_loss();
    assert_eq!(names(&m.mnt), ["meta.properties", "meta.properties.tmp"]);
    assert_eq!(
        read(&m.path("meta.properties")).as_deref(),
        Some(&b"old"[..])
    );

    fs::rename(m.path("meta.properties.tmp"), m.path("meta.properties")).expect("rename");
    sync_dir(&m.mnt);
    m.power_loss();
    assert_eq!(names(&m.mnt), ["meta.properties"]);
    assert_eq!(
        read(&m.path("meta.properties")).as_deref(),
        Some(&b"new"[..])
    );
}

#[test]
fn unlink_and_truncate_revert_without_sync() {
    let m = Mounted::new(64 << 20);
    let p = m.path("a");
    fs::write(&p, b"0123456789").expect("write");
    File::open(&p).expect("open").sync_all().expect("fsync");
    sync_dir(&m.mnt);
    OpenOptions::new()
        .write(true)
        .open(&p)
        .expect("open")
        .set_len(3)
        .expect("truncate");
    assert_eq!(read(&p).as_deref(), Some(&b"012"[..]));
    m.power_loss();
    assert_eq!(read(&p).as_deref(), Some(&b"0123456789"[..]));
    fs::remove_file(&p).expect("unlink");
    m.power_loss();
    assert_eq!(read(&p).as_deref(), Some(&b"0123456789"[..]));
    fs::remove_file(&p).expect("unlink");
    sync_dir(&m.mnt);
    m.power_loss();
    assert!(read(&p).is_none());
}

#[test]
fn the_calls_a_log_makes_work() {
    let m = Mounted::new(64 << 20);
    let p = m.path("00000000000000000000.log");
    let f = OpenOptions::new()
        .create(true)
        .truncate(true)
        .read(true)
        .write(true)
        .open(&p)
        .expect("create");
    // fallocate(KEEP_SIZE), as segments reserve space ahead of appends.
    rustix::fs::fallocate(&f, rustix::fs::FallocateFlags::KEEP_SIZE, 0, 1 << 20)
        .expect("fallocate KEEP_SIZE");
    assert_eq!(f.metadata().expect("stat").len(), 0);
    // pwritev of several parts at once.
    let parts = [
        std::io::IoSlice::new(b"head"),
        std::io::IoSlice::new(b"-body"),
    ];
    assert_eq!(rustix::io::pwritev(&f, &parts, 0).expect("pwritev"), 9);
    let mut buf = [0u8; 9];
    f.read_exact_at(&mut buf, 0).expect("pread");
    assert_eq!(&buf, b"head-body");
    f.sync_data().expect("fdatasync");
    let s = fs::metadata(&m.mnt).expect("stat");
    assert!(s.is_dir());
    let st = rustix::fs::statvfs(&m.mnt).expect("statfs");
    assert!(
        st.f_blocks > 0 && st.f_bfree <= st.f_blocks,
        "blocks {} free {}",
        st.f_blocks,
        st.f_bfree
    );
    // Past the budget: ENOSPC, not an allocation.
    let e = f
        .write_all_at(b"x", 1 << 40)
        .expect_err("beyond the budget");
    assert_eq!(e.raw_os_error(), Some(28), "{e}");
    let a = m.command("stats");
    assert!(a.starts_with("ok inodes=2 "), "{a}");
    assert!(m.command("nonsense").starts_with("err unknown command"));
}
