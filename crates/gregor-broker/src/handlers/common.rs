//! What every handler family shares: the wire's string type.

use kafka_protocol::protocol::StrBytes;

pub(crate) fn s(v: impl Into<String>) -> StrBytes {
    StrBytes::from_string(v.into())
}
