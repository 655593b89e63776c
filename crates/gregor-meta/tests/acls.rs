//! ACLs: the authorizer against a table of cases written from Kafka's documentation
//! ("Authorization and ACLs" and its operations-and-resources table), properties of the
//! authorizer and the ACL index, the records' encoding and snapshots, and CreateAcls /
//! DeleteAcls / DescribeAcls in the controller.

mod common;

use common::Cluster;
use gregor_meta::acl::*;
use gregor_meta::*;
use proptest::prelude::*;
use std::net::IpAddr;

use AclOperation as Op;
use AclPermissionType::{Allow, Deny};
use AclResourceType::{Cluster as ClusterRes, Group, Topic, TransactionalId};
use PatternType::{Literal, Prefixed};

fn acl(
    resource_type: AclResourceType,
    pattern_type: PatternType,
    name: &str,
    principal: &str,
    host: &str,
    operation: AclOperation,
    permission_type: AclPermissionType,
) -> AclBinding {
    AclBinding {
        resource_type,
        resource_name: name.into(),
        pattern_type,
        principal: principal.into(),
        host: host.into(),
        operation,
        permission_type,
    }
}

/// An ACL on a topic for any host.
fn topic_acl(
    pattern: PatternType,
    name: &str,
    principal: &str,
    op: Op,
    perm: AclPermissionType,
) -> AclBinding {
    acl(Topic, pattern, name, principal, "*", op, perm)
}

fn image_with(acls: &[AclBinding]) -> MetadataImage {
    let records: Vec<MetadataRecord> = acls
        .iter()
        .enumerate()
        .map(|(i, a)| {
            MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
                id: Uuid::from_u128(i as u128 + 100),
                acl: a.clone(),
            })
        })
        .collect();
    MetadataImage::from_records(&records).expect("ACL records apply")
}

fn ip(text: &str) -> IpAddr {
    text.parse().expect("test address")
}

