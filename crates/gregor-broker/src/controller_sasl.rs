//! The login on a SASL_PLAINTEXT or SASL_SSL controller listener: before its first controller
//! RPC frame, a connection (after TLS on SASL_SSL) goes through Kafka's exchange in Kafka
//! frames: ApiVersions (optional), SaslHandshake v1, SaslAuthenticate until the mechanism is
//! done. `sasl_session` decides each step, as on client listeners; this module only reads and
//! writes the frames. Once logged in, the stream carries the quorum's RPC frames.
//!
//! A refused login is answered after `connection.failed.authentication.delay.ms` and closed.
//!
//! With `connections.max.reauth.ms` (or `listener.name.<controller>.connections.max.reauth.ms`)
//! set, a session ends (KIP-368): SaslAuthenticate tells the client its lifetime (the setting,
//! or less when the credential ends sooner), and [`Login::session_end`] is when the server
//! closes the connection, between RPC frames (`gregor_quorum::rpc::serve_controller_session`).
//! The RPC frames that follow the login are not Kafka's, so the session cannot be renewed in
//! band: the client logs in afresh on a new connection before the end and moves to it
//! (`gregor_quorum::session`).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse, ResponseKind};
use kafka_protocol::ResponseError;
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::time::Instant;

use crate::frame::{decode_request, encode_response, read_frame, FrameError};
use crate::sasl_session::{SaslSession, SaslSetup, SaslStep};
use crate::security::KafkaPrincipal;

/// Largest frame read during the login: the exchanges' messages are small (an OAUTHBEARER
/// token, the largest, is at most 64 KiB).
const MAX_LOGIN_FRAME_BYTES: usize = 128 * 1024;

