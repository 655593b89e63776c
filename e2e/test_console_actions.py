"""The console's actions (`console.actions.enable`) against real brokers, checked with a Kafka
client (confluent-kafka) and headless Chromium (screenshots under the test's temporary
directory, as the other console tests save them):

- off by default: every action answers 403 naming the setting, GET on an action is 405, and the
  Topics page shows no action controls;
- on, without an authorizer: a topic is created (with the partitions asked) and deleted, an
  empty group's offsets are reset to the latest, an offset and the earliest, a live group's
  reset is refused as kafka-consumer-groups.sh refuses it; cross-site POSTs (a foreign Origin,
  no marker header, a form body) are refused; the pages show their action controls;
- on a 3-node cluster (auto.leader.rebalance.enable=false), a preferred election moves a
  partition's leadership back to its preferred replica after that broker restarted;
- on a 2-node cluster, a group's reset asked of a node that does not coordinate it is relayed to
  its coordinator's console for the viewer, which resets it (a relayed reset is not relayed
  again: NOT_COORDINATOR naming the coordinator);
- with the authorizer and a metrics-listener login: a user without ACLs is refused with
  TOPIC_AUTHORIZATION_FAILED, CLUSTER_AUTHORIZATION_FAILED and GROUP_AUTHORIZATION_FAILED, as the
  Kafka APIs refuse; once granted the ACLs, the same actions succeed.
"""

import base64
import json
import urllib.error
import urllib.request

import pytest
from confluent_kafka import Consumer, TopicPartition
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from clients import create_topic, produce
from conftest import NotYet, free_port, wait_until
from test_console import Browser, create_assigned, page
from test_console_security import (ALICE_PW, pki, start,  # noqa: F401 (pki: fixture)
                                   tls_context)
from test_metrics import http_get

MARKER = {"X-Gregor-Console": "1", "Content-Type": "application/json"}


def post(url, action, body, headers=MARKER, context=None, user=None, password=None):
    """(status, JSON answer) of a POST of an action."""
    req = urllib.request.Request(f"{url}/ui/api/actions/{action}", method="POST",
                                 data=json.dumps(body).encode())
    for k, v in headers.items():
        req.add_header(k, v)
    if user is not None:
        token = base64.b64encode(f"{user}:{password}".encode()).decode()
        req.add_header("Authorization", f"Basic {token}")
    try:
        with urllib.request.urlopen(req, timeout=40, context=context) as r:
            return r.status, json.loads(r.read())
    except urllib.error.HTTPError as e:
        return e.code, json.loads(e.read())


def errors(answer):
    return [r["error"] for r in answer["results"]]


def console_broker(start_broker, enable):
    port = free_port()
    overrides = {"metrics.listener": f"http://127.0.0.1:{port}"}
    if enable:
        overrides["console.actions.enable"] = "true"
    b = start_broker(overrides=overrides)
    b.metrics_port = port
    b.url = f"http://127.0.0.1:{port}"
    return b


def test_actions_are_off_by_default(start_broker, tmp_path):
    b = console_broker(start_broker, enable=False)
    status, _, body = http_get(b.metrics_port, "/ui/api/actions")
    assert status == 200 and json.loads(body)["enabled"] is False, body
    for action, body in (("create-topic", {"topic": "x", "partitions": 1, "replication_factor": 1}),
                         ("delete-topic", {"topic": "x"}), ("elect-leaders", {}),
                         ("reset-offsets", {"group": "g", "topic": "x", "to": "earliest"})):
        status, answer = post(b.url, action, body)
        assert status == 403 and "console.actions.enable" in answer["error"], (action, answer)
    status, _, body = http_get(b.metrics_port, "/ui/api/actions/create-topic")
    assert status == 405, body
    assert "x" not in AdminClient({"bootstrap.servers": b.bootstrap}).list_topics(timeout=10).topics
    create_topic(b, "shown", partitions=1)
    browser = Browser(tmp_path)
    main = page(browser, b.metrics_port, "/topics")
    assert not main.find_all(id="topic-actions")
    assert not main.find_all("button"), "no action buttons while actions are off"
    browser.screenshot(f"{b.url}/ui/#/topics", "actions-off-topics")


