//! Client quota administration while the faults run (`--quotas`, replicated runs): an admin
//! client sets and removes `producer_byte_rate` and `consumer_byte_rate` of three users through
//! any node, as `gregor configs --entity-type users` and Kafka's admin client send
//! AlterClientQuotas.
//!
//! A node that acknowledges a change describes it right after (DescribeClientQuotas reads the
//! node's image, which its quota manager throttles by). After the faults, within a bound, every
//! node describes the same quotas, and each one is what the answers allow: the value of the
//! last acknowledged change of that quota, or of a change whose outcome is unknown (it may
//! still apply, even after a later one: a forwarding broker keeps trying for 30 s), and no
//! quota nobody set.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use gregor_meta::SplitMix64;
use kafka_protocol::messages::alter_client_quotas_request::{EntityData, EntryData, OpData};
use kafka_protocol::messages::{AlterClientQuotasRequest, DescribeClientQuotasRequest};
use kafka_protocol::protocol::StrBytes;
use kafka_protocol::ResponseError;

use crate::data::{sleep_ms, Links};
use crate::history::History;
use crate::node::now_ms;
use crate::property::{Property, Violation};
use crate::side_view::send;

/// After the faults, every node must describe the same, acknowledged quotas within this much
/// simulated time.
pub const QUOTAS_BOUND_MS: u64 = 20_000;

const VERSION: i16 = 1;

const KEYS: [&str; 2] = ["producer_byte_rate", "consumer_byte_rate"];

/// One quota: (user, key).
type Slot = (String, String);

/// What every node describes: each quota's value.
type View = BTreeMap<Slot, f64>;

/// What an answer says about a request's effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    /// The answer was lost, or retriable: it may still take effect.
    Unknown,
    Refused,
}

/// The changes sent to each quota, in order: the value set (`None`: removed) and the outcome.
type Asked = BTreeMap<Slot, Vec<(Option<f64>, Outcome)>>;

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

pub async fn run(history: Rc<RefCell<History>>, nodes: usize, seed: u64) {
    let mut rng = SplitMix64::new(seed ^ 0x9407_a5e5_9407_a5e5);
    let mut links = Links::new(nodes, "sim-quotas");
    let mut asked = Asked::new();
    let mut next = 0u64;
    while !history.borrow().faults_over {
        sleep_ms(200 + rng.next_below(1_000) as u64).await;
        let node = rng.next_below(nodes);
        let slot = (
            format!("q{}", rng.next_below(3)),
            KEYS[rng.next_below(KEYS.len())].to_string(),
        );
        // Each value is new, so a described value names the change that set it.
        let value = (rng.next_below(4) != 0).then(|| {
            next += 1;
            1_000.0 + next as f64
        });
        let outcome = alter(&history, &mut links, node, &slot, value).await;
        let earlier = asked.entry(slot.clone()).or_default();
        if outcome == Outcome::Applied {
            // Besides this value, only an earlier change whose outcome is unknown may show.
            let mut allowed: Vec<Option<f64>> = unknown_values(earlier);
            allowed.push(value);
            check_acknowledging_node(&history, &mut links, node, &slot, &allowed).await;
        }
        earlier.push((value, outcome));
    }
    settle(&history, &mut links, nodes, &asked).await;
}

fn unknown_values(changes: &[(Option<f64>, Outcome)]) -> Vec<Option<f64>> {
    changes
        .iter()
        .filter(|(_, o)| *o == Outcome::Unknown)
        .map(|(v, _)| *v)
        .collect()
}

async fn alter(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    node: usize,
    slot: &Slot,
    value: Option<f64>,
) -> Outcome {
    let entity = EntityData::default()
        .with_entity_type(s("user"))
        .with_entity_name(Some(s(&slot.0)));
    let op = OpData::default()
        .with_key(s(&slot.1))
        .with_value(value.unwrap_or(0.0))
        .with_remove(value.is_none());
    let entry = EntryData::default()
        .with_entity(vec![entity])
        .with_ops(vec![op]);
    let req = AlterClientQuotasRequest::default().with_entries(vec![entry]);
    let (outcome, what) = match send(links, node, &req, VERSION).await {
        Ok(r) => match r.entries.first() {
            Some(e) => match ResponseError::try_from_code(e.error_code) {
                None => (Outcome::Applied, "code 0".to_string()),
                Some(ResponseError::NotController | ResponseError::RequestTimedOut) => {
                    (Outcome::Unknown, format!("code {}", e.error_code))
                }
                Some(_) => (Outcome::Refused, format!("code {}", e.error_code)),
            },
            None => (Outcome::Unknown, "no result".to_string()),
        },
        Err(e) => (Outcome::Unknown, format!("answer lost: {e}")),
    };
    history.borrow_mut().event(format!(
        "quotas set {slot:?} to {value:?} via n{node}: {what}"
    ));
    outcome
}

/// Right after `node` acknowledged a change of `slot`, its DescribeClientQuotas must show one
/// of the `allowed` values (no answer proves nothing): only this client changes quotas.
async fn check_acknowledging_node(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    node: usize,
    slot: &Slot,
    allowed: &[Option<f64>],
) {
    let Some(view) = described(links, node).await else {
        return;
    };
    let seen = view.get(slot).copied();
    history
        .borrow_mut()
        .event(format!("quotas n{node} describes {slot:?} as {seen:?}"));
    if !allowed.contains(&seen) {
        history
            .borrow_mut()
            .data
            .quota_violations
            .push(Violation::new(
                Property::WrongAnswer,
                format!(
                    "n{node} acknowledged setting {slot:?} to {:?} but then described {seen:?}",
                    allowed.last().copied().flatten()
                ),
            ));
    }
}

