"""Fixtures: a real `gregor broker` process per test, on a free 127.0.0.1 port, with its own data
directory; helpers to restart it on the same directory, SIGKILL it, and wait for conditions.

Every wait has a deadline. A test body is also bounded by SIGALRM (marker `timeout(seconds)`,
default 90 s) so that nothing hangs the suite.
"""

import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import pytest
from confluent_kafka import KafkaException

import kwire

REPO = Path(__file__).resolve().parent.parent
E2E = Path(__file__).resolve().parent

# Settings that make a one-node cluster fast to test against. Kafka names, passed with --override.
FAST_SETTINGS = {
    "group.initial.rebalance.delay.ms": "0",
    "group.min.session.timeout.ms": "1000",
    "offsets.topic.num.partitions": "5",
    "num.partitions": "1",
    "auto.create.topics.enable": "true",
}

DEFAULT_TEST_TIMEOUT = 90


def gregor_bin():
    path = os.environ.get("GREGOR_BIN") or str(REPO / "target" / "debug" / "gregor")
    # The broker runs in the test's own directory: a relative GREGOR_BIN means the caller's.
    path = os.path.abspath(path)
    if not os.access(path, os.X_OK):
        pytest.fail(f"gregor binary not found at {path}: run `cargo build -p gregor-cli` "
                    "or set GREGOR_BIN", pytrace=False)
    return path


_HANDED_OUT = set()


def free_port():
    """A port free now and never handed out before in this run: the kernel may offer a port
    it just gave again, so two calls in a row (a broker's listener and its metrics listener)
    could otherwise get the same one."""
    while True:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port


class NotYet(Exception):
    """Raised by a wait condition (or a helper it calls) for a state that is expected to pass:
    e.g. a node that has not learned a just-created topic yet. `wait_until` retries it."""


# What a condition may legitimately raise while the cluster settles: a refused or reset
# connection, a closed socket, a client's transient error, a state not reached yet. Never an
# AssertionError: an invariant that fails inside a condition fails the test at once.
TRANSIENT = (OSError, kwire.Closed, KafkaException, NotYet)


def wait_until(cond, timeout, what, interval=0.05, transient=TRANSIENT):
    """Polls `cond()` until it returns a truthy value (returned); fails the test at the deadline.
    `what` names what was awaited: a string, or a function giving one at the deadline (for a
    message that shows the state the test ended in, not the one it started waiting in).
    Exceptions in `transient` count as "not yet"; any other propagates at once."""
    deadline = time.monotonic() + timeout
    last_exc = None
    while True:
        try:
            v = cond()
            if v:
                return v
        except transient as e:
            last_exc = e
        if time.monotonic() >= deadline:
            extra = f" (last error: {last_exc!r})" if last_exc else ""
            what = what() if callable(what) else what
            pytest.fail(f"timed out after {timeout:.1f}s waiting for {what}{extra}", pytrace=False)
        time.sleep(interval)


def eventually(cond, timeout, interval=0.02):
    """Polls `cond()` for up to `timeout` seconds; returns whether it became true."""
    deadline = time.monotonic() + timeout
    while True:
        if cond():
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(interval)


# Every broker process started during the current test (conftest.Broker, cluster.Node), judged at
# teardown by `broker_processes_judged`.
_STARTED = []


def track(owner):
    """Registers a broker owner (with .proc, .log_path, .label, .killed, .exit_problems) for the
    end-of-test check. Called by start(), which first judges the process it replaces."""
    if owner not in _STARTED:
        _STARTED.append(owner)


def exit_problem(owner):
    """Why the owner's (exited) process ended wrongly, or None: only a clean exit (0) or the
    test's own SIGKILL are right."""
    rc = owner.proc.returncode
    if rc == 0 or (owner.killed and rc == -signal.SIGKILL):
        return None
    return f"{owner.label} exited with code {rc} without the test killing it"


def panics(path, context=15):
    """The log's Rust panics ("panicked at" and the lines after it), or []."""
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    return ["\n".join(lines[i:i + context]) for i, line in enumerate(lines)
            if "panicked at" in line]


def tail(path, limit=200):
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError as e:
        return f"<no log: {e}>"
    cut = lines[-limit:]
    head = f"... ({len(lines) - limit} earlier lines in {path})\n" if len(lines) > limit else ""
    return head + "\n".join(cut)


