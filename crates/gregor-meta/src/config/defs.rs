//! Every config Gregor accepts, defined once: name, type, default, valid values, documentation,
//! and for topic configs the broker configs that supply their default (`retention.ms` <-
//! `log.retention.ms` / `log.retention.minutes` / `log.retention.hours`). Names, defaults and
//! ranges are Kafka's.

use super::value::{parse_value, ConfigError, ConfigType, ConfigValue, Validator};
use ConfigType::*;
use Validator::{Any, AtLeast, BetweenDouble, ListOf, OneOf, ThrottledReplicas};

/// How a broker synonym's value converts to the topic config's unit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SynonymUnit {
    /// Same unit.
    Same,
    /// Minutes, topic config in milliseconds.
    MinutesToMs,
    /// Hours, topic config in milliseconds.
    HoursToMs,
}

/// A broker config that supplies a topic config's default.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Synonym {
    /// Broker config name.
    pub name: &'static str,
    /// Unit conversion.
    pub unit: SynonymUnit,
}

impl Synonym {
    /// Convert a value of this synonym into the topic config's unit.
    pub fn convert(&self, v: &ConfigValue) -> ConfigValue {
        let factor = match self.unit {
            SynonymUnit::Same => return v.clone(),
            SynonymUnit::MinutesToMs => 60_000,
            SynonymUnit::HoursToMs => 3_600_000,
        };
        match v.as_i64() {
            Some(n) => ConfigValue::Long(n.saturating_mul(factor)),
            None => v.clone(),
        }
    }
}

/// One config definition.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct ConfigDef {
    /// Name.
    pub name: &'static str,
    /// Type.
    pub ty: ConfigType,
    /// Default as text; `None` is Kafka's `null` (unset).
    pub default: Option<&'static str>,
    /// Valid values.
    pub validator: Validator,
    /// Documentation.
    pub doc: &'static str,
    /// Topic configs: broker configs that supply the default, first set one wins.
    pub synonyms: &'static [Synonym],
    /// Broker configs: whether it may be changed at run time (IncrementalAlterConfigs);
    /// otherwise it is read-only. Topic configs are always dynamic.
    pub dynamic: bool,
}

impl ConfigDef {
    /// Parse and validate a value for this config.
    pub fn parse(&self, raw: &str) -> Result<ConfigValue, ConfigError> {
        parse_value(self.name, self.ty, self.validator, raw)
    }

    /// The parsed default (`None` when the default is null).
    pub fn default_value(&self) -> Option<ConfigValue> {
        self.default.map(|d| {
            self.parse(d)
                .expect("every built-in default is valid (checked by a test)")
        })
    }

    /// Secrets are described without their value.
    pub fn is_sensitive(&self) -> bool {
        self.ty == Password
    }

    /// The broker config that sets this topic config's cluster default (e.g.
    /// `log.retention.ms` for `retention.ms`).
    pub fn broker_default_name(&self) -> Option<&'static str> {
        self.synonyms.first().map(|s| s.name)
    }
}

const fn same(name: &'static str) -> Synonym {
    Synonym {
        name,
        unit: SynonymUnit::Same,
    }
}

const fn topic(
    name: &'static str,
    ty: ConfigType,
    default: Option<&'static str>,
    validator: Validator,
    synonyms: &'static [Synonym],
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        ty,
        default,
        validator,
        doc,
        synonyms,
        dynamic: true,
    }
}

const fn broker(
    name: &'static str,
    ty: ConfigType,
    default: Option<&'static str>,
    validator: Validator,
    dynamic: bool,
    doc: &'static str,
) -> ConfigDef {
    ConfigDef {
        name,
        ty,
        default,
        validator,
        doc,
        synonyms: &[],
        dynamic,
    }
}

const LONG_MAX: &str = "9223372036854775807";
const INT_MAX: &str = "2147483647";
const CLEANUP_POLICIES: &[&str] = &["compact", "delete"];
const COMPRESSION_TYPES: &[&str] = &["uncompressed", "zstd", "lz4", "snappy", "gzip", "producer"];
const TIMESTAMP_TYPES: &[&str] = &["CreateTime", "LogAppendTime"];
const SECURITY_PROTOCOLS: &[&str] = &["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"];
const SSL_CLIENT_AUTH: &[&str] = &["required", "requested", "none"];
/// `metrics.listener.authentication`.
const METRICS_AUTHENTICATION: &[&str] = &["none", "basic", "mtls"];
const METRICS_NAMING: &[&str] = &["gregor", "kafka"];
const PROCESS_ROLES: &[&str] = &["broker", "controller"];
/// `group.consumer.migration.policy`: the online conversions between group protocols.
const MIGRATION_POLICIES: &[&str] = &["disabled", "upgrade", "downgrade", "bidirectional"];
/// `group.consumer.assignors`: the server-side assignors of KIP-848 groups.
const CONSUMER_ASSIGNORS: &[&str] = &["uniform", "range", "load"];
/// `authorizer.class.name`: none, Gregor's authorizer, or the Kafka name of the same thing.
const AUTHORIZER_CLASSES: &[&str] = &[
    "",
    "gregor.authorizer.StandardAuthorizer",
    "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
];

