"""Metadata: the brokers and the topics' partitions for modern clients, and topics
created on first mention (``auto.create.topics.enable``, on by default as in Kafka).

The broker lists itself at its advertised address (``advertised.host.name`` /
``advertised.port``, else ``hostname`` and the port ``kafka.port`` listens on) and
leads every partition of its unreplicated topics. A topic that does not exist is
created when a client asks for it by name and may create topics (Metadata v4+ says
so per request): each partition's owning worker is sent an empty produce of record
batches, which creates the partition's log in the record-batch format (the same way
a 0.7 client's empty produce creates a 0.7 topic); produces the client sends next
are queued behind it on the same ring, so the partitions can be answered at once.
Names that break the topic rule get INVALID_TOPIC_EXCEPTION, and nothing is created.
With ZooKeeper, a replicated topic is answered from the registrar's view of the
controller's states; one whose state has not reached this broker yet (just created: its
logs here may exist already; or the broker just restarted, before its first roles) is
LEADER_NOT_AVAILABLE, never answered as an unreplicated topic this broker leads (with
``num.partitions`` partitions, not the topic's).
"""

import base64
import hashlib
import logging
import time

from kafka.protocol.metadata import MetadataResponse

from mpbroker.acceptor.kafka.answers import respond
from mpbroker.acceptor.kafka.offsets_topic import OFFSETS_TOPIC
from mpbroker.acceptor.requests import AUTO_CREATE_RETRY_S
from mpbroker.codec.errors import InvalidTopicError, NotLeaderError
from mpbroker.codec.topic_names import check_topic
from mpbroker.ipc.messages import RECORD_BATCHES, Mode
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError
from mpbroker.registry.layout import hostname_for_registration

log = logging.getLogger(__name__)

_Broker = MetadataResponse.MetadataResponseBroker
_Topic = MetadataResponse.MetadataResponseTopic
_Partition = MetadataResponse.MetadataResponseTopic.MetadataResponsePartition
MAX_TOPICS_CREATED_PER_REQUEST = 1000  # a request naming more: the rest are only looked up


