"""The `load` assignor against `uniform` on a real broker, side by side in the same run: two
KIP-848 groups of three confluent-kafka members, one per assignor, each consuming its own
6-partition topic. Once both have settled (two partitions per member), the producers make the two
partitions of one member of each group hot (hot keys appearing after the assignment: the case
partition counts cannot see) and keep the other four lukewarm. Per group:

- the most loaded member's share of the records consumed in the 10 s window that starts
  `--settle` seconds after the traffic began (an even split over three members is 33%);
- partitions moved after the traffic began (assignment callbacks);
- the time from the traffic's start to the last move.

    cargo build --release -p gregor-cli
    python3 bench/load_assignor.py --gregor-bin target/release/gregor --runs 3
"""

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "e2e"))

from confluent_kafka import Producer  # noqa: E402
from confluent_kafka.admin import AdminClient, NewTopic  # noqa: E402

import kip848_rebalance  # noqa: E402
from groups import ASSIGN, ConfluentMember, Timeline  # noqa: E402
from kip848_rebalance import Broker, start_broker, wait  # noqa: E402

PARTITIONS = 6
REVIEW_MS = 2000
HOT_PER_SEC, WARM_PER_SEC = 600, 30
WINDOW_S = 10.0
kip848_rebalance.BROKER_OVERRIDES["group.consumer.load.review.interval.ms"] = str(REVIEW_MS)


class Traffic:
    """1 KiB records: `hot` partitions of each topic at HOT_PER_SEC, the others at WARM_PER_SEC."""

    def __init__(self, bootstrap, plan):
        self.producer = Producer({"bootstrap.servers": bootstrap, "acks": "1",
                                  "linger.ms": 10, "broker.address.family": "v4"})
        self.plan = plan  # {topic: set(hot partitions)}
        self.stop_flag = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        value = b"r" * 1024
        tick = 0.05
        while not self.stop_flag.is_set():
            started = time.monotonic()
            for topic, hot in self.plan.items():
                for p in range(PARTITIONS):
                    n = (HOT_PER_SEC if p in hot else WARM_PER_SEC) * tick
                    for _ in range(int(n)):
                        self.producer.produce(topic, value=value, partition=p)
            self.producer.poll(0)
            time.sleep(max(0.0, tick - (time.monotonic() - started)))
        self.producer.flush(10)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_flag.set()
        self.thread.join(30)


def settled(tl, names):
    snap = tl.snapshot()
    owned = [snap.get(n, frozenset()) for n in names]
    return all(len(o) == PARTITIONS // len(names) for o in owned) and \
        len(frozenset().union(*owned)) == PARTITIONS


def one_run(broker, admin, run, settle_s):
    groups = {}
    for assignor in ("uniform", "load"):
        topic = f"skew-{assignor}-{run}"
        admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
        tl = Timeline()
        names = [f"{assignor[0]}{i}" for i in range(3)]
        extra = {"group.protocol": "consumer", "group.remote.assignor": assignor}
        members = [ConfluentMember(broker, tl, n, f"g-{assignor}-{run}", [topic], "range",
                                   extra=extra).start() for n in names]
        groups[assignor] = (topic, tl, names, members)
    for topic, tl, names, _ in groups.values():
        wait(lambda: settled(tl, names), 60, f"{topic}: three members settle")
    # The hot partitions: both of the member that holds partition 0.
    plan = {}
    for topic, tl, names, _ in groups.values():
        snap = tl.snapshot()
        owner = next(n for n in names if (topic, 0) in snap.get(n, ()))
        plan[topic] = {p for _, p in snap[owner]}
    traffic = Traffic(broker.bootstrap, plan).start()
    start = time.monotonic()
    time.sleep(settle_s)
    counts = {a: [m.messages for m in g[3]] for a, g in groups.items()}
    time.sleep(WINDOW_S)
    out = {}
    for assignor, (topic, tl, names, members) in groups.items():
        window = [m.messages - c for m, c in zip(members, counts[assignor])]
        moves = [e for n in names for e in tl.events_of(n, ASSIGN, since=start)]
        moved = sum(len(e.parts) for e in moves)
        last = max((e.t for e in moves), default=start)
        out[assignor] = {
            "max_share": max(window) / max(1, sum(window)),
            "moved": moved,
            "converged_s": last - start,
        }
        assert not tl.violations(), tl.violations()
    traffic.stop()
    for _, _, _, members in groups.values():
        for m in members:
            m.stop()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--gregor-bin", required=True)
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--settle", type=float, default=10.0,
                    help="seconds of traffic before the measured window")
    args = ap.parse_args()
    data = tempfile.mkdtemp(prefix="load-assignor-bench-")
    proc, bootstrap = start_broker(args.gregor_bin, data)
    broker = Broker(bootstrap)
    runs = []
    try:
        admin = AdminClient({"bootstrap.servers": bootstrap})
        for r in range(args.runs):
            res = one_run(broker, admin, r, args.settle)
            runs.append(res)
            print(f"run {r}: " + "; ".join(
                f"{a}: most loaded member {v['max_share']:.0%} of the records, "
                f"{v['moved']} partitions moved, last move {v['converged_s']:.1f} s after the "
                f"traffic began" for a, v in res.items()), flush=True)
    finally:
        proc.terminate()
        proc.wait(10)
        shutil.rmtree(data, ignore_errors=True)
    for a in ("uniform", "load"):
        shares = [r[a]["max_share"] for r in runs]
        conv = [r[a]["converged_s"] for r in runs]
        print(f"{a}: most loaded member's share median {statistics.median(shares):.0%} "
              f"(worst {max(shares):.0%}); last move median {statistics.median(conv):.1f} s; "
              f"{len(runs)} runs")
    ratio = statistics.median(r["load"]["max_share"] for r in runs) / \
        statistics.median(r["uniform"]["max_share"] for r in runs)
    print(f"load / uniform, most loaded member's share: {ratio:.2f}")


if __name__ == "__main__":
    main()
