//! `gregor groups`: what `kafka-consumer-groups.sh` does for consumer groups of both protocols
//! (classic and KIP-848), with its options and table formats (`--describe --members --verbose`
//! of a classic group as in seed 004; a consumer group's epochs and target assignments and
//! `--list --type` as Kafka 4's tool prints them; `--delete-offsets` with OffsetDelete).

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail, Result};
use clap::ArgGroup;
use gregor_client::admin::groups::is_missing_group;
use gregor_client::admin::groups::GroupType;
use gregor_client::admin::{GroupDescription, GroupListing, IsolationLevel, OffsetSpec};
use gregor_client::{Admin, TopicPartition};

use super::common::{pad, width, ConnectionArgs};
use super::datetime::{parse_datetime, parse_duration};
use super::reset::{
    format_reset_csv, format_reset_plan, parse_reset_csv, parse_topic_arg, plan_reset, ResetFile,
    ResetInputs, ResetSpec, TopicScope,
};
pub use consumer_view::assignment_text;
use consumer_view::{format_group_table, format_state_verbose, member_epoch_columns, parse_types};
use delete_offsets::delete_offsets;

/// List, describe, reset or delete the offsets of, or delete consumer groups.
#[derive(Debug, Clone, clap::Args)]
#[command(group(
    ArgGroup::new("action")
        .required(true)
        .multiple(false)
        .args(["list", "describe", "reset_offsets", "delete", "delete_offsets"])
))]
#[command(group(
    ArgGroup::new("reset_spec")
        .multiple(false)
        .args(["to_earliest", "to_latest", "to_current", "to_offset", "shift_by", "to_datetime", "by_duration", "from_file"])
))]
pub struct GroupsArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// List all consumer groups.
    #[arg(long)]
    pub list: bool,
    /// Describe groups: offsets and lag (default), --members or --state.
    #[arg(long)]
    pub describe: bool,
    /// Reset a group's committed offsets (the group must have no active members).
    #[arg(long)]
    pub reset_offsets: bool,
    /// Delete groups (they must have no active members).
    #[arg(long)]
    pub delete: bool,
    /// Delete one group's committed offsets of the --topic partitions (OffsetDelete); refused
    /// for topics the group's members are subscribed to.
    #[arg(long)]
    pub delete_offsets: bool,
    /// The group (repeatable).
    #[arg(long)]
    pub group: Vec<String>,
    /// Every group.
    #[arg(long)]
    pub all_groups: bool,
    /// With --describe: the members and their partition counts.
    #[arg(long)]
    pub members: bool,
    /// With --describe --members: each member's partitions too (and a consumer group's member
    /// epochs and target assignments). With --describe --state: the group and target
    /// assignment epochs.
    #[arg(long)]
    pub verbose: bool,
    /// With --describe: offsets and lag per partition (the default view).
    #[arg(long)]
    pub offsets: bool,
    /// With --describe: the group's coordinator, assignor, state and size. With --list: a
    /// STATE column, optionally only the given states (comma-separated).
    #[arg(long, num_args = 0..=1, default_missing_value = "", value_name = "STATES")]
    pub state: Option<String>,
    /// With --list: a TYPE column (classic or consumer), optionally only the given types
    /// (comma-separated).
    #[arg(long = "type", num_args = 0..=1, default_missing_value = "", value_name = "TYPES")]
    pub group_type: Option<String>,
    /// With --reset-offsets or --delete-offsets: a topic, or topic:partition,partition
    /// (repeatable).
    #[arg(long)]
    pub topic: Vec<String>,
    /// With --reset-offsets: every topic the group has committed offsets for.
    #[arg(long)]
    pub all_topics: bool,
    /// Reset to the log start offsets.
    #[arg(long)]
    pub to_earliest: bool,
    /// Reset to the log end offsets.
    #[arg(long)]
    pub to_latest: bool,
    /// Reset to the committed offsets (log end where none is committed).
    #[arg(long)]
    pub to_current: bool,
    /// Reset to this offset (kept within each partition's log).
    #[arg(long, allow_negative_numbers = true)]
    pub to_offset: Option<i64>,
    /// Move the committed offsets by N (negative: back).
    #[arg(long, allow_negative_numbers = true, value_name = "N")]
    pub shift_by: Option<i64>,
    /// Reset to the first offset at or after YYYY-MM-DDTHH:mm:SS.sss[zone] (UTC without a
    /// zone).
    #[arg(long, value_name = "DATETIME")]
    pub to_datetime: Option<String>,
    /// Reset to the first offset at or after now minus a duration, PnDTnHnMnS (e.g. PT30M).
    #[arg(long, value_name = "DURATION")]
    pub by_duration: Option<String>,
    /// Reset to the offsets of a CSV file as --export prints it: topic,partition,offset lines
    /// (one --group) or group,topic,partition,offset lines; the partitions come from the file.
    #[arg(long, value_name = "FILE")]
    pub from_file: Option<std::path::PathBuf>,
    /// Print the plan as CSV (topic,partition,offset; group first with several groups) instead
    /// of the table, for --from-file.
    #[arg(long)]
    pub export: bool,
    /// Show the new offsets without committing them (the default).
    #[arg(long, conflicts_with = "execute")]
    pub dry_run: bool,
    /// Commit the new offsets.
    #[arg(long)]
    pub execute: bool,
}

