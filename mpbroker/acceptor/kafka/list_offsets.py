"""ListOffsets: a partition's earliest offset (-2), its latest (-1, the end readers
see: the high watermark), or the first offset at or after a time (``reads.offset_for_time``)."""

from kafka.protocol.consumer import ListOffsetsResponse

from mpbroker.acceptor.kafka.answers import respond
from mpbroker.acceptor.kafka.reads import offset_for_time
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.kafka_protocol.api import ApiKey
from mpbroker.kafka_protocol.errors import KafkaError

LATEST = -1
EARLIEST = -2
_Topic = ListOffsetsResponse.ListOffsetsTopicResponse
_Partition = ListOffsetsResponse.ListOffsetsTopicResponse.ListOffsetsPartitionResponse


def list_offsets(connection, request_header, request, reads, legacy_handlers) -> None:
    topics = []
    for topic in request.topics:
        partitions = []
        for partition in topic.partitions:
            error, timestamp, offset = _one(reads, legacy_handlers, topic.name, partition.partition_index,
                                            partition.timestamp)
            partitions.append(_Partition(partition_index=partition.partition_index, error_code=error,
                                         timestamp=timestamp, offset=offset, leader_epoch=-1))
        topics.append(_Topic(name=topic.name, partitions=partitions))
    version = request_header.api_version
    respond(connection, request_header.correlation_id, ApiKey.LIST_OFFSETS, version,
            ListOffsetsResponse[version](throttle_time_ms=0, topics=topics))


def _one(reads, legacy_handlers, topic: str, partition: int, timestamp: int) -> tuple:
    try:
        check_topic(topic)
    except (InvalidTopicError, TypeError):
        return KafkaError.INVALID_TOPIC_EXCEPTION, -1, -1
    if legacy_handlers.roles_unknown_for(topic):
        return KafkaError.NOT_LEADER_OR_FOLLOWER, -1, -1
    if not 0 <= partition < legacy_handlers.partition_count(topic) or (
            not reads.topic_known(topic) and topic not in legacy_handlers.replicated):
        return KafkaError.UNKNOWN_TOPIC_OR_PARTITION, -1, -1
    if timestamp in (LATEST, EARLIEST):
        error, view, state, end = reads.bounds(topic, partition)
        if error:
            return error, -1, -1
        if view is None:
            return KafkaError.NONE, -1, 0
        return KafkaError.NONE, -1, end if timestamp == LATEST else state.log_start
    if timestamp < 0:
        return KafkaError.UNSUPPORTED_VERSION, -1, -1  # -3 (max timestamp) and others: not served
    return offset_for_time(reads, topic, partition, timestamp)
