//! A consumer group's recent group epochs, for the console's rebalance timeline: when each epoch
//! began and why, the target assignment computed for it, and when each member of that target
//! reached it (or was fenced, left, or was overtaken by a newer target first). Kept in memory
//! only, bounded, and fed with the `now_ms` of the change that caused each entry.

use std::collections::{BTreeMap, VecDeque};

use crate::api::{Assignment, TopicUuid};

/// How many epochs a group keeps.
pub const RECENT_EPOCHS: usize = 20;
/// How many members of one epoch's target are kept (a larger group's others are counted).
pub const EPOCH_MEMBERS: usize = 64;
/// How many partitions of one member's target are kept (the rest are counted).
pub const TARGET_PARTITIONS: usize = 64;
/// How many of one epoch's explained moves (the `load` assignor's) are kept (the rest are
/// counted).
pub const EPOCH_MOVES: usize = 64;

/// Why the group epoch moved.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CauseKind {
    MemberJoined,
    /// It left with a heartbeat at epoch -1 (or LeaveGroup, a classic member).
    MemberLeft,
    /// The coordinator removed it: its session or revocation deadline passed.
    MemberFenced,
    SubscriptionChanged,
    /// The subscribed topics changed (created, deleted, new partitions) or a regex matched others.
    MetadataChanged,
    /// A classic group became a consumer group at its generation.
    UpgradedFromClassic,
    /// The `load` assignor's periodic review found partitions to move: the members' measured
    /// load drifted apart by more than its threshold.
    LoadShifted,
    /// The epoch was bumped before this coordinator loaded the group.
    Unrecorded,
}

impl CauseKind {
    pub fn name(self) -> &'static str {
        match self {
            CauseKind::MemberJoined => "member joined",
            CauseKind::MemberLeft => "member left",
            CauseKind::MemberFenced => "member fenced",
            CauseKind::SubscriptionChanged => "subscription changed",
            CauseKind::MetadataChanged => "topic metadata changed",
            CauseKind::UpgradedFromClassic => "upgraded from a classic group",
            CauseKind::LoadShifted => "load shifted",
            CauseKind::Unrecorded => "before this coordinator loaded the group",
        }
    }
}

/// Why the group epoch moved, and the member it concerns.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochCause {
    pub kind: CauseKind,
    /// The member's id and client id.
    pub member: Option<(String, String)>,
}

impl EpochCause {
    pub fn of_member(kind: CauseKind, member_id: &str, client_id: &str) -> EpochCause {
        EpochCause {
            kind,
            member: Some((member_id.to_string(), client_id.to_string())),
        }
    }

    pub fn of_group(kind: CauseKind) -> EpochCause {
        EpochCause { kind, member: None }
    }
}

/// How a member left a group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Departure {
    Left,
    Fenced,
}

/// Where a member of an epoch's target got to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Progress {
    /// Not yet at the epoch with its target in hand.
    Reconciling,
    /// At the epoch, holding exactly its target.
    Reconciled { at_ms: i64 },
    /// Removed by the coordinator before it got there.
    Fenced { at_ms: i64 },
    /// Left before it got there.
    Left { at_ms: i64 },
    /// A newer target came before it got there.
    Superseded { at_ms: i64 },
}

impl Progress {
    pub fn name(self) -> &'static str {
        match self {
            Progress::Reconciling => "reconciling",
            Progress::Reconciled { .. } => "reconciled",
            Progress::Fenced { .. } => "fenced",
            Progress::Left { .. } => "left",
            Progress::Superseded { .. } => "superseded",
        }
    }

    /// When it stopped reconciling toward the epoch.
    pub fn at_ms(self) -> Option<i64> {
        match self {
            Progress::Reconciling => None,
            Progress::Reconciled { at_ms }
            | Progress::Fenced { at_ms }
            | Progress::Left { at_ms }
            | Progress::Superseded { at_ms } => Some(at_ms),
        }
    }
}

/// One member of an epoch's target assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberTarget {
    pub client_id: String,
    /// Its target's first [`TARGET_PARTITIONS`] partitions, in order.
    pub partitions: Vec<(TopicUuid, i32)>,
    /// How many partitions its target has.
    pub count: usize,
    pub progress: Progress,
}

/// One group epoch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EpochRecord {
    pub epoch: i32,
    pub at_ms: i64,
    pub cause: EpochCause,
    /// When its target assignment was computed (`None`: not yet, or never, a newer epoch came
    /// first).
    pub target_ms: Option<i64>,
    /// The target's first [`EPOCH_MEMBERS`] members, by member id.
    pub members: BTreeMap<String, MemberTarget>,
    /// Members of the target beyond those kept.
    pub members_omitted: usize,
    /// The assignor that computed the target.
    pub assignor: Option<&'static str>,
    /// Its explained moves, when it explains them (`load`): the first [`EPOCH_MOVES`].
    pub moves: Vec<String>,
    /// Moves beyond those kept.
    pub moves_omitted: usize,
}

