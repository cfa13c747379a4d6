"""The offsets of the ``mpbroker`` Spark source: ``{topic: {node: offset}}``, where a
node is a 0.7 partition's ``"<broker>-<partition>"`` or a replicated topic's
``"<partition>"`` (the names of the loader's ``state.json`` and of ZooKeeper's group
offsets) and an offset is a byte position in that partition's log, where a message
starts. Spark stores them in its checkpoint as JSON; they come back from it with string
keys, so they are rebuilt here in one stable order (topics, then brokers, then
partitions) and compared as values, never as text.

In ``startingOffsets`` / ``endingOffsets`` JSON, -2 means the earliest offset and -1
the latest, as in Spark's Kafka source. Sans-IO.
"""

import json

from mpbroker.clients.core.leaders import REPLICATED
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.spark_loader.plan import partition_node as node_name

EARLIEST, LATEST = -2, -1
__all__ = ["EARLIEST", "LATEST", "DataLossError", "node_name", "parse_node", "normalized", "flatten", "nest",
           "parse_offsets"]


class DataLossError(RuntimeError):
    """Data a query had not read yet is gone from the log (``failOnDataLoss``)."""


def parse_node(node: str) -> tuple:
    """``(broker_id, partition)`` of a node name; broker -1 for a replicated topic's."""
    head, dash, tail = node.partition("-")
    if not dash and node.isdigit():
        return REPLICATED, int(node)
    if dash and head.isdigit() and tail.isdigit():
        return int(head), int(tail)
    raise ValueError(f"{node!r} is neither <partition> nor <broker>-<partition>")


def sort_key(topic: str, node: str) -> tuple:
    broker_id, partition = parse_node(node)
    return topic, broker_id, partition


def normalized(offsets: dict) -> dict:
    """``offsets`` as plain ints in the stable order (what Spark hands back or a user wrote)."""
    flat = sorted(((topic, str(node), int(offset)) for topic, nodes in offsets.items()
                   for node, offset in nodes.items()), key=lambda item: sort_key(item[0], item[1]))
    result = {}
    for topic, node, offset in flat:
        result.setdefault(topic, {})[node] = offset
    return result


def flatten(offsets: dict) -> dict:
    """``{(topic, node): offset}``."""
    return {(topic, node): offset for topic, nodes in offsets.items() for node, offset in nodes.items()}


def nest(flat: dict) -> dict:
    result = {}
    for (topic, node), offset in flat.items():
        result.setdefault(topic, {})[node] = offset
    return normalized(result)


def parse_offsets(text: str, option: str) -> dict:
    """A ``startingOffsets``/``endingOffsets`` JSON value; ValueError naming ``option``."""
    example = '{"topic": {"1-0": 0, "1-1": -2}} (<broker>-<partition> or a replicated topic\'s <partition>: offset)'
    try:
        value = json.loads(text)
    except ValueError:
        raise ValueError(f"mpbroker source: {option} {text!r} is not earliest, latest or JSON like {example}") from None
    if not isinstance(value, dict) or not value:
        raise ValueError(f"mpbroker source: {option} must be earliest, latest or JSON like {example}, not {text!r}")
    for topic, nodes in value.items():
        try:
            check_topic(topic)
        except InvalidTopicError as exc:
            raise ValueError(f"mpbroker source: {option}: {exc}") from None
        if not isinstance(nodes, dict) or not nodes:
            raise ValueError(f"mpbroker source: {option}: the partitions of {topic!r} must be an object like "
                             f"{example}")
        for node, offset in nodes.items():
            try:
                parse_node(node)
            except ValueError as exc:
                raise ValueError(f"mpbroker source: {option}: {topic!r}: {exc}") from None
            if isinstance(offset, bool) or not isinstance(offset, int) or offset < EARLIEST:
                raise ValueError(f"mpbroker source: {option}: {topic}/{node}: offset {offset!r} is not a byte "
                                 "offset >= 0, -1 (latest) or -2 (earliest)")
    return normalized(value)
