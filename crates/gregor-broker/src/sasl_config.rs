//! SASL settings of the SASL_PLAINTEXT and SASL_SSL listeners, as Kafka names them:
//! `sasl.enabled.mechanisms` (or `listener.name.<l>.sasl.enabled.mechanisms`), PLAIN's users from
//! the PlainLoginModule JAAS line (`listener.name.<l>.plain.sasl.jaas.config`, else
//! `sasl.jaas.config`), `connections.max.reauth.ms`, `connection.failed.authentication.delay.ms`,
//! and the broker's own login to other brokers (`sasl.mechanism.inter.broker.protocol` and the
//! inter-broker listener's JAAS `username` / `password`). Errors name settings, never values.
//!
//! OAUTHBEARER (KIP-768) checks JWTs against the JSON Web Key Set of
//! `sasl.oauthbearer.jwks.endpoint.url` (a file, or an http(s) endpoint fetched by
//! `jwks_fetch`), with `sasl.oauthbearer.*` read per mechanism and listener
//! (`listener.name.<l>.oauthbearer.<key>`), per listener (`listener.name.<l>.<key>`), then
//! broker-wide. A file is re-read every `sasl.oauthbearer.jwks.endpoint.refresh.ms`, and at
//! once when a token names a key id the set lacks and the file has changed since it was read;
//! an endpoint is fetched on the same interval, with `...retry.backoff.ms` /
//! `...retry.backoff.max.ms` after failures, and woken by an unknown key id. An https
//! endpoint's CA comes from the OAUTHBEARER JAAS line's `ssl.truststore.*` options (as Kafka
//! takes its JWKS client's SSL settings from the JAAS options), else the system's.

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use gregor_client::sasl::{ClientMechanism, ClientSasl};
use gregor_meta::config::StaticBrokerConfig;
use gregor_sasl::{
    jaas_config_for, listener_jaas_key, parse_jaas, JwkKeys, JwtRules, OAuthBearerError,
    PlainUsers, ScramMechanism, ValidatedToken, MAX_JWKS_BYTES,
};

use crate::jwks_fetch::{roots_from_pem, HttpJwks, JwksEndpoint, JwksSchedule};
use tokio::time::Instant;

/// A SASL mechanism a listener can accept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SaslMechanism {
    Plain,
    Scram(ScramMechanism),
    OAuthBearer,
}

