//! `gregor configs --entity-type users|clients`: client quotas, as kafka-configs.sh manages
//! them (AlterClientQuotas, DescribeClientQuotas): `--add-config
//! 'producer_byte_rate=1024,consumer_byte_rate=2048'`, `--delete-config producer_byte_rate`,
//! `--describe`, for a user, a client id, or a user and a client id
//! (`--entity-type users --entity-name alice --entity-type clients --entity-name app`), each
//! named or the default (`--entity-default`).

use anyhow::{anyhow, bail, Result};
use gregor_client::admin::{QuotaAlteration, QuotaMatch};
use gregor_client::Admin;

/// Kafka's quota keys for users and client ids.
pub const QUOTA_KEYS: &[&str] = &[
    "producer_byte_rate",
    "consumer_byte_rate",
    "request_percentage",
    "controller_mutation_rate",
];

/// Whether `key` is a client quota key (else, for users, a SCRAM mechanism).
pub fn is_quota_key(key: &str) -> bool {
    QUOTA_KEYS.contains(&key)
}

/// Which name of one entity type: named, the default, or (describe only) any.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum QuotaName {
    Named(String),
    Default,
    Any,
}

/// The entity a command is about: `(wire entity type, name)`, user first.
pub type QuotaTarget = Vec<(&'static str, QuotaName)>;

fn wire_type(plural: &str) -> Result<&'static str> {
    match plural {
        "users" => Ok("user"),
        "clients" => Ok("client-id"),
        other => bail!("Invalid entity type: {other} (only users and clients combine)"),
    }
}

/// The entity from `--entity-type`, `--entity-name` and `--entity-default` in the order they
/// were given (`tokens`: the command line): each name or default belongs to the entity type
/// before it.
pub fn pair_entities(tokens: &[String]) -> Result<QuotaTarget> {
    let mut out: QuotaTarget = Vec::new();
    let mut it = tokens.iter();
    while let Some(t) = it.next() {
        let (flag, inline) = match t.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (t.as_str(), None),
        };
        let mut value = || inline.clone().or_else(|| it.next().cloned());
        match flag {
            "--entity-type" => {
                let v = value().ok_or_else(|| anyhow!("--entity-type needs a value"))?;
                out.push((wire_type(&v)?, QuotaName::Any));
            }
            "--entity-name" | "--entity-default" => {
                let name = if flag == "--entity-name" {
                    QuotaName::Named(value().ok_or_else(|| anyhow!("--entity-name needs a value"))?)
                } else {
                    QuotaName::Default
                };
                let Some(last) = out.last_mut() else {
                    bail!("{flag} must follow the --entity-type it names");
                };
                if last.1 != QuotaName::Any {
                    bail!("{flag}: the entity type {} already has a name", last.0);
                }
                last.1 = name;
            }
            _ => {}
        }
    }
    let mut seen = std::collections::BTreeSet::new();
    if let Some((t, _)) = out.iter().find(|(t, _)| !seen.insert(*t)) {
        bail!("--entity-type for {t} given twice");
    }
    out.sort_by_key(|(t, _)| *t != "user");
    Ok(out)
}

/// `--add-config` values as quota values.
pub fn parse_values(set: &[(String, String)]) -> Result<Vec<(String, f64)>> {
    set.iter()
        .map(|(k, v)| {
            if !is_quota_key(k) {
                bail!(
                    "Invalid config(s): {k} (quota keys are {})",
                    QUOTA_KEYS.join(", ")
                );
            }
            let value: f64 = v
                .trim()
                .parse()
                .map_err(|_| anyhow!("Invalid value {v:?} for {k}: a number is needed"))?;
            Ok((k.clone(), value))
        })
        .collect()
}

/// Kafka's words for an entity: `user-principal 'alice', client-id 'app'`,
/// `the default user-principal`.
pub fn entity_text(entity: &[(String, Option<String>)]) -> String {
    entity
        .iter()
        .map(|(t, n)| {
            let t = if t == "user" {
                "user-principal"
            } else {
                t.as_str()
            };
            match n {
                Some(n) => format!("{t} '{n}'"),
                None => format!("the default {t}"),
            }
        })
        .collect::<Vec<_>>()
        .join(", ")
}

