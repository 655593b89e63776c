"""Hardening of the network side of a single node: fetches that claim a replica id, connection
limits, idle connections, fetch.max.bytes, and settings that are refused rather than ignored.

Raw-wire requests use kwire.py; Metadata v10 and Fetch v11/v15 are encoded here (Fetch v13+
names topics by id, v15+ carries the replica id in the ReplicaState tagged field, KIP-903).
"""

import socket
import struct
import time

import pytest
from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import AlterConfigOpType, ConfigEntry, ConfigResource, ResourceType

import kwire
from clients import admin, create_topic, produce, result
from conftest import wait_until

NOT_LEADER_OR_FOLLOWER = 6
UNKNOWN_LEADER_EPOCH = 75
METADATA = kwire.METADATA
FETCH = kwire.FETCH


def metadata_v10(conn, topic):
    """Returns {partition: (leader_id, leader_epoch, replicas)} and the topic id of `topic`."""
    w = kwire.W(flex=True)
    w.array([None], lambda w, _: w.raw(b"\0" * 16).string(topic).tags())
    w.boolean(False).boolean(False).boolean(False).tags()
    r = conn.request(METADATA, 10, w.done())
    r.i32()  # throttle
    r.array(lambda b: (b.i32(), b.string(), b.i32(), b.string(), b.tags()))
    r.string()  # cluster id
    r.i32()  # controller id
    found = {}

    def part(p):
        p.i16()
        idx, leader, epoch = p.i32(), p.i32(), p.i32()
        replicas = p.array(lambda x: x.i32())
        p.array(lambda x: x.i32())  # isr
        p.array(lambda x: x.i32())  # offline
        p.tags()
        return idx, (leader, epoch, replicas)

    def tp(t):
        err = t.i16()
        name = t.string()
        topic_id = t.uuid()
        t.boolean()
        parts = dict(t.array(part))
        t.i32()
        t.tags()
        found[name] = (err, topic_id, parts)

    r.array(tp)
    err, topic_id, parts = found[topic]
    assert err == kwire.NONE, err
    return parts, topic_id


def fetch_body(version, topic, topic_id, replica_id, leader_epoch=-1, offset=0, max_bytes=1 << 20):
    """Fetch v11 (names) or v15+ (ids, ReplicaState tagged field) from `replica_id`."""
    flex = kwire.is_flexible(FETCH, version)
    w = kwire.W(flex=flex)
    if version < 15:
        w.i32(replica_id)
    w.i32(0).i32(1).i32(max_bytes)  # max_wait_ms, min_bytes, max_bytes
    w.i8(0).i32(0).i32(-1)  # isolation level, session id, session epoch

    def part(w, _):
        w.i32(0).i32(leader_epoch).i64(offset)
        if version >= 12:
            w.i32(-1)  # last_fetched_epoch
        w.i64(-1).i32(max_bytes).tags()

    def tp(w, _):
        if version >= 13:
            w.raw(topic_id)
        else:
            w.string(topic)
        w.array([None], part).tags()

    w.array([None], tp)
    w.array([], None)  # forgotten topics
    w.string("")  # rack id
    if version >= 15:
        # Tagged field 1: ReplicaState {replica_id int32, replica_epoch int64, tags}.
        state = kwire.W(flex=True).i32(replica_id).i64(-1).tags().done()
        w.uvarint(1).uvarint(1).uvarint(len(state)).raw(state)
    else:
        w.tags()
    return w.done()


def parse_fetch(r, version):
    """[(partition, error, high_watermark, records)] of the one topic in the response."""
    r.i32()
    top = r.i16()
    r.i32()
    assert top == kwire.NONE, top
    out = []

    def part(p):
        idx, err, hw = p.i32(), p.i16(), p.i64()
        p.i64()
        p.i64()
        p.array(lambda a: (a.i64(), a.i64(), a.tags()))
        p.i32()  # preferred read replica
        recs = p.bytes_()
        p.tags()
        out.append((idx, err, hw, recs or b""))

    def tp(t):
        if version >= 13:
            t.uuid()
        else:
            t.string()
        t.array(part)
        t.tags()

    r.array(tp)
    return out


def fetch(conn, version, topic, topic_id, replica_id, leader_epoch=-1, max_bytes=1 << 20):
    r = conn.request(FETCH, version,
                     fetch_body(version, topic, topic_id, replica_id, leader_epoch,
                                max_bytes=max_bytes))
    return parse_fetch(r, version)


def produce_records(broker, topic, n, size=10):
    produce(broker, topic, [{"value": bytes([65 + i % 26]) * size} for i in range(n)],
            extra={"linger.ms": 0, "batch.num.messages": 1})


# ---------------------------------------------------------------------------------------------
# Finding 6: a fetch naming a replica id is not a way past the high watermark.

