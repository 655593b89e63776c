"""Throttled reassignments and reassignments across controller failures, on real processes
(cluster.py): `gregor reassign --execute --throttle` really limits the copy (leader and follower
quotas), `--verify` shows the new replica's progress from DescribeLogDirs and removes the
throttles once the move is complete; a reassignment whose active controller is SIGKILLed (and
restarted) midway completes, with every record on the new replica. A producer keeps writing to
the moving partition throughout."""

import json
import re
import time

from conftest import wait_until
from test_cluster_replication import consume_all, describe, produce
from test_reassign_cli import gregor, reassign
from traffic import Traffic

RECORD = 1024


def fill(nodes, topic, count, tag):
    values = [f"{tag}{i:06d}".ljust(RECORD, "x") for i in range(count)]
    reports = produce(nodes, topic, values)
    assert all(err is None for _, err, _ in reports), [r for r in reports if r[1]][:3]
    return values


def plan_file(tmp_path, topic, replicas):
    path = tmp_path / f"{topic}-plan.json"
    path.write_text(json.dumps({"version": 1, "partitions": [
        {"topic": topic, "partition": 0, "replicas": replicas}]}))
    return path


def replicas_and_isr(node, topic):
    line = describe(node, topic)[0]
    replicas = line.split("\tReplicas: ")[1].split("\t")[0]
    isr = line.split("\tIsr: ")[1]
    return [int(r) for r in replicas.split(",")], {int(r) for r in isr.split(",")}


def configs(node, kind, name):
    out = gregor(node, "configs", "--describe", "--entity-type", kind, "--entity-name", name)
    return out.stdout


