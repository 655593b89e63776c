#!/usr/bin/env python3
"""Partition failover and the cost of replication on a three-node cluster.

    GREGOR_BIN=target/release/gregor python3 bench/replication.py [RUNS]
    GREGOR_BIN=target/release/gregor python3 bench/replication.py --latency-only

Every cluster is three combined broker+controller nodes (e2e/cluster.py: real processes on
loopback, on this machine's two cores) with Kafka's default timeouts
(controller.quorum.election.timeout.ms=1000, broker.heartbeat.interval.ms=2000,
broker.session.timeout.ms=9000).

- failover (RUNS fresh clusters): a topic with one partition, RF 3, min.insync.replicas=2, led
  by a node that is not the active controller; after a few acknowledged writes that node is
  SIGKILLed, and an acks=all produce is sent in a loop (to whichever node Metadata names the
  leader, 5 ms apart) -> the time from the kill to the first acknowledged one.
- throughput (one cluster): a confluent-kafka (librdkafka) producer with acks=all writes
  256 MiB of 1 KiB records to a 1-partition topic of RF 1 and then to one of RF 3 (same run,
  same cluster), MB/s each and the ratio.
- latency under steady load (same cluster): 2,000 records/s, each produce request acks=all,
  sent one at a time for 10 s; median and p99 of the acknowledgement time, RF 1 and RF 3: the
  difference is what replication to the followers' disks adds.
- replication lag (same cluster, RF 3): records written with acks=1 (answered once durable on
  the leader) while a second connection polls the leader's high watermark (ListOffsets latest,
  every ~1 ms); the lag of a record is the time from its acks=1 answer to the first poll whose
  high watermark is past it (every ISR follower has it on its own disk). Measured at a steady
  2,000 records/s, and for marker records sent 200/s while a librdkafka producer writes a
  steady 50 MB/s with acks=1 to the same partition.
"""

import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

import kwire  # noqa: E402
from cluster import Cluster  # noqa: E402
from confluent_kafka import Producer  # noqa: E402

DEFAULTS = {
    "controller.quorum.election.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
}


def create(node, name, assignments=None, rf=3, configs=None):
    with kwire.Conn("127.0.0.1", node.port, timeout=35) as c:
        if assignments:
            err, msg = kwire.create_topic(c, name, -1, -1, configs=configs,
                                          assignments=list(enumerate(assignments)))
        else:
            err, msg = kwire.create_topic(c, name, 1, rf, configs=configs)
    assert err == 0, (err, msg)


def leader_of(nodes, topic):
    for n in nodes:
        try:
            err, parts = n.metadata([topic], timeout=1)["topics"][topic]
            if err == 0 and parts[0][1] >= 0:
                return parts[0][1]
        except OSError:
            continue
    return -1


def produce_once(node, topic, acks=-1):
    with kwire.Conn("127.0.0.1", node.port, timeout=5) as conn:
        r = conn.request(kwire.PRODUCE, 8, kwire.produce_body(
            8, topic, 0, kwire.record_batch([(None, b"x")]), acks=acks, timeout_ms=5000))
        return kwire.parse_produce(r, 8)[0][2]


def failover_run():
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(tmp, 3, overrides=DEFAULTS).start()
        try:
            nodes = list(c.nodes.values())
            controller = c.controller()
            victim = next(n for n in nodes if n is not controller)
            others = [n for n in nodes if n is not victim]
            order = [victim.node_id] + [n.node_id for n in others]
            create(controller, "f", assignments=[order], configs={"min.insync.replicas": "2"})
            while leader_of(nodes, "f") != victim.node_id or produce_once(victim, "f") != 0:
                time.sleep(0.01)
            for _ in range(10):
                assert produce_once(victim, "f") == 0
            victim.kill()
            t0 = time.monotonic()
            while True:
                leader = leader_of(others, "f")
                if leader in c.nodes and leader != victim.node_id:
                    try:
                        if produce_once(c.nodes[leader], "f") == 0:
                            return time.monotonic() - t0
                    except OSError:
                        pass
                time.sleep(0.005)
        finally:
            c.stop()


