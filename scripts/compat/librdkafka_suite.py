#!/usr/bin/env python3
"""librdkafka's own test suite against Gregor: the part of scripts/compat/librdkafka.sh that
plans, runs and judges the tests, and writes docs/compatibility.md. The shell script fetches and
builds librdkafka and calls this with the paths; run it through the script.

  run     start Gregor (one node, or `gregor cluster up` with --cluster; for the SASL tests a
          SASL Gregor: one node, or three `gregor broker` processes), run the chosen tests
          one test number at a time under a time limit, write the results as JSON
  report  write docs/compatibility.md from the single-node and cluster results

Every test of the suite's table (tests/test.c) gets a result: local-only, mock-cluster, sockem
and manual tests are skipped without running, with that reason; the others run against Gregor
and pass, fail (with librdkafka's failure text, and the Gregor feature a failure waits for when
it is one Gregor lacks) or skip (with the test's own reason). Traffic goes to 127.0.0.1 only.
"""

import argparse
import datetime
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# Features Gregor lacks, by test number: a failure of these tests is recorded as waiting for
# the feature (and a pass would show the feature came).
WAITS_FOR = {
    "0098": "transactions",
    "0103": "transactions",
    "0129": "transactions",
    "0126": "SASL/OAUTHBEARER with an OIDC token endpoint",
}

# What was found out about a failure, by test number, shown with it in the report.
NOTES = {
    "0011": "Sub-test test_message_single_partition_record_fail produces 100 records to a "
            "compacted topic, 10 of them without a key, and expects exactly those 10 to fail "
            "with INVALID_RECORD through the Produce response's per-record errors (KIP-467).",
    "0061": "The first sub-test (consumer lag) passes; the second produces with transactions.",
    "0081": "Every sub-test through ListConsumerGroupOffsets passes, group configs (GROUP "
            "resources) and DeleteConsumerGroupOffsets (OffsetDelete) included; on a busy "
            "machine the run used up the test's own 180 s budget in "
            "do_test_UserScramCredentials (2026-12-07, single node).",
}

# The fast subset CI runs (scripts/compat/librdkafka.sh --subset): quick tests that pass on a
# single node and cover produce, consume, consumer groups, admin, metadata, ACLs and SASL.
SUBSET = [
    "0001",  # many client instances: metadata and produce
    "0002",  # produce to an unknown partition
    "0005",  # produce order
    "0012",  # produce and consume, many partitions
    "0013",  # null messages
    "0015",  # offsets and seeks
    "0017",  # every compression codec
    "0019",  # ListGroups / DescribeGroups (run in full mode: quick mode skips it)
    "0022",  # batch consume
    "0029",  # assign with offsets
    "0031",  # ListOffsets
    "0035",  # ApiVersions
    "0040",  # io-event group consumer
    "0044",  # admin: CreateTopics and CreatePartitions, then produce
    "0063",  # cluster id and controller id
    "0099",  # commits with metadata
    "0115",  # ACLs: a producer denied a topic (kafka-acls.sh), about 5 s
    "0119",  # ACLs: a consumer denied Read on a topic (kafka-acls.sh), about 16 s
    "0135",  # SASL: SCRAM-SHA-512 login after wrong credentials, on a SASL Gregor of its own
]

ANSI = re.compile(r"\x1b\[[0-9;]*m")
SUBTEST_START = re.compile(r"^\[(\S+)\s*/\s*[0-9.]+s\]\s*\[ \w+:\d+")
SUMMARY = re.compile(r"^\|\s*(\S+)\s*\|\s*(PASSED|FAILED|SKIPPED|RUNNING|DNS)\s*\|\s*([0-9.]+)s\s*\|\s?(.*)$")


def parse_test_table(test_c):
    """The suite's tests from tests/test.c's `struct test tests[]`: name, flags, scenario,
    whether the entry is built only with sockem."""
    text = Path(test_c).read_text()
    start = text.index("struct test tests[] = {")
    body = text[start:text.index("\n};", start)]
    tests = []
    sockem_depth = []
    lines = body.splitlines()
    entry = None
    depth = 0
    for line in lines:
        s = line.strip()
        if s.startswith("#if"):
            sockem_depth.append("WITH_SOCKEM" in s)
            continue
        if s.startswith("#endif"):
            if sockem_depth:
                sockem_depth.pop()
            continue
        if s.startswith("#"):
            continue
        if entry is None:
            m = re.match(r"_TEST\(\s*(\w+)\s*,", s)
            if not m:
                continue
            entry = {"text": "", "sockem_only": any(sockem_depth)}
            depth = 0
        entry["text"] += " " + re.sub(r"/\*.*?\*/", "", s)
        depth += s.count("(") - s.count(")")
        if depth <= 0:
            t = entry["text"]
            m = re.match(r"\s*_TEST\(\s*(\w+)\s*,\s*([^,)]*)", t)
            name, flags = m.group(1), m.group(2)
            scen = re.search(r'\.scenario\s*=\s*"([^"]+)"', t)
            tests.append({
                "name": name,
                "number": name.split("_", 1)[0],
                "flags": flags.strip(),
                "scenario": scen.group(1) if scen else "default",
                "sockem_only": entry["sockem_only"],
            })
            entry = None
    return tests


