#!/usr/bin/env python3
"""Transactions against their baselines, same broker, same run (issue 39's targets).

    python3 bench/transactions.py [--gregor target/release/gregor] [--rounds 3] [--seconds 6]

One `gregor broker` (data directory under /dev/shm unless --dir; produce still fsyncs).
confluent-kafka clients, 1 KiB values, 8 partitions, acks=all, linger.ms=5. Rounds alternate:

- produce: an idempotent producer as fast as it goes, against the same producer with a
  `transactional.id` committing every 100 ms (records acknowledged per second);
- consume: one topic filled by 40 transactions of 1,000 records, a quarter of them aborted,
  read from the start to its end by a consumer with read_uncommitted and with read_committed
  (MB/s of the log's record values read through; read_committed hands over three quarters);
- commit latency: transactions writing one record to each of 10 partitions, the time
  `commit_transaction()` takes (EndTxn answered once its decision is durable; the markers
  follow) and the time until a read_committed consumer's end of every partition (the last
  stable offset) has passed the markers.

Prints each measurement, then the medians and the ratios.
"""
import argparse
import os
import shutil
import socket
import statistics
import subprocess
import tempfile
import time

from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

VALUE = b"x" * 1024


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(gregor, data_dir):
    port = free_port()
    log = open(os.path.join(data_dir, "broker.log"), "w")
    proc = subprocess.Popen([gregor, "broker", "--listeners", f"PLAINTEXT://127.0.0.1:{port}",
                             "--data-dir", os.path.join(data_dir, "data")],
                            stdout=log, stderr=subprocess.STDOUT)
    bootstrap = f"127.0.0.1:{port}"
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            AdminClient({"bootstrap.servers": bootstrap}).list_topics(timeout=2)
            return proc, bootstrap
        except Exception:
            time.sleep(0.2)
    raise SystemExit("broker did not start")


def create(bootstrap, name, partitions):
    admin = AdminClient({"bootstrap.servers": bootstrap})
    admin.create_topics([NewTopic(name, partitions, 1)])[name].result(15)


def producer(bootstrap, txn_id=None):
    conf = {"bootstrap.servers": bootstrap, "enable.idempotence": True, "acks": "all",
            "linger.ms": 5, "queue.buffering.max.messages": 200000}
    if txn_id:
        conf["transactional.id"] = txn_id
    p = Producer(conf)
    if txn_id:
        p.init_transactions(30)
    return p


def produce_rate(bootstrap, topic, seconds, transactional):
    """Records acknowledged per second over `seconds`."""
    p = producer(bootstrap, f"bench-{topic}" if transactional else None)
    acked = [0]

    def delivered(err, _msg):
        if err is None:
            acked[0] += 1

    if transactional:
        p.begin_transaction()
    started = last_commit = time.monotonic()
    i = 0
    while time.monotonic() - started < seconds:
        try:
            p.produce(topic, VALUE, partition=i % 8, on_delivery=delivered)
            i += 1
        except BufferError:
            p.poll(0.001)
            continue
        if i % 256 == 0:
            p.poll(0)
        if transactional and time.monotonic() - last_commit >= 0.1:
            p.commit_transaction(30)
            p.begin_transaction()
            last_commit = time.monotonic()
    if transactional:
        p.commit_transaction(30)
    else:
        p.flush(30)
    return acked[0] / (time.monotonic() - started)


