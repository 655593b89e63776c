"""Consumer groups on a real 3-node cluster: each `__consumer_offsets` partition's groups are
coordinated by that partition's leader. FindCoordinator (single and KIP-699 batched) names it
through any node, other nodes answer NOT_COORDINATOR, confluent-kafka consumers commit and resume
through any bootstrap node, and a SIGKILLed coordinator's groups keep their committed offsets
once it is back."""

import subprocess
import time

import pytest
from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

import kwire
from clients import conf, produce
from conftest import wait_until

OFFSETS_PARTITIONS = 6
OFFSETS = "__consumer_offsets"


def single_replica_cluster(cluster_factory):
    return cluster_factory(3, overrides={
        "offsets.topic.replication.factor": "1",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    })


def find(node, group):
    with kwire.Conn("127.0.0.1", node.port) as c:
        return kwire.find_coordinator(c, group)


def coordinator_id(node, group, timeout=30):
    """The coordinator FindCoordinator names through `node`, retrying retriable answers."""
    answers = []  # (error, node id) per FindCoordinator

    def answered():
        answers.append(find(node, group)[:2])
        return answers[-1][0] != kwire.COORDINATOR_NOT_AVAILABLE

    wait_until(answered, timeout, f"a coordinator for {group} through node {node.node_id}")
    assert answers[-1][0] == 0, f"FindCoordinator {group}: {answers}"
    return answers[-1][1]


def offsets_leaders(node):
    """{partition: leader} of __consumer_offsets in `node`'s metadata."""
    _, partitions = node.metadata([OFFSETS])["topics"][OFFSETS]
    return {p: leader for p, (_, leader, _, _) in partitions.items()}


def groups_by_coordinator(node, count=40):
    """Group ids, keyed by the node leading their __consumer_offsets partition."""
    leaders = offsets_leaders(node)
    out = {}
    for i in range(count):
        g = f"group-{i}"
        out.setdefault(leaders[kwire.group_partition(g, OFFSETS_PARTITIONS)], []).append(g)
    return out


def create_events(c, partitions=3, records=300):
    node = c.nodes[0]
    err, msg = node.create_topic("events", partitions=partitions, replication_factor=1)
    assert err == 0, (err, msg)
    for n in c.nodes.values():
        wait_until(lambda: "events" in n.metadata()["topics"], 10, f"events on node {n.node_id}")
    produce(node, "events", [{"partition": i % partitions, "value": b"%d" % i}
                             for i in range(records)])


def consumer(node, group):
    return Consumer(conf(node, {
        "group.id": group, "enable.auto.commit": False, "auto.offset.reset": "earliest",
        "enable.partition.eof": False, "session.timeout.ms": 6000,
        "heartbeat.interval.ms": 500}))


def consume_and_commit(node, group, count, timeout=60):
    """Consumes at least `count` records of `events` in `group` through `node`, commits the
    positions synchronously and leaves. Returns {partition: [offsets in order]}."""
    c = consumer(node, group)
    got = {}
    try:
        c.subscribe(["events"])
        deadline = time.monotonic() + timeout
        n = 0
        while n < count:
            assert time.monotonic() < deadline, f"{group}: consumed {n} of {count}"
            for m in c.consume(num_messages=count - n, timeout=0.2):
                if m.error():
                    raise KafkaException(m.error())
                got.setdefault(m.partition(), []).append(m.offset())
                n += 1
        c.commit(asynchronous=False)
    finally:
        c.close()
    return got


# Why a synchronous commit may fail here: nothing consumed since the last one, the coordinator
# moving (its node was killed), or the group rebalancing meanwhile.
COMMIT_RETRIABLE = {KafkaError._NO_OFFSET, KafkaError._WAIT_COORD, KafkaError._TIMED_OUT,
                    KafkaError._TRANSPORT, KafkaError.NOT_COORDINATOR,
                    KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
                    KafkaError.REQUEST_TIMED_OUT, KafkaError.REBALANCE_IN_PROGRESS,
                    KafkaError.ILLEGAL_GENERATION, KafkaError.UNKNOWN_MEMBER_ID}


def committed(node, group, partitions=3):
    c = consumer(node, group)
    try:
        tps = c.committed([TopicPartition("events", p) for p in range(partitions)], timeout=20)
        return {tp.partition: tp.offset for tp in tps}
    finally:
        c.close()


