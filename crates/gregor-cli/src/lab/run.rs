//! `gregor lab run`: the live twin of `gregor lab`. The same membership changes, played by real
//! consumers against a broker: one group per strategy, members started, stalled and closed on
//! the scenario's clock, every rebalance callback recorded (seed 004's timelines) and folded
//! into seed 002's table (assignment after each change, revoked sets, partitions moved, time
//! from a member's start to owning partitions).
//!
//! The shell (`run`) drives the consumers; `steps` and `analyze` are pure, so what the table
//! says can be tested from recorded events.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use gregor_client::admin::{CreateTopicsOptions, NewTopic};
use gregor_client::consumer::RebalanceKind;
use gregor_client::{Admin, ClientConfig, Consumer, ConsumerConfig, KafkaCode, RecordingListener};
use serde::{Deserialize, Serialize};
use tokio::task::JoinSet;
use tokio::time::Instant;

use super::render::compact;

/// Live scenarios shipped with the binary.
pub const BUNDLED_LIVE: &[(&str, &str)] = &[
    (
        "seed-002",
        include_str!("../../scenarios/live-seed-002.json"),
    ),
    (
        "seed-004-join",
        include_str!("../../scenarios/live-seed-004-join.json"),
    ),
    (
        "seed-004-stall",
        include_str!("../../scenarios/live-seed-004-stall.json"),
    ),
];

/// A live scenario: one topic, members on a clock (milliseconds from the run's start, before
/// `--scale`), and the consumers' group timeouts.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveScenario {
    pub name: String,
    #[serde(default)]
    pub description: String,
    pub partitions: i32,
    pub session_timeout_ms: u64,
    pub heartbeat_interval_ms: u64,
    pub max_poll_interval_ms: u64,
    /// How long to keep watching after the last change.
    pub settle_ms: u64,
    pub members: Vec<LiveMember>,
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct LiveMember {
    pub id: String,
    pub start_ms: u64,
    /// The member closes (LeaveGroup) at this time.
    #[serde(default)]
    pub leave_ms: Option<u64>,
    /// The member stops calling `poll` (its heartbeats go on).
    #[serde(default)]
    pub stall: Option<Stall>,
}

#[derive(Debug, Clone, Copy, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Stall {
    pub at_ms: u64,
    pub for_ms: u64,
}

/// `gregor lab run` arguments.
#[derive(Debug, clap::Args)]
pub struct RunArgs {
    /// The broker(s) to run against: HOST:PORT[,HOST:PORT...].
    #[arg(long, alias = "bootstrap", value_name = "HOST:PORT")]
    pub bootstrap_server: String,
    /// A bundled live scenario (seed-002, seed-004-join, seed-004-stall) or a scenario file.
    #[arg(long, default_value = "seed-002")]
    pub scenario: String,
    /// Comma-separated strategies, one consumer group each (run side by side).
    #[arg(
        long,
        default_value = "range,roundrobin,sticky,cooperative-sticky",
        value_delimiter = ','
    )]
    pub strategies: Vec<String>,
    /// Multiplies every time of the scenario and every consumer timeout (0.1: ten times
    /// faster; the broker must then allow the shorter session timeouts).
    #[arg(long, default_value_t = 1.0)]
    pub scale: f64,
    /// One JSON document for scripts.
    #[arg(long)]
    pub json: bool,
    /// Keep the run's topic and consumer groups (by default they are deleted at the end).
    #[arg(long)]
    pub keep: bool,
}

/// Loads a bundled live scenario by name, or a scenario file, and checks it.
pub fn load_live(name_or_file: &str) -> Result<LiveScenario> {
    let text = match BUNDLED_LIVE.iter().find(|(n, _)| *n == name_or_file) {
        Some((_, text)) => text.to_string(),
        None => {
            let path = std::path::Path::new(name_or_file);
            if !path.is_file() {
                let names: Vec<&str> = BUNDLED_LIVE.iter().map(|(n, _)| *n).collect();
                bail!(
                    "no bundled live scenario or file named '{name_or_file}' (bundled: {})",
                    names.join(", ")
                );
            }
            std::fs::read_to_string(path).with_context(|| format!("reading {}", path.display()))?
        }
    };
    let scenario: LiveScenario = serde_json::from_str(&text)
        .with_context(|| format!("malformed live scenario {name_or_file}"))?;
    validate(&scenario)?;
    Ok(scenario)
}

