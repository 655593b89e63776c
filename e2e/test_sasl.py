"""SASL on real broker processes, configured as Kafka users configure it.

A broker with PLAINTEXT, SASL_PLAINTEXT (PLAIN from a per-listener JAAS line, and SCRAM-SHA-512)
and SASL_SSL (SCRAM-SHA-512 and SCRAM-SHA-256) listeners, and a SCRAM-SHA-512 admin made with
`gregor storage format --add-scram`: kcat, confluent-kafka and kafka-python produce, consume in a
group and list topics with SCRAM-SHA-512 over SASL_SSL and with PLAIN over SASL_PLAINTEXT; gregor's
admin commands log in from `--command-config`; a wrong password, an unknown mechanism, a request
before authentication and a truncated SaslAuthenticate frame each get a clean refusal while the
broker keeps serving other clients; a SCRAM user made with `gregor configs --entity-type users`
logs in on another node of a three-node cluster; two brokers replicate over SASL_SSL with
SCRAM; no password reaches a broker's log (at debug level)."""

import functools
import socket
import struct
import subprocess
import time

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient
from kafka import KafkaAdminClient, KafkaConsumer, KafkaProducer

import kwire
from clients import round_trip
from conftest import ListenersBroker, gregor_bin, wait_until
from pki import Ca

CLUSTER_ID = "gregorTestClusterId000"
ADMIN_PW = "admin-Scram-Secret-9"
ALICE_PW = "alice-Plain-Secret-7"
CAROL_PW = "carol-Scram-Secret-3"
BROKER_PW = "broker-Scram-Secret-5"
WRONG_PW = "not-the-Password-1"
SECRETS = [ADMIN_PW, ALICE_PW, CAROL_PW, BROKER_PW, WRONG_PW]
PLAIN_JAAS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
              f'user_alice="{ALICE_PW}";')
SASL_HANDSHAKE, SASL_AUTHENTICATE = 17, 36
UNSUPPORTED_SASL_MECHANISM, SASL_AUTHENTICATION_FAILED = 33, 58


def scram_jaas(user, password):
    return ("org.apache.kafka.common.security.scram.ScramLoginModule required "
            f'username="{user}" password="{password}";')


def format_with_scram(data_dir, node_id, props_dir, extra="", standalone=True, users=()):
    """`gregor storage format --add-scram` for each (user, password), SCRAM-SHA-512."""
    props = props_dir / f"format-{node_id}.properties"
    props.write_text(f"node.id={node_id}\nlog.dirs={data_dir}\n{extra}")
    argv = [gregor_bin(), "storage", "format", "-c", str(props), "-t", CLUSTER_ID]
    if standalone:
        argv.append("--standalone")
    for user, password in users:
        argv += ["--add-scram", f"SCRAM-SHA-512=[name={user},password={password}]"]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def broker_log(path):
    """A node's log without the harness's own lines (the command lines it started the node
    with, which carry the JAAS settings)."""
    lines = path.read_text(errors="replace").splitlines()
    return "\n".join(l for l in lines if not l.startswith("===== start"))



SaslBroker = functools.partial(ListenersBroker, extra=("SASL_PLAINTEXT", "SASL_SSL"), name="sasl")


@pytest.fixture
def pki(tmp_path):
    ca = Ca(tmp_path, "sasl-ca")
    crt, key = ca.issue("broker", "localhost")
    keystore = tmp_path / "broker-keystore.pem"
    keystore.write_bytes(key.read_bytes() + crt.read_bytes())
    return {"dir": tmp_path, "ca": ca.pem, "keystore": keystore}


def sasl_settings(pki):
    return {
        "listener.name.sasl_plaintext.sasl.enabled.mechanisms": "PLAIN,SCRAM-SHA-512",
        "listener.name.sasl_plaintext.plain.sasl.jaas.config": PLAIN_JAAS,
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512,SCRAM-SHA-256",
        "ssl.keystore.location": str(pki["keystore"]),
        "ssl.truststore.location": str(pki["ca"]),
    }


@pytest.fixture
def sasl_broker(pki, monkeypatch):
    # Debug logging: a password that reached any log line would show.
    monkeypatch.setenv("RUST_LOG", "debug")
    b = SaslBroker(pki["dir"], sasl_settings(pki))
    format_with_scram(b.data_dir, b.node_id, pki["dir"], users=[("admin", ADMIN_PW)])
    b.start()
    yield b
    assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"
    log = broker_log(b.log_path)
    assert not [s for s in SECRETS if s in log], "a password reached the broker's log"


