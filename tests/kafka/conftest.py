"""Fixtures of the modern-listener client tests: one real broker per test module
(``LocalBroker``, two workers, two partitions a topic, ``kafka.port=0``), checked at
the end of the module: every process up with zero restarts and no traceback logged."""

import itertools

import pytest

from mpbroker.testing.local_broker import LocalBroker

_names = itertools.count()
TIMEOUT_S = 15.0


def assert_healthy(broker: LocalBroker) -> None:
    status = broker.status()
    processes = [*status["workers"], status["acceptor"]]
    assert all(p["state"] == "up" and p["restarts"] == 0 for p in processes), processes
    assert "Traceback" not in broker.output(), broker.output()[-4000:]


@pytest.fixture(scope="module")
def kafka_broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("kafka"), num_workers=2, num_partitions=2) as broker:
        yield broker
        assert_healthy(broker)


@pytest.fixture
def topic(request):
    """A topic name of this test's own (the broker creates it on first use)."""
    name = "".join(c if c.isalnum() else "-" for c in request.node.name)[:60].strip("-")
    return f"{name}-{next(_names)}"
