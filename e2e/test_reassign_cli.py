"""`gregor reassign` (kafka-reassign-partitions.sh) on real processes (cluster.py), with seed 001's
JSON files as they are: tp_re_01 partitions 3 and 4 moved from broker 0 to broker 1 (generate,
execute, verify, describe, every record still there), tp_re_02 from replication factor 1 to 2
through a plan, and a reassignment held in progress by a paused target broker, listed and
cancelled."""

import json
import re
import subprocess

from conftest import gregor_bin, wait_until
from test_cluster_replication import consume_all, describe, produce
from traffic import Traffic

# Seed 001 section 3 and 5 files, verbatim.
TOPICS_TO_MOVE = '{ \t"topics": [ \t\t{ "topic":"tp_re_01" } \t], \t"version":1}'
MY_TOPICS_TO_EXECUTE = """{    "version": 1,    "partitions": [{        "topic": "tp_re_01",        "partition": 4,        "replicas": [1],        "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 1,         "replicas": [0],         "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 2,         "replicas": [0],         "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 3,         "replicas": [1],         "log_dirs": ["any"]     }, {         "topic": "tp_re_01",         "partition": 0,         "replicas": [0],         "log_dirs": ["any"]     }]}        """
INCREASE_RF = """{    "version":1,    "partitions":[        {"topic":"tp_re_02","partition":0,"replicas":[0,1]}, \t        {"topic":"tp_re_02","partition":1,"replicas":[0,1]},         {"topic":"tp_re_02","partition":2,"replicas":[1,0]}    ]}"""


def gregor(node, *args, check=True):
    out = subprocess.run([gregor_bin(), *args, "--bootstrap-server", node.bootstrap],
                         capture_output=True, text=True, timeout=60)
    if check:
        assert out.returncode == 0, f"gregor {' '.join(args)}: {out.stderr}"
    return out


def reassign(node, *args, check=True):
    return gregor(node, "reassign", *args, check=check)


def assignment_json(topic, replicas):
    return json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": p, "replicas": r, "log_dirs": ["any"] * len(r)}
        for p, r in enumerate(replicas)]}, separators=(",", ":"))


def verify_until_complete(node, path, partitions, timeout=60):
    outputs = []

    def complete():
        outputs.append(reassign(node, "--verify", "--reassignment-json-file", str(path)).stdout)
        lines = outputs[-1].splitlines()
        return all(f"Reassignment of partition {tp} is completed." in lines for tp in partitions)
    wait_until(complete, timeout, f"--verify to report {partitions} complete", interval=0.3)
    bad = [o for o in outputs if not o.startswith("Status of partition reassignment:\n")]
    assert not bad, bad[:3]


def test_seed_001_tp_re_01_generate_execute_verify_moves_partitions_3_and_4(cluster_factory,
                                                                          tmp_path):
    c = cluster_factory(3)
    n0, n1 = c.nodes[0], c.nodes[1]
    gregor(n0, "topics", "--create", "--topic", "tp_re_01", "--replica-assignment", "0,0,0,0,0")
    for p in range(5):
        produce([n0, n1], "tp_re_01", [f"p{p}-{i}" for i in range(50)], partition=p)

    topics_to_move = tmp_path / "topics-to-move.json"
    topics_to_move.write_text(TOPICS_TO_MOVE)
    out = reassign(n0, "--topics-to-move-json-file", str(topics_to_move), "--broker-list", "0,1",
                   "--generate")
    assert out.stdout == (
        "Current partition replica assignment\n"
        + assignment_json("tp_re_01", [[0]] * 5) + "\n\n"
        "Proposed partition reassignment configuration\n"
        + assignment_json("tp_re_01", [[0], [1], [0], [1], [0]]) + "\n"), out.stdout

    plan = tmp_path / "my-topics-to-execute.json"
    plan.write_text(MY_TOPICS_TO_EXECUTE)
    # A producer and a consumer keep working on partition 3 while it moves to broker 1.
    traffic = Traffic(f"{n0.bootstrap},{n1.bootstrap}", "tp_re_01", partition=3).__enter__()
    traffic.progress(20, "before the move")
    out = reassign(n0, "--reassignment-json-file", str(plan), "--execute")
    rollback = assignment_json("tp_re_01", [[0]] * 5)
    assert out.stdout == (
        f"Current partition replica assignment\n\n{rollback}\n\n"
        "Save this to use as the --reassignment-json-file option during rollback\n"
        "Successfully started partition reassignments for "
        "tp_re_01-0,tp_re_01-1,tp_re_01-2,tp_re_01-3,tp_re_01-4\n"), out.stdout
    verify_until_complete(n0, plan, [f"tp_re_01-{p}" for p in range(5)])
    wait_until(lambda: describe(n1, "tp_re_01") == [
        "\tTopic: tp_re_01\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: tp_re_01\tPartition: 1\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: tp_re_01\tPartition: 2\tLeader: 0\tReplicas: 0\tIsr: 0",
        "\tTopic: tp_re_01\tPartition: 3\tLeader: 1\tReplicas: 1\tIsr: 1",
        "\tTopic: tp_re_01\tPartition: 4\tLeader: 1\tReplicas: 1\tIsr: 1",
    ], 30, "partitions 3 and 4 on broker 1")
    traffic.progress(20, "on broker 1")
    traffic.stop()
    traffic.check()
    assert reassign(n0, "--list").stdout == "No partition reassignments found.\n"
    for p in range(5):
        got = [v for _, v in consume_all([n0, n1], "tp_re_01", partition=p, expect=50)]
        assert got[:50] == [f"p{p}-{i}" for i in range(50)], p
        assert got[50:] == ([] if p != 3 else [v for _, v in traffic.consumed]), p
    # The rollback file the tool printed moves them back.
    back = tmp_path / "rollback.json"
    back.write_text(rollback)
    reassign(n0, "--execute", "--reassignment-json-file", str(back))
    verify_until_complete(n0, back, [f"tp_re_01-{p}" for p in range(5)])
    # Against the state now, the seed's plan is reported as not applied rather than complete.
    out = reassign(n0, "--verify", "--reassignment-json-file", str(plan))
    assert ("There is no active reassignment of partition tp_re_01-3, but replica set is 0 "
            "rather than 1.") in out.stdout.splitlines(), out.stdout


