//! SASL/OAUTHBEARER on the server (KIP-255, KIP-768): the bearer token is a JWT, signed by a key
//! of a JSON Web Key Set, checked as Kafka's broker-side validator does: the header's `alg` must
//! fit the key its `kid` names (RS256/384/512, PS256/384/512, ES256, ES384, EdDSA; never `none`
//! nor an HMAC secret), `exp` is required, `nbf` and `iat` may not lie in the future, all with
//! `sasl.oauthbearer.clock.skew.seconds` of leeway; `aud` (a string or an array) must hold one
//! of the expected audiences and `iss` must be the expected issuer when those are set; the
//! principal is the string claim `sasl.oauthbearer.sub.claim.name` names.
//!
//! Signatures are checked by `jsonwebtoken` (ring). Time is passed in: the crate's own clock
//! checks are turned off and the claims are checked here against `now`.

use std::collections::BTreeSet;

use jsonwebtoken::jwk::{AlgorithmParameters, EllipticCurve, Jwk};
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde_json::Value;

use crate::oauthbearer_message::OAuthBearerInitialResponse;
use crate::SaslError;

/// Why a token or a key set was refused. Never carries the token or a signature.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum OAuthBearerError {
    /// The SASL message itself is malformed.
    #[error(transparent)]
    Message(#[from] SaslError),
    /// Not three base64url parts with a JSON header.
    #[error("malformed JWT: {0}")]
    MalformedToken(String),
    /// `alg` missing, `none`, HMAC, or one Gregor does not verify.
    #[error("unsupported JWT alg {0}")]
    UnsupportedAlgorithm(String),
    /// No key of the set has the header's `kid` (or, without `kid`, no single key fits `alg`).
    #[error("no key in the JWKS for kid {0:?}")]
    UnknownKey(Option<String>),
    /// The key the `kid` names is of another type, curve or `alg` than the header's.
    #[error("JWT alg {alg} does not fit key {kid:?}")]
    KeyMismatch { alg: String, kid: Option<String> },
    /// The signature does not verify.
    #[error("invalid JWT signature")]
    InvalidSignature,
    /// A required claim is absent or of the wrong type.
    #[error("JWT claim {0} is missing or not of the right type")]
    Claim(String),
    /// `exp` has passed (beyond the clock skew).
    #[error("JWT expired at {exp} (now {now}, clock skew {skew} s)")]
    Expired { exp: i64, now: i64, skew: u64 },
    /// `nbf` or `iat` is in the future (beyond the clock skew).
    #[error("JWT {claim} {at} is in the future (now {now}, clock skew {skew} s)")]
    NotYetValid {
        claim: &'static str,
        at: i64,
        now: i64,
        skew: u64,
    },
    /// `aud` holds none of the expected audiences.
    #[error("JWT aud is not one of the expected audiences")]
    WrongAudience,
    /// `iss` is not the expected issuer.
    #[error("JWT iss is not the expected issuer")]
    WrongIssuer,
    /// The key set does not parse.
    #[error("invalid JWKS: {0}")]
    Jwks(String),
}

/// How tokens are checked (Kafka's `sasl.oauthbearer.*` broker settings).
#[derive(Debug, Clone)]
pub struct JwtRules {
    /// `sasl.oauthbearer.expected.audience`; empty: `aud` is not checked.
    pub expected_audiences: Vec<String>,
    /// `sasl.oauthbearer.expected.issuer`; `None`: `iss` is not checked.
    pub expected_issuer: Option<String>,
    /// `sasl.oauthbearer.sub.claim.name` (Kafka's default: `sub`).
    pub sub_claim_name: String,
    /// `sasl.oauthbearer.scope.claim.name` (Kafka's default: `scope`).
    pub scope_claim_name: String,
    /// `sasl.oauthbearer.clock.skew.seconds` (Kafka's default: 30).
    pub clock_skew_seconds: u64,
}

impl Default for JwtRules {
    fn default() -> Self {
        JwtRules {
            expected_audiences: Vec::new(),
            expected_issuer: None,
            sub_claim_name: "sub".into(),
            scope_claim_name: "scope".into(),
            clock_skew_seconds: 30,
        }
    }
}

/// A validated token.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValidatedToken {
    /// The principal's name (the sub claim).
    pub principal: String,
    /// `exp`, in milliseconds since the epoch: the session may not outlive it (KIP-368).
    pub expires_at_ms: i64,
    /// The scope claim: a space-separated string or an array of strings.
    pub scopes: Vec<String>,
}

/// One usable key of a set.
#[derive(Clone)]
struct Key {
    kid: Option<String>,
    /// The JWK's own `alg`, if it names one.
    alg: Option<Algorithm>,
    /// The algorithms the key's type and curve can verify.
    fits: &'static [Algorithm],
    key: DecodingKey,
}

/// The verification keys of a JSON Web Key Set (RFC 7517). Keys Gregor cannot use (HMAC
/// secrets, unknown types, encryption keys) are skipped, as Kafka's resolver skips them.
#[derive(Clone, Default)]
pub struct JwkKeys {
    keys: Vec<Key>,
    skipped: usize,
}

