//! Shared by the tests that run against a real broker process.

use std::path::PathBuf;

/// The `gregor` binary of this workspace (honours CARGO_TARGET_DIR).
pub fn gregor_binary() -> PathBuf {
    let target = std::env::var_os("CARGO_TARGET_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../target"));
    let bin = target.join("debug").join("gregor");
    assert!(
        bin.is_file(),
        "{} is missing: build it first with `cargo build -p gregor-cli`",
        bin.display()
    );
    bin
}
