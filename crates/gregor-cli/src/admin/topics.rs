//! `gregor topics`: what `kafka-topics.sh` does, with its options and its output format.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail, Result};
use clap::ArgGroup;
use gregor_client::admin::CreateTopicsOptions;
use gregor_client::admin::{
    ConfigEntry, ConfigResource, NewPartitions, NewTopic, OngoingReassignment,
};
use gregor_client::{
    kafka_uuid_string, Admin, Error, KafkaCode, PartitionMetadata, TopicMetadata, TopicPartition,
};

use super::common::ConnectionArgs;
use super::pattern::NameFilter;

/// Create, delete, describe, list or alter topics.
#[derive(Debug, Clone, clap::Args)]
#[command(group(
    ArgGroup::new("action")
        .required(true)
        .multiple(false)
        .args(["create", "list", "describe", "alter", "delete"])
))]
pub struct TopicsArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Create a new topic.
    #[arg(long)]
    pub create: bool,
    /// List all topics.
    #[arg(long)]
    pub list: bool,
    /// Describe topics (all, or those --topic matches).
    #[arg(long)]
    pub describe: bool,
    /// Raise the partition count of a topic.
    #[arg(long)]
    pub alter: bool,
    /// Delete a topic.
    #[arg(long)]
    pub delete: bool,
    /// The topic; for --list, --describe, --alter and --delete also a pattern ('orders.*',
    /// 'a,b').
    #[arg(long)]
    pub topic: Option<String>,
    /// The number of partitions (--create; the new total for --alter).
    #[arg(long, allow_negative_numbers = true)]
    pub partitions: Option<i32>,
    /// The replication factor (--create).
    #[arg(long, allow_negative_numbers = true)]
    pub replication_factor: Option<i32>,
    /// Replicas per partition: "0:1,1:0" = partition 0 on brokers 0 and 1 (0 preferred
    /// leader), partition 1 on brokers 1 and 0.
    #[arg(long, value_name = "BROKER:BROKER,...")]
    pub replica_assignment: Option<String>,
    /// A topic config override, key=value (repeatable, --create).
    #[arg(long = "config", value_name = "KEY=VALUE")]
    pub config: Vec<String>,
    /// With --create: succeed if the topic already exists.
    #[arg(long)]
    pub if_not_exists: bool,
    /// With --alter, --describe or --delete: succeed if no topic matches.
    #[arg(long)]
    pub if_exists: bool,
    /// With --list or --describe: leave out internal topics.
    #[arg(long)]
    pub exclude_internal: bool,
    /// With --describe: only partitions whose ISR is smaller than their replica set.
    #[arg(long)]
    pub under_replicated_partitions: bool,
    /// With --describe: only partitions whose ISR is smaller than the topic's
    /// min.insync.replicas (or that have no leader).
    #[arg(long)]
    pub under_min_isr_partitions: bool,
    /// With --describe: only partitions whose ISR size equals the topic's min.insync.replicas.
    #[arg(long)]
    pub at_min_isr_partitions: bool,
    /// With --describe: only partitions without a leader or led by a broker that is not live.
    #[arg(long)]
    pub unavailable_partitions: bool,
}

/// The partition filters of `--describe`; with one, only matching partition lines are printed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionFilter {
    /// `--under-replicated-partitions`: ISR smaller than the replica set.
    UnderReplicated,
    /// `--under-min-isr-partitions`: ISR smaller than `min.insync.replicas`, or no leader.
    UnderMinIsr,
    /// `--at-min-isr-partitions`: ISR size equal to `min.insync.replicas`.
    AtMinIsr,
    /// `--unavailable-partitions`: no leader, or a leader that is not a live broker.
    Unavailable,
}

impl PartitionFilter {
    pub fn option(self) -> &'static str {
        match self {
            PartitionFilter::UnderReplicated => "--under-replicated-partitions",
            PartitionFilter::UnderMinIsr => "--under-min-isr-partitions",
            PartitionFilter::AtMinIsr => "--at-min-isr-partitions",
            PartitionFilter::Unavailable => "--unavailable-partitions",
        }
    }
}

/// A validated `gregor topics` invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TopicsAction {
    Create {
        topic: NewTopic,
        if_not_exists: bool,
    },
    List {
        filter: Option<String>,
        exclude_internal: bool,
    },
    Describe {
        filter: Option<String>,
        exclude_internal: bool,
        if_exists: bool,
        partitions: Option<PartitionFilter>,
    },
    Alter {
        filter: String,
        partitions: i32,
        assignment: Option<Vec<Vec<i32>>>,
        if_exists: bool,
    },
    Delete {
        filter: String,
        if_exists: bool,
    },
}

