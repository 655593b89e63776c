//! Choosing the group's protocol (assignment strategy) as the group coordinator does.
//!
//! The candidates are the strategies every member supports. Each member votes for the first
//! strategy of its own list that is a candidate, and the strategy with the most votes wins. With
//! Kafka's default list `[range, cooperative-sticky]` on every member, every member votes `range`.
//! Kafka leaves ties to hash-map order; here a tie goes to the tied strategy that the first member
//! (in the order given, which the coordinator keeps as join order) lists first.

use crate::AssignError;

/// Selects the protocol for a group whose members list the given strategies, preferred first.
pub fn select_protocol<S: AsRef<str>>(members: &[Vec<S>]) -> Result<String, AssignError> {
    let Some(first) = members.first() else {
        return Err(AssignError::InconsistentGroupProtocol(
            "the group has no members".to_string(),
        ));
    };
    let supported_by_all =
        |name: &str| members.iter().all(|m| m.iter().any(|p| p.as_ref() == name));
    // Candidates in the first member's preference order.
    let candidates: Vec<&str> = first
        .iter()
        .map(AsRef::as_ref)
        .filter(|name| supported_by_all(name))
        .collect();
    if candidates.is_empty() {
        return Err(AssignError::InconsistentGroupProtocol(format!(
            "no assignment strategy is supported by all {} members",
            members.len()
        )));
    }
    let mut votes = vec![0usize; candidates.len()];
    for m in members {
        let vote = m
            .iter()
            .find_map(|p| candidates.iter().position(|c| *c == p.as_ref()))
            .expect("every member supports every candidate");
        votes[vote] += 1;
    }
    let max = *votes.iter().max().expect("at least one candidate");
    let winner = votes
        .iter()
        .position(|v| *v == max)
        .expect("the maximum is in the list");
    Ok(candidates[winner].to_string())
}

/// Whether a member listing `protocols` may join a group whose members list `group` (Kafka answers
/// INCONSISTENT_GROUP_PROTOCOL on join when this is false).
pub fn supports_group<S: AsRef<str>, T: AsRef<str>>(group: &[Vec<S>], protocols: &[T]) -> bool {
    group.is_empty()
        || protocols.iter().any(|p| {
            group
                .iter()
                .all(|m| m.iter().any(|q| q.as_ref() == p.as_ref()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_list_negotiates_range() {
        let members = vec![vec!["range", "cooperative-sticky"]; 3];
        assert_eq!(select_protocol(&members).as_deref(), Ok("range"));
    }

    #[test]
    fn majority_of_first_preferences_wins() {
        let members = vec![
            vec!["range", "cooperative-sticky"],
            vec!["cooperative-sticky", "range"],
            vec!["cooperative-sticky", "range"],
        ];
        assert_eq!(
            select_protocol(&members).as_deref(),
            Ok("cooperative-sticky")
        );
    }

    #[test]
    fn votes_only_count_common_strategies() {
        // The second member's first choice is not supported by the first member, so it votes for
        // its first common one.
        let members = vec![vec!["range"], vec!["sticky", "range"]];
        assert_eq!(select_protocol(&members).as_deref(), Ok("range"));
    }

    #[test]
    fn no_common_strategy_is_inconsistent() {
        let members = vec![vec!["range"], vec!["cooperative-sticky"]];
        assert!(matches!(
            select_protocol(&members),
            Err(AssignError::InconsistentGroupProtocol(_))
        ));
        assert!(!supports_group(&[vec!["range"]], &["cooperative-sticky"]));
        assert!(supports_group(&[vec!["range", "sticky"]], &["sticky"]));
    }

    #[test]
    fn tie_goes_to_first_members_preference() {
        let members = vec![vec!["sticky", "range"], vec!["range", "sticky"]];
        assert_eq!(select_protocol(&members).as_deref(), Ok("sticky"));
    }
}
