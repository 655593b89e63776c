//! Consumer settings, under Kafka's names and with Kafka's defaults.

use std::time::Duration;

use gregor_assign::{builtin, Assignor};

use crate::client::ClientConfig;
use crate::error::{Error, Result};
pub use crate::types::IsolationLevel;

/// `auto.offset.reset`: where to start when a partition has no committed offset (or its
/// position is out of range).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AutoOffsetReset {
    Earliest,
    Latest,
    /// Fail with an error instead.
    None,
}

impl AutoOffsetReset {
    pub fn parse(s: &str) -> Result<AutoOffsetReset> {
        match s.trim() {
            "earliest" => Ok(AutoOffsetReset::Earliest),
            "latest" => Ok(AutoOffsetReset::Latest),
            "none" => Ok(AutoOffsetReset::None),
            other => Err(Error::InvalidArgument(format!(
                "invalid auto.offset.reset '{other}': expected earliest, latest or none"
            ))),
        }
    }
}

/// `group.protocol`: how the consumer takes part in its group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupProtocol {
    /// JoinGroup / SyncGroup / Heartbeat, with the assignment computed by the group's leader.
    Classic,
    /// KIP-848: ConsumerGroupHeartbeat, with the assignment computed by the coordinator and
    /// reconciled incrementally by each member.
    Consumer,
}

impl GroupProtocol {
    /// Kafka's spellings, in any case.
    pub fn parse(s: &str) -> Result<GroupProtocol> {
        match s.trim().to_ascii_lowercase().as_str() {
            "classic" => Ok(GroupProtocol::Classic),
            "consumer" => Ok(GroupProtocol::Consumer),
            _ => Err(Error::InvalidArgument(format!(
                "invalid group.protocol '{s}': expected classic or consumer"
            ))),
        }
    }
}

/// Consumer settings.
pub struct ConsumerConfig {
    /// Connection settings (`bootstrap.servers`, `client.id`, `request.timeout.ms`...).
    pub client: ClientConfig,
    /// `group.id`.
    pub group_id: String,
    /// `group.instance.id`: a static member (KIP-345) keeps its assignment across restarts
    /// within `session.timeout.ms`, without a rebalance.
    pub group_instance_id: Option<String>,
    /// `client.rack`, for rack-aware assignment.
    pub client_rack: Option<String>,
    /// `session.timeout.ms` (default 45 s).
    pub session_timeout: Duration,
    /// `heartbeat.interval.ms` (default 3 s).
    pub heartbeat_interval: Duration,
    /// `max.poll.interval.ms` (default 300 s); also the rebalance timeout.
    pub max_poll_interval: Duration,
    /// `partition.assignment.strategy`, preferred first (default `[range, cooperative-sticky]`).
    /// Names of built-in strategies or of entries of `custom_assignors`.
    pub partition_assignment_strategy: Vec<String>,
    /// User strategies (the `gregor_assign::Assignor` trait), referred to by name above.
    pub custom_assignors: Vec<Box<dyn Assignor>>,
    /// `enable.auto.commit` (default true).
    pub enable_auto_commit: bool,
    /// `auto.commit.interval.ms` (default 5 s).
    pub auto_commit_interval: Duration,
    /// `auto.offset.reset` (default latest).
    pub auto_offset_reset: AutoOffsetReset,
    /// `fetch.min.bytes` (default 1).
    pub fetch_min_bytes: i32,
    /// `fetch.max.wait.ms` (default 500 ms).
    pub fetch_max_wait: Duration,
    /// `fetch.max.bytes` (default 50 MiB): the most a Fetch asks one broker for, and also the
    /// bound on what is held per broker: a broker gets a new Fetch only while at most half of
    /// this is buffered from it (fetched, not yet returned by `poll`) and that leaves room for
    /// one partition's worth, and that Fetch asks for the room left, at most half of this.
    pub fetch_max_bytes: i32,
    /// `max.partition.fetch.bytes` (default 1 MiB): the most a Fetch asks per partition; a
    /// partition is fetched again (prefetched) while less than this of it is buffered.
    pub max_partition_fetch_bytes: i32,
    /// `max.poll.records` (default 500).
    pub max_poll_records: usize,
    /// `check.crcs` (default true, as Java's): check the CRC32C of every fetched batch. With
    /// false an uncompressed batch's CRC is not computed, which saves its cost per byte when
    /// the transport is trusted; every other check of the batch and its records stays, and a
    /// compressed batch's CRC is still checked by the decompressing decoder. A batch that
    /// fails a check is not returned (the partition is fetched again after
    /// `retry.backoff.ms`).
    pub check_crcs: bool,
    /// `isolation.level` (default `read_uncommitted`; [`IsolationLevel::parse`] takes Kafka's
    /// spellings). `read_committed`: Fetches stop at the last stable offset and the records of
    /// aborted transactions are dropped; ListOffsets for `auto.offset.reset=latest` answers
    /// the last stable offset. Needs Fetch v4 and ListOffsets v2. Control records (transaction
    /// markers) are never returned, in either level; the position moves past them.
    pub isolation_level: IsolationLevel,
    /// `metadata.max.age.ms` (default 5 min): how often a pattern subscription looks for new
    /// matching topics.
    pub metadata_max_age: Duration,
    /// `group.protocol` (default classic). With `consumer` the coordinator assigns the
    /// partitions: `partition.assignment.strategy`, `session.timeout.ms` and the custom
    /// assignors are not used, and `heartbeat.interval.ms` only until the coordinator names
    /// its interval.
    pub group_protocol: GroupProtocol,
    /// `group.remote.assignor` (group.protocol=consumer): the coordinator's assignor to ask
    /// for (`uniform`, `range`); `None` leaves the choice to the coordinator.
    pub group_remote_assignor: Option<String>,
}

