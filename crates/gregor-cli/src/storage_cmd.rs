//! `gregor storage`: what `kafka-storage.sh` does for a Gregor data directory. `format` gives a
//! new data directory its cluster id before the first start (the broker's `--cluster-id` does the
//! same at start-up); `random-uuid` prints a new cluster id; `info` shows what a directory holds.
//!
//! A Gregor broker needs no format step: an empty data directory gets a cluster id on first
//! start. Formatting first is how operators make every node of a cluster agree on an id chosen
//! beforehand, as they do with Kafka, and how they give a new cluster its first SCRAM users
//! (`--add-scram`, KIP-900): the first active controller commits them to the new metadata log.

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use gregor_broker::{BrokerConfig, BrokerOptions};

#[derive(Debug, clap::Args)]
pub struct StorageArgs {
    #[command(subcommand)]
    pub command: StorageCommand,
}

#[derive(Debug, clap::Subcommand)]
pub enum StorageCommand {
    /// Give the data directory named by the config (log.dirs) a cluster id, before the first
    /// start (like kafka-storage.sh format).
    Format(FormatArgs),
    /// Print a new random cluster id (22 characters of URL-safe base64, as Kafka's).
    RandomUuid,
    /// Show the data directory's cluster id, or that it is not formatted.
    Info(InfoArgs),
}

#[derive(Debug, clap::Args)]
pub struct FormatArgs {
    /// The broker's server.properties (its log.dirs names the data directory).
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: PathBuf,
    /// The cluster id (e.g. from `gregor storage random-uuid`).
    #[arg(short = 't', long, value_name = "ID")]
    pub cluster_id: String,
    /// Leave an already formatted directory as it is instead of failing (its cluster id must
    /// still be this one).
    #[arg(short = 'g', long)]
    pub ignore_formatted: bool,
    /// This node alone forms the controller quorum (Gregor's single-node default; refused when
    /// the config names other voters).
    #[arg(short = 's', long)]
    pub standalone: bool,
    /// Any setting, as key=value, applied after the config file (repeatable).
    #[arg(long = "override", value_name = "KEY=VALUE")]
    pub overrides: Vec<String>,
    /// A SCRAM credential the new cluster starts with, as kafka-storage.sh takes it:
    /// 'SCRAM-SHA-512=[name=admin,password=admin-secret]' (iterations=N optional, 4096 by
    /// default). Repeatable; format every controller alike.
    #[arg(
        short = 'S',
        long = "add-scram",
        value_name = "MECHANISM=[name=...,password=...]"
    )]
    pub add_scram: Vec<String>,
    /// A feature level the new cluster starts at, as kafka-storage.sh takes it:
    /// `transaction.version=N` (0-2; 2 when not given). Repeatable, one per feature.
    #[arg(short = 'f', long = "feature", value_name = "FEATURE=LEVEL")]
    pub features: Vec<String>,
}

#[derive(Debug, clap::Args)]
pub struct InfoArgs {
    /// The broker's server.properties (its log.dirs names the data directory).
    #[arg(short = 'c', long, value_name = "FILE")]
    pub config: PathBuf,
}

pub fn run(args: StorageArgs) -> Result<()> {
    match args.command {
        StorageCommand::RandomUuid => {
            println!("{}", random_cluster_id());
            Ok(())
        }
        StorageCommand::Format(args) => {
            let config = load(&args.config, &args.overrides, Some(&args.cluster_id))?;
            let mut bootstrap = feature_bootstrap_records(&args.features)?;
            bootstrap.extend(scram_bootstrap_records(&args.add_scram)?);
            let out = format(
                &config,
                &args.cluster_id,
                args.ignore_formatted,
                args.standalone,
                &bootstrap,
            )?;
            println!("{out}");
            Ok(())
        }
        StorageCommand::Info(args) => {
            let config = load(&args.config, &[], None)?;
            println!("{}", info(&config.data_dir)?);
            Ok(())
        }
    }
}

/// A new cluster id; like Kafka's `Uuid.randomUuid()`, never one whose text starts with `-`
/// (it would read as an option on a command line).
pub fn random_cluster_id() -> String {
    loop {
        let id = gregor_broker::cluster_id::kafka_uuid(uuid::Uuid::new_v4());
        if !id.starts_with('-') {
            return id;
        }
    }
}

/// The broker configuration `file` describes, validated as `gregor broker --config` would.
fn load(file: &Path, overrides: &[String], cluster_id: Option<&str>) -> Result<BrokerConfig> {
    let properties = std::fs::read_to_string(file)
        .with_context(|| format!("cannot read --config {}", file.display()))?;
    let opts = BrokerOptions {
        properties: Some(properties),
        overrides: overrides.to_vec(),
        cluster_id: cluster_id.map(str::to_string),
        ..BrokerOptions::default()
    };
    BrokerConfig::from_options(&opts)
        .with_context(|| format!("invalid configuration in {}", file.display()))
}

