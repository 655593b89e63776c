//! `gregor reassign`: what `kafka-reassign-partitions.sh` does — generate a plan, execute it,
//! verify it, cancel it, list reassignments — over AlterPartitionReassignments,
//! ListPartitionReassignments, Metadata and DescribeCluster, with the tool's options and
//! output. `--throttle` sets Kafka's replication throttles (see `reassign_throttle`), and
//! `--verify` shows how far each replica being added has come.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use anyhow::{anyhow, bail, Context, Result};
use gregor_client::admin::OngoingReassignment;
use gregor_client::metadata::PartitionMetadata;
use gregor_client::{Admin, KafkaCode, TopicPartition};

use super::common::ConnectionArgs;
use super::reassign_json::{
    format_reassignment_json, generate_plan, join, parse_broker_list, parse_reassignment,
    parse_reassignment_to_execute, parse_topics_to_move, Assignment, TargetBroker,
};
use super::reassign_plan::{run_plan, PlanRequest};
use super::reassign_throttle::{
    apply_throttles, clear_throttles, format_progress, parse_throttle, progress, throttle_plan,
};

/// Move partition replicas between brokers, or change their replication factor (like
/// kafka-reassign-partitions.sh).
#[derive(Debug, Clone, clap::Args)]
pub struct ReassignArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Propose a reassignment of the topics in --topics-to-move-json-file over --broker-list
    /// (prints it; changes nothing).
    #[arg(long)]
    pub generate: bool,
    /// Start the reassignment in --reassignment-json-file.
    #[arg(long)]
    pub execute: bool,
    /// Report whether the reassignment in --reassignment-json-file is complete.
    #[arg(long)]
    pub verify: bool,
    /// Cancel the active reassignments of the partitions in --reassignment-json-file.
    #[arg(long)]
    pub cancel: bool,
    /// List every active reassignment.
    #[arg(long)]
    pub list: bool,
    /// Propose a reassignment of the topics in --topics-to-move-json-file over --broker-list
    /// that balances replicas and preferred leaders while moving as few replicas (and bytes)
    /// as it can (prints it; changes nothing).
    #[arg(long)]
    pub plan: bool,
    /// --plan spreads each partition's replicas over the brokers' racks.
    #[arg(long)]
    pub racks: bool,
    /// --plan proposes at most this many replica moves, the most valuable first.
    #[arg(long, value_name = "N", allow_negative_numbers = true)]
    pub max_moves: Option<String>,
    /// --plan also prints each move and the counts per broker and rack before and after.
    #[arg(long)]
    pub explain: bool,
    /// {"topics":[{"topic":"t"}],"version":1}: the topics --generate moves.
    #[arg(long, value_name = "FILE")]
    pub topics_to_move_json_file: Option<PathBuf>,
    /// The brokers --generate places replicas on: "0,1".
    #[arg(long, value_name = "IDS")]
    pub broker_list: Option<String>,
    /// {"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,0]}]}.
    #[arg(long, value_name = "FILE")]
    pub reassignment_json_file: Option<PathBuf>,
    /// --generate ignores the brokers' racks.
    #[arg(long)]
    pub disable_rack_aware: bool,
    /// --execute while other reassignments are active.
    #[arg(long)]
    pub additional: bool,
    /// --verify leaves the replication throttles in place when the reassignment is complete.
    #[arg(long)]
    pub preserve_throttles: bool,
    /// With --execute: limit the replication traffic of the moving replicas to this many bytes
    /// per second, on every broker involved (removed by --verify once complete).
    #[arg(long, value_name = "BYTES_PER_S", allow_negative_numbers = true)]
    pub throttle: Option<String>,
    /// Not supported: each Gregor broker keeps one log directory.
    #[arg(long, value_name = "BYTES_PER_S", allow_negative_numbers = true)]
    pub replica_alter_log_dirs_throttle: Option<String>,
}

/// A validated `gregor reassign` invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReassignAction {
    Generate {
        topics_file: PathBuf,
        brokers: Vec<i32>,
        rack_aware: bool,
    },
    Plan {
        topics_file: PathBuf,
        brokers: Vec<i32>,
        racks: bool,
        max_moves: Option<usize>,
        explain: bool,
    },
    Execute {
        file: PathBuf,
        additional: bool,
        /// Bytes per second, if throttled.
        throttle: Option<i64>,
    },
    Verify {
        file: PathBuf,
        preserve_throttles: bool,
    },
    Cancel {
        file: PathBuf,
        preserve_throttles: bool,
    },
    List,
}

const ACTIONS: [&str; 6] = [
    "--generate",
    "--execute",
    "--verify",
    "--cancel",
    "--list",
    "--plan",
];

/// kafka-reassign-partitions.sh's refusal to run over an active reassignment.
const EXISTING_REASSIGNMENT: &str = "Cannot execute because there is an existing partition assignment.  Use --additional to override this and create a new partition assignment in addition to the existing one.";

