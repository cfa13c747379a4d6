"""The broker's configuration as one typed, validated object, and how it is loaded.

This module owns ``BrokerConfig`` (every key of ``KEYS`` as an attribute, validated as a
whole; the per-topic settings ``partitions_for`` and ``log_config_for``) and building it:
from a dict of properties (``config_from_properties``) or a file with ``--override``
options on top (``load_config``). That is where the later Kafka names are read as their
0.7 keys, an unknown key is refused with the closest known name (unless
``allow.unknown.keys``) and ignored keys become warnings. ``setting_from_file`` and
``control_socket_from_file`` read one key without validating the rest, for
``mpbroker-ctl``.
"""

import difflib
import os
from dataclasses import dataclass, fields

from mpbroker.config.errors import ConfigError
from mpbroker.config.keys import ALIASES, ALIASES_OF, CONTROL_SOCKET_NAME, IGNORED_KEYS, KEYS, KEYS_BY_NAME, Key
from mpbroker.config.properties import parse_overrides, read_properties_file
from mpbroker.config.values import check_value, format_value, group_id, parse_bool, parse_value
from mpbroker.segments.log_config import HOUR_MS, LogConfig

# --------------------------------------------------------------------------------------
# The later Kafka names of the 0.7 keys
# --------------------------------------------------------------------------------------


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
# The configuration
# --------------------------------------------------------------------------------------


def _check_zookeeper(config: "BrokerConfig") -> None:
    if config.enable_zookeeper and not config.zk_connect:
        raise ConfigError(
            f"zk.connect: {config.zk_connect!r} is empty, but enable.zookeeper is true; "
            "expected a connect string like host:2181"
        )


@dataclass(frozen=True)
class BrokerConfig:
    """Every key of ``KEYS`` as a typed, validated attribute (``log.dir`` -> ``log_dir``).

    Build it with ``config_from_properties`` or ``load_config``; constructing it
    directly (or with ``dataclasses.replace``) validates the values just the same.
    """

    brokerid: int
    hostname: str
    port: int
    kafka_port: int
    advertised_host_name: str
    advertised_port: int
    auto_create_topics_enable: bool
    message_timestamp_type: str
    offsets_topic_num_partitions: int
    offsets_topic_replication_factor: int
    offsets_topic_segment_bytes: int
    group_initial_rebalance_delay_ms: int
    group_min_session_timeout_ms: int
    group_max_session_timeout_ms: int
    group_max_size: int
    offset_metadata_max_bytes: int
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
    unclean_leader_election_enable: bool
    default_replication_factor: int
    min_insync_replicas: int
    replica_lag_time_max_ms: int
    replica_fetch_max_bytes: int
    num_replica_fetchers: int
    controller_socket_timeout_ms: int
    num_workers: int
    ring_buffer_bytes: int
    busy_poll_us: int
    sched_batch: bool
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
            check_value(key, value)
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
            min_insync_replicas=self.min_insync_replicas,
            log_append_time=self.message_timestamp_type == "LOGAPPENDTIME",
        )

    @property
    def control_socket_path(self) -> str:
        return self.control_socket or os.path.join(self.log_dir, CONTROL_SOCKET_NAME)

    def as_properties(self) -> dict[str, str]:
        """Every key, in ``KEYS`` order, with its effective value in properties syntax."""
        return {key.name: format_value(key, getattr(self, key.attribute)) for key in KEYS}

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
    allow_unknown = parse_bool(props.get("allow.unknown.keys", "false").strip(), "allow.unknown.keys")
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
            values[key.name] = parse_value(key, key.default_text())
    config = BrokerConfig(**{KEYS_BY_NAME[name].attribute: value for name, value in values.items()})
    return config, _warnings_for(props, origins, written_as)


def _parsed_as_written(key: Key, raw: str, alias: str | None):
    """The typed value of one key; a key set under its later name is checked at once, so
    the refusal names the key as the file wrote it."""
    if alias is None:
        return parse_value(key, raw)
    try:
        value = parse_value(key, raw)
        check_value(key, value)
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
    from_file, file_written_as = _canonical(read_properties_file(path), file_origin)
    from_overrides, override_written_as = _canonical(parse_overrides(overrides), override_origin)
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
    sources = [("--override", parse_overrides(overrides))]
    if path is not None:
        sources.append((path, read_properties_file(path)))
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


def _check_registry_matches_fields() -> None:
    attributes = tuple(key.attribute for key in KEYS)
    field_names = tuple(field.name for field in fields(BrokerConfig))
    if attributes != field_names:
        raise AssertionError(f"KEYS and BrokerConfig disagree: {set(attributes) ^ set(field_names)}")


_check_registry_matches_fields()
