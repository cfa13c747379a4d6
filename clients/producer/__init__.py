"""The producer: ``Producer`` (sync or async, partitioner, compression, acknowledged or
fire-and-forget; ``producer``), its requests (``produce_requests``), their delivery with
the retries (``delivery``), its connections and write-behind queues
(``broker_connections``), its counters (``stats``), its background sender, callbacks,
partitioners, its view of the cluster through ZooKeeper, the spreading of a new topic,
and its side of the audit (``auditor``)."""

from mpbroker.clients.producer.producer import Producer, SendResult

__all__ = ["Producer", "SendResult"]
