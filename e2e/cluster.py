"""A cluster of real `gregor broker` processes on loopback ports, for the cluster tests.

Every node is broker and controller. Node i reaches node j's controller listener through a fault
proxy of its own (one per directed link, on 127.0.0.1), so a test can cut any node off the others
(`isolate`) without touching traffic to any other address. Client (PLAINTEXT) traffic is not
proxied. Nodes can be SIGKILLed, stopped with SIGTERM, paused with SIGSTOP / SIGCONT and
restarted on the same ports and data directories.
"""

import os
import signal
import socket
import subprocess
import threading
import time
from pathlib import Path

import kwire
from conftest import FAST_SETTINGS, exit_problem, free_port, gregor_bin, tail, track, wait_until

# Fast failure detection for tests; the defaults (1000 / 2000 / 9000 ms) are Kafka's.
CLUSTER_SETTINGS = {
    "controller.quorum.election.timeout.ms": "500",
    "broker.heartbeat.interval.ms": "300",
    "broker.session.timeout.ms": "3000",
}


class LinkProxy:
    """Forwards connections from one node to another's controller listener. While cut, existing
    connections are closed and new ones are accepted but never answered (a black hole, as a
    network partition looks to TCP)."""

    def __init__(self, target_port, avoid=()):
        self.target_port = target_port
        # The nodes' ports were picked free and released: an ephemeral port for the proxy must
        # not be one of them (the kernel may hand it out again before the node binds it).
        held = []
        while True:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind(("127.0.0.1", 0))
            if sock.getsockname()[1] not in avoid:
                break
            held.append(sock)
        for h in held:
            h.close()
        self.sock = sock
        self.sock.listen(64)
        self.port = self.sock.getsockname()[1]
        self.cut = False
        self.lock = threading.Lock()
        self.conns = []
        self.closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.closed:
            try:
                client, _ = self.sock.accept()
            except OSError:
                return
            with self.lock:
                self.conns.append(client)
                if self.cut:
                    continue  # held open, never forwarded
            try:
                upstream = socket.create_connection(("127.0.0.1", self.target_port), timeout=2)
            except OSError:
                self._drop(client)
                continue
            with self.lock:
                self.conns.append(upstream)
            for a, b in ((client, upstream), (upstream, client)):
                threading.Thread(target=self._pump, args=(a, b), daemon=True).start()

    def _pump(self, src, dst):
        try:
            while True:
                data = src.recv(65536)
                if not data or self.cut:
                    break
                dst.sendall(data)
        except OSError:
            pass
        self._drop(src)
        self._drop(dst)

    def _drop(self, s):
        try:
            s.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        s.close()
        with self.lock:
            if s in self.conns:
                self.conns.remove(s)

    def set_cut(self, cut):
        with self.lock:
            self.cut = cut
            conns = list(self.conns)
        for s in conns:  # cut or healed: existing connections end either way
            self._drop(s)

    def close(self):
        self.closed = True
        self.set_cut(True)
        self.sock.close()


