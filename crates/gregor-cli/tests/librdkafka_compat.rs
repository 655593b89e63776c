//! Runs a fast subset of librdkafka's own test suite against the `gregor` binary that cargo just
//! built: `scripts/compat/librdkafka.sh --subset` (docs/compatibility.md has the whole suite).
//! The script takes librdkafka's source from the rdkafka-sys crate through cargo, builds it once
//! under `target/compat/` (about two minutes on two cores; later runs reuse it), starts Gregor on
//! a free loopback port and runs quick tests of produce, consume, consumer groups, admin,
//! metadata, ACLs (with the authorizer on) and a SASL/SCRAM login, one at a time, each under a
//! time limit.
//!
//! It fails — never skips — when a prerequisite is missing (a C and C++ compiler, make,
//! pkg-config, python3, the zlib / OpenSSL / zstd development headers): a green `cargo test`
//! must mean librdkafka's tests actually ran against the broker. `scripts/test.sh` installs them
//! on Debian.

use std::path::Path;
use std::process::Command;
use std::time::Instant;

#[test]
fn librdkafka_suite_subset() {
    let repo = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let script = repo.join("scripts/compat/librdkafka.sh");
    let started = Instant::now();
    let status = Command::new("bash")
        .arg(&script)
        .arg("--subset")
        .current_dir(&repo)
        .env("GREGOR_BIN", env!("CARGO_BIN_EXE_gregor"))
        // Output goes straight to the terminal, streamed while the tests run.
        .env("PYTHONUNBUFFERED", "1")
        .status()
        .unwrap_or_else(|e| panic!("cannot run bash {} ({e})", script.display()));
    eprintln!(
        "librdkafka subset finished in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    assert!(
        status.success(),
        "librdkafka's test subset failed ({status}); its output above names the failing tests \
         or the missing prerequisite (scripts/test.sh installs them on Debian)"
    );
}