def committed(b, group, topic, partitions):
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": group})
    try:
        got = c.committed([TopicPartition(topic, p) for p in range(partitions)], timeout=10)
        return [tp.offset for tp in got]
    finally:
        c.close()


def check_reset(b, topic):
    produce(b, topic, [{"partition": p, "value": b"v"} for p in (0, 1) for _ in range(10)])
    c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "resettable"})
    c.commit(offsets=[TopicPartition(topic, p, 2) for p in (0, 1)], asynchronous=False)
    c.close()
    for to, extra, want in (("latest", {}, [10, 10]), ("offset", {"offset": 4}, [4, 4]),
                            ("offset", {"offset": 99}, [10, 10]), ("earliest", {}, [0, 0])):
        body = dict({"group": "resettable", "topic": topic, "to": to}, **extra)
        status, answer = post(b.url, "reset-offsets", body)
        assert status == 200 and answer["ok"], answer
        assert committed(b, "resettable", topic, 2) == want, (to, extra)
    # A live group is refused, as kafka-consumer-groups.sh refuses it.
    live = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "live",
                     "auto.offset.reset": "earliest"})
    live.subscribe([topic])
    try:
        wait_until(lambda: live.poll(0.5) is not None or None, 30, "the live group to consume")
        status, answer = post(b.url, "reset-offsets", {"group": "live", "topic": topic, "to": "latest"})
        assert status == 409 and errors(answer) == ["NON_EMPTY_GROUP"], answer
        assert "inactive" in answer["results"][0]["message"]
    finally:
        live.close()


def check_cross_site(b):
    body = {"topic": "evil", "partitions": 1, "replication_factor": 1}
    for headers, why in ((dict(MARKER, Origin="http://evil.example"), "cross-site"),
                         ({"Content-Type": "application/json"}, "x-gregor-console"),
                         ({"X-Gregor-Console": "1", "Content-Type": "text/plain"}, "JSON")):
        status, answer = post(b.url, "create-topic", body, headers=headers)
        assert status == 403 and why in answer["error"], (headers, answer)
    status, answer = post(b.url, "create-topic", body,
                          headers=dict(MARKER, Origin=b.url))
    assert status == 200, answer
    status, answer = post(b.url, "delete-topic", {"topic": "evil"})
    assert status == 200, answer


def test_actions_change_the_cluster_without_an_authorizer(start_broker, tmp_path):
    b = console_broker(start_broker, enable=True)
    admin = AdminClient({"bootstrap.servers": b.bootstrap})
    status, answer = post(b.url, "create-topic",
                          {"topic": "made-here", "partitions": 2, "replication_factor": 1})
    assert status == 200 and answer["ok"] and answer["principal"] == "User:ANONYMOUS", answer
    topics = admin.list_topics(timeout=10).topics
    assert len(topics["made-here"].partitions) == 2
    status, answer = post(b.url, "create-topic",
                          {"topic": "made-here", "partitions": 1, "replication_factor": 1})
    assert status == 409 and errors(answer) == ["TOPIC_ALREADY_EXISTS"], answer

    check_reset(b, "made-here")
    check_cross_site(b)

    status, answer = post(b.url, "elect-leaders", {"topic": "made-here"})
    assert status == 200 and set(errors(answer)) == {"ELECTION_NOT_NEEDED"}, answer

    browser = Browser(tmp_path)
    main = page(browser, b.metrics_port, "/topics")
    assert main.find("section", id="topic-actions").find("button", id="create-topic")
    assert main.find("section", data_topic="made-here").find("button", data_action="delete-topic")
    browser.screenshot(f"{b.url}/ui/#/topics", "actions-on-topics")
    group = page(browser, b.metrics_port, "/group/resettable")
    assert group.find("section", id="group-actions").find("button", id="reset-offsets")
    browser.screenshot(f"{b.url}/ui/#/group/resettable", "actions-on-group")

    status, answer = post(b.url, "delete-topic", {"topic": "made-here"})
    assert status == 200 and answer["ok"], answer
    wait_until(lambda: "made-here" not in admin.list_topics(timeout=10).topics or None, 20,
               "the deleted topic to disappear")