/// Which groups a command applies to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum GroupSelection {
    All,
    Named(Vec<String>),
}

/// The `--describe` views.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DescribeView {
    Offsets,
    Members { verbose: bool },
    State { verbose: bool },
}

/// A validated `gregor groups` invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum GroupsAction {
    /// `states`, `types`: `Some` prints a STATE or TYPE column, filtered when non-empty; with
    /// neither, ids only.
    List {
        states: Option<Vec<String>>,
        types: Option<Vec<String>>,
    },
    Describe {
        groups: GroupSelection,
        view: DescribeView,
    },
    Reset {
        groups: GroupSelection,
        /// `None` for --all-topics (and --from-file).
        topics: Option<Vec<TopicScope>>,
        spec: ResetSpec,
        execute: bool,
        /// `--from-file`: the CSV plan to read.
        from_file: Option<std::path::PathBuf>,
        /// `--export`: CSV out instead of the table.
        export: bool,
    },
    Delete {
        groups: GroupSelection,
    },
    /// `--delete-offsets`: `topics` are the `--topic` scopes (a topic alone: all its
    /// partitions).
    DeleteOffsets {
        group: String,
        topics: Vec<TopicScope>,
    },
}

/// Kafka's consumer group states, for `--list --state` filters.
const STATES: [&str; 7] = [
    "PreparingRebalance",
    "CompletingRebalance",
    "Stable",
    "Dead",
    "Empty",
    "Assigning",
    "Reconciling",
];

/// Parses a `--state` filter (case-insensitive, comma-separated) into Kafka's spelling.
pub fn parse_states(text: &str) -> Result<Vec<String>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            STATES
                .iter()
                .find(|k| k.eq_ignore_ascii_case(s))
                .map(|k| k.to_string())
                .ok_or_else(|| {
                    anyhow!(
                        "Invalid state list '{text}'. Valid states are: {}",
                        STATES.join(", ")
                    )
                })
        })
        .collect()
}

impl GroupsArgs {
    fn selection(&self, action: &str) -> Result<GroupSelection> {
        match (self.all_groups, self.group.is_empty()) {
            (true, true) => Ok(GroupSelection::All),
            (true, false) => bail!("--group cannot be used with --all-groups"),
            (false, true) => bail!("{action} needs --group or --all-groups"),
            (false, false) => Ok(GroupSelection::Named(self.group.clone())),
        }
    }

