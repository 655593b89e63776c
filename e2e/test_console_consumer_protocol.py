"""The console shows KIP-848 consumer groups (`group.protocol=consumer`): the Groups page lists
them with their type, state and epoch next to classic groups, and a group's page shows its
group and target assignment epochs, each member's epoch, state and partitions (assigned,
pending revocation, target), committed offsets with lag, the reconciliation figures, and the
rebalance timeline (each group epoch's cause and target, each member's reconciliation as a bar
on one shared axis), in headless Chromium against a real broker with confluent-kafka members."""

import re

import pytest
from confluent_kafka import Consumer, TopicPartition

from clients import conf, create_topic, produce
from conftest import free_port, wait_until
from groups import ConfluentMember, Timeline
from test_console import Browser, api, page
from test_consumer_protocol import CONSUMER, FAST_GROUPS


def stable_with(port, group, clients):
    """The group's console JSON once it is Stable with exactly `clients` as members, each
    holding its target; else None."""
    g = api(port, "/ui/api/group?id=" + group)
    if g.get("type") != "consumer" or g["state"] != "Stable":
        return None
    if sorted(m["client_id"] for m in g["members"]) != sorted(clients):
        return None
    done = all(m["member_state"] == "STABLE" and m["assignment"] == m["target"]
               and not m["pending_revocation"] for m in g["members"])
    return g if done else None


@pytest.mark.timeout(180)
def test_consumer_groups_in_the_list_and_their_detail_in_a_browser(start_broker, tmp_path):
    port = free_port()
    b = start_broker(overrides={**FAST_GROUPS, "metrics.listener": f"http://127.0.0.1:{port}"})
    browser = Browser(tmp_path)
    topic = create_topic(b, "console-kip848", partitions=2)
    group = "console-kip848"
    produce(b, topic, [{"partition": 0, "value": b"x"} for _ in range(120)]
            + [{"partition": 1, "value": b"y"} for _ in range(45)])
    # A known lag (50 on partition 0, none on 1), committed by a consumer-protocol member that
    # then leaves; the members below never commit.
    c = Consumer(conf(b, {"group.id": group, "enable.auto.commit": False, **CONSUMER}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 70), TopicPartition(topic, 1, 45)],
                 asynchronous=False)
    finally:
        c.close()
    # A classic group beside it, for the list.
    classic = Consumer(conf(b, {"group.id": "console-classic", "enable.auto.commit": False}))
    try:
        classic.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        classic.close()

    timeline = Timeline()
    alpha = ConfluentMember(b, timeline, "alpha", group, [topic], "range", extra=CONSUMER).start()
    beta = None
    try:
        # One after the other: alpha holds both partitions, then beta joins and alpha gives one up.
        wait_until(lambda: stable_with(port, group, ["alpha"]), 60, "alpha alone reconciled")
        beta = ConfluentMember(b, timeline, "beta", group, [topic], "range",
                               extra=CONSUMER).start()
        g = wait_until(lambda: stable_with(port, group, ["alpha", "beta"]), 60,
                       "alpha and beta reconciled")
        assert g["group_epoch"] == g["target_assignment_epoch"] >= 1
        assert g["reconciliation"]["count"] >= 1

        listing = page(browser, port, "/groups")
        browser.screenshot(f"http://127.0.0.1:{port}/ui/#/groups", "groups-kip848")
        row = listing.find("tr", data_group=group)
        assert row.attrs["data-type"] == "consumer"
        cells = [td.text() for td in row.find_all("td")]
        assert cells[1] == "consumer" and cells[2] == "Stable", cells
        assert cells[4] == str(g["group_epoch"]) and cells[5] == "2" and cells[6] == "50", cells
        assert listing.find("tr", data_group="console-classic").attrs["data-type"] == "classic"

        main = page(browser, port, "/group/" + group)
        browser.screenshot(f"http://127.0.0.1:{port}/ui/#/group/{group}", "group-kip848")
        assert main.find(id="group-id").text() == group
        assert main.find(id="group-state").text() == "Stable"
        assert main.find(id="group-epoch").text() == str(g["group_epoch"])
        assert main.find(id="target-epoch").text() == str(g["target_assignment_epoch"])
        assert main.find(id="group-lag").text() == "50"
        rows = main.find("table", id="members").find("tbody").find_all("tr")
        assert sorted(r.attrs["data-client-id"] for r in rows) == ["alpha", "beta"]
        owned = []
        for r in rows:
            m = next(x for x in g["members"] if x["client_id"] == r.attrs["data-client-id"])
            assert r.attrs["data-member-state"] == "STABLE"
            assert r.find("td", **{"class": "num member-epoch"}).text() == str(m["member_epoch"])
            assert r.find("td", **{"class": "pending"}).text() == "—"
            assigned = r.find("td", **{"class": "assignment"}).text()
            assert assigned.endswith("(1)"), assigned  # two partitions, two members
            owned.append(assigned.split(" ")[0])
            assert r.find("td", **{"class": "target"}).text() == owned[-1]
            assert r.find("td", **{"class": "classic"}).text() == "consumer"
        assert sorted(owned) == [f"{topic}-0", f"{topic}-1"]
        lag = main.find("table", id="lag")
        p0 = [td.text() for td in lag.find("tr", data_partition="0").find_all("td")]
        assert p0[:5] == [topic, "0", "70", "120", "50"], p0
        assert int(main.find(id="reconciliations").text()) >= 1
        check_epochs(g, main)
    finally:
        alpha.stop()
        if beta is not None:
            beta.stop()


