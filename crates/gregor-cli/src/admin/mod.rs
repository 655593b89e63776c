//! The admin commands — `gregor topics`, `gregor groups`, `gregor configs`, `gregor acls`,
//! `gregor elect`, `gregor reassign`, `gregor transactions`, `gregor features` —
//! over the Kafka protocol through gregor-client, so they work against Gregor and Apache Kafka
//! alike. Options and output follow kafka-topics.sh, kafka-consumer-groups.sh, kafka-configs.sh,
//! kafka-acls.sh, kafka-leader-election.sh, kafka-reassign-partitions.sh,
//! kafka-transactions.sh and kafka-features.sh.
//!
//! Argument checking and output formatting are plain functions over fixed data; the `run_*`
//! functions only fetch, call them and print.

mod acls;
mod client_quotas;
mod common;
mod configs;
mod datetime;
mod elect;
mod features;
mod groups;
mod pattern;
mod reassign;
mod reassign_json;
mod reassign_plan;
mod reassign_throttle;
mod reset;
mod scram_users;
mod topics;
mod transactions;

pub use acls::{run_acls, AclsArgs};
pub use common::{apply_command_config, block_on};
pub use configs::{run_configs, ConfigsArgs};
pub use elect::{run_elect, ElectArgs};
pub use features::{run_features, FeaturesArgs};
pub use groups::{run_groups, GroupsArgs};
pub use reassign::{run_reassign, ReassignArgs};
pub use topics::{run_topics, TopicsArgs};
pub use transactions::{run_transactions, TransactionsArgs};