impl ReassignArgs {
    /// Checks the options the way kafka-reassign-partitions.sh does: exactly one action, the
    /// options it needs, none it cannot use.
    pub fn action(&self) -> Result<ReassignAction> {
        let action = self.chosen_action()?;
        if self.replica_alter_log_dirs_throttle.is_some() {
            bail!(
                "--replica-alter-log-dirs-throttle is not supported: each Gregor broker keeps one log directory, so replicas never move between directories; run without it"
            );
        }
        self.check_options(action)?;
        self.build(action)
    }

    /// The one action flag given.
    fn chosen_action(&self) -> Result<&'static str> {
        let chosen = [
            self.generate,
            self.execute,
            self.verify,
            self.cancel,
            self.list,
            self.plan,
        ];
        let actions: Vec<&str> = ACTIONS
            .iter()
            .zip(chosen)
            .filter(|(_, on)| *on)
            .map(|(a, _)| *a)
            .collect();
        let [action] = actions[..] else {
            bail!(
                "Command must include exactly one action: {}",
                ACTIONS.join(", ")
            );
        };
        Ok(action)
    }

    /// The options `action` needs are given, and no other.
    fn check_options(&self, action: &str) -> Result<()> {
        let given = [
            (
                self.topics_to_move_json_file.is_some(),
                "--topics-to-move-json-file",
            ),
            (self.broker_list.is_some(), "--broker-list"),
            (
                self.reassignment_json_file.is_some(),
                "--reassignment-json-file",
            ),
            (self.disable_rack_aware, "--disable-rack-aware"),
            (self.additional, "--additional"),
            (self.preserve_throttles, "--preserve-throttles"),
            (self.throttle.is_some(), "--throttle"),
            (self.racks, "--racks"),
            (self.max_moves.is_some(), "--max-moves"),
            (self.explain, "--explain"),
        ];
        let (required, permitted): (&[&str], &[&str]) = match action {
            "--generate" => (
                &["--topics-to-move-json-file", "--broker-list"],
                &["--disable-rack-aware"],
            ),
            "--plan" => (
                &["--topics-to-move-json-file", "--broker-list"],
                &["--racks", "--max-moves", "--explain"],
            ),
            "--execute" => (
                &["--reassignment-json-file"],
                &["--additional", "--throttle"],
            ),
            "--verify" | "--cancel" => (&["--reassignment-json-file"], &["--preserve-throttles"]),
            _ => (&[], &[]),
        };
        if let Some(missing) = required
            .iter()
            .find(|r| !given.iter().any(|(on, flag)| *on && flag == *r))
        {
            bail!("Missing required argument \"{missing}\"");
        }
        if let Some((_, flag)) = given
            .iter()
            .find(|(on, flag)| *on && !required.contains(flag) && !permitted.contains(flag))
        {
            bail!("Option \"{flag}\" can't be used with action \"{action}\"");
        }
        Ok(())
    }

    /// The action with its options, once checked.
    fn build(&self, action: &str) -> Result<ReassignAction> {
        let file = || {
            self.reassignment_json_file
                .clone()
                .expect("required for this action, checked above")
        };
        Ok(match action {
            "--generate" => ReassignAction::Generate {
                topics_file: self
                    .topics_to_move_json_file
                    .clone()
                    .expect("required for --generate, checked above"),
                brokers: parse_broker_list(
                    self.broker_list
                        .as_deref()
                        .expect("required for --generate, checked above"),
                )?,
                rack_aware: !self.disable_rack_aware,
            },
            "--plan" => ReassignAction::Plan {
                topics_file: self
                    .topics_to_move_json_file
                    .clone()
                    .expect("required for --plan, checked above"),
                brokers: parse_broker_list(
                    self.broker_list
                        .as_deref()
                        .expect("required for --plan, checked above"),
                )?,
                racks: self.racks,
                max_moves: self.max_moves.as_deref().map(parse_max_moves).transpose()?,
                explain: self.explain,
            },
            "--execute" => ReassignAction::Execute {
                file: file(),
                additional: self.additional,
                throttle: match &self.throttle {
                    Some(raw) => parse_throttle(raw)?,
                    None => None,
                },
            },
            "--verify" => ReassignAction::Verify {
                file: file(),
                preserve_throttles: self.preserve_throttles,
            },
            "--cancel" => ReassignAction::Cancel {
                file: file(),
                preserve_throttles: self.preserve_throttles,
            },
            _ => ReassignAction::List,
        })
    }
}

/// `--max-moves N`: a count of replica moves, 0 or more.
fn parse_max_moves(text: &str) -> Result<usize> {
    text.trim().parse().map_err(|_| {
        anyhow!("Invalid --max-moves '{text}': expected a number of replica moves (0 or more)")
    })
}

