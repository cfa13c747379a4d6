"""The broker's configuration: a Java-properties file with Kafka 0.7 key names.

This module owns the reading of that file (``parse_properties``), the registry of
every key mpbroker understands (``KEYS``, with type, default, limits and one line of
help), the typed and validated result (``BrokerConfig``) and the per-topic settings
derived from it (``partitions_for``, ``log_config_for``). Every refusal is a
``ConfigError`` naming the key, the bad value and what was expected. The later Kafka
(0.8+) names of the 0.7 keys are read as those keys (``ALIASES``); an unknown key is
refused with the closest known name, unless ``allow.unknown.keys`` (``mpbroker serve
--allow-unknown-keys``) turns that into a warning; keys known from Kafka 0.7 but
without effect here (``IGNORED_KEYS``) only produce warnings.
"""

import difflib
import grp
import os
import re
from dataclasses import dataclass, fields
from typing import Callable

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.segments.log_config import HOUR_MS, LogConfig

MAX_WORKERS = 256
CONTROL_SOCKET_NAME = "mpbroker.sock"


class ConfigError(ValueError):
    """The configuration was refused; the message names the key, value and expectation."""


# --------------------------------------------------------------------------------------
# The java.util.Properties text format
# --------------------------------------------------------------------------------------

_LINE_BREAK = re.compile(r"\r\n|\r|\n")
_BLANKS = " \t\f"
_SEPARATORS = "=:"
_SIMPLE_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def parse_properties(text: str) -> dict[str, str]:
    """The key/value pairs of java.util.Properties text; later duplicates win."""
    properties = {}
    for line_number, line in _logical_lines(text.removeprefix("\ufeff")):
        raw_key, raw_value = _split_key_value(line)
        properties[_unescape(raw_key, line_number)] = _unescape(raw_value, line_number)
    return properties


def _logical_lines(text: str):
    """``(line number, logical line)`` with comments and blank lines dropped and
    backslash-continued lines joined (escapes are still in place)."""
    natural_lines = _LINE_BREAK.split(text)
    index = 0
    while index < len(natural_lines):
        line_number = index + 1
        line = natural_lines[index].lstrip(_BLANKS)
        index += 1
        if not line or line[0] in "#!":
            continue
        while _continues(line):
            line = line[:-1]
            if index == len(natural_lines):
                break
            line += natural_lines[index].lstrip(_BLANKS)
            index += 1
        yield line_number, line


def _continues(line: str) -> bool:
    """A line continues on the next one if it ends in an odd number of backslashes."""
    trailing = len(line) - len(line.rstrip("\\"))
    return trailing % 2 == 1


def _split_key_value(line: str) -> tuple[str, str]:
    """Split at the first unescaped ``=``, ``:`` or blank; blanks around it are dropped."""
    end = 0
    while end < len(line) and line[end] not in _SEPARATORS and line[end] not in _BLANKS:
        end += 2 if line[end] == "\\" else 1
    key, rest = line[:end], line[end:].lstrip(_BLANKS)
    if rest and rest[0] in _SEPARATORS:
        rest = rest[1:].lstrip(_BLANKS)
    return key, rest


def _unescape(text: str, line_number: int) -> str:
    out = []
    index = 0
    while index < len(text):
        char = text[index]
        index += 1
        if char != "\\":
            out.append(char)
        elif index < len(text):
            escaped = text[index]
            index += 1
            if escaped == "u":
                out.append(_unicode_escape(text[index:index + 4], line_number))
                index += 4
            else:
                out.append(_SIMPLE_ESCAPES.get(escaped, escaped))
    return _join_surrogate_pairs("".join(out))


def _unicode_escape(digits: str, line_number: int) -> str:
    if len(digits) != 4 or any(digit not in "0123456789abcdefABCDEF" for digit in digits):
        raise ConfigError(f"line {line_number}: malformed escape '\\u{digits}', expected \\u and 4 hex digits")
    return chr(int(digits, 16))


def _join_surrogate_pairs(text: str) -> str:
    """``\\uD83D\\uDE00`` is one character, as it is in Java."""
    try:
        return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
    except UnicodeDecodeError:  # a lone surrogate: keep it as written
        return text


