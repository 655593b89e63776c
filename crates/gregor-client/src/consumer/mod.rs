//! The consumer: group membership with client-side assignment (classic protocol) or with the
//! coordinator assigning (KIP-848, `group.protocol=consumer`: [`membership_848`], its
//! heartbeat task `heartbeat_848` and the reconciliation in `group_848`), fetching from
//! positions, offset commits, and a rebalance listener.
//!
//! The decisions live in pure modules: [`membership`] (join/sync/heartbeat state machine and
//! the eager/cooperative revocation rules), [`leader`] (the leader's assignment),
//! [`group_wire`] and [`fetch`] (requests and responses), [`txn_filter`] (read_committed:
//! the batches of aborted transactions), `prefetch` (which partitions to
//! fetch from which broker, the record buffer and its byte bounds). The shell sends what they ask
//! for: `state` holds the [`Consumer`] and its application calls (it runs the rebalance listener
//! inside `poll` and keeps positions, with `shared` below it); `fetcher` (over `fetch_state`)
//! keeps a Fetch in flight per broker and prefetches while the application works; `positions`
//! and `rebalance` continue the consumer. This file only declares and re-exports.
//!
//! A background task sends heartbeats while the member is in a stable generation and enforces
//! `max.poll.interval.ms`: when the application has not called `poll` for that long, the member
//! leaves the group (LeaveGroup for dynamic members) and its partitions are reported lost on
//! the next `poll`, which joins again. Group traffic uses its own connections (a second
//! `Client`), as Kafka's consumer uses a separate coordinator connection, so a long-polling
//! Fetch never delays a heartbeat.

pub mod config;
pub mod fetch;
mod fetch_state;
mod fetch_window;
mod fetcher;
mod group_848;
pub mod group_wire;
pub mod group_wire_848;
mod heartbeat;
mod heartbeat_848;
pub mod leader;
pub mod listener;
pub mod membership;
pub mod membership_848;
mod positions;
mod prefetch;
mod rebalance;
mod shared;
mod state;
pub mod txn_filter;

pub use config::{AutoOffsetReset, ConsumerConfig, GroupProtocol, IsolationLevel};
pub use fetch::ConsumerRecord;
pub use fetcher::FetchMetrics;
pub use listener::{
    RebalanceContext, RebalanceEvent, RebalanceKind, RebalanceListener, RecordingListener,
};
pub use state::Consumer;
