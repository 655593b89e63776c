//! `gregor transactions`: what `kafka-transactions.sh` does (KIP-664): list transactions,
//! describe a transactional id, describe a partition's producers, find hanging transactions
//! and abort one, with its verbs, options and tables (each value padded to its column's width
//! and followed by a tab, as Kafka prints them).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail, Result};
use gregor_client::admin::{AbortSpec, ListTransactionsFilter, ProducerState};
use gregor_client::{Admin, TopicPartition};

use super::common::ConnectionArgs;

/// Analyze transactions and recover from hanging ones.
#[derive(Debug, Clone, clap::Args)]
pub struct TransactionsArgs {
    /// The broker(s) to connect to: HOST:PORT[,HOST:PORT...].
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:9092"
    )]
    pub bootstrap_server: String,
    /// How long each operation may take, retries included (milliseconds).
    #[arg(long, global = true, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// A Kafka client properties file (security.protocol, ssl.*, sasl.*; see `gregor topics`).
    #[arg(long, global = true, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub verb: TransactionsVerb,
}

impl TransactionsArgs {
    /// The connection options: global here, so that they may follow the verb too (the
    /// `bin/kafka-transactions.sh` wrapper appends `--command-config`).
    fn connection(&self) -> ConnectionArgs {
        ConnectionArgs {
            bootstrap_server: self.bootstrap_server.clone(),
            timeout_ms: self.timeout_ms,
            command_config: self.command_config.clone(),
        }
    }
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum TransactionsVerb {
    /// List transactions (every broker's coordinator).
    List,
    /// Describe the state of a transactional id.
    Describe {
        #[arg(long)]
        transactional_id: String,
    },
    /// Describe the active producers of a partition (at its leader).
    DescribeProducers {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
    },
    /// Abort a hanging transaction: by --start-offset, or by --producer-id, --producer-epoch
    /// and --coordinator-epoch. Needs CLUSTER_ACTION.
    Abort {
        #[arg(long)]
        topic: String,
        #[arg(long)]
        partition: i32,
        #[arg(long)]
        start_offset: Option<i64>,
        #[arg(long)]
        producer_id: Option<i64>,
        #[arg(long)]
        producer_epoch: Option<i16>,
        #[arg(long, allow_negative_numbers = true)]
        coordinator_epoch: Option<i32>,
    },
    /// Find transactions open in partitions for longer than --max-transaction-timeout that
    /// their coordinator does not know as ongoing in that partition.
    FindHanging {
        /// The partitions this broker leads.
        #[arg(long, conflicts_with = "topic")]
        broker_id: Option<i32>,
        #[arg(long)]
        topic: Option<String>,
        /// With --topic: only this partition.
        #[arg(long, requires = "topic")]
        partition: Option<i32>,
        /// Minutes (the brokers' transaction.max.timeout.ms): an open transaction younger
        /// than this may still be ended by its coordinator.
        #[arg(long, default_value_t = 15)]
        max_transaction_timeout: u32,
    },
}

/// Kafka's table: each value padded to its column's width, then a tab.
pub fn table(headers: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = headers.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (w, v) in widths.iter_mut().zip(row) {
            *w = (*w).max(v.chars().count());
        }
    }
    let line = |values: Vec<&str>| {
        let mut out = String::new();
        for (v, w) in values.into_iter().zip(&widths) {
            out.push_str(&format!("{v:<w$}\t"));
        }
        out.push('\n');
        out
    };
    let mut out = line(headers.to_vec());
    for row in rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

const PRODUCER_HEADERS: [&str; 6] = [
    "ProducerId",
    "ProducerEpoch",
    "LatestCoordinatorEpoch",
    "LastSequence",
    "LastTimestamp",
    "CurrentTransactionStartOffset",
];

pub fn producer_rows(producers: &[ProducerState]) -> Vec<Vec<String>> {
    producers
        .iter()
        .map(|p| {
            vec![
                p.producer_id.to_string(),
                p.producer_epoch.to_string(),
                p.coordinator_epoch.unwrap_or(-1).to_string(),
                p.last_sequence.to_string(),
                p.last_timestamp.to_string(),
                p.current_txn_start_offset
                    .map_or("None".to_string(), |o| o.to_string()),
            ]
        })
        .collect()
}

/// An open transaction of a partition, as DescribeProducers shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OpenTransaction {
    pub partition: TopicPartition,
    pub producer: ProducerState,
}