class MetadataHandler:
    def __init__(self, config, segment_files, router, legacy_handlers, listening_port: int):
        self.config = config
        self._files = segment_files
        self._router = router
        self._legacy = legacy_handlers
        self._port = listening_port
        self.cluster_id = cluster_id_for(config)
        self._host = config.advertised_host_name or hostname_for_registration(config.hostname)
        self.cluster = None  # with ZooKeeper: the registrar's view (``registrar.cluster_view``)
        self._creating = {}  # topic -> time.monotonic() the controller was asked to create it

    @property
    def advertised(self) -> tuple:
        config = self.config
        port = config.advertised_port if config.advertised_port > 0 else self._port
        return self._host, port

    def set_cluster(self, message: dict) -> None:
        """The registrar's view of the cluster: brokers, controller, replicated topics."""
        self.cluster = {"brokers": [tuple(broker) for broker in message.get("brokers", [])],
                        "controller": message.get("controller", -1),
                        "topics": {topic: [tuple(partition) for partition in partitions]
                                   for topic, partitions in message.get("topics", {}).items()}}

    def handle(self, connection, request_header, request) -> None:
        version = request_header.api_version
        names = None if request.topics is None else [topic.name for topic in request.topics]
        if version == 0 and not names:
            names = None  # v0: an empty list means every topic
        may_create = self.config.auto_create_topics_enable and (version < 4 or request.allow_auto_topic_creation)
        if names is None:
            known = (set(self._files.topics()) | set(self.cluster["topics"] if self.cluster else ())
                     | set(self._legacy.created_topics()))
            topics = [self._topic(name, False, connection) for name in sorted(known)]
        else:
            wanted = list(dict.fromkeys(names))
            topics = [self._topic(name, may_create and index < MAX_TOPICS_CREATED_PER_REQUEST, connection)
                      for index, name in enumerate(wanted)]
        broker = self.config.brokerid
        brokers = [(broker, *self.advertised)]
        controller = broker
        if self.cluster is not None:
            brokers = self.cluster["brokers"] or brokers
            if all(node != broker for node, _, _ in brokers):  # registered a moment from now
                brokers = [*brokers, (broker, *self.advertised)]
            controller = self.cluster["controller"]
        answer = MetadataResponse[version](
            throttle_time_ms=0, brokers=[_Broker(node_id=node, host=host, port=port, rack=None)
                                         for node, host, port in brokers],
            cluster_id=self.cluster_id, controller_id=controller, topics=topics)
        respond(connection, request_header.correlation_id, ApiKey.METADATA, version, answer)

    def _topic(self, name, may_create: bool, connection):
        try:
            check_topic(name)
        except (InvalidTopicError, TypeError) as exc:
            log.info("%r: metadata for an invalid topic name: %s", connection, exc)
            return _Topic(error_code=KafkaError.INVALID_TOPIC_EXCEPTION, name=name, is_internal=False, partitions=[])
        replicated = self.cluster["topics"].get(name) if self.cluster is not None else None
        if replicated is not None:
            return _Topic(error_code=KafkaError.NONE, name=name, is_internal=name == OFFSETS_TOPIC, partitions=[
                _Partition(error_code=KafkaError.NONE if leader >= 0 else KafkaError.LEADER_NOT_AVAILABLE,
                           partition_index=partition, leader_id=leader, leader_epoch=epoch, replica_nodes=replicas,
                           isr_nodes=isr, offline_replicas=[])
                for partition, leader, epoch, replicas, isr in replicated])
        if self.config.enable_zookeeper and (name in self._legacy.replicated or self._legacy.was_created(name)
                                             or not self._legacy.roles_known):
            # replicated, its state not in the registrar's view yet (just created; or this
            # broker just started and has not had its first roles, so it cannot tell a
            # replicated topic from an unreplicated one: its logs of either may be on
            # disk, with or without leader epochs): who leads, and how many partitions,
            # is the controller's to say (Kafka answers so)
            return _Topic(error_code=KafkaError.LEADER_NOT_AVAILABLE, name=name, is_internal=False, partitions=[])
        if not self.topic_exists(name):
            if not may_create:
                return _Topic(error_code=KafkaError.UNKNOWN_TOPIC_OR_PARTITION, name=name, is_internal=False,
                              partitions=[])
            error = self.create(name, connection)
            if error:
                return _Topic(error_code=error, name=name, is_internal=False, partitions=[])
        broker = self.config.brokerid
        partitions = [_Partition(error_code=KafkaError.NONE, partition_index=index, leader_id=broker, leader_epoch=0,
                                 replica_nodes=[broker], isr_nodes=[broker], offline_replicas=[])
                      for index in range(self._legacy.partition_count(name))]
        return _Topic(error_code=KafkaError.NONE, name=name, is_internal=name == OFFSETS_TOPIC, partitions=partitions)

    def topic_exists(self, name: str) -> bool:
        return (self._files.knows_topic(name) or name in self._legacy.replicated
                or self._legacy.was_created(name))

    def create(self, name: str, connection) -> int:
        """Create ``name`` in the record-batch format: with ZooKeeper, the controller's
        way (a replicated topic of ``default.replication.factor`` replicas, placed over
        the live brokers: LEADER_NOT_AVAILABLE until its leaders are elected, as Kafka
        answers); standalone, on every partition's worker here. The error code to answer
        with (0 when it is on its way)."""
        if self.config.enable_zookeeper:
            now = time.monotonic()
            if now - self._creating.get(name, -AUTO_CREATE_RETRY_S) >= AUTO_CREATE_RETRY_S:
                if len(self._creating) > 10_000:
                    self._creating.clear()
                self._creating[name] = now
                self._legacy.ask_to_create(name, self.config.num_partitions, record_batches=True)
                log.info("asked the controller to create topic %s for %r", name, connection)
            return KafkaError.LEADER_NOT_AVAILABLE
        if name in self._legacy.deleting:
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION  # made anew once its deletion is over
        routes = []
        for partition in range(self._legacy.partition_count(name)):
            try:
                routes.append(self._legacy.target(name, partition, record_batches=True))
            except InvalidTopicError:
                return KafkaError.INVALID_TOPIC_EXCEPTION
            except NotLeaderError:
                return KafkaError.LEADER_NOT_AVAILABLE
        for topic_bytes, partition, route in routes:
            if not route.up:
                return KafkaError.LEADER_NOT_AVAILABLE
        for topic_bytes, partition, route in routes:
            self._router.produce(connection, topic_bytes, partition, Mode.FIRE_AND_FORGET | RECORD_BATCHES, b"",
                                 route)
        log.info("creating topic %s with %d partitions (record batches) for %r", name, len(routes), connection)
        return KafkaError.NONE


def cluster_id_for(config) -> str:
    """A stable 22-character cluster id (Kafka's form: a UUID in URL-safe base64)."""
    seed = config.zk_connect if config.enable_zookeeper else f"{config.log_dir}:{config.brokerid}"
    return base64.urlsafe_b64encode(hashlib.md5(seed.encode()).digest()).decode("ascii").rstrip("=")