# --------------------------------------------------------------------------------------
# The registry of keys
# --------------------------------------------------------------------------------------


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
    Key("num.workers", "int", _cpu_count_default,
        f"worker processes serving requests (default: the number of CPUs, at most {MAX_WORKERS})",
        minimum=1, maximum=MAX_WORKERS),
    Key("ring.buffer.bytes", "int", "8388608", "size of each shared-memory ring, a power of two", minimum=65536,
        power_of_two=True),
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


def _alias_value(alias: str, value: str) -> str:
    """The value of a later-Kafka key as its 0.7 key takes it."""
    if alias == "log.dirs":
        directories = [part.strip() for part in value.split(",") if part.strip()]
        if len(directories) > 1:
            raise ConfigError(f"log.dirs: {value.strip()!r} names {len(directories)} directories, but mpbroker "
                              "keeps every partition under one directory: give one (log.dir)")
        return directories[0] if directories else ""
    return value


def _canonical(props: dict[str, str], origin: str | None) -> tuple[dict[str, str], dict[str, str]]:
    """``props`` with every later-Kafka name replaced by its 0.7 key, and which keys were
    written under which later name. A key set under both names in one source is refused."""
    for alias, target in ALIASES.items():
        if alias in props and target in props:
            raise ConfigError(f"{alias} and {target} are both set{_where(origin)}: {alias} is the later Kafka "
                              f"name of {target}; keep one of them")
    canonical, written_as = {}, {}
    for name, value in props.items():
        target = ALIASES.get(name)
        if target is None:
            canonical[name] = value
        else:
            canonical[target] = _alias_value(name, value)
            written_as[target] = name
    return canonical, written_as


def _where(origin: str | None) -> str:
    return f" {origin}" if origin else ""


# --------------------------------------------------------------------------------------
# From strings to typed values
# --------------------------------------------------------------------------------------

_INTEGER = re.compile(r"[+-]?[0-9]+\Z")
_BOOLEANS = {"true": True, "yes": True, "1": True, "false": False, "no": False, "0": False}


def _parse_int(text: str, where: str) -> int:
    if not _INTEGER.match(text):
        raise ConfigError(f"{where} is not an integer")
    try:
        return int(text)
    except ValueError:  # more digits than int() converts
        raise ConfigError(f"{where} is not an integer of a sensible size") from None


def _parse_bool(text: str, key_name: str) -> bool:
    try:
        return _BOOLEANS[text.lower()]
    except KeyError:
        raise ConfigError(f"{key_name}: {text!r} is not a boolean, expected true/false/yes/no/1/0") from None


def _parse_map(text: str, key_name: str) -> dict[str, int]:
    """``topic1:8, topic2:16`` -> ``{"topic1": 8, "topic2": 16}``; empty text is an empty map."""
    mapping = {}
    if not text:
        return mapping
    for item in (part.strip() for part in text.split(",")):
        topic, colon, number = (part.strip() for part in item.partition(":"))
        if not colon or not topic or ":" in number:
            raise ConfigError(f"{key_name}: item {item!r} is malformed, expected topic:number")
        if topic in mapping:
            raise ConfigError(f"{key_name}: topic {topic!r} is listed twice")
        mapping[topic] = _parse_int(number, f"{key_name}: {number!r} for topic {topic!r}")
    return mapping


def _parse_value(key: Key, raw: str):
    text = raw.strip()
    if key.kind == "int":
        return _parse_int(text, f"{key.name}: {text!r}")
    if key.kind == "bool":
        return _parse_bool(text, key.name)
    if key.kind == "map":
        return _parse_map(text, key.name)
    return text.upper() if key.choices else text


def _format_value(key: Key, value) -> str:
    if key.kind == "bool":
        return "true" if value else "false"
    if key.kind == "map":
        return ",".join(f"{topic}:{number}" for topic, number in value.items())
    return str(value)


# --------------------------------------------------------------------------------------
# Checking typed values
# --------------------------------------------------------------------------------------


def _check_value(key: Key, value) -> None:
    if key.kind == "int":
        _check_type(key, value, int)
        _check_number(key, value)
    elif key.kind == "bool":
        _check_type(key, value, bool)
    elif key.kind == "map":
        _check_type(key, value, dict)
        for topic, number in value.items():
            _check_map_topic(key, topic)
            _check_type(key, number, int)
            _check_number(key, number, f" for topic {topic!r}")
    else:
        _check_type(key, value, str)
        _check_text(key, value)


