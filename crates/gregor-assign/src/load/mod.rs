//! The `load` server-side assignor: balances measured load (bytes per second in, plus a weight
//! times the backlog) across a group's members instead of partition counts, and stays sticky.
//!
//! One call is one rebalance round:
//! 1. every current owner keeps its partitions while it is in the group and subscribes to their
//!    topic;
//! 2. partitions without a valid owner (new ones, those of members that left or unsubscribed)
//!    are placed greedily, largest load first, each onto the least loaded subscriber (ties: fewer
//!    partitions, then member id), so new partitions with no figure yet still spread;
//! 3. a balancing plan is worked out: repeatedly, the most loaded member that can shed load
//!    hands the one partition to the least loaded subscriber of its topic that brings the
//!    larger of the two loads lowest, as long as that is below the giver's load. Moves are
//!    taken from the plan only while the rest of the plan would still change some member's
//!    load by more than `threshold` times the fair share (total load over members): cut the
//!    most loaded member's load (or, when a single partition pins it, the next most loaded
//!    one's), or fill a member that joined. A group within the threshold of what the plan
//!    reaches gets no moves, and the round after a round that moved gets none either (the
//!    plan from there is the rest of the same plan).
//!
//! Bound: with identical subscriptions the plan ends within one partition of the optimum, so
//! the largest member load is at most `(1 + threshold) * bound + largest partition`, `bound`
//! being [`LoadOutcome::lower_bound`].
//!
//! Determinism: members and partitions are visited in id order, every tie goes to the smaller id.
//! Limit: moves are single hops; with different subscriptions a chain through a third member
//! that would lower the maximum is not searched, so the result is a local optimum there.
//! Complexity per round: O(P log P + S) to index, then per planned move O(M log M + P_g + S_g)
//! (ordering members, the giver's partitions, the subscribers of its topics).

mod balance;
mod index;
mod types;

pub use types::{
    Balance, LoadConfig, LoadInput, LoadMember, LoadOutcome, Move, MoveReason, TopicPartition,
    DEFAULT_THRESHOLD,
};

use crate::AssignError;

pub const NAME: &str = "load";

/// Backlog weight used when none is configured: a backlog counts as the rate that drains it in
/// a minute.
pub const DEFAULT_BACKLOG_WEIGHT: f64 = 1.0 / 60.0;

/// A partition's load figure: bytes per second in plus `backlog_weight` times its backlog in
/// bytes (what the group has yet to consume).
pub fn load_figure(bytes_in_per_sec: f64, backlog_bytes: f64, backlog_weight: f64) -> f64 {
    bytes_in_per_sec + backlog_weight * backlog_bytes
}

/// One rebalance round of the `load` assignor.
pub fn assign(input: &LoadInput, config: &LoadConfig) -> Result<LoadOutcome, AssignError> {
    check_config(config)?;
    let mut state = index::State::new(input, config)?;
    let mut moves = state.place_orphans();
    let (balance, balance_moves) = balance::rebalance(&mut state, config.threshold);
    moves.extend(balance_moves);
    Ok(state.outcome(moves, balance))
}

/// [`LoadOutcome::lower_bound`] alone, for an input.
pub fn lower_bound(input: &LoadInput, config: &LoadConfig) -> Result<f64, AssignError> {
    check_config(config)?;
    Ok(index::State::new(input, config)?.lower_bound())
}

fn check_config(config: &LoadConfig) -> Result<(), AssignError> {
    if !(0.0..1.0).contains(&config.threshold) {
        return Err(AssignError::InvalidInput(format!(
            "load threshold {} is not in [0, 1)",
            config.threshold
        )));
    }
    if let Some(d) = config.default_load {
        if !d.is_finite() || d < 0.0 {
            return Err(AssignError::InvalidInput(format!(
                "default load {d} is not a finite non-negative number"
            )));
        }
    }
    Ok(())
}
