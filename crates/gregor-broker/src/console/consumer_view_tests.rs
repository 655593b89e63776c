use super::*;
use crate::groups::AssignmentTimes;
use gregor_group::consumer::epochs::{CauseKind, Departure, EpochCause, EpochHistory};
use gregor_group::consumer::model::{Assignment, ConsumerGroupStats};

fn member(
    id: &str,
    assigned: &[(&str, i32)],
    pending: &[(&str, i32)],
) -> ConsumerMemberObservation {
    let parts = |v: &[(&str, i32)]| v.iter().map(|(t, p)| (t.to_string(), *p)).collect();
    ConsumerMemberObservation {
        member_id: id.into(),
        instance_id: None,
        client_id: format!("client-{id}"),
        client_host: "/127.0.0.1".into(),
        member_epoch: 3,
        state: if pending.is_empty() {
            "STABLE"
        } else {
            "UNREVOKED_PARTITIONS"
        },
        assigned: parts(assigned),
        pending_revocation: parts(pending),
        target: parts(assigned),
        classic: false,
    }
}

fn observation(group_id: &str) -> ConsumerGroupObservation {
    ConsumerGroupObservation {
        group_id: group_id.into(),
        state: "Reconciling",
        group_epoch: 4,
        target_epoch: 4,
        members: 2,
        classic_members: 0,
        stats: ConsumerGroupStats {
            targets: 3,
            reconciliations: 2,
            reconciliation_ms_total: 30,
            last_reconciliation_ms: Some(10),
            reconciling_since_ms: Some(1_000),
        },
        assignment: AssignmentTimes::default(),
        offsets: vec![("a".into(), 0, 5), ("a".into(), 1, 7), ("b".into(), 0, 0)],
        member_list: vec![
            member("m1", &[("a", 0), ("b", 0)], &[]),
            member("m2", &[("a", 1)], &[("b", 0)]),
        ],
        epochs: Vec::new(),
        topic_names: BTreeMap::from([(1, "a".to_string())]),
        coordinator_since_ms: 0,
    }
}

fn hws() -> HashMap<(String, i32), i64> {
    [
        (("a".to_string(), 0), 10),
        (("a".to_string(), 1), 10),
        (("b".to_string(), 0), 100),
    ]
    .into_iter()
    .collect()
}

#[test]
fn consumer_groups_are_listed_with_their_type_epoch_and_lag() {
    let l = lines(2, &[observation("g")], &hws(), &Visible::all());
    assert_eq!(l.len(), 1);
    assert_eq!(l[0]["type"], "consumer");
    assert_eq!(l[0]["state"], "Reconciling");
    assert_eq!(l[0]["generation"], 4);
    assert_eq!(l[0]["members"], 2);
    assert_eq!(l[0]["lag_sum"], 5 + 3 + 100);
    assert_eq!(l[0]["coordinator"], 2);
    assert_eq!(l[0]["rebalancing"], true);
}

