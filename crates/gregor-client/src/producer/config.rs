//! Producer settings, under Kafka's names and with Kafka's defaults.

use std::time::Duration;

use crate::client::ClientConfig;
use crate::error::{Error, Result};

/// `acks`: how many replicas must have a batch before the leader answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Acks {
    /// `acks=0`: the broker sends no response; a record counts as delivered once its request
    /// is written to the socket, and its offset is unknown (-1).
    None,
    /// `acks=1`: the leader wrote it.
    Leader,
    /// `acks=all` (-1): every in-sync replica has it.
    All,
}

impl Acks {
    pub fn wire(self) -> i16 {
        match self {
            Acks::None => 0,
            Acks::Leader => 1,
            Acks::All => -1,
        }
    }

    /// Parses Kafka's spellings: `0`, `1`, `all`, `-1`.
    pub fn parse(s: &str) -> Result<Acks> {
        match s.trim() {
            "0" => Ok(Acks::None),
            "1" => Ok(Acks::Leader),
            "all" | "-1" => Ok(Acks::All),
            other => Err(Error::InvalidArgument(format!(
                "invalid acks '{other}': expected 0, 1, all or -1"
            ))),
        }
    }
}

/// `compression.type`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    None,
    Gzip,
    Snappy,
    Lz4,
    Zstd,
}

impl Compression {
    pub fn parse(s: &str) -> Result<Compression> {
        match s.trim() {
            "none" => Ok(Compression::None),
            "gzip" => Ok(Compression::Gzip),
            "snappy" => Ok(Compression::Snappy),
            "lz4" => Ok(Compression::Lz4),
            "zstd" => Ok(Compression::Zstd),
            other => Err(Error::InvalidArgument(format!(
                "invalid compression.type '{other}': expected none, gzip, snappy, lz4 or zstd"
            ))),
        }
    }

    pub(crate) fn codec(self) -> kafka_protocol::records::Compression {
        use kafka_protocol::records::Compression as C;
        match self {
            Compression::None => C::None,
            Compression::Gzip => C::Gzip,
            Compression::Snappy => C::Snappy,
            Compression::Lz4 => C::Lz4,
            Compression::Zstd => C::Zstd,
        }
    }
}

/// Producer settings.
#[derive(Debug, Clone)]
pub struct ProducerConfig {
    /// Connection settings (`bootstrap.servers`, `client.id`, `request.timeout.ms`...).
    pub client: ClientConfig,
    /// `acks` (default `all`).
    pub acks: Acks,
    /// `enable.idempotence` (default true): InitProducerId, per-partition sequence numbers, and
    /// retries that neither duplicate nor reorder.
    pub enable_idempotence: bool,
    /// `linger.ms` (default 5 ms): how long a batch waits for more records.
    pub linger: Duration,
    /// `batch.size` (default 16384): a batch is closed once it holds this many bytes.
    pub batch_size: usize,
    /// `compression.type` (default none).
    pub compression: Compression,
    /// `max.in.flight.requests.per.connection` (default 5; at most 5 with idempotence): Produce
    /// requests sent to one broker and not yet answered (and so batches of one partition).
    pub max_in_flight: usize,
    /// `retries` (default `i32::MAX`: bounded by `delivery.timeout.ms`).
    pub retries: u32,
    /// `retry.backoff.ms` (default 100 ms).
    pub retry_backoff: Duration,
    /// `delivery.timeout.ms` (default 120 s): from `send` to the record's result, retries
    /// included.
    pub delivery_timeout: Duration,
    /// `max.request.size` (default 1 MiB): a single record larger than this is refused.
    pub max_request_size: usize,
    /// `max.block.ms` (default 60 s): how long `send` waits for topic metadata.
    pub max_block: Duration,
    /// Records accepted by `send` and not yet batched before `send` waits (bounds memory, in the
    /// role of `buffer.memory`).
    pub max_queued_records: usize,
    /// `transactional.id` (default none): makes the producer transactional (`init_transactions`,
    /// `begin_transaction`...); requires idempotence, and so `acks=all`.
    pub transactional_id: Option<String>,
    /// `transaction.timeout.ms` (default 60 s): how long the coordinator lets a transaction
    /// stay open before aborting it.
    pub transaction_timeout: Duration,
}

impl ProducerConfig {
    /// Kafka's defaults for everything but the bootstrap servers.
    pub fn new(bootstrap_servers: &str) -> Result<ProducerConfig> {
        Ok(ProducerConfig {
            client: ClientConfig::new(bootstrap_servers)?,
            acks: Acks::All,
            enable_idempotence: true,
            linger: Duration::from_millis(5),
            batch_size: 16_384,
            compression: Compression::None,
            max_in_flight: 5,
            retries: i32::MAX as u32,
            retry_backoff: Duration::from_millis(100),
            delivery_timeout: Duration::from_secs(120),
            max_request_size: 1_048_576,
            max_block: Duration::from_secs(60),
            max_queued_records: 100_000,
            transactional_id: None,
            transaction_timeout: Duration::from_secs(60),
        })
    }

