"""The consumer connector's pure pieces: the range assignment (Kafka 0.7's formula), the
subscriptions and their filters, the ZooKeeper layout's values and names, the settings."""

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mpbroker.clients.groups.rebalance import assign_range
from mpbroker.clients.groups.settings import ConsumerSettings
from mpbroker.clients.groups.topic_filter import Blacklist, Whitelist
from mpbroker.registry import layout


@given(st.integers(0, 60), st.integers(1, 15), st.integers(1, 3))
def test_range_assignment_is_disjoint_complete_and_balanced(partition_count, consumers, streams_each):
    partitions = [layout.PartitionId(b, p) for b in range(3) for p in range(partition_count // 3 + 1)][:partition_count]
    stream_ids = [f"g_c{c}-{i}" for c in range(consumers) for i in range(streams_each)]
    assignment = assign_range(partitions, stream_ids)
    taken = [p for parts in assignment.values() for p in parts]
    assert sorted(taken) == sorted(partitions)  # complete and disjoint
    sizes = [len(parts) for parts in assignment.values()]
    assert max(sizes) - min(sizes) <= 1
    ordered = sorted(stream_ids)  # the first `extra` streams take one more
    assert sizes == [len(assignment[s]) for s in ordered] and sizes == sorted(sizes, reverse=True)


def test_range_assignment_follows_the_0_7_formula():
    partitions = [layout.PartitionId(b, p) for b in (1, 2) for p in range(5)]  # 10, sorted numerically
    assignment = assign_range(reversed(partitions), ["c-2", "c-0", "c-1"])
    assert assignment["c-0"] == partitions[0:4]  # n=3, extra=1
    assert assignment["c-1"] == partitions[4:7]
    assert assignment["c-2"] == partitions[7:10]
    assert assign_range([layout.PartitionId(10, 0), layout.PartitionId(9, 1)], ["a-0"])["a-0"][0].broker_id == 9


def test_subscriptions_round_trip_and_filters_match_whole_names():
    static = layout.Subscription({"clicks": 2, "views": 1})
    assert layout.parse_subscription(static.value()) == static
    white = Whitelist("logs-.*,audit").subscription(3)
    assert white.value() == b"*3*logs-.*,audit"  # Kafka 0.7.1+'s form: the raw text, no JSON
    parsed = layout.parse_subscription(white.value())
    assert parsed.streams_for("logs-a") == 3 and parsed.streams_for("audit") == 3
    assert parsed.streams_for("xlogs-a") == 0 and parsed.streams_for("auditx") == 0
    black = layout.parse_subscription(Blacklist("secret.*").subscription(1).value())
    assert black.streams_for("secret-x") == 0 and black.streams_for("clicks") == 1
    for bad in (b"", b"[]", b'{"../x": 1}', b'{"t": 0}', b'{"*1*(": 1}', b"\xff"):
        with pytest.raises(layout.LayoutError):
            layout.parse_subscription(bad)


def test_layout_values_and_names():
    info = layout.parse_broker(3, b"host-1:2:10.0.0.1:9092")  # a creator id may hold ':'
    assert info == layout.BrokerInfo(3, "host-1:2", "10.0.0.1", 9092)
    with pytest.raises(layout.LayoutError):
        layout.parse_broker(3, b"nohostport")
    assert layout.split_zk_connect("a:1,b:2/kafka/prod/") == ("a:1,b:2", "/kafka/prod")
    assert layout.split_zk_connect("a:1") == ("a:1", "")
    with pytest.raises(layout.LayoutError):
        layout.split_zk_connect("a:1/x/../y")
    consumer_id = layout.new_consumer_id("group.1", "my host")
    assert consumer_id.startswith("group.1_my-host-") and layout.check_consumer_id(consumer_id)
    with pytest.raises(layout.LayoutError):
        layout.check_group("../etc")
    assert layout.offset_path("g", "t", layout.PartitionId(1, 2)) == "/consumers/g/offsets/t/1-2"
    with pytest.raises(ValueError):
        ConsumerSettings.from_properties({"zk.connect": "x:1"})  # no group
    with pytest.raises(ValueError, match="unknown consumer setting"):
        ConsumerSettings.from_properties({"zk.connect": "x:1", "groupid": "g", "fetch.sise": 1})
