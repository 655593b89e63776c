//! Admin operations on the data topic while the faults run (`--admin`): partition
//! reassignments (to two or three of the nodes, so the replication factor changes too and, on
//! five nodes, replicas move to nodes that never held them) and preferred leader elections,
//! sent as `gregor reassign` and `gregor elect` send them, through any node. After the faults,
//! every partition must end on the replicas of its last accepted reassignment, all of them in
//! sync, within a bound.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use gregor_client::admin::reassign::{
    alter_partition_reassignments_request, elect_leaders_request,
    parse_alter_partition_reassignments, parse_elect_leaders, ElectionType,
};
use gregor_client::types::TopicPartition;
use gregor_meta::SplitMix64;
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{MetadataRequest, TopicName};
use kafka_protocol::protocol::StrBytes;

use crate::data::{sleep_ms, Links};
use crate::history::{History, PARTITIONS, TOPIC};
use crate::node::now_ms;

/// After the faults, reassignments must have completed (replicas as asked, all in sync) within
/// this much simulated time.
pub const REASSIGNMENT_BOUND_MS: u64 = 20_000;

/// The replica sets a partition may end on (absent: no reassignment of it accepted, so any).
type Candidates = BTreeMap<i32, Vec<Vec<i32>>>;

/// How long after it was sent a reassignment whose outcome is unknown may still be applied:
/// the node it went through forwards it for at most its `timeout_ms` (3 s), and an attempt
/// already with a controller that lost its leadership may still commit once a new leader
/// takes over (a margin of 5 s). It was 33 s while brokers forwarded for 30 s whatever the
/// request's timeout (see the crate README).
const UNKNOWN_OUTCOME_WINDOW_MS: u64 = 8_000;

/// A reassignment sent: accepted, or with an unknown outcome (refusals are not kept).
struct Sent {
    at_ms: u64,
    replicas: Vec<i32>,
    accepted: bool,
}

/// The replica sets each partition may end on: its last accepted reassignment, and every
/// reassignment with an unknown outcome that could still have been applied after that one.
fn candidates(sent: &BTreeMap<i32, Vec<Sent>>) -> Candidates {
    sent.iter()
        .filter_map(|(&p, ops)| {
            let last = ops.iter().rev().find(|o| o.accepted)?;
            let mut c = vec![last.replicas.clone()];
            c.extend(
                ops.iter()
                    .filter(|o| !o.accepted && o.at_ms + UNKNOWN_OUTCOME_WINDOW_MS >= last.at_ms)
                    .map(|o| o.replicas.clone()),
            );
            Some((p, c))
        })
        .collect()
}

/// A random target: two or three distinct nodes in a random order.
fn target(rng: &mut SplitMix64, nodes: usize) -> Vec<i32> {
    let mut all: Vec<i32> = (0..nodes as i32).collect();
    for i in (1..all.len()).rev() {
        let j = rng.next_below(i + 1);
        all.swap(i, j);
    }
    all.truncate(2 + rng.next_below(2));
    all
}

pub async fn run(history: Rc<RefCell<History>>, nodes: usize, seed: u64) {
    let mut rng = SplitMix64::new(seed ^ 0xad31_0b5e);
    let mut links = Links::new(nodes, "sim-admin-ops");
    let mut sent: BTreeMap<i32, Vec<Sent>> = BTreeMap::new();
    while !history.borrow().faults_over {
        sleep_ms(300 + rng.next_below(1_200) as u64).await;
        let node = rng.next_below(nodes);
        if rng.next_below(4) == 0 {
            elect_preferred(&history, &mut links, node).await;
            continue;
        }
        let partition = rng.next_below(PARTITIONS as usize) as i32;
        let replicas = target(&mut rng, nodes);
        let tp = TopicPartition::new(TOPIC, partition);
        let req = alter_partition_reassignments_request(
            &BTreeMap::from([(tp.clone(), Some(replicas.clone()))]),
            3_000,
        );
        let Some(c) = links.conn(node).await else {
            history.borrow_mut().event(format!(
                "admin reassign {TOPIC}-{partition} to {replicas:?}: cannot connect to n{node}"
            ));
            continue;
        };
        let at_ms = now_ms() as u64;
        let answer = c.send(&req, 0).await.map_err(|e| e.to_string());
        let outcome = match answer {
            Ok(resp) => match parse_alter_partition_reassignments(resp) {
                Ok(results) => match results.into_iter().find(|(t, _)| *t == tp) {
                    Some((_, Ok(()))) => {
                        sent.entry(partition).or_default().push(Sent {
                            at_ms,
                            replicas: replicas.clone(),
                            accepted: true,
                        });
                        "accepted".to_string()
                    }
                    Some((_, Err(e))) => refused(&mut sent, partition, at_ms, &replicas, &e),
                    None => "no result for the partition".to_string(),
                },
                Err(e) => refused(&mut sent, partition, at_ms, &replicas, &e),
            },
            Err(e) => {
                // Unknown outcome: it may have been applied.
                links.drop_conn(node);
                may_have_applied(&mut sent, partition, at_ms, &replicas);
                format!("answer lost: {e}")
            }
        };
        history.borrow_mut().event(format!(
            "admin reassign {TOPIC}-{partition} to {replicas:?} via n{node}: {outcome}"
        ));
    }
    check_completed(&history, &mut links, nodes, &candidates(&sent)).await;
}

