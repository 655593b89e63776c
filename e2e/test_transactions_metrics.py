"""Transactions as an operator sees them (issue 39): a confluent-kafka transactional producer
against a broker with metrics.listener, and what /metrics and the console say while its
transaction is open and after it ends: the open-transaction gauges, the last stable offset's lag
behind the high watermark, the commit and abort counters by reason (EndTxn, a newer producer's
fencing, the coordinator's timeout) and the marker-latency histogram; the console's JSON and its
Transactions page (headless Chromium) list the open transaction."""

import pytest

from clients import create_topic
from conftest import wait_until
from test_console import Browser, api, metrics_broker, page
from test_metrics import scrape, value
from test_transactions import stable_end, txn_producer


def metric(b, name, **labels):
    return value(scrape(b.metrics_port), name, **labels)


def partition_json(b, topic, partition=0):
    c = api(b.metrics_port, "/ui/api/cluster")
    t = next(t for t in c["topics"] if t["name"] == topic)
    return next(p for p in t["partitions"] if p["partition"] == partition)


def ended(b, outcome, reason):
    return metric(b, "gregor_transactions_ended_total", outcome=outcome, reason=reason)


@pytest.mark.timeout(120)
def test_an_open_transaction_shows_in_metrics_and_console_until_it_commits(start_broker, tmp_path):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "txm")
    # Before any transaction: every decision series exists, at zero.
    assert ended(b, "commit", "end_txn") == 0
    assert ended(b, "abort", "timeout") == 0

    p = txn_producer(b.bootstrap, "txm-open")
    p.begin_transaction()
    for i in range(5):
        p.produce(topic, value=f"v{i}", partition=0)
    p.flush(30)
    # The five records are below the high watermark, the open transaction holds the LSO at 0.
    assert stable_end(b, topic) == 0
    samples = scrape(b.metrics_port)
    assert value(samples, "gregor_partition_open_transactions", topic=topic, partition=0) == 1
    assert value(samples, "gregor_partition_last_stable_offset_lag_offsets",
                 topic=topic, partition=0) == 5
    assert value(samples, "gregor_transactional_ids", state="Ongoing") == 1
    assert value(samples, "gregor_partition_last_stable_offset_stalled_seconds",
                 topic=topic, partition=0) >= 0
    # Held for less than a minute: not stalled yet.
    assert value(samples, "gregor_last_stable_offset_stalled_partitions") == 0
    assert value(samples, "gregor_transaction_marker_latency_seconds_count") == 0

    listed = api(b.metrics_port, "/ui/api/transactions")
    assert listed["node_id"] == 1 and listed["shards"], listed
    txn = next(t for t in listed["transactions"] if t["transactional_id"] == "txm-open")
    assert txn["state"] == "Ongoing", txn
    assert txn["partitions"] == [{"topic": topic, "partition": 0}], txn
    assert txn["producer_id"] >= 0 and txn["producer_epoch"] >= 0, txn
    assert txn["age_ms"] >= 0, txn
    assert listed["states"]["Ongoing"] == 1 and listed["open_total"] == 1, listed
    part = partition_json(b, topic)
    assert (part["high_watermark"], part["last_stable_offset"], part["lso_lag"]) == (5, 0, 5), part

    browser = Browser(tmp_path)
    main = page(browser, b.metrics_port, "/transactions")
    browser.screenshot(f"http://127.0.0.1:{b.metrics_port}/ui/#/transactions", "transactions")
    row = main.find("table", id="transactions").find("tr", data_transactional_id="txm-open")
    assert row.attrs["data-state"] == "Ongoing"
    assert f"{topic}-0" in row.text(), row.text()
    main = page(browser, b.metrics_port, "/topics")
    cells = [td.text() for td in main.find("section", data_topic=topic).find("tbody").find_all("td")]
    assert cells[9:11] == ["0", "5"], cells  # last stable offset, LSO lag

    p.commit_transaction(30)
    assert ended(b, "commit", "end_txn") == 1
    # The markers are written after EndTxn is answered; then the LSO passes the commit marker.
    wait_until(lambda: metric(b, "gregor_transaction_marker_latency_seconds_count") == 1, 20,
               "the commit's marker latency observed")
    wait_until(lambda: metric(b, "gregor_partition_last_stable_offset_lag_offsets",
                              topic=topic, partition=0) == 0, 20, "the LSO caught up")
    samples = scrape(b.metrics_port)
    assert value(samples, "gregor_partition_open_transactions", topic=topic, partition=0) == 0
    assert value(samples, "gregor_partition_last_stable_offset_stalled_seconds",
                 topic=topic, partition=0) == 0
    assert value(samples, "gregor_transaction_marker_latency_seconds_sum") < 20
    assert ended(b, "abort", "end_txn") == 0
    wait_until(lambda: metric(b, "gregor_transactional_ids", state="CompleteCommit") == 1, 20,
               "the completion written")
    assert metric(b, "gregor_transactional_ids", state="Ongoing") == 0
    listed = api(b.metrics_port, "/ui/api/transactions")
    assert listed["transactions"] == [] and listed["open_total"] == 0, listed
    part = partition_json(b, topic)
    assert (part["last_stable_offset"], part["lso_lag"]) == (6, 0), part


@pytest.mark.timeout(120)
def test_aborts_are_counted_by_who_ended_the_transaction(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "txa")

    p = txn_producer(b.bootstrap, "txa-client")
    p.begin_transaction()
    p.produce(topic, value="x", partition=0)
    # Sent first, so the partition is in the transaction and the abort has a marker to write.
    p.flush(30)
    p.abort_transaction(30)
    assert ended(b, "abort", "end_txn") == 1

    # A new instance with the same transactional id aborts the zombie's open transaction.
    zombie = txn_producer(b.bootstrap, "txa-fence")
    zombie.begin_transaction()
    zombie.produce(topic, value="zombie", partition=0)
    zombie.flush(30)
    txn_producer(b.bootstrap, "txa-fence")
    wait_until(lambda: ended(b, "abort", "fenced") == 1, 20, "the fencing abort counted")

    # An abandoned transaction is aborted by its coordinator at transaction.timeout.ms.
    abandoned = txn_producer(b.bootstrap, "txa-timeout", {"transaction.timeout.ms": 2000})
    abandoned.begin_transaction()
    abandoned.produce(topic, value="left", partition=0)
    abandoned.flush(30)
    wait_until(lambda: ended(b, "abort", "timeout") == 1, 30, "the timeout abort counted")
    wait_until(lambda: metric(b, "gregor_partition_open_transactions",
                              topic=topic, partition=0) == 0, 20, "no transaction left open")

    samples = scrape(b.metrics_port)
    assert value(samples, "gregor_transactions_ended_total", outcome="commit") == 0
    assert value(samples, "gregor_transactions_ended_total", outcome="abort") == 3
    # Each decision's markers were written once.
    assert value(samples, "gregor_transaction_marker_latency_seconds_count") == 3
