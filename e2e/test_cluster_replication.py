"""Partition replication on real processes (cluster.py): followers fetching from leaders, the
ISR and the high watermark, acks=all with min.insync.replicas, leader failover after SIGKILL,
recovery by truncation, and seed 001's walk-through with `gregor topics --describe`."""

import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import kwire
from cluster import Cluster
from conftest import gregor_bin, wait_until

NOT_ENOUGH_REPLICAS = 19


@pytest.fixture
def cluster_factory(request, tmp_path):
    made = []

    def make(n=3, overrides=None, **kw):
        c = Cluster(tmp_path, n, overrides=overrides, **kw)
        made.append(c)
        return c.start()

    yield make
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    for c in made:
        logs = c.logs()
        problems = c.stop()
        if problems and not failed:
            pytest.fail("; ".join(problems) + "\n" + logs, pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    setattr(item, "rep_" + rep.when, rep)


def create(node, name, partitions=1, rf=3, configs=None, assignments=None):
    deadline = time.monotonic() + 30
    while True:
        with kwire.Conn("127.0.0.1", node.port, timeout=35) as c:
            if assignments:
                err, msg = kwire.create_topic(c, name, -1, -1, configs=configs,
                                              assignments=list(enumerate(assignments)))
            else:
                err, msg = kwire.create_topic(c, name, partitions, rf, configs=configs)
        if err == 0:
            return
        assert err in (7, 41), f"CreateTopics {name}: {err} {msg}"
        assert time.monotonic() < deadline
        time.sleep(0.2)


def partition_state(node, topic, partition=0):
    """(leader, replicas, isr) as `node` reports it."""
    err, parts = node.metadata([topic])["topics"][topic]
    assert err == 0, err
    _, leader, replicas, isr = parts[partition]
    return leader, replicas, sorted(isr)


def wait_isr(nodes, topic, isr, partition=0, timeout=30):
    for n in nodes:
        wait_until(lambda: partition_state(n, topic, partition)[2] == sorted(isr), timeout,
                   f"ISR of {topic}-{partition} = {isr} on node {n.node_id}")


def bootstrap(nodes):
    return ",".join(n.bootstrap for n in nodes)


def produce(nodes, topic, values, acks="all", partition=0, timeout=30):
    """Produces `values` with an idempotent producer; returns the delivery reports
    [(value, error, offset)]."""
    p = Producer({"bootstrap.servers": bootstrap(nodes), "acks": acks,
                  "enable.idempotence": acks == "all", "linger.ms": 5,
                  "message.timeout.ms": timeout * 1000, "retry.backoff.ms": 50,
                  "topic.metadata.refresh.interval.ms": 1000})
    reports = []

    def cb(err, msg):
        reports.append((msg.value().decode(), err, msg.offset()))

    for v in values:
        p.produce(topic, value=v.encode(), partition=partition, on_delivery=cb)
        p.poll(0)
    remaining = p.flush(timeout + 5)
    assert remaining == 0, f"{remaining} records not delivered"
    return reports


def consume_all(nodes, topic, partition=0, expect=None, timeout=30):
    """Every record of the partition from offset 0 up to the high watermark: [(offset, value)]."""
    c = Consumer({"bootstrap.servers": bootstrap(nodes), "group.id": "reader",
                  "enable.auto.commit": False, "auto.offset.reset": "earliest",
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, partition, 0)])
    out = []
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.5)
            if m is None:
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    if expect is None or len(out) >= expect:
                        return out
                    continue
                continue
            out.append((m.offset(), m.value().decode()))
    finally:
        c.close()
    raise AssertionError(f"read {len(out)} records of {topic}-{partition}, expected {expect}: "
                         f"{out[:3]} ... {out[-3:]}")


