//! `gregor acls`: what `kafka-acls.sh --bootstrap-server` does: add, remove and list ACL
//! bindings with CreateAcls, DeleteAcls and DescribeAcls, with its flags (`--producer` and
//! `--consumer` included) and its output lines.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io::BufRead;

use anyhow::{anyhow, bail, Result};
use clap::ArgGroup;
use gregor_client::{Admin, Target};
use gregor_meta::acl::{
    parse_principal, supported_operations, AclOperation, AclPermissionType, AclResourceType,
    PatternType, CLUSTER_RESOURCE_NAME, WILDCARD_HOST,
};
use kafka_protocol::messages::create_acls_request::AclCreation;
use kafka_protocol::messages::delete_acls_request::DeleteAclsFilter;
use kafka_protocol::messages::{CreateAclsRequest, DeleteAclsRequest, DescribeAclsRequest};
use kafka_protocol::protocol::StrBytes;

use super::common::ConnectionArgs;

/// Add, remove or list ACLs.
#[derive(Debug, Clone, clap::Args)]
#[command(group(
    ArgGroup::new("action")
        .required(true)
        .multiple(false)
        .args(["add", "remove", "list"])
))]
pub struct AclsArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Add ACLs.
    #[arg(long)]
    pub add: bool,
    /// Remove ACLs.
    #[arg(long)]
    pub remove: bool,
    /// List ACLs (of the given resources, or all).
    #[arg(long)]
    pub list: bool,
    /// Principal to allow, as Type:name (User:alice); repeatable.
    #[arg(long, value_name = "PRINCIPAL")]
    pub allow_principal: Vec<String>,
    /// Principal to deny; repeatable.
    #[arg(long, value_name = "PRINCIPAL")]
    pub deny_principal: Vec<String>,
    /// Host (IP) the allow ACLs apply to; `*` when left out.
    #[arg(long, value_name = "HOST")]
    pub allow_host: Vec<String>,
    /// Host (IP) the deny ACLs apply to; `*` when left out.
    #[arg(long, value_name = "HOST")]
    pub deny_host: Vec<String>,
    /// With --list: only the ACLs of this principal; repeatable.
    #[arg(long, value_name = "PRINCIPAL")]
    pub principal: Vec<String>,
    /// Operation (Read, Write, Create, Delete, Alter, Describe, ClusterAction,
    /// DescribeConfigs, AlterConfigs, IdempotentWrite, All); repeatable. Default: All.
    #[arg(long, value_name = "OP")]
    pub operation: Vec<String>,
    /// Topic resource; repeatable (`*` for all topics).
    #[arg(long, value_name = "TOPIC")]
    pub topic: Vec<String>,
    /// Consumer group resource; repeatable.
    #[arg(long, value_name = "GROUP")]
    pub group: Vec<String>,
    /// The cluster resource.
    #[arg(long)]
    pub cluster: bool,
    /// Transactional id resource; repeatable.
    #[arg(long, value_name = "ID")]
    pub transactional_id: Vec<String>,
    /// literal, prefixed, or for --list and --remove also match and any.
    #[arg(long, value_name = "TYPE", default_value = "literal")]
    pub resource_pattern_type: String,
    /// Convenience: the ACLs a producer needs (topic Write, Describe, Create; transactional id
    /// Write, Describe; cluster IdempotentWrite with --idempotent).
    #[arg(long)]
    pub producer: bool,
    /// Convenience: the ACLs a consumer needs (topic Read, Describe; group Read).
    #[arg(long)]
    pub consumer: bool,
    /// With --producer: IdempotentWrite on the cluster too.
    #[arg(long)]
    pub idempotent: bool,
    /// Do not ask before removing.
    #[arg(long)]
    pub force: bool,
}

/// A resource pattern or filter, printed as Kafka's `ResourcePattern(...)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Resource {
    pub resource_type: AclResourceType,
    pub name: String,
    pub pattern_type: PatternType,
}

