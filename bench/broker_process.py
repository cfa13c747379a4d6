"""Run a real broker (``mpbroker serve``) for a benchmark: temporary log.dir, chosen
settings, ready when its acceptor is up, stopped (gracefully) at the end."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from mpbroker.ctl import NotRunning, call


class BenchBroker:
    def __init__(self, base_dir=None, **properties):
        self.directory = tempfile.mkdtemp(prefix="mpbroker-bench-", dir=base_dir)
        self.log_dir = os.path.join(self.directory, "logs")
        settings = {"port": "0", "hostname": "127.0.0.1", "log.dir": self.log_dir}
        settings.update({key.replace("_", "."): str(value) for key, value in properties.items()})
        self.config_path = os.path.join(self.directory, "server.properties")
        with open(self.config_path, "w") as f:
            f.writelines(f"{key}={value}\n" for key, value in settings.items())
        self.socket_path = os.path.join(self.log_dir, "mpbroker.sock")
        self.process = None
        self.port = None

    def __enter__(self):
        self.process = subprocess.Popen([sys.executable, "-m", "mpbroker.cli", "serve", self.config_path],
                                        stdout=subprocess.DEVNULL, stderr=open(os.path.join(self.directory, "broker.log"), "w"))
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                status = call(self.socket_path, "status", timeout=2)
                if status["acceptor"]["state"] == "up":
                    self.port = status["port"]
                    return self
            except (NotRunning, OSError, ValueError):
                pass
            time.sleep(0.05)
        raise RuntimeError("broker did not start")

    def status(self) -> dict:
        return call(self.socket_path, "status")

    def disk_bytes(self) -> int:
        total = 0
        for root, _, files in os.walk(self.log_dir):
            total += sum(os.path.getsize(os.path.join(root, name)) for name in files if name.endswith(".kafka"))
        return total

    def __exit__(self, *exc):
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(120)
            except subprocess.TimeoutExpired:
                self.process.kill()
        shutil.rmtree(self.directory, ignore_errors=True)
