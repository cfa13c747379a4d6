"""A real broker process tree for tests: ``mpbroker.testing.local_broker.LocalBroker`` with test
defaults (2 workers, 4 partitions, fast time-based flushes) and what fault tests need
besides: the children's pids, a wait for a status condition, SIGKILL of the tree."""

import os
import signal
import time

from mpbroker.testing.local_broker import LocalBroker

DEFAULTS = {  # LocalBroker keyword properties: "_" stands for "."
    "num_workers": 2,
    "num_partitions": 4,
    "log_flush_interval": 10000,
    "log_default_flush_scheduler_interval_ms": 20,
    "log_default_flush_interval_ms": 20,
    "worker_heartbeat_timeout_ms": 10000,
}


class BrokerProcess(LocalBroker):
    def __init__(self, directory, env=None, wrapper=None, **properties):
        super().__init__(directory, env=env, wrapper=wrapper, **{**DEFAULTS, **properties})

    def worker_pid(self, slot: int) -> int:
        return self.status()["workers"][slot]["pid"]

    def child_pids(self) -> list:
        status = self.status()
        return [worker["pid"] for worker in status["workers"]] + [status["acceptor"]["pid"]]

    def wait_until(self, predicate, timeout: float = 15.0, what: str = "condition"):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            status = self.try_status()
            if status and predicate(status):
                return status
            time.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; last status: {self.try_status()}\n{self.output()}")

    def send_signal(self, sig: int) -> None:
        self.process.send_signal(sig)

    def kill_tree(self) -> None:
        """SIGKILL the supervisor and every child, as a power cut of the process tree would,
        and wait until every one of them is dead."""
        pids = [pid for pid in self.child_pids() if pid]
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        wait_dead(pids)


def wait_dead(pids, timeout: float = 10.0) -> None:
    """Wait until every process in ``pids`` is dead. A dead child stays a zombie until
    init reaps it, which can take seconds here, so dead means a zombie or gone."""
    deadline = time.monotonic() + timeout
    while not all(process_dead(pid) for pid in pids):
        assert time.monotonic() < deadline, f"processes {pids} outlived SIGKILL"
        time.sleep(0.005)


def process_dead(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except (FileNotFoundError, ProcessLookupError):  # gone; gVisor says ESRCH when it goes mid-open
        return True
