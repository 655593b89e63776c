//! CreateAcls, DescribeAcls, DeleteAcls: wire messages in and out of gregor-meta's ACL
//! operations. Create and delete change the metadata log, so they run on the active controller
//! (forwarded like CreateTopics); describe reads this node's image. Without an authorizer
//! (`authorizer.class.name` empty) all three answer SECURITY_DISABLED, as Kafka does.
//!
//! Who may call them (ALTER / DESCRIBE on the cluster) and every other request's checks are
//! `authorize`'s. A forwarded CreateAcls or DeleteAcls is answered once this node's image has
//! applied what the controller committed (`forward::to_controller` waits for it), so the node
//! that acknowledges an ACL change enforces it from then on.

use std::collections::BTreeMap;

use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::create_acls_response::AclCreationResult;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::delete_acls_response::{
    DeleteAclsFilterResult, DeleteAclsMatchingAcl,
};
use kafka_protocol::messages::describe_acls_response::{AclDescription, DescribeAclsResource};
use kafka_protocol::messages::{
    ApiKey, CreateAclsRequest, CreateAclsResponse, DeleteAclsRequest, DeleteAclsResponse,
    DescribeAclsRequest, DescribeAclsResponse, RequestKind, ResponseKind,
};
use kafka_protocol::ResponseError;

use gregor_meta::acl::{
    AclBinding, AclBindingFilter, AclOperation, AclPermissionType, AclResourceType,
    AuthorizerConfig, PatternType,
};
use gregor_meta::ApiError;

use super::s;
use crate::forward::ControlPlane;
use crate::metadata::MetadataManager;

/// This node's authorizer settings; `None` when no authorizer is configured.
pub fn authorizer_config(metadata: &MetadataManager) -> Option<AuthorizerConfig> {
    AuthorizerConfig::from_static(metadata.static_config())
}

fn security_disabled() -> ApiError {
    ApiError::new(
        ResponseError::SecurityDisabled,
        "No Authorizer is configured.",
    )
}

/// CreateAcls or DeleteAcls as a client sent it: refused here without an authorizer, else
/// handled by the active controller (here or forwarded). `None` when the connection must close.
pub async fn to_controller(
    b: ControlPlane<'_>,
    api_key: ApiKey,
    version: i16,
    request: RequestKind,
) -> Option<ResponseKind> {
    if authorizer_config(b.metadata).is_none() {
        let e = security_disabled();
        return Some(match request {
            RequestKind::CreateAcls(r) => {
                ResponseKind::CreateAcls(create_response(vec![Err(e); r.creations.len()]))
            }
            RequestKind::DeleteAcls(r) => {
                ResponseKind::DeleteAcls(delete_response(vec![Err(e); r.filters.len()]))
            }
            _ => return None,
        });
    }
    let created: Vec<AclBinding> = match &request {
        RequestKind::CreateAcls(r) => r.creations.iter().map(binding_of).collect(),
        _ => Vec::new(),
    };
    let response = crate::forward::to_controller(b, api_key, version, request).await?;
    if planted!(AclAckBeforeApplied) || applied_here(b.metadata, &response, &created).await {
        return Some(response);
    }
    tracing::warn!(
        api = ?api_key,
        "an ACL change was committed but this broker has not applied it; answering REQUEST_TIMED_OUT"
    );
    Some(not_applied_here(response))
}

/// How long a broker waits for its own image to hold an ACL change it forwarded (the
/// controller's answer comes once the change is committed; this node applies it from the log).
const APPLY_WAIT: std::time::Duration = std::time::Duration::from_secs(5);

/// Whether this node's image holds what `response` acknowledges (the bindings created, the
/// matching ones deleted), waiting for it at most [`APPLY_WAIT`]: a broker that acknowledges an
/// ACL change must not go on enforcing the ACLs from before it.
async fn applied_here(
    metadata: &MetadataManager,
    response: &ResponseKind,
    created: &[AclBinding],
) -> bool {
    let holds = |image: &gregor_meta::MetadataImage| match response {
        ResponseKind::CreateAcls(r) => r
            .results
            .iter()
            .zip(created)
            .filter(|(res, _)| res.error_code == 0)
            .all(|(_, acl)| image.acls().contains(acl)),
        ResponseKind::DeleteAcls(r) => r
            .filter_results
            .iter()
            .filter(|f| f.error_code == 0)
            .flat_map(|f| &f.matching_acls)
            .all(|m| !image.acls().contains(&binding_of_match(m))),
        _ => true,
    };
    let deadline = tokio::time::Instant::now() + APPLY_WAIT;
    loop {
        // Read before the image: an image published meanwhile comes with a later index.
        let next = metadata.applied_index() + 1;
        if holds(&metadata.image()) {
            return true;
        }
        let left = deadline.saturating_duration_since(tokio::time::Instant::now());
        if left.is_zero() || !metadata.wait_applied(next, left).await {
            return holds(&metadata.image());
        }
    }
}

