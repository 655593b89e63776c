//! What the coordinator asks its shell to do.

use bytes::Bytes;

use crate::api::{RequestId, Response};

/// Identifies one append of records to the group's `__consumer_offsets` partition. The shell
/// reports its outcome with [`crate::GroupCoordinator::append_completed`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AppendToken(pub u64);

/// A record for `__consumer_offsets`: Kafka's key and value bytes; `None` is a tombstone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    pub key: Bytes,
    pub value: Option<Bytes>,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Effect {
    /// Send this response to the request with this id, now.
    Respond {
        request_id: RequestId,
        response: Response,
    },
    /// Append these records (one batch) to the `__consumer_offsets` partition, then call
    /// [`crate::GroupCoordinator::append_completed`] with the token once they are durable
    /// (committed: replicated to the in-sync replicas and flushed as configured), or once the
    /// append failed. Responses that depend on the records are held until then.
    Append {
        token: AppendToken,
        records: Vec<Record>,
    },
}
