"""Certificates rotate without a restart (Kafka's dynamic SSL update): a broker with a PLAINTEXT
and an SSL listener serving certificate A (`pki.py`); IncrementalAlterConfigs of
`listener.name.ssl.ssl.keystore.location` on the broker's own resource, through `gregor configs`
and confluent-kafka's `incremental_alter_configs`, makes new TLS connections see the new
certificate (Python `ssl`, `getpeercert(binary_form=True)`) while a connection opened before
still produces and fetches; the file overwritten at the same path and the same value set again
is read again; a key store that is garbage, whose key is not its certificate's, or whose
certificate has another subject is refused with INVALID_CONFIG and the served certificate
stays; the key's password is a secret in DescribeConfigs and the log; a restart serves the
latest certificate (the change is in the metadata log). On three nodes, node 1's listener is
changed with `gregor configs --bootstrap-server <node 0>` (the tool sends a broker's resource
to that broker, as Kafka's admin client does), and a raw request for node 1's stores sent to
node 0 is refused with INVALID_REQUEST, as Kafka refuses it. On three nodes replicating and
running the quorum over mTLS, the cluster moves to a new CA by IncrementalAlterConfigs alone
(trust stores, then each node's key store on the inter-broker and controller listeners, then
the old CA out), and the nodes' new outgoing connections present the new certificates."""

import socket
import ssl
import subprocess

import pytest
from confluent_kafka import KafkaException
from confluent_kafka.admin import (AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource,
                                   ResourceType)
from cryptography import x509
from cryptography.hazmat.primitives import serialization

import kwire
from conftest import Broker, free_port, gregor_bin, wait_until
from pki import Ca

KEY = "listener.name.ssl.ssl.keystore.location"
PASSWORD_KEY = "listener.name.ssl.ssl.key.password"
INCREMENTAL_ALTER_CONFIGS = 44


class SslBroker(Broker):
    """A broker with a PLAINTEXT listener on `port` and an SSL one on `ssl_port`."""

    def __init__(self, workdir, overrides):
        super().__init__(workdir, name="reload", overrides=overrides)
        self.ssl_port = free_port()

    def argv(self):
        argv = super().argv()
        i = argv.index("--listeners") + 1
        argv[i] = f"PLAINTEXT://127.0.0.1:{self.port},SSL://127.0.0.1:{self.ssl_port}"
        return argv


class Keystores:
    """Key store files of one CA, all for CN=localhost (the names clients check)."""

    def __init__(self, tmp_path):
        self.ca = Ca(tmp_path, "reload-ca")
        self.dir = tmp_path

    def make(self, file, cn="localhost", password=None, key_of=None):
        """Writes `file`-keystore.pem (key, then certificate); returns (path, certificate DER).
        `key_of`: another store's name whose key to put in (a key that is not the
        certificate's); `password`: the key encrypted with it (PKCS#8)."""
        crt, key = self.ca.issue(file, cn)
        if key_of:
            key = self.dir / f"{key_of}.key"
        key_pem = key.read_bytes()
        if password:
            k = serialization.load_pem_private_key(key_pem, None)
            key_pem = k.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                                      serialization.BestAvailableEncryption(password.encode()))
        path = self.dir / f"{file}-keystore.pem"
        path.write_bytes(key_pem + crt.read_bytes())
        return path, der(crt)


def der(crt):
    cert = x509.load_pem_x509_certificate(crt.read_bytes())
    return cert.public_bytes(serialization.Encoding.DER)


def tls_conn(port, ca):
    """A kwire connection over TLS (no client certificate), verifying `localhost`."""
    ctx = ssl.create_default_context(cafile=str(ca))
    raw = socket.create_connection(("127.0.0.1", port), timeout=15)
    conn = kwire.Conn.__new__(kwire.Conn)
    conn.sock = ctx.wrap_socket(raw, server_hostname="localhost")
    conn.correlation_id = 0
    return conn


def served(port, ca):
    """The certificate a new TLS connection is shown (DER)."""
    conn = tls_conn(port, ca)
    try:
        return conn.sock.getpeercert(binary_form=True)
    finally:
        conn.sock.close()


