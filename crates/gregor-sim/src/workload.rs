//! The workload: one client that sends seeded controller operations to whichever node leads,
//! over the controller RPC, retrying on NotController and on failures as a forwarding broker
//! does, and records every operation's outcome in the history.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
use std::time::Duration;

use gregor_meta::SplitMix64;
use gregor_quorum::rpc::{RpcClient, RpcRequest, RpcResponse};

use crate::history::{History, OpRecord};
use crate::node::{address, now_ms, SimConnector};
use crate::ops::{Answer, Op, Reply, SIM_API_KEY};

/// Time the client keeps retrying one operation before giving up on it.
const OP_DEADLINE_MS: u64 = 20_000;
const CALL_TIMEOUT: Duration = Duration::from_secs(3);
/// Brokers the workload registers (their ids; no broker process behind them).
pub const BROKERS: i32 = 3;
pub const FINAL_TOPIC: &str = "after-faults";

struct Workload {
    history: Rc<RefCell<History>>,
    rng: SplitMix64,
    clients: Vec<RpcClient<SimConnector>>,
    target: usize,
    epochs: BTreeMap<i32, i64>,
    /// Topics whose creation was acknowledged and not deleted, with their partition counts.
    live: BTreeMap<String, i32>,
    next_topic: usize,
}

pub async fn run(history: Rc<RefCell<History>>, seed: u64, nodes: usize) -> turmoil::Result {
    let mut w = Workload {
        history,
        rng: SplitMix64::new(seed ^ 0x0c11_e117),
        clients: (0..nodes)
            .map(|i| RpcClient::new(SimConnector, address(i)))
            .collect(),
        target: 0,
        epochs: BTreeMap::new(),
        live: BTreeMap::new(),
        next_topic: 0,
    };
    for b in 0..BROKERS {
        w.register(b).await;
    }
    while !w.history.borrow().faults_over {
        let op = w.next_op();
        let rec = w.execute(op).await;
        w.learn(&rec);
        let pause = w.rng.next_below(150) as u64;
        tokio::time::sleep(Duration::from_millis(pause)).await;
    }
    let start = now_ms() as u64;
    // Brokers fenced while the faults lasted (their heartbeats could not get through) come
    // back, as real brokers do, so the final write has brokers to place its replica on.
    for b in 0..BROKERS {
        w.register(b).await;
    }
    let rec = w
        .execute(Op::CreateTopic {
            name: FINAL_TOPIC.into(),
            partitions: 1,
            rf: 1,
        })
        .await;
    let acked = rec.reply.as_ref().map(|_| rec.end_ms);
    let created = matches!(rec.reply, Some(Reply::Created(Ok(_))));
    let mut h = w.history.borrow_mut();
    h.final_write = Some((start, acked));
    h.final_created = created;
    h.done = true;
    Ok(())
}

impl Workload {
    async fn register(&mut self, broker: i32) {
        let incarnation = u128::from(self.rng.next_u64());
        let rec = self
            .execute(Op::Register {
                broker,
                incarnation,
            })
            .await;
        self.learn(&rec);
        if let Some(&epoch) = self.epochs.get(&broker) {
            let rec = self.execute(Op::Heartbeat { broker, epoch }).await;
            self.learn(&rec);
        }
    }

    fn next_op(&mut self) -> Op {
        let roll = self.rng.next_below(100);
        let live: Vec<(String, i32)> = self.live.iter().map(|(k, v)| (k.clone(), *v)).collect();
        if roll < 35 || live.is_empty() {
            let name = format!("t{}", self.next_topic);
            self.next_topic += 1;
            return Op::CreateTopic {
                name,
                partitions: 1 + self.rng.next_below(4) as i32,
                rf: 1 + self.rng.next_below(BROKERS as usize) as i16,
            };
        }
        if roll < 50 {
            let (name, _) = &live[self.rng.next_below(live.len())];
            return Op::DeleteTopic { name: name.clone() };
        }
        if roll < 65 {
            let (name, count) = &live[self.rng.next_below(live.len())];
            return Op::CreatePartitions {
                name: name.clone(),
                count: count + 1 + self.rng.next_below(2) as i32,
            };
        }
        let broker = self.rng.next_below(BROKERS as usize) as i32;
        if roll < 88 {
            let epoch = self.epochs.get(&broker).copied().unwrap_or(-1);
            return Op::Heartbeat { broker, epoch };
        }
        if roll < 96 {
            return Op::Tick;
        }
        Op::Register {
            broker,
            incarnation: u128::from(self.rng.next_u64()),
        }
    }

