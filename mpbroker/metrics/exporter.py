"""The metrics exporter: the supervisor's child that serves the Prometheus text format
over HTTP when ``metrics.enable=true``.

The supervisor binds the listening socket before forking (a port that is taken stops
the broker at start, and a respawned exporter keeps the port; it listens on
``metrics.host``, which defaults to ``hostname``). This process runs
prometheus_client's handler on ``http_server.BoundedHTTPServer`` over that socket (a
fixed number of threads, however many connections are open), with a registry that
holds only ``BrokerCollector``: every scrape reads the shared memory afresh, so nothing
here keeps state a crash could lose. Its own threads are fine: this process never
forks. The main thread beats in the slot table, takes the log level from a reload and
waits for ``stop`` (or TERM) from the supervisor; it exits (to be respawned) if the
server's dispatcher thread ended.
"""

import logging
import select

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from mpbroker.clock import monotonic_ms
from mpbroker.logging_setup import set_level
from mpbroker.metrics.collector import BrokerCollector
from mpbroker.metrics.http_server import BoundedHTTPServer
from mpbroker.process import install_child_signals, term_requested

log = logging.getLogger(__name__)

BEAT_S = 0.5


class MetricsExporter:
    def __init__(self, collector: BrokerCollector, listener, slots, slot: int, channel):
        self.listener = listener
        self.slots = slots
        self.slot = slot
        self.channel = channel
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self.handler = type("BrokerMetricsHandler", (MetricsHandler,), {"registry": registry})

    def run(self) -> int:
        wakeup = install_child_signals()
        server = BoundedHTTPServer(self.listener, self.handler)
        server.start()
        host, port = self.listener.getsockname()[:2]
        log.info("serving metrics on http://%s:%d/metrics", host, port)
        self.channel.send("ready", port=port)
        stopping = False
        while not stopping:
            if not server.alive:
                log.error("the HTTP server's dispatcher thread ended; exiting to be respawned")
                return 1
            readable, _, _ = select.select([self.channel.fileno(), wakeup], [], [], BEAT_S)
            if wakeup in readable and term_requested(wakeup):
                stopping = True
            if self.channel.fileno() in readable:
                for message in self.channel.receive_all():
                    if message is None or message.get("op") == "stop":
                        stopping = True  # asked to, or the supervisor is gone
                    elif message.get("op") == "reload":
                        set_level(message["properties"]["log.level"])
            self.slots.beat(self.slot, monotonic_ms())
        server.stop()
        log.info("stopped")
        return 0
