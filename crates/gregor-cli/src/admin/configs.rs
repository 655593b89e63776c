//! `gregor configs`: what `kafka-configs.sh --bootstrap-server` does for topics, brokers and
//! groups, for users' SCRAM credentials (`scram_users`) and for client quotas of users and
//! client ids (`client_quotas`).

use anyhow::{anyhow, bail, Result};
use clap::ArgGroup;
use gregor_client::admin::{
    AlterConfigOp, ConfigEntry, ConfigResource, ConfigResourceType, ConfigSource,
};
use gregor_client::Admin;

use super::client_quotas::{self, QuotaName, QuotaTarget};
use super::common::ConnectionArgs;
use super::scram_users;

/// Describe or change topic, broker and group configs.
#[derive(Debug, Clone, clap::Args)]
#[command(group(
    ArgGroup::new("action")
        .required(true)
        .multiple(false)
        .args(["describe", "alter"])
))]
pub struct ConfigsArgs {
    #[command(flatten)]
    pub connection: ConnectionArgs,
    /// Connect to these controller listeners instead of a broker (KIP-919): HOST:PORT[,...].
    /// Only broker configs are served there, of any node; a controller-only node's own
    /// listener certificates are changed this way.
    #[arg(long, value_name = "HOST:PORT", conflicts_with = "bootstrap_server")]
    pub bootstrap_controller: Option<String>,
    /// Show configs (the dynamic ones; all with --all).
    #[arg(long)]
    pub describe: bool,
    /// Change configs with --add-config and --delete-config.
    #[arg(long)]
    pub alter: bool,
    /// topics, brokers, groups, users or clients (or the shorthands --topic, --broker,
    /// --broker-defaults, --group); users and clients may be given together for a quota of a
    /// user and a client id.
    #[arg(long, value_name = "TYPE", action = clap::ArgAction::Append)]
    pub entity_type: Vec<String>,
    /// The topic, broker id, group, user or client id (all of them for --describe when left
    /// out); it belongs to the --entity-type before it.
    #[arg(long, value_name = "NAME", action = clap::ArgAction::Append)]
    pub entity_name: Vec<String>,
    /// The cluster-wide broker default (brokers), or the default user or client id (quotas).
    #[arg(long, action = clap::ArgAction::Count)]
    pub entity_default: u8,
    /// The command line, for pairing names with entity types in their order (quotas).
    #[arg(skip)]
    pub argv: Vec<String>,
    /// Shorthand for --entity-type topics --entity-name T.
    #[arg(long, value_name = "T", conflicts_with_all = ["entity_type", "entity_name", "entity_default"])]
    pub topic: Option<String>,
    /// Shorthand for --entity-type brokers --entity-name N.
    #[arg(long, value_name = "N", conflicts_with_all = ["entity_type", "entity_name", "entity_default", "topic"])]
    pub broker: Option<String>,
    /// Shorthand for --entity-type brokers --entity-default.
    #[arg(long, conflicts_with_all = ["entity_type", "entity_name", "entity_default", "topic", "broker"])]
    pub broker_defaults: bool,
    /// Shorthand for --entity-type groups --entity-name G.
    #[arg(long, value_name = "G", conflicts_with_all = ["entity_type", "entity_name", "entity_default", "topic", "broker", "broker_defaults"])]
    pub group: Option<String>,
    /// With --describe: every config, static and default ones included.
    #[arg(long)]
    pub all: bool,
    /// Configs to set: k=v,k2=[v1,v2] (square brackets group list values).
    #[arg(long, value_name = "K=V,...")]
    pub add_config: Option<String>,
    /// Configs to remove: k,k2 (repeatable).
    #[arg(long, value_name = "K,...", value_delimiter = ',')]
    pub delete_config: Vec<String>,
}

/// The entity types this command handles, in Kafka's plural spelling.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EntityType {
    Topics,
    Brokers,
    Groups,
    /// Users: their SCRAM credentials (AlterUserScramCredentials, not a config resource).
    Users,
}

