//! What the rules share: the authorizer's answers ([`Decide`]), what a check makes of a request
//! ([`Gate`], [`Fixup`]) and the helpers that split a request into what it may and may not do.

use gregor_meta::acl::{AclOperation, AclResourceType, CLUSTER_RESOURCE_NAME};
use gregor_meta::{MetadataImage, Uuid};
use kafka_protocol::messages::{RequestKind, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::connection::Reply;

/// The authorizer's answers for one request.
pub trait Decide: Sync {
    /// Whether an authorizer is configured (without one, every answer is yes).
    fn enabled(&self) -> bool;
    /// May the requester do `op` on the resource? A refusal is logged.
    fn allows(&self, op: AclOperation, resource_type: AclResourceType, name: &str) -> bool;
    /// [`Decide::allows`] for checks whose refusal is no error (a filter, or a first try
    /// before a narrower one): not logged.
    fn allows_quietly(&self, op: AclOperation, resource_type: AclResourceType, name: &str) -> bool;
    /// May the requester do `op` on some resource of this type (Kafka's
    /// `authorizeByResourceType`)?
    fn allows_some(&self, op: AclOperation, resource_type: AclResourceType) -> bool;
    /// KIP-430's authorized operations of a resource (all it supports without an authorizer).
    fn authorized_operations(&self, resource_type: AclResourceType, name: &str) -> i32;

    /// `op` on the cluster.
    fn cluster(&self, op: AclOperation) -> bool {
        self.allows(op, AclResourceType::Cluster, CLUSTER_RESOURCE_NAME)
    }
}

/// What dispatch does with a request after `authorize::gate`.
pub enum Gate {
    /// Run this request (maybe with its refused parts taken out), then pass the reply through
    /// the fixup.
    Run(RequestKind, Fixup),
    /// Answer this without running anything.
    Answer(Reply),
}

/// Completes a handler's reply: adds the refused parts' answers, hides what the requester may
/// not see.
pub type Fixup = Box<dyn FnOnce(&dyn Decide, Reply) -> Reply + Send>;

/// No change to the reply.
pub fn no_fixup() -> Fixup {
    Box::new(|_, reply| reply)
}

/// A fixup of a response (a reply without one, such as `acks=0`, passes unchanged).
pub(super) fn on_response(
    f: impl FnOnce(&dyn Decide, ResponseKind) -> ResponseKind + Send + 'static,
) -> Fixup {
    Box::new(move |d, reply| match reply {
        Reply::Respond(r) => Reply::Respond(f(d, r)),
        other => other,
    })
}

/// Runs `request` unless nothing is left of it, then answers `empty` completed by the fixup.
pub(super) fn run_unless_empty(
    d: &dyn Decide,
    nothing_left: bool,
    request: RequestKind,
    empty: ResponseKind,
    fixup: Fixup,
) -> Gate {
    if nothing_left {
        Gate::Answer(fixup(d, Reply::Respond(empty)))
    } else {
        Gate::Run(request, fixup)
    }
}

/// Splits `items` into those `d` allows `op` on and those it refuses, keeping their order.
pub(super) fn split<T>(
    d: &dyn Decide,
    op: AclOperation,
    resource_type: AclResourceType,
    items: Vec<T>,
    name: impl Fn(&T) -> &str,
) -> (Vec<T>, Vec<T>) {
    items
        .into_iter()
        .partition(|item| d.allows(op, resource_type, name(item)))
}

pub(super) fn s(text: impl Into<String>) -> StrBytes {
    StrBytes::from_string(text.into())
}

/// The name of the topic with this id in `image`.
pub(super) fn topic_name_of(image: &MetadataImage, id: Uuid) -> Option<String> {
    image.topic_by_id(id).map(|t| t.name.clone())
}
