//! Topic and group name filters as Kafka's tools take them (`--topic 'orders.*'`).
//!
//! Kafka compiles the argument as a Java regular expression (commas meaning `|`) and requires
//! a whole-name match. This is the subset used on names in practice: literals, `.`, `\`
//! escapes, the `*` `+` `?` quantifiers and `|` alternatives. Groups, classes and counted
//! repetition are refused with a clear message rather than silently matched differently.

use anyhow::{bail, Result};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Atom {
    Any,
    Char(char),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Repeat {
    One,
    ZeroOrOne,
    ZeroOrMore,
    OneOrMore,
}

/// A compiled include list.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NameFilter {
    alternatives: Vec<Vec<(Atom, Repeat)>>,
}

impl NameFilter {
    pub fn new(pattern: &str) -> Result<NameFilter> {
        // Kafka's IncludeList: trim, commas are alternatives, surrounding quotes dropped.
        let cleaned = pattern
            .trim()
            .trim_start_matches(['"', '\''])
            .trim_end_matches(['"', '\'']);
        if cleaned.is_empty() {
            bail!("empty name pattern");
        }
        let mut alternatives = Vec::new();
        for alt in cleaned.split([',', '|']) {
            alternatives.push(compile(alt, pattern)?);
        }
        Ok(NameFilter { alternatives })
    }

    pub fn matches(&self, name: &str) -> bool {
        let chars: Vec<char> = name.chars().collect();
        self.alternatives.iter().any(|alt| match_here(alt, &chars))
    }
}

fn compile(alt: &str, whole: &str) -> Result<Vec<(Atom, Repeat)>> {
    let alt = alt.strip_prefix('^').unwrap_or(alt);
    let alt = alt.strip_suffix('$').unwrap_or(alt);
    let mut out: Vec<(Atom, Repeat)> = Vec::new();
    let mut chars = alt.chars();
    while let Some(c) = chars.next() {
        let atom = match c {
            '.' => Atom::Any,
            '\\' => match chars.next() {
                Some(e) if !e.is_ascii_alphanumeric() => Atom::Char(e),
                Some(e) => bail!("unsupported escape '\\{e}' in name pattern '{whole}'"),
                None => bail!("name pattern '{whole}' ends with a lone '\\'"),
            },
            '*' | '+' | '?' => {
                let repeat = match c {
                    '*' => Repeat::ZeroOrMore,
                    '+' => Repeat::OneOrMore,
                    _ => Repeat::ZeroOrOne,
                };
                match out.last_mut() {
                    Some((_, r @ Repeat::One)) => *r = repeat,
                    _ => bail!("'{c}' must follow a character in name pattern '{whole}'"),
                }
                continue;
            }
            '(' | ')' | '[' | ']' | '{' | '}' | '^' | '$' => bail!(
                "name pattern '{whole}' uses '{c}'; only literals, '.', '*', '+', '?', '|' \
                 and ',' are supported"
            ),
            other => Atom::Char(other),
        };
        out.push((atom, Repeat::One));
    }
    Ok(out)
}

fn atom_matches(atom: Atom, c: char) -> bool {
    match atom {
        Atom::Any => true,
        Atom::Char(x) => x == c,
    }
}

/// Whole-string match by backtracking; names are short, so this stays cheap.
fn match_here(pattern: &[(Atom, Repeat)], s: &[char]) -> bool {
    let Some(&(atom, repeat)) = pattern.first() else {
        return s.is_empty();
    };
    let rest = &pattern[1..];
    match repeat {
        Repeat::One => !s.is_empty() && atom_matches(atom, s[0]) && match_here(rest, &s[1..]),
        Repeat::ZeroOrOne => {
            match_here(rest, s)
                || (!s.is_empty() && atom_matches(atom, s[0]) && match_here(rest, &s[1..]))
        }
        Repeat::ZeroOrMore | Repeat::OneOrMore => {
            let min = usize::from(repeat == Repeat::OneOrMore);
            let run = s.iter().take_while(|&&c| atom_matches(atom, c)).count();
            (min..=run).rev().any(|n| match_here(rest, &s[n..]))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn literal_names_match_only_themselves_but_dot_is_any_char_like_kafka() {
        let f = NameFilter::new("b1.offsets.demo").unwrap();
        assert!(f.matches("b1.offsets.demo"));
        assert!(f.matches("b1xoffsets_demo"));
        assert!(!f.matches("b1.offsets.demo2"));
    }

    #[test]
    fn wildcards_alternatives_and_quotes() {
        let f = NameFilter::new("'tp_demo_.*'").unwrap();
        assert!(f.matches("tp_demo_02") && f.matches("tp_demo_"));
        assert!(!f.matches("tp_re_01"));
        let f = NameFilter::new("a,b|c+").unwrap();
        assert!(f.matches("a") && f.matches("b") && f.matches("ccc"));
        assert!(!f.matches("") && !f.matches("ab"));
        let f = NameFilter::new("x\\.y?").unwrap();
        assert!(f.matches("x.") && f.matches("x.y") && !f.matches("xay"));
        let f = NameFilter::new("^__consumer_offsets$").unwrap();
        assert!(f.matches("__consumer_offsets"));
    }

    #[test]
    fn unsupported_syntax_is_refused_clearly() {
        for bad in ["(a|b)", "[ab]", "a{2}", "*a", "a\\d", "a\\", "  "] {
            let e = NameFilter::new(bad).unwrap_err();
            assert!(!e.to_string().is_empty(), "{bad}");
        }
    }
}
