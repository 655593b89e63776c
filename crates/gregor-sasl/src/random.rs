//! Randomness for nonces and salts, from the operating system. The exchanges themselves take
//! their nonce as an argument, so they stay deterministic under test.

use crate::error::SaslError;
use base64::Engine;

/// Bytes of a freshly generated salt (what Kafka's tools use for SHA-512 too is 32 or fewer).
pub const SALT_BYTES: usize = 32;

/// `n` random bytes.
pub fn random_bytes(n: usize) -> Result<Vec<u8>, SaslError> {
    let mut out = vec![0u8; n];
    getrandom::fill(&mut out).map_err(|e| SaslError::Random(e.to_string()))?;
    Ok(out)
}

/// A nonce: 24 random bytes as URL-safe base64 (32 printable characters, no `,`).
pub fn random_nonce() -> Result<String, SaslError> {
    Ok(base64::engine::general_purpose::URL_SAFE_NO_PAD.encode(random_bytes(24)?))
}

/// A random salt of [`SALT_BYTES`].
pub fn random_salt() -> Result<Vec<u8>, SaslError> {
    random_bytes(SALT_BYTES)
}
