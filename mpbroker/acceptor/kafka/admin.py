"""The admin APIs of the modern listener: CreateTopics and DescribeConfigs.

CreateTopics makes topics in the record-batch format. Standalone, the topic's
partition count and its topic-level settings (Kafka's names: ``retention.ms``,
``segment.bytes``, ``min.insync.replicas``, ... ``segments.topic_configs``) are
written into ``log.dir`` first, durably, then each partition's worker creates its log
(the empty produce Metadata's auto-creation sends); the replication factor is 1 (or
-1, the default). With ZooKeeper the controller creates it, replicated over the live
brokers (``default.replication.factor`` for -1), and answers NONE once asked, as the
topic's leaders follow within about a second (Metadata says LEADER_NOT_AVAILABLE until
then). The settings, checked here exactly as standalone, go with the request: the
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

from kafka.protocol.admin import CreateTopicsResponse, DescribeConfigsResponse

from mpbroker.acceptor.kafka.answers import respond
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

_Created = CreateTopicsResponse.CreatableTopicResult
_Result = DescribeConfigsResponse.DescribeConfigsResult
_Entry = DescribeConfigsResponse.DescribeConfigsResult.DescribeConfigsResourceResult


class AdminHandler:
    def __init__(self, config, metadata, legacy_handlers):
        self.config = config
        self._metadata = metadata
        self._legacy = legacy_handlers

    # --- CreateTopics --------------------------------------------------------------

    def create_topics(self, connection, request_header, request) -> None:
        results = []
        for topic in request.topics:
            error, message = self._create(topic, bool(request.validate_only), connection)
            results.append(_Created(name=topic.name, error_code=error, error_message=message))
        version = request_header.api_version
        respond(connection, request_header.correlation_id, ApiKey.CREATE_TOPICS, version,
                CreateTopicsResponse[version](throttle_time_ms=0, topics=results))

    def _create(self, topic, validate_only: bool, connection) -> tuple:
        name = topic.name
        try:
            check_topic(name)
        except (InvalidTopicError, TypeError) as exc:
            return KafkaError.INVALID_TOPIC_EXCEPTION, str(exc)
        if self._metadata.topic_exists(name):
            return KafkaError.TOPIC_ALREADY_EXISTS, f"topic {name!r} already exists"
        if name in self._legacy.deleting:
            return KafkaError.TOPIC_ALREADY_EXISTS, f"topic {name!r} is being deleted"
        partitions = self.config.num_partitions if topic.num_partitions == -1 else topic.num_partitions
        if not 1 <= partitions <= MAX_PARTITIONS:
            return INVALID_PARTITIONS, f"{topic.num_partitions} partitions: between 1 and {MAX_PARTITIONS}, or -1"
        if topic.assignments:
            return KafkaError.INVALID_REQUEST, "manual replica assignments are not supported; give a replication factor"
        factor = topic.replication_factor
        configs = {entry.name: entry.value for entry in topic.configs or ()}
        try:
            topic_configs.check(configs)
        except topic_configs.TopicConfigError as exc:
            return INVALID_CONFIG, str(exc)
        if self.config.enable_zookeeper:
            if factor != -1 and factor < 1:
                return INVALID_REPLICATION_FACTOR, f"replication factor {factor}: at least 1, or -1"
            if not validate_only:
                fields = {"record_batches": True, **({"replication_factor": factor} if factor > 0 else {}),
                          **({"configs": configs} if configs else {})}
                self._legacy.ask_to_create(name, partitions, **fields)
                log.info("asked the controller to create topic %s (%d partitions) for %r", name, partitions,
                         connection)
            return KafkaError.NONE, None
        if factor not in (-1, 1):
            return INVALID_REPLICATION_FACTOR, (f"replication factor {factor}: a broker without ZooKeeper keeps "
                                                f"one copy (1 or -1)")
        if validate_only:
            return KafkaError.NONE, None
        try:
            topic_configs.write(self.config.log_dir, name, partitions, configs)
        except OSError as exc:
            return KafkaError.KAFKA_STORAGE_ERROR, f"cannot write the topic's settings: {exc.strerror or exc}"
        self._legacy.topic_created(name, partitions)
        error = self._metadata.create(name, connection)
        return error, None if error == KafkaError.NONE else "the topic's partitions could not be made now"

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
