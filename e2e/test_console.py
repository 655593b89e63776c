"""The web console under /ui of metrics.listener, in a real browser: headless Chromium (Debian's
`chromium` package) loads the pages from a broker that real clients are using, runs the page's
script, and the test reads the DOM it rendered (`--dump-dom`): a group's members and lag, and a
rebalance timeline with the right generations, joins, departures and moves. Screenshots of each
page are saved under the test's temporary directory (printed on failure) for a human to look at.
Also: the console's JSON API refuses bad input with clear errors and the broker keeps serving."""

import json
import os
import shutil
import subprocess
import time
import urllib.request
from html.parser import HTMLParser

import pytest
from confluent_kafka import Consumer, TopicPartition

from clients import conf, create_topic, produce
from conftest import NotYet, free_port, wait_until
from groups import ConfluentMember, ProcessMember, Timeline
from test_metrics import http_get, raw_exchange

CHROMIUM_NAMES = ("chromium", "chromium-browser")


def chromium():
    for name in CHROMIUM_NAMES:
        path = shutil.which(name)
        if path:
            return path
    pytest.fail("headless Chromium is needed for the console tests: `apt-get install -y chromium` "
                "(scripts/test.sh installs it)", pytrace=False)


class Node:
    def __init__(self, tag, attrs, parent):
        self.tag, self.attrs, self.parent, self.children = tag, dict(attrs), parent, []

    def text(self):
        return "".join(c if isinstance(c, str) else c.text() for c in self.children)

    def walk(self):
        for c in self.children:
            if isinstance(c, Node):
                yield c
                yield from c.walk()

    def find_all(self, tag=None, **attrs):
        return [n for n in self.walk() if (tag is None or n.tag == tag)
                and all(n.attrs.get(k.replace("_", "-")) == v for k, v in attrs.items())]

    def find(self, tag=None, **attrs):
        found = self.find_all(tag, **attrs)
        assert found, f"no <{tag or '*'} {attrs}> in the rendered page"
        return found[0]


VOID = {"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source",
        "track", "wbr"}


class DomBuilder(HTMLParser):
    """The DOM Chromium serialised, as a tree of Node."""

    def __init__(self):
        super().__init__(convert_charrefs=True)
        self.root = Node("#document", {}, None)
        self.cur = self.root

    def handle_starttag(self, tag, attrs):
        n = Node(tag, attrs, self.cur)
        self.cur.children.append(n)
        if tag not in VOID:
            self.cur = n

    def handle_endtag(self, tag):
        n = self.cur
        while n is not self.root and n.tag != tag:
            n = n.parent
        if n is not self.root:
            self.cur = n.parent

    def handle_data(self, data):
        self.cur.children.append(data)


class Browser:
    """Headless Chromium, one process per page load."""

    def __init__(self, workdir):
        self.bin = chromium()
        self.workdir = workdir
        self.shots = workdir / "screenshots"
        self.shots.mkdir(exist_ok=True)

    def _run(self, url, extra, timeout=90):
        argv = [self.bin, "--headless", "--disable-gpu", "--no-first-run",
                "--user-data-dir=" + str(self.workdir / "chromium-profile"),
                # Lets the page's fetches and timers run, then stops: a deterministic point to
                # read the DOM at.
                "--virtual-time-budget=6000", *extra, url]
        if os.geteuid() == 0:
            argv.insert(1, "--no-sandbox")  # Chromium's sandbox refuses to run as root
        # The browser itself crashing on a signal (seen once in a loaded CI run: SIGSEGV, the
        # same page fine when loaded again) says nothing about the console: load it again,
        # twice at most. A non-zero exit is a failure at once.
        for _ in range(3):
            out = subprocess.run(argv, capture_output=True, timeout=timeout, cwd=self.workdir)
            if out.returncode >= 0:
                break
        assert out.returncode == 0, f"chromium failed ({out.returncode}): {out.stderr[-2000:]!r}"
        return out.stdout.decode()

    def dom(self, url):
        b = DomBuilder()
        b.feed(self._run(url, ["--dump-dom"]))
        return b.root

    def screenshot(self, url, name):
        path = self.shots / f"{name}.png"
        self._run(url, [f"--screenshot={path}", "--window-size=1280,1800",
                        "--hide-scrollbars"])
        assert path.stat().st_size > 10_000, f"screenshot {path} is too small to show a page"
        print(f"screenshot: {path}")
        return path


