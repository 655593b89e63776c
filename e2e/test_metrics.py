"""metrics.listener: /metrics scraped during real-client workloads and checked for the right values
(bytes and records in and out, a known consumer lag that `gregor groups --describe` agrees with,
a known number of rebalances, an under-replicated partition while a follower is stopped), the
/healthz and /readyz endpoints, and bad input on the HTTP listener."""

import re
import socket
import subprocess
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, TopicPartition

import kwire
from clients import conf, consume, create_topic, produce
from conftest import free_port, wait_until
from groups import ConfluentMember, Timeline

SAMPLE = re.compile(r'^([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)$')
LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')


def http_get(port, path, timeout=5):
    """(status, content type, body) of GET http://127.0.0.1:port/path."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout) as r:
            return r.status, r.headers.get("Content-Type"), r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers.get("Content-Type"), e.read().decode()


def parse(text):
    """Samples of an OpenMetrics text: [(name, {labels}, value)]."""
    lines = text.splitlines()
    assert lines and lines[-1] == "# EOF", "an OpenMetrics exposition ends with # EOF"
    out = []
    for line in lines:
        if not line or line.startswith("#"):
            continue
        m = SAMPLE.match(line)
        assert m, f"not a sample line: {line!r}"
        labels = dict(LABEL.findall(m.group(2) or ""))
        out.append((m.group(1), labels, float(m.group(3))))
    return out


def scrape(port):
    status, ctype, body = http_get(port, "/metrics")
    assert status == 200, body
    assert ctype.startswith("application/openmetrics-text"), ctype
    return parse(body)


def value(samples, name, **labels):
    """The sum of the samples named `name` whose labels include `labels`; None if there is none."""
    found = [v for n, ls, v in samples
             if n == name and all(ls.get(k) == str(w) for k, w in labels.items())]
    return sum(found) if found else None


def metrics_broker(start_broker, **overrides):
    port = free_port()
    b = start_broker(overrides={"metrics.listener": f"http://127.0.0.1:{port}", **overrides})
    b.metrics_port = port
    return b


def test_bytes_and_records_in_and_out_match_the_workload(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "metered")
    n = 500
    produce(b, topic, [{"value": b"v" * (i % 97 + 1), "key": str(i).encode()} for i in range(n)])
    got = consume(b, topic, [0], n)
    assert len(got) == n

    samples = scrape(b.metrics_port)
    bytes_in = value(samples, "gregor_topic_bytes_in_total", topic=topic)
    # Every appended byte is in the log, and nothing else is (no retention ran).
    assert bytes_in == value(samples, "gregor_log_size_bytes", topic=topic, partition=0)
    assert bytes_in > n * 50
    assert value(samples, "gregor_topic_messages_in_total", topic=topic) == n
    assert value(samples, "gregor_log_end_offset", topic=topic, partition=0) == n
    assert value(samples, "gregor_partition_high_watermark", topic=topic, partition=0) == n
    # The consumer read every batch once, from the start.
    assert value(samples, "gregor_topic_bytes_out_total", topic=topic) == bytes_in
    assert value(samples, "gregor_topic_messages_out_total", topic=topic) == n
    # Requests, their latencies and the broker's own state.
    assert value(samples, "gregor_requests_total", api="Produce") >= 1
    assert value(samples, "gregor_request_duration_seconds_count", api="Produce") == \
        value(samples, "gregor_requests_total", api="Produce")
    assert value(samples, "gregor_request_duration_seconds_bucket", api="Fetch", le="+Inf") >= 1
    assert value(samples, "gregor_controller_active") == 1
    assert value(samples, "gregor_partitions") >= 1
    assert value(samples, "gregor_leader_partitions") == value(samples, "gregor_partitions")
    assert value(samples, "gregor_under_replicated_partitions") == 0
    assert value(samples, "gregor_connections") >= 0
    # acks=all produces wait for fdatasyncs: each is timed, and appends were made durable.
    assert value(samples, "gregor_log_flush_duration_seconds_count") >= 1
    assert value(samples, "gregor_log_flush_batch_appends_sum") >= 1
    assert value(samples, "gregor_purgatory_size", kind="produce") == 0


def test_request_errors_are_counted_by_api_and_code(start_broker):
    b = metrics_broker(start_broker, **{"auto.create.topics.enable": "false"})
    c = Consumer(conf(b, {"group.id": "errs"}))
    try:
        # A missing topic: the broker answers UNKNOWN_TOPIC_OR_PARTITION in the ListOffsets.
        with pytest.raises(Exception):
            c.get_watermark_offsets(TopicPartition("no-such-topic", 0), timeout=5)
    finally:
        c.close()
    samples = scrape(b.metrics_port)
    errors = [(ls["api"], ls["error"]) for n, ls, v in samples
              if n == "gregor_request_errors_total" and v > 0]
    assert any(e == "UNKNOWN_TOPIC_OR_PARTITION" for _, e in errors), errors


def describe_offsets(b, group):
    out = subprocess.run([b.bin, "groups", "--bootstrap-server", b.bootstrap, "--describe",
                          "--group", group], capture_output=True, text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    rows = {}
    lines = [l.split() for l in out.stdout.splitlines() if l.strip()]
    header = lines[0]
    assert header[:6] == ["GROUP", "TOPIC", "PARTITION", "CURRENT-OFFSET", "LOG-END-OFFSET", "LAG"]
    for cols in lines[1:]:
        rows[(cols[1], int(cols[2]))] = (int(cols[3]), int(cols[4]), int(cols[5]))
    return rows


def test_consumer_lag_is_exported_and_agrees_with_groups_describe(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "lagged", partitions=2)
    n0, n1, m0, m1 = 120, 45, 70, 45
    produce(b, topic, [{"partition": 0, "value": b"x"} for _ in range(n0)]
            + [{"partition": 1, "value": b"y"} for _ in range(n1)])
    c = Consumer(conf(b, {"group.id": "lag-group", "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, m0), TopicPartition(topic, 1, m1)],
                 asynchronous=False)
    finally:
        c.close()

    samples = scrape(b.metrics_port)
    lag = lambda p: value(samples, "gregor_consumer_group_lag_offsets", group="lag-group",
                          topic=topic, partition=p)
    assert lag(0) == n0 - m0
    assert lag(1) == n1 - m1 == 0
    assert value(samples, "gregor_consumer_group_committed_offset", group="lag-group",
                 topic=topic, partition=0) == m0
    assert value(samples, "gregor_consumer_group_lag_sum_offsets", group="lag-group") == n0 - m0
    assert value(samples, "gregor_groups", state="Empty") >= 1

    # The CLI computes the same numbers from ListOffsets and OffsetFetch.
    rows = describe_offsets(b, "lag-group")
    assert rows[(topic, 0)] == (m0, n0, lag(0))
    assert rows[(topic, 1)] == (m1, n1, lag(1))

    # More records: the lag grows by as many.
    produce(b, topic, [{"partition": 0, "value": b"z"} for _ in range(10)])
    samples = scrape(b.metrics_port)
    assert lag(0) == n0 + 10 - m0
    assert describe_offsets(b, "lag-group")[(topic, 0)] == (m0, n0 + 10, n0 + 10 - m0)


def commit(b, group, topic, offsets):
    c = Consumer(conf(b, {"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def test_consumer_time_lag_is_the_age_of_the_first_unconsumed_record(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "aged")
    now_ms = int(time.time() * 1000)
    # Two batches (two producers): records made 90 s ago, then records made 1 s ago.
    produce(b, topic, [{"value": b"old", "timestamp": now_ms - 90_000} for _ in range(5)])
    produce(b, topic, [{"value": b"new", "timestamp": now_ms - 1_000} for _ in range(5)])
    age = lambda: value(scrape(b.metrics_port), "gregor_consumer_group_lag_seconds",
                        group="aged-group", topic=topic, partition=0)
    commit(b, "aged-group", topic, {0: 0})
    assert 90 <= age() < 90 + 30
    commit(b, "aged-group", topic, {0: 5})
    assert 1 <= age() < 30
    # Nothing left to consume: no time lag.
    commit(b, "aged-group", topic, {0: 10})
    assert age() is None
    assert value(scrape(b.metrics_port), "gregor_consumer_group_lag_offsets",
                 group="aged-group", topic=topic, partition=0) == 0


def group_metric(port, name, group):
    return value(scrape(port), name, group=group)


def test_rebalances_are_counted_per_group(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "rebalanced", partitions=4)
    group = "counted"
    timeline = Timeline()
    port = b.metrics_port

    def stable_at(generation):
        s = scrape(port)
        return (value(s, "gregor_group_generation", group=group) == generation
                and value(s, "gregor_group_rebalance_in_progress", group=group) == 0)

    a = ConfluentMember(b, timeline, "a", group, [topic], "range").start()
    wait_until(lambda: stable_at(1), 30, "generation 1 with one member")
    m2 = ConfluentMember(b, timeline, "b", group, [topic], "range").start()
    wait_until(lambda: stable_at(2), 30, "generation 2 after a second member joined")
    assert group_metric(port, "gregor_group_members", group) == 2
    m2.stop()
    wait_until(lambda: stable_at(3), 30, "generation 3 after a member left")
    s = scrape(port)
    assert value(s, "gregor_group_members", group=group) == 1
    # Three rebalances (first join, a join, a leave), each to a new generation, all finished.
    assert value(s, "gregor_group_rebalances_total", group=group) == 3
    assert value(s, "gregor_group_rebalances_completed_total", group=group) == 3
    total = value(s, "gregor_group_rebalance_seconds_total", group=group)
    last = value(s, "gregor_group_last_rebalance_duration_seconds", group=group)
    assert 0 <= last <= total < 60
    assert value(s, "gregor_groups", state="Stable") >= 1
    a.stop()


def cluster_scrape(node):
    return scrape(node.metrics_port)


@pytest.mark.timeout(150)
def test_under_replicated_partition_while_a_follower_is_stopped(cluster_factory):
    c = cluster_factory(3, metrics=True, overrides={"replica.lag.time.max.ms": "1500"})
    nodes = list(c.nodes.values())
    topic = "urp"
    deadline = time.monotonic() + 30
    while True:
        # Retried while the new cluster's brokers are still being unfenced.
        err, msg = nodes[0].create_topic(topic, partitions=1, replication_factor=3)
        if err == 0:
            break
        assert err in (7, 41), f"CreateTopics {topic}: {err} {msg}"
        assert time.monotonic() < deadline, f"CreateTopics {topic} kept failing: {err} {msg}"
        time.sleep(0.2)

    def leader():
        _, parts = nodes[0].metadata([topic])["topics"][topic]
        _, leader, replicas, isr = parts[0]
        # A tuple: node 0 may lead, and wait_until waits for a truthy value.
        return (leader,) if leader >= 0 and len(isr) == 3 else None

    (lead_id,) = wait_until(leader, 20, "a leader for the topic")
    lead = c.nodes[lead_id]
    controller = c.controller()
    follower = next(n for n in nodes if n is not lead and n is not controller)

    def urp(node):
        return value(cluster_scrape(node), "gregor_partition_under_replicated", topic=topic,
                     partition=0)

    wait_until(lambda: urp(lead) == 0, 20, "the partition fully replicated")
    # ISR changes are counted by the partition's leader as it applies them from the metadata log
    # (not from the controller's answer, which an election the pause causes can lose); summed
    # over the nodes, a leadership move (the controller's preferred-leader election) does not
    # hide them.
    def isr_changes(kind):
        # (The stopped follower cannot answer a scrape; it leads nothing.)
        return sum(value(cluster_scrape(n), f"gregor_isr_{kind}_total") for n in nodes
                   if n is not follower)

    shrinks_before = isr_changes("shrinks")
    expands_before = isr_changes("expands")
    follower.pause()
    try:
        produce(lead, topic, [{"value": b"w"} for _ in range(20)], extra={"acks": "1"})
        wait_until(lambda: urp(lead) == 1, 30, "the leader to report the partition under-replicated")
        s = cluster_scrape(lead)
        assert value(s, "gregor_under_replicated_partitions") >= 1
        assert isr_changes("shrinks") >= shrinks_before + 1
    finally:
        follower.resume()
    wait_until(lambda: urp(lead) == 0, 40, "the partition back to fully replicated after SIGCONT")
    assert isr_changes("expands") >= expands_before + 1
    # Exactly one active controller across the cluster (once an election the pause may have
    # caused has settled).
    wait_until(lambda: sum(value(cluster_scrape(n), "gregor_controller_active") for n in nodes)
               == 1, 20, "exactly one node reporting itself the active controller")


def test_log_start_offset_follows_delete_records(start_broker):
    from confluent_kafka.admin import AdminClient
    b = metrics_broker(start_broker)
    create_topic(b, "lso", partitions=1)
    produce(b, "lso", [{"partition": 0, "value": b"%d" % i} for i in range(10)])
    lso = lambda: value(scrape(b.metrics_port), "gregor_log_start_offset",  # noqa: E731
                        topic="lso", partition=0)
    assert lso() == 0
    tp = TopicPartition("lso", 0, 4)
    adm = AdminClient({"bootstrap.servers": b.bootstrap})
    assert adm.delete_records([tp])[tp].result(timeout=20).low_watermark == 4
    assert lso() == 4


def cluster_sum(nodes, name, **labels):
    """A cluster-wide gauge summed over `nodes` (the active controller alone reports it)."""
    return sum(value(cluster_scrape(n), name, **labels) or 0 for n in nodes)


@pytest.mark.timeout(180)
def test_controller_and_follower_gauges_while_a_follower_lags_and_a_leader_dies(cluster_factory):
    """A partition at RF 2 and min.insync.replicas=2 on the two nodes that are not the active
    controller, and one at RF 1 on the follower's node:
    - every node's applied metadata index grows with each change;
    - the leader counts the bytes its follower fetches;
    - the follower paused: the leader reports the partition under min ISR;
    - resumed under a tight leader-side replication throttle, the follower reports how far it
      trails the high watermark, and stops trailing once the throttle is lifted;
    - the follower's node SIGKILLed: the controller counts it fenced (still registered) and its
      RF-1 partition offline, until it is back."""
    from test_reassign_cli import gregor

    c = cluster_factory(3, metrics=True, overrides={"replica.lag.time.max.ms": "1500"})
    nodes = list(c.nodes.values())
    ctrl = c.controller()
    lead, follower = [n for n in nodes if n is not ctrl]
    wait_until(lambda: (cluster_sum(nodes, "gregor_controller_registered_brokers"),
                        cluster_sum(nodes, "gregor_controller_fenced_brokers"),
                        cluster_sum(nodes, "gregor_controller_offline_partitions")) == (3, 0, 0),
               20, "3 brokers registered, none fenced, nothing offline")
    applied = {n.node_id: value(cluster_scrape(n), "gregor_metadata_applied_index") for n in nodes}
    assert all(i > 0 for i in applied.values()), applied

    for name, replicas, configs in (
            ("lagging", [lead.node_id, follower.node_id],
             {"min.insync.replicas": "2", "leader.replication.throttled.replicas": "*"}),
            ("solo", [follower.node_id], {})):
        err, msg = kwire_create(ctrl, name, replicas, configs)
        assert err == 0, (name, err, msg)
    wait_until(lambda: all(value(cluster_scrape(n), "gregor_metadata_applied_index")
                           > applied[n.node_id] for n in nodes), 20,
               "every node to apply the topics' creation")

    def lagging(node, name):
        return value(cluster_scrape(node), name, topic="lagging", partition=0)

    wait_until(lambda: lagging(lead, "gregor_partition_under_replicated") == 0, 20, "ISR of 2")
    assert lagging(lead, "gregor_partition_under_min_isr") == 0
    produce(lead, "lagging", [{"partition": 0, "value": b"x" * 1000} for _ in range(10)])
    # acks=all: the follower fetched the 10 records' bytes before they were acknowledged.
    assert value(cluster_scrape(lead), "gregor_topic_replication_bytes_out_total",
                 topic="lagging") >= 10 * 1000

    follower.pause()
    try:
        wait_until(lambda: lagging(lead, "gregor_partition_under_min_isr") == 1, 20,
                   "the leader to report the partition under min ISR")
        assert value(cluster_scrape(lead), "gregor_under_min_isr_partitions") >= 1
        # More than the one fetch a throttle lets through at once (replica.fetch.max.bytes).
        produce(lead, "lagging", [{"partition": 0, "value": b"y" * 10000} for _ in range(300)],
                extra={"acks": "1"})
        gregor(ctrl, "configs", "--alter", "--entity-type", "brokers", "--entity-name",
               str(lead.node_id), "--add-config", "leader.replication.throttled.rate=10000")
    finally:
        follower.resume()
    wait_until(lambda: (lagging(follower, "gregor_replica_lag_offsets") or 0) > 0, 20,
               "the throttled follower to report its lag")
    gregor(ctrl, "configs", "--alter", "--entity-type", "brokers", "--entity-name",
           str(lead.node_id), "--delete-config", "leader.replication.throttled.rate")
    wait_until(lambda: lagging(follower, "gregor_replica_lag_offsets") == 0
               and lagging(lead, "gregor_partition_under_min_isr") == 0, 30,
               "the follower caught up and back in the ISR")
    assert value(cluster_scrape(lead), "gregor_under_min_isr_partitions") == 0

    follower.kill()
    live = [ctrl, lead]
    wait_until(lambda: (cluster_sum(live, "gregor_controller_fenced_brokers"),
                        cluster_sum(live, "gregor_controller_offline_partitions"),
                        cluster_sum(live, "gregor_controller_registered_brokers")) == (1, 1, 3),
               20, "the killed broker fenced (still registered) and its partition offline")
    follower.start()
    follower.wait_ready()
    wait_until(lambda: (cluster_sum(nodes, "gregor_controller_fenced_brokers"),
                        cluster_sum(nodes, "gregor_controller_offline_partitions")) == (0, 0),
               20, "nothing fenced or offline once the broker is back")


def kwire_create(node, name, replicas, configs):
    with kwire.Conn("127.0.0.1", node.port, timeout=35) as c:
        return kwire.create_topic(c, name, -1, -1, configs=configs,
                                  assignments=[(0, replicas)])


@pytest.mark.timeout(120)
def test_readyz_is_false_until_the_broker_registers(tmp_path):
    from cluster import Cluster
    c = Cluster(tmp_path, 3, metrics=True)
    first = c.nodes[0]
    try:
        # One voter of three has no quorum: it runs but cannot register.
        first.start()
        wait_until(lambda: http_get(first.metrics_port, "/healthz")[0] == 200, 20,
                   "/healthz to answer while the broker starts")
        status, _, body = http_get(first.metrics_port, "/readyz")
        assert status == 503, body
        assert "not registered" in body or "starting" in body, body
        assert http_get(first.metrics_port, "/metrics")[0] == 503
        for n in list(c.nodes.values())[1:]:
            n.start()
        wait_until(lambda: http_get(first.metrics_port, "/readyz")[0] == 200, 40,
                   "/readyz once registered and unfenced")
        assert http_get(first.metrics_port, "/readyz")[2] == "ready\n"
        for n in c.nodes.values():
            n.wait_ready()
            assert http_get(n.metrics_port, "/readyz")[0] == 200
    finally:
        problems = c.stop()
    assert not problems, problems


def raw_exchange(port, payload, timeout=5):
    """Sends raw bytes to the HTTP listener; returns what it answered before closing."""
    with socket.create_connection(("127.0.0.1", port), timeout=timeout) as s:
        try:
            s.sendall(payload)
        except OSError:
            pass  # the server may close before reading everything
        got = b""
        try:
            while True:
                chunk = s.recv(65536)
                if not chunk:
                    break
                got += chunk
        except (socket.timeout, ConnectionResetError):
            pass
        return got


def test_bad_http_input_leaves_the_broker_serving(start_broker):
    b = metrics_broker(start_broker)
    port = b.metrics_port
    assert http_get(port, "/healthz") == (200, "text/plain; charset=utf-8", "ok\n")
    assert http_get(port, "/readyz")[:1] == (200,)
    assert http_get(port, "/nope")[0] == 404
    assert http_get(port, "/metrics/../../etc/passwd")[0] == 404
    # Not HTTP at all.
    answer = raw_exchange(port, b"\x00\x01\x02garbage\r\n\r\n")
    assert answer == b"" or answer.startswith(b"HTTP/1.1 400"), answer[:80]
    # A request head larger than the listener takes.
    huge = b"GET /metrics HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 200_000 + b"\r\n\r\n"
    answer = raw_exchange(port, huge)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431"), answer[:80]
    # A method the listener does not serve.
    answer = raw_exchange(port, b"POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n"
                                b"Connection: close\r\n\r\n")
    assert answer.startswith(b"HTTP/1.1 405"), answer[:80]
    # A client that connects and says nothing does not block others.
    idle = socket.create_connection(("127.0.0.1", port))
    try:
        assert http_get(port, "/metrics")[0] == 200
    finally:
        idle.close()
    # Still serving, on both listeners.
    samples = scrape(port)
    assert value(samples, "gregor_controller_active") == 1
    topic = create_topic(b, "after-bad-http")
    produce(b, topic, [{"value": b"ok"}])
    assert len(consume(b, topic, [0], 1)) == 1


def test_process_build_disk_raft_and_request_size_families(start_broker):
    """Every family a stock Prometheus or Kafka dashboard looks for besides Gregor's own: the
    standard process_* series, build info, the data directory's disk, the quorum, and requests
    by Kafka's request name with their sizes and queue time."""
    b = metrics_broker(start_broker)
    started = time.time()
    topic = create_topic(b, "sized")
    produce(b, topic, [{"value": b"x" * 1000} for _ in range(50)])
    assert len(consume(b, topic, [0], 50)) == 50
    s = scrape(b.metrics_port)

    assert value(s, "process_cpu_seconds_total") > 0
    assert value(s, "process_resident_memory_bytes") > 1 << 20
    open_fds, max_fds = value(s, "process_open_fds"), value(s, "process_max_fds")
    assert 0 < open_fds <= max_fds
    # The broker process started within this test, not at boot or in the future.
    assert started - 120 < value(s, "process_start_time_seconds") <= time.time() + 1
    (build,) = [ls for n, ls, v in s if n == "gregor_build_info" and v == 1]
    assert re.fullmatch(r"[0-9a-f]{40}|unknown", build["commit"]), build
    assert re.fullmatch(r"\d+\.\d+\.\d+.*", build["version"]), build
    # The runtime's workers served the produce and consume above, and were never busier than
    # all of them for the whole life of the process.
    workers = value(s, "gregor_runtime_workers")
    busy = value(s, "gregor_runtime_worker_busy_seconds_total")
    alive = time.time() - value(s, "process_start_time_seconds") + 1
    assert workers >= 1 and 0 < busy <= workers * alive, (workers, busy, alive)
    assert value(s, "gregor_runtime_global_queue_depth") >= 0

    (disk,) = [ls for n, ls, v in s if n == "gregor_log_dir_free_bytes"]
    assert disk["log_dir"].startswith(str(b.data_dir)), (disk, b.data_dir)
    free = value(s, "gregor_log_dir_free_bytes")
    assert 0 < free <= value(s, "gregor_log_dir_total_bytes", log_dir=disk["log_dir"])

    assert value(s, "gregor_raft_current_leader") == b.node_id
    assert value(s, "gregor_raft_current_epoch") >= 1
    assert value(s, "gregor_controller_preferred_replica_imbalance") == 0

    # A single node has no followers: its fetches are all consumers'.
    assert value(s, "gregor_fetch_requests_total", request="FetchConsumer") >= 1
    assert value(s, "gregor_fetch_requests_total", request="FetchFollower") is None
    assert value(s, "gregor_fetch_requests_total") == value(s, "gregor_requests_total", api="Fetch")
    assert value(s, "gregor_fetch_request_duration_seconds_count", request="FetchConsumer") >= 1
    produces = value(s, "gregor_requests_total", api="Produce")
    assert value(s, "gregor_request_size_bytes_count", request="Produce") == produces
    assert value(s, "gregor_response_size_bytes_count", request="Produce") == produces
    assert value(s, "gregor_request_queue_time_seconds_count", request="Produce") == produces
    # 50 KB of values went in, and out to the consumer.
    assert value(s, "gregor_request_size_bytes_sum", request="Produce") > 50_000
    assert value(s, "gregor_response_size_bytes_sum", request="FetchConsumer") > 50_000
    assert value(s, "gregor_request_size_bytes_count", request="Metadata") >= 1


