"""The Kafka-named scripts in bin/ (kafka-topics.sh, kafka-configs.sh, kafka-consumer-groups.sh,
kafka-reassign-partitions.sh, kafka-leader-election.sh, kafka-storage.sh, kafka-acls.sh) run with
Kafka's flags against a real broker, each checked by its effect as another client sees it
(confluent-kafka's AdminClient and consumers), including the exact command lines librdkafka's
own test suite runs through `$KAFKA_PATH/bin/kafka-topics.sh`; the binary look-up
($GREGOR_BIN, PATH, target/) and the refusal of flags Gregor does not support."""

import functools
import os
import subprocess
import time
import uuid
from pathlib import Path

from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import ConfigResource

from clients import admin, conf, create_topic, produce, result, wait_for_partitions
from conftest import REPO, Broker, ListenersBroker, gregor_bin, wait_until
from pki import Ca

BIN = REPO / "bin"


def tool(name, *args, env=None, check=True, shell_line=None):
    """Runs bin/<name> with `args` (or a whole shell command line), GREGOR_BIN set."""
    e = dict(os.environ, GREGOR_BIN=gregor_bin())
    e.update(env or {})
    if shell_line is not None:
        out = subprocess.run(shell_line, shell=True, capture_output=True, text=True, env=e,
                             timeout=60)
    else:
        out = subprocess.run([str(BIN / name), *args], capture_output=True, text=True, env=e,
                             timeout=60)
    if check:
        assert out.returncode == 0, f"{name} {args or shell_line}: rc={out.returncode}\n" \
                                    f"stdout: {out.stdout}\nstderr: {out.stderr}"
    return out


def topic_configs(adm, topic):
    res = ConfigResource(ConfigResource.Type.TOPIC, topic)
    return {k: v.value for k, v in result(adm.describe_configs([res])[res]).items()}


def committed(broker, group, topic, partitions):
    c = Consumer(conf(broker, {"group.id": group, "enable.auto.commit": False}))
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return {tp.partition: tp.offset for tp in got}
    finally:
        c.close()


def test_kafka_topics_create_list_describe_alter_delete(broker):
    adm = admin(broker)
    bs = broker.bootstrap
    out = tool("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", "tools-t1",
               "--partitions", "3", "--replication-factor", "1",
               "--config", "retention.ms=123456", "--config", "cleanup.policy=compact")
    assert "Created topic tools-t1." in out.stdout, out.stdout
    wait_for_partitions(broker, "tools-t1", 3, adm=adm)
    cfg = topic_configs(adm, "tools-t1")
    assert cfg["retention.ms"] == "123456" and cfg["cleanup.policy"] == "compact", cfg

    assert "tools-t1" in tool("kafka-topics.sh", "--bootstrap-server", bs, "--list").stdout.split()
    described = tool("kafka-topics.sh", "--bootstrap-server", bs, "--describe",
                     "--topic", "tools-t1").stdout
    assert "PartitionCount: 3" in described and "Partition: 2" in described, described

    tool("kafka-topics.sh", "--bootstrap-server", bs, "--alter", "--topic", "tools-t1",
         "--partitions", "5")
    wait_for_partitions(broker, "tools-t1", 5, adm=adm)

    # --if-not-exists on an existing topic: no error.
    tool("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--if-not-exists",
         "--topic", "tools-t1", "--partitions", "1")
    again = tool("kafka-topics.sh", "--bootstrap-server", bs, "--create", "--topic", "tools-t1",
                 "--partitions", "1", check=False)
    assert again.returncode != 0 and "already exists" in (again.stdout + again.stderr)

    tool("kafka-topics.sh", "--bootstrap-server", bs, "--delete", "--topic", "tools-t1")
    wait_until(lambda: "tools-t1" not in adm.list_topics(timeout=5).topics, 10,
               "tools-t1 to be deleted")


