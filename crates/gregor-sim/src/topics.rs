//! Topic administration while the faults run (`--topic-admin`, replicated runs): an admin client
//! creates side topics (1-3 partitions, RF 2 or 3), adds partitions to them, deletes them and
//! asks for unclean leader elections of their partitions, through any node, as `gregor topics`
//! and `gregor elect --unclean` send them. Side topics carry no records while the faults run,
//! so an unclean election there loses nothing; it brings back a partition whose in-sync
//! replicas are all down.
//!
//! After the faults, within a bound: every node's metadata lists the same side topics with the
//! same partition counts, each partition led; a topic whose creation was acknowledged is there
//! unless a deletion of it may have applied, one whose deletion was acknowledged is gone, and
//! each partition count lies between the largest acknowledged one and the largest asked for;
//! and a write to every partition of every side topic is acknowledged. The driver then checks
//! that each node hosts exactly the side-topic logs its metadata gives it (`run.rs`).

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;

use gregor_client::admin::reassign::{elect_leaders_request, parse_elect_leaders, ElectionType};
use gregor_client::admin::topics::{
    create_partitions_request, create_topics_request, delete_topics_request,
    parse_create_partitions, parse_create_topics, parse_delete_topics, CreateTopicsOptions,
    NewPartitions, NewTopic,
};
use gregor_client::error::{KafkaCode, KafkaError};
use gregor_client::types::TopicPartition;
use gregor_meta::SplitMix64;

use crate::data::{sleep_ms, Links};
use crate::history::History;
use crate::node::now_ms;
use crate::property::{Property, Violation};
use crate::side_records::{self, SideLog};
use crate::side_view::{send, side_view, SideView, SIDE_PREFIX};

/// After the faults, the side topics must settle (metadata agreed, every partition led and
/// writable) within this much simulated time.
pub const TOPICS_BOUND_MS: u64 = 20_000;

/// Admin requests' `timeout_ms`.
const ADMIN_TIMEOUT_MS: i32 = 3_000;

/// What an admin request's answer says about its effect.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Outcome {
    Applied,
    /// The answer was lost, or REQUEST_TIMED_OUT / NOT_CONTROLLER: it may still take effect.
    Unknown,
    Refused,
}

fn outcome_of(result: &Result<(), KafkaError>) -> Outcome {
    match result {
        Ok(()) => Outcome::Applied,
        Err(e)
            if matches!(
                e.code,
                KafkaCode::REQUEST_TIMED_OUT | KafkaCode::NOT_CONTROLLER
            ) =>
        {
            Outcome::Unknown
        }
        Err(_) => Outcome::Refused,
    }
}

/// One side topic, as the admin client's answers describe it.
#[derive(Debug)]
struct Side {
    created: Outcome,
    initial_partitions: i32,
    /// Partition counts asked for by CreatePartitions, with their outcomes.
    grown: Vec<(i32, Outcome)>,
    deleted: Option<Outcome>,
}

impl Side {
    fn must_exist(&self) -> bool {
        self.created == Outcome::Applied && self.deleted.is_none_or(|d| d == Outcome::Refused)
    }

    fn must_be_gone(&self) -> bool {
        self.deleted == Some(Outcome::Applied)
    }

    /// The fewest partitions it may have if it exists: its acknowledged count.
    fn min_partitions(&self) -> i32 {
        let acked_growth = self
            .grown
            .iter()
            .filter(|(_, o)| *o == Outcome::Applied)
            .map(|(n, _)| *n);
        let created = (self.created == Outcome::Applied).then_some(self.initial_partitions);
        acked_growth.chain(created).max().unwrap_or(1)
    }

    /// The most it may have: the largest count asked for that may have applied.
    fn max_partitions(&self) -> i32 {
        self.grown
            .iter()
            .filter(|(_, o)| *o != Outcome::Refused)
            .map(|(n, _)| *n)
            .chain([self.initial_partitions])
            .max()
            .unwrap_or(self.initial_partitions)
    }

    /// The partition count the client believes in (the largest that may have applied).
    fn known_partitions(&self) -> i32 {
        self.max_partitions()
    }
}

