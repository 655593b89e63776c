//! SASL authentication of one connection of a SASL_PLAINTEXT or SASL_SSL listener, as a pure
//! state machine the connection feeds each request it reads, in order, with the time it was
//! read. Kafka's rules:
//!
//! - before authentication only ApiVersions (once), SaslHandshake (v1) and SaslAuthenticate are
//!   served; anything else closes the connection;
//! - SaslHandshake names a mechanism: an enabled one is answered with the enabled list, any other
//!   with UNSUPPORTED_SASL_MECHANISM and the close;
//! - SaslAuthenticate carries the mechanism's tokens (PLAIN: one; SCRAM: two, the credential
//!   looked up when the first arrives); success gives the connection its principal
//!   (`User:<name>`, which wins over a TLS client certificate's);
//! - OAUTHBEARER (RFC 7628): one token, a JWT checked by the listener's validator; its principal
//!   is the sub claim. A refused token is answered with the error challenge
//!   `{"status":"invalid_token"}`, the client replies `\x01`, and that reply gets the
//!   SASL_AUTHENTICATION_FAILED below. Neither the token nor its signature is logged, only why
//!   it was refused;
//! - a failure is answered with SASL_AUTHENTICATION_FAILED after
//!   `connection.failed.authentication.delay.ms`, then the connection closes ([`SaslStep::Close`]
//!   tells the connection; the wait is that connection's alone);
//! - with `connections.max.reauth.ms`, a session lasts that long (KIP-368): the client is told in
//!   SaslAuthenticate v1+, may re-authenticate (SaslHandshake then SaslAuthenticate, same
//!   mechanism and principal), and a connection that sends anything else after expiry is closed.
//!   An OAUTHBEARER session ends at its token's `exp` at the latest, with or without that
//!   setting (Kafka's rule).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use gregor_sasl::{
    oauthbearer_error_challenge, OAuthBearerError, SaslError, ScramCredential, ScramMechanism,
    ScramServer,
};
use kafka_protocol::messages::{
    ApiKey, RequestKind, ResponseKind, SaslAuthenticateResponse, SaslHandshakeResponse,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;
use tokio::time::Instant;

use crate::sasl_config::{SaslListener, SaslMechanism};
use crate::security::KafkaPrincipal;

/// Where SCRAM credentials are read from when an exchange needs one: the metadata image as it
/// is at that moment.
pub trait ScramCredentialSource: Send + Sync {
    fn scram_credential(&self, user: &str, mechanism: ScramMechanism) -> Option<ScramCredential>;
}

/// What a SASL listener's connections authenticate against.
#[derive(Clone)]
pub struct SaslSetup {
    pub listener: Arc<SaslListener>,
    pub credentials: Arc<dyn ScramCredentialSource>,
}

impl std::fmt::Debug for SaslSetup {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SaslSetup")
            .field("listener", &self.listener)
            .finish_non_exhaustive()
    }
}

/// What the connection does with a request. (As large as the response it may carry, like
/// `connection::Reply`, which it turns into at once.)
#[derive(Debug)]
#[allow(clippy::large_enum_variant)]
pub enum SaslStep {
    /// Hand it to the broker's handler as this principal.
    Handle(Arc<KafkaPrincipal>),
    /// Answer it with this response (part of the SASL exchange).
    Respond(ResponseKind),
    /// Stop serving: once `delay` has passed, write `response` (if any), then close. Requests
    /// read after this one are not served.
    Close {
        response: Option<ResponseKind>,
        delay: Duration,
        reason: String,
    },
}

/// An authenticated session.
#[derive(Debug, Clone)]
struct Session {
    principal: Arc<KafkaPrincipal>,
    mechanism: SaslMechanism,
    /// When `connections.max.reauth.ms` ends it; `None`: never.
    expires_at: Option<Instant>,
}

