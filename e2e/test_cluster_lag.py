"""Groups seen cluster-wide on a real 3-node cluster. A topic has one partition on each node
(replication factor 1), so the group's coordinator leads one of them and two are led elsewhere:

- /metrics on the coordinator exports the exact lag of every committed partition, the high
  watermark asked of each partition's leader (kafka-lag-exporter / Burrow semantics); the other
  nodes export no series for the group; `gregor groups --describe` through any node agrees;
- the console opened on a node that is NOT the coordinator, in headless Chromium, lists the
  group with its coordinator, shows its members, the lag of every partition and the rebalance
  timeline its coordinator recorded; screenshots are saved like test_console.py's;
- the console's group endpoints refuse bad input with 400/404 on a non-coordinator too, and the
  node keeps serving."""

import json
import time

import pytest
from confluent_kafka import Consumer, TopicPartition

import kwire
from clients import conf, produce
from conftest import wait_until
from groups import ConfluentMember, Timeline
from test_console import Browser, api, page
from test_metrics import describe_offsets, http_get, scrape, value

OFFSETS_PARTITIONS = 6
OFFSETS = "__consumer_offsets"
TOPIC = "spread"
PRODUCED = [40, 60, 80]  # records per partition
COMMITTED = [10, 50, 25]  # the group's committed offsets
LAGS = [n - m for n, m in zip(PRODUCED, COMMITTED)]  # 30, 10, 55


def lag_cluster(cluster_factory, overrides=None):
    """Three nodes serving metrics; __consumer_offsets with one replica per partition (so the
    coordinator hosts no copy of the other nodes' partitions) and `spread` with partition p on
    node p, holding PRODUCED[p] records."""
    c = cluster_factory(3, metrics=True, overrides={
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
        **(overrides or {}),
    })
    nodes = list(c.nodes.values())
    for n in nodes:
        n.bin = c.bin  # for describe_offsets (`gregor groups --describe` through that node)
    err, msg = nodes[0].create_topic(TOPIC, partitions=-1, replication_factor=-1,
                                     assignments=[(0, [0]), (1, [1]), (2, [2])])
    assert err == 0, (err, msg)
    for n in nodes:
        wait_until(lambda: TOPIC in n.metadata()["topics"], 10, f"{TOPIC} on node {n.node_id}")
    for p, count in enumerate(PRODUCED):
        produce(nodes[0], TOPIC, [{"partition": p, "value": b"r%d" % i} for i in range(count)])
    # FindCoordinator creates __consumer_offsets.
    with kwire.Conn("127.0.0.1", nodes[0].port) as conn:
        wait_until(lambda: kwire.find_coordinator(conn, "warm-up")[0] == 0, 30,
                   "__consumer_offsets to have leaders")
    return c


def group_coordinated_by(c, coordinator, prefix):
    """A group id whose __consumer_offsets partition `coordinator` leads, by the metadata."""
    _, parts = c.nodes[0].metadata([OFFSETS])["topics"][OFFSETS]
    leaders = {p: leader for p, (_, leader, _, _) in parts.items()}
    for i in range(200):
        g = f"{prefix}-{i}"
        if leaders[kwire.group_partition(g, OFFSETS_PARTITIONS)] == coordinator:
            return g
    raise AssertionError(f"no group id coordinated by node {coordinator}: {leaders}")


def coordinator_of(c, group, expected):
    """The node whose coordinator holds `group` (the one node listing it as its own), which must
    be the one the metadata predicted."""
    def found():
        holders = [n for n in c.nodes.values()
                   if group in [x["group_id"] for x in
                                api(n.metrics_port, "/ui/api/groups?scope=local")["groups"]]]
        return holders[0] if len(holders) == 1 else None
    node = wait_until(found, 20, f"one node to coordinate {group}")
    assert node.node_id == expected, (group, node.node_id, expected)
    return node


