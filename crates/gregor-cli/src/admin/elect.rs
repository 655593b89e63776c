//! `gregor elect`: what `kafka-leader-election.sh` does (preferred or unclean leader election
//! through the ElectLeaders API), with its options and its output lines.

use std::collections::BTreeSet;
use std::path::PathBuf;

use anyhow::{anyhow, bail, Context, Result};
use gregor_client::admin::{ElectionType, EntityResult};
use gregor_client::{KafkaCode, TopicPartition};

use super::common::ConnectionArgs;

/// Elect partition leaders: the preferred replica, or any live replica for a partition
/// without a leader (unclean).
#[derive(Debug, Clone, clap::Args)]
pub struct ElectArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// "preferred" (move leadership back to the first replica of the assignment) or "unclean"
    /// (elect a live out-of-sync replica for a partition without a leader; may lose records).
    #[arg(long, value_name = "preferred|unclean")]
    pub election_type: Option<String>,
    /// The topic of the partition to elect a leader for (with --partition).
    #[arg(long)]
    pub topic: Option<String>,
    /// The partition to elect a leader for (with --topic).
    #[arg(long, allow_negative_numbers = true)]
    pub partition: Option<i32>,
    /// Elect leaders for every partition of every topic that needs it.
    #[arg(long)]
    pub all_topic_partitions: bool,
    /// A JSON file naming the partitions: {"partitions": [{"topic": "t", "partition": 0}]}.
    #[arg(long, value_name = "FILE")]
    pub path_to_json_file: Option<PathBuf>,
}

/// Which partitions an election covers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ElectionScope {
    /// Every partition (the request names none).
    All,
    /// The listed partitions.
    Partitions(Vec<TopicPartition>),
    /// The partitions listed in a JSON file (read when the command runs).
    File(PathBuf),
}

/// A validated `gregor elect` invocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElectAction {
    pub election: ElectionType,
    pub scope: ElectionScope,
}

/// Kafka's spelling of an election type in the tool's output.
pub fn election_name(election: ElectionType) -> &'static str {
    match election {
        ElectionType::Preferred => "PREFERRED",
        ElectionType::Unclean => "UNCLEAN",
    }
}

/// `--election-type`, in any case as Kafka accepts it.
pub fn parse_election_type(text: &str) -> Result<ElectionType> {
    match text.trim().to_ascii_lowercase().as_str() {
        "preferred" => Ok(ElectionType::Preferred),
        "unclean" => Ok(ElectionType::Unclean),
        _ => bail!("Invalid --election-type '{text}': expected preferred or unclean"),
    }
}

impl ElectArgs {
    /// Checks the options the way kafka-leader-election.sh does and says what to do.
    pub fn action(&self) -> Result<ElectAction> {
        let election = parse_election_type(
            self.election_type
                .as_deref()
                .ok_or_else(|| anyhow!("Missing required option(s): --election-type"))?,
        )?;
        let given = [
            self.topic.is_some(),
            self.all_topic_partitions,
            self.path_to_json_file.is_some(),
        ]
        .into_iter()
        .filter(|&g| g)
        .count();
        if given != 1 {
            bail!(
                "One and only one of the following options is required: --topic, --all-topic-partitions, --path-to-json-file"
            );
        }
        let scope = match (&self.topic, self.partition) {
            (Some(_), None) => bail!("Missing required option(s): --partition"),
            (None, Some(_)) => bail!("Option --partition is only allowed if --topic is used"),
            (Some(topic), Some(partition)) => {
                if topic.trim().is_empty() {
                    bail!("--topic must not be empty");
                }
                if partition < 0 {
                    bail!("--partition must be 0 or more, not {partition}");
                }
                ElectionScope::Partitions(vec![TopicPartition::new(topic.clone(), partition)])
            }
            (None, None) if self.all_topic_partitions => ElectionScope::All,
            (None, None) => ElectionScope::File(
                self.path_to_json_file
                    .clone()
                    .expect("one of the three options is given"),
            ),
        };
        Ok(ElectAction { election, scope })
    }
}

