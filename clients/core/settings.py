"""Client settings, with the Kafka 0.7 producer and consumer key names.

A client takes a dict of properties (``{"broker.list": ..., "producer.type": "async"}``)
and/or keyword arguments with dots written as underscores (``producer_type="async"``).
Unknown keys are refused with the list of known ones; values are checked and typed.
"""

from dataclasses import dataclass, fields

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.message import codec_from_name
from mpbroker.codec.topic_names import check_topic

ACKS = ("none", "append", "flush", "replicated")
# request.required.acks (Kafka's producer setting) in terms of ``acks``: 0 fire-and-forget
# PRODUCE, 1 PRODUCE_ACKED once the leader appended (durability 0), -1 once every in-sync
# replica has the set (durability 2).
REQUIRED_ACKS = {0: "none", 1: "append", -1: "replicated"}
_ALIASES = {"queue.enqueueTimeout.ms": "queue_enqueue_timeout_ms"}  # 0.7's spelling


def _int(name: str, value, minimum=None) -> int:
    try:
        number = int(str(value).strip())
    except ValueError:
        raise ValueError(f"{name}: {value!r} is not an integer") from None
    if minimum is not None and number < minimum:
        raise ValueError(f"{name}: {number} is below the minimum {minimum}")
    return number


def parse_bool(name: str, value) -> bool:
    """``true``/``false`` (any case) or a bool."""
    if isinstance(value, bool):
        return value
    text = str(value).strip().lower()
    if text not in ("true", "false"):
        raise ValueError(f"{name}: {value!r} is neither true nor false")
    return text == "true"


def _merge(properties, overrides) -> dict:
    merged = dict(properties or {})
    merged.update({key.replace("_", "."): value for key, value in overrides.items()})
    return merged


def build_settings(cls, kind: str, aliases: dict, properties, overrides):
    """A ``cls`` dataclass from properties and keyword overrides: each key is looked up
    in ``aliases`` (0.7's odd spellings), else taken with ``.`` as ``_``; an unknown key
    is refused with the known ones; ``cls._check`` types and checks the values."""
    names = {f.name for f in fields(cls)}
    values = {}
    for key, value in _merge(properties, overrides).items():
        name = aliases.get(key, key.replace(".", "_"))
        if name not in names:
            known = ", ".join(sorted(n.replace("_", ".") for n in names))
            raise ValueError(f"unknown {kind} setting {key!r}; known: {known}")
        values[name] = value
    settings = cls(**values)
    settings._check()
    return settings