def test_librdkafka_suite_command_lines(broker, tmp_path):
    """The command lines of librdkafka's tests/test.c (test_kafka_topics with
    TEST_KAFKA_VERSION >= 3.0: `$KAFKA_PATH/bin/kafka-topics.sh --bootstrap-server $BROKERS`),
    as its tests 0052 (timestamp type), 0077 (compaction) and the create/delete helpers format
    them, run by a shell as system(3) does."""
    adm = admin(broker)
    prefix = f"{BIN.parent}/bin/kafka-topics.sh --bootstrap-server {broker.bootstrap} "
    # 0052-msg_timestamps.c
    tool("kafka-topics.sh", shell_line=prefix +
         '--create --topic "rdkafkatest_0052_lat" --replication-factor 1 --partitions 1 '
         "--config message.timestamp.type=LogAppendTime")
    # 0077-compaction.c.
    line_0077 = ('--create --topic "rdkafkatest_0077" --partitions 2 --replication-factor 1 '
                 "--config cleanup.policy=compact --config segment.ms=10000 "
                 "--config segment.bytes=10000 --config min.cleanable.dirty.ratio=0.01 "
                 "--config delete.retention.ms=86400 --config file.delete.delay.ms=10000 "
                 "--config max.compaction.lag.ms=100")
    tool("kafka-topics.sh", shell_line=prefix + line_0077)
    # test_create_topic_sh / test_delete_topic_sh
    tool("kafka-topics.sh", shell_line=prefix +
         '--create --topic "rdkafkatest_sh" --replication-factor 1 --partitions 4')
    wait_for_partitions(broker, "rdkafkatest_0077", 2, adm=adm)
    wait_for_partitions(broker, "rdkafkatest_sh", 4, adm=adm)
    assert topic_configs(adm, "rdkafkatest_0052_lat")["message.timestamp.type"] == "LogAppendTime"
    cfg = topic_configs(adm, "rdkafkatest_0077")
    assert cfg["cleanup.policy"] == "compact" and cfg["segment.bytes"] == "10000", cfg
    assert cfg["max.compaction.lag.ms"] == "100", cfg
    assert cfg["file.delete.delay.ms"] == "10000", cfg
    tool("kafka-topics.sh", shell_line=prefix + '--delete --topic "rdkafkatest_sh" ')
    wait_until(lambda: "rdkafkatest_sh" not in adm.list_topics(timeout=5).topics, 10,
               "rdkafkatest_sh to be deleted")

    # With TEST_KAFKA_VERSION < 3.0 librdkafka passes --zookeeper $ZK_ADDRESS: Gregor has no
    # ZooKeeper, and the script says how to run the suite instead.
    zk = tool("kafka-topics.sh", shell_line=f"{BIN}/kafka-topics.sh --zookeeper 127.0.0.1:2181 "
              '--create --topic "zk" --replication-factor 1 --partitions 1', check=False)
    assert zk.returncode != 0
    assert "--zookeeper is not supported" in zk.stderr and "TEST_KAFKA_VERSION" in zk.stderr, \
        zk.stderr
    assert "zk" not in adm.list_topics(timeout=5).topics


def test_kafka_configs_alter_describe_delete(broker):
    adm = admin(broker)
    bs = broker.bootstrap
    create_topic(broker, "tools-cfg", partitions=1, adm=adm)
    tool("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "topics",
         "--entity-name", "tools-cfg", "--alter",
         "--add-config", "retention.ms=1000,cleanup.policy=[compact,delete]")
    cfg = topic_configs(adm, "tools-cfg")
    assert cfg["retention.ms"] == "1000" and cfg["cleanup.policy"] == "compact,delete", cfg
    out = tool("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "topics",
               "--entity-name", "tools-cfg", "--describe").stdout
    assert "retention.ms=1000" in out, out

    # Kafka's shorthand --topic.
    tool("kafka-configs.sh", "--bootstrap-server", bs, "--topic", "tools-cfg", "--alter",
         "--delete-config", "retention.ms")
    cfg = topic_configs(adm, "tools-cfg")
    assert cfg["retention.ms"] != "1000", cfg
    out = tool("kafka-configs.sh", "--bootstrap-server", bs, "--topic", "tools-cfg",
               "--describe").stdout
    assert "retention.ms" not in out, out

    # Broker default, as runbooks set it.
    tool("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers",
         "--entity-default", "--alter", "--add-config", "log.retention.ms=7200000")
    out = tool("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "brokers",
               "--entity-default", "--describe").stdout
    assert "log.retention.ms=7200000" in out, out

    # SCRAM credentials, as kafka-configs.sh sets them (the password never echoed).
    out = tool("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "users",
               "--entity-name", "alice", "--alter", "--add-config",
               "SCRAM-SHA-256=[iterations=4096,password=alice-pw]")
    assert out.stdout == "Completed updating config for user alice.\n", out.stdout
    out = tool("kafka-configs.sh", "--bootstrap-server", bs, "--entity-type", "users",
               "--describe")
    assert out.stdout == ("SCRAM credential configs for user-principal 'alice' are "
                          "SCRAM-SHA-256=iterations=4096\n"), out.stdout
    quota = tool("kafka-configs.sh", "--bootstrap-server", bs, "--alter", "--user", "alice",
                 "--add-config", "producer_byte_rate=1024", check=False)
    assert quota.returncode != 0 and "--user is not supported" in quota.stderr, quota.stderr


