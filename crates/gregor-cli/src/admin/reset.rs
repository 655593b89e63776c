//! `--reset-offsets` planning: from the group's committed offsets and the partitions' log
//! start and end offsets to the new offsets, as kafka-consumer-groups.sh computes them.
//! Pure: the command fetches the inputs and commits the plan.

use std::collections::BTreeMap;

use anyhow::{anyhow, bail, Result};
use gregor_client::TopicPartition;

use super::common::pad;

/// What to reset to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ResetSpec {
    ToEarliest,
    ToLatest,
    /// The committed offset; the log end where none is committed.
    ToCurrent,
    ToOffset(i64),
    ShiftBy(i64),
    /// The first offset at or after a timestamp (milliseconds); the log end where no record
    /// is that recent.
    ToDatetime(i64),
    /// The offsets of a `--from-file` CSV ([`ResetInputs::requested`]), kept within each
    /// partition's log.
    FromFile,
}

/// The offsets a plan is computed from, per partition. Missing entries mean the lookup failed.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetInputs {
    pub committed: BTreeMap<TopicPartition, i64>,
    pub log_start: BTreeMap<TopicPartition, i64>,
    pub log_end: BTreeMap<TopicPartition, i64>,
    /// ListOffsets by timestamp: -1 where no record is at or after the timestamp.
    pub by_timestamp: BTreeMap<TopicPartition, i64>,
    /// `--from-file`: the offsets the file asks for this group.
    pub requested: BTreeMap<TopicPartition, i64>,
}

/// The new offset of each partition, and the warnings Kafka prints along the way.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ResetPlan {
    pub offsets: BTreeMap<TopicPartition, i64>,
    pub warnings: Vec<String>,
}

impl ResetSpec {
    /// Which inputs the plan needs, so the command fetches nothing else.
    pub fn needs_log_start(self) -> bool {
        matches!(
            self,
            ResetSpec::ToEarliest
                | ResetSpec::ToOffset(_)
                | ResetSpec::ShiftBy(_)
                | ResetSpec::FromFile
        )
    }

    pub fn needs_log_end(self) -> bool {
        !matches!(self, ResetSpec::ToEarliest)
    }
}

fn lookup(map: &BTreeMap<TopicPartition, i64>, tp: &TopicPartition, what: &str) -> Result<i64> {
    map.get(tp)
        .copied()
        .ok_or_else(|| anyhow!("Error getting {what} offset of topic partition: {tp}"))
}

/// Clamps a requested offset into `[log start, log end]`, warning like Kafka when it moves.
fn clamp(
    tp: &TopicPartition,
    requested: i64,
    inputs: &ResetInputs,
    warnings: &mut Vec<String>,
) -> Result<i64> {
    let end = lookup(&inputs.log_end, tp, "ending")?;
    if requested > end {
        warnings.push(format!(
            "New offset ({requested}) is higher than latest offset for topic partition {tp}. Value will be set to {end}"
        ));
        return Ok(end);
    }
    let start = lookup(&inputs.log_start, tp, "starting")?;
    if requested < start {
        warnings.push(format!(
            "New offset ({requested}) is lower than earliest offset for topic partition {tp}. Value will be set to {start}"
        ));
        return Ok(start);
    }
    Ok(requested)
}

/// Computes the new offsets of `partitions`.
pub fn plan_reset(
    partitions: &[TopicPartition],
    spec: ResetSpec,
    inputs: &ResetInputs,
) -> Result<ResetPlan> {
    let mut plan = ResetPlan::default();
    for tp in partitions {
        let offset = match spec {
            ResetSpec::ToEarliest => lookup(&inputs.log_start, tp, "starting")?,
            ResetSpec::ToLatest => lookup(&inputs.log_end, tp, "ending")?,
            ResetSpec::ToCurrent => match inputs.committed.get(tp) {
                Some(&o) => o,
                None => lookup(&inputs.log_end, tp, "ending")?,
            },
            ResetSpec::ToOffset(o) => clamp(tp, o, inputs, &mut plan.warnings)?,
            ResetSpec::ShiftBy(n) => {
                let Some(&current) = inputs.committed.get(tp) else {
                    bail!("Cannot shift offset for partition {tp} since there is no current committed offset");
                };
                clamp(tp, current.saturating_add(n), inputs, &mut plan.warnings)?
            }
            ResetSpec::ToDatetime(_) => match inputs.by_timestamp.get(tp) {
                Some(&o) if o >= 0 => o,
                Some(_) => {
                    plan.warnings.push(format!(
                        "Warn: Partition {} from topic {} is empty. Falling back to latest known offset.",
                        tp.partition, tp.topic
                    ));
                    lookup(&inputs.log_end, tp, "ending")?
                }
                None => bail!("Error getting offset by timestamp of topic partition: {tp}"),
            },
            ResetSpec::FromFile => {
                let requested = lookup(&inputs.requested, tp, "requested")?;
                clamp(tp, requested, inputs, &mut plan.warnings)?
            }
        };
        plan.offsets.insert(tp.clone(), offset);
    }
    Ok(plan)
}

