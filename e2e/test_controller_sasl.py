"""The controller quorum over SASL: three broker,controller nodes whose CONTROLLER listener is
SASL_SSL with SCRAM-SHA-512 (credentials from `gregor storage format --add-scram`, which voters
check before their metadata log has committed anything), replicating over a SASL_SSL
inter-broker listener, with an authorizer whose `super.users` are the nodes' logins. Topics with
replication factor 3 are written with acks=all, the active controller is SIGKILLed and writes
resume. A broker whose controller password is wrong, and one logging in as a user without
CLUSTER_ACTION, never register: the controllers log why, the refused node says no voter answers
(with the controllers' refusal, never a password), and the cluster keeps serving. A second
cluster does the same over SASL_PLAINTEXT with PLAIN users from the controller listener's JAAS
line."""

import socket
import ssl

import pytest

import kwire
from cluster import Cluster, Node
from conftest import wait_until
from pki import Ca
from test_controller_tls import consume, produce
from test_sasl import broker_log, format_cluster, scram_jaas

NODE_PW = "node-Controller-Secret-4"
BROKER_PW = "broker-Replica-Secret-6"
ADMIN_PW = "admin-Scram-Secret-8"
WRONG_PW = "not-the-Node-Secret-2"
SECRETS = [NODE_PW, BROKER_PW, ADMIN_PW, WRONG_PW]
STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"


class ControllerSaslNode(Node):
    """A node with a SASL_SSL client listener besides PLAINTEXT (the harness's and the test
    clients'), and its own controller login when `controller_jaas` is set."""

    def argv(self):
        argv = super().argv()
        i = argv.index("--listeners") + 1
        argv[i] += f",SASL_SSL://127.0.0.1:{self.sasl_port}"
        jaas = getattr(self, "controller_jaas", None)
        if jaas:
            argv += ["--override", f"listener.name.controller.{jaas[0]}.sasl.jaas.config={jaas[1]}"]
        return argv


def secured_cluster(tmp_path, overrides, users):
    """Three voters, formatted alike with SCRAM-SHA-512 `users`, and `c.spares`: two
    broker-only nodes (ids 3 and 4) for the tests that start them."""
    ca = Ca(tmp_path, "cluster-ca")
    settings = {
        "inter.broker.listener.name": "SASL_SSL",
        "listener.name.sasl_ssl.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.inter.broker.protocol": "SCRAM-SHA-512",
        "listener.name.sasl_ssl.scram-sha-512.sasl.jaas.config": scram_jaas("broker", BROKER_PW),
        "ssl.keystore.location": str(ca.broker_keystore("node")),
        "ssl.truststore.location": str(ca.pem),
        "authorizer.class.name": STANDARD_AUTHORIZER,
        # The nodes' logins, and the test's PLAINTEXT clients.
        "super.users": "User:node;User:broker;User:ANONYMOUS",
    }
    settings.update(overrides)
    c = Cluster(tmp_path, 3, brokers=2, overrides=settings)
    for node in c.nodes.values():
        node.__class__ = ControllerSaslNode
        node.sasl_port = c.fresh_port()
    c.spares = {i: c.nodes.pop(i) for i in (3, 4)}
    format_cluster(c, users)
    c.ca = ca
    return c


@pytest.fixture
def scram_cluster(tmp_path):
    c = secured_cluster(tmp_path, {
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config": scram_jaas("node", NODE_PW),
    }, [("node", NODE_PW), ("broker", BROKER_PW), ("admin", ADMIN_PW)])
    try:
        c.start()
        yield c
    finally:
        c.nodes.update(c.spares)
        problems = c.stop()
    assert not problems, problems
    assert_no_password_logged(c)


def assert_no_password_logged(c):
    for node in c.nodes.values():
        if node.log_path.exists():
            log = broker_log(node.log_path)
            assert not [s for s in SECRETS if s in log], f"node {node.node_id} logged a password"


def logged(node, text):
    return text in broker_log(node.log_path)


