"""Failover as a user feels it, on a cluster of real processes with the default failure-detection
settings: the measurements that e2e/test_failover.py asserts and bench/failover.py repeats.

One round: a fresh topic of three partitions at RF 3 and `min.insync.replicas=2`, partition 0
led by the victim and the others by the two other nodes (so one is led by, and two only
followed by, the node that fails); an idempotent `acks=all` confluent-kafka producer with
default settings writes to every partition; then the victim fails. Measured from the fault:

- elected: every live node's Metadata names a live leader of partition 0 other than the victim;
- acked: the first record produced after the fault is acknowledged, on every partition (the
  slowest of the three; it includes librdkafka's own reconnect and backoff); measured for kills
  only: requests to a silent (SIGSTOPped) leader stay in flight until librdkafka's own
  request.timeout.ms;
- registered / restarted (when the round restarts the victim at once): its start -> every node
  holds it registered and unfenced / and it is back in the ISR of every partition it replicates
  (its catch-up included).
"""

import os
import threading
import time

from confluent_kafka import Producer

import kwire
from cluster import Cluster

# Every round's topic: partition 0 is the victim's.
PARTITIONS = 3


def start_cluster(workdir, nodes=3, overrides=None):
    """A cluster of combined nodes with the product's default failure detection (the tests use
    the cluster_factory fixture with `fast_detection=False` instead)."""
    return Cluster(workdir, nodes, overrides=overrides, fast_detection=False).start()


def live_nodes(cluster, exclude=()):
    return [n for n in cluster.running() if n.is_broker and n.node_id not in exclude]


def create_round_topic(cluster, name, victim):
    """Partition p's preferred leader: the victim for p = 0, then the other nodes in turn."""
    others = [i for i in sorted(cluster.nodes) if i != victim]
    order = [victim] + others
    assignments = [order[p:] + order[:p] for p in range(PARTITIONS)]
    node = live_nodes(cluster)[0]
    with kwire.Conn("127.0.0.1", node.port, timeout=35) as c:
        err, msg = kwire.create_topic(c, name, -1, -1,
                                      assignments=list(enumerate(assignments)),
                                      configs={"min.insync.replicas": "2"})
    assert err == 0, (err, msg)
    for n in live_nodes(cluster):
        wait(lambda n=n: leaders_of(n, name) == {p: a[0] for p, a in enumerate(assignments)},
             15, f"{name} led as assigned on node {n.node_id}")
    return assignments


def leaders_of(node, topic):
    md = node.metadata([topic], timeout=1)
    t = md["topics"].get(topic)
    if t is None or t[0] != 0:
        return None
    return {p: v[1] for p, v in t[1].items()}


def isr_of(node, topic):
    t = node.metadata([topic], timeout=1)["topics"].get(topic)
    return None if t is None or t[0] != 0 else {p: v[3] for p, v in t[1].items()}