@pytest.mark.parametrize("version", [11, 15])
def test_fetch_from_a_replica_id_that_is_not_a_follower_is_refused(broker, version):
    topic = create_topic(broker, f"replica-fetch-v{version}")
    produce_records(broker, topic, 3)
    with kwire.Conn("127.0.0.1", broker.port) as c:
        parts, topic_id = metadata_v10(c, topic)
        leader, epoch, replicas = parts[0]
        assert replicas == [broker.node_id]
        # A consumer reads the records.
        [(_, err, hw, recs)] = fetch(c, version, topic, topic_id, -1)
        assert (err, hw) == (kwire.NONE, 3) and recs
        # The node itself and an unknown broker are not followers of the partition.
        for replica_id in (broker.node_id, 2, 1000):
            [(_, err, _, recs)] = fetch(c, version, topic, topic_id, replica_id)
            assert (err, recs) == (NOT_LEADER_OR_FOLLOWER, b""), (replica_id, err)
            [(_, err, _, recs)] = fetch(c, version, topic, topic_id, replica_id, leader_epoch=epoch)
            assert (err, recs) == (UNKNOWN_LEADER_EPOCH, b""), (replica_id, err)
        # The connection still serves consumers.
        [(_, err, _, recs)] = fetch(c, version, topic, topic_id, -1)
        assert err == kwire.NONE and recs


# ---------------------------------------------------------------------------------------------
# fetch.max.bytes

def test_fetch_max_bytes_caps_every_response(start_broker):
    b = start_broker(overrides={"fetch.max.bytes": "1024"})
    topic = create_topic(b, "capped")
    produce_records(b, topic, 10, size=400)  # ten batches of ~470 bytes
    with kwire.Conn("127.0.0.1", b.port) as c:
        [(_, err, hw, recs)] = fetch(c, 11, topic, None, -1, max_bytes=50 << 20)
        assert (err, hw) == (kwire.NONE, 10)
        assert 400 < len(recs) <= 1024, len(recs)
        # Raised at run time (a dynamic broker config), the cap follows.
        adm = admin(b)
        res = ConfigResource(ResourceType.BROKER, str(b.node_id), incremental_configs=[
            ConfigEntry("fetch.max.bytes", str(1 << 20),
                        incremental_operation=AlterConfigOpType.SET)])
        result(adm.incremental_alter_configs([res])[res])
        [(_, err, _, recs)] = fetch(c, 11, topic, None, -1, max_bytes=50 << 20)
        assert err == kwire.NONE and len(recs) > 4000, len(recs)


def test_fetch_max_bytes_defaults_to_30_mib(broker):
    # Gregor's default (Kafka's is 55 MiB): a client asking for 50 MiB gets at most 30 MiB of
    # whole batches, the rest on its next Fetch. Forty batches of ~900 KB are 36 MB.
    topic = create_topic(broker, "default-cap")
    produce_records(broker, topic, 40, size=900_000)
    with kwire.Conn("127.0.0.1", broker.port) as c:
        [(_, err, hw, recs)] = fetch(c, 11, topic, None, -1, max_bytes=50 << 20)
        assert (err, hw) == (kwire.NONE, 40)
        assert (30 << 20) - 1_000_000 < len(recs) <= 30 << 20, len(recs)
    a = admin(broker)
    res = ConfigResource(ResourceType.BROKER, str(broker.node_id))
    configs = result(a.describe_configs([res])[res])
    assert configs["fetch.max.bytes"].value == str(30 << 20)


# ---------------------------------------------------------------------------------------------
# Connection limits and idle connections.

def served(conn):
    err, keys = kwire.api_versions(conn, 0)
    return err == kwire.NONE and FETCH in keys


def test_connection_over_the_per_ip_limit_is_closed(start_broker):
    b = start_broker(overrides={"max.connections.per.ip": "0",
                                "max.connections.per.ip.overrides": "127.0.0.1:3"})
    # Readiness checks connect too: wait until their connections are gone.
    held = []

    def three_served():
        try:
            c = kwire.Conn("127.0.0.1", b.port, timeout=2)
            if served(c):
                held.append(c)
        except (kwire.Closed, OSError):
            pass
        return len(held) == 3

    wait_until(three_served, 10, "three connections from 127.0.0.1 to be served")
    extra = kwire.Conn("127.0.0.1", b.port, timeout=5)
    assert extra.closed_within(5), "the fourth connection from 127.0.0.1 must be closed"
    extra.close()
    held.pop().close()

    def another_served():
        try:
            with kwire.Conn("127.0.0.1", b.port, timeout=2) as c:
                return served(c)
        except (kwire.Closed, OSError):
            return False

    wait_until(another_served, 10, "a place freed by a close to be usable")
    for c in held:
        assert served(c), "the admitted connections keep working"
        c.close()