    /// Refuses combinations Kafka's producer refuses (its `ConfigException`s).
    pub fn validate(&self) -> Result<()> {
        let bad = |m: String| Err(Error::InvalidArgument(m));
        if self.batch_size == 0 {
            return bad("batch.size must be at least 1".into());
        }
        if self.max_in_flight == 0 {
            return bad("max.in.flight.requests.per.connection must be at least 1".into());
        }
        if self.max_queued_records == 0 {
            return bad("max_queued_records must be at least 1".into());
        }
        if let Some(id) = &self.transactional_id {
            // Kafka's ConfigException for the same combinations.
            if id.is_empty() {
                return bad("transactional.id must not be empty".into());
            }
            if !self.enable_idempotence {
                return bad(
                    "cannot set a transactional.id without also enabling idempotence (enable.idempotence=true)"
                        .into(),
                );
            }
            if self.acks != Acks::All {
                return bad("transactional.id requires acks=all".into());
            }
            let ms = self.transaction_timeout.as_millis();
            if ms == 0 || ms > i32::MAX as u128 {
                return bad(format!(
                    "transaction.timeout.ms must be between 1 and {} (got {ms})",
                    i32::MAX
                ));
            }
        }
        if self.enable_idempotence {
            if self.acks != Acks::All {
                return bad("enable.idempotence=true requires acks=all".into());
            }
            if self.max_in_flight > 5 {
                return bad(
                    "enable.idempotence=true requires max.in.flight.requests.per.connection <= 5"
                        .into(),
                );
            }
            if self.retries == 0 {
                return bad("enable.idempotence=true requires retries > 0".into());
            }
        }
        if self.delivery_timeout < self.linger + self.client.request_timeout {
            return bad(format!(
                "delivery.timeout.ms ({} ms) must be at least linger.ms + request.timeout.ms ({} ms)",
                self.delivery_timeout.as_millis(),
                (self.linger + self.client.request_timeout).as_millis()
            ));
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas_and_valid() {
        let c = ProducerConfig::new("h:9092").unwrap();
        assert_eq!(c.acks, Acks::All);
        assert!(c.enable_idempotence);
        assert_eq!(c.batch_size, 16_384);
        assert_eq!(c.max_in_flight, 5);
        c.validate().unwrap();
    }

    #[test]
    fn kafka_refused_combinations_are_refused() {
        let mut c = ProducerConfig::new("h:9092").unwrap();
        c.acks = Acks::Leader;
        assert!(c.validate().unwrap_err().to_string().contains("acks=all"));
        c.acks = Acks::None;
        assert!(c.validate().unwrap_err().to_string().contains("acks=all"));
        c.enable_idempotence = false;
        c.validate().unwrap();
        let mut c = ProducerConfig::new("h:9092").unwrap();
        c.max_in_flight = 6;
        assert!(c.validate().is_err());
        let mut c = ProducerConfig::new("h:9092").unwrap();
        c.delivery_timeout = Duration::from_millis(10);
        assert!(c.validate().is_err());
    }

    #[test]
    fn a_transactional_id_needs_idempotence_and_acks_all() {
        let mut c = ProducerConfig::new("h:9092").unwrap();
        c.transactional_id = Some("tx".into());
        assert_eq!(c.transaction_timeout, Duration::from_millis(60_000));
        c.validate().unwrap();
        c.enable_idempotence = false;
        let e = c.validate().unwrap_err().to_string();
        assert!(
            e.contains("transactional.id") && e.contains("idempotence"),
            "{e}"
        );
        c.enable_idempotence = true;
        c.acks = Acks::Leader;
        assert!(c.validate().unwrap_err().to_string().contains("acks=all"));
        c.acks = Acks::All;
        c.transaction_timeout = Duration::ZERO;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("transaction.timeout.ms"));
        c.transaction_timeout = Duration::from_secs(60);
        c.transactional_id = Some(String::new());
        assert!(c.validate().is_err());
    }

    #[test]
    fn settings_parse_kafka_spellings() {
        assert_eq!(Acks::parse("all").unwrap(), Acks::All);
        assert_eq!(Acks::parse("-1").unwrap(), Acks::All);
        assert_eq!(Acks::parse("1").unwrap().wire(), 1);
        assert_eq!(Acks::parse("0").unwrap(), Acks::None);
        assert_eq!(Acks::None.wire(), 0);
        assert!(Acks::parse("2").is_err());
        for (s, c) in [
            ("none", Compression::None),
            ("gzip", Compression::Gzip),
            ("snappy", Compression::Snappy),
            ("lz4", Compression::Lz4),
            ("zstd", Compression::Zstd),
        ] {
            assert_eq!(Compression::parse(s).unwrap(), c);
        }
        assert!(Compression::parse("brotli").is_err());
    }
}