def throughput(c, topic, total_bytes=256 << 20, size=1024):
    p = Producer({"bootstrap.servers": ",".join(n.bootstrap for n in c.nodes.values()),
                  "acks": "all", "linger.ms": 5, "batch.size": 1 << 20,
                  "queue.buffering.max.kbytes": 1 << 20, "compression.type": "none"})
    value = b"x" * size
    n = total_bytes // size
    t0 = time.monotonic()
    for _ in range(n):
        while True:
            try:
                p.produce(topic, value=value, partition=0)
                break
            except BufferError:
                p.poll(0.01)
    assert p.flush(300) == 0
    return total_bytes / (time.monotonic() - t0) / 1e6


def latencies(node, topic, rate=2000, seconds=10):
    out = []
    interval = 1.0 / rate
    with kwire.Conn("127.0.0.1", node.port, timeout=5) as conn:
        batch = kwire.record_batch([(None, b"y" * 100)])
        body = kwire.produce_body(8, topic, 0, batch, acks=-1, timeout_ms=5000)
        end = time.monotonic() + seconds
        next_at = time.monotonic()
        while time.monotonic() < end:
            t0 = time.monotonic()
            r = conn.request(kwire.PRODUCE, 8, body)
            assert kwire.parse_produce(r, 8)[0][2] == 0
            out.append(time.monotonic() - t0)
            next_at += interval
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
    out.sort()
    return statistics.median(out) * 1000, out[int(len(out) * 0.99)] * 1000


def high_watermark(conn, topic):
    """ListOffsets v1, latest, as a consumer asks (replica id -1): the high watermark."""
    w = kwire.W()
    w.i32(-1)
    w.array([None], lambda w, _: w.string(topic).array(
        [None], lambda w, _: w.i32(0).i64(-1)))
    r = conn.request(kwire.LIST_OFFSETS, 1, w.done())
    ((_, ((_, err, _, offset),)),) = r.array(
        lambda t: (t.string(), t.array(lambda p: (p.i32(), p.i16(), p.i64(), p.i64()))))
    assert err == 0, err
    return offset


def replication_lag(node, topic, rate, seconds, background=None):
    """Lags (ms) from acks=1 answers to the high watermark passing each record."""
    pending = []  # (offset, answered at)
    lock = threading.Lock()
    lags = []
    stop = threading.Event()

    def poll():
        with kwire.Conn("127.0.0.1", node.port, timeout=5) as conn:
            while not stop.is_set() or pending:
                hw = high_watermark(conn, topic)
                now = time.monotonic()
                with lock:
                    while pending and pending[0][0] < hw:
                        lags.append((now - pending.pop(0)[1]) * 1000)
                time.sleep(0.0005)

    poller = threading.Thread(target=poll)
    poller.start()
    bg = None
    if background is not None:
        bg_stop = threading.Event()
        bg = threading.Thread(target=background, args=(bg_stop,))
        bg.start()
    try:
        with kwire.Conn("127.0.0.1", node.port, timeout=5) as conn:
            batch = kwire.record_batch([(None, b"z" * 100)])
            body = kwire.produce_body(8, topic, 0, batch, acks=1, timeout_ms=5000)
            end = time.monotonic() + seconds
            next_at = time.monotonic()
            while time.monotonic() < end:
                r = conn.request(kwire.PRODUCE, 8, body)
                answered = time.monotonic()
                (_, _, err, base) = kwire.parse_produce(r, 8)[0]
                assert err == 0, err
                with lock:
                    pending.append((base, answered))
                next_at += 1.0 / rate
                pause = next_at - time.monotonic()
                if pause > 0:
                    time.sleep(pause)
    finally:
        if bg is not None:
            bg_stop.set()
            bg.join()
        stop.set()
        poller.join()
    lags.sort()
    return statistics.median(lags), lags[int(len(lags) * 0.99)], lags[-1], len(lags)


