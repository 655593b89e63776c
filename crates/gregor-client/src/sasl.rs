//! SASL to brokers (`security.protocol=SASL_PLAINTEXT` or `SASL_SSL`): Kafka's client settings
//! (librdkafka's `sasl.mechanism`, `sasl.username`, `sasl.password`, or the Java client's
//! `sasl.jaas.config`) and the exchange each new connection goes through before it is used:
//! ApiVersions, SaslHandshake v1, then SaslAuthenticate until the mechanism is done, as Kafka's
//! clients do. The connection's own ApiVersions handshake follows, as after TLS.
//!
//! OAUTHBEARER takes its token from a file, as the Java client does when
//! `sasl.oauthbearer.token.endpoint.url` is a `file://` URL (or a plain path): the file holds the
//! JWT, and is read again for each new connection, so a token renewed by whatever writes the
//! file is picked up. Token endpoints over HTTP are not supported.
//!
//! The broker's replica fetchers log in to other brokers with the same exchange.

use std::collections::BTreeMap;
use std::path::PathBuf;

use bytes::Bytes;
use gregor_sasl::{
    parse_jaas, OAuthBearerInitialResponse, Password, PlainMessage, ScramClient, ScramMechanism,
    MAX_OAUTHBEARER_BYTES, OAUTHBEARER_FAILURE_REPLY,
};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, SaslAuthenticateRequest, SaslAuthenticateResponse,
    SaslHandshakeRequest,
};
use kafka_protocol::protocol::{Message, Request, StrBytes, VersionRange};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::codec;
use crate::connection::{DialedStream, Dialer};
use crate::error::KafkaCode;
pub use crate::error::{authentication_failure, AuthenticationFailed};
use crate::tls::ClientTls;
use crate::versions::{handshake_step, BrokerVersions, HandshakeStep};

/// Kafka's PLAIN login module (the Java client's `sasl.jaas.config`).
const PLAIN_LOGIN_MODULE: &str = gregor_sasl::PLAIN_LOGIN_MODULE;
/// Kafka's SCRAM login module.
const SCRAM_LOGIN_MODULE: &str = "org.apache.kafka.common.security.scram.ScramLoginModule";
/// Kafka's OAUTHBEARER login module.
const OAUTHBEARER_LOGIN_MODULE: &str =
    "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule";
/// Where an OAUTHBEARER client gets its token (Kafka's Java client setting).
pub const TOKEN_ENDPOINT_URL: &str = "sasl.oauthbearer.token.endpoint.url";
/// The client settings this module reads, for tools that refuse the ones they do not know.
/// `sasl.login.callback.handler.class` is accepted (Java configs set it for OAUTHBEARER) but
/// not needed.
pub const CLIENT_SASL_SETTINGS: &[&str] = &[
    "sasl.mechanism",
    "sasl.username",
    "sasl.password",
    "sasl.jaas.config",
    TOKEN_ENDPOINT_URL,
    "sasl.login.callback.handler.class",
];
/// Largest SASL response accepted: the exchanges' messages are a few hundred bytes.
const MAX_SASL_RESPONSE_BYTES: usize = 1024 * 1024;

/// A SASL mechanism the client can log in with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ClientMechanism {
    Plain,
    Scram(ScramMechanism),
    OAuthBearer,
}

impl ClientMechanism {
    /// From Kafka's name (`PLAIN`, `SCRAM-SHA-256`, `SCRAM-SHA-512`).
    pub fn from_name(name: &str) -> Option<ClientMechanism> {
        match name {
            "PLAIN" => Some(ClientMechanism::Plain),
            "OAUTHBEARER" => Some(ClientMechanism::OAuthBearer),
            other => ScramMechanism::from_name(other).map(ClientMechanism::Scram),
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            ClientMechanism::Plain => "PLAIN",
            ClientMechanism::Scram(m) => m.name(),
            ClientMechanism::OAuthBearer => "OAUTHBEARER",
        }
    }

