"""The table of configuration keys mpbroker understands, with its documentation.

This module owns the registry (``KEYS``: each key's name, type, default, limits and one
line of help), the Kafka 0.7 keys accepted without effect (``IGNORED_KEYS``), the later
Kafka (0.8+) names read as the 0.7 keys (``ALIASES``) and the example configuration
generated from all of it (``render_properties``, which ``ops/server.properties`` is). It
is data: parsing and checking values is ``mpbroker.config.values``, building the typed
configuration from them ``mpbroker.config.broker_config``. A key added here needs its
attribute on ``BrokerConfig`` too (checked at import).
"""

import os
from collections.abc import Callable
from dataclasses import dataclass

MAX_WORKERS = 256
CONTROL_SOCKET_NAME = "mpbroker.sock"


def _cpu_count_default() -> str:
    return str(min(os.cpu_count() or 1, MAX_WORKERS))


@dataclass(frozen=True)
class Key:
    """One configuration key. ``default`` is in properties syntax (a callable computes
    it at load time); with ``default_from`` an unset key takes that other key's value.
    Numeric limits apply to the values of a map, too."""

    name: str
    kind: str  # "int", "bool", "str" or "map" (topic -> int)
    default: str | Callable[[], str] | None
    help: str
    minimum: int | None = None
    maximum: int | None = None
    also_allowed: int | None = None  # one value accepted outside the limits
    power_of_two: bool = False
    non_empty: bool = False
    choices: tuple[str, ...] = ()
    default_from: str | None = None

    @property
    def attribute(self) -> str:
        return self.name.replace(".", "_")

    def default_text(self) -> str:
        return self.default() if callable(self.default) else self.default


