//! Config types, values, validators and parsing, with Kafka's parsing rules and error messages
//! (`Invalid value X for configuration KEY: problem`).

use std::fmt;

/// The type of a config (Kafka's `ConfigDef.Type`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ConfigType {
    /// `true` / `false` (case-insensitive).
    Boolean,
    /// Free text (trimmed).
    String,
    /// 32-bit integer.
    Int,
    /// 16-bit integer.
    Short,
    /// 64-bit integer.
    Long,
    /// Floating point.
    Double,
    /// Comma-separated list.
    List,
    /// Secret text; described with a null value.
    Password,
}

impl ConfigType {
    /// The `config_type` id of DescribeConfigs v3+.
    pub fn describe_id(self) -> i8 {
        match self {
            ConfigType::Boolean => 1,
            ConfigType::String => 2,
            ConfigType::Int => 3,
            ConfigType::Short => 4,
            ConfigType::Long => 5,
            ConfigType::Double => 6,
            ConfigType::List => 7,
            ConfigType::Password => 9,
        }
    }

    fn name(self) -> &'static str {
        match self {
            ConfigType::Boolean => "BOOLEAN",
            ConfigType::String => "STRING",
            ConfigType::Int => "INT",
            ConfigType::Short => "SHORT",
            ConfigType::Long => "LONG",
            ConfigType::Double => "DOUBLE",
            ConfigType::List => "LIST",
            ConfigType::Password => "PASSWORD",
        }
    }
}

/// A parsed config value.
#[derive(Debug, Clone, PartialEq)]
pub enum ConfigValue {
    /// Boolean.
    Bool(bool),
    /// String or password.
    String(String),
    /// Int.
    Int(i32),
    /// Short.
    Short(i16),
    /// Long.
    Long(i64),
    /// Double.
    Double(f64),
    /// List.
    List(Vec<String>),
}

impl ConfigValue {
    /// As i64 for any integer type.
    pub fn as_i64(&self) -> Option<i64> {
        match *self {
            ConfigValue::Int(v) => Some(i64::from(v)),
            ConfigValue::Short(v) => Some(i64::from(v)),
            ConfigValue::Long(v) => Some(v),
            _ => None,
        }
    }

    /// As bool.
    pub fn as_bool(&self) -> Option<bool> {
        match *self {
            ConfigValue::Bool(b) => Some(b),
            _ => None,
        }
    }

    /// As string.
    pub fn as_str(&self) -> Option<&str> {
        match self {
            ConfigValue::String(s) => Some(s),
            _ => None,
        }
    }

    /// As list.
    pub fn as_list(&self) -> Option<&[String]> {
        match self {
            ConfigValue::List(l) => Some(l),
            _ => None,
        }
    }
}

impl fmt::Display for ConfigValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ConfigValue::Bool(b) => write!(f, "{b}"),
            ConfigValue::String(s) => f.write_str(s),
            ConfigValue::Int(v) => write!(f, "{v}"),
            ConfigValue::Short(v) => write!(f, "{v}"),
            ConfigValue::Long(v) => write!(f, "{v}"),
            ConfigValue::Double(v) => write!(f, "{v:?}"),
            ConfigValue::List(l) => f.write_str(&l.join(",")),
        }
    }
}

/// A constraint on a value (Kafka's `ConfigDef.Validator`s that Gregor's configs use).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Validator {
    /// Anything of the right type.
    Any,
    /// Integer `>= min`.
    AtLeast(i64),
    /// Integer in `min..=max`.
    Between(i64, i64),
    /// Double in `min..=max`.
    BetweenDouble(f64, f64),
    /// One of these strings (exact match).
    OneOf(&'static [&'static str]),
    /// Every list element is one of these strings.
    ListOf(&'static [&'static str]),
    /// `*`, or a list of `partition:broker` entries (the replication throttle lists).
    ThrottledReplicas,
}

/// Why a config was rejected; `Display` is the message Kafka clients see with `INVALID_CONFIG`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ConfigError {
    /// No config of that name exists.
    #[error("Unknown {scope} config name: {key}")]
    Unknown {
        /// `topic` or `broker`.
        scope: &'static str,
        /// The key.
        key: String,
    },
    /// The value does not parse or does not validate.
    #[error("Invalid value {value} for configuration {key}: {problem}")]
    InvalidValue {
        /// The key.
        key: String,
        /// The rejected value.
        value: String,
        /// What is wrong.
        problem: String,
    },
    /// A broker config that cannot change while the broker runs.
    #[error("Cannot update these configs dynamically: {key}")]
    NotDynamic {
        /// The key.
        key: String,
    },
    /// Two configs contradict each other.
    #[error("{0}")]
    Conflict(String),
    /// A setting whose feature does not exist yet, set to something other than its default.
    #[error("{key} is not supported yet ({reason}); only its default ({default}) is accepted")]
    Unsupported {
        /// The key.
        key: String,
        /// Why.
        reason: &'static str,
        /// The default, as text.
        default: &'static str,
    },
}

