"""The group APIs' bad-input scripts (``group_scenarios``) against Apache Kafka 4.4 (one
KRaft node: ``mpbroker.testing.apache_kafka``, as ``test_against_apache_kafka.py``) and
against mpbroker, their answers compared: every script is answered alike and as
``group_expected.EXPECTED`` says, except those of ``KAFKA_DIFFERENCES``, each an
``xfail(strict=True)`` naming the intended difference (and asserting what each answers,
so a change on either side shows). Also: the group APIs' version ranges served here lie
inside Kafka's. Kafka is Kafka 4's new group coordinator serving the classic protocol;
both brokers run with the defaults of group.min/max.session.timeout.ms and
offset.metadata.max.bytes, and no initial rebalance delay."""

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from mpbroker.kafka_protocol.api import SUPPORTED
from mpbroker.testing import apache_kafka
from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy, require_apache_kafka
from tests.kafka.group_expected import EXPECTED, KAFKA_ANSWERS, KAFKA_DIFFERENCES
from tests.kafka.group_scenarios import PARTITIONS, SCRIPTS, TOPIC
from tests.kafka.group_wire import GroupWire, wait_for_coordinator
from tests.kafka.test_group_bad_input import create_topic

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

GROUP_APIS = {8: "OffsetCommit", 9: "OffsetFetch", 10: "FindCoordinator", 11: "JoinGroup", 12: "Heartbeat",
              13: "LeaveGroup", 14: "SyncGroup", 15: "DescribeGroups", 16: "ListGroups", 42: "DeleteGroups"}


@pytest.fixture(scope="module")
def apache(tmp_path_factory):
    require_apache_kafka()
    with apache_kafka.ApacheKafka(tmp_path_factory.mktemp("apache-kafka-groups"), num_partitions=PARTITIONS) as kafka:
        create_topic(kafka, TOPIC)
        wait_for_coordinator(kafka)
        yield kafka


@pytest.fixture(scope="module")
def mp(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("mpbroker-groups"), num_workers=2, num_partitions=PARTITIONS,
                     group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4) as broker:
        create_topic(broker, TOPIC)
        wait_for_coordinator(broker)
        yield broker
        assert_healthy(broker)


def on_both(apache, mp, script):
    """``{"kafka": answers, "mpbroker": answers}``, the two run at once (the scripts that
    wait for timeouts wait once)."""
    with ThreadPoolExecutor(2) as pool:
        running = {name: pool.submit(script, broker, f"{script.__name__}-{time.time_ns()}", TOPIC)
                   for name, broker in (("kafka", apache), ("mpbroker", mp))}
        return {name: future.result() for name, future in running.items()}


def test_group_api_versions_lie_inside_kafkas(apache, mp):
    def ranges(broker):
        with GroupWire(broker) as wire:
            answer = wire.api_versions(2)
        return {k.api_key: (k.min_version, k.max_version) for k in answer.api_keys if k.api_key in GROUP_APIS}
    kafka, here = ranges(apache), ranges(mp)
    assert set(here) == set(GROUP_APIS) == {key for key in SUPPORTED if key in GROUP_APIS}
    assert all(kafka[key][0] <= here[key][0] and here[key][1] <= kafka[key][1] for key in here), (kafka, here)
    # Kafka 4.4 still serves JoinGroup v0-1 (KIP-896 did not remove them): the scripts use them.
    assert kafka[11][0] == 0


ALIKE = [script for script in SCRIPTS if script.__name__ not in KAFKA_DIFFERENCES]
DIFFERENT = [script for script in SCRIPTS if script.__name__ in KAFKA_DIFFERENCES]


@pytest.mark.parametrize("script", ALIKE, ids=lambda script: script.__name__)
def test_answered_alike(apache, mp, script):
    answers = on_both(apache, mp, script)
    assert answers["kafka"] == answers["mpbroker"] == EXPECTED[script.__name__]


@pytest.mark.parametrize("script", [
    pytest.param(script, marks=pytest.mark.xfail(strict=True, reason="intended difference: "
                                                 + KAFKA_DIFFERENCES[script.__name__]))
    for script in DIFFERENT], ids=lambda script: script.__name__)
def test_intended_differences(apache, mp, script):
    answers = on_both(apache, mp, script)
    assert answers["kafka"] == KAFKA_ANSWERS[script.__name__]
    assert answers["mpbroker"] == EXPECTED[script.__name__]
    assert answers["kafka"] == answers["mpbroker"]
