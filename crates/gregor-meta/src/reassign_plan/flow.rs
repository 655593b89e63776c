//! Minimum-cost flow by successive shortest paths (Dijkstra with potentials), with convex
//! arcs: an arc whose k-th unit costs `weight * (2k + 1)`, so that its total cost is
//! `weight * flow²`. A convex arc stands for its whole ladder of parallel unit arcs, of which
//! only the next unit forward and the last unit back can be on a shortest path, so the
//! residual graph keeps one arc each way instead of one per unit.
//!
//! No crate with a minimum-cost flow is available to the workspace, and the planner needs only
//! this much. Each augmentation sends one unit; with `V` nodes and `E` arcs a flow of `F` units
//! costs O(F · E log V).

use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// Costs are i128: the planner weighs balance over moves over bytes lexicographically by
/// scaling, which does not fit in 64 bits for large clusters.
pub type Cost = i128;

#[derive(Debug, Clone)]
struct Arc {
    from: usize,
    to: usize,
    cap: i64,
    flow: i64,
    /// Per unit, for a plain arc.
    cost: Cost,
    /// `Some(w)`: the k-th unit costs `w * (2k + 1)`.
    convex: Option<Cost>,
    /// Units already on a convex arc from outside the network: its k-th unit costs as the
    /// (k + offset)-th.
    offset: i64,
}

impl Arc {
    fn forward_cost(&self) -> Cost {
        match self.convex {
            None => self.cost,
            Some(w) => w * (2 * (self.flow + self.offset) as Cost + 1),
        }
    }

    /// The cost of sending one unit back (undoing the last unit).
    fn backward_cost(&self) -> Cost {
        match self.convex {
            None => -self.cost,
            Some(w) => -w * (2 * ((self.flow + self.offset) as Cost - 1) + 1),
        }
    }
}

/// A flow network. Arcs are added, then [`Network::min_cost_flow`] runs once.
#[derive(Debug, Clone, Default)]
pub struct Network {
    arcs: Vec<Arc>,
    /// Per node, the arcs leaving it (forward) and entering it (usable backward).
    out: Vec<Vec<usize>>,
    into: Vec<Vec<usize>>,
}

impl Network {
    pub fn new(nodes: usize) -> Self {
        Network {
            arcs: Vec::new(),
            out: vec![Vec::new(); nodes],
            into: vec![Vec::new(); nodes],
        }
    }

    /// A plain arc with a non-negative cost per unit. Returns its index.
    pub fn arc(&mut self, from: usize, to: usize, cap: i64, cost: Cost) -> usize {
        debug_assert!(
            cost >= 0,
            "successive shortest paths start from zero potentials"
        );
        self.push(Arc {
            from,
            to,
            cap,
            flow: 0,
            cost,
            convex: None,
            offset: 0,
        })
    }

    /// A convex arc: `flow` units cost `weight * flow²` in all.
    pub fn convex_arc(&mut self, from: usize, to: usize, cap: i64, weight: Cost) -> usize {
        self.convex_arc_after(from, to, cap, weight, 0)
    }

    /// A convex arc that already carries `offset` units from elsewhere: `flow` units cost
    /// `weight * ((offset + flow)² − offset²)`.
    pub fn convex_arc_after(
        &mut self,
        from: usize,
        to: usize,
        cap: i64,
        weight: Cost,
        offset: i64,
    ) -> usize {
        debug_assert!(weight >= 0 && offset >= 0);
        self.push(Arc {
            from,
            to,
            cap,
            flow: 0,
            cost: 0,
            convex: Some(weight),
            offset,
        })
    }

    fn push(&mut self, arc: Arc) -> usize {
        let i = self.arcs.len();
        self.out[arc.from].push(i);
        self.into[arc.to].push(i);
        self.arcs.push(arc);
        i
    }

    pub fn flow(&self, arc: usize) -> i64 {
        self.arcs[arc].flow
    }

