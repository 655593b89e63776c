use super::*;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine;
use jsonwebtoken::{EncodingKey, Header};
use serde_json::json;

/// A signing key and its JWK.
struct Signer {
    kid: String,
    alg: Algorithm,
    key: EncodingKey,
    jwk: Value,
}

fn p256(kid: &str) -> Signer {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256).expect("key");
    let raw = pair.public_key_raw();
    Signer {
        kid: kid.into(),
        alg: Algorithm::ES256,
        key: EncodingKey::from_ec_der(&pair.serialize_der()),
        jwk: json!({"kty": "EC", "crv": "P-256", "kid": kid, "use": "sig",
            "x": URL_SAFE_NO_PAD.encode(&raw[1..33]), "y": URL_SAFE_NO_PAD.encode(&raw[33..65])}),
    }
}

fn ed25519(kid: &str) -> Signer {
    let pair = rcgen::KeyPair::generate_for(&rcgen::PKCS_ED25519).expect("key");
    Signer {
        kid: kid.into(),
        alg: Algorithm::EdDSA,
        key: EncodingKey::from_ed_der(&pair.serialize_der()),
        jwk: json!({"kty": "OKP", "crv": "Ed25519", "kid": kid, "alg": "EdDSA",
            "x": URL_SAFE_NO_PAD.encode(pair.public_key_raw())}),
    }
}

impl Signer {
    fn sign(&self, claims: &Value) -> String {
        let mut header = Header::new(self.alg);
        header.kid = Some(self.kid.clone());
        jsonwebtoken::encode(&header, claims, &self.key).expect("sign")
    }
}

fn keys(signers: &[&Signer]) -> JwkKeys {
    let set = json!({"keys": signers.iter().map(|s| s.jwk.clone()).collect::<Vec<_>>()});
    JwkKeys::from_json(&set.to_string()).expect("jwks")
}

const NOW_MS: i64 = 1_800_000_000_000;
const NOW: i64 = NOW_MS / 1000;

fn rules() -> JwtRules {
    JwtRules {
        expected_audiences: vec!["gregor".into(), "kafka".into()],
        expected_issuer: Some("https://issuer.example".into()),
        ..JwtRules::default()
    }
}

fn claims() -> Value {
    // The issuer on a line of its own: its "//" must not hide the closing braces from
    // line-based tools that take it for a comment.
    json!({"sub": "alice", "exp": NOW + 600, "iat": NOW, "aud": ["other", "kafka"],
        "scope": "produce consume",
        "iss": "https://issuer.example",
    })
}

fn with(changes: Value) -> Value {
    let mut c = claims();
    for (k, v) in changes.as_object().expect("object") {
        match v {
            Value::Null => c.as_object_mut().expect("object").remove(k),
            v => c
                .as_object_mut()
                .expect("object")
                .insert(k.clone(), v.clone()),
        };
    }
    c
}

#[test]
fn a_signed_token_gives_its_subject_and_expiry() {
    let (ec, ed) = (p256("ec-1"), ed25519("ed-1"));
    let set = keys(&[&ec, &ed]);
    assert_eq!(set.kids(), vec!["ec-1", "ed-1"]);
    for signer in [&ec, &ed] {
        let t = validate_token(&signer.sign(&claims()), &set, &rules(), NOW_MS).expect("valid");
        assert_eq!(t.principal, "alice");
        assert_eq!(t.expires_at_ms, (NOW + 600) * 1000);
        assert_eq!(t.scopes, vec!["produce", "consume"]);
    }
    // Through the SASL message, with another sub claim name and a string aud.
    let r = JwtRules {
        sub_claim_name: "client_id".into(),
        ..rules()
    };
    let token = ec.sign(&with(json!({"client_id": "svc-1", "aud": "gregor"})));
    let message = OAuthBearerInitialResponse::bearer(token.as_str().into()).to_bytes();
    let t = validate_initial_response(&message, &set, &r, NOW_MS).expect("valid");
    assert_eq!(t.principal, "svc-1");
    assert_eq!(token_key_id(&message).as_deref(), Some("ec-1"));
}

/// An issuer the rules do not expect.
const EVIL_ISSUER: &str = "https://evil.example";

#[test]
fn each_broken_rule_is_named() {
    let ec = p256("ec-1");
    let set = keys(&[&ec]);
    let check = |claims: Value| validate_token(&ec.sign(&claims), &set, &rules(), NOW_MS);
    assert_eq!(
        check(with(json!({"exp": NOW - 31}))),
        Err(OAuthBearerError::Expired {
            exp: NOW - 31,
            now: NOW,
            skew: 30
        })
    );
    // Within the clock skew.
    assert!(check(with(json!({"exp": NOW - 29}))).is_ok());
    assert!(check(with(json!({"nbf": NOW + 29}))).is_ok());
    assert!(matches!(
        check(with(json!({"nbf": NOW + 31}))),
        Err(OAuthBearerError::NotYetValid { claim: "nbf", .. })
    ));
    assert!(matches!(
        check(with(json!({"iat": NOW + 31}))),
        Err(OAuthBearerError::NotYetValid { claim: "iat", .. })
    ));
    assert_eq!(
        check(with(json!({"exp": null}))),
        Err(OAuthBearerError::Claim("exp".into()))
    );
    assert_eq!(
        check(with(json!({"exp": "tomorrow"}))),
        Err(OAuthBearerError::Claim("exp".into()))
    );
    assert_eq!(
        check(with(json!({"aud": "someone-else"}))),
        Err(OAuthBearerError::WrongAudience)
    );
    assert_eq!(
        check(with(json!({"aud": null}))),
        Err(OAuthBearerError::WrongAudience)
    );
    assert_eq!(
        check(with(json!({"iss": EVIL_ISSUER}))),
        Err(OAuthBearerError::WrongIssuer)
    );
    assert_eq!(
        check(with(json!({"sub": ""}))),
        Err(OAuthBearerError::Claim("sub".into()))
    );
    // Without expectations, aud and iss are not checked.
    let lax = JwtRules::default();
    let token = ec.sign(&with(json!({"aud": null, "iss": null})));
    assert!(validate_token(&token, &set, &lax, NOW_MS).is_ok());
}

