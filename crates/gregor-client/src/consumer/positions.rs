//! Positions and fetching: committed offsets or `auto.offset.reset` for partitions without a
//! position, and one round of Fetch requests (one per leader, each in that leader's fetch
//! session) into the buffer.

use std::collections::BTreeMap;
use std::time::Duration;

use kafka_protocol::messages::FetchRequest;
use tokio::task::JoinSet;

use super::fetch::{self, FetchTarget};
use super::{ms_i32, AutoOffsetReset, Consumer};
use crate::admin::offsets::{IsolationLevel, OffsetSpec};
use crate::admin::Admin;
use crate::client::Target;
use crate::error::{Error, KafkaCode, Result};
use crate::types::TopicPartition;

impl Consumer {
    /// Looks up positions for partitions without one: the committed offset, else
    /// `auto.offset.reset`.
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
            .list_offsets(&asked, IsolationLevel::ReadUncommitted)
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

    /// One round of fetches (one request per leader) into the buffer; waits up to `wait`.
    pub(super) async fn fetch_once(&mut self, wait: Duration) {
        let md = self.client.metadata();
        let mut by_leader: BTreeMap<i32, Vec<FetchTarget>> = BTreeMap::new();
        let mut leaderless = false;
        for (tp, s) in &self.assigned {
            let (Some(pos), false) = (s.position, s.paused) else {
                continue;
            };
            let Some(topic) = md.topic(&tp.topic) else {
                leaderless = true;
                continue;
            };
            let Some(p) = topic.partition(tp.partition) else {
                leaderless = true;
                continue;
            };
            let Some(leader) = p.leader else {
                leaderless = true;
                continue;
            };
            by_leader.entry(leader).or_default().push(FetchTarget {
                tp: tp.clone(),
                topic_id: topic.topic_id,
                offset: pos,
                current_leader_epoch: p.leader_epoch,
            });
        }
        if leaderless {
            let topics: Vec<String> = self.subscribed.iter().cloned().collect();
            if let Err(e) = self.client.refresh_metadata(Some(&topics)).await {
                tracing::debug!(error = %e, "metadata refresh failed");
            }
        }
        if by_leader.is_empty() {
            // Nothing to fetch: wait for the time or for the group to need us.
            tokio::select! {
                _ = tokio::time::sleep(wait) => {}
                _ = self.wake_app.notified() => {}
            }
            return;
        }
        let mut limits = self.settings.limits;
        limits.max_wait_ms = ms_i32(wait);
        let mut requests = JoinSet::new();
        for (leader, targets) in by_leader {
            let client = self.client.clone();
            let rack = self.rack.clone();
            let mut session = self.fetch_sessions.remove(&leader).unwrap_or_default();
            requests.spawn(async move {
                let r = client
                    .send::<FetchRequest, _>(&Target::Broker(leader), |v| {
                        let mut req = fetch::fetch_request(&targets, limits, rack.as_deref(), v);
                        session.prepare(&mut req, v);
                        Ok(req)
                    })
                    .await;
                match &r {
                    Ok((_, resp)) => session.on_response(resp),
                    Err(_) => session.on_failure(),
                }
                (leader, session, targets, r)
            });
        }
        let mut refresh = false;
        while let Some(joined) = requests.join_next().await {
            let Ok((leader, session, targets, result)) = joined else {
                continue;
            };
            self.fetch_sessions.insert(leader, session);
            let parsed = match result {
                Ok((_, resp)) => fetch::parse_fetch(resp, &targets),
                Err(e) => {
                    tracing::debug!(error = %e, "fetch failed");
                    refresh = true;
                    tokio::time::sleep(self.settings.retry_backoff).await;
                    continue;
                }
            };
            let parts = match parsed {
                Ok(p) => p,
                Err(e) => {
                    tracing::debug!(error = %e, "fetch failed");
                    continue;
                }
            };
            for (tp, r) in parts {
                let asked = targets.iter().find(|t| t.tp == tp).map(|t| t.offset);
                let Some(state) = self.assigned.get_mut(&tp) else {
                    continue;
                };
                if state.position != asked {
                    // Seeked or reset meanwhile: these records are stale.
                    continue;
                }
                match r {
                    Ok(f) => {
                        if f.records.is_empty() {
                            // Only control records or records before the position: move on.
                            if let (Some(next), Some(pos)) = (f.next_offset, state.position) {
                                if next > pos {
                                    state.position = Some(next);
                                }
                            }
                        }
                        self.buffered.extend(f.records);
                    }
                    Err(e) if e.code == KafkaCode::OFFSET_OUT_OF_RANGE => {
                        tracing::info!(topic = %tp.topic, partition = tp.partition, "offset out of range: applying auto.offset.reset");
                        state.position = None;
                        state.reset = true;
                    }
                    Err(e) => {
                        tracing::debug!(topic = %tp.topic, partition = tp.partition, error = %e, "fetch error");
                        refresh = true;
                    }
                }
            }
        }
        if refresh {
            let topics: Vec<String> = self.subscribed.iter().cloned().collect();
            let _ = self.client.refresh_metadata(Some(&topics)).await;
        }
    }
}
