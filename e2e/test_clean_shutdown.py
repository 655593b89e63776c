"""A clean shutdown leaves every log clean: the nodes of a 3-node cluster, stopped one by one with
SIGTERM, reopen every log with its clean-shutdown marker on restart (no recovery scan). Covers
leaders' and followers' partition logs, `__consumer_offsets` partitions (a group committed) and
the metadata log `__cluster_metadata-0`, read from each node's stderr ("log opened ... clean=")."""

import re
import threading
import time

import pytest
from confluent_kafka import OFFSET_END, Consumer, KafkaException, TopicPartition

from clients import conf, produce
from conftest import wait_until

TOPIC = "events"
PARTITIONS = 3
OFFSETS_PARTITIONS = 5  # FAST_SETTINGS' offsets.topic.num.partitions
METADATA_LOG = "__cluster_metadata-0"

# gregor-log's open (crates/gregor-log/src/open.rs): "log opened dir=<dir> clean=<bool> ...".
OPENED = re.compile(r"log opened dir=(?P<dir>\S+) clean=(?P<clean>true|false)(?P<rest>.*)$")


def opened_logs(node, since):
    """{log directory name: [the rest of each "log opened" line]} in `node`'s stderr after byte
    offset `since`."""
    out = {}
    with open(node.log_path, "rb") as f:
        f.seek(since)
        text = f.read().decode(errors="replace")
    for line in text.splitlines():
        m = OPENED.search(line)
        if m:
            name = m.group("dir").rstrip("/").rsplit("/", 1)[-1]
            out.setdefault(name, []).append(f"clean={m.group('clean')}{m.group('rest')}")
    return out


def consume_and_commit(node, group, count, timeout=60):
    """Consumes `count` records of TOPIC in `group` through `node` and commits synchronously."""
    c = Consumer(conf(node, {
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "enable.partition.eof": False, "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500}))
    try:
        c.subscribe([TOPIC])
        deadline = time.monotonic() + timeout
        n = 0
        while n < count:
            assert time.monotonic() < deadline, f"{group}: consumed {n} of {count}"
            for m in c.consume(num_messages=count - n, timeout=0.2):
                if m.error():
                    raise KafkaException(m.error())
                n += 1
        c.commit(asynchronous=False)
    finally:
        c.close()


def tail_consumer(node, polling, stop):
    """Polls the end of TOPIC until `stop` is set (`polling` once it has): parked fetches and a
    fetch session hold the partitions while the nodes stop. Errors are expected (nodes going
    away) and ignored."""
    c = Consumer(conf(node, {"group.id": "tail", "enable.auto.commit": False,
                             "fetch.wait.max.ms": 3000, "enable.partition.eof": False}))
    c.assign([TopicPartition(TOPIC, p, OFFSET_END) for p in range(PARTITIONS)])
    try:
        while not stop.is_set():
            c.poll(0.2)
            polling.set()
    finally:
        c.close()


def fully_replicated(node, topic, partitions):
    _, parts = node.metadata([topic])["topics"].get(topic, (None, {}))
    return (len(parts) == partitions
            and all(err == 0 and leader >= 0 and sorted(isr) == [0, 1, 2]
                    for err, leader, _, isr in parts.values()))


@pytest.mark.timeout(240)
def test_sigterm_leaves_every_log_clean_on_every_node(cluster_factory, monkeypatch):
    # The "log opened" lines are DEBUG (one per partition): ask for them.
    monkeypatch.setenv("RUST_LOG", "info,openraft=warn,gregor_log::open=debug")
    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    err, msg = nodes[0].create_topic(TOPIC, partitions=PARTITIONS, replication_factor=3)
    assert err == 0, (err, msg)
    produce(nodes[0], TOPIC, [{"partition": i % PARTITIONS, "value": b"%d" % i}
                              for i in range(300)])
    consume_and_commit(nodes[1], "clean-shutdown-group", 300)
    # Followers of both topics have caught up: each node holds a replica of every partition.
    for n in nodes:
        for topic, count in ((TOPIC, PARTITIONS), ("__consumer_offsets", OFFSETS_PARTITIONS)):
            wait_until(lambda: fully_replicated(n, topic, count), 30,
                       f"{topic} fully replicated as node {n.node_id} sees it")

    polling, stop = threading.Event(), threading.Event()
    tail = threading.Thread(target=tail_consumer, args=(nodes[2], polling, stop), daemon=True)
    tail.start()
    wait_until(polling.is_set, 20, "the tail consumer to poll")
    since = {}
    try:
        for n in nodes:
            since[n.node_id] = n.log_path.stat().st_size
            assert n.stop() == 0, f"node {n.node_id} did not exit 0 on SIGTERM\n{c.logs()}"
        for n in nodes:
            n.start()
        for n in nodes:
            n.wait_ready(40)
    finally:
        stop.set()
        tail.join(30)

    expected = ({METADATA_LOG} | {f"{TOPIC}-{p}" for p in range(PARTITIONS)}
                | {f"__consumer_offsets-{p}" for p in range(OFFSETS_PARTITIONS)})
    for n in nodes:
        wait_until(lambda: expected <= set(opened_logs(n, since[n.node_id])), 40,
                   f"node {n.node_id} to reopen {sorted(expected)}")
    unclean = {}
    for n in nodes:
        for name, lines in sorted(opened_logs(n, since[n.node_id]).items()):
            bad = [line for line in lines if line.startswith("clean=false")]
            if bad:
                unclean.setdefault(n.node_id, []).append(f"{name}: {bad[0]}")
    assert not unclean, f"logs reopened without their clean-shutdown marker: {unclean}"
