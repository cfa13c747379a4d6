"""Fixtures shared by every test package: a real ZooKeeper server and real brokers.

``zookeeper`` is one server for the whole session; ``zk_connect`` gives each test its
own chroot on it (``127.0.0.1:<port>/t-<n>``), so tests never see each other's nodes;
``zk_client`` is a kazoo client of that chroot, its session ended at the end of the test.
A test that stops or restarts ZooKeeper takes its own server from ``zookeeper_factory``.
``broker_factory`` runs ``mpbroker serve`` process trees (``tests/broker/harness.py``),
closed at the end of the test; ``broker`` is one of them; ``fixed_port_broker`` one on a
fixed port (a restarted broker with ``port=0`` would come back on another port).

Every Spark driver the tests start (in this process or in a command they run) is a
short-lived JVM: ``SPARK_SUBMIT_OPTS`` (read only by Spark's launcher) runs it with the
C1 compiler alone and the serial collector, which halves the CPU a small load's JVM takes
(``mpbroker.testing.spark_cluster.QUICK_JVM_OPTIONS``).
"""

import itertools
import os

import pytest

from mpbroker.registry.zk_client import close_client, start_client
from mpbroker.testing.local_zookeeper import ZooKeeperServer, free_port
from mpbroker.testing.spark_cluster import QUICK_JVM_OPTIONS
from tests.broker.harness import BrokerProcess

_chroots = itertools.count()
os.environ.setdefault("SPARK_SUBMIT_OPTS", QUICK_JVM_OPTIONS)


@pytest.fixture(scope="session")
def zookeeper(tmp_path_factory):
    server = ZooKeeperServer(tmp_path_factory.mktemp("zookeeper")).start()
    yield server
    server.kill()


@pytest.fixture
def zk_connect(zookeeper, request):
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:80]
    return zookeeper.connect_string(f"/t{next(_chroots)}-{name}")


@pytest.fixture
def zk_client(zk_connect):
    client = start_client(zk_connect, 6000, 30_000)
    yield client
    close_client(client)


@pytest.fixture
def zookeeper_factory(tmp_path):
    servers = []

    def make(name: str = "zk", port: int | None = None) -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path / name, port).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.kill()


@pytest.fixture
def broker_factory(tmp_path):
    brokers = []

    def make(name: str = "broker", start: bool = True, **properties) -> BrokerProcess:
        directory = tmp_path / name
        directory.mkdir(exist_ok=True)
        broker = BrokerProcess(directory, **properties)
        brokers.append(broker)
        return broker.start() if start else broker

    yield make
    for broker in brokers:
        broker.close()


@pytest.fixture
def broker(broker_factory):
    return broker_factory()


@pytest.fixture
def fixed_port_broker(broker_factory):
    return broker_factory("fixed", port=free_port())
