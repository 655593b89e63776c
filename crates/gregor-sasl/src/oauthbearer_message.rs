//! SASL/OAUTHBEARER messages (RFC 7628, KIP-255): the client's initial response
//! `n,[a=<authzid>],\x01auth=Bearer <token>\x01[<key>=<value>\x01]*\x01`, and the `\x01` a client
//! sends after the server's error challenge. Kafka takes only the `n` (no channel binding) GS2
//! flag; `y` (the client could bind, the server did not offer it) means the same here.

use std::collections::BTreeMap;

use crate::error::SaslError;
use crate::secret::Password;

/// Longest initial response accepted. A JWT with many claims is a few kilobytes.
pub const MAX_OAUTHBEARER_BYTES: usize = 64 * 1024;

/// What a client answers to the server's error challenge (RFC 7628 section 3.2.3).
pub const OAUTHBEARER_FAILURE_REPLY: &[u8] = b"\x01";

const M: &str = "OAUTHBEARER client initial response";
const SEP: char = '\u{1}';

/// A parsed initial response. The token's `Debug` is redacted.
#[derive(Debug, Clone)]
pub struct OAuthBearerInitialResponse {
    /// The authorization id (`a=`), if given.
    pub authzid: Option<String>,
    /// The bearer token (a JWT for Gregor's validator).
    pub token: Password,
    /// SASL extensions (KIP-342): every `key=value` pair but `auth`.
    pub extensions: BTreeMap<String, String>,
}

impl OAuthBearerInitialResponse {
    /// A response carrying `token`, without authzid or extensions (what Gregor's client sends).
    pub fn bearer(token: Password) -> Self {
        OAuthBearerInitialResponse {
            authzid: None,
            token,
            extensions: BTreeMap::new(),
        }
    }

    /// Parses untrusted bytes.
    pub fn parse(bytes: &[u8]) -> Result<Self, SaslError> {
        SaslError::check_len(M, bytes.len(), MAX_OAUTHBEARER_BYTES)?;
        let text = std::str::from_utf8(bytes).map_err(|_| SaslError::malformed(M, "not UTF-8"))?;
        let rest = text
            .strip_prefix("n,")
            .or_else(|| text.strip_prefix("y,"))
            .ok_or_else(|| {
                SaslError::malformed(M, "must start with the GS2 header n, (no channel binding)")
            })?;
        let (authzid, rest) = rest
            .split_once(',')
            .ok_or_else(|| SaslError::malformed(M, "GS2 header has no second ','"))?;
        let authzid = match authzid {
            "" => None,
            a => Some(parse_authzid(a)?),
        };
        let pairs = rest
            .strip_prefix(SEP)
            .and_then(|r| r.strip_suffix("\u{1}\u{1}"))
            .ok_or_else(|| {
                SaslError::malformed(M, "key-value pairs must sit between ^A and ^A^A")
            })?;
        let mut token = None;
        let mut extensions = BTreeMap::new();
        for pair in pairs.split(SEP) {
            let (key, value) = parse_pair(pair)?;
            if key == "auth" {
                if token.is_some() {
                    return Err(SaslError::malformed(M, "auth given twice"));
                }
                token = Some(parse_auth(value)?);
            } else if extensions
                .insert(key.to_string(), value.to_string())
                .is_some()
            {
                return Err(SaslError::malformed(
                    M,
                    format!("extension {key} given twice"),
                ));
            }
        }
        let token = token.ok_or_else(|| SaslError::malformed(M, "no auth=Bearer <token>"))?;
        Ok(OAuthBearerInitialResponse {
            authzid,
            token,
            extensions,
        })
    }

    /// The bytes a client sends.
    pub fn to_bytes(&self) -> Vec<u8> {
        let mut out = String::from("n,");
        if let Some(a) = &self.authzid {
            out.push_str("a=");
            out.push_str(&a.replace('=', "=3D").replace(',', "=2C"));
        }
        out.push(',');
        out.push(SEP);
        out.push_str("auth=Bearer ");
        out.push_str(self.token.expose());
        out.push(SEP);
        for (k, v) in &self.extensions {
            out.push_str(k);
            out.push('=');
            out.push_str(v);
            out.push(SEP);
        }
        out.push(SEP);
        out.into_bytes()
    }
}

