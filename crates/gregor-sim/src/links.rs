//! Which links between simulated hosts are cut or held, counted per fault, so that episodes may
//! overlap: turmoil's `partition`/`repair` and `hold`/`release` set a link's state outright, so
//! the first of two overlapping faults to heal would repair a link the other still cuts. Each
//! fault adds or removes its own claim here, and the table says what to tell turmoil when the
//! combined state of a link changes.
//!
//! A cut wins over a hold on the same link (turmoil cannot hold a link that is cut one way):
//! messages a cut direction carries are dropped, as a partition drops them, and a hold comes
//! back when the last cut of the link heals.

use std::collections::BTreeMap;

/// What to do to turmoil's network, in order.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LinkOp {
    /// Hold every message between the two hosts, both ways.
    Hold(String, String),
    /// Deliver what was held and make the link healthy both ways.
    Release(String, String),
    /// Drop what `from` sends to `to`.
    CutOneWay { from: String, to: String },
    /// Let `from` reach `to` again.
    RepairOneWay { from: String, to: String },
}

/// The claims on one link (its two hosts in name order).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
struct Claims {
    /// Faults cutting the first host's messages to the second.
    cut_forward: u32,
    /// Faults cutting the second host's messages to the first.
    cut_back: u32,
    holds: u32,
}

/// What turmoil is told a link is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct State {
    cut_forward: bool,
    cut_back: bool,
    held: bool,
}

impl Claims {
    fn state(self) -> State {
        let cut_forward = self.cut_forward > 0;
        let cut_back = self.cut_back > 0;
        State {
            cut_forward,
            cut_back,
            held: self.holds > 0 && !cut_forward && !cut_back,
        }
    }
}

#[derive(Debug, Default)]
pub struct LinkTable {
    links: BTreeMap<(String, String), Claims>,
}

impl LinkTable {
    /// One more fault drops what `from` sends to `to`.
    pub fn cut_one_way(&mut self, from: &str, to: &str) -> Vec<LinkOp> {
        self.change(from, to, |c, forward| {
            if forward {
                c.cut_forward += 1
            } else {
                c.cut_back += 1
            }
        })
    }

    /// A fault that dropped what `from` sends to `to` heals.
    pub fn repair_one_way(&mut self, from: &str, to: &str) -> Vec<LinkOp> {
        self.change(from, to, |c, forward| {
            let n = if forward {
                &mut c.cut_forward
            } else {
                &mut c.cut_back
            };
            *n = n.saturating_sub(1);
        })
    }

    /// One more fault cuts the link both ways.
    pub fn cut(&mut self, a: &str, b: &str) -> Vec<LinkOp> {
        let mut ops = self.cut_one_way(a, b);
        ops.extend(self.cut_one_way(b, a));
        ops
    }

    /// A fault that cut the link both ways heals.
    pub fn repair(&mut self, a: &str, b: &str) -> Vec<LinkOp> {
        let mut ops = self.repair_one_way(a, b);
        ops.extend(self.repair_one_way(b, a));
        ops
    }

    /// One more fault holds the link's messages.
    pub fn hold(&mut self, a: &str, b: &str) -> Vec<LinkOp> {
        self.change(a, b, |c, _| c.holds += 1)
    }

    /// A fault that held the link heals.
    pub fn release(&mut self, a: &str, b: &str) -> Vec<LinkOp> {
        self.change(a, b, |c, _| c.holds = c.holds.saturating_sub(1))
    }

    /// Applies `claim` to the link of `a` and `b` (told whether `a` is its first host) and
    /// returns what turmoil must do for the link's state to follow.
    fn change(&mut self, a: &str, b: &str, claim: impl FnOnce(&mut Claims, bool)) -> Vec<LinkOp> {
        let forward = a <= b;
        let key = if forward {
            (a.to_string(), b.to_string())
        } else {
            (b.to_string(), a.to_string())
        };
        let claims = self.links.entry(key.clone()).or_default();
        let before = claims.state();
        claim(claims, forward);
        let after = claims.state();
        if *claims == Claims::default() {
            self.links.remove(&key);
        }
        transition(&key.0, &key.1, before, after)
    }
}