/// The cluster id recorded in `data_dir`, if it was formatted or has been started.
fn recorded_cluster_id(data_dir: &Path) -> Result<Option<String>> {
    let path = data_dir.join("meta.properties");
    match std::fs::read_to_string(&path) {
        Ok(text) => Ok(text
            .lines()
            .find_map(|l| l.strip_prefix("cluster.id="))
            .map(|id| id.trim().to_string())),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e).with_context(|| format!("cannot read {}", path.display())),
    }
}

/// Writes `meta.properties` with `cluster_id` into the config's data directory (created if
/// needed), and the `bootstrap` records a new metadata log starts with; returns the line to
/// print. An already formatted directory keeps what it has.
pub fn format(
    config: &BrokerConfig,
    cluster_id: &str,
    ignore_formatted: bool,
    standalone: bool,
    bootstrap: &[gregor_meta::MetadataRecord],
) -> Result<String> {
    let dir = &config.data_dir;
    if standalone {
        let others: Vec<String> = config
            .voters
            .keys()
            .filter(|id| **id != config.node_id as u64)
            .map(|id| id.to_string())
            .collect();
        if !others.is_empty() {
            bail!(
                "--standalone: controller.quorum.voters also names node(s) {}; format each node without --standalone",
                others.join(",")
            );
        }
    }
    if let Some(existing) = recorded_cluster_id(dir)? {
        if !ignore_formatted {
            bail!(
                "Log directory {} is already formatted (cluster id {existing}). Use --ignore-formatted to leave it as it is.",
                dir.display()
            );
        }
        if existing != cluster_id {
            bail!(
                "{} belongs to cluster {existing}, not --cluster-id {cluster_id}",
                dir.display()
            );
        }
        return Ok(format!(
            "All of the log directories are already formatted: {} (cluster id {existing}).",
            dir.display()
        ));
    }
    // Durably: each new directory's parent is fsynced, so the formatted directory survives a
    // power loss along with its meta.properties.
    let disk = gregor_log::Disk::real();
    disk.create_dir_all(dir)
        .with_context(|| format!("cannot create the data directory {}", dir.display()))?;
    // The bootstrap records first: a directory with a cluster id counts as formatted.
    if !bootstrap.is_empty() {
        gregor_broker::bootstrap::write(&disk, dir, bootstrap).with_context(|| {
            format!("cannot write the bootstrap records into {}", dir.display())
        })?;
    }
    let id =
        gregor_broker::cluster_id::cluster_id_for(&disk, dir, &config.voters, Some(cluster_id))
            .with_context(|| format!("cannot format {}", dir.display()))?;
    Ok(format!(
        "Formatting data directory {} with cluster id {id} for node {}.",
        dir.display(),
        config.node_id
    ))
}

/// Parses one `--add-scram` value: `MECHANISM=[name=...,password=...,iterations=...]`. Errors
/// name the setting, never its value (it may be a password).
fn parse_add_scram(text: &str) -> Result<gregor_meta::UserScramCredentialRecord> {
    use gregor_meta::{ScramCredential, ScramMechanism};
    let (mechanism, rest) = text
        .split_once('=')
        .ok_or_else(|| anyhow::anyhow!("--add-scram needs MECHANISM=[name=...,password=...]"))?;
    let mechanism = ScramMechanism::from_name(mechanism.trim()).ok_or_else(|| {
        anyhow::anyhow!(
            "--add-scram: unknown mechanism {mechanism:?} (SCRAM-SHA-256, SCRAM-SHA-512)"
        )
    })?;
    let body = rest
        .trim()
        .strip_prefix('[')
        .and_then(|b| b.strip_suffix(']'))
        .ok_or_else(|| anyhow::anyhow!("--add-scram: the settings go in square brackets"))?;
    let (mut name, mut password, mut iterations) = (None, None, 4096);
    for part in body.split(',') {
        let (k, v) = part.split_once('=').unwrap_or((part, ""));
        match k.trim() {
            "name" => name = Some(v.trim_matches('"').to_string()),
            "password" => password = Some(gregor_sasl::Password::new(v.trim_matches('"'))),
            "iterations" => {
                iterations = v
                    .trim()
                    .parse()
                    .map_err(|_| anyhow::anyhow!("--add-scram: iterations must be a number"))?
            }
            other => bail!("--add-scram: unknown setting {other:?} (name, password, iterations)"),
        }
    }
    let name = name
        .filter(|n| !n.is_empty())
        .ok_or_else(|| anyhow::anyhow!("--add-scram: name must be specified"))?;
    let password =
        password.ok_or_else(|| anyhow::anyhow!("--add-scram: password must be specified"))?;
    let salt = gregor_sasl::random::random_salt()?;
    let credential = ScramCredential::from_password(mechanism, &password, &salt, iterations)
        .map_err(|e| anyhow::anyhow!("--add-scram for {name}: {e}"))?;
    Ok(gregor_meta::UserScramCredentialRecord {
        name,
        mechanism,
        credential,
    })
}

