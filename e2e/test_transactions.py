"""Transactions with librdkafka (confluent-kafka) on real processes: commit and abort as
read_committed and read_uncommitted consumers see them, fencing of a zombie producer, the
coordinator's abort of an abandoned transaction at its timeout, KIP-890's refusal of a
transactional batch outside any transaction, and a 3-node cluster in which the node of the
transaction coordinator, of the group coordinator or of an output partition's leader is
SIGKILLed in the middle of a stream of transactions."""

import json
import pathlib
import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, Producer, TopicPartition

import kwire
from clients import conf, create_topic
from conftest import wait_until
from test_cluster_replication import bootstrap, create, wait_isr

TXN_BIT = 0x10


def read_all(bootstrap_servers, topic, partitions, isolation, settle=3.0, timeout=30):
    """Every value of `partitions` from offset 0, read until nothing new came for `settle`
    seconds after each partition reported its end."""
    c = Consumer({"bootstrap.servers": bootstrap_servers, "group.id": f"read-{isolation}",
                  "enable.auto.commit": False, "isolation.level": isolation,
                  "enable.partition.eof": True})
    c.assign([TopicPartition(topic, p, 0) for p in partitions])
    values, at_end = [], set()
    deadline = time.monotonic() + timeout
    quiet_since = time.monotonic()
    try:
        while time.monotonic() < deadline:
            m = c.poll(0.2)
            if m is None:
                if len(at_end) == len(partitions) and time.monotonic() - quiet_since > settle:
                    return values
                continue
            if m.error():
                if m.error().code() == KafkaError._PARTITION_EOF:
                    at_end.add(m.partition())
                continue
            at_end.discard(m.partition())
            quiet_since = time.monotonic()
            values.append(m.value().decode())
    finally:
        c.close()
    raise AssertionError(f"{topic}: not every partition reached its end: {sorted(at_end)}")


def stable_end(broker, topic, partition=0):
    """The partition's end as a read_committed consumer sees it: the last stable offset."""
    c = Consumer(conf(broker, {"group.id": "lso", "isolation.level": "read_committed"}))
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)[1]
    finally:
        c.close()


def txn_producer(servers, txn_id, extra=None):
    p = Producer({"bootstrap.servers": servers, "transactional.id": txn_id, **(extra or {})})
    p.init_transactions(30)
    return p


@pytest.mark.timeout(90)
def test_read_committed_sees_committed_transactions_only(broker):
    create_topic(broker, "tx", partitions=2)
    p = txn_producer(broker.bootstrap, "tx-basic")
    p.begin_transaction()
    for i in range(10):
        p.produce("tx", value=f"c{i}", partition=i % 2)
    p.commit_transaction(30)
    p.begin_transaction()
    for i in range(6):
        p.produce("tx", value=f"a{i}", partition=i % 2)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    p.produce("tx", value="last", partition=0)
    p.commit_transaction(30)

    committed = read_all(broker.bootstrap, "tx", [0, 1], "read_committed")
    assert sorted(committed) == sorted([f"c{i}" for i in range(10)] + ["last"])
    everything = read_all(broker.bootstrap, "tx", [0, 1], "read_uncommitted")
    assert sorted(everything) == sorted(committed + [f"a{i}" for i in range(6)])
    # Records and markers: commit, abort and commit on partition 0; commit and abort on 1.
    assert stable_end(broker, "tx", 0) == 5 + 1 + 3 + 1 + 1 + 1
    assert stable_end(broker, "tx", 1) == 5 + 1 + 3 + 1


@pytest.mark.timeout(120)
def test_kafkajs_transactions_and_read_committed(broker):
    script = pathlib.Path(__file__).parent / "kafkajs_txn.js"
    opts = {"brokers": [broker.bootstrap], "topic": "kjs-tx"}
    r = subprocess.run(["node", str(script), json.dumps(opts)], capture_output=True, text=True,
                       timeout=100)
    assert r.returncode == 0, r.stdout + r.stderr[-3000:]
    seen = json.loads(r.stdout)
    committed = sorted([f"c{i}" for i in range(10)] + ["last"])
    assert seen["committed"] == committed
    assert seen["everything"] == sorted(committed + [f"a{i}" for i in range(5)])


