//! The authorizer: may principal P, connected from host H, do operation O on resource R? Pure,
//! over the image's [`AclIndex`] and three broker settings, by the rules of Kafka's
//! "Authorization and ACLs" documentation:
//!
//! - `super.users` may do everything, whatever the ACLs say;
//! - an ACL applies when its pattern covers R (LITERAL name or `*`, or PREFIXED), its principal
//!   is P or `User:*`, its host is H or `*`, and its operation is O or ALL; an ALLOW of READ,
//!   WRITE, DELETE or ALTER also allows DESCRIBE, and an ALLOW of ALTER_CONFIGS allows
//!   DESCRIBE_CONFIGS (a DENY refuses only what it names, or everything for ALL);
//! - any applying DENY refuses; otherwise any applying ALLOW allows;
//! - otherwise, when no ACL at all covers R, `allow.everyone.if.no.acl.found` decides; when some
//!   ACL covers R (for other principals or operations), the answer is no.
//!
//! The request handlers ask through [`Authorizer`]; each connection supplies its
//! [`RequestIdentity`] (the principal the SASL or TLS handshake established, `User:ANONYMOUS`
//! on a PLAINTEXT listener, and the client's address).

use super::index::AclIndex;
use super::types::{
    AclBinding, AclOperation, AclPermissionType, AclResourceType, PatternType, WILDCARD_HOST,
    WILDCARD_PRINCIPAL, WILDCARD_RESOURCE,
};
use crate::config::StaticBrokerConfig;
use std::collections::BTreeSet;
use std::net::IpAddr;

/// Gregor's name for its authorizer in `authorizer.class.name` (Kafka's KRaft name,
/// `org.apache.kafka.metadata.authorizer.StandardAuthorizer`, is accepted too, so a Kafka
/// `server.properties` works unchanged).
pub const GREGOR_AUTHORIZER: &str = "gregor.authorizer.StandardAuthorizer";

/// The principal of a connection that did not authenticate.
pub const ANONYMOUS_PRINCIPAL: &str = "User:ANONYMOUS";

/// The authorizer's settings.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct AuthorizerConfig {
    /// `super.users`: principals allowed everything.
    pub super_users: BTreeSet<String>,
    /// `allow.everyone.if.no.acl.found`.
    pub allow_everyone_if_no_acl_found: bool,
}

impl AuthorizerConfig {
    /// The settings of a node, or `None` when `authorizer.class.name` is empty (no
    /// authorizer: every request is allowed and the ACL APIs answer SECURITY_DISABLED).
    pub fn from_static(config: &StaticBrokerConfig) -> Option<AuthorizerConfig> {
        let class = config.get("authorizer.class.name");
        if class
            .as_ref()
            .and_then(|v| v.as_str())
            .unwrap_or("")
            .is_empty()
        {
            return None;
        }
        let super_users = config
            .get("super.users")
            .and_then(|v| v.as_str().map(parse_super_users))
            .unwrap_or_default();
        let allow_everyone_if_no_acl_found = config
            .get("allow.everyone.if.no.acl.found")
            .and_then(|v| v.as_bool())
            .unwrap_or(false);
        Some(AuthorizerConfig {
            super_users,
            allow_everyone_if_no_acl_found,
        })
    }
}

/// `super.users`: principals separated by semicolons (`User:admin;User:broker`).
pub fn parse_super_users(text: &str) -> BTreeSet<String> {
    text.split(';')
        .map(str::trim)
        .filter(|p| !p.is_empty())
        .map(str::to_string)
        .collect()
}

/// Who is asking: the connection's principal (`Type:name`) and the client's address.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestIdentity<'a> {
    /// `User:alice`, `User:ANONYMOUS`...
    pub principal: &'a str,
    /// The client's IP address.
    pub host: IpAddr,
}

/// The answer for one action.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AuthorizationResult {
    /// Go ahead.
    Allowed,
    /// Refused: the handler answers with the resource's `*_AUTHORIZATION_FAILED`.
    Denied,
}

