//! ACL administration while the faults run (`--acls`, replicated runs): an admin client creates
//! ACL bindings (each one new) and deletes some of them by an exact filter, through any node,
//! as `gregor acls` and Kafka's admin client send CreateAcls and DeleteAcls.
//!
//! A node that acknowledges a change must enforce it from then on: right after each
//! acknowledged creation or deletion, the binding's user asks the node that answered for the
//! metadata of the binding's topic (allowed or refused by its authorizer), then the node is
//! asked to describe the ACLs; both must show the change.
//!
//! After the faults, within a bound, every node's DescribeAcls must list the same bindings,
//! and that set must be what the answers said: a binding whose creation was acknowledged is
//! there unless a deletion of it was sent, one whose deletion was acknowledged (after an
//! acknowledged creation) is gone, and nothing is there that nobody asked for.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::rc::Rc;

use gregor_meta::acl::{AclOperation, AclPermissionType, AclResourceType, PatternType};
use gregor_meta::SplitMix64;
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest, MetadataRequest, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::broker_node::ACL_USERS;
use crate::data::{sleep_ms, Links};
use crate::history::History;
use crate::node::now_ms;
use crate::property::{Property, Violation};
use crate::side_view::send;

/// After the faults, every node must describe the same, acknowledged ACLs within this much
/// simulated time.
pub const ACLS_BOUND_MS: u64 = 20_000;

/// The version of the three ACL APIs the client sends.
const VERSION: i16 = 2;

/// What an answer says about a request's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    /// The answer was lost, or retriable: it may still take effect.
    Unknown,
    Refused,
}

fn outcome_of_code(code: i16) -> Outcome {
    match ResponseError::try_from_code(code) {
        None => Outcome::Applied,
        Some(ResponseError::NotController | ResponseError::RequestTimedOut) => Outcome::Unknown,
        Some(_) => Outcome::Refused,
    }
}

/// One binding, as (topic name, principal, operation code): the rest is fixed (LITERAL topic
/// pattern, host `*`, ALLOW).
type Binding = (String, String, i8);

/// What the answers say of one binding.
#[derive(Debug, Clone, Copy)]
struct Asked {
    created: Outcome,
    deleted: Option<Outcome>,
}

impl Asked {
    fn must_exist(&self) -> bool {
        self.created == Outcome::Applied && self.deleted.is_none_or(|d| d == Outcome::Refused)
    }

