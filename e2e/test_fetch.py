"""Fetch purgatory behaviour as a consumer sees it: parked fetches complete as soon as data
arrives, wait out fetch.wait.max.ms otherwise, and do not get in the way of admin operations."""

import threading
import time

from confluent_kafka import OFFSET_END, Consumer, TopicPartition
from confluent_kafka.admin import OffsetSpec

import kwire
from clients import admin, conf, consume, create_topic, produce, result, watermarks
from conftest import eventually, wait_until


class Tail:
    """A consumer tailing one partition from its end in a thread, timestamping every message."""

    def __init__(self, broker, topic, partition, extra):
        self.c = Consumer(conf(broker, {"group.id": "tail", "enable.auto.commit": False,
                                        "enable.partition.eof": False, **extra}))
        self.c.assign([TopicPartition(topic, partition, OFFSET_END)])
        self.got = []
        self.errors = []
        self._stop = threading.Event()
        self.t = threading.Thread(target=self._run, daemon=True)
        self.t.start()

    def _run(self):
        while not self._stop.is_set():
            m = self.c.poll(0.02)
            if m is None:
                continue
            if m.error():
                self.errors.append(m.error())
            else:
                self.got.append((time.monotonic(), m.offset(), m.value()))

    def stop(self):
        self._stop.set()
        self.t.join(10)
        assert not self.t.is_alive()
        self.c.close()


def _prime(broker, topic, tail):
    """Produces until the tail consumer receives something: proves its fetch loop is running and
    positioned at the end (OFFSET_END is resolved asynchronously)."""
    deadline = time.monotonic() + 15
    while not tail.got:
        assert time.monotonic() < deadline, "tailing consumer never received anything"
        produce(broker, topic, [{"partition": 0, "value": b"prime"}])
        eventually(lambda: tail.got, 1.0)


def test_parked_fetch_returns_as_soon_as_min_bytes_arrive(broker):
    topic = create_topic(broker, "fetch-min", partitions=1)
    tail = Tail(broker, topic, 0, {"fetch.min.bytes": 1, "fetch.wait.max.ms": 5000})
    try:
        _prime(broker, topic, tail)
        for i in range(3):
            n = len(tail.got)
            # Give the consumer's next fetch time to reach the broker and park there; nothing a
            # client exposes says "my fetch is parked", so this one pause is deliberate.
            time.sleep(0.3)
            t0 = time.monotonic()
            produce(broker, topic, [{"partition": 0, "value": f"m{i}".encode()}])
            wait_until(lambda: len(tail.got) > n, 6, f"message {i} to reach the consumer")
            latency = tail.got[n][0] - t0
            assert latency < 1.0, (
                f"message {i} took {latency:.2f}s: the parked fetch waited for fetch.wait.max.ms "
                "(5s) instead of returning when fetch.min.bytes (1) was available")
    finally:
        tail.stop()
    assert not tail.errors, tail.errors


def test_parked_fetch_waits_for_max_wait_when_min_bytes_not_reached(broker):
    topic = create_topic(broker, "fetch-wait", partitions=1)
    tail = Tail(broker, topic, 0, {"fetch.min.bytes": 1_000_000, "fetch.wait.max.ms": 1500})
    try:
        _prime(broker, topic, tail)
        n = len(tail.got)
        t_prev = tail.got[-1][0]
        produce(broker, topic, [{"partition": 0, "value": b"small"}])
        wait_until(lambda: len(tail.got) > n, 6, "the small message to arrive")
        gap = tail.got[n][0] - t_prev
        # The fetch parked right after the previous message; 1 small record is far below
        # fetch.min.bytes, so the broker should hold it for about fetch.wait.max.ms.
        assert gap >= 1.0, f"delivered after {gap:.2f}s: broker ignored fetch.min.bytes"
        assert gap <= 1.5 + 2.0, f"delivered after {gap:.2f}s: broker ignored fetch.wait.max.ms"
    finally:
        tail.stop()


