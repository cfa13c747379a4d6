"""A broker run as a child process on this machine: for the demo, the benchmarks and
the tests. Writes a configuration file into a directory, starts ``mpbroker serve`` on
it, waits until it is ready (the status says so through the control socket), and stops it.

    with LocalBroker(directory, num_workers=2) as broker:
        ... broker.port ... broker.kafka_port (modern clients: broker.bootstrap) ...

Keyword properties use ``_`` for ``.`` (``log_file_size=300`` is ``log.file.size=300``).
``env`` adds environment variables for the broker process (e.g. an LD_PRELOAD shim).
``wrapper`` is a command prefix the broker runs under (e.g. ``["ip", "netns", "exec",
"<ns>"]`` to run it inside a network namespace, with ``hostname`` that namespace's
address: ``tests/faults/netcluster/``); the control socket is a unix socket in the log
directory, so ``status()`` works from here whatever network the broker is in.
"""

import os
import signal
import subprocess
import sys
import time

from mpbroker.control_client import NotRunning, call

DEFAULTS = {"port": "0", "kafka.port": "0", "hostname": "127.0.0.1"}


class LocalBroker:
    def __init__(self, directory, env=None, wrapper=None, **properties):
        self.directory = str(directory)
        self.env = dict(env or {})
        self.wrapper = list(wrapper or [])
        os.makedirs(self.directory, exist_ok=True)
        self.log_dir = os.path.join(self.directory, "logs")
        self.properties = {**DEFAULTS, "log.dir": self.log_dir}
        self.properties.update({key.replace("_", "."): str(value) for key, value in properties.items()})
        self.config_path = os.path.join(self.directory, "server.properties")
        self.socket_path = os.path.join(self.log_dir, "mpbroker.sock")
        self.output_path = os.path.join(self.directory, "broker.log")
        self.process = None
        self.port = None
        self.kafka_port = None  # the modern Kafka protocol's port (None: kafka.port=-1)
        self.write_config()

    def write_config(self) -> None:
        with open(self.config_path, "w") as f:
            f.writelines(f"{key}={value}\n" for key, value in self.properties.items())

    def start(self, timeout: float = 30.0) -> "LocalBroker":
        """Start ``mpbroker serve`` and return once it is ready: it accepts connections
        and, with ZooKeeper, is registered (or gave up waiting: see mpbroker.supervisor)."""
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Start ``mpbroker serve`` without waiting (``wait_ready`` waits): a cluster's
        brokers come up side by side."""
        with open(self.output_path, "a") as output:
            self.process = subprocess.Popen(
                [*self.wrapper, sys.executable, "-m", "mpbroker", "serve", self.config_path],
                stdout=output, stderr=subprocess.STDOUT, start_new_session=True,
                env={**os.environ, **self.env} if self.env else None,
            )

    def wait_ready(self, timeout: float = 30.0) -> "LocalBroker":
        """Return once the launched broker says it is ready (its status); raise if it
        exits first or is not ready in ``timeout`` seconds."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"broker exited with {self.process.returncode}:\n{self.output()}")
            status = self.try_status()
            if status and status.get("ready"):
                self.port = status["port"]
                self.kafka_port = status.get("kafka_port")
                return self
            time.sleep(0.05)
        raise RuntimeError(f"broker did not become ready in {timeout}s:\n{self.output()}")

    @property
    def bootstrap(self) -> str:
        """``host:kafka_port``: what modern Kafka clients are given as bootstrap servers."""
        return f"{self.host}:{self.kafka_port}"

    @property
    def host(self) -> str:
        """The address clients reach the broker at (``hostname``; 127.0.0.1 if it binds all)."""
        return self.properties.get("hostname") or "127.0.0.1"

    def try_status(self):
        """``mpbroker-ctl status`` as a dict, or None if the broker does not answer."""
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

    def stop(self, sig: int = signal.SIGTERM, timeout: float = 60.0) -> int:
        """Signal the supervisor (TERM: graceful) and return its exit code."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(sig)
        return self.process.wait(timeout)

    def close(self) -> None:
        """Make sure nothing of it is left running (SIGKILL to the whole process group)."""
        kill_group(self.process)

    def __enter__(self) -> "LocalBroker":
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.close()


def kill_group(process) -> None:
    """SIGKILL a child started with ``start_new_session`` and its whole process group, if
    it still runs, and reap it (a test's server: the broker here, Apache Kafka)."""
    if process is not None and process.poll() is None:
        try:
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(10)