fn validate(s: &LiveScenario) -> Result<()> {
    if s.partitions < 1 {
        bail!("scenario {}: partitions must be at least 1", s.name);
    }
    if s.members.is_empty() {
        bail!("scenario {}: no members", s.name);
    }
    if s.heartbeat_interval_ms == 0 || s.heartbeat_interval_ms >= s.session_timeout_ms {
        bail!(
            "scenario {}: heartbeat_interval_ms must be positive and below session_timeout_ms",
            s.name
        );
    }
    if s.max_poll_interval_ms == 0 {
        bail!("scenario {}: max_poll_interval_ms must be positive", s.name);
    }
    let mut seen = BTreeSet::new();
    for m in &s.members {
        if m.id.is_empty() || !seen.insert(&m.id) {
            bail!(
                "scenario {}: member ids must be non-empty and unique ('{}')",
                s.name,
                m.id
            );
        }
        if m.leave_ms.is_some_and(|l| l <= m.start_ms) {
            bail!(
                "scenario {}: member {} leaves before it starts",
                s.name,
                m.id
            );
        }
        if let Some(st) = m.stall {
            let end = st.at_ms + st.for_ms;
            if st.at_ms < m.start_ms || st.for_ms == 0 || m.leave_ms.is_some_and(|l| end > l) {
                bail!(
                    "scenario {}: member {}'s stall must lie between its start and its leave",
                    s.name,
                    m.id
                );
            }
        }
    }
    Ok(())
}

/// One change of the scenario: what happens at `at_ms` (scaled).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StepDef {
    pub at_ms: i64,
    pub label: String,
    /// Members whose time to own partitions counts from this step (started or resumed polling).
    pub starting: Vec<String>,
}

/// The scenario's changes in time order, scaled; changes at the same time form one step.
pub fn steps(s: &LiveScenario, scale: f64) -> Vec<StepDef> {
    let mut changes: Vec<(i64, String, Option<String>)> = Vec::new();
    let first = s.members.iter().map(|m| m.start_ms).min().unwrap_or(0);
    for m in &s.members {
        let verb = if m.start_ms == first {
            "starts"
        } else {
            "joins"
        };
        changes.push((
            scaled(m.start_ms, scale),
            format!("{} {verb}", m.id),
            Some(m.id.clone()),
        ));
        if let Some(st) = m.stall {
            changes.push((
                scaled(st.at_ms, scale),
                format!("{} stops polling", m.id),
                None,
            ));
            changes.push((
                scaled(st.at_ms + st.for_ms, scale),
                format!("{} polls again", m.id),
                Some(m.id.clone()),
            ));
        }
        if let Some(l) = m.leave_ms {
            changes.push((scaled(l, scale), format!("{} closes", m.id), None));
        }
    }
    changes.sort_by_key(|c| c.0);
    let mut out: Vec<StepDef> = Vec::new();
    for (at, label, starting) in changes {
        match out.last_mut() {
            Some(last) if last.at_ms == at => {
                last.label = format!("{}, {label}", last.label);
                last.starting.extend(starting);
            }
            _ => out.push(StepDef {
                at_ms: at,
                label,
                starting: starting.into_iter().collect(),
            }),
        }
    }
    out
}

fn scaled(ms: u64, scale: f64) -> i64 {
    (ms as f64 * scale).round() as i64
}

/// A point on the run's clock.
fn scaled_offset(ms: u64, scale: f64) -> Duration {
    Duration::from_millis(scaled(ms, scale).max(0) as u64)
}

/// A timeout: never zero.
fn scaled_duration(ms: u64, scale: f64) -> Duration {
    Duration::from_millis(scaled(ms, scale).max(1) as u64)
}

/// One line of a timeline: a rebalance callback, or a scenario action.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TimelineEntry {
    /// Milliseconds since the run started.
    pub at_ms: i64,
    pub member: String,
    /// ASSIGNED, REVOKED, LOST (callbacks) or START, STALL, RESUME, CLOSE (actions).
    pub event: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub partitions: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub generation: Option<i32>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LiveStep {
    pub label: String,
    pub at_ms: i64,
    /// Owners at the end of the step (just before the next change, or after the settle time).
    pub assignment: BTreeMap<String, Vec<String>>,
    pub sizes: BTreeMap<String, usize>,
    /// Partitions each member revoked (or lost) during the step.
    pub revoked: BTreeMap<String, Vec<String>>,
    /// Partitions whose owner changed from the previous step's end (unowned ones do not count).
    pub moved: usize,
    /// For members that started (or polled again) in this step: ms until they owned at least
    /// one partition; null if they never did within the step.
    pub time_to_own_ms: BTreeMap<String, Option<i64>>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LiveStrategy {
    pub strategy: String,
    pub group: String,
    pub timeline: Vec<TimelineEntry>,
    pub steps: Vec<LiveStep>,
}

#[derive(Debug, Clone, Serialize)]
pub struct LiveReport {
    pub scenario: String,
    pub description: String,
    pub topic: String,
    pub partitions: i32,
    pub scale: f64,
    pub strategies: Vec<LiveStrategy>,
    pub cleanup: Cleanup,
}

/// What became of the topic and groups a run created.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Cleanup {
    /// `--keep`: nothing was deleted.
    pub kept: bool,
    pub topic: String,
    /// The groups that existed at the end (a group no member joined is not listed).
    pub groups: Vec<String>,
    /// What could not be deleted (topic or group name) and why; the rest was.
    pub failures: BTreeMap<String, String>,
}