impl EntityType {
    pub fn parse(text: &str) -> Result<EntityType> {
        match text {
            "topics" => Ok(EntityType::Topics),
            "brokers" => Ok(EntityType::Brokers),
            "groups" => Ok(EntityType::Groups),
            "users" => Ok(EntityType::Users),
            other => {
                bail!("Invalid entity type: {other} (this tool handles topics, brokers, groups and users)")
            }
        }
    }

    /// The config resource type; users have none (their SCRAM credentials have APIs of
    /// their own).
    fn resource_type(self) -> Result<ConfigResourceType> {
        match self {
            EntityType::Topics => Ok(ConfigResourceType::Topic),
            EntityType::Brokers => Ok(ConfigResourceType::Broker),
            EntityType::Groups => Ok(ConfigResourceType::Group),
            EntityType::Users => bail!("users have SCRAM credentials, not config resources"),
        }
    }

    /// Kafka's singular, as in "configs for topic t".
    fn singular(self) -> &'static str {
        match self {
            EntityType::Topics => "topic",
            EntityType::Brokers => "broker",
            EntityType::Groups => "group",
            EntityType::Users => "user",
        }
    }

    fn plural(self) -> &'static str {
        match self {
            EntityType::Topics => "topics",
            EntityType::Brokers => "brokers",
            EntityType::Groups => "groups",
            EntityType::Users => "users",
        }
    }
}

/// A validated `gregor configs` invocation.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigsAction {
    Describe {
        entity_type: EntityType,
        /// `None`: every entity of the type; `Some("")`: the broker default.
        entity: Option<String>,
        all: bool,
    },
    Alter {
        entity_type: EntityType,
        entity: String,
        set: Vec<(String, String)>,
        delete: Vec<String>,
    },
    /// Quotas of users and/or client ids, and for a user alone its SCRAM credentials too
    /// (`scram_user`: `Some(None)` for every user), as kafka-configs.sh shows both.
    QuotaDescribe {
        target: QuotaTarget,
        scram_user: Option<Option<String>>,
    },
    /// Quota changes, and for a user alone the SCRAM-* ones among them.
    QuotaAlter {
        target: QuotaTarget,
        set: Vec<(String, f64)>,
        delete: Vec<String>,
        scram_set: Vec<(String, String)>,
        scram_delete: Vec<String>,
    },
}

impl ConfigsArgs {
    /// The entity type and name, from --entity-type / --entity-name / --entity-default or one
    /// of Kafka's shorthands (--topic, --broker, --broker-defaults, --group); clap keeps the
    /// two forms apart.
    fn entity(&self) -> Result<(EntityType, Option<String>)> {
        if let Some(t) = &self.topic {
            return Ok((EntityType::Topics, Some(t.clone())));
        }
        if let Some(b) = &self.broker {
            return Ok((EntityType::Brokers, Some(b.clone())));
        }
        if self.broker_defaults {
            return Ok((EntityType::Brokers, Some(String::new())));
        }
        if let Some(g) = &self.group {
            return Ok((EntityType::Groups, Some(g.clone())));
        }
        let [text] = self.entity_type.as_slice() else {
            bail!("--entity-type must be specified once (or one of --topic, --broker, --broker-defaults, --group)");
        };
        let entity_type = EntityType::parse(text)?;
        let entity_default = self.entity_default > 0;
        if entity_default && entity_type != EntityType::Brokers {
            bail!(
                "--entity-default is only supported with --entity-type brokers, users and clients"
            );
        }
        if entity_default && !self.entity_name.is_empty() {
            bail!("--entity-name cannot be used with --entity-default");
        }
        if self.entity_name.len() > 1 || self.entity_default > 1 {
            bail!("only one --entity-name or --entity-default per --entity-type");
        }
        let entity = if entity_default {
            Some(String::new())
        } else {
            self.entity_name.first().cloned()
        };
        Ok((entity_type, entity))
    }

