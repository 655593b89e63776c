//! `gregor features`: what `kafka-features.sh` does (KIP-584): describe the features the
//! brokers support with their finalized levels (from ApiVersions), and upgrade, downgrade or
//! disable one (UpdateFeatures, sent to the controller), with Kafka's verbs and lines.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use gregor_client::Target;
use kafka_protocol::messages::api_versions_response::ApiVersionsResponse;
use kafka_protocol::messages::update_features_request::FeatureUpdateKey;
use kafka_protocol::messages::{ApiVersionsRequest, UpdateFeaturesRequest, UpdateFeaturesResponse};
use kafka_protocol::protocol::StrBytes;

use super::common::ConnectionArgs;

/// Describe and change feature levels.
#[derive(Debug, Clone, clap::Args)]
pub struct FeaturesArgs {
    /// The broker(s) to connect to: HOST:PORT[,HOST:PORT...].
    #[arg(
        long,
        global = true,
        value_name = "HOST:PORT",
        default_value = "127.0.0.1:9092"
    )]
    pub bootstrap_server: String,
    /// How long each operation may take, retries included (milliseconds).
    #[arg(long, global = true, value_name = "MS", default_value_t = 30_000)]
    pub timeout_ms: u64,
    /// A Kafka client properties file (security.protocol, ssl.*, sasl.*; see `gregor topics`).
    #[arg(long, global = true, value_name = "FILE")]
    pub command_config: Option<std::path::PathBuf>,
    #[command(subcommand)]
    pub verb: FeaturesVerb,
}

#[derive(Debug, Clone, clap::Subcommand)]
pub enum FeaturesVerb {
    /// Each supported feature with its supported range, finalized level and epoch.
    Describe,
    /// Upgrade features: --feature NAME=LEVEL (repeatable).
    Upgrade {
        #[arg(long = "feature", value_name = "NAME=LEVEL", required = true)]
        features: Vec<String>,
        /// Only validate the change.
        #[arg(long)]
        dry_run: bool,
    },
    /// Downgrade features: --feature NAME=LEVEL (repeatable).
    Downgrade {
        #[arg(long = "feature", value_name = "NAME=LEVEL", required = true)]
        features: Vec<String>,
        /// A downgrade that may lose metadata.
        #[arg(long = "unsafe")]
        unsafe_: bool,
        /// Only validate the change.
        #[arg(long)]
        dry_run: bool,
    },
    /// Disable features (level 0): --feature NAME (repeatable).
    Disable {
        #[arg(long = "feature", value_name = "NAME", required = true)]
        features: Vec<String>,
        /// A downgrade that may lose metadata.
        #[arg(long = "unsafe")]
        unsafe_: bool,
        /// Only validate the change.
        #[arg(long)]
        dry_run: bool,
    },
}

/// Kafka's UpgradeType: 1 upgrade, 2 safe downgrade, 3 unsafe downgrade.
fn downgrade_type(unsafe_: bool) -> i8 {
    if unsafe_ {
        3
    } else {
        2
    }
}

/// `NAME=LEVEL`, with kafka-features.sh's messages.
pub fn parse_name_and_level(input: &str) -> Result<(String, i16)> {
    let (name, level) = input.split_once('=').ok_or_else(|| {
        anyhow!("Can't parse feature=level string {input}: equals sign not found.")
    })?;
    let level = level.trim();
    let level: i16 = level.parse().map_err(|_| {
        anyhow!("Can't parse feature=level string {input}: unable to parse {level} as a short.")
    })?;
    Ok((name.trim().to_string(), level))
}

/// What an upgrade, downgrade or disable asks for.
struct Plan {
    /// The verb, as kafka-features.sh's lines name it.
    op: &'static str,
    /// By feature name: (level, upgrade type).
    updates: BTreeMap<String, (i16, i8)>,
    dry_run: bool,
}