def partition_topics(samples, name):
    return {ls["topic"] for n, ls, v in samples if n == name}


def test_per_partition_series_leave_internal_topics_out_by_default(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "visible")
    produce(b, topic, [{"value": b"v"}])
    # A group's commit creates __consumer_offsets on this broker.
    c = Consumer(conf(b, {"group.id": "g-default", "auto.offset.reset": "earliest"}))
    try:
        c.assign([TopicPartition(topic, 0, 1)])
        c.commit(offsets=[TopicPartition(topic, 0, 1)], asynchronous=False)
    finally:
        c.close()
    s = scrape(b.metrics_port)
    assert partition_topics(s, "gregor_log_size_bytes") == {topic}
    assert partition_topics(s, "gregor_consumer_group_committed_offset") == {topic}
    # The counts still cover the internal topic's partitions.
    assert value(s, "gregor_partitions") > 1


def test_per_partition_series_follow_metrics_partition_topics(start_broker):
    b = metrics_broker(start_broker, **{"metrics.partition.topics": "kept-.*|__consumer_offsets"})
    for t in ("kept-a", "dropped"):
        create_topic(b, t)
        produce(b, t, [{"value": b"v"}])
    c = Consumer(conf(b, {"group.id": "g-filter"}))
    try:
        offsets = [TopicPartition(t, 0, 1) for t in ("kept-a", "dropped")]
        c.commit(offsets=offsets, asynchronous=False)
    finally:
        c.close()
    s = scrape(b.metrics_port)
    assert partition_topics(s, "gregor_log_end_offset") == {"kept-a", "__consumer_offsets"}
    assert partition_topics(s, "gregor_partition_under_replicated") == \
        {"kept-a", "__consumer_offsets"}
    assert partition_topics(s, "gregor_consumer_group_committed_offset") == {"kept-a"}
    # The group's total lag counts every partition it committed, shown or not.
    assert value(s, "gregor_consumer_group_lag_sum_offsets", group="g-filter") == 0
    assert value(s, "gregor_leader_partitions") == value(s, "gregor_partitions")


