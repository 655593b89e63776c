//! `gregor assign`: runs a strategy on a group description and prints the assignment as JSON.

use std::collections::BTreeMap;
use std::io::Read;
use std::path::Path;

use anyhow::{Context, Result};
use serde::Serialize;

use crate::group_json::{assigned, build_spec, parse_group, pending};

#[derive(Debug, Serialize)]
pub struct AssignOutput {
    pub strategy: String,
    pub assignment: BTreeMap<String, Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub pending: Option<BTreeMap<String, Vec<String>>>,
}

/// Reads `path` (`-` for standard input).
pub fn read_input(path: &Path) -> Result<String> {
    if path == Path::new("-") {
        let mut s = String::new();
        std::io::stdin()
            .read_to_string(&mut s)
            .context("cannot read standard input")?;
        Ok(s)
    } else {
        std::fs::read_to_string(path).with_context(|| format!("cannot read {}", path.display()))
    }
}

pub fn run(text: &str, strategy_flag: Option<&str>) -> Result<AssignOutput> {
    let group = parse_group(text)?;
    let strategy = strategy_flag
        .map(str::to_string)
        .or(group.strategy.clone())
        .context("no strategy: give --strategy or a \"strategy\" field")?;
    let assignor = gregor_assign::builtin(&strategy)?;
    let members = group
        .members
        .iter()
        .map(|m| m.to_member())
        .collect::<Result<Vec<_>>>()?;
    let spec = build_spec(&group.topics, &members)?;
    let result = assignor.assign(&spec)?;
    let cooperative = assignor
        .supported_protocols()
        .contains(&gregor_assign::RebalanceProtocol::Cooperative);
    Ok(AssignOutput {
        assignment: assigned(&spec, &result),
        pending: cooperative.then(|| pending(&spec, &result)),
        strategy,
    })
}