/// Parses Kafka's election JSON, `{"partitions": [{"topic": "t", "partition": 0}, ...]}`
/// (other fields, such as `version`, are ignored), with Kafka's messages for an empty file, a
/// missing `partitions` field and duplicates.
pub fn parse_election_json(text: &str) -> Result<Vec<TopicPartition>> {
    if text.trim().is_empty() {
        bail!("Replica election data is empty");
    }
    let value: serde_json::Value =
        serde_json::from_str(text).context("Replica election data is not valid JSON")?;
    let partitions = value
        .as_object()
        .ok_or_else(|| anyhow!("Replica election data must be a JSON object"))?
        .get("partitions")
        .ok_or_else(|| anyhow!("Replica election data is missing \"partitions\" field"))?
        .as_array()
        .ok_or_else(|| anyhow!("Replica election data: \"partitions\" must be an array"))?;
    let mut out = Vec::with_capacity(partitions.len());
    let mut seen = BTreeSet::new();
    let mut duplicates = BTreeSet::new();
    for (i, entry) in partitions.iter().enumerate() {
        let topic = entry
            .get("topic")
            .and_then(|t| t.as_str())
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                anyhow!("Replica election data: partitions[{i}] needs a non-empty string \"topic\"")
            })?;
        let partition = entry
            .get("partition")
            .and_then(|p| p.as_i64())
            .and_then(|p| i32::try_from(p).ok())
            .filter(|p| *p >= 0)
            .ok_or_else(|| {
                anyhow!(
                    "Replica election data: partitions[{i}] needs a \"partition\" number from 0 to {}",
                    i32::MAX
                )
            })?;
        let tp = TopicPartition::new(topic, partition);
        if !seen.insert(tp.clone()) {
            duplicates.insert(tp.to_string());
            continue;
        }
        out.push(tp);
    }
    if !duplicates.is_empty() {
        bail!(
            "Replica election data contains duplicate partitions: {}",
            duplicates.into_iter().collect::<Vec<_>>().join(",")
        );
    }
    Ok(out)
}

/// What kafka-leader-election.sh prints for the results: one line for the elected partitions,
/// one for those that already had the leader asked for, one line per failure. Partitions are
/// sorted. Returns the text and the number of failures.
pub fn format_election_results(
    election: ElectionType,
    results: &EntityResult<TopicPartition, ()>,
) -> (String, usize) {
    let mut sorted: Vec<_> = results.iter().collect();
    sorted.sort_by(|a, b| a.0.cmp(&b.0));
    let list = |want: &dyn Fn(&Result<(), gregor_client::KafkaError>) -> bool| {
        sorted
            .iter()
            .filter(|(_, r)| want(r))
            .map(|(tp, _)| tp.to_string())
            .collect::<Vec<_>>()
    };
    let elected = list(&|r| r.is_ok());
    let not_needed = list(&|r| matches!(r, Err(e) if e.code == KafkaCode::ELECTION_NOT_NEEDED));
    let name = election_name(election);
    let mut out = String::new();
    if !elected.is_empty() {
        out.push_str(&format!(
            "Successfully completed leader election ({name}) for partitions {}\n",
            elected.join(", ")
        ));
    }
    if !not_needed.is_empty() {
        out.push_str(&format!(
            "Valid replica already elected for partitions {}\n",
            not_needed.join(", ")
        ));
    }
    let mut failed = 0;
    for (tp, r) in &sorted {
        if let Err(e) = r {
            if e.code != KafkaCode::ELECTION_NOT_NEEDED {
                failed += 1;
                out.push_str(&format!(
                    "Error completing leader election ({name}) for partition: {tp}: {e}\n"
                ));
            }
        }
    }
    (out, failed)
}

