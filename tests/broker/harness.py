"""A real broker process tree for tests: ``mpbroker serve`` in a subprocess, with a
configuration written to a temporary directory, controlled through its control
socket and signals."""

import os
import signal
import subprocess
import sys
import time

from mpbroker.ctl import NotRunning, call

DEFAULTS = {
    "port": "0",
    "hostname": "127.0.0.1",
    "num.workers": "2",
    "num.partitions": "4",
    "log.flush.interval": "10000",
    "log.default.flush.scheduler.interval.ms": "20",
    "log.default.flush.interval.ms": "20",
    "worker.heartbeat.timeout.ms": "10000",
}


class BrokerProcess:
    def __init__(self, directory, **properties):
        self.directory = str(directory)
        self.log_dir = os.path.join(self.directory, "logs")
        self.properties = {**DEFAULTS, "log.dir": self.log_dir}
        self.properties.update({key.replace("_", "."): str(value) for key, value in properties.items()})
        self.config_path = os.path.join(self.directory, "server.properties")
        self.socket_path = os.path.join(self.log_dir, "mpbroker.sock")
        self.output_path = os.path.join(self.directory, "broker.log")
        self.process = None
        self.port = None
        self.write_config()

    def write_config(self) -> None:
        with open(self.config_path, "w") as f:
            f.writelines(f"{key}={value}\n" for key, value in self.properties.items())

    def start(self, timeout: float = 30.0) -> "BrokerProcess":
        output = open(self.output_path, "a")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "mpbroker.cli", "serve", self.config_path],
            stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
        )
        output.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.output()}")
            status = self.try_status()
            if status and status["acceptor"]["state"] == "up":
                self.port = status["port"]
                return self
            time.sleep(0.05)
        raise RuntimeError(f"broker did not become ready in {timeout}s:\n{self.output()}")

    def try_status(self):
        try:
            return call(self.socket_path, "status", timeout=2)
        except (NotRunning, OSError, ValueError):
            return None

    def status(self) -> dict:
        return call(self.socket_path, "status", timeout=5)

    def output(self) -> str:
        try:
            with open(self.output_path) as f:
                return f.read()
        except FileNotFoundError:
            return ""

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

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(sig)
        return self.process.wait(timeout)

    def kill_tree(self) -> None:
        """SIGKILL the supervisor and every child, as a power cut of the process tree would."""
        pids = [pid for pid in self.child_pids() if pid]
        os.killpg(self.process.pid, signal.SIGKILL)
        self.process.wait(10)
        deadline = time.monotonic() + 10
        for pid in pids:
            while time.monotonic() < deadline:
                try:
                    os.kill(pid, 0)
                except ProcessLookupError:
                    break
                time.sleep(0.02)

    def close(self) -> None:
        if self.process is not None and self.process.poll() is None:
            try:
                os.killpg(self.process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.process.wait(10)
