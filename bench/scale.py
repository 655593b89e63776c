#!/usr/bin/env python3
"""Gregor's costs as the partition count grows (issue 41), on `gregor cluster up`.

    GREGOR_BIN=target/release/gregor python3 bench/scale.py [--sizes 1000,10000] [--with-100k]
        [--nodes 1,3] [--base-port 19500] [--workdir DIR]

For each cluster (one node at RF 1, three nodes at RF 3) and each size, on a fresh cluster:

- create: CreateTopics of 1,000 partitions per request (one topic each, one request after the
  other) until every node's Metadata shows every partition with a leader and a full ISR;
- metadata: the median latency of Metadata for one topic (1,000 partitions), 50 requests on one
  connection to one node;
- RSS per replica: the nodes' resident memory after the create, less theirs before it, over the
  replicas (partitions x RF);
- descriptors: open file descriptors of one node (the largest);
- idle CPU: the nodes' user+system time over 10 s of idleness, in % of one core (all nodes);
- clean shutdown: SIGTERM to one node (not the active controller) until its process exited;
- start: `gregor cluster restart-node` of that node until it is back (registered, unfenced,
  serving clients), then (three nodes) until every ISR is full again;
- SIGKILL restart: SIGKILL of that node, then the same start.

Prints one table per cluster: each figure at each size, its cost per partition, and the growth
exponent against the 1k run of the same invocation (log(f/f_1k) / log(n/1k): 1 is linear, 2 is
quadratic). 100k partitions need more descriptors than the default `ulimit -n` of many machines
(one per partition on each node today) and minutes of run time: hence a flag.
"""

import argparse
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "e2e"))

import kwire  # noqa: E402

PER_REQUEST = 1000
TICKS = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def wait(cond, timeout, what, interval=0.02):
    """Polls `cond()` until it is truthy (returned); connection errors count as not yet."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            v = cond()
            if v:
                return v
        except (OSError, kwire.Closed):
            pass
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout} s waiting for {what}")
        time.sleep(interval)


def proc_stat(pid):
    """(state, utime+stime ticks, rss bytes) of a process, or None once it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except FileNotFoundError:
        return None
    return fields[0], int(fields[11]) + int(fields[12]), int(fields[21]) * PAGE


def exited(pid):
    s = proc_stat(pid)
    return s is None or s[0] in ("Z", "X")


def descriptors(pid):
    return len(os.listdir(f"/proc/{pid}/fd"))


