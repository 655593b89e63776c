#!/usr/bin/env python3
"""Gregor's Rust client next to librdkafka (confluent-kafka) against one broker, in one run.

Measures, for each client:
  1. producer throughput: --records keyed records of --value-bytes values to a fresh
     8-partition topic, acks=all, idempotence on, linger.ms=5, batch.size=65536;
  2. consumer throughput: both clients read the same topic (the one librdkafka wrote) back in
     full, in a fresh group, from the first record to the last;
  3. rebalance time: three members of a group on a fresh 8-partition topic, then a fourth joins;
     the figure is from just before the joiner's process is started to the latest
     assignment callback of any member, once every member holds its final assignment (the
     owned partitions of the four members are disjoint, cover the topic, none is empty, and
     nothing changes for --quiet-s seconds). Eager = range, cooperative = cooperative-sticky.

The Gregor side runs `gregor_member` (crates/gregor-client/examples/gregor_member.rs) in its
produce-bench, consume-bench and consume modes; the librdkafka side runs in this process
(throughput) or as this script in its internal --rdkafka-member mode (rebalance), which prints
the same JSON events. Ratios are Gregor / librdkafka (throughput: higher is better for Gregor;
rebalance: lower is better for Gregor).

  python3 bench/client_compare.py --bootstrap 127.0.0.1:19095 \
      --gregor-bin target/release/gregor \
      --member-bin target/release/examples/gregor_member [--records 200000] [--json]
"""
import argparse
import json
import statistics
import subprocess
import sys
import threading
import time
import uuid

PARTITIONS = 8


def now_ms():
    return time.time() * 1000.0


def create_topic(args, topic):
    subprocess.run(
        [args.gregor_bin, "topics", "--bootstrap-server", args.bootstrap, "--create",
         "--topic", topic, "--partitions", str(PARTITIONS), "--replication-factor", "1"],
        check=True, stdout=subprocess.DEVNULL)


def run_member_bench(args, extra):
    out = subprocess.run([args.member_bin, "--bootstrap", args.bootstrap] + extra,
                         check=False, capture_output=True, text=True, timeout=600)
    lines = [json.loads(l) for l in out.stdout.splitlines() if l.startswith("{")]
    summary = [l for l in lines if l.get("event") == "bench"]
    if out.returncode != 0 or not summary:
        raise SystemExit(f"gregor_member {extra}: exit {out.returncode}: {out.stdout[-500:]} {out.stderr[-500:]}")
    return summary[0]


# ---------------------------------------------------------------- librdkafka throughput

def rdkafka_produce(args, topic):
    from confluent_kafka import Producer
    p = Producer({
        "bootstrap.servers": args.bootstrap, "acks": "all", "enable.idempotence": True,
        "linger.ms": 5, "batch.size": 65536, "queue.buffering.max.messages": 1000000,
        "queue.buffering.max.kbytes": 1048576, "compression.type": "none",
    })
    p.list_topics(topic, timeout=20)  # metadata before the clock starts, as the Rust side connects first
    value = b"x" * args.value_bytes
    failed = []

    def on_delivery(err, _msg):
        if err is not None:
            failed.append(err)

    start = time.perf_counter()
    for i in range(args.records):
        while True:
            try:
                p.produce(topic, value, b"k%d" % i, on_delivery=on_delivery)
                break
            except BufferError:
                p.poll(0.05)
        if i % 1000 == 0:
            p.poll(0)
    left = p.flush(120)
    seconds = time.perf_counter() - start
    if left or failed:
        raise SystemExit(f"librdkafka produce: {left} undelivered, {len(failed)} failed: {failed[:1]}")
    return {"records": args.records, "bytes": args.records * args.value_bytes, "seconds": seconds}


def rdkafka_consume(args, topic, group):
    from confluent_kafka import Consumer
    c = Consumer({
        "bootstrap.servers": args.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
    })
    subscribed = time.perf_counter()
    c.subscribe([topic])
    records = nbytes = 0
    first = None
    deadline = subscribed + 300
    while records < args.records and time.perf_counter() < deadline:
        for m in c.consume(num_messages=10000, timeout=0.5):
            if m.error():
                raise SystemExit(f"librdkafka consume: {m.error()}")
            if first is None:
                first = time.perf_counter()
            records += 1
            nbytes += len(m.value() or b"")
    end = time.perf_counter()
    c.close()
    if records < args.records:
        raise SystemExit(f"librdkafka consume: only {records} of {args.records}")
    return {"records": records, "bytes": nbytes, "seconds": end - first,
            "join_seconds": first - subscribed}