def _check_type(key: Key, value, expected: type) -> None:
    if not isinstance(value, expected) or (expected is int and isinstance(value, bool)):
        raise ConfigError(f"{key.name}: {value!r} is not of type {expected.__name__}")


def _check_number(key: Key, number: int, context: str = "") -> None:
    if number == key.also_allowed:
        return
    alternative = f" and is not {key.also_allowed}" if key.also_allowed is not None else ""
    if key.minimum is not None and number < key.minimum:
        raise ConfigError(f"{key.name}: {number}{context} is below the minimum {key.minimum}{alternative}")
    if key.maximum is not None and number > key.maximum:
        raise ConfigError(f"{key.name}: {number}{context} is above the maximum {key.maximum}{alternative}")
    if key.power_of_two and number & (number - 1):
        raise ConfigError(f"{key.name}: {number}{context} is not a power of two")


def _check_map_topic(key: Key, topic) -> None:
    try:
        check_topic(topic)
    except InvalidTopicError as error:
        raise ConfigError(f"{key.name}: {error}") from None


def _check_text(key: Key, text: str) -> None:
    if key.non_empty and not text:
        raise ConfigError(f"{key.name}: {text!r} is empty, expected a non-empty value")
    if key.choices and text not in key.choices:
        raise ConfigError(f"{key.name}: {text!r} is not one of {', '.join(key.choices)}")


def _check_zookeeper(config: "BrokerConfig") -> None:
    if config.enable_zookeeper and not config.zk_connect:
        raise ConfigError(
            f"zk.connect: {config.zk_connect!r} is empty, but enable.zookeeper is true; "
            "expected a connect string like host:2181"
        )


def group_id(group: str) -> int:
    """The id of a group given by number or by name; ConfigError for a name that is
    not a group here (a number is taken as it is, like chgrp does)."""
    if group.isdigit() and int(group) < 0xFFFFFFFF:
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ConfigError(f"control.socket.group: {group!r} is not a group on this machine") from None


# --------------------------------------------------------------------------------------
# The configuration
# --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class BrokerConfig:
    """Every key of ``KEYS`` as a typed, validated attribute (``log.dir`` -> ``log_dir``).

    Build it with ``config_from_properties`` or ``load_config``; constructing it
    directly (or with ``dataclasses.replace``) validates the values just the same.
    """

    brokerid: int
    hostname: str
    port: int
    log_dir: str
    num_partitions: int
    topic_partition_count_map: dict[str, int]
    log_file_size: int
    log_roll_hours: int
    log_flush_interval: int
    topic_log_flush_interval: dict[str, int]
    log_default_flush_scheduler_interval_ms: int
    log_default_flush_interval_ms: int
    topic_flush_intervals_ms: dict[str, int]
    log_retention_hours: int
    topic_log_retention_hours: dict[str, int]
    log_retention_size: int
    log_cleanup_interval_mins: int
    log_flush_offset_checkpoint_interval_ms: int
    max_message_size: int
    max_socket_request_bytes: int
    max_inflated_request_bytes: int
    max_connections: int
    max_connections_per_ip: int
    request_receive_timeout_ms: int
    connections_max_idle_ms: int
    max_queued_responses: int
    enable_zookeeper: bool
    zk_connect: str
    zk_connectiontimeout_ms: int
    zk_sessiontimeout_ms: int
    num_workers: int
    ring_buffer_bytes: int
    worker_heartbeat_timeout_ms: int
    control_socket: str
    control_socket_group: str
    allow_unknown_keys: bool
    log_level: str
    metrics_enable: bool
    metrics_host: str
    metrics_port: int

    def __post_init__(self):
        for key in KEYS:
            value = getattr(self, key.attribute)
            _check_value(key, value)
            if key.kind == "map":  # a copy, so the caller's dict cannot change the config
                object.__setattr__(self, key.attribute, dict(value))
        _check_zookeeper(self)
        if self.control_socket_group:
            group_id(self.control_socket_group)

    def partitions_for(self, topic: str) -> int:
        return self.topic_partition_count_map.get(topic, self.num_partitions)

    def log_config_for(self, topic: str) -> LogConfig:
        retention_hours = self.topic_log_retention_hours.get(topic, self.log_retention_hours)
        return LogConfig(
            segment_bytes=self.log_file_size,
            roll_ms=self.log_roll_hours * HOUR_MS,
            flush_interval_messages=self.topic_log_flush_interval.get(topic, self.log_flush_interval),
            flush_interval_ms=self.topic_flush_intervals_ms.get(topic, self.log_default_flush_interval_ms),
            retention_ms=retention_hours * HOUR_MS,
            retention_bytes=self.log_retention_size,
            max_message_size=self.max_message_size,
        )

    @property
    def control_socket_path(self) -> str:
        return self.control_socket or os.path.join(self.log_dir, CONTROL_SOCKET_NAME)

    def as_properties(self) -> dict[str, str]:
        """Every key, in ``KEYS`` order, with its effective value in properties syntax."""
        return {key.name: _format_value(key, getattr(self, key.attribute)) for key in KEYS}

    def with_overrides(self, overrides: dict[str, str]) -> "BrokerConfig":
        """A copy with some keys set from strings, validated as a whole. It starts
        from the effective values, so a derived default (log.default.flush.interval.ms)
        keeps its value unless it is overridden too. Keys that would only be warned
        about are refused, as there is no way to return the warning."""
        for name in overrides:
            if name not in KEYS_BY_NAME:
                raise ConfigError(f"{name}: unknown configuration key, cannot override it")
        config, _ = config_from_properties({**self.as_properties(), **overrides})
        return config


