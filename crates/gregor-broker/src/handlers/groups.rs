//! The nine classic group APIs and TxnOffsetCommit: wire conversion (`group_wire`) around the
//! coordinator shell (`groups`).

use gregor_group::{Request, RequestContext as GroupContext, Response};
use gregor_meta::features::GROUP_VERSION;
use kafka_protocol::messages::{
    ApiKey, ConsumerGroupDescribeRequest, ConsumerGroupHeartbeatRequest, DeleteGroupsRequest,
    DescribeGroupsRequest, HeartbeatRequest, JoinGroupRequest, LeaveGroupRequest,
    OffsetCommitRequest, OffsetDeleteRequest, OffsetFetchRequest, RequestKind, ResponseKind,
    SyncGroupRequest, TxnOffsetCommitRequest,
};
use kafka_protocol::ResponseError;

use crate::connection::RequestContext;
use crate::forward::ControlPlane;
use crate::group_wire as w;
use crate::groups::Groups;

fn context(ctx: &RequestContext) -> GroupContext {
    GroupContext {
        client_id: ctx.client_id.clone(),
        client_host: format!("/{}", ctx.client_host),
        api_version: ctx.api_version,
    }
}

fn fail(
    api: ApiKey,
    version: i16,
    request: &RequestKind,
    e: ResponseError,
) -> Option<ResponseKind> {
    w::error_response(api, version, request, e)
}

/// The answer refusing `request` with `e` for every part of it.
pub fn refuse(
    ctx: &RequestContext,
    request: &RequestKind,
    e: ResponseError,
) -> Option<ResponseKind> {
    fail(ctx.api_key, ctx.api_version, request, e)
}

/// Handles a group API request.
pub async fn handle(
    b: ControlPlane<'_>,
    groups: &Groups,
    ctx: &RequestContext,
    request: RequestKind,
) -> Option<ResponseKind> {
    let v = ctx.api_version;
    let g = GroupApi {
        b,
        groups,
        gctx: context(ctx),
        v,
    };
    let out = match &request {
        RequestKind::JoinGroup(r) => g.join_group(r).await,
        RequestKind::SyncGroup(r) => g.sync_group(r).await,
        RequestKind::Heartbeat(r) => g.heartbeat(r).await,
        RequestKind::LeaveGroup(r) => g.leave_group(r).await,
        RequestKind::OffsetCommit(r) => g.offset_commit(r).await,
        RequestKind::OffsetFetch(r) => g.offset_fetch(r).await,
        RequestKind::DescribeGroups(r) => Ok(g.describe_groups(r).await),
        RequestKind::ListGroups(r) => {
            let parts = groups
                .list_groups(g.gctx.clone(), w::list_groups_request(r, v))
                .await;
            Ok(ResponseKind::ListGroups(w::list_groups_response(parts, v)))
        }
        RequestKind::DeleteGroups(r) => Ok(g.delete_groups(r).await),
        RequestKind::OffsetDelete(r) => g.offset_delete(r).await,
        RequestKind::TxnOffsetCommit(r) => g.txn_offset_commit(r).await,
        RequestKind::ConsumerGroupHeartbeat(r) => g.consumer_group_heartbeat(r).await,
        RequestKind::ConsumerGroupDescribe(r) => Ok(g.consumer_group_describe(r).await),
        _ => Err(ResponseError::UnknownServerError),
    };
    match out {
        Ok(resp) => Some(resp),
        Err(e) => fail(ctx.api_key, v, &request, e),
    }
}

/// One group API request on its way to the coordinator shells: the wire request converted,
/// the call, the answer converted back (UNKNOWN_SERVER_ERROR for an answer of the wrong kind).
struct GroupApi<'a> {
    b: ControlPlane<'a>,
    groups: &'a Groups,
    gctx: GroupContext,
    v: i16,
}