def _serving(broker, topic):
    """A fresh client can still create, produce and consume."""
    create_topic(broker, topic, partitions=1)
    d = produce(broker, topic, [{"partition": 0, "value": b"alive"}])
    got = consume(broker, topic, [0], 1, timeout=15)
    assert got[0]["value"] == b"alive" and d[0][1] == 0


def test_delete_records_while_fetch_parked(broker):
    adm = admin(broker)
    topic = create_topic(broker, "parked-dr", partitions=1, adm=adm)
    produce(broker, topic, [{"partition": 0, "value": f"{i}".encode()} for i in range(20)])
    tail = Tail(broker, topic, 0, {"fetch.wait.max.ms": 5000})
    try:
        _prime(broker, topic, tail)
        tp = TopicPartition(topic, 0, 15)
        t0 = time.monotonic()
        assert result(adm.delete_records([tp])[tp], timeout=10).low_watermark == 15
        assert time.monotonic() - t0 < 3.0, "DeleteRecords was held up by the parked fetch"
        lo = result(adm.list_offsets({TopicPartition(topic, 0): OffsetSpec.earliest()})
                    [TopicPartition(topic, 0)]).offset
        assert lo == 15
        n = len(tail.got)
        produce(broker, topic, [{"partition": 0, "value": b"after"}])
        wait_until(lambda: len(tail.got) > n, 6, "the tail consumer to keep receiving")
        assert tail.got[-1][2] == b"after"
    finally:
        tail.stop()
    assert not tail.errors, tail.errors
    _serving(broker, "parked-dr-check")


def test_delete_topic_while_fetch_parked(broker):
    """A real consumer and a raw Fetch (max wait 5 s) are parked on the topic when it is deleted:
    the deletion is not held up, the raw fetch is answered with an unknown-topic error (Kafka
    completes parked fetches of a partition it stops) and the broker keeps serving."""
    adm = admin(broker)
    topic = create_topic(broker, "parked-del", partitions=1, adm=adm)
    tail = Tail(broker, topic, 0, {"fetch.wait.max.ms": 5000})
    with kwire.Conn("127.0.0.1", broker.port, timeout=10) as raw:
        _, keys = kwire.api_versions(raw, 0)
        v = kwire.pick_version(keys, kwire.FETCH, 4, 12)
        assert v is not None, keys.get(kwire.FETCH)
        try:
            _prime(broker, topic, tail)
            end = watermarks(broker, topic, 0)[1]  # log end: the raw fetch parks there
            raw.correlation_id += 1
            raw.send_frame(kwire.request_header(kwire.FETCH, v, raw.correlation_id) +
                           kwire.fetch_body(v, topic, 0, offset=end, max_wait_ms=5000))
            t0 = time.monotonic()
            result(adm.delete_topics([topic], operation_timeout=10)[topic], timeout=15)
            assert time.monotonic() - t0 < 3.0, "topic deletion was held up by parked fetches"
            frame = raw.recv_frame()
            answered = time.monotonic() - t0
            r = kwire.R(frame)
            assert r.i32() == raw.correlation_id
            if kwire.is_flexible(kwire.FETCH, v):
                r.flex = True
                r.tags()
            r.flex = kwire.is_flexible(kwire.FETCH, v)
            top, parts = kwire.parse_fetch(r, v)
            assert top == kwire.NONE and len(parts) == 1, (top, parts)
            assert parts[0][2] in (kwire.UNKNOWN_TOPIC_OR_PARTITION, 100), (
                f"parked Fetch v{v} of a deleted topic answered after {answered:.2f}s with "
                f"error {parts[0][2]}, high watermark {parts[0][3]}, records {parts[0][4]!r}")
            assert answered <= 5.0 + 1.0, f"parked fetch answered after {answered:.1f}s"
            wait_until(lambda: topic not in adm.list_topics(timeout=5).topics, 10,
                       "deleted topic to leave metadata")
        finally:
            tail.stop()
    broker.check_alive()
    _serving(broker, "parked-del-check")
