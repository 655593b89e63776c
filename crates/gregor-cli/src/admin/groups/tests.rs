use super::*;
use clap::Parser;
use consumer_view::{format_group_table, format_state_verbose, parse_types};
use gregor_client::admin::MemberDescription;
use gregor_client::BrokerNode;

#[derive(Debug, Parser)]
struct Cli {
    #[command(flatten)]
    args: GroupsArgs,
}

fn parse(args: &[&str]) -> Result<GroupsAction> {
    let cli = Cli::try_parse_from(std::iter::once("groups").chain(args.iter().copied()))?;
    cli.args.action()
}

fn member(id: &str, client: &str, partitions: &[i32]) -> MemberDescription {
    MemberDescription {
        assignment: partitions
            .iter()
            .map(|p| TopicPartition::new("b1.offsets.demo", *p))
            .collect(),
        ..MemberDescription::new(id.into(), client.into(), "/172.17.0.1".into())
    }
}

fn seed_group(members: Vec<MemberDescription>) -> GroupDescription {
    GroupDescription {
        group_id: "b1.rebal.group".into(),
        state: "Stable".into(),
        protocol_type: "consumer".into(),
        protocol: "range".into(),
        members,
        coordinator: BrokerNode {
            id: 1,
            host: "127.0.0.1".into(),
            port: 9092,
            rack: None,
        },
        group_type: GroupType::Classic,
        group_epoch: None,
        assignment_epoch: None,
    }
}

#[test]
fn members_verbose_matches_seed_004_rebalancing_table() {
    // The table captured while B was kicked out: member ids shortened to "b1-rebal-A-..."
    // in the seed, so the columns keep their 15-character minimum.
    let g = seed_group(vec![member("b1-rebal-A-...", "b1-rebal-A", &[0, 1])]);
    assert_eq!(
        format_members(&g, true),
        "\nGROUP           CONSUMER-ID     HOST            CLIENT-ID       #PARTITIONS     CURRENT-ASSIGNMENT\n\
         b1.rebal.group  b1-rebal-A-...  /172.17.0.1     b1-rebal-A      2               b1.offsets.demo:0,1\n"
    );
}

#[test]
fn members_verbose_matches_seed_004_with_full_member_ids() {
    // In the seed's first table the consumer id column is 47 wide: Kafka's member ids are the
    // client id, a dash and a UUID.
    let a = "b1-rebal-A-2f9c1a4e-5b6d-4c7e-8f90-a1b2c3d4e5f6";
    let b = "b1-rebal-B-0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d";
    assert_eq!(a.len(), 47);
    let g = seed_group(vec![
        member(a, "b1-rebal-A", &[1, 0]),
        member(b, "b1-rebal-B", &[2]),
    ]);
    let text = format_members(&g, true);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "");
    assert_eq!(
        lines[1],
        "GROUP           CONSUMER-ID                                     HOST            CLIENT-ID       #PARTITIONS     CURRENT-ASSIGNMENT"
    );
    assert_eq!(
        lines[2],
        format!("b1.rebal.group  {a} /172.17.0.1     b1-rebal-A      2               b1.offsets.demo:0,1")
    );
    assert_eq!(
        lines[3],
        format!(
            "b1.rebal.group  {b} /172.17.0.1     b1-rebal-B      1               b1.offsets.demo:2"
        )
    );
}

#[test]
fn members_without_verbose_and_with_static_members() {
    let mut m = member("m-1", "c", &[]);
    m.group_instance_id = Some("instance-1".into());
    let g = seed_group(vec![m]);
    let text = format_members(&g, false);
    // Kafka's format leaves a trailing space after the padded #PARTITIONS column.
    assert_eq!(
        text,
        format!(
            "\n{:<15} {:<15} {:<17} {:<15} {:<15} {:<15} \n{:<15} {:<15} {:<17} {:<15} {:<15} {:<15} \n",
            "GROUP", "CONSUMER-ID", "GROUP-INSTANCE-ID", "HOST", "CLIENT-ID", "#PARTITIONS",
            "b1.rebal.group", "m-1", "instance-1", "/172.17.0.1", "c", "0"
        )
    );
    let verbose = format_members(&seed_group(vec![member("m-1", "c", &[])]), true);
    assert!(verbose.ends_with(" -\n"), "{verbose:?}");
}

