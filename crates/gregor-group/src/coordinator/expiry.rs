//! Offset expiry (`offsets.retention.minutes`), with Kafka's 2.1+ semantics (KIP-211): a group's
//! offsets expire only once nothing consumes with them for the retention period.
//!
//! - A group with a protocol type (members joined it once) keeps its offsets while it has
//!   members; once Empty, they expire the retention period after it became Empty.
//! - A standalone consumer's group (commits without membership, no protocol type) loses each
//!   offset the retention period after that offset's last commit.
//! - A Stable consumer group whose members' subscriptions are readable loses, the retention
//!   period after their last commit, the offsets of topics no member subscribes to (KIP-496).
//!
//! Expired offsets are removed at once and tombstoned in `__consumer_offsets`; an Empty group
//! left with no offsets (and nobody about to join) is removed and tombstoned too. Offsets with a
//! commit still in flight are kept, and so are offsets of partitions that an open transaction
//! holds an offset of; a group with such offsets is not removed.

use std::collections::{BTreeSet, HashSet};

use super::offsets::offset_tombstone;
use super::state::{Cx, GroupCoordinator, PendingAppend};
use crate::effect::{Effect, Record};
use crate::group::{Group, GroupState};
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
        // Offsets of open transactions never expire, and a visible offset whose partition has
        // one is kept too: its tombstone would also remove the pending offset (Kafka skips
        // partitions with pending transactional offsets as well).
        for pending in self.appends.pending.values() {
            if let PendingAppend::TxnOffsetCommit(c) = pending {
                in_flight.extend(
                    c.offsets
                        .iter()
                        .map(|(t, p, _)| (c.group_id.clone(), t.clone(), *p)),
                );
            }
        }
        for group_id in self.offsets.group_ids() {
            let Some(rule) = self
                .groups
                .get(&group_id)
                .map_or(Some(Rule::since_commit()), rule_for)
            else {
                continue;
            };
            let expired: Vec<(String, i32)> = self
                .offsets
                .all(&group_id)
                .into_iter()
                .filter(|(t, p, o)| {
                    if rule.subscribed.as_ref().is_some_and(|s| s.contains(t)) {
                        return false;
                    }
                    let base = rule.since.unwrap_or(o.commit_timestamp_ms);
                    !in_flight.contains(&(group_id.clone(), t.clone(), *p))
                        && !self.offsets.has_pending(&group_id, t, *p)
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
                && !self.offsets.group_has_pending(&group_id)
                && self
                    .groups
                    .get(&group_id)
                    .is_some_and(|g| g.is(GroupState::Empty) && g.pending_join_members.is_empty());
            if remove_group {
                records.push(Record {
                    transactional: None,
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

/// Which of a group's offsets may expire, and from when.
struct Rule {
    /// Retention counts from here; `None`: from each offset's last commit.
    since: Option<i64>,
    /// Topics whose offsets are kept (a Stable consumer group's subscriptions).
    subscribed: Option<HashSet<String>>,
}

impl Rule {
    fn since_commit() -> Rule {
        Rule {
            since: None,
            subscribed: None,
        }
    }
}

/// The expiry rule of a group, `None` when its offsets cannot expire now.
fn rule_for(g: &Group) -> Option<Rule> {
    if g.protocol_type.is_none() {
        // Standalone commits only (an Empty group created by a simple commit).
        return g.is(GroupState::Empty).then(Rule::since_commit);
    }
    if g.is(GroupState::Empty) {
        return Some(Rule {
            since: g.state_timestamp,
            subscribed: None,
        });
    }
    if g.is(GroupState::Stable) && g.protocol_type.as_deref() == Some("consumer") {
        let protocol = g.protocol_name.as_deref()?;
        let mut topics = HashSet::new();
        for m in g.members.values() {
            // An unreadable subscription keeps every offset, as Kafka does.
            let (_, sub) =
                gregor_assign::protocol::decode_subscription(&m.metadata(protocol)).ok()?;
            topics.extend(sub.topics);
        }
        return Some(Rule {
            since: None,
            subscribed: Some(topics),
        });
    }
    None
}
