"""Bad input over raw sockets. Each case gets the Kafka error a Kafka broker gives (or a closed
connection where Kafka closes it), and afterwards the broker still serves fresh clients."""

import struct

import pytest

import kwire
from clients import admin, create_topic

INVALID_GROUP_ID = 24


def assert_serving(broker):
    """The broker process is alive and a brand-new connection and a real client both work."""
    broker.check_alive()
    with kwire.Conn("127.0.0.1", broker.port) as c:
        err, keys = kwire.api_versions(c, 0)
        assert err == kwire.NONE and kwire.API_VERSIONS in keys
    md = admin(broker).list_topics(timeout=10)
    assert 1 in md.brokers


def supported(broker):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        err, keys = kwire.api_versions(c, 0)
    assert err == kwire.NONE
    return keys


def version_for(broker, api_key, lo, hi):
    keys = supported(broker)
    v = kwire.pick_version(keys, api_key, lo, hi)
    assert v is not None, (f"broker advertises API {api_key} as {keys.get(api_key)}; this test "
                           f"encodes versions {lo}..{hi}")
    return v


def test_unsupported_apiversions_version_gets_v0_error_with_supported_list(broker):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        # A client newer than the broker: ApiVersions v127, flexible header and body.
        c.send_frame(kwire.request_header(kwire.API_VERSIONS, 127, 7) +
                     kwire.api_versions_body(3))
        frame = c.recv_frame()
        r = kwire.R(frame)
        assert r.i32() == 7
        err, keys = kwire.parse_api_versions(r, 0)  # Kafka answers in v0 format
        assert err == kwire.UNSUPPORTED_VERSION
        assert r.remaining() == 0, f"{r.remaining()} extra bytes: not the v0 layout"
        assert kwire.API_VERSIONS in keys, "the answer must list ApiVersions' own versions"
        lo, hi = keys[kwire.API_VERSIONS]
        assert lo == 0 and 3 <= hi < 127
        # Kafka keeps the connection open: the client retries with a version it now knows.
        err, keys = kwire.api_versions(c, hi)
        assert err == kwire.NONE and kwire.METADATA in keys
    assert_serving(broker)


def test_unknown_api_key_closes_connection(broker):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        c.send_frame(kwire.request_header(9999, 0, 1) + b"\x00" * 8)
        assert c.closed_within(5), "Kafka closes the connection on an unknown API key"
    assert_serving(broker)


def test_unsupported_version_of_other_api_closes_connection(broker):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        c.send_frame(kwire.request_header(kwire.METADATA, 99, 1) + b"\x00" * 8)
        assert c.closed_within(5), "Kafka closes the connection on an unsupported version"
    assert_serving(broker)


MALFORMED = {
    "frame shorter than a request header": b"\x00\x12\x00",
    "client id longer than the frame": struct.pack(">hhih", 18, 0, 1, 500) + b"abc",
    "metadata topic array claims 1000 entries": kwire.request_header(kwire.METADATA, 1, 1)
    + struct.pack(">i", 1000),
    "apiversions v3 string runs past the end": kwire.request_header(kwire.API_VERSIONS, 3, 1)
    + b"\x7f" + b"ab",
    "garbage": bytes(range(7, 71)),
}


@pytest.mark.parametrize("case", sorted(MALFORMED))
def test_malformed_frame_closes_connection(broker, case):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        c.send_frame(MALFORMED[case])
        assert c.closed_within(5), f"{case}: Kafka closes a connection it cannot parse"
    assert_serving(broker)


def test_negative_frame_size_closes_connection(broker):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        c.send_raw(struct.pack(">i", -5) + b"\x00" * 16)
        assert c.closed_within(5)
    assert_serving(broker)


def test_half_a_frame_then_disconnect_leaves_broker_serving(broker):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        c.send_raw(struct.pack(">i", 100) + b"\x00" * 10)
    assert_serving(broker)


