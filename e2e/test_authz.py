"""ACL enforcement on real processes. Principals come from TLS client certificates (an SSL
listener with ssl.client.auth=required; ssl.principal.mapping.rules turns `CN=alice` into
`User:alice`). A matrix of (principal, request) -> Kafka's answer, one row per case, written
from Kafka's documentation ("Operations and Resources on Protocols" and the authorization
rules: DENY wins, READ/WRITE/DELETE/ALTER imply DESCRIBE, ALTER_CONFIGS implies
DESCRIBE_CONFIGS, no ACL means no access), checked with raw requests (kwire over TLS) so each
answer's exact error code is seen; then super.users and allow.everyone.if.no.acl.found, and an
ACL added through node 0 enforced on node 2 within a second."""

import socket
import ssl

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

import kwire
from conftest import wait_until
from test_tls import Ca, TlsBroker

NONE = 0
UNKNOWN_TOPIC_OR_PARTITION = 3
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30
CLUSTER_AUTHORIZATION_FAILED = 31
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53

LIST_OFFSETS, LIST_GROUPS, DELETE_TOPICS = 2, 16, 20
DESCRIBE_CONFIGS, DESCRIBE_ACLS, CREATE_ACLS = 32, 29, 30
ELECT_LEADERS, INCREMENTAL_ALTER_CONFIGS = 43, 44
ALTER_REASSIGNMENTS, LIST_REASSIGNMENTS = 45, 46
# Every version of these two is flexible (kwire encodes the header from this table).
kwire.FIRST_FLEXIBLE.setdefault(ALTER_REASSIGNMENTS, 0)
kwire.FIRST_FLEXIBLE.setdefault(LIST_REASSIGNMENTS, 0)

STANDARD_AUTHORIZER = "org.apache.kafka.metadata.authorizer.StandardAuthorizer"
MAPPING = "RULE:^CN=([a-z]+)$/$1/,DEFAULT"
PRINCIPALS = ("admin", "alice", "bob", "carol")


def acl(rtype, name, principal, op, perm=AclPermissionType.ALLOW,
        pattern=ResourcePatternType.LITERAL):
    return AclBinding(rtype, name, pattern, f"User:{principal}", "*", op, perm)


T, G, C = ResourceType.TOPIC, ResourceType.GROUP, ResourceType.BROKER
Op = AclOperation
# alice: a consumer and producer of `orders`, allowed a few named things; bob: ALL on every
# topic but a DENY of WRITE on `orders`, and ALTER/DESCRIBE on the cluster; carol: no ACL.
ACLS = [
    acl(T, "orders", "alice", Op.READ), acl(T, "orders", "alice", Op.WRITE),
    acl(T, "orders", "alice", Op.ALTER_CONFIGS), acl(T, "audit", "alice", Op.DESCRIBE),
    acl(T, "scratch", "alice", Op.DELETE),
    acl(G, "app", "alice", Op.READ, pattern=ResourcePatternType.PREFIXED),
    acl(T, "alice-", "alice", Op.CREATE, pattern=ResourcePatternType.PREFIXED),
    acl(T, "alice-", "alice", Op.DESCRIBE, pattern=ResourcePatternType.PREFIXED),
    acl(T, "ghost-", "alice", Op.DESCRIBE, pattern=ResourcePatternType.PREFIXED),
    acl(T, "*", "bob", Op.ALL), acl(T, "orders", "bob", Op.WRITE, AclPermissionType.DENY),
    acl(C, "kafka-cluster", "bob", Op.ALTER), acl(C, "kafka-cluster", "bob", Op.DESCRIBE),
]
TOPICS = ["orders", "audit", "scratch", "secret"]


def tls_conn(port, ca, cert):
    ctx = ssl.create_default_context(cafile=str(ca))
    ctx.load_cert_chain(str(cert[0]), str(cert[1]))
    raw = socket.create_connection(("127.0.0.1", port), timeout=15)
    conn = kwire.Conn.__new__(kwire.Conn)
    conn.sock = ctx.wrap_socket(raw, server_hostname="localhost")
    conn.correlation_id = 0
    return conn


# ---- requests: each returns what the matrix compares ------------------------------------------

def metadata_topics(c, topics=None):
    """Metadata v1: {topic: error_code} (`topics` None: all topics)."""
    return {t: v[0] for t, v in kwire.metadata_v1(c, topics)["topics"].items()}


def produce(c, topic):
    batch = kwire.record_batch([(None, b"v")])
    r = c.request(kwire.PRODUCE, 3, kwire.produce_body(3, topic, 0, batch, acks=1))
    return kwire.parse_produce(r, 3)[0][2]


