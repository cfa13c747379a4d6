"""Which format a partition log holds, and how recovery checks it.

A log holds either 0.7 messages (every log written before the modern protocol, and
every topic 0.7 clients create) or modern record batches (magic 2, the topics modern
clients create), never both: a partition's format is fixed when its directory is
made. The record-batch format is marked by an empty file, ``record-batches``, written
and synced into the directory before its first segment, so that the format survives
every restart and recovery walks the segments with the right rules. Offsets stay byte
positions in both (ARCHITECTURE.md, "Modern offsets").
"""

import os

from mpbroker.codec.message_set import validate_message_set
from mpbroker.records.scan import valid_batches_prefix
from mpbroker.segments.durability import sync_directory
from mpbroker.segments.naming import RECORD_BATCHES_FILE

_UNLIMITED = 1 << 62


def holds_record_batches(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, RECORD_BATCHES_FILE))


def mark_record_batches(directory: str) -> None:
    """Mark a new, empty partition directory as holding record batches (synced)."""
    fd = os.open(os.path.join(directory, RECORD_BATCHES_FILE), os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    sync_directory(directory)


def valid_prefix(view, record_batches: bool) -> int:
    """How many leading bytes of ``view`` (from a message or batch start) are whole,
    checksum-valid messages or batches. Shallow: a batch's or wrapper's CRC covers its
    compressed bytes, which is what a torn write damages."""
    if record_batches:
        return valid_batches_prefix(view)
    return validate_message_set(view, _UNLIMITED, deep=False).valid_bytes
