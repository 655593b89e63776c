// The commit `gregor_build_info` reports: GREGOR_COMMIT when set (a build from a source
// tarball), else `git rev-parse HEAD` of the checkout, else "unknown". The script reruns when
// HEAD moves, so a new commit is picked up without touching the sources.
use std::path::Path;
use std::process::Command;

fn git(args: &[&str]) -> Option<String> {
    let out = Command::new("git").args(args).output().ok()?;
    let text = String::from_utf8(out.stdout).ok()?;
    (out.status.success() && !text.trim().is_empty()).then(|| text.trim().to_string())
}

fn main() {
    println!("cargo:rerun-if-env-changed=GREGOR_COMMIT");
    let commit = std::env::var("GREGOR_COMMIT")
        .ok()
        .filter(|c| !c.is_empty())
        .or_else(|| git(&["rev-parse", "HEAD"]))
        .unwrap_or_else(|| "unknown".to_string());
    println!("cargo:rustc-env=GREGOR_COMMIT={commit}");
    let Some(dir) = git(&["rev-parse", "--absolute-git-dir"]) else {
        return;
    };
    // Branches live in the common directory, which a linked worktree shares with the main one.
    let common = git(&["rev-parse", "--path-format=absolute", "--git-common-dir"])
        .unwrap_or_else(|| dir.clone());
    // A missing file would make cargo rerun the script on every build: name only those that exist.
    let mut watched = vec![format!("{dir}/HEAD"), format!("{common}/packed-refs")];
    if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
        watched.push(format!("{common}/{branch}"));
    }
    for path in watched.iter().filter(|p| Path::new(p).exists()) {
        println!("cargo:rerun-if-changed={path}");
    }
}
