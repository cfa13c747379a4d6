"""The producer: ``Producer`` (sync or async, partitioner, compression, acknowledged or
fire-and-forget), its background sender, callbacks, partitioners, its view of the cluster
through ZooKeeper, the spreading of a new topic, and its side of the audit (``auditor``)."""

from mpbroker.clients.producer.producer import Producer, SendResult

__all__ = ["Producer", "SendResult"]