@pytest.mark.timeout(90)
def test_a_new_producer_with_the_same_transactional_id_fences_the_old_one(broker):
    create_topic(broker, "fence")
    zombie = txn_producer(broker.bootstrap, "tx-fence")
    zombie.begin_transaction()
    zombie.produce("fence", value="zombie")
    zombie.flush(30)
    # The new instance's InitProducerId aborts the zombie's open transaction and bumps the
    # epoch: the zombie can no longer commit.
    fresh = txn_producer(broker.bootstrap, "tx-fence")
    with pytest.raises(KafkaException) as info:
        zombie.commit_transaction(30)
    err = info.value.args[0]
    assert err.fatal(), err
    assert err.code() in (KafkaError._FENCED, KafkaError.PRODUCER_FENCED,
                          KafkaError.INVALID_PRODUCER_EPOCH), err
    fresh.begin_transaction()
    fresh.produce("fence", value="fresh")
    fresh.commit_transaction(30)
    assert read_all(broker.bootstrap, "fence", [0], "read_committed") == ["fresh"]


@pytest.mark.timeout(90)
def test_an_abandoned_transaction_is_aborted_at_its_timeout(broker):
    create_topic(broker, "abandon")
    p = txn_producer(broker.bootstrap, "tx-abandon", {"transaction.timeout.ms": 3000})
    p.begin_transaction()
    for i in range(5):
        p.produce("abandon", value=f"v{i}")
    p.flush(30)
    # The open transaction holds the last stable offset at its first record ...
    assert stable_end(broker, "abandon") == 0
    # ... until the coordinator aborts it (5 records and the abort marker).
    wait_until(lambda: stable_end(broker, "abandon") == 6, 20, "the timed-out transaction aborted")
    assert read_all(broker.bootstrap, "abandon", [0], "read_committed") == []
    # The producer learns it was fenced by its own coordinator's abort.
    with pytest.raises(KafkaException):
        p.commit_transaction(10)


def test_a_transactional_batch_outside_any_transaction_is_refused(broker):
    """KIP-890: a produce that arrives with no transaction open at the coordinator (a late
    retry of an ended one, or a client that skipped AddPartitionsToTxn) must not open one in
    the partition: nothing would ever end it, and read_committed consumers would stall."""
    create_topic(broker, "late")
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        _, keys = kwire.api_versions(conn, 0)
        v = kwire.pick_version(keys, kwire.PRODUCE, 3, 9)
        def init():
            err, pid, epoch = kwire.init_producer_id(conn, 1, transactional_id="tx-late")
            assert err in (0, kwire.COORDINATOR_LOAD_IN_PROGRESS), err
            return (pid, epoch) if err == 0 else None
        pid, epoch = wait_until(init, 15, "InitProducerId")
        batch = kwire.record_batch([(b"k", b"late")], producer_id=pid, producer_epoch=epoch,
                                   base_sequence=0, attributes=TXN_BIT)
        r = conn.request(kwire.PRODUCE, v, kwire.produce_body(v, "late", 0, batch,
                                                             transactional_id="tx-late"))
        [(_, _, err, _)] = kwire.parse_produce(r, v)
        assert err == kwire.INVALID_TXN_STATE, err
    assert stable_end(broker, "late") == 0
    # The partition is not held: an ordinary write is readable under read_committed at once.
    p = Producer(conf(broker))
    p.produce("late", value="plain")
    p.flush(10)
    assert read_all(broker.bootstrap, "late", [0], "read_committed") == ["plain"]


