//! Who may read the `metrics.listener` HTTP listener, and what they may see.
//!
//! - TLS: `metrics.listener=https://IP:PORT` serves TLS, configured like a client listener named
//!   `metrics`: `listener.name.metrics.ssl.*` winning over `ssl.*` (key store, trust store,
//!   `ssl.client.auth`, `ssl.principal.mapping.rules`), built by `crate::tls`.
//! - Authentication, `metrics.listener.authentication`: `none` (everyone is `User:ANONYMOUS`),
//!   `basic` (HTTP Basic checked against the SCRAM credentials of the metadata image) or `mtls`
//!   (the client certificate's principal).
//! - Authorization: with `authorizer.class.name` set, `/metrics` needs DESCRIBE on the cluster
//!   and the console shows only the topics and groups the principal may DESCRIBE ([`Viewer`]).
//! - Requests of other nodes' consoles: a console merging the cluster's view asks the other
//!   nodes for the viewer, naming it in [`FORWARDED_PRINCIPAL`] and [`FORWARDED_HOST`]. As a
//!   Kafka broker trusts a forwarded principal only from another broker (KIP-590), these are
//!   honoured only on a TLS connection whose client certificate's principal is in `super.users`
//!   ([`forwarded`]); from anyone else they are ignored and the request is judged as usual.
//!
//! The header parsing, the trust decision and the password check are pure; `metrics/http` runs
//! them.

use std::collections::BTreeSet;
use std::net::IpAddr;
use std::sync::Arc;
use std::time::Duration;

use base64::Engine;
use gregor_meta::acl::{
    parse_super_users, AclOperation, AclResourceType, Authorizer, AuthorizerConfig,
    RequestIdentity, CLUSTER_RESOURCE_NAME,
};
use gregor_meta::config::StaticBrokerConfig;
use gregor_meta::MetadataImage;
use gregor_meta::ScramCredentials;
use gregor_sasl::{ct_eq, Password, ScramCredential, ScramMechanism, MIN_ITERATIONS};

use crate::security::KafkaPrincipal;
use crate::tls::{ClientAuth, TlsListener};

/// The name the metrics listener's `listener.name.<name>.ssl.*` overrides use.
pub const LISTENER_NAME: &str = crate::config::METRICS_LISTENER_NAME;
/// Longest `Authorization` header value read; longer ones are refused before decoding.
pub const MAX_AUTHORIZATION_BYTES: usize = 1024;
/// The header naming the principal a node's request to another node's console is made for
/// (`User:alice`). Never a password: the node authenticates as itself.
pub const FORWARDED_PRINCIPAL: &str = "gregor-forwarded-principal";
/// The header with that viewer's address, for ACLs that name a host.
pub const FORWARDED_HOST: &str = "gregor-forwarded-host";
/// Longest forwarded principal read.
const MAX_FORWARDED_BYTES: usize = 512;

/// `metrics.listener.authentication`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Authentication {
    None,
    Basic,
    Mtls,
}

/// The listener's TLS and authentication, from the settings.
pub struct MetricsSecurity {
    pub tls: Option<TlsListener>,
    pub authentication: Authentication,
    /// `connection.failed.authentication.delay.ms`: a failed login waits this long for its 401.
    pub failed_delay: Duration,
    /// `super.users`: a client certificate with one of these principals is a node, whose
    /// forwarded principal is honoured.
    pub super_users: BTreeSet<String>,
}

/// Settings that cannot work together; start-up stops.
#[derive(Debug, thiserror::Error)]
pub enum MetricsSecurityError {
    #[error(
        "metrics.listener.authentication=mtls needs an https:// metrics.listener whose \
         ssl.client.auth (listener.name.metrics.ssl.client.auth) is required or requested"
    )]
    MtlsWithoutClientCertificates,
}

pub use crate::config::is_https;

