"""A ZooKeeper node and three broker nodes on a ``Network``: their start, their
processes' faults (SIGKILL, SIGSTOP/SIGCONT of everything in a node, a broker's
restart) and their stop, plus the ZooKeeper reads and wire calls a test makes from
the root namespace.

Owns the servers, not the network: faults between nodes are ``network``'s. Each
server binds its node's address (ZooKeeper's ``clientPortAddress``, the broker's
``hostname``) on fixed ports (0.7 and modern; every node has its own address), so a restarted broker
comes back at the same address; brokers connect to ZooKeeper at the ZooKeeper node's
address, and register theirs, so followers fetch from their leaders across the bridge.
The brokers' control sockets are unix sockets in their log directories, so their
status is read from here whatever the network does.

With a ``shim_library`` (``tests/faults/power_cut``), every broker runs under the
power-cut shim, its log directory watched by a ``PowerCutRig`` of its own, and
``power_cut`` kills a broker and leaves its log directory as a power cut would have
(what no fsync covered is dropped).

Every broker runs on a date of its own (``clock``: libfaketime, one offset file per
broker, the real date until ``step_clock``), so a schedule can step one broker's date
forward or back and back again at the heal; ``clock_offset`` is what it is now.
ZooKeeper runs on the real date (``clock`` says why).

The wire and ZooKeeper helpers are ``tests/replication/cluster.py``'s, given the
brokers' hosts. Settings as in the replication tests: ``zk.sessiontimeout.ms`` 4000,
``min.insync.replicas`` 2, ``replica.lag.time.max.ms`` 1500; the modern listener on
``KAFKA_PORT`` and ``group.initial.rebalance.delay.ms`` 0.
"""

import os
import signal

from mpbroker.registry import layout, topic_admin
from mpbroker.registry.replication import NO_LEADER
from mpbroker.registry.zk_client import close_client, start_client
from mpbroker.testing.local_zookeeper import ZooKeeperServer
from tests.broker.harness import BrokerProcess, wait_dead
from tests.faults.power_cut import CutMode, PowerCutRig
from tests.polling import wait_for
from tests.replication import cluster as replicated

from .clock import FakeClock, build_sleep_fix, check_available
from .network import Network, Node

ZOOKEEPER = "zk"  # the ZooKeeper node's name; broker nodes are b<id>
ZOOKEEPER_PORT = 2181
BROKER_PORT = 9092
KAFKA_PORT = 9093  # the modern listener, fixed so a restarted broker comes back where clients look
BROKER_IDS = replicated.BROKER_IDS
SESSION_MS = replicated.SESSION_MS
LAG_MS = 1500
BROKER_SETTINGS = {"enable_zookeeper": "true", "zk_sessiontimeout_ms": SESSION_MS, "min_insync_replicas": 2,
                   "replica_lag_time_max_ms": LAG_MS, "port": BROKER_PORT, "kafka_port": KAFKA_PORT,
                   # the modern group's members start reading at once, not 3 s per member later (6 s of a
                   # 30 s schedule lost with two; Kafka's tests set 0 too)
                   "group_initial_rebalance_delay_ms": 0}


