"""Admin tools on the controller listener (KIP-919's `--bootstrap-controller`). Three
controller-only nodes and one broker; the quorum runs on an SSL controller listener with mutual
TLS, and an authorizer's `super.users` is the nodes' certificate principal:

- `bin/kafka-configs.sh --bootstrap-controller` describes a controller-only node's configs, and
  `gregor configs --bootstrap-controller` changes that node's controller listener key store: new
  TLS connections to it see the new certificate, and the quorum and the broker keep working (a
  topic is created and written afterwards, acks=all);
- a client certificate whose principal may not ALTER_CONFIGS the cluster is refused with
  CLUSTER_AUTHORIZATION_FAILED, a key store with another subject with INVALID_CONFIG, and the
  served certificate stays;
- a tool pointed at a controller listener with `--bootstrap-server` is told it is one.
"""

import os
import socket
import ssl
import subprocess
from pathlib import Path

import pytest
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from cluster import Cluster
from conftest import gregor_bin, wait_until
from test_tls import Ca

NODE_PRINCIPAL = "User:CN=gregor-node,O=Gregor"
KEY = "listener.name.controller.ssl.keystore.location"
REPO = Path(__file__).resolve().parent.parent


def keystore(ca, name, cn, org="Gregor"):
    """A PEM key store (key, then certificate); returns (path, certificate, key)."""
    crt, key = ca.issue(name, cn, org=org)
    path = ca.dir / f"{name}-keystore.pem"
    path.write_bytes(key.read_bytes() + crt.read_bytes())
    return path, crt, key


def der(crt):
    return x509.load_pem_x509_certificate(crt.read_bytes()).public_bytes(serialization.Encoding.DER)


def properties(path, ca, crt, key):
    path.write_text(f"security.protocol=SSL\nssl.ca.location={ca.pem}\n"
                    f"ssl.certificate.location={crt}\nssl.key.location={key}\n")
    return path


@pytest.fixture
def controllers(tmp_path):
    ca = Ca(tmp_path, "quorum-ca")
    node_store, node_crt, node_key = keystore(ca, "node", "gregor-node")
    c = Cluster(tmp_path, 3, brokers=1, controller_only=True, overrides={
        "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:SSL",
        "ssl.keystore.location": str(node_store),
        "ssl.truststore.location": str(ca.pem),
        "ssl.client.auth": "required",
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        # The nodes, and the test's PLAINTEXT clients on the broker.
        "super.users": f"{NODE_PRINCIPAL};User:ANONYMOUS",
    })
    c.ca = ca
    c.node_props = properties(tmp_path / "node.properties", ca, node_crt, node_key)
    try:
        c.start()
        yield c
    finally:
        problems = c.stop()
    assert not problems, problems


def served(port, ca, cert):
    """The certificate (DER) a new mTLS connection to a controller listener is shown."""
    ctx = ssl.create_default_context(cafile=str(ca.pem))
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    with socket.create_connection(("127.0.0.1", port), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
            return s.getpeercert(binary_form=True)


def configs(controller, props, *args, script=False):
    tool = ([str(REPO / "bin" / "kafka-configs.sh")] if script else [gregor_bin(), "configs"])
    return subprocess.run(tool + ["--bootstrap-controller", f"127.0.0.1:{controller.controller_port}",
                                  "--command-config", str(props), "--entity-type", "brokers",
                                  "--entity-name", "0", *args],
                          capture_output=True, text=True, timeout=90,
                          env=dict(os.environ, GREGOR_BIN=gregor_bin()))


def produce(broker, topic, n):
    p = Producer({"bootstrap.servers": broker.bootstrap, "acks": "all",
                  "message.timeout.ms": 30000})
    for i in range(n):
        p.produce(topic, f"{topic}-{i}".encode())
    assert p.flush(40) == 0


def test_a_controller_only_node_rotates_its_certificate_through_its_own_listener(controllers):
    c = controllers
    ca, node0, broker = c.ca, c.nodes[0], c.nodes[3]
    node_cert = (ca.dir / "node.crt", ca.dir / "node.key")

    out = configs(node0, c.node_props, "--describe", "--all", script=True)
    assert out.returncode == 0, out.stderr
    assert "ssl.client.auth=required" in out.stdout, out.stdout
    assert "process.roles=controller" in out.stdout, out.stdout

    new_store, new_crt, _ = keystore(ca, "node-2027", "gregor-node")
    out = configs(node0, c.node_props, "--alter", "--add-config", f"{KEY}={new_store}")
    assert out.returncode == 0, out.stderr
    wait_until(lambda: served(node0.controller_port, ca, node_cert) == der(new_crt), 15,
               "node 0's controller listener to serve its new certificate")
    assert served(c.nodes[1].controller_port, ca, node_cert) == der(ca.dir / "node.crt")

    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic("after-rotation", 2, 1)])["after-rotation"].result(30)
    produce(broker, "after-rotation", 20)


def test_refusals_on_the_controller_listener_leave_the_certificate(controllers, tmp_path):
    c = controllers
    ca, node0 = c.ca, c.nodes[0]
    node_cert = (ca.dir / "node.crt", ca.dir / "node.key")
    before = served(node0.controller_port, ca, node_cert)

    _, ops_crt, ops_key = keystore(ca, "ops", "ops", org="Acme")
    ops = properties(tmp_path / "ops.properties", ca, ops_crt, ops_key)
    good_store, _, _ = keystore(ca, "node-good", "gregor-node")
    out = configs(node0, ops, "--alter", "--add-config", f"{KEY}={good_store}")
    assert out.returncode != 0, out.stdout
    assert "CLUSTER_AUTHORIZATION_FAILED" in out.stderr or "authoriz" in out.stderr.lower(), \
        out.stderr

    other_store, _, _ = keystore(ca, "elsewhere", "elsewhere")
    out = configs(node0, c.node_props, "--alter", "--add-config", f"{KEY}={other_store}")
    assert out.returncode != 0, out.stdout
    assert "subject" in out.stderr, out.stderr
    assert served(node0.controller_port, ca, node_cert) == before

    out = subprocess.run([gregor_bin(), "topics", "--bootstrap-server",
                          f"127.0.0.1:{node0.controller_port}", "--command-config",
                          str(c.node_props), "--list", "--timeout-ms", "10000"],
                         capture_output=True, text=True, timeout=60)
    assert out.returncode != 0
    assert "controller listener" in out.stderr, out.stderr
    # The controller still serves the quorum and admin tools.
    out = configs(node0, c.node_props, "--describe")
    assert out.returncode == 0, out.stderr
