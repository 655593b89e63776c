"""Jepsen's transaction anomalies as checks, on a 3-node cluster of real processes: a
confluent-kafka transactional producer runs transactions over two partitions each (every fourth
aborted on purpose) while, round after round, a node is SIGKILLed and restarted or SIGSTOPped
and resumed (the transaction coordinator's node every other round). Once the faults stop:

- no aborted read: read_committed sees no record of an aborted transaction;
- no lost write: it sees every record of every committed transaction;
- no duplicate: it sees each record once;
- no torn transaction: of a transaction whose outcome the producer never learned, it sees the
  records in every partition the transaction wrote, or in none;
- no hanging transaction: every partition's last stable offset reaches its high watermark."""

import random
import threading
import time

import pytest
from confluent_kafka import Consumer, KafkaException, Producer, TopicPartition

from conftest import wait_until
from test_cluster_replication import bootstrap, create, wait_isr
from test_transactions import coordinator_of, read_all

PARTITIONS = 3
TXN_ID = "tx-faults"


class Workload:
    """Transactions `t{i}` writing `t{i}-{p}` to two partitions each, until stopped; the
    outcome of each: "committed", "aborted", or "unknown" (the producer was lost mid-way and a
    fresh one fenced it)."""

    def __init__(self, servers):
        self.servers = servers
        self.outcomes = {}
        self.stop = threading.Event()
        self.error = None
        self.producer = None

    def fresh_producer(self):
        p = Producer({"bootstrap.servers": self.servers, "transactional.id": TXN_ID,
                      "transaction.timeout.ms": 10000, "linger.ms": 5})
        deadline = time.monotonic() + 90
        while True:
            try:
                p.init_transactions(30)
                return p
            except KafkaException as e:
                if not e.args[0].retriable() or time.monotonic() > deadline:
                    raise

    def one(self, i):
        p = self.producer
        p.begin_transaction()
        for part in (i % PARTITIONS, (i + 1) % PARTITIONS):
            p.produce("jt", value=f"t{i}-{part}", partition=part)
        for _ in range(10):
            try:
                if i % 4 == 3:
                    p.abort_transaction(30)
                    return "aborted"
                p.commit_transaction(30)
                return "committed"
            except KafkaException as e:
                err = e.args[0]
                if err.retriable():
                    continue
                if err.txn_requires_abort():
                    p.abort_transaction(30)
                    return "aborted"
                raise
        raise TimeoutError(f"t{i}: no outcome after 10 tries")

    def run(self):
        try:
            self.producer = self.fresh_producer()
            i = 0
            while not self.stop.is_set():
                try:
                    self.outcomes[i] = self.one(i)
                except (KafkaException, TimeoutError):
                    # The outcome is unknown: a fresh producer fences this one and ends (aborts
                    # or completes) whatever it left open.
                    self.outcomes[i] = "unknown"
                    self.producer = self.fresh_producer()
                i += 1
            # Whatever the last producer left open is ended by a fresh one.
            self.producer = self.fresh_producer()
        except Exception as e:  # reported by the test
            self.error = e


def ends(servers, isolation):
    c = Consumer({"bootstrap.servers": servers, "group.id": f"ends-{isolation}",
                  "isolation.level": isolation})
    try:
        return [c.get_watermark_offsets(TopicPartition("jt", p), timeout=10)[1]
                for p in range(PARTITIONS)]
    finally:
        c.close()


def fault_rounds(c, nodes, rounds, rng):
    """SIGKILL-and-restart or SIGSTOP-and-resume a node per round; every other round the
    transaction coordinator's node. Returns what was done, for the failure message."""
    done = []
    for r in range(rounds):
        time.sleep(1.5)
        if r % 2 == 0:
            alive = [n for n in nodes if n.alive()]
            target = c.nodes[coordinator_of(alive, TXN_ID)]
        else:
            target = rng.choice(nodes)
        if r % 4 < 2:
            target.kill()
            time.sleep(1.5)
            target.start()
            target.wait_ready()
            done.append(f"kill {target.node_id}")
        else:
            target.pause()
            time.sleep(3)
            target.resume()
            done.append(f"pause {target.node_id}")
    return done


@pytest.mark.timeout(420)
def test_no_transaction_anomaly_across_rounds_of_kills_and_pauses(cluster_factory):
    c = cluster_factory(3)
    nodes = list(c.nodes.values())
    create(nodes[0], "jt", partitions=PARTITIONS, rf=3, configs={"min.insync.replicas": "2"})
    wait_isr(nodes, "jt", [0, 1, 2], partition=0)
    servers = bootstrap(nodes)
    w = Workload(servers)
    worker = threading.Thread(target=w.run, daemon=True)
    worker.start()
    wait_until(lambda: len(w.outcomes) >= 10 or w.error, 60, "the first transactions")
    faults = fault_rounds(c, nodes, 8, random.Random(36))
    time.sleep(2)
    w.stop.set()
    worker.join(180)
    assert not worker.is_alive(), "the workload did not stop"
    assert w.error is None, f"{w.error!r} after {faults}"

    # No hanging transaction: each partition's LSO reaches its high watermark.
    wait_until(lambda: ends(servers, "read_committed") == ends(servers, "read_uncommitted"), 60,
               lambda: f"LSO {ends(servers, 'read_committed')} to reach the high watermark "
                       f"{ends(servers, 'read_uncommitted')}")
    got = read_all(servers, "jt", list(range(PARTITIONS)), "read_committed", timeout=90)
    by_txn = {}
    for v in got:
        t, part = v[1:].split("-")
        by_txn.setdefault(int(t), []).append(int(part))
    outcomes = w.outcomes
    summary = {k: sum(1 for o in outcomes.values() if o == k)
               for k in ("committed", "aborted", "unknown")}
    context = f"{summary} after {faults}"
    assert len(got) == len(set(got)), f"duplicates: {sorted(v for v in got if got.count(v) > 1)[:6]}"
    aborted_read = sorted(t for t in by_txn if outcomes.get(t) == "aborted")
    assert not aborted_read, f"aborted transactions read: {aborted_read[:6]}; {context}"
    lost = sorted(t for t, o in outcomes.items() if o == "committed" and len(by_txn.get(t, [])) != 2)
    assert not lost, f"committed transactions lost or partly lost: {lost[:6]}; {context}"
    torn = sorted(t for t, parts in by_txn.items() if len(parts) != 2)
    assert not torn, f"torn transactions: {torn[:6]}; {context}"
    assert set(by_txn) <= set(outcomes), "records of transactions never run"
    assert summary["committed"] >= 20, context
    print(context)