/// The plan of a verb that changes levels.
fn planned(verb: &FeaturesVerb) -> Result<Plan> {
    let mut out = BTreeMap::new();
    let (op, entries, upgrade_type, dry_run) = match verb {
        FeaturesVerb::Describe => bail!("describe changes nothing"),
        FeaturesVerb::Upgrade { features, dry_run } => {
            let parsed = features.iter().map(|f| parse_name_and_level(f));
            ("upgrade", parsed.collect::<Result<Vec<_>>>()?, 1, *dry_run)
        }
        FeaturesVerb::Downgrade {
            features,
            unsafe_,
            dry_run,
        } => {
            let parsed = features.iter().map(|f| parse_name_and_level(f));
            let t = downgrade_type(*unsafe_);
            (
                "downgrade",
                parsed.collect::<Result<Vec<_>>>()?,
                t,
                *dry_run,
            )
        }
        FeaturesVerb::Disable {
            features,
            unsafe_,
            dry_run,
        } => {
            let parsed = features.iter().map(|f| (f.trim().to_string(), 0));
            (
                "disable",
                parsed.collect(),
                downgrade_type(*unsafe_),
                *dry_run,
            )
        }
    };
    for (name, level) in entries {
        if out.insert(name.clone(), (level, upgrade_type)).is_some() {
            bail!("Feature {name} was specified more than once.");
        }
    }
    Ok(Plan {
        op,
        updates: out,
        dry_run,
    })
}

/// kafka-features.sh's describe lines.
pub fn describe_lines(r: &ApiVersionsResponse) -> Vec<String> {
    let finalized: BTreeMap<&str, i16> = r
        .finalized_features
        .iter()
        .map(|f| (f.name.as_str(), f.max_version_level))
        .collect();
    let epoch = if r.finalized_features_epoch >= 0 {
        r.finalized_features_epoch.to_string()
    } else {
        "-".to_string()
    };
    let mut supported: Vec<_> = r.supported_features.iter().collect();
    supported.sort_by(|a, b| a.name.as_str().cmp(b.name.as_str()));
    supported
        .into_iter()
        .map(|f| {
            let level = finalized.get(f.name.as_str()).copied().unwrap_or(0);
            format!(
                "Feature: {}\tSupportedMinVersion: {}\tSupportedMaxVersion: {}\t\
                 FinalizedVersionLevel: {level}\tEpoch: {epoch}",
                f.name.as_str(),
                f.min_version,
                f.max_version
            )
        })
        .collect()
}

/// The line for one feature's outcome, as kafka-features.sh prints it.
pub fn outcome_line(
    op: &str,
    feature: &str,
    level: i16,
    dry_run: bool,
    error: Option<&str>,
) -> String {
    match error {
        Some(e) => {
            let helper = if dry_run { "Can not" } else { "Could not" };
            let what = if op == "disable" {
                format!("disable {feature}")
            } else {
                format!("{op} {feature} to {level}")
            };
            format!("{helper} {what}. {e}")
        }
        None => {
            let verb = if dry_run { "can be" } else { "was" };
            let what = if op == "disable" {
                "disabled.".to_string()
            } else {
                format!("{op}d to {level}.")
            };
            format!("{feature} {verb} {what}")
        }
    }
}

pub async fn run_features(args: FeaturesArgs) -> Result<()> {
    let connection = ConnectionArgs {
        bootstrap_server: args.bootstrap_server.clone(),
        timeout_ms: args.timeout_ms,
        command_config: args.command_config.clone(),
    };
    if matches!(args.verb, FeaturesVerb::Describe) {
        let admin = connection.connect().await?;
        let (_, r) = admin
            .client()
            .send::<ApiVersionsRequest, _>(&Target::Any, |_| Ok(ApiVersionsRequest::default()))
            .await?;
        for line in describe_lines(&r) {
            println!("{line}");
        }
        return Ok(());
    }
    let plan = planned(&args.verb)?;
    let admin = connection.connect().await?;
    let timeout_ms = connection.request_timeout_ms();
    let (version, r) = admin
        .client()
        .send::<UpdateFeaturesRequest, _>(&Target::Controller, |v| {
            update_request(&plan, v, timeout_ms)
        })
        .await?;
    let failures = print_outcomes(&plan, &r);
    tracing::debug!(version, failures, "UpdateFeatures answered");
    if failures > 0 {
        bail!(
            "{failures} out of {} operation(s) failed.",
            plan.updates.len()
        );
    }
    Ok(())
}