def fill_for_consume(bootstrap, topic, records):
    p = producer(bootstrap, f"fill-{topic}")
    for t in range(records // 1000):
        p.begin_transaction()
        for i in range(1000):
            while True:
                try:
                    p.produce(topic, VALUE, partition=i % 8)
                    break
                except BufferError:
                    p.poll(0.01)
        # A quarter aborted, the last one committed: a read_committed reader that has every
        # committed record has read the whole log.
        if t % 4 == 1:
            p.flush(30)
            p.abort_transaction(30)
        else:
            p.commit_transaction(30)


def consume_rate(bootstrap, topic, isolation, expect, log_bytes):
    """MB/s of the log read from the start to its end (`expect` records handed over: every one
    under read_uncommitted, the committed ones under read_committed)."""
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": f"b-{time.monotonic_ns()}",
                  "isolation.level": isolation, "enable.auto.commit": False,
                  "fetch.max.bytes": 52428800})
    c.assign([TopicPartition(topic, p, 0) for p in range(8)])
    got = 0
    started = time.monotonic()
    while got < expect and time.monotonic() - started < 120:
        got += sum(1 for m in c.consume(1000, 0.5) if not m.error())
    took = time.monotonic() - started
    c.close()
    assert got == expect, (isolation, got, expect)
    return log_bytes / took / 1e6


def commit_latencies(bootstrap, topic, count):
    p = producer(bootstrap, f"lat-{topic}")
    c = Consumer({"bootstrap.servers": bootstrap, "group.id": "lat",
                  "isolation.level": "read_committed"})
    commit, visible = [], []
    for n in range(count):
        p.begin_transaction()
        for part in range(10):
            p.produce(topic, VALUE, partition=part)
        p.flush(30)
        t0 = time.monotonic()
        p.commit_transaction(30)
        t1 = time.monotonic()
        # Each partition holds n+1 records and n+1 markers once this commit's marker is in.
        want = 2 * (n + 1)
        while any(c.get_watermark_offsets(TopicPartition(topic, part), timeout=5)[1] < want
                  for part in range(10)):
            pass
        t2 = time.monotonic()
        commit.append((t1 - t0) * 1000)
        visible.append((t2 - t0) * 1000)
    c.close()
    return commit, visible


def pct(xs, q):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gregor", default="target/release/gregor")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--seconds", type=float, default=6)
    ap.add_argument("--dir", default="/dev/shm" if os.path.isdir("/dev/shm") else None)
    args = ap.parse_args()
    work = tempfile.mkdtemp(prefix="gregor-txn-bench-", dir=args.dir)
    proc, bootstrap = start_broker(args.gregor, work)
    try:
        plain, txn, ru, rc = [], [], [], []
        for r in range(args.rounds):
            for transactional in (False, True):
                topic = f"p{r}{int(transactional)}"
                create(bootstrap, topic, 8)
                rate = produce_rate(bootstrap, topic, args.seconds, transactional)
                (txn if transactional else plain).append(rate)
                print(f"produce round {r} {'transactional' if transactional else 'idempotent'}:"
                      f" {rate:,.0f} records/s", flush=True)
            topic = f"c{r}"
            create(bootstrap, topic, 8)
            fill_for_consume(bootstrap, topic, 40_000)
            for isolation in ("read_uncommitted", "read_committed"):
                expect = 40_000 if isolation == "read_uncommitted" else 30_000
                mbs = consume_rate(bootstrap, topic, isolation, expect, 40_000 * len(VALUE))
                (ru if isolation == "read_uncommitted" else rc).append(mbs)
                print(f"consume round {r} {isolation}: {mbs:.1f} MB/s", flush=True)
        create(bootstrap, "lat", 10)
        commit, visible = commit_latencies(bootstrap, "lat", 200)
        m = statistics.median
        print(f"\nproduce: idempotent {m(plain):,.0f} records/s, transactional (commit every "
              f"100 ms) {m(txn):,.0f} records/s, ratio {m(txn) / m(plain):.2f}")
        print(f"consume: read_uncommitted {m(ru):.1f} MB/s, read_committed {m(rc):.1f} MB/s, "
              f"ratio {m(rc) / m(ru):.2f}")
        print(f"commit, 10 partitions, 200 transactions: commit_transaction() p50 "
              f"{pct(commit, 0.5):.1f} ms p99 {pct(commit, 0.99):.1f} ms; until the last "
              f"stable offset of all 10 passed the markers p50 {pct(visible, 0.5):.1f} ms "
              f"p99 {pct(visible, 0.99):.1f} ms")
    finally:
        proc.terminate()
        proc.wait(30)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