def eos_instance(broker, crash_after=None):
    """One instance of a consume-transform-produce application: reads `in` under
    read_committed, writes each value upper-cased to `out` and commits the consumed offsets in
    the same transaction. With `crash_after`, it stops dead once that many records are
    committed and a further transaction is written but not committed (its producer is left,
    not aborted). Returns how many records it committed."""
    c = Consumer(conf(broker, {"group.id": "eos-app", "isolation.level": "read_committed",
                               "enable.auto.commit": False, "auto.offset.reset": "earliest"}))
    c.subscribe(["in"])
    p = txn_producer(broker.bootstrap, "eos-app")
    committed, idle_since = 0, time.monotonic()
    try:
        while time.monotonic() - idle_since < 4:
            msgs = [m for m in c.consume(50, 0.5) if not m.error()]
            if not msgs:
                continue
            idle_since = time.monotonic()
            p.begin_transaction()
            for m in msgs:
                p.produce("out", value=m.value().upper(), partition=m.partition())
            p.send_offsets_to_transaction(c.position(c.assignment()),
                                          c.consumer_group_metadata(), 30)
            if crash_after is not None and committed >= crash_after:
                p.flush(30)
                return committed
            p.commit_transaction(30)
            committed += len(msgs)
        return committed
    finally:
        c.close()


@pytest.mark.timeout(150)
def test_consume_transform_produce_is_exactly_once_across_a_crashed_instance(broker):
    create_topic(broker, "in", partitions=2)
    create_topic(broker, "out", partitions=2)
    p = Producer(conf(broker))
    for i in range(300):
        p.produce("in", value=f"v{i}", partition=i % 2)
    p.flush(30)
    first = eos_instance(broker, crash_after=100)
    assert 100 <= first < 300, first
    # The next instance fences the crashed one (its open transaction, offsets included, is
    # aborted) and resumes from the offsets the last commit wrote.
    second = eos_instance(broker)
    assert first + second == 300, (first, second)
    out = read_all(broker.bootstrap, "out", [0, 1], "read_committed")
    assert sorted(out) == sorted(f"V{i}" for i in range(300))
    c = Consumer(conf(broker, {"group.id": "eos-app"}))
    try:
        tps = c.committed([TopicPartition("in", 0), TopicPartition("in", 1)], timeout=10)
    finally:
        c.close()
    assert [tp.offset for tp in tps] == [150, 150]


def coordinator_of(nodes, txn_id):
    for n in nodes:
        try:
            with kwire.Conn("127.0.0.1", n.port) as conn:
                err, node, _, _ = kwire.find_coordinator(conn, txn_id, key_type=1)
            if err == 0:
                return node
        except OSError:
            continue
    raise AssertionError(f"no coordinator for {txn_id}")


def run_transaction(p, topic, i, partitions, offsets=None, group=None):
    """One transaction writing `t{i}-{p}` to each partition (and, with `offsets`, committing
    them for `group` in it); True if it committed, False if it had to be aborted. Retriable
    failures are retried as librdkafka documents."""
    p.begin_transaction()
    for part in range(partitions):
        p.produce(topic, value=f"t{i}-{part}", partition=part)
    if offsets is not None:
        p.send_offsets_to_transaction(offsets, group, 30)
    return finish(p)


def finish(p):
    while True:
        try:
            p.commit_transaction(60)
            return True
        except KafkaException as e:
            err = e.args[0]
            if err.retriable():
                continue
            if err.txn_requires_abort():
                p.abort_transaction(60)
                return False
            raise


def group_coordinator_of(nodes, group):
    for n in nodes:
        try:
            with kwire.Conn("127.0.0.1", n.port) as conn:
                err, node, _, _ = kwire.find_coordinator(conn, group)
            if err == 0:
                return node
        except OSError:
            continue
    raise AssertionError(f"no coordinator for {group}")


def leaders(node, topic):
    with kwire.Conn("127.0.0.1", node.port) as conn:
        md = kwire.metadata_v1(conn, [topic])
    return {p: leader for p, (_, leader, _, _) in md["topics"][topic][1].items()}