#[test]
fn signatures_keys_and_algorithms_are_checked() {
    let (ec, other) = (p256("ec-1"), p256("ec-1"));
    let set = keys(&[&ec]);
    let r = rules();
    // Same kid, another key: the signature does not verify.
    assert_eq!(
        validate_token(&other.sign(&claims()), &set, &r, NOW_MS),
        Err(OAuthBearerError::InvalidSignature)
    );
    // A tampered payload.
    let token = ec.sign(&claims());
    let parts: Vec<&str> = token.split('.').collect();
    let forged = URL_SAFE_NO_PAD.encode(with(json!({"sub": "admin"})).to_string());
    let tampered = format!("{}.{}.{}", parts[0], forged, parts[2]);
    assert_eq!(
        validate_token(&tampered, &set, &r, NOW_MS),
        Err(OAuthBearerError::InvalidSignature)
    );
    // alg none, and HMAC keyed with anything.
    let none_header = URL_SAFE_NO_PAD.encode(r#"{"alg":"none","kid":"ec-1"}"#);
    let none = format!("{none_header}.{}.", parts[1]);
    assert!(matches!(
        validate_token(&none, &set, &r, NOW_MS),
        Err(OAuthBearerError::UnsupportedAlgorithm(a)) if a == "none"
    ));
    let mut hs = Header::new(Algorithm::HS256);
    hs.kid = Some("ec-1".into());
    let hmac = jsonwebtoken::encode(&hs, &claims(), &EncodingKey::from_secret(b"k")).expect("hs");
    assert!(matches!(
        validate_token(&hmac, &set, &r, NOW_MS),
        Err(OAuthBearerError::UnsupportedAlgorithm(_))
    ));
    // An unknown kid; an alg that does not fit the key.
    let stranger = p256("ec-2");
    assert_eq!(
        validate_token(&stranger.sign(&claims()), &set, &r, NOW_MS),
        Err(OAuthBearerError::UnknownKey(Some("ec-2".into())))
    );
    let mut rs = Header::new(Algorithm::RS256);
    rs.kid = Some("ec-1".into());
    let rs_header = URL_SAFE_NO_PAD.encode(serde_json::to_vec(&rs).expect("json"));
    let wrong_alg = format!("{rs_header}.{}.{}", parts[1], parts[2]);
    assert!(matches!(
        validate_token(&wrong_alg, &set, &r, NOW_MS),
        Err(OAuthBearerError::KeyMismatch { .. })
    ));
    for garbage in ["", "a.b", "a.b.c", "....", "eyJ9.e30.x"] {
        assert!(
            matches!(
                validate_token(garbage, &set, &r, NOW_MS),
                Err(OAuthBearerError::MalformedToken(_))
            ),
            "{garbage}"
        );
    }
}

#[test]
fn key_sets_skip_what_cannot_verify_and_need_a_kid_when_ambiguous() {
    let (a, b) = (p256("a"), p256("b"));
    let text = json!({"keys": [
        a.jwk, b.jwk,
        {"kty": "oct", "k": "c2VjcmV0", "kid": "hmac"},
        {"kty": "EC", "crv": "P-256", "use": "enc", "kid": "enc",
            "x": a.jwk["x"], "y": a.jwk["y"]},
        {"kty": "whatever"},
    ]});
    let set = JwkKeys::from_json(&text.to_string()).expect("jwks");
    assert_eq!((set.len(), set.skipped()), (2, 3));
    let mut header = Header::new(Algorithm::ES256);
    header.kid = None;
    let no_kid = jsonwebtoken::encode(&header, &claims(), &a.key).expect("sign");
    assert_eq!(
        validate_token(&no_kid, &set, &rules(), NOW_MS),
        Err(OAuthBearerError::UnknownKey(None))
    );
    let single = keys(&[&a]);
    assert!(validate_token(&no_kid, &single, &rules(), NOW_MS).is_ok());
    for bad in ["", "[]", "{}", r#"{"keys": 1}"#] {
        assert!(
            matches!(JwkKeys::from_json(bad), Err(OAuthBearerError::Jwks(_))),
            "{bad}"
        );
    }
    assert!(!format!("{set:?}").contains(a.jwk["x"].as_str().expect("x")));
}
