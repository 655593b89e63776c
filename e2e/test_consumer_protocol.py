"""KIP-848 consumer groups (`group.protocol=consumer`) with confluent-kafka: the broker assigns,
members reconcile through ConsumerGroupHeartbeat. Members join, leave, crash (SIGKILL) and are
paused (SIGSTOP) past their session timeout; at no moment do two members own one partition, as
the members' own assignment callbacks show it. On 3 nodes, the group coordinator's node is
SIGKILLed while members consume and commit: no acknowledged commit is lost and no member is
fenced (the group's epochs survive on the new coordinator). The admin APIs see the group as a
consumer group (ConsumerGroupDescribe, ListGroups' type, DeleteGroups)."""

import time

import pytest
from confluent_kafka import (Consumer, ConsumerGroupType, KafkaError, KafkaException,
                             TopicPartition)
from confluent_kafka.admin import NewTopic

from clients import admin, conf, produce
from conftest import wait_until
from groups import (ASSIGN, LOST, REVOKE, ConfluentMember, ProcessMember, Timeline,
                    partition_of, tps, wait_for_owners)

SESSION_MS = 6000
# The broker's KIP-848 timings: members heartbeat every 500 ms and are fenced 6 s after the last.
FAST_GROUPS = {
    "group.consumer.session.timeout.ms": str(SESSION_MS),
    "group.consumer.min.session.timeout.ms": str(SESSION_MS),
    "group.consumer.heartbeat.interval.ms": "500",
    "group.consumer.min.heartbeat.interval.ms": "500",
}
CONSUMER = {"group.protocol": "consumer"}


def create_topic(broker, name, partitions, rf=1):
    a = admin(broker)  # kept alive until the answer: a destroyed client fails its futures
    a.create_topics([NewTopic(name, partitions, rf)])[name].result(30)


def universe(topic, n):
    return {(topic, p) for p in range(n)}


def shares(snap, names):
    return sorted(len(snap.get(n, ())) for n in names)


@pytest.mark.timeout(180)
def test_members_join_leave_crash_and_pause_without_double_ownership(start_broker):
    broker = start_broker(overrides=FAST_GROUPS)
    topic, n = "kip848-churn", 12
    create_topic(broker, topic, n)
    all_parts = universe(topic, n)
    tl = Timeline()
    group = "kip848-churn"
    a = ConfluentMember(broker, tl, "A", group, [topic], "range", extra=CONSUMER).start()
    procs = []
    try:
        wait_for_owners(tl, lambda s: partition_of(s, ["A"], all_parts), 30, "A owns everything")
        b = ConfluentMember(broker, tl, "B", group, [topic], "range", extra=CONSUMER).start()
        for name in ("C", "D"):
            procs.append(ProcessMember(broker, tl, name, group, topic, "confluent-consumer",
                                       "uniform", SESSION_MS, 500).start())
        four = ["A", "B", "C", "D"]
        wait_for_owners(tl, lambda s: partition_of(s, four, all_parts) and
                        shares(s, four) == [3, 3, 3, 3], 40, "four members with 3 each")

        # A leaves: its partitions move at once, well before a session timeout.
        left = time.monotonic()
        a.stop()
        three = ["B", "C", "D"]
        wait_for_owners(tl, lambda s: partition_of(s, three, all_parts) and
                        shares(s, three) == [4, 4, 4], 20, "B, C, D share A's partitions")
        assert time.monotonic() - left < SESSION_MS / 1000, "a leaving member was waited for"

        # C crashes: after its session timeout the others take its partitions.
        c, d = procs
        c.kill()
        wait_for_owners(tl, lambda s: partition_of(s, ["B", "D"], all_parts) and
                        shares(s, ["B", "D"]) == [6, 6], 40, "B and D share C's partitions")

        # D freezes past its session timeout: it is fenced, B takes everything; once D runs
        # again it learns it lost its partitions, rejoins and gets its share back.
        d.pause()
        wait_for_owners(tl, lambda s: set(s.get("B", ())) == all_parts, 40, "B owns everything")
        d.resume()
        wait_for_owners(tl, lambda s: partition_of(s, ["B", "D"], all_parts) and
                        shares(s, ["B", "D"]) == [6, 6], 40, "D rejoined with its share")
        assert tl.events_of("D", LOST), f"D never learned it was fenced:\n{tl.dump()}"
        b.stop()
    finally:
        for p in procs:
            p.cleanup()
    assert not tl.violations(), "\n".join(tl.violations()) + "\n" + tl.dump()