impl std::fmt::Debug for ConsumerConfig {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConsumerConfig")
            .field("group_id", &self.group_id)
            .field("group_instance_id", &self.group_instance_id)
            .field(
                "partition_assignment_strategy",
                &self.partition_assignment_strategy,
            )
            .finish_non_exhaustive()
    }
}

impl ConsumerConfig {
    /// Kafka's defaults for everything but the bootstrap servers and the group.
    pub fn new(bootstrap_servers: &str, group_id: &str) -> Result<ConsumerConfig> {
        Ok(ConsumerConfig {
            client: ClientConfig::new(bootstrap_servers)?,
            group_id: group_id.to_string(),
            group_instance_id: None,
            client_rack: None,
            session_timeout: Duration::from_secs(45),
            heartbeat_interval: Duration::from_secs(3),
            max_poll_interval: Duration::from_secs(300),
            partition_assignment_strategy: vec!["range".into(), "cooperative-sticky".into()],
            custom_assignors: Vec::new(),
            enable_auto_commit: true,
            auto_commit_interval: Duration::from_secs(5),
            auto_offset_reset: AutoOffsetReset::Latest,
            fetch_min_bytes: 1,
            fetch_max_wait: Duration::from_millis(500),
            fetch_max_bytes: 52_428_800,
            max_partition_fetch_bytes: 1_048_576,
            max_poll_records: 500,
            check_crcs: true,
            isolation_level: IsolationLevel::ReadUncommitted,
            metadata_max_age: Duration::from_secs(300),
            group_protocol: GroupProtocol::Classic,
            group_remote_assignor: None,
        })
    }