impl TopicsArgs {
    fn action_name(&self) -> &'static str {
        match (self.create, self.list, self.describe, self.alter) {
            (true, ..) => "--create",
            (_, true, ..) => "--list",
            (_, _, true, _) => "--describe",
            (_, _, _, true) => "--alter",
            _ => "--delete",
        }
    }

    /// The partition filter given, if any; like kafka-topics.sh, at most one.
    fn partition_filter(&self) -> Result<Option<PartitionFilter>> {
        let given: Vec<PartitionFilter> = [
            (
                self.under_replicated_partitions,
                PartitionFilter::UnderReplicated,
            ),
            (self.under_min_isr_partitions, PartitionFilter::UnderMinIsr),
            (self.at_min_isr_partitions, PartitionFilter::AtMinIsr),
            (self.unavailable_partitions, PartitionFilter::Unavailable),
        ]
        .into_iter()
        .filter_map(|(on, f)| on.then_some(f))
        .collect();
        match given.as_slice() {
            [] => Ok(None),
            [one] => Ok(Some(*one)),
            [a, b, ..] => bail!("{} cannot be used with {}", a.option(), b.option()),
        }
    }

    /// Checks the options the way kafka-topics.sh does and says what to do.
    pub fn action(&self) -> Result<TopicsAction> {
        let action = self.action_name();
        let partition_filter = self.check_options(action)?;
        Ok(match action {
            "--create" => self.create_action(action)?,
            "--list" => TopicsAction::List {
                filter: self.topic.clone(),
                exclude_internal: self.exclude_internal,
            },
            "--describe" => TopicsAction::Describe {
                filter: self.topic.clone(),
                exclude_internal: self.exclude_internal,
                if_exists: self.if_exists,
                partitions: partition_filter,
            },
            "--alter" => self.alter_action(action)?,
            _ => TopicsAction::Delete {
                filter: self.topic(action)?,
                if_exists: self.if_exists,
            },
        })
    }

    /// Refuses the options `action` cannot use; returns the `--describe` partition filter.
    fn check_options(&self, action: &str) -> Result<Option<PartitionFilter>> {
        let only_with = |present: bool, option: &str, allowed: &[&str]| -> Result<()> {
            if present && !allowed.contains(&action) {
                bail!("{option} can only be used with {}", allowed.join(" or "));
            }
            Ok(())
        };
        only_with(
            self.partitions.is_some(),
            "--partitions",
            &["--create", "--alter"],
        )?;
        only_with(
            self.replication_factor.is_some(),
            "--replication-factor",
            &["--create"],
        )?;
        only_with(
            self.replica_assignment.is_some(),
            "--replica-assignment",
            &["--create", "--alter"],
        )?;
        only_with(!self.config.is_empty(), "--config", &["--create"])?;
        only_with(self.if_not_exists, "--if-not-exists", &["--create"])?;
        only_with(
            self.if_exists,
            "--if-exists",
            &["--alter", "--describe", "--delete"],
        )?;
        only_with(
            self.exclude_internal,
            "--exclude-internal",
            &["--list", "--describe"],
        )?;
        let partition_filter = self.partition_filter()?;
        if let Some(f) = partition_filter {
            only_with(true, f.option(), &["--describe"])?;
        }
        Ok(partition_filter)
    }

    /// The --topic that `action` needs.
    fn topic(&self, action: &str) -> Result<String> {
        self.topic
            .clone()
            .filter(|t| !t.trim().is_empty())
            .ok_or_else(|| anyhow!("{action} needs --topic"))
    }

    /// `--create`, its counts and configs checked.
    fn create_action(&self, action: &str) -> Result<TopicsAction> {
        let name = self.topic(action)?;
        let assignment = self
            .replica_assignment
            .as_deref()
            .map(parse_replica_assignment)
            .transpose()?;
        if assignment.is_some() && (self.partitions.is_some() || self.replication_factor.is_some())
        {
            bail!("--replica-assignment cannot be used with --partitions or --replication-factor");
        }
        if let Some(rf) = self.replication_factor {
            if !(1..=i32::from(i16::MAX)).contains(&rf) {
                bail!(
                    "The replication factor must be between 1 and {} inclusive",
                    i16::MAX
                );
            }
        }
        if let Some(p) = self.partitions {
            if p < 1 {
                bail!("The partitions must be greater than 0");
            }
        }
        Ok(TopicsAction::Create {
            topic: NewTopic {
                name,
                num_partitions: self.partitions,
                replication_factor: self
                    .replication_factor
                    .map(|rf| i16::try_from(rf).expect("range checked above")),
                replica_assignment: assignment,
                configs: parse_topic_configs(&self.config)?,
            },
            if_not_exists: self.if_not_exists,
        })
    }

    /// `--alter`: the new partition count (and their replicas, if given).
    fn alter_action(&self, action: &str) -> Result<TopicsAction> {
        let filter = self.topic(action)?;
        let partitions = self
            .partitions
            .ok_or_else(|| anyhow!("--alter needs --partitions (the new partition count)"))?;
        if partitions < 1 {
            bail!("The partitions must be greater than 0");
        }
        Ok(TopicsAction::Alter {
            filter,
            partitions,
            assignment: self
                .replica_assignment
                .as_deref()
                .map(parse_replica_assignment)
                .transpose()?,
            if_exists: self.if_exists,
        })
    }
}