/// A refusal. REQUEST_TIMED_OUT says the change may still take effect, and NOT_CONTROLLER
/// comes back too when the controller lost its leadership (or its disk) after handing the
/// change's records to Raft, which may still commit them (as in Kafka): either makes the target
/// a candidate, as a lost answer does.
fn refused(
    sent: &mut BTreeMap<i32, Vec<Sent>>,
    partition: i32,
    at_ms: u64,
    replicas: &[i32],
    e: &gregor_client::error::KafkaError,
) -> String {
    use gregor_client::error::KafkaCode;
    if matches!(
        e.code,
        KafkaCode::REQUEST_TIMED_OUT | KafkaCode::NOT_CONTROLLER
    ) {
        may_have_applied(sent, partition, at_ms, replicas);
    }
    format!("refused: {e}")
}

/// A reassignment whose outcome is unknown.
fn may_have_applied(
    sent: &mut BTreeMap<i32, Vec<Sent>>,
    partition: i32,
    at_ms: u64,
    replicas: &[i32],
) {
    sent.entry(partition).or_default().push(Sent {
        at_ms,
        replicas: replicas.to_vec(),
        accepted: false,
    });
}

async fn elect_preferred(history: &Rc<RefCell<History>>, links: &mut Links, node: usize) {
    let partitions: Vec<TopicPartition> = (0..PARTITIONS)
        .map(|p| TopicPartition::new(TOPIC, p))
        .collect();
    let req = elect_leaders_request(ElectionType::Preferred, Some(&partitions), 3_000, 1)
        .expect("a preferred election encodes at v1");
    let answer = match links.conn(node).await {
        Some(c) => c.send(&req, 1).await.map_err(|e| e.to_string()),
        None => Err("cannot connect".into()),
    };
    let outcome = match answer {
        Ok(resp) => match parse_elect_leaders(resp) {
            Ok(results) => results
                .into_iter()
                .map(|(tp, r)| match r {
                    Ok(()) => format!("p{} elected", tp.partition),
                    Err(e) => format!("p{} {}", tp.partition, e.code.name()),
                })
                .collect::<Vec<_>>()
                .join(", "),
            Err(e) => format!("refused: {e}"),
        },
        Err(e) => {
            links.drop_conn(node);
            format!("answer lost: {e}")
        }
    };
    history
        .borrow_mut()
        .event(format!("admin preferred election via n{node}: {outcome}"));
}

/// Replicas and ISR of each partition as `node` reports them.
async fn replicas_on(
    links: &mut Links,
    node: usize,
) -> Option<BTreeMap<i32, (Vec<i32>, Vec<i32>)>> {
    let mut req = MetadataRequest::default();
    let mut t = MetadataRequestTopic::default();
    t.name = Some(TopicName(StrBytes::from_static_str(TOPIC)));
    req.topics = Some(vec![t]);
    let c = links.conn(node).await?;
    let Ok(resp) = c.send(&req, 9).await else {
        links.drop_conn(node);
        return None;
    };
    let topic = resp.topics.into_iter().next()?;
    Some(
        topic
            .partitions
            .into_iter()
            .map(|p| {
                let ids = |v: Vec<kafka_protocol::messages::BrokerId>| {
                    v.into_iter().map(|b| b.0).collect::<Vec<i32>>()
                };
                (p.partition_index, (ids(p.replica_nodes), ids(p.isr_nodes)))
            })
            .collect(),
    )
}

/// After the faults: every partition reaches one of its candidate replica sets with all of them
/// in sync, as every node's metadata reports it, within the bound.
async fn check_completed(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    nodes: usize,
    candidates: &Candidates,
) {
    let start = now_ms() as u64;
    let last = loop {
        let mut all_done = true;
        let mut seen = Vec::new();
        for node in 0..nodes {
            let Some(parts) = replicas_on(links, node).await else {
                all_done = false;
                seen.push(format!("n{node}: no answer"));
                continue;
            };
            for (p, (replicas, isr)) in &parts {
                let wanted = candidates.get(p).is_none_or(|c| c.contains(replicas));
                let mut in_sync = isr.clone();
                in_sync.sort_unstable();
                let mut all = replicas.clone();
                all.sort_unstable();
                if !wanted || in_sync != all {
                    all_done = false;
                }
                seen.push(format!("n{node} p{p} replicas {replicas:?} isr {isr:?}"));
            }
        }
        if all_done {
            history
                .borrow_mut()
                .event("admin: every reassignment complete, every replica in sync");
            return;
        }
        if now_ms() as u64 > start + REASSIGNMENT_BOUND_MS {
            break seen.join("; ");
        }
        sleep_ms(200).await;
    };
    let detail = format!(
        "reassignments not complete {REASSIGNMENT_BOUND_MS} ms after the faults: wanted {candidates:?}, saw {last}"
    );
    let mut h = history.borrow_mut();
    h.event(format!("admin: {detail}"));
    h.data.reassignment_stuck = Some(detail);
}