impl MetricsSecurity {
    /// No TLS, no authentication (tests, and `metrics.listener.authentication=none` over http).
    pub fn open() -> MetricsSecurity {
        MetricsSecurity {
            tls: None,
            authentication: Authentication::None,
            failed_delay: Duration::ZERO,
            super_users: BTreeSet::new(),
        }
    }

    /// From the settings and `tls`, the listener's TLS built with the node's configuration
    /// (`BrokerConfig::metrics_tls`, shared with the reload of listener stores).
    pub fn from_settings(
        settings: &StaticBrokerConfig,
        tls: Option<TlsListener>,
    ) -> Result<MetricsSecurity, MetricsSecurityError> {
        debug_assert_eq!(
            tls.is_some(),
            settings.raw("metrics.listener").is_some_and(is_https),
            "an https metrics.listener has its TLS, and only it"
        );
        let authentication = match settings.raw("metrics.listener.authentication") {
            Some("basic") => Authentication::Basic,
            Some("mtls") => Authentication::Mtls,
            // The setting's definition allows only none, basic and mtls.
            _ => Authentication::None,
        };
        if authentication == Authentication::Mtls
            && tls
                .as_ref()
                .is_none_or(|t| t.client_auth == ClientAuth::None)
        {
            return Err(MetricsSecurityError::MtlsWithoutClientCertificates);
        }
        let delay_ms = settings
            .raw("connection.failed.authentication.delay.ms")
            .and_then(|v| v.parse::<u64>().ok())
            .unwrap_or(100);
        Ok(MetricsSecurity {
            tls,
            authentication,
            failed_delay: Duration::from_millis(delay_ms),
            super_users: parse_super_users(settings.raw("super.users").unwrap_or("")),
        })
    }
}

/// HTTP Basic credentials. The password's `Debug` is redacted.
#[derive(Debug)]
pub struct BasicCredentials {
    pub user: String,
    pub password: Password,
}

/// Why an `Authorization` header gives no Basic credentials.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum BasicError {
    #[error("no Authorization header")]
    Missing,
    #[error("Authorization header longer than {MAX_AUTHORIZATION_BYTES} bytes")]
    TooLong,
    #[error("Authorization is not Basic")]
    NotBasic,
    #[error("Basic credentials are not base64")]
    BadBase64,
    #[error("Basic credentials are not UTF-8")]
    NotUtf8,
    #[error("Basic credentials have no ':' between user and password")]
    NoColon,
}

/// The user and password of an `Authorization: Basic <base64(user:password)>` header (RFC 7617;
/// the scheme is case-insensitive, the user may not contain ':').
pub fn parse_basic(header: Option<&[u8]>) -> Result<BasicCredentials, BasicError> {
    let header = header.ok_or(BasicError::Missing)?;
    if header.len() > MAX_AUTHORIZATION_BYTES {
        return Err(BasicError::TooLong);
    }
    let text = std::str::from_utf8(header).map_err(|_| BasicError::NotBasic)?;
    let (scheme, token) = text.trim().split_once(' ').ok_or(BasicError::NotBasic)?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return Err(BasicError::NotBasic);
    }
    let decoded = base64::engine::general_purpose::STANDARD
        .decode(token.trim())
        .map_err(|_| BasicError::BadBase64)?;
    let decoded = String::from_utf8(decoded).map_err(|_| BasicError::NotUtf8)?;
    let (user, password) = decoded.split_once(':').ok_or(BasicError::NoColon)?;
    Ok(BasicCredentials {
        user: user.to_string(),
        password: Password::new(password),
    })
}

/// Whether `password` is `user`'s under one of the user's SCRAM credentials: the salted password
/// derived with the credential's salt and iterations gives its stored key (compared in constant
/// time). An unknown user costs one derivation too, so the time taken does not tell whether the
/// user exists. CPU-heavy (PBKDF2): run it off the async workers.
pub fn verify_scram(credentials: &ScramCredentials, user: &str, password: &Password) -> bool {
    let Some(mine) = credentials.user(user) else {
        let _ = ScramMechanism::Sha512.salted_password(password, &[0; 16], MIN_ITERATIONS);
        return false;
    };
    mine.iter()
        .any(|(&mechanism, stored)| matches(mechanism, stored, password))
}

