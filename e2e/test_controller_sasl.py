"""The controller quorum over SASL: three broker,controller nodes whose CONTROLLER listener is
SASL_SSL with SCRAM-SHA-512 (credentials from `gregor storage format --add-scram`, which voters
check before their metadata log has committed anything), replicating over a SASL_SSL
inter-broker listener, with an authorizer whose `super.users` are the nodes' logins. Topics with
replication factor 3 are written with acks=all, the active controller is SIGKILLed and writes
resume. A broker whose controller password is wrong, and one logging in as a user without
CLUSTER_ACTION, never register: the controllers log why, the refused node says no voter answers
(with the controllers' refusal, never a password), and the cluster keeps serving. A second
cluster does the same over SASL_PLAINTEXT with PLAIN users from the controller listener's JAAS
line. With `listener.name.controller.connections.max.reauth.ms`, controller sessions end and
every node moves to fresh logins on new connections without disturbing the quorum; a node whose
password was changed loses its controller connections when their sessions end, and gets them
back once the password is restored. An admin tool logs in on the controller listener
(`--bootstrap-controller`, KIP-919) and is authorized per request."""

import os
import socket
import ssl
import subprocess
import time

import pytest
from confluent_kafka import Producer

import kwire
from cluster import Cluster, Node
from conftest import gregor_bin, wait_until
from pki import Ca
from test_controller_tls import consume, produce
from test_sasl import broker_log, format_cluster, scram_jaas

NODE_PW = "node-Controller-Secret-4"
BROKER_PW = "broker-Replica-Secret-6"
ADMIN_PW = "admin-Scram-Secret-8"
WRONG_PW = "not-the-Node-Secret-2"
NODE3_PW = "node3-Controller-Secret-5"
CHANGED_PW = "node3-Changed-Secret-7"
SECRETS = [NODE_PW, BROKER_PW, ADMIN_PW, WRONG_PW, NODE3_PW, CHANGED_PW]
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


def controller_configs(c, node, user, password, *args):
    """`gregor configs --bootstrap-controller` on `node`'s SASL_SSL controller listener."""
    props = c.ca.dir / f"{user}-controller.properties"
    props.write_text(f"security.protocol=SASL_SSL\nssl.ca.location={c.ca.pem}\n"
                     f"sasl.mechanism=SCRAM-SHA-512\nsasl.username={user}\n"
                     f"sasl.password={password}\n")
    return subprocess.run([gregor_bin(), "configs", "--bootstrap-controller",
                           f"127.0.0.1:{node.controller_port}", "--command-config", str(props),
                           "--timeout-ms", "15000", "--entity-type", "brokers",
                           "--entity-name", str(node.node_id), *args],
                          capture_output=True, text=True, timeout=60)


def test_an_admin_tool_logs_in_on_a_sasl_ssl_controller_listener(scram_cluster):
    """KIP-919 over SASL_SSL: the login's ApiVersions lists what the listener serves, so a
    tool logged in as a node describes and changes configs there; a user without ALTER_CONFIGS
    on the cluster is refused per request, a wrong password at the login."""
    c = scram_cluster
    n1 = c.nodes[1]
    out = controller_configs(c, n1, "node", NODE_PW, "--describe", "--all")
    assert out.returncode == 0, out.stderr
    assert "sasl.mechanism.controller.protocol=SCRAM-SHA-512" in out.stdout, out.stdout
    out = controller_configs(c, n1, "node", NODE_PW, "--alter", "--add-config",
                             "log.retention.ms=3600000")
    assert out.returncode == 0, out.stderr
    out = controller_configs(c, n1, "node", NODE_PW, "--describe")
    assert "log.retention.ms=3600000" in out.stdout, out.stdout
    out = controller_configs(c, n1, "admin", ADMIN_PW, "--alter", "--add-config",
                             "log.retention.ms=7200000")
    assert out.returncode != 0 and "authoriz" in out.stderr.lower(), out.stderr
    out = controller_configs(c, n1, "node", WRONG_PW, "--describe")
    assert out.returncode != 0 and "authentication" in out.stderr.lower(), out.stderr
    assert WRONG_PW not in out.stderr
    produce(c.nodes[0], "after-admin", ["x"])


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


REAUTH_MS = 3000


def controller_connections(node, voters):
    """Local ports of `node`'s established TCP connections to the voters' controller
    listeners, directly or through the harness's link proxies (its process's sockets, matched
    in /proc/net/tcp)."""
    c = node.cluster
    ports = {v.controller_port for v in voters}
    ports |= {c.proxies[(node.node_id, v.node_id)].port for v in voters
              if (node.node_id, v.node_id) in c.proxies}
    inodes = set()
    fd_dir = f"/proc/{node.proc.pid}/fd"
    for fd in os.listdir(fd_dir):
        try:
            link = os.readlink(f"{fd_dir}/{fd}")
        except OSError:
            continue
        if link.startswith("socket:["):
            inodes.add(link[len("socket:["):-1])
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                local, remote, state, inode = fields[1], fields[2], fields[3], fields[9]
                if state == "01" and inode in inodes and int(remote.rsplit(":", 1)[1], 16) in ports:
                    found.add(int(local.rsplit(":", 1)[1], 16))
    return found