def scram_conf(b, pki, user="admin", password=ADMIN_PW):
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_ssl_port}", "security.protocol": "SASL_SSL",
            "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": user, "sasl.password": password,
            "ssl.ca.location": str(pki["ca"])}


def plain_conf(b, password=ALICE_PW):
    return {"bootstrap.servers": f"127.0.0.1:{b.sasl_port}", "security.protocol": "SASL_PLAINTEXT",
            "sasl.mechanism": "PLAIN", "sasl.username": "alice", "sasl.password": password}



def kafka_python_conf(conf):
    out = {"bootstrap_servers": conf["bootstrap.servers"],
           "security_protocol": conf["security.protocol"],
           "sasl_mechanism": conf["sasl.mechanism"],
           "sasl_plain_username": conf["sasl.username"],
           "sasl_plain_password": conf["sasl.password"]}
    if "ssl.ca.location" in conf:
        out.update(ssl_cafile=conf["ssl.ca.location"], ssl_check_hostname=True)
    return out


def kafka_python_round_trip(conf, topic, n=5):
    kp = kafka_python_conf(conf)
    p = KafkaProducer(**kp)
    for i in range(n):
        p.send(topic, f"k{i}".encode())
    p.flush(20)
    p.close()
    c = KafkaConsumer(topic, group_id=f"kp-{topic}", auto_offset_reset="earliest",
                      consumer_timeout_ms=1000, **kp)
    got = []

    def read_all():
        got.extend(m.value.decode() for m in c)
        return len(got) >= n

    try:
        wait_until(read_all, 30, f"{n} records back from {topic} (kafka-python)")
    finally:
        c.close()
    admin = KafkaAdminClient(**kp)
    try:
        topics = admin.list_topics()
    finally:
        admin.close()
    return got, topics


def kcat(conf):
    mechanism = conf["sasl.mechanism"]
    argv = ["kcat", "-b", conf["bootstrap.servers"], "-X", f"security.protocol={conf['security.protocol']}",
            "-X", f"sasl.mechanisms={mechanism}", "-X", f"sasl.username={conf['sasl.username']}",
            "-X", f"sasl.password={conf['sasl.password']}"]
    if "ssl.ca.location" in conf:
        argv += ["-X", f"ssl.ca.location={conf['ssl.ca.location']}"]
    return argv


@pytest.mark.timeout(180)
def test_clients_use_scram_over_sasl_ssl_and_plain_over_sasl_plaintext(sasl_broker, pki):
    b = sasl_broker
    for conf, topic in [(scram_conf(b, pki), "scram-topic"), (plain_conf(b), "plain-topic")]:
        assert round_trip(conf, topic) == [f"v{i}" for i in range(5)]
        listed = AdminClient(conf).list_topics(timeout=10)
        assert topic in listed.topics
        # Each SASL listener advertises itself.
        port = int(conf["bootstrap.servers"].rsplit(":", 1)[1])
        assert [m.port for m in listed.brokers.values()] == [port]

        k = kcat(conf)
        subprocess.run(k + ["-P", "-t", f"kcat-{topic}"], input=b"a\nb\nc\n", check=True,
                       timeout=30)
        out = subprocess.run(k + ["-C", "-t", f"kcat-{topic}", "-o", "beginning", "-e", "-q"],
                             capture_output=True, check=True, timeout=30).stdout.decode().split()
        assert out == ["a", "b", "c"]
        meta = subprocess.run(k + ["-L"], capture_output=True, check=True, timeout=30)
        assert f"kcat-{topic}" in meta.stdout.decode()

        got, topics = kafka_python_round_trip(conf, f"kp-{topic}")
        assert got == [f"k{i}" for i in range(5)]
        assert f"kp-{topic}" in topics and topic in topics
    # No login failed.
    assert "SASL authentication failed" not in broker_log(b.log_path)


