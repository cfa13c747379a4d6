"""Per-topic settings a modern client gave a topic (CreateTopics), kept in ``log.dir``.

    <log.dir>/topic-configs/<topic>.json    {"partitions": N, "configs": {"retention.ms": "86400000", ...}}

Written atomically and durably (``replace_file``) before the topic's first partition
log is made; read by the workers (the topic's ``LogConfig`` is the broker's with these
applied) and by the acceptor (the partition count, DescribeConfigs). The keys are
Kafka's topic-level names; those a log here can honour are in ``LOG_KEYS``, checked
when the topic is created (``check``). A topic without a file runs on the broker's
settings alone, as every 0.7 topic does.

Standalone, CreateTopics writes the file once. With ZooKeeper the shared copy is
Kafka's ``/config/topics/<topic>`` (``registry.topic_config_nodes``) and the file is
its mirror, without ``partitions`` (a replicated topic's count is its assignment's):
the registrar writes it before this broker takes any role in the topic, and again
whenever the node changes (``registrar.topic_settings``).
"""

import dataclasses
import json
import os

from mpbroker.codec.errors import InvalidTopicError, StorageError
from mpbroker.codec.topic_names import check_topic
from mpbroker.segments.durability import replace_file
from mpbroker.segments.log_config import LogConfig

DIRECTORY = "topic-configs"

# Kafka's topic-level keys that map onto a LogConfig field.
LOG_KEYS = {
    "segment.bytes": "segment_bytes",
    "segment.ms": "roll_ms",
    "retention.ms": "retention_ms",
    "retention.bytes": "retention_bytes",
    "max.message.bytes": "max_message_size",
    "flush.messages": "flush_interval_messages",
    "flush.ms": "flush_interval_ms",
}
# Kafka's topic-level keys taken with a fixed meaning here.
OTHER_KEYS = {
    "min.insync.replicas": ("a number >= 1", lambda value: int(value) >= 1),
    "message.timestamp.type": ("CreateTime or LogAppendTime", lambda value: value in ("CreateTime", "LogAppendTime")),
    "cleanup.policy": ("delete (compaction is not done here)", lambda value: value == "delete"),
    "compression.type": ("producer (batches are stored as they come)", lambda value: value == "producer"),
}


class TopicConfigError(ValueError):
    """A topic-level key this broker does not know, or a value it cannot take."""


def check(configs: dict) -> dict:
    """``configs`` (name -> text) if every key is known and every value usable, else
    TopicConfigError naming the first that is not."""
    for name, value in configs.items():
        if value is None:
            raise TopicConfigError(f"{name}: no value")
        if name in LOG_KEYS:
            try:
                number = int(value)
            except ValueError:
                raise TopicConfigError(f"{name}: {value!r} is not a whole number") from None
            try:
                dataclasses.replace(LogConfig(), **{LOG_KEYS[name]: number})
            except ValueError as exc:
                raise TopicConfigError(f"{name}: {exc}") from None
        elif name in OTHER_KEYS:
            what, usable = OTHER_KEYS[name]
            try:
                ok = usable(value)
            except ValueError:
                ok = False
            if not ok:
                raise TopicConfigError(f"{name}: {value!r} is not {what}")
        else:
            raise TopicConfigError(f"{name}: not a topic-level setting this broker knows "
                                   f"({', '.join(sorted([*LOG_KEYS, *OTHER_KEYS]))})")
    return configs


def usable(configs: dict) -> tuple:
    """``(the settings check takes, {name: why not} for the others)``: settings read from
    elsewhere (ZooKeeper) are taken one by one, so one bad value loses only itself."""
    kept, refused = {}, {}
    for name, value in configs.items():
        try:
            check({name: value})
        except TopicConfigError as exc:
            refused[name] = str(exc)
        else:
            kept[name] = value
    return kept, refused


def path(log_dir: str, topic: str) -> str:
    return os.path.join(log_dir, DIRECTORY, f"{check_topic(topic)}.json")


def write(log_dir: str, topic: str, partitions: int | None, configs: dict) -> None:
    """Replace the topic's file (``partitions`` None: a replicated topic's mirror, no count)."""
    os.makedirs(os.path.join(log_dir, DIRECTORY), exist_ok=True)
    document = {"configs": configs} if partitions is None else {"partitions": partitions, "configs": configs}
    replace_file(path(log_dir, topic), json.dumps(document, sort_keys=True).encode())


def read(log_dir: str, topic: str):
    """``{"partitions": N, "configs": {...}}`` or None for a topic with no file (a name
    that breaks the topic rule has none). A topic without a file costs a ``stat`` and no
    file descriptor (a worker out of them still opens its logs' settings); a file that
    cannot be read is a StorageError."""
    try:
        where = path(log_dir, topic)
    except InvalidTopicError:
        return None
    if not os.path.exists(where):
        return None
    try:
        with open(where, "rb") as f:
            document = json.loads(f.read())
    except FileNotFoundError:
        return None
    except ValueError:
        return None
    except OSError as exc:
        raise StorageError(f"cannot read the topic's settings {where}: {exc.strerror or exc}") from exc
    if not isinstance(document, dict) or not isinstance(document.get("configs"), dict):
        return None
    return document


def applied(log_config: LogConfig, configs: dict) -> LogConfig:
    """``log_config`` with the topic's own log settings."""
    changes = {LOG_KEYS[name]: int(value) for name, value in configs.items() if name in LOG_KEYS}
    if "min.insync.replicas" in configs:
        changes["min_insync_replicas"] = int(configs["min.insync.replicas"])
    if "message.timestamp.type" in configs:
        changes["log_append_time"] = configs["message.timestamp.type"] == "LogAppendTime"
    return dataclasses.replace(log_config, **changes) if changes else log_config