def page(browser, port, fragment):
    """The console page at #`fragment`, once its script has drawn it."""
    root = browser.dom(f"http://127.0.0.1:{port}/ui/#{fragment}")
    main = root.find("main", id="main")
    assert main.attrs.get("data-loaded") == "true", \
        f"the page did not load its data: {main.text()[:500]!r}"
    return main


def api(port, path):
    status, ctype, body = http_get(port, path)
    if status == 404 and "does not exist" in body:
        # A group the coordinator has not loaded yet (or whose partition has no leader yet):
        # a wait retries it, any other caller fails.
        raise NotYet((path, status, body))
    assert status == 200, (path, status, body)
    assert ctype == "application/json", ctype
    return json.loads(body)


def metrics_broker(start_broker):
    port = free_port()
    b = start_broker(overrides={"metrics.listener": f"http://127.0.0.1:{port}"})
    b.metrics_port = port
    return b


def group_settled(port, group, generation, members):
    """The group's console JSON once `generation` completed and the group is Stable with
    `members` members; else None."""
    g = api(port, "/ui/api/group?id=" + group)
    done = [r for r in g["timeline"] if r["generation"] == generation
            and r["status"] == "completed"]
    return g if g["state"] == "Stable" and len(g["members"]) == members and done else None


def completed_generations(g):
    """The generations of the group's timeline that completed, in order."""
    return sorted(r["generation"] for r in g["timeline"] if r["status"] == "completed")


def quiet_generation(port, group, quiet_s):
    """The group's last completed generation once the group stayed Stable on it for
    `quiet_s` seconds; else None."""
    g = api(port, "/ui/api/group?id=" + group)
    before = completed_generations(g)
    if g["state"] != "Stable" or not before:
        return None
    time.sleep(quiet_s)  # deliberate: the group must stay Stable this long, nothing may happen
    g = api(port, "/ui/api/group?id=" + group)
    return before[-1] if g["state"] == "Stable" and completed_generations(g) == before else None