@pytest.mark.timeout(120)
def test_find_coordinator_names_the_leader_of_the_groups_partition(cluster_factory):
    c = single_replica_cluster(cluster_factory)
    nodes = list(c.nodes.values())
    # The first FindCoordinator creates the internal topic, spread over the three nodes.
    coordinator_id(nodes[0], "group-0")
    for n in nodes:
        wait_until(lambda: len(offsets_leaders(n)) == OFFSETS_PARTITIONS
                   and all(l >= 0 for l in offsets_leaders(n).values()),
                   20, f"{OFFSETS} leaders on node {n.node_id}")
    by_node = groups_by_coordinator(nodes[0])
    assert len(by_node) >= 2, f"groups should land on several nodes: {by_node}"
    leaders = offsets_leaders(nodes[0])
    for n in nodes:
        for g in [gs[0] for gs in by_node.values()]:
            err, node_id, host, port = find(n, g)
            leader = leaders[kwire.group_partition(g, OFFSETS_PARTITIONS)]
            assert (err, node_id) == (0, leader), (n.node_id, g, err, node_id)
            assert (host, port) == ("127.0.0.1", c.nodes[leader].port)
    # KIP-699: one request for several groups, each answered with its own coordinator.
    keys = [g for gs in by_node.values() for g in gs[:2]]
    with kwire.Conn("127.0.0.1", nodes[1].port) as conn:
        answers = kwire.find_coordinators(conn, keys)
    assert sorted(answers) == sorted(keys)
    for g, (err, node_id, _, port) in answers.items():
        leader = leaders[kwire.group_partition(g, OFFSETS_PARTITIONS)]
        assert (err, node_id, port) == (0, leader, c.nodes[leader].port), g


@pytest.mark.timeout(120)
def test_group_requests_to_another_node_get_not_coordinator(cluster_factory):
    c = single_replica_cluster(cluster_factory)
    coordinator_id(c.nodes[0], "group-0")
    err, msg = c.nodes[0].create_topic("t", partitions=1, replication_factor=1)
    assert err == 0, (err, msg)
    for n in c.nodes.values():
        wait_until(lambda: "t" in n.metadata()["topics"], 10, f"t on node {n.node_id}")
    group = "payments"
    owner = c.nodes[coordinator_id(c.nodes[0], group)]
    others = [n for n in c.nodes.values() if n is not owner]
    subscription = kwire.consumer_subscription(["t"])
    for n in others:
        with kwire.Conn("127.0.0.1", n.port) as conn:
            join = kwire.join_group(conn, 5, group, [("range", subscription)])
            assert join["error_code"] == kwire.NOT_COORDINATOR, join
            assert kwire.offset_commit(conn, group, "t", {0: 5}) == {0: kwire.NOT_COORDINATOR}
            err, _ = kwire.offset_fetch(conn, group, "t", [0])
            assert err == kwire.NOT_COORDINATOR
    with kwire.Conn("127.0.0.1", owner.port) as conn:
        join = kwire.join_group(conn, 5, group, [("range", subscription)])
        assert join["error_code"] == 0, join
        simple = next(g for g in (f"simple-{i}" for i in range(100))
                      if coordinator_id(owner, g) == owner.node_id)
        assert kwire.offset_commit(conn, simple, "t", {0: 5}) == {0: 0}
        assert kwire.offset_fetch(conn, simple, "t", [0]) == (0, {0: (5, 0)})