/// kafka-consumer-groups.sh's table of a reset plan (empty when nothing is reset).
pub fn format_reset_plan(group: &str, offsets: &BTreeMap<TopicPartition, i64>) -> String {
    let mut out = String::new();
    if !offsets.is_empty() {
        out.push_str(&format!(
            "\n{} {} {} {}",
            pad("GROUP", 30),
            pad("TOPIC", 30),
            pad("PARTITION", 10),
            pad("NEW-OFFSET", 15)
        ));
        for (tp, offset) in offsets {
            out.push_str(&format!(
                "\n{} {} {} {}",
                pad(group, 30),
                pad(&tp.topic, 30),
                pad(&tp.partition.to_string(), 10),
                pad(&offset.to_string(), 15)
            ));
        }
    }
    out.push('\n');
    out
}

/// A `--from-file` reset plan: the offsets per group, per partition.
pub type ResetFile = BTreeMap<String, BTreeMap<TopicPartition, i64>>;

/// Parses a `--from-file` CSV as `--export` writes it: `topic,partition,offset` lines for the
/// one group of `groups`, or `group,topic,partition,offset` lines (any number of groups).
/// Empty lines are skipped.
pub fn parse_reset_csv(text: &str, groups: &[String]) -> Result<ResetFile> {
    let lines: Vec<(usize, &str)> = text
        .lines()
        .enumerate()
        .map(|(i, l)| (i + 1, l.trim()))
        .filter(|(_, l)| !l.is_empty())
        .collect();
    let Some((_, first)) = lines.first() else {
        bail!("the reset plan file is empty");
    };
    let with_group = match first.split(',').count() {
        3 if groups.len() == 1 => false,
        3 => bail!("a reset plan of topic,partition,offset lines needs exactly one --group; with several groups use group,topic,partition,offset lines"),
        4 => true,
        _ => bail!("invalid reset plan line 1 '{first}': expected topic,partition,offset or group,topic,partition,offset"),
    };
    let mut plan = ResetFile::new();
    for (n, line) in lines {
        let fields: Vec<&str> = line.split(',').map(str::trim).collect();
        let (group, rest) = match (with_group, fields.as_slice()) {
            (true, [g, rest @ ..]) if rest.len() == 3 => (g.to_string(), rest),
            (false, rest) if rest.len() == 3 => (groups[0].clone(), rest),
            _ => bail!(
                "invalid reset plan line {n} '{line}': expected {}",
                if with_group {
                    "group,topic,partition,offset"
                } else {
                    "topic,partition,offset"
                }
            ),
        };
        let [topic, partition, offset] = rest else {
            bail!("invalid reset plan line {n} '{line}'");
        };
        let partition = partition.parse::<i32>().ok().filter(|p| *p >= 0);
        let offset = offset.parse::<i64>().ok();
        let (Some(partition), Some(offset), false) = (partition, offset, topic.is_empty()) else {
            bail!("invalid reset plan line {n} '{line}': expected a topic, a partition number and an offset");
        };
        plan.entry(group)
            .or_default()
            .insert(TopicPartition::new(topic.to_string(), partition), offset);
    }
    Ok(plan)
}

/// `--export`: the plans as CSV, `topic,partition,offset` lines for one group's plan, or with
/// the group first (`group,topic,partition,offset`) when several groups were asked for, as
/// kafka-consumer-groups.sh prints them and `--from-file` reads them.
pub fn format_reset_csv(
    plans: &[(String, BTreeMap<TopicPartition, i64>)],
    with_group: bool,
) -> String {
    let mut out = String::new();
    for (group, offsets) in plans {
        for (tp, offset) in offsets {
            if with_group {
                out.push_str(&format!("{group},"));
            }
            out.push_str(&format!("{},{},{offset}\n", tp.topic, tp.partition));
        }
    }
    out
}

