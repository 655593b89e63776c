//! Kafka's ACL vocabulary: resource types, pattern types, operations and permission types with
//! their wire codes, an ACL binding (a resource pattern plus an access control entry), the
//! filters DescribeAcls and DeleteAcls take, and the two metadata records that add and remove
//! one binding (`AccessControlEntryRecord`, `RemoveAccessControlEntryRecord`).

use uuid::Uuid;

/// Defines a Kafka enum with its wire codes and names; unknown codes map to `Unknown`, as
/// Kafka's `fromCode` does, so validation can answer them with INVALID_REQUEST.
macro_rules! kafka_enum {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident = $code:literal, $text:literal;)* }) => {
        $(#[$doc])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
        pub enum $name {
            $($(#[$vdoc])* $variant,)*
        }

        impl $name {
            /// Every value, `Unknown` first.
            pub const ALL_VALUES: &'static [$name] = &[$($name::$variant,)*];

            /// Kafka's wire code.
            pub fn code(self) -> i8 {
                match self {
                    $($name::$variant => $code,)*
                }
            }

            /// From Kafka's wire code; codes this version does not know are `Unknown`.
            pub fn from_code(code: i8) -> Self {
                match code {
                    $($code => $name::$variant,)*
                    #[allow(unreachable_patterns)]
                    _ => $name::Unknown,
                }
            }

            /// Kafka's name (`TOPIC`, `PREFIXED`, `DESCRIBE_CONFIGS`, `ALLOW`).
            pub fn name(self) -> &'static str {
                match self {
                    $($name::$variant => $text,)*
                }
            }

            /// From a name in any case, with or without underscores (`Topic`,
            /// `IdempotentWrite`, `describe_configs`), as Kafka's tools accept them.
            pub fn parse(text: &str) -> Option<Self> {
                let wanted: String = text
                    .chars()
                    .filter(|c| *c != '_')
                    .map(|c| c.to_ascii_uppercase())
                    .collect();
                Self::ALL_VALUES
                    .iter()
                    .copied()
                    .find(|v| v.name().replace('_', "") == wanted)
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.name())
            }
        }
    };
}

kafka_enum! {
    /// The kind of resource an ACL protects (Kafka's `ResourceType`).
    AclResourceType {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: any type.
        Any = 1, "ANY";
        /// A topic.
        Topic = 2, "TOPIC";
        /// A consumer group.
        Group = 3, "GROUP";
        /// The cluster (its only name is `kafka-cluster`).
        Cluster = 4, "CLUSTER";
        /// A transactional id.
        TransactionalId = 5, "TRANSACTIONAL_ID";
        /// A delegation token.
        DelegationToken = 6, "DELEGATION_TOKEN";
        /// A user (delegation tokens created on a user's behalf).
        User = 7, "USER";
    }
}

kafka_enum! {
    /// How a resource pattern's name matches resource names (Kafka's `PatternType`).
    PatternType {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: any pattern type, the name compared exactly.
        Any = 1, "ANY";
        /// Filters only: every pattern that matches the named resource.
        Match = 2, "MATCH";
        /// The name itself, or every resource when it is `*`.
        Literal = 3, "LITERAL";
        /// Every resource whose name starts with the pattern's name.
        Prefixed = 4, "PREFIXED";
    }
}

kafka_enum! {
    /// What a principal does to a resource (Kafka's `AclOperation`).
    AclOperation {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: any operation.
        Any = 1, "ANY";
        /// Every operation.
        All = 2, "ALL";
        /// Read.
        Read = 3, "READ";
        /// Write.
        Write = 4, "WRITE";
        /// Create.
        Create = 5, "CREATE";
        /// Delete.
        Delete = 6, "DELETE";
        /// Alter.
        Alter = 7, "ALTER";
        /// Describe.
        Describe = 8, "DESCRIBE";
        /// Inter-broker actions.
        ClusterAction = 9, "CLUSTER_ACTION";
        /// DescribeConfigs.
        DescribeConfigs = 10, "DESCRIBE_CONFIGS";
        /// AlterConfigs.
        AlterConfigs = 11, "ALTER_CONFIGS";
        /// Idempotent produce.
        IdempotentWrite = 12, "IDEMPOTENT_WRITE";
        /// Create delegation tokens.
        CreateTokens = 13, "CREATE_TOKENS";
        /// Describe delegation tokens.
        DescribeTokens = 14, "DESCRIBE_TOKENS";
    }
}

kafka_enum! {
    /// Whether an ACL grants or refuses (Kafka's `AclPermissionType`).
    AclPermissionType {
        /// A code this version does not know.
        Unknown = 0, "UNKNOWN";
        /// Filters only: either.
        Any = 1, "ANY";
        /// Refuses; wins over any ALLOW.
        Deny = 2, "DENY";
        /// Grants.
        Allow = 3, "ALLOW";
    }
}

/// The name of the one cluster resource.
pub const CLUSTER_RESOURCE_NAME: &str = "kafka-cluster";

/// The resource name that matches every resource of its type (in a LITERAL pattern).
pub const WILDCARD_RESOURCE: &str = "*";

/// The principal that matches every principal.
pub const WILDCARD_PRINCIPAL: &str = "User:*";

/// The host that matches every client address.
pub const WILDCARD_HOST: &str = "*";