def static_skip(t):
    """The reason a test is not run against Gregor at all, or None."""
    flags = t["flags"]
    if "TEST_F_MANUAL" in flags:
        return "manual test, not part of the suite's runs"
    if "TEST_F_LOCAL" in flags:
        return "local-only: needs no broker (-L leaves it out)"
    if "TEST_F_KNOWN_ISSUE" in flags and "WIN32" not in flags and "OSX" not in flags:
        return "librdkafka marks it as a known issue of its own; its runner leaves it out"
    if "mock" in t["name"]:
        return "runs against librdkafka's built-in mock cluster, not a broker"
    if "TEST_F_SOCKEM" in flags:
        return "needs sockem socket emulation (excluded with -E)"
    if scenario_of(t) not in SCENARIOS:
        return f"needs librdkafka's '{t['scenario']}' test scenario, which this run does not set up"
    return None


# The authorizer, as librdkafka's own harness runs its brokers: ACLs enforced, and a resource
# without ACLs open to everyone (the ACL tests add ACLs on their own topics only).
AUTHORIZER = [
    "authorizer.class.name=org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "allow.everyone.if.no.acl.found=true",
]

# librdkafka's test scenarios this run sets up, with the broker settings each stands for
# (tests/scenarios/*.json): the default one, and one without topic auto-creation; and `sasl`,
# not one of librdkafka's, for SASL_TESTS.
SCENARIOS = {
    "default": AUTHORIZER,
    "noautocreate": ["auto.create.topics.enable=false"],
    "sasl": [],
}

# Tests that need the cluster to take SASL logins (they skip themselves on a PLAINTEXT
# listener): they run in the `sasl` scenario, against a Gregor of their own whose test.conf logs
# in with SCRAM-SHA-512 on a SASL_PLAINTEXT listener: one `gregor broker` (the Gregor class) or,
# on a cluster, three `gregor broker` processes (SaslCluster: `gregor cluster up` has no SASL
# listener).
# The tests' own timeouts are multiplied by this, as librdkafka's CI does (its `CI` variable
# adds 2 to the default multiplier of 1).
TIMEOUT_MULTIPLIER = 3

SASL_TESTS = {"0135", "0142"}
SASL_USER, SASL_PASSWORD = "rdkafka", "rdkafka-test-secret"
SASL_SETTINGS = [
    "listener.name.sasl_plaintext.sasl.enabled.mechanisms=PLAIN,SCRAM-SHA-256,SCRAM-SHA-512",
    "listener.name.sasl_plaintext.plain.sasl.jaas.config=org.apache.kafka.common.security.plain."
    f'PlainLoginModule required user_{SASL_USER}="{SASL_PASSWORD}";',
    # 0142 re-authenticates within this lifetime (it skips without one).
    "connections.max.reauth.ms=10000",
]


def scenario_of(t):
    """The scenario a test runs in: `default` when its list names it (e.g. "default,ak23")."""
    names = [x.strip() for x in t["scenario"].split(",")]
    return "default" if "default" in names else names[0]


def free_port(avoid=()):
    while True:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            p = s.getsockname()[1]
        if p not in avoid:
            return p


def free_base_port(count):
    """A base port with `count` consecutive free ports above it (for `gregor cluster up`)."""
    import random
    for _ in range(200):
        base = random.randrange(20000, 60000 - count, 2)
        socks = []
        try:
            for p in range(base, base + count):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise SystemExit("no free block of loopback ports found")


def metadata_ok(port, want_brokers):
    """A raw Metadata v1 request to 127.0.0.1:port answers with `want_brokers` brokers."""
    import struct
    body = struct.pack(">hhih", 3, 1, 7, 6) + b"compat" + struct.pack(">i", 0)
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2) as s:
            s.sendall(struct.pack(">i", len(body)) + body)
            head = s.recv(4, socket.MSG_WAITALL)
            if len(head) < 4:
                return False
            n = struct.unpack(">i", head)[0]
            data = b""
            while len(data) < n:
                chunk = s.recv(n - len(data))
                if not chunk:
                    return False
                data += chunk
        brokers = struct.unpack(">i", data[4:8])[0]
        return brokers >= want_brokers
    except OSError:
        return False


