//! `/ui/api/messages`: one page of a partition's records, read as a read_committed consumer's
//! Fetch reads them: from the partition's leader's log, up to its last stable offset (or its
//! high watermark for `isolation=read_uncommitted`), whole batches, control batches left out.
//! A partition led by another node is read from that node's console for the viewer (the
//! `/ui/api/...` peer requests the Groups page makes). What the records look like on the page is
//! `browse`'s (pure); this is the shell that reads the log.

use std::sync::Arc;

use hyper::StatusCode;
use serde_json::Value;

use super::browse::{self, BrowseQuery, PageBuilder, Range, Seek, Stop};
use crate::broker_view::BrokerView;
use crate::cluster_view::OnBehalf;
use crate::metrics::auth::Viewer;
use crate::partition::Partition;

/// An answer, or its HTTP status and message.
pub type Answer = Result<Value, (StatusCode, String)>;

/// Bytes asked of the log per read (whole batches: one may be larger).
const READ_CHUNK: usize = 256 << 10;

/// One page of `q`'s partition for `viewer`, who must be allowed to READ the topic (checked
/// before anything says whether the topic exists, as Fetch answers). With `local_only`, a
/// partition this node does not lead is refused rather than asked of its leader.
pub async fn messages(
    b: BrokerView<'_>,
    viewer: &Viewer,
    q: BrowseQuery,
    local_only: bool,
) -> Answer {
    if !viewer.may_read_topic(&q.topic) {
        return Err((
            StatusCode::FORBIDDEN,
            format!("not authorized to read topic {:?}", q.topic),
        ));
    }
    let node = b.config.node_id;
    let leader = {
        let image = b.metadata.image();
        let topic = image.topic(&q.topic).ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("topic {:?} does not exist", q.topic),
            )
        })?;
        let p = topic.partitions.get(&q.partition).ok_or_else(|| {
            (
                StatusCode::NOT_FOUND,
                format!("topic {:?} has no partition {}", q.topic, q.partition),
            )
        })?;
        p.leader
    };
    if leader < 0 {
        return Err((
            StatusCode::SERVICE_UNAVAILABLE,
            format!("{}-{} has no leader now", q.topic, q.partition),
        ));
    }
    if leader != node {
        if local_only {
            return Err((
                StatusCode::CONFLICT,
                format!(
                    "node {node} does not lead {}-{}: node {leader} does",
                    q.topic, q.partition
                ),
            ));
        }
        return from_leader(b, &q, leader, viewer).await;
    }
    let part = b
        .replicas
        .get(&q.topic, q.partition)
        .filter(|p| p.role().is_leader)
        .ok_or_else(|| {
            (
                StatusCode::SERVICE_UNAVAILABLE,
                format!(
                    "node {node} is becoming the leader of {}-{}: try again",
                    q.topic, q.partition
                ),
            )
        })?;
    let mut page = crate::runtime::blocking(move || read_page(&part, &q))
        .await
        .map_err(|e| {
            (
                StatusCode::INTERNAL_SERVER_ERROR,
                format!("reading the log: {e}"),
            )
        })?;
    page["node_id"] = serde_json::json!(node);
    page["leader"] = serde_json::json!(node);
    Ok(page)
}

/// The page as the partition's leader (another node) answers it, read from its console for
/// `viewer`; its refusals are passed on, its silence is a 502 naming it.
async fn from_leader(b: BrokerView<'_>, q: &BrowseQuery, leader: i32, viewer: &Viewer) -> Answer {
    let node = b.config.node_id;
    let path = format!(
        "/ui/api/messages?{}&scope=local",
        q.to_query(&crate::cluster_view::peer::encode_param)
    );
    let on_behalf = OnBehalf {
        principal: viewer.principal(),
        host: viewer.host(),
    };
    let got = b
        .cluster_view
        .get_from(b.metadata, &b.config.settings, leader, &path, on_behalf)
        .await;
    match got {
        Ok((status, v)) => {
            crate::cluster_view::peer::relayed(status, v, node, &format!("leader node {leader}"))
        }
        Err(e) => {
            // The viewer gets the reason in the answer; a script polling would repeat it here.
            tracing::debug!(topic = %q.topic, partition = q.partition, node = leader, error = %e, "cannot read a partition from its leader's console");
            Err((
                StatusCode::BAD_GATEWAY,
                format!(
                    "{}-{} is led by node {leader}, whose console did not answer: {e} (open that node's console)",
                    q.topic, q.partition
                ),
            ))
        }
    }
}

/// Reads one page from the leader's log (blocking file work).
fn read_page(part: &Arc<Partition>, q: &BrowseQuery) -> Result<Value, gregor_log::LogError> {
    let log = &part.log;
    let offsets = log.offsets();
    let hw = offsets.high_watermark;
    let lso = part.last_stable_offset(hw);
    let range = Range {
        log_start: offsets.log_start_offset,
        high_watermark: hw,
        last_stable: lso,
        end: if q.read_committed { lso } else { hw },
    };
    let found = match q.seek {
        Seek::Timestamp(t) => log
            .list_offset(gregor_log::OffsetSpec::Timestamp(t))?
            .map(|x| x.offset),
        _ => None,
    };
    let start = browse::start_offset(q.seek, q.limit, range.log_start, range.end, found);
    let mut page = PageBuilder::new(q, start);
    let mut scanned = 0usize;
    while !page.full() && page.next_offset < range.end {
        if scanned >= browse::SCAN_BUDGET {
            page.stop = Some(Stop::ScanBudget);
            break;
        }
        let read = log.read(page.next_offset, READ_CHUNK, Some(range.end))?;
        let Some(chunk_end) = read.next_offset.filter(|_| !read.records.is_empty()) else {
            break;
        };
        scanned += read.records.len();
        let aborted = log.aborted_transactions(page.next_offset, chunk_end);
        take_batches(&mut page, &read.records, &aborted)?;
        if !page.full() {
            page.next_offset = page.next_offset.max(chunk_end);
        }
    }
    Ok(page.finish(start, range, scanned))
}

/// Feeds the whole batches in `records` to `page` until it is full.
fn take_batches(
    page: &mut PageBuilder<'_>,
    records: &[u8],
    aborted: &[gregor_log::txn::AbortedTxn],
) -> Result<(), gregor_log::LogError> {
    let mut rest = records;
    while !page.full() {
        let Some(h) = gregor_log::batch::BatchHeader::parse(rest) else {
            break;
        };
        let size = h.size();
        if size < gregor_log::batch::HEADER_LEN {
            break;
        }
        let Some(batch) = rest.get(..size) else { break };
        if h.is_control() {
            page.control_batch(&h);
        } else {
            let (h, decoded) = gregor_log::records::decode_batch(batch)?;
            page.take_batch(&h, &decoded, browse::is_aborted(&h, aborted));
        }
        rest = &rest[size..];
    }
    Ok(())
}