impl AuthorizationResult {
    /// Whether allowed.
    pub fn is_allowed(self) -> bool {
        self == AuthorizationResult::Allowed
    }
}

/// The operations that can be granted on each resource type (the "Operations and Resources"
/// table of Kafka's documentation), which KIP-430's authorized-operations fields report on.
pub fn supported_operations(resource_type: AclResourceType) -> &'static [AclOperation] {
    use AclOperation::*;
    match resource_type {
        AclResourceType::Topic => &[
            Read,
            Write,
            Create,
            Delete,
            Alter,
            Describe,
            DescribeConfigs,
            AlterConfigs,
        ],
        AclResourceType::Group => &[Read, Describe, Delete],
        AclResourceType::Cluster => &[
            Create,
            ClusterAction,
            DescribeConfigs,
            AlterConfigs,
            IdempotentWrite,
            Alter,
            Describe,
        ],
        AclResourceType::TransactionalId => &[Describe, Write],
        AclResourceType::DelegationToken => &[Describe],
        AclResourceType::User => &[CreateTokens, DescribeTokens],
        AclResourceType::Any | AclResourceType::Unknown => &[],
    }
}

/// Whether an ALLOW of `granted` allows `wanted`.
fn allow_covers(granted: AclOperation, wanted: AclOperation) -> bool {
    use AclOperation::*;
    granted == wanted
        || granted == All
        || (wanted == Describe && matches!(granted, Read | Write | Delete | Alter))
        || (wanted == DescribeConfigs && granted == AlterConfigs)
}

/// Whether an ACL's principal and host are the asker's.
fn applies_to(acl: &AclBinding, who: &RequestIdentity<'_>) -> bool {
    let principal = acl.principal == who.principal || acl.principal == WILDCARD_PRINCIPAL;
    let host = acl.host == WILDCARD_HOST
        || acl
            .host
            .parse::<IpAddr>()
            .map_or(acl.host == who.host.to_string(), |ip| ip == who.host);
    principal && host
}

/// The authorizer over one image's ACLs.
#[derive(Debug, Clone, Copy)]
pub struct Authorizer<'a> {
    acls: &'a AclIndex,
    config: &'a AuthorizerConfig,
}

impl<'a> Authorizer<'a> {
    /// An authorizer reading `acls` (the image's) with these settings.
    pub fn new(acls: &'a AclIndex, config: &'a AuthorizerConfig) -> Self {
        Authorizer { acls, config }
    }

    /// May `who` do `operation` on the resource `name` of type `resource_type`?
    pub fn authorize(
        &self,
        who: &RequestIdentity<'_>,
        operation: AclOperation,
        resource_type: AclResourceType,
        name: &str,
    ) -> AuthorizationResult {
        if self.config.super_users.contains(who.principal) {
            return AuthorizationResult::Allowed;
        }
        let covering = self.acls.covering(resource_type, name);
        decide(&covering, who, operation, self.config)
    }

