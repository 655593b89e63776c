"""TLS listeners on a real broker process: a broker with a PLAINTEXT and an SSL listener
(`listener.security.protocol.map`'s defaults), certificates made by `pki.py` (a CA, the
broker's, clients', an expired one and one from an untrusted CA).
kcat and confluent-kafka produce and consume over SSL with `security.protocol=SSL` and
`ssl.ca.location`; Metadata over each listener advertises that listener's port; with
`ssl.client.auth=required` a client without a certificate, with an expired one or with one from
another CA is refused and one with a good certificate works; a plaintext client on the TLS port
is closed and the broker goes on serving the others."""

import functools
import socket
import ssl
import subprocess

import pytest
from confluent_kafka import KafkaException, Producer
from confluent_kafka.admin import AdminClient

import kwire
from clients import round_trip
from conftest import ListenersBroker, wait_until
from pki import Ca



TlsBroker = functools.partial(ListenersBroker, extra=("SSL",), name="tls")


@pytest.fixture
def pki(tmp_path):
    ca = Ca(tmp_path, "test-ca")
    crt, key = ca.issue("broker", "localhost")
    keystore = tmp_path / "broker-keystore.pem"
    keystore.write_bytes(key.read_bytes() + crt.read_bytes())
    return {"dir": tmp_path, "ca": ca, "keystore": keystore}


@pytest.fixture
def tls_broker(pki, request):
    started = []

    def start(**overrides):
        settings = {"ssl.keystore.location": str(pki["keystore"]),
                    "ssl.truststore.location": str(pki["ca"].pem)}
        settings.update(overrides)
        b = TlsBroker(pki["dir"], settings)
        started.append(b)
        return b.start()

    yield start
    for b in started:
        assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"


def ssl_conf(pki, broker, **extra):
    conf = {"bootstrap.servers": f"127.0.0.1:{broker.ssl_port}",
            "security.protocol": "SSL", "ssl.ca.location": str(pki["ca"].pem)}
    conf.update(extra)
    return conf



def tls_metadata(port, ca, cert=None):
    """Raw Metadata v1 over TLS with python's ssl: [(node, host, port)], or raises."""
    ctx = ssl.create_default_context(cafile=str(ca))
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    raw = socket.create_connection(("127.0.0.1", port), timeout=5)
    conn = kwire.Conn.__new__(kwire.Conn)
    conn.sock = ctx.wrap_socket(raw, server_hostname="localhost")
    conn.correlation_id = 0
    with conn:
        return kwire.metadata_v1_brokers(conn)


def refused(port, ca, cert=None):
    """Whether a TLS client with `cert` gets no Metadata answer (refused in or after the
    handshake: with TLS 1.3 the server judges the client's certificate after the client is done)."""
    try:
        tls_metadata(port, ca, cert)
        return False
    except (ssl.SSLError, kwire.Closed, ConnectionError, OSError):
        return True


def test_kcat_and_confluent_kafka_over_ssl_and_metadata_per_listener(tls_broker, pki):
    b = tls_broker()
    conf = ssl_conf(pki, b)
    assert round_trip(conf, "tls-topic", n=10) == [f"v{i}" for i in range(10)]

    kcat_ssl = ["kcat", "-b", f"127.0.0.1:{b.ssl_port}", "-X", "security.protocol=SSL",
                "-X", f"ssl.ca.location={pki['ca'].pem}"]
    subprocess.run(kcat_ssl + ["-P", "-t", "kcat-tls"], input=b"a\nb\nc\n", check=True, timeout=30)
    out = subprocess.run(kcat_ssl + ["-C", "-t", "kcat-tls", "-o", "beginning", "-e", "-q"],
                         capture_output=True, check=True, timeout=30).stdout.decode().split()
    assert out == ["a", "b", "c"]
    listed = subprocess.run(kcat_ssl + ["-L"], capture_output=True, check=True,
                            timeout=30).stdout.decode()
    assert f"127.0.0.1:{b.ssl_port}" in listed, listed

    # Each listener advertises its own endpoint.
    assert tls_metadata(b.ssl_port, pki["ca"].pem) == [(1, "127.0.0.1", b.ssl_port)]
    with kwire.Conn("127.0.0.1", b.port) as c:
        assert kwire.metadata_v1_brokers(c) == [(1, "127.0.0.1", b.port)]
    brokers = AdminClient(conf).list_topics(timeout=10).brokers
    assert [(m.id, m.port) for m in brokers.values()] == [(1, b.ssl_port)]
    plain = AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).brokers
    assert [(m.id, m.port) for m in plain.values()] == [(1, b.port)]


def test_required_client_auth_refuses_missing_expired_and_untrusted_certificates(tls_broker, pki):
    b = tls_broker(**{"ssl.client.auth": "required"})
    ca = pki["ca"]
    alice = ca.issue("alice", "alice", org="Acme")
    assert tls_metadata(b.ssl_port, ca.pem, alice) == [(1, "127.0.0.1", b.ssl_port)]
    conf = ssl_conf(pki, b, **{"ssl.certificate.location": str(alice[0]),
                               "ssl.key.location": str(alice[1])})
    assert round_trip(conf, "mtls-topic", n=3) == ["v0", "v1", "v2"]

    assert refused(b.ssl_port, ca.pem), "no client certificate"
    assert refused(b.ssl_port, ca.pem, ca.issue("old", "old", expired=True)), "expired"
    other = Ca(pki["dir"], "other-ca").issue("mallory", "mallory")
    assert refused(b.ssl_port, ca.pem, other), "certificate of an untrusted CA"
    admin = AdminClient(ssl_conf(pki, b))
    with pytest.raises(KafkaException):
        admin.list_topics(timeout=5)
    # The refusals are the broker's, and it says why.
    log = b.log_path.read_text()
    assert "TLS handshake failed" in log
    # It still serves a good client.
    assert tls_metadata(b.ssl_port, ca.pem, alice) == [(1, "127.0.0.1", b.ssl_port)]


