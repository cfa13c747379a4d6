"""The topic-name rule, shared by the broker, the clients and the tools.

A topic name becomes a directory name on the broker (``<topic>-<partition>``), so it is
held to ``[A-Za-z0-9._-]{1,249}`` and may not be ``.`` or ``..``. 249 (the limit later
Kafka chose) leaves room for ``-<partition>`` within a file name's 255 bytes for
partitions below 100000. Clients check a name before sending it, so a bad name is an
error at the caller rather than a refused request.
"""

import re

from mpbroker.codec.errors import InvalidTopicError

MAX_TOPIC_LENGTH = 249
_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}\Z")


def check_topic(topic) -> str:
    """Return ``topic`` as ``str`` if it is a legal topic name, else raise InvalidTopicError."""
    if isinstance(topic, (bytes, bytearray, memoryview)):
        try:
            topic = bytes(topic).decode("ascii")
        except UnicodeDecodeError:
            raise InvalidTopicError(f"topic name {bytes(topic)[:64]!r} is not ASCII") from None
    if not isinstance(topic, str) or not _TOPIC_RE.match(topic) or topic in (".", ".."):
        shown = topic[:64] + "..." if isinstance(topic, str) and len(topic) > 64 else topic
        raise InvalidTopicError(
            f"illegal topic name {shown!r}: use 1-{MAX_TOPIC_LENGTH} characters from [A-Za-z0-9._-], "
            "not '.' or '..'"
        )
    return topic
