"""The controller quorum's connections on a running cluster: three voters under traffic (topics
created, records produced with acks=all) keep a few long-lived connections to each peer's
controller listener, reused for every heartbeat and append; no connection per request, so no
pile of TIME_WAIT sockets on the controller ports."""

import time

import pytest

from clients import produce
from test_cluster_quorum import create_retrying
from test_controller_sasl import controller_connections

TIME_WAIT = "06"
# Per directed pair of nodes: the quorum's pooled connection (the leader's appends and
# heartbeats, reused) and, towards the active controller, the broker's channel (its heartbeats
# and AlterPartition); a connection per request would show tens.
MAX_PER_PEER = 2


def time_wait_on(ports):
    """Sockets in TIME_WAIT with one end on one of `ports` (owned by no process any more), as
    (local port, remote port)."""
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                fields = line.split()
                ends = (int(fields[1].rsplit(":", 1)[1], 16), int(fields[2].rsplit(":", 1)[1], 16))
                if fields[3] == TIME_WAIT and set(ends) & ports:
                    found.append(ends)
    return found


@pytest.mark.timeout(120)
def test_voters_reuse_a_few_connections_per_peer_under_traffic(cluster_factory):
    c = cluster_factory(3, proxied=False)
    nodes = list(c.nodes.values())
    ports = {n.controller_port for n in nodes}
    err, msg = nodes[0].create_topic("steady", partitions=3, replication_factor=3)
    assert err == 0, (err, msg)
    c.controller()
    waits_before = time_wait_on(ports)
    most = {}
    deadline = time.monotonic() + 10
    i = 0
    # Deliberately a fixed time: the measurement is of what ten seconds of traffic leave behind.
    while time.monotonic() < deadline:
        create_retrying(nodes[i % 3], f"churn-{i}", partitions=1, replication_factor=3)
        produce(nodes[i % 3], "steady", [{"partition": i % 3, "value": b"v"} for _ in range(50)])
        for n in nodes:
            for peer in nodes:
                if peer is not n:
                    count = len(controller_connections(n, [peer]))
                    key = (n.node_id, peer.node_id)
                    most[key] = max(most.get(key, 0), count)
        i += 1
        time.sleep(0.2)
    waits_after = time_wait_on(ports)
    print(f"{i} rounds; most connections per (node, peer): {sorted(most.items())}; "
          f"TIME_WAIT on the controller ports: {waits_before} -> {waits_after}; controller "
          f"ports {sorted((n.node_id, n.controller_port) for n in nodes)}")
    assert all(v >= 1 for v in most.values()), most
    assert max(most.values()) <= MAX_PER_PEER, most
    # A connection per heartbeat (broker: every 300 ms; quorum: more often) would leave
    # hundreds in ten seconds.
    assert len(waits_after) - len(waits_before) <= 6, (waits_before, waits_after)
