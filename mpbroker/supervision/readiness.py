"""When the broker counts as ready: systemd's READY=1 and ``"ready": true`` in the status.

Ready means a client can use the broker: the acceptor takes connections and, with
ZooKeeper, ``/brokers/ids/<id>`` is written, so a producer that discovers brokers
through ZooKeeper finds this one as soon as ``systemctl start`` returns. ZooKeeper
must not keep the broker from serving, so the wait for the registration is bounded:
READY=1 comes once the registrar reports the broker registered, or
zk.connectiontimeout.ms after the acceptor came up, whichever is first (the log says
which: "registered in ZooKeeper" or "not registered in ZooKeeper within ... ms"); when
ZooKeeper did not answer the registrar's first check at start-up (which already waited
zk.connectiontimeout.ms), READY=1 comes with the acceptor. In each case the registrar
goes on trying and registers once ZooKeeper answers.
"""

import logging
import time

from mpbroker import systemd

log = logging.getLogger(__name__)


class Readiness:
    def __init__(self, config, pid: int, port: int):
        self.config = config
        self.pid = pid
        self.port = port
        self.notified = False  # READY=1 sent: serving (and registered, or given up waiting)
        self.deadline = None  # waiting for the registration until then (time.monotonic())
        self.zk_answered = None  # what the registrar's last "checked" said: ZooKeeper answered

    def accepting(self, with_registrar: bool) -> None:
        """The acceptor takes connections for the first time: ready now without
        ZooKeeper, else once registered (bounded)."""
        if not with_registrar:
            self._notify("")
            return
        if self.zk_answered is False:
            self._notify(f"not registered in ZooKeeper: {self.config.zk_connect} did not answer at start-up; "
                         "registering once it does")
            return
        timeout_ms = self.config.zk_connectiontimeout_ms
        self.deadline = time.monotonic() + timeout_ms / 1000
        log.info("accepting on port %d; ready once registered in ZooKeeper (at most %d ms, "
                 "zk.connectiontimeout.ms)", self.port, timeout_ms)

    def registrar_reported(self, registered: bool) -> None:
        if self.deadline is not None and registered:
            self._notify(f"registered in ZooKeeper at {self.config.zk_connect} as broker {self.config.brokerid}")

    def tick(self, now: float) -> None:
        if self.deadline is not None and now >= self.deadline:
            log.warning("not registered in ZooKeeper within %d ms (zk.connectiontimeout.ms); ready without it, "
                        "registering once ZooKeeper answers", self.config.zk_connectiontimeout_ms)
            self._notify(f"not registered in ZooKeeper yet (none within {self.config.zk_connectiontimeout_ms} ms)")

    def stopping(self) -> None:
        self.deadline = None

    def _notify(self, how: str) -> None:
        """Tell systemd (and the status) that the broker serves; ``how`` adds why now."""
        self.deadline = None
        self.notified = True
        detail = f"accepting on port {self.port}" + (f", {how}" if how else "")
        systemd.notify(f"READY=1\nMAINPID={self.pid}\nSTATUS={detail}")
        log.info("ready: %s", detail)
