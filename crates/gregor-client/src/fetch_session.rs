//! The fetcher's side of a fetch session (KIP-227), one per broker fetched from: the first
//! fetch names every partition and asks for a session; once the broker gives one, each fetch
//! names only the partitions that are new or whose fetch position (or limits) changed, and
//! the ones no longer fetched as forgotten. The broker answers only partitions with news, so
//! a consumer or follower of many partitions neither sends nor receives the whole list each
//! time. Pure: the consumer and the broker's follower fetcher drive it.
//!
//! A refused session (FETCH_SESSION_ID_NOT_FOUND, INVALID_FETCH_SESSION_EPOCH), a failed
//! request or an abandoned one start over with a full fetch; a broker without room for a
//! session (session id 0 in the answer) gets full fetches, asking again each time.

use std::collections::HashMap;

use kafka_protocol::messages::fetch_request::{FetchPartition, ForgottenTopic};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use uuid::Uuid;

/// The epoch of a full fetch that asks for a session.
const INITIAL_EPOCH: i32 = 0;
/// The epoch of a full fetch without a session.
const FINAL_EPOCH: i32 = -1;
/// The first Fetch version with sessions.
const MIN_SESSION_VERSION: i16 = 7;
/// FETCH_SESSION_ID_NOT_FOUND and INVALID_FETCH_SESSION_EPOCH.
const SESSION_ERRORS: [i16; 2] = [70, 71];

/// A topic as the session names it: name (v7-12) or id (v13+).
type TopicKey = (TopicName, Uuid);

/// Each topic's partitions in the session, by partition index. Keyed per topic, so that
/// preparing a Fetch hashes and clones each topic's name once, not once per partition (with
/// hundreds of partitions per topic that was most of this module's cost per Fetch).
type Partitions = HashMap<TopicKey, HashMap<i32, FetchPartition>>;

/// One broker's fetch session, as the fetcher sees it.
#[derive(Debug, Default)]
pub struct FetchSession {
    /// The broker's session id; 0 without a session.
    id: i32,
    /// The epoch of the next request (0: the next one is full, asking for a session).
    epoch: i32,
    /// What the broker's session holds for each partition: what was last sent.
    sent: Partitions,
    /// The request prepared and not yet answered: what it leaves the session with.
    pending: Option<Pending>,
}

/// What a prepared request leaves the broker's session holding, once answered.
#[derive(Debug)]
enum Pending {
    /// Exactly these partitions.
    All(Partitions),
    /// The partitions held, with these new fetch positions.
    Changed(Vec<(TopicKey, FetchPartition)>),
}

impl FetchSession {
    /// No session yet: the first fetch is full and asks for one.
    pub fn new() -> FetchSession {
        FetchSession::default()
    }

    /// The broker's session id (0: none).
    pub fn id(&self) -> i32 {
        self.id
    }

    /// Turns `r`, a full fetch of every partition wanted now, into the request to send in
    /// `version`: an incremental one (changed partitions, forgotten ones) within a session,
    /// else a full one asking for a session.
    pub fn prepare(&mut self, r: &mut FetchRequest, version: i16) {
        let mut wanted = Partitions::new();
        for t in &r.topics {
            let partitions = wanted.entry((t.topic.clone(), t.topic_id)).or_default();
            partitions.extend(t.partitions.iter().map(|p| (p.partition, p.clone())));
        }
        if version < MIN_SESSION_VERSION {
            r.session_id = 0;
            r.session_epoch = FINAL_EPOCH;
            self.pending = None;
            return;
        }
        r.session_id = self.id;
        r.session_epoch = self.epoch;
        if self.id == 0 || self.epoch == INITIAL_EPOCH {
            // Full: every partition, as given.
            r.session_epoch = INITIAL_EPOCH;
            self.pending = Some(Pending::All(wanted));
            return;
        }
        for t in &mut r.topics {
            if let Some(sent) = self.sent.get(&(t.topic.clone(), t.topic_id)) {
                t.partitions.retain(|p| sent.get(&p.partition) != Some(p));
            }
        }
        r.topics.retain(|t| !t.partitions.is_empty());
        // The session's partitions no longer wanted, by topic name, id and index.
        let mut gone: Vec<(&TopicKey, Vec<i32>)> = self
            .sent
            .iter()
            .filter_map(|(topic, sent)| {
                let still = wanted.get(topic);
                let mut partitions: Vec<i32> = sent
                    .keys()
                    .filter(|p| still.is_none_or(|w| !w.contains_key(*p)))
                    .copied()
                    .collect();
                partitions.sort_unstable();
                (!partitions.is_empty()).then_some((topic, partitions))
            })
            .collect();
        gone.sort_by_key(|(topic, _)| *topic);
        r.forgotten_topics_data = gone
            .into_iter()
            .map(|((name, id), partitions)| {
                let mut f = ForgottenTopic::default();
                f.topic = name.clone();
                f.topic_id = *id;
                f.partitions = partitions;
                f
            })
            .collect();
        self.pending = Some(Pending::All(wanted));
    }

