//! The `load` assignor's review loop: every `group.consumer.load.review.interval.ms` this node
//! asks its coordinator shards which topics their `load` groups subscribe to, samples those
//! partitions on their leaders (`ClusterView::leader_samples`), turns the samples into rates
//! (`load_meter`) and hands the figures back to the shards, which review their settled `load`
//! groups (`GroupCoordinator::review_load`). Nothing is sampled while no group uses `load`.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::cluster_view::ClusterView;
use crate::groups::Groups;
use crate::load_meter::{LoadMeter, Sample};
use crate::metadata::MetadataManager;
use crate::replica::ReplicaManager;
use crate::runtime::now_ms;

/// What the loop reads.
pub struct Sources<'a> {
    pub groups: &'a Groups,
    pub metadata: &'a MetadataManager,
    pub replicas: &'a ReplicaManager,
    pub cluster_view: &'a ClusterView,
}

/// Runs until the task is dropped.
pub async fn run(sources: Sources<'_>, interval: Duration) {
    let mut meter = LoadMeter::default();
    let mut tick = tokio::time::interval_at(tokio::time::Instant::now() + interval, interval);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        review_once(&sources, &mut meter).await;
    }
}

/// One round: sample what the `load` groups subscribe to, review them with the new figures.
async fn review_once(s: &Sources<'_>, meter: &mut LoadMeter) {
    let topics = s.groups.load_partitions().await;
    if topics.is_empty() {
        meter.record(BTreeMap::new(), now_ms());
        return;
    }
    let wanted = topics
        .iter()
        .flat_map(|(t, n)| (0..(*n).max(0)).map(move |p| (t.clone(), p)));
    let found = s
        .cluster_view
        .leader_samples(s.metadata, s.replicas, wanted)
        .await;
    let samples = found
        .into_iter()
        .map(|(tp, (high_watermark, size_bytes))| {
            let sample = Sample {
                high_watermark,
                size_bytes,
            };
            (tp, sample)
        })
        .collect();
    meter.record(samples, now_ms());
    s.groups.review_load(Arc::new(meter.loads())).await;
}