fn matches(mechanism: ScramMechanism, stored: &ScramCredential, password: &Password) -> bool {
    // Iterations and salt come from the metadata log, whose records the controller checked.
    if mechanism.check_iterations(stored.iterations).is_err() {
        return false;
    }
    let salted = mechanism.salted_password(password, &stored.salt, stored.iterations);
    match ScramCredential::from_salted_password(mechanism, &stored.salt, &salted, stored.iterations)
    {
        Ok(derived) => ct_eq(&derived.stored_key, &stored.stored_key),
        Err(_) => false,
    }
}

/// What a request's forwarded-principal headers mean.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Forwarded {
    /// No [`FORWARDED_PRINCIPAL`]: the request is judged as usual.
    Absent,
    /// A node asks for this viewer (at `host`, when it said).
    Trusted {
        principal: KafkaPrincipal,
        host: Option<IpAddr>,
    },
    /// Not from a node, or malformed: the headers are ignored, for this reason.
    Ignored(&'static str),
}

/// Whether to honour a forwarded principal: only from a connection whose client certificate's
/// principal (`certificate`, `User:ANONYMOUS` without one) is in `super_users`, and only a
/// well-formed `Type:name` and IP address.
pub fn forwarded(
    certificate: &KafkaPrincipal,
    super_users: &BTreeSet<String>,
    principal: Option<&[u8]>,
    host: Option<&[u8]>,
) -> Forwarded {
    let Some(principal) = principal else {
        return Forwarded::Absent;
    };
    // An anonymous connection is never a node, even with User:ANONYMOUS a super user.
    if *certificate == KafkaPrincipal::anonymous() {
        return Forwarded::Ignored("no client certificate");
    }
    if !super_users.contains(&certificate.to_string()) {
        return Forwarded::Ignored("the client certificate's principal is not in super.users");
    }
    let Some(principal) = parse_principal(principal) else {
        return Forwarded::Ignored("malformed forwarded principal");
    };
    let host = match host.map(|h| std::str::from_utf8(h).ok()?.trim().parse::<IpAddr>().ok()) {
        None => None,
        Some(Some(ip)) => Some(ip),
        Some(None) => return Forwarded::Ignored("malformed forwarded host"),
    };
    Forwarded::Trusted { principal, host }
}

/// `Type:name`, both non-empty, printable, at most [`MAX_FORWARDED_BYTES`].
fn parse_principal(bytes: &[u8]) -> Option<KafkaPrincipal> {
    if bytes.len() > MAX_FORWARDED_BYTES {
        return None;
    }
    let text = std::str::from_utf8(bytes).ok()?;
    let (principal_type, name) = text.split_once(':')?;
    let printable = |s: &str| !s.is_empty() && !s.chars().any(char::is_control);
    (printable(principal_type) && printable(name)).then(|| KafkaPrincipal {
        principal_type: principal_type.to_string(),
        name: name.to_string(),
    })
}

/// What one authenticated request may see: the authorizer's answers for its principal and
/// address, or yes to everything without `authorizer.class.name`.
pub struct Viewer {
    principal: KafkaPrincipal,
    host: Option<IpAddr>,
    checker: Option<(AuthorizerConfig, Arc<MetadataImage>, IpAddr)>,
}

impl Viewer {
    /// Sees everything (no authorizer configured).
    pub fn everything(principal: KafkaPrincipal) -> Viewer {
        Viewer {
            principal,
            host: None,
            checker: None,
        }
    }

