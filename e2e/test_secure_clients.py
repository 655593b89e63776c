"""Every client over SASL_SSL with SCRAM-SHA-512 and over mutual TLS, against a broker with
the authorizer on (issue 38's client matrix).

The broker has a SASL_SSL listener (SCRAM-SHA-512; users made with `gregor storage format
--add-scram`) and an SSL listener with `ssl.client.auth=required`, and Kafka's
`StandardAuthorizer` name with only `User:admin` in `super.users`. The clients' principals,
`User:alice` (SCRAM) and `User:CN=bob,O=Acme` (the mTLS certificate's subject), may do anything
on topics and groups prefixed `sc-`, through ACLs: nothing else lets them in, so each case
checks the principal mapping too. For each of kcat, confluent-kafka, kafka-python, kafkajs and
Gregor's own client (`gregor_member` and the `gregor` admin commands with `--command-config`),
over each security protocol: create a topic, produce records, consume them in a group
committing offsets, describe the topic and the group (members while it is up, committed
offsets after), list offsets, delete the topic. kcat has no admin calls beyond Metadata: its
topic is auto-created (the ACL's CREATE) and its group checked with the admin's client. Other
principals (`User:eve` with a good SCRAM password, `User:CN=mallory,O=Acme` with a certificate
of the same CA) get Kafka's authorization errors."""

import functools
import json
import os
import subprocess
import threading

import pytest
from confluent_kafka import (Consumer, ConsumerGroupTopicPartitions, KafkaError, KafkaException,
                             Producer, TopicCollection, TopicPartition)
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, OffsetSpec, ResourcePatternType, ResourceType)
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer
from kafka.admin import NewTopic as KpNewTopic
from kafka.structs import TopicPartition as KpTopicPartition

from conftest import E2E, ListenersBroker, gregor_bin, wait_until
from pki import Ca
from test_sasl import broker_log, format_with_scram

N = 20
ADMIN_PW = "admin-Secure-Clients-1"
ALICE_PW = "alice-Secure-Clients-2"
EVE_PW = "eve-Secure-Clients-3"
PASSWORDS = [ADMIN_PW, ALICE_PW, EVE_PW]
BOB = "User:CN=bob,O=Acme"
CLIENTS = ["kcat", "confluent", "kafka-python", "kafkajs", "gregor"]
SECURITY = ["sasl_ssl", "mtls"]



SecureBroker = functools.partial(ListenersBroker, extra=("SASL_SSL", "SSL"), name="secure")


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("secure-pki")
    ca = Ca(d, "secure-ca")
    return {"dir": d, "ca": ca, "keystore": ca.broker_keystore(),
            "bob": ca.issue("bob", "bob", org="Acme"),
            "mallory": ca.issue("mallory", "mallory", org="Acme")}


def start_secure_broker(workdir, pki, extra=None):
    settings = {
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "listener.name.ssl.ssl.client.auth": "required",
        "ssl.keystore.location": str(pki["keystore"]),
        "ssl.truststore.location": str(pki["ca"].pem),
        # Kafka's class name, accepted as an alias so that existing configs work.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": "User:admin",
    }
    settings.update(extra or {})
    b = SecureBroker(workdir, settings)
    format_with_scram(b.data_dir, b.node_id, workdir,
                      users=[("admin", ADMIN_PW), ("alice", ALICE_PW), ("eve", EVE_PW)])
    return b.start()


def grant_prefixed(b, pki, principals, prefix="sc-"):
    """ALL on topics and groups starting with `prefix`, for each principal; waits until the
    broker shows them."""
    admin = AdminClient(conf(b, pki, "sasl_ssl", user="admin"))
    bindings = [AclBinding(rt, prefix, ResourcePatternType.PREFIXED, p, "*", AclOperation.ALL,
                           AclPermissionType.ALLOW)
                for p in principals for rt in (ResourceType.TOPIC, ResourceType.GROUP)]
    for f in admin.create_acls(bindings).values():
        f.result(timeout=20)


