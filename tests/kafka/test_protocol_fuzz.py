"""A fuzzer for the modern request path (the 0.7 one is
tests/faults/test_protocol_fuzz.py), against one live broker (two workers): hypothesis
sends well-formed requests of every API served (Produce 3-8 with batches of every codec,
Fetch 4-11, ListOffsets 1-5, Metadata 0-8, ApiVersions 0-3, InitProducerId 0-4 and
DescribeAcls 1-2, flexible ones with request header v2) and of unknown APIs and
versions, then damages them: flipped and inserted bytes, a length set to -1 (a null),
truncated bodies, random bodies, a size field that lies. Each example is one connection.
Checked for each: the broker answers (a whole frame with the request's correlation id)
or closes the connection; a request it keeps (a long-polling Fetch, a frame whose size
promises more bytes) is closed once the client half-closes. Checked at the end: the
acceptor and the workers are up with zero restarts, no traceback was logged, and a good
produce and ListOffsets still work.

``MPBROKER_KAFKA_FUZZ_EXAMPLES`` (default 150, about 10 s) sets the number of examples."""

import os
import socket
import struct
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from kafka.protocol.admin import DescribeAclsRequest
from kafka.protocol.consumer import FetchRequest, ListOffsetsRequest
from kafka.protocol.metadata import ApiVersionsRequest, MetadataRequest
from kafka.protocol.producer import InitProducerIdRequest

from mpbroker.records import encode_batch
from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy
from tests.kafka.wire import Wire, good_batch, produce_body

EXAMPLES = int(os.environ.get("MPBROKER_KAFKA_FUZZ_EXAMPLES", "150"))
ANSWER_WAIT_S = 1.0  # then the client half-closes
CLOSE_WAIT_S = 5.0
TOPICS = ["fuzz", "fuzz-two", "../x", "new-topic"]
KINDS = ["produce", "fetch", "list_offsets", "metadata", "api_versions", "init_producer_id", "describe_acls"]
KEYS = (0, 1, 2, 3, 18, 22, 29)  # of KINDS


@pytest.fixture(scope="module")
def fuzz_broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("kafka-fuzz"), num_workers=2, num_partitions=2) as broker:
        with Wire(broker) as wire:
            assert wire.produce("fuzz", 0, good_batch(3))[0] == 0
        yield broker
        assert_healthy(broker)
        with Wire(broker) as wire:
            error, offset = wire.produce("fuzz", 1, good_batch(2))
            assert error == 0 and wire.latest_offset("fuzz", 1) == offset + 2


def header(api_key, version, correlation_id, flexible):
    return struct.pack(">hhih", api_key, version, correlation_id, 4) + b"fuzz" + (b"\x00" if flexible else b"")


@st.composite
def requests(draw):
    """``(api_key, version, flexible header, body)`` of a well-formed request."""
    kind = draw(st.sampled_from(KINDS))
    topic = draw(st.sampled_from(TOPICS))
    partition = draw(st.integers(-2, 3))
    if kind == "produce":
        version = draw(st.integers(3, 8))
        records = encode_batch([(draw(st.none() | st.binary(max_size=8)), draw(st.binary(max_size=64)), (), 1)
                                for _ in range(draw(st.integers(1, 4)))], codec=draw(st.integers(0, 4)))
        acks = draw(st.sampled_from([0, 1, -1, 2]))
        return 0, version, False, produce_body(topic, partition, records, acks=acks, version=version)
    if kind == "fetch":
        version = draw(st.integers(4, 11))
        request = FetchRequest(
            replica_id=-1, max_wait_ms=draw(st.integers(0, 200)), min_bytes=draw(st.integers(0, 10)),
            max_bytes=draw(st.integers(0, 1 << 20)), isolation_level=draw(st.integers(0, 1)), session_id=0,
            session_epoch=-1, rack_id="", forgotten_topics_data=[],
            topics=[FetchRequest.FetchTopic(topic=topic, partitions=[FetchRequest.FetchTopic.FetchPartition(
                partition=partition, current_leader_epoch=-1, fetch_offset=draw(st.integers(-2, 400)),
                log_start_offset=-1, partition_max_bytes=draw(st.integers(0, 1 << 16)))])])
        return 1, version, False, bytes(request.encode(version=version))
    if kind == "list_offsets":
        version = draw(st.integers(1, 5))
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=partition, current_leader_epoch=-1,
                    timestamp=draw(st.sampled_from([-1, -2, -3, 0, 1_700_000_000_000])), max_num_offsets=1)])])
        return 2, version, False, bytes(request.encode(version=version))
    if kind == "metadata":
        version = draw(st.integers(0, 8))
        topics = None if version > 0 and draw(st.booleans()) else [MetadataRequest.MetadataRequestTopic(name=topic)]
        request = MetadataRequest(topics=topics, allow_auto_topic_creation=draw(st.booleans()),
                                  include_cluster_authorized_operations=False,
                                  include_topic_authorized_operations=False)
        return 3, version, False, bytes(request.encode(version=version))
    if kind == "init_producer_id":
        version = draw(st.integers(0, 4))
        request = InitProducerIdRequest(
            transactional_id=draw(st.none() | st.sampled_from(["", "txn"])),
            transaction_timeout_ms=draw(st.integers(-1, 1 << 20)),
            producer_id=draw(st.sampled_from([-1, 0, 7, (1 << 63) - 1])), producer_epoch=draw(st.integers(-1, 3)))
        return 22, version, version >= 2, bytes(request.encode(version=version))
    if kind == "describe_acls":
        version = draw(st.integers(1, 2))
        request = DescribeAclsRequest(
            resource_type_filter=draw(st.integers(0, 7)), resource_name_filter=draw(st.none() | st.sampled_from(TOPICS)),
            pattern_type_filter=draw(st.integers(0, 4)), principal_filter=draw(st.none() | st.just("User:x")),
            host_filter=None, operation=draw(st.integers(0, 14)), permission_type=draw(st.integers(0, 3)))
        return 29, version, version >= 2, bytes(request.encode(version=version))
    version = draw(st.integers(0, 3))
    request = ApiVersionsRequest(client_software_name="fuzz", client_software_version="1")
    return 18, version, version >= 3, bytes(request.encode(version=version))