def test_oversized_frame_closes_connection_default_limit(broker):
    """socket.request.max.bytes defaults to 104857600; a larger size prefix is refused before any
    of the body is read."""
    with kwire.Conn("127.0.0.1", broker.port) as c:
        c.send_raw(struct.pack(">i", 104857600 + 1) + b"\x00" * 64)
        assert c.closed_within(5)
    assert_serving(broker)


def test_oversized_frame_closes_connection_configured_limit(start_broker):
    b = start_broker(overrides={"socket.request.max.bytes": "1048576"})
    with kwire.Conn("127.0.0.1", b.port) as c:
        c.send_raw(struct.pack(">i", 2 * 1048576) + b"\x00" * 64)
        assert c.closed_within(5)
    # Just under the limit is still a request the broker reads (and answers).
    with kwire.Conn("127.0.0.1", b.port) as c:
        err, _ = kwire.api_versions(c, 0)
        assert err == kwire.NONE
    assert_serving(b)


def _create(broker, conn, **kw):
    v = version_for(broker, kwire.CREATE_TOPICS, 2, 7)
    r = conn.request(kwire.CREATE_TOPICS, v, kwire.create_topics_body(v, **kw))
    res = kwire.parse_create_topics(r, v)
    assert len(res) == 1, res
    return res[0]


@pytest.mark.parametrize("name", ["", ".", "..", "a" * 250, "has/slash", "has space",
                                  "ümlaut", "tab\tname", "star*"])
def test_create_topics_invalid_name(broker, name):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        got_name, err, msg = _create(broker, c, name=name)
        assert err == kwire.INVALID_TOPIC_EXCEPTION, (got_name, err, msg)
        # An error answer is not a reason to close: the connection keeps working.
        assert kwire.api_versions(c, 0)[0] == kwire.NONE
    assert name not in admin(broker).list_topics(timeout=10).topics
    assert_serving(broker)


def test_create_topics_valid_name_control(broker):
    """The encoder used above is right: the same request with a legal name succeeds."""
    name = "Legal.name_1-" + "x" * 236  # 249 characters, the maximum
    assert len(name) == 249
    with kwire.Conn("127.0.0.1", broker.port) as c:
        assert _create(broker, c, name=name)[1] == kwire.NONE
        assert _create(broker, c, name=name)[1] == kwire.TOPIC_ALREADY_EXISTS


def test_create_topics_name_colliding_by_period_and_underscore(broker):
    """Kafka refuses 'a_b' when 'a.b' exists: metric names would collide."""
    with kwire.Conn("127.0.0.1", broker.port) as c:
        assert _create(broker, c, name="col.lide")[1] == kwire.NONE
        assert _create(broker, c, name="col_lide")[1] == kwire.INVALID_TOPIC_EXCEPTION
    assert_serving(broker)


@pytest.mark.parametrize("configs", [{"cleanup.policy": "sometimes"}, {"retention.ms": "abc"},
                                     {"no.such.config": "1"}, {"min.insync.replicas": "-3"},
                                     {"segment.bytes": "12"}])
@pytest.mark.parametrize("validate_only", [False, True])
def test_create_topics_invalid_config(broker, configs, validate_only):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        _, err, msg = _create(broker, c, name="cfg-bad", configs=configs,
                              validate_only=validate_only)
        assert err == kwire.INVALID_CONFIG, (configs, err, msg)
    assert "cfg-bad" not in admin(broker).list_topics(timeout=10).topics
    assert_serving(broker)


@pytest.mark.parametrize("kw,want", [
    ({"num_partitions": 0}, kwire.INVALID_PARTITIONS),
    ({"num_partitions": -7}, kwire.INVALID_PARTITIONS),
    ({"replication_factor": 0}, kwire.INVALID_REPLICATION_FACTOR),
    ({"replication_factor": 2}, kwire.INVALID_REPLICATION_FACTOR),
    ({"num_partitions": -1, "replication_factor": -1, "assignments": [(0, [7])]},
     kwire.INVALID_REPLICA_ASSIGNMENT),
    ({"num_partitions": 2, "assignments": [(0, [1])]}, kwire.INVALID_REQUEST),
])
def test_create_topics_impossible_layout(broker, kw, want):
    with kwire.Conn("127.0.0.1", broker.port) as c:
        _, err, msg = _create(broker, c, name="layout-bad", **kw)
        assert err == want, (kw, err, msg)
    assert_serving(broker)


