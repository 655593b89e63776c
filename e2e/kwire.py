"""A deliberately small Kafka wire codec for bad-input tests over raw sockets.

Only what the tests need: request/response headers, primitive types in their classic and flexible
(KIP-482) forms, v2 record batches with CRC32C, and a connection that can tell "answered" from
"connection closed". Message layouts are written from Kafka's public protocol documentation
(https://kafka.apache.org/protocol), one small function per request.
"""

import socket
import struct
import time

# Kafka error codes (org.apache.kafka.common.protocol.Errors).
NONE = 0
CORRUPT_MESSAGE = 2
UNKNOWN_TOPIC_OR_PARTITION = 3
INVALID_TOPIC_EXCEPTION = 17
INCONSISTENT_GROUP_PROTOCOL = 23
INVALID_SESSION_TIMEOUT = 26
INVALID_TIMESTAMP = 32
UNSUPPORTED_VERSION = 35
TOPIC_ALREADY_EXISTS = 36
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_REPLICA_ASSIGNMENT = 39
INVALID_CONFIG = 40
INVALID_REQUEST = 42
INVALID_RECORD = 87
UNSUPPORTED_COMPRESSION_TYPE = 76
REQUEST_TIMED_OUT = 7
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = 53
INVALID_TXN_STATE = 48
MEMBER_ID_REQUIRED = 79
NOT_COORDINATOR = 16
COORDINATOR_LOAD_IN_PROGRESS = 14
COORDINATOR_NOT_AVAILABLE = 15

# API keys.
PRODUCE = 0
FETCH = 1
LIST_OFFSETS = 2
METADATA = 3
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
JOIN_GROUP = 11
DESCRIBE_GROUPS = 15
API_VERSIONS = 18
CREATE_TOPICS = 19
INIT_PRODUCER_ID = 22
DESCRIBE_CLUSTER = 60

# First flexible (compact encodings + tagged fields) version of each API we encode.
FIRST_FLEXIBLE = {
    PRODUCE: 9,
    FETCH: 12,
    LIST_OFFSETS: 6,
    METADATA: 9,
    JOIN_GROUP: 6,
    OFFSET_COMMIT: 8,
    OFFSET_FETCH: 6,
    FIND_COORDINATOR: 3,
    DESCRIBE_GROUPS: 5,
    API_VERSIONS: 3,
    CREATE_TOPICS: 5,
    INIT_PRODUCER_ID: 2,
    DESCRIBE_CLUSTER: 0,
}


def is_flexible(api_key, version):
    """Unknown API keys are encoded with the classic header (their layout is unknowable)."""
    return api_key in FIRST_FLEXIBLE and version >= FIRST_FLEXIBLE[api_key]


# ---------------------------------------------------------------------------------------------
# CRC32C (Castagnoli), needed by v2 record batches; the stdlib only has CRC32 (IEEE).

def _crc32c_table():
    table = []
    for n in range(256):
        c = n
        for _ in range(8):
            c = (c >> 1) ^ 0x82F63B78 if c & 1 else c >> 1
        table.append(c)
    return table