/// The last [`RECENT_EPOCHS`] group epochs, oldest first.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EpochHistory {
    pub recent: VecDeque<EpochRecord>,
}

impl EpochHistory {
    /// The group epoch moved to `epoch` at `now_ms`.
    pub fn bump(&mut self, epoch: i32, cause: EpochCause, now_ms: i64) {
        if self.recent.len() >= RECENT_EPOCHS {
            self.recent.pop_front();
        }
        self.recent.push_back(EpochRecord {
            epoch,
            at_ms: now_ms,
            cause,
            target_ms: None,
            members: BTreeMap::new(),
            members_omitted: 0,
            assignor: None,
            moves: Vec::new(),
            moves_omitted: 0,
        });
    }

    /// The target assignment for `epoch` was computed at `now_ms`: each of its members with its
    /// client id and partitions. Members of older targets still reconciling are overtaken.
    pub fn target_computed<'a>(
        &mut self,
        epoch: i32,
        target: impl ExactSizeIterator<Item = (&'a String, &'a str, &'a Assignment)>,
        now_ms: i64,
    ) {
        if self.recent.back().is_none_or(|r| r.epoch != epoch) {
            // Bumped before this coordinator loaded the group.
            let cause = EpochCause::of_group(CauseKind::Unrecorded);
            self.bump(epoch, cause, now_ms);
        }
        for r in self.recent.iter_mut() {
            for m in r.members.values_mut() {
                if m.progress == Progress::Reconciling {
                    m.progress = Progress::Superseded { at_ms: now_ms };
                }
            }
        }
        let Some(record) = self.recent.back_mut() else {
            return;
        };
        record.target_ms = Some(now_ms);
        record.members_omitted = target.len().saturating_sub(EPOCH_MEMBERS);
        record.members = target
            .take(EPOCH_MEMBERS)
            .map(|(id, client_id, a)| (id.clone(), member_target(client_id, a)))
            .collect();
    }

    /// The target of `epoch` came from `assignor`, which explained its moves as `moves`.
    pub fn explained(&mut self, epoch: i32, assignor: &'static str, moves: Vec<String>) {
        let Some(r) = self.recent.back_mut().filter(|r| r.epoch == epoch) else {
            return;
        };
        r.assignor = Some(assignor);
        r.moves_omitted = moves.len().saturating_sub(EPOCH_MOVES);
        r.moves = moves;
        r.moves.truncate(EPOCH_MOVES);
    }

    /// A member is at `member_epoch`, holding its target there if `reconciled`: the epoch's
    /// record notes when it first got there.
    pub fn member_at(&mut self, member_id: &str, member_epoch: i32, reconciled: bool, now_ms: i64) {
        if !reconciled {
            return;
        }
        let Some(r) = self
            .recent
            .iter_mut()
            .rev()
            .find(|r| r.epoch == member_epoch)
        else {
            return;
        };
        if let Some(m) = r.members.get_mut(member_id) {
            if m.progress == Progress::Reconciling {
                m.progress = Progress::Reconciled { at_ms: now_ms };
            }
        }
    }

    /// A member left the group (or was fenced out of it) at `now_ms`, before reaching the
    /// latest target if it had not yet.
    pub fn member_gone(&mut self, member_id: &str, how: Departure, now_ms: i64) {
        let latest = self.recent.iter_mut().rev().find(|r| r.target_ms.is_some());
        let Some(m) = latest.and_then(|r| r.members.get_mut(member_id)) else {
            return;
        };
        if m.progress == Progress::Reconciling {
            m.progress = match how {
                Departure::Left => Progress::Left { at_ms: now_ms },
                Departure::Fenced => Progress::Fenced { at_ms: now_ms },
            };
        }
    }

    /// A static member came back under a new member id and took over the old one's target.
    pub fn member_replaced(&mut self, old_id: &str, new_id: &str) {
        let latest = self.recent.iter_mut().rev().find(|r| r.target_ms.is_some());
        let Some(r) = latest else {
            return;
        };
        if let Some(old) = r.members.get(old_id).cloned() {
            let progress = Progress::Reconciling;
            r.members
                .insert(new_id.to_string(), MemberTarget { progress, ..old });
        }
    }
}

fn member_target(client_id: &str, a: &Assignment) -> MemberTarget {
    let all = a
        .iter()
        .flat_map(|(t, ps)| ps.iter().map(move |p| (*t, *p)));
    MemberTarget {
        client_id: client_id.to_string(),
        partitions: all.take(TARGET_PARTITIONS).collect(),
        count: a.values().map(|ps| ps.len()).sum(),
        progress: Progress::Reconciling,
    }
}

#[cfg(test)]
#[path = "epochs_tests.rs"]
mod tests;
