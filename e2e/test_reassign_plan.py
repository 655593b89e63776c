"""`gregor reassign --plan` on real processes: two topics (replication factors 1 and 2) skewed
onto brokers 0 and 1 of a 3-broker cluster are balanced with fewer replica moves than
`--generate` proposes for the same input, at a balance at least as good; the proposed JSON executes, verifies as complete, `topics --describe`
shows the new replicas and every record is still there. Bad input gets a clear message and a
non-zero exit."""

import json
import re

from conftest import wait_until
from test_cluster_replication import consume_all, create, describe, produce
from test_reassign_cli import gregor, reassign, verify_until_complete

TOPICS = {"skewed": [[0], [1], [0], [1], [0], [1]], "pairs": [[0, 1], [1, 0], [0, 1]]}


def proposal(stdout):
    """(current, proposed) from the two JSON blocks of --generate / --plan output."""
    lines = stdout.splitlines()
    current = json.loads(lines[lines.index("Current partition replica assignment") + 1])
    proposed = json.loads(lines[lines.index("Proposed partition reassignment configuration") + 1])
    return current, proposed


def apply(current, proposed):
    """{(topic, partition): replicas} after the proposal."""
    out = {(p["topic"], p["partition"]): p["replicas"] for p in current["partitions"]}
    out.update({(p["topic"], p["partition"]): p["replicas"] for p in proposed["partitions"]})
    return out


def moves(before, after):
    return sum(len(set(after[p]) - set(before[p])) for p in before)


def spreads(assignment, brokers):
    replicas = {b: 0 for b in brokers}
    leaders = {b: 0 for b in brokers}
    for r in assignment.values():
        for b in r:
            replicas[b] += 1
        leaders[r[0]] += 1
    spread = lambda counts: max(counts.values()) - min(counts.values())  # noqa: E731
    return spread(replicas), spread(leaders)


def test_plan_moves_less_than_generate_and_its_json_executes(cluster_factory, tmp_path):
    c = cluster_factory(3)
    n0, n1 = c.nodes[0], c.nodes[1]
    for topic, assignment in TOPICS.items():
        create(n0, topic, assignments=assignment)
        for p in range(len(assignment)):
            produce([n0, n1], topic, [f"{topic}{p}-{i}" for i in range(30)], partition=p)
    topics = tmp_path / "topics-to-move.json"
    topics.write_text(json.dumps({"topics": [{"topic": t} for t in TOPICS], "version": 1}))
    common = ["--topics-to-move-json-file", str(topics), "--broker-list", "0,1,2"]

    generated = reassign(n0, "--generate", *common).stdout
    planned = reassign(n0, "--plan", "--explain", *common).stdout
    g_current, g_proposed = proposal(generated)
    p_current, p_proposed = proposal(planned)
    assert g_current == p_current
    before = apply(p_current, {"partitions": []})
    assert before == {(t, p): r for t, a in TOPICS.items() for p, r in enumerate(a)}
    kafka, ours = apply(g_current, g_proposed), apply(p_current, p_proposed)
    kafka_moves, our_moves = moves(before, kafka), moves(before, ours)
    # 12 replicas over 3 brokers: 4 each, so 4 replicas must reach broker 2, and no fewer.
    assert our_moves == 4 and our_moves < kafka_moves, (our_moves, kafka_moves, planned)
    assert spreads(ours, [0, 1, 2]) <= spreads(kafka, [0, 1, 2])
    assert spreads(ours, [0, 1, 2]) == (0, 0), ours
    # Only partitions that change are proposed; replication factors are kept.
    for p in p_proposed["partitions"]:
        key = (p["topic"], p["partition"])
        assert len(p["replicas"]) == len(before[key]) and p["replicas"] != before[key], p

    explain = planned.split("Plan explanation\n")[1].splitlines()
    assert explain[0] == "Replica moves: 4", planned
    assert f"Kafka's --generate on the same input: {kafka_moves} replica moves, replicas max - " \
           "min 0, preferred leaders max - min 0" in explain, planned
    assert any(line.startswith("  broker 2: replicas 0 -> 4, leaders 0 -> 3")
               for line in explain), planned
    assert "  replicas: before 6, after 0, lower bound 0" in explain, planned
    assert "  preferred leaders: before 5, after 0, lower bound 0" in explain, planned
    # Sizes come from the brokers (DescribeLogDirs): every partition holds 30 records.
    move_lines = [re.fullmatch(r"  \S+: broker \d -> broker 2 \((\d+) bytes\)", line)
             for line in explain]
    assert sum(1 for m in move_lines if m and int(m[1]) > 30 * 10) == 4, planned
    assert "Bytes: unknown" not in planned, planned

    # The proposal is Kafka's reassignment JSON: --execute takes it as printed.
    plan = tmp_path / "plan.json"
    plan.write_text(planned.splitlines()[planned.splitlines().index(
        "Proposed partition reassignment configuration") + 1])
    out = reassign(n0, "--execute", "--reassignment-json-file", str(plan))
    assert out.stdout.splitlines()[-1].startswith("Successfully started partition reassignment")
    moved = [f"{p['topic']}-{p['partition']}" for p in p_proposed["partitions"]]
    verify_until_complete(n0, plan, moved)
    # A reassignment keeps a leader that is still a replica (as Kafka's does); the planned
    # preferred leaders take over at the next preferred election.
    gregor(n0, "elect", "--election-type", "preferred", "--all-topic-partitions", check=False)
    for topic, assignment in TOPICS.items():
        want = [f"\tTopic: {topic}\tPartition: {p}\tLeader: {ours[(topic, p)][0]}\t"
                f"Replicas: {','.join(map(str, ours[(topic, p)]))}"
                for p in range(len(assignment))]

        def replicas_and_leaders():
            return [line.split("\tIsr:")[0] for line in describe(c.nodes[2], topic)]
        wait_until(lambda: replicas_and_leaders() == want, 30,
                   f"describe to show the planned replicas {want}")
        for p in range(len(assignment)):
            got = [v for _, v in consume_all([c.nodes[2]], topic, partition=p, expect=30)]
            assert got == [f"{topic}{p}-{i}" for i in range(30)], (topic, p)
    # Balanced now: a second plan proposes nothing.
    again = reassign(n0, "--plan", *common).stdout
    assert proposal(again)[1] == {"version": 1, "partitions": []}, again


