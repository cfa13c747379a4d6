"""Bad input and faults at the group APIs, by hand on the wire (``group_scenarios``):
unknown members and groups, stale generations, commits from non-members, metadata past
``offset.metadata.max.bytes``, session timeouts outside the broker's bounds, protocol
mismatches, MEMBER_ID_REQUIRED, the empty group id, DescribeGroups and DeleteGroups of
unknown groups, 1 MiB of protocol metadata, a member that stops heartbeating, static
members fenced, the rebalance and sync phases' timeouts. Each is answered with Kafka's
error codes (``group_expected``, found against Apache Kafka 4.4:
``test_groups_against_apache_kafka.py``), nothing crashes (checked at the end: no
restart, no traceback) and no answered commit is lost (the scripts read them back).
Where Apache Kafka runs, ``test_groups_against_apache_kafka.py`` runs the scripts answered
alike against an mpbroker set up as here and checks the same answers: here they are then
skipped (each would only be run twice), and only Kafka's intended differences run."""

import struct
import time

import pytest
from confluent_kafka.admin import AdminClient, NewTopic

from mpbroker.testing import apache_kafka
from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy
from tests.kafka.group_expected import EXPECTED, KAFKA_DIFFERENCES
from tests.kafka.group_scenarios import PARTITIONS, SCRIPTS, TOPIC
from tests.kafka.group_wire import NONE, GroupWire, wait_for_coordinator
from tests.kafka.wire import Wire, request_frame

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]


REQUEST_MAX_BYTES = 104857600  # socket.request.max.bytes, mpbroker's default as Kafka's


def create_topic(broker, topic: str = TOPIC) -> None:
    admin = AdminClient({"bootstrap.servers": broker.bootstrap})
    admin.create_topics([NewTopic(topic, PARTITIONS, 1)])[topic].result(30)
    deadline = time.monotonic() + 30
    while admin.list_topics(topic, timeout=10).topics[topic].error is not None:
        assert time.monotonic() < deadline, f"{topic} has no leaders"
        time.sleep(0.2)


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("group-bad-input"), num_workers=2, num_partitions=PARTITIONS,
                     group_initial_rebalance_delay_ms=0, offsets_topic_num_partitions=4) as broker:
        create_topic(broker)
        wait_for_coordinator(broker)
        yield broker
        assert_healthy(broker)


def kafka_compares_them() -> bool:
    """Whether ``test_groups_against_apache_kafka.py`` runs every script here too, against
    an mpbroker set up as this module's and Apache Kafka at once: Java 17+ and Kafka's jars
    in the cache (asked when the test runs: the bench tests before fetch them)."""
    return apache_kafka.available() and apache_kafka.cached()


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda script: script.__name__)
def test_answers(broker, script):
    if script.__name__ not in KAFKA_DIFFERENCES and kafka_compares_them():
        pytest.skip("answered as EXPECTED says, beside Apache Kafka's same answers, by "
                    "test_groups_against_apache_kafka.py::test_answered_alike")
    assert script(broker, f"{script.__name__}-{time.time_ns()}", TOPIC) == EXPECTED[script.__name__]


def test_a_join_past_socket_request_max_bytes_is_refused(broker):
    """A frame that says it is larger than ``socket.request.max.bytes``: the connection is
    closed before anything of it is read (the bytes are never sent), the broker goes on."""
    with Wire(broker) as wire:
        head = request_frame(11, 5, 1, b"")[4:]
        wire.send(struct.pack(">i", REQUEST_MAX_BYTES + 1) + head)
        assert wire.closed_by_broker()
    with GroupWire(broker) as w:
        assert w.join_as_new("after-the-big-one").member_id
        assert w.find_coordinator("after-the-big-one") == NONE