def format_with_scram(gregor, props, text, standalone):
    """`gregor storage format --add-scram` of the tests' user, before the first start (the
    PLAIN user is in the listener's JAAS setting); `text` is the node's properties."""
    props.write_text(text)
    argv = [gregor, "storage", "format", "-c", str(props), "-t", "librdkafkaCompatTest000"]
    if standalone:
        argv.append("--standalone")
    for mech in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
        argv += ["--add-scram", f"{mech}=[name={SASL_USER},password={SASL_PASSWORD}]"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if r.returncode != 0:
        raise SystemExit(f"gregor storage format failed: {r.stderr.strip()}")


def sasl_login_settings():
    """test.conf's SCRAM-SHA-512 login on a SASL_PLAINTEXT listener."""
    return [("security.protocol", "SASL_PLAINTEXT"), ("sasl.mechanism", "SCRAM-SHA-512"),
            ("sasl.username", SASL_USER), ("sasl.password", SASL_PASSWORD)]


class Gregor:
    """Gregor for the run: one `gregor broker`, or `gregor cluster up` with three nodes."""

    def __init__(self, gregor, workdir, cluster, overrides=(), sasl=False):
        self.gregor = gregor
        self.workdir = Path(workdir)
        self.cluster = cluster
        self.sasl = sasl and not cluster
        overrides = list(overrides) + (SASL_SETTINGS if self.sasl else [])
        self.overrides = [a for o in overrides for a in ("--override", o)]
        self.proc = None
        self.log_path = self.workdir / "gregor.log"
        self.ports = []
        self.sasl_port = None
        self.starts = 0

    @property
    def bootstrap(self):
        """Where the tests connect: the SASL listener of a SASL Gregor."""
        if self.sasl:
            return f"127.0.0.1:{self.sasl_port}"
        return ",".join(f"127.0.0.1:{p}" for p in self.ports)

    def client_settings(self):
        """test.conf's login settings beside bootstrap.servers."""
        if not self.sasl:
            return []
        return sasl_login_settings()

    def argv(self):
        if self.cluster:
            # The same ports on a restart: the nodes' quorum addresses are in their data.
            if not self.ports:
                base = free_base_port(9)  # clients, quorum, metrics: 3 per node
                self.ports = [base, base + 2, base + 4]
            base = self.ports[0]
            return [self.gregor, "cluster", "up", "--nodes", "3", "--racks", "3",
                    "--base-port", str(base), "--data-dir", str(self.workdir / "data"),
                    "--override", "num.partitions=4",
                    "--override", "default.replication.factor=3", *self.overrides]
        if not self.ports:
            self.ports = [free_port()]
        listeners = f"PLAINTEXT://127.0.0.1:{self.ports[0]}"
        if self.sasl:
            if self.sasl_port is None:
                self.sasl_port = free_port(avoid=self.ports)
            listeners += f",SASL_PLAINTEXT://127.0.0.1:{self.sasl_port}"
        return [self.gregor, "broker",
                "--listeners", listeners,
                "--data-dir", str(self.workdir / "data"), "--node-id", "1",
                "--override", "num.partitions=4", *self.overrides]

    def start(self):
        self.starts += 1
        if self.sasl and not (self.workdir / "data").exists():
            format_with_scram(self.gregor, self.workdir / "format.properties",
                              f"node.id=1\nlog.dirs={self.workdir / 'data'}\n", standalone=True)
        argv = self.argv()
        with open(self.log_path, "ab") as log:
            log.write(f"\n===== start #{self.starts}: {' '.join(argv)}\n".encode())
            log.flush()
            self.proc = subprocess.Popen(argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL,
                                         cwd=self.workdir, start_new_session=True)
        deadline = time.monotonic() + 60
        want = 3 if self.cluster else 1
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise SystemExit(f"Gregor exited at start-up (code {self.proc.returncode}); "
                                 f"log: {self.log_path}")
            if all(metadata_ok(p, want) for p in self.ports):
                return
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"Gregor did not answer Metadata within 60 s; log: {self.log_path}")

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def stop(self):
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(5)


class SaslCluster:
    """Three `gregor broker` processes (broker and controller each, as `gregor cluster up --nodes
    3 --racks 3` starts them) with a SASL_PLAINTEXT listener beside PLAINTEXT, every node
    formatted with the SCRAM user before its first start."""

    NODES = 3

    def __init__(self, gregor, workdir):
        self.gregor = gregor
        self.workdir = Path(workdir)
        base = free_base_port(3 * self.NODES)  # clients, quorum, SASL clients: 3 per node
        self.nodes = [{"client": base + 3 * i, "controller": base + 3 * i + 1,
                       "sasl": base + 3 * i + 2} for i in range(self.NODES)]
        self.ports = [n["client"] for n in self.nodes]
        self.voters = ",".join(f"{i}@127.0.0.1:{n['controller']}"
                               for i, n in enumerate(self.nodes))
        self.procs = []
        self.log_path = self.workdir / "gregor-node-*.log"
        self.starts = 0

    @property
    def bootstrap(self):
        return ",".join(f"127.0.0.1:{n['sasl']}" for n in self.nodes)

    def client_settings(self):
        return sasl_login_settings()

    def listeners(self, i, sasl=True):
        n = self.nodes[i]
        plain = f"PLAINTEXT://127.0.0.1:{n['client']},CONTROLLER://127.0.0.1:{n['controller']}"
        return plain + (f",SASL_PLAINTEXT://127.0.0.1:{n['sasl']}" if sasl else "")

    def argv(self, i):
        overrides = ["num.partitions=4", "default.replication.factor=3", *SASL_SETTINGS]
        return [self.gregor, "broker", "--node-id", str(i), "--listeners", self.listeners(i),
                "--controller-quorum-voters", self.voters,
                "--data-dir", str(self.workdir / "data" / f"node-{i}"), "--rack", f"rack-{i}",
                *[a for o in overrides for a in ("--override", o)]]

    def format(self):
        for i in range(self.NODES):
            format_with_scram(
                self.gregor, self.workdir / f"format-{i}.properties",
                f"node.id={i}\nlog.dirs={self.workdir / 'data' / f'node-{i}'}\n"
                f"process.roles=broker,controller\ncontroller.quorum.voters={self.voters}\n"
                f"listeners={self.listeners(i, sasl=False)}\n", standalone=False)

    def start(self):
        """Starts every node (a restart stops the ones still running first)."""
        self.stop()
        self.starts += 1
        if not (self.workdir / "data").exists():
            self.format()
        self.procs = []
        for i in range(self.NODES):
            argv = self.argv(i)
            with open(self.workdir / f"gregor-node-{i}.log", "ab") as log:
                log.write(f"\n===== start #{self.starts}: {' '.join(argv)}\n".encode())
                log.flush()
                self.procs.append(subprocess.Popen(
                    argv, stdout=log, stderr=log, stdin=subprocess.DEVNULL, cwd=self.workdir,
                    start_new_session=True))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if not self.alive():
                self.stop()
                raise SystemExit(f"a Gregor node exited at start-up; logs: {self.log_path}")
            if all(metadata_ok(p, self.NODES) for p in self.ports):
                return
            time.sleep(0.2)
        self.stop()
        raise SystemExit(f"Gregor did not answer Metadata within 60 s; logs: {self.log_path}")

    def alive(self):
        return bool(self.procs) and all(p.poll() is None for p in self.procs)

    def stop(self):
        running = [p for p in self.procs if p.poll() is None]
        for p in running:
            p.send_signal(signal.SIGTERM)
        for p in running:
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(p.pid, signal.SIGKILL)
                p.wait(5)


