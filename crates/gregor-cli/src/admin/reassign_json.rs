//! The files of `gregor reassign` in Kafka's formats — the topics-to-move file
//! (`{"topics":[{"topic":"t"}],"version":1}`) and the reassignment file
//! (`{"version":1,"partitions":[{"topic":"t","partition":0,"replicas":[1,0],"log_dirs":["any","any"]}]}`)
//! — and the plan `--generate` proposes. Pure functions, checked the way
//! kafka-reassign-partitions.sh checks them and with its messages.

use std::collections::{BTreeMap, BTreeSet};

use anyhow::{anyhow, bail, Context, Result};
use gregor_client::TopicPartition;
use gregor_meta::placement::{assign_replicas, PlacementBroker, PlacementStart};
use serde::Serialize;
use serde_json::Value;

/// The only file version Kafka's tool reads and writes.
const VERSION: i64 = 1;
/// The log directory entry meaning "wherever the broker puts it".
const ANY_LOG_DIR: &str = "any";

/// A partition's replicas, preferred leader first, per partition (sorted by topic, then
/// partition, which is the order Kafka's tool prints them in).
pub type Assignment = BTreeMap<TopicPartition, Vec<i32>>;

fn parse_object(text: &str) -> Result<serde_json::Map<String, Value>> {
    if text.trim().is_empty() {
        bail!("The input string is empty");
    }
    let value: Value =
        serde_json::from_str(text).context("The input string is not a valid JSON")?;
    let Value::Object(object) = value else {
        bail!("The input must be a JSON object");
    };
    match object.get("version") {
        None => {}
        Some(v) if v.as_i64() == Some(VERSION) => {}
        Some(v) => bail!("Not supported version field value {v}"),
    }
    Ok(object)
}

/// The topics of a topics-to-move file, in file order. Duplicates and an empty list are
/// refused (Kafka refuses duplicates; an empty list would propose nothing).
pub fn parse_topics_to_move(text: &str) -> Result<Vec<String>> {
    let object = parse_object(text)?;
    let topics = object
        .get("topics")
        .ok_or_else(|| anyhow!("The topics to move are missing the \"topics\" field"))?
        .as_array()
        .ok_or_else(|| anyhow!("\"topics\" must be an array"))?;
    let mut out = Vec::with_capacity(topics.len());
    let mut duplicates = BTreeSet::new();
    for (i, entry) in topics.iter().enumerate() {
        let topic = entry
            .get("topic")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("topics[{i}] needs a non-empty string \"topic\""))?;
        if out.iter().any(|t| t == topic) {
            duplicates.insert(topic.to_string());
        } else {
            out.push(topic.to_string());
        }
    }
    if !duplicates.is_empty() {
        bail!(
            "List of topics to reassign contains duplicate entries: {}",
            duplicates.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    if out.is_empty() {
        bail!("The list of topics to move is empty");
    }
    Ok(out)
}

/// `--broker-list "0,1"`: distinct broker ids.
pub fn parse_broker_list(text: &str) -> Result<Vec<i32>> {
    if text.trim().is_empty() {
        bail!("--broker-list is empty: give the broker ids to place replicas on, e.g. \"0,1,2\"");
    }
    let mut out = Vec::new();
    let mut duplicates = BTreeSet::new();
    for part in text.split(',') {
        let id: i32 = part
            .trim()
            .parse()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| {
                anyhow!("Invalid --broker-list '{text}': expected broker ids separated by commas")
            })?;
        if out.contains(&id) {
            duplicates.insert(id);
        } else {
            out.push(id);
        }
    }
    if !duplicates.is_empty() {
        bail!(
            "Broker list contains duplicate entries: {}",
            join(duplicates.iter())
        );
    }
    Ok(out)
}