def configs_cli(bootstrap, node, *args):
    return subprocess.run([gregor_bin(), "configs", "--bootstrap-server", bootstrap,
                           "--entity-type", "brokers", "--entity-name", str(node), *args],
                          capture_output=True, text=True, timeout=60)


def set_with_cli(bootstrap, node, key, value):
    out = configs_cli(bootstrap, node, "--alter", "--add-config", f"{key}={value}")
    assert out.returncode == 0, out.stderr
    return out


def alter_raw(conn, node, key, value):
    """IncrementalAlterConfigs v0 SET of one key on broker `node`: (error code, message)."""
    body = kwire.W().array([None], lambda w, _: w.i8(4).string(str(node)).array(
        [None], lambda w, _: w.string(key).i8(0).string(value))).boolean(False).done()
    r = conn.request(INCREMENTAL_ALTER_CONFIGS, 0, body)
    r.i32()
    return r.array(lambda x: (x.i16(), x.string(), x.i8(), x.string()))[0][:2]


def alter_with_confluent(admin, node, entries):
    """IncrementalAlterConfigs through confluent-kafka; returns the error code (0 when done)."""
    resource = ConfigResource(ResourceType.BROKER, str(node), incremental_configs=[
        ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET) for k, v in entries])
    try:
        admin.incremental_alter_configs([resource])[resource].result(30)
        return 0
    except KafkaException as e:
        return e.args[0].code()


def produce_and_fetch(conn, topic, value):
    """Produce v3 then Fetch v4 of partition 0 over `conn`: whether `value` is read back."""
    batch = kwire.record_batch([(None, value)])
    r = conn.request(kwire.PRODUCE, 3, kwire.produce_body(3, topic, 0, batch, acks=1))
    assert kwire.parse_produce(r, 3)[0][2] == kwire.NONE
    r = conn.request(kwire.FETCH, 4, kwire.fetch_body(4, topic, 0))
    _, parts = kwire.parse_fetch(r, 4)
    assert parts[0][2] == kwire.NONE
    return value in parts[0][4]


@pytest.mark.timeout(150)
def test_a_listener_certificate_is_reloaded_by_incremental_alter_configs(tmp_path):
    ks = Keystores(tmp_path)
    ca = ks.ca.pem
    a, a_der = ks.make("a")
    broker = SslBroker(tmp_path, {"ssl.keystore.location": str(a)})
    broker.start()
    node = broker.node_id
    try:
        with kwire.Conn("127.0.0.1", broker.port, timeout=15) as c:
            assert kwire.create_topic(c, "t")[0] == kwire.NONE
        assert served(broker.ssl_port, ca) == a_der
        before = tls_conn(broker.ssl_port, ca)
        assert produce_and_fetch(before, "t", b"before")

        # B through the tool: new connections see B at once (the answer comes once applied).
        b, b_der = ks.make("b")
        set_with_cli(broker.bootstrap, node, KEY, b)
        assert served(broker.ssl_port, ca) == b_der
        # The connection opened before keeps its session, and works.
        assert before.sock.getpeercert(binary_form=True) == a_der
        assert produce_and_fetch(before, "t", b"after-b")

        # C written over B's file, and the same value set again: the file is read again.
        c_crt, c_key = ks.ca.issue("c", "localhost")
        b.write_bytes(c_key.read_bytes() + c_crt.read_bytes())
        set_with_cli(broker.bootstrap, node, KEY, b)
        assert served(broker.ssl_port, ca) == der(c_crt)

        # D through confluent-kafka, with an encrypted key and its password.
        admin = AdminClient({"bootstrap.servers": broker.bootstrap})
        d, d_der = ks.make("d", password="d-key-secret")
        assert alter_with_confluent(admin, node, [(KEY, str(d)),
                                                  (PASSWORD_KEY, "d-key-secret")]) == 0
        assert served(broker.ssl_port, ca) == d_der

        # Refused with INVALID_CONFIG, D still served: garbage, a key that is not the
        # certificate's, another subject, a wrong password, the setting without the listener.
        garbage = tmp_path / "garbage.pem"
        garbage.write_text("not a key store\n")
        # (Encrypted with D's password, which stays set.)
        mismatched, _ = ks.make("e", key_of="a", password="d-key-secret")
        renamed, _ = ks.make("f", cn="someone-else", password="d-key-secret")
        for entries in ([(KEY, str(garbage))], [(KEY, str(mismatched))], [(KEY, str(renamed))],
                        [(PASSWORD_KEY, "wrong")], [("ssl.keystore.location", str(b))]):
            assert alter_with_confluent(admin, node, entries) == kwire.INVALID_CONFIG, entries
            assert served(broker.ssl_port, ca) == d_der
        out = configs_cli(broker.bootstrap, node, "--alter", "--add-config", f"{KEY}={garbage}")
        assert out.returncode != 0 and KEY in out.stderr, out.stderr
        with kwire.Conn("127.0.0.1", broker.port, timeout=15) as c:
            code, message = alter_raw(c, node, KEY, str(renamed))
        assert code == kwire.INVALID_CONFIG and "ssl.allow.dn.changes" in message, message
        assert served(broker.ssl_port, ca) == d_der
        assert produce_and_fetch(before, "t", b"still")

        # DescribeConfigs lists the listener's settings; the password without its value.
        resource = ConfigResource(ResourceType.BROKER, str(node))
        described = admin.describe_configs([resource])[resource].result(30)
        assert described[KEY].value == str(d)
        assert described[PASSWORD_KEY].is_sensitive and described[PASSWORD_KEY].value is None
        before.sock.close()

        # A restart serves the latest certificate: the change is in the metadata log.
        broker.restart()
        assert served(broker.ssl_port, ca) == d_der
        assert "d-key-secret" not in broker.log_path.read_text()
    finally:
        rc = broker.stop()
    assert rc == 0, "broker did not exit 0 on SIGTERM"