    /// Sends up to `amount` units from `source` to `sink` at minimum total cost. Returns the
    /// units sent (fewer than `amount` when the network cannot carry more).
    pub fn min_cost_flow(&mut self, source: usize, sink: usize, amount: i64) -> i64 {
        let n = self.out.len();
        // Every cost starts non-negative, so zero potentials are feasible.
        let mut potential: Vec<Cost> = vec![0; n];
        let mut sent = 0;
        while sent < amount {
            // Dijkstra over reduced costs; `via[v]` = (arc, forward) that reached v.
            let mut dist: Vec<Option<Cost>> = vec![None; n];
            let mut via: Vec<Option<(usize, bool)>> = vec![None; n];
            let mut done = vec![false; n];
            let mut heap = BinaryHeap::new();
            dist[source] = Some(0);
            heap.push(Reverse((0 as Cost, source)));
            while let Some(Reverse((d, u))) = heap.pop() {
                if done[u] {
                    continue;
                }
                done[u] = true;
                let mut relax = |v: usize, cost: Cost, step: (usize, bool)| {
                    let nd = d + cost + potential[u] - potential[v];
                    if dist[v].is_none_or(|old| nd < old) {
                        dist[v] = Some(nd);
                        via[v] = Some(step);
                        heap.push(Reverse((nd, v)));
                    }
                };
                for &i in &self.out[u] {
                    let a = &self.arcs[i];
                    if a.flow < a.cap && !done[a.to] {
                        relax(a.to, a.forward_cost(), (i, true));
                    }
                }
                for &i in &self.into[u] {
                    let a = &self.arcs[i];
                    if a.flow > 0 && !done[a.from] {
                        relax(a.from, a.backward_cost(), (i, false));
                    }
                }
            }
            if dist[sink].is_none() {
                break;
            }
            for v in 0..n {
                if let Some(d) = dist[v] {
                    potential[v] += d;
                }
            }
            let mut v = sink;
            while v != source {
                let (i, forward) = via[v].expect("every node on the path was reached");
                if forward {
                    self.arcs[i].flow += 1;
                    v = self.arcs[i].from;
                } else {
                    self.arcs[i].flow -= 1;
                    v = self.arcs[i].to;
                }
            }
            sent += 1;
        }
        sent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn takes_the_cheaper_path_and_spreads_over_convex_arcs() {
        // s -> a -> t (cost 1), s -> b -> t (cost 5), each capacity 1: two units cost 6.
        let mut g = Network::new(4);
        let (s, a, b, t) = (0, 1, 2, 3);
        g.arc(s, a, 1, 0);
        g.arc(s, b, 1, 0);
        let at = g.arc(a, t, 1, 1);
        let bt = g.arc(b, t, 1, 5);
        assert_eq!(g.min_cost_flow(s, t, 5), 2);
        assert_eq!((g.flow(at), g.flow(bt)), (1, 1));

        // Four units from s over two convex sinks of equal weight: 2 and 2, not 3 and 1,
        // even though the first sink's feeder is cheaper per unit.
        let mut g = Network::new(4);
        g.arc(s, a, 4, 0);
        g.arc(s, b, 4, 1);
        let at = g.convex_arc(a, t, 4, 10);
        let bt = g.convex_arc(b, t, 4, 10);
        assert_eq!(g.min_cost_flow(s, t, 4), 4);
        assert_eq!((g.flow(at), g.flow(bt)), (2, 2));

        // With 2 units already on the first sink, the 4 new ones go 1 and 3.
        let mut g = Network::new(4);
        g.arc(s, a, 4, 0);
        g.arc(s, b, 4, 0);
        let at = g.convex_arc_after(a, t, 4, 10, 2);
        let bt = g.convex_arc(b, t, 4, 10);
        assert_eq!(g.min_cost_flow(s, t, 4), 4);
        assert_eq!((g.flow(at), g.flow(bt)), (1, 3));
    }

    #[test]
    fn reroutes_earlier_units_when_a_later_one_needs_their_arc() {
        // Unit 1 takes s-a-t (cheapest); unit 2 can only use a (via s-x-a), so unit 1 must be
        // rerouted over s-b... : s->a (0), s->x (0), x->a only; a->t cap 1 and b path.
        // Graph: s->p1 (1), s->p2 (1); p1 -> a (0), p1 -> b (3); p2 -> a (0); a->t, b->t cap 1.
        let mut g = Network::new(6);
        let (s, p1, p2, a, b, t) = (0, 1, 2, 3, 4, 5);
        g.arc(s, p1, 1, 0);
        g.arc(s, p2, 1, 0);
        let p1a = g.arc(p1, a, 1, 0);
        let p1b = g.arc(p1, b, 1, 3);
        let p2a = g.arc(p2, a, 1, 0);
        g.arc(a, t, 1, 0);
        g.arc(b, t, 1, 0);
        assert_eq!(g.min_cost_flow(s, t, 2), 2);
        assert_eq!((g.flow(p1a), g.flow(p1b), g.flow(p2a)), (0, 1, 1));
    }
}
