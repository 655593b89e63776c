//! gregor-client: an async Kafka client over the Kafka wire protocol, for Gregor and for
//! Apache Kafka.
//!
//! * [`Client`]: bootstrap, one pipelined connection per broker, API version negotiation,
//!   metadata and coordinator lookup, retries with backoff under an operation deadline.
//! * [`Admin`]: topics, partitions, cluster, groups, offsets, configs, reassignments and
//!   leader elections.
//! * [`Producer`]: Java-compatible partitioning, batching, compression, idempotence.
//! * [`Consumer`]: consumer groups with client-side assignment (eager and cooperative),
//!   heartbeats, commits, positions, a rebalance listener; it fetches from each broker in a
//!   fetch session (KIP-227, [`fetch_session`]: after the first fetch, only partitions whose
//!   position moved are named), as the broker's follower fetchers do.
//!
//! Each admin call is a pure request builder and response parser (unit-tested by encoding
//! responses with kafka-protocol) around the client's async shell.

pub mod admin;
pub mod client;
pub mod codec;
pub mod connection;
pub mod consumer;
pub mod coordinator;
pub mod error;
pub mod fetch_session;
pub mod metadata;
pub mod producer;
pub mod retry;
pub mod sasl;
#[cfg(feature = "simulation")]
pub mod simulation;
pub mod tls;
pub mod types;
pub mod versions;

pub use admin::Admin;
pub use client::{Client, ClientConfig, Target};
pub use consumer::{
    Consumer, ConsumerConfig, ConsumerRecord, RebalanceContext, RebalanceListener,
    RecordingListener,
};
pub use error::{Error, KafkaCode, KafkaError, Result};
pub use metadata::{
    kafka_uuid_string, BrokerNode, ClusterMetadata, PartitionMetadata, TopicMetadata,
};
pub use producer::{
    DeliveryFuture, Producer, ProducerConfig, ProducerMetrics, ProducerRecord, RecordMetadata,
};
pub use types::{ConsumerGroupMetadata, IsolationLevel, TopicPartition};
/// Topic ids are `uuid::Uuid`s.
pub use uuid::Uuid;
