"""The broker's log at its default filter, on real processes: a voter that is SIGKILLed for a
while costs each survivor at most one WARN line naming it (not openraft's line per retry) and
the new active controller one more for fencing it, an ISR change or a failover names the topics, a
restart costs a bounded number of INFO lines whatever the partition count (one summary line,
not one per partition), and `GREGOR_LOG_FORMAT=json` writes one JSON object per line."""

import json
import re
import time

import pytest

from clients import produce
from conftest import wait_until

LEVEL = re.compile(r"^\S+\s+(TRACE|DEBUG|INFO|WARN|ERROR)\s")
PARTITIONS = 30


def lines_after(node, mark):
    with open(node.log_path, errors="replace") as f:
        return f.read().splitlines()[mark:]


def line_count(node):
    return len(lines_after(node, 0))


def at(level_names, lines):
    return [l for l in lines if (m := LEVEL.match(l)) and m.group(1) in level_names]


@pytest.mark.timeout(150)
def test_a_killed_voter_costs_few_warnings_and_a_restart_few_info_lines(cluster_factory,
                                                                        monkeypatch):
    monkeypatch.delenv("RUST_LOG", raising=False)
    monkeypatch.delenv("GREGOR_LOG_FORMAT", raising=False)
    c = cluster_factory(3, proxied=False)
    nodes = c.nodes
    for i in range(3):
        err, msg = nodes[0].create_topic(f"logs-{i}", partitions=PARTITIONS // 3,
                                         replication_factor=3)
        assert err == 0, (err, msg)
    # The victim is the active controller: the survivors also hold an election without it.
    victim = c.controller()
    survivors = [n for n in nodes.values() if n is not victim]
    for n in nodes.values():
        assert not [l for l in lines_after(n, 0) if "vote changed" in l], \
            f"node {n.node_id} logged openraft's start-up vote notes"

    marks = {n.node_id: line_count(n) for n in survivors}
    victim.kill()
    time.sleep(10)  # the outage whose cost is measured
    tellers, fencings = [], []
    dead_voter = re.compile(rf"\bvoter={victim.node_id}\b")
    dead_broker = re.compile(rf"\bbroker={victim.node_id}\b")
    for n in survivors:
        loud = at({"WARN", "ERROR"}, lines_after(n, marks[n.node_id]))
        # A survivor that sends the dead voter anything (a vote request, the new active
        # controller's appends) tells once that it is unreachable, however often it retries;
        # one that only voted sends it nothing and has nothing to tell.
        told = [l for l in loud if "controller peer unreachable" in l]
        assert len(told) <= 1 and all(dead_voter.search(l) for l in told), \
            f"node {n.node_id}:\n" + "\n".join(loud)
        tellers += [n.node_id] if told else []
        # The new active controller fences the dead broker: one line. Nothing else is WARN
        # (connections the dead process reset are not).
        fenced = [l for l in loud if "fencing" in l and dead_broker.search(l)]
        fencings += fenced
        assert sorted(told + fenced) == sorted(loud), f"node {n.node_id}:\n" + "\n".join(loud)
    new_controller = c.controller(among=survivors)
    assert new_controller.node_id in tellers, (new_controller.node_id, tellers)
    assert len(fencings) == 1 and "process is gone" in fencings[0], "\n".join(fencings)

    marks = {n.node_id: line_count(n) for n in nodes.values()}
    victim.start()
    victim.wait_ready(60)
    wait_until(lambda: any("controller peer reachable again" in l for n in survivors
                           for l in lines_after(n, marks[n.node_id])),
               20, f"a survivor to tell that voter {victim.node_id} is back")
    wait_until(lambda: any("ISR changes committed" in l for l in
                           sum((lines_after(n, marks[n.node_id]) for n in survivors), [])),
               30, "the restarted node to rejoin the ISRs")
    restarted = lines_after(victim, marks[victim.node_id])
    info = at({"INFO"}, restarted)
    # One line per node event, not one per partition (30 here, each with several lines before).
    assert len(info) <= 20, f"{len(info)} INFO lines for a restart:\n" + "\n".join(info)
    assert any("partition roles changed" in l and "follower of" in l for l in info), \
        "\n".join(info)
    assert not at({"WARN", "ERROR"}, restarted), "\n".join(at({"WARN", "ERROR"}, restarted))
    for n in survivors:
        new = lines_after(n, marks[n.node_id])
        assert len(at({"INFO"}, new)) <= 10, "\n".join(at({"INFO"}, new))
        assert not at({"WARN", "ERROR"}, new), "\n".join(at({"WARN", "ERROR"}, new))