def describe(broker, group):
    a = admin(broker)
    return a.describe_consumer_groups([group])[group].result(30)


def listed(broker):
    a = admin(broker)
    return a.list_consumer_groups().result(30).valid


@pytest.mark.timeout(120)
def test_admin_apis_see_a_consumer_group(start_broker):
    broker = start_broker(overrides=FAST_GROUPS)
    topic, n = "kip848-admin", 4
    create_topic(broker, topic, n)
    tl = Timeline()
    group = "kip848-admin"
    m = ConfluentMember(broker, tl, "A", group, [topic], "range", extra=CONSUMER).start()
    wait_for_owners(tl, lambda s: set(s.get("A", ())) == universe(topic, n), 30, "A owns all")
    d = describe(broker, group)
    assert d.type == ConsumerGroupType.CONSUMER, d.type
    assert d.partition_assignor == "uniform", d.partition_assignor
    assert [sorted(p.partition for p in x.assignment.topic_partitions) for x in d.members] == \
        [list(range(n))]
    assert d.members[0].client_id == "A"
    mine = [g for g in listed(broker) if g.group_id == group]
    assert mine and mine[0].type == ConsumerGroupType.CONSUMER, [vars(g) for g in mine]
    # A group with members cannot be deleted; once empty it can.
    a = admin(broker)
    with pytest.raises(KafkaException) as e:
        a.delete_consumer_groups([group])[group].result(30)
    assert e.value.args[0].code() == KafkaError.NON_EMPTY_GROUP
    m.stop()
    wait_until(lambda: describe(broker, group).members == [], 20, "the group empties")
    a.delete_consumer_groups([group])[group].result(30)
    assert group not in [g.group_id for g in listed(broker)]


# Why a synchronous commit may fail here: nothing consumed since the last one, or the
# coordinator moving (its node was killed).
COMMIT_RETRIABLE = {KafkaError._NO_OFFSET, KafkaError._WAIT_COORD, KafkaError._TIMED_OUT,
                    KafkaError._TRANSPORT, KafkaError.NOT_COORDINATOR,
                    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.REQUEST_TIMED_OUT}


@pytest.mark.timeout(300)
def test_no_commit_is_lost_and_no_member_fenced_across_a_coordinator_sigkill(cluster_factory):
    c = cluster_factory(3, overrides={"offsets.topic.replication.factor": "3",
                                      "offsets.topic.num.partitions": "6", **FAST_GROUPS})
    nodes = list(c.nodes.values())
    group, topic, n = "kip848-failover", "kip848-events", 4
    err, msg = nodes[0].create_topic(topic, partitions=n, replication_factor=3)
    assert err == 0, (err, msg)
    for node in nodes:
        wait_until(lambda: topic in node.metadata()["topics"], 10, f"{topic} on {node.node_id}")
    bootstrap = ",".join(x.bootstrap for x in nodes)

    class All:
        pass

    everyone = All()
    everyone.bootstrap = bootstrap
    produce(everyone, topic, [{"partition": i % n, "value": b"%d" % i} for i in range(400)])
    tl = Timeline()
    members = []
    for name in ("M1", "M2"):
        m = Consumer(conf(everyone, {"group.id": group, "enable.auto.commit": False,
                                     "auto.offset.reset": "earliest", "client.id": name,
                                     **CONSUMER}))
        m.subscribe([topic],
                    on_assign=lambda c_, p, name=name: tl.record(name, ASSIGN, tps(p)),
                    on_revoke=lambda c_, p, name=name: tl.record(name, REVOKE, tps(p)),
                    on_lost=lambda c_, p, name=name: tl.record(name, LOST, tps(p)))
        members.append((name, m))
    acked = {}  # partition -> the highest offset a commit acknowledged
    commit_errors = []

    def poll_all(rounds):
        for _ in range(rounds):
            for _name, m in members:
                for msg in m.consume(num_messages=20, timeout=0.1):
                    if msg.error():
                        continue
                try:
                    for tp in m.commit(asynchronous=False) or []:
                        if tp.error is None and tp.offset >= 0:
                            acked[tp.partition] = max(acked.get(tp.partition, 0), tp.offset)
                except KafkaException as e:
                    if e.args[0].code() not in COMMIT_RETRIABLE:
                        commit_errors.append((round(time.monotonic() - tl.t0, 3), e.args[0]))

    names = [name for name, _ in members]
    wait_until(lambda: (poll_all(3), partition_of(tl.snapshot(), names, universe(topic, n))
                        and len(acked) == n)[1], 60, "both members own and commit")
    coordinator = describe(everyone, group).coordinator.id
    before_kill = dict(acked)
    c.nodes[coordinator].kill()
    killed = time.monotonic()
    print(f"coordinator killed at +{killed - tl.t0:.3f}s")
    produce(everyone, topic, [{"partition": i % n, "value": b"late-%d" % i} for i in range(200)])
    # Every record (600) consumed and committed through the new coordinator.
    wait_until(lambda: (poll_all(3), sum(acked.values()) == 600)[1], 90,
               "all 600 records committed after the kill")
    recovered = time.monotonic() - killed
    assert not commit_errors, f"{commit_errors[:5]}\n{tl.dump()}" 
    probe = Consumer(conf(everyone, {"group.id": group, **CONSUMER}))
    try:
        seen = probe.committed([TopicPartition(topic, p) for p in range(n)], timeout=30)
    finally:
        probe.close()
    for tp in seen:
        assert tp.offset >= before_kill[tp.partition], (tp, before_kill)
        assert tp.offset == acked[tp.partition], (tp, acked)
    # The members were never fenced: the group's epochs came back with the coordinator.
    assert not [e for e in tl.events if e.kind == LOST], tl.dump()
    assert not tl.violations(), tl.violations()
    for _, m in members:
        m.close()
    print(f"all records committed {recovered:.2f}s after the coordinator's SIGKILL")


