"""Produce from modern clients: each partition's record batches go to the owning
worker as they came (the worker validates and appends them, ``workers.produce_handler``),
and the answer is put together once every partition of the request has its outcome.

``acks=1`` is answered after the leader's append, ``acks=-1`` (all) once the in-sync
replicas have the batches (durability 2; on an unreplicated partition, the append),
``acks=0`` never: a refused ``acks=0`` produce closes its connection, as Kafka does,
so the client learns of it. Produce 0-2 are advertised (old librdkafka enables gzip
and snappy by them) and refused with UNSUPPORTED_VERSION per partition.
"""

import logging

from kafka.protocol.producer import ProduceResponse

from mpbroker.acceptor.kafka.answers import fill, respond
from mpbroker.acceptor.routing import ProduceRefused
from mpbroker.codec.errors import InvalidTopicError, NotLeaderError
from mpbroker.ipc.messages import KAFKA_ERROR_BASE, RECORD_BATCHES, Mode
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError, from_legacy

log = logging.getLogger(__name__)

_MODE_BY_ACKS = {0: Mode.FIRE_AND_FORGET | RECORD_BATCHES, 1: Mode.ACK_APPEND | RECORD_BATCHES,
                 -1: Mode.ACK_REPLICATED | RECORD_BATCHES}
_TopicAnswer = ProduceResponse.TopicProduceResponse
_PartitionAnswer = ProduceResponse.TopicProduceResponse.PartitionProduceResponse


class ProduceAnswer:
    """One produce request's answer, filled in as its partitions' outcomes come."""

    __slots__ = ("response", "version", "correlation_id", "outstanding", "results")

    def __init__(self, response, version: int, correlation_id: int):
        self.response = response  # the connection's reserved Response
        self.version = version
        self.correlation_id = correlation_id
        self.outstanding = 0
        self.results = {}  # topic -> {partition: (error, base offset, message)}, in request order

    def expect(self, topic: str, partition: int) -> "PartitionOutcome":
        self.outstanding += 1
        self.results.setdefault(topic, {})[partition] = None
        return PartitionOutcome(self, topic, partition)

    def settle(self, topic: str, partition: int, error: int, base_offset: int, message: str) -> None:
        if self.results[topic][partition] is None:
            self.outstanding -= 1
        self.results[topic][partition] = (error, base_offset, message if error else None)
        if self.outstanding == 0:
            self.fill()

    def fill(self) -> None:
        topics = [_TopicAnswer(name=topic, partition_responses=[
            _PartitionAnswer(index=partition, error_code=error, base_offset=base_offset, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=[], error_message=message)
            for partition, (error, base_offset, message) in partitions.items()])
            for topic, partitions in self.results.items()]
        answer = ProduceResponse[self.version](responses=topics, throttle_time_ms=0)
        fill(self.response, self.correlation_id, ApiKey.PRODUCE, self.version, answer)


class PartitionOutcome:
    """What the router tells of one partition's produce (``routing.answer``, ``ack``)."""

    __slots__ = ("answer", "topic", "partition")

    def __init__(self, answer: ProduceAnswer, topic: str, partition: int):
        self.answer = answer
        self.topic = topic
        self.partition = partition

    def ack(self, error: int, _partition: int, offset: int, _next_offset: int, reason: str) -> None:
        """``error`` as the ring carries it: a 0.7 code, or a modern one past KAFKA_ERROR_BASE."""
        code = error - KAFKA_ERROR_BASE if error >= KAFKA_ERROR_BASE else from_legacy(error)
        self.answer.settle(self.topic, self.partition, code, offset if code == 0 else -1, reason or None)


class ProduceHandler:
    def __init__(self, config, router, legacy_handlers, metadata):
        self.config = config
        self._router = router
        self._legacy = legacy_handlers
        self._metadata = metadata

    def handle(self, connection, request_header, request) -> None:
        mode = _MODE_BY_ACKS.get(request.acks)
        version = request_header.api_version
        if mode is None:
            self.refuse_all(connection, request_header, request, KafkaError.INVALID_REQUIRED_ACKS)
            return
        targets = []  # (topic, partition, records, target or error)
        for topic_data in request.topic_data:
            for partition_data in topic_data.partition_data:
                records = partition_data.records
                target = self._target(topic_data.name, partition_data.index) if records else \
                    KafkaError.INVALID_RECORD  # no batch at all: nothing to append (Kafka refuses it too)
                targets.append((topic_data.name, partition_data.index, records, target))
        if request.acks == 0:
            for topic, partition, records, target in targets:  # check every one before routing any
                if isinstance(target, int):
                    raise ProduceRefused(f"acks=0 produce to {topic}-{partition} refused ({KafkaError(target).name})")
            for topic, partition, records, (topic_bytes, partition, route) in targets:
                self._router.produce(connection, topic_bytes, partition, mode, records, route)
            return
        answer = ProduceAnswer(connection.reserve(), version, request_header.correlation_id)
        outcomes = [(answer.expect(topic, partition), records, target)
                    for topic, partition, records, target in targets]
        if not outcomes:
            answer.fill()
            return
        for outcome, records, target in outcomes:
            if isinstance(target, int):
                outcome.ack(KAFKA_ERROR_BASE + target, outcome.partition, -1, -1, "")
            else:
                topic_bytes, partition, route = target
                self._router.produce(connection, topic_bytes, partition, mode, records, route, outcome)

    def _target(self, topic, partition):
        """``(topic bytes, partition, route)``, or the error code to answer with."""
        if partition < 0:  # (0.7's -1, "a partition at random", has no meaning here)
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        try:
            target = self._legacy.target(topic, partition, record_batches=True)
        except InvalidTopicError:
            return KafkaError.INVALID_TOPIC_EXCEPTION
        except ValueError:
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        except NotLeaderError:
            return KafkaError.NOT_LEADER_OR_FOLLOWER
        if not self._metadata.topic_exists(topic):
            if not self.config.auto_create_topics_enable:
                return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
            if self.config.enable_zookeeper:  # the controller creates it, with its leaders
                return self._metadata.create(topic, None)
        return target

    def refuse_version(self, connection, request_header, request) -> None:
        """Produce 0-2: advertised, not served."""
        if request.acks == 0:
            raise ProduceRefused(f"Produce v{request_header.api_version} is not served (message format 2 only)")
        self.refuse_all(connection, request_header, request, KafkaError.UNSUPPORTED_VERSION)

    @staticmethod
    def refuse_all(connection, request_header, request, error: int) -> None:
        topics = [_TopicAnswer(name=topic_data.name, partition_responses=[
            _PartitionAnswer(index=partition_data.index, error_code=error, base_offset=-1, log_append_time_ms=-1,
                             log_start_offset=-1, record_errors=[], error_message=None)
            for partition_data in topic_data.partition_data]) for topic_data in request.topic_data]
        version = request_header.api_version
        respond(connection, request_header.correlation_id, ApiKey.PRODUCE, version,
                ProduceResponse[version](responses=topics, throttle_time_ms=0))
