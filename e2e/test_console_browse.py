"""The console's message browser (`/ui/api/messages`, the Messages page) and the Topics overview,
in headless Chromium against a broker real clients wrote to: records with keys, headers, JSON
and binary values and known timestamps, an aborted and a committed transaction. Seeks by offset,
timestamp and newest; filters on key, value and header; UTF-8, JSON and hex decoding; paging by
the page's own links; read_committed leaves the aborted records and the markers out. Bad
queries get 400 with a reason and the broker keeps serving; a viewer needs READ on the topic;
a partition led by another node is read from that node. Screenshots go under the test's
temporary directory."""

import json

import pytest
from confluent_kafka.admin import (AclBinding, AclOperation, AclPermissionType, AdminClient,
                                   ResourcePatternType, ResourceType)

from clients import create_topic, produce
from conftest import NotYet, wait_until
from test_console import Browser, api, create_assigned, metrics_broker, page
from test_console_security import ALICE_PW, ADMIN_PW, get, pki, seed, start  # noqa: F401 (pki: fixture)
from test_metrics import http_get
from test_transactions import txn_producer

BASE_TS = 1_700_000_000_000
COUNT = 30


def seeded(b):
    """Topic `browse`: partition 0 holds COUNT records (key user-i, JSON value of kind order or
    refund, header trace=t-i, timestamp BASE_TS + i s), one binary value, then an aborted
    transaction of 3 records and a committed one of 2; partition 1 holds 2 records, compressed
    with zstd."""
    topic = create_topic(b, "browse", partitions=2)
    produce(b, topic, [{"partition": 0, "key": f"user-{i}".encode(),
                        "value": json.dumps({"n": i, "kind": "refund" if i % 5 == 0 else "order"}).encode(),
                        "headers": [("trace", f"t-{i}".encode())], "timestamp": BASE_TS + i * 1000}
                       for i in range(COUNT)]
            + [{"partition": 0, "key": b"bin", "value": b"\x00\xff\x10\x80",
                "timestamp": BASE_TS + COUNT * 1000}])
    # Compressed batches are decompressed for display.
    produce(b, topic, [{"partition": 1, "value": f"small-{i}".encode()} for i in range(2)],
            extra={"compression.type": "zstd"})
    p = txn_producer(b.bootstrap, "browse-txn")
    p.begin_transaction()
    for i in range(3):
        p.produce(topic, key=b"txn", value=f"aborted-{i}".encode(), partition=0)
    p.flush(30)
    p.abort_transaction(30)
    p.begin_transaction()
    for i in range(2):
        p.produce(topic, key=b"txn", value=f"committed-{i}".encode(), partition=0)
    p.flush(30)
    p.commit_transaction(30)
    return topic


def messages(port, query):
    return api(port, "/ui/api/messages?" + query)


def values(m):
    return [r["value"]["text"] if r["value"] else None for r in m["records"]]


def stable(port, topic):
    """The page from newest once the committed transaction's records are readable."""
    m = messages(port, f"topic={topic}&partition=0&newest&limit=10")
    if "committed-1" not in values(m):
        raise NotYet(m)
    return m