/// Parses `--replica-assignment`: partitions separated by commas, each a colon-separated broker
/// list; every partition must have the same number of distinct replicas.
pub fn parse_replica_assignment(text: &str) -> Result<Vec<Vec<i32>>> {
    let mut out: Vec<Vec<i32>> = Vec::new();
    for (partition, replicas) in text.split(',').enumerate() {
        let mut brokers = Vec::new();
        for id in replicas.split(':').map(str::trim) {
            let broker: i32 = id.parse().map_err(|_| {
                anyhow!(
                    "invalid --replica-assignment '{text}': '{id}' (partition {partition}) is not a broker id"
                )
            })?;
            if broker < 0 {
                bail!("invalid --replica-assignment '{text}': broker id {broker} is negative");
            }
            if brokers.contains(&broker) {
                bail!(
                    "Partition replica lists may not contain duplicate entries: {broker} (partition {partition} in '{text}')"
                );
            }
            brokers.push(broker);
        }
        if let Some(first) = out.first() {
            if first.len() != brokers.len() {
                bail!(
                    "Partition {partition} has different replication factor: {} (partition 0 has {})",
                    join(&brokers),
                    first.len()
                );
            }
        }
        out.push(brokers);
    }
    Ok(out)
}

/// Parses `--config key=value` arguments (spaces around `=` allowed, as in Kafka).
pub fn parse_topic_configs(args: &[String]) -> Result<Vec<(String, String)>> {
    args.iter()
        .map(|arg| {
            let parts: Vec<&str> = arg.split('=').map(str::trim).collect();
            match parts.as_slice() {
                [k, v] if !k.is_empty() && !v.is_empty() => Ok((k.to_string(), v.to_string())),
                _ => Err(anyhow!(
                    "Invalid topic config '{arg}': all configs to be added must be in the format \"key=val\"."
                )),
            }
        })
        .collect()
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

/// Everything `--describe` prints about one topic.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicView {
    pub metadata: TopicMetadata,
    /// The topic's configs; only those not at their default are printed.
    pub configs: Vec<ConfigEntry>,
    /// Reassignments under way, by partition.
    pub reassignments: BTreeMap<i32, OngoingReassignment>,
}

/// kafka-topics.sh's `--describe` text for one topic: a summary line, then one line per
/// partition (KRaft-era format, with ELR columns: not reported over Metadata, so `N/A`).
pub fn format_topic_description(view: &TopicView) -> String {
    let t = &view.metadata;
    let configs = view
        .configs
        .iter()
        .filter(|c| !c.is_default())
        .map(|c| format!("{}={}", c.name, c.value.as_deref().unwrap_or("null")))
        .collect::<Vec<_>>()
        .join(",");
    let replication_factor = t
        .partitions
        .first()
        .map_or(0, |p| replication_factor(view, p));
    let mut out = format!("Topic: {}", t.name);
    if !t.topic_id.is_nil() {
        out.push_str(&format!("\tTopicId: {}", kafka_uuid_string(&t.topic_id)));
    }
    out.push_str(&format!(
        "\tPartitionCount: {}\tReplicationFactor: {}\tConfigs: {}\n",
        t.partitions.len(),
        replication_factor,
        configs
    ));
    for p in &t.partitions {
        out.push_str(&format_partition(view, p));
    }
    out
}

/// `--describe` with a partition filter: only the matching partition lines, no summary line
/// (as kafka-topics.sh prints them). `live_brokers` matters to `--unavailable-partitions` only.
pub fn format_filtered_partitions(
    view: &TopicView,
    filter: PartitionFilter,
    live_brokers: &BTreeSet<i32>,
) -> String {
    view.metadata
        .partitions
        .iter()
        .filter(|p| partition_matches(view, p, filter, live_brokers))
        .map(|p| format_partition(view, p))
        .collect()
}

/// Whether a partition of the topic passes a `--describe` filter (Kafka's rules: a leaderless
/// partition is also under its min ISR; without a known `min.insync.replicas` no partition is
/// under or at it).
pub fn partition_matches(
    view: &TopicView,
    p: &PartitionMetadata,
    filter: PartitionFilter,
    live_brokers: &BTreeSet<i32>,
) -> bool {
    let isr = p.isr.len();
    match filter {
        PartitionFilter::UnderReplicated => isr < replication_factor(view, p),
        PartitionFilter::UnderMinIsr => {
            p.leader.is_none() || min_insync_replicas(view).is_some_and(|min| isr < min)
        }
        PartitionFilter::AtMinIsr => min_insync_replicas(view) == Some(isr),
        PartitionFilter::Unavailable => p.leader.is_none_or(|l| !live_brokers.contains(&l)),
    }
}