def fetch(c, topic):
    r = c.request(kwire.FETCH, 4, kwire.fetch_body(4, topic, 0))
    return kwire.parse_fetch(r, 4)[1][0][2]


def list_offsets(c, topic):
    """ListOffsets v1 of partition 0's latest offset: its error code."""
    body = kwire.W().i32(-1).array([topic], lambda w, t: w.string(t).array(
        [0], lambda w, p: w.i32(p).i64(-1))).done()
    r = c.request(LIST_OFFSETS, 1, body)
    parts = r.array(lambda t: (t.string(), t.array(lambda p: (p.i32(), p.i16(), p.i64(), p.i64()))))
    return parts[0][1][0][1]


COORDINATOR_NOT_READY = (kwire.COORDINATOR_LOAD_IN_PROGRESS, kwire.COORDINATOR_NOT_AVAILABLE,
                         kwire.NOT_COORDINATOR)


def join_group(c, group):
    """JoinGroup v3: its error code once the group's coordinator has loaded."""
    protocols = [("range", kwire.consumer_subscription(["orders"]))]

    def settled():
        err = kwire.join_group(c, 3, group, protocols)["error_code"]
        return None if err in COORDINATOR_NOT_READY else (err,)

    return wait_until(settled, 20, f"JoinGroup {group} to reach a loaded coordinator")[0]


def commit(c, group, topic):
    return kwire.offset_commit(c, group, topic, {0: 1})[0]


def offsets_fetched(c, group, topic):
    """OffsetFetch v2 of partition 0: (group error code, partition error code or None)."""
    err, parts = kwire.offset_fetch(c, group, topic, [0])
    return err, parts[0][1] if 0 in parts else None


def list_groups(c):
    r = c.request(LIST_GROUPS, 0, b"")
    err = r.i16()
    return err, sorted(r.array(lambda g: (g.string(), g.string())[0]))


def create_topic(c, name):
    return kwire.create_topic(c, name)[0]


def delete_topic(c, name):
    body = kwire.W().array([name], lambda w, t: w.string(t)).i32(10000).done()
    r = c.request(DELETE_TOPICS, 1, body)
    r.i32()
    return r.array(lambda t: (t.string(), t.i16()))[0][1]


def describe_configs(c, rtype, name):
    body = kwire.W().array([None], lambda w, _: w.i8(rtype).string(name).i32(-1)) \
        .boolean(False).done()
    r = c.request(DESCRIBE_CONFIGS, 1, body)
    r.i32()
    r.i32()  # results: the first's error code comes first
    return r.i16()


def alter_config(c, rtype, name, key, value):
    body = kwire.W().array([None], lambda w, _: w.i8(rtype).string(name).array(
        [None], lambda w, _: w.string(key).i8(0).string(value))).boolean(False).done()
    r = c.request(INCREMENTAL_ALTER_CONFIGS, 0, body)
    r.i32()
    return r.array(lambda x: (x.i16(), x.string(), x.i8(), x.string()))[0][0]


def elect_leaders(c):
    """ElectLeaders v1 (preferred) of every partition: the top-level error code."""
    r = c.request(ELECT_LEADERS, 1, kwire.W().i8(0).i32(-1).i32(10000).done())
    r.i32()
    return r.i16()


def alter_reassignments(c):
    """AlterPartitionReassignments v0 of nothing: the top-level error code."""
    body = kwire.W(flex=True).i32(10000).array([], None).tags().done()
    r = c.request(ALTER_REASSIGNMENTS, 0, body)
    r.i32()
    return r.i16()


def list_reassignments(c):
    body = kwire.W(flex=True).i32(10000).array(None, None).tags().done()
    r = c.request(LIST_REASSIGNMENTS, 0, body)
    r.i32()
    return r.i16()


def describe_acls(c):
    body = kwire.W().i8(1).string(None).i8(1).string(None).string(None).i8(1).i8(1).done()
    r = c.request(DESCRIBE_ACLS, 1, body)
    r.i32()
    return r.i16()


def create_acl(c, principal):
    body = kwire.W().array([None], lambda w, _: w.i8(2).string("x").i8(3).string(principal)
                           .string("*").i8(3).i8(3)).done()
    r = c.request(CREATE_ACLS, 1, body)
    r.i32()
    return r.array(lambda x: (x.i16(), x.string()))[0][0]


def leader_of(c, topic):
    """Partition 0's leader as Metadata v1 names it (-1: none)."""
    _, partitions = kwire.metadata_v1(c, [topic])["topics"][topic]
    return partitions[0][1]


