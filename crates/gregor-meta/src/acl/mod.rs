//! ACLs: Kafka's ACL vocabulary and records ([`types`]), the image's index of bindings
//! ([`index`]) and the authorizer over it ([`authorizer`]). The controller's CreateAcls and
//! DeleteAcls live with the other controller operations (`controller/acls.rs`).

pub mod authorizer;
pub mod index;
pub mod types;

pub use authorizer::{
    parse_super_users, supported_operations, AuthorizationResult, Authorizer, AuthorizerConfig,
    RequestIdentity, ANONYMOUS_PRINCIPAL, GREGOR_AUTHORIZER,
};
pub use index::AclIndex;
pub use types::{
    parse_principal, AclBinding, AclBindingFilter, AclOperation, AclPermissionType,
    AclResourceType, PatternType, CLUSTER_RESOURCE_NAME, WILDCARD_HOST, WILDCARD_PRINCIPAL,
    WILDCARD_RESOURCE,
};