/// Topic-level configs.
#[rustfmt::skip]
pub static TOPIC_CONFIGS: &[ConfigDef] = &[
    topic("cleanup.policy", List, Some("delete"), ListOf(CLEANUP_POLICIES),
        &[same("log.cleanup.policy")],
        "Retention policy for old log segments: \"delete\" discards segments past their retention time or size limit, \"compact\" keeps the latest value of each key; both may be given."),
    topic("compression.type", String, Some("producer"), OneOf(COMPRESSION_TYPES),
        &[same("compression.type")],
        "Final compression of the topic's data: a codec (uncompressed, zstd, lz4, snappy, gzip), or \"producer\" to keep the producer's compression."),
    topic("delete.retention.ms", Long, Some("86400000"), AtLeast(0),
        &[same("log.cleaner.delete.retention.ms")],
        "How long delete tombstones are kept in compacted topics; consumers must read a tombstone within this time to see the delete."),
    topic("file.delete.delay.ms", Long, Some("60000"), AtLeast(0),
        &[same("log.segment.delete.delay.ms")],
        "Time to wait before deleting a file from the filesystem."),
    // Gregor is durable by default: every append is fsynced (group commit) before it is
    // acknowledged, which is what flush.messages=1 means. Kafka's page-cache default is
    // Long.MAX_VALUE; set it (or flush.ms) to choose that mode.
    topic("flush.messages", Long, Some("1"), AtLeast(1),
        &[same("log.flush.interval.messages")],
        "Force an fsync of the log after this many messages; 1 (the default) syncs every append, with concurrent appends sharing one fsync."),
    topic("flush.ms", Long, Some(LONG_MAX), AtLeast(0),
        &[same("log.flush.interval.ms"), same("log.flush.scheduler.interval.ms")],
        "Force an fsync of the log after this much time (page-cache mode)."),
    topic("follower.replication.throttled.replicas", List, Some(""), ThrottledReplicas, &[],
        "Replicas (partitionId:brokerId, or * for all) whose catch-up traffic is throttled on the follower side, by follower.replication.throttled.rate."),
    topic("index.interval.bytes", Int, Some("4096"), AtLeast(0),
        &[same("log.index.interval.bytes")],
        "How often (in bytes of log) an entry is added to the offset index."),
    topic("leader.replication.throttled.replicas", List, Some(""), ThrottledReplicas, &[],
        "Replicas (partitionId:brokerId, or * for all) whose catch-up traffic is throttled on the leader side, by leader.replication.throttled.rate."),
    topic("max.compaction.lag.ms", Long, Some(LONG_MAX), AtLeast(1),
        &[same("log.cleaner.max.compaction.lag.ms")],
        "The maximum time a message stays ineligible for compaction."),
    topic("max.message.bytes", Int, Some("1048588"), AtLeast(0),
        &[same("message.max.bytes")],
        "The largest record batch size allowed, after compression."),
    topic("message.timestamp.after.max.ms", Long, Some(LONG_MAX), AtLeast(0),
        &[same("log.message.timestamp.after.max.ms")],
        "How far a CreateTime timestamp may be ahead of the broker's time."),
    topic("message.timestamp.before.max.ms", Long, Some(LONG_MAX), AtLeast(0),
        &[same("log.message.timestamp.before.max.ms")],
        "How far a CreateTime timestamp may be behind the broker's time."),
    topic("message.timestamp.difference.max.ms", Long, Some(LONG_MAX), AtLeast(0),
        &[same("log.message.timestamp.difference.max.ms")],
        "Deprecated (KIP-937): the bound for message.timestamp.before.max.ms and after.max.ms when those are left at their default."),
    topic("message.timestamp.type", String, Some("CreateTime"), OneOf(TIMESTAMP_TYPES),
        &[same("log.message.timestamp.type")],
        "Whether record timestamps are the producer's (CreateTime) or the leader's append time (LogAppendTime)."),
    topic("min.cleanable.dirty.ratio", Double, Some("0.5"), BetweenDouble(0.0, 1.0),
        &[same("log.cleaner.min.cleanable.ratio")],
        "The minimum share of uncompacted log that makes a log eligible for cleaning."),
    topic("min.compaction.lag.ms", Long, Some("0"), AtLeast(0),
        &[same("log.cleaner.min.compaction.lag.ms")],
        "The minimum time a message stays uncompacted."),
    topic("min.insync.replicas", Int, Some("1"), AtLeast(1),
        &[same("min.insync.replicas")],
        "With acks=all, the minimum number of in-sync replicas that must acknowledge a write; fewer gives NOT_ENOUGH_REPLICAS."),
    topic("preallocate", Boolean, Some("false"), Any,
        &[same("log.preallocate")],
        "Preallocate the file on disk when creating a new log segment."),
    topic("retention.bytes", Long, Some("-1"), Any,
        &[same("log.retention.bytes")],
        "The maximum size a partition's log may grow to before old segments are discarded (delete policy); -1 means no limit."),
    topic("retention.ms", Long, Some("604800000"), AtLeast(-1),
        &[
            same("log.retention.ms"),
            Synonym { name: "log.retention.minutes", unit: SynonymUnit::MinutesToMs },
            Synonym { name: "log.retention.hours", unit: SynonymUnit::HoursToMs },
        ],
        "How long a log is retained before old segments are discarded (delete policy); -1 means no time limit."),
    topic("segment.bytes", Int, Some("1073741824"), AtLeast(14),
        &[same("log.segment.bytes")],
        "The segment file size of the log."),
    topic("segment.index.bytes", Int, Some("10485760"), AtLeast(4),
        &[same("log.index.size.max.bytes")],
        "The size of the index that maps offsets to file positions."),
    topic("segment.jitter.ms", Long, Some("0"), AtLeast(0),
        &[
            same("log.roll.jitter.ms"),
            Synonym { name: "log.roll.jitter.hours", unit: SynonymUnit::HoursToMs },
        ],
        "The maximum random jitter subtracted from the scheduled segment roll time."),
    topic("segment.ms", Long, Some("604800000"), AtLeast(1),
        &[
            same("log.roll.ms"),
            Synonym { name: "log.roll.hours", unit: SynonymUnit::HoursToMs },
        ],
        "The time after which the log rolls a new segment even if the current one is not full."),
    topic("unclean.leader.election.enable", Boolean, Some("false"), Any,
        &[same("unclean.leader.election.enable")],
        "Whether replicas outside the ISR may be elected leader as a last resort, at the risk of losing data."),
];