def test_quorum_over_sasl_ssl_survives_the_active_controller_dying(scram_cluster):
    c = scram_cluster
    n0 = c.nodes[0]
    with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
        err, msg = kwire.create_topic(conn, "ctl-sasl", 1, 3, configs={"min.insync.replicas": "2"})
    assert err == 0, msg
    produce(n0, "ctl-sasl", [f"a{i}" for i in range(10)])
    _, partitions = n0.metadata(["ctl-sasl"])["topics"]["ctl-sasl"]
    assert sorted(partitions[0][3]) == [0, 1, 2], partitions

    # The controller port wants TLS, then a SASL login before anything else: a controller RPC
    # frame sent straight after the handshake closes the connection.
    ctx = ssl.create_default_context(cafile=str(c.ca.pem))
    raw = socket.create_connection(("127.0.0.1", n0.controller_port), timeout=5)
    with ctx.wrap_socket(raw, server_hostname="127.0.0.1") as s:
        s.sendall(b"\x00\x00\x00\x04abcd")
        assert s.recv(1) == b""

    active = c.controller()
    active.kill()
    others = [n for n in c.nodes.values() if n is not active]
    new = c.controller(among=others, timeout=30)
    assert new is not active
    with kwire.Conn("127.0.0.1", others[0].port, timeout=35) as conn:
        err, msg = kwire.create_topic(conn, "ctl-sasl-after", 1, 2)
    assert err == 0, msg
    produce(others[0], "ctl-sasl", [f"b{i}" for i in range(10)])
    got = consume(others[1], "ctl-sasl", 20)
    assert sorted(got) == sorted([f"a{i}" for i in range(10)] + [f"b{i}" for i in range(10)])

    # The killed node logs in again and catches up.
    active.start()
    active.wait_ready(40)
    wait_until(lambda: n0.unfenced_brokers() == [0, 1, 2], 30, "the killed node back")
    produce(active, "ctl-sasl-after", ["c"])


def test_nodes_with_a_wrong_or_unauthorized_controller_login_cannot_join(scram_cluster):
    c = scram_cluster
    wrong, unauthorized = c.spares[3], c.spares[4]
    wrong.controller_jaas = ("scram-sha-512", scram_jaas("node", WRONG_PW))
    unauthorized.controller_jaas = ("scram-sha-512", scram_jaas("admin", ADMIN_PW))
    for n in (wrong, unauthorized):
        c.nodes[n.node_id] = n
        n.start()

    voters = [c.nodes[i] for i in range(3)]
    wait_until(lambda: any(logged(v, "closing controller connection: SASL authentication failed")
                           for v in voters), 30, "a controller to refuse the wrong password")
    wait_until(lambda: any(logged(v, "principal not authorized") and logged(v, "User:admin")
                           for v in voters), 30,
               "a controller to refuse the login without CLUSTER_ACTION")
    for n in (wrong, unauthorized):
        wait_until(lambda: logged(n, "no voter answers this node's metadata fetches"), 30,
                   f"node {n.node_id} to say it cannot reach the quorum")
        assert n.alive(), "refused, not crashed"
    assert logged(wrong, "invalid credentials with SASL mechanism SCRAM-SHA-512"), \
        broker_log(wrong.log_path)[-2000:]

    # Neither registered; the cluster goes on serving.
    n0 = c.nodes[0]
    assert n0.unfenced_brokers() == [0, 1, 2]
    assert n0.listed_brokers() == [0, 1, 2]
    produce(n0, "still-serving", ["x", "y"])
    assert sorted(consume(c.nodes[1], "still-serving", 2)) == ["x", "y"]
    for n in (wrong, unauthorized):
        n.stop()


PLAIN_USERS = ("org.apache.kafka.common.security.plain.PlainLoginModule required "
               f'username="node" password="{NODE_PW}" user_node="{NODE_PW}";')


def test_plain_logins_on_a_sasl_plaintext_controller_listener(tmp_path):
    c = secured_cluster(tmp_path, {
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:SASL_PLAINTEXT",
        "listener.name.controller.sasl.enabled.mechanisms": "PLAIN",
        "sasl.mechanism.controller.protocol": "PLAIN",
        "listener.name.controller.plain.sasl.jaas.config": PLAIN_USERS,
    }, [("broker", BROKER_PW)])
    wrong = c.spares[3]
    wrong.controller_jaas = ("plain", PLAIN_USERS.replace(f'password="{NODE_PW}"',
                                                          f'password="{WRONG_PW}"'))
    try:
        c.start()
        n0 = c.nodes[0]
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            err, msg = kwire.create_topic(conn, "ctl-plain", 1, 3,
                                          configs={"min.insync.replicas": "3"})
        assert err == 0, msg
        produce(n0, "ctl-plain", [f"p{i}" for i in range(5)])
        assert sorted(consume(c.nodes[2], "ctl-plain", 5)) == [f"p{i}" for i in range(5)]

        c.nodes[3] = wrong
        wrong.start()
        wait_until(lambda: logged(wrong, "Invalid username or password"), 30,
                   "the refused node to log the controllers' answer")
        assert any(logged(v, "closing controller connection: SASL authentication failed")
                   for v in (c.nodes[i] for i in range(3)))
        assert n0.unfenced_brokers() == [0, 1, 2]
        wrong.stop()
    finally:
        c.nodes.update(c.spares)
        problems = c.stop()
    assert not problems, problems
    assert_no_password_logged(c)