impl SaslMechanism {
    /// From Kafka's name; `None` for one Gregor does not implement.
    pub fn from_name(name: &str) -> Option<SaslMechanism> {
        match ClientMechanism::from_name(name)? {
            ClientMechanism::Plain => Some(SaslMechanism::Plain),
            ClientMechanism::Scram(m) => Some(SaslMechanism::Scram(m)),
            ClientMechanism::OAuthBearer => Some(SaslMechanism::OAuthBearer),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SaslMechanism::Plain => "PLAIN",
            SaslMechanism::Scram(m) => m.name(),
            SaslMechanism::OAuthBearer => "OAUTHBEARER",
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
    /// OAUTHBEARER's token checks, when OAUTHBEARER is enabled.
    pub oauthbearer: Option<Arc<OAuthBearerValidator>>,
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
            "GSSAPI" => {
                return Err(error(
                    key,
                    format!("{name} is not supported yet; enable PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER (Kafka's default is GSSAPI, so a SASL listener needs this setting)"),
                ))
            }
            other => SaslMechanism::from_name(other).ok_or_else(|| {
                error(
                    key,
                    format!("'{other}' is not a SASL mechanism Gregor knows (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER)"),
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
        let oauthbearer = match mechanisms.contains(&SaslMechanism::OAuthBearer) {
            true => Some(Arc::new(OAuthBearerValidator::from_settings(
                settings, listener,
            )?)),
            false => None,
        };
        let int = |key: &str| {
            settings
                .get(key)
                .and_then(|v| v.as_i64())
                .ok_or_else(|| error(key, "has no value"))
        };
        // Kafka reads it per listener too (listener.name.<l>.connections.max.reauth.ms).
        let reauth_ms = match listener_setting(settings, listener, "connections.max.reauth.ms") {
            (key, Some(raw)) if key.starts_with("listener.name.") => raw
                .trim()
                .parse::<i64>()
                .map_err(|_| error(&key, "is not a whole number of milliseconds"))?,
            _ => int("connections.max.reauth.ms")?,
        };
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
            oauthbearer,
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
    let mechanism = SaslMechanism::from_name(name)
        .filter(|m| *m != SaslMechanism::OAuthBearer)
        .ok_or_else(|| {
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

/// Kafka's OAUTHBEARER validator callback handler: the one behaviour Gregor has.
const OAUTHBEARER_VALIDATOR: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler";

/// An OAUTHBEARER setting of `listener`: the first of `listener.name.<l>.oauthbearer.<key>`,
/// `listener.name.<l>.<key>` and `<key>` that is set, else `<key>`'s default. Returns the key
/// the value came from, for errors.
fn oauthbearer_setting(
    settings: &StaticBrokerConfig,
    listener: &str,
    key: &str,
) -> (String, Option<gregor_meta::config::ConfigValue>) {
    let l = listener.to_lowercase();
    let candidates = [
        format!("listener.name.{l}.oauthbearer.{key}"),
        format!("listener.name.{l}.{key}"),
    ];
    match candidates.into_iter().find(|k| settings.raw(k).is_some()) {
        Some(k) => {
            let v = settings.get(&k);
            (k, v)
        }
        None => (key.to_string(), settings.get(key)),
    }
}

/// What the JWKS file held when last read.
struct JwksState {
    keys: JwkKeys,
    read_at: Instant,
    /// The file's modification time and length then: a key id miss re-reads only a changed file.
    stamp: Option<(SystemTime, u64)>,
}

/// Where a listener's JWKS comes from.
enum JwksSource {
    File {
        path: PathBuf,
        refresh: Duration,
        state: Mutex<JwksState>,
    },
    Http(HttpJwks),
}

impl std::fmt::Debug for JwksSource {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            JwksSource::File { path, refresh, .. } => f
                .debug_struct("File")
                .field("path", path)
                .field("refresh", refresh)
                .finish_non_exhaustive(),
            JwksSource::Http(h) => h.fmt(f),
        }
    }
}

/// OAUTHBEARER's token checks for one listener, and its JWKS.
pub struct OAuthBearerValidator {
    rules: JwtRules,
    source: JwksSource,
    /// The wall clock tokens' `exp`, `nbf` and `iat` are compared with (tests pin it).
    wall_clock: fn() -> SystemTime,
}

impl std::fmt::Debug for OAuthBearerValidator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OAuthBearerValidator")
            .field("rules", &self.rules)
            .field("source", &self.source)
            .finish_non_exhaustive()
    }
}

/// A token the validator accepted.
#[derive(Debug, Clone)]
pub struct OAuthBearerLogin {
    pub principal: String,
    /// Until the token's `exp`: a session may not last longer (KIP-368).
    pub lifetime: Duration,
}

impl OAuthBearerValidator {
    /// The listener's OAUTHBEARER settings; reads the JWKS file or fetches the endpoint once (a
    /// start-up error if that fails or the set holds no usable key).
    pub fn from_settings(
        settings: &StaticBrokerConfig,
        listener: &str,
    ) -> Result<OAuthBearerValidator, SaslConfigError> {
        let get = |key: &str| oauthbearer_setting(settings, listener, key);
        let text = |key: &str| {
            let (k, v) = get(key);
            (k, v.and_then(|v| v.as_str().map(str::to_string)))
        };
        if let (k, Some(class)) = text("sasl.server.callback.handler.class") {
            if class != OAUTHBEARER_VALIDATOR {
                return Err(error(
                    &k,
                    format!("OAUTHBEARER supports only {OAUTHBEARER_VALIDATOR}"),
                ));
            }
        }
        let (url_key, url) = text("sasl.oauthbearer.jwks.endpoint.url");
        let url = url.filter(|u| !u.is_empty()).ok_or_else(|| {
            error(&url_key, "OAUTHBEARER is enabled, so tokens need a JSON Web Key Set: an https:// or file:// URL or a path (unsecured tokens are not accepted)")
        })?;
        let number = |key: &str| {
            let (k, v) = get(key);
            v.and_then(|v| v.as_i64())
                .and_then(|n| u64::try_from(n).ok())
                .ok_or_else(|| error(&k, "has no value"))
        };
        let audiences = match get("sasl.oauthbearer.expected.audience").1 {
            Some(v) => v.as_list().map(<[String]>::to_vec).unwrap_or_default(),
            None => Vec::new(),
        };
        let rules = JwtRules {
            expected_audiences: audiences.into_iter().filter(|a| !a.is_empty()).collect(),
            expected_issuer: text("sasl.oauthbearer.expected.issuer")
                .1
                .filter(|i| !i.is_empty()),
            sub_claim_name: text("sasl.oauthbearer.sub.claim.name")
                .1
                .unwrap_or_else(|| "sub".into()),
            scope_claim_name: text("sasl.oauthbearer.scope.claim.name")
                .1
                .unwrap_or_else(|| "scope".into()),
            clock_skew_seconds: number("sasl.oauthbearer.clock.skew.seconds")?,
        };
        let schedule = JwksSchedule {
            refresh: Duration::from_millis(number("sasl.oauthbearer.jwks.endpoint.refresh.ms")?),
            backoff: Duration::from_millis(number(
                "sasl.oauthbearer.jwks.endpoint.retry.backoff.ms",
            )?),
            backoff_max: Duration::from_millis(number(
                "sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms",
            )?),
        };
        Ok(OAuthBearerValidator {
            rules,
            source: jwks_source(settings, listener, &url_key, &url, schedule)?,
            wall_clock: SystemTime::now,
        })
    }

    /// The same checks against another wall clock (tests).
    pub fn with_wall_clock(mut self, clock: fn() -> SystemTime) -> Self {
        self.wall_clock = clock;
        self
    }

    /// Checks a client's initial response at `now`.
    pub fn validate(
        &self,
        message: &[u8],
        now: Instant,
    ) -> Result<OAuthBearerLogin, OAuthBearerError> {
        let wall = (self.wall_clock)()
            .duration_since(SystemTime::UNIX_EPOCH)
            .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX));
        let keys = self.current_keys(now, false);
        let token = match gregor_sasl::validate_initial_response(message, &keys, &self.rules, wall)
        {
            Err(OAuthBearerError::UnknownKey(Some(kid))) => match &self.source {
                // The fetcher may fetch the set again; this token is refused, as Kafka's is,
                // and the client's retry finds the new key.
                JwksSource::Http(h) => {
                    h.key_missing();
                    return Err(OAuthBearerError::UnknownKey(Some(kid)));
                }
                JwksSource::File { .. } => {
                    let keys = self.current_keys(now, true);
                    gregor_sasl::validate_initial_response(message, &keys, &self.rules, wall)?
                }
            },
            other => other?,
        };
        let ValidatedToken {
            principal,
            expires_at_ms,
            ..
        } = token;
        let left = u64::try_from(expires_at_ms.saturating_sub(wall)).unwrap_or(0);
        Ok(OAuthBearerLogin {
            principal,
            lifetime: Duration::from_millis(left),
        })
    }

    /// The key set. A file's is re-read first when the refresh interval has passed, or on
    /// `key_missing` when the file changed; a file that no longer reads keeps the keys last
    /// read. An endpoint's is the fetcher's last good set.
    fn current_keys(&self, now: Instant, key_missing: bool) -> JwkKeys {
        let (path, refresh, state) = match &self.source {
            JwksSource::Http(h) => return h.keys(),
            JwksSource::File {
                path,
                refresh,
                state,
            } => (path, *refresh, state),
        };
        let mut state = match state.lock() {
            Ok(s) => s,
            Err(poisoned) => poisoned.into_inner(),
        };
        let due = now.saturating_duration_since(state.read_at) >= refresh;
        let changed = key_missing && file_stamp(path) != state.stamp;
        if due || changed {
            state.read_at = now;
            match read_jwks(path) {
                Ok((keys, stamp)) => {
                    tracing::info!(file = %path.display(), keys = keys.len(), kids = ?keys.kids(), "OAUTHBEARER JWKS read");
                    state.keys = keys;
                    state.stamp = stamp;
                }
                Err(reason) => {
                    tracing::warn!(file = %path.display(), %reason, "OAUTHBEARER JWKS not re-read; keeping the keys read before")
                }
            }
        }
        state.keys.clone()
    }
}

/// The JWKS of `url` (named `key` in errors): a file read now, or an http(s) endpoint fetched
/// now and then kept fresh on `schedule`.
fn jwks_source(
    settings: &StaticBrokerConfig,
    listener: &str,
    key: &str,
    url: &str,
    schedule: JwksSchedule,
) -> Result<JwksSource, SaslConfigError> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        let trust = jwks_truststore(settings, listener)?;
        let endpoint = JwksEndpoint::new(url, trust).map_err(|e| error(key, e))?;
        let jwks = HttpJwks::start(endpoint, schedule).map_err(|e| error(key, e))?;
        return Ok(JwksSource::Http(jwks));
    }
    let path = jwks_path(key, url)?;
    let (keys, stamp) = read_jwks(&path).map_err(|e| error(key, e))?;
    if keys.is_empty() {
        return Err(error(
            key,
            "the key set has no key that can verify signatures (RSA, EC P-256/P-384 or Ed25519)",
        ));
    }
    Ok(JwksSource::File {
        path,
        refresh: schedule.refresh,
        state: Mutex::new(JwksState {
            keys,
            read_at: Instant::now(),
            stamp,
        }),
    })
}

