"""Errors the clients raise besides the wire ones of ``mpbroker.codec.errors``
(OffsetOutOfRangeError, MessageSizeTooLargeError, ...), which they raise as they are."""

from mpbroker.codec.errors import (
    ErrorCode,
    InvalidFetchSizeError,
    InvalidMessageError,
    InvalidTopicError,
    MessageSizeTooLargeError,
    NotEnoughReplicasError,
    NotLeaderError,
    OffsetOutOfRangeError,
    PartitionUnavailableError,
    WrongPartitionError,
)


class ClientError(Exception):
    """Base of the client-side errors."""


class BrokerUnavailableError(ClientError):
    """No connection to a broker could be made (or kept) within the retries."""


class BrokerError(ClientError):
    """The broker answered with an error code that has no exception of its own (``code``)."""

    def __init__(self, message: str, code: int = ErrorCode.UNKNOWN):
        super().__init__(message)
        self.code = code


class ProduceError(BrokerError):
    """The broker refused a produce request (the wire error code is in ``code``)."""


class LeaderNotAvailableError(BrokerUnavailableError):
    """A replicated partition has no leader the client can reach: none is elected
    (offline: no in-sync replica is alive), or the leader is not registered, after the
    refreshes and retries. ``topic`` and ``partition`` name it."""

    def __init__(self, message: str, topic: str = "", partition: int = -1):
        super().__init__(message)
        self.topic, self.partition = topic, partition


class FencedLeaderEpochError(BrokerError):
    """Error 11: a replica request under an older leader epoch than the leader's (the
    brokers' own request types; a client sees it only from a broker it should not ask)."""

    def __init__(self, message: str, code: int = ErrorCode.FENCED_LEADER_EPOCH):
        super().__init__(message, code)


class UnknownLeaderEpochError(BrokerError):
    """Error 12: a replica request under a leader epoch the leader does not know yet."""

    def __init__(self, message: str, code: int = ErrorCode.UNKNOWN_LEADER_EPOCH):
        super().__init__(message, code)


class QueueFullError(ClientError):
    """The async producer's queue stayed full for ``queue.enqueueTimeout.ms``; the
    message was dropped (and counted)."""


class ProducerClosedError(ClientError):
    """``send`` after ``close``."""


class NotAMessageBoundaryError(ClientError):
    """A fetch started at an offset inside a message (offsets are byte positions: only
    the offsets a consumer was handed, or the log's start and end, begin a message).
    ``offset`` is the offset asked for, ``nearest`` the start of the last message that
    begins before it (found by walking the segment from its base)."""

    def __init__(self, topic: str, partition: int, offset: int, nearest: int):
        super().__init__(f"{offset} is not the start of a message in {topic}-{partition}; "
                         f"the nearest earlier message starts at {nearest}")
        self.topic, self.partition, self.offset, self.nearest = topic, partition, offset, nearest


class CorruptMessageError(InvalidMessageError, ClientError):
    """A fetched message fails its checks (CRC, length, magic, codec) at a message
    boundary: damage in the log, not a wrong offset. ``offset`` is where it starts; the
    valid messages before it were handed out first."""

    def __init__(self, message: str, topic: str, partition: int, offset: int):
        super().__init__(message)
        self.topic, self.partition, self.offset = topic, partition, offset


RETRIABLE_CODES = frozenset({ErrorCode.PARTITION_UNAVAILABLE})

_EXCEPTION_FOR_CODE = {
    ErrorCode.OFFSET_OUT_OF_RANGE: OffsetOutOfRangeError,
    ErrorCode.INVALID_MESSAGE: InvalidMessageError,
    ErrorCode.WRONG_PARTITION: WrongPartitionError,
    ErrorCode.INVALID_FETCH_SIZE: InvalidFetchSizeError,
    ErrorCode.MESSAGE_SIZE_TOO_LARGE: MessageSizeTooLargeError,
    ErrorCode.INVALID_TOPIC: InvalidTopicError,
    ErrorCode.PARTITION_UNAVAILABLE: PartitionUnavailableError,
    ErrorCode.NOT_LEADER: NotLeaderError,
    ErrorCode.NOT_ENOUGH_REPLICAS: NotEnoughReplicasError,
}
_CLIENT_EXCEPTION_FOR_CODE = {
    ErrorCode.FENCED_LEADER_EPOCH: FencedLeaderEpochError,
    ErrorCode.UNKNOWN_LEADER_EPOCH: UnknownLeaderEpochError,
}
# A replicated partition's answers that a refresh of its leader (and a retry) can cure:
# the broker asked does not lead it (now), or its ISR is too small for durability 2 for now.
LEADER_RETRY_CODES = frozenset({ErrorCode.NOT_LEADER, ErrorCode.NOT_ENOUGH_REPLICAS})


def error_for(code: int, context: str, fallback=ProduceError) -> Exception:
    """The exception a wire error code stands for: the mpbroker.codec.errors class of that
    code (so callers can catch OffsetOutOfRangeError and friends), else ``fallback``
    carrying the code (-1 Unknown, or a code this client does not know)."""
    try:
        name = ErrorCode(code).name
    except ValueError:
        name = f"error code {code}"
    cls = _EXCEPTION_FOR_CODE.get(code)
    if cls is not None:
        return cls(f"{context}: {name}")
    cls = _CLIENT_EXCEPTION_FOR_CODE.get(code)
    if cls is not None:
        return cls(f"{context}: {name}")
    return fallback(f"{context}: {name}", code)
