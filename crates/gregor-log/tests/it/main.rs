//! Integration tests of gregor-log on real files in temporary directories.

mod append;
mod cleanup;
mod common;
mod faults;
mod model;
mod power;
mod recovery;
