//! What a broker-only node gets when it follows the metadata log (FetchMetadata on the controller
//! listener): below both the voter's handle, which answers it, and the RPC that carries it.

use serde::{Deserialize, Serialize};

use crate::NodeId;

/// Committed metadata for a follower.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum MetadataUpdate {
    /// Committed entries, in order, starting at the requested index (possibly none).
    Entries(Vec<crate::Entry>),
    /// The entries asked for were replaced by a snapshot: the image as of `last_index`.
    Snapshot { last_index: u64, data: Vec<u8> },
}

/// The answer to a FetchMetadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct MetadataFetch {
    /// The active controller as the answering voter knows it.
    pub leader: Option<NodeId>,
    pub update: MetadataUpdate,
}
