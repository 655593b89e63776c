//! The SASL state machine, request by request, with the time injected.

use super::*;
use gregor_sasl::{Password, PlainMessage, PlainUsers, ScramClient};
use kafka_protocol::messages::{
    ApiVersionsRequest, MetadataRequest, ProduceRequest, SaslAuthenticateRequest,
    SaslHandshakeRequest,
};
use std::sync::Mutex;

const PLAIN_JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required user_alice="alice-secret" user_bob="bob-secret";"#;
const DELAY: Duration = Duration::from_millis(100);

/// SCRAM credentials that can change between exchanges, as the metadata image does.
#[derive(Default)]
struct Credentials(Mutex<Vec<(String, ScramMechanism, ScramCredential)>>);

impl Credentials {
    fn add(&self, user: &str, m: ScramMechanism, password: &str) {
        let salt = b"0123456789abcdef";
        let c = ScramCredential::from_password(m, &Password::new(password), salt, 4096)
            .expect("credential");
        self.0.lock().expect("lock").push((user.into(), m, c));
    }
}

impl ScramCredentialSource for Credentials {
    fn scram_credential(&self, user: &str, m: ScramMechanism) -> Option<ScramCredential> {
        let all = self.0.lock().expect("lock");
        all.iter()
            .find(|(u, mm, _)| u == user && *mm == m)
            .map(|(_, _, c)| c.clone())
    }
}

fn setup(
    mechanisms: &[SaslMechanism],
    max_reauth: Option<Duration>,
) -> (SaslSession, Arc<Credentials>) {
    let credentials = Arc::new(Credentials::default());
    let listener = SaslListener {
        mechanisms: mechanisms.to_vec(),
        plain_users: Some(PlainUsers::from_jaas(PLAIN_JAAS).expect("jaas")),
        max_reauth,
        failed_authentication_delay: DELAY,
        oauthbearer: None,
    };
    let session = SaslSession::new(SaslSetup {
        listener: Arc::new(listener),
        credentials: credentials.clone(),
    });
    (session, credentials)
}

const SHA512: SaslMechanism = SaslMechanism::Scram(ScramMechanism::Sha512);

fn handshake(mechanism: &str) -> RequestKind {
    let mut r = SaslHandshakeRequest::default();
    r.mechanism = StrBytes::from_string(mechanism.to_string());
    RequestKind::SaslHandshake(r)
}

fn token(bytes: Vec<u8>) -> RequestKind {
    let mut r = SaslAuthenticateRequest::default();
    r.auth_bytes = Bytes::from(bytes);
    RequestKind::SaslAuthenticate(r)
}

fn plain(user: &str, password: &str) -> RequestKind {
    let m = PlainMessage {
        authzid: String::new(),
        authcid: user.into(),
        password: Password::new(password),
    };
    token(m.to_bytes())
}

fn metadata() -> RequestKind {
    RequestKind::Metadata(MetadataRequest::default())
}

fn key(body: &RequestKind) -> ApiKey {
    match body {
        RequestKind::ApiVersions(_) => ApiKey::ApiVersions,
        RequestKind::SaslHandshake(_) => ApiKey::SaslHandshake,
        RequestKind::SaslAuthenticate(_) => ApiKey::SaslAuthenticate,
        RequestKind::Metadata(_) => ApiKey::Metadata,
        RequestKind::Produce(_) => ApiKey::Produce,
        other => panic!("not used here: {other:?}"),
    }
}

fn step(s: &mut SaslSession, body: RequestKind, version: i16, now: Instant) -> SaslStep {
    s.on_request(key(&body), version, &body, now)
}

fn handled_as(step: SaslStep) -> String {
    match step {
        SaslStep::Handle(p) => p.to_string(),
        other => panic!("expected the handler, got {other:?}"),
    }
}

fn authenticate_answer(step: SaslStep) -> SaslAuthenticateResponse {
    match step {
        SaslStep::Respond(ResponseKind::SaslAuthenticate(r)) => r,
        other => panic!("expected a SaslAuthenticate answer, got {other:?}"),
    }
}

