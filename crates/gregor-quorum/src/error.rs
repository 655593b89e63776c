//! The quorum's errors.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum QuorumError {
    #[error("metadata log: {0}")]
    Log(#[from] gregor_log::LogError),
    #[error("metadata log holds an unreadable entry at offset {offset}: {reason}")]
    Corrupt { offset: i64, reason: String },
    #[error("{path}: {reason}")]
    File { path: PathBuf, reason: String },
    #[error("controller.quorum.voters {configured} differs from the quorum's stored voters {stored}; a quorum's voters cannot be changed by editing the setting")]
    VotersChanged { configured: String, stored: String },
    #[error("metadata log purged through {purged} but its snapshot covers only {snapshot}: the entries in between are lost")]
    PurgedPastSnapshot { purged: String, snapshot: String },
    #[error("raft: {0}")]
    Raft(String),
}