    /// The user and/or client id a quota command names: from the command line in order when
    /// known, else the names in order, then the defaults.
    fn quota_target(&self) -> Result<QuotaTarget> {
        if !self.argv.is_empty() {
            return client_quotas::pair_entities(&self.argv);
        }
        let mut tokens = Vec::new();
        let mut names = self.entity_name.iter();
        let mut defaults = self.entity_default;
        for t in &self.entity_type {
            tokens.extend(["--entity-type".to_string(), t.clone()]);
            if let Some(n) = names.next() {
                tokens.extend(["--entity-name".to_string(), n.clone()]);
            } else if defaults > 0 {
                defaults -= 1;
                tokens.push("--entity-default".to_string());
            }
        }
        client_quotas::pair_entities(&tokens)
    }

    /// The quota forms: any `clients` entity, or `users` alone (quotas and SCRAM credentials).
    fn quota_action(&self) -> Result<Option<ConfigsAction>> {
        let types = &self.entity_type;
        let quota_types = types.iter().all(|t| t == "users" || t == "clients");
        if types.is_empty() || !quota_types {
            return Ok(None);
        }
        let target = self.quota_target()?;
        let user_alone = matches!(target.as_slice(), [("user", _)]);
        if self.describe {
            if self.add_config.is_some() || !self.delete_config.is_empty() {
                bail!("--add-config and --delete-config can only be used with --alter");
            }
            let scram_user = match target.as_slice() {
                [("user", QuotaName::Named(n))] => Some(Some(n.clone())),
                [("user", QuotaName::Any)] => Some(None),
                _ => None,
            };
            return Ok(Some(ConfigsAction::QuotaDescribe { target, scram_user }));
        }
        let (set, delete) = self.changes()?;
        let (quota_set, scram_set): (Vec<_>, Vec<_>) = set
            .into_iter()
            .partition(|(k, _)| !user_alone || client_quotas::is_quota_key(k));
        let (quota_delete, scram_delete): (Vec<_>, Vec<_>) = delete
            .into_iter()
            .partition(|k| !user_alone || client_quotas::is_quota_key(k));
        Ok(Some(ConfigsAction::QuotaAlter {
            target,
            set: client_quotas::parse_values(&quota_set)?,
            delete: quota_delete,
            scram_set,
            scram_delete,
        }))
    }

    /// `--add-config` and `--delete-config` of an `--alter`: at least one change.
    fn changes(&self) -> Result<(ConfigPairs, Vec<String>)> {
        let set = match &self.add_config {
            Some(text) => parse_add_config(text)?,
            None => Vec::new(),
        };
        let delete: Vec<String> = self
            .delete_config
            .iter()
            .map(|k| k.trim().to_string())
            .filter(|k| !k.is_empty())
            .collect();
        if set.is_empty() && delete.is_empty() {
            bail!("--alter needs --add-config or --delete-config");
        }
        Ok((set, delete))
    }

    pub fn action(&self) -> Result<ConfigsAction> {
        if let Some(action) = self.quota_action()? {
            return Ok(action);
        }
        let (entity_type, entity) = self.entity()?;
        if let (EntityType::Brokers, Some(name)) = (entity_type, &entity) {
            if !name.is_empty() && name.parse::<i32>().is_err() {
                bail!(
                    "The entity name for brokers must be a valid integer broker id, found: {name}"
                );
            }
        }
        if self.describe {
            if self.add_config.is_some() || !self.delete_config.is_empty() {
                bail!("--add-config and --delete-config can only be used with --alter");
            }
            return Ok(ConfigsAction::Describe {
                entity_type,
                entity,
                all: self.all,
            });
        }
        if self.all {
            bail!("--all can only be used with --describe");
        }
        let entity =
            entity.ok_or_else(|| anyhow!("--alter needs --entity-name or --entity-default"))?;
        let (set, delete) = self.changes()?;
        if let Some(k) = set.iter().map(|(k, _)| k).find(|k| delete.contains(k)) {
            bail!("Invalid config(s): {k} (both added and deleted)");
        }
        Ok(ConfigsAction::Alter {
            entity_type,
            entity,
            set,
            delete,
        })
    }
}

