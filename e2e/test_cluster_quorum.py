"""The controller quorum on real processes: three combined broker+controller nodes (cluster.py),
topics created through any node, failover of the active controller after SIGKILL, SIGSTOP and
isolation, fencing of a silent broker, controlled shutdown, snapshot catch-up."""

import time

import pytest

import kwire
from conftest import eventually, wait_until

NOT_CONTROLLER = 41
REQUEST_TIMED_OUT = 7
RETRIABLE = (NOT_CONTROLLER, REQUEST_TIMED_OUT)


def topics_on(node):
    return set(node.metadata()["topics"])


def wait_topic_everywhere(nodes, name, timeout=10):
    for n in nodes:
        wait_until(lambda: name in topics_on(n), timeout, f"{name} on node {n.node_id}")


def create_retrying(node, name, deadline_s=30, **kw):
    """CreateTopics through `node`, retrying retriable errors, as an admin client does."""
    deadline = time.monotonic() + deadline_s
    while True:
        err, msg = node.create_topic(name, **kw)
        if err == 0:
            return
        assert err in RETRIABLE, f"CreateTopics {name} through node {node.node_id}: {err} {msg}"
        assert time.monotonic() < deadline, f"CreateTopics {name} kept failing: {err} {msg}"
        time.sleep(0.1)


@pytest.mark.timeout(120)
def test_topics_created_through_each_node_appear_on_all(cluster_factory):
    c = cluster_factory(3, racks=["a", "b", "c"])
    nodes = list(c.nodes.values())
    controller = c.controller()
    for n in nodes:
        md = n.metadata()
        assert sorted(b[0] for b in md["brokers"]) == [0, 1, 2]
        assert {b[0]: b[3] for b in md["brokers"]} == {0: "a", 1: "b", 2: "c"}
        # Metadata names the node asked (a live broker that forwards admin requests);
        # DescribeCluster names the active controller.
        assert md["controller_id"] == n.node_id
        assert n.active_controller_id() == controller.node_id
    for n in nodes:
        name = f"via-node-{n.node_id}"
        err, msg = n.create_topic(name, partitions=6, replication_factor=3)
        assert err == 0, (err, msg)
        # Visible at once on the node the request went to, even when it was forwarded.
        assert name in topics_on(n)
    for n in nodes:
        wait_topic_everywhere(nodes, f"via-node-{n.node_id}")
    parts = nodes[0].metadata(["via-node-0"])["topics"]["via-node-0"][1]
    leaders = [p[1] for p in parts.values()]
    for err, leader, replicas, isr in parts.values():
        assert err == 0 and sorted(replicas) == [0, 1, 2] and leader == replicas[0]
    # Preferred leaders are spread over the brokers (Kafka's placement: 2 each of 6).
    assert sorted(leaders.count(b) for b in (0, 1, 2)) == [2, 2, 2]
    # An explicit assignment is honoured exactly, whichever node receives it.
    err, _ = nodes[2].create_topic("pinned", partitions=-1, replication_factor=-1,
                                   assignments=[(0, [2, 0]), (1, [1, 2])])
    assert err == 0
    wait_topic_everywhere(nodes, "pinned")
    pinned = nodes[1].metadata(["pinned"])["topics"]["pinned"][1]
    assert [pinned[0][2], pinned[1][2]] == [[2, 0], [1, 2]]
    # Errors come back through forwarding too.
    follower = next(n for n in nodes if n.node_id != controller.node_id)
    err, _ = follower.create_topic("via-node-0")
    assert err == 36  # TOPIC_ALREADY_EXISTS


@pytest.mark.timeout(150)
def test_sigkill_of_the_active_controller_elects_another_and_the_node_catches_up(cluster_factory):
    c = cluster_factory(3)
    old = c.controller()
    create_retrying(old, "before")
    old.kill()
    survivors = [n for n in c.nodes.values() if n is not old]
    t0 = time.monotonic()
    new = c.controller(among=survivors)
    assert new is not old
    for s in survivors:
        create_retrying(s, f"after-through-{s.node_id}")
    elapsed = time.monotonic() - t0
    # docs/cluster.md, BENCHMARKS.md ("Failover as a user feels it"): CreateTopics through another
    # node works within 1 s of the active controller's SIGKILL with the default 300 ms election
    # timeout; these nodes wait 500 ms (cluster.py). A 2.5x margin for a loaded 2-core machine.
    bound = 2.5 * (1.0 + 0.2)
    assert elapsed < bound, f"controller failover took {elapsed:.1f}s (bound {bound:.1f}s)"
    old.start()
    old.wait_ready()
    want = {f"after-through-{s.node_id}" for s in survivors} | {"before"}
    wait_until(lambda: want <= topics_on(old), 15, "the restarted node to catch up")
    create_retrying(old, "through-the-restarted-node")
    wait_topic_everywhere(list(c.nodes.values()), "through-the-restarted-node")


