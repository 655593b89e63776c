//! The `load` assignor on the coordinator: which partitions the shell should measure (those its
//! `load` groups subscribe to), and the periodic review that, given fresh figures, moves
//! partitions of settled groups whose members' load drifted apart (`consumer::load_review`),
//! writing each new target before it is handed out.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use super::consumer::{debug_copy, Topics};
use super::load_figures::{GroupLoads, PartitionLoads};
use super::state::GroupCoordinator;
use crate::consumer::delta::Before;
use crate::consumer::heartbeat::pick_assignor;
use crate::consumer::load_review::review_load;
use crate::consumer::model::ConsumerGroup;
use crate::consumer::target::ServerAssignor;
use crate::effect::Effect;

impl GroupCoordinator {
    /// The partitions of the topics that groups on the `load` assignor subscribe to, by topic.
    pub fn load_partitions(&self) -> BTreeMap<String, i32> {
        let mut out = BTreeMap::new();
        for id in self.load_groups() {
            for t in self.consumer_groups[&id].subscribed_topics.values() {
                out.insert(t.name.clone(), t.partitions);
            }
        }
        out
    }

    /// The consumer groups on the `load` assignor.
    fn load_groups(&self) -> BTreeSet<String> {
        let on_load = |g: &&ConsumerGroup| {
            pick_assignor(g, &self.consumer_config(&g.group_id)) == ServerAssignor::Load
        };
        let groups = self.consumer_groups.values().filter(on_load);
        groups.map(|g| g.group_id.clone()).collect()
    }

    /// Takes fresh `loads` and reviews every settled group on the `load` assignor: a group
    /// whose assignor moves partitions gets a new epoch and target, written before any member
    /// is given it.
    pub fn review_load(&mut self, now_ms: i64, loads: Arc<PartitionLoads>) -> Vec<Effect> {
        self.partition_loads = loads;
        let mut out = Vec::new();
        for id in self.load_groups() {
            let cfg = self.consumer_config(&id);
            let Some(group) = self.consumer_groups.get_mut(&id) else {
                continue;
            };
            let before = (Before::of(group, []), debug_copy(group));
            let loads = GroupLoads::new(&self.partition_loads, &self.offsets, &id);
            let topics = Topics(&self.topics, self.topics_version, loads);
            if review_load(group, &cfg, &topics, now_ms).is_err() {
                continue;
            }
            let moves = group.epochs.recent.back().map_or(0, |r| r.moves.len());
            tracing::info!(group = %id, group_epoch = group.group_epoch, moves, "consumer group's load shifted: partitions move");
            self.write_consumer_group(now_ms, &id, Some(before), None, &mut out);
        }
        out
    }
}