/// The UpdateFeatures request of `plan` in version `v`.
fn update_request(
    plan: &Plan,
    v: i16,
    timeout_ms: i32,
) -> gregor_client::Result<UpdateFeaturesRequest> {
    if v < 1 && plan.dry_run {
        return Err(gregor_client::Error::InvalidArgument(
            "--dry-run needs UpdateFeatures v1".into(),
        ));
    }
    let mut req = UpdateFeaturesRequest::default();
    req.timeout_ms = timeout_ms;
    req.validate_only = plan.dry_run;
    req.feature_updates = plan
        .updates
        .iter()
        .map(|(name, (level, upgrade_type))| {
            let mut k = FeatureUpdateKey::default();
            k.feature = StrBytes::from_string(name.clone());
            k.max_version_level = *level;
            // v0 has only `allow_downgrade`; v1+ only the upgrade type.
            if v == 0 {
                k.allow_downgrade = *upgrade_type != 1;
            } else {
                k.upgrade_type = *upgrade_type;
            }
            k
        })
        .collect();
    Ok(req)
}

/// Prints each feature's line; returns how many failed.
fn print_outcomes(plan: &Plan, r: &UpdateFeaturesResponse) -> usize {
    let top = (r.error_code != 0).then(|| error_text(r.error_code, r.error_message.as_deref()));
    let mut failures = 0;
    for (name, (level, _)) in &plan.updates {
        let per_feature = r
            .results
            .iter()
            .find(|x| x.feature.as_str() == name)
            .filter(|x| x.error_code != 0)
            .map(|x| error_text(x.error_code, x.error_message.as_deref()));
        // v2 answers only at the top; v0-1 list each feature (and a top error for all).
        let error = per_feature.or_else(|| top.clone());
        if error.is_some() {
            failures += 1;
        }
        let line = outcome_line(plan.op, name, *level, plan.dry_run, error.as_deref());
        println!("{line}");
    }
    failures
}

fn error_text(code: i16, message: Option<&str>) -> String {
    match message {
        Some(m) if !m.is_empty() => m.to_string(),
        _ => kafka_protocol::ResponseError::try_from_code(code)
            .map_or_else(|| format!("error code {code}"), |e| e.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::api_versions_response::{
        FinalizedFeatureKey, SupportedFeatureKey,
    };

    #[test]
    fn describe_prints_kafkas_line_per_supported_feature() {
        let mut r = ApiVersionsResponse::default();
        let mut s = SupportedFeatureKey::default();
        s.name = StrBytes::from_static_str("transaction.version");
        s.max_version = 2;
        r.supported_features = vec![s];
        r.finalized_features_epoch = 7;
        assert_eq!(
            describe_lines(&r),
            vec!["Feature: transaction.version\tSupportedMinVersion: 0\tSupportedMaxVersion: 2\tFinalizedVersionLevel: 0\tEpoch: 7"]
        );
        let mut f = FinalizedFeatureKey::default();
        f.name = StrBytes::from_static_str("transaction.version");
        f.max_version_level = 2;
        r.finalized_features = vec![f];
        r.finalized_features_epoch = -1;
        assert!(describe_lines(&r)[0].ends_with("FinalizedVersionLevel: 2\tEpoch: -"));
    }

    #[test]
    fn name_and_level_parse_with_kafkas_messages() {
        assert_eq!(
            parse_name_and_level(" transaction.version = 2").expect("parse"),
            ("transaction.version".into(), 2)
        );
        let e = parse_name_and_level("transaction.version").unwrap_err();
        assert!(e.to_string().contains("equals sign not found"), "{e}");
        let e = parse_name_and_level("transaction.version=two").unwrap_err();
        assert!(
            e.to_string().contains("unable to parse two as a short"),
            "{e}"
        );
        assert_eq!(
            outcome_line("disable", "transaction.version", 0, true, None),
            "transaction.version can be disabled."
        );
        assert_eq!(
            outcome_line("upgrade", "x", 3, false, Some("Bad.")),
            "Could not upgrade x to 3. Bad."
        );
    }
}
