"""What a ReplicaFetcher uses of its worker, for tests that run one outside a worker:
the event loop's selector and timers, and the settings it reads."""

import selectors

from mpbroker.process.timers import Timers


class Loop:
    """The worker's event loop: its selector and timers."""

    def __init__(self):
        self.selector = selectors.DefaultSelector()
        self.timers = Timers()


class Config:
    replica_fetch_max_bytes = 1 << 20
    controller_socket_timeout_ms = 30_000
    num_replica_fetchers = 1
    max_message_size = 1 << 20
    max_socket_request_bytes = 1 << 24
