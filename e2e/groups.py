"""Consumer-group members driven from threads (confluent-kafka, kafka-python) or from a separate
process (to SIGKILL it), all recording their rebalance callbacks on one shared timeline.

The timeline replays ownership as the application sees it: a partition is owned from the start of
the assign callback that grants it until the revoke / lost callback that takes it away. Two
members owning one partition at the same moment is a violation, unless the earlier owner later
learns it *lost* the partition (the client's way of saying "you were kicked out, stop using it"),
or the earlier owner was SIGKILLed.
"""

import json
import os
import signal
import subprocess
import sys
import threading
import traceback
import time
from collections import defaultdict, namedtuple

from confluent_kafka import Consumer, KafkaError

from conftest import E2E, wait_until

Event = namedtuple("Event", "t member kind parts")

ASSIGN, REVOKE, LOST, GONE = "assign", "revoke", "lost", "gone"


class Timeline:
    def __init__(self):
        self.lock = threading.Lock()
        self.t0 = time.monotonic()
        self.events = []
        self.owned = defaultdict(set)
        self._overlaps = []  # (t, partition, earlier owner, new owner)

    def record(self, member, kind, parts):
        parts = frozenset(parts)
        with self.lock:
            t = time.monotonic()
            self.events.append(Event(t, member, kind, parts))
            if kind == ASSIGN:
                for p in parts:
                    for other, held in self.owned.items():
                        if other != member and p in held:
                            self._overlaps.append((t, p, other, member))
                self.owned[member] |= parts
            else:
                self.owned[member] -= parts

    def snapshot(self):
        with self.lock:
            return {m: frozenset(s) for m, s in self.owned.items()}

    def events_of(self, member, kind=None, since=None):
        with self.lock:
            return [e for e in self.events if e.member == member
                    and (kind is None or e.kind == kind) and (since is None or e.t >= since)]

    def now(self):
        return time.monotonic()

    def violations(self):
        """Overlaps not excused by a later `lost` (or SIGKILL) of the earlier owner."""
        with self.lock:
            out = []
            for t, p, old, new in self._overlaps:
                release = next((e for e in self.events
                                if e.t >= t and e.member == old and e.kind != ASSIGN
                                and p in e.parts), None)
                if release is None or release.kind not in (LOST, GONE):
                    how = release.kind if release else "never released"
                    out.append(f"{p} assigned to {new} at +{t - self.t0:.2f}s while {old} still "
                               f"owned it ({old} released it by: {how})")
            return out

    def dump(self):
        with self.lock:
            return "\n".join(f"+{e.t - self.t0:7.3f}s {e.member:>3} {e.kind:<6} {sorted(e.parts)}"
                             for e in self.events)


def tps(parts):
    return frozenset((p.topic, p.partition) for p in parts)


def wait_for_owners(timeline, expect, timeout, what):
    """Waits until `expect(snapshot)` holds; returns the snapshot."""
    def check():
        snap = timeline.snapshot()
        return snap if expect(snap) else None

    return wait_until(check, timeout, lambda: f"{what}; timeline at the deadline:\n"
                      f"{timeline.dump()}\n{member_thread_stacks()}")


def member_thread_stacks():
    """Where each client thread of this process is (kafka-python and confluent-kafka members and
    their clients' own threads): a member that stops heartbeating without an error shows here
    what it is stuck in."""
    me = threading.get_ident()
    frames = sys._current_frames()
    out = []
    for t in threading.enumerate():
        frame = frames.get(t.ident)
        if t.ident == me or frame is None:
            continue
        out.append(f"--- thread {t.name}:\n" + "".join(traceback.format_stack(frame, limit=12)))
    return "\n".join(out)


def partition_of(snap, members, universe):
    """True when `members` own disjoint sets that together cover `universe` exactly."""
    seen = set()
    for m in members:
        s = snap.get(m, frozenset())
        if s & seen:
            return False
        seen |= s
    return seen == set(universe)


GROUP_TIMINGS = {
    "session.timeout.ms": 6000,
    "heartbeat.interval.ms": 500,
    "max.poll.interval.ms": 30000,
}


