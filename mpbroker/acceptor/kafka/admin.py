"""The admin APIs of the modern listener: CreateTopics and DescribeConfigs.

CreateTopics makes topics in the record-batch format. Standalone, the topic's
partition count and its topic-level settings (Kafka's names: ``retention.ms``,
``segment.bytes``, ``min.insync.replicas``, ... ``segments.topic_configs``) are
written into ``log.dir`` first, durably, then each partition's worker creates its log
(the empty produce Metadata's auto-creation sends); the replication factor is 1 (or
-1, the default). With ZooKeeper the controller creates it, replicated over the live
brokers (``default.replication.factor`` for -1), and answers once the registrar's
view of the cluster holds the topic (Kafka answers once the topic is written): NONE
if it has the partition count asked for, TOPIC_ALREADY_EXISTS if it came with another
(a Metadata request's auto-creation on some broker, or another client, won the race),
REQUEST_TIMED_OUT if ``timeout_ms`` ran out first (the creation may still happen; a
timeout of 0 or less answers NONE at once, as Kafka does). Answering before the topic
existed let the same client's next Metadata, on another broker, auto-create it with
that broker's defaults (1 replica, ``num.partitions``) ahead of the controller. Its
leaders follow within about a second (Metadata says LEADER_NOT_AVAILABLE until then).
The settings, checked here exactly as standalone, go with the request: the
registrar writes them to ZooKeeper (``/config/topics/<topic>``) in the transaction
that writes the assignment, and every broker's registrar mirrors them into its
``log.dir/topic-configs`` before it takes a role in the topic
(``registrar.topic_settings``). Manual replica assignments are refused
(INVALID_REQUEST).

DescribeConfigs answers for a topic (its settings: its own where it has them, source
TOPIC_CONFIG, else the broker's; on a ZooKeeper cluster, from the mirror) and for this
broker (every key of ``config.keys``, as configured).
"""

import logging
import time

from kafka.protocol.admin import CreateTopicsResponse, DescribeConfigsResponse

from mpbroker.acceptor.kafka.answers import fill, respond
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.config.keys import KEYS, KEYS_BY_NAME
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.segments import topic_configs

log = logging.getLogger(__name__)

MAX_PARTITIONS = 10_000
TOPIC = 2  # DescribeConfigs resource types
BROKER = 4
TOPIC_CONFIG = 1  # config sources
STATIC_BROKER_CONFIG = 4
DEFAULT_CONFIG = 5
INVALID_PARTITIONS = 37
INVALID_REPLICATION_FACTOR = 38
INVALID_CONFIG = 40
CREATED_POLL_MS = 50  # how often a CreateTopics that waits looks for its topics in the registrar's view

_Created = CreateTopicsResponse.CreatableTopicResult
_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult


def _answer(version: int, results: list):
    return CreateTopicsResponse[version](throttle_time_ms=0, topics=[
        _Created(name=name, error_code=error, error_message=message) for name, error, message in results])


class _Waiting:
    """A CreateTopics answer that waits for its topics to appear in the registrar's view."""

    __slots__ = ("connection", "response", "version", "correlation_id", "results", "asked", "deadline")

    def __init__(self, connection, version, correlation_id, results, asked, deadline):
        self.connection = connection
        self.response = connection.reserve()
        self.version = version
        self.correlation_id = correlation_id
        self.results = results  # [name, error, message] per topic, in request order
        self.asked = asked  # index in results -> the partition count asked of the controller
        self.deadline = deadline  # time.monotonic()

    def fill(self) -> None:
        fill(self.response, self.correlation_id, ApiKey.CREATE_TOPICS, self.version,
             _answer(self.version, self.results))