def init_producer_id(c, transactional_id=None):
    return kwire.init_producer_id(c, 1, transactional_id)[0]


# ---- the matrix -------------------------------------------------------------------------------

TAF, GAF, CAF = TOPIC_AUTHORIZATION_FAILED, GROUP_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED
ALL_TOPICS = set(TOPICS)

# (principal, what, request, expected). Rows run in order: later ones see earlier effects.
MATRIX = [
    # Metadata: listed only with DESCRIBE (implied by READ, WRITE, DELETE); a named topic it may
    # not describe is TOPIC_AUTHORIZATION_FAILED whether or not it exists.
    ("alice", "metadata: all topics", lambda c: set(metadata_topics(c)), {"orders", "audit", "scratch"}),
    ("bob", "metadata: all topics", lambda c: set(metadata_topics(c)) >= ALL_TOPICS, True),
    ("carol", "metadata: all topics", lambda c: set(metadata_topics(c)), set()),
    ("alice", "metadata: a secret topic", lambda c: metadata_topics(c, ["secret"]), {"secret": TAF}),
    ("carol", "metadata: a topic that does not exist", lambda c: metadata_topics(c, ["nope"]), {"nope": TAF}),
    ("alice", "metadata: auto-creation needs CREATE", lambda c: metadata_topics(c, ["ghost-1"]), {"ghost-1": TAF}),
    ("alice", "metadata: auto-creation with CREATE", lambda c: metadata_topics(c, ["alice-auto"])["alice-auto"] in (NONE, 5), True),
    # Produce: WRITE on the topic; a DENY wins over ALL.
    ("alice", "produce", lambda c: produce(c, "orders"), NONE),
    ("bob", "produce (DENY WRITE over ALLOW ALL)", lambda c: produce(c, "orders"), TAF),
    ("carol", "produce", lambda c: produce(c, "orders"), TAF),
    ("alice", "produce to a topic it may only describe", lambda c: produce(c, "audit"), TAF),
    ("alice", "idempotent InitProducerId (WRITE on a topic)", lambda c: init_producer_id(c), NONE),
    ("carol", "idempotent InitProducerId", lambda c: init_producer_id(c), CAF),
    ("alice", "transactional InitProducerId", lambda c: init_producer_id(c, "tx"), TRANSACTIONAL_ID_AUTHORIZATION_FAILED),
    # Fetch: READ; ListOffsets: DESCRIBE.
    ("alice", "fetch", lambda c: fetch(c, "orders"), NONE),
    ("bob", "fetch", lambda c: fetch(c, "orders"), NONE),
    ("carol", "fetch", lambda c: fetch(c, "orders"), TAF),
    ("alice", "fetch a topic it may only describe", lambda c: fetch(c, "audit"), TAF),
    ("alice", "list offsets (DESCRIBE)", lambda c: list_offsets(c, "audit"), NONE),
    ("carol", "list offsets", lambda c: list_offsets(c, "audit"), TAF),
    # Groups: READ on the group to join or commit (and READ on the topic), DESCRIBE to fetch
    # offsets or be listed.
    ("alice", "join group", lambda c: join_group(c, "app-join"), NONE),
    ("carol", "join group", lambda c: join_group(c, "app-join"), GAF),
    ("alice", "offset commit", lambda c: commit(c, "app", "orders"), NONE),
    ("alice", "offset commit of a topic it may not read", lambda c: commit(c, "app", "audit"), TAF),
    ("bob", "offset commit (no ACL on the group)", lambda c: commit(c, "app", "orders"), GAF),
    ("alice", "offset fetch", lambda c: offsets_fetched(c, "app", "orders"), (NONE, NONE)),
    ("carol", "offset fetch", lambda c: offsets_fetched(c, "app", "orders")[0], GAF),
    ("alice", "list groups", lambda c: list_groups(c), (NONE, ["app", "app-join"])),
    ("carol", "list groups", lambda c: list_groups(c), (NONE, [])),
    # CreateTopics: CREATE on the cluster or the topic; DeleteTopics: DELETE.
    ("alice", "create topic (prefixed CREATE)", lambda c: create_topic(c, "alice-t1"), NONE),
    ("alice", "create topic", lambda c: create_topic(c, "other-t1"), TAF),
    ("bob", "create topic (ALL)", lambda c: create_topic(c, "bob-t1"), NONE),
    ("carol", "create topic", lambda c: create_topic(c, "carol-t1"), TAF),
    ("alice", "delete topic", lambda c: delete_topic(c, "scratch"), NONE),
    ("alice", "delete topic it may not delete", lambda c: delete_topic(c, "orders"), TAF),
    ("carol", "delete a topic that does not exist", lambda c: delete_topic(c, "nope"), TAF),
    # Configs: a topic's need DESCRIBE_CONFIGS / ALTER_CONFIGS on it, a broker's on the cluster.
    ("alice", "describe topic configs (implied by ALTER_CONFIGS)", lambda c: describe_configs(c, 2, "orders"), NONE),
    ("carol", "describe topic configs", lambda c: describe_configs(c, 2, "orders"), TAF),
    ("alice", "describe broker configs", lambda c: describe_configs(c, 4, "1"), CAF),
    ("admin", "describe broker configs (super user)", lambda c: describe_configs(c, 4, "1"), NONE),
    ("alice", "alter topic config", lambda c: alter_config(c, 2, "orders", "retention.ms", "3600000"), NONE),
    ("carol", "alter topic config", lambda c: alter_config(c, 2, "orders", "retention.ms", "1"), TAF),
    ("bob", "alter broker config", lambda c: alter_config(c, 4, "1", "log.cleaner.threads", "2"), CAF),
    # Cluster-wide: ALTER to elect or reassign, DESCRIBE to list.
    ("bob", "elect leaders", elect_leaders, NONE),
    ("alice", "elect leaders", elect_leaders, CAF),
    ("bob", "alter reassignments", alter_reassignments, NONE),
    ("carol", "alter reassignments", alter_reassignments, CAF),
    ("bob", "list reassignments", list_reassignments, NONE),
    ("alice", "list reassignments", list_reassignments, CAF),
    # ACL APIs: ALTER on the cluster to change, DESCRIBE to describe.
    ("bob", "describe ACLs", describe_acls, NONE),
    ("alice", "describe ACLs", describe_acls, CAF),
    ("bob", "create ACL", lambda c: create_acl(c, "User:dave"), NONE),
    ("alice", "create ACL", lambda c: create_acl(c, "User:dave"), CAF),
]


