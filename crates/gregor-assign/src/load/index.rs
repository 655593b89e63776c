//! The `load` assignor's working state: members and partitions interned to indices (members by
//! id, partitions by topic then number), who holds what, and each member's load.
//!
//! A member's load is always the sum of its partitions' loads in partition order, recomputed
//! after every change, so equal holdings give bit-identical loads whatever the path to them
//! (ties then break the same way in the next round).

use std::collections::{BTreeMap, BTreeSet};

use super::types::{
    Balance, LoadConfig, LoadInput, LoadMember, LoadOutcome, Move, MoveReason, TopicPartition,
};
use crate::AssignError;

#[derive(Clone)]
pub(super) struct Part {
    pub tp: TopicPartition,
    pub topic: usize,
    pub load: f64,
}

#[derive(Clone)]
pub(super) struct State {
    /// Member ids, sorted.
    pub ids: Vec<String>,
    /// Partitions of subscribed topics, by topic then number.
    pub parts: Vec<Part>,
    /// Per topic, its subscribers (ascending).
    pub subscribers: Vec<Vec<usize>>,
    pub owner: Vec<Option<usize>>,
    pub held: Vec<BTreeSet<usize>>,
    pub load: Vec<f64>,
    /// Partitions without a valid owner, with the owner they had.
    orphans: Vec<(usize, Option<String>, MoveReason)>,
    /// Per member, its subscribed topics.
    member_topics: Vec<BTreeSet<usize>>,
}

impl State {
    pub fn new(input: &LoadInput, config: &LoadConfig) -> Result<State, AssignError> {
        let ids = member_ids(input)?;
        let topic_names: Vec<&String> = input.topics.keys().collect();
        let topic_idx: BTreeMap<&str, usize> = topic_names
            .iter()
            .enumerate()
            .map(|(i, t)| (t.as_str(), i))
            .collect();
        let member_topics: Vec<BTreeSet<usize>> = sorted_members(input)
            .iter()
            .map(|m| {
                m.topics
                    .iter()
                    .filter_map(|t| topic_idx.get(t.as_str()).copied())
                    .collect()
            })
            .collect();
        let mut subscribers = vec![Vec::new(); topic_names.len()];
        for (m, ts) in member_topics.iter().enumerate() {
            for &t in ts {
                subscribers[t].push(m);
            }
        }
        let parts = partitions(input, config, &subscribers)?;
        let n = ids.len();
        let mut state = State {
            ids,
            owner: vec![None; parts.len()],
            parts,
            subscribers,
            held: vec![BTreeSet::new(); n],
            load: vec![0.0; n],
            orphans: Vec::new(),
            member_topics,
        };
        state.keep_current(input);
        Ok(state)
    }

    /// Current owners keep what they may keep; the rest is remembered as orphans.
    fn keep_current(&mut self, input: &LoadInput) {
        let index: BTreeMap<&TopicPartition, usize> = self
            .parts
            .iter()
            .enumerate()
            .map(|(i, p)| (&p.tp, i))
            .collect();
        let mut previous: BTreeMap<usize, (String, MoveReason)> = BTreeMap::new();
        for (member, tps) in &input.current {
            let m = self.ids.binary_search(member).ok();
            for &p in tps.iter().filter_map(|tp| index.get(tp)) {
                let valid = m.filter(|&m| self.member_topics[m].contains(&self.parts[p].topic));
                match (valid, self.owner[p]) {
                    (Some(m), None) => {
                        self.owner[p] = Some(m);
                        self.held[m].insert(p);
                    }
                    (None, None) => {
                        let reason = match m {
                            Some(_) => MoveReason::OwnerUnsubscribed,
                            None => MoveReason::OwnerLeft,
                        };
                        previous.entry(p).or_insert((member.clone(), reason));
                    }
                    _ => {}
                }
            }
        }
        for m in 0..self.ids.len() {
            self.recompute(m);
        }
        self.orphans = (0..self.parts.len())
            .filter(|&p| self.owner[p].is_none())
            .map(|p| match previous.remove(&p) {
                Some((from, reason)) => (p, Some(from), reason),
                None => (p, None, MoveReason::Unowned),
            })
            .collect();
    }

    pub fn recompute(&mut self, m: usize) {
        // `+ 0.0`: an empty sum is -0.0.
        self.load[m] = self.held[m]
            .iter()
            .map(|&p| self.parts[p].load)
            .sum::<f64>()
            + 0.0;
    }

    pub fn transfer(&mut self, p: usize, to: usize) {
        if let Some(from) = self.owner[p] {
            self.held[from].remove(&p);
            self.recompute(from);
        }
        self.owner[p] = Some(to);
        self.held[to].insert(p);
        self.recompute(to);
    }

    /// The subscriber of `topic` other than `except` with the least load (ties: fewer
    /// partitions, then smaller id).
    pub fn least_loaded(&self, topic: usize, except: Option<usize>) -> Option<usize> {
        self.subscribers[topic]
            .iter()
            .copied()
            .filter(|&m| Some(m) != except)
            .min_by(|&a, &b| {
                self.load[a]
                    .total_cmp(&self.load[b])
                    .then(self.held[a].len().cmp(&self.held[b].len()))
                    .then(a.cmp(&b))
            })
    }