/// What the admin client asks next.
enum Op {
    Create { partitions: i32, rf: i16 },
    Grow { topic: String, to: i32 },
    Delete { topic: String },
    Unclean { topic: String, partition: i32 },
}

pub async fn run(history: Rc<RefCell<History>>, nodes: usize, seed: u64) {
    let log = Rc::new(RefCell::new(SideLog::default()));
    let ((sides, mut links), ()) = tokio::join!(
        administer(history.clone(), nodes, seed, log.clone()),
        side_records::produce(history.clone(), nodes, seed, log.clone())
    );
    if let Some(view) = settle(&history, &mut links, nodes, &sides, &log).await {
        side_records::read_and_check(&history, &mut links, nodes, view, &log).await;
    }
}

/// The admin client's state while the faults run.
struct Admin {
    history: Rc<RefCell<History>>,
    links: Links,
    sides: BTreeMap<String, Side>,
    log: Rc<RefCell<SideLog>>,
    next_id: usize,
}

/// The admin client while the faults run: what its answers say of each side topic, and its
/// connections.
async fn administer(
    history: Rc<RefCell<History>>,
    nodes: usize,
    seed: u64,
    log: Rc<RefCell<SideLog>>,
) -> (BTreeMap<String, Side>, Links) {
    let mut rng = SplitMix64::new(seed ^ 0x7091_c5ad_7091_c5ad);
    let mut admin = Admin {
        history,
        links: Links::new(nodes, "sim-topic-admin"),
        sides: BTreeMap::new(),
        log,
        next_id: 0,
    };
    while !admin.history.borrow().faults_over {
        sleep_ms(300 + rng.next_below(1_200) as u64).await;
        let node = rng.next_below(nodes);
        match next_op(&mut rng, &admin.sides) {
            Op::Create { partitions, rf } => admin.create(node, partitions, rf).await,
            Op::Grow { topic, to } => admin.grow(node, topic, to).await,
            Op::Delete { topic } => admin.delete(node, topic).await,
            Op::Unclean { topic, partition } => admin.unclean(node, topic, partition).await,
        }
    }
    (admin.sides, admin.links)
}

/// What the admin client asks next, drawn from `rng`.
fn next_op(rng: &mut SplitMix64, sides: &BTreeMap<String, Side>) -> Op {
    // Topics that may still exist and have not been sent a deletion.
    let candidates: Vec<String> = sides
        .iter()
        .filter(|(_, s)| s.created != Outcome::Refused && s.deleted.is_none())
        .map(|(n, _)| n.clone())
        .collect();
    let pick = |rng: &mut SplitMix64| candidates[rng.next_below(candidates.len())].clone();
    match rng.next_below(8) {
        3 | 4 if !candidates.is_empty() => {
            let topic = pick(rng);
            let to = sides[&topic].known_partitions() + 1 + rng.next_below(2) as i32;
            Op::Grow { topic, to }
        }
        5 if !candidates.is_empty() => Op::Delete { topic: pick(rng) },
        6 | 7 if !candidates.is_empty() => {
            let topic = pick(rng);
            let partition = rng.next_below(sides[&topic].known_partitions() as usize) as i32;
            Op::Unclean { topic, partition }
        }
        _ => Op::Create {
            partitions: 1 + rng.next_below(3) as i32,
            rf: 2 + rng.next_below(2) as i16,
        },
    }
}

impl Admin {
    /// Creates a side topic with a new name.
    async fn create(&mut self, node: usize, partitions: i32, rf: i16) {
        let name = format!("{SIDE_PREFIX}{}", self.next_id);
        self.next_id += 1;
        let req = create_topics_request(
            &[NewTopic {
                name: name.clone(),
                num_partitions: Some(partitions),
                replication_factor: Some(rf),
                ..NewTopic::default()
            }],
            CreateTopicsOptions {
                validate_only: false,
                timeout_ms: ADMIN_TIMEOUT_MS,
            },
            5,
        )
        .expect("a CreateTopics with counts encodes at v5");
        let answer = send(&mut self.links, node, &req, 5).await;
        let result = answer.and_then(|r| {
            parse_create_topics(r)
                .into_iter()
                .find(|(n, _)| *n == name)
                .map(|(_, r)| r.map(|_| ()))
                .ok_or_else(|| "no result for the topic".to_string())
        });
        let created = match &result {
            // Each name is asked for once; "already exists" means a forwarding
            // attempt that the controller applied answered after another one.
            Err(_) => Outcome::Unknown,
            Ok(Err(e)) if e.code == KafkaCode::TOPIC_ALREADY_EXISTS => Outcome::Applied,
            Ok(r) => outcome_of(r),
        };
        self.history.borrow_mut().event(format!(
            "admin create {name} ({partitions} partitions, RF {rf}) via n{node}: {}",
            describe(&result)
        ));
        self.sides.insert(
            name,
            Side {
                created,
                initial_partitions: partitions,
                grown: Vec::new(),
                deleted: None,
            },
        );
    }

