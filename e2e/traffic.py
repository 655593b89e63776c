"""Client traffic kept running through a cluster operation: an idempotent acks=all producer
and a consumer (confluent-kafka) committing its position, on one partition. `check()` asserts that every
write was acknowledged without error, that the consumer received every acknowledged record
once, in offset order, and that it never stopped for long: no pause between two records longer
than MAX_GAP_S."""

import threading
import time

from confluent_kafka import Consumer, KafkaError, Producer

from conftest import wait_until


# Errors a client retries by itself; librdkafka still reports some of them to the application.
RETRIABLE = {KafkaError.NOT_COORDINATOR, KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
             KafkaError.COORDINATOR_NOT_AVAILABLE, KafkaError.NOT_LEADER_FOR_PARTITION,
             KafkaError.LEADER_NOT_AVAILABLE, KafkaError.REQUEST_TIMED_OUT,
             # A broker whose metadata has not reached a new topic yet (Kafka retries it too).
             KafkaError.UNKNOWN_TOPIC_OR_PART}

# The longest the consumer may go without a new record. docs/cluster.md / BENCHMARKS.md ("Failover
# as a user feels it"): the first record after a leader's SIGKILL is acknowledged within 2 s (the
# active controller's node; 1.5 s for another); a consumer then needs its own metadata refresh
# (1 s here). Margin 2x for a loaded 2-core machine.
MAX_GAP_S = 2 * (2.0 + 1.0)


class Traffic:
    def __init__(self, bootstrap, topic, partition=0, interval=0.02, tag="tr"):
        self.topic, self.partition, self.interval, self.tag = topic, partition, interval, tag
        self.bootstrap = bootstrap
        self.acked = {}  # value -> offset
        self.errors = []
        self.retriable = []  # retriable errors the consumer was told about (allowed)
        self.consumed = []  # (offset, value)
        self.longest_gap = 0.0
        self.longest_gap_before = None  # the offset of the record that ended it
        self._stop_producing = threading.Event()
        self._stop_consuming = threading.Event()
        self._threads = []

    def __enter__(self):
        self._threads = [threading.Thread(target=self._guarded, args=(f,), daemon=True)
                         for f in (self._produce, self._consume)]
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    def _guarded(self, run):
        """A thread's own failure is an error check() reports (it cannot fail the test)."""
        try:
            run()
        except BaseException as e:  # noqa: BLE001 - reported by check() in the test's thread
            self.errors.append(f"{run.__name__}: {e!r}")

    def _produce(self):
        p = Producer({"bootstrap.servers": self.bootstrap, "acks": "all",
                      "enable.idempotence": True, "linger.ms": 2, "retry.backoff.ms": 50,
                      "message.timeout.ms": 60000, "topic.metadata.refresh.interval.ms": 1000})

        def cb(err, msg):
            if err is not None:
                self.errors.append(str(err))
            else:
                self.acked[msg.value().decode()] = msg.offset()

        i = 0
        while not self._stop_producing.is_set():
            p.produce(self.topic, value=f"{self.tag}{i}".encode(), partition=self.partition,
                      on_delivery=cb)
            i += 1
            p.poll(self.interval)
        if p.flush(60) != 0:
            self.errors.append("records still unacknowledged after 60 s")

    def _consume(self):
        from confluent_kafka import OFFSET_BEGINNING, TopicPartition
        c = Consumer({"bootstrap.servers": self.bootstrap, "group.id": f"traffic-{self.tag}",
                      "auto.offset.reset": "earliest", "enable.auto.commit": True,
                      "topic.metadata.refresh.interval.ms": 1000})
        # The start offset is given, not fetched: librdkafka never retries an assign()-mode
        # OffsetFetch answered NOT_COORDINATOR as a whole (its issue #5586; Apache Kafka answers a
        # moved coordinator the same way), and that partition would never be fetched. Commits
        # still go to the coordinator, wherever it moves.
        c.assign([TopicPartition(self.topic, self.partition, OFFSET_BEGINNING)])
        last = time.monotonic()
        try:
            while not self._stop_consuming.is_set():
                m = c.poll(0.2)
                now = time.monotonic()
                if m is None or m.error():
                    if m is not None and m.error().code() != KafkaError._PARTITION_EOF:
                        if m.error().code() in RETRIABLE:
                            self.retriable.append(str(m.error()))
                        else:
                            self.errors.append(f"consumer: {m.error()}")
                    continue
                v = m.value().decode()
                if v.startswith(self.tag):
                    if now - last > self.longest_gap:
                        self.longest_gap, self.longest_gap_before = now - last, m.offset()
                    last = now
                    self.consumed.append((m.offset(), v))
        finally:
            c.close()

    def progress(self, n, what, timeout=30):
        """Waits until `n` more records were acknowledged and `n` more consumed (traffic flows
        `what`: e.g. on a new leader)."""
        acked, consumed = len(self.acked), len(self.consumed)
        wait_until(lambda: len(self.acked) >= acked + n and len(self.consumed) >= consumed + n,
                   timeout, f"{n} more records produced and consumed {what}")

    def stop(self, timeout=60):
        self._stop_producing.set()
        self._threads[0].join(90)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if {v for _, v in self.consumed} >= set(self.acked):
                break
            time.sleep(0.1)
        self._stop_consuming.set()
        self._threads[1].join(30)

    def check(self, min_records=20, max_gap=MAX_GAP_S):
        assert not self.errors, self.errors[:5]
        assert not any(t.is_alive() for t in self._threads), "a traffic thread did not finish"
        assert self.longest_gap <= max_gap, (
            f"the consumer went {self.longest_gap:.1f}s without a record (until offset "
            f"{self.longest_gap_before}); at most {max_gap:.1f}s allowed")
        assert len(self.acked) >= min_records, f"only {len(self.acked)} records acknowledged"
        values = [v for _, v in self.consumed]
        missing = set(self.acked) - set(values)
        assert not missing, (
            f"{len(missing)} of {len(self.acked)} acknowledged records never consumed (first "
            f"missing offset {min(self.acked[v] for v in missing)}, {len(values)} consumed, "
            f"retriable errors seen: {self.retriable[-5:]})")
        assert len(values) == len(set(values)), "a record was consumed twice"
        offsets = [o for o, _ in self.consumed]
        assert offsets == sorted(offsets), "records consumed out of order"
        assert all(self.acked[v] == o for o, v in self.consumed if v in self.acked), \
            "a record was consumed at another offset than acknowledged"
