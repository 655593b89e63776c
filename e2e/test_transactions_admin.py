"""Transaction admin (KIP-664) on real processes: `gregor transactions` (and
bin/kafka-transactions.sh) lists and describes a confluent-kafka producer's open transaction,
then its commit, describes a partition's producers, and finds and aborts a hanging
transaction (one whose coordinator lost its state) so that read_committed consumers get past
it."""

import os
import shutil
import signal
import subprocess
import sys
import textwrap

import pytest
from confluent_kafka import Producer

from clients import conf, create_topic
from conftest import REPO, gregor_bin, wait_until
from test_transactions import read_all, stable_end, txn_producer


def tool(broker, *args, via_script=False, check=True):
    """`gregor transactions ARGS` (or bin/kafka-transactions.sh ARGS); its completed run."""
    if via_script:
        argv = [str(REPO / "bin" / "kafka-transactions.sh"), "--bootstrap-server",
                broker.bootstrap, *args]
    else:
        argv = [gregor_bin(), "transactions", "--bootstrap-server", broker.bootstrap, *args]
    env = dict(os.environ, GREGOR_BIN=gregor_bin())
    r = subprocess.run(argv, capture_output=True, text=True, timeout=60, env=env)
    if check:
        assert r.returncode == 0, f"{argv}: rc={r.returncode}\n{r.stdout}\n{r.stderr}"
    return r


def table(out):
    """Kafka's table: a header line, then rows; each value padded and followed by a tab."""
    lines = out.splitlines()
    assert lines, "no header line"
    split = [[v.strip() for v in line.split("\t")[:-1]] for line in lines]
    for line in lines:
        assert line.endswith("\t"), repr(line)
    header, rows = split[0], split[1:]
    return header, [dict(zip(header, r)) for r in rows]


def rows_of(broker, *args, via_script=False):
    return table(tool(broker, *args, via_script=via_script).stdout)[1]


@pytest.mark.timeout(90)
def test_an_open_transaction_listed_described_and_committed(broker):
    create_topic(broker, "txa", partitions=2)
    p = txn_producer(broker.bootstrap, "tx-admin")
    p.begin_transaction()
    for i in range(4):
        p.produce("txa", value=f"v{i}", partition=i % 2)
    p.flush(30)

    header, listed = table(tool(broker, "list").stdout)
    assert header == ["TransactionalId", "Coordinator", "ProducerId", "TransactionState"]
    [mine] = [r for r in listed if r["TransactionalId"] == "tx-admin"]
    assert mine["TransactionState"] == "Ongoing", listed
    assert mine["Coordinator"] == str(broker.node_id)
    pid = mine["ProducerId"]

    header, [d] = table(tool(broker, "describe", "--transactional-id", "tx-admin",
                             via_script=True).stdout)
    assert header == ["CoordinatorId", "TransactionalId", "ProducerId", "ProducerEpoch",
                      "TransactionState", "TransactionTimeoutMs",
                      "CurrentTransactionStartTimeMs", "TransactionDurationMs",
                      "TopicPartitions"]
    assert d["TransactionState"] == "Ongoing" and d["ProducerId"] == pid, d
    assert d["TopicPartitions"] == "txa-0,txa-1", d
    assert int(d["CurrentTransactionStartTimeMs"]) > 0 and int(d["TransactionDurationMs"]) >= 0

    header, producers = table(tool(broker, "describe-producers", "--topic", "txa",
                                   "--partition", "0").stdout)
    assert header == ["ProducerId", "ProducerEpoch", "LatestCoordinatorEpoch", "LastSequence",
                      "LastTimestamp", "CurrentTransactionStartOffset"]
    [prod] = [r for r in producers if r["ProducerId"] == pid]
    assert prod["CurrentTransactionStartOffset"] == "0", prod
    assert prod["ProducerEpoch"] == d["ProducerEpoch"]

    # Open, but its coordinator runs it in this partition: not hanging, whatever its age.
    assert rows_of(broker, "find-hanging", "--topic", "txa", "--max-transaction-timeout",
                   "0") == []

    p.commit_transaction(30)

    def committed():
        [d] = rows_of(broker, "describe", "--transactional-id", "tx-admin")
        return d if d["TransactionState"] == "CompleteCommit" else None

    d = wait_until(committed, 15, "the transaction to show CompleteCommit")
    assert d["TopicPartitions"] == "", d
    [listed] = [r for r in rows_of(broker, "list") if r["TransactionalId"] == "tx-admin"]
    assert listed["TransactionState"] == "CompleteCommit"
    [prod] = [r for r in rows_of(broker, "describe-producers", "--topic", "txa",
                                 "--partition", "0") if r["ProducerId"] == pid]
    assert prod["CurrentTransactionStartOffset"] == "None", prod
    assert int(prod["LatestCoordinatorEpoch"]) >= 0, prod

    # An unknown id is an error, as in Kafka's tool.
    r = tool(broker, "describe", "--transactional-id", "nobody", check=False)
    assert r.returncode != 0 and "TRANSACTIONAL_ID_NOT_FOUND" in r.stderr, r.stderr


