"""Raw requests to the modern listener: kafka-python's ``kafka.protocol`` classes for the
bodies, a hand-made frame and header around them, so a test can send anything."""

import socket
import struct

from kafka.protocol.consumer import ListOffsetsRequest, ListOffsetsResponse
from kafka.protocol.metadata import ApiVersionsRequest, ApiVersionsResponse
from kafka.protocol.producer import ProduceRequest, ProduceResponse

from mpbroker.records import encode_batch

_Topic = ProduceRequest.TopicProduceData
_Partition = ProduceRequest.TopicProduceData.PartitionProduceData
BASE_TS = 1_700_000_000_000


def request_frame(api_key: int, version: int, correlation_id: int, body: bytes, client_id: bytes = b"wire",
                  flexible: bool = False) -> bytes:
    """A request frame; ``flexible``: header v2 (an empty tagged-field block after the client id)."""
    tags = b"\x00" if flexible else b""
    payload = struct.pack(">hhih", api_key, version, correlation_id, len(client_id)) + client_id + tags + body
    return struct.pack(">i", len(payload)) + payload


def produce_body(topic: str, partition: int, records: bytes, acks: int = 1, version: int = 3) -> bytes:
    request = ProduceRequest(transactional_id=None, acks=acks, timeout_ms=5000, topic_data=[
        _Topic(name=topic, partition_data=[_Partition(index=partition, records=records)])])
    return bytes(request.encode(version=version))


def good_batch(n: int = 2, size: int = 10) -> bytes:
    return encode_batch([(b"k%d" % i, b"v" * size, [("h", b"x")], BASE_TS + i) for i in range(n)])


class Wire:
    """One connection to ``kafka.port``."""

    def __init__(self, broker, timeout: float = 10.0):
        self.sock = socket.create_connection((broker.host, broker.kafka_port), timeout=timeout)
        self._correlation = 0

    def close(self):
        self.sock.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def _read_exactly(self, n: int):
        chunks = []
        while n:
            chunk = self.sock.recv(n)
            if not chunk:
                return None
            chunks.append(chunk)
            n -= len(chunk)
        return b"".join(chunks)

    def read_frame(self):
        """``(correlation id, body)`` of the next answer, or None once the broker closed."""
        head = self._read_exactly(4)
        if head is None:
            return None
        (size,) = struct.unpack(">i", head)
        payload = self._read_exactly(size)
        if payload is None:
            return None
        return struct.unpack_from(">i", payload)[0], payload[4:]

    def closed_by_broker(self) -> bool:
        """True once the broker closed the connection without answering (EOF or reset)."""
        try:
            return self.sock.recv(1) == b""
        except ConnectionResetError:
            return True

    def call(self, api_key: int, version: int, body: bytes, response_class=None, response_version=None,
             flexible: bool = False):
        """The answer's body (decoded with ``response_class``); ``flexible``: request header
        v2, and the answer's header v1 (its empty tagged-field block) checked and skipped."""
        self._correlation += 1
        self.send(request_frame(api_key, version, self._correlation, body, flexible=flexible))
        answer = self.read_frame()
        assert answer is not None, f"connection closed instead of answering api {api_key} v{version}"
        correlation, body = answer
        assert correlation == self._correlation
        if flexible:
            assert body[:1] == b"\x00", f"no empty tagged-field block in the response header: {body[:8]!r}"
            body = body[1:]
        if response_class is None:
            return body
        return response_class.decode(body, version=version if response_version is None else response_version)

    def produce(self, topic: str, partition: int, records: bytes, version: int = 3):
        """``(error code, base offset)`` of a one-partition produce, acks=1."""
        answer = self.call(0, version, produce_body(topic, partition, records, version=version), ProduceResponse)
        [topic_answer] = answer.responses
        [partition_answer] = topic_answer.partition_responses
        return partition_answer.error_code, partition_answer.base_offset

    def latest_offset(self, topic: str, partition: int) -> int:
        request = ListOffsetsRequest(replica_id=-1, isolation_level=0, topics=[
            ListOffsetsRequest.ListOffsetsTopic(name=topic, partitions=[
                ListOffsetsRequest.ListOffsetsTopic.ListOffsetsPartition(
                    partition_index=partition, current_leader_epoch=-1, timestamp=-1, max_num_offsets=1)])])
        answer = self.call(2, 1, bytes(request.encode(version=1)), ListOffsetsResponse)
        [partition_answer] = answer.topics[0].partitions
        assert partition_answer.error_code == 0
        return partition_answer.offset

    def api_versions(self, version: int = 0):
        body = bytes(ApiVersionsRequest().encode(version=version)) if version <= 3 else b""
        return self.call(18, version, body, ApiVersionsResponse,
                         response_version=0 if version > 3 else version)
