"""The broker's log at its default filter, on real processes: a voter that is SIGKILLed for a
while costs each survivor a handful of WARN/ERROR lines (not openraft's line per retry), a
restart costs a bounded number of INFO lines whatever the partition count (one summary line,
not one per partition), and `GREGOR_LOG_FORMAT=json` writes one JSON object per line."""

import json
import re
import time

import pytest

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
    told = []
    for n in survivors:
        loud = at({"WARN", "ERROR"}, lines_after(n, marks[n.node_id]))
        assert len(loud) <= 4, f"node {n.node_id}: {len(loud)} WARN/ERROR lines in 10 s:\n" + \
            "\n".join(loud[:20])
        told += [l for l in loud if "controller peer unreachable" in l]
    # The new active controller replicates to the dead voter, so it tells (a follower that
    # lost no election sends it nothing).
    assert told, f"no survivor told that voter {victim.node_id} went"

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
