"""Partition replication on real processes (cluster.py): followers fetching from leaders, the
ISR and the high watermark, acks=all with min.insync.replicas, leader failover after SIGKILL,
recovery by truncation, and seed 001's walk-through with `gregor topics --describe`."""

import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition

import kwire
from conftest import NotYet, gregor_bin, wait_until
from traffic import Traffic

LEADER_NOT_AVAILABLE = 5
NOT_ENOUGH_REPLICAS = 19
NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20


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
    """(leader, replicas, isr) as `node` reports it. A node that does not know the topic yet (or
    has no leader for it) raises NotYet: wait_until retries it, anything else fails."""
    err, parts = node.metadata([topic])["topics"][topic]
    if err in (kwire.UNKNOWN_TOPIC_OR_PARTITION, LEADER_NOT_AVAILABLE):
        raise NotYet(f"{topic} on node {node.node_id}: error {err}")
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


def test_isr_shrinking_below_min_insync_after_the_append_answers_not_enough_replicas_after_append(
        cluster_factory):
    """docs/cluster.md: an acks=all batch appended while the ISR had min.insync.replicas members
    is answered NOT_ENOUGH_REPLICAS_AFTER_APPEND when the ISR shrank below it before the batch
    was replicated. The follower is paused (SIGSTOP) just before the produce: the high watermark
    cannot pass the batch until the leader drops the follower from the ISR
    (replica.lag.time.max.ms), which is exactly the shrink."""
    c = cluster_factory(3, overrides={"replica.lag.time.max.ms": "1500"})
    # Neither replica is the active controller: pausing one leaves the quorum alone.
    ctrl = c.controller()
    leader, follower = [n for n in c.nodes.values() if n is not ctrl]
    create(ctrl, "after", configs={"min.insync.replicas": "2"},
           assignments=[[leader.node_id, follower.node_id]])
    wait_isr(c.nodes.values(), "after", [leader.node_id, follower.node_id])
    wait_until(lambda: partition_state(ctrl, "after")[0] == leader.node_id, 10, "the leader")
    with kwire.Conn("127.0.0.1", leader.port, timeout=30) as conn:
        def produce_all(value):
            r = conn.request(kwire.PRODUCE, 8, kwire.produce_body(
                8, "after", 0, kwire.record_batch([(None, value)]), acks=-1, timeout_ms=15000))
            return kwire.parse_produce(r, 8)[0][2:]

        # The leader's replica may take the lead a moment after the metadata names it.
        first = []
        wait_until(lambda: first.append(produce_all(b"replicated")) or first[-1][0] != 6, 10,
                   "the leader to take the first record")
        assert first[-1] == (0, 0), first
        follower.pause()
        try:
            err, _ = produce_all(b"appended, then the ISR shrank")
            isr_after = partition_state(ctrl, "after")[2]
            # The ISR is now below min.insync.replicas: refused before appending.
            refused, _ = produce_all(b"refused")
        finally:
            follower.resume()
    assert err == NOT_ENOUGH_REPLICAS_AFTER_APPEND, err
    assert isr_after == [leader.node_id], isr_after
    assert refused == NOT_ENOUGH_REPLICAS, refused
    # The batch stayed in the log (Kafka's semantics: a retry may duplicate it); the follower
    # catches up and rejoins.
    wait_isr(c.nodes.values(), "after", [leader.node_id, follower.node_id])
    assert [v for _, v in consume_all([leader], "after", expect=2)] == [
        "replicated", "appended, then the ISR shrank"]