    fn login_module(self) -> &'static str {
        match self {
            ClientMechanism::Plain => PLAIN_LOGIN_MODULE,
            ClientMechanism::Scram(_) => SCRAM_LOGIN_MODULE,
            ClientMechanism::OAuthBearer => OAUTHBEARER_LOGIN_MODULE,
        }
    }
}

/// A client SASL setting that cannot work, naming it (never its value).
#[derive(Debug, thiserror::Error)]
#[error("{key}: {reason}")]
pub struct SaslSettingError {
    pub key: String,
    pub reason: String,
}

fn setting_error(key: &str, reason: impl Into<String>) -> SaslSettingError {
    SaslSettingError {
        key: key.to_string(),
        reason: reason.into(),
    }
}

/// Who the client logs in as, and how. The password's `Debug` is redacted.
#[derive(Debug, Clone)]
pub struct ClientSasl {
    mechanism: ClientMechanism,
    username: String,
    password: Password,
    /// OAUTHBEARER: the file holding the token (then `username` and `password` are empty).
    token_file: Option<PathBuf>,
}

impl ClientSasl {
    /// A login as `username` with `mechanism` (Kafka's name).
    pub fn new(
        mechanism: &str,
        username: &str,
        password: Password,
    ) -> Result<ClientSasl, SaslSettingError> {
        let mechanism = mechanism_named("sasl.mechanism", mechanism)?;
        if mechanism == ClientMechanism::OAuthBearer {
            return Err(setting_error(
                "sasl.mechanism",
                format!("OAUTHBEARER logs in with a token ({TOKEN_ENDPOINT_URL}), not a username and password"),
            ));
        }
        if username.is_empty() {
            return Err(setting_error("sasl.username", "must not be empty"));
        }
        if password.expose().is_empty() {
            return Err(setting_error("sasl.password", "must not be empty"));
        }
        Ok(ClientSasl {
            mechanism,
            username: username.to_string(),
            password,
            token_file: None,
        })
    }

    /// An OAUTHBEARER login with the token in the file `url` names (`file:///path` or a path).
    pub fn oauthbearer(url: &str) -> Result<ClientSasl, SaslSettingError> {
        let path = token_file_path(url)?;
        Ok(ClientSasl {
            mechanism: ClientMechanism::OAuthBearer,
            username: String::new(),
            password: Password::default(),
            token_file: Some(path),
        })
    }

    /// The login a JAAS line gives (`username` and `password` options of Kafka's
    /// PlainLoginModule or ScramLoginModule, whichever `mechanism` needs). `key` names the
    /// setting the line came from, for errors.
    pub fn from_jaas(
        mechanism: &str,
        jaas: &str,
        key: &str,
    ) -> Result<ClientSasl, SaslSettingError> {
        let m = mechanism_named("sasl.mechanism", mechanism)?;
        let entry = parse_jaas(jaas).map_err(|e| setting_error(key, e.to_string()))?;
        if entry.login_module != m.login_module() {
            return Err(setting_error(
                key,
                format!(
                    "{} needs {}, not {}",
                    m.name(),
                    m.login_module(),
                    entry.login_module
                ),
            ));
        }
        let option = |name: &str| {
            entry
                .options
                .get(name)
                .filter(|v| !v.is_empty())
                .ok_or_else(|| setting_error(key, format!("has no {name}=\"...\" option")))
        };
        let username = option("username")?.clone();
        let password = Password::new(option("password")?.as_str());
        ClientSasl::new(mechanism, &username, password)
    }