KEYS = (
    Key("brokerid", "int", "0", "unique id of this broker in the cluster", minimum=0),
    Key("hostname", "str", "", "host the broker binds to and registers; empty means all interfaces"),
    Key("port", "int", "9092", "TCP port of the Kafka 0.7 protocol; 0 picks a free port", minimum=0, maximum=65535),
    Key("kafka.port", "int", "9093",
        "TCP port of the modern Kafka protocol (today's clients: librdkafka and kcat, the Java clients, "
        "kafka-python, aiokafka, kafkajs); 0 picks a free port; -1 turns that listener off",
        minimum=0, maximum=65535, also_allowed=-1),
    Key("advertised.host.name", "str", "",
        "host modern clients are told to connect to (Metadata); empty: hostname, or when that is empty too this "
        "machine's address, as the ZooKeeper registration"),
    Key("advertised.port", "int", "-1",
        "port modern clients are told to connect to (Metadata), where a proxy or NAT maps kafka.port to another; "
        "-1: the kafka.port listened on", minimum=1, maximum=65535, also_allowed=-1),
    Key("auto.create.topics.enable", "bool", "true",
        "a modern client's Metadata or Produce for a topic that does not exist creates it (num.partitions "
        "partitions), as in Kafka"),
    Key("message.timestamp.type", "str", "CreateTime",
        "timestamps of records written by modern producers: CreateTime keeps the producer's, LogAppendTime sets "
        "the broker's time at append (either spelled in any case)", choices=("CREATETIME", "LOGAPPENDTIME")),
    Key("offsets.topic.num.partitions", "int", "50",
        "partitions of __consumer_offsets, where modern consumer groups' committed offsets are kept; a group's "
        "coordinator is the leader of partition hash(group) mod this (Kafka's rule); fixed once the topic exists",
        minimum=1, maximum=1000),
    Key("offsets.topic.replication.factor", "int", "3",
        "with ZooKeeper: replicas of each __consumer_offsets partition (at most the live brokers when it is "
        "created)", minimum=1),
    Key("offsets.topic.segment.bytes", "int", "104857600", "segment size of __consumer_offsets", minimum=1024),
    Key("group.initial.rebalance.delay.ms", "int", "3000",
        "a modern consumer group's first rebalance waits this long for more members to join (each join "
        "extends it, up to the rebalance timeout), as in Kafka", minimum=0),
    Key("group.min.session.timeout.ms", "int", "6000", "smallest session timeout a group member may ask for",
        minimum=1),
    Key("group.max.session.timeout.ms", "int", "1800000", "largest session timeout a group member may ask for",
        minimum=1),
    Key("group.max.size", "int", "2147483647", "members a modern consumer group may have", minimum=1),
    Key("offset.metadata.max.bytes", "int", "4096", "longest metadata string an offset commit may carry",
        minimum=0),
    Key("log.dir", "str", "/tmp/kafka-logs", "directory holding every partition log", non_empty=True),
    Key("num.partitions", "int", "1", "partitions of a topic not in topic.partition.count.map", minimum=1),
    Key("topic.partition.count.map", "map", "", "per-topic partition counts, e.g. clicks:8,views:16", minimum=1),
    Key("log.file.size", "int", "1073741824", "bytes after which a segment file is rolled", minimum=1),
    Key("log.roll.hours", "int", "168", "hours after which a segment file is rolled", minimum=1),
    Key("log.flush.interval", "int", "500", "messages appended to a partition before it is flushed", minimum=1),
    Key("topic.log.flush.interval", "map", "", "per-topic log.flush.interval, e.g. clicks:100", minimum=1),
    Key("log.default.flush.scheduler.interval.ms", "int", "3000", "milliseconds between checks for time-based flushes",
        minimum=1),
    Key("log.default.flush.interval.ms", "int", None,
        "milliseconds an appended message may stay unflushed (default: the scheduler interval)",
        minimum=1, default_from="log.default.flush.scheduler.interval.ms"),
    Key("topic.flush.intervals.ms", "map", "", "per-topic log.default.flush.interval.ms, e.g. clicks:1000", minimum=1),
    Key("log.retention.hours", "int", "168", "hours a segment is kept before it is deleted", minimum=1),
    Key("topic.log.retention.hours", "map", "", "per-topic log.retention.hours, e.g. clicks:24", minimum=1),
    Key("log.retention.size", "int", "-1", "bytes kept per partition before old segments go; -1 means no limit",
        minimum=1, also_allowed=-1),
    Key("log.cleanup.interval.mins", "int", "10", "minutes between retention checks", minimum=1),
    Key("log.flush.offset.checkpoint.interval.ms", "int", "1000",
        "milliseconds between writes of the recovery points (what is flushed of each log) to log.dir; "
        "recovery after a crash scans the logs from there", minimum=1),
    Key("max.message.size", "int", "1000000", "largest message accepted, in bytes", minimum=1),
    Key("max.socket.request.bytes", "int", "104857600", "largest request accepted on a socket, in bytes",
        minimum=1024),
    Key("max.inflated.request.bytes", "int", "104857600",
        "bytes all compressed messages of one request may inflate to", minimum=1024),
    Key("max.connections", "int", "10000", "client connections open at once", minimum=1),
    Key("max.connections.per.ip", "int", "1000", "client connections open at once from one IP address", minimum=1),
    Key("request.receive.timeout.ms", "int", "30000",
        "milliseconds a client may take to send one whole request once its first byte arrived", minimum=100),
    Key("connections.max.idle.ms", "int", "600000",
        "milliseconds a client connection may go without a byte received or sent before it is closed; 0 means never",
        minimum=0),
    Key("max.queued.responses", "int", "1000",
        "answers waiting to be sent on one connection (a MULTIFETCH counts per partition) before it is not read",
        minimum=1),
    Key("enable.zookeeper", "bool", "false", "register the broker and its topics in ZooKeeper"),
    Key("zk.connect", "str", "", "ZooKeeper connect string, e.g. zk1:2181,zk2:2181; required with enable.zookeeper"),
    Key("zk.connectiontimeout.ms", "int", "6000", "milliseconds to wait for a ZooKeeper connection", minimum=1),
    Key("zk.sessiontimeout.ms", "int", "6000", "ZooKeeper session timeout in milliseconds", minimum=1),
    Key("unclean.leader.election.enable", "bool", "false",
        "when no in-sync replica of a replicated partition is alive, elect one that is not in sync (the controller): "
        "the partition serves again, but writes only the in-sync replicas had are lost; false keeps it unavailable"),
    Key("default.replication.factor", "int", "1",
        "with ZooKeeper: a produce to a topic no broker has creates it with this many replicas per partition "
        "(Kafka 0.8's auto-creation); 1 creates it the 0.7 way, unreplicated, on the broker that took the produce",
        minimum=1),
    Key("min.insync.replicas", "int", "1",
        "a durability-2 produce to a replicated partition whose ISR is smaller than this is refused (error 10) and "
        "not appended", minimum=1),
    Key("replica.lag.time.max.ms", "int", "10000",
        "a follower that has not caught up with the leader's log end for this long leaves the ISR", minimum=1),
    Key("replica.fetch.max.bytes", "int", "1048576",
        "bytes a follower asks for per partition and fetch (more when a message is larger)", minimum=1024),
    Key("num.replica.fetchers", "int", "1",
        "connections each worker opens to each leader for the partitions it follows", minimum=1, maximum=64),
    Key("controller.socket.timeout.ms", "int", "30000",
        "milliseconds a request between brokers (a follower's fetch) may go unanswered before its connection is "
        "closed and made again", minimum=1),
    Key("num.workers", "int", _cpu_count_default,
        f"worker processes serving requests (default: the number of CPUs, at most {MAX_WORKERS})",
        minimum=1, maximum=MAX_WORKERS),
    Key("ring.buffer.bytes", "int", "8388608", "size of each shared-memory ring, a power of two", minimum=65536,
        power_of_two=True),
    Key("busy.poll.us", "int", "200",
        "the most microseconds the acceptor and each worker poll, instead of sleeping, after an event; the window "
        "adapts to the gaps between events (none while idle), and an acknowledged round trip then finds them awake "
        "(~2.5x faster here) for CPU time spent polling; 0 sleeps at once (machines shared with other work)",
        minimum=0, maximum=100_000),
    Key("sched.batch", "bool", "true",
        "run the broker's processes under Linux's SCHED_BATCH scheduling policy: a woken process takes its turn on "
        "the CPU instead of preempting the one running, so fewer context switches when busy processes outnumber "
        "the cores (~25% faster replication on 2 cores); false keeps the policy the broker was started with"),
    Key("worker.heartbeat.timeout.ms", "int", "30000", "milliseconds of worker silence before it is restarted",
        minimum=1000),
    Key("control.socket", "str", "", f"path of the control unix socket; empty means <log.dir>/{CONTROL_SOCKET_NAME}"),
    Key("control.socket.group", "str", "",
        "group (name or id) that may use the control socket too (mode 0660); empty means only the broker's user"),
    Key("allow.unknown.keys", "bool", "false",
        "start even with unknown keys (each is ignored with a warning); mpbroker serve --allow-unknown-keys sets it"),
    Key("log.level", "str", "INFO", "logging level: DEBUG, INFO, WARNING or ERROR",
        choices=("DEBUG", "INFO", "WARNING", "ERROR")),
    Key("metrics.enable", "bool", "false", "serve Prometheus metrics over HTTP at metrics.host:metrics.port"),
    Key("metrics.host", "str", None,
        "host the metrics endpoint binds to (default: the value of hostname); empty means all interfaces",
        default_from="hostname"),
    Key("metrics.port", "int", "9099", "TCP port of the metrics endpoint; 0 picks a free port", minimum=0,
        maximum=65535),
)