@pytest.mark.timeout(120)
def test_a_forwarded_admin_request_is_answered_within_its_own_timeout(cluster_factory):
    """With no controller to reach, a broker stops forwarding an admin request once the
    client's `timeout_ms` has passed (it used to keep trying for 30 s, and could apply a
    request its client had given up on after a newer one), and answers a retriable error."""
    c = cluster_factory(3)
    controller = c.controller()
    survivor = next(n for n in c.nodes.values() if n is not controller)
    for n in c.nodes.values():
        if n is not survivor:
            n.kill()
    t0 = time.monotonic()
    with kwire.Conn("127.0.0.1", survivor.port, timeout=40) as conn:
        err, msg = kwire.create_topic(conn, "no-quorum", timeout_ms=2000)
    elapsed = time.monotonic() - t0
    assert err in RETRIABLE, (err, msg)
    assert elapsed < 12, f"answered after {elapsed:.1f}s for a 2 s timeout_ms"


@pytest.mark.timeout(150)
def test_sigstop_of_the_active_controller_then_sigcont_steps_down(cluster_factory):
    c = cluster_factory(3)
    old = c.controller()
    old.pause()
    survivors = [n for n in c.nodes.values() if n is not old]
    new = c.controller(among=survivors)
    assert new is not old
    create_retrying(survivors[0], "while-paused")
    old.resume()
    # It learns the new term, steps down, and has every committed change.
    wait_until(lambda: old.active_controller_id() == new.node_id, 15,
               "the resumed node to follow the new controller")
    wait_until(lambda: "while-paused" in topics_on(old), 10, "the resumed node to catch up")
    images = [topics_on(n) for n in c.nodes.values()]
    assert all(i == images[0] for i in images), images
    create_retrying(old, "through-the-old-controller")
    wait_topic_everywhere(list(c.nodes.values()), "through-the-old-controller")


@pytest.mark.timeout(150)
def test_isolated_controller_commits_nothing_while_the_majority_elects_another(cluster_factory):
    c = cluster_factory(3)
    old = c.controller()
    c.isolate(old.node_id)
    majority = [n for n in c.nodes.values() if n is not old]
    new = c.controller(among=majority)
    assert new is not old
    create_retrying(majority[0], "majority-side")
    # The cut-off node cannot commit: a write through it fails with a retriable error.
    t0 = time.monotonic()
    err, _ = old.create_topic("minority-side", timeout=40)
    assert err in RETRIABLE, err
    assert time.monotonic() - t0 < 35
    assert "minority-side" not in topics_on(old)
    c.heal(old.node_id)
    wait_until(lambda: old.active_controller_id() == new.node_id, 20,
               "the healed node to follow the new controller")
    wait_until(lambda: "majority-side" in topics_on(old), 10, "the healed node to catch up")
    time.sleep(1)  # deliberate: time passes and the uncommitted topic must not appear anywhere
    for n in c.nodes.values():
        assert "minority-side" not in topics_on(n), f"node {n.node_id} has an uncommitted topic"


@pytest.mark.timeout(120)
def test_a_silent_broker_is_fenced_and_unfenced_when_it_returns(cluster_factory):
    c = cluster_factory(3)
    controller = c.controller()
    victim = next(n for n in c.nodes.values() if n is not controller)
    err, _ = controller.create_topic("spread", partitions=6, replication_factor=3)
    assert err == 0
    wait_topic_everywhere(list(c.nodes.values()), "spread")
    led = [p for p, v in controller.metadata(["spread"])["topics"]["spread"][1].items()
           if v[1] == victim.node_id]
    assert led, "the victim leads some partitions"
    victim.pause()
    t0 = time.monotonic()

    def fenced():
        md = controller.metadata(["spread"])
        listed = victim.node_id in controller.unfenced_brokers()
        leads = any(v[1] == victim.node_id for v in md["topics"]["spread"][1].values())
        in_isr = any(victim.node_id in v[3] for v in md["topics"]["spread"][1].values())
        return not listed and not leads and not in_isr

    wait_until(fenced, 15, "the paused broker to be fenced")
    took = time.monotonic() - t0
    assert took >= 2.5, f"fenced after {took:.1f}s, before broker.session.timeout.ms (3 s)"
    victim.resume()
    wait_until(lambda: victim.node_id in controller.unfenced_brokers(), 15,
               "the resumed broker to be unfenced")