/// Parse `raw` as type `ty` and check it against `validator`, naming `key` in errors.
pub fn parse_value(
    key: &str,
    ty: ConfigType,
    validator: Validator,
    raw: &str,
) -> Result<ConfigValue, ConfigError> {
    let value = parse_typed(ty, raw.trim()).map_err(|problem| invalid(key, raw, problem))?;
    validate(validator, key, raw, &value)?;
    Ok(value)
}

fn invalid(key: &str, value: &str, problem: String) -> ConfigError {
    ConfigError::InvalidValue {
        key: key.to_string(),
        value: value.to_string(),
        problem,
    }
}

/// Parses the trimmed text `t` as `ty`; the error is the problem to report.
fn parse_typed(ty: ConfigType, t: &str) -> Result<ConfigValue, String> {
    let not_a_number = || format!("Not a number of type {}", ty.name());
    Ok(match ty {
        ConfigType::Boolean => {
            if t.eq_ignore_ascii_case("true") {
                ConfigValue::Bool(true)
            } else if t.eq_ignore_ascii_case("false") {
                ConfigValue::Bool(false)
            } else {
                return Err("Expected value to be either true or false".into());
            }
        }
        ConfigType::String | ConfigType::Password => ConfigValue::String(t.to_string()),
        ConfigType::Int => ConfigValue::Int(t.parse().map_err(|_| not_a_number())?),
        ConfigType::Short => ConfigValue::Short(t.parse().map_err(|_| not_a_number())?),
        ConfigType::Long => ConfigValue::Long(t.parse().map_err(|_| not_a_number())?),
        ConfigType::Double => {
            let v: f64 = t.parse().map_err(|_| not_a_number())?;
            if !v.is_finite() {
                return Err(not_a_number());
            }
            ConfigValue::Double(v)
        }
        ConfigType::List => ConfigValue::List(split_list(t)),
    })
}

/// Checks a parsed `value` against `validator`; errors name the raw text, or the offending
/// list element for `ListOf`.
fn validate(
    validator: Validator,
    key: &str,
    raw: &str,
    value: &ConfigValue,
) -> Result<(), ConfigError> {
    let bad = |problem: String| Err(invalid(key, raw, problem));
    match validator {
        Validator::Any => {}
        Validator::AtLeast(min) => {
            if value.as_i64().is_some_and(|v| v < min) {
                return bad(format!("Value must be at least {min}"));
            }
        }
        Validator::Between(min, max) => {
            if let Some(v) = value.as_i64() {
                if v < min {
                    return bad(format!("Value must be no less than {min}"));
                }
                if v > max {
                    return bad(format!("Value must be no more than {max}"));
                }
            }
        }
        Validator::BetweenDouble(min, max) => {
            if let ConfigValue::Double(v) = *value {
                if v < min {
                    return bad(format!("Value must be no less than {min}"));
                }
                if v > max {
                    return bad(format!("Value must be no more than {max}"));
                }
            }
        }
        Validator::OneOf(allowed) => {
            if let Some(s) = value.as_str() {
                if !allowed.contains(&s) {
                    return bad(format!("String must be one of: {}", allowed.join(", ")));
                }
            }
        }
        Validator::ThrottledReplicas => {
            if value.as_list().is_some_and(|l| !is_throttled_replicas(l)) {
                return bad(
                    "must be the literal '*' or a list of replicas in the following format: \
                     [partitionId]:[brokerId],[partitionId]:[brokerId],..."
                        .to_string(),
                );
            }
        }
        Validator::ListOf(allowed) => {
            if let Some(list) = value.as_list() {
                if let Some(x) = list.iter().find(|x| !allowed.contains(&x.as_str())) {
                    let problem = format!("String must be one of: {}", allowed.join(", "));
                    return Err(invalid(key, x, problem));
                }
            }
        }
    }
    Ok(())
}

/// `*`, or a list of `partition:broker` entries with non-negative numbers.
fn is_throttled_replicas(list: &[String]) -> bool {
    let entry = |x: &String| {
        x.split_once(':').is_some_and(|(p, b)| {
            p.trim().parse::<i32>().is_ok_and(|p| p >= 0)
                && b.trim().parse::<i32>().is_ok_and(|b| b >= 0)
        })
    };
    let star = list.len() == 1 && list[0] == "*";
    star || list.iter().all(entry)
}

/// Split a list value as Kafka does: trim, empty means no elements, elements separated by
/// commas with optional surrounding whitespace.
pub fn split_list(raw: &str) -> Vec<String> {
    let t = raw.trim();
    if t.is_empty() {
        Vec::new()
    } else {
        t.split(',').map(|s| s.trim().to_string()).collect()
    }
}
