"""Where a fetch's record bytes are sent from: the connection's async worker while the segment
file's pages are in the page cache, the blocking pool (where a read may wait for the disk)
once they are not. A librdkafka consumer reads the same records either way, and
gregor_fetch_sendfile_bytes_total counts each path's bytes.

The cold read evicts the broker's segment files from the page cache (fsync, then
POSIX_FADV_DONTNEED), which needs the test's temporary directory on a disk file system: a tmpfs
keeps every page, and the test says so instead of passing."""

import os

from clients import create_topic, produce, consume
from test_metrics import metrics_broker, scrape, value


def sent(b, thread):
    return value(scrape(b.metrics_port), "gregor_fetch_sendfile_bytes_total", thread=thread) or 0


def segment_files(b):
    return [os.path.join(d, f) for d, _, fs in os.walk(b.data_dir)
            for f in fs if f.endswith(".log") and "__" not in d]


def evict(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
        os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    finally:
        os.close(fd)


def test_cached_records_go_from_the_worker_and_evicted_ones_from_the_blocking_pool(start_broker):
    b = metrics_broker(start_broker)
    topic = create_topic(b, "page-cache")
    n = 2000
    records = [{"value": (b"%06d" % i) * 200} for i in range(n)]
    produce(b, topic, records)

    # Just written: in the page cache, so every byte goes from the worker.
    hot = consume(b, topic, [0], n)
    assert [m["value"] for m in hot] == [r["value"] for r in records]
    worker, pool = sent(b, "worker"), sent(b, "blocking_pool")
    assert worker >= n * 1200, (worker, pool)
    assert pool == 0, (worker, pool)

    files = segment_files(b)
    assert files, f"no segment files under {b.data_dir}"
    for f in files:
        evict(f)
    cold = consume(b, topic, [0], n)
    assert [m["value"] for m in cold] == [r["value"] for r in records]
    worker2, pool2 = sent(b, "worker"), sent(b, "blocking_pool")
    assert pool2 > 0, ("evicted pages were sent from the worker (is the temporary directory a "
                       "tmpfs, which keeps every page?)", worker2, pool2, str(b.data_dir))
    assert (worker2 - worker) + pool2 >= n * 1200