@pytest.mark.timeout(180)
def test_group_members_lag_and_rebalance_timeline_in_a_browser(start_broker, tmp_path):
    b = metrics_broker(start_broker)
    port = b.metrics_port
    browser = Browser(tmp_path)
    topic = create_topic(b, "console-orders", partitions=2)
    group = "console-group"
    produce(b, topic, [{"partition": 0, "value": b"x"} for _ in range(120)]
            + [{"partition": 1, "value": b"y"} for _ in range(45)])
    # A known lag: 50 on partition 0, none on 1 (the members below never commit).
    c = Consumer(conf(b, {"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 70), TopicPartition(topic, 1, 45)],
                 asynchronous=False)
    finally:
        c.close()

    def settled(generation, members):
        return group_settled(port, group, generation, members)

    timeline = Timeline()
    # Client ids are the clients' to choose: this one tries to inject markup into the page.
    evil = 'beta<b id="injected">x</b>'
    alpha = ConfluentMember(b, timeline, "alpha", group, [topic], "range").start()
    wait_until(lambda: settled(1, 1), 30, "generation 1 with alpha")
    beta = ConfluentMember(b, timeline, evil, group, [topic], "range").start()
    wait_until(lambda: settled(2, 2), 30, "generation 2 with alpha and beta")
    beta.stop()
    g = wait_until(lambda: settled(3, 1), 30, "generation 3 after beta left")

    main = page(browser, port, "/group/" + group)
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/group/{group}", "group")
    assert main.find(id="group-id").text() == group
    assert main.find(id="group-state").text() == "Stable"
    assert main.find(id="group-generation").text() == "3"
    assert main.find(id="group-lag").text() == "50"

    # Members: alpha alone, with both partitions and their lag.
    rows = main.find("table", id="members").find_all("tr", data_client_id="alpha")
    members = main.find("table", id="members").find("tbody").find_all("tr")
    assert len(members) == len(rows) == 1, [m.text() for m in members]
    alpha_row = rows[0]
    assert alpha_row.attrs["data-member-id"] == g["members"][0]["member_id"]
    assert alpha_row.find("td", **{"class": "assignment"}).text() == \
        f"{topic}-0, {topic}-1"
    assert alpha_row.find("td", **{"class": "num lag"}).text() == "50"

    # Lag per partition.
    lag = main.find("table", id="lag")
    p0 = lag.find("tr", data_partition="0").find_all("td")
    p1 = lag.find("tr", data_partition="1").find_all("td")
    assert [td.text() for td in p0[:5]] == [topic, "0", "70", "120", "50"]
    assert [td.text() for td in p1[:5]] == [topic, "1", "45", "45", "0"]
    assert p0[5].text().startswith("alpha")
    # A lag of 50 is the group's largest but far under the amber threshold: not coloured. The
    # legend and each cell's tooltip state the rule.
    assert p0[4].attrs["class"] == "num lag", p0[4].attrs
    assert "lag-high" not in alpha_row.find("td", **{"class": "num lag"}).attrs["class"]
    assert "amber from 1,000 records" in p0[4].attrs["title"]
    legend = main.find(id="lag-legend").text()
    assert "1,000" in legend and "100,000" in legend, legend

    # The timeline, newest first: the three generations, who joined and left, what moved.
    items = main.find("ol", id="timeline").find_all("li", data_status="completed")
    gens = [li.attrs["data-generation"] for li in items]
    assert gens == ["3", "2", "1"], gens
    g3, g2, g1 = items
    assert "joined" in g1.text() and "alpha" in g1.text()
    assert "newly assigned to alpha" in g1.text()
    assert "joined" in g2.text() and evil in g2.text()
    # Range over two partitions: partition 1 goes from alpha to beta, then back.
    assert f"{topic}-1 moved from alpha to {evil}" in g2.text(), g2.text()
    assert "revoked from alpha" in g2.text()
    left = g3.find("li", data_cause="left")
    assert evil in left.text() and "LeaveGroup" in left.text()
    assert f"{topic}-1 moved from {evil} to alpha" in g3.text(), g3.text()
    for li in items:
        assert "join phase" in li.text() and "sync phase" in li.text()
    # The client id was shown as text; it did not become an element.
    assert not main.find_all(id="injected")

    # The JSON agrees with the durations the page drew.
    t = {r["generation"]: r for r in g["timeline"]}
    assert t[3]["total_ms"] == t[3]["join_ms"] + t[3]["sync_ms"]
    assert [d["cause"] for d in t[3]["departed"]] == ["left"]
    # The bars share one axis: the longest rebalance fills it, the others are shorter by their
    # own duration (not each scaled to full width), and the page names the axis.
    check_shared_axis(g, main)
    alpha.stop()


def bar_width(r):
    return r["bar"]["join_pct"] + r["bar"]["sync_pct"]


def check_shared_axis(g, main):
    done = [r for r in g["timeline"] if r["status"] == "completed"]
    scale = g["timeline_scale"]
    longest = max(done, key=lambda r: r["total_ms"])
    assert scale["max_ms"] == longest["total_ms"], (scale, done)
    assert abs(bar_width(longest) - 100) < 0.1, longest
    for r in done:
        if r["total_ms"] < longest["total_ms"]:
            assert bar_width(r) < 100, (r["total_ms"], r["bar"], scale)
    label = main.find(id="timeline-scale").text()
    assert scale["kind"] in label and "full width" in label, label


@pytest.mark.timeout(180)
def test_a_frozen_member_is_kicked_after_its_max_poll_interval_and_the_timeline_says_so(
        start_broker, tmp_path):
    """A kafka-python consumer (session.timeout.ms 30 s, max.poll.interval.ms 3 s: the rebalance
    timeout, as for every member of the group) is frozen with SIGSTOP — no heartbeats, no rejoin, no LeaveGroup — and a second
    member joins. The coordinator removes the frozen member when the rebalance timeout runs
    out, long before its session would expire; the new generation forms without it, and the
    console's timeline shows the kick. Thawed, the member finds itself out and joins again."""
    b = metrics_broker(start_broker)
    port = b.metrics_port
    topic = create_topic(b, "kick-topic", partitions=2)
    group = "kick-group"
    timeline = Timeline()
    members = []
    try:
        stuck = ProcessMember(b, timeline, "stuck", group, topic, "kafka-python", "sticky",
                              session_ms=30000, heartbeat_ms=1000, max_poll_ms=3000).start()
        members.append(stuck)
        wait_until(lambda: group_settled(port, group, 1, 1), 30, "generation 1 with stuck")
        # kafka-python may rejoin once more right after its first join (its first metadata
        # refresh; seen under load): freeze it only once the group has been quiet for a while.
        base = wait_until(lambda: quiet_generation(port, group, 2.0), 30, "a quiet group")
        stuck.pause()
        other = ProcessMember(b, timeline, "other", group, topic, "kafka-python", "sticky",
                              session_ms=30000, heartbeat_ms=1000, max_poll_ms=3000).start()
        members.append(other)

        def without_stuck():
            g = api(port, "/ui/api/group?id=" + group)
            ids = [m["client_id"] for m in g["members"]]
            later = completed_generations(g)
            return g if (g["state"] == "Stable" and ids == ["other"]
                         and later and later[-1] > base) else None

        g = wait_until(without_stuck, 30, "a generation without the frozen member")
        kick = next(r for r in g["timeline"] if r["generation"] > base
                    and any(d["member"]["client_id"] == "stuck" for d in r["departed"]))
        assert [(d["member"]["client_id"], d["cause"]) for d in kick["departed"]] == \
            [("stuck", "rebalance timeout")], kick["departed"]
        # The join phase waited the rebalance timeout (the largest any member sent: 3 s) for
        # the frozen member, not its 30 s session.
        assert 3000 <= kick["join_ms"] < 10000, kick

        browser = Browser(tmp_path)
        main = page(browser, port, "/group/" + group)
        browser.screenshot(f"http://127.0.0.1:{port}/ui/#/group/{group}", "kicked")
        item = main.find("ol", id="timeline").find("li", data_generation=str(kick["generation"]))
        # The 3 s kick and the quick rebalances before it on one (log) axis.
        check_shared_axis(api(port, "/ui/api/group?id=" + group), main)
        kicked = item.find("li", data_cause="rebalance timeout")
        assert "kicked (did not rejoin within max.poll.interval.ms)" in kicked.text()
        assert "stuck" in kicked.text()

        stuck.resume()

        def both_back():
            g = api(port, "/ui/api/group?id=" + group)
            later = completed_generations(g)
            return g if (g["state"] == "Stable" and len(g["members"]) == 2
                         and later and later[-1] > kick["generation"]) else None

        wait_until(both_back, 60, "the thawed member back in the group")
    finally:
        for m in members:
            m.cleanup()


@pytest.mark.timeout(120)
def test_brokers_topics_and_groups_pages(start_broker, tmp_path):
    b = metrics_broker(start_broker)
    port = b.metrics_port
    browser = Browser(tmp_path)
    topic = create_topic(b, "console-topic", partitions=3)
    produce(b, topic, [{"partition": i % 3, "value": b"v" * 10} for i in range(30)])
    c = Consumer(conf(b, {"group.id": "listed-group", "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 4)], asynchronous=False)
    finally:
        c.close()

    main = page(browser, port, "/brokers")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/brokers", "brokers")
    row = main.find("table", id="brokers").find("tr", data_broker="1")
    assert "active controller" in row.text() and row.attrs["data-liveness"] == "alive"
    assert f"127.0.0.1:{b.port}" in row.text()
    # The controller card names the node, not a number that reads as a count.
    assert main.find(id="controller-id").text() == "node 1"
    assert main.find(id="brokers-alive").find("b").text() == "1 of 1"

    main = page(browser, port, "/topics")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/topics", "topics")
    section = main.find("section", data_topic=topic)
    parts = section.find("tbody").find_all("tr")
    assert [p.attrs["data-partition"] for p in parts] == ["0", "1", "2"]
    for p in parts:
        cells = [td.text() for td in p.find_all("td")]
        assert cells[1] == "1" and cells[2] == "1" and cells[3] == "1", cells  # leader, replicas, ISR
        assert cells[7] == "10", cells  # high watermark
        assert "under-replicated" not in p.attrs.get("class", "")
    assert main.find("section", data_topic="__consumer_offsets").find(
        "span", **{"class": "badge"}).text() == "internal"

    main = page(browser, port, "/groups")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/groups", "groups")
    # Nothing but the page's parts: no stray text such as "null" above the table.
    strays = [c for c in main.children if isinstance(c, str) and c.strip()]
    assert not strays, strays
    assert not main.find_all(id="unread-nodes")
    row = main.find("table", id="groups").find("tr", data_group="listed-group")
    cells = [td.text() for td in row.find_all("td")]
    assert cells[0] == "listed-group" and cells[1] == "classic", cells
    assert cells[2] == "Empty" and cells[6] == "6", cells


def test_console_api_refuses_bad_input_and_the_broker_keeps_serving(start_broker):
    b = metrics_broker(start_broker)
    port = b.metrics_port

    def error(path):
        status, ctype, body = http_get(port, path)
        assert ctype == "application/json", (path, ctype, body)
        return status, json.loads(body)["error"]

    status, msg = error("/ui/api/group")
    assert status == 400 and "missing parameter id" in msg
    status, msg = error("/ui/api/group?id=%zz")
    assert status == 400 and "percent-encoding" in msg
    status, msg = error("/ui/api/group?id=%ff%fe")
    assert status == 400 and "UTF-8" in msg
    status, msg = error("/ui/api/group?id=a&id=b")
    assert status == 400 and "more than once" in msg
    status, msg = error("/ui/api/group?id=no-such-group")
    assert status == 404 and "no-such-group" in msg
    status, msg = error("/ui/api/secrets")
    assert status == 404
    assert http_get(port, "/ui/nope.js")[0] == 404
    answer = raw_exchange(port, b"DELETE /ui/api/groups HTTP/1.1\r\nHost: x\r\n"
                                b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405"), answer[:80]
    # A page on another site whose name was rebound to this address (DNS rebinding) sends its
    # own name as the Host: refused, while metrics stay scrapeable under any name.
    answer = raw_exchange(port, b"GET /ui/api/groups HTTP/1.1\r\nHost: evil.example:80\r\n"
                                b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 403"), answer[:80]
    assert b"DNS rebinding" in answer
    answer = raw_exchange(port, b"GET /metrics HTTP/1.1\r\nHost: prometheus.internal\r\n"
                                b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 200"), answer[:80]
    # The page itself: served with a policy that allows only its own script and style.
    status, ctype, body = http_get(port, "/ui/")
    assert status == 200 and ctype.startswith("text/html") and "/ui/app.js" in body
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/ui/") as r:
        assert "default-src 'self'" in r.headers["Content-Security-Policy"]
        assert r.headers["X-Content-Type-Options"] == "nosniff"
    # Still serving both listeners.
    assert api(port, "/ui/api/groups")["node_id"] == 1
    topic = create_topic(b, "after-bad-console")
    produce(b, topic, [{"value": b"ok"}])
    assert api(port, "/ui/api/cluster")["topics"]


@pytest.mark.timeout(150)
def test_under_replicated_partition_is_highlighted_and_racks_shown(cluster_factory, tmp_path):
    c = cluster_factory(3, metrics=True, racks=["rack-a", "rack-b", "rack-c"],
                        overrides={"replica.lag.time.max.ms": "1500"})
    nodes = list(c.nodes.values())
    browser = Browser(tmp_path)
    topic = "console-urp"
    deadline = time.monotonic() + 30
    while True:
        err, msg = nodes[0].create_topic(topic, partitions=1, replication_factor=3)
        if err == 0:
            break
        assert err in (7, 41) and time.monotonic() < deadline, f"CreateTopics: {err} {msg}"
        time.sleep(0.2)

    def leader():
        _, parts = nodes[0].metadata([topic])["topics"][topic]
        _, lead, _, isr = parts[0]
        return (lead,) if lead >= 0 and len(isr) == 3 else None

    (lead_id,) = wait_until(leader, 20, "a leader with all three replicas in sync")
    lead = c.nodes[lead_id]
    controller = c.controller()
    follower = next(n for n in nodes if n is not lead and n is not controller)
    port = lead.metrics_port

    def partition():
        t = next(t for t in api(port, "/ui/api/cluster")["topics"] if t["name"] == topic)
        return t["partitions"][0]

    main = page(browser, port, "/brokers")
    for n in nodes:
        row = main.find("table", id="brokers").find("tr", data_broker=str(n.node_id))
        rack = ["rack-a", "rack-b", "rack-c"][n.node_id % 3]
        assert row.find_all("td")[2].text() == rack, row.text()
    assert "active controller" in main.find("tr", data_broker=str(controller.node_id)).text()

    follower.pause()
    try:
        produce(lead, topic, [{"value": b"w"} for _ in range(20)], extra={"acks": "1"})
        wait_until(lambda: partition()["under_replicated"], 30,
                   "the leader to drop the stopped follower from the ISR")
        url = f"http://127.0.0.1:{port}/ui/#/topics"
        main = page(browser, port, "/topics")
        browser.screenshot(url, "topics-under-replicated")
        section = main.find("section", data_topic=topic)
        assert "1 under-replicated" in section.find("h3").text()
        row = section.find("tr", data_partition="0")
        assert row.attrs.get("class") == "under-replicated", row.attrs
        cells = [td.text() for td in row.find_all("td")]
        assert cells[1] == str(lead_id)
        assert str(follower.node_id) in cells[2] and str(follower.node_id) not in cells[3], cells
        assert "under-replicated" in cells[4]
        assert cells[7] == "20", cells  # the leader's high watermark, over the shrunk ISR
    finally:
        follower.resume()
    wait_until(lambda: not partition()["under_replicated"], 40, "the ISR to expand again")
    row = page(browser, port, "/topics").find("section", data_topic=topic).find(
        "tr", data_partition="0")
    assert "under-replicated" not in row.attrs.get("class", "")


def cluster_json(node):
    return api(node.metrics_port, "/ui/api/cluster")


def partitions_of(c, topic):
    t = next((t for t in c["topics"] if t["name"] == topic), None)
    if t is None:
        raise NotYet(f"{topic} not in node {c['node_id']}'s metadata yet")
    return t["partitions"]


def create_assigned(node, topic, assignments):
    deadline = time.monotonic() + 30
    while True:
        err, msg = node.create_topic(topic, partitions=-1, replication_factor=-1,
                                     assignments=assignments)
        if err == 0:
            return
        assert err in (7, 41) and time.monotonic() < deadline, f"CreateTopics: {err} {msg}"
        time.sleep(0.2)


@pytest.mark.timeout(180)
def test_every_node_shows_the_leaders_sizes_and_a_cleanly_stopped_broker_raises_no_alarm(
        cluster_factory, tmp_path):
    """Three voters and a broker-only node 3, a topic with partition p on node p alone: every
    node's Topics page shows the same sizes and offsets for every partition, its leader's (no
    "—" for the partitions it does not host). Node 3, stopped with SIGTERM, is fenced and
    coordinates no group: the Groups page says it was not asked, with no red banner."""
    c = cluster_factory(3, metrics=True, brokers=1)
    nodes = list(c.nodes.values())
    browser = Browser(tmp_path)
    topic = "console-spread"
    create_assigned(nodes[0], topic, [(p, [p]) for p in range(4)])
    counts = [7, 30, 12, 5]
    for n in nodes:
        wait_until(lambda: topic in n.metadata()["topics"], 20, f"{topic} on node {n.node_id}")
    for p, count in enumerate(counts):
        produce(nodes[0], topic, [{"partition": p, "value": b"v" * 20} for _ in range(count)])

    def numbers(node):
        parts = partitions_of(cluster_json(node), topic)
        return [(p["partition"], p["sizes_from"], p["log_start_offset"], p["high_watermark"],
                 p["log_end_offset"], p["size_bytes"]) for p in parts]

    def agreed():
        seen = [numbers(n) for n in nodes]
        return seen[0] if all(s == seen[0] for s in seen) and \
            [x[3] for x in seen[0]] == counts else None

    agreed_numbers = wait_until(agreed, 30, lambda: f"every node showing the leaders' sizes: "
                                f"{[numbers(n) for n in nodes]}")
    for p, leader, start, hw, end, size in agreed_numbers:
        assert (leader, start, end) == (p, 0, counts[p]) and size > 20 * counts[p], agreed_numbers
    main = page(browser, nodes[0].metrics_port, "/topics")
    browser.screenshot(f"http://127.0.0.1:{nodes[0].metrics_port}/ui/#/topics", "topics-cluster")
    for row in main.find("section", data_topic=topic).find("tbody").find_all("tr"):
        cells = [td.text() for td in row.find_all("td")]
        p = int(row.attrs["data-partition"])
        assert cells[7] == str(counts[p]) and cells[8] == str(counts[p]), cells
        assert "—" not in cells[5:], cells

    # A group, so that the Groups page has something to list.
    consumer = Consumer(conf(nodes[0], {"group.id": "spread-group", "enable.auto.commit": False}))
    try:
        consumer.commit(offsets=[TopicPartition(topic, 1, 10)], asynchronous=False)
    finally:
        consumer.close()
    assert nodes[3].stop() == 0
    port = nodes[0].metrics_port

    def node3_noted():
        g = api(port, "/ui/api/groups")
        n3 = next((n for n in g["nodes"] if n["node_id"] == 3), None)
        return g if n3 and n3.get("skipped") else None

    g = wait_until(node3_noted, 30, lambda: f"node 3 noted as not asked: {api(port, '/ui/api/groups')}")
    assert all(n["ok"] for n in g["nodes"]), g["nodes"]
    assert [x["group_id"] for x in g["groups"]] == ["spread-group"], g["groups"]
    main = page(browser, port, "/groups")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/groups", "groups-node3-stopped")
    assert not main.find_all(id="unread-nodes"), main.text()
    assert "node 3 (fenced; it coordinates no group)" in main.find(id="skipped-nodes").text()


@pytest.mark.timeout(180)
def test_brokers_page_after_sigkill(cluster_factory, tmp_path):
    """A node SIGKILLed is shown fenced once the controller fences it, with the partitions it
    held counted under-replicated from the metadata. Then a second node is SIGKILLed: the
    quorum has lost its majority and nothing can fence it, so the metadata keeps it unfenced;
    the page shows it unreachable (its listener refuses connections) and the partitions it leads
    as led by an unreachable broker."""
    c = cluster_factory(3, metrics=True)
    nodes = list(c.nodes.values())
    browser = Browser(tmp_path)
    topic = "console-kill"
    create_assigned(nodes[0], topic, [(0, [0, 1, 2]), (1, [1, 2, 0]), (2, [2, 0, 1])])

    def full_isr(node):
        parts = partitions_of(cluster_json(node), topic)
        return all(len(p["isr"]) == 3 and p["leader"] == p["replicas"][0] for p in parts)

    for n in nodes:
        wait_until(lambda: full_isr(n), 30, f"{topic} fully in sync on node {n.node_id}")
    controller = c.controller()
    first = next(n for n in nodes if n is not controller)
    survivor = next(n for n in nodes if n is not first and n is not controller)
    port = survivor.metrics_port

    first.kill()

    def fenced():
        cj = cluster_json(survivor)
        b = next(b for b in cj["brokers"] if b["id"] == first.node_id)
        return cj if b["liveness"] == "fenced" and cj["summary"]["under_replicated"] == 3 else None

    cj = wait_until(fenced, 20, lambda: f"node {first.node_id} fenced: {cluster_json(survivor)}")
    assert cj["summary"]["alive"] == 2 and cj["summary"]["offline"] == 0, cj["summary"]
    main = page(browser, port, "/brokers")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/brokers", "brokers-after-sigkill")
    row = main.find("tr", data_broker=str(first.node_id))
    assert row.attrs["data-liveness"] == "fenced" and "fenced" in row.text(), row.text()
    assert main.find(id="brokers-alive").find("b").text() == "2 of 3"
    assert main.find(id="under-replicated-count").find("b").text() == "3"
    assert main.find(id="controller-id").text() == f"node {controller.node_id}"

    # The controller next: one voter of three is left, no fencing can be committed.
    controller.kill()

    def unreachable():
        cj = cluster_json(survivor)
        b = next(b for b in cj["brokers"] if b["id"] == controller.node_id)
        return cj if b["liveness"] == "unreachable" else None

    cj = wait_until(unreachable, 20, lambda: f"node {controller.node_id} unreachable: "
                    f"{cluster_json(survivor)}")
    b = next(b for b in cj["brokers"] if b["id"] == controller.node_id)
    assert not b["fenced"] and b["reachability"] == "connection refused", b
    led = [p for p in partitions_of(cj, topic) if p["leader"] == controller.node_id]
    assert cj["summary"]["leader_unreachable"] == len(led), (cj["summary"], led)
    assert cj["summary"]["alive"] == 1, cj["summary"]
    main = page(browser, port, "/brokers")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/brokers", "brokers-quorum-lost")
    row = main.find("tr", data_broker=str(controller.node_id))
    assert row.attrs["data-liveness"] == "unreachable" and "unreachable" in row.text(), row.text()
    assert main.find(id="brokers-alive").find("b").text() == "1 of 3"
    if led:
        assert main.find(id="leader-unreachable-count").find("b").text() == str(len(led))
    # The Groups page does not wait on it either: its listener refuses, so it is not asked.
    g = api(port, "/ui/api/groups")
    n = next(n for n in g["nodes"] if n["node_id"] == controller.node_id)
    assert "refuses connections" in (n.get("skipped") or n.get("error") or ""), n