def test_idle_followers_stay_in_the_isr_and_still_get_new_records(cluster_factory):
    """Issue 41: a follower's incremental fetches name only the partitions whose offset moved,
    and the leader reads only the partitions that changed. Idle, the leaders read nothing, yet
    caught-up followers stay in the ISR well past replica.lag.time.max.ms (no shrink at all),
    and an append after the idle time still reaches them (acks=all needs every replica)."""
    from test_metrics import scrape, value

    c = cluster_factory(3, metrics=True, overrides={"replica.lag.time.max.ms": "1500"})
    nodes = list(c.nodes.values())
    everyone = sorted(n.node_id for n in nodes)
    create(nodes[0], "idle", partitions=6, rf=3)
    for p in range(6):
        wait_isr(nodes, "idle", everyone, partition=p)
    produce(nodes, "idle", ["before"], partition=1)
    time.sleep(2)

    def total(name):
        return sum(value(scrape(n.metrics_port), name) or 0 for n in nodes)

    reads = total("gregor_fetch_partitions_read_total")
    # Four lag times of nothing: an ISR check runs every half lag time.
    time.sleep(6)
    idle_reads = total("gregor_fetch_partitions_read_total") - reads
    # Every round read every partition of its session before: about 150 reads here.
    assert idle_reads < 10, idle_reads
    assert total("gregor_isr_shrinks_total") == 0
    ctrl = c.controller()
    for p in range(6):
        assert partition_state(ctrl, "idle", p)[2] == everyone, p
    reports = produce(nodes, "idle", ["after"], partition=1)
    assert [(v, err) for v, err, _ in reports] == [("after", None)]
    assert [v for _, v in consume_all(nodes, "idle", partition=1, expect=2)] == [
        "before", "after"]
    assert total("gregor_isr_shrinks_total") == 0


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


def produce_raw(node, topic, values, acks=1):
    """One plain (non-idempotent) produce request per value to `node`, retrying
    NOT_LEADER_OR_FOLLOWER for a moment as clients do (the node's image may say it leads a
    moment before its replica does); returns the error codes."""
    codes = []
    with kwire.Conn("127.0.0.1", node.port, timeout=10) as conn:
        for v in values:
            deadline = time.monotonic() + 5
            while True:
                r = conn.request(kwire.PRODUCE, 8, kwire.produce_body(
                    8, topic, 0, kwire.record_batch([(None, v.encode())]), acks=acks,
                    timeout_ms=3000))
                code = kwire.parse_produce(r, 8)[0][2]
                if code != 6 or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            codes.append(code)
    return codes


@pytest.mark.parametrize("unclean", [False, True])
def test_unclean_leader_election_loses_the_old_leaders_suffix_only_when_enabled(
        cluster_factory, unclean):
    c = cluster_factory(3)
    n0, n1, n2 = c.nodes[0], c.nodes[1], c.nodes[2]
    configs = {"unclean.leader.election.enable": "true" if unclean else "false"}
    create(n2, "u", assignments=[[0, 1]], configs=configs)
    wait_isr([n0, n1, n2], "u", [0, 1])
    wait_until(lambda: partition_state(n0, "u")[0] == 0, 10, "node 0 leads")
    assert produce_raw(n0, "u", [f"both{i}" for i in range(10)]) == [0] * 10
    wait_until(lambda: consume_all([n1], "u", expect=10, timeout=5) is not None, 20, "replicated")
    # The follower dies; the leader alone takes 5 more records (acks=1, min.insync.replicas=1).
    n1.kill()
    wait_isr([n2], "u", [0])
    assert produce_raw(n0, "u", [f"only0-{i}" for i in range(5)]) == [0] * 5
    # Then the leader dies and the out-of-sync replica comes back.
    n0.kill()
    n1.start()
    n1.wait_ready()
    if not unclean:
        # Nobody in the ISR is alive: once the dead leader's session expires (and it is fenced,
        # with the out-of-sync replica already back) the partition goes offline rather than
        # lose data, and stays so.
        wait_until(lambda: partition_state(n2, "u")[0] == -1, 20, "the partition offline")
        time.sleep(1)  # deliberate: time passes and the partition must stay offline
        assert partition_state(n2, "u")[0] == -1
        n0.start()
        n0.wait_ready()
        wait_until(lambda: partition_state(n2, "u")[0] == 0, 20, "the ISR member leads again")
        wait_isr([n2], "u", [0, 1])
        values = [v for _, v in consume_all([n0, n1], "u", expect=15)]
        assert values == [f"both{i}" for i in range(10)] + [f"only0-{i}" for i in range(5)]
        return
    wait_until(lambda: partition_state(n2, "u")[0] == 1, 20, "an unclean leader")
    assert produce_raw(n1, "u", [f"after{i}" for i in range(3)]) == [0] * 3
    # The old leader returns as a follower and truncates the suffix the new leader never had.
    n0.start()
    n0.wait_ready()
    wait_isr([n2], "u", [0, 1])
    values = [v for _, v in consume_all([n0, n1], "u", expect=13)]
    assert values == [f"both{i}" for i in range(10)] + [f"after{i}" for i in range(3)]
    log = n0.log_path.read_text(errors="replace")
    assert "diverges from the new leader" in log and "removed_offsets=5" in log, log[-3000:]


