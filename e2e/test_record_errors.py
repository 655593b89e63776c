"""Per-record errors (KIP-467): a batch with some bad records is refused whole, nothing of it is
stored, and Produce v8+ says which records were bad and why. librdkafka fails exactly those
records with INVALID_RECORD and the rest of the batch with its local _INVALID_DIFFERENT_RECORD.
The broker keeps serving: a good produce afterwards is stored from offset 0."""

import re

import pytest
from confluent_kafka import KafkaError, Producer

import kwire
from clients import conf, create_topic, produce, watermarks

NO_KEY = "compacted topic cannot accept a record without a key"


def max_version(broker, api_key):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        err, keys = kwire.api_versions(c, 0)
    assert err == kwire.NONE
    return keys[api_key][1]


def raw_produce(broker, version, topic, batch):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        r = c.request(kwire.PRODUCE, version, kwire.produce_body(version, topic, 0, batch))
        parts = kwire.parse_produce_details(r, version)
        assert r.remaining() == 0, f"v{version}: {r.remaining()} bytes left unparsed"
    assert len(parts) == 1, parts
    return parts[0]


@pytest.mark.parametrize("count, keyless", [
    (20, {0, 7, 8, 19}),
    (100, set(range(0, 100, 10))),  # as librdkafka's own test 0011 does
    (20, {4}),
], ids=["four-of-20", "every-tenth-of-100", "one-of-20"])
def test_librdkafka_fails_the_bad_records_and_the_rest_of_their_batch(broker, count, keyless):
    create_topic(broker, "rec-err", config={"cleanup.policy": "compact"})
    # One batch: the producer knows the partition's leader before the first record is queued, and
    # linger.ms is far longer than queueing takes on a loaded machine; flush() sends at once. With a
    # 2 s linger and no metadata yet, CI once saw the last six records go out in a batch of their own.
    p = Producer(conf(broker, {"acks": "all", "linger.ms": 20000, "batch.num.messages": 1000}))
    p.list_topics("rec-err", timeout=10)
    reports = {}

    def on_delivery(err, msg):
        reports[int(msg.value())] = err

    for i in range(count):
        key = None if i in keyless else f"k{i}".encode()
        p.produce("rec-err", key=key, value=str(i).encode(), partition=0,
                  on_delivery=on_delivery)
    assert p.flush(30) == 0
    assert sorted(reports) == list(range(count))
    codes = {i: err.code() if err else None for i, err in reports.items()}
    if len(keyless) > 1:
        expected = {i: KafkaError.INVALID_RECORD if i in keyless
                    else KafkaError._INVALID_DIFFERENT_RECORD for i in range(count)}
    else:
        # With a single record error librdkafka gives the partition's error to every record of
        # the batch (it sets the batch's error on all of them for its interceptors).
        expected = {i: KafkaError.INVALID_RECORD for i in range(count)}
    assert codes == expected
    assert watermarks(broker, "rec-err", 0) == (0, 0), "nothing of the batch is stored"
    # The broker still serves, and the partition takes a good batch from offset 0.
    delivered = produce(broker, "rec-err", [{"partition": 0, "key": b"k", "value": b"v"}] * 3)
    assert sorted(o for _, o, _, _ in delivered) == [0, 1, 2]


def test_raw_produce_lists_the_records_without_a_key(broker):
    create_topic(broker, "rec-raw", config={"cleanup.policy": "compact"})
    batch = kwire.record_batch([(b"a", b"1"), (None, b"2"), (b"c", b"3"), (None, None),
                                (b"e", b"5")])
    top = max_version(broker, kwire.PRODUCE)
    assert top >= 8
    for v in sorted({8, 9, top}):
        p = raw_produce(broker, v, "rec-raw", batch)
        assert (p["error_code"], p["base_offset"]) == (kwire.INVALID_RECORD, -1), (v, p)
        assert p["record_errors"] == [(1, NO_KEY), (3, NO_KEY)], v
        assert p["error_message"] == (
            f"2 records refused, so the batch was not appended: record 1: {NO_KEY}; "
            f"record 3: {NO_KEY}"), v
    # Before v8 the answer has no room for them: the error code alone.
    p = raw_produce(broker, 7, "rec-raw", batch)
    assert (p["error_code"], p["record_errors"], p["error_message"]) == (
        kwire.INVALID_RECORD, [], None)
    assert watermarks(broker, "rec-raw", 0) == (0, 0)
    good = kwire.record_batch([(b"a", b"1"), (b"b", b"2")])
    p = raw_produce(broker, top, "rec-raw", good)
    assert (p["error_code"], p["base_offset"], p["record_errors"]) == (kwire.NONE, 0, [])
    assert watermarks(broker, "rec-raw", 0) == (0, 2)


def test_raw_produce_lists_the_records_with_timestamps_out_of_bounds(broker):
    hour = 3_600_000
    create_topic(broker, "rec-ts", config={"message.timestamp.before.max.ms": str(hour),
                                           "message.timestamp.after.max.ms": str(hour)})
    batch = kwire.record_batch([(b"a", b"1", 0), (b"b", b"2", -2 * hour), (b"c", b"3", 60_000),
                                (b"d", b"4", 3 * hour)])
    base = int.from_bytes(batch[27:35], "big", signed=True)
    p = raw_produce(broker, max_version(broker, kwire.PRODUCE), "rec-ts", batch)
    assert p["error_code"] == kwire.INVALID_TIMESTAMP, p
    assert [i for i, _ in p["record_errors"]] == [1, 3]
    for (_, msg), ts in zip(p["record_errors"], [base - 2 * hour, base + 3 * hour]):
        m = re.fullmatch(rf"timestamp {ts} is out of range \[(\d+), (\d+)\]", msg)
        assert m, msg
        assert int(m[2]) - int(m[1]) == 2 * hour, msg
    assert p["error_message"].startswith("2 records refused, so the batch was not appended: "
                                         f"record 1: timestamp {base - 2 * hour} "), p
    assert watermarks(broker, "rec-ts", 0) == (0, 0)
    p = raw_produce(broker, 8, "rec-ts", kwire.record_batch([(b"a", b"1", 0)]))
    assert (p["error_code"], p["base_offset"]) == (kwire.NONE, 0), p
