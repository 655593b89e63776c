//! What every handler family shares: the transactions refusal and the wire's string type.

use kafka_protocol::protocol::StrBytes;

/// What a broker without transactions tells a transactional client, in FindCoordinator
/// (transaction key type) and InitProducerId with a transactional id.
pub(crate) const TRANSACTIONS_UNSUPPORTED: &str =
    "transactions are not supported by this Gregor broker; use an idempotent producer without transactional.id";

/// The error code that refuses transactions (see [`TRANSACTIONS_UNSUPPORTED`]). Of the codes a
/// FindCoordinator answer can carry, this is the one librdkafka treats as fatal at once (the
/// retriable ones make `init_transactions()` spin until its timeout); the error message beside
/// it tells the user why.
pub(crate) fn transactions_unsupported() -> kafka_protocol::ResponseError {
    kafka_protocol::ResponseError::TransactionalIdAuthorizationFailed
}

pub(crate) fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}
