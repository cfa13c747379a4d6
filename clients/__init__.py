"""mpbroker's Python clients: producer, simple consumer and the ZooKeeper consumer
connector. They arrive with the clients issue, on the codec in ``mpbroker.segments``."""
