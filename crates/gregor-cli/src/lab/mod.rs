//! `gregor lab`: the four strategies side by side on the same sequence of membership changes,
//! the way seed 002 compares them by hand; `gregor lab load`: the broker's server-side
//! assignors and the load-aware one on membership and byte-rate changes.
//!
//! A scenario has topics and steps (members join, leave, change subscriptions). For every
//! strategy the lab replays the steps as a group would: each rebalance feeds the previous
//! assignment back as the members' owned partitions (next generation); eager strategies revoke
//! everything before each rebalance; cooperative-sticky revokes only what moves and needs a
//! second round to hand it over.

mod bound;
mod hot;
pub mod load_lab;
mod load_render;
mod load_sim;
mod render;
pub mod run;
mod simulate;

pub use render::render_text;
pub use simulate::{load, run, Scenario, BUNDLED};
