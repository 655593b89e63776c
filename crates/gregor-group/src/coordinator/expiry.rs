//! Offset expiry (`offsets.retention.minutes`), with Kafka's 2.1+ semantics (KIP-211): a group's
//! offsets expire only once nothing consumes with them for the retention period.
//!
//! - A group with a protocol type (members joined it once) keeps its offsets while it has
//!   members; once Empty, they expire the retention period after it became Empty.
//! - A standalone consumer's group (commits without membership, no protocol type) loses each
//!   offset the retention period after that offset's last commit.
//!
//! Expired offsets are removed at once and tombstoned in `__consumer_offsets`; an Empty group
//! left with no offsets (and nobody about to join) is removed and tombstoned too. Offsets with a
//! commit still in flight are kept. Not done yet: Kafka's KIP-496 rule that expires, in a Stable
//! consumer group, the offsets of topics no member subscribes to.

use std::collections::BTreeSet;

use super::offsets::offset_tombstone;
use super::{Cx, GroupCoordinator, PendingAppend};
use crate::effect::{Effect, Record};
use crate::group::GroupState;
use crate::records::{self, RecordKey};

impl GroupCoordinator {
    /// Expires the offsets whose retention has passed at `now_ms`; the shell calls it every
    /// `offsets.retention.check.interval.ms`.
    pub fn expire_offsets(&mut self, now_ms: i64) -> Vec<Effect> {
        let mut out = Vec::new();
        self.fire_timers(now_ms, &mut out);
        let retention = self.config.offsets_retention_ms;
        // Commits still in flight: their records precede any tombstone we would write.
        let mut in_flight: BTreeSet<(String, String, i32)> = BTreeSet::new();
        for pending in self.appends.pending.values() {
            if let PendingAppend::OffsetCommit {
                group_id, offsets, ..
            } = pending
            {
                in_flight.extend(
                    offsets
                        .iter()
                        .map(|(t, p, _)| (group_id.clone(), t.clone(), *p)),
                );
            }
        }
        for group_id in self.offsets.group_ids() {
            // The time each offset's retention counts from, if it can expire at all.
            let group_base: Option<Option<i64>> = match self.groups.get(&group_id) {
                None => Some(None),
                Some(g) if g.protocol_type.is_none() && g.is(GroupState::Empty) => Some(None),
                Some(g) if g.is(GroupState::Empty) => Some(g.state_timestamp),
                Some(_) => None,
            };
            let Some(group_base) = group_base else {
                continue;
            };
            let expired: Vec<(String, i32)> = self
                .offsets
                .all(&group_id)
                .into_iter()
                .filter(|(t, p, o)| {
                    let base = group_base.unwrap_or(o.commit_timestamp_ms);
                    !in_flight.contains(&(group_id.clone(), t.clone(), *p))
                        && now_ms.saturating_sub(base) >= retention
                })
                .map(|(t, p, _)| (t, p))
                .collect();
            if expired.is_empty() {
                continue;
            }
            let mut records: Vec<Record> = expired
                .iter()
                .map(|(t, p)| offset_tombstone(&group_id, t, *p))
                .collect();
            for (t, p) in &expired {
                self.offsets.remove(&group_id, t, *p);
            }
            let group_in_flight = in_flight.iter().any(|(g, _, _)| *g == group_id);
            let remove_group = self.offsets.partitions(&group_id).is_empty()
                && !group_in_flight
                && self
                    .groups
                    .get(&group_id)
                    .is_some_and(|g| g.is(GroupState::Empty) && g.pending_join_members.is_empty());
            if remove_group {
                records.push(Record {
                    key: records::encode_key(&RecordKey::GroupMetadata {
                        group: group_id.clone(),
                    }),
                    value: None,
                });
                if let Some(mut g) = self.groups.remove(&group_id) {
                    g.transition_to(GroupState::Dead, now_ms);
                }
            }
            tracing::info!(group = %group_id, offsets = expired.len(), group_removed = remove_group, "expired offsets");
            let mut cx = Cx {
                now: now_ms,
                config: &self.config,
                timers: &mut self.timers,
                appends: &mut self.appends,
                out: &mut out,
            };
            cx.append(
                records,
                PendingAppend::ExpiredOffsets {
                    group_id: group_id.clone(),
                },
            );
        }
        out
    }
}