@pytest.fixture
def secure_broker(tmp_path, pki):
    b = start_secure_broker(tmp_path, pki)
    grant_prefixed(b, pki, ["User:alice", BOB])
    yield b
    assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"
    log = broker_log(b.log_path)
    assert not [s for s in PASSWORDS if s in log], "a password reached the broker's log"


# Client settings for one security protocol, in librdkafka's names.

def conf(b, pki, security, user="alice", password=None, cert="bob"):
    ca = str(pki["ca"].pem)
    if security == "sasl_ssl":
        pw = password or {"admin": ADMIN_PW, "alice": ALICE_PW, "eve": EVE_PW}[user]
        return {"bootstrap.servers": f"127.0.0.1:{b.sasl_ssl_port}",
                "security.protocol": "SASL_SSL", "ssl.ca.location": ca,
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": pw}
    crt, key = pki[cert]
    return {"bootstrap.servers": f"127.0.0.1:{b.ssl_port}", "security.protocol": "SSL",
            "ssl.ca.location": ca, "ssl.certificate.location": str(crt),
            "ssl.key.location": str(key)}


def properties_file(path, c):
    """`c` as a client properties file (gregor's --command-config takes librdkafka's names)."""
    path.write_text("".join(f"{k}={v}\n" for k, v in c.items() if k != "bootstrap.servers"))
    return path


def super_admin(b, pki):
    return AdminClient(conf(b, pki, "sasl_ssl", user="admin"))


def committed_total(admin, group, topic):
    """The sum of the group's committed offsets on `topic` (the records it consumed)."""
    req = ConsumerGroupTopicPartitions(group)
    res = admin.list_consumer_group_offsets([req])[group].result(timeout=20)
    return sum(tp.offset for tp in res.topic_partitions if tp.topic == topic and tp.offset >= 0)


def expected_values():
    return sorted(f"v{i}" for i in range(N))


# One runner per client. Each returns what the client itself saw:
#   consumed: the values read in the group; listed: the topic in the client's topic list;
#   partitions: its partition count as described; members: the group's members while the
#   consumer was in it (None if the client cannot describe groups); committed: the group's
#   committed offsets summed, read back by the client; log_end: the topic's end offsets summed
#   (ListOffsets); deleted: whether the client deleted the topic.

def run_confluent(b, pki, security, topic, group):
    c = conf(b, pki, security)
    admin = AdminClient(c)
    admin.create_topics([NewTopic(topic, 2, 1)])[topic].result(timeout=20)
    out = {"listed": topic in admin.list_topics(timeout=10).topics}
    desc = admin.describe_topics(TopicCollection([topic]))[topic].result(timeout=20)
    out["partitions"] = len(desc.partitions)
    p = Producer(dict(c, **{"message.timeout.ms": 20000}))
    for i in range(N):
        p.produce(topic, f"v{i}".encode(), key=f"k{i}".encode())
    assert p.flush(30) == 0, "every record delivered"
    consumer = Consumer(dict(c, **{"group.id": group, "auto.offset.reset": "earliest",
                                   "enable.auto.commit": False}))
    consumer.subscribe([topic])
    got = []

    def read_all():
        m = consumer.poll(0.5)
        if m is not None and m.error() is None:
            got.append(m.value().decode())
            consumer.commit(message=m, asynchronous=False)
        return len(got) >= N

    try:
        wait_until(read_all, 40, f"{N} records back from {topic}")
        g = admin.describe_consumer_groups([group])[group].result(timeout=20)
        out["members"] = len(g.members)
    finally:
        consumer.close()
    out["consumed"] = sorted(got)
    out["committed"] = committed_total(admin, group, topic)
    ends = admin.list_offsets({TopicPartition(topic, i): OffsetSpec.latest() for i in range(2)})
    out["log_end"] = sum(f.result(timeout=20).offset for f in ends.values())
    admin.delete_topics([topic])[topic].result(timeout=20)
    out["deleted"] = True
    return out


def kafka_python_conf(c):
    out = {"bootstrap_servers": c["bootstrap.servers"], "security_protocol": c["security.protocol"],
           "ssl_cafile": c["ssl.ca.location"], "ssl_check_hostname": True}
    if "sasl.mechanism" in c:
        out.update(sasl_mechanism=c["sasl.mechanism"], sasl_plain_username=c["sasl.username"],
                   sasl_plain_password=c["sasl.password"])
    else:
        out.update(ssl_certfile=c["ssl.certificate.location"], ssl_keyfile=c["ssl.key.location"])
    return out


def run_kafka_python(b, pki, security, topic, group):
    kp = kafka_python_conf(conf(b, pki, security))
    admin = KafkaAdminClient(**kp)
    try:
        admin.create_topics([KpNewTopic(topic, 2, 1)], timeout_ms=20000)
        out = {"listed": topic in admin.list_topics()}
        desc = admin.describe_topics([topic])
        out["partitions"] = len(desc[0]["partitions"])
        p = KafkaProducer(**kp)
        for i in range(N):
            p.send(topic, key=f"k{i}".encode(), value=f"v{i}".encode())
        p.flush(30)
        p.close()
        consumer = KafkaConsumer(topic, group_id=group, auto_offset_reset="earliest",
                                 enable_auto_commit=False, consumer_timeout_ms=500,
                                 session_timeout_ms=6000, heartbeat_interval_ms=500, **kp)
        got = []

        def read_all():
            for m in consumer:
                got.append(m.value.decode())
                consumer.commit()
            return len(got) >= N

        try:
            wait_until(read_all, 40, f"{N} records back from {topic} (kafka-python)")
            g = admin.describe_groups([group])[group]
            out["members"] = len(g["members"])
            # ListOffsets, through the consumer (kafka-python's admin has no call for it).
            ends = consumer.end_offsets([KpTopicPartition(topic, i) for i in range(2)])
            out["log_end"] = sum(ends.values())
        finally:
            consumer.close()
        out["consumed"] = sorted(got)
        offsets = admin.list_group_offsets({group: None})[group]
        out["committed"] = sum(o.offset for tp, o in offsets.items() if tp.topic == topic)
        admin.delete_topics([topic], timeout_ms=20000)
        out["deleted"] = True
    finally:
        admin.close()
    return out


def kcat_argv(c):
    argv = ["kcat", "-b", c["bootstrap.servers"]]
    for k, v in c.items():
        if k != "bootstrap.servers":
            argv += ["-X", f"{'sasl.mechanisms' if k == 'sasl.mechanism' else k}={v}"]
    return argv


def run_kcat(b, pki, security, topic, group):
    k = kcat_argv(conf(b, pki, security))
    records = "".join(f"k{i}:v{i}\n" for i in range(N)).encode()
    # No CreateTopics in kcat: the topic is created on first use (Metadata auto-creation,
    # allowed by the ACL's CREATE).
    subprocess.run(k + ["-P", "-t", topic, "-K", ":"], input=records, check=True, timeout=60)
    # A balanced (group) consumer; librdkafka commits its offsets when it closes.
    r = subprocess.run(k + ["-G", group, "-X", "auto.offset.reset=earliest", "-c", str(N),
                            "-q", "-f", "%s\\n", topic], capture_output=True, timeout=90)
    assert r.returncode == 0, r.stderr.decode()
    meta = json.loads(subprocess.run(k + ["-L", "-J", "-t", topic], capture_output=True,
                                      check=True, timeout=30).stdout)
    t = [t for t in meta["topics"] if t["topic"] == topic]
    admin = super_admin(b, pki)
    return {"consumed": sorted(r.stdout.decode().split()), "listed": bool(t),
            "partitions": len(t[0]["partitions"]) if t else 0, "members": None,
            "committed": committed_total(admin, group, topic), "log_end": None,
            "deleted": False}


def run_kafkajs(b, pki, security, topic, group):
    c = conf(b, pki, security)
    opts = {"brokers": [c["bootstrap.servers"]], "ca": c["ssl.ca.location"], "topic": topic,
            "group": group, "count": N, "partitions": 2}
    if security == "sasl_ssl":
        opts["sasl"] = {"mechanism": "scram-sha-512", "username": c["sasl.username"],
                        "password": c["sasl.password"]}
    else:
        opts.update(cert=c["ssl.certificate.location"], key=c["ssl.key.location"])
    env = dict(os.environ, KAFKAJS_NO_PARTITIONER_WARNING="1")
    r = subprocess.run(["node", str(E2E / "kafkajs_client.js"), json.dumps(opts)],
                       capture_output=True, text=True, timeout=120, env=env)
    lines = r.stdout.strip().splitlines()
    assert r.returncode == 0 and lines, f"kafkajs: {r.stdout}\n{r.stderr[-3000:]}"
    seen = json.loads(lines[-1])
    assert seen["created"] is True and seen["produce_errors"] == 0, seen
    assert seen["group"]["protocolType"] == "consumer", seen
    return {"consumed": seen["consumed"], "listed": seen["listed"],
            "partitions": seen["partitions"], "members": seen["group"]["members"],
            "committed": seen["committed"], "log_end": seen["log_end"], "deleted": True}


class Member:
    """A `gregor_member` process; its JSON lines collected by a thread."""

    def __init__(self, argv, stdin_text=None):
        self.proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
        self.events = []
        if stdin_text is not None:
            self.proc.stdin.write(stdin_text)
            self.proc.stdin.close()
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self):
        for line in self.proc.stdout:
            self.events.append(json.loads(line))

    def of(self, kind):
        return [e for e in list(self.events) if e["event"] == kind]

    def finish(self, timeout=60):
        if not self.proc.stdin.closed:
            self.proc.stdin.close()
        rc = self.proc.wait(timeout)
        self.reader.join(5)
        assert rc == 0, f"gregor_member exited {rc}: {self.events[-3:]}\n{self.proc.stderr.read()}"