    /// [`Authorizer::authorize`] for many resources of one type at once (a Produce, Fetch or
    /// Metadata request names many topics): one answer per name, in order.
    pub fn authorize_all<'n>(
        &self,
        who: &RequestIdentity<'_>,
        operation: AclOperation,
        resource_type: AclResourceType,
        names: impl IntoIterator<Item = &'n str>,
    ) -> Vec<AuthorizationResult> {
        names
            .into_iter()
            .map(|name| self.authorize(who, operation, resource_type, name))
            .collect()
    }

    /// May `who` do `operation` on some resource of this type? (Kafka's
    /// `authorizeByResourceType`, which InitProducerId asks of WRITE on topics: an idempotent
    /// producer that may write to some topic needs no IDEMPOTENT_WRITE on the cluster.) Yes
    /// when `who` may do it on a resource no ACL names (a super user, or
    /// `allow.everyone.if.no.acl.found` with no ACL), or when an ALLOW naming exactly this
    /// operation (or ALL) applies to `who` on `*`, or on a name or prefix that no DENY
    /// applying to `who` takes back whole (a DENY of `*`, of the same literal name, or of a
    /// prefix of it).
    pub fn authorize_by_resource_type(
        &self,
        who: &RequestIdentity<'_>,
        operation: AclOperation,
        resource_type: AclResourceType,
    ) -> AuthorizationResult {
        // A name no ACL pattern can be written for (a NUL is refused in names).
        const UNNAMED: &str = "\0unnamed";
        if self
            .authorize(who, operation, resource_type, UNNAMED)
            .is_allowed()
        {
            return AuthorizationResult::Allowed;
        }
        let applying: Vec<&AclBinding> = self
            .acls
            .iter()
            .map(|(_, acl)| acl)
            .filter(|acl| acl.resource_type == resource_type && applies_to(acl, who))
            .filter(|acl| acl.operation == operation || acl.operation == AclOperation::All)
            .collect();
        let (deny, allow): (Vec<&AclBinding>, Vec<&AclBinding>) = applying
            .into_iter()
            .partition(|acl| acl.permission_type == AclPermissionType::Deny);
        let wildcard = |acl: &&AclBinding| {
            acl.pattern_type == PatternType::Literal && acl.resource_name == WILDCARD_RESOURCE
        };
        if deny.iter().any(wildcard) {
            return AuthorizationResult::Denied;
        }
        let taken_back = |grant: &AclBinding| {
            deny.iter().any(|d| match d.pattern_type {
                PatternType::Literal => {
                    grant.pattern_type == PatternType::Literal
                        && d.resource_name == grant.resource_name
                }
                PatternType::Prefixed => grant.resource_name.starts_with(&d.resource_name),
                _ => false,
            })
        };
        let granted = allow
            .iter()
            .filter(|a| a.permission_type == AclPermissionType::Allow)
            .any(|a| wildcard(a) || !taken_back(a));
        if granted {
            AuthorizationResult::Allowed
        } else {
            AuthorizationResult::Denied
        }
    }

    /// KIP-430's authorized operations of a resource: bit `op.code()` set for each operation of
    /// [`supported_operations`] that `who` may do.
    pub fn authorized_operations(
        &self,
        who: &RequestIdentity<'_>,
        resource_type: AclResourceType,
        name: &str,
    ) -> i32 {
        let super_user = self.config.super_users.contains(who.principal);
        let covering = self.acls.covering(resource_type, name);
        supported_operations(resource_type)
            .iter()
            .filter(|op| super_user || decide(&covering, who, **op, self.config).is_allowed())
            .fold(0, |bits, op| bits | (1 << op.code()))
    }
}

