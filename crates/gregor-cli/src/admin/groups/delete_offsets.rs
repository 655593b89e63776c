//! `gregor groups --delete-offsets` (KIP-496): one group's committed offsets of the `--topic`
//! partitions removed with OffsetDelete, reported as kafka-consumer-groups.sh reports it: a
//! summary line (the request's outcome, or which error stopped it), then TOPIC, PARTITION and
//! STATUS per partition.

use anyhow::{bail, Result};
use gregor_client::admin::DeletedOffsets;
use gregor_client::{Admin, KafkaCode, KafkaError, TopicPartition};

use crate::admin::common::pad;
use crate::admin::reset::TopicScope;

/// One row of the table.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StatusRow {
    pub topic: String,
    /// `None`: a topic named alone whose partitions could not be listed.
    pub partition: Option<i32>,
    pub error: Option<KafkaError>,
}

/// Codes the summary line tells apart that `KafkaCode` has no constant for.
const INVALID_GROUP_ID: KafkaCode = KafkaCode(24);
const TOPIC_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(29);
const GROUP_AUTHORIZATION_FAILED: KafkaCode = KafkaCode(30);
const GROUP_SUBSCRIBED_TO_TOPIC: KafkaCode = KafkaCode(86);

/// The line before the table. `first_error` is the group-level error, else the first
/// partition's, as Kafka's admin fails the call with it.
pub fn summary_line(group: &str, topic_args: &[String], first_error: Option<KafkaCode>) -> String {
    let Some(code) = first_error else {
        return format!(
            "Request succeed for deleting offsets with topic {} group {group}",
            topic_args.join(", ")
        );
    };
    let why = match code {
        KafkaCode::GROUP_ID_NOT_FOUND => format!("'{group}' does not exist."),
        INVALID_GROUP_ID => format!("'{group}' is not valid."),
        GROUP_AUTHORIZATION_FAILED => format!("Access to '{group}' is not authorized."),
        KafkaCode::NON_EMPTY_GROUP => format!(
            "Deleting offsets of a consumer group '{group}' is forbidden if the group is not empty."
        ),
        GROUP_SUBSCRIBED_TO_TOPIC
        | TOPIC_AUTHORIZATION_FAILED
        | KafkaCode::UNKNOWN_TOPIC_OR_PARTITION => {
            "Encounter some partition level error, see the follow-up details:".to_string()
        }
        other => format!("Encounter some unknown error: {}", other.name()),
    };
    format!("\nError: {why}")
}

/// A row's STATUS: `Successful`, or `Error: ` with the Kafka error code's name and number (and
/// the broker's message, when it sends one).
fn status(error: &Option<KafkaError>) -> String {
    match error {
        None => "Successful".to_string(),
        Some(e) => format!("Error: {e}"),
    }
}

/// The TOPIC / PARTITION / STATUS table, sorted by topic and partition ("Not Provided" first).
pub fn format_status_table(rows: &[StatusRow]) -> String {
    let mut sorted: Vec<&StatusRow> = rows.iter().collect();
    sorted.sort_by(|a, b| (&a.topic, a.partition).cmp(&(&b.topic, b.partition)));
    let line = |topic: &str, partition: &str, status: &str| {
        format!(
            "\n{} {} {}",
            pad(topic, 30),
            pad(partition, 15),
            pad(status, 15)
        )
    };
    let mut out = line("TOPIC", "PARTITION", "STATUS");
    for r in sorted {
        let partition = r
            .partition
            .map_or_else(|| "Not Provided".to_string(), |p| p.to_string());
        out.push_str(&line(&r.topic, &partition, &status(&r.error)));
    }
    out.push('\n');
    out
}

/// The table's rows: the partitions' results, after the topics that could not be listed.
pub fn status_rows(unlisted: Vec<StatusRow>, result: &DeletedOffsets) -> Vec<StatusRow> {
    let mut rows = unlisted;
    rows.extend(result.partitions.iter().map(|(tp, r)| StatusRow {
        topic: tp.topic.clone(),
        partition: Some(tp.partition),
        error: r.as_ref().err().cloned(),
    }));
    rows
}

/// The partitions of the `--topic` scopes: those listed, or every partition of a topic named
/// alone (from metadata). A topic the cluster refuses to describe becomes a row of its own.
async fn scope_partitions(
    admin: &Admin,
    topics: &[TopicScope],
) -> Result<(Vec<TopicPartition>, Vec<StatusRow>)> {
    let mut partitions = Vec::new();
    let mut unlisted = Vec::new();
    for (topic, parts) in topics {
        if let Some(ps) = parts {
            partitions.extend(ps.iter().map(|p| TopicPartition::new(topic.clone(), *p)));
            continue;
        }
        match admin.describe_topics(std::slice::from_ref(topic)).await {
            Ok(described) => partitions.extend(described.iter().flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| TopicPartition::new(t.name.clone(), p.partition))
            })),
            Err(gregor_client::Error::Kafka { error, .. }) => unlisted.push(StatusRow {
                topic: topic.clone(),
                partition: None,
                error: Some(error),
            }),
            Err(e) => return Err(e.into()),
        }
    }
    Ok((partitions, unlisted))
}

