//! Why an exchange or a parse failed. Messages never carry a password, a key or a proof: they
//! may reach a log line or, through the connection, the client.

/// A SASL exchange or a credential could not proceed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SaslError {
    /// A message from the peer is not what the mechanism expects here.
    #[error("malformed {message}: {detail}")]
    Malformed {
        /// Which message (e.g. `client-first-message`).
        message: &'static str,
        /// What is wrong with it.
        detail: String,
    },
    /// A message is longer than the mechanism accepts.
    #[error("{message} of {len} bytes exceeds the limit of {max}")]
    TooLong {
        /// Which message.
        message: &'static str,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// Unknown user, wrong password or wrong proof. One error for all three, as Kafka answers,
    /// so a client cannot tell which users exist.
    #[error("Authentication failed: Invalid username or password")]
    AuthenticationFailed,
    /// The authorization id differs from the authenticated user (Kafka allows only the same).
    #[error("Authentication failed: authorization id {authzid:?} differs from the username")]
    AuthorizationIdMismatch {
        /// The authorization id the client asked for.
        authzid: String,
    },
    /// The client asked for a SCRAM extension the server refuses (delegation tokens).
    #[error("unsupported SCRAM extension {0}")]
    UnsupportedExtension(String),
    /// The client asked for channel binding, which Kafka's SCRAM does not use.
    #[error("channel binding is not supported")]
    ChannelBindingUnsupported,
    /// The peer's nonce does not match the exchange's.
    #[error("invalid nonce")]
    InvalidNonce,
    /// The server's signature does not prove it knows the credential.
    #[error("invalid server signature")]
    InvalidServerSignature,
    /// The server refused the exchange (`e=` in server-final-message).
    #[error("the server refused authentication: {0}")]
    ServerError(String),
    /// An iteration count outside what Kafka accepts for the mechanism.
    #[error("iterations {iterations} outside {min}..={max} for {mechanism}")]
    InvalidIterations {
        /// The mechanism's name.
        mechanism: &'static str,
        /// The count given.
        iterations: i32,
        /// Smallest allowed.
        min: i32,
        /// Largest allowed.
        max: i32,
    },
    /// A salt or salted password of the wrong size.
    #[error("invalid {field}: {detail}")]
    InvalidCredential {
        /// Which part.
        field: &'static str,
        /// What is wrong.
        detail: String,
    },
    /// Not a mechanism this crate implements.
    #[error("unsupported SASL mechanism {0}")]
    UnsupportedMechanism(String),
    /// A step called in the wrong state (a shell bug, or a peer sending after the end).
    #[error("unexpected SASL message in state {0}")]
    UnexpectedMessage(&'static str),
    /// A JAAS configuration that does not parse.
    #[error("invalid JAAS configuration: {0}")]
    Jaas(String),
    /// The operating system's random source failed.
    #[error("no randomness available: {0}")]
    Random(String),
}

impl SaslError {
    pub(crate) fn malformed(message: &'static str, detail: impl Into<String>) -> Self {
        SaslError::Malformed {
            message,
            detail: detail.into(),
        }
    }

    pub(crate) fn check_len(message: &'static str, len: usize, max: usize) -> Result<(), Self> {
        if len > max {
            return Err(SaslError::TooLong { message, len, max });
        }
        Ok(())
    }
}
