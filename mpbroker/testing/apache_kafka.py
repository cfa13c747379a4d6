"""Apache Kafka (one KRaft node, broker and controller in one JVM) run as a child process
on this machine: the reference the modern listener is compared with
(``tests/kafka/test_against_apache_kafka.py``, ``bench/modern_bench.py``). Nothing of
Kafka is in the repository: its jars (``org.apache.kafka:kafka_2.13`` and what it depends
on) are fetched from Maven Central with ``mvn`` into a cache under the user's home
(``~/.cache/mpbroker-apache-kafka/<version>/lib``) the first time, then reused.

    if available():
        with ApacheKafka(directory) as kafka:
            ... kafka.bootstrap ... (kafka.host, kafka.kafka_port: as LocalBroker's) ...

    with ApacheKafkaCluster(directory, nodes=3) as cluster:   # three KRaft nodes, one JVM each
        ... cluster.bootstrap ... cluster.nodes[0] ...

Everything listens on 127.0.0.1 only, on ports free when it starts. Keyword properties
use ``_`` for ``.`` and override the defaults of ``server.properties``.
"""

import base64
import fcntl
import os
import re
import shutil
import signal
import socket
import struct
import subprocess
import tempfile
import time
import uuid

from mpbroker.testing import maven
from mpbroker.testing.local_broker import kill_group

DEFAULT_VERSION = "4.4.0"
CACHE_ROOT = os.path.join(os.path.expanduser("~"), ".cache", "mpbroker-apache-kafka")
# The broker logs through slf4j 1.7 (the kafka_2.13 pom leaves the binding to the
# distribution): log4j's binding is fetched beside it so that its log is not empty.
LOG4J_VERSION = "2.25.5"


class ApacheKafkaError(RuntimeError):
    """Kafka could not be fetched or started (the message says why)."""


class MavenCentralUnreachable(ApacheKafkaError):
    """``mvn`` could not reach Maven Central (and the jars are not in the cache)."""


