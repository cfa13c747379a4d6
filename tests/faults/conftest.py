"""The fault-injection suite (issue 9): real brokers, real files, real ZooKeeper; every
test here is marked ``faults`` so it can run on its own (``pytest -m faults``) and is
part of CI like the rest. The broker fixtures are tests/conftest.py's."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/faults/" in str(item.fspath).replace("\\", "/"):
            item.add_marker(pytest.mark.faults)
