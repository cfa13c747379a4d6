"""mpbroker's Python clients (``mpbroker.clients``; the ``clients/`` folder of the source
tree, installed under ``mpbroker``), on the shared codec (``mpbroker.codec``) and the
ZooKeeper layout (``mpbroker.registry``); they never import the broker's processes or its
log-writing code. One sub-package per concern, each importing only those before it:

- ``core``: connection, broker lists, errors, settings, envelope and audit-event formats,
  ZooKeeper reads, the leaders of replicated topics;
- ``producer``: ``Producer``, sync or async (background batching), key partitioner,
  gzip/snappy, fire-and-forget or acknowledged (append / flush) delivery;
- ``consumer``: ``SimpleConsumer``, fetch, multifetch, offsets before a time, iteration
  that grows its fetch size for big messages and never skips; ``LeaderConsumer``, the
  same reads of replicated topics from each partition's current leader;
- ``groups``: the ZooKeeper consumer connector and the group report and admin;
- ``mirror`` and ``audit``: the mirror maker and the audit's reading side.

The command-line tools built on them are in ``mpbroker.cli``.
"""

from mpbroker.clients.consumer.leader_consumer import LeaderConsumer
from mpbroker.clients.consumer.simple_consumer import MessageAndOffset, MessageSet, SimpleConsumer
from mpbroker.clients.core.errors import (
    BrokerError,
    BrokerUnavailableError,
    ClientError,
    ProduceError,
    ProducerClosedError,
    QueueFullError,
)
from mpbroker.clients.producer.producer import Producer, SendResult
from mpbroker.codec.errors import MessageSizeTooLargeError, OffsetOutOfRangeError

__all__ = [
    "BrokerError",
    "BrokerUnavailableError",
    "ClientError",
    "LeaderConsumer",
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