    /// SASL from Kafka client properties; `None` unless `security.protocol` is
    /// `SASL_PLAINTEXT` or `SASL_SSL`.
    pub fn from_properties(
        props: &BTreeMap<String, String>,
    ) -> Result<Option<ClientSasl>, SaslSettingError> {
        let get = |k: &str| props.get(k).map(String::as_str).filter(|v| !v.is_empty());
        let protocol = get("security.protocol").unwrap_or("PLAINTEXT");
        if !matches!(
            protocol.to_ascii_uppercase().as_str(),
            "SASL_PLAINTEXT" | "SASL_SSL"
        ) {
            return Ok(None);
        }
        // Kafka's clients default to GSSAPI, which Gregor does not speak.
        let mechanism = get("sasl.mechanism").ok_or_else(|| {
            setting_error(
                "sasl.mechanism",
                "must be set to PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (the default, GSSAPI, is not supported)",
            )
        })?;
        if mechanism_named("sasl.mechanism", mechanism)? == ClientMechanism::OAuthBearer {
            return oauthbearer_from_properties(&get).map(Some);
        }
        match (get("sasl.username"), get("sasl.jaas.config")) {
            (Some(_), Some(_)) => Err(setting_error(
                "sasl.jaas.config",
                "set it or sasl.username and sasl.password, not both",
            )),
            (None, Some(jaas)) => {
                ClientSasl::from_jaas(mechanism, jaas, "sasl.jaas.config").map(Some)
            }
            (Some(user), None) => {
                let password = get("sasl.password").ok_or_else(|| {
                    setting_error("sasl.password", "must be set with sasl.username")
                })?;
                ClientSasl::new(mechanism, user, Password::new(password)).map(Some)
            }
            (None, None) => Err(setting_error(
                "sasl.username",
                "SASL needs sasl.username and sasl.password (or sasl.jaas.config)",
            )),
        }
    }

    pub fn mechanism(&self) -> ClientMechanism {
        self.mechanism
    }

    pub fn username(&self) -> &str {
        &self.username
    }
}

fn mechanism_named(key: &str, name: &str) -> Result<ClientMechanism, SaslSettingError> {
    ClientMechanism::from_name(name).ok_or_else(|| {
        setting_error(
            key,
            format!(
                "'{name}' is not supported (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512 or OAUTHBEARER)"
            ),
        )
    })
}

/// OAUTHBEARER's settings: the token file, and, if given, the Java client's JAAS line (which
/// must name the OAUTHBEARER login module; its options are not used).
fn oauthbearer_from_properties<'a>(
    get: &impl Fn(&str) -> Option<&'a str>,
) -> Result<ClientSasl, SaslSettingError> {
    if let Some(jaas) = get("sasl.jaas.config") {
        let entry =
            parse_jaas(jaas).map_err(|e| setting_error("sasl.jaas.config", e.to_string()))?;
        if entry.login_module != OAUTHBEARER_LOGIN_MODULE {
            return Err(setting_error(
                "sasl.jaas.config",
                format!(
                    "OAUTHBEARER needs {OAUTHBEARER_LOGIN_MODULE}, not {}",
                    entry.login_module
                ),
            ));
        }
    }
    if get("sasl.username").is_some() {
        return Err(setting_error(
            "sasl.username",
            format!("OAUTHBEARER logs in with a token ({TOKEN_ENDPOINT_URL}), not a username"),
        ));
    }
    let url = get(TOKEN_ENDPOINT_URL).ok_or_else(|| {
        setting_error(
            TOKEN_ENDPOINT_URL,
            "OAUTHBEARER needs the token: a file:// URL (or path) of a file holding the JWT",
        )
    })?;
    ClientSasl::oauthbearer(url)
}

/// The path of a token file URL; HTTP token endpoints are refused.
fn token_file_path(url: &str) -> Result<PathBuf, SaslSettingError> {
    let lower = url.to_ascii_lowercase();
    if lower.starts_with("http://") || lower.starts_with("https://") {
        return Err(setting_error(
            TOKEN_ENDPOINT_URL,
            "only a file:// URL (or a path) of a token file is supported; token endpoints over HTTP are not",
        ));
    }
    let path = match lower.starts_with("file:") {
        true => url[5..].trim_start_matches("//"),
        false => url,
    };
    if path.is_empty() || (lower.starts_with("file:") && !path.starts_with('/')) {
        return Err(setting_error(
            TOKEN_ENDPOINT_URL,
            "file:// URLs need an absolute path",
        ));
    }
    Ok(PathBuf::from(path))
}

