"""The client core, which every client below builds on: one broker connection
(``connection``), broker lists and partition probes (``brokers``), the clients' errors
(``errors``), the properties language of client settings (``settings``), the audit envelope
and audit events (``envelope``, ``audit_events``: formats, no I/O), the ZooKeeper reads of
registered brokers and topics (``zk_registry``), the leaders of replicated topics with
their watches (``leaders``) and the "did you mean" refusal of an unknown topic
(``unknown_topics``)."""