/// A `--topic` scope as given: `topic` or `topic:0,2`.
fn scope_text((topic, parts): &TopicScope) -> String {
    match parts {
        None => topic.clone(),
        Some(ps) => {
            let ps: Vec<String> = ps.iter().map(i32::to_string).collect();
            format!("{topic}:{}", ps.join(","))
        }
    }
}

/// Runs `--delete-offsets`; fails (exit status 1) when any partition's offset was not deleted.
pub async fn delete_offsets(admin: &Admin, group: &str, topics: &[TopicScope]) -> Result<()> {
    let (partitions, unlisted) = scope_partitions(admin, topics).await?;
    let result = admin.delete_committed_offsets(group, &partitions).await?;
    // A topic that could not be listed fails the request as a refused partition does.
    let first_error = result
        .first_error()
        .or_else(|| unlisted.iter().find_map(|r| r.error.as_ref()))
        .cloned();
    let topic_args: Vec<String> = topics.iter().map(scope_text).collect();
    println!(
        "{}",
        summary_line(group, &topic_args, first_error.as_ref().map(|e| e.code))
    );
    print!("{}", format_status_table(&status_rows(unlisted, &result)));
    if let Some(e) = first_error {
        bail!("deleting the offsets of group '{group}': {e}");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(topic: &str, partition: Option<i32>, code: Option<i16>) -> StatusRow {
        StatusRow {
            topic: topic.into(),
            partition,
            error: code.map(|c| KafkaError::new(KafkaCode(c), None)),
        }
    }

    #[test]
    fn table_is_sorted_with_kafka_columns_and_error_texts() {
        let rows = vec![
            row("t", Some(1), Some(86)),
            row("t", Some(0), None),
            row("gone", None, Some(3)),
        ];
        let got = format_status_table(&rows);
        let lines: Vec<&str> = got.lines().collect();
        assert_eq!(lines[0], "");
        assert_eq!(
            lines[1],
            format!("{:<30} {:<15} {:<15}", "TOPIC", "PARTITION", "STATUS")
        );
        assert_eq!(
            lines[2],
            format!(
                "{:<30} {:<15} Error: UNKNOWN_TOPIC_OR_PARTITION (3)",
                "gone", "Not Provided"
            )
        );
        assert_eq!(
            lines[3],
            format!("{:<30} {:<15} {:<15}", "t", "0", "Successful")
        );
        assert_eq!(
            lines[4],
            format!(
                "{:<30} {:<15} Error: GROUP_SUBSCRIBED_TO_TOPIC (86)",
                "t", "1"
            )
        );
        let with_message = StatusRow {
            error: Some(KafkaError::new(KafkaCode(86), Some("still used".into()))),
            ..row("t", Some(2), None)
        };
        assert!(format_status_table(&[with_message])
            .contains("Error: GROUP_SUBSCRIBED_TO_TOPIC (86): still used"));
        assert_eq!(lines.len(), 5);
        assert!(got.ends_with('\n'));
    }

    #[test]
    fn summary_names_the_outcome() {
        let args = vec!["t".to_string(), "u:0,2".to_string()];
        assert_eq!(
            summary_line("g", &args, None),
            "Request succeed for deleting offsets with topic t, u:0,2 group g"
        );
        assert_eq!(
            summary_line("g", &args, Some(KafkaCode::GROUP_ID_NOT_FOUND)),
            "\nError: 'g' does not exist."
        );
        assert!(summary_line("g", &args, Some(KafkaCode::NON_EMPTY_GROUP))
            .contains("forbidden if the group is not empty"));
        for code in [86, 29, 3] {
            assert!(summary_line("g", &args, Some(KafkaCode(code))).contains("partition level"));
        }
        assert!(summary_line("g", &args, Some(KafkaCode(15)))
            .ends_with("unknown error: COORDINATOR_NOT_AVAILABLE"));
    }

    #[test]
    fn scopes_print_as_given_and_rows_follow_the_results() {
        assert_eq!(scope_text(&("t".into(), None)), "t");
        assert_eq!(scope_text(&("t".into(), Some(vec![0, 2]))), "t:0,2");
        let result = DeletedOffsets {
            error: None,
            partitions: vec![
                (TopicPartition::new("t", 0), Ok(())),
                (
                    TopicPartition::new("t", 1),
                    Err(KafkaError::new(KafkaCode(86), None)),
                ),
            ],
        };
        let rows = status_rows(vec![row("gone", None, Some(3))], &result);
        assert_eq!(
            rows,
            vec![
                row("gone", None, Some(3)),
                row("t", Some(0), None),
                row("t", Some(1), Some(86))
            ]
        );
    }
}
