"""Data and committed offsets survive a broker restart, clean (SIGTERM) or not (SIGKILL)."""

import time

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition

from clients import conf, consume, create_topic, produce, watermarks


def _group_consumer(broker, group):
    return Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False,
                                  "auto.offset.reset": "earliest",
                                  "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}))


@pytest.mark.timeout(90)
@pytest.mark.parametrize("how", ["sigterm", "sigkill"])
def test_restart_keeps_messages_and_committed_offsets(broker, how):
    topic = create_topic(broker, "dur", partitions=3)
    msgs = [{"partition": i % 3, "key": f"{i}".encode(), "value": f"value-{i}".encode()}
            for i in range(3000)]
    delivered = produce(broker, topic, msgs)
    stored = {(p, o): v for p, o, _, v in delivered}

    # A group member reads part of the data and commits its position.
    c = _group_consumer(broker, "dur-g")
    c.subscribe([topic])
    seen = 0
    deadline = time.monotonic() + 30
    while seen < 1200:
        assert time.monotonic() < deadline, f"group member read only {seen} messages in 30s"
        for m in c.consume(300, timeout=0.5):
            assert not m.error(), m.error()
            seen += 1
    # Partitions this member has not read from yet report OFFSET_INVALID (-1001): no commit.
    committed = {tp.partition: tp.offset for tp in c.commit(asynchronous=False)}
    assert sum(o for o in committed.values() if o >= 0) == seen, (committed, seen)
    c.close()

    broker.restart(kill=(how == "sigkill"))

    for p in range(3):
        assert watermarks(broker, topic, p) == (0, 1000), f"partition {p} after restart"
    got = consume(broker, topic, [0, 1, 2], 3000)
    assert {(m["partition"], m["offset"]): m["value"] for m in got} == stored

    c = _group_consumer(broker, "dur-g")
    try:
        tps = [TopicPartition(topic, p) for p in range(3)]
        after = {tp.partition: tp.offset for tp in c.committed(tps, timeout=10)}
        assert after == committed, "committed offsets changed across the restart"
        c.subscribe([topic])
        first = {}
        resume_at = {p: max(committed.get(p, -1001), 0) for p in range(3)}  # no commit: earliest
        expect = {p for p in range(3) if resume_at[p] < 1000}
        deadline = time.monotonic() + 30
        while set(first) != expect:
            assert time.monotonic() < deadline, f"resumed only partitions {sorted(first)}"
            for m in c.consume(100, timeout=0.5):
                assert not m.error(), m.error()
                first.setdefault(m.partition(), m.offset())
        for p, off in first.items():
            assert off == resume_at[p], (
                f"partition {p} resumed at {off}, committed {committed.get(p)}")
    finally:
        c.close()

    d = produce(broker, topic, [{"partition": 0, "value": b"after restart"}])
    assert d[0][1] == 1000, "offsets continue after the restart, never reused"


@pytest.mark.slow
@pytest.mark.timeout(120)
def test_sigkill_under_load_loses_no_acknowledged_write(broker):
    """acks=all writes acknowledged before a SIGKILL are all there after the restart, at the
    offsets the acknowledgements reported."""
    topic = create_topic(broker, "dur-load", partitions=2)
    p = Producer(conf(broker, {"acks": "all", "linger.ms": 2, "enable.idempotence": False,
                               "message.timeout.ms": 60000}))
    acked, failed = {}, []

    def on_delivery(err, msg):
        if err is not None:
            failed.append(err)
        else:
            key = (msg.partition(), msg.offset())
            assert key not in acked, f"offset {key} acknowledged twice"
            acked[key] = msg.value()

    i = 0
    killed_after = None
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, f"only {len(acked)} acks before the deadline"
        try:
            p.produce(topic, value=f"m{i}".encode(), partition=i % 2, on_delivery=on_delivery)
            i += 1
        except BufferError:
            pass
        p.poll(0)
        if killed_after is None and len(acked) >= 5000:
            broker.kill()
            killed_after = len(acked)
            acked_at_kill = dict(acked)
        if killed_after is not None and i >= killed_after + 7000:
            break
    broker.start()
    assert p.flush(60) == 0, "producer could not deliver after the restart"
    assert not failed, failed[:5]
    for part in (0, 1):
        lo, hi = watermarks(broker, topic, part)
        assert lo == 0
    total = sum(watermarks(broker, topic, part)[1] for part in (0, 1))
    got = consume(broker, topic, [0, 1], total, timeout=60)
    stored = {(m["partition"], m["offset"]): m["value"] for m in got}
    missing = [k for k, v in acked_at_kill.items() if stored.get(k) != v]
    assert not missing, f"{len(missing)} writes acknowledged before SIGKILL are gone or " \
        f"changed, e.g. {missing[:5]}"
    missing = [k for k, v in acked.items() if stored.get(k) != v]
    assert not missing, f"{len(missing)} acknowledged writes missing, e.g. {missing[:5]}"