# ---------------------------------------------------------------- rebalance

def rdkafka_member(bootstrap, group, topic, strategy):
    """A librdkafka group member printing gregor_member's rebalance events."""
    from confluent_kafka import Consumer
    c = Consumer({
        "bootstrap.servers": bootstrap, "group.id": group, "auto.offset.reset": "earliest",
        "enable.auto.commit": False, "session.timeout.ms": 6000, "heartbeat.interval.ms": 500,
        "partition.assignment.strategy": strategy,
    })

    def printer(kind):
        def cb(_consumer, parts):
            print(json.dumps({"event": kind, "at_ms": now_ms(),
                              "partitions": [[p.topic, p.partition] for p in parts]}), flush=True)
        return cb

    c.subscribe([topic], on_assign=printer("assigned"), on_revoke=printer("revoked"),
                on_lost=printer("lost"))
    print(json.dumps({"event": "ready"}), flush=True)
    stop = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
    while not stop.is_set():
        c.poll(0.1)
    c.close()
    print(json.dumps({"event": "closed"}), flush=True)


class Member:
    def __init__(self, cmd):
        self.events = []
        self.lock = threading.Lock()
        self.started_ms = now_ms()
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.DEVNULL, text=True)
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        for line in self.proc.stdout:
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev.get("event") in ("assigned", "revoked", "lost"):
                with self.lock:
                    self.events.append(ev)

    def owned(self):
        owned = set()
        with self.lock:
            for ev in self.events:
                parts = {tuple(p) for p in ev["partitions"]}
                if ev["event"] == "assigned":
                    owned |= parts
                else:
                    owned -= parts
        return owned

    def snapshot(self):
        with self.lock:
            return len(self.events)

    def stop(self):
        try:
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except Exception:
            self.proc.kill()


def settled(members, quiet_s):
    """Waits until the members' owned partitions cover the topic disjointly, none empty, with no
    new event for quiet_s seconds. Returns False after 60 s."""
    deadline = time.time() + 60
    last_counts, since = None, time.time()
    while time.time() < deadline:
        counts = [m.snapshot() for m in members]
        if counts != last_counts:
            last_counts, since = counts, time.time()
        owned = [m.owned() for m in members]
        union = set().union(*owned)
        ok = (len(union) == PARTITIONS and sum(len(o) for o in owned) == PARTITIONS
              and all(owned))
        if ok and time.time() - since >= quiet_s:
            return True
        time.sleep(0.05)
    return False


def rebalance(args, client, strategy):
    topic = f"cmp-rb-{client}-{strategy}-{uuid.uuid4().hex[:6]}"
    group = f"g-{topic}"
    create_topic(args, topic)
    if client == "gregor":
        def cmd(name):
            return [args.member_bin, "--bootstrap", args.bootstrap, "--mode", "consume",
                    "--group", group, "--topic", topic, "--strategy", strategy, "--name", name,
                    "--session-ms", "6000", "--heartbeat-ms", "500", "--max-seconds", "300"]
    else:
        def cmd(_name):
            return [sys.executable, __file__, "--rdkafka-member", args.bootstrap, group, topic,
                    strategy]
    members = []
    try:
        for i in range(3):
            members.append(Member(cmd(f"m{i}")))
        if not settled(members, args.quiet_s):
            raise SystemExit(f"{client} {strategy}: the first three members never settled")
        joiner = Member(cmd("m3"))
        t0 = joiner.started_ms
        members.append(joiner)
        if not settled(members, args.quiet_s):
            raise SystemExit(f"{client} {strategy}: the group never settled after the join")
        last = max(ev["at_ms"] for m in members for ev in m.events
                   if ev["event"] == "assigned" and ev["at_ms"] >= t0)
        moved = sum(len(m.owned()) for m in members[:3])
        return {"ms": last - t0, "joiner_partitions": len(joiner.owned()),
                "old_members_keep": moved}
    finally:
        for m in members:
            m.stop()