/// Folds the callbacks (`timeline`, sorted) into the per-step table. A partition's owner is the
/// last member it was assigned to, until that member revokes or loses it: a member removed for
/// not polling learns of its loss only later, but the group has moved on.
pub fn analyze(defs: &[StepDef], timeline: &[TimelineEntry], end_ms: i64) -> Vec<LiveStep> {
    let mut owner: BTreeMap<String, String> = BTreeMap::new();
    let mut before: BTreeMap<String, Vec<String>> = BTreeMap::new();
    let mut cursor = 0;
    let mut out = Vec::new();
    for (i, def) in defs.iter().enumerate() {
        let until = defs.get(i + 1).map(|d| d.at_ms).unwrap_or(end_ms);
        let mut revoked: BTreeMap<String, Vec<String>> = BTreeMap::new();
        let mut time_to_own: BTreeMap<String, Option<i64>> =
            def.starting.iter().map(|m| (m.clone(), None)).collect();
        while cursor < timeline.len() && timeline[cursor].at_ms < until {
            let e = &timeline[cursor];
            cursor += 1;
            let parts = e.partitions.as_deref().unwrap_or_default();
            match e.event.as_str() {
                "ASSIGNED" => {
                    for p in parts {
                        owner.insert(p.clone(), e.member.clone());
                    }
                    if let Some(t @ None) = time_to_own.get_mut(&e.member) {
                        if !parts.is_empty() && e.at_ms >= def.at_ms {
                            *t = Some(e.at_ms - def.at_ms);
                        }
                    }
                }
                "REVOKED" | "LOST" => {
                    for p in parts {
                        if owner.get(p) == Some(&e.member) {
                            owner.remove(p);
                        }
                    }
                    revoked
                        .entry(e.member.clone())
                        .or_default()
                        .extend(parts.iter().cloned());
                }
                _ => {}
            }
        }
        let mut assignment: BTreeMap<String, Vec<String>> = BTreeMap::new();
        for (p, m) in &owner {
            assignment.entry(m.clone()).or_default().push(p.clone());
        }
        for ps in assignment.values_mut() {
            ps.sort_by_key(|p| partition_key(p));
        }
        for ps in revoked.values_mut() {
            ps.sort_by_key(|p| partition_key(p));
        }
        out.push(LiveStep {
            label: def.label.clone(),
            at_ms: def.at_ms,
            moved: super::simulate::moved(&before, &assignment),
            sizes: assignment
                .iter()
                .map(|(m, ps)| (m.clone(), ps.len()))
                .collect(),
            assignment: assignment.clone(),
            revoked,
            time_to_own_ms: time_to_own,
        });
        before = assignment;
    }
    out
}

/// Sorts `topic-N` by topic, then numerically by N.
fn partition_key(p: &str) -> (String, i64) {
    match p.rsplit_once('-') {
        Some((t, n)) => (t.to_string(), n.parse().unwrap_or(-1)),
        None => (p.to_string(), -1),
    }
}

/// What one member task does, on the run's clock (already scaled).
struct Plan {
    name: String,
    start: Duration,
    leave: Option<Duration>,
    stall: Option<(Duration, Duration)>,
}