/// The topic's effective `min.insync.replicas`, from DescribeConfigs.
fn min_insync_replicas(view: &TopicView) -> Option<usize> {
    view.configs
        .iter()
        .find(|c| c.name == "min.insync.replicas")
        .and_then(|c| c.value.as_deref())
        .and_then(|v| v.trim().parse().ok())
}

/// A partition's replication factor: during a reassignment the replica list holds old and new
/// replicas, and the factor is the target's.
fn replication_factor(view: &TopicView, p: &PartitionMetadata) -> usize {
    match view.reassignments.get(&p.partition) {
        Some(r) if in_progress(&p.replicas, r) => {
            r.replicas.len().saturating_sub(r.adding_replicas.len())
        }
        _ => p.replicas.len(),
    }
}

/// One partition line of `--describe`.
fn format_partition(view: &TopicView, p: &PartitionMetadata) -> String {
    let mut out = format!(
        "\tTopic: {}\tPartition: {}\tLeader: {}\tReplicas: {}\tIsr: {}",
        view.metadata.name,
        p.partition,
        p.leader.map_or("none".to_string(), |l| l.to_string()),
        join(&p.replicas),
        join(&p.isr)
    );
    if let Some(r) = view.reassignments.get(&p.partition) {
        out.push_str(&format!(
            "\tAdding Replicas: {}\tRemoving Replicas: {}",
            join(&r.adding_replicas),
            join(&r.removing_replicas)
        ));
    }
    out.push_str("\tElr: N/A\tLastKnownElr: N/A\n");
    out
}

/// Whether a listed reassignment still touches the partition's current replicas (it may have
/// completed between the two lookups).
fn in_progress(replicas: &[i32], r: &OngoingReassignment) -> bool {
    replicas
        .iter()
        .any(|b| r.adding_replicas.contains(b) || r.removing_replicas.contains(b))
}

/// The topics a filter selects, sorted; internal topics only when asked.
async fn matching_topics(
    admin: &Admin,
    filter: Option<&str>,
    exclude_internal: bool,
) -> Result<Vec<String>> {
    let filter = filter.map(NameFilter::new).transpose()?;
    let listing = admin.list_topics(!exclude_internal).await?;
    Ok(listing
        .into_iter()
        .map(|t| t.name)
        .filter(|n| filter.as_ref().is_none_or(|f| f.matches(n)))
        .collect())
}

fn ensure_found(found: &[String], filter: Option<&str>, if_exists: bool) -> Result<()> {
    match filter {
        Some(f) if !f.is_empty() && !if_exists && found.is_empty() => {
            bail!("Topic '{f}' does not exist as expected")
        }
        _ => Ok(()),
    }
}

/// Runs `gregor topics`.
pub async fn run_topics(args: TopicsArgs) -> Result<()> {
    let action = args.action()?;
    let admin = args.connection.connect().await?;
    let timeout_ms = args.connection.request_timeout_ms();
    match action {
        TopicsAction::Create {
            topic,
            if_not_exists,
        } => {
            let options = CreateTopicsOptions {
                validate_only: false,
                timeout_ms,
            };
            let results = admin.create_topics(vec![topic], options).await?;
            for (topic, result) in results {
                match result {
                    Ok(_) => println!("Created topic {topic}."),
                    Err(e) if if_not_exists && e.code == KafkaCode::TOPIC_ALREADY_EXISTS => {}
                    Err(e) => bail!("topic '{topic}': {e}"),
                }
            }
        }
        TopicsAction::List {
            filter,
            exclude_internal,
        } => {
            for name in matching_topics(&admin, filter.as_deref(), exclude_internal).await? {
                println!("{name}");
            }
        }
        TopicsAction::Describe {
            filter,
            exclude_internal,
            if_exists,
            partitions,
        } => {
            let names = matching_topics(&admin, filter.as_deref(), exclude_internal).await?;
            ensure_found(&names, filter.as_deref(), if_exists)?;
            describe(&admin, &names, partitions, timeout_ms).await?;
        }
        TopicsAction::Alter {
            filter,
            partitions,
            assignment,
            if_exists,
        } => {
            let names = matching_topics(&admin, Some(&filter), false).await?;
            ensure_found(&names, Some(&filter), if_exists)?;
            add_partitions(
                &admin,
                &names,
                partitions,
                assignment.as_deref(),
                timeout_ms,
            )
            .await?;
        }
        TopicsAction::Delete { filter, if_exists } => {
            let names = matching_topics(&admin, Some(&filter), false).await?;
            ensure_found(&names, Some(&filter), if_exists)?;
            for (topic, result) in admin.delete_topics(&names, timeout_ms).await? {
                if let Err(e) = result {
                    bail!("topic '{topic}': {e}");
                }
            }
        }
    }
    Ok(())
}

