//! SASL mechanisms for Gregor as pure state machines: PLAIN (RFC 4616) against a JAAS user
//! table, and SCRAM-SHA-256 / SCRAM-SHA-512 (RFC 5802, RFC 7677) as Kafka uses them, server and
//! client, with the credential derivation the controller and the tools share; and OAUTHBEARER
//! (RFC 7628, KIP-768): JWTs checked against a JSON Web Key Set.
//!
//! No I/O and no clocks: the connection feeds each exchange the peer's bytes and sends what it
//! answers. Randomness (nonces, salts) comes from [`random`] or is passed in. Every parser takes
//! untrusted bytes, bounds their size and answers a [`SaslError`]; secrets have a redacted
//! `Debug`.

mod error;
mod jaas;
mod oauthbearer;
pub mod oauthbearer_message;
mod oauthbearer_refresh;
mod plain;
pub mod random;
mod scram_client;
mod scram_credential;
pub mod scram_message;
mod scram_server;
mod secret;

pub use error::SaslError;
pub use jaas::{jaas_config_for, listener_jaas_key, parse_jaas, JaasEntry, JaasFlag};
pub use oauthbearer::{
    oauthbearer_error_challenge, token_key_id, validate_initial_response, validate_token, JwkKeys,
    JwtRules, OAuthBearerError, ValidatedToken, MAX_JWKS_BYTES,
};
pub use oauthbearer_message::{
    OAuthBearerInitialResponse, MAX_OAUTHBEARER_BYTES, OAUTHBEARER_FAILURE_REPLY,
};
pub use oauthbearer_refresh::{FetchFailureLog, JwksRefresh, JWKS_WARN_INTERVAL};
pub use plain::{PlainMessage, PlainUsers, MAX_PLAIN_BYTES, PLAIN_LOGIN_MODULE};
pub use scram_client::ScramClient;
pub use scram_credential::{
    SaltedPassword, ScramCredential, ScramMechanism, MAX_ITERATIONS, MAX_SALT_BYTES, MIN_ITERATIONS,
};
pub use scram_server::ScramServer;
pub use secret::{ct_eq, Password};
