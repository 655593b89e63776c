//! SASL settings of the SASL_PLAINTEXT and SASL_SSL listeners, as Kafka names them:
//! `sasl.enabled.mechanisms` (or `listener.name.<l>.sasl.enabled.mechanisms`), PLAIN's users from
//! the PlainLoginModule JAAS line (`listener.name.<l>.plain.sasl.jaas.config`, else
//! `sasl.jaas.config`), `connections.max.reauth.ms`, `connection.failed.authentication.delay.ms`,
//! and the broker's own login to other brokers (`sasl.mechanism.inter.broker.protocol` and the
//! inter-broker listener's JAAS `username` / `password`). Errors name settings, never values.

use std::time::Duration;

use gregor_client::sasl::{ClientMechanism, ClientSasl};
use gregor_meta::config::StaticBrokerConfig;
use gregor_sasl::{jaas_config_for, listener_jaas_key, PlainUsers, ScramMechanism};

/// A SASL mechanism a listener can accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    Scram(ScramMechanism),
}

impl SaslMechanism {
    /// From Kafka's name; `None` for one Gregor does not implement.
    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        match ClientMechanism::from_name(name)? {
            ClientMechanism::Plain => Some(SaslMechanism::Plain),
            ClientMechanism::Scram(m) => Some(SaslMechanism::Scram(m)),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
        }
    }
}

/// A SASL setting that cannot work.
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SaslConfigError {
    pub key: String,
    pub reason: String,
}

fn error(key: &str, reason: impl Into<String>) -> SaslConfigError {
    SaslConfigError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// What a SASL listener's connections authenticate against.
#[derive(Debug, Clone)]
pub struct SaslListener {
    /// `sasl.enabled.mechanisms`, in the order given (SaslHandshake answers them).
    pub mechanisms: Vec<SaslMechanism>,
    /// PLAIN's users, when PLAIN is enabled (passwords redacted in `Debug`).
    pub plain_users: Option<PlainUsers>,
    /// `connections.max.reauth.ms`; `None` (0): sessions do not expire.
    pub max_reauth: Option<Duration>,
    /// `connection.failed.authentication.delay.ms`.
    pub failed_authentication_delay: Duration,
}

/// The listener's own value of `key` (`listener.name.<l>.<key>`), else the broker-wide one.
fn listener_setting<'a>(
    settings: &'a StaticBrokerConfig,
    listener: &str,
    key: &str,
) -> (String, Option<&'a str>) {
    let own = format!("listener.name.{}.{key}", listener.to_lowercase());
    match settings.raw(&own) {
        Some(v) => (own, Some(v)),
        None => (key.to_string(), settings.raw(key)),
    }
}

/// The mechanisms of a `sasl.enabled.mechanisms` value (named `key` in errors).
fn parse_mechanisms(key: &str, value: &str) -> Result<Vec<SaslMechanism>, SaslConfigError> {
    let mut out = Vec::new();
    for name in value.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let m = match name {
            "GSSAPI" | "OAUTHBEARER" => {
                return Err(error(
                    key,
                    format!("{name} is not supported yet; enable PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default is GSSAPI, so a SASL listener needs this setting)"),
                ))
            }
            other => SaslMechanism::from_name(other).ok_or_else(|| {
                error(
                    key,
                    format!("'{other}' is not a SASL mechanism Gregor knows (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)"),
                )
            })?,
        };
        if !out.contains(&m) {
            out.push(m);
        }
    }
    if out.is_empty() {
        return Err(error(key, "no mechanism enabled"));
    }
    Ok(out)
}

