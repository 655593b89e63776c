"""How fast a fourth member gets its share: three members of a group own a 12-partition topic,
then a fourth joins; the time runs from just before the fourth member's consumer is created to
the last assignment callback once the four members hold 3 partitions each, disjoint and covering
the topic (and, from librdkafka's own debug log, from the fourth member's first group request:
its first ConsumerGroupHeartbeat, or its JoinGroup). KIP-848 (`group.protocol=consumer`, the broker assigns, `uniform`) against the
classic protocol's cooperative rebalance (`cooperative-sticky`) and its eager one (`range`), in
the same run on the same broker, every member a confluent-kafka consumer polling in its own
thread of this process. Both protocols heartbeat every 500 ms.

    cargo build --release -p gregor-cli
    python3 bench/kip848_rebalance.py --gregor-bin target/release/gregor --runs 10 [--json]
"""

import argparse
import json
import logging
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))

from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

from groups import ConfluentMember, Timeline  # noqa: E402

PARTITIONS = 12
INTERVAL_MS = 500
BROKER_OVERRIDES = {
    "group.initial.rebalance.delay.ms": "0",
    "group.consumer.session.timeout.ms": "6000",
    "group.consumer.min.session.timeout.ms": "6000",
    "group.consumer.heartbeat.interval.ms": str(INTERVAL_MS),
    "group.consumer.min.heartbeat.interval.ms": str(INTERVAL_MS),
}
CASES = [
    ("KIP-848 (uniform)", "range", {"group.protocol": "consumer"}),
    ("classic cooperative-sticky", "cooperative-sticky", {}),
    ("classic eager (range)", "range", {}),
]


class Broker:
    def __init__(self, bootstrap):
        self.bootstrap = bootstrap


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_broker(gregor_bin, data_dir):
    port = free_port()
    cmd = [gregor_bin, "broker", "--listeners", f"PLAINTEXT://127.0.0.1:{port}",
           "--data-dir", data_dir]
    for k, v in BROKER_OVERRIDES.items():
        cmd += ["--override", f"{k}={v}"]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return proc, f"127.0.0.1:{port}"
        except OSError:
            time.sleep(0.1)
    proc.kill()
    raise SystemExit("the broker did not start")


def wait(cond, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if cond():
            return
        time.sleep(0.01)
    raise SystemExit(f"timed out: {what}")


def balanced(tl, names, share):
    snap = tl.snapshot()
    owned = [snap.get(n, frozenset()) for n in names]
    union = frozenset().union(*owned)
    return (all(len(o) == share for o in owned) and len(union) == PARTITIONS
            and sum(len(o) for o in owned) == PARTITIONS)


class FirstRequest(logging.Handler):
    """The time librdkafka logs its first group request (debug `cgrp`): a ConsumerGroupHeartbeat
    (KIP-848) or a JoinGroup (classic)."""

    MARKS = ("ConsumerGroupHeartbeat of member", "Joining group")

    def __init__(self):
        super().__init__()
        self.at = None

    def emit(self, record):
        if self.at is None and any(m in record.getMessage() for m in self.MARKS):
            self.at = time.monotonic()


def one_run(broker, topic, group, strategy, extra):
    tl = Timeline()
    names = ["A", "B", "C"]
    members = [ConfluentMember(broker, tl, n, group, [topic], strategy, extra=extra).start()
               for n in names]
    wait(lambda: balanced(tl, names, PARTITIONS // 3), 60, "three members settle")
    time.sleep(1.0)  # let the three stay settled
    first = FirstRequest()
    log = logging.getLogger(f"joiner-{group}")
    log.addHandler(first)
    log.setLevel(logging.DEBUG)
    start = time.monotonic()
    members.append(ConfluentMember(broker, tl, "D", group, [topic], strategy,
                                   extra={**extra, "debug": "cgrp", "logger": log}).start())
    names.append("D")
    wait(lambda: balanced(tl, names, PARTITIONS // 4), 60, "four members settle")
    settled = max(e.t for e in tl.events)
    assert not tl.violations(), tl.violations()
    for m in members:
        m.stop()
    return (settled - start) * 1000.0, (settled - first.at) * 1000.0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gregor-bin", required=True)
    ap.add_argument("--runs", type=int, default=10)
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="kip848-bench-")
    proc, bootstrap = start_broker(args.gregor_bin, data)
    broker = Broker(bootstrap)
    results = {}
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for i, (label, strategy, extra) in enumerate(CASES):
            topic = f"bench848-{i}"
            admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
            # Cases interleave run by run would share noise better; each case's runs are
            # consecutive here so a group never sees another case's members.
            runs = [one_run(broker, topic, f"g{i}-{r}", strategy, extra)
                    for r in range(args.runs)]
            times = [r[0] for r in runs]
            from_request = [r[1] for r in runs]
            results[label] = times
            print(f"{label}: from the consumer's creation median {statistics.median(times):.0f}"
                  f" ms, max {max(times):.0f} ms, min {min(times):.0f} ms; from its first group"
                  f" request median {statistics.median(from_request):.0f} ms, max"
                  f" {max(from_request):.0f} ms; {len(times)} runs", flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    base = statistics.median(results["classic cooperative-sticky"])
    for label, times in results.items():
        print(f"{label}: {statistics.median(times) / base:.2f}x the cooperative median")
    if args.json:
        print(json.dumps(results))


if __name__ == "__main__":
    main()
