"""The supervisor's record of each process slot (``Child``): which role it has, its
pid and generation, its control channel, and the bookkeeping of its respawns and of
its stop. The record outlives the processes: a respawned child takes the same slot,
the same channel pair and the same shared-memory row.

Slots: the workers 0..N-1, the acceptor N, with ZooKeeper the registrar N+1, with
``metrics.enable`` the metrics exporter N+2.
"""

import logging
import os
import signal
import time

from mpbroker.clock import wall_clock_ms
from mpbroker.ipc.control import ControlChannel, Op

log = logging.getLogger("mpbroker.supervisor")

YOUNG_DEATH_S = 5.0  # a child that dies younger than this is respawned after a growing back-off
MAX_RESPAWN_BACKOFF_S = 30.0
_SHORT_ROLES = {"acceptor": "acc", "registrar": "zk", "metrics": "metrics"}
# How long a graceful stop may take before SIGKILL, by role. The workers' flush and close
# may take long (TimeoutStopSec in ops/mpbroker.service is at least as long).
STOP_TIMEOUT_S = {"worker": 120.0, "acceptor": 15.0, "registrar": 10.0, "metrics": 5.0}


class Child:
    def __init__(self, slot: int, role: str):
        self.slot = slot
        self.role = role
        self.pid = 0
        self.generation = 0
        self.restarts = 0
        self.started = 0.0  # time.monotonic() of the last fork
        self.started_ms = 0
        self.ready = False
        self.channel, self.child_channel = ControlChannel.pair()
        self.awaiting_ack = None  # generation of a worker_down the acceptor has not acknowledged
        self.ack_deadline = 0.0
        self.respawn_at = None
        self.backoff = 0.0
        self.last_exit = None
        self.stop_deadline = None
        self.killed_silent = False  # SIGKILLed for a missed heartbeat; waiting for its death

    @property
    def alive(self) -> bool:
        return self.pid > 0

    @property
    def name(self) -> str:
        return self.role if self.role != "worker" else f"worker {self.slot}"

    @property
    def process_name(self) -> str:
        """What ``ps -o comm`` shows: mpbroker-w0, mpbroker-acc, mpbroker-zk, mpbroker-metrics."""
        return "mpbroker-" + (_SHORT_ROLES.get(self.role) or f"w{self.slot}")

    def died(self, lived_s: float) -> None:
        """Grow the back-off if it died young (doubling, at most MAX_RESPAWN_BACKOFF_S),
        else forget it."""
        young = lived_s < YOUNG_DEATH_S
        self.backoff = min(MAX_RESPAWN_BACKOFF_S, max(0.5, self.backoff * 2)) if young else 0.0

    def forked(self, pid: int) -> None:
        self.pid = pid
        self.ready = False
        self.started = time.monotonic()
        self.started_ms = wall_clock_ms()  # a date: shown as the process's start time
        self.stop_deadline = None
        self.killed_silent = False

    def exited(self, code: int) -> float:
        """Its process ended with ``code`` (negative: killed by that signal); returns how
        long it lived, in seconds."""
        self.pid = 0
        self.ready = False
        self.last_exit = code
        return time.monotonic() - self.started

    def schedule_respawn(self) -> None:
        """Fork it again once its back-off has passed."""
        self.restarts += 1
        self.respawn_at = time.monotonic() + self.backoff

    def ask_to_stop(self) -> None:
        """Send ``stop``; it has STOP_TIMEOUT_S of its role to exit."""
        self.channel.send(Op.STOP)
        self.stop_deadline = time.monotonic() + STOP_TIMEOUT_S[self.role]

    def kill(self, sig: int) -> None:
        try:
            os.kill(self.pid, sig)
        except ProcessLookupError:
            pass


def make_children(config) -> tuple:
    """``(workers, acceptor, registrar or None, metrics exporter or None)``, by slot."""
    workers = config.num_workers
    return ([Child(slot, "worker") for slot in range(workers)], Child(workers, "acceptor"),
            Child(workers + 1, "registrar") if config.enable_zookeeper else None,
            Child(workers + 2, "metrics") if config.metrics_enable else None)


def kill_overdue(children, now: float) -> bool:
    """SIGKILL the stopping children past their stop deadline; True while any is alive."""
    alive = [child for child in children if child.alive]
    for child in alive:
        if now > child.stop_deadline:
            log.warning("%s did not stop in time; killing it", child.name)
            child.kill(signal.SIGKILL)
    return bool(alive)