/// Parses `--add-config`: pairs separated by commas outside square brackets; brackets group
/// a list value and are dropped (`k=[a,b]` sets `a,b`); an empty value is allowed.
/// `(key, value)` pairs, in the order given.
type ConfigPairs = Vec<(String, String)>;

pub fn parse_add_config(text: &str) -> Result<ConfigPairs> {
    let mut pairs = Vec::new();
    let mut depth = 0usize;
    let mut current = String::new();
    for c in text.chars() {
        match c {
            '[' => depth += 1,
            ']' => depth = depth.saturating_sub(1),
            ',' if depth == 0 => {
                pairs.push(std::mem::take(&mut current));
                continue;
            }
            _ => {}
        }
        current.push(c);
    }
    pairs.push(current);
    pairs
        .into_iter()
        .map(|pair| {
            let (k, v) = pair.split_once('=').ok_or_else(|| {
                anyhow!("Invalid entity config '{pair}': all configs to be added must be in the format \"key=val\".")
            })?;
            let key = k.trim();
            if key.is_empty() || !key.chars().all(|c| c.is_ascii_alphanumeric() || "._-".contains(c)) {
                bail!("Invalid character found for config key: {key}");
            }
            let value: String = v.chars().filter(|c| *c != '[' && *c != ']').collect();
            Ok((key.to_string(), value.trim().to_string()))
        })
        .collect()
}

/// The config source `--describe` shows without `--all`: the dynamic one of the entity.
fn dynamic_source(entity_type: EntityType, entity: &str) -> ConfigSource {
    match entity_type {
        EntityType::Topics => ConfigSource::DynamicTopic,
        EntityType::Brokers if entity.is_empty() => ConfigSource::DynamicDefaultBroker,
        EntityType::Brokers => ConfigSource::DynamicBroker,
        EntityType::Groups => ConfigSource::DynamicGroup,
        EntityType::Users => ConfigSource::Unknown,
    }
}

/// kafka-configs.sh's `--describe` text for one entity.
pub fn format_entity_configs(
    entity_type: EntityType,
    entity: &str,
    all: bool,
    entries: &[ConfigEntry],
) -> String {
    let mut out = if entity.is_empty() {
        format!(
            "Default configs for {} in the cluster are:\n",
            entity_type.plural()
        )
    } else {
        format!(
            "{} configs for {} {entity} are:\n",
            if all { "All" } else { "Dynamic" },
            entity_type.singular()
        )
    };
    let wanted = dynamic_source(entity_type, entity);
    let mut shown: Vec<&ConfigEntry> = entries
        .iter()
        .filter(|e| all || e.source == wanted)
        .collect();
    shown.sort_by(|a, b| a.name.cmp(&b.name));
    for e in shown {
        let synonyms = e
            .synonyms
            .iter()
            .map(|s| {
                format!(
                    "{}:{}={}",
                    s.source.name(),
                    s.name,
                    s.value.as_deref().unwrap_or("null")
                )
            })
            .collect::<Vec<_>>()
            .join(", ");
        out.push_str(&format!(
            "  {}={} sensitive={} synonyms={{{synonyms}}}\n",
            e.name,
            e.value.as_deref().unwrap_or("null"),
            e.is_sensitive
        ));
    }
    out
}

/// The cluster through `--bootstrap-server`, or a controller listener for broker configs.
async fn connect(args: &ConfigsArgs, action: &ConfigsAction) -> Result<Admin> {
    let Some(controllers) = &args.bootstrap_controller else {
        return args.connection.connect().await;
    };
    let brokers = matches!(
        action,
        ConfigsAction::Describe {
            entity_type: EntityType::Brokers,
            ..
        } | ConfigsAction::Alter {
            entity_type: EntityType::Brokers,
            ..
        }
    );
    if !brokers {
        bail!("--bootstrap-controller serves broker configs only (--entity-type brokers)");
    }
    args.connection.connect_controllers(controllers).await
}