impl fmt::Display for Resource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "ResourcePattern(resourceType={}, name={}, patternType={})",
            self.resource_type, self.name, self.pattern_type
        )
    }
}

/// An access control entry, printed as Kafka's `(principal=..., ...)`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Ace {
    pub principal: String,
    pub host: String,
    pub operation: AclOperation,
    pub permission: AclPermissionType,
}

impl fmt::Display for Ace {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "(principal={}, host={}, operation={}, permissionType={})",
            self.principal, self.host, self.operation, self.permission
        )
    }
}

/// ACL entries by resource (pattern or filter), sorted.
pub type ResourceAcls = BTreeMap<Resource, BTreeSet<Ace>>;

/// Kafka's tool spelling of an operation (`IdempotentWrite`).
fn operation_name(op: AclOperation) -> String {
    op.name()
        .split('_')
        .map(|w| {
            let mut c = w.chars();
            c.next().map_or(String::new(), |first| {
                first.to_string() + &c.as_str().to_ascii_lowercase()
            })
        })
        .collect()
}

fn parse_pattern_type(text: &str) -> Result<PatternType> {
    match PatternType::parse(text) {
        Some(p @ (PatternType::Literal | PatternType::Prefixed)) => Ok(p),
        Some(p @ (PatternType::Match | PatternType::Any)) => Ok(p),
        _ => bail!("--resource-pattern-type: unknown pattern type {text:?} (literal, prefixed, match, any)"),
    }
}

/// The resources named on the command line; the cluster only with a LITERAL pattern type.
pub fn resources(args: &AclsArgs, pattern_type: PatternType) -> Vec<Resource> {
    let named = |t: AclResourceType, names: &[String]| {
        names
            .iter()
            .map(move |n| Resource {
                resource_type: t,
                name: n.trim().to_string(),
                pattern_type,
            })
            .collect::<Vec<_>>()
    };
    let mut out = named(AclResourceType::Topic, &args.topic);
    if pattern_type == PatternType::Literal && (args.cluster || args.idempotent) {
        out.push(Resource {
            resource_type: AclResourceType::Cluster,
            name: CLUSTER_RESOURCE_NAME.to_string(),
            pattern_type,
        });
    }
    out.extend(named(AclResourceType::Group, &args.group));
    out.extend(named(
        AclResourceType::TransactionalId,
        &args.transactional_id,
    ));
    out
}

fn principals(list: &[String]) -> Result<Vec<String>> {
    list.iter()
        .map(|p| {
            let p = p.trim();
            parse_principal(p)
                .map(|_| p.to_string())
                .ok_or_else(|| anyhow!("Could not parse principal from `{p}` (no colon is present separating the principal type from the principal name)"))
        })
        .collect()
}

/// The entries the allow/deny principal and host flags make for `operations`.
fn entries(args: &AclsArgs, operations: &[AclOperation]) -> Result<BTreeSet<Ace>> {
    let mut out = BTreeSet::new();
    let sides = [
        (
            &args.allow_principal,
            &args.allow_host,
            AclPermissionType::Allow,
        ),
        (
            &args.deny_principal,
            &args.deny_host,
            AclPermissionType::Deny,
        ),
    ];
    for (who, hosts, permission) in sides {
        let hosts: Vec<String> = if hosts.is_empty() {
            vec![WILDCARD_HOST.to_string()]
        } else {
            hosts.iter().map(|h| h.trim().to_string()).collect()
        };
        for principal in principals(who)? {
            for host in &hosts {
                for &operation in operations {
                    out.insert(Ace {
                        principal: principal.clone(),
                        host: host.clone(),
                        operation,
                        permission,
                    });
                }
            }
        }
    }
    Ok(out)
}

fn cli_operations(args: &AclsArgs) -> Result<Vec<AclOperation>> {
    if args.operation.is_empty() {
        return Ok(vec![AclOperation::All]);
    }
    args.operation
        .iter()
        .map(|o| match AclOperation::parse(o.trim()) {
            Some(op) if !matches!(op, AclOperation::Any | AclOperation::Unknown) => Ok(op),
            _ => Err(anyhow!("--operation: unknown operation {o:?}")),
        })
        .collect()
}

