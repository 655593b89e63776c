//! How much coordinator CPU a KIP-848 group costs: `members` members join one group
//! subscribed to `topics` topics of `partitions` partitions each, one at a time, then every
//! member heartbeats in rounds (reporting what it owns, as a client that revokes at once does)
//! until the group is Stable with every partition owned. Every append completes at once, so
//! the figures are the coordinator's own work: the state machine, the assignor and the records
//! it writes. A baseline group a tenth the size runs first, in the same process.
//!
//! `cargo run -p gregor-group --release --example consumer_group_bench -- [members] [topics]
//! [partitions]` (default 1000 10 1000: 1,000 members over 10,000 partitions).

use std::collections::BTreeMap;
use std::time::Instant;

use gregor_group::api::*;
use gregor_group::consumer::model::{ConsumerGroupState, TopicMetadata};
use gregor_group::{Effect, GroupConfig, GroupCoordinator};

/// The calling thread's CPU time in ms (the coordinator runs on it).
fn thread_cpu_ms() -> f64 {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec that outlives the call; clock_gettime only
    // writes it. A failure reports 0, not a bogus figure.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return 0.0;
    }
    ts.tv_sec as f64 * 1000.0 + ts.tv_nsec as f64 / 1e6
}

struct Run {
    heartbeats: u64,
    rounds: u32,
    records: u64,
    wall_ms: f64,
    cpu_ms: f64,
    max_cpu_ms: f64,
    /// CPU of the joins alone (each computes a new target assignment).
    join_cpu_ms: f64,
}

struct Bench {
    c: GroupCoordinator,
    next_id: u64,
    /// What each member owns, as its last answer gave it.
    owned: BTreeMap<String, (i32, Assignment)>,
    run: Run,
}

impl Bench {
    fn heartbeat(&mut self, member: &str, join: bool, topics: &[String]) {
        let (epoch, owned) = self.owned.get(member).cloned().unwrap_or_default();
        let req = ConsumerGroupHeartbeatRequest {
            group_id: "bench".into(),
            member_id: member.into(),
            member_epoch: if join { 0 } else { epoch },
            rebalance_timeout_ms: if join { 30_000 } else { -1 },
            subscribed_topic_names: join.then(|| topics.to_vec()),
            owned: Some(owned),
            ..Default::default()
        };
        self.next_id += 1;
        let input = Input {
            request_id: self.next_id,
            context: RequestContext {
                client_id: member.into(),
                client_host: "/127.0.0.1".into(),
                api_version: 1,
            },
            request: Request::ConsumerGroupHeartbeat(req),
        };
        let cpu = thread_cpu_ms();
        let mut effects = self.c.handle(0, input);
        let mut answer = None;
        while let Some(e) = effects.pop() {
            match e {
                Effect::Append { token, records } => {
                    self.run.records += records.len() as u64;
                    effects.extend(self.c.append_completed(0, token, Ok(())));
                }
                Effect::Respond {
                    response: Response::ConsumerGroupHeartbeat(r),
                    ..
                } => answer = Some(r),
                Effect::Respond { .. } => {}
            }
        }
        let spent = thread_cpu_ms() - cpu;
        self.run.cpu_ms += spent;
        self.run.max_cpu_ms = self.run.max_cpu_ms.max(spent);
        self.run.heartbeats += 1;
        let r = answer.expect("every heartbeat is answered");
        assert_eq!(r.error_code, 0, "{member}: {r:?}");
        let entry = self.owned.entry(member.to_string()).or_default();
        entry.0 = r.member_epoch;
        if let Some(a) = r.assignment {
            entry.1 = a;
        }
    }
}

fn run(members: usize, topics: usize, partitions: i32) -> Run {
    let mut metadata = BTreeMap::new();
    let names: Vec<String> = (0..topics).map(|t| format!("topic{t}")).collect();
    for (i, name) in names.iter().enumerate() {
        let t = TopicMetadata {
            id: i as u128 + 1,
            name: name.clone(),
            partitions,
            replica_racks: Vec::new(),
        };
        metadata.insert(name.clone(), t);
    }
    let mut c = GroupCoordinator::new(GroupConfig::default(), 7);
    c.update_topics(metadata);
    let mut b = Bench {
        c,
        next_id: 0,
        owned: BTreeMap::new(),
        run: Run {
            heartbeats: 0,
            rounds: 0,
            records: 0,
            wall_ms: 0.0,
            cpu_ms: 0.0,
            max_cpu_ms: 0.0,
            join_cpu_ms: 0.0,
        },
    };
    let ids: Vec<String> = (0..members).map(|m| format!("member-{m:05}")).collect();
    let started = Instant::now();
    for id in &ids {
        b.heartbeat(id, true, &names);
    }
    b.run.join_cpu_ms = b.run.cpu_ms;
    let total = topics * partitions as usize;
    loop {
        let g = b.c.consumer_group("bench").expect("the group");
        let owned: usize = g
            .members
            .values()
            .map(|m| m.assigned.values().map(|s| s.len()).sum::<usize>())
            .sum();
        if g.state() == ConsumerGroupState::Stable && owned == total {
            break;
        }
        assert!(b.run.rounds < 50, "no convergence after 50 rounds");
        b.run.rounds += 1;
        for id in &ids {
            b.heartbeat(id, false, &names);
        }
    }
    b.run.wall_ms = started.elapsed().as_secs_f64() * 1000.0;
    b.run
}

fn report(label: &str, members: usize, partitions: usize, r: &Run) {
    println!(
        "{label}: {members} members, {partitions} partitions: Stable after {} heartbeats \
         ({} rounds after the joins), {:.0} ms wall, {:.0} ms CPU ({:.0} ms in the joins); CPU \
         per heartbeat mean {:.3} ms (joins {:.3} ms, others {:.3} ms), max {:.2} ms; {} \
         records written",
        r.heartbeats,
        r.rounds,
        r.wall_ms,
        r.cpu_ms,
        r.join_cpu_ms,
        r.cpu_ms / r.heartbeats as f64,
        r.join_cpu_ms / members as f64,
        (r.cpu_ms - r.join_cpu_ms) / (r.heartbeats as f64 - members as f64).max(1.0),
        r.max_cpu_ms,
        r.records
    );
}

fn main() {
    let arg = |i: usize, default: usize| {
        std::env::args()
            .nth(i)
            .map(|a| a.parse().expect("a number"))
            .unwrap_or(default)
    };
    let (members, topics, partitions) = (arg(1, 1000), arg(2, 10), arg(3, 1000));
    let (bm, bp) = ((members / 10).max(1), (partitions / 10).max(1));
    let base = run(bm, topics, bp as i32);
    report("baseline", bm, topics * bp, &base);
    let big = run(members, topics, partitions as i32);
    report("measured", members, topics * partitions, &big);
    let per = |r: &Run| r.cpu_ms / r.heartbeats as f64;
    println!(
        "CPU per heartbeat: {:.1}x the baseline's for {}x the members and partitions",
        per(&big) / per(&base),
        members / bm
    );
}