/// Runs `gregor configs`.
pub async fn run_configs(mut args: ConfigsArgs) -> Result<()> {
    args.argv = std::env::args().collect();
    let action = args.action()?;
    let admin = connect(&args, &action).await?;
    match action {
        ConfigsAction::QuotaDescribe { target, scram_user } => {
            client_quotas::describe(&admin, &target).await?;
            if let Some(user) = scram_user {
                scram_users::describe(&admin, user.as_deref()).await?;
            }
        }
        ConfigsAction::QuotaAlter {
            target,
            set,
            delete,
            scram_set,
            scram_delete,
        } => {
            if !set.is_empty() || !delete.is_empty() {
                client_quotas::alter(&admin, &target, &set, &delete).await?;
            }
            if !scram_set.is_empty() || !scram_delete.is_empty() {
                let [(_, QuotaName::Named(user))] = target.as_slice() else {
                    bail!("SCRAM credentials need --entity-name (not the default user)");
                };
                scram_users::alter(&admin, user, &scram_set, &scram_delete).await?;
            }
        }
        ConfigsAction::Describe {
            entity_type: EntityType::Users,
            entity,
            ..
        } => scram_users::describe(&admin, entity.as_deref()).await?,
        ConfigsAction::Alter {
            entity_type: EntityType::Users,
            entity,
            set,
            delete,
        } => scram_users::alter(&admin, &entity, &set, &delete).await?,
        ConfigsAction::Describe {
            entity_type,
            entity,
            all,
        } => describe(&admin, entity_type, entity, all).await?,
        ConfigsAction::Alter {
            entity_type,
            entity,
            set,
            delete,
        } => {
            let resource = ConfigResource {
                kind: entity_type.resource_type()?,
                name: entity.clone(),
            };
            // Like Kafka: deleting a config that is not set is an error, not a no-op.
            if !delete.is_empty() {
                check_deletable(&admin, &resource, entity_type, &delete).await?;
            }
            let ops: Vec<AlterConfigOp> = set
                .into_iter()
                .map(|(name, value)| AlterConfigOp::Set { name, value })
                .chain(
                    delete
                        .into_iter()
                        .map(|name| AlterConfigOp::Delete { name }),
                )
                .collect();
            for (_, result) in admin
                .incremental_alter_configs(&[(resource, ops)], false)
                .await?
            {
                if let Err(e) = result {
                    return Err(entity_error(entity_type, &entity, &e));
                }
            }
            if entity.is_empty() {
                println!(
                    "Completed updating default config for {} in the cluster.",
                    entity_type.plural()
                );
            } else {
                println!(
                    "Completed updating config for {} {entity}.",
                    entity_type.singular()
                );
            }
        }
    }
    Ok(())
}

/// `--describe`: the configs of one entity, or of every entity of the type.
async fn describe(
    admin: &Admin,
    entity_type: EntityType,
    entity: Option<String>,
    all: bool,
) -> Result<()> {
    let entities = match entity {
        Some(e) => vec![e],
        None => all_entities(admin, entity_type).await?,
    };
    let kind = entity_type.resource_type()?;
    let resources: Vec<ConfigResource> = entities
        .iter()
        .map(|e| ConfigResource {
            kind,
            name: e.clone(),
        })
        .collect();
    for (resource, result) in admin.describe_configs(&resources, true, false).await? {
        let entries = result.map_err(|e| entity_error(entity_type, &resource.name, &e))?;
        print!(
            "{}",
            format_entity_configs(entity_type, &resource.name, all, &entries)
        );
    }
    Ok(())
}

