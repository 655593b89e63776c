"""Produce-path hardening, over raw sockets and with confluent-kafka: internal topics are not
writable, InitProducerId cannot fence another producer, one v2 batch per partition, acks=0
failures close the connection, and a produce whose wait is cut
short (timeout_ms 0 or 1) is still stored exactly once and becomes visible."""

import time

import pytest
from confluent_kafka import Producer
from kafka.admin import KafkaAdminClient

import kwire
from clients import admin, create_topic


def version_for(broker, api_key, lo, hi):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        err, keys = kwire.api_versions(c, 0)
    assert err == kwire.NONE
    v = kwire.pick_version(keys, api_key, lo, hi)
    assert v is not None, (api_key, keys.get(api_key))
    return v


def produce(conn, version, topic, partition, batch, acks=-1, timeout_ms=5000,
            transactional_id=None):
    r = conn.request(kwire.PRODUCE, version, kwire.produce_body(
        version, topic, partition, batch, acks, timeout_ms, transactional_id))
    res = kwire.parse_produce(r, version)
    assert len(res) == 1, res
    return res[0][2], res[0][3]


def fetch_all(conn, version, topic, partition):
    r = conn.request(kwire.FETCH, version, kwire.fetch_body(version, topic, partition, 0))
    top, parts = kwire.parse_fetch(r, version)
    assert top == kwire.NONE, top
    _, _, err, hw, records = parts[0]
    assert err == kwire.NONE, err
    return hw, records or b""


def batch_count(records):
    """Number of v2 batches in a fetched records section."""
    n, pos = 0, 0
    while pos + 12 <= len(records):
        (length,) = __import__("struct").unpack(">i", records[pos + 8:pos + 12])
        pos += 12 + length
        n += 1
    return n


def test_clients_cannot_write_to_consumer_offsets(broker):
    # A group commit makes the broker create __consumer_offsets.
    from confluent_kafka import Consumer
    create_topic(broker, "hard-src")
    c = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": "hard-g",
                  "enable.auto.commit": False})
    from confluent_kafka import TopicPartition
    c.commit(offsets=[TopicPartition("hard-src", 0, 0)], asynchronous=False)
    c.close()
    v = version_for(broker, kwire.PRODUCE, 3, 9)
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        err, _ = produce(conn, v, "__consumer_offsets", 0, kwire.record_batch([(b"k", b"v")]))
        assert err == kwire.INVALID_TOPIC_EXCEPTION
    # Only the broker's own internal topics are reported internal, not any "__" name.
    create_topic(broker, "__mine")
    ka = KafkaAdminClient(bootstrap_servers=broker.bootstrap)
    try:
        described = {t["name"]: t for t in ka.describe_topics(["__mine", "__consumer_offsets"])}
    finally:
        ka.close()
    assert described["__consumer_offsets"]["is_internal"] is True
    assert described["__mine"]["is_internal"] is False
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        assert produce(conn, v, "__mine", 0, kwire.record_batch([(b"k", b"v")])) == (kwire.NONE, 0)


def test_init_producer_id_without_transactional_id_never_bumps_a_named_id(broker):
    v = version_for(broker, kwire.INIT_PRODUCER_ID, 3, 4)
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        err, victim, epoch = kwire.init_producer_id(conn, v)
        assert (err, epoch) == (kwire.NONE, 0)
        # Another client names the victim's id and epoch: it gets a fresh id, the victim's
        # epoch is untouched.
        err, pid, epoch = kwire.init_producer_id(conn, v, producer_id=victim, producer_epoch=0)
        assert err == kwire.NONE
        assert pid != victim and epoch == 0
    create_topic(broker, "hard-fence")
    pv = version_for(broker, kwire.PRODUCE, 3, 9)
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        b = kwire.record_batch([(None, b"v")], producer_id=victim, producer_epoch=0,
                               base_sequence=0)
        assert produce(conn, pv, "hard-fence", 0, b) == (kwire.NONE, 0), \
            "the victim must still be able to write with epoch 0"


