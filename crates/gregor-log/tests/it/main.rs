//! Integration tests of gregor-log on real files in temporary directories.

mod append;
mod cleanup;
mod close;
mod close_many;
mod common;
mod compact_txn;
mod faults;
mod hostile;
mod hostile_props;
mod model;
mod power;
mod recovery;
mod retire;
mod txn_index;
