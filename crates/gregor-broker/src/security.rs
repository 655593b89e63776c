//! Who is on the other end of a connection: the listener's security protocol, the connection's
//! principal (`User:ANONYMOUS` until TLS client certificates or SASL say otherwise), and
//! `ssl.principal.mapping.rules`, which turn a client certificate's subject name into a
//! principal name. Pure.

use std::fmt;

use regex::Regex;

/// Kafka's security protocols (`listener.security.protocol.map` values), with their wire ids.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum SecurityProtocol {
    Plaintext,
    Ssl,
    SaslPlaintext,
    SaslSsl,
}

impl SecurityProtocol {
    pub const ALL: [SecurityProtocol; 4] = [
        SecurityProtocol::Plaintext,
        SecurityProtocol::Ssl,
        SecurityProtocol::SaslPlaintext,
        SecurityProtocol::SaslSsl,
    ];

    /// The id brokers register endpoints with (BrokerRegistration, `RegisterBrokerRecord`).
    pub fn id(self) -> i16 {
        match self {
            SecurityProtocol::Plaintext => 0,
            SecurityProtocol::Ssl => 1,
            SecurityProtocol::SaslPlaintext => 2,
            SecurityProtocol::SaslSsl => 3,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            SecurityProtocol::Plaintext => "PLAINTEXT",
            SecurityProtocol::Ssl => "SSL",
            SecurityProtocol::SaslPlaintext => "SASL_PLAINTEXT",
            SecurityProtocol::SaslSsl => "SASL_SSL",
        }
    }

    /// The protocol named `name` (Kafka's names are case-insensitive here).
    pub fn parse(name: &str) -> Option<SecurityProtocol> {
        Self::ALL
            .into_iter()
            .find(|p| p.name().eq_ignore_ascii_case(name.trim()))
    }

    /// Whether the connection starts with a TLS handshake.
    pub fn uses_tls(self) -> bool {
        matches!(self, SecurityProtocol::Ssl | SecurityProtocol::SaslSsl)
    }
}

impl fmt::Display for SecurityProtocol {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A principal as Kafka names it: `User:alice`.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct KafkaPrincipal {
    pub principal_type: String,
    pub name: String,
}

impl KafkaPrincipal {
    pub const USER_TYPE: &'static str = "User";

    pub fn user(name: impl Into<String>) -> KafkaPrincipal {
        KafkaPrincipal {
            principal_type: Self::USER_TYPE.to_string(),
            name: name.into(),
        }
    }

    /// Who a connection is before (or without) authentication.
    pub fn anonymous() -> KafkaPrincipal {
        Self::user("ANONYMOUS")
    }
}

impl fmt::Display for KafkaPrincipal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.principal_type, self.name)
    }
}

/// A problem in `ssl.principal.mapping.rules`.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum MappingRuleError {
    #[error(
        "ssl.principal.mapping.rules: expected DEFAULT or RULE:pattern/replacement/[LU] at '{0}'"
    )]
    Syntax(String),
    #[error("ssl.principal.mapping.rules: pattern '{pattern}' is not a valid regular expression: {reason}")]
    Pattern { pattern: String, reason: String },
}

/// Case change a rule applies to its result (`/L`, `/U`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Case {
    Keep,
    Lower,
    Upper,
}

#[derive(Debug, Clone)]
enum Rule {
    /// The distinguished name as it is.
    Default,
    Replace {
        /// Matches the whole name (a rule applies only when its pattern matches all of it).
        whole: Regex,
        pattern: Regex,
        /// In the regex crate's syntax (`${1}`).
        replacement: String,
        case: Case,
    },
}

/// `ssl.principal.mapping.rules`: the first rule whose pattern matches the whole subject
/// name gives the principal name; `DEFAULT` takes the name as it is.
#[derive(Debug, Clone)]
pub struct PrincipalMappingRules {
    rules: Vec<Rule>,
}

/// No rule applied to a distinguished name (Kafka refuses the connection).
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
#[error("no ssl.principal.mapping.rules rule applies to '{0}'")]
pub struct NoMatchingRule(pub String);

