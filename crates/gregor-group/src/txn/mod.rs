//! Transactions at their coordinator: the states of a transactional id and Kafka's
//! `__transaction_state` record formats. The coordinator state machine that drives them is
//! built on these.

pub mod records;
pub mod state;

pub use records::{TopicPartitions, TransactionLogValue};
pub use state::TransactionState;