/// An acknowledgement this node cannot stand behind yet: each successful part answers the
/// retriable REQUEST_TIMED_OUT (the change may have happened, as after a lost answer).
fn not_applied_here(response: ResponseKind) -> ResponseKind {
    let e = ResponseError::RequestTimedOut;
    let message = || {
        Some(s(
            "the ACL change is committed but not yet applied on this broker",
        ))
    };
    match response {
        ResponseKind::CreateAcls(mut r) => {
            for res in r.results.iter_mut().filter(|res| res.error_code == 0) {
                res.error_code = e.code();
                res.error_message = message();
            }
            ResponseKind::CreateAcls(r)
        }
        ResponseKind::DeleteAcls(mut r) => {
            for f in r.filter_results.iter_mut().filter(|f| f.error_code == 0) {
                f.error_code = e.code();
                f.error_message = message();
                f.matching_acls.clear();
            }
            ResponseKind::DeleteAcls(r)
        }
        other => other,
    }
}

fn binding_of_match(m: &DeleteAclsMatchingAcl) -> AclBinding {
    AclBinding {
        resource_type: AclResourceType::from_code(m.resource_type),
        resource_name: m.resource_name.to_string(),
        pattern_type: PatternType::from_code(m.pattern_type),
        principal: m.principal.to_string(),
        host: m.host.to_string(),
        operation: AclOperation::from_code(m.operation),
        permission_type: AclPermissionType::from_code(m.permission_type),
    }
}

/// CreateAcls on the active controller.
pub async fn create_acls(metadata: &MetadataManager, r: CreateAclsRequest) -> CreateAclsResponse {
    let bindings: Vec<AclBinding> = r.creations.iter().map(binding_of).collect();
    let results = match metadata.submit(|c| c.create_acls(&bindings)).await {
        Ok(results) => results,
        Err(e) => {
            tracing::warn!(error = %e, acls = bindings.len(), "CreateAcls failed");
            vec![Err(e.api_error()); bindings.len()]
        }
    };
    create_response(results)
}

/// DeleteAcls on the active controller.
pub async fn delete_acls(metadata: &MetadataManager, r: DeleteAclsRequest) -> DeleteAclsResponse {
    let filters: Vec<AclBindingFilter> = r.filters.iter().map(delete_filter_of).collect();
    let results = match metadata.submit(|c| c.delete_acls(&filters)).await {
        Ok(results) => results,
        Err(e) => {
            tracing::warn!(error = %e, filters = filters.len(), "DeleteAcls failed");
            vec![Err(e.api_error()); filters.len()]
        }
    };
    delete_response(results)
}

/// DescribeAcls from this node's image, bindings grouped by resource pattern.
pub fn describe_acls(metadata: &MetadataManager, r: &DescribeAclsRequest) -> DescribeAclsResponse {
    let mut resp = DescribeAclsResponse::default();
    if authorizer_config(metadata).is_none() {
        let e = security_disabled();
        resp.error_code = e.code.code();
        resp.error_message = Some(s(e.message));
        return resp;
    }
    let filter = AclBindingFilter {
        resource_type: AclResourceType::from_code(r.resource_type_filter),
        resource_name: r.resource_name_filter.as_ref().map(|n| n.to_string()),
        pattern_type: PatternType::from_code(r.pattern_type_filter),
        principal: r.principal_filter.as_ref().map(|p| p.to_string()),
        host: r.host_filter.as_ref().map(|h| h.to_string()),
        operation: AclOperation::from_code(r.operation),
        permission_type: AclPermissionType::from_code(r.permission_type),
    };
    match gregor_meta::describe_acls(&metadata.image(), &filter) {
        Ok(bindings) => resp.resources = group_by_resource(bindings),
        Err(e) => {
            resp.error_code = e.code.code();
            resp.error_message = Some(s(e.message));
        }
    }
    resp
}

fn group_by_resource(bindings: Vec<AclBinding>) -> Vec<DescribeAclsResource> {
    let mut by_resource: BTreeMap<(i8, String, i8), Vec<AclDescription>> = BTreeMap::new();
    for acl in bindings {
        let mut d = AclDescription::default();
        d.principal = s(acl.principal);
        d.host = s(acl.host);
        d.operation = acl.operation.code();
        d.permission_type = acl.permission_type.code();
        by_resource
            .entry((
                acl.resource_type.code(),
                acl.resource_name,
                acl.pattern_type.code(),
            ))
            .or_default()
            .push(d);
    }
    by_resource
        .into_iter()
        .map(|((resource_type, name, pattern_type), acls)| {
            let mut res = DescribeAclsResource::default();
            res.resource_type = resource_type;
            res.resource_name = s(name);
            res.pattern_type = pattern_type;
            res.acls = acls;
            res
        })
        .collect()
}

