"""The modern consumer groups on the Prometheus endpoint, against a real broker
(metrics.enable, kafka.port) and a real confluent-kafka group: the group's state and
members, its committed offsets and its lag (log end - committed) once it read and
committed everything, the lag growing with what it has not read, and the group going
Empty when its member leaves."""

import time
import urllib.request

import pytest
from confluent_kafka import Consumer, KafkaError, Producer
from prometheus_client.parser import text_string_to_metric_families

from mpbroker.testing.local_broker import LocalBroker
from tests.kafka.conftest import assert_healthy
from tests.polling import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]

PARTITIONS = 4
TIMEOUT_S = 30.0


@pytest.fixture(scope="module")
def broker(tmp_path_factory):
    with LocalBroker(tmp_path_factory.mktemp("group-metrics"), num_workers=2, num_partitions=PARTITIONS,
                     group_initial_rebalance_delay_ms=0, metrics_enable="true", metrics_port=0,
                     metrics_host="127.0.0.1") as broker:
        wait_for(lambda: broker.status()["metrics"]["state"] == "up", timeout=TIMEOUT_S, what="the exporter")
        yield broker
        assert_healthy(broker)


def scrape(broker) -> dict:
    port = broker.status()["metrics"]["port"]
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as answer:
        text = answer.read().decode()
    return {(sample.name, tuple(sorted(sample.labels.items()))): sample.value
            for family in text_string_to_metric_families(text) for sample in family.samples}


def group_samples(samples: dict, name: str, group: str) -> dict:
    """``{(topic, partition): value}`` of a per-partition family for ``group``."""
    found = {}
    for (sample, labels), value in samples.items():
        labels = dict(labels)
        if sample == name and labels.get("group") == group:
            found[(labels["topic"], int(labels["partition"]))] = value
    return found


def produce(broker, topic, count, prefix) -> dict:
    """``{partition: log end}`` after ``count`` messages (the last offset + 1 of each partition)."""
    ends = {}

    def delivered(error, message):
        assert error is None, error
        ends[message.partition()] = max(ends.get(message.partition(), 0), message.offset() + 1)
    producer = Producer({"bootstrap.servers": broker.bootstrap})
    for i in range(count):
        producer.produce(topic, value=f"{prefix}-{i}".encode(), partition=i % PARTITIONS, on_delivery=delivered)
    assert producer.flush(TIMEOUT_S) == 0
    return ends


def read(consumer, want: int) -> int:
    got = 0
    deadline = time.monotonic() + TIMEOUT_S
    while got < want and time.monotonic() < deadline:
        message = consumer.poll(0.2)
        if message is not None and not message.error():
            got += 1
        elif message is not None:
            assert message.error().code() == KafkaError._PARTITION_EOF, message.error()
    return got


def test_a_groups_state_members_commits_and_lag_are_scraped(broker):
    topic, group = "metered-topic", "metered-group"
    ends = produce(broker, topic, 40, "first")
    consumer = Consumer({"bootstrap.servers": broker.bootstrap, "group.id": group, "auto.offset.reset": "earliest",
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    try:
        assert read(consumer, 40) == 40
        consumer.commit(asynchronous=False)
        expected_commits = {(topic, partition): float(end) for partition, end in ends.items()}

        def caught_up():
            samples = scrape(broker)
            return samples if group_samples(samples, "mpbroker_consumer_group_committed_offset", group) == \
                expected_commits else None
        samples = wait_for(caught_up, timeout=TIMEOUT_S, what="the commits on the endpoint")
        assert samples[("mpbroker_consumer_group_state", (("group", group), ("state", "Stable")))] == 1
        assert samples[("mpbroker_consumer_group_members", (("group", group),))] == 1
        assert samples[("mpbroker_consumer_groups", ())] >= 1
        assert samples[("mpbroker_consumer_groups_omitted", ())] == 0
        assert group_samples(samples, "mpbroker_consumer_group_lag", group) == \
            {key: 0.0 for key in expected_commits}
        assert samples[("mpbroker_consumer_group_lag_sum", (("group", group),))] == 0

        new_ends = produce(broker, topic, 8, "second")  # not read yet
        behind = {(topic, partition): float(end - ends[partition]) for partition, end in new_ends.items()}
        samples = wait_for(lambda: (lambda s: s if group_samples(s, "mpbroker_consumer_group_lag", group) == behind
                                    else None)(scrape(broker)), timeout=TIMEOUT_S, what="the lag grown")
        assert samples[("mpbroker_consumer_group_lag_sum", (("group", group),))] == sum(behind.values())
        for partition, end in new_ends.items():
            key = (("partition", str(partition)), ("topic", topic))
            assert samples[("mpbroker_partition_log_end_offset", key)] == end, "the same end the partitions show"
    finally:
        consumer.close()
    wait_for(lambda: scrape(broker).get(("mpbroker_consumer_group_state", (("group", group), ("state", "Empty")))),
             timeout=TIMEOUT_S, what="the group Empty once its member left")
    assert scrape(broker)[("mpbroker_consumer_group_members", (("group", group),))] == 0