/// `--describe`: each topic's description, or only its partitions that match the filter.
async fn describe(
    admin: &Admin,
    names: &[String],
    partitions: Option<PartitionFilter>,
    timeout_ms: i32,
) -> Result<()> {
    let live_brokers: BTreeSet<i32> = match partitions {
        Some(PartitionFilter::Unavailable) => admin
            .describe_cluster()
            .await?
            .brokers
            .iter()
            .map(|b| b.id)
            .collect(),
        _ => BTreeSet::new(),
    };
    for view in describe_views(admin, names, timeout_ms).await? {
        match partitions {
            None => print!("{}", format_topic_description(&view)),
            Some(f) => print!("{}", format_filtered_partitions(&view, f, &live_brokers)),
        }
    }
    Ok(())
}

/// `--alter --partitions`: grows each topic to `partitions`.
async fn add_partitions(
    admin: &Admin,
    names: &[String],
    partitions: i32,
    assignment: Option<&[Vec<i32>]>,
    timeout_ms: i32,
) -> Result<()> {
    let current = admin.describe_topics(names).await?;
    let changes = current
        .iter()
        .map(|t| NewPartitions {
            topic: t.name.clone(),
            total_count: partitions,
            // The assignment lists every partition; only the new ones are sent.
            assignments: assignment.map(|a| a.iter().skip(t.partitions.len()).cloned().collect()),
        })
        .collect();
    for (topic, result) in admin.create_partitions(changes, false, timeout_ms).await? {
        if let Err(e) = result {
            bail!("topic '{topic}': {e}");
        }
    }
    Ok(())
}