/// The token the file holds now (surrounding whitespace dropped), bounded in size.
fn read_token(path: &std::path::Path) -> Result<Password, SaslExchangeError> {
    let text = std::fs::read_to_string(path).map_err(|e| {
        SaslExchangeError::Protocol(format!(
            "reading the OAUTHBEARER token file {}: {e}",
            path.display()
        ))
    })?;
    let token = text.trim();
    if token.is_empty() || token.len() > MAX_OAUTHBEARER_BYTES {
        return Err(SaslExchangeError::Protocol(format!(
            "the OAUTHBEARER token file {} is empty or too large",
            path.display()
        )));
    }
    Ok(Password::new(token))
}

/// Why a SASL exchange did not complete.
#[derive(Debug, thiserror::Error)]
pub enum SaslExchangeError {
    #[error(transparent)]
    Io(#[from] std::io::Error),
    #[error("SASL exchange: {0}")]
    Protocol(String),
    #[error(transparent)]
    Refused(#[from] AuthenticationFailed),
}

impl From<SaslExchangeError> for std::io::Error {
    fn from(e: SaslExchangeError) -> std::io::Error {
        use std::io::{Error, ErrorKind};
        match e {
            SaslExchangeError::Io(e) => e,
            SaslExchangeError::Protocol(reason) => Error::new(ErrorKind::InvalidData, reason),
            SaslExchangeError::Refused(refused) => Error::new(ErrorKind::PermissionDenied, refused),
        }
    }
}

/// One request and its answer, in order, on a stream nothing else uses yet.
struct Exchange<'a, S> {
    stream: &'a mut S,
    client_id: &'a str,
    correlation_id: i32,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Exchange<'_, S> {
    async fn frame<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<Bytes, SaslExchangeError> {
        let correlation_id = self.correlation_id;
        self.correlation_id += 1;
        let frame = codec::encode_request(request, version, correlation_id, self.client_id)
            .map_err(SaslExchangeError::Protocol)?;
        self.stream.write_all(&frame).await?;
        self.stream.flush().await?;
        let size = self.stream.read_i32().await?;
        let len = codec::check_frame_size(size).map_err(SaslExchangeError::Protocol)?;
        if len > MAX_SASL_RESPONSE_BYTES {
            return Err(SaslExchangeError::Protocol(format!(
                "response of {len} bytes to a SASL request"
            )));
        }
        let mut body = vec![0u8; len];
        self.stream.read_exact(&mut body).await?;
        if codec::response_correlation_id(&body) != Some(correlation_id) {
            return Err(SaslExchangeError::Protocol(
                "response with another correlation id".into(),
            ));
        }
        Ok(Bytes::from(body))
    }

    async fn send<R: Request>(
        &mut self,
        request: &R,
        version: i16,
    ) -> Result<R::Response, SaslExchangeError> {
        let frame = self.frame(request, version).await?;
        codec::decode_response::<R>(frame, version).map_err(SaslExchangeError::Protocol)
    }

    /// ApiVersions (with the KIP-511 downgrade): which SASL versions the broker speaks.
    async fn api_versions(&mut self) -> Result<BrokerVersions, SaslExchangeError> {
        let mut version = ApiVersionsRequest::VERSIONS.max;
        for _ in 0..2 {
            let mut request = ApiVersionsRequest::default();
            if version >= 3 {
                request.client_software_name = StrBytes::from_static_str("gregor-client");
                request.client_software_version =
                    StrBytes::from_static_str(env!("CARGO_PKG_VERSION"));
            }
            let frame = self.frame(&request, version).await?;
            let (_, response) = codec::decode_api_versions_response(frame, version)
                .map_err(SaslExchangeError::Protocol)?;
            match handshake_step(version, &response) {
                HandshakeStep::Done(versions) => return Ok(versions),
                HandshakeStep::RetryWith(lower) => version = lower,
                HandshakeStep::Fail(code) => {
                    return Err(SaslExchangeError::Protocol(format!(
                        "ApiVersions answered {}",
                        KafkaCode(code)
                    )))
                }
            }
        }
        Err(SaslExchangeError::Protocol(
            "ApiVersions still unsupported after downgrading".into(),
        ))
    }
}

/// Logs in on `stream`, a fresh connection to a SASL listener: ApiVersions, SaslHandshake v1,
/// then the mechanism's SaslAuthenticate rounds. Returns the session lifetime the broker
/// gave (`connections.max.reauth.ms`; 0: none), after which it closes the connection the next
/// time it is used.
pub async fn authenticate<S>(
    stream: &mut S,
    sasl: &ClientSasl,
    client_id: &str,
) -> Result<i64, SaslExchangeError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut x = Exchange {
        stream,
        client_id,
        correlation_id: 0,
    };
    let versions = x.api_versions().await?;
    let version_of = |key: ApiKey, ours: VersionRange| {
        versions.negotiate(key as i16, ours).map_err(|e| {
            SaslExchangeError::Protocol(format!("the broker does not speak {key:?} ({e})"))
        })
    };
    // v1: the tokens then travel in SaslAuthenticate requests (v0 sent them bare).
    let handshake_version = version_of(ApiKey::SaslHandshake, VersionRange { min: 1, max: 1 })?;
    let auth_version = version_of(ApiKey::SaslAuthenticate, SaslAuthenticateRequest::VERSIONS)?;
    let mut handshake = SaslHandshakeRequest::default();
    handshake.mechanism = StrBytes::from_static_str(sasl.mechanism.name());
    let answer = x.send(&handshake, handshake_version).await?;
    if answer.error_code == KafkaCode::UNSUPPORTED_SASL_MECHANISM.0 {
        let enabled: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
        return Err(AuthenticationFailed(format!(
            "the broker does not accept {} (it accepts {})",
            sasl.mechanism.name(),
            enabled.join(", ")
        ))
        .into());
    }
    if answer.error_code != 0 {
        return Err(AuthenticationFailed(format!(
            "SaslHandshake answered {}",
            KafkaCode(answer.error_code)
        ))
        .into());
    }
    let mut rounds = Rounds {
        x,
        version: auth_version,
    };
    match sasl.mechanism {
        ClientMechanism::Plain => {
            let message = PlainMessage {
                authzid: String::new(),
                authcid: sasl.username.clone(),
                password: sasl.password.clone(),
            };
            Ok(rounds.step(message.to_bytes()).await?.session_lifetime_ms)
        }
        ClientMechanism::Scram(m) => scram(&mut rounds, m, sasl).await,
        ClientMechanism::OAuthBearer => oauthbearer(&mut rounds, sasl).await,
    }
}

