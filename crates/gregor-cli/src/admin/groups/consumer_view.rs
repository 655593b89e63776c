//! The columns kafka-consumer-groups.sh of Kafka 4 adds for KIP-848 consumer groups: member
//! and target epochs and assignments (`--members --verbose`), group and assignment epochs
//! (`--state --verbose`), and the TYPE column of `--list --type`.

use std::collections::BTreeMap;

use anyhow::{anyhow, Result};
use gregor_client::admin::{GroupDescription, GroupListing, MemberDescription};
use gregor_client::TopicPartition;

use crate::admin::common::{pad, width};

/// The group types `--list --type` accepts, in ListGroups' spelling.
const TYPES: [&str; 2] = ["classic", "consumer"];

/// Parses a `--type` filter (case-insensitive, comma-separated) into ListGroups' names.
pub fn parse_types(text: &str) -> Result<Vec<String>> {
    text.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(|s| {
            TYPES
                .iter()
                .find(|k| k.eq_ignore_ascii_case(s))
                .map(|k| k.to_string())
                .ok_or_else(|| {
                    anyhow!(
                        "Invalid types list '{text}'. Valid types are: {}",
                        TYPES.join(", ")
                    )
                })
        })
        .collect()
}

/// A group type as Kafka's tool prints it (`Classic`, `Consumer`); `Unknown` when the broker
/// did not say (ListGroups before v5).
pub fn type_name(group_type: Option<&str>) -> &'static str {
    match group_type.map(str::to_ascii_lowercase).as_deref() {
        Some("classic") => "Classic",
        Some("consumer") => "Consumer",
        Some("share") => "Share",
        Some("streams") => "Streams",
        _ => "Unknown",
    }
}

/// `--list` with `--type` and/or `--state`: a GROUP column 10 wider than the longest id, then
/// the asked columns, 20 wide.
pub fn format_group_table(groups: &[GroupListing], with_type: bool, with_state: bool) -> String {
    let w = width(15, groups.iter().map(|g| g.group_id.as_str())) + 10;
    let line = |group: &str, group_type: &str, state: &str| {
        let mut out = pad(group, w);
        if with_type {
            out.push(' ');
            out.push_str(&pad(group_type, 20));
        }
        if with_state {
            out.push(' ');
            out.push_str(&pad(state, 20));
        }
        out.push('\n');
        out
    };
    let mut out = line("GROUP", "TYPE", "STATE");
    for g in groups {
        out.push_str(&line(
            &g.group_id,
            type_name(g.group_type.as_deref()),
            g.state.as_deref().unwrap_or("Unknown"),
        ));
    }
    out
}

/// A member's partitions as Kafka 4 prints them: `topic:0,1;other:2` (partition numbers and
/// topics sorted as text), `-` when none.
pub fn assignment_text(assignment: &[TopicPartition]) -> String {
    if assignment.is_empty() {
        return "-".to_string();
    }
    let mut by_topic: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    for tp in assignment {
        by_topic
            .entry(&tp.topic)
            .or_default()
            .push(tp.partition.to_string());
    }
    let mut parts: Vec<String> = by_topic
        .into_iter()
        .map(|(topic, mut ps)| {
            ps.sort();
            format!("{topic}:{}", ps.join(","))
        })
        .collect();
    parts.sort();
    parts.join(";")
}

fn epoch_text(epoch: Option<i32>) -> String {
    epoch.map_or("-".to_string(), |e| e.to_string())
}

fn target_text(m: &MemberDescription) -> String {
    assignment_text(m.target_assignment.as_deref().unwrap_or_default())
}

/// The verbose columns of a consumer group's `--members` table, after `#PARTITIONS`: the
/// header's and each member's (in the group's member order). The target epoch is the
/// group's assignment epoch; both assignment columns are at least 20 wide.
pub fn member_epoch_columns(group: &GroupDescription) -> (String, Vec<String>) {
    let currents: Vec<String> = group
        .members
        .iter()
        .map(|m| assignment_text(&m.assignment))
        .collect();
    let targets: Vec<String> = group.members.iter().map(target_text).collect();
    let current = width(20, currents.iter().map(String::as_str));
    let target = width(20, targets.iter().map(String::as_str));
    let cells = |cur_epoch: &str, cur: &str, target_epoch: &str, tgt: &str| {
        format!(
            "{} {} {} {}",
            pad(cur_epoch, 15),
            pad(cur, current),
            pad(target_epoch, 15),
            pad(tgt, target)
        )
    };
    let header = cells(
        "CURRENT-EPOCH",
        "CURRENT-ASSIGNMENT",
        "TARGET-EPOCH",
        "TARGET-ASSIGNMENT",
    );
    let target_epoch = epoch_text(group.assignment_epoch);
    let rows = group
        .members
        .iter()
        .zip(currents.iter().zip(&targets))
        .map(|(m, (cur, tgt))| cells(&epoch_text(m.member_epoch), cur, &target_epoch, tgt))
        .collect();
    (header, rows)
}

/// `--describe --state --verbose` as Kafka 4's tool prints it: the state view with the group
/// epoch and the target assignment epoch (`-` for a classic group).
pub fn format_state_verbose(group: &GroupDescription) -> String {
    let coordinator = format!(
        "{}:{}  ({})",
        group.coordinator.host, group.coordinator.port, group.coordinator.id
    );
    let g = width(15, [group.group_id.as_str()]);
    let c = width(25, [coordinator.as_str()]);
    let line = |cols: [&str; 7]| {
        format!(
            "\n{} {} {} {} {} {} {}",
            pad(cols[0], g),
            pad(cols[1], c),
            pad(cols[2], 20),
            pad(cols[3], 20),
            pad(cols[4], 15),
            pad(cols[5], 25),
            cols[6]
        )
    };
    let strategy = if group.protocol.is_empty() {
        "-"
    } else {
        group.protocol.as_str()
    };
    let mut out = line([
        "GROUP",
        "COORDINATOR (ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "GROUP-EPOCH",
        "TARGET-ASSIGNMENT-EPOCH",
        "#MEMBERS",
    ]);
    out.push_str(&line([
        &group.group_id,
        &coordinator,
        strategy,
        &group.state,
        &epoch_text(group.group_epoch),
        &epoch_text(group.assignment_epoch),
        &group.members.len().to_string(),
    ]));
    out.push('\n');
    out
}