class Broker:
    """One `gregor broker` process. restart() keeps the port and data directory."""

    def __init__(self, workdir, name="broker", node_id=1, overrides=None, port=None):
        self.bin = gregor_bin()
        self.workdir = Path(workdir)
        self.name = name
        self.node_id = node_id
        self.port = port or free_port()
        self.data_dir = self.workdir / f"{name}-data"
        self.overrides = dict(FAST_SETTINGS)
        self.overrides.update(overrides or {})
        self.proc = None
        self.starts = 0
        self.log_path = self.workdir / f"{name}.stderr.log"
        self.label = f"broker {name}"
        self.killed = False  # the current process was SIGKILLed by the test
        self.exit_problems = []  # earlier processes of this broker that ended wrongly

    @property
    def bootstrap(self):
        return f"127.0.0.1:{self.port}"

    def argv(self):
        argv = [self.bin, "broker",
                "--listeners", f"PLAINTEXT://127.0.0.1:{self.port}",
                "--data-dir", str(self.data_dir),
                "--node-id", str(self.node_id)]
        for k, v in self.overrides.items():
            argv += ["--override", f"{k}={v}"]
        return argv

    def start(self, timeout=20):
        assert self.proc is None or self.proc.poll() is not None, "already running"
        if self.proc is not None and exit_problem(self):
            self.exit_problems.append(exit_problem(self))
        self.killed = False
        track(self)
        self.starts += 1
        log = open(self.log_path, "ab")
        log.write(f"\n===== start #{self.starts}: {' '.join(self.argv())}\n".encode())
        log.flush()
        env = dict(os.environ)
        env.setdefault("RUST_BACKTRACE", "1")
        self.proc = subprocess.Popen(self.argv(), stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                     cwd=self.workdir, env=env)
        log.close()
        self.wait_ready(timeout)
        return self

    def check_alive(self):
        rc = self.proc.poll() if self.proc else None
        if rc is not None:
            pytest.fail(f"broker {self.name} exited with code {rc}\n--- stderr ---\n"
                        f"{tail(self.log_path)}", pytrace=False)

    def wait_ready(self, timeout):
        deadline = time.monotonic() + timeout

        def tcp_accepts():
            self.check_alive()
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5).close()
                return True
            except OSError:
                return False

        wait_until(tcp_accepts, timeout, f"broker {self.name} to listen on {self.bootstrap}")

        # Readiness is judged with a minimal raw Metadata v1 (kwire.py) rather than a client
        # library, so that a client-specific incompatibility fails the tests that hit it, with
        # their own message, instead of every fixture timing out.
        def answers_metadata():
            self.check_alive()
            with kwire.Conn("127.0.0.1", self.port, timeout=2) as c:
                return any(b[0] == self.node_id for b in kwire.metadata_v1_brokers(c))

        wait_until(answers_metadata, max(1.0, deadline - time.monotonic()),
                   f"broker {self.name} to answer Metadata with itself (node {self.node_id})")

    def stop(self, timeout=10):
        """SIGTERM and wait; returns the exit code (None if it had to be SIGKILLed)."""
        if self.proc is None or self.proc.poll() is not None:
            return self.proc.returncode if self.proc else 0
        self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
            return None

    def kill(self):
        """SIGKILL: no chance to flush or close anything."""
        if self.proc and self.proc.poll() is None:
            self.killed = True
            self.proc.kill()
            self.proc.wait(5)

    def restart(self, kill=False, timeout=20):
        if kill:
            self.kill()
        else:
            rc = self.stop()
            assert rc == 0, f"broker {self.name} did not exit 0 on SIGTERM (rc={rc})"
        self.start(timeout)
        return self

# The attribute that holds each extra listener's port (`ListenersBroker`).
LISTENER_PORTS = {"SSL": "ssl_port", "SASL_PLAINTEXT": "sasl_port", "SASL_SSL": "sasl_ssl_port"}


class ListenersBroker(Broker):
    """A broker with PLAINTEXT on `port` (the fixtures' readiness check) and, after it, one more
    listener per security protocol in `extra`, each on a free port of its own: `ssl_port`,
    `sasl_port` (SASL_PLAINTEXT) or `sasl_ssl_port`."""

    def __init__(self, workdir, overrides=None, extra=(), name="broker"):
        super().__init__(workdir, name=name, overrides=overrides)
        self.extra = list(extra)
        for protocol in self.extra:
            setattr(self, LISTENER_PORTS[protocol], free_port())

    def argv(self):
        argv = super().argv()
        i = argv.index("--listeners") + 1
        argv[i] = ",".join([argv[i]] + [
            f"{p}://127.0.0.1:{getattr(self, LISTENER_PORTS[p])}" for p in self.extra])
        return argv