def test_hard_bounce_of_the_leader_keeps_every_acknowledged_record_once_in_order(cluster_factory):
    """Kafka's replication system test, harder: the partition leader is SIGKILLed and restarted
    five times under an idempotent acks=all producer, then a follower is paused past
    replica.lag.time.max.ms; every acknowledged record is there exactly once, in order."""
    c = cluster_factory(3, overrides={"replica.lag.time.max.ms": "2000"})
    nodes = list(c.nodes.values())
    create(nodes[0], "hb", configs={"min.insync.replicas": "2"})
    wait_isr(nodes, "hb", [0, 1, 2])
    acked = []
    import threading
    stop = threading.Event()
    errors = []  # delivery errors and the thread's own failure, asserted in the test's thread

    def acked_more(n, what):
        """Waits until `n` more records are acknowledged (the producer got through `what`)."""
        start = len(acked)
        wait_until(lambda: len(acked) >= start + n, 30, f"{n} records acknowledged {what}")

    def run_producer():
        try:
            produce_until_stopped()
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            errors.append(f"producer thread: {e!r}")

    def produce_until_stopped():
        p = Producer({"bootstrap.servers": bootstrap(nodes), "acks": "all",
                      "enable.idempotence": True, "linger.ms": 2,
                      "message.timeout.ms": 60000, "retry.backoff.ms": 50,
                      "topic.metadata.refresh.interval.ms": 1000})

        def cb(err, msg):
            if err is None:
                acked.append((msg.offset(), msg.value().decode()))
            else:
                errors.append(err)

        i = 0
        while not stop.is_set():
            p.produce("hb", value=f"v{i}".encode(), partition=0, on_delivery=cb)
            p.poll(0.002)
            i += 1
        remaining = p.flush(60)
        if remaining:
            errors.append(f"{remaining} records unacknowledged 60 s after the last produce")

    t = threading.Thread(target=run_producer)
    t.start()
    try:
        for r in range(5):
            acked_more(50, f"by the leader of round {r}")
            leader = c.nodes[partition_state(nodes[0], "hb")[0]]
            leader.kill()
            others = [n for n in nodes if n is not leader]
            wait_until(lambda: partition_state(others[0], "hb")[0] in
                       [n.node_id for n in others], 15, "a new leader")
            acked_more(20, f"by the new leader of round {r} (ISR of two)")
            leader.start()
            leader.wait_ready()
            wait_isr(others, "hb", [0, 1, 2])
        # A follower paused past replica.lag.time.max.ms leaves the ISR and comes back.
        leader_id = partition_state(nodes[0], "hb")[0]
        follower = next(n for n in nodes if n.node_id != leader_id)
        follower.pause()
        try:
            wait_isr([c.nodes[leader_id]], "hb", sorted({0, 1, 2} - {follower.node_id}),
                     timeout=20)
            acked_more(20, "without the paused follower")
        finally:
            follower.resume()
        wait_isr(nodes, "hb", [0, 1, 2])
        acked_more(50, "with the follower back in the ISR")
    finally:
        stop.set()
        t.join(90)
    assert not t.is_alive(), "the producer thread did not finish"
    assert not errors, errors[:5]
    assert len(acked) > 100
    records = consume_all(nodes, "hb", expect=len(acked), timeout=60)
    values = [v for _, v in records]
    # Exactly once, in the order produced, at the offsets acknowledged.
    assert len(values) == len(set(values)), "a record was written twice"
    assert values == sorted(values, key=lambda v: int(v[1:])), "records out of order"
    assert dict(acked).items() <= dict(records).items(), "an acknowledged record is missing or moved"


