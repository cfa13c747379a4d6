"""Topic-level settings in ZooKeeper (``registry.topic_config_nodes``, Kafka's
``/config/topics/<topic>``) and their creation with the assignment
(``topic_admin.create_topic``), on a real ZooKeeper: one transaction, so a topic exists
with its settings or not at all; an existing topic leaves them untouched."""

import json

import pytest

from mpbroker.registry import layout, topic_admin, topic_config_nodes
from mpbroker.registry.layout import LayoutError
from mpbroker.registry.replication import PlacementError


def test_the_value_is_kafkas_layout():
    value = topic_config_nodes.config_value({"segment.bytes": "2048", "retention.ms": 86400000})
    assert json.loads(value) == {"version": 1, "config": {"retention.ms": "86400000", "segment.bytes": "2048"}}
    assert topic_config_nodes.parse_config("t", value) == {"retention.ms": "86400000", "segment.bytes": "2048"}
    assert topic_config_nodes.parse_config("t", b"") == {}
    assert topic_config_nodes.config_path("t") == "/config/topics/t"
    assert topic_config_nodes.topic_of("/config/topics/t") == "t"
    assert topic_config_nodes.topic_of("/brokers/topics/t") is None


@pytest.mark.parametrize("value", [b"{", b"[]", b'{"version":1}', b'{"config":[]}', b'{"config":{"a":true}}',
                                   b'{"config":{"a":{}}}'])
def test_a_value_that_is_not_settings_is_refused(value):
    with pytest.raises(LayoutError, match="/config/topics/t"):
        topic_config_nodes.parse_config("t", value)


def register(client, *ids):
    for broker in ids:
        client.create(layout.broker_path(broker), f"b{broker}:127.0.0.1:{9090 + broker}".encode(), ephemeral=True,
                      makepath=True)


def test_settings_are_written_with_the_assignment(zk_client):
    register(zk_client, 1, 2)
    topic_admin.create_topic(zk_client, "t", 2, 2, configs={"retention.ms": "60000"})
    assert zk_client.exists(layout.topic_path("t"))
    assert topic_admin.topic_config(zk_client, "t") == {"retention.ms": "60000"}
    # Without settings the node is written empty, as Kafka wrote it.
    topic_admin.create_topic(zk_client, "plain", 1, 1)
    assert json.loads(zk_client.get("/config/topics/plain")[0]) == {"version": 1, "config": {}}
    assert topic_admin.topic_config(zk_client, "plain") == {}
    assert topic_admin.topic_config(zk_client, "never-made") == {}


def test_an_existing_topic_keeps_its_settings_and_a_leftover_node_is_replaced(zk_client):
    register(zk_client, 1)
    topic_admin.create_topic(zk_client, "t", 1, 1, configs={"retention.ms": "60000"})
    with pytest.raises(topic_admin.TopicExists):
        topic_admin.create_topic(zk_client, "t", 1, 1, configs={"retention.ms": "1"})
    assert topic_admin.topic_config(zk_client, "t") == {"retention.ms": "60000"}  # the transaction wrote nothing
    # A settings node without a topic (left by hand, or by an older tool) is replaced.
    zk_client.create("/config/topics/old", topic_config_nodes.config_value({"segment.bytes": "5"}))
    topic_admin.create_topic(zk_client, "old", 1, 1, configs={"flush.ms": "10"})
    assert topic_admin.topic_config(zk_client, "old") == {"flush.ms": "10"}


def test_too_few_brokers_writes_neither_node(zk_client):
    register(zk_client, 1)
    with pytest.raises(PlacementError):
        topic_admin.create_topic(zk_client, "t", 1, 2, configs={"retention.ms": "60000"})
    assert not zk_client.exists(layout.topic_path("t")) and not zk_client.exists("/config/topics/t")