    fn must_be_gone(&self) -> bool {
        self.created == Outcome::Applied && self.deleted == Some(Outcome::Applied)
    }
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub async fn run(history: Rc<RefCell<History>>, nodes: usize, seed: u64) {
    let mut rng = SplitMix64::new(seed ^ 0xac15_ac15_ac15_ac15);
    let mut links = Links::new(nodes, "sim-acls");
    let mut users: Vec<Links> = (0..ACL_USERS)
        .map(|u| Links::as_user(nodes, "sim-acls-user", u))
        .collect();
    let mut asked: BTreeMap<Binding, Asked> = BTreeMap::new();
    let mut next = 0usize;
    while !history.borrow().faults_over {
        sleep_ms(200 + rng.next_below(1_000) as u64).await;
        let node = rng.next_below(nodes);
        let deletable: Vec<Binding> = asked
            .iter()
            .filter(|(_, a)| a.created != Outcome::Refused && a.deleted.is_none())
            .map(|(b, _)| b.clone())
            .collect();
        if !deletable.is_empty() && rng.next_below(3) == 0 {
            let b = deletable[rng.next_below(deletable.len())].clone();
            let o = delete(&history, &mut links, node, &b).await;
            if o == Outcome::Applied {
                check_acknowledging_node(&history, &mut links, &mut users, node, &b, false).await;
            }
            if let Some(a) = asked.get_mut(&b) {
                a.deleted = Some(o);
            }
        } else {
            let op = [AclOperation::Read, AclOperation::Write][rng.next_below(2)].code();
            let b = (
                format!("acl-{next}"),
                format!("User:u{}", next % ACL_USERS as usize),
                op,
            );
            next += 1;
            let created = create(&history, &mut links, node, &b).await;
            if created == Outcome::Applied {
                check_acknowledging_node(&history, &mut links, &mut users, node, &b, true).await;
            }
            asked.insert(
                b,
                Asked {
                    created,
                    deleted: None,
                },
            );
        }
    }
    settle(&history, &mut links, nodes, &asked).await;
}

async fn create(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    node: usize,
    b: &Binding,
) -> Outcome {
    let creation = AclCreation::default()
        .with_resource_type(AclResourceType::Topic.code())
        .with_resource_name(s(&b.0))
        .with_resource_pattern_type(PatternType::Literal.code())
        .with_principal(s(&b.1))
        .with_host(s("*"))
        .with_operation(b.2)
        .with_permission_type(AclPermissionType::Allow.code());
    let req = CreateAclsRequest::default().with_creations(vec![creation]);
    let answer = send(links, node, &req, VERSION).await;
    let (outcome, what) = match &answer {
        Ok(r) => match r.results.first() {
            Some(res) => (
                outcome_of_code(res.error_code),
                format!("code {}", res.error_code),
            ),
            None => (Outcome::Unknown, "no result".to_string()),
        },
        Err(e) => (Outcome::Unknown, format!("answer lost: {e}")),
    };
    history
        .borrow_mut()
        .event(format!("acls create {b:?} via n{node}: {what}"));
    outcome
}

async fn delete(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    node: usize,
    b: &Binding,
) -> Outcome {
    let filter = DeleteAclsFilter::default()
        .with_resource_type_filter(AclResourceType::Topic.code())
        .with_resource_name_filter(Some(s(&b.0)))
        .with_pattern_type_filter(PatternType::Literal.code())
        .with_principal_filter(Some(s(&b.1)))
        .with_host_filter(Some(s("*")))
        .with_operation(b.2)
        .with_permission_type(AclPermissionType::Allow.code());
    let req = DeleteAclsRequest::default().with_filters(vec![filter]);
    let answer = send(links, node, &req, VERSION).await;
    let (outcome, what) = match &answer {
        Ok(r) => match r.filter_results.first() {
            // A deletion that matched nothing changed nothing: the binding was not in the image
            // that answered (a creation not applied yet, or a deposed controller's stale
            // view), so it says nothing of the binding.
            Some(res) if res.error_code == 0 && res.matching_acls.is_empty() => {
                (Outcome::Unknown, "code 0, nothing matched".to_string())
            }
            Some(res) => (
                outcome_of_code(res.error_code),
                format!(
                    "code {}, {} matched",
                    res.error_code,
                    res.matching_acls.len()
                ),
            ),
            None => (Outcome::Unknown, "no result".to_string()),
        },
        Err(e) => (Outcome::Unknown, format!("answer lost: {e}")),
    };
    history
        .borrow_mut()
        .event(format!("acls delete {b:?} via n{node}: {what}"));
    outcome
}

/// Right after `node` acknowledged creating (`present`) or deleting `b`, it must enforce the
/// change: the binding's user asks it for the binding's topic's metadata (its authorizer reads
/// the image), then its DescribeAcls must show the change (no answer proves nothing). Only this
/// client changes ACLs, each binding is created once and deleted at most once, and its topic
/// has no other binding, so nothing else can have changed the answer since.
async fn check_acknowledging_node(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    users: &mut [Links],
    node: usize,
    b: &Binding,
    present: bool,
) {
    let change = if present { "creation" } else { "deletion" };
    let user = user_of(b).and_then(|u| users.get_mut(u));
    let allowed = match user {
        Some(u) => authorized(u, node, &b.0).await,
        None => None,
    };
    let seen = allowed.map_or("no answer", |a| if a { "allowed" } else { "refused" });
    history.borrow_mut().event(format!(
        "acls n{node}: {}'s Metadata of {}: {seen}",
        b.1, b.0
    ));
    if let Some(allowed) = allowed {
        if allowed != present {
            history.borrow_mut().data.acl_violations.push(Violation::new(
                Property::WrongAnswer,
                format!("n{node} acknowledged the {change} of {b:?} but then enforced the ACLs from before it ({seen} {}'s Metadata of {})", b.1, b.0),
            ));
        }
    }
    let Some(view) = described(links, node).await else {
        return;
    };
    if view.contains(b) != present {
        history.borrow_mut().data.acl_violations.push(Violation::new(
            Property::WrongAnswer,
            format!("n{node} acknowledged the {change} of {b:?} but then described the ACLs from before it"),
        ));
    }
}

/// The user index of a binding's principal (`User:u<i>`).
fn user_of(b: &Binding) -> Option<usize> {
    b.1.strip_prefix("User:u")?.parse().ok()
}

/// Whether `node` lets the user of `links` see `topic` (READ or WRITE imply DESCRIBE): a topic
/// that does not exist answers UNKNOWN_TOPIC_OR_PARTITION when allowed and
/// TOPIC_AUTHORIZATION_FAILED when not. `None`: no answer, or another one.
async fn authorized(links: &mut Links, node: usize, topic: &str) -> Option<bool> {
    let mut req = MetadataRequest::default();
    req.topics = Some(vec![
        MetadataRequestTopic::default().with_name(Some(TopicName(s(topic))))
    ]);
    req.allow_auto_topic_creation = false;
    let resp = send(links, node, &req, 9).await.ok()?;
    let code = resp.topics.first()?.error_code;
    match ResponseError::try_from_code(code) {
        Some(ResponseError::UnknownTopicOrPartition) => Some(true),
        Some(ResponseError::TopicAuthorizationFailed) => Some(false),
        _ => None,
    }
}

/// Every binding one node describes, or `None` without an answer.
async fn described(links: &mut Links, node: usize) -> Option<BTreeSet<Binding>> {
    let req = DescribeAclsRequest::default()
        .with_resource_type_filter(AclResourceType::Any.code())
        .with_resource_name_filter(None)
        .with_pattern_type_filter(PatternType::Any.code())
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_operation(AclOperation::Any.code())
        .with_permission_type(AclPermissionType::Any.code());
    let resp = send(links, node, &req, VERSION).await.ok()?;
    if resp.error_code != 0 {
        return None;
    }
    Some(
        resp.resources
            .iter()
            .flat_map(|r| {
                r.acls.iter().map(|a| {
                    (
                        r.resource_name.to_string(),
                        a.principal.to_string(),
                        a.operation,
                    )
                })
            })
            .collect(),
    )
}

/// What is wrong with the set the nodes agree on, against the answers.
fn lost(agreed: &BTreeSet<Binding>, asked: &BTreeMap<Binding, Asked>) -> Vec<String> {
    let mut out = Vec::new();
    for (b, a) in asked {
        match agreed.contains(b) {
            false if a.must_exist() => out.push(format!("{b:?} is gone: {a:?}")),
            true if a.must_be_gone() => out.push(format!("{b:?} is back: {a:?}")),
            _ => {}
        }
    }
    if let Some(b) = agreed.iter().find(|b| !asked.contains_key(*b)) {
        out.push(format!("{b:?} exists; nobody created it"));
    }
    out
}

/// After the faults: every node describes the same ACLs, as acknowledged, within the bound.
async fn settle(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    nodes: usize,
    asked: &BTreeMap<Binding, Asked>,
) {
    let start = now_ms() as u64;
    loop {
        let mut views = Vec::new();
        let mut problems = Vec::new();
        for node in 0..nodes {
            match described(links, node).await {
                Some(v) => views.push(v),
                None => problems.push(format!("n{node}: no DescribeAcls answer")),
            }
        }
        if views.iter().any(|v| Some(v) != views.first()) {
            problems.push("nodes describe different ACLs".to_string());
        }
        let lost = views.first().map(|v| lost(v, asked)).unwrap_or_default();
        if problems.is_empty() && lost.is_empty() {
            history.borrow_mut().event(format!(
                "acls: {} bindings agreed on every node",
                views.first().map_or(0, |v| v.len())
            ));
            return;
        }
        if now_ms() as u64 > start + ACLS_BOUND_MS {
            let mut h = history.borrow_mut();
            for l in &lost {
                h.data.acl_violations.push(Violation::new(
                    Property::AckedWriteLost,
                    format!("{ACLS_BOUND_MS} ms after the faults: {l}"),
                ));
            }
            if !problems.is_empty() {
                h.data.acl_violations.push(Violation::new(
                    Property::Liveness,
                    format!(
                        "ACLs not agreed {ACLS_BOUND_MS} ms after the faults: {}",
                        problems.join("; ")
                    ),
                ));
            }
            h.event("acls: not settled");
            return;
        }
        sleep_ms(200).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b(name: &str) -> Binding {
        (name.to_string(), "User:u0".to_string(), 3)
    }

    #[test]
    fn only_acknowledged_changes_are_required() {
        use Outcome::*;
        let asked: BTreeMap<Binding, Asked> = [
            (
                b("kept"),
                Asked {
                    created: Applied,
                    deleted: None,
                },
            ),
            (
                b("deleted"),
                Asked {
                    created: Applied,
                    deleted: Some(Applied),
                },
            ),
            (
                b("maybe"),
                Asked {
                    created: Unknown,
                    deleted: None,
                },
            ),
            (
                b("maybe-deleted"),
                Asked {
                    created: Applied,
                    deleted: Some(Unknown),
                },
            ),
            (
                b("late"),
                Asked {
                    created: Unknown,
                    deleted: Some(Applied),
                },
            ),
        ]
        .into_iter()
        .collect();
        let fine: BTreeSet<Binding> = [b("kept"), b("maybe"), b("late")].into_iter().collect();
        assert!(lost(&fine, &asked).is_empty());
        let wrong: BTreeSet<Binding> = [b("deleted"), b("stranger")].into_iter().collect();
        let found = lost(&wrong, &asked);
        assert_eq!(found.len(), 3, "{found:?}");
        assert!(found[0].contains("deleted") && found[0].contains("is back"));
        assert!(found[1].contains("kept") && found[1].contains("is gone"));
        assert!(found[2].contains("nobody created it"));
    }
}