/// Broker-level configs (server properties).
#[rustfmt::skip]
pub static BROKER_CONFIGS: &[ConfigDef] = &[
    // Identity and roles.
    broker("node.id", Int, Some("-1"), AtLeast(-1), false, "The node id of this server."),
    broker("broker.id", Int, Some("-1"), AtLeast(-1), false, "Legacy name of node.id."),
    broker("process.roles", List, Some("broker,controller"), ListOf(PROCESS_ROLES), false,
        "The roles this process plays: broker, controller, or both (a single node is both by default)."),
    broker("controller.quorum.voters", List, Some(""), Any, false,
        "The controller quorum voters as id@host:port entries; empty means this node alone."),
    broker("controller.listener.names", List, Some("CONTROLLER"), Any, false,
        "Names of the listeners the controller quorum and forwarded requests use."),
    broker("controller.quorum.election.timeout.ms", Int, Some("300"), AtLeast(10), false,
        "A voter that hears nothing from the active controller for between 1.5 and 2 times this starts an election (Kafka's default is 1000; see docs/configuration.md)."),
    broker("metadata.log.max.record.bytes.between.snapshots", Long, Some("20971520"), AtLeast(1), false,
        "Metadata record bytes applied before a new snapshot of the metadata image replaces the log before it."),
    broker("broker.rack", String, None, Any, false, "Rack of the broker, used for rack-aware replica placement."),
    broker("listeners", List, Some("PLAINTEXT://:9092"), Any, false, "The listeners (URIs) to accept connections on."),
    broker("advertised.listeners", List, None, Any, false, "Listeners published to clients, if different from listeners."),
    // Listeners and TLS (docs/security.md). Any ssl.* setting may also be given for one
    // listener as listener.name.<lowercase listener name>.ssl.*, which wins over the plain one.
    broker("listener.security.protocol.map", String, Some("PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL"), Any, false,
        "Security protocol of each listener name, as NAME:PROTOCOL entries. Left at its default, the controller listeners are PLAINTEXT."),
    broker("inter.broker.listener.name", String, None, Any, false,
        "The listener other brokers replicate from (PLAINTEXT or SSL); by default the one named after security.inter.broker.protocol."),
    broker("security.inter.broker.protocol", String, Some("PLAINTEXT"), OneOf(SECURITY_PROTOCOLS), false,
        "Security protocol between brokers, naming the inter-broker listener; only one of this and inter.broker.listener.name may be set."),
    // Kafka's default store type is JKS, which Gregor cannot read; PEM is its default.
    broker("ssl.keystore.type", String, Some("PEM"), Any, false,
        "Format of the key store: PEM or PKCS12 (with ssl.keystore.password); JKS is refused (convert it to PKCS12 with keytool -importkeystore)."),
    broker("ssl.keystore.location", String, None, Any, false,
        "The key store file: PEM with the listener's private key and its certificate chain, or a PKCS12 store holding one key and its chain."),
    broker("ssl.keystore.password", Password, None, Any, false,
        "Password of a PKCS12 key store (it opens the store and its key); PEM key stores have none (set ssl.key.password for an encrypted key)."),
    broker("ssl.keystore.certificate.chain", Password, None, Any, false,
        "The certificate chain in PEM, inline (with ssl.keystore.key)."),
    broker("ssl.keystore.key", Password, None, Any, false,
        "The private key in PEM (PKCS#8, encrypted or not), inline (with ssl.keystore.certificate.chain)."),
    broker("ssl.key.password", Password, None, Any, false,
        "Password of an encrypted PKCS#8 private key; with a PKCS12 key store, unset or the store's password."),
    broker("ssl.truststore.type", String, Some("PEM"), Any, false,
        "Format of the trust store: PEM or PKCS12 (with ssl.truststore.password); JKS is refused (convert it to PKCS12 with keytool -importkeystore)."),
    broker("ssl.truststore.location", String, None, Any, false,
        "The trust store file (PEM or PKCS12): the CA certificates client certificates are verified against."),
    broker("ssl.truststore.password", Password, None, Any, false,
        "Password of a PKCS12 trust store (required to read one); PEM trust stores have none."),
    broker("ssl.truststore.certificates", Password, None, Any, false,
        "The trusted CA certificates in PEM, inline."),
    broker("ssl.client.auth", String, Some("none"), OneOf(SSL_CLIENT_AUTH), false,
        "Whether clients must present a certificate: required, requested (verified if presented) or none."),
    broker("ssl.enabled.protocols", List, Some("TLSv1.2,TLSv1.3"), Any, false,
        "TLS versions the listener accepts: TLSv1.2 and TLSv1.3 (older ones are refused)."),
    broker("ssl.protocol", String, Some("TLSv1.3"), Any, false,
        "TLSv1.3 (or TLS) allows every enabled protocol; TLSv1.2 rules out TLSv1.3."),
    broker("ssl.principal.mapping.rules", String, Some("DEFAULT"), Any, false,
        "Rules mapping a client certificate's subject name to a principal name: RULE:pattern/replacement/[LU] entries and DEFAULT (the name as it is), first match wins."),
    broker("ssl.allow.dn.changes", Boolean, Some("false"), Any, false,
        "Whether a listener's key store reloaded by IncrementalAlterConfigs may change the certificate's subject name."),
    broker("ssl.allow.san.changes", Boolean, Some("false"), Any, false,
        "Whether a listener's key store reloaded by IncrementalAlterConfigs may change the certificate's subjectAltNames."),
    broker("ssl.cipher.suites", List, Some(""), Any, false, "Cipher suites; empty: rustls's defaults."),
    broker("ssl.endpoint.identification.algorithm", String, Some("https"), Any, false,
        "Whether replica fetchers check other brokers' host names against their certificates on an SSL inter-broker listener: https (the default) or empty (no check)."),
    broker("ssl.keymanager.algorithm", String, Some("SunX509"), Any, false, "Java key manager algorithm."),
    broker("ssl.trustmanager.algorithm", String, Some("PKIX"), Any, false, "Java trust manager algorithm."),
    broker("ssl.provider", String, None, Any, false, "Java security provider."),
    broker("ssl.secure.random.implementation", String, None, Any, false, "Java SecureRandom implementation."),
    broker("ssl.engine.factory.class", String, None, Any, false, "Java SSL engine factory."),
    // SASL (docs/security.md). sasl.enabled.mechanisms may be given for one listener as
    // listener.name.<lowercase listener name>.sasl.enabled.mechanisms, and the JAAS line of one
    // mechanism on one listener as listener.name.<listener>.<lowercase mechanism>.sasl.jaas.config.
    broker("sasl.enabled.mechanisms", List, Some("GSSAPI"), Any, false,
        "SASL mechanisms SASL listeners accept: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER (Kafka's default, GSSAPI, is refused at start-up)."),
    broker("sasl.mechanism.inter.broker.protocol", String, Some("GSSAPI"), Any, false,
        "SASL mechanism replica fetchers log in with when the inter-broker listener is SASL_PLAINTEXT or SASL_SSL; one of the listener's enabled mechanisms."),
    broker("sasl.mechanism.controller.protocol", String, Some("GSSAPI"), Any, false,
        "SASL mechanism every node logs in to the controllers with when the controller listener is SASL_PLAINTEXT or SASL_SSL: PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (Kafka's default, GSSAPI, is refused)."),
    broker("sasl.jaas.config", Password, None, Any, false,
        "JAAS login module line: PlainLoginModule's user_<name>=\"<password>\" entries are PLAIN's users; username and password are the broker's own login to other brokers."),
    broker("connections.max.reauth.ms", Long, Some("0"), AtLeast(0), false,
        "Longest a SASL session lasts before the client must re-authenticate (KIP-368); an expired connection that sends anything else is closed. 0: sessions never expire."),
    // OAUTHBEARER (KIP-768); per listener also as listener.name.<l>.oauthbearer.<key>.
    broker("sasl.oauthbearer.jwks.endpoint.url", String, None, Any, false,
        "The JSON Web Key Set that signs OAUTHBEARER tokens: an https:// or http:// endpoint (fetched at start-up and refreshed; its CA from the OAUTHBEARER JAAS line's ssl.truststore.* options, else the system's), or a file:// URL or a path (re-read when it changes)."),
    broker("sasl.oauthbearer.jwks.endpoint.refresh.ms", Long, Some("3600000"), AtLeast(1), false,
        "How often the JWKS is fetched or re-read; a token naming a key id the set lacks also fetches an endpoint again (at most once per retry.backoff.max.ms) or re-reads a changed file."),
    broker("sasl.oauthbearer.jwks.endpoint.retry.backoff.ms", Long, Some("100"), AtLeast(0), false,
        "Wait before retrying a failed JWKS endpoint fetch; doubles per failure up to sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms. The last good key set stays in use."),
    broker("sasl.oauthbearer.jwks.endpoint.retry.backoff.max.ms", Long, Some("10000"), AtLeast(0), false,
        "Longest wait between retries of a failed JWKS endpoint fetch, and the shortest time between fetches caused by unknown key ids."),
    broker("sasl.oauthbearer.expected.audience", List, Some(""), Any, false,
        "Audiences a token's aud claim must include one of; empty: aud is not checked."),
    broker("sasl.oauthbearer.expected.issuer", String, None, Any, false,
        "The iss claim a token must carry; unset: iss is not checked."),
    broker("sasl.oauthbearer.sub.claim.name", String, Some("sub"), Any, false,
        "The claim holding the principal's name."),
    broker("sasl.oauthbearer.scope.claim.name", String, Some("scope"), Any, false,
        "The claim holding the token's scopes."),
    broker("sasl.oauthbearer.clock.skew.seconds", Int, Some("30"), AtLeast(0), false,
        "Leeway for exp, nbf and iat against the broker's clock."),
    broker("sasl.server.callback.handler.class", String, None, Any, false,
        "Kafka's SASL server callback handler; for OAUTHBEARER only org.apache.kafka.common.security.oauthbearer.OAuthBearerValidatorCallbackHandler (what Gregor does) is accepted."),
    broker("connection.failed.authentication.delay.ms", Int, Some("100"), AtLeast(0), false,
        "How long a failed SASL authentication waits before its answer and the close (slows down password guessing; other connections are not held up)."),
    // Kerberos (GSSAPI) settings: Gregor has no GSSAPI, so these are kept and have no effect,
    // as in Kafka when no listener enables GSSAPI; dynamic there too, so tools that set them
    // (librdkafka's admin tests do) are not refused.
    broker("sasl.kerberos.service.name", String, None, Any, true, "GSSAPI only; no effect in Gregor (no GSSAPI)."),
    broker("sasl.kerberos.kinit.cmd", String, Some("/usr/bin/kinit"), Any, true, "GSSAPI only; no effect in Gregor (no GSSAPI)."),
    broker("sasl.kerberos.min.time.before.relogin", Long, Some("60000"), Any, true, "GSSAPI only; no effect in Gregor (no GSSAPI)."),
    broker("sasl.kerberos.ticket.renew.jitter", Double, Some("0.05"), Any, true, "GSSAPI only; no effect in Gregor (no GSSAPI)."),
    broker("sasl.kerberos.ticket.renew.window.factor", Double, Some("0.8"), Any, true, "GSSAPI only; no effect in Gregor (no GSSAPI)."),
    broker("sasl.kerberos.principal.to.local.rules", List, Some("DEFAULT"), Any, true, "GSSAPI only; no effect in Gregor (no GSSAPI)."),
    broker("log.dirs", List, None, Any, false, "Directories in which log data is kept; log.dir is used when unset."),
    broker("log.dir", String, Some("/tmp/kafka-logs"), Any, false, "The directory in which log data is kept (used when log.dirs is unset)."),
    broker("metadata.log.dir", String, None, Any, false, "Directory of the metadata log; the first log directory when unset."),
    broker("broker.session.timeout.ms", Int, Some("1500"), AtLeast(1), false,
        "A broker that has not heartbeated to the controller for this long is fenced (Kafka's default is 9000; see docs/configuration.md)."),
    broker("broker.heartbeat.interval.ms", Int, Some("250"), AtLeast(1), false,
        "How often a broker heartbeats to the controller (Kafka's default is 2000)."),
    // Topics.
    broker("auto.create.topics.enable", Boolean, Some("true"), Any, false, "Create a topic when metadata for an unknown topic is requested."),
    broker("delete.topic.enable", Boolean, Some("true"), Any, false, "Allow topics to be deleted."),
    broker("num.partitions", Int, Some("1"), AtLeast(1), false, "Default number of partitions of a new topic."),
    broker("default.replication.factor", Int, Some("1"), AtLeast(1), false, "Default replication factor of a new topic."),
    // Replication.
    broker("min.insync.replicas", Int, Some("1"), AtLeast(1), true,
        "With acks=all, the minimum number of in-sync replicas that must acknowledge a write."),
    broker("unclean.leader.election.enable", Boolean, Some("false"), Any, true,
        "Whether replicas outside the ISR may be elected leader as a last resort, at the risk of losing data."),
    broker("replica.lag.time.max.ms", Long, Some("30000"), AtLeast(1), false,
        "A follower that has not caught up with the leader's log end for this long is removed from the ISR."),
    broker("replica.fetch.max.bytes", Int, Some("1048576"), AtLeast(0), false, "Bytes fetched per partition by a follower."),
    broker("replica.fetch.min.bytes", Int, Some("1"), AtLeast(1), false, "Minimum bytes for a follower fetch response."),
    broker("replica.fetch.wait.max.ms", Int, Some("500"), AtLeast(0), false, "Maximum wait of a follower fetch."),
    broker("replica.fetch.response.max.bytes", Int, Some("10485760"), AtLeast(0), false, "Maximum bytes of a follower fetch response."),
    broker("replica.fetch.backoff.ms", Int, Some("1000"), AtLeast(0), false, "Sleep after a follower fetch error."),
    broker("replica.socket.timeout.ms", Int, Some("30000"), AtLeast(1), false, "Socket timeout of follower fetches."),
    broker("replica.high.watermark.checkpoint.interval.ms", Long, Some("5000"), AtLeast(1), false, "How often high watermarks are checkpointed."),
    broker("leader.replication.throttled.rate", Long, Some(LONG_MAX), AtLeast(0), true,
        "Bytes per second a leader sends to out-of-sync replicas of throttled partitions (leader.replication.throttled.replicas)."),
    broker("follower.replication.throttled.rate", Long, Some(LONG_MAX), AtLeast(0), true,
        "Bytes per second a follower fetches for its out-of-sync replicas of throttled partitions (follower.replication.throttled.replicas)."),
    broker("num.replica.fetchers", Int, Some("1"), AtLeast(1), true, "Fetcher threads per source broker."),
    broker("auto.leader.rebalance.enable", Boolean, Some("true"), Any, false,
        "Move leadership back to preferred replicas when the imbalance exceeds leader.imbalance.per.broker.percentage."),
    broker("leader.imbalance.per.broker.percentage", Int, Some("10"), AtLeast(0), false,
        "Allowed share of partitions per broker not led by their preferred replica, in percent."),
    broker("leader.imbalance.check.interval.seconds", Long, Some("300"), AtLeast(1), false,
        "How often the controller checks leader imbalance."),
    // Groups and offsets.
    broker("group.initial.rebalance.delay.ms", Int, Some("3000"), AtLeast(0), false,
        "How long the coordinator waits for more members before the first rebalance of an empty group."),
    broker("group.min.session.timeout.ms", Int, Some("6000"), AtLeast(0), false, "Smallest session timeout a member may ask for."),
    broker("group.max.session.timeout.ms", Int, Some("1800000"), AtLeast(0), false, "Largest session timeout a member may ask for."),
    broker("group.max.size", Int, Some(INT_MAX), AtLeast(1), false, "Maximum members of one consumer group."),
    broker("group.consumer.session.timeout.ms", Int, Some("45000"), AtLeast(1), false,
        "Session timeout of consumer-protocol (KIP-848) group members."),
    broker("group.consumer.min.session.timeout.ms", Int, Some("45000"), AtLeast(1), false,
        "Smallest allowed group.consumer.session.timeout.ms."),
    broker("group.consumer.max.session.timeout.ms", Int, Some("60000"), AtLeast(1), false,
        "Largest allowed group.consumer.session.timeout.ms."),
    broker("group.consumer.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), false,
        "How often consumer-protocol members heartbeat."),
    broker("group.consumer.min.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1), false,
        "Smallest allowed group.consumer.heartbeat.interval.ms."),
    broker("group.consumer.max.heartbeat.interval.ms", Int, Some("15000"), AtLeast(1), false,
        "Largest allowed group.consumer.heartbeat.interval.ms."),
    broker("group.consumer.max.size", Int, Some(INT_MAX), AtLeast(1), false,
        "Maximum members of one consumer-protocol group."),
    broker("group.consumer.assignors", List, Some("uniform,range,load"), ListOf(CONSUMER_ASSIGNORS), false,
        "Server-side assignors of consumer-protocol groups; the first is the default."),
    broker("group.consumer.load.review.interval.ms", Int, Some("30000"), AtLeast(100), false,
        "How often groups on the load assignor are reviewed with freshly measured partition load."),
    broker("group.consumer.migration.policy", String, Some("bidirectional"), OneOf(MIGRATION_POLICIES), false,
        "Online conversion between the classic and consumer group protocols: disabled, upgrade, downgrade or bidirectional."),
    broker("offsets.topic.num.partitions", Int, Some("50"), AtLeast(1), false, "Partitions of __consumer_offsets."),
    broker("offsets.topic.replication.factor", Short, Some("3"), AtLeast(1), false,
        "Replication factor of __consumer_offsets (capped by the live brokers when the topic is created)."),
    broker("offsets.topic.segment.bytes", Int, Some("104857600"), AtLeast(1), false, "Segment size of __consumer_offsets."),
    broker("offsets.retention.minutes", Int, Some("10080"), AtLeast(1), false, "How long committed offsets of an empty group are kept."),
    broker("offsets.retention.check.interval.ms", Long, Some("600000"), AtLeast(1), false, "How often stale offsets are looked for."),
    broker("offsets.commit.timeout.ms", Int, Some("5000"), AtLeast(1), false, "How long an offset commit waits for replication."),
    broker("offsets.load.buffer.size", Int, Some("5242880"), AtLeast(1), false, "Read size when loading group state."),
    broker("offset.metadata.max.bytes", Int, Some("4096"), Any, false, "Largest metadata string of an offset commit."),
    // Transactions.
    broker("transaction.state.log.num.partitions", Int, Some("50"), AtLeast(1), false, "Partitions of __transaction_state."),
    broker("transaction.state.log.replication.factor", Short, Some("3"), AtLeast(1), false,
        "Replication factor of __transaction_state (capped by the live brokers when the topic is created)."),
    broker("transaction.state.log.min.isr", Int, Some("2"), AtLeast(1), false,
        "min.insync.replicas of __transaction_state (capped by its replication factor)."),
    broker("transaction.state.log.segment.bytes", Int, Some("104857600"), AtLeast(1), false, "Segment size of __transaction_state."),
    broker("transaction.max.timeout.ms", Int, Some("900000"), AtLeast(1), false,
        "The longest transaction timeout a producer may ask for (INVALID_TRANSACTION_TIMEOUT beyond)."),
    broker("transactional.id.expiration.ms", Int, Some("604800000"), AtLeast(1), false,
        "How long an idle transactional id is kept."),
    // Idempotent producers.
    broker("producer.id.expiration.ms", Int, Some("86400000"), AtLeast(1), true,
        "How long a partition keeps the state of a producer id that has not written to it."),
    broker("producer.id.expiration.check.interval.ms", Int, Some("600000"), AtLeast(1), false,
        "How often expired producer ids are removed."),
    // Network and requests.
    broker("metrics.listener", String, Some(""), Any, false,
        "Address of the HTTP listener serving /metrics (Prometheus), /healthz, /readyz and the console, as http://IP:PORT or https://IP:PORT (TLS from listener.name.metrics.ssl.* or ssl.*); empty (the default): off."),
    broker("metrics.listener.authentication", String, Some("none"), OneOf(METRICS_AUTHENTICATION), false,
        "Who may read /metrics and /ui on metrics.listener: none (anyone who reaches it), basic (HTTP Basic with a SCRAM user of the metadata log), mtls (the client certificate's principal)."),
    broker("console.actions.enable", Boolean, Some("false"), Any, false,
        "Whether the console on metrics.listener may create and delete topics, reset the offsets of empty groups and elect preferred leaders, each as the viewer's own Kafka request (ACLs apply); false (the default): read-only."),
    broker("metrics.partition.topics", String, Some(""), Any, false,
        "Topics whose partitions get per-partition series on /metrics: a regular expression matching whole topic names; empty (the default): every topic but the internal ones (__ names)."),
    broker("metrics.naming", String, Some("gregor"), OneOf(METRICS_NAMING), false,
        "Names on /metrics: gregor (the default: Gregor's own) or kafka (Gregor's own and, beside them, the names the Prometheus JMX exporter gives Kafka's broker metrics)."),
    broker("socket.request.max.bytes", Int, Some("104857600"), AtLeast(1), false, "Largest request accepted; larger ones close the connection."),
    // Gregor leaves the socket buffers to the kernel by default (Kafka's 100 KiB turns off
    // Linux's buffer autotuning).
    broker("socket.send.buffer.bytes", Int, Some("-1"), AtLeast(-1), false, "SO_SNDBUF of client connections; -1 (the default) leaves it to the OS."),
    broker("socket.receive.buffer.bytes", Int, Some("-1"), AtLeast(-1), false, "SO_RCVBUF of client connections; -1 (the default) leaves it to the OS."),
    broker("num.network.threads", Int, Some("3"), AtLeast(1), true, "Network threads."),
    broker("num.io.threads", Int, Some("8"), AtLeast(1), true, "Request handler threads."),
    broker("queued.max.requests", Int, Some("500"), AtLeast(1), false, "Requests read from all connections and not yet taken by a handler; at the limit connections stop reading."),
    // Kafka's default is -1 (no limit); Gregor bounds the memory clients can make it hold.
    broker("queued.max.request.bytes", Long, Some("209715200"), AtLeast(-1), false,
        "Bytes of requests read from all connections and not yet taken by a handler (produce requests: until appended); at the limit connections stop reading. A request larger than the budget is read alone. -1: no limit."),
    broker("connections.max.idle.ms", Long, Some("600000"), Any, false, "A connection with no request in flight that sends nothing for this long is closed; negative: never."),
    broker("max.connections", Int, Some(INT_MAX), AtLeast(0), false, "Maximum connections to the broker; at the limit the broker stops accepting until one closes."),
    broker("max.connections.per.ip", Int, Some(INT_MAX), AtLeast(0), false, "Maximum connections from one address; a connection over the limit is closed at once."),
    broker("max.connections.per.ip.overrides", String, Some(""), Any, false,
        "Per-address (or host name) limits over max.connections.per.ip, as host:count entries separated by commas, e.g. \"127.0.0.1:200,localhost:100\"."),
    broker("message.max.bytes", Int, Some("1048588"), AtLeast(0), true, "Largest record batch accepted (topic default of max.message.bytes)."),
    // Kafka's default is 55 MiB. A librdkafka consumer allocates each response whole; glibc maps
    // one over 32 MiB afresh every time (its adaptive mmap threshold stops there), so a consumer
    // of many partitions faults in every page it receives. 30 MiB answers keep its buffers in
    // the heap (BENCHMARKS.md: 256 partitions, 1.68 -> 1.20 CPU s per GB).
    broker("fetch.max.bytes", Int, Some("31457280"), AtLeast(1024), true, "Largest fetch response, whatever the client asks for (the first batch of a response may exceed it, KIP-74)."),
    // Not in Kafka. librdkafka keeps one Fetch in flight per broker and reads each answer whole
    // before parsing it; its CPU per byte grows with the answer's size (BENCHMARKS.md). On a
    // short round trip small answers cost no throughput; on a long one each answer must carry
    // round trip x rate. Off by default: behind a proxy that ends TCP near the broker, the
    // round trip the broker sees is the proxy's, not the consumer's.
    broker("fetch.low.latency.max.bytes", Int, Some("0"), AtLeast(0), true,
        "Largest Fetch answer to a consumer whose connection has a short round trip: a consumer's answers are capped at the larger of this and its connection's minimum round-trip time x fetch.low.latency.bytes.per.second (never below its fetch.min.bytes, never above fetch.max.bytes). 0 (the default) turns the cap off. Followers are not capped."),
    broker("fetch.low.latency.bytes.per.second", Long, Some("10000000000"), AtLeast(1), true,
        "The rate one Fetch in flight per round trip should be able to carry: a consumer connection whose minimum round trip is R gets answers of up to R x this (at least fetch.low.latency.max.bytes)."),
    broker("max.incremental.fetch.session.cache.slots", Int, Some("1000"), AtLeast(0), false,
        "Fetch sessions (KIP-227) the broker keeps; 0 turns incremental fetches off (every fetch is answered whole, without a session)."),
    broker("min.incremental.fetch.session.eviction.ms", Int, Some("120000"), AtLeast(0), false,
        "How long a fetch session is safe from eviction by a new one (unused this long, any new session may replace it; younger than this, only a follower's may replace a consumer's)."),
    // Authorization (ACLs in the metadata log; see acl/authorizer.rs).
    broker("authorizer.class.name", String, Some(""), OneOf(AUTHORIZER_CLASSES), false,
        "The authorizer: empty (the default) for none (every request is allowed and the ACL APIs answer SECURITY_DISABLED), gregor.authorizer.StandardAuthorizer, or its Kafka name org.apache.kafka.metadata.authorizer.StandardAuthorizer."),
    broker("super.users", String, Some(""), Any, false,
        "Principals allowed every operation whatever the ACLs say, separated by semicolons (User:admin;User:broker)."),
    broker("allow.everyone.if.no.acl.found", Boolean, Some("false"), Any, false,
        "Whether a resource no ACL covers is open to every principal (with an authorizer)."),
    // Log defaults (topic config synonyms).
    broker("log.cleanup.policy", List, Some("delete"), ListOf(CLEANUP_POLICIES), true, "Default cleanup.policy."),
    broker("compression.type", String, Some("producer"), OneOf(COMPRESSION_TYPES), true, "Default compression.type."),
    broker("log.retention.hours", Int, Some("168"), Any, false, "Default retention.ms in hours (lowest precedence)."),
    broker("log.retention.minutes", Int, None, Any, false, "Default retention.ms in minutes (over log.retention.hours)."),
    broker("log.retention.ms", Long, None, Any, true, "Default retention.ms (over log.retention.minutes and log.retention.hours)."),
    broker("log.retention.bytes", Long, Some("-1"), Any, true, "Default retention.bytes."),
    broker("log.retention.check.interval.ms", Long, Some("300000"), AtLeast(1), false, "How often logs are checked for retention."),
    broker("log.segment.bytes", Int, Some("1073741824"), AtLeast(14), true, "Default segment.bytes."),
    broker("log.roll.hours", Int, Some("168"), AtLeast(1), false, "Default segment.ms in hours."),
    broker("log.roll.ms", Long, None, Any, true, "Default segment.ms (over log.roll.hours)."),
    broker("log.roll.jitter.hours", Int, Some("0"), AtLeast(0), false, "Default segment.jitter.ms in hours."),
    broker("log.roll.jitter.ms", Long, None, Any, true, "Default segment.jitter.ms (over log.roll.jitter.hours)."),
    broker("log.index.interval.bytes", Int, Some("4096"), AtLeast(0), true, "Default index.interval.bytes."),
    broker("log.index.size.max.bytes", Int, Some("10485760"), AtLeast(4), true, "Default segment.index.bytes."),
    broker("log.flush.interval.messages", Long, Some("1"), AtLeast(1), true, "Default flush.messages (1: fsync every append)."),
    broker("log.flush.interval.ms", Long, None, Any, true, "Default flush.ms (over log.flush.scheduler.interval.ms)."),
    broker("log.flush.scheduler.interval.ms", Long, Some(LONG_MAX), Any, false, "How often logs are checked for a due flush."),
    // Gregor's default: the 5 s it has always checkpointed at (Kafka: 60000).
    broker("log.flush.offset.checkpoint.interval.ms", Int, Some("5000"), AtLeast(1), false, "How often every log's recovery point is checkpointed (and page-cache mode's flush.ms checked)."),
    broker("log.cleaner.enable", Boolean, Some("true"), Any, false, "Run the log cleaner (compaction)."),
    broker("log.cleaner.threads", Int, Some("1"), AtLeast(0), true, "Log cleaner threads."),
    broker("log.cleaner.backoff.ms", Long, Some("15000"), AtLeast(0), true, "Sleep when there is nothing to clean."),
    broker("log.cleaner.dedupe.buffer.size", Long, Some("134217728"), AtLeast(1048576), true, "Key-map memory of one compaction pass; a log with more distinct dirty keys is compacted over several passes."),
    broker("log.cleaner.delete.retention.ms", Long, Some("86400000"), AtLeast(0), true, "Default delete.retention.ms."),
    broker("log.cleaner.min.compaction.lag.ms", Long, Some("0"), AtLeast(0), true, "Default min.compaction.lag.ms."),
    broker("log.cleaner.max.compaction.lag.ms", Long, Some(LONG_MAX), AtLeast(1), true, "Default max.compaction.lag.ms."),
    broker("log.cleaner.min.cleanable.ratio", Double, Some("0.5"), BetweenDouble(0.0, 1.0), true, "Default min.cleanable.dirty.ratio."),
    broker("log.segment.delete.delay.ms", Long, Some("60000"), AtLeast(0), true, "Default file.delete.delay.ms."),
    broker("log.message.timestamp.type", String, Some("CreateTime"), OneOf(TIMESTAMP_TYPES), true, "Default message.timestamp.type."),
    broker("log.message.timestamp.difference.max.ms", Long, Some(LONG_MAX), AtLeast(0), true, "Default message.timestamp.difference.max.ms."),
    broker("log.message.timestamp.before.max.ms", Long, Some(LONG_MAX), AtLeast(0), true, "Default message.timestamp.before.max.ms."),
    broker("log.message.timestamp.after.max.ms", Long, Some(LONG_MAX), AtLeast(0), true, "Default message.timestamp.after.max.ms."),
    broker("log.preallocate", Boolean, Some("false"), Any, true, "Default preallocate."),
    broker("num.recovery.threads.per.data.dir", Int, Some("16"), AtLeast(1), true,
        "Threads that open (and recover) and close partition logs at start-up and shutdown. Gregor's default is 16 (Kafka's 2): the work is fsyncs, which the file system batches when they run concurrently."),
];