#[test]
fn assignment_text_sorts_like_kafka() {
    let tps = vec![
        TopicPartition::new("b", 10),
        TopicPartition::new("b", 2),
        TopicPartition::new("a", 0),
    ];
    // Partition numbers sort as text, as Kafka's tool does.
    assert_eq!(assignment_text(&tps), "a:0;b:10,2");
    assert_eq!(assignment_text(&[]), "-");
}

#[test]
fn offsets_view_rows_and_lag() {
    let g = seed_group(vec![
        member("A-1", "b1-rebal-A", &[1, 0]),
        member("B-1", "b1-rebal-B", &[2]),
        member("C-1", "idle", &[]),
    ]);
    let tp = |p| TopicPartition::new("b1.offsets.demo", p);
    let committed: BTreeMap<TopicPartition, i64> = [(tp(0), 16577), (tp(1), 16578), (tp(3), 7901)]
        .into_iter()
        .collect();
    let log_end: BTreeMap<TopicPartition, i64> = [
        (tp(0), 33154),
        (tp(1), 33155),
        (tp(2), 33155),
        (tp(3), 8652),
    ]
    .into_iter()
    .collect();
    let rows = offset_rows(&g, &committed, &log_end);
    // The member with most partitions first, then B, then the unowned committed partition;
    // the idle member has no row.
    let summary: Vec<(i32, Option<i64>, Option<i64>, String)> = rows
        .iter()
        .map(|r| {
            (
                r.partition.unwrap(),
                r.current_offset,
                r.lag,
                r.consumer_id.clone().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        summary,
        vec![
            (0, Some(16577), Some(16577), "A-1".to_string()),
            (1, Some(16578), Some(16577), "A-1".to_string()),
            (2, None, None, "B-1".to_string()),
            (3, Some(7901), Some(751), "-".to_string()),
        ]
    );
    let text = format_offset_rows(&rows);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines[0], "");
    assert_eq!(
        lines[1],
        format!(
            "{:<15} {:<15} {:<10} {:<15} {:<15} {:<15} {:<15} {:<15} CLIENT-ID",
            "GROUP",
            "TOPIC",
            "PARTITION",
            "CURRENT-OFFSET",
            "LOG-END-OFFSET",
            "LAG",
            "CONSUMER-ID",
            "HOST"
        )
    );
    assert_eq!(
        lines[4],
        format!(
            "{:<15} {:<15} {:<10} {:<15} {:<15} {:<15} {:<15} {:<15} b1-rebal-B",
            "b1.rebal.group", "b1.offsets.demo", "2", "-", "33155", "-", "B-1", "/172.17.0.1"
        )
    );
    assert!(lines[5].ends_with(" -"), "{}", lines[5]);
    assert_eq!(lines.len(), 6);
    assert!(text.ends_with('\n'));
}

#[test]
fn state_view_matches_kafka_columns() {
    let g = seed_group(vec![member("A-1", "a", &[0]), member("B-1", "b", &[1])]);
    assert_eq!(
        format_state(&g),
        format!(
            "\n{:<25} {:<25} {:<20} {:<15} #MEMBERS\n{:<25} {:<25} {:<20} {:<15} 2\n",
            "GROUP",
            "COORDINATOR (ID)",
            "ASSIGNMENT-STRATEGY",
            "STATE",
            "b1.rebal.group",
            "127.0.0.1:9092  (1)",
            "range",
            "Stable"
        )
    );
}

#[test]
fn state_notices_go_with_empty_and_rebalancing_groups() {
    let mut g = seed_group(vec![]);
    assert_eq!(state_notice(&g), None);
    g.state = "Empty".into();
    assert_eq!(
        state_notice(&g).unwrap(),
        "\nConsumer group 'b1.rebal.group' has no active members."
    );
    g.state = "PreparingRebalance".into();
    assert_eq!(
        state_notice(&g).unwrap(),
        "\nWarning: Consumer group 'b1.rebal.group' is rebalancing."
    );
}

fn listing(id: &str, state: &str, group_type: &str) -> GroupListing {
    GroupListing {
        group_id: id.into(),
        protocol_type: "consumer".into(),
        state: Some(state.into()),
        group_type: Some(group_type.into()),
    }
}

#[test]
fn list_with_states_table() {
    let text = format_group_table(
        &[listing("b1.rebal.group", "Stable", "classic")],
        false,
        true,
    );
    assert_eq!(
        text,
        format!(
            "{:<25} {:<20}\n{:<25} {:<20}\n",
            "GROUP", "STATE", "b1.rebal.group", "Stable"
        )
    );
    assert_eq!(
        parse_states("stable, EMPTY").unwrap(),
        vec!["Stable", "Empty"]
    );
    assert!(parse_states("Sleeping")
        .unwrap_err()
        .to_string()
        .starts_with("Invalid state list 'Sleeping'"));
}

#[test]
fn argument_parsing() {
    assert_eq!(
        parse(&["--list"]).unwrap(),
        GroupsAction::List {
            states: None,
            types: None
        }
    );
    assert_eq!(
        parse(&["--list", "--state"]).unwrap(),
        GroupsAction::List {
            states: Some(vec![]),
            types: None
        }
    );
    assert_eq!(
        parse(&["--list", "--type", "Consumer,classic", "--state", "stable"]).unwrap(),
        GroupsAction::List {
            states: Some(vec!["Stable".into()]),
            types: Some(vec!["consumer".into(), "classic".into()])
        }
    );
    assert_eq!(
        parse(&["--list", "--type"]).unwrap(),
        GroupsAction::List {
            states: None,
            types: Some(vec![])
        }
    );
    assert_eq!(
        parse(&["--describe", "--group", "g", "--state", "--verbose"]).unwrap(),
        GroupsAction::Describe {
            groups: GroupSelection::Named(vec!["g".into()]),
            view: DescribeView::State { verbose: true }
        }
    );
    assert_eq!(
        parse(&["--describe", "--group", "g", "--members", "--verbose"]).unwrap(),
        GroupsAction::Describe {
            groups: GroupSelection::Named(vec!["g".into()]),
            view: DescribeView::Members { verbose: true }
        }
    );
    assert_eq!(
        parse(&["--describe", "--all-groups", "--state"]).unwrap(),
        GroupsAction::Describe {
            groups: GroupSelection::All,
            view: DescribeView::State { verbose: false }
        }
    );
}

#[test]
fn reset_offsets_argument_parsing() {
    assert_eq!(
        parse(&[
            "--reset-offsets",
            "--group",
            "g",
            "--topic",
            "t:0,1",
            "--shift-by",
            "-2",
            "--execute"
        ])
        .unwrap(),
        GroupsAction::Reset {
            groups: GroupSelection::Named(vec!["g".into()]),
            topics: Some(vec![("t".into(), Some(vec![0, 1]))]),
            spec: ResetSpec::ShiftBy(-2),
            execute: true,
            from_file: None,
            export: false,
        }
    );
    assert_eq!(
        parse(&[
            "--reset-offsets",
            "--group",
            "g",
            "--from-file",
            "plan.csv",
            "--export",
            "--execute"
        ])
        .unwrap(),
        GroupsAction::Reset {
            groups: GroupSelection::Named(vec!["g".into()]),
            topics: None,
            spec: ResetSpec::FromFile,
            execute: true,
            from_file: Some("plan.csv".into()),
            export: true,
        }
    );
    let GroupsAction::Reset { spec, execute, .. } = parse(&[
        "--reset-offsets",
        "--group",
        "g",
        "--all-topics",
        "--to-datetime",
        "2026-10-29T12:00:00.000Z",
        "--dry-run",
    ])
    .unwrap() else {
        panic!()
    };
    assert_eq!(
        (spec, execute),
        (ResetSpec::ToDatetime(1_793_275_200_000), false)
    );
}

#[test]
fn bad_arguments_are_refused() {
    let err = |args: &[&str]| format!("{:#}", parse(args).unwrap_err());
    assert!(err(&["--describe"]).contains("--describe needs --group or --all-groups"));
    assert!(err(&["--describe", "--group", "g", "--verbose"])
        .contains("--verbose needs --members or --state"));
    assert!(err(&["--list", "--type", "share"]).contains("Invalid types list 'share'"));
    assert!(err(&["--describe", "--group", "g", "--type"]).contains("only be used with --list"));
    assert!(
        err(&["--describe", "--group", "g", "--members", "--state"]).contains("cannot be combined")
    );
    assert!(err(&["--reset-offsets", "--group", "g", "--to-earliest"]).contains("reset scopes"));
    assert!(err(&["--reset-offsets", "--group", "g", "--topic", "t"])
        .contains("needs one of --to-earliest"));
    assert!(err(&[
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "t:x",
        "--to-latest"
    ])
    .contains("Invalid partition 'x'"));
    assert!(err(&[
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "t",
        "--to-datetime",
        "yesterday"
    ])
    .contains("'T'"));
    assert!(err(&[
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "t",
        "--to-earliest",
        "--to-latest"
    ])
    .contains("cannot be used with"));
    assert!(err(&[
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "t",
        "--to-earliest",
        "--dry-run",
        "--execute"
    ])
    .contains("cannot be used with"));
    assert!(err(&["--list", "--to-earliest"]).contains("only be used with --reset-offsets"));
    assert!(err(&["--list", "--export"]).contains("only be used with --reset-offsets"));
    assert!(err(&[
        "--reset-offsets",
        "--group",
        "g",
        "--topic",
        "t",
        "--from-file",
        "plan.csv"
    ])
    .contains("--from-file takes the partitions from the file"));
    assert!(err(&[
        "--reset-offsets",
        "--group",
        "g",
        "--all-topics",
        "--from-file",
        "plan.csv",
        "--to-earliest"
    ])
    .contains("cannot be used with"));
    assert!(err(&["--list", "--state", "Bogus"]).contains("Invalid state list"));
    assert!(err(&["--delete", "--group", "g", "--all-groups"])
        .contains("cannot be used with --all-groups"));
    assert!(err(&["--group", "g"]).contains("required"));
}

#[test]
fn delete_offsets_argument_parsing() {
    assert_eq!(
        parse(&[
            "--delete-offsets",
            "--group",
            "g",
            "--topic",
            "t",
            "--topic",
            "u:0,2"
        ])
        .unwrap(),
        GroupsAction::DeleteOffsets {
            group: "g".into(),
            topics: vec![("t".into(), None), ("u".into(), Some(vec![0, 2]))],
        }
    );
    let err = |args: &[&str]| format!("{:#}", parse(args).unwrap_err());
    assert!(err(&["--delete-offsets", "--group", "g"]).contains("needs --topic"));
    assert!(err(&["--delete-offsets", "--topic", "t"]).contains("exactly one --group"));
    assert!(err(&[
        "--delete-offsets",
        "--group",
        "g",
        "--group",
        "h",
        "--topic",
        "t"
    ])
    .contains("exactly one --group"));
    assert!(
        err(&["--delete-offsets", "--all-groups", "--topic", "t"]).contains("exactly one --group")
    );
    assert!(err(&["--delete-offsets", "--group", "g", "--topic", "t:x"])
        .contains("Invalid partition 'x'"));
    assert!(err(&["--delete-offsets", "--group", "g", "--all-topics"])
        .contains("only be used with --reset-offsets"));
    assert!(err(&[
        "--delete-offsets",
        "--delete",
        "--group",
        "g",
        "--topic",
        "t"
    ])
    .contains("cannot be used with"));
    assert!(err(&["--delete", "--group", "g", "--topic", "t"])
        .contains("--topic can only be used with --reset-offsets or --delete-offsets"));
}

fn consumer_group(members: Vec<MemberDescription>) -> GroupDescription {
    GroupDescription {
        group_id: "cg".into(),
        group_type: GroupType::Consumer,
        state: "Reconciling".into(),
        protocol: "uniform".into(),
        group_epoch: Some(7),
        assignment_epoch: Some(6),
        ..seed_group(members)
    }
}

fn consumer_member(
    id: &str,
    epoch: i32,
    current: &[(&str, i32)],
    target: &[(&str, i32)],
) -> MemberDescription {
    let tps = |v: &[(&str, i32)]| -> Vec<TopicPartition> {
        v.iter().map(|(t, p)| TopicPartition::new(*t, *p)).collect()
    };
    MemberDescription {
        assignment: tps(current),
        target_assignment: Some(tps(target)),
        member_epoch: Some(epoch),
        ..MemberDescription::new(id.into(), "rdkafka".into(), "/127.0.0.1".into())
    }
}

#[test]
fn consumer_group_members_verbose_has_epochs_and_target_assignments() {
    let g = consumer_group(vec![
        consumer_member("m-1", 5, &[("t", 1), ("t", 0)], &[("t", 0)]),
        consumer_member("m-2", 6, &[], &[("t", 1)]),
    ]);
    let row = |cols: [&str; 9]| {
        format!(
            "{:<15} {:<15} {:<15} {:<15} {:<15} {:<15} {:<20} {:<15} {:<20}\n",
            cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6], cols[7], cols[8]
        )
    };
    let expected = [
        "\n".to_string(),
        row([
            "GROUP",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "CURRENT-EPOCH",
            "CURRENT-ASSIGNMENT",
            "TARGET-EPOCH",
            "TARGET-ASSIGNMENT",
        ]),
        row([
            "cg",
            "m-1",
            "/127.0.0.1",
            "rdkafka",
            "2",
            "5",
            "t:0,1",
            "6",
            "t:0",
        ]),
        row([
            "cg",
            "m-2",
            "/127.0.0.1",
            "rdkafka",
            "0",
            "6",
            "-",
            "6",
            "t:1",
        ]),
    ]
    .concat();
    assert_eq!(format_members(&g, true), expected);
    // Without --verbose a consumer group's table is the classic one.
    let plain = format_members(&g, false);
    assert!(
        plain.lines().nth(1).unwrap().ends_with("#PARTITIONS     "),
        "{plain:?}"
    );
    assert!(!plain.contains("EPOCH"));
}