    /// Adds partitions to a side topic.
    async fn grow(&mut self, node: usize, topic: String, to: i32) {
        let req = create_partitions_request(
            &[NewPartitions {
                topic: topic.clone(),
                total_count: to,
                assignments: None,
            }],
            false,
            ADMIN_TIMEOUT_MS,
        );
        let result = send(&mut self.links, node, &req, 2)
            .await
            .and_then(|r| first_result(parse_create_partitions(r), &topic));
        self.history.borrow_mut().event(format!(
            "admin add partitions to {topic} (to {to}) via n{node}: {}",
            describe(&result)
        ));
        // "Already has that many": an earlier attempt of this request, sent again to a
        // new controller, may have applied it.
        let o = outcome_unless(&result, KafkaCode::INVALID_PARTITIONS);
        if let Some(s) = self.sides.get_mut(&topic) {
            s.grown.push((to, o));
        }
    }

    /// Deletes a side topic.
    async fn delete(&mut self, node: usize, topic: String) {
        let req = delete_topics_request(std::slice::from_ref(&topic), ADMIN_TIMEOUT_MS, 4);
        let result = send(&mut self.links, node, &req, 4)
            .await
            .and_then(|r| first_result(parse_delete_topics(r), &topic));
        self.history.borrow_mut().event(format!(
            "admin delete {topic} via n{node}: {}",
            describe(&result)
        ));
        // Either a creation whose outcome was unknown did not apply, or an earlier
        // attempt of this very request did: a broker that forwards it sends it again
        // to a new controller after the old one fails (as Kafka's do).
        let o = outcome_unless(&result, KafkaCode::UNKNOWN_TOPIC_OR_PARTITION);
        if let Some(s) = self.sides.get_mut(&topic) {
            s.deleted = Some(o);
        }
    }

    /// Asks for an unclean election of a side topic's partition.
    async fn unclean(&mut self, node: usize, topic: String, partition: i32) {
        // A partition without a leader (every in-sync replica down) if the node knows
        // one: that is where an unclean election does something.
        let leaderless = side_view(&mut self.links, node).await.and_then(|v| {
            v.into_iter().find_map(|(t, leaders)| {
                let p = leaders.iter().position(|&l| l < 0)?;
                Some((t, p as i32))
            })
        });
        let (topic, partition) = leaderless.unwrap_or((topic, partition));
        self.log.borrow_mut().unclean_asked(&topic, partition);
        let tp = TopicPartition::new(topic.clone(), partition);
        let req = elect_leaders_request(
            ElectionType::Unclean,
            Some(std::slice::from_ref(&tp)),
            ADMIN_TIMEOUT_MS,
            1,
        )
        .expect("an unclean election encodes at v1");
        let answer = send(&mut self.links, node, &req, 1).await;
        let what = match answer.map(parse_elect_leaders) {
            Ok(Ok(results)) => results
                .into_iter()
                .map(|(_, r)| match r {
                    Ok(()) => "elected".to_string(),
                    Err(e) => e.code.name().to_string(),
                })
                .collect::<Vec<_>>()
                .join(", "),
            Ok(Err(e)) => format!("refused: {e}"),
            Err(e) => format!("answer lost: {e}"),
        };
        self.history.borrow_mut().event(format!(
            "admin unclean election of {topic}-{partition} via n{node}: {what}"
        ));
    }
}