impl SaslListener {
    /// The SASL settings of listener `listener`.
    pub fn from_settings(
        settings: &StaticBrokerConfig,
        listener: &str,
    ) -> Result<SaslListener, SaslConfigError> {
        let (key, value) = listener_setting(settings, listener, "sasl.enabled.mechanisms");
        let mechanisms = parse_mechanisms(&key, value.unwrap_or("GSSAPI"))?;
        let plain_users = match mechanisms.contains(&SaslMechanism::Plain) {
            true => Some(plain_users(settings, listener)?),
            false => None,
        };
        let int = |key: &str| {
            settings
                .get(key)
                .and_then(|v| v.as_i64())
                .ok_or_else(|| error(key, "has no value"))
        };
        let reauth_ms = int("connections.max.reauth.ms")?;
        let delay_ms = int("connection.failed.authentication.delay.ms")?;
        Ok(SaslListener {
            mechanisms,
            plain_users,
            max_reauth: u64::try_from(reauth_ms)
                .ok()
                .filter(|ms| *ms > 0)
                .map(Duration::from_millis),
            failed_authentication_delay: Duration::from_millis(
                u64::try_from(delay_ms).unwrap_or(0),
            ),
        })
    }

    /// Whether `m` is enabled.
    pub fn accepts(&self, m: SaslMechanism) -> bool {
        self.mechanisms.contains(&m)
    }
}

/// PLAIN's user table: the PlainLoginModule line's `user_<name>="<password>"` entries.
fn plain_users(
    settings: &StaticBrokerConfig,
    listener: &str,
) -> Result<PlainUsers, SaslConfigError> {
    let own_key = listener_jaas_key(listener, "PLAIN");
    let text = jaas_config_for(listener, "PLAIN", |k| settings.raw(k)).ok_or_else(|| {
        error(
            &own_key,
            "PLAIN is enabled, so the listener needs a PlainLoginModule JAAS line with user_<name>=\"<password>\" entries (or sasl.jaas.config)",
        )
    })?;
    let key = match settings.raw(&own_key) {
        Some(_) => own_key,
        None => "sasl.jaas.config".to_string(),
    };
    let users = PlainUsers::from_jaas(text).map_err(|e| error(&key, e.to_string()))?;
    if users.is_empty() {
        return Err(error(
            &key,
            "has no user_<name>=\"<password>\" entries: no one could log in with PLAIN",
        ));
    }
    Ok(users)
}

