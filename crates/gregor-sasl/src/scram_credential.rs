//! SCRAM credentials (RFC 5802 section 3): the salted password, and the stored key and server
//! key a server keeps instead of the password. Kafka's mechanisms are SCRAM-SHA-256 and
//! SCRAM-SHA-512 (RFC 7677), without channel binding.

use crate::error::SaslError;
use crate::secret::Password;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};

/// Fewest PBKDF2 iterations Kafka accepts for either mechanism.
pub const MIN_ITERATIONS: i32 = 4096;
/// Most iterations Kafka's controller accepts for a credential (and the most this crate's
/// client computes: a server must not be able to make a client burn unbounded CPU).
pub const MAX_ITERATIONS: i32 = 16384;
/// Longest salt accepted (Kafka's tools use 32 bytes or fewer).
pub const MAX_SALT_BYTES: usize = 256;

/// A SCRAM mechanism Kafka supports.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ScramMechanism {
    /// `SCRAM-SHA-256` (Kafka's type 1).
    Sha256,
    /// `SCRAM-SHA-512` (Kafka's type 2).
    Sha512,
}

impl ScramMechanism {
    /// Both mechanisms.
    pub const ALL: [ScramMechanism; 2] = [ScramMechanism::Sha256, ScramMechanism::Sha512];

    /// The SASL mechanism name.
    pub fn name(self) -> &'static str {
        match self {
            ScramMechanism::Sha256 => "SCRAM-SHA-256",
            ScramMechanism::Sha512 => "SCRAM-SHA-512",
        }
    }

    /// From the SASL mechanism name (exact, as Kafka matches it).
    pub fn from_name(name: &str) -> Option<Self> {
        ScramMechanism::ALL.into_iter().find(|m| m.name() == name)
    }

    /// Kafka's `ScramMechanism` type id (AlterUserScramCredentials, the metadata record).
    pub fn type_id(self) -> i8 {
        match self {
            ScramMechanism::Sha256 => 1,
            ScramMechanism::Sha512 => 2,
        }
    }

    /// From Kafka's type id (0 is Kafka's UNKNOWN).
    pub fn from_type_id(id: i8) -> Option<Self> {
        ScramMechanism::ALL.into_iter().find(|m| m.type_id() == id)
    }

    /// Bytes of the hash (and of every key).
    pub fn hash_len(self) -> usize {
        match self {
            ScramMechanism::Sha256 => 32,
            ScramMechanism::Sha512 => 64,
        }
    }

    /// Checks an iteration count against Kafka's bounds.
    pub fn check_iterations(self, iterations: i32) -> Result<(), SaslError> {
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(SaslError::InvalidIterations {
                mechanism: self.name(),
                iterations,
                min: MIN_ITERATIONS,
                max: MAX_ITERATIONS,
            });
        }
        Ok(())
    }

    /// `H(data)`.
    pub(crate) fn hash(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramMechanism::Sha256 => Sha256::digest(data).to_vec(),
            ScramMechanism::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// `HMAC(key, data)`.
    pub(crate) fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        // HMAC takes keys of any length, so `new_from_slice` cannot fail.
        match self {
            ScramMechanism::Sha256 => match Hmac::<Sha256>::new_from_slice(key) {
                Ok(mut m) => {
                    m.update(data);
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
            ScramMechanism::Sha512 => match Hmac::<Sha512>::new_from_slice(key) {
                Ok(mut m) => {
                    m.update(data);
                    m.finalize().into_bytes().to_vec()
                }
                Err(_) => Vec::new(),
            },
        }
    }

    /// `Hi(password, salt, iterations)`: PBKDF2-HMAC with one output block. The caller has
    /// checked `iterations` (a zero or huge count is refused before this runs).
    pub fn salted_password(
        self,
        password: &Password,
        salt: &[u8],
        iterations: i32,
    ) -> SaltedPassword {
        let rounds = iterations.max(1) as u32;
        let mut out = vec![0u8; self.hash_len()];
        let pw = password.expose().as_bytes();
        match self {
            ScramMechanism::Sha256 => pbkdf2::pbkdf2_hmac::<Sha256>(pw, salt, rounds, &mut out),
            ScramMechanism::Sha512 => pbkdf2::pbkdf2_hmac::<Sha512>(pw, salt, rounds, &mut out),
        }
        SaltedPassword(out)
    }
}

impl std::fmt::Display for ScramMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// `SaltedPassword`: as good as the password for this salt and count. Redacted `Debug`.
#[derive(Clone, PartialEq, Eq)]
pub struct SaltedPassword(Vec<u8>);

impl SaltedPassword {
    /// Wraps bytes received from a client (KIP-554 upsertion).
    pub fn from_bytes(bytes: Vec<u8>) -> Self {
        SaltedPassword(bytes)
    }

    /// The bytes, to send in an AlterUserScramCredentials request; never for printing.
    pub fn expose(&self) -> &[u8] {
        &self.0
    }
}

impl std::fmt::Debug for SaltedPassword {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("SaltedPassword(<redacted>)")
    }
}