/// Runs the scenario against the broker, every strategy side by side, then deletes the run's
/// topic and groups unless `--keep` says otherwise (also when the run failed).
pub async fn run(args: &RunArgs, scenario: &LiveScenario) -> Result<LiveReport> {
    check_args(args)?;
    let client = lab_client(args, scenario)?;
    let admin = Admin::connect(client.clone())
        .await
        .with_context(|| format!("cannot reach {}", args.bootstrap_server))?;
    let stamp = crate::wall_clock::now_ms();
    let topic = format!("lab-{}-{stamp}", sanitize(&scenario.name));
    create_topic(&admin, &topic, scenario.partitions).await?;
    let played = play(args, scenario, client, stamp, topic.clone()).await;
    let groups: Vec<String> = args
        .strategies
        .iter()
        .map(|s| group_name(scenario, s, stamp))
        .collect();
    let cleanup = if args.keep {
        Cleanup {
            kept: true,
            topic,
            groups,
            failures: BTreeMap::new(),
        }
    } else {
        clean_up(&admin, topic, &groups).await
    };
    match played {
        Ok(mut report) => {
            report.cleanup = cleanup;
            Ok(report)
        }
        Err(e) => {
            eprint!("{}", cleanup_text(&cleanup));
            Err(e)
        }
    }
}

/// The scenario played on `topic`: members started, watched and closed; the report without
/// its cleanup.
async fn play(
    args: &RunArgs,
    scenario: &LiveScenario,
    client: ClientConfig,
    stamp: i64,
    topic: String,
) -> Result<LiveReport> {
    let scale = args.scale;
    let defs = steps(scenario, scale);
    let last = defs.last().map(|d| d.at_ms).unwrap_or(0);
    let end_ms = last + scaled(scenario.settle_ms, scale);
    let plans = plans(scenario, scale);
    let t0 = Instant::now();
    let launch = Launch {
        args,
        scenario,
        client,
        stamp,
        topic,
        t0,
        end: t0 + Duration::from_millis(end_ms.max(0) as u64),
        poll_timeout: scaled_duration(500, scale).max(Duration::from_millis(10)),
    };
    let (tasks, listeners) = launch.spawn_members(&plans)?;
    let finished = join_members(tasks).await?;
    // Read the callbacks before closing: closing is not part of the scenario.
    let mut strategies = Vec::new();
    for strategy in &args.strategies {
        let timeline = strategy_timeline(strategy, &plans, &listeners, t0.into_std());
        let steps = analyze(&defs, &timeline, end_ms);
        strategies.push(LiveStrategy {
            strategy: strategy.clone(),
            group: launch.group(strategy),
            timeline,
            steps,
        });
    }
    for c in finished {
        // Best effort: the run is over and the results are read. A member that fails to
        // leave keeps its group from being deleted, which the cleanup reports.
        let _ = tokio::time::timeout(Duration::from_secs(5), c.close()).await;
    }
    Ok(LiveReport {
        scenario: scenario.name.clone(),
        description: scenario.description.clone(),
        topic: launch.topic.clone(),
        partitions: scenario.partitions,
        scale,
        strategies,
        cleanup: Cleanup {
            kept: true,
            topic: launch.topic,
            groups: Vec::new(),
            failures: BTreeMap::new(),
        },
    })
}

/// Deletes the run's groups (those that exist) and then its topic.
async fn clean_up(admin: &Admin, topic: String, groups: &[String]) -> Cleanup {
    let mut cleanup = Cleanup {
        kept: false,
        topic,
        groups: Vec::new(),
        failures: BTreeMap::new(),
    };
    for (group, result) in admin.delete_groups(groups).await {
        match result {
            Ok(()) => cleanup.groups.push(group),
            // No member ever joined it: there is nothing to delete.
            Err(e) if e.kafka_code() == Some(KafkaCode::GROUP_ID_NOT_FOUND) => {}
            Err(e) => {
                cleanup.failures.insert(group.clone(), e.to_string());
                cleanup.groups.push(group);
            }
        }
    }
    let topics = [cleanup.topic.clone()];
    let failure = match admin.delete_topics(&topics, 30_000).await {
        Ok(results) => results
            .into_iter()
            .find_map(|(_, r)| r.err().map(|e| e.to_string())),
        Err(e) => Some(e.to_string()),
    };
    if let Some(reason) = failure {
        cleanup.failures.insert(cleanup.topic.clone(), reason);
    }
    cleanup
}

/// What the run did with its topic and groups, one line each way.
pub fn cleanup_text(c: &Cleanup) -> String {
    let names = |pick: &dyn Fn(&str) -> bool| -> String {
        let mut parts = Vec::new();
        if pick(&c.topic) {
            parts.push(format!("topic {}", c.topic));
        }
        let groups: Vec<&str> = c
            .groups
            .iter()
            .map(String::as_str)
            .filter(|g| pick(g))
            .collect();
        if !groups.is_empty() {
            parts.push(format!("groups {}", groups.join(", ")));
        }
        parts.join(" and ")
    };
    if c.kept {
        return format!("\nkept (--keep): {}\n", names(&|_| true));
    }
    let mut out = String::new();
    let removed = names(&|n| !c.failures.contains_key(n));
    if !removed.is_empty() {
        let _ = writeln!(out, "\nremoved {removed} (--keep keeps them)");
    }
    for (name, reason) in &c.failures {
        let how = if *name == c.topic {
            format!("gregor topics --delete --topic {name}")
        } else {
            format!("gregor groups --delete --group {name}")
        };
        let _ = writeln!(
            out,
            "could not remove {name}: {reason} (remove it with `{how}`)"
        );
    }
    out
}