def _produce(broker, conn, topic, partition, batch):
    v = version_for(broker, kwire.PRODUCE, 3, 12)
    r = conn.request(kwire.PRODUCE, v, kwire.produce_body(v, topic, partition, batch))
    res = kwire.parse_produce(r, v)
    assert len(res) == 1, res
    return res[0]


def test_produce_to_missing_partition_or_topic(broker):
    create_topic(broker, "raw-p", partitions=2)
    batch = kwire.record_batch([(b"k", b"v"), (b"k2", b"v2")])
    with kwire.Conn("127.0.0.1", broker.port) as c:
        # Control: the encoder is right.
        assert _produce(broker, c, "raw-p", 1, batch)[2:] == (kwire.NONE, 0)
        assert _produce(broker, c, "raw-p", 1, batch)[2:] == (kwire.NONE, 2)
        assert _produce(broker, c, "raw-p", 2, batch)[2] == kwire.UNKNOWN_TOPIC_OR_PARTITION
        assert _produce(broker, c, "raw-p", -1, batch)[2] == kwire.UNKNOWN_TOPIC_OR_PARTITION
        assert _produce(broker, c, "raw-nope", 0, batch)[2] == kwire.UNKNOWN_TOPIC_OR_PARTITION
    assert "raw-nope" not in admin(broker).list_topics(timeout=10).topics, \
        "Produce must not auto-create topics (only Metadata does)"
    assert_serving(broker)


def test_produce_corrupt_batch_is_rejected_and_stores_nothing(broker):
    create_topic(broker, "raw-crc", partitions=1)
    with kwire.Conn("127.0.0.1", broker.port) as c:
        bad = kwire.record_batch([(b"k", b"v")], corrupt_crc=True)
        assert _produce(broker, c, "raw-crc", 0, bad)[2] == kwire.CORRUPT_MESSAGE
        good = kwire.record_batch([(b"k", b"v")])
        assert _produce(broker, c, "raw-crc", 0, good)[2:] == (kwire.NONE, 0), \
            "the corrupt batch must not have taken an offset"
    assert_serving(broker)


def _fetch(broker, conn, topic, partition, offset=0):
    v = version_for(broker, kwire.FETCH, 4, 12)
    r = conn.request(kwire.FETCH, v, kwire.fetch_body(v, topic, partition, offset))
    top, parts = kwire.parse_fetch(r, v)
    assert top == kwire.NONE and len(parts) == 1, (top, parts)
    return parts[0]


def test_fetch_from_missing_partition_or_topic(broker):
    create_topic(broker, "raw-f", partitions=1)
    with kwire.Conn("127.0.0.1", broker.port) as c:
        _produce(broker, c, "raw-f", 0, kwire.record_batch([(b"k", b"v")]))
        _, _, err, hw, recs = _fetch(broker, c, "raw-f", 0)
        assert (err, hw) == (kwire.NONE, 1) and recs, "control fetch"
        assert _fetch(broker, c, "raw-f", 5)[2] == kwire.UNKNOWN_TOPIC_OR_PARTITION
        assert _fetch(broker, c, "raw-none", 0)[2] == kwire.UNKNOWN_TOPIC_OR_PARTITION
        assert _fetch(broker, c, "raw-f", 0, offset=50)[2] == 1  # OFFSET_OUT_OF_RANGE
    assert_serving(broker)


def _join(broker, conn, group, protocols, **kw):
    v = version_for(broker, kwire.JOIN_GROUP, 2, 9)
    return kwire.join_group(conn, v, group, protocols, **kw)