_CRC32C = _crc32c_table()


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc = _CRC32C[(crc ^ b) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


# ---------------------------------------------------------------------------------------------
# Writer / reader for Kafka's primitive types.

class W:
    def __init__(self, flex=False):
        self.flex = flex
        self.buf = bytearray()

    def raw(self, b):
        self.buf += b
        return self

    def i8(self, v):
        return self.raw(struct.pack(">b", v))

    def i16(self, v):
        return self.raw(struct.pack(">h", v))

    def i32(self, v):
        return self.raw(struct.pack(">i", v))

    def i64(self, v):
        return self.raw(struct.pack(">q", v))

    def boolean(self, v):
        return self.i8(1 if v else 0)

    def uvarint(self, v):
        while True:
            b = v & 0x7F
            v >>= 7
            if v:
                self.buf.append(b | 0x80)
            else:
                self.buf.append(b)
                return self

    def varint(self, v):  # zigzag
        return self.uvarint((v << 1) ^ (v >> 63))

    def string(self, s):
        if s is None:
            return self.uvarint(0) if self.flex else self.i16(-1)
        b = s.encode() if isinstance(s, str) else s
        if self.flex:
            self.uvarint(len(b) + 1)
        else:
            self.i16(len(b))
        return self.raw(b)

    def bytes_(self, b):
        if b is None:
            return self.uvarint(0) if self.flex else self.i32(-1)
        if self.flex:
            self.uvarint(len(b) + 1)
        else:
            self.i32(len(b))
        return self.raw(b)

    def array(self, items, fn):
        if items is None:
            return self.uvarint(0) if self.flex else self.i32(-1)
        if self.flex:
            self.uvarint(len(items) + 1)
        else:
            self.i32(len(items))
        for it in items:
            fn(self, it)
        return self

    def tags(self):
        if self.flex:
            self.uvarint(0)
        return self

    def done(self):
        return bytes(self.buf)


class R:
    def __init__(self, data, flex=False):
        self.data = data
        self.pos = 0
        self.flex = flex

    def take(self, n):
        if self.pos + n > len(self.data):
            raise ValueError(f"response truncated: need {n} bytes at {self.pos}, "
                             f"have {len(self.data)}")
        b = self.data[self.pos:self.pos + n]
        self.pos += n
        return b

    def i8(self):
        return struct.unpack(">b", self.take(1))[0]

    def i16(self):
        return struct.unpack(">h", self.take(2))[0]

    def i32(self):
        return struct.unpack(">i", self.take(4))[0]

    def i64(self):
        return struct.unpack(">q", self.take(8))[0]

    def boolean(self):
        return self.i8() != 0

    def uuid(self):
        return self.take(16)

    def uvarint(self):
        shift = 0
        out = 0
        while True:
            b = self.take(1)[0]
            out |= (b & 0x7F) << shift
            if not b & 0x80:
                return out
            shift += 7

    def string(self):
        if self.flex:
            n = self.uvarint() - 1
        else:
            n = self.i16()
        if n < 0:
            return None
        return self.take(n).decode()

    def bytes_(self):
        n = self.uvarint() - 1 if self.flex else self.i32()
        if n < 0:
            return None
        return self.take(n)

    def array(self, fn):
        n = self.uvarint() - 1 if self.flex else self.i32()
        if n < 0:
            return None
        return [fn(self) for _ in range(n)]

    def tags(self):
        if self.flex:
            for _ in range(self.uvarint()):
                self.uvarint()
                self.take(self.uvarint())

    def remaining(self):
        return len(self.data) - self.pos


def request_header(api_key, version, correlation_id, client_id="e2e-raw"):
    """Request header v1 (classic) or v2 (flexible: adds tagged fields; client_id stays classic)."""
    w = W(flex=False).i16(api_key).i16(version).i32(correlation_id).string(client_id)
    if is_flexible(api_key, version):
        w.uvarint(0)
    return w.done()


# ---------------------------------------------------------------------------------------------
# Connection.

class Closed(Exception):
    """The broker closed the connection."""


class Conn:
    def __init__(self, host, port, timeout=5.0):
        self.sock = socket.create_connection((host, port), timeout=timeout)
        self.sock.settimeout(timeout)
        self.correlation_id = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send_frame(self, payload):
        self.sock.sendall(struct.pack(">i", len(payload)) + payload)

    def send_raw(self, data):
        self.sock.sendall(data)

    def _recv_exact(self, n):
        out = bytearray()
        while len(out) < n:
            try:
                chunk = self.sock.recv(n - len(out))
            except (ConnectionResetError, BrokenPipeError) as e:
                raise Closed(str(e)) from e
            if not chunk:
                raise Closed(f"EOF after {len(out)} of {n} bytes")
            out += chunk
        return bytes(out)

    def recv_frame(self):
        (size,) = struct.unpack(">i", self._recv_exact(4))
        return self._recv_exact(size)

    def request(self, api_key, version, body, client_id="e2e-raw"):
        """Sends one request and returns a reader positioned after the response header."""
        self.correlation_id += 1
        cid = self.correlation_id
        self.send_frame(request_header(api_key, version, cid, client_id) + body)
        frame = self.recv_frame()
        # ApiVersions responses always use header v0, even for flexible versions (KIP-511).
        flex_header = is_flexible(api_key, version) and api_key != API_VERSIONS
        r = R(frame, flex=False)
        got = r.i32()
        assert got == cid, f"correlation id {got} != {cid}"
        if flex_header:
            r.flex = True
            r.tags()
        r.flex = is_flexible(api_key, version)
        return r

    def closed_within(self, seconds):
        """True when the peer closes the connection (EOF / reset) within `seconds`, False when
        it is still open then. Any bytes received before the close are ignored."""
        deadline = time.monotonic() + seconds
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return False
            except (ConnectionResetError, BrokenPipeError):
                return True
            if not chunk:
                return True


# ---------------------------------------------------------------------------------------------
# Requests and responses the tests use.

def api_versions_body(version):
    w = W(flex=is_flexible(API_VERSIONS, version))
    if version >= 3:
        w.string("e2e-raw").string("0.1.0").tags()
    return w.done()


def parse_api_versions(r, version):
    """Returns (error_code, {api_key: (min, max)}). `version` is the format the body is in."""
    flex = version >= 3
    r.flex = flex
    err = r.i16()

    def entry(rr):
        k, lo, hi = rr.i16(), rr.i16(), rr.i16()
        rr.tags()
        return k, (lo, hi)

    keys = dict(r.array(entry) or [])
    if version >= 1:
        r.i32()  # throttle_time_ms
    r.tags()
    return err, keys


def api_versions(conn, version=0):
    r = conn.request(API_VERSIONS, version, api_versions_body(version))
    return parse_api_versions(r, version)


def pick_version(supported, api_key, lo, hi):
    """Highest version in [lo, hi] that the broker advertises for api_key, or None."""
    if api_key not in supported:
        return None
    bmin, bmax = supported[api_key]
    v = min(hi, bmax)
    return v if v >= max(lo, bmin) else None


def create_topics_body(version, name, num_partitions=1, replication_factor=1, configs=None,
                       assignments=None, validate_only=False, timeout_ms=5000):
    w = W(flex=is_flexible(CREATE_TOPICS, version))

    def topic(w, _):
        w.string(name).i32(num_partitions).i16(replication_factor)
        w.array(assignments or [],
                lambda w, a: w.i32(a[0]).array(a[1], lambda w, b: w.i32(b)).tags())
        w.array(list((configs or {}).items()), lambda w, kv: w.string(kv[0]).string(kv[1]).tags())
        w.tags()

    w.array([None], topic).i32(timeout_ms)
    if version >= 1:
        w.boolean(validate_only)
    return w.tags().done()


def parse_create_topics(r, version):
    """Returns [(name, error_code, error_message)]."""
    if version >= 2:
        r.i32()  # throttle

    def topic(rr):
        name = rr.string()
        if version >= 7:
            rr.uuid()
        err = rr.i16()
        msg = rr.string() if version >= 1 else None
        if version >= 5:
            rr.i32()  # num_partitions
            rr.i16()  # replication_factor

            def cfg(c):
                c.string(), c.string(), c.boolean(), c.i8(), c.boolean()
                c.tags()

            rr.array(cfg)
        rr.tags()
        return name, err, msg

    return r.array(topic)


def record_batch(records, base_timestamp=None, corrupt_crc=False, producer_id=-1,
                 producer_epoch=-1, base_sequence=-1, attributes=0, magic=2):
    """A record batch (magic v2 layout) holding `records` [(key, value)] or [(key, value,
    timestamp_delta)], offsets 0..n-1; producer fields for idempotent batches, raw attributes
    (codec bits) and magic as given. maxTimestamp is the base timestamp."""
    ts = int(time.time() * 1000) if base_timestamp is None else base_timestamp
    recs = bytearray()
    for i, (k, v, *delta) in enumerate(records):
        body = W().i8(0).varint(delta[0] if delta else 0).varint(i)
        if k is None:
            body.varint(-1)
        else:
            body.varint(len(k)).raw(k)
        if v is None:
            body.varint(-1)
        else:
            body.varint(len(v)).raw(v)
        body.uvarint(0)  # headers count (varint 0)
        b = body.done()
        recs += W().varint(len(b)).done() + b
    after_crc = (
        W().i16(attributes).i32(len(records) - 1).i64(ts).i64(ts).i64(producer_id)
        .i16(producer_epoch).i32(base_sequence).i32(len(records)).raw(bytes(recs)).done()
    )
    crc = crc32c(after_crc)
    if corrupt_crc:
        crc ^= 0xDEADBEEF
    # batchLength counts from partitionLeaderEpoch to the end.
    tail = W().i32(-1).i8(magic).raw(struct.pack(">I", crc)).raw(after_crc).done()
    return W().i64(0).i32(len(tail)).raw(tail).done()


def produce_body(version, topic, partition, batch, acks=-1, timeout_ms=5000,
                 transactional_id=None):
    w = W(flex=is_flexible(PRODUCE, version))
    w.string(transactional_id)  # (v3+)
    w.i16(acks).i32(timeout_ms)

    def part(w, _):
        w.i32(partition).bytes_(batch).tags()

    def tp(w, _):
        w.string(topic).array([None], part).tags()

    w.array([None], tp)
    return w.tags().done()


def parse_produce(r, version):
    """Returns [(topic, partition, error_code, base_offset)]."""
    return [(p["topic"], p["partition"], p["error_code"], p["base_offset"])
            for p in parse_produce_details(r, version)]


def parse_produce_details(r, version):
    """Returns one dict per partition: topic, partition, error_code, base_offset and, from v8,
    record_errors [(batch_index, message)] and error_message (else [] and None)."""
    out = []

    def part(rr, topic):
        p = {"topic": topic, "partition": rr.i32(), "error_code": rr.i16(),
             "base_offset": rr.i64(), "record_errors": [], "error_message": None}
        rr.i64()  # log_append_time_ms (v2+)
        if version >= 5:
            rr.i64()  # log_start_offset
        if version >= 8:
            def record_error(e):
                idx, msg = e.i32(), e.string()
                e.tags()
                return idx, msg
            p["record_errors"] = rr.array(record_error)
            p["error_message"] = rr.string()
        rr.tags()
        out.append(p)

    def tp(rr):
        name = rr.string()
        rr.array(lambda p: part(p, name))
        rr.tags()

    r.array(tp)
    r.i32()  # throttle
    r.tags()
    return out


def fetch_body(version, topic, partition, offset=0, max_wait_ms=0, min_bytes=1,
               max_bytes=1 << 20, partition_max_bytes=1 << 20):
    w = W(flex=is_flexible(FETCH, version))
    w.i32(-1).i32(max_wait_ms).i32(min_bytes).i32(max_bytes)  # replica_id, wait, min, max
    w.i8(0)  # isolation_level (v4+)
    if version >= 7:
        w.i32(0).i32(-1)  # session_id, session_epoch: sessionless full fetch

    def part(w, _):
        w.i32(partition)
        if version >= 9:
            w.i32(-1)  # current_leader_epoch
        w.i64(offset)
        if version >= 12:
            w.i32(-1)  # last_fetched_epoch
        if version >= 5:
            w.i64(-1)  # log_start_offset (follower only)
        w.i32(partition_max_bytes).tags()

    def tp(w, _):
        w.string(topic).array([None], part).tags()

    w.array([None], tp)
    if version >= 7:
        w.array([], lambda w, x: None)  # forgotten_topics_data
    if version >= 11:
        w.string("")  # rack_id
    return w.tags().done()


def parse_fetch(r, version):
    """Returns (top_level_error, [(topic, partition, error_code, high_watermark, records)])."""
    r.i32()  # throttle (v1+)
    top_err = r.i16() if version >= 7 else NONE
    if version >= 7:
        r.i32()  # session_id
    out = []

    def part(rr, topic):
        idx, err, hw = rr.i32(), rr.i16(), rr.i64()
        rr.i64()  # last_stable_offset (v4+)
        if version >= 5:
            rr.i64()  # log_start_offset
        rr.array(lambda a: (a.i64(), a.i64(), a.tags()))  # aborted_transactions
        if version >= 11:
            rr.i32()  # preferred_read_replica
        recs = rr.bytes_()
        rr.tags()
        out.append((topic, idx, err, hw, recs))

    def tp(rr):
        name = rr.string()
        rr.array(lambda p: part(p, name))
        rr.tags()

    r.array(tp)
    r.tags()
    return top_err, out


def consumer_subscription(topics):
    """ConsumerProtocolSubscription v0: what a classic consumer puts in JoinGroup metadata."""
    w = W().i16(0).array(topics, lambda w, t: w.string(t)).bytes_(None)
    return w.done()


def join_group_body(version, group, member_id, protocols, session_timeout_ms=6000,
                    rebalance_timeout_ms=10000, protocol_type="consumer"):
    """protocols: [(name, metadata bytes)]."""
    w = W(flex=is_flexible(JOIN_GROUP, version))
    w.string(group).i32(session_timeout_ms)
    if version >= 1:
        w.i32(rebalance_timeout_ms)
    w.string(member_id)
    if version >= 5:
        w.string(None)  # group_instance_id
    w.string(protocol_type)
    w.array(protocols, lambda w, p: w.string(p[0]).bytes_(p[1]).tags())
    if version >= 8:
        w.string(None)  # reason
    return w.tags().done()


def parse_join_group(r, version):
    out = {}
    if version >= 2:
        r.i32()  # throttle
    out["error_code"] = r.i16()
    out["generation_id"] = r.i32()
    if version >= 7:
        out["protocol_type"] = r.string()
    out["protocol_name"] = r.string()
    out["leader"] = r.string()
    if version >= 9:
        r.boolean()  # skip_assignment
    out["member_id"] = r.string()

    def member(m):
        mid = m.string()
        if version >= 5:
            m.string()
        m.bytes_()
        m.tags()
        return mid

    out["members"] = r.array(member)
    r.tags()
    return out


def join_group(conn, version, group, protocols, session_timeout_ms=6000, rebalance_timeout_ms=10000,
               protocol_type="consumer"):
    """JoinGroup including the KIP-394 MEMBER_ID_REQUIRED round trip (v4+)."""
    member_id = ""
    for _ in range(2):
        r = conn.request(JOIN_GROUP, version, join_group_body(
            version, group, member_id, protocols, session_timeout_ms, rebalance_timeout_ms,
            protocol_type))
        resp = parse_join_group(r, version)
        if resp["error_code"] == MEMBER_ID_REQUIRED and not member_id:
            member_id = resp["member_id"]
            continue
        return resp
    return resp


def metadata_v1_brokers(conn):
    """Metadata v1 for no topics (empty array); returns [(node_id, host, port)]."""
    r = conn.request(METADATA, 1, W().array([], None).done())
    return r.array(lambda b: (b.i32(), b.string(), b.i32(), b.string())[:3])


def init_producer_id_body(version, transactional_id=None, producer_id=-1, producer_epoch=-1):
    w = W(flex=is_flexible(INIT_PRODUCER_ID, version))
    w.string(transactional_id).i32(60000)
    if version >= 3:
        w.i64(producer_id).i16(producer_epoch)
    return w.tags().done()


def init_producer_id(conn, version, transactional_id=None, producer_id=-1, producer_epoch=-1):
    """Returns (error_code, producer_id, producer_epoch)."""
    r = conn.request(INIT_PRODUCER_ID, version, init_producer_id_body(
        version, transactional_id, producer_id, producer_epoch))
    r.i32()  # throttle
    out = (r.i16(), r.i64(), r.i16())
    r.tags()
    return out


def metadata_v1(conn, topics=None):
    """Metadata v1 (`topics` None: all topics). Returns a dict: brokers [(id, host, port, rack)],
    controller_id, topics {name: (error_code, {partition: (error_code, leader, replicas, isr)})}."""
    w = W()
    if topics is None:
        w.i32(-1)
    else:
        w.array(list(topics), lambda w, t: w.string(t))
    r = conn.request(METADATA, 1, w.done())
    brokers = r.array(lambda b: (b.i32(), b.string(), b.i32(), b.string()))
    controller_id = r.i32()

    def partition(p):
        err = p.i16()
        index = p.i32()
        leader = p.i32()
        replicas = p.array(lambda x: x.i32())
        isr = p.array(lambda x: x.i32())
        return index, (err, leader, replicas, isr)

    def topic(t):
        err = t.i16()
        name = t.string()
        t.boolean()  # is_internal
        return name, (err, dict(t.array(partition)))

    return {"brokers": brokers, "controller_id": controller_id, "topics": dict(r.array(topic))}


def create_topic(conn, name, num_partitions=1, replication_factor=1, configs=None,
                 assignments=None, version=5, timeout_ms=30000):
    """CreateTopics for one topic; returns (error_code, error_message)."""
    body = create_topics_body(version, name, num_partitions, replication_factor, configs,
                              assignments, timeout_ms=timeout_ms)
    r = conn.request(CREATE_TOPICS, version, body)
    results = parse_create_topics(r, version)
    assert len(results) == 1 and results[0][0] == name, results
    return results[0][1], results[0][2]


def java_string_hash(s):
    """Java's String.hashCode over UTF-16 code units (as a signed 32-bit int)."""
    h = 0
    data = s.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + int.from_bytes(data[i:i + 2], "big")) & 0xFFFFFFFF
    return h - (1 << 32) if h >= (1 << 31) else h


