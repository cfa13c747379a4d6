"""DeleteTopics (v1-3) for modern clients: answered, as Kafka answers it, once every
topic of the request is deleted or ``timeout_ms`` ran out.

Per topic: INVALID_TOPIC_EXCEPTION for a name that breaks the topic rule,
INVALID_REQUEST for a name given twice and for ``__consumer_offsets`` (internal: it
holds every modern group's commits), UNKNOWN_TOPIC_OR_PARTITION for a topic that
does not exist, NONE once it is gone, REQUEST_TIMED_OUT if it was not gone within
``timeout_ms`` (the deletion goes on; a timeout of 0 or less answers at once, as
Kafka does).

On a broker alone the acceptor deletes the topic itself (``acceptor.topic_deletion``:
gone once every worker deleted its logs). On a ZooKeeper cluster the registrar is
asked (``delete_topics`` through the supervisor): it marks each topic for deletion in
ZooKeeper (or says it does not exist), and answers (``topics_deleted``) once the
controller has removed it from the cluster's topics, after every broker deleted its
replicas; the answer comes back here by the request's number.
"""

import logging
import time

from kafka.protocol.admin import DeleteTopicsResponse

from mpbroker.acceptor.kafka.answers import fill
from mpbroker.acceptor.kafka.offsets_topic import OFFSETS_TOPIC
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError

log = logging.getLogger(__name__)

_Result = DeleteTopicsResponse.DeletableTopicResult
REGISTRAR_SLACK_MS = 2000  # past the timeout: the registrar did not answer (it is down)


class _Request:
    __slots__ = ("number", "response", "version", "correlation_id", "results", "deadline")

    def __init__(self, number, response, version, correlation_id, results, deadline):
        self.number = number
        self.response = response  # the connection's reserved Response
        self.version = version
        self.correlation_id = correlation_id
        self.results = results  # topic -> error code, None while pending (in request order)
        self.deadline = deadline  # time.monotonic()

    def fill(self) -> None:
        topics = [_Result(name=name, error_code=KafkaError.REQUEST_TIMED_OUT if error is None else error)
                  for name, error in self.results.items()]
        answer = DeleteTopicsResponse[self.version](throttle_time_ms=0, responses=topics)
        fill(self.response, self.correlation_id, ApiKey.DELETE_TOPICS, self.version, answer)


class DeleteTopicsHandler:
    def __init__(self, config, metadata, timers, to_send, deletions=None, ask_registrar=None):
        self.config = config
        self._metadata = metadata  # MetadataHandler: which topics exist
        self._timers = timers
        self._to_send = to_send  # callable(connection): its answer is ready
        self.deletions = deletions  # TopicDeletions, on a broker alone
        self._ask_registrar = ask_registrar  # callable(number, topics, timeout_ms), with ZooKeeper
        self._requests = {}  # number -> (connection, _Request)
        self._next = 0

    def handle(self, connection, request_header, request) -> None:
        results = {}
        for name in request.topic_names:
            if name in results:
                results[name] = KafkaError.INVALID_REQUEST
                continue
            results[name] = self._begin(name, connection)
        version = request_header.api_version
        timeout_ms = request.timeout_ms
        self._next += 1
        pending = [name for name, error in results.items() if error is None]
        if pending and self._ask_registrar is not None:
            self._ask_registrar(self._next, pending, max(timeout_ms, 0))
        answer = _Request(self._next, connection.reserve(), version, request_header.correlation_id, results,
                          time.monotonic() + max(timeout_ms, 0) / 1000)
        if not pending or timeout_ms <= 0:
            answer.fill()
            return
        self._requests[self._next] = (connection, answer)
        slack = REGISTRAR_SLACK_MS if self._ask_registrar is not None else 0
        self._timers.once(timeout_ms + slack, lambda _now, number=self._next: self._expire(number))

    def _begin(self, name, connection):
        """The topic's error code, or None: its deletion is under way."""
        try:
            check_topic(name)
        except (InvalidTopicError, TypeError) as exc:
            log.info("%r: DeleteTopics of an invalid topic name: %s", connection, exc)
            return KafkaError.INVALID_TOPIC_EXCEPTION
        if name == OFFSETS_TOPIC:
            log.info("%r: DeleteTopics of %s refused (internal: every group's commits)", connection, name)
            return KafkaError.INVALID_REQUEST
        if self._ask_registrar is not None:
            return None  # the registrar knows whether the cluster has it
        if not (self.deletions.deleting(name) or self._metadata.topic_exists(name)):
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        try:
            self.deletions.delete(name)
        except OSError as exc:
            log.error("cannot begin deleting topic %s: %s", name, exc)
            return KafkaError.KAFKA_STORAGE_ERROR
        log.info("deleting topic %s for %r", name, connection)
        return None

    def topic_deleted(self, topic: str) -> None:
        """On a broker alone: ``topic`` is gone."""
        for number, (_, request) in list(self._requests.items()):
            if topic in request.results and request.results[topic] is None:
                request.results[topic] = KafkaError.NONE
                self._settle(number)

    def registrar_answered(self, number: int, results: dict) -> None:
        """With ZooKeeper: the registrar's outcome of request ``number``."""
        found = self._requests.get(number)
        if found is None:
            return
        for topic, error in results.items():
            if found[1].results.get(topic, 0) is None:
                found[1].results[topic] = error
        self._settle(number)

    def _settle(self, number: int) -> None:
        connection, request = self._requests[number]
        if any(error is None for error in request.results.values()):
            return
        self._answer(number)

    def _expire(self, number: int) -> None:
        if number in self._requests:
            self._answer(number)  # the pending ones: REQUEST_TIMED_OUT

    def _answer(self, number: int) -> None:
        connection, request = self._requests.pop(number)
        if connection.closed:
            return
        request.fill()
        self._to_send(connection)
