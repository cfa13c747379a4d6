"""A real ZooKeeper server on this machine, for the tests and the benchmarks: Debian's
``zookeeper`` package run as a standalone server on a free loopback port, with its
own data directory (``apt-get install zookeeper``; Java is needed).

``host`` is the address it listens on (``clientPortAddress``, default 127.0.0.1) and
``wrapper`` a command prefix it runs under (e.g. ``["ip", "netns", "exec", "<ns>"]``
to run it inside a network namespace whose address ``host`` is: the tests' network
faults, ``tests/faults/netcluster/``). Readiness is asked from this process at
``host:port``, so the address must be reachable from here.

No fsync of ZooKeeper's transaction log (``forceSync=no``): a session is created
without waiting for a disk that brokers keep busy; data survives a restart of the
server process, not of the machine. Short ticks (200 ms) let sessions time out in well under a second when a test asks
for it (the server allows 400 ms to 60 s). ``stop``/``start`` keep the data
directory, so a restarted server still has its persistent nodes; ``kill`` is SIGKILL.
"""

import os
import signal
import socket
import subprocess
import time

ZOOKEEPER_JAR = "/usr/share/java/zookeeper.jar"
MAIN_CLASS = "org.apache.zookeeper.server.ZooKeeperServerMain"
TICK_MS = 200


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def ruok(port: int, timeout: float = 1.0, host: str = "127.0.0.1") -> bool:
    try:
        with socket.create_connection((host, port), timeout=timeout) as sock:
            sock.sendall(b"ruok")
            return sock.recv(16) == b"imok"
    except OSError:
        return False


class ZooKeeperServer:
    def __init__(self, directory, port: int | None = None, host: str = "127.0.0.1", wrapper=None):
        if not os.path.exists(ZOOKEEPER_JAR):
            raise RuntimeError(f"{ZOOKEEPER_JAR} is missing: install Debian's zookeeper package "
                               "(apt-get install zookeeper; tests/run.sh does)")
        self.directory = str(directory)
        self.port = port or free_port()
        self.host = host
        self.wrapper = list(wrapper or [])
        self.data_dir = os.path.join(self.directory, "data")
        self.config_path = os.path.join(self.directory, "zoo.cfg")
        self.log_path = os.path.join(self.directory, "zookeeper.log")
        self.process = None
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self.config_path, "w") as f:
            f.write(f"tickTime={TICK_MS}\ndataDir={self.data_dir}\nclientPort={self.port}\n"
                    f"clientPortAddress={self.host}\nadmin.enableServer=false\n"
                    "4lw.commands.whitelist=ruok,srvr,cons\nmaxSessionTimeout=60000\n"
                    "maxClientCnxns=0\nforceSync=no\n")

    @property
    def hosts(self) -> str:
        return f"{self.host}:{self.port}"

    def connect_string(self, chroot: str = "") -> str:
        return self.hosts + chroot

    def start(self, timeout: float = 30.0) -> "ZooKeeperServer":
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(
                [*self.wrapper, "java", "-Xmx256m", "-XX:+UseSerialGC", "-Dzookeeper.admin.enableServer=false",
                 f"-Dzookeeper.log.dir={self.directory}", "-cp", ZOOKEEPER_JAR, MAIN_CLASS, self.config_path],
                stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"ZooKeeper exited with {self.process.returncode}: {self.output()}")
            if ruok(self.port, host=self.host):
                return self
            time.sleep(0.05)
        raise RuntimeError(f"ZooKeeper did not answer on port {self.port} in {timeout}s: {self.output()}")

    def output(self) -> str:
        try:
            with open(self.log_path) as f:
                return f.read()[-4000:]
        except FileNotFoundError:
            return ""

    def stop(self, sig: int = signal.SIGTERM) -> None:
        if self.process is None or self.process.poll() is not None:
            return
        try:
            os.killpg(self.process.pid, sig)
        except ProcessLookupError:
            pass
        self.process.wait(20)
        deadline = time.monotonic() + 10
        while ruok(self.port, 0.2, self.host) and time.monotonic() < deadline:
            time.sleep(0.05)

    def kill(self) -> None:
        self.stop(signal.SIGKILL)

    def restart(self) -> None:
        self.stop()
        self.start()

    def __enter__(self) -> "ZooKeeperServer":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.kill()
