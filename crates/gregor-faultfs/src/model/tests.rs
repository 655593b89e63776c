use super::*;

const T: SystemTime = SystemTime::UNIX_EPOCH;

fn fs() -> Model {
    Model::new(1 << 20, T)
}

fn file(m: &mut Model, dir: Ino, name: &str) -> Ino {
    m.create(dir, OsStr::new(name), Kind::File, 0o644, 0, 0, T)
        .expect("create")
        .ino
}

fn dir(m: &mut Model, parent: Ino, name: &str) -> Ino {
    m.create(parent, OsStr::new(name), Kind::Dir, 0o755, 0, 0, T)
        .expect("mkdir")
        .ino
}

fn names(m: &Model, d: Ino) -> Vec<String> {
    m.list(d)
        .expect("list")
        .into_iter()
        .map(|(n, _, _)| n.to_string_lossy().into_owned())
        .collect()
}

fn contents(m: &mut Model, d: Ino, name: &str) -> Option<Vec<u8>> {
    let ino = m.lookup(d, OsStr::new(name), false).ok()?.ino;
    Some(m.read(ino, 0, u32::MAX).expect("read").to_vec())
}

#[test]
fn synced_file_in_synced_directory_survives() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "a");
    m.write(f, 0, b"hello", T).unwrap();
    m.sync(f).unwrap();
    m.sync_dir(ROOT).unwrap();
    let r = m.power_loss();
    assert_eq!(r, LossReport::default());
    assert_eq!(contents(&mut m, ROOT, "a").as_deref(), Some(&b"hello"[..]));
}

#[test]
fn unsynced_data_vanishes_synced_prefix_stays() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "a");
    m.sync_dir(ROOT).unwrap();
    m.write(f, 0, b"durable", T).unwrap();
    m.sync(f).unwrap();
    m.write(f, 7, b"+volatile", T).unwrap();
    m.write(f, 0, b"D", T).unwrap();
    let r = m.power_loss();
    assert_eq!(r.files_reverted, 1);
    assert_eq!(r.bytes_dropped, 16);
    assert_eq!(
        contents(&mut m, ROOT, "a").as_deref(),
        Some(&b"durable"[..])
    );
}

#[test]
fn synced_data_under_an_unsynced_name_vanishes() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "a");
    m.write(f, 0, b"data", T).unwrap();
    m.sync(f).unwrap();
    let r = m.power_loss();
    assert_eq!(r.inodes_dropped, 1);
    assert_eq!(
        r.details,
        ["name /a vanishes (never synced in its directory)"]
    );
    assert!(names(&m, ROOT).is_empty());
    assert!(m.attr(f).is_err(), "the dropped inode is stale");
}

#[test]
fn synced_name_with_unsynced_data_comes_back_empty() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "a");
    m.sync_dir(ROOT).unwrap();
    m.write(f, 0, b"data", T).unwrap();
    m.power_loss();
    assert_eq!(contents(&mut m, ROOT, "a").as_deref(), Some(&b""[..]));
}

#[test]
fn new_directory_needs_its_parent_synced_and_its_own_entries_need_itself() {
    let mut m = fs();
    let d = dir(&mut m, ROOT, "d");
    let f = file(&mut m, d, "f");
    m.sync(f).unwrap();
    m.sync_dir(d).unwrap();
    m.power_loss();
    assert!(names(&m, ROOT).is_empty(), "d was never named durably");

    let d = dir(&mut m, ROOT, "d");
    let _f = file(&mut m, d, "f");
    m.sync_dir(ROOT).unwrap();
    m.power_loss();
    assert_eq!(names(&m, ROOT), ["d"]);
    let d = m.lookup(ROOT, OsStr::new("d"), false).unwrap().ino;
    assert!(names(&m, d).is_empty(), "f was never named durably");
}

#[test]
fn rename_without_directory_sync_reverts() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "a.tmp");
    m.write(f, 0, b"new", T).unwrap();
    m.sync(f).unwrap();
    let old = file(&mut m, ROOT, "a");
    m.write(old, 0, b"old", T).unwrap();
    m.sync(old).unwrap();
    m.sync_dir(ROOT).unwrap();
    m.rename(ROOT, OsStr::new("a.tmp"), ROOT, OsStr::new("a"), false, T)
        .unwrap();
    assert_eq!(names(&m, ROOT), ["a"]);
    assert_eq!(contents(&mut m, ROOT, "a").as_deref(), Some(&b"new"[..]));
    m.power_loss();
    assert_eq!(names(&m, ROOT), ["a", "a.tmp"]);
    assert_eq!(contents(&mut m, ROOT, "a").as_deref(), Some(&b"old"[..]));

    m.rename(ROOT, OsStr::new("a.tmp"), ROOT, OsStr::new("a"), false, T)
        .unwrap();
    m.sync_dir(ROOT).unwrap();
    m.power_loss();
    assert_eq!(names(&m, ROOT), ["a"]);
    assert_eq!(contents(&mut m, ROOT, "a").as_deref(), Some(&b"new"[..]));
}

