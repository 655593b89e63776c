"""The raw-socket codec (kwire.py) checked against kafka-python's independent implementation of
the protocol, so that a failing bad-input test points at the broker, not at our encoder.
No broker needed."""

import pytest
from kafka.protocol.admin.topics import CreateTopicsRequest, CreateTopicsResponse
from kafka.protocol.consumer.fetch import FetchRequest, FetchResponse
from kafka.protocol.consumer.group import JoinGroupRequest, JoinGroupResponse
from kafka.protocol.metadata.api_versions import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer.produce import ProduceRequest, ProduceResponse
from kafka.record.default_records import DefaultRecordBatch

import kwire


def roundtrip(cls, body, version):
    """kafka-python decodes our bytes and re-encodes them identically."""
    msg = cls.decode(body, version=version)
    object.__setattr__(msg, "_header", None)  # decode() skips __init__; encode() reads it
    assert bytes(msg.encode(version=version)) == body, f"{cls.__name__} v{version}"
    return msg


def test_crc32c_known_answer():
    assert kwire.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("version", range(0, 5))
def test_api_versions_request(version):
    roundtrip(ApiVersionsRequest, kwire.api_versions_body(version), version)


@pytest.mark.parametrize("version", range(0, 4))
def test_api_versions_response(version):
    resp = ApiVersionsResponse(error_code=35, api_keys=[
        ApiVersionsResponse.ApiVersion(api_key=18, min_version=0, max_version=4)],
        throttle_time_ms=0)
    body = bytes(resp.encode(version=version))
    err, keys = kwire.parse_api_versions(kwire.R(body), version)
    assert (err, keys) == (35, {18: (0, 4)})


@pytest.mark.parametrize("version", range(2, 8))
def test_create_topics(version):
    body = kwire.create_topics_body(version, "t1", 3, 1, {"cleanup.policy": "compact"},
                                    [(0, [1])], validate_only=True)
    msg = roundtrip(CreateTopicsRequest, body, version)
    t = msg.topics[0]
    assert (t.name, t.num_partitions, msg.validate_only) == ("t1", 3, True)
    R = CreateTopicsResponse
    resp = R(throttle_time_ms=0, topics=[R.CreatableTopicResult(
        name="t1", error_code=40, error_message="bad", num_partitions=1, replication_factor=1,
        configs=[])])
    out = kwire.parse_create_topics(kwire.R(bytes(resp.encode(version=version)),
                                            flex=version >= 5), version)
    assert out == [("t1", 40, "bad")]


@pytest.mark.parametrize("version", range(3, 13))
def test_produce(version):
    batch = kwire.record_batch([(b"k", b"v"), (None, b"w")])
    body = kwire.produce_body(version, "t", 2, batch)
    msg = roundtrip(ProduceRequest, body, version)
    assert msg.acks == -1
    R = ProduceResponse
    T = R.TopicProduceResponse
    resp = R(responses=[T(name="t", partition_responses=[T.PartitionProduceResponse(
        index=2, error_code=3, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
        record_errors=[], error_message=None)])], throttle_time_ms=0)
    out = kwire.parse_produce(kwire.R(bytes(resp.encode(version=version)),
                                      flex=version >= 9), version)
    assert out == [("t", 2, 3, -1)]


@pytest.mark.parametrize("version", range(8, 13))
def test_produce_record_errors(version):
    R = ProduceResponse
    T = R.TopicProduceResponse
    P = T.PartitionProduceResponse
    resp = R(responses=[T(name="t", partition_responses=[P(
        index=0, error_code=87, base_offset=-1, log_append_time_ms=-1, log_start_offset=-1,
        record_errors=[P.BatchIndexAndErrorMessage(batch_index=1, batch_index_error_message="a"),
                       P.BatchIndexAndErrorMessage(batch_index=4,
                                                   batch_index_error_message=None)],
        error_message="two")])], throttle_time_ms=0)
    out = kwire.parse_produce_details(kwire.R(bytes(resp.encode(version=version)),
                                              flex=version >= 9), version)
    assert out == [{"topic": "t", "partition": 0, "error_code": 87, "base_offset": -1,
                    "record_errors": [(1, "a"), (4, None)], "error_message": "two"}]


def test_record_batch_is_valid_v2_with_crc():
    raw = kwire.record_batch([(b"k", b"v"), (None, b"w")], base_timestamp=1000)
    b = DefaultRecordBatch(raw)
    assert b.validate_crc()
    recs = list(b)
    assert [(r.key, r.value, r.offset, r.timestamp) for r in recs] == [
        (b"k", b"v", 0, 1000), (None, b"w", 1, 1000)]
    assert not DefaultRecordBatch(kwire.record_batch([(b"k", b"v")], corrupt_crc=True)
                                  ).validate_crc()


@pytest.mark.parametrize("version", range(4, 13))
def test_fetch(version):
    body = kwire.fetch_body(version, "t", 5, offset=7, max_wait_ms=100, min_bytes=1)
    msg = roundtrip(FetchRequest, body, version)
    assert msg.topics[0].partitions[0].fetch_offset == 7
    R = FetchResponse
    T = R.FetchableTopicResponse
    resp = R(throttle_time_ms=0, error_code=0, session_id=0, responses=[T(
        topic="t", partitions=[T.PartitionData(
            partition_index=5, error_code=3, high_watermark=-1, last_stable_offset=-1,
            log_start_offset=-1, aborted_transactions=None, preferred_read_replica=-1,
            records=None)])])
    top, parts = kwire.parse_fetch(kwire.R(bytes(resp.encode(version=version)),
                                           flex=version >= 12), version)
    assert top == 0 and parts == [("t", 5, 3, -1, None)]


@pytest.mark.parametrize("version", range(2, 10))
def test_join_group(version):
    meta = kwire.consumer_subscription(["a", "b"])
    body = kwire.join_group_body(version, "g", "m-1", [("range", meta),
                                                       ("cooperative-sticky", meta)])
    msg = roundtrip(JoinGroupRequest, body, version)
    assert [p.name for p in msg.protocols] == ["range", "cooperative-sticky"]
    R = JoinGroupResponse
    resp = R(throttle_time_ms=0, error_code=0, generation_id=3, protocol_type="consumer",
             protocol_name="range", leader="m-1", skip_assignment=False, member_id="m-1",
             members=[R.JoinGroupResponseMember(member_id="m-1", group_instance_id=None,
                                                metadata=meta)])
    out = kwire.parse_join_group(kwire.R(bytes(resp.encode(version=version)),
                                         flex=version >= 6), version)
    assert (out["generation_id"], out["protocol_name"], out["members"]) == (3, "range", ["m-1"])