/// A mechanism's exchange in progress.
enum Exchange {
    Plain,
    /// SCRAM, awaiting the client-first-message.
    ScramFirst(Box<ScramServer>),
    /// SCRAM, awaiting the client-final-message.
    ScramFinal(Box<ScramServer>),
    /// OAUTHBEARER, awaiting the client's initial response.
    OAuthBearer,
    /// OAUTHBEARER after the error challenge, awaiting the client's `\x01`; holds why the token
    /// was refused.
    OAuthBearerRefused(String),
}

/// A mechanism's successful end.
struct Done {
    user: String,
    /// The mechanism's final token.
    last: Vec<u8>,
    /// How long the credential stays valid (OAUTHBEARER: until the token's `exp`).
    credential_lifetime: Option<Duration>,
}

impl Done {
    fn new(user: String, last: Vec<u8>) -> Done {
        Done {
            user,
            last,
            credential_lifetime: None,
        }
    }
}

enum State {
    /// Before SaslHandshake; ApiVersions may come first, once.
    Handshake {
        versions_answered: bool,
    },
    /// Between SaslHandshake and the end of the mechanism's exchange; `reauth` holds the
    /// session being renewed.
    Authenticating {
        mechanism: SaslMechanism,
        exchange: Exchange,
        reauth: Option<Session>,
    },
    Authenticated(Session),
    /// Authentication failed; the close is on its way.
    Failed,
}

/// One connection's SASL state.
pub struct SaslSession {
    setup: SaslSetup,
    state: State,
    /// The client sent SaslAuthenticate v1 or later, so it knows how to re-authenticate.
    client_reauthenticates: bool,
}

impl SaslSession {
    pub fn new(setup: SaslSetup) -> SaslSession {
        SaslSession {
            setup,
            state: State::Handshake {
                versions_answered: false,
            },
            client_reauthenticates: false,
        }
    }

    /// The authenticated principal, once there is one.
    pub fn principal(&self) -> Option<&Arc<KafkaPrincipal>> {
        match &self.state {
            State::Authenticated(s) => Some(&s.principal),
            State::Authenticating {
                reauth: Some(s), ..
            } => Some(&s.principal),
            _ => None,
        }
    }

    /// When the authenticated session ends (`connections.max.reauth.ms`, or the credential's
    /// own end); `None`: it does not, or there is no session yet.
    pub fn session_end(&self) -> Option<Instant> {
        match &self.state {
            State::Authenticated(s) => s.expires_at,
            _ => None,
        }
    }

    /// What to do with a request read at `now`.
    pub fn on_request(
        &mut self,
        api_key: ApiKey,
        version: i16,
        body: &RequestKind,
        now: Instant,
    ) -> SaslStep {
        if api_key == ApiKey::SaslHandshake && version == 0 {
            return self.refuse_handshake_v0();
        }
        match std::mem::replace(&mut self.state, State::Failed) {
            State::Handshake { versions_answered } => {
                self.before_handshake(versions_answered, api_key, body)
            }
            State::Authenticating {
                mechanism,
                exchange,
                reauth,
            } => match body {
                RequestKind::SaslAuthenticate(r) => {
                    self.client_reauthenticates |= version > 0;
                    let token = r.auth_bytes.clone();
                    self.authenticate(mechanism, exchange, reauth, &token, version, now)
                }
                _ => self.fail(
                    None,
                    format!(
                        "Unexpected Kafka request of type {api_key:?} during SASL authentication."
                    ),
                ),
            },
            State::Authenticated(session) => self.authenticated(session, api_key, body, now),
            State::Failed => SaslStep::Close {
                response: None,
                delay: Duration::ZERO,
                reason: "request after a failed authentication".into(),
            },
        }
    }