@pytest.mark.timeout(240)
def test_a_preferred_election_moves_leadership_back(cluster_factory):
    c = cluster_factory(3, metrics=True, overrides={"auto.leader.rebalance.enable": "false",
                                                    "console.actions.enable": "true"})
    nodes = {n.node_id: n for n in c.nodes.values()}
    topic = "elect-me"
    create_assigned(nodes[1], topic, [(0, [0, 1, 2])])

    def state():
        _, parts = nodes[1].metadata([topic])["topics"][topic]
        _, leader, _, isr = parts[0]
        return leader, sorted(isr)

    wait_until(lambda: state() == (0, [0, 1, 2]) or None, 30, "node 0 to lead with a full ISR")
    nodes[0].stop()
    wait_until(lambda: state()[0] in (1, 2) or None, 30, "leadership to leave node 0")
    nodes[0].start()
    nodes[0].wait_ready()
    wait_until(lambda: state()[1] == [0, 1, 2] or None, 40, "node 0 back in the ISR")
    assert state()[0] != 0, "nothing moved leadership back by itself"
    url = f"http://127.0.0.1:{nodes[1].metrics_port}"
    status, answer = post(url, "elect-leaders", {"topic": topic})
    assert status == 200 and errors(answer) == ["NONE"], answer
    wait_until(lambda: state()[0] == 0 or None, 20, "the preferred replica to lead again")


@pytest.mark.timeout(180)
def test_a_group_is_reset_from_any_node_through_its_coordinator(cluster_factory):
    c = cluster_factory(2, metrics=True, overrides={"console.actions.enable": "true"})
    nodes = {n.node_id: n for n in c.nodes.values()}
    some = next(iter(nodes.values()))
    create_assigned(some, "reset-here", [(0, [0, 1])])
    produce(some, "reset-here", [{"partition": 0, "value": b"%d" % i} for i in range(5)])
    groups = [f"far-{i}" for i in range(8)]
    for g in groups:
        consumer = Consumer({"bootstrap.servers": some.bootstrap, "group.id": g})
        consumer.commit(offsets=[TopicPartition("reset-here", 0, 0)], asynchronous=False)
        consumer.close()

    def coordinators():
        _, _, body = http_get(some.metrics_port, "/ui/api/groups")
        found = {g["group_id"]: g["coordinator"] for g in json.loads(body)["groups"]}
        return found if all(g in found for g in groups) else None

    found = wait_until(coordinators, 30, "every group listed with its coordinator")
    group = next((g for g in groups if found[g] != some.node_id), None)
    assert group, f"all eight groups coordinated by node {some.node_id}: {found}"
    coordinator = nodes[found[group]]
    url = f"http://127.0.0.1:{some.metrics_port}"
    body = {"group": group, "topic": "reset-here", "to": "latest"}
    # A reset another node relayed is not relayed on: NOT_COORDINATOR naming the coordinator.
    relayed = {**MARKER, "X-Gregor-Console": "relayed-by-9"}
    status, answer = post(url, "reset-offsets", body, headers=relayed)
    assert status == 409 and errors(answer) == ["NOT_COORDINATOR"], answer
    assert f"node {coordinator.node_id}'s console" in answer["results"][0]["message"], answer
    # From the page: relayed to the coordinator's console, which resets the group.
    status, answer = post(url, "reset-offsets", body)
    assert status == 200 and answer["ok"] and answer["via_node"] == coordinator.node_id, answer
    probe = Consumer({"bootstrap.servers": some.bootstrap, "group.id": group})
    committed = probe.committed([TopicPartition("reset-here", 0)], timeout=20)
    probe.close()
    assert committed[0].offset == 5, committed
    # On the coordinator itself, at once.
    body["to"] = "earliest"
    status, answer = post(f"http://127.0.0.1:{coordinator.metrics_port}", "reset-offsets", body)
    assert status == 200 and answer["ok"] and "via_node" not in answer, answer