def check_api(port, topic):
    wait_until(lambda: stable(port, topic), 20, "the committed transaction readable")
    first = messages(port, f"topic={topic}&partition=0&limit=10")
    assert [r["offset"] for r in first["records"]] == list(range(10))
    assert (first["more"], first["next_offset"], first["stopped_by"]) == (True, 10, "limit"), first
    r0 = first["records"][0]
    assert r0["key"]["text"] == "user-0" and r0["timestamp"] == BASE_TS
    assert r0["headers"] == [{"key": "trace", "value": {"bytes": 3, "encoding": "utf8", "text": "t-0",
                                                        "truncated": False}}]
    second = messages(port, f"topic={topic}&partition=0&offset=10&limit=10")
    assert [r["offset"] for r in second["records"]] == list(range(10, 20))
    at = messages(port, f"topic={topic}&partition=0&timestamp={BASE_TS + 15_000}&limit=1")
    assert [r["offset"] for r in at["records"]] == [15], at
    # Filters: a value substring, a key prefix, a header value.
    refunds = messages(port, f"topic={topic}&partition=0&filter=refund&filter_on=value&limit=500")
    assert [r["offset"] for r in refunds["records"]] == list(range(0, COUNT, 5))
    assert refunds["skipped"]["filtered_out"] > 0
    keys = messages(port, f"topic={topic}&partition=0&filter=user-1&filter_on=key&limit=500")
    assert [r["key"]["text"] for r in keys["records"]] == ["user-1"] + [f"user-{i}" for i in range(10, 20)]
    trace = messages(port, f"topic={topic}&partition=0&filter=t-7&filter_on=header")
    assert [r["offset"] for r in trace["records"]] == [7]
    # Decoding.
    hexed = messages(port, f"topic={topic}&partition=0&limit=1&decode=hex")
    assert hexed["records"][0]["key"] == {"bytes": 6, "encoding": "hex", "text": "user-0".encode().hex(),
                                          "truncated": False}
    js = messages(port, f"topic={topic}&partition=0&limit=1&decode=json")
    assert js["records"][0]["value"]["encoding"] == "json"
    assert json.loads(js["records"][0]["value"]["text"]) == {"n": 0, "kind": "refund"}
    binary = messages(port, f"topic={topic}&partition=0&offset={COUNT}&limit=1")["records"][0]
    assert binary["value"]["encoding"] == "hex" and binary["value"]["text"] == "00ff1080", binary
    assert "not UTF-8" in binary["value"]["note"]
    # read_committed: the aborted records and the markers are not data.
    everything = messages(port, f"topic={topic}&partition=0&limit=500")
    assert not [v for v in values(everything) if v and v.startswith("aborted-")], values(everything)
    assert values(everything)[-2:] == ["committed-0", "committed-1"]
    assert everything["skipped"]["aborted_records"] == 3, everything["skipped"]
    assert everything["skipped"]["control_batches"] == 2, everything["skipped"]
    assert everything["more"] is False
    dirty = messages(port, f"topic={topic}&partition=0&limit=500&isolation=read_uncommitted")
    aborted = [r for r in dirty["records"] if r["aborted"]]
    assert [r["value"]["text"] for r in aborted] == ["aborted-0", "aborted-1", "aborted-2"]
    assert values(messages(port, f"topic={topic}&partition=1")) == ["small-0", "small-1"]
    newest = messages(port, f"topic={topic}&partition=0&newest&limit=3")
    assert values(newest)[-1] == "committed-1" and newest["start_offset"] == newest["end_offset"] - 3


def check_pages(browser, port, topic):
    base = f"/messages?topic={topic}&partition=0"
    main = page(browser, port, base + "&limit=10")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#{base}&limit=10", "messages-first-page")
    rows = main.find("table", id="messages").find("tbody").find_all("tr")
    assert [r.attrs["data-offset"] for r in rows] == [str(i) for i in range(10)]
    assert "user-3" in rows[3].text() and "t-3" in rows[3].text(), rows[3].text()
    nxt = main.find("a", id="page-next").attrs["href"]
    main = page(browser, port, nxt[1:])
    rows = main.find("table", id="messages").find("tbody").find_all("tr")
    assert [r.attrs["data-offset"] for r in rows] == [str(i) for i in range(10, 20)]
    prev = main.find("a", id="page-prev").attrs["href"]
    main = page(browser, port, prev[1:])
    assert main.find("table", id="messages").find("tr", data_offset="0")

    frag = base + f"&timestamp={BASE_TS + 25_000}&decode=json&limit=2"
    main = page(browser, port, frag)
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#{frag}", "messages-by-time-json")
    rows = main.find("table", id="messages").find("tbody").find_all("tr")
    assert [r.attrs["data-offset"] for r in rows] == ["25", "26"]
    value = rows[0].find("span", data_encoding="json")
    assert json.loads(value.find("pre").text()) == {"n": 25, "kind": "refund"}

    frag = base + "&filter=refund&filter_on=value&decode=hex"
    main = page(browser, port, frag)
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#{frag}", "messages-filter-hex")
    rows = main.find("table", id="messages").find("tbody").find_all("tr")
    assert [r.attrs["data-offset"] for r in rows] == [str(i) for i in range(0, COUNT, 5)]
    assert rows[0].find("td", **{"class": "key"}).find("span", data_encoding="hex").text().startswith(
        "user-0".encode().hex())

    frag = base + "&newest=true&limit=5&isolation=read_uncommitted"
    main = page(browser, port, frag)
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#{frag}", "messages-newest")
    rows = main.find("table", id="messages").find("tbody").find_all("tr")
    assert "committed-1" in rows[-1].text(), rows[-1].text()
    # read_uncommitted shows the aborted record, flagged; the markers are never shown.
    flagged = [r for r in rows if r.attrs.get("class") == "aborted"]
    assert [("aborted-2" in r.text(), "aborted transaction" in r.text()) for r in flagged] == [(True, True)]
    assert "2 transaction marker batch(es)" in main.find(id="browse-skipped").text()

    main = page(browser, port, base + "&limit=0")
    assert "1 to 500" in main.find(id="browse-error").text()
    assert main.find("form", id="browse-form"), "the form stays to fix the query"


