//! Replication throttles for `gregor reassign --execute --throttle` (set as
//! kafka-reassign-partitions.sh sets them, removed by `--verify` once the reassignment is
//! complete), and the progress of moving replicas, from DescribeLogDirs.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{bail, Result};
use gregor_client::admin::{AlterConfigOp, ConfigResource, OngoingReassignment};
use gregor_client::{Admin, TopicPartition};

use super::reassign_json::{join, Assignment};

pub const LEADER_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_RATE: &str = "follower.replication.throttled.rate";
pub const LEADER_REPLICAS: &str = "leader.replication.throttled.replicas";
pub const FOLLOWER_REPLICAS: &str = "follower.replication.throttled.replicas";

/// What a throttled reassignment throttles: per topic, the `partition:broker` entries of the
/// replicas that send (every current replica of a moving partition: any may lead it) and of
/// those that receive (the replicas being added); and the brokers on either side.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ThrottlePlan {
    pub leader: BTreeMap<String, Vec<String>>,
    pub follower: BTreeMap<String, Vec<String>>,
    pub brokers: BTreeSet<i32>,
}

/// The throttles for moving `current` to `target` (partitions whose replica set stays the
/// same move no data and are left alone).
pub fn throttle_plan(current: &Assignment, target: &Assignment) -> ThrottlePlan {
    let mut plan = ThrottlePlan::default();
    for (tp, wanted) in target {
        let Some(now) = current.get(tp) else { continue };
        let adding: Vec<i32> = wanted
            .iter()
            .copied()
            .filter(|r| !now.contains(r))
            .collect();
        if adding.is_empty() {
            continue;
        }
        let entries = |replicas: &[i32]| {
            replicas
                .iter()
                .map(|r| format!("{}:{r}", tp.partition))
                .collect::<Vec<_>>()
        };
        plan.leader
            .entry(tp.topic.clone())
            .or_default()
            .extend(entries(now));
        plan.follower
            .entry(tp.topic.clone())
            .or_default()
            .extend(entries(&adding));
        plan.brokers.extend(now.iter().chain(wanted.iter()));
    }
    plan
}

/// Parses `--throttle`: bytes per second; a negative value means no throttle, as in Kafka.
pub fn parse_throttle(raw: &str) -> Result<Option<i64>> {
    match raw.trim().parse::<i64>() {
        Ok(v) if v >= 0 => Ok(Some(v)),
        Ok(_) => Ok(None),
        Err(_) => bail!("--throttle must be a number of bytes per second, got \"{raw}\""),
    }
}

fn check(results: Vec<(ConfigResource, Result<(), gregor_client::KafkaError>)>) -> Result<()> {
    let failed: Vec<String> = results
        .into_iter()
        .filter_map(|(r, res)| res.err().map(|e| format!("{:?} {}: {e}", r.kind, r.name)))
        .collect();
    if !failed.is_empty() {
        bail!(
            "Error setting replication throttles:\n{}",
            failed.join("\n")
        );
    }
    Ok(())
}

/// Sets the rate on every broker of the plan and adds its replicas to the topics' throttled
/// lists (entries other reassignments put there stay).
pub async fn apply_throttles(admin: &Admin, plan: &ThrottlePlan, rate: i64) -> Result<()> {
    let mut changes: Vec<(ConfigResource, Vec<AlterConfigOp>)> = Vec::new();
    let topics: BTreeSet<&String> = plan.leader.keys().chain(plan.follower.keys()).collect();
    for topic in topics {
        let mut ops = Vec::new();
        for (key, lists) in [
            (LEADER_REPLICAS, &plan.leader),
            (FOLLOWER_REPLICAS, &plan.follower),
        ] {
            if let Some(entries) = lists.get(topic).filter(|e| !e.is_empty()) {
                ops.push(AlterConfigOp::Append {
                    name: key.to_string(),
                    value: entries.join(","),
                });
            }
        }
        changes.push((ConfigResource::topic(topic.clone()), ops));
    }
    for &broker in &plan.brokers {
        changes.push((
            ConfigResource::broker(broker),
            [LEADER_RATE, FOLLOWER_RATE]
                .iter()
                .map(|k| AlterConfigOp::Set {
                    name: k.to_string(),
                    value: rate.to_string(),
                })
                .collect(),
        ));
    }
    check(admin.incremental_alter_configs(&changes, false).await?)
}