def _java_major(java: str):
    try:
        run = subprocess.run([java, "-version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)(?:\.(\d+))?', run.stderr + run.stdout)
    if not match:
        return None
    major = int(match.group(1))
    return int(match.group(2) or 0) if major == 1 else major


def missing() -> str:
    """Why Kafka cannot run here ('' if Maven and a Java 17+ are there)."""
    if not shutil.which("java"):
        return "no java on PATH (Kafka 4 needs Java 17 or newer)"
    major = _java_major(shutil.which("java"))
    if major is None or major < 17:
        return f"java on PATH is version {major}, Kafka 4 needs 17 or newer"
    if not cached(DEFAULT_VERSION) and not shutil.which("mvn"):
        return "no mvn on PATH to fetch Kafka's jars (and they are not in the cache)"
    return ""


def available() -> bool:
    """Whether Maven and Java are there (or the jars already are): whether to try Kafka."""
    return not missing()


def lib_dir(version: str = DEFAULT_VERSION) -> str:
    return os.path.join(CACHE_ROOT, version, "lib")


def tools_dir(version: str = DEFAULT_VERSION) -> str:
    """Kafka's command-line tools (``org.apache.kafka:kafka-tools``: ProducerPerformance,
    ConsumerPerformance...) and what they depend on, beside the broker's jars."""
    return os.path.join(CACHE_ROOT, version, "tools")


def _marker(version: str, what: str) -> str:
    return os.path.join(CACHE_ROOT, version, "complete" if what == "lib" else f"{what}-complete")


def cached(version: str = DEFAULT_VERSION, what: str = "lib") -> bool:
    return os.path.exists(_marker(version, what))


def fetch_jars(version: str = DEFAULT_VERSION, timeout: float = 900.0) -> str:
    """Kafka's jars in the cache (fetched with ``mvn`` the first time); their directory.
    Raises MavenCentralUnreachable when Maven could not download, ApacheKafkaError else."""
    return _fetch(version, "lib", "kafka_2.13", timeout)


def fetch_tools(version: str = DEFAULT_VERSION, timeout: float = 900.0) -> str:
    """``kafka-tools`` and its dependencies in the cache, as ``fetch_jars``; their directory."""
    return _fetch(version, "tools", "kafka-tools", timeout)


def _fetch(version: str, what: str, artifact: str, timeout: float) -> str:
    target = os.path.join(CACHE_ROOT, version, what)
    if cached(version, what):
        return target
    root = os.path.join(CACHE_ROOT, version)
    os.makedirs(root, exist_ok=True)
    with open(os.path.join(root, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # one fetch at a time; a second waiter finds it done
        if cached(version, what):
            return target
        work = tempfile.mkdtemp(prefix="fetch-", dir=root)
        try:
            staged = os.path.join(work, what)
            try:
                run = maven.copy_dependencies(work, "apache-kafka-jars", [
                    ("org.apache.kafka", artifact, version),
                    ("org.apache.logging.log4j", "log4j-slf4j-impl", LOG4J_VERSION)], staged, timeout)
            except maven.MavenMissing as e:
                raise ApacheKafkaError(str(e)) from e
            except maven.MavenTimedOut as e:
                raise MavenCentralUnreachable(f"fetching Kafka {version}: {e}") from e
            if run.returncode != 0 or not os.path.exists(os.path.join(staged, f"{artifact}-{version}.jar")):
                kind = MavenCentralUnreachable if run.unreachable else ApacheKafkaError
                raise kind(f"mvn could not fetch org.apache.kafka:{artifact}:{version} "
                           f"(exit {run.returncode}):\n{run.output[-4000:]}")
            shutil.rmtree(target, ignore_errors=True)
            os.rename(staged, target)
            with open(_marker(version, what), "w") as f:
                f.write("\n".join(sorted(os.listdir(target))) + "\n")
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return target


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


LOG4J2 = """status = warn
appender.out.type = Console
appender.out.name = out
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = out
logger.kafka.name = kafka
logger.kafka.level = INFO
logger.state.name = state.change.logger
logger.state.level = WARN
"""


class ApacheKafka:
    """One Kafka node (KRaft: process.roles=broker,controller) in ``directory``. ``heap`` is
    -Xmx; ``initial_heap`` -Xms (None: the JVM's own). ``node_id`` and ``expected_brokers``
    are for a node of an ``ApacheKafkaCluster``, which sets its quorum."""

    def __init__(self, directory, version: str = DEFAULT_VERSION, heap: str = "512m",
                 cluster_id: str | None = None, initial_heap: str | None = None, node_id: int = 1,
                 expected_brokers: int = 1, **properties):
        self.directory = str(directory)
        self.cluster_id = cluster_id or _cluster_id()
        self.version = version
        self.heap = heap
        self.initial_heap = initial_heap
        self.node_id = node_id
        self.expected_brokers = expected_brokers
        os.makedirs(self.directory, exist_ok=True)
        self.log_dir = os.path.join(self.directory, "kraft-logs")
        self.config_path = os.path.join(self.directory, "server.properties")
        self.output_path = os.path.join(self.directory, "kafka.log")
        self.host = "127.0.0.1"
        self.kafka_port = free_port()
        self.controller_port = free_port()
        self.properties = {
            "process.roles": "broker,controller",
            "node.id": str(node_id),
            "listeners": f"PLAINTEXT://{self.host}:{self.kafka_port},CONTROLLER://{self.host}:{self.controller_port}",
            "advertised.listeners": f"PLAINTEXT://{self.host}:{self.kafka_port}",
            "controller.listener.names": "CONTROLLER",
            "inter.broker.listener.name": "PLAINTEXT",
            "listener.security.protocol.map": "PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT",
            "controller.quorum.bootstrap.servers": f"{self.host}:{self.controller_port}",
            "log.dirs": self.log_dir,
            "num.partitions": "1",
            "auto.create.topics.enable": "true",
            "offsets.topic.replication.factor": "1",
            "offsets.topic.num.partitions": "1",
            "transaction.state.log.replication.factor": "1",
            "transaction.state.log.min.isr": "1",
            "transaction.state.log.num.partitions": "1",
            "share.coordinator.state.topic.replication.factor": "1",
            "share.coordinator.state.topic.min.isr": "1",
            "group.initial.rebalance.delay.ms": "0",
        }
        self.properties.update({key.replace("_", "."): str(value) for key, value in properties.items()})
        self.process = None

    @property
    def bootstrap(self) -> str:
        return f"{self.host}:{self.kafka_port}"

    def _java(self, main: str, *args, **kwargs):
        initial = [f"-Xms{self.initial_heap}"] if self.initial_heap else []
        return [shutil.which("java") or "java", f"-Xmx{self.heap}", *initial, "-XX:+UseG1GC", "-Djava.awt.headless=true",
                f"-Dlog4j2.configurationFile={os.path.join(self.directory, 'log4j2.properties')}",
                "-cp", os.path.join(self.lib, "*"), main, *args]

    def format_storage(self) -> None:
        """``kafka-storage format`` of the log dir (once: a formatted dir is kept). The cluster id
        is passed as ``--cluster-id=ID``: a random id starts with ``-`` once in 64, which the
        tool's argument parser takes for an option when it is a separate word. A node with a
        static quorum (``controller.quorum.voters``, a cluster's) is formatted without
        ``--standalone``: its voters are in its configuration."""
        self.lib = fetch_jars(self.version)
        with open(self.config_path, "w") as f:
            f.writelines(f"{key}={value}\n" for key, value in self.properties.items())
        with open(os.path.join(self.directory, "log4j2.properties"), "w") as f:
            f.write(LOG4J2)
        if os.path.exists(os.path.join(self.log_dir, "meta.properties")):
            return
        quorum = [] if "controller.quorum.voters" in self.properties else ["--standalone"]
        run = subprocess.run(self._java("kafka.tools.StorageTool", "format", f"--cluster-id={self.cluster_id}",
                                        "-c", self.config_path, *quorum),
                             capture_output=True, text=True, timeout=120)
        if run.returncode != 0:
            raise ApacheKafkaError(f"kafka-storage format failed ({run.returncode}):\n"
                                   f"{(run.stdout + run.stderr)[-4000:]}")

    def start(self, timeout: float = 120.0) -> "ApacheKafka":
        self.launch()
        return self.wait_ready(timeout)

    def launch(self) -> None:
        """Format (once) and start the JVM; ``wait_ready`` waits for it."""
        self.format_storage()
        with open(self.output_path, "a") as output:
            self.process = subprocess.Popen(self._java("kafka.Kafka", self.config_path), stdout=output,
                                            stderr=subprocess.STDOUT, start_new_session=True, cwd=self.directory)

    def wait_ready(self, timeout: float = 120.0) -> "ApacheKafka":
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise ApacheKafkaError(f"Kafka exited with {self.process.returncode}:\n{self.output()[-6000:]}")
            if self.ready():
                return self
            time.sleep(0.2)
        self.close()
        raise ApacheKafkaError(f"Kafka did not answer in {timeout}s:\n{self.output()[-6000:]}")

    def ready(self) -> bool:
        """ApiVersions answered without error and Metadata lists this node's cluster's brokers."""
        return answers(self.host, self.kafka_port, self.expected_brokers)

    def output(self) -> str:
        try:
            with open(self.output_path, errors="replace") as f:
                return f.read()
        except FileNotFoundError:
            return ""

    def stop(self, timeout: float = 30.0):
        """SIGTERM (Kafka's controlled shutdown), then SIGKILL to its group after ``timeout``."""
        if self.process is None or self.process.poll() is not None:
            return self.process.returncode if self.process else 0
        self.process.send_signal(signal.SIGTERM)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            self.close()
            return self.process.returncode

    def close(self) -> None:
        kill_group(self.process)

    def __enter__(self) -> "ApacheKafka":
        return self.start() if self.process is None else self

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.close()


class ApacheKafkaCluster:
    """``nodes`` Kafka nodes, each its own JVM, log dir and ports, each broker and controller
    (KRaft combined mode) with a static quorum of all of them (``controller.quorum.voters``,
    every node formatted with the same cluster id). Internal topics are replicated to
    min(3, nodes). Ready once every node's Metadata lists every broker."""

    def __init__(self, directory, nodes: int = 3, version: str = DEFAULT_VERSION, heap: str = "512m",
                 initial_heap: str | None = None, **properties):
        self.directory = str(directory)
        cluster_id = _cluster_id()
        replicas = str(min(3, nodes))
        internal = {"offsets_topic_replication_factor": replicas, "transaction_state_log_replication_factor": replicas,
                    "transaction_state_log_min_isr": "1", "share_coordinator_state_topic_replication_factor": replicas}
        self.nodes = [ApacheKafka(os.path.join(self.directory, f"node-{i}"), version, heap, cluster_id, initial_heap,
                                  node_id=i, expected_brokers=nodes, **{**internal, **properties})
                      for i in range(1, nodes + 1)]
        voters = ",".join(f"{node.node_id}@{node.host}:{node.controller_port}" for node in self.nodes)
        for node in self.nodes:
            node.properties.pop("controller.quorum.bootstrap.servers", None)
            node.properties["controller.quorum.voters"] = voters
        self.version = version
        self.cluster_id = cluster_id

    @property
    def bootstrap(self) -> str:
        return ",".join(node.bootstrap for node in self.nodes)

    @property
    def processes(self) -> list:
        return [node.process for node in self.nodes]

    def start(self, timeout: float = 180.0) -> "ApacheKafkaCluster":
        """Every node started before any is waited for (a quorum needs a majority up)."""
        try:
            for node in self.nodes:
                node.launch()
            deadline = time.monotonic() + timeout
            for node in self.nodes:
                node.wait_ready(max(1.0, deadline - time.monotonic()))
        except BaseException:
            self.close()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to every node at once (controlled shutdown), then each is waited for."""
        for node in self.nodes:
            if node.process is not None and node.process.poll() is None:
                node.process.send_signal(signal.SIGTERM)
        for node in self.nodes:
            node.stop(timeout)

    def close(self) -> None:
        for node in self.nodes:
            node.close()

    def __enter__(self) -> "ApacheKafkaCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.close()


def answers(host: str, port: int, brokers: int = 1) -> bool:
    """Whether a Kafka listener (Apache Kafka's or mpbroker's ``kafka.port``) answers
    ApiVersions without error and lists at least ``brokers`` brokers in Metadata."""
    try:
        with socket.create_connection((host, port), timeout=2) as s:
            error = struct.unpack_from(">h", _call(s, 18, 0, 1, b""))[0]
            if error != 0:
                return False
            return struct.unpack_from(">i", _call(s, 3, 1, 2, struct.pack(">i", 0)))[0] >= brokers
    except (OSError, struct.error):
        return False


def _cluster_id() -> str:
    """A KRaft cluster id: 16 random bytes, URL-safe base64 without padding (22 chars)."""
    return base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")


def _call(sock, api_key: int, version: int, correlation: int, body: bytes) -> bytes:
    """One request on a raw socket (header v1, client id "mpbroker-ready"); the answer after
    its correlation id."""
    client = b"mpbroker-ready"
    payload = struct.pack(">hhih", api_key, version, correlation, len(client)) + client + body
    sock.sendall(struct.pack(">i", len(payload)) + payload)
    (size,) = struct.unpack(">i", _read(sock, 4))
    answer = _read(sock, size)
    if struct.unpack_from(">i", answer)[0] != correlation:
        raise OSError("correlation id mismatch")
    return answer[4:]


def _read(sock, n: int) -> bytes:
    chunks = []
    while n:
        chunk = sock.recv(n)
        if not chunk:
            raise OSError("closed")
        chunks.append(chunk)
        n -= len(chunk)
    return b"".join(chunks)
