//! Per-broker lanes: each takes its broker's Produce requests in the order the sender task
//! released them and submits them to the connection one after the other (so they reach the
//! broker in that order), then waits for each answer in a task of its own.

use kafka_protocol::messages::ProduceRequest;
use tokio::sync::mpsc;

use super::wire::{self, BatchToSend};
use crate::client::{Client, Target};
use crate::error::Result;
use crate::types::TopicPartition;

/// The outcome of one Produce request: the broker, its batches (id and partition), and the
/// per-partition results or why the request got no answer.
pub(super) type RequestResult = (
    i32,
    Vec<(u64, TopicPartition)>,
    Result<
        Vec<(
            TopicPartition,
            std::result::Result<wire::Appended, wire::Rejected>,
        )>,
    >,
);

/// One Produce request for a lane.
pub(super) struct LaneRequest {
    pub(super) ids: Vec<(u64, TopicPartition)>,
    pub(super) batches: Vec<BatchToSend>,
}

/// A broker's lane: submits its requests in arrival order, then waits for each response in a
/// task of its own. Ends when the sender task drops its end.
pub(super) async fn run_lane(
    client: Client,
    leader: i32,
    acks: i16,
    timeout_ms: i32,
    mut requests: mpsc::UnboundedReceiver<LaneRequest>,
    results: mpsc::UnboundedSender<RequestResult>,
) {
    while let Some(LaneRequest { ids, batches }) = requests.recv().await {
        let submitted = submit_produce(&client, leader, acks, timeout_ms, &batches).await;
        let results = results.clone();
        match submitted {
            Err(e) => {
                let _ = results.send((leader, ids, Err(e)));
            }
            Ok(answer) => {
                tokio::spawn(async move {
                    let result = match answer {
                        Answer::Response(pending) => pending
                            .response()
                            .await
                            .map(|resp| wire::parse_produce_response(resp, &batches)),
                        Answer::Written(written) => written.written().await.map(|()| {
                            let unknown = wire::Appended {
                                base_offset: -1,
                                log_append_time: -1,
                            };
                            batches
                                .iter()
                                .map(|b| (b.tp.clone(), Ok(unknown)))
                                .collect()
                        }),
                    };
                    // The sender task may have stopped; nobody is left to tell then.
                    let _ = results.send((leader, ids, result));
                });
            }
        }
    }
}

enum Answer {
    Response(crate::connection::PendingResponse<ProduceRequest>),
    Written(crate::connection::Written),
}

async fn submit_produce(
    client: &Client,
    leader: i32,
    acks: i16,
    timeout_ms: i32,
    batches: &[BatchToSend],
) -> Result<Answer> {
    let conn = client.connection_for(&Target::Broker(leader)).await?;
    let version = conn.pick_version::<ProduceRequest>()?;
    let request = wire::produce_request(batches, acks, timeout_ms, version);
    if acks == 0 {
        Ok(Answer::Written(
            conn.submit_without_response(&request, version).await?,
        ))
    } else {
        Ok(Answer::Response(conn.submit(&request, version).await?))
    }
}
