"""From the strings of a properties file to typed values, and the checks of those values.

This module owns the value syntax of each kind of key (``int``, ``bool``, ``str`` and
``topic:number`` maps: ``parse_value``, and back: ``format_value``) and the checks of a
typed value against its ``Key`` (type, limits, power of two, choices, valid topic names:
``check_value``), plus ``group_id`` for ``control.socket.group``. Each refusal is a
``ConfigError`` naming the key. Checks that involve several keys belong to
``BrokerConfig`` (``mpbroker.config.broker_config``).
"""

import grp
import re

from mpbroker.codec.errors import InvalidTopicError
from mpbroker.codec.topic_names import check_topic
from mpbroker.config.errors import ConfigError
from mpbroker.config.keys import Key

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


def parse_bool(text: str, key_name: str) -> bool:
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


def parse_value(key: Key, raw: str):
    text = raw.strip()
    if key.kind == "int":
        return _parse_int(text, f"{key.name}: {text!r}")
    if key.kind == "bool":
        return parse_bool(text, key.name)
    if key.kind == "map":
        return _parse_map(text, key.name)
    return text.upper() if key.choices else text


def format_value(key: Key, value) -> str:
    if key.kind == "bool":
        return "true" if value else "false"
    if key.kind == "map":
        return ",".join(f"{topic}:{number}" for topic, number in value.items())
    return str(value)


# --------------------------------------------------------------------------------------
# Checking typed values
# --------------------------------------------------------------------------------------


def check_value(key: Key, value) -> None:
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


def group_id(group: str) -> int:
    """The id of a group given by number or by name; ConfigError for a name that is
    not a group here (a number is taken as it is, like chgrp does)."""
    if group.isdigit() and int(group) < 0xFFFFFFFF:
        return int(group)
    try:
        return grp.getgrnam(group).gr_gid
    except KeyError:
        raise ConfigError(f"control.socket.group: {group!r} is not a group on this machine") from None
