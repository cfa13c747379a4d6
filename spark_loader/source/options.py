"""The options of the ``mpbroker`` Spark source, checked once on the driver.

Named as Spark's Kafka source names them where they mean the same (``subscribe``,
``subscribePattern``, ``assign``, ``startingOffsets``, ``endingOffsets``,
``startingTimestamp``, ``failOnDataLoss``, ``minPartitions``, ``includeHeaders``,
``maxOffsetsPerTrigger``), plus what mpbroker's byte offsets and 0.7 bootstrap need:
``brokers`` (``host:port`` or ``id:host:port`` list of 0.7 ports) or ``zookeeper``
(``host:port[/chroot]``: the brokers, topics and the leaders of replicated topics),
``maxBytesPerTrigger`` and ``fetchSize``. Spark hands the options over as a
case-insensitive dict of strings; every bad value is a ValueError naming the option.
"""

import json
import re
from dataclasses import dataclass

from mpbroker.clients.core.brokers import parse_broker_list
from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.spark_loader.source.offsets import EARLIEST, LATEST, parse_offsets

EARLIEST_NAME, LATEST_NAME = "earliest", "latest"
NAMES = ("brokers", "zookeeper", "subscribe", "subscribePattern", "assign", "startingOffsets", "endingOffsets",
         "startingTimestamp", "failOnDataLoss", "minPartitions", "includeHeaders", "maxBytesPerTrigger",
         "maxOffsetsPerTrigger", "fetchSize", "zkTimeoutMs")
_SPELLED = {name.lower(): name for name in NAMES}
DEFAULT_FETCH_SIZE = 4 * 1024 * 1024


@dataclass(frozen=True)
class SourceOptions:
    brokers: str = ""  # a 0.7 broker list, or
    zookeeper: str = ""  # ZooKeeper's connect string
    topics: tuple = ()  # subscribe
    pattern: str = ""  # subscribePattern (a regular expression, whole names)
    assign: tuple = ()  # ((topic, node), ...): assign's partitions
    starting: object = EARLIEST  # EARLIEST, LATEST, or {topic: {node: offset}}
    ending: object = LATEST  # batch queries only: LATEST or {topic: {node: offset}}
    starting_timestamp: int = -1  # ms, or -1
    fail_on_data_loss: bool = True
    min_partitions: int = 0
    include_headers: bool = False
    max_bytes_per_trigger: int = 0
    max_offsets_per_trigger: int = 0  # messages per trigger
    fetch_size: int = DEFAULT_FETCH_SIZE
    zk_timeout_ms: int = 6000

    @property
    def subscribed(self) -> str:
        """How the topics were named, for messages."""
        if self.topics:
            return "subscribe=" + ",".join(self.topics)
        if self.pattern:
            return f"subscribePattern={self.pattern}"
        return "assign=" + json.dumps(_assign_json(self.assign))