    /// Checks the settings and resolves the strategy names, in preference order.
    pub(crate) fn take_assignors(&mut self) -> Result<Vec<Box<dyn Assignor>>> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.group_id.is_empty() {
            return bad("group.id must not be empty".into());
        }
        if self.heartbeat_interval >= self.session_timeout {
            return bad("heartbeat.interval.ms must be lower than session.timeout.ms".into());
        }
        if self.max_poll_records == 0 {
            return bad("max.poll.records must be at least 1".into());
        }
        if self.fetch_max_bytes < 1 {
            return bad(format!(
                "fetch.max.bytes must be at least 1: {}",
                self.fetch_max_bytes
            ));
        }
        if self.max_partition_fetch_bytes < 1 {
            return bad(format!(
                "max.partition.fetch.bytes must be at least 1: {}",
                self.max_partition_fetch_bytes
            ));
        }
        if self.fetch_min_bytes < 0 {
            return bad(format!(
                "fetch.min.bytes must not be negative: {}",
                self.fetch_min_bytes
            ));
        }
        if self.group_instance_id.as_deref() == Some("") {
            return bad("group.instance.id must not be empty".into());
        }
        if self.group_remote_assignor.as_deref() == Some("") {
            return bad("group.remote.assignor must not be empty".into());
        }
        if self.group_protocol == GroupProtocol::Consumer {
            // The coordinator assigns: no client-side strategy is used.
            return Ok(Vec::new());
        }
        if self.partition_assignment_strategy.is_empty() {
            return bad("partition.assignment.strategy must name at least one strategy".into());
        }
        let mut custom = std::mem::take(&mut self.custom_assignors);
        let mut out: Vec<Box<dyn Assignor>> = Vec::new();
        for name in &self.partition_assignment_strategy {
            if out.iter().any(|a| a.name() == name) {
                return bad(format!(
                    "partition.assignment.strategy names '{name}' twice"
                ));
            }
            match custom.iter().position(|a| a.name() == name) {
                Some(i) => out.push(custom.remove(i)),
                None => out.push(builtin(name).map_err(|e| Error::InvalidArgument(e.to_string()))?),
            }
        }
        Ok(out)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let mut c = ConsumerConfig::new("h:9092", "g").unwrap();
        assert_eq!(c.session_timeout, Duration::from_secs(45));
        assert_eq!(c.max_poll_interval, Duration::from_secs(300));
        assert!(c.check_crcs);
        assert_eq!(c.isolation_level, IsolationLevel::ReadUncommitted);
        let names: Vec<String> = c
            .take_assignors()
            .unwrap()
            .iter()
            .map(|a| a.name().to_string())
            .collect();
        assert_eq!(names, vec!["range", "cooperative-sticky"]);
    }

    #[test]
    fn bad_settings_are_refused() {
        let mut c = ConsumerConfig::new("h:9092", "g").unwrap();
        c.partition_assignment_strategy = vec!["fair".into()];
        assert!(c
            .take_assignors()
            .err()
            .unwrap()
            .to_string()
            .contains("fair"));
        let mut c = ConsumerConfig::new("h:9092", "g").unwrap();
        c.heartbeat_interval = c.session_timeout;
        assert!(c.take_assignors().is_err());
        let mut c = ConsumerConfig::new("h:9092", "").unwrap();
        assert!(c.take_assignors().is_err());
        let mut c = ConsumerConfig::new("h:9092", "g").unwrap();
        c.partition_assignment_strategy = vec!["range".into(), "range".into()];
        assert!(c.take_assignors().is_err());
        for (setting, set) in [
            (
                "fetch.max.bytes",
                (|c: &mut ConsumerConfig| c.fetch_max_bytes = 0) as fn(&mut ConsumerConfig),
            ),
            ("max.partition.fetch.bytes", |c| {
                c.max_partition_fetch_bytes = -1
            }),
            ("fetch.min.bytes", |c| c.fetch_min_bytes = -1),
        ] {
            let mut c = ConsumerConfig::new("h:9092", "g").unwrap();
            set(&mut c);
            let err = c.take_assignors().err().expect(setting).to_string();
            assert!(err.contains(setting), "{err}");
        }
        assert_eq!(
            AutoOffsetReset::parse("none").unwrap(),
            AutoOffsetReset::None
        );
        assert!(AutoOffsetReset::parse("smallest").is_err());
    }

    #[test]
    fn group_protocol_parses_in_any_case() {
        assert_eq!(
            GroupProtocol::parse("CONSUMER").unwrap(),
            GroupProtocol::Consumer
        );
        assert_eq!(
            GroupProtocol::parse(" Classic ").unwrap(),
            GroupProtocol::Classic
        );
        assert!(GroupProtocol::parse("eager").is_err());
        let mut c = ConsumerConfig::new("h:9092", "g").unwrap();
        assert_eq!(c.group_protocol, GroupProtocol::Classic);
        c.group_protocol = GroupProtocol::Consumer;
        c.partition_assignment_strategy = vec!["fair".into()];
        assert!(c.take_assignors().unwrap().is_empty());
        c.group_remote_assignor = Some(String::new());
        assert!(c.take_assignors().is_err());
    }
}
