"""The `load` server-side assignor on a KIP-848 group (`group.remote.assignor=load`), on three
nodes: two confluent-kafka members settle on a topic of three partitions, each led by another
node. Producers then make both of one member's partitions hot. The coordinator samples the
partitions on their leaders (this node's and the others'), and its review moves one hot partition
to the idle member in a new group epoch whose cause is `load shifted`, with each move explained
(in the console's JSON and on the group's page in headless Chromium).
The members' own assignment callbacks show the move and never two owners of one partition; a
second review moves nothing more."""

import threading
import time

import pytest
from confluent_kafka import Producer

from clients import conf
from conftest import wait_until
from groups import ConfluentMember, Timeline, partition_of, wait_for_owners
from test_console import Browser, api, page
from test_consumer_protocol import CONSUMER, FAST_GROUPS

LOAD = {**CONSUMER, "group.remote.assignor": "load"}
REVIEW_MS = 1000


class HotProducer:
    """Produces 1 KiB records to `partitions` of `topic`, about 200 a second each, until
    stopped."""

    def __init__(self, node, topic, partitions):
        self.producer = Producer(conf(node, {"acks": "1", "linger.ms": 20}))
        self.topic, self.partitions = topic, partitions
        self.stop_flag = threading.Event()
        self.errors = []
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        value = b"h" * 1024
        while not self.stop_flag.is_set():
            for p in self.partitions:
                for _ in range(10):
                    self.producer.produce(self.topic, value=value, partition=p,
                                          on_delivery=self._delivered)
            self.producer.poll(0.05)
        self.producer.flush(10)

    def _delivered(self, err, _msg):
        if err is not None:
            self.errors.append(err)

    def start(self):
        self.thread.start()
        return self

    def stop(self):
        self.stop_flag.set()
        self.thread.join(20)
        assert not self.errors, self.errors[:5]


def group_json(port, group):
    return api(port, "/ui/api/group?id=" + group)


@pytest.mark.timeout(240)
def test_hot_partitions_of_one_member_are_split_by_a_load_review(cluster_factory, tmp_path):
    overrides = {**FAST_GROUPS, "group.consumer.load.review.interval.ms": str(REVIEW_MS)}
    c = cluster_factory(3, overrides=overrides, metrics=True)
    first = c.nodes[0]
    port = first.metrics_port
    topic, group = "load-skew", "load-skew"
    err, msg = first.create_topic(topic, -1, -1, assignments=[(0, [0]), (1, [1]), (2, [2])])
    assert err == 0, msg
    universe = {(topic, p) for p in range(3)}
    tl = Timeline()
    alpha = ConfluentMember(first, tl, "alpha", group, [topic], "range", extra=LOAD).start()
    beta = None
    producer = None
    try:
        wait_for_owners(tl, lambda s: partition_of(s, ["alpha"], universe), 60,
                        "alpha owns every partition")
        beta = ConfluentMember(first, tl, "beta", group, [topic], "range", extra=LOAD).start()
        settled = wait_for_owners(
            tl, lambda s: partition_of(s, ["alpha", "beta"], universe)
            and sorted(len(s.get(m, ())) for m in ("alpha", "beta")) == [1, 2], 60,
            "alpha and beta share the partitions two to one")
        busy = "alpha" if len(settled["alpha"]) == 2 else "beta"
        idle = "beta" if busy == "alpha" else "alpha"
        hot = sorted(p for _, p in settled[busy])
        g = wait_until(lambda: (lambda g: g if g["state"] == "Stable" else None)(
            group_json(port, group)), 30, "the group stable")
        epoch = g["group_epoch"]

        started = time.monotonic()
        producer = HotProducer(first, topic, hot).start()

        def shifted():
            snap = tl.snapshot()
            owners = {m: {p for _, p in snap.get(m, ())} for m in (busy, idle)}
            split = all(len(owners[m] & set(hot)) == 1 for m in (busy, idle))
            return snap if split and partition_of(snap, [busy, idle], universe) else None

        wait_for_owners(tl, lambda s: shifted(), 60,
                        f"one of {busy}'s hot partitions {hot} moved to {idle}")
        took = time.monotonic() - started
        g = group_json(port, group)
        load_epochs = [e for e in g["epochs"] if e["cause"] == "load shifted"]
        assert len(load_epochs) == 1, [(e["epoch"], e["cause"]) for e in g["epochs"]]
        e = load_epochs[0]
        assert e["epoch"] == epoch + 1 and e["assignor"] == "load", e
        assert any(m.startswith(f"{topic}-") and "balance" in m for m in e["moves"]), e["moves"]
        print(f"hot traffic to a load-shifted assignment in {took:.1f} s; moves: {e['moves']}")
        # The group's page lists the epoch's moves, opened, under the epoch.
        main = page(Browser(tmp_path), port, "/group/" + group)
        item = main.find("li", data_epoch=str(e["epoch"]))
        assert "load shifted" in item.text() and "by the load assignor" in item.text()
        moves = item.find("details")
        assert moves.attrs.get("class") == "epoch-moves", moves.attrs
        assert "open" in moves.attrs, moves.attrs
        assert [li.text() for li in moves.find_all("li")] == e["moves"]

        # Four more reviews with the traffic still hot (nothing to wait for but their
        # absence): the split stands, no new epoch.
        time.sleep(4 * REVIEW_MS / 1000)
        g = group_json(port, group)
        assert g["group_epoch"] == epoch + 1, [(x["epoch"], x["cause"]) for x in g["epochs"]]
    finally:
        if producer:
            producer.stop()
        for m in (alpha, beta):
            if m:
                m.stop()
    assert not tl.violations(), "\n".join(tl.violations()) + "\n" + tl.dump()