/// The bootstrap records of every `--add-scram`.
fn scram_bootstrap_records(values: &[String]) -> Result<Vec<gregor_meta::MetadataRecord>> {
    values
        .iter()
        .map(|v| parse_add_scram(v).map(gregor_meta::MetadataRecord::UserScramCredential))
        .collect()
}

/// The bootstrap records of every `--feature NAME=LEVEL` (a level within what the brokers
/// support; level 0 is kept so that the broker does not add the feature's default level).
fn feature_bootstrap_records(values: &[String]) -> Result<Vec<gregor_meta::MetadataRecord>> {
    let mut out: Vec<gregor_meta::MetadataRecord> = Vec::new();
    for v in values {
        let (name, level) = v
            .split_once('=')
            .ok_or_else(|| anyhow::anyhow!("--feature {v}: expected FEATURE=LEVEL"))?;
        let (name, level) = (name.trim(), level.trim());
        let supported = gregor_meta::features::supported_feature(name).ok_or_else(|| {
            anyhow::anyhow!(
                "--feature {v}: unknown feature {name} (Gregor has transaction.version)"
            )
        })?;
        let level: i16 = level
            .parse()
            .ok()
            .filter(|l| (supported.min_version..=supported.max_version).contains(l))
            .ok_or_else(|| {
                anyhow::anyhow!(
                    "--feature {v}: {name} takes a level from {} to {}",
                    supported.min_version,
                    supported.max_version
                )
            })?;
        if out
            .iter()
            .any(|r| matches!(r, gregor_meta::MetadataRecord::FeatureLevel(f) if f.name == name))
        {
            anyhow::bail!("--feature {name} is given more than once");
        }
        out.push(gregor_meta::MetadataRecord::FeatureLevel(
            gregor_meta::FeatureLevelRecord {
                name: name.to_string(),
                level,
            },
        ));
    }
    Ok(out)
}

