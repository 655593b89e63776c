"""ACLs on real processes: a three-node cluster with the authorizer configured (and
super.users=User:ANONYMOUS, so plaintext clients keep working until enforcement lands). ACLs
created through node 0 with `gregor acls` (kafka-acls.sh's flags) and with confluent-kafka's
admin client are described by node 2 within a second, deleted by filter, and survive a node's
restart; bad bindings get Kafka's INVALID_REQUEST; without an authorizer the ACL APIs answer
SECURITY_DISABLED. DescribeAcls and CreateAcls to one chosen node go over raw sockets (kwire),
since an admin client may send them to any broker."""

import subprocess

import pytest
from confluent_kafka.admin import (AclBinding, AclBindingFilter, AclOperation,
                                   AclPermissionType, AdminClient, ResourcePatternType,
                                   ResourceType)

import kwire
from conftest import gregor_bin, wait_until

DESCRIBE_ACLS, CREATE_ACLS, DELETE_ACLS = 29, 30, 31
SECURITY_DISABLED = 54

AUTHORIZER = {
    "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
    "super.users": "User:ANONYMOUS",
}

# Kafka's codes: resource TOPIC 2, GROUP 3, CLUSTER 4; pattern ANY 1, LITERAL 3, PREFIXED 4;
# operation ANY 1, READ 3, WRITE 4; permission ANY 1, ALLOW 3.


def host_port(node):
    host, port = node.bootstrap.rsplit(":", 1)
    return host, int(port)


def describe_all(node):
    """DescribeAcls v1 (match everything) to `node` itself: (error, {(type, name, pattern,
    principal, host, op, perm)})."""
    body = (kwire.W().i8(1).string(None).i8(1).string(None).string(None).i8(1).i8(1).done())
    with kwire.Conn(*host_port(node)) as c:
        r = c.request(DESCRIBE_ACLS, 1, body)
    r.i32()  # throttle
    err, _msg = r.i16(), r.string()

    def acl(rr):
        return (rr.string(), rr.string(), rr.i8(), rr.i8())

    def resource(rr):
        t, name, pattern = rr.i8(), rr.string(), rr.i8()
        return [(t, name, pattern, *a) for a in rr.array(acl)]

    found = {a for res in r.array(resource) for a in res}
    return err, found


def create_raw(node, creations):
    """CreateAcls v1 to `node`: [(error, message)] per creation."""
    def creation(w, c):
        t, name, pattern, principal, host, op, perm = c
        w.i8(t).string(name).i8(pattern).string(principal).string(host).i8(op).i8(perm)

    with kwire.Conn(*host_port(node), timeout=35) as c:
        r = c.request(CREATE_ACLS, 1, kwire.W().array(creations, creation).done())
    r.i32()
    return r.array(lambda rr: (rr.i16(), rr.string()))


def delete_raw(node):
    """DeleteAcls v1 with one match-everything filter: the filter's error code."""
    def filt(w, _):
        w.i8(1).string(None).i8(1).string(None).string(None).i8(1).i8(1)

    with kwire.Conn(*host_port(node)) as c:
        r = c.request(DELETE_ACLS, 1, kwire.W().array([None], filt).done())
    r.i32()
    return r.array(lambda rr: rr.i16())[0]


def gregor_acls(node, *args):
    out = subprocess.run([gregor_bin(), "acls", "--bootstrap-server", node.bootstrap, *args],
                         capture_output=True, text=True, timeout=60)
    return out


ALICE_READ_ORDERS = (2, "orders", 3, "User:alice", "*", 3, 3)
BOB_READ_APP_GROUPS = (3, "app-", 4, "User:bob", "*", 3, 3)
CAROL_WRITE_PAY = (2, "pay", 4, "User:carol", "10.0.0.7", 4, 3)