@pytest.mark.timeout(120)
def test_controlled_shutdown_moves_leaderships_away_first(cluster_factory):
    c = cluster_factory(3)
    controller = c.controller()
    leaving = next(n for n in c.nodes.values() if n is not controller)
    err, _ = controller.create_topic("handover", partitions=6, replication_factor=3)
    assert err == 0
    wait_topic_everywhere(list(c.nodes.values()), "handover")
    t0 = time.monotonic()
    assert leaving.stop() == 0
    took = time.monotonic() - t0
    md = controller.metadata(["handover"])
    parts = md["topics"]["handover"][1]
    # Immediately after it exited, nothing is led by it and every partition has a leader.
    assert all(v[1] not in (leaving.node_id, -1) for v in parts.values()), parts
    assert all(leaving.node_id not in v[3] for v in parts.values()), parts
    assert leaving.node_id not in controller.unfenced_brokers()
    assert took < 10, f"controlled shutdown took {took:.1f}s"
    leaving.start()
    leaving.wait_ready()


@pytest.mark.timeout(150)
def test_a_node_down_while_the_log_was_compacted_catches_up_from_a_snapshot(cluster_factory):
    c = cluster_factory(3, overrides={"metadata.log.max.record.bytes.between.snapshots": "2000"})
    controller = c.controller()
    late = next(n for n in c.nodes.values() if n is not controller)
    assert late.stop() == 0
    for i in range(30):
        create_retrying(controller, f"snap-{i}", partitions=2, replication_factor=2)
    leader_dir = controller.data_dir / "__cluster_metadata-0"
    wait_until(lambda: (leader_dir / "snapshot").exists(), 10, "a snapshot on the controller")
    late.start()
    late.wait_ready()
    wait_until(lambda: {f"snap-{i}" for i in range(30)} <= topics_on(late), 15,
               "the late node to catch up")
    assert (late.data_dir / "__cluster_metadata-0" / "snapshot").exists(), \
        "the late node installed a snapshot"


@pytest.mark.timeout(150)
def test_three_voters_and_two_broker_only_nodes(cluster_factory):
    c = cluster_factory(3, brokers=2, racks=["r0", "r1"])
    nodes = list(c.nodes.values())
    observers = [n for n in nodes if not n.is_controller]
    assert [n.node_id for n in observers] == [3, 4]
    for n in nodes:
        assert sorted(b[0] for b in n.metadata()["brokers"]) == [0, 1, 2, 3, 4]
    # Rack-aware placement: with two racks, every partition of a two-replica topic has one
    # replica on each (nodes 0, 2, 4 are on r0; 1 and 3 on r1).
    err, _ = observers[1].create_topic("racked", partitions=10, replication_factor=2)
    assert err == 0
    rack = {0: "r0", 1: "r1", 2: "r0", 3: "r1", 4: "r0"}
    for p, v in observers[1].metadata(["racked"])["topics"]["racked"][1].items():
        assert sorted(rack[r] for r in v[2]) == ["r0", "r1"], (p, v)
    # Admin requests through a broker-only node are forwarded to the active controller.
    err, msg = observers[0].create_topic("wide", partitions=5, replication_factor=5)
    assert err == 0, (err, msg)
    assert "wide" in topics_on(observers[0])
    wait_topic_everywhere(nodes, "wide")
    leaders = [v[1] for v in nodes[0].metadata(["wide"])["topics"]["wide"][1].values()]
    assert sorted(leaders) == [0, 1, 2, 3, 4], "every broker, voter or not, leads one"
    # The broker-only nodes follow a controller failover.
    old = c.controller()
    old.kill()
    rest = [n for n in nodes if n is not old]
    new = c.controller(among=rest)
    assert new is not old and new.is_controller
    create_retrying(observers[1], "after-failover")
    wait_topic_everywhere(rest, "after-failover")
    # A broker-only node that restarts fetches the metadata again (it keeps none on disk).
    assert observers[0].stop() == 0
    observers[0].start()
    observers[0].wait_ready()
    assert {"wide", "after-failover"} <= topics_on(observers[0])


@pytest.mark.timeout(90)
def test_one_voter_and_broker_only_nodes_configured_alike_form_a_cluster(cluster_factory):
    """The same controller.quorum.voters on every node and no --cluster-id: every node derives
    the same cluster id from the voters, with one voter as with several."""
    c = cluster_factory(1, brokers=2, explicit_cluster_id=False, proxied=False)
    for n in c.nodes.values():
        assert sorted(b[0] for b in n.metadata()["brokers"]) == [0, 1, 2]
    ids = set()
    for n in c.nodes.values():
        text = (n.data_dir / "meta.properties").read_text()
        ids.add(next(line for line in text.splitlines() if line.startswith("cluster.id=")))
    assert len(ids) == 1, ids


