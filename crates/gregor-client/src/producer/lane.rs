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
    /// The batches belong to a transaction of transaction version 2: Produce v12+, whose
    /// leaders add the partitions.
    pub(super) txn_version2: bool,
}

/// How a lane writes its Produce requests.
#[derive(Debug, Clone)]
pub(super) struct LaneSettings {
    pub(super) acks: i16,
    pub(super) timeout_ms: i32,
    /// `transactional.id`: carried by each request, which then goes out in at most
    /// [`super::txn_wire::TXN_PRODUCE_MAX_VERSION`] (at least v12 with transaction version 2).
    pub(super) transactional_id: Option<std::sync::Arc<str>>,
}

/// A broker's lane: submits its requests in arrival order, then waits for each response in a
/// task of its own. Ends when the sender task drops its end.
pub(super) async fn run_lane(
    client: Client,
    leader: i32,
    settings: LaneSettings,
    mut requests: mpsc::UnboundedReceiver<LaneRequest>,
    results: mpsc::UnboundedSender<RequestResult>,
) {
    while let Some(LaneRequest {
        ids,
        batches,
        txn_version2,
    }) = requests.recv().await
    {
        let submitted = submit_produce(&client, leader, &settings, &batches, txn_version2).await;
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
    settings: &LaneSettings,
    batches: &[BatchToSend],
    txn_version2: bool,
) -> Result<Answer> {
    let conn = client.connection_for(&Target::Broker(leader)).await?;
    let acks = settings.acks;
    let mut version = conn.pick_version::<ProduceRequest>()?;
    if settings.transactional_id.is_some() && !txn_version2 {
        version = version.min(super::txn_wire::TXN_PRODUCE_MAX_VERSION);
    }
    let request = wire::produce_request(
        batches,
        acks,
        settings.timeout_ms,
        version,
        settings.transactional_id.as_deref(),
    );
    if acks == 0 {
        Ok(Answer::Written(
            conn.submit_without_response(&request, version).await?,
        ))
    } else {
        Ok(Answer::Response(conn.submit(&request, version).await?))
    }
}