def test_kafka_consumer_groups_list_describe_reset_delete(broker):
    bs = broker.bootstrap
    create_topic(broker, "tools-grp", partitions=2)
    produce(broker, "tools-grp", [{"partition": i % 2, "value": f"v{i}".encode()}
                                  for i in range(10)])
    c = Consumer(conf(broker, {"group.id": "tools-g", "auto.offset.reset": "earliest",
                               "enable.auto.commit": False, "session.timeout.ms": 6000,
                               "heartbeat.interval.ms": 500}))
    c.subscribe(["tools-grp"])
    got = 0
    deadline = time.monotonic() + 30
    while got < 10 and time.monotonic() < deadline:
        m = c.poll(0.5)
        if m is not None and not m.error():
            got += 1
    assert got == 10
    c.commit(asynchronous=False)

    assert "tools-g" in tool("kafka-consumer-groups.sh", "--bootstrap-server", bs,
                             "--list").stdout.split()
    members = tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe",
                   "--group", "tools-g", "--members", "--verbose").stdout
    assert "ASSIGNMENT" in members and "tools-grp" in members, members
    c.close()

    described = tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--describe",
                     "--group", "tools-g").stdout
    assert "LAG" in described and "tools-grp" in described, described
    assert committed(broker, "tools-g", "tools-grp", 2) == {0: 5, 1: 5}

    dry = tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--reset-offsets",
               "--group", "tools-g", "--topic", "tools-grp", "--to-earliest", "--dry-run").stdout
    assert "NEW-OFFSET" in dry, dry
    assert committed(broker, "tools-g", "tools-grp", 2) == {0: 5, 1: 5}
    tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--reset-offsets", "--group",
         "tools-g", "--all-topics", "--to-earliest", "--execute")
    assert committed(broker, "tools-g", "tools-grp", 2) == {0: 0, 1: 0}
    tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--reset-offsets", "--group",
         "tools-g", "--topic", "tools-grp:0", "--shift-by", "2", "--execute")
    assert committed(broker, "tools-g", "tools-grp", 2)[0] == 2
    # --by-duration: every record is younger than an hour, so back to the first offset.
    tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--reset-offsets", "--group",
         "tools-g", "--topic", "tools-grp", "--by-duration", "PT1H", "--execute")
    assert committed(broker, "tools-g", "tools-grp", 2) == {0: 0, 1: 0}

    deleted = tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--delete-offsets",
                   "--group", "tools-g", "--topic", "tools-grp:1").stdout
    assert "Request succeed for deleting offsets" in deleted, deleted
    assert committed(broker, "tools-g", "tools-grp", 2) == {0: 0, 1: -1001}

    tool("kafka-consumer-groups.sh", "--bootstrap-server", bs, "--delete", "--group", "tools-g")
    assert "tools-g" not in tool("kafka-consumer-groups.sh", "--bootstrap-server", bs,
                                 "--list").stdout.split()


def test_kafka_reassign_partitions_and_leader_election(broker, tmp_path):
    bs = broker.bootstrap
    create_topic(broker, "tools-re", partitions=2)
    move = tmp_path / "topics-to-move.json"
    move.write_text('{"topics": [{"topic": "tools-re"}], "version": 1}')
    out = tool("kafka-reassign-partitions.sh", "--bootstrap-server", bs,
               "--topics-to-move-json-file", str(move), "--broker-list", "1", "--generate").stdout
    assert "Proposed partition reassignment configuration" in out, out
    plan = tmp_path / "plan.json"
    plan.write_text(out.split("Proposed partition reassignment configuration\n")[1])
    out = tool("kafka-reassign-partitions.sh", "--bootstrap-server", bs,
               "--reassignment-json-file", str(plan), "--execute").stdout
    assert "Successfully started partition reassignments for tools-re-0,tools-re-1" in out, out
    wait_until(lambda: "Reassignment of partition tools-re-1 is completed." in tool(
        "kafka-reassign-partitions.sh", "--bootstrap-server", bs, "--reassignment-json-file",
        str(plan), "--verify").stdout, 20, "the reassignment to be complete")

    out = tool("kafka-leader-election.sh", "--bootstrap-server", bs, "--election-type",
               "PREFERRED", "--topic", "tools-re", "--partition", "0").stdout
    assert "Valid replica already elected for partitions tools-re-0" in out, out
    out = tool("kafka-leader-election.sh", "--bootstrap-server", bs, "--election-type",
               "preferred", "--all-topic-partitions")
    assert out.stdout == "", out.stdout
    parts = tmp_path / "election.json"
    parts.write_text('{"partitions": [{"topic": "tools-re", "partition": 1}]}')
    out = tool("kafka-leader-election.sh", "--bootstrap-server", bs, "--election-type",
               "UNCLEAN", "--path-to-json-file", str(parts)).stdout
    assert "Valid replica already elected for partitions tools-re-1" in out, out