    fn before_handshake(
        &mut self,
        versions_answered: bool,
        api_key: ApiKey,
        body: &RequestKind,
    ) -> SaslStep {
        match body {
            RequestKind::ApiVersions(_) if !versions_answered => {
                self.state = State::Handshake {
                    versions_answered: true,
                };
                SaslStep::Handle(Arc::new(KafkaPrincipal::anonymous()))
            }
            RequestKind::SaslHandshake(r) => self.handshake(r.mechanism.as_str(), None),
            _ => self.fail(
                None,
                format!("Unexpected Kafka request of type {api_key:?} during SASL handshake."),
            ),
        }
    }

    /// SaslHandshake v0 is advertised, as Kafka does (librdkafka before 2.10 logs in only with
    /// a broker that lists v0, and then uses v1), but not served: after it the tokens would come
    /// without Kafka headers. Answered UNSUPPORTED_VERSION, then the close.
    fn refuse_handshake_v0(&mut self) -> SaslStep {
        let mut response = SaslHandshakeResponse::default();
        response.error_code = ResponseError::UnsupportedVersion.code();
        response.mechanisms = self
            .setup
            .listener
            .mechanisms
            .iter()
            .map(|m| StrBytes::from_static_str(m.name()))
            .collect();
        let reason =
            "SaslHandshake v0 (tokens without Kafka headers) is not supported; clients must use v1"
                .to_string();
        self.fail(Some(ResponseKind::SaslHandshake(response)), reason)
    }