    /// Prepares `r`, which names only partitions whose fetch position may have moved (the
    /// caller knows every other one is as last sent, and that the set is the same), as the
    /// session's incremental fetch: those that did move are named, nothing is forgotten, and
    /// no full list is built to compare. `false`, `r` untouched, when the next fetch must be a
    /// full one (no session yet, or one to start over).
    pub fn prepare_changed(&mut self, r: &mut FetchRequest, version: i16) -> bool {
        if version < MIN_SESSION_VERSION || self.id == 0 || self.epoch == INITIAL_EPOCH {
            return false;
        }
        r.session_id = self.id;
        r.session_epoch = self.epoch;
        r.forgotten_topics_data.clear();
        let sent = &self.sent;
        for t in &mut r.topics {
            if let Some(held) = sent.get(&(t.topic.clone(), t.topic_id)) {
                t.partitions.retain(|p| held.get(&p.partition) != Some(p));
            }
        }
        r.topics.retain(|t| !t.partitions.is_empty());
        let changed = r
            .topics
            .iter()
            .flat_map(|t| {
                let topic = (t.topic.clone(), t.topic_id);
                t.partitions.iter().map(move |p| (topic.clone(), p.clone()))
            })
            .collect();
        self.pending = Some(Pending::Changed(changed));
        true
    }

    /// Learns from the broker's answer to the request last prepared.
    pub fn on_response(&mut self, resp: &FetchResponse) {
        let pending = self.pending.take();
        if SESSION_ERRORS.contains(&resp.error_code) {
            tracing::debug!(
                session_id = self.id,
                error_code = resp.error_code,
                "fetch session refused; starting over with a full fetch"
            );
            self.restart();
            return;
        }
        if resp.error_code != 0 {
            // Not answered as a session fetch: the broker's session may or may not have
            // moved on, so start over.
            self.restart();
            return;
        }
        if resp.session_id == 0 {
            // No session (none asked for, or no room): full fetches, asking again.
            self.id = 0;
            self.epoch = INITIAL_EPOCH;
            self.sent.clear();
            return;
        }
        if resp.session_id != self.id {
            self.id = resp.session_id;
        }
        self.epoch = if self.epoch == i32::MAX {
            1
        } else {
            self.epoch + 1
        };
        match pending {
            Some(Pending::All(sent)) => self.sent = sent,
            Some(Pending::Changed(changed)) => {
                for (topic, p) in changed {
                    self.sent.entry(topic).or_default().insert(p.partition, p);
                }
            }
            None => {}
        }
    }

    /// The request failed or was abandoned (its answer will not be read): the next fetch
    /// closes this session and asks for a new one.
    pub fn on_failure(&mut self) {
        self.pending = None;
        self.restart();
    }

    fn restart(&mut self) {
        // (id, 0) closes the broker's session `id` and creates a new one.
        self.epoch = INITIAL_EPOCH;
        self.sent.clear();
    }
}

#[cfg(test)]
#[path = "fetch_session_tests.rs"]
mod tests;