#[test]
fn consumer_group_assignment_columns_widen_to_their_longest_value() {
    let long = "a-topic-with-a-long-name";
    let g = consumer_group(vec![consumer_member(
        "m-1",
        3,
        &[(long, 0), (long, 1), ("b", 2)],
        &[],
    )]);
    let current = format!("{long}:0,1;b:2");
    let text = format_members(&g, true);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        lines[1],
        format!(
            "{:<15} {:<15} {:<15} {:<15} {:<15} {:<15} {:<w$} {:<15} {:<20}",
            "GROUP",
            "CONSUMER-ID",
            "HOST",
            "CLIENT-ID",
            "#PARTITIONS",
            "CURRENT-EPOCH",
            "CURRENT-ASSIGNMENT",
            "TARGET-EPOCH",
            "TARGET-ASSIGNMENT",
            w = current.len()
        )
    );
    assert_eq!(
        lines[2],
        format!(
            "{:<15} {:<15} {:<15} {:<15} {:<15} {:<15} {current} {:<15} {:<20}",
            "cg", "m-1", "/127.0.0.1", "rdkafka", "3", "3", "6", "-"
        )
    );
}

#[test]
fn state_verbose_shows_group_and_assignment_epochs() {
    let g = consumer_group(vec![consumer_member("m-1", 7, &[], &[])]);
    let line = |cols: [&str; 7]| {
        format!(
            "\n{:<15} {:<25} {:<20} {:<20} {:<15} {:<25} {}",
            cols[0], cols[1], cols[2], cols[3], cols[4], cols[5], cols[6]
        )
    };
    let expected = line([
        "GROUP",
        "COORDINATOR (ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "GROUP-EPOCH",
        "TARGET-ASSIGNMENT-EPOCH",
        "#MEMBERS",
    ]) + &line([
        "cg",
        "127.0.0.1:9092  (1)",
        "uniform",
        "Reconciling",
        "7",
        "6",
        "1",
    ]) + "\n";
    assert_eq!(format_state_verbose(&g), expected);
    // A classic group has no epochs; an assignor not yet chosen is `-`.
    let mut classic = seed_group(vec![]);
    classic.protocol.clear();
    let text = format_state_verbose(&classic);
    let last = line([
        "b1.rebal.group",
        "127.0.0.1:9092  (1)",
        "-",
        "Stable",
        "-",
        "-",
        "0",
    ]) + "\n";
    assert!(text.ends_with(&last), "{text:?}");
}