@pytest.mark.timeout(150)
def test_acls_are_replicated_deleted_by_filter_and_survive_a_restart(cluster_factory):
    c = cluster_factory(3, overrides=AUTHORIZER)
    n0, n2 = c.nodes[0], c.nodes[2]

    out = gregor_acls(n0, "--add", "--allow-principal", "User:alice", "--operation", "Read",
                      "--topic", "orders")
    assert out.returncode == 0, out.stderr
    assert ("Adding ACLs for resource `ResourcePattern(resourceType=TOPIC, name=orders, "
            "patternType=LITERAL)`: \n \t(principal=User:alice, host=*, operation=READ, "
            "permissionType=ALLOW) \n") in out.stdout, out.stdout

    admin = AdminClient({"bootstrap.servers": n0.bootstrap})
    created = admin.create_acls([
        AclBinding(ResourceType.GROUP, "app-", ResourcePatternType.PREFIXED, "User:bob", "*",
                   AclOperation.READ, AclPermissionType.ALLOW),
        AclBinding(ResourceType.TOPIC, "pay", ResourcePatternType.PREFIXED, "User:carol",
                   "10.0.0.7", AclOperation.WRITE, AclPermissionType.ALLOW),
    ])
    for f in created.values():
        assert f.result(timeout=30) is None

    want = {ALICE_READ_ORDERS, BOB_READ_APP_GROUPS, CAROL_WRITE_PAY}
    wait_until(lambda: describe_all(n2) == (0, want), 1.0, "node 2 to describe the new ACLs")

    # The admin client's describe, filtered by resource, through any node.
    topic_filter = AclBindingFilter(ResourceType.TOPIC, None, ResourcePatternType.ANY, None,
                                    None, AclOperation.ANY, AclPermissionType.ANY)
    topics = admin.describe_acls(topic_filter).result(timeout=30)
    assert sorted(b.name for b in topics) == ["orders", "pay"]

    # kafka-acls.sh --list of one topic, with MATCH: every pattern that covers `payments`.
    out = gregor_acls(n2, "--list", "--topic", "payments", "--resource-pattern-type", "match")
    assert out.returncode == 0, out.stderr
    assert "ResourcePattern(resourceType=TOPIC, name=pay, patternType=PREFIXED)" in out.stdout
    assert "orders" not in out.stdout

    # Delete by filter: every ACL of User:bob.
    bob = AclBindingFilter(ResourceType.ANY, None, ResourcePatternType.ANY, "User:bob", None,
                           AclOperation.ANY, AclPermissionType.ANY)
    deleted = admin.delete_acls([bob])[bob].result(timeout=30)
    assert [(b.name, b.principal) for b in deleted] == [("app-", "User:bob")]
    # The CLI removes by resource, without asking with --force.
    out = gregor_acls(n0, "--remove", "--force", "--allow-principal", "User:alice",
                      "--operation", "Read", "--topic", "orders")
    assert out.returncode == 0, out.stderr
    wait_until(lambda: describe_all(n2) == (0, {CAROL_WRITE_PAY}), 1.0,
               "node 2 to see the deletions")

    # A restarted node rebuilds the same ACLs from the metadata log.
    n2.stop()
    n2.start()
    n2.wait_ready()
    wait_until(lambda: describe_all(n2) == (0, {CAROL_WRITE_PAY}), 15,
               "the restarted node to describe the ACLs")


@pytest.mark.timeout(120)
def test_bad_bindings_get_invalid_request(cluster_factory):
    c = cluster_factory(3, overrides=AUTHORIZER)
    n1 = c.nodes[1]
    results = create_raw(n1, [
        (4, "my-cluster", 3, "User:a", "*", 3, 3),   # the cluster's only name is kafka-cluster
        (2, "", 3, "User:a", "*", 3, 3),             # empty name
        (2, "t", 2, "User:a", "*", 3, 3),            # MATCH is a filter, not a pattern
        (2, "t", 3, "alice", "*", 3, 3),             # principal without a type
        (2, "t", 3, "User:a", "*", 1, 3),            # operation ANY
        (2, "t", 3, "User:a", "*", 3, 1),            # permission ANY
        (1, "t", 3, "User:a", "*", 3, 3),            # resource type ANY
        (4, "kafka-cluster", 3, "User:a", "*", 12, 3),  # fine: IDEMPOTENT_WRITE on the cluster
    ])
    codes = [e for e, _ in results]
    assert codes == [kwire.INVALID_REQUEST] * 7 + [kwire.NONE], results
    assert "The only valid name for the CLUSTER resource is kafka-cluster" in results[0][1]
    assert "Could not parse principal" in results[3][1]
    wait_until(lambda: describe_all(c.nodes[0])[1] == {(4, "kafka-cluster", 3, "User:a", "*",
                                                        12, 3)},
               1.0, "node 0 to describe the one valid ACL")

    out = gregor_acls(n1, "--add", "--allow-principal", "User:a", "--operation",
                      "IdempotentWrite", "--group", "g")
    assert out.returncode != 0
    assert "ResourceType GROUP only supports operations Read, Describe, Delete, All" in out.stderr


def test_without_an_authorizer_the_acl_apis_answer_security_disabled(broker):
    assert describe_all(broker)[0] == SECURITY_DISABLED
    assert create_raw(broker, [ALICE_READ_ORDERS]) == [(SECURITY_DISABLED,
                                                        "No Authorizer is configured.")]
    assert delete_raw(broker) == SECURITY_DISABLED
    out = gregor_acls(broker, "--list")
    assert out.returncode != 0
    assert "SECURITY_DISABLED" in out.stderr and "No Authorizer is configured" in out.stderr, \
        out.stderr