/// The CA certificates an https JWKS endpoint is verified against: the `ssl.truststore.*`
/// options of the listener's OAuthBearerLoginModule JAAS line (PEM: `ssl.truststore.location`
/// or `ssl.truststore.certificates`), as Kafka configures its JWKS client; `None`: the system's.
fn jwks_truststore(
    settings: &StaticBrokerConfig,
    listener: &str,
) -> Result<Option<rustls::RootCertStore>, SaslConfigError> {
    let own_key = listener_jaas_key(listener, "OAUTHBEARER");
    let key = match settings.raw(&own_key) {
        Some(_) => own_key,
        None => "sasl.jaas.config".to_string(),
    };
    let Some(text) = jaas_config_for(listener, "OAUTHBEARER", |k| settings.raw(k)) else {
        return Ok(None);
    };
    let entry = parse_jaas(text).map_err(|e| error(&key, e.to_string()))?;
    if !entry.login_module.ends_with("OAuthBearerLoginModule") {
        return Ok(None);
    }
    let option = |name: &str| entry.options.get(name).map(String::as_str);
    if let Some(kind) = option("ssl.truststore.type") {
        if !kind.eq_ignore_ascii_case("PEM") {
            return Err(error(
                &key,
                format!(
                    "ssl.truststore.type {kind} is not supported for the JWKS endpoint: use PEM"
                ),
            ));
        }
    }
    let pem = match (
        option("ssl.truststore.certificates"),
        option("ssl.truststore.location"),
    ) {
        (Some(inline), _) => inline.as_bytes().to_vec(),
        (None, Some(path)) => std::fs::read(path).map_err(|e| {
            error(
                &key,
                format!("ssl.truststore.location: reading {path}: {e}"),
            )
        })?,
        (None, None) => return Ok(None),
    };
    roots_from_pem(&pem)
        .map(Some)
        .map_err(|e| error(&key, format!("ssl.truststore: {e}")))
}