def group_partition(group, num_partitions):
    """The __consumer_offsets partition of a group (Kafka's Utils.abs(hashCode) % n; Utils.abs is
    Math.abs with MIN_VALUE mapped to 0, not a mask of the sign bit)."""
    h = java_string_hash(group)
    return (0 if h == -(1 << 31) else abs(h)) % num_partitions


def find_coordinator(conn, group, key_type=0):
    """FindCoordinator v1 for a group (key type 1: a transactional id); returns (error_code,
    node_id, host, port)."""
    r = conn.request(FIND_COORDINATOR, 1, W().string(group).i8(key_type).done())
    r.i32()  # throttle
    err = r.i16()
    r.string()  # error message
    return err, r.i32(), r.string(), r.i32()


def find_coordinators(conn, groups, version=4):
    """FindCoordinator v4+ (KIP-699, several keys); returns {key: (error_code, node_id, host, port)}."""
    w = W(flex=True).i8(0).array(list(groups), lambda w, g: w.string(g)).tags()
    r = conn.request(FIND_COORDINATOR, version, w.done())
    r.i32()  # throttle

    def coordinator(c):
        key = c.string()
        node_id, host, port = c.i32(), c.string(), c.i32()
        err = c.i16()
        c.string()  # error message
        c.tags()
        return key, (err, node_id, host, port)

    out = dict(r.array(coordinator))
    r.tags()
    return out


