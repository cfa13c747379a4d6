"""The simple consumer: ``SimpleConsumer`` (fetch, multifetch, offsets, iteration that never
skips), the walk to a message boundary, and offsets before a time."""

from mpbroker.clients.consumer.simple_consumer import MessageAndOffset, MessageSet, SimpleConsumer

__all__ = ["MessageAndOffset", "MessageSet", "SimpleConsumer"]