/// kafka-configs.sh's `--describe` line for one entity's quotas.
pub fn format_quotas(entity: &[(String, Option<String>)], values: &[(String, f64)]) -> String {
    let shown: Vec<String> = values.iter().map(|(k, v)| format!("{k}={v:?}")).collect();
    format!(
        "Quota configs for {} are {}\n",
        entity_text(entity),
        shown.join(", ")
    )
}

fn concrete(target: &QuotaTarget) -> Result<Vec<(String, Option<String>)>> {
    target
        .iter()
        .map(|(t, n)| match n {
            QuotaName::Named(n) => Ok((t.to_string(), Some(n.clone()))),
            QuotaName::Default => Ok((t.to_string(), None)),
            QuotaName::Any => bail!("--alter needs --entity-name or --entity-default for {t}"),
        })
        .collect()
}

/// `--alter`: sets and removes quotas of one entity.
pub async fn alter(
    admin: &Admin,
    target: &QuotaTarget,
    set: &[(String, f64)],
    delete: &[String],
) -> Result<()> {
    let entity = concrete(target)?;
    for k in delete {
        if !is_quota_key(k) {
            bail!(
                "Invalid config(s): {k} (quota keys are {})",
                QUOTA_KEYS.join(", ")
            );
        }
    }
    let ops = set
        .iter()
        .map(|(k, v)| (k.clone(), Some(*v)))
        .chain(delete.iter().map(|k| (k.clone(), None)))
        .collect();
    let entry = QuotaAlteration {
        entity: entity.clone(),
        ops,
    };
    for (_, result) in admin.alter_client_quotas(&[entry], false).await? {
        result.map_err(|e| anyhow!("{}: {e}", entity_text(&entity)))?;
    }
    println!("Completed updating config for {}.", entity_text(&entity));
    Ok(())
}

/// `--describe`: the quotas of the matching entities (exactly these entity types).
pub async fn describe(admin: &Admin, target: &QuotaTarget) -> Result<()> {
    let components: Vec<(String, QuotaMatch)> = target
        .iter()
        .map(|(t, n)| {
            let m = match n {
                QuotaName::Named(n) => QuotaMatch::Exact(n.clone()),
                QuotaName::Default => QuotaMatch::Default,
                QuotaName::Any => QuotaMatch::Any,
            };
            (t.to_string(), m)
        })
        .collect();
    for (entity, values) in admin.describe_client_quotas(&components, true).await? {
        print!("{}", format_quotas(&entity, &values));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toks(s: &str) -> Vec<String> {
        s.split_whitespace().map(str::to_string).collect()
    }

    #[test]
    fn entities_pair_names_with_the_type_before_them() {
        let t = pair_entities(&toks(
            "--alter --entity-type clients --entity-default --entity-type users --entity-name alice",
        ))
        .unwrap();
        assert_eq!(
            t,
            vec![
                ("user", QuotaName::Named("alice".into())),
                ("client-id", QuotaName::Default)
            ]
        );
        let t = pair_entities(&toks("--describe --entity-type=users")).unwrap();
        assert_eq!(t, vec![("user", QuotaName::Any)]);
        for bad in [
            "--entity-name a --entity-type users",
            "--entity-type users --entity-name a --entity-default",
            "--entity-type users --entity-type users",
            "--entity-type topics --entity-type clients",
        ] {
            assert!(pair_entities(&toks(bad)).is_err(), "{bad}");
        }
    }

    #[test]
    fn values_and_lines_are_kafkas() {
        let v = parse_values(&[("producer_byte_rate".into(), "1024".into())]).unwrap();
        assert_eq!(v, vec![("producer_byte_rate".to_string(), 1024.0)]);
        assert!(parse_values(&[("retention.ms".into(), "1".into())]).is_err());
        assert!(parse_values(&[("producer_byte_rate".into(), "lots".into())]).is_err());
        let e = vec![
            ("user".to_string(), Some("alice".to_string())),
            ("client-id".to_string(), None),
        ];
        assert_eq!(
            format_quotas(&e, &[("producer_byte_rate".into(), 1024.0)]),
            "Quota configs for user-principal 'alice', the default client-id are producer_byte_rate=1024.0\n"
        );
    }
}