/// OAUTHBEARER (RFC 7628): the token in one message. A broker that refuses it answers with an
/// error challenge; the client replies `\x01` and the broker's SASL_AUTHENTICATION_FAILED
/// follows.
async fn oauthbearer<S: AsyncRead + AsyncWrite + Unpin>(
    rounds: &mut Rounds<'_, S>,
    sasl: &ClientSasl,
) -> Result<i64, SaslExchangeError> {
    let path = sasl
        .token_file
        .as_deref()
        .ok_or_else(|| SaslExchangeError::Protocol("OAUTHBEARER without a token file".into()))?;
    let token = read_token(path)?;
    let message = OAuthBearerInitialResponse::bearer(token).to_bytes();
    let answer = rounds.step(message).await?;
    if answer.auth_bytes.is_empty() {
        return Ok(answer.session_lifetime_ms);
    }
    rounds.step(OAUTHBEARER_FAILURE_REPLY.to_vec()).await?;
    Err(AuthenticationFailed(format!(
        "the broker refused the OAUTHBEARER token: {}",
        String::from_utf8_lossy(&answer.auth_bytes)
    ))
    .into())
}

/// SaslAuthenticate rounds.
struct Rounds<'a, S> {
    x: Exchange<'a, S>,
    version: i16,
}

impl<S: AsyncRead + AsyncWrite + Unpin> Rounds<'_, S> {
    /// Sends one token; the broker's answer, which must not be an error.
    async fn step(
        &mut self,
        token: Vec<u8>,
    ) -> Result<SaslAuthenticateResponse, SaslExchangeError> {
        let mut request = SaslAuthenticateRequest::default();
        request.auth_bytes = Bytes::from(token);
        let answer = self.x.send(&request, self.version).await?;
        if answer.error_code != 0 {
            let message = answer
                .error_message
                .as_ref()
                .map(|m| m.to_string())
                .unwrap_or_else(|| KafkaCode(answer.error_code).to_string());
            return Err(AuthenticationFailed(message).into());
        }
        Ok(answer)
    }
}