/// The decision from the ACLs that cover a resource.
fn decide(
    covering: &[&AclBinding],
    who: &RequestIdentity<'_>,
    operation: AclOperation,
    config: &AuthorizerConfig,
) -> AuthorizationResult {
    if covering.is_empty() {
        return if config.allow_everyone_if_no_acl_found {
            AuthorizationResult::Allowed
        } else {
            AuthorizationResult::Denied
        };
    }
    let mut allowed = false;
    for acl in covering.iter().filter(|acl| applies_to(acl, who)) {
        match acl.permission_type {
            AclPermissionType::Deny
                if acl.operation == operation || acl.operation == AclOperation::All =>
            {
                return AuthorizationResult::Denied;
            }
            AclPermissionType::Allow if allow_covers(acl.operation, operation) => allowed = true,
            _ => {}
        }
    }
    if allowed {
        AuthorizationResult::Allowed
    } else {
        AuthorizationResult::Denied
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// (pattern type, topic name, principal, operation, permission), host `*`.
    type Acl = (
        PatternType,
        &'static str,
        &'static str,
        AclOperation,
        AclPermissionType,
    );

    fn index(acls: &[Acl]) -> AclIndex {
        let mut index = AclIndex::default();
        for (i, (pattern_type, name, principal, operation, permission_type)) in
            acls.iter().enumerate()
        {
            let acl = AclBinding {
                resource_type: AclResourceType::Topic,
                resource_name: name.to_string(),
                pattern_type: *pattern_type,
                principal: principal.to_string(),
                host: WILDCARD_HOST.to_string(),
                operation: *operation,
                permission_type: *permission_type,
            };
            index
                .insert(uuid::Uuid::from_u128(i as u128 + 1), acl)
                .expect("fresh id");
        }
        index
    }

    /// Kafka's `authorizeByResourceType` cases, as its documentation of the method states them.
    #[test]
    fn by_resource_type_allows_when_some_resource_is_allowed() {
        use AclOperation::{All, Read, Write};
        use AclPermissionType::{Allow, Deny};
        use PatternType::{Literal, Prefixed};
        let alice = RequestIdentity {
            principal: "User:alice",
            host: IpAddr::from([10, 0, 0, 1]),
        };
        let cases: Vec<(&str, Vec<Acl>, bool)> = vec![
            ("no ACL", vec![], false),
            (
                "an ALLOW on one topic",
                vec![(Literal, "t", "User:alice", Write, Allow)],
                true,
            ),
            (
                "ALL counts",
                vec![(Prefixed, "t", "User:*", All, Allow)],
                true,
            ),
            (
                "another operation does not",
                vec![(Literal, "t", "User:alice", Read, Allow)],
                false,
            ),
            (
                "another principal's does not",
                vec![(Literal, "t", "User:bob", Write, Allow)],
                false,
            ),
            (
                "denied on that same name",
                vec![
                    (Literal, "t", "User:alice", Write, Allow),
                    (Literal, "t", "User:alice", Write, Deny),
                ],
                false,
            ),
            (
                "denied by a prefix of it",
                vec![
                    (Prefixed, "team-a", "User:alice", Write, Allow),
                    (Prefixed, "team", "User:*", Write, Deny),
                ],
                false,
            ),
            (
                "a deny of another name leaves it",
                vec![
                    (Literal, "t", "User:alice", Write, Allow),
                    (Literal, "u", "User:alice", Write, Deny),
                ],
                true,
            ),
            (
                "a deny of * takes all",
                vec![
                    (Literal, "*", "User:alice", Write, Allow),
                    (Literal, "*", "User:alice", Write, Deny),
                ],
                false,
            ),
            (
                "an allow of * wins over a named deny",
                vec![
                    (Literal, "*", "User:alice", Write, Allow),
                    (Literal, "t", "User:alice", Write, Deny),
                ],
                true,
            ),
        ];
        let config = AuthorizerConfig::default();
        for (what, acls, expected) in cases {
            let acls = index(&acls);
            let got = Authorizer::new(&acls, &config).authorize_by_resource_type(
                &alice,
                Write,
                AclResourceType::Topic,
            );
            assert_eq!(got.is_allowed(), expected, "{what}");
        }
        let empty = AclIndex::default();
        let open = AuthorizerConfig {
            allow_everyone_if_no_acl_found: true,
            ..AuthorizerConfig::default()
        };
        let got = Authorizer::new(&empty, &open).authorize_by_resource_type(
            &alice,
            Write,
            AclResourceType::Topic,
        );
        assert!(
            got.is_allowed(),
            "allow.everyone.if.no.acl.found with no ACL"
        );
        let supers = AuthorizerConfig {
            super_users: parse_super_users("User:alice"),
            ..AuthorizerConfig::default()
        };
        let denied = index(&[(Literal, "*", "User:alice", Write, Deny)]);
        let got = Authorizer::new(&denied, &supers).authorize_by_resource_type(
            &alice,
            Write,
            AclResourceType::Topic,
        );
        assert!(got.is_allowed(), "a super user");
    }
}
