//! The four SCRAM messages (RFC 5802 section 7), parsed from untrusted bytes and formatted.
//! Every parser bounds its input and answers a typed error; none panics.

use crate::error::SaslError;
use base64::Engine;

/// Longest SCRAM message accepted.
pub const MAX_MESSAGE_BYTES: usize = 8192;
/// Most extensions a client-first-message may carry.
const MAX_EXTENSIONS: usize = 16;

pub(crate) const B64: base64::engine::GeneralPurpose = base64::engine::general_purpose::STANDARD;

/// `client-first-message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The GS2 header as sent (`n,,` or `n,a=...,`): client-final's `c=` must be its base64.
    pub gs2_header: String,
    /// The authorization id, if any.
    pub authzid: Option<String>,
    /// The username, unescaped.
    pub username: String,
    /// The client's nonce.
    pub nonce: String,
    /// Extensions after the nonce (Kafka's `tokenauth=true`), in order.
    pub extensions: Vec<(String, String)>,
    /// `client-first-message-bare`, part of the AuthMessage.
    pub bare: String,
}

/// `server-first-message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFirst {
    /// Client nonce followed by the server's.
    pub nonce: String,
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: i32,
    /// The message as sent, part of the AuthMessage.
    pub raw: String,
}

/// `client-final-message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFinal {
    /// The decoded `c=` attribute (the GS2 header, without channel binding data).
    pub channel_binding: Vec<u8>,
    /// The combined nonce.
    pub nonce: String,
    /// `ClientProof`.
    pub proof: Vec<u8>,
    /// `client-final-message-without-proof`, part of the AuthMessage.
    pub without_proof: String,
}

/// `server-final-message`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ServerFinal {
    /// `v=`: the server signature.
    Verifier(Vec<u8>),
    /// `e=`: the server's error.
    Error(String),
}

fn text<'a>(message: &'static str, bytes: &'a [u8]) -> Result<&'a str, SaslError> {
    SaslError::check_len(message, bytes.len(), MAX_MESSAGE_BYTES)?;
    std::str::from_utf8(bytes).map_err(|_| SaslError::malformed(message, "not UTF-8"))
}

/// The value of `name=value`, or an error naming the expected attribute.
fn attr<'a>(
    message: &'static str,
    part: Option<&'a str>,
    name: char,
) -> Result<&'a str, SaslError> {
    part.and_then(|p| p.strip_prefix(name))
        .and_then(|p| p.strip_prefix('='))
        .ok_or_else(|| SaslError::malformed(message, format!("expected attribute {name}=")))
}

fn nonce(message: &'static str, part: Option<&str>) -> Result<String, SaslError> {
    let n = attr(message, part, 'r')?;
    // RFC 5802: printable ASCII except ','.
    if n.is_empty() || !n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
        return Err(SaslError::malformed(
            message,
            "nonce is empty or not printable",
        ));
    }
    Ok(n.to_string())
}

fn base64_attr(
    message: &'static str,
    part: Option<&str>,
    name: char,
) -> Result<Vec<u8>, SaslError> {
    B64.decode(attr(message, part, name)?)
        .map_err(|_| SaslError::malformed(message, format!("{name}= is not base64")))
}

/// Unescapes a `saslname` (`=2C` is `,`, `=3D` is `=`).
pub fn decode_saslname(message: &'static str, s: &str) -> Result<String, SaslError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if after.starts_with("2C") {
            out.push(',');
        } else if after.starts_with("3D") {
            out.push('=');
        } else {
            return Err(SaslError::malformed(message, "bad '=' escape in a name"));
        }
        rest = &after[2..];
    }
    out.push_str(rest);
    if out.is_empty() {
        return Err(SaslError::malformed(message, "empty name"));
    }
    Ok(out)
}

/// Escapes a name as a `saslname`.
pub fn encode_saslname(s: &str) -> String {
    s.replace('=', "=3D").replace(',', "=2C")
}

fn extensions(
    message: &'static str,
    parts: impl Iterator<Item = impl AsRef<str>>,
) -> Result<Vec<(String, String)>, SaslError> {
    let mut out = Vec::new();
    for p in parts {
        let p = p.as_ref();
        let (k, v) = p
            .split_once('=')
            .filter(|(k, _)| !k.is_empty())
            .ok_or_else(|| SaslError::malformed(message, "extension is not key=value"))?;
        if out.len() == MAX_EXTENSIONS {
            return Err(SaslError::malformed(message, "too many extensions"));
        }
        out.push((k.to_string(), v.to_string()));
    }
    Ok(out)
}