impl std::fmt::Debug for JwkKeys {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JwkKeys")
            .field("kids", &self.kids())
            .field("skipped", &self.skipped)
            .finish()
    }
}

/// Largest key set file read (a set holds a few keys of a few hundred bytes each).
pub const MAX_JWKS_BYTES: usize = 1024 * 1024;

const RSA_ALGS: &[Algorithm] = &[
    Algorithm::RS256,
    Algorithm::RS384,
    Algorithm::RS512,
    Algorithm::PS256,
    Algorithm::PS384,
    Algorithm::PS512,
];

impl JwkKeys {
    /// Parses a key set document (`{"keys": [...]}`).
    pub fn from_json(text: &str) -> Result<JwkKeys, OAuthBearerError> {
        SaslError::check_len("JWKS", text.len(), MAX_JWKS_BYTES)?;
        let doc: Value =
            serde_json::from_str(text).map_err(|e| OAuthBearerError::Jwks(e.to_string()))?;
        let entries = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| OAuthBearerError::Jwks("no \"keys\" array".into()))?;
        let mut set = JwkKeys::default();
        for entry in entries {
            match usable_key(entry) {
                Some(key) => set.keys.push(key),
                None => set.skipped += 1,
            }
        }
        Ok(set)
    }

    /// How many keys can verify tokens.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether none can.
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// How many entries were skipped (symmetric, encryption-only or unknown keys).
    pub fn skipped(&self) -> usize {
        self.skipped
    }

    /// The key ids, for logs.
    pub fn kids(&self) -> Vec<&str> {
        self.keys.iter().filter_map(|k| k.kid.as_deref()).collect()
    }

    /// The key a token with `kid` and `alg` is checked with.
    fn select(&self, kid: Option<&str>, alg: Algorithm) -> Result<&Key, OAuthBearerError> {
        let mismatch = || OAuthBearerError::KeyMismatch {
            alg: format!("{alg:?}"),
            kid: kid.map(str::to_string),
        };
        let key = match kid {
            Some(kid) => self
                .keys
                .iter()
                .find(|k| k.kid.as_deref() == Some(kid))
                .ok_or_else(|| OAuthBearerError::UnknownKey(Some(kid.to_string())))?,
            // Without a kid, only an unambiguous key will do.
            None => {
                let mut fitting = self.keys.iter().filter(|k| k.fits.contains(&alg));
                match (fitting.next(), fitting.next()) {
                    (Some(k), None) => k,
                    _ => return Err(OAuthBearerError::UnknownKey(None)),
                }
            }
        };
        if !key.fits.contains(&alg) || key.alg.is_some_and(|a| a != alg) {
            return Err(mismatch());
        }
        Ok(key)
    }
}

/// A JWK usable for signature checks, or `None`.
fn usable_key(entry: &Value) -> Option<Key> {
    let jwk: Jwk = serde_json::from_value(entry.clone()).ok()?;
    if entry
        .get("use")
        .and_then(Value::as_str)
        .is_some_and(|u| u != "sig")
    {
        return None;
    }
    let fits: &'static [Algorithm] = match &jwk.algorithm {
        AlgorithmParameters::RSA(_) => RSA_ALGS,
        AlgorithmParameters::EllipticCurve(p) => match p.curve {
            EllipticCurve::P256 => &[Algorithm::ES256],
            EllipticCurve::P384 => &[Algorithm::ES384],
            _ => return None,
        },
        AlgorithmParameters::OctetKeyPair(p) => match p.curve {
            EllipticCurve::Ed25519 => &[Algorithm::EdDSA],
            _ => return None,
        },
        // A symmetric secret has no place in a public key set.
        AlgorithmParameters::OctetKey(_) => return None,
    };
    let alg = match entry.get("alg").and_then(Value::as_str) {
        Some(name) => Some(
            name.parse::<Algorithm>()
                .ok()
                .filter(|a| fits.contains(a))?,
        ),
        None => None,
    };
    let key = DecodingKey::from_jwk(&jwk).ok()?;
    Some(Key {
        kid: jwk.common.key_id.clone(),
        alg,
        fits,
        key,
    })
}

/// Validates the client's initial response; `now_ms` is the wall clock in ms since the epoch.
pub fn validate_initial_response(
    message: &[u8],
    keys: &JwkKeys,
    rules: &JwtRules,
    now_ms: i64,
) -> Result<ValidatedToken, OAuthBearerError> {
    let response = OAuthBearerInitialResponse::parse(message)?;
    validate_token(response.token.expose(), keys, rules, now_ms)
}

/// The header's `kid`, to tell whether a key set lacks it (the shell then re-reads the set).
pub fn token_key_id(message: &[u8]) -> Option<String> {
    let response = OAuthBearerInitialResponse::parse(message).ok()?;
    header(response.token.expose()).ok()?.1
}