@pytest.mark.timeout(240)
def test_consumers_commit_and_resume_through_any_node_and_across_a_coordinator_restart(
        cluster_factory):
    c = single_replica_cluster(cluster_factory)
    nodes = list(c.nodes.values())
    coordinator_id(nodes[0], "group-0")
    for n in nodes:
        wait_until(lambda: all(l >= 0 for l in offsets_leaders(n).values()), 20,
                   f"{OFFSETS} leaders on node {n.node_id}")
    by_node = groups_by_coordinator(nodes[0])
    groups = [gs[0] for gs in by_node.values()]
    assert len(groups) >= 2, by_node
    create_events(c)

    expected = {}
    for i, g in enumerate(groups):
        # Through a node that is not necessarily the group's coordinator.
        got = consume_and_commit(nodes[i % len(nodes)], g, 60 + 30 * i)
        expected[g] = {p: offsets[-1] + 1 for p, offsets in got.items()}
        for p, offsets in got.items():
            assert offsets == list(range(offsets[0], offsets[0] + len(offsets))), (g, p)
    for i, g in enumerate(groups):
        via = nodes[(i + 1) % len(nodes)]
        seen = committed(via, g)
        for p, offset in expected[g].items():
            assert seen[p] == offset, (g, p, seen, expected[g])
        # A new member resumes at the committed offsets: nothing before them is read again.
        resumed = consume_and_commit(via, g, 30)
        for p, offsets in resumed.items():
            assert offsets[0] == expected[g].get(p, 0), (g, p, offsets[:3], expected[g])
            expected[g][p] = offsets[-1] + 1

    # `gregor groups --list` through one node lists the groups of every coordinator.
    out = subprocess.run([c.bin, "groups", "--bootstrap-server", nodes[0].bootstrap, "--list"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert sorted(set(out.stdout.split()) & set(groups)) == sorted(groups), out.stdout

    # SIGKILL the coordinator of the first group and bring it back: its groups' offsets are there.
    victim_id, victim_groups = next(iter(by_node.items()))
    victim = c.nodes[victim_id]
    victim.kill()
    survivor = next(n for n in nodes if n is not victim)
    g = victim_groups[0]
    # With one replica, the partition has no leader while its node is down.
    wait_until(lambda: find(survivor, g)[0] == kwire.COORDINATOR_NOT_AVAILABLE, 20,
               f"{g} without a coordinator")
    victim.start()
    victim.wait_ready(40)
    assert coordinator_id(survivor, g, timeout=40) == victim_id
    seen = committed(survivor, g)
    for p, offset in expected[g].items():
        assert seen[p] == offset, (g, p, seen, expected[g])


@pytest.mark.timeout(300)
def test_group_survives_its_coordinator_being_killed(cluster_factory):
    """RF 3 everywhere: SIGKILL the node leading the group's __consumer_offsets partition while
    a 2-member confluent-kafka group consumes and commits. The group's offsets survive on the
    new leader: a new member starts at the committed offsets, and the surviving member goes on."""
    c = cluster_factory(3, overrides={
        "offsets.topic.replication.factor": "3",
        "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS),
    })
    nodes = list(c.nodes.values())
    group = "survivors"
    coordinator_id(nodes[0], group)
    err, msg = nodes[0].create_topic("events", partitions=4, replication_factor=3)
    assert err == 0, (err, msg)
    for n in nodes:
        wait_until(lambda: "events" in n.metadata()["topics"], 10, f"events on node {n.node_id}")
    produce(nodes[0], "events", [{"partition": i % 4, "value": b"%d" % i} for i in range(400)])
    victim = c.nodes[coordinator_id(nodes[0], group)]
    bootstrap = ",".join(n.bootstrap for n in nodes)

    class All:
        pass

    everyone = All()
    everyone.bootstrap = bootstrap
    members = [consumer(everyone, group) for _ in range(2)]
    seen = [dict(), dict()]
    commit_errors = []  # commits that failed for another reason than COMMIT_RETRIABLE
    for m in members:
        m.subscribe(["events"])

    def poll_all(rounds):
        for _ in range(rounds):
            for i, m in enumerate(members):
                for msg in m.consume(num_messages=20, timeout=0.1):
                    if msg.error():
                        continue
                    seen[i].setdefault(msg.partition(), []).append(msg.offset())
                try:
                    m.commit(asynchronous=False)
                except KafkaException as e:
                    if e.args[0].code() not in COMMIT_RETRIABLE:
                        commit_errors.append(e.args[0])

    def every_partition_committed():
        poll_all(5)
        return all(o >= 0 for o in committed(everyone, group, 4).values())

    wait_until(every_partition_committed, 60, "a committed offset on every partition")
    assert all(seen), f"both members should have partitions: {seen}"
    committed_before = committed(everyone, group, 4)
    assert all(o > 0 for o in committed_before.values()), committed_before
    victim.kill()
    produce(everyone, "events", [{"partition": i % 4, "value": b"late-%d" % i} for i in range(200)])
    consumed_before_kill = [sum(len(v) for v in s.values()) for s in seen]
    poll_all(80)
    # The surviving members keep consuming, and the group's offsets are on the new coordinator.
    assert sum(sum(len(v) for v in s.values()) for s in seen) > sum(consumed_before_kill), seen
    after = wait_until(lambda: committed(everyone, group, 4), 60, "committed offsets after kill")
    assert not commit_errors, commit_errors[:5]
    for p, offset in committed_before.items():
        assert after[p] >= offset, (p, committed_before, after)
    for m in members:
        m.close()
    produce(everyone, "events", [{"partition": i % 4, "value": b"last-%d" % i} for i in range(40)])
    # A new member starts at the committed offsets: nothing before them is read again.
    fresh = consume_and_commit(everyone, group, 20, timeout=60)
    assert fresh
    for p, offsets in fresh.items():
        assert offsets[0] == after[p], (p, offsets[:3], after)