def style_width(node):
    """The width in percent an element's style attribute sets."""
    m = re.search(r"width:\s*([0-9.]+)%", node.attrs.get("style", ""))
    assert m, node.attrs
    return float(m.group(1))


def check_epochs(g, main):
    """At least two epochs: alpha's join, then beta's, whose target names both members; each of
    them has a reconciliation bar on the shared axis, in the JSON and on the page."""
    epochs = g["epochs"]
    assert len(epochs) >= 2, epochs
    assert [e["epoch"] for e in epochs] == sorted(e["epoch"] for e in epochs)
    joined = [(e["cause"], (e["cause_member"] or {}).get("client_id")) for e in epochs]
    assert ("member joined", "alpha") in joined and ("member joined", "beta") in joined, joined
    second = next(e for e in epochs
                  if e["cause"] == "member joined" and e["cause_member"]["client_id"] == "beta")
    assert second["epoch"] > next(e["epoch"] for e in epochs
                                  if e["cause_member"] and e["cause_member"]["client_id"] == "alpha")
    assert sorted(m["client_id"] for m in second["members"]) == ["alpha", "beta"], second
    targets = sorted(tps["partition"] for m in second["members"] for tps in m["target"])
    assert targets == [0, 1], second
    # The epoch the members stand at now: each reached it, with its bar on the shared axis.
    current = next(e for e in epochs if e["epoch"] == g["target_assignment_epoch"])
    assert current["status"] == "reconciled", current
    scale = g["epochs_scale"]
    longest = max(m["total_ms"] for e in epochs for m in e["members"]
                  if m["total_ms"] is not None)
    assert scale["max_ms"] == longest, (scale, longest)
    label = main.find(id="epochs-scale").text()
    assert scale["kind"] in label and "full width" in label, label
    item = main.find("ol", id="epochs").find("li", data_epoch=str(current["epoch"]))
    assert item.attrs["data-status"] == "reconciled"
    assert "member joined" in main.find("ol", id="epochs").find(
        "li", data_epoch=str(second["epoch"])).text()
    for m in current["members"]:
        assert m["progress"] == "reconciled" and m["done_ms"] >= current["at_ms"], m
        row = item.find("li", data_client_id=m["client_id"])
        assert row.attrs["data-progress"] == "reconciled"
        bar = row.find("div", **{"class": "bar"})
        wait = style_width(bar.find("div", **{"class": "join"}))
        rec = style_width(bar.find("div", **{"class": "sync"}))
        assert abs(wait - m["bar"]["wait_pct"]) < 0.01 and abs(rec - m["bar"]["reconcile_pct"]) < 0.01
        assert wait + rec <= 100.01
        owned = row.find("div", **{"class": "epoch-target muted"}).text()
        assert all(f"{t['topic']}-{t['partition']}" in owned for t in m["target"]), owned
