"""The ZooKeeper layout of topic-level settings (Kafka's, from 0.8.1): one node per
topic, beside its assignment. No I/O here: the topics tool and the registrars build the
path and read and write the value with these (``topic_admin`` does the I/O).

    /config/topics/<topic>      {"version":1,"config":{"retention.ms":"86400000",...}}

The keys are Kafka's topic-level names and every value is a string, as Kafka wrote
them; which keys and values a broker takes is the log's business
(``segments.topic_configs.check``), not the layout's. A topic created with the
settings has the node written in the same ZooKeeper transaction as its assignment, so
no broker sees the assignment without the settings. A replicated topic without the
node (created before it existed, or by hand) has no settings of its own.
"""

import json

from mpbroker.codec.topic_names import check_topic
from mpbroker.registry.layout import LayoutError

CONFIG = "/config"
CONFIG_TOPICS = "/config/topics"
VERSION = 1


def config_path(topic: str) -> str:
    return f"{CONFIG_TOPICS}/{check_topic(topic)}"


def config_value(configs: dict) -> bytes:
    """``{name: value}`` as the node value (every value as text)."""
    document = {"version": VERSION, "config": {str(name): str(value) for name, value in sorted(configs.items())}}
    return json.dumps(document, separators=(",", ":")).encode()


def parse_config(topic: str, value: bytes) -> dict:
    """The settings ``{name: value text}`` in a topic's config node (an empty value: none).
    LayoutError if it is not such a document."""
    if not value:
        return {}
    try:
        document = json.loads(value)
        configs = document["config"]
        if not isinstance(configs, dict):
            raise TypeError
    except (ValueError, TypeError, KeyError):
        raise LayoutError(f"{config_path(topic)}: {value[:200]!r} is not a topic's settings") from None
    if not all(isinstance(name, str) and isinstance(text, (str, int)) and not isinstance(text, bool)
               for name, text in configs.items()):
        raise LayoutError(f"{config_path(topic)}: {value[:200]!r} holds a setting that is not text")
    return {name: str(text) for name, text in configs.items()}


def topic_of(path: str):
    """The topic a config node's path names (a watch's event), or None."""
    parent, _, name = path.rpartition("/")
    return name if parent.endswith(CONFIG_TOPICS) and name else None