    /// Updates what the client knows from an acknowledged answer.
    fn learn(&mut self, rec: &OpRecord) {
        match (&rec.op, &rec.reply) {
            (Op::Register { broker, .. }, Some(Reply::Registered(Ok(epoch)))) => {
                self.epochs.insert(*broker, *epoch);
            }
            (Op::CreateTopic { name, .. }, Some(Reply::Created(Ok((_, n))))) => {
                self.live.insert(name.clone(), *n);
            }
            (Op::DeleteTopic { name }, Some(_)) => {
                self.live.remove(name);
            }
            (Op::CreatePartitions { name, count }, Some(Reply::Partitions(Ok(())))) => {
                self.live.insert(name.clone(), *count);
            }
            // A delete or a resize whose outcome is unknown: stop touching the topic.
            (Op::DeleteTopic { name }, None) | (Op::CreatePartitions { name, .. }, None) => {
                self.live.remove(name);
            }
            _ => {}
        }
    }

    async fn execute(&mut self, op: Op) -> OpRecord {
        let id = self.history.borrow().ops.len();
        let start_ms = now_ms() as u64;
        self.history
            .borrow_mut()
            .event(format!("op{id} send {op:?}"));
        let body = gregor_quorum::encode(&op).expect("operations always encode");
        let request = RpcRequest::Kafka {
            api_key: SIM_API_KEY,
            api_version: 0,
            body,
        };
        let nodes = self.clients.len();
        let mut indeterminate = false;
        let mut reply = None;
        loop {
            let target = self.target;
            let outcome = self.clients[target].call(&request, CALL_TIMEOUT).await;
            let answer = match outcome {
                Ok(RpcResponse::Kafka(Ok(r))) => gregor_quorum::decode::<Answer>(&r.body)
                    .unwrap_or_else(|e| Answer::Unavailable(format!("undecodable answer: {e}"))),
                Ok(RpcResponse::Kafka(Err(e))) => Answer::Unavailable(e.to_string()),
                Ok(_) => Answer::Unavailable("unexpected response".into()),
                Err(e) => Answer::Unavailable(format!("io: {}", e.kind())),
            };
            let wait_ms = match answer {
                Answer::Done {
                    reply: r,
                    applied_index,
                } => {
                    self.history.borrow_mut().event(format!(
                        "op{id} n{target} ack {r:?} applied={applied_index}"
                    ));
                    reply = Some(r);
                    break;
                }
                Answer::NotController(Some(l)) if (l as usize) < nodes && l as usize != target => {
                    self.target = l as usize;
                    10
                }
                Answer::NotController(_) => {
                    self.target = (target + 1) % nodes;
                    100
                }
                Answer::Timeout | Answer::Unavailable(_) => {
                    self.history
                        .borrow_mut()
                        .event(format!("op{id} n{target} {answer:?}"));
                    indeterminate = true;
                    self.target = (target + 1) % nodes;
                    100
                }
            };
            if now_ms() as u64 > start_ms + OP_DEADLINE_MS {
                self.history.borrow_mut().event(format!("op{id} gave up"));
                break;
            }
            tokio::time::sleep(Duration::from_millis(wait_ms)).await;
        }
        let rec = OpRecord {
            id,
            op,
            end_ms: now_ms() as u64,
            indeterminate,
            reply,
        };
        self.history.borrow_mut().ops.push(rec.clone());
        rec
    }
}
