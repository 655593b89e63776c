//! The broker's metrics in the Prometheus (OpenMetrics) text format, and the HTTP listener
//! (`metrics.listener`) that serves them with `/healthz` and `/readyz`.
//!
//! Two kinds of metric: counters and histograms updated where things happen (bytes in and out,
//! requests, ISR changes, fsyncs), held in `events::BrokerMetrics`; and gauges read from the broker's
//! state when Prometheus scrapes (`collect`): partitions, replication health, log sizes,
//! connections, groups and consumer lag, transactions (`txns` reads them for the console too). Nothing is computed between scrapes for the second
//! kind, so it costs nothing on the request path. docs/metrics.md lists every metric. With
//! `metrics.naming=kafka`, `kafka_names` adds the JMX exporter's Kafka names for the same values.

pub mod auth;
pub(crate) mod cleaner;
mod collect;
pub(crate) mod errors;
pub(crate) mod events;
pub mod http;
mod kafka_names;
pub mod partitions;
pub mod process;
pub(crate) mod txns;
