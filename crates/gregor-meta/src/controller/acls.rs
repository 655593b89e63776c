//! CreateAcls and DeleteAcls, validated as Kafka's broker and controller do and turned into
//! `AccessControlEntryRecord` / `RemoveAccessControlEntryRecord`; DescribeAcls reads an image.

use super::state::{Controller, ControllerResult, MAX_RECORDS_PER_USER_OP};
use crate::acl::types::{
    parse_principal, AccessControlEntryRecord, AclBinding, AclBindingFilter, AclOperation,
    AclPermissionType, AclResourceType, PatternType, RemoveAccessControlEntryRecord,
    CLUSTER_RESOURCE_NAME,
};
use crate::error::ApiError;
use crate::image::MetadataImage;
use crate::record::MetadataRecord;
use std::collections::BTreeSet;
use uuid::Uuid;

/// What one DeleteAcls filter did: the bindings it matched (and deleted), or why it failed.
pub type DeleteAclsFilterResult = Result<Vec<AclBinding>, ApiError>;

impl Controller {
    /// CreateAcls: one result per binding, in order. A binding that already exists (or comes
    /// twice in the request) succeeds without a new record, as in Kafka.
    pub fn create_acls(
        &mut self,
        acls: &[AclBinding],
    ) -> ControllerResult<Vec<Result<(), ApiError>>> {
        let mut records = Vec::new();
        let mut created: Vec<&AclBinding> = Vec::new();
        let mut ids: BTreeSet<Uuid> = BTreeSet::new();
        let mut results = Vec::with_capacity(acls.len());
        for acl in acls {
            if let Err(e) = validate_new_acl(acl) {
                results.push(Err(e));
                continue;
            }
            if self.image.acls().contains(acl) || created.contains(&acl) {
                results.push(Ok(()));
                continue;
            }
            if records.len() >= MAX_RECORDS_PER_USER_OP {
                let e = ApiError::invalid_request(format!(
                    "Cannot create more than {MAX_RECORDS_PER_USER_OP} ACLs in a single request"
                ));
                return ControllerResult::new(Vec::new(), vec![Err(e); acls.len()]);
            }
            let id = self.new_acl_id(&ids);
            ids.insert(id);
            created.push(acl);
            records.push(MetadataRecord::AccessControlEntry(
                AccessControlEntryRecord {
                    id,
                    acl: acl.clone(),
                },
            ));
            results.push(Ok(()));
        }
        tracing::info!(
            requested = acls.len(),
            created = records.len(),
            "CreateAcls"
        );
        ControllerResult::new(records, results)
    }

    /// DeleteAcls: one result per filter, listing every binding it matched (a binding matched
    /// by two filters is listed by both and removed once). All or nothing: the records are
    /// committed together.
    pub fn delete_acls(
        &mut self,
        filters: &[AclBindingFilter],
    ) -> ControllerResult<Vec<DeleteAclsFilterResult>> {
        let mut removed: BTreeSet<Uuid> = BTreeSet::new();
        let mut results = Vec::with_capacity(filters.len());
        for filter in filters {
            if let Err(e) = validate_filter(filter) {
                results.push(Err(e));
                continue;
            }
            let matched: Vec<(&Uuid, &AclBinding)> = self.image.acls().filtered(filter).collect();
            let new_ids = matched
                .iter()
                .filter(|(id, _)| !removed.contains(id))
                .count();
            if removed.len() + new_ids > MAX_RECORDS_PER_USER_OP {
                results.push(Err(ApiError::invalid_request(format!(
                    "Cannot remove more than {MAX_RECORDS_PER_USER_OP} ACLs in a single delete operation"
                ))));
                continue;
            }
            removed.extend(matched.iter().map(|(id, _)| **id));
            results.push(Ok(matched
                .into_iter()
                .map(|(_, acl)| acl.clone())
                .collect()));
        }
        let records = removed
            .into_iter()
            .map(|id| {
                MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord { id })
            })
            .collect::<Vec<_>>();
        tracing::info!(
            filters = filters.len(),
            removed = records.len(),
            "DeleteAcls"
        );
        ControllerResult::new(records, results)
    }

    /// A fresh binding id, unused in the image and in this request.
    fn new_acl_id(&mut self, taken: &BTreeSet<Uuid>) -> Uuid {
        loop {
            let id = self.rng.next_topic_id();
            if self.image.acls().get(&id).is_none() && !taken.contains(&id) {
                return id;
            }
        }
    }
}

/// DescribeAcls: the bindings of `image` that pass `filter`, by id.
pub fn describe_acls(
    image: &MetadataImage,
    filter: &AclBindingFilter,
) -> Result<Vec<AclBinding>, ApiError> {
    validate_filter(filter)?;
    Ok(image
        .acls()
        .filtered(filter)
        .map(|(_, acl)| acl.clone())
        .collect())
}

/// Kafka refuses filters with codes it does not know.
fn validate_filter(filter: &AclBindingFilter) -> Result<(), ApiError> {
    if filter.resource_type == AclResourceType::Unknown
        || filter.pattern_type == PatternType::Unknown
    {
        return Err(ApiError::invalid_request("Unknown patternFilter."));
    }
    if filter.is_unknown() {
        return Err(ApiError::invalid_request("Unknown entryFilter."));
    }
    Ok(())
}

/// A binding CreateAcls may store, with Kafka's INVALID_REQUEST messages.
pub fn validate_new_acl(acl: &AclBinding) -> Result<(), ApiError> {
    let invalid = |m: String| Err(ApiError::invalid_request(m));
    if acl.resource_type == AclResourceType::Cluster && acl.resource_name != CLUSTER_RESOURCE_NAME {
        return invalid(format!(
            "The only valid name for the CLUSTER resource is {CLUSTER_RESOURCE_NAME}"
        ));
    }
    if acl.resource_name.is_empty() {
        return invalid("Invalid empty resource name".into());
    }
    match acl.resource_type {
        AclResourceType::Unknown | AclResourceType::Any => {
            return invalid(format!("Invalid resourceType {}", acl.resource_type));
        }
        // Gregor has no delegation tokens, so ACLs on them (or on users, whose only operations
        // are about tokens) could never apply.
        AclResourceType::DelegationToken | AclResourceType::User => {
            return invalid(format!(
                "ACLs on {} resources are not supported: Gregor has no delegation tokens",
                acl.resource_type
            ));
        }
        _ => {}
    }
    if !matches!(
        acl.pattern_type,
        PatternType::Literal | PatternType::Prefixed
    ) {
        return invalid(format!("Invalid patternType {}", acl.pattern_type));
    }
    if matches!(acl.operation, AclOperation::Unknown | AclOperation::Any) {
        return invalid(format!("Invalid operation {}", acl.operation));
    }
    if !matches!(
        acl.permission_type,
        AclPermissionType::Allow | AclPermissionType::Deny
    ) {
        return invalid(format!("Invalid permissionType {}", acl.permission_type));
    }
    if parse_principal(&acl.principal).is_none() {
        return invalid(format!(
            "Could not parse principal from `{}` (no colon is present separating the principal type from the principal name)",
            acl.principal
        ));
    }
    Ok(())
}