def test_kafka_storage_format_then_start(tmp_path):
    rid = tool("kafka-storage.sh", "random-uuid").stdout.strip()
    assert len(rid) == 22 and not rid.startswith("-"), rid

    b = Broker(tmp_path, name="formatted")
    props = tmp_path / "server.properties"
    props.write_text(f"node.id=1\nlog.dirs={b.data_dir}\n"
                     f"listeners=PLAINTEXT://127.0.0.1:{b.port}\n")
    cluster_id = str(uuid.uuid4()).replace("-", "")[:22]
    out = tool("kafka-storage.sh", "format", "-t", cluster_id, "-c", str(props), "--standalone")
    assert cluster_id in out.stdout, out.stdout
    assert f"cluster.id={cluster_id}" in (b.data_dir / "meta.properties").read_text()
    info = tool("kafka-storage.sh", "info", "-c", str(props)).stdout
    assert cluster_id in info, info

    again = tool("kafka-storage.sh", "format", "-t", cluster_id, "-c", str(props), check=False)
    assert again.returncode != 0 and "already formatted" in again.stderr, again.stderr
    tool("kafka-storage.sh", "format", "--cluster-id", cluster_id, "--config", str(props),
         "--ignore-formatted")
    other = tool("kafka-storage.sh", "format", "-t", rid, "-c", str(props), "-g", check=False)
    assert other.returncode != 0 and "belongs to cluster" in other.stderr, other.stderr
    # --add-scram is for a new directory (e2e/test_scram_admin.py starts a broker on one).
    scram = tool("kafka-storage.sh", "format", "-t", cluster_id, "-c", str(props), "--add-scram",
                 "SCRAM-SHA-256=[name=alice,password=x]", check=False)
    assert scram.returncode != 0 and "already formatted" in scram.stderr, scram.stderr
    nope = tool("kafka-storage.sh", "version-mapping", check=False)
    assert nope.returncode != 0 and "not supported" in nope.stderr

    # The broker keeps the formatted cluster id.
    try:
        b.start()
        adm = admin(b)
        desc = result(adm.describe_cluster(request_timeout=10), what="describe cluster")
        assert desc.cluster_id == cluster_id
    finally:
        rc = b.stop()
    assert rc == 0, f"the broker did not exit 0 on SIGTERM (rc={rc})"


