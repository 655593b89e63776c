//! Kafka consumer partition assignment, as the group leader member runs it.
//!
//! * [`range`], [`roundrobin`]: Kafka's results exactly, including the rack-aware range branch.
//! * [`sticky`] (`sticky` and `cooperative-sticky`): balanced, sticky, rack-aware, with the
//!   cooperative protocol's withholding of partitions that change owner.
//! * [`load`]: a server-side assignor for the group coordinator that balances measured load
//!   (bytes in, backlog), sticky, with each move explained.
//! * [`selection`]: how the coordinator picks the group's protocol from the members' lists.
//! * [`protocol`]: `ConsumerProtocolSubscription` / `ConsumerProtocolAssignment` and the sticky
//!   assignors' user data, byte-compatible with Kafka clients.
//!
//! Everything here is pure: no I/O, no clocks.

pub mod load;
pub mod model;
pub mod protocol;
pub mod range;
pub mod roundrobin;
pub mod selection;
pub mod sticky;
pub mod synthetic;

pub use model::{
    java_cmp, GroupAssignment, GroupSpec, GroupSpecBuilder, Member, MemberAssignment, MemberIdx,
    MemberSpec, PartitionId, TopicId, TopicSpec,
};

use bytes::Bytes;

/// The rebalance protocols of KIP-429.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum RebalanceProtocol {
    /// Members revoke everything they own before rejoining.
    Eager,
    /// Members keep what they own; only partitions that move are revoked, and handed over in a
    /// follow-up rebalance.
    Cooperative,
}

impl RebalanceProtocol {
    pub fn name(self) -> &'static str {
        match self {
            RebalanceProtocol::Eager => "EAGER",
            RebalanceProtocol::Cooperative => "COOPERATIVE",
        }
    }
}

/// Errors of this crate.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AssignError {
    /// The group description is invalid (duplicate member, negative partition count...).
    #[error("invalid input: {0}")]
    InvalidInput(String),
    /// No strategy is supported by every member (Kafka's INCONSISTENT_GROUP_PROTOCOL).
    #[error("INCONSISTENT_GROUP_PROTOCOL: {0}")]
    InconsistentGroupProtocol(String),
    /// A strategy name that is not known.
    #[error(
        "unknown assignment strategy '{0}' (known: range, roundrobin, sticky, cooperative-sticky)"
    )]
    UnknownStrategy(String),
    /// An assignment that breaks an invariant (a partition given twice, an unknown partition).
    #[error("invalid assignment: {0}")]
    InvalidAssignment(String),
    /// Consumer protocol bytes that cannot be decoded.
    #[error("cannot decode {what}: {reason}")]
    Decode { what: &'static str, reason: String },
}

/// What a member learns when it receives its assignment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AssignmentInfo {
    /// The member's partitions as `(topic, partition)`.
    pub partitions: Vec<(String, i32)>,
    /// Assignment user data from the leader.
    pub user_data: Option<Bytes>,
    /// The generation of the group the assignment belongs to.
    pub generation: i32,
}

/// A partition assignment strategy (Kafka's `ConsumerPartitionAssignor`). Implement it to plug a
/// custom strategy into the Gregor consumer; the built-in ones implement it too.
///
/// The leader member calls [`Assignor::assign`]; every member calls
/// [`Assignor::subscription_user_data`] before joining and [`Assignor::on_assignment`] when it
/// receives its share.
pub trait Assignor: Send + Sync {
    /// Protocol name, as sent in JoinGroup (`range`, `roundrobin`, ...). Must not collide with
    /// another strategy in the group.
    fn name(&self) -> &str;

    /// Rebalance protocols this strategy can run under, preferred first.
    fn supported_protocols(&self) -> &[RebalanceProtocol] {
        &[RebalanceProtocol::Eager]
    }

    /// User data to put in this member's subscription.
    fn subscription_user_data(&self, _topics: &[String]) -> Option<Bytes> {
        None
    }

    /// Computes the group's assignment. Called on the leader only.
    fn assign(&self, group: &GroupSpec) -> Result<GroupAssignment, AssignError>;

    /// Called on every member with its own assignment.
    fn on_assignment(&mut self, _assignment: &AssignmentInfo) {}
}

/// Names of the built-in strategies, in Kafka's protocol spelling.
pub const BUILTIN_STRATEGIES: [&str; 4] = ["range", "roundrobin", "sticky", "cooperative-sticky"];

/// A built-in strategy by its protocol name.
pub fn builtin(name: &str) -> Result<Box<dyn Assignor>, AssignError> {
    match name {
        range::NAME => Ok(Box::new(range::RangeAssignor)),
        roundrobin::NAME => Ok(Box::new(roundrobin::RoundRobinAssignor)),
        sticky::STICKY_NAME => Ok(Box::new(sticky::StickyAssignor::default())),
        sticky::COOPERATIVE_NAME => Ok(Box::new(sticky::CooperativeStickyAssignor::default())),
        other => Err(AssignError::UnknownStrategy(other.to_string())),
    }
}