def test_max_connections_stops_accepting_until_one_closes(start_broker):
    b = start_broker(overrides={"max.connections": "2"})
    held = []

    def two_served():
        try:
            c = kwire.Conn("127.0.0.1", b.port, timeout=2)
            if served(c):
                held.append(c)
        except (kwire.Closed, OSError):
            pass
        return len(held) == 2

    wait_until(two_served, 10, "two connections to be served")
    waiting = kwire.Conn("127.0.0.1", b.port, timeout=0.5)  # the kernel's backlog takes it
    waiting.send_frame(kwire.request_header(kwire.API_VERSIONS, 0, 1) + kwire.api_versions_body(0))
    with pytest.raises(socket.timeout):
        waiting.recv_frame()
    held.pop().close()
    waiting.sock.settimeout(10)
    frame = waiting.recv_frame()
    assert struct.unpack(">i", frame[:4])[0] == 1, "answered once a connection closed"
    waiting.close()
    for c in held:
        c.close()


def test_idle_connection_is_closed_and_a_busy_one_is_not(start_broker):
    b = start_broker(overrides={"connections.max.idle.ms": "400"})
    with kwire.Conn("127.0.0.1", b.port) as busy, kwire.Conn("127.0.0.1", b.port) as idle:
        assert served(idle)
        t0 = time.monotonic()
        # A request every 100 ms keeps a connection open well past the idle limit.
        while time.monotonic() - t0 < 1.0:
            assert served(busy)
            time.sleep(0.1)
        assert idle.closed_within(5), "the idle connection is closed"
        assert served(busy)


# ---------------------------------------------------------------------------------------------
# Every accepted setting works or is refused.

def alter_broker(adm, node_id, key, value):
    res = ConfigResource(ResourceType.BROKER, str(node_id), incremental_configs=[
        ConfigEntry(key, value, incremental_operation=AlterConfigOpType.SET)])
    return adm.incremental_alter_configs([res])[res]


@pytest.mark.parametrize("key,value,says", [
    ("num.replica.fetchers", "4", "not supported"),
    ("num.io.threads", "16", "not supported"),
    ("log.roll.jitter.ms", "100", "not supported"),
    # Read-only settings are refused as such.
    ("replica.lag.time.max.ms", "1000", "dynamically"),
    ("max.connections", "10", "dynamically"),
])
def test_alter_configs_refuses_settings_that_would_do_nothing(broker, key, value, says):
    adm = admin(broker)
    with pytest.raises(KafkaException) as e:
        alter_broker(adm, broker.node_id, key, value).result(15)
    err = e.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG, err
    assert key in err.str() and says in err.str(), err.str()


def test_topic_setting_of_a_missing_feature_is_refused_at_creation(broker):
    adm = admin(broker)
    with pytest.raises(KafkaException) as e:
        create_topic(broker, "jittery", config={"segment.jitter.ms": "1000"}, adm=adm)
    err = e.value.args[0]
    assert err.code() == KafkaError.INVALID_CONFIG and "segment.jitter.ms" in err.str(), err


def test_broker_level_log_config_reaches_a_running_partition(broker):
    topic = create_topic(broker, "rolls")
    produce_records(broker, topic, 3, size=300)
    part_dir = broker.data_dir / f"{topic}-0"
    assert len(list(part_dir.glob("*.log"))) == 1
    adm = admin(broker)
    result(alter_broker(adm, broker.node_id, "log.segment.bytes", "1024"))
    produce_records(broker, topic, 12, size=300)
    segments = sorted(part_dir.glob("*.log"))
    assert len(segments) >= 3, [s.name for s in segments]
    # The topic's own override still wins over the broker default.
    res = ConfigResource(ResourceType.TOPIC, topic, incremental_configs=[
        ConfigEntry("segment.bytes", str(1 << 30), incremental_operation=AlterConfigOpType.SET)])
    result(adm.incremental_alter_configs([res])[res])
    before = len(list(part_dir.glob("*.log")))
    produce_records(broker, topic, 12, size=300)
    assert len(list(part_dir.glob("*.log"))) <= before + 1


# ---------------------------------------------------------------------------------------------
# Offset expiry. offsets.retention.minutes cannot go below one minute, so this one waits for it
# (the retention rules themselves are unit-tested in gregor-group with an injected clock).

@pytest.mark.timeout(150)
def test_standalone_offsets_expire_after_offsets_retention_minutes_and_stay_gone(start_broker):
    from confluent_kafka import Consumer, TopicPartition
    from clients import conf

    b = start_broker(overrides={"offsets.retention.minutes": "1",
                                "offsets.retention.check.interval.ms": "200"})
    topic = create_topic(b, "expiring")
    produce_records(b, topic, 3)

    def consumer():
        return Consumer(conf(b, {"group.id": "standalone", "enable.auto.commit": False}))

    c = consumer()
    c.commit(offsets=[TopicPartition(topic, 0, 2)], asynchronous=False)
    committed_at = time.monotonic()

    def offset():
        [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
        return tp.offset

    assert offset() == 2
    wait_until(lambda: offset() < 0, 90, "the standalone offset to expire")
    assert time.monotonic() - committed_at >= 59, "not before the retention period"
    c.close()
    b.restart()
    c = consumer()
    [tp] = c.committed([TopicPartition(topic, 0)], timeout=10)
    assert tp.offset < 0, "the expiry is durable (tombstoned), not only in memory"
    c.close()