def steady_load(c, topic, mb_per_s):
    """A background acks=1 librdkafka producer writing 1 KiB records at a steady rate."""
    def run(stop):
        p = Producer({"bootstrap.servers": ",".join(n.bootstrap for n in c.nodes.values()),
                      "acks": "1", "linger.ms": 5, "batch.size": 1 << 20,
                      "queue.buffering.max.kbytes": 1 << 18, "compression.type": "none"})
        value = b"f" * 1024
        per_tick = int(mb_per_s * 1e6 / 1024 / 100)  # every 10 ms
        next_at = time.monotonic()
        while not stop.is_set():
            for _ in range(per_tick):
                while True:
                    try:
                        p.produce(topic, value=value, partition=0)
                        break
                    except BufferError:
                        p.poll(0.005)
            p.poll(0)
            next_at += 0.01
            pause = next_at - time.monotonic()
            if pause > 0:
                time.sleep(pause)
        p.flush(60)
    return run


def latency_only():
    """`--latency-only`: the latency and replication-lag steps alone, on a fresh cluster."""
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(tmp, 3, overrides=DEFAULTS).start()
        try:
            node = c.nodes[0]
            create(node, "rf1", assignments=[[0]])
            create(node, "rf3", assignments=[[0, 1, 2]], configs={"min.insync.replicas": "2"})
            time.sleep(1)
            l1 = latencies(node, "rf1")
            l3 = latencies(node, "rf3")
            lag = replication_lag(node, "rf3", 2000, 10)
            print(f"acks=all latency at 2000 req/s: RF 1 median {l1[0]:.2f} ms p99 {l1[1]:.2f} ms; "
                  f"RF 3 median {l3[0]:.2f} ms p99 {l3[1]:.2f} ms; replication lag median "
                  f"{lag[0]:.2f} ms p99 {lag[1]:.2f} ms", flush=True)
        finally:
            c.stop()


def main():
    if sys.argv[1:] == ["--latency-only"]:
        latency_only()
        return
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    times = []
    for i in range(runs):
        t = failover_run()
        times.append(t)
        print(f"run {i + 1}: kill -> first acknowledged acks=all produce on the new leader "
              f"{t * 1000:.0f} ms", flush=True)
    print(f"partition failover: median {statistics.median(times) * 1000:.0f} ms, "
          f"max {max(times) * 1000:.0f} ms", flush=True)
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(tmp, 3, overrides=DEFAULTS).start()
        try:
            node = c.nodes[0]
            create(node, "rf1", assignments=[[0]])
            create(node, "rf3", assignments=[[0, 1, 2]], configs={"min.insync.replicas": "2"})
            time.sleep(1)
            rf1 = throughput(c, "rf1")
            rf3 = throughput(c, "rf3")
            print(f"throughput acks=all: RF 1 {rf1:.1f} MB/s, RF 3 {rf3:.1f} MB/s, "
                  f"ratio {rf3 / rf1:.2f}", flush=True)
            l1 = latencies(node, "rf1")
            l3 = latencies(node, "rf3")
            print(f"acks=all latency at 2000 req/s: RF 1 median {l1[0]:.2f} ms p99 {l1[1]:.2f} ms; "
                  f"RF 3 median {l3[0]:.2f} ms p99 {l3[1]:.2f} ms", flush=True)
            lag = replication_lag(node, "rf3", 2000, 10)
            print(f"replication lag (acks=1 answer -> high watermark past it), RF 3, 2000 "
                  f"records/s: median {lag[0]:.2f} ms, p99 {lag[1]:.2f} ms, max {lag[2]:.2f} ms "
                  f"({lag[3]} records)", flush=True)
            lag = replication_lag(node, "rf3", 200, 10, background=steady_load(c, "rf3", 50))
            print(f"replication lag under a steady 50 MB/s acks=1 load, RF 3, markers at 200/s: "
                  f"median {lag[0]:.2f} ms, p99 {lag[1]:.2f} ms, max {lag[2]:.2f} ms "
                  f"({lag[3]} markers)", flush=True)
        finally:
            c.stop()


if __name__ == "__main__":
    main()