def test_plan_refuses_bad_input_with_a_clear_message(cluster_factory, tmp_path):
    c = cluster_factory(1)
    n0 = c.nodes[0]
    create(n0, "t", assignments=[[0]])
    topics = tmp_path / "topics.json"
    topics.write_text('{"topics": [{"topic": "t"}], "version": 1}')
    missing = tmp_path / "missing.json"
    missing.write_text('{"topics": [{"topic": "t"}, {"topic": "nope"}], "version": 1}')

    def fails(*args):
        out = reassign(n0, "--plan", *args, check=False)
        assert out.returncode != 0 and out.stdout == "", (out.returncode, out.stdout)
        return out.stderr.strip()

    assert fails("--topics-to-move-json-file", str(topics), "--broker-list", "0,7,9") == (
        "gregor: Unknown broker id(s) in --broker-list: 7,9 (registered brokers: 0)")
    assert fails("--topics-to-move-json-file", str(topics), "--broker-list", "") == (
        'gregor: --broker-list is empty: give the broker ids to place replicas on, e.g. "0,1,2"')
    assert fails("--topics-to-move-json-file", str(topics), "--broker-list", "0",
                 "--max-moves", "many") == (
        "gregor: Invalid --max-moves 'many': expected a number of replica moves (0 or more)")
    assert fails("--topics-to-move-json-file", str(missing), "--broker-list", "0") == (
        "gregor: Topic(s) to move do not exist: nope (UNKNOWN_TOPIC_OR_PARTITION)")
    assert fails("--topics-to-move-json-file", str(topics), "--broker-list", "0",
                 "--racks") == ("gregor: --racks needs a rack (broker.rack) on every listed "
                                "broker; broker(s) 0 have none")
    # And a good request still works on the same cluster.
    out = reassign(n0, "--plan", "--topics-to-move-json-file", str(topics), "--broker-list", "0")
    assert proposal(out.stdout)[1] == {"version": 1, "partitions": []}, out.stdout
