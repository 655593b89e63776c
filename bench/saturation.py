#!/usr/bin/env python3
"""Fast failure detection must not fence healthy brokers: a three-node cluster with the default
failure-detection settings under produce and consume traffic that keeps both cores busy.

    GREGOR_BIN=target/release/gregor python3 bench/saturation.py [--seconds 600]

Three combined nodes (e2e/cluster.py, real processes on loopback), a topic of 6 partitions at
RF 3 and min.insync.replicas=2 (retention.bytes 1 GiB per partition, checked every 5 s, so the
disk does not fill); two producer processes (confluent-kafka, acks=all, idempotent)
write 1 KiB records as fast as they can and two consumer processes read them back, for the
whole run. Prints the machine's CPU use over the run, what was produced and consumed, and what
must stay zero: brokers fenced (the controllers' logs), ISR shrinks (gregor_isr_shrinks_total
summed over the nodes) and active controller changes (the nodes' logs).
"""

import argparse
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

import kwire  # noqa: E402
from cluster import Cluster  # noqa: E402

TOPIC = "saturation"

PRODUCER = r"""
import sys, time
from confluent_kafka import Producer
bootstrap, seconds = sys.argv[1], float(sys.argv[2])
p = Producer({"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True,
              "linger.ms": 5})
value, sent, failed = b"x" * 1024, 0, {}
def cb(err, msg):
    if err is not None:
        failed[err.name()] = failed.get(err.name(), 0) + 1
end = time.monotonic() + seconds
while time.monotonic() < end:
    try:
        p.produce("%s", value, on_delivery=cb)
        sent += 1
    except BufferError:
        p.poll(0.01)
    p.poll(0)
p.flush(60)
print(sent, sum(failed.values()), repr(failed).replace(" ", ""))
""" % TOPIC

CONSUMER = r"""
import sys, time
from confluent_kafka import Consumer
bootstrap, seconds, group = sys.argv[1], float(sys.argv[2]), sys.argv[3]
c = Consumer({"bootstrap.servers": bootstrap, "group.id": group,
              "auto.offset.reset": "earliest", "enable.auto.commit": True})
c.subscribe(["%s"])
read, errors = 0, 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    for m in c.consume(1000, 0.5):
        if m.error():
            errors += 1
        else:
            read += 1
c.close()
print(read, errors)
""" % TOPIC


def cpu_times():
    fields = [int(x) for x in Path("/proc/stat").read_text().splitlines()[0].split()[1:]]
    idle = fields[3] + fields[4]
    return sum(fields), idle


def metric_sum(cluster, name):
    total = 0.0
    for n in cluster.nodes.values():
        text = urllib.request.urlopen(f"http://127.0.0.1:{n.metrics_port}/metrics",
                                      timeout=5).read().decode()
        for line in text.splitlines():
            if line.startswith(name + " ") or line.startswith(name + "{"):
                total += float(line.rsplit(" ", 1)[1])
    return total


def log_count(cluster, needle):
    return sum(Path(n.log_path).read_text(errors="replace").count(needle)
               for n in cluster.nodes.values())


class _Kept:
    def __init__(self, path):
        self.path = path

    def __enter__(self):
        return self.path

    def __exit__(self, *exc):
        return False


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=600)
    ap.add_argument("--keep", help="keep the cluster's data and logs in this directory")
    args = ap.parse_args()
    if args.keep:
        Path(args.keep).mkdir(parents=True, exist_ok=True)
    with (tempfile.TemporaryDirectory() if not args.keep else _Kept(args.keep)) as tmp:
        c = Cluster(tmp, 3, metrics=True, fast_detection=False,
                    overrides={"log.retention.check.interval.ms": "5000"}).start()
        try:
            node = c.nodes[0]
            with kwire.Conn("127.0.0.1", node.port, timeout=35) as conn:
                # Retention keeps the run's disk use bounded (about 18 GiB at most), whatever
                # the rate: an unbounded run fills the disk within the 10 minutes.
                err, msg = kwire.create_topic(conn, TOPIC, 6, 3, configs={
                    "min.insync.replicas": "2", "retention.bytes": str(1 << 30),
                    "segment.bytes": str(64 << 20)})
            assert err == 0, (err, msg)
            time.sleep(1)  # every node hosts the new partitions
            bootstrap = ",".join(n.bootstrap for n in c.nodes.values())
            shrinks0 = metric_sum(c, "gregor_isr_shrinks_total")
            fenced0 = log_count(c, "broker session expired; fencing")
            gone0 = log_count(c, "its process is gone")
            elections0 = log_count(c, "became the active controller")
            total0, idle0 = cpu_times()
            procs = [subprocess.Popen([sys.executable, "-c", PRODUCER, bootstrap,
                                       str(args.seconds)], stdout=subprocess.PIPE, text=True)
                     for _ in range(2)]
            procs += [subprocess.Popen([sys.executable, "-c", CONSUMER, bootstrap,
                                        str(args.seconds), f"g{i}"], stdout=subprocess.PIPE,
                                       text=True) for i in range(2)]
            outs = [p.communicate(timeout=args.seconds + 120)[0].split() for p in procs]
            total1, idle1 = cpu_times()
            busy = 1 - (idle1 - idle0) / max(1, total1 - total0)
            sent = sum(int(o[0]) for o in outs[:2])
            failed = sum(int(o[1]) for o in outs[:2])
            reasons = " ".join(o[2] for o in outs[:2])
            read = sum(int(o[0]) for o in outs[2:])
            print(f"seconds {args.seconds:.0f}, CPU busy {busy * 100:.1f}% of both cores")
            print(f"produced {sent} records of 1 KiB ({sent / args.seconds:.0f}/s), "
                  f"failed {failed} {reasons}; consumed {read} (two groups)")
            print(f"brokers fenced: {log_count(c, 'broker session expired; fencing') - fenced0} "
                  f"by session expiry, {log_count(c, 'its process is gone') - gone0} as gone")
            print(f"ISR shrinks: {metric_sum(c, 'gregor_isr_shrinks_total') - shrinks0:.0f}")
            print(f"active controller changes: "
                  f"{log_count(c, 'became the active controller') - elections0}")
        finally:
            problems = c.stop()
            if problems:
                print(problems)


if __name__ == "__main__":
    main()
