"""The console's per-node details in headless Chromium (test_console.py's page objects): a
broker's version and commit (as gregor_build_info exports them), uptime, disk space per data
directory and configs with value and source (sensitive values hidden), a topic's configs on its
details, and another node's details read from that node's console, bounded in time when it
does not answer. Screenshots are saved where test_console.py saves them."""

import re
import time

import pytest

from confluent_kafka import Consumer, TopicPartition

from clients import conf, consume, create_topic, produce
from conftest import free_port, wait_until
from test_console import Browser, api, page
from test_metrics import http_get, scrape, value


def build_info(port):
    """(version, commit) of gregor_build_info on /metrics."""
    _, _, text = http_get(port, "/metrics")
    m = re.search(r'^gregor_build_info\{version="([^"]+)",commit="([^"]+)"\} 1$', text, re.M)
    assert m, "no gregor_build_info in /metrics"
    return m.group(1), m.group(2)


def config_row(main, table_id, name):
    """(value cell text, source) of config `name` in the configs table `table_id`."""
    row = main.find("table", id=table_id).find("tr", data_config=name)
    cells = row.find_all("td")
    return cells[1].text(), row.attrs["data-source"]


@pytest.mark.timeout(120)
def test_broker_details_and_topic_configs_in_a_browser(start_broker, tmp_path):
    port = free_port()
    # Settings of its own: a static config to find, and a secret to hide.
    b = start_broker(overrides={"metrics.listener": f"http://127.0.0.1:{port}",
                                "num.partitions": "2",
                                "ssl.truststore.password": "hunter2-secret"})
    browser = Browser(tmp_path)
    topic = create_topic(b, "configured", partitions=1, config={"retention.ms": "123456789"})
    closed = create_topic(b, "closed", partitions=1)

    d = api(port, "/ui/api/broker?id=1")
    assert d["broker_id"] == 1 and "via_node" not in d
    secret = next(c for c in d["configs"] if c["name"] == "ssl.truststore.password")
    assert secret["sensitive"] and secret["value"] is None
    assert "hunter2" not in http_get(port, "/ui/api/broker?id=1")[2]

    main = page(browser, port, "/broker/1")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/broker/1", "broker-details")
    version, commit = build_info(port)
    assert main.find(id="broker-version").text() == version
    assert main.find(id="broker-commit").attrs["title"] == commit
    uptime = main.find(id="broker-uptime")
    assert int(uptime.attrs["data-ms"]) > 0 and uptime.text() != "—"
    dirs = main.find("table", id="log-dirs").find_all("tr", data_log_dir=str(b.data_dir.absolute()))
    assert len(dirs) == 1, main.find("table", id="log-dirs").text()
    free = dirs[0].find("td", **{"class": "num free"})
    total = dirs[0].find("td", **{"class": "num total"})
    assert free.text() != "—" and total.text() != "—"
    free_b = int(free.attrs["title"].split()[0].replace(",", ""))
    total_b = int(total.attrs["title"].split()[0].replace(",", ""))
    assert 0 < free_b <= total_b
    assert config_row(main, "broker-configs", "num.partitions") == ("2", "STATIC_BROKER_CONFIG")
    assert config_row(main, "broker-configs", "node.id") == ("1", "STATIC_BROKER_CONFIG")
    value, source = config_row(main, "broker-configs", "ssl.truststore.password")
    assert value == "(sensitive, hidden)" and source == "STATIC_BROKER_CONFIG"
    assert config_row(main, "broker-configs", "log.cleaner.threads")[1] == "DEFAULT_CONFIG"
    assert "hunter2" not in main.text()

    # The Brokers page links each broker to its details.
    main = page(browser, port, "/brokers")
    link = main.find("table", id="brokers").find("tr", data_broker="1").find("a")
    assert link.attrs["href"] == "#/broker/1"

    # A topic's configs, on its open details.
    main = page(browser, port, f"/topics?open={topic}")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/topics?open={topic}", "topic-configs")
    section = main.find("section", data_topic=topic)
    configs = section.find("details", data_topic_configs=topic)
    assert "retention.ms" in configs.find("summary").text()
    row = configs.find("tr", data_config="retention.ms")
    assert row.find_all("td")[1].text() == "123456789"
    assert row.attrs["data-source"] == "DYNAMIC_TOPIC_CONFIG"
    assert configs.find("tr", data_config="cleanup.policy").attrs["data-source"] == "DEFAULT_CONFIG"
    # Closed topics' configs are not read.
    assert not main.find("section", data_topic=closed).find_all(
        "details", data_topic_configs=closed)

    # Bad input gets its reason.
    for path, status, words in [
        ("/ui/api/broker?id=x", 400, "broker id"),
        ("/ui/api/broker?id=1&id=2", 400, "more than once"),
        ("/ui/api/broker?id=99", 404, "not registered"),
        ("/ui/api/charts?node=99", 404, "not registered"),
        ("/ui/api/charts?node=x", 400, "broker id"),
        ("/ui/api/topic-configs", 400, "missing parameter topic"),
        ("/ui/api/topic-configs?topic=nope", 404, "does not exist"),
    ]:
        got, _, body = http_get(port, path)
        assert got == status and words in body, (path, got, body)