@pytest.fixture
def start_broker(request, tmp_path):
    """Factory: start_broker(overrides={...}) starts a broker; all are stopped at teardown with
    SIGTERM and must exit 0 within 10 s."""
    brokers = []
    request.node._gregor_brokers = brokers

    def start(name=None, overrides=None, timeout=20):
        b = Broker(tmp_path, name=name or f"broker{len(brokers)}", overrides=overrides)
        brokers.append(b)
        return b.start(timeout)

    yield start

    problems = []
    for b in brokers:
        if b.proc is None:
            continue
        rc = b.proc.poll()
        if rc is not None and b.proc.returncode not in (0, -signal.SIGKILL):
            problems.append(f"{b.name} exited by itself with code {rc} during the test")
            continue
        if rc is None:
            t0 = time.monotonic()
            rc = b.stop(timeout=10)
            if rc != 0:
                problems.append(f"{b.name} did not exit 0 within 10 s of SIGTERM "
                                f"(rc={rc}, after {time.monotonic() - t0:.1f}s)")
    if problems:
        logs = "\n".join(f"--- {b.name} stderr ---\n{tail(b.log_path)}" for b in brokers)
        pytest.fail("; ".join(problems) + "\n" + logs, pytrace=False)


@pytest.fixture(autouse=True)
def broker_processes_judged():
    """Every test fails if a broker process it started logged a panic, or ended other than by a
    clean stop (exit 0) or the test's own SIGKILL. Autouse: set up first, so it runs after the
    other fixtures have stopped their brokers; one still running is stopped here (SIGTERM)."""
    _STARTED.clear()
    yield
    owners = list(_STARTED)
    _STARTED.clear()
    problems = []
    for o in owners:
        problems += o.exit_problems
        if o.proc.poll() is None:
            o.proc.send_signal(signal.SIGCONT)
            o.proc.send_signal(signal.SIGTERM)
            try:
                o.proc.wait(20)
            except subprocess.TimeoutExpired:
                o.proc.kill()
                o.proc.wait(5)
                problems.append(f"{o.label} was left running and did not exit on SIGTERM")
        if exit_problem(o):
            problems.append(exit_problem(o))
        problems += [f"{o.label} panicked:\n{p}" for p in panics(o.log_path)]
    if problems:
        pytest.fail("\n".join(problems), pytrace=False)


@pytest.fixture
def broker(start_broker):
    """A fresh single-node broker with FAST_SETTINGS."""
    return start_broker()


@pytest.fixture
def cluster_factory(request, tmp_path):
    """Factory: cluster_factory(n, overrides=..., racks=..., brokers=..., controller_only=...)
    starts a cluster (cluster.py); at teardown every running node gets SIGTERM and must exit 0
    (reported with the nodes' logs unless the test already failed)."""
    from cluster import Cluster

    made = []

    def make(n=3, **kw):
        c = Cluster(tmp_path, n, **kw)
        made.append(c)
        return c.start()

    yield make
    failed = request.node.rep_call.failed if hasattr(request.node, "rep_call") else False
    for c in made:
        logs = c.logs()
        problems = c.stop()
        if problems and not failed:
            pytest.fail("; ".join(problems) + "\n" + logs, pytrace=False)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    # Fixtures look at the test's outcome at teardown (cluster_factory).
    setattr(item, "rep_" + rep.when, rep)
    if rep.failed:
        for b in getattr(item, "_gregor_brokers", []):
            rep.sections.append((f"gregor {b.name} stderr ({rep.when})", tail(b.log_path)))


class BodyTimeout(BaseException):
    """Not an Exception: no `except Exception` in a test or helper may swallow the bound."""


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_call(item):
    marker = item.get_closest_marker("timeout")
    seconds = marker.args[0] if marker else DEFAULT_TEST_TIMEOUT

    def on_alarm(signum, frame):
        raise BodyTimeout(f"test body exceeded its {seconds}s bound")

    old = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, old)
