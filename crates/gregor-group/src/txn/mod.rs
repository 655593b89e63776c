//! Transactions at their coordinator: the states of a transactional id, the checked changes
//! requests and timeouts make to one (`metadata`), and Kafka's `__transaction_state` record
//! formats. The coordinator state machine that drives them is built on these.

pub mod coordinator;
pub mod metadata;
pub mod records;
pub mod state;

pub use coordinator::{TxnConfig, TxnCoordinator, TxnEffect, TxnRefusal, TxnReply};
pub use metadata::{EndOutcome, ProducerIdAndEpoch, Transition, TxnError, TxnMetadata};
pub use records::{TopicPartitions, TransactionLogValue};
pub use state::TransactionState;