def run_number(runner_dir, number, env, limit, out_path, quick=True):
    """Runs `TESTS=number ./test-runner -p1 -Q -E -L` (without -Q unless `quick`) with a time
    limit; returns (timed_out, exit code, seconds, output)."""
    argv = ["./test-runner", "-p1"] + (["-Q"] if quick else []) + ["-E", "-L"]
    e = dict(env, TESTS=number)
    t0 = time.monotonic()
    with open(out_path, "wb") as out:
        proc = subprocess.Popen(argv, cwd=runner_dir, env=e, stdout=out, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        timed_out = False
        try:
            proc.wait(limit)
        except subprocess.TimeoutExpired:
            timed_out = True
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
        except BaseException:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
            raise
    return timed_out, proc.returncode, time.monotonic() - t0, Path(out_path).read_text(errors="replace")


def clean(text, limit=300):
    text = ANSI.sub("", text).strip()
    text = re.sub(r"\s+", " ", text)
    return text if len(text) <= limit else text[:limit - 1] + "…"


def judge(names, timed_out, code, seconds, output, limit, source=""):
    """Results for the test names of one test number from the runner's output. `source` is
    the test's C/C++ source: a pass in quick mode (-Q) that ran none of its sub-tests, all of
    them full-mode only (SUB_TEST rather than SUB_TEST_QUICK), is marked as such."""
    lines = [ANSI.sub("", l) for l in output.splitlines()]
    rows = {}
    subtests = {}
    for l in lines:
        m = SUMMARY.match(l.strip())
        if m and m.group(1) in names:
            rows[m.group(1)] = (m.group(2), m.group(3), m.group(4))
        m = SUBTEST_START.match(l.strip())
        if m:
            subtests[m.group(1)] = subtests.get(m.group(1), 0) + 1
    uses_full_subtests = bool(re.search(r"\bSUB_TEST\s*\(", source))
    results = {}
    for name in names:
        if name in rows:
            state, secs, text = rows[name]
            text = clean(text)
            if state == "PASSED":
                results[name] = {"result": "pass", "reason": "", "seconds": float(secs),
                                 "subtests": subtests.get(name, 0)}
                # (Under a second: 0142 asks the brokers for a config before it finds it has
                # nothing quick to run.)
                if uses_full_subtests and not subtests.get(name) and float(secs) < 1.0:
                    results[name]["reason"] = ("vacuous in quick mode: -Q skipped its "
                                               "sub-tests (none is SUB_TEST_QUICK)")
                    results[name]["vacuous"] = True
            elif state == "SKIPPED":
                results[name] = {"result": "skip", "reason": text or "skipped by the test",
                                 "seconds": float(secs)}
                if "quick mode" in text:
                    results[name]["vacuous"] = True
            else:
                results[name] = {"result": "fail", "reason": text or f"{state.lower()}",
                                 "seconds": float(secs)}
        elif timed_out:
            why = failure_text(lines, name)
            results[name] = {"result": "fail", "seconds": seconds,
                             "reason": f"did not finish within {limit} s" +
                             (f"; {why}" if why else "")}
        else:
            why = failure_text(lines, name)
            results[name] = {"result": "fail", "seconds": seconds,
                             "reason": why or f"no result from the runner (exit code {code})"}
    return results


def failure_text(lines, name):
    """librdkafka's failure message for `name`: the line after its `### Test "NAME ..." failed
    at FILE:LINE ... ###` banner, with where it failed."""
    for i, l in enumerate(lines):
        m = re.search(r'### Test "' + re.escape(name) + r'([^"]*)" failed at (\S+?):(\d+):', l)
        if m:
            msg = clean(lines[i + 1] if i + 1 < len(lines) else "")
            where = f"{m.group(2)}:{m.group(3)}"
            sub = m.group(1).strip(" ()")
            return clean(f"{msg} (at {where}" + (f", sub-test {sub}" if sub else "") + ")")
    return ""


# A setting Gregor refuses as not supported yet names the missing feature.
UNSUPPORTED_SETTING = re.compile(r"(\S+) is not supported yet \(([^)]*)\)")


# What Gregor says when a client asks for a feature it lacks.
FEATURE_MESSAGES = [
    (re.compile(r"Unable to replicate the partition 3 time"),
     "needs: three brokers (it creates topics with replication factor 3)"),
]


def setup_skip(r):
    """A failure for want of what this run's setup lacks (three brokers on a single node) is a
    skip for that reason, not a failure of Gregor's."""
    need = r.get("waits_for", "")
    if r["result"] == "fail" and need.startswith("needs: "):
        r["result"] = "skip"
        r["reason"] = f"needs {need[len('needs: '):]}; librdkafka says: {r['reason']}"
        del r["waits_for"]


def feature_from_log(output):
    text = ANSI.sub("", output)
    m = UNSUPPORTED_SETTING.search(text)
    if m:
        return f"{m.group(1)} ({m.group(2)})"
    for pattern, feature in FEATURE_MESSAGES:
        if pattern.search(text):
            return feature
    return None


def cmd_run(args):
    tests = parse_test_table(Path(args.librdkafka) / "tests" / "test.c")
    wanted = None
    if args.subset:
        wanted = set(SUBSET)
    elif args.tests:
        wanted = {n.strip().zfill(4) for n in re.split(r"[,\s]+", args.tests) if n.strip()}
        known = {t["number"] for t in tests}
        unknown = sorted(wanted - known)
        if unknown:
            raise SystemExit(f"unknown test number(s): {', '.join(unknown)}")
    tests = [t for t in tests if wanted is None or t["number"] in wanted]

    results = {}
    to_run = {}
    for t in tests:
        reason = static_skip(t)
        if reason:
            results[t["name"]] = {"result": "skip", "reason": reason, "seconds": 0.0, "ran": False}
        else:
            scenario = scenario_of(t)
            if scenario == "default" and t["number"] in SASL_TESTS:
                scenario = "sasl"
            to_run.setdefault(scenario, {}).setdefault(t["number"], []).append(t["name"])

    workdir = Path(tempfile.mkdtemp(prefix=f"gregor-librdkafka-{args.topology}-",
                                    dir=args.workdir))

    def on_term(signum, frame):
        raise KeyboardInterrupt(f"signal {signum}")
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGHUP, on_term)

    started = time.monotonic()
    total = sum(len(v) for by in to_run.values() for v in by.values())
    runs = sum(len(by) for by in to_run.values())
    print(f"librdkafka suite on {args.topology} Gregor: {total} tests in {runs} runs, "
          f"{len(results)} skipped without running; work dir {workdir}", flush=True)
    for scenario in SCENARIOS:
        if scenario in to_run:
            sdir = workdir / scenario
            sdir.mkdir()
            run_scenario(args, scenario, to_run[scenario], sdir, results)

    counts = {k: sum(1 for r in results.values() if r["result"] == k)
              for k in ("pass", "fail", "skip")}
    doc = {
        "topology": args.topology,
        "group_protocol": args.group_protocol,
        "librdkafka": args.version,
        "date": datetime.date.today().isoformat(),
        "gregor": subprocess.run([args.gregor, "--version"], capture_output=True,
                                 text=True).stdout.strip(),
        "build": "debug" if "debug" in Path(args.gregor).as_posix() else "release",
        "seconds": round(time.monotonic() - started, 1),
        "time_limit": args.time_limit,
        "counts": counts,
        "tests": results,
    }
    if args.merge:
        # Rerun tests replace their results in a recorded run.
        old = json.loads(Path(args.results).read_text())
        old["tests"].update(results)
        old["counts"] = {k: sum(1 for r in old["tests"].values() if r["result"] == k)
                         for k in ("pass", "fail", "skip")}
        old.setdefault("reruns", []).append({"date": doc["date"], "tests": sorted(results)})
        Path(args.results).write_text(json.dumps(old, indent=1, sort_keys=True) + "\n")
        print(f"merged into {args.results}: {old['counts']}", flush=True)
    elif args.results:
        Path(args.results).parent.mkdir(parents=True, exist_ok=True)
        Path(args.results).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    failed = sorted(n for n, r in results.items() if r["result"] == "fail")
    print(f"{args.topology}: {counts['pass']} passed, {counts['fail']} failed, "
          f"{counts['skip']} skipped in {doc['seconds']:.0f} s", flush=True)
    if failed:
        print("failed: " + ", ".join(failed) + f" (logs under {workdir})", flush=True)
    else:
        shutil.rmtree(workdir, ignore_errors=True)
    return 1 if failed else 0


