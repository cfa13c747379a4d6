"""What the acceptor does with each modern Kafka request: the dispatch by API key and
version, ApiVersions, and the protocol's own answer for what is not served.

A request's header is read first. ApiVersions is answered in any version (an unknown
one with error 35 in v0 form and the versions served, KIP-511, so a newer client
falls back). A request of a known API in a version it does not serve gets that
API's answer with UNSUPPORTED_VERSION where the answer has a place for it (Produce
0-2, advertised for old librdkafka's sake). A request of an API not served here (the
APIs of transactions, the ACL APIs but DescribeAcls, ...) gets its own answer with
UNSUPPORTED_VERSION as its top-level error, where kafka-python knows its form and it
has one; otherwise it cannot
be answered in its own form, and its connection is closed with one log line. Bytes that do not decode as the request they claim to be close the
connection the same way (``MalformedRequestError``).
"""

import logging
import time

from kafka.protocol.metadata import ApiVersionsResponse

from mpbroker.acceptor.kafka.acls import describe_acls
from mpbroker.acceptor.kafka.admin import AdminHandler
from mpbroker.acceptor.kafka.answers import respond
from mpbroker.acceptor.kafka.delete_topics import DeleteTopicsHandler
from mpbroker.acceptor.kafka.fetch import FetchHandler
from mpbroker.acceptor.kafka.group_metrics import GroupMetricsPublisher
from mpbroker.acceptor.kafka.groups import GroupHandlers
from mpbroker.acceptor.kafka.list_offsets import list_offsets
from mpbroker.acceptor.kafka.metadata import MetadataHandler
from mpbroker.acceptor.kafka.offset_apis import OffsetApis
from mpbroker.acceptor.kafka.offsets_topic import LOAD_BUDGET_S, OffsetsTopic
from mpbroker.acceptor.kafka.produce import ProduceHandler
from mpbroker.acceptor.kafka.producer_ids import ProducerIds
from mpbroker.acceptor.kafka.reads import ModernReads
from mpbroker.codec.framing import MalformedRequestError
from mpbroker.group_coordinator import GroupCoordinator
from mpbroker.ipc.counters import KAFKA_REQUESTS, MODERN_API_KEYS
from mpbroker.kafka_protocol import api, header, messages
from mpbroker.kafka_protocol.api import SUPPORTED, ApiKey
from mpbroker.kafka_protocol.errors import KafkaError

log = logging.getLogger(__name__)

_API_VERSIONS = [ApiVersionsResponse.ApiVersion(api_key=int(key), min_version=versions.advertised_min,
                                                max_version=versions.advertised_max)
                 for key, versions in sorted(SUPPORTED.items())]
_COUNTER_BY_KEY = {key: KAFKA_REQUESTS + index for index, key in enumerate(MODERN_API_KEYS)}
GROUP_TICK_MS = 100  # how often the group coordinator's timeouts and the offsets' loads are looked at
LEADERSHIP_CHECK_MS = 1000


