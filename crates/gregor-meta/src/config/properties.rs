//! Java `.properties` parsing for the broker's `--config` file.

/// Parse `.properties` text into key/value pairs in file order: `#` and `!` comment lines,
/// `key=value`, `key: value` or `key value`, surrounding whitespace trimmed, a trailing `\`
/// continues the line. Escapes other than line continuation are kept as written.
pub fn parse_properties(text: &str) -> Vec<(String, String)> {
    let mut out = Vec::new();
    let mut pending = String::new();
    for line in text.lines() {
        let piece = if pending.is_empty() {
            line.trim_start()
        } else {
            line.trim()
        };
        if pending.is_empty()
            && (piece.is_empty() || piece.starts_with('#') || piece.starts_with('!'))
        {
            continue;
        }
        let continued = piece.ends_with('\\') && !piece.ends_with("\\\\");
        pending.push_str(
            piece
                .strip_suffix('\\')
                .filter(|_| continued)
                .unwrap_or(piece),
        );
        if continued {
            continue;
        }
        let logical = std::mem::take(&mut pending);
        let sep = logical.find(['=', ':', ' ', '\t']);
        let (key, value) = match sep {
            Some(i) => {
                let key = &logical[..i];
                let mut rest = logical[i..].trim_start();
                if rest.starts_with('=') || rest.starts_with(':') {
                    rest = &rest[1..];
                }
                (key, rest.trim())
            }
            None => (logical.as_str(), ""),
        };
        out.push((key.trim().to_string(), value.to_string()));
    }
    if !pending.is_empty() {
        out.push((pending.trim().to_string(), String::new()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_separators_comments_and_continuations() {
        let text = "# comment\n! also comment\n\nnode.id=1\nlog.dirs : /a,\\\n   /b\nnum.partitions 3\n  listeners=PLAINTEXT://:9092  \n";
        let p = parse_properties(text);
        assert_eq!(
            p,
            vec![
                ("node.id".to_string(), "1".to_string()),
                ("log.dirs".to_string(), "/a,/b".to_string()),
                ("num.partitions".to_string(), "3".to_string()),
                ("listeners".to_string(), "PLAINTEXT://:9092".to_string()),
            ]
        );
    }
}