/// Where one partition of a plan stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionState {
    /// A reassignment is active. `isr` and `leader` come from Metadata, when it had them.
    InProgress {
        target: Vec<i32>,
        ongoing: OngoingReassignment,
        isr: Vec<i32>,
        leader: Option<i32>,
    },
    /// No reassignment is active and the replicas are the target's.
    Complete,
    /// No reassignment is active, but the replicas are not the target's (it failed, was
    /// cancelled, or was never started).
    Differs { current: Vec<i32>, target: Vec<i32> },
    /// The topic or partition does not exist.
    Missing,
}

/// Each planned partition's state, from the active reassignments and the current metadata
/// (`None`: the partition does not exist).
pub fn partition_states(
    plan: &Assignment,
    ongoing: &BTreeMap<TopicPartition, OngoingReassignment>,
    current: &BTreeMap<TopicPartition, PartitionMetadata>,
) -> BTreeMap<TopicPartition, PartitionState> {
    plan.iter()
        .map(|(tp, target)| {
            let meta = current.get(tp);
            let state = match (ongoing.get(tp), meta) {
                (Some(o), _) => PartitionState::InProgress {
                    target: target.clone(),
                    ongoing: o.clone(),
                    isr: meta.map(|m| m.isr.clone()).unwrap_or_default(),
                    leader: meta.and_then(|m| m.leader),
                },
                (None, None) => PartitionState::Missing,
                (None, Some(m)) if &m.replicas == target => PartitionState::Complete,
                (None, Some(m)) => PartitionState::Differs {
                    current: m.replicas.clone(),
                    target: target.clone(),
                },
            };
            (tp.clone(), state)
        })
        .collect()
}

/// `--verify`'s report: Kafka's status lines, and under each partition still moving the
/// target replicas already in the ISR and those still catching up.
pub fn format_verify(states: &BTreeMap<TopicPartition, PartitionState>) -> String {
    let mut out = String::from("Status of partition reassignment:\n");
    for (tp, state) in states {
        match state {
            PartitionState::Complete => {
                out.push_str(&format!("Reassignment of partition {tp} is completed.\n"))
            }
            PartitionState::InProgress {
                target,
                ongoing,
                isr,
                leader,
            } => {
                out.push_str(&format!(
                    "Reassignment of partition {tp} is still in progress.\n"
                ));
                let (in_sync, behind): (Vec<i32>, Vec<i32>) =
                    target.iter().partition(|r| isr.contains(r));
                let none = |v: &[i32]| {
                    if v.is_empty() {
                        "none".to_string()
                    } else {
                        join(v)
                    }
                };
                out.push_str(&format!(
                    "  {tp}: target replicas {}; in sync: {}; catching up: {}; removing: {}; leader: {}\n",
                    join(target),
                    none(&in_sync),
                    none(&behind),
                    none(&ongoing.removing_replicas),
                    leader.map_or("none".to_string(), |l| l.to_string())
                ));
            }
            PartitionState::Differs { current, target } => out.push_str(&format!(
                "There is no active reassignment of partition {tp}, but replica set is {} rather than {}.\n",
                join(current),
                join(target)
            )),
            PartitionState::Missing => out.push_str(&format!(
                "There is no active reassignment of partition {tp}, and the partition does not exist (UNKNOWN_TOPIC_OR_PARTITION).\n"
            )),
        }
    }
    out
}

/// `--list`'s report, as Kafka prints it.
pub fn format_list(ongoing: &BTreeMap<TopicPartition, OngoingReassignment>) -> String {
    if ongoing.is_empty() {
        return "No partition reassignments found.\n".to_string();
    }
    let mut out = String::from("Current partition reassignments:\n");
    for (tp, r) in ongoing {
        out.push_str(&format!("{tp}: replicas: {}.", join(&r.replicas)));
        if !r.adding_replicas.is_empty() {
            out.push_str(&format!(" adding: {}.", join(&r.adding_replicas)));
        }
        if !r.removing_replicas.is_empty() {
            out.push_str(&format!(" removing: {}.", join(&r.removing_replicas)));
        }
        out.push('\n');
    }
    out
}

/// What `--execute` prints before it starts: the current replicas of the planned
/// partitions, to keep for a rollback.
pub fn format_rollback(current: &Assignment) -> String {
    format!(
        "Current partition replica assignment\n\n{}\n\nSave this to use as the --reassignment-json-file option during rollback\n",
        format_reassignment_json(current)
    )
}

