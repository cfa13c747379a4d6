"""The audit's reading side: the ledger that compares what producers counted with what a
topic holds (``ledger``, no I/O) and the one-pass read of a whole topic (``cluster_reader``).
The producer's side (counting, publishing events) is ``mpbroker.clients.producer.auditor``;
the event format is ``mpbroker.clients.core.audit_events``."""
