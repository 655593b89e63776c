//! What the side-topic admin client and the side records share: requests to a node and the
//! side topics as one node's metadata lists them.

use std::collections::BTreeMap;

use kafka_protocol::messages::MetadataRequest;

use crate::data::Links;

/// Side topics' names start with this.
pub const SIDE_PREFIX: &str = "side-";

/// Sends `req` to `node`; an error string when no answer came (the outcome is then unknown).
pub(crate) async fn send<R: kafka_protocol::protocol::Request>(
    links: &mut Links,
    node: usize,
    req: &R,
    version: i16,
) -> Result<R::Response, String> {
    let Some(c) = links.conn(node).await else {
        return Err("cannot connect".into());
    };
    match c.send(req, version).await {
        Ok(r) => Ok(r),
        Err(e) => {
            links.drop_conn(node);
            Err(e.to_string())
        }
    }
}

/// Side topics as one node's metadata lists them: name -> the leader of each partition, in
/// partition order (-1: none).
pub(crate) type SideView = BTreeMap<String, Vec<i32>>;

pub(crate) async fn side_view(links: &mut Links, node: usize) -> Option<SideView> {
    let mut req = MetadataRequest::default();
    req.topics = None; // every topic
    let resp = send(links, node, &req, 9).await.ok()?;
    Some(
        resp.topics
            .into_iter()
            .filter_map(|t| {
                let name = t.name?.0.to_string();
                if !name.starts_with(SIDE_PREFIX) || t.error_code != 0 {
                    return None;
                }
                let mut leaders: Vec<(i32, i32)> = t
                    .partitions
                    .iter()
                    .map(|p| (p.partition_index, p.leader_id.0))
                    .collect();
                leaders.sort_unstable();
                Some((name, leaders.into_iter().map(|(_, l)| l).collect()))
            })
            .collect(),
    )
}