/// Group-level configs (KIP-848's group configs, resource type GROUP): a consumer group's
/// override of the broker's `group.consumer.*` setting, within that setting's bounds.
#[rustfmt::skip]
pub static GROUP_CONFIGS: &[ConfigDef] = &[
    topic("consumer.heartbeat.interval.ms", Int, Some("5000"), AtLeast(1),
        &[same("group.consumer.heartbeat.interval.ms")],
        "The heartbeat interval given to the members of a consumer group."),
    topic("consumer.session.timeout.ms", Int, Some("45000"), AtLeast(1),
        &[same("group.consumer.session.timeout.ms")],
        "The timeout to detect client failures when using the consumer group protocol."),
];

/// The group config named `name`.
pub fn group_config(name: &str) -> Option<&'static ConfigDef> {
    GROUP_CONFIGS.iter().find(|d| d.name == name)
}

/// Settings whose feature Gregor does not have yet, with the reason. They keep Kafka's name,
/// default and documentation, but any value other than the default is refused (at start-up, in
/// CreateTopics and in IncrementalAlterConfigs) naming the setting, rather than accepted and
/// ignored. A later feature removes its entries.
#[rustfmt::skip]
pub static UNSUPPORTED: &[(&str, &str)] = &[
    ("metadata.log.dir", "the metadata log is kept in the data directory (log.dirs)"),
    ("replica.high.watermark.checkpoint.interval.ms", "high watermarks are checkpointed with the other log offsets (log.flush.offset.checkpoint.interval.ms)"),
    ("num.replica.fetchers", "one fetcher task per source broker"),
    ("offsets.load.buffer.size", "group state is loaded with the log's own read size"),
    ("num.network.threads", "connections are served by the async runtime's worker threads"),
    ("num.io.threads", "requests are handled by the async runtime's worker threads"),
    ("log.cleaner.threads", "one log cleaner task compacts a broker's logs, one after another"),
    ("segment.jitter.ms", "segments roll without jitter"),
    ("log.roll.jitter.ms", "segments roll without jitter"),
    ("log.roll.jitter.hours", "segments roll without jitter"),
    ("ssl.cipher.suites", "rustls's default cipher suites are used"),
    ("ssl.keymanager.algorithm", "keys are read by rustls, not a Java key manager"),
    ("ssl.trustmanager.algorithm", "certificates are verified by rustls (webpki), not a Java trust manager"),
    ("ssl.provider", "TLS is rustls with the ring provider"),
    ("ssl.secure.random.implementation", "randomness comes from ring"),
    ("ssl.engine.factory.class", "TLS is rustls"),
];