class Node:
    def __init__(self, cluster, node_id, roles="broker,controller"):
        self.cluster = cluster
        self.node_id = node_id
        self.roles = roles
        self.port = cluster.fresh_port()
        self.controller_port = cluster.fresh_port()
        self.data_dir = cluster.workdir / f"node{node_id}-data"
        self.log_path = cluster.workdir / f"node{node_id}.stderr.log"
        self.proc = None
        self.paused = False
        self.label = f"node {node_id}"
        self.killed = False  # the current process was SIGKILLed by the test
        self.exit_problems = []  # earlier processes of this node that ended wrongly
        # metrics.listener port, when the cluster serves metrics.
        self.metrics_port = cluster.fresh_port() if cluster.metrics else None

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    @property
    def is_broker(self):
        return "broker" in self.roles

    @property
    def is_controller(self):
        return "controller" in self.roles

    def argv(self):
        c = self.cluster
        def port(j):
            if j == self.node_id or not c.proxied:
                return c.nodes[j].controller_port
            return c.proxies[(self.node_id, j)].port

        voters = ",".join(f"{j}@127.0.0.1:{port(j)}" for j in c.voter_ids())
        listeners = []
        if self.is_broker:
            listeners.append(f"PLAINTEXT://127.0.0.1:{self.port}")
        if self.is_controller:
            listeners.append(f"CONTROLLER://127.0.0.1:{self.controller_port}")
        argv = [c.bin, "broker",
                "--node-id", str(self.node_id),
                "--process-roles", self.roles,
                "--listeners", ",".join(listeners),
                "--controller-quorum-voters", voters,
                "--data-dir", str(self.data_dir)]
        if c.cluster_id is not None:
            argv += ["--cluster-id", c.cluster_id]
        if c.racks:
            argv += ["--rack", c.racks[self.node_id % len(c.racks)]]
        for k, v in c.overrides.items():
            argv += ["--override", f"{k}={v}"]
        if self.metrics_port:
            argv += ["--override", f"metrics.listener=http://127.0.0.1:{self.metrics_port}"]
        return argv

    def start(self):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if self.proc is not None and exit_problem(self):
            self.exit_problems.append(exit_problem(self))
        self.killed = False
        track(self)
        log = open(self.log_path, "ab")
        log.write(f"\n===== start: {' '.join(self.argv())}\n".encode())
        log.flush()
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     cwd=self.cluster.workdir, env=env)
        log.close()
        self.paused = False
        return self

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def wait_ready(self, timeout=30):
        def ready():
            if not self.alive():
                raise AssertionError(f"node {self.node_id} exited: {self.proc.returncode}\n"
                                     f"{tail(self.log_path, 40)}")
            if not self.is_broker:
                socket.create_connection(("127.0.0.1", self.controller_port), timeout=1).close()
                return True
            with kwire.Conn("127.0.0.1", self.port, timeout=2) as c:
                return any(b[0] == self.node_id for b in kwire.metadata_v1(c)["brokers"])

        wait_until(ready, timeout, f"node {self.node_id} to serve and list itself")

    def kill(self):
        if self.alive():
            if self.paused:
                self.proc.send_signal(signal.SIGCONT)
            self.killed = True
            self.proc.kill()
            self.proc.wait(5)

    def stop(self, timeout=20):
        """SIGTERM; returns the exit code (None if it had to be killed)."""
        if not self.alive():
            return self.proc.returncode if self.proc else 0
        if self.paused:
            self.resume()
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()  # not the test's kill: the teardown reports this exit
            self.proc.wait(5)
            return None

    def pause(self):
        self.proc.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self):
        self.proc.send_signal(signal.SIGCONT)
        self.paused = False

    def metadata(self, topics=None, timeout=2):
        with kwire.Conn("127.0.0.1", self.port, timeout=timeout) as c:
            return kwire.metadata_v1(c, topics)

    def unfenced_brokers(self, timeout=2):
        """Ids of the brokers this node's image holds registered and unfenced (DescribeCluster;
        Metadata still lists a broker for a few seconds after it was fenced)."""
        with kwire.Conn("127.0.0.1", self.port, timeout=timeout) as c:
            return sorted(b[0] for b in kwire.describe_cluster(c)["brokers"])

    def listed_brokers(self, timeout=2):
        """Ids of the brokers this node's Metadata answer lists (clients connect to these)."""
        with kwire.Conn("127.0.0.1", self.port, timeout=timeout) as c:
            return sorted(b[0] for b in kwire.metadata_v1_brokers(c))

    def active_controller_id(self, timeout=2):
        """The active controller as this node's DescribeCluster names it."""
        with kwire.Conn("127.0.0.1", self.port, timeout=timeout) as c:
            return kwire.describe_cluster(c)["controller_id"]

    def create_topic(self, name, partitions=1, replication_factor=1, assignments=None,
                     timeout=35):
        with kwire.Conn("127.0.0.1", self.port, timeout=timeout) as c:
            return kwire.create_topic(c, name, partitions, replication_factor,
                                      assignments=assignments)