/// `a=` value: a saslname with `=2C` and `=3D` escapes (RFC 5801).
fn parse_authzid(a: &str) -> Result<String, SaslError> {
    let name = a
        .strip_prefix("a=")
        .ok_or_else(|| SaslError::malformed(M, "GS2 authzid must be a=<name>"))?;
    let mut out = String::with_capacity(name.len());
    let mut rest = name;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let escaped = rest.get(i..i + 3);
        match escaped {
            Some("=2C") => out.push(','),
            Some("=3D") => out.push('='),
            _ => return Err(SaslError::malformed(M, "bad escape in authzid")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(SaslError::malformed(M, "empty authzid"));
    }
    Ok(out)
}

/// One `key=value`: keys are letters, values printable ASCII, space, tab, CR or LF (RFC 7628).
fn parse_pair(pair: &str) -> Result<(&str, &str), SaslError> {
    let (key, value) = pair
        .split_once('=')
        .ok_or_else(|| SaslError::malformed(M, "a key-value pair has no '='"))?;
    if key.is_empty() || !key.bytes().all(|b| b.is_ascii_alphabetic()) {
        return Err(SaslError::malformed(M, "keys must be ASCII letters"));
    }
    let value_ok = |b: u8| matches!(b, 0x21..=0x7e | b' ' | b'\t' | b'\r' | b'\n');
    if value.is_empty() || !value.bytes().all(value_ok) {
        return Err(SaslError::malformed(
            M,
            format!("the value of {key} has a character RFC 7628 does not allow"),
        ));
    }
    Ok((key, value))
}

/// `Bearer <b64token>` (RFC 6750's token68 characters); the scheme is case-insensitive.
fn parse_auth(value: &str) -> Result<Password, SaslError> {
    let (scheme, token) = value
        .split_once(' ')
        .ok_or_else(|| SaslError::malformed(M, "auth must be Bearer <token>"))?;
    if !scheme.eq_ignore_ascii_case("bearer") {
        return Err(SaslError::malformed(M, "auth must be Bearer <token>"));
    }
    let body = token.trim_end_matches('=');
    let token_char = |b: u8| b.is_ascii_alphanumeric() || b"-._~+/".contains(&b);
    if body.is_empty() || !body.bytes().all(token_char) {
        return Err(SaslError::malformed(
            M,
            "the bearer token has characters a token may not have",
        ));
    }
    Ok(Password::new(token))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_kafka_clients_send() {
        let m = OAuthBearerInitialResponse::parse(b"n,,\x01auth=Bearer eyJ.a-b_c.d~+/=\x01\x01")
            .expect("valid");
        assert_eq!(m.authzid, None);
        assert_eq!(m.token.expose(), "eyJ.a-b_c.d~+/=");
        assert!(m.extensions.is_empty());
        assert!(!format!("{m:?}").contains("eyJ"));
        let m = OAuthBearerInitialResponse::parse(
            b"n,a=al=2Cice,\x01auth=bearer t.o.k\x01traceId=abc 123\x01logicalCluster=lc-1\x01\x01",
        )
        .expect("valid");
        assert_eq!(m.authzid.as_deref(), Some("al,ice"));
        assert_eq!(
            m.extensions.get("traceId").map(String::as_str),
            Some("abc 123")
        );
        assert_eq!(m.extensions.len(), 2);
        let again = OAuthBearerInitialResponse::parse(&m.to_bytes()).expect("round trip");
        assert_eq!(again.authzid, m.authzid);
        assert_eq!(again.extensions, m.extensions);
        assert_eq!(again.token.expose(), "t.o.k");
    }

    #[test]
    fn refuses_what_rfc_7628_does_not_allow() {
        for bad in [
            &b""[..],
            b"\x01",
            b"p=tls-unique,,\x01auth=Bearer t\x01\x01",
            b"n,,\x01auth=Bearer t\x01",
            b"n,,auth=Bearer t\x01\x01",
            b"n,,\x01\x01",
            b"n,,\x01auth=Basic t\x01\x01",
            b"n,,\x01auth=Bearer \x01\x01",
            b"n,,\x01auth=Bearer t t\x01\x01",
            b"n,,\x01auth=Bearer t\x01auth=Bearer u\x01\x01",
            b"n,,\x01auth=Bearer t\x011x=y\x01\x01",
            b"n,,\x01auth=Bearer t\x01x=\x01\x01",
            b"n,,\x01auth=Bearer t\x01x=\xc3\xa9\x01\x01",
            b"n,a=x=2,\x01auth=Bearer t\x01\x01",
            b"n,a=,\x01auth=Bearer t\x01\x01",
        ] {
            assert!(
                matches!(
                    OAuthBearerInitialResponse::parse(bad),
                    Err(SaslError::Malformed { .. })
                ),
                "{bad:?}"
            );
        }
        let long = vec![b'a'; MAX_OAUTHBEARER_BYTES + 1];
        assert!(matches!(
            OAuthBearerInitialResponse::parse(&long),
            Err(SaslError::TooLong { .. })
        ));
    }
}