def test_an_invalid_metrics_partition_topics_stops_start_up(tmp_path):
    from conftest import Broker
    b = Broker(tmp_path, overrides={"metrics.listener": f"http://127.0.0.1:{free_port()}",
                                    "metrics.partition.topics": "orders("})
    p = subprocess.run(b.argv(), capture_output=True, text=True, timeout=30)
    assert p.returncode != 0
    assert "metrics.partition.topics" in p.stderr + p.stdout


@pytest.mark.timeout(150)
def test_fetches_split_into_consumer_and_follower_on_a_cluster(cluster_factory):
    c = cluster_factory(3, metrics=True)
    nodes = list(c.nodes.values())
    topic = "split"
    deadline = time.monotonic() + 30
    while True:
        err, msg = nodes[0].create_topic(topic, partitions=1, replication_factor=3)
        if err == 0:
            break
        assert err in (7, 41), f"CreateTopics {topic}: {err} {msg}"
        assert time.monotonic() < deadline, f"CreateTopics {topic} kept failing: {err} {msg}"
        time.sleep(0.2)

    def leader():
        _, parts = nodes[0].metadata([topic])["topics"][topic]
        _, leader, replicas, isr = parts[0]
        return (leader,) if leader >= 0 and len(isr) == 3 else None

    (lead_id,) = wait_until(leader, 20, "a leader for the topic")
    lead = c.nodes[lead_id]
    produce(lead, topic, [{"value": b"f" * 100} for _ in range(20)])
    assert len(consume(lead, topic, [0], 20)) == 20

    s = cluster_scrape(lead)
    # Both followers fetch from the leader continuously; the consumer fetched from it too.
    assert value(s, "gregor_fetch_requests_total", request="FetchFollower") >= 2
    assert value(s, "gregor_fetch_requests_total", request="FetchConsumer") >= 1
    assert value(s, "gregor_fetch_request_duration_seconds_count", request="FetchFollower") >= 2
    # The followers copied the 20 records (2 KB) each.
    assert value(s, "gregor_response_size_bytes_sum", request="FetchFollower") > 2 * 20 * 100
    assert value(s, "gregor_request_size_bytes_count", request="FetchFollower") >= 2
    assert value(s, "gregor_request_queue_time_seconds_count", request="FetchFollower") >= 2


