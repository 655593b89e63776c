//! Kafka's JAAS configuration line (`sasl.jaas.config`,
//! `listener.name.<listener>.<mechanism>.sasl.jaas.config`):
//! `<LoginModule class> <flag> key="value" key=value ...;`. Option values are secrets as often
//! as not (passwords), so the parsed entry's `Debug` lists option names only.

use crate::error::SaslError;
use std::collections::BTreeMap;

/// Longest JAAS text accepted.
const MAX_JAAS_BYTES: usize = 64 * 1024;

/// A JAAS control flag.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum JaasFlag {
    /// `required`.
    Required,
    /// `requisite`.
    Requisite,
    /// `sufficient`.
    Sufficient,
    /// `optional`.
    Optional,
}

/// One login module entry.
#[derive(Clone, PartialEq, Eq)]
pub struct JaasEntry {
    /// The login module class name.
    pub login_module: String,
    /// The control flag.
    pub flag: JaasFlag,
    /// Options in order of name.
    pub options: BTreeMap<String, String>,
}

impl std::fmt::Debug for JaasEntry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("JaasEntry")
            .field("login_module", &self.login_module)
            .field("flag", &self.flag)
            .field("options", &self.options.keys().collect::<Vec<_>>())
            .finish()
    }
}

struct Lexer<'a> {
    chars: std::iter::Peekable<std::str::Chars<'a>>,
}

#[derive(Debug, PartialEq)]
enum Token {
    Word(String),
    Quoted(String),
    Equals,
    Semicolon,
}

impl Lexer<'_> {
    fn next_token(&mut self) -> Result<Option<Token>, SaslError> {
        while self.chars.next_if(|c| c.is_whitespace()).is_some() {}
        let Some(c) = self.chars.next() else {
            return Ok(None);
        };
        Ok(Some(match c {
            '=' => Token::Equals,
            ';' => Token::Semicolon,
            '"' => Token::Quoted(self.quoted()?),
            c if is_word_char(c) => {
                let mut w = String::from(c);
                while let Some(c) = self.chars.next_if(|c| is_word_char(*c)) {
                    w.push(c);
                }
                Token::Word(w)
            }
            c => return Err(SaslError::Jaas(format!("unexpected character {c:?}"))),
        }))
    }

    fn quoted(&mut self) -> Result<String, SaslError> {
        let mut s = String::new();
        loop {
            match self.chars.next() {
                None => return Err(SaslError::Jaas("unterminated quoted value".into())),
                Some('"') => return Ok(s),
                Some('\\') => match self.chars.next() {
                    Some(c) => s.push(c),
                    None => return Err(SaslError::Jaas("unterminated quoted value".into())),
                },
                Some(c) => s.push(c),
            }
        }
    }
}

fn is_word_char(c: char) -> bool {
    !c.is_whitespace() && !matches!(c, '=' | ';' | '"')
}

/// Parses a JAAS configuration holding exactly one login module entry (what Kafka requires
/// of `sasl.jaas.config`).
pub fn parse_jaas(text: &str) -> Result<JaasEntry, SaslError> {
    SaslError::check_len("JAAS configuration", text.len(), MAX_JAAS_BYTES)?;
    let mut lexer = Lexer {
        chars: text.chars().peekable(),
    };
    let login_module = match lexer.next_token()? {
        Some(Token::Word(w)) => w,
        _ => return Err(SaslError::Jaas("expected a login module class".into())),
    };
    let flag = match lexer.next_token()? {
        Some(Token::Word(w)) => match w.to_ascii_lowercase().as_str() {
            "required" => JaasFlag::Required,
            "requisite" => JaasFlag::Requisite,
            "sufficient" => JaasFlag::Sufficient,
            "optional" => JaasFlag::Optional,
            _ => return Err(SaslError::Jaas(format!("invalid control flag {w:?}"))),
        },
        _ => return Err(SaslError::Jaas("expected a control flag".into())),
    };
    let mut options = BTreeMap::new();
    loop {
        let key = match lexer.next_token()? {
            Some(Token::Semicolon) => break,
            Some(Token::Word(k)) => k,
            _ => return Err(SaslError::Jaas("expected an option name or ';'".into())),
        };
        if lexer.next_token()? != Some(Token::Equals) {
            return Err(SaslError::Jaas(format!("expected '=' after option {key}")));
        }
        let value = match lexer.next_token()? {
            Some(Token::Word(v)) | Some(Token::Quoted(v)) => v,
            _ => {
                return Err(SaslError::Jaas(format!(
                    "expected a value for option {key}"
                )))
            }
        };
        options.insert(key, value);
    }
    if lexer.next_token()?.is_some() {
        return Err(SaslError::Jaas(
            "only one login module may be configured".into(),
        ));
    }
    Ok(JaasEntry {
        login_module,
        flag,
        options,
    })
}

/// The broker property that holds the JAAS configuration of `mechanism` on `listener`:
/// `listener.name.<listener>.<mechanism>.sasl.jaas.config`, both lowercased, as Kafka names it.
pub fn listener_jaas_key(listener: &str, mechanism: &str) -> String {
    format!(
        "listener.name.{}.{}.sasl.jaas.config",
        listener.to_ascii_lowercase(),
        mechanism.to_ascii_lowercase()
    )
}

/// The JAAS text for `mechanism` on `listener`, looked up as Kafka does: the listener's own
/// property first, then the broker-wide `sasl.jaas.config`.
pub fn jaas_config_for<'a>(
    listener: &str,
    mechanism: &str,
    get: impl Fn(&str) -> Option<&'a str>,
) -> Option<&'a str> {
    get(&listener_jaas_key(listener, mechanism)).or_else(|| get("sasl.jaas.config"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_listener_property_wins_over_the_broker_wide_one() {
        let props: BTreeMap<String, String> = [
            (
                "listener.name.sasl_plaintext.plain.sasl.jaas.config",
                "listener",
            ),
            ("sasl.jaas.config", "broker"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
        let get = |k: &str| props.get(k).map(String::as_str);
        assert_eq!(
            jaas_config_for("SASL_PLAINTEXT", "PLAIN", get),
            Some("listener")
        );
        assert_eq!(jaas_config_for("SASL_SSL", "PLAIN", get), Some("broker"));
        assert_eq!(
            listener_jaas_key("SASL_SSL", "SCRAM-SHA-256"),
            "listener.name.sasl_ssl.scram-sha-256.sasl.jaas.config"
        );
    }

    #[test]
    fn kafkas_plain_line() {
        let e = parse_jaas(
            r#"org.apache.kafka.common.security.plain.PlainLoginModule required username="admin"
               password="admin-secret" user_admin="admin-secret" user_alice="al\"ice;=x";"#,
        )
        .expect("parse");
        assert_eq!(
            e.login_module,
            "org.apache.kafka.common.security.plain.PlainLoginModule"
        );
        assert_eq!(e.flag, JaasFlag::Required);
        assert_eq!(e.options["user_alice"], "al\"ice;=x");
        assert_eq!(e.options["username"], "admin");
        let debug = format!("{e:?}");
        assert!(!debug.contains("admin-secret"), "{debug}");
        assert!(debug.contains("user_alice"), "{debug}");
    }

    #[test]
    fn malformed_lines_are_refused() {
        for bad in [
            "",
            "Module",
            "Module required",
            "Module maybe;",
            "Module required a=;",
            "Module required a \"b\";",
            "Module required a=\"unterminated;",
            "Module required; Other required;",
        ] {
            assert!(parse_jaas(bad).is_err(), "{bad:?}");
        }
        assert!(parse_jaas("Module optional a=b;").is_ok());
    }
}