async fn scram<S: AsyncRead + AsyncWrite + Unpin>(
    rounds: &mut Rounds<'_, S>,
    mechanism: ScramMechanism,
    sasl: &ClientSasl,
) -> Result<i64, SaslExchangeError> {
    let protocol = |e: gregor_sasl::SaslError| SaslExchangeError::Protocol(e.to_string());
    let mut client =
        ScramClient::with_random_nonce(mechanism, &sasl.username, sasl.password.clone())
            .map_err(protocol)?;
    let first = client.client_first().map_err(protocol)?;
    let server_first = rounds.step(first).await?;
    let last = client
        .server_first(&server_first.auth_bytes)
        .map_err(protocol)?;
    let server_final = rounds.step(last).await?;
    // A broker that cannot prove it holds the credential is not trusted with the connection.
    client
        .server_final(&server_final.auth_bytes)
        .map_err(|e| AuthenticationFailed(format!("the broker's SCRAM answer: {e}")))?;
    Ok(server_final.session_lifetime_ms)
}

/// A [`Dialer`] for Kafka's security protocols: TCP, then TLS when `tls` is set, then the SASL
/// login when `sasl` is set. `None` for PLAINTEXT (the client's own TCP).
pub fn dialer(tls: Option<ClientTls>, sasl: Option<ClientSasl>, client_id: &str) -> Option<Dialer> {
    let Some(sasl) = sasl else {
        return tls.map(|t| t.dialer());
    };
    let client_id = client_id.to_string();
    Some(Dialer::new(move |addr| {
        let (tls, sasl, client_id) = (tls.clone(), sasl.clone(), client_id.clone());
        let addr = addr.to_string();
        Box::pin(async move {
            let mut tcp = tokio::net::TcpStream::connect(&addr).await?;
            let _ = tcp.set_nodelay(true);
            let Some(tls) = tls else {
                authenticate(&mut tcp, &sasl, &client_id).await?;
                return Ok(Box::new(tcp) as Box<dyn DialedStream>);
            };
            let mut stream = tls.connect_over(&addr, tcp).await?;
            authenticate(&mut stream, &sasl, &client_id).await?;
            Ok(Box::new(stream) as Box<dyn DialedStream>)
        })
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn props(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    fn refused(pairs: &[(&str, &str)]) -> String {
        ClientSasl::from_properties(&props(pairs))
            .expect_err("refused")
            .to_string()
    }

    #[test]
    fn librdkafka_and_java_spellings_give_the_same_login() {
        let none = ClientSasl::from_properties(&props(&[("security.protocol", "SSL")]));
        assert!(none.expect("valid").is_none());
        let rd = ClientSasl::from_properties(&props(&[
            ("security.protocol", "SASL_SSL"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", "admin"),
            ("sasl.password", "admin-secret"),
        ]))
        .expect("valid")
        .expect("SASL");
        let java = ClientSasl::from_properties(&props(&[
            ("security.protocol", "sasl_plaintext"),
            ("sasl.mechanism", "SCRAM-SHA-512"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="admin" password="admin-secret";"#,
            ),
        ]))
        .expect("valid")
        .expect("SASL");
        for s in [&rd, &java] {
            assert_eq!(
                s.mechanism(),
                ClientMechanism::Scram(ScramMechanism::Sha512)
            );
            assert_eq!(s.username(), "admin");
            assert!(s.password.matches(b"admin-secret"));
            assert!(!format!("{s:?}").contains("admin-secret"));
        }
    }

    #[test]
    fn oauthbearer_reads_its_token_from_the_file_the_java_setting_names() {
        let oauth = |pairs: &[(&str, &str)]| {
            let mut all = vec![
                ("security.protocol", "SASL_SSL"),
                ("sasl.mechanism", "OAUTHBEARER"),
            ];
            all.extend_from_slice(pairs);
            ClientSasl::from_properties(&props(&all))
        };
        let java = oauth(&[
            (TOKEN_ENDPOINT_URL, "file:///etc/gregor/token.jwt"),
            (
                "sasl.jaas.config",
                "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginModule required ;",
            ),
        ])
        .expect("valid")
        .expect("SASL");
        assert_eq!(java.mechanism(), ClientMechanism::OAuthBearer);
        assert_eq!(
            java.token_file.as_deref(),
            Some(std::path::Path::new("/etc/gregor/token.jwt"))
        );
        let path = oauth(&[(TOKEN_ENDPOINT_URL, "token.jwt")]).expect("valid");
        assert!(path.is_some());
        for (pairs, key) in [
            (
                vec![(TOKEN_ENDPOINT_URL, "https://idp.example/token")],
                TOKEN_ENDPOINT_URL,
            ),
            (
                vec![(TOKEN_ENDPOINT_URL, "file:relative")],
                TOKEN_ENDPOINT_URL,
            ),
            (
                vec![
                    (TOKEN_ENDPOINT_URL, "/t"),
                    (
                        "sasl.jaas.config",
                        r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="a" password="b";"#,
                    ),
                ],
                "sasl.jaas.config",
            ),
            (
                vec![(TOKEN_ENDPOINT_URL, "/t"), ("sasl.username", "a")],
                "sasl.username",
            ),
        ] {
            let e = oauth(&pairs).expect_err("refused").to_string();
            assert!(e.starts_with(&format!("{key}:")), "{e}");
        }
        assert!(ClientSasl::new("OAUTHBEARER", "a", Password::new("b")).is_err());
        let dir = tempfile::tempdir().expect("dir");
        let file = dir.path().join("token");
        std::fs::write(&file, "  eyJ.e30.sig\n").expect("write");
        assert_eq!(read_token(&file).expect("token").expose(), "eyJ.e30.sig");
        std::fs::write(&file, "\n").expect("write");
        assert!(read_token(&file).is_err());
    }

    #[test]
    fn settings_that_cannot_work_are_named_without_their_values() {
        let sasl = [("security.protocol", "SASL_PLAINTEXT")];
        let e = refused(&sasl);
        assert!(
            e.starts_with("sasl.mechanism:") && e.contains("GSSAPI"),
            "{e}"
        );
        let e = refused(&[sasl[0], ("sasl.mechanism", "OAUTHBEARER")]);
        assert!(e.starts_with("sasl.oauthbearer.token.endpoint.url:"), "{e}");
        let e = refused(&[sasl[0], ("sasl.mechanism", "GSSAPI")]);
        assert!(e.starts_with("sasl.mechanism:"), "{e}");
        let e = refused(&[sasl[0], ("sasl.mechanism", "PLAIN")]);
        assert!(e.starts_with("sasl.username:"), "{e}");
        let e = refused(&[
            sasl[0],
            ("sasl.mechanism", "PLAIN"),
            ("sasl.username", "alice"),
        ]);
        assert!(e.starts_with("sasl.password:"), "{e}");
        let e = refused(&[
            sasl[0],
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.scram.ScramLoginModule required username="a" password="hunter2";"#,
            ),
        ]);
        assert!(
            e.starts_with("sasl.jaas.config:") && e.contains("PlainLoginModule"),
            "{e}"
        );
        assert!(!e.contains("hunter2"), "{e}");
        let e = refused(&[
            sasl[0],
            ("sasl.mechanism", "PLAIN"),
            (
                "sasl.jaas.config",
                r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="a";"#,
            ),
        ]);
        assert!(e.contains("password"), "{e}");
    }

    /// A scripted broker: answers ApiVersions, SaslHandshake and SaslAuthenticate from gregor-sasl's
    /// PLAIN table, so the client's exchange is checked end to end over a pipe.
    async fn plain_broker(
        mut io: tokio::io::DuplexStream,
        users: gregor_sasl::PlainUsers,
    ) -> std::io::Result<()> {
        use kafka_protocol::messages::api_versions_response::ApiVersion;
        use kafka_protocol::messages::{
            ApiVersionsResponse, RequestHeader, ResponseHeader, SaslHandshakeResponse,
        };
        use kafka_protocol::protocol::{Decodable, Encodable, HeaderVersion};
        loop {
            let size = io.read_i32().await?;
            let mut body = vec![0u8; size as usize];
            io.read_exact(&mut body).await?;
            let mut buf = Bytes::from(body);
            let key = i16::from_be_bytes([buf[0], buf[1]]);
            let version = i16::from_be_bytes([buf[2], buf[3]]);
            let api = ApiKey::try_from(key).expect("known api");
            let header = RequestHeader::decode(&mut buf, api.request_header_version(version))
                .expect("header");
            let mut out = bytes::BytesMut::new();
            let header_out = ResponseHeader::default().with_correlation_id(header.correlation_id);
            match api {
                ApiKey::ApiVersions => {
                    let mut r = ApiVersionsResponse::default();
                    r.api_keys = [
                        (ApiKey::ApiVersions, 0, 3),
                        (ApiKey::SaslHandshake, 1, 1),
                        (ApiKey::SaslAuthenticate, 0, 2),
                    ]
                    .iter()
                    .map(|&(k, lo, hi)| {
                        ApiVersion::default()
                            .with_api_key(k as i16)
                            .with_min_version(lo)
                            .with_max_version(hi)
                    })
                    .collect();
                    header_out.encode(&mut out, 0).expect("encode");
                    r.encode(&mut out, version).expect("encode");
                }
                ApiKey::SaslHandshake => {
                    let req = SaslHandshakeRequest::decode(&mut buf, version).expect("body");
                    let mut r = SaslHandshakeResponse::default();
                    r.mechanisms = vec![StrBytes::from_static_str("PLAIN")];
                    if req.mechanism.as_str() != "PLAIN" {
                        r.error_code = KafkaCode::UNSUPPORTED_SASL_MECHANISM.0;
                    }
                    header_out
                        .encode(&mut out, SaslHandshakeResponse::header_version(version))
                        .expect("encode");
                    r.encode(&mut out, version).expect("encode");
                }
                _ => {
                    let req = SaslAuthenticateRequest::decode(&mut buf, version).expect("body");
                    let mut r = SaslAuthenticateResponse::default();
                    if users.authenticate(&req.auth_bytes).is_err() {
                        r.error_code = KafkaCode::SASL_AUTHENTICATION_FAILED.0;
                        r.error_message = Some(StrBytes::from_static_str(
                            "Authentication failed: Invalid username or password",
                        ));
                    }
                    header_out
                        .encode(&mut out, SaslAuthenticateResponse::header_version(version))
                        .expect("encode");
                    r.encode(&mut out, version).expect("encode");
                }
            }
            io.write_i32(out.len() as i32).await?;
            io.write_all(&out).await?;
        }
    }

    #[tokio::test]
    async fn a_plain_login_succeeds_or_reports_the_brokers_message() {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret";"#;
        let users = gregor_sasl::PlainUsers::from_jaas(jaas).expect("jaas");
        let login = |password: &str| {
            ClientSasl::new("PLAIN", "alice", Password::new(password)).expect("valid")
        };
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(plain_broker(server, users.clone()));
        authenticate(&mut client, &login("alice-secret"), "test")
            .await
            .expect("logged in");
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(plain_broker(server, users.clone()));
        let e = authenticate(&mut client, &login("wrong"), "test")
            .await
            .expect_err("refused");
        assert!(
            matches!(&e, SaslExchangeError::Refused(AuthenticationFailed(m)) if m.contains("Invalid username or password")),
            "{e}"
        );
        let io: std::io::Error = e.into();
        assert!(authentication_failure(&io).is_some());
        let (mut client, server) = tokio::io::duplex(64 * 1024);
        tokio::spawn(plain_broker(server, users));
        let scram = ClientSasl::new("SCRAM-SHA-256", "alice", Password::new("x")).expect("valid");
        let e = authenticate(&mut client, &scram, "test")
            .await
            .expect_err("refused");
        assert!(e.to_string().contains("accepts PLAIN"), "{e}");
    }
}
