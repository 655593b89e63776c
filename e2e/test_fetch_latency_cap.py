"""fetch.low.latency.max.bytes with a librdkafka consumer (confluent-kafka, its defaults): on
loopback the broker caps each answer at the setting, so a Fetch of 4 partitions asking for
1 MiB each comes back smaller, and the consumer still reads every record in order per
partition. gregor_fetch_latency_capped_total counts the capped Fetches; with the setting at 0
(the default) none is capped."""

from collections import defaultdict

from clients import create_topic, produce, consume
from test_metrics import metrics_broker, scrape, value

PARTITIONS = 4
PER_PARTITION = 150  # 150 records of 8 KiB: about 1.2 MB per partition


def capped(b):
    return value(scrape(b.metrics_port), "gregor_fetch_latency_capped_total") or 0


def fill_and_read(b, name):
    topic = create_topic(b, name, partitions=PARTITIONS)
    records = [{"partition": p, "value": b"%d-%06d-" % (p, i) + b"x" * 8192}
               for i in range(PER_PARTITION) for p in range(PARTITIONS)]
    produce(b, topic, records)
    got = consume(b, topic, list(range(PARTITIONS)), len(records))
    per_partition = defaultdict(list)
    for m in got:
        per_partition[m["partition"]].append(m["value"])
    for p in range(PARTITIONS):
        want = [r["value"] for r in records if r["partition"] == p]
        assert per_partition[p] == want, f"partition {p}: records missing or out of order"


def test_a_librdkafka_consumer_reads_everything_through_capped_answers(start_broker):
    b = metrics_broker(start_broker, **{"fetch.low.latency.max.bytes": str(256 * 1024)})
    fill_and_read(b, "latency-capped")
    assert capped(b) > 0, "no Fetch was capped on loopback"


def test_no_answer_is_capped_by_default(start_broker):
    b = metrics_broker(start_broker)
    fill_and_read(b, "latency-uncapped")
    assert capped(b) == 0