def offset_commit(conn, group, topic, offsets, generation=-1, member_id=""):
    """OffsetCommit v2 of {partition: offset}; returns {partition: error_code}."""
    w = W().string(group).i32(generation).string(member_id).i64(-1)
    w.array([topic], lambda w, t: w.string(t).array(
        sorted(offsets.items()), lambda w, po: w.i32(po[0]).i64(po[1]).string("")))
    r = conn.request(OFFSET_COMMIT, 2, w.done())
    out = {}
    for _, parts in r.array(lambda t: (t.string(), t.array(lambda p: (p.i32(), p.i16())))):
        out.update(dict(parts))
    return out


def offset_fetch(conn, group, topic, partitions):
    """OffsetFetch v2; returns (error_code, {partition: (offset, error_code)})."""
    w = W().string(group).array([topic], lambda w, t: w.string(t).array(
        list(partitions), lambda w, p: w.i32(p)))
    r = conn.request(OFFSET_FETCH, 2, w.done())

    def partition(p):
        index, offset = p.i32(), p.i64()
        p.string()  # metadata
        return index, (offset, p.i16())

    out = {}
    for _, parts in r.array(lambda t: (t.string(), t.array(partition))):
        out.update(dict(parts))
    return r.i16(), out


def describe_cluster(conn):
    """DescribeCluster v0: {"controller_id", "brokers": [(id, host, port, rack)]}. Gregor names
    the active controller here (Metadata names a live broker that forwards admin requests)."""
    r = conn.request(DESCRIBE_CLUSTER, 0, W(flex=True).boolean(False).tags().done())
    r.i32()  # throttle
    err = r.i16()
    r.string()  # error message
    assert err == NONE, err
    r.string()  # cluster id
    controller_id = r.i32()

    def broker(b):
        out = (b.i32(), b.string(), b.i32(), b.string())
        b.tags()
        return out

    brokers = r.array(broker)
    return {"controller_id": controller_id, "brokers": brokers}
