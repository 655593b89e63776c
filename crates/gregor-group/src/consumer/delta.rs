//! The records a change to one consumer group writes, computed from what the change could touch
//! (the members named, the group's epochs and its target) rather than from the whole group: a
//! heartbeat costs the coordinator its own member, not the group's size.

use std::collections::BTreeMap;
use std::sync::Arc;

use super::model::{Assignment, ConsumerGroup, ConsumerMember};
use super::records::{
    current_record, group_metadata_record, member_metadata_record, target_metadata_record,
    target_record, ConsumerKey, ConsumerValue,
};

/// What a change could touch, as it was before it.
#[derive(Debug, Clone)]
pub struct Before {
    group_epoch: i32,
    target_epoch: i32,
    metadata_hash: i64,
    /// The target before: a new one replaces the `Arc`, so this costs nothing to keep.
    target: Arc<BTreeMap<String, Assignment>>,
    /// The members the change may touch (`None`: not in the group).
    members: Vec<(String, Option<ConsumerMember>)>,
}

impl Before {
    /// `group` before a change that touches at most `members` (and the group's epochs and
    /// target).
    pub fn of<'a>(group: &ConsumerGroup, members: impl IntoIterator<Item = &'a str>) -> Before {
        let mut touched: Vec<(String, Option<ConsumerMember>)> = Vec::new();
        for id in members {
            if !touched.iter().any(|(t, _)| t == id) {
                touched.push((id.to_string(), group.members.get(id).cloned()));
            }
        }
        Before {
            group_epoch: group.group_epoch,
            target_epoch: group.target_epoch,
            metadata_hash: group.metadata_hash,
            target: group.target.clone(),
            members: touched,
        }
    }
}

impl Before {
    /// Adds a member the change turned out to touch (one that had no id before it).
    pub fn also(&mut self, group: &ConsumerGroup, member: &str) {
        if !self.members.iter().any(|(m, _)| m == member) {
            debug_assert!(!self.target.contains_key(member) || group.members.contains_key(member));
            self.members.push((member.to_string(), None));
        }
    }

    /// The target epoch before the change.
    pub fn target_epoch(&self) -> i32 {
        self.target_epoch
    }

    /// The touched members `after` no longer has.
    pub fn removed<'a>(&'a self, after: &'a ConsumerGroup) -> impl Iterator<Item = &'a str> + 'a {
        self.members
            .iter()
            .filter(|(m, old)| old.is_some() && !after.members.contains_key(m))
            .map(|(m, _)| m.as_str())
    }
}

/// The records that take the group from `before` to `after`: tombstones first (a member's
/// current assignment, target, then metadata), then values in the order a whole write uses.
pub fn changes(
    before: &Before,
    after: &ConsumerGroup,
) -> Vec<(ConsumerKey, Option<ConsumerValue>)> {
    let id = after.group_id.as_str();
    let mut gone_current = Vec::new();
    let mut gone_target = Vec::new();
    let mut gone_meta = Vec::new();
    let (mut metas, mut currents) = (Vec::new(), Vec::new());
    for (member, old) in &before.members {
        match (old, after.members.get(member)) {
            (Some(o), None) => {
                gone_current.push(current_record(id, o).0);
                gone_meta.push(member_metadata_record(id, o).0);
            }
            (old, Some(n)) => {
                let differs = |f: fn(&str, &ConsumerMember) -> (ConsumerKey, ConsumerValue)| {
                    let new = f(id, n);
                    (old.as_ref().map(|o| f(id, o).1).as_ref() != Some(&new.1)).then_some(new)
                };
                metas.extend(differs(member_metadata_record));
                currents.extend(differs(current_record));
            }
            (None, None) => {}
        }
    }
    let mut targets = Vec::new();
    if !Arc::ptr_eq(&before.target, &after.target) {
        for (member, a) in before.target.iter() {
            match after.target.get(member) {
                None => gone_target.push(target_record(id, member, a).0),
                Some(n) if n != a => targets.push(target_record(id, member, n)),
                Some(_) => {}
            }
        }
        for (member, a) in after.target.iter() {
            if !before.target.contains_key(member) {
                targets.push(target_record(id, member, a));
            }
        }
        targets.sort_by(|x, y| x.0.cmp(&y.0));
    }
    let mut out: Vec<(ConsumerKey, Option<ConsumerValue>)> = Vec::new();
    for k in gone_current.into_iter().chain(gone_target).chain(gone_meta) {
        out.push((k, None));
    }
    let mut values = metas;
    if (before.group_epoch, before.metadata_hash) != (after.group_epoch, after.metadata_hash) {
        values.push(group_metadata_record(after));
    }
    values.extend(targets);
    if before.target_epoch != after.target_epoch {
        values.push(target_metadata_record(after));
    }
    values.extend(currents);
    out.extend(values.into_iter().map(|(k, v)| (k, Some(v))));
    out
}
