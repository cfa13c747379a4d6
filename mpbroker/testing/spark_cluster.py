"""A Spark standalone cluster run as child processes on this machine: a Master and N
Workers started with the installed PySpark's ``bin/spark-class`` (``SPARK_HOME`` is the
pyspark package directory; nothing else of Spark is needed), for the tests that run the
Spark loader on a cluster rather than ``local[N]`` (``tests/spark_loader/test_spark_cluster.py``).

    with SparkStandaloneCluster(directory, workers=2) as cluster:
        ... mpbroker-spark-load --master cluster.master_url ...

Everything listens on 127.0.0.1 (``SPARK_LOCAL_IP``), on ports free when it starts; the
master's REST submission server (a fixed port, 6066) is off. Each daemon has its own
directory under ``directory`` (``master/``, ``worker-1/``, ...): its log (``*.log``), the
worker's ``work/`` (an executor's ``stdout``/``stderr`` under ``work/<app id>/<n>/``) and
``local/`` (Spark's scratch space). The executors run the Python the driver names: PySpark
sends the driver's ``PYSPARK_PYTHON`` with every task, and ``mpbroker.cli.spark_load.
spark_session`` sets it to the command's interpreter for ``spark://`` masters. The workers
get ``PYSPARK_PYTHON=python`` (default ``sys.executable``, the venv that has mpbroker
installed) as well, for whatever reads it there.

Ready once the master's JSON (``http://127.0.0.1:<web UI>/json/``) lists every worker
ALIVE. On exit every daemon's process group gets SIGTERM, then SIGKILL; then so does every
process started under them that is still there (executors; PySpark's Python daemons,
which make a process group of their own): each daemon has ``MPBROKER_SPARK_CLUSTER`` in
its environment, which they inherit, so they are found wherever they were reparented.
``kill_worker`` is a lost machine: a worker and everything under it, SIGKILLed.
"""

import importlib.util
import json
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.request

from mpbroker.testing.local_zookeeper import free_port

HOST = "127.0.0.1"
MASTER_CLASS = "org.apache.spark.deploy.master.Master"
WORKER_CLASS = "org.apache.spark.deploy.worker.Worker"
MARK_ENV = "MPBROKER_SPARK_CLUSTER"  # <cluster>/<daemon>: finds every process a daemon started
# For short-lived test JVMs (``env={"JAVA_TOOL_OPTIONS": QUICK_JVM_OPTIONS}``, which the
# executors inherit from their worker): the C1 compiler only and the serial collector.
# Measured on 2 busy cores: the JVM CPU time of a whole small load (``local[2]``) falls
# from 17 s to 9.5 s.
QUICK_JVM_OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


class SparkClusterError(RuntimeError):
    """The cluster could not be started (the message holds the daemons' logs)."""


def spark_home() -> str:
    """The installed pyspark package's directory: its ``bin/`` and ``jars/`` are a Spark."""
    spec = importlib.util.find_spec("pyspark")
    if spec is None or not spec.submodule_search_locations:
        raise SparkClusterError("pyspark is not installed (pip install -e '.[spark]')")
    return list(spec.submodule_search_locations)[0]


def marked_processes(mark: str) -> list:
    """Pids of the processes whose environment holds ``MARK_ENV=<mark>`` (or a value under
    ``<mark>/``): a daemon, its executors and their Python workers inherit it, wherever in
    the process tree they were moved."""
    wanted = f"{MARK_ENV}={mark}".encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/environ", "rb") as f:
                variables = f.read().split(b"\0")
        except OSError:  # ended meanwhile, or not ours
            continue
        if any(v == wanted or v.startswith(wanted + b"/") for v in variables):
            found.append(int(entry))
    return sorted(found)


def kill_marked(mark: str, grace: float = 0.0) -> None:
    """Wait up to ``grace`` seconds for the processes marked ``mark`` to end, then SIGKILL
    the rest and wait until they are gone."""
    deadline = time.monotonic() + grace
    while marked_processes(mark) and time.monotonic() < deadline:
        time.sleep(0.05)
    deadline = time.monotonic() + 10
    while (left := marked_processes(mark)) and time.monotonic() < deadline:
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


