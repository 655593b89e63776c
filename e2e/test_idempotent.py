"""Idempotent producer at volume: nothing lost, nothing duplicated, order kept per partition."""

import pytest
from confluent_kafka import Consumer, TopicPartition

from clients import conf, consume, create_topic, produce

PARTITIONS = 8
TOTAL = 100_000


@pytest.mark.slow
@pytest.mark.timeout(150)
def test_idempotent_producer_100k_over_8_partitions(broker):
    create_topic(broker, "idem", partitions=PARTITIONS)
    per = TOTAL // PARTITIONS
    # key = "<partition>:<sequence>", value = sequence: enough to spot loss, duplication and
    # reordering from the consumed data alone.
    msgs = ({"partition": i % PARTITIONS, "key": f"{i % PARTITIONS}:{i // PARTITIONS}".encode(),
             "value": str(i // PARTITIONS).encode()} for i in range(TOTAL))
    delivered = produce(broker, "idem", msgs,
                        {"enable.idempotence": True, "acks": "all", "linger.ms": 10,
                         "max.in.flight.requests.per.connection": 5}, timeout=90)
    assert len(delivered) == TOTAL
    reported = {}
    for p, off, key, _ in delivered:
        assert (p, off) not in reported, f"offset {off} of partition {p} acknowledged twice"
        reported[(p, off)] = key

    got = consume(broker, "idem", list(range(PARTITIONS)), TOTAL, timeout=90,
                  extra={"fetch.max.bytes": 52428800})
    assert len(got) == TOTAL
    for p in range(PARTITIONS):
        rs = [m for m in got if m["partition"] == p]
        assert len(rs) == per, f"partition {p}: {len(rs)} records, expected {per}"
        assert [m["offset"] for m in rs] == list(range(per)), f"partition {p}: offsets not dense"
        seqs = [int(m["value"]) for m in rs]
        assert seqs == list(range(per)), f"partition {p}: first out-of-order/dup at " \
            f"{next(i for i, s in enumerate(seqs) if s != i)}"
        for m in rs:
            assert m["key"] == f"{p}:{int(m['value'])}".encode()
            assert reported[(p, m["offset"])] == m["key"], "ack offset differs from stored offset"

    c = Consumer(conf(broker, {"group.id": "wm"}))
    try:
        for p in range(PARTITIONS):
            lo, hi = c.get_watermark_offsets(TopicPartition("idem", p), timeout=10)
            assert (lo, hi) == (0, per), f"partition {p} watermarks {(lo, hi)}"
    finally:
        c.close()
