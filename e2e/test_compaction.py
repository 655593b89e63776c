"""Compaction in a running broker, seen through a real client (confluent-kafka): a compacted
topic ends up with the last value of every key, tombstones disappear after
delete.retention.ms, and offsets are kept; the segments compaction replaces wait out
file.delete.delay.ms as `.deleted` files. With transactions, aborted records go and never
shadow committed ones, and nothing of an open transaction is compacted."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import ConfigResource, NewTopic

from clients import admin, conf, create_topic, produce, result, watermarks
from conftest import wait_until


def read_all(broker, topic, isolation="read_committed"):
    """Every record of partition 0 from the start up to the high watermark."""
    _, high = watermarks(broker, topic, 0)
    c = Consumer(conf(broker, {"group.id": "e2e-compaction", "enable.auto.commit": False,
                               "isolation.level": isolation}))
    try:
        c.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])
        out = []
        deadline = time.monotonic() + 20
        while not out or out[-1][0] < high - 1:
            assert time.monotonic() < deadline, f"read up to {out[-1:]} of {high}"
            for m in c.consume(num_messages=10000, timeout=0.2):
                assert m.error() is None, m.error()
                out.append((m.offset(), m.key(), m.value()))
        return out
    finally:
        c.close()


@pytest.mark.timeout(90)
def test_a_compacted_topic_keeps_the_last_value_per_key_and_drops_tombstones(start_broker):
    # The log cleaner looks for work every log.cleaner.backoff.ms, here every second.
    b = start_broker(overrides={"log.cleaner.backoff.ms": "1000"})
    create_topic(b, "cmp", partitions=1, config={
        "cleanup.policy": "compact",
        "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01",
        "delete.retention.ms": "0",
    })
    latest = {}
    messages = []
    for rnd in range(12):
        for k in range(20):
            key = f"k{k:02}".encode()
            value = None if (k == 0 and rnd == 10) else f"r{rnd}-{k}".encode() * 8
            if k == 0 and rnd > 10:
                continue
            messages.append({"partition": 0, "key": key, "value": value})
            latest[key] = value
    # Small batches, so the records spread over many 1 KiB segments. Idempotent, so that a retried
    # request cannot land after a later one: "the last value" must be the last one sent.
    delivered = produce(b, "cmp", messages, extra={"linger.ms": 0, "batch.num.messages": 5,
                                                   "enable.idempotence": True})
    written = len(delivered)
    last_offset = max(o for _, o, _, _ in delivered)

    def compacted():
        records = read_all(b, "cmp")
        final = {}
        for _, k, v in records:
            final[k] = v
        keys = [k for _, k, _ in records]
        return records, final, keys

    deadline = time.monotonic() + 40
    while True:
        records, final, keys = compacted()
        done = (len(records) < written // 3 and b"k00" not in keys)
        if done or time.monotonic() > deadline:
            break
        time.sleep(0.5)
    assert b"k00" not in keys, "the tombstone and every earlier k00 record are gone"
    assert len(records) < written // 3, f"{len(records)} of {written} records left"
    # Nothing but superseded records went: every live key has its last value.
    assert final == {k: v for k, v in latest.items() if v is not None}
    # Offsets are kept: increasing, and the last record keeps its offset.
    offsets = [o for o, _, _ in records]
    assert offsets == sorted(set(offsets))
    assert offsets[-1] == last_offset


@pytest.mark.timeout(90)
def test_replaced_segments_wait_out_file_delete_delay_ms(start_broker):
    b = start_broker(overrides={"log.cleaner.backoff.ms": "500"})
    adm = admin(b)
    # Validated like Kafka: a negative delay is refused, naming the setting.
    futs = adm.create_topics([NewTopic("fdd-bad", 1, 1, config={"file.delete.delay.ms": "-1"})],
                             request_timeout=15)
    with pytest.raises(KafkaException, match="file.delete.delay.ms"):
        result(futs["fdd-bad"])
    create_topic(b, "fdd", partitions=1, adm=adm, config={
        "cleanup.policy": "compact",
        "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01",
        "file.delete.delay.ms": "4000",
    })
    res = ConfigResource(ConfigResource.Type.TOPIC, "fdd")
    described = result(adm.describe_configs([res])[res])["file.delete.delay.ms"]
    assert described.value == "4000" and not described.is_default, described
    broker_res = ConfigResource(ConfigResource.Type.BROKER, str(b.node_id))
    default = result(adm.describe_configs([broker_res])[broker_res])["log.segment.delete.delay.ms"]
    assert default.value == "60000", default

    # One key over and over: every rolled segment is compacted to (almost) nothing.
    produce(b, "fdd", [{"partition": 0, "key": b"k", "value": f"v{i}".encode() * 20}
                       for i in range(200)], extra={"linger.ms": 0, "batch.num.messages": 2})
    part_dir = next(b.data_dir.rglob("fdd-0"))

    def waiting():
        return sorted(p.name for p in part_dir.iterdir() if p.name.endswith(".deleted"))

    first = wait_until(waiting, 30, lambda: f"a .deleted file in {sorted(part_dir.iterdir())}")
    seen = time.monotonic()
    assert all(n.endswith((".log.deleted", ".index.deleted", ".timeindex.deleted"))
               for n in first), first
    # Consumers read the compacted log while the originals wait.
    records = read_all(b, "fdd")
    assert records[-1][2] == b"v199" * 20
    wait_until(lambda: not any(n in waiting() for n in first), 30,
               lambda: f"{first} to be deleted (left: {waiting()})")
    waited = time.monotonic() - seen
    # Seen within a poll of their renaming: they stayed most of the 4 s, and went soon after.
    assert 3.0 <= waited <= 4.0 + 5.0, waited


def fill(b, topic, tag, n=60):
    """Plain records with keys of their own, to roll 1 KiB segments past what came before."""
    produce(b, topic, [{"partition": 0, "key": f"{tag}{i}".encode(), "value": b"x" * 40}
                       for i in range(n)], extra={"linger.ms": 0, "batch.num.messages": 5})


def txn_values(records, prefix):
    return {k: v for _, k, v in records if v is not None and v.startswith(prefix)}


@pytest.mark.timeout(120)
def test_compaction_drops_aborted_records_and_leaves_open_transactions_alone(start_broker):
    b = start_broker(overrides={"log.cleaner.backoff.ms": "500"})
    create_topic(b, "cmp-txn", partitions=1, config={
        "cleanup.policy": "compact",
        "segment.bytes": "1024",
        "min.cleanable.dirty.ratio": "0.01",
    })
    p = Producer(conf(b, {"transactional.id": "cmp-txn", "linger.ms": 0,
                          "batch.num.messages": 5}))
    p.init_transactions(15)
    keys = [f"k{i:02}".encode() for i in range(20)]

    def txn(prefix, end):
        p.begin_transaction()
        for k in keys if prefix != "open" else keys[:5]:
            p.produce("cmp-txn", key=k, value=f"{prefix}-{k.decode()}".encode() * 4, partition=0)
        p.flush(15)
        if end is not None:
            end(15)

    txn("committed", p.commit_transaction)
    txn("aborted", p.abort_transaction)
    fill(b, "cmp-txn", "f")
    txn("open", None)  # later records of five keys, in a transaction that may yet abort
    fill(b, "cmp-txn", "g")

    committed = {k: f"committed-{k.decode()}".encode() * 4 for k in keys}

    def settled():
        records = read_all(b, "cmp-txn", "read_uncommitted")
        return records if not txn_values(records, b"aborted") else None

    records = wait_until(settled, 60, lambda: "compaction to drop the aborted records", interval=0.5)
    # The open transaction's records shadow nothing yet: every committed value is still there.
    assert txn_values(records, b"committed") == committed
    assert len(txn_values(records, b"open")) == 5
    # It aborts: its records go too, and the committed values stay for good.
    p.abort_transaction(15)
    fill(b, "cmp-txn", "h")

    def settled_again():
        records = read_all(b, "cmp-txn", "read_uncommitted")
        return records if not txn_values(records, b"open") else None

    records = wait_until(settled_again, 60, lambda: "compaction to drop the second abort",
                         interval=0.5)
    assert txn_values(records, b"committed") == committed
    assert txn_values(records, b"aborted") == {}
