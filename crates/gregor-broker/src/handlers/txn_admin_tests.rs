//! DescribeTransactions and ListTransactions through the broker's routing, on a real
//! single-node broker whose transaction coordinator shards load from their logs.

use std::sync::Arc;

use kafka_protocol::messages::add_partitions_to_txn_request::AddPartitionsToTxnTopic;
use kafka_protocol::messages::*;
use kafka_protocol::ResponseError;

use crate::handlers::fetch::tests::{create_topic, sb, send, start};
use crate::handlers::txn_coordinator::tests::init;
use crate::Broker;

async fn add(b: &Arc<Broker>, id: &str, (pid, epoch): (i64, i16), topic: &str, parts: &[i32]) {
    let mut t = AddPartitionsToTxnTopic::default();
    t.name = TopicName(sb(topic));
    t.partitions = parts.to_vec();
    let mut r = AddPartitionsToTxnRequest::default();
    r.v3_and_below_transactional_id = TransactionalId(sb(id));
    r.v3_and_below_producer_id = ProducerId(pid);
    r.v3_and_below_producer_epoch = epoch;
    r.v3_and_below_topics = vec![t];
    match send(
        b,
        ApiKey::AddPartitionsToTxn,
        3,
        RequestKind::AddPartitionsToTxn(r),
    )
    .await
    {
        ResponseKind::AddPartitionsToTxn(resp) => {
            for p in &resp.results_by_topic_v3_and_below[0].results_by_partition {
                assert_eq!(p.partition_error_code, 0, "{resp:?}");
            }
        }
        other => panic!("{other:?}"),
    }
}

async fn describe(
    b: &Arc<Broker>,
    ids: &[&str],
) -> Vec<describe_transactions_response::TransactionState> {
    let mut r = DescribeTransactionsRequest::default();
    r.transactional_ids = ids.iter().map(|id| TransactionalId(sb(id))).collect();
    match send(
        b,
        ApiKey::DescribeTransactions,
        0,
        RequestKind::DescribeTransactions(r),
    )
    .await
    {
        ResponseKind::DescribeTransactions(resp) => resp.transaction_states,
        other => panic!("{other:?}"),
    }
}

async fn list(
    b: &Arc<Broker>,
    version: i16,
    r: ListTransactionsRequest,
) -> ListTransactionsResponse {
    match send(
        b,
        ApiKey::ListTransactions,
        version,
        RequestKind::ListTransactions(r),
    )
    .await
    {
        ResponseKind::ListTransactions(resp) => resp,
        other => panic!("{other:?}"),
    }
}

/// (id, producer id, state) of each listed transaction, sorted.
fn listed(resp: &ListTransactionsResponse) -> Vec<(String, i64, String)> {
    let mut out: Vec<(String, i64, String)> = resp
        .transaction_states
        .iter()
        .map(|t| {
            (
                t.transactional_id.0.to_string(),
                t.producer_id.0,
                t.transaction_state.to_string(),
            )
        })
        .collect();
    out.sort();
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn describe_reports_state_partitions_and_errors() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    // No __transaction_state yet: no shard here for any id, and describing creates none.
    let before = describe(&b, &["tx"]).await;
    assert_eq!(before[0].error_code, ResponseError::NotCoordinator.code());
    assert_eq!(
        list(&b, 1, Default::default())
            .await
            .transaction_states
            .len(),
        0
    );

    create_topic(&b, "in").await;
    create_topic(&b, "out").await;
    let producer = init(&b, "tx").await;
    add(&b, "tx", producer, "out", &[0]).await;
    add(&b, "tx", producer, "in", &[0]).await;
    let got = describe(&b, &["tx", "nobody"]).await;
    assert_eq!(got.len(), 2);
    let tx = &got[0];
    assert_eq!(tx.error_code, 0, "{tx:?}");
    assert_eq!(tx.transaction_state.as_str(), "Ongoing");
    assert_eq!((tx.producer_id.0, tx.producer_epoch), producer);
    assert_eq!(tx.transaction_timeout_ms, 60_000);
    assert!(tx.transaction_start_time_ms > 0, "{tx:?}");
    let topics: Vec<(&str, Vec<i32>)> = tx
        .topics
        .iter()
        .map(|t| (t.topic.0.as_str(), t.partitions.clone()))
        .collect();
    assert_eq!(topics, vec![("in", vec![0]), ("out", vec![0])]);
    assert_eq!(got[1].transactional_id.0.as_str(), "nobody");
    assert_eq!(
        got[1].error_code,
        ResponseError::TransactionalIdNotFound.code()
    );
    assert_eq!(got[1].transaction_start_time_ms, -1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_filters_by_state_producer_and_duration() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let b = start(tmp.path()).await;
    create_topic(&b, "in").await;
    let open = init(&b, "open").await;
    add(&b, "open", open, "in", &[0]).await;
    let idle = init(&b, "idle").await;

    let all = list(&b, 1, Default::default()).await;
    assert_eq!(all.error_code, 0);
    assert_eq!(
        listed(&all),
        vec![
            ("idle".to_string(), idle.0, "Empty".to_string()),
            ("open".to_string(), open.0, "Ongoing".to_string()),
        ]
    );

    let mut r = ListTransactionsRequest::default();
    r.state_filters = vec![sb("Ongoing"), sb("Bogus")];
    let ongoing = list(&b, 0, r).await;
    assert_eq!(listed(&ongoing).len(), 1);
    assert_eq!(listed(&ongoing)[0].0, "open");
    assert_eq!(ongoing.unknown_state_filters, vec![sb("Bogus")]);

    let mut r = ListTransactionsRequest::default();
    r.producer_id_filters = vec![ProducerId(idle.0)];
    assert_eq!(
        listed(&list(&b, 0, r).await)[..1],
        [("idle".to_string(), idle.0, "Empty".to_string())]
    );

    // Open for less than an hour: left out by an hour's duration filter; an idle id has no
    // start time (-1), which Kafka counts as running since the epoch.
    let mut r = ListTransactionsRequest::default();
    r.duration_filter = 3_600_000;
    let long = list(&b, 1, r.clone()).await;
    assert_eq!(listed(&long).len(), 1);
    assert_eq!(listed(&long)[0].0, "idle");
    // v0 has no duration filter: both are listed.
    assert_eq!(listed(&list(&b, 0, r).await).len(), 2);
}
