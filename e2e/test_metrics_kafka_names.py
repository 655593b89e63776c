"""metrics.naming=kafka: the Grafana dashboard shipped in docs/grafana/ finds data for every
query on a real broker that produced and consumed a little."""

import json
import os
import re

import pytest
from confluent_kafka import Consumer, KafkaException, TopicPartition

from clients import admin, conf, consume, create_topic, produce
from test_metrics import http_get, metrics_broker, parse, scrape

DASHBOARD = os.path.join(os.path.dirname(__file__), "..", "docs", "grafana", "gregor-kafka.json")

# A Kafka name in PromQL and its optional label matchers.
SELECTOR = re.compile(r'\b(kafka_[a-zA-Z0-9_]*)(?![a-zA-Z0-9_])(\{[^}]*\})?')
MATCHER = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"')


def dashboard_exprs():
    with open(DASHBOARD) as f:
        dash = json.load(f)
    exprs = [t["expr"] for p in dash["panels"] for t in p.get("targets", [])]
    assert exprs, "the dashboard has queries"
    return exprs


def selectors(expr):
    """(name, [(label, op, value)]) of each Kafka-named selector of a PromQL expression."""
    return [(m.group(1), MATCHER.findall(m.group(2) or "")) for m in SELECTOR.finditer(expr)]


def matches(labels, matchers):
    for key, op, want in matchers:
        got = labels.get(key, "")
        ok = {"=": got == want, "!=": got != want,
              "=~": re.fullmatch(want, got) is not None,
              "!~": re.fullmatch(want, got) is None}[op]
        if not ok:
            return False
    return True


def test_selectors_are_read_from_promql():
    assert selectors('sum by (topic) (rate(kafka_a_total{topic!=""}[5m])) + kafka_b') == \
        [("kafka_a_total", [("topic", "!=", "")]), ("kafka_b", [])]
    assert selectors('max(kafka_c{quantile="0.99",request=~"Produce|Fetch"})') == \
        [("kafka_c", [("quantile", "=", "0.99"), ("request", "=~", "Produce|Fetch")])]
    assert not matches({"topic": "t"}, [("topic", "=", "")])


def workload(b):
    topic = create_topic(b, "dashboarded")
    n = 50
    produce(b, topic, [{"value": b"v" * 20} for _ in range(n)])
    assert len(consume(b, topic, [0], n)) == n
    c = Consumer(conf(b, {"group.id": "dashboard-group", "enable.auto.commit": False}))
    try:
        c.commit(offsets=[TopicPartition(topic, 0, 20)], asynchronous=False)
    finally:
        c.close()
    # One request error, for the error panel: ListOffsets of a missing topic.
    c = Consumer(conf(b, {"group.id": "dashboard-errors"}))
    try:
        with pytest.raises(KafkaException):
            c.get_watermark_offsets(TopicPartition("no-such-topic", 0), timeout=5)
    finally:
        c.close()
    return topic, n


def test_every_dashboard_query_has_data_with_kafka_naming(start_broker):
    b = metrics_broker(start_broker, **{"metrics.naming": "kafka",
                                         "auto.create.topics.enable": "false"})
    topic, n = workload(b)
    samples = scrape(b.metrics_port)

    missing = []
    for expr in dashboard_exprs():
        found = selectors(expr)
        assert found, f"a query without a Kafka name: {expr}"
        for name, matchers in found:
            if not any(s == name and matches(ls, matchers) for s, ls, _ in samples):
                missing.append((name, matchers, expr))
    assert not missing, missing

    # The values are Gregor's own, under the other name.
    def one(name, **labels):
        got = [v for s, ls, v in samples if s == name and ls == {k: str(w) for k, w in labels.items()}]
        assert len(got) == 1, (name, labels, got)
        return got[0]

    assert one("kafka_server_brokertopicmetrics_messagesin_total", topic=topic) == n
    assert one("kafka_server_brokertopicmetrics_messagesin_total") >= n
    assert one("kafka_server_brokertopicmetrics_bytesin_total", topic=topic) == \
        one("gregor_topic_bytes_in_total", topic=topic)
    assert one("kafka_consumergroup_lag", consumergroup="dashboard-group", topic=topic,
               partition=0) == n - 20
    assert one("kafka_controller_kafkacontroller_activecontrollercount") == 1
    assert one("kafka_server_replicamanager_leadercount") == one("gregor_leader_partitions")
    assert one("kafka_network_requestmetrics_totaltimems_count", request="Produce") == \
        one("gregor_requests_total", api="Produce")
    assert one("kafka_network_requestmetrics_requests_total", request="FetchConsumer") >= 1


def test_the_default_naming_has_no_kafka_names(start_broker):
    b = metrics_broker(start_broker, **{"auto.create.topics.enable": "false"})
    workload(b)
    status, _, body = http_get(b.metrics_port, "/metrics")
    assert status == 200
    names = {s for s, _, _ in parse(body)}
    assert "gregor_topic_messages_in_total" in names
    assert not [x for x in names if x.startswith("kafka_")]