class KafkaRequestHandlers:
    """``handle(connection, frame)`` for the connections of ``kafka.port``."""

    def __init__(self, config, segment_files, router, legacy_handlers, timers, counters, to_send,
                 listening_port: int, deletions=None, ask_registrar=None, group_snapshot=None):
        self.config = config
        self._counters = counters
        self.reads = ModernReads(segment_files, config)
        self.metadata = MetadataHandler(config, segment_files, router, legacy_handlers, listening_port)
        self.produce = ProduceHandler(config, router, legacy_handlers, self.metadata)
        self.fetch = FetchHandler(config, self.reads, legacy_handlers, timers, to_send)
        self.admin = AdminHandler(config, self.metadata, legacy_handlers, timers, to_send)
        self.producer_ids = ProducerIds(config)
        self.coordinator = GroupCoordinator(
            min_session_timeout_ms=config.group_min_session_timeout_ms,
            max_session_timeout_ms=config.group_max_session_timeout_ms,
            initial_rebalance_delay_ms=config.group_initial_rebalance_delay_ms,
            max_group_size=config.group_max_size, max_metadata_bytes=config.offset_metadata_max_bytes)
        self.offsets_topic = OffsetsTopic(config, self.reads, router, legacy_handlers, self.metadata,
                                          self.coordinator)
        self.groups = GroupHandlers(config, self.offsets_topic, self.coordinator, to_send)
        self.offsets = OffsetApis(config, self.offsets_topic, self.coordinator, self.metadata, legacy_handlers,
                                  to_send)
        self.delete_topics = DeleteTopicsHandler(config, self.metadata, timers, to_send, deletions, ask_registrar)
        self._legacy = legacy_handlers
        self._leadership_checked_ms = 0
        if group_snapshot is not None:  # the metrics endpoint's (metrics.enable)
            GroupMetricsPublisher(group_snapshot, self.coordinator, self.offsets_topic, self.reads, timers)
        timers.every(GROUP_TICK_MS, self._group_tick)
        self._by_key = {  # every served API but ApiVersions: handler(connection, request header, body)
            ApiKey.PRODUCE: self.produce.handle,
            ApiKey.FETCH: self.fetch.handle,
            ApiKey.METADATA: self.metadata.handle,
            ApiKey.LIST_OFFSETS: lambda connection, request_header, body: list_offsets(
                connection, request_header, body, self.reads, legacy_handlers),
            ApiKey.CREATE_TOPICS: self.admin.create_topics,
            ApiKey.DELETE_TOPICS: self.delete_topics.handle,
            ApiKey.DESCRIBE_CONFIGS: self.admin.describe_configs,
            ApiKey.INIT_PRODUCER_ID: self.producer_ids.handle,
            ApiKey.DESCRIBE_ACLS: describe_acls,
            ApiKey.FIND_COORDINATOR: self.groups.find_coordinator,
            ApiKey.JOIN_GROUP: self.groups.join_group,
            ApiKey.SYNC_GROUP: self.groups.sync_group,
            ApiKey.HEARTBEAT: self.groups.heartbeat,
            ApiKey.LEAVE_GROUP: self.groups.leave_group,
            ApiKey.LIST_GROUPS: self.groups.list_groups,
            ApiKey.DESCRIBE_GROUPS: self.groups.describe_groups,
            ApiKey.DELETE_GROUPS: self.groups.delete_groups,
            ApiKey.OFFSET_COMMIT: self.offsets.commit,
            ApiKey.OFFSET_FETCH: self.offsets.fetch,
        }

    def handle(self, connection, frame) -> None:
        peeked = header.peek_correlation(frame)
        if peeked is None:
            raise MalformedRequestError(f"a request of {len(frame)} bytes is shorter than its header")
        api_key, version, correlation_id = peeked
        versions = SUPPORTED.get(api_key)
        if versions is None:
            self._unserved(connection, frame, api_key, version, correlation_id)
            return
        self._counters[_COUNTER_BY_KEY[api_key]] += 1
        if api_key == ApiKey.API_VERSIONS:
            self._api_versions(connection, frame, version, correlation_id)
            return
        if not versions.advertised(version):  # a client that did not ask ApiVersions first
            self._unserved(connection, frame, api_key, version, correlation_id)
            return
        flexible = api.flexible(api_key, version)
        request_header = header.decode_request_header(frame, flexible)
        body = messages.decode_body(api_key, version, memoryview(frame)[request_header.body_start:])
        if not versions.served(version):  # advertised, not served: Produce 0-2
            self.produce.refuse_version(connection, request_header, body)
        else:
            self._by_key[api_key](connection, request_header, body)

    @staticmethod
    def _unserved(connection, frame, api_key: int, version: int, correlation_id: int) -> None:
        """An API not served here (not advertised either): its own answer with
        UNSUPPORTED_VERSION where kafka-python knows its form and it has a top-level
        error (FindCoordinator, the group APIs, ...); else the connection is closed."""
        found = messages.unserved_answer(api_key, version)
        if found is None:
            raise MalformedRequestError(f"API key {api_key} version {version} is not served here, and has no "
                                        f"answer with a top-level error to say so")
        request_class, answer = found
        header.decode_request_header(frame, request_class.flexible_version_q(version))  # well-formed or closed
        log.info("%r: API %d v%d is not served: answered UNSUPPORTED_VERSION", connection, api_key, version)
        head = header.response_header(correlation_id, answer.flexible_version_q(version))
        body = messages.encode_body(answer, version)
        connection.respond([header.frame(len(head) + len(body)) + head + body])

    def _api_versions(self, connection, frame, version: int, correlation_id: int) -> None:
        versions = SUPPORTED[ApiKey.API_VERSIONS]
        if not versions.served(version):
            answer = ApiVersionsResponse[0](error_code=KafkaError.UNSUPPORTED_VERSION, api_keys=_API_VERSIONS)
            respond(connection, correlation_id, ApiKey.API_VERSIONS, 0, answer)
            return
        header.decode_request_header(frame, api.flexible(ApiKey.API_VERSIONS, version))  # well-formed or closed
        answer = ApiVersionsResponse[version](error_code=KafkaError.NONE, api_keys=_API_VERSIONS, throttle_time_ms=0)
        respond(connection, correlation_id, ApiKey.API_VERSIONS, version, answer)

    def _group_tick(self, now_ms: int) -> None:
        """The coordinator's timeouts (sessions, rebalances, the first join's delay), the
        loads of ``__consumer_offsets`` partitions under way, leadership moved away."""
        if now_ms >= self.coordinator.next_deadline_ms():
            self.coordinator.tick(now_ms)
        if self.offsets_topic.loading:
            self.offsets_topic.step(deadline=time.monotonic() + LOAD_BUDGET_S)
        if now_ms - self._leadership_checked_ms >= LEADERSHIP_CHECK_MS:
            self._leadership_checked_ms = now_ms
            self.offsets_topic.check_leadership()

    def tick(self) -> None:
        """Answer the long-polling fetches whose data came or whose time is up."""
        self.fetch.check_waiting()