def length_like(payload, start: int) -> list:
    """``(offset, width)`` of every int16 and int32 in ``payload`` past ``start`` whose
    value could be the length of what follows it (1 to the bytes left): where a null
    can be put."""
    found = [(at, width) for width, form in ((2, ">h"), (4, ">i")) for at in range(start, len(payload) - width + 1)
             if 1 <= struct.unpack_from(form, payload, at)[0] <= len(payload) - at - width]
    return found or [(start, 2)]


@st.composite
def examples(draw):
    """``(frame bytes, whether the frame's size field tells the truth)``."""
    how = draw(st.sampled_from(["intact", "flip", "truncate", "insert", "null", "random", "lying-size", "unknown"]))
    if how == "random":
        api_key = draw(st.sampled_from(KEYS))
        version = draw(st.integers(-1, 20))
        payload = header(api_key, version, 7, False) + draw(st.binary(max_size=200))
    elif how == "unknown":
        api_key = draw(st.integers(-(1 << 15), (1 << 15) - 1).filter(lambda k: k not in KEYS))
        payload = header(api_key, draw(st.integers(0, 20)), 7, False) + draw(st.binary(max_size=50))
    else:
        api_key, version, flexible, body = draw(requests())
        payload = bytearray(header(api_key, version, 7, flexible) + body)
        if how == "flip":
            for _ in range(draw(st.integers(1, 4))):
                at = draw(st.integers(0, len(payload) - 1))
                payload[at] ^= draw(st.integers(1, 255))
        elif how == "truncate":
            payload = payload[:draw(st.integers(0, len(payload) - 1))]
        elif how == "null":  # a length made -1: a null string, bytes or array
            at, width = draw(st.sampled_from(length_like(payload, len(payload) - len(body))))
            payload[at:at + width] = b"\xff" * width
        elif how == "insert":
            at = draw(st.integers(0, len(payload)))
            payload[at:at] = draw(st.binary(min_size=1, max_size=16))
        payload = bytes(payload)
    size = len(payload)
    if how == "lying-size":
        size += draw(st.integers(1, 1000))
    return struct.pack(">i", size) + payload, how != "lying-size"


def read_or_eof(sock, deadline):
    """Bytes until one whole frame arrived (``("answer", frame)``), EOF (``("closed", ...)``)
    or the deadline (``("open", ...)``)."""
    data = b""
    while True:
        if len(data) >= 4:
            (size,) = struct.unpack_from(">i", data)
            if len(data) >= 4 + size:
                return "answer", data[4:4 + size]
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return "open", data
        sock.settimeout(remaining)
        try:
            chunk = sock.recv(65536)
        except TimeoutError:
            return "open", data
        except ConnectionResetError:
            return "closed", data
        if not chunk:
            return "closed", data
        data += chunk


@settings(max_examples=EXAMPLES, deadline=None, derandomize=False,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.data_too_large])
@given(example=examples())
def test_damaged_requests_are_answered_or_closed(fuzz_broker, example):
    frame, truthful = example
    with socket.create_connection((fuzz_broker.host, fuzz_broker.kafka_port), timeout=CLOSE_WAIT_S) as sock:
        sock.sendall(frame)
        outcome, data = read_or_eof(sock, time.monotonic() + (ANSWER_WAIT_S if truthful else 0.2))
        if outcome == "answer":
            assert len(frame) >= 12, "an answer to a frame too short to hold a correlation id"
            assert data[:4] == frame[8:12]  # the request's correlation id (as damaged)
            return
        if outcome == "closed":
            return
        sock.shutdown(socket.SHUT_WR)  # a kept request (long poll, bytes promised): EOF must close it
        outcome, data = read_or_eof(sock, time.monotonic() + CLOSE_WAIT_S)
        while outcome == "answer":  # answered just now; then the close
            data = data[4 + struct.unpack_from(">i", data)[0]:]
            outcome, data = read_or_eof(sock, time.monotonic() + CLOSE_WAIT_S)
        assert outcome == "closed", "the broker neither answered nor closed the connection"


def test_still_healthy_after_fuzzing(fuzz_broker):
    status = fuzz_broker.status()
    assert all(p["restarts"] == 0 and p["state"] == "up" for p in [*status["workers"], status["acceptor"]])
    with Wire(fuzz_broker) as wire:
        assert wire.api_versions(0).error_code == 0
    # "../x" was among the topics: nothing of it exists, in the log directory or above it
    for directory, dirs, _ in os.walk(os.path.dirname(os.path.dirname(fuzz_broker.log_dir))):
        assert not any(d == "x" or d.startswith("x-") for d in dirs), (directory, dirs)
