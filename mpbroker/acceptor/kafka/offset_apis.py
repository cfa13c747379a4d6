"""OffsetCommit and OffsetFetch: modern consumer groups' committed offsets.

A commit is checked against the group (``GroupCoordinator.validate_commit``: member,
generation, a rebalance under way), each partition's topic and metadata size, then
written as one record batch to the group's partition of ``__consumer_offsets``
(``offsets_topic.write``); it is answered, and the coordinator's cache updated, only
once that batch is durable, so an answered commit survives a restart, a SIGKILL, a
power cut (standalone: flushed) or the coordinator's death (a cluster: in every
in-sync replica). A fetch reads the cache.
"""

import logging
import time

from kafka.protocol.consumer import OffsetCommitResponse, OffsetFetchResponse

from mpbroker.acceptor.kafka.answers import fill, respond
from mpbroker.clock import monotonic_ms
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.group_coordinator import OffsetAndMetadata
from mpbroker.group_coordinator import records as offset_records
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError

log = logging.getLogger(__name__)

_CommitTopic = OffsetCommitResponse.OffsetCommitResponseTopic
_CommitPartition = OffsetCommitResponse.OffsetCommitResponseTopic.OffsetCommitResponsePartition
_FetchTopic = OffsetFetchResponse.OffsetFetchResponseTopic
_FetchPartition = OffsetFetchResponse.OffsetFetchResponseTopic.OffsetFetchResponsePartition
# What a failed write of a commit is answered with (Kafka's mapping of its append errors).
_WRITE_ERRORS = {
    KafkaError.NOT_LEADER_OR_FOLLOWER: KafkaError.NOT_COORDINATOR,
    KafkaError.NOT_COORDINATOR: KafkaError.NOT_COORDINATOR,
    KafkaError.NOT_ENOUGH_REPLICAS: KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.NOT_ENOUGH_REPLICAS_AFTER_APPEND: KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.REQUEST_TIMED_OUT: KafkaError.COORDINATOR_NOT_AVAILABLE,
    KafkaError.UNKNOWN_TOPIC_OR_PARTITION: KafkaError.COORDINATOR_NOT_AVAILABLE,
}


class OffsetApis:
    def __init__(self, config, offsets_topic, coordinator, metadata, legacy_handlers, to_send):
        self.config = config
        self._topic = offsets_topic
        self._coordinator = coordinator
        self._metadata = metadata
        self._legacy = legacy_handlers
        self._to_send = to_send

    # --- OffsetCommit ------------------------------------------------------------------

    def commit(self, connection, request_header, request) -> None:
        version = request_header.api_version
        group_id = request.group_id
        wanted = [(topic.name, partition) for topic in request.topics for partition in topic.partitions]
        error = self._status(group_id) or self._coordinator.validate_commit(
            monotonic_ms(), group_id, request.generation_id_or_member_epoch, request.member_id,
            request.group_instance_id if version >= 7 else None)
        errors = {}
        offsets = {}
        now_ms = int(time.time() * 1000)
        for topic, partition in wanted:
            key = (topic, partition.partition_index)
            if error:
                errors[key] = error
                continue
            problem = self._partition_error(topic, partition.partition_index) or \
                self._coordinator.check_offset_metadata(partition.committed_metadata)
            if problem:
                errors[key] = problem
                continue
            offsets[key] = OffsetAndMetadata(partition.committed_offset,
                                             partition.committed_leader_epoch if version >= 6 else -1,
                                             partition.committed_metadata, now_ms)
            errors[key] = KafkaError.NONE
        if not offsets:
            respond(connection, request_header.correlation_id, ApiKey.OFFSET_COMMIT, version,
                    _commit_answer(version, errors))
            return
        response = connection.reserve()

        def written(write_error: int) -> None:
            if write_error:
                code = _WRITE_ERRORS.get(write_error, KafkaError.UNKNOWN_SERVER_ERROR)
                for key in offsets:
                    errors[key] = code
            else:
                self._coordinator.commit_done(group_id, offsets)
            fill(response, request_header.correlation_id, ApiKey.OFFSET_COMMIT, version,
                 _commit_answer(version, errors))
            if not connection.closed:
                self._to_send(connection)
        records = [offset_records.offset_commit_record(group_id, topic, partition, committed)
                   for (topic, partition), committed in offsets.items()]
        self._topic.write(connection, group_id, records, written)

    def _partition_error(self, topic: str, partition: int) -> int:
        """UNKNOWN_TOPIC_OR_PARTITION for a partition that does not exist, an invalid
        topic name included (Kafka's answer: it looks the partition up, nothing more)."""
        try:
            check_topic(topic)
        except (InvalidTopicError, TypeError):
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        if not self._metadata.topic_exists(topic) or not 0 <= partition < self._legacy.partition_count(topic):
            return KafkaError.UNKNOWN_TOPIC_OR_PARTITION
        return KafkaError.NONE

    # --- OffsetFetch -------------------------------------------------------------------

    def fetch(self, connection, request_header, request) -> None:
        version = request_header.api_version
        group_id = request.group_id
        wanted = None if request.topics is None else \
            [(topic.name, partition) for topic in request.topics for partition in topic.partition_indexes]
        error = self._status(group_id)
        found = {} if error else self._coordinator.committed(group_id, wanted)
        if wanted is None:
            wanted = sorted(found)
        topics = {}
        for topic, partition in wanted:
            committed = found.get((topic, partition))
            topics.setdefault(topic, []).append(_FetchPartition(
                partition_index=partition,
                committed_offset=committed.offset if committed else -1,
                committed_leader_epoch=committed.leader_epoch if committed else -1,
                metadata=(committed.metadata or "") if committed else "",
                error_code=error if version < 2 else KafkaError.NONE))
        respond(connection, request_header.correlation_id, ApiKey.OFFSET_FETCH, version,
                OffsetFetchResponse[version](
                    throttle_time_ms=0, error_code=error,
                    topics=[_FetchTopic(name=topic, partitions=partitions) for topic, partitions in topics.items()]))

    def _status(self, group_id) -> int:
        return self._topic.status(group_id or "")  # (an empty group id is a group, as in Kafka)


def _commit_answer(version: int, errors: dict):
    topics = {}
    for (topic, partition), error in errors.items():
        topics.setdefault(topic, []).append(_CommitPartition(partition_index=partition, error_code=error))
    return OffsetCommitResponse[version](throttle_time_ms=0, topics=[
        _CommitTopic(name=topic, partitions=partitions) for topic, partitions in topics.items()])
