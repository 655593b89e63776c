//! gregor-log: the on-disk log of one partition replica. See README.md.
#![warn(missing_docs)]

pub mod batch;
pub mod bench;
pub mod checkpoint;
mod cleaner;
pub mod config;
mod disk;
pub mod epoch;
pub mod error;
mod index;
mod log;
mod open;
mod power;
pub mod records;
mod segment;
mod sync;

pub use cleaner::{CompactionStats, RetentionStats, DEFAULT_MAP_BUDGET};
pub use config::{CleanupPolicy, FlushPolicy, LogConfig, TimestampType};
pub use disk::{Disk, FaultInjector, PowerLossReport, TornWrite, DELETE_SUFFIX};
pub use error::{LogError, Result};
pub use log::{AppendInfo, DurableToken, Log, OffsetSpec, ReadResult, TimestampOffset};
pub use sync::LogStats;