/// Removes the throttle rates from `brokers` and the throttled-replica lists from `topics`,
/// printing what it clears as Kafka's tool does.
pub async fn clear_throttles(
    admin: &Admin,
    brokers: &[i32],
    topics: &BTreeSet<String>,
) -> Result<()> {
    let delete = |keys: [&str; 2]| -> Vec<AlterConfigOp> {
        keys.iter()
            .map(|k| AlterConfigOp::Delete {
                name: k.to_string(),
            })
            .collect()
    };
    println!("{}", clearing_brokers_line(brokers));
    let changes: Vec<(ConfigResource, Vec<AlterConfigOp>)> = brokers
        .iter()
        .map(|&b| {
            (
                ConfigResource::broker(b),
                delete([LEADER_RATE, FOLLOWER_RATE]),
            )
        })
        .collect();
    check(admin.incremental_alter_configs(&changes, false).await?)?;
    println!("{}", clearing_topics_line(topics));
    let changes: Vec<(ConfigResource, Vec<AlterConfigOp>)> = topics
        .iter()
        .map(|t| {
            (
                ConfigResource::topic(t.clone()),
                delete([LEADER_REPLICAS, FOLLOWER_REPLICAS]),
            )
        })
        .collect();
    check(admin.incremental_alter_configs(&changes, false).await?)
}

/// Kafka's tool's line for the brokers whose throttles it clears.
fn clearing_brokers_line(brokers: &[i32]) -> String {
    format!(
        "Clearing broker-level throttles on broker{} {}",
        if brokers.len() == 1 { "" } else { "s" },
        join(brokers)
    )
}

/// Kafka's tool's line for the topics whose throttles it clears: one line, comma-separated.
fn clearing_topics_line(topics: &BTreeSet<String>) -> String {
    format!(
        "Clearing topic-level throttles on topic{} {}",
        if topics.len() == 1 { "" } else { "s" },
        topics.iter().cloned().collect::<Vec<_>>().join(",")
    )
}

/// How far one replica being added has come: its bytes against the leader's, and the offsets
/// it still has to copy up to the high watermark it knows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaProgress {
    pub broker: i32,
    /// The broker answered DescribeLogDirs.
    pub answered: bool,
    pub bytes: Option<i64>,
    pub leader_bytes: Option<i64>,
    pub offsets_behind: Option<i64>,
}

/// The progress line of one replica being added.
pub fn format_progress(tp: &TopicPartition, p: &ReplicaProgress) -> String {
    if !p.answered {
        return format!(
            "  {tp}: replica {}: its broker did not answer DescribeLogDirs\n",
            p.broker
        );
    }
    let bytes = match (p.bytes, p.leader_bytes) {
        (Some(have), Some(total)) => {
            format!("{have} of {total} bytes ({} behind)", (total - have).max(0))
        }
        (Some(have), None) => format!("{have} bytes (leader's size unknown)"),
        (None, _) => "no log yet".to_string(),
    };
    let offsets = p.offsets_behind.map_or(String::new(), |o| {
        format!(", {o} offsets behind the high watermark")
    });
    format!("  {tp}: replica {} has {bytes}{offsets}\n", p.broker)
}

/// How long `--verify` waits for one broker's DescribeLogDirs answer.
const LOG_DIRS_WAIT: std::time::Duration = std::time::Duration::from_secs(3);

/// What DescribeLogDirs reports of the given replicas: (broker, partition) -> (size in bytes,
/// offset lag), and the brokers that answered. A broker that does not answer within
/// [`LOG_DIRS_WAIT`] (stopped, cut off) leaves its replicas out.
pub(super) async fn replica_log_sizes(
    admin: &Admin,
    by_broker: BTreeMap<i32, Vec<TopicPartition>>,
) -> (BTreeMap<(i32, TopicPartition), (i64, i64)>, BTreeSet<i32>) {
    let mut sizes = BTreeMap::new();
    let mut answered = BTreeSet::new();
    for (broker, parts) in by_broker {
        let asked =
            tokio::time::timeout(LOG_DIRS_WAIT, admin.describe_log_dirs(broker, Some(&parts)))
                .await;
        let Ok(Ok(dirs)) = asked else {
            continue;
        };
        answered.insert(broker);
        for (tp, r) in dirs.into_iter().flat_map(|d| d.replicas) {
            sizes.insert((broker, tp), (r.size_bytes, r.offset_lag));
        }
    }
    (sizes, answered)
}