/// `--scale` in (0, 100] and `--strategies` naming built-in strategies, each once.
fn check_args(args: &RunArgs) -> Result<()> {
    if !(args.scale.is_finite() && args.scale > 0.0 && args.scale <= 100.0) {
        bail!("--scale must be a number in (0, 100], got {}", args.scale);
    }
    if args.strategies.is_empty() {
        bail!("--strategies must name at least one strategy");
    }
    let mut seen = BTreeSet::new();
    for s in &args.strategies {
        gregor_assign::builtin(s)?;
        if !seen.insert(s) {
            bail!("--strategies names '{s}' twice");
        }
    }
    Ok(())
}

/// The client settings every member and the lab's admin share.
fn lab_client(args: &RunArgs, scenario: &LiveScenario) -> Result<ClientConfig> {
    let mut client = ClientConfig::new(&args.bootstrap_server)
        .map_err(|e| anyhow::anyhow!("--bootstrap-server {}: {e}", args.bootstrap_server))?;
    client.client_id = "gregor-lab".into();
    client.connect_timeout = Duration::from_secs(5);
    client.api_timeout = Duration::from_secs(20);
    // JoinGroup may wait up to the rebalance timeout (max.poll.interval.ms) for the others.
    client.request_timeout =
        scaled_duration(scenario.max_poll_interval_ms, args.scale) + Duration::from_secs(10);
    Ok(client)
}

/// Creates the run's own topic (replication factor 1).
async fn create_topic(admin: &Admin, topic: &str, partitions: i32) -> Result<()> {
    let created = admin
        .create_topics(
            vec![NewTopic {
                name: topic.to_string(),
                num_partitions: Some(partitions),
                replication_factor: Some(1),
                ..Default::default()
            }],
            CreateTopicsOptions::default(),
        )
        .await
        .with_context(|| format!("creating topic {topic}"))?;
    for (name, result) in created {
        if let Err(e) = result {
            bail!("creating topic {name}: {e}");
        }
    }
    Ok(())
}

/// Each member's plan on the run's clock.
fn plans(scenario: &LiveScenario, scale: f64) -> Vec<Plan> {
    scenario
        .members
        .iter()
        .map(|m| Plan {
            name: m.id.clone(),
            start: scaled_offset(m.start_ms, scale),
            leave: m.leave_ms.map(|l| scaled_offset(l, scale)),
            stall: m.stall.map(|s| {
                (
                    scaled_offset(s.at_ms, scale),
                    scaled_offset(s.at_ms + s.for_ms, scale),
                )
            }),
        })
        .collect()
}

/// The member tasks of a run and each member's recorded callbacks, by (strategy, member).
type MemberTasks = JoinSet<Result<Option<Consumer>>>;
type Listeners = Vec<(String, String, RecordingListener)>;

/// The group of one strategy's members in the run started at `stamp`.
fn group_name(scenario: &LiveScenario, strategy: &str, stamp: i64) -> String {
    format!("lab-{}-{strategy}-{stamp}", sanitize(&scenario.name))
}

/// What every member task of a run shares.
struct Launch<'a> {
    args: &'a RunArgs,
    scenario: &'a LiveScenario,
    client: ClientConfig,
    stamp: i64,
    topic: String,
    t0: Instant,
    end: Instant,
    poll_timeout: Duration,
}