/// An entity's refusal in the operator's terms. A cluster that does not serve group configs
/// (the GROUP resource type, 32, of Kafka 4.0) refuses it with INVALID_REQUEST: say what that
/// means rather than echo the code.
fn entity_error(
    entity_type: EntityType,
    entity: &str,
    e: &gregor_client::KafkaError,
) -> anyhow::Error {
    if entity_type == EntityType::Groups && e.code == gregor_client::KafkaCode::INVALID_REQUEST {
        return anyhow!(
            "group '{entity}': this cluster does not serve group configs (config resource type \
             GROUP); a group's settings come from the broker configs group.* \
             (gregor configs --describe --entity-type brokers --all)"
        );
    }
    anyhow!("{} '{entity}': {e}", entity_type.singular())
}

/// Every config `--delete-config` names is set on the entity itself.
async fn check_deletable(
    admin: &Admin,
    resource: &ConfigResource,
    entity_type: EntityType,
    delete: &[String],
) -> Result<()> {
    let entity = &resource.name;
    let current = admin
        .describe_configs(std::slice::from_ref(resource), false, false)
        .await?;
    let entries = match current.into_iter().next() {
        Some((_, Ok(entries))) => entries,
        Some((_, Err(e))) => return Err(entity_error(entity_type, entity, &e)),
        None => Vec::new(),
    };
    let wanted = dynamic_source(entity_type, entity);
    let missing: Vec<&str> = delete
        .iter()
        .filter(|k| !entries.iter().any(|e| &e.name == *k && e.source == wanted))
        .map(String::as_str)
        .collect();
    if !missing.is_empty() {
        bail!("Invalid config(s): {}", missing.join(","));
    }
    Ok(())
}

