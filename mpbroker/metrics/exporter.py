"""The metrics exporter: the supervisor's child that serves the Prometheus text format
over HTTP when ``metrics.enable=true``.

The supervisor binds the listening socket before forking (a port that is taken stops
the broker at start, and a respawned exporter keeps the port; it listens on
``metrics.host``, which defaults to ``hostname``). This process runs
prometheus_client's handler on ``http_server.BoundedHTTPServer`` over that socket (a
fixed number of threads, however many connections are open), with a registry that
holds only ``BrokerCollector``: every scrape reads the shared memory afresh, so nothing
here keeps state a crash could lose. Its own threads are fine: this process never
forks. The main thread runs the child-process skeleton (``process.child``: heartbeat,
the log level from a reload, ``stop`` or TERM from the supervisor) and exits (to be
respawned) if the server's dispatcher thread ended.
"""

import logging

from prometheus_client import CollectorRegistry
from prometheus_client.exposition import MetricsHandler

from mpbroker.metrics.collector import BrokerCollector
from mpbroker.metrics.http_server import BoundedHTTPServer
from mpbroker.process.child import ChildProcess

log = logging.getLogger(__name__)

CHECK_MS = 500


class MetricsExporter(ChildProcess):
    def __init__(self, collector: BrokerCollector, listener, slots, slot: int, channel):
        super().__init__(slots, slot, channel)
        self.listener = listener
        registry = CollectorRegistry(auto_describe=False)
        registry.register(collector)
        self.handler = type("BrokerMetricsHandler", (MetricsHandler,), {"registry": registry})
        self.server = None

    def start(self):
        self.server = BoundedHTTPServer(self.listener, self.handler)
        self.server.start()
        log.info("serving metrics on http://%s:%d/metrics", *self.listener.getsockname()[:2])
        self.timers.every(CHECK_MS, self._check_server)
        return None

    def ready_fields(self) -> dict:
        return {"port": self.listener.getsockname()[1]}

    def _check_server(self, _now_ms: int) -> None:
        if not self.server.alive and not self.stopping:
            log.error("the HTTP server's dispatcher thread ended; exiting to be respawned")
            self.exit_with(1)

    def finish(self) -> int:
        self.server.stop()
        log.info("stopped")
        return self.exit_code