# What a member's poll() may report without the test failing: a subscribed topic its metadata
# does not list yet (a topic just created).
MEMBER_TOLD = {KafkaError.UNKNOWN_TOPIC_OR_PART, KafkaError._UNKNOWN_TOPIC}


class ConfluentMember:
    """A confluent-kafka consumer polling in its own thread. `stall()` stops the polling (the
    application thread is busy), `resume()` restarts it. Callbacks record on the timeline."""

    def __init__(self, broker, timeline, name, group, topics, strategy, extra=None):
        self.timeline = timeline
        self.name = name
        self.topics = topics
        self.conf = {
            "bootstrap.servers": broker.bootstrap,
            "broker.address.family": "v4",
            "group.id": group,
            "client.id": name,
            "partition.assignment.strategy": strategy,
            "enable.auto.commit": False,
            "auto.offset.reset": "earliest",
            **{k: v for k, v in GROUP_TIMINGS.items()},
            **(extra or {}),
        }
        if self.conf.get("group.protocol") == "consumer":
            # KIP-848: the broker assigns and sets the timings; librdkafka refuses these.
            for k in ("partition.assignment.strategy", "session.timeout.ms",
                      "heartbeat.interval.ms"):
                self.conf.pop(k, None)
        self.member_id = None
        self.errors = []  # errors poll() returned, judged by stop()
        self.stalled = False  # stall() was called: "max poll interval exceeded" is expected
        self.messages = 0
        self._stop = threading.Event()
        self._polling = threading.Event()
        self._polling.set()
        self.closed_at = None
        self.close_started = None
        self.exc = None
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _on_assign(self, c, parts):
        self.member_id = c.memberid()
        self.timeline.record(self.name, ASSIGN, tps(parts))

    def _on_revoke(self, c, parts):
        self.timeline.record(self.name, REVOKE, tps(parts))

    def _on_lost(self, c, parts):
        self.timeline.record(self.name, LOST, tps(parts))

    def _run(self):
        try:
            c = Consumer(self.conf)
            c.subscribe(self.topics, on_assign=self._on_assign, on_revoke=self._on_revoke,
                        on_lost=self._on_lost)
            while not self._stop.is_set():
                if not self._polling.is_set():
                    self._polling.wait(0.05)  # the application thread is "busy": no poll()
                    continue
                msg = c.poll(0.05)
                if msg is not None:
                    if msg.error():
                        self.errors.append(msg.error())
                    else:
                        self.messages += 1
            self.close_started = time.monotonic()
            c.close()
            self.closed_at = time.monotonic()
        except Exception as e:  # surfaced by stop()
            self.exc = e

    def stall(self):
        self.stalled = True
        self._polling.clear()

    def resume(self):
        self._polling.set()

    def stop(self, timeout=20):
        self._stop.set()
        self._polling.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"member {self.name} did not close within {timeout}s"
        assert self.exc is None, f"member {self.name} failed: {self.exc!r}"
        told = MEMBER_TOLD | ({KafkaError._MAX_POLL_EXCEEDED} if self.stalled else set())
        unexpected = [e for e in self.errors if e.code() not in told]
        assert not unexpected, f"member {self.name} was told: {unexpected[:5]}"