const HANGING_HEADERS: [&str; 8] = [
    "Topic",
    "Partition",
    "ProducerId",
    "ProducerEpoch",
    "CoordinatorEpoch",
    "StartOffset",
    "LastTimestamp",
    "Duration(min)",
];

pub fn hanging_rows(hanging: &[OpenTransaction], now_ms: i64) -> Vec<Vec<String>> {
    hanging
        .iter()
        .map(|t| {
            let p = &t.producer;
            vec![
                t.partition.topic.clone(),
                t.partition.partition.to_string(),
                p.producer_id.to_string(),
                p.producer_epoch.to_string(),
                p.coordinator_epoch.unwrap_or(-1).to_string(),
                p.current_txn_start_offset.unwrap_or(-1).to_string(),
                p.last_timestamp.to_string(),
                ((now_ms - p.last_timestamp) / 60_000).to_string(),
            ]
        })
        .collect()
}

/// Whether the coordinator's view (the transactional id's state, producer id and partitions;
/// `None`: no transactional id has the producer) leaves `open` hanging: nothing will end it
/// unless the producer's transaction there is still being run or completed.
pub fn is_hanging(
    open: &OpenTransaction,
    coordinator: Option<(&str, i64, &[TopicPartition])>,
) -> bool {
    match coordinator {
        None => true,
        Some((_, producer_id, _)) if producer_id != open.producer.producer_id => true,
        Some(("Ongoing" | "PrepareCommit" | "PrepareAbort", _, partitions)) => {
            !partitions.contains(&open.partition)
        }
        Some(_) => true,
    }
}

/// The abort spec of `--start-offset`: the producer whose open transaction starts there.
/// A producer with no marker yet has no coordinator epoch: 0, which no leader epoch is below.
pub fn abort_spec_at(
    partition: &TopicPartition,
    producers: &[ProducerState],
    start_offset: i64,
) -> Result<AbortSpec> {
    let p = producers
        .iter()
        .find(|p| p.current_txn_start_offset == Some(start_offset))
        .ok_or_else(|| {
            anyhow!(
                "Could not find any open transactions starting at offset {start_offset} on \
                 partition {partition}"
            )
        })?;
    Ok(AbortSpec {
        partition: partition.clone(),
        producer_id: p.producer_id,
        producer_epoch: i16::try_from(p.producer_epoch)
            .map_err(|_| anyhow!("producer epoch {} out of range", p.producer_epoch))?,
        coordinator_epoch: p.coordinator_epoch.unwrap_or(0).max(0),
    })
}

pub async fn run_transactions(args: TransactionsArgs) -> Result<()> {
    let admin = args.connection().connect().await?;
    match args.verb {
        TransactionsVerb::List => list(&admin).await,
        TransactionsVerb::Describe { transactional_id } => {
            describe(&admin, &transactional_id).await
        }
        TransactionsVerb::DescribeProducers { topic, partition } => {
            let tp = TopicPartition::new(topic, partition);
            let producers = producers_of(&admin, &tp).await?;
            print!("{}", table(&PRODUCER_HEADERS, &producer_rows(&producers)));
            Ok(())
        }
        TransactionsVerb::Abort {
            topic,
            partition,
            start_offset,
            producer_id,
            producer_epoch,
            coordinator_epoch,
        } => {
            let tp = TopicPartition::new(topic, partition);
            let spec = match (start_offset, producer_id, producer_epoch, coordinator_epoch) {
                (Some(offset), None, None, None) => {
                    abort_spec_at(&tp, &producers_of(&admin, &tp).await?, offset)?
                }
                (None, Some(producer_id), Some(producer_epoch), Some(coordinator_epoch)) => {
                    AbortSpec {
                        partition: tp,
                        producer_id,
                        producer_epoch,
                        coordinator_epoch: coordinator_epoch.max(0),
                    }
                }
                _ => bail!(
                    "The transaction to abort must be identified either with --start-offset \
                     or with --producer-id, --producer-epoch, and --coordinator-epoch"
                ),
            };
            admin
                .abort_transaction(&spec)
                .await
                .map_err(|e| anyhow!("Failed to abort transaction {spec:?}: {e}"))
        }
        TransactionsVerb::FindHanging {
            broker_id,
            topic,
            partition,
            max_transaction_timeout,
        } => {
            let scope = match (broker_id, topic) {
                (Some(id), None) => Scope::Broker(id),
                (None, Some(t)) => Scope::Topic(t, partition),
                _ => bail!("find-hanging needs --broker-id or --topic"),
            };
            find_hanging(&admin, scope, i64::from(max_transaction_timeout) * 60_000).await
        }
    }
}