    /// Checks the options the way kafka-consumer-groups.sh does and says what to do.
    pub fn action(&self) -> Result<GroupsAction> {
        let reset_options = self.to_earliest
            || self.to_latest
            || self.to_current
            || self.to_offset.is_some()
            || self.shift_by.is_some()
            || self.to_datetime.is_some()
            || self.by_duration.is_some()
            || self.from_file.is_some()
            || self.export
            || self.dry_run
            || self.execute
            || self.all_topics;
        if reset_options && !self.reset_offsets {
            bail!("--all-topics, --to-*, --shift-by, --by-duration, --from-file, --export, --dry-run and --execute can only be used with --reset-offsets");
        }
        let topic_allowed = self.reset_offsets || self.delete_offsets;
        if !self.topic.is_empty() && !topic_allowed {
            bail!("--topic can only be used with --reset-offsets or --delete-offsets");
        }
        if (self.members || self.offsets || self.verbose) && !self.describe {
            bail!("--members, --offsets and --verbose can only be used with --describe");
        }
        if self.state.is_some() && !(self.describe || self.list) {
            bail!("--state can only be used with --describe or --list");
        }
        if self.group_type.is_some() && !self.list {
            bail!("--type can only be used with --list");
        }
        if self.list {
            if self.all_groups || !self.group.is_empty() {
                bail!("--list takes no --group");
            }
            return Ok(GroupsAction::List {
                states: self.state.as_deref().map(parse_states).transpose()?,
                types: self.group_type.as_deref().map(parse_types).transpose()?,
            });
        }
        if self.describe {
            return self.describe_action();
        }
        if self.reset_offsets {
            return self.reset_action();
        }
        if self.delete_offsets {
            return self.delete_offsets_action();
        }
        Ok(GroupsAction::Delete {
            groups: self.selection("--delete")?,
        })
    }

    /// `--describe` and its view.
    fn describe_action(&self) -> Result<GroupsAction> {
        let views = [self.members, self.offsets, self.state.is_some()];
        if views.iter().filter(|v| **v).count() > 1 {
            bail!("--members, --offsets and --state cannot be combined");
        }
        if self.verbose && !(self.members || self.state.is_some()) {
            bail!("--verbose needs --members or --state");
        }
        if self.state.as_deref().is_some_and(|s| !s.is_empty()) {
            bail!("--describe --state takes no value");
        }
        let view = if self.members {
            DescribeView::Members {
                verbose: self.verbose,
            }
        } else if self.state.is_some() {
            DescribeView::State {
                verbose: self.verbose,
            }
        } else {
            DescribeView::Offsets
        };
        Ok(GroupsAction::Describe {
            groups: self.selection("--describe")?,
            view,
        })
    }

    /// `--delete-offsets`: exactly one group, and the partitions to clear.
    fn delete_offsets_action(&self) -> Result<GroupsAction> {
        let group = match (self.all_groups, self.group.as_slice()) {
            (false, [g]) => g.clone(),
            _ => bail!("--delete-offsets takes exactly one --group (and no --all-groups)"),
        };
        if self.topic.is_empty() {
            bail!("--delete-offsets needs --topic T or --topic T:P,P (repeatable)");
        }
        let topics = self
            .topic
            .iter()
            .map(|t| parse_topic_arg(t))
            .collect::<Result<Vec<_>>>()?;
        Ok(GroupsAction::DeleteOffsets { group, topics })
    }

    /// `--reset-offsets`, its spec and scope.
    fn reset_action(&self) -> Result<GroupsAction> {
        let spec = if self.to_earliest {
            ResetSpec::ToEarliest
        } else if self.to_latest {
            ResetSpec::ToLatest
        } else if self.to_current {
            ResetSpec::ToCurrent
        } else if let Some(o) = self.to_offset {
            ResetSpec::ToOffset(o)
        } else if let Some(n) = self.shift_by {
            ResetSpec::ShiftBy(n)
        } else if let Some(dt) = &self.to_datetime {
            ResetSpec::ToDatetime(parse_datetime(dt)?)
        } else if let Some(d) = &self.by_duration {
            ResetSpec::ToDatetime(crate::wall_clock::now_ms().saturating_sub(parse_duration(d)?))
        } else if self.from_file.is_some() {
            ResetSpec::FromFile
        } else {
            bail!("--reset-offsets needs one of --to-earliest, --to-latest, --to-current, --to-offset, --shift-by, --to-datetime, --by-duration, --from-file");
        };
        let topics = match (self.all_topics, self.topic.is_empty()) {
            (false, true) if spec == ResetSpec::FromFile => None,
            _ if spec == ResetSpec::FromFile => {
                bail!(
                    "--from-file takes the partitions from the file: drop --topic and --all-topics"
                )
            }
            (true, true) => None,
            (true, false) => bail!("--topic cannot be used with --all-topics"),
            (false, true) => {
                bail!("One of the reset scopes should be defined: --all-topics, --topic.")
            }
            (false, false) => Some(
                self.topic
                    .iter()
                    .map(|t| parse_topic_arg(t))
                    .collect::<Result<Vec<_>>>()?,
            ),
        };
        Ok(GroupsAction::Reset {
            groups: self.selection("--reset-offsets")?,
            topics,
            spec,
            execute: self.execute,
            from_file: self.from_file.clone(),
            export: self.export,
        })
    }
}

