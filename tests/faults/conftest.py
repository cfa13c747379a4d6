"""The fault-injection suite (issue 9): real brokers, real files, real ZooKeeper; every
test here is marked ``faults`` so it can run on its own (``pytest -m faults``) and is
part of CI like the rest. The broker fixtures are tests/conftest.py's; ``network`` and
``netcluster`` (tests/faults/netcluster/) are a private network of namespaces and a
ZooKeeper node with three broker nodes on it, for faults between servers."""

import pytest

from tests.faults.netcluster import NetCluster, start_network_or_skip
from tests.faults.power_cut import NoCompiler, build_shim


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/faults/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.faults)


@pytest.fixture
def network():
    """A started private network (fails under CI, skips elsewhere, if this machine
    cannot make network namespaces); removed at the end of the test."""
    with start_network_or_skip() as started:
        yield started


@pytest.fixture
def netcluster(network, tmp_path):
    """ZooKeeper and brokers 1-3, each in a node of ``network``; killed at the end."""
    with NetCluster(network, tmp_path / "netcluster") as cluster:
        yield cluster


@pytest.fixture(scope="session")
def shim_library(tmp_path_factory):
    """The power-cut recording shim (tests/faults/power_cut/shim.c), built once."""
    try:
        return build_shim(str(tmp_path_factory.mktemp("power-cut-shim")))
    except NoCompiler as exc:  # gcc is part of every machine we run on: never pass silently without it
        pytest.fail(f"the power-cut shim cannot be built: {exc}")