def test_raft_commit_latency_and_log_cleaner_progress_with_kafka_names(start_broker):
    """A single node leads the quorum: its writes' commit latency is a histogram (and Kafka's
    raft-metrics commit-latency-avg); the log cleaner compacting a topic reports the bytes it
    read and wrote, how dirty the log was and when it last ran, under Gregor's and Kafka's
    names."""
    b = metrics_broker(start_broker, **{"metrics.naming": "kafka",
                                         "log.cleaner.backoff.ms": "200"})
    create_topic(b, "cleaned", config={"cleanup.policy": "compact", "segment.bytes": "1024",
                                       "min.cleanable.dirty.ratio": "0.01"})
    messages = [{"partition": 0, "key": f"k{k}".encode(), "value": f"r{r}".encode() * 20}
                for r in range(10) for k in range(10)]
    produce(b, "cleaned", messages, extra={"linger.ms": 0, "batch.num.messages": 5})

    def compacted():
        s = cluster_scrape(b)
        return (value(s, "gregor_log_cleaner_read_bytes_total") or 0) > 0 and s

    s = wait_until(compacted, 30, "the cleaner to compact the topic")
    read = value(s, "gregor_log_cleaner_read_bytes_total")
    written = value(s, "gregor_log_cleaner_written_bytes_total")
    assert 0 < written < read, (written, read)
    recopy = value(s, "gregor_log_cleaner_recopy_ratio")
    assert 0 < recopy < 1, recopy
    assert 0 <= value(s, "gregor_log_cleaner_max_dirty_ratio") <= 1
    since = value(s, "gregor_log_cleaner_time_since_last_run_seconds")
    assert 0 <= since < 30, since
    assert value(s, "kafka_log_logcleaner_cleaner_recopy_percent") == pytest.approx(recopy * 100)
    assert value(s, "kafka_log_logcleanermanager_max_dirty_percent") == \
        pytest.approx(value(s, "gregor_log_cleaner_max_dirty_ratio") * 100)
    assert value(s, "kafka_log_logcleanermanager_time_since_last_run_ms") == \
        pytest.approx(since * 1000)

    # Topic creation and the broker's registration were writes this node committed as leader.
    commits = value(s, "gregor_raft_commit_latency_seconds_count")
    assert commits >= 2, commits
    total = value(s, "gregor_raft_commit_latency_seconds_sum")
    assert 0 < total < 60 * commits
    assert value(s, "kafka_server_raft_metrics_commit_latency_avg") == \
        pytest.approx(total / commits * 1000)
    assert value(s, "kafka_server_raft_metrics_current_leader") == b.node_id
    assert value(s, "kafka_server_raft_metrics_current_epoch") == value(s, "gregor_raft_current_epoch")
    assert value(s, "gregor_controller_leader_elections_total") == 0
    assert value(s, "kafka_controller_controllerstats_uncleanleaderelections_total") == 0