impl ClientFirst {
    /// Parses a `client-first-message`.
    pub fn parse(bytes: &[u8]) -> Result<Self, SaslError> {
        const M: &str = "client-first-message";
        let s = text(M, bytes)?;
        let mut parts = s.splitn(3, ',');
        match parts.next() {
            Some("n") | Some("y") => {}
            Some(p) if p.starts_with("p=") => return Err(SaslError::ChannelBindingUnsupported),
            _ => return Err(SaslError::malformed(M, "bad GS2 channel binding flag")),
        }
        let authzid = match parts.next() {
            Some("") => None,
            Some(a) => Some(decode_saslname(M, attr(M, Some(a), 'a')?)?),
            None => return Err(SaslError::malformed(M, "missing GS2 header")),
        };
        let bare = parts
            .next()
            .ok_or_else(|| SaslError::malformed(M, "missing client-first-message-bare"))?;
        let gs2_header = s[..s.len() - bare.len()].to_string();
        let mut fields = bare.split(',');
        let mut first = fields.next();
        if first.is_some_and(|f| f.starts_with("m=")) {
            // RFC 5802 reserves m= for mandatory extensions nobody defines: refuse them.
            return Err(SaslError::malformed(
                M,
                "mandatory extension m= not supported",
            ));
        }
        let username = decode_saslname(M, attr(M, first.take(), 'n')?)?;
        let nonce = nonce(M, fields.next())?;
        let extensions = extensions(M, fields)?;
        Ok(ClientFirst {
            gs2_header,
            authzid,
            username,
            nonce,
            extensions,
            bare: bare.to_string(),
        })
    }

    /// Builds the message a client sends (no authzid, no channel binding).
    pub fn new(username: &str, nonce: &str, extensions: &[(String, String)]) -> Self {
        let mut bare = format!("n={},r={nonce}", encode_saslname(username));
        for (k, v) in extensions {
            bare.push_str(&format!(",{k}={v}"));
        }
        ClientFirst {
            gs2_header: "n,,".into(),
            authzid: None,
            username: username.to_string(),
            nonce: nonce.to_string(),
            extensions: extensions.to_vec(),
            bare,
        }
    }

    /// The bytes to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        format!("{}{}", self.gs2_header, self.bare).into_bytes()
    }
}

impl ServerFirst {
    /// Parses a `server-first-message`.
    pub fn parse(bytes: &[u8]) -> Result<Self, SaslError> {
        const M: &str = "server-first-message";
        let s = text(M, bytes)?;
        let mut fields = s.split(',');
        let mut first = fields.next();
        if first.is_some_and(|f| f.starts_with("m=")) {
            return Err(SaslError::malformed(
                M,
                "mandatory extension m= not supported",
            ));
        }
        let nonce = nonce(M, first.take())?;
        let salt = base64_attr(M, fields.next(), 's')?;
        let i = attr(M, fields.next(), 'i')?;
        let iterations = i
            .parse::<i32>()
            .map_err(|_| SaslError::malformed(M, "i= is not a number"))?;
        extensions(M, fields)?;
        Ok(ServerFirst {
            nonce,
            salt,
            iterations,
            raw: s.to_string(),
        })
    }

    /// Builds the message a server sends.
    pub fn new(nonce: &str, salt: &[u8], iterations: i32) -> Self {
        ServerFirst {
            nonce: nonce.to_string(),
            salt: salt.to_vec(),
            iterations,
            raw: format!("r={nonce},s={},i={iterations}", B64.encode(salt)),
        }
    }
}

impl ClientFinal {
    /// Parses a `client-final-message`.
    pub fn parse(bytes: &[u8]) -> Result<Self, SaslError> {
        const M: &str = "client-final-message";
        let s = text(M, bytes)?;
        let (without_proof, proof) = s
            .rsplit_once(",p=")
            .ok_or_else(|| SaslError::malformed(M, "missing proof p="))?;
        let proof = B64
            .decode(proof)
            .map_err(|_| SaslError::malformed(M, "p= is not base64"))?;
        let mut fields = without_proof.split(',');
        let channel_binding = base64_attr(M, fields.next(), 'c')?;
        let nonce = nonce(M, fields.next())?;
        extensions(M, fields)?;
        Ok(ClientFinal {
            channel_binding,
            nonce,
            proof,
            without_proof: without_proof.to_string(),
        })
    }