class ClusterUp:
    """`gregor cluster up` as a child process, its output collected; the nodes' pids from its
    banner and from the lines of later restarts."""

    def __init__(self, gregor, workdir, nodes, base_port):
        self.gregor, self.nodes, self.base_port = gregor, nodes, base_port
        self.data_dir = Path(workdir) / "cluster"
        self.lines = []
        self.lock = threading.Lock()
        self.proc = subprocess.Popen(
            [gregor, "cluster", "up", "--nodes", str(nodes), "--base-port", str(base_port),
             "--data-dir", str(self.data_dir)],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        threading.Thread(target=self._read, daemon=True).start()
        wait(lambda: self._seen("is up;"), 120, "the cluster banner", interval=0.05)
        self.pids = {}
        for line in self._lines():
            if line.startswith("node ") and ": pid " in line:
                head, rest = line.split(": pid ", 1)
                self.pids[int(head.split()[1])] = int(rest.split(",")[0])

    def _read(self):
        for line in self.proc.stdout:
            with self.lock:
                self.lines.append(line.rstrip("\n"))

    def _lines(self):
        with self.lock:
            return list(self.lines)

    def _seen(self, text):
        if self.proc.poll() is not None:
            raise RuntimeError("cluster up exited:\n" + "\n".join(self._lines()[-30:]))
        return any(text in line for line in self._lines())

    def forget(self, text):
        with self.lock:
            self.lines = [line for line in self.lines if text not in line]

    def port(self, i):
        return self.base_port + 2 * i

    def conn(self, i, timeout=60):
        return kwire.Conn("127.0.0.1", self.port(i), timeout=timeout)

    def restart(self, i, timeout=300):
        """`gregor cluster restart-node i`: returns once the node is back; notes its new pid."""
        out = subprocess.run(
            [self.gregor, "cluster", "restart-node", str(i), "--data-dir", str(self.data_dir),
             "--timeout", str(timeout)], capture_output=True, text=True, check=True).stdout
        for line in out.splitlines():
            if "(pid " in line:
                self.pids[i] = int(line.split("(pid ", 1)[1].split(")")[0])

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()


# Errors after which a CreateTopics is sent again: NOT_CONTROLLER (the active controller
# changed, as it may early in a new cluster's life) and REQUEST_TIMED_OUT.
RETRIABLE = {7, 41}


def create_topic(conn, name, n, rf):
    for _ in range(60):
        err, msg = kwire.create_topic(conn, name, n, rf, timeout_ms=120000)
        if err not in RETRIABLE:
            break
        time.sleep(0.5)
    # TOPIC_ALREADY_EXISTS: an attempt that failed over to another controller (forwarded, or
    # sent again above) had created it (in_sync checks its partition count).
    if err == 36:
        print(f"CreateTopics {name}: {msg} (an earlier attempt created it); going on",
              flush=True)
    elif err != 0:
        raise RuntimeError(f"CreateTopics {name}: error {err} {msg}")


def create_topics(c, size, rf):
    """One CreateTopics of 1,000 partitions per topic; returns the topic names."""
    names = [f"scale-{k:03d}" for k in range(math.ceil(size / PER_REQUEST))]
    with c.conn(0, timeout=120) as conn:
        for k, name in enumerate(names):
            create_topic(conn, name, partition_count(size, k), rf)
    return names


def partition_count(size, k):
    return min(PER_REQUEST, size - k * PER_REQUEST)


def in_sync(c, node, names, rf, size):
    """Whether `node`'s Metadata shows every partition of `names` led, with a full ISR."""
    with c.conn(node) as conn:
        topics = kwire.metadata_v1(conn, names)["topics"]
    for k, name in enumerate(names):
        err, parts = topics.get(name, (-1, {}))
        if err != 0 or len(parts) != partition_count(size, k):
            return False
        for perr, leader, replicas, isr in parts.values():
            if perr != 0 or leader < 0 or len(replicas) != rf or len(isr) != rf:
                return False
    return True


def all_in_sync(c, names, rf, size, timeout):
    for i in range(c.nodes):
        wait(lambda i=i: in_sync(c, i, names, rf, size), timeout, f"node {i} in sync", interval=0.1)


def metadata_latency(c, name, node, rounds=50):
    with c.conn(node) as conn:
        kwire.metadata_v1(conn, [name])
        times = []
        for _ in range(rounds):
            t0 = time.perf_counter()
            kwire.metadata_v1(conn, [name])
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def idle_cpu(pids, seconds=10.0):
    """The nodes' CPU over `seconds`, in % of one core."""
    before = {p: proc_stat(p)[1] for p in pids}
    time.sleep(seconds)
    used = sum(proc_stat(p)[1] - before[p] for p in pids)
    return 100.0 * used / TICKS / seconds


def victim(c):
    """A node that is not the active controller (node 0 in a cluster of one)."""
    if c.nodes == 1:
        return 0
    with c.conn(0) as conn:
        controller = kwire.describe_cluster(conn)["controller_id"]
    return next(i for i in range(c.nodes) if i != controller)


def stop_node(c, i, sig):
    """Sends `sig` to node i; the seconds until its process has exited."""
    pid = c.pids[i]
    t0 = time.monotonic()
    os.kill(pid, sig)
    wait(lambda: exited(pid), 300, f"node {i} to exit", interval=0.005)
    took = time.monotonic() - t0
    # The supervisor notices the exit within its reap interval; a restart asked before would
    # stop the node again instead of starting it.
    wait(lambda: c._seen(f"node {i} exited"), 30, f"cluster up to see node {i} exit")
    c.forget(f"node {i} exited")
    return took


def restart_times(c, i, names, rf, size):
    t0 = time.monotonic()
    c.restart(i)
    serving = time.monotonic() - t0
    resync = None
    if c.nodes > 1:
        all_in_sync(c, names, rf, size, 600)
        resync = time.monotonic() - t0
    return serving, resync


def measure(gregor, nodes, size, base_port, workdir):
    rf = min(3, nodes)
    out = {}
    c = ClusterUp(gregor, workdir, nodes, base_port)
    try:
        pids = list(c.pids.values())
        time.sleep(2)
        rss0 = sum(proc_stat(p)[2] for p in pids)
        t0 = time.monotonic()
        names = create_topics(c, size, rf)
        all_in_sync(c, names, rf, size, 900)
        out["create"] = time.monotonic() - t0
        out["metadata"] = 1000 * metadata_latency(c, names[0], 0)
        time.sleep(2)
        pids = list(c.pids.values())
        rss = sum(proc_stat(p)[2] for p in pids)
        out["rss_replica"] = (rss - rss0) / 1024 / (size * rf)
        out["rss_node"] = rss / nodes / 2**20
        out["fds"] = max(descriptors(p) for p in pids)
        out["idle_cpu"] = idle_cpu(pids)
        v = victim(c)
        out["shutdown"] = stop_node(c, v, signal.SIGTERM)
        out["start_clean"], out["resync_clean"] = restart_times(c, v, names, rf, size)
        stop_node(c, v, signal.SIGKILL)
        out["start_kill"], out["resync_kill"] = restart_times(c, v, names, rf, size)
    finally:
        c.stop()
    return out


# How each figure is shown: (key, label, per-partition scale and unit or None when the figure
# is already per replica or per node).
FIGURES = [
    ("create", "create until in sync, s", (1e6, "µs")),
    ("metadata", "Metadata for one topic (up to 1,000 partitions), median, ms", None),
    ("rss_replica", "RSS per replica (after less before create), KiB", None),
    ("rss_node", "RSS per node, MiB", None),
    ("fds", "open descriptors, one node", (1, "")),
    ("idle_cpu", "idle CPU, all nodes, % of one core", (1000, "% per 1k")),
    ("shutdown", "clean shutdown (SIGTERM to exit), s", (1e6, "µs")),
    ("start_clean", "start after clean shutdown, to serving, s", (1e6, "µs")),
    ("resync_clean", "  ... until every ISR is full, s", (1e6, "µs")),
    ("start_kill", "start after SIGKILL, to serving, s", (1e6, "µs")),
    ("resync_kill", "  ... until every ISR is full, s", (1e6, "µs")),
]


def exponent(f, f0, n, n0):
    if f is None or f0 is None or f <= 0 or f0 <= 0 or n == n0:
        return None
    return math.log(f / f0) / math.log(n / n0)


def table(nodes, sizes, results):
    base = sizes[0]
    print(f"\n{nodes} node(s), RF {min(3, nodes)}; growth exponent against {base} partitions "
          "(same run): log(f/f_base) / log(n/n_base)")
    head = ["figure"]
    for n in sizes:
        head += [f"{n:,}", "per partition"] + ([f"exponent {n:,}"] if n != base else [])
    print("| " + " | ".join(head) + " |")
    print("|---|" + "---:|" * (len(head) - 1))
    for key, label, per in FIGURES:
        if all(results[n].get(key) is None for n in sizes):
            continue
        row = [label]
        for n in sizes:
            f = results[n].get(key)
            per_cell = "-" if f is None or per is None else f"{fmt(f * per[0] / n)} {per[1]}"
            row += [fmt(f), per_cell.strip()]
            if n != base:
                e = exponent(f, results[base].get(key), n, base)
                row.append("-" if e is None else f"{e:.2f}")
        print("| " + " | ".join(row) + " |", flush=True)


def fmt(v):
    if v is None:
        return "-"
    if v == int(v) and abs(v) >= 100:
        return f"{int(v):,}"
    return f"{v:.3g}" if abs(v) < 100 else f"{v:,.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000")
    ap.add_argument("--with-100k", action="store_true", help="add 100,000 partitions")
    ap.add_argument("--nodes", default="1,3", help="cluster sizes (RF is min(3, nodes))")
    ap.add_argument("--base-port", type=int, default=19500)
    ap.add_argument("--workdir", default=None, help="where the clusters' data go (default /tmp)")
    args = ap.parse_args()
    gregor = os.path.abspath(os.environ.get("GREGOR_BIN", "target/release/gregor"))
    sizes = [int(s) for s in args.sizes.split(",")] + ([100000] if args.with_100k else [])
    for nodes in [int(n) for n in args.nodes.split(",")]:
        results = {}
        for size in sizes:
            work = tempfile.mkdtemp(prefix=f"scale-{nodes}n-{size}-", dir=args.workdir)
            try:
                started = time.monotonic()
                results[size] = measure(gregor, nodes, size, args.base_port, work)
                print(f"{nodes} node(s), {size} partitions: done in "
                      f"{time.monotonic() - started:.0f} s: {results[size]}", flush=True)
            finally:
                shutil.rmtree(work, ignore_errors=True)
        table(nodes, sizes, results)


if __name__ == "__main__":
    main()
