#!/usr/bin/env python3
"""Controller failover time and metadata propagation delay of a three-node cluster.

    GREGOR_BIN=target/release/gregor python3 bench/failover.py [RUNS]

Each run starts a fresh cluster of three combined nodes (e2e/cluster.py: real processes on
loopback, Kafka's default controller.quorum.election.timeout.ms=1000,
broker.heartbeat.interval.ms=2000, broker.session.timeout.ms=9000), then measures:

- failover: SIGKILL of the active controller -> the first CreateTopics through another node
  that succeeds (the call is sent right after the kill; the broker forwards it once a new
  controller is elected);
- propagation: CreateTopics sent to a node that is not the controller -> the topic visible in
  Metadata on every node (polled);
- death: SIGKILL of a broker that is not the controller -> it is gone from the controller's
  Metadata (fenced), with the default 9 s session timeout.

Prints one line per run and the median and max of each.
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

from cluster import Cluster  # noqa: E402

DEFAULTS = {
    "controller.quorum.election.timeout.ms": "1000",
    "broker.heartbeat.interval.ms": "2000",
    "broker.session.timeout.ms": "9000",
}


def wait_until_listed(node, broker):
    while broker not in [b[0] for b in node.metadata()["brokers"]]:
        time.sleep(0.01)


def visible_everywhere(nodes, name):
    pending = set(n.node_id for n in nodes)
    while pending:
        for n in nodes:
            if n.node_id in pending:
                topic = n.metadata([name])["topics"].get(name)
                if topic is not None and topic[0] == 0:
                    pending.discard(n.node_id)


def one_run(i):
    with tempfile.TemporaryDirectory() as tmp:
        c = Cluster(tmp, 3, overrides=DEFAULTS).start()
        try:
            controller = c.controller()
            follower = next(n for n in c.nodes.values() if n is not controller)
            t0 = time.monotonic()
            err, msg = follower.create_topic("propagation")
            assert err == 0, (err, msg)
            created = time.monotonic() - t0
            visible_everywhere(list(c.nodes.values()), "propagation")
            propagation = time.monotonic() - t0
            # A broker that is not the controller dies: time until it leaves Metadata.
            t0 = time.monotonic()
            follower.kill()
            while follower.node_id in [b[0] for b in controller.metadata()["brokers"]]:
                time.sleep(0.005)
            death = time.monotonic() - t0
            follower.start()
            follower.wait_ready()
            wait_until_listed(controller, follower.node_id)
            survivor = follower
            controller.kill()
            t0 = time.monotonic()
            while True:
                err, msg = survivor.create_topic(f"after-kill-{i}")
                if err == 0:
                    break
                time.sleep(0.01)
            failover = time.monotonic() - t0
            return failover, created, propagation, death
        finally:
            c.stop()


def main():
    runs = int(sys.argv[1]) if len(sys.argv) > 1 else 10
    failovers, creates, propagations, deaths = [], [], [], []
    for i in range(runs):
        f, cr, p, d = one_run(i)
        failovers.append(f)
        creates.append(cr)
        propagations.append(p)
        deaths.append(d)
        print(f"run {i + 1}: failover {f * 1000:.0f} ms, forwarded CreateTopics {cr * 1000:.1f} ms, "
              f"visible on every node {p * 1000:.1f} ms, killed broker fenced {d * 1000:.0f} ms",
              flush=True)
    print(f"failover: median {statistics.median(failovers) * 1000:.0f} ms, "
          f"max {max(failovers) * 1000:.0f} ms")
    print(f"killed broker fenced: median {statistics.median(deaths) * 1000:.0f} ms, "
          f"max {max(deaths) * 1000:.0f} ms")
    print(f"forwarded CreateTopics answered: median {statistics.median(creates) * 1000:.1f} ms, "
          f"max {max(creates) * 1000:.1f} ms")
    print(f"visible on every node: median {statistics.median(propagations) * 1000:.1f} ms, "
          f"max {max(propagations) * 1000:.1f} ms")


if __name__ == "__main__":
    main()
