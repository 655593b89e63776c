//! Secrets that must never reach a log line: their `Debug` is redacted, they have no `Display`.

use subtle::ConstantTimeEq;

/// A password (PLAIN user table, SCRAM client). Compared in constant time.
#[derive(Clone, Default)]
pub struct Password(String);

impl Password {
    /// Wraps a password.
    pub fn new(password: impl Into<String>) -> Self {
        Password(password.into())
    }

    /// The password's bytes, for hashing or sending; never for printing.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `candidate` is this password, in time independent of where they differ.
    pub fn matches(&self, candidate: &[u8]) -> bool {
        ct_eq(self.0.as_bytes(), candidate)
    }
}

impl std::fmt::Debug for Password {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Password(<redacted>)")
    }
}

impl From<&str> for Password {
    fn from(s: &str) -> Self {
        Password::new(s)
    }
}

/// Constant-time equality of two byte strings (the length is not secret).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    a.len() == b.len() && bool::from(a.ct_eq(b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn debug_hides_the_password() {
        let p = Password::new("alice-secret");
        assert!(!format!("{p:?}").contains("alice-secret"));
        assert!(p.matches(b"alice-secret"));
        assert!(!p.matches(b"alice-secreT"));
        assert!(!p.matches(b"alice-secret2"));
        assert!(!p.matches(b""));
    }
}
