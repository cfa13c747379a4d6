"""Fixtures that run real brokers (``mpbroker serve`` process trees) for tests."""

import pytest

from .harness import BrokerProcess


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