PRODUCER = textwrap.dedent("""
    import sys
    from confluent_kafka import Producer
    p = Producer({"bootstrap.servers": sys.argv[1], "transactional.id": sys.argv[2],
                  "transaction.timeout.ms": 600000})
    p.init_transactions(30)
    p.begin_transaction()
    for i in range(3):
        p.produce(sys.argv[3], value=f"hanging{i}".encode(), partition=0)
    p.flush(30)
    print("open", flush=True)
    sys.stdin.read()
""")


def open_transaction_then_sigkill(broker, txn_id, topic):
    """A producer process that opens a transaction in partition 0 of `topic` and is SIGKILLed
    with it open (its timeout is ten minutes)."""
    proc = subprocess.Popen([sys.executable, "-c", PRODUCER, broker.bootstrap, txn_id, topic],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "open"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait(10)


@pytest.mark.timeout(120)
def test_a_hanging_transaction_is_found_and_aborted(broker):
    create_topic(broker, "hang")
    open_transaction_then_sigkill(broker, "tx-hang", "hang")
    assert stable_end(broker, "hang") == 0
    # Its coordinator loses its state (a __transaction_state wiped while the broker was down):
    # nothing will ever end the transaction the partition holds open.
    assert broker.stop() == 0
    wiped = [d for d in broker.data_dir.iterdir() if d.name.startswith("__transaction_state-")]
    assert wiped, sorted(d.name for d in broker.data_dir.iterdir())
    for d in wiped:
        shutil.rmtree(d)
    broker.start()
    assert stable_end(broker, "hang") == 0
    assert [r for r in rows_of(broker, "list") if r["TransactionalId"] == "tx-hang"] == []

    # Younger than the default 15 minutes: the coordinator might still end it.
    assert rows_of(broker, "find-hanging", "--topic", "hang") == []
    header, [h] = table(tool(broker, "find-hanging", "--topic", "hang", "--partition", "0",
                             "--max-transaction-timeout", "0", via_script=True).stdout)
    assert header == ["Topic", "Partition", "ProducerId", "ProducerEpoch", "CoordinatorEpoch",
                      "StartOffset", "LastTimestamp", "Duration(min)"]
    assert (h["Topic"], h["Partition"], h["StartOffset"]) == ("hang", "0", "0"), h
    assert rows_of(broker, "find-hanging", "--broker-id", str(broker.node_id),
                   "--max-transaction-timeout", "0") == [h]

    # No producer's transaction starts at offset 1.
    r = tool(broker, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "1",
             check=False)
    assert r.returncode != 0 and "offset 1" in r.stderr, r.stderr
    tool(broker, "abort", "--topic", "hang", "--partition", "0", "--start-offset", "0")
    # Three records and the abort marker: the last stable offset moves past them.
    wait_until(lambda: stable_end(broker, "hang") == 4, 15, "the LSO to pass the abort marker")
    assert rows_of(broker, "find-hanging", "--topic", "hang", "--max-transaction-timeout",
                   "0") == []
    p = Producer(conf(broker))
    p.produce("hang", value="after")
    p.flush(10)
    assert read_all(broker.bootstrap, "hang", [0], "read_committed") == ["after"]