@pytest.fixture
def secured(tmp_path):
    """A broker with an SSL listener requiring client certificates and the authorizer; the
    certificates of PRINCIPALS; topics and ACLs made by the super user `admin`."""
    ca = Ca(tmp_path, "authz-ca")
    crt, key = ca.issue("broker", "localhost")
    keystore = tmp_path / "broker-keystore.pem"
    keystore.write_bytes(key.read_bytes() + crt.read_bytes())
    certs = {p: ca.issue(p, p) for p in PRINCIPALS}
    started = []

    def start(acls, **overrides):
        settings = {"ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca.pem),
                    "ssl.client.auth": "required", "ssl.principal.mapping.rules": MAPPING,
                    "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:admin"}
        settings.update(overrides)
        b = TlsBroker(tmp_path, settings).start()
        started.append(b)
        admin = AdminClient({"bootstrap.servers": f"127.0.0.1:{b.ssl_port}",
                             "security.protocol": "SSL", "ssl.ca.location": str(ca.pem),
                             "ssl.certificate.location": str(certs["admin"][0]),
                             "ssl.key.location": str(certs["admin"][1])})
        with tls_conn(b.ssl_port, ca.pem, certs["admin"]) as c:
            for t in TOPICS:
                assert create_topic(c, t) == NONE, t
            # The group coordinator (`__consumer_offsets`) is ready before the matrix runs.
            wait_until(lambda: kwire.find_coordinator(c, "app")[0] == NONE, 30,
                       "the group coordinator of `app`")
        if acls:
            for f in admin.create_acls(acls).values():
                assert f.result(timeout=30) is None
        return b

    def connect(b, principal):
        return tls_conn(b.ssl_port, ca.pem, certs[principal])

    yield start, connect
    for b in started:
        assert b.stop() == 0, f"broker did not exit 0 on SIGTERM\n{b.log_path.read_text()[-3000:]}"


@pytest.mark.timeout(180)
def test_authorization_matrix(secured):
    start, connect = secured
    b = start(ACLS)
    conns = {p: connect(b, p) for p in PRINCIPALS}
    failures = []
    try:
        for principal, what, request, expected in MATRIX:
            got = request(conns[principal])
            if got != expected:
                failures.append(f"{principal}: {what}: expected {expected!r}, got {got!r}")
    finally:
        for c in conns.values():
            c.close()
    assert not failures, "\n".join(failures)
    # Refusals are logged with who was refused what.
    log = b.log_path.read_text()
    assert "authorization denied" in log and "User:carol" in log


