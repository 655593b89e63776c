//! `gregor consume`: kafka-console-consumer.sh over gregor-client's consumer. Prints each
//! record's value (and its key, partition or offset when `--property print.*=true` asks) one
//! per line, until `--max-messages`, `--timeout-ms` without a record, Ctrl-C, or a closed
//! standard output.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use gregor_client::consumer::{AutoOffsetReset, ConsumerConfig, IsolationLevel};
use gregor_client::{Consumer, ConsumerRecord};

use crate::admin::apply_command_config;

/// Kafka's console consumer flags.
#[derive(Debug, clap::Args)]
pub struct ConsoleConsumerArgs {
    /// The broker(s) to connect to: HOST:PORT[,HOST:PORT...].
    #[arg(long, value_name = "HOST:PORT", default_value = "127.0.0.1:9092")]
    pub bootstrap_server: String,
    /// The topic to consume.
    #[arg(long)]
    pub topic: String,
    /// The consumer group; without one, a group of this process's own
    /// (console-consumer-PID) that commits nothing.
    #[arg(long)]
    pub group: Option<String>,
    /// Start from the earliest offset when the group has no committed one (else the latest).
    #[arg(long)]
    pub from_beginning: bool,
    /// Exit after this many records.
    #[arg(long, value_name = "N")]
    pub max_messages: Option<u64>,
    /// Exit when no record arrived for this long (milliseconds).
    #[arg(long, value_name = "MS")]
    pub timeout_ms: Option<u64>,
    /// read_committed: leave out the records of aborted transactions and read only up to the
    /// last stable offset; read_uncommitted: read every record.
    #[arg(long, value_name = "LEVEL", default_value = "read_uncommitted")]
    pub isolation_level: String,
    /// Output: print.key, print.partition, print.offset (true/false), key.separator (default
    /// a tab) and line.separator (default a newline). Repeatable.
    #[arg(long, value_name = "NAME=VALUE")]
    pub property: Vec<String>,
    /// A Kafka client properties file with the connection's security settings (as for the
    /// other commands).
    #[arg(long, value_name = "FILE")]
    pub command_config: Option<PathBuf>,
}

/// How a record is printed (`--property`, named as Kafka's DefaultMessageFormatter's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Format {
    pub print_key: bool,
    pub print_partition: bool,
    pub print_offset: bool,
    pub key_separator: String,
    pub line_separator: String,
}

impl Format {
    /// From `--property NAME=VALUE` arguments; an unknown name or a value that is not
    /// true/false for a print.* setting is refused.
    pub fn parse(properties: &[String]) -> Result<Format> {
        let mut f = Format {
            print_key: false,
            print_partition: false,
            print_offset: false,
            key_separator: "\t".to_string(),
            line_separator: "\n".to_string(),
        };
        for p in properties {
            let (name, value) = p
                .split_once('=')
                .ok_or_else(|| anyhow!("--property {p}: expected NAME=VALUE"))?;
            let flag = |v: &str| match v {
                "true" => Ok(true),
                "false" => Ok(false),
                other => Err(anyhow!("--property {name}={other}: expected true or false")),
            };
            match name {
                "print.key" => f.print_key = flag(value)?,
                "print.partition" => f.print_partition = flag(value)?,
                "print.offset" => f.print_offset = flag(value)?,
                "key.separator" => f.key_separator = value.to_string(),
                "line.separator" => f.line_separator = value.to_string(),
                other => bail!(
                    "--property {other}: unsupported (print.key, print.partition, print.offset, \
                     key.separator, line.separator)"
                ),
            }
        }
        Ok(f)
    }

    /// One record as printed: `Partition:P`, `Offset:O` and the key when asked for, then the
    /// value, separated by `key.separator`; a null key or value prints as `null`.
    pub fn render(&self, r: &ConsumerRecord) -> Vec<u8> {
        let mut out = Vec::new();
        let sep = self.key_separator.as_bytes();
        if self.print_partition {
            out.extend_from_slice(format!("Partition:{}", r.partition).as_bytes());
            out.extend_from_slice(sep);
        }
        if self.print_offset {
            out.extend_from_slice(format!("Offset:{}", r.offset).as_bytes());
            out.extend_from_slice(sep);
        }
        if self.print_key {
            out.extend_from_slice(r.key.as_deref().unwrap_or(b"null"));
            out.extend_from_slice(sep);
        }
        out.extend_from_slice(r.value.as_deref().unwrap_or(b"null"));
        out.extend_from_slice(self.line_separator.as_bytes());
        out
    }
}

/// The consumer these flags describe; it commits only with `--group`.
pub fn consumer_config(a: &ConsoleConsumerArgs) -> Result<ConsumerConfig> {
    if a.topic.is_empty() {
        bail!("--topic must not be empty");
    }
    if a.timeout_ms == Some(0) {
        bail!("--timeout-ms must be positive");
    }
    let group = match &a.group {
        Some(g) => g.clone(),
        None => format!("console-consumer-{}", std::process::id()),
    };
    let mut c = ConsumerConfig::new(&a.bootstrap_server, &group)
        .with_context(|| "--bootstrap-server".to_string())?;
    c.client.client_id = "gregor-console-consumer".to_string();
    if let Some(path) = &a.command_config {
        apply_command_config(&mut c.client, path)?;
    }
    c.enable_auto_commit = a.group.is_some();
    c.auto_offset_reset = if a.from_beginning {
        AutoOffsetReset::Earliest
    } else {
        AutoOffsetReset::Latest
    };
    c.isolation_level =
        IsolationLevel::parse(&a.isolation_level).map_err(|e| anyhow!("--isolation-level: {e}"))?;
    Ok(c)
}