@dataclass
class ProducerSettings:
    broker_list: str = ""  # broker.list: id:host:port,... (or host:port,...)
    zk_connect: str = ""  # zk.connect: host:port[,host:port][/chroot], brokers found through ZooKeeper
    zk_sessiontimeout_ms: int = 6000  # zk.sessiontimeout.ms
    zk_connectiontimeout_ms: int = 6000  # zk.connectiontimeout.ms: the longest wait for ZooKeeper at start
    producer_type: str = "sync"  # producer.type: sync | async
    acks: str = None  # none (0.7 fire-and-forget, the default) | append | flush | replicated (PRODUCE_ACKED)
    request_required_acks: int = None  # request.required.acks: 0 | 1 | -1, Kafka's name for acks none/append/replicated
    partitioner_class: object = None  # partitioner.class: a callable or a dotted name
    compression_codec: int = 0  # compression.codec: none/gzip/snappy or 0/1/2
    compressed_topics: tuple = ()  # compressed.topics: empty = every topic when a codec is set
    queue_time: int = 5000  # queue.time (ms): the longest an async message waits for its batch
    batch_size: int = 200  # batch.size: messages per async batch
    queue_size: int = 10000  # queue.size: messages the async queue holds
    queue_enqueue_timeout_ms: int = 0  # queue.enqueueTimeout.ms: 0 drop at once, -1 block, >0 block so long
    max_message_size: int = 1_000_000  # max.message.size
    num_retries: int = 3  # num.retries: resends after error 7 or a broken connection
    retry_backoff_ms: int = 100  # retry.backoff.ms
    connect_timeout_ms: int = 5000  # connect.timeout.ms
    socket_timeout_ms: int = 30000  # socket.timeout.ms
    callback_handler: object = None  # callback.handler: hooks around a batch (object or dotted name)
    topic_metadata_refresh_ms: int = 60000  # broker.list: how long a probed partition list is trusted
    audit_envelope: bool = False  # audit.envelope: stamp messages (mpbroker.clients.core.envelope), publish audit events
    audit_topic: str = "_audit"  # audit.topic: where the audit events go
    audit_window_ms: int = 60000  # audit.window.ms: the window the events count messages in
    spread_topics: bool = False  # spread.topics: zk.connect: put a topic on every live broker before its first send

    @classmethod
    def from_properties(cls, properties=None, **overrides) -> "ProducerSettings":
        return build_settings(cls, "producer", _ALIASES, properties, overrides)

    def _check(self) -> None:
        if self.producer_type not in ("sync", "async"):
            raise ValueError(f"producer.type: {self.producer_type!r} is neither sync nor async")
        if self.acks is not None and self.acks not in ACKS:
            raise ValueError(f"acks: {self.acks!r} is not one of {', '.join(ACKS)}")
        if self.request_required_acks is not None:
            required = _int("request.required.acks", self.request_required_acks)
            if required not in REQUIRED_ACKS:
                raise ValueError(f"request.required.acks: {required} is not one of 0, 1, -1 (waiting for N "
                                 "replicas is not supported: -1 waits for every in-sync replica)")
            if self.acks is not None and self.acks != REQUIRED_ACKS[required]:
                raise ValueError(f"acks={self.acks} and request.required.acks={required} conflict "
                                 f"(request.required.acks={required} is acks={REQUIRED_ACKS[required]}): give one")
            self.request_required_acks = required
            self.acks = REQUIRED_ACKS[required]
        elif self.acks is None:
            self.acks = "none"
        if not self.broker_list and not self.zk_connect:
            raise ValueError("either broker.list or zk.connect is required")
        if self.broker_list and self.zk_connect:
            raise ValueError("only one of broker.list and zk.connect can be given")
        self.compression_codec = codec_from_name(self.compression_codec)
        if isinstance(self.compressed_topics, str):
            self.compressed_topics = tuple(t.strip() for t in self.compressed_topics.split(",") if t.strip())
        for name in ("queue_time", "batch_size", "queue_size", "max_message_size", "num_retries",
                     "retry_backoff_ms", "connect_timeout_ms", "socket_timeout_ms", "topic_metadata_refresh_ms"):
            setattr(self, name, _int(name.replace("_", "."), getattr(self, name), 0))
        for name in ("zk_sessiontimeout_ms", "zk_connectiontimeout_ms"):
            setattr(self, name, _int(name.replace("_", "."), getattr(self, name), 1))
        self.queue_enqueue_timeout_ms = _int("queue.enqueueTimeout.ms", self.queue_enqueue_timeout_ms, -1)
        if self.batch_size < 1 or self.queue_size < 1:
            raise ValueError("batch.size and queue.size must be at least 1")
        self.audit_envelope = parse_bool("audit.envelope", self.audit_envelope)
        self.spread_topics = parse_bool("spread.topics", self.spread_topics)
        self.audit_window_ms = _int("audit.window.ms", self.audit_window_ms, 1)
        try:
            self.audit_topic = check_topic(self.audit_topic)
        except InvalidTopicError as exc:
            raise ValueError(f"audit.topic: {exc}") from None

    def compresses(self, topic: str) -> int:
        """The codec for ``topic``: ``compression.codec``, limited to ``compressed.topics``."""
        if self.compression_codec and (not self.compressed_topics or topic in self.compressed_topics):
            return self.compression_codec
        return 0
