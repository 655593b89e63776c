//! The smallest skew (largest minus smallest member size) any assignment can reach, given who
//! subscribes to what: the yardstick the lab prints next to each strategy's skew.
//!
//! With identical subscriptions it is `P mod n != 0`. Otherwise it is found by asking, for
//! growing `d` and every `lo`, whether some assignment gives every member between `lo` and
//! `lo + d` partitions: a flow problem with lower bounds (topics supply their partitions, members
//! must each absorb between `lo` and `lo + d`), solved with a small max-flow.

use std::collections::{BTreeMap, VecDeque};

use gregor_assign::Member;

use crate::group_json::TopicJson;

/// Limit beyond which the bound is not computed (the lab is for readable examples).
const MAX_PARTITIONS: i64 = 5_000;

pub fn skew_lower_bound(topics: &BTreeMap<String, TopicJson>, members: &[Member]) -> Option<usize> {
    if members.is_empty() {
        return Some(0);
    }
    // Per member, the partition counts of the existing topics it subscribes to.
    let topic_names: Vec<&String> = topics.keys().collect();
    let subs: Vec<Vec<usize>> = members
        .iter()
        .map(|m| {
            let mut v: Vec<usize> = topic_names
                .iter()
                .enumerate()
                .filter(|(_, t)| m.topics.iter().any(|s| s == **t))
                .map(|(i, _)| i)
                .collect();
            v.dedup();
            v
        })
        .collect();
    // Only subscribed topics are assigned.
    let subscribed: Vec<usize> = (0..topic_names.len())
        .filter(|t| subs.iter().any(|s| s.contains(t)))
        .collect();
    let total: i64 = subscribed
        .iter()
        .map(|t| topics[topic_names[*t]].partitions)
        .sum();
    if total > MAX_PARTITIONS {
        return None;
    }
    let n = members.len() as i64;
    if subs.iter().all(|s| *s == subs[0]) {
        return Some(usize::from(total % n != 0));
    }
    let counts: Vec<i64> = topic_names.iter().map(|t| topics[*t].partitions).collect();
    for d in 0..=total {
        for lo in 0..=total / n {
            if feasible(&counts, &subscribed, &subs, lo, lo + d) {
                return Some(d as usize);
            }
        }
    }
    None
}

/// Whether every subscribed partition can go to a subscriber with every member's size in
/// `[lo, hi]`.
fn feasible(counts: &[i64], subscribed: &[usize], subs: &[Vec<usize>], lo: i64, hi: i64) -> bool {
    // Nodes: 0 = S, 1 = T, 2 = S', 3 = T', then topics, then members.
    let t0 = 4;
    let m0 = t0 + counts.len();
    let mut g = Flow::new(m0 + subs.len());
    let inf = i64::MAX / 4;
    let mut required = 0;
    for &t in subscribed {
        // S -> topic with lower bound = capacity = its partition count.
        g.edge(2, t0 + t, counts[t]);
        g.edge(0, 3, counts[t]);
        required += counts[t];
    }
    for (m, topics) in subs.iter().enumerate() {
        for &t in topics {
            g.edge(t0 + t, m0 + m, inf);
        }
        // member -> T with lower bound lo, capacity hi.
        g.edge(m0 + m, 1, hi - lo);
        g.edge(2, 1, lo);
        g.edge(m0 + m, 3, lo);
        required += lo;
    }
    g.edge(1, 0, inf);
    g.max_flow(2, 3) == required
}

struct Flow {
    adj: Vec<Vec<usize>>,
    to: Vec<usize>,
    cap: Vec<i64>,
}

impl Flow {
    fn new(n: usize) -> Flow {
        Flow {
            adj: vec![Vec::new(); n],
            to: Vec::new(),
            cap: Vec::new(),
        }
    }

    fn edge(&mut self, a: usize, b: usize, c: i64) {
        self.adj[a].push(self.to.len());
        self.to.push(b);
        self.cap.push(c);
        self.adj[b].push(self.to.len());
        self.to.push(a);
        self.cap.push(0);
    }

    /// Edmonds-Karp; the lab's graphs are tiny.
    fn max_flow(&mut self, s: usize, t: usize) -> i64 {
        let mut total = 0;
        loop {
            let mut prev = vec![usize::MAX; self.adj.len()];
            let mut q = VecDeque::from([s]);
            prev[s] = usize::MAX - 1;
            while let Some(u) = q.pop_front() {
                for &e in &self.adj[u] {
                    let v = self.to[e];
                    if self.cap[e] > 0 && prev[v] == usize::MAX {
                        prev[v] = e;
                        q.push_back(v);
                    }
                }
            }
            if prev[t] == usize::MAX {
                return total;
            }
            let mut push = i64::MAX;
            let mut v = t;
            while v != s {
                let e = prev[v];
                push = push.min(self.cap[e]);
                v = self.to[e ^ 1];
            }
            let mut v = t;
            while v != s {
                let e = prev[v];
                self.cap[e] -= push;
                self.cap[e ^ 1] += push;
                v = self.to[e ^ 1];
            }
            total += push;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(id: &str, topics: &[&str]) -> Member {
        Member {
            member_id: id.into(),
            topics: topics.iter().map(|t| t.to_string()).collect(),
            ..Default::default()
        }
    }

    fn topics(list: &[(&str, i64)]) -> BTreeMap<String, TopicJson> {
        list.iter()
            .map(|(t, n)| {
                (
                    t.to_string(),
                    TopicJson {
                        partitions: *n,
                        replica_racks: None,
                    },
                )
            })
            .collect()
    }

    #[test]
    fn identical_subscriptions() {
        let t = topics(&[("a", 7)]);
        assert_eq!(
            skew_lower_bound(&t, &[m("x", &["a"]), m("y", &["a"])]),
            Some(1)
        );
        assert_eq!(skew_lower_bound(&t, &[m("x", &["a"])]), Some(0));
    }

    #[test]
    fn unequal_subscriptions() {
        // C0 takes T1 and T2 (3 + 2), C1 only T2: best is 3-2 (skew 1).
        let t = topics(&[("T1", 3), ("T2", 2)]);
        assert_eq!(
            skew_lower_bound(&t, &[m("C0", &["T1", "T2"]), m("C1", &["T2"])]),
            Some(1)
        );
        // A member subscribed to nothing forces a skew of the other's whole load.
        assert_eq!(
            skew_lower_bound(&t, &[m("C0", &["T1"]), m("C1", &["nope"])]),
            Some(3)
        );
        // 1, 2 and 3 partitions over nested subscriptions can be 2-2-2.
        let t = topics(&[("t0", 1), ("t1", 2), ("t2", 3)]);
        let ms = [
            m("C0", &["t0"]),
            m("C1", &["t0", "t1"]),
            m("C2", &["t0", "t1", "t2"]),
        ];
        assert_eq!(skew_lower_bound(&t, &ms), Some(2));
    }
}