/// One ACL: a resource pattern and an access control entry (Kafka's `AclBinding`, flattened as
/// in its `StandardAcl`).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct AclBinding {
    /// Resource type.
    pub resource_type: AclResourceType,
    /// Resource name (or prefix, or `*`).
    pub resource_name: String,
    /// LITERAL or PREFIXED.
    pub pattern_type: PatternType,
    /// `Type:name`, e.g. `User:alice`, or `User:*`.
    pub principal: String,
    /// A client IP address, or `*`.
    pub host: String,
    /// Operation.
    pub operation: AclOperation,
    /// ALLOW or DENY.
    pub permission_type: AclPermissionType,
}

/// Whether `principal` has Kafka's `Type:name` form (a colon after a non-empty type).
pub fn parse_principal(principal: &str) -> Option<(&str, &str)> {
    principal
        .split_once(':')
        .filter(|(kind, _)| !kind.is_empty())
}

/// A filter over ACL bindings (DescribeAcls, DeleteAcls); `None` strings match anything.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AclBindingFilter {
    /// A type, or ANY.
    pub resource_type: AclResourceType,
    /// A name, or any.
    pub resource_name: Option<String>,
    /// LITERAL, PREFIXED, ANY (name compared exactly) or MATCH (patterns that match the
    /// named resource).
    pub pattern_type: PatternType,
    /// A principal, or any.
    pub principal: Option<String>,
    /// A host, or any.
    pub host: Option<String>,
    /// An operation, or ANY.
    pub operation: AclOperation,
    /// ALLOW, DENY, or ANY.
    pub permission_type: AclPermissionType,
}

impl AclBindingFilter {
    /// The filter that matches every binding.
    pub fn any() -> Self {
        AclBindingFilter {
            resource_type: AclResourceType::Any,
            resource_name: None,
            pattern_type: PatternType::Any,
            principal: None,
            host: None,
            operation: AclOperation::Any,
            permission_type: AclPermissionType::Any,
        }
    }

    /// Whether a field holds a code this version does not know (Kafka refuses such filters).
    pub fn is_unknown(&self) -> bool {
        self.resource_type == AclResourceType::Unknown
            || self.pattern_type == PatternType::Unknown
            || self.operation == AclOperation::Unknown
            || self.permission_type == AclPermissionType::Unknown
    }

    /// Whether `acl` passes this filter.
    pub fn matches(&self, acl: &AclBinding) -> bool {
        self.matches_pattern(acl) && self.matches_entry(acl)
    }

    fn matches_pattern(&self, acl: &AclBinding) -> bool {
        if self.resource_type != AclResourceType::Any && self.resource_type != acl.resource_type {
            return false;
        }
        let exact_type = self.pattern_type == acl.pattern_type;
        if !matches!(self.pattern_type, PatternType::Any | PatternType::Match) && !exact_type {
            return false;
        }
        let Some(name) = &self.resource_name else {
            return true;
        };
        if self.pattern_type != PatternType::Match || exact_type {
            return *name == acl.resource_name;
        }
        // MATCH: every pattern that covers the named resource.
        match acl.pattern_type {
            PatternType::Literal => {
                *name == acl.resource_name || acl.resource_name == WILDCARD_RESOURCE
            }
            PatternType::Prefixed => name.starts_with(&acl.resource_name),
            _ => false,
        }
    }

    fn matches_entry(&self, acl: &AclBinding) -> bool {
        self.principal.as_ref().is_none_or(|p| *p == acl.principal)
            && self.host.as_ref().is_none_or(|h| *h == acl.host)
            && (self.operation == AclOperation::Any || self.operation == acl.operation)
            && (self.permission_type == AclPermissionType::Any
                || self.permission_type == acl.permission_type)
    }
}

/// `AccessControlEntryRecord`: an ACL binding exists, under a controller-assigned id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessControlEntryRecord {
    /// The binding's id (DeleteAcls removes bindings by id).
    pub id: Uuid,
    /// The binding.
    pub acl: AclBinding,
}

/// `RemoveAccessControlEntryRecord`: the binding with this id is gone.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RemoveAccessControlEntryRecord {
    /// The binding's id.
    pub id: Uuid,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_names_round_trip() {
        for t in AclResourceType::ALL_VALUES {
            assert_eq!(AclResourceType::from_code(t.code()), *t);
            assert_eq!(AclResourceType::parse(t.name()), Some(*t));
        }
        assert_eq!(AclOperation::from_code(99), AclOperation::Unknown);
        assert_eq!(
            AclOperation::parse("IdempotentWrite"),
            Some(AclOperation::IdempotentWrite)
        );
        assert_eq!(
            AclOperation::parse("describe_configs"),
            Some(AclOperation::DescribeConfigs)
        );
        assert_eq!(
            AclResourceType::parse("transactional-id"),
            None,
            "dashes are not Kafka's spelling"
        );
        assert_eq!(PatternType::parse("Prefixed"), Some(PatternType::Prefixed));
        assert_eq!(AclOperation::Read.code(), 3);
        assert_eq!(AclPermissionType::Allow.code(), 3);
    }

    #[test]
    fn principals_need_a_type() {
        assert_eq!(parse_principal("User:alice"), Some(("User", "alice")));
        assert_eq!(parse_principal("User:"), Some(("User", "")));
        assert_eq!(parse_principal("alice"), None);
        assert_eq!(parse_principal(":alice"), None);
    }
}
