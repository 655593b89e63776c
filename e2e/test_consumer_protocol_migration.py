"""Online migration between the group protocols (KIP-848), with confluent-kafka: a rolling
upgrade of a classic group to `group.protocol=consumer` and a rolling downgrade back, one member
at a time, while records are produced and consumed. Classic members (cooperative-sticky) and
consumer-protocol members share the group in between. At no moment do two members own one
partition (from the members' own callbacks), every record is consumed, and a record is consumed
twice only when its partition moved before the commit that covered it reached the broker
(members commit each record synchronously)."""

import threading
import time

import pytest
from confluent_kafka import Consumer, ConsumerGroupType, KafkaError, KafkaException

from clients import admin, produce
from conftest import wait_until
from groups import (ASSIGN, GROUP_TIMINGS, LOST, REVOKE, Timeline, partition_of, tps,
                    wait_for_owners)
from test_consumer_protocol import CONSUMER, FAST_GROUPS, create_topic, universe

# A commit may fail while the member's partitions move: it is retried with the next record.
COMMIT_RETRIABLE = {KafkaError._NO_OFFSET, KafkaError.REBALANCE_IN_PROGRESS,
                    KafkaError.ILLEGAL_GENERATION, KafkaError.STALE_MEMBER_EPOCH,
                    KafkaError.UNKNOWN_MEMBER_ID, KafkaError._STATE, KafkaError._ASSIGNMENT_LOST}


class Member:
    """A consumer in its own thread that commits every record it consumes."""

    def __init__(self, broker, tl, name, group, topic, protocol):
        self.tl, self.name = tl, name
        conf = {"bootstrap.servers": broker.bootstrap, "broker.address.family": "v4",
                "group.id": group, "client.id": name, "enable.auto.commit": False,
                "auto.offset.reset": "earliest"}
        if protocol == "consumer":
            conf.update(CONSUMER)
        else:
            conf.update({"partition.assignment.strategy": "cooperative-sticky",
                         **GROUP_TIMINGS})
        self.conf, self.topic = conf, topic
        self.consumed = []  # (partition, offset)
        self.errors = []
        self._stop = threading.Event()
        self.exc = None
        self.thread = threading.Thread(target=self._run, name=f"member-{name}", daemon=True)

    def start(self):
        self.thread.start()
        return self

    def _run(self):
        try:
            c = Consumer(self.conf)
            c.subscribe([self.topic],
                        on_assign=lambda _c, p: self.tl.record(self.name, ASSIGN, tps(p)),
                        on_revoke=lambda _c, p: self.tl.record(self.name, REVOKE, tps(p)),
                        on_lost=lambda _c, p: self.tl.record(self.name, LOST, tps(p)))
            while not self._stop.is_set():
                msg = c.poll(0.05)
                if msg is None:
                    continue
                if msg.error():
                    self.errors.append(msg.error())
                    continue
                self.consumed.append((msg.partition(), msg.offset()))
                try:
                    c.commit(message=msg, asynchronous=False)
                except KafkaException as e:
                    if e.args[0].code() not in COMMIT_RETRIABLE:
                        self.errors.append(e.args[0])
            c.close()
        except Exception as e:  # surfaced by stop()
            self.exc = e

    def stop(self, timeout=20):
        self._stop.set()
        self.thread.join(timeout)
        assert not self.thread.is_alive(), f"{self.name} did not close within {timeout}s"
        assert self.exc is None, f"{self.name} failed: {self.exc!r}"
        assert not self.errors, f"{self.name} was told: {self.errors[:5]}"


def group_type(broker, group):
    a = admin(broker)
    return a.describe_consumer_groups([group])[group].result(30).type


def moves(tl):
    """How many times a partition left an owner (revoked or lost)."""
    return sum(len(e.parts) for e in tl.events if e.kind in (REVOKE, LOST))


@pytest.mark.timeout(240)
def test_a_rolling_upgrade_and_downgrade_keep_consuming_without_double_ownership(start_broker):
    broker = start_broker(overrides=FAST_GROUPS)
    topic, n, group = "migration-events", 6, "migration"
    create_topic(broker, topic, n)
    everything = universe(topic, n)
    tl = Timeline()
    members = {}
    produced = 0

    def more(count):
        nonlocal produced
        produce(broker, topic, [{"partition": i % n, "value": b"%d" % (produced + i)}
                                for i in range(count)])
        produced += count

    def join(name, protocol):
        members[name] = Member(broker, tl, name, group, topic, protocol).start()

    def leave(name):
        members.pop(name).stop()

    def settled(names, what):
        wait_for_owners(tl, lambda s: partition_of(s, names, everything) and
                        all(s.get(x) for x in names), 60, what)

    stopped = []
    try:
        # A classic group of two.
        join("C1", "classic")
        join("C2", "classic")
        more(100)
        settled(["C1", "C2"], "the classic members share the partitions")
        assert group_type(broker, group) == ConsumerGroupType.CLASSIC
        # Rolling upgrade: each classic member is replaced by a consumer-protocol member.
        join("K1", "consumer")
        settled(["C1", "C2", "K1"], "K1 joined the classic members (the group is upgraded)")
        assert group_type(broker, group) == ConsumerGroupType.CONSUMER
        more(100)
        stopped.append(members["C1"])
        leave("C1")
        join("K2", "consumer")
        settled(["C2", "K1", "K2"], "K2 replaced C1")
        stopped.append(members["C2"])
        leave("C2")
        settled(["K1", "K2"], "the consumer-protocol members own everything")
        more(100)
        # Rolling downgrade: back to classic members, one at a time.
        join("C3", "classic")
        settled(["C3", "K1", "K2"], "a classic member joined the consumer group")
        stopped.append(members["K1"])
        leave("K1")
        join("C4", "classic")
        settled(["C3", "C4", "K2"], "C4 replaced K1")
        stopped.append(members["K2"])
        leave("K2")
        settled(["C3", "C4"], "the classic members own everything again")
        assert group_type(broker, group) == ConsumerGroupType.CLASSIC
        more(100)
        everyone = stopped + list(members.values())
        wait_until(lambda: len({r for m in everyone for r in m.consumed}) == produced, 60,
                   f"all {produced} records consumed")
        for name in list(members):
            stopped.append(members[name])
            leave(name)
    finally:
        for m in members.values():
            m._stop.set()
    assert not tl.violations(), "\n".join(tl.violations()) + "\n" + tl.dump()
    consumed = [r for m in stopped for r in m.consumed]
    duplicates = len(consumed) - len(set(consumed))
    assert len(set(consumed)) == produced
    assert duplicates <= moves(tl), f"{duplicates} duplicates for {moves(tl)} moves\n{tl.dump()}"
    print(f"{produced} records, {duplicates} consumed twice, {moves(tl)} partition moves")