def parse_options(options, *, streaming: bool) -> SourceOptions:
    """SourceOptions of Spark's option dict; ValueError for anything wrong."""
    options = {str(k).lower(): str(v) for k, v in dict(options).items()}
    unknown = sorted(set(options) - set(_SPELLED) - {"path"})
    if unknown:
        raise ValueError(f"mpbroker source: unknown option(s) {', '.join(unknown)}; known: {', '.join(NAMES)}")
    brokers, zookeeper = options.get("brokers", "").strip(), options.get("zookeeper", "").strip()
    if bool(brokers) == bool(zookeeper):
        raise ValueError("mpbroker source: give exactly one of the options 'brokers' (host:port,... of the 0.7 "
                         "ports) and 'zookeeper' (host:port[/chroot])")
    if brokers:
        parse_broker_list(brokers)  # its ValueError says what is wrong
    named = [name for name in ("subscribe", "subscribepattern", "assign") if options.get(name, "").strip()]
    if len(named) != 1:
        raise ValueError("mpbroker source: give exactly one of 'subscribe', 'subscribePattern' and 'assign'"
                         + (f" (got {', '.join(named)})" if named else ""))
    topics, pattern, assign = (), "", ()
    if named == ["subscribe"]:
        topics = tuple(dict.fromkeys(_topic(t.strip(), "subscribe") for t in options["subscribe"].split(",")
                                     if t.strip()))
        if not topics:
            raise ValueError("mpbroker source: 'subscribe' names no topic")
    elif named == ["subscribepattern"]:
        pattern = options["subscribepattern"].strip()
        try:
            re.compile(pattern)
        except re.error as exc:
            raise ValueError(f"mpbroker source: 'subscribePattern' {pattern!r} is not a regular expression: "
                             f"{exc}") from None
        if zookeeper == "":
            raise ValueError("mpbroker source: 'subscribePattern' needs 'zookeeper': the 0.7 protocol cannot list "
                             "a broker's topics")
    else:
        assign = _parse_assign(options["assign"])
    starting = _offsets_option(options, "startingoffsets", EARLIEST_NAME)
    ending = _offsets_option(options, "endingoffsets", LATEST_NAME)
    if streaming and "endingoffsets" in options:
        raise ValueError("mpbroker source: 'endingOffsets' is for batch queries (spark.read); a streaming query "
                         "reads on (trigger(availableNow=True) stops at what is there when it starts)")
    if ending == EARLIEST or (isinstance(ending, dict) and any(EARLIEST in p.values() for p in ending.values())):
        raise ValueError("mpbroker source: 'endingOffsets' cannot be earliest (-2)")
    if not streaming and starting == LATEST:
        raise ValueError("mpbroker source: 'startingOffsets' latest makes an empty batch query; use it with "
                         "readStream")
    timestamp = -1
    if options.get("startingtimestamp", "").strip():
        if "startingoffsets" in options:
            raise ValueError("mpbroker source: give 'startingOffsets' or 'startingTimestamp', not both")
        timestamp = _integer(options, "startingtimestamp", 0)
    return SourceOptions(
        brokers=brokers, zookeeper=zookeeper, topics=topics, pattern=pattern, assign=assign, starting=starting,
        ending=ending, starting_timestamp=timestamp,
        fail_on_data_loss=_boolean(options, "failondataloss", True),
        min_partitions=_integer(options, "minpartitions", 1, default=0),
        include_headers=_boolean(options, "includeheaders", False),
        max_bytes_per_trigger=_integer(options, "maxbytespertrigger", 1, default=0),
        max_offsets_per_trigger=_integer(options, "maxoffsetspertrigger", 1, default=0),
        fetch_size=_integer(options, "fetchsize", 1024, default=DEFAULT_FETCH_SIZE),
        zk_timeout_ms=_integer(options, "zktimeoutms", 1, default=6000),
    )


def includes_headers(options) -> bool:
    """Only ``includeHeaders``: what the schema depends on (Spark asks for the schema
    before it knows whether the query streams)."""
    return _boolean({str(k).lower(): str(v) for k, v in dict(options).items()}, "includeheaders", False)


def _offsets_option(options: dict, name: str, default: str):
    text = options.get(name, default).strip()
    if text.lower() == EARLIEST_NAME:
        return EARLIEST
    if text.lower() == LATEST_NAME:
        return LATEST
    return parse_offsets(text, _SPELLED[name])


def _parse_assign(text: str) -> tuple:
    """``{"topic": [partition, ...]}``: partitions as Spark's Kafka source writes them (a
    replicated topic's or a single broker's ``0``) or mpbroker's ``"<broker>-<partition>"``."""
    try:
        value = json.loads(text)
    except ValueError:
        value = None
    if not isinstance(value, dict) or not value or not all(isinstance(v, list) and v for v in value.values()):
        raise ValueError(f"mpbroker source: 'assign' must be JSON like {{\"topic\": [0, 1]}} or "
                         f"{{\"topic\": [\"1-0\", \"2-0\"]}} (<broker>-<partition>), not {text!r}")
    assigned = []
    for topic, nodes in value.items():
        _topic(topic, "assign")
        for node in nodes:
            node = str(node)
            head, _, tail = node.partition("-")
            if not (node.isdigit() or (head.isdigit() and tail.isdigit())):
                raise ValueError(f"mpbroker source: 'assign' partition {node!r} of {topic!r} is neither <partition> "
                                 "nor <broker>-<partition>")
            assigned.append((topic, node))
    return tuple(dict.fromkeys(assigned))


def _topic(name: str, option: str) -> str:
    try:
        return check_topic(name)
    except InvalidTopicError as exc:
        raise ValueError(f"mpbroker source: {option!r}: {exc}") from None


def _assign_json(assign: tuple) -> dict:
    result = {}
    for topic, node in assign:
        result.setdefault(topic, []).append(node)
    return result


def _boolean(options: dict, name: str, default: bool) -> bool:
    text = options.get(name, "").strip().lower()
    if not text:
        return default
    if text not in ("true", "false"):
        raise ValueError(f"mpbroker source: option {_SPELLED[name]!r} must be true or false, not {options[name]!r}")
    return text == "true"


def _integer(options: dict, name: str, minimum: int, default: int = 0) -> int:
    text = options.get(name, "").strip()
    if not text:
        return default
    try:
        value = int(text)
    except ValueError:
        value = None
    if value is None or value < minimum:
        raise ValueError(f"mpbroker source: option {_SPELLED[name]!r} must be an integer >= {minimum}, not {options[name]!r}")
    return value