def test_join_group_session_timeout_outside_broker_bounds(broker):
    meta = kwire.consumer_subscription(["t"])
    with kwire.Conn("127.0.0.1", broker.port) as c:
        r = _join(broker, c, "g-sess", [("range", meta)], session_timeout_ms=500)
        assert r["error_code"] == kwire.INVALID_SESSION_TIMEOUT, r
        # group.max.session.timeout.ms defaults to 1800000.
        r = _join(broker, c, "g-sess", [("range", meta)], session_timeout_ms=1800001)
        assert r["error_code"] == kwire.INVALID_SESSION_TIMEOUT, r
    assert_serving(broker)


def test_join_group_with_no_common_protocol(broker):
    meta = kwire.consumer_subscription(["t"])
    with kwire.Conn("127.0.0.1", broker.port) as first, \
            kwire.Conn("127.0.0.1", broker.port) as second:
        r = _join(broker, first, "g-proto", [("range", meta)])
        assert r["error_code"] == kwire.NONE and r["protocol_name"] == "range", r
        r = _join(broker, second, "g-proto", [("cooperative-sticky", meta)])
        assert r["error_code"] == kwire.INCONSISTENT_GROUP_PROTOCOL, r
        r = _join(broker, second, "g-proto", [("range", meta)], protocol_type="connect")
        assert r["error_code"] == kwire.INCONSISTENT_GROUP_PROTOCOL, r
        r = _join(broker, second, "g-empty", [])
        assert r["error_code"] == kwire.INCONSISTENT_GROUP_PROTOCOL, r
        r = _join(broker, second, "", [("range", meta)])
        assert r["error_code"] == INVALID_GROUP_ID, r
    assert_serving(broker)


def _batch_sizes(recs):
    """Sizes of the whole record batches in `recs`, and the bytes left after them."""
    sizes, at = [], 0
    while at + 12 <= len(recs):
        size = 12 + struct.unpack(">i", recs[at + 8:at + 12])[0]
        if at + size > len(recs):
            break
        sizes.append(size)
        at += size
    return sizes, len(recs) - at


def test_fetch_limits_at_every_version_and_nonsense_limits(broker):
    """Record bytes go from the segment file to the socket: at every Fetch version the raw
    client reads, the limits hold as Kafka applies them (the first batch whole even over the
    limit, KIP-74; no torn batch), and negative limits are answered, not refused."""
    create_topic(broker, "raw-limits", partitions=1)
    value = b"v" * 1000
    with kwire.Conn("127.0.0.1", broker.port) as c:
        for i in range(3):
            batch = kwire.record_batch([(b"k%d" % i, value)] * (i + 2))
            assert _produce(broker, c, "raw-limits", 0, batch)[2] == kwire.NONE
        lo, hi = 4, version_for(broker, kwire.FETCH, 4, 12)
        full = None
        for v in range(lo, hi + 1):
            def fetch(**kw):
                r = c.request(kwire.FETCH, v, kwire.fetch_body(v, "raw-limits", 0, **kw))
                top, parts = kwire.parse_fetch(r, v)
                assert top == kwire.NONE and len(parts) == 1, (v, top, parts)
                _, _, err, hw, recs = parts[0]
                assert err == kwire.NONE and hw == 9, (v, err, hw)
                return _batch_sizes(recs)

            sizes, left = fetch()
            assert len(sizes) == 3 and left == 0, (v, sizes, left)
            full = full or sizes
            assert sizes == full, "every version carries the same batches"
            # Over the limit, the first batch still comes whole; nothing torn follows it.
            assert fetch(partition_max_bytes=1) == ([full[0]], 0), v
            assert fetch(max_bytes=1) == ([full[0]], 0), v
            assert fetch(partition_max_bytes=full[0] + full[1] // 2) == ([full[0]], 0), v
            assert fetch(max_bytes=full[0] + full[1]) == (full[:2], 0), v
            # A fetch from the middle of the second batch returns that batch whole.
            assert fetch(offset=3) == (full[1:], 0), v
            # Negative limits are read as zero: still the first batch, as Kafka answers.
            assert fetch(max_bytes=-5, partition_max_bytes=-1) == ([full[0]], 0), v
    assert_serving(broker)
