"""The ZooKeeper layout of Kafka 0.7: node paths and the values stored in them.

No I/O here: the broker's registrar, the producer's discovery, the consumer connector
and the group report all build their paths and parse their values with these.

    /brokers/ids/<broker id>                         "<creator id>:<host>:<port>"  ephemeral
    /brokers/topics/<topic>/<broker id>              "<partition count>"           ephemeral
    /consumers/<group>/ids/<consumer id>             the subscription              ephemeral
    /consumers/<group>/owners/<topic>/<b>-<p>        "<consumer id>-<stream>"      ephemeral
    /consumers/<group>/offsets/<topic>/<b>-<p>       "<next offset>"               persistent

A subscription is written as Kafka 0.7.1+ writes it (TopicCount.dbString): a list of
topics as the JSON map ``{"topic": streams, ...}``, a topic filter as the raw text
``*<streams>*<regex>`` (whitelist) or ``!<streams>!<regex>`` (blacklist) -- the whole
node value, no JSON around it. Read are those forms and, for one release, the form
mpbroker wrote before (the filter text as the single key of a JSON map,
``{"*4*regex": 4}``), so a group can be restarted member by member onto this release.
"""

import json
import re
import secrets
import socket
import time
from typing import NamedTuple

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic

BROKER_IDS = "/brokers/ids"
BROKER_TOPICS = "/brokers/topics"
CONSUMERS = "/consumers"
_GROUP_RE = re.compile(r"[A-Za-z0-9._-]{1,255}\Z")
_CONSUMER_ID_RE = re.compile(r"[A-Za-z0-9._-]{1,512}\Z")
_PARTITION_NODE_RE = re.compile(r"(\d{1,10})-(\d{1,10})\Z")


class LayoutError(ValueError):
    """A name that cannot be a node, or a node value that does not parse."""


class BrokerInfo(NamedTuple):
    id: int
    creator: str
    host: str
    port: int

    def value(self) -> bytes:
        return f"{self.creator}:{self.host}:{self.port}".encode()


class PartitionId(NamedTuple):
    """A partition of a topic in the cluster: ``<broker id>-<partition>``; sorts numerically."""
    broker_id: int
    partition: int

    def node(self) -> str:
        return f"{self.broker_id}-{self.partition}"


def check_group(group: str) -> str:
    if not isinstance(group, str) or not _GROUP_RE.match(group) or group in (".", ".."):
        raise LayoutError(f"illegal consumer group {group!r}: use 1-255 characters from [A-Za-z0-9._-]")
    return group


def check_consumer_id(consumer_id: str) -> str:
    if not isinstance(consumer_id, str) or not _CONSUMER_ID_RE.match(consumer_id):
        raise LayoutError(f"illegal consumer id {consumer_id!r}: use characters from [A-Za-z0-9._-]")
    return consumer_id


# --- brokers ----------------------------------------------------------------------

def broker_path(broker_id: int) -> str:
    return f"{BROKER_IDS}/{int(broker_id)}"


def topic_path(topic: str) -> str:
    return f"{BROKER_TOPICS}/{check_topic(topic)}"


def topic_broker_path(topic: str, broker_id: int) -> str:
    return f"{topic_path(topic)}/{int(broker_id)}"


def creator_id(hostname: str | None = None) -> str:
    """A broker process's creator id, ``<host>-<ms>``, as 0.7 wrote it."""
    return f"{hostname or socket.gethostname()}-{int(time.time() * 1000)}"


def parse_broker(broker_id, value: bytes) -> BrokerInfo:
    """``/brokers/ids/<id>``'s value: ``creator:host:port`` (the creator may hold ``:``)."""
    try:
        creator, host, port = value.decode().rsplit(":", 2)
        info = BrokerInfo(int(broker_id), creator, host, int(port))
    except (UnicodeDecodeError, ValueError):
        raise LayoutError(f"broker {broker_id}: registration {value[:100]!r} is not creator:host:port") from None
    if not host or not 0 < info.port < 65536:
        raise LayoutError(f"broker {broker_id}: registration {value[:100]!r} has no usable host:port")
    return info


def parse_partition_count(topic: str, broker_id, value: bytes) -> int:
    try:
        count = int(value.decode())
    except (UnicodeDecodeError, ValueError):
        count = -1
    if count < 1:
        raise LayoutError(f"/brokers/topics/{topic}/{broker_id}: {value[:100]!r} is not a partition count")
    return count


# --- consumers --------------------------------------------------------------------

def group_path(group: str) -> str:
    return f"{CONSUMERS}/{check_group(group)}"


def consumer_ids_path(group: str) -> str:
    return f"{group_path(group)}/ids"


def consumer_path(group: str, consumer_id: str) -> str:
    return f"{consumer_ids_path(group)}/{check_consumer_id(consumer_id)}"


def group_owners_path(group: str) -> str:
    """The parent of the group's per-topic owner nodes."""
    return f"{group_path(group)}/owners"


def group_offsets_path(group: str) -> str:
    """The parent of the group's per-topic committed offsets."""
    return f"{group_path(group)}/offsets"


def owners_path(group: str, topic: str) -> str:
    return f"{group_owners_path(group)}/{check_topic(topic)}"


def owner_path(group: str, topic: str, partition: PartitionId) -> str:
    return f"{owners_path(group, topic)}/{partition.node()}"