def run_scenario(args, scenario, numbers, workdir, results):
    """Runs the test numbers of one librdkafka scenario against a Gregor of its own."""
    runner_dir = Path(args.librdkafka) / "tests"
    cluster = args.topology == "cluster"
    if cluster and scenario == "sasl":
        gregor = SaslCluster(args.gregor, workdir)
    else:
        gregor = Gregor(args.gregor, workdir, cluster, SCENARIOS[scenario],
                        sasl=scenario == "sasl")
    try:
        gregor.start()
        conf = workdir / "test.conf"
        # librdkafka's own CI runs its tests with their timeouts tripled (`CI` set adds 2 to
        # the multiplier of 1); the same budget here, without the rest of what `CI` changes.
        conf.write_text(f"bootstrap.servers={gregor.bootstrap}\n"
                        f"test.timeout.multiplier={TIMEOUT_MULTIPLIER}\n" + "".join(
                            f"{k}={v}\n" for k, v in gregor.client_settings()))
        env = dict(os.environ)
        env.update({
            "TEST_KAFKA_VERSION": "4.0.0",
            "RDKAFKA_TEST_CONF": str(conf),
            "BROKERS": gregor.bootstrap,
            "KAFKA_PATH": str(Path(args.repo).resolve()),
            "GREGOR_BIN": args.gregor,
            "TEST_SCENARIO": "default" if scenario == "sasl" else scenario,
            # librdkafka's suite sets `group.protocol` on its consumers from this.
            "TEST_CONSUMER_GROUP_PROTOCOL": args.group_protocol,
            "LD_LIBRARY_PATH": ":".join([str(Path(args.librdkafka) / "src"),
                                         str(Path(args.librdkafka) / "src-cpp")]
                                        + ([os.environ["LD_LIBRARY_PATH"]]
                                           if os.environ.get("LD_LIBRARY_PATH") else [])),
        })
        env.pop("ZK_ADDRESS", None)
        print(f"scenario {scenario}: Gregor at {gregor.bootstrap}", flush=True)
        for number in sorted(numbers):
            names = numbers[number]
            out_path = workdir / f"{number}.log"
            timed_out, code, seconds, output = run_number(runner_dir, number, env,
                                                          args.time_limit, out_path)
            source = "".join(p.read_text(errors="replace")
                             for p in runner_dir.glob(f"{number}-*.c*"))
            got = judge(names, timed_out, code, seconds, output, args.time_limit, source)
            vacuous = [n for n, r in got.items() if r.get("vacuous")]
            if vacuous and gregor.alive():
                # Quick mode skipped everything these tests do: run them in full mode.
                full_path = workdir / f"{number}-full.log"
                timed_out, code, seconds, output = run_number(
                    runner_dir, number, env, args.time_limit, full_path, quick=False)
                full = judge(names, timed_out, code, seconds, output, args.time_limit)
                for n in vacuous:
                    r = full[n]
                    r["mode"] = "full"
                    note = "run in full mode (quick mode skips it)"
                    r["reason"] = f"{note}; {r['reason']}" if r["reason"] else note
                    r["log_full"] = str(full_path)
                    got[n] = r
            died = not gregor.alive()
            for name, r in got.items():
                r["ran"] = True
                r["scenario"] = scenario
                r["log"] = str(out_path)
                if died:
                    r["result"] = "fail"
                    r["reason"] = ("Gregor exited during this test (restarted for the next); "
                                   + r["reason"]).strip("; ")
                if r["result"] != "pass" and number in WAITS_FOR:
                    r["waits_for"] = WAITS_FOR[number]
                elif r["result"] == "fail":
                    feature = feature_from_log(Path(r.get("log_full", out_path)).read_text(
                        errors="replace"))
                    if feature:
                        r["waits_for"] = feature
                setup_skip(r)
                results[name] = r
                mark = {"pass": "ok  ", "fail": "FAIL", "skip": "skip"}[r["result"]]
                extra = f"  ({r['reason']})" if r["reason"] else ""
                print(f"{mark} {name} {r['seconds']:.1f}s{extra}", flush=True)
            if died:
                print(f"Gregor exited during {number}; restarting it (log: {gregor.log_path})",
                      flush=True)
                gregor.start()
    finally:
        gregor.stop()
        # The logs stay for a look at failures; the data (a few hundred MB to GBs) goes.
        shutil.rmtree(workdir / "data", ignore_errors=True)