@pytest.mark.timeout(150)
def test_another_nodes_details_come_from_its_console(cluster_factory, tmp_path):
    c = cluster_factory(3, metrics=True)
    nodes = list(c.nodes.values())
    browser = Browser(tmp_path)
    first, second, third = nodes
    port = first.metrics_port

    def details(node_id):
        return api(port, f"/ui/api/broker?id={node_id}")

    d = wait_until(lambda: details(second.node_id), 20, "node 2's details through node 1")
    assert d["broker_id"] == second.node_id and d["via_node"] == first.node_id
    assert next(x for x in d["configs"] if x["name"] == "node.id")["value"] == str(second.node_id)
    assert d["log_dirs"][0]["path"] == str(second.data_dir.absolute())

    main = page(browser, port, f"/broker/{second.node_id}")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/broker/{second.node_id}", "broker-details-peer")
    assert main.find(id="broker-id").text() == str(second.node_id)
    assert config_row(main, "broker-configs", "node.id") == (str(second.node_id),
                                                             "STATIC_BROKER_CONFIG")
    assert f"Read by node {first.node_id} from node {second.node_id}'s console" in main.text()

    # Its charts too, from its console.
    charts = api(port, f"/ui/api/charts?node={second.node_id}")
    assert charts["node_id"] == second.node_id and charts["via_node"] == first.node_id
    assert sorted(charts["brokers"]) == sorted(n.node_id for n in nodes)

    # A node answers only for itself when asked for its own view.
    got, _, body = http_get(port, f"/ui/api/broker?id={second.node_id}&scope=local")
    assert got == 409 and f"not node {second.node_id}" in body, (got, body)

    # A frozen node (its sockets still accept) costs the page a bounded wait and a reason.
    assert details(third.node_id)["broker_id"] == third.node_id
    third.pause()
    try:
        started = time.monotonic()
        got, _, body = http_get(port, f"/ui/api/broker?id={third.node_id}", timeout=15)
        took = time.monotonic() - started
        assert got == 502 and f"node {third.node_id}" in body, (got, body)
        assert took < 6, f"waited {took:.1f} s for a frozen node"
        main = browser.dom(f"http://127.0.0.1:{port}/ui/#/broker/{third.node_id}").find(
            "main", id="main")
        assert main.attrs.get("data-loaded") == "error"
        assert "did not answer" in main.find(id="error").text()
    finally:
        third.resume()


def chart(d, chart_id):
    return next(c for c in d["charts"] if c["id"] == chart_id)


def points(d, chart_id, name):
    s = next((s for s in chart(d, chart_id)["series"] if s["name"] == name), None)
    return s["points"] if s else []


def bytes_of_rates(d, chart_id, name, first_ms):
    """The bytes a per-second series stands for: each point's rate times the time since the
    sample before it. Samples are 10 s apart plus up to a 1 s tick, so `rate * 10` may fall
    short by 10 %; every sample after `first_ms` (one seen before the traffic) adds an
    ISR-changes point, which gives the sample times."""
    times = [first_ms] + [t for t, _ in points(d, "isr_changes", "shrinks")]
    return sum(v * (t - max(x for x in times if x < t)) / 1000
               for t, v in points(d, chart_id, name))