/// Why a setting is not supported yet, if it is not.
pub fn unsupported_reason(name: &str) -> Option<&'static str> {
    UNSUPPORTED
        .iter()
        .find(|(n, _)| *n == name)
        .map(|(_, why)| *why)
}

/// Refuses a value other than the default for a setting Gregor does not support yet.
pub fn check_supported(def: &ConfigDef, value: &ConfigValue) -> Result<(), ConfigError> {
    let Some(reason) = unsupported_reason(def.name) else {
        return Ok(());
    };
    if def.default_value().as_ref() == Some(value) {
        return Ok(());
    }
    Err(ConfigError::Unsupported {
        key: def.name.to_string(),
        reason,
        default: def.default.unwrap_or("null"),
    })
}

/// The topic config named `name`.
pub fn topic_config(name: &str) -> Option<&'static ConfigDef> {
    TOPIC_CONFIGS.iter().find(|d| d.name == name)
}

/// The broker config named `name`; a per-listener override
/// (`listener.name.<lowercase listener name>.ssl.*` or `.sasl.*`, and
/// `listener.name.<listener>.<mechanism>.sasl.jaas.config`) is defined by the setting it
/// overrides.
pub fn broker_config(name: &str) -> Option<&'static ConfigDef> {
    let base = listener_override_base(name).unwrap_or(name);
    BROKER_CONFIGS.iter().find(|d| d.name == base)
}

