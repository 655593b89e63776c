"""Replica directories a node must not keep, on real processes (cluster.py): a topic deleted and
created again under the same name while one of its replicas' nodes was down must not bring the
old topic's records back through that node (each partition directory carries its topic id in
`partition.metadata`), and a partition directory the node no longer hosts is deleted when the
node comes back."""

import re

import kwire
from conftest import wait_until
from test_cluster_replication import consume_all, create, describe, produce
from test_reassign_cli import gregor


def topic_id(node, topic):
    out = gregor(node, "topics", "--describe", "--topic", topic).stdout
    m = re.search(r"TopicId: (\S+)", out)
    assert m, out
    return m.group(1)


def isr(node, topic):
    return {int(n) for n in describe(node, topic)[0].split("\tIsr: ")[1].split(",")}


def delete_topic(node, topic):
    gregor(node, "topics", "--delete", "--topic", topic)

    def gone():
        with kwire.Conn("127.0.0.1", node.port) as c:
            return topic not in kwire.metadata_v1(c)["topics"]
    wait_until(gone, 30, f"{topic} deleted")


def segment_bytes(partition_dir):
    return b"".join(p.read_bytes() for p in sorted(partition_dir.glob("*.log")))


def test_a_topic_recreated_while_a_replica_was_down_does_not_serve_the_old_records(
        cluster_factory):
    c = cluster_factory(3)
    a, b, down = c.nodes[0], c.nodes[1], c.nodes[2]
    live = [a, b]
    # `down` is the preferred leader of both incarnations of the topic.
    create(a, "reborn", assignments=[[2, 0, 1]])
    old = [f"old-{i:05d}" for i in range(300)]
    assert all(err is None for _, err, _ in produce([a, b, down], "reborn", old))
    wait_until(lambda: describe(a, "reborn") == [
        "\tTopic: reborn\tPartition: 0\tLeader: 2\tReplicas: 2,0,1\tIsr: 2,0,1"], 30,
        "every replica in sync")
    old_id = topic_id(a, "reborn")
    down.kill()
    delete_topic(a, "reborn")
    create(a, "reborn", assignments=[[2, 0, 1]])
    new_id = topic_id(a, "reborn")
    assert new_id != old_id
    new = [f"new-{i:05d}" for i in range(40)]
    assert all(err is None for _, err, _ in produce(live, "reborn", new))

    down.start()
    down.wait_ready()
    wait_until(lambda: isr(a, "reborn") == {0, 1, 2}, 30, "the restarted node back in the ISR")
    stamp = (down.data_dir / "reborn-0" / "partition.metadata").read_text()
    assert stamp == f"version: 0\ntopic_id: {new_id}\n", stamp
    assert b"old-" not in segment_bytes(down.data_dir / "reborn-0")
    # Leading again, the restarted node serves the new topic's records, and only those.
    gregor(a, "elect", "--election-type", "preferred", "--topic", "reborn", "--partition", "0")
    wait_until(lambda: describe(a, "reborn")[0].split("\tLeader: ")[1].startswith("2\t"), 30,
               "the restarted node leads")
    got = [v for _, v in consume_all([down], "reborn", expect=len(new))]
    assert got == new


def test_a_replica_reassigned_away_while_its_node_was_down_is_deleted_on_restart(
        cluster_factory):
    c = cluster_factory(3)
    a, b, down = c.nodes[0], c.nodes[1], c.nodes[2]
    create(a, "left", assignments=[[2, 0]])
    assert all(err is None for _, err, _ in produce([a, b, down], "left", ["x"] * 10))
    assert (down.data_dir / "left-0").is_dir()
    down.kill()
    plan = '{"version":1,"partitions":[{"topic":"left","partition":0,"replicas":[0,1]}]}'
    path = c.workdir / "left-plan.json"
    path.write_text(plan)
    gregor(a, "reassign", "--execute", "--reassignment-json-file", str(path))
    wait_until(lambda: describe(a, "left") == [
        "\tTopic: left\tPartition: 0\tLeader: 0\tReplicas: 0,1\tIsr: 0,1"], 60,
        "the reassignment to complete without the stopped node")
    # Other files in the data directory are not partitions and stay.
    keep = down.data_dir / "not-a-partition-0"
    keep.mkdir()
    (keep / "notes.txt").write_text("mine")
    down.start()
    down.wait_ready()
    # The directory is first renamed to `left-0-delete`, then removed: wait for both.
    wait_until(lambda: not list(down.data_dir.glob("left-0*")), 30,
               "the stray replica directory deleted")
    assert (keep / "notes.txt").read_text() == "mine"
    # The tool checks the plan against the brokers `a` lists; `a` learns of the restarted node's
    # registration from the metadata log a moment after the node itself does.
    wait_until(lambda: down.node_id in a.unfenced_brokers(), 30,
               "the restarted node listed by the node the tool talks to")
    # The node keeps serving: a new replica of the same partition can be placed on it again.
    path.write_text(plan.replace("[0,1]", "[0,1,2]"))
    gregor(a, "reassign", "--execute", "--reassignment-json-file", str(path))
    wait_until(lambda: describe(a, "left") == [
        "\tTopic: left\tPartition: 0\tLeader: 0\tReplicas: 0,1,2\tIsr: 0,1,2"], 60,
        "the partition back on the restarted node")
    stamp = (down.data_dir / "left-0" / "partition.metadata").read_text()
    assert stamp == f"version: 0\ntopic_id: {topic_id(a, 'left')}\n"