impl GroupApi<'_> {
    /// Calls the coordinator of `group`.
    async fn call(&self, group: &str, req: Request) -> Result<Response, ResponseError> {
        self.groups
            .call(self.b, group, self.gctx.clone(), req)
            .await
    }

    async fn join_group(&self, r: &JoinGroupRequest) -> Result<ResponseKind, ResponseError> {
        let req = Request::JoinGroup(w::join_group_request(r, self.v));
        match self.call(&r.group_id, req).await? {
            Response::JoinGroup(x) => {
                Ok(ResponseKind::JoinGroup(w::join_group_response(x, self.v)))
            }
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    async fn sync_group(&self, r: &SyncGroupRequest) -> Result<ResponseKind, ResponseError> {
        let req = Request::SyncGroup(w::sync_group_request(r, self.v)?);
        match self.call(&r.group_id, req).await? {
            Response::SyncGroup(x) => {
                Ok(ResponseKind::SyncGroup(w::sync_group_response(x, self.v)))
            }
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    async fn heartbeat(&self, r: &HeartbeatRequest) -> Result<ResponseKind, ResponseError> {
        let req = Request::Heartbeat(w::heartbeat_request(r, self.v));
        match self.call(&r.group_id, req).await? {
            Response::Heartbeat(x) => Ok(ResponseKind::Heartbeat(w::heartbeat_response(x, self.v))),
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    async fn leave_group(&self, r: &LeaveGroupRequest) -> Result<ResponseKind, ResponseError> {
        let req = Request::LeaveGroup(w::leave_group_request(r, self.v));
        match self.call(&r.group_id, req).await? {
            Response::LeaveGroup(x) => {
                Ok(ResponseKind::LeaveGroup(w::leave_group_response(x, self.v)))
            }
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    /// Commits the offsets of partitions that exist; the others are answered
    /// UNKNOWN_TOPIC_OR_PARTITION without reaching the coordinator.
    async fn offset_commit(&self, r: &OffsetCommitRequest) -> Result<ResponseKind, ResponseError> {
        let v = self.v;
        let image = self.b.metadata.image();
        let exists = |t: &str, p: i32| {
            image
                .topic(t)
                .is_some_and(|t| t.partitions.contains_key(&p))
        };
        let (req, rejected) = w::split_unknown_partitions(w::offset_commit_request(r, v), exists);
        if req.topics.is_empty() {
            let resp = w::offset_commit_response(rejected, None, v);
            return Ok(ResponseKind::OffsetCommit(resp));
        }
        match self.call(&r.group_id, Request::OffsetCommit(req)).await? {
            Response::OffsetCommit(x) => Ok(ResponseKind::OffsetCommit(w::offset_commit_response(
                x,
                Some(rejected),
                v,
            ))),
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    /// Commits a transaction's offsets of partitions that exist (the others are answered
    /// UNKNOWN_TOPIC_OR_PARTITION without reaching the coordinator); they stay invisible to
    /// OffsetFetch until the transaction's marker.
    async fn txn_offset_commit(
        &self,
        r: &TxnOffsetCommitRequest,
    ) -> Result<ResponseKind, ResponseError> {
        let v = self.v;
        let image = self.b.metadata.image();
        let exists = |t: &str, p: i32| {
            image
                .topic(t)
                .is_some_and(|t| t.partitions.contains_key(&p))
        };
        let mut req = w::txn_offset_commit_request(r, v);
        let commit = gregor_group::OffsetCommitRequest {
            topics: std::mem::take(&mut req.topics),
            ..Default::default()
        };
        let (kept, rejected) = w::split_unknown_partitions(commit, exists);
        req.topics = kept.topics;
        if req.topics.is_empty() {
            let resp = w::txn_offset_commit_response(Default::default(), Some(rejected), v);
            return Ok(ResponseKind::TxnOffsetCommit(resp));
        }
        match self
            .call(&r.group_id, Request::TxnOffsetCommit(req))
            .await?
        {
            Response::TxnOffsetCommit(x) => Ok(ResponseKind::TxnOffsetCommit(
                w::txn_offset_commit_response(x, Some(rejected), v),
            )),
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    /// Fetches each group's offsets from its own coordinator; a group's error is its own.
    async fn offset_fetch(&self, r: &OffsetFetchRequest) -> Result<ResponseKind, ResponseError> {
        let reqs = w::offset_fetch_requests(r, self.v)?;
        let mut answers = Vec::with_capacity(reqs.len());
        for req in reqs {
            answers.push(
                match self
                    .call(&req.group_id, Request::OffsetFetch(req.clone()))
                    .await
                {
                    Ok(Response::OffsetFetch(x)) => x,
                    Ok(_) => w::offset_fetch_group_error(&req, ResponseError::UnknownServerError),
                    Err(e) => w::offset_fetch_group_error(&req, e),
                },
            );
        }
        Ok(ResponseKind::OffsetFetch(w::offset_fetch_response(
            answers, self.v,
        )))
    }

    /// Describes the groups, asking each `__consumer_offsets` partition's shard for its own.
    async fn describe_groups(&self, r: &DescribeGroupsRequest) -> ResponseKind {
        let n = Groups::num_partitions(self.b);
        let mut parts = Vec::new();
        for (p, part) in w::describe_groups_split(r, n) {
            let req = Request::DescribeGroups(part.clone());
            parts.push(
                match self.groups.call_partition(p, self.gctx.clone(), req).await {
                    Ok(Response::DescribeGroups(x)) => x,
                    Ok(_) => w::describe_groups_error(&part, ResponseError::UnknownServerError),
                    Err(e) => w::describe_groups_error(&part, e),
                },
            );
        }
        ResponseKind::DescribeGroups(w::describe_groups_response(r, parts, self.v))
    }

    /// OffsetDelete: partitions of topics the cluster does not have are answered
    /// UNKNOWN_TOPIC_OR_PARTITION here; the group's coordinator deletes the rest.
    async fn offset_delete(&self, r: &OffsetDeleteRequest) -> Result<ResponseKind, ResponseError> {
        let mut req = w::offset_delete_request(r);
        let image = self.b.metadata.image();
        let (known, unknown): (Vec<_>, Vec<_>) = std::mem::take(&mut req.topics)
            .into_iter()
            .partition(|(t, _)| image.topic(t).is_some());
        req.topics = known;
        let group = req.group_id.clone();
        let mut answer = match self.call(&group, Request::OffsetDelete(req)).await? {
            Response::OffsetDelete(x) => x,
            _ => return Err(ResponseError::UnknownServerError),
        };
        if answer.error.is_none() {
            let missing = Some(ResponseError::UnknownTopicOrPartition);
            answer.topics.extend(
                unknown
                    .into_iter()
                    .map(|(t, ps)| (t, ps.into_iter().map(|p| (p, missing)).collect())),
            );
        }
        Ok(ResponseKind::OffsetDelete(w::offset_delete_response(
            answer,
        )))
    }

    /// Deletes the groups, asking each `__consumer_offsets` partition's shard for its own.
    async fn delete_groups(&self, r: &DeleteGroupsRequest) -> ResponseKind {
        let n = Groups::num_partitions(self.b);
        let mut parts = Vec::new();
        for (p, part) in w::delete_groups_split(r, n) {
            let req = Request::DeleteGroups(part.clone());
            parts.push(
                match self.groups.call_partition(p, self.gctx.clone(), req).await {
                    Ok(Response::DeleteGroups(x)) => x,
                    Ok(_) => w::delete_groups_error(&part, ResponseError::UnknownServerError),
                    Err(e) => w::delete_groups_error(&part, e),
                },
            );
        }
        ResponseKind::DeleteGroups(w::delete_groups_response(parts, self.v))
    }

    /// A KIP-848 heartbeat, with the cluster's topics as this node's metadata shows them now.
    /// Refused while the cluster's `group.version` is below 1, as Kafka refuses it.
    async fn consumer_group_heartbeat(
        &self,
        r: &ConsumerGroupHeartbeatRequest,
    ) -> Result<ResponseKind, ResponseError> {
        let image = self.b.metadata.image();
        if image.finalized_features().level(GROUP_VERSION) < 1 {
            return Err(ResponseError::UnsupportedVersion);
        }
        let topics = self.groups.consumer_view(&image);
        let req = Request::ConsumerGroupHeartbeat(w::consumer_group_heartbeat_request(r, self.v));
        let context = self.gctx.clone();
        match self
            .groups
            .call_with_topics(self.b, &r.group_id, context, req, topics)
            .await?
        {
            Response::ConsumerGroupHeartbeat(x) => Ok(ResponseKind::ConsumerGroupHeartbeat(
                w::consumer_group_heartbeat_response(x),
            )),
            _ => Err(ResponseError::UnknownServerError),
        }
    }

    /// Describes KIP-848 groups, asking each `__consumer_offsets` partition's shard for its own.
    async fn consumer_group_describe(&self, r: &ConsumerGroupDescribeRequest) -> ResponseKind {
        let n = Groups::num_partitions(self.b);
        let mut parts = Vec::new();
        for (p, part) in w::consumer_group_describe_split(r, n) {
            let req = Request::ConsumerGroupDescribe(part.clone());
            parts.push(
                match self.groups.call_partition(p, self.gctx.clone(), req).await {
                    Ok(Response::ConsumerGroupDescribe(x)) => x,
                    Ok(_) => {
                        w::consumer_group_describe_error(&part, ResponseError::UnknownServerError)
                    }
                    Err(e) => w::consumer_group_describe_error(&part, e),
                },
            );
        }
        let image = self.b.metadata.image();
        ResponseKind::ConsumerGroupDescribe(w::consumer_group_describe_response(r, parts, &image))
    }
}