/// The `ssl.*` settings a listener's stores are read from, which IncrementalAlterConfigs may
/// change for one broker and one listener (`listener.name.<listener>.<setting>`), reloading
/// its stores (Kafka's dynamic SSL update, KIP-226; Kafka's `SslConfigs.RECONFIGURABLE_CONFIGS`).
pub const DYNAMIC_LISTENER_SSL_CONFIGS: &[&str] = &[
    "ssl.keystore.type",
    "ssl.keystore.location",
    "ssl.keystore.password",
    "ssl.key.password",
    "ssl.keystore.certificate.chain",
    "ssl.keystore.key",
    "ssl.truststore.type",
    "ssl.truststore.location",
    "ssl.truststore.password",
    "ssl.truststore.certificates",
];

/// The listener (lower-case) and setting of `name` when it is a per-listener override of one
/// of [`DYNAMIC_LISTENER_SSL_CONFIGS`] (`listener.name.ssl.ssl.keystore.location`).
pub fn dynamic_listener_ssl(name: &str) -> Option<(&str, &str)> {
    let base = listener_override_base(name)?;
    let listener = name.strip_prefix("listener.name.")?.split_once('.')?.0;
    DYNAMIC_LISTENER_SSL_CONFIGS
        .contains(&base)
        .then_some((listener, base))
}

