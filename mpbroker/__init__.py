"""mpbroker: a multi-process log broker speaking the Kafka 0.7 wire protocol.

The package root only names the version; the pieces live in sub-packages:
``mpbroker.segments`` (the partition log) and, as they land, the broker processes.
"""

__version__ = "0.1.0"