async fn list(admin: &Admin) -> Result<()> {
    let listed = admin
        .list_transactions(&ListTransactionsFilter::default())
        .await
        .map_err(|e| anyhow!("Failed to list transactions: {e}"))?;
    let rows: Vec<Vec<String>> = listed
        .iter()
        .map(|t| {
            vec![
                t.transactional_id.clone(),
                t.coordinator_id.to_string(),
                t.producer_id.to_string(),
                t.state.clone(),
            ]
        })
        .collect();
    let headers = [
        "TransactionalId",
        "Coordinator",
        "ProducerId",
        "TransactionState",
    ];
    print!("{}", table(&headers, &rows));
    Ok(())
}

async fn describe(admin: &Admin, id: &str) -> Result<()> {
    let mut results = admin.describe_transactions(&[id.to_string()]).await;
    let (_, result) = results
        .pop()
        .ok_or_else(|| anyhow!("no result for transactional-id `{id}`"))?;
    let d = result.map_err(|e| {
        anyhow!("Failed to describe transaction state of transactional-id `{id}`: {e}")
    })?;
    let (start, duration) = match d.start_time_ms {
        Some(ms) => (ms.to_string(), (now_ms() - ms).to_string()),
        None => ("None".to_string(), "None".to_string()),
    };
    let partitions: Vec<String> = d.partitions.iter().map(|tp| tp.to_string()).collect();
    let row = vec![
        d.coordinator_id.to_string(),
        d.transactional_id.clone(),
        d.producer_id.to_string(),
        d.producer_epoch.to_string(),
        d.state.clone(),
        d.timeout_ms.to_string(),
        start,
        duration,
        partitions.join(","),
    ];
    let headers = [
        "CoordinatorId",
        "TransactionalId",
        "ProducerId",
        "ProducerEpoch",
        "TransactionState",
        "TransactionTimeoutMs",
        "CurrentTransactionStartTimeMs",
        "TransactionDurationMs",
        "TopicPartitions",
    ];
    print!("{}", table(&headers, &[row]));
    Ok(())
}

async fn producers_of(admin: &Admin, tp: &TopicPartition) -> Result<Vec<ProducerState>> {
    let mut all = admin
        .describe_producers(std::slice::from_ref(tp))
        .await
        .map_err(|e| anyhow!("Failed to describe producers for partition {tp} on leader: {e}"))?;
    all.remove(tp)
        .ok_or_else(|| anyhow!("no result for partition {tp}"))?
        .map_err(|e| anyhow!("Failed to describe producers for partition {tp} on leader: {e}"))
}

/// Which partitions `find-hanging` looks at.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Scope {
    Broker(i32),
    Topic(String, Option<i32>),
}

async fn partitions_in(admin: &Admin, scope: &Scope) -> Result<Vec<TopicPartition>> {
    let topics = match scope {
        Scope::Broker(_) => None,
        Scope::Topic(t, _) => Some(vec![t.clone()]),
    };
    let md = admin.client().refresh_metadata(topics.as_deref()).await?;
    let mut out = Vec::new();
    for t in &md.topics {
        for p in &t.partitions {
            let keep = match scope {
                Scope::Broker(id) => p.leader == Some(*id),
                Scope::Topic(name, only) => {
                    &t.name == name && only.is_none_or(|only| only == p.partition)
                }
            };
            if keep {
                out.push(TopicPartition::new(t.name.clone(), p.partition));
            }
        }
    }
    if let (Scope::Topic(name, Some(p)), true) = (scope, out.is_empty()) {
        bail!("Topic partition {name}-{p} does not exist");
    }
    Ok(out)
}

