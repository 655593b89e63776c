"""Connect, list metadata, produce and consume with kcat (Debian's, librdkafka 2.0),
confluent-kafka (librdkafka 2.16) and kafka-python."""

import json
import shutil
import subprocess
import time

import pytest
from confluent_kafka import TIMESTAMP_CREATE_TIME, Producer
from confluent_kafka.admin import AdminClient

import kwire
from clients import admin, conf, consume, create_topic, produce

# What librdkafka prints when it cannot use a broker's ApiVersions answer (and then silently
# falls back to guessing the protocol from broker.version.fallback).
APIVERSION_FAILURE_MARKERS = ("ApiVersionRequest failed", "Protocol parse failure",
                              "Read underflow", "broker.version.fallback", "FALLBACK")


def kcat(*args, input=None, timeout=30):
    exe = shutil.which("kcat")
    assert exe, "kcat is not installed (apt-get install -y kcat)"
    return subprocess.run([exe, *args], input=input, capture_output=True, timeout=timeout)


def no_apiversion_trouble(stderr):
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr
    bad = [m for m in APIVERSION_FAILURE_MARKERS if m.lower() in text.lower()]
    assert not bad, f"librdkafka could not use the ApiVersions answer ({bad}):\n{text[-3000:]}"


def test_kcat_metadata_lists_broker_and_topics(broker):
    create_topic(broker, "kcat-meta", partitions=3)
    out = kcat("-b", broker.bootstrap, "-L", "-J", "-m", "10", "-d", "broker")
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    no_apiversion_trouble(out.stderr)
    md = json.loads(out.stdout)
    assert md["brokers"] == [{"id": 1, "name": broker.bootstrap}], md["brokers"]
    topics = {t["topic"]: t for t in md["topics"]}
    assert "kcat-meta" in topics, sorted(topics)
    t = topics["kcat-meta"]
    assert "error" not in t, t
    parts = sorted(t["partitions"], key=lambda p: p["partition"])
    assert [p["partition"] for p in parts] == [0, 1, 2]
    for p in parts:
        assert p["leader"] == 1, p
        assert [r["id"] for r in p["replicas"]] == [1], p
        assert [r["id"] for r in p["isrs"]] == [1], p


def test_confluent_kafka_connects_without_apiversion_fallback(broker):
    logs = []
    a = AdminClient(conf(broker, {"debug": "broker,protocol", "logger": _Collect(logs)}))
    md = a.list_topics(timeout=10)
    assert [b.id for b in md.brokers.values()] == [1]
    b = md.brokers[1]
    assert (b.host, b.port) == ("127.0.0.1", broker.port)
    assert md.controller_id == 1, md.controller_id
    a.poll(0.5)  # serve queued log callbacks
    text = "\n".join(logs)
    assert "ApiVersion" in text, "no librdkafka protocol debug log captured: the check below " \
        "would be vacuous"
    no_apiversion_trouble(text)
    # Cluster id: librdkafka reads it from Metadata; Kafka always has one.
    assert md.cluster_id, "Metadata carried no cluster id"


class _Collect:
    """A `logging.Logger`-shaped sink for librdkafka debug logs."""

    def __init__(self, out):
        self.out = out

    def log(self, level, fmt, *args):
        self.out.append(fmt % args if args else fmt)


def test_apiversions_v3_answer_uses_header_v0(broker):
    """KIP-511: ApiVersions responses keep response header v0 even at v3, because a client
    cannot know the broker's flexible versions before it has the answer. librdkafka 2.x sends v3
    first; a tagged-field byte after the correlation id breaks older clients."""
    with kwire.Conn("127.0.0.1", broker.port) as c:
        c.correlation_id = 41
        c.send_frame(kwire.request_header(kwire.API_VERSIONS, 3, 42) +
                     kwire.api_versions_body(3))
        frame = c.recv_frame()
    r = kwire.R(frame)
    assert r.i32() == 42
    err, keys = kwire.parse_api_versions(r, 3)
    assert err == kwire.NONE
    assert r.remaining() == 0, f"{r.remaining()} unparsed bytes: response header was not v0"
    # The APIs every client in this suite needs, at versions Kafka 4 still serves.
    for key in (kwire.PRODUCE, kwire.FETCH, kwire.LIST_OFFSETS, kwire.METADATA,
                kwire.API_VERSIONS, kwire.CREATE_TOPICS):
        assert key in keys, f"ApiVersions does not list API key {key}: {sorted(keys)}"
    assert keys[kwire.API_VERSIONS][0] == 0 and keys[kwire.API_VERSIONS][1] >= 3


def test_kcat_produce_consume_round_trip(broker):
    create_topic(broker, "kcat-rt", partitions=2)
    lines = [f"k{i}:value-{i}" for i in range(50)]
    out = kcat("-b", broker.bootstrap, "-P", "-t", "kcat-rt", "-p", "1", "-K", ":",
               "-X", "acks=all", input=("\n".join(lines) + "\n").encode())
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    no_apiversion_trouble(out.stderr)
    out = kcat("-b", broker.bootstrap, "-C", "-t", "kcat-rt", "-p", "1", "-o", "beginning",
               "-e", "-q", "-f", "%p|%o|%k|%s\\n")
    assert out.returncode == 0, out.stderr.decode(errors="replace")[-3000:]
    got = out.stdout.decode().splitlines()
    assert got == [f"1|{i}|k{i}|value-{i}" for i in range(50)]
    # Partition 0 stayed empty: kcat -e ends immediately with nothing.
    out = kcat("-b", broker.bootstrap, "-C", "-t", "kcat-rt", "-p", "0", "-o", "beginning",
               "-e", "-q", "-f", "%s\\n")
    assert out.returncode == 0 and out.stdout == b"", out


