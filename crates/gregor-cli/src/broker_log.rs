//! The broker's log: its default filter and its two formats, text for people and JSON lines for
//! log shippers (`--log-format json` or `GREGOR_LOG_FORMAT=json`).

use std::fmt;

use serde_json::{Map, Value};
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::Writer;
use tracing_subscriber::fmt::time::{FormatTime, SystemTime};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// The default filter when RUST_LOG is not set. openraft narrates every election step at INFO
/// and every retry to an unreachable peer at WARN and ERROR (about 40 lines a second while one
/// voter is down); Gregor logs the outcomes itself (elections, a peer going and coming back),
/// so openraft's targets whose events are normal are lowered:
/// - `openraft::replication`: each failed replication attempt and each backoff;
/// - `openraft::engine::handler::replication_handler`: each failed progress update (its ERROR,
///   a broken invariant, stays);
/// - `openraft::core::raft_core`: "message will be ignored because vote changed" at every
///   start (its ERRORs stay, but for failed RPCs to a peer: see [`is_peer_rpc_failure`]);
/// - `openraft::raft::raft_inner`: "raft stopped" errors of calls made during shutdown.
pub const DEFAULT_FILTER: &str = "info,openraft=warn,openraft::replication=off,\
openraft::engine::handler::replication_handler=error,openraft::core::raft_core=error,\
openraft::raft::raft_inner=off";

/// The environment variable that chooses the format when `--log-format` is not given.
pub const FORMAT_ENV: &str = "GREGOR_LOG_FORMAT";

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One human-readable line per event.
    Text,
    /// One JSON object per line: timestamp, level, target, fields (message included), spans.
    Json,
}

/// The format: the flag, else the environment variable, else text.
pub fn choose(flag: Option<LogFormat>, env: Option<&str>) -> Result<LogFormat, String> {
    if let Some(f) = flag {
        return Ok(f);
    }
    match env.map(str::trim) {
        None | Some("") => Ok(LogFormat::Text),
        Some(v) if v.eq_ignore_ascii_case("text") => Ok(LogFormat::Text),
        Some(v) if v.eq_ignore_ascii_case("json") => Ok(LogFormat::Json),
        Some(v) => Err(format!(
            "{FORMAT_ENV}={v} is not a log format (text or json)"
        )),
    }
}

/// Installs the broker's subscriber on stderr.
pub fn init(format: LogFormat) {
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let (filter, by_default) = match tracing_subscriber::EnvFilter::try_from_default_env() {
        Ok(f) => (f, false),
        Err(_) => (DEFAULT_FILTER.into(), true),
    };
    let peer_failures =
        tracing_subscriber::filter::filter_fn(move |m| !(by_default && is_peer_rpc_failure(m)));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    match format {
        LogFormat::Text => builder
            .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
            .finish()
            .with(peer_failures)
            .init(),
        LogFormat::Json => builder
            .with_ansi(false)
            .event_format(JsonLines)
            .finish()
            .with(peer_failures)
            .init(),
    }
}

/// openraft's core logs each failed vote request and each unanswered leadership check at
/// ERROR, naming the peer in a `target` field: while a voter is down that is every election.
/// Gregor tells of an unreachable peer itself (`controller peer unreachable`), so at the
/// default filter these go; the core's other ERRORs (a fatal stop) stay.
fn is_peer_rpc_failure(meta: &tracing::Metadata<'_>) -> bool {
    meta.is_event()
        && meta.target() == "openraft::core::raft_core"
        && meta.fields().field("target").is_some()
}

/// Formats each event as one JSON object on its own line.
pub struct JsonLines;

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        let mut timestamp = String::new();
        SystemTime.format_time(&mut Writer::new(&mut timestamp))?;
        let mut fields = FieldsToJson::default();
        event.record(&mut fields);
        let spans: Vec<Value> = ctx
            .event_scope()
            .into_iter()
            .flat_map(|scope| scope.from_root())
            .map(|span| Value::String(span.name().to_string()))
            .collect();
        let meta = event.metadata();
        let line = json_line(&timestamp, meta.level(), meta.target(), fields.0, spans);
        writeln!(writer, "{line}")
    }
}

/// The JSON object of one event.
fn json_line(
    timestamp: &str,
    level: &tracing::Level,
    target: &str,
    fields: Map<String, Value>,
    spans: Vec<Value>,
) -> Value {
    let mut line = Map::new();
    line.insert("timestamp".into(), timestamp.into());
    line.insert("level".into(), level.as_str().into());
    line.insert("target".into(), target.into());
    line.insert("fields".into(), Value::Object(fields));
    if !spans.is_empty() {
        line.insert("spans".into(), Value::Array(spans));
    }
    Value::Object(line)
}

/// An event's fields as JSON values: numbers and booleans stay typed, the rest are strings.
#[derive(Default)]
struct FieldsToJson(Map<String, Value>);

impl Visit for FieldsToJson {
    fn record_i64(&mut self, field: &Field, value: i64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_u64(&mut self, field: &Field, value: u64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_f64(&mut self, field: &Field, value: f64) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_bool(&mut self, field: &Field, value: bool) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().into(), value.into());
    }
    fn record_debug(&mut self, field: &Field, value: &dyn fmt::Debug) {
        self.0
            .insert(field.name().into(), format!("{value:?}").into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_flag_wins_then_the_environment_then_text() {
        assert_eq!(
            choose(Some(LogFormat::Text), Some("json")),
            Ok(LogFormat::Text)
        );
        assert_eq!(choose(None, Some("JSON")), Ok(LogFormat::Json));
        assert_eq!(choose(None, Some("text")), Ok(LogFormat::Text));
        assert_eq!(choose(None, None), Ok(LogFormat::Text));
        assert_eq!(choose(None, Some("")), Ok(LogFormat::Text));
        assert!(choose(None, Some("xml")).is_err());
    }

    #[test]
    fn the_default_filter_parses() {
        let parsed: Result<tracing_subscriber::EnvFilter, _> = DEFAULT_FILTER.parse();
        assert!(parsed.is_ok(), "{parsed:?}");
    }

    #[test]
    fn a_json_line_keeps_field_types() {
        let mut fields = Map::new();
        fields.insert("message".into(), "controller peer unreachable".into());
        fields.insert("voter".into(), 2u64.into());
        let line = json_line(
            "2026-01-01T00:00:00Z",
            &tracing::Level::WARN,
            "gregor_quorum::rpc",
            fields,
            vec![],
        );
        assert_eq!(
            line,
            serde_json::json!({
                "timestamp": "2026-01-01T00:00:00Z",
                "level": "WARN",
                "target": "gregor_quorum::rpc",
                "fields": {"message": "controller peer unreachable", "voter": 2},
            })
        );
    }
}
