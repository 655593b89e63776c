//! gregor-log: the on-disk log of one partition replica. See README.md.
#![warn(missing_docs)]

pub mod batch;
pub mod bench;
pub mod checkpoint;
mod cleaner;
mod cleaner_txn;
pub mod codec;
pub mod config;
mod disk;
pub mod epoch;
pub mod error;
mod index;
mod log;
mod open;
pub mod page_cache;
mod power;
mod prepare;
mod read;
pub mod records;
mod retire;
mod segment;
mod sync;
pub mod txn;
mod txn_index;
mod validate;

pub use cleaner::{CompactionStats, RetentionStats, DEFAULT_MAP_BUDGET};
pub use config::{CleanupPolicy, CompressionType, FlushPolicy, LogConfig, TimestampType};
pub use disk::{
    take_simulated_delay, Disk, FaultInjector, PowerLossReport, TornWrite, DELETE_SUFFIX,
};
pub use error::{LogError, RecordError, RecordErrors, RecordProblem, Result};
pub use log::{AppendInfo, DurableToken, Log, LogOffsets};
pub use read::{FileSlice, OffsetSpec, ReadResult, SliceRead, TimestampOffset};
pub use sync::{set_sync_observer, LogStats, SyncObserver};