def cmd_rejudge(args):
    """Judges a recorded run again from its logs (after a change to the judging)."""
    doc = json.loads(Path(args.results).read_text())
    runner_dir = Path(args.librdkafka) / "tests"
    by_log = {}
    for name, r in doc["tests"].items():
        if r.get("ran") and r.get("log") and Path(r["log"]).exists():
            by_log.setdefault(r["log"], []).append(name)
    limit = doc.get("time_limit", 300)
    for log, names in by_log.items():
        number = names[0].split("_", 1)[0]
        source = "".join(p.read_text(errors="replace")
                         for p in runner_dir.glob(f"{number}-*.c*"))
        output = Path(log).read_text(errors="replace")
        timed_out = any(doc["tests"][n]["reason"].startswith("did not finish") and
                        doc["tests"][n].get("mode") != "full" for n in names)
        got = judge(names, timed_out, None, doc["tests"][names[0]]["seconds"], output, limit,
                    source)
        full_path = Path(log).with_name(f"{number}-full.log")
        full = None
        if full_path.exists():
            full_out = full_path.read_text(errors="replace")
            full_timed_out = any(doc["tests"][n]["reason"].find("did not finish") >= 0 and
                                 doc["tests"][n].get("mode") == "full" for n in names)
            full = judge(names, full_timed_out, None, doc["tests"][names[0]]["seconds"],
                         full_out, limit)
        for n in names:
            old = doc["tests"][n]
            r, out = got[n], output
            if r.get("vacuous") and full is not None:
                r, out = full[n], full_out
                r["mode"] = "full"
                r["log_full"] = str(full_path)
                note = "run in full mode (quick mode skips it)"
                r["reason"] = f"{note}; {r['reason']}" if r["reason"] else note
            for k in ("ran", "scenario", "log"):
                if k in old:
                    r[k] = old[k]
            if r["result"] != "pass" and number in WAITS_FOR:
                r["waits_for"] = WAITS_FOR[number]
            elif r["result"] == "fail" and feature_from_log(out):
                r["waits_for"] = feature_from_log(out)
            setup_skip(r)
            doc["tests"][n] = r
    doc["counts"] = {k: sum(1 for r in doc["tests"].values() if r["result"] == k)
                     for k in ("pass", "fail", "skip")}
    Path(args.results).write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
    print(f"{args.results}: {doc['counts']}")
    return 0