KEYS_BY_NAME = {key.name: key for key in KEYS}

# Kafka 0.7 keys that are accepted with a warning, and why they have no effect.
IGNORED_KEYS = {
    "num.threads": "mpbroker serves requests with worker processes; set num.workers instead",
    "socket.send.buffer": "the kernel's socket buffer autotuning is used",
    "socket.receive.buffer": "the kernel's socket buffer autotuning is used",
    "monitoring.period.secs": "mpbroker has no periodic JMX-style statistics",
    "zk.synctime.ms": "only zk.connectiontimeout.ms and zk.sessiontimeout.ms apply to mpbroker's ZooKeeper client",
}


# The names later Kafka versions (0.8 and after) gave to 0.7 keys, for the same setting.
# Only where the meaning is the same: log.retention.check.interval.ms, for instance,
# is not log.cleanup.interval.mins (other unit), so it stays unknown.
ALIASES = {
    "broker.id": "brokerid",
    "host.name": "hostname",
    "log.dirs": "log.dir",  # one directory only: see _alias_value
    "zookeeper.connect": "zk.connect",
    "zookeeper.session.timeout.ms": "zk.sessiontimeout.ms",
    "zookeeper.connection.timeout.ms": "zk.connectiontimeout.ms",
    "zookeeper.sync.time.ms": "zk.synctime.ms",
    "log.segment.bytes": "log.file.size",
    "log.retention.bytes": "log.retention.size",
    "log.retention.hours.per.topic": "topic.log.retention.hours",
    "message.max.bytes": "max.message.size",
    "log.flush.interval.messages": "log.flush.interval",
    "log.flush.interval.ms": "log.default.flush.interval.ms",
    "log.flush.scheduler.interval.ms": "log.default.flush.scheduler.interval.ms",
    "log.flush.interval.ms.per.topic": "topic.flush.intervals.ms",
    "socket.send.buffer.bytes": "socket.send.buffer",
    "socket.receive.buffer.bytes": "socket.receive.buffer",
    "socket.request.max.bytes": "max.socket.request.bytes",
}

ALIASES_OF = {target: [alias for alias, key in ALIASES.items() if key == target]  # 0.7 key -> its later names
              for target in ALIASES.values()}


def render_properties() -> str:
    """An example configuration: every key, commented out at its default, with its help
    line (``ops/server.properties`` is this text; a test keeps the two equal)."""
    lines = [
        "# mpbroker configuration: every key with its default and what it does.",
        "# Kafka 0.7 key names; uncomment a line to change it. Generated from mpbroker/config/keys.py.",
        "# The later Kafka names noted below are read as the 0.7 key (set only one of the two).",
        "# An unknown key refuses to start, unless allow.unknown.keys=true (mpbroker serve --allow-unknown-keys).",
        "",
    ]
    for key in KEYS:
        if key.default_from:
            default = f"(the value of {key.default_from})"
        elif callable(key.default):
            default = "(computed at start-up)"
        else:
            default = key.default
        later = ALIASES_OF.get(key.name)
        lines.append(f"# {key.help}" + (f" (later Kafka: {', '.join(later)})" if later else ""))
        lines.append(f"#{key.name}={default}")
        lines.append("")
    return "\n".join(lines)
