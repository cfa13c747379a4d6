"""A cluster of mpbroker on this machine: a real ZooKeeper (``local_zookeeper``) and
``nodes`` brokers (``LocalBroker``, ``brokerid`` 1..n, each its own directory, log dir
and ports) registered in it under a chroot of their own. The counterpart of
``apache_kafka.ApacheKafkaCluster`` for the benchmarks that set the two side by side:

    with LocalCluster(directory, nodes=3, default_replication_factor=3) as cluster:
        ... cluster.bootstrap ... cluster.pids() (every process: ZooKeeper's JVM and
        each broker's supervisor, acceptor and workers) ...

Each broker's Kafka port is chosen when the cluster is made, so that a client can poll
it while the cluster starts. The brokers are launched side by side once ZooKeeper
answers; the cluster is ready when each says it is (registered) and each one's Metadata
lists every broker. ``close`` kills whatever is left (every process group). Keyword
properties are every broker's, as LocalBroker's (``_`` for ``.``).
"""

import os
import subprocess
import time

from mpbroker.testing.apache_kafka import answers
from mpbroker.testing.local_broker import LocalBroker
from mpbroker.testing.local_zookeeper import ZooKeeperServer, free_port

CHROOT = "/mpbroker-cluster"


class LocalCluster:
    def __init__(self, directory, nodes: int = 3, **properties):
        self.directory = str(directory)
        self.zookeeper = ZooKeeperServer(os.path.join(self.directory, "zookeeper"))
        settings = {"enable_zookeeper": "true", "zk_connect": self.zookeeper.connect_string(CHROOT), **properties}
        self.brokers = [LocalBroker(os.path.join(self.directory, f"b{node}"), brokerid=node,
                                    kafka_port=free_port(), **settings)
                        for node in range(1, nodes + 1)]

    @property
    def host(self) -> str:
        return self.brokers[0].host

    @property
    def kafka_port(self) -> int:
        """The first broker's Kafka port (known before start: what to poll for start-up)."""
        return int(self.brokers[0].properties["kafka.port"])

    @property
    def bootstrap(self) -> str:
        return ",".join(f"{broker.host}:{broker.properties['kafka.port']}" for broker in self.brokers)

    @property
    def processes(self) -> list:
        """ZooKeeper's process and each broker's supervisor (the roots of their process trees)."""
        return [self.zookeeper.process, *(broker.process for broker in self.brokers)]

    def pids(self) -> dict:
        """Every process of the cluster by role: ``zookeeper``, and ``b<id> supervisor``,
        ``b<id> acceptor``, ``b<id> registrar``, ``b<id> worker <slot>`` from each broker's status."""
        pids = {"zookeeper": self.zookeeper.process.pid}
        for broker in self.brokers:
            name = f"b{broker.properties['brokerid']}"
            pids[f"{name} supervisor"] = broker.process.pid
            status = broker.try_status() or {}
            for role in ("acceptor", "registrar"):
                if (status.get(role) or {}).get("pid"):
                    pids[f"{name} {role}"] = status[role]["pid"]
            for slot, worker in enumerate(status.get("workers", [])):
                if worker.get("pid"):
                    pids[f"{name} worker {slot}"] = worker["pid"]
        return pids

    def start(self, timeout: float = 120.0) -> "LocalCluster":
        """ZooKeeper, then every broker launched before any is waited for."""
        deadline = time.monotonic() + timeout
        try:
            self.zookeeper.start(timeout=timeout)
            for broker in self.brokers:
                broker.launch()
            for broker in self.brokers:
                broker.wait_ready(max(1.0, deadline - time.monotonic()))
            for broker in self.brokers:
                while not answers(broker.host, broker.kafka_port, len(self.brokers)):
                    if time.monotonic() > deadline:
                        raise RuntimeError(f"broker {broker.properties['brokerid']}'s Metadata did not list "
                                           f"{len(self.brokers)} brokers in {timeout}s:\n{broker.output()[-4000:]}")
                    time.sleep(0.02)
        except BaseException:
            self.close()
            raise
        return self

    def stop(self, timeout: float = 30.0) -> None:
        """SIGTERM to every broker (a graceful stop), each waited for, then ZooKeeper."""
        for broker in self.brokers:
            if broker.process is not None and broker.process.poll() is None:
                broker.process.terminate()
        try:
            for broker in self.brokers:
                if broker.process is not None:
                    try:
                        broker.process.wait(timeout)
                    except subprocess.TimeoutExpired:
                        broker.close()
        finally:
            self.zookeeper.stop()

    def close(self) -> None:
        for broker in self.brokers:
            broker.close()
        self.zookeeper.kill()

    def __enter__(self) -> "LocalCluster":
        return self.start()

    def __exit__(self, *exc) -> None:
        try:
            self.stop()
        finally:
            self.close()