@pytest.mark.parametrize("compression", ["none", "gzip", "snappy", "lz4", "zstd"])
def test_confluent_round_trip_keys_values_headers_timestamps(broker, compression):
    create_topic(broker, "rt", partitions=3)
    base_ts = int(time.time() * 1000) - 60_000
    msgs = [{"partition": i % 3, "key": f"key-{i}".encode(), "value": f"v{i}".encode() * (i % 7),
             "timestamp": base_ts + i, "headers": [("h", f"{i}".encode()), ("dup", b"a"),
                                                   ("dup", b"b")]}
            for i in range(300)]
    delivered = produce(broker, "rt", msgs, {"compression.type": compression,
                                              "linger.ms": 20})
    # Offsets per partition are dense from 0 in produce order.
    for p in range(3):
        offs = [o for (pp, o, _, _) in delivered if pp == p]
        assert sorted(offs) == list(range(100)), (p, offs[:10])
    got = consume(broker, "rt", [0, 1, 2], 300)
    by_key = {m["key"]: m for m in got}
    assert len(by_key) == 300 and len(got) == 300
    for i, sent in enumerate(msgs):
        m = by_key[sent["key"]]
        assert m["partition"] == sent["partition"]
        assert m["value"] == sent["value"]
        assert m["timestamp"] == (TIMESTAMP_CREATE_TIME, sent["timestamp"])
        assert m["headers"] == sent["headers"]
    for p in range(3):
        vals = [m["key"] for m in got if m["partition"] == p]
        assert vals == [s["key"] for s in msgs if s["partition"] == p], "partition order"


def test_kcat_reads_what_confluent_wrote_and_back(broker):
    create_topic(broker, "cross", partitions=1)
    produce(broker, "cross", [{"partition": 0, "key": b"c", "value": b"from-confluent"}])
    out = kcat("-b", broker.bootstrap, "-P", "-t", "cross", "-p", "0", "-K", ":",
               input=b"k:from-kcat\n")
    assert out.returncode == 0, out.stderr
    got = consume(broker, "cross", [0], 2)
    assert [(m["offset"], m["key"], m["value"]) for m in got] == [
        (0, b"c", b"from-confluent"), (1, b"k", b"from-kcat")]
    out = kcat("-b", broker.bootstrap, "-C", "-t", "cross", "-p", "0", "-o", "beginning", "-e",
               "-q", "-f", "%k=%s\\n")
    assert out.stdout.decode().splitlines() == ["c=from-confluent", "k=from-kcat"]


def test_kafka_python_round_trip(broker):
    from kafka import KafkaConsumer, KafkaProducer, TopicPartition
    create_topic(broker, "kp-rt", partitions=2)
    p = KafkaProducer(bootstrap_servers=broker.bootstrap, acks="all", linger_ms=5)
    futs = [p.send("kp-rt", key=f"k{i}".encode(), value=f"v{i}".encode(), partition=i % 2)
            for i in range(100)]
    metas = [f.get(timeout=15) for f in futs]
    p.close(timeout=10)
    for part in (0, 1):
        assert sorted(m.offset for m in metas if m.partition == part) == list(range(50))
    c = KafkaConsumer(bootstrap_servers=broker.bootstrap, enable_auto_commit=False,
                      consumer_timeout_ms=10000)
    c.assign([TopicPartition("kp-rt", 0), TopicPartition("kp-rt", 1)])
    c.seek_to_beginning()
    got = []
    deadline = time.monotonic() + 20
    while len(got) < 100 and time.monotonic() < deadline:
        for recs in c.poll(timeout_ms=200).values():
            got += recs
    c.close()
    assert len(got) == 100, f"kafka-python read {len(got)} of 100"
    for part in (0, 1):
        rs = [r for r in got if r.partition == part]
        assert [(r.offset, r.key, r.value) for r in rs] == [
            (j, f"k{i}".encode(), f"v{i}".encode())
            for j, i in enumerate(range(part, 100, 2))]


def test_metadata_auto_creates_topic_when_enabled(broker):
    """auto.create.topics.enable=true (Kafka's default): a Metadata request for an unknown topic
    creates it with num.partitions partitions; the client can then produce to it."""
    delivered = produce(broker, "auto-created", [{"value": b"x"}])
    assert delivered[0][1] == 0
    md = admin(broker).list_topics("auto-created", timeout=10)
    assert len(md.topics["auto-created"].partitions) == 1


def test_producer_to_unknown_topic_fails_when_auto_create_disabled(start_broker):
    b = start_broker(overrides={"auto.create.topics.enable": "false"})
    p = Producer(conf(b, {"message.timeout.ms": 3000, "acks": "all"}))
    errs = []
    p.produce("no-such-topic", b"x", on_delivery=lambda e, m: errs.append(e))
    assert p.flush(15) == 0
    assert len(errs) == 1 and errs[0] is not None, errs
    md = admin(b).list_topics(timeout=10)
    assert "no-such-topic" not in md.topics