def victim(kind, nodes, txn_coordinator, group):
    """The node to SIGKILL: the transaction coordinator's, the group coordinator's (a group
    whose coordinator is elsewhere is picked), or the leader of an output partition led by
    neither coordinator."""
    if kind == "transaction-coordinator":
        return txn_coordinator, group
    if kind == "group-coordinator":
        for i in range(200):
            g = f"{group}-{i}"
            node = group_coordinator_of(nodes, g)
            if node != txn_coordinator:
                return node, g
        raise AssertionError("every group's coordinator is the transaction coordinator")
    group_node = group_coordinator_of(nodes, group)
    led = leaders(nodes[0], "eos")
    others = [n for n in led.values() if n not in (txn_coordinator, group_node)]
    return (others or list(led.values()))[0], group


@pytest.mark.timeout(240)
@pytest.mark.parametrize("kind", ["transaction-coordinator", "group-coordinator",
                                  "partition-leader"])
def test_transactions_survive_a_sigkilled_node_exactly_once(cluster_factory, kind):
    """A stream of transactions, each writing three partitions and committing an input offset
    for a group; the node of the transaction coordinator, of the group coordinator or of an
    output partition's leader is SIGKILLed between a transaction's records and its commit.
    read_committed sees every committed transaction once and nothing else, and the group's
    offset is the last committed transaction's."""
    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    create(nodes[0], "eos", partitions=3, rf=3, configs={"min.insync.replicas": "2"})
    create(nodes[0], "eos-in", partitions=1, rf=3)
    wait_isr(nodes, "eos", [0, 1, 2])
    servers = bootstrap(nodes)
    p = txn_producer(servers, "tx-eos")
    txn_coordinator = coordinator_of(nodes, "tx-eos")
    target, group = victim(kind, nodes, txn_coordinator, "eos-g")
    member = Consumer({"bootstrap.servers": servers, "group.id": group})
    meta = member.consumer_group_metadata()
    member.close()

    def offsets(i):
        return [TopicPartition("eos-in", 0, i + 1)]

    outcomes = {}
    for i in range(20):
        outcomes[i] = run_transaction(p, "eos", i, 3, offsets(i), meta)
    killed = c.nodes[target]
    p.begin_transaction()
    for part in range(3):
        p.produce("eos", value=f"t20-{part}", partition=part)
    p.send_offsets_to_transaction(offsets(20), meta, 30)
    p.flush(30)
    killed.kill()
    started = time.monotonic()
    outcomes[20] = finish(p)
    recovered = time.monotonic() - started
    for i in range(21, 40):
        outcomes[i] = run_transaction(p, "eos", i, 3, offsets(i), meta)
    survivors = [n for n in nodes if n is not killed]
    if kind == "transaction-coordinator":
        assert coordinator_of(survivors, "tx-eos") != target
    got = read_all(bootstrap(survivors), "eos", [0, 1, 2], "read_committed", timeout=60)
    expected = [f"t{i}-{part}" for i, ok in outcomes.items() if ok for part in range(3)]
    assert len(got) == len(set(got)), "a committed record was read twice"
    assert sorted(got) == sorted(expected), (
        f"missing {sorted(set(expected) - set(got))[:5]}, "
        f"unexpected {sorted(set(got) - set(expected))[:5]}")
    # A transaction caught by the kill may have to abort; the stream goes on committing.
    assert sum(outcomes.values()) >= 30, outcomes
    last = max(i for i, ok in outcomes.items() if ok)
    reader = Consumer({"bootstrap.servers": bootstrap(survivors), "group.id": group,
                       "isolation.level": "read_committed"})
    try:
        committed = reader.committed([TopicPartition("eos-in", 0)], timeout=30)
    finally:
        reader.close()
    assert committed[0].offset == last + 1, (committed, outcomes)
    print(f"{kind}: commit across the SIGKILL took {recovered:.2f}s")
    killed.start()
    killed.wait_ready()
