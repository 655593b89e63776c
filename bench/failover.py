#!/usr/bin/env python3
"""Failover of a three-node cluster as a user feels it, over many rounds, with the default
failure-detection settings (e2e/failover.py has the measurements; e2e/test_failover.py asserts
them over a few rounds).

    GREGOR_BIN=target/release/gregor python3 bench/failover.py [--rounds N] [--rows R,...]

Rows (each on a fresh cluster of three combined nodes, RF 3, min.insync.replicas=2, an
idempotent acks=all confluent-kafka producer with default settings):

- leader-kill: SIGKILL of a partition leader's node that is not the active controller;
- controller-leader-kill: SIGKILL of a partition leader's node that is the active controller;
- leader-stop / controller-leader-stop: SIGSTOP of such a node (its sockets stay open);
- controller-kill: SIGKILL of the active controller -> the first CreateTopics through another
  node that succeeds (a fresh admin client);
- propagation: CreateTopics through a node that is not the controller -> visible in Metadata on
  every node.

Each kill round restarts the node at once and times its return (registered, unfenced, back in
every ISR). Prints each round, then the median and the maximum of each measure per row.
"""

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

import failover  # noqa: E402

LEADER_ROWS = {
    "leader-kill": dict(controller=False, how="kill"),
    "controller-leader-kill": dict(controller=True, how="kill"),
    "leader-stop": dict(controller=False, how="stop"),
    "controller-leader-stop": dict(controller=True, how="stop"),
}
ROWS = list(LEADER_ROWS) + ["controller-kill", "propagation"]


def visible_everywhere(nodes, name):
    pending = {n.node_id for n in nodes}
    while pending:
        for n in nodes:
            if n.node_id in pending:
                topic = n.metadata([name])["topics"].get(name)
                if topic is not None and topic[0] == 0:
                    pending.discard(n.node_id)


def propagation_round(c, name):
    controller = c.controller()
    other = next(n for n in c.nodes.values() if n is not controller)
    t0 = time.monotonic()
    err, msg = other.create_topic(name)
    assert err == 0, (err, msg)
    visible_everywhere(list(c.nodes.values()), name)
    return {"visible": time.monotonic() - t0}


def run_row(row, rounds):
    results = []
    with tempfile.TemporaryDirectory() as tmp:
        c = failover.start_cluster(tmp)
        try:
            for i in range(rounds):
                name = f"{row}-{i}"
                if row in LEADER_ROWS:
                    r = failover.leader_round(c, name, **LEADER_ROWS[row])
                elif row == "controller-kill":
                    r = {"admin": failover.controller_round(c, name)}
                else:
                    r = propagation_round(c, name)
                results.append(r)
                shown = ", ".join(f"{k} {v * 1000:.0f} ms" for k, v in r.items() if v is not None)
                print(f"{row} round {i + 1}: {shown}", flush=True)
        finally:
            problems = c.stop()
            if problems:
                print(f"{row}: {problems}", flush=True)
    return results


def summary(row, results):
    keys = [k for k in results[0] if results[0][k] is not None]
    for k in keys:
        values = [r[k] for r in results]
        print(f"{row:24} {k:10} n={len(values):3}  median {statistics.median(values) * 1000:7.0f} ms"
              f"  max {max(values) * 1000:7.0f} ms", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    ap.add_argument("--rows", default=",".join(ROWS))
    args = ap.parse_args()
    rows = args.rows.split(",")
    unknown = [r for r in rows if r not in ROWS]
    if unknown:
        ap.error(f"unknown rows {unknown}; choose from {ROWS}")
    all_results = {row: run_row(row, args.rounds) for row in rows}
    print()
    for row, results in all_results.items():
        summary(row, results)


if __name__ == "__main__":
    main()