/// Runs `gregor elect`.
pub async fn run_elect(args: ElectArgs) -> Result<()> {
    let action = args.action()?;
    let partitions = match &action.scope {
        ElectionScope::All => None,
        ElectionScope::Partitions(list) => Some(list.clone()),
        ElectionScope::File(path) => {
            let text = std::fs::read_to_string(path)
                .with_context(|| format!("reading {}", path.display()))?;
            Some(parse_election_json(&text).with_context(|| format!("in {}", path.display()))?)
        }
    };
    let admin = args.connection.connect().await?;
    let results = admin
        .elect_leaders(
            action.election,
            partitions.as_deref(),
            args.connection.request_timeout_ms(),
        )
        .await?;
    let (text, failed) = format_election_results(action.election, &results);
    print!("{text}");
    if failed > 0 {
        bail!("{failed} replica(s) could not be elected");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;
    use gregor_client::KafkaError;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ElectArgs,
    }

    fn parse(args: &[&str]) -> Result<ElectAction> {
        let cli = Cli::try_parse_from(std::iter::once("elect").chain(args.iter().copied()))?;
        cli.args.action()
    }

    fn err(args: &[&str]) -> String {
        format!("{:#}", parse(args).unwrap_err())
    }

    fn tp(t: &str, p: i32) -> TopicPartition {
        TopicPartition::new(t, p)
    }

    #[test]
    fn the_three_ways_to_name_partitions() {
        assert_eq!(
            parse(&["--election-type", "preferred", "--all-topic-partitions"]).unwrap(),
            ElectAction {
                election: ElectionType::Preferred,
                scope: ElectionScope::All
            }
        );
        assert_eq!(
            parse(&[
                "--election-type",
                "UNCLEAN",
                "--topic",
                "tp_demo_03",
                "--partition",
                "2"
            ])
            .unwrap(),
            ElectAction {
                election: ElectionType::Unclean,
                scope: ElectionScope::Partitions(vec![tp("tp_demo_03", 2)])
            }
        );
        assert_eq!(
            parse(&[
                "--bootstrap-server",
                "127.0.0.1:9093",
                "--election-type",
                "Preferred",
                "--path-to-json-file",
                "preferred-replica.json"
            ])
            .unwrap()
            .scope,
            ElectionScope::File("preferred-replica.json".into())
        );
    }

    #[test]
    fn bad_flag_combinations_get_kafkas_messages() {
        assert_eq!(
            err(&["--all-topic-partitions"]),
            "Missing required option(s): --election-type"
        );
        assert_eq!(
            err(&["--election-type", "dirty", "--all-topic-partitions"]),
            "Invalid --election-type 'dirty': expected preferred or unclean"
        );
        let one_of = "One and only one of the following options is required: --topic, --all-topic-partitions, --path-to-json-file";
        assert_eq!(err(&["--election-type", "preferred"]), one_of);
        assert_eq!(
            err(&[
                "--election-type",
                "preferred",
                "--all-topic-partitions",
                "--path-to-json-file",
                "f.json"
            ]),
            one_of
        );
        assert_eq!(
            err(&[
                "--election-type",
                "preferred",
                "--topic",
                "t",
                "--partition",
                "0",
                "--all-topic-partitions"
            ]),
            one_of
        );
        assert_eq!(
            err(&["--election-type", "preferred", "--topic", "t"]),
            "Missing required option(s): --partition"
        );
        assert_eq!(
            err(&[
                "--election-type",
                "preferred",
                "--all-topic-partitions",
                "--partition",
                "1"
            ]),
            "Option --partition is only allowed if --topic is used"
        );
        assert_eq!(
            err(&[
                "--election-type",
                "preferred",
                "--topic",
                "t",
                "--partition",
                "-1"
            ]),
            "--partition must be 0 or more, not -1"
        );
    }

    #[test]
    fn the_seed_json_file_is_accepted_as_is() {
        let seed = r#"{    "partitions": [        {            "topic":"tp_demo_03",            "partition":0        },        {            "topic":"tp_demo_03",            "partition":1        },        {            "topic":"tp_demo_03",            "partition":2        }    ]}"#;
        assert_eq!(
            parse_election_json(seed).unwrap(),
            vec![
                tp("tp_demo_03", 0),
                tp("tp_demo_03", 1),
                tp("tp_demo_03", 2)
            ]
        );
        // What Kafka's own tools write, with a version field.
        assert_eq!(
            parse_election_json(r#"{"version":1,"partitions":[{"topic":"t","partition":5}]}"#)
                .unwrap(),
            vec![tp("t", 5)]
        );
        assert!(parse_election_json(r#"{"partitions":[]}"#)
            .unwrap()
            .is_empty());
    }

    #[test]
    fn bad_json_gets_clear_errors() {
        let e = |text: &str| format!("{:#}", parse_election_json(text).unwrap_err());
        assert_eq!(e("  \n"), "Replica election data is empty");
        assert!(e("{\"partitions\": [").starts_with("Replica election data is not valid JSON"));
        assert_eq!(
            e(r#"{"version":1}"#),
            "Replica election data is missing \"partitions\" field"
        );
        assert_eq!(e("[1,2]"), "Replica election data must be a JSON object");
        assert_eq!(
            e(r#"{"partitions":{"topic":"t"}}"#),
            "Replica election data: \"partitions\" must be an array"
        );
        assert_eq!(
            e(r#"{"partitions":[{"partition":0}]}"#),
            "Replica election data: partitions[0] needs a non-empty string \"topic\""
        );
        for bad in ["\"0\"", "-1", "2147483648", "1.5", "null"] {
            let text = format!(r#"{{"partitions":[{{"topic":"t","partition":{bad}}}]}}"#);
            assert!(
                e(&text)
                    .contains("partitions[0] needs a \"partition\" number from 0 to 2147483647"),
                "{bad}: {}",
                e(&text)
            );
        }
        assert_eq!(
            e(
                r#"{"partitions":[{"topic":"t","partition":1},{"topic":"u","partition":0},{"topic":"t","partition":1}]}"#
            ),
            "Replica election data contains duplicate partitions: t-1"
        );
    }

    #[test]
    fn results_print_as_kafka_prints_them() {
        let kafka_err = |code: i16, message: &str| {
            Err(KafkaError::new(KafkaCode(code), Some(message.to_string())))
        };
        let results: EntityResult<TopicPartition, ()> = vec![
            (tp("t", 1), Ok(())),
            (
                tp("t", 2),
                kafka_err(84, "Leader election not needed for t-2."),
            ),
            (tp("t", 0), Ok(())),
            (
                tp("t", 3),
                kafka_err(80, "The preferred leader of t-3 is not available."),
            ),
            (tp("u", 9), kafka_err(3, "No such topic as u")),
        ];
        let (text, failed) = format_election_results(ElectionType::Preferred, &results);
        assert_eq!(failed, 2);
        assert_eq!(
            text,
            "Successfully completed leader election (PREFERRED) for partitions t-0, t-1\n\
             Valid replica already elected for partitions t-2\n\
             Error completing leader election (PREFERRED) for partition: t-3: PREFERRED_LEADER_NOT_AVAILABLE (80): The preferred leader of t-3 is not available.\n\
             Error completing leader election (PREFERRED) for partition: u-9: UNKNOWN_TOPIC_OR_PARTITION (3): No such topic as u\n"
        );
        let (text, failed) =
            format_election_results(ElectionType::Unclean, &vec![(tp("t", 0), Ok(()))]);
        assert_eq!(
            (text.as_str(), failed),
            (
                "Successfully completed leader election (UNCLEAN) for partitions t-0\n",
                0
            )
        );
        // Nothing to report (every partition already led as asked, --all-topic-partitions).
        assert_eq!(
            format_election_results(ElectionType::Preferred, &Vec::new()),
            (String::new(), 0)
        );
    }
}