/// Every quota one node describes, or `None` without an answer.
async fn described(links: &mut Links, node: usize) -> Option<View> {
    let req = DescribeClientQuotasRequest::default()
        .with_components(Vec::new())
        .with_strict(false);
    let resp = send(links, node, &req, VERSION).await.ok()?;
    if resp.error_code != 0 {
        return None;
    }
    let mut view = View::new();
    for e in resp.entries.unwrap_or_default() {
        let user = match e.entity.as_slice() {
            [part] if part.entity_type.as_str() == "user" => part
                .entity_name
                .as_ref()
                .map_or("<default>".to_string(), |n| n.to_string()),
            parts => format!("{parts:?}"),
        };
        for v in e.values {
            view.insert((user.clone(), v.key.to_string()), v.value);
        }
    }
    Some(view)
}

/// What is wrong with the quotas the nodes agree on, against the answers.
fn wrong(agreed: &View, asked: &Asked) -> Vec<String> {
    let mut out = Vec::new();
    for (slot, changes) in asked {
        let last_applied = changes
            .iter()
            .rev()
            .find(|(_, o)| *o == Outcome::Applied)
            .map(|(v, _)| *v);
        let mut allowed = unknown_values(changes);
        allowed.push(last_applied.flatten());
        let seen = agreed.get(slot).copied();
        if !allowed.contains(&seen) {
            out.push(format!(
                "{slot:?} is {seen:?}; the answers allow {allowed:?} ({changes:?})"
            ));
        }
    }
    if let Some(slot) = agreed.keys().find(|k| !asked.contains_key(*k)) {
        out.push(format!("{slot:?} is set; nobody set it"));
    }
    out
}

/// After the faults: every node describes the same quotas, as acknowledged, within the bound.
async fn settle(history: &Rc<RefCell<History>>, links: &mut Links, nodes: usize, asked: &Asked) {
    let start = now_ms() as u64;
    loop {
        let mut views = Vec::new();
        let mut problems = Vec::new();
        for node in 0..nodes {
            match described(links, node).await {
                Some(v) => views.push(v),
                None => problems.push(format!("n{node}: no DescribeClientQuotas answer")),
            }
        }
        if views.iter().any(|v| Some(v) != views.first()) {
            problems.push("nodes describe different quotas".to_string());
        }
        let wrong = views.first().map(|v| wrong(v, asked)).unwrap_or_default();
        if problems.is_empty() && wrong.is_empty() {
            history.borrow_mut().event(format!(
                "quotas: {} quotas agreed on every node",
                views.first().map_or(0, |v| v.len())
            ));
            return;
        }
        if now_ms() as u64 > start + QUOTAS_BOUND_MS {
            let mut h = history.borrow_mut();
            for w in &wrong {
                h.data.quota_violations.push(Violation::new(
                    Property::AckedWriteLost,
                    format!("{QUOTAS_BOUND_MS} ms after the faults: {w}"),
                ));
            }
            if !problems.is_empty() {
                h.data.quota_violations.push(Violation::new(
                    Property::Liveness,
                    format!(
                        "quotas not agreed {QUOTAS_BOUND_MS} ms after the faults: {}",
                        problems.join("; ")
                    ),
                ));
            }
            h.event("quotas: not settled");
            return;
        }
        sleep_ms(200).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn slot(user: &str) -> Slot {
        (user.to_string(), KEYS[0].to_string())
    }

    #[test]
    fn the_last_acknowledged_or_an_unknown_value_is_allowed() {
        use Outcome::*;
        let asked: Asked = [
            (
                slot("set"),
                vec![(Some(1.0), Applied), (Some(2.0), Applied)],
            ),
            (slot("removed"), vec![(Some(3.0), Applied), (None, Applied)]),
            (
                slot("maybe"),
                vec![(Some(4.0), Applied), (Some(5.0), Unknown)],
            ),
            (slot("refused"), vec![(Some(6.0), Refused)]),
        ]
        .into_iter()
        .collect();
        let fine: View = [(slot("set"), 2.0), (slot("maybe"), 5.0)]
            .into_iter()
            .collect();
        assert!(
            wrong(&fine, &asked).is_empty(),
            "{:?}",
            wrong(&fine, &asked)
        );
        let also_fine: View = [(slot("set"), 2.0), (slot("maybe"), 4.0)]
            .into_iter()
            .collect();
        assert!(wrong(&also_fine, &asked).is_empty());
        let stale: View = [
            (slot("set"), 1.0),
            (slot("maybe"), 4.0),
            (slot("removed"), 3.0),
            (slot("refused"), 6.0),
            (slot("stranger"), 7.0),
        ]
        .into_iter()
        .collect();
        let found = wrong(&stale, &asked);
        assert_eq!(found.len(), 4, "{found:?}");
        assert!(found[0].contains("refused"));
        assert!(found[1].contains("removed"));
        assert!(found[2].contains("\"set\""));
        assert!(found[3].contains("nobody set it"));
    }
}
