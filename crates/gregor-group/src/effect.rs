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
    /// `Some` for the offsets of a TxnOffsetCommit: the batch is transactional for this
    /// producer (Kafka's transactional attribute, producer id and epoch), so the commit marker
    /// of its transaction covers it. Every record of one [`Effect::Append`] carries the same
    /// value. (It sits on the record, not on the append, so shells that match
    /// `Effect::Append { token, records }` keep compiling.)
    pub transactional: Option<TxnProducer>,
}

impl Record {
    /// A record of a plain (non-transactional) batch.
    pub fn plain(key: Bytes, value: Option<Bytes>) -> Record {
        Record {
            key,
            value,
            transactional: None,
        }
    }
}

/// The producer a transactional batch is written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct TxnProducer {
    pub producer_id: i64,
    pub producer_epoch: i16,
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