/// Asks each broker involved for the sizes of the moving partitions' replicas. A broker that
/// does not answer within a few seconds (stopped, cut off) leaves its replicas' figures
/// unknown.
pub async fn progress(
    admin: &Admin,
    moving: &BTreeMap<TopicPartition, (OngoingReassignment, Option<i32>)>,
) -> BTreeMap<TopicPartition, Vec<ReplicaProgress>> {
    let mut by_broker: BTreeMap<i32, Vec<TopicPartition>> = BTreeMap::new();
    for (tp, (o, leader)) in moving {
        for b in o.adding_replicas.iter().chain(leader.iter()) {
            by_broker.entry(*b).or_default().push(tp.clone());
        }
    }
    let (sizes, answered) = replica_log_sizes(admin, by_broker).await;
    moving
        .iter()
        .map(|(tp, (o, leader))| {
            let leader_bytes = leader.and_then(|l| sizes.get(&(l, tp.clone())).map(|s| s.0));
            let replicas = o
                .adding_replicas
                .iter()
                .map(|&b| {
                    let own = sizes.get(&(b, tp.clone()));
                    ReplicaProgress {
                        broker: b,
                        answered: answered.contains(&b),
                        bytes: own.map(|s| s.0),
                        leader_bytes,
                        offsets_behind: own.map(|s| s.1),
                    }
                })
                .collect();
            (tp.clone(), replicas)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    #[test]
    fn throttles_name_senders_and_receivers_of_moving_partitions_only() {
        let current: Assignment = [
            (tp("a", 0), vec![0, 1]),
            (tp("a", 1), vec![1, 2]),
            (tp("b", 0), vec![2]),
        ]
        .into_iter()
        .collect();
        let target: Assignment = [
            (tp("a", 0), vec![0, 3]),
            (tp("a", 1), vec![2, 1]), // reordered: no data moves
            (tp("b", 0), vec![2, 0]),
        ]
        .into_iter()
        .collect();
        let plan = throttle_plan(&current, &target);
        assert_eq!(plan.leader["a"], vec!["0:0", "0:1"]);
        assert_eq!(plan.follower["a"], vec!["0:3"]);
        assert_eq!(plan.leader["b"], vec!["0:2"]);
        assert_eq!(plan.follower["b"], vec!["0:0"]);
        assert_eq!(plan.brokers, [0, 1, 2, 3].into_iter().collect());
        assert_eq!(throttle_plan(&current, &current), ThrottlePlan::default());
    }

    #[test]
    fn throttle_values_parse_as_kafka_does() {
        assert_eq!(parse_throttle("50000000").unwrap(), Some(50_000_000));
        assert_eq!(parse_throttle("0").unwrap(), Some(0));
        assert_eq!(parse_throttle("-1").unwrap(), None);
        let e = parse_throttle("fast").unwrap_err().to_string();
        assert!(e.contains("bytes per second"), "{e}");
        assert!(parse_throttle("1.5").is_err());
    }

    #[test]
    fn progress_lines_say_what_is_known() {
        let p = ReplicaProgress {
            broker: 2,
            answered: true,
            bytes: Some(100),
            leader_bytes: Some(400),
            offsets_behind: Some(7),
        };
        assert_eq!(
            format_progress(&tp("t", 0), &p),
            "  t-0: replica 2 has 100 of 400 bytes (300 behind), 7 offsets behind the high watermark\n"
        );
        let unknown = ReplicaProgress {
            bytes: None,
            leader_bytes: None,
            offsets_behind: None,
            ..p
        };
        assert_eq!(
            format_progress(&tp("t", 0), &unknown),
            "  t-0: replica 2 has no log yet\n"
        );
        let silent = ReplicaProgress {
            answered: false,
            ..unknown
        };
        assert_eq!(
            format_progress(&tp("t", 0), &silent),
            "  t-0: replica 2: its broker did not answer DescribeLogDirs\n"
        );
    }

    #[test]
    fn clearing_lines_are_kafkas() {
        assert_eq!(
            clearing_brokers_line(&[0, 1, 2]),
            "Clearing broker-level throttles on brokers 0,1,2"
        );
        assert_eq!(
            clearing_brokers_line(&[3]),
            "Clearing broker-level throttles on broker 3"
        );
        let one: BTreeSet<String> = ["big".to_string()].into();
        assert_eq!(
            clearing_topics_line(&one),
            "Clearing topic-level throttles on topic big"
        );
        let two: BTreeSet<String> = ["a".to_string(), "b".to_string()].into();
        assert_eq!(
            clearing_topics_line(&two),
            "Clearing topic-level throttles on topics a,b"
        );
    }
}