#[test]
fn a_principal_without_describe_on_the_group_does_not_see_it() {
    let only_a = Visible {
        topic: &|t| t == "a",
        group: &|g| g == "seen",
        transactional_id: &|_| true,
        cluster: false,
    };
    let l = lines(
        1,
        &[observation("seen"), observation("hidden")],
        &hws(),
        &only_a,
    );
    let ids: Vec<_> = l.iter().map(|g| g["group_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["seen"]);
    // Lag over the topics it may DESCRIBE only.
    assert_eq!(l[0]["lag_sum"], 8);
}

#[test]
fn the_detail_shows_epochs_members_offsets_and_reconciliation() {
    let g = group(1, &observation("g"), &hws(), &Visible::all());
    assert_eq!(g["group_epoch"], 4);
    assert_eq!(g["target_assignment_epoch"], 4);
    let m2 = &g["members"][1];
    assert_eq!(m2["member_id"], "m2");
    assert_eq!(m2["member_epoch"], 3);
    assert_eq!(m2["member_state"], "UNREVOKED_PARTITIONS");
    assert_eq!(m2["assignment"], json!([{ "topic": "a", "partition": 1 }]));
    assert_eq!(
        m2["pending_revocation"],
        json!([{ "topic": "b", "partition": 0 }])
    );
    assert_eq!(m2["classic_protocol"], false);
    assert_eq!(m2["lag_sum"], 3);
    assert_eq!(g["members"][0]["lag_sum"], 105);
    assert_eq!(g["offsets"][2]["owner"], "m1");
    assert_eq!(g["offsets"][2]["lag"], 100);
    assert_eq!(g["lag_sum"], 108);
    let r = &g["reconciliation"];
    assert_eq!(r["count"], 2);
    assert_eq!(r["last_ms"], 10);
    assert_eq!(r["mean_ms"], 15.0);
    assert_eq!(r["in_progress"], true);
    assert_eq!(r["since_ms"], 1_000);
}

#[test]
fn the_detail_hides_offsets_of_topics_the_principal_may_not_describe() {
    let only_a = Visible {
        topic: &|t| t == "a",
        group: &|_| true,
        transactional_id: &|_| true,
        cluster: false,
    };
    let g = group(1, &observation("g"), &hws(), &only_a);
    let topics: Vec<_> = g["offsets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["topic"].clone())
        .collect();
    assert_eq!(topics, [json!("a"), json!("a")]);
    assert_eq!(g["lag_sum"], 8);
}

/// Epoch 1: m1 joins at 1000 and holds its target at once. Epoch 2: m2 joins at 2000; m1
/// gives a partition up by 2100, m2 takes it at 2400. Epoch 3: m1 is fenced at 5000, no
/// target yet.
fn history() -> EpochHistory {
    let mut h = EpochHistory::default();
    let one: Assignment = BTreeMap::from([(1, (0..2).collect())]);
    let half = |p: i32| -> Assignment { BTreeMap::from([(1, [p].into())]) };
    let (m1, m2) = ("m1".to_string(), "m2".to_string());
    h.bump(
        1,
        EpochCause::of_member(CauseKind::MemberJoined, "m1", "client-m1"),
        1_000,
    );
    h.target_computed(1, [(&m1, "client-m1", &one)].into_iter(), 1_000);
    h.member_at("m1", 1, true, 1_000);
    h.bump(
        2,
        EpochCause::of_member(CauseKind::MemberJoined, "m2", "client-m2"),
        2_000,
    );
    let (a0, a1) = (half(0), half(1));
    let target = [(&m1, "client-m1", &a0), (&m2, "client-m2", &a1)];
    h.target_computed(2, target.into_iter(), 2_000);
    h.member_at("m1", 2, true, 2_100);
    h.member_at("m2", 2, true, 2_400);
    h.member_gone("m1", Departure::Fenced, 5_000);
    h.bump(
        3,
        EpochCause::of_member(CauseKind::MemberFenced, "m1", "client-m1"),
        5_000,
    );
    h
}

#[test]
fn the_epochs_show_causes_targets_and_each_members_reconciliation_on_one_axis() {
    let mut o = observation("g");
    o.epochs = history().recent.into_iter().collect();
    let g = group(1, &o, &hws(), &Visible::all());
    let e = g["epochs"].as_array().expect("epochs");
    assert_eq!(e.len(), 3);
    assert_eq!(e[1]["epoch"], 2);
    assert_eq!(e[1]["cause"], "member joined");
    assert_eq!(e[1]["cause_member"]["client_id"], "client-m2");
    assert_eq!(e[1]["status"], "reconciled");
    let m = e[1]["members"].as_array().expect("members");
    assert_eq!(m[1]["member_id"], "m2");
    assert_eq!(m[1]["target"], json!([{ "topic": "a", "partition": 1 }]));
    assert_eq!(
        (m[1]["progress"].clone(), m[1]["total_ms"].clone()),
        (json!("reconciled"), json!(400))
    );
    // The longest reconciliation (m2's 400 ms) spans the axis; m1's 100 ms a quarter of it.
    assert_eq!(g["epochs_scale"]["max_ms"], 400);
    assert_eq!(m[1]["bar"]["reconcile_pct"], 100.0);
    assert_eq!(m[0]["bar"]["reconcile_pct"], 25.0);
    assert_eq!(e[2]["status"], "no target");
    assert_eq!(e[2]["cause"], "member fenced");
    assert_eq!(g["epochs_capacity"], 20);
}

#[test]
fn a_member_fenced_before_reaching_its_target_shows_as_fenced() {
    let mut h = history();
    let m3 = "m3".to_string();
    let t: Assignment = BTreeMap::from([(1, [0].into())]);
    h.target_computed(3, [(&m3, "client-m3", &t)].into_iter(), 5_100);
    h.member_gone("m3", Departure::Fenced, 9_000);
    let mut o = observation("g");
    o.epochs = h.recent.into_iter().collect();
    let g = group(1, &o, &hws(), &Visible::all());
    let m = &g["epochs"][2]["members"][0];
    assert_eq!(
        (m["progress"].clone(), m["done_ms"].clone()),
        (json!("fenced"), json!(9_000))
    );
    assert_eq!(g["epochs"][2]["status"], "ended");
}