@pytest.mark.timeout(60)
def test_json_log_format_writes_one_object_per_line(cluster_factory, monkeypatch):
    monkeypatch.delenv("RUST_LOG", raising=False)
    monkeypatch.setenv("GREGOR_LOG_FORMAT", "json")
    c = cluster_factory(1)
    (node,) = c.nodes.values()
    err, msg = node.create_topic("json-logs", partitions=2, replication_factor=1)
    assert err == 0, (err, msg)
    wait_until(lambda: any("partition roles changed" in l for l in lines_after(node, 0)), 10,
               "the partitions' summary line")
    events = [json.loads(l) for l in lines_after(node, 0)
              if l.strip() and not l.startswith("=====")]
    assert events
    for e in events:
        assert set(e) >= {"timestamp", "level", "target", "fields"}, e
        assert e["level"] in {"TRACE", "DEBUG", "INFO", "WARN", "ERROR"}, e
    started = [e for e in events if e["fields"].get("message") == "broker started"]
    assert started and started[0]["fields"]["node"] == 0, events
    roles = [e for e in events if e["target"] == "gregor_broker::replica"
             and str(e["fields"].get("message", "")).startswith("partition roles changed")]
    assert roles and roles[0]["fields"]["became_leader"] == 2, roles


TOPIC_FIELD = re.compile(r"\btopic=")
ABOUT_A_PARTITION = re.compile(r"\b(partition|topic_id)=")


@pytest.mark.timeout(150)
def test_isr_changes_and_a_failover_name_the_topic_in_the_log(cluster_factory, monkeypatch):
    """The active controller's line for an ISR shrink and expansion names the topic (not only
    a count, nor only a topic id); and every INFO or WARN line an ISR change and a leader's
    SIGKILL write about a partition names its topic."""
    monkeypatch.delenv("RUST_LOG", raising=False)
    monkeypatch.delenv("GREGOR_LOG_FORMAT", raising=False)
    c = cluster_factory(3, proxied=False, overrides={"replica.lag.time.max.ms": "1500",
                                                     "broker.session.timeout.ms": "15000"})
    controller = c.controller()
    leader, follower = [n for n in c.nodes.values() if n is not controller]
    topic = "isr-by-name"
    err, msg = controller.create_topic(topic, partitions=-1, replication_factor=-1,
                                       assignments=[(0, [leader.node_id, follower.node_id,
                                                         controller.node_id])])
    assert err == 0, (err, msg)

    def isr():
        _, parts = controller.metadata([topic])["topics"][topic]
        return parts[0][3]

    wait_until(lambda: len(isr()) == 3, 20, "all three replicas in sync")
    mark = line_count(controller)

    def accepted(n):
        lines = [l for l in lines_after(controller, mark)
                 if "AlterPartition: ISR changes accepted" in l]
        return lines if len(lines) >= n else None

    follower.pause()
    try:
        produce(leader, topic, [{"value": b"w"} for _ in range(20)], extra={"acks": "1"})
        wait_until(lambda: follower.node_id not in isr(), 20, "the ISR to shrink")
        shrunk = wait_until(lambda: accepted(1), 10, "the controller's line for the shrink")
    finally:
        follower.resume()
    wait_until(lambda: len(isr()) == 3, 30, "the ISR to expand again")
    lines = wait_until(lambda: accepted(2), 10, "the controller's line for the expansion")
    for l in (shrunk[0], lines[1]):
        assert f"broker={leader.node_id}" in l and f"topics={topic} (1)" in l, l
    # The leader's line for each committed change names it too.
    committed = [l for l in lines_after(leader, 0) if "ISR changes committed" in l]
    assert len(committed) >= 2 and all(f"topics={topic} (1)" in l for l in committed), committed

    # A leader killed: the controller fences it and elects another; the new leader and the
    # survivors tell. Every line about a partition names its topic.
    survivors = [controller, follower]
    marks = {n.node_id: line_count(n) for n in survivors}
    leader.kill()
    wait_until(lambda: leader.node_id not in controller.unfenced_brokers(), 10,
               "the killed leader fenced")
    wait_until(lambda: controller.metadata([topic])["topics"][topic][1][0][1]
               not in (-1, leader.node_id), 10, "a new leader")
    wait_until(lambda: all(any("partition roles changed" in l
                               for l in lines_after(n, marks[n.node_id])) for n in survivors),
               10, "the survivors' partition role lines")
    fencing = [l for l in at({"WARN", "ERROR"}, lines_after(controller, marks[controller.node_id]))
               if f"broker={leader.node_id} " in l]
    # However many of its connections closed (heartbeats, the quorum's): one line.
    assert len(fencing) == 1 and "process is gone" in fencing[0], "\n".join(fencing)
    for n in survivors:
        told = [l for l in at({"INFO", "WARN", "ERROR"}, lines_after(n, 0))
                if ABOUT_A_PARTITION.search(l)]
        unnamed = [l for l in told if not TOPIC_FIELD.search(l)]
        assert not unnamed, f"node {n.node_id}:\n" + "\n".join(unnamed)