/// The SaslAuthenticate answer a failure closes with, after the delay.
fn refusal(step: SaslStep) -> (i16, String) {
    match step {
        SaslStep::Close {
            response: Some(ResponseKind::SaslAuthenticate(r)),
            delay,
            ..
        } => {
            assert_eq!(delay, DELAY, "failed authentication waits before answering");
            let message = r.error_message.map(|m| m.to_string()).unwrap_or_default();
            (r.error_code, message)
        }
        other => panic!("expected a refusal, got {other:?}"),
    }
}

fn plain_login(s: &mut SaslSession, user: &str, password: &str, now: Instant) -> SaslStep {
    match step(s, handshake("PLAIN"), 1, now) {
        SaslStep::Respond(ResponseKind::SaslHandshake(r)) => assert_eq!(r.error_code, 0),
        other => panic!("handshake: {other:?}"),
    }
    step(s, plain(user, password), 1, now)
}

#[test]
fn only_api_versions_and_the_handshake_come_before_authentication() {
    let now = Instant::now();
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    let versions = RequestKind::ApiVersions(ApiVersionsRequest::default());
    assert_eq!(handled_as(step(&mut s, versions, 3, now)), "User:ANONYMOUS");
    let step_ = step(&mut s, metadata(), 12, now);
    assert!(
        matches!(&step_, SaslStep::Close { response: None, delay, reason } if *delay == DELAY && reason.contains("Metadata")),
        "{step_:?}"
    );
    // Nothing read after the refusal is served.
    assert!(matches!(
        step(&mut s, plain("alice", "alice-secret"), 1, now),
        SaslStep::Close { response: None, .. }
    ));
    // A second ApiVersions is refused too, as Kafka does.
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    for expect_handled in [true, false] {
        let versions = RequestKind::ApiVersions(ApiVersionsRequest::default());
        let handled = matches!(step(&mut s, versions, 3, now), SaslStep::Handle(_));
        assert_eq!(handled, expect_handled);
    }
    // A produce request between the handshake and the token closes the connection too.
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    assert!(matches!(
        step(&mut s, handshake("PLAIN"), 1, now),
        SaslStep::Respond(_)
    ));
    let produce = RequestKind::Produce(ProduceRequest::default());
    assert!(matches!(
        step(&mut s, produce, 9, now),
        SaslStep::Close { .. }
    ));
}

#[test]
fn plain_login_sets_the_principal_of_the_requests_read_after_it() {
    let now = Instant::now();
    let (mut s, _) = setup(&[SaslMechanism::Plain, SHA512], None);
    let answer = match step(&mut s, handshake("PLAIN"), 1, now) {
        SaslStep::Respond(ResponseKind::SaslHandshake(r)) => r,
        other => panic!("{other:?}"),
    };
    let offered: Vec<&str> = answer.mechanisms.iter().map(|m| m.as_str()).collect();
    assert_eq!(
        (answer.error_code, offered),
        (0, vec!["PLAIN", "SCRAM-SHA-512"])
    );
    assert!(s.principal().is_none());
    let ok = authenticate_answer(step(&mut s, plain("alice", "alice-secret"), 2, now));
    assert_eq!((ok.error_code, ok.session_lifetime_ms), (0, 0));
    assert_eq!(handled_as(step(&mut s, metadata(), 12, now)), "User:alice");
    // After authentication the SASL APIs are answered ILLEGAL_SASL_STATE for a v0 client.
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    assert!(matches!(
        step(&mut s, handshake("PLAIN"), 1, now),
        SaslStep::Respond(_)
    ));
    authenticate_answer(step(&mut s, plain("bob", "bob-secret"), 0, now));
    let again = authenticate_answer(step(&mut s, plain("bob", "bob-secret"), 0, now));
    assert_eq!(again.error_code, ResponseError::IllegalSaslState.code());
    assert!(matches!(
        step(&mut s, handshake("PLAIN"), 1, now),
        SaslStep::Respond(ResponseKind::SaslHandshake(r)) if r.error_code == ResponseError::IllegalSaslState.code()
    ));
    assert_eq!(handled_as(step(&mut s, metadata(), 12, now)), "User:bob");
}