impl PrincipalMappingRules {
    /// Parses the setting's value: rules separated by commas (patterns may hold commas, and
    /// `\/` for a slash).
    pub fn parse(text: &str) -> Result<PrincipalMappingRules, MappingRuleError> {
        let mut rules = Vec::new();
        let mut rest = text.trim_start_matches([',', ' ', '\t', '\n']);
        while !rest.is_empty() {
            let (rule, after) = parse_rule(rest)?;
            rules.push(rule);
            let after = after.trim_start();
            rest = match after.strip_prefix(',') {
                Some(r) => r.trim_start_matches([',', ' ', '\t', '\n']),
                None if after.is_empty() => after,
                None => return Err(MappingRuleError::Syntax(after.to_string())),
            };
        }
        if rules.is_empty() {
            rules.push(Rule::Default);
        }
        Ok(PrincipalMappingRules { rules })
    }

    /// The principal name of a certificate whose subject is `dn` (RFC 2253 form).
    pub fn name_of(&self, dn: &str) -> Result<String, NoMatchingRule> {
        for rule in &self.rules {
            match rule {
                Rule::Default => return Ok(dn.to_string()),
                Rule::Replace {
                    whole,
                    pattern,
                    replacement,
                    case,
                } => {
                    if !whole.is_match(dn) {
                        continue;
                    }
                    let name = pattern.replace_all(dn, replacement.as_str());
                    return Ok(match case {
                        Case::Keep => name.into_owned(),
                        Case::Lower => name.to_lowercase(),
                        Case::Upper => name.to_uppercase(),
                    });
                }
            }
        }
        Err(NoMatchingRule(dn.to_string()))
    }
}

/// One rule at the start of `text`, and what follows it.
fn parse_rule(text: &str) -> Result<(Rule, &str), MappingRuleError> {
    if let Some(after) = text.strip_prefix("DEFAULT") {
        return Ok((Rule::Default, after));
    }
    let syntax = || MappingRuleError::Syntax(text.to_string());
    let body = text.strip_prefix("RULE:").ok_or_else(syntax)?;
    let (pattern, after) = until_slash(body).ok_or_else(syntax)?;
    let (replacement, after) = until_slash(after).ok_or_else(syntax)?;
    let (case, after) = match after.chars().next() {
        Some('L') => (Case::Lower, &after[1..]),
        Some('U') => (Case::Upper, &after[1..]),
        _ => (Case::Keep, after),
    };
    let compile = |p: &str| {
        Regex::new(p).map_err(|e| MappingRuleError::Pattern {
            pattern: pattern.clone(),
            reason: e.to_string(),
        })
    };
    let rule = Rule::Replace {
        whole: compile(&format!("^(?:{pattern})$"))?,
        pattern: compile(&pattern)?,
        replacement: replacement_syntax(&replacement),
        case,
    };
    Ok((rule, after))
}

/// The text up to the first slash not escaped as `\/` (unescaped), and what follows the slash.
fn until_slash(text: &str) -> Option<(String, &str)> {
    let mut out = String::new();
    let mut chars = text.char_indices();
    while let Some((i, c)) = chars.next() {
        match c {
            '/' => return Some((out, &text[i + 1..])),
            '\\' if text[i + 1..].starts_with('/') => {
                chars.next();
                out.push('/');
            }
            c => out.push(c),
        }
    }
    None
}