def test_binary_lookup_unknown_flags_and_client_config(broker, tmp_path):
    bs = broker.bootstrap
    # $GREGOR_BIN pointing nowhere is an error that names it.
    out = tool("kafka-topics.sh", "--bootstrap-server", bs, "--list",
               env={"GREGOR_BIN": str(tmp_path / "nope")}, check=False)
    assert out.returncode != 0 and "GREGOR_BIN" in out.stderr, out.stderr

    # Without $GREGOR_BIN, `gregor` on PATH comes first.
    fake = tmp_path / "path"
    fake.mkdir()
    (fake / "gregor").write_text("#!/bin/sh\necho \"fake gregor $*\"\n")
    (fake / "gregor").chmod(0o755)
    env = dict(os.environ)
    env.pop("GREGOR_BIN", None)
    env["PATH"] = f"{fake}:{env['PATH']}"
    out = subprocess.run([str(BIN / "kafka-topics.sh"), "--list"], capture_output=True,
                         text=True, env=env, timeout=30)
    assert out.stdout.strip() == "fake gregor topics --list", out

    # A flag neither Kafka's list of unsupported ones nor gregor knows: clap's message, and
    # which gregor command the script runs.
    out = tool("kafka-topics.sh", "--bootstrap-server", bs, "--list", "--frobnicate",
               check=False)
    assert out.returncode == 2, out
    assert "--frobnicate" in out.stderr and "runs `gregor topics`" in out.stderr, out.stderr

    # --command-config: a PLAINTEXT client file is fine; a setting gregor does not take is
    # refused by name, and a file that is not there is named (the secure files are in
    # test_secure_command_config).
    plain = tmp_path / "client.properties"
    plain.write_text("# admin client\nsecurity.protocol=PLAINTEXT\nclient.id = ops\n")
    create_topic(broker, "tools-cc", partitions=1)
    out = tool("kafka-topics.sh", "--bootstrap-server", bs, "--command-config", str(plain),
               "--list")
    assert "tools-cc" in out.stdout.split()
    kerberos = tmp_path / "kerberos.properties"
    kerberos.write_text("security.protocol=SASL_PLAINTEXT\nsasl.kerberos.service.name=kafka\n")
    out = tool("kafka-topics.sh", "--bootstrap-server", bs, "--command-config", str(kerberos),
               "--list", check=False)
    assert out.returncode == 1, out
    assert "sasl.kerberos.service.name is not supported" in out.stderr, out.stderr
    out = tool("kafka-topics.sh", "--bootstrap-server", bs,
               f"--command-config={tmp_path / 'missing.properties'}", "--list", check=False)
    assert out.returncode == 1, out
    assert "--command-config" in out.stderr and "cannot read the file" in out.stderr, out.stderr

    # kafka-acls.sh runs `gregor acls`; this broker has no authorizer, so the ACL APIs answer
    # SECURITY_DISABLED, as Kafka's do (librdkafka's 0109 / 0115 / 0119 call it).
    out = tool("kafka-acls.sh", "--bootstrap-server", bs, "--add", "--deny-principal", "User:*",
               "--operation", "All", "--deny-host", "*", "--topic", "t", check=False)
    assert out.returncode != 0 and "No Authorizer is configured" in out.stderr, out.stderr


ADMIN_PW = "admin-Scram-Secret-4"
CAROL_PW = "carol-Scram-Secret-8"
WRONG_PW = "not-the-Password-2"



SecureBroker = functools.partial(ListenersBroker, extra=("SASL_SSL", "SSL"), name="secure")


