"""OffsetDelete (KIP-496) through kafka-python's admin client (`delete_group_offsets`, as
kafka-consumer-groups.sh --delete-offsets sends it):
an empty group's committed offsets of a partition are removed and stay removed across a broker
restart; a group consuming the topic keeps them (GROUP_SUBSCRIBED_TO_TOPIC); an unknown group
gets GROUP_ID_NOT_FOUND."""

import pytest
from confluent_kafka import Consumer, TopicPartition
from kafka import KafkaAdminClient
from kafka import TopicPartition as KTopicPartition
from kafka.errors import GroupIdNotFoundError, GroupSubscribedToTopicError, NoError

from clients import conf, create_topic
from conftest import wait_until


def commit(broker, group, topic, offsets):
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    c.commit(offsets=[TopicPartition(topic, p, o) for p, o in offsets], asynchronous=False)
    c.close()


def committed(broker, group, topic, partitions):
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    got = c.committed([TopicPartition(topic, p) for p in partitions], timeout=15)
    c.close()
    return {tp.partition: tp.offset for tp in got}


def delete_offsets(broker, group, topic, partitions):
    a = KafkaAdminClient(bootstrap_servers=broker.bootstrap, request_timeout_ms=20000)
    try:
        got = a.delete_group_offsets(group, [KTopicPartition(topic, p) for p in partitions])
    finally:
        a.close()
    return {tp.partition: err for tp, err in got.items()}


@pytest.mark.timeout(120)
def test_offset_delete_removes_offsets_of_a_group_not_consuming_them(start_broker):
    broker = start_broker()
    create_topic(broker, "od", partitions=2)
    commit(broker, "od-empty", "od", [(0, 5), (1, 7)])
    assert delete_offsets(broker, "od-empty", "od", [0]) == {0: NoError}
    assert committed(broker, "od-empty", "od", [0, 1]) == {0: -1001, 1: 7}

    with pytest.raises(GroupIdNotFoundError):
        delete_offsets(broker, "od-nobody", "od", [0])

    # A member consuming the topic: its offsets stay.
    member = Consumer(conf(broker, {"group.id": "od-live", "enable.auto.commit": False,
                                    "session.timeout.ms": 6000, "heartbeat.interval.ms": 500}))
    member.subscribe(["od"])
    wait_until(lambda: member.poll(0.2) is None and member.assignment(), 30, "member assigned")
    member.commit(offsets=[TopicPartition("od", 0, 3)], asynchronous=False)
    assert delete_offsets(broker, "od-live", "od", [0]) == {0: GroupSubscribedToTopicError}
    member.close()

    # The deletion is durable: a restarted broker reloads the group without the offset.
    broker.restart()
    assert committed(broker, "od-empty", "od", [0, 1]) == {0: -1001, 1: 7}
