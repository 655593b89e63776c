"""TLS and authentication on `metrics.listener`, and the console filtered by principal.

A broker with the authorizer on (`User:admin` a super user; `User:ANONYMOUS` too, so that the
test's PLAINTEXT clients can make topics, groups and ACLs) serves `metrics.listener` over https
(`listener.name.metrics.ssl.*`, certificates from `pki.py`):

- with `metrics.listener.authentication=basic`: no credentials and a wrong password get 401 with
  the Basic challenge (the wrong one after `connection.failed.authentication.delay.ms`, while a
  good request on another connection is answered meanwhile), a SCRAM user made with `gregor
  storage format --add-scram` gets `/metrics` (super user) or 403 (no DESCRIBE on the cluster),
  `/healthz` and `/readyz` stay open, plain http on the https port gets no answer; the console's
  JSON for `User:alice` (DESCRIBE on topics and groups prefixed `a-`) lists only her topics,
  groups and committed offsets, a super user sees all;
- with `metrics.listener.authentication=mtls` and required client certificates: no certificate
  and one of another CA are refused in the handshake, a good one is served as its principal;
- mtls without an https listener stops start-up with a message;
- a 2-node cluster, both nodes https + basic with client certificates requested and the nodes'
  certificate principal in `super.users`: node 0's console lists the groups node 1 coordinates
  (node 1 answers node 0's https request), an admin sees them all, alice sees only hers and
  node 1 itself hides her the offsets she may not describe (the forwarded viewer, not node 0's
  certificate, is judged there); a forwarded-principal header from a client that is not a node
  (no certificate, or one whose principal is not a super user) is ignored.
"""

import base64
import http.client
import json
import ssl
import subprocess
import threading
import time
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   NewTopic, ResourcePatternType, ResourceType,
                                   ScramCredentialInfo, ScramMechanism,
                                   UserScramCredentialUpsertion)

import kwire
from cluster import Cluster
from conftest import Broker, free_port, wait_until
from pki import Ca
from test_sasl import broker_log, format_with_scram

ADMIN_PW = "admin-metrics-secret"
ALICE_PW = "alice-metrics-secret"
BOB = "User:CN=bob,O=Acme"
FAILED_DELAY_MS = 1500


class MetricsBroker(Broker):
    """A broker whose `metrics.listener` is https on `metrics_port`."""

    def __init__(self, workdir, overrides):
        self.metrics_port = free_port()
        overrides = dict(overrides, **{"metrics.listener": f"https://127.0.0.1:{self.metrics_port}"})
        super().__init__(workdir, name="metrics-tls", overrides=overrides)


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("metrics-pki")
    ca = Ca(d, "metrics-ca")
    other = Ca(d, "other-ca")
    return {"ca": ca, "keystore": ca.broker_keystore(), "bob": ca.issue("bob", "bob", org="Acme"),
            "stranger": other.issue("stranger", "bob", org="Acme")}


def settings(pki, authentication, **extra):
    s = {
        "listener.name.metrics.ssl.keystore.location": str(pki["keystore"]),
        "listener.name.metrics.ssl.truststore.location": str(pki["ca"].pem),
        "metrics.listener.authentication": authentication,
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "super.users": f"User:admin;User:ANONYMOUS;{BOB}",
        "connection.failed.authentication.delay.ms": str(FAILED_DELAY_MS),
    }
    s.update(extra)
    return s


def start(workdir, pki, authentication, **extra):
    b = MetricsBroker(workdir, settings(pki, authentication, **extra))
    format_with_scram(b.data_dir, b.node_id, workdir,
                      users=[("admin", ADMIN_PW), ("alice", ALICE_PW)])
    return b.start()


@pytest.fixture
def basic_broker(tmp_path, pki):
    b = start(tmp_path, pki, "basic")
    yield b
    assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"
    log = broker_log(b.log_path)
    assert ADMIN_PW not in log and ALICE_PW not in log, "a password reached the broker's log"


def tls_context(pki, cert=None):
    ctx = ssl.create_default_context(cafile=str(pki["ca"].pem))
    if cert:
        ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    return ctx


