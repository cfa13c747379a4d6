"""Fixtures of the modern-listener client tests: one real broker per test module
(``LocalBroker``, two workers, two partitions a topic, ``kafka.port=0``), checked at
the end of the module: every process up with zero restarts and no traceback logged."""

import itertools

import pytest

from mpbroker.testing import apache_kafka
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


def require_apache_kafka() -> None:
    """Skip the test, with the reason, unless Apache Kafka can run here: Java and Maven
    present, and its jars fetched (cached under ~/.cache/mpbroker-apache-kafka)."""
    why = apache_kafka.missing()
    if why:
        pytest.skip(f"Apache Kafka cannot run here: {why}")
    try:
        apache_kafka.fetch_jars()
    except apache_kafka.MavenCentralUnreachable as e:
        pytest.skip(f"Maven Central does not answer: {str(e)[:500]}")