/// The login replica fetchers use on a SASL inter-broker listener: the mechanism
/// `sasl.mechanism.inter.broker.protocol` names (one the listener enables) and the `username`
/// and `password` of that mechanism's JAAS line on the listener.
pub fn inter_broker_login(
    settings: &StaticBrokerConfig,
    listener: &SaslListener,
    listener_name: &str,
) -> Result<ClientSasl, SaslConfigError> {
    const KEY: &str = "sasl.mechanism.inter.broker.protocol";
    let name = settings.raw(KEY).unwrap_or("GSSAPI");
    let mechanism = SaslMechanism::from_name(name).ok_or_else(|| {
        error(
            KEY,
            format!("'{name}' is not supported; the inter-broker listener {listener_name} needs PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default is GSSAPI)"),
        )
    })?;
    if !listener.accepts(mechanism) {
        return Err(error(
            KEY,
            format!("{name} must be among the sasl.enabled.mechanisms of the inter-broker listener {listener_name}"),
        ));
    }
    let own_key = listener_jaas_key(listener_name, name);
    let text = jaas_config_for(listener_name, name, |k| settings.raw(k)).ok_or_else(|| {
        error(
            &own_key,
            format!("the inter-broker listener needs the broker's own login for {name}: a JAAS line with username and password"),
        )
    })?;
    let key = match settings.raw(&own_key) {
        Some(_) => own_key,
        None => "sasl.jaas.config".to_string(),
    };
    ClientSasl::from_jaas(name, text, &key).map_err(|e| error(&e.key, e.reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn settings(pairs: &[(&str, &str)]) -> StaticBrokerConfig {
        let mut s = StaticBrokerConfig::new();
        for (k, v) in pairs {
            s.set(k, v).expect("valid setting");
        }
        s
    }

    const PLAIN_JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="broker" password="broker-secret" user_broker="broker-secret" user_alice="alice-secret";"#;

    #[test]
    fn mechanisms_per_listener_and_plain_users_from_jaas() {
        let s = settings(&[
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512"),
            (
                "listener.name.sasl_plaintext.sasl.enabled.mechanisms",
                "PLAIN,SCRAM-SHA-256",
            ),
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                PLAIN_JAAS,
            ),
            ("connections.max.reauth.ms", "60000"),
        ]);
        let l = SaslListener::from_settings(&s, "SASL_PLAINTEXT").expect("valid");
        assert_eq!(
            l.mechanisms,
            vec![
                SaslMechanism::Plain,
                SaslMechanism::Scram(ScramMechanism::Sha256)
            ]
        );
        assert_eq!(l.plain_users.as_ref().map(PlainUsers::len), Some(2));
        assert_eq!(l.max_reauth, Some(Duration::from_secs(60)));
        assert_eq!(l.failed_authentication_delay, Duration::from_millis(100));
        assert!(!format!("{l:?}").contains("alice-secret"));
        let other = SaslListener::from_settings(&s, "SASL_SSL").expect("valid");
        assert_eq!(
            other.mechanisms,
            vec![SaslMechanism::Scram(ScramMechanism::Sha512)]
        );
        // connections.max.reauth.ms is the broker's, for every listener.
        assert!(other.plain_users.is_none());
        assert_eq!(other.max_reauth, Some(Duration::from_secs(60)));
    }

    #[test]
    fn settings_that_cannot_work_are_named_never_their_values() {
        let refused = |pairs: &[(&str, &str)]| {
            SaslListener::from_settings(&settings(pairs), "SASL_SSL")
                .expect_err("refused")
                .to_string()
        };
        let e = refused(&[]);
        assert!(
            e.starts_with("sasl.enabled.mechanisms: GSSAPI is not supported"),
            "{e}"
        );
        let e = refused(&[(
            "listener.name.sasl_ssl.sasl.enabled.mechanisms",
            "PLAIN,OAUTHBEARER",
        )]);
        assert!(
            e.starts_with("listener.name.sasl_ssl.sasl.enabled.mechanisms: OAUTHBEARER"),
            "{e}"
        );
        let e = refused(&[("sasl.enabled.mechanisms", "SCRAM-SHA-1")]);
        assert!(e.contains("'SCRAM-SHA-1'"), "{e}");
        let e = refused(&[("sasl.enabled.mechanisms", "PLAIN")]);
        assert!(
            e.starts_with("listener.name.sasl_ssl.plain.sasl.jaas.config:"),
            "{e}"
        );
        let e = refused(&[
            ("sasl.enabled.mechanisms", "PLAIN"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="hunter2";"#,
            ),
        ]);
        assert!(
            e.starts_with("sasl.jaas.config:") && e.contains("no user_"),
            "{e}"
        );
        assert!(!e.contains("hunter2"));
    }

    #[test]
    fn the_inter_broker_login_comes_from_the_listeners_jaas_line() {
        let scram = r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="broker" password="broker-secret";"#;
        let s = settings(&[
            ("sasl.enabled.mechanisms", "SCRAM-SHA-512,PLAIN"),
            ("sasl.jaas.config", PLAIN_JAAS),
            (
                "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config",
                scram,
            ),
            ("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512"),
        ]);
        let l = SaslListener::from_settings(&s, "SASL_SSL").expect("valid");
        let login = inter_broker_login(&s, &l, "SASL_SSL").expect("login");
        assert_eq!(login.username(), "broker");
        assert_eq!(
            login.mechanism(),
            ClientMechanism::Scram(ScramMechanism::Sha512)
        );
        let default = settings(&[("sasl.enabled.mechanisms", "SCRAM-SHA-512")]);
        let e = inter_broker_login(&default, &l, "SASL_SSL")
            .expect_err("GSSAPI")
            .to_string();
        assert!(
            e.starts_with("sasl.mechanism.inter.broker.protocol:") && e.contains("GSSAPI"),
            "{e}"
        );
        let not_enabled = settings(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-256")]);
        let e = inter_broker_login(&not_enabled, &l, "SASL_SSL")
            .expect_err("not enabled")
            .to_string();
        assert!(e.contains("must be among"), "{e}");
        let no_jaas = settings(&[("sasl.mechanism.inter.broker.protocol", "SCRAM-SHA-512")]);
        let e = inter_broker_login(&no_jaas, &l, "SASL_SSL")
            .expect_err("no JAAS")
            .to_string();
        assert!(
            e.starts_with("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config:"),
            "{e}"
        );
    }
}
