"""A broker that stops answering, as the operator sees it on real processes: the console of
another node shows a frozen (SIGSTOPped) broker as not answering while the metadata still has
it unfenced, then fenced once its session times out, then alive again after SIGCONT. The active
controller's log tells how each broker was fenced: a killed broker by the probe that found its
listener refusing (no "session expired" line for it, even after its session would have timed
out), a frozen one by its session timing out."""

import re
import time

import pytest

from conftest import NotYet, wait_until
from test_console import Browser, api, page


def broker_entry(node, broker_id):
    """Broker `broker_id` as `node`'s console shows it (`/ui/api/cluster`), with the summary."""
    cj = api(node.metrics_port, "/ui/api/cluster")
    b = next((b for b in cj["brokers"] if b["id"] == broker_id), None)
    if b is None:
        raise NotYet(f"broker {broker_id} not in node {node.node_id}'s console: {cj['brokers']}")
    return b, cj["summary"]


@pytest.mark.timeout(180)
def test_a_frozen_broker_is_shown_not_answering_before_it_is_fenced(cluster_factory, tmp_path):
    # Long enough for a loaded machine's browser to draw the page before the fencing.
    session_s = 15
    c = cluster_factory(3, metrics=True,
                        overrides={"broker.session.timeout.ms": str(session_s * 1000)})
    controller = c.controller()
    victim, observer = [n for n in c.nodes.values() if n is not controller]
    browser = Browser(tmp_path)
    b, _ = broker_entry(observer, victim.node_id)
    assert (b["liveness"], b["reachability"]) == ("alive", "accepts connections"), b

    victim.pause()
    try:
        t0 = time.monotonic()

        def not_answering():
            b, summary = broker_entry(observer, victim.node_id)
            return (b, summary) if b["liveness"] == "not answering" else None

        b, summary = wait_until(not_answering, session_s, lambda: "the frozen broker shown not "
                                f"answering: {broker_entry(observer, victim.node_id)}")
        shown_after = time.monotonic() - t0
        assert not b["fenced"] and b["reachability"] == "no answer", b
        assert summary["alive"] == 2 and summary["unreachable"] == 1, summary
        # The metadata (what clients are told) still has it: the controller has not fenced it.
        assert victim.node_id in controller.unfenced_brokers()
        # The page drawn from the observer's metadata: "not answering" is shown only while the
        # metadata has the broker unfenced ("fenced" wins).
        port = observer.metrics_port
        main = page(browser, port, "/brokers")
        row = main.find("tr", data_broker=str(victim.node_id))
        assert row.attrs["data-liveness"] == "not answering", (row.attrs, row.text())
        assert "not answering" in row.text(), row.text()
        assert main.find(id="brokers-alive").find("b").text() == "2 of 3"

        browser.screenshot(f"http://127.0.0.1:{port}/ui/#/brokers", "brokers-not-answering")

        def fenced():
            b, _ = broker_entry(observer, victim.node_id)
            return b if b["liveness"] == "fenced" else None

        b = wait_until(fenced, session_s + 15, lambda: "the frozen broker fenced: "
                       f"{broker_entry(observer, victim.node_id)}")
        took = time.monotonic() - t0
        assert took >= session_s - 0.5, f"fenced after {took:.1f}s, session {session_s}s"
        assert b["fenced"] and victim.node_id not in controller.unfenced_brokers()
        print(f"not answering after {shown_after:.1f}s, fenced after {took:.1f}s")
    finally:
        victim.resume()

    def alive_again():
        b, _ = broker_entry(observer, victim.node_id)
        return b if b["liveness"] == "alive" else None

    b = wait_until(alive_again, 30, lambda: "the resumed broker alive: "
                   f"{broker_entry(observer, victim.node_id)}")
    assert not b["fenced"] and victim.node_id in controller.unfenced_brokers()
    row = page(browser, observer.metrics_port, "/brokers").find(
        "tr", data_broker=str(victim.node_id))
    assert row.attrs["data-liveness"] == "alive", (row.attrs, row.text())


def log_lines(node):
    with open(node.log_path, errors="replace") as f:
        return f.read().splitlines()


def about(broker_id, text, lines):
    """The lines containing `text` whose `broker` field is `broker_id`."""
    field = re.compile(rf"\bbroker={broker_id}\b")
    return [l for l in lines if text in l and field.search(l)]


@pytest.mark.timeout(150)
def test_the_log_says_how_each_broker_was_fenced(cluster_factory):
    session_s = 4
    c = cluster_factory(3, brokers=2,
                        overrides={"broker.session.timeout.ms": str(session_s * 1000)})
    controller = c.controller()
    killed, frozen = c.nodes[3], c.nodes[4]
    killed.kill()
    t0 = time.monotonic()
    wait_until(lambda: killed.node_id not in controller.unfenced_brokers(), session_s,
               "the killed broker fenced before its session timed out")
    probed_in = time.monotonic() - t0
    # Frozen well after the kill, its session ends after the killed one's would have: once it
    # is fenced, a "session expired" line for the killed broker would have been written.
    time.sleep(max(0.0, t0 + 1.5 - time.monotonic()))  # deliberate: the gap between the two
    frozen.pause()
    try:
        t1 = time.monotonic()
        wait_until(lambda: frozen.node_id not in controller.unfenced_brokers(), session_s + 15,
                   "the frozen broker fenced")
        assert time.monotonic() - t1 >= session_s - 0.5
        assert time.monotonic() - t0 > session_s + 1
        assert controller.active_controller_id() == controller.node_id, "the controller moved"
        lines = log_lines(controller)
        told = "\n".join(about(killed.node_id, "", lines))
        # One WARN line for the killed broker, however many of its connections closed.
        warned = about(killed.node_id, " WARN ", lines)
        assert len(warned) == 1, told
        assert "fencing a broker whose process is gone" in warned[0], told
        assert not about(killed.node_id, "session expired", lines), told
        expired = about(frozen.node_id, " WARN ", lines)
        assert len(expired) == 1 and "broker session expired; fencing" in expired[0], expired
        assert not about(frozen.node_id, "process is gone", lines)
        print(f"killed broker fenced after {probed_in:.1f}s")
    finally:
        frozen.resume()
    wait_until(lambda: frozen.node_id in controller.unfenced_brokers(), 30,
               "the resumed broker unfenced")
