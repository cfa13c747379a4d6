"""The modern Kafka protocol's room in the acceptor: its request handlers, beside the
0.7 ones (``mpbroker.acceptor.requests``), sharing the router, the segment files and
the connections."""
