"""Error codes of the modern Kafka protocol that the listener answers with (Kafka's
numbers; ``mpbroker.codec.errors`` has 0.7's, which are other numbers)."""

from enum import IntEnum


class KafkaError(IntEnum):
    UNKNOWN_SERVER_ERROR = -1
    NONE = 0
    OFFSET_OUT_OF_RANGE = 1
    CORRUPT_MESSAGE = 2
    UNKNOWN_TOPIC_OR_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    LEADER_NOT_AVAILABLE = 5
    NOT_LEADER_OR_FOLLOWER = 6
    REQUEST_TIMED_OUT = 7
    MESSAGE_TOO_LARGE = 10
    OFFSET_METADATA_TOO_LARGE = 12
    NETWORK_EXCEPTION = 13
    COORDINATOR_LOAD_IN_PROGRESS = 14
    COORDINATOR_NOT_AVAILABLE = 15
    NOT_COORDINATOR = 16
    INVALID_TOPIC_EXCEPTION = 17
    RECORD_LIST_TOO_LARGE = 18
    NOT_ENOUGH_REPLICAS = 19
    NOT_ENOUGH_REPLICAS_AFTER_APPEND = 20
    INVALID_REQUIRED_ACKS = 21
    ILLEGAL_GENERATION = 22  # the group coordinator's answers, 22-30 (mpbroker.group_coordinator)
    INCONSISTENT_GROUP_PROTOCOL = 23
    INVALID_GROUP_ID = 24
    UNKNOWN_MEMBER_ID = 25
    INVALID_SESSION_TIMEOUT = 26
    REBALANCE_IN_PROGRESS = 27
    INVALID_COMMIT_OFFSET_SIZE = 28
    GROUP_AUTHORIZATION_FAILED = 30
    INVALID_REQUEST = 42
    UNSUPPORTED_FOR_MESSAGE_FORMAT = 43
    OUT_OF_ORDER_SEQUENCE_NUMBER = 45  # an idempotent producer's batch after a gap (workers.producer_state)
    INVALID_PRODUCER_EPOCH = 47  # ... from an epoch older than the producer's latest
    UNSUPPORTED_VERSION = 35
    TOPIC_ALREADY_EXISTS = 36
    SECURITY_DISABLED = 54  # DescribeAcls: no authorizer here (acceptor.kafka.acls)
    KAFKA_STORAGE_ERROR = 56
    UNKNOWN_PRODUCER_ID = 59  # never answered since KIP-360 (Kafka 2.5): see workers.producer_state
    NON_EMPTY_GROUP = 68
    GROUP_ID_NOT_FOUND = 69
    FENCED_LEADER_EPOCH = 74
    UNKNOWN_LEADER_EPOCH = 75
    UNSUPPORTED_COMPRESSION_TYPE = 76
    MEMBER_ID_REQUIRED = 79
    GROUP_MAX_SIZE_REACHED = 81
    FENCED_INSTANCE_ID = 82
    INVALID_RECORD = 87


# mpbroker's 0.7 codes (``mpbroker.codec.errors.ErrorCode``) as the modern protocol's,
# for the failures the 0.7 machinery reports (a worker down, a full disk, not leader).
FROM_LEGACY = {
    -1: KafkaError.UNKNOWN_SERVER_ERROR,
    0: KafkaError.NONE,
    1: KafkaError.OFFSET_OUT_OF_RANGE,
    2: KafkaError.CORRUPT_MESSAGE,
    3: KafkaError.UNKNOWN_TOPIC_OR_PARTITION,
    4: KafkaError.INVALID_FETCH_SIZE,
    5: KafkaError.MESSAGE_TOO_LARGE,
    6: KafkaError.INVALID_TOPIC_EXCEPTION,
    7: KafkaError.NOT_LEADER_OR_FOLLOWER,  # the owning worker is restarting: retriable, as a leader change is
    8: KafkaError.KAFKA_STORAGE_ERROR,
    9: KafkaError.NOT_LEADER_OR_FOLLOWER,
    10: KafkaError.NOT_ENOUGH_REPLICAS,
    11: KafkaError.FENCED_LEADER_EPOCH,
    12: KafkaError.UNKNOWN_LEADER_EPOCH,
}


def from_legacy(code: int) -> int:
    return FROM_LEGACY.get(code, KafkaError.UNKNOWN_SERVER_ERROR)


UNSUPPORTED_FOR_MESSAGE_FORMAT = KafkaError.UNSUPPORTED_FOR_MESSAGE_FORMAT  # record batches for a 0.7 log