@pytest.mark.timeout(150)
def test_charts_over_time_in_a_browser(start_broker, tmp_path):
    port = free_port()
    b = start_broker(overrides={"metrics.listener": f"http://127.0.0.1:{port}"})
    browser = Browser(tmp_path)
    topic = create_topic(b, "charted", partitions=1)
    # After a first sample, so that the next one sees the bytes as a rate.
    first_ms = wait_until(lambda: api(port, "/ui/api/charts")["last_sample_ms"], 20,
                          "a first sample")
    produce(b, topic, [{"value": b"x" * 1000} for _ in range(50)])
    c = Consumer(conf(b, {"group.id": "charted-group", "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
    finally:
        c.close()

    # Samples every 10 s: a rate needs two of them after the traffic.
    def sampled():
        d = api(port, "/ui/api/charts")
        rates = [p[1] for p in points(d, "bytes_in", topic)]
        lag = points(d, "group_lag", "charted-group")
        return d if rates and max(rates) > 0 and lag else None

    d = wait_until(sampled, 40, lambda: "a bytes-in rate and the group's lag in the charts: "
                   + str({c["id"]: c["series"] for c in api(port, "/ui/api/charts")["charts"]
                          if c["id"] in ("bytes_in", "group_lag")}))
    assert d["sample_every_ms"] == 10_000 and d["window_ms"] == 3_600_000
    assert d["max_series"] > 0
    # 50 records of 1,000 value bytes in one sample's interval.
    assert bytes_of_rates(d, "bytes_in", topic, first_ms) >= 50_000
    assert points(d, "group_lag", "charted-group")[-1][1] == 30
    # Time lag: the age of record 20, the oldest the group has not consumed (node 1 leads it).
    time_lag = points(d, "group_time_lag", "charted-group")
    assert time_lag and 0 < time_lag[-1][1] < 120_000, time_lag
    assert points(d, "request_latency", "Produce")
    assert {s["name"] for s in chart(d, "isr_changes")["series"]} == {"shrinks", "expands"}

    main = page(browser, port, "/charts")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/charts", "charts")
    assert main.find(id="charts-node").text() == "1"
    section = main.find("section", data_chart="bytes_in")
    item = section.find("li", data_series=topic)
    assert int(item.attrs["data-points"]) >= 1 and "bytes/s" in item.text()
    assert section.find("svg").find_all(data_series=topic), "no line drawn for the topic"
    lag = main.find("section", data_chart="group_lag").find("li", data_series="charted-group")
    assert "30 records" in lag.text()
    assert main.find("section", data_chart="request_latency").find_all("li", data_series="Produce")
    assert "sampled every 10 s" in main.find(id="charts-source").text()


@pytest.mark.timeout(150)
def test_bytes_out_per_topic_counts_consumers_not_followers(cluster_factory, tmp_path):
    c = cluster_factory(2, metrics=True)
    leader = c.nodes[0]
    port = leader.metrics_port
    topic = "read-out"
    # Node 0 leads (first replica); node 1 fetches every byte from it as a follower.
    err, msg = leader.create_topic(topic, -1, -1, assignments=[(0, [0, 1])])
    assert err == 0, msg

    def led_by_node_0():
        partitions = leader.metadata([topic])["topics"].get(topic, (0, {}))[1]
        return partitions.get(0, (0, -1))[1] == 0

    wait_until(led_by_node_0, 20, "node 0 to lead the topic")
    # After a first sample, so that the next one sees the bytes as a rate.
    first_ms = wait_until(lambda: api(port, "/ui/api/charts")["last_sample_ms"], 20,
                          "a first sample")
    produce(leader, topic, [{"value": b"x" * 1000} for _ in range(50)])
    assert len(consume(leader, topic, [0], 50)) == 50
    read_ms = time.time() * 1000

    def sampled():
        d = api(port, "/ui/api/charts")
        return d if d["last_sample_ms"] > read_ms and points(d, "bytes_out", topic) else None

    d = wait_until(sampled, 40, lambda: "a bytes-out sample after the read: "
                   + str(chart(api(port, "/ui/api/charts"), "bytes_out")["series"]))
    # The consumer read the 50 KB once. The follower fetched them from the leader too, and
    # that is not bytes out: counted, the chart would stand for about 100 KB.
    replicated = value(scrape(port), "gregor_topic_replication_bytes_out_total", topic=topic)
    assert replicated >= 50_000, replicated
    out = bytes_of_rates(d, "bytes_out", topic, first_ms)
    assert 50_000 <= out <= 50_000 * 1.5, (out, points(d, "bytes_out", topic))

    main = page(Browser(tmp_path), port, "/charts")
    item = main.find("section", data_chart="bytes_out").find("li", data_series=topic)
    assert int(item.attrs["data-points"]) >= 1 and "bytes/s" in item.text()
