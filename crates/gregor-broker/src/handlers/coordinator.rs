//! FindCoordinator: the group coordinator of a group (key type 0) or the transaction
//! coordinator of a transactional id (key type 1) is the leader of the key's partition of the
//! internal topic (`__consumer_offsets`, `__transaction_state`), created on first use.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::ResponseError;

use super::s;
use crate::forward::ControlPlane;
use crate::groups::{Groups, OFFSETS_TOPIC};
use crate::txn_shell::{Transactions, TXN_TOPIC};

/// FindCoordinator's key types.
const GROUP_KEY: i8 = 0;
const TRANSACTION_KEY: i8 = 1;

/// Answers a FindCoordinator: one key before v4, a batch of keys of one type from v4 (KIP-699).
pub async fn find_coordinator(
    b: ControlPlane<'_>,
    groups: &Groups,
    txns: &Transactions,
    r: FindCoordinatorRequest,
    version: i16,
    listener: &str,
) -> FindCoordinatorResponse {
    let keys: Vec<String> = if version >= 4 {
        r.coordinator_keys.iter().map(|k| k.to_string()).collect()
    } else {
        vec![r.key.to_string()]
    };
    let mut answers = Vec::new();
    for key in keys {
        let outcome = locate(b, groups, txns, r.key_type, &key, listener).await;
        answers.push(coordinator(key, outcome));
    }
    let mut resp = FindCoordinatorResponse::default();
    if version >= 4 {
        resp.coordinators = answers;
    } else if let Some(c) = answers.pop() {
        resp.error_code = c.error_code;
        if version >= 1 {
            resp.error_message = c.error_message;
        }
        resp.node_id = c.node_id;
        resp.host = c.host;
        resp.port = c.port;
    }
    resp
}

/// The node, host and port of `key`'s coordinator.
async fn locate(
    b: ControlPlane<'_>,
    groups: &Groups,
    txns: &Transactions,
    key_type: i8,
    key: &str,
    listener: &str,
) -> Result<(i32, String, i32), ResponseError> {
    if key.is_empty() {
        return Err(ResponseError::InvalidRequest);
    }
    match key_type {
        GROUP_KEY => {
            let p = groups.coordinator_partition(b, key).await?;
            leader_of(b, OFFSETS_TOPIC, p, listener)
        }
        TRANSACTION_KEY => {
            let p = txns.coordinator_partition(b, key).await?;
            leader_of(b, TXN_TOPIC, p, listener)
        }
        _ => Err(ResponseError::InvalidRequest),
    }
}

fn coordinator(key: String, outcome: Result<(i32, String, i32), ResponseError>) -> Coordinator {
    let mut c = Coordinator::default();
    c.key = s(key);
    c.node_id = BrokerId(-1);
    c.port = -1;
    match outcome {
        Ok((node, host, port)) => {
            c.node_id = BrokerId(node);
            c.host = s(host);
            c.port = port;
        }
        Err(e) => {
            c.error_code = e.code();
            c.error_message = Some(s(e.to_string()));
        }
    }
    c
}

/// The leader of `topic` partition `p` and its endpoint on `listener` (the one the client
/// asked on), from the metadata image: COORDINATOR_NOT_AVAILABLE while it has no leader, the
/// leader is not a live broker, or it has no such listener.
fn leader_of(
    b: ControlPlane<'_>,
    topic: &str,
    p: i32,
    listener: &str,
) -> Result<(i32, String, i32), ResponseError> {
    let image = b.metadata.image();
    let leader = image
        .topic(topic)
        .and_then(|t| t.partitions.get(&p))
        .map(|r| r.leader)
        .filter(|l| *l >= 0)
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    let endpoint = image
        .broker(leader)
        .filter(|br| !br.fenced)
        .and_then(|br| br.endpoints.iter().find(|e| e.name == listener))
        .ok_or(ResponseError::CoordinatorNotAvailable)?;
    Ok((leader, endpoint.host.clone(), i32::from(endpoint.port)))
}
