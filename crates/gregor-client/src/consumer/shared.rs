//! What the consumer shares with its heartbeat task and its fetcher: each assigned partition's
//! position and fetch token, the membership behind a mutex, and duration conversions.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use super::membership::Membership;
use super::membership_848::ConsumerMembership;

#[derive(Debug, Clone)]
pub(super) struct PartitionState {
    /// The offset of the next record to return; `None` until looked up.
    pub(super) position: Option<i64>,
    pub(super) paused: bool,
    /// The position is out of range: apply `auto.offset.reset` rather than the committed
    /// offset.
    pub(super) reset: bool,
    /// Drawn anew at assignment and by every seek, pause and reset: a Fetch answer asked under
    /// another token is stale.
    pub(super) token: u64,
}

/// Tokens are unique within the process.
static NEXT_TOKEN: AtomicU64 = AtomicU64::new(1);

impl Default for PartitionState {
    fn default() -> PartitionState {
        PartitionState {
            position: None,
            paused: false,
            reset: false,
            token: NEXT_TOKEN.fetch_add(1, Ordering::Relaxed),
        }
    }
}

impl PartitionState {
    /// Makes every Fetch answer in flight for this partition stale.
    pub(super) fn renew(&mut self) {
        self.token = NEXT_TOKEN.fetch_add(1, Ordering::Relaxed);
    }
}

/// State shared with the heartbeat task.
pub(super) struct Shared {
    /// The classic protocol's membership.
    pub(super) m: Membership,
    /// `group.protocol=consumer`: the KIP-848 membership, used instead of `m`.
    pub(super) cg: Option<ConsumerMembership>,
    pub(super) closed: bool,
}

impl Shared {
    /// The member id and generation (the member epoch under KIP-848; -1 outside the group).
    pub(super) fn identity(&self) -> (String, i32) {
        match &self.cg {
            Some(cg) => (cg.member_id.clone(), cg.commit_epoch().unwrap_or(-1)),
            None => (self.m.member_id.clone(), self.m.generation),
        }
    }
}

pub(super) fn lock(shared: &Mutex<Shared>) -> std::sync::MutexGuard<'_, Shared> {
    // Every update is a single state-machine call: a poisoned lock still holds a consistent
    // state.
    shared.lock().unwrap_or_else(|p| p.into_inner())
}

pub(super) fn millis(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

pub(super) fn ms_i32(d: Duration) -> i32 {
    i32::try_from(d.as_millis()).unwrap_or(i32::MAX)
}