def raft_vote(node):
    """The voter's stored Raft vote (term and leader): rewritten by any election."""
    return (node.data_dir / "__cluster_metadata-0" / "quorum-state").read_bytes()


def set_scram_password(node, user, password):
    r = subprocess.run([gregor_bin(), "configs", "--bootstrap-server", node.bootstrap,
                        "--entity-type", "users", "--entity-name", user, "--alter",
                        "--add-config", f"SCRAM-SHA-512=[iterations=4096,password={password}]"],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def test_controller_sessions_end_and_are_renewed_without_disturbing_the_quorum(tmp_path):
    c = secured_cluster(tmp_path, {
        "listener.security.protocol.map":
            "PLAINTEXT:PLAINTEXT,SASL_SSL:SASL_SSL,CONTROLLER:SASL_SSL",
        "listener.name.controller.sasl.enabled.mechanisms": "SCRAM-SHA-512",
        "sasl.mechanism.controller.protocol": "SCRAM-SHA-512",
        "listener.name.controller.scram-sha-512.sasl.jaas.config": scram_jaas("node", NODE_PW),
        # Kafka's per-listener form of the setting.
        "listener.name.controller.connections.max.reauth.ms": str(REAUTH_MS),
        "super.users": "User:node;User:node3;User:broker;User:ANONYMOUS",
    }, [("node", NODE_PW), ("node3", NODE3_PW), ("broker", BROKER_PW)])
    # A broker-only node with a controller login of its own.
    n3 = c.spares[3]
    n3.controller_jaas = ("scram-sha-512", scram_jaas("node3", NODE3_PW))
    lifetime = REAUTH_MS / 1000
    try:
        c.start()
        c.nodes[3] = n3
        n3.start()
        n3.wait_ready(40)
        voters = [c.nodes[i] for i in range(3)]
        nodes = voters + [n3]
        n0 = c.nodes[0]
        wait_until(lambda: n0.unfenced_brokers() == [0, 1, 2, 3], 30, "node 3 unfenced")
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            err, msg = kwire.create_topic(conn, "reauth", 1, 3, configs={"min.insync.replicas": "2"})
        assert err == 0, msg
        active = c.controller()
        votes = [raft_vote(v) for v in voters]
        before = {n.node_id: controller_connections(n, voters) for n in nodes}
        assert all(before.values()), before

        # Four lifetimes of acks=all writes and of admin requests node 3 forwards to the
        # active controller: every one succeeds, the controller and its term stay.
        p = Producer({"bootstrap.servers": n0.bootstrap, "acks": "all"})
        written, created = 0, 0
        end = time.monotonic() + 4 * lifetime + 0.5
        while time.monotonic() < end:
            p.produce("reauth", f"w{written}".encode())
            assert p.flush(5) == 0, f"write {written} delivered"
            written += 1
            if written % 10 == 0:
                with kwire.Conn("127.0.0.1", n3.port, timeout=10) as conn:
                    err, msg = kwire.create_topic(conn, f"reauth-{created}", 1, 1)
                assert err == 0, msg
                created += 1
            assert n0.active_controller_id() == active.node_id
        assert created >= 3, created
        assert [raft_vote(v) for v in voters] == votes, "no election"
        # Every node's controller connections are new ones: the old sessions ended.
        after = {n.node_id: controller_connections(n, voters) for n in nodes}
        for n in nodes:
            assert after[n.node_id] and not after[n.node_id] & before[n.node_id], \
                (n.node_id, before[n.node_id], after[n.node_id])
        assert n0.unfenced_brokers() == [0, 1, 2, 3]
        del p

        # Node 3's password changes to one it does not know: its fresh logins are refused,
        # and its connections close when their sessions end.
        set_scram_password(n0, "node3", CHANGED_PW)
        # Node 3 renews in the background only when a call falls in the last tenth of its
        # session; with a 3 s session and heartbeats every 2 s it often just reconnects once
        # the session is over. Either way a voter refuses the login.
        wait_until(lambda: any(logged(v, "closing controller connection: SASL authentication failed")
                               for v in voters), 2 * lifetime + 10,
                   "a voter to refuse node 3's login")
        wait_until(lambda: not controller_connections(n3, voters), 2 * lifetime + 10,
                   "node 3's controller connections to close")
        assert n0.active_controller_id() == active.node_id
        assert [raft_vote(v) for v in voters] == votes, "the quorum undisturbed"

        # Restored, it logs in again and its broker is unfenced.
        set_scram_password(n0, "node3", NODE3_PW)
        wait_until(lambda: controller_connections(n3, voters), 20, "node 3 to log in again")
        wait_until(lambda: n0.unfenced_brokers() == [0, 1, 2, 3], 30, "node 3 unfenced again")
        with kwire.Conn("127.0.0.1", n3.port, timeout=35) as conn:
            err, msg = kwire.create_topic(conn, "reauth-healed", 1, 1)
        assert err == 0, msg
    finally:
        c.nodes.update(c.spares)
        problems = c.stop()
    assert not problems, problems
    assert_no_password_logged(c)