/// A replacement in Java's syntax (`$1`, `\$` for a dollar sign) in the regex crate's (`${1}`,
/// `$$`), so that `$1a` keeps meaning group 1 followed by `a`.
fn replacement_syntax(java: &str) -> String {
    let mut out = String::new();
    let mut chars = java.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            '\\' => match chars.next() {
                Some('$') => out.push_str("$$"),
                Some(other) => out.push(other),
                None => out.push('\\'),
            },
            '$' => {
                let mut digits = String::new();
                while let Some(d) = chars.peek().filter(|d| d.is_ascii_digit()) {
                    digits.push(*d);
                    chars.next();
                }
                if digits.is_empty() {
                    out.push_str("$$");
                } else {
                    out.push_str(&format!("${{{digits}}}"));
                }
            }
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn map(rules: &str, dn: &str) -> Result<String, NoMatchingRule> {
        PrincipalMappingRules::parse(rules)
            .expect("valid rules")
            .name_of(dn)
    }

    #[test]
    fn default_keeps_the_distinguished_name() {
        let dn = "CN=client,OU=eng,O=Acme,C=US";
        assert_eq!(map("DEFAULT", dn).as_deref(), Ok(dn));
        assert_eq!(map("", dn).as_deref(), Ok(dn), "empty means DEFAULT");
    }

    // Examples of Kafka's documentation ("Customizing SSL User Name").
    #[test]
    fn rules_from_kafkas_documentation() {
        let rules = "RULE:^CN=(.*?),OU=ServiceUsers.*$/$1/,RULE:^CN=(.*?),OU=(.*?),O=(.*?),L=(.*?),ST=(.*?),C=(.*?)$/$1@$2/L,RULE:^.*[Cc][Nn]=([a-zA-Z0-9.]*).*$/$1/L,DEFAULT";
        assert_eq!(
            map(
                rules,
                "CN=serviceuser,OU=ServiceUsers,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
            )
            .as_deref(),
            Ok("serviceuser")
        );
        assert_eq!(
            map(
                rules,
                "CN=adminUser,OU=Admin,O=Unknown,L=Unknown,ST=Unknown,C=Unknown"
            )
            .as_deref(),
            Ok("adminuser@admin")
        );
        assert_eq!(map(rules, "CN=Bob.Smith,O=Org").as_deref(), Ok("bob.smith"));
        assert_eq!(
            map(rules, "OU=none").as_deref(),
            Ok("OU=none"),
            "DEFAULT last"
        );
    }

    #[test]
    fn upper_case_escaped_slashes_and_group_digits() {
        assert_eq!(
            map("RULE:^CN=(.*)$/$1/U", "CN=alice").as_deref(),
            Ok("ALICE")
        );
        assert_eq!(
            map(r"RULE:^CN=(.*)\/(.*)$/$2-$1/", "CN=a/b").as_deref(),
            Ok("b-a")
        );
        // `$1x` is group 1 and an `x`, as in Java; `\$` is a dollar sign.
        assert_eq!(
            map(r"RULE:^CN=(.*)$/$1x\$/", "CN=bob").as_deref(),
            Ok("bobx$")
        );
    }

    #[test]
    fn a_rule_applies_only_to_a_whole_match() {
        let rules = "RULE:CN=(\\w+)/$1/";
        assert_eq!(map(rules, "CN=alice").as_deref(), Ok("alice"));
        assert_eq!(
            map(rules, "CN=alice,O=Acme"),
            Err(NoMatchingRule("CN=alice,O=Acme".into())),
            "no DEFAULT: nothing applies"
        );
    }

    #[test]
    fn malformed_rules_are_named() {
        for bad in [
            "RULE:abc",
            "RULE:^(.*)$/$1",
            "NOPE",
            "DEFAULT junk",
            "RULE:a/b/X",
        ] {
            let e = PrincipalMappingRules::parse(bad).expect_err(bad);
            assert!(
                e.to_string().contains("ssl.principal.mapping.rules"),
                "{bad}: {e}"
            );
        }
        let e = PrincipalMappingRules::parse("RULE:(/x/").expect_err("bad regex");
        assert!(matches!(e, MappingRuleError::Pattern { .. }), "{e}");
    }

    #[test]
    fn protocols_and_principals_print_as_kafka_names_them() {
        assert_eq!(
            SecurityProtocol::parse("sasl_ssl"),
            Some(SecurityProtocol::SaslSsl)
        );
        assert_eq!(SecurityProtocol::parse("TLS"), None);
        assert_eq!(
            SecurityProtocol::ALL.map(SecurityProtocol::id),
            [0, 1, 2, 3]
        );
        assert_eq!(KafkaPrincipal::anonymous().to_string(), "User:ANONYMOUS");
    }
}