/// The setting a per-listener override overrides (`ssl.client.auth` for
/// `listener.name.ssl.ssl.client.auth`, `sasl.jaas.config` for
/// `listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config`), if `name` is one. Listener and
/// mechanism names are lower-case here, as in Kafka.
pub fn listener_override_base(name: &str) -> Option<&str> {
    let lower = |s: &str| !s.is_empty() && !s.chars().any(|c| c.is_ascii_uppercase());
    let (listener, base) = name.strip_prefix("listener.name.")?.split_once('.')?;
    if !lower(listener) {
        return None;
    }
    // A listener's JAAS line names its mechanism (below).
    if base.starts_with("ssl.") || (base.starts_with("sasl.") && base != "sasl.jaas.config") {
        return Some(base);
    }
    // A SASL listener's session lifetime (KIP-368), as Kafka reads it per listener.
    if base == "connections.max.reauth.ms" {
        return Some(base);
    }
    // The JAAS line of one mechanism: `<mechanism>.sasl.jaas.config`.
    // OAUTHBEARER's validator settings and callback handler may be given per mechanism too.
    let (mechanism, rest) = base.split_once('.')?;
    let per_mechanism = rest == "sasl.jaas.config"
        || rest == "sasl.server.callback.handler.class"
        || rest.starts_with("sasl.oauthbearer.");
    (lower(mechanism) && per_mechanism).then_some(rest)
}