@pytest.mark.timeout(120)
def test_super_users_and_allow_everyone_if_no_acl_found(secured):
    start, connect = secured
    b = start([acl(T, "orders", "alice", Op.WRITE),
               acl(T, "orders", "admin", Op.ALL, AclPermissionType.DENY)],
              **{"allow.everyone.if.no.acl.found": "true"})
    with connect(b, "carol") as c:
        # No ACL names `audit`: everyone may; `orders` has ACLs, none for carol.
        assert produce(c, "audit") == NONE
        assert produce(c, "orders") == TAF
        # `__consumer_offsets` (made for the fixture's groups) has no ACL either.
        assert set(metadata_topics(c)) == ALL_TOPICS - {"orders"} | {"__consumer_offsets"}
    with connect(b, "alice") as c:
        assert produce(c, "orders") == NONE
    with connect(b, "admin") as c:
        # A super user is allowed whatever the ACLs say, a DENY included.
        assert produce(c, "orders") == NONE


@pytest.mark.timeout(150)
def test_an_acl_added_through_node_0_is_enforced_on_node_2_within_a_second(tmp_path):
    """Three nodes with an SSL client listener; replication goes over PLAINTEXT as
    User:ANONYMOUS, a super user (as the inter-broker principal must be)."""
    from cluster import Cluster, Node

    ca = Ca(tmp_path, "authz-ca")
    crt, key = ca.issue("broker", "localhost")
    keystore = tmp_path / "broker-keystore.pem"
    keystore.write_bytes(key.read_bytes() + crt.read_bytes())
    carol = ca.issue("carol", "carol")

    class SslNode(Node):
        def argv(self):
            argv = super().argv()
            i = argv.index("--listeners") + 1
            argv[i] += f",SSL://127.0.0.1:{self.ssl_port}"
            return argv

    c = Cluster(tmp_path, 3, overrides={
        "ssl.keystore.location": str(keystore), "ssl.truststore.location": str(ca.pem),
        "ssl.client.auth": "required", "ssl.principal.mapping.rules": MAPPING,
        "authorizer.class.name": STANDARD_AUTHORIZER, "super.users": "User:ANONYMOUS",
    })
    for node in c.nodes.values():
        node.__class__ = SslNode
        node.ssl_port = c.fresh_port()
    try:
        c.start()
        n0, n2 = c.nodes[0], c.nodes[2]
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            err, msg = kwire.create_topic(conn, "late", 1, 3, configs={"min.insync.replicas": "2"})
        assert err == NONE, msg
        # Replication works with the authorizer on: acks=all needs the followers' fetches.
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            wait_until(lambda: leader_of(conn, "late") >= 0, 20, "a leader for `late`")
            led_by = leader_of(conn, "late")
        with kwire.Conn("127.0.0.1", c.nodes[led_by].port, timeout=35) as conn:
            batch = kwire.record_batch([(None, b"r")])

            def produced():
                r = conn.request(kwire.PRODUCE, 3, kwire.produce_body(
                    3, "late", 0, batch, acks=-1, timeout_ms=20000))
                err = kwire.parse_produce(r, 3)[0][2]
                # The leader may apply the new topic a moment after node 0 names it.
                assert err in (NONE, kwire.UNKNOWN_TOPIC_OR_PARTITION), err
                return err == NONE
            wait_until(produced, 20, "the first produce to `late`")
        with tls_conn(n2.ssl_port, ca.pem, carol) as conn:
            assert metadata_topics(conn, ["late"]) == {"late": TAF}
        # CreateAcls through node 0 itself (an admin client picks any broker): raw, over
        # PLAINTEXT, as the super user. Node 0 answers once its own image holds the ACL, even
        # when it forwarded the request to another active controller: no wait here.
        with kwire.Conn("127.0.0.1", n0.port, timeout=35) as conn:
            controller = kwire.describe_cluster(conn)["controller_id"]
            body = kwire.W().array([None], lambda w, _: w.i8(2).string("late").i8(3)
                                   .string("User:carol").string("*").i8(8).i8(3)).done()
            r = conn.request(CREATE_ACLS, 1, body)
            r.i32()
            assert r.array(lambda x: (x.i16(), x.string()))[0][0] == NONE
        with tls_conn(n0.ssl_port, ca.pem, carol) as conn:
            assert metadata_topics(conn, ["late"]) == {"late": NONE}, f"controller {controller}"
        with tls_conn(n2.ssl_port, ca.pem, carol) as conn:
            wait_until(lambda: metadata_topics(conn, ["late"]) == {"late": NONE}, 1.0,
                       "node 2 to let carol describe `late`")
    finally:
        problems = c.stop()
    assert not problems, problems