def test_kafka_python_and_kcat_keep_working_across_a_leader_kill(cluster_factory):
    import shutil

    from kafka import KafkaProducer

    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    create(nodes[0], "kp", configs={"min.insync.replicas": "2"})
    wait_isr(nodes, "kp", [0, 1, 2])
    p = KafkaProducer(bootstrap_servers=bootstrap(nodes), acks="all", retries=20,
                      retry_backoff_ms=100, max_in_flight_requests_per_connection=1,
                      request_timeout_ms=10000, metadata_max_age_ms=1000)
    futures = [p.send("kp", value=f"k{i}".encode(), partition=0) for i in range(100)]
    p.flush(30)
    c.nodes[partition_state(nodes[0], "kp")[0]].kill()
    futures += [p.send("kp", value=f"k{i}".encode(), partition=0) for i in range(100, 200)]
    p.flush(60)
    offsets = [f.get(timeout=30).offset for f in futures]
    p.close()
    assert sorted(offsets) == list(range(200))
    survivors = [n for n in nodes if n.alive()]
    out = subprocess.run([shutil.which("kcat"), "-C", "-b", bootstrap(survivors), "-t", "kp",
                          "-p", "0", "-o", "beginning", "-e", "-q", "-f", "%o %s\n"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")[:-1]
    assert lines == [f"{o} k{o}" for o in range(200)]


@pytest.mark.timeout(240)
def test_hard_bounce_with_the_gregor_client_and_a_committing_group(cluster_factory):
    """The hard bounce with Gregor's own client: a producer process per round (acks=all,
    idempotent) and a consumer group member committing after every poll, running throughout
    three leader kills; every acknowledged record is consumed, at the offset acknowledged, once
    per offset, and nothing covered by a confirmed commit is consumed again."""
    import json
    import types

    from clients import watermarks
    from groups import Timeline
    from test_interop_gregor_client import GregorMember, Ledger, gregor_member_bin

    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    create(nodes[0], "hbg", configs={"min.insync.replicas": "2"})
    wait_isr(nodes, "hbg", [0, 1, 2])
    everyone = types.SimpleNamespace(bootstrap=bootstrap(nodes))
    ledger = Ledger()
    member = GregorMember(everyone, Timeline(), ledger, "m", "hbg-group", "hbg", "range").start()
    produced = {}

    failures = []  # the producer rounds' failures, asserted in the test's thread

    def round_of(r):
        try:
            lines = "".join(f"g{r}-{i}\n" for i in range(300))
            out = subprocess.run([gregor_member_bin(), "--mode", "produce", "--bootstrap",
                                  bootstrap(nodes), "--topic", "hbg"], input=lines,
                                 capture_output=True, text=True, timeout=90)
            if out.returncode != 0:
                failures.append(f"round {r}: exit {out.returncode}: {out.stderr[-2000:]}")
            for line in out.stdout.splitlines():
                ev = json.loads(line)
                if ev["event"] == "produced":
                    produced[ev["value"]] = ev["offset"]
        except BaseException as e:  # noqa: BLE001 - reported by the test's thread
            failures.append(f"round {r}: {e!r}")

    def end_offset():
        return watermarks(everyone, "hbg", 0)[1]

    try:
        for r in range(6):
            t = __import__("threading").Thread(target=round_of, args=(r,))
            before = wait_until(lambda: [end_offset()], 30, "the end offset")[0]
            t.start()
            if r % 2 == 1:
                # The leader dies while this round's producer is writing.
                wait_until(lambda: end_offset() > before, 30, f"round {r}'s first records")
                leader = c.nodes[partition_state(nodes[0] if nodes[0].alive() else nodes[1],
                                                 "hbg")[0]]
                leader.kill()
                t.join(120)
                leader.start()
                leader.wait_ready()
                wait_isr(nodes, "hbg", [0, 1, 2])
            else:
                t.join(120)
            assert not t.is_alive(), f"round {r}'s producer did not finish"
        assert not failures, failures
        assert len(produced) == 6 * 300, len(produced)
        wait_until(lambda: {v for *_, v in ledger.consumed} >= set(produced), 60,
                   "the group to consume every acknowledged record")
    finally:
        member.stop(timeout=30)
    by_offset = {}
    for _, _, _, o, _, v in ledger.consumed:
        assert by_offset.setdefault(o, v) == v, f"offset {o} held two records"
    for v, o in produced.items():
        assert by_offset.get(o) == v, f"{v} acknowledged at {o}, consumed there: {by_offset.get(o)}"
    assert ledger.redeliveries_after_commit() == []


@pytest.mark.parametrize("enabled", [True, False])
def test_automatic_leader_rebalance_moves_leadership_back_to_the_preferred_replica(
        cluster_factory, enabled):
    c = cluster_factory(3, overrides={"leader.imbalance.check.interval.seconds": "1",
                                      "auto.leader.rebalance.enable": str(enabled).lower()})
    n0, n1 = c.nodes[0], c.nodes[1]
    create(n1, "pref", assignments=[[0, 1, 2], [0, 2, 1], [1, 0, 2]])
    for p in range(3):
        wait_isr(c.nodes.values(), "pref", [0, 1, 2], partition=p)
    # A producer and a consumer keep working on partition 0 while its leader moves off node 0
    # and (when enabled) back.
    traffic = Traffic(f"{n1.bootstrap},{c.nodes[2].bootstrap}", "pref").__enter__()
    n0.kill()
    wait_until(lambda: all(partition_state(n1, "pref", p)[0] != 0 for p in range(3)), 15,
               "leaders moved off node 0")
    n0.start()
    n0.wait_ready()
    for p in range(3):
        wait_isr([n1], "pref", [0, 1, 2], partition=p)
    leaders = lambda: [partition_state(n1, "pref", p)[0] for p in range(3)]  # noqa: E731
    if enabled:
        # Node 0 prefers two partitions and leads none of them: 100% > 10%.
        wait_until(lambda: leaders() == [0, 0, 1], 15, "preferred leaders again")
        traffic.progress(20, "on the preferred leader again")
    else:
        # Deliberate: three imbalance checks' time passes, and leadership must not move back.
        time.sleep(3)
        assert leaders()[:2] != [0, 0] and 0 not in leaders(), leaders()
    traffic.stop()
    traffic.check()


def test_reassignment_with_kafkas_admin_client_moves_the_data_and_changes_the_replication_factor(
        cluster_factory):
    """Seed 001 sections 3 and 5 through Kafka's own admin protocol (kafka-python's
    AlterPartitionReassignments / ListPartitionReassignments): a partition on broker 0 alone
    moves to brokers 1 and 2 (RF 1 -> 2); the new replicas copy the log, join the ISR, the old
    one is removed and deletes its data; bad targets get Kafka's error codes."""
    from kafka import KafkaAdminClient
    from kafka import TopicPartition as KTP
    from kafka.errors import (InvalidReplicationAssignmentError, NoReassignmentInProgressError,
                              UnknownTopicOrPartitionError)

    c = cluster_factory(3)
    n0, n1, n2 = c.nodes[0], c.nodes[1], c.nodes[2]
    create(n1, "mv", assignments=[[0]])
    wait_isr(c.nodes.values(), "mv", [0])
    produce([n0, n1, n2], "mv", [f"m{i}" for i in range(300)])
    admin = KafkaAdminClient(bootstrap_servers=bootstrap([n0, n1, n2]), request_timeout_ms=30000)
    try:
        result = admin.alter_partition_reassignments({KTP("mv", 0): [1, 2]})
        assert result == {KTP("mv", 0): None}, result
        wait_until(lambda: partition_state(n1, "mv")[1:] == ([1, 2], [1, 2]), 30,
                   "replicas and ISR 1,2")
        assert partition_state(n1, "mv")[0] in (1, 2)
        # The node answering may apply the completion a moment after node 1 did.
        wait_until(lambda: admin.list_partition_reassignments() == {}, 10,
                   "no reassignment listed")
        wait_until(lambda: not (n0.data_dir / "mv-0").exists(), 20,
                   "the removed replica deletes its data")
        assert [v for _, v in consume_all([n1, n2], "mv", expect=300)] == \
            [f"m{i}" for i in range(300)]
        # Bad input: an unknown broker, a duplicate, cancelling nothing, an unknown topic.
        result = admin.alter_partition_reassignments({KTP("mv", 0): [1, 9]})
        assert result[KTP("mv", 0)] is InvalidReplicationAssignmentError, result
        result = admin.alter_partition_reassignments({KTP("mv", 0): [1, 1]})
        assert result[KTP("mv", 0)] is InvalidReplicationAssignmentError, result
        result = admin.alter_partition_reassignments({KTP("mv", 0): None})
        assert result[KTP("mv", 0)] is NoReassignmentInProgressError, result
        result = admin.alter_partition_reassignments({KTP("nope", 0): [1]})
        assert result[KTP("nope", 0)] is UnknownTopicOrPartitionError, result
        assert partition_state(n1, "mv")[1:] == ([1, 2], [1, 2]), "a refused change changed it"
    finally:
        admin.close()
