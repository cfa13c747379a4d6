"""The java.util.Properties text format, and the two sources of properties text.

This module owns reading that format (``parse_properties``: comments, continuation
lines, escapes, later duplicates win), reading it from a file (``read_properties_file``)
and the ``key=value`` overrides of the command line (``parse_overrides``). It knows
nothing of which keys exist or what their values mean: that is ``mpbroker.config.keys``
and ``mpbroker.config.values``; the result is a plain ``dict[str, str]``.
"""

import re

from mpbroker.config.errors import ConfigError

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


def read_properties_file(path: str) -> dict[str, str]:
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


def parse_overrides(overrides) -> dict[str, str]:
    """``["port=9093", ...]`` -> ``{"port": "9093", ...}``; the value is taken literally."""
    parsed = {}
    for override in overrides:
        name, equals, value = override.partition("=")
        if not equals or not name.strip():
            raise ConfigError(f"override {override!r} is not of the form key=value")
        parsed[name.strip()] = value
    return parsed
