//! Positions: committed offsets or `auto.offset.reset` for partitions without a position.
//! Fetching from them is in [`super::fetcher`].

use super::config::AutoOffsetReset;
use super::state::Consumer;
use crate::admin::offsets::OffsetSpec;
use crate::admin::Admin;
use crate::error::{Error, Result};
use crate::types::TopicPartition;

impl Consumer {
    /// Looks up positions for partitions without one: the committed offset, else
    /// `auto.offset.reset` (latest: the last stable offset in read_committed, as the
    /// ListOffsets carries `isolation.level`).
    pub(super) async fn update_positions(&mut self) -> Result<()> {
        let missing: Vec<TopicPartition> = self
            .assigned
            .iter()
            .filter(|(_, s)| s.position.is_none() && !s.reset)
            .map(|(tp, _)| tp.clone())
            .collect();
        if !missing.is_empty() {
            let committed = self.committed(&missing).await?;
            for (tp, offset) in committed {
                match (offset, self.assigned.get_mut(&tp)) {
                    (Some(o), Some(s)) => s.position = Some(o),
                    (None, Some(s)) => s.reset = true,
                    _ => {}
                }
            }
        }
        let reset: Vec<TopicPartition> = self
            .assigned
            .iter()
            .filter(|(_, s)| s.reset)
            .map(|(tp, _)| tp.clone())
            .collect();
        if reset.is_empty() {
            return Ok(());
        }
        let spec = match self.settings.auto_offset_reset {
            AutoOffsetReset::Earliest => OffsetSpec::Earliest,
            AutoOffsetReset::Latest => OffsetSpec::Latest,
            AutoOffsetReset::None => {
                return Err(Error::InvalidArgument(format!(
                "no committed offset (or position out of range) for {} and auto.offset.reset=none",
                reset
                    .iter()
                    .map(ToString::to_string)
                    .collect::<Vec<_>>()
                    .join(", ")
            )))
            }
        };
        let asked: Vec<(TopicPartition, OffsetSpec)> =
            reset.iter().map(|tp| (tp.clone(), spec)).collect();
        let listed = Admin::new(self.client.clone())
            .list_offsets(&asked, self.settings.isolation_level)
            .await?;
        for (tp, r) in listed {
            match r {
                Ok(o) => {
                    if let Some(s) = self.assigned.get_mut(&tp) {
                        s.position = Some(o.offset);
                        s.reset = false;
                    }
                }
                Err(e) => {
                    tracing::warn!(topic = %tp.topic, partition = tp.partition, error = %e, "offset reset failed")
                }
            }
        }
        Ok(())
    }
}
