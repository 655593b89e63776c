//! SASL/PLAIN (RFC 4616) on the server: the client sends `authzid NUL authcid NUL password`;
//! the user table comes from the PlainLoginModule's JAAS options (`user_<name>="<password>"`),
//! as Kafka's default PLAIN callback handler reads it.

use crate::error::SaslError;
use crate::jaas::parse_jaas;
use crate::secret::Password;
use std::collections::BTreeMap;

/// Kafka's PLAIN login module class.
pub const PLAIN_LOGIN_MODULE: &str = "org.apache.kafka.common.security.plain.PlainLoginModule";

/// Longest PLAIN message accepted (RFC 4616 allows 255 bytes per field).
pub const MAX_PLAIN_BYTES: usize = 8192;

/// The users PLAIN accepts, with their passwords.
#[derive(Debug, Clone, Default)]
pub struct PlainUsers {
    users: BTreeMap<String, Password>,
}

impl PlainUsers {
    /// An empty table.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds or replaces a user.
    pub fn insert(&mut self, user: impl Into<String>, password: Password) {
        self.users.insert(user.into(), password);
    }

    /// The table a PlainLoginModule JAAS line defines.
    pub fn from_jaas(text: &str) -> Result<Self, SaslError> {
        let entry = parse_jaas(text)?;
        if entry.login_module != PLAIN_LOGIN_MODULE {
            return Err(SaslError::Jaas(format!(
                "PLAIN needs {PLAIN_LOGIN_MODULE}, not {}",
                entry.login_module
            )));
        }
        let mut users = PlainUsers::new();
        for (k, v) in &entry.options {
            if let Some(user) = k.strip_prefix("user_").filter(|u| !u.is_empty()) {
                users.insert(user, Password::new(v.as_str()));
            }
        }
        Ok(users)
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.users.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.users.is_empty()
    }

    /// Checks one PLAIN message; returns the authenticated user.
    pub fn authenticate(&self, message: &[u8]) -> Result<String, SaslError> {
        let m = PlainMessage::parse(message)?;
        // An unknown user costs the same comparison as a known one.
        let ok = match self.users.get(&m.authcid) {
            Some(p) => p.matches(m.password.expose().as_bytes()),
            None => {
                let _ = Password::new(m.password.expose()).matches(b"");
                false
            }
        };
        if !ok {
            return Err(SaslError::AuthenticationFailed);
        }
        if !m.authzid.is_empty() && m.authzid != m.authcid {
            return Err(SaslError::AuthorizationIdMismatch { authzid: m.authzid });
        }
        Ok(m.authcid)
    }
}

/// A parsed PLAIN message.
#[derive(Debug, Clone)]
pub struct PlainMessage {
    /// The authorization id (empty: the same as `authcid`).
    pub authzid: String,
    /// The username.
    pub authcid: String,
    /// The password.
    pub password: Password,
}

impl PlainMessage {
    /// Parses `authzid NUL authcid NUL password`.
    pub fn parse(bytes: &[u8]) -> Result<Self, SaslError> {
        const M: &str = "PLAIN message";
        SaslError::check_len(M, bytes.len(), MAX_PLAIN_BYTES)?;
        let text = std::str::from_utf8(bytes).map_err(|_| SaslError::malformed(M, "not UTF-8"))?;
        let parts: Vec<&str> = text.split('\0').collect();
        let [authzid, authcid, password] = parts[..] else {
            return Err(SaslError::malformed(
                M,
                "expected authzid NUL authcid NUL password",
            ));
        };
        if authcid.is_empty() {
            return Err(SaslError::malformed(M, "empty username"));
        }
        if password.is_empty() {
            return Err(SaslError::malformed(M, "empty password"));
        }
        Ok(PlainMessage {
            authzid: authzid.to_string(),
            authcid: authcid.to_string(),
            password: Password::new(password),
        })
    }

    /// The bytes a client sends.
    pub fn to_bytes(&self) -> Vec<u8> {
        format!(
            "{}\0{}\0{}",
            self.authzid,
            self.authcid,
            self.password.expose()
        )
        .into_bytes()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const JAAS: &str = r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin" password="admin-secret" user_admin="admin-secret" user_alice="alice-secret";"#;

    #[test]
    fn users_from_kafkas_jaas_line() {
        let users = PlainUsers::from_jaas(JAAS).expect("jaas");
        assert_eq!(users.len(), 2);
        assert_eq!(
            users.authenticate(b"\0alice\0alice-secret"),
            Ok("alice".into())
        );
        assert_eq!(
            users.authenticate(b"alice\0alice\0alice-secret"),
            Ok("alice".into())
        );
        assert_eq!(
            users.authenticate(b"\0admin\0admin-secret"),
            Ok("admin".into())
        );
        assert_eq!(
            users.authenticate(b"\0alice\0admin-secret"),
            Err(SaslError::AuthenticationFailed)
        );
        assert_eq!(
            users.authenticate(b"\0mallory\0x"),
            Err(SaslError::AuthenticationFailed)
        );
        assert!(matches!(
            users.authenticate(b"admin\0alice\0alice-secret"),
            Err(SaslError::AuthorizationIdMismatch { .. })
        ));
        assert!(!format!("{users:?}").contains("alice-secret"));
    }

    #[test]
    fn malformed_messages() {
        let users = PlainUsers::from_jaas(JAAS).expect("jaas");
        for bad in [
            &b""[..],
            b"alice",
            b"\0alice",
            b"\0\0pw",
            b"\0alice\0",
            b"a\0b\0c\0d",
            b"\0al\xffice\0pw",
        ] {
            assert!(
                matches!(users.authenticate(bad), Err(SaslError::Malformed { .. })),
                "{bad:?}"
            );
        }
        assert!(PlainUsers::from_jaas("org.example.Other required user_a=b;").is_err());
    }
}