async fn find_hanging(admin: &Admin, scope: Scope, max_timeout_ms: i64) -> Result<()> {
    let partitions = partitions_in(admin, &scope).await?;
    let now = now_ms();
    let mut candidates = Vec::new();
    for (tp, result) in admin.describe_producers(&partitions).await? {
        let producers = result.map_err(|e| anyhow!("Failed to describe producers of {tp}: {e}"))?;
        candidates.extend(
            producers
                .into_iter()
                .filter(|p| p.current_txn_start_offset.is_some())
                .filter(|p| now - p.last_timestamp > max_timeout_ms)
                .map(|producer| OpenTransaction {
                    partition: tp.clone(),
                    producer,
                }),
        );
    }
    let hanging = if candidates.is_empty() {
        Vec::new()
    } else {
        hanging_among(admin, candidates).await?
    };
    print!("{}", table(&HANGING_HEADERS, &hanging_rows(&hanging, now)));
    Ok(())
}

/// The candidates their coordinators leave hanging: each producer's transactional id (by
/// ListTransactions filtered on the producer ids), then its description.
async fn hanging_among(
    admin: &Admin,
    candidates: Vec<OpenTransaction>,
) -> Result<Vec<OpenTransaction>> {
    let producer_ids: BTreeSet<i64> = candidates.iter().map(|c| c.producer.producer_id).collect();
    let filter = ListTransactionsFilter {
        producer_ids: producer_ids.into_iter().collect(),
        ..ListTransactionsFilter::default()
    };
    let ids: BTreeMap<i64, String> = admin
        .list_transactions(&filter)
        .await?
        .into_iter()
        .map(|t| (t.producer_id, t.transactional_id))
        .collect();
    let named: Vec<String> = ids
        .values()
        .cloned()
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect();
    let mut described = BTreeMap::new();
    for (id, result) in admin.describe_transactions(&named).await {
        // A transactional id expired or moved since it was listed: its producer is unknown.
        if let Ok(d) = result {
            described.insert(id, d);
        }
    }
    Ok(candidates
        .into_iter()
        .filter(|c| {
            let view = ids
                .get(&c.producer.producer_id)
                .and_then(|id| described.get(id))
                .map(|d| (d.state.as_str(), d.producer_id, d.partitions.as_slice()));
            is_hanging(c, view)
        })
        .collect())
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn producer(id: i64, start: Option<i64>, last: i64) -> ProducerState {
        ProducerState {
            producer_id: id,
            producer_epoch: 2,
            last_sequence: 4,
            last_timestamp: last,
            coordinator_epoch: None,
            current_txn_start_offset: start,
        }
    }

    #[test]
    fn tables_pad_each_column_then_tab_as_kafka() {
        let rows = vec![vec!["tx-long-name".to_string(), "1".to_string()]];
        assert_eq!(
            table(&["TransactionalId", "Coordinator"], &rows),
            "TransactionalId\tCoordinator\t\ntx-long-name   \t1          \t\n"
        );
        let rows = producer_rows(&[producer(7, None, 99)]);
        assert_eq!(rows[0], ["7", "2", "-1", "4", "99", "None"]);
    }

    #[test]
    fn hanging_unless_the_coordinator_runs_it_in_that_partition() {
        let tp = TopicPartition::new("t", 0);
        let open = OpenTransaction {
            partition: tp.clone(),
            producer: producer(7, Some(10), 0),
        };
        let with_tp = [tp.clone()];
        assert!(is_hanging(&open, None));
        assert!(!is_hanging(&open, Some(("Ongoing", 7, &with_tp))));
        assert!(!is_hanging(&open, Some(("PrepareAbort", 7, &with_tp))));
        assert!(is_hanging(&open, Some(("Ongoing", 7, &[]))));
        assert!(is_hanging(&open, Some(("Ongoing", 8, &with_tp))));
        assert!(is_hanging(&open, Some(("CompleteCommit", 7, &with_tp))));
        let rows = hanging_rows(&[open], 180_000);
        assert_eq!(rows[0], ["t", "0", "7", "2", "-1", "10", "0", "3"]);
    }

    #[test]
    fn abort_by_start_offset_takes_that_producer() {
        let tp = TopicPartition::new("t", 0);
        let producers = [producer(7, None, 0), producer(8, Some(42), 0)];
        let spec = abort_spec_at(&tp, &producers, 42).unwrap();
        assert_eq!(
            (
                spec.producer_id,
                spec.producer_epoch,
                spec.coordinator_epoch
            ),
            (8, 2, 0)
        );
        assert!(abort_spec_at(&tp, &producers, 41).is_err());
    }
}