def test_acks_all_is_replicated_and_survives_a_sigkilled_leader(cluster_factory):
    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    create(nodes[0], "r", rf=3, configs={"min.insync.replicas": "2"})
    wait_isr(nodes, "r", [0, 1, 2])
    first = produce(nodes, "r", [f"a{i}" for i in range(200)])
    assert all(err is None for _, err, _ in first), first[:5]
    leader = c.nodes[partition_state(nodes[0], "r")[0]]
    survivors = [n for n in nodes if n is not leader]
    # Every replica has the records before the leader dies: they were acknowledged.
    leader.kill()
    wait_until(lambda: partition_state(survivors[0], "r")[0] in [n.node_id for n in survivors],
               15, "a new leader")
    second = produce(survivors, "r", [f"b{i}" for i in range(200)])
    assert all(err is None for _, err, _ in second)
    assert sorted(o for _, _, o in first + second) == list(range(400)), (first[-3:], second[:3])
    records = consume_all(survivors, "r", expect=400)
    assert [v for _, v in records] == [f"a{i}" for i in range(200)] + [f"b{i}" for i in range(200)]
    assert [o for o, _ in records] == list(range(400))
    # The old leader comes back as a follower, catches up and rejoins the ISR.
    leader.start()
    leader.wait_ready()
    wait_isr(nodes, "r", [0, 1, 2])
    assert consume_all([leader], "r", expect=400) == records


def test_two_of_three_replicas_down_refuses_acks_all_but_not_acks_1(cluster_factory):
    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    # Replicas on nodes 0 and 1 only: the quorum survives node 1's loss.
    create(nodes[0], "m", configs={"min.insync.replicas": "2"}, assignments=[[0, 1]])
    wait_isr(nodes, "m", [0, 1])
    c.nodes[1].kill()
    wait_isr([c.nodes[0], c.nodes[2]], "m", [0])
    with kwire.Conn("127.0.0.1", c.nodes[0].port, timeout=10) as conn:
        batch = kwire.record_batch([(None, b"x")])
        version = 8
        r = conn.request(kwire.PRODUCE, version,
                         kwire.produce_body(version, "m", 0, batch, acks=-1, timeout_ms=3000))
        (_, _, err, _) = kwire.parse_produce(r, version)[0]
        assert err == NOT_ENOUGH_REPLICAS
        r = conn.request(kwire.PRODUCE, version,
                         kwire.produce_body(version, "m", 0, batch, acks=1, timeout_ms=3000))
        (_, _, err, _) = kwire.parse_produce(r, version)[0]
        assert err == 0


def describe(node, topic):
    out = subprocess.run([gregor_bin(), "topics", "--bootstrap-server", node.bootstrap,
                          "--describe", "--topic", topic], capture_output=True, text=True,
                         timeout=30)
    assert out.returncode == 0, out.stderr
    return [line.split("\tElr")[0] for line in out.stdout.splitlines() if "Partition:" in line]


def test_seed_001_walk_through_leaders_move_to_the_survivor_and_isr_grows_back(cluster_factory):
    c = cluster_factory(3)
    n0, n1 = c.nodes[0], c.nodes[1]
    create(n1, "tp_demo_03", assignments=[[0, 1], [1, 0], [0, 1]])
    for p in range(3):
        wait_isr(c.nodes.values(), "tp_demo_03", [0, 1], partition=p)
    produce([n0, n1], "tp_demo_03", [f"v{i}" for i in range(30)], partition=0)
    n0.kill()
    wait_until(lambda: describe(n1, "tp_demo_03") == [
        "\tTopic: tp_demo_03\tPartition: 0\tLeader: 1\tReplicas: 0,1\tIsr: 1",
        "\tTopic: tp_demo_03\tPartition: 1\tLeader: 1\tReplicas: 1,0\tIsr: 1",
        "\tTopic: tp_demo_03\tPartition: 2\tLeader: 1\tReplicas: 0,1\tIsr: 1",
    ], 15, "every partition led by 1 with ISR 1")
    n0.start()
    n0.wait_ready()
    wait_until(lambda: describe(n1, "tp_demo_03") == [
        "\tTopic: tp_demo_03\tPartition: 0\tLeader: 1\tReplicas: 0,1\tIsr: 1,0",
        "\tTopic: tp_demo_03\tPartition: 1\tLeader: 1\tReplicas: 1,0\tIsr: 1,0",
        "\tTopic: tp_demo_03\tPartition: 2\tLeader: 1\tReplicas: 0,1\tIsr: 1,0",
    ], 30, "ISR 1,0 with leaders unchanged")
    assert [v for _, v in consume_all([n0], "tp_demo_03", expect=30)] == [f"v{i}" for i in range(30)]
