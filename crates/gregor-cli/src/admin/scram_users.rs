//! `gregor configs --entity-type users`: SCRAM credentials, as kafka-configs.sh manages them
//! (KIP-554). `--add-config 'SCRAM-SHA-512=[iterations=8192,password=...]'` salts and hashes the
//! password here, client side, and sends only salt, salted password and iterations;
//! `--delete-config SCRAM-SHA-512` deletes; `--describe` shows mechanisms and iterations. No
//! password, salted password or key is ever printed.

use anyhow::{anyhow, bail, Result};
use gregor_client::{Admin, KafkaError, Target};
use gregor_sasl::{Password, ScramMechanism};
use kafka_protocol::messages::alter_user_scram_credentials_request::{
    ScramCredentialDeletion, ScramCredentialUpsertion,
};
use kafka_protocol::messages::describe_user_scram_credentials_request::UserName;
use kafka_protocol::messages::{
    AlterUserScramCredentialsRequest, DescribeUserScramCredentialsRequest,
};
use kafka_protocol::protocol::StrBytes;

/// Iterations when `--add-config` names none (Kafka's default).
const DEFAULT_ITERATIONS: i32 = 4096;

/// One `--add-config` entry for a user: the mechanism and its settings.
#[derive(Clone)]
pub struct ScramUpsert {
    pub mechanism: ScramMechanism,
    pub iterations: i32,
    pub password: Password,
}