/// What a server stores for one user and mechanism (Kafka's `ScramCredential`). Its `Debug`
/// shows the iteration count only.
#[derive(Clone, PartialEq, Eq)]
pub struct ScramCredential {
    /// The salt.
    pub salt: Vec<u8>,
    /// `StoredKey = H(ClientKey)`.
    pub stored_key: Vec<u8>,
    /// `ServerKey = HMAC(SaltedPassword, "Server Key")`.
    pub server_key: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: i32,
}

impl ScramCredential {
    /// Derives the credential from a password (the `format --add-scram` path, and tests).
    pub fn from_password(
        mechanism: ScramMechanism,
        password: &Password,
        salt: &[u8],
        iterations: i32,
    ) -> Result<Self, SaslError> {
        mechanism.check_iterations(iterations)?;
        check_salt(salt)?;
        let salted = mechanism.salted_password(password, salt, iterations);
        Self::from_salted_password(mechanism, salt, &salted, iterations)
    }

    /// Derives the credential from a salted password (KIP-554: the client sends salt, salted
    /// password and iterations; the controller keeps only the derived keys).
    pub fn from_salted_password(
        mechanism: ScramMechanism,
        salt: &[u8],
        salted: &SaltedPassword,
        iterations: i32,
    ) -> Result<Self, SaslError> {
        mechanism.check_iterations(iterations)?;
        check_salt(salt)?;
        if salted.0.len() != mechanism.hash_len() {
            return Err(SaslError::InvalidCredential {
                field: "salted password",
                detail: format!(
                    "{} bytes, {} needs {}",
                    salted.0.len(),
                    mechanism.name(),
                    mechanism.hash_len()
                ),
            });
        }
        let client_key = client_key(mechanism, salted);
        Ok(ScramCredential {
            salt: salt.to_vec(),
            stored_key: mechanism.hash(&client_key),
            server_key: mechanism.hmac(&salted.0, b"Server Key"),
            iterations,
        })
    }
}

impl std::fmt::Debug for ScramCredential {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ScramCredential")
            .field("iterations", &self.iterations)
            .finish_non_exhaustive()
    }
}

/// `ClientKey = HMAC(SaltedPassword, "Client Key")`.
pub(crate) fn client_key(mechanism: ScramMechanism, salted: &SaltedPassword) -> Vec<u8> {
    mechanism.hmac(&salted.0, b"Client Key")
}

fn check_salt(salt: &[u8]) -> Result<(), SaslError> {
    if salt.is_empty() || salt.len() > MAX_SALT_BYTES {
        return Err(SaslError::InvalidCredential {
            field: "salt",
            detail: format!("{} bytes, must be 1..={MAX_SALT_BYTES}", salt.len()),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn iteration_bounds_are_kafkas() {
        let m = ScramMechanism::Sha512;
        assert!(m.check_iterations(4095).is_err());
        assert!(m.check_iterations(4096).is_ok());
        assert!(m.check_iterations(16384).is_ok());
        assert!(m.check_iterations(16385).is_err());
        assert!(m.check_iterations(-1).is_err());
    }

    #[test]
    fn debug_shows_no_key() {
        let m = ScramMechanism::Sha512;
        let c = ScramCredential::from_password(m, &Password::new("pw"), b"salty", 4096)
            .expect("credential");
        let text = format!("{c:?}");
        assert!(text.contains("4096"), "{text}");
        assert!(!text.contains(&format!("{:?}", c.stored_key)), "{text}");
        let salted = m.salted_password(&Password::new("pw"), b"salty", 4096);
        assert_eq!(format!("{salted:?}"), "SaltedPassword(<redacted>)");
    }

    #[test]
    fn a_salted_password_of_the_wrong_length_is_refused() {
        let m = ScramMechanism::Sha512;
        let short = SaltedPassword::from_bytes(vec![0; 32]);
        assert!(matches!(
            ScramCredential::from_salted_password(m, b"salt", &short, 4096),
            Err(SaslError::InvalidCredential { .. })
        ));
        assert!(ScramCredential::from_salted_password(m, b"", &short, 4096).is_err());
    }
}
