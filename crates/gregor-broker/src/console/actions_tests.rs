use super::*;

#[test]
fn actions_are_parsed_from_their_json() {
    let create = br#"{"topic":"orders","partitions":3,"replication_factor":2}"#;
    assert_eq!(
        parse("create-topic", create),
        Ok(Action::CreateTopic {
            topic: "orders".into(),
            partitions: 3,
            replication_factor: 2
        })
    );
    assert_eq!(
        parse(
            "reset-offsets",
            br#"{"group":"g","topic":"t","to":"offset","offset":7}"#
        ),
        Ok(Action::ResetOffsets {
            group: "g".into(),
            topic: "t".into(),
            to: ResetTo::Offset(7)
        })
    );
    assert_eq!(
        parse("elect-leaders", b"{}"),
        Ok(Action::ElectPreferred { topic: None })
    );
    assert_eq!(
        parse("elect-leaders", br#"{"topic":"t"}"#),
        Ok(Action::ElectPreferred {
            topic: Some("t".into())
        })
    );
    assert_eq!(
        parse("delete-topic", br#"{"topic":"t"}"#).map(|a| a.target()),
        Ok("topic t".to_string())
    );
}

#[test]
fn bad_bodies_say_what_is_wrong() {
    let err = |name, body: &[u8]| parse(name, body).expect_err("refused");
    assert!(err("create-topic", b"nope").contains("not JSON"));
    assert!(err("create-topic", b"[1]").contains("JSON object"));
    assert!(err(
        "create-topic",
        br#"{"topic":"t","partitions":0,"replication_factor":1}"#
    )
    .contains("partitions"));
    assert!(err(
        "create-topic",
        br#"{"topic":"t","partitions":1,"replication_factor":70000}"#
    )
    .contains("replication_factor"));
    assert!(err("delete-topic", br#"{"topic":""}"#).contains("topic"));
    assert!(err("reset-offsets", br#"{"group":"g","topic":"t","to":"soon"}"#).contains("to must"));
    assert!(err(
        "reset-offsets",
        br#"{"group":"g","topic":"t","to":"offset","offset":-1}"#
    )
    .contains("offset"));
    assert!(err("elect-leaders", br#"{"topic":3}"#).contains("topic"));
    assert!(err("drop-database", b"{}").contains("no action"));
}

fn from<'a>(origin: Option<&'a str>, host: Option<&'a str>) -> Origin<'a> {
    Origin {
        origin,
        host,
        marker: Some("1"),
        content_type: Some("application/json; charset=utf-8"),
    }
}

#[test]
fn only_the_consoles_own_page_may_post() {
    let host = Some("127.0.0.1:9644");
    assert_eq!(cross_site_refusal(&from(None, host)), None);
    assert_eq!(
        cross_site_refusal(&from(Some("http://127.0.0.1:9644"), host)),
        None
    );
    assert_eq!(
        cross_site_refusal(&from(
            Some("https://LOCALHOST:9644"),
            Some("localhost:9644")
        )),
        None
    );
    for foreign in [
        "http://evil.example",
        "http://127.0.0.1:9645",
        "null",
        "ftp://127.0.0.1:9644",
    ] {
        let refusal = cross_site_refusal(&from(Some(foreign), host));
        assert!(
            refusal.as_deref().is_some_and(|r| r.contains("cross-site")),
            "{foreign}: {refusal:?}"
        );
    }
    let mut form = from(None, host);
    form.content_type = Some("application/x-www-form-urlencoded");
    assert!(cross_site_refusal(&form).is_some_and(|r| r.contains("JSON")));
    let mut unmarked = from(None, host);
    unmarked.marker = None;
    assert!(cross_site_refusal(&unmarked).is_some_and(|r| r.contains(MARKER_HEADER)));
}

#[test]
fn reset_offsets_stay_within_the_log() {
    assert_eq!(reset_offset(ResetTo::Earliest, 5, 20), 5);
    assert_eq!(reset_offset(ResetTo::Latest, 5, 20), 20);
    assert_eq!(reset_offset(ResetTo::Offset(9), 5, 20), 9);
    assert_eq!(reset_offset(ResetTo::Offset(1), 5, 20), 5);
    assert_eq!(reset_offset(ResetTo::Offset(99), 5, 20), 20);
}

#[test]
fn answers_name_kafkas_errors() {
    let action = Action::DeleteTopic { topic: "t".into() };
    let refused = result(json!({"topic": "t"}), 29, Some("denied"));
    assert_eq!(refused["error"], "TOPIC_AUTHORIZATION_FAILED");
    let a = answer(&action, "User:alice", vec![refused], &[]);
    assert_eq!(a["ok"], false);
    assert_eq!(a["action"], "delete-topic");
    let not_needed = result(
        json!({"topic": "t", "partition": 0}),
        ELECTION_NOT_NEEDED,
        None,
    );
    let fine = result(json!({"topic": "t", "partition": 1}), 0, None);
    let elect = Action::ElectPreferred { topic: None };
    let a = answer(
        &elect,
        "User:ANONYMOUS",
        vec![not_needed, fine],
        &[ELECTION_NOT_NEEDED],
    );
    assert_eq!(a["ok"], true);
    assert_eq!(a["results"][0]["error"], "ELECTION_NOT_NEEDED");
}

#[test]
fn requests_carry_what_was_asked() {
    let c = create_topics("t", 3, 2);
    assert_eq!(c.topics[0].num_partitions, 3);
    assert_eq!(c.topics[0].replication_factor, 2);
    assert_eq!(delete_topics("t").topic_names[0].0.as_str(), "t");
    assert!(elect_preferred(None).topic_partitions.is_none());
    let e = elect_preferred(Some(("t", vec![0, 1])));
    assert_eq!(
        e.topic_partitions.expect("one topic")[0].partitions,
        vec![0, 1]
    );
    let o = commit_offsets("g", "t", &[(0, 4), (1, 9)]);
    assert_eq!(o.generation_id_or_member_epoch, -1);
    assert_eq!(o.member_id.as_str(), "");
    assert_eq!(o.topics[0].partitions[1].committed_offset, 9);
}
