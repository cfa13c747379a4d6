"""mpbroker's Python clients, on the codec in ``mpbroker.segments`` and the wire codec in
``mpbroker.codec``:

- ``Producer``: sync or async (background batching), key partitioner, gzip/snappy,
  fire-and-forget or acknowledged (append / flush) delivery;
- ``SimpleConsumer``: fetch, multifetch, offsets before a time, iteration that grows
  its fetch size for big messages and never skips;
- console tools: ``mpbroker-console-producer`` and ``mpbroker-console-consumer``.
"""

from clients.consumer import MessageAndOffset, MessageSet, SimpleConsumer
from clients.errors import (
    BrokerError,
    BrokerUnavailableError,
    ClientError,
    ProduceError,
    ProducerClosedError,
    QueueFullError,
)
from clients.producer import Producer, SendResult
from mpbroker.codec.errors import MessageSizeTooLargeError, OffsetOutOfRangeError

__all__ = [
    "BrokerError",
    "BrokerUnavailableError",
    "ClientError",
    "MessageAndOffset",
    "MessageSet",
    "MessageSizeTooLargeError",
    "OffsetOutOfRangeError",
    "ProduceError",
    "Producer",
    "ProducerClosedError",
    "QueueFullError",
    "SendResult",
    "SimpleConsumer",
]
