//! The `load` assignor's input and output: plain data (ids, names, load figures), so the group
//! coordinator can call it without gregor-assign's group model.

use std::collections::BTreeMap;
use std::fmt;

/// Default threshold: moves must cut the most loaded member's load by more than 10% of the fair
/// share.
pub const DEFAULT_THRESHOLD: f64 = 0.10;

/// A topic partition by name.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct TopicPartition {
    pub topic: String,
    pub partition: i32,
}

impl TopicPartition {
    pub fn new(topic: impl Into<String>, partition: i32) -> TopicPartition {
        TopicPartition {
            topic: topic.into(),
            partition,
        }
    }
}

impl fmt::Display for TopicPartition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}-{}", self.topic, self.partition)
    }
}

/// A member: its id and the names of the topics it subscribes to (topics that do not exist are
/// ignored).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct LoadMember {
    pub member_id: String,
    pub topics: Vec<String>,
}

/// What one round works on.
#[derive(Debug, Clone, Default)]
pub struct LoadInput {
    pub members: Vec<LoadMember>,
    /// Partition count of every existing topic.
    pub topics: BTreeMap<String, i32>,
    /// A partition's load figure (see `load_figure`); a partition without one gets
    /// [`LoadConfig::default_load`].
    pub loads: BTreeMap<TopicPartition, f64>,
    /// The current assignment: member id to its partitions. A partition listed under several
    /// members stays with the first by member id.
    pub current: BTreeMap<String, Vec<TopicPartition>>,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub struct LoadConfig {
    /// Fraction in `[0, 1)` of the fair share (total load over members) by which the moves must
    /// cut the most loaded member's load (or fill a joining one).
    pub threshold: f64,
    /// Load of a partition without a figure; `None`: the mean of the figures given (1.0 when
    /// none is), so a new partition counts as an average one.
    pub default_load: Option<f64>,
}

impl Default for LoadConfig {
    fn default() -> Self {
        LoadConfig {
            threshold: DEFAULT_THRESHOLD,
            default_load: None,
        }
    }
}

/// Why a partition changes owner.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum MoveReason {
    /// Nobody owned it (a new partition, or a topic newly subscribed to).
    Unowned,
    /// Its owner left the group.
    OwnerLeft,
    /// Its owner no longer subscribes to its topic.
    OwnerUnsubscribed,
    /// Balance: the giver was the most loaded member that could shed load.
    Balance {
        /// The giver's load before and after.
        from_load: (f64, f64),
        /// The group's largest member load before and after this move.
        max_before: f64,
        max_after: f64,
    },
}

/// One change of owner, for the rebalance timeline.
#[derive(Debug, Clone, PartialEq)]
pub struct Move {
    pub partition: TopicPartition,
    /// The partition's load figure.
    pub load: f64,
    /// The previous owner, if any.
    pub from: Option<String>,
    pub to: String,
    pub reason: MoveReason,
    /// The receiver's load before and after.
    pub to_load: (f64, f64),
}

impl fmt::Display for Move {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let from = self.from.as_deref().unwrap_or("-");
        write!(
            f,
            "{} (load {:.0}) {from} -> {}: ",
            self.partition, self.load, self.to
        )?;
        let (tb, ta) = self.to_load;
        let to = &self.to;
        match self.reason {
            MoveReason::Unowned => write!(f, "unowned ({to} {tb:.0} -> {ta:.0})"),
            MoveReason::OwnerLeft => write!(f, "owner left ({to} {tb:.0} -> {ta:.0})"),
            MoveReason::OwnerUnsubscribed => {
                write!(f, "owner unsubscribed ({to} {tb:.0} -> {ta:.0})")
            }
            MoveReason::Balance {
                from_load: (fb, fa),
                max_before,
                max_after,
            } => write!(
                f,
                "balance ({from} {fb:.0} -> {fa:.0}, {to} {tb:.0} -> {ta:.0}; \
                 largest member load {max_before:.0} -> {max_after:.0})"
            ),
        }
    }
}

/// What the balancing step decided.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Balance {
    /// The largest change of a member's load (rank by rank, largest first), as a fraction of
    /// the fair share, that the whole plan offered; moves were made only if it exceeded the
    /// threshold.
    pub offered_cut: f64,
    /// Balance moves made.
    pub moves: usize,
    /// The largest member load before and after the balance moves.
    pub max_before: f64,
    pub max_after: f64,
    /// Where the whole plan would have brought it.
    pub best_max: f64,
}

/// The result of one round.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadOutcome {
    /// Every member, with its partitions sorted (possibly none).
    pub assignment: BTreeMap<String, Vec<TopicPartition>>,
    /// Placements of unowned partitions first, then balance moves, in the order made.
    pub moves: Vec<Move>,
    /// Each member's load after the round.
    pub member_loads: BTreeMap<String, f64>,
    /// Total load of the assigned partitions.
    pub total_load: f64,
    /// A lower bound on the largest member load of any assignment (see [`LoadOutcome`]'s
    /// `max_load` for this one): the largest of the biggest partition, and for a set of topics,
    /// their load over the members subscribing to one of them (each topic alone, all topics, the
    /// topics of each member).
    pub lower_bound: f64,
    pub balance: Balance,
}

impl LoadOutcome {
    /// The largest member load.
    pub fn max_load(&self) -> f64 {
        self.member_loads.values().copied().fold(0.0, f64::max)
    }
}