def member_bin():
    path = os.environ.get("GREGOR_MEMBER_BIN") or str(E2E.parent / "target" / "debug" /
                                                      "examples" / "gregor_member")
    path = os.path.abspath(path)
    if not os.access(path, os.X_OK):
        pytest.fail(f"gregor_member not found at {path}: run `cargo build -p gregor-client "
                    "--examples` or set GREGOR_MEMBER_BIN", pytrace=False)
    return path


def gregor(bootstrap, props, *args):
    r = subprocess.run([gregor_bin(), *args, "--bootstrap-server", bootstrap,
                        "--command-config", str(props)], capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, f"gregor {' '.join(args)}: {r.stderr}"
    return r.stdout


def group_rows(text, group):
    """`gregor groups --describe` offset rows: {(topic, partition): (current, log_end)}."""
    rows = {}
    for line in text.splitlines():
        f = line.split()
        if len(f) >= 5 and f[0] == group and f[2].isdigit():
            rows[(f[1], int(f[2]))] = (f[3], f[4])
    return rows


def run_gregor(b, pki, security, topic, group):
    c = conf(b, pki, security)
    props = properties_file(pki["dir"] / f"gregor-{security}-{topic}.properties", c)
    boot = c["bootstrap.servers"]
    gregor(boot, props, "topics", "--create", "--topic", topic, "--partitions", "2")
    out = {"listed": topic in gregor(boot, props, "topics", "--list").split()}
    described = gregor(boot, props, "topics", "--describe", "--topic", topic)
    out["partitions"] = sum(1 for l in described.splitlines() if "Partition:" in l)
    member = [member_bin(), "--bootstrap", boot, "--command-config", str(props), "--topic", topic]
    producer = Member(member + ["--mode", "produce"],
                      "".join(f"k{i}\tv{i}\n" for i in range(N)))
    producer.finish()
    assert len(producer.of("produced")) == N, producer.events
    consumer = Member(member + ["--mode", "consume", "--group", group, "--name", "gregor-sc"])
    try:
        wait_until(lambda: len(consumer.of("record")) >= N, 40, f"{N} records (gregor_member)")
        members = gregor(boot, props, "groups", "--describe", "--group", group, "--members")
        out["members"] = sum(1 for l in members.splitlines() if l.startswith(group + " "))
    finally:
        consumer.finish()
    out["consumed"] = sorted(e["value"] for e in consumer.of("record"))
    rows = group_rows(gregor(boot, props, "groups", "--describe", "--group", group), group)
    out["committed"] = sum(int(cur) for (t, _), (cur, _) in rows.items() if t == topic)
    out["log_end"] = sum(int(end) for (t, _), (_, end) in rows.items() if t == topic)
    gregor(boot, props, "topics", "--delete", "--topic", topic)
    out["deleted"] = True
    return out


RUNNERS = {"kcat": run_kcat, "confluent": run_confluent, "kafka-python": run_kafka_python,
           "kafkajs": run_kafkajs, "gregor": run_gregor}


@pytest.mark.timeout(180)
@pytest.mark.parametrize("security", SECURITY)
@pytest.mark.parametrize("client", CLIENTS)
def test_client_produces_consumes_in_a_group_and_runs_admin_calls(secure_broker, pki, client,
                                                                  security):
    b = secure_broker
    slug = f"{client}-{security}".replace("_", "-")
    topic, group = f"sc-{slug}", f"sc-group-{slug}"
    seen = RUNNERS[client](b, pki, security, topic, group)

    assert seen["consumed"] == expected_values(), seen
    assert seen["listed"], seen
    assert seen["partitions"] == (1 if client == "kcat" else 2), seen
    if seen["members"] is not None:
        assert seen["members"] == 1, seen
    assert seen["committed"] == N, seen
    if seen["log_end"] is not None:
        assert seen["log_end"] == N, seen
    admin = super_admin(b, pki)
    if seen["deleted"]:
        wait_until(lambda: topic not in admin.list_topics(timeout=10).topics, 15,
                   f"{topic} gone after the client deleted it")
    # The group is known to the broker and empty once the client left.
    g = admin.describe_consumer_groups([group])[group].result(timeout=20)
    assert not g.members, g
    # The login went through the mapping the ACLs name: no request was refused.
    assert "SASL authentication failed" not in broker_log(b.log_path)


def test_other_principals_are_refused(secure_broker, pki, tmp_path):
    """User:eve (a good SCRAM login) and User:CN=mallory,O=Acme (a certificate of the trusted
    CA) authenticate but have no ACL: CreateTopics, Produce and the group are refused with
    Kafka's codes, and Metadata does not list the topic alice made."""
    b = secure_broker
    alice = AdminClient(conf(b, pki, "sasl_ssl"))
    alice.create_topics([NewTopic("sc-alices", 1, 1)])["sc-alices"].result(timeout=20)
    for c in [conf(b, pki, "sasl_ssl", user="eve"), conf(b, pki, "mtls", cert="mallory")]:
        admin = AdminClient(c)
        assert "sc-alices" not in admin.list_topics(timeout=10).topics
        with pytest.raises(KafkaException) as e:
            admin.create_topics([NewTopic("sc-eves", 1, 1)])["sc-eves"].result(timeout=20)
        assert e.value.args[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, e.value
        errors = []
        p = Producer(dict(c, **{"message.timeout.ms": 5000}))
        p.produce("sc-alices", b"x", on_delivery=lambda err, _m: errors.append(err))
        p.flush(15)
        assert errors and errors[0] is not None, errors
        assert errors[0].code() == KafkaError.TOPIC_AUTHORIZATION_FAILED, errors
        consumer = Consumer(dict(c, **{"group.id": "sc-eves-group"}))
        try:
            consumer.subscribe(["sc-alices"])
            seen = []

            def refused():
                m = consumer.poll(0.5)
                if m is not None and m.error() is not None:
                    seen.append(m.error().code())
                return [code for code in seen if code in (
                    KafkaError.GROUP_AUTHORIZATION_FAILED, KafkaError.TOPIC_AUTHORIZATION_FAILED)]

            wait_until(refused, 20, f"an authorization error for the consumer (saw {seen})")
        finally:
            consumer.close()
    # Bob (with the ACL) still writes to the same topic.
    p = Producer(dict(conf(b, pki, "mtls"), **{"message.timeout.ms": 10000}))
    p.produce("sc-alices", b"bob's record")
    assert p.flush(15) == 0
    del p  # closed before the broker stops