/// Reads a reassignment file: every entry, in file order, duplicates kept (the caller decides
/// whether they are an error). `log_dirs` may be left out; when given it must have one entry
/// per replica, and only "any" is accepted: Gregor keeps one log directory per broker, so
/// there is no directory to move a replica to (Kafka would move it with AlterReplicaLogDirs).
pub fn parse_reassignment_entries(text: &str) -> Result<Vec<(TopicPartition, Vec<i32>)>> {
    let object = parse_object(text)?;
    let partitions = object
        .get("partitions")
        .ok_or_else(|| anyhow!("The reassignment is missing the \"partitions\" field"))?
        .as_array()
        .ok_or_else(|| anyhow!("\"partitions\" must be an array"))?;
    let mut out = Vec::with_capacity(partitions.len());
    for (i, entry) in partitions.iter().enumerate() {
        let topic = entry
            .get("topic")
            .and_then(Value::as_str)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| anyhow!("partitions[{i}] needs a non-empty string \"topic\""))?;
        let partition = entry
            .get("partition")
            .and_then(Value::as_i64)
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p >= 0)
            .ok_or_else(|| {
                anyhow!(
                    "partitions[{i}] needs a \"partition\" number from 0 to {}",
                    i32::MAX
                )
            })?;
        let tp = TopicPartition::new(topic, partition);
        let replicas = entry
            .get("replicas")
            .and_then(Value::as_array)
            .ok_or_else(|| anyhow!("partitions[{i}] ({tp}) needs a \"replicas\" array"))?
            .iter()
            .map(|r| {
                r.as_i64()
                    .and_then(|r| i32::try_from(r).ok())
                    .filter(|r| *r >= 0)
                    .ok_or_else(|| {
                        anyhow!("partitions[{i}] ({tp}): replicas must be broker ids, not {r}")
                    })
            })
            .collect::<Result<Vec<i32>>>()?;
        if let Some(dirs) = entry.get("log_dirs") {
            let dirs = dirs
                .as_array()
                .ok_or_else(|| anyhow!("partitions[{i}] ({tp}): \"log_dirs\" must be an array"))?;
            if dirs.len() != replicas.len() {
                bail!(
                    "Size of replicas list [{}] is different from size of log dirs list [{}] for partition {tp}",
                    join(replicas.iter()),
                    dirs.iter().map(|d| d.to_string()).collect::<Vec<_>>().join(",")
                );
            }
            if let Some(dir) = dirs.iter().find(|d| d.as_str() != Some(ANY_LOG_DIR)) {
                bail!(
                    "Log directory {dir} for partition {tp} is not supported: Gregor keeps one log directory per broker, so \"log_dirs\" entries must be \"any\""
                );
            }
        }
        out.push((tp, replicas));
    }
    Ok(out)
}

/// A reassignment file for `--verify` and `--cancel`: at least one partition.
pub fn parse_reassignment(text: &str) -> Result<Assignment> {
    let entries = parse_reassignment_entries(text)?;
    if entries.is_empty() {
        bail!("Partition reassignment list cannot be empty");
    }
    Ok(entries.into_iter().collect())
}

/// A reassignment file for `--execute`: besides what [`parse_reassignment`] checks, no empty
/// replica list, no partition twice, no broker twice in one partition (Kafka's checks and
/// messages).
pub fn parse_reassignment_to_execute(text: &str) -> Result<Assignment> {
    let entries = parse_reassignment_entries(text)?;
    if entries.is_empty() {
        bail!("Partition reassignment list cannot be empty");
    }
    if let Some((tp, _)) = entries.iter().find(|(_, r)| r.is_empty()) {
        bail!("Partition replica list cannot be empty (partition {tp})");
    }
    let mut seen = BTreeSet::new();
    let duplicate_partitions: BTreeSet<String> = entries
        .iter()
        .filter(|(tp, _)| !seen.insert(tp.clone()))
        .map(|(tp, _)| tp.to_string())
        .collect();
    if !duplicate_partitions.is_empty() {
        bail!(
            "Partition reassignment contains duplicate topic partitions: {}",
            duplicate_partitions
                .into_iter()
                .collect::<Vec<_>>()
                .join(",")
        );
    }
    let duplicate_replicas: Vec<String> = entries
        .iter()
        .filter_map(|(tp, replicas)| {
            let mut seen = BTreeSet::new();
            let twice: BTreeSet<i32> = replicas
                .iter()
                .filter(|r| !seen.insert(**r))
                .copied()
                .collect();
            (!twice.is_empty())
                .then(|| format!("{tp} contains multiple entries for {}", join(twice.iter())))
        })
        .collect();
    if !duplicate_replicas.is_empty() {
        bail!(
            "Partition replica lists may not contain duplicate entries: {}",
            duplicate_replicas.join(". ")
        );
    }
    Ok(entries.into_iter().collect())
}