def config_from_properties(props: dict[str, str]) -> tuple[BrokerConfig, list[str]]:
    """The validated configuration and a warning for each ignored key. Later Kafka names
    are read as their 0.7 keys; an unknown key is refused unless allow.unknown.keys is
    true (then it is warned about)."""
    canonical, written_as = _canonical(props, None)
    return _build(canonical, {}, written_as)


def _build(props: dict[str, str], origins: dict[str, str], written_as: dict[str, str]):
    """``props`` has 0.7 names only; ``origins`` says where a key was set (for messages),
    ``written_as`` under which later name."""
    allow_unknown = _parse_bool(props.get("allow.unknown.keys", "false").strip(), "allow.unknown.keys")
    unknown = [name for name in props if name not in KEYS_BY_NAME and name not in IGNORED_KEYS]
    if unknown and not allow_unknown:
        raise ConfigError(_unknown_keys_message(unknown, origins))
    values = {}
    for key in KEYS:
        if key.name in props:
            values[key.name] = _parsed_as_written(key, props[key.name], written_as.get(key.name))
        elif key.default_from is not None:
            values[key.name] = values[key.default_from]
        else:
            values[key.name] = _parse_value(key, key.default_text())
    config = BrokerConfig(**{KEYS_BY_NAME[name].attribute: value for name, value in values.items()})
    return config, _warnings_for(props, origins, written_as)


def _parsed_as_written(key: Key, raw: str, alias: str | None):
    """The typed value of one key; a key set under its later name is checked at once, so
    the refusal names the key as the file wrote it."""
    if alias is None:
        return _parse_value(key, raw)
    try:
        value = _parse_value(key, raw)
        _check_value(key, value)
    except ConfigError as error:
        message = str(error)
        if message.startswith(f"{key.name}:"):
            message = f"{alias} (mpbroker's {key.name}):{message[len(key.name) + 1:]}"
        raise ConfigError(message) from None
    return value


def _unknown_keys_message(unknown: list[str], origins: dict[str, str]) -> str:
    candidates = list(KEYS_BY_NAME) + list(ALIASES) + list(IGNORED_KEYS)
    described = []
    for name in unknown:
        close = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
        guess = f" (did you mean {close[0]!r}?)" if close else ""
        described.append(f"{name!r}{_where(origins.get(name))}{guess}")
    plural = "s" if len(unknown) > 1 else ""
    return (f"unknown configuration key{plural} {', '.join(described)}: fix {'them' if plural else 'it'}, "
            "or let mpbroker ignore unknown keys with mpbroker serve --allow-unknown-keys "
            "(or allow.unknown.keys=true)")