#[test]
fn refusals_answer_with_kafkas_codes_after_the_delay_then_close() {
    let now = Instant::now();
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    let (code, message) = refusal(plain_login(&mut s, "alice", "wrong", now));
    assert_eq!(code, ResponseError::SaslAuthenticationFailed.code());
    assert_eq!(
        message,
        "Authentication failed: Invalid username or password"
    );
    assert!(matches!(
        step(&mut s, metadata(), 12, now),
        SaslStep::Close { response: None, .. }
    ));
    // An unknown user reads the same.
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    let (_, message) = refusal(plain_login(&mut s, "mallory", "alice-secret", now));
    assert_eq!(
        message,
        "Authentication failed: Invalid username or password"
    );
    // A malformed (truncated) PLAIN token is refused the same way.
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    assert!(matches!(
        step(&mut s, handshake("PLAIN"), 1, now),
        SaslStep::Respond(_)
    ));
    let (code, _) = refusal(step(&mut s, token(b"\0alice".to_vec()), 1, now));
    assert_eq!(code, ResponseError::SaslAuthenticationFailed.code());
    // A mechanism the listener does not enable.
    for name in ["SCRAM-SHA-256", "GSSAPI", "plain"] {
        let (mut s, _) = setup(&[SaslMechanism::Plain, SHA512], None);
        match step(&mut s, handshake(name), 1, now) {
            SaslStep::Close {
                response: Some(ResponseKind::SaslHandshake(r)),
                delay,
                ..
            } => {
                assert_eq!(r.error_code, ResponseError::UnsupportedSaslMechanism.code());
                assert_eq!(r.mechanisms.len(), 2, "the enabled ones are listed");
                assert_eq!(delay, DELAY);
            }
            other => panic!("{name}: {other:?}"),
        }
    }
}

/// A SCRAM exchange; the final SaslAuthenticate step.
fn scram_login(
    s: &mut SaslSession,
    m: ScramMechanism,
    user: &str,
    password: &str,
    now: Instant,
) -> SaslStep {
    let mut client = ScramClient::with_random_nonce(m, user, Password::new(password)).expect("c");
    assert!(matches!(
        step(s, handshake(m.name()), 1, now),
        SaslStep::Respond(_)
    ));
    let first = client.client_first().expect("first");
    let server_first = match step(s, token(first), 1, now) {
        SaslStep::Respond(ResponseKind::SaslAuthenticate(r)) if r.error_code == 0 => r.auth_bytes,
        other => return other,
    };
    let last = client.server_first(&server_first).expect("client-final");
    let done = step(s, token(last), 1, now);
    if let SaslStep::Respond(ResponseKind::SaslAuthenticate(r)) = &done {
        client
            .server_final(&r.auth_bytes)
            .expect("the broker proved its key");
    }
    done
}

#[test]
fn scram_reads_credentials_when_the_exchange_starts() {
    let now = Instant::now();
    let (mut s, credentials) = setup(&[SHA512], None);
    // The user does not exist yet when the connection opens...
    let (code, message) = refusal(scram_login(
        &mut s,
        ScramMechanism::Sha512,
        "carol",
        "c",
        now,
    ));
    assert_eq!(code, ResponseError::SaslAuthenticationFailed.code());
    assert_eq!(
        message,
        "Authentication failed during authentication due to invalid credentials with SASL mechanism SCRAM-SHA-512"
    );
    // ...and is created before the next connection's exchange.
    credentials.add("carol", ScramMechanism::Sha512, "carol-secret");
    let (mut s2, _) = setup(&[SHA512], None);
    s2.setup.credentials = credentials.clone();
    let ok = authenticate_answer(scram_login(
        &mut s2,
        ScramMechanism::Sha512,
        "carol",
        "carol-secret",
        now,
    ));
    assert_eq!(ok.error_code, 0);
    assert_eq!(handled_as(step(&mut s2, metadata(), 12, now)), "User:carol");
    // A wrong password fails on the final message, with the same text.
    let (mut s3, _) = setup(&[SHA512], None);
    s3.setup.credentials = credentials;
    let (_, message) = refusal(scram_login(
        &mut s3,
        ScramMechanism::Sha512,
        "carol",
        "nope",
        now,
    ));
    assert!(
        message.ends_with("SASL mechanism SCRAM-SHA-512"),
        "{message}"
    );
    // A malformed client-first-message.
    let (mut s4, _) = setup(&[SHA512], None);
    assert!(matches!(
        step(&mut s4, handshake("SCRAM-SHA-512"), 1, now),
        SaslStep::Respond(_)
    ));
    let (code, _) = refusal(step(&mut s4, token(b"n,,n=".to_vec()), 1, now));
    assert_eq!(code, ResponseError::SaslAuthenticationFailed.code());
}

