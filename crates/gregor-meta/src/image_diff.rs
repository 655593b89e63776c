//! The delta between two whole images, for when a snapshot replaces the image at once instead
//! of records being applied one by one. Kept apart from `delta` so the delta types never depend
//! on the image that produces them.

use crate::delta::{MetadataDelta, PartitionDelta};
use crate::image::MetadataImage;
use crate::types::TopicIdPartition;
use std::collections::BTreeMap;

impl MetadataDelta {
    /// What changed from `old` to `new`, as if the records between them had been applied one by
    /// one (used when a snapshot replaces the image wholesale).
    pub fn between(old: &MetadataImage, new: &MetadataImage) -> MetadataDelta {
        let mut d = MetadataDelta::default();
        for (id, t) in old.topics() {
            if new.topic_by_id(*id).is_none() {
                d.deleted_topics.insert(*id, t.name.clone());
            }
        }
        for (id, t) in new.topics() {
            if old.topic_by_id(*id).is_none() {
                d.created_topics.insert(*id, t.name.clone());
            }
        }
        let mut partitions = BTreeMap::new();
        for (image, is_new) in [(old, false), (new, true)] {
            for (id, t) in image.topics() {
                for (p, reg) in &t.partitions {
                    let tp = TopicIdPartition {
                        topic_id: *id,
                        partition: *p,
                    };
                    let entry = partitions.entry(tp).or_insert_with(|| PartitionDelta {
                        topic: t.name.clone(),
                        before: None,
                        after: None,
                    });
                    if is_new {
                        entry.after = Some(reg.clone());
                    } else {
                        entry.before = Some(reg.clone());
                    }
                }
            }
        }
        d.changed_partitions = partitions
            .into_iter()
            .filter(|(_, p)| p.before != p.after)
            .collect();
        for id in old.brokers().keys().chain(new.brokers().keys()) {
            if old.broker(*id) != new.broker(*id) {
                d.changed_brokers.insert(*id);
            }
        }
        for r in old.all_configs().keys().chain(new.all_configs().keys()) {
            if old.configs(r) != new.configs(r) {
                d.changed_configs.insert(r.clone());
            }
        }
        let (old_q, new_q) = (
            old.client_quotas().entities(),
            new.client_quotas().entities(),
        );
        for e in old_q.keys().chain(new_q.keys()) {
            if old_q.get(e) != new_q.get(e) {
                d.changed_client_quotas.insert(e.clone());
            }
        }
        d
    }
}
