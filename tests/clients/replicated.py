"""Helpers for the client tests of replicated topics: three real brokers registered in a
real ZooKeeper (their controller elects the leaders), a topic created with
``topic_admin.create_topic``, and what the controller wrote. No mocks.

Until the brokers serve replicated partitions themselves, a leader stores a produce to
its partition like a 0.7 topic's (the log is created on the first produce), so a test
tells where data went by the broker's log directory or its OFFSETS answer."""

import os

from mpbroker.clients.core.zk_registry import read_brokers
from mpbroker.registry import replication, topic_admin
from mpbroker.registry.zk_client import close_client, start_client
from tests.clients.helpers import wait_for

SESSION_TIMEOUT_MS = 4000  # a SIGKILLed broker's registration goes after this: the controller then elects


class Cluster:
    def __init__(self, broker_factory, zk_connect: str, ids=(1, 2, 3)):
        self.zk_connect = zk_connect
        self.brokers = {i: broker_factory(f"b{i}", enable_zookeeper="true", zk_connect=zk_connect, brokerid=i,
                                          zk_sessiontimeout_ms=SESSION_TIMEOUT_MS) for i in ids}
        self.client = start_client(zk_connect, 6000, 30_000)
        wait_for(lambda: sorted(read_brokers(self.client)) == sorted(ids), 20, what="the brokers registered")

    def create(self, topic: str, partitions: int, replication_factor: int = 2) -> dict:
        """Create a replicated topic and wait until the controller elected every partition's
        leader; returns the assignment."""
        assignment = topic_admin.create_topic(self.client, topic, partitions, replication_factor)
        wait_for(lambda: all(s is not None and s.leader >= 0 for s in self.states(topic, partitions)), 20,
                 what=f"leaders of {topic}")
        return assignment

    def states(self, topic: str, partitions: int) -> list:
        result = []
        for partition in range(partitions):
            path = replication.partition_state_path(topic, partition)
            if not self.client.exists(path):
                result.append(None)
                continue
            result.append(replication.parse_partition_state(topic, partition, self.client.get(path)[0]))
        return result

    def leader(self, topic: str, partition: int) -> int:
        return self.states(topic, partition + 1)[partition].leader

    def kill_leader(self, topic: str, partition: int) -> int:
        """SIGKILL the broker leading ``partition`` and wait until the controller elected
        another; returns the dead broker's id."""
        old = self.leader(topic, partition)
        self.brokers[old].kill_tree()
        wait_for(lambda: self.leader(topic, partition) not in (old, replication.NO_LEADER), 30,
                 what=f"a new leader of {topic}-{partition}")
        return old

    def has_log(self, broker_id: int, topic: str, partition: int) -> bool:
        """Whether broker ``broker_id`` stored anything of ``topic``-``partition``."""
        directory = os.path.join(self.brokers[broker_id].log_dir, f"{topic}-{partition}")
        return os.path.isdir(directory) and any(os.path.getsize(os.path.join(directory, name))
                                                for name in os.listdir(directory))

    def close(self) -> None:
        close_client(self.client)