    /// SaslHandshake naming `name`; `reauth` is the session a re-authentication renews.
    fn handshake(&mut self, name: &str, reauth: Option<Session>) -> SaslStep {
        let listener = &self.setup.listener;
        let enabled: Vec<&'static str> = match &reauth {
            // A re-authentication keeps its mechanism (Kafka's rule).
            Some(s) => vec![s.mechanism.name()],
            None => listener.mechanisms.iter().map(|m| m.name()).collect(),
        };
        let mut response = SaslHandshakeResponse::default();
        response.mechanisms = enabled
            .iter()
            .copied()
            .map(StrBytes::from_static_str)
            .collect();
        let chosen = SaslMechanism::from_name(name).filter(|m| enabled.contains(&m.name()));
        let Some(mechanism) = chosen else {
            response.error_code = ResponseError::UnsupportedSaslMechanism.code();
            let reason = format!("Unsupported SASL mechanism {name}");
            return self.fail(Some(ResponseKind::SaslHandshake(response)), reason);
        };
        let exchange = match mechanism {
            SaslMechanism::Plain => Exchange::Plain,
            SaslMechanism::OAuthBearer => Exchange::OAuthBearer,
            SaslMechanism::Scram(m) => match ScramServer::with_random_nonce(m) {
                Ok(server) => Exchange::ScramFirst(Box::new(server)),
                Err(e) => return self.fail(None, e.to_string()),
            },
        };
        self.state = State::Authenticating {
            mechanism,
            exchange,
            reauth,
        };
        SaslStep::Respond(ResponseKind::SaslHandshake(response))
    }

    /// One SaslAuthenticate token of the exchange.
    fn authenticate(
        &mut self,
        mechanism: SaslMechanism,
        exchange: Exchange,
        reauth: Option<Session>,
        token: &Bytes,
        version: i16,
        now: Instant,
    ) -> SaslStep {
        let outcome = match exchange {
            Exchange::OAuthBearer => {
                return self.oauthbearer_token(reauth, token, version, now);
            }
            Exchange::OAuthBearerRefused(reason) => {
                let message = OAUTHBEARER_REFUSED.to_string();
                return self.fail(
                    Some(failed_authenticate(&message)),
                    format!("OAUTHBEARER token refused: {reason}"),
                );
            }
            Exchange::Plain => match &self.setup.listener.plain_users {
                Some(users) => users
                    .authenticate(token)
                    .map(|user| Done::new(user, Vec::new())),
                None => Err(SaslError::AuthenticationFailed),
            },
            Exchange::ScramFirst(mut server) => {
                let m = server.mechanism();
                let credentials = &self.setup.credentials;
                match server.client_first(token, |user| credentials.scram_credential(user, m)) {
                    Ok(server_first) => {
                        self.state = State::Authenticating {
                            mechanism,
                            exchange: Exchange::ScramFinal(server),
                            reauth,
                        };
                        return respond_authenticate(server_first, None, version);
                    }
                    Err(e) => Err(e),
                }
            }
            Exchange::ScramFinal(mut server) => server.client_final(token).and_then(|last| {
                let user = server.authenticated_user().map(str::to_string);
                user.map(|u| Done::new(u, last))
                    .ok_or(SaslError::UnexpectedMessage("client-final"))
            }),
        };
        match outcome {
            Ok(done) => self.complete(mechanism, done, reauth, version, now),
            Err(e) => {
                let message = failure_message(mechanism, &e, reauth.is_some());
                let response = failed_authenticate(&message);
                self.fail(Some(response), format!("{message} ({e})"))
            }
        }
    }

    /// OAUTHBEARER's initial response: the token is checked at once; a refusal is told with
    /// the error challenge, and the failure waits for the client's reply (RFC 7628).
    fn oauthbearer_token(
        &mut self,
        reauth: Option<Session>,
        token: &Bytes,
        version: i16,
        now: Instant,
    ) -> SaslStep {
        let Some(validator) = self.setup.listener.oauthbearer.clone() else {
            return self.fail(None, "OAUTHBEARER without a validator".into());
        };
        match validator.validate(token, now) {
            Ok(login) => {
                let done = Done {
                    user: login.principal,
                    last: Vec::new(),
                    credential_lifetime: Some(login.lifetime),
                };
                self.complete(SaslMechanism::OAuthBearer, done, reauth, version, now)
            }
            // Not even a well-formed message: no challenge to answer.
            Err(OAuthBearerError::Message(e)) => {
                let message = format!("Authentication failed: {e}");
                self.fail(Some(failed_authenticate(&message)), message)
            }
            Err(e) => {
                self.state = State::Authenticating {
                    mechanism: SaslMechanism::OAuthBearer,
                    exchange: Exchange::OAuthBearerRefused(e.to_string()),
                    reauth,
                };
                respond_authenticate(oauthbearer_error_challenge(), None, version)
            }
        }
    }

    /// The exchange succeeded for `done.user`; `done.last` is the mechanism's final token.
    fn complete(
        &mut self,
        mechanism: SaslMechanism,
        done: Done,
        reauth: Option<Session>,
        version: i16,
        now: Instant,
    ) -> SaslStep {
        let Done {
            user,
            last,
            credential_lifetime,
        } = done;
        let principal = KafkaPrincipal::user(user);
        if let Some(previous) = &reauth {
            if *previous.principal != principal {
                let message = format!(
                    "Cannot change principals during re-authentication from {}.{}: {}.{}",
                    previous.principal.principal_type,
                    previous.principal.name,
                    principal.principal_type,
                    principal.name
                );
                return self.fail(Some(failed_authenticate(&message)), message);
            }
        }
        // KIP-368: the session ends with the credential if that comes first.
        let lifetime = match (self.setup.listener.max_reauth, credential_lifetime) {
            (Some(max), Some(credential)) => Some(max.min(credential)),
            (max, credential) => max.or(credential),
        };
        self.state = State::Authenticated(Session {
            principal: Arc::new(principal),
            mechanism,
            expires_at: lifetime.map(|l| now + l),
        });
        respond_authenticate(last, lifetime, version)
    }

    /// A request on an authenticated connection.
    fn authenticated(
        &mut self,
        session: Session,
        api_key: ApiKey,
        body: &RequestKind,
        now: Instant,
    ) -> SaslStep {
        if let (RequestKind::SaslHandshake(r), true) = (body, self.client_reauthenticates) {
            return self.handshake(r.mechanism.as_str(), Some(session));
        }
        if session.expires_at.is_some_and(|at| now >= at) {
            return SaslStep::Close {
                response: None,
                delay: Duration::ZERO,
                reason: format!(
                    "SASL session of {} expired (connections.max.reauth.ms); {api_key:?} received",
                    session.principal
                ),
            };
        }
        let principal = session.principal.clone();
        self.state = State::Authenticated(session);
        match illegal_sasl_state(api_key) {
            Some(response) => SaslStep::Respond(response),
            None => SaslStep::Handle(principal),
        }
    }

    /// Authentication failed: answer (if `response`) after the listener's delay, then close.
    fn fail(&mut self, response: Option<ResponseKind>, reason: String) -> SaslStep {
        self.state = State::Failed;
        SaslStep::Close {
            response,
            delay: self.setup.listener.failed_authentication_delay,
            reason,
        }
    }
}