/// Runs the console consumer; prints "Processed a total of N messages" on standard error at
/// the end, as Kafka's does.
pub async fn run(a: ConsoleConsumerArgs) -> Result<()> {
    let format = Format::parse(&a.property)?;
    let config = consumer_config(&a)?;
    let commits = config.enable_auto_commit;
    let mut consumer = Consumer::new(config).await.context("connecting")?;
    consumer
        .subscribe(&[a.topic.as_str()])
        .await
        .with_context(|| format!("subscribing to {}", a.topic))?;
    let mut count = 0u64;
    let consumed = consume(&mut consumer, &a, &format, &mut count).await;
    if commits {
        if let Err(e) = consumer.commit_sync(None).await {
            eprintln!("gregor: committing the group's offsets failed: {e}");
        }
    }
    consumer.close().await.context("closing the consumer")?;
    eprintln!("Processed a total of {count} messages");
    consumed
}

/// Polls and prints until a stop condition, counting the records printed in `count`.
async fn consume(
    consumer: &mut Consumer,
    a: &ConsoleConsumerArgs,
    f: &Format,
    count: &mut u64,
) -> Result<()> {
    let stdout = std::io::stdout();
    let mut last_record = Instant::now();
    let ctrl_c = tokio::signal::ctrl_c();
    tokio::pin!(ctrl_c);
    loop {
        if a.max_messages.is_some_and(|m| *count >= m) {
            return Ok(());
        }
        let mut wait = Duration::from_millis(500);
        if let Some(t) = a.timeout_ms.map(Duration::from_millis) {
            let left = t.saturating_sub(last_record.elapsed());
            if left.is_zero() {
                return Ok(());
            }
            wait = wait.min(left);
        }
        let records = tokio::select! {
            r = consumer.poll(wait) => r.context("polling")?,
            _ = &mut ctrl_c => return Ok(()),
        };
        if !records.is_empty() {
            last_record = Instant::now();
        }
        let mut out = stdout.lock();
        for r in &records {
            if a.max_messages.is_some_and(|m| *count >= m) {
                break;
            }
            if out.write_all(&f.render(r)).is_err() {
                // The reader went away (`| head`): stop as a finished run.
                return Ok(());
            }
            *count += 1;
        }
        if out.flush().is_err() {
            return Ok(());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConsoleConsumerArgs,
    }

    fn args(flags: &[&str]) -> ConsoleConsumerArgs {
        let mut all = vec!["consume", "--topic", "t"];
        all.extend_from_slice(flags);
        Cli::try_parse_from(all).expect("flags parse").args
    }

    fn record(key: Option<&'static str>, value: Option<&'static str>) -> ConsumerRecord {
        ConsumerRecord {
            topic: "t".into(),
            partition: 2,
            offset: 41,
            timestamp: 0,
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: value.map(|v| Bytes::from_static(v.as_bytes())),
            headers: vec![],
            leader_epoch: None,
        }
    }

    #[test]
    fn the_isolation_level_and_start_reach_the_consumer_config() {
        let c = consumer_config(&args(&["--isolation-level", "read_committed"])).unwrap();
        assert_eq!(c.isolation_level, IsolationLevel::ReadCommitted);
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Latest);
        assert!(!c.enable_auto_commit, "a group of its own commits nothing");
        assert!(c.group_id.starts_with("console-consumer-"));
        let c = consumer_config(&args(&["--from-beginning", "--group", "g"])).unwrap();
        assert_eq!(c.isolation_level, IsolationLevel::ReadUncommitted);
        assert_eq!(c.auto_offset_reset, AutoOffsetReset::Earliest);
        assert!(c.enable_auto_commit);
        assert_eq!(c.group_id, "g");
        let err = consumer_config(&args(&["--isolation-level", "committed"]))
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("--isolation-level") && err.contains("read_committed"),
            "{err}"
        );
        assert!(consumer_config(&args(&["--timeout-ms", "0"])).is_err());
    }

    #[test]
    fn records_print_as_kafkas_default_formatter_prints_them() {
        let plain = Format::parse(&[]).unwrap();
        assert_eq!(plain.render(&record(Some("k"), Some("v"))), b"v\n");
        assert_eq!(plain.render(&record(None, None)), b"null\n");
        let all = Format::parse(&[
            "print.key=true".into(),
            "print.partition=true".into(),
            "print.offset=true".into(),
            "key.separator=|".into(),
        ])
        .unwrap();
        assert_eq!(
            all.render(&record(None, Some("v"))),
            b"Partition:2|Offset:41|null|v\n"
        );
        for bad in ["print.key=yes", "print.timestamp=true", "print.key"] {
            let err = Format::parse(&[bad.to_string()]).unwrap_err().to_string();
            assert!(err.contains("--property"), "{bad}: {err}");
        }
    }
}