class Daemon:
    """One Master or Worker JVM (``spark-class`` execs it) in a process group of its own;
    it and everything it starts carry ``MARK_ENV=<mark>``."""

    def __init__(self, name: str, directory: str, command: list, env: dict, mark: str):
        self.name = name
        self.directory = directory
        self.command = command
        self.env = {**env, MARK_ENV: mark}
        self.mark = mark
        self.log_path = os.path.join(directory, f"{name}.log")
        self.process = None

    def start(self) -> None:
        os.makedirs(self.directory, exist_ok=True)
        with open(self.log_path, "a") as log:
            self.process = subprocess.Popen(self.command, stdout=log, stderr=subprocess.STDOUT, cwd=self.directory,
                                            env=self.env, start_new_session=True)

    def running(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def signal_group(self, sig: int) -> None:
        if self.running():
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                pass

    def log(self, tail: int = 4000) -> str:
        try:
            with open(self.log_path, errors="replace") as f:
                return f.read()[-tail:]
        except FileNotFoundError:
            return ""


class SparkStandaloneCluster:
    """A Master and ``workers`` Workers of ``cores_per_worker`` cores and ``memory`` each
    (what their executors may take; Spark's default executor is 1g). ``env`` adds
    environment variables for the daemons and so for their executors."""

    def __init__(self, directory, workers: int = 2, cores_per_worker: int = 1, memory: str = "1g",
                 python: str = sys.executable, daemon_memory: str = "512m", env: dict | None = None):
        self.directory = os.path.abspath(str(directory))
        self.python = python
        self.extra_env = dict(env or {})
        self.mark = f"{self.directory}#{secrets.token_hex(4)}"
        self.port = free_port()
        self.web_ui_port = free_port()
        self.master_url = f"spark://{HOST}:{self.port}"
        self.web_ui_url = f"http://{HOST}:{self.web_ui_port}"
        spark_class = os.path.join(spark_home(), "bin", "spark-class")
        env = self._env(daemon_memory)
        master_dir = os.path.join(self.directory, "master")
        self.master = Daemon("master", master_dir, [
            spark_class, MASTER_CLASS, "--host", HOST, "--port", str(self.port), "--webui-port", str(self.web_ui_port)],
            {**env, "SPARK_LOCAL_DIRS": os.path.join(master_dir, "local")}, f"{self.mark}/master")
        self.workers = []
        for n in range(1, workers + 1):
            worker_dir = os.path.join(self.directory, f"worker-{n}")
            self.workers.append(Daemon(f"worker-{n}", worker_dir, [
                spark_class, WORKER_CLASS, "--host", HOST, "--port", "0", "--webui-port", "0",
                "--cores", str(cores_per_worker), "--memory", memory,
                "--work-dir", os.path.join(worker_dir, "work"), self.master_url],
                {**env, "SPARK_LOCAL_DIRS": os.path.join(worker_dir, "local")}, f"{self.mark}/worker-{n}"))

    def _env(self, daemon_memory: str) -> dict:
        env = {key: value for key, value in os.environ.items()
               if not key.startswith(("PYSPARK_", "SPARK_"))}  # nothing of a driver's or another Spark's
        conf_dir = os.path.join(self.directory, "conf")  # empty: no spark-defaults.conf from elsewhere
        os.makedirs(conf_dir, exist_ok=True)
        env.update(SPARK_HOME=spark_home(), SPARK_CONF_DIR=conf_dir, SPARK_LOCAL_IP=HOST,
                   SPARK_DAEMON_MEMORY=daemon_memory, SPARK_MASTER_OPTS="-Dspark.master.rest.enabled=false",
                   PYSPARK_PYTHON=self.python)
        env.update(self.extra_env)
        return env

    @property
    def daemons(self) -> list:
        return [self.master, *self.workers]

    def work_dir(self, worker: int) -> str:
        """Worker ``worker``'s (1-based) work directory: ``<app id>/<executor id>/stderr``."""
        return os.path.join(self.workers[worker - 1].directory, "work")

    def start(self, timeout: float = 90.0) -> "SparkStandaloneCluster":
        """Start the master, then the workers, and return once the master lists them all ALIVE."""
        try:
            self.master.start()
            self._wait(lambda: self.state() is not None, timeout, "the master's web UI")
            for worker in self.workers:
                worker.start()
            self._wait(lambda: len(self.alive_workers()) == len(self.workers), timeout,
                       f"{len(self.workers)} workers ALIVE")
        except BaseException:
            self.stop()
            raise
        return self

    def _wait(self, predicate, timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            for daemon in self.daemons:
                if daemon.process is not None and not daemon.running():
                    raise SparkClusterError(f"{daemon.name} exited with {daemon.process.returncode} "
                                            f"while waiting for {what}:\n{daemon.log()}")
            if predicate():
                return
            time.sleep(0.1)
        raise SparkClusterError(f"timed out after {timeout}s waiting for {what}:\n"
                                + "\n".join(f"--- {d.name}\n{d.log(2000)}" for d in self.daemons))

    def state(self):
        """The master's JSON (workers, active and completed applications); None if it does not answer."""
        try:
            with urllib.request.urlopen(f"{self.web_ui_url}/json/", timeout=5) as answer:
                return json.load(answer)
        except (OSError, ValueError):
            return None

    def alive_workers(self) -> list:
        state = self.state() or {}
        return [worker for worker in state.get("workers", []) if worker.get("state") == "ALIVE"]

    def kill_worker(self, worker: int) -> None:
        """SIGKILL worker ``worker`` (1-based), its executors and their Python workers: a lost machine."""
        daemon = self.workers[worker - 1]
        daemon.signal_group(signal.SIGKILL)
        if daemon.process is not None:
            daemon.process.wait(30)
        kill_marked(daemon.mark)

    def left_running(self) -> list:
        """Pids of the processes the cluster started that still run (none once stopped)."""
        return marked_processes(self.mark)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM every daemon's group (workers first), SIGKILL after ``timeout``; then
        whatever ran under them and is still there (SIGKILL after a few seconds)."""
        for daemon in [*self.workers, self.master]:
            daemon.signal_group(signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for daemon in self.daemons:
            if daemon.process is None:
                continue
            try:
                daemon.process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                daemon.signal_group(signal.SIGKILL)
                daemon.process.wait(10)
        kill_marked(self.mark, grace=5.0)

    def __enter__(self) -> "SparkStandaloneCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()
