"""Fetch sessions (KIP-227) with a real client that uses them: kafka-python's consumer fetches in
a session (a full fetch, then incremental ones naming only partitions whose position moved).
It reads every record of a 12-partition topic, including records produced after its session
was established, exactly once and in order; the broker holds the session while it does
(gregor_fetch_sessions, gregor_fetch_session_partitions). With
max.incremental.fetch.session.cache.slots=0 the broker answers without sessions and the same
consumer still reads everything (full fetches)."""

import time

from kafka import KafkaConsumer, TopicPartition

from clients import create_topic, produce
from conftest import wait_until
from test_metrics import metrics_broker, scrape, value

PARTITIONS = 12


def produce_round(b, topic, start, count):
    return produce(b, topic, [{"partition": i % PARTITIONS, "value": f"v{start + i}".encode()}
                              for i in range(count)])


def read_all(c, expected, seen, timeout=30):
    """Polls `c` until `expected` records are in `seen` ({partition: [(offset, value)]})."""
    deadline = time.monotonic() + timeout
    while sum(len(v) for v in seen.values()) < expected and time.monotonic() < deadline:
        for tp, recs in c.poll(timeout_ms=200).items():
            seen.setdefault(tp.partition, []).extend((r.offset, r.value) for r in recs)
    got = sum(len(v) for v in seen.values())
    assert got == expected, f"kafka-python read {got} of {expected} records"


def check_exactly_once_in_order(seen, delivered):
    want = {}
    for part, offset, _, val in delivered:
        want.setdefault(part, []).append((offset, val))
    for part in want:
        want[part].sort()
    assert {p: v for p, v in seen.items() if v} == want


def consumer(b, topic):
    c = KafkaConsumer(bootstrap_servers=b.bootstrap, enable_auto_commit=False,
                      fetch_max_wait_ms=100, client_id="session-reader")
    c.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
    c.seek_to_beginning()
    return c


def test_kafka_python_reads_everything_through_an_incremental_fetch_session(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "sessions", partitions=PARTITIONS)
    delivered = produce_round(b, topic, 0, 120)
    c = consumer(b, topic)
    try:
        seen = {}
        read_all(c, 120, seen)
        # The consumer's session is in the broker's cache, with every partition.
        wait_until(lambda: (value(scrape(b.metrics_port), "gregor_fetch_sessions") or 0) >= 1,
                   10, "kafka-python's fetch session to be held")
        assert value(scrape(b.metrics_port), "gregor_fetch_session_partitions") >= PARTITIONS
        # Records produced now reach the consumer through incremental fetches of the session.
        delivered += produce_round(b, topic, 120, 60)
        read_all(c, 180, seen)
        check_exactly_once_in_order(seen, delivered)
        assert value(scrape(b.metrics_port), "gregor_request_errors_total", api="Fetch") in (None, 0)
    finally:
        c.close()


def test_without_cache_slots_fetches_are_whole_and_still_read_everything(start_broker):
    b = metrics_broker(start_broker, **{"max.incremental.fetch.session.cache.slots": "0"})
    topic = create_topic(b, "no-sessions", partitions=PARTITIONS)
    delivered = produce_round(b, topic, 0, 120)
    c = consumer(b, topic)
    try:
        seen = {}
        read_all(c, 120, seen)
        delivered += produce_round(b, topic, 120, 60)
        read_all(c, 180, seen)
        check_exactly_once_in_order(seen, delivered)
        assert value(scrape(b.metrics_port), "gregor_fetch_sessions") == 0
    finally:
        c.close()