impl Launch<'_> {
    /// The group of one strategy's members.
    fn group(&self, strategy: &str) -> String {
        group_name(self.scenario, strategy, self.stamp)
    }

    /// Starts every member of every strategy, each with a recording listener.
    fn spawn_members(&self, plans: &[Plan]) -> Result<(MemberTasks, Listeners)> {
        let mut tasks: MemberTasks = JoinSet::new();
        let mut listeners: Listeners = Vec::new();
        for strategy in &self.args.strategies {
            let group = self.group(strategy);
            for plan in plans {
                let config = self.member_config(&group, &plan.name, strategy)?;
                let listener = RecordingListener::new();
                listeners.push((strategy.clone(), plan.name.clone(), listener.clone()));
                let plan = Plan {
                    name: plan.name.clone(),
                    start: plan.start,
                    leave: plan.leave,
                    stall: plan.stall,
                };
                let topic = self.topic.clone();
                let strategy = strategy.clone();
                let (t0, end, poll_timeout) = (self.t0, self.end, self.poll_timeout);
                tasks.spawn(async move {
                    member(config, plan, &topic, listener, t0, end, poll_timeout)
                        .await
                        .with_context(|| format!("strategy {strategy}"))
                });
            }
        }
        Ok((tasks, listeners))
    }

    /// One member's consumer settings: the scenario's timeouts, scaled, and one strategy.
    fn member_config(&self, group: &str, name: &str, strategy: &str) -> Result<ConsumerConfig> {
        let (scenario, scale) = (self.scenario, self.args.scale);
        let mut config = ConsumerConfig::new(&self.args.bootstrap_server, group)?;
        config.client = self.client.clone();
        // The member id starts with the client id, so the leader orders members A, B, C.
        config.client.client_id = name.to_string();
        config.session_timeout = scaled_duration(scenario.session_timeout_ms, scale);
        config.heartbeat_interval = scaled_duration(scenario.heartbeat_interval_ms, scale);
        config.max_poll_interval = scaled_duration(scenario.max_poll_interval_ms, scale);
        config.partition_assignment_strategy = vec![strategy.to_string()];
        config.enable_auto_commit = false;
        config.fetch_max_wait = self.poll_timeout;
        Ok(config)
    }
}

/// Waits for every member; the consumers still open at the end. The first failure stops the
/// others.
async fn join_members(mut tasks: MemberTasks) -> Result<Vec<Consumer>> {
    let mut finished = Vec::new();
    while let Some(joined) = tasks.join_next().await {
        match joined {
            Ok(Ok(c)) => finished.extend(c),
            Ok(Err(e)) => {
                tasks.abort_all();
                return Err(hint(e));
            }
            Err(e) => {
                tasks.abort_all();
                bail!("a member task failed: {e}");
            }
        }
    }
    Ok(finished)
}

/// One strategy's timeline: the planned actions and its members' callbacks, in time order.
fn strategy_timeline(
    strategy: &str,
    plans: &[Plan],
    listeners: &Listeners,
    t0: std::time::Instant,
) -> Vec<TimelineEntry> {
    let mut timeline: Vec<TimelineEntry> = Vec::new();
    for plan in plans {
        timeline.extend(actions(plan));
    }
    for (s, m, l) in listeners {
        if s != strategy {
            continue;
        }
        for e in l.events() {
            let mut parts: Vec<String> = e.partitions.iter().map(|tp| tp.to_string()).collect();
            parts.sort_by_key(|p| partition_key(p));
            timeline.push(TimelineEntry {
                // The plan's clock: the wall clock may be slewed against it, and a callback
                // right after a step's start must not land in the step before.
                at_ms: e.at.saturating_duration_since(t0).as_millis() as i64,
                member: m.clone(),
                event: match e.kind {
                    RebalanceKind::Assigned => "ASSIGNED",
                    RebalanceKind::Revoked => "REVOKED",
                    RebalanceKind::Lost => "LOST",
                }
                .to_string(),
                partitions: Some(parts),
                generation: Some(e.ctx.generation),
            });
        }
    }
    // Stable: a member's own callbacks keep their order; at equal times actions come first.
    timeline.sort_by_key(|e| (e.at_ms, e.partitions.is_some()));
    timeline
}

/// The scenario's own actions as timeline lines (planned times).
fn actions(plan: &Plan) -> Vec<TimelineEntry> {
    let line = |at: Duration, event: &str| TimelineEntry {
        at_ms: at.as_millis() as i64,
        member: plan.name.clone(),
        event: event.to_string(),
        partitions: None,
        generation: None,
    };
    let mut out = vec![line(plan.start, "START")];
    if let Some((from, to)) = plan.stall {
        out.push(line(from, "STALL"));
        out.push(line(to, "RESUME"));
    }
    if let Some(l) = plan.leave {
        out.push(line(l, "CLOSE"));
    }
    out
}

