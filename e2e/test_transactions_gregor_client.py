"""Gregor's own client running an exactly-once consume-transform-produce pipeline on a 3-node
cluster (the example binary `eos_pipeline`, crates/gregor-client/examples), while one of these
is SIGKILLed mid-stream: the pipeline process itself, the transaction coordinator's node, the
leader of an output partition, or the group coordinator's node. Afterwards a read_committed
reader finds every input record in the output exactly once, in input order per key, and the
group's committed offsets are the ends of the input.

The binary comes from GREGOR_EOS_PIPELINE_BIN (default target/debug/examples/eos_pipeline;
build it with `cargo build -p gregor-client --examples`)."""

import json
import os
import subprocess
import threading
import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from conftest import REPO, wait_until
from test_cluster_replication import bootstrap, create, wait_isr
from test_transactions import coordinator_of, group_coordinator_of, leaders, read_all

RECORDS = 800
KEYS = 8
TXN_ID = "gregor-eos"


def pipeline_bin():
    path = os.environ.get("GREGOR_EOS_PIPELINE_BIN") or str(
        REPO / "target" / "debug" / "examples" / "eos_pipeline")
    if not os.access(path, os.X_OK):
        pytest.fail(f"eos_pipeline not found at {path}: run `cargo build -p gregor-client "
                    "--examples` or set GREGOR_EOS_PIPELINE_BIN", pytrace=False)
    return path


class Pipeline:
    """One pipeline process; its JSON events are collected as they come."""

    def __init__(self, servers, group):
        self.proc = subprocess.Popen(
            [pipeline_bin(), "--bootstrap", servers, "--input", "eos-in", "--output", "eos-out",
             "--group", group, "--transactional-id", TXN_ID, "--idle-seconds", "8"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        self.events = []
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.events.append(json.loads(line))

    def committed_total(self):
        with self.lock:
            totals = [e["total"] for e in self.events if e["event"] == "committed"]
        return totals[-1] if totals else 0

    def of(self, kind):
        with self.lock:
            return [e for e in self.events if e["event"] == kind]


def write_input(servers):
    """Keys k0..k7, each key's values `k{key}-{i}` rising; a key stays in one partition."""
    p = Producer({"bootstrap.servers": servers, "enable.idempotence": True, "linger.ms": 5})
    for i in range(RECORDS):
        key = f"k{i % KEYS}"
        p.produce("eos-in", key=key, value=f"{key}-{i:04}", partition=(i % KEYS) % 2)
    assert p.flush(30) == 0


def expected_by_key():
    out = {}
    for i in range(RECORDS):
        key = f"k{i % KEYS}"
        out.setdefault(key, []).append(f"V{key}-{i:04}")
    return out


def read_output(servers):
    """Each key's output values, in offset order (one partition per key)."""
    c = Consumer({"bootstrap.servers": servers, "group.id": "eos-check",
                  "enable.auto.commit": False, "isolation.level": "read_committed",
                  "enable.partition.eof": True})
    c.assign([TopicPartition("eos-out", p, 0) for p in (0, 1)])
    by_key, at_end, quiet = {}, set(), time.monotonic()
    deadline = time.monotonic() + 60
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(at_end) == 2 and time.monotonic() - quiet > 3:
                    return by_key
                continue
            if m.error():
                at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            quiet = time.monotonic()
            by_key.setdefault(m.key().decode(), []).append(m.value().decode())
    finally:
        c.close()
    raise AssertionError(f"eos-out: not every partition reached its end: {sorted(at_end)}")


def pick_victim(kind, nodes, group):
    """The node to SIGKILL and the group to run with. For the group coordinator a group whose
    coordinator is not the transaction coordinator is picked, so that only one role dies."""
    txn_node = coordinator_of(nodes, TXN_ID)
    if kind == "transaction-coordinator":
        return txn_node, group
    if kind == "group-coordinator":
        for i in range(200):
            g = f"{group}-{i}"
            if group_coordinator_of(nodes, g) != txn_node:
                return group_coordinator_of(nodes, g), g
        raise AssertionError("every group's coordinator is the transaction coordinator")
    group_node = group_coordinator_of(nodes, group)
    led = leaders(nodes[0], "eos-out")
    others = [n for n in led.values() if n not in (txn_node, group_node)]
    return (others or list(led.values()))[0], group


@pytest.mark.timeout(300)
@pytest.mark.parametrize("kind", ["pipeline", "transaction-coordinator", "partition-leader",
                                  "group-coordinator"])
def test_gregor_client_pipeline_is_exactly_once_across_a_sigkill(cluster_factory, kind):
    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    create(nodes[0], "eos-in", partitions=2, rf=3)
    create(nodes[0], "eos-out", partitions=2, rf=3, configs={"min.insync.replicas": "2"})
    for p in (0, 1):
        wait_isr(nodes, "eos-out", [0, 1, 2], partition=p)
    servers = bootstrap(nodes)
    write_input(servers)
    target, group = (None, "eos-g") if kind == "pipeline" else pick_victim(kind, nodes, "eos-g")

    first = Pipeline(servers, group)
    wait_until(lambda: first.committed_total() >= RECORDS // 4, timeout=90,
               what="the pipeline commits a quarter of the input")
    if kind == "pipeline":
        first.proc.kill()
        first.proc.wait()
        at_kill, killed_at = first.committed_total(), time.monotonic()
        # The next instance fences the killed one and resumes from its last commit.
        last = Pipeline(servers, group)
        wait_until(lambda: last.committed_total() > 0, timeout=120,
                   what="the second instance commits")
    else:
        c.nodes[target].kill()
        at_kill, killed_at = first.committed_total(), time.monotonic()
        last = first
        wait_until(lambda: last.committed_total() > at_kill, timeout=120,
                   what="the pipeline commits after the kill")
    recovered = time.monotonic() - killed_at
    assert at_kill < RECORDS, "the pipeline ended before the kill"
    assert last.proc.wait(timeout=200) == 0, last.events[-5:]
    survivors = [n for n in nodes if kind == "pipeline" or n is not c.nodes[target]]
    live = bootstrap(survivors)

    assert read_output(live) == expected_by_key(), (
        f"{kind}: aborted {len(first.of('aborted')) + len(last.of('aborted'))}")
    reader = Consumer({"bootstrap.servers": live, "group.id": group,
                       "isolation.level": "read_committed"})
    try:
        tps = reader.committed([TopicPartition("eos-in", 0), TopicPartition("eos-in", 1)],
                               timeout=30)
    finally:
        reader.close()
    assert [tp.offset for tp in tps] == [RECORDS // 2, RECORDS // 2]
    aborted = [e["error"][:100] for e in first.of("aborted") + last.of("aborted")]
    print(f"{kind}: killed at {at_kill} of {RECORDS} committed; next commit after "
          f"{recovered:.2f}s; aborted transactions {aborted}")
    if target is not None:
        c.nodes[target].start()
        c.nodes[target].wait_ready()