/// What --add or --remove acts on: entries by resource (for --remove, empty entries mean every
/// ACL of the resource filter).
pub fn plan(args: &AclsArgs) -> Result<ResourceAcls> {
    check_args(args)?;
    let pattern_type = parse_pattern_type(&args.resource_pattern_type)?;
    if args.add && !matches!(pattern_type, PatternType::Literal | PatternType::Prefixed) {
        bail!(
            "A '--resource-pattern-type' value of '{pattern_type}' is not valid when adding acls."
        );
    }
    let resources = resources(args, pattern_type);
    if resources.is_empty() {
        bail!("You must provide at least one resource: --topic <topic> or --cluster or --group <group> or --transactional-id <id>");
    }
    let mut out = ResourceAcls::new();
    if !args.producer && !args.consumer {
        let aces = entries(args, &cli_operations(args)?)?;
        for r in resources.iter() {
            out.insert(r.clone(), aces.clone());
        }
    }
    use AclOperation::*;
    for r in &resources {
        let ops: &[AclOperation] = match r.resource_type {
            AclResourceType::Topic if args.producer && args.consumer => {
                &[Write, Describe, Create, Read]
            }
            AclResourceType::Topic if args.producer => &[Write, Describe, Create],
            AclResourceType::Topic if args.consumer => &[Read, Describe],
            AclResourceType::TransactionalId if args.producer => &[Write, Describe],
            AclResourceType::Cluster if args.producer && args.idempotent => &[IdempotentWrite],
            AclResourceType::Group if args.consumer => &[Read],
            _ => continue,
        };
        out.insert(r.clone(), entries(args, ops)?);
    }
    validate_operations(&out)?;
    Ok(out)
}

fn validate_operations(plan: &ResourceAcls) -> Result<()> {
    for (resource, aces) in plan {
        let valid = supported_operations(resource.resource_type);
        if aces
            .iter()
            .any(|a| a.operation != AclOperation::All && !valid.contains(&a.operation))
        {
            let mut names: Vec<String> = valid.iter().map(|o| operation_name(*o)).collect();
            names.push("All".into());
            bail!(
                "ResourceType {} only supports operations {}",
                resource.resource_type,
                names.join(", ")
            );
        }
    }
    Ok(())
}

fn check_args(args: &AclsArgs) -> Result<()> {
    let has_principals = !args.allow_principal.is_empty() || !args.deny_principal.is_empty();
    if args.list && (has_principals || !args.allow_host.is_empty() || !args.deny_host.is_empty()) {
        bail!("--list takes --principal, not --allow-principal, --deny-principal, --allow-host or --deny-host");
    }
    if args.list && (args.producer || args.consumer) {
        bail!("--producer and --consumer go with --add or --remove");
    }
    if (args.producer || args.consumer)
        && (!args.operation.is_empty()
            || !args.deny_principal.is_empty()
            || !args.deny_host.is_empty())
    {
        bail!("--producer and --consumer cannot be combined with --operation, --deny-principal or --deny-host");
    }
    if args.producer && args.topic.is_empty() {
        bail!("With --producer you must specify a --topic");
    }
    if args.consumer
        && (args.topic.is_empty()
            || args.group.is_empty()
            || (!args.producer && (args.cluster || !args.transactional_id.is_empty())))
    {
        bail!("With --consumer you must specify a --topic and a --group and no --cluster or --transactional-id option should be specified.");
    }
    if args.idempotent && !args.producer {
        bail!("--idempotent goes with --producer");
    }
    if args.add && !has_principals {
        bail!(
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        );
    }
    Ok(())
}

/// The lines Kafka's tool prints for one resource and its entries.
pub fn resource_block(heading: &str, resource: &Resource, aces: &BTreeSet<Ace>) -> String {
    let lines: Vec<String> = aces.iter().map(|a| format!("\t{a}")).collect();
    format!("{heading} `{resource}`: \n {} \n", lines.join("\n"))
}

