"""Hostile record batches over a raw socket, and the batch settings that act on them
(compression.type, message.timestamp.*). Each refused batch gets Kafka's error, leaves the log
as it was, and the broker keeps serving, also after a restart."""

import gzip
import struct
import time

from confluent_kafka import KafkaError, Producer, TopicPartition
from confluent_kafka.admin import OffsetSpec

import kwire
from clients import admin, conf, consume, create_topic, produce, result, watermarks

INVALID_TIMESTAMP = 32
INVALID_RECORD = 87
GZIP = 1


def version_for(broker, api_key, lo, hi):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        err, keys = kwire.api_versions(c, 0)
    assert err == kwire.NONE
    v = kwire.pick_version(keys, api_key, lo, hi)
    assert v is not None, f"broker advertises API {api_key} as {keys.get(api_key)}"
    return v


def encode_records(records, ts_delta=0):
    out = bytearray()
    for i, (k, v) in enumerate(records):
        body = kwire.W().i8(0).varint(ts_delta).varint(i)
        for field in (k, v):
            if field is None:
                body.varint(-1)
            else:
                body.varint(len(field)).raw(field)
        body.uvarint(0)  # no headers
        b = body.done()
        out += kwire.W().varint(len(b)).done() + b
    return bytes(out)


def batch(records, ts=None, codec=0, record_count=None, last_offset_delta=None):
    """A v2 batch with a valid CRC whose header may lie about its records."""
    ts = int(time.time() * 1000) if ts is None else ts
    section = encode_records(records)
    if codec == GZIP:
        section = gzip.compress(section)
    n = len(records) if record_count is None else record_count
    lod = len(records) - 1 if last_offset_delta is None else last_offset_delta
    after_crc = (kwire.W().i16(codec).i32(lod).i64(ts).i64(ts).i64(-1).i16(-1).i32(-1)
                 .i32(n).raw(section).done())
    tail = kwire.W().i32(-1).i8(2).raw(struct.pack(">I", kwire.crc32c(after_crc))).raw(
        after_crc).done()
    return kwire.W().i64(0).i32(len(tail)).raw(tail).done()


def lying_gzip_batch():
    """Issue 9: gzip, one real record, record_count 2147483647, last_offset_delta 2147483646."""
    return batch([(b"k", b"v")], codec=GZIP, record_count=2147483647,
                 last_offset_delta=2147483646)


def raw_produce(broker, topic, b):
    v = version_for(broker, kwire.PRODUCE, 3, 12)
    with kwire.Conn("127.0.0.1", broker.port) as c:
        r = c.request(kwire.PRODUCE, v, kwire.produce_body(v, topic, 0, b))
    res = kwire.parse_produce(r, v)
    assert len(res) == 1, res
    return res[0][2], res[0][3]


def raw_fetch(broker, topic, offset=0):
    v = version_for(broker, kwire.FETCH, 4, 11)
    with kwire.Conn("127.0.0.1", broker.port) as c:
        r = c.request(kwire.FETCH, v, kwire.fetch_body(v, topic, 0, offset))
    top, parts = kwire.parse_fetch(r, v)
    assert top == kwire.NONE and len(parts) == 1, (top, parts)
    _, _, err, hw, records = parts[0]
    assert err == kwire.NONE, err
    return hw, records


def batch_attributes(records):
    """Attributes of every batch in a fetched records blob."""
    out, pos = [], 0
    while pos + 61 <= len(records):
        length = struct.unpack(">i", records[pos + 8:pos + 12])[0]
        out.append(struct.unpack(">h", records[pos + 21:pos + 23])[0])
        pos += 12 + length
    return out


def offset_for_time(broker, topic, ts):
    adm = admin(broker)
    tp = TopicPartition(topic, 0)
    return result(adm.list_offsets({tp: OffsetSpec.for_timestamp(ts)})[tp]).offset


def delivery_errors(broker, topic, messages):
    """Produces with confluent-kafka and returns the delivery errors it reports."""
    p = Producer(conf(broker, {"acks": "all", "linger.ms": 0, "retries": 0}))
    errors = []
    for m in messages:
        p.produce(topic, on_delivery=lambda err, msg: errors.append(err), **m)
    assert p.flush(30) == 0
    return errors


def test_lying_count_gzip_batch_is_refused_and_the_broker_survives_a_restart(start_broker):
    broker = start_broker()
    ordinary = create_topic(broker, "hostile-plain")
    compacted = create_topic(broker, "hostile-compact", config={"cleanup.policy": "compact"})
    t0 = int(time.time() * 1000)
    for topic in (ordinary, compacted):
        assert raw_produce(broker, topic, batch([(b"a", b"1"), (b"b", b"2")], ts=t0)) == (
            kwire.NONE, 0)
        err, _ = raw_produce(broker, topic, lying_gzip_batch())
        assert err == INVALID_RECORD, f"{topic}: error {err}"
        assert watermarks(broker, topic, 0) == (0, 2), topic
        assert offset_for_time(broker, topic, t0) == 0, topic
        broker.check_alive()
        produce(broker, topic, [{"key": b"c", "value": b"3"}])
        got = consume(broker, topic, [0], 3)
        assert [m["value"] for m in got] == [b"1", b"2", b"3"], topic
    broker.restart()  # SIGTERM, exit 0, start again
    for topic in (ordinary, compacted):
        assert watermarks(broker, topic, 0) == (0, 3), topic
        assert offset_for_time(broker, topic, t0) == 0, topic
        produce(broker, topic, [{"key": b"d", "value": b"4"}])
        got = consume(broker, topic, [0], 4)
        assert [m["value"] for m in got] == [b"1", b"2", b"3", b"4"], topic


