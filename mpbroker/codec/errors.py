"""Error codes of the Kafka 0.7 wire protocol (plus mpbroker's own, >= 5) and the
exceptions that carry them.

Every failure that can reach a client is an ``MPBrokerError`` subclass with the wire
``code`` it maps to, so the layer that answers a request never has to guess.
"""

from enum import IntEnum


class ErrorCode(IntEnum):
    UNKNOWN = -1
    NO_ERROR = 0
    OFFSET_OUT_OF_RANGE = 1
    INVALID_MESSAGE = 2
    WRONG_PARTITION = 3
    INVALID_FETCH_SIZE = 4
    # mpbroker's own codes, used by its own request types (>= 100).
    MESSAGE_SIZE_TOO_LARGE = 5
    INVALID_TOPIC = 6
    PARTITION_UNAVAILABLE = 7
    STORAGE_ERROR = 8  # the broker could not write the set (disk full, I/O error); none of it was written
    # Replication (mpbroker's own; Kafka 0.8 has NotLeaderForPartition and the rest under other numbers).
    NOT_LEADER = 9  # this broker does not lead the partition (now): refresh the leader and retry
    NOT_ENOUGH_REPLICAS = 10  # durability 2 and an ISR smaller than min.insync.replicas: nothing appended
    FENCED_LEADER_EPOCH = 11  # a replica request under an older leader epoch than the leader's
    UNKNOWN_LEADER_EPOCH = 12  # a replica request under a newer leader epoch than the leader knows yet: retry
    # A 0.7 FETCH/MULTIFETCH of a partition that modern producers wrote: the bytes are
    # modern record batches (magic 2), not 0.7 messages. Offsets are still byte
    # positions: a batch at [p, q) with n records holds offsets q-n .. q-1 (its
    # baseOffset is q-n) and a reader goes on at q. An answer at an offset inside a
    # batch starts at that batch (the reader skips the records below its offset). A
    # client that does not know this code stops with an unknown error.
    RECORD_BATCHES = 13


class MPBrokerError(Exception):
    """Base of every error that maps to a wire error code."""

    code = ErrorCode.UNKNOWN


class OffsetOutOfRangeError(MPBrokerError):
    code = ErrorCode.OFFSET_OUT_OF_RANGE


class InvalidMessageError(MPBrokerError):
    """A message or message set failed validation (length, magic, CRC, codec, nesting)."""

    code = ErrorCode.INVALID_MESSAGE


class WrongPartitionError(MPBrokerError):
    code = ErrorCode.WRONG_PARTITION


class InvalidFetchSizeError(MPBrokerError):
    code = ErrorCode.INVALID_FETCH_SIZE


class MessageSizeTooLargeError(MPBrokerError):
    code = ErrorCode.MESSAGE_SIZE_TOO_LARGE


class InvalidTopicError(MPBrokerError):
    code = ErrorCode.INVALID_TOPIC


class PartitionUnavailableError(MPBrokerError):
    code = ErrorCode.PARTITION_UNAVAILABLE


class NotLeaderError(MPBrokerError):
    code = ErrorCode.NOT_LEADER


class NotEnoughReplicasError(MPBrokerError):
    code = ErrorCode.NOT_ENOUGH_REPLICAS


class LogCorruptError(MPBrokerError):
    """A partition log on disk is inconsistent in a way recovery must not paper over."""


class StorageError(MPBrokerError):
    """Writing to the log failed (disk full, I/O error); the log was left consistent."""

    code = ErrorCode.STORAGE_ERROR