    /// `principal` at `host`, judged by the ACLs of `image` when `settings` configure an
    /// authorizer.
    pub fn new(
        principal: KafkaPrincipal,
        host: IpAddr,
        settings: &StaticBrokerConfig,
        image: Arc<MetadataImage>,
    ) -> Viewer {
        let checker = AuthorizerConfig::from_static(settings).map(|c| (c, image, host));
        Viewer {
            principal,
            host: Some(host),
            checker,
        }
    }

    pub fn principal(&self) -> &KafkaPrincipal {
        &self.principal
    }

    /// The viewer's address, when known.
    pub fn host(&self) -> Option<IpAddr> {
        self.host
    }

    fn may(&self, op: AclOperation, resource_type: AclResourceType, name: &str) -> bool {
        let Some((config, image, host)) = &self.checker else {
            return true;
        };
        let principal = self.principal.to_string();
        let who = RequestIdentity {
            principal: &principal,
            host: *host,
        };
        Authorizer::new(image.acls(), config)
            .authorize(&who, op, resource_type, name)
            .is_allowed()
    }

    /// DESCRIBE on the cluster: what `/metrics` needs.
    pub fn may_describe_cluster(&self) -> bool {
        self.may(
            AclOperation::Describe,
            AclResourceType::Cluster,
            CLUSTER_RESOURCE_NAME,
        )
    }

    pub fn may_describe_topic(&self, topic: &str) -> bool {
        self.may(AclOperation::Describe, AclResourceType::Topic, topic)
    }

    /// DESCRIBE_CONFIGS on the cluster: what DescribeConfigs of a BROKER resource needs.
    pub fn may_describe_cluster_configs(&self) -> bool {
        self.may(
            AclOperation::DescribeConfigs,
            AclResourceType::Cluster,
            CLUSTER_RESOURCE_NAME,
        )
    }

    /// DESCRIBE_CONFIGS on a topic: what DescribeConfigs of a TOPIC resource needs.
    pub fn may_describe_topic_configs(&self, topic: &str) -> bool {
        self.may(AclOperation::DescribeConfigs, AclResourceType::Topic, topic)
    }

    /// READ on a topic: what the console's message browser needs, as Fetch does.
    pub fn may_read_topic(&self, topic: &str) -> bool {
        self.may(AclOperation::Read, AclResourceType::Topic, topic)
    }

    pub fn may_describe_group(&self, group: &str) -> bool {
        self.may(AclOperation::Describe, AclResourceType::Group, group)
    }