class NetCluster:
    def __init__(self, network: Network, directory, broker_ids=BROKER_IDS, shim_library=None, **properties):
        self.network = network
        self.shim_library = shim_library
        self.directory = str(directory)
        self.broker_ids = tuple(broker_ids)
        self.properties = {**BROKER_SETTINGS, **properties}
        self.zookeeper = None
        self.brokers = {}  # id -> BrokerProcess
        self.nodes = {}  # ZOOKEEPER or broker id -> Node
        self.client = None  # kazoo, in the root namespace
        self.rigs = {}  # broker id -> PowerCutRig, with a shim_library
        self.clocks = {}  # broker id -> FakeClock

    # --- life cycle -----------------------------------------------------------------

    def start(self) -> "NetCluster":
        check_available()
        sleep_fix = build_sleep_fix(os.path.join(self.directory, "clock"))
        try:
            node = self.nodes[ZOOKEEPER] = self.network.add_node(ZOOKEEPER)
            self.zookeeper = ZooKeeperServer(os.path.join(self.directory, ZOOKEEPER), ZOOKEEPER_PORT,
                                             host=node.address, wrapper=node.wrapper).start()
            for broker_id in self.broker_ids:
                node = self.nodes[broker_id] = self.network.add_node(f"b{broker_id}")
                directory = os.path.join(self.directory, f"b{broker_id}")
                os.makedirs(directory, exist_ok=True)
                environment = None
                if self.shim_library is not None:
                    rig = self.rigs[broker_id] = PowerCutRig(os.path.join(directory, "logs"), directory + "-power-cut",
                                                             self.shim_library)
                    environment = rig.environment()
                clock = self.clocks[broker_id] = FakeClock(directory + "-clock", sleep_fix)
                environment = clock.environment(environment)
                self.brokers[broker_id] = BrokerProcess(
                    directory, env=environment, wrapper=node.wrapper, hostname=node.address, brokerid=broker_id,
                    zk_connect=self.zookeeper.hosts, **self.properties)
            for broker in self.brokers.values():
                broker.start()
            self.client = start_client(self.zookeeper.hosts, 6000, 30_000)
        except BaseException:
            self.close()
            raise
        return self

    def close(self) -> None:
        """SIGKILL every server (paused ones included), then end the client."""
        for member in [*self.brokers, ZOOKEEPER]:
            if member in self.nodes:
                self.kill(member)
        if self.client is not None:
            try:
                close_client(self.client)
            except Exception:  # noqa: BLE001 - its server is gone: nothing to end
                pass
            self.client = None

    def __enter__(self) -> "NetCluster":
        return self.start() if self.client is None else self

    def __exit__(self, *exc) -> None:
        self.close()

    # --- processes ------------------------------------------------------------------

    def node(self, member) -> Node:
        """The node of ``ZOOKEEPER`` or of a broker id."""
        return self.nodes[member]

    def broker_node(self, broker_id: int) -> Node:
        return self.nodes[broker_id]

    def kill(self, member) -> None:
        """SIGKILL every process in the member's node at once (``Node.kill``) and wait
        until they are dead."""
        pids = self.nodes[member].kill()
        server = self.zookeeper if member == ZOOKEEPER else self.brokers.get(member)
        if server is not None and server.process is not None:
            server.process.wait(10)
        wait_dead(pids)

    def power_cut(self, broker_id: int, rng, mode: CutMode = CutMode.RANDOM):
        """Kill the broker and drop what no fsync covered in its log directory (the
        cluster needs a ``shim_library``): the model's ``CutReport``."""
        if broker_id not in self.rigs:
            raise RuntimeError("power cuts need the cluster started with a shim_library")
        self.kill(broker_id)
        return self.rigs[broker_id].cut(mode, rng)

    def pause(self, member) -> list:
        """SIGSTOP every process in the member's node; the pids stopped."""
        return self.nodes[member].signal(signal.SIGSTOP)

    def resume(self, member) -> list:
        return self.nodes[member].signal(signal.SIGCONT)

    def restart(self, member) -> None:
        """Kill the member if it runs, and start it again (a broker: until it is ready)."""
        server = self.zookeeper if member == ZOOKEEPER else self.brokers[member]
        if server.process is not None and server.process.poll() is None:
            self.kill(member)
        server.start()

    def step_clock(self, member, offset_s: float) -> None:
        """The broker's date becomes the real one plus ``offset_s`` (0: back to real time)."""
        self.clocks[member].step(offset_s)

    def clock_offset(self, member) -> float:
        return self.clocks[member].offset_s

    def log_tails(self, lines: int = 30) -> str:
        """The end of every broker's log, for a failure's message."""
        parts = []
        for broker_id, broker in self.brokers.items():
            tail = "\n".join(broker.output().splitlines()[-lines:])
            parts.append(f"--- broker {broker_id} ({self.nodes[broker_id].address}) ---\n{tail}")
        return "\n".join(parts)

    # --- ZooKeeper's view -----------------------------------------------------------

    def registered(self) -> set:
        """The broker ids registered in ZooKeeper (live sessions)."""
        return {int(child) for child in self.client.get_children(layout.BROKER_IDS)}

    def create_topic(self, topic: str, partitions: int = 1, replicas: int = 3, record_batches: bool = False) -> dict:
        return topic_admin.create_topic(self.client, topic, partitions, replicas, record_batches=record_batches)

    def state(self, topic: str, partition: int = 0):
        return replicated.state(self.client, topic, partition)

    def leader(self, topic: str, partition: int = 0):
        """The leader's id, or None while there is none (or no state yet)."""
        found = self.state(topic, partition)
        return None if found is None or found.leader == NO_LEADER else found.leader

    def isr(self, topic: str, partition: int = 0) -> tuple:
        found = self.state(topic, partition)
        return () if found is None else tuple(found.isr)

    def wait_isr(self, topic: str, members, partition: int = 0, timeout: float = 30.0) -> tuple:
        """Wait until the ISR is exactly ``members``."""
        wanted = set(members)
        wait_for(lambda: set(self.isr(topic, partition)) == wanted, timeout,
                 f"ISR {sorted(wanted)} of {topic}-{partition} (now {self.isr(topic, partition)})",
                 detail=self.log_tails)
        return self.isr(topic, partition)

    # --- the wire, from the root namespace -------------------------------------------

    def produce(self, broker_id: int, topic: str, payloads, partition: int = 0, durability: int = 2,
                timeout: float = 10.0):
        """One produce to this broker: its ProduceAck."""
        broker = self.brokers[broker_id]
        return replicated.produce(BROKER_PORT, topic, partition, payloads, durability, timeout, broker.host)

    def produce_until_acked(self, topic: str, payloads, partition: int = 0, timeout: float = 30.0,
                            attempt_timeout: float = 3.0):
        """Produce (durability 2) to the current leader until it acknowledges: ``(leader, ack)``."""
        return replicated.produce_until_acked(self.client, self.brokers, topic, partition, payloads, timeout,
                                              attempt_timeout=attempt_timeout)

    def check_read_back(self, topic: str, acked: list, partition: int = 0) -> list:
        """Every acknowledged payload reads back once, in order, from the current leader."""
        leader, address = replicated.leader_address(self.client, self.brokers, topic, partition)
        assert address is not None, f"no reachable leader of {topic}-{partition} (leader {leader})"
        return replicated.check_read_back(address[1], topic, acked, partition, address[0])

    def wait_identical(self, topic: str, partition: int = 0, timeout: float = 30.0) -> bytes:
        """Wait until every broker's log of the partition holds the same bytes."""
        return replicated.wait_identical(list(self.brokers.values()), topic, partition, timeout)
