//! KIP-848 consumer groups (`group.protocol=consumer`): the group's data (`model`), a member's
//! reconciliation toward its target (`reconcile`), the server-side assignors (`target`),
//! ConsumerGroupHeartbeat (`heartbeat`), the `load` assignor's review of settled groups
//! (`load_review`), the recent group epochs the console draws (`epochs`),
//! and classic members inside a consumer group during a migration (`classic`). Pure, like the
//! classic coordinator, which drives them.

pub mod classic;
pub mod delta;
pub mod epochs;
pub mod heartbeat;
pub mod load_review;
pub mod model;
pub mod reconcile;
pub mod records;
pub mod target;

#[cfg(test)]
mod tests;