async fn describe_views(
    admin: &Admin,
    names: &[String],
    timeout_ms: i32,
) -> Result<Vec<TopicView>> {
    if names.is_empty() {
        return Ok(Vec::new());
    }
    let topics = admin.describe_topics(names).await?;
    let resources: Vec<ConfigResource> = names.iter().map(ConfigResource::topic).collect();
    let configs = admin.describe_configs(&resources, false, false).await?;
    let partitions: Vec<TopicPartition> = topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| TopicPartition::new(t.name.clone(), p.partition))
        })
        .collect();
    // Like kafka-topics.sh, carry on without reassignment details where the cluster cannot
    // report them.
    let reassignments = match admin
        .list_partition_reassignments(Some(&partitions), timeout_ms)
        .await
    {
        Ok(r) => r,
        Err(Error::UnsupportedVersion { .. }) => BTreeMap::new(),
        Err(e)
            if e.kafka_code() == Some(KafkaCode::UNSUPPORTED_VERSION)
                || e.kafka_code() == Some(KafkaCode(31)) =>
        {
            BTreeMap::new()
        }
        Err(e) => return Err(e.into()),
    };
    topics
        .into_iter()
        .zip(configs)
        .map(|(metadata, (_, configs))| {
            let configs =
                configs.map_err(|e| anyhow!("configs of topic '{}': {e}", metadata.name))?;
            let reassignments = reassignments
                .iter()
                .filter(|(tp, _)| tp.topic == metadata.name)
                .map(|(tp, r)| (tp.partition, r.clone()))
                .collect();
            Ok(TopicView {
                metadata,
                configs,
                reassignments,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use gregor_client::admin::ConfigSource;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: TopicsArgs,
    }

    fn parse(args: &[&str]) -> Result<TopicsAction> {
        let cli = Cli::try_parse_from(std::iter::once("topics").chain(args.iter().copied()))?;
        cli.args.action()
    }

    #[test]
    fn create_with_counts_configs_and_defaults() {
        let a = parse(&[
            "--create",
            "--topic",
            "tp_demo_02",
            "--partitions",
            "2",
            "--replication-factor",
            "3",
            "--config",
            "cleanup.policy = compact",
            "--config",
            "retention.ms=1000",
        ])
        .unwrap();
        let TopicsAction::Create {
            topic,
            if_not_exists,
        } = a
        else {
            panic!("{a:?}")
        };
        assert!(!if_not_exists);
        assert_eq!(
            (topic.num_partitions, topic.replication_factor),
            (Some(2), Some(3))
        );
        assert_eq!(
            topic.configs[0],
            ("cleanup.policy".to_string(), "compact".to_string())
        );
        // Without counts the broker's defaults apply.
        let TopicsAction::Create { topic, .. } = parse(&["--create", "--topic", "t"]).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (topic.num_partitions, topic.replication_factor),
            (None, None)
        );
        assert!(parse(&["--list"]).is_ok());
        let conn = Cli::try_parse_from(["topics", "--list"])
            .unwrap()
            .args
            .connection;
        assert_eq!(conn.bootstrap_server, "127.0.0.1:9092");
    }

    #[test]
    fn create_with_the_seed_replica_assignment() {
        let a = parse(&[
            "--create",
            "--topic",
            "tp_demo_03",
            "--replica-assignment",
            "0:1,1:0,0:1",
        ])
        .unwrap();
        let TopicsAction::Create { topic, .. } = a else {
            panic!()
        };
        assert_eq!(
            topic.replica_assignment,
            Some(vec![vec![0, 1], vec![1, 0], vec![0, 1]])
        );
    }

    #[test]
    fn bad_create_arguments_get_one_line_errors() {
        let err = |args: &[&str]| format!("{:#}", parse(args).unwrap_err());
        assert_eq!(
            err(&["--create", "--topic", "t", "--partitions", "0"]),
            "The partitions must be greater than 0"
        );
        assert_eq!(
            err(&["--create", "--topic", "t", "--partitions", "-3"]),
            "The partitions must be greater than 0"
        );
        assert_eq!(
            err(&["--create", "--topic", "t", "--replication-factor", "0"]),
            "The replication factor must be between 1 and 32767 inclusive"
        );
        assert!(
            err(&["--create", "--topic", "t", "--replication-factor", "40000"])
                .contains("between 1 and 32767")
        );
        assert_eq!(
            err(&["--create", "--partitions", "3"]),
            "--create needs --topic"
        );
        assert!(err(&[
            "--create",
            "--topic",
            "t",
            "--replica-assignment",
            "0:1",
            "--partitions",
            "1"
        ])
        .contains("cannot be used with"));
        assert!(err(&["--create", "--topic", "t", "--config", "retention.ms"]).contains("key=val"));
        assert!(err(&["--create", "--topic", "t", "--config", "a=b=c"]).contains("key=val"));
        assert!(err(&["--describe", "--partitions", "3"])
            .contains("--partitions can only be used with"));
        assert!(err(&["--list", "--if-exists"]).contains("--if-exists"));
        assert!(err(&["--alter", "--topic", "t"]).contains("--alter needs --partitions"));
        assert!(err(&["--delete"]).contains("--delete needs --topic"));
        // Exactly one action.
        assert!(err(&["--create", "--list", "--topic", "t"]).contains("cannot be used with"));
        assert!(parse(&["--topic", "t"]).is_err());
    }

    #[test]
    fn malformed_replica_assignments() {
        assert_eq!(
            parse_replica_assignment(" 0 : 1 ,1:0").unwrap(),
            vec![vec![0, 1], vec![1, 0]]
        );
        let err = |s: &str| parse_replica_assignment(s).unwrap_err().to_string();
        assert!(
            err("0:x").contains("'x' (partition 0) is not a broker id"),
            "{}",
            err("0:x")
        );
        assert!(err("0:1,").contains("'' (partition 1) is not a broker id"));
        assert_eq!(
            err("0:0"),
            "Partition replica lists may not contain duplicate entries: 0 (partition 0 in '0:0')"
        );
        assert_eq!(
            err("0:1,2"),
            "Partition 1 has different replication factor: 2 (partition 0 has 2)"
        );
        assert!(err("-1").contains("negative") || err("-1").contains("not a broker id"));
    }

    fn seed_topic() -> TopicMetadata {
        let part =
            |p: i32, leader: Option<i32>, replicas: Vec<i32>, isr: Vec<i32>| PartitionMetadata {
                partition: p,
                leader,
                leader_epoch: 0,
                replicas,
                isr,
                offline_replicas: vec![],
                error: None,
            };
        TopicMetadata {
            name: "tp_demo_03".into(),
            topic_id: gregor_client::Uuid::nil(),
            is_internal: false,
            partitions: vec![
                part(0, Some(1), vec![0, 1], vec![1]),
                part(1, Some(1), vec![1, 0], vec![1]),
                part(2, None, vec![0, 1], vec![]),
            ],
            error: None,
        }
    }

    #[test]
    fn describe_prints_kafka_lines() {
        let view = TopicView {
            metadata: seed_topic(),
            configs: vec![
                ConfigEntry {
                    name: "cleanup.policy".into(),
                    value: Some("compact".into()),
                    source: ConfigSource::DynamicTopic,
                    is_sensitive: false,
                    read_only: false,
                    synonyms: vec![],
                    documentation: None,
                },
                ConfigEntry {
                    name: "retention.ms".into(),
                    value: Some("604800000".into()),
                    source: ConfigSource::Default,
                    is_sensitive: false,
                    read_only: false,
                    synonyms: vec![],
                    documentation: None,
                },
                ConfigEntry {
                    name: "segment.bytes".into(),
                    value: Some("1073741824".into()),
                    source: ConfigSource::StaticBroker,
                    is_sensitive: false,
                    read_only: false,
                    synonyms: vec![],
                    documentation: None,
                },
            ],
            reassignments: BTreeMap::new(),
        };
        assert_eq!(
            format_topic_description(&view),
            "Topic: tp_demo_03\tPartitionCount: 3\tReplicationFactor: 2\tConfigs: cleanup.policy=compact,segment.bytes=1073741824\n\
             \tTopic: tp_demo_03\tPartition: 0\tLeader: 1\tReplicas: 0,1\tIsr: 1\tElr: N/A\tLastKnownElr: N/A\n\
             \tTopic: tp_demo_03\tPartition: 1\tLeader: 1\tReplicas: 1,0\tIsr: 1\tElr: N/A\tLastKnownElr: N/A\n\
             \tTopic: tp_demo_03\tPartition: 2\tLeader: none\tReplicas: 0,1\tIsr: \tElr: N/A\tLastKnownElr: N/A\n"
        );
    }

    #[test]
    fn describe_shows_topic_id_and_reassignment_in_progress() {
        let mut t = seed_topic();
        t.topic_id = gregor_client::Uuid::from_u128(0x0102030405060708090a0b0c0d0e0f10);
        t.partitions.truncate(1);
        // Moving partition 0 from [0, 1] to [1, 2]: replicas hold all three meanwhile.
        t.partitions[0].replicas = vec![1, 2, 0];
        let reassignments = [(
            0,
            OngoingReassignment {
                replicas: vec![1, 2, 0],
                adding_replicas: vec![2],
                removing_replicas: vec![0],
            },
        )]
        .into_iter()
        .collect();
        let text = format_topic_description(&TopicView {
            metadata: t,
            configs: vec![],
            reassignments,
        });
        assert_eq!(
            text,
            "Topic: tp_demo_03\tTopicId: AQIDBAUGBwgJCgsMDQ4PEA\tPartitionCount: 1\tReplicationFactor: 2\tConfigs: \n\
             \tTopic: tp_demo_03\tPartition: 0\tLeader: 1\tReplicas: 1,2,0\tIsr: 1\tAdding Replicas: 2\tRemoving Replicas: 0\tElr: N/A\tLastKnownElr: N/A\n"
        );
    }

    fn config(name: &str, value: &str, source: ConfigSource) -> ConfigEntry {
        ConfigEntry {
            name: name.into(),
            value: Some(value.into()),
            source,
            is_sensitive: false,
            read_only: false,
            synonyms: vec![],
            documentation: None,
        }
    }

    /// RF 3, min.insync.replicas 2: partition 0 fully in sync, 1 at min ISR, 2 under min ISR,
    /// 3 led by broker 2 which is no longer live, 4 without a leader.
    fn filter_view() -> TopicView {
        let part = |p: i32, leader: Option<i32>, isr: Vec<i32>| PartitionMetadata {
            partition: p,
            leader,
            leader_epoch: 0,
            replicas: vec![0, 1, 2],
            isr,
            offline_replicas: vec![],
            error: None,
        };
        TopicView {
            metadata: TopicMetadata {
                name: "orders".into(),
                topic_id: gregor_client::Uuid::nil(),
                is_internal: false,
                partitions: vec![
                    part(0, Some(0), vec![0, 1, 2]),
                    part(1, Some(1), vec![1, 0]),
                    part(2, Some(0), vec![0]),
                    part(3, Some(2), vec![2, 0, 1]),
                    part(4, None, vec![2]),
                ],
                error: None,
            },
            configs: vec![
                config("min.insync.replicas", "2", ConfigSource::DynamicTopic),
                config("retention.ms", "604800000", ConfigSource::Default),
            ],
            reassignments: BTreeMap::new(),
        }
    }

    fn filtered(view: &TopicView, f: PartitionFilter) -> Vec<i32> {
        let live: BTreeSet<i32> = [0, 1].into_iter().collect();
        view.metadata
            .partitions
            .iter()
            .filter(|p| partition_matches(view, p, f, &live))
            .map(|p| p.partition)
            .collect()
    }

    #[test]
    fn partition_filters_select_what_kafka_selects() {
        let view = filter_view();
        assert_eq!(
            filtered(&view, PartitionFilter::UnderReplicated),
            vec![1, 2, 4]
        );
        // A leaderless partition counts as under its min ISR whatever its ISR size.
        assert_eq!(filtered(&view, PartitionFilter::UnderMinIsr), vec![2, 4]);
        assert_eq!(filtered(&view, PartitionFilter::AtMinIsr), vec![1]);
        assert_eq!(filtered(&view, PartitionFilter::Unavailable), vec![3, 4]);
        // Without a known min.insync.replicas, only leaderless partitions are under it.
        let mut no_min = filter_view();
        no_min.configs.clear();
        assert_eq!(filtered(&no_min, PartitionFilter::UnderMinIsr), vec![4]);
        assert!(filtered(&no_min, PartitionFilter::AtMinIsr).is_empty());
    }

    #[test]
    fn a_reassigning_partition_is_under_replicated_against_its_target() {
        // Moving [0, 1] to [1, 2]: replicas [1, 2, 0] while 2 catches up, ISR [1, 0]: the
        // target factor is 2, so the partition is fully replicated.
        let mut view = filter_view();
        view.metadata.partitions.truncate(1);
        view.metadata.partitions[0].replicas = vec![1, 2, 0];
        view.metadata.partitions[0].isr = vec![1, 0];
        view.reassignments.insert(
            0,
            OngoingReassignment {
                replicas: vec![1, 2, 0],
                adding_replicas: vec![2],
                removing_replicas: vec![0],
            },
        );
        assert!(filtered(&view, PartitionFilter::UnderReplicated).is_empty());
        view.metadata.partitions[0].isr = vec![1];
        assert_eq!(filtered(&view, PartitionFilter::UnderReplicated), vec![0]);
    }

    #[test]
    fn filtered_describe_prints_only_matching_partition_lines() {
        let view = filter_view();
        let live: BTreeSet<i32> = [0, 1].into_iter().collect();
        assert_eq!(
            format_filtered_partitions(&view, PartitionFilter::Unavailable, &live),
            "\tTopic: orders\tPartition: 3\tLeader: 2\tReplicas: 0,1,2\tIsr: 2,0,1\tElr: N/A\tLastKnownElr: N/A\n\
             \tTopic: orders\tPartition: 4\tLeader: none\tReplicas: 0,1,2\tIsr: 2\tElr: N/A\tLastKnownElr: N/A\n"
        );
        assert_eq!(
            format_filtered_partitions(&view, PartitionFilter::AtMinIsr, &live),
            "\tTopic: orders\tPartition: 1\tLeader: 1\tReplicas: 0,1,2\tIsr: 1,0\tElr: N/A\tLastKnownElr: N/A\n"
        );
        // A topic with nothing to report prints nothing at all.
        let mut healthy = filter_view();
        healthy.metadata.partitions.truncate(1);
        assert_eq!(
            format_filtered_partitions(&healthy, PartitionFilter::UnderReplicated, &live),
            ""
        );
    }

    #[test]
    fn partition_filters_only_with_describe_and_one_at_a_time() {
        let a = parse(&[
            "--describe",
            "--under-replicated-partitions",
            "--exclude-internal",
        ])
        .unwrap();
        assert_eq!(
            a,
            TopicsAction::Describe {
                filter: None,
                exclude_internal: true,
                if_exists: false,
                partitions: Some(PartitionFilter::UnderReplicated),
            }
        );
        for (flag, f) in [
            ("--under-min-isr-partitions", PartitionFilter::UnderMinIsr),
            ("--at-min-isr-partitions", PartitionFilter::AtMinIsr),
            ("--unavailable-partitions", PartitionFilter::Unavailable),
        ] {
            let TopicsAction::Describe { partitions, .. } =
                parse(&["--describe", "--topic", "t", flag]).unwrap()
            else {
                panic!()
            };
            assert_eq!(partitions, Some(f));
        }
        let err = |args: &[&str]| format!("{:#}", parse(args).unwrap_err());
        assert_eq!(
            err(&["--list", "--unavailable-partitions"]),
            "--unavailable-partitions can only be used with --describe"
        );
        assert_eq!(
            err(&["--create", "--topic", "t", "--under-replicated-partitions"]),
            "--under-replicated-partitions can only be used with --describe"
        );
        assert_eq!(
            err(&[
                "--describe",
                "--under-min-isr-partitions",
                "--at-min-isr-partitions"
            ]),
            "--under-min-isr-partitions cannot be used with --at-min-isr-partitions"
        );
        assert_eq!(
            err(&["--delete", "--topic", "t", "--exclude-internal"]),
            "--exclude-internal can only be used with --list or --describe"
        );
    }

    #[test]
    fn unmatched_topic_is_an_error_unless_if_exists() {
        assert_eq!(
            ensure_found(&[], Some("nope"), false)
                .unwrap_err()
                .to_string(),
            "Topic 'nope' does not exist as expected"
        );
        assert!(ensure_found(&[], Some("nope"), true).is_ok());
        assert!(ensure_found(&[], None, false).is_ok());
    }
}
