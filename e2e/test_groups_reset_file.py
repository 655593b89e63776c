"""`gregor groups --reset-offsets --export` and `--from-file`, against a real broker: the plan
printed as Kafka's CSV (topic,partition,offset for one group, group first for several),
committed only with --execute, and read back with --from-file (offsets kept within each
partition's log, with Kafka's warning); kafka-consumer-groups.sh passes both flags through.
Offsets are checked as another client (confluent-kafka) sees them."""

import os
import subprocess

from confluent_kafka import Consumer, TopicPartition

from clients import conf, create_topic, produce
from conftest import REPO, gregor_bin

TOPIC = "reset-file"


def gregor(broker, *args, check=True):
    p = subprocess.run([gregor_bin(), "groups", "--bootstrap-server", broker.bootstrap, *args],
                       capture_output=True, text=True, timeout=60)
    if check:
        assert p.returncode == 0, f"gregor groups {' '.join(args)}: {p.returncode}\n" \
                                  f"{p.stdout}\n{p.stderr}"
    return p


def commit(broker, group, offsets):
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(TOPIC, p, o) for p, o in offsets.items()],
                 asynchronous=False)
    finally:
        c.close()


def committed(broker, group):
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    try:
        got = c.committed([TopicPartition(TOPIC, p) for p in range(2)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def setup(broker):
    create_topic(broker, TOPIC, partitions=2)
    produce(broker, TOPIC, [{"partition": p, "value": b"v"} for p in (0, 1) for _ in range(10)])
    commit(broker, "rf-a", {0: 8, 1: 9})
    commit(broker, "rf-b", {0: 2, 1: 3})


def test_export_then_from_file_for_one_group(broker, tmp_path):
    setup(broker)
    dry = gregor(broker, "--reset-offsets", "--group", "rf-a", "--topic", TOPIC,
                 "--shift-by", "-5", "--dry-run", "--export")
    assert dry.stdout == f"{TOPIC},0,3\n{TOPIC},1,4\n", dry.stdout
    assert committed(broker, "rf-a") == {0: 8, 1: 9}, "a dry run commits nothing"

    plan = tmp_path / "plan.csv"
    plan.write_text(dry.stdout)
    out = gregor(broker, "--reset-offsets", "--group", "rf-a", "--from-file", str(plan),
                 "--execute")
    assert "NEW-OFFSET" in out.stdout, out.stdout
    assert committed(broker, "rf-a") == {0: 3, 1: 4}

    # A hand-written plan: out-of-range offsets are kept within the log, as Kafka does; only
    # the partitions in the file move.
    plan.write_text(f"{TOPIC},1,99\n")
    out = gregor(broker, "--reset-offsets", "--group", "rf-a", "--from-file", str(plan),
                 "--execute", "--export")
    assert out.stdout == f"{TOPIC},1,10\n", out.stdout
    assert "higher than latest offset" in out.stderr, out.stderr
    assert committed(broker, "rf-a") == {0: 3, 1: 10}

    bad = gregor(broker, "--reset-offsets", "--group", "rf-a", "--topic", TOPIC,
                 "--from-file", str(plan), check=False)
    assert bad.returncode != 0 and "drop --topic" in bad.stderr, bad.stderr
    plan.write_text("nonsense\n")
    bad = gregor(broker, "--reset-offsets", "--group", "rf-a", "--from-file", str(plan),
                 "--execute", check=False)
    assert bad.returncode != 0 and "invalid reset plan line 1" in bad.stderr, bad.stderr
    assert committed(broker, "rf-a") == {0: 3, 1: 10}


def test_several_groups_export_with_the_group_column(broker, tmp_path):
    setup(broker)
    out = gregor(broker, "--reset-offsets", "--group", "rf-a", "--group", "rf-b",
                 "--topic", TOPIC, "--to-earliest", "--dry-run", "--export")
    assert out.stdout.splitlines() == [f"rf-a,{TOPIC},0,0", f"rf-a,{TOPIC},1,0",
                                       f"rf-b,{TOPIC},0,0", f"rf-b,{TOPIC},1,0"], out.stdout
    plan = tmp_path / "plan.csv"
    plan.write_text(f"rf-a,{TOPIC},0,1\nrf-b,{TOPIC},1,6\n")
    # Through Kafka's script name, with Kafka's flags.
    env = dict(os.environ, GREGOR_BIN=gregor_bin())
    tool = subprocess.run([str(REPO / "bin" / "kafka-consumer-groups.sh"), "--bootstrap-server",
                           broker.bootstrap, "--reset-offsets", "--group", "rf-a", "--group",
                           "rf-b", "--from-file", str(plan), "--execute"],
                          capture_output=True, text=True, env=env, timeout=60)
    assert tool.returncode == 0, tool.stderr
    assert committed(broker, "rf-a") == {0: 1, 1: 9}
    assert committed(broker, "rf-b") == {0: 2, 1: 6}
    # A group the file does not name is reported and left alone.
    plan.write_text(f"rf-b,{TOPIC},0,0\n")
    out = gregor(broker, "--reset-offsets", "--group", "rf-a", "--group", "rf-b",
                 "--from-file", str(plan), "--execute")
    assert "No reset plan for group rf-a found" in out.stderr, out.stderr
    assert committed(broker, "rf-a") == {0: 1, 1: 9}
    assert committed(broker, "rf-b") == {0: 0, 1: 6}