/// A `--topic` scope of `--reset-offsets`: a topic and, optionally, some of its partitions.
pub type TopicScope = (String, Option<Vec<i32>>);

/// Parses a `--topic` scope of `--reset-offsets`: `topic` or `topic:0,1,2`.
pub fn parse_topic_arg(arg: &str) -> Result<TopicScope> {
    if !arg.contains(':') {
        if arg.trim().is_empty() {
            bail!("Invalid topic arg '{arg}', expected a topic name");
        }
        return Ok((arg.to_string(), None));
    }
    let parts: Vec<&str> = arg.split(':').collect();
    let [topic, partitions] = parts.as_slice() else {
        bail!("Invalid topic arg '{arg}', expected topic name and partitions");
    };
    if topic.is_empty() {
        bail!("Invalid topic arg '{arg}', expected topic name and partitions");
    }
    let partitions = partitions
        .split(',')
        .map(|p| {
            p.trim()
                .parse::<i32>()
                .ok()
                .filter(|n| *n >= 0)
                .ok_or_else(|| anyhow!("Invalid partition '{p}' specified in topic arg '{arg}'"))
        })
        .collect::<Result<Vec<i32>>>()?;
    Ok((topic.to_string(), Some(partitions)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tp(p: i32) -> TopicPartition {
        TopicPartition::new("b1.offsets.demo", p)
    }

    fn inputs() -> ResetInputs {
        ResetInputs {
            committed: [(tp(0), 40), (tp(1), 10)].into_iter().collect(),
            log_start: [(tp(0), 5), (tp(1), 5), (tp(2), 0)].into_iter().collect(),
            log_end: [(tp(0), 50), (tp(1), 20), (tp(2), 7)].into_iter().collect(),
            by_timestamp: [(tp(0), 45), (tp(1), -1), (tp(2), 3)].into_iter().collect(),
            requested: BTreeMap::new(),
        }
    }

    fn plan(spec: ResetSpec) -> Result<ResetPlan> {
        plan_reset(&[tp(0), tp(1), tp(2)], spec, &inputs())
    }

    fn offsets(p: &ResetPlan) -> Vec<i64> {
        p.offsets.values().copied().collect()
    }

    #[test]
    fn earliest_latest_current() {
        assert_eq!(
            offsets(&plan(ResetSpec::ToEarliest).unwrap()),
            vec![5, 5, 0]
        );
        assert_eq!(
            offsets(&plan(ResetSpec::ToLatest).unwrap()),
            vec![50, 20, 7]
        );
        // Partition 2 has no committed offset: the log end.
        assert_eq!(
            offsets(&plan(ResetSpec::ToCurrent).unwrap()),
            vec![40, 10, 7]
        );
    }

    #[test]
    fn to_offset_is_clamped_into_the_log_with_warnings() {
        let p = plan(ResetSpec::ToOffset(30)).unwrap();
        assert_eq!(offsets(&p), vec![30, 20, 7]);
        assert_eq!(p.warnings.len(), 2);
        assert_eq!(
            p.warnings[0],
            "New offset (30) is higher than latest offset for topic partition b1.offsets.demo-1. Value will be set to 20"
        );
        let p = plan(ResetSpec::ToOffset(-4)).unwrap();
        assert_eq!(offsets(&p), vec![5, 5, 0]);
    }

    #[test]
    fn shift_by_needs_a_committed_offset() {
        let p = plan_reset(&[tp(0), tp(1)], ResetSpec::ShiftBy(-8), &inputs()).unwrap();
        assert_eq!(offsets(&p), vec![32, 5]);
        let e = plan(ResetSpec::ShiftBy(1)).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Cannot shift offset for partition b1.offsets.demo-2 since there is no current committed offset"
        );
    }

    #[test]
    fn datetime_falls_back_to_the_log_end_where_nothing_is_that_recent() {
        let p = plan(ResetSpec::ToDatetime(1)).unwrap();
        assert_eq!(offsets(&p), vec![45, 20, 3]);
        assert_eq!(
            p.warnings,
            vec!["Warn: Partition 1 from topic b1.offsets.demo is empty. Falling back to latest known offset."]
        );
    }

    #[test]
    fn failed_lookups_name_the_partition() {
        let mut i = inputs();
        i.log_start.remove(&tp(2));
        let e = plan_reset(&[tp(2)], ResetSpec::ToEarliest, &i).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Error getting starting offset of topic partition: b1.offsets.demo-2"
        );
    }

    #[test]
    fn plan_table_matches_kafka() {
        let offsets: BTreeMap<TopicPartition, i64> = [(tp(0), 5), (tp(1), 5)].into_iter().collect();
        let text = format_reset_plan("b1.rebal.group", &offsets);
        let expected = format!(
            "\n{:<30} {:<30} {:<10} {:<15}\n{:<30} {:<30} {:<10} {:<15}\n{:<30} {:<30} {:<10} {:<15}\n",
            "GROUP", "TOPIC", "PARTITION", "NEW-OFFSET",
            "b1.rebal.group", "b1.offsets.demo", "0", "5",
            "b1.rebal.group", "b1.offsets.demo", "1", "5",
        );
        assert_eq!(text, expected);
        assert_eq!(format_reset_plan("g", &BTreeMap::new()), "\n");
    }

    #[test]
    fn from_file_offsets_are_kept_within_the_log() {
        let mut i = inputs();
        i.requested = [(tp(0), 7), (tp(1), 99), (tp(2), -3)].into_iter().collect();
        let p = plan_reset(&[tp(0), tp(1), tp(2)], ResetSpec::FromFile, &i).unwrap();
        assert_eq!(offsets(&p), vec![7, 20, 0]);
        assert_eq!(p.warnings.len(), 2);
        let e = plan_reset(&[tp(0)], ResetSpec::FromFile, &inputs()).unwrap_err();
        assert_eq!(
            e.to_string(),
            "Error getting requested offset of topic partition: b1.offsets.demo-0"
        );
    }

    #[test]
    fn exported_csv_reads_back() {
        let one: BTreeMap<TopicPartition, i64> = [(tp(1), 5), (tp(0), 12)].into_iter().collect();
        let plans = vec![
            ("g1".to_string(), one.clone()),
            ("g2".to_string(), one.clone()),
        ];
        let single = format_reset_csv(&plans[..1], false);
        assert_eq!(single, "b1.offsets.demo,0,12\nb1.offsets.demo,1,5\n");
        let file = parse_reset_csv(&single, &["g1".to_string()]).unwrap();
        assert_eq!(
            file,
            [("g1".to_string(), one.clone())].into_iter().collect()
        );
        let both = format_reset_csv(&plans, true);
        assert!(both.starts_with("g1,b1.offsets.demo,0,12\ng1,b1.offsets.demo,1,5\ng2,"));
        let file = parse_reset_csv(&both, &[]).unwrap();
        assert_eq!(file.len(), 2);
        assert_eq!(file["g2"], one);
        // Blank lines and spaces around fields are tolerated.
        let file = parse_reset_csv("\n t , 0 , 4 \n\n", &["g".to_string()]).unwrap();
        assert_eq!(file["g"][&TopicPartition::new("t", 0)], 4);
    }

    #[test]
    fn bad_reset_files_name_the_line() {
        let g = ["g".to_string()];
        let err =
            |text: &str, groups: &[String]| parse_reset_csv(text, groups).unwrap_err().to_string();
        assert_eq!(err("", &g), "the reset plan file is empty");
        assert!(err("t,0,1", &[]).contains("needs exactly one --group"));
        assert!(err("t,0", &g).starts_with("invalid reset plan line 1 't,0'"));
        assert_eq!(
            err("t,0,1\nt,x,2", &g),
            "invalid reset plan line 2 't,x,2': expected a topic, a partition number and an offset"
        );
        assert!(
            err("t,0,1\ng,t,1,2", &g).contains("line 2 'g,t,1,2': expected topic,partition,offset")
        );
        assert!(err("g,t,-1,2", &g).contains("line 1"));
        assert!(err("g,,1,2", &g).contains("line 1"));
    }

    #[test]
    fn topic_scopes() {
        assert_eq!(parse_topic_arg("t").unwrap(), ("t".to_string(), None));
        assert_eq!(
            parse_topic_arg("t:0,2").unwrap(),
            ("t".to_string(), Some(vec![0, 2]))
        );
        assert_eq!(
            parse_topic_arg("t:0:1").unwrap_err().to_string(),
            "Invalid topic arg 't:0:1', expected topic name and partitions"
        );
        assert_eq!(
            parse_topic_arg("t:x").unwrap_err().to_string(),
            "Invalid partition 'x' specified in topic arg 't:x'"
        );
        assert!(parse_topic_arg("t:-1").is_err());
        assert!(parse_topic_arg(":1").is_err());
        assert!(parse_topic_arg("t:").is_err());
    }
}