def check_topics_overview(browser, port, topic):
    c = api(port, "/ui/api/cluster")
    parts = next(t for t in c["topics"] if t["name"] == topic)["partitions"]
    sizes = [p["size_bytes"] for p in parts]
    skew = max(sizes) / (sum(sizes) / len(sizes))
    internal_name = next(t["name"] for t in c["topics"] if t["internal"])  # __transaction_state
    main = page(browser, port, "/topics")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/topics", "topics-overview")
    overview = main.find("table", id="topics-overview")
    row = overview.find("tr", data_topic=topic)
    assert "hidden" not in row.attrs
    cells = [td.text() for td in row.find_all("td")]
    assert cells[1] == "2" and cells[2] == "1", cells
    assert cells[3].endswith(("KiB", " B")), cells
    assert cells[5] == f"{skew:.2f}×", (cells, sizes)
    internal = overview.find("tr", data_topic=internal_name)
    assert "hidden" in internal.attrs, "internal topics are hidden by default"
    assert "hidden" in main.find("section", data_topic=internal_name).attrs
    assert "open" not in main.find("section", data_topic=topic).find("details").attrs

    main = page(browser, port, f"/topics?internal=1&q={internal_name[3:9].upper()}")
    overview = main.find("table", id="topics-overview")
    assert "hidden" not in overview.find("tr", data_topic=internal_name).attrs
    assert "hidden" in overview.find("tr", data_topic=topic).attrs
    assert main.find(id="topics-shown").text().startswith("1 of ")
    main = page(browser, port, f"/topics?open={topic}")
    browser.screenshot(f"http://127.0.0.1:{port}/ui/#/topics?open={topic}", "topics-details")
    details = main.find("section", data_topic=topic).find("details")
    assert "open" in details.attrs
    assert [r.attrs["data-partition"] for r in details.find("tbody").find_all("tr")] == ["0", "1"]


BAD = [
    ("partition=0", "missing parameter topic"),
    ("topic=browse", "missing parameter partition"),
    ("topic=browse&partition=-1", "partition"),
    ("topic=browse&partition=0&limit=100000000000000000000", "limit"),
    ("topic=browse&partition=0&limit=501", "1 to 500"),
    ("topic=browse&partition=0&offset=-5", "offset"),
    ("topic=browse&partition=0&offset=1&newest", "at most one"),
    ("topic=browse&partition=0&decode=base64", "utf8, json or hex"),
    ("topic=browse&partition=0&filter_on=body", "any, key, value or header"),
    ("topic=browse&partition=0&isolation=dirty", "read_committed"),
    ("topic=browse&partition=0&filter=" + "x" * 129, "128"),
    ("topic=browse&partition=0&topic=x", "more than once"),
    ("topic=%zz&partition=0", "percent-encoding"),
    ("topic=" + "t" * 250 + "&partition=0", "249"),
]