def waits(feature):
    """`waits for X`, or `needs X` for what the run's setup lacks rather than Gregor."""
    if feature.startswith("needs: "):
        return "needs " + feature[len("needs: "):]
    return f"waits for {feature}"


REPO_ROOT = str(Path(__file__).resolve().parent.parent.parent)


def md(text):
    text = text.replace(REPO_ROOT + "/", "$KAFKA_PATH/")
    text = re.sub(r"127\.0\.0\.1:\d+(,127\.0\.0\.1:\d+)*(/\d+)?", "$BROKERS", text)
    text = re.sub(r"rdkafkatest_rnd[0-9a-f]+_", "rdkafkatest_rnd…_", text)
    return text.replace("|", "\\|").replace("\n", " ")


KEEP_MARKER = "<!-- Generated above this line; written by hand below it (kept when the page is regenerated). -->"


def cell(r):
    if r is None:
        return "not run"
    if r["result"] == "pass":
        return "pass"
    if r["result"] == "skip" and not r.get("ran", True):
        return "skip"
    return r["result"]


def cmd_report(args):
    tests = parse_test_table(Path(args.librdkafka) / "tests" / "test.c")
    runs = {}
    for topo, path in (("single", args.single), ("cluster", args.cluster)):
        if path and Path(path).exists():
            runs[topo] = json.loads(Path(path).read_text())
    if not runs:
        raise SystemExit("no results to report")

    def count(topo):
        if topo not in runs:
            return "not run"
        c = runs[topo]["counts"]
        return f"{c['pass']} passed, {c['fail']} failed, {c['skip']} skipped"

    some = next(iter(runs.values()))
    out = []
    out.append("# Compatibility: librdkafka's own test suite against Gregor\n")
    out.append(
        "The part of this page above the closing marker is generated by "
        "`scripts/compat/librdkafka.sh` (single node) and `scripts/compat/librdkafka.sh "
        "--cluster` (three nodes); edit the scripts, not the page. The script takes "
        "librdkafka's source from the `rdkafka-sys` crate through cargo, builds the library and "
        "its test runner under `target/compat/`, starts Gregor itself on free loopback ports "
        "and runs every broker-facing test of the suite, one test number at a time "
        "(`TESTS=<number> ./test-runner -p1 -Q -E -L`, `TEST_KAFKA_VERSION=4.0.0`, "
        "`KAFKA_PATH` = this checkout, so the tests that shell out to "
        "`$KAFKA_PATH/bin/kafka-topics.sh` run Gregor's tools, and "
        f"`test.timeout.multiplier={TIMEOUT_MULTIPLIER}` in `test.conf`, the budget librdkafka's "
        "own CI gives its tests), each under a time limit of "
        f"{args.time_limit} s. Quick mode (`-Q`) skips every sub-test not marked quick: a test "
        "that it leaves with nothing to do (a pass in no time with no sub-test run, or a skip "
        "\"due to quick mode\") is run again without `-Q`, and that result is the one shown. "
        "The tests of librdkafka's `noautocreate` scenario run against a second Gregor of the "
        "same shape with `auto.create.topics.enable=false` (`TEST_SCENARIO=noautocreate`). "
        "The default scenario's Gregor runs the authorizer as librdkafka's own harness runs "
        "its brokers (`authorizer.class.name=org.apache.kafka.metadata.authorizer."
        "StandardAuthorizer`, `allow.everyone.if.no.acl.found=true`), so the ACL tests (0081's "
        "ACL sub-tests, 0109, 0115, 0119, which add ACLs with `$KAFKA_PATH/bin/kafka-acls.sh`) "
        "run. The tests that need SASL logins (" + ", ".join(sorted(SASL_TESTS)) + ") run "
        "against a third Gregor with a SASL_PLAINTEXT listener beside PLAINTEXT (PLAIN, "
        "SCRAM-SHA-256 and SCRAM-SHA-512; a SCRAM user made with `gregor storage format "
        "--add-scram` on every node before its first start; `connections.max.reauth.ms=10000`), "
        "their `test.conf` logging in with SCRAM-SHA-512: on three nodes that Gregor is three "
        "`gregor broker` processes started by the script as `gregor cluster up --nodes 3 "
        "--racks 3` starts its nodes, with the SASL listener added (`gregor cluster up` has "
        "none). librdkafka here is built with OpenSSL, so with SCRAM and OAUTHBEARER "
        "(`--disable-sasl` only leaves out Cyrus SASL, i.e. GSSAPI).\n")
    out.append(f"- librdkafka: **{some['librdkafka']}**")
    for topo, label in (("single", "Single node (`gregor broker --override num.partitions=4`)"),
                        ("cluster", "Three nodes (`gregor cluster up --nodes 3 --racks 3`, "
                                    "`num.partitions=4`, `default.replication.factor=3`)")):
        if topo in runs:
            r = runs[topo]
            out.append(f"- {label}: **{count(topo)}** ({r['date']}, {r['gregor']} "
                       f"{r.get('build', 'release')} build, {r['seconds'] / 60:.0f} min)")
        else:
            out.append(f"- {label}: not run")
    out.append("")
    out.append(
        "Skipped without running: local-only tests (they need no broker), tests against "
        "librdkafka's built-in mock cluster, sockem (socket emulation) tests, manual tests and "
        "tests of another librdkafka test scenario. A test that runs may also skip itself "
        "(its reason is shown). A failure of a test that needs a feature Gregor lacks names "
        "the feature it waits for.\n")

    fails = []
    for topo in ("single", "cluster"):
        if topo in runs:
            for name, r in runs[topo]["tests"].items():
                if r["result"] == "fail":
                    fails.append((name, topo, r))
    if fails:
        out.append("## Failures\n")
        for name in sorted({f[0] for f in fails}):
            topos = [f[1] for f in fails if f[0] == name]
            r = next(f[2] for f in fails if f[0] == name)
            where = " and ".join("single node" if t == "single" else "cluster" for t in topos)
            why = f"{waits(r['waits_for'])}. " if r.get("waits_for") else ""
            note = args.notes.get(name.split("_", 1)[0], "") if args.notes else ""
            out.append(f"- **{name}** ({where}): {why}{md(note + ' ' if note else '')}"
                       f"librdkafka says: {md(r['reason'])}")
        out.append("")

    out.append("## Every test\n")
    out.append("| test | single node | cluster | reason |")
    out.append("| --- | --- | --- | --- |")
    for t in tests:
        name = t["name"]
        rs = {topo: runs[topo]["tests"].get(name) if topo in runs else None
              for topo in ("single", "cluster")}
        reasons = []
        for topo in ("single", "cluster"):
            r = rs[topo]
            if r and r["reason"]:
                text = r["reason"]
                if r.get("waits_for"):
                    text = f"{waits(r['waits_for'])}: {text}"
                same = [x for x in reasons
                        if md(x[1]) == md(text) or (
                            rs["single"] and rs["cluster"]
                            and rs["single"]["result"] == rs["cluster"]["result"]
                            and rs["single"].get("waits_for") == rs["cluster"].get("waits_for"))]
                if not same:
                    reasons.append((topo, text))
        if len(reasons) == 2:
            reason = "; ".join(f"{'single' if t_ == 'single' else 'cluster'}: {x}"
                               for t_, x in reasons)
        else:
            reason = reasons[0][1] if reasons else ""
        out.append(f"| {name} | {cell(rs['single'])} | {cell(rs['cluster'])} | {md(reason)} |")
    out.append("")
    # Whatever follows the marker in the existing page is written by hand and kept.
    old = Path(args.out).read_text() if Path(args.out).exists() else ""
    if KEEP_MARKER in old:
        out.append(old[old.index(KEEP_MARKER):].rstrip() + "\n")
    else:
        out.append(KEEP_MARKER + "\n")
    Path(args.out).write_text("\n".join(out))
    print(f"wrote {args.out}: single node {count('single')}; cluster {count('cluster')}")
    return 0