def grant(admin, resource_type, name, operations, pattern=ResourcePatternType.PREFIXED):
    bindings = [AclBinding(resource_type, name, pattern, "User:alice", "*", op,
                           AclPermissionType.ALLOW) for op in operations]
    for f in admin.create_acls(bindings).values():
        f.result(20)


def test_acls_decide_the_actions(tmp_path, pki):  # noqa: F811 (pki: fixture)
    b = start(tmp_path, pki, "basic", **{"console.actions.enable": "true"})
    try:
        url = f"https://127.0.0.1:{b.metrics_port}"
        ctx = tls_context(pki)

        def act(action, body):
            return post(url, action, body, context=ctx, user="alice", password=ALICE_PW)

        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        create_topic(b, "a-old", partitions=1)
        c = Consumer({"bootstrap.servers": b.bootstrap, "group.id": "a-grp"})
        c.commit(offsets=[TopicPartition("a-old", 0, 0)], asynchronous=False)
        c.close()
        asked = [("create-topic", {"topic": "a-new", "partitions": 1, "replication_factor": 1},
                  "TOPIC_AUTHORIZATION_FAILED"),
                 ("delete-topic", {"topic": "a-old"}, "TOPIC_AUTHORIZATION_FAILED"),
                 ("elect-leaders", {}, "CLUSTER_AUTHORIZATION_FAILED"),
                 ("reset-offsets", {"group": "a-grp", "topic": "a-old", "to": "earliest"},
                  "GROUP_AUTHORIZATION_FAILED")]
        for action, body, refusal in asked:
            status, answer = act(action, body)
            assert status == 403 and errors(answer) == [refusal], (action, answer)
            assert answer["principal"] == "User:alice"
        grant(admin, ResourceType.TOPIC, "a-", [AclOperation.CREATE, AclOperation.DELETE,
                                                AclOperation.READ, AclOperation.DESCRIBE])
        grant(admin, ResourceType.GROUP, "a-", [AclOperation.READ, AclOperation.DESCRIBE])
        grant(admin, ResourceType.BROKER, "kafka-cluster", [AclOperation.ALTER],
              ResourcePatternType.LITERAL)

        def allowed():
            status, answer = act("reset-offsets",
                                 {"group": "a-grp", "topic": "a-old", "to": "latest"})
            if status != 200:
                raise NotYet(answer)
            return answer

        wait_until(allowed, 20, "alice's ACLs to apply")
        status, answer = act("create-topic",
                             {"topic": "a-new", "partitions": 1, "replication_factor": 1})
        assert status == 200, answer
        status, answer = act("elect-leaders", {})
        assert status == 200, answer
        status, answer = act("delete-topic", {"topic": "a-old"})
        assert status == 200, answer
        topics = admin.list_topics(timeout=10).topics
        assert "a-new" in topics
        wait_until(lambda: "a-old" not in admin.list_topics(timeout=10).topics or None, 20,
                   "a-old deleted")
        # Still refused outside her prefix.
        status, answer = act("create-topic", {"topic": "b-new", "partitions": 1,
                                              "replication_factor": 1})
        assert status == 403 and errors(answer) == ["TOPIC_AUTHORIZATION_FAILED"], answer
    finally:
        assert b.stop() == 0