@pytest.mark.timeout(150)
def test_node_1s_certificate_is_changed_through_node_0(tmp_path):
    from cluster import Cluster, Node

    ks = Keystores(tmp_path)
    ca = ks.ca.pem
    a, a_der = ks.make("a")

    class SslNode(Node):
        def argv(self):
            argv = super().argv()
            i = argv.index("--listeners") + 1
            argv[i] += f",SSL://127.0.0.1:{self.ssl_port}"
            return argv

    c = Cluster(tmp_path, 3, overrides={"ssl.keystore.location": str(a)})
    for n in c.nodes.values():
        n.__class__ = SslNode
        n.ssl_port = c.fresh_port()
    try:
        c.start()
        n0, n1 = c.nodes[0], c.nodes[1]
        b, b_der = ks.make("b")
        # Sent to node 0, a request for node 1's stores is refused: node 1 reads them.
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            code, message = alter_raw(conn, 1, KEY, str(b))
        assert code == kwire.INVALID_REQUEST, message
        assert served(n1.ssl_port, ca) == a_der
        # The tool, bootstrapped on node 0, sends node 1's resource to node 1.
        set_with_cli(n0.bootstrap, 1, KEY, b)
        # Node 1 answered once its image had the change, forwarding to whichever node is the
        # active controller; the wait only covers a slow apply.
        wait_until(lambda: served(n1.ssl_port, ca) == b_der, 10, "node 1 to serve B")
        assert served(n0.ssl_port, ca) == a_der
        assert served(c.nodes[2].ssl_port, ca) == a_der
    finally:
        problems = c.stop()
    assert not problems, problems


# --- Every link: the node's own certificate as a client, and the controller listener. ---

SSL_KEYS = ("listener.name.ssl.ssl.{}", "listener.name.controller.ssl.{}")
SUBJECT = ("gregor-node", "Gregor")


class RotatingNode:
    """Mixin for cluster nodes: an SSL listener besides PLAINTEXT and CONTROLLER, and the node's
    own static key and trust store files (`keystore`, `truststore`)."""

    def argv(self):
        argv = super().argv()
        i = argv.index("--listeners") + 1
        argv[i] += f",SSL://127.0.0.1:{self.ssl_port}"
        return argv + ["--override", f"ssl.keystore.location={self.keystore}",
                       "--override", f"ssl.truststore.location={self.truststore}"]