def offsets_path(group: str, topic: str) -> str:
    return f"{group_offsets_path(group)}/{check_topic(topic)}"


def offset_path(group: str, topic: str, partition: PartitionId) -> str:
    return f"{offsets_path(group, topic)}/{partition.node()}"


def new_consumer_id(group: str, hostname: str | None = None) -> str:
    """``<group>_<hostname>-<ms>-<8 hex>``."""
    host = re.sub(r"[^A-Za-z0-9.-]", "-", hostname or socket.gethostname()) or "host"
    return f"{check_group(group)}_{host}-{int(time.time() * 1000)}-{secrets.token_hex(4)}"


def stream_id(consumer_id: str, index: int) -> str:
    return f"{consumer_id}-{index}"


def parse_partition_node(name: str) -> PartitionId:
    match = _PARTITION_NODE_RE.match(name)
    if not match:
        raise LayoutError(f"{name!r} is not <broker id>-<partition>")
    return PartitionId(int(match.group(1)), int(match.group(2)))


def parse_offset(value: bytes) -> int:
    try:
        offset = int(value.decode())
    except (UnicodeDecodeError, ValueError):
        offset = -1
    if offset < 0:
        raise LayoutError(f"stored offset {value[:100]!r} is not a non-negative integer")
    return offset


class Subscription(NamedTuple):
    """What a consumer registered: static topic counts, or one filter."""
    topics: dict  # topic -> number of streams (static subscriptions)
    pattern: str | None = None  # the filter's regex
    whitelist: bool = True
    streams: int = 0  # streams of the filter

    def value(self) -> bytes:
        """The node value, in 0.7's forms (see the module docstring)."""
        if self.pattern is None:
            return json.dumps(self.topics, sort_keys=True).encode()
        mark = "*" if self.whitelist else "!"
        return f"{mark}{self.streams}{mark}{self.pattern}".encode()

    def streams_for(self, topic: str) -> int:
        """How many streams this consumer has for ``topic`` (0: not subscribed)."""
        if self.pattern is None:
            return self.topics.get(topic, 0)
        return self.streams if topic_matches(self.pattern, self.whitelist, topic) else 0


_FILTER_RE = re.compile(r"([*!])(\d+)\1(.*)\Z", re.S)


def parse_subscription(value: bytes) -> Subscription:
    """A consumer's registration, in any form the module docstring lists; LayoutError
    (naming the value) for anything else: not UTF-8, neither a filter nor a JSON map,
    a topic name that cannot be one, a stream count below 1, a regex that does not
    compile."""
    try:
        text = value.decode()
        if text[:1] in ("*", "!"):  # 0.7.1+: the filter is the whole value
            return _filter_subscription(text)
        data = json.loads(text)
        if not isinstance(data, dict) or not data:
            raise ValueError
        if len(data) == 1:
            (key,) = data
            if key[:1] in ("*", "!"):  # mpbroker before this release: {"*4*regex": 4}
                return _filter_subscription(key)
        topics = {}
        for topic, count in data.items():
            if not isinstance(count, int) or isinstance(count, bool) or count < 1:
                raise ValueError
            topics[check_topic(topic)] = count
        return Subscription(topics)
    except (UnicodeDecodeError, ValueError, TypeError, re.error, InvalidTopicError):
        raise LayoutError(f"consumer registration {value[:200]!r} is not a subscription") from None


def _filter_subscription(text: str) -> Subscription:
    match = _FILTER_RE.match(text)
    if not match or int(match.group(2)) < 1:
        raise ValueError(text)
    pattern = match.group(3)
    _compiled(pattern)  # re.error if it is not a regex
    return Subscription({}, pattern, match.group(1) == "*", int(match.group(2)))


def topic_matches(pattern: str, whitelist: bool, topic: str) -> bool:
    """A whitelist takes the topics its regex matches in full; a blacklist the others.
    As in 0.7, ``,`` in a pattern means ``|``."""
    matched = _compiled(pattern).fullmatch(topic) is not None
    return matched if whitelist else not matched


_PATTERNS = {}


def _compiled(pattern: str):
    compiled = _PATTERNS.get(pattern)
    if compiled is None:
        compiled = _PATTERNS[pattern] = re.compile(pattern.replace(",", "|"))
    return compiled


def split_zk_connect(zk_connect: str) -> tuple:
    """``host:port[,host:port][/chroot]`` -> (hosts, chroot or "")."""
    text = zk_connect.strip()
    hosts, slash, chroot = text.partition("/")
    if not hosts:
        raise LayoutError(f"zk.connect {zk_connect!r} names no host")
    chroot = ("/" + chroot.rstrip("/")) if slash and chroot.strip("/") else ""
    if chroot and any(part in ("", ".", "..") for part in chroot.split("/")[1:]):
        raise LayoutError(f"zk.connect {zk_connect!r}: bad chroot {chroot!r}")
    return hosts, chroot


def hostname_for_registration(configured: str) -> str:
    """The host other machines reach this broker at: ``hostname`` if set, else this
    machine's address (as 0.7's ``InetAddress.getLocalHost``), else its name."""
    if configured:
        return configured
    name = socket.gethostname()
    try:
        return socket.gethostbyname(name)
    except OSError:
        return name