fn s(v: &str) -> StrBytes {
    StrBytes::from_string(v.to_string())
}

fn kafka_error(what: &str, code: i16, message: Option<&StrBytes>) -> anyhow::Error {
    let code = gregor_client::KafkaCode(code);
    match message.filter(|m| !m.is_empty()) {
        Some(m) => anyhow!("Error while executing ACL command: {what}: {code}: {m}"),
        None => anyhow!("Error while executing ACL command: {what}: {code}"),
    }
}

async fn create(admin: &Admin, resource: &Resource, aces: &BTreeSet<Ace>) -> Result<()> {
    let creations: Vec<AclCreation> = aces
        .iter()
        .map(|a| {
            AclCreation::default()
                .with_resource_type(resource.resource_type.code())
                .with_resource_name(s(&resource.name))
                .with_resource_pattern_type(resource.pattern_type.code())
                .with_principal(s(&a.principal))
                .with_host(s(&a.host))
                .with_operation(a.operation.code())
                .with_permission_type(a.permission.code())
        })
        .collect();
    let request = CreateAclsRequest::default().with_creations(creations);
    let (_, resp) = admin
        .client()
        .send::<CreateAclsRequest, _>(&Target::Any, |_| Ok(request.clone()))
        .await?;
    if let Some(r) = resp.results.iter().find(|r| r.error_code != 0) {
        return Err(kafka_error(
            "CreateAcls",
            r.error_code,
            r.error_message.as_ref(),
        ));
    }
    Ok(())
}

fn delete_filter(resource: &Resource, ace: Option<&Ace>) -> DeleteAclsFilter {
    let f = DeleteAclsFilter::default()
        .with_resource_type_filter(resource.resource_type.code())
        .with_resource_name_filter(Some(s(&resource.name)))
        .with_pattern_type_filter(resource.pattern_type.code());
    match ace {
        None => f
            .with_principal_filter(None)
            .with_host_filter(None)
            .with_operation(AclOperation::Any.code())
            .with_permission_type(AclPermissionType::Any.code()),
        Some(a) => f
            .with_principal_filter(Some(s(&a.principal)))
            .with_host_filter(Some(s(&a.host)))
            .with_operation(a.operation.code())
            .with_permission_type(a.permission.code()),
    }
}

async fn delete(admin: &Admin, resource: &Resource, aces: &BTreeSet<Ace>) -> Result<()> {
    let filters: Vec<DeleteAclsFilter> = if aces.is_empty() {
        vec![delete_filter(resource, None)]
    } else {
        aces.iter()
            .map(|a| delete_filter(resource, Some(a)))
            .collect()
    };
    let request = DeleteAclsRequest::default().with_filters(filters);
    let (_, resp) = admin
        .client()
        .send::<DeleteAclsRequest, _>(&Target::Any, |_| Ok(request.clone()))
        .await?;
    if let Some(r) = resp.filter_results.iter().find(|r| r.error_code != 0) {
        return Err(kafka_error(
            "DeleteAcls",
            r.error_code,
            r.error_message.as_ref(),
        ));
    }
    Ok(())
}

