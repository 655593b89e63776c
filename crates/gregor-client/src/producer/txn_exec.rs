//! The transaction manager's requests on the network: each goes to its broker (any broker for
//! FindCoordinator) in the versions `txn_wire` allows, and its answer, or why there was none,
//! comes back as a [`TxnResponse`].

use kafka_protocol::messages::{
    AddOffsetsToTxnRequest, AddPartitionsToTxnRequest, EndTxnRequest, FindCoordinatorRequest,
    InitProducerIdRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::protocol::{Request, VersionRange};

use super::txn::{Offered, Outgoing, TxnRequest, TxnResponse};
use super::txn_wire as w;
use crate::client::{Client, Target};
use crate::error::{Error, KafkaCode, KafkaError, Result};
use crate::versions::api_name;

/// Sends `out` and waits for its answer (within `request.timeout.ms`).
pub(super) async fn execute(client: &Client, out: Outgoing) -> TxnResponse {
    let target = match out.broker {
        Some(b) => Target::Broker(b),
        None => Target::Any,
    };
    match send(client, &target, &out.request).await {
        Ok(answer) => answer,
        Err(e) => failed(client, &out.request, e).await,
    }
}

async fn send(client: &Client, target: &Target, request: &TxnRequest) -> Result<TxnResponse> {
    Ok(match request {
        TxnRequest::FindCoordinator { key_type, key } => {
            let (_, r) = send_in::<FindCoordinatorRequest>(
                client,
                target,
                w::FIND_COORDINATOR_VERSIONS,
                |v| w::find_coordinator_request(*key_type, key, v),
            )
            .await?;
            TxnResponse::Coordinator(w::parse_find_coordinator(key, r))
        }
        TxnRequest::InitProducerId {
            transactional_id,
            transaction_timeout_ms,
            current,
        } => {
            let (v, r) = send_in::<InitProducerIdRequest>(
                client,
                target,
                w::INIT_PRODUCER_ID_VERSIONS,
                |v| {
                    w::init_producer_id_request(
                        transactional_id,
                        *transaction_timeout_ms,
                        *current,
                        v,
                    )
                },
            )
            .await?;
            // v3+ takes the current producer id and epoch: KIP-360 bumps are possible.
            let offered = Offered {
                epoch_bump: v >= 3,
                version2: w::offers_version2(client.connection_for(target).await?.versions()),
            };
            TxnResponse::ProducerId(w::parse_init_producer_id(r), offered)
        }
        TxnRequest::AddPartitions {
            transactional_id,
            identity,
            partitions,
        } => {
            let (_, r) = send_in::<AddPartitionsToTxnRequest>(
                client,
                target,
                w::ADD_PARTITIONS_VERSIONS,
                |_| w::add_partitions_request(transactional_id, *identity, partitions),
            )
            .await?;
            TxnResponse::PartitionsAdded(w::parse_add_partitions(r))
        }
        TxnRequest::AddOffsets {
            transactional_id,
            identity,
            group_id,
        } => {
            let (_, r) =
                send_in::<AddOffsetsToTxnRequest>(client, target, w::ADD_OFFSETS_VERSIONS, |_| {
                    w::add_offsets_request(transactional_id, *identity, group_id)
                })
                .await?;
            TxnResponse::OffsetsAdded(w::parse_add_offsets(r))
        }
        TxnRequest::TxnOffsetCommit {
            transactional_id,
            identity,
            group,
            offsets,
            version2,
        } => {
            let range = w::txn_offset_commit_versions(*version2);
            let (_, r) = send_in::<TxnOffsetCommitRequest>(client, target, range, |v| {
                w::txn_offset_commit_request(transactional_id, *identity, group, offsets, v)
            })
            .await?;
            TxnResponse::OffsetsCommitted(w::parse_txn_offset_commit(r))
        }
        TxnRequest::EndTxn { .. } => end_txn(client, target, request).await?,
    })
}

/// EndTxn; v5 with transaction version 2, whose answer names the producer's next epoch.
async fn end_txn(client: &Client, target: &Target, request: &TxnRequest) -> Result<TxnResponse> {
    let TxnRequest::EndTxn {
        transactional_id,
        identity,
        commit,
        version2,
    } = request
    else {
        return Err(Error::InvalidArgument("not an EndTxn".to_string()));
    };
    let range = w::end_txn_versions(*version2);
    let (v, r) = send_in::<EndTxnRequest>(client, target, range, |_| {
        w::end_txn_request(transactional_id, *identity, *commit)
    })
    .await?;
    Ok(TxnResponse::Ended(w::parse_end_txn(r, v)))
}

/// One request in the highest version both the broker and `range` allow.
async fn send_in<R: Request>(
    client: &Client,
    target: &Target,
    range: VersionRange,
    build: impl FnOnce(i16) -> R,
) -> Result<(i16, R::Response)> {
    let conn = client.connection_for(target).await?;
    let version =
        conn.versions()
            .negotiate(R::KEY, range)
            .map_err(|e| Error::UnsupportedVersion {
                api: api_name(R::KEY),
                broker: format!("{target:?}"),
                broker_versions: e.broker_text(),
                client_versions: format!("{}..={}", range.min, range.max),
            })?;
    let response = conn.send(&build(version), version).await?;
    Ok((version, response))
}

/// A request that got no usable answer: a Kafka error as the broker's answer, a lost
/// connection or timeout as no answer (the coordinator is looked up again), anything else
/// (no common version, a malformed answer) as a fatal error, since retrying cannot help.
async fn failed(client: &Client, request: &TxnRequest, e: Error) -> TxnResponse {
    let error = match e {
        Error::Kafka { error, .. } => error,
        Error::UnknownBroker(id) => {
            // A coordinator the metadata does not know yet: look again before the retry.
            if let Err(e) = client.refresh_metadata(Some(&[])).await {
                tracing::debug!(error = %e, "metadata refresh failed");
            }
            return TxnResponse::NoResponse(format!("broker {id} is not in the metadata"));
        }
        Error::Disconnected { .. } | Error::Connect { .. } | Error::Timeout { .. } => {
            return TxnResponse::NoResponse(e.to_string());
        }
        Error::UnsupportedVersion { .. } => {
            KafkaError::new(KafkaCode::UNSUPPORTED_VERSION, Some(e.to_string()))
        }
        other => KafkaError::new(KafkaCode::UNKNOWN_SERVER_ERROR, Some(other.to_string())),
    };
    as_answer(request, error)
}

/// `error` as the answer to `request`, for every entity it named.
pub(super) fn as_answer(request: &TxnRequest, error: KafkaError) -> TxnResponse {
    match request {
        TxnRequest::FindCoordinator { .. } => TxnResponse::Coordinator(Err(error)),
        TxnRequest::InitProducerId { .. } => {
            TxnResponse::ProducerId(Err(error), Offered::default())
        }
        TxnRequest::AddPartitions { partitions, .. } => TxnResponse::PartitionsAdded(
            partitions
                .iter()
                .map(|tp| (tp.clone(), Err(error.clone())))
                .collect(),
        ),
        TxnRequest::AddOffsets { .. } => TxnResponse::OffsetsAdded(Err(error)),
        TxnRequest::TxnOffsetCommit { offsets, .. } => TxnResponse::OffsetsCommitted(
            offsets
                .keys()
                .map(|tp| (tp.clone(), Err(error.clone())))
                .collect(),
        ),
        TxnRequest::EndTxn { .. } => TxnResponse::Ended(Err(error)),
    }
}
