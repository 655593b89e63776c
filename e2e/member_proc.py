"""A group member in its own process, so that a test can SIGKILL it. Prints one JSON line per
rebalance callback: {"kind": "assign"|"revoke"|"lost", "partitions": [[topic, partition], ...]}.
Runs until killed (or for --max-seconds, a safety bound)."""

import argparse
import json
import sys
import time


def emit(kind, parts):
    print(json.dumps({"kind": kind, "partitions": sorted([p.topic, p.partition] for p in parts)}),
          flush=True)


def run_confluent(a):
    from confluent_kafka import Consumer
    conf = {
        "bootstrap.servers": a.bootstrap, "broker.address.family": "v4", "group.id": a.group,
        "client.id": a.name, "enable.auto.commit": False,
        **({"max.poll.interval.ms": a.max_poll_ms} if a.max_poll_ms else {}),
    }
    if a.lib == "confluent-consumer":
        # KIP-848: the broker assigns (`--strategy` names its server-side assignor) and sets
        # the session and heartbeat timings.
        conf.update({"group.protocol": "consumer", "group.remote.assignor": a.strategy})
    else:
        conf.update({"partition.assignment.strategy": a.strategy,
                     "session.timeout.ms": a.session_ms, "heartbeat.interval.ms": a.heartbeat_ms})
    c = Consumer(conf)
    c.subscribe([a.topic], on_assign=lambda c, p: emit("assign", p),
                on_revoke=lambda c, p: emit("revoke", p), on_lost=lambda c, p: emit("lost", p))
    deadline = time.monotonic() + a.max_seconds
    while time.monotonic() < deadline:
        c.poll(0.05)


def run_kafka_python(a):
    from kafka import KafkaConsumer
    from kafka.consumer.subscription_state import ConsumerRebalanceListener
    from kafka.coordinator.assignors.sticky.sticky_assignor import StickyPartitionAssignor

    class L(ConsumerRebalanceListener):
        def on_partitions_revoked(self, revoked):
            emit("revoke", revoked)

        def on_partitions_assigned(self, assigned):
            emit("assign", assigned)

        def on_partitions_lost(self, lost):
            emit("lost", lost)

    assert a.strategy == "sticky", "kafka-python is used here for its sticky assignor"
    extra = {"max_poll_interval_ms": a.max_poll_ms} if a.max_poll_ms else {}
    c = KafkaConsumer(bootstrap_servers=a.bootstrap, group_id=a.group, client_id=a.name,
                      partition_assignment_strategy=[StickyPartitionAssignor],
                      session_timeout_ms=a.session_ms, heartbeat_interval_ms=a.heartbeat_ms,
                      enable_auto_commit=False, **extra)
    c.subscribe(topics=[a.topic], listener=L())
    deadline = time.monotonic() + a.max_seconds
    while time.monotonic() < deadline:
        c.poll(timeout_ms=50)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bootstrap", required=True)
    ap.add_argument("--group", required=True)
    ap.add_argument("--topic", required=True)
    ap.add_argument("--lib", choices=["confluent", "confluent-consumer", "kafka-python"], required=True)
    ap.add_argument("--strategy", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--session-ms", type=int, required=True)
    ap.add_argument("--heartbeat-ms", type=int, required=True)
    ap.add_argument("--max-poll-ms", type=int, default=None,
                    help="max.poll.interval.ms: the rebalance timeout the member sends")
    ap.add_argument("--max-seconds", type=float, default=60)
    a = ap.parse_args()
    (run_kafka_python if a.lib == "kafka-python" else run_confluent)(a)
    return 0


if __name__ == "__main__":
    sys.exit(main())