class Cluster:
    """`n` voters (combined broker+controller nodes, or controller-only ones with
    `controller_only=True`), then `brokers` broker-only nodes (ids n, n+1, ...).
    `fast_detection=False` keeps the product's default failure-detection settings;
    `proxied=False` has every node reach the voters directly (configured alike, no `isolate`)."""

    def __init__(self, workdir, n, overrides=None, racks=None, brokers=0, controller_only=False,
                 metrics=False, fast_detection=True, explicit_cluster_id=True, proxied=True):
        self.bin = gregor_bin()
        self.metrics = metrics
        self.workdir = Path(workdir)
        # None: no --cluster-id, every node derives it from controller.quorum.voters.
        self.cluster_id = "gregorTestClusterId000" if explicit_cluster_id else None
        self.overrides = dict(FAST_SETTINGS)
        if fast_detection:
            self.overrides.update(CLUSTER_SETTINGS)
        self.overrides.update(overrides or {})
        self.racks = racks
        self.proxied = proxied
        self.taken = set()
        voter_roles = "controller" if controller_only else "broker,controller"
        self.nodes = {i: Node(self, i, voter_roles) for i in range(n)}
        for i in range(n, n + brokers):
            self.nodes[i] = Node(self, i, "broker")
        node_ports = {p for n in self.nodes.values() for p in (n.port, n.controller_port)}
        self.proxies = {(i, j): LinkProxy(self.nodes[j].controller_port, avoid=node_ports)
                        for i in self.nodes for j in self.voter_ids() if i != j}

    def fresh_port(self):
        """A free port no other node of this cluster was given."""
        while True:
            p = free_port()
            if p not in self.taken:
                self.taken.add(p)
                return p

    def voter_ids(self):
        return sorted(i for i, n in self.nodes.items() if n.is_controller)

    def brokers(self):
        return [n for n in self.nodes.values() if n.is_broker]

    def start(self, timeout=40):
        for node in self.nodes.values():
            node.start()
        for node in self.nodes.values():
            node.wait_ready(timeout)
        everyone = sorted(n.node_id for n in self.brokers())
        for node in self.brokers():
            wait_until(lambda: sorted(b[0] for b in node.metadata()["brokers"]) == everyone,
                       timeout, f"node {node.node_id} to list every broker")
        return self

    def running(self):
        return [n for n in self.nodes.values() if n.alive() and not n.paused]

    def isolate(self, i):
        for (a, b), p in self.proxies.items():
            if i in (a, b):
                p.set_cut(True)

    def heal(self, i):
        for (a, b), p in self.proxies.items():
            if i in (a, b):
                p.set_cut(False)

    def controller(self, among=None, timeout=20):
        """The active controller that every broker in `among` (default: running ones) agrees on
        (DescribeCluster names it; Metadata names a broker that forwards)."""
        among = among if among is not None else self.running()
        among = [n for n in among if n.is_broker]

        def agreed():
            ids = set()
            for n in among:
                ids.add(n.active_controller_id())
            if len(ids) == 1:
                (cid,) = ids
                if cid in self.nodes and cid in [n.node_id for n in among]:
                    return self.nodes[cid]
            return None

        return wait_until(agreed, timeout, f"nodes {[n.node_id for n in among]} to agree on a controller")

    def stop(self):
        """SIGTERM to every running node, broker-only ones first, then the voters together;
        each must exit 0."""
        problems = []
        for group in ([n for n in self.nodes.values() if not n.is_controller],
                      [n for n in self.nodes.values() if n.is_controller]):
            running = [n for n in group if n.alive()]
            for n in running:
                if n.paused:
                    n.resume()
                n.proc.send_signal(signal.SIGTERM)
            for n in running:
                rc = n.stop()
                if rc not in (0,):
                    problems.append(f"node {n.node_id} exit code {rc}")
        for p in self.proxies.values():
            p.close()
        return problems

    def logs(self):
        return "\n".join(f"--- node {n.node_id} ---\n{tail(n.log_path, 60)}" for n in self.nodes.values())
