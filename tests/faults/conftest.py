"""The fault-injection suite (issue 9): real brokers, real files, real ZooKeeper; every
test here is marked ``faults`` so it can run on its own (``pytest -m faults``) and is
part of CI like the rest. Broker fixtures come from ``tests/broker``."""

import pytest

from tests.broker.conftest import broker, broker_factory  # noqa: F401  (fixtures)


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/faults/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.faults)