def test_compression_type_gzip_stores_an_uncompressed_batch_as_gzip(broker):
    topic = create_topic(broker, "hostile-gzip", config={"compression.type": "gzip"})
    plain = create_topic(broker, "hostile-producer")
    sent = batch([(b"k1", b"v1"), (b"k2", b"v2")])
    assert batch_attributes(sent) == [0]
    assert raw_produce(broker, topic, sent) == (kwire.NONE, 0)
    assert raw_produce(broker, plain, sent) == (kwire.NONE, 0)
    hw, records = raw_fetch(broker, topic)
    assert hw == 2
    assert [a & 7 for a in batch_attributes(records)] == [GZIP]
    _, records = raw_fetch(broker, plain)
    assert [a & 7 for a in batch_attributes(records)] == [0], "producer keeps the codec"
    got = consume(broker, topic, [0], 2)
    assert [(m["key"], m["value"]) for m in got] == [(b"k1", b"v1"), (b"k2", b"v2")]


def test_timestamp_outside_before_max_ms_is_invalid_timestamp(broker):
    topic = create_topic(broker, "hostile-ts", config={"message.timestamp.before.max.ms": "60000"})
    now = int(time.time() * 1000)
    err, _ = raw_produce(broker, topic, batch([(b"k", b"old")], ts=now - 3_600_000))
    assert err == INVALID_TIMESTAMP
    assert raw_produce(broker, topic, batch([(b"k", b"new")], ts=now)) == (kwire.NONE, 0)
    errors = delivery_errors(broker, topic, [{"key": b"k", "value": b"old",
                                               "timestamp": now - 3_600_000}])
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_TIMESTAMP, errors[0]
    assert watermarks(broker, topic, 0) == (0, 1)


def test_keyless_record_to_compacted_topic_is_invalid_record(broker):
    topic = create_topic(broker, "hostile-keyless", config={"cleanup.policy": "compact"})
    err, _ = raw_produce(broker, topic, batch([(b"k", b"v"), (None, b"no key")]))
    assert err == INVALID_RECORD
    err, _ = raw_produce(broker, topic, batch([(None, b"no key")], codec=GZIP))
    assert err == INVALID_RECORD
    errors = delivery_errors(broker, topic, [{"value": b"no key"}])
    assert len(errors) == 1 and errors[0] is not None
    assert errors[0].code() == KafkaError.INVALID_RECORD, errors[0]
    assert watermarks(broker, topic, 0) == (0, 0)
    produce(broker, topic, [{"key": b"k", "value": b"v"}])
    assert watermarks(broker, topic, 0) == (0, 1)


def test_difference_max_ms_bounds_both_sides_when_before_and_after_are_unset(broker):
    topic = create_topic(broker, "hostile-diff",
                         config={"message.timestamp.difference.max.ms": "60000"})
    now = int(time.time() * 1000)
    assert raw_produce(broker, topic, batch([(b"k", b"old")], ts=now - 3_600_000))[0] == \
        INVALID_TIMESTAMP
    assert raw_produce(broker, topic, batch([(b"k", b"future")], ts=now + 3_600_000))[0] == \
        INVALID_TIMESTAMP
    assert raw_produce(broker, topic, batch([(b"k", b"now")], ts=now)) == (kwire.NONE, 0)
    # An explicit after.max.ms wins over difference.max.ms on its side.
    loose = create_topic(broker, "hostile-diff-after",
                         config={"message.timestamp.difference.max.ms": "60000",
                                 "message.timestamp.after.max.ms": "86400000"})
    assert raw_produce(broker, loose, batch([(b"k", b"future")], ts=now + 3_600_000)) == (
        kwire.NONE, 0)
    assert raw_produce(broker, loose, batch([(b"k", b"old")], ts=now - 3_600_000))[0] == \
        INVALID_TIMESTAMP


def test_broker_default_compression_type_applies_to_new_topics(start_broker):
    broker = start_broker(overrides={"compression.type": "zstd"})
    topic = create_topic(broker, "hostile-default-zstd")
    assert raw_produce(broker, topic, batch([(b"k", b"v")], codec=GZIP)) == (kwire.NONE, 0)
    _, records = raw_fetch(broker, topic)
    assert [a & 7 for a in batch_attributes(records)] == [4]  # zstd
    got = consume(broker, topic, [0], 1)
    assert [(m["key"], m["value"]) for m in got] == [(b"k", b"v")]
