//! The controller operations the workload sends, as a forwarding broker would, and their
//! answers. They travel over the real controller RPC (`RpcRequest::Kafka` frames) with a body of
//! our own encoding: the simulator drives the controller's methods, not Kafka's wire format.

use gregor_meta::{
    ApiError, BrokerEndpoint, BrokerHeartbeat, BrokerRegistrationRequest, CreatableTopic,
    CreatePartitionsTopic, CreateTopicsRequest, TopicRef, Uuid,
};
use gregor_meta::{Controller, ControllerResult};
use serde::{Deserialize, Serialize};

/// The API key the simulated forwarding uses (outside Kafka's range).
pub const SIM_API_KEY: i16 = 9999;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Op {
    Register {
        broker: i32,
        incarnation: u128,
    },
    Heartbeat {
        broker: i32,
        epoch: i64,
    },
    CreateTopic {
        name: String,
        partitions: i32,
        rf: i16,
    },
    DeleteTopic {
        name: String,
    },
    CreatePartitions {
        name: String,
        count: i32,
    },
    Tick,
}

/// An operation's answer from a controller that committed it (or, for a rejected request,
/// decided it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Reply {
    Registered(Result<i64, String>),
    Heartbeat(Result<bool, String>),
    Created(Result<(u128, i32), String>),
    Deleted(Result<u128, String>),
    Partitions(Result<(), String>),
    Ticked(usize),
}

/// What a node answers to one forwarded operation.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub enum Answer {
    Done { reply: Reply, applied_index: u64 },
    NotController(Option<u64>),
    Timeout,
    Unavailable(String),
}

fn code(e: &ApiError) -> String {
    format!("{:?}", e.code)
}

impl Op {
    /// Runs the operation on the active controller.
    pub fn apply(&self, c: &mut Controller, now_ms: i64) -> ControllerResult<Reply> {
        match self {
            Op::Register {
                broker,
                incarnation,
            } => register(c, *broker, *incarnation, now_ms),
            Op::Heartbeat { broker, epoch } => {
                let hb = BrokerHeartbeat {
                    broker_id: *broker,
                    broker_epoch: *epoch,
                    want_fence: false,
                    want_shut_down: false,
                };
                let r = c.broker_heartbeat(&hb, now_ms);
                ControllerResult {
                    records: r.records,
                    response: Reply::Heartbeat(
                        r.response.map(|h| h.is_fenced).map_err(|e| code(&e)),
                    ),
                }
            }
            Op::CreateTopic {
                name,
                partitions,
                rf,
            } => create_topic(c, name, *partitions, *rf),
            Op::DeleteTopic { name } => delete_topic(c, name),
            Op::CreatePartitions { name, count } => create_partitions(c, name, *count),
            Op::Tick => {
                let records = c.tick(now_ms);
                let n = records.len();
                ControllerResult {
                    records,
                    response: Reply::Ticked(n),
                }
            }
        }
    }
}

/// A broker registration, as a registering broker sends it.
fn register(
    c: &mut Controller,
    broker: i32,
    incarnation: u128,
    now_ms: i64,
) -> ControllerResult<Reply> {
    let req = BrokerRegistrationRequest {
        broker_id: broker,
        incarnation_id: Uuid::from_u128(incarnation),
        endpoints: vec![BrokerEndpoint {
            name: "PLAINTEXT".into(),
            host: format!("b{broker}"),
            port: 9092,
            security_protocol: 0,
        }],
        rack: None,
    };
    let r = c.register_broker(&req, now_ms);
    ControllerResult {
        records: r.records,
        response: Reply::Registered(r.response.map_err(|e| code(&e))),
    }
}

fn create_topic(
    c: &mut Controller,
    name: &str,
    partitions: i32,
    rf: i16,
) -> ControllerResult<Reply> {
    let req = CreateTopicsRequest {
        topics: vec![CreatableTopic::new(name.to_string()).with_layout(partitions, rf)],
        validate_only: false,
    };
    let r = c.create_topics(&req);
    let result = r
        .response
        .into_iter()
        .next()
        .map(|t| {
            t.result
                .map(|c| (c.topic_id.as_u128(), c.num_partitions))
                .map_err(|e| code(&e))
        })
        .unwrap_or_else(|| Err("no result".into()));
    ControllerResult {
        records: r.records,
        response: Reply::Created(result),
    }
}

fn delete_topic(c: &mut Controller, name: &str) -> ControllerResult<Reply> {
    let r = c.delete_topics(&[TopicRef::Name(name.to_string())]);
    let result = r
        .response
        .into_iter()
        .next()
        .map(|t| t.result.map(|(_, id)| id.as_u128()).map_err(|e| code(&e)))
        .unwrap_or_else(|| Err("no result".into()));
    ControllerResult {
        records: r.records,
        response: Reply::Deleted(result),
    }
}

fn create_partitions(c: &mut Controller, name: &str, count: i32) -> ControllerResult<Reply> {
    let r = c.create_partitions(
        &[CreatePartitionsTopic {
            name: name.to_string(),
            count,
            assignments: None,
        }],
        false,
    );
    let result = r
        .response
        .into_iter()
        .next()
        .map(|(_, r)| r.map_err(|e| code(&e)))
        .unwrap_or_else(|| Err("no result".into()));
    ControllerResult {
        records: r.records,
        response: Reply::Partitions(result),
    }
}
