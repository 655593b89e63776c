"""confluent-kafka AdminClient against the broker: topics, partitions, configs, groups, offsets."""

import time

import pytest
from confluent_kafka import (Consumer, ConsumerGroupState, ConsumerGroupTopicPartitions,
                             KafkaError, KafkaException, TopicCollection, TopicPartition)
from confluent_kafka.admin import (ConfigResource, ConfigSource, NewPartitions, NewTopic,
                                   OffsetSpec, ResourceType)

from clients import admin, conf, consume, create_topic, produce, result
from conftest import wait_until
from groups import ConfluentMember, Timeline, partition_of, wait_for_owners


def admin_error(future, timeout=15):
    """The KafkaError code an admin future failed with (fails the test if it succeeded)."""
    try:
        future.result(timeout=timeout)
    except KafkaException as e:
        return e.args[0].code()
    pytest.fail("operation unexpectedly succeeded", pytrace=False)


def topic_names(adm):
    return set(adm.list_topics(timeout=10).topics)


def test_create_describe_delete_topic(broker):
    adm = admin(broker)
    create_topic(broker, "adm-a", partitions=3, adm=adm)
    assert "adm-a" in topic_names(adm)
    d = result(adm.describe_topics(TopicCollection(["adm-a"]))["adm-a"])
    assert d.name == "adm-a" and not d.is_internal
    assert [p.id for p in d.partitions] == [0, 1, 2]
    for p in d.partitions:
        assert p.leader.id == 1
        assert [r.id for r in p.replicas] == [1] and [r.id for r in p.isr] == [1]
    # Creating it again is an error, and changes nothing.
    err = admin_error(adm.create_topics([NewTopic("adm-a", 5, 1)])["adm-a"])
    assert err == KafkaError.TOPIC_ALREADY_EXISTS
    assert len(adm.list_topics("adm-a", timeout=10).topics["adm-a"].partitions) == 3

    result(adm.delete_topics(["adm-a"], operation_timeout=10)["adm-a"])
    wait_until(lambda: "adm-a" not in topic_names(adm), 10, "adm-a to disappear from metadata")
    err = admin_error(adm.delete_topics(["adm-a"])["adm-a"])
    assert err == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_recreated_topic_starts_empty(broker):
    adm = admin(broker)
    create_topic(broker, "adm-re", partitions=1, adm=adm)
    produce(broker, "adm-re", [{"value": b"old"}] * 5)
    result(adm.delete_topics(["adm-re"], operation_timeout=10)["adm-re"])
    wait_until(lambda: "adm-re" not in topic_names(adm), 10, "adm-re deleted")
    create_topic(broker, "adm-re", partitions=1, adm=adm)
    d = produce(broker, "adm-re", [{"value": b"new"}])
    assert d[0][1] == 0, "a recreated topic must not keep the old log"
    lo, hi = _offsets(adm, "adm-re", 0)
    assert (lo, hi) == (0, 1)


def test_validate_only_creates_nothing(broker):
    adm = admin(broker)
    result(adm.create_topics([NewTopic("adm-dry", 4, 1)], validate_only=True)["adm-dry"])
    assert "adm-dry" not in topic_names(adm)
    # validate_only still validates.
    err = admin_error(adm.create_topics([NewTopic("adm-dry2", 1, 3)],
                                        validate_only=True)["adm-dry2"])
    assert err == KafkaError.INVALID_REPLICATION_FACTOR
    assert "adm-dry2" not in topic_names(adm)


def test_create_with_replica_assignment(broker):
    adm = admin(broker)
    result(adm.create_topics([NewTopic("adm-ra", 2, replica_assignment=[[1], [1]])])["adm-ra"])
    wait_until(lambda: len(adm.list_topics("adm-ra", timeout=5).topics["adm-ra"].partitions) == 2,
               10, "adm-ra with 2 partitions")
    d = result(adm.describe_topics(TopicCollection(["adm-ra"]))["adm-ra"])
    assert [[r.id for r in p.replicas] for p in d.partitions] == [[1], [1]]
    bad = NewTopic("adm-ra2", 1, replica_assignment=[[2]])
    err = admin_error(adm.create_topics([bad])["adm-ra2"])
    assert err == KafkaError.INVALID_REPLICA_ASSIGNMENT, "broker 2 does not exist"
    assert "adm-ra2" not in topic_names(adm)