struct Case {
    what: &'static str,
    acls: Vec<AclBinding>,
    config: AuthorizerConfig,
    principal: &'static str,
    host: &'static str,
    op: Op,
    resource: (AclResourceType, &'static str),
    allowed: bool,
}

fn config(super_users: &str, allow_everyone: bool) -> AuthorizerConfig {
    AuthorizerConfig {
        super_users: parse_super_users(super_users),
        allow_everyone_if_no_acl_found: allow_everyone,
    }
}

fn case(
    what: &'static str,
    acls: Vec<AclBinding>,
    principal: &'static str,
    op: Op,
    resource: (AclResourceType, &'static str),
    allowed: bool,
) -> Case {
    Case {
        what,
        acls,
        config: config("", false),
        principal,
        host: "10.0.0.1",
        op,
        resource,
        allowed,
    }
}

const ALICE: &str = "User:alice";
const BOB: &str = "User:bob";

fn read_orders() -> AclBinding {
    topic_acl(Literal, "orders", ALICE, Op::Read, Allow)
}

const ORDERS: (AclResourceType, &str) = (Topic, "orders");

/// With `allow.everyone.if.no.acl.found` on.
fn open(c: Case) -> Case {
    Case {
        config: config("", true),
        ..c
    }
}

/// From another client address.
fn from(host: &'static str, c: Case) -> Case {
    Case { host, ..c }
}

/// With these super users.
fn supers(users: &str, c: Case) -> Case {
    Case {
        config: config(users, false),
        ..c
    }
}

/// Grants, allow.everyone.if.no.acl.found and implied operations.
#[rustfmt::skip]
fn grant_cases() -> Vec<Case> {
    let t = |name: &str, op| vec![topic_acl(Literal, name, ALICE, op, Allow)];
    vec![
        case("no ACL, allow.everyone off: denied", vec![], ALICE, Op::Read, ORDERS, false),
        open(case("no ACL, allow.everyone on: allowed", vec![], ALICE, Op::Read, ORDERS, true)),
        open(case("allow.everyone does not apply once any ACL covers the resource",
            vec![topic_acl(Literal, "orders", BOB, Op::Read, Allow)], ALICE, Op::Read, ORDERS, false)),
        case("an ALLOW grants its operation", vec![read_orders()], ALICE, Op::Read, ORDERS, true),
        case("... and not another", vec![read_orders()], ALICE, Op::Write, ORDERS, false),
        case("... to its principal only", vec![read_orders()], BOB, Op::Read, ORDERS, false),
        case("READ implies DESCRIBE", vec![read_orders()], ALICE, Op::Describe, ORDERS, true),
        case("WRITE implies DESCRIBE", t("orders", Op::Write), ALICE, Op::Describe, ORDERS, true),
        case("DELETE implies DESCRIBE", t("orders", Op::Delete), ALICE, Op::Describe, ORDERS, true),
        case("ALTER implies DESCRIBE", t("orders", Op::Alter), ALICE, Op::Describe, ORDERS, true),
        case("CREATE does not imply DESCRIBE", t("orders", Op::Create), ALICE, Op::Describe, ORDERS, false),
        case("DESCRIBE does not imply READ", t("orders", Op::Describe), ALICE, Op::Read, ORDERS, false),
        case("ALTER_CONFIGS implies DESCRIBE_CONFIGS",
            t("orders", Op::AlterConfigs), ALICE, Op::DescribeConfigs, ORDERS, true),
        case("DESCRIBE_CONFIGS does not imply ALTER_CONFIGS",
            t("orders", Op::DescribeConfigs), ALICE, Op::AlterConfigs, ORDERS, false),
        case("ALTER_CONFIGS does not imply DESCRIBE",
            t("orders", Op::AlterConfigs), ALICE, Op::Describe, ORDERS, false),
        case("ALL covers CREATE", t("orders", Op::All), ALICE, Op::Create, ORDERS, true),
    ]
}

/// DENY against ALLOW, principals and super users.
#[rustfmt::skip]
fn deny_cases() -> Vec<Case> {
    let everyone_all = || topic_acl(Literal, "orders", "User:*", Op::All, Allow);
    let deny = |who, op| topic_acl(Literal, "orders", who, op, Deny);
    vec![
        case("DENY wins over ALLOW",
            vec![everyone_all(), deny(ALICE, Op::Read)], ALICE, Op::Read, ORDERS, false),
        case("a DENY refuses only its operation",
            vec![everyone_all(), deny(ALICE, Op::Read)], ALICE, Op::Write, ORDERS, true),
        case("a DENY of READ does not refuse the DESCRIBE an ALLOW of READ implies",
            vec![read_orders(), deny(ALICE, Op::Read)], ALICE, Op::Describe, ORDERS, true),
        case("DENY ALL refuses DESCRIBE",
            vec![read_orders(), deny(ALICE, Op::All)], ALICE, Op::Describe, ORDERS, false),
        case("a DENY for another principal does not apply",
            vec![read_orders(), deny(BOB, Op::Read)], ALICE, Op::Read, ORDERS, true),
        case("a DENY for User:* applies to everyone",
            vec![read_orders(), deny("User:*", Op::Read)], ALICE, Op::Read, ORDERS, false),
        case("User:* matches every principal",
            vec![topic_acl(Literal, "orders", "User:*", Op::Read, Allow)], BOB, Op::Read, ORDERS, true),
        case("principal types differ: Group:alice is not User:alice",
            vec![topic_acl(Literal, "orders", "Group:alice", Op::Read, Allow)], ALICE, Op::Read, ORDERS, false),
        supers(" User:admin ; User:alice", case("super users are allowed whatever the ACLs say",
            vec![deny(ALICE, Op::All)], ALICE, Op::Write, ORDERS, true)),
        supers("User:admin", case("others are not super users", vec![], ALICE, Op::Write, ORDERS, false)),
    ]
}

/// Resource patterns, resource types and hosts.
#[rustfmt::skip]
fn pattern_cases() -> Vec<Case> {
    let t = |pattern, name: &str| vec![topic_acl(pattern, name, ALICE, Op::Read, Allow)];
    let on_host = |host| vec![acl(Topic, Literal, "orders", ALICE, host, Op::Read, Allow)];
    vec![
        case("the wildcard resource name covers every topic", t(Literal, "*"), ALICE, Op::Read, ORDERS, true),
        case("a PREFIXED pattern covers names that start with it", t(Prefixed, "ord"), ALICE, Op::Read, ORDERS, true),
        case("a PREFIXED pattern covers its own name", t(Prefixed, "orders"), ALICE, Op::Read, ORDERS, true),
        case("a PREFIXED pattern does not cover a shorter name", t(Prefixed, "orders-eu"), ALICE, Op::Read, ORDERS, false),
        case("a LITERAL pattern is not a prefix", t(Literal, "ord"), ALICE, Op::Read, ORDERS, false),
        case("a PREFIXED `*` is a plain prefix, not a wildcard", t(Prefixed, "*"), ALICE, Op::Read, ORDERS, false),
        case("a prefixed DENY wins over a literal ALLOW",
            vec![read_orders(), topic_acl(Prefixed, "or", ALICE, Op::Read, Deny)], ALICE, Op::Read, ORDERS, false),
        case("ACLs of another resource type do not apply",
            vec![acl(Group, Literal, "orders", ALICE, "*", Op::Read, Allow)], ALICE, Op::Read, ORDERS, false),
        case("group READ", vec![acl(Group, Prefixed, "app-", ALICE, "*", Op::Read, Allow)],
            ALICE, Op::Read, (Group, "app-1"), true),
        case("cluster IDEMPOTENT_WRITE",
            vec![acl(ClusterRes, Literal, "kafka-cluster", ALICE, "*", Op::IdempotentWrite, Allow)],
            ALICE, Op::IdempotentWrite, (ClusterRes, "kafka-cluster"), true),
        case("transactional id WRITE implies DESCRIBE",
            vec![acl(TransactionalId, Literal, "tx", ALICE, "*", Op::Write, Allow)],
            ALICE, Op::Describe, (TransactionalId, "tx"), true),
        case("an ACL for the client's address applies", on_host("10.0.0.1"), ALICE, Op::Read, ORDERS, true),
        from("10.0.0.2", case("an ACL for another address does not",
            on_host("10.0.0.1"), ALICE, Op::Read, ORDERS, false)),
        from("::1", case("IPv6 addresses compare as addresses",
            on_host("0:0:0:0:0:0:0:1"), ALICE, Op::Read, ORDERS, true)),
    ]
}

fn documented_cases() -> Vec<Case> {
    let mut cases = grant_cases();
    cases.extend(deny_cases());
    cases.extend(pattern_cases());
    cases
}

#[test]
fn the_authorizer_follows_kafkas_documented_rules() {
    let mut failures = Vec::new();
    for c in documented_cases() {
        let image = image_with(&c.acls);
        let authorizer = Authorizer::new(image.acls(), &c.config);
        let who = RequestIdentity {
            principal: c.principal,
            host: ip(c.host),
        };
        let got = authorizer
            .authorize(&who, c.op, c.resource.0, c.resource.1)
            .is_allowed();
        if got != c.allowed {
            failures.push(format!(
                "{}: expected allowed={} got {got}",
                c.what, c.allowed
            ));
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}

#[test]
fn batch_answers_and_authorized_operations() {
    let image = image_with(&[
        topic_acl(Prefixed, "pay", ALICE, Op::Write, Allow),
        topic_acl(Literal, "orders", ALICE, Op::AlterConfigs, Allow),
    ]);
    let cfg = config("", false);
    let authorizer = Authorizer::new(image.acls(), &cfg);
    let who = RequestIdentity {
        principal: ALICE,
        host: ip("127.0.0.1"),
    };
    let answers = authorizer.authorize_all(&who, Op::Write, Topic, ["payments", "orders", "pay"]);
    let allowed: Vec<bool> = answers.iter().map(|a| a.is_allowed()).collect();
    assert_eq!(allowed, [true, false, true]);

    let bits = |ops: &[Op]| ops.iter().fold(0i32, |b, op| b | 1 << op.code());
    assert_eq!(
        authorizer.authorized_operations(&who, Topic, "payments"),
        bits(&[Op::Write, Op::Describe])
    );
    assert_eq!(
        authorizer.authorized_operations(&who, Topic, "orders"),
        bits(&[Op::AlterConfigs, Op::DescribeConfigs])
    );
    let admin_cfg = config("User:alice", false);
    let as_super = Authorizer::new(image.acls(), &admin_cfg);
    assert_eq!(
        as_super.authorized_operations(&who, Group, "g"),
        bits(&[Op::Read, Op::Describe, Op::Delete])
    );
}

#[test]
fn authorizer_settings_come_from_the_broker_config() {
    use gregor_meta::config::StaticBrokerConfig;
    let none = StaticBrokerConfig::from_pairs([("node.id", "1")]).unwrap();
    assert_eq!(AuthorizerConfig::from_static(&none), None);
    let kafka_name = StaticBrokerConfig::from_pairs([
        (
            "authorizer.class.name",
            "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        ),
        ("super.users", "User:admin;User:ops"),
        ("allow.everyone.if.no.acl.found", "true"),
    ])
    .unwrap();
    let cfg = AuthorizerConfig::from_static(&kafka_name).expect("authorizer on");
    assert!(cfg.allow_everyone_if_no_acl_found);
    assert_eq!(
        cfg.super_users.iter().collect::<Vec<_>>(),
        ["User:admin", "User:ops"]
    );
    let gregor_name =
        StaticBrokerConfig::from_pairs([("authorizer.class.name", GREGOR_AUTHORIZER)]).unwrap();
    assert_eq!(
        AuthorizerConfig::from_static(&gregor_name),
        Some(AuthorizerConfig::default())
    );
    let zk = StaticBrokerConfig::from_pairs([(
        "authorizer.class.name",
        "kafka.security.authorizer.AclAuthorizer",
    )]);
    assert!(zk.is_err(), "ZooKeeper's authorizer is refused");
}

// ---- properties ----

fn arb_acl() -> impl Strategy<Value = AclBinding> {
    (
        prop::sample::select(vec![Topic, Group]),
        prop::sample::select(vec![Literal, Prefixed]),
        prop::sample::select(vec!["a", "ab", "abc", "b", "*"]),
        prop::sample::select(vec![ALICE, BOB, "User:*"]),
        prop::sample::select(vec!["*", "10.0.0.1", "10.0.0.2"]),
        prop::sample::select(Op::ALL_VALUES[2..13].to_vec()),
        prop::sample::select(vec![Allow, Deny]),
    )
        .prop_map(|(t, p, n, who, host, op, perm)| acl(t, p, n, who, host, op, perm))
}

#[derive(Debug, Clone)]
struct Query {
    principal: &'static str,
    host: &'static str,
    op: Op,
    resource_type: AclResourceType,
    name: &'static str,
}

fn arb_query() -> impl Strategy<Value = Query> {
    (
        prop::sample::select(vec![ALICE, BOB]),
        prop::sample::select(vec!["10.0.0.1", "10.0.0.2"]),
        prop::sample::select(Op::ALL_VALUES[3..13].to_vec()),
        prop::sample::select(vec![Topic, Group]),
        prop::sample::select(vec!["a", "ab", "abc", "b", "ba", "*"]),
    )
        .prop_map(|(principal, host, op, resource_type, name)| Query {
            principal,
            host,
            op,
            resource_type,
            name,
        })
}

fn allowed(acls: &[AclBinding], allow_everyone: bool, q: &Query) -> bool {
    let image = image_with(acls);
    let cfg = config("", allow_everyone);
    let who = RequestIdentity {
        principal: q.principal,
        host: ip(q.host),
    };
    Authorizer::new(image.acls(), &cfg)
        .authorize(&who, q.op, q.resource_type, q.name)
        .is_allowed()
}

/// Whether a pattern covers a resource, straight from the documentation's definitions.
fn covers(a: &AclBinding, t: AclResourceType, name: &str) -> bool {
    a.resource_type == t
        && match a.pattern_type {
            Literal => a.resource_name == name || a.resource_name == "*",
            Prefixed => name.starts_with(a.resource_name.as_str()),
            _ => false,
        }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn adding_a_deny_never_grants(
        acls in prop::collection::vec(arb_acl(), 0..8),
        mut deny in arb_acl(),
        q in arb_query(),
        allow_everyone in any::<bool>(),
    ) {
        deny.permission_type = Deny;
        let before = allowed(&acls, allow_everyone, &q);
        let mut more = acls.clone();
        more.push(deny);
        prop_assert!(!allowed(&more, allow_everyone, &q) || before);
    }

    #[test]
    fn adding_an_allow_never_revokes(
        acls in prop::collection::vec(arb_acl(), 0..8),
        mut allow in arb_acl(),
        q in arb_query(),
        allow_everyone in any::<bool>(),
    ) {
        allow.permission_type = Allow;
        let before = allowed(&acls, allow_everyone, &q);
        let mut more = acls.clone();
        more.push(allow);
        // The one exception, by design: the first ACL on a resource ends
        // allow.everyone.if.no.acl.found for it.
        let first_acl = allow_everyone && !acls.iter().any(|a| covers(a, q.resource_type, q.name));
        prop_assert!(!before || first_acl || allowed(&more, allow_everyone, &q));
    }

    #[test]
    fn a_single_allow_grants_exactly_where_its_pattern_covers(
        mut a in arb_acl(),
        q in arb_query(),
    ) {
        a.permission_type = Allow;
        a.operation = Op::All;
        a.principal = "User:*".into();
        a.host = "*".into();
        prop_assert_eq!(allowed(&[a.clone()], false, &q), covers(&a, q.resource_type, q.name));
    }

    #[test]
    fn the_index_finds_exactly_the_covering_acls(
        acls in prop::collection::vec(arb_acl(), 0..12),
        q in arb_query(),
    ) {
        let image = image_with(&acls);
        let mut got: Vec<AclBinding> =
            image.acls().covering(q.resource_type, q.name).into_iter().cloned().collect();
        let mut want: Vec<AclBinding> =
            acls.iter().filter(|a| covers(a, q.resource_type, q.name)).cloned().collect();
        got.sort();
        want.sort();
        prop_assert_eq!(got, want);
    }

    #[test]
    fn acl_records_round_trip_through_bytes_and_snapshots(
        acls in prop::collection::vec(arb_acl(), 0..12),
        remove in prop::collection::vec(any::<prop::sample::Index>(), 0..6),
    ) {
        let mut c = Cluster::new(&[("node.id", "0")]);
        let created = c.controller.create_acls(&acls);
        c.commit(&created.records);
        let ids: Vec<Uuid> = c.image.acls().iter().map(|(id, _)| *id).collect();
        for i in remove {
            if ids.is_empty() { break; }
            let id = ids[i.index(ids.len())];
            if c.image.acls().get(&id).is_some() {
                c.commit(&[MetadataRecord::RemoveAccessControlEntry(
                    RemoveAccessControlEntryRecord { id },
                )]);
            }
        }
        for r in &c.log {
            prop_assert_eq!(&MetadataRecord::decode(&r.encode()).unwrap(), r);
        }
        let from_snapshot = MetadataImage::from_records(&c.image.to_records()).unwrap();
        prop_assert_eq!(&from_snapshot, &c.image);
        prop_assert_eq!(c.controller.image(), &c.image);
    }
}

// ---- records ----

#[test]
fn records_that_no_encoder_writes_are_refused() {
    let good = MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
        id: Uuid::from_u128(9),
        acl: topic_acl(Literal, "t", ALICE, Op::Read, Allow),
    });
    let bytes = good.encode();
    assert_eq!(MetadataRecord::decode(&bytes), Ok(good));
    // The last byte is the permission type: ANY (1) is a filter value, never stored.
    let mut any_permission = bytes.clone();
    *any_permission.last_mut().unwrap() = 1;
    assert!(matches!(
        MetadataRecord::decode(&any_permission),
        Err(DecodeError::Invalid {
            field: "acl permission type",
            ..
        })
    ));
    for n in 0..bytes.len() {
        assert!(
            MetadataRecord::decode(&bytes[..n]).is_err(),
            "prefix of {n} bytes"
        );
    }
}

#[test]
fn the_image_refuses_a_reused_id_and_an_unknown_removal() {
    let mut image = image_with(&[topic_acl(Literal, "t", ALICE, Op::Read, Allow)]);
    let reuse = MetadataRecord::AccessControlEntry(AccessControlEntryRecord {
        id: Uuid::from_u128(100),
        acl: topic_acl(Literal, "u", ALICE, Op::Read, Allow),
    });
    assert!(image.apply(&reuse).is_err());
    let unknown = MetadataRecord::RemoveAccessControlEntry(RemoveAccessControlEntryRecord {
        id: Uuid::from_u128(5),
    });
    assert!(image.apply(&unknown).is_err());
    assert_eq!(image.acls().len(), 1);
    let delta = image
        .apply(&MetadataRecord::RemoveAccessControlEntry(
            RemoveAccessControlEntryRecord {
                id: Uuid::from_u128(100),
            },
        ))
        .unwrap();
    assert!(delta.changed_acls.contains(&Uuid::from_u128(100)));
    assert!(image.acls().is_empty());
}

// ---- controller ----

fn error_of(r: &Result<(), ApiError>) -> Option<(ResponseError, String)> {
    r.as_ref().err().map(|e| (e.code, e.message.clone()))
}

#[test]
fn create_acls_validates_each_binding_like_kafka() {
    let mut c = Cluster::new(&[("node.id", "0")]);
    let ok = topic_acl(Literal, "t", ALICE, Op::Read, Allow);
    let with = |f: &dyn Fn(&mut AclBinding)| {
        let mut a = ok.clone();
        f(&mut a);
        a
    };
    let requests = vec![
        ok.clone(),
        with(&|a| a.resource_type = AclResourceType::Any),
        with(&|a| a.resource_type = AclResourceType::Unknown),
        with(&|a| a.resource_type = AclResourceType::DelegationToken),
        with(&|a| a.pattern_type = PatternType::Match),
        with(&|a| a.pattern_type = PatternType::Any),
        with(&|a| a.operation = Op::Any),
        with(&|a| a.operation = Op::Unknown),
        with(&|a| a.permission_type = AclPermissionType::Any),
        with(&|a| a.principal = "alice".into()),
        with(&|a| a.resource_name = String::new()),
        with(&|a| {
            a.resource_type = ClusterRes;
            a.resource_name = "my-cluster".into();
        }),
        with(&|a| {
            a.resource_type = ClusterRes;
            a.resource_name = "kafka-cluster".into();
            a.operation = Op::IdempotentWrite;
        }),
        ok.clone(),
    ];
    let res = c.controller.create_acls(&requests);
    let messages: Vec<Option<String>> = res
        .response
        .iter()
        .map(|r| {
            error_of(r).map(|(code, m)| {
                assert_eq!(code, ResponseError::InvalidRequest, "{m}");
                m
            })
        })
        .collect();
    let expected: Vec<Option<&str>> = vec![
        None,
        Some("Invalid resourceType ANY"),
        Some("Invalid resourceType UNKNOWN"),
        Some("ACLs on DELEGATION_TOKEN resources are not supported: Gregor has no delegation tokens"),
        Some("Invalid patternType MATCH"),
        Some("Invalid patternType ANY"),
        Some("Invalid operation ANY"),
        Some("Invalid operation UNKNOWN"),
        Some("Invalid permissionType ANY"),
        Some("Could not parse principal from `alice` (no colon is present separating the principal type from the principal name)"),
        Some("Invalid empty resource name"),
        Some("The only valid name for the CLUSTER resource is kafka-cluster"),
        None,
        None,
    ];
    let expected: Vec<Option<String>> = expected
        .into_iter()
        .map(|m| m.map(str::to_string))
        .collect();
    assert_eq!(messages, expected);
    // The duplicate in the request made no second record.
    assert_eq!(res.records.len(), 2);
    c.commit(&res.records);
    // Creating an existing binding again succeeds and writes nothing.
    let again = c.controller.create_acls(std::slice::from_ref(&ok));
    assert!(again.records.is_empty());
    assert_eq!(again.response, vec![Ok(())]);
}

/// A cluster with five ACLs committed.
fn cluster_with_acls() -> Cluster {
    let mut c = Cluster::new(&[("node.id", "0")]);
    let acls = vec![
        topic_acl(Literal, "orders", ALICE, Op::Read, Allow),
        topic_acl(Literal, "*", BOB, Op::Read, Allow),
        topic_acl(Prefixed, "ord", BOB, Op::Write, Allow),
        topic_acl(Literal, "other", ALICE, Op::Read, Deny),
        acl(Group, Literal, "orders", ALICE, "*", Op::Read, Allow),
    ];
    let res = c.controller.create_acls(&acls);
    c.commit(&res.records);
    c
}

fn filter(t: AclResourceType, name: Option<&str>, p: PatternType) -> AclBindingFilter {
    AclBindingFilter {
        resource_type: t,
        resource_name: name.map(str::to_string),
        pattern_type: p,
        ..AclBindingFilter::any()
    }
}

/// `TYPE:PATTERN:name` of each binding, sorted.
fn names(v: Vec<AclBinding>) -> Vec<String> {
    let mut out: Vec<String> = v
        .iter()
        .map(|a| format!("{}:{}:{}", a.resource_type, a.pattern_type, a.resource_name))
        .collect();
    out.sort();
    out
}

fn described(c: &Cluster, f: &AclBindingFilter) -> Vec<String> {
    names(describe_acls(&c.image, f).unwrap())
}

#[test]
fn describe_acls_by_filter() {
    let c = cluster_with_acls();
    assert_eq!(described(&c, &AclBindingFilter::any()).len(), 5);
    // ANY: every pattern type, the name compared exactly.
    assert_eq!(
        described(
            &c,
            &filter(AclResourceType::Any, Some("orders"), PatternType::Any)
        ),
        ["GROUP:LITERAL:orders", "TOPIC:LITERAL:orders"]
    );
    // MATCH: every pattern that covers topic `orders`.
    assert_eq!(
        described(&c, &filter(Topic, Some("orders"), PatternType::Match)),
        [
            "TOPIC:LITERAL:*",
            "TOPIC:LITERAL:orders",
            "TOPIC:PREFIXED:ord"
        ]
    );
    assert_eq!(
        described(&c, &filter(Topic, None, Prefixed)),
        ["TOPIC:PREFIXED:ord"]
    );
    let unknown = filter(AclResourceType::Unknown, None, PatternType::Any);
    assert_eq!(
        describe_acls(&c.image, &unknown).unwrap_err().code,
        ResponseError::InvalidRequest
    );
}

#[test]
fn delete_acls_by_filter() {
    let mut c = cluster_with_acls();
    // Two overlapping filters: both list the shared bindings, which are removed once.
    let by_bob = AclBindingFilter {
        principal: Some(BOB.into()),
        ..AclBindingFilter::any()
    };
    let unknown = filter(AclResourceType::Unknown, None, PatternType::Any);
    let deleted = c.controller.delete_acls(&[
        filter(Topic, Some("orders"), PatternType::Match),
        by_bob,
        unknown,
    ]);
    let lists: Vec<Result<Vec<String>, ResponseError>> = deleted
        .response
        .iter()
        .map(|r| r.clone().map(names).map_err(|e| e.code))
        .collect();
    let strings = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
    assert_eq!(
        lists,
        vec![
            Ok(strings(&[
                "TOPIC:LITERAL:*",
                "TOPIC:LITERAL:orders",
                "TOPIC:PREFIXED:ord"
            ])),
            Ok(strings(&["TOPIC:LITERAL:*", "TOPIC:PREFIXED:ord"])),
            Err(ResponseError::InvalidRequest),
        ]
    );
    assert_eq!(deleted.records.len(), 3);
    c.commit(&deleted.records);
    assert_eq!(
        described(&c, &AclBindingFilter::any()),
        ["GROUP:LITERAL:orders", "TOPIC:LITERAL:other"]
    );
}
