"""Fixtures for the client tests: the real-broker fixtures of tests/broker, plus a broker
on a fixed port (a restarted broker with ``port=0`` would come back on another port)."""

import pytest

from tests.broker.conftest import broker, broker_factory  # noqa: F401

from .helpers import free_port


@pytest.fixture
def fixed_port_broker(broker_factory):  # noqa: F811
    return broker_factory("fixed", port=free_port())