def test_secure_command_config(tmp_path):
    """The scripts pass Kafka's secure client files through (--command-config, and
    kafka-leader-election.sh's --admin.config): SASL_SSL with SCRAM-SHA-512 in librdkafka's
    names and in the Java client's (sasl.jaas.config), and mTLS, against a broker with the
    authorizer, including kafka-acls.sh and kafka-configs.sh (a SCRAM user made over mTLS then
    logs in)."""
    ca = Ca(tmp_path, "tools-ca")
    crt, key = ca.issue("broker", "localhost")
    keystore = tmp_path / "broker-keystore.pem"
    keystore.write_bytes(key.read_bytes() + crt.read_bytes())
    ops_crt, ops_key = ca.issue("ops", "ops")
    b = SecureBroker(tmp_path, {
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca.pem),
        "ssl.principal.mapping.rules": "RULE:^CN=([a-z]+)$/$1/,DEFAULT",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin;User:ops",
    })
    props = tmp_path / "format.properties"
    props.write_text(f"node.id={b.node_id}\nlog.dirs={b.data_dir}\n")
    r = subprocess.run([gregor_bin(), "storage", "format", "-c", str(props), "-t",
                        "gregorToolsClusterId00", "--standalone", "--add-scram",
                        f"SCRAM-SHA-512=[name=admin,password={ADMIN_PW}]"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    b.start()
    try:
        sasl_bs = f"localhost:{b.sasl_ssl_port}"
        ssl_bs = f"localhost:{b.ssl_port}"
        scram = tmp_path / "scram.properties"
        scram.write_text(f"security.protocol=SASL_SSL\nssl.ca.location={ca.pem}\n"
                         f"sasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\n"
                         f"sasl.password={ADMIN_PW}\n")
        jaas = tmp_path / "jaas.properties"
        jaas.write_text("security.protocol=SASL_SSL\nssl.truststore.type=PEM\n"
                        f"ssl.truststore.location={ca.pem}\nsasl.mechanism=SCRAM-SHA-512\n"
                        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule"
                        f' required username="admin" password="{ADMIN_PW}";\n')
        mtls = tmp_path / "mtls.properties"
        mtls.write_text(f"security.protocol=SSL\nssl.ca.location={ca.pem}\n"
                        f"ssl.certificate.location={ops_crt}\nssl.key.location={ops_key}\n")

        tool("kafka-topics.sh", "--bootstrap-server", sasl_bs, "--command-config", str(scram),
             "--create", "--topic", "secure-t", "--partitions", "1")
        out = tool("kafka-topics.sh", "--bootstrap-server", ssl_bs, "--command-config", str(mtls),
                   "--list")
        assert "secure-t" in out.stdout.split(), out.stdout

        # kafka-acls.sh over SASL_SSL (Java-style file, --command-config=FILE), listed over mTLS.
        tool("kafka-acls.sh", "--bootstrap-server", sasl_bs, f"--command-config={jaas}", "--add",
             "--allow-principal", "User:carol", "--operation", "Describe", "--topic", "secure-t")
        out = tool("kafka-acls.sh", "--bootstrap-server", ssl_bs, "--command-config", str(mtls),
                   "--list", "--topic", "secure-t")
        assert "User:carol" in out.stdout and "DESCRIBE" in out.stdout.upper(), out.stdout

        # kafka-configs.sh over mTLS makes a SCRAM user, who then logs in over SASL_SSL and
        # sees only the topic its ACL lets it describe.
        tool("kafka-configs.sh", "--bootstrap-server", ssl_bs, "--command-config", str(mtls),
             "--alter", "--entity-type", "users", "--entity-name", "carol", "--add-config",
             f"SCRAM-SHA-512=[iterations=8192,password={CAROL_PW}]")
        tool("kafka-topics.sh", "--bootstrap-server", sasl_bs, "--command-config", str(scram),
             "--create", "--topic", "hidden-t", "--partitions", "1")
        carol = tmp_path / "carol.properties"
        carol.write_text(scram.read_text().replace("username=admin", "username=carol")
                         .replace(ADMIN_PW, CAROL_PW))

        def carol_lists():
            out = tool("kafka-topics.sh", "--bootstrap-server", sasl_bs, "--command-config",
                       str(carol), "--list", check=False)
            return out.returncode == 0 and out.stdout.split() == ["secure-t"]
        # The credential is applied from the metadata log: wait until this node has it.
        wait_until(carol_lists, 30, "carol logs in and lists the topic she may describe")

        tool("kafka-consumer-groups.sh", "--bootstrap-server", ssl_bs, "--command-config",
             str(mtls), "--list")
        # ElectLeaders needs ALTER on the cluster: the super user's login went through.
        out = tool("kafka-leader-election.sh", "--bootstrap-server", sasl_bs, "--admin.config",
                   str(scram), "--election-type", "preferred", "--topic", "secure-t",
                   "--partition", "0")
        assert "Valid replica already elected for partitions secure-t-0" in out.stdout, out

        # What gregor refuses is refused with its reason, by the scripts too.
        wrong = tmp_path / "wrong.properties"
        wrong.write_text(scram.read_text().replace(ADMIN_PW, WRONG_PW))
        out = tool("kafka-acls.sh", "--bootstrap-server", sasl_bs, "--command-config",
                   str(wrong), "--list", check=False)
        assert out.returncode != 0 and "SASL authentication failed" in out.stderr, out.stderr
        gssapi = tmp_path / "gssapi.properties"
        gssapi.write_text("security.protocol=SASL_SSL\nsasl.mechanism=GSSAPI\n"
                          "sasl.kerberos.service.name=kafka\n")
        out = tool("kafka-configs.sh", "--bootstrap-server", sasl_bs, "--command-config",
                   str(gssapi), "--describe", "--entity-type", "users", check=False)
        assert out.returncode == 1 and "sasl.kerberos.service.name" in out.stderr, out.stderr
        out = tool("kafka-topics.sh", "--bootstrap-server", sasl_bs, "--command-config",
                   str(scram), "--command-config", str(mtls), "--list", check=False)
        assert out.returncode == 1 and "only one client properties file" in out.stderr, out
        for o in (out.stdout, out.stderr):
            assert ADMIN_PW not in o and CAROL_PW not in o
    finally:
        assert b.stop() == 0, f"broker did not exit 0\n{b.log_path.read_text()[-3000:]}"
