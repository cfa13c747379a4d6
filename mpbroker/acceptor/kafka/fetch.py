"""Fetch for modern consumers: answers from the segment files, with long polling.

Each partition is read where the request says (``reads``), within its
``partition_max_bytes`` and what is left of the request's ``max_bytes``; the first
partition with data sends its first batch whole even past those limits (KIP-74). A
log of record batches goes out with ``os.sendfile``; a 0.7 log is converted.

Long polling: a fetch that finds fewer than ``min_bytes`` and has ``max_wait_ms`` to
spare waits, its answer reserved in the connection's order (the connection's later
requests are answered after it, as Kafka answers a connection's requests in order).
It is looked at again after every round of answers from the workers (an append may
have made its data visible) and every ``RECHECK_MS`` (a 0.7 log's data becomes
visible when flushed, which no answer announces), and answered once enough bytes are
there or its time is up. Fetch sessions (KIP-227) are not kept: every answer says
session 0, so clients send full fetches, which they all support.
"""

import time

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.kafka_protocol import header
from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.kafka_protocol.fetch import PartitionData, encode_fetch_response

RECHECK_MS = 10
MAX_WAIT_MS = 30_000  # a longer max_wait_ms is cut to this
_NO_SESSION = 0
FETCH_SESSION_ID_NOT_FOUND = 70


class _Waiting:
    __slots__ = ("connection", "response", "request_header", "request", "deadline")

    def __init__(self, connection, response, request_header, request, deadline):
        self.connection = connection
        self.response = response
        self.request_header = request_header
        self.request = request
        self.deadline = deadline


class FetchHandler:
    def __init__(self, config, reads, legacy_handlers, timers, to_send):
        self.config = config
        self._reads = reads
        self._legacy = legacy_handlers
        self._timers = timers
        self._to_send = to_send  # callable(connection): its answer became ready
        self._waiting = []
        self._timer_set = False

    def handle(self, connection, request_header, request) -> None:
        if request.session_id not in (None, _NO_SESSION) or (request.session_epoch or 0) > 0:
            connection.respond(self._answer(request_header, request, error=FETCH_SESSION_ID_NOT_FOUND))
            return
        max_wait_ms = min(max(request.max_wait_ms, 0), MAX_WAIT_MS)
        if max_wait_ms == 0 or request.min_bytes <= 0 or self._available(request) >= request.min_bytes:
            connection.respond(self._answer(request_header, request))
            return
        self._waiting.append(_Waiting(connection, connection.reserve(), request_header, request,
                                      time.monotonic() + max_wait_ms / 1000))
        self._arm()

    def check_waiting(self) -> None:
        """Answer the waiting fetches whose bytes came or whose time is up."""
        if not self._waiting:
            return
        now = time.monotonic()
        still = []
        for waiting in self._waiting:
            if waiting.connection.closed:
                continue
            if now >= waiting.deadline or self._available(waiting.request) >= waiting.request.min_bytes:
                waiting.response.fill(self._answer(waiting.request_header, waiting.request))
                self._to_send(waiting.connection)
            else:
                still.append(waiting)
        self._waiting = still

    def answer_all(self) -> None:
        """A stopping acceptor answers every waiting fetch with what there is."""
        for waiting in self._waiting:
            waiting.deadline = 0
        self.check_waiting()

    def _arm(self) -> None:
        if not self._timer_set:
            self._timer_set = True
            self._timers.once(RECHECK_MS, self._on_timer)

    def _on_timer(self, _now_ms) -> None:
        self._timer_set = False
        self.check_waiting()
        if self._waiting:
            self._arm()

    def _available(self, request) -> int:
        """Bytes readable past the fetch offsets (an estimate that never reads a file)."""
        total = 0
        for topic in request.topics:
            for partition in topic.partitions:
                if self._check(topic.topic, partition.partition):
                    return 1 << 62  # an unknown (or deleted) topic is worth answering at once too
                error, view, _, end = self._reads.bounds(topic.topic, partition.partition)
                if error:
                    return 1 << 62  # an error is worth answering at once
                if view is not None and end > partition.fetch_offset:
                    total += end - partition.fetch_offset
        return total

    def _answer(self, request_header, request, error: int = 0) -> list:
        version = request_header.api_version
        topics = []
        budget = max(request.max_bytes if version >= 3 else 1 << 31, 0)
        whole_first = True
        for topic in request.topics:
            partitions = []
            for partition in topic.partitions:
                if error:
                    partitions.append(PartitionData(partition.partition, error, -1, -1, None, 0))
                    continue
                data = self._partition(topic.topic, partition, min(partition.partition_max_bytes, budget),
                                       whole_first)
                if data.records_bytes:
                    whole_first = False
                    budget -= data.records_bytes
                partitions.append(data)
            topics.append((topic.topic, partitions))
        parts, size = encode_fetch_response(version, topics, error=error if version >= 7 else 0,
                                            session_id=_NO_SESSION)
        head = header.response_header(request_header.correlation_id, False)
        return [header.frame(len(head) + size) + head, *parts]

    def _partition(self, topic: str, partition, max_bytes: int, whole_first: bool) -> PartitionData:
        number = partition.partition
        error = self._check(topic, number)
        if error:
            return PartitionData(number, error, -1, -1, None, 0)
        read = self._reads.read(topic, number, partition.fetch_offset, max(max_bytes, 0), whole_first)
        records = read.records
        if records is not None and not isinstance(records, bytes):
            records.file.acquire()  # held until the connection has sent it
        return PartitionData(number, read.error, read.high_watermark, read.log_start, records, read.length)

    def _check(self, topic: str, partition: int) -> int:
        legacy = self._legacy
        try:
            check_topic(topic)
        except (InvalidTopicError, TypeError):
            return KafkaError.INVALID_TOPIC_EXCEPTION
        if legacy.roles_unknown_for(topic):
            return KafkaError.NOT_LEADER_OR_FOLLOWER
        if not 0 <= partition < legacy.partition_count(topic):
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        if not self._reads.topic_known(topic) and topic not in legacy.replicated:
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        return KafkaError.NONE