def test_one_v2_batch_per_partition(broker):
    create_topic(broker, "hard-batches")
    v = version_for(broker, kwire.PRODUCE, 3, 9)
    one = kwire.record_batch([(b"k", b"v")])
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        assert produce(conn, v, "hard-batches", 0, one + one)[0] == kwire.INVALID_RECORD
        magic1 = kwire.record_batch([(b"k", b"v")], magic=1)
        assert produce(conn, v, "hard-batches", 0, magic1)[0] == kwire.INVALID_RECORD
        # zstd needs Produce v7+.
        zstd = kwire.record_batch([(b"k", b"v")], attributes=4)
        assert produce(conn, 3, "hard-batches", 0, zstd)[0] == \
            kwire.UNSUPPORTED_COMPRESSION_TYPE
        # Nothing above took an offset.
        assert produce(conn, v, "hard-batches", 0, one) == (kwire.NONE, 0)


def test_failed_acks0_produce_closes_the_connection(broker):
    create_topic(broker, "hard-acks0")
    v = version_for(broker, kwire.PRODUCE, 3, 9)
    batch = kwire.record_batch([(b"k", b"v")])
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        body = kwire.produce_body(v, "hard-acks0", 0, batch, acks=0)
        conn.send_frame(kwire.request_header(kwire.PRODUCE, v, 1) + body)
        assert not conn.closed_within(0.5), "a successful acks=0 produce keeps the connection"
        body = kwire.produce_body(v, "hard-acks0", 7, batch, acks=0)  # no partition 7
        conn.send_frame(kwire.request_header(kwire.PRODUCE, v, 2) + body)
        assert conn.closed_within(5), "a failed acks=0 produce must close the connection"
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        assert produce(conn, v, "hard-acks0", 0, batch) == (kwire.NONE, 1)


@pytest.mark.parametrize("timeout_ms", [0, 1])
def test_produce_with_a_tiny_timeout_is_stored_once_and_becomes_visible(broker, timeout_ms):
    topic = f"hard-timeout-{timeout_ms}"
    create_topic(broker, topic)
    iv = version_for(broker, kwire.INIT_PRODUCER_ID, 0, 4)
    pv = version_for(broker, kwire.PRODUCE, 3, 9)
    fv = version_for(broker, kwire.FETCH, 4, 12)
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        err, pid, epoch = kwire.init_producer_id(conn, iv)
        assert err == kwire.NONE
        offsets = []
        for seq in range(20):
            batch = kwire.record_batch([(None, f"v{seq}".encode())], producer_id=pid,
                                       producer_epoch=epoch, base_sequence=seq)
            # Retry as a producer would until the batch is acknowledged.
            for _attempt in range(200):
                err, base = produce(conn, pv, topic, 0, batch, timeout_ms=timeout_ms)
                if err == kwire.NONE:
                    offsets.append(base)
                    break
                assert err == kwire.REQUEST_TIMED_OUT, err
            else:
                pytest.fail(f"batch {seq} never acknowledged")
        assert offsets == list(range(20)), offsets
        # Every acknowledged batch is readable (the high watermark moved past it) and stored
        # once.
        deadline = time.monotonic() + 5
        while True:
            hw, records = fetch_all(conn, fv, topic, 0)
            if hw == 20 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert hw == 20
        assert batch_count(records) == 20
    assert 1 in admin(broker).list_topics(timeout=10).brokers


def test_idle_producer_ids_expire(start_broker):
    broker = start_broker(overrides={"producer.id.expiration.ms": "1000",
                                     "producer.id.expiration.check.interval.ms": "100"})
    create_topic(broker, "hard-expiry")
    iv = version_for(broker, kwire.INIT_PRODUCER_ID, 0, 4)
    pv = version_for(broker, kwire.PRODUCE, 3, 9)
    with kwire.Conn("127.0.0.1", broker.port) as conn:
        _, pid, epoch = kwire.init_producer_id(conn, iv)
        b0 = kwire.record_batch([(None, b"a")], producer_id=pid, producer_epoch=epoch,
                                base_sequence=0)
        assert produce(conn, pv, "hard-expiry", 0, b0) == (kwire.NONE, 0)
        assert produce(conn, pv, "hard-expiry", 0, b0) == (kwire.NONE, 0), "a duplicate"
        # Once the producer has been idle past producer.id.expiration.ms its state is gone: the
        # same batch is taken as a new producer's first.
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            time.sleep(0.2)
            err, base = produce(conn, pv, "hard-expiry", 0, b0)
            assert err == kwire.NONE
            if base != 0:
                break
        assert base == 1, "the producer id never expired"
