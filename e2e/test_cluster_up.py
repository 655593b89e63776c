"""`gregor cluster up` supervising its nodes: a node that dies leaves the others serving, `gregor
cluster restart-node` brings it back, and Ctrl-C stops the whole cluster within two seconds,
quietly."""

import os
import re
import signal
import socket
import subprocess
import threading
import time
import types

import pytest

import clients
import kwire
from conftest import free_port, gregor_bin, wait_until
from test_metrics import http_get, scrape


def _ports_free(base, count):
    for port in range(base, base + count):
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                return False
    return True


def _base_port(nodes):
    # A cluster takes 3N consecutive ports from --base-port on; pick a base whose are free now.
    while True:
        base = free_port()
        if base + 3 * nodes < 65536 and _ports_free(base, 3 * nodes):
            return base


class ClusterUp:
    """A `gregor cluster up` process, its output collected line by line by a thread."""

    def __init__(self, tmp_path, nodes=3):
        self.nodes = nodes
        self.base = _base_port(nodes)
        self.data_dir = tmp_path / "cluster"
        self.lines = []
        self.proc = subprocess.Popen(
            [gregor_bin(), "cluster", "up", "--nodes", str(nodes), "--base-port", str(self.base),
             "--data-dir", str(self.data_dir),
             "--override", "controller.quorum.election.timeout.ms=500"],
            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)

    def output(self):
        return "".join(self.lines)

    def wait_up(self, timeout=60):
        wait_until(lambda: "bootstrap servers:" in self.output() or self.proc.poll() is not None,
                   timeout, lambda: "the cluster to be up:\n" + self.output()[-3000:])
        assert self.proc.poll() is None, "cluster up exited early:\n" + self.output()[-3000:]

    def pid(self, node):
        """Node's process id, from the banner or the latest restart line."""
        pids = re.findall(rf"^node {node}: pid (\d+)|^node {node} started again \(pid (\d+)\)",
                          self.output(), re.M)
        assert pids, self.output()[-3000:]
        return int(next(p for p in pids[-1] if p))

    def address(self, node):
        return f"127.0.0.1:{self.base + 2 * node}"

    def live_brokers(self, node):
        host, port = self.address(node).split(":")
        with kwire.Conn(host, int(port), timeout=5) as c:
            return sorted(b[0] for b in kwire.metadata_v1(c)["brokers"])

    def stop(self):
        """Ctrl-C, and SIGKILL if that did not do (its nodes then stop on their own)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)


def _gone(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # Still in the process table: gone only if it is a zombie nobody has reaped yet.
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


def _warnings(text):
    return [l for l in text.splitlines() if re.search(r"\b(WARN|ERROR)\b", l)]


def _without_time(line):
    return re.sub(r"\d{4}-\d\d-\d\dT[\d:.]+Z", "", line)


@pytest.mark.timeout(150)
def test_a_dead_node_leaves_the_others_serving_restarts_and_ctrl_c_stops_all(tmp_path):
    cluster = ClusterUp(tmp_path)
    try:
        cluster.wait_up()
        pids = {i: cluster.pid(i) for i in range(3)}
        # Metrics ports derive from --base-port: BASE+2N+i, and each is that node's listener:
        # its /metrics reports node i's own data directory.
        for i in range(3):
            port = cluster.base + 6 + i
            assert f"node {i}: pid {pids[i]}, metrics http://127.0.0.1:{port}" \
                in cluster.output()
            assert http_get(port, "/healthz")[0] == 200
            dirs = [ls["log_dir"] for n, ls, _ in scrape(port) if n == "gregor_log_dir_free_bytes"]
            assert dirs == [str(cluster.data_dir / f"node-{i}")], (i, dirs)
        with kwire.Conn("127.0.0.1", cluster.base, timeout=35) as c:
            assert kwire.create_topic(c, "kept", 3, 3)[0] == 0
        boot = types.SimpleNamespace(bootstrap=f"{cluster.address(0)},{cluster.address(2)}")
        clients.wait_for_partitions(boot, "kept", 3, timeout=20)

        os.kill(pids[1], signal.SIGKILL)
        wait_until(lambda: "node 1 exited" in cluster.output(), 10,
                   "cluster up to notice node 1's exit")
        assert cluster.proc.poll() is None, cluster.output()[-3000:]
        assert "the other nodes keep running" in cluster.output()
        wait_until(lambda: cluster.live_brokers(0) == [0, 2], 20, "node 1 to be fenced")
        # The two others keep serving a real client; acks=1 since node 1 is still in the ISR
        # until the leaders shrink it.
        delivered = clients.produce(boot, "kept", [{"value": f"v{n}".encode()}
                                                   for n in range(30)], extra={"acks": "1"})
        assert len(delivered) == 30

        restart = subprocess.run(
            [gregor_bin(), "cluster", "restart-node", "1", "--data-dir", str(cluster.data_dir),
             "--timeout", "60"],
            capture_output=True, text=True, timeout=90)
        assert restart.returncode == 0, restart.stdout + restart.stderr + cluster.output()[-3000:]
        assert "node 1 rejoined" in restart.stdout, restart.stdout
        new_pid = cluster.pid(1)
        assert new_pid != pids[1]
        pids[1] = new_pid
        # Registered and unfenced again: every node lists it.
        for i in range(3):
            wait_until(lambda: cluster.live_brokers(i) == [0, 1, 2], 20,
                       f"node {i} to list node 1 again")
        # A node that is up cannot be restarted twice at once, and unknown nodes are refused.
        bad = subprocess.run(
            [gregor_bin(), "cluster", "restart-node", "7", "--data-dir", str(cluster.data_dir)],
            capture_output=True, text=True, timeout=30)
        assert bad.returncode != 0 and "no node 7" in bad.stderr, bad.stderr

        before = len(cluster.lines)
        t0 = time.monotonic()
        cluster.proc.send_signal(signal.SIGINT)
        cluster.proc.wait(10)
        took = time.monotonic() - t0
        cluster.reader.join(5)
        assert took < 2.0, f"cluster up took {took:.2f}s to stop:\n{cluster.output()[-3000:]}"
        assert all(_gone(p) for p in pids.values()), pids
        assert cluster.proc.returncode == 0, cluster.output()[-3000:]
        stopping = "".join(cluster.lines[before:])
        assert "all nodes stopped" in stopping, stopping[-3000:]
        assert stopping.count("broker stopped cleanly") == 3, stopping[-3000:]
        # A whole-cluster stop is a normal event: the node stopped last may say once per peer
        # that it is gone, but nothing repeats and nothing floods.
        warnings = _warnings(stopping)
        assert len(warnings) <= 4, stopping[-3000:]
        assert len(set(map(_without_time, warnings))) == len(warnings), warnings
        assert not (cluster.data_dir / "control.sock").exists()
    finally:
        cluster.stop()


def test_restart_node_without_a_running_cluster_names_the_socket(tmp_path):
    out = subprocess.run(
        [gregor_bin(), "cluster", "restart-node", "0", "--data-dir", str(tmp_path)],
        capture_output=True, text=True, timeout=30)
    assert out.returncode == 1
    assert "control.sock" in out.stderr and "is it running" in out.stderr, out.stderr


@pytest.mark.timeout(60)
def test_a_node_that_cannot_start_stops_the_others_and_fails_the_command(tmp_path):
    base = _base_port(3)
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", base + 2))  # node 1's client port
        taken.listen()
        out = subprocess.run(
            [gregor_bin(), "cluster", "up", "--nodes", "3", "--base-port", str(base),
             "--data-dir", str(tmp_path / "cluster")],
            capture_output=True, text=True, timeout=45)
    assert out.returncode == 1, out.stdout[-3000:] + out.stderr
    assert "node 1 exited during start-up" in out.stderr, out.stderr
    assert f"cannot listen on 127.0.0.1:{base + 2}" in out.stdout, out.stdout[-3000:]
    assert "stopping 2 nodes" in out.stdout, out.stdout[-3000:]
    assert not (tmp_path / "cluster" / "control.sock").exists()


def test_a_second_cluster_up_on_a_running_clusters_directory_is_refused(tmp_path):
    cluster = ClusterUp(tmp_path)
    try:
        wait_until(lambda: (cluster.data_dir / "control.sock").exists(), 30,
                   "the control socket")
        out = subprocess.run(
            [gregor_bin(), "cluster", "up", "--base-port", str(_base_port(3)),
             "--data-dir", str(cluster.data_dir)],
            capture_output=True, text=True, timeout=30)
        assert out.returncode == 1
        assert "another `gregor cluster up` is running on" in out.stderr, out.stderr
        assert cluster.proc.poll() is None
    finally:
        cluster.stop()


@pytest.mark.timeout(90)
def test_nodes_stop_on_their_own_when_cluster_up_is_killed(tmp_path):
    cluster = ClusterUp(tmp_path)
    try:
        cluster.wait_up()
        pids = [cluster.pid(i) for i in range(3)]
        cluster.proc.kill()
        cluster.proc.wait(10)
        # Each node got SIGTERM from the kernel when its parent died: none lives on, holding
        # its ports.
        wait_until(lambda: all(_gone(p) for p in pids), 30,
                   lambda: f"the orphaned nodes {pids} to stop")
    finally:
        cluster.stop()