/// What `gregor storage info` prints for `data_dir`.
pub fn info(data_dir: &Path) -> Result<String> {
    Ok(match recorded_cluster_id(data_dir)? {
        Some(id) => format!(
            "Found data directory {}: formatted, cluster id {id}.",
            data_dir.display()
        ),
        None if data_dir.exists() => format!(
            "Found data directory {}: not formatted (the broker gives it a cluster id on first start).",
            data_dir.display()
        ),
        None => format!(
            "Data directory {} does not exist yet: not formatted.",
            data_dir.display()
        ),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(dir: &Path, extra: &str) -> BrokerConfig {
        let props = format!("log.dirs={}\nnode.id=1\n{extra}", dir.display());
        BrokerConfig::from_options(&BrokerOptions {
            properties: Some(props),
            ..BrokerOptions::default()
        })
        .expect("valid config")
    }

    #[test]
    fn random_ids_look_like_kafkas() {
        for _ in 0..200 {
            let id = random_cluster_id();
            assert_eq!(id.len(), 22, "{id}");
            assert!(!id.starts_with('-'), "{id}");
            assert!(id
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_'));
        }
    }

    #[test]
    fn format_writes_the_id_once_and_refuses_a_formatted_directory() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("data");
        let c = config(&dir, "");
        assert!(info(&dir).expect("info").contains("does not exist"));
        let out = format(&c, "q1Sh-9_ISia_zwGINzRvyQ", false, true, &[]).expect("format");
        assert!(out.contains("q1Sh-9_ISia_zwGINzRvyQ"), "{out}");
        assert_eq!(
            recorded_cluster_id(&dir).expect("read").as_deref(),
            Some("q1Sh-9_ISia_zwGINzRvyQ")
        );
        assert!(info(&dir).expect("info").contains("q1Sh-9_ISia_zwGINzRvyQ"));
        let again = format(&c, "q1Sh-9_ISia_zwGINzRvyQ", false, false, &[]).unwrap_err();
        assert!(
            format!("{again:#}").contains("already formatted"),
            "{again:#}"
        );
        let ignored = format(&c, "q1Sh-9_ISia_zwGINzRvyQ", true, false, &[]).expect("ignore");
        assert!(ignored.contains("already formatted"), "{ignored}");
        let other = format(&c, "AAAAAAAAAAAAAAAAAAAAAA", true, false, &[]).unwrap_err();
        assert!(
            format!("{other:#}").contains("belongs to cluster"),
            "{other:#}"
        );
    }

    #[test]
    fn feature_flags_become_bootstrap_records_within_the_supported_levels() {
        let records = feature_bootstrap_records(&["transaction.version=0".into()]).expect("ok");
        assert_eq!(
            records,
            vec![gregor_meta::MetadataRecord::FeatureLevel(
                gregor_meta::FeatureLevelRecord {
                    name: "transaction.version".into(),
                    level: 0,
                }
            )]
        );
        for bad in [
            "transaction.version=3",
            "transaction.version",
            "no.such.feature=1",
            "transaction.version=x",
        ] {
            assert!(feature_bootstrap_records(&[bad.into()]).is_err(), "{bad}");
        }
        let twice = [
            "transaction.version=1".into(),
            "transaction.version=2".into(),
        ];
        assert!(feature_bootstrap_records(&twice).is_err());
    }

    #[test]
    fn add_scram_takes_kafkas_shape_and_hides_the_password() {
        let r = parse_add_scram("SCRAM-SHA-512=[name=admin,password=admin-secret]").expect("parse");
        assert_eq!(r.name, "admin");
        assert_eq!(r.mechanism, gregor_meta::ScramMechanism::Sha512);
        assert_eq!(r.credential.iterations, 4096);
        assert!(!format!("{r:?}").contains("admin-secret"));
        let r = parse_add_scram("SCRAM-SHA-256=[name=\"bob\",password=\"b\",iterations=8192]")
            .expect("quoted");
        assert_eq!((r.name.as_str(), r.credential.iterations), ("bob", 8192));
        for bad in [
            "SCRAM-SHA-1=[name=a,password=pw-x]",
            "SCRAM-SHA-512=name=a,password=pw-x",
            "SCRAM-SHA-512=[password=pw-x]",
            "SCRAM-SHA-512=[name=a]",
            "SCRAM-SHA-512=[name=a,password=pw-x,iterations=10]",
            "SCRAM-SHA-512=[name=a,password=pw-x,salt=abc]",
        ] {
            let e = format!("{:#}", parse_add_scram(bad).unwrap_err());
            assert!(!e.contains("pw-x"), "{e}");
        }
    }

    #[test]
    fn format_writes_the_bootstrap_records_for_a_new_directory_only() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let dir = tmp.path().join("data");
        let c = config(&dir, "");
        let records =
            scram_bootstrap_records(&["SCRAM-SHA-512=[name=admin,password=admin-secret]".into()])
                .expect("records");
        format(&c, "q1Sh-9_ISia_zwGINzRvyQ", false, true, &records).expect("format");
        assert_eq!(gregor_broker::bootstrap::read(&dir).expect("read"), records);
        let raw = std::fs::read(gregor_broker::bootstrap::path(&dir)).expect("file");
        assert!(!String::from_utf8_lossy(&raw).contains("admin-secret"));
        // Formatted already: --ignore-formatted leaves the directory, bootstrap file included.
        let other =
            scram_bootstrap_records(&["SCRAM-SHA-256=[name=eve,password=x]".into()]).expect("eve");
        format(&c, "q1Sh-9_ISia_zwGINzRvyQ", true, false, &other).expect("ignored");
        assert_eq!(gregor_broker::bootstrap::read(&dir).expect("read"), records);
        let fresh = tmp.path().join("plain");
        format(
            &config(&fresh, ""),
            "q1Sh-9_ISia_zwGINzRvyQ",
            false,
            true,
            &[],
        )
        .expect("format");
        assert_eq!(
            gregor_broker::bootstrap::read(&fresh).expect("read"),
            Vec::new()
        );
    }

    #[test]
    fn standalone_is_refused_with_other_voters() {
        let tmp = tempfile::tempdir().expect("temp dir");
        let c = config(
            &tmp.path().join("d"),
            "process.roles=broker,controller\nlisteners=PLAINTEXT://127.0.0.1:19092,CONTROLLER://127.0.0.1:19093\ncontroller.quorum.voters=1@127.0.0.1:19093,2@127.0.0.1:19095\n",
        );
        let e = format(&c, "q1Sh-9_ISia_zwGINzRvyQ", false, true, &[]).unwrap_err();
        assert!(format!("{e:#}").contains("node(s) 2"), "{e:#}");
        format(&c, "q1Sh-9_ISia_zwGINzRvyQ", false, false, &[])
            .expect("format without --standalone");
    }
}