/// The header's `alg` and `kid`. `none` and HMAC are refused here.
fn header(token: &str) -> Result<(Algorithm, Option<String>), OAuthBearerError> {
    let encoded = token
        .split('.')
        .next()
        .filter(|_| token.split('.').count() == 3)
        .ok_or_else(|| OAuthBearerError::MalformedToken("not three dot-separated parts".into()))?;
    use base64::Engine;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(encoded)
        .map_err(|_| OAuthBearerError::MalformedToken("header is not base64url".into()))?;
    let json: Value = serde_json::from_slice(&bytes)
        .map_err(|_| OAuthBearerError::MalformedToken("header is not JSON".into()))?;
    let alg = json
        .get("alg")
        .and_then(Value::as_str)
        .unwrap_or("(none given)");
    let parsed = alg
        .parse::<Algorithm>()
        .ok()
        .filter(|a| !matches!(a, Algorithm::HS256 | Algorithm::HS384 | Algorithm::HS512))
        .ok_or_else(|| OAuthBearerError::UnsupportedAlgorithm(alg.chars().take(32).collect()))?;
    let kid = json.get("kid").and_then(Value::as_str).map(str::to_string);
    Ok((parsed, kid))
}

/// Checks a JWT's signature, then its claims against `rules` at `now_ms`.
pub fn validate_token(
    token: &str,
    keys: &JwkKeys,
    rules: &JwtRules,
    now_ms: i64,
) -> Result<ValidatedToken, OAuthBearerError> {
    let (alg, kid) = header(token)?;
    let key = keys.select(kid.as_deref(), alg)?;
    // Signature only: the claims are checked below against the injected time.
    let mut validation = Validation::new(alg);
    validation.validate_exp = false;
    validation.validate_nbf = false;
    validation.validate_aud = false;
    validation.required_spec_claims.clear();
    let data = jsonwebtoken::decode::<Value>(token, &key.key, &validation).map_err(|e| {
        use jsonwebtoken::errors::ErrorKind;
        match e.kind() {
            ErrorKind::InvalidSignature => OAuthBearerError::InvalidSignature,
            ErrorKind::InvalidAlgorithm => OAuthBearerError::KeyMismatch {
                alg: format!("{alg:?}"),
                kid: kid.clone(),
            },
            other => OAuthBearerError::MalformedToken(format!("{other:?}")),
        }
    })?;
    check_claims(&data.claims, rules, now_ms)
}

/// The time and audience rules, and the principal.
fn check_claims(
    claims: &Value,
    rules: &JwtRules,
    now_ms: i64,
) -> Result<ValidatedToken, OAuthBearerError> {
    let now = now_ms.div_euclid(1000);
    let skew = rules.clock_skew_seconds;
    let leeway = i64::try_from(skew).unwrap_or(i64::MAX);
    let number = |name: &'static str| -> Result<Option<i64>, OAuthBearerError> {
        match claims.get(name) {
            None => Ok(None),
            // NumericDate may carry a fraction; whole seconds are enough here.
            Some(v) => v
                .as_f64()
                .filter(|f| f.is_finite())
                .map(|f| Some(f as i64))
                .ok_or_else(|| OAuthBearerError::Claim(name.into())),
        }
    };
    let exp = number("exp")?.ok_or_else(|| OAuthBearerError::Claim("exp".into()))?;
    if now.saturating_sub(leeway) >= exp {
        return Err(OAuthBearerError::Expired { exp, now, skew });
    }
    for claim in ["nbf", "iat"] {
        if let Some(at) = number(claim)? {
            if at > now.saturating_add(leeway) {
                return Err(OAuthBearerError::NotYetValid {
                    claim,
                    at,
                    now,
                    skew,
                });
            }
        }
    }
    if !rules.expected_audiences.is_empty() {
        let aud: BTreeSet<&str> = match claims.get("aud") {
            Some(Value::String(s)) => [s.as_str()].into(),
            Some(Value::Array(a)) => a.iter().filter_map(Value::as_str).collect(),
            _ => BTreeSet::new(),
        };
        if !rules
            .expected_audiences
            .iter()
            .any(|e| aud.contains(e.as_str()))
        {
            return Err(OAuthBearerError::WrongAudience);
        }
    }
    if let Some(issuer) = &rules.expected_issuer {
        if claims.get("iss").and_then(Value::as_str) != Some(issuer.as_str()) {
            return Err(OAuthBearerError::WrongIssuer);
        }
    }
    let principal = claims
        .get(&rules.sub_claim_name)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or_else(|| OAuthBearerError::Claim(rules.sub_claim_name.clone()))?;
    let scopes = match claims.get(&rules.scope_claim_name) {
        Some(Value::String(s)) => s.split_whitespace().map(str::to_string).collect(),
        Some(Value::Array(a)) => a
            .iter()
            .filter_map(Value::as_str)
            .map(str::to_string)
            .collect(),
        _ => Vec::new(),
    };
    Ok(ValidatedToken {
        principal: principal.to_string(),
        expires_at_ms: exp.saturating_mul(1000),
        scopes,
    })
}

/// The server's challenge after a refused token (RFC 7628 section 3.2.2); the client answers
/// with `\x01` and the exchange then fails.
pub fn oauthbearer_error_challenge() -> Vec<u8> {
    br#"{"status":"invalid_token"}"#.to_vec()
}

#[cfg(test)]
#[path = "oauthbearer_tests.rs"]
mod tests;