/// DescribeAcls of one resource filter (every ACL for `None`), by resource pattern.
async fn describe(admin: &Admin, filter: Option<&Resource>) -> Result<ResourceAcls> {
    // kafka-protocol's defaults are empty strings, which match only empty names: every string
    // filter is set, `None` meaning any.
    let mut request = DescribeAclsRequest::default()
        .with_resource_name_filter(None)
        .with_principal_filter(None)
        .with_host_filter(None)
        .with_resource_type_filter(AclResourceType::Any.code())
        .with_pattern_type_filter(PatternType::Any.code())
        .with_operation(AclOperation::Any.code())
        .with_permission_type(AclPermissionType::Any.code());
    if let Some(r) = filter {
        request = request
            .with_resource_type_filter(r.resource_type.code())
            .with_resource_name_filter(Some(s(&r.name)))
            .with_pattern_type_filter(r.pattern_type.code());
    }
    let (_, resp) = admin
        .client()
        .send::<DescribeAclsRequest, _>(&Target::Any, |_| Ok(request.clone()))
        .await?;
    if resp.error_code != 0 {
        return Err(kafka_error(
            "DescribeAcls",
            resp.error_code,
            resp.error_message.as_ref(),
        ));
    }
    let mut out = ResourceAcls::new();
    for res in resp.resources {
        let resource = Resource {
            resource_type: AclResourceType::from_code(res.resource_type),
            name: res.resource_name.to_string(),
            pattern_type: PatternType::from_code(res.pattern_type),
        };
        let entry = out.entry(resource).or_default();
        for a in res.acls {
            entry.insert(Ace {
                principal: a.principal.to_string(),
                host: a.host.to_string(),
                operation: AclOperation::from_code(a.operation),
                permission: AclPermissionType::from_code(a.permission_type),
            });
        }
    }
    Ok(out)
}

fn confirm(prompt: &str) -> Result<bool> {
    println!("{prompt}");
    let mut line = String::new();
    std::io::stdin().lock().read_line(&mut line)?;
    Ok(line.trim().eq_ignore_ascii_case("y"))
}

async fn list(admin: &Admin, args: &AclsArgs) -> Result<()> {
    check_args(args)?;
    let pattern_type = parse_pattern_type(&args.resource_pattern_type)?;
    let filters = resources(args, pattern_type);
    let mut all = ResourceAcls::new();
    if filters.is_empty() {
        all = describe(admin, None).await?;
    }
    for f in &filters {
        for (r, aces) in describe(admin, Some(f)).await? {
            all.entry(r).or_default().extend(aces);
        }
    }
    let wanted = principals(&args.principal)?;
    if wanted.is_empty() {
        for (r, aces) in &all {
            println!("{}", resource_block("Current ACLs for resource", r, aces));
        }
        return Ok(());
    }
    for p in wanted {
        println!("ACLs for principal `{p}`");
        for (r, aces) in &all {
            let mine: BTreeSet<Ace> = aces.iter().filter(|a| a.principal == p).cloned().collect();
            if !mine.is_empty() {
                println!("{}", resource_block("Current ACLs for resource", r, &mine));
            }
        }
    }
    Ok(())
}

