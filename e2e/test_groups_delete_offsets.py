"""`bin/kafka-consumer-groups.sh --delete-offsets` (gregor groups, OffsetDelete / KIP-496)
against a real broker: one partition's committed offset goes and the others stay, as another
client (confluent-kafka) reads them back; a whole topic clears every partition; a group whose
member is subscribed to the topic keeps its offsets (GROUP_SUBSCRIBED_TO_TOPIC, exit status 1);
an unknown group (GROUP_ID_NOT_FOUND) and an unknown topic (UNKNOWN_TOPIC_OR_PARTITION) are
reported as kafka-consumer-groups.sh reports them."""

import os
import subprocess

import pytest
from confluent_kafka import Consumer, TopicPartition

from clients import conf, create_topic
from conftest import REPO, gregor_bin, wait_until

TOPIC = "gdo"
NO_OFFSET = -1001


def delete_offsets(broker, group, *topics):
    args = ["--bootstrap-server", broker.bootstrap, "--delete-offsets", "--group", group]
    for t in topics:
        args += ["--topic", t]
    return subprocess.run([str(REPO / "bin" / "kafka-consumer-groups.sh"), *args],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, GREGOR_BIN=gregor_bin()))


def commit(broker, group, offsets):
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def committed(broker, group, partitions=3):
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in range(partitions)], timeout=15)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def rows(stdout):
    """The table's rows after its TOPIC / PARTITION / STATUS header, as (topic, partition,
    status)."""
    lines = stdout.splitlines()
    header = next(i for i, l in enumerate(lines) if l.split() == ["TOPIC", "PARTITION", "STATUS"])
    out = []
    for line in lines[header + 1:]:
        if line.strip():
            # TOPIC is 30 wide and PARTITION 15, each followed by a space.
            out.append((line[:30].strip(), line[31:46].strip(), line[47:].strip()))
    return out


@pytest.mark.timeout(120)
def test_delete_offsets_of_one_partition_then_a_whole_topic(start_broker):
    broker = start_broker()
    create_topic(broker, TOPIC, partitions=3)
    commit(broker, "gdo-empty", {0: 5, 1: 7, 2: 9})

    p = delete_offsets(broker, "gdo-empty", f"{TOPIC}:1")
    assert p.returncode == 0, p.stdout + p.stderr
    assert p.stdout.startswith(
        f"Request succeed for deleting offsets with topic {TOPIC}:1 group gdo-empty\n"), p.stdout
    assert rows(p.stdout) == [(TOPIC, "1", "Successful")], p.stdout
    assert committed(broker, "gdo-empty") == {0: 5, 1: NO_OFFSET, 2: 9}

    # A partition of a topic the cluster does not have: the broker's answer, shown per row,
    # and nothing else is touched.
    p = delete_offsets(broker, "gdo-empty", "nope:0", f"{TOPIC}:2")
    assert p.returncode != 0, p.stdout
    assert "Error: Encounter some partition level error" in p.stdout, p.stdout
    got = rows(p.stdout)
    assert got[0][:2] == (TOPIC, "2") and got[0][2] == "Successful", p.stdout
    assert got[1][:2] == ("nope", "0"), p.stdout
    assert got[1][2] == "Error: UNKNOWN_TOPIC_OR_PARTITION (3)", p.stdout
    assert "UNKNOWN_TOPIC_OR_PARTITION" in p.stderr, p.stderr
    assert committed(broker, "gdo-empty") == {0: 5, 1: NO_OFFSET, 2: NO_OFFSET}

    # A topic named alone: all its partitions, from metadata (one no longer has an offset).
    p = delete_offsets(broker, "gdo-empty", TOPIC)
    assert p.returncode == 0, p.stdout + p.stderr
    assert rows(p.stdout) == [(TOPIC, str(i), "Successful") for i in range(3)], p.stdout
    assert committed(broker, "gdo-empty") == {0: NO_OFFSET, 1: NO_OFFSET, 2: NO_OFFSET}

    # A whole topic that cannot be described has a row of its own.
    commit(broker, "gdo-empty", {0: 4})
    p = delete_offsets(broker, "gdo-empty", "nope")
    assert p.returncode != 0, p.stdout
    assert rows(p.stdout) and rows(p.stdout)[0][:2] == ("nope", "Not Provided"), p.stdout
    assert committed(broker, "gdo-empty") == {0: 4, 1: NO_OFFSET, 2: NO_OFFSET}


@pytest.mark.timeout(120)
def test_delete_offsets_refused_for_a_subscribed_member_and_an_unknown_group(start_broker):
    broker = start_broker()
    create_topic(broker, TOPIC, partitions=3)
    member = Consumer(conf(broker, {"group.id": "gdo-live", "enable.auto.commit": False,
                                    "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}))
    try:
        member.subscribe([TOPIC])
        wait_until(lambda: member.poll(0.2) is None and member.assignment(), 30,
                   "member assigned")
        member.commit(offsets=[TopicPartition(TOPIC, 0, 3), TopicPartition(TOPIC, 1, 4)],
                      asynchronous=False)

        p = delete_offsets(broker, "gdo-live", f"{TOPIC}:0")
        assert p.returncode != 0, p.stdout
        assert "\nError: Encounter some partition level error, see the follow-up details:" \
            in p.stdout, p.stdout
        got = rows(p.stdout)
        assert [r[:2] for r in got] == [(TOPIC, "0")], p.stdout
        assert got[0][2] == "Error: GROUP_SUBSCRIBED_TO_TOPIC (86)", p.stdout
        assert "GROUP_SUBSCRIBED_TO_TOPIC" in p.stderr, p.stderr
        offsets = member.committed([TopicPartition(TOPIC, p) for p in range(2)], timeout=15)
        assert {tp.partition: tp.offset for tp in offsets} == {0: 3, 1: 4}
    finally:
        member.close()

    p = delete_offsets(broker, "gdo-nobody", f"{TOPIC}:0")
    assert p.returncode != 0, p.stdout
    assert "\nError: 'gdo-nobody' does not exist." in p.stdout, p.stdout
    got = rows(p.stdout)
    assert len(got) == 1 and got[0][2] == "Error: GROUP_ID_NOT_FOUND (69)", p.stdout
    assert "GROUP_ID_NOT_FOUND" in p.stderr, p.stderr