/// One row of `--describe` (offsets view); `None` prints as `-`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetRow {
    pub group: String,
    pub topic: Option<String>,
    pub partition: Option<i32>,
    pub current_offset: Option<i64>,
    pub log_end_offset: Option<i64>,
    pub lag: Option<i64>,
    pub consumer_id: Option<String>,
    pub host: Option<String>,
    pub client_id: Option<String>,
}

fn dash<T: ToString>(v: &Option<T>) -> String {
    v.as_ref().map_or("-".to_string(), T::to_string)
}

/// Rows of the offsets view: members with partitions first (most partitions first), then the
/// partitions with committed offsets that no member holds.
pub fn offset_rows(
    group: &GroupDescription,
    committed: &BTreeMap<TopicPartition, i64>,
    log_end: &BTreeMap<TopicPartition, i64>,
) -> Vec<OffsetRow> {
    let row = |tp: &TopicPartition, member: Option<(&str, &str, &str)>| {
        let current = committed.get(tp).copied();
        let end = log_end.get(tp).copied();
        OffsetRow {
            group: group.group_id.clone(),
            topic: Some(tp.topic.clone()),
            partition: Some(tp.partition),
            current_offset: current,
            log_end_offset: end,
            lag: match (current, end) {
                (Some(c), Some(e)) if c >= 0 => Some(e - c),
                _ => None,
            },
            consumer_id: Some(member.map_or("-", |m| m.0).to_string()),
            host: Some(member.map_or("-", |m| m.1).to_string()),
            client_id: Some(member.map_or("-", |m| m.2).to_string()),
        }
    };
    let mut members: Vec<_> = group
        .members
        .iter()
        .filter(|m| !m.assignment.is_empty())
        .collect();
    members.sort_by_key(|m| std::cmp::Reverse(m.assignment.len()));
    let mut rows = Vec::new();
    let mut assigned = BTreeSet::new();
    for m in members {
        let mut partitions = m.assignment.clone();
        partitions.sort();
        for tp in &partitions {
            assigned.insert(tp.clone());
            rows.push(row(tp, Some((&m.member_id, &m.client_host, &m.client_id))));
        }
    }
    for tp in committed.keys().filter(|tp| !assigned.contains(*tp)) {
        rows.push(row(tp, None));
    }
    rows
}