pub async fn run_acls(args: AclsArgs) -> Result<()> {
    let admin = args.connection.connect().await?;
    if args.list {
        return list(&admin, &args).await;
    }
    let plan = plan(&args)?;
    if args.add {
        for (resource, aces) in &plan {
            println!(
                "{}",
                resource_block("Adding ACLs for resource", resource, aces)
            );
            create(&admin, resource, aces).await?;
        }
        return Ok(());
    }
    for (filter, aces) in &plan {
        let prompt = if aces.is_empty() {
            format!(
                "Are you sure you want to delete all ACLs for resource filter `{filter}`? (y/n)"
            )
        } else {
            let lines: Vec<String> = aces.iter().map(|a| format!("\t{a}")).collect();
            format!(
                "Are you sure you want to remove ACLs: \n {} \n from resource filter `{filter}`? (y/n)",
                lines.join("\n")
            )
        };
        if args.force || confirm(&prompt)? {
            delete(&admin, filter, aces).await?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: AclsArgs,
    }

    fn args(line: &[&str]) -> AclsArgs {
        let mut argv = vec!["acls"];
        argv.extend_from_slice(line);
        Cli::try_parse_from(argv).expect("valid flags").args
    }

    fn render(plan: &ResourceAcls) -> Vec<String> {
        plan.iter()
            .map(|(r, aces)| resource_block("Adding ACLs for resource", r, aces))
            .collect()
    }

    #[test]
    fn add_prints_kafkas_lines() {
        let a = args(&[
            "--add",
            "--allow-principal",
            "User:alice",
            "--operation",
            "Read",
            "--operation",
            "describe",
            "--topic",
            "orders",
        ]);
        assert_eq!(
            render(&plan(&a).unwrap()),
            ["Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=READ, permissionType=ALLOW)\n\t(principal=User:alice, host=*, operation=DESCRIBE, permissionType=ALLOW) \n"]
        );
    }

    #[test]
    fn producer_and_consumer_expand_to_kafkas_sets() {
        let a = args(&[
            "--add",
            "--allow-principal",
            "User:app",
            "--producer",
            "--consumer",
            "--topic",
            "t",
            "--group",
            "g",
            "--resource-pattern-type",
            "prefixed",
        ]);
        let plan = plan(&a).unwrap();
        let ops: Vec<(String, Vec<AclOperation>)> = plan
            .iter()
            .map(|(r, aces)| {
                (
                    format!("{}:{}:{}", r.resource_type, r.pattern_type, r.name),
                    aces.iter().map(|a| a.operation).collect(),
                )
            })
            .collect();
        use AclOperation::*;
        assert_eq!(
            ops,
            [
                (
                    "TOPIC:PREFIXED:t".to_string(),
                    vec![Read, Write, Create, Describe]
                ),
                ("GROUP:PREFIXED:g".to_string(), vec![Read]),
            ]
        );
        let idempotent = args(&[
            "--add",
            "--allow-principal",
            "User:p",
            "--producer",
            "--idempotent",
            "--topic",
            "t",
        ]);
        let cluster: Vec<AclOperation> = plan_for(&idempotent, AclResourceType::Cluster);
        assert_eq!(cluster, [IdempotentWrite]);
    }

    fn plan_for(a: &AclsArgs, t: AclResourceType) -> Vec<AclOperation> {
        plan(a)
            .unwrap()
            .into_iter()
            .filter(|(r, _)| r.resource_type == t)
            .flat_map(|(_, aces)| aces.into_iter().map(|a| a.operation))
            .collect()
    }

    #[test]
    fn bad_combinations_get_kafkas_messages() {
        let err = |line: &[&str]| plan(&args(line)).unwrap_err().to_string();
        assert_eq!(
            err(&["--add", "--topic", "t"]),
            "You must specify one of: --allow-principal, --deny-principal when trying to add ACLs."
        );
        assert!(
            err(&["--add", "--allow-principal", "alice", "--topic", "t"])
                .starts_with("Could not parse principal from `alice`")
        );
        assert_eq!(
            err(&[
                "--add",
                "--allow-principal",
                "User:a",
                "--operation",
                "IdempotentWrite",
                "--group",
                "g"
            ]),
            "ResourceType GROUP only supports operations Read, Describe, Delete, All"
        );
        assert!(err(&[
            "--add",
            "--allow-principal",
            "User:a",
            "--consumer",
            "--topic",
            "t"
        ])
        .starts_with("With --consumer you must specify a --topic and a --group"));
        assert!(err(&["--add", "--allow-principal", "User:a"])
            .starts_with("You must provide at least one resource"));
        assert_eq!(
            err(&[
                "--add",
                "--allow-principal",
                "User:a",
                "--topic",
                "t",
                "--resource-pattern-type",
                "match"
            ]),
            "A '--resource-pattern-type' value of 'MATCH' is not valid when adding acls."
        );
    }

    #[test]
    fn remove_without_principals_means_every_acl_of_the_filter() {
        let a = args(&[
            "--remove",
            "--topic",
            "t",
            "--resource-pattern-type",
            "match",
            "--force",
        ]);
        let plan = plan(&a).unwrap();
        let (filter, aces) = plan.iter().next().unwrap();
        assert_eq!(filter.pattern_type, PatternType::Match);
        assert!(aces.is_empty());
        let any = delete_filter(filter, None);
        assert_eq!(any.permission_type, AclPermissionType::Any.code());
        assert_eq!((any.principal_filter, any.host_filter), (None, None));
        assert_eq!(
            operation_name(AclOperation::DescribeConfigs),
            "DescribeConfigs"
        );
    }
}