class AdminHandler:
    def __init__(self, config, metadata, legacy_handlers, timers=None, to_send=None):
        self.config = config
        self._metadata = metadata
        self._legacy = legacy_handlers
        self._timers = timers
        self._to_send = to_send  # callable(connection): its answer is ready
        self._waiting = []  # _Waiting answers, with ZooKeeper
        self._polling = False

    # --- CreateTopics --------------------------------------------------------------

    def create_topics(self, connection, request_header, request) -> None:
        results, asked = [], {}
        for topic in request.topics:
            error, message, partitions = self._create(topic, bool(request.validate_only), connection)
            if partitions is not None:
                asked[len(results)] = partitions
            results.append([topic.name, error, message])
        version = request_header.api_version
        if asked and request.timeout_ms > 0 and self._timers is not None:
            self._waiting.append(_Waiting(connection, version, request_header.correlation_id, results, asked,
                                          time.monotonic() + request.timeout_ms / 1000))
            self._poll_soon()
            return
        respond(connection, request_header.correlation_id, ApiKey.CREATE_TOPICS, version, _answer(version, results))

    def _poll_soon(self) -> None:
        if not self._polling:
            self._polling = True
            self._timers.once(CREATED_POLL_MS, self._look_for_created)

    def _look_for_created(self, _now_ms: int) -> None:
        self._polling = False
        now = time.monotonic()
        still = []
        for waiting in self._waiting:
            for index, partitions in list(waiting.asked.items()):
                entry = waiting.results[index]
                count = self._legacy.replicated.get(entry[0])
                if count is None:
                    continue
                del waiting.asked[index]
                if count != partitions:
                    entry[1] = KafkaError.TOPIC_ALREADY_EXISTS
                    entry[2] = (f"topic {entry[0]!r} was created meanwhile with {count} partitions, not "
                                f"{partitions} (auto-created by a Metadata request, or asked by another client)")
            if waiting.asked and now < waiting.deadline:
                still.append(waiting)
                continue
            for index in waiting.asked:
                entry = waiting.results[index]
                entry[1] = KafkaError.REQUEST_TIMED_OUT
                entry[2] = f"topic {entry[0]!r} was not created within the request's timeout; it may still be"
            if not waiting.connection.closed:
                waiting.fill()
                self._to_send(waiting.connection)
        self._waiting = still
        if still:
            self._poll_soon()

    def _create(self, topic, validate_only: bool, connection) -> tuple:
        """``(error, message, the partition count asked of the controller or None)``."""
        name = topic.name
        try:
            check_topic(name)
        except (InvalidTopicError, TypeError) as exc:
            return KafkaError.INVALID_TOPIC_EXCEPTION, str(exc), None
        if self._metadata.topic_exists(name):
            return KafkaError.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists", None
        if name in self._legacy.deleting:
            return KafkaError.TOPIC_ALREADY_EXISTS, f"topic {name!r} is being deleted", None
        partitions = self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            return (INVALID_PARTITIONS, f"{topic.num_partitions} partitions: between 1 and {MAX_PARTITIONS}, or -1",
                    None)
        if topic.assignments:
            return (KafkaError.INVALID_REQUEST, "manual replica assignments are not supported; give a replication factor",
                    None)
        factor = topic.replication_factor
        configs = {entry.name: entry.value for entry in topic.configs or ()}
        try:
            topic_configs.check(configs)
        except topic_configs.TopicConfigError as exc:
            return INVALID_CONFIG, str(exc), None
        if self.config.enable_zookeeper:
            if factor != -1 and factor < 1:
                return INVALID_REPLICATION_FACTOR, f"replication factor {factor}: at least 1, or -1", None
            if not validate_only:
                fields = {"record_batches": True, **({"replication_factor": factor} if factor > 0 else {}),
                          **({"configs": configs} if configs else {})}
                self._legacy.ask_to_create(name, partitions, **fields)
                log.info("asked the controller to create topic %s (%d partitions) for %r", name, partitions,
                         connection)
            return KafkaError.NONE, None, (None if validate_only else partitions)
        if factor not in (-1, 1):
            return INVALID_REPLICATION_FACTOR, (f"replication factor {factor}: a broker without ZooKeeper keeps "
                                                f"one copy (1 or -1)"), None
        if validate_only:
            return KafkaError.NONE, None, None
        try:
            topic_configs.write(self.config.log_dir, name, partitions, configs)
        except OSError as exc:
            return KafkaError.KAFKA_STORAGE_ERROR, f"cannot write the topic's settings: {exc.strerror or exc}", None
        self._legacy.topic_created(name, partitions)
        error = self._metadata.create(name, connection)
        return error, None if error == KafkaError.NONE else "the topic's partitions could not be made now", None

    # --- DescribeConfigs -------------------------------------------------------------

    def describe_configs(self, connection, request_header, request) -> None:
        results = []
        for resource in request.resources:
            wanted = set(resource.configuration_keys) if resource.configuration_keys else None
            if resource.resource_type == TOPIC:
                result = self._topic(resource.resource_name, wanted)
            elif resource.resource_type == BROKER:
                result = self._broker(resource.resource_name, wanted)
            else:
                result = _Result(error_code=KafkaError.INVALID_REQUEST, error_message="only topics and brokers",
                                 resource_type=resource.resource_type, resource_name=resource.resource_name,
                                 configs=[])
            results.append(result)
        version = request_header.api_version
        respond(connection, request_header.correlation_id, ApiKey.DESCRIBE_CONFIGS, version,
                DescribeConfigsResponse[version](throttle_time_ms=0, results=results))

    def _topic(self, name: str, wanted) -> object:
        try:
            check_topic(name)
        except (InvalidTopicError, TypeError) as exc:
            return _Result(error_code=KafkaError.INVALID_TOPIC_EXCEPTION, error_message=str(exc),
                           resource_type=TOPIC, resource_name=name, configs=[])
        if not self._metadata.topic_exists(name):
            return _Result(error_code=KafkaError.UNKNOWN_TOPIC_OR_PARTITION, error_message=f"no topic {name!r}",
                           resource_type=TOPIC, resource_name=name, configs=[])
        found = topic_configs.read(self.config.log_dir, name)
        own = found["configs"] if found else {}
        effective = topic_configs.applied(self.config.log_config_for(name), own)
        values = {
            "segment.bytes": effective.segment_bytes, "segment.ms": effective.roll_ms,
            "retention.ms": effective.retention_ms, "retention.bytes": effective.retention_bytes,
            "max.message.bytes": effective.max_message_size, "flush.messages": effective.flush_interval_messages,
            "flush.ms": effective.flush_interval_ms, "min.insync.replicas": effective.min_insync_replicas,
            "message.timestamp.type": "LogAppendTime" if effective.log_append_time else "CreateTime",
            "cleanup.policy": "delete", "compression.type": "producer",
        }
        configs = [_entry(key, str(value), TOPIC_CONFIG if key in own else self._broker_source(key), read_only=False)
                   for key, value in values.items() if wanted is None or key in wanted]
        return _Result(error_code=KafkaError.NONE, error_message=None, resource_type=TOPIC, resource_name=name,
                       configs=configs)

    def _broker_source(self, topic_key: str) -> int:
        """Where a topic key's value comes from when the topic does not set it: the
        broker's configuration when it sets the key the value follows, else the default."""
        broker_key = _BROKER_KEY_OF.get(topic_key)
        if broker_key is None:
            return DEFAULT_CONFIG
        properties = self.config.as_properties()
        key = KEYS_BY_NAME[broker_key]
        default = key.default_text() if key.default_from is None else properties.get(key.default_from, "")
        return DEFAULT_CONFIG if str(properties.get(broker_key, "")).lower() == str(default).lower() \
            else STATIC_BROKER_CONFIG

    def _broker(self, name: str, wanted) -> object:
        if name not in ("", str(self.config.brokerid)):
            return _Result(error_code=KafkaError.INVALID_REQUEST, error_message=f"this is broker {self.config.brokerid}",
                           resource_type=BROKER, resource_name=name, configs=[])
        properties = self.config.as_properties()
        configs = [_entry(key.name, properties.get(key.name, ""), STATIC_BROKER_CONFIG)
                   for key in KEYS if wanted is None or key.name in wanted]
        return _Result(error_code=KafkaError.NONE, error_message=None, resource_type=BROKER, resource_name=name,
                       configs=configs)


def _entry(name: str, value: str, source: int, read_only: bool = True):
    return _Entry(name=name, value=value, read_only=read_only, config_source=source,
                  is_default=source == DEFAULT_CONFIG, is_sensitive=False, synonyms=[])


# The broker key each topic key's value follows when the topic does not set it.
_BROKER_KEY_OF = {
    "segment.bytes": "log.file.size", "segment.ms": "log.roll.hours", "retention.ms": "log.retention.hours",
    "retention.bytes": "log.retention.size", "max.message.bytes": "max.message.size",
    "flush.messages": "log.flush.interval", "flush.ms": "log.default.flush.interval.ms",
    "min.insync.replicas": "min.insync.replicas", "message.timestamp.type": "message.timestamp.type",
}