def test_create_with_configs_and_describe_them(broker):
    adm = admin(broker)
    create_topic(broker, "adm-cfg", partitions=1, adm=adm,
                 config={"cleanup.policy": "compact", "retention.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, "adm-cfg")
    cfg = result(adm.describe_configs([res])[res])
    assert cfg["cleanup.policy"].value == "compact"
    assert cfg["retention.ms"].value == "3600000"
    src = cfg["cleanup.policy"].source
    assert getattr(src, "value", src) == ConfigSource.DYNAMIC_TOPIC_CONFIG.value, src
    # A config the topic did not set reports Kafka's default.
    assert cfg["segment.bytes"].value == "1073741824"
    assert cfg["segment.bytes"].is_default


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_legacy_alter_configs_replaces_the_whole_set(broker):
    """confluent-kafka's alter_configs sends AlterConfigs (KIP-133): the listed configs become
    the topic's whole set of overrides; a bad value or a missing topic is refused per resource."""
    adm = admin(broker)
    create_topic(broker, "adm-legacy", partitions=1, adm=adm,
                 config={"cleanup.policy": "compact", "retention.ms": "3600000"})
    res = ConfigResource(ResourceType.TOPIC, "adm-legacy",
                         set_config={"compression.type": "gzip", "flush.ms": "12345678"})
    result(adm.alter_configs([res])[res])
    cfg = result(adm.describe_configs([ConfigResource(ResourceType.TOPIC, "adm-legacy")])[res])
    assert cfg["compression.type"].value == "gzip"
    assert cfg["flush.ms"].value == "12345678"
    # Not listed, so back to the defaults.
    assert cfg["cleanup.policy"].value == "delete" and cfg["cleanup.policy"].is_default
    assert cfg["retention.ms"].is_default
    bad = ConfigResource(ResourceType.TOPIC, "adm-legacy", set_config={"retention.ms": "soon"})
    missing = ConfigResource(ResourceType.TOPIC, "adm-no-such", set_config={"flush.ms": "1"})
    futures = adm.alter_configs([bad, missing])
    assert admin_error(futures[bad]) == KafkaError.INVALID_CONFIG
    assert admin_error(futures[missing]) == KafkaError.UNKNOWN_TOPIC_OR_PART
    # The refused change left the set as it was.
    cfg = result(adm.describe_configs([ConfigResource(ResourceType.TOPIC, "adm-legacy")])[res])
    assert cfg["compression.type"].value == "gzip"
    # Listener stores are validated by the node reading them, which takes
    # IncrementalAlterConfigs; AlterConfigs refuses them.
    stores = ConfigResource(ResourceType.BROKER, "1", set_config={
        "listener.name.ssl.ssl.keystore.location": "/nonexistent.pem"})
    assert admin_error(adm.alter_configs([stores])[stores]) == KafkaError.INVALID_REQUEST


@pytest.mark.parametrize("config", [{"cleanup.policy": "sometimes"}, {"retention.ms": "soon"},
                                    {"no.such.config": "1"}])
def test_invalid_topic_config_rejected(broker, config):
    adm = admin(broker)
    err = admin_error(adm.create_topics([NewTopic("adm-bad", 1, 1, config=config)])["adm-bad"])
    assert err == KafkaError.INVALID_CONFIG
    assert "adm-bad" not in topic_names(adm)


def test_invalid_partition_and_replication_counts(broker):
    adm = admin(broker)
    assert admin_error(adm.create_topics([NewTopic("adm-p0", 0, 1)])["adm-p0"]) == \
        KafkaError.INVALID_PARTITIONS
    assert admin_error(adm.create_topics([NewTopic("adm-r3", 1, 3)])["adm-r3"]) == \
        KafkaError.INVALID_REPLICATION_FACTOR
    assert not {"adm-p0", "adm-r3"} & topic_names(adm)


def test_create_partitions(broker):
    adm = admin(broker)
    create_topic(broker, "adm-grow", partitions=2, adm=adm)
    produce(broker, "adm-grow", [{"partition": 0, "value": b"before"}])
    result(adm.create_partitions([NewPartitions("adm-grow", 5)])["adm-grow"])
    wait_until(lambda: len(adm.list_topics("adm-grow", timeout=5)
                           .topics["adm-grow"].partitions) == 5, 10, "5 partitions")
    d = produce(broker, "adm-grow", [{"partition": 4, "value": b"new partition"}])
    assert d[0][:2] == (4, 0)
    assert _offsets(adm, "adm-grow", 0) == (0, 1), "existing partitions keep their data"
    err = admin_error(adm.create_partitions([NewPartitions("adm-grow", 3)])["adm-grow"])
    assert err == KafkaError.INVALID_PARTITIONS, "cannot shrink"
    err = admin_error(adm.create_partitions([NewPartitions("adm-nope", 3)])["adm-nope"])
    assert err == KafkaError.UNKNOWN_TOPIC_OR_PART


def test_describe_cluster(broker):
    adm = admin(broker)  # keep the client alive until the future resolves
    d = result(adm.describe_cluster())
    assert [(n.id, n.host, n.port) for n in d.nodes] == [(1, "127.0.0.1", broker.port)]
    assert d.controller.id == 1
    assert d.cluster_id


def test_describe_log_dirs_with_kafka_python(broker):
    """kafka-python's describe_log_dirs (DescribeLogDirs v4): the data directory with its disk
    space and each replica's size; unknown topics and partitions are left out, not errors."""
    from kafka.admin import KafkaAdminClient
    create_topic(broker, "dirs", partitions=2)
    produce(broker, "dirs", [{"partition": 0, "value": b"x" * 100}] * 10)
    adm = KafkaAdminClient(bootstrap_servers=f"127.0.0.1:{broker.port}")
    try:
        (b,) = adm.describe_log_dirs()
        (d,) = b["log_dirs"]
        assert d["error_code"] == 0 and d["log_dir"].startswith("/"), d
        assert d["total_bytes"] > d["usable_bytes"] > 0, d
        (t,) = [t for t in d["topics"] if t["name"] == "dirs"]
        sizes = {p["partition_index"]: p["partition_size"] for p in t["partitions"]}
        assert sizes[0] > 10 * 100 and sizes[1] == 0, sizes
        assert all(p["offset_lag"] == 0 for p in t["partitions"])
        (one,) = adm.describe_log_dirs({"dirs": [1]})[0]["log_dirs"]
        assert [(t["name"], [p["partition_index"] for p in t["partitions"]])
                for t in one["topics"]] == [("dirs", [1])]
        (none,) = adm.describe_log_dirs({"nope": [0], "dirs": [7]})[0]["log_dirs"]
        assert none["error_code"] == 0 and none["topics"] == [], none
    finally:
        adm.close()


def _offsets(adm, topic, partition):
    tp = TopicPartition(topic, partition)
    lo = result(adm.list_offsets({tp: OffsetSpec.earliest()})[tp]).offset
    hi = result(adm.list_offsets({tp: OffsetSpec.latest()})[tp]).offset
    return lo, hi


def test_list_offsets_earliest_latest_max_timestamp_for_timestamp(broker):
    adm = admin(broker)
    create_topic(broker, "adm-lo", partitions=1, adm=adm)
    tp = TopicPartition("adm-lo", 0)
    assert _offsets(adm, "adm-lo", 0) == (0, 0), "empty partition"
    base = int(time.time() * 1000) - 60_000
    stamps = [base + d for d in (10, 50, 30, 20, 40)]  # max at offset 1
    # One batch of 5 records (linger + lz4): latest must be last offset + 1 = 5, not 1.
    delivered = produce(broker, "adm-lo", [{"partition": 0, "value": f"{i}".encode(),
                                            "timestamp": ts} for i, ts in enumerate(stamps)],
                        {"linger.ms": 200, "compression.type": "lz4"})
    assert sorted(o for _, o, _, _ in delivered) == [0, 1, 2, 3, 4]
    assert _offsets(adm, "adm-lo", 0) == (0, 5)
    mx = result(adm.list_offsets({tp: OffsetSpec.max_timestamp()})[tp])
    assert (mx.offset, mx.timestamp) == (1, base + 50)
    # for_timestamp: the first offset whose timestamp is >= the asked one.
    at = result(adm.list_offsets({tp: OffsetSpec.for_timestamp(base + 25)})[tp])
    assert at.offset == 1
    after = result(adm.list_offsets({tp: OffsetSpec.for_timestamp(base + 1_000_000)})[tp])
    assert after.offset == -1, "no record that late: Kafka answers offset -1"
    # A second batch appends after the first.
    produce(broker, "adm-lo", [{"partition": 0, "value": b"x"}] * 3)
    assert _offsets(adm, "adm-lo", 0) == (0, 8)


def test_delete_records_moves_log_start(broker):
    adm = admin(broker)
    create_topic(broker, "adm-dr", partitions=1, adm=adm)
    produce(broker, "adm-dr", [{"partition": 0, "value": f"{i}".encode()} for i in range(10)])
    tp = TopicPartition("adm-dr", 0, 4)
    res = result(adm.delete_records([tp])[tp])
    assert res.low_watermark == 4
    assert _offsets(adm, "adm-dr", 0) == (4, 10)
    got = consume(broker, "adm-dr", [0], 6)
    assert [m["offset"] for m in got] == list(range(4, 10))
    beyond = TopicPartition("adm-dr", 0, 11)
    err = admin_error(adm.delete_records([beyond])[beyond])
    assert err == KafkaError.OFFSET_OUT_OF_RANGE


@pytest.mark.timeout(60)
def test_list_and_describe_consumer_groups_with_members_and_offsets(broker):
    adm = admin(broker)
    topic = create_topic(broker, "adm-grp", partitions=4, adm=adm)
    produce(broker, topic, [{"partition": p, "value": b"v"} for p in range(4) for _ in range(3)])
    P = {(topic, p) for p in range(4)}
    tl = Timeline()
    ms = [ConfluentMember(broker, tl, n, "adm-group", [topic], "range").start() for n in "AB"]
    try:
        snap = wait_for_owners(tl, lambda s: partition_of(s, "AB", P) and
                               all(len(s.get(n, ())) for n in "AB"), 20, "A and B to share")

        def stable():
            r = result(adm.list_consumer_groups())
            return {g.group_id: g for g in r.valid}.get("adm-group")

        g = wait_until(lambda: (lambda x: x if x and x.state == ConsumerGroupState.STABLE
                                else None)(stable()), 15, "adm-group listed as Stable")
        assert not g.is_simple_consumer_group
        d = result(adm.describe_consumer_groups(["adm-group"])["adm-group"])
        assert d.state == ConsumerGroupState.STABLE
        assert d.partition_assignor == "range"
        assert d.coordinator.id == 1
        by_client = {m.client_id: m for m in d.members}
        assert set(by_client) == {"A", "B"}
        for n, mem in zip("AB", ms):
            m = by_client[n]
            assert m.member_id == mem.member_id
            got = {(tp.topic, tp.partition) for tp in m.assignment.topic_partitions}
            assert got == snap[n], f"{n}: broker says {sorted(got)}, client has {sorted(snap[n])}"
            assert m.host, "member host should be the client's address"
    finally:
        for m in ms:
            m.stop()
    # Commit offsets as a (now empty) group would, and read them back through the admin API.
    c = Consumer(conf(broker, {"group.id": "adm-group", "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 2), TopicPartition(topic, 3, 1)],
                 asynchronous=False)
    finally:
        c.close()
    r = result(adm.list_consumer_group_offsets(
        [ConsumerGroupTopicPartitions("adm-group")])["adm-group"])
    got = {(tp.topic, tp.partition): tp.offset for tp in r.topic_partitions}
    assert got.get((topic, 0)) == 2 and got.get((topic, 3)) == 1, got
    d = result(adm.describe_consumer_groups(["adm-group"])["adm-group"])
    assert d.state == ConsumerGroupState.EMPTY and d.members == []
    # Deleting a group with committed offsets removes it.
    result(adm.delete_consumer_groups(["adm-group"])["adm-group"])
    r = result(adm.list_consumer_groups())
    assert "adm-group" not in {g.group_id for g in r.valid}