async fn all_entities(admin: &Admin, entity_type: EntityType) -> Result<Vec<String>> {
    Ok(match entity_type {
        EntityType::Topics => admin
            .list_topics(true)
            .await?
            .into_iter()
            .map(|t| t.name)
            .collect(),
        EntityType::Brokers => {
            let mut ids: Vec<String> = admin
                .describe_cluster()
                .await?
                .brokers
                .into_iter()
                .map(|b| b.id.to_string())
                .collect();
            ids.push(String::new());
            ids
        }
        EntityType::Groups => admin
            .list_groups(&[], &[])
            .await?
            .into_iter()
            .map(|g| g.group_id)
            .collect(),
        EntityType::Users => bail!("users are described through their SCRAM credentials"),
    })
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_cluster_without_group_configs_is_named_as_such() {
        use gregor_client::{KafkaCode, KafkaError};
        let refused = KafkaError::new(
            KafkaCode::INVALID_REQUEST,
            Some("unsupported resource type 32".into()),
        );
        let told = super::entity_error(super::EntityType::Groups, "g1", &refused).to_string();
        assert!(told.contains("does not serve group configs"), "{told}");
        // The same code for a topic is the broker's own message.
        let told = super::entity_error(super::EntityType::Topics, "t", &refused).to_string();
        assert!(told.starts_with("topic 't': INVALID_REQUEST"), "{told}");
        let other = KafkaError::new(KafkaCode(29), None);
        let told = super::entity_error(super::EntityType::Groups, "g1", &other).to_string();
        assert!(told.starts_with("group 'g1': "), "{told}");
    }

    use super::*;
    use clap::Parser;
    use gregor_client::admin::ConfigSynonym;

    #[derive(Debug, Parser)]
    struct Cli {
        #[command(flatten)]
        args: ConfigsArgs,
    }

    fn parse(args: &[&str]) -> Result<ConfigsAction> {
        Cli::try_parse_from(std::iter::once("configs").chain(args.iter().copied()))?
            .args
            .action()
    }

    #[test]
    fn add_config_lists_and_empty_values() {
        assert_eq!(
            parse_add_config("retention.ms=1000, cleanup.policy=[compact,delete],ssl.endpoint.identification.algorithm=").unwrap(),
            vec![
                ("retention.ms".to_string(), "1000".to_string()),
                ("cleanup.policy".to_string(), "compact,delete".to_string()),
                ("ssl.endpoint.identification.algorithm".to_string(), String::new()),
            ]
        );
        assert!(parse_add_config("retention.ms")
            .unwrap_err()
            .to_string()
            .contains("key=val"));
        assert!(parse_add_config("a b=1")
            .unwrap_err()
            .to_string()
            .contains("Invalid character"));
        assert!(parse_add_config("=1").is_err());
    }

    #[test]
    fn argument_parsing_and_bad_input() {
        assert_eq!(
            parse(&[
                "--alter",
                "--entity-type",
                "topics",
                "--entity-name",
                "t",
                "--add-config",
                "a=1,b=2",
                "--delete-config",
                "c,d"
            ])
            .unwrap(),
            ConfigsAction::Alter {
                entity_type: EntityType::Topics,
                entity: "t".into(),
                set: vec![("a".into(), "1".into()), ("b".into(), "2".into())],
                delete: vec!["c".into(), "d".into()],
            }
        );
        assert_eq!(
            parse(&["--describe", "--entity-type", "brokers", "--entity-default"]).unwrap(),
            ConfigsAction::Describe {
                entity_type: EntityType::Brokers,
                entity: Some(String::new()),
                all: false
            }
        );
        let err = |args: &[&str]| format!("{:#}", parse(args).unwrap_err());
        assert!(err(&["--describe", "--entity-type", "widgets"])
            .contains("Invalid entity type: widgets"));
        assert_eq!(
            parse(&["--describe", "--entity-type", "users"]).unwrap(),
            ConfigsAction::QuotaDescribe {
                target: vec![("user", QuotaName::Any)],
                scram_user: Some(None),
            }
        );
        assert_eq!(
            parse(&[
                "--alter",
                "--entity-type",
                "users",
                "--entity-name",
                "alice",
                "--entity-type",
                "clients",
                "--entity-name",
                "app",
                "--add-config",
                "producer_byte_rate=1024,consumer_byte_rate=2048",
            ])
            .unwrap(),
            ConfigsAction::QuotaAlter {
                target: vec![
                    ("user", QuotaName::Named("alice".into())),
                    ("client-id", QuotaName::Named("app".into()))
                ],
                set: vec![
                    ("producer_byte_rate".into(), 1024.0),
                    ("consumer_byte_rate".into(), 2048.0)
                ],
                delete: vec![],
                scram_set: vec![],
                scram_delete: vec![],
            }
        );
        // For a user alone, SCRAM-* keys go to its credentials and the rest to its quotas.
        let ConfigsAction::QuotaAlter {
            set, scram_delete, ..
        } = parse(&[
            "--alter",
            "--entity-type",
            "users",
            "--entity-name",
            "bob",
            "--add-config",
            "producer_byte_rate=10",
            "--delete-config",
            "SCRAM-SHA-256",
        ])
        .unwrap()
        else {
            panic!("a quota alteration")
        };
        assert_eq!(set, vec![("producer_byte_rate".to_string(), 10.0)]);
        assert_eq!(scram_delete, vec!["SCRAM-SHA-256".to_string()]);
        assert!(err(&[
            "--alter",
            "--entity-type",
            "clients",
            "--entity-default",
            "--add-config",
            "retention.ms=1"
        ])
        .contains("Invalid config(s): retention.ms"));
        assert_eq!(
            err(&[
                "--describe",
                "--entity-type",
                "brokers",
                "--entity-name",
                "one"
            ]),
            "The entity name for brokers must be a valid integer broker id, found: one"
        );
        assert!(
            err(&["--alter", "--entity-type", "topics", "--add-config", "a=1"])
                .contains("--entity-name")
        );
        assert!(
            err(&["--alter", "--entity-type", "topics", "--entity-name", "t"])
                .contains("--add-config or --delete-config")
        );
        assert!(err(&[
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "t",
            "--add-config",
            "a=1",
            "--delete-config",
            "a"
        ])
        .contains("Invalid config(s): a"));
        assert!(err(&[
            "--describe",
            "--entity-type",
            "topics",
            "--add-config",
            "a=1"
        ])
        .contains("only be used with --alter"));
        assert!(
            err(&["--describe", "--entity-type", "topics", "--entity-default"])
                .contains("--entity-default")
        );
        assert!(err(&["--entity-type", "topics"]).contains("required"));
    }

    #[test]
    fn kafkas_entity_shorthands() {
        assert_eq!(
            parse(&[
                "--alter",
                "--topic",
                "t",
                "--add-config",
                "retention.ms=1000"
            ])
            .unwrap(),
            ConfigsAction::Alter {
                entity_type: EntityType::Topics,
                entity: "t".into(),
                set: vec![("retention.ms".into(), "1000".into())],
                delete: vec![],
            }
        );
        assert_eq!(
            parse(&["--describe", "--broker", "0"]).unwrap(),
            ConfigsAction::Describe {
                entity_type: EntityType::Brokers,
                entity: Some("0".into()),
                all: false
            }
        );
        assert_eq!(
            parse(&["--describe", "--broker-defaults"]).unwrap(),
            ConfigsAction::Describe {
                entity_type: EntityType::Brokers,
                entity: Some(String::new()),
                all: false
            }
        );
        assert_eq!(
            parse(&["--describe", "--group", "g"]).unwrap(),
            ConfigsAction::Describe {
                entity_type: EntityType::Groups,
                entity: Some("g".into()),
                all: false
            }
        );
        let err = |args: &[&str]| format!("{:#}", parse(args).unwrap_err());
        assert!(err(&["--describe"]).contains("--entity-type must be specified"));
        assert!(
            err(&["--describe", "--topic", "t", "--entity-type", "topics"])
                .contains("cannot be used with")
        );
        assert!(err(&["--describe", "--broker", "x"]).contains("valid integer broker id"));
    }

    fn entry(
        name: &str,
        value: Option<&str>,
        source: ConfigSource,
        synonyms: Vec<ConfigSynonym>,
    ) -> ConfigEntry {
        ConfigEntry {
            name: name.into(),
            value: value.map(str::to_string),
            source,
            is_sensitive: value.is_none(),
            read_only: false,
            synonyms,
            documentation: None,
        }
    }

    #[test]
    fn describe_output_matches_kafka_configs() {
        let entries = vec![
            entry(
                "retention.ms",
                Some("604800000"),
                ConfigSource::Default,
                vec![],
            ),
            entry(
                "cleanup.policy",
                Some("compact"),
                ConfigSource::DynamicTopic,
                vec![
                    ConfigSynonym {
                        name: "cleanup.policy".into(),
                        value: Some("compact".into()),
                        source: ConfigSource::DynamicTopic,
                    },
                    ConfigSynonym {
                        name: "log.cleanup.policy".into(),
                        value: Some("delete".into()),
                        source: ConfigSource::Default,
                    },
                ],
            ),
        ];
        assert_eq!(
            format_entity_configs(EntityType::Topics, "t", false, &entries),
            "Dynamic configs for topic t are:\n  cleanup.policy=compact sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:cleanup.policy=compact, DEFAULT_CONFIG:log.cleanup.policy=delete}\n"
        );
        let all = format_entity_configs(EntityType::Topics, "t", true, &entries);
        assert!(all.starts_with("All configs for topic t are:\n  cleanup.policy=compact"));
        assert!(all.ends_with("  retention.ms=604800000 sensitive=false synonyms={}\n"));
        let secret = vec![entry(
            "ssl.key.password",
            None,
            ConfigSource::DynamicBroker,
            vec![],
        )];
        assert_eq!(
            format_entity_configs(EntityType::Brokers, "1", false, &secret),
            "Dynamic configs for broker 1 are:\n  ssl.key.password=null sensitive=true synonyms={}\n"
        );
        assert_eq!(
            format_entity_configs(EntityType::Brokers, "", false, &secret),
            "Default configs for brokers in the cluster are:\n"
        );
    }
}
