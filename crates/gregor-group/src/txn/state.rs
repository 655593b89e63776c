//! The state of a transactional id at its coordinator, as `__transaction_state` stores it
//! (Kafka's codes) and DescribeTransactions / ListTransactions name it, with the transitions the
//! coordinator may make.

/// Where a transactional id's current transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum TransactionState {
    /// No transaction open (a producer id was handed out, or the last one finished and was
    /// written as such).
    Empty,
    /// Partitions or offsets were added: records may be written in the transaction.
    Ongoing,
    /// EndTxn(commit) is durable; commit markers are being written.
    PrepareCommit,
    /// EndTxn(abort), a timeout or a fencing producer; abort markers are being written.
    PrepareAbort,
    /// Every commit marker is written.
    CompleteCommit,
    /// Every abort marker is written.
    CompleteAbort,
    /// The transactional id expired and is being removed.
    Dead,
    /// A new producer with the same transactional id fenced an open transaction: it is aborted
    /// with the epoch bumped, so the old producer cannot write in it again.
    PrepareEpochFence,
}

impl TransactionState {
    pub const ALL: [TransactionState; 8] = [
        TransactionState::Empty,
        TransactionState::Ongoing,
        TransactionState::PrepareCommit,
        TransactionState::PrepareAbort,
        TransactionState::CompleteCommit,
        TransactionState::CompleteAbort,
        TransactionState::Dead,
        TransactionState::PrepareEpochFence,
    ];

    /// The `TransactionStatus` byte of a `__transaction_state` value.
    pub fn code(self) -> i8 {
        match self {
            TransactionState::Empty => 0,
            TransactionState::Ongoing => 1,
            TransactionState::PrepareCommit => 2,
            TransactionState::PrepareAbort => 3,
            TransactionState::CompleteCommit => 4,
            TransactionState::CompleteAbort => 5,
            TransactionState::Dead => 6,
            TransactionState::PrepareEpochFence => 7,
        }
    }

    pub fn from_code(code: i8) -> Option<TransactionState> {
        Self::ALL.into_iter().find(|s| s.code() == code)
    }

    /// The name DescribeTransactions and ListTransactions use (and filter on).
    pub fn name(self) -> &'static str {
        match self {
            TransactionState::Empty => "Empty",
            TransactionState::Ongoing => "Ongoing",
            TransactionState::PrepareCommit => "PrepareCommit",
            TransactionState::PrepareAbort => "PrepareAbort",
            TransactionState::CompleteCommit => "CompleteCommit",
            TransactionState::CompleteAbort => "CompleteAbort",
            TransactionState::Dead => "Dead",
            TransactionState::PrepareEpochFence => "PrepareEpochFence",
        }
    }

    pub fn from_name(name: &str) -> Option<TransactionState> {
        Self::ALL.into_iter().find(|s| s.name() == name)
    }

    /// Whether the coordinator may move a transactional id from `previous` to this state.
    pub fn can_follow(self, previous: TransactionState) -> bool {
        use TransactionState::*;
        match self {
            Empty | Dead => matches!(previous, Empty | CompleteCommit | CompleteAbort),
            Ongoing => matches!(previous, Ongoing | Empty | CompleteCommit | CompleteAbort),
            PrepareCommit | PrepareEpochFence => previous == Ongoing,
            // From an idle state only with transaction version 2: an abort with nothing open
            // still bumps the epoch (`TxnMetadata::prepare_end_v2`).
            PrepareAbort => matches!(
                previous,
                Ongoing | PrepareEpochFence | Empty | CompleteCommit | CompleteAbort
            ),
            CompleteCommit => previous == PrepareCommit,
            CompleteAbort => previous == PrepareAbort,
        }
    }

    /// A decision is durable and its markers are being written: the producer must wait
    /// (CONCURRENT_TRANSACTIONS) before it starts another transaction.
    pub fn is_preparing(self) -> bool {
        matches!(
            self,
            TransactionState::PrepareCommit
                | TransactionState::PrepareAbort
                | TransactionState::PrepareEpochFence
        )
    }

    /// No transaction is open or finishing: a new one may begin.
    pub fn is_idle(self) -> bool {
        matches!(
            self,
            TransactionState::Empty
                | TransactionState::CompleteCommit
                | TransactionState::CompleteAbort
        )
    }
}

#[cfg(test)]
mod tests {
    use super::TransactionState::{self, *};

    #[test]
    fn codes_and_names_round_trip_and_are_kafkas() {
        let codes: Vec<i8> = TransactionState::ALL.iter().map(|s| s.code()).collect();
        assert_eq!(codes, (0..8).collect::<Vec<i8>>());
        for s in TransactionState::ALL {
            assert_eq!(TransactionState::from_code(s.code()), Some(s));
            assert_eq!(TransactionState::from_name(s.name()), Some(s));
        }
        assert_eq!(TransactionState::from_code(8), None);
        assert_eq!(TransactionState::from_code(-1), None);
        assert_eq!(TransactionState::from_name("ongoing"), None);
    }

    #[test]
    fn a_transaction_commits_or_aborts_only_through_its_prepare_state() {
        assert!(PrepareCommit.can_follow(Ongoing));
        assert!(CompleteCommit.can_follow(PrepareCommit));
        assert!(!CompleteCommit.can_follow(Ongoing));
        assert!(!CompleteCommit.can_follow(PrepareAbort));
        assert!(!CompleteAbort.can_follow(PrepareCommit));
        assert!(PrepareAbort.can_follow(PrepareEpochFence));
        assert!(!PrepareCommit.can_follow(PrepareEpochFence));
        assert!(!PrepareCommit.can_follow(Empty));
    }

    #[test]
    fn only_an_idle_id_starts_a_transaction_or_expires() {
        for s in TransactionState::ALL {
            assert_eq!(Ongoing.can_follow(s), s.is_idle() || s == Ongoing, "{s:?}");
            assert_eq!(Dead.can_follow(s), s.is_idle(), "{s:?}");
            assert!(!(s.is_idle() && s.is_preparing()), "{s:?}");
        }
    }
}