def test_gregor_admin_commands_log_in_from_command_config(sasl_broker, pki):
    b = sasl_broker
    d = pki["dir"]
    scram = d / "scram.properties"
    scram.write_text(f"security.protocol=SASL_SSL\nssl.ca.location={pki['ca']}\n"
                     f"sasl.mechanism=SCRAM-SHA-512\nsasl.username=admin\nsasl.password={ADMIN_PW}\n")
    java_plain = d / "plain.properties"
    java_plain.write_text("security.protocol=SASL_PLAINTEXT\nsasl.mechanism=PLAIN\n"
                          f"sasl.jaas.config={PLAIN_JAAS[:-1]} username=\"alice\" "
                          f"password=\"{ALICE_PW}\";\n")
    topics = [gregor_bin(), "topics", "--bootstrap-server"]
    r = subprocess.run(topics + [f"localhost:{b.sasl_ssl_port}", "--command-config", str(scram),
                                 "--create", "--topic", "over-sasl", "--partitions", "2"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    r = subprocess.run(topics + [f"127.0.0.1:{b.sasl_port}", "--command-config", str(java_plain),
                                 "--list"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0 and "over-sasl" in r.stdout.split(), r.stderr
    # A wrong password is reported at once, not retried until the timeout.
    wrong = d / "wrong.properties"
    wrong.write_text(scram.read_text().replace(ADMIN_PW, WRONG_PW))
    t0 = time.monotonic()
    r = subprocess.run(topics + [f"localhost:{b.sasl_ssl_port}", "--command-config", str(wrong),
                                 "--list", "--timeout-ms", "30000"],
                       capture_output=True, text=True, timeout=60)
    elapsed = time.monotonic() - t0
    assert r.returncode != 0, r.stdout
    assert "SASL authentication failed" in r.stderr and "invalid credentials" in r.stderr, r.stderr
    assert elapsed < 20, f"took {elapsed:.1f}s"
    assert WRONG_PW not in r.stderr + r.stdout


# Raw SASL requests (kwire), to see the broker's exact answers.

def handshake(conn, mechanism):
    """SaslHandshake v1: (error_code, [mechanisms])."""
    r = conn.request(SASL_HANDSHAKE, 1, kwire.W().string(mechanism).done())
    return r.i16(), r.array(lambda m: m.string())


def authenticate_v1(conn, token):
    """SaslAuthenticate v1: (error_code, error_message, session_lifetime_ms)."""
    r = conn.request(SASL_AUTHENTICATE, 1, kwire.W().bytes_(token).done())
    code, message = r.i16(), r.string()
    r.bytes_()
    return code, message, r.i64()


def plain_token(user, password):
    return b"\0" + user.encode() + b"\0" + password.encode()


def still_serves(b):
    """The broker answers a good PLAIN login and a PLAINTEXT Metadata request."""
    with kwire.Conn("127.0.0.1", b.sasl_port) as c:
        assert handshake(c, "PLAIN")[0] == 0
        assert authenticate_v1(c, plain_token("alice", ALICE_PW))[0] == 0
        assert kwire.metadata_v1_brokers(c)[0][0] == b.node_id
    with kwire.Conn("127.0.0.1", b.port) as c:
        assert kwire.metadata_v1_brokers(c)[0][0] == b.node_id


def test_refusals_are_clean_and_the_broker_keeps_serving(sasl_broker, pki):
    b = sasl_broker
    # A wrong password: Kafka's code and message, after connection.failed.authentication.delay.ms.
    with kwire.Conn("127.0.0.1", b.sasl_port) as c:
        assert handshake(c, "PLAIN") == (0, ["PLAIN", "SCRAM-SHA-512"])
        t0 = time.monotonic()
        code, message, _ = authenticate_v1(c, plain_token("alice", WRONG_PW))
        waited = time.monotonic() - t0
        assert (code, message) == (SASL_AUTHENTICATION_FAILED,
                                   "Authentication failed: Invalid username or password")
        assert waited >= 0.09, f"answered after {waited:.3f}s"
        assert c.closed_within(5)
    still_serves(b)
    with pytest.raises(KafkaException):
        AdminClient(scram_conf(b, pki, password=WRONG_PW)).list_topics(timeout=5)
    still_serves(b)
    # An unknown mechanism: UNSUPPORTED_SASL_MECHANISM with the listener's list, then the close;
    # on the TLS listener, a client asking for a mechanism it does not enable is refused too.
    with kwire.Conn("127.0.0.1", b.sasl_port) as c:
        assert handshake(c, "GSSAPI") == (UNSUPPORTED_SASL_MECHANISM, ["PLAIN", "SCRAM-SHA-512"])
        assert c.closed_within(5)
    bad_mechanism = dict(scram_conf(b, pki), **{"sasl.mechanism": "PLAIN"})
    with pytest.raises(KafkaException):
        AdminClient(bad_mechanism).list_topics(timeout=5)
    still_serves(b)
    # A request before authentication is not answered: the connection closes.
    with kwire.Conn("127.0.0.1", b.sasl_port) as c:
        with pytest.raises(kwire.Closed):
            kwire.metadata_v1_brokers(c)
    still_serves(b)
    # A truncated SaslAuthenticate: its token claims 200 bytes and carries 6.
    with kwire.Conn("127.0.0.1", b.sasl_port) as c:
        assert handshake(c, "PLAIN")[0] == 0
        header = kwire.request_header(SASL_AUTHENTICATE, 1, 99)
        c.send_frame(header + struct.pack(">i", 200) + b"\0alice")
        assert c.closed_within(5)
    # And a frame cut short by the client hanging up mid-frame.
    with socket.create_connection(("127.0.0.1", b.sasl_port), timeout=5) as s:
        s.sendall(struct.pack(">i", 64) + kwire.request_header(SASL_AUTHENTICATE, 1, 1)[:6])
        s.shutdown(socket.SHUT_WR)
        assert s.recv(100) == b""
    still_serves(b)
    assert "SASL authentication failed" in broker_log(b.log_path)


def test_reauthentication_renews_the_session_and_keeps_the_mechanism(pki):
    """connections.max.reauth.ms: SaslAuthenticate v1 tells the client its session's lifetime,
    and the client re-authenticates on the same connection (KIP-368) with the same mechanism.
    (Expiry itself is the state machine's unit tests', with the clock injected.)"""
    settings = sasl_settings(pki)
    settings["connections.max.reauth.ms"] = "600000"
    b = SaslBroker(pki["dir"], settings)
    b.start()
    try:
        with kwire.Conn("127.0.0.1", b.sasl_port) as c:
            for _ in range(2):
                assert handshake(c, "PLAIN")[0] == 0
                code, _, lifetime = authenticate_v1(c, plain_token("alice", ALICE_PW))
                assert (code, lifetime) == (0, 600000)
                assert kwire.metadata_v1_brokers(c)[0][0] == b.node_id
            # Switching mechanisms in a re-authentication is refused.
            assert handshake(c, "SCRAM-SHA-512") == (UNSUPPORTED_SASL_MECHANISM, ["PLAIN"])
            assert c.closed_within(5)
    finally:
        assert b.stop() == 0


def sasl_nodes(cluster, listener):
    """Gives every node of `cluster` a `listener` listener on a port of its own."""
    from cluster import Node

    class SaslNode(Node):
        def argv(self):
            argv = super().argv()
            i = argv.index("--listeners") + 1
            argv[i] += f",{listener}://127.0.0.1:{self.sasl_port}"
            return argv

    for node in cluster.nodes.values():
        node.__class__ = SaslNode
        node.sasl_port = cluster.fresh_port()


def format_cluster(cluster, users):
    """Formats every node alike with SCRAM-SHA-512 `users` (KIP-900)."""
    for node in cluster.nodes.values():
        argv = node.argv()
        voters = argv[argv.index("--controller-quorum-voters") + 1]
        extra = (f"process.roles={node.roles}\ncontroller.quorum.voters={voters}\n"
                 f"listeners=PLAINTEXT://127.0.0.1:{node.port},"
                 f"CONTROLLER://127.0.0.1:{node.controller_port}\n")
        format_with_scram(node.data_dir, node.node_id, cluster.workdir, extra=extra,
                          standalone=False, users=users)


@pytest.mark.timeout(180)
def test_a_user_made_with_gregor_configs_logs_in_on_another_node(tmp_path):
    from cluster import Cluster

    c = Cluster(tmp_path, 3, overrides={"sasl.enabled.mechanisms": "SCRAM-SHA-512"})
    sasl_nodes(c, "SASL_PLAINTEXT")
    try:
        c.start()
        n0, n1, n2 = c.nodes[0], c.nodes[1], c.nodes[2]
        r = subprocess.run([gregor_bin(), "configs", "--bootstrap-server", n0.bootstrap,
                            "--entity-type", "users", "--entity-name", "carol", "--alter",
                            "--add-config", f"SCRAM-SHA-512=[iterations=8192,password={CAROL_PW}]"],
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr

        def conf(node, password):
            return {"bootstrap.servers": f"127.0.0.1:{node.sasl_port}",
                    "security.protocol": "SASL_PLAINTEXT", "sasl.mechanism": "SCRAM-SHA-512",
                    "sasl.username": "carol", "sasl.password": password}

        def logs_in(node, password):
            try:
                AdminClient(conf(node, password)).list_topics(timeout=3)
                return True
            except KafkaException:
                return False

        wait_until(lambda: logs_in(n1, CAROL_PW), 30, "carol to log in on node 1")
        assert round_trip(conf(n1, CAROL_PW), "carols-topic", n=3) == ["v0", "v1", "v2"]
        assert not logs_in(n2, WRONG_PW)
        for node in c.nodes.values():
            log = broker_log(node.log_path)
            assert CAROL_PW not in log and WRONG_PW not in log, f"node {node.node_id} logged a password"
    finally:
        problems = c.stop()
    assert not problems, problems


@pytest.mark.timeout(180)
def test_replication_over_sasl_ssl_with_scram(pki):
    """Two nodes replicate over their SASL_SSL listener, each logging in to the other as
    User:broker with SCRAM-SHA-512 (its credential from `storage format --add-scram`): an
    acks=all produce with min.insync.replicas=2 completes only once the follower fetched."""
    from cluster import Cluster

    c = Cluster(pki["dir"], 2, overrides={
        "inter.broker.listener.name": "SASL_SSL",
        "sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas("broker", BROKER_PW),
        "ssl.keystore.location": str(pki["keystore"]),
        "ssl.truststore.location": str(pki["ca"]),
    })
    sasl_nodes(c, "SASL_SSL")
    format_cluster(c, [("broker", BROKER_PW), ("admin", ADMIN_PW)])
    try:
        c.start()
        n0 = c.nodes[0]
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            err, msg = kwire.create_topic(conn, "replicated-sasl", 1, 2,
                                          configs={"min.insync.replicas": "2"})
        assert err == 0, msg
        conf = {"bootstrap.servers": f"127.0.0.1:{n0.sasl_port}", "security.protocol": "SASL_SSL",
                "sasl.mechanism": "SCRAM-SHA-512", "sasl.username": "admin",
                "sasl.password": ADMIN_PW, "ssl.ca.location": str(pki["ca"]),
                "acks": "all", "message.timeout.ms": 20000}
        p = Producer(conf)
        for i in range(20):
            p.produce("replicated-sasl", f"r{i}".encode())
        assert p.flush(30) == 0, "acks=all with min.insync.replicas=2: the follower fetched"
        del p  # closed before the nodes stop
        _, partitions = n0.metadata(["replicated-sasl"])["topics"]["replicated-sasl"]
        assert sorted(partitions[0][3]) == [0, 1], partitions
        for node in c.nodes.values():
            log = broker_log(node.log_path)
            assert BROKER_PW not in log and ADMIN_PW not in log, f"node {node.node_id}"
    finally:
        problems = c.stop()
    assert not problems, problems


def test_sasl_settings_that_cannot_work_stop_start_up(pki):
    for overrides, named in [
        ({"listener.name.sasl_ssl.sasl.enabled.mechanisms": "GSSAPI"}, "GSSAPI is not supported"),
        ({"listener.name.sasl_plaintext.sasl.enabled.mechanisms": "OAUTHBEARER"}, "OAUTHBEARER"),
        ({"listener.name.sasl_plaintext.plain.sasl.jaas.config":
          "org.apache.kafka.common.security.plain.PlainLoginModule required "
          f'username="x" password="{ALICE_PW}";'}, "no user_"),
    ]:
        settings = sasl_settings(pki)
        settings.update(overrides)
        b = SaslBroker(pki["dir"], settings)
        r = subprocess.run(b.argv(), capture_output=True, timeout=30)
        assert r.returncode != 0, f"{overrides} started"
        err = r.stderr.decode()
        assert named in err and ALICE_PW not in err, err