/// The offsets view as kafka-consumer-groups.sh prints it.
pub fn format_offset_rows(rows: &[OffsetRow]) -> String {
    let g = width(15, rows.iter().map(|r| r.group.as_str()));
    let t = width(15, rows.iter().map(|r| r.topic.as_deref().unwrap_or("-")));
    let c = width(
        15,
        rows.iter().map(|r| r.consumer_id.as_deref().unwrap_or("-")),
    );
    let h = width(15, rows.iter().map(|r| r.host.as_deref().unwrap_or("-")));
    let line = |cols: [&str; 9]| {
        format!(
            "\n{} {} {} {} {} {} {} {} {}",
            pad(cols[0], g),
            pad(cols[1], t),
            pad(cols[2], 10),
            pad(cols[3], 15),
            pad(cols[4], 15),
            pad(cols[5], 15),
            pad(cols[6], c),
            pad(cols[7], h),
            cols[8]
        )
    };
    let mut out = line([
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    for r in rows {
        out.push_str(&line([
            &r.group,
            &dash(&r.topic),
            &dash(&r.partition),
            &dash(&r.current_offset),
            &dash(&r.log_end_offset),
            &dash(&r.lag),
            &dash(&r.consumer_id),
            &dash(&r.host),
            &dash(&r.client_id),
        ]));
    }
    out.push('\n');
    out
}

/// The members view as kafka-consumer-groups.sh prints it (seed 004).
pub fn format_members(group: &GroupDescription, verbose: bool) -> String {
    let members = &group.members;
    let with_instance_ids = members.iter().any(|m| {
        m.group_instance_id
            .as_deref()
            .is_some_and(|i| !i.is_empty())
    });
    let g = width(
        15,
        std::iter::once(group.group_id.as_str()).filter(|_| !members.is_empty()),
    );
    let c = width(15, members.iter().map(|m| m.member_id.as_str()));
    let i = width(
        17,
        members
            .iter()
            .map(|m| m.group_instance_id.as_deref().unwrap_or("")),
    );
    let h = width(15, members.iter().map(|m| m.client_host.as_str()));
    let l = width(15, members.iter().map(|m| m.client_id.as_str()));
    let line = |group: &str, member: &str, instance: &str, host: &str, client: &str, n: &str| {
        if with_instance_ids {
            format!(
                "{} {} {} {} {} {} ",
                pad(group, g),
                pad(member, c),
                pad(instance, i),
                pad(host, h),
                pad(client, l),
                pad(n, 15)
            )
        } else {
            format!(
                "{} {} {} {} {} ",
                pad(group, g),
                pad(member, c),
                pad(host, h),
                pad(client, l),
                pad(n, 15)
            )
        }
    };
    let (tail_header, tails) = member_tails(group, verbose);
    let mut out = String::from("\n");
    out.push_str(&line(
        "GROUP",
        "CONSUMER-ID",
        "GROUP-INSTANCE-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
    ));
    out.push_str(&tail_header);
    out.push('\n');
    for (m, tail) in members.iter().zip(&tails) {
        out.push_str(&line(
            &group.group_id,
            &m.member_id,
            m.group_instance_id.as_deref().unwrap_or(""),
            &m.client_host,
            &m.client_id,
            &m.assignment.len().to_string(),
        ));
        out.push_str(tail);
        out.push('\n');
    }
    out
}

/// What `--verbose` adds after `#PARTITIONS`: a classic group's assignments, or a consumer
/// group's epochs with its current and target assignments; the header's and each member's.
fn member_tails(group: &GroupDescription, verbose: bool) -> (String, Vec<String>) {
    match (verbose, group.group_type) {
        (false, _) => (String::new(), vec![String::new(); group.members.len()]),
        (true, GroupType::Consumer) => member_epoch_columns(group),
        (true, GroupType::Classic) => (
            "CURRENT-ASSIGNMENT".to_string(),
            group
                .members
                .iter()
                .map(|m| assignment_text(&m.assignment))
                .collect(),
        ),
    }
}

/// The state view as kafka-consumer-groups.sh prints it.
pub fn format_state(group: &GroupDescription) -> String {
    let coordinator = format!(
        "{}:{}  ({})",
        group.coordinator.host, group.coordinator.port, group.coordinator.id
    );
    let first = width(25, [coordinator.as_str()]);
    let line = |cols: [&str; 5]| {
        format!(
            "\n{} {} {} {} {}",
            pad(cols[0], first),
            pad(cols[1], 25),
            pad(cols[2], 20),
            pad(cols[3], 15),
            cols[4]
        )
    };
    let mut out = line([
        "GROUP",
        "COORDINATOR (ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "#MEMBERS",
    ]);
    out.push_str(&line([
        &group.group_id,
        &coordinator,
        &group.protocol,
        &group.state,
        &group.members.len().to_string(),
    ]));
    out.push('\n');
    out
}

/// What Kafka prints to standard error about a group's state before its tables.
pub fn state_notice(group: &GroupDescription) -> Option<String> {
    match group.state.as_str() {
        "Empty" => Some(format!(
            "\nConsumer group '{}' has no active members.",
            group.group_id
        )),
        "PreparingRebalance" | "CompletingRebalance" | "Assigning" | "Reconciling" => {
            Some(format!(
                "\nWarning: Consumer group '{}' is rebalancing.",
                group.group_id
            ))
        }
        _ => None,
    }
}

async fn selected_groups(admin: &Admin, selection: &GroupSelection) -> Result<Vec<String>> {
    Ok(match selection {
        GroupSelection::Named(g) => g.clone(),
        GroupSelection::All => consumer_groups(admin, &[], &[])
            .await?
            .into_iter()
            .map(|g| g.group_id)
            .collect(),
    })
}

/// Consumer groups of either protocol (protocol type `consumer`, or empty for groups that
/// only commit offsets), sorted, with their states and types where the broker reports them.
async fn consumer_groups(
    admin: &Admin,
    states: &[String],
    types: &[String],
) -> Result<Vec<GroupListing>> {
    Ok(admin
        .list_groups(states, types)
        .await?
        .into_iter()
        .filter(|g| g.protocol_type.is_empty() || g.protocol_type == "consumer")
        .collect())
}

async fn describe_existing(admin: &Admin, group: &str) -> Result<GroupDescription> {
    let result = admin.describe_group(group).await;
    if is_missing_group(&result) {
        bail!("Consumer group '{group}' does not exist.");
    }
    Ok(result?)
}

/// Log end offsets of partitions; partitions whose lookup failed are left out.
async fn log_offsets(
    admin: &Admin,
    partitions: &[TopicPartition],
    spec: OffsetSpec,
) -> Result<BTreeMap<TopicPartition, i64>> {
    if partitions.is_empty() {
        return Ok(BTreeMap::new());
    }
    let asked: Vec<(TopicPartition, OffsetSpec)> =
        partitions.iter().map(|tp| (tp.clone(), spec)).collect();
    Ok(admin
        .list_offsets(&asked, IsolationLevel::ReadUncommitted)
        .await?
        .into_iter()
        .filter_map(|(tp, r)| r.ok().map(|o| (tp, o.offset)))
        .collect())
}

/// Runs `gregor groups`.
pub async fn run_groups(args: GroupsArgs) -> Result<()> {
    let action = args.action()?;
    let admin = args.connection.connect().await?;
    match action {
        GroupsAction::List {
            states: None,
            types: None,
        } => {
            for g in consumer_groups(&admin, &[], &[]).await? {
                println!("{}", g.group_id);
            }
        }
        GroupsAction::List { states, types } => {
            let groups = consumer_groups(
                &admin,
                states.as_deref().unwrap_or_default(),
                types.as_deref().unwrap_or_default(),
            )
            .await?;
            print!(
                "{}",
                format_group_table(&groups, types.is_some(), states.is_some())
            );
        }
        GroupsAction::Describe { groups, view } => describe_groups(&admin, &groups, view).await?,
        GroupsAction::Reset {
            groups,
            topics,
            spec,
            execute,
            from_file,
            export,
        } => {
            if !execute && !args.dry_run {
                eprintln!("WARN: No action will be performed as the --execute option is missing. Add --dry-run to keep this behaviour explicitly.");
            }
            let file = match &from_file {
                Some(path) => Some(read_reset_file(path, &groups)?),
                None => None,
            };
            let reset = Reset {
                topics: topics.as_deref(),
                spec,
                execute,
                file: file.as_ref(),
            };
            let names = selected_groups(&admin, &groups).await?;
            let mut plans = Vec::new();
            for name in &names {
                let plan = reset_group(&admin, name, &reset).await?;
                if !export {
                    print!("{}", format_reset_plan(name, &plan));
                }
                plans.push((name.clone(), plan));
            }
            if export {
                let one_group = matches!(&groups, GroupSelection::Named(g) if g.len() == 1);
                print!("{}", format_reset_csv(&plans, !one_group));
            }
        }
        GroupsAction::Delete { groups } => delete_groups(&admin, &groups).await?,
        GroupsAction::DeleteOffsets { group, topics } => {
            delete_offsets(&admin, &group, &topics).await?
        }
    }
    Ok(())
}

/// `--describe`: one view per group, in name order.
async fn describe_groups(admin: &Admin, groups: &GroupSelection, view: DescribeView) -> Result<()> {
    let mut names = selected_groups(admin, groups).await?;
    names.sort();
    let mut failed = Vec::new();
    for name in &names {
        match describe_view(admin, name, view).await {
            Ok(text) => print!("{text}"),
            // With several groups, report each failure and carry on with the rest.
            Err(e) if names.len() > 1 => {
                eprintln!("\nError: {e:#}");
                failed.push(name.clone());
            }
            Err(e) => return Err(e),
        }
    }
    if !failed.is_empty() {
        bail!("could not describe group(s): {}", failed.join(", "));
    }
    Ok(())
}

/// `--delete`, reported as kafka-consumer-groups.sh does.
async fn delete_groups(admin: &Admin, groups: &GroupSelection) -> Result<()> {
    let names = selected_groups(admin, groups).await?;
    let results = admin.delete_groups(&names).await;
    let (ok, failed): (Vec<_>, Vec<_>) = results.into_iter().partition(|(_, r)| r.is_ok());
    if failed.is_empty() {
        let ids: Vec<String> = ok.into_iter().map(|(g, _)| g).collect();
        println!(
            "Deletion of requested consumer groups ('{}') was successful.",
            ids.join("', '")
        );
        return Ok(());
    }
    println!("\nError: Deletion of some consumer groups failed:");
    for (g, r) in &failed {
        if let Err(e) = r {
            println!("* Group '{g}' could not be deleted due to: {e}");
        }
    }
    if !ok.is_empty() {
        let ids: Vec<String> = ok.into_iter().map(|(g, _)| g).collect();
        println!(
            "\nThese consumer groups were deleted successfully: '{}'",
            ids.join("', '")
        );
    }
    bail!(
        "{} of {} groups could not be deleted",
        failed.len(),
        names.len()
    );
}

async fn describe_view(admin: &Admin, name: &str, view: DescribeView) -> Result<String> {
    let group = describe_existing(admin, name).await?;
    if let Some(notice) = state_notice(&group) {
        eprintln!("{notice}");
    }
    Ok(match view {
        DescribeView::State { verbose: false } => format_state(&group),
        DescribeView::State { verbose: true } => format_state_verbose(&group),
        DescribeView::Members { verbose } => format_members(&group, verbose),
        DescribeView::Offsets => {
            let committed: BTreeMap<TopicPartition, i64> = admin
                .list_committed_offsets(name, None, false)
                .await?
                .into_iter()
                .map(|(tp, c)| (tp, c.offset))
                .collect();
            let mut partitions: BTreeSet<TopicPartition> = committed.keys().cloned().collect();
            partitions.extend(
                group
                    .members
                    .iter()
                    .flat_map(|m| m.assignment.iter().cloned()),
            );
            let partitions: Vec<TopicPartition> = partitions.into_iter().collect();
            let log_end = log_offsets(admin, &partitions, OffsetSpec::Latest).await?;
            let rows = offset_rows(&group, &committed, &log_end);
            if rows.is_empty() {
                String::new()
            } else {
                format_offset_rows(&rows)
            }
        }
    })
}

/// What `--reset-offsets` does to each group.
struct Reset<'a> {
    /// `None`: every partition with a committed offset (or the file's, with `file`).
    topics: Option<&'a [TopicScope]>,
    spec: ResetSpec,
    execute: bool,
    file: Option<&'a ResetFile>,
}

/// Reads a `--from-file` plan for the selected groups.
fn read_reset_file(path: &std::path::Path, groups: &GroupSelection) -> Result<ResetFile> {
    let text = std::fs::read_to_string(path)
        .map_err(|e| anyhow!("cannot read the reset plan {}: {e}", path.display()))?;
    let named = match groups {
        GroupSelection::Named(g) => g.as_slice(),
        GroupSelection::All => &[],
    };
    parse_reset_csv(&text, named).map_err(|e| anyhow!("{}: {e}", path.display()))
}

async fn reset_group(
    admin: &Admin,
    name: &str,
    reset: &Reset<'_>,
) -> Result<BTreeMap<TopicPartition, i64>> {
    let Reset {
        topics,
        spec,
        execute,
        file,
    } = *reset;
    let result = admin.describe_group(name).await;
    if !is_missing_group(&result) {
        let group = result?;
        if group.state != "Empty" {
            bail!(
                "Assignments can only be reset if the group '{name}' is inactive, but the current state is {}.",
                group.state
            );
        }
    }
    let committed: BTreeMap<TopicPartition, i64> = admin
        .list_committed_offsets(name, None, false)
        .await?
        .into_iter()
        .map(|(tp, c)| (tp, c.offset))
        .collect();
    let requested = match file.map(|f| f.get(name)) {
        None => BTreeMap::new(),
        Some(Some(offsets)) => offsets.clone(),
        Some(None) => {
            eprintln!("Error: No reset plan for group {name} found");
            return Ok(BTreeMap::new());
        }
    };
    let partitions: Vec<TopicPartition> = match topics {
        None if file.is_some() => requested.keys().cloned().collect(),
        None => committed.keys().cloned().collect(),
        Some(topics) => scope_partitions(admin, topics).await?,
    };
    let mut inputs = reset_inputs(admin, &partitions, spec, committed).await?;
    inputs.requested = requested;
    let plan = plan_reset(&partitions, spec, &inputs)?;
    for w in &plan.warnings {
        eprintln!("{w}");
    }
    if execute && !plan.offsets.is_empty() {
        for (tp, result) in admin.alter_committed_offsets(name, &plan.offsets).await? {
            if let Err(e) = result {
                bail!("committing the offset of {tp} for group '{name}': {e}");
            }
        }
    }
    Ok(plan.offsets)
}

/// The partitions of the `--topic` scopes: those listed, or every partition of a topic named
/// alone.
async fn scope_partitions(admin: &Admin, topics: &[TopicScope]) -> Result<Vec<TopicPartition>> {
    let mut out = Vec::new();
    let whole: Vec<String> = topics
        .iter()
        .filter(|(_, p)| p.is_none())
        .map(|(t, _)| t.clone())
        .collect();
    let described = if whole.is_empty() {
        Vec::new()
    } else {
        admin.describe_topics(&whole).await?
    };
    for (topic, parts) in topics {
        match parts {
            Some(ps) => out.extend(ps.iter().map(|p| TopicPartition::new(topic.clone(), *p))),
            None => {
                let t = described
                    .iter()
                    .find(|t| &t.name == topic)
                    .ok_or_else(|| anyhow!("topic '{topic}' was not described"))?;
                out.extend(
                    t.partitions
                        .iter()
                        .map(|p| TopicPartition::new(topic.clone(), p.partition)),
                );
            }
        }
    }
    Ok(out)
}

/// The log offsets `spec` needs, with the group's committed offsets.
async fn reset_inputs(
    admin: &Admin,
    partitions: &[TopicPartition],
    spec: ResetSpec,
    committed: BTreeMap<TopicPartition, i64>,
) -> Result<ResetInputs> {
    let mut inputs = ResetInputs {
        committed,
        ..Default::default()
    };
    if spec.needs_log_start() {
        inputs.log_start = log_offsets(admin, partitions, OffsetSpec::Earliest).await?;
    }
    if spec.needs_log_end() {
        inputs.log_end = log_offsets(admin, partitions, OffsetSpec::Latest).await?;
    }
    if let ResetSpec::ToDatetime(ts) = spec {
        inputs.by_timestamp = log_offsets(admin, partitions, OffsetSpec::Timestamp(ts)).await?;
    }
    Ok(inputs)
}

mod consumer_view;
mod delete_offsets;

#[cfg(test)]
mod tests;