/// The answer to SaslHandshake or SaslAuthenticate where no exchange can happen: on a listener
/// without SASL, or after authentication by a client that cannot re-authenticate. `None` for
/// other requests.
pub fn illegal_sasl_state(api_key: ApiKey) -> Option<ResponseKind> {
    let code = ResponseError::IllegalSaslState.code();
    match api_key {
        ApiKey::SaslHandshake => {
            let mut r = SaslHandshakeResponse::default();
            r.error_code = code;
            Some(ResponseKind::SaslHandshake(r))
        }
        ApiKey::SaslAuthenticate => {
            let mut r = SaslAuthenticateResponse::default();
            r.error_code = code;
            r.error_message = Some(StrBytes::from_static_str(
                "SaslAuthenticate request received after successful authentication",
            ));
            Some(ResponseKind::SaslAuthenticate(r))
        }
        _ => None,
    }
}

/// What a client whose token was refused is told: the error challenge, as Kafka tells it.
const OAUTHBEARER_REFUSED: &str = r#"{"status":"invalid_token"}"#;

/// Kafka's message for a failed exchange. SCRAM's reasons stay out of it (they would tell a
/// client which users exist), as in Kafka; PLAIN's are Kafka's fixed texts.
fn failure_message(mechanism: SaslMechanism, e: &SaslError, reauth: bool) -> String {
    match (mechanism, e) {
        (_, SaslError::AuthorizationIdMismatch { .. }) => {
            "Authentication failed: Client requested an authorization id that is different from username".into()
        }
        (SaslMechanism::Plain, SaslError::AuthenticationFailed) => {
            "Authentication failed: Invalid username or password".into()
        }
        (SaslMechanism::Plain | SaslMechanism::OAuthBearer, e) => {
            format!("Authentication failed: {e}")
        }
        (SaslMechanism::Scram(m), _) => format!(
            "Authentication failed during {} due to invalid credentials with SASL mechanism {}",
            if reauth { "re-authentication" } else { "authentication" },
            m.name()
        ),
    }
}

fn respond_authenticate(token: Vec<u8>, lifetime: Option<Duration>, version: i16) -> SaslStep {
    let mut r = SaslAuthenticateResponse::default();
    r.auth_bytes = Bytes::from(token);
    // v0 has no such field: such a client is closed at expiry without being told.
    if version >= 1 {
        r.session_lifetime_ms =
            lifetime.map_or(0, |l| i64::try_from(l.as_millis()).unwrap_or(i64::MAX));
    }
    SaslStep::Respond(ResponseKind::SaslAuthenticate(r))
}

fn failed_authenticate(message: &str) -> ResponseKind {
    let mut r = SaslAuthenticateResponse::default();
    r.error_code = ResponseError::SaslAuthenticationFailed.code();
    r.error_message = Some(StrBytes::from_string(message.to_string()));
    ResponseKind::SaslAuthenticate(r)
}

#[cfg(test)]
#[path = "sasl_session_tests.rs"]
mod tests;