    /// The message without its proof, for the AuthMessage the proof is computed over.
    pub fn without_proof(gs2_header: &str, nonce: &str) -> String {
        format!("c={},r={nonce}", B64.encode(gs2_header))
    }

    /// The bytes to send: `without_proof` plus the proof.
    pub fn to_bytes(without_proof: &str, proof: &[u8]) -> Vec<u8> {
        format!("{without_proof},p={}", B64.encode(proof)).into_bytes()
    }
}

impl ServerFinal {
    /// Parses a `server-final-message`.
    pub fn parse(bytes: &[u8]) -> Result<Self, SaslError> {
        const M: &str = "server-final-message";
        let s = text(M, bytes)?;
        let mut fields = s.split(',');
        let first = fields.next();
        if let Ok(e) = attr(M, first, 'e') {
            return Ok(ServerFinal::Error(e.to_string()));
        }
        let v = base64_attr(M, first, 'v')?;
        extensions(M, fields)?;
        Ok(ServerFinal::Verifier(v))
    }

    /// The bytes to send.
    pub fn to_bytes(&self) -> Vec<u8> {
        match self {
            ServerFinal::Verifier(v) => format!("v={}", B64.encode(v)).into_bytes(),
            ServerFinal::Error(e) => format!("e={e}").into_bytes(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn client_first_with_escapes_authzid_and_extension() {
        let m = ClientFirst::parse(b"n,a=al=2Cice,n=al=2Cice,r=abc,tokenauth=true").expect("parse");
        assert_eq!(m.gs2_header, "n,a=al=2Cice,");
        assert_eq!(m.authzid.as_deref(), Some("al,ice"));
        assert_eq!(m.username, "al,ice");
        assert_eq!(m.nonce, "abc");
        assert_eq!(m.extensions, vec![("tokenauth".into(), "true".into())]);
        assert_eq!(m.bare, "n=al=2Cice,r=abc,tokenauth=true");
        let built = ClientFirst::new("a=b,c", "xyz", &[]);
        let back = ClientFirst::parse(&built.to_bytes()).expect("round trip");
        assert_eq!(back, built);
    }

    #[test]
    fn client_first_refusals() {
        let err = |b: &[u8]| ClientFirst::parse(b).unwrap_err();
        assert_eq!(
            err(b"p=tls-unique,,n=a,r=b"),
            SaslError::ChannelBindingUnsupported
        );
        assert!(matches!(err(b"n,,n=a"), SaslError::Malformed { .. }));
        assert!(matches!(err(b"n,,n=a=ZZ,r=b"), SaslError::Malformed { .. }));
        assert!(matches!(err(b"n,,n=,r=b"), SaslError::Malformed { .. }));
        assert!(matches!(
            err(b"n,,m=x,n=a,r=b"),
            SaslError::Malformed { .. }
        ));
        assert!(matches!(err(b"n,,n=a,r=b c"), SaslError::Malformed { .. }));
        assert!(matches!(
            err(b"n,,n=a,r=b,noequals"),
            SaslError::Malformed { .. }
        ));
        assert!(matches!(err(&[0xff, 0xfe]), SaslError::Malformed { .. }));
        let long = vec![b'a'; MAX_MESSAGE_BYTES + 1];
        assert!(matches!(err(&long), SaslError::TooLong { .. }));
    }

    #[test]
    fn server_messages_round_trip() {
        let sf = ServerFirst::new("abcdef", b"salt!", 4096);
        assert_eq!(ServerFirst::parse(sf.raw.as_bytes()).expect("parse"), sf);
        assert!(ServerFirst::parse(b"r=a,s=***,i=4096").is_err());
        assert!(ServerFirst::parse(b"r=a,s=AAAA,i=lots").is_err());
        let v = ServerFinal::Verifier(vec![1, 2, 3]);
        assert_eq!(ServerFinal::parse(&v.to_bytes()).expect("parse"), v);
        assert_eq!(
            ServerFinal::parse(b"e=invalid-proof").expect("parse"),
            ServerFinal::Error("invalid-proof".into())
        );
        let cf = ClientFinal::to_bytes(&ClientFinal::without_proof("n,,", "ab"), &[9; 32]);
        let parsed = ClientFinal::parse(&cf).expect("parse");
        assert_eq!(parsed.channel_binding, b"n,,");
        assert_eq!(parsed.proof, vec![9; 32]);
        assert_eq!(parsed.without_proof, "c=biws,r=ab");
        assert!(ClientFinal::parse(b"c=biws,r=ab").is_err());
    }
}
