//! The `load` assignor's balancing step: a plan of single-partition moves off the most loaded
//! member, of which only the moves that still matter (by the threshold) are made.

use super::index::State;
use super::types::{Balance, Move, MoveReason};

/// One planned move and the largest member load once it is made.
struct Step {
    part: usize,
    to: usize,
    max_after: f64,
}

/// Works out the plan on a copy of the state, then makes its moves while the moves still ahead
/// cut some member's load by more than `threshold` of it (see [`remaining_cut`]).
pub(super) fn rebalance(state: &mut State, threshold: f64) -> (Balance, Vec<Move>) {
    let max_before = state.max_load();
    let (plan, end) = plan(state.clone());
    let share = state.parts.iter().map(|p| p.load).sum::<f64>() / state.ids.len().max(1) as f64;
    let offered_cut = remaining_cut(&sorted(state), &end, share);
    let mut moves = Vec::new();
    let mut current = max_before;
    for step in &plan {
        if remaining_cut(&sorted(state), &end, share) <= threshold {
            break;
        }
        moves.push(make(state, step, current));
        current = step.max_after;
    }
    let balance = Balance {
        offered_cut,
        moves: moves.len(),
        max_before,
        max_after: current,
        best_max: end.first().copied().unwrap_or(0.0),
    };
    (balance, moves)
}

/// Member loads, largest first.
fn sorted(state: &State) -> Vec<f64> {
    let mut v = state.load.clone();
    v.sort_by(|a, b| b.total_cmp(a));
    v
}

/// Comparing the sorted loads rank by rank with where the plan ends, the largest change of a
/// member's load, as a fraction of the fair share (`share`: total load over members). The plan
/// relieves the most loaded member first, so at rank 0 this is the cut of the most loaded
/// member's load; when a single partition pins that one, the next most loaded that can be
/// relieved counts; and a rise counts too, so a member joining a large group, to whom every
/// other member would hand a little, still gets work. Measuring against the fair share rather
/// than the member's own load keeps nearly idle members from trading crumbs.
fn remaining_cut(current: &[f64], end: &[f64], share: f64) -> f64 {
    if share <= 0.0 {
        return 0.0;
    }
    current
        .iter()
        .zip(end)
        .map(|(c, e)| (c - e).abs() / share)
        .fold(0.0, f64::max)
}

fn make(state: &mut State, step: &Step, max_before: f64) -> Move {
    let from = state.owner[step.part];
    let from_before = from.map_or(0.0, |m| state.load[m]);
    let to_before = state.load[step.to];
    state.transfer(step.part, step.to);
    Move {
        partition: state.parts[step.part].tp.clone(),
        load: state.parts[step.part].load,
        from: from.map(|m| state.ids[m].clone()),
        to: state.ids[step.to].clone(),
        reason: MoveReason::Balance {
            from_load: (from_before, from.map_or(0.0, |m| state.load[m])),
            max_before,
            max_after: step.max_after,
        },
        to_load: (to_before, state.load[step.to]),
    }
}

/// Moves off the most loaded member that can shed load, until no member can: a move must bring
/// the larger of the two loads it touches below the giver's. Every move lowers the sorted
/// (largest first) load vector, so the plan ends; the step cap only guards against float
/// pathologies. Returns the steps and the sorted loads at the end.
fn plan(mut state: State) -> (Vec<Step>, Vec<f64>) {
    let cap = 4 * state.parts.len() + state.ids.len() + 16;
    let mut steps = Vec::new();
    while steps.len() < cap {
        let Some((part, to)) = next_move(&state) else {
            break;
        };
        state.transfer(part, to);
        steps.push(Step {
            part,
            to,
            max_after: state.max_load(),
        });
    }
    let end = sorted(&state);
    (steps, end)
}

/// The best move of the most loaded member that has one (ties: smaller id).
fn next_move(state: &State) -> Option<(usize, usize)> {
    let mut order: Vec<usize> = (0..state.ids.len())
        .filter(|&m| state.load[m] > 0.0)
        .collect();
    order.sort_by(|&a, &b| state.load[b].total_cmp(&state.load[a]).then(a.cmp(&b)));
    order.into_iter().find_map(|g| best_move(state, g))
}

/// The move off `giver` that brings the larger of the two loads lowest, if that is below the
/// giver's load (ties: smaller partition index).
fn best_move(state: &State, giver: usize) -> Option<(usize, usize)> {
    let load = state.load[giver];
    // A move must gain more than rounding noise, or float error could make it cycle.
    let floor = load - load * 1e-9;
    let mut best: Option<(f64, usize, usize)> = None;
    let mut least: Vec<Option<Option<usize>>> = vec![None; state.subscribers.len()];
    for &p in &state.held[giver] {
        let part = &state.parts[p];
        let to =
            *least[part.topic].get_or_insert_with(|| state.least_loaded(part.topic, Some(giver)));
        let Some(to) = to else { continue };
        let pair_max = (load - part.load).max(state.load[to] + part.load);
        if pair_max < floor && best.is_none_or(|(b, _, _)| pair_max < b) {
            best = Some((pair_max, p, to));
        }
    }
    best.map(|(_, p, to)| (p, to))
}
