"""The metrics exporter: the supervisor's child that serves the Prometheus text format
over HTTP when ``metrics.enable=true``.

The supervisor binds the listening socket before forking (a port that is taken stops
the broker at start, and a respawned exporter keeps the port). This process runs
prometheus_client's handler on a threading HTTP server over that socket, with a
registry that holds only ``BrokerCollector``: every scrape reads the shared memory
afresh, so nothing here keeps state a crash could lose. Its own threads are fine: this
process never forks. The main thread beats in the slot table, takes the log level from a
reload and waits for ``stop`` (or TERM) from the supervisor.
"""

import http.server
import logging
import select
import threading

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from mpbroker.clock import monotonic_ms
from mpbroker.logging_setup import set_level
from mpbroker.metrics.collector import BrokerCollector
from mpbroker.process import install_child_signals, term_requested

log = logging.getLogger(__name__)

BEAT_S = 0.5
CLIENT_TIMEOUT_S = 10.0  # a scraper that sends nothing does not keep its thread


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, listener, handler):
        super().__init__(listener.getsockname()[:2], handler, bind_and_activate=False)
        self.socket.close()
        self.socket = listener
        self.socket.setblocking(True)


class MetricsExporter:
    def __init__(self, collector: BrokerCollector, listener, slots, slot: int, channel):
        self.listener = listener
        self.slots = slots
        self.slot = slot
        self.channel = channel
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self.handler = type("BrokerMetricsHandler", (MetricsHandler,),
                            {"registry": registry, "timeout": CLIENT_TIMEOUT_S})

    def run(self) -> int:
        wakeup = install_child_signals()
        server = _Server(self.listener, self.handler)
        thread = threading.Thread(target=server.serve_forever, name="metrics-http", daemon=True)
        thread.start()
        host, port = self.listener.getsockname()[:2]
        log.info("serving metrics on http://%s:%d/metrics", host, port)
        self.channel.send("ready", port=port)
        stopping = False
        while not stopping:
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
        server.shutdown()
        server.server_close()
        log.info("stopped")
        return 0