/// One member: starts, polls in a loop, stalls, closes, on the run's clock. Returns the consumer
/// still open at the end of the run.
async fn member(
    config: ConsumerConfig,
    plan: Plan,
    topic: &str,
    listener: RecordingListener,
    t0: Instant,
    end: Instant,
    poll_timeout: Duration,
) -> Result<Option<Consumer>> {
    let name = plan.name.clone();
    let fail = |e: gregor_client::Error| anyhow::anyhow!("member {name}: {e}");
    tokio::time::sleep_until(t0 + plan.start).await;
    let mut consumer = Consumer::new(config).await.map_err(fail)?;
    consumer.set_rebalance_listener(Box::new(listener));
    consumer.subscribe(&[topic]).await.map_err(fail)?;
    loop {
        let now = Instant::now();
        if plan.leave.is_some_and(|l| now >= t0 + l) {
            consumer.close().await.map_err(fail)?;
            return Ok(None);
        }
        if now >= end {
            return Ok(Some(consumer));
        }
        if let Some((from, to)) = plan.stall {
            if now >= t0 + from && now < t0 + to {
                // Not polling; the consumer's heartbeat task goes on.
                tokio::time::sleep_until((t0 + to).min(end)).await;
                continue;
            }
        }
        let mut budget = poll_timeout;
        // Wake up for the next action rather than overshoot it by a whole poll.
        for next in [plan.leave, plan.stall.map(|s| s.0)].into_iter().flatten() {
            if t0 + next > now {
                budget = budget.min(t0 + next - now);
            }
        }
        consumer.poll(budget).await.map_err(fail)?;
    }
}

/// Adds what to do about the common failure of scaled runs.
fn hint(e: anyhow::Error) -> anyhow::Error {
    let text = format!("{e:#}");
    if text.contains("INVALID_SESSION_TIMEOUT") {
        e.context(
            "the broker refuses the scaled session timeout: run it with \
             --override group.min.session.timeout.ms=1000 (or use a larger --scale)",
        )
    } else {
        e
    }
}

fn sanitize(name: &str) -> String {
    name.chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.' {
                c
            } else {
                '_'
            }
        })
        .collect()
}

/// The timelines and tables, per strategy.
pub fn render_text(r: &LiveReport) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{}: {}\ntopic {} ({} partitions), scale {}",
        r.scenario, r.description, r.topic, r.partitions, r.scale
    );
    for s in &r.strategies {
        let _ = writeln!(out, "\n== {} (group {}) ==", s.strategy, s.group);
        for e in &s.timeline {
            // Seed 004's shorthand: the run has one topic, named above.
            let parts = match &e.partitions {
                Some(p) => {
                    let short: Vec<String> = p
                        .iter()
                        .map(|p| format!("p{}", partition_key(p).1))
                        .collect();
                    format!(" [{}]", short.join(", "))
                }
                None => String::new(),
            };
            let _ = writeln!(out, "[{:>7} ms] {} {}{parts}", e.at_ms, e.member, e.event);
        }
        let _ = writeln!(
            out,
            "\n{:<28} {:>8}  {:<34} {:<8} {:<26} {:>5}  time to own",
            "step", "at ms", "assignment", "sizes", "revoked", "moved"
        );
        for st in &s.steps {
            let assignment = join_map(&st.assignment);
            let mut sizes: Vec<usize> = st.sizes.values().copied().collect();
            sizes.sort_unstable_by(|a, b| b.cmp(a));
            let sizes = if sizes.is_empty() {
                "-".to_string()
            } else {
                sizes
                    .iter()
                    .map(|n| n.to_string())
                    .collect::<Vec<_>>()
                    .join("-")
            };
            let own: Vec<String> = st
                .time_to_own_ms
                .iter()
                .map(|(m, t)| match t {
                    Some(t) => format!("{m} {t} ms"),
                    None => format!("{m} -"),
                })
                .collect();
            let _ = writeln!(
                out,
                "{:<28} {:>8}  {:<34} {:<8} {:<26} {:>5}  {}",
                st.label,
                st.at_ms,
                assignment,
                sizes,
                join_map(&st.revoked),
                st.moved,
                if own.is_empty() {
                    "-".into()
                } else {
                    own.join(", ")
                }
            );
        }
    }
    out.push_str(&cleanup_text(&r.cleanup));
    out
}