    pub fn may_describe_transactional_id(&self, id: &str) -> bool {
        self.may(AclOperation::Describe, AclResourceType::TransactionalId, id)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn basic(s: &str) -> Result<BasicCredentials, BasicError> {
        parse_basic(Some(s.as_bytes()))
    }

    fn b64(s: &str) -> String {
        base64::engine::general_purpose::STANDARD.encode(s)
    }

    #[test]
    fn basic_headers_give_user_and_password() {
        let c = basic(&format!("Basic {}", b64("alice:s3cret:with:colons"))).expect("valid");
        assert_eq!(c.user, "alice");
        assert_eq!(c.password.expose(), "s3cret:with:colons");
        let c = basic(&format!("bAsIc  {} ", b64("bob:"))).expect("valid");
        assert_eq!((c.user.as_str(), c.password.expose()), ("bob", ""));
        assert!(!format!("{c:?}").contains("s3cret"));
    }

    #[test]
    fn bad_basic_headers_are_refused() {
        assert_eq!(parse_basic(None).err(), Some(BasicError::Missing));
        assert_eq!(
            basic(&format!("Bearer {}", b64("a:b"))).err(),
            Some(BasicError::NotBasic)
        );
        assert_eq!(basic("Basic").err(), Some(BasicError::NotBasic));
        assert_eq!(basic("Basic %%%").err(), Some(BasicError::BadBase64));
        assert_eq!(
            basic(&format!("Basic {}", b64("no-colon"))).err(),
            Some(BasicError::NoColon)
        );
        let not_utf8 = base64::engine::general_purpose::STANDARD.encode([0xff, b':', b'x']);
        assert_eq!(
            basic(&format!("Basic {not_utf8}")).err(),
            Some(BasicError::NotUtf8)
        );
        let long = format!("Basic {}", b64(&format!("a:{}", "x".repeat(2000))));
        assert_eq!(basic(&long).err(), Some(BasicError::TooLong));
        assert_eq!(
            parse_basic(Some(&[0xff, 0xfe])).err(),
            Some(BasicError::NotBasic)
        );
    }

    #[test]
    fn scram_passwords_are_checked_against_the_stored_key() {
        use gregor_meta::{MetadataRecord, UserScramCredentialRecord};
        let mut image = MetadataImage::new();
        for (mechanism, password) in [
            (ScramMechanism::Sha512, "alice-512"),
            (ScramMechanism::Sha256, "alice-256"),
        ] {
            let credential = ScramCredential::from_password(
                mechanism,
                &Password::new(password),
                b"0123456789abcdef",
                4096,
            )
            .expect("credential");
            image
                .apply(&MetadataRecord::UserScramCredential(
                    UserScramCredentialRecord {
                        name: "alice".into(),
                        mechanism,
                        credential,
                    },
                ))
                .expect("applied");
        }
        let creds = image.scram_credentials();
        assert!(verify_scram(creds, "alice", &Password::new("alice-512")));
        assert!(verify_scram(creds, "alice", &Password::new("alice-256")));
        assert!(!verify_scram(creds, "alice", &Password::new("alice-51")));
        assert!(!verify_scram(creds, "bob", &Password::new("alice-512")));
    }

    #[test]
    fn forwarded_principals_are_honoured_from_super_user_certificates_only() {
        let node = KafkaPrincipal::user("CN=node,O=Acme");
        let supers = parse_super_users("User:admin;User:ANONYMOUS;User:CN=node,O=Acme");
        let alice = Some(&b"User:alice"[..]);
        assert_eq!(forwarded(&node, &supers, None, None), Forwarded::Absent);
        assert_eq!(
            forwarded(&node, &supers, alice, Some(b" 10.1.2.3")),
            Forwarded::Trusted {
                principal: KafkaPrincipal::user("alice"),
                host: Some("10.1.2.3".parse().expect("ip")),
            }
        );
        assert_eq!(
            forwarded(&node, &supers, Some(b"Group:x:y"), None),
            Forwarded::Trusted {
                principal: KafkaPrincipal {
                    principal_type: "Group".into(),
                    name: "x:y".into()
                },
                host: None,
            }
        );
        // No certificate: never a node, even with User:ANONYMOUS a super user.
        let anonymous = KafkaPrincipal::anonymous();
        assert!(matches!(
            forwarded(&anonymous, &supers, alice, None),
            Forwarded::Ignored(_)
        ));
        let stranger = KafkaPrincipal::user("CN=bob");
        assert!(matches!(
            forwarded(&stranger, &supers, alice, None),
            Forwarded::Ignored(_)
        ));
        for bad in [
            &b"alice"[..],
            b":alice",
            b"User:",
            b"User:a\nb",
            &[0xff, b':', b'x'],
        ] {
            assert!(
                matches!(
                    forwarded(&node, &supers, Some(bad), None),
                    Forwarded::Ignored(_)
                ),
                "{bad:?}"
            );
        }
        let long = format!("User:{}", "x".repeat(600));
        assert!(matches!(
            forwarded(&node, &supers, Some(long.as_bytes()), None),
            Forwarded::Ignored(_)
        ));
        assert!(matches!(
            forwarded(&node, &supers, alice, Some(b"somewhere")),
            Forwarded::Ignored(_)
        ));
    }

    #[test]
    fn https_values() {
        assert!(is_https("https://127.0.0.1:9644"));
        assert!(!is_https("http://127.0.0.1:9644"));
        assert!(!is_https("127.0.0.1:9644"));
    }
}