def test_a_throttled_reassignment_stays_under_its_rate_and_verify_clears_the_throttles(
        cluster_factory, tmp_path):
    c = cluster_factory(3)
    n0, n1 = c.nodes[0], c.nodes[1]
    gregor(n0, "topics", "--create", "--topic", "big", "--replica-assignment", "0")
    size = 6 << 20
    values = fill([n0, n1], "big", size // RECORD, "a")
    rate = 1_000_000
    plan = plan_file(tmp_path, "big", [0, 1])
    # A producer and a consumer keep working on the partition while it moves (a few KB/s).
    traffic = Traffic(f"{n0.bootstrap},{n1.bootstrap}", "big").__enter__()
    started = time.monotonic()
    out = reassign(n0, "--execute", "--reassignment-json-file", str(plan),
                   "--throttle", str(rate))
    lines = out.stdout.splitlines()
    assert ("Warning: You must run --verify periodically, until the reassignment completes, "
            "to ensure the throttle is removed.") in lines, out.stdout
    assert f"The inter-broker throttle limit was set to {rate} B/s" in lines, out.stdout
    assert lines[-1] == "Successfully started partition reassignment for big-0", out.stdout
    # Kafka's settings, where Kafka's tool puts them.
    for broker in ("0", "1"):
        text = configs(n0, "brokers", broker)
        assert f"leader.replication.throttled.rate={rate}" in text, text
        assert f"follower.replication.throttled.rate={rate}" in text, text
    text = configs(n0, "topics", "big")
    assert "leader.replication.throttled.replicas=0:0" in text, text
    assert "follower.replication.throttled.replicas=0:1" in text, text

    progress_seen = []
    more = []
    while True:
        out = reassign(n0, "--verify", "--reassignment-json-file", str(plan))
        if "Reassignment of partition big-0 is completed." in out.stdout.splitlines():
            elapsed = time.monotonic() - started
            break
        for line in out.stdout.splitlines():
            if line.startswith("  big-0: replica 1 has "):
                progress_seen.append(line)
        assert time.monotonic() - started < 120, out.stdout
        # The partition keeps taking writes while its new replica catches up.
        more += fill([n0, n1], "big", 5, f"m{len(more)}-")
        time.sleep(0.5)  # the poll interval of this loop (it writes and checks every round)
    # 6 MiB at 1 MB/s, of which the quotas let at most one second's worth (plus one fetch)
    # through at once: the copy cannot finish in much under five seconds.
    assert elapsed > 3.5, f"copied {size} bytes in {elapsed:.1f} s under a {rate} B/s throttle"
    assert (size - (2 << 20)) / elapsed <= rate * 1.2, elapsed
    assert progress_seen, "no progress line while the replica was catching up"
    # e.g. "big-0: replica 1 has 1999750 of 6358101 bytes (4358351 behind), 4210 offsets
    # behind the high watermark"
    assert any(re.search(r"has \d+ of \d+ bytes \(\d+ behind\), [1-9]\d* offsets behind", p)
               for p in progress_seen), progress_seen
    # --verify found it complete and removed every throttle, saying so as Kafka's tool does.
    assert "Clearing broker-level throttles on brokers 0,1,2" in out.stdout.splitlines(), \
        out.stdout
    assert "Clearing topic-level throttles on topic big" in out.stdout.splitlines(), out.stdout
    # The node answering DescribeConfigs applies the committed change a moment later.
    wait_until(lambda: all("replication.throttled.rate" not in configs(n0, "brokers", broker)
                           for broker in ("0", "1", "2"))
               and "replication.throttled.replicas" not in configs(n0, "topics", "big"), 10,
               "the throttles gone from the configs")
    wait_until(lambda: describe(n0, "big") == [
        "\tTopic: big\tPartition: 0\tLeader: 0\tReplicas: 0,1\tIsr: 0,1"], 30, "RF 2 in sync")
    traffic.stop()
    traffic.check()
    got = [v for _, v in consume_all([n0, n1], "big",
                                     expect=len(values) + len(more) + len(traffic.consumed))]
    assert [v for v in got if not v.startswith("tr")] == values + more
    assert [v for v in got if v.startswith("tr")] == [v for _, v in traffic.consumed]


def test_a_reassignment_completes_across_a_controller_sigkill_and_restart(cluster_factory,
                                                                          tmp_path):
    reassignment_completes_across_a_sigkill(cluster_factory(3), tmp_path, "controller")


def test_a_reassignment_completes_across_a_sigkill_and_restart_of_the_new_replicas_node(
        cluster_factory, tmp_path):
    reassignment_completes_across_a_sigkill(cluster_factory(3), tmp_path, "new replica")


def start_slow_move(node, plan):
    """Executes `plan` (partition moving-0) under a throttle slow enough that a node killed next
    dies while the new replica is still copying: returns once --verify shows the copy under way
    (some bytes copied, not all)."""
    reassign(node, "--execute", "--reassignment-json-file", str(plan), "--throttle", "600000")

    outs = []

    def copying_or_done():
        outs.append(reassign(node, "--verify", "--reassignment-json-file", str(plan)).stdout)
        # e.g. "  moving-0: replica 1 has 1999750 of 3358101 bytes (...)"
        copied = [int(m.group(1)) for m in
                  re.finditer(r"moving-0: replica \d+ has (\d+) of", outs[-1])]
        return any(copied) or "moving-0 is completed." in outs[-1]
    wait_until(copying_or_done, 20, "the new replica to start copying", interval=0.1)
    assert "Reassignment of partition moving-0 is still in progress." in outs[-1], outs[-1]


def wait_move_complete(node, plan, after):
    def complete():
        out = reassign(node, "--verify", "--reassignment-json-file", str(plan))
        return "Reassignment of partition moving-0 is completed." in out.stdout.splitlines()
    wait_until(complete, 90, f"the reassignment to complete after the {after}", interval=0.5)


def reassignment_completes_across_a_sigkill(c, tmp_path, victim):
    """A partition moves from `home` to a second replica on `target` under a slow throttle;
    `victim` (the active controller, or the new replica's node) is SIGKILLed while the copy is
    under way and restarted. The reassignment completes, with client traffic throughout, and the
    new replica holds every record."""
    ctrl = c.controller()
    home, target = [n for n in c.nodes.values() if n is not ctrl]
    h, t = home.node_id, target.node_id
    dead = ctrl if victim == "controller" else target
    live = [home, target if dead is ctrl else ctrl]
    gregor(home, "topics", "--create", "--topic", "moving", "--replica-assignment", str(h))
    values = fill(live, "moving", (3 << 20) // RECORD, "b")
    plan = plan_file(tmp_path, "moving", [h, t])
    traffic = Traffic(",".join(n.bootstrap for n in live), "moving").__enter__()
    start_slow_move(home, plan)
    dead.kill()
    more = fill(live, "moving", 20, "during-kill-")
    if dead is target:
        out = reassign(home, "--verify", "--reassignment-json-file", str(plan))
        assert "Reassignment of partition moving-0 is still in progress." in out.stdout, \
            out.stdout
    dead.start()
    dead.wait_ready()
    more += fill(live, "moving", 20, "after-restart-")
    wait_move_complete(home, plan, f"{victim}'s SIGKILL")
    wait_until(lambda: describe(home, "moving") == [
        f"\tTopic: moving\tPartition: 0\tLeader: {h}\tReplicas: {h},{t}\tIsr: {h},{t}"], 30,
        "both replicas in sync")
    traffic.stop()
    traffic.check()
    # The new replica holds every record: with the old one gone it serves them all.
    home.kill()
    wait_until(lambda: describe(target, "moving")[0].split("\tLeader: ")[1].startswith(str(t)),
               30, "the new replica leads")
    got = [v for _, v in consume_all([target, ctrl], "moving",
                                     expect=len(values) + len(more) + len(traffic.consumed))]
    assert [v for v in got if not v.startswith("tr")] == values + more
    assert [v for v in got if v.startswith("tr")] == [v for _, v in traffic.consumed]


def test_a_reassignment_off_the_leaders_node_completes_across_its_sigkill_and_restart(
        cluster_factory, tmp_path):
    """The replica moving away is the partition's leader: [home, stay] -> [target, stay]. Its
    node is SIGKILLed while the new replica copies under a slow throttle, and restarted at once:
    leadership moves to `stay`, the new replica keeps copying, the returning node catches up
    until the reassignment completes and then deletes its replica; no acknowledged record is
    lost, with client traffic throughout."""
    c = cluster_factory(3)
    stay = c.controller()
    home, target = [n for n in c.nodes.values() if n is not stay]
    h, t, s = home.node_id, target.node_id, stay.node_id
    gregor(home, "topics", "--create", "--topic", "moving", "--replica-assignment", f"{h}:{s}")
    everyone = [home, target, stay]
    values = fill(everyone, "moving", (3 << 20) // RECORD, "b")
    wait_until(lambda: describe(stay, "moving") == [
        f"\tTopic: moving\tPartition: 0\tLeader: {h}\tReplicas: {h},{s}\tIsr: {h},{s}"], 30,
        "the leader on the node the partition moves off")
    plan = plan_file(tmp_path, "moving", [t, s])
    traffic = Traffic(",".join(n.bootstrap for n in everyone), "moving").__enter__()
    start_slow_move(stay, plan)
    home.kill()
    wait_until(lambda: describe(stay, "moving")[0].split("\tLeader: ")[1].startswith(f"{s}\t"),
               30, "leadership on the staying replica")
    more = fill([target, stay], "moving", 20, "during-kill-")
    home.start()
    home.wait_ready()
    more += fill(everyone, "moving", 20, "after-restart-")
    wait_move_complete(stay, plan, "leader's SIGKILL")
    wait_until(lambda: replicas_and_isr(stay, "moving") == ([t, s], {t, s}), 30,
               "both new replicas in sync")
    wait_until(lambda: not list(home.data_dir.glob("moving-0*")), 30,
               "the old leader's replica deleted")
    traffic.stop()
    traffic.check()
    # The new replica holds every record: with the staying one gone it serves them all.
    stay.kill()
    wait_until(lambda: describe(target, "moving")[0].split("\tLeader: ")[1].startswith(f"{t}\t"),
               30, "the new replica leads")
    got = [v for _, v in consume_all([target, home], "moving",
                                     expect=len(values) + len(more) + len(traffic.consumed))]
    assert [v for v in got if not v.startswith("tr")] == values + more
    assert [v for v in got if v.startswith("tr")] == [v for _, v in traffic.consumed]