def wait(cond, timeout, what, interval=0.005):
    """Polls `cond` (exceptions count as not yet: a node may refuse while it restarts)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            if cond():
                return time.monotonic()
        except (OSError, ConnectionError, EOFError):
            pass
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


class AckClock:
    """A producer writing a record to each partition every few milliseconds, recording when each
    record was produced and acknowledged."""

    def __init__(self, bootstrap, topic):
        self.topic = topic
        self.producer = Producer({
            "bootstrap.servers": bootstrap,
            "enable.idempotence": True,
            "acks": "all",
            "linger.ms": 0,
            **({"debug": "topic,broker,metadata,msg", "log_level": 7} if os.environ.get("FAILOVER_DEBUG") else {}),
        })
        self.acks = []  # (partition, produced_at, acked_at)
        self.errors = []
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _on_delivery(self, produced_at):
        def cb(err, msg):
            now = time.monotonic()
            with self.lock:
                if err is not None:
                    self.errors.append(str(err))
                else:
                    self.acks.append((msg.partition(), produced_at, now))
        return cb

    def _run(self):
        while not self.stopping.is_set():
            now = time.monotonic()
            for p in range(PARTITIONS):
                self.producer.produce(self.topic, b"v", partition=p, on_delivery=self._on_delivery(now))
            self.producer.poll(0.005)

    def wait_flowing(self, timeout=15):
        """Every partition acknowledged a record produced after this call."""
        t0 = time.monotonic()
        wait(lambda: self.first_ack_after(t0) is not None, timeout, "acks on every partition")

    def first_ack_after(self, t0):
        """When the last partition acknowledged its first record produced at or after `t0`."""
        with self.lock:
            firsts = {}
            for p, produced, acked in self.acks:
                if produced >= t0 and p not in firsts:
                    firsts[p] = acked
        if len(firsts) < PARTITIONS:
            return None
        return max(firsts.values())

    def stop(self):
        self.stopping.set()
        self.thread.join(10)
        self.producer.flush(10)
        return self.errors


def elected(cluster, topic, victim, t0, timeout=30):
    """Seconds from `t0` until every live node names a live leader of partition 0 other than the
    victim."""
    others = live_nodes(cluster, exclude=(victim,))
    live_ids = {n.node_id for n in others}

    def everyone_agrees():
        for n in others:
            leaders = leaders_of(n, topic)
            if leaders is None or leaders.get(0) not in live_ids:
                return False
        return True

    return wait(everyone_agrees, timeout, f"a new leader of {topic}-0") - t0


def acked(clock, t0, timeout=30):
    """Seconds from `t0` until every partition acknowledged a record produced after it."""
    wait(lambda: clock.first_ack_after(t0) is not None, timeout,
         "an acknowledged record on every partition")
    return clock.first_ack_after(t0) - t0


def restarted(cluster, victim, topic_names, timeout=30):
    """Starts the victim at once; seconds until it is a live (registered, unfenced) broker on
    every node, and until it is also back in the ISR of every partition of `topic_names` it
    replicates (all of them: RF 3 on 3 nodes), which includes its catch-up."""
    node = cluster.nodes[victim]
    t0 = time.monotonic()
    node.start()
    registered = []

    def back():
        if not registered:
            for n in live_nodes(cluster):
                if victim not in n.unfenced_brokers(timeout=1):
                    return False
            registered.append(time.monotonic() - t0)
        n = live_nodes(cluster, exclude=(victim,))[0]
        for name in topic_names:
            isr = isr_of(n, name)
            if isr is None or any(victim not in members for members in isr.values()):
                return False
        return True

    in_isr = wait(back, timeout, f"node {victim} registered, unfenced and in every ISR",
                  interval=0.01) - t0
    return registered[0], in_isr


def pick_victim(cluster, controller):
    """The active controller when `controller`, else a node that is not."""
    active = cluster.controller()
    if controller:
        return active.node_id
    return next(i for i in sorted(cluster.nodes) if i != active.node_id)


def fail(node, how):
    if how == "kill":
        node.kill()
    elif how == "stop":
        node.pause()
    else:
        raise ValueError(how)


def leader_round(cluster, name, controller, how="kill", restart=True):
    """One round of a leader's node failing; returns {"elected", "acked", "registered",
    "restarted"} (seconds; the last two None when the round does not restart it)."""
    victim = pick_victim(cluster, controller)
    create_round_topic(cluster, name, victim)
    others = live_nodes(cluster, exclude=(victim,))
    clock = AckClock(",".join(n.bootstrap for n in others), name).start()
    try:
        clock.wait_flowing()
        t0 = time.monotonic()
        if os.environ.get("FAILOVER_DEBUG"):
            import sys
            print(f"KILL {time.time():.3f} victim={victim} topic={name}", file=sys.stderr, flush=True)
        fail(cluster.nodes[victim], how)
        result = {"elected": elected(cluster, name, victim, t0)}
        # A silent leader keeps librdkafka's requests to it in flight until its
        # request.timeout.ms (30 s) runs out: what the client then waits for is its own timeout.
        result["acked"] = acked(clock, t0) if how == "kill" else None
    finally:
        errors = clock.stop()
    assert not errors, f"records failed: {errors[:5]}"
    node = cluster.nodes[victim]
    if how == "stop":
        node.kill()
    result["registered"], result["restarted"] = (
        restarted(cluster, victim, [name]) if restart else (None, None))
    if not restart:
        node.start()
        wait(lambda: all(victim in m for m in isr_of(others[0], name).values()), 30,
             f"node {victim} back in the ISRs")
    return result


def controller_round(cluster, name):
    """SIGKILL of the active controller -> the first CreateTopics through another node that
    succeeds, from a fresh confluent-kafka admin client. Returns seconds; restarts the node."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient, NewTopic

    victim = cluster.controller()
    other = live_nodes(cluster, exclude=(victim.node_id,))[0]
    t0 = time.monotonic()
    victim.kill()
    admin = AdminClient({"bootstrap.servers": other.bootstrap})
    while True:
        futures = admin.create_topics([NewTopic(name, 1, 1)], operation_timeout=30,
                                      request_timeout=30)
        try:
            futures[name].result(35)
            break
        except KafkaException as e:  # retried until it succeeds, like a user would
            if "TOPIC_ALREADY_EXISTS" in str(e):
                break
            if time.monotonic() - t0 > 30:
                raise
            time.sleep(0.01)
    took = time.monotonic() - t0
    victim.start()
    victim.wait_ready()
    return took