def test_plaintext_client_on_the_tls_port_is_closed_and_others_are_served(tls_broker, pki):
    b = tls_broker()
    for _ in range(3):
        with kwire.Conn("127.0.0.1", b.ssl_port, timeout=5) as c:
            with pytest.raises((kwire.Closed, ConnectionError, OSError)):
                kwire.metadata_v1_brokers(c)
    with kwire.Conn("127.0.0.1", b.port) as c:
        assert kwire.metadata_v1_brokers(c) == [(1, "127.0.0.1", b.port)]
    assert tls_metadata(b.ssl_port, pki["ca"].pem) == [(1, "127.0.0.1", b.ssl_port)]


def test_tls_settings_that_cannot_work_stop_start_up(pki):
    for overrides, named in [
        ({"ssl.keystore.type": "JKS"}, "ssl.keystore.type"),
        ({"ssl.keystore.location": str(pki["dir"] / "missing.pem")}, "ssl.keystore.location"),
        ({"ssl.enabled.protocols": "TLSv1.1"}, "ssl.enabled.protocols"),
    ]:
        settings = {"ssl.keystore.location": str(pki["keystore"])}
        settings.update(overrides)
        b = TlsBroker(pki["dir"], settings)
        r = subprocess.run(b.argv(), capture_output=True, timeout=30)
        assert r.returncode != 0, f"{overrides} started"
        err = r.stderr.decode()
        assert named in err and "BEGIN" not in err, err


def test_gregor_admin_commands_over_ssl_with_command_config(tls_broker, pki):
    b = tls_broker(**{"ssl.client.auth": "required"})
    ca = pki["ca"]
    crt, key = ca.issue("ops", "ops", org="Acme")
    props = pki["dir"] / "client.properties"
    props.write_text(f"security.protocol=SSL\nssl.ca.location={ca.pem}\n"
                     f"ssl.certificate.location={crt}\nssl.key.location={key}\nclient.id=ops\n")
    gregor = [b.bin, "topics", "--bootstrap-server", f"localhost:{b.ssl_port}"]
    subprocess.run(gregor + ["--command-config", str(props), "--create", "--topic", "over-tls",
                             "--partitions", "2"], check=True, capture_output=True, timeout=60)
    out = subprocess.run(gregor + ["--command-config", str(props), "--list"], check=True,
                         capture_output=True, timeout=60).stdout.decode().split()
    assert "over-tls" in out
    # Without a client certificate the broker refuses the connection.
    anonymous = pki["dir"] / "anonymous.properties"
    anonymous.write_text(f"security.protocol=SSL\nssl.ca.location={ca.pem}\n")
    r = subprocess.run(gregor + ["--command-config", str(anonymous), "--list", "--timeout-ms",
                                 "3000"], capture_output=True, timeout=60)
    assert r.returncode != 0, r.stdout


def test_replication_over_an_ssl_inter_broker_listener(pki):
    """Two nodes replicate over their SSL listener (inter.broker.listener.name=SSL, verified
    against the trust store, host names checked): an acks=all produce to a topic with
    min.insync.replicas=2 completes only once the follower has fetched it over TLS."""
    from cluster import Cluster, Node

    class SslNode(Node):
        def argv(self):
            argv = super().argv()
            i = argv.index("--listeners") + 1
            argv[i] += f",SSL://127.0.0.1:{self.ssl_port}"
            return argv

    c = Cluster(pki["dir"], 2, overrides={
        "inter.broker.listener.name": "SSL",
        "ssl.keystore.location": str(pki["keystore"]),
        "ssl.truststore.location": str(pki["ca"].pem),
    })
    for node in c.nodes.values():
        node.__class__ = SslNode
        node.ssl_port = c.fresh_port()
    try:
        c.start()
        n0 = c.nodes[0]
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            err, msg = kwire.create_topic(conn, "replicated-tls", 1, 2,
                                          configs={"min.insync.replicas": "2"})
        assert err == 0, msg
        p = Producer({"bootstrap.servers": n0.bootstrap, "acks": "all",
                      "message.timeout.ms": 20000})
        for i in range(20):
            p.produce("replicated-tls", f"r{i}".encode())
        assert p.flush(30) == 0, "acks=all with min.insync.replicas=2: the follower fetched"
        _, partitions = n0.metadata(["replicated-tls"])["topics"]["replicated-tls"]
        assert sorted(partitions[0][3]) == [0, 1], partitions
        # Each node registered its SSL listener first: DescribeCluster over SSL lists SSL ports.
        ssl_ports = sorted(n.ssl_port for n in c.nodes.values())
        listed = sorted(b[2] for b in tls_metadata(c.nodes[1].ssl_port, pki["ca"].pem))
        assert listed == ssl_ports
    finally:
        problems = c.stop()
    assert not problems, problems