def test_seed_001_tp_re_02_replication_factor_1_to_2_through_a_plan(cluster_factory, tmp_path):
    c = cluster_factory(3)
    n0, n1 = c.nodes[0], c.nodes[1]
    gregor(n0, "topics", "--create", "--topic", "tp_re_02", "--replica-assignment", "1,0,1")
    for p in range(3):
        produce([n0, n1], "tp_re_02", [f"r{p}-{i}" for i in range(40)], partition=p)
    plan = tmp_path / "increase-replication-factor.json"
    plan.write_text(INCREASE_RF)
    traffic = Traffic(f"{n0.bootstrap},{n1.bootstrap}", "tp_re_02", partition=0).__enter__()
    traffic.progress(20, "before the move")
    out = reassign(n0, "--reassignment-json-file", str(plan), "--execute")
    assert out.stdout.splitlines()[2] == assignment_json("tp_re_02", [[1], [0], [1]]), out.stdout
    assert out.stdout.splitlines()[-1] == (
        "Successfully started partition reassignments for tp_re_02-0,tp_re_02-1,tp_re_02-2")
    verify_until_complete(n0, plan, ["tp_re_02-0", "tp_re_02-1", "tp_re_02-2"])

    def layout():
        lines = describe(n1, "tp_re_02")
        return [(line.split("\tReplicas: ")[1].split("\t")[0],
                 sorted(line.split("\tIsr: ")[1].split(","))) for line in lines]
    wait_until(lambda: layout() == [("0,1", ["0", "1"]), ("0,1", ["0", "1"]),
                                    ("1,0", ["0", "1"])], 30, "RF 2 with both replicas in sync")
    traffic.progress(20, "at RF 2")
    traffic.stop()
    traffic.check()
    assert "ReplicationFactor: 2" in gregor(n1, "topics", "--describe", "--topic",
                                            "tp_re_02").stdout
    # Every record is on the new replica too: read from broker 0 alone for partition 0, which
    # it did not hold before.
    for p in range(3):
        got = [v for _, v in consume_all([n0, n1], "tp_re_02", partition=p, expect=40)]
        assert got[:40] == [f"r{p}-{i}" for i in range(40)], p
        assert got[40:] == ([] if p != 0 else [v for _, v in traffic.consumed]), p