    pub fn max_load(&self) -> f64 {
        self.load.iter().copied().fold(0.0, f64::max)
    }

    /// Places the orphans, largest load first, each on the least loaded subscriber.
    pub fn place_orphans(&mut self) -> Vec<Move> {
        let mut orphans = std::mem::take(&mut self.orphans);
        orphans.sort_by(|a, b| {
            self.parts[b.0]
                .load
                .total_cmp(&self.parts[a.0].load)
                .then(a.0.cmp(&b.0))
        });
        let mut moves = Vec::new();
        for (p, from, reason) in orphans {
            let Some(to) = self.least_loaded(self.parts[p].topic, None) else {
                continue;
            };
            let before = self.load[to];
            self.transfer(p, to);
            moves.push(Move {
                partition: self.parts[p].tp.clone(),
                load: self.parts[p].load,
                from,
                to: self.ids[to].clone(),
                reason,
                to_load: (before, self.load[to]),
            });
        }
        moves
    }

    pub fn outcome(&self, moves: Vec<Move>, balance: Balance) -> LoadOutcome {
        let assignment = self
            .ids
            .iter()
            .zip(&self.held)
            .map(|(id, ps)| {
                (
                    id.clone(),
                    ps.iter().map(|&p| self.parts[p].tp.clone()).collect(),
                )
            })
            .collect();
        let member_loads = self
            .ids
            .iter()
            .cloned()
            .zip(self.load.iter().copied())
            .collect();
        LoadOutcome {
            assignment,
            moves,
            member_loads,
            total_load: self.parts.iter().map(|p| p.load).sum(),
            lower_bound: self.lower_bound(),
            balance,
        }
    }

    /// See [`LoadOutcome::lower_bound`].
    pub fn lower_bound(&self) -> f64 {
        let biggest = self.parts.iter().map(|p| p.load).fold(0.0, f64::max);
        let mut topic_load = vec![0.0; self.subscribers.len()];
        for p in &self.parts {
            topic_load[p.topic] += p.load;
        }
        let mut sets: Vec<BTreeSet<usize>> = self.member_topics.clone();
        sets.extend((0..topic_load.len()).map(|t| BTreeSet::from([t])));
        sets.push((0..topic_load.len()).collect());
        sets.iter()
            .map(|set| {
                let load: f64 = set.iter().map(|&t| topic_load[t]).sum();
                let members = self
                    .member_topics
                    .iter()
                    .filter(|ts| !ts.is_disjoint(set))
                    .count();
                if members == 0 {
                    0.0
                } else {
                    load / members as f64
                }
            })
            .fold(biggest, f64::max)
    }
}

fn sorted_members(input: &LoadInput) -> Vec<&LoadMember> {
    let mut ms: Vec<&LoadMember> = input.members.iter().collect();
    ms.sort_by(|a, b| a.member_id.cmp(&b.member_id));
    ms
}

fn member_ids(input: &LoadInput) -> Result<Vec<String>, AssignError> {
    let ids: Vec<String> = sorted_members(input)
        .iter()
        .map(|m| m.member_id.clone())
        .collect();
    if let Some(w) = ids.windows(2).find(|w| w[0] == w[1]) {
        return Err(AssignError::InvalidInput(format!(
            "member {} appears twice",
            w[0]
        )));
    }
    Ok(ids)
}

/// The partitions of subscribed topics with their loads.
fn partitions(
    input: &LoadInput,
    config: &LoadConfig,
    subscribers: &[Vec<usize>],
) -> Result<Vec<Part>, AssignError> {
    if let Some((tp, l)) = input
        .loads
        .iter()
        .find(|(_, l)| !l.is_finite() || **l < 0.0)
    {
        return Err(AssignError::InvalidInput(format!(
            "load {l} of {tp} is not a finite non-negative number"
        )));
    }
    let default = default_load(input, config);
    let mut parts = Vec::new();
    for (t, (name, &count)) in input.topics.iter().enumerate() {
        if count < 0 {
            return Err(AssignError::InvalidInput(format!(
                "topic {name} has {count} partitions"
            )));
        }
        if subscribers[t].is_empty() {
            continue;
        }
        for n in 0..count {
            let tp = TopicPartition::new(name.clone(), n);
            let load = input.loads.get(&tp).copied().unwrap_or(default);
            parts.push(Part { tp, topic: t, load });
        }
    }
    Ok(parts)
}

/// The configured default, or the mean of the figures given for existing partitions.
fn default_load(input: &LoadInput, config: &LoadConfig) -> f64 {
    if let Some(d) = config.default_load {
        return d;
    }
    let known: Vec<f64> = input
        .loads
        .iter()
        .filter(|(tp, _)| {
            input
                .topics
                .get(&tp.topic)
                .is_some_and(|&n| (0..n).contains(&tp.partition))
        })
        .map(|(_, &l)| l)
        .collect();
    if known.is_empty() {
        1.0
    } else {
        known.iter().sum::<f64>() / known.len() as f64
    }
}