class KafkaPythonMember:
    """A kafka-python consumer in its own thread (kafka-python implements its own assignors,
    including the eager StickyPartitionAssignor)."""

    def __init__(self, broker, timeline, name, group, topics, assignors, extra=None):
        from kafka.consumer.subscription_state import ConsumerRebalanceListener

        member = self

        class Listener(ConsumerRebalanceListener):
            def on_partitions_revoked(self, revoked):
                member.timeline.record(member.name, REVOKE, tps(revoked))

            def on_partitions_assigned(self, assigned):
                member.timeline.record(member.name, ASSIGN, tps(assigned))

            def on_partitions_lost(self, lost):
                member.timeline.record(member.name, LOST, tps(lost))

        self.listener = Listener()
        self.timeline = timeline
        self.name = name
        self.topics = topics
        self.kwargs = dict(
            bootstrap_servers=broker.bootstrap, group_id=group, client_id=name,
            partition_assignment_strategy=assignors, enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=GROUP_TIMINGS["session.timeout.ms"],
            heartbeat_interval_ms=GROUP_TIMINGS["heartbeat.interval.ms"],
            max_poll_interval_ms=GROUP_TIMINGS["max.poll.interval.ms"],
            request_timeout_ms=40000,
            # A leader that assigned with metadata lacking a just-created topic ("No partition
            # metadata", then nothing assigned) sees it at the next refresh and rejoins; the
            # default refresh is 5 minutes.
            metadata_max_age_ms=1000,
        )
        self.kwargs.update(extra or {})
        self._stop = threading.Event()
        self.exc = None
        self.errors = []
        self.thread = threading.Thread(target=self._run, name=f"kp-member-{name}", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        from kafka import KafkaConsumer
        try:
            c = KafkaConsumer(**self.kwargs)
            # Learn the topics' partitions before joining: a leader whose metadata lacks a
            # subscribed topic assigns nothing of it ("No partition metadata") and, under load,
            # may not rejoin within a test's wait.
            deadline = time.monotonic() + 5
            while any(not c.partitions_for_topic(t) for t in self.topics):
                if time.monotonic() > deadline or self._stop.is_set():
                    break
                time.sleep(0.05)
            c.subscribe(topics=self.topics, listener=self.listener)
            while not self._stop.is_set():
                c.poll(timeout_ms=50)
            c.close()
        except Exception as e:
            # Shown with the test's captured output: a member whose thread died stops
            # heartbeating, and the test then only sees its session expire.
            traceback.print_exc()
            self.exc = e

    def stop(self, timeout=20):
        self._stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"member {self.name} did not close within {timeout}s"
        assert self.exc is None, f"member {self.name} failed: {self.exc!r}"


class ProcessMember:
    """A consumer in a child process (e2e/member_proc.py) so that it can be SIGKILLed. Its
    callbacks arrive as JSON lines on stdout and are recorded on the shared timeline."""

    def __init__(self, broker, timeline, name, group, topic, lib, strategy, session_ms,
                 heartbeat_ms, max_poll_ms=None):
        self.timeline = timeline
        self.name = name
        self.argv = [sys.executable, str(E2E / "member_proc.py"),
                     "--bootstrap", broker.bootstrap, "--group", group, "--topic", topic,
                     "--lib", lib, "--strategy", strategy, "--name", name,
                     "--session-ms", str(session_ms), "--heartbeat-ms", str(heartbeat_ms)]
        if max_poll_ms is not None:
            self.argv += ["--max-poll-ms", str(max_poll_ms)]
        self.proc = None
        self.lines = []
        self.reader = None

    def start(self):
        self.proc = subprocess.Popen(self.argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, cwd=E2E)
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()
        return self

    def _read(self):
        for line in self.proc.stdout:
            self.lines.append(line)
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            self.timeline.record(self.name, ev["kind"],
                                 [(t, p) for t, p in ev["partitions"]])

    def kill(self):
        """SIGKILL; from now on the member owns nothing (it cannot consume any more)."""
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(5)
        self.reader.join(5)
        self.timeline.record(self.name, GONE, self.timeline.snapshot().get(self.name, ()))

    def pause(self):
        """SIGSTOP: the whole client freezes (a long GC pause, a stuck host): no heartbeats, no
        rejoin, no LeaveGroup."""
        os.kill(self.proc.pid, signal.SIGSTOP)

    def resume(self):
        os.kill(self.proc.pid, signal.SIGCONT)

    def cleanup(self):
        if self.proc and self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGCONT)
            self.proc.kill()
            self.proc.wait(5)

    def stop(self, timeout=5):
        self.cleanup()

    def stderr(self):
        try:
            return self.proc.stderr.read() if self.proc and self.proc.poll() is not None else ""
        except ValueError:
            return ""