def node_keystore(ca, name):
    """A key store of `ca` with the nodes' subject (the same whatever the CA, as a rotation
    without ssl.allow.dn.changes needs) and `localhost` / 127.0.0.1; returns (path, crt, key)."""
    crt, key = ca.issue(name, *SUBJECT)
    path = ca.dir / f"{name}-keystore.pem"
    path.write_bytes(key.read_bytes() + crt.read_bytes())
    return path, crt, key


def mtls_probe(port, ca, cert, kafka):
    """A new connection to `port` presenting `cert` (crt, key) and checking the server against
    `ca`, then one exchange (an ApiVersions on a Kafka listener; on the controller listener an
    empty frame, which it closes): the server's certificate (DER). A refused certificate raises
    (an alert: ssl.SSLError; with TLS 1.3 it shows on the first read)."""
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    raw = socket.create_connection(("127.0.0.1", port), timeout=10)
    sock = ctx.wrap_socket(raw, server_hostname="127.0.0.1")
    try:
        served = sock.getpeercert(binary_form=True)
        if kafka:
            conn = kwire.Conn.__new__(kwire.Conn)
            conn.sock, conn.correlation_id = sock, 0
            kwire.api_versions(conn)
        else:
            sock.sendall(b"\x00\x00\x00\x00")
            if sock.recv(1) != b"":
                raise AssertionError("the controller answered an empty frame")
        return served
    finally:
        sock.close()


def refused(port, ca, cert, kafka):
    try:
        mtls_probe(port, ca, cert, kafka)
    except (OSError, kwire.Closed):  # ssl.SSLError is an OSError
        return True
    return False


def set_stores(node, entries):
    """IncrementalAlterConfigs on `node`'s own resource, through confluent-kafka bootstrapped on
    it; fails the test unless accepted."""
    admin = AdminClient({"bootstrap.servers": node.bootstrap})
    code = alter_with_confluent(admin, node.node_id, entries)
    assert code == 0, f"node {node.node_id}: {entries}: error {code}"


def on_both_listeners(setting, value):
    return [(k.format(setting), str(value)) for k in SSL_KEYS]


def isr_full(nodes, topic, partitions):
    def full():
        for n in nodes:
            parts = n.metadata([topic])["topics"][topic][1]
            for p in range(partitions):
                if p not in parts or sorted(parts[p][3]) != sorted(x.node_id for x in nodes):
                    return False
        return True

    wait_until(full, 40, f"every ISR of {topic} to hold every node")


def produce_all(nodes, topic, partitions, tag):
    from confluent_kafka import Producer

    p = Producer({"bootstrap.servers": ",".join(n.bootstrap for n in nodes), "acks": "all",
                  "enable.idempotence": True, "message.timeout.ms": 40000,
                  "topic.metadata.refresh.interval.ms": 1000})
    failures = []
    for part in range(partitions):
        p.produce(topic, f"{tag}-{part}".encode(), partition=part,
                  on_delivery=lambda err, msg: err and failures.append(err))
    assert p.flush(45) == 0, f"{tag}: records not delivered"
    assert not failures, failures


