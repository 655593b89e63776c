//! Runs the real-client end-to-end suite (`e2e/`, Python + pytest) against the `gregor` binary
//! that cargo just built. The suite's own README says what it covers and how to run parts of it.
//!
//! It fails — never skips — when python3 or the test dependencies are missing: a green `cargo
//! test` must mean kcat, confluent-kafka and kafka-python were actually run against the broker.
//! Extra pytest arguments go in pytest's own `PYTEST_ADDOPTS` (shell-quoted), e.g.
//! `PYTEST_ADDOPTS='-m "not slow"' cargo test -p gregor-cli --test e2e`.

use std::path::Path;
use std::process::Command;

#[test]
fn real_clients_end_to_end() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut cmd = Command::new("python3");
    cmd.current_dir(&repo)
        .args(["-m", "pytest", "-q", "-x", "e2e"])
        .env("GREGOR_BIN", env!("CARGO_BIN_EXE_gregor"))
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