def test_a_reassignment_held_by_a_paused_broker_is_listed_and_cancelled(cluster_factory,
                                                                        tmp_path):
    c = cluster_factory(3)
    # The paused broker must not be the active controller, which carries out the cancel.
    ctrl = c.controller()
    home, target = [n for n in c.nodes.values() if n is not ctrl]
    h, t = home.node_id, target.node_id
    gregor(ctrl, "topics", "--create", "--topic", "held", "--replica-assignment", str(h))
    produce([ctrl, home], "held", [f"h{i}" for i in range(20)])
    plan = tmp_path / "move.json"
    plan.write_text(assignment_json("held", [[t]]))
    target.pause()  # the new replica cannot copy the log, so the reassignment cannot complete
    try:
        reassign(ctrl, "--execute", "--reassignment-json-file", str(plan))
        out = reassign(ctrl, "--list")
        assert out.stdout == ("Current partition reassignments:\n"
                              f"held-0: replicas: {t},{h}. adding: {t}. removing: {h}.\n"), \
            out.stdout
        out = reassign(ctrl, "--verify", "--reassignment-json-file", str(plan))
        assert out.stdout.splitlines()[1:] == [
            "Reassignment of partition held-0 is still in progress.",
            f"  held-0: target replicas {t}; in sync: none; catching up: {t}; removing: {h}; "
            f"leader: {h}",
            "Progress of the replicas being added:",
            f"  held-0: replica {t}: its broker did not answer DescribeLogDirs",
        ], out.stdout
        # A second plan while one is active needs --additional, as in Kafka.
        out = reassign(ctrl, "--execute", "--reassignment-json-file", str(plan), check=False)
        assert out.returncode != 0
        assert "Cannot execute because there is an existing partition assignment." in out.stderr
        out = reassign(ctrl, "--cancel", "--reassignment-json-file", str(plan),
                       "--preserve-throttles")
        assert out.stdout == "Successfully cancelled partition reassignment for: held-0\n", \
            out.stdout
        assert reassign(ctrl, "--list").stdout == "No partition reassignments found.\n"
        # Without --preserve-throttles, --cancel clears the throttles as Kafka's tool does.
        out = reassign(ctrl, "--cancel", "--reassignment-json-file", str(plan))
        lines = out.stdout.splitlines()
        assert lines[0] == "None of the specified partition reassignments are active.", out.stdout
        assert re.fullmatch(r"Clearing broker-level throttles on brokers? [\d,]+", lines[1]), \
            out.stdout
        assert lines[2:] == ["Clearing topic-level throttles on topic held"], out.stdout
    finally:
        target.resume()
    wait_until(lambda: describe(ctrl, "held") == [
        f"\tTopic: held\tPartition: 0\tLeader: {h}\tReplicas: {h}\tIsr: {h}"], 30,
        "back on its first broker")
    assert [v for _, v in consume_all([home], "held", expect=20)] == [f"h{i}" for i in range(20)]
    # The cancelled target deleted its replica while its fetcher may still have been writing:
    # the writes were refused (the log closed first), with no I/O error about a checkpoint's
    # temporary file in the deleted directory.
    for n in c.nodes.values():
        text = n.log_path.read_text(errors="replace")
        assert "leader-epoch-checkpoint.tmp" not in text, text[-3000:]
        assert "cannot append fetched batches" not in text, text[-3000:]


def test_bad_plans_and_flags_get_one_line_errors(cluster_factory, tmp_path):
    c = cluster_factory(3)
    n0 = c.nodes[0]
    gregor(n0, "topics", "--create", "--topic", "t", "--replica-assignment", "0")

    def fails(text, *extra):
        path = tmp_path / "bad.json"
        path.write_text(text)
        out = reassign(n0, "--execute", "--reassignment-json-file", str(path), *extra,
                       check=False)
        assert out.returncode != 0 and out.stdout == "", (out.stdout, out.stderr)
        return out.stderr.strip()

    one = lambda t, r: json.dumps({"partitions": [{"topic": t, "partition": 0, "replicas": r}]})  # noqa: E731,E501
    assert fails(one("t", [])).endswith("Partition replica list cannot be empty (partition t-0)")
    assert fails(one("t", [1, 1])).endswith(
        "Partition replica lists may not contain duplicate entries: t-0 contains multiple "
        "entries for 1")
    assert fails(one("t", [7])) == "gregor: Unknown broker id 7"
    assert fails(one("nope", [1])) == \
        "gregor: Unable to find partition: nope-0 (UNKNOWN_TOPIC_OR_PARTITION)"
    assert fails("{\"partitions\": [").startswith("gregor: in ")
    assert fails(one("t", [1]), "--throttle", "fast") == (
        'gregor: --throttle must be a number of bytes per second, got "fast"')
    out = reassign(n0, "--list", "--verify", check=False)
    assert out.returncode != 0 and out.stderr.strip() == (
        "gregor: Command must include exactly one action: --generate, --execute, --verify, "
        "--cancel, --list, --plan")
    # Nothing was started by any of them.
    assert reassign(n0, "--list").stdout == "No partition reassignments found.\n"
    # (The new topic's leader may still be settling: wait for it rather than race it.)
    wait_until(lambda: describe(n0, "t") == [
        "\tTopic: t\tPartition: 0\tLeader: 0\tReplicas: 0\tIsr: 0"], 15, "t-0 on broker 0 alone")