/// Why a connection did not log in.
#[derive(Debug, thiserror::Error)]
pub enum LoginError {
    /// Refused by the exchange (wrong password, unknown mechanism, another request first).
    #[error("{0}")]
    Refused(String),
    #[error("connection closed during SASL authentication")]
    Closed,
    #[error("SASL authentication not finished within {0:?}")]
    TimedOut(Duration),
    #[error(transparent)]
    Frame(#[from] FrameError),
    #[error(transparent)]
    Encode(#[from] crate::frame::EncodeError),
}

/// A refusal's answer and when to send it.
struct Refusal {
    answer: Option<Bytes>,
    delay: Duration,
    reason: String,
}

enum Failure {
    Refused(Refusal),
    Error(LoginError),
}

impl<E: Into<LoginError>> From<E> for Failure {
    fn from(e: E) -> Failure {
        Failure::Error(e.into())
    }
}

/// A connection's successful login.
#[derive(Debug, Clone)]
pub struct Login {
    pub principal: Arc<KafkaPrincipal>,
    /// When its session ends; `None`: never.
    pub session_end: Option<Instant>,
}

/// Logs in the peer of `stream`, a new connection of a SASL controller listener, with the
/// listener's mechanisms and users in `setup`; the exchange must end within `timeout` (the
/// refusal's delay comes after it). The login, or why not (the refusal already answered).
pub async fn login<S>(
    stream: &mut S,
    setup: SaslSetup,
    timeout: Option<Duration>,
) -> Result<Login, LoginError>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    let mut session = SaslSession::new(setup);
    let exchange = exchange(stream, &mut session);
    let outcome = match timeout {
        Some(t) => tokio::time::timeout(t, exchange)
            .await
            .map_err(|_| LoginError::TimedOut(t))?,
        None => exchange.await,
    };
    match outcome {
        Ok(principal) => Ok(Login {
            principal,
            session_end: session.session_end(),
        }),
        Err(Failure::Error(e)) => Err(e),
        Err(Failure::Refused(r)) => {
            // The wait is this connection's own (its task's).
            tokio::time::sleep(r.delay).await;
            if let Some(answer) = r.answer {
                // The peer may be gone already; the refusal stands either way.
                let _ = stream.write_all(&answer).await;
                let _ = stream.flush().await;
            }
            Err(LoginError::Refused(r.reason))
        }
    }
}

/// The exchange, frame by frame, until the session has a principal.
async fn exchange<S>(
    stream: &mut S,
    session: &mut SaslSession,
) -> Result<Arc<KafkaPrincipal>, Failure>
where
    S: AsyncRead + AsyncWrite + Unpin,
{
    loop {
        let frame = read_frame(stream, MAX_LOGIN_FRAME_BYTES)
            .await?
            .ok_or(LoginError::Closed)?;
        let request = match decode_request(frame) {
            Ok(r) => r,
            Err(FrameError::UnsupportedVersion {
                api: ApiKey::ApiVersions,
                correlation_id,
                ..
            }) => {
                // KIP-511: answered at v0 with the versions served here; the client retries.
                let mut r = login_api_versions();
                r.error_code = ResponseError::UnsupportedVersion.code();
                let frame = encode_response(
                    ApiKey::ApiVersions,
                    0,
                    correlation_id,
                    &ResponseKind::ApiVersions(r),
                )?;
                write(stream, &frame).await?;
                continue;
            }
            Err(e) => return Err(e.into()),
        };
        let (api_key, version) = (request.api_key, request.header.request_api_version);
        let correlation_id = request.header.correlation_id;
        let respond = |r: &ResponseKind| encode_response(api_key, version, correlation_id, r);
        match session.on_request(api_key, version, &request.body, Instant::now()) {
            // Before the login ends, only ApiVersions is handed over.
            SaslStep::Handle(_) if api_key == ApiKey::ApiVersions => {
                let frame = respond(&ResponseKind::ApiVersions(login_api_versions()))?;
                write(stream, &frame).await?;
            }
            SaslStep::Handle(_) => {
                return Err(Failure::Refused(Refusal {
                    answer: None,
                    delay: Duration::ZERO,
                    reason: format!("{api_key:?} before the login ended"),
                }))
            }
            SaslStep::Respond(r) => {
                write(stream, &respond(&r)?).await?;
                if let Some(principal) = session.principal() {
                    return Ok(principal.clone());
                }
            }
            SaslStep::Close {
                response,
                delay,
                reason,
            } => {
                let answer = response.as_ref().map(respond).transpose()?;
                return Err(Failure::Refused(Refusal {
                    answer,
                    delay,
                    reason,
                }));
            }
        }
    }
}

async fn write<S: AsyncWrite + Unpin>(stream: &mut S, frame: &[u8]) -> Result<(), LoginError> {
    stream
        .write_all(frame)
        .await
        .and(stream.flush().await)
        .map_err(|e| LoginError::Frame(FrameError::Io(e)))
}

/// ApiVersions before the login: the controller listener's APIs (the login's, and those an
/// admin tool may send once logged in), as a client decides its versions from this answer.
fn login_api_versions() -> ApiVersionsResponse {
    let mut r = ApiVersionsResponse::default();
    r.api_keys = crate::api::controller_listener_api_versions();
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sasl_config::{SaslListener, SaslMechanism};
    use crate::sasl_session::ScramCredentialSource;
    use gregor_client::sasl::{authenticate, ClientSasl};
    use gregor_sasl::{Password, PlainUsers, ScramCredential, ScramMechanism};

    struct Credentials(Option<ScramCredential>);

    impl ScramCredentialSource for Credentials {
        fn scram_credential(&self, user: &str, _: ScramMechanism) -> Option<ScramCredential> {
            self.0.clone().filter(|_| user == "node")
        }
    }

    fn setup(delay: Duration) -> SaslSetup {
        setup_with(delay, None)
    }

    fn setup_with(delay: Duration, max_reauth: Option<Duration>) -> SaslSetup {
        let jaas = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_node="node-secret";"#;
        let credential = ScramCredential::from_password(
            ScramMechanism::Sha512,
            &Password::new("node-secret"),
            b"0123456789abcdef",
            4096,
        )
        .expect("credential");
        SaslSetup {
            listener: Arc::new(SaslListener {
                mechanisms: vec![
                    SaslMechanism::Plain,
                    SaslMechanism::Scram(ScramMechanism::Sha512),
                ],
                plain_users: Some(PlainUsers::from_jaas(jaas).expect("jaas")),
                max_reauth,
                failed_authentication_delay: delay,
                oauthbearer: None,
            }),
            credentials: Arc::new(Credentials(Some(credential))),
        }
    }

    /// Gregor's own client logging in on one end of a pipe, the controller listener's login
    /// on the other: the principal, and the client's outcome.
    async fn run(
        mechanism: &str,
        password: &str,
    ) -> (Result<Login, LoginError>, std::io::Result<i64>) {
        run_with(mechanism, password, None).await
    }

    async fn run_with(
        mechanism: &str,
        password: &str,
        max_reauth: Option<Duration>,
    ) -> (Result<Login, LoginError>, std::io::Result<i64>) {
        let (mut client, mut server) = tokio::io::duplex(64 * 1024);
        let sasl = ClientSasl::new(mechanism, "node", Password::new(password)).expect("login");
        let serving = login(
            &mut server,
            setup_with(Duration::from_millis(20), max_reauth),
            Some(Duration::from_secs(10)),
        );
        let logging_in = async {
            authenticate(&mut client, &sasl, "test")
                .await
                .map_err(std::io::Error::from)
        };
        tokio::join!(serving, logging_in)
    }

    #[tokio::test]
    async fn plain_and_scram_logins_give_the_users_principal() {
        for mechanism in ["PLAIN", "SCRAM-SHA-512"] {
            let (served, client) = run(mechanism, "node-secret").await;
            let served = served.expect("logged in");
            assert_eq!(
                *served.principal,
                KafkaPrincipal::user("node"),
                "{mechanism}"
            );
            assert_eq!(served.session_end, None, "sessions do not end");
            assert_eq!(client.expect("client logged in"), 0, "no session lifetime");
        }
    }

    #[tokio::test(start_paused = true)]
    async fn with_connections_max_reauth_ms_the_session_ends_and_the_client_is_told() {
        for mechanism in ["PLAIN", "SCRAM-SHA-512"] {
            let before = Instant::now();
            let (served, client) =
                run_with(mechanism, "node-secret", Some(Duration::from_millis(3000))).await;
            let end = served.expect("logged in").session_end.expect("it ends");
            assert_eq!(client.expect("client logged in"), 3000, "{mechanism}");
            // Counted from the login's last step, on this (paused) clock.
            assert!(end >= before + Duration::from_millis(3000), "{mechanism}");
            assert!(
                end <= Instant::now() + Duration::from_millis(3000),
                "{mechanism}"
            );
        }
    }

    #[tokio::test]
    async fn a_wrong_password_is_refused_after_the_delay_and_named_without_the_password() {
        for mechanism in ["PLAIN", "SCRAM-SHA-512"] {
            let started = Instant::now();
            let (served, client) = run(mechanism, "wrong-secret").await;
            let e = served.expect_err("refused").to_string();
            assert!(e.starts_with("Authentication failed"), "{e}");
            assert!(
                !e.contains("wrong-secret") && !e.contains("node-secret"),
                "{e}"
            );
            let refused = client.expect_err("the client is told");
            assert_eq!(
                refused.kind(),
                std::io::ErrorKind::PermissionDenied,
                "{refused}"
            );
            assert!(
                started.elapsed() >= Duration::from_millis(20),
                "after the delay"
            );
        }
        let (served, client) = run("SCRAM-SHA-256", "node-secret").await;
        assert!(served
            .expect_err("refused")
            .to_string()
            .contains("Unsupported SASL mechanism"));
        assert!(client
            .expect_err("told")
            .to_string()
            .contains("PLAIN, SCRAM-SHA-512"));
    }

    #[tokio::test]
    async fn an_rpc_frame_before_the_login_closes_the_connection() {
        let (mut client, mut server) = tokio::io::duplex(1024);
        // A controller RPC frame, as a node without SASL would send it.
        client
            .write_all(&[0, 0, 0, 4, 1, 2, 3, 4])
            .await
            .expect("written");
        let e = login(&mut server, setup(Duration::ZERO), None)
            .await
            .expect_err("refused");
        assert!(matches!(e, LoginError::Frame(_)), "{e}");
        // A frame claiming more than a login ever needs is refused before it is read.
        let (mut client, mut server) = tokio::io::duplex(1024);
        client.write_all(&[0, 0x10, 0, 0]).await.expect("written");
        let e = login(&mut server, setup(Duration::ZERO), None)
            .await
            .expect_err("refused");
        assert!(
            matches!(e, LoginError::Frame(FrameError::TooLarge { .. })),
            "{e}"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_login_that_never_ends_times_out() {
        let (_client, mut server) = tokio::io::duplex(1024);
        let e = login(
            &mut server,
            setup(Duration::ZERO),
            Some(Duration::from_secs(5)),
        )
        .await
        .expect_err("timed out");
        assert!(matches!(e, LoginError::TimedOut(_)), "{e}");
    }
}
