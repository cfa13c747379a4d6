"""The ``mpbroker`` source's options, offsets and budget shares, without Spark: what a
user writes is parsed or refused with the option's name, offsets come back from Spark's
checkpoint (string keys, any order) as the same values, and a read limit is shared over
the partitions to the unit."""

import json

import pytest

from mpbroker.spark_loader.source.offsets import EARLIEST, LATEST, normalized, parse_node, parse_offsets
from mpbroker.spark_loader.source.options import parse_options
from mpbroker.spark_loader.source.planner import shares


def test_options_with_spark_kafka_names_in_any_case():
    options = parse_options({"ZooKeeper": "zk:2181/mpbroker", "SUBSCRIBE": "a, b,a", "startingoffsets": "latest",
                             "maxBytesPerTrigger": "1000", "includeHeaders": "TRUE", "failOnDataLoss": "false"},
                            streaming=True)
    assert options.topics == ("a", "b") and options.starting == LATEST and options.max_bytes_per_trigger == 1000
    assert options.include_headers and not options.fail_on_data_loss
    options = parse_options({"brokers": "1:h:9092,2:h:9093", "assign": json.dumps({"t": [0, "2-1"]}),
                             "startingOffsets": json.dumps({"t": {"2-1": 77, "0": -2}})}, streaming=False)
    assert options.assign == (("t", "0"), ("t", "2-1"))
    assert options.starting == {"t": {"0": EARLIEST, "2-1": 77}}


@pytest.mark.parametrize("options, streaming, message", [
    ({"subscribe": "t"}, True, "exactly one of the options 'brokers'"),
    ({"brokers": "h:1", "zookeeper": "z", "subscribe": "t"}, True, "exactly one of the options 'brokers'"),
    ({"brokers": "h:notaport", "subscribe": "t"}, True, "bad broker"),
    ({"brokers": "h:1", "subscribe": "bad/name"}, True, "topic"),
    ({"zookeeper": "z", "subscribePattern": "(unclosed"}, True, "not a regular expression"),
    ({"brokers": "h:1", "subscribe": "t", "endingOffsets": "latest"}, True, "'endingOffsets' is for batch queries"),
    ({"brokers": "h:1", "subscribe": "t", "startingOffsets": "latest"}, False, "empty batch query"),
    ({"brokers": "h:1", "subscribe": "t", "endingOffsets": "earliest"}, False, "cannot be earliest"),
    ({"brokers": "h:1", "subscribe": "t", "startingOffsets": json.dumps({"t": {"0": -3}})}, True, "byte offset"),
    ({"brokers": "h:1", "subscribe": "t", "startingOffsets": json.dumps({"t": {"0": "5"}})}, True, "byte offset"),
    ({"brokers": "h:1", "subscribe": "t", "startingOffsets": "[]"}, True, "earliest, latest or JSON"),
    ({"brokers": "h:1", "assign": "{\"t\": [\"x-1\"]}"}, True, "neither <partition>"),
    ({"brokers": "h:1", "subscribe": "t", "startingTimestamp": "5", "startingOffsets": "earliest"}, True, "not both"),
    ({"brokers": "h:1", "subscribe": "t", "minPartitions": "0"}, True, "'minPartitions' must be an integer >= 1"),
])
def test_bad_options_name_the_option(options, streaming, message):
    with pytest.raises(ValueError, match=message):
        parse_options(options, streaming=streaming)


def test_offsets_from_the_checkpoint_are_the_same_values_in_one_order():
    stored = {"b": {"10": 5}, "a": {"2-0": 1, "1-3": 2, "1-10": 3}}
    assert list(normalized(json.loads(json.dumps(stored))).items()) == [
        ("a", {"1-3": 2, "1-10": 3, "2-0": 1}), ("b", {"10": 5})]
    assert parse_node("3-7") == (3, 7) and parse_node("7") == (-1, 7)
    with pytest.raises(ValueError):
        parse_offsets('{"t": {"1-": 0}}', "startingOffsets")


def test_a_budget_is_shared_by_backlog_to_the_unit():
    assert shares(100, {"a": 1, "b": 1}) == {"a": 50, "b": 50}
    split = shares(100, {"a": 2, "b": 1, "c": 1})
    assert sum(split.values()) == 100 and split["a"] == 50
    assert shares(2, {"a": 1000, "b": 1, "c": 1}) == {"a": 2, "b": 1, "c": 1}  # each at least 1