def get(b, pki, path, user=None, password=None, cert=None):
    """(status, headers, body) of an https GET on the metrics listener."""
    req = urllib.request.Request(f"https://127.0.0.1:{b.metrics_port}{path}")
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, context=tls_context(pki, cert), timeout=10) as r:
            return r.status, r.headers, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.headers, e.read().decode()


def api(b, pki, path, user, password):
    status, _, body = get(b, pki, path, user, password)
    assert status == 200, (path, user, status, body)
    return json.loads(body)


def seed(b):
    """Topics a-one, a-two and b-secret; groups a-grp (offsets on a-one and b-secret) and b-grp;
    User:alice may DESCRIBE topics and groups prefixed `a-`."""
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("a-one", "a-two", "b-secret")]).values():
        f.result(20)
    p = Producer({"bootstrap.servers": b.bootstrap})
    for t in ("a-one", "b-secret"):
        for i in range(5):
            p.produce(t, f"{t}-{i}".encode())
    assert p.flush(20) == 0
    for group, topics in (("a-grp", ("a-one", "b-secret")), ("b-grp", ("b-secret",))):
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
        c.commit(offsets=[TopicPartition(t, 0, 2) for t in topics], asynchronous=False)
        c.close()
    bindings = [AclBinding(rt, "a-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.DESCRIBE, AclPermissionType.ALLOW)
                for rt in (ResourceType.TOPIC, ResourceType.GROUP)]
    for f in admin.create_acls(bindings).values():
        f.result(20)


def test_basic_auth_over_https_and_the_console_filtered_by_principal(basic_broker, pki):
    b = basic_broker
    # Open for probes.
    assert get(b, pki, "/healthz")[0] == 200
    wait_until(lambda: get(b, pki, "/readyz")[0] == 200, 20, "/readyz 200 without credentials")

    status, headers, _ = get(b, pki, "/metrics")
    assert status == 401
    assert headers["WWW-Authenticate"].startswith('Basic realm="gregor"')
    assert get(b, pki, "/ui/", )[0] == 401
    assert get(b, pki, "/metrics", "admin", "not-the-password")[0] == 401
    assert get(b, pki, "/metrics", "nobody", ADMIN_PW)[0] == 401

    status, headers, body = get(b, pki, "/metrics", "admin", ADMIN_PW)
    assert status == 200, body
    assert headers["Content-Type"].startswith("application/openmetrics-text")
    assert "gregor_requests_total" in body
    # alice logs in but has no DESCRIBE on the cluster.
    status, _, body = get(b, pki, "/metrics", "alice", ALICE_PW)
    assert status == 403, body

    # A failed login waits for the delay; a good request on another connection does not.
    bad = {}

    def wrong_password():
        t0 = time.monotonic()
        bad["status"] = get(b, pki, "/metrics", "admin", "wrong")[0]
        bad["seconds"] = time.monotonic() - t0

    t = threading.Thread(target=wrong_password)
    t.start()
    assert get(b, pki, "/metrics", "admin", ADMIN_PW)[0] == 200
    assert t.is_alive(), "the good request was answered while the failed login still waited"
    t.join(30)
    assert bad["status"] == 401 and bad["seconds"] >= FAILED_DELAY_MS / 1000

    # Plain http on the https port gets no answer.
    conn = http.client.HTTPConnection("127.0.0.1", b.metrics_port, timeout=10)
    with pytest.raises((http.client.HTTPException, ConnectionError, OSError)):
        conn.request("GET", "/healthz")
        conn.getresponse().read()
    conn.close()

    seed(b)

    def topics(user, pw):
        return sorted(t["name"] for t in api(b, pki, "/ui/api/cluster", user, pw)["topics"])

    def groups(user, pw):
        return sorted(g["group_id"] for g in api(b, pki, "/ui/api/groups", user, pw)["groups"])

    wait_until(lambda: topics("alice", ALICE_PW) == ["a-one", "a-two"], 20,
               "alice's console to list her topics only")
    assert {"a-one", "a-two", "b-secret", "__consumer_offsets"} <= set(topics("admin", ADMIN_PW))
    assert api(b, pki, "/ui/api/cluster", "alice", ALICE_PW)["brokers"], "brokers are shown"
    assert groups("alice", ALICE_PW) == ["a-grp"]
    assert groups("admin", ADMIN_PW) == ["a-grp", "b-grp"]
    assert sorted(g["group_id"] for g in
                  api(b, pki, "/ui/api/groups?scope=local", "alice", ALICE_PW)["groups"]) == ["a-grp"]

    mine = api(b, pki, "/ui/api/group?id=a-grp", "alice", ALICE_PW)
    assert [o["topic"] for o in mine["offsets"]] == ["a-one"]
    assert mine["lag_sum"] == 3
    full = api(b, pki, "/ui/api/group?id=a-grp", "admin", ADMIN_PW)
    assert [o["topic"] for o in full["offsets"]] == ["a-one", "b-secret"]
    assert full["lag_sum"] == 6
    status, _, body = get(b, pki, "/ui/api/group?id=b-grp", "alice", ALICE_PW)
    assert status == 403 and "not authorized" in json.loads(body)["error"]
    # The page itself needs a login only.
    status, _, body = get(b, pki, "/ui/", "alice", ALICE_PW)
    assert status == 200 and "/ui/app.js" in body


def test_node_details_topic_configs_and_charts_are_filtered_by_principal(basic_broker, pki):
    """The broker page, a topic's configs and the charts answer a principal what Kafka's APIs
    would: version and uptime to all, disk space and broker configs only with DESCRIBE /
    DESCRIBE_CONFIGS on the cluster, a topic's configs only with DESCRIBE_CONFIGS on it, and
    chart series only of the topics and groups it may DESCRIBE (latency with DESCRIBE on the
    cluster)."""
    b = basic_broker
    seed(b)
    mine = api(b, pki, "/ui/api/broker?id=1", "alice", ALICE_PW)
    assert mine["version"] and mine["uptime_ms"] is not None
    assert mine["log_dirs"] is None and "not authorized" in mine["log_dirs_error"]
    assert mine["configs"] is None and "not authorized" in mine["configs_error"]
    full = api(b, pki, "/ui/api/broker?id=1", "admin", ADMIN_PW)
    assert full["log_dirs"] and full["log_dirs"][0]["total_bytes"] > 0
    assert any(c["name"] == "num.partitions" for c in full["configs"])
    # alice has DESCRIBE on a- topics, not DESCRIBE_CONFIGS: refused like DescribeConfigs.
    status, _, body = get(b, pki, "/ui/api/topic-configs?topic=a-one", "alice", ALICE_PW)
    assert status == 403, body
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    binding = AclBinding(ResourceType.TOPIC, "a-", ResourcePatternType.PREFIXED, "User:alice",
                         "*", AclOperation.DESCRIBE_CONFIGS, AclPermissionType.ALLOW)
    for f in admin.create_acls([binding]).values():
        f.result(20)
    wait_until(lambda: get(b, pki, "/ui/api/topic-configs?topic=a-one", "alice",
                           ALICE_PW)[0] == 200, 20, "alice may describe a-one's configs")
    assert get(b, pki, "/ui/api/topic-configs?topic=b-secret", "alice", ALICE_PW)[0] == 403

    def series(user, pw, chart):
        charts = api(b, pki, "/ui/api/charts", user, pw)["charts"]
        return sorted(s["name"] for c in charts if c["id"] == chart for s in c["series"])

    # The sampler's first samples (every 10 s) hold both topics' bytes in.
    wait_until(lambda: {"a-one", "b-secret"} <= set(series("admin", ADMIN_PW, "bytes_in")), 40,
               "the charts to sample both topics")
    assert "b-secret" not in series("alice", ALICE_PW, "bytes_in")
    assert "a-one" in series("alice", ALICE_PW, "bytes_in")
    assert series("admin", ADMIN_PW, "request_latency"), "the admin sees request latency"
    assert series("alice", ALICE_PW, "request_latency") == [], "latency needs DESCRIBE cluster"


def test_mtls_refuses_missing_and_foreign_certificates(tmp_path, pki):
    b = start(tmp_path, pki, "mtls", **{"listener.name.metrics.ssl.client.auth": "required"})
    try:
        for cert in (None, pki["stranger"]):
            with pytest.raises((ssl.SSLError, urllib.error.URLError, ConnectionError)):
                get(b, pki, "/metrics", cert=cert)
        status, _, body = get(b, pki, "/metrics", cert=pki["bob"])
        assert status == 200 and "gregor_requests_total" in body
        seed(b)
        wait_until(lambda: {"a-one", "b-secret"} <= {
            t["name"] for t in json.loads(get(b, pki, "/ui/api/cluster", cert=pki["bob"])[2])["topics"]},
            20, "bob (a super user) to see every topic")
    finally:
        assert b.stop() == 0


def test_mtls_without_https_stops_start_up(tmp_path, pki):
    b = MetricsBroker(tmp_path, settings(pki, "mtls"))
    b.overrides["metrics.listener"] = f"http://127.0.0.1:{b.metrics_port}"
    r = subprocess.run(b.argv(), capture_output=True, text=True, timeout=60)
    assert r.returncode != 0
    assert "metrics.listener.authentication=mtls needs an https://" in r.stderr + r.stdout


# --- Two nodes: the console asks the other node over https, for the viewer -------------------

NODE_PRINCIPAL = "User:CN=localhost"  # the subject of pki's broker key store
FORWARDED = "gregor-forwarded-principal"
OFFSETS_PARTITIONS = 6


def https_cluster(tmp_path, pki):
    """Two nodes whose metrics listeners are https with basic logins and requested client
    certificates; the nodes share the `localhost` key store, whose principal is a super user."""
    c = Cluster(tmp_path, 2, metrics=True, overrides=dict(
        settings(pki, "basic", **{
            "listener.name.metrics.ssl.client.auth": "requested",
            "super.users": f"User:admin;User:ANONYMOUS;{NODE_PRINCIPAL}",
        }),
        **{"offsets.topic.replication.factor": "1",
           "offsets.topic.num.partitions": str(OFFSETS_PARTITIONS)}))
    for n in c.nodes.values():
        plain = n.argv
        n.argv = lambda plain=plain: [a.replace("metrics.listener=http://", "metrics.listener=https://")
                                      for a in plain()]
    return c.start()


class At:
    """`get`'s target: one node's https metrics listener."""

    def __init__(self, node):
        self.metrics_port = node.metrics_port


def seed_cluster(c):
    """SCRAM users admin and alice; topics a-one and b-secret; groups a-local (node 0
    coordinates it), a-remote and b-remote (node 1 does), a- ones with offsets on a-one and
    b-secret, b-remote on b-secret; alice may DESCRIBE topics and groups prefixed `a-`.
    Returns the group ids by role."""
    n0 = c.nodes[0]
    admin = AdminClient({"bootstrap.servers": n0.bootstrap})
    sha512 = ScramCredentialInfo(ScramMechanism.SCRAM_SHA_512, 4096)
    upserts = [UserScramCredentialUpsertion(u, sha512, pw.encode())
               for u, pw in (("admin", ADMIN_PW), ("alice", ALICE_PW))]
    for f in admin.alter_user_scram_credentials(upserts).values():
        f.result(30)
    for f in admin.create_topics([NewTopic(t, 1, 1) for t in ("a-one", "b-secret")]).values():
        f.result(20)
    p = Producer({"bootstrap.servers": n0.bootstrap})
    for t in ("a-one", "b-secret"):
        for i in range(5):
            p.produce(t, f"{t}-{i}".encode())
    assert p.flush(20) == 0
    with kwire.Conn("127.0.0.1", n0.port) as conn:  # creates __consumer_offsets
        wait_until(lambda: kwire.find_coordinator(conn, "warm-up")[0] == 0, 30,
                   "__consumer_offsets to have leaders")
    _, parts = n0.metadata(["__consumer_offsets"])["topics"]["__consumer_offsets"]
    leaders = {p: leader for p, (_, leader, _, _) in parts.items()}

    def coordinated_by(node, prefix):
        return next(g for g in (f"{prefix}-{i}" for i in range(200))
                    if leaders[kwire.group_partition(g, OFFSETS_PARTITIONS)] == node)

    groups = {"a-local": coordinated_by(0, "a-local"), "a-remote": coordinated_by(1, "a-remote"),
              "b-remote": coordinated_by(1, "b-remote")}
    for role, group in groups.items():
        topics = ("a-one", "b-secret") if role.startswith("a-") else ("b-secret",)
        consumer = Consumer({"bootstrap.servers": n0.bootstrap, "group.id": group})
        consumer.commit(offsets=[TopicPartition(t, 0, 2) for t in topics], asynchronous=False)
        consumer.close()
    bindings = [AclBinding(rt, "a-", ResourcePatternType.PREFIXED, "User:alice", "*",
                           AclOperation.DESCRIBE, AclPermissionType.ALLOW)
                for rt in (ResourceType.TOPIC, ResourceType.GROUP)]
    for f in admin.create_acls(bindings).values():
        f.result(20)
    return groups


def get_with(at, pki, path, headers, user=None, password=None, cert=None):
    """`get` with extra request headers."""
    req = urllib.request.Request(f"https://127.0.0.1:{at.metrics_port}{path}", headers=headers)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, context=tls_context(pki, cert), timeout=10) as r:
            return r.status, json.loads(r.read().decode())
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def test_console_reads_other_nodes_over_https_for_the_viewer(tmp_path, pki):
    c = https_cluster(tmp_path, pki)
    try:
        g = seed_cluster(c)
        viewer, owner = At(c.nodes[0]), At(c.nodes[1])

        def merged(user, pw):
            return api(viewer, pki, "/ui/api/groups", user, pw)

        def ids(answer):
            return sorted(x["group_id"] for x in answer["groups"])

        everything = sorted(g.values())
        wait_until(lambda: ids(merged("admin", ADMIN_PW)) == everything, 30,
                   "node 0's console to list node 1's groups for admin")
        answer = merged("admin", ADMIN_PW)
        assert [n["ok"] for n in sorted(answer["nodes"], key=lambda n: n["node_id"])] == \
            [True, True], answer["nodes"]
        coordinators = {x["group_id"]: x["coordinator"] for x in answer["groups"]}
        assert coordinators == {g["a-local"]: 0, g["a-remote"]: 1, g["b-remote"]: 1}

        answer = merged("alice", ALICE_PW)
        assert ids(answer) == sorted([g["a-local"], g["a-remote"]])
        assert all(n["ok"] for n in answer["nodes"]), answer["nodes"]
        # Node 1's own answer for alice: it judged her, not node 0's certificate.
        path = f"/ui/api/group?id={g['a-remote']}"
        mine = api(viewer, pki, path, "alice", ALICE_PW)
        assert mine["coordinator"] == 1 and mine["via_node"] == 0
        assert [o["topic"] for o in mine["offsets"]] == ["a-one"]
        full = api(viewer, pki, path, "admin", ADMIN_PW)
        assert [o["topic"] for o in full["offsets"]] == ["a-one", "b-secret"]
        status, _, body = get(viewer, pki, f"/ui/api/group?id={g['b-remote']}", "alice", ALICE_PW)
        assert status == 403, body

        # A node's certificate is trusted to name the viewer, without the viewer's password.
        node_cert = (pki["keystore"], pki["keystore"])
        status, local = get_with(owner, pki, "/ui/api/groups?scope=local",
                                 {FORWARDED: "User:alice"}, cert=node_cert)
        assert status == 200 and ids(local) == [g["a-remote"]], local
        # Anyone else's forwarded principal is ignored: alice stays alice.
        for cert in (None, pki["bob"]):
            status, local = get_with(owner, pki, "/ui/api/groups?scope=local",
                                     {FORWARDED: "User:admin"}, "alice", ALICE_PW, cert=cert)
            assert status == 200 and ids(local) == [g["a-remote"]], (cert, local)
            status, _ = get_with(owner, pki, "/ui/api/groups?scope=local",
                                 {FORWARDED: "User:admin"}, cert=cert)
            assert status == 401, cert
        log = "\n".join(broker_log(n.log_path) for n in c.nodes.values())
        assert ADMIN_PW not in log and ALICE_PW not in log, "a password reached a node's log"
        assert "forwarded principal ignored" in log
    finally:
        problems = c.stop()
        assert not problems, "; ".join(problems) + "\n" + c.logs()