#[derive(Serialize)]
struct JsonFile<'a> {
    version: i64,
    partitions: Vec<JsonPartition<'a>>,
}

/// Field order as Kafka writes it.
#[derive(Serialize)]
struct JsonPartition<'a> {
    topic: &'a str,
    partition: i32,
    replicas: &'a [i32],
    log_dirs: Vec<&'static str>,
}

/// Kafka's one-line reassignment JSON, partitions sorted by topic then partition, a
/// `log_dirs` entry "any" per replica.
pub fn format_reassignment_json(assignment: &Assignment) -> String {
    let file = JsonFile {
        version: VERSION,
        partitions: assignment
            .iter()
            .map(|(tp, replicas)| JsonPartition {
                topic: &tp.topic,
                partition: tp.partition,
                replicas,
                log_dirs: vec![ANY_LOG_DIR; replicas.len()],
            })
            .collect(),
    };
    serde_json::to_string(&file).expect("strings and integers always serialize")
}

/// A broker `--generate` may place replicas on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TargetBroker {
    pub id: i32,
    pub rack: Option<String>,
}

/// The plan `--generate` proposes: each topic's partitions placed afresh over the brokers with
/// the round-robin assignment Kafka uses for new topics (AdminUtils.assignReplicasToBrokers),
/// keeping the replication factor of the topic's first partition. Kafka starts each topic at
/// a random broker with a random follower shift; here topic number `i` (in name order) starts
/// at broker `i` with shift `i`, so the same inputs always give the same plan and the leaders
/// of several topics still spread. With racks on every broker the placement is rack-aware;
/// with racks on some brokers only, rack-aware placement is refused as Kafka refuses it,
/// unless `rack_aware` is false (`--disable-rack-aware`).
pub fn generate_plan(
    current: &Assignment,
    brokers: &[TargetBroker],
    rack_aware: bool,
) -> Result<Assignment> {
    let with_rack = brokers.iter().filter(|b| b.rack.is_some()).count();
    if rack_aware && with_rack > 0 && with_rack < brokers.len() {
        bail!("Not all brokers have rack information for replica rack aware assignment.");
    }
    let placement_brokers: Vec<PlacementBroker> = brokers
        .iter()
        .map(|b| PlacementBroker {
            id: b.id,
            rack: if rack_aware { b.rack.clone() } else { None },
        })
        .collect();
    let mut by_topic: BTreeMap<&str, Vec<(i32, &Vec<i32>)>> = BTreeMap::new();
    for (tp, replicas) in current {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push((tp.partition, replicas));
    }
    let mut plan = Assignment::new();
    for (i, (topic, partitions)) in by_topic.into_iter().enumerate() {
        let replication_factor = partitions.first().map_or(0, |(_, r)| r.len());
        if replication_factor > brokers.len() || replication_factor == 0 {
            bail!(
                "Replication factor: {replication_factor} larger than available brokers: {}.",
                brokers.len()
            );
        }
        let start = PlacementStart {
            start_index: i,
            replica_shift: i,
        };
        let placed = assign_replicas(
            &placement_brokers,
            partitions.len(),
            replication_factor,
            0,
            start,
        )
        .map_err(|e| anyhow!("topic '{topic}': {e}"))?;
        // Partitions are numbered 0..n, so the k-th placement is partition k's.
        for ((partition, _), replicas) in partitions.into_iter().zip(placed) {
            plan.insert(TopicPartition::new(topic, partition), replicas);
        }
    }
    Ok(plan)
}