#[test]
fn consumer_group_offsets_rows_follow_current_assignments() {
    let g = consumer_group(vec![
        consumer_member("m-1", 5, &[("t", 0)], &[("t", 0), ("t", 1)]),
        consumer_member("m-2", 5, &[("t", 1)], &[]),
    ]);
    let tp = |p| TopicPartition::new("t", p);
    let committed: BTreeMap<TopicPartition, i64> = [(tp(0), 3), (tp(1), 4)].into_iter().collect();
    let log_end: BTreeMap<TopicPartition, i64> = [(tp(0), 5), (tp(1), 4)].into_iter().collect();
    let owners: Vec<(i32, Option<i64>, String)> = offset_rows(&g, &committed, &log_end)
        .into_iter()
        .map(|r| (r.partition.unwrap(), r.lag, r.consumer_id.unwrap()))
        .collect();
    assert_eq!(
        owners,
        vec![
            (0, Some(2), "m-1".to_string()),
            (1, Some(0), "m-2".to_string())
        ]
    );
}

#[test]
fn list_with_types_table() {
    let groups = [
        listing("cg", "Stable", "consumer"),
        listing("a-much-longer-group-id", "Empty", "classic"),
        GroupListing {
            group_type: None,
            state: None,
            ..listing("old", "", "")
        },
    ];
    let w = "a-much-longer-group-id".len() + 10;
    assert_eq!(
        format_group_table(&groups, true, true),
        format!(
            "{:<w$} {:<20} {:<20}\n{:<w$} {:<20} {:<20}\n{:<w$} {:<20} {:<20}\n{:<w$} {:<20} {:<20}\n",
            "GROUP", "TYPE", "STATE",
            "cg", "Consumer", "Stable",
            "a-much-longer-group-id", "Classic", "Empty",
            "old", "Unknown", "Unknown",
        )
    );
    assert_eq!(
        format_group_table(&groups[..1], true, false),
        format!(
            "{:<25} {:<20}\n{:<25} {:<20}\n",
            "GROUP", "TYPE", "cg", "Consumer"
        )
    );
    assert_eq!(parse_types("CONSUMER").unwrap(), vec!["consumer"]);
}
