//! The Gregor broker: the imperative shell that feeds Gregor's state machines (log, metadata,
//! groups) from sockets, disks and timers and answers Kafka protocol requests.

/// Whether the simulator planted `PlantedBug::$bug` (see `simulation`) on this thread. A build
/// without the `simulation` feature has no planted bugs: the literal `false`, whose branches
/// compile away.
#[cfg(feature = "simulation")]
macro_rules! planted {
    ($bug:ident) => {
        $crate::simulation::planted($crate::simulation::PlantedBug::$bug)
    };
}
#[cfg(not(feature = "simulation"))]
macro_rules! planted {
    ($bug:ident) => {
        false
    };
}

pub(crate) mod alter_partition;
pub mod api;
pub(crate) mod authorize;
pub mod bootstrap;
pub mod broker;
pub(crate) mod broker_links;
pub(crate) mod broker_view;
pub(crate) mod client_quota;
pub mod cluster_id;
pub(crate) mod cluster_view;
pub(crate) mod config;
pub mod connection;
pub(crate) mod connection_quotas;
pub(crate) mod console;
pub(crate) mod controller_kafka;
pub(crate) mod controller_sasl;
pub(crate) mod coordinator_shards;
pub(crate) mod data_plane;
pub mod fetch_frame;
pub mod fetch_session;
pub mod fetch_signal;
pub(crate) mod fetcher;
pub(crate) mod forward;
pub mod frame;
pub(crate) mod group_wire;
pub mod groups;
mod handlers;
pub(crate) mod isr;
pub(crate) mod jwks_fetch;
pub(crate) mod last_stable;
pub(crate) mod load_meter;
pub(crate) mod load_review;
pub(crate) mod log_cleaner;
pub(crate) mod metadata;
pub mod metrics;
pub(crate) mod partition;
pub mod partition_dir;
pub(crate) mod producer_ids;
pub(crate) mod producer_state;
pub(crate) mod quota;
pub(crate) mod recent_fencing;
pub(crate) mod replica;
pub mod runtime;
pub mod sasl_config;
pub mod sasl_session;
pub mod security;
pub mod server;
#[cfg(feature = "simulation")]
pub mod simulation;
pub(crate) mod tcp_info;
pub mod tls;
pub mod transport;
pub(crate) mod txn_markers;
pub(crate) mod txn_shell;
pub(crate) mod txn_verify;
pub(crate) mod zero_copy;

pub use broker::Broker;
pub use config::{BrokerConfig, BrokerOptions, ClientListener};