pub fn join<'a>(ids: impl IntoIterator<Item = &'a i32>) -> String {
    ids.into_iter()
        .map(|i| i.to_string())
        .collect::<Vec<_>>()
        .join(",")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    fn err<T: std::fmt::Debug>(r: Result<T>) -> String {
        format!("{:#}", r.unwrap_err())
    }

    /// Seed 001's files, verbatim (tabs and spacing as in the walk-through).
    const SEED_TOPICS_TO_MOVE: &str =
        "{ \t\"topics\": [ \t\t{ \"topic\":\"tp_re_01\" } \t], \t\"version\":1}";
    const SEED_MY_TOPICS_TO_EXECUTE: &str = r#"{    "version": 1,    "partitions": [{        "topic": "tp_re_01",        "partition": 4,        "replicas": [1],        "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 1,         "replicas": [0],         "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 2,         "replicas": [0],         "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 3,         "replicas": [1],         "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 0,         "replicas": [0],         "log_dirs": ["any"]     }]}        "#;
    const SEED_INCREASE_RF: &str = "{    \"version\":1,    \"partitions\":[        {\"topic\":\"tp_re_02\",\"partition\":0,\"replicas\":[0,1]}, \t        {\"topic\":\"tp_re_02\",\"partition\":1,\"replicas\":[0,1]},         {\"topic\":\"tp_re_02\",\"partition\":2,\"replicas\":[1,0]}    ]}";
    /// Kafka's own output in the seed (the generated proposal).
    const SEED_PROPOSAL: &str = r#"{"version":1,"partitions":[{"topic":"tp_re_01","partition":4,"replicas":[0],"log_dirs":["any"]},{"topic":"tp_re_01","partition":1,"replicas":[1],"log_dirs":["any"]},{"topic":"tp_re_01","partition":2,"replicas":[0],"log_dirs":["any"]},{"topic":"tp_re_01","partition":3,"replicas":[1],"log_dirs":["any"]},{"topic":"tp_re_01","partition":0,"replicas":[0],"log_dirs":["any"]}]}"#;

    #[test]
    fn the_seed_files_are_accepted_as_they_are() {
        assert_eq!(
            parse_topics_to_move(SEED_TOPICS_TO_MOVE).unwrap(),
            vec!["tp_re_01"]
        );
        let plan = parse_reassignment_to_execute(SEED_MY_TOPICS_TO_EXECUTE).unwrap();
        assert_eq!(
            plan.into_iter().collect::<Vec<_>>(),
            vec![
                (tp("tp_re_01", 0), vec![0]),
                (tp("tp_re_01", 1), vec![0]),
                (tp("tp_re_01", 2), vec![0]),
                (tp("tp_re_01", 3), vec![1]),
                (tp("tp_re_01", 4), vec![1]),
            ]
        );
        let rf = parse_reassignment_to_execute(SEED_INCREASE_RF).unwrap();
        assert_eq!(
            rf.into_iter().collect::<Vec<_>>(),
            vec![
                (tp("tp_re_02", 0), vec![0, 1]),
                (tp("tp_re_02", 1), vec![0, 1]),
                (tp("tp_re_02", 2), vec![1, 0]),
            ]
        );
        // Kafka's output is valid input, and reads back as written.
        let proposal = parse_reassignment_to_execute(SEED_PROPOSAL).unwrap();
        assert_eq!(proposal.len(), 5);
        assert_eq!(proposal[&tp("tp_re_01", 3)], vec![1]);
        // Without "version" Kafka assumes 1.
        assert_eq!(
            parse_topics_to_move(r#"{"topics":[{"topic":"a"},{"topic":"b"}]}"#).unwrap(),
            vec!["a", "b"]
        );
    }

    #[test]
    fn json_is_written_as_kafka_writes_it() {
        let current: Assignment = (0..5).map(|p| (tp("tp_re_01", p), vec![0])).collect();
        assert_eq!(
            format_reassignment_json(&current),
            r#"{"version":1,"partitions":[{"topic":"tp_re_01","partition":0,"replicas":[0],"log_dirs":["any"]},{"topic":"tp_re_01","partition":1,"replicas":[0],"log_dirs":["any"]},{"topic":"tp_re_01","partition":2,"replicas":[0],"log_dirs":["any"]},{"topic":"tp_re_01","partition":3,"replicas":[0],"log_dirs":["any"]},{"topic":"tp_re_01","partition":4,"replicas":[0],"log_dirs":["any"]}]}"#
        );
        let rf2: Assignment = [(tp("a\"b", 1), vec![1, 0])].into_iter().collect();
        let text = format_reassignment_json(&rf2);
        assert_eq!(
            text,
            r#"{"version":1,"partitions":[{"topic":"a\"b","partition":1,"replicas":[1,0],"log_dirs":["any","any"]}]}"#
        );
        // What is written reads back the same.
        assert_eq!(parse_reassignment_to_execute(&text).unwrap(), rf2);
    }

    #[test]
    fn generate_proposes_what_kafka_proposed_in_the_seed() {
        let current: Assignment = (0..5).map(|p| (tp("tp_re_01", p), vec![0])).collect();
        let brokers = [
            TargetBroker { id: 1, rack: None },
            TargetBroker { id: 0, rack: None },
        ];
        let plan = generate_plan(&current, &brokers, true).unwrap();
        assert_eq!(plan, parse_reassignment_to_execute(SEED_PROPOSAL).unwrap());
        // Deterministic.
        assert_eq!(plan, generate_plan(&current, &brokers, true).unwrap());
    }

    #[test]
    fn generate_keeps_the_replication_factor_and_spreads_topics() {
        let mut current = Assignment::new();
        for p in 0..6 {
            current.insert(tp("a", p), vec![0, 1]);
            current.insert(tp("b", p), vec![0, 1]);
        }
        let brokers: Vec<TargetBroker> = (0..3).map(|id| TargetBroker { id, rack: None }).collect();
        let plan = generate_plan(&current, &brokers, true).unwrap();
        assert_eq!(plan.len(), 12);
        for replicas in plan.values() {
            assert_eq!(replicas.len(), 2);
            assert_ne!(replicas[0], replicas[1]);
            assert!(replicas.iter().all(|r| (0..3).contains(r)));
        }
        // Each topic's leaders cover every broker twice; the second topic starts one further.
        for topic in ["a", "b"] {
            let mut leaders: Vec<i32> = (0..6).map(|p| plan[&tp(topic, p)][0]).collect();
            leaders.sort();
            assert_eq!(leaders, vec![0, 0, 1, 1, 2, 2]);
        }
        assert_eq!(plan[&tp("a", 0)][0], 0);
        assert_eq!(plan[&tp("b", 0)][0], 1);
    }

    #[test]
    fn generate_with_racks() {
        let current: Assignment = (0..4).map(|p| (tp("t", p), vec![0, 1])).collect();
        let racked: Vec<TargetBroker> = (0..4)
            .map(|id| TargetBroker {
                id,
                rack: Some(if id < 2 { "r1" } else { "r2" }.to_string()),
            })
            .collect();
        let rack_of = |b: i32| if b < 2 { "r1" } else { "r2" };
        let plan = generate_plan(&current, &racked, true).unwrap();
        for replicas in plan.values() {
            assert_ne!(rack_of(replicas[0]), rack_of(replicas[1]), "{replicas:?}");
        }
        let mut mixed = racked.clone();
        mixed[3].rack = None;
        assert_eq!(
            err(generate_plan(&current, &mixed, true)),
            "Not all brokers have rack information for replica rack aware assignment."
        );
        assert_eq!(generate_plan(&current, &mixed, false).unwrap().len(), 4);
        let one = [TargetBroker { id: 0, rack: None }];
        assert_eq!(
            err(generate_plan(&current, &one, true)),
            "Replication factor: 2 larger than available brokers: 1."
        );
    }

    #[test]
    fn bad_files_get_clear_errors() {
        assert_eq!(err(parse_topics_to_move(" ")), "The input string is empty");
        assert!(err(parse_topics_to_move("{\"topics\": ["))
            .starts_with("The input string is not a valid JSON"));
        assert_eq!(
            err(parse_topics_to_move("[]")),
            "The input must be a JSON object"
        );
        assert_eq!(
            err(parse_topics_to_move(
                r#"{"version":2,"topics":[{"topic":"a"}]}"#
            )),
            "Not supported version field value 2"
        );
        assert_eq!(
            err(parse_topics_to_move(r#"{"version":1}"#)),
            "The topics to move are missing the \"topics\" field"
        );
        assert_eq!(
            err(parse_topics_to_move(r#"{"topics":[{"name":"a"}]}"#)),
            "topics[0] needs a non-empty string \"topic\""
        );
        assert_eq!(
            err(parse_topics_to_move(
                r#"{"topics":[{"topic":"a"},{"topic":"a"}]}"#
            )),
            "List of topics to reassign contains duplicate entries: a"
        );
        assert_eq!(
            err(parse_topics_to_move(r#"{"topics":[]}"#)),
            "The list of topics to move is empty"
        );

        let exec = |t: &str| err(parse_reassignment_to_execute(t));
        assert_eq!(
            exec(r#"{"version":1}"#),
            "The reassignment is missing the \"partitions\" field"
        );
        assert_eq!(
            exec(r#"{"version":1,"partitions":[]}"#),
            "Partition reassignment list cannot be empty"
        );
        assert_eq!(
            exec(r#"{"partitions":[{"partition":0,"replicas":[1]}]}"#),
            "partitions[0] needs a non-empty string \"topic\""
        );
        for bad in ["-1", "\"0\"", "2147483648", "null"] {
            assert_eq!(
                exec(&format!(
                    r#"{{"partitions":[{{"topic":"t","partition":{bad},"replicas":[1]}}]}}"#
                )),
                "partitions[0] needs a \"partition\" number from 0 to 2147483647"
            );
        }
        assert_eq!(
            exec(r#"{"partitions":[{"topic":"t","partition":0}]}"#),
            "partitions[0] (t-0) needs a \"replicas\" array"
        );
        assert_eq!(
            exec(r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1,"x"]}]}"#),
            "partitions[0] (t-0): replicas must be broker ids, not \"x\""
        );
        assert_eq!(
            exec(r#"{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}"#),
            "Partition replica list cannot be empty (partition t-0)"
        );
        assert_eq!(
            exec(
                r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1]},{"topic":"t","partition":0,"replicas":[2]}]}"#
            ),
            "Partition reassignment contains duplicate topic partitions: t-0"
        );
        assert_eq!(
            exec(r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1,2,1]},{"topic":"u","partition":3,"replicas":[4,4]}]}"#),
            "Partition replica lists may not contain duplicate entries: t-0 contains multiple entries for 1. u-3 contains multiple entries for 4"
        );
        assert_eq!(
            exec(r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1,2],"log_dirs":["any"]}]}"#),
            "Size of replicas list [1,2] is different from size of log dirs list [\"any\"] for partition t-0"
        );
        assert!(exec(
            r#"{"partitions":[{"topic":"t","partition":0,"replicas":[1],"log_dirs":["/data/b"]}]}"#
        )
        .starts_with("Log directory \"/data/b\" for partition t-0 is not supported"));
        // --verify and --cancel only need the partitions.
        assert_eq!(
            parse_reassignment(r#"{"partitions":[{"topic":"t","partition":0,"replicas":[]}]}"#)
                .unwrap()
                .len(),
            1
        );
    }

    #[test]
    fn broker_lists() {
        assert_eq!(parse_broker_list("0,1").unwrap(), vec![0, 1]);
        assert_eq!(parse_broker_list(" 2, 0 ").unwrap(), vec![2, 0]);
        assert_eq!(
            err(parse_broker_list("0,1,0")),
            "Broker list contains duplicate entries: 0"
        );
        assert_eq!(
            err(parse_broker_list(" ")),
            "--broker-list is empty: give the broker ids to place replicas on, e.g. \"0,1,2\""
        );
        for bad in ["0,,1", "a", "-1", "0;1"] {
            assert_eq!(
                err(parse_broker_list(bad)),
                format!("Invalid --broker-list '{bad}': expected broker ids separated by commas")
            );
        }
    }
}