/// "partition reassignment" or "partition reassignments" for a list of partitions.
fn reassignments_for(parts: &[TopicPartition]) -> String {
    format!(
        "partition reassignment{} for {}",
        if parts.len() == 1 { "" } else { "s" },
        parts
            .iter()
            .map(|tp| tp.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

fn read(path: &Path) -> Result<String> {
    std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))
}

/// The metadata of the partitions of `topics` that exist (unknown topics are left out).
async fn current_partitions(
    admin: &Admin,
    topics: &BTreeSet<String>,
) -> Result<BTreeMap<TopicPartition, PartitionMetadata>> {
    let existing: BTreeSet<String> = admin
        .list_topics(true)
        .await?
        .into_iter()
        .map(|t| t.name)
        .collect();
    let names: Vec<String> = topics.intersection(&existing).cloned().collect();
    if names.is_empty() {
        return Ok(BTreeMap::new());
    }
    Ok(admin
        .describe_topics(&names)
        .await?
        .into_iter()
        .flat_map(|t| {
            let topic = t.name;
            t.partitions
                .into_iter()
                .map(move |p| (TopicPartition::new(topic.clone(), p.partition), p))
        })
        .collect())
}

fn topics_of(plan: &Assignment) -> BTreeSet<String> {
    plan.keys().map(|tp| tp.topic.clone()).collect()
}

/// Runs `gregor reassign`.
pub async fn run_reassign(args: ReassignArgs) -> Result<()> {
    let action = args.action()?;
    // Files are read and checked before anything is sent.
    let plan = read_plan(&action)?;
    let topics_to_move = read_topics_to_move(&action)?;
    let admin = args.connection.connect().await?;
    let timeout_ms = args.connection.request_timeout_ms();
    match action {
        ReassignAction::Generate {
            brokers,
            rack_aware,
            ..
        } => {
            let topics = topics_to_move.expect("parsed for --generate");
            generate(&admin, &topics, &brokers, rack_aware).await?;
        }
        ReassignAction::Plan {
            brokers,
            racks,
            max_moves,
            explain,
            ..
        } => {
            let topics = topics_to_move.expect("parsed for --plan");
            let request = PlanRequest {
                topics,
                brokers,
                racks,
                max_moves,
                explain,
            };
            print!("{}", run_plan(&admin, &request).await?);
        }
        ReassignAction::Execute {
            additional,
            throttle,
            ..
        } => {
            let plan = plan.expect("parsed for --execute");
            execute(&admin, &plan, additional, throttle, timeout_ms).await?;
        }
        ReassignAction::Verify {
            preserve_throttles, ..
        } => {
            let plan = plan.expect("parsed for --verify");
            verify(&admin, &plan, preserve_throttles, timeout_ms).await?;
        }
        ReassignAction::Cancel {
            preserve_throttles, ..
        } => {
            let plan = plan.expect("parsed for --cancel");
            cancel(&admin, &plan, preserve_throttles, timeout_ms).await?;
        }
        ReassignAction::List => {
            let ongoing = admin.list_partition_reassignments(None, timeout_ms).await?;
            print!("{}", format_list(&ongoing));
        }
    }
    Ok(())
}

/// The --reassignment-json-file of --execute, --verify and --cancel, parsed.
fn read_plan(action: &ReassignAction) -> Result<Option<Assignment>> {
    Ok(match action {
        ReassignAction::Execute { file, .. } => Some(
            parse_reassignment_to_execute(&read(file)?)
                .with_context(|| format!("in {}", file.display()))?,
        ),
        ReassignAction::Verify { file, .. } | ReassignAction::Cancel { file, .. } => Some(
            parse_reassignment(&read(file)?).with_context(|| format!("in {}", file.display()))?,
        ),
        _ => None,
    })
}

/// The --topics-to-move-json-file of --generate and --plan, parsed.
fn read_topics_to_move(action: &ReassignAction) -> Result<Option<Vec<String>>> {
    Ok(match action {
        ReassignAction::Generate { topics_file, .. } | ReassignAction::Plan { topics_file, .. } => {
            Some(
                parse_topics_to_move(&read(topics_file)?)
                    .with_context(|| format!("in {}", topics_file.display()))?,
            )
        }
        _ => None,
    })
}

/// `--generate`: prints the current assignment of `topics` and a proposed one over `brokers`.
async fn generate(
    admin: &Admin,
    topics: &[String],
    brokers: &[i32],
    rack_aware: bool,
) -> Result<()> {
    let cluster = admin.describe_cluster().await?;
    let mut targets = Vec::with_capacity(brokers.len());
    for id in brokers {
        let node = cluster
            .brokers
            .iter()
            .find(|b| b.id == *id)
            .ok_or_else(|| anyhow!("Unknown broker id {id}"))?;
        targets.push(TargetBroker {
            id: *id,
            rack: node.rack.clone(),
        });
    }
    let current: Assignment = admin
        .describe_topics(topics)
        .await?
        .into_iter()
        .flat_map(|t| {
            let topic = t.name;
            t.partitions
                .into_iter()
                .map(move |p| (TopicPartition::new(topic.clone(), p.partition), p.replicas))
        })
        .collect();
    let proposed = generate_plan(&current, &targets, rack_aware)?;
    println!(
        "Current partition replica assignment\n{}\n",
        format_reassignment_json(&current)
    );
    println!(
        "Proposed partition reassignment configuration\n{}",
        format_reassignment_json(&proposed)
    );
    Ok(())
}

/// `--execute`: checks the plan against the cluster, prints the rollback, sets the throttles
/// and starts the reassignment.
async fn execute(
    admin: &Admin,
    plan: &Assignment,
    additional: bool,
    throttle: Option<i64>,
    timeout_ms: i32,
) -> Result<()> {
    let ongoing = admin.list_partition_reassignments(None, timeout_ms).await?;
    if !additional && !ongoing.is_empty() {
        bail!("{EXISTING_REASSIGNMENT}");
    }
    let rollback = rollback_of(admin, plan).await?;
    println!("{}", format_rollback(&rollback).trim_end());
    if let Some(rate) = throttle {
        println!("Warning: You must run --verify periodically, until the reassignment completes, to ensure the throttle is removed.");
        apply_throttles(admin, &throttle_plan(&rollback, plan), rate).await?;
        println!("The inter-broker throttle limit was set to {rate} B/s");
    }
    let changes: BTreeMap<TopicPartition, Option<Vec<i32>>> = plan
        .iter()
        .map(|(tp, r)| (tp.clone(), Some(r.clone())))
        .collect();
    let results = admin
        .alter_partition_reassignments(&changes, timeout_ms)
        .await?;
    let failures = failures(results);
    if !failures.is_empty() {
        bail!("Error reassigning partition(s):\n{}", failures.join("\n"));
    }
    let parts: Vec<TopicPartition> = plan.keys().cloned().collect();
    println!("Successfully started {}", reassignments_for(&parts));
    Ok(())
}

/// The current replicas of the plan's partitions, after checking that its brokers and
/// partitions exist.
async fn rollback_of(admin: &Admin, plan: &Assignment) -> Result<Assignment> {
    let known: BTreeSet<i32> = admin
        .describe_cluster()
        .await?
        .brokers
        .iter()
        .map(|b| b.id)
        .collect();
    let wanted: BTreeSet<i32> = plan.values().flatten().copied().collect();
    if let Some(id) = wanted.iter().find(|id| !known.contains(id)) {
        bail!("Unknown broker id {id}");
    }
    let current = current_partitions(admin, &topics_of(plan)).await?;
    if let Some(tp) = plan.keys().find(|tp| !current.contains_key(tp)) {
        bail!(
            "Unable to find partition: {tp} ({})",
            KafkaCode::UNKNOWN_TOPIC_OR_PARTITION.name()
        );
    }
    Ok(plan
        .keys()
        .map(|tp| (tp.clone(), current[tp].replicas.clone()))
        .collect())
}

/// `--verify`: each partition's state, the progress of the replicas being added, and the
/// throttles cleared once everything is complete (unless preserved).
async fn verify(
    admin: &Admin,
    plan: &Assignment,
    preserve_throttles: bool,
    timeout_ms: i32,
) -> Result<()> {
    let ongoing = admin.list_partition_reassignments(None, timeout_ms).await?;
    let current = current_partitions(admin, &topics_of(plan)).await?;
    let states = partition_states(plan, &ongoing, &current);
    print!("{}", format_verify(&states));
    print_progress(admin, &states).await;
    let done = states
        .values()
        .all(|s| !matches!(s, PartitionState::InProgress { .. }));
    if done && !preserve_throttles {
        println!();
        clear_plan_throttles(admin, plan).await?;
    }
    Ok(())
}

/// How far each replica being added has come, for the partitions still moving.
async fn print_progress(admin: &Admin, states: &BTreeMap<TopicPartition, PartitionState>) {
    let moving: BTreeMap<TopicPartition, (OngoingReassignment, Option<i32>)> = states
        .iter()
        .filter_map(|(tp, s)| match s {
            PartitionState::InProgress {
                ongoing, leader, ..
            } if !ongoing.adding_replicas.is_empty() => {
                Some((tp.clone(), (ongoing.clone(), *leader)))
            }
            _ => None,
        })
        .collect();
    if moving.is_empty() {
        return;
    }
    println!("Progress of the replicas being added:");
    for (tp, replicas) in progress(admin, &moving).await {
        for r in replicas {
            print!("{}", format_progress(&tp, &r));
        }
    }
}

/// `--cancel`: cancels the plan's partitions that are still being reassigned and, as Kafka's
/// tool does, clears the replication throttles unless they are preserved.
async fn cancel(
    admin: &Admin,
    plan: &Assignment,
    preserve_throttles: bool,
    timeout_ms: i32,
) -> Result<()> {
    let parts: Vec<TopicPartition> = plan.keys().cloned().collect();
    let active: Vec<TopicPartition> = admin
        .list_partition_reassignments(Some(&parts), timeout_ms)
        .await?
        .into_iter()
        .filter(|(_, r)| !r.adding_replicas.is_empty() || !r.removing_replicas.is_empty())
        .map(|(tp, _)| tp)
        .collect();
    if active.is_empty() {
        println!("None of the specified partition reassignments are active.");
    } else {
        let changes: BTreeMap<TopicPartition, Option<Vec<i32>>> =
            active.iter().map(|tp| (tp.clone(), None)).collect();
        let failures = failures(
            admin
                .alter_partition_reassignments(&changes, timeout_ms)
                .await?,
        );
        if !failures.is_empty() {
            bail!(
                "Error cancelling partition reassignment{} for:\n{}",
                if failures.len() == 1 { "" } else { "s" },
                failures.join("\n")
            );
        }
        println!("{}", cancelled_line(&active));
    }
    if !preserve_throttles {
        clear_plan_throttles(admin, plan).await?;
    }
    Ok(())
}

/// `--cancel`'s success line, as Kafka's tool prints it (with a colon, unlike `--execute`'s).
fn cancelled_line(parts: &[TopicPartition]) -> String {
    format!(
        "Successfully cancelled partition reassignment{} for: {}",
        if parts.len() == 1 { "" } else { "s" },
        parts
            .iter()
            .map(|tp| tp.to_string())
            .collect::<Vec<_>>()
            .join(",")
    )
}

/// Clears the replication throttles from every broker and the plan's topics.
async fn clear_plan_throttles(admin: &Admin, plan: &Assignment) -> Result<()> {
    let brokers: Vec<i32> = admin
        .describe_cluster()
        .await?
        .brokers
        .iter()
        .map(|b| b.id)
        .collect();
    clear_throttles(admin, &brokers, &topics_of(plan)).await
}

/// "t-0: ERROR_NAME (code): message" per failed partition, sorted.
fn failures(results: gregor_client::admin::EntityResult<TopicPartition, ()>) -> Vec<String> {
    let mut out: Vec<(TopicPartition, String)> = results
        .into_iter()
        .filter_map(|(tp, r)| r.err().map(|e| (tp, e.to_string())))
        .collect();
    out.sort();
    out.into_iter()
        .map(|(tp, e)| format!("{tp}: {e}"))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ReassignArgs,
    }

    fn parse(args: &[&str]) -> Result<ReassignAction> {
        let cli = Cli::try_parse_from(std::iter::once("reassign").chain(args.iter().copied()))?;
        cli.args.action()
    }

    fn err(args: &[&str]) -> String {
        format!("{:#}", parse(args).unwrap_err())
    }

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    #[test]
    fn each_action_with_its_options() {
        assert_eq!(
            parse(&[
                "--bootstrap-server",
                "127.0.0.1:9092",
                "--topics-to-move-json-file",
                "topics-to-move.json",
                "--broker-list",
                "0,1",
                "--generate"
            ])
            .unwrap(),
            ReassignAction::Generate {
                topics_file: "topics-to-move.json".into(),
                brokers: vec![0, 1],
                rack_aware: true
            }
        );
        assert_eq!(
            parse(&[
                "--generate",
                "--topics-to-move-json-file",
                "t.json",
                "--broker-list",
                "2",
                "--disable-rack-aware"
            ])
            .unwrap(),
            ReassignAction::Generate {
                topics_file: "t.json".into(),
                brokers: vec![2],
                rack_aware: false
            }
        );
        assert_eq!(
            parse(&["--reassignment-json-file", "r.json", "--execute"]).unwrap(),
            ReassignAction::Execute {
                file: "r.json".into(),
                additional: false,
                throttle: None,
            }
        );
        assert_eq!(
            parse(&[
                "--execute",
                "--additional",
                "--reassignment-json-file",
                "r.json"
            ])
            .unwrap(),
            ReassignAction::Execute {
                file: "r.json".into(),
                additional: true,
                throttle: None,
            }
        );
        assert_eq!(
            parse(&["--verify", "--reassignment-json-file", "r.json"]).unwrap(),
            ReassignAction::Verify {
                file: "r.json".into(),
                preserve_throttles: false,
            }
        );
        assert_eq!(
            parse(&[
                "--cancel",
                "--reassignment-json-file",
                "r.json",
                "--preserve-throttles"
            ])
            .unwrap(),
            ReassignAction::Cancel {
                file: "r.json".into(),
                preserve_throttles: true,
            }
        );
        assert_eq!(parse(&["--list"]).unwrap(), ReassignAction::List);
    }

    #[test]
    fn plan_takes_generates_inputs_and_its_own_options() {
        assert_eq!(
            parse(&[
                "--plan",
                "--topics-to-move-json-file",
                "t.json",
                "--broker-list",
                "0,1,2",
                "--racks",
                "--max-moves",
                "5",
                "--explain"
            ])
            .unwrap(),
            ReassignAction::Plan {
                topics_file: "t.json".into(),
                brokers: vec![0, 1, 2],
                racks: true,
                max_moves: Some(5),
                explain: true
            }
        );
        assert_eq!(
            parse(&[
                "--plan",
                "--topics-to-move-json-file",
                "t",
                "--broker-list",
                "1"
            ])
            .unwrap(),
            ReassignAction::Plan {
                topics_file: "t".into(),
                brokers: vec![1],
                racks: false,
                max_moves: None,
                explain: false
            }
        );
        let plan = |extra: &[&str]| {
            let mut args = vec![
                "--plan",
                "--topics-to-move-json-file",
                "t",
                "--broker-list",
                "0,1",
            ];
            args.extend_from_slice(extra);
            err(&args)
        };
        for bad in ["x", "-1", "1.5", ""] {
            assert_eq!(
                plan(&["--max-moves", bad]),
                format!(
                    "Invalid --max-moves '{bad}': expected a number of replica moves (0 or more)"
                )
            );
        }
        assert_eq!(
            err(&[
                "--plan",
                "--topics-to-move-json-file",
                "t",
                "--broker-list",
                ""
            ]),
            "--broker-list is empty: give the broker ids to place replicas on, e.g. \"0,1,2\""
        );
        assert_eq!(
            err(&["--plan", "--broker-list", "0"]),
            "Missing required argument \"--topics-to-move-json-file\""
        );
        assert_eq!(
            plan(&["--disable-rack-aware"]),
            "Option \"--disable-rack-aware\" can't be used with action \"--plan\""
        );
        for flag in [&["--racks"][..], &["--explain"], &["--max-moves", "1"]] {
            let mut args = vec![
                "--generate",
                "--topics-to-move-json-file",
                "t",
                "--broker-list",
                "0",
            ];
            args.extend_from_slice(flag);
            assert_eq!(
                err(&args),
                format!(
                    "Option \"{}\" can't be used with action \"--generate\"",
                    flag[0]
                )
            );
        }
    }

    #[test]
    fn bad_flag_combinations_get_one_line_errors() {
        let one = "Command must include exactly one action: --generate, --execute, --verify, --cancel, --list, --plan";
        assert_eq!(err(&[]), one);
        assert_eq!(err(&["--list", "--verify"]), one);
        assert_eq!(
            err(&["--generate", "--broker-list", "0,1"]),
            "Missing required argument \"--topics-to-move-json-file\""
        );
        assert_eq!(
            err(&["--generate", "--topics-to-move-json-file", "t.json"]),
            "Missing required argument \"--broker-list\""
        );
        assert_eq!(
            err(&["--execute"]),
            "Missing required argument \"--reassignment-json-file\""
        );
        assert_eq!(
            err(&[
                "--verify",
                "--reassignment-json-file",
                "r",
                "--broker-list",
                "0"
            ]),
            "Option \"--broker-list\" can't be used with action \"--verify\""
        );
        assert_eq!(
            err(&["--list", "--reassignment-json-file", "r"]),
            "Option \"--reassignment-json-file\" can't be used with action \"--list\""
        );
        assert_eq!(
            err(&["--verify", "--reassignment-json-file", "r", "--additional"]),
            "Option \"--additional\" can't be used with action \"--verify\""
        );
        assert_eq!(
            err(&[
                "--generate",
                "--topics-to-move-json-file",
                "t",
                "--broker-list",
                "0,0"
            ]),
            "Broker list contains duplicate entries: 0"
        );
        assert_eq!(
            parse(&[
                "--execute",
                "--reassignment-json-file",
                "r",
                "--throttle",
                "50000000",
            ])
            .unwrap(),
            ReassignAction::Execute {
                file: "r".into(),
                additional: false,
                throttle: Some(50_000_000),
            }
        );
        assert_eq!(
            err(&[
                "--execute",
                "--reassignment-json-file",
                "r",
                "--throttle",
                "lots",
            ]),
            "--throttle must be a number of bytes per second, got \"lots\""
        );
        assert_eq!(
            err(&[
                "--verify",
                "--reassignment-json-file",
                "r",
                "--throttle",
                "1"
            ]),
            "Option \"--throttle\" can't be used with action \"--verify\""
        );
        let dirs = err(&[
            "--execute",
            "--reassignment-json-file",
            "r",
            "--replica-alter-log-dirs-throttle",
            "1",
        ]);
        assert!(
            dirs.starts_with("--replica-alter-log-dirs-throttle is not supported"),
            "{dirs}"
        );
    }

    fn ongoing(replicas: &[i32], adding: &[i32], removing: &[i32]) -> OngoingReassignment {
        OngoingReassignment {
            replicas: replicas.to_vec(),
            adding_replicas: adding.to_vec(),
            removing_replicas: removing.to_vec(),
        }
    }

    fn meta(partition: i32, leader: i32, replicas: &[i32], isr: &[i32]) -> PartitionMetadata {
        PartitionMetadata {
            partition,
            leader: Some(leader),
            leader_epoch: 1,
            replicas: replicas.to_vec(),
            isr: isr.to_vec(),
            offline_replicas: vec![],
            error: None,
        }
    }

    #[test]
    fn verify_reports_each_partition_as_kafka_does_with_progress() {
        let plan: Assignment = [
            (tp("tp_re_01", 0), vec![0]),
            (tp("tp_re_01", 3), vec![1]),
            (tp("tp_re_01", 4), vec![1]),
            (tp("tp_re_02", 0), vec![0, 1]),
            (tp("gone", 0), vec![1]),
        ]
        .into_iter()
        .collect();
        let active: BTreeMap<_, _> = [(tp("tp_re_01", 3), ongoing(&[1, 0], &[1], &[0]))]
            .into_iter()
            .collect();
        let current: BTreeMap<_, _> = [
            (tp("tp_re_01", 0), meta(0, 0, &[0], &[0])),
            (tp("tp_re_01", 3), meta(3, 0, &[1, 0], &[0])),
            (tp("tp_re_01", 4), meta(4, 1, &[1], &[1])),
            (tp("tp_re_02", 0), meta(0, 0, &[0], &[0])),
        ]
        .into_iter()
        .collect();
        let states = partition_states(&plan, &active, &current);
        assert_eq!(states[&tp("tp_re_01", 0)], PartitionState::Complete);
        assert_eq!(states[&tp("gone", 0)], PartitionState::Missing);
        assert_eq!(
            format_verify(&states),
            "Status of partition reassignment:\n\
             There is no active reassignment of partition gone-0, and the partition does not exist (UNKNOWN_TOPIC_OR_PARTITION).\n\
             Reassignment of partition tp_re_01-0 is completed.\n\
             Reassignment of partition tp_re_01-3 is still in progress.\n  \
             tp_re_01-3: target replicas 1; in sync: none; catching up: 1; removing: 0; leader: 0\n\
             Reassignment of partition tp_re_01-4 is completed.\n\
             There is no active reassignment of partition tp_re_02-0, but replica set is 0 rather than 0,1.\n"
        );
        // Replica order matters, as in Kafka: 1,0 is not 0,1 (the preferred leader differs).
        let plan: Assignment = [(tp("t", 0), vec![1, 0])].into_iter().collect();
        let current = [(tp("t", 0), meta(0, 0, &[0, 1], &[0, 1]))]
            .into_iter()
            .collect();
        assert!(matches!(
            partition_states(&plan, &BTreeMap::new(), &current)[&tp("t", 0)],
            PartitionState::Differs { .. }
        ));
    }

    #[test]
    fn list_prints_kafkas_lines() {
        assert_eq!(
            format_list(&BTreeMap::new()),
            "No partition reassignments found.\n"
        );
        let active: BTreeMap<_, _> = [
            (tp("t", 1), ongoing(&[1, 2, 0], &[2], &[0])),
            (tp("t", 0), ongoing(&[0, 1], &[1], &[])),
            (tp("a", 5), ongoing(&[2], &[], &[0])),
        ]
        .into_iter()
        .collect();
        assert_eq!(
            format_list(&active),
            "Current partition reassignments:\n\
             a-5: replicas: 2. removing: 0.\n\
             t-0: replicas: 0,1. adding: 1.\n\
             t-1: replicas: 1,2,0. adding: 2. removing: 0.\n"
        );
    }

    #[test]
    fn execute_prints_the_rollback_and_the_started_partitions() {
        let current: Assignment = [(tp("tp_re_02", 0), vec![0]), (tp("tp_re_02", 2), vec![1])]
            .into_iter()
            .collect();
        assert_eq!(
            format_rollback(&current),
            "Current partition replica assignment\n\n\
             {\"version\":1,\"partitions\":[{\"topic\":\"tp_re_02\",\"partition\":0,\"replicas\":[0],\"log_dirs\":[\"any\"]},{\"topic\":\"tp_re_02\",\"partition\":2,\"replicas\":[1],\"log_dirs\":[\"any\"]}]}\n\n\
             Save this to use as the --reassignment-json-file option during rollback\n"
        );
        assert_eq!(
            reassignments_for(&[tp("t", 0), tp("t", 1)]),
            "partition reassignments for t-0,t-1"
        );
        assert_eq!(
            reassignments_for(&[tp("t", 3)]),
            "partition reassignment for t-3"
        );
    }

    #[test]
    fn failures_name_the_kafka_error() {
        use gregor_client::KafkaError;
        let results = vec![
            (tp("t", 1), Ok(())),
            (
                tp("t", 0),
                Err(KafkaError::new(
                    KafkaCode(39),
                    Some("Replica 9 is not a registered broker.".into()),
                )),
            ),
        ];
        assert_eq!(
            failures(results),
            vec!["t-0: INVALID_REPLICA_ASSIGNMENT (39): Replica 9 is not a registered broker."]
        );
    }

    #[test]
    fn cancel_and_start_lines_are_kafkas() {
        assert_eq!(
            cancelled_line(&[tp("held", 0)]),
            "Successfully cancelled partition reassignment for: held-0"
        );
        assert_eq!(
            cancelled_line(&[tp("a", 0), tp("a", 1)]),
            "Successfully cancelled partition reassignments for: a-0,a-1"
        );
        assert_eq!(
            reassignments_for(&[tp("a", 0), tp("a", 1)]),
            "partition reassignments for a-0,a-1"
        );
    }
}
