"""The simple consumer: ``SimpleConsumer`` (fetch, multifetch, offsets, iteration that never
skips), the walk to a message boundary, offsets before a time, and ``LeaderConsumer``
(the same reads of replicated topics, from each partition's current leader)."""

from mpbroker.clients.consumer.leader_consumer import LeaderConsumer
from mpbroker.clients.consumer.simple_consumer import MessageAndOffset, MessageSet, SimpleConsumer

__all__ = ["LeaderConsumer", "MessageAndOffset", "MessageSet", "SimpleConsumer"]
