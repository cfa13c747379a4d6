"""The ZooKeeper layout of Kafka 0.7: node paths and the values stored in them.

No I/O here: the broker's registrar, the producer's discovery, the consumer connector
and the group report all build their paths and parse their values with these.

    /brokers/ids/<broker id>                         "<creator id>:<host>:<port>"  ephemeral
    /brokers/topics/<topic>/<broker id>              "<partition count>"           ephemeral
    /consumers/<group>/ids/<consumer id>             JSON subscription             ephemeral
    /consumers/<group>/owners/<topic>/<b>-<p>        "<consumer id>-<stream>"      ephemeral
    /consumers/<group>/offsets/<topic>/<b>-<p>       "<next offset>"               persistent

A subscription is ``{"topic": streams, ...}``; a topic filter is written as the single
key ``*<streams>*<regex>`` (whitelist) or ``!<streams>!<regex>`` (blacklist).
"""

import json
import re
import secrets
import socket
import time
from typing import NamedTuple

from mpbroker.errors import InvalidTopicError
from mpbroker.segments.naming import check_topic

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


def owners_path(group: str, topic: str) -> str:
    return f"{group_path(group)}/owners/{check_topic(topic)}"


def owner_path(group: str, topic: str, partition: PartitionId) -> str:
    return f"{owners_path(group, topic)}/{partition.node()}"


def offsets_path(group: str, topic: str) -> str:
    return f"{group_path(group)}/offsets/{check_topic(topic)}"


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
        if self.pattern is None:
            return json.dumps(self.topics, sort_keys=True).encode()
        mark = "*" if self.whitelist else "!"
        return json.dumps({f"{mark}{self.streams}{mark}{self.pattern}": self.streams}).encode()

    def streams_for(self, topic: str) -> int:
        """How many streams this consumer has for ``topic`` (0: not subscribed)."""
        if self.pattern is None:
            return self.topics.get(topic, 0)
        return self.streams if topic_matches(self.pattern, self.whitelist, topic) else 0


_FILTER_KEY_RE = re.compile(r"([*!])(\d+)\1(.*)\Z", re.S)


def parse_subscription(value: bytes) -> Subscription:
    try:
        data = json.loads(value.decode())
        if not isinstance(data, dict) or not data:
            raise ValueError
        if len(data) == 1:
            (key,) = data
            match = _FILTER_KEY_RE.match(key)
            if match:
                re.compile(match.group(3))
                return Subscription({}, match.group(3), match.group(1) == "*", int(match.group(2)))
        topics = {check_topic(topic): int(count) for topic, count in data.items()}
        if any(count < 1 for count in topics.values()):
            raise ValueError
        return Subscription(topics)
    except (UnicodeDecodeError, ValueError, TypeError, re.error, InvalidTopicError):
        raise LayoutError(f"consumer registration {value[:200]!r} is not a subscription") from None


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