# ---------------------------------------------------------------- main

def median_run(fn, runs):
    results = [fn() for _ in range(runs)]
    results.sort(key=lambda r: r["seconds"])
    return results[len(results) // 2]


def main():
    if len(sys.argv) == 6 and sys.argv[1] == "--rdkafka-member":
        rdkafka_member(*sys.argv[2:])
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--gregor-bin", required=True)
    ap.add_argument("--member-bin", required=True)
    ap.add_argument("--records", type=int, default=200_000)
    ap.add_argument("--value-bytes", type=int, default=1024)
    ap.add_argument("--rebalance-runs", type=int, default=1)
    ap.add_argument("--quiet-s", type=float, default=3.0)
    ap.add_argument("--skip-rebalance", action="store_true")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    import confluent_kafka
    run = uuid.uuid4().hex[:6]
    out = {"records": args.records, "value_bytes": args.value_bytes, "partitions": PARTITIONS,
           "librdkafka": confluent_kafka.libversion()[0], "results": {}}
    res = out["results"]

    t_rd, t_gr = f"cmp-rd-{run}", f"cmp-gr-{run}"
    create_topic(args, t_rd)
    create_topic(args, t_gr)
    res["produce"] = {
        "librdkafka": rdkafka_produce(args, t_rd),
        "gregor": run_member_bench(args, [
            "--mode", "produce-bench", "--topic", t_gr, "--count", str(args.records),
            "--value-bytes", str(args.value_bytes), "--linger-ms", "5", "--batch-size", "65536"]),
    }
    # Both consumers read the same topic, so they see identical batches.
    res["consume"] = {
        "librdkafka": rdkafka_consume(args, t_rd, f"g-rd-{run}"),
        "gregor": run_member_bench(args, [
            "--mode", "consume-bench", "--topic", t_rd, "--group", f"g-gr-{run}",
            "--count", str(args.records), "--max-seconds", "300"]),
    }
    for kind in ("produce", "consume"):
        for r in res[kind].values():
            r["records_per_s"] = r["records"] / r["seconds"]
            r["mb_per_s"] = r["bytes"] / r["seconds"] / 1e6
        res[kind]["ratio"] = res[kind]["gregor"]["records_per_s"] / res[kind]["librdkafka"]["records_per_s"]

    if not args.skip_rebalance:
        for strategy, label in (("range", "eager"), ("cooperative-sticky", "cooperative")):
            entry = {}
            for client in ("librdkafka", "gregor"):
                runs = [rebalance(args, client, strategy) for _ in range(args.rebalance_runs)]
                ms = [r["ms"] for r in runs]
                entry[client] = {"ms_median": statistics.median(ms), "ms_runs": ms,
                                 "joiner_partitions": runs[-1]["joiner_partitions"]}
            entry["ratio"] = entry["gregor"]["ms_median"] / entry["librdkafka"]["ms_median"]
            res[f"rebalance_{label}"] = entry

    if args.json:
        print(json.dumps(out, indent=2))
        return
    print(f"{args.records} records x {args.value_bytes} B, {PARTITIONS} partitions, "
          f"librdkafka {out['librdkafka']}")
    print(f"{'case':<28}{'librdkafka':>32}{'gregor':>32}{'gregor/librdkafka':>20}")
    for kind in ("produce", "consume"):
        r = res[kind]
        fmt = lambda x: f"{x['records_per_s']:,.0f} rec/s ({x['mb_per_s']:.1f} MB/s)"
        print(f"{kind + ' throughput':<28}{fmt(r['librdkafka']):>32}{fmt(r['gregor']):>32}{r['ratio']:>20.2f}")
    for label in ("eager", "cooperative"):
        r = res.get(f"rebalance_{label}")
        if r:
            print(f"{'rebalance ' + label + ' (ms)':<28}{r['librdkafka']['ms_median']:>32,.0f}"
                  f"{r['gregor']['ms_median']:>32,.0f}{r['ratio']:>20.2f}")


if __name__ == "__main__":
    main()