#[test]
fn an_expired_session_is_closed_unless_it_reauthenticates() {
    let t0 = Instant::now();
    let ms = Duration::from_millis;
    let (mut s, _) = setup(&[SaslMechanism::Plain], Some(ms(1_000)));
    let ok = authenticate_answer(plain_login(&mut s, "alice", "alice-secret", t0));
    assert_eq!(ok.session_lifetime_ms, 1_000);
    assert_eq!(
        handled_as(step(&mut s, metadata(), 12, t0 + ms(999))),
        "User:alice"
    );
    // Re-authentication before expiry starts a new session then.
    let renewed = authenticate_answer(plain_login(&mut s, "alice", "alice-secret", t0 + ms(500)));
    assert_eq!(renewed.session_lifetime_ms, 1_000);
    assert_eq!(
        handled_as(step(&mut s, metadata(), 12, t0 + ms(1_400))),
        "User:alice"
    );
    let expired = step(&mut s, metadata(), 12, t0 + ms(1_500));
    assert!(
        matches!(&expired, SaslStep::Close { response: None, delay, reason } if delay.is_zero() && reason.contains("expired")),
        "{expired:?}"
    );
    // After expiry a re-authentication is still allowed.
    let (mut s, _) = setup(&[SaslMechanism::Plain], Some(ms(1_000)));
    authenticate_answer(plain_login(&mut s, "alice", "alice-secret", t0));
    authenticate_answer(plain_login(&mut s, "alice", "alice-secret", t0 + ms(5_000)));
    assert_eq!(
        handled_as(step(&mut s, metadata(), 12, t0 + ms(5_500))),
        "User:alice"
    );
}