@pytest.mark.timeout(120)
def test_metrics_show_a_consumer_groups_epochs_reconciliations_and_lag(start_broker):
    from test_metrics import metrics_broker, scrape, value
    broker = metrics_broker(start_broker, **FAST_GROUPS)
    topic, n, group = "kip848-metrics", 4, "kip848-metrics"
    create_topic(broker, topic, n)
    produce(broker, topic, [{"partition": i % n, "value": b"x"} for i in range(40)])
    # Offsets committed first (a simple commit); the members never commit.
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    c.commit(offsets=[TopicPartition(topic, p, 3) for p in range(n)], asynchronous=False)
    c.close()
    tl = Timeline()
    a = ConfluentMember(broker, tl, "A", group, [topic], "range", extra=CONSUMER).start()
    wait_for_owners(tl, lambda s: set(s.get("A", ())) == universe(topic, n), 30, "A owns all")
    b = ConfluentMember(broker, tl, "B", group, [topic], "range", extra=CONSUMER).start()
    wait_for_owners(tl, lambda s: partition_of(s, ["A", "B"], universe(topic, n)) and
                    shares(s, ["A", "B"]) == [2, 2], 30, "A and B share")

    def settled():
        s = scrape(broker.metrics_port)
        return (value(s, "gregor_consumer_groups", state="Stable") == 1 and
                value(s, "gregor_consumer_group_members", group=group) == 2 and
                # B's join: A gives up two partitions, then B takes them (A's own join took
                # everything at once, with nothing to reconcile).
                value(s, "gregor_consumer_group_reconciliations_total", group=group) >= 1, s)[0]
    wait_until(settled, 20, "the group's series settle")
    s = scrape(broker.metrics_port)
    epoch = value(s, "gregor_consumer_group_epoch", group=group)
    assert epoch >= 2 and value(s, "gregor_consumer_group_target_assignment_epoch",
                                group=group) == epoch
    assert value(s, "gregor_consumer_group_classic_members", group=group) == 0
    assert value(s, "gregor_consumer_group_target_assignments_total", group=group) >= 2
    assert value(s, "gregor_consumer_group_assignment_seconds_total", group=group) > 0
    assert value(s, "gregor_consumer_group_last_reconciliation_seconds", group=group) >= 0
    # Lag, as for a classic group: 10 records per partition, 3 committed.
    assert value(s, "gregor_consumer_group_lag_sum_offsets", group=group) == 4 * 7
    # The classic groups' series do not count it.
    assert value(s, "gregor_group_members", group=group) is None
    a.stop()
    b.stop()