@pytest.mark.timeout(300)
def test_a_node_rotates_to_a_new_ca_on_replication_and_the_controller_quorum(tmp_path):
    """Three nodes replicating over SSL and running the quorum over SSL, both with
    ssl.client.auth=required. Trust stores first take the new CA beside the old (on both
    listeners, every node), then each node's key store moves to a certificate of the new CA
    (node 1 first, with the others still on the old), then the old CA leaves every trust store.
    Replication (acks=all, full ISRs) works at each step over the connections already open. Then
    the old CA is refused everywhere, node 2 is SIGKILLed and restarted on files of the new CA
    (trusting only it), and it rejoins: nodes 0 and 1 open new connections to it, as followers
    after it leads again and as controllers, which it accepts only with the new certificates
    they were given by IncrementalAlterConfigs."""
    from cluster import Cluster, Node

    old_ca, new_ca = Ca(tmp_path, "old-ca"), Ca(tmp_path, "new-ca")
    both = tmp_path / "both-cas.pem"
    both.write_bytes(old_ca.pem.read_bytes() + new_ca.pem.read_bytes())
    old_client = old_ca.issue("old-client", *SUBJECT)
    new_client = new_ca.issue("new-client", *SUBJECT)

    class Rotating(RotatingNode, Node):
        pass

    c = Cluster(tmp_path, 3, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,SSL:SSL,CONTROLLER:SSL",
        "inter.broker.listener.name": "SSL",
        "ssl.client.auth": "required",
    })
    for n in c.nodes.values():
        n.__class__ = Rotating
        n.ssl_port = c.fresh_port()
        n.keystore = tmp_path / f"node{n.node_id}-static-keystore.pem"
        n.keystore.write_bytes(node_keystore(old_ca, f"node{n.node_id}-old")[0].read_bytes())
        n.truststore = tmp_path / f"node{n.node_id}-static-truststore.pem"
        n.truststore.write_bytes(old_ca.pem.read_bytes())
    nodes = [c.nodes[i] for i in range(3)]
    topic, partitions = "rotated", 3
    try:
        c.start()
        # Partition p is led by node p (its first replica).
        with kwire.Conn("127.0.0.1", nodes[0].port, timeout=35) as conn:
            err, msg = kwire.create_topic(conn, topic, -1, -1, assignments=list(enumerate(
                [[0, 1, 2], [1, 2, 0], [2, 0, 1]])))
        assert err == 0, msg
        isr_full(nodes, topic, partitions)
        produce_all(nodes, topic, partitions, "old")

        # 1. Every node trusts both CAs, as a server and as a client.
        for n in nodes:
            set_stores(n, on_both_listeners("truststore.location", both))
        # 2. Each node in turn, node 1 first, presents a certificate of the new CA on both
        # listeners and to its peers; the others still present the old CA's.
        new_stores = {}
        for n in [nodes[1], nodes[0], nodes[2]]:
            new_stores[n.node_id] = node_keystore(new_ca, f"node{n.node_id}-new")
            set_stores(n, on_both_listeners("keystore.location", new_stores[n.node_id][0]))
            for port, kafka in ((n.ssl_port, True), (n.controller_port, False)):
                served = mtls_probe(port, new_ca.pem, new_client, kafka)
                assert served == der(new_stores[n.node_id][1]), f"node {n.node_id} port {port}"
            produce_all(nodes, topic, partitions, f"node{n.node_id}-rotated")
            isr_full(nodes, topic, partitions)
        # 3. The old CA leaves every trust store.
        for n in nodes:
            set_stores(n, on_both_listeners("truststore.location", new_ca.pem))
        for n in nodes:
            for port, kafka in ((n.ssl_port, True), (n.controller_port, False)):
                assert refused(port, new_ca.pem, old_client, kafka), f"node {n.node_id} {port}"
                mtls_probe(port, new_ca.pem, new_client, kafka)
        produce_all(nodes, topic, partitions, "new-only")
        isr_full(nodes, topic, partitions)

        # 4. New connections everywhere: node 2 restarts on the new CA's files (a node reads its
        # static stores until it has caught up with the metadata log).
        n2 = nodes[2]
        n2.kill()
        n2.keystore.write_bytes(new_stores[2][0].read_bytes())
        n2.truststore.write_bytes(new_ca.pem.read_bytes())
        n2.start()
        n2.wait_ready(40)
        isr_full(nodes, topic, partitions)
        # Node 2 leads partition 2 again: nodes 0 and 1 fetch from it over new connections.
        def node_2_leads():
            subprocess.run([gregor_bin(), "elect", "--bootstrap-server", n2.bootstrap,
                                  "--election-type", "preferred", "--topic", topic,
                                  "--partition", "2"], capture_output=True, text=True, timeout=60)
            return all(n.metadata([topic])["topics"][topic][1][2][1] == 2 for n in nodes) or None

        wait_until(node_2_leads, 40, "node 2 to lead partition 2 again", interval=0.5)
        produce_all(nodes, topic, partitions, "after-restart")
        isr_full(nodes, topic, partitions)
        for log in (nodes[0].log_path, nodes[1].log_path):
            text = log.read_text()
            assert "new connections to other nodes use the listener's reloaded" in text
    finally:
        problems = c.stop()
    assert not problems, problems