fn transition(first: &str, second: &str, before: State, after: State) -> Vec<LinkOp> {
    let mut ops = Vec::new();
    if before == after {
        return ops;
    }
    let pair = || (first.to_string(), second.to_string());
    if before.held {
        // Held messages go out now (or are dropped by the cut that follows).
        let (a, b) = pair();
        ops.push(LinkOp::Release(a, b));
    }
    if after.held {
        let (a, b) = pair();
        ops.push(LinkOp::Hold(a, b));
        return ops;
    }
    // A release left both directions healthy; otherwise each keeps its state until told.
    let was = |cut: bool| cut && !before.held;
    for (from, to, was_cut, is_cut) in [
        (first, second, was(before.cut_forward), after.cut_forward),
        (second, first, was(before.cut_back), after.cut_back),
    ] {
        let (from, to) = (from.to_string(), to.to_string());
        match (was_cut, is_cut) {
            (false, true) => ops.push(LinkOp::CutOneWay { from, to }),
            (true, false) => ops.push(LinkOp::RepairOneWay { from, to }),
            _ => {}
        }
    }
    ops
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cut(from: &str, to: &str) -> LinkOp {
        LinkOp::CutOneWay {
            from: from.into(),
            to: to.into(),
        }
    }

    fn repair(from: &str, to: &str) -> LinkOp {
        LinkOp::RepairOneWay {
            from: from.into(),
            to: to.into(),
        }
    }

    #[test]
    fn a_link_cut_by_two_faults_stays_cut_until_both_heal() {
        let mut t = LinkTable::default();
        assert_eq!(t.cut("n0", "n1"), vec![cut("n0", "n1"), cut("n1", "n0")]);
        assert_eq!(t.cut("n1", "n0"), vec![]);
        assert_eq!(t.repair("n0", "n1"), vec![], "the second cut still holds");
        assert_eq!(
            t.repair("n1", "n0"),
            vec![repair("n1", "n0"), repair("n0", "n1")]
        );
        assert!(t.links.is_empty());
    }

    #[test]
    fn a_one_way_cut_inside_a_two_way_cut_keeps_its_direction() {
        let mut t = LinkTable::default();
        t.cut("n0", "n2");
        assert_eq!(t.cut_one_way("n2", "n0"), vec![]);
        // The two-way cut heals: only the direction the one-way fault cuts stays cut.
        assert_eq!(t.repair("n0", "n2"), vec![repair("n0", "n2")]);
        assert_eq!(t.repair_one_way("n2", "n0"), vec![repair("n2", "n0")]);
    }

    #[test]
    fn a_cut_wins_over_a_hold_and_the_hold_comes_back() {
        let mut t = LinkTable::default();
        let hold = LinkOp::Hold("n1".into(), "n2".into());
        let release = LinkOp::Release("n1".into(), "n2".into());
        assert_eq!(t.hold("n2", "n1"), vec![hold.clone()]);
        assert_eq!(
            t.cut_one_way("n2", "n1"),
            vec![release.clone(), cut("n2", "n1")],
            "the held messages go out, then the cut direction drops"
        );
        assert_eq!(t.repair_one_way("n2", "n1"), vec![hold.clone()]);
        assert_eq!(t.hold("n1", "n2"), vec![], "a second hold changes nothing");
        assert_eq!(t.release("n1", "n2"), vec![]);
        assert_eq!(t.release("n1", "n2"), vec![release]);
        assert!(t.links.is_empty());
    }

    #[test]
    fn a_hold_ending_under_a_cut_changes_nothing_turmoil_sees() {
        let mut t = LinkTable::default();
        t.hold("client", "n0");
        t.cut("n0", "client");
        assert_eq!(t.release("client", "n0"), vec![]);
        assert_eq!(
            t.repair("client", "n0"),
            vec![repair("client", "n0"), repair("n0", "client")]
        );
    }

    #[test]
    fn healing_what_was_never_cut_is_harmless() {
        let mut t = LinkTable::default();
        assert_eq!(t.repair("n0", "n1"), vec![]);
        assert_eq!(t.release("n0", "n1"), vec![]);
        assert!(t.links.is_empty());
    }
}
