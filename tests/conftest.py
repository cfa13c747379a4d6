"""Fixtures shared by every test package: a real ZooKeeper server.

``zookeeper`` is one server for the whole session; ``zk_connect`` gives each test its
own chroot on it (``127.0.0.1:<port>/t-<n>``), so tests never see each other's nodes.
A test that stops or restarts ZooKeeper takes its own server from ``zookeeper_factory``.
"""

import itertools

import pytest

from mpbroker.registry.local_zookeeper import ZooKeeperServer

_chroots = itertools.count()


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
def zookeeper_factory(tmp_path):
    servers = []

    def make(name: str = "zk", port: int | None = None) -> ZooKeeperServer:
        server = ZooKeeperServer(tmp_path / name, port).start()
        servers.append(server)
        return server

    yield make
    for server in servers:
        server.kill()