#[test]
fn reauthentication_keeps_the_principal_and_the_mechanism() {
    let t0 = Instant::now();
    let (mut s, _) = setup(
        &[SaslMechanism::Plain, SHA512],
        Some(Duration::from_secs(60)),
    );
    authenticate_answer(plain_login(&mut s, "alice", "alice-secret", t0));
    let (code, message) = refusal(plain_login(&mut s, "bob", "bob-secret", t0));
    assert_eq!(code, ResponseError::SaslAuthenticationFailed.code());
    assert_eq!(
        message,
        "Cannot change principals during re-authentication from User.alice: User.bob"
    );
    let (mut s, _) = setup(
        &[SaslMechanism::Plain, SHA512],
        Some(Duration::from_secs(60)),
    );
    authenticate_answer(plain_login(&mut s, "alice", "alice-secret", t0));
    match step(&mut s, handshake("SCRAM-SHA-512"), 1, t0) {
        SaslStep::Close {
            response: Some(ResponseKind::SaslHandshake(r)),
            ..
        } => {
            assert_eq!(r.error_code, ResponseError::UnsupportedSaslMechanism.code());
            let offered: Vec<&str> = r.mechanisms.iter().map(|m| m.as_str()).collect();
            assert_eq!(offered, vec!["PLAIN"]);
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn non_sasl_listeners_answer_the_sasl_apis_with_illegal_sasl_state() {
    for api in [ApiKey::SaslHandshake, ApiKey::SaslAuthenticate] {
        let r = illegal_sasl_state(api).expect("an answer");
        let code = match r {
            ResponseKind::SaslHandshake(r) => r.error_code,
            ResponseKind::SaslAuthenticate(r) => r.error_code,
            other => panic!("{other:?}"),
        };
        assert_eq!(code, ResponseError::IllegalSaslState.code());
    }
    assert!(illegal_sasl_state(ApiKey::Metadata).is_none());
}

#[test]
fn saslhandshake_v0_is_refused_with_unsupported_version() {
    let now = Instant::now();
    let (mut s, _) = setup(&[SaslMechanism::Plain], None);
    match step(&mut s, handshake("PLAIN"), 0, now) {
        SaslStep::Close {
            response: Some(ResponseKind::SaslHandshake(r)),
            delay,
            reason,
        } => {
            assert_eq!(r.error_code, ResponseError::UnsupportedVersion.code());
            assert_eq!(delay, DELAY);
            assert!(reason.contains("v0"), "{reason}");
        }
        other => panic!("{other:?}"),
    }
}

/// OAUTHBEARER: a P-256 signing key, its JWKS file, and a listener whose validator reads it
/// with the wall clock pinned at [`WALL`].
mod oauthbearer {
    use super::*;
    use crate::sasl_config::OAuthBearerValidator;
    use base64::engine::general_purpose::URL_SAFE_NO_PAD;
    use base64::Engine;
    use gregor_meta::config::StaticBrokerConfig;
    use gregor_sasl::OAuthBearerInitialResponse;
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    use std::time::SystemTime;

    const WALL: u64 = 1_800_000_000;

    fn wall() -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(WALL)
    }

    struct Signer {
        kid: String,
        key: EncodingKey,
        jwk: serde_json::Value,
    }

    fn signer(kid: &str) -> Signer {
        let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
        let raw = pair.public_key_raw();
        Signer {
            kid: kid.into(),
            key: EncodingKey::from_ec_der(&pair.serialize_der()),
            jwk: serde_json::json!({"kty": "EC", "crv": "P-256", "kid": kid,
                "x": URL_SAFE_NO_PAD.encode(&raw[1..33]), "y": URL_SAFE_NO_PAD.encode(&raw[33..65])}),
        }
    }

    impl Signer {
        /// The SaslAuthenticate request carrying a token for `sub` expiring at `exp`.
        fn token(&self, sub: &str, exp: u64) -> RequestKind {
            let mut header = Header::new(Algorithm::ES256);
            header.kid = Some(self.kid.clone());
            let claims = serde_json::json!({"sub": sub, "exp": exp, "aud": "gregor"});
            let jwt = jsonwebtoken::encode(&header, &claims, &self.key).expect("sign");
            token(OAuthBearerInitialResponse::bearer(jwt.as_str().into()).to_bytes())
        }
    }

    fn write_jwks(path: &std::path::Path, signers: &[&Signer]) {
        let keys: Vec<_> = signers.iter().map(|s| s.jwk.clone()).collect();
        std::fs::write(path, serde_json::json!({ "keys": keys }).to_string()).expect("jwks");
    }

    fn validator(jwks: &std::path::Path) -> Arc<OAuthBearerValidator> {
        let mut settings = StaticBrokerConfig::new();
        let url = format!("file://{}", jwks.display());
        for (k, v) in [
            (
                "listener.name.sasl_ssl.oauthbearer.sasl.oauthbearer.jwks.endpoint.url",
                url.as_str(),
            ),
            ("sasl.oauthbearer.expected.audience", "gregor"),
        ] {
            settings.set(k, v).expect("valid setting");
        }
        let validator = OAuthBearerValidator::from_settings(&settings, "SASL_SSL")
            .expect("validator")
            .with_wall_clock(wall);
        Arc::new(validator)
    }

    fn session_with(v: &Arc<OAuthBearerValidator>, max_reauth: Option<Duration>) -> SaslSession {
        let listener = SaslListener {
            mechanisms: vec![SaslMechanism::OAuthBearer],
            plain_users: None,
            max_reauth,
            failed_authentication_delay: DELAY,
            oauthbearer: Some(v.clone()),
        };
        SaslSession::new(SaslSetup {
            listener: Arc::new(listener),
            credentials: Arc::new(Credentials::default()),
        })
    }

    fn session(jwks: &std::path::Path, max_reauth: Option<Duration>) -> SaslSession {
        session_with(&validator(jwks), max_reauth)
    }

    fn start(s: &mut SaslSession, now: Instant) {
        match step(s, handshake("OAUTHBEARER"), 1, now) {
            SaslStep::Respond(ResponseKind::SaslHandshake(r)) => assert_eq!(r.error_code, 0),
            other => panic!("handshake: {other:?}"),
        }
    }

    #[test]
    fn a_valid_token_logs_in_as_its_subject_until_it_expires() {
        let dir = tempfile::tempdir().expect("dir");
        let jwks = dir.path().join("jwks.json");
        let key = signer("k1");
        write_jwks(&jwks, &[&key]);
        let t0 = Instant::now();
        // The token's exp caps connections.max.reauth.ms (KIP-368)...
        let mut s = session(&jwks, Some(Duration::from_secs(3600)));
        start(&mut s, t0);
        let ok = authenticate_answer(step(&mut s, key.token("alice", WALL + 60), 1, t0));
        assert_eq!(ok.session_lifetime_ms, 60_000);
        assert!(ok.auth_bytes.is_empty());
        assert_eq!(handled_as(step(&mut s, metadata(), 12, t0)), "User:alice");
        let late = step(&mut s, metadata(), 12, t0 + Duration::from_secs(60));
        assert!(
            matches!(late, SaslStep::Close { response: None, .. }),
            "{late:?}"
        );
        // ...and applies without it; a shorter connections.max.reauth.ms wins.
        let mut s = session(&jwks, None);
        start(&mut s, t0);
        let ok = authenticate_answer(step(&mut s, key.token("alice", WALL + 90), 1, t0));
        assert_eq!(ok.session_lifetime_ms, 90_000);
        let mut s = session(&jwks, Some(Duration::from_secs(10)));
        start(&mut s, t0);
        let ok = authenticate_answer(step(&mut s, key.token("alice", WALL + 90), 1, t0));
        assert_eq!(ok.session_lifetime_ms, 10_000);
    }

    #[test]
    fn a_refused_token_gets_the_error_challenge_then_the_failure() {
        let dir = tempfile::tempdir().expect("dir");
        let jwks = dir.path().join("jwks.json");
        let key = signer("k1");
        write_jwks(&jwks, &[&key]);
        let t0 = Instant::now();
        let mut s = session(&jwks, None);
        start(&mut s, t0);
        let expired = key.token("alice", WALL - 3600);
        let RequestKind::SaslAuthenticate(sent) = &expired else {
            unreachable!()
        };
        let jwt = String::from_utf8_lossy(&sent.auth_bytes).to_string();
        let challenge = authenticate_answer(step(&mut s, expired.clone(), 1, t0));
        assert_eq!(&challenge.auth_bytes[..], br#"{"status":"invalid_token"}"#);
        assert!(s.principal().is_none());
        let failed = step(&mut s, token(b"\x01".to_vec()), 1, t0);
        let SaslStep::Close { delay, reason, .. } = &failed else {
            panic!("{failed:?}")
        };
        assert_eq!(*delay, DELAY);
        assert!(reason.contains("expired"), "{reason}");
        let signature = jwt
            .trim_end_matches('\u{1}')
            .rsplit('.')
            .next()
            .expect("sig");
        assert!(!reason.contains(signature) && !format!("{failed:?}").contains(signature));
        let (code, message) = refusal(failed);
        assert_eq!(code, ResponseError::SaslAuthenticationFailed.code());
        assert_eq!(message, r#"{"status":"invalid_token"}"#);
        // A message that is not RFC 7628's fails at once.
        let mut s = session(&jwks, None);
        start(&mut s, t0);
        let (code, _) = refusal(step(&mut s, token(b"Bearer xyz".to_vec()), 1, t0));
        assert_eq!(code, ResponseError::SaslAuthenticationFailed.code());
    }

    #[test]
    fn a_rotated_key_set_is_read_when_a_token_names_a_new_key() {
        let dir = tempfile::tempdir().expect("dir");
        let jwks = dir.path().join("jwks.json");
        let (old, new) = (signer("old"), signer("new"));
        write_jwks(&jwks, &[&old]);
        let t0 = Instant::now();
        let v = validator(&jwks);
        let mut s = session_with(&v, None);
        start(&mut s, t0);
        let challenge = authenticate_answer(step(&mut s, new.token("alice", WALL + 60), 1, t0));
        assert!(!challenge.auth_bytes.is_empty(), "unknown kid refused");
        // The file changes: the next token naming the new key finds it.
        write_jwks(&jwks, &[&old, &new]);
        let mut s = session_with(&v, None);
        start(&mut s, t0);
        let ok = authenticate_answer(step(&mut s, new.token("alice", WALL + 60), 1, t0));
        assert!(ok.auth_bytes.is_empty() && ok.error_code == 0, "{ok:?}");
    }
}