/// The file a `sasl.oauthbearer.jwks.endpoint.url` names.
fn jwks_path(key: &str, url: &str) -> Result<PathBuf, SaslConfigError> {
    let lower = url.to_ascii_lowercase();
    let path = match lower.strip_prefix("file:") {
        Some(_) => url[5..].trim_start_matches("//"),
        None => url,
    };
    if path.is_empty() || (lower.starts_with("file:") && !path.starts_with('/')) {
        return Err(error(key, "a file:// URL needs an absolute path"));
    }
    Ok(PathBuf::from(path))
}

fn file_stamp(path: &std::path::Path) -> Option<(SystemTime, u64)> {
    let meta = std::fs::metadata(path).ok()?;
    Some((meta.modified().ok()?, meta.len()))
}

/// Reads and parses a JWKS file, bounded in size.
fn read_jwks(path: &std::path::Path) -> Result<(JwkKeys, Option<(SystemTime, u64)>), String> {
    let stamp = file_stamp(path);
    if stamp.is_some_and(|(_, len)| len > MAX_JWKS_BYTES as u64) {
        return Err(format!(
            "{} is larger than {MAX_JWKS_BYTES} bytes",
            path.display()
        ));
    }
    let text =
        std::fs::read_to_string(path).map_err(|e| format!("reading {}: {e}", path.display()))?;
    let keys = JwkKeys::from_json(&text).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((keys, stamp))
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
        // connections.max.reauth.ms is the broker's, for every listener...
        assert!(other.plain_users.is_none());
        assert_eq!(other.max_reauth, Some(Duration::from_secs(60)));
        // ...unless the listener has its own (Kafka's listener prefix); 0 turns it off there.
        let mut s = s;
        s.set("listener.name.controller.connections.max.reauth.ms", "3000")
            .expect("valid setting");
        s.set("listener.name.sasl_ssl.connections.max.reauth.ms", "0")
            .expect("valid setting");
        let own = SaslListener::from_settings(&s, "CONTROLLER").expect("valid");
        assert_eq!(own.max_reauth, Some(Duration::from_millis(3000)));
        let off = SaslListener::from_settings(&s, "SASL_SSL").expect("valid");
        assert_eq!(off.max_reauth, None);
        assert!(s
            .set("listener.name.controller.connections.max.reauth.ms", "-5")
            .is_err());
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
            "OAUTHBEARER",
        )]);
        assert!(
            e.starts_with("sasl.oauthbearer.jwks.endpoint.url:") && e.contains("unsecured"),
            "{e}"
        );
        // Nothing listens on port 1 of loopback: the first fetch fails, and so does start-up.
        let e = refused(&[
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url",
                "http://127.0.0.1:1/jwks",
            ),
        ]);
        assert!(
            e.starts_with(
                "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url: fetching the key set from http://127.0.0.1:1/jwks: connecting to 127.0.0.1:1"
            ),
            "{e}"
        );
        let e = refused(&[
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "https://127.0.0.1:1/jwks",
            ),
            (
                "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config",
                r#"org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ssl.truststore.type="JKS" ssl.truststore.location="/x.jks";"#,
            ),
        ]);
        assert!(
            e.starts_with(
                "listener.name.sasl_ssl.oauthbearer.sasl.jaas.config: ssl.truststore.type JKS"
            ),
            "{e}"
        );
        let e = refused(&[
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            (
                "sasl.oauthbearer.jwks.endpoint.url",
                "/nonexistent/jwks.json",
            ),
        ]);
        assert!(e.contains("reading /nonexistent/jwks.json"), "{e}");
        let e = refused(&[
            ("sasl.enabled.mechanisms", "OAUTHBEARER"),
            ("sasl.oauthbearer.jwks.endpoint.url", "/j"),
            (
                "listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerUnsecuredValidatorCallbackHandler",
            ),
        ]);
        assert!(
            e.starts_with("listener.name.sasl_ssl.oauthbearer.sasl.server.callback.handler.class:"),
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