impl std::fmt::Debug for ScramUpsert {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramUpsert")
            .field("mechanism", &self.mechanism)
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

fn mechanism(name: &str) -> Result<ScramMechanism> {
    ScramMechanism::from_name(name).ok_or_else(|| {
        anyhow!("Invalid config(s): {name} (users take SCRAM-SHA-256 and SCRAM-SHA-512 here)")
    })
}

/// Parses `--add-config` pairs for users: `SCRAM-SHA-512` with value
/// `iterations=8192,password=...` (the brackets already dropped).
pub fn parse_upserts(set: &[(String, String)]) -> Result<Vec<ScramUpsert>> {
    set.iter()
        .map(|(key, value)| {
            let mechanism = mechanism(key)?;
            let mut iterations = DEFAULT_ITERATIONS;
            let mut password = None;
            for part in value.split(',').filter(|p| !p.is_empty()) {
                let (k, v) = part.split_once('=').unwrap_or((part, ""));
                match k.trim() {
                    "iterations" => {
                        iterations = v.trim().parse().map_err(|_| {
                            anyhow!("{key}: iterations must be a number, found {:?}", v.trim())
                        })?
                    }
                    "password" => password = Some(Password::new(v)),
                    // The value may hold a password: name the key only.
                    other => bail!("{key}: unknown setting {other:?} (iterations, password)"),
                }
            }
            let password = password.ok_or_else(|| anyhow!("{key}: password must be specified"))?;
            Ok(ScramUpsert {
                mechanism,
                iterations,
                password,
            })
        })
        .collect()
}

/// `--alter` for a user: upserts (salted here) and deletions in one request.
pub async fn alter(
    admin: &Admin,
    user: &str,
    set: &[(String, String)],
    delete: &[String],
) -> Result<()> {
    let upserts = parse_upserts(set)?;
    let deletions: Vec<ScramMechanism> =
        delete.iter().map(|k| mechanism(k)).collect::<Result<_>>()?;
    let mut request = AlterUserScramCredentialsRequest::default();
    for u in &upserts {
        let salt = gregor_sasl::random::random_salt()?;
        let salted = u
            .mechanism
            .salted_password(&u.password, &salt, u.iterations);
        let mut w = ScramCredentialUpsertion::default();
        w.name = StrBytes::from_string(user.to_string());
        w.mechanism = u.mechanism.type_id();
        w.iterations = u.iterations;
        w.salt = salt.into();
        w.salted_password = salted.expose().to_vec().into();
        request.upsertions.push(w);
    }
    for m in deletions {
        let mut w = ScramCredentialDeletion::default();
        w.name = StrBytes::from_string(user.to_string());
        w.mechanism = m.type_id();
        request.deletions.push(w);
    }
    let (_, resp) = admin
        .client()
        .send::<AlterUserScramCredentialsRequest, _>(&Target::Controller, |_| Ok(request))
        .await?;
    for r in resp.results {
        if let Err(e) = KafkaError::check(r.error_code, r.error_message.as_deref()) {
            bail!("user '{}': {e}", r.user);
        }
    }
    println!("Completed updating config for user {user}.");
    Ok(())
}

/// `--describe` for one user or every user with credentials.
pub async fn describe(admin: &Admin, user: Option<&str>) -> Result<()> {
    let mut request = DescribeUserScramCredentialsRequest::default();
    request.users = user.map(|u| {
        let mut n = UserName::default();
        n.name = StrBytes::from_string(u.to_string());
        vec![n]
    });
    let (_, resp) = admin
        .client()
        .send::<DescribeUserScramCredentialsRequest, _>(&Target::Any, |_| Ok(request))
        .await?;
    KafkaError::check(resp.error_code, resp.error_message.as_deref())?;
    for r in resp.results {
        let described: Vec<(i8, i32)> = r
            .credential_infos
            .iter()
            .map(|c| (c.mechanism, c.iterations))
            .collect();
        let outcome =
            KafkaError::check(r.error_code, r.error_message.as_deref()).map(|()| described);
        print!("{}", format_user(&r.user, outcome));
    }
    Ok(())
}

/// kafka-configs.sh's line for one user's SCRAM credentials.
pub fn format_user(user: &str, outcome: std::result::Result<Vec<(i8, i32)>, KafkaError>) -> String {
    match outcome {
        Ok(infos) => {
            let shown: Vec<String> = infos
                .into_iter()
                .map(|(m, i)| {
                    let name = ScramMechanism::from_type_id(m).map_or("UNKNOWN", |m| m.name());
                    format!("{name}=iterations={i}")
                })
                .collect();
            format!(
                "SCRAM credential configs for user-principal '{user}' are {}\n",
                shown.join(", ")
            )
        }
        Err(e) => format!("SCRAM credential configs for user-principal '{user}': {e}\n"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn add_config_for_users() {
        let set = vec![
            (
                "SCRAM-SHA-512".to_string(),
                "iterations=8192,password=alice-secret".to_string(),
            ),
            ("SCRAM-SHA-256".to_string(), "password=p=w".to_string()),
        ];
        let u = parse_upserts(&set).expect("parse");
        assert_eq!(u[0].mechanism, ScramMechanism::Sha512);
        assert_eq!(u[0].iterations, 8192);
        assert!(u[0].password.matches(b"alice-secret"));
        assert_eq!(u[1].iterations, DEFAULT_ITERATIONS);
        assert!(u[1].password.matches(b"p=w"));
        assert!(!format!("{u:?}").contains("alice-secret"));
        for bad in [
            ("SCRAM-SHA-1", "password=x"),
            ("SCRAM-SHA-512", "iterations=8192"),
            ("SCRAM-SHA-512", "iterations=many,password=x"),
            ("SCRAM-SHA-512", "password=x,salt=y"),
        ] {
            let e = parse_upserts(&[(bad.0.into(), bad.1.into())]).unwrap_err();
            assert!(!e.to_string().contains("password=x"), "{e}");
        }
    }

    #[test]
    fn describe_lines_are_kafkas() {
        assert_eq!(
            format_user("alice", Ok(vec![(1, 4096), (2, 8192)])),
            "SCRAM credential configs for user-principal 'alice' are SCRAM-SHA-256=iterations=4096, SCRAM-SHA-512=iterations=8192\n"
        );
        let e = KafkaError::check(
            91,
            Some("Attempt to describe a user credential that does not exist"),
        )
        .unwrap_err();
        assert!(format_user("bob", Err(e)).contains("does not exist"));
    }
}