def commit(node, group, offsets):
    c = Consumer(conf(node, {"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in enumerate(offsets)],
                 asynchronous=False)
    finally:
        c.close()


def group_series(samples, group):
    return [(n, ls) for n, ls, _ in samples if ls.get("group") == group]


@pytest.mark.timeout(180)
def test_the_coordinator_exports_the_lag_of_partitions_led_by_other_nodes(cluster_factory):
    c = lag_cluster(cluster_factory)
    group = group_coordinated_by(c, 1, "lag")
    # Committed through node 0: the request reaches the coordinator like any client's.
    commit(c.nodes[0], group, COMMITTED)
    coordinator = coordinator_of(c, group, 1)
    others = [n for n in c.nodes.values() if n is not coordinator]
    here = coordinator.node_id  # the one partition the coordinator leads (and hosts)

    def lags():
        s = scrape(coordinator.metrics_port)
        got = [value(s, "gregor_consumer_group_lag_offsets", group=group, topic=TOPIC,
                     partition=p) for p in range(3)]
        return (s, got) if got == LAGS else None

    samples, _ = wait_until(lags, 20, f"the coordinator to export the lag {LAGS} of {group}")
    for p in range(3):
        assert value(samples, "gregor_consumer_group_committed_offset", group=group,
                     topic=TOPIC, partition=p) == COMMITTED[p]
    assert value(samples, "gregor_consumer_group_lag_sum_offsets", group=group) == sum(LAGS)
    # Time lag where the coordinator holds the batch (its own partition) only.
    for p in range(3):
        age = value(samples, "gregor_consumer_group_lag_seconds", group=group, topic=TOPIC,
                    partition=p)
        assert (age is not None) == (p == here), (p, here, age)
    # Exactly one node reports the group: summing over nodes counts it once.
    for other in others:
        assert group_series(scrape(other.metrics_port), group) == [], \
            f"node {other.node_id} exports series for {group}"

    # `gregor groups --describe` agrees, through a node that is not the coordinator.
    rows = describe_offsets(others[0], group)
    assert rows == {(TOPIC, p): (COMMITTED[p], PRODUCED[p], LAGS[p]) for p in range(3)}, rows

    # More records on a partition led by another node: the coordinator's lag follows.
    far = others[0].node_id
    produce(c.nodes[0], TOPIC, [{"partition": far, "value": b"more"} for _ in range(7)])
    wait_until(lambda: value(scrape(coordinator.metrics_port), "gregor_consumer_group_lag_offsets",
                             group=group, topic=TOPIC, partition=far) == LAGS[far] + 7, 20,
               f"the lag of partition {far} (led by node {far}) to grow by 7 on the coordinator")
    assert describe_offsets(others[1], group)[(TOPIC, far)] == \
        (COMMITTED[far], PRODUCED[far] + 7, LAGS[far] + 7)


def group_settled(port, group, generation, members):
    g = api(port, "/ui/api/group?id=" + group)
    done = [r for r in g["timeline"] if r["generation"] == generation
            and r["status"] == "completed"]
    return g if g["state"] == "Stable" and len(g["members"]) == members and done else None


@pytest.mark.timeout(240)
def test_console_on_another_node_shows_the_group_its_lag_and_timeline(cluster_factory, tmp_path):
    c = lag_cluster(cluster_factory)
    group = group_coordinated_by(c, 2, "console")
    commit(c.nodes[0], group, COMMITTED)
    coordinator = coordinator_of(c, group, 2)
    cid = coordinator.node_id
    viewer = next(n for n in c.nodes.values() if n is not coordinator)
    port = viewer.metrics_port

    timeline = Timeline()
    alpha = ConfluentMember(viewer, timeline, "alpha", group, [TOPIC], "range").start()
    wait_until(lambda: group_settled(port, group, 1, 1), 30, "generation 1 with alpha")
    beta = ConfluentMember(viewer, timeline, "beta", group, [TOPIC], "range").start()
    wait_until(lambda: group_settled(port, group, 2, 2), 30, "generation 2 with alpha and beta")
    beta.stop()
    g = wait_until(lambda: group_settled(port, group, 3, 1), 30, "generation 3 after beta left")
    assert g["coordinator"] == cid and g["via_node"] == viewer.node_id, \
        (g["coordinator"], g.get("via_node"))
    # The members never commit: the lag is the committed one, every partition's leader asked.
    wait_until(lambda: [o["lag"] for o in api(port, "/ui/api/group?id=" + group)["offsets"]]
               == LAGS, 20, f"the lag of every partition through node {viewer.node_id}")

    browser = Browser(tmp_path)
    main = page(browser, port, "/group/" + group)
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/group/{group}", "cluster-group")
    assert main.find(id="group-id").text() == group
    assert main.find(id="group-state").text() == "Stable"
    assert main.find(id="group-generation").text() == "3"
    assert main.find(id="group-coordinator").text() == str(cid)
    assert main.find(id="group-lag").text() == str(sum(LAGS))
    members = main.find("table", id="members").find("tbody").find_all("tr")
    assert [m.attrs["data-client-id"] for m in members] == ["alpha"], [m.text() for m in members]
    assert members[0].find("td", **{"class": "assignment"}).text() == \
        ", ".join(f"{TOPIC}-{p}" for p in range(3))
    assert members[0].find("td", **{"class": "num lag"}).text() == str(sum(LAGS))
    lag = main.find("table", id="lag")
    for p in range(3):
        cells = [td.text() for td in lag.find("tr", data_partition=str(p)).find_all("td")]
        assert cells[:5] == [TOPIC, str(p), str(COMMITTED[p]), str(PRODUCED[p]), str(LAGS[p])], \
            cells
        assert cells[5].startswith("alpha"), cells
    items = main.find("ol", id="timeline").find_all("li", data_status="completed")
    assert [li.attrs["data-generation"] for li in items] == ["3", "2", "1"]
    g3, g2, g1 = items
    assert "joined" in g1.text() and "alpha" in g1.text()
    assert "joined" in g2.text() and "beta" in g2.text()
    left = g3.find("li", data_cause="left")
    assert "beta" in left.text() and "LeaveGroup" in left.text()
    source = main.find(id="timeline-source").text()
    assert f"in memory by the coordinator, node {cid}" in source, source

    main = page(browser, port, "/groups")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/groups", "cluster-groups")
    row = main.find("table", id="groups").find("tr", data_group=group)
    cells = [td.text() for td in row.find_all("td")]
    assert cells[0] == group and cells[1] == "classic" and cells[2] == "Stable", cells
    assert cells[4] == "3" and cells[5] == "1" and cells[6] == str(sum(LAGS)), cells
    assert cells[8] == str(cid), cells  # the coordinator
    assert not main.find_all(id="unread-nodes")
    # Every node's console lists it, once, and only the coordinator's own list has it.
    for n in c.nodes.values():
        listed = [x for x in api(n.metrics_port, "/ui/api/groups")["groups"]
                  if x["group_id"] == group]
        assert len(listed) == 1 and listed[0]["coordinator"] == cid, (n.node_id, listed)
        local = [x["group_id"] for x in
                 api(n.metrics_port, "/ui/api/groups?scope=local")["groups"]]
        assert (group in local) == (n is coordinator), (n.node_id, local)
    alpha.stop()


def test_console_group_endpoints_refuse_bad_input_on_a_non_coordinator(cluster_factory):
    c = lag_cluster(cluster_factory)
    group = group_coordinated_by(c, 1, "known")
    commit(c.nodes[0], group, COMMITTED)
    coordinator = coordinator_of(c, group, 1)
    viewer = next(n for n in c.nodes.values() if n is not coordinator)
    port = viewer.metrics_port
    asked = next(n for n in c.nodes.values() if n is not viewer).node_id
    missing = group_coordinated_by(c, asked, "no-such-group")

    def error(path):
        status, ctype, body = http_get(port, path)
        assert ctype == "application/json", (path, ctype, body)
        return status, json.loads(body)["error"]

    # A group that does not exist, whose coordinator would be another node: that node says so.
    status, msg = error("/ui/api/group?id=" + missing)
    assert status == 404 and missing in msg and f"node {asked}" in msg, (status, msg)
    status, msg = error("/ui/api/group?id=" + missing + "&scope=local")
    assert status == 404 and f"node {viewer.node_id}" in msg, (status, msg)
    status, msg = error("/ui/api/groups?scope=everything")
    assert status == 400 and "scope" in msg, msg
    status, msg = error("/ui/api/group?id=x&scope=local&scope=cluster")
    assert status == 400 and "more than once" in msg, msg
    status, msg = error("/ui/api/group?id=%zz")
    assert status == 400 and "percent-encoding" in msg, msg
    status, msg = error("/ui/api/group/" + group)
    assert status == 404, msg
    # Still serving: the group, read from its coordinator.
    g = api(port, "/ui/api/group?id=" + group)
    assert g["coordinator"] == coordinator.node_id and g["via_node"] == viewer.node_id
    assert [o["committed"] for o in g["offsets"]] == COMMITTED
    assert any(x["group_id"] == group for x in api(port, "/ui/api/groups")["groups"])


@pytest.mark.timeout(180)
def test_a_silent_leader_loses_only_its_own_partitions_lag_and_scrapes_stay_fast(cluster_factory):
    """The leader of one remote partition is frozen (SIGSTOP): the coordinator's scrapes keep
    answering quickly, every lag they show is exact, the partition led by the other live node
    keeps its lag, and the frozen leader's partition has no lag series until it is back. Its
    session outlasts the test, so it stays the partition's (unfenced) leader: the series goes
    because the lookups at it fail (and are counted), not because the partition lost its leader."""
    c = lag_cluster(cluster_factory, overrides={"broker.session.timeout.ms": "60000"})
    group = group_coordinated_by(c, 1, "silent")
    commit(c.nodes[0], group, COMMITTED)
    coordinator = coordinator_of(c, group, 1)
    frozen, alive = c.nodes[2], c.nodes[0]

    def lag(samples, p):
        return value(samples, "gregor_consumer_group_lag_offsets", group=group, topic=TOPIC,
                     partition=p)

    wait_until(lambda: [lag(scrape(coordinator.metrics_port), p) for p in range(3)] == LAGS, 20,
               "every partition's lag on the coordinator")
    failures = "gregor_consumer_group_remote_high_watermark_failures_total"
    failures_before = value(scrape(coordinator.metrics_port), failures)
    frozen.pause()
    try:
        seen = []  # (seconds the scrape took, [lag per partition]) per scrape

        def frozen_lag_gone():
            started = time.monotonic()
            s = scrape(coordinator.metrics_port)
            seen.append((time.monotonic() - started, [lag(s, p) for p in range(3)]))
            return lag(s, frozen.node_id) is None and lag(s, alive.node_id) == LAGS[alive.node_id]

        wait_until(frozen_lag_gone, 30, "the frozen leader's partition to lose its lag series")
    finally:
        frozen.resume()
    # Every scrape while the leader was frozen was fast and never wrong: a lag shown is the exact
    # one (the frozen leader's cannot grow), and the coordinator's own partition's is always there.
    slow = [took for took, _ in seen if took >= 3]
    assert not slow, f"scrapes took {slow} s while a leader was frozen"
    for _, lags in seen:
        assert all(got in (None, want) for got, want in zip(lags, LAGS)), (lags, LAGS)
        assert lags[1] == LAGS[1], ("the coordinator's own partition", lags)
    # The lag series went because a lookup at the frozen leader failed, and that was counted.
    assert value(scrape(coordinator.metrics_port), failures) > failures_before
    wait_until(lambda: [lag(scrape(coordinator.metrics_port), p) for p in range(3)] == LAGS, 40,
               "every partition's lag once the leader is back")
