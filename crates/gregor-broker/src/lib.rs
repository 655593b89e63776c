//! The Gregor broker: the imperative shell that feeds Gregor's state machines (log, metadata,
//! groups) from sockets, disks and timers and answers Kafka protocol requests.

pub mod alter_partition;
pub mod api;
pub mod broker;
pub mod cluster_view;
pub mod config;
pub mod connection;
pub mod console;
pub mod data_plane;
pub mod fetch_frame;
pub mod fetch_session;
pub mod fetcher;
pub mod forward;
pub mod frame;
pub mod group_wire;
pub mod groups;
mod handlers;
pub mod isr;
pub mod log_cleaner;
pub mod metadata;
pub mod metrics;
pub mod partition;
pub mod partition_dir;
pub mod producer_ids;
pub mod producer_state;
pub mod quota;
pub mod recent_fencing;
pub mod replica;
pub mod server;
pub mod tcp_info;
pub mod transport;
pub mod util;
pub mod zero_copy;

pub use broker::Broker;
pub use config::{BrokerConfig, BrokerOptions};
