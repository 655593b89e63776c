//! Runs the real-client end-to-end suite (`e2e/`, Python + pytest) against the `gregor` binary
//! that cargo just built. The suite's own README says what it covers and how to run parts of it.
//!
//! It fails — never skips — when python3 or the test dependencies are missing: a green `cargo
//! test` must mean kcat, confluent-kafka and kafka-python were actually run against the broker.
//! Extra pytest arguments go in pytest's own `PYTEST_ADDOPTS` (shell-quoted), e.g.
//! `PYTEST_ADDOPTS='-m "not slow"' cargo test -p gregor-cli --test e2e`.
//!
//! The interoperability and transaction tests also run Gregor's own client, as the example
//! binaries `gregor_member` and `eos_pipeline` of gregor-client (`GREGOR_MEMBER_BIN`,
//! `GREGOR_EOS_PIPELINE_BIN`, next to the `gregor` binary in `<target dir>/debug/examples/`). `cargo test --workspace` builds every package's examples
//! before running any test; with `-p gregor-cli`, build it first:
//! `cargo build -p gregor-client --examples`.
//!
//! The power-loss tests mount `gregor-faultfs` (`GREGOR_FAULTFS_BIN`, the binary of the
//! gregor-faultfs package, next to `gregor`). `cargo test --workspace` builds it (its package has
//! integration tests); with `-p gregor-cli`, build it first: `cargo build -p gregor-faultfs`.

use std::path::{Path, PathBuf};
use std::process::Command;

/// `<target dir>/<profile>/examples/<name>`, beside the `gregor` binary cargo built, unless
/// `env` names another path.
fn example_bin(name: &str, env: &str) -> PathBuf {
    if let Some(p) = std::env::var_os(env) {
        return PathBuf::from(p);
    }
    let gregor = Path::new(env!("CARGO_BIN_EXE_gregor"));
    let profile_dir = gregor
        .parent()
        .expect("cargo puts binaries in <target dir>/<profile>/");
    profile_dir
        .join("examples")
        .join(format!("{name}{}", std::env::consts::EXE_SUFFIX))
}

/// `<target dir>/<profile>/gregor-faultfs`, beside the `gregor` binary cargo built.
fn gregor_faultfs_bin() -> PathBuf {
    if let Some(p) = std::env::var_os("GREGOR_FAULTFS_BIN") {
        return PathBuf::from(p);
    }
    let gregor = Path::new(env!("CARGO_BIN_EXE_gregor"));
    gregor
        .parent()
        .expect("cargo puts binaries in <target dir>/<profile>/")
        .join(format!("gregor-faultfs{}", std::env::consts::EXE_SUFFIX))
}

#[test]
fn real_clients_end_to_end() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let member = example_bin("gregor_member", "GREGOR_MEMBER_BIN");
    let pipeline = example_bin("eos_pipeline", "GREGOR_EOS_PIPELINE_BIN");
    for bin in [&member, &pipeline] {
        assert!(
            bin.is_file(),
            "gregor-client's example binary is missing at {}: run `cargo build -p \
             gregor-client --examples` (cargo test --workspace builds it)",
            bin.display()
        );
    }
    let faultfs = gregor_faultfs_bin();
    assert!(
        faultfs.is_file(),
        "gregor-faultfs is missing at {}: run `cargo build -p gregor-faultfs` (cargo test \
         --workspace builds it) or set GREGOR_FAULTFS_BIN",
        faultfs.display()
    );
    let mut cmd = Command::new("python3");
    cmd.current_dir(&repo)
        .args(["-m", "pytest", "-q", "-x", "e2e"])
        .env("GREGOR_BIN", env!("CARGO_BIN_EXE_gregor"))
        .env("GREGOR_MEMBER_BIN", &member)
        .env("GREGOR_EOS_PIPELINE_BIN", &pipeline)
        .env("GREGOR_FAULTFS_BIN", &faultfs)
        // Output goes straight to the terminal, streamed while the suite runs.
        .env("PYTHONUNBUFFERED", "1");
    let status = cmd.status().unwrap_or_else(|e| {
        panic!("cannot run python3 ({e}); install python3, kcat and `pip install -r e2e/requirements.txt`")
    });
    assert!(
        status.success(),
        "e2e suite failed ({status}); if pytest is missing: pip install -r e2e/requirements.txt"
    );
}
