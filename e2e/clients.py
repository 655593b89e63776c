"""Small helpers over confluent-kafka so tests read as what a user does."""

import time

import pytest
from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic

from conftest import wait_until


def conf(broker, extra=None):
    c = {
        "bootstrap.servers": broker.bootstrap,
        "broker.address.family": "v4",
        "reconnect.backoff.ms": 50,
        "reconnect.backoff.max.ms": 1000,
    }
    c.update(extra or {})
    return c


def admin(broker):
    return AdminClient(conf(broker))


def result(future, timeout=15, what="admin operation"):
    try:
        return future.result(timeout=timeout)
    except TimeoutError:
        pytest.fail(f"{what}: no answer within {timeout}s", pytrace=False)


def create_topic(broker, name, partitions=1, config=None, adm=None):
    adm = adm or admin(broker)
    futs = adm.create_topics([NewTopic(name, num_partitions=partitions, replication_factor=1,
                                       config=config or {})], operation_timeout=10,
                             request_timeout=15)
    result(futs[name], what=f"create topic {name}")
    wait_for_partitions(broker, name, partitions, adm)
    return name


def wait_for_partitions(broker, topic, count, adm=None, timeout=10):
    adm = adm or admin(broker)

    def ready():
        md = adm.list_topics(topic, timeout=2)
        t = md.topics.get(topic)
        return (t is not None and t.error is None and len(t.partitions) == count
                and all(p.leader >= 0 for p in t.partitions.values()))

    wait_until(ready, timeout, f"metadata of {topic} to show {count} partitions with leaders")


def produce(broker, topic, messages, extra=None, timeout=30):
    """messages: iterable of dicts with keys partition/key/value/timestamp/headers.
    Returns the delivery reports [(partition, offset, key, value)], in delivery order.
    Fails the test on any delivery error or if anything is still unacknowledged at the deadline."""
    p = Producer(conf(broker, {"acks": "all", "linger.ms": 5, **(extra or {})}))
    delivered, errors = [], []

    def on_delivery(err, msg):
        if err is not None:
            errors.append((err, msg.partition(), msg.key()))
        else:
            delivered.append((msg.partition(), msg.offset(), msg.key(), msg.value()))

    for m in messages:
        kwargs = {k: v for k, v in m.items() if k in ("partition", "key", "value", "timestamp",
                                                     "headers")}
        while True:
            try:
                p.produce(topic, on_delivery=on_delivery, **kwargs)
                break
            except BufferError:
                p.poll(0.05)  # local queue full: let deliveries drain
    left = p.flush(timeout)
    assert not errors, f"delivery errors (first 5): {errors[:5]}"
    assert left == 0, f"{left} messages still unacknowledged after {timeout}s"
    return delivered


def snapshot(msg):
    return {
        "topic": msg.topic(), "partition": msg.partition(), "offset": msg.offset(),
        "key": msg.key(), "value": msg.value(), "timestamp": msg.timestamp(),
        "headers": msg.headers(),
    }


def consume(broker, topic, partitions, count, timeout=30, extra=None, start=OFFSET_BEGINNING):
    """Reads `count` messages from the given partitions (assign, no group membership), failing on
    any consumer error. Returns message snapshots in arrival order."""
    c = Consumer(conf(broker, {"group.id": "e2e-reader", "enable.auto.commit": False,
                               "enable.partition.eof": False, **(extra or {})}))
    try:
        c.assign([TopicPartition(topic, p, start) for p in partitions])
        out = []
        deadline = time.monotonic() + timeout
        while len(out) < count:
            if time.monotonic() > deadline:
                pytest.fail(f"consumed only {len(out)} of {count} messages from {topic} within "
                            f"{timeout}s", pytrace=False)
            batch = c.consume(num_messages=10000, timeout=0.2)
            for m in batch:
                if m.error():
                    raise KafkaException(m.error())
                out.append(snapshot(m))
        return out
    finally:
        c.close()


def watermarks(broker, topic, partition):
    c = Consumer(conf(broker, {"group.id": "e2e-watermarks"}))
    try:
        return c.get_watermark_offsets(TopicPartition(topic, partition), timeout=10)
    finally:
        c.close()


def round_trip(client_conf, topic, n=5, group=None):
    """Produces `n` records with `client_conf` (any listener, any security settings) and reads
    them back in a consumer group (`g-<topic>` unless `group`); returns their values."""
    p = Producer(dict(client_conf, **{"message.timeout.ms": 15000}))
    for i in range(n):
        p.produce(topic, f"v{i}".encode())
    assert p.flush(20) == 0, "every record delivered"
    c = Consumer(dict(client_conf, **{"group.id": group or f"g-{topic}",
                                      "auto.offset.reset": "earliest"}))
    c.subscribe([topic])
    got = []

    def read_all():
        m = c.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
        return len(got) >= n

    try:
        wait_until(read_all, 30, f"{n} records back from {topic}")
    finally:
        c.close()
    return got