fn join_map(m: &BTreeMap<String, Vec<String>>) -> String {
    let parts: Vec<String> = m
        .iter()
        .filter(|(_, ps)| !ps.is_empty())
        .map(|(k, ps)| {
            // Only partition numbers: the topic is the run's one topic.
            let c = compact(ps);
            let nums = c.split_once('[').map(|(_, n)| n.trim_end_matches(']'));
            format!("{k}[{}]", nums.unwrap_or(&c))
        })
        .collect();
    if parts.is_empty() {
        "-".into()
    } else {
        parts.join(" ")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(at: i64, m: &str, ev: &str, ps: &[i32]) -> TimelineEntry {
        TimelineEntry {
            at_ms: at,
            member: m.into(),
            event: ev.into(),
            partitions: Some(ps.iter().map(|p| format!("t-{p}")).collect()),
            generation: Some(1),
        }
    }

    #[test]
    fn bundled_live_scenarios_load_and_scale() {
        for (name, _) in BUNDLED_LIVE {
            load_live(name).unwrap();
        }
        let s = load_live("seed-004-stall").unwrap();
        let d = steps(&s, 0.1);
        let labels: Vec<(i64, &str)> = d.iter().map(|d| (d.at_ms, d.label.as_str())).collect();
        assert_eq!(
            labels,
            vec![
                (0, "A starts"),
                (600, "B joins"),
                (835, "B stops polling"),
                (2835, "B polls again")
            ]
        );
        assert_eq!(d[3].starting, vec!["B".to_string()]);
        assert!(load_live("nope").is_err());
    }

    #[test]
    fn analyze_folds_callbacks_into_steps() {
        let defs = vec![
            StepDef {
                at_ms: 0,
                label: "A starts".into(),
                starting: vec!["A".into()],
            },
            StepDef {
                at_ms: 100,
                label: "B joins".into(),
                starting: vec!["B".into()],
            },
            StepDef {
                at_ms: 200,
                label: "B stops polling".into(),
                starting: vec![],
            },
        ];
        let timeline = vec![
            entry(30, "A", "ASSIGNED", &[0, 1, 2]),
            entry(120, "A", "REVOKED", &[0, 1, 2]),
            entry(125, "A", "ASSIGNED", &[0, 1]),
            entry(126, "B", "ASSIGNED", &[2]),
            // B is removed; A takes everything before B learns it lost p2.
            entry(250, "A", "REVOKED", &[0, 1]),
            entry(251, "A", "ASSIGNED", &[0, 1, 2]),
            entry(400, "B", "LOST", &[2]),
        ];
        let st = analyze(&defs, &timeline, 300);
        assert_eq!(st[0].time_to_own_ms["A"], Some(30));
        assert_eq!(
            st[1].sizes.values().copied().collect::<Vec<_>>(),
            vec![2, 1]
        );
        assert_eq!(st[1].revoked["A"].len(), 3);
        assert_eq!(st[1].moved, 1);
        assert_eq!(st[1].time_to_own_ms["B"], Some(26));
        assert_eq!(st[2].assignment["A"].len(), 3);
        assert!(!st[2].assignment.contains_key("B"));
        assert_eq!(st[2].moved, 1);
    }

    #[test]
    fn bad_scenarios_are_refused() {
        let mut s = load_live("seed-002").unwrap();
        s.members[1].id = "A".into();
        assert!(validate(&s).is_err());
        let mut s = load_live("seed-002").unwrap();
        s.heartbeat_interval_ms = s.session_timeout_ms;
        assert!(validate(&s).is_err());
        let mut s = load_live("seed-002").unwrap();
        s.members[0].leave_ms = Some(0);
        assert!(validate(&s).is_err());
    }

    #[test]
    fn cleanup_says_what_was_removed_kept_or_left() {
        let mut c = Cleanup {
            kept: false,
            topic: "lab-x-1".into(),
            groups: vec!["lab-x-range-1".into(), "lab-x-sticky-1".into()],
            failures: BTreeMap::new(),
        };
        assert_eq!(
            cleanup_text(&c),
            "\nremoved topic lab-x-1 and groups lab-x-range-1, lab-x-sticky-1 (--keep keeps them)\n"
        );
        c.failures
            .insert("lab-x-sticky-1".into(), "NON_EMPTY_GROUP (68)".into());
        assert_eq!(
            cleanup_text(&c),
            "\nremoved topic lab-x-1 and groups lab-x-range-1 (--keep keeps them)\n\
             could not remove lab-x-sticky-1: NON_EMPTY_GROUP (68) \
             (remove it with `gregor groups --delete --group lab-x-sticky-1`)\n"
        );
        c.failures.insert("lab-x-1".into(), "timed out".into());
        c.failures
            .insert("lab-x-range-1".into(), "timed out".into());
        let text = cleanup_text(&c);
        assert!(!text.contains("removed"), "{text}");
        assert!(
            text.contains("`gregor topics --delete --topic lab-x-1`"),
            "{text}"
        );
        c.kept = true;
        assert_eq!(
            cleanup_text(&c),
            "\nkept (--keep): topic lab-x-1 and groups lab-x-range-1, lab-x-sticky-1\n"
        );
        c.groups.clear();
        assert_eq!(cleanup_text(&c), "\nkept (--keep): topic lab-x-1\n");
    }
}