def _warnings_for(props: dict[str, str], origins: dict[str, str], written_as: dict[str, str]) -> list[str]:
    warnings = []
    for name in props:
        if name in IGNORED_KEYS:
            warnings.append(f"configuration key {written_as.get(name, name)!r} ignored: {IGNORED_KEYS[name]}")
        elif name not in KEYS_BY_NAME:
            warnings.append(f"unknown configuration key {name!r}{_where(origins.get(name))} ignored "
                            "(allow.unknown.keys is true)")
    return warnings


def load_config(path: str, overrides: list[str] = ()) -> tuple[BrokerConfig, list[str]]:
    """Read a properties file, apply ``key=value`` overrides on top, validate. A key set
    in the file under one name and overridden under the other takes the override."""
    file_origin, override_origin = f"in {path}", "in the --override options"
    from_file, file_written_as = _canonical(_read_properties_file(path), file_origin)
    from_overrides, override_written_as = _canonical(_parse_overrides(overrides), override_origin)
    props = {**from_file, **from_overrides}
    origins = {**{name: file_origin for name in from_file}, **{name: override_origin for name in from_overrides}}
    written_as = {name: alias for name, alias in file_written_as.items() if name not in from_overrides}
    written_as.update(override_written_as)
    return _build(props, origins, written_as)


def setting_from_file(path: str | None, key: str, overrides=()) -> tuple[str, str]:
    """One key's raw value (stripped; its default if unset), from the overrides, else the
    configuration file (None: no file), under its 0.7 name or a later one, and where it
    came from ("--override", the file's path or "default"). Nothing else is validated:
    ``mpbroker-ctl`` must work even when other keys of the file are broken (for instance
    to see a failed reload's error)."""
    sources = [("--override", _parse_overrides(overrides))]
    if path is not None:
        sources.append((path, _read_properties_file(path)))
    for origin, props in sources:
        if key in props:
            return props[key].strip(), origin
        for alias in ALIASES_OF.get(key, ()):
            if alias in props:
                return _alias_value(alias, props[alias]).strip(), origin
    return (KEYS_BY_NAME[key].default_text() or "").strip(), "default"


def value_from_file(path: str | None, key: str, overrides=()) -> str:
    """``setting_from_file`` without where the value came from."""
    return setting_from_file(path, key, overrides)[0]


def control_socket_from_file(path: str | None, overrides=()) -> str:
    """The control socket a configuration file points at (``control.socket``, else
    ``log.dir``'s default socket)."""
    explicit = value_from_file(path, "control.socket", overrides)
    if explicit:
        return explicit
    return os.path.join(value_from_file(path, "log.dir", overrides), CONTROL_SOCKET_NAME)


def render_properties() -> str:
    """An example configuration: every key, commented out at its default, with its help
    line (``ops/server.properties`` is this text; a test keeps the two equal)."""
    lines = [
        "# mpbroker configuration: every key with its default and what it does.",
        "# Kafka 0.7 key names; uncomment a line to change it. Generated from mpbroker/config.py.",
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


def _read_properties_file(path: str) -> dict[str, str]:
    try:
        with open(path, encoding="utf-8") as file:
            text = file.read()
    except OSError as error:
        raise ConfigError(f"cannot read configuration file {path!r}: {error.strerror or error}") from None
    except UnicodeDecodeError as error:
        raise ConfigError(f"configuration file {path!r} is not UTF-8 text: {error.reason}") from None
    try:
        return parse_properties(text)
    except ConfigError as error:
        raise ConfigError(f"configuration file {path!r}, {error}") from None


def _parse_overrides(overrides) -> dict[str, str]:
    """``["port=9093", ...]`` -> ``{"port": "9093", ...}``; the value is taken literally."""
    parsed = {}
    for override in overrides:
        name, equals, value = override.partition("=")
        if not equals or not name.strip():
            raise ConfigError(f"override {override!r} is not of the form key=value")
        parsed[name.strip()] = value
    return parsed


def _check_registry_matches_fields() -> None:
    attributes = tuple(key.attribute for key in KEYS)
    field_names = tuple(field.name for field in fields(BrokerConfig))
    if attributes != field_names:
        raise AssertionError(f"KEYS and BrokerConfig disagree: {set(attributes) ^ set(field_names)}")


_check_registry_matches_fields()