def check_bad_input(port, b):
    for query, why in BAD:
        status, ctype, body = http_get(port, "/ui/api/messages?" + query)
        assert status == 400 and ctype == "application/json", (query, status, body)
        assert why in json.loads(body)["error"], (query, body)
    status, _, body = http_get(port, "/ui/api/messages?topic=nope&partition=0")
    assert status == 404 and "does not exist" in body, body
    status, _, body = http_get(port, "/ui/api/messages?topic=browse&partition=7")
    assert status == 404 and "no partition 7" in body, body
    # Still serving, on both listeners.
    after = create_topic(b, "after-bad-browse")
    produce(b, after, [{"value": b"still here"}])
    assert values(messages(port, f"topic={after}&partition=0")) == ["still here"]


@pytest.mark.timeout(240)
def test_message_browser_and_topics_overview_in_a_browser(start_broker, tmp_path):
    b = metrics_broker(start_broker)
    port = b.metrics_port
    topic = seeded(b)
    check_api(port, topic)
    browser = Browser(tmp_path)
    check_pages(browser, port, topic)
    check_topics_overview(browser, port, topic)
    check_bad_input(port, b)


def test_browsing_needs_read_on_the_topic(tmp_path, pki):  # noqa: F811 (pki: fixture)
    b = start(tmp_path, pki, "basic")
    try:
        seed(b)
        status, _, body = get(b, pki, "/ui/api/messages?topic=a-one&partition=0", "alice", ALICE_PW)
        assert status == 403 and "not authorized to read topic" in body, body
        # Denied whether or not the topic exists: the answer does not tell.
        status, _, body = get(b, pki, "/ui/api/messages?topic=a-none&partition=0", "alice", ALICE_PW)
        assert status == 403, body
        admin = AdminClient({"bootstrap.servers": b.bootstrap})
        grant = AclBinding(ResourceType.TOPIC, "a-one", ResourcePatternType.LITERAL, "User:alice", "*",
                           AclOperation.READ, AclPermissionType.ALLOW)
        for f in admin.create_acls([grant]).values():
            f.result(20)

        def readable():
            status, _, body = get(b, pki, "/ui/api/messages?topic=a-one&partition=0", "alice", ALICE_PW)
            if status != 200:
                raise NotYet((status, body))
            return json.loads(body)

        m = wait_until(readable, 20, "alice may read a-one")
        assert [r["value"]["text"] for r in m["records"]] == [f"a-one-{i}" for i in range(5)]
        status, _, body = get(b, pki, "/ui/api/messages?topic=b-secret&partition=0", "alice", ALICE_PW)
        assert status == 403, body
        status, _, body = get(b, pki, "/ui/api/messages?topic=b-secret&partition=0", "admin", ADMIN_PW)
        assert status == 200 and len(json.loads(body)["records"]) == 5, body
    finally:
        assert b.stop() == 0


@pytest.mark.timeout(180)
def test_a_partition_led_by_another_node_is_read_from_its_leader(cluster_factory):
    c = cluster_factory(2, metrics=True)
    nodes = sorted(c.nodes.values(), key=lambda n: n.node_id)
    topic = "browse-remote"
    create_assigned(nodes[0], topic, [(0, [nodes[1].node_id])])

    def led():
        t = next((t for t in api(nodes[0].metrics_port, "/ui/api/cluster")["topics"]
                  if t["name"] == topic), None)
        if not t or t["partitions"][0]["leader"] != nodes[1].node_id:
            raise NotYet(t)
        return t

    wait_until(led, 30, f"{topic} led by node {nodes[1].node_id}")
    produce(nodes[1], topic, [{"partition": 0, "key": f"k{i}".encode(), "value": f"v{i}".encode()}
                              for i in range(4)])
    m = messages(nodes[0].metrics_port, f"topic={topic}&partition=0")
    assert values(m) == ["v0", "v1", "v2", "v3"]
    assert (m["via_node"], m["leader"]) == (nodes[0].node_id, nodes[1].node_id), m
    # Asked for its own answer only, a node that does not lead says who does.
    status, _, body = http_get(nodes[0].metrics_port,
                               f"/ui/api/messages?topic={topic}&partition=0&scope=local")
    assert status == 409 and f"node {nodes[1].node_id} does" in body, body
