"""What a send becomes on the wire, sans-IO: the messages of one (broker, topic,
partition) group as produce request(s) (``ProduceRequest``), and what a delivered one
gives back (``SendResult``).

A group is one message set: one compressed wrapper message when the topic is
compressed, split in halves while a wrapper would exceed ``max.message.size``
(``build_requests``). Kept apart from the sending so that the producer's grouping and
its delivery (``delivery``) share one description of a request.
"""

from typing import NamedTuple

from mpbroker.codec.compression import compress
from mpbroker.codec.message import encode_message, encode_message_set


class SendResult(NamedTuple):
    topic: str
    broker_id: int
    partition: int
    messages: int
    offset: int | None  # where the set was written (acknowledged modes), else None
    next_offset: int | None  # the log end after it (acknowledged modes), else None


class ProduceRequest:
    """One produce request: a message set for one (broker, topic, partition). A
    replicated topic's request goes to whichever broker leads its partition when it is
    sent (``broker_id``: the leader when it was made)."""

    __slots__ = ("topic", "broker_id", "partition", "payloads", "message_set", "replicated", "error")

    def __init__(self, topic, broker_id, partition, payloads, message_set, replicated=False):
        self.topic = topic
        self.broker_id = broker_id
        self.partition = partition
        self.payloads = payloads
        self.message_set = message_set
        self.replicated = replicated
        self.error = 0  # the retriable error code of its last answer


def to_bytes(message) -> bytes:
    """A message as the bytes sent: bytes-like as is, str as UTF-8."""
    if isinstance(message, (bytes, bytearray, memoryview)):
        return bytes(message)
    if isinstance(message, str):
        return message.encode("utf-8")
    raise TypeError(f"a message is bytes or str, not {type(message).__name__}")


def build_requests(topic: str, broker_id: int, partition: int, payloads: list, codec,
                   max_message_size: int) -> list:
    """The request(s) for one group: compressed with ``codec`` (none: falsy) as one
    wrapper message, split in halves while a wrapper would exceed ``max_message_size``."""
    if not codec:
        message_set = encode_message(payloads[0]) if len(payloads) == 1 else encode_message_set(payloads)
        return [ProduceRequest(topic, broker_id, partition, payloads, message_set)]
    compressed = compress(codec, encode_message_set(payloads))
    if len(compressed) <= max_message_size:
        return [ProduceRequest(topic, broker_id, partition, payloads, encode_message(compressed, codec))]
    if len(payloads) == 1:  # incompressible and near the limit: send it as it is
        return [ProduceRequest(topic, broker_id, partition, payloads, encode_message_set(payloads))]
    half = len(payloads) // 2
    return (build_requests(topic, broker_id, partition, payloads[:half], codec, max_message_size)
            + build_requests(topic, broker_id, partition, payloads[half:], codec, max_message_size))