@pytest.mark.timeout(150)
def test_leader_elections_are_counted_clean_and_unclean(cluster_factory):
    """Two partitions led by the same broker: one with the active controller in its ISR, one
    (unclean.leader.election.enable) whose other replica has fallen out of the ISR. The leader
    SIGKILLed, the first moves to the controller (a clean election), the second to the replica
    outside the ISR (an unclean one); every node counts both, under both namings."""
    c = cluster_factory(3, metrics=True, overrides={"replica.lag.time.max.ms": "1500",
                                                    "metrics.naming": "kafka"})
    nodes = list(c.nodes.values())
    ctrl = c.controller()
    lead, other = [n for n in nodes if n is not ctrl]
    before = {n.node_id: value(cluster_scrape(n), "gregor_controller_leader_elections_total")
              for n in (ctrl, other)}
    for name, replicas, configs in (
            ("clean-move", [lead.node_id, ctrl.node_id], {}),
            ("unclean-move", [lead.node_id, other.node_id],
             {"unclean.leader.election.enable": "true"})):
        err, msg = kwire_create(ctrl, name, replicas, configs)
        assert err == 0, (name, err, msg)
    for name in ("clean-move", "unclean-move"):
        wait_until(lambda: value(cluster_scrape(lead), "gregor_partition_under_replicated",
                                 topic=name, partition=0) == 0, 20, f"{name} fully in sync")
    produce(lead, "unclean-move", [{"partition": 0, "value": b"v"}])

    other.pause()
    try:
        wait_until(lambda: value(cluster_scrape(lead), "gregor_partition_under_replicated",
                                 topic="unclean-move", partition=0) == 1, 20,
                   "the paused replica out of the ISR")
        lead.kill()
    finally:
        other.resume()

    def counted(node):
        s = cluster_scrape(node)
        elections = value(s, "gregor_controller_leader_elections_total") - before[node.node_id]
        return elections >= 2 and value(s, "gregor_controller_unclean_leader_elections_total") == 1

    wait_until(lambda: counted(ctrl), 30, "one clean and one unclean election")
    wait_until(lambda: counted(other), 30, "the other node to count them too")
    s = cluster_scrape(ctrl)
    assert value(s, "kafka_controller_controllerstats_leaderelectionrateandtimems_count") == \
        value(s, "gregor_controller_leader_elections_total")
    assert value(s, "kafka_controller_controllerstats_uncleanleaderelections_total") == 1