#[test]
fn rename_between_directories_is_durable_per_directory() {
    let setup = || {
        let mut m = fs();
        let a = dir(&mut m, ROOT, "a");
        let b = dir(&mut m, ROOT, "b");
        let f = file(&mut m, a, "f");
        m.write(f, 0, b"x", T).unwrap();
        m.sync(f).unwrap();
        for d in [ROOT, a, b] {
            m.sync_dir(d).unwrap();
        }
        m.rename(a, OsStr::new("f"), b, OsStr::new("g"), false, T)
            .unwrap();
        (m, a, b)
    };
    // Only the target synced: the file is under both names, two links.
    let (mut m, a, b) = setup();
    m.sync_dir(b).unwrap();
    m.power_loss();
    assert_eq!(
        (names(&m, a), names(&m, b)),
        (vec!["f".into()], vec!["g".into()])
    );
    assert_eq!(m.lookup(a, OsStr::new("f"), false).unwrap().nlink, 2);
    // Only the source synced: under neither name.
    let (mut m, a, b) = setup();
    m.sync_dir(a).unwrap();
    let r = m.power_loss();
    assert!(names(&m, a).is_empty() && names(&m, b).is_empty());
    assert_eq!(r.inodes_dropped, 1);
    // Both: moved.
    let (mut m, a, b) = setup();
    m.sync_dir(a).unwrap();
    m.sync_dir(b).unwrap();
    m.power_loss();
    assert_eq!((names(&m, a), names(&m, b)), (vec![], vec!["g".into()]));
    assert_eq!(contents(&mut m, b, "g").as_deref(), Some(&b"x"[..]));
}

#[test]
fn directory_moved_with_only_the_target_synced_keeps_one_name() {
    let mut m = fs();
    let a = dir(&mut m, ROOT, "a");
    let b = dir(&mut m, ROOT, "b");
    let _d = dir(&mut m, a, "d");
    for d in [ROOT, a, b] {
        m.sync_dir(d).unwrap();
    }
    m.rename(a, OsStr::new("d"), b, OsStr::new("d"), false, T)
        .unwrap();
    m.sync_dir(b).unwrap();
    m.power_loss();
    // Walking from the root in name order reaches a/d first.
    assert_eq!((names(&m, a), names(&m, b)), (vec!["d".into()], vec![]));
}

#[test]
fn unlink_without_directory_sync_comes_back() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "seg");
    m.write(f, 0, b"abc", T).unwrap();
    m.sync(f).unwrap();
    m.sync_dir(ROOT).unwrap();
    m.remove(ROOT, OsStr::new("seg"), false, T).unwrap();
    m.forget(f, 1);
    assert!(names(&m, ROOT).is_empty());
    m.power_loss();
    assert_eq!(contents(&mut m, ROOT, "seg").as_deref(), Some(&b"abc"[..]));
    m.remove(ROOT, OsStr::new("seg"), false, T).unwrap();
    m.sync_dir(ROOT).unwrap();
    assert_eq!(
        m.stats().used_bytes,
        0,
        "freed once no name and no reference holds it"
    );
}

#[test]
fn truncation_is_volatile_until_synced() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "a");
    m.sync_dir(ROOT).unwrap();
    m.write(f, 0, b"0123456789", T).unwrap();
    m.sync(f).unwrap();
    m.set_len(f, 4, T).unwrap();
    m.power_loss();
    assert_eq!(
        contents(&mut m, ROOT, "a").as_deref(),
        Some(&b"0123456789"[..])
    );
    // Shrink, grow back with zeros, sync: the durable copy must hold the zeros.
    m.set_len(f, 4, T).unwrap();
    m.set_len(f, 8, T).unwrap();
    m.write(f, 6, b"x", T).unwrap();
    m.sync(f).unwrap();
    m.power_loss();
    assert_eq!(
        contents(&mut m, ROOT, "a").as_deref(),
        Some(&b"0123\0\0x\0"[..])
    );
}

#[test]
fn open_unlinked_file_lives_until_forgotten() {
    let mut m = fs();
    let f = file(&mut m, ROOT, "a");
    m.write(f, 0, b"abc", T).unwrap();
    m.remove(ROOT, OsStr::new("a"), false, T).unwrap();
    assert_eq!(m.read(f, 0, 10).unwrap(), b"abc");
    m.forget(f, 1);
    assert!(m.attr(f).is_err());
    assert_eq!(m.stats().used_bytes, 0);
}

#[test]
fn budget_refuses_before_allocating() {
    let mut m = Model::new(100, T);
    let f = file(&mut m, ROOT, "a");
    assert_eq!(m.write(f, 1 << 40, b"x", T), Err(FsError::NoSpace));
    assert_eq!(m.set_len(f, u64::MAX, T), Err(FsError::NoSpace));
    assert_eq!(m.write(f, u64::MAX, b"x", T), Err(FsError::Invalid));
    m.write(f, 0, &[1; 100], T).unwrap();
    assert_eq!(m.write(f, 100, b"x", T), Err(FsError::NoSpace));
    assert_eq!(m.attr(f).unwrap().size, 100);
    m.allocate(f, 0, 1 << 30, true, T).unwrap();
    assert_eq!(m.attr(f).unwrap().size, 100, "KEEP_SIZE leaves the size");
}

#[test]
fn directory_rules() {
    let mut m = fs();
    let d = dir(&mut m, ROOT, "d");
    let e = dir(&mut m, d, "e");
    file(&mut m, e, "f");
    assert_eq!(
        m.remove(ROOT, OsStr::new("d"), true, T),
        Err(FsError::NotEmpty)
    );
    assert_eq!(
        m.rename(ROOT, OsStr::new("d"), e, OsStr::new("x"), false, T),
        Err(FsError::Invalid),
        "a directory cannot move below itself"
    );
    assert_eq!(
        m.create(ROOT, OsStr::new("d"), Kind::File, 0o644, 0, 0, T)
            .map(|_| ()),
        Err(FsError::Exists)
    );
    assert_eq!(
        m.rename(e, OsStr::new("f"), ROOT, OsStr::new("d"), false, T),
        Err(FsError::IsDir)
    );
    assert_eq!(m.remove(e, OsStr::new("f"), true, T), Err(FsError::NotDir));
    assert_eq!(m.parent(e).unwrap(), d);
}