/// Parse and validate a topic config value (`INVALID_CONFIG` material on error), refusing
/// settings not supported yet.
pub fn parse_topic_config(name: &str, raw: &str) -> Result<ConfigValue, ConfigError> {
    let def = topic_config(name).ok_or_else(|| ConfigError::Unknown {
        scope: "topic",
        key: name.to_string(),
    })?;
    let value = def.parse(raw)?;
    check_supported(def, &value)?;
    Ok(value)
}

/// Parse and validate a broker config value. Whether the setting is supported by this node is
/// the broker's and the controller's call ([`check_supported`]): the controller's tests run
/// clusters that use settings a single node refuses.
pub fn parse_broker_config(name: &str, raw: &str) -> Result<ConfigValue, ConfigError> {
    broker_config(name)
        .ok_or_else(|| ConfigError::Unknown {
            scope: "broker",
            key: name.to_string(),
        })?
        .parse(raw)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The operator's reference; read at compile time so that editing it reruns this test.
    const CONFIGURATION_MD: &str = include_str!(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../docs/configuration.md"
    ));

    #[test]
    fn every_config_is_documented_in_configuration_md() {
        let missing: Vec<&str> = TOPIC_CONFIGS
            .iter()
            .chain(BROKER_CONFIGS)
            .chain(GROUP_CONFIGS)
            .map(|d| d.name)
            .filter(|name| !CONFIGURATION_MD.contains(&format!("`{name}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "docs/configuration.md does not mention these configs (as `name`): {}",
            missing.join(", ")
        );
    }

    #[test]
    fn per_listener_ssl_settings_are_defined_by_the_setting_they_override() {
        assert_eq!(
            listener_override_base("listener.name.ssl.ssl.client.auth"),
            Some("ssl.client.auth")
        );
        let def = broker_config("listener.name.external.ssl.keystore.location").expect("known");
        assert_eq!(def.name, "ssl.keystore.location");
        assert!(parse_broker_config("listener.name.ssl.ssl.client.auth", "maybe").is_err());
        // Listener names are lower-case in these keys, as in Kafka; only ssl.* is per listener.
        assert_eq!(
            listener_override_base("listener.name.SSL.ssl.client.auth"),
            None
        );
        assert_eq!(
            listener_override_base("listener.name.ssl.num.partitions"),
            None
        );
        assert_eq!(
            listener_override_base("listener.name..ssl.client.auth"),
            None
        );
        assert!(broker_config("listener.name.ssl.num.partitions").is_none());
        assert_eq!(
            listener_override_base("listener.name.controller.connections.max.reauth.ms"),
            Some("connections.max.reauth.ms")
        );
        assert!(
            parse_broker_config("listener.name.controller.connections.max.reauth.ms", "-1")
                .is_err()
        );
    }

    #[test]
    fn per_listener_sasl_settings_name_their_mechanism_for_jaas() {
        assert_eq!(
            listener_override_base("listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config"),
            Some("sasl.jaas.config")
        );
        assert_eq!(
            listener_override_base("listener.name.sasl_ssl.sasl.enabled.mechanisms"),
            Some("sasl.enabled.mechanisms")
        );
        // Kafka's listener JAAS key always names the mechanism.
        assert_eq!(
            listener_override_base("listener.name.sasl_ssl.sasl.jaas.config"),
            None
        );
        assert_eq!(
            listener_override_base("listener.name.sasl_ssl.PLAIN.sasl.jaas.config"),
            None
        );
        assert_eq!(
            listener_override_base("listener.name.sasl_ssl.plain.sasl.jaas.confi"),
            None
        );
        let def = broker_config("listener.name.external.plain.sasl.jaas.config").expect("known");
        assert_eq!(def.name, "sasl.jaas.config");
        assert!(parse_broker_config("connection.failed.authentication.delay.ms", "-1").is_err());
        assert!(parse_broker_config("connections.max.reauth.ms", "60000").is_ok());
    }
}