fn binding_of(c: &AclCreation) -> AclBinding {
    AclBinding {
        resource_type: AclResourceType::from_code(c.resource_type),
        resource_name: c.resource_name.to_string(),
        pattern_type: PatternType::from_code(c.resource_pattern_type),
        principal: c.principal.to_string(),
        host: c.host.to_string(),
        operation: AclOperation::from_code(c.operation),
        permission_type: AclPermissionType::from_code(c.permission_type),
    }
}

fn delete_filter_of(f: &DeleteAclsFilter) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: AclResourceType::from_code(f.resource_type_filter),
        resource_name: f.resource_name_filter.as_ref().map(|n| n.to_string()),
        pattern_type: PatternType::from_code(f.pattern_type_filter),
        principal: f.principal_filter.as_ref().map(|p| p.to_string()),
        host: f.host_filter.as_ref().map(|h| h.to_string()),
        operation: AclOperation::from_code(f.operation),
        permission_type: AclPermissionType::from_code(f.permission_type),
    }
}

fn create_response(results: Vec<Result<(), ApiError>>) -> CreateAclsResponse {
    let mut resp = CreateAclsResponse::default();
    resp.results = results
        .into_iter()
        .map(|r| {
            let mut out = AclCreationResult::default();
            if let Err(e) = r {
                out.error_code = e.code.code();
                out.error_message = Some(s(e.message));
            }
            out
        })
        .collect();
    resp
}

fn delete_response(results: Vec<gregor_meta::DeleteAclsFilterResult>) -> DeleteAclsResponse {
    let mut resp = DeleteAclsResponse::default();
    resp.filter_results = results
        .into_iter()
        .map(|r| {
            let mut out = DeleteAclsFilterResult::default();
            match r {
                Ok(matched) => out.matching_acls = matched.into_iter().map(matching_acl).collect(),
                Err(e) => {
                    out.error_code = e.code.code();
                    out.error_message = Some(s(e.message));
                }
            }
            out
        })
        .collect();
    resp
}

fn matching_acl(acl: AclBinding) -> DeleteAclsMatchingAcl {
    let mut m = DeleteAclsMatchingAcl::default();
    m.resource_type = acl.resource_type.code();
    m.resource_name = s(acl.resource_name);
    m.pattern_type = acl.pattern_type.code();
    m.principal = s(acl.principal);
    m.host = s(acl.host);
    m.operation = acl.operation.code();
    m.permission_type = acl.permission_type.code();
    m
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::create_acls_request::AclCreation;

    #[test]
    fn wire_codes_become_typed_bindings_and_back() {
        let c = AclCreation::default()
            .with_resource_type(2)
            .with_resource_name(s("orders"))
            .with_resource_pattern_type(4)
            .with_principal(s("User:alice"))
            .with_host(s("*"))
            .with_operation(3)
            .with_permission_type(3);
        let b = binding_of(&c);
        assert_eq!(b.resource_type, AclResourceType::Topic);
        assert_eq!(b.pattern_type, PatternType::Prefixed);
        assert_eq!(b.operation, AclOperation::Read);
        let unknown = binding_of(&c.clone().with_operation(77));
        assert_eq!(unknown.operation, AclOperation::Unknown);
        let m = matching_acl(b.clone());
        assert_eq!((m.resource_type, m.pattern_type, m.operation), (2, 4, 3));
        let grouped = group_by_resource(vec![b.clone(), b.clone(), {
            let mut other = b;
            other.resource_name = "a".into();
            other
        }]);
        let names: Vec<(String, usize)> = grouped
            .iter()
            .map(|r| (r.resource_name.to_string(), r.acls.len()))
            .collect();
        assert_eq!(names, [("a".to_string(), 1), ("orders".to_string(), 2)]);
    }

    #[test]
    fn results_carry_kafkas_error_codes() {
        let created = create_response(vec![Ok(()), Err(security_disabled())]);
        assert_eq!(created.results[0].error_code, 0);
        assert_eq!(
            created.results[1].error_code,
            ResponseError::SecurityDisabled.code()
        );
        let deleted = delete_response(vec![Err(ApiError::invalid_request(
            "Unknown patternFilter.",
        ))]);
        assert_eq!(
            deleted.filter_results[0].error_code,
            ResponseError::InvalidRequest.code()
        );
    }
}