/// The outcome of an answered (or lost) request, where `retried` is the refusal a second
/// forwarding attempt of an already applied request gets: unknown.
fn outcome_unless(result: &Result<Result<(), KafkaError>, String>, retried: KafkaCode) -> Outcome {
    match result {
        Err(_) => Outcome::Unknown,
        Ok(Err(e)) if e.code == retried => Outcome::Unknown,
        Ok(r) => outcome_of(r),
    }
}

fn first_result(
    results: Vec<(String, Result<(), KafkaError>)>,
    topic: &str,
) -> Result<Result<(), KafkaError>, String> {
    results
        .into_iter()
        .find(|(n, _)| n == topic)
        .map(|(_, r)| r)
        .ok_or_else(|| "no result for the topic".to_string())
}

fn describe(result: &Result<Result<(), KafkaError>, String>) -> String {
    match result {
        Ok(Ok(())) => "done".into(),
        Ok(Err(e)) => format!("refused: {}", e.code.name()),
        Err(e) => format!("answer lost: {e}"),
    }
}

/// After the faults: metadata agreed and as acknowledged, every partition led and writable.
/// The side topics as every node then lists them, or `None` if they did not settle (reported).
async fn settle(
    history: &Rc<RefCell<History>>,
    links: &mut Links,
    nodes: usize,
    sides: &BTreeMap<String, Side>,
    log: &Rc<RefCell<SideLog>>,
) -> Option<SideView> {
    let start = now_ms() as u64;
    let mut written: std::collections::BTreeSet<(String, i32)> = Default::default();
    loop {
        let mut problems = Vec::new();
        let mut views = Vec::new();
        for node in 0..nodes {
            match side_view(links, node).await {
                Some(v) => views.push(v),
                None => problems.push(format!("n{node}: no metadata answer")),
            }
        }
        let mut lost = Vec::new();
        if let Some(first) = views.first() {
            if views.iter().any(|v| v != first) {
                problems.push(format!("nodes disagree: {views:?}"));
            }
            for (name, s) in sides {
                match first.get(name) {
                    None if s.must_exist() => lost.push(format!("{name} is gone: {s:?}")),
                    Some(_) if s.must_be_gone() => lost.push(format!("{name} is back: {s:?}")),
                    Some(leaders) => {
                        let n = leaders.len() as i32;
                        if n < s.min_partitions() || n > s.max_partitions() {
                            lost.push(format!("{name} has {n} partitions: {s:?}"));
                        }
                        if leaders.iter().any(|&l| l < 0) {
                            problems.push(format!("{name} has a partition without a leader"));
                        }
                    }
                    None => {}
                }
            }
            if let Some(unknown) = first.keys().find(|n| !sides.contains_key(*n)) {
                lost.push(format!("{unknown} exists; nobody created it"));
            }
            if problems.is_empty() && lost.is_empty() {
                for (name, leaders) in first {
                    for (p, &leader) in leaders.iter().enumerate() {
                        let key = (name.clone(), p as i32);
                        if written.contains(&key) {
                            continue;
                        }
                        let values = side_records::settled_write(log, name, p as i32);
                        match side_records::write(links, leader as usize, name, p as i32, &values)
                            .await
                        {
                            Ok(base) => {
                                side_records::settled_ack(log, name, p as i32, base, values);
                                written.insert(key);
                            }
                            Err(e) => problems.push(format!("write to {name}-{p}: {e}")),
                        }
                    }
                }
            }
        }
        if problems.is_empty() && lost.is_empty() {
            history.borrow_mut().event(format!(
                "topic admin: {} side topics agreed, every partition written",
                views.first().map_or(0, |v| v.len())
            ));
            return views.into_iter().next();
        }
        if now_ms() as u64 > start + TOPICS_BOUND_MS {
            let mut h = history.borrow_mut();
            for l in &lost {
                h.data.topic_violations.push(Violation::new(
                    Property::AckedWriteLost,
                    format!("{TOPICS_BOUND_MS} ms after the faults: {l}"),
                ));
            }
            if !problems.is_empty() {
                h.data.topic_violations.push(Violation::new(
                    Property::Liveness,
                    format!(
                        "side topics not settled {TOPICS_BOUND_MS} ms after the faults: {}",
                        problems.join("; ")
                    ),
                ));
            }
            h.event("topic admin: not settled");
            return None;
        }
        sleep_ms(200).await;
    }
}