@pytest.mark.timeout(120)
def test_controller_only_voters_serve_brokers_but_not_clients(cluster_factory):
    c = cluster_factory(3, brokers=2, controller_only=True)
    brokers = c.brokers()
    assert [n.node_id for n in brokers] == [3, 4]
    for b in brokers:
        md = b.metadata()
        assert sorted(x[0] for x in md["brokers"]) == [3, 4]
        # Clients are pointed at the broker they asked, which forwards to the controller quorum.
        assert md["controller_id"] == b.node_id
    err, msg = brokers[1].create_topic("placed", partitions=4, replication_factor=2)
    assert err == 0, (err, msg)
    wait_topic_everywhere(brokers, "placed")
    parts = brokers[0].metadata(["placed"])["topics"]["placed"][1]
    assert all(sorted(v[2]) == [3, 4] for v in parts.values()), parts


@pytest.mark.timeout(120)
def test_a_killed_broker_is_fenced_before_its_session_times_out(cluster_factory):
    # A long session: fencing within it can only come from noticing the dead process.
    c = cluster_factory(3, brokers=1, overrides={"broker.session.timeout.ms": "30000"})
    controller = c.controller()
    victim = c.nodes[3]
    err, _ = controller.create_topic("led", partitions=4, replication_factor=4)
    assert err == 0
    wait_topic_everywhere(c.brokers(), "led")
    victim.kill()
    t0 = time.monotonic()

    def fenced():
        md = controller.metadata(["led"])
        gone = victim.node_id not in controller.unfenced_brokers()
        leads = any(v[1] == victim.node_id for v in md["topics"]["led"][1].values())
        return gone and not leads

    wait_until(fenced, 10, "the killed broker to be fenced")
    took = time.monotonic() - t0
    assert took < 10, took
    # A paused broker's connections stay open: it is left to the session timeout.
    other = next(n for n in c.nodes.values() if n.is_broker and n is not controller
                 and n is not victim)
    other.pause()
    assert not eventually(lambda: other.node_id not in controller.unfenced_brokers(), 4)
    other.resume()
    victim.start()
    victim.wait_ready()


@pytest.mark.timeout(120)
def test_gregor_cluster_up_starts_streams_and_stops_a_cluster(tmp_path):
    import signal
    import subprocess

    from conftest import free_port, gregor_bin

    # Nine consecutive free ports (clients, quorum, metrics) are not guaranteed; pick a base
    # whose nine ports are free now.
    while True:
        base = free_port()
        if base + 8 < 65536 and all(_port_free(base + i) for i in range(9)):
            break
    proc = subprocess.Popen(
        [gregor_bin(), "cluster", "up", "--nodes", "3", "--base-port", str(base),
         "--data-dir", str(tmp_path / "cluster"), "--racks", "2",
         "--override", "controller.quorum.election.timeout.ms=500"],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            line = proc.stdout.readline()
            assert line, "cluster up exited early:\n" + "".join(lines[-40:])
            lines.append(line)
            if "bootstrap servers:" in line:
                break
        bootstrap = lines[-1].split("bootstrap servers:")[1].strip().split(",")
        assert bootstrap == [f"127.0.0.1:{base + 2 * i}" for i in range(3)]
        # Every node's log lines are there, each with its prefix.
        assert {f"[node {i}]" for i in range(3)} <= {l.split("]")[0] + "]" for l in lines
                                                      if l.startswith("[node ")}
        import kwire
        with kwire.Conn("127.0.0.1", base, timeout=5) as c:
            md = kwire.metadata_v1(c)
        assert sorted(b[0] for b in md["brokers"]) == [0, 1, 2]
        assert sorted(b[3] for b in md["brokers"]) == ["rack-0", "rack-0", "rack-1"]
        with kwire.Conn("127.0.0.1", base + 2, timeout=35) as c:
            assert kwire.create_topic(c, "tried", 3, 3)[0] == 0
    finally:
        proc.send_signal(signal.SIGTERM)
        rest, _ = proc.communicate(timeout=60)
    out = "".join(lines) + rest
    assert proc.returncode == 0, out[-3000:]
    assert "all nodes stopped" in out
    assert out.count("broker stopped cleanly") == 3, out[-3000:]


def _port_free(port):
    import socket
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
            return True
        except OSError:
            return False