def main():
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run")
    r.add_argument("--librdkafka", required=True, help="the built librdkafka source tree")
    r.add_argument("--version", required=True, help="librdkafka's version, for the report")
    r.add_argument("--gregor", required=True, help="the gregor binary")
    r.add_argument("--repo", required=True, help="this checkout (KAFKA_PATH)")
    r.add_argument("--workdir", required=True, help="where Gregor's data and logs go")
    r.add_argument("--topology", choices=["single", "cluster"], default="single")
    r.add_argument("--tests", help="test numbers, comma-separated")
    r.add_argument("--subset", action="store_true", help="the fast CI subset")
    r.add_argument("--group-protocol", choices=["classic", "consumer"], default="classic",
                   help="the consumers' group.protocol (consumer: KIP-848)")
    r.add_argument("--time-limit", type=int, default=300, help="seconds per test number")
    r.add_argument("--results", help="write the results as JSON here")
    r.add_argument("--merge", action="store_true",
                   help="replace these tests' results in the --results file instead")
    r.set_defaults(func=cmd_run)
    j = sub.add_parser("rejudge")
    j.add_argument("--librdkafka", required=True)
    j.add_argument("--results", required=True)
    j.set_defaults(func=cmd_rejudge)
    q = sub.add_parser("report")
    q.add_argument("--librdkafka", required=True)
    q.add_argument("--single")
    q.add_argument("--cluster")
    q.add_argument("--time-limit", type=int, default=300)
    q.add_argument("--out", required=True)
    q.set_defaults(func=cmd_report, notes=NOTES)
    args = p.parse_args()
    try:
        sys.exit(args.func(args))
    except KeyboardInterrupt as e:
        print(f"interrupted ({e})", file=sys.stderr)
        sys.exit(130)


if __name__ == "__main__":
    main()
